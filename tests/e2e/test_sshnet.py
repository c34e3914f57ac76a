"""The SshCluster fixture (sshnet.py) itself: real OpenSSH servers in three node namespaces, reached
from a launcher namespace with keys made by the test. Checked here so that the ssh fan-out's tests
stand on a known floor: each login lands in its own node's namespace, a wrong key and an address
with no host fail the way ssh fails, the client's environment does not reach the remote side, and
leftovers() sees what a case leaves behind.

Needs root, iproute2 and openssh-server (scripts/setup.sh installs them); skipped with the reason
otherwise."""
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest

from common import main
from netns import NetworkError, delete_stale_namespaces, ip
from sshnet import SshCluster, why_no_sshd


def start_cluster(n, name):
    try:
        return SshCluster(n, name=name).start()
    except (NetworkError, subprocess.TimeoutExpired) as e:
        raise unittest.SkipTest(f"cannot build the test network (ip netns, veth, bridge): {e}")


@unittest.skipIf(why_no_sshd(), why_no_sshd())
class SshNet(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = start_cluster(3, "s")

    @classmethod
    def tearDownClass(cls):
        cls.c.stop()

    def tearDown(self):
        left = self.c.wait_clean(timeout=5)
        self.c.kill_leftovers()
        self.assertEqual(left, {}, "processes left in the namespaces after the test")

    def test_each_login_lands_in_its_own_nodes_namespace_with_its_address(self):
        for node, host in zip(self.c.nodes, self.c.hosts):
            r = self.c.ssh(host, "hostname -I; readlink /proc/$$/ns/net; ip -o -4 addr show dev eth0")
            self.assertEqual(r.returncode, 0, r.stderr)
            addrs, netns, eth0 = r.stdout.splitlines()
            self.assertEqual(addrs.split(), [host])
            self.assertEqual(netns, os.readlink(f"/proc/{self.c.sshd[node].proc.pid}/ns/net"))
            self.assertIn(f"inet {host}/24", eth0)

    def test_the_logins_come_from_the_launcher_namespace_address(self):
        r = self.c.ssh(self.c.hosts[1], "echo $SSH_CLIENT")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split()[0], self.c.launcher_addr)
        self.assertNotIn(self.c.launcher_addr, self.c.hosts)

    def test_a_key_that_no_node_accepts_is_refused(self):
        for host in self.c.hosts:
            r = self.c.ssh(host, "true", config=self.c.wrong_config)
            self.assertEqual(r.returncode, 255)
            self.assertIn("Permission denied (publickey)", r.stderr)
        self.assertEqual(self.c.ssh(self.c.hosts[0], "true").returncode, 0)

    def test_an_address_with_no_host_fails_within_the_connect_timeout(self):
        started = time.monotonic()
        r = self.c.ssh(self.c.unreachable, "true")
        took = time.monotonic() - started
        self.assertEqual(r.returncode, 255)
        self.assertRegex(r.stderr, rf"connect to host {re.escape(self.c.unreachable)} port 22: "
                                   r"(No route to host|Connection timed out)")
        self.assertLess(took, self.c.connect_timeout + 3)

    def test_the_clients_environment_does_not_reach_the_remote_side(self):
        env = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "PYTHONPATH": "/dtl-sentinel", "NCCL_DEBUG": "INFO",
               "DTL_SENTINEL": "1", "LANG": "C.UTF-8"}
        r = self.c.ssh(self.c.hosts[0], "env", env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        remote = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
        for name in ("PYTHONPATH", "NCCL_DEBUG", "DTL_SENTINEL", "LANG"):
            self.assertNotIn(name, remote)
        self.assertNotEqual(remote["PATH"], env["PATH"])  # sshd's default, or the remote login's own

    def test_the_host_keys_are_checked(self):
        # a known_hosts without the nodes' keys: StrictHostKeyChecking refuses, BatchMode does not ask
        config = os.path.join(self.c.tmp, "ssh_config_no_known_hosts")
        with open(self.c.config) as f, open(config, "w") as out:
            out.write(f.read().replace(f"{self.c.tmp}/known_hosts", "/dev/null"))
        r = self.c.ssh(self.c.hosts[0], "true", config=config)
        self.assertEqual(r.returncode, 255)
        self.assertIn("Host key verification failed", r.stderr)

    def test_a_remote_process_left_behind_by_a_dead_client_is_a_leftover(self):
        # No tty: killing the client does not reach the remote command (what the fan-out must handle).
        client = subprocess.Popen(self.c.launcher_argv(["ssh", "-F", self.c.config, self.c.hosts[2], "exec sleep 60"]),
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            self.assertIsNotNone(self.c.wait_for_process("n2", r"^sleep 60$"))
            left = self.c.leftovers()
            self.assertIn("sleep 60", str(left.get("n2")))
            self.assertIn(client.pid, [pid for pid, _ in left.get("l", [])])
            self.assertNotIn("n0", left)
        finally:
            client.kill()
            client.wait(timeout=10)
        left = self.c.wait_clean(timeout=1)
        self.assertIn("sleep 60", str(left.get("n2")))
        self.assertNotIn("l", left)
        self.c.kill_leftovers()
        self.assertEqual(self.c.wait_clean(timeout=5), {})

    def test_stdin_reaches_the_remote_command(self):
        r = self.c.ssh(self.c.hosts[0], "cat", input="token-a1b2\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "token-a1b2\n")

    def test_a_remote_command_sees_the_end_of_its_stdin_when_the_client_dies(self):
        # What a remote agent can watch instead of a hang-up signal that never comes without a tty.
        marker = os.path.join(tempfile.mkdtemp(prefix="dtl-sshnet-eof-"), "eof")
        self.addCleanup(shutil.rmtree, os.path.dirname(marker), True)
        client = subprocess.Popen(self.c.launcher_argv(["ssh", "-F", self.c.config, self.c.hosts[1],
                                                        f"cat >/dev/null; echo eof > {marker}"]),
                                  stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            self.assertIsNotNone(self.c.wait_for_process("n1", r"^cat$"))
        finally:
            client.kill()
            client.wait(timeout=10)
            client.stdin.close()
        self.assertEqual(self.c.wait_clean(timeout=5), {})
        with open(marker) as f:
            self.assertEqual(f.read(), "eof\n")

    def test_hostfile_writes_deepspeed_lines_of_node_addresses(self):
        with open(self.c.hostfile(slots=2)) as f:
            self.assertEqual(f.read(), "".join(f"{h} slots=2\n" for h in self.c.hosts))
        with open(self.c.hostfile(slots=None, hosts=self.c.hosts[:2])) as f:
            self.assertEqual(f.read(), f"{self.c.hosts[0]}\n{self.c.hosts[1]}\n")
        args = self.c.fanout_args("/usr/bin/true", slots=4)
        self.assertEqual(args[2:], ["--ssh_command", f"ssh -F {self.c.config}", "--remote_dtlaunch", "/usr/bin/true"])


@unittest.skipIf(why_no_sshd(), why_no_sshd())
class SshNetTeardown(unittest.TestCase):
    def test_stop_ends_every_sshd_and_session_and_deletes_the_namespaces(self):
        c = start_cluster(2, "t")
        try:
            daemons = [d.proc.pid for d in c.sshd.values()]
            session = subprocess.Popen(c.launcher_argv(["ssh", "-F", c.config, c.hosts[0], "exec sleep 60"]),
                                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.assertIsNotNone(c.wait_for_process(c.hosts[0], r"^sleep 60$"))
        finally:
            c.stop()
        session.wait(timeout=10)
        namespaces = ip("netns", "list").stdout
        for ns in [*c.net.ns.values(), c.net.bridge_ns]:
            self.assertNotRegex(namespaces, rf"(?m)^{ns}\b")
        for pid in daemons:
            self.assertFalse(os.path.exists(f"/proc/{pid}"), f"sshd {pid} still running")
        self.assertFalse(os.path.exists(c.tmp))
        c.stop()  # twice is harmless

    def test_stale_namespaces_are_those_of_processes_that_are_gone(self):
        dead = subprocess.Popen(["true"])
        dead.wait()
        names = {"dead": f"dtl{dead.pid}zstale", "live": f"dtl{os.getpid()}zlive"}
        try:
            for name in names.values():
                ip("netns", "add", name)
            delete_stale_namespaces()
            namespaces = ip("netns", "list").stdout
            self.assertNotRegex(namespaces, rf"(?m)^{names['dead']}\b")
            self.assertRegex(namespaces, rf"(?m)^{names['live']}\b")
        finally:
            for name in names.values():
                ip("netns", "del", name, check=False)


if __name__ == "__main__":
    main()
