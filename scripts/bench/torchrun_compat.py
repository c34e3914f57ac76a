#!/usr/bin/python3
"""torchrun for Debian's torch 1.13 on Python 3.11.

Usage: /usr/bin/python3 scripts/bench/torchrun_compat.py <torchrun args...>

torch 1.13's Std.from_str maps a digit to a Std member by iterating over the
IntFlag class. Since Python 3.11 that iteration yields only the canonical
single-bit members (OUT, ERR), so "0" (NONE) and "3" (ALL) come back as None
and torchrun crashes in to_map() even with the default --redirects 0. The
same happens to the values inside a per-rank map such as "0:3,1:0".

This wrapper replaces Std.from_str with a version that builds members with
Std(int(v)), then runs torch.distributed.run.main() unchanged.

Opt-in, for benchmarks on a shared machine: with TORCHRUN_COMPAT_FREE_PORT=1,
--standalone hosts its c10d store on a free port instead of the fixed 29400
(torch 1.13 hard-codes localhost:29400; when another torchrun already listens
there, this one quietly joins that process's store as a client).
"""
import re
import sys

from torch.distributed.elastic.multiprocessing import api as _mp_api

Std = _mp_api.Std
_original_from_str = Std.from_str  # bound classmethod


def _from_str(cls, vm):
    if re.fullmatch(r"\d", vm):
        return cls(int(vm))
    if re.match(_mp_api._MAPPING_REGEX, vm):
        # The original map parsing uses the same broken lookup for each value
        # (e.g. "1:3" would give {1: None}), so parse the map here too.
        out = {}
        for item in vm.split(","):
            i, v = item.split(":")
            out[int(i)] = cls(int(v))
        return out
    # Anything else: the original parser (raises ValueError for bad input).
    return _original_from_str(vm)


Std.from_str = classmethod(_from_str)


def _free_port_standalone():
    import os
    import socket

    import torch.distributed.run as run_mod

    if os.environ.get("TORCHRUN_COMPAT_FREE_PORT") != "1":
        return
    original = run_mod.config_from_args

    def config_from_args(args):
        if args.standalone:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            args.rdzv_endpoint = f"localhost:{port}"
        return original(args)

    run_mod.config_from_args = config_from_args


if __name__ == "__main__":
    from torch.distributed.run import main

    _free_port_standalone()
    sys.argv[0] = "torchrun"
    sys.exit(main())
