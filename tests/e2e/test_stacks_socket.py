"""`dtlaunch stacks`' socket under attack by the job's own user and by another one: held connections
are capped, concurrent asks share one stack read and a client that left costs none, `dtlaunch top`'s
`ranks` asks are answered meanwhile and read no stack, accepting pauses when descriptors run out, a
folder another user took first (in six forms) is warned about and a private one used instead, and a
stale socket whose pid now belongs to another process is cleaned up.
The ranks are Debian's python3; their stacks are read by the oracle venv's py-spy, through a wrapper
that counts its runs."""
import glob
import json
import os
import pwd
import resource
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import unittest
import uuid

from common import DTLAUNCH, LaunchTest, Running, main, poll_until

VENV = os.environ.get("DTL_ACCELERATE_VENV", os.path.expanduser("~/.cache/dtlaunch/venv-accelerate"))
PY_SPY = os.path.join(VENV, "bin", "py-spy")
PYTHON = "/usr/bin/python3"

SCRIPT = '''
import sys, time
print("ready", flush=True)
time.sleep(float(sys.argv[1]))
'''

# py-spy, after SLOW_READ_S seconds, each run a line in READS_LOG.
WRAPPER = '''#!/bin/sh
echo "$*" >> "{log}"
sleep "{slow}"
exec "{py_spy}" "$@"
'''

CAP = 32
BUSY = f"dtlaunch: {CAP} `dtlaunch stacks` already wait for this job's answer: ask again once they have it\n"


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def descriptors(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def stop_jobs(jobs):
    """Jobs a failed test left running: SIGKILLed (their orphan guard ends the workers) and reaped."""
    for job in jobs:
        if job.proc.poll() is None:
            job.proc.kill()
        job.proc.wait()
        for stream in (job.proc.stdout, job.proc.stderr):
            stream.close()


def read_to_end(clients, timeout):
    """What each client received until the job closed it, or the time was up."""
    got = {c: b"" for c in clients}
    open_ = set(clients)
    deadline = time.monotonic() + timeout
    while open_ and time.monotonic() < deadline:
        ready, _, _ = select.select(list(open_), [], [], max(0.0, deadline - time.monotonic()))
        for c in ready:
            try:
                chunk = c.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if chunk:
                got[c] += chunk
            else:
                open_.discard(c)
    return [got[c] for c in clients]


@unittest.skipUnless(os.path.exists(PY_SPY), f"no py-spy at {PY_SPY} (scripts/parity/make_venv.sh)")
class StacksSocket(LaunchTest):
    def setUp(self):
        super().setUp()
        self.script = os.path.join(self.tmp, "sleepy.py")
        with open(self.script, "w") as f:
            f.write(SCRIPT)
        # A folder of this test's own for the jobs' sockets: no other test's job is seen here.
        self.runtime = os.path.join(self.tmp, "run")
        os.mkdir(self.runtime, 0o700)
        self.reads_log = os.path.join(self.tmp, "reads.log")
        self.clients = []
        self.jobs = []

    def tearDown(self):
        for c in self.clients:
            c.close()
        stop_jobs(self.jobs)
        super().tearDown()

    def job_env(self, slow_read_s=0, **extra):
        wrapper = os.path.join(self.tmp, f"py-spy-{slow_read_s}")
        with open(wrapper, "w") as f:
            f.write(WRAPPER.format(log=self.reads_log, slow=slow_read_s, py_spy=PY_SPY))
        os.chmod(wrapper, 0o700)
        return self.env(PYTHON_EXEC=PYTHON, XDG_RUNTIME_DIR=self.runtime, DTLAUNCH_PY_SPY=wrapper, **extra)

    def start_job(self, env, nproc=2, sleep_s=120, prefix=()):
        job = Running([*prefix, DTLAUNCH, f"--nproc_per_node={nproc}", "--standalone", self.script, str(sleep_s)], env)
        self.jobs.append(job)
        job.wait_for(r"ready", count=nproc)
        return job

    def socket_of(self, job, folder=None):
        path = os.path.join(folder or os.path.join(self.runtime, "dtlaunch"), f"{job.proc.pid}.sock")
        self.assertTrue(poll_until(lambda: os.path.exists(path), 10), f"no socket at {path}")
        return path

    def connect(self, path):
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect(path)
        self.clients.append(c)
        return c

    def runs(self):
        """py-spy's runs, each its arguments."""
        try:
            with open(self.reads_log) as f:
                return f.read().splitlines()
        except FileNotFoundError:
            return []

    def reads(self):
        """How many stack readings py-spy made: its Python frames, each followed by its native ones
        where the Python frames place the rank nowhere (a rank asleep in its own code)."""
        return len([line for line in self.runs() if "--native" not in line])

    def stacks(self, env, *args):
        return subprocess.run([DTLAUNCH, "stacks", *map(str, args)], env=env, capture_output=True, text=True,
                              timeout=60)

    def stop(self, job):
        job.proc.send_signal(signal.SIGTERM)
        done = job.finish(timeout=60)
        self.assertExitCode(done, 128 + signal.SIGTERM)
        return done

    def test_held_connections_are_capped_and_the_ones_that_wait_share_one_read(self):
        env = self.job_env(slow_read_s=3)
        job = self.start_job(env)
        path = self.socket_of(job)
        before = descriptors(job.proc.pid)
        clients = [self.connect(path) for _ in range(200)]
        # While the one read is under way, the job holds the capped number of connections only.
        self.assertTrue(poll_until(lambda: descriptors(job.proc.pid) <= before + CAP + 8, 5),
                        f"{descriptors(job.proc.pid)} descriptors, {before} before 200 connections")
        answers = read_to_end(clients, 30)
        busy = [a for a in answers if a == BUSY.encode()]
        stacks = [a for a in answers if a.startswith(b"dtlaunch: the stacks of 2 ranks on ")]
        self.assertEqual((len(busy), len(stacks)), (200 - CAP, CAP), answers[:3])
        self.assertEqual(len(set(stacks)), 1)  # one read's answer for every one that waited
        self.assertEqual(self.reads(), 2)  # py-spy once per rank
        self.assertIn(b"\n    thread MainThread\n      <module> (sleepy.py:4)\n", stacks[0])
        self.stop(job)

    def test_a_client_that_connected_and_left_costs_no_read(self):
        env = self.job_env()
        job = self.start_job(env)
        path = self.socket_of(job)
        for _ in range(50):
            self.connect(path).close()
        r = self.stacks(env)  # a read for it alone
        self.assertExitCode(r, 0)
        self.assertIn(f"(pid {job.proc.pid}):", r.stdout)
        self.assertEqual(self.reads(), 2)
        self.stop(job)

    def test_ranks_asks_read_no_stack_and_are_answered_while_a_stack_read_is_under_way(self):
        env = self.job_env(slow_read_s=3)
        job = self.start_job(env)
        path = self.socket_of(job)
        r = subprocess.run([DTLAUNCH, "top", "--json"], env=env, capture_output=True, text=True, timeout=30)
        self.assertExitCode(r, 0)
        self.assertEqual([x["rank"] for x in json.loads(r.stdout)["ranks"]], [0, 1])
        self.assertEqual(self.runs(), [])  # the figures come from /proc alone
        # A `dtlaunch stacks` whose read takes 3 s per rank; meanwhile `top` and clients that say
        # `ranks` (one done writing at once) are answered, and join no read.
        stacks = subprocess.Popen([DTLAUNCH, "stacks"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        try:
            self.assertTrue(poll_until(lambda: self.reads() >= 1, 10), "no stack read began")
            asked = time.monotonic()
            top = subprocess.run([DTLAUNCH, "top", "--json"], env=env, capture_output=True, text=True, timeout=30)
            self.assertExitCode(top, 0)
            self.assertEqual(len(json.loads(top.stdout)["ranks"]), 2)
            clients = [self.connect(path) for _ in range(8)]
            for n, c in enumerate(clients):
                c.sendall(b"ranks\n")
                if n % 2:
                    c.shutdown(socket.SHUT_WR)
            answers = read_to_end(clients, 10)
            self.assertTrue(all(len(json.loads(a)["ranks"]) == 2 for a in answers), answers)
            self.assertLess(time.monotonic() - asked, 2.5, "the figures waited for the stack read")
            out, err = stacks.communicate(timeout=60)
        finally:
            if stacks.poll() is None:
                stacks.kill()
                stacks.communicate()
        self.assertEqual(stacks.returncode, 0, err)
        self.assertIn("      <module> (sleepy.py:4)\n", out)
        self.assertEqual(self.reads(), 2)  # py-spy once per rank: the stacks' reading alone
        self.stop(job)

    def test_out_of_descriptors_the_job_pauses_accepting_instead_of_spinning(self):
        env = self.job_env(slow_read_s=2)
        job = self.start_job(env, nproc=1)
        pid = job.proc.pid
        path = self.socket_of(job)
        limit = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        # Room for 4 more descriptors: the fifth client waits in the backlog, accept() fails.
        soft = descriptors(pid) + 4
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, limit[1]))
        clients = []
        for _ in range(20):
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.setblocking(False)
            try:
                c.connect(path)
            except BlockingIOError:
                pass
            clients.append(c)
            self.clients.append(c)
        self.assertTrue(poll_until(lambda: descriptors(pid) >= soft, 10), "the clients were never taken")
        used = cpu_seconds(pid)
        time.sleep(1.5)  # a spinning loop shows in CPU time; nothing else would
        spent = cpu_seconds(pid) - used
        print(f"dtlaunch used {spent:.2f} s of CPU in 1.5 s out of descriptors", file=sys.stderr)
        self.assertLess(spent, 0.15, "dtlaunch spun on accept() while out of descriptors")
        job.wait_for(r"`dtlaunch stacks`: cannot accept connections \(Too many open files\); trying again every "
                     r"100 ms", stream="err", timeout=10)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, limit)
        for c in clients:
            c.setblocking(True)
        answers = read_to_end(clients, 30)
        self.assertTrue(all(a.startswith(b"dtlaunch: the stacks of 1 ranks on ") for a in answers), answers)
        self.assertExitCode(self.stacks(env), 0)
        self.stop(job)

    def test_a_stale_socket_whose_pid_is_now_another_process_is_removed_and_no_job(self):
        env = self.job_env()
        job = self.start_job(env)
        folder = os.path.dirname(self.socket_of(job))
        # A SIGKILLed dtlaunch's socket, named for a pid a `sleep` has now; and a live socket that a
        # process other than the one it is named for listens on.
        sleeper = subprocess.Popen(["sleep", "60"], env=self.env())
        stale = os.path.join(folder, f"{sleeper.pid}.sock")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(stale)
        s.close()
        other = subprocess.Popen(["sleep", "60"], env=self.env())
        impostor = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        impostor.bind(os.path.join(folder, f"{other.pid}.sock"))
        impostor.listen(1)
        try:
            r = self.stacks(env)
            self.assertExitCode(r, 0)
            self.assertIn(f"(pid {job.proc.pid}):", r.stdout)
            self.assertFalse(os.path.exists(stale))
            self.assertEqual(self.stacks(env, sleeper.pid).returncode, 1)
            self.assertEqual(self.stacks(env, other.pid).returncode, 1)
        finally:
            impostor.close()
            for p in (sleeper, other):
                p.kill()
                p.wait()
        self.stop(job)


# The six ways a folder of that name may be there before the job: what it is, made by `make(path)`.
def another_users_folder(mode):
    def make(test, path):
        test.as_other_user(lambda: (os.mkdir(path), os.chmod(path, mode)))
    return make


def symlink_to(target_of):
    def make(test, path):
        os.symlink(target_of(test), path)
    return make


def own_folder(test):
    folder = os.path.join(test.tmp, "mine")
    os.makedirs(folder, 0o700, exist_ok=True)
    return folder


def root_only_folder(test):
    folder = os.path.join(test.tmp, "root-only")
    os.makedirs(folder, 0o700, exist_ok=True)
    os.chown(folder, 0, 0)
    return folder


FORMS = {
    "another user's folder, mode 0700": (another_users_folder(0o700), "belongs to uid "),
    "another user's folder, mode 0777": (another_users_folder(0o777), "belongs to uid "),
    "a symlink to the user's own folder": (symlink_to(own_folder), "is a symbolic link"),
    "a symlink to a root-only folder": (symlink_to(root_only_folder), "is a symbolic link"),
    "a regular file": (lambda test, path: open(path, "w").close(), "is a regular file"),
    "a FIFO": (lambda test, path: os.mkfifo(path), "is a FIFO"),
}


@unittest.skipUnless(os.path.exists(PY_SPY), f"no py-spy at {PY_SPY} (scripts/parity/make_venv.sh)")
class FolderTakenFirst(LaunchTest):
    """The folder for the sockets is in a place every user may write to, as /tmp is."""

    @classmethod
    def setUpClass(cls):
        # Another user, real, for the forms that need one: made here as root, removed after.
        cls.other = None
        if os.geteuid() == 0 and shutil.which("useradd"):
            name = "dtl" + uuid.uuid4().hex[:8]
            if subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                              capture_output=True).returncode == 0:
                cls.other = pwd.getpwnam(name)

    @classmethod
    def tearDownClass(cls):
        if cls.other:
            subprocess.run(["userdel", cls.other.pw_name], capture_output=True)

    def setUp(self):
        super().setUp()
        self.jobs = []

    def tearDown(self):
        stop_jobs(self.jobs)
        super().tearDown()

    def as_other_user(self, action):
        os.chmod(self.tmp, 0o711)  # the other user may pass through to the folder as through /
        pid = os.fork()
        if pid == 0:
            try:
                os.setgroups([])
                os.setgid(self.other.pw_gid)
                os.setuid(self.other.pw_uid)
                action()
                os._exit(0)
            except BaseException:
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0, "the other user could not make the folder")

    def check_forms(self, forms):
        script = os.path.join(self.tmp, "sleepy.py")
        with open(script, "w") as f:
            f.write(SCRIPT)
        for n, form in enumerate(forms):
            make, why = FORMS[form]
            with self.subTest(form=form):
                runtime = os.path.join(self.tmp, f"run-{n}")
                os.mkdir(runtime)
                os.chmod(runtime, 0o1777)  # as /tmp
                taken = os.path.join(runtime, "dtlaunch")
                make(self, taken)
                before = os.lstat(taken)
                env = self.env(PYTHON_EXEC=PYTHON, XDG_RUNTIME_DIR=runtime, DTLAUNCH_PY_SPY=PY_SPY)
                job = Running([DTLAUNCH, "--nproc_per_node=1", "--standalone", script, "120"], env)
                self.jobs.append(job)
                job.wait_for(r"ready")
                job.wait_for(rf"dtlaunch: warning: {runtime}/dtlaunch {why}.*, so dtlaunch does not use it: "
                             rf"`dtlaunch stacks` finds this job in {runtime}/dtlaunch\.\w{{6}} instead\n",
                             stream="err")
                [private] = glob.glob(os.path.join(runtime, "dtlaunch.*"))
                mode = os.lstat(private)
                self.assertTrue(stat.S_ISDIR(mode.st_mode))
                self.assertEqual((mode.st_uid, mode.st_mode & 0o777), (os.getuid(), 0o700))
                r = subprocess.run([DTLAUNCH, "stacks"], env=env, capture_output=True, text=True, timeout=60)
                self.assertExitCode(r, 0)
                self.assertIn(f"(pid {job.proc.pid}):", r.stdout)
                self.assertIn("      <module> (sleepy.py:4)\n", r.stdout)
                job.proc.send_signal(signal.SIGTERM)
                self.assertExitCode(job.finish(timeout=60), 128 + signal.SIGTERM)
                self.assertEqual(glob.glob(os.path.join(runtime, "dtlaunch.*")), [])  # gone with the job
                after = os.lstat(taken)  # what was there is left as it was
                self.assertEqual((after.st_ino, after.st_uid, after.st_mode),
                                 (before.st_ino, before.st_uid, before.st_mode))

    def test_a_symlink_a_file_or_a_fifo_there_first_is_warned_about_and_stacks_find_the_job_elsewhere(self):
        self.check_forms([f for f in FORMS if "another user" not in f])

    def test_another_user_s_folder_there_first_is_warned_about_and_stacks_find_the_job_elsewhere(self):
        if not self.other:
            self.skipTest("another user's folder needs root and useradd")
        self.check_forms([f for f in FORMS if "another user" in f])


if __name__ == "__main__":
    main()
