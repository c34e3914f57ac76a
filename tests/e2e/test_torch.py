"""A real PyTorch script under dtlaunch: gloo process group from the env, an allreduce, and
torch.distributed.is_torchelastic_launched(). Uses Debian's python3-torch through /usr/bin/python3."""
import os
import subprocess
import unittest

from common import LaunchTest, main

SCRIPT = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print(f"rank={dist.get_rank()} world={dist.get_world_size()} sum={t.item():.0f} "
      f"elastic={dist.is_torchelastic_launched()}", flush=True)
dist.destroy_process_group()
"""


def have_torch():
    return subprocess.run(["/usr/bin/python3", "-c", "import torch.distributed"], capture_output=True).returncode == 0


@unittest.skipUnless(have_torch(), "Debian's python3-torch is not installed (scripts/setup.sh installs it)")
class Torch(LaunchTest):
    def test_three_workers_allreduce_over_gloo(self):
        path = os.path.join(self.tmp, "allreduce.py")
        with open(path, "w") as f:
            f.write(SCRIPT)
        env = self.env(PYTHON_EXEC="/usr/bin/python3")
        r = self.launch("--standalone", "--nproc_per_node=3", path, env=env, timeout=180)
        self.assertExitCode(r, 0)
        for rank in range(3):
            self.assertIn(f"[default{rank}]:rank={rank} world=3 sum=6 elastic=True", r.stdout)


if __name__ == "__main__":
    main()
