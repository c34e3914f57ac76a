"""config/hostlist.h's expansion (through tests/helpers/hostlist_expand) against Slurm's own,
`scontrol show hostnames EXPR`, on many expressions: equal hosts for every valid one, and a refusal
where scontrol says "Invalid hostlist". Skipped with the reason where scontrol is not installed
(scripts/setup.sh installs Debian's slurm-client with slurm-wlm)."""
import os
import random
import shutil
import subprocess
import tempfile
import unittest

from common import HERE, main

HOSTLIST_EXPAND = os.environ.get("HOSTLIST_EXPAND", os.path.join(HERE, "../../build/tests/hostlist_expand"))

VALID = [
    "gpu[01-03,07],cpu5", "node1", "a,b,c", "n[8-11]", "n[008-11]", "n[1-010]", "n[01-3]", "n[1-03]",
    "x[99-101]", "n[9-10]", "a[0]", "a[00]", "a[1,1]", "a[1-2],a1", "[1-2]", "a,,b", " a, b", "a b",
    "n[1-2],", "rack[1-2]-node[01-02]", "n[0-2][1-2]", "a[0-1]b[9-10]", "a[1-2,5-6],b[1,3]", "n5[1-2]",
    "gpu-node[0001-0012]", "a.b.c[1-3]", "n[18446744073709551]", "n[4294967296]", "big[1-2000]",
    "r[1-3]c[01-02]n[7-8]", "x[000-002],y[7],z", "name_with_underscore[3-4]",
]
# What scontrol refuses (a few that it takes oddly, such as "n[1-2" or "a[1-]", dtlaunch refuses
# too; they are in the unit tests, not compared here).
INVALID = ["n[3-1]", "n[]", "n[a-b]", "n[1,,2]", "x[1-3-5]", "n[[1]]", "n[9-10]x", "a[5]b", "a[-2]",
           "n[1-100000]", "n[1-3]x[1-2]y", "a[1-2]]"]


def random_expressions(count, seed=14):
    """Random valid expressions: items of text and one to three groups of numbers and ranges."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        items = []
        for _ in range(rng.randint(1, 3)):
            item = rng.choice(["n", "gpu", "rack-", "a.b"])
            for g in range(rng.randint(0, 3) if item != "a.b" else 1):
                parts = []
                for _ in range(rng.randint(1, 3)):
                    width = rng.randint(1, 3)
                    lo = rng.randint(0, 10 ** width - 1)
                    lo_text = str(lo).zfill(width)
                    parts.append(lo_text if rng.random() < 0.3 else f"{lo_text}-{lo + rng.randint(0, 5)}")
                item += ("x" if g else "") + "[" + ",".join(parts) + "]"
            items.append(item)
        out.append(",".join(items))
    return out


def why_skip():
    """Only a missing scontrol skips: a missing hostlist_expand is a failure."""
    if not shutil.which("scontrol"):
        return "scontrol is not installed (Debian's slurm-client; scripts/setup.sh installs it)"
    return None


class HostlistAgainstScontrol(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        reason = why_skip()
        if reason:
            raise unittest.SkipTest(reason)
        cls.tmp = tempfile.mkdtemp(prefix="dtl-hostlist-")
        # scontrol reads a slurm.conf before anything; it needs no controller to expand a hostlist.
        cls.conf = os.path.join(cls.tmp, "slurm.conf")
        with open(cls.conf, "w") as f:
            f.write("ClusterName=dtlhostlist\nSlurmctldHost=localhost\n")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def scontrol(self, expression):
        r = subprocess.run(["scontrol", "show", "hostnames", expression], capture_output=True, text=True,
                           timeout=30, env={**os.environ, "SLURM_CONF": self.conf})
        if "Invalid hostlist" in r.stdout + r.stderr or r.returncode != 0:
            return None
        return r.stdout.split()

    def ours(self, expression):
        self.assertTrue(os.path.exists(HOSTLIST_EXPAND), f"{HOSTLIST_EXPAND} is not built")
        r = subprocess.run([HOSTLIST_EXPAND, expression], capture_output=True, text=True, timeout=30)
        if r.returncode == 2:
            self.assertIn("hostlist item", r.stderr)
            return None
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout.split()

    def test_valid_expressions_expand_alike(self):
        for expression in VALID + random_expressions(150):
            with self.subTest(expression=expression):
                theirs = self.scontrol(expression)
                self.assertIsNotNone(theirs, f"scontrol refuses {expression!r}: the list is wrong")
                self.assertEqual(self.ours(expression), theirs)

    def test_invalid_expressions_are_refused_by_both(self):
        for expression in INVALID:
            with self.subTest(expression=expression):
                self.assertIsNone(self.scontrol(expression), f"scontrol takes {expression!r}: the list is wrong")
                self.assertIsNone(self.ours(expression))


if __name__ == "__main__":
    main()
