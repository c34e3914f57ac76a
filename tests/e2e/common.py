"""Shared helpers for the end-to-end tests: run the real dtlaunch binary with the test worker, wait
for events with bounded timeouts (never a sleep), and prove no process of the test outlives it."""
import os
import random
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
DTLAUNCH = os.environ.get("DTLAUNCH", os.path.join(HERE, "../../build/apps/dtlaunch/dtlaunch"))
WORKER = os.environ.get("TEST_WORKER", os.path.join(HERE, "../../build/tests/test_worker"))
FAKE_NVML = os.environ.get("FAKE_NVML", os.path.join(HERE, "../../build/tests/fake_nvml/libnvidia-ml.so.1"))


def tagged_pids(tag):
    """Live processes whose environment carries this test's tag (workers and their children)."""
    needle = ("DTL_TEST_TAG=" + tag).encode()
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    pids.append(int(name))
        except OSError:
            pass
    return pids


def rank_pids(tag, comm_prefix=""):
    """{RANK: pid} of the test's workers (their environment carries `tag`) whose command name starts
    with `comm_prefix`."""
    found = {}
    needle = ("DTL_TEST_TAG=" + tag).encode()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{name}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        if needle in env and comm.startswith(comm_prefix):
            for e in env:
                if e.startswith(b"RANK="):
                    found[int(e[5:])] = int(name)
    return found


def free_port():
    """A port on 127.0.0.1 that nothing listens on now, below the kernel's ephemeral range: a port
    from that range (bind to 0) can meanwhile become the local port of a connection another test
    (ctest -j) makes, and the process that was to listen on it fails with EADDRINUSE."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(100):
        port = random.randint(max(1024, low - 12000), low - 1)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_env(stdout):
    """{local_rank: {KEY: VALUE}} from the test worker's `env` lines, prefixed [<role><local_rank>]:."""
    ranks = {}
    for line in stdout.splitlines():
        m = re.match(r"^\[\w+?(\d+)\]:(\w+)=(.*)$", line)
        if m:
            ranks.setdefault(int(m.group(1)), {})[m.group(2)] = m.group(3)
    return ranks


def have_torch():
    """Debian's python3-torch, which the PyTorch tests run under (scripts/setup.sh installs it)."""
    return subprocess.run(["/usr/bin/python3", "-c", "import torch.distributed"], capture_output=True).returncode == 0



def torch_pythons():
    """[(label, python)] of the torches there are: Debian's 1.13 (/usr/bin/python3) and a 2.x from
    $DTL_TORCH2_PYTHON, else accelerate's venv ($DTL_ACCELERATE_VENV, else
    ~/.cache/dtlaunch/venv-accelerate), each only when `import torch.distributed` works there."""
    venv = os.environ.get("DTL_ACCELERATE_VENV", os.path.expanduser("~/.cache/dtlaunch/venv-accelerate"))
    found = []
    for python in ["/usr/bin/python3", os.environ.get("DTL_TORCH2_PYTHON", ""), os.path.join(venv, "bin/python")]:
        if not python or not os.path.exists(python) or any(p == python for _, p in found):
            continue
        r = subprocess.run([python, "-c", "import torch, torch.distributed; print(torch.__version__)"],
                           capture_output=True, text=True)
        if r.returncode == 0:
            found.append((f"torch {r.stdout.strip()}", python))
    return found

# A real PyTorch worker: a gloo process group from dtlaunch's environment, and an allreduce of rank+1
# (3 workers: sum=6).
ALLREDUCE_SCRIPT = """
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print(f"rank={dist.get_rank()} world={dist.get_world_size()} sum={t.item():.0f} "
      f"elastic={dist.is_torchelastic_launched()}", flush=True)
dist.destroy_process_group()
"""


def write_allreduce_script(directory):
    path = os.path.join(directory, "allreduce.py")
    with open(path, "w") as f:
        f.write(ALLREDUCE_SCRIPT)
    return path


class Running:
    """A dtlaunch started in the background, whose output is read as it arrives."""

    def __init__(self, args, env, **popen_args):
        self.proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen_args)
        self.out = b""
        self.err = b""

    def _read_some(self, deadline):
        streams = [s for s in (self.proc.stdout, self.proc.stderr) if not s.closed]
        if not streams:
            return False
        ready, _, _ = select.select(streams, [], [], max(0.0, deadline - time.monotonic()))
        for s in ready:
            chunk = os.read(s.fileno(), 65536)
            if not chunk:
                s.close()
            elif s is self.proc.stdout:
                self.out += chunk
            else:
                self.err += chunk
        return bool(ready)

    def wait_for(self, pattern, count=1, timeout=30, stream="out"):
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern.encode(), re.M)
        while True:
            text = self.out if stream == "out" else self.err
            if len(regex.findall(text)) >= count:
                return
            if time.monotonic() > deadline or not self._read_some(deadline):
                raise AssertionError(
                    f"timed out waiting for {count}x {pattern!r}\nstdout:\n{self.out.decode(errors='replace')}"
                    f"\nstderr:\n{self.err.decode(errors='replace')}")

    def finish(self, timeout=60):
        deadline = time.monotonic() + timeout
        while self._read_some(deadline):
            pass
        try:
            code = self.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError("dtlaunch did not exit in time")
        return subprocess.CompletedProcess(self.proc.args, code, self.out.decode(), self.err.decode())


def describe_process(pid):
    """One line on a process, for a failure's message: its pid, state, parent, cgroup and command."""
    def read(name):
        try:
            with open(f"/proc/{pid}/{name}", "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""
    fields = read("stat").rsplit(")", 1)[-1].split()
    state, ppid = (fields[0], fields[1]) if len(fields) > 1 else ("?", "?")
    cgroup = [line[3:] for line in read("cgroup").splitlines() if line.startswith("0::")]
    return f"  pid {pid} state {state} ppid {ppid} cgroup {cgroup[0] if cgroup else '?'}: {read('cmdline').replace(chr(0), ' ')}"


class LaunchTest(unittest.TestCase):
    def setUp(self):
        self.tag = uuid.uuid4().hex
        self.tmp = tempfile.mkdtemp(prefix="dtl-e2e-")

    def tearDown(self):
        self.assert_no_leftovers()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def env(self, **extra):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PET_", "TORCHELASTIC_", "DTLAUNCH_"))
               and k not in ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MASTER_ADDR", "MASTER_PORT")}
        env["DTL_TEST_TAG"] = self.tag
        # a developer's own ~/.config/dtlaunch/default_config.yaml must not change the tests
        env["XDG_CONFIG_HOME"] = os.path.join(self.tmp, "no-config")
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def launch(self, *args, env=None, timeout=60, stdin=subprocess.DEVNULL):
        return subprocess.run([DTLAUNCH, *map(str, args)], env=env or self.env(), capture_output=True,
                              text=True, timeout=timeout, stdin=stdin)

    def start(self, *args, env=None):
        return Running([DTLAUNCH, *map(str, args)], env or self.env())

    def worker(self, *args):
        """dtlaunch arguments that run the test worker directly (no python)."""
        return ["--no_python", WORKER, *map(str, args)]

    def assert_no_leftovers(self, timeout=10):
        """Every process of this test is gone, or goes within `timeout` (waited on through pidfds)."""
        deadline = time.monotonic() + timeout
        alive = tagged_pids(self.tag)
        for pid in alive:
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                continue
            try:
                select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            finally:
                os.close(fd)
        left = tagged_pids(self.tag)
        seen = [describe_process(pid) for pid in left]
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        self.assertEqual(left, [], "processes left running after the test:\n" + "\n".join(seen))

    def assertExitCode(self, result, code):
        self.assertEqual(result.returncode, code,
                         f"exit code {result.returncode}, expected {code}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}")


# The exit code of a file whose every test skipped: ctest's SKIP_RETURN_CODE (tests/CMakeLists.txt)
# reports it as Skipped, not as a pass.
SKIPPED = 77


def main():
    """Runs the file's tests. Exit 1 when one failed; else 77 when none ran (all skipped: no root,
    no torch, no dtl-train), else 0, after naming any that skipped."""
    result = unittest.main(verbosity=2, exit=False).result
    if not result.wasSuccessful():
        sys.exit(1)
    # A class whose setUpClass skips is one entry that no test of it ran under.
    skipped_tests = sum(1 for test, _ in result.skipped if isinstance(test, unittest.TestCase))
    ran = result.testsRun - skipped_tests
    for test, reason in result.skipped:
        print(f"SKIPPED {test.id() if isinstance(test, unittest.TestCase) else test}: {reason}", file=sys.stderr)
    if result.skipped and ran == 0:
        print(f"every test of this file skipped: exit {SKIPPED} (ctest: Skipped)", file=sys.stderr)
        sys.exit(SKIPPED)
    if result.skipped:
        print(f"{ran} test(s) ran, {len(result.skipped)} skipped (above)", file=sys.stderr)
    sys.exit(0)


def poll_until(condition, timeout):
    """For state that no event announces (another process's descriptors, a file): look every 10 ms."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
