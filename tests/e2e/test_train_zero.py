"""dtl-train's ZeRO stages 1 to 3 (--zero): the same training as data parallel (stage 0), with
each rank holding only its shard of the AdamW state (stage 1), of the gradients (stage 2) and of
the parameters (stage 3), as counted from the live tensors; a run killed and restarted by dtlaunch resumes from every rank's
shard and ends bit for bit where an uninterrupted run ends; a checkpoint of another stage or world
size is refused in one line, and --consolidate makes it whole, so that a run of any stage and
world size continues it; accelerate's DeepSpeed and FSDP files choose the stage."""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
from train_common import DTL_TRAIN, TINY, TrainTest, needs_trainer  # noqa: E402

from common import main  # noqa: E402

# Clipping at 0.5 is active in these steps (the norm starts above 1), and 2 micro-batches a step.
# Stage 1 gives stage 0's bits; stages 2 and 3 sum each micro-batch's reduced chunk instead of reducing
# the sum, which rounds differently (5e-7 here, more with a learning rate that amplifies it).
RUN = [*TINY, "--log_every", 5, "--batch_size", 2, "--grad_accum", 2, "--grad_clip", 0.5]
HOLDS = re.compile(r"holds parameters (\d+) bytes, gradients (\d+) bytes, optimizer state (\d+) bytes")


def holdings(stdout):
    m = HOLDS.search(stdout)
    return tuple(int(x) for x in m.groups())


@needs_trainer
class Zero(TrainTest):
    def test_stages_1_to_3_train_as_stage_0_on_2_and_4_ranks(self):
        for nproc in (2, 4):
            _, base = self.train(nproc, *RUN, "--steps", 30, "--zero", 0, name=f"z0n{nproc}")
            for stage in (1, 2, 3):
                with self.subTest(nproc=nproc, stage=stage):
                    r, out = self.train(nproc, *RUN, "--steps", 30, "--zero", stage, name=f"z{stage}n{nproc}")
                    self.assertIn(f"zero {stage} (--zero)", r.stdout)
                    self.assertClose(self.losses(out), self.losses(base), rel=1e-5, what="losses")
                    self.assertClose(self.params(out, nproc), self.params(base, nproc), rel=1e-5,
                                     what="final parameters")
                    if stage == 1:
                        self.assertEqual(self.params(out, nproc), self.params(base, nproc))
        # Stage 3 runs each block again in backward, with the forward's dropout masks.
        _, base = self.train(2, *RUN, "--steps", 10, "--dropout", 0.1, name="dropout0")
        _, out = self.train(2, *RUN, "--steps", 10, "--dropout", 0.1, "--zero", 3, name="dropout3")
        self.assertClose(self.losses(out), self.losses(base), rel=1e-5, what="losses with dropout")

    def test_each_stage_holds_its_share_of_what_it_shards(self):
        nproc = 4
        r, _ = self.train(nproc, *RUN, "--steps", 1, "--zero", 0, name="z0")
        params0, grads0, state0 = holdings(r.stdout)
        self.assertEqual(state0, 2 * params0)  # AdamW: two moments per parameter
        for stage in (1, 2, 3):
            r, _ = self.train(nproc, *RUN, "--steps", 1, "--zero", stage, name=f"z{stage}")
            params, grads, state = holdings(r.stdout)
            expected_params = params0 / nproc if stage == 3 else params0  # every parameter, plus padding
            self.assertLess(abs(params - expected_params) / expected_params, 0.03, (stage, params, params0))
            self.assertLess(abs(state - state0 / nproc) / (state0 / nproc), 0.03, (stage, state, state0))
            expected_grads = grads0 / nproc if stage >= 2 else grads0
            self.assertLess(abs(grads - expected_grads) / expected_grads, 0.03, (stage, grads, grads0))

    def test_a_killed_rank_resumes_from_the_shards_and_ends_as_an_uninterrupted_run(self):
        run = [*RUN, "--steps", 12, "--checkpoint_every", 4]
        for stage in (1, 2, 3):
            with self.subTest(stage=stage):
                _, reference = self.train(2, *run, "--zero", stage, "--checkpoint_dir",
                                          os.path.join(self.tmp, f"ref{stage}"), name=f"ref{stage}")
                ck = os.path.join(self.tmp, f"ck{stage}")
                r, out = self.train(2, *run, "--zero", stage, "--checkpoint_dir", ck, "--fail_at_step", 10,
                                    "--fail_rank", 1, "--fail_how", "kill", launcher_args=["--max_restarts=1"],
                                    name=f"killed{stage}")
                self.assertIn("resumed from", r.stdout)
                self.assertIn("at step 8", r.stdout)
                self.assertEqual(self.params(out, 2), self.params(reference, 2))
                self.assertEqual(self.losses(out)[-1], self.losses(reference)[-1])
                # Only the last checkpoint's shards are left, one per rank.
                self.assertEqual(sorted(f for f in os.listdir(ck) if f.startswith("zero-")),
                                 ["zero-step12-rank0.pt", "zero-step12-rank1.pt"])

    def test_a_checkpoint_of_another_stage_or_world_size_is_refused_in_one_line(self):
        ck = os.path.join(self.tmp, "ck")
        self.train(2, *RUN, "--steps", 4, "--checkpoint_every", 4, "--zero", 2, "--checkpoint_dir", ck, name="first")
        r, _ = self.train(4, *RUN, "--steps", 8, "--zero", 2, "--checkpoint_dir", ck, expect=2, name="four")
        self.assertIn(f"dtl-train: error: checkpoint {ck}/checkpoint.pt was written with --zero 2 on 2 ranks; "
                      "this run has --zero 2 on 4 ranks: resume with the same", r.stdout + r.stderr)
        r, _ = self.train(2, *RUN, "--steps", 8, "--zero", 0, "--checkpoint_dir", ck, expect=2, name="stage0")
        self.assertIn("was written with --zero 2 on 2 ranks; this run has --zero 0: resume with the same, or make "
                      f"it whole first (dtl-train --consolidate {ck} OUT)", r.stdout + r.stderr)
        # Other buckets cut other pieces: the shards would not fit.
        r, _ = self.train(2, *RUN, "--steps", 8, "--zero", 2, "--bucket_mb", 0.01, "--checkpoint_dir", ck, expect=2,
                          name="buckets")
        self.assertIn(f"dtl-train: error: optimizer shard {ck}/zero-step4-rank0.pt was cut into other pieces "
                      "(another --bucket_mb, or another stage): resume with the same, or make the checkpoint whole "
                      f"first (dtl-train --consolidate {ck} OUT)", r.stdout + r.stderr)

    def consolidate(self, *args, expect=0):
        r = subprocess.run([DTL_TRAIN, "--consolidate", *map(str, args), *TINY], capture_output=True, text=True,
                           timeout=60)
        self.assertExitCode(r, expect)
        return r

    def test_a_consolidated_checkpoint_continues_at_another_world_size_and_stage(self):
        # The same 8 samples a step at every world size: 2 ranks x 2 x 2 micro-batches, 1 x 4 x 2, 4 x 1 x 2.
        def run(nproc, *args, **kwargs):
            batch = {1: 4, 2: 2, 4: 1}[nproc]
            return self.train(nproc, *TINY, "--batch_size", batch, "--grad_accum", 2, "--grad_clip", 0.5,
                              "--steps", 20, "--log_every", 1, *args, **kwargs)
        _, reference = run(2, "--zero", 0, name="reference")
        _, reference2 = run(2, "--zero", 2, name="reference2")
        ck = os.path.join(self.tmp, "ck")
        r, _ = run(2, "--zero", 2, "--checkpoint_dir", ck, "--checkpoint_every", 10, "--fail_at_step", 11,
                   expect=1, name="sharded")
        whole = os.path.join(self.tmp, "whole")
        r = self.consolidate(ck, whole)
        self.assertIn(f"dtl-train: {ck}/checkpoint.pt (step 10, --zero 2 on 2 ranks) made whole in "
                      f"{whole}/checkpoint.pt", r.stdout)
        for nproc, stage in ((1, 0), (4, 1), (2, 2), (4, 3)):
            with self.subTest(nproc=nproc, stage=stage):
                start = os.path.join(self.tmp, f"from{nproc}z{stage}")
                shutil.copytree(whole, start)
                r, out = run(nproc, "--zero", stage, "--checkpoint_dir", start, name=f"n{nproc}z{stage}")
                self.assertIn("at step 10", r.stdout)
                self.assertClose(self.losses(out), self.losses(reference)[10:], rel=1e-4, what="losses")
                self.assertClose(self.params(out, nproc), self.params(reference, 2), rel=1e-4, what="final parameters")
                if (nproc, stage) == (2, 2):  # the same run as before the whole checkpoint: every bit
                    self.assertEqual(self.params(out, 2), self.params(reference2, 2))
                    self.assertEqual(self.losses(out), self.losses(reference2)[10:])

        # What cannot be made whole is refused in one line.
        r = self.consolidate(whole, os.path.join(self.tmp, "again"), expect=2)
        self.assertIn(f"dtl-train: error: --consolidate: {whole}/checkpoint.pt is whole already (--zero 0)", r.stderr)
        r = self.consolidate(ck, ck, expect=2)
        self.assertIn(f"dtl-train: error: --consolidate: OUT must be another directory than {ck}", r.stderr)
        os.remove(os.path.join(ck, "zero-step10-rank1.pt"))
        r = self.consolidate(ck, os.path.join(self.tmp, "missing"), expect=2)
        self.assertIn(f"is step 10 of --zero 2 on 2 ranks, but rank 1's shard {ck}/zero-step10-rank1.pt is missing",
                      r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)

    def accelerate_file(self, text):
        path = os.path.join(self.tmp, "accelerate.yaml")
        with open(path, "w") as f:
            f.write("compute_environment: LOCAL_MACHINE\nnum_machines: 1\nnum_processes: 2\nmain_process_port: 0\n"
                    "use_cpu: true\n" + text)
        return path

    def test_accelerates_deepspeed_and_fsdp_files_choose_the_stage(self):
        _, base = self.train(2, *RUN, "--steps", 6, "--zero", 2, name="flag")
        for text, source in (("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\n",
                              "ACCELERATE_DEEPSPEED_ZERO_STAGE"),
                             ("distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: SHARD_GRAD_OP\n",
                              "FSDP_SHARDING_STRATEGY")):
            with self.subTest(source=source):
                r, out = self.train(2, *RUN, "--steps", 6, name=source,
                                    launcher_args=("--config_file", self.accelerate_file(text)))
                self.assertIn(f"zero 2 ({source})", r.stdout)
                self.assertEqual(self.params(out, 2), self.params(base, 2))
        # accelerate's FSDP default, FULL_SHARD, and DeepSpeed's stage 3 shard the parameters too.
        _, base = self.train(2, *RUN, "--steps", 6, "--zero", 3, name="flag3")
        for text, source in (("distributed_type: FSDP\n", "FSDP_SHARDING_STRATEGY"),
                             ("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n",
                              "ACCELERATE_DEEPSPEED_ZERO_STAGE")):
            with self.subTest(source=source, stage=3):
                r, out = self.train(2, *RUN, "--steps", 6, name=source + "3",
                                    launcher_args=("--config_file", self.accelerate_file(text)))
                self.assertIn(f"zero 3 ({source})", r.stdout)
                self.assertEqual(self.params(out, 2), self.params(base, 2))

    def test_an_offloaded_optimizer_on_a_cpu_run_changes_nothing_and_says_so(self):
        _, base = self.train(2, *RUN, "--steps", 6, "--zero", 2, name="kept")
        text = "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\n  offload_optimizer_device: cpu\n"
        r, out = self.train(2, *RUN, "--steps", 6, name="offload", launcher_args=("--config_file", self.accelerate_file(text)))
        self.assertIn("offload_optimizer cpu (ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE) (a CPU run: the state is in "
                      "host memory already)", r.stdout)
        self.assertEqual(self.params(out, 2), self.params(base, 2))
        # DeepSpeed's NVMe offload is refused, naming the variable the file gave.
        text = text.replace("device: cpu", "device: nvme")
        r = self.launch("--standalone", "--nproc_per_node=2", "--config_file", self.accelerate_file(text), "--no_python",
                        DTL_TRAIN, *map(str, TINY), timeout=120)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("dtl-train: error: ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE=nvme: dtl-train offloads the "
                      "optimizer to host memory (cpu), not to NVMe", r.stdout + r.stderr)


if __name__ == "__main__":
    main()
