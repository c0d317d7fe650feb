#!/bin/sh
# SPDX-License-Identifier: MIT
# zero.sh — tokens/s of ZeRO-3 dp 2 (each layer's weights gathered from the replicas' shards, prefetched) against plain dp 2 on two host virtual devices, the 512x8 GPT of train-mfu.sh. A benchmark, not a test.
# Usage: bench/zero.sh [BUILD_DIR] [extra strata-train options...]    (BUILD_DIR default: ./build or .)
# Environment: STEPS (default 4 a run), BATCH (sequences a step, default 4), RUNS (runs of each side, default 5),
# LAYERS (default 8), D_MODEL (default 512), CONTEXT (default 256): tiny values make a quick check of the script.
# The two sides alternate (plain, ZeRO-3, plain, ...) so that a change of the machine's load hits both; each side's
# figure is the median of its runs' tokens/s (the first step of a run excluded); the load average is printed before
# and after. Target (issue 32): ZeRO-3 at least 0.85x plain dp 2's tokens/s.
set -u
. "$(dirname "$0")/lib.sh"
bench_setup zero "${1:-}" strata-train
[ $# -gt 0 ] && shift
TRAIN="$build/tools/strata-train"
: "${STRATA_BACKEND_PATH:=$build/backends/host/.libs}"
STRATA_BACKENDS=host
STRATA_HOST_DEVICES=2
export STRATA_BACKEND_PATH STRATA_BACKENDS STRATA_HOST_DEVICES
STEPS=${STEPS:-4}
BATCH=${BATCH:-4}
RUNS=${RUNS:-5}
LAYERS=${LAYERS:-8}
D_MODEL=${D_MODEL:-512}
CONTEXT=${CONTEXT:-256}
bench_gpt "$tmp/gpt.json" "$D_MODEL" "$LAYERS" "$CONTEXT" 8
# a corpus of bytes long enough for the steps (the tokens do not change the time)
head -c $((BATCH * (CONTEXT + 1) * (STEPS + 2) * 2 + 4096)) /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/text.txt"

load() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?'; }
echo "zero: GPT d_model $D_MODEL, $LAYERS layers, context $CONTEXT; dp 2 on 2 host virtual devices" \
  "($(nproc 2>/dev/null || echo '?') cores), $STEPS steps of $BATCH sequences, $RUNS runs a side, alternating;" \
  "load $(load)"
: >"$tmp/plain"
: >"$tmp/zero3"
for i in $(seq 1 "$RUNS"); do
  for side in plain zero3; do
    z=""
    [ "$side" = zero3 ] && z="--zero=3"
    # shellcheck disable=SC2086
    "$TRAIN" --model "$tmp/gpt.json" --data "$tmp/text.txt" --dp 2 $z --steps "$STEPS" --batch "$BATCH" \
      --eval-every 0 --eval-batches 1 --json "$@" >"$tmp/run.json" 2>"$tmp/err"
    rc=$?
    if [ $rc -ne 0 ]; then
      echo "zero: strata-train ($side) failed (exit $rc): $(head -c 300 "$tmp/err")" >&2
      exit 1
    fi
    t=$(get "$tmp/run.json" summary tokens_per_s)
    echo "$t" >>"$tmp/$side"
    echo "  run $i $side: $t tokens/s"
  done
done
awk -v p="$(med "$tmp/plain")" -v z="$(med "$tmp/zero3")" -v load="$(load)" 'BEGIN {
  printf "plain dp 2   %.0f tokens/s (median)\n", p
  printf "ZeRO-3 dp 2  %.0f tokens/s (median), %.2fx plain (target: at least 0.85x); load %s\n", z, (p > 0 ? z / p : 0), load
  exit !(p > 0 && z >= 0.85 * p)
}'
rc=$?
[ $rc -eq 0 ] && echo "zero: target met" || echo "zero: target NOT met"
exit $rc
