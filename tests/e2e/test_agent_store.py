"""The workers' c10d store served by dtlaunch itself (torchrun 2.x's agent store): workers get
MASTER_PORT = --master_port (or the rendezvous port) and TORCHELASTIC_USE_AGENT_STORE=True, gloo groups
of real torch workers form through it on one node and across two agents sharing one port with the
rendezvous, a restarted group forms again on the same store, and hostile clients on that port leave
the job alone. Torch tests run with every torch found (common.torch_pythons); none: skipped."""
import json
import os
import resource
import socket
import struct
import subprocess
import time
import unittest

from common import LaunchTest, free_port, main, parse_env, torch_pythons

PYTHONS = torch_pythons()
STORE_LOAD = os.environ.get("STORE_LOAD", os.path.join(os.path.dirname(__file__), "../../build/tests/store_load"))

# A gloo rank through dtlaunch's environment: allreduce, barrier, monitored_barrier where torch has
# it. With GO_FILE it waits for that file first; with FAIL_FIRST rank 1 fails the first attempt.
SCRIPT = r"""
import datetime, os, time, torch, torch.distributed as dist
go = os.environ.get("GO_FILE")
deadline = time.monotonic() + 60
while go and not os.path.exists(go) and time.monotonic() < deadline:
    time.sleep(0.05)
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
t = torch.tensor([rank + 1.0]); dist.all_reduce(t)
dist.barrier()
if hasattr(dist, "monitored_barrier"):
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=30))
print(f"rank {rank} attempt {attempt} sum {int(t.item())} port {os.environ['MASTER_PORT']} "
      f"agent_store {os.environ['TORCHELASTIC_USE_AGENT_STORE']}", flush=True)
if os.environ.get("FAIL_FIRST") and attempt == 0:
    if rank == 1:
        os._exit(3)
    time.sleep(120)  # stopped by dtlaunch
dist.destroy_process_group()
"""


class AgentStoreEnvironment(LaunchTest):
    def test_workers_get_the_master_port_and_use_agent_store_true(self):
        port = free_port()
        r = self.launch("--nproc_per_node=2", f"--master_port={port}", *self.worker("env"))
        self.assertExitCode(r, 0)
        for env in parse_env(r.stdout).values():
            self.assertEqual(env["MASTER_PORT"], str(port))
            self.assertEqual(env["TORCHELASTIC_USE_AGENT_STORE"], "True")

    def test_agent_store_false_by_flag_variable_or_file_brings_back_rank_0_hosting(self):
        cfg = os.path.join(self.tmp, "cfg.yaml")
        with open(cfg, "w") as f:
            f.write("agent_store: false\n")
        for args, env in [(["--agent_store=false"], {}), ([], {"PET_AGENT_STORE": "0"}),
                          ([f"--config_file={cfg}"], {})]:
            with self.subTest(args=args, env=env):
                r = self.launch("--nproc_per_node=2", "--master_port=0", *args, *self.worker("env"),
                                env=self.env(**env))
                self.assertExitCode(r, 0)
                for e in parse_env(r.stdout).values():
                    self.assertEqual(e["TORCHELASTIC_USE_AGENT_STORE"], "False")

    def test_two_static_agents_give_every_worker_the_master_port(self):
        port = free_port()
        nodes = [self.start("--nnodes=2", f"--node_rank={r}", "--nproc_per_node=2", "--master_addr=127.0.0.1",
                            f"--master_port={port}", *self.worker("env")) for r in range(2)]
        for n in nodes:
            r = n.finish()
            self.assertExitCode(r, 0)
            for env in parse_env(r.stdout).values():
                self.assertEqual((env["MASTER_ADDR"], env["MASTER_PORT"]), ("127.0.0.1", str(port)))
                self.assertEqual(env["TORCHELASTIC_USE_AGENT_STORE"], "True")


@unittest.skipUnless(PYTHONS, "no python with torch (Debian's python3-torch, or DTL_TORCH2_PYTHON)")
class ManyStoreClientsOnTheRendezvousPort(LaunchTest):
    """A job's workers connect to the store all at once, and on the rendezvous's port each is a peer
    that has not proven the token until its first bytes say it is the store's: past the
    rendezvous's own cap (1024), 2363 of 4000 were shed."""

    CLIENTS = 3000

    @unittest.skipUnless(os.path.exists(STORE_LOAD), "store_load is not built")
    def test_three_thousand_store_clients_at_once_all_get_through(self):
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        if hard != resource.RLIM_INFINITY and hard < 2 * self.CLIENTS + 512:
            self.skipTest(f"the descriptor limit ({hard}) is below what {self.CLIENTS} store clients need on each side")
        port = free_port()
        server = self.start("rdzv-server", "--host=127.0.0.1", f"--port={port}", "--nnodes=2", "--rdzv_id=job")
        server.wait_for("listening on 127.0.0.1", stream="err")
        # 8 clients to a source address, 2048 connects in flight: each connects, validates as torch 2.x
        # does, adds 1 to a counter and waits on a barrier key that the last one sets.
        try:
            r = subprocess.run([STORE_LOAD, "127.0.0.1", str(port), str(self.CLIENTS), "60", "2048", "8"],
                               capture_output=True, text=True, timeout=120)
        finally:
            server.proc.terminate()
            server.finish()
        got = json.loads(r.stdout.strip().splitlines()[-1])
        self.assertEqual((got["released"], got["failed"]), (self.CLIENTS, 0), r.stdout + r.stderr)


class AgentStoreWithTorch(LaunchTest):
    def script(self):
        path = os.path.join(self.tmp, "rank.py")
        with open(path, "w") as f:
            f.write(SCRIPT)
        return path

    def test_four_gloo_workers_form_a_group_through_the_agent_store(self):
        for label, python in PYTHONS:
            with self.subTest(label):
                port = free_port()
                r = self.launch("--nproc_per_node=4", f"--master_port={port}", self.script(),
                                env=self.env(PYTHON_EXEC=python), timeout=240)
                self.assertExitCode(r, 0)
                for rank in range(4):
                    self.assertIn(f"rank {rank} attempt 0 sum 10 port {port} agent_store True", r.stdout)

    def test_a_restarted_group_forms_again_on_the_same_store(self):
        for label, python in PYTHONS:
            with self.subTest(label):
                port = free_port()
                r = self.launch("--nproc_per_node=3", "--max_restarts=1", f"--master_port={port}", self.script(),
                                env=self.env(PYTHON_EXEC=python, FAIL_FIRST=1), timeout=240)
                self.assertExitCode(r, 0)
                for rank in range(3):
                    self.assertIn(f"rank {rank} attempt 1 sum 6 port {port} agent_store True", r.stdout)

    def test_gloo_spans_two_static_agents_whose_only_shared_port_is_the_master_port(self):
        label, python = PYTHONS[-1]
        port = free_port()
        env = self.env(PYTHON_EXEC=python)
        nodes = [self.start("--nnodes=2", f"--node_rank={r}", "--nproc_per_node=2", "--master_addr=127.0.0.1",
                            f"--master_port={port}", self.script(), env=env) for r in range(2)]
        results = [n.finish(timeout=240) for n in nodes]
        for r in results:
            self.assertExitCode(r, 0)
        for rank in range(4):
            self.assertIn(f"rank {rank} attempt 0 sum 10 port {port} agent_store True",
                          results[rank // 2].stdout)

    def check_two_nodes_formed(self, nodes, port):
        """Both nodes succeed, and their 4 ranks met through the agent's store on `port`."""
        results = [n.finish(timeout=240) for n in nodes]
        for r in results:
            self.assertExitCode(r, 0)
        out = results[0].stdout + results[1].stdout
        for rank in range(4):
            self.assertIn(f"rank {rank} attempt 0 sum 10 port {port} agent_store True", out)

    def test_gloo_spans_two_c10d_agents_on_the_rendezvous_port(self):
        label, python = PYTHONS[-1]
        port = free_port()
        env = self.env(PYTHON_EXEC=python)
        nodes = [self.start("--nnodes=2", "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{port}",
                            "--rdzv_id=job", "--nproc_per_node=2", self.script(), env=env) for _ in range(2)]
        self.check_two_nodes_formed(nodes, port)

    def test_a_standalone_rdzv_server_serves_the_store_of_agents_that_do_not_host(self):
        label, python = PYTHONS[-1]
        port = free_port()
        server = self.start("rdzv-server", "--host=127.0.0.1", f"--port={port}", "--nnodes=2", "--rdzv_id=job")
        server.wait_for("listening on 127.0.0.1", stream="err")
        env = self.env(PYTHON_EXEC=python)
        nodes = [self.start("--nnodes=2", "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=job",
                            "--rdzv_conf=is_host=0", "--nproc_per_node=2", self.script(), env=env) for _ in range(2)]
        self.check_two_nodes_formed(nodes, port)
        self.assertExitCode(server.finish(), 0)

    def test_hostile_clients_on_the_shared_port_leave_a_running_job_alone(self):
        label, python = PYTHONS[-1]
        port = free_port()
        go = os.path.join(self.tmp, "go")
        env = self.env(PYTHON_EXEC=python, GO_FILE=go)
        nodes = [self.start("--nnodes=2", f"--node_rank={r}", "--nproc_per_node=2", "--master_addr=127.0.0.1",
                            f"--master_port={port}", self.script(), env=env) for r in range(2)]
        hostile = []
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    hostile.append(socket.create_connection(("127.0.0.1", port), timeout=5))
                    break
                except OSError:
                    self.assertLess(time.monotonic(), deadline, "the port never opened")
                    time.sleep(0.05)

            def connect(data=b""):
                c = socket.create_connection(("127.0.0.1", port), timeout=10)
                if data:
                    c.sendall(data)
                hostile.append(c)
                return c

            magic = b"\x00\xce\xf7\x85\x3c"
            garbage = connect(b"\xff" * 64)                                   # the store's: bad query type
            frame = connect(b"\x00\x00\x00\x05\x01\xff\xff\xff\xff\xff")        # the rendezvous's: bad type
            huge = connect(magic + b"\x01" + struct.pack("<Q", 1 << 62))
            never = connect(magic + b"\x06" + struct.pack("<QQ", 1, 5) + b"never")
            for i in range(200):
                connect(magic if i % 2 else b"")  # stalled: validated, or quiet
            with open(go, "w"):
                pass
            results = [n.finish(timeout=240) for n in nodes]
            for r in results:
                self.assertExitCode(r, 0)
            for c in (garbage, frame, huge):
                c.settimeout(10)
                self.assertEqual(c.recv(16), b"", "a hostile client's connection was not closed")
            self.assertIn("store: dropped 127.0.0.1: not torch's store protocol: unknown query type 255",
                          results[0].stderr)
        finally:
            for c in hostile:
                c.close()


if __name__ == "__main__":
    main()
