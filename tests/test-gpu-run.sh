#!/bin/sh
# SPDX-License-Identifier: MIT
# test-gpu-run.sh — tests of the GPU harness tests/gpu/run: where the CUDA module cannot run it exits non-zero with one clear "gpu/run: FAIL:" line, naming a library the module cannot load; prints TAP.
top_builddir=${top_builddir:-.}
top_srcdir=${top_srcdir:-.}
RUN="$top_srcdir/tests/gpu/run"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/strata-gpu-run.XXXXXX") || exit 99
trap 'rm -rf "$TMP"' EXIT INT TERM
build=$(cd "$top_builddir" && pwd)

n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); echo "not ok $n - $1"; shift; for l in "$@"; do echo "# $l"; done; }
skip() { n=$((n + 1)); echo "ok $n - $1 # SKIP $2"; }

# expect_fail NAME WORDS [ENV...]: gpu/run exits non-zero, and its one FAIL line says WORDS
expect_fail() {
  name=$1 words=$2 logs="$TMP/logs-$n"
  shift 2
  (cd "$build" && env "$@" "$RUN" "$logs" >"$TMP/out" 2>"$TMP/err")
  rc=$?
  line=$(grep -h '^gpu/run: FAIL:' "$TMP/err")
  count=$(grep -c '^gpu/run: FAIL:' "$TMP/err")
  if [ "$rc" -ne 0 ] && [ "$count" -eq 1 ] && printf '%s\n' "$line" | grep -qF -- "$words" &&
    grep -qF "$line" "$logs/summary.txt"; then
    ok "$name: exit $rc, '$line'"
  else
    not_ok "$name: exits non-zero with one FAIL line saying '$words'" "rc=$rc count=$count" "$(cat "$TMP/err")" \
      "$(tail -n 5 "$TMP/out")"
  fi
}

echo "1..2"

# This machine without a GPU: the run stops before any suite, saying why.
if nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  skip "no GPU: exits non-zero with a clear line" "this machine has an NVIDIA GPU"
elif [ -f "$build/backends/cuda/.libs/strata-cuda.so" ]; then
  expect_fail "no GPU" "the CUDA backend cannot run: backend cuda: 0 device(s): no CUDA device" -u STRATA_BACKEND_PATH
else
  expect_fail "no GPU (CUDA backend not built)" "no strata-cuda.so in STRATA_BACKEND_PATH" -u STRATA_BACKEND_PATH
fi

# A module whose libraries cannot load (tests/fake/gone.c plays a missing cuBLAS): named, before any test runs.
fake="$build/tests/fake/unloadable/.libs"
if [ -f "$fake/strata-cuda.so" ]; then
  expect_fail "a module that cannot load" "strata-cuda.so cannot load: libstrata-test-gone.so not found" \
    STRATA_BACKEND_PATH="$fake:$build/backends/host/.libs"
  [ ! -f "$logs/probe.log" ] || echo "# but the probe ran past the failed check: $logs/probe.log exists"
else
  not_ok "a module that cannot load" "$fake/strata-cuda.so was not built"
fi
