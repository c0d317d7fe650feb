#!/bin/sh
# SPDX-License-Identifier: MIT
# hetero.sh — two devices of 2:1 speed: host virtual device 1 slowed twice (STRATA_HOST_SLOW=1:2), one thread each.
# Calibrates them (strata-bench calibrate), asks strata-plan for the best layout of a 12-block GPT on them, and
# measures its step time against the even split of the same pipeline (devices, schedule and micro-batches the
# planner's), runs alternated, medians. A benchmark, not a
# test: the planner's split should be about 2:1 and its step faster than the even split's.
# Usage: bench/hetero.sh [BUILD_DIR]          RUNS (default 3), STEPS (default 6), BATCH (global, default 8)
set -u
. "$(dirname "$0")/lib.sh"
bench_setup hetero "${1:-}" strata-train strata-plan strata-bench
command -v python3 >/dev/null || { echo "hetero: needs python3 to read the layout file" >&2; exit 2; }
: "${STRATA_BACKEND_PATH:=$build/backends/host/.libs}"
STRATA_BACKENDS=host STRATA_HOST_DEVICES=2 STRATA_HOST_THREADS=1 STRATA_HOST_SLOW=1:2
export STRATA_BACKEND_PATH STRATA_BACKENDS STRATA_HOST_DEVICES STRATA_HOST_THREADS STRATA_HOST_SLOW
RUNS=${RUNS:-3}
STEPS=${STEPS:-6}
BATCH=${BATCH:-8}
bench_gpt "$tmp/gpt.json" 256 12 64 4
echo "hetero: 2 host devices, device 1 slowed 2x, 1 thread each; GPT 256 x 12 blocks, context 64, $BATCH sequences" \
  "per step; load $(cut -d' ' -f1-3 /proc/loadavg)"
"$build/tools/strata-bench" calibrate --out "$tmp/cal.json" >"$tmp/cal.out" 2>&1 || { cat "$tmp/cal.out"; exit 1; }
"$build/tools/strata-plan" --model "$tmp/gpt.json" --batch "$BATCH" --calibration "$tmp/cal.json" --tp 1 \
  --out "$tmp/plan.json" >"$tmp/plan.out" 2>&1 || { cat "$tmp/plan.out"; exit 1; }
read -r pp m split devices schedule even v <<EOF
$(python3 -c '
import json, sys
l = json.load(open(sys.argv[1]))
split = l.get("split") or []
pp, k = l.get("pp", 1), len(split)
# the even split of the same stages: every device the same layers, its stages as equal as they can be
even = []
for s in range(k):
    d, j, v = s % pp, s // pp, k // pp
    share = sum(split) // pp + (d < sum(split) % pp)
    even.append(share // v + (j < share % v))
print(pp, l.get("microbatches", 1), ",".join(map(str, split)), ",".join(str(x) for x in l.get("devices") or [0, 1]),
      l.get("schedule", "1f1b"), ",".join(map(str, even)) or "-", l.get("virtual_stages", 1))' "$tmp/plan.json")
EOF
echo "planner   $(grep -m1 -i "best\|chosen\|^1" "$tmp/plan.out" | cut -c1-150)"
echo "          layout: pp $pp on devices $devices, $schedule, $m micro-batches, split ${split:-balanced by the library}"
if [ "$pp" != 2 ] || [ -z "$split" ]; then
  echo "hetero: the planner chose no 2-stage pipeline with a split; nothing to compare" >&2
  cat "$tmp/plan.out"
  exit 1
fi
mb=$((BATCH / m))
T="$build/tools/strata-train --model $tmp/gpt.json --steps $STEPS --eval-every 0 --eval-batches 1 --json"
: >"$tmp/planned"
: >"$tmp/even"
for i in $(seq "$RUNS"); do
  $T --layout "$tmp/plan.json" --batch "$mb" >"$tmp/p.json" || exit 1
  get "$tmp/p.json" summary tokens_per_s >>"$tmp/planned"
  vs=""
  [ "$v" -gt 1 ] && vs="--virtual-stages $v"
  $T --pp 2 --devices "$devices" --schedule "$schedule" $vs --split "$even" --microbatches "$m" --batch "$mb" \
    >"$tmp/e.json" || exit 1
  get "$tmp/e.json" summary tokens_per_s >>"$tmp/even"
done
awk -v p="$(med "$tmp/planned")" -v e="$(med "$tmp/even")" -v sp="$split" -v ev="$even" -v load="$(cut -d' ' -f1-3 /proc/loadavg)" 'BEGIN {
  printf "planned   split %s: %.0f tokens/s (median)\n", sp, p
  printf "even      split %s: %.0f tokens/s (median)\n", ev, e
  printf "          the planned split is %.2fx the even one (load %s)\n", p / e, load
  exit !(p > e)
}'
