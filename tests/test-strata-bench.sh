#!/bin/sh
# SPDX-License-Identifier: MIT
# test-strata-bench.sh — strata-bench gemm --precision: a bf16 run's JSON line (beside oneDNN's bf16 matmul where the host backend is on oneDNN), and its refusals; allreduce --dtype bf16 over host devices; prints TAP.
top_builddir=${top_builddir:-.}
BENCH="$top_builddir/tools/strata-bench"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/strata-bench-sh.XXXXXX") || exit 99
trap 'rm -rf "$TMP"' EXIT INT TERM
STRATA_BACKENDS=host
STRATA_HOST_DEVICES=1
export STRATA_BACKENDS STRATA_HOST_DEVICES

n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); echo "not ok $n - $1"; shift; for l in "$@"; do echo "# $l"; done; }
check() { name=$1; shift; if "$@"; then ok "$name"; else not_ok "$name" "$(head -c 600 "$TMP/err" 2>/dev/null)"; fi; }

# refuses NAME WORDS ARGS...: exit 2, nothing on stdout, one stderr line holding WORDS
refuses() {
  name=$1 words=$2
  shift 2
  "$BENCH" "$@" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  check "$name" sh -c "[ $rc -eq 2 ] && [ ! -s '$TMP/out' ] && [ \$(wc -l <'$TMP/err') -eq 1 ] &&
    grep -q '^strata-bench: ' '$TMP/err' && grep -qF -- '$words' '$TMP/err'"
}

echo "1..8"
"$BENCH" gemm --precision bf16 --sizes 48 --reps 1 --json >"$TMP/out" 2>"$TMP/err"
rc=$?
check "gemm --precision bf16 --json: one line, precision bf16, strata's figure positive (exit $rc)" sh -c "
  [ $rc -eq 0 ] && [ \$(wc -l <'$TMP/out') -eq 1 ] &&
  grep -q '\"precision\":\"bf16\",\"n\":48,\"strata_gflops\":[0-9]' '$TMP/out' &&
  ! grep -q '\"strata_gflops\":0.000' '$TMP/out'"
# the peer: where the host backend runs on oneDNN, its bf16 matmul called directly
"$BENCH" gemm --sizes 48 --reps 1 >"$TMP/fp32" 2>"$TMP/err"
if grep -q 'libdnnl' "$TMP/fp32"; then
  check "gemm --precision bf16: beside oneDNN's bf16 matmul" sh -c "
    grep -q '\"direct\":\"oneDNN matmul bf16:bf16:f32\",\"direct_gflops\":[0-9]' '$TMP/out' &&
    ! grep -q '\"direct_gflops\":0.000' '$TMP/out'"
else
  ok "gemm --precision bf16: beside oneDNN's bf16 matmul # SKIP the host backend is not on oneDNN"
fi
"$BENCH" gemm --sizes 48 --reps 1 --json >"$TMP/fp32.json" 2>"$TMP/err"
check "gemm --json without --precision: fp32" grep -q '"precision":"fp32","n":48' "$TMP/fp32.json"
refuses "gemm --precision fp16: one line" "--precision wants fp32 or bf16" gemm --precision fp16
refuses "gemm --precision bf16 --compare: one line" "--compare times fp32 libraries only" gemm --precision bf16 --compare
# a bf16 all-reduce over 3 host devices, direct and ring sizes: no wrong element, the type named bf16
env STRATA_HOST_DEVICES=3 "$BENCH" allreduce --dtype bf16 --sizes 2K,1M --iters 2 --warmup 0 --json >"$TMP/ar" 2>"$TMP/err"
rc=$?
check "allreduce --dtype bf16 --json: 2 sizes, bf16, nothing wrong (exit $rc)" sh -c "
  [ $rc -eq 0 ] && [ \$(grep -c '\"type\":\"bf16\",\"redop\":\"sum\"' '$TMP/ar') -eq 2 ] &&
  grep -q '\"size\":1048576,\"count\":524288,' '$TMP/ar' && grep -q '\"wrong\":0,' '$TMP/ar'"
env STRATA_HOST_DEVICES=3 "$BENCH" allgather --type bf16 --op max --sizes 6K --iters 1 --warmup 0 >"$TMP/ag" 2>"$TMP/err"
rc=$?
check "allgather --type bf16: the table says bf16, exit $rc" sh -c "[ $rc -eq 0 ] && grep -q ' bf16 ' '$TMP/ag' &&
  grep -q 'Out of bounds values : 0 OK' '$TMP/ag'"
refuses "allreduce --dtype fp16: one line" "--type wants float32, int32 or bf16" allreduce --dtype fp16
