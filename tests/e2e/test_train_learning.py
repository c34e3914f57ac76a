"""dtl-train learns: the loss falls on its synthetic tokens and on a text file, in fp32 and bf16."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
from train_common import TINY, TrainTest, needs_trainer  # noqa: E402

from common import main  # noqa: E402

# Forty lines of varied but regular English: byte-level structure a tiny model picks up quickly.
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


if __name__ == "__main__":
    main()
