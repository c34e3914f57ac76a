"""torchrun 2.x's flags and conventions, against what torch 2.15's torchrun does (recorded in each test;
with its venv present, $DTL_ACCELERATE_VENV else ~/.cache/dtlaunch/venv-accelerate, the output-filter
test also runs torchrun itself side by side)."""
import glob
import os
import socket
import subprocess

from common import DTLAUNCH, LaunchTest, Running, free_port, main, parse_env

VENV = os.environ.get("DTL_ACCELERATE_VENV", os.path.expanduser("~/.cache/dtlaunch/venv-accelerate"))
TORCHRUN = os.path.join(VENV, "bin", "torchrun")

# Two ranks' lines on stdout (one with a comma) and one on stderr.
SCRIPT = "echo line 1; echo line 2; echo b,c; echo err >&2"
FILTER_FLAGS = ["--nproc_per_node=2", "--tee=3", "--duplicate_stdout_filters", "line 1,b,,c",
                "--duplicate_stderr_filters", "zzz", "--log_line_prefix_template", "${hostname}:${rank}: "]


def filtered_files(log_dir):
    """{name: sorted lines} of the attempt's filtered_*.log files (ranks interleave in any order)."""
    attempt = glob.glob(os.path.join(log_dir, "*", "attempt_0"))
    assert len(attempt) == 1, attempt
    return {name: sorted(open(os.path.join(attempt[0], name)).read().splitlines())
            for name in ("filtered_stdout.log", "filtered_stderr.log")}


class Torchrun2(LaunchTest):
    def test_one_node_given_no_port_takes_a_free_one_when_29500_is_taken(self):
        # torchrun 2.15: --nnodes=1, static, no --master_port nor PET_MASTER_PORT -> standalone
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", 29500))
                s.listen()
            except OSError:
                pass  # taken already: the case itself
            r = self.launch("--nproc_per_node=2", *self.worker("env"))
        self.assertExitCode(r, 0)
        ranks = parse_env(r.stdout)
        self.assertNotEqual(ranks[0]["MASTER_PORT"], "29500")
        self.assertEqual(ranks[0]["MASTER_PORT"], ranks[1]["MASTER_PORT"])
        self.assertRegex(ranks[0]["TORCHELASTIC_RUN_ID"], r"^[0-9a-f]{16}$")

    def test_a_given_port_is_still_checked(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen()
            r = self.launch("--nproc_per_node=1", "--master_port", s.getsockname()[1], *self.worker("env"))
        self.assertExitCode(r, 2)

    def test_workers_learn_the_signals_that_are_forwarded(self):
        r = self.launch("--master_port=0", "--signals_to_handle=SIGUSR1,TERM", "--no_python", "/usr/bin/env")
        self.assertExitCode(r, 0)
        self.assertEqual(parse_env(r.stdout)[0]["TORCHELASTIC_SIGNALS_TO_HANDLE"], "SIGUSR1,SIGTERM")

    def test_tee_d_lines_matching_a_filter_are_duplicated_with_their_prefix(self):
        log_dir = os.path.join(self.tmp, "logs")
        r = self.launch("--master_port=0", *FILTER_FLAGS, "--log_dir", log_dir, "--no_python", "sh", "-c", SCRIPT)
        self.assertExitCode(r, 0)
        host = socket.gethostname()
        self.assertIn(f"{host}:1: line 2\n", r.stdout)
        self.assertEqual(filtered_files(log_dir), {
            "filtered_stdout.log": sorted(f"{host}:{rank}: {text}" for rank in (0, 1) for text in ("line 1", "b,c")),
            "filtered_stderr.log": []})

    def test_the_filtered_files_are_torchruns(self):
        if not os.access(TORCHRUN, os.X_OK):
            self.skipTest(f"no torchrun at {TORCHRUN} (scripts/parity/make_venv.sh makes it)")
        files = []
        for launcher in ([TORCHRUN], [DTLAUNCH]):
            log_dir = os.path.join(self.tmp, f"logs{len(files)}")
            r = subprocess.run([*launcher, *FILTER_FLAGS, "--log_dir", log_dir, "--no_python", "sh", "-c", SCRIPT],
                               env=self.env(), capture_output=True, text=True, timeout=120)
            self.assertExitCode(r, 0)
            files.append(filtered_files(log_dir))
        self.assertEqual(files[0], files[1])

    def test_an_ipv6_master_addr_reaches_the_workers_of_a_static_2_node_job_as_torchruns_do(self):
        # torch 2.15: `torchrun --nnodes 2 --node_rank R --master_addr ::1 ...` gives MASTER_ADDR=::1
        try:
            with socket.socket(socket.AF_INET6) as s:
                s.bind(("::1", 0))
        except OSError as e:
            self.skipTest(f"no IPv6 loopback here: {e}")
        script = "echo MASTER_ADDR=$MASTER_ADDR RANK=$RANK WORLD_SIZE=$WORLD_SIZE"
        launchers = [[DTLAUNCH]]
        if os.access(TORCHRUN, os.X_OK):
            launchers.append([TORCHRUN])
        seen = []
        for launcher in launchers:
            port = free_port()
            nodes = [Running([*launcher, "--nnodes=2", f"--node_rank={r}", "--nproc_per_node=1", "--master_addr=::1",
                              f"--master_port={port}", "--no_python", "sh", "-c", script], self.env())
                     for r in (0, 1)]
            results = [n.finish(timeout=120) for n in nodes]
            for r in results:
                self.assertExitCode(r, 0)
            seen.append(sorted(line[line.index("MASTER_ADDR="):] for r in results for line in r.stdout.splitlines()
                               if "MASTER_ADDR=" in line))  # after any line prefix
        self.assertEqual(seen[0], ["MASTER_ADDR=::1 RANK=0 WORLD_SIZE=2", "MASTER_ADDR=::1 RANK=1 WORLD_SIZE=2"])
        if len(seen) == 2:
            self.assertEqual(seen[0], seen[1])

    def test_virtual_local_rank_gives_local_rank_0_and_each_worker_its_gpu(self):
        r = self.launch("--master_port=0", "--fake_gpus=2", "--nproc_per_node=2", "--virtual_local_rank",
                        *self.worker("env"))
        self.assertExitCode(r, 0)
        ranks = parse_env(r.stdout)
        self.assertEqual([ranks[lr]["LOCAL_RANK"] for lr in (0, 1)], ["0", "0"])
        self.assertEqual([ranks[lr]["RANK"] for lr in (0, 1)], ["0", "1"])
        self.assertEqual([ranks[lr]["CUDA_VISIBLE_DEVICES"] for lr in (0, 1)], ["0", "1"])

    def test_python_only_flags_are_refused_in_one_line(self):
        for flag, why in (("--logs_specs=my.Specs", "expected default, torchrun's built-in (another torchrun.logs_specs "
                                                    "entry point is a Python class"),
                          ("--event_log_handler=console", "expected null: torch's event handlers")):
            r = self.launch("--master_port=0", flag, "--no_python", "true")
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
            self.assertIn(why, r.stderr)
        self.assertExitCode(self.launch("--master_port=0", "--event_log_handler=null", "--no_python", "true"), 0)

    def test_torchruns_own_logs_specs_is_taken(self):
        # torch's entry point `default` (torchrun.logs_specs) is the DefaultLogsSpecs torchrun uses
        # without the flag, and the attempt_N layout dtlaunch writes.
        for spelled in ("--logs_specs=default", "--logs-specs=default", "--logs_spec=default"):
            r = self.launch("--master_port=0", spelled, "--no_python", "true")
            self.assertExitCode(r, 0)
            self.assertNotIn("warning", r.stderr)


if __name__ == "__main__":
    main()
