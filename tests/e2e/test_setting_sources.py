"""Messages name the source that really gave a setting: the flag as typed, a variable, a file."""
import os

from common import LaunchTest, free_port, main

PS_WARNING = "--rdzv_token on the command line is visible to every user of this machine (ps)"


class SettingSources(LaunchTest):
    def lone_node(self, *args, env=None):
        """Node 0 of 2 whose partner never comes: the rendezvous gives up after a second."""
        return self.launch("--nnodes=2", "--node_rank=0", "--master_addr=127.0.0.1", f"--master_port={free_port()}",
                           "--rdzv_conf=timeout=1", *args, "--no_python", "true", env=env)

    def test_only_a_token_typed_on_the_command_line_warns_that_ps_shows_it(self):
        path = os.path.join(self.tmp, "tok.yaml")
        with open(path, "w") as f:
            f.write("rdzv_token: s3cret\n")
        for how, args, env in (("PET_RDZV_TOKEN", [], self.env(PET_RDZV_TOKEN="s3cret")),
                               ("DTLAUNCH_RDZV_TOKEN", [], self.env(DTLAUNCH_RDZV_TOKEN="s3cret")),
                               ("a config file", ["--config_file", path], None)):
            with self.subTest(how):
                r = self.lone_node(*args, env=env)
                self.assertNotIn(PS_WARNING, r.stderr)
                self.assertNotIn("no --rdzv_token", r.stderr)  # the token is in effect
        r = self.lone_node("--rdzv-token=s3cret")
        self.assertIn(PS_WARNING, r.stderr)

    def test_a_flag_typed_with_dashes_is_named_as_typed(self):
        r = self.launch("--nproc-per-node=0", "--no_python", "true")
        self.assertEqual((r.returncode, r.stderr), (2, "dtlaunch: error: --nproc-per-node: expected a positive "
                                                       "integer or one of gpu, cpu, auto (got '0')\n"))


if __name__ == "__main__":
    main()
