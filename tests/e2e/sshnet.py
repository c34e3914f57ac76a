"""SshCluster: OpenSSH servers in N node namespaces and one launcher namespace to ssh from, all on a
private bridge (netns.Network), with keys made for the run. What the ssh fan-out is tested and
benchmarked against.

    with SshCluster(3) as c:                      # as root; why_no_sshd() says why not
        c.run_in_launcher(["ssh", "-F", c.config, c.hosts[0], "true"])
        argv = c.launcher_argv([DTLAUNCH, *c.fanout_args(DTLAUNCH), "--nproc_per_node=2", "x.py"])
        assert not c.wait_clean(timeout=5)        # nothing but the sshd daemons left anywhere

Each node namespace n0..n<N-1> runs `/usr/sbin/sshd -D -e -f <its own config>` on port 22 of its
own address, with its own host key; root logs in with the client key (c.config) only. c.wrong_config
is the same client with a key that no node accepts, c.unreachable an address nobody has. The remote
side gets sshd's default PATH and none of the client's environment (no SendEnv, no AcceptEnv), so
remote commands name programs by absolute path."""
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest

from netns import Network, NetworkError, delete_stale_namespaces, why_no_netns

SSHD = "/usr/sbin/sshd"
LAUNCHER = "l"


def started_or_skip(nodes, name, script_name, script):
    """For a test class's setUpClass: a started SshCluster and a fresh folder holding `script` as
    `script_name`, or unittest.SkipTest with the reason the network could not be built."""
    try:
        cluster = SshCluster(nodes, name=name).start()
    except (NetworkError, RuntimeError, subprocess.TimeoutExpired) as e:
        raise unittest.SkipTest(f"cannot build the test network with sshd: {e}")
    folder = tempfile.mkdtemp(prefix=f"dtl-ssh{name}-")
    path = os.path.join(folder, script_name)
    with open(path, "w") as f:
        f.write(script)
    return cluster, folder, path


def why_no_sshd():
    """The reason an SshCluster cannot run here, or None."""
    reason = why_no_netns()
    if reason:
        return reason
    if not os.access(SSHD, os.X_OK) or not shutil.which("ssh") or not shutil.which("ssh-keygen"):
        return "OpenSSH's server or client is not installed (scripts/setup.sh installs openssh-server)"
    return None


def _openssh_version():
    r = subprocess.run(["ssh", "-V"], capture_output=True, text=True, timeout=10)
    m = re.search(r"OpenSSH_(\d+)\.(\d+)", r.stderr + r.stdout)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


class _Sshd:
    """One sshd in one namespace; its log lines are kept (sshd -e logs to stderr)."""

    def __init__(self, argv):
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, start_new_session=True)
        self.lines = []
        self.listening = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        with self.proc.stderr:
            for raw in iter(self.proc.stderr.readline, b""):
                line = raw.decode(errors="replace").rstrip("\n")
                self.lines.append(line)
                if line.startswith("Server listening on"):
                    self.listening.set()
        self.listening.set()  # exited: nobody waits on it any longer

    def log(self):
        return "\n".join(self.lines)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc.wait(timeout=10)
        self.reader.join(5)


class SshCluster:
    """N node namespaces with sshd, plus the launcher namespace. Attributes after start():
    hosts (node addresses, node i = hosts[i]), nodes (their names n0...), launcher_addr,
    unreachable, config / wrong_config (ssh -F files), key / wrong_key (private keys), tmp."""

    def __init__(self, n=3, name="s", port=22, connect_timeout=5):
        self.nodes = [f"n{i}" for i in range(n)]
        self.net = Network([*self.nodes, LAUNCHER], name=name)
        self.port = port
        self.connect_timeout = connect_timeout
        self.hosts = [self.net.addr[n] for n in self.nodes]
        self.launcher_addr = self.net.addr[LAUNCHER]
        self.unreachable = f"{self.net.subnet}.254"
        self.tmp = None
        self.sshd = {}

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # --- setting up ----------------------------------------------------------------------------

    def start(self, timeout=30):
        """Builds the network, makes the keys, starts every sshd and checks that `ssh true` works
        into each node from the launcher namespace; raises RuntimeError (having cleaned up) if not."""
        reason = why_no_sshd()
        if reason:
            raise RuntimeError(reason)
        delete_stale_namespaces()
        try:
            self.tmp = tempfile.mkdtemp(prefix="dtl-sshnet-")
            self.net.build()
            self._make_keys()
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory
            for n in self.nodes:
                self.sshd[n] = _Sshd(self.net.exec_argv(n, [SSHD, "-D", "-e", "-f", self._write_sshd_config(n)]))
            deadline = time.monotonic() + timeout
            for n, d in self.sshd.items():
                d.listening.wait(max(0.0, deadline - time.monotonic()))
                if d.proc.poll() is not None or not d.listening.is_set():
                    raise RuntimeError(f"sshd in {self.net.ns[n]} did not start listening:\n{d.log()}")
            self._check_logins(deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def _keygen(self, path, comment):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path],
                       check=True, capture_output=True, timeout=30)
        with open(path + ".pub") as f:
            return f.read().strip()

    def _make_keys(self):
        self.key = os.path.join(self.tmp, "client_key")
        self.wrong_key = os.path.join(self.tmp, "wrong_key")
        with open(os.path.join(self.tmp, "authorized_keys"), "w") as f:
            f.write(self._keygen(self.key, "dtlaunch-test-client") + "\n")
        self._keygen(self.wrong_key, "dtlaunch-test-unauthorized")
        host_at = (lambda a: a) if self.port == 22 else (lambda a: f"[{a}]:{self.port}")
        with open(os.path.join(self.tmp, "known_hosts"), "w") as f:
            for n in self.nodes:
                key_type, key_text = self._keygen(os.path.join(self.tmp, f"host_{n}"), n).split()[:2]
                f.write(f"{host_at(self.net.addr[n])} {key_type} {key_text}\n")
        self.config = self._write_client_config("ssh_config", self.key)
        self.wrong_config = self._write_client_config("ssh_config_wrong_key", self.wrong_key)

    def _write_client_config(self, name, key):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(f"Host *\n  User root\n  Port {self.port}\n  IdentityFile {key}\n  IdentitiesOnly yes\n"
                    f"  IdentityAgent none\n  UserKnownHostsFile {self.tmp}/known_hosts\n"
                    f"  GlobalKnownHostsFile /dev/null\n  StrictHostKeyChecking yes\n  UpdateHostKeys no\n"
                    f"  BatchMode yes\n  ConnectTimeout {self.connect_timeout}\n  ControlMaster no\n"
                    f"  ControlPath none\n")
        return path

    def _write_sshd_config(self, node):
        path = os.path.join(self.tmp, f"sshd_config_{node}")
        extra = "PerSourcePenalties no\n" if _openssh_version() >= (9, 8) else ""  # refused keys are tested
        with open(path, "w") as f:
            f.write(f"Port {self.port}\nListenAddress {self.net.addr[node]}\nHostKey {self.tmp}/host_{node}\n"
                    f"PidFile {self.tmp}/sshd_{node}.pid\nAuthorizedKeysFile {self.tmp}/authorized_keys\n"
                    f"PermitRootLogin yes\nStrictModes no\nUsePAM no\nPubkeyAuthentication yes\n"
                    f"PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitUserEnvironment no\n"
                    f"X11Forwarding no\nPrintMotd no\nPrintLastLog no\nMaxStartups 100:30:200\n{extra}")
        return path

    def _check_logins(self, deadline):
        checks = {h: subprocess.Popen(self.launcher_argv(["ssh", "-F", self.config, h, "true"]),
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                  for h in self.hosts}
        failed = []
        for h, p in checks.items():
            try:
                _, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                _, err = p.communicate()
            if p.returncode != 0:
                failed.append(f"{h}: exit {p.returncode}: {err.decode(errors='replace').strip()}")
        if failed:
            raise RuntimeError("ssh into the test nodes fails: " + "; ".join(failed))

    # --- using it --------------------------------------------------------------------------------

    def ns(self, node_or_addr):
        """The namespace of a node, by name (n0, l) or address."""
        for n, a in self.net.addr.items():
            if node_or_addr in (n, a):
                return self.net.ns[n]
        raise KeyError(node_or_addr)

    def launcher_argv(self, argv):
        """argv run in the launcher namespace (exec'ed in place: the pid is argv's)."""
        return self.net.exec_argv(LAUNCHER, argv)

    def run_in_launcher(self, argv, timeout=30, **kwargs):
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        if "input" not in kwargs:
            kwargs.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.run(self.launcher_argv(argv), timeout=timeout, **kwargs)

    def ssh(self, host, *command, config=None, timeout=30, **kwargs):
        """`ssh -F config host command...` from the launcher namespace; a CompletedProcess."""
        return self.run_in_launcher(["ssh", "-F", config or self.config, host, *map(str, command)], timeout=timeout,
                                    **kwargs)

    def ssh_command(self, wrong_key=False):
        """The --ssh_command value: ssh with this cluster's client config."""
        return f"ssh -F {self.wrong_config if wrong_key else self.config}"

    def hostfile(self, slots=2, hosts=None, name="hostfile"):
        """A DeepSpeed hostfile (`host slots=N`, or a bare `host` with slots=None) of hosts (default:
        every node); returns its path."""
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            for h in hosts or self.hosts:
                f.write(f"{h} slots={slots}\n" if slots is not None else f"{h}\n")
        return path

    def fanout_args(self, remote_dtlaunch, slots=2, hosts=None, wrong_key=False):
        """dtlaunch's ssh fan-out flags for these hosts."""
        return ["--hostfile", self.hostfile(slots, hosts), "--ssh_command", self.ssh_command(wrong_key),
                "--remote_dtlaunch", os.path.realpath(remote_dtlaunch)]

    def pids(self, node_or_addr):
        """Processes in one namespace now (`ip netns pids`), sshd daemons included."""
        r = subprocess.run(["ip", "netns", "pids", self.ns(node_or_addr)], capture_output=True, text=True,
                           timeout=30)
        return [int(p) for p in r.stdout.split()]

    def leftovers(self):
        """{node: [(pid, command line)]} of every process in a node or launcher namespace other than
        the sshd daemons themselves: what a finished case must not leave."""
        daemons = {d.proc.pid for d in self.sshd.values()}
        found = {}
        for n in self.net.nodes:
            left = [(p, _cmdline(p)) for p in self.pids(n) if p not in daemons]
            if left:
                found[n] = left
        return found

    def wait_for_process(self, node_or_addr, pattern, timeout=10.0):
        """The pid of a process whose command line matches pattern in one namespace, once there is
        one, or None after timeout. Polls every 20 ms: nothing signals a process entering a namespace."""
        deadline = time.monotonic() + timeout
        while True:
            found = [p for p in self.pids(node_or_addr) if re.search(pattern, _cmdline(p))]
            if found or time.monotonic() >= deadline:
                return found[0] if found else None
            time.sleep(0.02)

    def wait_clean(self, timeout=5.0):
        """Waits (on pidfds, no polling) until leftovers() is empty or timeout; returns what is left."""
        deadline = time.monotonic() + timeout
        while True:
            left = self.leftovers()
            if not left or time.monotonic() >= deadline:
                return left
            fds = []
            for pid, _ in (x for v in left.values() for x in v):
                try:
                    fds.append(os.pidfd_open(pid))
                except ProcessLookupError:
                    pass
            try:
                if fds:  # wakes when one exits; a process started meanwhile is seen on the next pass
                    select.select(fds, [], [], min(0.5, max(0.0, deadline - time.monotonic())))
            finally:
                for fd in fds:
                    os.close(fd)

    def kill_leftovers(self):
        """SIGKILLs every leftover (all in this cluster's namespaces); returns what was there."""
        left = self.leftovers()
        for pid, _ in (x for v in left.values() for x in v):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return left

    def sshd_log(self, node_or_addr):
        node = next(n for n in self.nodes if node_or_addr in (n, self.net.addr[n]))
        return self.sshd[node].log()

    def stop(self):
        """Kills what is left in the namespaces, stops each sshd by its pid, deletes the namespaces
        and the key directory. Safe to call twice, and after a failed start()."""
        try:
            self.kill_leftovers()
        finally:
            for d in self.sshd.values():
                d.stop()
            self.sshd = {}
            self.net.delete()
            if self.tmp:
                shutil.rmtree(self.tmp, ignore_errors=True)
