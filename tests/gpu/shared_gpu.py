"""Where a rank of the GPU checks runs (scripts/gpu-check.sh). With at least as many GPUs as ranks on
the node, rank LOCAL_RANK takes cuda:LOCAL_RANK. With fewer, every rank shares cuda:0 and tells NCCL
it is on a host of its own: NCCL refuses two ranks on one GPU of one host, and between hosts it uses
its socket transport over loopback. The collectives are then NCCL's real ones, at socket speed and
with the ranks' kernels time-sharing the GPU; bandwidth figures taken so are not a link's."""
import os
import socket

import torch


def place():
    """Binds this process to its GPU and returns (device, shared): shared is True when ranks share one."""
    local_rank = int(os.environ["LOCAL_RANK"])
    shared = int(os.environ["LOCAL_WORLD_SIZE"]) > torch.cuda.device_count()
    if shared:
        os.environ["NCCL_HOSTID"] = f"{socket.gethostname()}-rank{os.environ['RANK']}"
        os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
        os.environ.setdefault("NCCL_IB_DISABLE", "1")
    device = torch.device("cuda", 0 if shared else local_rank)
    torch.cuda.set_device(device)
    return device, shared


def say(line):
    """One write per line, so that two ranks' lines never interleave."""
    os.write(1, (line + "\n").encode())
