"""The real tools' own test code, run against the real tool and against dtlaunch side by side.

Each case runs under the real launcher (torchrun, `python -m torch.distributed.launch`, accelerate
launch, from accelerate's venv: $DTL_ACCELERATE_VENV, else ~/.cache/dtlaunch/venv-accelerate, which
scripts/parity/make_venv.sh makes) and under dtlaunch, in the same test, and applies the upstream
case's own assertion to both; where both succeed, what the workers report must agree too.

- PyTorch: the cases of test/distributed/launcher/test_run.py and launch_test.py, which drive
  torch.distributed.run.main(args) / torch.distributed.launch.main(args) in-process, as command
  lines (`torchrun ARGS` against `dtlaunch ARGS`), with the scripts of their bin/ folder.
- accelerate: the scripts its wheel ships (accelerate/test_utils/scripts/test_script.py, which
  `accelerate test` runs, test_sync.py, test_cli.py) under `accelerate launch --config_file F`,
  `dtlaunch launch --config_file F` and `dtlaunch --config_file F`; and every file of its
  tests/test_configs/, accepted or refused alike.
- transformers: the worker scripts of tests/trainer/distributed/scripts/ under
  `torchrun --nproc_per_node=2` against `dtlaunch --nproc_per_node=2`, and under `accelerate launch`
  with transformers' own ddp.yaml against `dtlaunch launch` with the same, comparing what they
  print or write.

The upstream files are in tests/thirdparty/ (tests/thirdparty/README.md: origin, commit, licence);
accelerate's scripts run from the installed package. Everything runs on CPU (gloo), offline
(HF_HUB_OFFLINE=1). Without the venv the whole file is skipped (exit 77)."""
import collections
import glob
import json
import os
import re
import signal
import subprocess
import sys
import unittest
import uuid

from common import DTLAUNCH, HERE, LaunchTest, free_port, main

VENV = os.environ.get("DTL_ACCELERATE_VENV", os.path.expanduser("~/.cache/dtlaunch/venv-accelerate"))
PYTHON = os.path.join(VENV, "bin", "python")
TORCHRUN = os.path.join(VENV, "bin", "torchrun")
ACCELERATE = os.path.join(VENV, "bin", "accelerate")

THIRDPARTY = os.path.normpath(os.path.join(HERE, "..", "thirdparty"))
PT_LAUNCHER = os.path.join(THIRDPARTY, "pytorch", "test", "distributed", "launcher")
ACC_CONFIGS = os.path.join(THIRDPARTY, "accelerate", "tests", "test_configs")
TF_DISTRIBUTED = os.path.join(THIRDPARTY, "transformers", "tests", "trainer", "distributed")
TF_SCRIPTS = os.path.join(TF_DISTRIBUTED, "scripts")
TF_DDP_CONFIG = os.path.join(TF_DISTRIBUTED, "accelerate_configs", "ddp.yaml")


def run(argv, env, timeout, cwd=None):
    """Runs a launcher as the leader of a new process group; past `timeout` its process group is killed (by the
    launcher's PID) and the result's returncode is "timeout", with what it printed."""
    proc = subprocess.Popen([str(a) for a in argv], env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return subprocess.CompletedProcess(proc.args, "timeout", out, err + f"\n[still running after {timeout} s]")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def shown(r):
    return (f"command: {' '.join(r.args)}\nexit: {r.returncode}\nstdout:\n{r.stdout[-6000:]}\n"
            f"stderr:\n{r.stderr[-6000:]}")


TEARDOWN_ABORT = "terminate called without an active exception"


def finished(r):
    """The script did its work: exit 0, or torch's abort at interpreter exit and nothing else wrong.
    A script that never destroys its process group (torch's test_script_init_method.py,
    transformers' eval_ddp.py) can end so once its work is done: a gloo thread that a peer's leaving
    wakes during finalization unwinds through a noexcept frame. It happens under torchrun's own
    workers (`python -u script.py`) as under dtlaunch's (docs/limits.md); what each test checks
    beyond the exit (files touched, losses, results) still has to hold."""
    if r.returncode == 0:
        return True
    text = r.stdout + r.stderr
    if r.returncode == "timeout" or TEARDOWN_ABORT not in text:
        return False
    # torchrun's agent (and accelerate launch through it) reports the abort as its own ChildFailedError
    # traceback, with SIGABRT as the root cause; any other traceback is the script's.
    tracebacks = text.count("Traceback (most recent call last)")
    launcher_reports = text.count("multiprocessing.errors.ChildFailedError:")
    if launcher_reports and not re.search(r"Root Cause[^\n]*\n(?:.*\n){0,6}?\s*exitcode\s*: -6 ", text):
        return False
    return tracebacks == launcher_reports


def unprefixed(text):
    """Lines without dtlaunch's `[<role><local_rank>]:` or torchrun's `[rankN]:`/`[defaultN]:` prefix."""
    return [re.sub(r"^\[\w+\]:", "", line) for line in text.splitlines()]


class PeerTest(LaunchTest):
    maxDiff = None

    def env(self, **extra):
        base = dict(PATH=os.path.join(VENV, "bin") + ":" + os.environ.get("PATH", "/usr/bin:/bin"),
                    PYTHON_EXEC=PYTHON, HOME=self.tmp, HF_HOME=os.path.join(self.tmp, "hf"), HF_HUB_OFFLINE="1",
                    TOKENIZERS_PARALLELISM="false", PYTHONDONTWRITEBYTECODE="1")
        base.update(extra)
        return super().env(**base)

    def assertSucceeded(self, r):
        self.assertTrue(finished(r), shown(r))

    def assertRefused(self, r):
        self.assertNotIn(r.returncode, (0, "timeout"), shown(r))

    def each(self, results, check):
        """Applies one upstream assertion to every launcher's result, reported per launcher."""
        for name, value in results.items():
            with self.subTest(launcher=name):
                check(*value) if isinstance(value, tuple) else check(value)


# ------------------------------------------------------------------------------------------------
# PyTorch: test/distributed/launcher/test_run.py and launch_test.py
# ------------------------------------------------------------------------------------------------
# The variables bin/test_script.py prints (one `KEY = VALUE` line each, per worker) whose values do
# not depend on the launcher's choice of port, address or temporary directory.
AGREED_VARIABLES = ("LOCAL_RANK", "RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE", "WORLD_SIZE",
                    "ROLE_WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "OMP_NUM_THREADS",
                    "TEST_SENTINEL_PARENT")


def reported_variables(stdout, with_run_id):
    """Counter of `KEY = VALUE` over all workers. torchrun's workers share its stdout and print
    unbuffered (`python -u`), so one worker's newline can come after another's text: the values are
    matched by their form (a number, a role name, the sentinel), not up to the end of the line."""
    keys = AGREED_VARIABLES + (("TORCHELASTIC_RUN_ID",) if with_run_id else ())
    return collections.Counter(re.findall(r"(?<![A-Z_])((?:%s) = (?:\d+|default|FOOBAR))" % "|".join(keys), stdout))


def pt_path(script):
    return os.path.join(PT_LAUNCHER, script)


class PyTorchLauncherCases(PeerTest):
    """test_run.py's and launch_test.py's cases, each as `torchrun ARGS` and `dtlaunch ARGS`.

    Not applicable (no command line reaches what they test):
    - test_nproc_gpu_launch_configurations, test_nproc_xpu_launch_configurations: they patch
      torch.cuda / torch.xpu / torch.accelerator inside the launcher process to fake 3 devices.
    - test_launch_elastic_agent_raise_exception: patches LocalElasticAgent.run to raise.
    - test_launch_shutdown: patches LocalElasticAgent and the rendezvous handler registry.
    - test_is_not_torchelastic_launched: runs the script with runpy, without any launcher.
    - test_virtual_local_rank: needs 2 GPUs (bin/../script_deviceid.py compiles for cuda:N).
    - test_min_max_nodes_parse: calls parse_min_max_nnodes(); only its refusal of "2:20:30" has a
      command line (--nnodes=2:20:30), kept below; "1" and "2:20" are the --nnodes of other cases.
    In-process mocks of torch.distributed.elastic.events.record (test_launch_elastic_worker_raise_
    exception) and of the logs_specs entry point lookup (test_is_torchelastic_launched_with_logs_
    spec_defined: the mock returns DefaultLogsSpecs, which is what the installed torch registers as
    torchrun.logs_specs "default") are left out; the rest of those cases runs."""

    LAUNCHERS = (("torchrun", [TORCHRUN]), ("dtlaunch", [DTLAUNCH]))

    def env(self, **extra):
        # test_run.py's setUp: a sentinel that bin/test_script.py requires in every worker
        return super().env(TEST_SENTINEL_PARENT="FOOBAR", **extra)

    def both(self, make_args, env=None, launchers=None, timeout=90):
        """{launcher: (result, its own directory)}; make_args(directory) gives the arguments."""
        results = {}
        for name, argv0 in launchers or self.LAUNCHERS:
            directory = os.path.join(self.tmp, name)
            os.makedirs(directory, exist_ok=True)
            results[name] = (run([*argv0, *make_args(directory)], env or self.env(), timeout), directory)
        return results

    def assert_touched(self, results, world_size):
        # "make sure all the workers ran: each worker touches a file with its global rank as the name"
        def check(r, directory):
            self.assertSucceeded(r)
            self.assertSetEqual({str(i) for i in range(world_size)}, set(os.listdir(directory)), shown(r))
        self.each(results, check)

    def assert_refused(self, results):
        def check(r, directory):
            self.assertRefused(r)
            self.assertEqual(os.listdir(directory), [], "a worker ran:\n" + shown(r))
        self.each(results, check)

    def assert_same_variables(self, results, with_run_id=False):
        """Where both ran bin/test_script.py, the workers saw the same variables."""
        seen = {name: reported_variables(r.stdout, with_run_id) for name, (r, _) in results.items()
                if r.returncode == 0}
        if len(seen) == 2:
            self.assertEqual(seen["dtlaunch"], seen["torchrun"])

    def test_launch_user_script_python(self):
        run_id = str(uuid.uuid4().int)
        results = self.both(lambda d: ["--nnodes=1", "--nproc-per-node=4", f"--rdzv-id={run_id}", "--monitor-interval=1",
                                       "--start-method=spawn", pt_path("bin/test_script.py"), f"--touch-file-dir={d}"])
        self.assert_touched(results, 4)
        # not TORCHELASTIC_RUN_ID: with --nnodes=1 and no port, torchrun runs as --standalone, which
        # replaces the given --rdzv-id by a uuid4; dtlaunch keeps the given id
        self.assert_same_variables(results)

    def test_launch_user_script_python_caffe2_bc(self):
        results = self.both(lambda d: ["--nnodes=1", "--nproc-per-node=4", "--monitor-interval=1", "--start-method=spawn",
                                       "--master-addr=localhost", f"--master-port={free_port()}", "--node-rank=0",
                                       pt_path("bin/test_script.py"), f"--touch-file-dir={d}"])
        self.assert_touched(results, 4)
        self.assert_same_variables(results)

    def _bash_args(self, run_id, nproc=None):
        return ["--nnodes=1", *([f"--nproc-per-node={nproc}"] if nproc else []), f"--rdzv-id={run_id}",
                "--monitor-interval=1", "--start-method=spawn", "--no-python"]

    def test_launch_user_script_bash(self):
        run_id = str(uuid.uuid4().int)
        # --no-python cannot be used with --module
        self.assert_refused(self.both(lambda d: [*self._bash_args(run_id, 4), "--module", pt_path("bin/test_script.sh"), d]))
        self.assert_touched(self.both(lambda d: [*self._bash_args(run_id, 4), pt_path("bin/test_script.sh"), d]), 4)

    def test_launch_user_script_default_nproc(self):
        run_id = str(uuid.uuid4().int)
        self.assert_refused(self.both(lambda d: [*self._bash_args(run_id), "--module", pt_path("bin/test_script.sh"), d]))
        self.assert_touched(self.both(lambda d: [*self._bash_args(run_id), pt_path("bin/test_script.sh"), d]), 1)

    def test_launch_with_env_vars(self):
        pet = dict(PET_NNODES="1", PET_NPROC_PER_NODE="4", PET_RDZV_ID=str(uuid.uuid4().int), PET_MONITOR_INTERVAL="1",
                   PET_START_METHOD="spawn", PET_NO_PYTHON="1")
        self.assert_refused(self.both(lambda d: [pt_path("bin/test_script.sh"), d], env=self.env(**pet, PET_MODULE="1")))
        self.assert_touched(self.both(lambda d: [pt_path("bin/test_script.sh"), d], env=self.env(**pet, PET_MODULE="0")), 4)

    def _nproc(self, nproc_type, run_id):
        return lambda d: [*self._bash_args(run_id, nproc_type), pt_path("bin/test_script.sh"), d]

    def test_nproc_launch_auto_configurations(self):
        # upstream patches torch.accelerator.is_available to False; here it is so, or the case is skipped
        if glob.glob("/dev/nvidia[0-9]*") or glob.glob("/dev/dri/renderD*"):
            self.skipTest("an accelerator is present: 'auto' counts it, not the CPUs")
        expected = len(os.sched_getaffinity(0))  # torch._utils.cpu_count()
        self.assert_touched(self.both(self._nproc("auto", str(uuid.uuid4().int))), expected)

    def test_nproc_launch_number_configurations(self):
        self.assert_touched(self.both(self._nproc("4", str(uuid.uuid4().int))), 4)

    def test_nproc_launch_unknown_configurations(self):
        self.assert_refused(self.both(self._nproc("unknown", str(uuid.uuid4().int))))

    def _elastic(self, d, run_id, rdzv_conf, *extra, fail=False):
        # the --rdzv-conf value is passed as upstream passes it to main(args): with its single quotes,
        # so that torch reads the keys 'join_timeout (which it ignores), last_call_timeout and timeout
        return ["--nnodes=1:2", "--nproc-per-node=4", "--rdzv-backend=c10d", f"--rdzv-endpoint=localhost:{free_port()}",
                rdzv_conf, f"--rdzv-id={run_id}", "--monitor-interval=1", *extra, "--start-method=spawn",
                pt_path("bin/test_script.py"), *(["--fail"] if fail else [f"--touch-file-dir={d}"])]

    def test_launch_elastic(self):
        # we are only launching 1 node (even though max = 2)
        run_id = str(uuid.uuid4().int)
        results = self.both(lambda d: self._elastic(d, run_id, "--rdzv-conf='join_timeout=5,last_call_timeout=1,timeout=5'"))
        self.assert_touched(results, 4)
        self.assert_same_variables(results, with_run_id=True)

    def test_launch_elastic_worker_raise_exception(self):
        # the launcher reports the failed workers (torch: ChildFailedError, exit 1)
        run_id = str(uuid.uuid4().int)
        results = self.both(lambda d: self._elastic(d, run_id, "--rdzv-conf='join_timeout=5,last_call_timeout=1,timeout=5'",
                                                    "--max-restarts=0", fail=True))

        def check(r, _):
            self.assertRefused(r)
            self.assertIn("RuntimeError: raising exception since --fail flag was set", r.stdout + r.stderr, shown(r))
        # (the exit codes agree here only because Python exits 1 on an exception: torchrun exits 1 on
        # any worker failure, dtlaunch with the root cause's exit code, docs/workers.md: failures)
        self.each(results, check)

    def test_launch_standalone(self):
        results = self.both(lambda d: ["--nnodes=1", "--nproc-per-node=4", "--standalone", "--monitor-interval=1",
                                       "--start-method=spawn", pt_path("bin/test_script.py"), f"--touch-file-dir={d}"])
        self.assert_touched(results, 4)
        self.assert_same_variables(results)

    def test_launch_run_path(self):
        results = self.both(lambda d: ["--run-path", "--nnodes=1", "--nproc-per-node=4", "--monitor-interval=1",
                                       "--start-method=spawn", pt_path("bin/test_script.py"), f"--touch-file-dir={d}"])
        self.assert_touched(results, 4)
        self.assert_same_variables(results)

    def test_launch_elastic_multiple_agents(self):
        # two agents of a 1:2 job on this machine: 8 workers (upstream starts the second in a process)
        results = {}
        for name, argv0 in self.LAUNCHERS:
            directory = os.path.join(self.tmp, name)
            os.makedirs(directory)
            run_id = str(uuid.uuid4().int)
            args = [*argv0, *self._elastic(directory, run_id, "--rdzv_conf=timeout=5")]
            other = subprocess.Popen(args, env=self.env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, start_new_session=True)
            try:
                mine = run(args, self.env(), timeout=90)
                try:
                    other_out, _ = other.communicate(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(other.pid, signal.SIGKILL)
                    other_out, _ = other.communicate()
            finally:
                if other.poll() is None:
                    os.killpg(other.pid, signal.SIGKILL)
                    other.wait()
            results[name] = (mine, directory)
            with self.subTest(launcher=name, agent="second"):
                self.assertEqual(other.returncode, 0, other_out[-6000:])
        self.assert_touched(results, 8)

    def test_min_max_nodes_parse(self):
        # parse_min_max_nnodes("2:20:30") raises RuntimeError: --nnodes=2:20:30 is refused
        self.assert_refused(self.both(lambda d: ["--nnodes=2:20:30", "--nproc-per-node=1", "--no-python",
                                                 pt_path("bin/test_script.sh"), d]))

    def _is_torchelastic_launched(self, *extra):
        results = self.both(lambda d: ["--run-path", "--nnodes=1", "--nproc-per-node=1", "--monitor-interval=1", *extra,
                                       pt_path("bin/test_script_is_torchelastic_launched.py"),
                                       f"--out-file={os.path.join(d, 'out')}"])

        def check(r, d):
            self.assertSucceeded(r)
            with open(os.path.join(d, "out")) as fp:
                self.assertEqual("True", fp.readline())
        self.each(results, check)

    def test_is_torchelastic_launched(self):
        self._is_torchelastic_launched()

    def test_is_torchelastic_launched_with_logs_spec_defined(self):
        self._is_torchelastic_launched("--logs_specs=default")

    def test_logs_logs_spec_entrypoint_must_be_defined(self):
        # torch: ValueError "Could not find entrypoint under 'torchrun.logs_specs[DOESNOT_EXIST]' key"
        results = self.both(lambda d: ["--run-path", "--nnodes=1", "--nproc-per-node=1", "--monitor-interval=1",
                                       "--logs_specs=DOESNOT_EXIST", pt_path("bin/test_script_is_torchelastic_launched.py"),
                                       f"--out-file={os.path.join(d, 'out')}"])
        self.assert_refused(results)

    def _init_method(self, init_method):
        port = free_port()
        results = self.both(lambda d: ["--run-path", "--nnodes=1", "--nproc-per-node=4", "--master-addr=localhost",
                                       f"--master-port={port}", "--monitor-interval=1",
                                       pt_path("bin/test_script_init_method.py"), init_method(port)], timeout=180)

        def check(r, _):
            # nothing to validate, just make sure it runs (each worker prints Done after its allreduce)
            self.assertSucceeded(r)
            self.assertEqual(r.stdout.count("Done"), 4, shown(r))
        self.each(results, check)

    def test_init_method_tcp_with_torchelastic(self):
        self._init_method(lambda port: f"--init-method=tcp://localhost:{port}")

    def test_init_method_env_with_torchelastic(self):
        self._init_method(lambda port: "--init-method=env://")

    def test_capture_logs_using_default_logs_specs(self):
        # --redirect=3 is argparse's prefix of --redirects
        run_id = str(uuid.uuid4().int)
        results = self.both(lambda d: ["--nnodes=1", "--nproc-per-node=4", f"--rdzv-id={run_id}", "--redirect=3", "--tee=3",
                                       "--monitor-interval=1", "--start-method=spawn", "--no-python",
                                       pt_path("bin/test_script.sh"), d],
                            env=self.env(TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE="[rank${rank}]: "))

        def check(r, _):
            self.assertSucceeded(r)
            for i in range(4):
                self.assertIn(f"[rank{i}]: creating ", r.stdout, shown(r))
        self.each(results, check)

    # launch_test.py: torch.distributed.launch.main(args), i.e. `python -m torch.distributed.launch`
    LAUNCH_LAUNCHERS = (("torch.distributed.launch", [PYTHON, "-m", "torch.distributed.launch"]),
                        ("dtlaunch", [DTLAUNCH, "torch.distributed.launch"]))

    def _launch_args(self):
        return ["--nnodes=1", "--nproc-per-node=4", "--monitor-interval=1", "--start-method=spawn",
                "--master-addr=localhost", f"--master-port={free_port()}", "--node-rank=0"]

    def test_launch_without_env(self):
        # Upstream expects this to run; with torch 2.x it cannot: torch.distributed.launch passes the
        # dashed --local-rank=N, and bin/test_script_local_rank.py accepts only --local_rank, so every
        # worker exits 2 (argparse) and the launcher fails (the file is "not currently used"
        # upstream). dtlaunch must pass the same argument and fail the same way.
        results = self.both(lambda d: [*self._launch_args(), pt_path("bin/test_script_local_rank.py")],
                            launchers=self.LAUNCH_LAUNCHERS)

        def check(r, _):
            # (how many workers get as far as "Start execution" is a race: dtlaunch stops the others
            # at the first failure, torchrun at its next monitor tick)
            self.assertRefused(r)
            self.assertIn("Start execution", r.stdout, shown(r))
            self.assertIn("error: the following arguments are required: --local_rank", r.stderr, shown(r))
        self.each(results, check)

    def test_launch_with_env(self):
        results = self.both(lambda d: [*self._launch_args(), "--use-env", pt_path("bin/test_script.py"),
                                       f"--touch-file-dir={d}"], launchers=self.LAUNCH_LAUNCHERS)
        self.assert_touched(results, 4)
        self.assertEqual(*[reported_variables(r.stdout, False) for r, _ in results.values()])

    # torchrun's argparse (allow_abbrev): a unique prefix of a long flag is that flag; an ambiguous one
    # is refused ("ambiguous option: --nproc=2 could match --nproc-per-node, --nproc_per_node").
    def test_argparse_prefixes_of_long_flags(self):
        results = self.both(lambda d: ["--nproc_per=2", "--max_restart=1", "--standalone",
                                       pt_path("bin/test_script.py"), f"--touch-file-dir={d}"])
        self.assert_touched(results, 2)
        self.each(results, lambda r, d: self.assertEqual(
            reported_variables(r.stdout, False)["TORCHELASTIC_MAX_RESTARTS = 1"], 2, shown(r)))
        self.assert_same_variables(results)

    def test_an_ambiguous_prefix_is_refused(self):
        results = self.both(lambda d: ["--nproc=2", "--standalone", pt_path("bin/test_script.py"), f"--touch-file-dir={d}"])
        self.assert_refused(results)
        self.each(results, lambda r, d: self.assertIn("ambiguous option: --nproc", r.stderr, shown(r)))


# ------------------------------------------------------------------------------------------------
# accelerate: the scripts of its wheel, and tests/test_configs/
# ------------------------------------------------------------------------------------------------
def accelerate_scripts():
    found = glob.glob(os.path.join(VENV, "lib", "python*", "site-packages", "accelerate", "test_utils", "scripts"))
    return found[0] if found else None


CONFIG_HEAD = "compute_environment: LOCAL_MACHINE\nnum_machines: 1\nmachine_rank: 0\nmixed_precision: 'no'\n"
# A MULTI_CPU file (accelerate launch runs the script once and leaves the other processes to mpirun;
# dtlaunch starts both, which then run as one 2-process gloo job) and a MULTI_GPU one, which on a
# machine without GPUs accelerate launch runs through torchrun as 2 CPU processes (each of which,
# without ACCELERATE_USE_CPU, sees a one-process state). The MULTI_GPU file runs test_cli.py only:
# test_script.py and test_sync.py take 10-15 s a run on 2 cores and learn nothing more from it.
ACCELERATE_CONFIGS = {
    "multi_cpu": CONFIG_HEAD + "distributed_type: MULTI_CPU\nnum_processes: 2\nuse_cpu: true\n",
    "multi_gpu": CONFIG_HEAD + "distributed_type: MULTI_GPU\nnum_processes: 2\n",
}

DUMP = """import json, os
# One write of the whole line: accelerate launch runs some configs' workers under `python -u`, where
# print() writes the text and its newline apart and two ranks' lines could share one line.
os.write(1, ("DUMP " + json.dumps({k: v for k, v in sorted(os.environ.items()) if k.startswith((
    "ACCELERATE_", "FSDP_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "OMP_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES", "KMP_"))}) + "\\n").encode())
"""

# accelerate's tests/test_configs/: what both launchers do with each file on a machine without GPUs,
# mpirun or SageMaker (accelerate's test_config_compatibility launches all but fp8, invalid, mpi
# and sagemaker; test_invalid_keys expects invalid_keys.yaml refused).
ACCEPT, REFUSE = "accept", "refuse"
TEST_CONFIGS = {
    "0_11_0.yaml": ACCEPT,
    "0_12_0.yaml": ACCEPT,
    # accelerate launch runs mpirun --hostfile /home/user/hostfile -n 16 (and fails: no mpirun here);
    # a launcher that runs no mpirun must refuse it rather than wait for 3 more machines
    "0_28_0_mpi.yaml": REFUSE,
    # accelerate launch fails in its SageMaker launcher (SageMakerConfig has no parallelism_config);
    # the file also sets `debug` twice
    "0_30_0_sagemaker.yaml": REFUSE,
    # fp8 (TE) on 2 processes: accelerate launch starts them and sets ACCELERATE_FP8_*; whether fp8
    # works is the script's concern, and dump.py uses none
    "0_34_0_fp8.yaml": ACCEPT,
    # "The config file at '...invalid_keys.yaml' had unknown keys ('another_invalid_key', 'invalid_key')"
    "invalid_keys.yaml": REFUSE,
    "latest.yaml": ACCEPT,
    "latest_fsdp.yaml": ACCEPT,
    "validate_launch_cmd.yaml": ACCEPT,
}


def dumps(stdout):
    """The workers' DUMP dicts, by rank, without MASTER_PORT: accelerate launch's is 29500 where the
    file gives none, dtlaunch takes a free one (docs/accelerate.md: where dtlaunch differs)."""
    found = [json.loads(line.split("DUMP ", 1)[1]) for line in unprefixed(stdout) if line.startswith("DUMP ")]
    return sorted(found, key=lambda d: int(d.get("RANK", 0)))


class AccelerateCases(PeerTest):
    @classmethod
    def setUpClass(cls):
        cls.scripts = accelerate_scripts()
        if not cls.scripts:
            raise unittest.SkipTest("accelerate/test_utils/scripts is not in the venv's accelerate")

    def config(self, name):
        path = os.path.join(self.tmp, name + ".yaml")
        with open(path, "w") as f:
            f.write(ACCELERATE_CONFIGS[name] + f"main_process_port: {free_port()}\n")
        return path

    def launchers(self, config):
        return (("accelerate launch", [ACCELERATE, "launch", "--config_file", config]),
                ("dtlaunch launch", [DTLAUNCH, "launch", "--config_file", config]),
                ("dtlaunch", [DTLAUNCH, "--config_file", config]))

    def script_everywhere(self, script, configs, done):
        for config in configs:
            for name, argv0 in self.launchers(self.config(config)):
                with self.subTest(config=config, launcher=name):
                    r = run([*argv0, os.path.join(self.scripts, script)], self.env(), timeout=240, cwd=self.tmp)
                    self.assertSucceeded(r)
                    self.assertIn(done, r.stdout, shown(r))

    def test_accelerate_test_script(self):
        # what `accelerate test` runs; its last section
        self.script_everywhere("test_script.py", ["multi_cpu"], "**Breakpoint trigger test**")

    def test_accelerate_test_sync(self):
        self.script_everywhere("test_sync.py", ["multi_cpu"], "Model dtype:")

    def test_accelerate_test_cli(self):
        self.script_everywhere("test_cli.py", ["multi_cpu", "multi_gpu"], "Successfully ran on 0 GPUs")

    def test_accelerates_test_configs_are_accepted_or_refused_alike(self):
        self.assertEqual(sorted(TEST_CONFIGS), sorted(os.path.basename(p) for p in glob.glob(os.path.join(ACC_CONFIGS, "*.yaml"))))
        dump = os.path.join(self.tmp, "dump.py")
        with open(dump, "w") as f:
            f.write(DUMP)
        for name, expected in TEST_CONFIGS.items():
            path = os.path.join(ACC_CONFIGS, name)
            theirs = run([ACCELERATE, "launch", "--config_file", path, dump], self.env(), timeout=60, cwd=self.tmp)
            ours = run([DTLAUNCH, "launch", "--config_file", path, dump], self.env(), timeout=10, cwd=self.tmp)
            for launcher, r in (("accelerate launch", theirs), ("dtlaunch launch", ours)):
                with self.subTest(config=name, launcher=launcher):
                    if expected == ACCEPT:
                        self.assertSucceeded(r)
                    else:
                        self.assertRefused(r)
            with self.subTest(config=name, launcher="dtlaunch launch", agrees="workers' variables"):
                if expected == ACCEPT and theirs.returncode == 0 and ours.returncode == 0:
                    self.assertEqual([{k: v for k, v in d.items() if k != "MASTER_PORT"} for d in dumps(ours.stdout)],
                                     [{k: v for k, v in d.items() if k != "MASTER_PORT"} for d in dumps(theirs.stdout)])
            if name == "invalid_keys.yaml":
                with self.subTest(config=name, launcher="dtlaunch launch", names="file, line and key"):
                    self.assertRegex(ours.stderr, r"invalid_keys\.yaml:1[45]:\d+: (another_)?invalid_key", shown(ours))


# ------------------------------------------------------------------------------------------------
# transformers: tests/trainer/distributed/scripts/
# ------------------------------------------------------------------------------------------------
TF_CASES = {
    # script: arguments (upstream passes --output_dir; TrainingArguments' scripts also get --report_to none)
    "eval_ddp.py": ["--report_to", "none"],
    "dispatch_batches.py": ["--report_to", "none"],
    "worker_seed.py": ["--report_to", "none"],
    "training_parity.py": ["--report_to", "none"],
    "batch_rebalance_ddp.py": [],
    "moe_aux_loss.py": [],
}

COMPARE_MOE = """
import sys, torch
a, b = (torch.load(p, weights_only=True) for p in sys.argv[1:3])
torch.testing.assert_close(a["loss"], b["loss"], atol=0, rtol=0)
assert a["gradients"].keys() == b["gradients"].keys(), (a["gradients"].keys(), b["gradients"].keys())
for name, g in a["gradients"].items():
    torch.testing.assert_close(g, b["gradients"][name], atol=0, rtol=0)
print("same loss", float(a["loss"]), "and", len(a["gradients"]), "gradients")
"""


def train_losses(stdout):
    """The Trainer's logged losses (its progress callback prints each logs dict on the main process)."""
    return [float(m) for m in re.findall(r"'(?:train_)?loss': '?([-+0-9.e]+)'?", stdout)]


class TransformersTrainerScripts(PeerTest):
    @classmethod
    def setUpClass(cls):
        if subprocess.run([PYTHON, "-c", "import importlib.util, sys; sys.exit(not importlib.util.find_spec('transformers'))"]
                          ).returncode != 0:
            raise unittest.SkipTest(f"no transformers in {VENV} (scripts/parity/make_venv.sh installs it)")

    def env(self, **extra):
        # accelerate's CPU switch (what `accelerate launch --cpu` gives its workers): without it, a
        # torchrun-started process on a machine without GPUs gets a one-process PartialState, each
        # rank trains alone, and batch_rebalance_ddp reports world_size=1, ok=False and worker_seed's
        # ranks draw the same numbers, under the real launchers as under dtlaunch
        return super().env(ACCELERATE_USE_CPU="true", **extra)

    def runs(self, script, pair):
        """{launcher: (result, output_dir)} for torchrun/dtlaunch or accelerate launch/dtlaunch launch,
        as transformers' DDPCommandsMixin builds them."""
        results = {}
        for name in pair:
            out = os.path.join(self.tmp, name.replace(" ", "_"))
            port = free_port()
            if name in ("torchrun", "dtlaunch"):
                argv0 = [TORCHRUN if name == "torchrun" else DTLAUNCH, "--nproc_per_node=2", "--nnodes=1",
                         f"--master_port={port}"]
            else:
                argv0 = [ACCELERATE if name == "accelerate launch" else DTLAUNCH, "launch", "--config_file",
                         TF_DDP_CONFIG, "--num_processes", "2", "--main_process_port", str(port)]
            argv = [*argv0, os.path.join(TF_SCRIPTS, script), "--output_dir", out, *TF_CASES[script]]
            results[name] = (run(argv, self.env(), timeout=240, cwd=self.tmp), out)
        return results

    def check(self, script, pair):
        results = self.runs(script, pair)
        real, ours = pair
        (r_real, out_real), (r_ours, out_ours) = results[real], results[ours]
        self.each(results, lambda r, _: self.assertSucceeded(r))
        if not finished(r_real) or not finished(r_ours):
            return
        if script == "training_parity.py":
            with open(os.path.join(out_real, "losses.json")) as f_real, open(os.path.join(out_ours, "losses.json")) as f_ours:
                real_losses, our_losses = json.load(f_real), json.load(f_ours)
            self.assertEqual(len(real_losses), 5)
            self.assertEqual(our_losses, real_losses)
        elif script == "batch_rebalance_ddp.py":
            with open(os.path.join(out_real, "result.json")) as f_real, open(os.path.join(out_ours, "result.json")) as f_ours:
                real_result, our_result = json.load(f_real), json.load(f_ours)
            self.assertTrue(real_result["ok"], real_result)
            self.assertEqual(our_result, real_result)
        elif script == "moe_aux_loss.py":
            r = run([PYTHON, "-c", COMPARE_MOE, os.path.join(out_real, "result.pt"), os.path.join(out_ours, "result.pt")],
                    self.env(), timeout=120)
            self.assertSucceeded(r)
        # every script: the same losses in the Trainer's printed logs (none for eval_ddp, moe_aux_loss
        # and batch_rebalance_ddp, which train nothing)
        if script in ("dispatch_batches.py", "worker_seed.py", "training_parity.py"):
            self.assertTrue(train_losses(r_real.stdout), shown(r_real))
        self.assertEqual(sorted(train_losses(r_ours.stdout)), sorted(train_losses(r_real.stdout)))


def _add_transformers_tests():
    for script in TF_CASES:
        stem = script[:-3]
        for pair, label in ((("torchrun", "dtlaunch"), "torchrun"), (("accelerate launch", "dtlaunch launch"), "accelerate")):
            def test(self, script=script, pair=pair):
                self.check(script, pair)
            test.__name__ = f"test_{stem}_under_{label}_and_dtlaunch"
            test.__doc__ = f"{script}: {pair[0]} against {pair[1]}"
            setattr(TransformersTrainerScripts, test.__name__, test)


_add_transformers_tests()


if __name__ == "__main__":
    if not os.path.exists(PYTHON) or subprocess.run([PYTHON, "-c", "import accelerate, torch.distributed"],
                                                    capture_output=True).returncode != 0:
        print(f"skipped: accelerate's venv is absent or broken ({VENV}; scripts/parity/make_venv.sh makes it)")
        sys.exit(77)
    main()
