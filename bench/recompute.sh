#!/bin/sh
# SPDX-License-Identifier: MIT
# recompute.sh — what activation recomputation costs: the GPT of bench/train-mfu.sh on one host device with
# --recompute none, selective and full, runs alternated, medians of tokens/s, the step-time ratio of each mode to
# none and the activation bytes each keeps (from the --json summary). A benchmark, not a test.
# Usage: bench/recompute.sh [BUILD_DIR] [extra strata-train options, e.g. --precision bf16]
# Target (issue 32): full recompute's step time at most 1.4x none's.
set -u
. "$(dirname "$0")/lib.sh"
bench_setup recompute "${1:-}" strata-train
[ $# -gt 0 ] && shift
TRAIN="$build/tools/strata-train"
: "${STRATA_BACKEND_PATH:=$build/backends/host/.libs}"
STRATA_BACKENDS=host
export STRATA_BACKEND_PATH STRATA_BACKENDS
STEPS=${STEPS:-4}
BATCH=${BATCH:-4}
RUNS=${RUNS:-3}
bench_gpt "$tmp/gpt-512x8.json" 512 8 256 8
echo "recompute: GPT 512 x 8 layers, context 256; $STEPS steps of $BATCH sequences, $RUNS runs of each mode" \
  "alternated, options: ${*:-none}; load $(cut -d' ' -f1-3 /proc/loadavg)"
for mode in none selective full; do : >"$tmp/$mode"; done
for i in $(seq "$RUNS"); do
  for mode in none selective full; do
    if ! "$TRAIN" --model "$tmp/gpt-512x8.json" --device 0 --steps "$STEPS" --batch "$BATCH" --eval-every 0 \
      --eval-batches 1 --recompute "$mode" --json "$@" >"$tmp/$mode.json"; then
      echo "recompute: strata-train --recompute $mode failed" >&2
      exit 1
    fi
    get "$tmp/$mode.json" summary tokens_per_s >>"$tmp/$mode"
  done
done
# activation bytes of device 0 from the summary's devices[] (the last run of each mode)
act() { sed -n 's/.*"activation_bytes":\([0-9]*\).*/\1/p' "$1" | tail -n 1; }
awk -v none="$(med "$tmp/none")" -v sel="$(med "$tmp/selective")" -v full="$(med "$tmp/full")" \
  -v an="$(act "$tmp/none.json")" -v as="$(act "$tmp/selective.json")" -v af="$(act "$tmp/full.json")" 'BEGIN {
  printf "none             %.0f tokens/s (median), activations %.1f MiB\n", none, an / 1048576
  printf "selective        %.0f tokens/s (median): step time %.2fx none, activations %.1f MiB (%.3fx)\n", sel, none / sel, as / 1048576, as / an
  printf "full             %.0f tokens/s (median): step time %.2fx none, activations %.1f MiB (%.3fx) (target: at most 1.4x)\n", full, none / full, af / 1048576, af / an
  exit !(none / full <= 1.4)
}'
rc=$?
echo "recompute: load after $(cut -d' ' -f1-3 /proc/loadavg)"
[ $rc -eq 0 ] && echo "recompute: target met" || echo "recompute: target NOT met"
exit $rc
