"""An address that does not resolve is named as it was given (--local_addr, PET_LOCAL_ADDR,
--master_addr, PET_MASTER_ADDR), never as another flag: rendezvous/ names no flag, its callers do.
(The token warning's sources: test_setting_sources.py.)"""

from common import LaunchTest, free_port, main


class SettingNames(LaunchTest):
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
