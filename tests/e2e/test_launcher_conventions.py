"""`dtlaunch torch.distributed.launch ARGS` and `dtlaunch deepspeed ARGS`: those launchers' argument and
variables for each worker, compared with the real tools where they are installed (Debian's torch 1.13
at /usr/bin/python3; torch 2.15 and deepspeed in $DTL_ACCELERATE_VENV, else
~/.cache/dtlaunch/venv-accelerate, which scripts/parity/make_venv.sh makes)."""
import json
import os
import subprocess

from common import DTLAUNCH, LaunchTest, free_port, main

VENV = os.environ.get("DTL_ACCELERATE_VENV", os.path.expanduser("~/.cache/dtlaunch/venv-accelerate"))
VENV_PYTHON = os.path.join(VENV, "bin", "python")
DEBIAN_PYTHON = "/usr/bin/python3"

# A script written for torch.distributed.launch / deepspeed: it parses --local-rank (both spellings,
# as torch's docs say), and prints what it got.
SCRIPT = """
import argparse, json, os, sys
p = argparse.ArgumentParser()
p.add_argument("--local-rank", "--local_rank", type=int, default=-1)
p.add_argument("--foo")
a = p.parse_args()
keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "CROSS_RANK", "CROSS_SIZE", "LOCAL_SIZE", "CUDA_VISIBLE_DEVICES",
        "PYTORCH_NVML_BASED_CUDA_CHECK")
# One write of the whole line: under `python -u` (the real launchers' workers) print() writes the text
# and its newline apart, and two ranks' lines could interleave on the shared stdout.
os.write(1, ("GOT " + json.dumps({"argv": sys.argv[1:], "local_rank": a.local_rank, "foo": a.foo,
                                  "env": {k: os.environ.get(k) for k in keys}}, sort_keys=True) + "\\n").encode())
"""


def has_torch(python):
    return os.access(python, os.X_OK) and subprocess.run(
        [python, "-c", "import torch.distributed"], capture_output=True).returncode == 0


class Conventions(LaunchTest):
    def setUp(self):
        super().setUp()
        self.script = os.path.join(self.tmp, "train.py")
        with open(self.script, "w") as f:
            f.write(SCRIPT)

    def got(self, result):
        """{local rank: what the script printed}, from any launcher's output."""
        self.assertExitCode(result, 0)
        out = {}
        for line in result.stdout.splitlines():
            if "GOT " in line:
                got = json.loads(line.split("GOT ", 1)[1])
                out[int(got["env"]["LOCAL_RANK"])] = got
        self.assertEqual(sorted(out), [0, 1], result.stdout + result.stderr)
        return out

    def dtlaunch(self, *args, python):
        return self.got(self.launch(*args, env=self.env(PYTHON_EXEC=python)))

    def real(self, *argv):
        return self.got(subprocess.run(list(argv), env=self.env(), capture_output=True, text=True, timeout=180))

    def require(self, python):
        if not has_torch(python):
            self.skipTest(f"no torch at {python}")

    def test_torch_distributed_launch_passes_local_rank_in_the_spelling_of_torch_2(self):
        self.require(VENV_PYTHON)
        got = self.dtlaunch("torch.distributed.launch", "--nproc_per_node=2", self.script, "--foo", "1",
                            python=VENV_PYTHON)
        self.assertEqual(got[1]["argv"], ["--local-rank=1", "--foo", "1"])
        self.assertEqual(got[1]["local_rank"], 1)
        # given no port, torch 2.15's launcher takes a free one, as dtlaunch does
        self.assertEqual(got, self.real(VENV_PYTHON, "-m", "torch.distributed.launch", "--nproc_per_node=2",
                                        self.script, "--foo", "1"))

    def test_torch_distributed_launch_of_torch_1_13_says_local_rank_with_an_underscore(self):
        self.require(DEBIAN_PYTHON)
        got = self.dtlaunch("torch.distributed.launch", "--nproc_per_node=2", self.script, "--foo", "1",
                            python=DEBIAN_PYTHON)
        self.assertEqual(got[0]["argv"], ["--local_rank=0", "--foo", "1"])
        # Debian's torch 1.13 launcher itself fails on Python 3.11 (Std.from_str gives None), so its
        # source is the oracle: run.py's config_from_args appends this spelling
        with open("/usr/lib/python3/dist-packages/torch/distributed/run.py") as f:
            self.assertIn('cmd_args.append(f"--local_rank={macros.local_rank}")', f.read())

    def test_with_use_env_the_script_gets_no_argument(self):
        got = self.dtlaunch("torch.distributed.launch", "--use_env", "--nproc_per_node=2", self.script,
                            python="python3")
        self.assertEqual([got[r]["argv"] for r in (0, 1)], [[], []])
        self.assertEqual([got[r]["local_rank"] for r in (0, 1)], [-1, -1])

    def test_without_the_word_dtlaunch_passes_no_argument_as_torchrun(self):
        got = self.dtlaunch("--nproc_per_node=2", self.script, python="python3")
        self.assertEqual(got[0]["argv"], [])

    def test_no_python_without_use_env_is_refused_as_torch_does(self):
        r = self.launch("torch.distributed.launch", "--no_python", "true")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--no_python needs --use_env", r.stderr)

    def test_deepspeed_gives_local_rank_and_its_variables(self):
        got = self.dtlaunch("deepspeed", "--num_gpus", "2", self.script, "--foo", "x", python="python3")
        self.assertEqual(got[1]["argv"], ["--local_rank=1", "--foo", "x"])
        # deepspeed's launch.py shows its slots as CUDA_VISIBLE_DEVICES, GPUs or not (this machine has none)
        self.assertEqual(got[1]["env"], {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "CROSS_RANK": "0",
                                         "CROSS_SIZE": "1", "LOCAL_SIZE": "2", "CUDA_VISIBLE_DEVICES": "0,1",
                                         "PYTORCH_NVML_BASED_CUDA_CHECK": "1"})
        deepspeed = os.path.join(VENV, "bin", "deepspeed")
        if not os.access(deepspeed, os.X_OK):
            self.skipTest(f"no deepspeed at {deepspeed} for the side-by-side run")
        # deepspeed runs the script with its own interpreter: dtlaunch with the same one
        got = self.dtlaunch("deepspeed", "--num_gpus", "2", self.script, "--foo", "x", python=VENV_PYTHON)
        self.assertEqual(got, self.real(deepspeed, "--num_gpus", "2", f"--master_port={free_port()}", self.script,
                                        "--foo", "x"))

    def test_deepspeed_no_local_rank(self):
        got = self.dtlaunch("deepspeed", "--num_gpus=2", "--num_nodes=1", "--no_local_rank", self.script,
                            python="python3")
        self.assertEqual(got[0]["argv"], [])
        self.assertEqual(got[0]["env"]["CROSS_SIZE"], "1")


if __name__ == "__main__":
    main()
