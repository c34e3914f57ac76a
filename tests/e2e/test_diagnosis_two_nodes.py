"""The hang report of a job over two nodes (static rendezvous on loopback), rank 1 on the second,
with Debian's torch 1.13 and the oracle's 2.x, py-spy present and not (tests/e2e/diagnosis.py)."""
from common import main
from diagnosis import Cell, add_cells


class TwoNodes(Cell):
    pass


add_cells(TwoNodes, ["no_python"], ["py_spy", "no_py_spy"], ["1.13", "2"], two_nodes=True)

if __name__ == "__main__":
    main()
