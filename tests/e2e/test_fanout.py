"""`dtlaunch --hostfile`: one command starts every host's agent over real OpenSSH servers (sshd in
three network namespaces, sshnet.py), launched from a fourth namespace. A real PyTorch gloo
allreduce over 3 hosts x 2 workers; an unreachable host, a refused key and another dtlaunch version
stop the job before anything starts; a remote worker's failure, a SIGKILLed remote agent and a
Ctrl-C end it. After every case no process is left in any namespace but the sshd daemons.

Needs root, iproute2 and openssh-server (scripts/setup.sh installs them); skipped with the reason
otherwise."""
import os
import re
import signal
import subprocess
import time
import unittest

from common import DTLAUNCH, Running, have_torch, main, write_allreduce_script
from sshnet import started_or_skip, why_no_sshd

DTL = os.path.realpath(DTLAUNCH)
PYTHON = "/usr/bin/python3"  # Debian's torch; the remote PATH's python3 may be another one

SLEEPER = """
import os, sys, time
print(f"rank={os.environ['RANK']} world={os.environ['WORLD_SIZE']} group={os.environ['GROUP_RANK']} "
      f"token={'DTLAUNCH_RDZV_TOKEN' in os.environ} nccl={os.environ.get('NCCL_DEBUG', '-')} "
      f"extra={os.environ.get('DTL_EXTRA', '-')} envfile={os.environ.get('DTL_FROM_FILE', '-')}", flush=True)
if os.environ["RANK"] == sys.argv[1]:
    sys.exit(int(sys.argv[2]))
time.sleep(float(sys.argv[3]))
"""


@unittest.skipIf(why_no_sshd(), why_no_sshd())
class Fanout(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c, cls.dir, cls.sleeper_script = started_or_skip(3, "f", "sleeper.py", SLEEPER)

    @classmethod
    def tearDownClass(cls):
        cls.c.stop()

    def tearDown(self):
        left = self.c.wait_clean(timeout=10)
        self.c.kill_leftovers()
        self.assertEqual(left, {}, "processes left on the hosts")

    def env(self, **extra):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "TORCHELASTIC_", "DTLAUNCH_"))}
        env.update(PYTHON_EXEC=PYTHON, GLOO_SOCKET_IFNAME="eth0", XDG_CONFIG_HOME=os.path.join(self.dir, "no-config"))
        env.update(extra)
        return env

    def start(self, *args, slots=2, hosts=None, wrong_key=False, remote=DTL, env=None):
        argv = [DTL, *self.c.fanout_args(remote, slots=slots, hosts=hosts, wrong_key=wrong_key), *map(str, args)]
        return Running(self.c.launcher_argv(argv), env or self.env(), cwd=self.dir)

    def run_job(self, *args, timeout=90, **kw):
        return self.start(*args, **kw).finish(timeout=timeout)

    def sleeper(self, fail_rank=-1, code=0, sleep=0.1):
        return [type(self).sleeper_script, str(fail_rank), str(code), str(sleep)]

    @unittest.skipUnless(have_torch(), "Debian's python3-torch is not installed")
    def test_gloo_allreduce_three_hosts(self):
        script = write_allreduce_script(self.dir)
        r = self.run_job("--master_port", "29500", script, timeout=150)
        self.assertEqual(r.returncode, 0, r.stderr)
        for rank in range(6):
            self.assertRegex(r.stdout, rf"(?m)^{re.escape(self.c.hosts[rank // 2])}: \[default{rank % 2}\]:"
                                       rf"rank={rank} world=6 sum=21 elastic=True$")

    def test_settings_reach_every_host_token_only_through_stdin(self):
        with open(os.path.join(self.dir, ".dtlaunch_env"), "w") as f:
            f.write("# as DeepSpeed's .deepspeed_env\nDTL_FROM_FILE=yes\n")
        try:
            job = self.start("--export", "DTL_EXTRA=7", *self.sleeper(sleep=3), env=self.env(NCCL_DEBUG="WARN"))
            job.wait_for(r"rank=\d", count=6, timeout=60)
            for host in self.c.hosts:  # the secret is in no command line on any host
                for pid in self.c.pids(host):
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        self.assertNotIn(b"TOKEN", f.read().upper())
            r = job.finish(timeout=60)
        finally:
            os.unlink(os.path.join(self.dir, ".dtlaunch_env"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(re.findall(r"token=False nccl=WARN extra=7 envfile=yes", r.stdout)), 6, r.stdout)
        self.assertEqual(sorted(re.findall(r"group=(\d)", r.stdout)), ["0", "0", "1", "1", "2", "2"])

    def test_hosts_flag_slots_and_include(self):
        h = self.c.hosts
        r = self.run_job("--fake_gpus", "2", "--include", f"{h[0]}@{h[2]}:1", *self.sleeper(), slots=2)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(re.findall(r"world=3 ", r.stdout)), 3, r.stdout)
        self.assertNotIn(h[1] + ":", r.stdout)

    def test_hosts_named_by_ssh_aliases_meet_at_the_first_host_s_address(self):
        """Names only the launching side's ssh config knows (`Host gpu0 / HostName 10...`): the other
        hosts cannot resolve them, so the hosts meet at the first address the first host reports, as
        deepspeed's runner asks it (`hostname -I`)."""
        aliases = [f"dtl-alias-{i}" for i in range(len(self.c.hosts))]
        config = os.path.join(self.dir, "ssh_config_aliases")
        with open(self.c.config) as base, open(config, "w") as f:
            for alias, addr in zip(aliases, self.c.hosts):
                f.write(f"Host {alias}\n  HostName {addr}\n")
            f.write(base.read())
        hostfile = self.c.hostfile(1, aliases, name="hostfile_aliases")
        script = os.path.join(self.dir, "master.py")
        with open(script, "w") as f:
            f.write("import os\nprint('master', os.environ['MASTER_ADDR'], os.environ['RANK'], flush=True)\n")
        argv = [DTL, "--hostfile", hostfile, "--ssh_command", f"ssh -F {config}", "--remote_dtlaunch", DTL, script]
        r = Running(self.c.launcher_argv(argv), self.env(), cwd=self.dir).finish(timeout=90)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sorted(re.findall(r"master (\S+) (\d)", r.stdout)),
                         [(self.c.hosts[0], str(rank)) for rank in range(3)], r.stdout)
        self.assertIn(f"the hosts meet at {self.c.hosts[0]} (the first address host {aliases[0]} has;", r.stderr)

    def test_remote_worker_failure_is_the_root_cause(self):
        r = self.run_job(*self.sleeper(fail_rank=3, code=7, sleep=30), timeout=90)
        self.assertEqual(r.returncode, 7, r.stderr)
        self.assertEqual(r.stderr.count("Root Cause (first observed failure)"), 1, r.stderr)
        self.assertRegex(r.stderr, rf"host\s+: {re.escape(self.c.hosts[1])}\n")
        self.assertRegex(r.stderr, r"rank\s+: 3 \(local_rank: 1\)")

    def test_unreachable_host_stops_before_anything_starts(self):
        t0 = time.monotonic()
        r = self.run_job(*self.sleeper(sleep=30), hosts=[self.c.hosts[0], self.c.unreachable], timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        lines = [l for l in r.stderr.splitlines() if "error" in l]
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn(f"host {self.c.unreachable}: ssh: connect to host {self.c.unreachable}", lines[0])
        self.assertNotIn("rank=", r.stdout)
        self.assertLess(time.monotonic() - t0, 40)

    def test_refused_key(self):
        r = self.run_job(*self.sleeper(sleep=30), wrong_key=True)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertRegex(r.stderr, r"^dtlaunch: error: host [\d.]+: root@[\d.]+: Permission denied \(publickey\)\. "
                                  r"\(preflight; nothing was started\)\n$")
        self.assertNotIn("rank=", r.stdout)

    def test_other_version_or_missing_dtlaunch(self):
        fake = os.path.join(self.dir, "old-dtlaunch")
        with open(fake, "w") as f:
            f.write("#!/bin/sh\necho dtlaunch-node 0.0.1\nexec cat >/dev/null\n")
        os.chmod(fake, 0o755)
        r = self.run_job(*self.sleeper(), remote=fake)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertRegex(r.stderr, r"host \S+: runs 0\.0\.1, not this dtlaunch")
        r = self.run_job(*self.sleeper(), remote="/nonexistent/dtlaunch")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertRegex(r.stderr, r"dtlaunch: error: host \S+: .*(not found|No such file)")

    def test_killed_remote_agent_ends_the_job_everywhere(self):
        job = self.start("--rdzv_conf", "join_timeout=20", *self.sleeper(sleep=60))
        job.wait_for(r"rank=\d", count=6, timeout=60)
        agent = self.c.wait_for_process(self.c.hosts[1], r"dtlaunch fanout-node ")
        self.assertIsNotNone(agent)
        os.kill(agent, signal.SIGKILL)
        r = job.finish(timeout=30)
        self.assertNotEqual(r.returncode, 0, r.stderr)

    def test_a_host_that_cannot_start_stops_the_others(self):
        h = self.c.hosts
        r = self.run_job("--include", f"{h[0]}@{h[2]}:1", *self.sleeper(sleep=60), slots=2, timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)  # no GPU 1 on a machine without GPUs
        self.assertIn(f"{h[2]}: dtlaunch: error: PET_GPU_IDS: GPU 1 is not visible", r.stderr)
        self.assertIn(f"dtlaunch: host {h[2]}'s agent ended with exit code 2; stopping the other hosts", r.stderr)

    def test_ctrl_c_stops_every_host(self):
        job = self.start(*self.sleeper(sleep=60))
        job.wait_for(r"rank=\d", count=6, timeout=60)
        t0 = time.monotonic()
        job.proc.send_signal(signal.SIGINT)
        r = job.finish(timeout=30)
        self.assertEqual(r.returncode, 130, r.stderr)
        self.assertEqual(self.c.wait_clean(timeout=10), {})
        self.assertLess(time.monotonic() - t0, 20)

    def test_sigkilled_launcher_leaves_nothing_on_the_hosts(self):
        job = self.start(*self.sleeper(sleep=60))
        job.wait_for(r"rank=\d", count=6, timeout=60)
        job.proc.kill()  # its ssh clients die with it (PR_SET_PDEATHSIG); each agent sees its stdin end
        job.proc.wait(timeout=10)
        self.assertEqual(self.c.wait_clean(timeout=15), {})

    def test_bad_hostfile_is_refused_with_its_line(self):
        path = os.path.join(self.dir, "bad-hostfile")
        with open(path, "w") as f:
            f.write(f"# comment\n{self.c.hosts[0]} slots=2\n{self.c.hosts[0]} slots=4\n")
        r = subprocess.run([DTL, "--hostfile", path, *self.sleeper()], capture_output=True, text=True, timeout=30,
                           env=self.env())
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr, f"dtlaunch: error: {path}:3: host {self.c.hosts[0]} is listed twice\n")


if __name__ == "__main__":
    main()
