"""torch's own NUMA binding rules (torch/numa/binding.py) over a fake /sys, for comparing dtlaunch with:
run with a python that has torch 2.x. Only the I/O is replaced: files under /sys are read from ROOT,
the device count and each device's PCI address come from the arguments (GPU i at 0000:(i+1):00.0,
as tests/helpers/fake_nvml.cc says) instead of CUDA, and the process's affinity is ALLOWED.

usage: python numa_oracle.py ROOT GPUS ALLOWED(cpulist) MODE [ROOT GPUS ALLOWED MODE ...]
prints, as JSON, one list per case: each device's cpulist, or "error: ..." (one torch import for all)."""
import builtins
import json
import os
import sys

from torch.numa import binding


def answer(root, gpus, allowed, mode):
    real_open, real_listdir = builtins.open, os.listdir

    def under_root(path):
        path = os.fspath(path)
        return root + path if path.startswith("/sys/") else path

    builtins.open = lambda path, *a, **k: real_open(under_root(path), *a, **k)
    os.listdir = lambda path=".": real_listdir(under_root(path))
    os.sched_getaffinity = lambda pid: binding._get_set_of_int_from_ranges_str(allowed)
    binding._get_device_count = lambda: gpus

    def numa_node(*, device_index):  # torch's body, with the address from the stand-in NVML
        with open(f"/sys/bus/pci/devices/0000:{device_index + 1:02x}:00.0/numa_node") as f:
            return max(int(f.read().strip()), 0)

    binding._get_numa_node_index_for_device_index = numa_node
    options = binding.NumaOptions(affinity_mode=binding.AffinityMode(mode))
    out = []
    try:
        for device in range(gpus):
            try:
                cpus = binding._get_logical_cpus_to_bind_to(device_index=device, numa_options=options)
                out.append(binding._get_ranges_str_from_ints(cpus) or "error: empty")
            except Exception as e:  # noqa: BLE001 - the oracle's failure is an answer too
                out.append(f"error: {type(e).__name__}: {e}")
    finally:
        builtins.open, os.listdir = real_open, real_listdir
    return out


def main():
    args = sys.argv[1:]
    cases = [args[i:i + 4] for i in range(0, len(args), 4)]
    print(json.dumps([answer(root, int(gpus), allowed, mode) for root, gpus, allowed, mode in cases]))


if __name__ == "__main__":
    main()
