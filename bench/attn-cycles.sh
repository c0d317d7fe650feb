#!/bin/sh
# SPDX-License-Identifier: MIT
# attn-cycles.sh — CPU cycles per training step spent in the host's fused bfloat16 attention (host-attn-bf16.c),
# counted by perf on bench/train-mfu.sh's GPT with --precision bf16: a count, less noisy than tokens/s on a shared
# machine. With a second build, the two alternated RUNS times each (medians). A benchmark, not a test.
# Usage: bench/attn-cycles.sh BUILD_DIR [OTHER_BUILD_DIR]    (STEPS default 20, RUNS default 3)
# Target (issue 31): the attention's cycles at most half of what they were before its rework (main at 6c9b2c8).
# Symbols are per DSO: run it on builds whose strata-host.so keeps its symbol table (the default, not stripped).
set -u
. "$(dirname "$0")/lib.sh"
bench_setup attn-cycles "${1:-}" strata-train
other=${2:-}
STEPS=${STEPS:-20}
RUNS=${RUNS:-${2:+3}}
RUNS=${RUNS:-1}
if ! command -v perf >/dev/null 2>&1; then
  echo "attn-cycles: needs perf (linux-tools)" >&2
  exit 2
fi
# The attention's functions, this version's and those of main before the rework (zip_rows, mm_rows), as the symbol
# table of strata-host.so names them: every cycle of the op is in one of them or what they inline, except its calls
# to libm's log (logf now, a double log per query row before), which other ops share and so are not counted.
syms='fwd_task|bwd_task|mm_amx|mm_pairs|mm_rows|dkv_amx|tr16|pack_r|pack_t|zip_rows|prefetch_task|transpose_pairs|put_block|amx_start'
one() { # BUILD -> Mcycles per step of the attention
  # (train-mfu.sh exits 1 where MFU misses its target: its output says whether the training ran)
  STRATA_BACKEND_PATH="$1/backends/host/.libs" perf record -q -e cycles -c 1000000 -o "$tmp/perf.data" -- \
    env STEPS="$STEPS" sh "$(dirname "$0")/train-mfu.sh" "$1" --precision bf16 >"$tmp/out" 2>&1
  grep -q '^training ' "$tmp/out" || return 1
  perf report -i "$tmp/perf.data" --no-children --sort sym -F sample,sym 2>/dev/null |
    awk -v s="$STEPS" -v re=" ($syms)(\\\\.|\$)" '$0 ~ re { n += $1 } END { printf "%.1f\n", n / s }'
}
for r in $(seq "$RUNS"); do
  for b in "$build" $other; do
    m=$(one "$b") || { echo "attn-cycles: the training run with $b failed" >&2; exit 1; }
    echo "$m" >>"$tmp/$(echo "$b" | tr / _)"
    echo "attn-cycles: $b run $r: $m Mcycles per step in the bf16 attention"
  done
done
for b in "$build" $other; do
  echo "attn-cycles: $b median $(med "$tmp/$(echo "$b" | tr / _)") Mcycles per step ($STEPS steps a run, $RUNS runs)"
done
