"""Config files through the real binary: which file is read, accelerate's files on fake GPUs, the one
precedence rule (flag > variable > file > default), --print_config, and bad files (exit 2, nothing run)."""
import os
import re
import resource
import subprocess

from common import DTLAUNCH, LaunchTest, main, parse_env


# Prints what accelerate's scripts read, one line per worker.
SHOW_ACCELERATE = ["--no_python", "/bin/sh", "-c",
                   'echo "mp=${ACCELERATE_MIXED_PRECISION-unset} cpu=${ACCELERATE_USE_CPU-unset} '
                   'debug=${ACCELERATE_DEBUG_MODE-unset} nccl=${NCCL_DEBUG-unset} cvd=${CUDA_VISIBLE_DEVICES-unset}"']


class ConfigFiles(LaunchTest):
    def setUp(self):
        super().setUp()
        self.home = os.path.join(self.tmp, "home")
        os.makedirs(self.home)

    def env(self, **extra):
        """A home of the test's own, so that nobody's real default file takes part."""
        env = super().env(**{"HOME": self.home, **extra})
        if "XDG_CONFIG_HOME" not in extra:
            env.pop("XDG_CONFIG_HOME", None)
        return env

    def launch_in(self, cwd, *args):
        return subprocess.run([DTLAUNCH, *args], env=self.env(), cwd=cwd, capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)

    def write(self, name, text):
        path = os.path.join(self.tmp, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_the_default_file_is_used_when_present_and_xdg_config_home_comes_first(self):
        self.write("home/.config/dtlaunch/default_config.yaml", "nproc_per_node: 2\nmaster_port: 0\n")
        r = self.launch(*self.worker("env"))
        self.assertExitCode(r, 0)
        self.assertEqual(sorted(parse_env(r.stdout)), [0, 1])
        self.write("xdg/dtlaunch/default_config.yaml", "nproc_per_node: 3\nmaster_port: 0\n")
        r = self.launch(*self.worker("env"), env=self.env(XDG_CONFIG_HOME=os.path.join(self.tmp, "xdg")))
        self.assertExitCode(r, 0)
        self.assertEqual(sorted(parse_env(r.stdout)), [0, 1, 2])
        # DTLAUNCH_CONFIG_FILE names another file; empty, it turns the default off.
        other = self.write("other.yaml", "nproc_per_node: 4\nmaster_port: 0\n")
        r = self.launch(*self.worker("env"), env=self.env(DTLAUNCH_CONFIG_FILE=other))
        self.assertEqual(sorted(parse_env(r.stdout)), [0, 1, 2, 3])
        r = self.launch("--master_port=0", *self.worker("env"), env=self.env(DTLAUNCH_CONFIG_FILE=""))
        self.assertEqual(sorted(parse_env(r.stdout)), [0])

    def test_an_accelerate_multi_gpu_file_launches_its_layout_on_fake_gpus(self):
        path = self.write("acc.yaml", "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\n"
                                      "num_machines: 1\nnum_processes: 2\ngpu_ids: '1,3'\nmain_process_port: 0\n"
                                      "mixed_precision: no\ndebug: true\nuse_cpu: false\n")
        r = self.launch("--config_file", path, "--fake_gpus=4", "--gpu_visibility=per_worker", *self.worker("env"))
        self.assertExitCode(r, 0)
        ranks = parse_env(r.stdout)
        self.assertEqual({lr: e["CUDA_VISIBLE_DEVICES"] for lr, e in ranks.items()}, {0: "1", 1: "3"})
        self.assertEqual({e["WORLD_SIZE"] for e in ranks.values()}, {"2"})
        # accelerate's own layout, the default for its files: every worker sees gpu_ids and picks cuda:LOCAL_RANK.
        r = self.launch("--config_file", path, "--fake_gpus=4", *self.worker("env"))
        self.assertEqual({lr: e["CUDA_VISIBLE_DEVICES"] for lr, e in parse_env(r.stdout).items()}, {0: "1,3", 1: "1,3"})
        r = self.launch("--config_file", path, "--fake_gpus=4", "--gpu_visibility=per_worker", *SHOW_ACCELERATE)
        self.assertExitCode(r, 0)
        self.assertEqual(sorted(re.findall(r"^\[default\d\]:(.*)$", r.stdout, re.M)),
                         ["mp=no cpu=unset debug=true nccl=unset cvd=1", "mp=no cpu=unset debug=true nccl=unset cvd=3"])

    def test_a_multi_gpu_file_on_a_machine_without_gpus_is_refused_naming_the_file(self):
        path = self.write("acc.yaml", "distributed_type: MULTI_GPU\nnum_machines: 1\n")
        r = self.launch("--config_file", path, *self.worker("env"))
        self.assertEqual((r.returncode, r.stdout), (2, ""))
        self.assertEqual(r.stderr, f"dtlaunch: error: nproc_per_node=gpu (from {path}:1:19: distributed_type (no "
                                   "num_processes: one per GPU)) but no GPU is visible (none found through NVML or "
                                   "nvidia-smi; --fake_gpus N pretends to have N)\n")

    def test_an_accelerate_cpu_file_leaves_the_gpus_alone(self):
        path = self.write("cpu.yaml", "distributed_type: MULTI_CPU\nnum_processes: 3\nmain_process_port: 0\n"
                                      "mixed_precision: bf16\nuse_cpu: true\n")
        r = self.launch("--config_file", path, "--fake_gpus=4", *SHOW_ACCELERATE)
        self.assertExitCode(r, 0)
        self.assertEqual(re.findall(r"^\[default\d\]:(.*)$", r.stdout, re.M),
                         ["mp=bf16 cpu=True debug=unset nccl=unset cvd=unset"] * 3)  # accelerate's str(True)

    def test_flags_and_variables_win_over_the_file(self):
        path = self.write("c.yaml", "nproc_per_node: 2\nmaster_port: 0\nrole: fromfile\nmixed_precision: bf16\n"
                                    "env:\n  NCCL_DEBUG: INFO\n")
        r = self.launch("--config_file", path, "--nproc_per_node=3", *SHOW_ACCELERATE,
                        env=self.env(PET_ROLE="frompet", ACCELERATE_MIXED_PRECISION="fp16"))
        self.assertExitCode(r, 0)
        lines = re.findall(r"^\[frompet\d\]:(.*)$", r.stdout, re.M)
        self.assertEqual(lines, ["mp=fp16 cpu=unset debug=unset nccl=INFO cvd=unset"] * 3)
        r = self.launch("--config_file", path, *SHOW_ACCELERATE, env=self.env(NCCL_DEBUG="WARN"))
        self.assertEqual(re.findall(r"^\[fromfile\d\]:(.*)$", r.stdout, re.M),
                         ["mp=bf16 cpu=unset debug=unset nccl=WARN cvd=unset"] * 2)

    def test_print_config_shows_a_multi_node_accelerate_file_per_node(self):
        path = self.write("mn.yaml", "distributed_type: MULTI_GPU\nnum_machines: 2\nmachine_rank: 1\n"
                                     "main_process_ip: 10.0.0.1\nmain_process_port: 29500\nnum_processes: 16\n"
                                     "same_network: true\nmixed_precision: bf16\n")
        r = self.launch("--config_file", path, "--max_restarts=2", "--print_config", env=self.env(PET_ROLE="r"))
        self.assertExitCode(r, 0)
        self.assertEqual(r.stderr, "")
        settings = {m[0]: (m[1], m[2]) for m in re.findall(r"^(\w+): (\S+) +# (.*)$", r.stdout, re.M)}
        self.assertEqual(settings["nproc_per_node"], ("8", f"{path}:6:16: num_processes (total 16 over 2 machines)"))
        self.assertEqual(settings["nnodes"], ("2", f"{path}:2:15: num_machines"))
        self.assertEqual(settings["node_rank"], ("1", f"{path}:3:15: machine_rank"))
        self.assertEqual(settings["master_addr"], ("10.0.0.1", f"{path}:4:18: main_process_ip"))
        self.assertEqual(settings["max_restarts"], ("2", "--max_restarts"))
        self.assertEqual(settings["role"], ("r", "PET_ROLE"))
        self.assertEqual(settings["mixed_precision"], ("bf16", f"{path}:8:18: mixed_precision"))
        self.assertEqual(settings["standalone"], ("false", "default"))
        self.assertIn(f"# config file: {path} (accelerate's format)\n", r.stdout)

    def test_sections_reach_the_workers_and_only_what_no_worker_sees_gets_a_warning(self):
        path = self.write("ds.yaml", "distributed_type: DEEPSPEED\nnum_processes: 2\nmain_process_port: 0\n"
                                     "deepspeed_config:\n  zero_stage: 2\n  zero_stagge: 3\nfsdp_config: {}\n"
                                     "dynamo_config:\n  dynamo_backend: INDUCTOR\nmegatron_lm_config:\n  tp: 2\n")
        r = self.launch("--config_file", path, *self.worker("env"))
        self.assertExitCode(r, 0)
        warnings = [l for l in r.stderr.splitlines() if "warning" in l]
        self.assertEqual(warnings, [
            f"dtlaunch: warning: {path}: ignoring deepspeed_config.zero_stagge (not among accelerate launch's settings, "
            "so accelerate passes them to no worker either)",
            f"dtlaunch: warning: {path}: ignoring megatron_lm_config (accelerate features that dtlaunch does not set up; "
            "it launches the processes only)"])
        r = self.launch("--config_file", path, "--no_python", "/bin/sh", "-c",
                        'echo "$ACCELERATE_USE_DEEPSPEED $ACCELERATE_DEEPSPEED_ZERO_STAGE $ACCELERATE_CONFIG_DS_FIELDS '
                        '${ACCELERATE_DYNAMO_BACKEND-unset}"')
        # accelerate's DeepSpeed launcher sets no dynamo variables
        self.assertEqual(re.findall(r"^\[default\d\]:(.*)$", r.stdout, re.M), ["true 2 zero_stage,zero_stagge unset"] * 2)

    def test_a_bad_file_is_one_line_exit_2_and_nothing_runs(self):
        out = os.path.join(self.tmp, "touched")
        os.makedirs(out)
        cases = {
            "nproc_per_nod: 2\n": "bad.yaml:1:1: nproc_per_nod: unknown key (did you mean nproc_per_node?)",
            "max_restarts: [1\n": "bad.yaml:2:1: YAML syntax error: end of sequence flow not found",
            "standalone: perhaps\n": "bad.yaml:1:13: standalone: expected true or false, got 'perhaps'",
            "nproc_per_node: 4\ngpu_ids: [0, 1]\n":
                "bad.yaml:1:17: nproc_per_node: expected at most 2 workers per node, the GPUs listed in gpu_ids "
                "(bad.yaml:2:10: gpu_ids), got '4'",
            "distributed_type: MULTI_GPU\nnum_machines: 2\nmachine_rank: 2\nmain_process_ip: h\n":
                "bad.yaml:3:15: machine_rank: expected a rank in 0..1 for num_machines=2, got 2",
            "distributed_type: MULTI_GPU\nnum_machines: 2\nmain_process_ip: h\nnum_processes: 5\n":
                "bad.yaml:4:16: num_processes: expected a total divisible by num_machines=2 (num_processes counts "
                "the processes of all machines), got 5",
        }
        for text, message in cases.items():
            with self.subTest(text=text):
                self.write("bad.yaml", text)
                r = self.launch_in(self.tmp, "--config_file", "bad.yaml", *self.worker("touch", out))
                self.assertEqual((r.returncode, r.stderr, r.stdout), (2, f"dtlaunch: error: {message}\n", ""))
                self.assertEqual(os.listdir(out), [])
        r = self.launch("--config_file", os.path.join(self.tmp, "missing.yaml"), *self.worker("env"))
        self.assertEqual((r.returncode, r.stderr), (2, f"dtlaunch: error: --config_file: cannot read "
                                                       f"'{self.tmp}/missing.yaml': No such file or directory\n"))

    def bounded(self, *args, cwd=None):
        """dtlaunch with 256 MiB of address space and 10 s: a parse that grows without bound ends in
        bad_alloc (or the timeout) at once, instead of eating the machine."""
        def limit():
            resource.setrlimit(resource.RLIMIT_AS, (256 << 20, 256 << 20))
        return subprocess.run([DTLAUNCH, *args], env=self.env(), cwd=cwd or self.tmp, capture_output=True, text=True,
                              timeout=10, stdin=subprocess.DEVNULL, preexec_fn=limit)

    def test_a_one_byte_file_that_yaml_cpp_0_7_loops_on_is_a_syntax_error_in_bounded_memory(self):
        # yaml-cpp 0.7's issue #1040: `,` starts no node, and LoadAll added empty documents until bad_alloc.
        cases = {",": "c.yaml:1:1: YAML syntax error: unexpected ','",
                 "--- ,": "c.yaml:1:5: YAML syntax error: unexpected ','",
                 "\n\n ,\n": "c.yaml:3:2: YAML syntax error: unexpected ','"}
        for text, message in cases.items():
            with self.subTest(text=text):
                self.write("c.yaml", text)
                r = self.bounded("--config_file", "c.yaml", "--print_config")
                self.assertEqual((r.returncode, r.stderr, r.stdout), (2, f"dtlaunch: error: {message}\n", ""))
                r = self.bounded("config", "validate", "c.yaml")
                self.assertEqual((r.returncode, r.stderr), (2, f"dtlaunch: error: {message}\n"))
        # The default file, on any launch.
        self.write("home/.config/dtlaunch/default_config.yaml", ",")
        r = self.bounded(*self.worker("env"))
        self.assertEqual((r.returncode, r.stderr),
                         (2, f"dtlaunch: error: {self.home}/.config/dtlaunch/default_config.yaml:1:1: YAML syntax "
                             "error: unexpected ','\n"))

    def test_a_file_past_256_kib_and_a_value_past_16_kib_are_refused_naming_where(self):
        self.write("big.yaml", "log_dir: " + "x" * 3_000_000 + "\n")
        r = self.bounded("--config_file", "big.yaml", "--print_config")
        self.assertEqual((r.returncode, r.stderr), (2, "dtlaunch: error: --config_file: cannot read 'big.yaml': "
                                                       "larger than 256 KiB, too large for a config file\n"))
        r = self.bounded("--config_file", "/dev/zero", "--print_config")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.write("long.yaml", "role: a\nlog_dir: " + "x" * 20000 + "\n")
        r = self.bounded("--config_file", "long.yaml", "--print_config")
        self.assertEqual((r.returncode, r.stderr), (2, "dtlaunch: error: long.yaml:2:10: log_dir: expected a value of "
                                                       "at most 16384 bytes, got 20000\n"))

    def test_print_config_prints_a_long_value_once_not_once_per_line(self):
        # Every line was padded to the longest value: a 100 kB value printed 9 MB.
        r = self.bounded("--print_config", "--log_dir=" + "x" * 100_000)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertLess(len(r.stdout), 110_000)
        self.assertRegex(r.stdout, r"\nnnodes: 1 +# default\n")  # short lines still lined up

    def test_a_map_inside_itself_through_an_alias_is_named_in_a_warning_not_a_crash(self):
        # Looking for set values recursed through the alias until the stack overflowed (SIGSEGV).
        self.write("self.yaml", "distributed_type: MULTI_GPU\nmegatron_lm_config: &l1 {a: 0, b: *l1}\n")
        r = self.bounded("--config_file", "self.yaml", "--print_config", "--fake_gpus=2")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stderr.startswith("dtlaunch: warning: self.yaml: ignoring megatron_lm_config ("), r.stderr)

    def test_a_value_with_a_newline_or_an_escape_gives_a_one_line_error(self):
        self.write("nl.yaml", 'max_restarts: "1\\n\\e[2J"\n')
        r = self.bounded("--config_file", "nl.yaml", "--print_config")
        self.assertEqual((r.returncode, r.stderr), (2, "dtlaunch: error: nl.yaml:1:15: max_restarts: expected an "
                                                       "integer >= 0, got '1\\n\\x1b[2J'\n"))
        r = self.bounded("--max_restarts=1\nforged line", "--print_config")
        self.assertEqual((r.returncode, r.stderr), (2, "dtlaunch: error: --max_restarts: expected an integer >= 0 "
                                                       "(got '1\\nforged line')\n"))


if __name__ == "__main__":
    main()
