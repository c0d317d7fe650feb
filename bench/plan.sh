#!/bin/sh
# SPDX-License-Identifier: MIT
# plan.sh — how long strata-plan takes: GPT-3 175B on 128 synthetic nodes of 8 A100 80GB (NVSwitch, 8 x 200 Gb/s per
# node) and gpt2-xl on the 8 T4s of the AWS dump. A benchmark, not a test.
# Usage: bench/plan.sh [BUILD_DIR]    (BUILD_DIR default: ./build or .)
# Target: the 1,024-GPU case in under 10 s, the 8-device case in well under 1 s (best of 3 runs each).
set -u
build=${1:-}
if [ -z "$build" ]; then
  if [ -x build/tools/strata-plan ]; then build=build; else build=.; fi
fi
PLAN="$build/tools/strata-plan"
here=$(dirname "$0")
if [ ! -x "$PLAN" ]; then
  echo "plan: no $PLAN; build first (make), or pass the build directory" >&2
  exit 2
fi
top_srcdir=$(cd "$here/.." && pwd)
dump="$top_srcdir/tests/fixtures/topologies/aws-g4dn-metal-t4-8gpu-pcie.xml"
if [ ! -f "$dump" ]; then
  echo "plan: $dump is missing (a fixture of the tree)" >&2
  exit 2
fi
best() { # best wall time of 3 runs of "$@", with the last run's summary line
  b=
  for i in 1 2 3; do
    out=$("$@" 2>&1) || { echo "$out" >&2; return 1; }
    t=$(printf '%s\n' "$out" | sed -n 's/^planned in \([0-9.]*\) s.*/\1/p')
    if [ -z "$b" ] || awk -v t="$t" -v b="$b" 'BEGIN { exit !(t < b) }'; then b=$t; fi
  done
  printf '%s\n' "$out" | sed -n '3p'
  printf '%s\n' "$out" | grep '^planned in'
  echo "# best of 3: $b s"
}
echo "# GPT-3 175B, batch 1536, 128 x 8xA100-80GB:nvswitch, 8 x 200 Gb/s per node"
best "$PLAN" --model "$here/gpt3-175b.json" --batch 1536 --node 8xA100-80GB:nvswitch --nodes 128 \
  --network-gbps 200 --nics 8 --top 3
echo "# gpt2-xl, batch 64, the 8 T4s of the AWS g4dn.metal dump"
best "$PLAN" --model gpt2-xl --batch 64 --topology "$dump" --top 3
