"""The hang report on every kind of worker with py-spy reading Python stacks (tests/e2e/diagnosis.py)."""
from common import main
from diagnosis import KINDS, Cell, add_cells


class WithPySpy(Cell):
    pass


add_cells(WithPySpy, KINDS, ["py_spy"], ["1.13", "2"])
add_cells(WithPySpy, ["no_python"], ["py_spy"], ["1.13", "2"], modes=("atexit",))

if __name__ == "__main__":
    main()
