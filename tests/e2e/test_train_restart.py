"""dtl-train survives failures: a worker that dies mid-run is restarted by dtlaunch, resumes from
rank 0's last checkpoint and ends exactly where an uninterrupted run ends; failures are reported in
torchrun's error file; a dead or stuck peer makes the others fail instead of hanging."""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
from train_common import DTL_TRAIN, TINY, TrainTest, free_port, needs_trainer  # noqa: E402

from common import main  # noqa: E402

RUN = [*TINY, "--steps", 12, "--log_every", 4, "--checkpoint_every", 4, "--batch_size", 4]


@needs_trainer
class Restart(TrainTest):
    def uninterrupted(self):
        _, out = self.train(2, *RUN, "--checkpoint_dir", os.path.join(self.tmp, "ck_ref"), name="reference")
        return self.params(out, 2)

    def test_a_worker_that_raises_is_restarted_from_the_checkpoint_and_ends_like_an_uninterrupted_run(self):
        reference = self.uninterrupted()
        r, out = self.train(2, *RUN, "--checkpoint_dir", os.path.join(self.tmp, "ck"), "--fail_at_step", 7,
                            "--fail_rank", 1, launcher_args=["--max_restarts=1"], name="restarted")
        self.assertIn("[default1]:std::runtime_error: injected failure at step 7 (--fail_at_step)", r.stdout + r.stderr)
        self.assertIn("resumed from", r.stdout)
        self.assertIn("at step 4", r.stdout)
        self.assertEqual(self.params(out, 2), reference)

    def test_a_worker_killed_by_sigkill_is_restarted_and_ends_like_an_uninterrupted_run(self):
        reference = self.uninterrupted()
        r, out = self.train(2, *RUN, "--checkpoint_dir", os.path.join(self.tmp, "ck"), "--fail_at_step", 10,
                            "--fail_rank", 0, "--fail_how", "kill", launcher_args=["--max_restarts=1"],
                            name="killed")
        self.assertIn("at step 8", r.stdout)
        self.assertEqual(self.params(out, 2), reference)

    def test_without_restarts_the_summary_shows_the_workers_error_file(self):
        r, _ = self.train(2, *RUN, "--fail_at_step", 3, "--fail_rank", 1, expect=1, name="failed")
        self.assertIn("  rank      : 1 (local_rank: 1)", r.stderr)
        self.assertIn("  traceback : dtl-train rank 1 failed while step 3 of 12:\n"
                      "  std::runtime_error: injected failure at step 3 (--fail_at_step)", r.stderr)

    def start_alone(self, rank, port, *args):
        """A rank started without dtlaunch, as a second node's worker would be."""
        env = self.env(RANK=rank, WORLD_SIZE=2, LOCAL_RANK=rank, MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                       TORCHELASTIC_ERROR_FILE=os.path.join(self.tmp, f"error{rank}.json"), OMP_NUM_THREADS=1)
        args = [*TINY, "--steps", 1000, "--log_every", 1, "--batch_size", 2, *args]
        return subprocess.Popen([DTL_TRAIN, *map(str, args)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)

    def error_message(self, rank):
        with open(os.path.join(self.tmp, f"error{rank}.json")) as f:
            report = json.load(f)["message"]
        self.assertRegex(report["extraInfo"]["timestamp"], r"^\d+$")
        return report["message"]

    def test_a_peer_that_dies_makes_the_survivor_fail_with_an_error_file(self):
        port = free_port()
        survivor = self.start_alone(0, port)
        dying = self.start_alone(1, port, "--fail_at_step", 5, "--fail_rank", 1, "--fail_how", "kill")
        self.assertEqual(dying.wait(timeout=60), -9)
        _, err = survivor.communicate(timeout=30)
        self.assertEqual(survivor.returncode, 1, err)
        self.assertIn("dtl-train rank 0 failed while step 5 of 1000:", err)
        self.assertRegex(self.error_message(0), r"^gloo::\w+: .*")

    def test_a_peer_that_stops_responding_makes_the_others_fail_within_the_timeout(self):
        port = free_port()
        waiting = self.start_alone(0, port, "--timeout", 6)
        stuck = self.start_alone(1, port, "--timeout", 6, "--fail_at_step", 5, "--fail_rank", 1, "--fail_how", "hang")
        try:
            start = time.monotonic()
            _, err = waiting.communicate(timeout=60)
            self.assertEqual(waiting.returncode, 1, err)
            self.assertLess(time.monotonic() - start, 45)
            self.assertIn("dtl-train rank 0 failed while step 5 of 1000:", err)
            self.assertIn("Timed out", self.error_message(0))
        finally:
            stuck.kill()
            stuck.communicate()


if __name__ == "__main__":
    main()
