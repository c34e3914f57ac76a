"""Bad input: one clear line naming what was wrong, exit 2 (127 for a missing program), nothing run."""
import os
import stat

from common import LaunchTest, main


class BadInput(LaunchTest):
    def check(self, args, message, code=2, env=None):
        r = self.launch(*args, env=env)
        self.assertEqual((r.returncode, r.stderr, r.stdout), (code, "dtlaunch: error: " + message + "\n", ""))

    def test_an_unknown_flag(self):
        self.check(["--nproc_per_nodes=2", "train.py"], "unknown option --nproc_per_nodes=2 (see dtlaunch --help)")

    def test_nproc_per_node_zero_negative_and_words(self):
        for value in ("0", "-1", "abc"):
            self.check([f"--nproc_per_node={value}", "--no_python", "true"],
                       f"--nproc_per_node: expected a positive integer or one of gpu, cpu, auto (got '{value}')")

    def test_a_bad_pet_variable_is_named(self):
        self.check(["--no_python", "true"],
                   "PET_NPROC_PER_NODE: expected a positive integer or one of gpu, cpu, auto (got 'x')",
                   env=self.env(PET_NPROC_PER_NODE="x"))

    def test_gpu_with_no_gpus(self):
        self.check(["--nproc_per_node=gpu", "--no_python", "true"],
                   "--nproc_per_node=gpu but no GPU is visible (none found through NVML or nvidia-smi; "
                   "--fake_gpus N pretends to have N)")

    def test_a_run_id_too_long_for_a_file_name_is_bad_input_and_leaves_no_folder(self):
        tmpdir = os.path.join(self.tmp, "tmp")
        os.mkdir(tmpdir)
        r = self.launch(f"--run_id={'j' * 300}", "--master_port=0", "--no_python", "true",
                        env=self.env(TMPDIR=tmpdir))
        self.assertEqual((r.returncode, r.stdout), (2, ""))
        self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
        self.assertRegex(r.stderr, r"^dtlaunch: error: --run_id: expected at most 248 bytes")
        self.assertEqual(os.listdir(tmpdir), [])

    def test_a_missing_program(self):
        self.check(["--no_python", "no-such-program-xyz"], "program 'no-such-program-xyz' not found in PATH", 127)

    def test_a_missing_script(self):
        self.check(["missing_train.py"],
                   "script 'missing_train.py' not found (use --no_python to run a program from PATH)", 127)

    def test_a_program_that_is_not_executable(self):
        path = os.path.join(self.tmp, "train.sh")
        open(path, "w").close()
        os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
        self.check(["--no_python", path], f"'{path}' is not an executable file")

    def test_module_with_no_python(self):
        self.check(["-m", "--no_python", "true"],
                   "--module: --module runs python -m and cannot be combined with --no_python")

    def test_no_program(self):
        self.check(["--nproc_per_node=2"], "no program to launch (usage: dtlaunch [options] program [args...])")

    def test_negative_shutdown_timeout(self):
        self.check(["--shutdown_timeout=-1", "--no_python", "true"],
                   "--shutdown_timeout: expected seconds >= 0 (got '-1')")

    def test_bad_redirects(self):
        self.check(["--redirects=4", "--no_python", "true"],
                   "--redirects: expected 0-3 (0 none, 1 stdout, 2 stderr, 3 both) or local_rank:0-3 pairs "
                   "like 0:1,1:3 (got '4')")

    def test_bad_signal_name(self):
        self.check(["--signals_to_handle=SIGFOO", "--no_python", "true"],
                   "--signals_to_handle: unknown signal 'SIGFOO' (use SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, "
                   "SIGUSR2, SIGALRM, SIGXCPU)")

    def test_gpu_ids_beyond_the_visible_gpus(self):
        self.check(["--fake_gpus=2", "--gpu_ids=0,5", "--no_python", "true"],
                   "--gpu_ids: GPU 5 is not visible (visible: 0,1)")
        self.check(["--fake_gpus=2", "--no_python", "true"], "PET_GPU_IDS: GPU 5 is not visible (visible: 0,1)",
                   env=self.env(PET_GPU_IDS="5"))

    def test_bad_node_counts_and_ranks(self):
        self.check(["--nnodes=2:1", "--no_python", "true"],
                   "--nnodes: expected N or MIN:MAX with 0 < MIN <= MAX (got '2:1')")
        self.check(["--nnodes=0", "--no_python", "true"],
                   "--nnodes: expected N or MIN:MAX with 0 < MIN <= MAX (got '0')")
        self.check(["--nnodes=2", "--node_rank=2", "--no_python", "true"],
                   "--node_rank: expected a node rank in 0..1 (got '2')")

    def test_c10d_needs_an_endpoint_that_parses(self):
        self.check(["--nnodes=2", "--rdzv_backend=c10d", "--no_python", "true"],
                   "--rdzv_backend=c10d needs --rdzv_endpoint host[:port]")
        self.check(["--nnodes=2", "--no_python", "true"],
                   "rdzv_backend=c10d (from PET_RDZV_BACKEND) needs --rdzv_endpoint host[:port]",
                   env=self.env(PET_RDZV_BACKEND="c10d"))
        self.check(["--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=host:99999", "--no_python", "true"],
                   "--rdzv_endpoint: port '99999' is not in 1..65535")
        self.check(["--rdzv_conf=join_timeout=", "--no_python", "true"], "--rdzv_conf: join_timeout has no value")

    def test_an_rdzv_conf_key_torch_ignores_is_ignored_with_a_warning_that_names_it(self):
        # torch's rendezvous handlers read the keys they know and ignore the rest; so does dtlaunch, saying so
        r = self.launch("--master_port=0", "--rdzv_conf=join_timout=5", "--no_python", "true")
        self.assertExitCode(r, 0)
        self.assertIn("dtlaunch: warning: --rdzv_conf: ignoring 'join_timout' (torch's rendezvous reads no such key)\n",
                      r.stderr)

    def test_a_log_dir_that_cannot_be_created(self):
        not_a_dir = os.path.join(self.tmp, "file")
        open(not_a_dir, "w").close()
        out = os.path.join(self.tmp, "touched")
        os.makedirs(out)
        r = self.launch("--master_port=0", "--log_dir", os.path.join(not_a_dir, "logs"), "--tee=3",
                        *self.worker("touch", out))
        self.assertEqual((r.returncode, r.stdout, r.stderr.count("\n")), (2, "", 1), r.stderr)
        self.assertIn("cannot create --log_dir", r.stderr)
        self.assertEqual(os.listdir(out), [])

    def test_a_rendezvous_address_that_is_not_this_machines_or_does_not_resolve(self):
        # 192.0.2.1 is a documentation address: no machine has it, so this node cannot host there
        self.check(["--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=192.0.2.1:29400", "--rdzv_conf=is_host=1",
                    "--no_python", "true"], "cannot listen on 192.0.2.1:29400: Cannot assign requested address")
        for node_rank in (0, 1):  # node 0 hosts there, node 1 connects there
            r = self.launch("--nnodes=2", f"--node_rank={node_rank}", "--master_addr=no-such-host.invalid",
                            "--rdzv_conf=timeout=2", "--no_python", "true")
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
            self.assertRegex(r.stderr, r"^dtlaunch: error: .*cannot resolve the rendezvous (address|endpoint) "
                                       r"'no-such-host.invalid'")

    def test_rdzv_server_bad_input_names_the_flag_in_one_short_line(self):
        for args, message in ((["--max_restarts=-1"], "--max_restarts: expected an integer >= 0 (got '-1')"),
                              (["--nnodes=2:1"], "--nnodes: expected N or MIN:MAX with 0 < MIN <= MAX (got '2:1')"),
                              (["--rdzv_conf=join_timeout=0"], "--rdzv_conf: join_timeout expects seconds >= 0.001 (got '0')")):
            r = self.launch("rdzv-server", *args)
            self.assertEqual((r.returncode, r.stderr, r.stdout), (2, "dtlaunch rdzv-server: error: " + message + "\n", ""))

    def test_rdzv_server_refuses_a_token_file_set_empty_wherever_it_is_set(self):
        for args, env, message in ((["--rdzv_token_file="], {}, "--rdzv_token_file is empty"),
                                   ([], {"PET_RDZV_TOKEN_FILE": ""}, "PET_RDZV_TOKEN_FILE is set but empty"),
                                   ([], {"PET_RDZV_TOKEN": ""}, "PET_RDZV_TOKEN is set but empty")):
            r = self.launch("rdzv-server", "--host=127.0.0.1", *args, env=self.env(**env), timeout=10)
            self.assertEqual((r.returncode, r.stderr, r.stdout), (2, "dtlaunch rdzv-server: error: " + message + "\n", ""))

    def test_an_agent_refuses_a_token_file_set_empty(self):
        self.check(["--nnodes=2", "--rdzv_token_file=", "--no_python", "true"], "--rdzv_token_file is empty")
        self.check(["--nnodes=2", "--no_python", "true"], "PET_RDZV_TOKEN_FILE is set but empty",
                   env=self.env(PET_RDZV_TOKEN_FILE=""))

    def test_a_value_missing_after_a_flag(self):
        r = self.launch("--nproc_per_node")
        self.assertEqual(r.returncode, 2)
        self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
        self.assertTrue(r.stderr.startswith("dtlaunch: error: "), r.stderr)

    def test_help_and_version(self):
        r = self.launch("--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("--nproc_per_node", r.stdout)
        r = self.launch("--version")
        self.assertEqual(r.returncode, 0)
        self.assertRegex(r.stdout, r"^dtlaunch \d+\.\d+\.\d+\n$")


if __name__ == "__main__":
    main()
