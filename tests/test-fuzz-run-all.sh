#!/bin/sh
# SPDX-License-Identifier: MIT
# test-fuzz-run-all.sh — tests/fuzz/run-all says why a harness failed, in its one line: run on stand-in harnesses (shell
# scripts that print what libFuzzer and the sanitizers print) in a build directory of its own, no clang needed; prints
# TAP.
top_srcdir=${top_srcdir:-.}
RUNALL="$top_srcdir/tests/fuzz/run-all"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/strata-run-all.XXXXXX") || exit 99
trap 'rm -rf "$TMP"' EXIT INT TERM

n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); echo "not ok $n - $1"; shift; for l in "$@"; do echo "# $l"; done; }

if ! command -v bash >/dev/null 2>&1; then
  echo "1..0 # SKIP run-all is a bash script and there is no bash"
  exit 0
fi
echo "1..6"

mkdir -p "$TMP/build/tests/fuzz" "$TMP/build/backends/host/.libs"
# harness NAME EXIT TEXT: a stand-in harness that prints TEXT (a libFuzzer log) and exits EXIT
harness() {
  printf '#!/bin/sh\ncat <<"END"\n%s\nEND\nexit %s\n' "$3" "$2" >"$TMP/build/tests/fuzz/fuzz-$1"
  chmod +x "$TMP/build/tests/fuzz/fuzz-$1"
}
done_lines='#10	DONE   cov: 5 ft: 6 corp: 1/1b lim: 4 exec/s: 0 rss: 30Mb
stat::number_of_executed_units: 10'
harness clean 0 "$done_lines"
harness tracer 1 "$done_lines
Tracer caught signal 11: addr=0x3000000b8 pc=0x5560 sp=0x7fef
==9945==LeakSanitizer has encountered a fatal error.
==9945==HINT: For debugging, try setting environment variable LSAN_OPTIONS=verbosity=1:log_threads=1"
harness leak 1 "$done_lines
==12==ERROR: LeakSanitizer: detected memory leaks

Direct leak of 1234 byte(s) in 1 object(s) allocated from:
SUMMARY: AddressSanitizer: 1234 byte(s) leaked in 1 allocation(s)."
harness quiet 1 "$done_lines
something odd happened"

bash "$RUNALL" 1 "$TMP/build" clean tracer leak quiet >"$TMP/out" 2>"$TMP/err"
rc=$?
line() { grep "^$1 " "$TMP/out"; }
if [ "$rc" -eq 1 ]; then ok "run-all exits 1 when a harness failed"; else not_ok "run-all exits 1 (rc=$rc)"; fi
if line clean | grep -q ' ok$'; then ok "a clean harness is ok"; else not_ok "a clean harness is ok" "$(cat "$TMP/out")"; fi
if line tracer | grep -q 'FAILED: Tracer caught signal 11: the sanitizer itself crashed at exit, so no leak check ran'
then ok "a sanitizer that crashed at exit is named as such"; else not_ok "the tracer's crash is named" "$(cat "$TMP/out")"; fi
if line leak | grep -q 'FAILED: ERROR: LeakSanitizer: detected memory leaks'; then ok "a leak is named"
else not_ok "a leak is named" "$(cat "$TMP/out")"; fi
if line quiet | grep -q 'FAILED: exit 1, no sanitizer report; the log ends: something odd happened'; then
  ok "a failure with no report gives the exit status and the log's last line"
else not_ok "a failure with no report says so" "$(cat "$TMP/out")"; fi
if grep -q 'Direct leak of 1234 byte' "$TMP/err" && grep -q 'something odd happened' "$TMP/err"; then
  ok "the log around each failure is on stderr"
else not_ok "the log around each failure is on stderr" "$(head -c 600 "$TMP/err")"; fi
