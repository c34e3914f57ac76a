"""`dtlaunch config`, `config default|show|validate` and `dtlaunch env` through the real binary: the
wizard driven by scripted stdin for each machine type and once through a pseudo-terminal with arrow
keys; the file it writes launches the answered layout on fake GPUs."""
import os
import pty
import re
import select
import subprocess
import termios
import time

from common import DTLAUNCH, LaunchTest, main, parse_env


class Wizard(LaunchTest):
    def setUp(self):
        super().setUp()
        self.home = os.path.join(self.tmp, "home")
        os.makedirs(self.home)
        self.path = os.path.join(self.tmp, "cfg", "dtl.yaml")

    def env(self, **extra):
        env = super().env(**{"HOME": self.home, "TERM": "xterm", **extra})
        if "XDG_CONFIG_HOME" not in extra:
            env.pop("XDG_CONFIG_HOME", None)
        return env

    def config(self, *args, answers="", env=None):
        return subprocess.run([DTLAUNCH, "config", *args], input=answers, env=env or self.env(), capture_output=True,
                              text=True, timeout=60)

    def written(self):
        with open(self.path) as f:
            return f.read()

    def assert_nothing_written(self):
        self.assertFalse(os.path.exists(self.path))
        folder = os.path.dirname(self.path)
        self.assertEqual(os.listdir(folder) if os.path.isdir(folder) else [], [])

    def launch_written(self, *extra):
        return self.launch("--config_file", self.path, "--master_port=0", *extra, *self.worker("env"))

    def test_a_cpu_machine_from_piped_answers(self):
        r = self.config("--config_file", self.path, "--fake_gpus", "2",
                        answers="cpu\n1\n\n3\nbf16\n1\n\n")
        self.assertExitCode(r, 0)
        self.assertEqual(self.written(),
                         "# dtlaunch configuration, written by `dtlaunch config`: CPU only, 1 machine.\n"
                         "# Keys are dtlaunch's flags; a flag or a PET_* variable given at launch wins over this file.\n"
                         "use_cpu: true\nnproc_per_node: 3\nnnodes: 1\nmaster_port: 29500\nmixed_precision: bf16\n"
                         "max_restarts: 1\n")
        # The session reads like a typed one, and the file is shown at the end.
        self.assertIn("Type a number or a name [multi-gpu]: cpu\n", r.stdout)
        self.assertIn("How many processes per machine? [1]: 3\n", r.stdout)
        self.assertTrue(r.stdout.endswith(f"Wrote {self.path}:\n\n{self.written()}\n"
                                          "`dtlaunch --print_config` shows the settings in effect.\n"), r.stdout)
        r = self.launch_written("--fake_gpus=2")
        self.assertExitCode(r, 0)
        ranks = parse_env(r.stdout)
        self.assertEqual(sorted(ranks), [0, 1, 2])
        self.assertEqual({e["CUDA_VISIBLE_DEVICES"] for e in ranks.values()}, {"<unset>"})
        self.assertEqual({e["TORCHELASTIC_MAX_RESTARTS"] for e in ranks.values()}, {"1"})

    def test_one_gpu_from_piped_answers(self):
        r = self.config("--config_file", self.path, answers="2\n\n\n2\nfp16\n\n\n",
                        env=self.env(DTLAUNCH_FAKE_GPUS="4"))
        self.assertExitCode(r, 0)
        self.assertIn("Found 4 GPUs on this machine (fake).\n", r.stdout)
        self.assertIn("nproc_per_node: 1\ngpu_ids: 2\n", self.written())
        r = self.launch_written("--fake_gpus=4")
        self.assertExitCode(r, 0)
        self.assertEqual({lr: e["CUDA_VISIBLE_DEVICES"] for lr, e in parse_env(r.stdout).items()}, {0: "2"})

    def test_several_gpus_from_piped_answers_with_an_invalid_answer_asked_again(self):
        logs = os.path.join(self.tmp, "logs")
        r = self.config("--config_file", self.path, "--fake_gpus=4",
                        answers=f"multi-gpu\n1\n0\n5\n3\n0,1,3\nno\n0\n{logs}\n")
        self.assertExitCode(r, 0)
        self.assertIn("How many processes (one per GPU) per machine? [4]: 5\n"
                      "  this machine has 4 GPUs, and two processes cannot share one (NCCL); please answer again\n"
                      "How many processes (one per GPU) per machine? [4]: 3\n", r.stdout)
        self.assertIn("nproc_per_node: 3\ngpu_ids: 0,1,3\nnnodes: 1\nmaster_port: 0\nmixed_precision: 'no'\n"
                      f"max_restarts: 0\nlog_dir: {logs}\ntee: 3\n", self.written())
        r = self.launch("--config_file", self.path, "--fake_gpus=4", *self.worker("env"))
        self.assertExitCode(r, 0)
        self.assertEqual({lr: e["CUDA_VISIBLE_DEVICES"] for lr, e in parse_env(r.stdout).items()},
                         {0: "0", 1: "1", 2: "3"})
        # the answered log directory gets each rank's output (and the console still shows it)
        files = sorted(os.path.relpath(os.path.join(d, f), logs) for d, _, fs in os.walk(logs) for f in fs
                       if f == "stdout.log")
        self.assertEqual(len(files), 3, files)
        for f in files:
            with open(os.path.join(logs, f)) as log:
                self.assertIn("WORLD_SIZE=3\n", log.read())

    def test_several_machines_from_piped_answers_show_in_print_config(self):
        r = self.config("--config_file", self.path, "--fake_gpus=8",
                        answers="multi-gpu\n2\n1\n10.0.0.1\n29501\nno\nc10d\n\n\nbf16\n3\n\n")
        self.assertExitCode(r, 0)
        self.assertIn("nproc_per_node: 8\nnnodes: 2\nnode_rank: 1\nrdzv_backend: c10d\n"
                      "rdzv_endpoint: 10.0.0.1:29501\nmixed_precision: bf16\nmax_restarts: 3\n", self.written())
        r = self.launch("--config_file", self.path, "--print_config")
        self.assertExitCode(r, 0)
        settings = dict(re.findall(r"^(\w+): (\S+) ", r.stdout, re.M))
        self.assertEqual([settings[k] for k in ("nproc_per_node", "nnodes", "node_rank", "rdzv_backend",
                                                "rdzv_endpoint", "mixed_precision", "max_restarts")],
                         ["8", "2", "1", "c10d", "10.0.0.1:29501", "bf16", "3"])

    def test_the_end_of_input_writes_nothing(self):
        r = self.config("--config_file", self.path, answers="cpu\n1\n")
        self.assertEqual((r.returncode, r.stderr),
                         (1, "dtlaunch: error: config: the input ended before every question was answered; "
                             "nothing written\n"))
        self.assert_nothing_written()

    def test_a_nul_byte_in_a_number_is_asked_again_not_an_abort(self):
        # strtol stopped at the NUL and accepted the answer, then std::stol threw: exit 134.
        r = self.config("--config_file", self.path, "--fake_gpus=0", answers="\n\n\0\n")
        self.assertIn("  expected plain text, got '\\x00'; please answer again\n", r.stdout)
        self.assertEqual((r.returncode, r.stderr),
                         (1, "dtlaunch: error: config: the input ended before every question was answered; "
                             "nothing written\n"))
        r = self.config("--config_file", self.path, "--fake_gpus=0", answers="\n\n7\0\n8\n\n\n\n\n")
        self.assertExitCode(r, 0)
        self.assertIn("master_port: 8\n", self.written())

    def test_an_existing_file_is_overwritten_only_when_the_user_says_so(self):
        os.makedirs(os.path.dirname(self.path))
        with open(self.path, "w") as f:
            f.write("max_restarts: 9\n")
        r = self.config("--config_file", self.path, answers="\n")
        self.assertEqual((r.returncode, r.stderr), (1, f"dtlaunch: config: {self.path} left as it was; nothing written\n"))
        self.assertIn(f"{self.path} exists. Overwrite it?\n", r.stdout)
        self.assertEqual(self.written(), "max_restarts: 9\n")
        r = self.config("--config_file", self.path, "--fake_gpus=0", answers="yes\ncpu\n\n\n\n\n\n\n")
        self.assertExitCode(r, 0)
        self.assertIn("use_cpu: true\n", self.written())

    def test_the_default_path_is_under_xdg_config_home(self):
        xdg = os.path.join(self.tmp, "xdg")
        r = self.config("default", env=self.env(XDG_CONFIG_HOME=xdg, DTLAUNCH_FAKE_GPUS="2"))
        self.assertExitCode(r, 0)
        path = os.path.join(xdg, "dtlaunch", "default_config.yaml")
        with open(path) as f:
            self.assertIn("nproc_per_node: 2\n", f.read())
        r = self.launch("--print_config", env=self.env(XDG_CONFIG_HOME=xdg))
        self.assertIn(f"# config file: {path} (dtlaunch's format)\n", r.stdout)

    def test_config_default_refuses_to_overwrite_without_force(self):
        r = self.config("default", "--config_file", self.path, "--fake_gpus=3")
        self.assertExitCode(r, 0)
        self.assertIn("nproc_per_node: 3\n", self.written())
        r = self.config("default", "--config_file", self.path, "--fake_gpus=1")
        self.assertEqual((r.returncode, r.stderr),
                         (2, f"dtlaunch: error: config default: {self.path} already exists (--force overwrites it)\n"))
        r = self.config("default", "--config_file", self.path, "--fake_gpus=1", "--force")
        self.assertExitCode(r, 0)
        self.assertIn("nproc_per_node: 1\n", self.written())
        self.assertNotIn("use_cpu", self.written())

    def test_config_show_and_validate(self):
        r = self.config("show", "--config_file", self.path)
        self.assertEqual((r.returncode, r.stderr),
                         (1, f"dtlaunch: config show: no config file: {self.path} does not exist "
                             "(dtlaunch config writes one)\n"))
        self.config("default", "--config_file", self.path, "--fake_gpus=2")
        r = self.config("show", env=self.env(DTLAUNCH_CONFIG_FILE=self.path))
        self.assertExitCode(r, 0)
        self.assertEqual(r.stdout, f"# {self.path}\n{self.written()}")
        r = self.config("validate", self.path, env=self.env(PET_NPROC_PER_NODE="x"))
        self.assertExitCode(r, 0)
        self.assertIn(f"# {self.path} is valid; alone (no flags, no variables), it gives:\n", r.stdout)
        self.assertIn("\nnproc_per_node: 2 ", r.stdout)
        bad = os.path.join(self.tmp, "bad.yaml")
        with open(bad, "w") as f:
            f.write("nproc_per_node: 2\nmaxrestarts: 1\n")
        r = self.config("validate", bad)
        self.assertEqual((r.returncode, r.stderr, r.stdout),
                         (2, f"dtlaunch: error: {bad}:2:1: maxrestarts: unknown key (did you mean max_restarts?)\n", ""))
        r = self.config("validate")
        self.assertEqual((r.returncode, r.stderr),
                         (2, "dtlaunch: error: config validate: which file? (usage: dtlaunch config validate FILE)\n"))
        missing = os.path.join(self.tmp, "missing.yaml")
        r = self.config("validate", missing)  # no --config_file was given: the message must not name it
        self.assertEqual((r.returncode, r.stderr, r.stdout),
                         (2, f"dtlaunch: error: config validate: cannot read '{missing}': No such file or directory\n",
                          ""))
        r = self.config("--bogus")
        self.assertEqual((r.returncode, r.stderr),
                         (2, "dtlaunch: error: config: unknown option --bogus (see dtlaunch config --help)\n"))

    def test_env_reports_versions_gpus_and_the_settings_in_effect(self):
        self.config("default", "--config_file", self.path, "--fake_gpus=2")
        r = subprocess.run([DTLAUNCH, "env", "--fake_gpus=2"], env=self.env(DTLAUNCH_CONFIG_FILE=self.path),
                           capture_output=True, text=True, timeout=120)
        self.assertExitCode(r, 0)
        self.assertRegex(r.stdout, r"\n- dtlaunch version: \d+\.\d+\.\d+\n")
        self.assertRegex(r.stdout, r"\n- Platform: Linux ")
        self.assertRegex(r.stdout, r"\n- Memory: [\d.]+ GiB total")
        self.assertIn("\n- GPUs (fake): 2\n  - 0: fake GPU, GPU-fake", r.stdout)
        self.assertRegex(r.stdout, r"\n- NCCL: ")
        self.assertRegex(r.stdout, r"\n- Python: \d+\.\d+")
        # how a hang's stacks are read, and what the flight recorder adds to the workers' environment
        self.assertRegex(r.stdout, r"\n- Hang stacks: py-spy (/\S+/py-spy|not installed \(Python ranks' stacks come "
                                   r"from faulthandler, registered by dtlaunch's sitecustomize\.py\)); eu-stack ")
        self.assertRegex(r.stdout, r"\n- Flight recorder: with --hang_timeout above 0, the workers' PYTHONPATH is led "
                                   r"by dtlaunch's sitecustomize\.py")
        self.assertIn(f"# config file: {self.path} (dtlaunch's format)\n", r.stdout)
        self.assertIn("\nfake_gpus: 2 ", r.stdout)


class WizardOnATerminal(LaunchTest):
    """The wizard on a real pseudo-terminal: arrow keys move in menus, Ctrl-C aborts, raw mode is undone."""

    def setUp(self):
        super().setUp()
        self.path = os.path.join(self.tmp, "pty.yaml")
        self.master, self.slave = pty.openpty()
        self.cooked = termios.tcgetattr(self.slave)
        self.proc = None
        self.out = b""  # since the last answer
        self.everything = b""

    def start(self, term="xterm"):
        env = self.env(TERM=term, HOME=self.tmp, DTLAUNCH_FAKE_GPUS="4")
        self.proc = subprocess.Popen([DTLAUNCH, "config", "--config_file", self.path], stdin=self.slave,
                                     stdout=self.slave, stderr=self.slave, env=env, start_new_session=True)

    def tearDown(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)
        os.close(self.slave)
        super().tearDown()

    def wait_for(self, text, timeout=20):
        """Reads the terminal until `text` shows (bounded; no sleep)."""
        deadline = time.monotonic() + timeout
        while text.encode() not in self.out:
            ready, _, _ = select.select([self.master], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise AssertionError(f"timed out waiting for {text!r}; the terminal shows:\n{self.out!r}")
            chunk = os.read(self.master, 65536)
            self.out += chunk
            self.everything += chunk

    def answer(self, prompt, keys):
        self.wait_for(prompt)
        self.out = self.out[self.out.index(prompt.encode()) + len(prompt):]
        os.write(self.master, keys.encode())

    def test_arrow_keys_choose_in_menus_and_the_file_launches_that_layout(self):
        self.start()
        up, down = "\x1b[A", "\x1b[B"
        self.answer("Which kind of machine is this?", up + up + down + down + "\r")  # multi-gpu, after a tour
        self.wait_for("  > multi-gpu\r\n")
        self.answer("How many machines will run the job? [1]: ", "\r")
        self.answer("(0 picks a free one)? [29500]: ", "0\r")
        self.answer("per machine? [4]: ", "7\x7f3\r")  # a typo, erased
        self.answer("(comma-separated indices, or all)? [all]: ", "0,2,3\r")
        self.answer("Which mixed precision", down + down + "\r")
        self.wait_for("  > bf16\r\n")
        self.answer("restarted? [0]: ", "2\r")
        self.answer("[a temporary directory]: ", "\r")
        self.wait_for("shows the settings in effect.")
        self.assertEqual(self.proc.wait(timeout=20), 0)
        self.assertEqual(termios.tcgetattr(self.slave), self.cooked)
        with open(self.path) as f:
            text = f.read()
        self.assertIn("nproc_per_node: 3\ngpu_ids: 0,2,3\nnnodes: 1\nmaster_port: 0\nmixed_precision: bf16\n"
                      "max_restarts: 2\n", text)
        r = self.launch("--config_file", self.path, "--fake_gpus=4", *self.worker("env"))
        self.assertExitCode(r, 0)
        ranks = parse_env(r.stdout)
        self.assertEqual({lr: e["CUDA_VISIBLE_DEVICES"] for lr, e in ranks.items()}, {0: "0", 1: "2", 2: "3"})
        self.assertEqual({e["TORCHELASTIC_MAX_RESTARTS"] for e in ranks.values()}, {"2"})

    def test_ctrl_c_aborts_with_130_writes_nothing_and_restores_the_terminal(self):
        self.start()
        self.answer("Which kind of machine is this?", "\r")
        self.answer("How many machines will run the job? [1]: ", "\x03")
        self.wait_for("dtlaunch: config: interrupted; nothing written")
        self.assertEqual(self.proc.wait(timeout=20), 130)
        self.assertEqual(termios.tcgetattr(self.slave), self.cooked)
        self.assertEqual(os.listdir(self.tmp), [])

    def test_ctrl_c_and_ctrl_d_work_after_an_unfinished_escape_sequence(self):
        # Alt+[ sends ESC [ alone; the bytes after it were swallowed as its parameters until a letter came.
        self.start()
        self.answer("Which kind of machine is this?", "\x1b[\x03")
        self.wait_for("dtlaunch: config: interrupted; nothing written")
        self.assertEqual(self.proc.wait(timeout=20), 130)
        self.assertEqual(termios.tcgetattr(self.slave), self.cooked)
        self.out = b""
        self.start()
        self.answer("Which kind of machine is this?", "\r")
        self.answer("How many machines will run the job? [1]: ", "\x1b[1;\x04")
        self.wait_for("the input ended before every question was answered")
        self.assertEqual(self.proc.wait(timeout=20), 1)
        self.assertEqual(os.listdir(self.tmp), [])

    def test_a_signal_while_asking_restores_the_terminal(self):
        self.start()
        self.wait_for("Which kind of machine is this?")
        self.assertNotEqual(termios.tcgetattr(self.slave), self.cooked)  # raw while asking
        self.proc.terminate()
        self.assertEqual(self.proc.wait(timeout=20), -15)
        self.assertEqual(termios.tcgetattr(self.slave), self.cooked)
        self.assertEqual(os.listdir(self.tmp), [])

    def test_a_dumb_terminal_gets_numbered_menus_and_typed_answers(self):
        self.start(term="dumb")
        self.answer("Type a number or a name [multi-gpu]: ", "1\r")
        self.answer("How many machines will run the job? [1]: ", "\r")
        self.answer("[29500]: ", "\r")
        self.answer("How many processes per machine? [1]: ", "2\r")
        self.answer("Type a number or a name [no]: ", "fp16\r")
        self.answer("restarted? [0]: ", "\r")
        self.answer("[a temporary directory]: ", "\r")
        self.wait_for("shows the settings in effect.")
        self.assertEqual(self.proc.wait(timeout=20), 0)
        self.assertNotIn(b"\x1b", self.everything)
        self.assertIn(b"  1) cpu        CPU only\r\n", self.everything)
        with open(self.path) as f:
            self.assertIn("use_cpu: true\nnproc_per_node: 2\n", f.read())


if __name__ == "__main__":
    main()
