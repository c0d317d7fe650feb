#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# gpt.py — strata's GPT (pre-layernorm, tanh GELU, learned positions, untied head, biases everywhere) trained by a
# plain PyTorch loop with strata-train's optimiser settings, for bench/peers/run.sh. A benchmark peer, never a dependency.
import argparse
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads, d_ff):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d, eps=1e-5)
        self.attn = nn.Linear(d, 3 * d)    # fused QKV, as strata's c_attn [D, 3D]
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d, eps=1e-5)
        self.fc = nn.Linear(d, d_ff)
        self.fc_proj = nn.Linear(d_ff, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.attn(self.ln1(x)).split(d, dim=2)
        hd = d // self.heads
        q, k, v = (z.view(b, t, self.heads, hd).transpose(1, 2) for z in (q, k, v))
        if self.fused:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # the composition strata runs: scores, causal softmax, weighted values
            s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
            mask = torch.ones(t, t, dtype=torch.bool).tril()
            a = s.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, context, d, layers, heads, d_ff, fused):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block(d, heads, d_ff) for _ in range(layers))
        for blk in self.blocks:
            blk.fused = fused
        self.ln_f = nn.LayerNorm(d, eps=1e-5)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


PRESETS = {  # name: vocab, context, d_model, layers, heads, d_ff — as strata's lib/model/model.c
    "gpt-tiny": (256, 64, 64, 2, 4, 256),
    "gpt-512x8": (256, 256, 512, 8, 8, 2048),
}


def train(name, forward, params, vocab, context, a):
    """The loop both peers share (gpt.py, llama.py): strata-train's AdamW (lr 1e-3, betas 0.9/0.999, eps 1e-8, weight
    decay 0.1 on every tensor) and clipping at 1.0, a.steps steps of a.batch random sequences, forward and loss under
    autocast with --amp bf16; prints one JSON line with tokens_per_s over all but the first step."""
    opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
    params = [p for g in opt.param_groups for p in g["params"]]
    data = torch.randint(0, vocab, (a.steps, a.batch, context + 1))
    times = []
    for step in range(a.steps):
        t0 = time.perf_counter()
        x, y = data[step, :, :-1], data[step, :, 1:]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.amp == "bf16"):
            loss = F.cross_entropy(forward(x).reshape(-1, vocab).float(), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        loss.item()
        times.append(time.perf_counter() - t0)
    timed = times[1:] or times  # the first step excluded, as strata-train does
    tokens = a.batch * context
    print(json.dumps({"peer": "pytorch", "torch": torch.__version__, "model": name, "threads": a.threads,
                      "amp": a.amp,
                      "tokens_per_step": tokens, "steps": a.steps, "loss": loss.item(),
                      "tokens_per_s": tokens * len(timed) / sum(timed)}))


def common_args(ap):
    """The options both peers take."""
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--amp", choices=["none", "bf16"], default="none",
                    help="bf16: forward and loss under torch.autocast('cpu', dtype=torch.bfloat16), float32 master "
                         "weights and AdamW state (the peer of strata-train --precision bf16)")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="gpt-tiny", choices=sorted(PRESETS))
    ap.add_argument("--fused-attention", action="store_true", help="F.scaled_dot_product_attention instead of the composition")
    common_args(ap)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    vocab, context, d, layers, heads, d_ff = PRESETS[a.model]
    model = GPT(vocab, context, d, layers, heads, d_ff, a.fused_attention)
    train(a.model, model, model.parameters(), vocab, context, a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
