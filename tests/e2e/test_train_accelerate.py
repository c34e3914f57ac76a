"""dtl-train does what an accelerate config file says, under `dtlaunch --config_file FILE --no_python
dtl-train`: the file (in accelerate's own format) becomes accelerate's variables, and dtl-train takes
gradient accumulation, clipping and FSDP's activation checkpointing from them, naming each source
in its start line. A run from the file trains exactly as a run with the same flags. Parameter
sharding, which dtl-train cannot do, is refused in one line."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
from train_common import DTL_TRAIN, TINY, TrainTest, needs_trainer  # noqa: E402

from common import main  # noqa: E402

STEPS = ["--steps", 12, "--log_every", 3, "--batch_size", 4, "--lr", "1e-2"]


@needs_trainer
class TrainFromAccelerateFiles(TrainTest):
    def config(self, text):
        path = os.path.join(self.tmp, "accelerate.yaml")
        with open(path, "w") as f:
            f.write("compute_environment: LOCAL_MACHINE\nmachine_rank: 0\nnum_machines: 1\nnum_processes: 2\n"
                    "main_process_port: 0\nuse_cpu: true\n" + text)
        return path

    def test_a_deepspeed_file_gives_grad_accumulation_and_clipping_as_the_flags_do(self):
        path = self.config("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 0\n"
                           "  gradient_accumulation_steps: 3\n  gradient_clipping: 0.25\n")
        r, from_file = self.train(2, *TINY, *STEPS, name="file", launcher_args=("--config_file", path))
        self.assertIn("grad_accum 3 (ACCELERATE_GRADIENT_ACCUMULATION_STEPS)", r.stdout)
        self.assertIn("grad_clip 0.25 (ACCELERATE_GRADIENT_CLIPPING)", r.stdout)
        r, from_flags = self.train(2, *TINY, *STEPS, "--grad_accum", 3, "--grad_clip", 0.25, name="flags")
        self.assertIn("grad_accum 3 (--grad_accum)", r.stdout)
        self.assertEqual(self.losses(from_file), self.losses(from_flags))
        self.assertEqual(self.params(from_file, 2), self.params(from_flags, 2))
        # The default differs: the file's settings took effect.
        _, plain = self.train(2, *TINY, *STEPS, name="plain")
        self.assertNotEqual(self.losses(plain), self.losses(from_file))

    def test_an_fsdp_file_with_activation_checkpointing_trains_as_without_it(self):
        path = self.config("distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: NO_SHARD\n"
                           "  fsdp_activation_checkpointing: true\n")
        r, checkpointed = self.train(2, *TINY, *STEPS, name="checkpointed", launcher_args=("--config_file", path))
        self.assertIn("activation_checkpointing on (FSDP_ACTIVATION_CHECKPOINTING)", r.stdout)
        r, kept = self.train(2, *TINY, *STEPS, name="kept")
        self.assertIn("activation_checkpointing off (default)", r.stdout)
        self.assertEqual(self.losses(checkpointed), self.losses(kept))
        self.assertEqual(self.params(checkpointed, 2), self.params(kept, 2))

    def test_sharding_within_a_node_is_refused_in_one_line(self):
        path = self.config("distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: HYBRID_SHARD\n")
        r = self.launch("--config_file", path, "--no_python", DTL_TRAIN, *TINY, "--steps", 1)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("dtl-train: error: FSDP_SHARDING_STRATEGY=HYBRID_SHARD: dtl-train shards over every rank "
                      "(FULL_SHARD, SHARD_GRAD_OP) or not at all (NO_SHARD), not within a node", r.stdout + r.stderr)

if __name__ == "__main__":
    main()
