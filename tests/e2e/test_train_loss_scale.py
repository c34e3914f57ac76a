"""dtl-train's dynamic loss scaling (fp16's, torch's GradScaler semantics), driven on a CPU in fp32
with --loss_scale dynamic: a power-of-two scale leaves fp32 training bit for bit as it is; a step
whose gradients are not finite (injected on one rank) is skipped on every rank and halves the
scale, at every ZeRO stage; the scale survives a restart through the checkpoint."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
from train_common import TINY, TrainTest, needs_trainer  # noqa: E402

from common import main  # noqa: E402

# A constant learning rate (no warmup, min_lr = lr), so that a run of N steps ends where the first N
# steps of a longer run end.
RUN = [*TINY, "--log_every", 1, "--batch_size", 2, "--grad_accum", 2, "--grad_clip", 0.5, "--warmup", 0,
       "--min_lr", 1e-3, "--lr", 1e-3]


@needs_trainer
class LossScale(TrainTest):
    def test_a_power_of_two_scale_leaves_fp32_training_as_it_is(self):
        for stage in (0, 2):
            with self.subTest(stage=stage):
                _, plain = self.train(2, *RUN, "--steps", 8, "--zero", stage, name=f"plain{stage}")
                r, scaled = self.train(2, *RUN, "--steps", 8, "--zero", stage, "--loss_scale", "dynamic",
                                       name=f"scaled{stage}")
                self.assertIn("loss scale dynamic from 65536", r.stdout)
                self.assertEqual(self.params(scaled, 2), self.params(plain, 2))
                self.assertEqual(self.losses(scaled), self.losses(plain))

    def test_a_step_with_non_finite_gradients_is_skipped_everywhere_and_halves_the_scale(self):
        for stage in (0, 1, 2, 3):
            with self.subTest(stage=stage):
                _, two = self.train(2, *RUN, "--steps", 2, "--zero", stage, name=f"two{stage}")
                r, three = self.train(2, *RUN, "--steps", 3, "--zero", stage, "--loss_scale", "dynamic",
                                      "--fail_at_step", 3, "--fail_rank", 1, "--fail_how", "nonfinite",
                                      name=f"skipped{stage}")
                self.assertIn("dtl-train: step 3: gradients not finite at loss scale 65536: the step is skipped "
                              "and the scale is now 32768", r.stdout)
                # Step 3 changed nothing, on either rank (params() checks that the ranks agree).
                self.assertEqual(self.params(three, 2), self.params(two, 2))
                # Without a scaler the same gradients reach the parameters.
                r, broken = self.train(2, *RUN, "--steps", 3, "--zero", stage, "--fail_at_step", 3, "--fail_rank", 1,
                                       "--fail_how", "nonfinite", name=f"unscaled{stage}")
                self.assertNotIn("skipped", r.stdout)
                self.assertTrue(any(x != x for x in self.params(broken, 2)), "no NaN without a scaler")

    def test_what_a_rank_holds_is_said_after_the_first_step_taken(self):
        # The first step is skipped: AdamW makes its state at the second, and the line waits for it.
        r, _ = self.train(2, *RUN, "--steps", 2, "--zero", 1, "--loss_scale", "dynamic", "--fail_at_step", 1,
                          "--fail_how", "nonfinite", name="first_skipped")
        self.assertIn("dtl-train: step 1: gradients not finite", r.stdout)
        params, state = map(int, re.search(r"holds parameters (\d+) bytes, .* optimizer state (\d+) bytes",
                                           r.stdout).groups())
        self.assertEqual(state, params)  # two moments per parameter, over 2 ranks
        self.assertLess(r.stdout.index("step 1: gradients not finite"), r.stdout.index("holds parameters"))

    def test_the_scale_is_kept_in_the_checkpoint(self):
        ck = os.path.join(self.tmp, "ck")
        r, _ = self.train(2, *RUN, "--steps", 8, "--loss_scale", "dynamic", "--checkpoint_dir", ck,
                          "--checkpoint_every", 4, "--fail_at_step", 2, "--fail_rank", 0, "--fail_how", "nonfinite",
                          name="first")
        self.assertIn("the scale is now 32768", r.stdout)
        r, _ = self.train(2, *RUN, "--steps", 12, "--loss_scale", "dynamic", "--checkpoint_dir", ck, name="resumed")
        self.assertIn("at step 8", r.stdout)
        self.assertIn("loss scale dynamic from 32768", r.stdout)


if __name__ == "__main__":
    main()
