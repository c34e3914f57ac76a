"""Helpers for dtl-train's end-to-end tests: run it under dtlaunch (or alone), read what each rank
wrote with --dump_params and what rank 0 wrote with --metrics, and compare runs."""
import array
import json
import math
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from common import LaunchTest, free_port  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def _find_trainer():
    """DTL_TRAIN from ctest: the binary, or empty when the build has no trainer; outside ctest the
    default build folder."""
    if "DTL_TRAIN" in os.environ:
        return os.environ["DTL_TRAIN"]
    default = os.path.normpath(os.path.join(HERE, "../../build/apps/dtl-train/dtl-train"))
    return default if os.path.exists(default) else ""


DTL_TRAIN = _find_trainer()
SKIP_REASON = ("dtl-train is not built (configure with -DDTL_BUILD_TRAINER=ON and libtorch-dev installed; "
               "DTL_TRAIN is empty)")
needs_trainer = unittest.skipUnless(DTL_TRAIN, SKIP_REASON)

# A model small enough that a step takes milliseconds on one core, even with the reference BLAS.
TINY = ["--preset", "tiny", "--layers", "2", "--width", "32", "--heads", "4", "--context", "16"]


def load_params(path):
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    return a


def relative_difference(a, b):
    """|a - b| / |a| over the whole vector (elementwise ratios blow up near zero)."""
    assert len(a) == len(b), (len(a), len(b))
    diff = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)))
    norm = math.sqrt(sum(x * x for x in a))
    return diff / norm


class TrainTest(LaunchTest):
    def train(self, nproc, *args, name="run", launcher_args=(), expect=0, timeout=120, env=None):
        """Runs dtl-train on `nproc` ranks under dtlaunch; returns (result, run folder)."""
        out = os.path.join(self.tmp, name)
        os.makedirs(out, exist_ok=True)
        r = self.launch("--standalone", f"--nproc_per_node={nproc}", f"--fake_gpus={nproc}", *launcher_args,
                        "--no_python", DTL_TRAIN, *map(str, args), "--dump_params", out,
                        "--metrics", os.path.join(out, "metrics.jsonl"), env=env, timeout=timeout)
        self.assertExitCode(r, expect)
        return r, out

    def params(self, out, nproc):
        """Every rank's final parameters, checked to be bit-identical across ranks."""
        blobs = []
        for rank in range(nproc):
            with open(os.path.join(out, f"rank{rank}.bin"), "rb") as f:
                blobs.append(f.read())
        for rank in range(1, nproc):
            self.assertEqual(blobs[rank], blobs[0], f"rank {rank}'s parameters differ from rank 0's")
        a = array.array("f")
        a.frombytes(blobs[0])
        return a

    def metrics(self, out):
        with open(os.path.join(out, "metrics.jsonl")) as f:
            return [json.loads(line) for line in f]

    def losses(self, out):
        return [m["loss"] for m in self.metrics(out)]

    def assertClose(self, a, b, rel=1e-5, what="values"):
        if isinstance(a, array.array):
            d = relative_difference(a, b)
            self.assertLess(d, rel, f"{what} differ by {d:.2e} (relative)")
            return
        self.assertEqual(len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b)):
            self.assertLessEqual(abs(x - y), rel * abs(x), f"{what}[{i}]: {x} vs {y}")
