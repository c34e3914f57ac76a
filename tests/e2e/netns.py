"""Private networks of network namespaces for the tests and benchmarks: N node namespaces, each with
eth0 = SUBNET.{1,2,...}/24 (no default route: nothing leaves the subnet), whose veth peer is a port
of br0 in one more namespace. The host's network is never touched.

Namespaces are named dtl<pid><name><node> (the bridge: dtl<pid><name>br) after the process that made
them, so that one left by a run that died is recognised and deleted by the next
(delete_stale_namespaces), with what still runs in it. A node can have an /etc/hosts of its own
(write_hosts), which `ip netns exec` mounts. Needs root and iproute2 (scripts/setup.sh installs it)."""
import os
import re
import shutil
import signal
import subprocess
import time
import unittest

STALE_NAME = re.compile(r"^dtl(\d+)[a-z]")


class NetworkError(RuntimeError):
    """An `ip` command failed: no namespaces here (a container without CAP_NET_ADMIN, say)."""


def ip(*args, check=True):
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def why_no_netns():
    """The reason network namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return f"needs root to create network namespaces (running as uid {os.geteuid()}); CI runs as root"
    if not shutil.which("ip"):
        return "iproute2's 'ip' is not installed (scripts/setup.sh installs it)"
    return None


def _started_at(pid):
    """Wall-clock start time of a live process (s), or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def stop(pid, timeout=10):
    """SIGTERM, then SIGKILL; reaps it when it is our child."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    return
            except ChildProcessError:  # not ours (a daemon that forked, a dead run's): poll for it
                if not os.path.exists(f"/proc/{pid}"):
                    return
            time.sleep(0.05)


def _delete(name):
    ip("netns", "del", name, check=False)
    shutil.rmtree(f"/etc/netns/{name}", ignore_errors=True)


def delete_stale_namespaces():
    """Deletes every dtl<pid>... namespace whose process is gone: no process <pid>, or one started
    after the namespace was made (the pid was reused, ours included); what still runs in it is
    stopped first (a daemon of a run that died), and its /etc/netns folder goes with it. A namespace
    file's times are its creation time."""
    for line in ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = STALE_NAME.match(name)
        if not m:
            continue
        started = _started_at(int(m.group(1)))
        try:
            made = os.stat(f"/run/netns/{name}").st_mtime
        except OSError:
            made = 0.0
        if started is not None and started <= made + 1.0:  # btime has a resolution of 1 s
            continue  # a live run's own
        for pid in ip("netns", "pids", name, check=False).stdout.split():
            stop(int(pid), timeout=2)
        _delete(name)


class Network:
    """Node namespaces on one bridge. ns[node] and addr[node] by node name (a short lowercase word,
    not 'br'); exec_argv() runs a command in a node's namespace."""

    def __init__(self, nodes, name="", subnet=None):
        self.nodes = list(nodes)
        prefix = f"dtl{os.getpid()}{name}"
        self.ns = {n: prefix + n for n in self.nodes}
        self.bridge_ns = prefix + "br"
        self.subnet = subnet or f"10.231.{os.getpid() % 250 + 1}"
        self.addr = {n: f"{self.subnet}.{i + 1}" for i, n in enumerate(self.nodes)}
        if len(self.nodes) > 250 or len(set(self.ns.values())) != len(self.nodes) or "br" in self.nodes:
            raise ValueError(f"bad node names: {self.nodes}")

    def build(self):
        """Makes the namespaces, or raises NetworkError / TimeoutExpired after deleting what it made."""
        try:
            ip("netns", "add", self.bridge_ns)
            ip("-n", self.bridge_ns, "link", "set", "lo", "up")
            ip("-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
            ip("-n", self.bridge_ns, "link", "set", "br0", "up")
            for n in self.nodes:
                ip("netns", "add", self.ns[n])
                ip("-n", self.bridge_ns, "link", "add", self.port(n), "type", "veth", "peer", "name", "eth0",
                   "netns", self.ns[n])
                ip("-n", self.bridge_ns, "link", "set", self.port(n), "master", "br0", "up")
                ip("-n", self.ns[n], "link", "set", "lo", "up")
                ip("-n", self.ns[n], "addr", "add", f"{self.addr[n]}/24", "dev", "eth0")
                ip("-n", self.ns[n], "link", "set", "eth0", "up")
        except BaseException:
            self.delete()
            raise
        return self

    def delete(self):
        """Deletes the namespaces (a namespace lives on while a process is still in it) and their
        /etc/netns folders."""
        for name in [*self.ns.values(), self.bridge_ns]:
            _delete(name)

    def hosts_path(self, node):
        """node's own /etc/hosts, which `ip netns exec` mounts on /etc/hosts (after write_hosts)."""
        return f"/etc/netns/{self.ns[node]}/hosts"

    def write_hosts(self, names):
        """Gives every node the same /etc/hosts: localhost, and each node's address with its names
        in names[node] (a list; nodes not in names are left out)."""
        text = "127.0.0.1 localhost\n" + "".join(f"{self.addr[n]} {' '.join(names[n])}\n" for n in names)
        for n in self.nodes:
            os.makedirs(os.path.dirname(self.hosts_path(n)), exist_ok=True)
            with open(self.hosts_path(n), "w") as f:
                f.write(text)

    @staticmethod
    def port(node):
        """The bridge's port (in the bridge namespace) that node's eth0 is cabled to."""
        return f"v{node}"

    def exec_argv(self, node, argv):
        """argv run in node's namespace; `ip netns exec` execs it in place, so the pid is argv's."""
        return ["ip", "netns", "exec", self.ns[node], *map(str, argv)]

    def pids(self, node):
        """Processes in node's namespace now."""
        r = ip("netns", "pids", self.ns[node], check=False)
        return [int(p) for p in r.stdout.split()]


def build_for_tests(net):
    """Builds `net` for a test class's setUpClass, after deleting what dead runs left; a machine that
    cannot build one (no root, no ip, no veth or bridge) skips the class."""
    delete_stale_namespaces()
    try:
        net.build()
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        raise unittest.SkipTest(f"cannot build the test network (ip netns, veth, bridge): {e}")
