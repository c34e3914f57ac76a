"""--numa_binding: each worker's Cpus_allowed_list (from its own /proc/self/status), with GPUs from the
stand-in NVML (GPU i at PCI 0000:(i+1):00.0) and, since this machine has one NUMA node and few CPUs,
a fake topology under DTL_TEST_SYSFS_ROOT (a test-only variable: a directory read in place of /).
Where torch's venv is present ($DTL_ACCELERATE_VENV, else ~/.cache/dtlaunch/venv-accelerate), each
answer is also compared with torch's own rules run over the same fake /sys (numa_oracle.py)."""
import glob
import json
import os
import re
import subprocess
import unittest

from common import FAKE_NVML, LaunchTest, main

VENV = os.environ.get("DTL_ACCELERATE_VENV", os.path.expanduser("~/.cache/dtlaunch/venv-accelerate"))
VENV_PYTHON = os.path.join(VENV, "bin", "python")
ORACLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "numa_oracle.py")

SHOW_CPUS = ["--no_python", "/bin/sh", "-c", "grep Cpus_allowed_list /proc/self/status"]


def write(root, path, text):
    full = os.path.join(root, path.lstrip("/"))
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as f:
        f.write(text + "\n")


def fake_topology(root, gpu_nodes, node_cpus, caches=None):
    """NUMA node n holds the CPUs in node_cpus[n] (cpulist strings), all on socket 0, each CPU its own
    physical core; GPU i's numa_node is gpu_nodes[i]; caches: the L3 groups (default: one per CPU)."""
    write(root, "/sys/devices/system/node/possible", f"0-{len(node_cpus) - 1}")
    cpus = []
    for n, cpulist in enumerate(node_cpus):
        write(root, f"/sys/devices/system/node/node{n}/cpulist", cpulist)
        cpus += [int(c) for c in cpulist.split(",") if c]
    for group in caches or [[c] for c in cpus]:
        for c in group:
            d = f"/sys/devices/system/cpu/cpu{c}"
            write(root, d + "/topology/thread_siblings_list", str(c))
            write(root, d + "/topology/physical_package_id", "0")
            write(root, d + "/cache/index3/type", "Unified")
            write(root, d + "/cache/index3/level", "3")
            write(root, d + "/cache/index3/shared_cpu_list", ",".join(map(str, group)))
    for i, node in enumerate(gpu_nodes):
        write(root, f"/sys/bus/pci/devices/0000:{i + 1:02x}:00.0/numa_node", str(node))


def cpulist(cpus):
    cpus, out = sorted(cpus), []
    for c in cpus:
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in out)


def torch_answers(cases):
    """For each (root, gpus, mode): {device: cpulist or 'error: ...'} by torch's rules (numa_oracle.py),
    for this process's CPUs."""
    args = [str(a) for root, gpus, mode in cases for a in (root, gpus, cpulist(os.sched_getaffinity(0)), mode)]
    r = subprocess.run([VENV_PYTHON, ORACLE, *args], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise AssertionError(f"numa_oracle.py failed:\n{r.stderr}")
    return [dict(enumerate(devices)) for devices in json.loads(r.stdout)]


def have_torch_venv():
    return os.path.exists(VENV_PYTHON) and bool(glob.glob(os.path.join(VENV, "lib/python*/site-packages/torch/numa")))


TWO_NODES = {"gpu_nodes": [0, 1], "node_cpus": ["0", "1"]}
ONE_NODE = {"gpu_nodes": [0, 0], "node_cpus": ["0,1"]}
# name: (topology, mode, Cpus_allowed_list by local rank), on CPUs 0 and 1
CASES = {
    "node": (TWO_NODES, "node", {0: "0", 1: "1"}),
    "socket": (TWO_NODES, "socket", {0: "0-1", 1: "0-1"}),
    "exclusive": (ONE_NODE, "exclusive", {0: "0", 1: "1"}),
    "core-complex": (ONE_NODE, "core-complex", {0: "0", 1: "1"}),
    "core-complex, one cache": (dict(ONE_NODE, caches=[[0, 1]]), "core-complex", {0: "0-1", 1: "0-1"}),
}


def cpus_by_rank(stdout):
    return {int(m.group(1)): m.group(2)
            for m in re.finditer(r"^\[\w*?(\d+)\]:Cpus_allowed_list:\s*(\S+)$", stdout, re.M)}


class NumaBinding(LaunchTest):
    def setUp(self):
        super().setUp()
        self.assertTrue(os.path.exists(FAKE_NVML), f"{FAKE_NVML} is not built (target fake_nvml)")
        if not {0, 1} <= os.sched_getaffinity(0):
            self.skipTest("needs CPUs 0 and 1 (the fake topologies put one NUMA node on each)")
        self.root = os.path.join(self.tmp, "root")

    def case_root(self, case):
        return os.path.join(self.tmp, re.sub(r"\W+", "_", case))

    def run_bound(self, mode, gpus=2, root=None, nproc="gpu"):
        env = self.env(LD_LIBRARY_PATH=os.path.dirname(FAKE_NVML), FAKE_NVML_GPUS=gpus,
                       DTL_TEST_SYSFS_ROOT=root or self.root)
        return self.launch("--master_port=0", f"--nproc_per_node={nproc}", *([f"--numa_binding={mode}"] if mode else []),
                           *SHOW_CPUS, env=env)

    def assertCpus(self, case):
        topology, mode, expected = CASES[case]
        root = self.case_root(case)
        fake_topology(root, **topology)
        r = self.run_bound(mode, gpus=len(topology["gpu_nodes"]), root=root)
        self.assertExitCode(r, 0)
        self.assertEqual(cpus_by_rank(r.stdout), expected, r.stdout)
        return r

    def test_node_binds_each_worker_to_its_gpus_node(self):
        r = self.assertCpus("node")
        self.assertIn("numa_binding=node: CPUs by local rank: 0: 0, 1: 1", r.stderr)

    def test_socket_binds_to_every_node_of_the_gpus_socket(self):
        self.assertCpus("socket")

    def test_exclusive_splits_a_nodes_cores_between_its_gpus(self):
        self.assertCpus("exclusive")

    def test_core_complex_gives_each_gpu_of_a_node_its_own_cache(self):
        self.assertCpus("core-complex")
        self.assertCpus("core-complex, one cache")

    @unittest.skipUnless(have_torch_venv(), f"no torch in {VENV} (scripts/parity/make_venv.sh makes it)")
    def test_torch_binds_the_same_cpus_on_the_same_topologies(self):
        cases = []
        for case, (topology, mode, _) in CASES.items():
            fake_topology(self.case_root(case), **topology)
            cases.append((self.case_root(case), len(topology["gpu_nodes"]), mode))
        for (case, (_, _, expected)), answer in zip(CASES.items(), torch_answers(cases)):
            self.assertEqual(answer, expected, case)

    def test_without_the_flag_workers_keep_dtlaunchs_cpus(self):
        fake_topology(self.root, gpu_nodes=[0, 1], node_cpus=["0", "1"])
        own = sorted(os.sched_getaffinity(0))
        expected = f"{own[0]}-{own[-1]}" if own == list(range(own[0], own[-1] + 1)) else None
        r = self.run_bound(None)
        self.assertExitCode(r, 0)
        if expected:
            self.assertEqual(cpus_by_rank(r.stdout), {0: expected, 1: expected})

    def test_the_machines_own_topology_with_a_gpu_whose_numa_node_is_minus_one(self):
        # this machine's /sys/devices/system, a GPU that says -1 (single-node machines do): node 0
        os.makedirs(os.path.join(self.root, "sys/devices"))
        os.symlink("/sys/devices/system", os.path.join(self.root, "sys/devices/system"))
        write(self.root, "/sys/bus/pci/devices/0000:01:00.0/numa_node", "-1")
        with open("/sys/devices/system/node/node0/cpulist") as f:
            node0 = f.read().strip()
        r = self.run_bound("node", gpus=1)
        self.assertExitCode(r, 0)
        self.assertEqual(cpus_by_rank(r.stdout), {0: node0}, r.stdout)

    def assertRefused(self, r, *fragments):
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
        for fragment in fragments:
            self.assertIn(fragment, r.stderr)
        self.assertNotIn("Cpus_allowed_list", r.stdout)  # no worker started

    def test_refusals_are_one_line_naming_the_flag_before_any_worker_starts(self):
        fake_topology(self.root, gpu_nodes=[0, 1], node_cpus=["0", "1"])
        self.assertRefused(self.run_bound("cache"), "--numa_binding", "cache")
        self.assertRefused(self.run_bound("node", gpus=0, nproc=2), "--numa_binding=node: binds each worker near its GPU, "
                                                           "but the workers have none")
        self.assertRefused(self.run_bound("node", nproc="cpu"), "but the workers have none")
        empty = os.path.join(self.tmp, "empty")
        os.makedirs(empty)
        self.assertRefused(self.run_bound("socket", root=empty),
                           "--numa_binding=socket: local rank 0 (GPU 0000:01:00.0): cannot read "
                           "/sys/bus/pci/devices/0000:01:00.0/numa_node")
        fake = self.launch("--master_port=0", "--fake_gpus=2", "--numa_binding=node", *SHOW_CPUS)
        self.assertRefused(fake, "--numa_binding=node: the PCI address of GPU 0 is unknown (--fake_gpus)")


if __name__ == "__main__":
    main()
