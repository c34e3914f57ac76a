"""`dtlaunch launch` against the real `accelerate launch`.

Each golden table under tests/golden/accelerate/ was written by scripts/parity/accelerate_goldens.py
from what accelerate launch's own workers got. Here `dtlaunch launch` runs the same arguments and
config file on the same worker (scripts/parity/dump_env.py), and every worker's variables must be the
golden's: the same names, the same values, ignoring only ports, temporary paths and the working
directory. Where dtlaunch differs on purpose, KNOWN says why (docs/accelerate.md, "accelerate launch: where
dtlaunch differs"). With accelerate's venv present ($DTL_ACCELERATE_VENV, else
~/.cache/dtlaunch/venv-accelerate), a second test runs accelerate itself and compares live."""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from common import DTLAUNCH, LaunchTest, free_port, main

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
GOLDEN_DIR = os.path.join(ROOT, "tests", "golden", "accelerate")
PARITY = os.path.join(ROOT, "scripts", "parity")
VENV = os.environ.get("DTL_ACCELERATE_VENV", os.path.expanduser("~/.cache/dtlaunch/venv-accelerate"))

# torchrun's contract, which dtlaunch gives every worker; accelerate's simple launcher (NO, MULTI_CPU,
# --cpu) runs the script itself, with none of it.
TORCHRUN_CONTRACT = {"RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE", "WORLD_SIZE",
                     "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                     "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
                     "TORCHELASTIC_SIGNALS_TO_HANDLE", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE",
                     "TORCH_NCCL_ASYNC_ERROR_HANDLING"}
# Variables where dtlaunch differs from torch 2.x's torchrun, which accelerate runs; each with its reason.
KNOWN = {
    # dtlaunch's rank 0 serves the workers' store itself (docs/workers.md).
    "TORCHELASTIC_USE_AGENT_STORE": ("True", "False"),
}
# torchrun 2.x variables that dtlaunch does not give yet. Should dtlaunch give one, its value must
# be torchrun's.
NOT_YET = set()


def goldens():
    for path in sorted(glob.glob(os.path.join(GOLDEN_DIR, "*.json"))):
        with open(path) as f:
            yield json.load(f)


# What dtlaunch's hang watch adds to every worker, beside torchrun's contract: torch's flight recorder
# on, with its dumps in the run's log folder. A value the user set is kept as it is. (dtlaunch's
# folder first on PYTHONPATH, for its hook, is taken out again by the hook: the worker sees the user's.)
HANG_WATCH = {"TORCH_FR_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"}


def normalized(env, base, cwd, tmp):
    out = {}
    for k, v in env.items():
        if k in HANG_WATCH and k not in base:
            continue
        if base.get(k) == v:
            continue
        if k == "MASTER_PORT":
            v = "<port>"
        elif cwd in v:
            v = v.replace(cwd, "<cwd>")
        elif v.startswith(("/tmp/", "/dev/shm/", tempfile.gettempdir() + "/")) or tmp in v:
            v = "<temp>"
        out[k] = v
    return out


class AccelerateParity(LaunchTest):
    maxDiff = None

    def run_machines(self, command, case, extra=()):
        """Every machine of the case at once, in a fresh directory; {rank: variables}."""
        cwd, out, home = (os.path.join(self.tmp, case["case"], d) for d in ("work", "out", "home"))
        for d in (cwd, out, home):
            os.makedirs(d)
        shutil.copy(os.path.join(PARITY, "dump_env.py"), cwd)
        port = str(free_port())
        config = []
        if case["config_file"]:
            with open(os.path.join(GOLDEN_DIR, case["config_file"])) as f:
                text = f.read().replace("{port}", port)
            with open(os.path.join(cwd, case["config_file"]), "w") as f:
                f.write(text)
            config = ["--config_file", case["config_file"]]
        # The test's own interpreter: a `python3` on PATH may be a shim that adds variables of its own.
        base = self.env(HOME=home, PARITY_OUT=out, LANG="C.UTF-8", PYTHON_EXEC=sys.executable, **case.get("env", {}))
        procs = [subprocess.Popen([*command, *config, *[a.replace("{port}", port) for a in args], *extra,
                                   "dump_env.py"], cwd=cwd, env=base, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True) for args in case["machines"]]
        for p in procs:
            output, _ = p.communicate(timeout=240)
            self.assertEqual(p.returncode, 0, f"{case['case']}: {' '.join(p.args)} exited {p.returncode}:\n{output}")
        workers = {}
        for name in sorted(os.listdir(out)):
            with open(os.path.join(out, name)) as f:
                env = json.load(f)["env"]
            workers[name[len("worker."):-len(".json")]] = normalized(env, base, cwd, self.tmp)
        return workers

    def compare(self, case, got):
        golden = case["workers"]
        if list(golden) == ["single"]:
            # accelerate's simple launcher: one process without torchrun's contract. So is dtlaunch's
            # one worker; with more, dtlaunch starts them all with it. Each has accelerate's variables.
            expected = {r: golden["single"] for r in got}
            extra_allowed = TORCHRUN_CONTRACT if len(got) > 1 else set()
        else:
            self.assertEqual(sorted(got), sorted(golden), f"{case['case']}: the ranks")
            expected = golden
            extra_allowed = set()
        for rank, want in expected.items():
            have = dict(got[rank])
            want = dict(want)
            for name, (theirs, ours) in KNOWN.items():
                if want.get(name) == theirs and have.get(name) == ours:
                    want[name] = have[name]
            for name in NOT_YET:
                if name not in have:
                    want.pop(name, None)
            for name in set(have) - set(want):
                if name in extra_allowed:
                    del have[name]
            self.assertEqual(have, want, f"{case['case']} ({case['about']}), rank {rank}")

    def test_there_are_goldens_for_every_kind_of_run(self):
        cases = {c["case"] for c in goldens()}
        self.assertGreaterEqual(len(cases), 15)
        for kind in ("fsdp", "deepspeed", "multi_cpu", "no", "multi_gpu", "fp8", "dynamo", "gpu_ids",
                     "two_machines_same_network", "two_machines_rendezvous", "default"):
            self.assertTrue(any(kind in c for c in cases), kind)

    def test_dtlaunch_launch_gives_every_worker_what_accelerate_launch_gave(self):
        for case in goldens():
            with self.subTest(case["case"]):
                self.compare(case, self.run_machines([DTLAUNCH, "launch"], case, case["dtlaunch_extra"]))

    @unittest.skipUnless(os.path.exists(os.path.join(VENV, "bin", "accelerate")),
                         f"accelerate's venv is absent ({VENV}; scripts/parity/make_venv.sh makes it)")
    def test_live_accelerate_launch_still_gives_the_goldens(self):
        for case in goldens():
            if "deepspeed" in case["case"] and subprocess.run([os.path.join(VENV, "bin", "python"), "-c",
                                                               "import deepspeed"], capture_output=True).returncode:
                continue  # make_venv.sh says when deepspeed did not install
            with self.subTest(case["case"]):
                old_path = os.environ["PATH"]
                os.environ["PATH"] = os.path.join(VENV, "bin") + ":" + old_path
                try:
                    live = self.run_machines([os.path.join(VENV, "bin", "accelerate"), "launch"], case)
                finally:
                    os.environ["PATH"] = old_path
                self.assertEqual(live, case["workers"], f"{case['case']}: accelerate changed; regenerate with "
                                                        "scripts/parity/accelerate_goldens.py and compare")


if __name__ == "__main__":
    main()
