"""--metrics_port against a real Prometheus (Debian's `prometheus`, which scripts/setup.sh installs):
started from the test on loopback with a generated config and a storage folder of its own, it
scrapes dtlaunch, and its query API returns a series for every rank, GPU series included (the fake
NVML of tests/helpers); `promtool check metrics` accepts the page. The node hosting a two-node job's
rendezvous serves every node's figures."""
import json
import os
import shutil
import signal
import subprocess
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

from common import DTLAUNCH, FAKE_NVML, LaunchTest, Running, free_port, main

WORKER = r"""
import os, sys, time
print(f"ready rank {os.environ['RANK']}", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.1)
"""


def get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


def samples(page, name):
    """{labels text: value} of one family in a text-format page."""
    out = {}
    for line in page.splitlines():
        if line.startswith(name + "{"):
            labels, value = line[len(name) + 1:].rsplit("} ", 1)
            out[labels] = float(value)
    return out


class Metrics(LaunchTest):
    def setUp(self):
        super().setUp()
        self.stop_file = os.path.join(self.tmp, "stop")
        self.script = os.path.join(self.tmp, "worker.py")
        with open(self.script, "w") as f:
            f.write(WORKER)
        self.servers = []

    def tearDown(self):
        # before the base class looks for leftovers: the workers end, Prometheus goes
        self.release()
        for proc in self.servers:
            stop(proc)
        super().tearDown()

    def release(self):
        with open(self.stop_file, "w"):
            pass

    def job_env(self, **extra):
        # NVML's stand-in with 4 GPUs: real GPU figures without a GPU
        return self.env(PYTHON_EXEC="python3", LD_LIBRARY_PATH=os.path.dirname(FAKE_NVML), FAKE_NVML_GPUS="4",
                        **extra)

    def start(self, *flags, env=None):
        return Running([DTLAUNCH, *map(str, flags), self.script, self.stop_file], env or self.job_env())

    def test_bad_ports_are_refused_before_anything_starts(self):
        r = self.launch("--metrics_port=70000", "--no_python", "true")
        self.assertEqual((r.returncode, r.stderr),
                         (2, "dtlaunch: error: --metrics_port: expected a port in 1..65535 (got '70000')\n"))
        taken = socket_listening()
        self.addCleanup(taken.close)
        r = self.launch(f"--metrics_port={taken.getsockname()[1]}", "--master_port=0", "--no_python", "true")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(f"dtlaunch: error: --metrics_port={taken.getsockname()[1]}: cannot listen on "
                      f"127.0.0.1:{taken.getsockname()[1]}: Address already in use\n", r.stderr)
        r = self.launch("--metrics_port=9", "--metrics_addr=no.such.host.invalid", "--master_port=0", "--no_python",
                        "true")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("cannot resolve no.such.host.invalid", r.stderr)

    def test_the_page_names_every_rank_and_its_gpu_and_promtool_accepts_it(self):
        port = free_port()
        job = self.start("--nproc_per_node=gpu", f"--metrics_port={port}", "--master_port", free_port())
        job.wait_for(r"ready rank \d", count=4)
        status, kind, page = get(f"http://127.0.0.1:{port}/metrics")
        self.assertEqual((status, kind), (200, "text/plain; version=0.0.4; charset=utf-8"))
        cpu = samples(page, "dtlaunch_rank_cpu_seconds_total")
        self.assertEqual(len(cpu), 4, page)
        for rank in range(4):
            self.assertEqual(sum(f'rank="{rank}",local_rank="{rank}",' in k for k in cpu), 1, page)
        util = samples(page, "DCGM_FI_DEV_GPU_UTIL")
        self.assertEqual(sorted(util.values()), [10, 20, 30, 40], page)  # the stand-in's 10 % per GPU index + 1
        used = samples(page, "DCGM_FI_DEV_FB_USED")
        self.assertIn('gpu="2",UUID="GPU-fakenvml-2",device="nvidia2",Hostname=', "".join(used))
        self.assertEqual(sorted(used.values()), [1024, 2048, 3072, 4096], page)  # MiB
        self.assertIn("\n# TYPE dtlaunch_rank_resident_memory_bytes gauge\n", page)
        if shutil.which("promtool"):
            check = subprocess.run(["promtool", "check", "metrics"], input=page, capture_output=True, text=True,
                                   timeout=30)
            self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
        missing = urllib.request.Request(f"http://127.0.0.1:{port}/nothing")
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(missing, timeout=10)
        self.assertEqual(e.exception.code, 404)
        self.release()
        self.assertExitCode(job.finish(timeout=60), 0)

    @unittest.skipUnless(shutil.which("prometheus"), "no prometheus (scripts/setup.sh installs Debian's)")
    def test_a_real_prometheus_scrapes_a_series_for_every_rank(self):
        port = free_port()
        job = self.start("--nproc_per_node=gpu", f"--metrics_port={port}", "--master_port", free_port(),
                         "--run_id=scraped")
        job.wait_for(r"ready rank \d", count=4)
        prometheus = self.prometheus([f"127.0.0.1:{port}"])
        for family in ("dtlaunch_rank_cpu_seconds_total", "dtlaunch_rank_resident_memory_bytes",
                       "dtlaunch_rank_last_output_age_seconds", "dtlaunch_rank_restarts_total", "DCGM_FI_DEV_GPU_UTIL",
                       "DCGM_FI_DEV_FB_USED"):
            series = self.wait_for_series(prometheus, family + '{run_id="scraped"}', 4)
            self.assertEqual(sorted(int(s["metric"]["rank"]) for s in series), [0, 1, 2, 3], family)
        state = self.wait_for_series(prometheus, 'dtlaunch_rank_state{state="blocked"} == 1', 4)
        self.assertEqual({s["metric"]["host"] for s in state}, {os.uname().nodename})
        self.release()
        self.assertExitCode(job.finish(timeout=60), 0)

    @unittest.skipUnless(shutil.which("prometheus"), "no prometheus (scripts/setup.sh installs Debian's)")
    def test_the_node_hosting_the_rendezvous_serves_every_node_s_ranks(self):
        master, ports = free_port(), [free_port(), free_port()]
        nodes = [self.start("--nnodes=2", f"--node_rank={n}", "--nproc_per_node=2", "--master_addr=127.0.0.1",
                            f"--master_port={master}", f"--metrics_port={ports[n]}", "--run_id=two", "--fake_gpus=2")
                 for n in (0, 1)]
        for n in nodes:
            n.wait_for(r"ready rank \d", count=2)
        _, _, own = get(f"http://127.0.0.1:{ports[1]}/metrics")
        self.assertEqual(len(samples(own, "dtlaunch_rank_cpu_seconds_total")), 2, own)
        _, _, whole = get(f"http://127.0.0.1:{ports[0]}/metrics/job")
        self.assertEqual(len(samples(whole, "dtlaunch_rank_cpu_seconds_total")), 4, whole)
        self.assertNotIn("DCGM", whole)  # fake GPUs have no figures
        prometheus = self.prometheus([f"127.0.0.1:{ports[0]}"], path="/metrics/job")
        series = self.wait_for_series(prometheus, 'dtlaunch_rank_resident_memory_bytes{run_id="two"}', 4)
        self.assertEqual(sorted(int(s["metric"]["rank"]) for s in series), [0, 1, 2, 3])
        self.release()
        for n in nodes:
            self.assertExitCode(n.finish(timeout=60), 0)

    def prometheus(self, targets, path="/metrics"):
        """A Prometheus of the test's own on loopback, scraping `targets` every second; stopped by its pid."""
        folder = os.path.join(self.tmp, "prometheus")
        os.makedirs(os.path.join(folder, "data"))
        config = os.path.join(folder, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n"
                    f"  - job_name: dtlaunch\n    metrics_path: {path}\n"
                    f"    static_configs:\n      - targets: {json.dumps(targets)}\n")
        web = free_port()
        log = open(os.path.join(folder, "log"), "w")
        self.addCleanup(log.close)
        proc = subprocess.Popen(["prometheus", f"--config.file={config}", f"--storage.tsdb.path={folder}/data",
                                 f"--web.listen-address=127.0.0.1:{web}"], stdout=log, stderr=log,
                                env=self.env(), cwd=folder)
        self.servers.append(proc)
        self.prometheus_log = os.path.join(folder, "log")
        return f"http://127.0.0.1:{web}"

    def wait_for_series(self, prometheus, query, count, timeout=60):
        """The query's series once there are `count` of them (Prometheus starts, then scrapes each second)."""
        deadline = time.monotonic() + timeout
        found = []
        while time.monotonic() < deadline:
            try:
                _, _, body = get(f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": query}))
                found = json.loads(body)["data"]["result"]
                if len(found) >= count:
                    return found
            except (urllib.error.URLError, ConnectionError):
                pass  # not listening yet
            time.sleep(0.2)
        with open(self.prometheus_log) as f:
            raise AssertionError(f"{query}: {len(found)} series after {timeout} s: {found}\n{f.read()[-3000:]}")


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def socket_listening():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    return s


if __name__ == "__main__":
    main()
