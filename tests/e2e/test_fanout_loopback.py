"""The ssh fan-out on one machine, without root: a stand-in for ssh that records its command line and
runs the remote command with sh (tests/e2e/test_fanout.py has the real sshd). Checks what reaches the
hosts' agents from accelerate's multi-machine DeepSpeed config (deepspeed_hostfile) and from
`dtlaunch deepspeed --hostfile`, and that the job's token is in no ssh command line."""
import json
import os
import re
import stat
import subprocess

from common import DTLAUNCH, LaunchTest, free_port, main

FAKE_SSH = """#!/bin/sh
# ssh's stand-in: records its arguments (one JSON list per line, in one O_APPEND write, as the hosts'
# stand-ins run at once), then runs the remote command here.
python3 -c 'import json, os, sys
fd = os.open(os.environ["FAKE_SSH_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
os.write(fd, (json.dumps(sys.argv[1:]) + "\\n").encode())' "$@"
for last; do :; done
exec sh -c "$last"
"""

WORKER = """
import os, sys
keys = ["RANK", "WORLD_SIZE", "GROUP_RANK", "ACCELERATE_USE_DEEPSPEED", "ACCELERATE_DEEPSPEED_ZERO_STAGE",
        "DTLAUNCH_RDZV_TOKEN", "PET_NODE_RANK"]
print(" ".join(f"{k}={os.environ.get(k, '-')}" for k in keys), "ARGS=" + ",".join(sys.argv[1:]), flush=True)
"""


def two_loopback_hosts(folder):
    """(ssh's stand-in, a hostfile of two hosts with 2 slots each, both this machine) written into
    `folder`; the stand-in logs its arguments to $FAKE_SSH_LOG."""
    ssh = os.path.join(folder, "fake-ssh")
    with open(ssh, "w") as f:
        f.write(FAKE_SSH)
    os.chmod(ssh, stat.S_IRWXU)
    hostfile = os.path.join(folder, "hostfile")
    with open(hostfile, "w") as f:
        f.write("127.0.0.1 slots=2\nlocalhost slots=2\n")
    return ssh, hostfile


class FanoutLoopback(LaunchTest):
    def setUp(self):
        super().setUp()
        self.ssh, self.hostfile = two_loopback_hosts(self.tmp)
        self.worker = os.path.join(self.tmp, "worker.py")
        with open(self.worker, "w") as f:
            f.write(WORKER)
        self.log = os.path.join(self.tmp, "ssh.log")

    def run_fanout(self, *args):
        env = self.env(FAKE_SSH_LOG=self.log, PYTHON_EXEC="python3")
        r = subprocess.run([DTLAUNCH, *args], env=env, capture_output=True, text=True, timeout=60, cwd=self.tmp,
                           stdin=subprocess.DEVNULL)
        with open(self.log) as f:
            ssh_lines = [json.loads(line) for line in f]
        return r, ssh_lines

    def ranks(self, stdout):
        return {int(m.group(2)): (m.group(1), m.group(0)) for m in re.finditer(r"(?m)^(\S+): \[\w+\]:RANK=(\d+) .*$", stdout)}

    def test_accelerate_deepspeed_on_two_machines_goes_through_the_fan_out(self):
        cfg = os.path.join(self.tmp, "ds.yaml")
        with open(cfg, "w") as f:
            f.write(f"distributed_type: DEEPSPEED\nnum_machines: 2\nnum_processes: 4\nmain_process_port: {free_port()}\n"
                    f"deepspeed_config:\n  deepspeed_hostfile: {self.hostfile}\n  zero_stage: 2\n")
        r, ssh = self.run_fanout("launch", "--config_file", cfg, "--fake_gpus", "2", "--ssh_command", self.ssh,
                                 "--remote_dtlaunch", os.path.realpath(DTLAUNCH), self.worker)
        self.assertExitCode(r, 0)
        ranks = self.ranks(r.stdout)
        self.assertEqual(sorted(ranks), [0, 1, 2, 3], r.stdout)
        self.assertEqual([ranks[i][0] for i in range(4)], ["127.0.0.1", "127.0.0.1", "localhost", "localhost"])
        for _, line in ranks.values():
            self.assertIn("WORLD_SIZE=4 ", line)
            self.assertIn("ACCELERATE_USE_DEEPSPEED=true ACCELERATE_DEEPSPEED_ZERO_STAGE=2 DTLAUNCH_RDZV_TOKEN=- "
                          "PET_NODE_RANK=-", line)
        self.assertEqual(sorted(a[-2] for a in ssh), ["127.0.0.1", "localhost"])  # started at once
        for argv in ssh:
            self.assertIn("BatchMode=yes", argv)
            self.assertTrue(argv[-1].startswith(f"cd '{self.tmp}' && exec "), argv[-1])
            self.assertNotIn("TOKEN", " ".join(argv).upper())

    def test_deepspeed_convention_with_hostfile_and_num_gpus(self):
        r, ssh = self.run_fanout("deepspeed", "--launcher", "pdsh", "--hostfile", self.hostfile, "--num_gpus", "1", "--master_port",
                                 str(free_port()), "--ssh_command", self.ssh, "--remote_dtlaunch",
                                 os.path.realpath(DTLAUNCH), self.worker, "--lr", "1")
        self.assertExitCode(r, 0)
        ranks = self.ranks(r.stdout)
        self.assertEqual(sorted(ranks), [0, 1], r.stdout)
        for _, line in ranks.values():
            self.assertIn("WORLD_SIZE=2 ", line)
            self.assertIn("ARGS=--local_rank=0,--lr,1", line)  # deepspeed's argument, as its launcher gives it


if __name__ == "__main__":
    main()
