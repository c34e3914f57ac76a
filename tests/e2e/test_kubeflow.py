"""dtlaunch as the command of Kubeflow's pods: two "pods" (two dtlaunch processes on this machine),
each given exactly the variables the operator gives that pod, with the services' names replaced by
127.0.0.1 and their ports by free ones, run a real PyTorch gloo allreduce. docs/kubernetes.md lists
each operator's variables with its source lines; the sets below are written from it.

A pod here is a CPU pod: CUDA_VISIBLE_DEVICES="" (no GPU given to the container) and an affinity of
at most 2 CPUs, so that `auto` means a known number of workers."""
import os
import re
import subprocess
import unittest

from common import (ALLREDUCE_SCRIPT, DTLAUNCH, LaunchTest, Running, free_port, main, torch_pythons)

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
    def pod_env(self, operator_vars, python):
        env = self.env(PYTHON_EXEC=python, CUDA_VISIBLE_DEVICES="")
        env.update(operator_vars)
        return env

    def run_pods(self, pods, python, args=(), timeout=120):
        """Starts one dtlaunch per pod (`dtlaunch [args] script`), returns {pod: CompletedProcess}."""
        script = os.path.join(self.tmp, "train.py")
        with open(script, "w") as f:
            f.write(SCRIPT)
        running = {}
        for name, variables in pods.items():
            running[name] = Running([DTLAUNCH, *expand(args, variables), script], self.pod_env(variables, python),
                                    preexec_fn=lambda: os.sched_setaffinity(0, CPUS))
        return {name: r.finish(timeout=timeout) for name, r in running.items()}

    def assert_job(self, results, world, master_addr, master_port):
        """Every pod exited 0, the allreduce over `world` workers summed 1..world in each, and every
        worker got its own RANK, WORLD_SIZE and the job's store."""
        workers = {}
        for name, r in results.items():
            self.assertExitCode(r, 0)
            workers.update(env_lines(r.stdout))
            for rank in env_lines(r.stdout):
                self.assertIn(f"rank={rank} world={world} sum={world * (world + 1) // 2} elastic=True", r.stdout, name)
        self.assertEqual(sorted(workers), list(range(world)), results)
        for rank, values in workers.items():
            self.assertEqual(values["WORLD_SIZE"], str(world))
            self.assertEqual(values["MASTER_ADDR"], master_addr)
            if master_port is not None:
                self.assertEqual(values["MASTER_PORT"], str(master_port))
        return workers

    def test_a_pytorchjob_with_master_and_worker_runs_auto_workers_per_pod(self):
        for label, python in PYTHONS:
            with self.subTest(label):
                port = free_port()
                results = self.run_pods(pytorchjob_master_worker("127.0.0.1", port), python)
                workers = self.assert_job(results, 2 * AUTO, "127.0.0.1", port)
                # the pod's WORLD_SIZE=2 and RANK=1 counted pods; the workers' count processes
                self.assertEqual({w["GROUP_RANK"] for r, w in workers.items() if r >= AUTO}, {"1"})

    def test_a_pytorchjob_with_nproc_per_node_2_makes_ranks_0_to_3(self):
        for label, python in PYTHONS:
            with self.subTest(label):
                port = free_port()
                pods = pytorchjob_master_worker("127.0.0.1", port, nproc_per_node="2")
                self.assertEqual(pods["worker-0"]["WORLD_SIZE"], "4")
                results = self.run_pods(pods, python)
                workers = self.assert_job(results, 4, "127.0.0.1", port)
                self.assertIn("rank=2 world=4", results["worker-0"].stdout)
                self.assertEqual(workers[3]["LOCAL_RANK"], "1")

    def test_an_elastic_pytorchjob_meets_at_worker_0_through_c10d(self):
        for label, python in PYTHONS:
            with self.subTest(label):
                port = free_port()
                results = self.run_pods(pytorchjob_elastic("127.0.0.1", port), python)
                self.assert_job(results, 2 * AUTO, "127.0.0.1", port)
                self.assertTrue(any("hosting the rendezvous" in r.stderr for r in results.values()), results)

    def test_a_trainjob_runs_its_numprocpernode_on_each_node(self):
        for label, python in PYTHONS:
            with self.subTest(label):
                port = free_port()
                results = self.run_pods(trainjob("127.0.0.1", port, 2), python)
                self.assert_job(results, 4, "127.0.0.1", port)

    def test_an_old_pytorchjob_is_refused_until_the_flags_are_given(self):
        label, python = PYTHONS[0]
        port = free_port()
        pods = pytorchjob_before_1_7("127.0.0.1", port)
        for name, r in self.run_pods(pods, python, timeout=30).items():
            self.assertExitCode(r, 2)
            self.assertEqual(r.stdout, "")
            self.assertIn("but not nnodes, node_rank, master_addr, master_port: dtlaunch does not guess; pass "
                          "--nnodes=$WORLD_SIZE --node_rank=$RANK --master_addr=$MASTER_ADDR "
                          "--master_port=$MASTER_PORT", r.stderr)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        # The manifest's fix (docs/kubernetes/pytorchjob.yaml): one node per pod, from the pod's own set.
        args = ["--nnodes=$(WORLD_SIZE)", "--node_rank=$(RANK)", "--master_addr=$(MASTER_ADDR)",
                "--master_port=$(MASTER_PORT)", "--nproc_per_node=1"]
        self.assert_job(self.run_pods(pods, python, args), 2, "127.0.0.1", port)

    def test_the_operators_empty_pet_standalone_is_refused(self):
        r = subprocess.run([DTLAUNCH, "train.py"], env=self.env(PET_STANDALONE=""), capture_output=True, text=True,
                           timeout=30)
        self.assertExitCode(r, 2)
        self.assertIn("PET_STANDALONE is set but empty", r.stderr)


if __name__ == "__main__":
    main()
