#!/bin/sh
# SPDX-License-Identifier: MIT
# spatial.sh — spatial parallelism (issue 34): cnn-hires (512x512 images) with --spatial 2 on two host virtual devices
# (one thread each) against one device with one thread, images/s of each, and the share of each slab's time in its
# halo exchanges (and in all its joins) from a traced run. Both sides run steps of BATCH images in one micro-batch. A
# benchmark, not a test.
# Usage: bench/spatial.sh [BUILD_DIR] [extra strata-train options...]    (BUILD_DIR default: ./build or .)
# Environment: STEPS (default 6 a run), BATCH (images a step, default 2), RUNS (runs of each side, default 5): small
# values make a quick check of the script. The sides alternate (one, spatial 2, one, ...) so that a change of the
# machine's load hits both; each side's figure is the median of its runs' images/s (the summary's tokens_per_s: a cnn's
# sample is one image); the load average is printed before and after. Target (issue 34): --spatial 2 at least 1.7x one
# device's images/s.
set -u
. "$(dirname "$0")/lib.sh"
bench_setup spatial "${1:-}" strata-train
[ $# -gt 0 ] && shift
TRAIN="$build/tools/strata-train"
: "${STRATA_BACKEND_PATH:=$build/backends/host/.libs}"
STRATA_BACKENDS=host
STRATA_HOST_THREADS=1
export STRATA_BACKEND_PATH STRATA_BACKENDS STRATA_HOST_THREADS
STEPS=${STEPS:-6}
BATCH=${BATCH:-2}
RUNS=${RUNS:-5}

load() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?'; }
echo "spatial: cnn-hires (512x512), $STEPS steps of $BATCH images; one host device (1 thread) against --spatial 2" \
  "on 2 host virtual devices (1 thread each), $(nproc 2>/dev/null || echo '?') cores, $RUNS runs a side," \
  "alternating; load $(load)"
: >"$tmp/one"
: >"$tmp/sp2"
for i in $(seq 1 "$RUNS"); do
  for side in one sp2; do
    if [ "$side" = one ]; then
      devs=1 cut="--device 0" trace=""
    else
      # one micro-batch of BATCH images, as the one device's step (--spatial alone takes tp's default of 2)
      devs=2 cut="--spatial 2 --microbatches 1"
    fi
    # shellcheck disable=SC2086
    STRATA_HOST_DEVICES=$devs "$TRAIN" --model cnn-hires $cut --steps "$STEPS" --batch "$BATCH" \
      --eval-every 0 --eval-batches 1 --json "$@" >"$tmp/run.json" 2>"$tmp/err"
    rc=$?
    if [ $rc -ne 0 ]; then
      echo "spatial: strata-train ($side) failed (exit $rc): $(head -c 300 "$tmp/err")" >&2
      exit 1
    fi
    t=$(get "$tmp/run.json" summary tokens_per_s)
    echo "$t" >>"$tmp/$side"
    echo "  run $i $side: $t images/s"
  done
done
# each slab's share of the training steps' wall time (the first step left out) in its halo exchanges ("halo", "halo_grad"
# events of its transfer track) and in all its joins (with the averages' and the gradients' sums), from one more run
# with --trace (untimed: the timed runs of both sides trace nothing). An exchange's event spans its data's move and the
# wait for the other slab; the backward's halo-gradient exchanges and gradient sums overlap compute (the weights'
# gradient, the layers before), so their share is of the time they took, not all of it time the slab waited.
# shellcheck disable=SC2086
STRATA_HOST_DEVICES=2 "$TRAIN" --model cnn-hires --spatial 2 --microbatches 1 --trace "$tmp/trace.json" --steps "$STEPS" \
  --batch "$BATCH" --eval-every 0 --eval-batches 1 --json "$@" >"$tmp/run.json" 2>"$tmp/err" ||
  echo "spatial: the traced run failed: $(head -c 300 "$tmp/err")" >&2
shares=$(python3 - "$tmp/trace.json" <<'PY' 2>/dev/null || echo "(no python3 to read the trace)"
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X" and e["args"].get("step", 0) >= 2]
out = []
for dev in sorted({e["tid"] // 2 for e in ev}):
    mine = [e for e in ev if e["tid"] // 2 == dev and e.get("cat") != "idle"]
    span = (max(e["ts"] + e["dur"] for e in mine) - min(e["ts"] for e in mine)) or 1
    comm = [e for e in mine if e.get("cat") == "comm"]
    halo = sum(e["dur"] for e in comm if e["args"].get("collective") in ("halo", "halo_grad"))
    out.append("slab %d: %.1f%% halo, %.1f%% all joins" % (dev, 100 * halo / span, 100 * sum(e["dur"] for e in comm) / span))
print("; ".join(out))
PY
)
awk -v o="$(med "$tmp/one")" -v s="$(med "$tmp/sp2")" -v shares="$shares" -v load="$(load)" 'BEGIN {
  printf "one device     %.2f images/s (median)\n", o
  printf "--spatial 2    %.2f images/s (median), %.2fx one device (target: at least 1.7x); load %s\n", s, (o > 0 ? s / o : 0), load
  printf "               share of the steps in exchanges: %s\n", shares
  exit !(o > 0 && s >= 1.7 * o)
}'
rc=$?
[ $rc -eq 0 ] && echo "spatial: target met" || echo "spatial: target NOT met"
exit $rc
