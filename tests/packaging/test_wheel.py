"""The pip wheel (scripts/package.sh wheel) installed into a fresh venv, offline: `dtlaunch` is on the
venv's PATH, needs nothing but glibc, runs a fake-GPU job, and `python -m dtlaunch` works too; the
wheel carries the licence, as the .deb does. It depends on py-spy: installed from PyPI into a fresh
venv with Debian's torch, the wheel alone reads a hung rank's Python frames.
Usage: test_wheel.py WHEEL"""
import email.parser
import glob
import os
import subprocess
import sys
import tempfile
import unittest
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from installed import ROOT, check_runs, elf_needs, project_version  # noqa: E402

WHEEL = sys.argv.pop(1) if len(sys.argv) > 1 else ""
GLIBC = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1"}


class WheelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="dtl_wheel_")
        cls.venv = os.path.join(cls.tmp.name, "venv")
        subprocess.run([sys.executable, "-m", "venv", cls.venv], check=True)
        subprocess.run([os.path.join(cls.venv, "bin", "pip"), "install", "-q", "--no-index", "--no-deps",
                        "--disable-pip-version-check", WHEEL], check=True)
        cls.exe = os.path.join(cls.venv, "bin", "dtlaunch")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_the_wheel_is_named_for_the_project_version_and_a_manylinux_glibc(self):
        name = os.path.basename(WHEEL)
        self.assertTrue(name.startswith(f"dtlaunch-{project_version()}-py3-none-manylinux_2_"), name)

    def test_dtlaunch_on_the_venv_path_is_the_program_itself_needing_only_glibc(self):
        with open(self.exe, "rb") as f:
            self.assertEqual(f.read(4), b"\x7fELF")  # no Python start-up in front of every launch
        needs = elf_needs(self.exe)
        self.assertTrue(all(n in GLIBC or n.startswith("/lib64/ld-linux") for n in needs), needs)

    def test_it_runs_a_fake_gpu_job_from_the_venv(self):
        check_runs(self, self.exe)

    def test_python_dash_m_dtlaunch_runs_the_same_program(self):
        py = os.path.join(self.venv, "bin", "python")
        out = subprocess.run([py, "-m", "dtlaunch", "--version"], capture_output=True, text=True, timeout=30)
        self.assertEqual((out.returncode, out.stdout.strip()), (0, "dtlaunch " + project_version()), out.stderr)

    def test_the_wheel_carries_the_licence_file_and_names_the_licence_in_its_metadata(self):
        with open(os.path.join(ROOT, "LICENSE"), "rb") as f:
            licence = f.read()
        with zipfile.ZipFile(WHEEL) as wheel:
            names = wheel.namelist()
            dist_info = {n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info")}
            self.assertEqual(len(dist_info), 1, names)
            dist_info = dist_info.pop()
            files = [n for n in names if n.startswith(dist_info + "/") and os.path.basename(n) == "LICENSE"]
            self.assertEqual(len(files), 1, names)  # .dist-info/licenses/LICENSE (scikit-build-core)
            self.assertEqual(wheel.read(files[0]), licence)
            metadata = email.parser.Parser().parsestr(wheel.read(dist_info + "/METADATA").decode())
        self.assertEqual(metadata["License"], "Apache-2.0")
        self.assertIn("License :: OSI Approved :: Apache Software License", metadata.get_all("Classifier"))
        installed = glob.glob(os.path.join(self.venv, "lib", "python3*", "site-packages", "dtlaunch-*.dist-info",
                                           "**", "LICENSE"), recursive=True)
        self.assertEqual(len(installed), 1, installed)  # pip installs it with the package

    def test_the_wheel_depends_on_py_spy(self):
        with zipfile.ZipFile(WHEEL) as wheel:
            [meta] = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
            metadata = email.parser.Parser().parsestr(wheel.read(meta).decode())
        self.assertTrue(any(r.startswith("py-spy") for r in metadata.get_all("Requires-Dist") or []), metadata)

    def test_a_fresh_venv_with_only_the_wheel_reads_a_hung_rank_s_python_frames(self):
        if subprocess.run(["/usr/bin/python3", "-c", "import torch.distributed"], capture_output=True).returncode:
            self.skipTest("no Debian torch (python3-torch) for the workers")
        venv = os.path.join(self.tmp.name, "users")
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv], check=True)
        pip = subprocess.run([os.path.join(venv, "bin", "pip"), "install", "-q", "--disable-pip-version-check",
                              WHEEL], capture_output=True, text=True, timeout=300)
        if pip.returncode != 0:
            self.skipTest(f"py-spy could not be installed from PyPI: {pip.stderr.strip()[-200:]}")
        script = os.path.join(self.tmp.name, "hang.py")
        with open(script, "w") as f:
            f.write("import time, torch, torch.distributed as dist\n"
                    "dist.init_process_group('gloo')\n"
                    "t = torch.ones(4)\n"
                    "dist.all_reduce(t)\n"
                    "print('step', flush=True)\n"
                    "if dist.get_rank() == 1:\n"
                    "    time.sleep(3600)\n"
                    "dist.all_reduce(t)\n")
        env = {"PATH": os.path.join(venv, "bin") + ":/usr/bin:/bin", "HOME": self.tmp.name, "OMP_NUM_THREADS": "1"}
        r = subprocess.run([os.path.join(venv, "bin", "dtlaunch"), "--nproc_per_node=2", "--hang_timeout=6",
                            "--on_hang=fail", "--shutdown_timeout=3", script], env=env, capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("stacks (py-spy):", r.stderr)
        self.assertRegex(r.stderr, r"dtlaunch: suspect rank 1 on \S+ \(pid \d+\): <module> \(hang\.py:7\)")

    def test_the_man_page_and_completion_are_under_the_venv_share(self):
        for path in ["share/man/man1/dtlaunch.1", "share/bash-completion/completions/dtlaunch",
                     "share/zsh/vendor-completions/_dtlaunch"]:
            self.assertTrue(os.path.isfile(os.path.join(self.venv, path)), path)


if __name__ == "__main__":
    if not WHEEL or not glob.glob(WHEEL):
        sys.exit("usage: test_wheel.py WHEEL (build it with scripts/package.sh wheel)")
    unittest.main(verbosity=2)
