#!/bin/sh
# SPDX-License-Identifier: MIT
# run.sh — strata-train against a plain PyTorch loop on the same model (bench/peers/gpt.py: strata's GPT;
# bench/peers/llama.py: transformers' LlamaForCausalLM), tokens per step and threads, runs alternated, medians and
# their ratio. A benchmark, not a test; PyTorch (and transformers) live in a throw-away venv.
# Usage: bench/peers/run.sh [--install] [--pp] [--amp bf16] [--reps N] [--steps N] [--models LIST] [--threads LIST]
#                           [BUILD_DIR]
#   --install       create the venv ($PEERS_VENV, default ${TMPDIR:-/tmp}/strata-peers-venv) and pip-install torch
#                   (the CPU wheel index first, then PyPI), and transformers from PyPI for a llama model; without it
#                   an existing venv is used
#   --amp bf16      mixed precision on both sides: strata-train --precision bf16 against the loop under
#                   torch.autocast("cpu", dtype=torch.bfloat16) (float32 master weights in both)
#   --reps N        alternated runs of each side (default 3; the median is reported)
#   --steps N       steps of each run (default: gpt-tiny, llama-tiny 40; the 512x8 models 5; --pp 20 and 4)
#   --models LIST   gpt-tiny,gpt-512x8 (default both), llama-tiny,llama-512x8 (d_model 512, 8 layers, 8 heads on
#                   4 key/value heads, SwiGLU d_ff 1536, context 256, vocabulary 256, untied); `gpt` and `llama`
#                   name both of a kind
#   --threads LIST  1,2 (default)
#   --pp            instead: STRATA_HOST_DEVICES=2 strata-train --pp 2 --microbatches 8 (1F1B) against
#                   torch.distributed.pipelining (bench/peers/gpt_pp.py: 2 processes on gloo, one thread each),
#                   strata's split, same tokens per step (gpt-tiny 2, gpt-512x8 1 sequence per micro-batch)
#   --mb-batch N    with --pp: N sequences per micro-batch for every model instead
# Target (issue 11): strata at least 1.0x PyTorch on every line.
set -u
here=$(cd "$(dirname "$0")" && pwd)
install=0 pp=0 amp=none mb_batch= reps=3 steps_opt= models=gpt-tiny,gpt-512x8 threads=1,2 build=
while [ $# -gt 0 ]; do
  case "$1" in
    --install) install=1 ;;
    --pp) pp=1 ;;
    --amp) amp=$2; shift
      case $amp in bf16|none) ;; *) echo "peers: --amp $amp: expected bf16 or none" >&2; exit 2 ;; esac ;;
    --mb-batch) mb_batch=$2; shift ;;
    --reps) reps=$2; shift ;;
    --steps) steps_opt=$2; shift ;;
    --models) models=$2; shift ;;
    --threads) threads=$2; shift ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    -*) echo "peers: unknown option $1" >&2; exit 2 ;;
    *) build=$1 ;;
  esac
  shift
done
if [ -z "$build" ]; then
  if [ -x build/tools/strata-train ]; then build=build; else build=.; fi
fi
list= llama=0
for model in $(echo "$models" | tr ',' ' '); do
  case $model in gpt|llama) model="$model-tiny $model-512x8" ;; esac
  list="$list $model"
done
models=$(echo $list | tr ' ' ',')
for model in $list; do
  case $model in
    gpt-tiny|gpt-512x8) ;;
    llama-tiny|llama-512x8) llama=1
      [ $pp -eq 1 ] && { echo "peers: --pp runs the GPT models only, not $model" >&2; exit 2; } ;;
    *) echo "peers: unknown model $model" >&2; exit 2 ;;
  esac
done
TRAIN="$build/tools/strata-train"
[ -x "$TRAIN" ] || { echo "peers: no $TRAIN; build first, or pass the build directory" >&2; exit 2; }
venv=${PEERS_VENV:-${TMPDIR:-/tmp}/strata-peers-venv}
py="$venv/bin/python"
if [ $install -eq 1 ] && ! "$py" -c 'import torch' 2>/dev/null; then
  python3 -m venv "$venv" || exit 1
  echo "peers: installing PyTorch into $venv (a large download)"
  "$venv/bin/pip" install -q torch --index-url https://download.pytorch.org/whl/cpu 2>/dev/null ||
    "$venv/bin/pip" install -q torch || { echo "peers: pip could not install torch" >&2; exit 1; }
fi
if [ $install -eq 1 ] && [ $llama -eq 1 ] && ! "$py" -c 'import transformers' 2>/dev/null; then
  echo "peers: installing transformers into $venv"
  "$venv/bin/pip" install -q transformers || { echo "peers: pip could not install transformers" >&2; exit 1; }
fi
# torch.distributed pickles the pipeline's shape exchange through numpy
if [ $install -eq 1 ] && [ $pp -eq 1 ] && ! "$py" -c 'import numpy' 2>/dev/null; then
  "$venv/bin/pip" install -q numpy || { echo "peers: pip could not install numpy" >&2; exit 1; }
fi
"$py" -c 'import torch' 2>/dev/null || { echo "peers: no PyTorch in $venv (run with --install)" >&2; exit 2; }
if [ $llama -eq 1 ] && ! "$py" -c 'import transformers' 2>/dev/null; then
  echo "peers: no transformers in $venv (run with --install)" >&2
  exit 2
fi

: "${STRATA_BACKEND_PATH:=$build/backends/host/.libs}"
STRATA_BACKENDS=host
export STRATA_BACKEND_PATH STRATA_BACKENDS
tmp=$(mktemp -d "${TMPDIR:-/tmp}/strata-peers.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
cat >"$tmp/gpt-512x8.json" <<'JSON'
{"kind": "gpt", "name": "gpt-512x8-ctx256", "vocab": 256, "context": 256, "d_model": 512,
 "layers": 8, "heads": 8, "d_ff": 2048, "tied": false}
JSON
# llama.py's llama-512x8: the GPT's width, depth, heads, context and vocabulary; GQA (8 heads on 4 key/value heads);
# SwiGLU at Llama's 8/3 x d_model rounded up to a multiple of 256 (about the GPT's MLP parameters)
cat >"$tmp/llama-512x8.json" <<'JSON'
{"kind": "llama", "name": "llama-512x8-ctx256", "vocab": 256, "context": 256, "d_model": 512,
 "layers": 8, "heads": 8, "n_kv_heads": 4, "d_ff": 1536, "rope_theta": 10000, "norm_eps": 1e-5, "tied": false}
JSON

# strata's host backend sleeps idle OpenMP threads after a short spin (OMP_WAIT_POLICY=PASSIVE, GOMP_SPINCOUNT=3000);
# PyTorch's spin long by default, which on a shared machine costs it up to 5x: both sides get the same settings
# unless PEERS_TORCH_WAIT_POLICY / PEERS_TORCH_SPINCOUNT say otherwise (PyTorch's wheels use libgomp)
torch_wait=${PEERS_TORCH_WAIT_POLICY:-PASSIVE}
torch_spin=${PEERS_TORCH_SPINCOUNT:-3000}
tps() { sed -n 's/.*"tokens_per_s": *\([0-9.e+]*\).*/\1/p' | tail -n 1; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR] = $1} END {print NR ? (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) : 0}'; }
load() { cut -d' ' -f1 /proc/loadavg; }

if [ $pp -eq 1 ]; then
  "$py" -c 'import numpy' 2>/dev/null || { echo "peers: no numpy in $venv (run with --install)" >&2; exit 2; }
  echo "peers: STRATA_HOST_DEVICES=2 strata-train --pp 2 --microbatches 8 (1f1b) vs PyTorch" \
    "$("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null) pipelining (gloo, 2 processes, 1 thread each)," \
    "$reps alternated runs each, medians, first step excluded; $(nproc) cores; PyTorch OMP_WAIT_POLICY=$torch_wait GOMP_SPINCOUNT=$torch_spin"
  printf '%-11s %6s %5s %12s %12s %7s  %s\n' model split mb strata pytorch ratio "runs (strata | pytorch), load before each pair"
  status=0
  for model in $(echo "$models" | tr ',' ' '); do
    case $model in
      gpt-tiny) batch=2 steps=20 spec=gpt-tiny ;;
      gpt-512x8) batch=1 steps=4 spec="$tmp/gpt-512x8.json" ;;
    esac
    batch=${mb_batch:-$batch} steps=${steps_opt:-$steps}
    s_runs= p_runs= loads= split=
    i=0
    while [ $i -lt "$reps" ]; do
      loads="$loads $(load)"
      STRATA_HOST_DEVICES=2 "$TRAIN" --model "$spec" --pp 2 --microbatches 8 --schedule 1f1b --batch $batch \
        --steps $steps --eval-every 0 --eval-batches 1 --json >"$tmp/pp.json" 2>/dev/null
      s=$(grep '"event":"summary"' "$tmp/pp.json" | tps)
      # the PyTorch stages get the layers strata's balanced split gave each device
      split=$(grep '"event":"start"' "$tmp/pp.json" | sed 's/.*"stages":\[//' | grep -o '"layers":[0-9]*' |
        cut -d: -f2 | paste -sd, -)
      p=$(OMP_NUM_THREADS=1 OMP_WAIT_POLICY=$torch_wait GOMP_SPINCOUNT=$torch_spin "$py" "$here/gpt_pp.py" --model $model --batch $batch \
            --microbatches 8 --schedule 1f1b --steps $steps --threads 1 ${split:+--split "$split"} 2>/dev/null | tps)
      s_runs="$s_runs ${s:-0}" p_runs="$p_runs ${p:-0}"
      i=$((i + 1))
    done
    sm=$(echo "$s_runs" | median) pm=$(echo "$p_runs" | median)
    ratio=$(awk -v s="$sm" -v p="$pm" 'BEGIN { printf "%.2f", (p > 0 ? s / p : 0) }')
    printf '%-11s %6s %5s %12.0f %12.0f %6sx  %s |%s; load%s\n' $model "${split:-?}" $batch "$sm" "$pm" "$ratio" \
      "$(printf '%s' "$s_runs" | awk '{for (i = 1; i <= NF; i++) printf " %.0f", $i}')" \
      "$(printf '%s' "$p_runs" | awk '{for (i = 1; i <= NF; i++) printf " %.0f", $i}')" "$loads"
    awk -v r="$ratio" 'BEGIN { exit (r >= 1.0 ? 0 : 1) }' || status=1
  done
  [ $status -eq 0 ] && echo "peers: target met (strata --pp 2 >= 1.0x everywhere)" || echo "peers: target NOT met"
  exit $status
fi

precision=fp32
[ "$amp" = bf16 ] && precision=bf16
echo "peers: precision $precision (PyTorch autocast: $amp)"
versions=$("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null)
[ $llama -eq 1 ] &&
  versions="$versions, transformers $("$py" -c 'import transformers; print(transformers.__version__)' 2>/dev/null)"
echo "peers: strata ($TRAIN) vs PyTorch $versions," \
  "$reps alternated runs each, medians, first step excluded; $(nproc) cores; PyTorch OMP_WAIT_POLICY=$torch_wait GOMP_SPINCOUNT=$torch_spin"
printf '%-11s %7s %12s %12s %7s  %s\n' model threads strata pytorch ratio "runs (strata | pytorch), load before each pair"
status=0
for model in $(echo "$models" | tr ',' ' '); do
  case $model in
    gpt-tiny) batch=16 steps=40 spec=gpt-tiny peer=gpt.py ;;
    gpt-512x8) batch=4 steps=5 spec="$tmp/gpt-512x8.json" peer=gpt.py ;;
    llama-tiny) batch=16 steps=40 spec=llama-tiny peer=llama.py ;;
    llama-512x8) batch=4 steps=5 spec="$tmp/llama-512x8.json" peer=llama.py ;;
  esac
  steps=${steps_opt:-$steps}
  for t in $(echo "$threads" | tr ',' ' '); do
    s_runs= p_runs= loads=
    i=0
    while [ $i -lt "$reps" ]; do
      loads="$loads $(load)"
      s=$(STRATA_HOST_THREADS=$t "$TRAIN" --model "$spec" --device 0 --batch $batch --steps $steps --eval-every 0 \
            --eval-batches 1 --precision "$precision" --json 2>/dev/null | grep '"event":"summary"' | tps)
      p=$(OMP_NUM_THREADS=$t OMP_WAIT_POLICY=$torch_wait GOMP_SPINCOUNT=$torch_spin "$py" "$here/$peer" --model $model --batch $batch --steps $steps --threads $t --amp "$amp" 2>/dev/null | tps)
      s_runs="$s_runs ${s:-0}" p_runs="$p_runs ${p:-0}"
      i=$((i + 1))
    done
    sm=$(echo "$s_runs" | median) pm=$(echo "$p_runs" | median)
    ratio=$(awk -v s="$sm" -v p="$pm" 'BEGIN { printf "%.2f", (p > 0 ? s / p : 0) }')
    printf '%-11s %7s %12.0f %12.0f %6sx  %s |%s; load%s\n' $model $t "$sm" "$pm" "$ratio" \
      "$(printf '%s' "$s_runs" | awk '{for (i = 1; i <= NF; i++) printf " %.0f", $i}')" \
      "$(printf '%s' "$p_runs" | awk '{for (i = 1; i <= NF; i++) printf " %.0f", $i}')" "$loads"
    awk -v r="$ratio" 'BEGIN { exit (r >= 1.0 ? 0 : 1) }' || status=1
  done
done
[ $status -eq 0 ] && echo "peers: target met (strata >= 1.0x everywhere)" || echo "peers: target NOT met"
exit $status
