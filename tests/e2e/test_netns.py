"""Three dtlaunch agents in three network namespaces, each with its own address on a private bridge:
the loopback multi-node checks again over a real (virtual) network, plus cut links.

Needs root (CI runs as root) and iproute2 (scripts/setup.sh installs it); otherwise every test is
skipped with the reason. The network lives entirely in namespaces of its own: nodes a, b, c each
get eth0 = 10.231.X.{1,2,3}/24 (no default route: nothing leaves the subnet), whose veth peer is a
port of br0 in a fourth namespace. The host's network is never touched."""
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import unittest

from common import DTLAUNCH, LaunchTest, Running, have_torch, main, torch_pythons, write_allreduce_script
from netns import Network, build_for_tests, ip, why_no_netns

NODES = "abc"
NET = Network(NODES)
NS, ADDR, BRIDGE_NS, SUBNET = NET.ns, NET.addr, NET.bridge_ns, NET.subnet

# Heartbeats at their defaults: keep_alive_interval 0.5 s x keep_alive_max_attempt 3 = 1.5 s of silence.
DETECTION_LIMIT_S = 5.0


def note(text):
    """Measured times, for whoever reads the test log."""
    print(f"    netns: {text}", file=sys.stderr, flush=True)


_ports = itertools.count(29400)

# A worker that needs nothing but the c10d store: torch's env:// rendezvous (what
# init_process_group uses), a key per rank, a wait for all of them. No gloo, whose own ports a
# one-port firewall closes too.
STORE_ONLY_SCRIPT = r"""
import datetime, os, torch.distributed as dist
store, rank, world = next(dist.rendezvous("env://", timeout=datetime.timedelta(seconds=10)))
store.set(f"rank{rank}", "here")
store.wait([f"rank{r}" for r in range(world)])
print(f"rank {rank} of {world} met through {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}", flush=True)
"""


@unittest.skipIf(why_no_netns(), why_no_netns())
class NetNS(LaunchTest):
    @classmethod
    def setUpClass(cls):
        build_for_tests(NET)

    @classmethod
    def tearDownClass(cls):
        NET.delete()

    def setUp(self):
        super().setUp()
        self.port = next(_ports)  # fresh namespaces, but no TIME_WAIT of an earlier test in the way

    # --- starting agents -------------------------------------------------------------------------

    def agent(self, node, *args, env=None):
        """dtlaunch inside node's namespace; `ip netns exec` execs it, so the pid is dtlaunch's."""
        return Running(NET.exec_argv(node, [DTLAUNCH, *args]), env or self.env())

    def static(self, node, *args, nproc=1, env=None):
        rank = NODES.index(node)
        return self.agent(node, "--nnodes=3", f"--node_rank={rank}", f"--nproc_per_node={nproc}",
                          f"--master_addr={ADDR['a']}", f"--master_port={self.port}", f"--local_addr={ADDR[node]}",
                          *args, env=env)

    def elastic(self, node, nnodes, *args, nproc=1, env=None):
        return self.agent(node, f"--nnodes={nnodes}", "--rdzv_backend=c10d", f"--rdzv_endpoint={ADDR['a']}:{self.port}",
                          "--rdzv_id=netjob", f"--nproc_per_node={nproc}", *args, env=env)

    def start_all(self, make):
        nodes = {}
        for n in NODES:
            nodes[n] = make(n)
            self.addCleanup(self.kill_if_running, nodes[n])
        return nodes

    @staticmethod
    def kill_if_running(running):
        if running.proc.poll() is None:
            running.proc.kill()
        running.proc.wait(timeout=10)
        for s in (running.proc.stdout, running.proc.stderr):
            if not s.closed:
                s.close()

    def assertIsDtlaunch(self, running):
        self.assertEqual(os.path.realpath(f"/proc/{running.proc.pid}/exe"), os.path.realpath(DTLAUNCH),
                         "ip netns exec did not exec dtlaunch in place")

    def cut(self, where, node):
        """Takes one namespace's link down: 'bridge' is the cable pulled at the switch (the bridge's
        port), 'node' is the node's own eth0 going down. Put back up after the test."""
        ns, dev = (BRIDGE_NS, NET.port(node)) if where == "bridge" else (NS[node], "eth0")
        ip("-n", ns, "link", "set", dev, "down")
        self.addCleanup(ip, "-n", ns, "link", "set", dev, "up")
        return time.monotonic()

    def finish_all(self, nodes, timeout=30):
        return {n: r.finish(timeout=timeout) for n, r in nodes.items()}

    # --- the loopback checks, across namespaces --------------------------------------------------

    def test_three_namespaces_with_1_2_3_workers_make_ranks_0_to_5(self):
        nodes = self.start_all(lambda n: self.static(n, *self.worker("touch", self.tmp), nproc=NODES.index(n) + 1))
        results = self.finish_all(nodes)
        for r in results.values():
            self.assertExitCode(r, 0)
        self.assertEqual(sorted(os.listdir(self.tmp), key=int), [str(i) for i in range(6)])
        self.assertIn(f"hosting the rendezvous on {ADDR['a']}:{self.port}", results["a"].stderr)
        for n, ranks in (("a", "0..0"), ("b", "1..2"), ("c", "3..5")):
            self.assertRegex(results[n].stderr, rf"round 1: node {NODES.index(n)} of 3, ranks {ranks} of 6, "
                                                rf"master {re.escape(ADDR['a'])}:\d+, restart 0")
        for n in "bc":
            self.assertRegex(results["a"].stderr, rf"rendezvous: \S+ \({re.escape(ADDR[n])}\) joined")

    def test_c10d_hosts_on_the_node_that_owns_the_endpoint_and_sees_each_peer_by_its_address(self):
        # No --local_addr: the server names each node by the address its connection came from.
        nodes = self.start_all(lambda n: self.elastic(n, 3, *self.worker("env"), nproc=1))
        results = self.finish_all(nodes)
        for r in results.values():
            self.assertExitCode(r, 0)
        self.assertIn(f"hosting the rendezvous on {ADDR['a']}:{self.port}", results["a"].stderr)
        for n in "bc":
            self.assertNotIn("hosting", results[n].stderr)
            self.assertRegex(results["a"].stderr, rf"rendezvous: \S+ \({re.escape(ADDR[n])}\) joined")
        for i, n in enumerate(NODES):  # c10d orders nodes by address: a, b, c
            out = results[n].stdout
            for line in (f"RANK={i}", f"GROUP_RANK={i}", "WORLD_SIZE=3", "GROUP_WORLD_SIZE=3",
                         f"MASTER_ADDR={ADDR['a']}", "TORCHELASTIC_RUN_ID=netjob"):
                self.assertIn(f"[default0]:{line}\n", out)

    def test_a_worker_failure_on_node_1_restarts_all_three_nodes_once(self):
        args = ["--max_restarts=1", *self.worker("fail-first", 3, 7)]
        nodes = self.start_all(lambda n: self.static(n, *args, nproc=2))
        results = self.finish_all(nodes)
        for r in results.values():
            self.assertExitCode(r, 0)
        self.assertIn("[default1]:attempt 0 rank 3\n", results["b"].stdout)
        for n, ranks in (("a", (0, 1)), ("b", (2, 3)), ("c", (4, 5))):
            for local, rank in enumerate(ranks):  # the others may be stopped before they print in attempt 0
                self.assertIn(f"[default{local}]:attempt 1 rank {rank}\n", results[n].stdout)
            self.assertIn(f"round 2: node {NODES.index(n)} of 3", results[n].stderr)
            self.assertIn(", restart 1\n", results[n].stderr)
        self.assertRegex(results["a"].stderr, rf"stopping the round: rank 3 on \S+ \({re.escape(ADDR['b'])}\) failed")
        self.assertIn("rendezvous: restarting the workers (1 of 1 restarts)", results["a"].stderr)

    # --- one open port: the workers' store on the master port ---------------------------------------

    def only_master_port_open(self):
        """In every namespace, TCP from the network is dropped unless it goes to the master port (a
        firewalled cluster, or a Kubernetes NetworkPolicy naming one port)."""
        if not shutil.which("nft"):
            self.skipTest("nftables' 'nft' is not installed (scripts/setup.sh installs it)")
        for n in NODES:
            rules = (f"table inet dtl {{\n chain input {{\n type filter hook input priority 0; policy accept;\n"
                     f" ct state established,related accept\n"
                     f" iifname \"eth0\" tcp dport != {self.port} drop\n }}\n}}\n")
            r = subprocess.run(["ip", "netns", "exec", NS[n], "nft", "-f", "-"], input=rules, text=True,
                               capture_output=True, timeout=30)
            if r.returncode != 0:
                self.skipTest(f"cannot set a firewall in the namespaces (nft): {r.stderr.strip()}")
            self.addCleanup(subprocess.run, ["ip", "netns", "exec", NS[n], "nft", "delete", "table", "inet", "dtl"],
                            capture_output=True, timeout=30)

    def store_job(self, *args, c10d=False):
        """Two static nodes (a, b) of two workers that meet through the workers' c10d store alone
        (torch's env:// rendezvous, then a key per rank), with the last torch found."""
        pythons = torch_pythons()
        if not pythons:
            self.skipTest("no python with torch")
        script = os.path.join(self.tmp, "store_only.py")
        with open(script, "w") as f:
            f.write(STORE_ONLY_SCRIPT)
        env = self.env(PYTHON_EXEC=pythons[-1][1])
        nodes = {}
        for n in "ab":
            meet = ([f"--rdzv_backend=c10d", f"--rdzv_endpoint={ADDR['a']}:{self.port}", "--rdzv_id=netjob"] if c10d
                    else [f"--node_rank={NODES.index(n)}", f"--master_addr={ADDR['a']}", f"--master_port={self.port}"])
            nodes[n] = self.agent(n, "--nnodes=2", "--nproc_per_node=2", *meet, f"--local_addr={ADDR[n]}", *args,
                                  script, env=env)
            self.addCleanup(self.kill_if_running, nodes[n])
        return {n: r.finish(timeout=120) for n, r in nodes.items()}

    def test_with_only_the_master_port_open_the_workers_meet_through_the_agent_store(self):
        self.only_master_port_open()
        results = self.store_job()
        for r in results.values():
            self.assertExitCode(r, 0)
        for rank in range(4):
            self.assertIn(f"rank {rank} of 4 met through {ADDR['a']}:{self.port}",
                          results["ab"[rank // 2]].stdout)

    def test_with_only_the_rendezvous_port_open_c10d_workers_meet_through_the_agent_store(self):
        self.only_master_port_open()
        results = self.store_job(c10d=True)
        for r in results.values():
            self.assertExitCode(r, 0)
        out = results["a"].stdout + results["b"].stdout
        for rank in range(4):
            self.assertIn(f"rank {rank} of 4 met through {ADDR['a']}:{self.port}", out)

    def test_with_only_the_master_port_open_rank_0_hosting_the_store_cannot_form(self):
        self.only_master_port_open()
        results = self.store_job("--agent_store=false")
        self.assertNotEqual(results["b"].returncode, 0)
        self.assertNotIn("met through", results["b"].stdout)

    @unittest.skipUnless(have_torch(), "Debian's python3-torch is not installed (scripts/setup.sh installs it)")
    def test_a_pytorch_gloo_allreduce_spans_the_three_namespaces(self):
        script = write_allreduce_script(self.tmp)
        # Gloo finds its own address through the host name, which is the same in every namespace and
        # resolves to 127.0.0.1 here; no GLOO_SOCKET_IFNAME is given: each agent names the interface
        # that reaches the rendezvous (torchrun's workers fail here: connect [127.0.0.1] refused).
        env = {k: v for k, v in self.env(PYTHON_EXEC="/usr/bin/python3").items() if not k.endswith("_SOCKET_IFNAME")}
        nodes = self.start_all(lambda n: self.static(n, script, env=env))
        results = self.finish_all(nodes, timeout=90)
        for r in results.values():
            self.assertExitCode(r, 0)
            self.assertIn("the workers' gloo traffic goes through eth0", r.stderr)
        for i, n in enumerate(NODES):
            self.assertIn(f"[default0]:rank={i} world=3 sum=6", results[n].stdout)

    def test_sigkill_of_a_node_agent_is_noticed_and_nothing_is_left_running(self):
        nodes = self.start_all(lambda n: self.static(n, *self.worker("pause"), nproc=2))
        for r in nodes.values():
            r.wait_for(r"ready rank", count=2)
        self.assertIsDtlaunch(nodes["c"])
        started = time.monotonic()
        nodes["c"].proc.kill()
        results = {n: nodes[n].finish(timeout=10) for n in "ab"}
        took = time.monotonic() - started
        note(f"SIGKILL of node c's agent: the others exited after {took:.2f} s")
        self.assertLess(took, DETECTION_LIMIT_S)
        for r in results.values():
            self.assertExitCode(r, 1)
            self.assertIn(f"({ADDR['c']}) was lost and the job cannot go on without it", r.stderr)
        self.assertIn("Root Cause (first observed failure):", results["a"].stderr)
        self.assertEqual(nodes["c"].finish().returncode, -signal.SIGKILL)
        self.assert_no_leftovers(timeout=5)

    def test_sigkill_of_the_agent_hosting_the_rendezvous_ends_the_others(self):
        nodes = self.start_all(lambda n: self.static(n, *self.worker("pause")))
        for r in nodes.values():
            r.wait_for(r"ready rank")
        self.assertIsDtlaunch(nodes["a"])
        started = time.monotonic()
        nodes["a"].proc.kill()
        results = {n: nodes[n].finish(timeout=10) for n in "bc"}
        took = time.monotonic() - started
        note(f"SIGKILL of the hosting agent (a): the others exited after {took:.2f} s")
        self.assertLess(took, DETECTION_LIMIT_S)
        for r in results.values():
            self.assertExitCode(r, 1)
            self.assertRegex(r.stderr, r"rendezvous: (the rendezvous server closed the connection|"
                                       r"lost the rendezvous server)")
        nodes["a"].finish()
        self.assert_no_leftovers(timeout=5)

    # --- cut links -------------------------------------------------------------------------------

    def check_cut_static_node(self, where):
        nodes = self.start_all(lambda n: self.static(n, *self.worker("pause"), nproc=2))
        for r in nodes.values():
            r.wait_for(r"ready rank", count=2)
        cut_at = self.cut(where, "c")
        nodes["a"].wait_for(rf"\({re.escape(ADDR['c'])}\) lost: nothing heard for \d+ ms \(no heartbeat\)", stream="err",
                            timeout=10)
        server_s = time.monotonic() - cut_at
        nodes["c"].wait_for(r"lost the rendezvous server: nothing heard for \d+ ms", stream="err", timeout=10)
        client_s = time.monotonic() - cut_at
        results = self.finish_all(nodes, timeout=10)
        all_s = time.monotonic() - cut_at
        self.assert_no_leftovers(timeout=5)
        note(f"link of node c cut at the {where}: server noticed after {server_s:.2f} s, node c after "
             f"{client_s:.2f} s, every agent gone after {all_s:.2f} s")
        quiet_ms = int(re.search(r"lost: nothing heard for (\d+) ms", results["a"].stderr).group(1))
        self.assertGreaterEqual(quiet_ms, 1500)  # keep_alive_interval 0.5 s x keep_alive_max_attempt 3
        self.assertLess(server_s, DETECTION_LIMIT_S)
        self.assertLess(client_s, DETECTION_LIMIT_S)
        self.assertLess(all_s, DETECTION_LIMIT_S)
        for n in "ab":
            self.assertExitCode(results[n], 1)
            self.assertIn(f"({ADDR['c']}) was lost and the job cannot go on without it", results[n].stderr)
        self.assertExitCode(results["c"], 1)
        self.assertIn("the node was lost (nothing heard for", results["a"].stderr)  # in the failure summary
        return results

    def test_a_link_cut_at_the_bridge_is_detected_by_heartbeats_on_both_sides(self):
        self.check_cut_static_node("bridge")

    def test_a_node_whose_own_interface_goes_down_is_detected_by_heartbeats_on_both_sides(self):
        self.check_cut_static_node("node")

    def test_a_cut_link_of_the_hosting_node_is_detected_by_every_node(self):
        nodes = self.start_all(lambda n: self.static(n, *self.worker("pause")))
        for r in nodes.values():
            r.wait_for(r"ready rank")
        cut_at = self.cut("bridge", "a")
        seen = {}
        for n in "bc":
            nodes[n].wait_for(r"lost the rendezvous server: nothing heard for \d+ ms", stream="err", timeout=10)
            seen[n] = time.monotonic() - cut_at
        # The first of b and c found quiet ends the job; the other is then dropped without a word.
        nodes["a"].wait_for(rf"\({re.escape(SUBNET)}\.[23]\) lost: nothing heard for \d+ ms \(no heartbeat\)", stream="err",
                            timeout=10)
        seen["a"] = time.monotonic() - cut_at
        results = self.finish_all(nodes, timeout=10)
        all_s = time.monotonic() - cut_at
        self.assert_no_leftovers(timeout=5)
        note(f"link of the hosting node a cut: b noticed after {seen['b']:.2f} s, c after {seen['c']:.2f} s, "
             f"a's server after {seen['a']:.2f} s, every agent gone after {all_s:.2f} s")
        for n, s in seen.items():
            self.assertLess(s, DETECTION_LIMIT_S, n)
        self.assertLess(all_s, DETECTION_LIMIT_S)
        for r in results.values():
            self.assertExitCode(r, 1)
        self.assertIn("was lost and the job cannot go on without it", results["a"].stderr)
        self.assertNotIn("still connected 5s after the end", results["a"].stderr)

    def test_an_elastic_job_cut_from_one_node_goes_on_with_the_other_two(self):
        conf = "--rdzv_conf=last_call_timeout=0.2"
        nodes = self.start_all(lambda n: self.elastic(n, "2:3", conf, *self.worker("pause")))
        for r in nodes.values():
            r.wait_for(r"ready rank")
        cut_at = self.cut("bridge", "c")
        nodes["a"].wait_for(rf"\({re.escape(ADDR['c'])}\) lost: nothing heard for \d+ ms \(no heartbeat\)", stream="err",
                            timeout=10)
        lost_s = time.monotonic() - cut_at
        for n in "ab":  # a new round of two nodes, ranks 0 and 1, without spending a restart
            nodes[n].wait_for(r"round 2: node \d of 2, ranks \d\.\.\d of 2", stream="err", timeout=10)
            nodes[n].wait_for(r"ready rank", count=2, timeout=10)
        reformed_s = time.monotonic() - cut_at
        c = nodes["c"].finish(timeout=10)
        note(f"elastic 2:3, link of node c cut: lost after {lost_s:.2f} s, 2-node group running after "
             f"{reformed_s:.2f} s")
        self.assertLess(lost_s, DETECTION_LIMIT_S)
        self.assertExitCode(c, 1)
        self.assertIn("lost the rendezvous server: nothing heard for", c.stderr)
        self.assertIn("re-forming the group with 2 nodes (no restart spent)", nodes["a"].err.decode())
        for n in "ab":
            nodes[n].proc.send_signal(signal.SIGTERM)
        self.assertExitCode(nodes["a"].finish(timeout=10), 128 + signal.SIGTERM)
        # b exits 143 when its own signal comes before it has left; when a's leaving ended b's part first
        # (one os.kill after the other, on a loaded machine), b exits 1 and gives a's reason
        b = nodes["b"].finish(timeout=10)
        if b.returncode != 128 + signal.SIGTERM:
            self.assertExitCode(b, 1)
            self.assertIn(f"the job failed: vm ({ADDR['a']}) left: it received SIGTERM\n", b.stderr)
        out = nodes["a"].out.decode() + nodes["b"].out.decode()
        self.assertEqual(sorted(re.findall(r"ready rank (\d)", out)), ["0", "0", "1", "1"])


if __name__ == "__main__":
    main()
