"""dtlaunch's c10d store (store/) against real torch clients, served alone by tests/helpers/store_server:
every TCPStore operation the version has, a 4-rank gloo process group with barrier and
monitored_barrier, and hostile clients (garbage, a huge length, a wait that never ends, 1000 stalled
connections) while a real job runs. Each test runs with every torch found (common.torch_pythons:
Debian's 1.13, a 2.x venv); none found: skipped (77)."""
import os
import resource
import select
import socket
import struct
import subprocess
import unittest

from common import HERE, main, torch_pythons

STORE_SERVER = os.environ.get("STORE_SERVER", os.path.join(HERE, "../../build/tests/store_server"))
PYTHONS = torch_pythons()

# Every operation of torch's TCPStore client that the version has, checked against what torch's own
# server answers.
OPS_SCRIPT = r"""
import datetime, sys, threading, time, torch, torch.distributed as dist
host, port = sys.argv[1], int(sys.argv[2])
td = datetime.timedelta
def store():
    return dist.TCPStore(host, port, None, False, td(seconds=20))
s = store()
s.set("k", "v"); assert s.get("k") == b"v"
assert s.add("c", 3) == 3 and s.add("c", -1) == 2 and s.get("c") == b"2"
assert s.compare_set("k", "v", "w") == b"w"
assert s.compare_set("k", "nope", "x") == b"w"
assert s.compare_set("absent", "x", "y") == b"x"
assert s.compare_set("absent", "", "y") == b"y"
assert s.num_keys() >= 3, s.num_keys()
if hasattr(s, "check"):
    assert s.check(["k"]) and not s.check(["nope"])
assert s.delete_key("absent") and not s.delete_key("absent")
# a wait released by another client's set
t = threading.Thread(target=lambda: (time.sleep(0.2), store().set("later", "1")))
t.start(); s.wait(["later"]); t.join()
# a wait that times out (on a store of its own: 1.13 cancels nothing, its connection is spent)
w = store(); t0 = time.monotonic()
try:
    w.wait(["never"], td(milliseconds=300)); raise SystemExit("wait did not time out")
except RuntimeError as e:
    assert time.monotonic() - t0 < 5, "wait took too long"
    print("wait timed out:", type(e).__name__)
if hasattr(w, "append"):  # 2.x: CANCEL_WAIT leaves the connection usable
    w.set("after", "ok"); assert w.get("after") == b"ok"
if hasattr(s, "append"):
    s.append("a", "x"); s.append("a", "y"); assert s.get("a") == b"xy"
    s.multi_set(["m1", "m2"], ["1", "2"]); assert s.multi_get(["m1", "m2"]) == [b"1", b"2"]
if hasattr(s, "queue_push"):
    s.queue_push("q", "x"); assert s.queue_len("q") == 1; assert s.queue_pop("q") == b"x"
if hasattr(s, "list_keys"):  # 2.15: LIST_KEYS, the client keeps its prefix's keys
    keys = s.list_keys(); assert {"k", "c", "a", "m1", "later"} <= set(keys), keys
if hasattr(s, "barrier"):  # 2.15: BARRIER, the last of world_size arrivals releases the others
    # the first arrival's outcome, kept: an exception ends its thread too, which is no release
    released = []
    t = threading.Thread(target=lambda: (store().barrier("bar", 2), released.append(True))); t.start()
    time.sleep(0.2); assert t.is_alive(), "a barrier of 2 returned with 1 arrival"
    s.barrier("bar", 2); t.join(10)
    assert released == [True], "the barrier's first arrival was not released (see its thread's error above)"
print("ALL OK", torch.__version__)
"""

# A rank of a gloo process group whose every rank is a client of the store at host:port, as
# dtlaunch's workers are with TORCHELASTIC_USE_AGENT_STORE=True.
GLOO_SCRIPT = r"""
import datetime, os, sys, torch, torch.distributed as dist
host, port, rank, world = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
os.environ.update(TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RESTART_COUNT="0",
                  MASTER_ADDR=host, MASTER_PORT=str(port))
dist.init_process_group("gloo", init_method=f"tcp://{host}:{port}", rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=60))
t = torch.tensor([rank + 1.0]); dist.all_reduce(t)
assert t.item() == world * (world + 1) / 2, t
dist.barrier()
if hasattr(dist, "monitored_barrier"):
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=30))
print(f"rank {rank} ok sum={int(t.item())}", flush=True)
dist.destroy_process_group()
"""


# torch's own server, in the python under test: the oracle for OPS_SCRIPT's expectations.
TORCH_SERVER = r"""
import datetime, sys, torch.distributed as dist
s = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=60), wait_for_workers=False)
print("port", s.port, flush=True)
sys.stdin.read()
"""


class StoreServer:
    def __init__(self, torch_python=None):
        argv = [torch_python, "-c", TORCH_SERVER] if torch_python else [STORE_SERVER, "127.0.0.1", "0"]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        # bounded: torch's server imports torch first, and either one may hang or die before its port
        ready, _, _ = select.select([self.proc.stdout], [], [], 60)
        line = self.proc.stdout.readline() if ready else ""
        if not line.startswith("port "):
            self.stop()
            raise AssertionError(f"{argv[0]} printed no port within 60 s: {line!r}")
        self.port = int(line.split()[1])

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.proc.stdout.close()
        self.proc.stdin.close()


def run_ranks(python, script, port, world, timeout=120):
    procs = [subprocess.Popen([python, "-c", script, "127.0.0.1", str(port), str(r), str(world)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(world)]
    results = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        results.append((p.returncode, out, err))
    return results


@unittest.skipUnless(PYTHONS, "no python with torch (Debian's python3-torch, or DTL_TORCH2_PYTHON)")
@unittest.skipUnless(os.path.exists(STORE_SERVER), "store_server is not built")
class TorchClients(unittest.TestCase):
    def setUp(self):
        self.server = StoreServer()

    def tearDown(self):
        self.server.stop()

    def test_every_store_operation_answers_as_torch_expects(self):
        self.run_every_operation(torch_server=False)

    def test_torchs_own_server_answers_the_same_script(self):
        """The oracle: what OPS_SCRIPT expects is what torch's own TCPStore server answers."""
        self.run_every_operation(torch_server=True)

    def run_every_operation(self, torch_server):
        for label, python in PYTHONS:
            with self.subTest(label):
                server = StoreServer(python if torch_server else None)  # counters start afresh
                try:
                    r = subprocess.run([python, "-c", OPS_SCRIPT, "127.0.0.1", str(server.port)],
                                       capture_output=True, text=True, timeout=60)
                finally:
                    server.stop()
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                self.assertIn("ALL OK", r.stdout)

    def test_four_gloo_ranks_form_a_group_and_pass_barriers(self):
        for label, python in PYTHONS:
            with self.subTest(label):
                server = StoreServer()  # a fresh store per version, as a new group gets
                try:
                    for code, out, err in run_ranks(python, GLOO_SCRIPT, server.port, 4):
                        self.assertEqual(code, 0, out + err)
                        self.assertIn("ok sum=10", out)
                finally:
                    server.stop()

    def test_hostile_clients_lose_their_own_connections_while_a_job_runs(self):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4096)), hard))
        port = self.server.port
        hostile = []

        def connect(data=b""):
            c = socket.create_connection(("127.0.0.1", port), timeout=10)
            if data:
                c.sendall(data)
            hostile.append(c)
            return c

        try:
            garbage = connect(b"\xff" * 64)
            huge = connect(b"\x00\xce\xf7\x85\x3c" + b"\x01" + struct.pack("<Q", 1 << 62))
            never = connect(b"\x00\xce\xf7\x85\x3c" + b"\x06" + struct.pack("<Q", 1) + struct.pack("<Q", 5) + b"never")
            stalled = [connect() for _ in range(500)]
            stalled += [connect(b"\x00\xce\xf7\x85\x3c\x01" + struct.pack("<Q", 10) + b"part") for _ in range(500)]
            label, python = PYTHONS[-1]
            for code, out, err in run_ranks(python, GLOO_SCRIPT, port, 4):
                self.assertEqual(code, 0, f"{label}: {out}{err}")
            for c in (garbage, huge):
                self.assertEqual(c.recv(16), b"", "a hostile client's connection was not closed")
            never.settimeout(0.2)
            with self.assertRaises(socket.timeout):
                never.recv(1)  # still waiting, still connected: a wait costs nothing
            self.assertEqual(self.server.proc.poll(), None)
        finally:
            for c in hostile:
                c.close()


if __name__ == "__main__":
    main()
