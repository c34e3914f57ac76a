"""What every installed dtlaunch must do, wherever it was installed from (the wheel, the .deb): say
its version, and run a 2-worker job on fake GPUs with torchrun's environment."""
import os
import re
import subprocess

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))


def project_version():
    """The one source of the version: CMakeLists.txt's project()."""
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(dtlaunch VERSION ([0-9.]+)", f.read()).group(1)


def check_runs(test, exe, env=None):
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30, env=env)
    test.assertEqual(out.returncode, 0, out.stderr)
    test.assertEqual(out.stdout.strip(), "dtlaunch " + project_version())
    job = subprocess.run(
        [exe, "--fake_gpus", "2", "--nproc_per_node", "gpu", "--master_port", "0", "--no_python", "/bin/sh", "-c",
         'echo "rank=$RANK world=$WORLD_SIZE gpu=$CUDA_VISIBLE_DEVICES"'],
        capture_output=True, text=True, timeout=60, env=env)
    test.assertEqual(job.returncode, 0, job.stderr)
    lines = sorted(l for l in job.stdout.splitlines() if "rank=" in l)
    test.assertEqual(lines, ["[default0]:rank=0 world=2 gpu=0", "[default1]:rank=1 world=2 gpu=1"])


def elf_needs(exe):
    """The shared libraries `exe` loads (ldd), by file name."""
    out = subprocess.run(["ldd", exe], capture_output=True, text=True, check=True).stdout
    return sorted(l.split()[0] for l in out.splitlines() if l.strip() and not l.strip().startswith("linux-vdso"))
