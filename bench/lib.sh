# SPDX-License-Identifier: MIT
# bench/lib.sh — what the benchmark scripts share. Sourced by them, never run:
#   . "$(dirname "$0")/lib.sh"
#   bench_setup NAME BUILD TOOL...   $build: BUILD, else ./build when it holds the tools, else .; every
#                                     $build/tools/TOOL checked (exit 2 naming the missing one); $tmp: a scratch
#                                     directory, removed at exit
#   bench_gpt FILE D_MODEL LAYERS CONTEXT HEADS   a GPT model file: vocabulary 256, d_ff 4 x D_MODEL, untied
#   get FILE EVENT FIELD             FIELD of the last JSON line of EVENT in FILE (strata-train --json)
#   med FILE                         the median of the numbers in FILE, one per line

bench_setup() {
  bench_name=$1
  build=$2
  shift 2
  if [ -z "$build" ]; then
    if [ -x build/tools/strata-train ]; then build=build; else build=.; fi
  fi
  for t in "$@"; do
    if [ ! -x "$build/tools/$t" ]; then
      echo "$bench_name: no $build/tools/$t; build first (make), or pass the build directory" >&2
      exit 2
    fi
  done
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/strata-$bench_name.XXXXXX") || exit 1
  trap 'rm -rf "$tmp"' EXIT INT TERM
}

bench_gpt() {
  cat >"$1" <<JSON
{"kind": "gpt", "name": "gpt-${2}x${3}-ctx${4}", "vocab": 256, "context": $4, "d_model": $2,
 "layers": $3, "heads": $5, "d_ff": $((4 * $2)), "tied": false}
JSON
}

get() { grep "\"event\":\"$2\"" "$1" | tail -n 1 | sed -n "s/.*\"$3\":\\([^,}]*\\).*/\\1/p"; }

med() { sort -g "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
