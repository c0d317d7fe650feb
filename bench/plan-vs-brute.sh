#!/bin/sh
# SPDX-License-Identifier: MIT
# plan-vs-brute.sh — the planner against brute force on this box: on 2 host virtual devices and 1 PoCL device, strata-plan's chosen layout measured with strata-train beside every other layout tried (the planner's next candidates and a fixed set of the usual cuts). A benchmark, not a test.
# Usage: bench/plan-vs-brute.sh [BUILD_DIR]    (BUILD_DIR default: ./build or .)
# Environment: STEPS (default 8; the first is warm-up and left out: with 4, near-identical layouts measured 15% apart), TOP (planner candidates measured,
# default 6), D_MODEL / LAYERS / CONTEXT / BATCH (default 512 / 8 / 256 / 8: bench/train-mfu.sh's model;
# smaller ones finish sooner on a loaded machine), POCL_CACHE_DIR (as sim-vs-real.sh). Needs python3
# to read strata-plan's JSON.
# Target: the planner's layout within 10% of the best measured.
set -u
. "$(dirname "$0")/lib.sh"
bench_setup plan-vs-brute "${1:-}" strata-train strata-plan strata-bench
TRAIN="$build/tools/strata-train" PLAN="$build/tools/strata-plan" BENCH="$build/tools/strata-bench"
if ! command -v python3 >/dev/null 2>&1; then
  echo "plan-vs-brute: needs python3 to read strata-plan --json" >&2
  exit 2
fi
: "${STRATA_BACKEND_PATH:=$build/backends/host/.libs:$build/backends/opencl/.libs}"
# device 0: PoCL; 1 and 2: host virtual devices
STRATA_BACKENDS=host,opencl STRATA_HOST_DEVICES=2 POCL_DEVICES=pthread
: "${POCL_CACHE_DIR:=${TMPDIR:-/tmp}/strata-pocl-cache}"
mkdir -p "$POCL_CACHE_DIR"
export STRATA_BACKEND_PATH STRATA_BACKENDS STRATA_HOST_DEVICES POCL_DEVICES POCL_CACHE_DIR
STEPS=${STEPS:-8} TOP=${TOP:-6} D_MODEL=${D_MODEL:-512} LAYERS=${LAYERS:-8} CONTEXT=${CONTEXT:-256} BATCH=${BATCH:-8}

bench_gpt "$tmp/model.json" "$D_MODEL" "$LAYERS" "$CONTEXT" 8
echo "# plan-vs-brute: GPT d_model $D_MODEL, $LAYERS layers, context $CONTEXT, global batch $BATCH;" \
  "devices 0 PoCL, 1-2 host virtual; $(nproc 2>/dev/null || echo '?') cores"
echo "# load at start (/proc/loadavg): $(cat /proc/loadavg 2>/dev/null)"
if ! "$BENCH" calibrate --out "$tmp/cal.json" >"$tmp/cal.log" 2>&1; then
  echo "plan-vs-brute: calibration failed:" >&2
  cat "$tmp/cal.log" >&2
  exit 1
fi
if ! "$PLAN" --calibration "$tmp/cal.json" --model "$tmp/model.json" --batch "$BATCH" --top "$TOP" --json \
    >"$tmp/plan.json" 2>"$tmp/plan.err"; then
  echo "plan-vs-brute: strata-plan failed: $(cat "$tmp/plan.err")" >&2
  exit 1
fi
# one line per layout: name|rows per micro-batch|predicted s|layout JSON; the planner's first
python3 - "$tmp/plan.json" "$BATCH" >"$tmp/layouts" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
batch = int(sys.argv[2])
seen = set()
def emit(name, layout, predicted):
    key = json.dumps(layout, sort_keys=True)
    if key in seen:
        return
    seen.add(key)
    rows = batch // (layout["dp"] * layout["microbatches"])
    print("%s|%d|%s|%s" % (name, rows, predicted, json.dumps(layout)))
for c in plan["candidates"]:
    emit("planner #%d" % c["rank"], c["layout"], "%.4f" % c["step_s"])
# the usual cuts by hand, split left to strata-train (balanced by its own timing of the devices)
m = 4 if batch % 4 == 0 else 1
fixed = [
    ("host 1 alone", {"dp": 1, "pp": 1, "tp": 1, "devices": [1], "schedule": "1f1b", "microbatches": m}),
    ("host dp2", {"dp": 2, "pp": 1, "tp": 1, "devices": [1, 2], "schedule": "1f1b", "microbatches": m // 2 or 1}),
    ("host pp2 1f1b", {"dp": 1, "pp": 2, "tp": 1, "devices": [1, 2], "schedule": "1f1b", "microbatches": m}),
    ("host tp2", {"dp": 1, "pp": 1, "tp": 2, "devices": [1, 2], "schedule": "1f1b", "microbatches": m}),
    ("all 3 pp3 1f1b", {"dp": 1, "pp": 3, "tp": 1, "devices": [1, 2, 0], "schedule": "1f1b", "microbatches": m}),
    ("pocl 0 alone", {"dp": 1, "pp": 1, "tp": 1, "devices": [0], "schedule": "1f1b", "microbatches": m}),
]
for name, l in fixed:
    l = dict({"schema": "strata-layout/1"}, **l)
    if batch % (l["dp"] * l["microbatches"]) == 0:
        emit(name, l, "-")
PY

printf '%-14s %12s %12s  %s\n' "layout" "predicted s" "measured s" "layout"
while IFS='|' read -r name rows predicted body; do
  printf '%s\n' "$body" >"$tmp/layout.json"
  if ! "$TRAIN" --model "$tmp/model.json" --layout "$tmp/layout.json" --batch "$rows" --steps "$STEPS" \
      --eval-every 0 --eval-batches 1 --json >"$tmp/train.json" 2>"$tmp/train.err"; then
    printf '%-14s %12s %12s  %s (strata-train: %s)\n' "$name" "$predicted" "failed" "$body" "$(tail -n 1 "$tmp/train.err")"
    continue
  fi
  measured=$(grep '"event":"step"' "$tmp/train.json" | sed -n 's/.*"step_s":\([0-9.eE+-]*\).*/\1/p' | sed 1d |
    sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2];
      else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
  printf '%-14s %12s %12.4f  %s\n' "$name" "$predicted" "$measured" "$body"
  echo "$name|$measured" >>"$tmp/measured"
done <"$tmp/layouts"
echo "# load at end (/proc/loadavg): $(cat /proc/loadavg 2>/dev/null)"
[ -s "$tmp/measured" ] || exit 1
awk -F'|' '{ if (NR == 1) { chosen = $2; cname = $1 } if (best == "" || $2 < best) { best = $2; bname = $1 } }
  END {
    r = 100 * (chosen - best) / best
    printf "# planner chose %s: %.4f s; best measured %s: %.4f s; %.1f%% slower (target: within 10%%)\n",
      cname, chosen, bname, best, r
    exit !(r <= 10)
  }' "$tmp/measured"
