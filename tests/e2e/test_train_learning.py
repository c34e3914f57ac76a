"""dtl-train learns: the loss falls on its synthetic tokens and on a text file, in fp32 and bf16."""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
from train_common import DTL_TRAIN, TINY, TrainTest, needs_trainer  # noqa: E402

from common import main  # noqa: E402

# Forty lines of varied but regular English: byte-level structure a tiny model picks up quickly.
def blas_library():
    """The libblas.so.3 that dtl-train resolves here; None for a libtorch with a BLAS of its own (pip's)."""
    ldd = subprocess.run(["ldd", DTL_TRAIN], capture_output=True, text=True).stdout
    return next((line.split("=> ")[1].split(" (")[0] for line in ldd.splitlines() if "libblas.so" in line), None)


TEXT = "".join(f"The {w} number {i} is {'even' if i % 2 == 0 else 'odd'} and its square is {i * i}.\n"
               for i, w in zip(range(40), ["small", "large", "red", "blue"] * 10))


@needs_trainer
class Learning(TrainTest):
    def assertLossFalls(self, out, by):
        losses = self.losses(out)
        self.assertLess(losses[-1], losses[0] - by, f"loss did not fall by {by}: {losses}")

    def test_loss_falls_on_synthetic_tokens(self):
        _, out = self.train(2, *TINY, "--steps", 60, "--log_every", 10, "--lr", "1e-2", "--batch_size", 8)
        self.assertLossFalls(out, 1.5)

    def test_loss_falls_on_a_text_file(self):
        path = os.path.join(self.tmp, "corpus.txt")
        with open(path, "w") as f:
            f.write(TEXT * 4)
        r, out = self.train(2, *TINY, "--data", path, "--steps", 60, "--log_every", 10, "--lr", "1e-2",
                            "--batch_size", 8)
        self.assertIn(f"data '{path}' ({len(TEXT) * 4} bytes", r.stdout)
        self.assertLossFalls(out, 1.5)

    def test_bf16_from_accelerates_variable_trains_too(self):
        env = self.env(ACCELERATE_MIXED_PRECISION="bf16")
        r, out = self.train(1, *TINY, "--steps", 40, "--log_every", 10, "--lr", "1e-2", "--batch_size", 8, env=env)
        self.assertIn("mixed precision bf16", r.stdout)
        self.assertLossFalls(out, 1.0)

    def test_the_reference_blas_is_named_with_what_to_install(self):
        # The BLAS this machine resolves, copied into a folder named as Debian names the reference
        # BLAS's (.../blas/) and into one named as OpenBLAS's: only the first gets the warning.
        lib = blas_library()
        if lib is None:
            self.skipTest("this dtl-train's libtorch loads no libblas.so")
        for folder, warned in (("blas", True), ("openblas-pthread", False)):
            os.makedirs(os.path.join(self.tmp, folder))
            shutil.copy(lib, os.path.join(self.tmp, folder, os.path.basename(lib)))
            env = self.env(LD_LIBRARY_PATH=os.path.join(self.tmp, folder))
            r, _ = self.train(1, *TINY, "--steps", 1, name=folder, env=env)
            line = (f"dtl-train: warning: matrix products run on the reference BLAS ({os.path.realpath(self.tmp)}/blas/"
                    f"{os.path.basename(lib)}), about 20x slower than an optimised one; install one, e.g. "
                    "apt-get install libopenblas0-pthread")
            self.assertEqual(r.stdout.count(line), 1 if warned else 0, r.stdout)
            self.assertEqual("reference BLAS" in r.stdout, warned, r.stdout)

    def test_openblas_avx2_kernels_on_an_avx512_cpu_are_named_with_the_variable_that_fixes_it(self):
        if "openblas" not in os.path.realpath(blas_library() or ""):
            self.skipTest("the BLAS here is not OpenBLAS")
        with open("/proc/cpuinfo") as f:
            flags = next(line for line in f if line.startswith("flags")).split()
        avx512 = all(f in flags for f in ("avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"))
        warning = ("dtl-train: warning: OpenBLAS runs its Haswell kernels on this CPU, which has AVX-512, because "
                   "OPENBLAS_CORETYPE=Haswell is set; without it OpenBLAS picks its AVX-512 kernels")
        r, _ = self.train(1, *TINY, "--steps", 1, name="haswell", env=self.env(OPENBLAS_CORETYPE="Haswell"))
        self.assertEqual(r.stdout.count(warning), 1 if avx512 else 0, r.stdout)
        if avx512:
            r, _ = self.train(1, *TINY, "--steps", 1, name="skylakex", env=self.env(OPENBLAS_CORETYPE="SkylakeX"))
            self.assertNotIn("OPENBLAS_CORETYPE", r.stdout)


if __name__ == "__main__":
    main()
