#!/bin/sh
# SPDX-License-Identifier: MIT
# schedules.sh — the zero-bubble V schedules against 1F1B and ZB-H1: pp 4 over 4 host virtual devices (one thread each), the GPT of bench/train-mfu.sh (d_model 512, 8 layers, context 256), 8 micro-batches: tokens/s and measured bubble of 1f1b, zb, zbv and dualpipev (runs alternated, medians), each beside its ideal bubble (unit costs) and the simulator's prediction for the same layout. A benchmark, not a test.
# Usage: bench/schedules.sh [BUILD_DIR] [extra strata-train options, e.g. --precision bf16]
# Environment: STEPS (default 4 a run; the summary leaves the first out), BATCH (sequences a micro-batch, default 1),
# RUNS (default 3 runs of each schedule, alternated). The simulator predicts from one calibration of the four devices
# (strata-bench calibrate, the model's own GEMMs) taken before the runs; without one (calibrate refuses while the
# machine's load moves a device's speed) the predictions read "-".
# Issue 35: ZB-V's and DualPipeV's bubble below 1F1B's and ZB-H1's at the same pp and micro-batches, and their
# activations per device against 1F1B's (the table's last column); no pass/fail
# target (the figures depend on the machine's load, stated before and after).
set -u
. "$(dirname "$0")/lib.sh"
bench_setup schedules "${1:-}" strata-train strata-plan strata-bench
[ $# -gt 0 ] && shift
TRAIN="$build/tools/strata-train" PLAN="$build/tools/strata-plan" BENCH="$build/tools/strata-bench"
: "${STRATA_BACKEND_PATH:=$build/backends/host/.libs}"
STRATA_BACKENDS=host STRATA_HOST_DEVICES=4 STRATA_HOST_THREADS=1
export STRATA_BACKEND_PATH STRATA_BACKENDS STRATA_HOST_DEVICES STRATA_HOST_THREADS
STEPS=${STEPS:-4}
BATCH=${BATCH:-1}
RUNS=${RUNS:-3}
for v in STEPS BATCH RUNS; do
  eval "x=\$$v"
  case $x in '' | *[!0-9]* | 0) echo "schedules: $v must be a whole number from 1" >&2; exit 2 ;; esac
done
M=8
SCHEDULES="1f1b zb zbv dualpipev"
bench_gpt "$tmp/gpt-512x8.json" 512 8 256 8
# the layouts, split given so that the trainer and the simulator cut alike: 10 layers (embedding, 8 blocks, head)
# over 4 stages, or the V's 8 chunks (device d holds chunks d and 7 - d)
for s in $SCHEDULES; do
  case $s in
  zbv | dualpipev) split="2,1,1,1,1,1,1,2" ;;
  *) split="3,2,2,3" ;;
  esac
  printf '{"schema": "strata-layout/1", "dp":1, "pp":4, "tp":1, "devices":[0,1,2,3], "split":[%s], "schedule":"%s", "microbatches":%d}\n' \
    "$split" "$s" "$M" >"$tmp/$s.layout.json"
  : >"$tmp/$s.tps"
  : >"$tmp/$s.bubble"
done

echo "schedules: GPT d_model 512, 8 layers, 8 heads, d_ff 2048, context 256; pp 4 over 4 host virtual devices" \
  "(1 thread each, $(nproc 2>/dev/null || echo '?') cores), $M micro-batches of $BATCH sequences, $STEPS steps a run," \
  "$RUNS runs of each schedule alternated, options: ${*:-none}"
echo "schedules: load at start $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"

# the simulator's prediction of each layout, from one calibration of the four devices
cal=
if "$BENCH" calibrate --devices 0,1,2,3 --model "$tmp/gpt-512x8.json" --rows "$BATCH" --out "$tmp/cal.json" \
    >"$tmp/cal.log" 2>&1; then
  cal="$tmp/cal.json"
else
  echo "schedules: no calibration, so no predictions: $(tail -n 1 "$tmp/cal.log")"
fi
for s in $SCHEDULES; do
  echo "- -" >"$tmp/$s.sim"
  [ -n "$cal" ] || continue
  if "$PLAN" --simulate "$tmp/$s.layout.json" --calibration "$cal" --model "$tmp/gpt-512x8.json" \
      --batch $((BATCH * M)) --json >"$tmp/$s.plan.json" 2>"$tmp/$s.plan.err"; then
    printf '%s %s\n' "$(sed -n 's/.*"tokens_per_s": *\([0-9.eE+-]*\).*/\1/p' "$tmp/$s.plan.json" | head -n 1)" \
      "$(sed -n 's/.*"bubble": *\([0-9.eE+-]*\).*/\1/p' "$tmp/$s.plan.json" | head -n 1)" >"$tmp/$s.sim"
  else
    echo "schedules: strata-plan --simulate of $s failed: $(tail -n 1 "$tmp/$s.plan.err")"
  fi
done

for i in $(seq "$RUNS"); do
  for s in $SCHEDULES; do
    if ! "$TRAIN" --model "$tmp/gpt-512x8.json" --layout "$tmp/$s.layout.json" --batch "$BATCH" --steps "$STEPS" \
        --eval-every 0 --eval-batches 1 --json "$@" >"$tmp/$s.json" 2>"$tmp/$s.err"; then
      echo "schedules: strata-train --schedule $s failed: $(tail -n 1 "$tmp/$s.err")" >&2
      exit 1
    fi
    get "$tmp/$s.json" summary tokens_per_s >>"$tmp/$s.tps"
    get "$tmp/$s.json" summary bubble >>"$tmp/$s.bubble"
  done
done

printf '%-10s %12s %10s %10s   %12s %10s   %s\n' schedule "tokens/s" bubble ideal "sim tokens/s" "sim bubble" \
  "activation MB per device (accounting), most / 1F1B's most"
# the activation bytes of each device from the summary's devices[] (the last run); 1F1B's most for the ratio
acts_of() {
  grep '"event":"summary"' "$tmp/$1.json" | sed 's/},{/}\n{/g' | sed -n 's/.*"activation_bytes":\([0-9]*\).*/\1/p' |
    tr '\n' ' '
}
ref=$(acts_of 1f1b | awk '{ m = 0; for (i = 1; i <= NF; i++) if ($i > m) m = $i; print m }')
for s in $SCHEDULES; do
  acts=$(acts_of "$s" | awk -v ref="$ref" '{
    m = 0
    for (i = 1; i <= NF; i++) { printf "%.1f ", $i / 1e6; if ($i > m) m = $i }
    if (ref > 0) printf "(%.2fx)", m / ref
  }')
  read -r simt simb <"$tmp/$s.sim"
  awk -v s="$s" -v t="$(med "$tmp/$s.tps")" -v b="$(med "$tmp/$s.bubble")" \
    -v ideal="$(get "$tmp/$s.json" start bubble_ideal)" -v simt="$simt" -v simb="$simb" -v acts="$acts" 'BEGIN {
    st = simt == "-" ? "-" : sprintf("%.0f", simt)
    sb = simb == "-" ? "-" : sprintf("%.1f%%", 100 * simb)
    printf "%-10s %12.0f %9.1f%% %9.1f%%   %12s %10s   %s\n", s, t, 100 * b, 100 * ideal, st, sb, acts
  }'
done
echo "schedules: tokens/s and bubble are medians of $RUNS runs (the summary's, first step left out); ideal: the" \
  "lists' bubble for unit costs (F = BI = W); sim: strata-plan --simulate from the calibration before the runs;" \
  "activations: each device's slots of the micro-batches its list keeps in flight (a stage's output not among them:" \
  "it waits in an output buffer until sent) and its dsave regions (MB = 1e6 bytes), and the most of any device" \
  "against 1F1B's most (the memory that must fit)"
echo "schedules: load at end $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
