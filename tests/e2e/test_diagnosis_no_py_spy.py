"""The hang report on every kind of worker without py-spy: faulthandler reads Python stacks
(tests/e2e/diagnosis.py)."""
from common import main
from diagnosis import KINDS, Cell, add_cells


class WithoutPySpy(Cell):
    pass


add_cells(WithoutPySpy, KINDS, ["no_py_spy"], ["1.13", "2"])
add_cells(WithoutPySpy, ["no_python"], ["no_py_spy"], ["1.13"], modes=("atexit",))

if __name__ == "__main__":
    main()
