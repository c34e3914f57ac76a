"""--dedup_lines with 8 ranks: the same line from every rank prints once, led by `[ranks 0-7]:`; a line
only some ranks print names them; each rank's lines keep their order; the per-rank files keep every
line as the rank wrote it."""
import glob
import os
import re

from common import LaunchTest, main

# Every rank waits for the others (a file each), then says what every rank says, what half of
# them say, and what it alone says, in that order; then, each after a barrier, what every rank says
# again, and "last".
SCRIPT = r"""
import os, sys, time
rank, world, folder = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), sys.argv[1]

def barrier(name):
    open(os.path.join(folder, f"{name}.{rank}"), "w").close()
    deadline = time.monotonic() + 60
    while sum(os.path.exists(os.path.join(folder, f"{name}.{r}")) for r in range(world)) < world:
        assert time.monotonic() < deadline, "the other ranks never came"
        time.sleep(0.01)

barrier("start")
print("loading the data set", flush=True)
if rank < 4:
    print("warning: the first half is slow", flush=True)
print(f"rank {rank} holds shard {rank}", flush=True)
barrier("step")  # the ranks say it together, within the window, however busy the machine
print("step 1 done", flush=True)
print("to stderr from every rank", file=sys.stderr, flush=True)
barrier("end")
print("last", flush=True)
"""


class DedupLines(LaunchTest):
    def run_ranks(self, *flags):
        script = os.path.join(self.tmp, "say.py")
        with open(script, "w") as f:
            f.write(SCRIPT)
        folder = os.path.join(self.tmp, "barrier")
        os.mkdir(folder)
        self.logs = os.path.join(self.tmp, "logs")
        return self.launch("--nproc_per_node=8", "--master_port=0", "--log_dir", self.logs, *flags, script, folder,
                           env=self.env(PYTHON_EXEC="python3"), timeout=120)

    def test_with_8_ranks_a_line_every_rank_says_prints_once_led_by_their_ranks(self):
        r = self.run_ranks("--dedup_lines", "--tee=3")
        self.assertExitCode(r, 0)
        out = r.stdout.splitlines()
        self.assertEqual(out.count("[ranks 0-7]:loading the data set"), 1, r.stdout)
        self.assertEqual(out.count("[ranks 0-3]:warning: the first half is slow"), 1, r.stdout)
        for rank in range(8):
            self.assertEqual(out.count(f"[rank {rank}]:rank {rank} holds shard {rank}"), 1, r.stdout)
        self.assertEqual(out.count("[ranks 0-7]:step 1 done"), 1, r.stdout)
        self.assertEqual(out.count("[ranks 0-7]:last"), 1, r.stdout)
        self.assertEqual(len(out), 1 + 1 + 8 + 1 + 1, r.stdout)
        self.assertIn("[ranks 0-7]:to stderr from every rank\n", r.stderr)
        self.assertNotIn("[default", r.stdout)
        # each rank's lines in its order: every line that names rank R comes in the order R wrote them
        for rank in range(8):
            said = [line.split(":", 1)[1] for line in out if rank in ranks_of(line)]
            expected = ["loading the data set"] + (["warning: the first half is slow"] if rank < 4 else []) + [
                f"rank {rank} holds shard {rank}", "step 1 done", "last"]
            self.assertEqual(said, expected, r.stdout)
        # the per-rank files keep every line as the rank wrote it
        for rank in range(8):
            [path] = glob.glob(os.path.join(self.logs, "*", "attempt_0", str(rank), "stdout.log"))
            with open(path) as f:
                self.assertEqual(f.read().splitlines(), said_by(rank))

    def test_without_the_flag_every_rank_s_line_prints_with_its_own_prefix(self):
        r = self.run_ranks()
        self.assertExitCode(r, 0)
        self.assertEqual(len(re.findall(r"^\[default\d\]:loading the data set$", r.stdout, re.M)), 8, r.stdout)

    def test_the_flag_comes_from_its_pet_variable_too(self):
        script = os.path.join(self.tmp, "hello.py")
        with open(script, "w") as f:
            f.write("print('hello', flush=True)\n")
        r = self.launch("--nproc_per_node=1", "--master_port=0", script,
                        env=self.env(PYTHON_EXEC="python3", PET_DEDUP_LINES="1"))
        self.assertExitCode(r, 0)
        self.assertEqual(r.stdout, "[rank 0]:hello\n")


def ranks_of(line):
    """The ranks a `[rank N]:` or `[ranks A-B,C]:` lead names."""
    m = re.match(r"^\[ranks? ([\d,-]+)\]:", line)
    ranks = set()
    for item in m.group(1).split(","):
        lo, _, hi = item.partition("-")
        ranks.update(range(int(lo), int(hi or lo) + 1))
    return ranks


def said_by(rank):
    return ["loading the data set"] + (["warning: the first half is slow"] if rank < 4 else []) + [
        f"rank {rank} holds shard {rank}", "step 1 done", "last"]


if __name__ == "__main__":
    main()
