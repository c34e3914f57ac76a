"""Several dtlaunch agents on loopback meeting through the rendezvous: ranks, restarts together,
lost nodes, authentication, and peers that send garbage."""
import os
import signal
import socket
import time
import unittest

from common import LaunchTest, free_port, have_torch, main, poll_until, write_allreduce_script


class MultiNode(LaunchTest):
    def setUp(self):
        super().setUp()
        self.port = free_port()

    def static(self, node_rank, nnodes, *args, nproc=1):
        return self.start(f"--nnodes={nnodes}", f"--node_rank={node_rank}", f"--nproc_per_node={nproc}",
                          "--master_addr=127.0.0.1", f"--master_port={self.port}", *args)

    def elastic(self, nnodes, *args, nproc=1, env=None):
        return self.start(f"--nnodes={nnodes}", "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{self.port}",
                          "--rdzv_id=job42", f"--nproc_per_node={nproc}", *args, env=env)

    def test_three_static_nodes_with_1_2_3_workers_make_ranks_0_to_5(self):
        nodes = [self.static(r, 3, *self.worker("touch", self.tmp), nproc=r + 1) for r in range(3)]
        results = [n.finish() for n in nodes]
        for r in results:
            self.assertExitCode(r, 0)
        self.assertEqual(sorted(os.listdir(self.tmp), key=int), [str(i) for i in range(6)])
        self.assertIn("round 1: node 2 of 3, ranks 3..5 of 6", results[2].stderr)

    def test_a_worker_failure_on_node_1_restarts_both_nodes_once(self):
        args = ["--max_restarts=1", *self.worker("fail-first", 3, 7)]
        nodes = [self.static(r, 2, *args, nproc=2) for r in range(2)]
        results = [n.finish() for n in nodes]
        for r in results:
            self.assertExitCode(r, 0)
        for rank, r in [(0, results[0]), (1, results[0]), (2, results[1]), (3, results[1])]:
            self.assertIn(f"attempt 1 rank {rank}", r.stdout)
        self.assertIn("rendezvous: restarting the workers (1 of 1 restarts)", results[0].stderr)

    def test_without_restarts_every_node_fails_and_node_0_reports_the_remote_root_cause(self):
        nodes = [self.static(r, 2, *self.worker("exit", 5, 2), nproc=2) for r in range(2)]
        results = [n.finish() for n in nodes]
        self.assertExitCode(results[0], 5)
        self.assertExitCode(results[1], 5)
        self.assertIn("Root Cause (first observed failure):", results[0].stderr)
        self.assertIn("  rank      : 2 (local_rank: 0)\n  exitcode  : 5", results[0].stderr)
        self.assertNotIn("Root Cause", results[1].stderr)
        self.assertIn("the job failed: workers failed and no restarts are left", results[1].stderr)

    def test_sigkill_of_one_agent_is_noticed_and_nothing_is_left_running(self):
        nodes = [self.static(r, 2, *self.worker("pause"), nproc=2) for r in range(2)]
        for n in nodes:
            n.wait_for(r"ready rank", count=2)
        started = time.monotonic()
        nodes[1].proc.kill()
        r = nodes[0].finish(timeout=10)
        self.assertLess(time.monotonic() - started, 5)
        self.assertExitCode(r, 1)
        self.assertIn("was lost and the job cannot go on without it", r.stderr)
        nodes[1].finish()

    def test_a_sigterm_to_one_agent_ends_the_static_job(self):
        nodes = [self.static(r, 2, *self.worker("pause")) for r in range(2)]
        for n in nodes:
            n.wait_for(r"ready rank")
        nodes[1].proc.send_signal(signal.SIGTERM)
        self.assertExitCode(nodes[1].finish(), 128 + signal.SIGTERM)
        r0 = nodes[0].finish()
        self.assertExitCode(r0, 1)
        # the node said why it left: no "was lost", and no failure summary for a node that failed nothing
        self.assertRegex(r0.stderr, r"the job failed: [^\n]* \(127\.0\.0\.1\) left: it received SIGTERM\n")
        self.assertNotIn("was lost", r0.stderr)
        self.assertNotIn("Root Cause", r0.stderr)

    def test_a_sigterm_to_the_hosting_node_whose_workers_finished_ends_the_job_with_that_reason(self):
        host = self.static(0, 2, *self.worker("touch", self.tmp))
        other = self.static(1, 2, *self.worker("pause"))
        other.wait_for(r"ready rank")
        self.assertTrue(poll_until(lambda: os.path.exists(os.path.join(self.tmp, "0")), timeout=10))
        time.sleep(0.3)  # its Done goes out: the host waits in the exit barrier, no worker running
        host.proc.send_signal(signal.SIGTERM)
        self.assertExitCode(host.finish(), 128 + signal.SIGTERM)
        r = other.finish(timeout=10)
        self.assertExitCode(r, 1)
        self.assertRegex(r.stderr, r"the job failed: [^\n]*left: it received SIGTERM\n")

    def test_a_hosting_node_stopped_past_the_heartbeat_limit_does_not_blame_the_server_it_hosts(self):
        nodes = [self.static(r, 2, *self.worker("pause")) for r in range(2)]
        for n in nodes:
            n.wait_for(r"ready rank")
        nodes[0].proc.send_signal(signal.SIGSTOP)  # the agent only: its workers run on
        time.sleep(3)  # past keep_alive_interval 0.5 s x keep_alive_max_attempt 3
        nodes[0].proc.send_signal(signal.SIGCONT)
        r1 = nodes[1].finish(timeout=20)
        r0 = nodes[0].finish(timeout=20)
        self.assertExitCode(r1, 1)
        self.assertIn("lost the rendezvous server: nothing heard for", r1.stderr)  # true, from node 1
        self.assertNotEqual(r0.returncode, 0)
        # node 0 hosts the server: its silence was its own pause, not a lost server
        self.assertNotIn("lost the rendezvous server", r0.stderr)
        self.assert_no_leftovers(timeout=10)

    def test_a_wrong_token_is_refused_and_never_joins(self):
        env_good = self.env(DTLAUNCH_RDZV_TOKEN="s3cret")
        env_bad = self.env(DTLAUNCH_RDZV_TOKEN="guess")
        host = self.start("--nnodes=2", "--node_rank=0", "--master_port", self.port, "--rdzv_conf=timeout=3",
                          *self.worker("pause"), env=env_good)
        intruder = self.start("--nnodes=2", "--node_rank=1", "--master_port", self.port, *self.worker("pause"),
                              env=env_bad)
        r = intruder.finish()
        self.assertExitCode(r, 2)
        self.assertIn("dtlaunch: error: rendezvous: the rendezvous server failed authentication: its DTLAUNCH_RDZV_TOKEN "
                      "differs", r.stderr)
        self.assertNotIn("ready", r.stdout)
        h = host.finish()
        self.assertExitCode(h, 1)
        self.assertIn("hung up after the challenge: its DTLAUNCH_RDZV_TOKEN differs or is missing (or it was stopped)",
                      h.stderr)
        self.assertIn("the rendezvous timed out after 3s with 1 of 2 nodes", h.stderr)

    def test_a_node_without_the_token_is_refused_by_the_server(self):
        host = self.static(0, 2, "--rdzv_conf=timeout=3", *self.worker("pause"))
        host.proc.env = None
        r = self.launch("--nnodes=2", "--node_rank=1", "--master_port", self.port, *self.worker("pause"),
                        env=self.env(DTLAUNCH_RDZV_TOKEN="only-me"))
        self.assertExitCode(r, 2)
        self.assertIn("rendezvous: the rendezvous server has no token but this node has one", r.stderr)
        self.assertExitCode(host.finish(), 1)

    def test_another_run_id_is_refused(self):
        host = self.elastic("2", "--rdzv_conf=join_timeout=3", *self.worker("pause"))
        host.wait_for("hosting the rendezvous", stream="err")  # else the intruder could host its own
        r = self.launch("--nnodes=2", "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{self.port}",
                        "--rdzv_id=other", "--rdzv_conf=join_timeout=3", *self.worker("pause"))
        self.assertExitCode(r, 2)
        # The job's run id is not told to a node that has not proven the token; the host's log says it.
        self.assertIn("dtlaunch: error: rendezvous: run id 'other' does not match the job's run id\n", r.stderr)
        self.assertNotIn("job42", r.stderr)
        h = host.finish()
        self.assertExitCode(h, 1)
        self.assertIn("rendezvous: refused 127.0.0.1: run id 'other' does not match the job's 'job42'", h.stderr)

    def test_a_duplicate_node_rank_is_refused_with_the_owner_named(self):
        host = self.static(0, 3, "--rdzv_conf=timeout=3", *self.worker("pause"))
        one = self.static(1, 3, *self.worker("pause"))
        host.wait_for("joined \\(2 of 3 nodes\\)", stream="err")
        r = self.launch("--nnodes=3", "--node_rank=1", "--master_port", self.port, *self.worker("pause"))
        self.assertExitCode(r, 2)
        self.assertRegex(r.stderr, r"rendezvous: --node_rank=1 is already taken by \S+ \(127\.0\.0\.1\)")
        self.assertExitCode(host.finish(), 1)
        self.assertExitCode(one.finish(), 1)

    def test_a_second_node_0_is_told_the_port_is_taken(self):
        host = self.static(0, 2, "--rdzv_conf=timeout=3", *self.worker("pause"))
        host.wait_for("hosting the rendezvous", stream="err")
        r = self.launch("--nnodes=2", "--node_rank=0", "--master_port", self.port, *self.worker("pause"))
        self.assertExitCode(r, 2)
        self.assertEqual(r.stderr.splitlines()[-1],
                         f"dtlaunch: error: --master_port {self.port} is already in use on 127.0.0.1: is another "
                         "node 0 of this job running?")
        self.assertExitCode(host.finish(), 1)

    def test_a_taken_port_from_pet_master_port_is_named_as_the_variable(self):
        host = self.static(0, 2, "--rdzv_conf=timeout=3", *self.worker("pause"))
        host.wait_for("hosting the rendezvous", stream="err")
        r = self.launch("--nnodes=2", "--node_rank=0", *self.worker("pause"), env=self.env(PET_MASTER_PORT=str(self.port)))
        self.assertExitCode(r, 2)
        self.assertEqual(r.stderr.splitlines()[-1],
                         f"dtlaunch: error: master_port={self.port} (from PET_MASTER_PORT) is already in use on "
                         "127.0.0.1: is another node 0 of this job running?")
        self.assertExitCode(host.finish(), 1)

    def test_garbage_from_a_peer_does_not_disturb_a_running_round(self):
        nodes = [self.static(r, 2, *self.worker("pause")) for r in range(2)]
        for n in nodes:
            n.wait_for(r"ready rank")
        for junk in (b"\x00\x00\x00\x05\x01\x63hello", b"\xff\xff\xff\xff", b"GET / HTTP/1.0\r\n\r\n", b"\x00\x00\x00\x02\x09\x01"):
            with socket.create_connection(("127.0.0.1", self.port)) as s:
                s.sendall(junk)
                s.settimeout(5)
                try:
                    while s.recv(4096):
                        pass
                except (ConnectionResetError, socket.timeout):
                    pass
        # The first is said in full; the others, within the same 10 s, are summed up in one line.
        nodes[0].wait_for("rendezvous: dropped 127.0.0.1 before it joined: bad frame: unknown message type 99",
                          stream="err")
        before = nodes[0].err.decode()  # each junk connection was closed by the host before the loop went on
        self.assertNotIn("lost", before)
        self.assertNotIn("stopping", before)
        # the port is shared with the workers' store: bytes no rendezvous frame starts with are its
        # (the store's lines are rate-limited as well: the first in full, the second counted and
        # said when the store closes)
        self.assertIn("store: dropped 127.0.0.1: not torch's store protocol: unknown query type 255", before)
        self.assertNotIn("unknown query type 71", before)
        for n in nodes:
            n.proc.send_signal(signal.SIGTERM)
        r0 = nodes[0].finish()
        nodes[1].finish()
        self.assertEqual(r0.stdout.count("ready rank"), 1)  # no restart happened
        self.assertIn("store: 1 more refused or dropped connections, or failed accepts, since the last line", r0.stderr)
        # (the two the store took are not the rendezvous's to count)
        self.assertRegex(r0.stderr, r"rendezvous: 1 more connection from peers that did not prove the token ended in "
                                    r"the last \d+ s: 1 broke the protocol; from 127\.0\.0\.1\n")

    def test_a_node_joining_an_elastic_job_below_max_restarts_it_bigger_without_spending_a_restart(self):
        first = self.elastic("1:2", "--rdzv_conf=last_call_timeout=0.2", *self.worker("pause"))
        first.wait_for("ready rank 0")
        second = self.elastic("1:2", "--rdzv_conf=last_call_timeout=0.2", *self.worker("pause"))
        first.wait_for(r"ready rank \d", count=2)
        second.wait_for(r"ready rank \d")
        # the host logs it on stderr, which its console writes apart from the workers' stdout: wait for it
        first.wait_for(r"re-forming the group with 2 nodes \(no restart spent\)", stream="err")
        for n in (first, second):
            n.proc.send_signal(signal.SIGTERM)
            n.finish()

    def test_a_standalone_rdzv_server_serves_agents_that_do_not_host(self):
        server = self.start("rdzv-server", "--host=127.0.0.1", f"--port={self.port}", "--nnodes=2", "--rdzv_id=job42",
                            env=self.env(DTLAUNCH_RDZV_TOKEN="t0k"))
        server.wait_for("listening on 127.0.0.1", stream="err")
        env = self.env(DTLAUNCH_RDZV_TOKEN="t0k")
        nodes = [self.elastic("2", "--rdzv_conf=is_host=0", *self.worker("touch", self.tmp), env=env) for _ in range(2)]
        for n in nodes:
            r = n.finish()
            self.assertExitCode(r, 0)
            self.assertNotIn("hosting", r.stderr)
        self.assertEqual(sorted(os.listdir(self.tmp)), ["0", "1"])
        s = server.finish()
        self.assertExitCode(s, 0)
        self.assertIn("rendezvous: job over (exit code 0): every node finished", s.stderr)

    def test_a_standalone_rdzv_server_takes_the_agents_pet_variables(self):
        # PET_RDZV_TOKEN and PET_NNODES reach the server as they reach the agents: a server without
        # the token would refuse them ("this node has a ... but the rendezvous has none").
        server = self.start("rdzv-server", "--host=127.0.0.1", f"--port={self.port}", "--rdzv_id=job42",
                            env=self.env(PET_RDZV_TOKEN="t0k", PET_NNODES="2"))
        server.wait_for("listening on 127.0.0.1", stream="err")
        env = self.env(PET_RDZV_TOKEN="t0k")
        nodes = [self.elastic("2", "--rdzv_conf=is_host=0", *self.worker("touch", self.tmp), env=env) for _ in range(2)]
        for n in nodes:
            self.assertExitCode(n.finish(), 0)
        self.assertEqual(sorted(os.listdir(self.tmp)), ["0", "1"])
        s = server.finish()
        self.assertExitCode(s, 0)
        self.assertNotIn("any host that reaches this port can join", s.stderr)

    @unittest.skipUnless(have_torch(), "Debian's python3-torch is not installed")
    def test_a_pytorch_gloo_allreduce_spans_both_agents(self):
        script = write_allreduce_script(self.tmp)
        env = self.env(PYTHON_EXEC="/usr/bin/python3")
        nodes = [self.start("--nnodes=2", f"--node_rank={r}", f"--nproc_per_node={2 - r}", "--master_port",
                            self.port, script, env=env) for r in range(2)]
        results = [n.finish(timeout=180) for n in nodes]
        for r in results:
            self.assertExitCode(r, 0)
        out = results[0].stdout + results[1].stdout
        for rank in range(3):
            self.assertIn(f"rank={rank} world=3 sum=6", out)


if __name__ == "__main__":
    main()
