"""dtlaunch under a real Slurm 22.05 (Debian's slurm-wlm and munge): slurmctld and three slurmd,
each in a network namespace of its own, all started by this file from a config in a temp dir
(SLURM_CONF) and stopped by PID. Checks `srun -N3 --ntasks-per-node=1 dtlaunch ...` (a PyTorch gloo
allreduce over the three nodes), `dtlaunch --launcher slurm` in a salloc shell, a failing worker
(srun's exit code is the root cause's), scancel (nothing left in any namespace) and two tasks per
node (refused with the fix).

Needs root, iproute2, slurm-wlm and munge (scripts/setup.sh installs them); otherwise skipped with
the reason. The daemons share one munged with its own socket, key and pid file in the temp dir (no
system munged is touched). The namespaces are a netns.Network; each gets an /etc/hosts that names
the nodes (Network.write_hosts), which `ip netns exec` mounts, and which slurmd gets by a bind mount
in a mount namespace of its own (slurmd keeps the host's /sys, and so its cgroups)."""
import glob
import os
import re
import shutil
import socket
import stat
import subprocess
import tempfile
import time
import unittest

from common import DTLAUNCH, WORKER, LaunchTest, Running, main, parse_env, torch_pythons, write_allreduce_script
from netns import Network, delete_stale_namespaces, stop

NODES = ["node1", "node2", "node3"]
NET = Network(["ctl", *NODES], name="s")


def run(*args, timeout=30, check=True, **kw):
    r = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def why_no_slurm():
    if os.geteuid() != 0:
        return f"needs root for network namespaces and Slurm's daemons (uid {os.geteuid()}); CI runs as root"
    for tool in ["ip", "nsenter", "unshare", "munged", "slurmctld", "slurmd", "srun", "salloc", "scancel", "sinfo"]:
        if not shutil.which(tool):
            return f"'{tool}' is not installed (scripts/setup.sh installs iproute2, slurm-wlm and munge)"
    return None


def read_bytes(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def running_elsewhere(pid):
    """Whether `pid` is another run of this file, still going."""
    return int(pid) != os.getpid() and b"test_slurm" in read_bytes(f"/proc/{pid}/cmdline")


def delete_stale():
    """What earlier runs that died before tearDownClass left: namespaces, with whatever still runs in
    them (every daemon runs in one), and their temp dirs."""
    delete_stale_namespaces()
    for path in glob.glob(os.path.join(tempfile.gettempdir(), "dtl-slurm-*-*")):
        m = re.match(r"dtl-slurm-(\d+)-", os.path.basename(path))
        if m and not running_elsewhere(m.group(1)):
            shutil.rmtree(path, ignore_errors=True)


def slurm_conf(d):
    host = socket.gethostname().split(".")[0]  # slurmctld runs only where SlurmctldHost names this host
    nodes = "".join(f"NodeName={n} NodeAddr={NET.addr[n]} CPUs=4 Gres=gpu:4 State=UNKNOWN\n" for n in NODES)
    return f"""ClusterName=dtltest
SlurmctldHost={host}({NET.addr['ctl']})
SlurmctldPort=6917
SlurmdPort=6918
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d}/munge.socket
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
GresTypes=gpu
MailProg=/bin/true
ReturnToService=2
KillWait=5
InactiveLimit=0
SlurmdParameters=config_overrides
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.%n.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.%n.log
{nodes}PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


@unittest.skipIf(why_no_slurm(), why_no_slurm())
class Slurm(LaunchTest):
    @classmethod
    def setUpClass(cls):
        delete_stale()
        cls.dir = tempfile.mkdtemp(prefix=f"dtl-slurm-{os.getpid()}-")
        os.chmod(cls.dir, 0o755)  # munged wants its socket's directory searchable by all
        cls.daemons = {}  # by name: munged, slurmctld, node1..3 (slurmd)
        cls.popens = []
        try:
            NET.build()
            NET.write_hosts({n: [n] for n in NET.nodes})
            cls.start_cluster()
        except (RuntimeError, subprocess.TimeoutExpired, OSError) as e:
            cls.tearDownClass()
            raise unittest.SkipTest(f"cannot start the Slurm test cluster: {e}")

    @classmethod
    def start_cluster(cls):
        d = cls.dir
        for sub in ["state", *[f"spool/{n}" for n in NODES]]:
            os.makedirs(f"{d}/{sub}")
        cls.conf = f"{d}/slurm.conf"
        with open(cls.conf, "w") as f:
            f.write(slurm_conf(d))
        # Four GPUs per node for Slurm's gres: character devices (/dev/null's) that Slurm counts by
        # the number in their name; dtlaunch's --fake_gpus=4 stands for the GPUs themselves.
        os.makedirs(f"{d}/dev")
        for i in range(4):
            os.mknod(f"{d}/dev/nvidia{i}", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        with open(f"{d}/gres.conf", "w") as f:  # beside slurm.conf, where Slurm looks for it
            f.write(f"Name=gpu File={d}/dev/nvidia[0-3]\n")
        with open(f"{d}/munge.key", "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(f"{d}/munge.key", 0o600)
        munge = [f"--socket={d}/munge.socket", f"--key-file={d}/munge.key", f"--log-file={d}/munged.log",
                 f"--pid-file={d}/munged.pid", f"--seed-file={d}/munged.seed"]
        # In the controller's namespace (its socket is a file, reachable from all), so that a run that
        # dies leaves it where delete_stale finds it. It forks; its pid file names the daemon.
        run(*NET.exec_argv("ctl", ["munged", *munge]))
        with open(f"{d}/munged.pid") as f:
            cls.daemons["munged"] = int(f.read())
        with open(f"{d}/daemons.out", "w") as log:
            cls.popens.append(subprocess.Popen(
                NET.exec_argv("ctl", ["slurmctld", "-D", "-f", cls.conf]), stdout=log, stderr=log))
            cls.daemons["slurmctld"] = cls.popens[-1].pid
            for n in NODES:  # nsenter, unshare and sh exec in turn: the pid is slurmd's
                cls.popens.append(subprocess.Popen(
                    ["nsenter", f"--net=/run/netns/{NET.ns[n]}", "unshare", "--mount", "--propagation", "private", "sh",
                     "-c", f"mount --bind {NET.hosts_path(n)} /etc/hosts && exec slurmd -D -f {cls.conf} -N {n}"],
                    stdout=log, stderr=log))
                cls.daemons[n] = cls.popens[-1].pid
        deadline = time.monotonic() + 30
        while True:
            r = cls.client("sinfo", "-h", "-o", "%t %D", check=False)
            if r.stdout.strip() == "idle 3":
                return
            if time.monotonic() > deadline:
                with open(f"{d}/daemons.out") as f:
                    raise RuntimeError(f"the nodes are not idle after 30 s (sinfo: {r.stdout.strip()!r} "
                                       f"{r.stderr.strip()!r}); daemons said:\n{f.read()[-2000:]}")
            time.sleep(0.2)

    @classmethod
    def tearDownClass(cls):
        for name in reversed(list(cls.daemons)):
            stop(cls.daemons[name])
        for p in cls.popens:  # reaped by stop(); this only tells Popen so
            p.wait(timeout=10)
        NET.delete()
        shutil.rmtree(cls.dir, ignore_errors=True)

    @classmethod
    def client(cls, *args, timeout=30, check=True, env=None):
        """A Slurm command in the controller's namespace (srun and salloc listen there for the nodes)."""
        return run(*NET.exec_argv("ctl", args), timeout=timeout, check=check,
                   env=env or {**os.environ, "SLURM_CONF": cls.conf})

    def env(self, **extra):
        return super().env(SLURM_CONF=self.conf, GLOO_SOCKET_IFNAME="eth0", **extra)

    def srun(self, *args, timeout=60):
        return self.client("srun", *map(str, args), timeout=timeout, check=False, env=self.env())

    def assertNothingLeftInNodes(self, timeout=15):
        """Each node's namespace holds its slurmd and nothing else (slurmstepd, dtlaunch, workers)."""
        deadline = time.monotonic() + timeout
        while True:
            extra = {n: sorted(set(NET.pids(n)) - {self.daemons[n]}) for n in NODES}
            if not any(extra.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        described = {n: [open(f"/proc/{p}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
                         for p in pids if os.path.exists(f"/proc/{p}")] for n, pids in extra.items() if pids}
        self.assertEqual(described, {}, "processes left in the node namespaces")

    # ---------------------------------------------------------------------------------------------

    def test_print_config_in_an_srun_step_names_slurms_variables(self):
        r = self.srun("-N3", "--ntasks-per-node=1", "--label", DTLAUNCH, "--print_config")
        self.assertExitCode(r, 0)
        r.stdout = re.sub(r" {2,}#", "  #", r.stdout)  # without the alignment
        for node in range(3):
            self.assertIn(f"{node}: nnodes: 3  # SLURM_STEP_NUM_NODES\n", r.stdout)
            self.assertIn(f"{node}: node_rank: {node}  # SLURM_NODEID\n", r.stdout)
            self.assertIn(f"{node}: master_addr: node1  # SLURM_STEP_NODELIST (its first host)\n", r.stdout)
        job = re.search(r"rdzv_id: (\d+)\.0  # SLURM_JOB_ID\.SLURM_STEP_ID", r.stdout)
        self.assertIsNotNone(job, r.stdout)
        port = 10000 + int(job.group(1)) % 10000
        self.assertIn(f"master_port: {port}  # SLURM_JOB_ID (10000 + SLURM_JOB_ID % 10000)", r.stdout)
        one = self.srun("-N1", DTLAUNCH, "--print_config")  # one node: the store stays on loopback
        self.assertExitCode(one, 0)
        self.assertRegex(one.stdout, r"\nmaster_addr: 127\.0\.0\.1 +# default\n")
        self.assertRegex(one.stdout, r"\nnnodes: 1 +# SLURM_STEP_NUM_NODES\n")

    def test_srun_three_nodes_two_workers_each_run_a_gloo_allreduce(self):
        pythons = torch_pythons()
        if not pythons:
            self.skipTest("no torch (Debian's python3-torch; scripts/setup.sh installs it)")
        script = write_allreduce_script(self.tmp)
        r = self.client("srun", "-N3", "--ntasks-per-node=1", DTLAUNCH, "--nproc_per_node=2", script,
                        timeout=120, check=False, env=self.env(PYTHON_EXEC=pythons[0][1]))
        self.assertExitCode(r, 0)
        lines = re.findall(r"rank=(\d) world=(\d) sum=(\d+)", r.stdout)
        self.assertEqual(sorted(int(rank) for rank, _, _ in lines), list(range(6)), r.stdout)
        self.assertEqual({(world, total) for _, world, total in lines}, {("6", "21")})
        self.assertNothingLeftInNodes()

    def test_the_workers_get_the_gpus_slurm_gave_the_step(self):
        # Another job holds GPU 0 of each node, so that the step's GPUs are 1 and 2, not the first two.
        holder = self.client("sbatch", "-N3", "--gres=gpu:1", "--output=/dev/null", "--wrap=sleep 120",
                             env=self.env()).stdout.split()[-1]
        try:
            deadline = time.monotonic() + 20
            while self.client("squeue", "-h", "-j", holder, "-o", "%t").stdout.strip() != "R":
                self.assertLess(time.monotonic(), deadline, "the job holding GPU 0 does not start")
                time.sleep(0.1)
            r = self.srun("-N3", "--ntasks-per-node=1", "--gres=gpu:2", DTLAUNCH, "--fake_gpus=4",
                          "--nproc_per_node=gpu", "--log_line_prefix_template=[r${rank}]:", *self.worker("env"))
        finally:
            self.client("scancel", holder, check=False)
        self.assertExitCode(r, 0)
        ranks = parse_env(r.stdout)
        self.assertEqual(sorted(ranks), list(range(6)), r.stdout)  # two GPUs on each of 3 nodes
        self.assertEqual({rank: env["CUDA_VISIBLE_DEVICES"] for rank, env in ranks.items()},
                         {rank: str(1 + rank % 2) for rank in range(6)})
        self.assertNothingLeftInNodes()

    def test_launcher_slurm_in_a_salloc_shell_starts_one_agent_per_node(self):
        r = self.client("salloc", "-N3", DTLAUNCH, "--launcher", "slurm", "--nproc_per_node=2",
                        "--log_line_prefix_template=[r${rank}]:", *self.worker("env"), timeout=60, check=False,
                        env=self.env())
        self.assertExitCode(r, 0)
        ranks = parse_env(r.stdout)  # by global rank: the three nodes' lines interleave
        self.assertEqual(sorted(ranks), list(range(6)), r.stdout)
        job = re.search(r"salloc: Granted job allocation (\d+)", r.stderr).group(1)
        for rank, env in ranks.items():
            self.assertEqual((env["GROUP_RANK"], env["LOCAL_RANK"]), (str(rank // 2), str(rank % 2)))
            self.assertEqual((env["WORLD_SIZE"], env["GROUP_WORLD_SIZE"], env["MASTER_ADDR"]), ("6", "3", "node1"))
            self.assertEqual(env["MASTER_PORT"], str(10000 + int(job) % 10000))
            self.assertEqual(env["TORCHELASTIC_RUN_ID"], f"{job}.0")
        self.assertNothingLeftInNodes()

    def test_launcher_slurm_gives_each_agent_the_cpus_of_its_node(self):
        # An allocation of 3 tasks per node: srun --ntasks-per-node=1 alone would make a step of one
        # CPU per node (which task/affinity or task/cgroup, unlike this cluster's task/none, enforce).
        r = self.client("salloc", "-N3", "--ntasks-per-node=3", DTLAUNCH, "--launcher", "slurm", "--no_python", "sh",
                        "-c", "echo cpus=$SLURM_CPUS_PER_TASK", timeout=60, check=False, env=self.env())
        self.assertExitCode(r, 0)
        self.assertEqual(re.findall(r"cpus=(\d*)", r.stdout), ["3"] * 3, r.stdout)

    def test_launcher_slurm_in_an_sbatch_script(self):
        script, out = os.path.join(self.tmp, "job.sh"), os.path.join(self.tmp, "job.out")
        with open(script, "w") as f:
            f.write(f"#!/bin/sh\nexec {DTLAUNCH} --launcher slurm --nproc_per_node=1 --no_python {WORKER} exit 5 2\n")
        r = self.client("sbatch", "--wait", "-N3", f"--output={out}", script, timeout=60, check=False, env=self.env())
        with open(out) as f:
            log = f.read()
        self.assertEqual(r.returncode, 5, f"sbatch: {r.stdout}{r.stderr}\njob output:\n{log}")
        self.assertIn("exit code 5", log)
        self.assertNothingLeftInNodes()

    def test_a_failing_worker_gives_srun_the_root_causes_exit_code(self):
        r = self.srun("-N3", "--ntasks-per-node=1", DTLAUNCH, "--nproc_per_node=2", *self.worker("exit", 7, 3))
        self.assertExitCode(r, 7)
        self.assertIn("exit code 7", r.stderr + r.stdout)
        self.assertNothingLeftInNodes()

    def test_scancel_leaves_nothing_running_in_any_namespace(self):
        name = f"dtl{self.tag[:8]}"
        running = Running(NET.exec_argv("ctl", ["srun", "-N3", "--ntasks-per-node=1", f"--job-name={name}", DTLAUNCH,
                                                "--nproc_per_node=2", *self.worker("pause")]), self.env())
        try:
            running.wait_for(r"ready rank", count=6, timeout=30)
            job = self.client("squeue", "-h", "-n", name, "-o", "%i").stdout.strip()
            self.assertRegex(job, r"^\d+$")
            self.client("scancel", job)
            r = running.finish(timeout=30)
            self.assertNotEqual(r.returncode, 0)
        finally:
            if running.proc.poll() is None:
                running.proc.kill()
                running.proc.wait(timeout=10)
        self.assertNothingLeftInNodes()

    def test_two_tasks_per_node_are_refused_with_the_fix(self):
        r = self.srun("-N3", "--ntasks-per-node=2", DTLAUNCH, "--nproc_per_node=1", *self.worker("env"))
        self.assertExitCode(r, 2)
        self.assertIn("srun started 6 tasks on 3 nodes", r.stderr)
        self.assertIn("use `srun --ntasks-per-node=1 --ntasks=3 dtlaunch ...`", r.stderr)
        self.assertNotIn("RANK=", r.stdout)
        # In an allocation of two tasks per node, srun takes its SLURM_NTASKS over --ntasks-per-node=1
        # (with a warning); the fix the error gives works.
        inside = ["salloc", "-N3", "--ntasks-per-node=2", "srun", "--ntasks-per-node=1"]
        r = self.client(*inside, DTLAUNCH, *self.worker("env"), check=False, env=self.env())
        self.assertExitCode(r, 2)
        self.assertIn("use `srun --ntasks-per-node=1 --ntasks=3 dtlaunch ...`", r.stderr)
        r = self.client(*inside, "--ntasks=3", DTLAUNCH, "--log_line_prefix_template=[r${rank}]:", *self.worker("env"),
                        check=False, env=self.env())
        self.assertExitCode(r, 0)
        self.assertEqual(sorted(parse_env(r.stdout)), [0, 1, 2])

if __name__ == "__main__":
    main()
