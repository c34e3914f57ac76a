"""dtl-train's bad input: one clear line on stderr, exit code 2, nothing trained."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
from train_common import DTL_TRAIN, TINY, TrainTest, needs_trainer  # noqa: E402

from common import main  # noqa: E402


@needs_trainer
class BadInput(TrainTest):
    def check(self, args, message, env=None):
        r = subprocess.run([DTL_TRAIN, *map(str, args)], env=env or self.env(), capture_output=True, text=True,
                           timeout=60)
        self.assertEqual((r.returncode, r.stderr, r.stdout), (2, "dtl-train: error: " + message + "\n", ""))

    def test_an_unknown_flag(self):
        self.check(["--stpes", "10"], "unknown option --stpes (see dtl-train --help)")

    def test_heads_that_do_not_divide_the_width(self):
        self.check(["--width", 64, "--heads", 5], "--heads 5 does not divide --width 64")

    def test_an_unknown_preset_and_a_bad_backend(self):
        self.check(["--preset", "huge"], "--preset must be default, tiny or gpt2-small (got 'huge')")
        self.check(["--backend", "mpi"], "--backend must be auto, nccl or gloo (got 'mpi')")
        self.check(["--kernels", "mkl"], "--kernels must be fused or torch (got 'mkl')")

    def test_nccl_without_a_gpu_or_an_nccl_build(self):
        # A CPU build says what it lacks; an NCCL build (scripts/build-cuda.sh) on a machine without a GPU, that.
        nccl_build = b"ProcessGroupNCCL" in open(DTL_TRAIN, "rb").read()
        self.check([*TINY, "--backend", "nccl", "--steps", 1], "--backend nccl needs a CUDA device" if nccl_build else
                   "--backend nccl: this dtl-train was built without NCCL (scripts/build-cuda.sh builds one with it)")

    def test_fp16_on_a_cpu_without_its_autocast_is_refused_naming_where_it_came_from(self):
        # Debian's libtorch 1.13 autocasts to bf16 only on a CPU (libtorch 2.5 to fp16 too); fp8 is no
        # choice of dtl-train's.
        for source, args, env in (("ACCELERATE_MIXED_PRECISION", [], self.env(ACCELERATE_MIXED_PRECISION="fp16")),
                                  ("--mixed_precision", ["--mixed_precision", "fp16"], None)):
            with self.subTest(source=source):
                r = subprocess.run([DTL_TRAIN, *TINY, "--device", "cpu", *args], env=env or self.env(),
                                   capture_output=True, text=True, timeout=60)
                self.assertEqual((r.returncode, r.stdout), (2, ""))
                self.assertRegex(r.stderr, rf"^dtl-train: error: fp16 mixed precision \({re.escape(source)}\): libtorch "
                                 r"[\d.]+ has no fp16 autocast on cpu; fp16 on a CPU needs libtorch 2\.5, bf16 "
                                 r"works there\n$")
        self.check([*TINY], "ACCELERATE_MIXED_PRECISION=fp8 is not supported (use no, bf16 or fp16)",
                   env=self.env(ACCELERATE_MIXED_PRECISION="fp8"))

    def test_an_attention_kernel_torch_cannot_run_here_is_refused(self):
        # With dropout the model's attention is torch's SDPA, which has no cuDNN kernel on a CPU.
        r = subprocess.run([DTL_TRAIN, *TINY, "--device", "cpu", "--dropout", "0.1", "--attention", "cudnn"],
                           env=self.env(), capture_output=True, text=True, timeout=60)
        self.assertEqual((r.returncode, r.stdout), (2, ""))
        self.assertRegex(r.stderr, r"^dtl-train: error: --attention cudnn: (libtorch [\d.]+ lets dtl-train choose none "
                         r"of scaled_dot_product_attention's kernels \(2\.5\+ does\)|torch's "
                         r"scaled_dot_product_attention cannot run it for this model on cpu \(.*none fits.*\))\n$")
        self.check(["--attention", "fast"], "--attention must be auto, cudnn, flash, efficient or math (got 'fast')")

    def test_a_missing_data_file(self):
        path = os.path.join(self.tmp, "missing.txt")
        self.check([*TINY, "--data", path], f"--data {path}: no such file")

    def test_a_bad_launcher_variable(self):
        self.check([*TINY], "WORLD_SIZE: expected an integer >= 1 (got 'two')", env=self.env(WORLD_SIZE="two"))

    def test_a_data_file_with_fewer_sequences_than_ranks(self):
        path = os.path.join(self.tmp, "short.txt")
        with open(path, "w") as f:
            f.write("x" * 40)  # two windows of 17 bytes at --context 16
        r = self.launch("--standalone", "--nproc_per_node=4", "--no_python", DTL_TRAIN, *TINY, "--data", path,
                        "--batch_size", 1)
        self.assertExitCode(r, 2)
        line = f"dtl-train: error: data file '{path}' (40 bytes, 2 sequences of 17 bytes) has fewer sequences " \
               "than the 4 ranks"
        # Each rank finds it before any communication; the first to exit stops the others.
        self.assertRegex(r.stderr, r"\[default\d\]:" + re.escape(line) + "\n")
        self.assertIn("  traceback : " + line + "\n", r.stderr)


if __name__ == "__main__":
    main()
