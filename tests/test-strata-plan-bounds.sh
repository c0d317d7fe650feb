#!/bin/sh
# SPDX-License-Identifier: MIT
# test-strata-plan-bounds.sh — strata-plan where nothing can fit stays bounded: each case exits 1 with one line that
# says why, in under 20 s and 1 GB of peak memory (/usr/bin/time -f %M); prints TAP.
top_builddir=${top_builddir:-.}
top_srcdir=${top_srcdir:-.}
PLAN="$top_builddir/tools/strata-plan"
DUMPS="$top_srcdir/tests/fixtures/topologies"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/strata-plan-bounds.XXXXXX") || exit 99
trap 'rm -rf "$TMP"' EXIT INT TERM

if [ ! -x "$PLAN" ]; then
  echo "1..0 # SKIP strata-plan not built"
  exit 0
fi
if ! /usr/bin/time -f %M true >/dev/null 2>&1; then
  echo "1..0 # SKIP no GNU /usr/bin/time to read the peak memory with"
  exit 0
fi
echo "1..3"
# Under AddressSanitizer the address-space cap cannot hold (its shadow reserves terabytes) and the resident size
# counts the shadow: there the run is checked for its exit, its line and its time only, and says so.
asan=0
grep -q '^CFLAGS = .*-fsanitize=address' "$top_builddir/Makefile" 2>/dev/null && asan=1

n=0
# bounded NAME WORDS ARGS...: exit 1, one line on stderr holding WORDS, under 20 s and 1 GB. A run that went wrong
# is cut off at 2 GB of address space and 60 s rather than taking the machine with it.
bounded() {
  name=$1 words=$2
  shift 2
  if [ $asan -eq 1 ]; then
    /usr/bin/time -f '%M %e' -o "$TMP/time" timeout 60 "$PLAN" "$@" >"$TMP/out" 2>"$TMP/err"
  else
    (ulimit -v 2000000; exec /usr/bin/time -f '%M %e' -o "$TMP/time" timeout 60 "$PLAN" "$@") >"$TMP/out" 2>"$TMP/err"
  fi
  rc=$?
  # GNU time writes "Command exited with non-zero status 1" first, then the figures
  kb=$(tail -n 1 "$TMP/time" 2>/dev/null | cut -d' ' -f1)
  s=$(tail -n 1 "$TMP/time" 2>/dev/null | cut -d' ' -f2)
  lines=$(wc -l <"$TMP/err" | tr -d ' ')
  n=$((n + 1))
  if [ "$rc" -eq 1 ] && [ "$lines" -eq 1 ] && grep -q '^strata-plan: ' "$TMP/err" && grep -qF -- "$words" "$TMP/err" &&
    [ -n "$kb" ] && { [ $asan -eq 1 ] || [ "$kb" -lt 1000000 ]; } && awk -v s="$s" 'BEGIN { exit !(s < 20) }'; then
    echo "ok $n - $name: exit 1, one line, ${kb} KB$([ $asan -eq 1 ] && echo ' (AddressSanitizer: not held to 1 GB)'), ${s} s"
  else
    echo "not ok $n - $name: exit 1, one line with '$words', under 1 GB and 20 s"
    echo "# rc=$rc lines=$lines peak=${kb:-?} KB wall=${s:-?} s"
    head -c 600 "$TMP/err" | sed 's/^/# /'
  fi
}

# 1. --tp 2 on a one-GPU node: no island holds two devices, however many such nodes
bounded "--tp 2 on one GPU of a dump" "tp 2 can never be planned" \
  --model gpt2-small --batch 8 --topology "$DUMPS/aws-g4dn-metal-t4-8gpu-pcie.xml" --devices 0 --tp 2

# 2. a calibration (its devices each an island of its own, as calibration files are) with --tp 2
cat >"$TMP/cal.json" <<'EOF'
{"schema": "strata-calibration/1",
 "devices": [{"device": 0, "name": "host virtual device 0", "gflops": 100, "mem_gbps": 10, "launch_us": 1,
              "memory": 12000000000},
             {"device": 1, "name": "host virtual device 1", "gflops": 100, "mem_gbps": 10, "launch_us": 1,
              "memory": 12000000000}],
 "gbps": [[0, 10], [10, 0]], "latency_us": [[0, 30], [30, 0]]}
EOF
bounded "a calibration of two devices with --tp 2" "tp 2 can never be planned" \
  --calibration "$TMP/cal.json" --model gpt-micro --batch 4 --tp 2

# 3. gpt-7b on three small GPUs of a dump, an HD 7970 (told 2 GiB) first: one block alone outgrows it
bounded "gpt-7b on three small GPUs" "can never fit devices like" \
  --model gpt-7b --batch 1 --topology "$DUMPS/mixed-m2075-k40m-hd7970-edited.xml" --devices 3,0,1 --gpu-memory 2G
