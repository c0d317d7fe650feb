#!/bin/sh
# SPDX-License-Identifier: MIT
# generate.sh — strata-generate's tokens/s with the KV cache against --no-kv-cache (every token runs the whole
# window), on a GPT and a llama of context 512, greedy, runs alternated, medians; both must give the same ids. A
# benchmark, not a test.
# Usage: bench/generate.sh [BUILD_DIR]    (BUILD_DIR default: ./build or .)
#   RUNS=N     alternated runs of each mode (default 3; the median is reported)
#   LENGTH=N   tokens generated after a 16-token prompt (default 300; the prompt and them stay inside the context)
#   MODELS=L   gpt,llama (default both): d_model 512, 8 layers, 8 heads (the llama's on 4 key/value heads, SwiGLU
#              d_ff 1536), context 512, vocabulary 256, untied, trained one step (weights, not quality, matter here)
#   STRATA_HOST_THREADS as strata's (default: every core)
# Target (issue 33): the KV cache faster than the whole window (it computes one row per token instead of the window).
set -u
. "$(dirname "$0")/lib.sh"
bench_setup generate "${1:-}" strata-train strata-generate
TRAIN="$build/tools/strata-train"
GEN="$build/tools/strata-generate"
: "${STRATA_BACKEND_PATH:=$build/backends/host/.libs}"
STRATA_BACKENDS=host
export STRATA_BACKEND_PATH STRATA_BACKENDS
RUNS=${RUNS:-3}
LENGTH=${LENGTH:-300}
MODELS=${MODELS:-gpt,llama}
CONTEXT=512
if [ $((LENGTH + 16)) -gt $CONTEXT ]; then
  echo "generate: LENGTH=$LENGTH: the prompt (16) and the tokens must fit the context of $CONTEXT" >&2
  exit 2
fi
for model in $(echo "$MODELS" | tr ',' ' '); do
  case $model in
    gpt|llama) ;;
    *) echo "generate: unknown model $model (gpt or llama)" >&2; exit 2 ;;
  esac
done
bench_gpt "$tmp/gpt.json" 512 8 $CONTEXT 8
cat >"$tmp/llama.json" <<JSON
{"kind": "llama", "name": "llama-512x8-ctx$CONTEXT", "vocab": 256, "context": $CONTEXT, "d_model": 512,
 "layers": 8, "heads": 8, "n_kv_heads": 4, "d_ff": 1536, "rope_theta": 10000, "norm_eps": 1e-5, "tied": false}
JSON
prompt="72 101 108 108 111 44 32 119 111 114 108 100 33 32 84 104"
rate() { sed -n 's/.* tokens in .* s: \([0-9.]*\) tokens\/s.*/\1/p' "$1" | tail -n 1; }
load() { cut -d' ' -f1 /proc/loadavg; }

echo "generate: strata-generate --tokens, $LENGTH tokens after a 16-token prompt, greedy, context $CONTEXT," \
  "$RUNS alternated runs each, medians; $(nproc 2>/dev/null || echo '?') cores," \
  "STRATA_HOST_THREADS=${STRATA_HOST_THREADS:-all}"
printf '%-7s %14s %14s %7s  %s\n' model kv-cache no-kv-cache ratio "runs (cache | no cache), load before each pair"
status=0
for model in $(echo "$MODELS" | tr ',' ' '); do
  if ! "$TRAIN" --model "$tmp/$model.json" --device 0 --steps 1 --batch 1 --eval-every 0 --eval-batches 1 \
      --save "$tmp/$model.safetensors" >"$tmp/train.log" 2>&1; then
    echo "generate: strata-train of the $model failed:" >&2
    tail -n 3 "$tmp/train.log" >&2
    exit 1
  fi
  c_runs= w_runs= loads= same=yes
  i=0
  while [ $i -lt "$RUNS" ]; do
    loads="$loads $(load)"
    for mode in cache window; do
      flag=
      [ $mode = window ] && flag=--no-kv-cache
      if ! "$GEN" --checkpoint "$tmp/$model.safetensors" --device 0 --tokens --prompt "$prompt" --length "$LENGTH" \
          --temperature 0 $flag >"$tmp/$mode.out" 2>"$tmp/$mode.err"; then
        echo "generate: strata-generate $flag on the $model failed:" >&2
        tail -n 3 "$tmp/$mode.err" >&2
        exit 1
      fi
    done
    cmp -s "$tmp/cache.out" "$tmp/window.out" || same=NO
    c_runs="$c_runs $(rate "$tmp/cache.err")" w_runs="$w_runs $(rate "$tmp/window.err")"
    i=$((i + 1))
  done
  cm=$(echo "$c_runs" | tr ' ' '\n' | grep . >"$tmp/c"; med "$tmp/c")
  wm=$(echo "$w_runs" | tr ' ' '\n' | grep . >"$tmp/w"; med "$tmp/w")
  ratio=$(awk -v c="$cm" -v w="$wm" 'BEGIN { printf "%.2f", (w > 0 ? c / w : 0) }')
  printf '%-7s %14.1f %14.1f %6sx  %s |%s; load%s; same ids: %s\n' $model "$cm" "$wm" "$ratio" "$c_runs" "$w_runs" \
    "$loads" $same
  [ $same = yes ] || status=1
  awk -v r="$ratio" 'BEGIN { exit (r > 1.0 ? 0 : 1) }' || status=1
done
[ $status -eq 0 ] && echo "generate: target met (the KV cache faster, the same ids)" || echo "generate: target NOT met"
exit $status
