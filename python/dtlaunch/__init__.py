"""dtlaunch's pip package: the `dtlaunch` program is installed in the environment's bin/ directory;
`python -m dtlaunch ARGS` runs it too."""
import os
import sys
import sysconfig


def binary() -> str:
    """The dtlaunch program this package installed (the scheme's scripts directory)."""
    schemes = [None, f"{os.name}_user"]
    for scheme in schemes:
        try:
            scripts = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        except KeyError:
            continue
        path = os.path.join(scripts, "dtlaunch")
        if os.access(path, os.X_OK):
            return path
    raise FileNotFoundError("dtlaunch: error: the dtlaunch program is not in this environment's scripts directory")


def main() -> None:
    try:
        exe = binary()
    except FileNotFoundError as e:
        sys.exit(str(e))
    os.execv(exe, [exe] + sys.argv[1:])
