#!/bin/sh
# SPDX-License-Identifier: MIT
# test-strata-train-dp.sh — strata-train with data parallelism: --dp and --layout on host virtual devices give one
# device's losses over the same global batch (ZeRO-1, 2 and 3 too), and every bad cut is one line and exit 2; ZeRO-2
# and 3 fit the 512x8 GPT under a memory limit plain dp 2 exceeds; a fault in a ZeRO-3 gather; prints TAP.
top_builddir=${top_builddir:-.}
top_srcdir=${top_srcdir:-.}
TRAIN="$top_builddir/tools/strata-train"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/strata-train-dp.XXXXXX") || exit 99
trap 'rm -rf "$TMP"' EXIT INT TERM
STRATA_BACKENDS=host
STRATA_HOST_DEVICES=4
export STRATA_BACKENDS STRATA_HOST_DEVICES
unset STRATA_DEVICE_MEMORY_LIMIT

n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); echo "not ok $n - $1"; shift; for l in "$@"; do echo "# $l"; done; }
check() { name=$1; shift; if "$@"; then ok "$name"; else not_ok "$name" "$(head -c 600 "$TMP/err" 2>/dev/null)"; fi; }
field() { grep "\"event\":\"$2\"" "$1" | tail -n 1 | sed -n "s/.*\"$3\":\\([^,}]*\\).*/\\1/p"; }
fails_clearly() {
  name=$1 words=$2
  shift 2
  "$@" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  lines=$(wc -l <"$TMP/err" | tr -d ' ')
  if [ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] && [ ! -s "$TMP/out" ] && grep -q '^strata-train: ' "$TMP/err" &&
    grep -qF -- "$words" "$TMP/err"; then
    ok "$name: exit 2, one line"
  else
    not_ok "$name: exit 2, one line with '$words'" "rc=$rc lines=$lines" "$(head -c 600 "$TMP/err")"
  fi
}

if [ ! -x "$TRAIN" ]; then
  echo "1..0 # SKIP strata-train not built"
  exit 0
fi
echo "1..41"

for i in 1 2 3 4 5 6 7 8; do cat "$top_srcdir/README.md"; done >"$TMP/text.txt"
T="$TRAIN --model gpt-micro --data $TMP/text.txt --batch 2 --steps 6 --eval-batches 1 --eval-every 0 --json"

$T --device 0 --accum 4 >"$TMP/one.json" 2>"$TMP/err"
rc1=$?
$T --dp 2 --microbatches 2 >"$TMP/dp.json" 2>"$TMP/err"
rc2=$?
$T --dp 2 --pp 2 --microbatches 2 >"$TMP/dppp.json" 2>"$TMP/err"
rc3=$?
check "one device, --dp 2 and --dp 2 --pp 2 run" [ "$rc1" -eq 0 -a "$rc2" -eq 0 -a "$rc3" -eq 0 ]
l1=$(field "$TMP/one.json" step loss)
l2=$(field "$TMP/dp.json" step loss)
l3=$(field "$TMP/dppp.json" step loss)
# the replicas' gradients are summed in another order than one device's accumulation: a few ulp per step
close() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-4 * a) }'; }
check "--dp 2: step 6 loss $l2 is one device's with --accum 4 ($l1)" close "$l2" "$l1"
check "--dp 2 --pp 2: step 6 loss $l3 is one device's ($l1)" close "$l3" "$l1"
check "the start event says dp 2 over 4 devices" sh -c "grep '\"event\":\"start\"' '$TMP/dppp.json' | grep -q '\"pp\":4,\"dp\":2'"
t1=$(field "$TMP/one.json" start tokens_per_step)
t2=$(field "$TMP/dp.json" start tokens_per_step)
check "tokens per step count every replica ($t2 = $t1)" [ "$t1" = "$t2" ]

printf '{"schema": "strata-layout/1", "dp": 2, "pp": 2, "devices": [3, 2, 1, 0], "microbatches": 2}\n' >"$TMP/layout.json"
$T --layout "$TMP/layout.json" >"$TMP/lay.json" 2>"$TMP/err"
rc=$?
l4=$(field "$TMP/lay.json" step loss)
check "--layout FILE trains dp 2 x pp 2 on devices 3,2,1,0: loss $l4 (exit $rc)" sh -c "[ $rc -eq 0 ] && awk -v a='$l4' -v b='$l1' 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-4 * b) }'"

# a layout of one device (1 x 1 x 1) traced: the trace is written, with the step's actions, and the loss is one device's
printf '{"schema": "strata-layout/1", "devices": [0], "microbatches": 4}\n' >"$TMP/one.layout"
rm -f "$TMP/one.trace"
$T --layout "$TMP/one.layout" --trace "$TMP/one.trace" >"$TMP/lay1.json" 2>"$TMP/err"
rc=$?
l5=$(field "$TMP/lay1.json" step loss)
check "--layout 1x1x1 --trace: exit $rc, a trace with F0.3 and B0.3, loss $l5 is one device's ($l1)" sh -c "[ $rc -eq 0 ] &&
  grep -q '\"name\": *\"F0.3\"' '$TMP/one.trace' && grep -q '\"name\": *\"B0.3\"' '$TMP/one.trace' &&
  awk -v a='$l5' -v b='$l1' 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-4 * b) }'"

fails_clearly "--dp 3 --pp 2 on 4 devices" "there are only 4 devices" $T --dp 3 --pp 2
fails_clearly "--devices of the wrong count" "--dp 2 x --pp 1 needs 2" $T --dp 2 --devices 0,1,2
fails_clearly "--layout and --pp" "drop --pp" $T --layout "$TMP/layout.json" --pp 2
# tensor parallelism: --tp 2 and --tp 2 --pp 2 (and the same from a layout file) train to one device's losses
$T --tp 2 --microbatches 4 >"$TMP/tp.json" 2>"$TMP/err"
rc=$?
l5=$(field "$TMP/tp.json" step loss)
check "--tp 2: step 6 loss $l5 is one device's ($l1) (exit $rc)" sh -c "[ $rc -eq 0 ] && awk -v a='$l5' -v b='$l1' 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-4 * b) }'"
check "the start event says tp 2" sh -c "grep '\"event\":\"start\"' '$TMP/tp.json' | grep -q '\"tp\":2'"
printf '{"pp": 2, "tp": 2, "devices": [0, 1, 2, 3], "microbatches": 4}\n' >"$TMP/tp.layout"
$T --layout "$TMP/tp.layout" >"$TMP/tppp.json" 2>"$TMP/err"
rc=$?
l6=$(field "$TMP/tppp.json" step loss)
check "--layout tp 2 x pp 2: loss $l6 is one device's ($l1) (exit $rc)" sh -c "[ $rc -eq 0 ] && awk -v a='$l6' -v b='$l1' 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-4 * b) }'"
fails_clearly "--tp 3 does not divide gpt-micro's heads" "tp 3" $T --tp 3 --devices 0,1,2
# a tp degree per pipeline rank: rank 0 over 2 devices, rank 1 whole on a third
$T --pp 2 --tp 2,1 --microbatches 4 >"$TMP/tp21.json" 2>"$TMP/err"
rc=$?
l7=$(field "$TMP/tp21.json" step loss)
check "--pp 2 --tp 2,1: loss $l7 is one device's ($l1) (exit $rc)" sh -c "[ $rc -eq 0 ] && awk -v a='$l7' -v b='$l1' 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-4 * b) }'"
stages=$(grep -o '"stages":\[[^]]*' "$TMP/tp21.json" | tail -n 1 | grep -o '"device":[0-9-]*' | tr '\n' ' ')
check "--pp 2 --tp 2,1 lists the 3 stages devices hold: $stages" [ "$stages" = '"device":0 "device":2 "device":1 ' ]
fails_clearly "--tp with one degree too many" "--tp lists 3 degrees" $T --pp 2 --tp 2,1,1
$T --dp 2 --zero --microbatches 2 >"$TMP/zero.json" 2>"$TMP/err"
rc=$?
l7=$(field "$TMP/zero.json" step loss)
check "--dp 2 --zero: loss $l7 is one device's ($l1) (exit $rc)" sh -c "[ $rc -eq 0 ] && awk -v a='$l7' -v b='$l1' 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-4 * b) }'"
fails_clearly "--zero without replicas" "give --dp 2 or more" $T --zero
# ZeRO-2: the gradients' shards too; one device's losses, the stage in the start event and the summary, fewer
# gradient bytes than ZeRO-1's, the same losses from a layout that says "zero": 2
$T --dp 2 --zero=2 --microbatches 2 >"$TMP/zero2.json" 2>"$TMP/err"
rc=$?
l9=$(field "$TMP/zero2.json" step loss)
check "--dp 2 --zero=2: loss $l9 is one device's ($l1) (exit $rc)" sh -c "[ $rc -eq 0 ] && awk -v a='$l9' -v b='$l1' 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-4 * b) }'"
z0=$(field "$TMP/zero2.json" start zero)
z1=$(field "$TMP/zero2.json" summary zero)
zz=$(field "$TMP/zero.json" start zero)
check "the start event and the summary say zero 2 ($z0, $z1), --zero's say 1 ($zz)" [ "$z0" = 2 -a "$z1" = 2 -a "$zz" = 1 ]
g1=$(field "$TMP/zero.json" summary grad_bytes)
g2=$(field "$TMP/zero2.json" summary grad_bytes)
check "--zero=2 keeps fewer gradient bytes ($g2) than --zero ($g1)" [ "${g2:-0}" -gt 0 -a "${g2:-0}" -lt "${g1:-0}" ]
printf '{"dp": 2, "zero": 2, "microbatches": 2}\n' >"$TMP/zero2-layout.json"
$T --layout "$TMP/zero2-layout.json" >"$TMP/zero2l.json" 2>"$TMP/err"
rc=$?
s1=$(grep '"event":"step"' "$TMP/zero2.json" | sed 's/"step_s":[^,]*,//; s/"tokens_per_s":[^,]*,//' | cut -d, -f1-4 | tr '\n' ' ')
s2=$(grep '"event":"step"' "$TMP/zero2l.json" | sed 's/"step_s":[^,]*,//; s/"tokens_per_s":[^,]*,//' | cut -d, -f1-4 | tr '\n' ' ')
check "a layout with \"zero\": 2 trains --zero=2's losses (exit $rc)" [ "$rc" -eq 0 -a -n "$s1" -a "$s1" = "$s2" ]
fails_clearly "--zero=4" "the ZeRO stage is 1, 2 or 3" $T --dp 2 --zero=4
fails_clearly "--zero=3 without replicas" "--zero=3 shards over data-parallel replicas: give --dp 2 or more" $T --zero=3
# ZeRO-3: the parameters' shards too, each layer's weights gathered as it reads them; one device's losses
$T --dp 2 --zero=3 --microbatches 2 >"$TMP/zero3.json" 2>"$TMP/err"
rc=$?
l10=$(field "$TMP/zero3.json" step loss)
z3=$(field "$TMP/zero3.json" start zero)
check "--dp 2 --zero=3: loss $l10 is one device's ($l1), the start event says zero $z3 (exit $rc)" sh -c "[ $rc -eq 0 ] && [ '$z3' = 3 ] && awk -v a='$l10' -v b='$l1' 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-4 * b) }'"
# (on a model of a few layers: ZeRO-3 keeps two windows of one layer call's weights, the one a layer reads and the
# next one's prefetched, which on gpt-micro's one block and its embedding is more than half the model)
S4="$TRAIN --model gpt-small --data $TMP/text.txt --batch 2 --steps 1 --eval-batches 1 --eval-every 0 --json --dp 2"
$S4 --zero >"$TMP/small1.json" 2>"$TMP/err"
$S4 --zero=3 >"$TMP/small3.json" 2>>"$TMP/err"
p1=$(field "$TMP/small1.json" summary param_bytes)
p3=$(field "$TMP/small3.json" summary param_bytes)
check "gpt-small --zero=3 keeps fewer parameter bytes ($p3) than --zero ($p1)" [ "${p3:-0}" -gt 0 -a "${p3:-0}" -lt "${p1:-0}" ]
# a device fault in a ZeRO-3 gather (a copy of a replica's shard into a layer's window, on host device 1) stops the
# run with one line naming the device and the gather (exit 1), and leaves the last checkpoint as it was
$T --dp 2 --zero=3 --microbatches 2 --steps 2 --save "$TMP/z3.st" >/dev/null 2>"$TMP/err"
cp "$TMP/z3.st" "$TMP/z3.orig"
env STRATA_HOST_FAULT=device=1,copy=40 $T --dp 2 --zero=3 --microbatches 2 --resume "$TMP/z3.st" --save "$TMP/z3.st" \
  >"$TMP/out" 2>"$TMP/err"
rc=$?
check "a fault in a ZeRO-3 gather: exit $rc, one line naming device 1 and the gather, the checkpoint intact" sh -c "[ $rc -eq 1 ] && [ \$(wc -l <'$TMP/err') -eq 1 ] && grep -q 'ZeRO-3 gather' '$TMP/err' && grep -q 'device 1 failed (injected fault: copy #40)' '$TMP/err' && cmp -s '$TMP/z3.st' '$TMP/z3.orig'"
fails_clearly "--zero=2 without replicas" "give --dp 2 or more" $T --zero=2
# one memory model: gpt-tiny's ZeRO-2 or -3 run held to exactly the bytes its check planned (the most of any device,
# its gradient window's reduce scratch counted) trains, no allocation failing in its first backward
for z in 2 3; do
  $T --model gpt-tiny --dp 2 --zero=$z --steps 1 >"$TMP/plan$z.json" 2>"$TMP/err"
  most=$(grep '"event":"summary"' "$TMP/plan$z.json" | grep -o '"planned_bytes":[0-9]*' | cut -d: -f2 | sort -n |
    tail -n 1)
  STRATA_DEVICE_MEMORY_LIMIT=${most:-0} $T --model gpt-tiny --dp 2 --zero=$z --steps 2 >"$TMP/held$z.json" \
    2>"$TMP/err"
  rc=$?
  check "--dp 2 --zero=$z under STRATA_DEVICE_MEMORY_LIMIT=${most:-?}, its plan, trains (exit $rc)" \
    sh -c "[ $rc -eq 0 ] && [ '${most:-0}' -gt 0 ] && grep -q '\"event\":\"summary\"' '$TMP/held$z.json'"
done
# won't fit made to fit: bench/train-mfu.sh's 512x8 GPT with dp 2 under a memory limit between what ZeRO-2 and plain
# dp need per device (each read from its refusal under a 1 MiB limit): plain dp is refused before the first step with
# the breakdown (exit 1), ZeRO-2 and ZeRO-3 (which needs less still) train
printf '{"kind": "gpt", "name": "gpt-512x8", "vocab": 256, "context": 256, "d_model": 512, "layers": 8, "heads": 8, "d_ff": 2048, "tied": false}\n' >"$TMP/gpt512.json"
B="$TRAIN --model $TMP/gpt512.json --data $TMP/text.txt --dp 2 --batch 1 --steps 1 --eval-every 0 --eval-batches 1 --json"
needs() { sed -n 's/.*a step needs \([0-9.]*\) MiB.*/\1/p' "$TMP/err"; }
STRATA_DEVICE_MEMORY_LIMIT=1M $B >/dev/null 2>"$TMP/err"
plain=$(needs)
STRATA_DEVICE_MEMORY_LIMIT=1M $B --zero=2 >/dev/null 2>"$TMP/err"
zero2=$(needs)
limit=$(awk -v a="${plain:-0}" -v b="${zero2:-0}" 'BEGIN { printf "%d", (a + b) / 2 }')
STRATA_DEVICE_MEMORY_LIMIT=${limit}M $B >"$TMP/out" 2>"$TMP/err"
rc=$?
check "512x8 dp 2 under ${limit} MiB (plain needs $plain, ZeRO-2 $zero2): refused before a step, exit $rc, the breakdown" \
  sh -c "[ $rc -eq 1 ] && [ ! -s '$TMP/out' ] && [ \$(wc -l <'$TMP/err') -eq 1 ] && grep -q 'for parameters, gradients and AdamW moments' '$TMP/err' && awk -v a='${zero2:-0}' -v b='${plain:-0}' 'BEGIN { exit !(a > 0 && b > a) }'"
STRATA_DEVICE_MEMORY_LIMIT=${limit}M $B --zero=2 >"$TMP/fit.json" 2>"$TMP/err"
rc=$?
lf=$(field "$TMP/fit.json" step loss)
check "512x8 dp 2 --zero=2 under ${limit} MiB trains (exit $rc, loss $lf)" sh -c "[ $rc -eq 0 ] && awk -v a='$lf' 'BEGIN { exit !(a > 0) }'"
STRATA_DEVICE_MEMORY_LIMIT=1M $B --zero=3 >/dev/null 2>"$TMP/err"
zero3=$(needs)
STRATA_DEVICE_MEMORY_LIMIT=${limit}M $B --zero=3 >"$TMP/fit3.json" 2>"$TMP/err"
rc=$?
lf3=$(field "$TMP/fit3.json" step loss)
check "512x8 dp 2 --zero=3 (needs $zero3 MiB) under ${limit} MiB trains (exit $rc, loss $lf3, ZeRO-2's $lf)" \
  sh -c "[ $rc -eq 0 ] && awk -v a='${zero3:-0}' -v b='${zero2:-0}' -v l='$lf3' -v k='$lf' 'BEGIN { d = l - k; if (d < 0) d = -d; exit !(a > 0 && a < b && d <= 1e-4 * k) }'"
# and the issue's own pair: --zero=3 with --recompute full under the same limit trains, to the same loss (recompute
# changes no bits)
STRATA_DEVICE_MEMORY_LIMIT=${limit}M $B --zero=3 --recompute full >"$TMP/fit3r.json" 2>"$TMP/err"
rc=$?
lf3r=$(field "$TMP/fit3r.json" step loss)
check "512x8 dp 2 --zero=3 --recompute full under ${limit} MiB trains (exit $rc, loss $lf3r, ZeRO-3's $lf3)" \
  sh -c "[ $rc -eq 0 ] && [ -n '$lf3r' ] && [ '$lf3r' = '$lf3' ]"
# --plan auto: the planner's cut of the 4 host devices for the step's 2 x 4 samples trains one device's losses
$T --plan auto --accum 4 >"$TMP/plan.json" 2>"$TMP/err"
rc=$?
l8=$(field "$TMP/plan.json" step loss)
check "--plan auto: loss $l8 is one device's ($l1) (exit $rc)" sh -c "[ $rc -eq 0 ] && awk -v a='$l8' -v b='$l1' 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-4 * b) }'"
fails_clearly "--plan with something else than auto" "only 'auto'" $T --plan best
fails_clearly "--plan auto with --dp" "drop --dp" $T --plan auto --dp 2
printf '{"dp": 2, "devices": [0, 0]}\n' >"$TMP/twice.json"
fails_clearly "a layout naming a device twice" "listed twice" $T --layout "$TMP/twice.json"
fails_clearly "a missing layout file" "no-such.json" $T --layout "$TMP/no-such.json"

# the trace of a group longer than a fixed field held (48 characters): dp 24 on 24 host devices, whose gradient
# all-reduces each list every replica's device; before, the list was cut short mid-number or after a comma
STRATA_BACKENDS=host STRATA_HOST_DEVICES=24 $TRAIN --model gpt-micro --data "$TMP/text.txt" --batch 1 --steps 1 \
  --eval-batches 1 --eval-every 0 --json --dp 24 --trace "$TMP/dp24.trace" >"$TMP/dp24.json" 2>"$TMP/err"
rc=$?
comms=$(grep -c '"cat": "comm"' "$TMP/dp24.trace" 2>/dev/null)
whole=$(grep -c "\"group\": \[$(seq -s, 0 23)\]" "$TMP/dp24.trace" 2>/dev/null)
check "--dp 24 --trace: each of the $comms all-reduces names the 24 replicas' devices ($whole do)" \
  [ "$rc" -eq 0 -a "${comms:-0}" -gt 0 -a "${comms:-0}" = "${whole:-x}" ]
