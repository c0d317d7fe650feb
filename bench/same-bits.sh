#!/bin/sh
# SPDX-License-Identifier: MIT
# same-bits.sh — the runs a behaviour-preserving change must leave bit for bit the same: every step's loss and
# gradient norm, the validation loss and the SHA-256 of the checkpoint, of one device, tp 2, pp 2 under each
# schedule, dp 2 with ZeRO-1, dp 2 x pp 2 x tp 2, the MLP and the CNN with tp 2, a stop and resume, on host virtual
# devices and on PoCL, and an MPI run of 2 ranks. Writes one line per run on stdout ("NAME sha256-of-figures
# sha256-of-checkpoint"); run it on the tree before and after the change and `diff` the two outputs.
# Not a test (it compares two builds): a tool for refactors.
# Usage: bench/same-bits.sh BUILD_DIR [WORK_DIR]
set -u
build=$(cd "${1:?usage: same-bits.sh BUILD_DIR [WORK_DIR]}" && pwd) || exit 2
work=${2:-$(mktemp -d)}
mkdir -p "$work" || exit 2
TRAIN=$build/tools/strata-train
[ -x "$TRAIN" ] || { echo "same-bits.sh: no $TRAIN" >&2; exit 2; }
STRATA_BACKEND_PATH=$build/backends/host/.libs:$build/backends/opencl/.libs
POCL_CACHE_DIR=${POCL_CACHE_DIR:-$HOME/.cache/strata-pocl}
POCL_DEVICES="pthread pthread"
export STRATA_BACKEND_PATH POCL_CACHE_DIR POCL_DEVICES
mkdir -p "$POCL_CACHE_DIR"
fail=0

# digest NAME: the figures of $work/NAME.json (losses, norms, validation) and the checkpoint $work/NAME.st
digest() {
  figs=$(grep -E '"event":"(step|eval)"' "$work/$1.json" |
    sed -E 's/.*"step":([0-9]+).*"(loss|val_loss)":([-0-9.e+a-z]+)(,"grad_norm":([-0-9.e+a-z]+))?.*/\1 \3 \5/' |
    sha256sum | cut -c1-16)
  ck=-
  [ -f "$work/$1.st" ] && ck=$(sha256sum <"$work/$1.st" | cut -c1-16)
  echo "$1 $figs $ck"
}

# run NAME BACKENDS DEVICES ARGS...: one strata-train run of 4 steps on gpt-micro unless ARGS say otherwise
run() {
  name=$1 backends=$2 ndev=$3
  shift 3
  rm -f "$work/$name.st"
  STRATA_BACKENDS=$backends STRATA_HOST_DEVICES=$ndev STRATA_HOST_THREADS=1 \
    "$TRAIN" --steps 4 --batch 4 --eval-every 2 --eval-batches 2 --json --save "$work/$name.st" "$@" \
    >"$work/$name.json" 2>"$work/$name.err"
  rc=$?
  if [ $rc -ne 0 ]; then
    echo "$name FAILED (exit $rc): $(tail -1 "$work/$name.err")"
    fail=1
    return
  fi
  digest "$name"
}

G="-m gpt-micro"
run host-1x1x1        host 1 $G --device 0
run host-tp2          host 2 $G --tp 2 --microbatches 2
run host-pp2-gpipe    host 2 $G --pp 2 --schedule gpipe --microbatches 4
run host-pp2-1f1b     host 2 $G --pp 2 --schedule 1f1b --microbatches 4
run host-pp2-inter    host 2 -m gpt-tiny --pp 2 --schedule interleaved --virtual-stages 2 --microbatches 4
run host-pp2-zb       host 2 $G --pp 2 --schedule zb --microbatches 4
run host-dp2-zero     host 2 $G --dp 2 --zero --microbatches 2
run host-2x2x2        host 8 $G --dp 2 --pp 2 --tp 2 --microbatches 2
run host-mlp-tp2      host 2 -m mlp --tp 2 --microbatches 2
run host-cnn-tp2      host 2 -m cnn --tp 2 --microbatches 2
run host-cnn-1        host 1 -m cnn --device 0
run host-stop         host 2 $G --pp 2 --microbatches 2 --stop-at 2
cp "$work/host-stop.st" "$work/host-resume.in.st" 2>/dev/null
run host-resume       host 2 $G --pp 2 --microbatches 2 --resume "$work/host-resume.in.st"
run pocl-1x1x1        opencl 1 $G --device 0
run pocl-tp2          opencl 1 $G --tp 2 --microbatches 2
run pocl-pp2-1f1b     opencl 1 $G --pp 2 --microbatches 4
run pocl-dp2-zero     opencl 1 $G --dp 2 --zero --microbatches 2

if command -v mpirun >/dev/null 2>&1; then
  for m in "dp2-zero:--dp 2 --zero --microbatches 2" "pp2:--pp 2 --microbatches 4"; do
    name=mpi-${m%%:*}
    rm -f "$work/$name.st"
    # shellcheck disable=SC2086
    if STRATA_BACKENDS=host STRATA_HOST_DEVICES=1 STRATA_HOST_THREADS=1 \
        mpirun --allow-run-as-root --oversubscribe -np 2 "$TRAIN" $G --steps 4 --batch 4 --eval-every 2 \
        --eval-batches 2 --json --save "$work/$name.st" ${m#*:} >"$work/$name.json" 2>"$work/$name.err"; then
      digest "$name"
    else
      echo "$name FAILED: $(tail -1 "$work/$name.err")"
      fail=1
    fi
  done
fi
exit $fail
