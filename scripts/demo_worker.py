"""The demo's worker: joins the process group dtlaunch describes in the environment, and shows its
place in it with an allreduce that every rank must take part in."""
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([rank], dtype=torch.int64)
dist.all_reduce(total)
print(f"rank {rank}/{world} local_rank {os.environ['LOCAL_RANK']} "
      f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')} "
      f"master {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']} "
      f"run {os.environ['TORCHELASTIC_RUN_ID']}: sum of ranks = {total.item()} "
      f"(expected {world * (world - 1) // 2})", flush=True)
dist.destroy_process_group()
