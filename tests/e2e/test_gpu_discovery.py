"""GPU discovery on a machine without GPUs: a stand-in libnvidia-ml.so.1 (tests/helpers/fake_nvml.cc)
and a stand-in nvidia-smi answer as a driver would, and `dtlaunch env` and the workers see what
they said. NVML comes first; nvidia-smi only where NVML cannot start."""
import os
import subprocess

from common import DTLAUNCH, FAKE_NVML, LaunchTest, main, parse_env

SMI_LIST = ("GPU 0: NVIDIA H200 (UUID: GPU-5f3c1b2a-1111-2222-3333-444455556666)\n"
            "GPU 1: NVIDIA H200 (UUID: GPU-6f3c1b2a-1111-2222-3333-444455556666)\n")


class GpuDiscovery(LaunchTest):
    def setUp(self):
        super().setUp()
        self.assertTrue(os.path.exists(FAKE_NVML), f"{FAKE_NVML} is not built (target fake_nvml)")

    def gpu_env(self, nvml_gpus=None, smi_output=None, smi_exit=0):
        """The stand-in NVML first in the loader's path (it fails to start without nvml_gpus), and
        with smi_output an nvidia-smi first in PATH that prints it."""
        env = self.env(LD_LIBRARY_PATH=os.path.dirname(FAKE_NVML), PYTHON_EXEC="true")
        if nvml_gpus is not None:
            env["FAKE_NVML_GPUS"] = str(nvml_gpus)
        bin_dir = os.path.join(self.tmp, "bin")
        os.makedirs(bin_dir, exist_ok=True)
        with open(os.path.join(bin_dir, "nvidia-smi"), "w") as f:
            f.write(f"#!/bin/sh\n[ \"$1\" = -L ] || exit 2\nprintf '%s' '{smi_output or ''}'\nexit {smi_exit}\n")
        os.chmod(os.path.join(bin_dir, "nvidia-smi"), 0o755)
        env["PATH"] = bin_dir + ":" + env.get("PATH", "/usr/bin:/bin")
        return env

    def dtlaunch_env(self, env):
        r = subprocess.run([DTLAUNCH, "env"], env=env, capture_output=True, text=True, timeout=60)
        self.assertExitCode(r, 0)
        return r.stdout

    def test_nvml_lists_the_gpus_with_their_memory_and_the_driver(self):
        out = self.dtlaunch_env(self.gpu_env(nvml_gpus=2, smi_output=SMI_LIST))
        self.assertIn("\n- GPUs (nvml): 2\n"
                      "  - 0: Fake NVML GPU, 16.0 GiB, GPU-fakenvml-0\n"
                      "  - 1: Fake NVML GPU, 32.0 GiB, GPU-fakenvml-1\n"
                      "- NVIDIA driver: 999.99\n", out)

    def test_without_nvml_nvidia_smi_lists_the_gpus(self):
        out = self.dtlaunch_env(self.gpu_env(smi_output=SMI_LIST))
        self.assertIn("\n- GPUs (nvidia-smi): 2\n"
                      "  - 0: NVIDIA H200, GPU-5f3c1b2a-1111-2222-3333-444455556666\n"
                      "  - 1: NVIDIA H200, GPU-6f3c1b2a-1111-2222-3333-444455556666\n", out)
        self.assertNotIn("NVIDIA driver", out)

    def test_an_nvidia_smi_that_fails_counts_no_gpus(self):
        out = self.dtlaunch_env(self.gpu_env(smi_output=SMI_LIST, smi_exit=9))
        self.assertIn("\n- GPUs (none): 0\n", out)

    def test_each_worker_gets_one_of_the_gpus_nvml_found(self):
        r = self.launch("--nproc_per_node=gpu", "--master_port=0", *self.worker("env"), env=self.gpu_env(nvml_gpus=3))
        self.assertExitCode(r, 0)
        ranks = parse_env(r.stdout)
        self.assertEqual({lr: env["CUDA_VISIBLE_DEVICES"] for lr, env in ranks.items()}, {0: "0", 1: "1", 2: "2"})


if __name__ == "__main__":
    main()
