#!/bin/sh
# SPDX-License-Identifier: MIT
# train-mfu.sh — tokens/s and MFU of a GPT (d_model 512, 8 layers, context 256) trained by strata-train on the host backend, beside the measured sgemm peak. A benchmark, not a test.
# Usage: bench/train-mfu.sh [BUILD_DIR] [extra strata-train options...]    (BUILD_DIR default: ./build or .)
# Target (issue 11): MFU at least 60% of the measured single-device sgemm peak; with --precision bf16 (issue 31), at
# least 55% of the measured bf16 GEMM peak (strata-train measures the peak in the run's precision).
set -u
. "$(dirname "$0")/lib.sh"
bench_setup train-mfu "${1:-}" strata-train
[ $# -gt 0 ] && shift
TRAIN="$build/tools/strata-train"
: "${STRATA_BACKEND_PATH:=$build/backends/host/.libs}"
STRATA_BACKENDS=host
export STRATA_BACKEND_PATH STRATA_BACKENDS
STEPS=${STEPS:-4}
BATCH=${BATCH:-4}
bench_gpt "$tmp/gpt-512x8.json" 512 8 256 8

echo "train-mfu: GPT d_model 512, 8 layers, 8 heads, d_ff 2048, context 256, vocab 256;" \
  "$STEPS steps of $BATCH sequences on the host backend ($(nproc 2>/dev/null || echo '?') cores)"
"$TRAIN" --model "$tmp/gpt-512x8.json" --device 0 --steps "$STEPS" --batch "$BATCH" --eval-every 0 \
  --eval-batches 1 --json "$@" >"$tmp/run.json"
rc=$?
if [ $rc -ne 0 ]; then
  echo "train-mfu: strata-train failed (exit $rc)" >&2
  exit 1
fi
# The figures from the JSON lines; the summary's leave out the first step (warm-up).
r="$tmp/run.json"
awk -v peak="$(get "$r" summary peak_gflops)" -v n="$(get "$r" start peak_n)" -v tps="$(get "$r" summary tokens_per_s)" \
  -v mfu="$(get "$r" summary mfu)" -v fpt="$(get "$r" start flops_per_token)" -v params="$(get "$r" start params)" \
  -v loss="$(get "$r" summary loss)" -v prec="$(get "$r" start precision | tr -d '"')" 'BEGIN {
  target = prec == "bf16" ? 0.55 : 0.6
  gemm = prec == "bf16" ? "bf16 GEMM peak" : "sgemm peak"
  printf "model            %.1f M parameters, %.3f GFLOP per token (forward + backward)\n", params / 1e6, fpt / 1e9
  printf "%-16s %.1f GFLOP/s (N=%d, best of 5 before and 5 after training, strata_gemm on the same device)\n", gemm, peak, n
  printf "training         %.0f tokens/s = %.1f GFLOP/s of model FLOPs (first step excluded), loss %.3f\n", tps, tps * fpt / 1e9, loss
  printf "MFU              %.1f%% of the measured peak (target: at least %.0f%%)\n", 100 * mfu, 100 * target
  exit !(mfu >= target)
}'
rc=$?
[ $rc -eq 0 ] && echo "train-mfu: target met" || echo "train-mfu: target NOT met"
exit $rc
