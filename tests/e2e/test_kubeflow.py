"""dtlaunch as the command of Kubeflow's pods: two "pods", each a dtlaunch given exactly the
variables the operator gives that pod, run a real PyTorch gloo allreduce. docs/kubernetes.md lists
each operator's variables with its source lines; the sets below are written from it.

Twice: on loopback (`Kubeflow`: the services' names replaced by 127.0.0.1, their ports by free
ones), and, as root, as pods (`KubeflowPods`: each pod in a network namespace of its own with its
own address, its hostname (a UTS namespace) and an /etc/hosts that names every pod, as the cluster's
DNS would; the operators' real names and ports).

A pod here is a CPU pod: CUDA_VISIBLE_DEVICES="" (no GPU given to the container) and an affinity of
at most 2 CPUs, so that `auto` means a known number of workers."""
import os
import re
import shutil
import subprocess
import unittest

from common import (ALLREDUCE_SCRIPT, DTLAUNCH, LaunchTest, Running, free_port, main, torch_pythons)
from netns import Network, delete_stale_namespaces

PYTHONS = torch_pythons()
CPUS = sorted(os.sched_getaffinity(0))[:2]
AUTO = len(CPUS)  # what `auto` means in a CPU pod with this affinity: one worker per CPU

# What each worker was given, then the allreduce (which prints rank=, world=, sum=).
SCRIPT = """
import os
print("env " + " ".join(f"{k}={os.environ.get(k)}" for k in
      ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"]), flush=True)
""" + ALLREDUCE_SCRIPT


# --- the operators' variables, per pod ---------------------------------------------------------
# Each function returns {pod name: its variables}, in the order the operator appends them. `master`
# and `port` stand in for the service's name and port (127.0.0.1 and a free port here).

def pytorchjob_master_worker(master, port, nproc_per_node="auto"):
    """PyTorchJob (training operator v1.7-v1.9), Master x1 + Worker x1, no elasticPolicy; nprocPerNode
    defaults to "auto" (pytorch_defaults.go), and WORLD_SIZE is pods x nprocPerNode when that is a
    number, else pods (envvar.go)."""
    pods = {}
    for name, rank in (("master-0", 0), ("worker-0", 1)):
        per_node = int(nproc_per_node) if nproc_per_node.isdigit() else 1
        pods[name] = {"PYTHONUNBUFFERED": "1",
                      "MASTER_PORT": str(port), "PET_MASTER_PORT": str(port),
                      "MASTER_ADDR": master, "PET_MASTER_ADDR": master,
                      "WORLD_SIZE": str(2 * per_node), "RANK": str(rank), "PET_NODE_RANK": str(rank),
                      "PET_NPROC_PER_NODE": nproc_per_node,
                      "PET_NNODES": "2"}
    return pods


def pytorchjob_elastic(worker_0, port):
    """PyTorchJob with elasticPolicy {rdzvBackend: c10d, minReplicas: 1, maxReplicas: 2,
    maxRestarts: 100} and Worker x2 (the operator's examples/pytorch/elastic/echo): no Master, so no
    MASTER_*, WORLD_SIZE, RANK; the endpoint is worker-0's service and port (elastic.go)."""
    pod = {"PYTHONUNBUFFERED": "1",
           "PET_NPROC_PER_NODE": "auto",
           "PET_RDZV_ENDPOINT": f"{worker_0}:{port}", "PET_RDZV_BACKEND": "c10d", "PET_NNODES": "1:2",
           "PET_MAX_RESTARTS": "100"}
    return {"worker-0": dict(pod), "worker-1": dict(pod)}


def trainjob(node_0_0, port, num_proc_per_node):
    """TrainJob (Kubeflow Trainer v2, torch-distributed runtime), numNodes 2: the torch plugin's
    PET_* (torch.go) and Kubernetes' own JOB_COMPLETION_INDEX of an Indexed Job."""
    return {f"node-0-{i}": {"PET_NNODES": "2", "PET_NPROC_PER_NODE": str(num_proc_per_node), "PET_NODE_RANK": str(i),
                            "PET_MASTER_ADDR": node_0_0, "PET_MASTER_PORT": str(port), "JOB_COMPLETION_INDEX": str(i)}
            for i in range(2)}


def pytorchjob_before_1_7(master, port):
    """The Master x1 + Worker x1 PyTorchJob of a training operator before v1.7: MASTER_*, and
    WORLD_SIZE/RANK counting pods; no PET_* at all."""
    return {name: {"PYTHONUNBUFFERED": "1", "MASTER_PORT": str(port), "MASTER_ADDR": master,
                   "WORLD_SIZE": "2", "RANK": str(rank)}
            for name, rank in (("master-0", 0), ("worker-0", 1))}


def expand(args, pod_env):
    """Kubernetes' $(VAR) in a container's command and args, from the container's variables."""
    return [re.sub(r"\$\((\w+)\)", lambda m: pod_env.get(m.group(1), m.group(0)), a) for a in args]


def env_lines(stdout):
    """{RANK: {KEY: VALUE}} from the workers' `env` lines."""
    found = {}
    for m in re.finditer(r"\]:env (.*)$", stdout, re.M):
        values = dict(item.split("=", 1) for item in m.group(1).split())
        found[int(values["RANK"])] = values
    return found


@unittest.skipUnless(PYTHONS, "no PyTorch with torch.distributed (Debian's python3-torch: scripts/setup.sh)")
class Kubeflow(LaunchTest):
    """The pods on loopback: every service's name is 127.0.0.1, every port a free one."""
    pods_have_addresses = False  # on loopback both pods own 127.0.0.1: the first to bind hosts

    def address(self, service):
        return "127.0.0.1"

    def port(self, operators_port):
        return free_port()

    def command(self, pod, argv):
        """How pod `pod` (its key: master-0, worker-1, node-0-0) runs `argv`."""
        return argv

    def pod_env(self, operator_vars, python):
        env = self.env(PYTHON_EXEC=python, CUDA_VISIBLE_DEVICES="")
        env.update(operator_vars)
        return env

    def run_pods(self, pods, python, args=(), timeout=120, launcher=DTLAUNCH):
        """Starts one dtlaunch (or `launcher`) per pod (`dtlaunch [args] script`), returns {pod: CompletedProcess}."""
        script = os.path.join(self.tmp, "train.py")
        with open(script, "w") as f:
            f.write(SCRIPT)
        running = {}
        for pod, variables in pods.items():
            argv = self.command(pod, [launcher, *expand(args, variables), script])
            running[pod] = Running(argv, self.pod_env(variables, python), preexec_fn=lambda: os.sched_setaffinity(0, CPUS))
        return {pod: r.finish(timeout=timeout) for pod, r in running.items()}

    def assert_job(self, results, world, master_addr, master_port):
        """Every pod exited 0, the allreduce over `world` workers summed 1..world in each, and every
        worker got its own RANK, WORLD_SIZE and the job's store."""
        workers = {}
        for pod, r in results.items():
            self.assertExitCode(r, 0)
            workers.update(env_lines(r.stdout))
            for rank in env_lines(r.stdout):
                self.assertIn(f"rank={rank} world={world} sum={world * (world + 1) // 2} elastic=True", r.stdout, pod)
        self.assertEqual(sorted(workers), list(range(world)), results)
        for rank, values in workers.items():
            self.assertEqual(values["WORLD_SIZE"], str(world))
            self.assertEqual(values["MASTER_ADDR"], master_addr)
            self.assertEqual(values["MASTER_PORT"], str(master_port))
        return workers

    def test_a_pytorchjob_with_master_and_worker_runs_auto_workers_per_pod(self):
        for label, python in PYTHONS:
            with self.subTest(label):
                master, port = self.address("job-master-0"), self.port(23456)
                results = self.run_pods(pytorchjob_master_worker(master, port), python)
                workers = self.assert_job(results, 2 * AUTO, master, port)
                # the pod's WORLD_SIZE=2 and RANK=1 counted pods; the workers' count processes
                self.assertEqual({w["GROUP_RANK"] for r, w in workers.items() if r >= AUTO}, {"1"})

    def test_a_pytorchjob_with_nproc_per_node_2_makes_ranks_0_to_3(self):
        for label, python in PYTHONS:
            with self.subTest(label):
                master, port = self.address("job-master-0"), self.port(23456)
                pods = pytorchjob_master_worker(master, port, nproc_per_node="2")
                self.assertEqual(pods["worker-0"]["WORLD_SIZE"], "4")
                results = self.run_pods(pods, python)
                workers = self.assert_job(results, 4, master, port)
                self.assertIn("rank=2 world=4", results["worker-0"].stdout)
                self.assertEqual(workers[3]["LOCAL_RANK"], "1")

    def test_an_elastic_pytorchjob_meets_at_worker_0_through_c10d(self):
        for label, python in PYTHONS:
            with self.subTest(label):
                host, port = self.address("job-worker-0"), self.port(23456)
                results = self.run_pods(pytorchjob_elastic(host, port), python)
                self.assert_job(results, 2 * AUTO, host, port)
                hosting = [pod for pod, r in results.items() if f"hosting the rendezvous on {host}:{port}" in r.stderr]
                self.assertEqual(len(hosting), 1, results)
                if self.pods_have_addresses:  # only worker-0's pod owns the endpoint, and names its peer
                    self.assertEqual(hosting, ["worker-0"])
                    peer = self.network.addr[self.node_of["worker-1"]]
                    self.assertIn(f"rendezvous: job-worker-1 ({peer}) joined", results["worker-0"].stderr)

    def test_a_trainjob_runs_its_numprocpernode_on_each_node(self):
        for label, python in PYTHONS:
            with self.subTest(label):
                master, port = self.address("job-node-0-0.job"), self.port(29500)
                results = self.run_pods(trainjob(master, port, 2), python)
                self.assert_job(results, 4, master, port)

    def test_the_workers_get_what_torchruns_get_in_the_same_pods(self):
        """The oracle: torch 2.x's own torchrun as the pods' command, given the same variables."""
        found = [(python, os.path.join(os.path.dirname(python), "torchrun")) for _, python in PYTHONS
                 if python != "/usr/bin/python3" and os.path.exists(os.path.join(os.path.dirname(python), "torchrun"))]
        if not found:  # Debian's torchrun (torch 1.13) fails on Python 3.11
            self.skipTest("no torch 2.x venv with torchrun ($DTL_ACCELERATE_VENV or $DTL_TORCH2_PYTHON)")
        python, torchrun = found[0]
        keys = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"]
        flavors = {"PyTorchJob master/worker, nprocPerNode 2": ("job-master-0", 23456,
                                                                lambda a, p: pytorchjob_master_worker(a, p, "2")),
                   "TrainJob, numProcPerNode 2": ("job-node-0-0.job", 29500, lambda a, p: trainjob(a, p, 2))}
        for flavor, (service, operators_port, pods_of) in flavors.items():
            with self.subTest(flavor):
                got = {}
                master, port = self.address(service), self.port(operators_port)  # the same for both runs
                for name, launcher in (("dtlaunch", DTLAUNCH), ("torchrun", torchrun)):
                    # --tee 3: torchrun prefixes its workers' lines ([default0]:) only when it tees them
                    results = self.run_pods(pods_of(master, port), python, ["--tee=3"], launcher=launcher)
                    workers = self.assert_job(results, 4, master, port)
                    got[name] = {rank: {k: w[k] for k in keys} for rank, w in workers.items()}
                self.assertEqual(got["dtlaunch"], got["torchrun"])

    def test_an_old_pytorchjob_is_refused_until_the_flags_are_given(self):
        label, python = PYTHONS[0]
        master, port = self.address("job-master-0"), self.port(23456)
        pods = pytorchjob_before_1_7(master, port)
        for pod, r in self.run_pods(pods, python, timeout=30).items():
            self.assertExitCode(r, 2)
            self.assertEqual(r.stdout, "")
            self.assertIn("but not nnodes, node_rank, master_addr, master_port: dtlaunch does not guess; pass "
                          "--nnodes=$WORLD_SIZE --node_rank=$RANK --master_addr=$MASTER_ADDR "
                          "--master_port=$MASTER_PORT", r.stderr)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        # The manifest's fix (docs/kubernetes/pytorchjob.yaml): one node per pod, from the pod's own set.
        args = ["--nnodes=$(WORLD_SIZE)", "--node_rank=$(RANK)", "--master_addr=$(MASTER_ADDR)",
                "--master_port=$(MASTER_PORT)", "--nproc_per_node=1"]
        self.assert_job(self.run_pods(pods, python, args), 2, master, port)

    def test_the_operators_empty_pet_standalone_is_refused(self):
        r = subprocess.run([DTLAUNCH, "train.py"], env=self.env(PET_STANDALONE=""), capture_output=True, text=True,
                           timeout=30)
        self.assertExitCode(r, 2)
        self.assertIn("PET_STANDALONE is set but empty", r.stderr)


# --- pods in network namespaces ----------------------------------------------------------------

PODS = 2


def why_no_pods():
    if os.geteuid() != 0:
        return f"needs root for network and UTS namespaces (running as uid {os.geteuid()}); CI runs as root"
    missing = [tool for tool in ("ip", "unshare", "hostname") if not shutil.which(tool)]
    if missing:
        return f"{', '.join(missing)} not installed (iproute2, util-linux, hostname: scripts/setup.sh)"
    return None


@unittest.skipIf(why_no_pods(), why_no_pods())
class KubeflowPods(Kubeflow):
    """The same jobs as pods: the operators' own names and ports, one network namespace per pod (a
    netns.Network whose /etc/hosts names every pod, as the cluster's DNS would)."""
    pods_have_addresses = True

    @classmethod
    def setUpClass(cls):
        delete_stale_namespaces()
        cls.network = Network([f"pod{i}" for i in range(PODS)], name="k")
        try:
            cls.network.build()
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            raise unittest.SkipTest(f"cannot build the pods' network (ip netns, veth, bridge): {e}")

    @classmethod
    def tearDownClass(cls):
        cls.network.delete()

    def address(self, service):
        return service

    def port(self, operators_port):
        return operators_port

    def run_pods(self, pods, python, args=(), timeout=120, launcher=DTLAUNCH):
        self.node_of = dict(zip(pods, self.network.nodes))  # pod i in namespace i
        self.network.write_hosts({node: [f"job-{pod}", f"job-{pod}.job"] for pod, node in self.node_of.items()})
        return super().run_pods(pods, python, args, timeout, launcher)

    def command(self, pod, argv):
        return self.network.exec_argv(self.node_of[pod], ["unshare", "--uts", "--", "sh", "-c",
                                                          'hostname "$0" && exec "$@"', f"job-{pod}", *argv])


if __name__ == "__main__":
    main()
