"""The hang report on every kind of worker where ptrace is denied (a seccomp filter): faulthandler reads
Python stacks, and native ones cannot be read (tests/e2e/diagnosis.py)."""
from common import main
from diagnosis import KINDS, Cell, add_cells


class WithoutPtrace(Cell):
    pass


add_cells(WithoutPtrace, KINDS, ["no_ptrace"], ["1.13", "2"])
add_cells(WithoutPtrace, ["no_python"], ["no_ptrace"], ["1.13"], modes=("atexit",))

if __name__ == "__main__":
    main()
