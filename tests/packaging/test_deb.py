"""The .deb (scripts/package.sh deb) installed with dpkg -i on this machine (root only: the package
goes to /usr as a user's would, not into a throwaway root, so that its Depends are really resolved
by this system's dpkg), run from /usr/bin, then removed with dpkg -r: every file dpkg -L listed is
gone. Usage: test_deb.py DEB"""
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from installed import check_runs  # noqa: E402

DEB = sys.argv.pop(1) if len(sys.argv) > 1 else ""
SKIP = 77  # ctest's and test.sh's code for "skipped"


def dpkg_status(package):
    out = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True)
    # a package dpkg never saw fails the query; one removed reads "unknown ok not-installed"
    return "not-installed" if out.returncode != 0 or "not-installed" in out.stdout else out.stdout.strip()


class DebTest(unittest.TestCase):
    def test_its_description_says_how_to_get_py_spy_which_debian_does_not_package(self):
        fields = subprocess.run(["dpkg-deb", "-f", DEB, "Description", "Suggests"], capture_output=True, text=True,
                                check=True).stdout
        self.assertIn("pip install py-spy", fields)
        self.assertRegex(fields, r"Suggests: .*elfutils")

    def test_installs_runs_from_usr_bin_and_leaves_nothing_when_removed(self):
        fields = subprocess.run(["dpkg-deb", "-f", DEB, "Package", "Depends"], capture_output=True, text=True,
                                check=True).stdout
        self.assertIn("Package: dtlaunch", fields)
        self.assertRegex(fields, r"Depends: .*libc6", "Depends computed from the binary (dpkg-shlibdeps)")
        self.assertNotIn("-dev", fields)
        subprocess.run(["dpkg", "-i", DEB], check=True, capture_output=True)
        try:
            listed = subprocess.run(["dpkg", "-L", "dtlaunch"], capture_output=True, text=True,
                                    check=True).stdout.split("\n")
            files = [p for p in listed if p and os.path.isfile(p)]
            for path in ["/usr/bin/dtlaunch", "/usr/share/man/man1/dtlaunch.1",
                         "/usr/share/bash-completion/completions/dtlaunch"]:
                self.assertIn(path, files)
            check_runs(self, "/usr/bin/dtlaunch", env={"PATH": "/usr/bin:/bin"})
        finally:
            subprocess.run(["dpkg", "-r", "dtlaunch"], check=True, capture_output=True)
        self.assertEqual(dpkg_status("dtlaunch"), "not-installed")
        self.assertEqual([p for p in files if os.path.lexists(p)], [])
        self.assertFalse(os.path.exists("/usr/share/doc/dtlaunch"))


if __name__ == "__main__":
    if not DEB or not os.path.isfile(DEB):
        sys.exit("usage: test_deb.py DEB (build it with scripts/package.sh deb)")
    if os.geteuid() != 0:
        print("SKIPPED: test_deb.py installs a package with dpkg, which needs root")
        sys.exit(SKIP)
    if dpkg_status("dtlaunch") != "not-installed":
        print("SKIPPED: a dtlaunch package is already installed here; this test will not replace it")
        sys.exit(SKIP)
    unittest.main(verbosity=2)
