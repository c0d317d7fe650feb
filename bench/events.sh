#!/bin/sh
# SPDX-License-Identifier: MIT
# events.sh — tokens/s and host waits per step of a pp 2 pipeline over a PoCL device and a host device (and of pp 2 over two host devices), for one build or a build before and after a change of the executor. A benchmark, not a test.
# Usage: bench/events.sh [BUILD_DIR] [BEFORE_BUILD_DIR]    (BUILD_DIR default: ./build or .)
# Environment: STEPS (default 6: the summary leaves the first out), RUNS (default 3: medians), M micro-batches
# (default 8), BATCH sequences per micro-batch (default 4), D_MODEL (default 128), LAYERS (default 4), CONTEXT
# (default 64).
# Target (issue 36, item 5): with the event-chained executor, PoCL + host no slower than before, and the host waits
# per step counted by the trainer (--json's host_waits_per_step) per message and per stage, not per micro-batch. A
# build without the count prints "-" for it. Timings belong to a quiet machine.
set -u
. "$(dirname "$0")/lib.sh"
bench_setup events "${1:-}" strata-train
before=${2:-}
if [ -n "$before" ] && [ ! -x "$before/tools/strata-train" ]; then
  echo "events: no $before/tools/strata-train; build it first, or pass its build directory" >&2
  exit 2
fi
STEPS=${STEPS:-6}
RUNS=${RUNS:-3}
M=${M:-8}
BATCH=${BATCH:-4}
D_MODEL=${D_MODEL:-128}
LAYERS=${LAYERS:-4}
CONTEXT=${CONTEXT:-64}
POCL_DEVICES=pthread
POCL_CACHE_DIR=${POCL_CACHE_DIR:-$HOME/.cache/strata-pocl}
STRATA_BALANCE=rated # (the same cut in every run and build: a timed GEMM on a busy machine may cut otherwise)
export POCL_DEVICES POCL_CACHE_DIR STRATA_BALANCE
mkdir -p "$POCL_CACHE_DIR"
bench_gpt "$tmp/gpt.json" "$D_MODEL" "$LAYERS" "$CONTEXT" 4

# one NAME BUILD BACKENDS HOST_DEVICES: RUNS runs; prints "tokens/s waits/step" (medians)
one() {
  : >"$tmp/tps"
  : >"$tmp/waits"
  i=0
  while [ $i -lt "$RUNS" ]; do
    STRATA_BACKEND_PATH=$2/backends/host/.libs:$2/backends/opencl/.libs STRATA_BACKENDS=$3 STRATA_HOST_DEVICES=$4 \
      "$2/tools/strata-train" --model "$tmp/gpt.json" --pp 2 --devices 0,1 --schedule 1f1b --microbatches "$M" \
      --steps "$STEPS" --batch "$BATCH" --eval-every 0 --eval-batches 1 --json >"$tmp/run.json" 2>"$tmp/run.err"
    rc=$?
    if [ $rc -ne 0 ]; then
      echo "events: $1: strata-train failed (exit $rc): $(tail -n 1 "$tmp/run.err")" >&2
      return 1
    fi
    get "$tmp/run.json" summary tokens_per_s >>"$tmp/tps"
    w=$(get "$tmp/run.json" summary host_waits_per_step)
    [ -n "$w" ] && echo "$w" >>"$tmp/waits"
    i=$((i + 1))
  done
  w=-
  [ -s "$tmp/waits" ] && w=$(med "$tmp/waits")
  echo "$(med "$tmp/tps") $w"
}

echo "events: GPT d_model $D_MODEL, $LAYERS layers, context $CONTEXT; 1F1B pp 2, $M micro-batches x $BATCH sequences," \
  "$STEPS steps, medians of $RUNS runs ($(nproc 2>/dev/null || echo '?') cores)"
fail=0
for setup in "pocl+host host,opencl 1" "host+host host 2"; do
  set -- $setup
  name=$1 backends=$2 ndev=$3
  after=$(one "$name" "$build" "$backends" "$ndev") || { fail=1; continue; }
  set -- $after
  printf '%-10s %-7s %10.0f tokens/s  %6s host waits/step\n' "$name" after "$1" "$2"
  if [ -n "$before" ]; then
    prior=$(one "$name" "$before" "$backends" "$ndev") || { fail=1; continue; }
    tps_after=$1
    set -- $prior
    printf '%-10s %-7s %10.0f tokens/s  %6s host waits/step\n' "$name" before "$1" "$2"
    awk -v a="$tps_after" -v b="$1" -v n="$name" 'BEGIN {
      printf "%-10s ratio   %10.3f (after / before; target >= 1, no slower)\n", n, (b > 0 ? a / b : 0) }'
  fi
done
exit $fail
