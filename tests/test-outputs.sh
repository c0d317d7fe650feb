#!/bin/sh
# SPDX-License-Identifier: MIT
# test-outputs.sh — issue 37 at the tools' level: no output replaces a special file (a FIFO, a character device made
# here) or an input of the same run, each refused before any work with one line and exit 2; inputs that would block
# or grow (a FIFO calibration, an endless stdin of token ids) do not; refusals that say why (calibrations the
# library refuses, Hugging Face configs strata cannot use, the token-file format chosen); prints TAP.
top_builddir=${top_builddir:-.}
top_srcdir=${top_srcdir:-.}
TRAIN="$top_builddir/tools/strata-train"
PLAN="$top_builddir/tools/strata-plan"
BENCH="$top_builddir/tools/strata-bench"
EXPORT="$top_builddir/tools/strata-export"
GEN="$top_builddir/tools/strata-generate"
HF="$top_srcdir/tests/fixtures/hf-gpt2"
TOPO="$top_srcdir/tests/fixtures/topologies/aws-g4dn-metal-t4-8gpu-pcie.xml"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/strata-outputs.XXXXXX") || exit 99
trap 'rm -rf "$TMP"' EXIT INT TERM
STRATA_BACKENDS=host
STRATA_HOST_DEVICES=1
export STRATA_BACKENDS STRATA_HOST_DEVICES
unset STRATA_DEVICE_MEMORY_LIMIT STRATA_LOG STRATA_TOPOLOGY_XML

n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); echo "not ok $n - $1"; shift; for l in "$@"; do echo "# $l"; done; }
skip() { n=$((n + 1)); echo "ok $n - $1 # SKIP $2"; }
check() { name=$1; shift; if "$@"; then ok "$name"; else not_ok "$name" "$(head -c 600 "$TMP/err" 2>/dev/null)"; fi; }

# refused NAME WORDS CMD...: exit 2 within 60 s, nothing on stdout, one stderr line naming the tool and holding WORDS
refused() {
  name=$1 words=$2
  shift 2
  timeout 60 "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
  rc=$?
  lines=$(wc -l <"$TMP/err" | tr -d ' ')
  if [ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] && [ ! -s "$TMP/out" ] && grep -q '^strata-[a-z]*: ' "$TMP/err" &&
    grep -qF -- "$words" "$TMP/err"; then
    ok "$name: exit 2, one line"
  else
    not_ok "$name: exit 2, one line with '$words'" "rc=$rc lines=$lines" "$(head -c 600 "$TMP/err")" \
      "$(head -c 200 "$TMP/out")"
  fi
}

for t in "$TRAIN" "$PLAN" "$BENCH" "$EXPORT" "$GEN"; do
  if [ ! -x "$t" ]; then
    echo "1..0 # SKIP $t not built"
    exit 0
  fi
done
echo "1..48"

for i in 1 2 3 4; do cat "$top_srcdir/README.md"; done >"$TMP/text.txt"
printf '{"kind": "gpt", "vocab": 256, "context": 8, "d_model": 8, "layers": 1, "heads": 2}\n' >"$TMP/m.json"
T="$TRAIN --model $TMP/m.json --data $TMP/text.txt --device 0 --batch 2 --steps 1 --eval-batches 1 --quiet"
$T --save "$TMP/ckpt.st" >"$TMP/out" 2>"$TMP/err"
check "a checkpoint to export" [ $? -eq 0 -a -s "$TMP/ckpt.st" ]
$PLAN --model gpt-tiny --batch 8 --node 2xT4:pcie --out "$TMP/layout.json" >"$TMP/out" 2>"$TMP/err"
check "a layout to simulate" [ $? -eq 0 -a -s "$TMP/layout.json" ]
printf '{"schema": "strata-calibration/1", "devices": [{"device": 0, "gflops": 10, "mem_gbps": 10, "launch_us": 1, "memory": 1000000000}], "gbps": [[0]], "latency_us": [[0]]}\n' >"$TMP/cal.json"
$PLAN --calibration "$TMP/cal.json" --model gpt-micro --batch 2 >"$TMP/out" 2>"$TMP/err"
check "a calibration to plan on" [ $? -eq 0 ]
cp "$TOPO" "$TMP/t.xml"
for f in text.txt m.json ckpt.st layout.json cal.json t.xml; do cp "$TMP/$f" "$TMP/$f.orig"; done
# intact: every input above byte for byte as it was
intact() {
  for f in text.txt m.json ckpt.st layout.json cal.json t.xml; do cmp -s "$TMP/$f" "$TMP/$f.orig" || return 1; done
}

# --- item 1: an output that is a special file is refused before the work; the file is still what it was
# special KIND PATH: every tool's every output at PATH (a FIFO or a character device) is refused, naming KIND
special() {
  kind=$1 p=$2
  refused "strata-train --save $kind" "$kind" $T --save "$p"
  refused "strata-train --trace $kind" "$kind" $T --trace "$p"
  refused "strata-plan --out $kind" "$kind" $PLAN --model gpt-tiny --batch 8 --node 2xT4:pcie --out "$p"
  refused "strata-plan --trace $kind" "$kind" $PLAN --model gpt-tiny --batch 8 --node 2xT4:pcie --trace "$p"
  refused "strata-plan --simulate --trace $kind" "$kind" \
    $PLAN --simulate "$TMP/layout.json" --model gpt-tiny --batch 8 --node 2xT4:pcie --trace "$p"
  refused "strata-bench calibrate --out $kind" "$kind" $BENCH calibrate --out "$p"
  mkdir -p "$TMP/hf-$kind"
  ln -sf "$p" "$TMP/hf-$kind/model.safetensors"
  refused "strata-export --hf DIR whose model.safetensors links to $kind" "$kind" \
    $EXPORT --hf "$TMP/hf-$kind" "$TMP/ckpt.st"
}
mkfifo "$TMP/fifo"
special "a FIFO" "$TMP/fifo"
check "the FIFO is still a FIFO, no temporary left beside it" \
  sh -c "[ -p '$TMP/fifo' ] && ! ls '$TMP' | grep -q '\\.tmp-'"
if [ "$(id -u)" -eq 0 ] && mknod "$TMP/null" c 1 3 2>"$TMP/err"; then
  special "a character device" "$TMP/null"
  check "the character device is still one" [ -c "$TMP/null" ]
else
  why=$([ "$(id -u)" -eq 0 ] && echo "mknod failed: $(cat "$TMP/err")" || echo "mknod of a character device needs root")
  for i in 1 2 3 4 5 6 7 8; do skip "outputs naming a character device made here ($i)" "$why"; done
fi

# --- item 2: an output is never an input of the same run (by device and inode: a hard link is caught)
ln "$TMP/cal.json" "$TMP/cal-link.json"
P="$PLAN --model gpt-micro --batch 2"
refused "strata-plan --calibration c --out c" "is the --calibration file" $P --calibration "$TMP/cal.json" \
  --out "$TMP/cal.json"
refused "strata-plan --calibration c --trace (a hard link to c)" "is the --calibration file" \
  $P --calibration "$TMP/cal.json" --trace "$TMP/cal-link.json"
refused "strata-plan --topology t --out t" "is the --topology file" \
  $PLAN --model gpt-tiny --batch 8 --topology "$TMP/t.xml" --out "$TMP/t.xml"
refused "strata-plan --simulate l --trace l" "is the --simulate file" \
  $PLAN --simulate "$TMP/layout.json" --model gpt-tiny --batch 8 --node 2xT4:pcie --trace "$TMP/layout.json"
refused "strata-plan --model m --out m" "is the --model file" \
  $PLAN --model "$TMP/m.json" --batch 8 --node 2xT4:pcie --out "$TMP/./m.json"
refused "strata-plan --out x --trace x (neither there yet)" "is the --out file" \
  $PLAN --model gpt-tiny --batch 8 --node 2xT4:pcie --out "$TMP/x.json" --trace "$TMP/../${TMP##*/}/x.json"
refused "strata-bench calibrate --model m --out m" "is the --model file" \
  $BENCH calibrate --model "$TMP/m.json" --rows 2 --out "$TMP/m.json"
mkdir "$TMP/hfdir"
cp "$TMP/ckpt.st" "$TMP/hfdir/model.safetensors"
refused "strata-export --hf d d/model.safetensors (a strata checkpoint named so)" "is the CHECKPOINT file" \
  $EXPORT --hf "$TMP/hfdir" "$TMP/hfdir/model.safetensors"
check "the checkpoint named model.safetensors is byte for byte the one written" \
  cmp -s "$TMP/hfdir/model.safetensors" "$TMP/ckpt.st"
refused "strata-train --save naming the --data" "is the --data file" $T --save "$TMP/text.txt"
refused "strata-train --trace naming the --model" "is the --model file" $T --trace "$TMP/m.json"
check "every input byte for byte as it was" intact
$T --resume "$TMP/ckpt.st" --steps 2 --save "$TMP/ckpt.st" >"$TMP/out" 2>"$TMP/err"
check "strata-train --save may replace its own --resume" [ $? -eq 0 ]
cp "$TMP/ckpt.st" "$TMP/ckpt.st.orig"
$EXPORT --hf "$TMP/export" "$TMP/ckpt.st" >"$TMP/out" 2>"$TMP/err"
check "strata-export to a new directory still works" [ $? -eq 0 -a -s "$TMP/export/model.safetensors" ]

# --- item 4: inputs that would block or grow
refused "strata-plan --calibration FIFO" "FIFO" $PLAN --calibration "$TMP/fifo" --model gpt-micro --batch 2
# an endless stdin of ids: read with the memory of the model's context (32 ids), until it is stopped
yes 7 | /usr/bin/time -f %M -o "$TMP/rss" timeout 3 $GEN --init-from "$HF/small" --tokens -p - -n 1 -t 0 \
  >"$TMP/out" 2>"$TMP/err"
rc=$?
rss=$(tail -n 1 "$TMP/rss" 2>/dev/null)
case $rss in ''|*[!0-9]*) rss=0 ;; esac
if [ ! -x /usr/bin/time ]; then
  skip "strata-generate --tokens -p - on an endless stdin holds no more than the context" "no /usr/bin/time"
else
  check "strata-generate --tokens -p - on an endless stdin: still reading after 3 s with ${rss} KiB at most" \
    [ "$rc" -eq 124 -a "$rss" -gt 0 -a "$rss" -lt 400000 ]
fi
yes 7 | head -n 100000 | $GEN --init-from "$HF/small" --tokens -p - -n 1 -t 0 >"$TMP/out" 2>"$TMP/err"
rc=$?
check "strata-generate --tokens -p -: 100000 ids, the last 32 are the prompt, with a note" \
  [ "$rc" -eq 0 -a "$(wc -w <"$TMP/out")" -eq 33 ] &&
  grep -q 'stdin gave 100000 ids; the model.s context holds 32, so the prompt is the last 32 of them' "$TMP/err"
printf '1 2\n3,4\n' | $GEN --init-from "$HF/small" --tokens -p - -n 1 -t 0 >"$TMP/out" 2>"$TMP/err"
check "strata-generate --tokens -p -: a short stdin is the whole prompt, no note" \
  [ $? -eq 0 -a "$(cut -d' ' -f1-4 "$TMP/out")" = "1 2 3 4" -a -z "$(grep -v ' tokens/s (KV cache)$' "$TMP/err")" ]
printf '1 2 x7\n' | $GEN --init-from "$HF/small" --tokens -p - -n 1 >"$TMP/out" 2>"$TMP/err"
check "strata-generate --tokens -p -: a bad id on stdin is named" \
  [ $? -eq 2 ] && grep -q "'x7' (token 2) is not a token id" "$TMP/err"

# --- item 5: every refusal says why
badcal() { sed "$1" "$TMP/cal.json" >"$TMP/bad.json"; }
badcal 's/"gflops": 10/"gflops": 0/'
refused "a calibration of a device with no speed" "needs positive FLOP/s" $P --calibration "$TMP/bad.json"
badcal 's/"memory": 1000000000/"memory": 0/'
refused "a calibration of a device with no memory" "needs positive FLOP/s, bandwidth and memory" \
  $P --calibration "$TMP/bad.json"
badcal 's/"device": 0/"device": 2147483648/'
refused "a calibration's device past an int" '"device" must be a whole runtime index' $P --calibration "$TMP/bad.json"
badcal 's/"memory": 1000000000/"memory": 1e30/'
refused "a calibration's memory of 2^64 or more" '"memory"' $P --calibration "$TMP/bad.json"
badcal 's/"gflops": 10,/"gflops": 10, "gflops": 20,/'
refused "a calibration with a key given twice" "duplicate" $P --calibration "$TMP/bad.json"
mkdir "$TMP/heads5"
cp "$HF/small/model.safetensors" "$TMP/heads5/"
sed 's/"n_head": 4/"n_head": 5/' "$HF/small/config.json" >"$TMP/heads5/config.json"
refused "strata-train --init-from a config whose n_head does not divide n_embd" "values strata cannot use" \
  $TRAIN --init-from "$TMP/heads5" --data "$TMP/text.txt" --steps 1
refused "strata-generate --init-from the same" "heads = 5 does not divide" $GEN --init-from "$TMP/heads5" --tokens -p 1
# uint16 ids none of whose bytes is 0 (257 = 01 01, 770 = 02 03, ...): by content, bytes; the header says so
printf '{"kind": "gpt", "vocab": 1024, "context": 8, "d_model": 8, "layers": 1, "heads": 2}\n' >"$TMP/m1024.json"
printf '\001\001\002\003\003\002\001\002' >"$TMP/ids.one"
for i in 1 2 3 4 5 6 7 8; do cat "$TMP/ids.one" "$TMP/ids.one" "$TMP/ids.one" "$TMP/ids.one"; done >"$TMP/ids.four"
for i in 1 2 3 4 5 6 7 8; do cat "$TMP/ids.four"; done >"$TMP/ids.bin"
U="$TRAIN --model $TMP/m1024.json --data $TMP/ids.bin --device 0 --batch 2 --steps 1 --eval-batches 1"
$U >"$TMP/out" 2>"$TMP/err"
check "a uint16 file with no NUL byte: the header says it was read as bytes, and why" \
  grep -q "ids.bin (bytes, by content: no NUL byte in its first 64 KiB; --data-format nanogpt reads uint16 ids)" \
  "$TMP/out"
$U --data-format nanogpt >"$TMP/out" 2>"$TMP/err"
check "--data-format nanogpt reads it as uint16 ids (1024 of them)" \
  grep -q "ids.bin (nanoGPT uint16 tokens): [0-9]* train / [0-9]* validation tokens" "$TMP/out"
STRATA_LOG=info $U >"$TMP/out" 2>"$TMP/err"
check "the info log says which format was chosen" grep -q 'ids.bin (bytes, by content' "$TMP/err"
