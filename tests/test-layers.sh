#!/bin/sh
# SPDX-License-Identifier: MIT
# test-layers.sh — calls go one way in libstrata: read from the built objects' symbols (nm), which folder's code
# calls which folder's, and fail on any call to a folder not below the caller's in
#   core -> device -> topology -> model -> io -> comm -> parallel -> train -> plan.
# Prints the edges it found. Also checks that lib/ holds no C file at its root, that no C file of lib/, topology/,
# backends/ or tools/ is over 1,200 lines, and that the check finds an upward call in a made-up library.
# Usage (make check runs it): tests/test-layers.sh, with top_builddir and top_srcdir set, or from the build dir.
set -u
b=${top_builddir:-.}
s=${top_srcdir:-..}
echo "1..4"
fail=0

# each folder's level: a folder may call its own and lower levels only
layers="lib/core:0 lib/device:1 topology:2 lib/model:3 lib/io:4 lib/comm:5 lib/parallel:6 lib/train:7 lib/plan:8"
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
# upward_calls BUILD: the calls of BUILD's library objects from a folder to one not below it, one line each
# ("FROM TO symbol ..."), into $tmp/upward; the edges found into $tmp/edges; sets objs to the objects read.
upward_calls() {
  objs=0
  : >"$tmp/all"
  for l in $layers; do
    dir=${l%%:*}
    for o in "$1/$dir"/.libs/libstrata_la-*.o "$1/$dir"/libstrata_la-*.o; do
      [ -f "$o" ] || continue
      objs=$((objs + 1))
      nm "$o" | awk -v f="$dir" '$1 == "U" { print f, "U", $2; next } NF == 3 && $2 ~ /[TDBRC]/ { print f, "D", $3 }' \
        >>"$tmp/all"
    done
  done
  sort -u "$tmp/all" >"$tmp/syms"
  # definer of each symbol (a symbol defined in two folders would be a link error already)
  awk '$2 == "D" { def[$3] = $1 } $2 == "U" { use[NR] = $1 " " $3 }
       END { for (i in use) { split(use[i], a, " "); if (a[2] in def && def[a[2]] != a[1]) print a[1], def[a[2]], a[2] } }' \
    "$tmp/syms" | sort >"$tmp/calls"
  awk '{ print $1, $2 }' "$tmp/calls" | sort | uniq -c | awk '{ print "# " $2 " -> " $3 " (" $1 " symbols)" }' >"$tmp/edges"
  : >"$tmp/upward"
  for l in $layers; do
    for m in $layers; do
      from=${l%%:*} lf=${l#*:} to=${m%%:*} lt=${m#*:}
      [ "$from" = "$to" ] && continue
      if [ "$lt" -ge "$lf" ]; then
        hits=$(awk -v a="$from" -v c="$to" '$1 == a && $2 == c { print $3 }' "$tmp/calls" | tr '\n' ' ')
        [ -n "$hits" ] && echo "$from $to $hits" >>"$tmp/upward"
      fi
    done
  done
}

upward_calls "$b"
if [ "$objs" -eq 0 ]; then
  echo "not ok 1 - the library's objects were not found under $b (build first)"
  fail=1
else
  cat "$tmp/edges"
  if [ ! -s "$tmp/upward" ]; then
    echo "ok 1 - calls go one way ($objs objects)"
  else
    sed 's/^\([^ ]*\) \([^ ]*\) /# \1 calls \2, which is not below it: /' "$tmp/upward"
    echo "not ok 1 - a folder calls one that is not below it"
    fail=1
  fi
fi

# no C file at lib/'s root
root=$(cd "$s/lib" && ls ./*.c 2>/dev/null | tr '\n' ' ')
if [ -z "$root" ]; then
  echo "ok 2 - lib/ holds no C file at its root"
else
  echo "not ok 2 - C files at lib/'s root: $root"
  fail=1
fi

# no C file over 1,200 lines
big=$(cd "$s" && find lib topology backends tools -name '*.c' -exec wc -l {} + | awk '$2 != "total" && $1 > 1200 { print $2 " (" $1 ")" }' | tr '\n' ' ')
if [ -z "$big" ]; then
  echo "ok 3 - no C file of lib/, topology/, backends/, tools/ is over 1,200 lines"
else
  echo "not ok 3 - C files over 1,200 lines: $big"
  fail=1
fi

# the check itself can fail: a made-up library whose core calls train (up) and whose train calls core (down)
cc=$(command -v cc || command -v gcc || command -v clang)
if [ -z "$cc" ]; then
  echo "ok 4 - the check finds a call that goes up # SKIP no C compiler"
else
  mkdir -p "$tmp/fake/lib/core/.libs" "$tmp/fake/lib/train/.libs"
  printf 'int strata__high(void);\nint strata__low(void) { return 1; }\nint strata__up(void) { return strata__high(); }\n' \
    >"$tmp/low.c"
  printf 'int strata__low(void);\nint strata__high(void) { return strata__low() + 1; }\n' >"$tmp/high.c"
  if "$cc" -c -o "$tmp/fake/lib/core/.libs/libstrata_la-low.o" "$tmp/low.c" &&
     "$cc" -c -o "$tmp/fake/lib/train/.libs/libstrata_la-high.o" "$tmp/high.c"; then
    upward_calls "$tmp/fake"
    if [ "$objs" -eq 2 ] && [ "$(cat "$tmp/upward")" = "lib/core lib/train strata__high " ]; then
      echo "ok 4 - the check finds a call that goes up (core -> train in a made-up library), and only that one"
    else
      echo "not ok 4 - the check on a made-up library: $objs objects, found: $(cat "$tmp/upward")"
      fail=1
    fi
  else
    echo "not ok 4 - cannot compile the made-up library with $cc"
    fail=1
  fi
fi
exit $fail
