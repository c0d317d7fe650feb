#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# llama.py — Hugging Face transformers' LlamaForCausalLM of strata's llama shapes (RMSNorm, SwiGLU, RoPE,
# grouped-query attention, no biases, untied head) trained by gpt.py's loop, for bench/peers/run.sh. A benchmark
# peer, never a dependency.
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt import common_args, train  # noqa: E402  (the one loop both peers run)

PRESETS = {  # name: vocab, context, d_model, layers, heads, kv heads, d_ff — as strata's lib/model/model.c and run.sh
    "llama-tiny": (256, 64, 64, 2, 4, 2, 192),
    "llama-512x8": (256, 256, 512, 8, 8, 4, 1536),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="llama-tiny", choices=sorted(PRESETS))
    ap.add_argument("--attn", choices=["sdpa", "eager"], default="sdpa",
                    help="transformers' attention: sdpa (F.scaled_dot_product_attention, its default) or eager "
                         "(scores, softmax, weighted values)")
    common_args(ap)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    from transformers import LlamaConfig, LlamaForCausalLM

    vocab, context, d, layers, heads, kv, d_ff = PRESETS[a.model]
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=d, intermediate_size=d_ff, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=context,
                      rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, attention_bias=False,
                      mlp_bias=False, use_cache=False, attn_implementation=a.attn)
    model = LlamaForCausalLM(cfg)
    model.train()
    train(a.model, lambda x: model(input_ids=x, use_cache=False).logits, model.parameters(), vocab, context, a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
