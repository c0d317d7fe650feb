#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# gpt_pp.py — the GPT of gpt.py cut into two stages and trained by torch.distributed.pipelining (two processes on
# gloo, one thread each, 1F1B or GPipe), the peer of `strata-train --pp 2` for bench/peers/run.sh. A benchmark peer,
# never a dependency.
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt import PRESETS, Block  # noqa: E402  (the same layers as the one-device peer)


class Embed(nn.Module):
    """strata's layer 0: token and position embeddings."""

    def __init__(self, vocab, context, d):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(context, d)

    def forward(self, idx):
        return self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))


class Head(nn.Module):
    """strata's last layer: final layernorm and the untied projection to the vocabulary."""

    def __init__(self, vocab, d):
        super().__init__()
        self.ln_f = nn.LayerNorm(d, eps=1e-5)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, x):
        return self.head(self.ln_f(x))


def layers_of(model, fused):
    """strata's layer list of a GPT: embedding, the blocks, the head."""
    vocab, context, d, n, heads, d_ff = PRESETS[model]
    out = [Embed(vocab, context, d)]
    for _ in range(n):
        blk = Block(d, heads, d_ff)
        blk.fused = fused
        out.append(blk)
    out.append(Head(vocab, d))
    return out


def run(rank, a):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(a.port)
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(1)  # every rank builds the whole list alike, then keeps its stage's layers
    vocab, context = PRESETS[a.model][0], PRESETS[a.model][1]
    layers = layers_of(a.model, a.fused_attention)
    cut = a.split[0]
    if not 0 < cut < len(layers) or sum(a.split) != len(layers):
        raise SystemExit(f"gpt_pp: split {a.split} does not cut {len(layers)} layers in two")
    stage_mod = nn.Sequential(*(layers[:cut] if rank == 0 else layers[cut:]))
    del layers
    mb = a.batch
    # shapes are inferred in the first step (excluded from the timing); that exchange pickles through numpy
    example_in = torch.zeros(mb, context, dtype=torch.long) if rank == 0 else None
    stage = PipelineStage(stage_mod, rank, 2, torch.device("cpu"), input_args=example_in)

    def loss_fn(logits, target):
        return F.cross_entropy(logits.reshape(-1, vocab), target.reshape(-1))

    kind = Schedule1F1B if a.schedule == "1f1b" else ScheduleGPipe
    sched = kind(stage, n_microbatches=a.microbatches, loss_fn=loss_fn)
    opt = torch.optim.AdamW(stage_mod.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
    g = torch.Generator().manual_seed(2)
    data = torch.randint(0, vocab, (a.steps, a.microbatches * mb, context + 1), generator=g)
    times = []
    for step in range(a.steps):
        dist.barrier()
        t0 = time.perf_counter()
        x, y = data[step, :, :-1].contiguous(), data[step, :, 1:].contiguous()
        opt.zero_grad(set_to_none=True)
        losses = []
        if rank == 0:
            sched.step(x)
        else:
            sched.step(target=y, losses=losses)
        # clipping by the norm over both stages, as strata's optimizer does
        sq = torch.zeros(1)
        for p in stage_mod.parameters():
            if p.grad is not None:
                sq += p.grad.detach().pow(2).sum()
        dist.all_reduce(sq)
        coef = 1.0 / max(1.0, sq.sqrt().item())
        if coef < 1.0:
            for p in stage_mod.parameters():
                if p.grad is not None:
                    p.grad.mul_(coef)
        opt.step()
        times.append(time.perf_counter() - t0)
    timed = torch.tensor(times[1:] or times)  # the first step excluded, as strata-train does
    dist.all_reduce(timed, op=dist.ReduceOp.MAX)  # a step ends when its slower rank does
    if rank == 1:
        tokens = a.microbatches * mb * context
        loss = sum(l.item() for l in losses) / max(1, len(losses))
        print(json.dumps({"peer": "pytorch-pipelining", "torch": torch.__version__, "model": a.model, "pp": 2,
                          "schedule": a.schedule, "microbatches": a.microbatches, "split": a.split,
                          "threads": a.threads, "tokens_per_step": tokens, "steps": a.steps, "loss": loss,
                          "tokens_per_s": tokens * len(timed) / float(timed.sum())}), flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description="PyTorch pipelining peer of strata-train --pp 2")
    ap.add_argument("--model", default="gpt-tiny", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=2, help="sequences per micro-batch (strata-train's --batch)")
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--schedule", default="1f1b", choices=["1f1b", "gpipe"])
    ap.add_argument("--split", default="", help="layers per stage as strata chose them, e.g. 2,2 (default: halves)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1, help="threads per process")
    ap.add_argument("--port", type=int, default=29517)
    ap.add_argument("--fused-attention", action="store_true")
    a = ap.parse_args()
    n = PRESETS[a.model][3] + 2
    a.split = [int(v) for v in a.split.split(",")] if a.split else [n // 2, n - n // 2]
    mp.spawn(run, args=(a,), nprocs=2, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
