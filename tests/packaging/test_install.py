"""`cmake --install BUILD --prefix P`: the binary, man page, completion and docs land in their
conventional places under P, nothing there refers back to the build tree, and the installed dtlaunch
runs a fake-GPU job. BUILD_DIR names the build tree (ctest sets it)."""
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from installed import ROOT, check_runs  # noqa: E402

BUILD = os.environ.get("BUILD_DIR", os.path.join(ROOT, "build"))


class InstallTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="dtl_install_")
        cls.prefix = os.path.join(cls.tmp.name, "prefix")
        out = subprocess.run(["cmake", "--install", BUILD, "--prefix", cls.prefix], capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def installed(self):
        found = []
        for d, _, files in os.walk(self.prefix):
            found += [os.path.relpath(os.path.join(d, f), self.prefix) for f in files]
        return sorted(found)

    def test_each_file_is_in_its_conventional_place(self):
        # the manual beside README, so that README's links into docs/ resolve where it is installed
        docs = os.path.join(ROOT, "docs")
        manual = [os.path.join("share/doc/dtlaunch/docs", os.path.relpath(os.path.join(d, f), docs))
                  for d, _, files in os.walk(docs) for f in files if f.endswith((".md", ".yaml"))]
        expected = sorted(["bin/dtlaunch", "share/bash-completion/completions/dtlaunch", "share/doc/dtlaunch/BENCHMARKS.md",
                           "share/doc/dtlaunch/CONTRIBUTING.md", "share/doc/dtlaunch/LICENSE",
                           "share/doc/dtlaunch/README.md", "share/doc/dtlaunch/copyright", "share/man/man1/dtlaunch.1",
                           "share/zsh/vendor-completions/_dtlaunch", *manual])
        got = [f for f in self.installed() if f != "bin/dtl-train"]  # the trainer, when the build has it
        self.assertEqual(got, expected)

    def test_nothing_installed_refers_back_to_the_build_tree(self):
        build = os.path.realpath(BUILD).encode()
        for f in self.installed():
            with open(os.path.join(self.prefix, f), "rb") as fh:
                self.assertNotIn(build, fh.read(), f)
        readelf = subprocess.run(["readelf", "-d", os.path.join(self.prefix, "bin/dtlaunch")], capture_output=True,
                                 text=True)
        self.assertNotIn("RPATH", readelf.stdout)
        self.assertNotIn("RUNPATH", readelf.stdout)

    def test_the_installed_dtlaunch_runs_a_fake_gpu_job(self):
        check_runs(self, os.path.join(self.prefix, "bin/dtlaunch"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
