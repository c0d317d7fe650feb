#!/bin/sh
# SPDX-License-Identifier: MIT
# train-parallel.sh — data and tensor parallelism on 2 host virtual devices (one thread each) against 1 device with
# one thread, on the GPT of bench/train-mfu.sh: tokens/s of each, runs alternated, medians, and the share of each
# device's time in its collectives (gradient all-reduces, tensor-parallel joins) from the trace; and, as the
# ceiling of any split over 2 devices of this box, two independent one-device runs of half the step at once. A
# benchmark, not a test.
# Usage: bench/train-parallel.sh [BUILD_DIR]      Targets: dp = 2 at least 1.8x, tp = 2 at least 1.6x one device.
set -u
. "$(dirname "$0")/lib.sh"
bench_setup train-parallel "${1:-}" strata-train
TRAIN="$build/tools/strata-train"
: "${STRATA_BACKEND_PATH:=$build/backends/host/.libs}"
STRATA_BACKENDS=host
export STRATA_BACKEND_PATH STRATA_BACKENDS
STEPS=${STEPS:-4}
BATCH=${BATCH:-2}
RUNS=${RUNS:-3}
bench_gpt "$tmp/gpt-512x8.json" 512 8 256 8
T="$TRAIN --model $tmp/gpt-512x8.json --steps $STEPS --batch $BATCH --eval-every 0 --eval-batches 1 --json"
echo "train-parallel: GPT 512 x 8 layers, context 256; $STEPS steps of 2 x $BATCH sequences, $RUNS runs alternated," \
  "load $(cut -d' ' -f1-3 /proc/loadavg)"
: >"$tmp/one"
: >"$tmp/dp"
: >"$tmp/tp"
: >"$tmp/pair"
for i in $(seq "$RUNS"); do
  STRATA_HOST_DEVICES=1 STRATA_HOST_THREADS=1 $T --device 0 --accum 2 >"$tmp/one.json" || exit 1
  get "$tmp/one.json" summary tokens_per_s >>"$tmp/one"
  # the ceiling of any 2-device split on this box: two independent one-device runs of half the step at once, each
  # on its own core but sharing the memory system
  STRATA_HOST_DEVICES=1 STRATA_HOST_THREADS=1 $T --device 0 --accum 1 >"$tmp/pa.json" &
  pa=$!
  STRATA_HOST_DEVICES=1 STRATA_HOST_THREADS=1 $T --device 0 --accum 1 >"$tmp/pb.json" || exit 1
  wait $pa || exit 1
  echo "$(get "$tmp/pa.json" summary tokens_per_s) $(get "$tmp/pb.json" summary tokens_per_s)" |
    awk '{ print $1 + $2 }' >>"$tmp/pair"
  STRATA_HOST_DEVICES=2 STRATA_HOST_THREADS=1 $T --dp 2 --microbatches 1 --trace "$tmp/dp-trace.json" >"$tmp/dp.json" || exit 1
  get "$tmp/dp.json" summary tokens_per_s >>"$tmp/dp"
  STRATA_HOST_DEVICES=2 STRATA_HOST_THREADS=1 $T --tp 2 --microbatches 2 --trace "$tmp/tp-trace.json" >"$tmp/tp.json" || exit 1
  get "$tmp/tp.json" summary tokens_per_s >>"$tmp/tp"
done
one=$(med "$tmp/one")
pair=$(med "$tmp/pair")
dp=$(med "$tmp/dp")
tp=$(med "$tmp/tp")
# each device's share of the last run's wall time in its collectives (comm events of the transfer tracks)
share() {
  python3 - "$1" <<'PY' 2>/dev/null || echo "(no python3 to read the trace)"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
x = [e for e in ev if e.get("ph") == "X"]
span = (max(e["ts"] + e["dur"] for e in x) - min(e["ts"] for e in x)) or 1
out = []
for tid in sorted({e["tid"] for e in x if e.get("cat") == "comm"}):
    c = sum(e["dur"] for e in x if e["tid"] == tid and e.get("cat") == "comm")
    out.append("device rank %d %.1f%%" % (tid // 2, 100 * c / span))
print(", ".join(out))
PY
}
dps=$(share "$tmp/dp-trace.json")
tps=$(share "$tmp/tp-trace.json")
awk -v one="$one" -v dp="$dp" -v tp="$tp" -v dps="$dps" -v tps="$tps" -v pair="$pair" 'BEGIN {
  printf "one device       %.0f tokens/s (median)\n", one
  printf "two at once      %.0f tokens/s together (median): %.2fx one device, the ceiling of a 2-device split here\n", pair, pair / one
  printf "dp = 2           %.0f tokens/s (median): %.2fx one device (target: at least 1.8x)\n", dp, dp / one
  printf "                 share of the wall time in the gradient all-reduce: %s\n", dps
  printf "tp = 2           %.0f tokens/s (median): %.2fx one device (target: at least 1.6x)\n", tp, tp / one
  printf "                 share of the wall time in the joins (TJF, TJB): %s\n", tps
  exit !(dp >= 1.8 * one && tp >= 1.6 * one)
}'
rc=$?
[ $rc -eq 0 ] && echo "train-parallel: targets met" || echo "train-parallel: a target NOT met"
exit $rc
