"""The worker environment: torchrun's contract, exact rank sets, PET_* variables, GPUs."""
import os
import re
import socket

from common import WORKER, LaunchTest, main, parse_env


class Environment(LaunchTest):
    def test_each_worker_gets_the_full_torchrun_contract(self):
        r = self.launch("--nproc_per_node=3", "--master_port=0", "--max_restarts=2", "--run_id=job7",
                        *self.worker("env"))
        self.assertExitCode(r, 0)
        ranks = parse_env(r.stdout)
        self.assertEqual(sorted(ranks), [0, 1, 2])
        ports = {env["MASTER_PORT"] for env in ranks.values()}
        self.assertEqual(len(ports), 1)
        port = int(ports.pop())
        self.assertGreater(port, 0)
        for lr, env in ranks.items():
            self.assertEqual(env["RANK"], str(lr))
            self.assertEqual(env["LOCAL_RANK"], str(lr))
            self.assertEqual(env["ROLE_RANK"], str(lr))
            self.assertEqual(env["GROUP_RANK"], "0")
            self.assertEqual(env["ROLE_NAME"], "default")
            for key in ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "ROLE_WORLD_SIZE"):
                self.assertEqual(env[key], "3", key)
            self.assertEqual(env["GROUP_WORLD_SIZE"], "1")
            self.assertEqual(env["MASTER_ADDR"], "127.0.0.1")
            self.assertEqual(env["TORCHELASTIC_RESTART_COUNT"], "0")
            self.assertEqual(env["TORCHELASTIC_MAX_RESTARTS"], "2")
            self.assertEqual(env["TORCHELASTIC_RUN_ID"], "job7")
            self.assertEqual(env["TORCHELASTIC_USE_AGENT_STORE"], "True")
            self.assertEqual(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "1")
            self.assertEqual(env["OMP_NUM_THREADS"], "1")
            self.assertEqual(env["CUDA_VISIBLE_DEVICES"], "<unset>")
            self.assertRegex(env["TORCHELASTIC_ERROR_FILE"], rf"/job7_\w+/attempt_0/{lr}/error\.json$")
        self.assertIn("OMP_NUM_THREADS=1 for each worker", r.stderr)

    def test_every_rank_touches_its_file_and_the_set_is_exact(self):
        r = self.launch("--nproc-per-node", "4", "--master-port", "0", *self.worker("touch", self.tmp))
        self.assertExitCode(r, 0)
        self.assertEqual(sorted(os.listdir(self.tmp)), ["0", "1", "2", "3"])

    def test_pet_variables_configure_the_launch_and_flags_win(self):
        env = self.env(PET_NPROC_PER_NODE=2, PET_MASTER_PORT=0, PET_ROLE="trainer", PET_NO_PYTHON=1)
        r = self.launch(WORKER, "env", env=env)
        self.assertExitCode(r, 0)
        self.assertEqual(len(re.findall(r"^\[trainer\d\]:RANK=", r.stdout, re.M)), 2)
        r = self.launch("--nproc_per_node=3", WORKER, "env", env=env)
        self.assertExitCode(r, 0)
        self.assertEqual(len(re.findall(r"^\[trainer\d\]:RANK=", r.stdout, re.M)), 3)

    def test_inherited_variables_are_kept_and_local_rank_is_substituted(self):
        env = self.env(OMP_NUM_THREADS=4, TORCH_NCCL_ASYNC_ERROR_HANDLING=0)
        r = self.launch("--nproc_per_node=2", "--master_port=0", *self.worker("env", "--dev=cuda:${local_rank}", "x y"),
                        env=env)
        self.assertExitCode(r, 0)
        ranks = parse_env(r.stdout)
        for lr, e in ranks.items():
            self.assertEqual(e["OMP_NUM_THREADS"], "4")
            self.assertEqual(e["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "0")
        self.assertIn("[default1]:ARG=--dev=cuda:1", r.stdout)
        self.assertIn("[default0]:ARG=x y", r.stdout)
        self.assertNotIn("OMP_NUM_THREADS=1 for each worker", r.stderr)

    def test_the_rendezvous_token_never_reaches_the_workers(self):
        # user code, its subprocesses and any environment dump would hold the job's secret
        r = self.launch("--master_port=0", "--no_python", "/usr/bin/env",
                        env=self.env(DTLAUNCH_RDZV_TOKEN="s3cret-a", PET_RDZV_TOKEN="s3cret-b"))
        self.assertExitCode(r, 0)
        self.assertIn("[default0]:TORCHELASTIC_RUN_ID=", r.stdout)
        self.assertNotIn("s3cret", r.stdout)
        self.assertNotIn("RDZV_TOKEN", r.stdout)

    def test_standalone_picks_a_free_port_and_a_random_run_id(self):
        r = self.launch("--standalone", "--nproc_per_node=2", *self.worker("env"))
        self.assertExitCode(r, 0)
        ranks = parse_env(r.stdout)
        self.assertRegex(ranks[0]["TORCHELASTIC_RUN_ID"], r"^[0-9a-f]{16}$")
        self.assertEqual(ranks[0]["TORCHELASTIC_RUN_ID"], ranks[1]["TORCHELASTIC_RUN_ID"])
        self.assertNotEqual(ranks[0]["MASTER_PORT"], "29500")

    def test_a_port_in_use_is_one_clear_error(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen()
            port = s.getsockname()[1]
            r = self.launch("--master_port", port, *self.worker("env"))
        self.assertExitCode(r, 2)
        self.assertEqual(r.stderr, f"dtlaunch: error: --master_port {port} is already in use on 127.0.0.1 "
                                   "(choose another port, or --master_port=0 for a free one)\n")
        self.assertEqual(r.stdout, "")

    def test_fake_gpus_give_each_worker_its_own_gpu_by_default(self):
        r = self.launch("--fake_gpus=4", "--nproc_per_node=gpu", "--master_port=0", *self.worker("env"))
        self.assertExitCode(r, 0)
        ranks = parse_env(r.stdout)
        self.assertEqual({lr: e["CUDA_VISIBLE_DEVICES"] for lr, e in ranks.items()}, {0: "0", 1: "1", 2: "2", 3: "3"})
        self.assertIn("gpu_visibility=per_worker", r.stderr)

    def test_gpu_visibility_all_shows_every_selected_gpu_to_each_worker(self):
        env = self.env(DTLAUNCH_FAKE_GPUS=4)
        r = self.launch("--gpu_ids=1,3", "--nproc_per_node=gpu", "--gpu_visibility=all", "--master_port=0",
                        *self.worker("env"), env=env)
        self.assertExitCode(r, 0)
        ranks = parse_env(r.stdout)
        self.assertEqual(sorted(ranks), [0, 1])
        self.assertEqual({e["CUDA_VISIBLE_DEVICES"] for e in ranks.values()}, {"1,3"})
        self.assertIn("gpu_visibility=all", r.stderr)

    def test_inherited_cuda_visible_devices_narrows_the_gpus(self):
        env = self.env(CUDA_VISIBLE_DEVICES="2,3", DTLAUNCH_FAKE_GPUS=4)
        r = self.launch("--nproc_per_node=auto", "--master_port=0", *self.worker("env"), env=env)
        self.assertExitCode(r, 0)
        ranks = parse_env(r.stdout)
        self.assertEqual({lr: e["CUDA_VISIBLE_DEVICES"] for lr, e in ranks.items()}, {0: "2", 1: "3"})

    def test_cpu_jobs_leave_cuda_visible_devices_alone(self):
        r = self.launch("--fake_gpus=2", "--nproc_per_node=cpu", "--master_port=0", *self.worker("env"))
        self.assertExitCode(r, 0)
        ranks = parse_env(r.stdout)
        self.assertEqual(len(ranks), os.cpu_count() if hasattr(os, "sched_getaffinity") is False
                         else len(os.sched_getaffinity(0)))
        self.assertEqual({e["CUDA_VISIBLE_DEVICES"] for e in ranks.values()}, {"<unset>"})


if __name__ == "__main__":
    main()
