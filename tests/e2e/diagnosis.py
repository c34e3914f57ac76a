"""The hang report as users meet it, one generated cell per way of running a worker: rank 1 stops
before the 4th all_reduce (or raises, prints its traceback and blocks in atexit) while rank 0 waits
in it; each cell checks that the report names rank 1 with its frames, or says why it names none,
and never names rank 0, the rank that waits.

Dimensions: how the worker is started (script.py, -m module, --no_python python3 script.py, a wrapper
that execs Python, one that does not, dtl-train); how stacks are read (py-spy, no py-spy, ptrace
denied); Debian's torch 1.13 and the oracle venv's 2.x; one node or two. test_diagnosis_*.py each run
a slice of the cells, so that ctest runs them side by side."""
import os
import signal
import subprocess

from common import DTLAUNCH, LaunchTest, free_port, rank_pids, torch_pythons

HERE = os.path.dirname(os.path.abspath(__file__))
NO_PTRACE = os.path.join(HERE, "no_ptrace.py")
VENV = os.environ.get("DTL_ACCELERATE_VENV", os.path.expanduser("~/.cache/dtlaunch/venv-accelerate"))
PY_SPY = os.environ.get("DTLAUNCH_TEST_PY_SPY", os.path.join(VENV, "bin", "py-spy"))
DTL_TRAIN = os.environ.get("DTL_TRAIN") or os.path.join(HERE, "../../build/apps/dtl-train/dtl-train")
HANG_TIMEOUT = 6

HANG = '''import atexit, os, sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(4)
for step in range(3):
    dist.all_reduce(t)
    print("step", step, flush=True)
if dist.get_rank() == 1:
    if sys.argv[1:] == ["atexit"]:
        atexit.register(time.sleep, 3600)
        raise RuntimeError("rank 1 went wrong")
    time.sleep(3600)
dist.all_reduce(t)
'''

try:
    import seccomp  # noqa: F401 (Debian's python3-seccomp: no_ptrace.py denies ptrace with it)
    HAVE_SECCOMP = True
except ImportError:
    HAVE_SECCOMP = False

KINDS = ["script", "module", "no_python", "exec_wrapper", "wrapper", "dtl_train"]
PATHS = ["py_spy", "no_py_spy", "no_ptrace"]


def torches():
    """{"1.13": python, "2": python} of the torches found."""
    found = {}
    for label, python in torch_pythons():
        found["1.13" if label.startswith("torch 1.13") else "2"] = python
    return found


TORCHES = torches()


class Cell(LaunchTest):
    """One way of running hang.py (or dtl-train) and reading its stacks."""

    def setUp(self):
        super().setUp()
        with open(os.path.join(self.tmp, "hang.py"), "w") as f:
            f.write(HANG)

    def skip_unless(self, path, python=None, kind=None):
        if path in ("py_spy", "no_ptrace") and not os.access(PY_SPY, os.X_OK):
            self.skipTest(f"no py-spy at {PY_SPY} (scripts/parity/make_venv.sh)")
        if path == "no_ptrace" and not HAVE_SECCOMP:
            self.skipTest("no python3-seccomp: ptrace cannot be denied here")
        if kind == "dtl_train" and not os.access(DTL_TRAIN, os.X_OK):
            self.skipTest("dtl-train is not built")
        if kind != "dtl_train" and python is None:
            self.skipTest("that torch is not installed here")

    def wrapper(self, python, execs):
        path = os.path.join(self.tmp, "run-exec.sh" if execs else "run.sh")
        with open(path, "w") as f:
            f.write(f'#!/bin/sh\nexec {python} "$@"\n' if execs else f'#!/bin/sh\n{python} "$@"\nexit $?\n')
        os.chmod(path, 0o755)
        return path

    def program(self, kind, python, mode):
        """dtlaunch's arguments after the flags, and the environment they need."""
        extra = [] if mode == "sleep" else [mode]
        if kind == "script":
            return ["hang.py", *extra], {"PYTHON_EXEC": python}
        if kind == "module":
            return ["-m", "hang", *extra], {"PYTHON_EXEC": python, "PYTHONPATH": self.tmp}
        if kind == "no_python":
            return ["--no_python", python, "hang.py", *extra], {}
        if kind in ("exec_wrapper", "wrapper"):
            return ["--no_python", self.wrapper(python, kind == "exec_wrapper"), "hang.py", *extra], {}
        return ["--no_python", DTL_TRAIN, "--preset", "tiny", "--steps", "1000000", "--log_every", "5"], {}

    def stack_env(self, path):
        return {"DTLAUNCH_PY_SPY": "" if path == "no_py_spy" else PY_SPY, "OMP_NUM_THREADS": "1"}

    def command(self, path, *args):
        prefix = ["/usr/bin/python3", NO_PTRACE] if path == "no_ptrace" else []
        return [*prefix, DTLAUNCH, *map(str, args)]

    def run_one_node(self, kind, path, python, mode):
        program, env = self.program(kind, python, mode)
        args = ["--nproc_per_node=2", "--master_port", free_port(), f"--hang_timeout={HANG_TIMEOUT}",
                "--on_hang=fail", "--shutdown_timeout=3", *program]
        proc = subprocess.Popen(self.command(path, *args), cwd=self.tmp, env=self.env(**env, **self.stack_env(path)),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if kind == "dtl_train":
            self.stop_rank_once_it_trains(proc, 1)
        out, err = proc.communicate(timeout=150)
        return proc.returncode, err

    def run_two_nodes(self, path, python):
        port = free_port()
        procs = []
        for node in (0, 1):
            args = ["--nnodes=2", f"--node_rank={node}", "--master_addr=127.0.0.1", f"--master_port={port}",
                    "--nproc_per_node=1", f"--hang_timeout={HANG_TIMEOUT}", "--on_hang=fail", "--shutdown_timeout=3",
                    "--no_python", python, "hang.py"]
            procs.append(subprocess.Popen(self.command(path, *args), cwd=self.tmp,
                                          env=self.env(**self.stack_env(path)), stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
        results = [p.communicate(timeout=150) for p in procs]
        return procs[0].returncode, results[0][1], results[1][1]

    def stop_rank_once_it_trains(self, proc, rank):
        """SIGSTOP to dtl-train's `rank` once rank 0 has logged a step: the ranks have then formed
        their group and run collectives together, so rank 0 is left waiting in one."""
        for line in proc.stdout:
            if line.startswith("[default0]:step "):
                pids = rank_pids(self.tag, "dtl-train")
                os.kill(pids[rank], signal.SIGSTOP)
                return
        self.fail("dtl-train did not log a step")

    def check(self, code, err, kind, path, mode):
        """The verdict each cell must reach."""
        self.assertNotRegex(err, r"dtlaunch: suspect rank 0\b", f"the waiting rank named:\n{err}")
        self.assertIn("dtlaunch: hang: no rank printed for", err)
        self.assertEqual(code, 1, err)
        root = err.split("Root Cause (first observed failure):")[-1]
        if kind == "dtl_train":
            # native frames where ptrace allows; either way rank 1 is stopped and rank 0 waits
            self.assertRegex(err, r"dtlaunch: suspect rank 1 on \S+ \(pid \d+\): ")
            self.assertRegex(err, r"\n  1 +\S+ +\d+ +T ")
            if path != "no_ptrace":
                self.assertRegex(err, r"\n  0 .* in a collective\n")
            else:
                self.assertIn("ptrace is not allowed here", err)
        elif mode == "atexit":
            self.assertRegex(err, r"dtlaunch: suspect rank 1 on \S+ \(pid \d+\): ")
            self.assertRegex(err, r"\n  1 .* after its traceback\n")
            self.assertIn("rank      : 1 (local_rank: 1)", root)
            self.assertIn("RuntimeError: rank 1 went wrong", root)
        else:
            self.assertRegex(err, r"dtlaunch: suspect rank 1 on \S+ \(pid \d+\): <module> \(hang\.py:11\)")
            self.assertRegex(err, r"\n  0 .* in a collective\n")
            self.assertIn("rank      : 1 (", root)
        tool = {"py_spy": "py-spy", "no_py_spy": "faulthandler", "no_ptrace": "faulthandler"}[path]
        if kind == "dtl_train":
            tool = "eu-stack"
        if not (kind == "dtl_train" and path == "no_ptrace"):  # no stack read at all
            self.assertRegex(err, rf"  stacks \(.*{tool}.*\):")

    def check_two_nodes(self, code, err0, err1):
        self.assertNotRegex(err0 + err1, r"dtlaunch: suspect rank 0\b", f"the waiting rank named:\n{err0}")
        self.assertRegex(err0, r"dtlaunch: suspect rank 1 on \S+ \(pid \d+\): <module> \(hang\.py:11\)")
        self.assertRegex(err0, r"\n  0 .* in a collective\n")
        self.assertIn("the job's report comes from the node hosting the rendezvous", err1)
        self.assertEqual(code, 1, err0)


def add_cells(cls, kinds, paths, torch_labels, modes=("sleep",), two_nodes=False):
    """Adds one test method per cell to `cls`."""
    for torch_label in torch_labels:
        for kind in kinds:
            for path in paths:
                for mode in modes:
                    if kind == "dtl_train" and (mode != "sleep" or torch_label != torch_labels[0]):
                        continue
                    name = (f"test_{'two_nodes' if two_nodes else kind}_{path}_"
                            f"{'libtorch' if kind == 'dtl_train' else 'torch_' + torch_label.replace('.', '_')}"
                            f"{'' if mode == 'sleep' else '_' + mode}")

                    def cell(self, kind=kind, path=path, torch_label=torch_label, mode=mode):
                        python = TORCHES.get(torch_label)
                        self.skip_unless(path, python, kind)
                        if two_nodes:
                            self.check_two_nodes(*self.run_two_nodes(path, python))
                        else:
                            code, err = self.run_one_node(kind, path, python, mode)
                            self.check(code, err, kind, path, mode)

                    setattr(cls, name, cell)
