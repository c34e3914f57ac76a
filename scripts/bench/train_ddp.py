#!/usr/bin/python3
"""The Python side of scripts/bench/train_vs_ddp.sh: dtl-train's model, batch, optimizer and
schedule written with torch.nn.parallel.DistributedDataParallel (Gloo, CPU), launched by torchrun.

Same as dtl-train: GPT-2-style pre-norm blocks (qkv, proj, fc, fc_proj, tanh GELU), learned
positions, output tied to the token embedding, GPT-2 init; AdamW (betas 0.9/0.95, eps 1e-8,
weight decay 0.1 on matrices only), linear warmup + cosine, global-norm clipping at 1.0;
the same bucket size (--bucket_mb, DDP's default 25 MB). Rank 0 prints one JSON line: tokens/s over the timed steps.
With --zero1 the optimizer is torch's ZeroRedundancyOptimizer over AdamW (ZeRO stage 1: each rank
keeps and steps its share of the state, then broadcasts its parameters)."""
import argparse
import json
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, width, heads, context):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.fc_proj = nn.Linear(4 * width, width)
        if not hasattr(F, "scaled_dot_product_attention"):
            # a plain attribute, not a buffer: DDP would broadcast it, and Gloo has no bool type
            self.causal_mask = torch.ones(context, context, dtype=torch.bool).triu(1)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.heads))
            att = att.masked_fill(self.causal_mask[:T, :T], float("-inf")).softmax(-1)
            y = att @ v
        h = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return h + self.fc_proj(F.gelu(self.fc(self.ln2(h)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, layers, width, heads, context, vocab):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads, context) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith(".bias"):
                    p.zero_()
                elif "ln" in name:
                    p.fill_(1.0)
                elif name.endswith("proj.weight"):
                    p.normal_(0.0, 0.02 / math.sqrt(2 * layers))
                else:
                    p.normal_(0.0, 0.02)

    def forward(self, tokens):
        T = tokens.size(1) - 1
        x = self.tok(tokens[:, :T]) + self.pos.weight[:T]
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.tok.weight)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), tokens[:, 1:].reshape(-1))


def lr_at(step, peak, floor, warmup, total):
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, max(0.0, (step - warmup) / max(1, total - 1 - warmup)))
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * progress))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--width", type=int, default=384)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--skip", type=int, default=5, help="untimed first steps")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--bucket_mb", type=float, default=25)
    p.add_argument("--zero1", action="store_true", help="torch's ZeroRedundancyOptimizer over AdamW")
    a = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1234)
    model = Gpt(a.layers, a.width, a.heads, a.context, a.vocab)
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=a.bucket_mb)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    if a.zero1:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(groups[0]["params"], optimizer_class=torch.optim.AdamW, lr=a.lr,
                                      betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
        opt.add_param_group(groups[1])
    else:
        opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(1000 + rank)
    warmup = min(100, a.steps // 10)
    times, cpu = [], []
    for step in range(a.steps):
        start, start_cpu = time.perf_counter(), time.process_time()
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a.lr, a.lr / 10, warmup, a.steps)
        tokens = torch.randint(0, a.vocab, (a.batch_size, a.context + 1), generator=gen)
        loss = ddp(tokens)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    if rank == 0:
        timed = times[a.skip:]
        tokens_per_step = a.batch_size * world * a.context
        print(json.dumps({"tokens_per_s": tokens_per_step * len(timed) / sum(timed),
                          "step_time_s": sum(timed) / len(timed), "cpu_time_s": sum(cpu[a.skip:]) / len(timed),
                          "loss": loss.item(), "world_size": world,
                          "state_bytes": sum(t.numel() * t.element_size() for st in (
                              opt.optim.state if a.zero1 else opt.state).values()
                              for t in st.values() if torch.is_tensor(t) and t.dim() > 0),
                          "torch": torch.__version__}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
