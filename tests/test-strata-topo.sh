#!/bin/sh
# SPDX-License-Identifier: MIT
# test-strata-topo.sh — tool-level tests of strata-topo: exit status 2 and one-line errors on bad input, stable --json, DOT/SVG, every real dump; prints TAP.
top_builddir=${top_builddir:-.}
top_srcdir=${top_srcdir:-.}
TOOL="$top_builddir/tools/strata-topo"
FIX="$top_srcdir/tests/fixtures/topology"
DUMPS="$top_srcdir/tests/fixtures/topologies"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/strata-topo-sh.XXXXXX") || exit 99
trap 'rm -rf "$TMP"' EXIT INT TERM
# hwloc only unless a test asks for devices: keeps runs quick and independent of backends
STRATA_BACKENDS=host
STRATA_HOST_DEVICES=2
export STRATA_BACKENDS STRATA_HOST_DEVICES
unset STRATA_TOPOLOGY_XML

n=0
fails=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); fails=$((fails + 1)); echo "not ok $n - $1"; shift; for l in "$@"; do echo "# $l"; done; }
skip() { n=$((n + 1)); echo "ok $n - $1 # SKIP $2"; }

# bad_input NAME FILE WORDS: exit 2, nothing on stdout, exactly one stderr line naming FILE and saying WORDS
bad_input() {
  "$TOOL" --input "$2" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  lines=$(wc -l <"$TMP/err" | tr -d ' ')
  if [ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] && [ ! -s "$TMP/out" ] && grep -qF "$2" "$TMP/err" &&
    grep -qF "$3" "$TMP/err"; then
    ok "$1: exit 2, one line naming the file"
  else
    not_ok "$1: exit 2, one line naming the file" "rc=$rc lines=$lines" "$(cat "$TMP/err")"
  fi
}

if [ ! -x "$TOOL" ]; then
  echo "1..0 # SKIP $TOOL not built"
  exit 0
fi

bad_input "missing file" "$FIX/no-such-file.xml" "cannot open"
bad_input "malformed XML" "$FIX/malformed.xml" "malformed"
bad_input "truncated XML" "$FIX/truncated.xml" "truncated"
bad_input "XML without PCI information" "$FIX/no-pci.xml" "no PCI"
bad_input "distance matrix of the wrong size" "$FIX/wrong-matrix-size.xml" "NVLinkBandwidth"
printf 'not xml at all\n' >"$TMP/garbage.xml"
bad_input "not XML" "$TMP/garbage.xml" "not XML"
head -c 3000 "$FIX/two-socket-4gpu-nvlink.xml" >"$TMP/cut.xml"
bad_input "XML cut at 3000 bytes" "$TMP/cut.xml" "truncated"

STRATA_TOPOLOGY_XML="$FIX/malformed.xml" "$TOOL" >/dev/null 2>"$TMP/err"
rc=$?
if [ "$rc" -eq 2 ] && grep -qF "malformed.xml" "$TMP/err"; then ok "STRATA_TOPOLOGY_XML is read"; else not_ok "STRATA_TOPOLOGY_XML is read" "rc=$rc"; fi

"$TOOL" --no-such-option >/dev/null 2>"$TMP/err"
rc=$?
if [ "$rc" -eq 2 ] && [ "$(wc -l <"$TMP/err")" -eq 1 ]; then ok "unknown option: exit 2"; else not_ok "unknown option: exit 2" "rc=$rc"; fi

"$TOOL" --input "$FIX/two-socket-4gpu-nvlink.xml" --socket-gbps abc >/dev/null 2>&1
rc=$?
if [ "$rc" -eq 2 ]; then ok "bad --socket-gbps: exit 2"; else not_ok "bad --socket-gbps: exit 2" "rc=$rc"; fi

if "$TOOL" --help | grep -q -- "--measure"; then ok "--help"; else not_ok "--help"; fi

# the report of the fixture
if "$TOOL" --input "$FIX/two-socket-4gpu-nvlink.xml" >"$TMP/report" 2>"$TMP/err" &&
  grep -q "^GPU0 *X *NV4 *SYS *SYS" "$TMP/report" && grep -q "^GPU2 *SYS *SYS *X *PIX" "$TMP/report" &&
  grep -q "island 0: GPU0 GPU1 *(NVLINK, 4 link" "$TMP/report" && grep -q "island 1: GPU2 GPU3 *(PIX" "$TMP/report" &&
  grep -q "^Legend" "$TMP/report" && grep -q "^Bandwidth" "$TMP/report" && [ ! -s "$TMP/err" ]; then
  ok "report: connection matrix, legend, bandwidth, islands"
else
  not_ok "report: connection matrix, legend, bandwidth, islands" "$(cat "$TMP/err")"
fi

# stable JSON
"$TOOL" --input "$FIX/two-socket-4gpu-nvlink.xml" --json >"$TMP/a.json" 2>/dev/null
rc1=$?
"$TOOL" --input "$FIX/two-socket-4gpu-nvlink.xml" --json >"$TMP/b.json" 2>/dev/null
rc2=$?
if [ "$rc1" -eq 0 ] && [ "$rc2" -eq 0 ] && cmp -s "$TMP/a.json" "$TMP/b.json" &&
  grep -q '"schema": "strata-topology/1"' "$TMP/a.json"; then
  ok "--json is stable"
else
  not_ok "--json is stable" "rc=$rc1/$rc2"
fi
if command -v python3 >/dev/null 2>&1; then
  if python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d["gpus"])==4 and len(d["links"])==25 and [i["gpus"] for i in d["islands"]]==[[0,1],[2,3]]' "$TMP/a.json" 2>"$TMP/err"; then
    ok "--json parses and says 4 GPUs, 25 links, islands [0,1] [2,3]"
  else
    not_ok "--json parses and says 4 GPUs, 25 links, islands [0,1] [2,3]" "$(cat "$TMP/err")"
  fi
else
  skip "--json content" "no python3"
fi

if "$TOOL" --input "$FIX/two-socket-4gpu-nvlink.xml" --dot >"$TMP/g.dot" 2>/dev/null && head -1 "$TMP/g.dot" | grep -q "^graph" &&
  grep -q "gpu0 -- gpu1" "$TMP/g.dot" && tail -1 "$TMP/g.dot" | grep -q "^}"; then
  ok "--dot"
else
  not_ok "--dot"
fi
if "$TOOL" --input "$FIX/two-socket-4gpu-nvlink.xml" --svg >"$TMP/g.svg" 2>/dev/null && grep -q "<svg" "$TMP/g.svg" &&
  tail -1 "$TMP/g.svg" | grep -q "</svg>"; then
  if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import sys,xml.dom.minidom as m; m.parse(sys.argv[1])' "$TMP/g.svg" 2>/dev/null; then
    not_ok "--svg" "not well-formed XML"
  else
    ok "--svg"
  fi
else
  not_ok "--svg"
fi

"$TOOL" --input "$FIX/cpu-only.xml" >"$TMP/cpu" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && grep -q "GPUs (0)" "$TMP/cpu" && grep -q "^Host:" "$TMP/cpu"; then ok "box without GPU"; else not_ok "box without GPU" "rc=$rc"; fi

# the host and its devices, live (the CPU devices are what this machine has)
"$TOOL" >"$TMP/live" 2>"$TMP/err"
rc=$?
if [ "$rc" -eq 0 ] && grep -q "^Host:" "$TMP/live" && grep -q "^Runtime devices" "$TMP/live"; then
  ok "live report with runtime devices"
else
  not_ok "live report with runtime devices" "rc=$rc" "$(cat "$TMP/err")"
fi
"$TOOL" --measure=1M --json >"$TMP/m.json" 2>"$TMP/err"
rc=$?
if [ "$rc" -eq 0 ] && grep -q '"measured_gbps"' "$TMP/m.json"; then
  ok "--measure shows measured figures"
elif grep -q "no runtime device" "$TMP/err"; then
  skip "--measure shows measured figures" "no runtime device (backends not built?)"
else
  not_ok "--measure shows measured figures" "rc=$rc" "$(cat "$TMP/err")"
fi

# run from the build tree, the tool finds this tree's backend modules with no STRATA_BACKEND_PATH;
# the same binary outside a build tree (as installed) does not look into the build tree
env -u STRATA_BACKEND_PATH STRATA_BACKENDS=host "$TOOL" >"$TMP/bt.txt" 2>"$TMP/err"
rc=$?
if [ ! -e "$top_builddir/backends/host/.libs/strata-host.so" ]; then
  skip "build tree: host device listed without STRATA_BACKEND_PATH" "the host backend is not built"
elif [ "$rc" -eq 0 ] && grep -q '^  0  *host  *host virtual device 0' "$TMP/bt.txt"; then
  ok "build tree: host device listed without STRATA_BACKEND_PATH"
else
  not_ok "build tree: host device listed without STRATA_BACKEND_PATH" "rc=$rc" "$(cat "$TMP/bt.txt" "$TMP/err")"
fi
REAL="$top_builddir/tools/.libs/strata-topo"
[ -x "$REAL" ] || REAL="$top_builddir/tools/strata-topo"
mkdir -p "$TMP/prefix/bin"
if cp "$REAL" "$TMP/prefix/bin/strata-topo" 2>/dev/null; then
  env -u STRATA_BACKEND_PATH STRATA_BACKENDS=host LD_LIBRARY_PATH="$top_builddir/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "$TMP/prefix/bin/strata-topo" --json >"$TMP/inst.json" 2>"$TMP/err"
  rc=$?
  if [ -e "${strata_pkglibdir:-/nonexistent}/strata-host.so" ]; then
    skip "outside a build tree: the build tree's modules are not loaded" "a host module is installed in $strata_pkglibdir"
  elif [ "$rc" -eq 0 ] && ! grep -q '"backend": *"host"' "$TMP/inst.json"; then
    ok "outside a build tree: the build tree's modules are not loaded"
  else
    not_ok "outside a build tree: the build tree's modules are not loaded" "rc=$rc" "$(head -c 600 "$TMP/inst.json")" "$(cat "$TMP/err")"
  fi
else
  skip "outside a build tree: the build tree's modules are not loaded" "cannot copy $REAL"
fi

# every real dump (fixtures of the tree: a missing one fails): loads, exit 0, stable JSON
if ls "$DUMPS"/*.xml >/dev/null 2>&1; then
  for f in "$DUMPS"/*.xml; do
    name=$(basename "$f")
    "$TOOL" --input "$f" --json >"$TMP/1.json" 2>"$TMP/err"
    rc=$?
    "$TOOL" --input "$f" --json >"$TMP/2.json" 2>>"$TMP/err"
    "$TOOL" --input "$f" >/dev/null 2>>"$TMP/err" && "$TOOL" --input "$f" --dot >/dev/null 2>>"$TMP/err"
    again=$?
    # a dump edited to show a case (SOURCES.md) may warn about it; the unedited ones read without a doubt
    case $name in *-edited.xml) sed -i '/^strata-topo: warning: /d' "$TMP/err" ;; esac
    if [ "$rc" -eq 0 ] && [ "$again" -eq 0 ] && cmp -s "$TMP/1.json" "$TMP/2.json" && [ ! -s "$TMP/err" ]; then
      ok "$name: report, stable JSON, DOT"
    else
      not_ok "$name: report, stable JSON, DOT" "rc=$rc" "$(cat "$TMP/err")"
    fi
  done
else
  not_ok "real dumps" "$DUMPS holds no dump: the real hwloc dumps are fixtures of the tree"
fi

# links above the GPUs recorded in a power-saving state (JURECA-DC's root-port links edited to 1.0 GB/s): each one
# a warning, and the paths the unedited dump's
edited="$DUMPS/jureca-dc-a100-4gpu-root-ports-1gbps-edited.xml"
"$TOOL" --input "$edited" >"$TMP/out" 2>"$TMP/err"
rc=$?
"$TOOL" --input "$DUMPS/jureca-dc-a100-4gpu-pci-only.xml" >"$TMP/orig" 2>/dev/null
if [ "$rc" -eq 0 ] && [ "$(grep -c 'the PCIe link above it at 0000:.* is recorded at 1.00 GB/s, a Gen1 or Gen2 rate under half of the GPU.s own 31.51 GB/s: taken as a power-saving state' "$TMP/err")" -eq 4 ] &&
  [ "$(sed -n '/^Bandwidth/,/^Islands/p' "$TMP/out")" = "$(sed -n '/^Bandwidth/,/^Islands/p' "$TMP/orig")" ]; then
  ok "root-port links at 1.0 GB/s above 31.5 GB/s GPUs: four warnings, the unedited dump's bandwidths"
else
  not_ok "root-port links at 1.0 GB/s above 31.5 GB/s GPUs: four warnings, the unedited dump's bandwidths" "rc=$rc" \
    "$(head -c 600 "$TMP/err")" "$(sed -n '/^Bandwidth/,/^Islands/p' "$TMP/out")"
fi

# GPUs under NUMA nodes a cgroup leaves out (the XE8640's allowed nodeset edited to nodes 0, 2, 4, 6): each GPU keeps
# its node, the unedited dump's, and a warning names the GPU and the node
edited="$DUMPS/dell-xe8640-h100-4gpu-cgroup-even-nodes-edited.xml"
"$TOOL" --input "$edited" >"$TMP/out" 2>"$TMP/err"
rc=$?
"$TOOL" --input "$DUMPS/dell-xe8640-h100-4gpu-nvlink.xml" >"$TMP/orig" 2>/dev/null
if [ "$rc" -eq 0 ] && grep -q '^  GPU2 .* 63\.02 *7  *1  *cuda2' "$TMP/out" &&
  [ "$(grep -c 'NUMA node [1357] of GPU[0-3] (0000:..:00.0) lies outside this process.s allowed set (cgroup)' "$TMP/err")" -eq 4 ] &&
  grep -qF 'NUMA node 7 of GPU2 (0000:cb:00.0) lies outside' "$TMP/err" &&
  [ "$(sed -n '/^GPUs/,/^Legend/p' "$TMP/out")" = "$(sed -n '/^GPUs/,/^Legend/p' "$TMP/orig")" ]; then
  ok "GPUs under NUMA nodes outside the cgroup's allowed set: their nodes shown, one warning each"
else
  not_ok "GPUs under NUMA nodes outside the cgroup's allowed set: their nodes shown, one warning each" "rc=$rc" \
    "$(head -c 800 "$TMP/err")" "$(sed -n '/^GPUs/,/^Legend/p' "$TMP/out")"
fi
"$TOOL" --input "$edited" --json >"$TMP/out.json" 2>/dev/null
if grep -q '"numa_node": *7' "$TMP/out.json" && grep -qF 'NUMA node 7 of GPU2' "$TMP/out.json"; then
  ok "--json: the recovered node and the warning"
else
  not_ok "--json: the recovered node and the warning" "$(grep -n 'numa_node\|warning' "$TMP/out.json" | head -20)"
fi

# GPU-memory NUMA nodes of which two name their GPU (Lassen edited, SOURCES.md): the order read from those two, said
edited="$DUMPS/ibm-power9-lassen-v100-4gpu-gpu-memory-two-owners-edited.xml"
"$TOOL" --input "$edited" --json >"$TMP/out.json" 2>"$TMP/err"
rc=$?
if [ "$rc" -eq 0 ] && [ "$(grep -o '"memory_numa_node": *[0-9-]*' "$TMP/out.json" | tr -dc '0-9\n' | tr '\n' ' ')" = "255 254 253 252 " ] &&
  grep -qF 'taken as the memory of GPUs 2..3 in descending order (GPU2 on P#253), the order the NUMA nodes that name their GPU show' "$TMP/err"; then
  ok "GPU-memory NUMA nodes, two naming their GPU: the others in the order those show, said"
else
  not_ok "GPU-memory NUMA nodes, two naming their GPU: the others in the order those show, said" "rc=$rc" \
    "$(cat "$TMP/err")" "$(grep memory_numa_node "$TMP/out.json")"
fi

echo "1..$n"
[ "$fails" -eq 0 ]
