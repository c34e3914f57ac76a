"""The rendezvous host against peers that never prove the token: stalled
connections past the fd limit while a correct node joins, console injection through a run id,
refusals that say nothing about the job, aggregated refusal lines, and an exit that does not wait
for them."""
import os
import resource
import select
import signal
import socket
import struct
import threading
import time

from common import DTLAUNCH, LaunchTest, Running, free_port, main, poll_until

def fd_limits(pid):
    """(soft, hard) RLIMIT_NOFILE of a live process."""
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max open files"):
                soft, hard = line.split()[3:5]
                return int(soft), int(hard)
    raise AssertionError("no 'Max open files' in /proc/PID/limits")


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def frame(message_type, payload):
    """A rendezvous frame: 4-byte big-endian body length, version 1, type, payload."""
    body = bytes([1, message_type]) + payload
    return struct.pack(">I", len(body)) + body


def hello(run_id):
    """A Hello (type 1): the run id, then a 32-byte nonce, each length-prefixed."""
    raw = run_id.encode()
    return frame(1, struct.pack(">I", len(raw)) + raw + struct.pack(">I", 32) + bytes(32))


def join(proof):
    """A Join (type 3) with the given proof, as node 1 of 2 would send it."""
    def text(s):
        return struct.pack(">I", len(s)) + s.encode()
    return frame(3, struct.pack(">I", len(proof)) + proof + text("intruder") + text("") +
                 struct.pack(">iiiiiiQ", 1, -1, 40000, 0, 2, 2, 7))


def read_exactly(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def read_frame(sock, timeout=10):
    """(version, type, payload) of the next frame."""
    sock.settimeout(timeout)
    size = struct.unpack(">I", read_exactly(sock, 4))[0]
    body = read_exactly(sock, size)
    return body[0], body[1], body[2:]


def read_refusal(sock, timeout=10):
    """The reason of the Refused (type 4) the server answers with, or None when it closes without one."""
    try:
        _, kind, payload = read_frame(sock, timeout)
    except (ConnectionError, socket.timeout):
        return None
    if kind != 4:
        return None
    size = struct.unpack(">I", payload[:4])[0]
    return payload[4:4 + size].decode(errors="replace")


class Stalled:
    """TCP connections to the rendezvous that send nothing, as a peer stalled in the handshake, from
    several loopback source addresses (127.0.0.2...), spread evenly. `keep_up` reopens each one the
    server closes, in a thread, so the pressure lasts while a node joins."""

    def __init__(self, port, sources):
        self.port = port
        self.sources = sources
        self.socks = {}
        self.closed = 0
        self.opened = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = None

    def _open_one(self):
        source = self.sources[self.opened % len(self.sources)]
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((source, 0))
        s.settimeout(5)
        try:
            s.connect(("127.0.0.1", self.port))
        except OSError:
            s.close()
            return
        s.setblocking(False)
        self.socks[s.fileno()] = s
        self.opened += 1

    def open(self, n):
        with self.lock:
            for _ in range(n):
                self._open_one()

    def _reap(self, timeout):
        """Closes the connections the server closed; returns how many."""
        poller = select.poll()
        with self.lock:
            for fd in self.socks:
                poller.register(fd, select.POLLIN | select.POLLRDHUP)
        gone = 0
        for fd, _ in poller.poll(timeout * 1000):
            with self.lock:
                s = self.socks.get(fd)
                if s is None:
                    continue
                try:
                    if s.recv(4096):
                        continue
                except BlockingIOError:
                    continue
                except OSError:
                    pass
                del self.socks[fd]
                s.close()
                self.closed += 1
                gone += 1
        return gone

    def wait_closed(self, count, timeout):
        """Waits until the server has closed `count` of them; False if it did not in time."""
        deadline = time.monotonic() + timeout
        while self.closed < count:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._reap(min(left, 0.5))
        return True

    def keep_up(self):
        def run():
            while not self.stop.is_set():
                gone = self._reap(0.1)
                if gone:
                    self.open(gone)

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def close(self):
        self.stop.set()
        if self.thread:
            self.thread.join(timeout=10)
        with self.lock:
            for s in self.socks.values():
                s.close()
            self.socks.clear()


class RendezvousUnderAttack(LaunchTest):
    TOKEN = "s3cret"

    def setUp(self):
        super().setUp()
        self.port = free_port()
        self.attacks = []
        self.started = []

    def tearDown(self):
        for a in self.attacks:
            a.close()
        for r in self.started:  # a test that failed half-way leaves no dtlaunch behind
            if r.proc.poll() is None:
                r.proc.kill()
                r.proc.wait()
        super().tearDown()

    def run_dtlaunch(self, args, env=None):
        r = Running(args, env or self.env())
        self.started.append(r)
        return r

    def attack(self, sources):
        a = Stalled(self.port, sources)
        self.attacks.append(a)
        return a

    def node(self, rank, command, fd_limit=None, extra=()):
        """A node of a static 2-node job; `command`: what follows dtlaunch's flags."""
        args = [DTLAUNCH, "--nnodes=2", f"--node_rank={rank}", "--nproc_per_node=1", "--master_addr=127.0.0.1",
                f"--master_port={self.port}", *extra, *command]
        if fd_limit:
            args = ["prlimit", f"--nofile={fd_limit[0]}:{fd_limit[1]}", *args]
        return self.run_dtlaunch(args, self.env(DTLAUNCH_RDZV_TOKEN=self.TOKEN))

    def test_a_node_joins_while_stalled_connections_outnumber_the_hosts_fd_limit(self):
        # Soft 64, hard 256: today's host stays at 64, and 400 stalled connections exhaust it.
        worker = ["--no_python", "/bin/sh", "-c", f"ulimit -Sn > {self.tmp}/fd_limit; ls -l /proc/self/fd > {self.tmp}/fds; : > {self.tmp}/$RANK"]
        host = self.node(0, worker, fd_limit=(64, 256))
        host.wait_for(r"joined \(1 of 2 nodes\)", stream="err")
        limits = fd_limits(host.proc.pid)
        attackers = self.attack([f"127.0.0.{i}" for i in range(2, 10)])
        started = time.monotonic()
        attackers.open(400)
        self.assertGreaterEqual(attackers.opened, 300)
        # Past the caps (a quarter of the fd limit in all, 16 per address) they are closed at once.
        self.assertTrue(attackers.wait_closed(attackers.opened - 64, timeout=10),
                        f"the host closed only {attackers.closed} of {attackers.opened} stalled connections")
        attackers.keep_up()
        one = self.node(1, self.worker("touch", self.tmp))
        r1 = one.finish(timeout=60)
        self.assertExitCode(r1, 0)
        # Reaped after node 1, so the children's CPU time grows by the host's alone.
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        r0 = host.finish(timeout=30)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall = time.monotonic() - started
        attackers.close()
        self.assertExitCode(r0, 0)
        self.assertEqual(sorted(os.listdir(self.tmp)), ["0", "1", "fd_limit", "fds"])
        # A host that spins on accept() burns a core; this one works only when a connection comes.
        cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        self.assertLess(cpu, 0.5 + 0.25 * wall, f"the host used {cpu:.2f} s of CPU in {wall:.2f} s")
        self.assertNotIn("still connected", r0.stderr)
        self.assertLess(r0.stderr.count("\n"), 20, r0.stderr)
        self.assertRegex(r0.stderr, r"rendezvous: \d+ more connections from peers that did not prove the token ended "
                                    r"in the last \d+ s: .*over the connection limits; from 8 addresses")
        # The host raised its soft limit to the hard one for its peers; its worker got 64 back.
        self.assertEqual(limits, (256, 256))
        with open(os.path.join(self.tmp, "fd_limit")) as f:
            self.assertEqual(f.read().strip(), "64", r0.stderr)
        # Nor did it inherit the rendezvous' sockets: the listener, the members', the attackers'.
        with open(os.path.join(self.tmp, "fds")) as f:
            self.assertNotIn("socket:", f.read())

    def test_a_run_id_that_would_forge_a_log_line_is_escaped_and_refusals_name_nothing_of_the_job(self):
        token_file = os.path.join(self.tmp, "secret-token-file")
        with open(token_file, "w") as f:
            f.write(self.TOKEN)
        os.chmod(token_file, 0o600)
        host = self.run_dtlaunch([DTLAUNCH, "--nnodes=2", "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{self.port}",
                        "--rdzv_id=job42", "--rdzv_conf=join_timeout=3", f"--rdzv_token_file={token_file}",
                        *self.worker("pause")])
        host.wait_for(r"joined \(1 of 2 nodes\)", stream="err")
        with socket.create_connection(("127.0.0.1", self.port)) as s:
            s.sendall(hello("x\ndtlaunch: info: forged\x1b[2J"))
            told = read_refusal(s)
        self.assertEqual(told, "run id 'x\\ndtlaunch: info: forged\\x1b[2J' does not match the job's run id")
        with socket.create_connection(("127.0.0.1", self.port)) as s:
            s.sendall(hello("job42"))
            self.assertEqual(read_frame(s)[1], 2)  # a challenge
            s.sendall(join(proof=bytes(32)))
            told_join = read_refusal(s)
        self.assertEqual(told_join, "authentication failed: wrong token")
        r = host.finish()
        self.assertExitCode(r, 1)
        self.assertNotIn("\ndtlaunch: info: forged", r.stderr)
        self.assertNotIn("\x1b", r.stderr)
        self.assertIn("rendezvous: refused 127.0.0.1: run id 'x\\ndtlaunch: info: forged\\x1b[2J' does not match the "
                      "job's 'job42'", r.stderr)

    def test_a_flood_of_refused_peers_is_summed_up_instead_of_a_line_each(self):
        host = self.node(0, self.worker("pause"), extra=["--rdzv_conf=timeout=3"])
        host.wait_for(r"joined \(1 of 2 nodes\)", stream="err")
        for _ in range(300):
            with socket.create_connection(("127.0.0.1", self.port)) as s:
                s.sendall(hello("guess"))
                self.assertIsNotNone(read_refusal(s))
        r = host.finish()
        self.assertExitCode(r, 1)
        self.assertEqual(r.stderr.count("rendezvous: refused 127.0.0.1: run id 'guess'"), 1, r.stderr)
        self.assertRegex(r.stderr, r"rendezvous: 299 more connections from peers that did not prove the token ended "
                                   r"in the last \d+ s: 299 refused; from 127\.0\.0\.1\n")
        self.assertLess(r.stderr.count("\n"), 20, r.stderr)

    def test_the_host_leaves_at_once_though_stalled_peers_are_still_connected(self):
        host = self.node(0, self.worker("pause"))
        one = self.node(1, self.worker("pause"))
        for n in (host, one):
            n.wait_for("ready rank")
        fds = open_fds(host.proc.pid)
        attackers = self.attack(["127.0.0.2"])
        attackers.open(5)
        # Accepting logs nothing: the host's descriptors show when it holds them.
        self.assertTrue(poll_until(lambda: open_fds(host.proc.pid) >= fds + 5, timeout=10))
        started = time.monotonic()
        host.proc.send_signal(signal.SIGTERM)
        r0 = host.finish(timeout=30)
        took = time.monotonic() - started
        self.assertExitCode(r0, 128 + signal.SIGTERM)
        self.assertNotIn("still connected", r0.stderr)
        # Today's host waits 5 s for every connection, members or not, to hang up.
        self.assertLess(took, 3, r0.stderr)
        self.assertExitCode(one.finish(), 1)

if __name__ == "__main__":
    main()
