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

if __name__ == "__main__":
    from torch.distributed.run import main

    sys.argv[0] = "torchrun"
    sys.exit(main())
