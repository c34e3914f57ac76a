"""Signals and shutdown: forwarded, escalated after the timeout, and never an orphan left behind."""
import os
import pathlib
import signal
import subprocess
import time

from common import DTLAUNCH, LaunchTest, main


class Signals(LaunchTest):
    def start_paused(self, *extra, nproc=3):
        run = self.start(f"--nproc_per_node={nproc}", "--master_port=0", *extra)
        run.wait_for(r"^\[default\d\]:ready rank \d$", count=nproc)
        return run

    def check_forwarded(self, sig):
        run = self.start_paused(*self.worker("pause"))
        run.proc.send_signal(sig)
        r = run.finish()
        self.assertExitCode(r, 128 + sig)
        self.assertIn(f"received {signal.Signals(sig).name}, stopping the workers", r.stderr)
        self.assertNotIn("FAILED", r.stderr)

    def test_sigterm_is_forwarded_and_dtlaunch_exits_128_plus_15(self):
        self.check_forwarded(signal.SIGTERM)

    def test_sigint_is_forwarded(self):
        self.check_forwarded(signal.SIGINT)

    def test_sighup_is_forwarded(self):
        self.check_forwarded(signal.SIGHUP)

    def test_sigquit_is_forwarded(self):
        self.check_forwarded(signal.SIGQUIT)

    def test_a_worker_that_ignores_sigterm_is_killed_after_the_shutdown_timeout(self):
        run = self.start_paused("--shutdown_timeout=0.5", *self.worker("ignore-stop"), nproc=2)
        run.proc.send_signal(signal.SIGTERM)
        r = run.finish(timeout=20)
        self.assertExitCode(r, 128 + signal.SIGTERM)
        self.assertIn("workers still running 0.5s after the stop signal: sending SIGKILL", r.stderr)

    def test_a_second_signal_while_stopping_kills_at_once(self):
        run = self.start_paused("--shutdown_timeout=600", *self.worker("ignore-stop"), nproc=2)
        run.proc.send_signal(signal.SIGINT)
        run.wait_for("stopping the workers", stream="err")
        run.proc.send_signal(signal.SIGINT)
        r = run.finish(timeout=20)
        self.assertExitCode(r, 128 + signal.SIGINT)
        self.assertIn("received SIGINT while stopping: killing the workers now", r.stderr)

    def test_grandchildren_are_stopped_with_their_worker(self):
        run = self.start_paused(*self.worker("grandchild", self.tmp), nproc=2)
        pids = [int(pathlib.Path(self.tmp, f"{r}.pid").read_text()) for r in range(2)]
        for pid in pids:
            os.kill(pid, 0)  # alive while the job runs
        run.proc.send_signal(signal.SIGTERM)
        self.assertExitCode(run.finish(), 128 + signal.SIGTERM)
        # tearDown proves they are gone

    def test_children_left_by_successful_workers_are_stopped(self):
        r = self.launch("--nproc_per_node=2", "--master_port=0", *self.worker("grandchild", self.tmp, "exit"))
        self.assertExitCode(r, 0)

    def test_a_child_that_left_the_process_group_is_stopped_too(self):
        run = self.start_paused(*self.worker("grandchild", self.tmp, "setsid"), nproc=2)
        run.proc.send_signal(signal.SIGTERM)
        self.assertExitCode(run.finish(), 128 + signal.SIGTERM)

    def test_sigkill_of_dtlaunch_leaves_no_worker_or_grandchild_running(self):
        tmpdir = os.path.join(self.tmp, "tmp")
        os.mkdir(tmpdir)
        run = self.start("--nproc_per_node=3", "--master_port=0", *self.worker("grandchild", self.tmp),
                         env=self.env(TMPDIR=tmpdir))
        run.wait_for(r"^\[default\d\]:ready rank \d$", count=3)
        self.assertEqual(len(os.listdir(tmpdir)), 1)  # the run's directory for error files
        run.proc.kill()
        run.proc.wait(timeout=10)
        # workers die through PR_SET_PDEATHSIG, their children through the orphan guard, which (a
        # fork of dtlaunch, so it carries the tag too) is waited for here as well
        self.assert_no_leftovers()
        # and removed the run's directory before it went
        self.assertEqual(os.listdir(tmpdir), [])
        run.finish()

    def test_with_stdin_and_stdout_closed_a_sigkilled_dtlaunch_still_leaves_no_grandchild(self):
        # `dtlaunch ... <&- >&-`: the lowest free descriptors are 0 and 1, where the orphan guard's
        # pipe must not land (the guard closes 0 and 1, and so lost its pipe and exited at once)
        proc = subprocess.Popen(["/bin/sh", "-c", 'exec "$@" <&- >&-', "sh", DTLAUNCH, "--nproc_per_node=2",
                                 "--master_port=0", *self.worker("grandchild", self.tmp)],
                                env=self.env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while sorted(os.listdir(self.tmp)) != ["0.pid", "1.pid"] or \
                any(os.path.getsize(os.path.join(self.tmp, f)) == 0 for f in os.listdir(self.tmp)):
            self.assertIsNone(proc.poll(), "dtlaunch exited before its workers started")
            self.assertLess(time.monotonic(), deadline, "the workers did not start")
            time.sleep(0.01)
        proc.kill()
        err = proc.communicate(timeout=10)[1].decode()
        self.assertNotIn("orphan guard", err)
        # tearDown proves the grandchildren are gone: only the guard could have stopped them

    def test_signals_to_handle_limits_what_is_forwarded(self):
        run = self.start_paused("--signals_to_handle=SIGUSR1", *self.worker("pause"), nproc=2)
        run.proc.send_signal(signal.SIGUSR1)
        self.assertExitCode(run.finish(), 128 + signal.SIGUSR1)

    # A script that checkpoints on SIGUSR1 or SIGUSR2 (Slurm's --signal=USR1@90, submitit's USR2)
    # and then goes on; sh runs a trap once its `sleep` ends.
    def checkpointer(self):
        done = os.path.join(self.tmp, "done")
        return ["--no_python", "sh", "-c",
                "trap 'echo checkpoint USR1 rank $RANK' USR1; trap 'echo checkpoint USR2 rank $RANK' USR2; "
                f"echo ready rank $RANK; i=0; while [ ! -e {done} ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done"]

    def test_sigusr1_and_sigusr2_reach_every_worker_and_stop_nothing(self):
        run = self.start_paused(*self.checkpointer(), nproc=2)
        run.proc.send_signal(signal.SIGUSR1)
        run.wait_for(r"^\[default\d\]:checkpoint USR1 rank \d$", count=2)
        run.proc.send_signal(signal.SIGUSR2)
        run.wait_for(r"^\[default\d\]:checkpoint USR2 rank \d$", count=2)
        open(os.path.join(self.tmp, "done"), "w").close()
        r = run.finish()
        self.assertExitCode(r, 0)
        self.assertIn("passing SIGUSR1 on to the workers", r.stderr)

    def test_sigxcpu_and_sigalrm_stop_the_job_as_sigterm_does_with_a_line_naming_them(self):
        for sig in (signal.SIGXCPU, signal.SIGALRM):
            with self.subTest(sig=sig.name):
                run = self.start_paused(*self.worker("pause"), nproc=2)
                run.proc.send_signal(sig)
                r = run.finish()
                self.assertExitCode(r, 128 + signal.SIGTERM)
                self.assertIn(f"received {sig.name}: stopping the workers as for SIGTERM", r.stderr)
                self.assert_no_leftovers()


if __name__ == "__main__":
    main()
