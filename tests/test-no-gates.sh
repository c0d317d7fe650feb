#!/bin/sh
# SPDX-License-Identifier: MIT
# test-no-gates.sh — test-comm, test-parallel and test-seqpar again under STRATA_HOST_NO_GATES=1: host devices without gates, as CUDA devices outside NCCL are, so every collective with a host member waits inside its call (the path a GPU next to host devices takes) and reports its own failure; prints the suites' cases as one TAP stream.
b=${top_builddir:-.}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/strata-no-gates.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT INT TERM
STRATA_HOST_NO_GATES=1
export STRATA_HOST_NO_GATES
n=0
for suite in test-comm test-parallel test-seqpar; do
  bin="$b/tests/$suite"
  if [ ! -x "$bin" ]; then
    echo "ok - $suite under STRATA_HOST_NO_GATES=1 # SKIP not built (Criterion is missing)"
    n=$((n + 1))
    continue
  fi
  "$bin" --tap="$tmp/$suite.tap" >"$tmp/$suite.log" 2>&1
  rc=$?
  # every case, its name saying that it ran without gates
  grep -E '^(not )?ok' "$tmp/$suite.tap" | sed "s/^\(\(not \)\{0,1\}ok\)\( [0-9]*\)\{0,1\} - /\1 - no gates: /" >"$tmp/$suite.cases"
  cat "$tmp/$suite.cases"
  n=$((n + $(wc -l <"$tmp/$suite.cases")))
  if grep -q '^not ok' "$tmp/$suite.cases"; then # what the failing cases said, as TAP comments in the log
    grep -E '^\[(----|FAIL)\]' "$tmp/$suite.log" | grep -v '^\[----\] *$' | head -n 60 | sed 's/^/# /'
  fi
  if [ "$rc" -ne 0 ] && ! grep -q '^not ok' "$tmp/$suite.cases"; then
    echo "not ok - $suite under STRATA_HOST_NO_GATES=1 exited $rc"
    tail -n 30 "$tmp/$suite.log" | sed 's/^/# /'
    n=$((n + 1))
  fi
done
echo "1..$n"
