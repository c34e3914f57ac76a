"""Messages about a rendezvous setting name what really gave its value: the token warning fires only
for a token typed on the command line, and an address that does not resolve is named as it was given
(--local_addr, PET_LOCAL_ADDR, --master_addr), never as another flag."""
import os
import socket

from common import LaunchTest, main

EXPOSED = "on the command line is visible to every user of this machine (ps)"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SettingNames(LaunchTest):
    def two_nodes(self, *args, env=None):
        """A two-node static job on loopback that runs `true`; both nodes' results."""
        port = free_port()
        nodes = [self.start("--nnodes=2", f"--node_rank={r}", f"--master_port={port}", *args, "--no_python", "true",
                            env=env) for r in range(2)]
        results = [n.finish() for n in nodes]
        for r in results:
            self.assertExitCode(r, 0)
        return results

    def config_file(self, text):
        path = os.path.join(self.tmp, "cfg.yaml")
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_a_token_typed_as_a_flag_is_warned_about(self):
        for r in self.two_nodes("--rdzv_token=s3cret"):
            self.assertIn(f"dtlaunch: warning: --rdzv_token {EXPOSED}; prefer --rdzv_token_file or "
                          "DTLAUNCH_RDZV_TOKEN\n", r.stderr)

    def test_a_token_from_a_variable_is_not_warned_about_as_if_typed(self):
        for variable in ("PET_RDZV_TOKEN", "DTLAUNCH_RDZV_TOKEN"):
            for r in self.two_nodes(env=self.env(**{variable: "s3cret"})):
                self.assertNotIn(EXPOSED, r.stderr, variable)
                self.assertNotIn("no --rdzv_token", r.stderr, variable)  # the token was used

    def test_a_token_from_the_config_file_is_not_warned_about_as_if_typed(self):
        path = self.config_file("rdzv_token: s3cret\n")
        for r in self.two_nodes("--config_file", path):
            self.assertNotIn(EXPOSED, r.stderr)
            self.assertNotIn("no --rdzv_token", r.stderr)

    def test_tokens_from_a_variable_and_a_config_file_are_the_same_token(self):
        port = free_port()
        path = self.config_file("rdzv_token: s3cret\n")
        nodes = [self.start("--nnodes=2", "--node_rank=0", f"--master_port={port}", "--no_python", "true",
                            env=self.env(PET_RDZV_TOKEN="s3cret")),
                 self.start("--nnodes=2", "--node_rank=1", f"--master_port={port}", "--config_file", path,
                            "--no_python", "true")]
        for n in nodes:
            self.assertExitCode(n.finish(), 0)

    def unresolvable(self, *args, env=None):
        r = self.launch(*args, "--no_python", "true", env=env)
        self.assertExitCode(r, 2)
        self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
        return r.stderr

    def test_a_local_addr_that_does_not_resolve_is_named_local_addr(self):
        err = self.unresolvable("--nnodes", "2", "--node_rank", "0", "--local_addr", "no-such-host.invalid",
                                "--master_addr", "127.0.0.1", "--master_port", free_port())
        self.assertRegex(err, r"^dtlaunch: error: cannot find a free port for the workers: cannot resolve "
                              r"--local_addr 'no-such-host.invalid': ")
        self.assertNotIn("--master_addr", err)

    def test_a_local_addr_from_a_variable_is_named_by_its_variable(self):
        err = self.unresolvable("--nnodes", "2", "--node_rank", "0", "--master_port", free_port(),
                                env=self.env(PET_LOCAL_ADDR="no-such-host.invalid"))
        self.assertRegex(err, r"^dtlaunch: error: cannot find a free port for the workers: cannot resolve "
                              r"PET_LOCAL_ADDR 'no-such-host.invalid': ")

    def test_a_master_addr_that_does_not_resolve_is_named_as_given(self):
        err = self.unresolvable("--master_addr", "no-such-host.invalid")
        self.assertRegex(err, r"^dtlaunch: error: cannot resolve --master_addr 'no-such-host.invalid': ")
        err = self.unresolvable(env=self.env(PET_MASTER_ADDR="no-such-host.invalid"))
        self.assertRegex(err, r"^dtlaunch: error: cannot resolve PET_MASTER_ADDR 'no-such-host.invalid': ")


if __name__ == "__main__":
    main()
