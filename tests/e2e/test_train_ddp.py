"""dtl-train's data parallelism under dtlaunch: ranks stay bit-identical, and 2 or 4 ranks (or
gradient accumulation) with the same global batch reproduce the 1-rank run to fp32 rounding."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
from train_common import TINY, TrainTest, needs_trainer  # noqa: E402

from common import main  # noqa: E402

STEPS = ["--steps", "8", "--log_every", "1", "--lr", "3e-3", "--warmup", "2"]


@needs_trainer
class DataParallel(TrainTest):
    def test_two_and_four_ranks_match_one_rank_with_the_same_global_batch(self):
        _, one = self.train(1, *TINY, *STEPS, "--batch_size", 8, name="one")
        reference, reference_losses = self.params(one, 1), self.losses(one)
        self.assertEqual(len(reference_losses), 8)
        for nproc in (2, 4):
            r, out = self.train(nproc, *TINY, *STEPS, "--batch_size", 8 // nproc, name=f"ranks{nproc}")
            self.assertIn(f"dtl-train: {nproc} rank(s), gloo on cpu", r.stdout)
            self.assertClose(self.losses(out), reference_losses, what=f"{nproc}-rank losses")
            self.assertClose(self.params(out, nproc), reference, what=f"{nproc}-rank parameters")

    def test_gradient_accumulation_of_two_half_batches_matches_one_full_batch(self):
        _, full = self.train(2, *TINY, *STEPS, "--batch_size", 4, name="full")
        _, accumulated = self.train(2, *TINY, *STEPS, "--batch_size", 2, "--grad_accum", 2, name="accumulated")
        self.assertClose(self.losses(accumulated), self.losses(full), what="losses")
        self.assertClose(self.params(accumulated, 2), self.params(full, 2), what="parameters")

    def test_fused_kernels_train_the_same_model_as_torchs_ops(self):
        # 40 tokens: two attention blocks of the fused kernel, the second partial.
        shape = ["--preset", "tiny", "--layers", "2", "--width", "32", "--heads", "4", "--context", "40"]
        r, fused = self.train(2, *shape, *STEPS, "--batch_size", 4, name="fused")
        self.assertIn("fused GELU and attention, fused classifier", r.stdout)
        r, plain = self.train(2, *shape, *STEPS, "--batch_size", 4, "--kernels", "torch", name="torch")
        self.assertIn("torch's ops", r.stdout)
        self.assertClose(self.losses(fused), self.losses(plain), rel=1e-5, what="losses")
        self.assertClose(self.params(fused, 2), self.params(plain, 2), rel=1e-5, what="parameters")

    def test_small_buckets_overlap_and_give_the_same_parameters(self):
        # 0.01 MB buckets: several allreduces per step, started during backward, in the same order.
        _, one_bucket = self.train(2, *TINY, *STEPS, "--batch_size", 4, name="one_bucket")
        r, many = self.train(2, *TINY, *STEPS, "--batch_size", 4, "--bucket_mb", "0.01", name="many")
        buckets = int(r.stdout.split(" gradient buckets")[0].rsplit(" ", 1)[1])
        self.assertGreater(buckets, 3)
        # The gradient norm is summed per bucket, so clipping may round differently in the last bit.
        self.assertClose(self.params(many, 2), self.params(one_bucket, 2), rel=1e-6, what="parameters")


if __name__ == "__main__":
    main()
