#!/bin/sh
# SPDX-License-Identifier: MIT
# test-version.sh — one version everywhere: pkg-config --modversion strata of the build tree's strata.pc, the generated include/strata/version.h (STRATA_VERSION and its three parts) and every tool's --version agree; prints TAP.
top_builddir=${top_builddir:-.}
top_srcdir=${top_srcdir:-.}
HEADER="$top_builddir/include/strata/version.h"
TOOLS="strata-topo strata-plan strata-bench strata-train strata-generate strata-export"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/strata-version-sh.XXXXXX") || exit 99
trap 'rm -rf "$TMP"' EXIT INT TERM

n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"; shift; for l in "$@"; do echo "# $l"; done; }
skip() { n=$((n + 1)); echo "ok $n - $1 # SKIP $2"; }

if ! command -v pkg-config >/dev/null 2>&1; then
  echo "1..0 # SKIP pkg-config is not installed"
  exit 0
fi
if [ ! -f "$top_builddir/strata.pc" ] || [ ! -f "$HEADER" ]; then
  echo "1..0 # SKIP $top_builddir/strata.pc or $HEADER is missing (configure first)"
  exit 0
fi

# the version strata.pc gives, the one every other must equal
v=$(PKG_CONFIG_PATH="$top_builddir" pkg-config --modversion strata 2>"$TMP/err")
rc=$?
if [ "$rc" -eq 0 ] && echo "$v" | grep -Eq '^[0-9]+\.[0-9]+\.[0-9]+$'; then
  ok "pkg-config --modversion strata: $v, MAJOR.MINOR.PATCH"
else
  not_ok "pkg-config --modversion strata: MAJOR.MINOR.PATCH" "rc=$rc version '$v'" "$(cat "$TMP/err")"
fi

# the generated header: STRATA_VERSION, and its three parts joined by dots
hv=$(sed -n 's/^#define STRATA_VERSION "\(.*\)"$/\1/p' "$HEADER")
if [ -n "$v" ] && [ "$hv" = "$v" ]; then
  ok "STRATA_VERSION of version.h is $v"
else
  not_ok "STRATA_VERSION of version.h is pkg-config's" "version.h '$hv', pkg-config '$v'"
fi
parts=""
for p in MAJOR MINOR PATCH; do
  parts="$parts${parts:+.}$(sed -n "s/^#define STRATA_VERSION_$p \([0-9][0-9]*\)$/\1/p" "$HEADER")"
done
if [ -n "$v" ] && [ "$parts" = "$v" ]; then
  ok "STRATA_VERSION_MAJOR.MINOR.PATCH of version.h is $v"
else
  not_ok "STRATA_VERSION_MAJOR.MINOR.PATCH of version.h is pkg-config's" "version.h '$parts', pkg-config '$v'"
fi

# every tool whose --help lists --version: exit 0, one line "NAME VERSION" on stdout, nothing on stderr
for t in $TOOLS; do
  tool="$top_builddir/tools/$t"
  if [ ! -x "$tool" ]; then
    skip "$t --version" "$t not built"
    continue
  fi
  if ! "$tool" --help 2>&1 | grep -q -- '--version'; then
    skip "$t --version" "$t has no --version (its --help lists none)"
    continue
  fi
  "$tool" --version >"$TMP/out" 2>"$TMP/err"
  rc=$?
  if [ "$rc" -eq 0 ] && [ -n "$v" ] && [ "$(cat "$TMP/out")" = "$t $v" ] && [ "$(wc -l <"$TMP/out")" -eq 1 ] &&
    [ ! -s "$TMP/err" ]; then
    ok "$t --version: $t $v"
  else
    not_ok "$t --version prints '$t $v'" "rc=$rc" "stdout: $(cat "$TMP/out")" "stderr: $(cat "$TMP/err")"
  fi
done

echo "1..$n"
[ "$fails" -eq 0 ]
