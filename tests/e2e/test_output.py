"""Output: prefixed whole lines on the console, torchrun's per-rank files, nothing lost or torn."""
import glob
import os
import re

from common import LaunchTest, main


class Output(LaunchTest):
    def test_a_million_lines_arrive_whole_and_in_order(self):
        n = 250000
        r = self.launch("--nproc_per_node=4", "--master_port=0", *self.worker("lines", n), timeout=120)
        self.assertExitCode(r, 0)
        lines = r.stdout.split("\n")
        self.assertEqual(lines[-1], "")
        expected = {rank: 1 for rank in range(4)}
        line_re = re.compile(r"^\[default(\d)\]:r(\d) line (\d+)$")
        for line in lines[:-1]:
            m = line_re.match(line)
            self.assertIsNotNone(m, f"torn or foreign line: {line[:200]!r}")
            rank = int(m.group(1))
            self.assertEqual(int(m.group(2)), rank, line)
            self.assertEqual(int(m.group(3)), expected[rank], f"line lost or out of order: {line}")
            expected[rank] += 1
        self.assertEqual(expected, {rank: n + 1 for rank in range(4)})

    def test_stderr_goes_to_stderr_with_the_same_prefix(self):
        r = self.launch("--nproc_per_node=2", "--master_port=0", *self.worker("stderr", "hello"))
        self.assertExitCode(r, 0)
        self.assertEqual(sorted(r.stdout.splitlines()), ["[default0]:hello out", "[default1]:hello out"])
        self.assertIn("[default1]:hello err\n", r.stderr)

    def test_a_last_line_without_newline_is_not_lost(self):
        r = self.launch("--nproc_per_node=1", "--master_port=0", *self.worker("lines", 2, "tail"))
        self.assertExitCode(r, 0)
        self.assertEqual(r.stdout, "[default0]:r0 line 1\n[default0]:r0 line 2\n[default0]:tail\n")

    def rank_files(self, log_dir, run_id="none"):
        dirs = glob.glob(os.path.join(log_dir, f"{run_id}_*"))
        self.assertEqual(len(dirs), 1, dirs)
        return dirs[0]

    def test_redirects_write_per_rank_files_in_torchruns_layout(self):
        r = self.launch("--nproc_per_node=2", "--master_port=0", "--redirects=3", "--log_dir", self.tmp,
                        *self.worker("stderr", "hi"))
        self.assertExitCode(r, 0)
        self.assertEqual(r.stdout, "")
        self.assertNotIn("hi err", r.stderr)
        run = self.rank_files(self.tmp)
        for lr in range(2):
            d = os.path.join(run, "attempt_0", str(lr))
            self.assertEqual(open(os.path.join(d, "stdout.log")).read(), "hi out\n")
            self.assertEqual(open(os.path.join(d, "stderr.log")).read(), "hi err\n")

    def test_tee_writes_files_and_the_console(self):
        r = self.launch("--nproc_per_node=2", "--master_port=0", "-t", "0:1,1:3", "--log_dir", self.tmp,
                        "--run_id", "teejob", *self.worker("stderr", "hi"))
        self.assertExitCode(r, 0)
        self.assertEqual(sorted(r.stdout.splitlines()), ["[default0]:hi out", "[default1]:hi out"])
        run = self.rank_files(self.tmp, "teejob")
        self.assertEqual(open(os.path.join(run, "attempt_0/0/stdout.log")).read(), "hi out\n")
        self.assertFalse(os.path.exists(os.path.join(run, "attempt_0/0/stderr.log")))
        self.assertEqual(open(os.path.join(run, "attempt_0/1/stderr.log")).read(), "hi err\n")

    def test_each_restart_gets_its_own_attempt_directory(self):
        r = self.launch("--nproc_per_node=2", "--master_port=0", "--max_restarts=1", "--tee=1", "--log_dir",
                        self.tmp, *self.worker("fail-first", 0, 3))
        self.assertExitCode(r, 0)
        run = self.rank_files(self.tmp)
        self.assertEqual(open(os.path.join(run, "attempt_0/0/stdout.log")).read(), "attempt 0 rank 0\n")
        self.assertEqual(open(os.path.join(run, "attempt_1/1/stdout.log")).read(), "attempt 1 rank 1\n")

    def test_local_ranks_filter_limits_the_console_and_keeps_the_rest_in_files(self):
        r = self.launch("--nproc_per_node=3", "--master_port=0", "--local_ranks_filter=1", "--log_dir", self.tmp,
                        *self.worker("lines", 2))
        self.assertExitCode(r, 0)
        self.assertEqual(r.stdout, "[default1]:r1 line 1\n[default1]:r1 line 2\n")
        run = self.rank_files(self.tmp)
        self.assertEqual(open(os.path.join(run, "attempt_0/2/stdout.log")).read(), "r2 line 1\nr2 line 2\n")

    def test_the_prefix_template_variable_is_honoured(self):
        env = self.env(TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE="<${role_name}|${rank}|${local_rank}> ")
        r = self.launch("--nproc_per_node=2", "--master_port=0", "--role=w", *self.worker("lines", 1), env=env)
        self.assertExitCode(r, 0)
        self.assertEqual(sorted(r.stdout.splitlines()), ["<w|0|0> r0 line 1", "<w|1|1> r1 line 1"])

    def test_without_log_files_the_temporary_directory_is_removed(self):
        env = self.env(TMPDIR=self.tmp)
        r = self.launch("--nproc_per_node=2", "--master_port=0", *self.worker("exit", 0), env=env)
        self.assertExitCode(r, 0)
        self.assertEqual(os.listdir(self.tmp), [])


if __name__ == "__main__":
    main()
