"""An NCCL hang for the GPU check: both ranks all_reduce once, then rank 1 stops in a function of
its own (as a rank stuck in its data loader would) while rank 0 enters the next all_reduce and waits
for its result with .item(). NCCL's collectives are asynchronous, so rank 0 waits in the CUDA
synchronisation behind the collective, not in all_reduce.

  nccl_hang.py sleep           rank 1 never comes back; NCCL's watchdog times out after NCCL_TIMEOUT_S
  nccl_hang.py first-attempt   rank 1 stops on the first attempt only (TORCHELASTIC_RESTART_COUNT 0)
  nccl_hang.py spin            rank 1 spins in Python: every rank is busy on a CPU, and only the
                               flight recorder's progress, or later NCCL's watchdog through the
                               store, tells that the job hangs

Every rank also watches the job's store for the key NCCL's watchdog writes when it times out
(exception_dump) and prints when it appears."""
import datetime
import os
import sys
import threading
import time

import torch
import torch.distributed as dist

from shared_gpu import place, say

mode = sys.argv[1]
device, shared = place()
timeout = float(os.environ.get("NCCL_TIMEOUT_S", "30"))
dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=timeout), device_id=device)
rank = dist.get_rank()
first = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"


def watch_store():
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                          timeout=datetime.timedelta(seconds=30))
    store.wait(["exception_dump"], datetime.timedelta(hours=1))
    say(f"rank {rank}: the store has exception_dump={store.get('exception_dump').decode()!r} at {time.time():.3f}")


threading.Thread(target=watch_store, daemon=True).start()


def stuck_in_data_loader():
    time.sleep(3600)


def spin_forever():
    while True:
        pass


x = torch.ones(1 << 20, device=device)
dist.all_reduce(x)
torch.cuda.synchronize()
say(f"rank {rank} pid {os.getpid()} ready at {time.time():.3f} (shared GPU: {shared})")
if rank == 1 and (mode == "sleep" or mode == "spin" or first):
    say(f"rank 1 stops at {time.time():.3f}")
    spin_forever() if mode == "spin" else stuck_in_data_loader()
dist.all_reduce(x)
say(f"rank {rank} done: {x[0].item():g}")
dist.destroy_process_group()
