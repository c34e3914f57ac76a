"""Restarts cost the same however many came before: the launcher's memory and its run folder stay
flat over a thousand restarts of eight workers."""
import os
import subprocess

from common import DTLAUNCH, LaunchTest, main


class Restarts(LaunchTest):
    def peak_rss_kib(self, restarts):
        """dtlaunch's peak resident memory over `restarts` restarts of 8 workers that fail at once."""
        proc = subprocess.Popen([DTLAUNCH, "--standalone", f"--max_restarts={restarts}", "--nproc_per_node=8",
                                 "--no_python", "/bin/false"], env=self.env(), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        self.assertEqual(proc.returncode, 1)
        return usage.ru_maxrss

    def test_a_thousand_restarts_take_no_more_memory_than_ten(self):
        # Each retired worker kept two 64 KiB buffers: 1000 restarts of 8 workers reached 75 MB.
        ten = self.peak_rss_kib(10)
        thousand = self.peak_rss_kib(1000)
        self.assertLess(thousand - ten, 1024, f"peak RSS {ten} KiB after 10 restarts, {thousand} KiB after 1000")

    def test_the_temporary_run_folder_holds_one_attempt(self):
        # Without --log_dir, --redirects or --tee the run folder only holds error files: each worker
        # lists it (three levels above its TORCHELASTIC_ERROR_FILE) and fails.
        listing = os.path.join(self.tmp, "listing")
        script = ('ls "$(dirname "$(dirname "$(dirname "$TORCHELASTIC_ERROR_FILE")")")" > ' + listing + '; exit 1')
        r = self.launch("--standalone", "--max_restarts=20", "--no_python", "sh", "-c", script)
        self.assertEqual(r.returncode, 1, r.stderr)
        # beside it, dtlaunch's own: the workers' hook folder and torch's analyzer for the flight recorder
        own = {"python", "flight_recorder_analyzer.py"}
        with open(listing) as f:
            self.assertEqual([n for n in f.read().split() if n not in own], ["attempt_20"])

    def test_a_restart_that_cannot_start_its_workers_ends_with_the_failure_s_summary_and_code(self):
        # Rank 0 fails with 3 after putting a file where attempt 1's folder goes: the restart cannot
        # start a worker (as when dtlaunch is out of descriptors: `pipe: Too many open files`), and
        # the run ends as that failure would have ended it.
        script = 'touch "$(dirname "$(dirname "$(dirname "$TORCHELASTIC_ERROR_FILE")")")/attempt_1"; exit 3'
        r = self.launch("--standalone", "--max_restarts=2", "--no_python", "sh", "-c", script)
        self.assertExitCode(r, 3)
        self.assertIn("dtlaunch: error: cannot start worker 0: ", r.stderr)
        self.assertIn("dtlaunch: warning: restart 1 could not start its workers: the run ends with the failure "
                      "before it\n", r.stderr)
        root = r.stderr.split("Root Cause (first observed failure):")[1]
        self.assertIn("exitcode  : 3", root)
        self.assertEqual(r.stderr.count("restarting the workers"), 1, r.stderr)


if __name__ == "__main__":
    main()
