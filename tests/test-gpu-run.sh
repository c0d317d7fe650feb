#!/bin/sh
# SPDX-License-Identifier: MIT
# test-gpu-run.sh — tests of the GPU harness tests/gpu/run and tests/gpu/prepare: where the CUDA module cannot run, run exits non-zero with one clear "gpu/run: FAIL:" line (in $OUT/summary.txt when OUT is set), naming a library the module cannot load; prepare's archive stays under 64 MiB without CUDA libraries; past the probe (a fake CUDA module) every suite runs its CUDA cases and the run ends on one summary line; test-mpi-nccl.sh that cannot run skips whole (exit 77); prints TAP.
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

echo "1..7"

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

# OUT set and no folder given: the logs go to $OUT (the GPU machine returns only what is written there).
out="$TMP/outdir"
mkdir -p "$out" "$TMP/cwd"
(cd "$build" && env -u STRATA_BACKEND_PATH OUT="$out" "$RUN" >"$TMP/out.log" 2>"$TMP/err")
rc=$?
line=$(grep -h '^gpu/run: FAIL:' "$TMP/err")
if nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  skip "OUT set: summary.txt under \$OUT" "this machine has an NVIDIA GPU"
elif [ "$rc" -ne 0 ] && [ -n "$line" ] && [ -f "$out/summary.txt" ] && grep -qF "$line" "$out/summary.txt" &&
  [ ! -d "$build/gpu-logs" ]; then
  ok "OUT set, no folder: exit $rc, \$OUT/summary.txt says '$line'"
else
  not_ok "OUT set, no folder: \$OUT/summary.txt holds the FAIL line" "rc=$rc" "$(cat "$TMP/err")" \
    "$(ls -la "$out" 2>&1)"
fi

# test-mpi-nccl.sh that cannot run here (no MPI configured, no mpirun or no CUDA device) skips whole: its plan
# "1..0 # SKIP why", exit 77 (tests/run-test and tests/gpu/run count it as skipped, never as passed).
if nvidia-smi -L 2>/dev/null | grep -q '^GPU' && command -v mpirun >/dev/null 2>&1 &&
  grep -q '^#define STRATA_HAVE_MPI 1' "$build/config.h"; then
  skip "test-mpi-nccl.sh skips whole" "this machine can run it"
else
  top_builddir=$build STRATA_TEST_REQUIRE_CUDA=0 sh "$top_srcdir/tests/test-mpi-nccl.sh" >"$TMP/mpi.out" 2>&1
  rc=$?
  if [ "$rc" -eq 77 ] && head -n 1 "$TMP/mpi.out" | grep -q '^1\.\.0 # SKIP .' && [ "$(wc -l <"$TMP/mpi.out")" -eq 1 ]; then
    ok "test-mpi-nccl.sh skips whole, exit 77, saying: $(sed 's/^1\.\.0 # SKIP //' "$TMP/mpi.out")"
  else
    not_ok "test-mpi-nccl.sh skips whole with exit 77" "rc=$rc" "$(cat "$TMP/mpi.out")"
  fi
fi

# prepare's archive: under 64 MiB, no CUDA library in it, and run --bundle runs from it (here: up to its FAIL line).
PREPARE="$top_srcdir/tests/gpu/prepare"
if [ ! -f "$build/backends/cuda/.libs/strata-cuda.so" ]; then
  skip "prepare: an archive under 64 MiB without CUDA libraries" "the CUDA backend is not built here"
  skip "run --bundle with OUT set" "the CUDA backend is not built here"
else
  if (cd "$build" && sh "$PREPARE" --out "$TMP/bundle.tar.gz" >"$TMP/prep.out" 2>&1); then
    size=$(wc -c <"$TMP/bundle.tar.gz")
    cudalibs=$(tar -tzf "$TMP/bundle.tar.gz" | grep -E 'lib(cudart|cublas|nccl|cuda)\.' || :)
    if [ "$size" -lt $((64 * 1024 * 1024)) ] && [ -z "$cudalibs" ] &&
      tar -tzf "$TMP/bundle.tar.gz" | grep -q 'backends/cuda/\.libs/strata-cuda\.so$' &&
      tar -tzf "$TMP/bundle.tar.gz" | grep -q 'tests/\.libs/test-cuda$'; then
      ok "$(cat "$TMP/prep.out")"
    else
      not_ok "prepare: an archive under 64 MiB without CUDA libraries" "size $size" "CUDA libraries: $cudalibs"
    fi
    out="$TMP/out-bundle"
    mkdir -p "$out"
    (cd "$TMP/cwd" && env -u STRATA_BACKEND_PATH OUT="$out" "$RUN" --bundle "$TMP/bundle.tar.gz" >"$TMP/out.log" 2>"$TMP/err")
    rc=$?
    line=$(grep -h '^gpu/run: FAIL:' "$TMP/err")
    if nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
      skip "run --bundle with OUT set" "this machine has an NVIDIA GPU"
    elif [ "$rc" -ne 0 ] && printf '%s\n' "$line" | grep -qF "the CUDA backend cannot run" &&
      grep -qF "$line" "$out/summary.txt"; then
      ok "run --bundle: exit $rc, '$line'"
    else
      not_ok "run --bundle with OUT set: exits non-zero saying why" "rc=$rc" "$(cat "$TMP/err")" \
        "$(tail -n 5 "$TMP/out.log")"
    fi
  else
    not_ok "prepare: an archive under 64 MiB without CUDA libraries" "$(cat "$TMP/prep.out")"
    not_ok "run --bundle with OUT set" "no archive"
  fi
fi

# Past the probe, with a fake CUDA module standing in for a GPU (tests/fake/backend.c: devices, no ops): every suite
# runs its CUDA cases only (the filters match), test-mpi-nccl is counted, the benchmarks run, at most 8 files come
# back, and the last line of summary.txt is the one summary line, naming what failed.
fake="$build/tests/fake/cuda/.libs"
if [ ! -f "$build/backends/cuda/.libs/strata-cuda.so" ] || [ ! -f "$fake/strata-cuda.so" ]; then
  skip "past the probe: filtered suites, benchmarks, one summary line" "the CUDA backend is not built here"
else
  out="$TMP/out-fake"
  mkdir -p "$out"
  # (no mpirun: test-mpi-nccl.sh skips whole rather than start ranks on the fake devices)
  (cd "$build" && env OUT="$out" STRATA_GPU_RUN_BUDGET=150 STRATA_GPU_TEST_TIMEOUT=40 MPIRUN=strata-no-mpirun \
    STRATA_BACKEND_PATH="$fake:$build/backends/host/.libs:$build/backends/opencl/.libs" "$RUN" >"$TMP/out.log" 2>&1)
  rc=$?
  last=$(tail -n 1 "$out/summary.txt")
  files=$(ls "$out" | wc -l)
  tested=$(grep -cE '^test-(pipeline|comm|parallel): [A-Z]+ .*Tested: [1-9]' "$out/summary.txt")
  if [ "$rc" -ne 0 ] && [ "$files" -le 8 ] && [ "$tested" -eq 3 ] &&
    printf '%s\n' "$last" | grep -qE '^gpu/run: FAIL: .*test-cuda.* failed; [0-9]+ passed' &&
    grep -qE '^test-mpi-nccl: (SKIP|PASS|FAIL)' "$out/summary.txt" && grep -q '^strata-bench gemm: ' "$out/summary.txt"; then
    ok "past the probe: $files files, '$last'"
  else
    not_ok "past the probe: filtered suites, benchmarks, one summary line" "rc=$rc files=$files tested=$tested" \
      "$(cat "$out/summary.txt")" "$(tail -n 5 "$TMP/out.log")"
  fi
fi
