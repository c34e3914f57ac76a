"""A real accelerate script (an Accelerator(), a tiny model, prepare, 5 steps, gather) under
`dtlaunch --config_file` and under `accelerate launch`, from accelerate's venv ($DTL_ACCELERATE_VENV,
else ~/.cache/dtlaunch/venv-accelerate; scripts/parity/make_venv.sh makes it). Without the venv the
whole file is skipped (exit 77)."""
import json
import os
import re
import subprocess
import sys

from common import DTLAUNCH, LaunchTest, main

VENV = os.environ.get("DTL_ACCELERATE_VENV", os.path.expanduser("~/.cache/dtlaunch/venv-accelerate"))
PYTHON = os.path.join(VENV, "bin", "python")

TRAIN = """
import json
import os
import sys
import torch
from accelerate import Accelerator

acc = Accelerator()
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.utils.data.TensorDataset(torch.randn(40, 4), torch.randn(40, 1))
loader = torch.utils.data.DataLoader(data, batch_size=4)
model, opt, loader = acc.prepare(model, opt, loader)
for _, (x, y) in zip(range(5), loader):
    loss = torch.nn.functional.mse_loss(model(x), y)
    acc.backward(loss)
    opt.step()
    opt.zero_grad()
gathered = acc.gather(torch.tensor([acc.process_index], device=acc.device))
print("REPORT " + json.dumps({"num_processes": acc.num_processes, "process_index": acc.process_index,
                              "mixed_precision": acc.mixed_precision, "distributed_type": str(acc.distributed_type),
                              "gathered": gathered.tolist()}), flush=True)
# A Gloo process may abort at interpreter exit ("terminate called without an active exception",
# SIGABRT): the DDP wrapper still holds the process group, whose worker threads are torn down
# during finalization (pytorch/pytorch#190489). Destroying the group is what torch asks of a
# script; leaving without finalization is what keeps the abort away on a loaded machine.
acc.end_training()
if torch.distributed.is_initialized():
    torch.distributed.destroy_process_group()
sys.stdout.flush()
os._exit(0)
"""


def reports(output):
    return sorted((json.loads(m) for m in re.findall(r"REPORT (\{.*\})", output)), key=lambda r: r["process_index"])


class AccelerateScript(LaunchTest):
    def setUp(self):
        super().setUp()
        self.script = os.path.join(self.tmp, "train.py")
        with open(self.script, "w") as f:
            f.write(TRAIN)

    def config(self, name, text):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write("compute_environment: LOCAL_MACHINE\nmain_process_port: 0\n" + text)
        return path

    def run_both(self, config):
        env = self.env(PATH=os.path.join(VENV, "bin") + ":" + os.environ["PATH"], PYTHON_EXEC=PYTHON,
                       HOME=self.tmp)
        theirs = subprocess.run([os.path.join(VENV, "bin", "accelerate"), "launch", "--config_file", config,
                                 self.script], env=env, cwd=self.tmp, capture_output=True, text=True, timeout=240)
        self.assertEqual(theirs.returncode, 0, theirs.stdout + theirs.stderr)
        ours = subprocess.run([DTLAUNCH, "--config_file", config, self.script], env=env, cwd=self.tmp,
                              capture_output=True, text=True, timeout=240)
        self.assertExitCode(ours, 0)
        return reports(theirs.stdout), reports(ours.stdout)

    def test_a_multi_gpu_file_reports_what_it_reports_under_accelerate_launch(self):
        theirs, ours = self.run_both(self.config("gpu.yaml", "distributed_type: MULTI_GPU\nnum_processes: 2\n"
                                                             "mixed_precision: bf16\n"))
        self.assertEqual(len(ours), 2)
        self.assertEqual(ours, theirs)

    def test_a_multi_cpu_file_trains_on_every_process_with_accelerates_settings(self):
        theirs, ours = self.run_both(self.config("cpu.yaml", "distributed_type: MULTI_CPU\nnum_processes: 2\n"
                                                             "mixed_precision: bf16\nuse_cpu: true\n"))
        # accelerate launch runs a MULTI_CPU script once and leaves the other processes to mpirun
        # (docs/accelerate.md: "where dtlaunch differs"); dtlaunch starts both, and they train together.
        self.assertEqual([(r["num_processes"], r["distributed_type"]) for r in theirs], [(1, "DistributedType.NO")])
        self.assertEqual(ours, [{"num_processes": 2, "process_index": i, "mixed_precision": "bf16",
                                 "distributed_type": "DistributedType.MULTI_CPU", "gathered": [0, 1]} for i in (0, 1)])
        self.assertEqual({r["mixed_precision"] for r in ours}, {r["mixed_precision"] for r in theirs})


if __name__ == "__main__":
    if not os.path.exists(PYTHON) or subprocess.run([PYTHON, "-c", "import accelerate, torch"]).returncode != 0:
        print(f"skipped: accelerate's venv is absent or broken ({VENV}; scripts/parity/make_venv.sh makes it)")
        sys.exit(77)
    main()
