"""`mpirun -np 2 dtlaunch ...` with Debian's Open MPI (openmpi-bin): one host as two nodes, each
dtlaunch taking nnodes and node_rank from OMPI_COMM_WORLD_SIZE/_RANK, and master_addr from the
user. Skipped with the reason where mpirun is not installed (scripts/setup.sh installs it)."""
import os
import re
import shutil
import subprocess
import unittest

from common import DTLAUNCH, LaunchTest, free_port, main, parse_env


def mpirun_args():
    args = ["mpirun", "-np", "2"]
    if os.geteuid() == 0:
        args.append("--allow-run-as-root")  # Open MPI refuses root without it (CI runs as root)
    return args


NO_MPIRUN = "mpirun is not installed (Debian's openmpi-bin; scripts/setup.sh installs it)"


@unittest.skipIf(not shutil.which("mpirun"), NO_MPIRUN)
class Mpirun(LaunchTest):
    def mpirun(self, *args):
        return subprocess.run([*mpirun_args(), DTLAUNCH, *map(str, args)], env=self.env(), capture_output=True,
                              text=True, timeout=60, stdin=subprocess.DEVNULL)

    def test_two_mpi_ranks_are_two_nodes_of_two_workers(self):
        port = free_port()
        r = self.mpirun("--master_addr=127.0.0.1", f"--master_port={port}", "--nproc_per_node=2",
                        "--log_line_prefix_template=[r${rank}]:", *self.worker("env"))
        self.assertExitCode(r, 0)
        ranks = parse_env(r.stdout)  # by global rank
        self.assertEqual(sorted(ranks), [0, 1, 2, 3], r.stdout)
        for rank, env in ranks.items():
            self.assertEqual((env["GROUP_RANK"], env["LOCAL_RANK"]), (str(rank // 2), str(rank % 2)))
            self.assertEqual((env["WORLD_SIZE"], env["GROUP_WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]), ("4", "2", "2"))
            self.assertEqual((env["MASTER_ADDR"], env["MASTER_PORT"]), ("127.0.0.1", str(port)))

    def test_print_config_names_open_mpis_variables(self):
        r = self.mpirun("--print_config")
        self.assertExitCode(r, 0)
        text = re.sub(r" {2,}#", "  #", r.stdout)  # without the alignment
        self.assertEqual(text.count("nnodes: 2  # OMPI_COMM_WORLD_SIZE\n"), 2, r.stdout)
        self.assertEqual(sorted(re.findall(r"node_rank: (\d)  # OMPI_COMM_WORLD_RANK\n", text)), ["0", "1"])
        self.assertEqual(text.count("master_addr: 127.0.0.1  # default\n"), 2)

    def test_flags_win_over_mpis_ranks(self):
        r = self.mpirun("--nnodes=1", "--node_rank=0", "--print_config")
        self.assertExitCode(r, 0)
        self.assertEqual(re.sub(r" {2,}#", "  #", r.stdout).count("nnodes: 1  # --nnodes\n"), 2, r.stdout)


if __name__ == "__main__":
    main()
