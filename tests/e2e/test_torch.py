"""A real PyTorch script under dtlaunch: gloo process group from the env, an allreduce, and
torch.distributed.is_torchelastic_launched(). Uses Debian's python3-torch through /usr/bin/python3."""
import unittest

from common import LaunchTest, have_torch, main, write_allreduce_script


@unittest.skipUnless(have_torch(), "Debian's python3-torch is not installed (scripts/setup.sh installs it)")
class Torch(LaunchTest):
    def test_three_workers_allreduce_over_gloo(self):
        path = write_allreduce_script(self.tmp)
        env = self.env(PYTHON_EXEC="/usr/bin/python3")
        r = self.launch("--standalone", "--nproc_per_node=3", path, env=env, timeout=180)
        self.assertExitCode(r, 0)
        for rank in range(3):
            self.assertIn(f"[default{rank}]:rank={rank} world=3 sum=6 elastic=True", r.stdout)


if __name__ == "__main__":
    main()
