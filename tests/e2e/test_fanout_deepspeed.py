"""`dtlaunch deepspeed --hostfile` against the real `deepspeed --hostfile --launcher pdsh` (DeepSpeed
0.19 over pdsh and OpenSSH), on the same sshd servers in three network namespaces (sshnet.py), launched
from a fourth: what each worker gets, variable by variable, must be the same, for every slot of the
hostfile, an --include, an --exclude and --num_nodes/--num_gpus. And `dtlaunch launch` against the
real `accelerate launch` (accelerate 1.x) with a multi-machine DeepSpeed file over pdsh, accelerate's
default: accelerate runs `deepspeed --hostfile H --no_local_rank --launcher pdsh --num_gpus 2
--master_addr ... --master_port ...` after appending its environment to ./.deepspeed_env (run in a
folder of its own, and that file removed before dtlaunch runs there, so dtlaunch cannot read it);
and with `nossh`, where each machine runs `accelerate launch` (`deepspeed --hostfile H --node_rank R
--no_ssh`, workers with --local_rank=N) and `dtlaunch launch` in its place, all three at once.

The differences left, on purpose:
- dtlaunch gives torchrun's contract besides (GROUP_RANK, LOCAL_WORLD_SIZE, TORCHELASTIC_*,
  OMP_NUM_THREADS=1, ...): variables deepspeed's workers do not get at all.
- deepspeed's launch.py computes LOCAL_RANK as RANK % LOCAL_SIZE, which is not the worker's place on
  its node when an earlier node has a count of workers that is not a multiple of this node's (an
  --include leaving 1 slot on the first host and 2 on the second gives the second host's workers
  local ranks 1, 0): dtlaunch gives the place (0, 1), as torchrun. Both use each slot once.
- accelerate sends its whole launching environment (PATH, HOME, LANG, ...) to every host through
  ./.deepspeed_env, where it also stays, appended to at every run; dtlaunch sends what its fan-out
  always sends (NCCL_*, PYTHON*, CUDA_* but CUDA_VISIBLE_DEVICES, HF_*, ..., its own settings'
  variables, the .deepspeed_env files' lines) and leaves each host its own PATH: a variable set only in
  the launching shell (a WANDB_API_KEY) needs --export or ./.dtlaunch_env. The test lets accelerate's
  workers have the launching environment's names besides; every other variable must be the same.

Needs root, iproute2, openssh-server, pdsh, and deepspeed in accelerate's venv ($DTL_ACCELERATE_VENV,
else ~/.cache/dtlaunch/venv-accelerate; scripts/parity/make_venv.sh makes it); skipped with the
reason otherwise."""
import json
import os
import re
import shutil
import subprocess
import unittest
from concurrent.futures import ThreadPoolExecutor

from common import DTLAUNCH, main
from sshnet import started_or_skip, why_no_sshd

DTL = os.path.realpath(DTLAUNCH)
VENV = os.environ.get("DTL_ACCELERATE_VENV", os.path.expanduser("~/.cache/dtlaunch/venv-accelerate"))
DEEPSPEED = os.path.join(VENV, "bin", "deepspeed")
ACCELERATE = os.path.join(VENV, "bin", "accelerate")
VENV_PYTHON = os.path.join(VENV, "bin", "python")
PYTHONPATH = "/nonexistent/dtl-test-lib"  # the launching side's, which deepspeed puts after its cwd

# What each worker got, in one write (deepspeed runs it under `python -u`, where print() writes the
# line and its newline apart, and two workers' lines could mix in pdsh's output).
WORKER = """
import json, os, sys
keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE", "MASTER_ADDR",
        "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "PYTHONPATH", "PYTORCH_NVML_BASED_CUDA_CHECK", "DTL_DS_ENV")
got = {"argv": sys.argv[1:], "cwd": os.getcwd(), "names": sorted(os.environ),
       "env": {k: os.environ.get(k) for k in keys + tuple(k for k in os.environ if k.startswith("ACCELERATE_"))}}
sys.stdout.write("GOT " + json.dumps(got, sort_keys=True) + "\\n")
sys.stdout.flush()
"""


# Each case's deepspeed arguments, {i} standing for the i-th host.
CASES = {"every_slot": [], "include": ["--include", "{0}:1@{1}"], "exclude": ["--exclude", "{1}@{2}:0"],
         "num_nodes_gpus": ["--num_nodes", "2", "--num_gpus", "1"]}

# accelerate's multi-machine DeepSpeed through deepspeed's default launcher, {host0} the first host:
# `accelerate launch` runs `deepspeed --hostfile H --no_local_rank --launcher pdsh --num_gpus 2
# --master_addr host0 --master_port 29600` after appending its environment to ./.deepspeed_env
ACCELERATE_CONFIG = """compute_environment: LOCAL_MACHINE
distributed_type: DEEPSPEED
deepspeed_config:
  deepspeed_multinode_launcher: pdsh
  deepspeed_hostfile: {hostfile}
  gradient_accumulation_steps: 4
  zero_stage: 2
machine_rank: 0
main_process_ip: {host0}
main_process_port: 29600
mixed_precision: bf16
num_machines: 3
num_processes: 6
"""


def why_not():
    reason = why_no_sshd()
    if reason:
        return reason
    if not shutil.which("pdsh"):
        return "pdsh is not installed (scripts/setup.sh installs it): deepspeed's default launcher"
    if not os.access(DEEPSPEED, os.X_OK):
        return f"no deepspeed at {DEEPSPEED} ($DTL_ACCELERATE_VENV; scripts/parity/make_venv.sh makes the venv)"
    return None


@unittest.skipIf(why_not(), why_not())
class DeepspeedFanout(unittest.TestCase):
    maxDiff = None
    @classmethod
    def setUpClass(cls):
        cls.c, cls.dir, cls.worker = started_or_skip(3, "d", "worker.py", WORKER)
        # deepspeed's runner and pdsh run plain `ssh`: one on PATH with the cluster's client config
        cls.bin = os.path.join(cls.dir, "bin")
        os.mkdir(cls.bin)
        with open(os.path.join(cls.bin, "ssh"), "w") as f:
            f.write(f"#!/bin/sh\nexec {shutil.which('ssh')} -F {cls.c.config} \"$@\"\n")
        os.chmod(os.path.join(cls.bin, "ssh"), 0o755)
        cls.hostfile = cls.c.hostfile(slots=2)
        # deepspeed's runner sends ~/.deepspeed_env's and ./.deepspeed_env's lines to every host (here
        # both are this file: HOME is the launch directory); so must dtlaunch in its place
        with open(os.path.join(cls.dir, ".deepspeed_env"), "w") as f:
            f.write("DTL_DS_ENV = from-file\n")
        # deepspeed's runs, all at once: each imports torch on the launcher and on every host
        # (about 15 s apiece on 2 cores), so one after the other they would take a minute
        cls.accelerate_dir = os.path.join(cls.dir, "accelerate")  # its own ./.deepspeed_env, which it appends to
        os.mkdir(cls.accelerate_dir)
        cls.accelerate_config = os.path.join(cls.dir, "accelerate.yaml")
        with open(cls.accelerate_config, "w") as f:
            f.write(ACCELERATE_CONFIG.format(hostfile=cls.hostfile, host0=cls.c.hosts[0]))
        with ThreadPoolExecutor(len(CASES) + 1) as pool:
            accelerate = pool.submit(cls.run_accelerate) if os.access(ACCELERATE, os.X_OK) else None
            cls.real = dict(zip(CASES, pool.map(cls.run_deepspeed, CASES.values())))
            cls.accelerate = accelerate and accelerate.result()
        # what accelerate left there for deepspeed's runner; gone before dtlaunch runs in that folder
        cls.accelerate_env_file = os.path.join(cls.accelerate_dir, ".deepspeed_env")
        cls.accelerate_appended = ""
        if os.path.exists(cls.accelerate_env_file):
            with open(cls.accelerate_env_file) as f:
                cls.accelerate_appended = f.read()
            os.unlink(cls.accelerate_env_file)

    @classmethod
    def run_accelerate(cls):
        argv = [ACCELERATE, "launch", "--config_file", cls.accelerate_config, cls.worker, "--x", "1"]
        return subprocess.run(cls.c.launcher_argv(argv), capture_output=True, text=True, timeout=120, env=cls.env(),
                              cwd=cls.accelerate_dir, stdin=subprocess.DEVNULL)

    @classmethod
    def run_deepspeed(cls, args):
        argv = [DEEPSPEED, "--hostfile", cls.hostfile, "--launcher", "pdsh", *[a.format(*cls.c.hosts) for a in args],
                cls.worker, "--x", "1"]
        return subprocess.run(cls.c.launcher_argv(argv), capture_output=True, text=True, timeout=80, env=cls.env(),
                              cwd=cls.dir, stdin=subprocess.DEVNULL)

    @classmethod
    def tearDownClass(cls):
        cls.c.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def tearDown(self):
        left = self.c.wait_clean(timeout=10)
        self.c.kill_leftovers()
        self.assertEqual(left, {}, "processes left on the hosts")

    @classmethod
    def env(cls, **extra):
        return {"PATH": f"{cls.bin}:{os.path.dirname(VENV_PYTHON)}:/usr/sbin:/usr/bin:/sbin:/bin",
                "HOME": cls.dir,  # no developer's ~/.deepspeed_env
                "LANG": "C.UTF-8", "PYTHONPATH": PYTHONPATH,
                "XDG_CONFIG_HOME": os.path.join(cls.dir, "no-config"), **extra}

    def workers(self, r, who):
        """{rank: what that worker got, with its host}, after the launcher ended with 0."""
        self.assertEqual(r.returncode, 0, f"{who}: {r.stderr[-3000:]}")
        out = {}
        for m in re.finditer(r"(?m)^(\S+): (?:\[\w+\]:)?GOT (.*)$", r.stdout):  # dtlaunch adds [default0]:
            got = json.loads(m.group(2))
            got["host"] = m.group(1)
            out[int(got["env"]["RANK"])] = got
        return out

    def test_deepspeed_env_reaches_every_worker(self):
        real = self.workers(self.real["every_slot"], "deepspeed")
        self.assertEqual({w["env"]["DTL_DS_ENV"] for w in real.values()}, {"from-file"})  # both() compares dtlaunch's

    def both(self, case, ranks):
        """Each worker's variables under deepspeed and under `dtlaunch deepspeed` with the case's arguments."""
        argv = [DTL, "deepspeed", "--hostfile", self.hostfile, "--ssh_command", self.c.ssh_command(), "--remote_dtlaunch",
                DTL, *[a.format(*self.c.hosts) for a in CASES[case]], self.worker, "--x", "1"]
        return self.compare(self.workers(self.real[case], "deepspeed"), self.run_dtlaunch(argv, self.dir), ranks)

    def run_dtlaunch(self, argv, cwd):
        """dtlaunch's workers, `argv` run in the launcher namespace in `cwd`."""
        return self.workers(subprocess.run(self.c.launcher_argv(argv), capture_output=True, text=True, timeout=60,
                                           env=self.env(PYTHON_EXEC=VENV_PYTHON),  # deepspeed's workers run on its python
                                           cwd=cwd, stdin=subprocess.DEVNULL), "dtlaunch")

    def compare(self, real, ours, ranks, launching_side=()):
        """Each worker's variables under deepspeed (`real`) and under dtlaunch (`ours`), which must be
        the same, but for LOCAL_RANK where deepspeed's RANK % LOCAL_SIZE is not the worker's place on
        its node; and every variable deepspeed's worker has, dtlaunch's has, but for `launching_side`.
        Returns deepspeed's workers and the ranks whose LOCAL_RANK differs that way."""
        self.assertEqual(sorted(real), list(range(ranks)), real)
        self.assertEqual(sorted(ours), list(range(ranks)), ours)
        quirks = []
        for rank in range(ranks):
            a, b = real[rank], ours[rank]
            place = rank - min(r for r, w in ours.items() if w["host"] == b["host"])
            self.assertEqual(b["env"]["LOCAL_RANK"], str(place))
            self.assertEqual(a["env"]["LOCAL_RANK"], str(rank % int(a["env"]["LOCAL_SIZE"])))  # launch.py's rule
            if a["env"]["LOCAL_RANK"] != b["env"]["LOCAL_RANK"]:
                quirks.append(rank)
                for w in (a, b):
                    w["env"].pop("LOCAL_RANK")
                    w["argv"].pop(0)  # --local_rank=N
            self.assertEqual({k: a[k] for k in ("host", "argv", "cwd", "env")},
                             {k: b[k] for k in ("host", "argv", "cwd", "env")}, f"rank {rank}")
            # every variable deepspeed gives, dtlaunch gives (`_` is the remote shell's)
            self.assertEqual(set(a["names"]) - set(b["names"]) - {"_", *launching_side}, set(), f"rank {rank}")
        return real, quirks

    def test_every_slot_of_the_hostfile(self):
        real, quirks = self.both("every_slot", ranks=6)
        self.assertEqual(quirks, [])
        w = real[3]["env"]
        self.assertEqual(real[3]["host"], self.c.hosts[1])
        self.assertEqual((w["LOCAL_RANK"], w["WORLD_SIZE"], w["LOCAL_SIZE"], w["CROSS_RANK"], w["CROSS_SIZE"]),
                         ("1", "6", "2", "1", "3"))
        self.assertEqual((w["MASTER_ADDR"], w["MASTER_PORT"]), (self.c.hosts[0], "29500"))
        self.assertEqual(w["CUDA_VISIBLE_DEVICES"], "0,1")
        self.assertEqual(w["PYTHONPATH"], f"{self.dir}:{PYTHONPATH}")
        self.assertEqual(real[3]["argv"], ["--local_rank=1", "--x", "1"])

    def test_include_one_slot_of_a_host_and_a_whole_host(self):
        real, quirks = self.both("include", ranks=3)
        self.assertEqual([real[r]["env"]["CUDA_VISIBLE_DEVICES"] for r in range(3)], ["1", "0,1", "0,1"])
        self.assertEqual(quirks, [1, 2])  # deepspeed's local ranks there: 1, 0 (1 % 2, 2 % 2)

    def test_exclude_a_host_and_a_slot(self):
        real, quirks = self.both("exclude", ranks=3)
        self.assertEqual(quirks, [])
        self.assertEqual([(real[r]["host"], real[r]["env"]["CUDA_VISIBLE_DEVICES"]) for r in range(3)],
                         [(self.c.hosts[0], "0,1"), (self.c.hosts[0], "0,1"), (self.c.hosts[2], "1")])

    def test_num_nodes_and_num_gpus(self):
        real, quirks = self.both("num_nodes_gpus", ranks=2)
        self.assertEqual(quirks, [])
        self.assertEqual([real[r]["host"] for r in range(2)], self.c.hosts[:2])
        self.assertEqual(real[1]["env"]["CUDA_VISIBLE_DEVICES"], "0")

    @unittest.skipIf(not os.access(ACCELERATE, os.X_OK), f"no accelerate at {ACCELERATE} ($DTL_ACCELERATE_VENV)")
    def test_accelerate_launch_deepspeed_over_pdsh(self):
        real = self.workers(self.accelerate, "accelerate")
        # accelerate's variables reached deepspeed's workers through the file it appended to
        self.assertIn("ACCELERATE_USE_DEEPSPEED=true\n", self.accelerate_appended)
        self.assertFalse(os.path.exists(self.accelerate_env_file))  # dtlaunch's run below cannot read it
        argv = [DTL, "launch", "--config_file", self.accelerate_config, "--ssh_command", self.c.ssh_command(),
                "--remote_dtlaunch", DTL, self.worker, "--x", "1"]
        real, quirks = self.compare(real, self.run_dtlaunch(argv, self.accelerate_dir), ranks=6, launching_side=self.env())
        self.assertEqual(quirks, [])
        w = real[3]["env"]
        self.assertEqual(real[3]["host"], self.c.hosts[1])
        self.assertEqual((w["LOCAL_RANK"], w["WORLD_SIZE"], w["LOCAL_SIZE"], w["CROSS_RANK"], w["CROSS_SIZE"]),
                         ("1", "6", "2", "1", "3"))
        self.assertEqual((w["MASTER_ADDR"], w["MASTER_PORT"], w["CUDA_VISIBLE_DEVICES"]), (self.c.hosts[0], "29600", "0,1"))
        self.assertEqual((w["ACCELERATE_USE_DEEPSPEED"], w["ACCELERATE_DEEPSPEED_ZERO_STAGE"],
                          w["ACCELERATE_MIXED_PRECISION"], w["ACCELERATE_GRADIENT_ACCUMULATION_STEPS"]),
                         ("true", "2", "bf16", "4"))
        self.assertEqual(real[3]["argv"], ["--x", "1"])  # --no_local_rank

    def on_each_machine(self, program, cwd):
        """`program` with accelerate's nossh file for machine i run on host i, all at once: the workers
        of every host, as workers() gives them."""
        def run(i):
            config = os.path.join(self.dir, f"nossh{i}.yaml")
            with open(config, "w") as f:
                f.write(ACCELERATE_CONFIG.format(hostfile=self.hostfile, host0=self.c.hosts[0])
                        .replace("pdsh", "nossh").replace("machine_rank: 0", f"machine_rank: {i}"))
            argv = [*program, "--config_file", config, self.worker, "--x", "1"]
            r = subprocess.run(self.c.net.exec_argv(self.c.nodes[i], argv), capture_output=True, text=True, timeout=150,
                               env=self.env(PYTHON_EXEC=VENV_PYTHON), cwd=cwd, stdin=subprocess.DEVNULL)
            r.stdout = "".join(f"{self.c.hosts[i]}: {line}\n" for line in r.stdout.splitlines())  # as over ssh
            return r
        with ThreadPoolExecutor(len(self.c.nodes)) as pool:
            results = list(pool.map(run, range(len(self.c.nodes))))
        out = {}
        for i, r in enumerate(results):
            out.update(self.workers(r, f"{program[0]} on {self.c.hosts[i]}"))
        return out

    @unittest.skipIf(not os.access(ACCELERATE, os.X_OK), f"no accelerate at {ACCELERATE} ($DTL_ACCELERATE_VENV)")
    def test_accelerate_launch_deepspeed_nossh(self):
        cwd = os.path.join(self.dir, "nossh")
        os.mkdir(cwd)
        real = self.on_each_machine([ACCELERATE, "launch"], cwd)
        os.unlink(os.path.join(cwd, ".deepspeed_env"))  # what accelerate appended (deepspeed's runner does not read it here)
        ours = self.on_each_machine([DTL, "launch"], cwd)
        real, quirks = self.compare(real, ours, ranks=6)
        self.assertEqual(quirks, [])
        w = real[3]["env"]
        self.assertEqual((w["LOCAL_SIZE"], w["CROSS_RANK"], w["CROSS_SIZE"], w["CUDA_VISIBLE_DEVICES"]), ("2", "1", "3", "0,1"))
        self.assertEqual(real[3]["argv"], ["--local_rank=1", "--x", "1"])  # no --no_local_rank under nossh


if __name__ == "__main__":
    main()
