"""NCCL all_reduce over the job's ranks, by message size, as nccl-tests reports it: algbw = bytes /
time, busbw = algbw * 2 (n - 1) / n. Rank 0 prints one JSON line per size. Each size runs for about a
second after two warm-up calls and three timed to size the run; larger sizes stop once one call takes over 5 s."""
import datetime
import json
import sys
import time

import torch
import torch.distributed as dist

from shared_gpu import place, say

device, shared = place()
dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=60), device_id=device)
rank, n = dist.get_rank(), dist.get_world_size()
sizes = [int(s) for s in (sys.argv[1:] or ["1048576", "16777216", "134217728"])]
for size in sizes:
    x = torch.ones(size // 2, dtype=torch.bfloat16, device=device)
    for _ in range(2):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(3):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    probe = (time.perf_counter() - start) / 3
    # every rank makes the same number of calls: rank 0's probe decides
    calls = torch.tensor([max(3, min(1000, int(1.0 / max(probe, 1e-6))))], device=device)
    dist.broadcast(calls, 0)
    calls = int(calls.item())
    start = time.perf_counter()
    for _ in range(calls):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    took = time.perf_counter() - start
    per_call = took / calls
    algbw = size / per_call / 1e9
    if rank == 0:
        say(json.dumps({"ranks": n, "shared_gpu": shared, "bytes": size, "calls": calls, "us": round(per_call * 1e6, 1),
                        "algbw_GBps": round(algbw, 2), "busbw_GBps": round(algbw * 2 * (n - 1) / n, 2)}))
    if per_call > 5:
        break
dist.destroy_process_group()
