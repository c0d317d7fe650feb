#!/bin/sh
# SPDX-License-Identifier: MIT
# pipeline-1f1b.sh — how busy a 1F1B pipeline keeps two host virtual devices training a GPT (d_model 256, 8 layers, context 128) with strata-train, against the schedule's ideal m/(m+p-1). A benchmark, not a test.
# Usage: bench/pipeline-1f1b.sh [BUILD_DIR] [extra strata-train options...]    (BUILD_DIR default: ./build or .)
# Target: each device busy at least 90% of the ideal fraction 8/9 of the wall time.
# Busy time is the wall time of a device's compute: host virtual devices share the cores, so while
# both compute each runs slower and the fractions can pass the ideal; a device far below it still
# means the schedule leaves it waiting (transfers, unequal stages).
set -u
. "$(dirname "$0")/lib.sh"
bench_setup pipeline-1f1b "${1:-}" strata-train
[ $# -gt 0 ] && shift
TRAIN="$build/tools/strata-train"
: "${STRATA_BACKEND_PATH:=$build/backends/host/.libs}"
STRATA_BACKENDS=host
STRATA_HOST_DEVICES=2
export STRATA_BACKEND_PATH STRATA_BACKENDS STRATA_HOST_DEVICES
STEPS=${STEPS:-3}
BATCH=${BATCH:-4}
M=8
P=2
bench_gpt "$tmp/gpt-256x8.json" 256 8 128 8

echo "pipeline-1f1b: GPT d_model 256, 8 layers, 8 heads, d_ff 1024, context 128; $STEPS steps of" \
  "$M micro-batches x $BATCH sequences, 1F1B over $P host virtual devices ($(nproc 2>/dev/null || echo '?') cores)"
"$TRAIN" --model "$tmp/gpt-256x8.json" --pp $P --schedule 1f1b --microbatches $M --steps "$STEPS" \
  --batch "$BATCH" --eval-every 0 --eval-batches 1 --json "$@" >"$tmp/run.json"
rc=$?
if [ $rc -ne 0 ]; then
  echo "pipeline-1f1b: strata-train failed (exit $rc)" >&2
  exit 1
fi
# The summary's figures leave out the first step (warm-up).
summary=$(grep '"event":"summary"' "$tmp/run.json")
start=$(grep '"event":"start"' "$tmp/run.json")
field() { printf '%s\n' "$1" | sed -n "s/.*\"$2\":\\([^,}]*\\).*/\\1/p"; }
# per device: "DEVICE BUSY PEAK_BYTES INFLIGHT" lines from the summary's devices list
printf '%s\n' "$summary" | sed 's/.*"devices":\[//; s/\].*//; s/},{/}\n{/g' |
  sed -n 's/.*"device":\([0-9]*\),"busy":\([^,]*\),.*"peak_bytes":\([0-9]*\),"peak_inflight":\([0-9]*\).*/\1 \2 \3 \4/p' \
    >"$tmp/devices"
printf '%s\n' "$start" | sed 's/.*"stages":\[//; s/\].*//; s/},{/}\n{/g' |
  sed -n 's/.*"stage":\([0-9]*\),"first_layer":\([0-9]*\),"layers":\([0-9]*\),"device":\([0-9]*\).*/\1 \2 \3 \4/p' \
    >"$tmp/stages"
awk -v m=$M -v p=$P -v bubble="$(field "$summary" bubble)" -v ideal="$(field "$summary" bubble_ideal)" \
  -v wall="$(field "$summary" pipeline_wall_s)" -v tps="$(field "$summary" tokens_per_s)" \
  -v loss="$(field "$summary" loss)" -v stagefile="$tmp/stages" '
BEGIN {
  while ((getline line < stagefile) > 0) {
    split(line, s, " ")
    printf "stage %d          layers %d-%d on device %d\n", s[1], s[2], s[2] + s[3] - 1, s[4]
  }
  target = m / (m + p - 1)
  printf "steps            %.2f s of pipeline wall time after the first step, %.0f tokens/s, loss %.3f\n", wall, tps, loss
  printf "bubble           %.1f%% measured vs %.1f%% theoretical\n", 100 * bubble, 100 * ideal
  worst = 1e9
}
{
  r = $2 / target
  if (r < worst) worst = r
  printf "device %d         busy %.1f%% of the wall time vs ideal m/(m+p-1) = %d/%d = %.1f%%: %.1f%% of ideal" \
    " (peak memory %.1f MiB, %d micro-batches in flight)\n", $1, 100 * $2, m, m + p - 1, 100 * target, 100 * r,
    $3 / 1048576, $4
}
END {
  if (NR == 0) { print "pipeline-1f1b: no per-device figures in the summary"; exit 1 }
  exit !(worst >= 0.9)
}' "$tmp/devices"
rc=$?
[ $rc -eq 0 ] && echo "pipeline-1f1b: target met (every device at least 90% of the ideal)" ||
  echo "pipeline-1f1b: target NOT met"
exit $rc
