#!/bin/sh
# SPDX-License-Identifier: MIT
# test-mpi-nccl.sh — collectives across MPI ranks on real CUDA devices: one rank over all its GPUs and (with two GPUs)
# two ranks with one GPU each take the NCCL path (ncclGetUniqueId on member 0's rank, ncclCommInitRank everywhere) and
# match the host; two ranks on one GPU take the hierarchical path, both saying why, and NCCL asked for is refused.
# Prints TAP. Without MPI configured, mpirun or a CUDA device it skips as a whole, saying why ("1..0 # SKIP why") and
# exits 77, so that neither make check (tests/run-test) nor tests/gpu/run counts it as passed; under
# STRATA_TEST_REQUIRE_CUDA=1 (tests/gpu/run) a missing CUDA device fails instead. MPI_CHECK names the mpi-check binary
# (tests/gpu/run gives the real one); MPI_TEST_TIMEOUT bounds each mpirun (seconds, default 300).
b=${top_builddir:-.}
prog=${MPI_CHECK:-$b/tests/mpi-check}
n=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
notok() { n=$((n + 1)); echo "not ok $n - $*"; }
skip() { n=$((n + 1)); echo "ok $n # SKIP $*"; }
finish() { echo "1..$n"; exit 0; }
skip_all() { echo "1..0 # SKIP $*"; exit 77; }
out=$(mktemp -d "${TMPDIR:-/tmp}/strata-mpi-nccl.XXXXXX") || exit 1
trap 'rm -rf "$out"' EXIT
unset STRATA_CLUSTER_RANKS_PER_NODE STRATA_COMM_ALGORITHM STRATA_MPI MPI_CHECK_DEVICE MPI_CHECK_ALGORITHM \
  MPI_CHECK_PATH_ONLY MPI_CHECK_DEVICES_PER_RANK
STRATA_BACKENDS=cuda
export STRATA_BACKENDS

check() {
  name=$1 log=$2; shift 2
  if "$@" >"$log" 2>&1; then ok "$name"; else notok "$name"; sed 's/^/# /' "$log" | tail -40; fi
}
# agreed NAME LOG PATTERN N: each of the N ranks printed one path line, the same one, matching PATTERN
agreed() {
  grep '^path rank [0-9]*: ' "$2" | grep -v '^path rank [0-9]*: allreduce of ' >"$out/agreed" || :
  lines=$(sed 's/^path rank [0-9]*: //' "$out/agreed" | sort -u)
  if [ "$(wc -l <"$out/agreed")" -eq "$4" ] && [ "$(printf '%s\n' "$lines" | wc -l)" -eq 1 ] &&
     printf '%s\n' "$lines" | grep -Eq -- "$3"; then
    ok "$1"
  else notok "$1 (one line /$3/ from each rank)"; sed 's/^/# /' "$2" | tail -20; fi
}

if ! grep -q '^#define STRATA_HAVE_MPI 1' "$b/config.h" 2>/dev/null; then
  skip_all "NCCL across ranks: strata was configured without MPI (./configure --with-mpi)"
fi
mpirun=${MPIRUN:-mpirun}
if ! command -v "$mpirun" >/dev/null 2>&1; then
  skip_all "NCCL across ranks: '$mpirun' is not on PATH (install openmpi-bin)"
fi
run="timeout -k 5 ${MPI_TEST_TIMEOUT:-300} $mpirun --allow-run-as-root --oversubscribe --mca btl self,vader,tcp -np"

# How many CUDA devices one process sees.
env STRATA_MPI=0 STRATA_LOG=info,device "$prog" view >"$out/view.log" 2>&1
gpus=$(sed -n 's/^view: 1 ranks, 1 nodes, \([0-9]*\) devices.*/\1/p' "$out/view.log")
if [ -z "$gpus" ] || [ "$gpus" -eq 0 ]; then
  why="no CUDA device (STRATA_BACKENDS=cuda: ${gpus:-?} devices; $(grep -m 1 -o 'backend cuda: .*' "$out/view.log"))"
  if [ "${STRATA_TEST_REQUIRE_CUDA:-0}" = 1 ]; then notok "STRATA_TEST_REQUIRE_CUDA=1 but $why"; sed 's/^/# /' "$out/view.log"
  else skip_all "NCCL across ranks: $why"; fi
  finish
fi

# One rank over all its GPUs: the NCCL path with one rank (the id made and used in one process).
check "1 rank, $gpus GPU(s): path" "$out/p1.log" $run 1 "$prog" path
agreed "1 rank, $gpus GPU(s): one NCCL communicator" "$out/p1.log" \
  "^nccl: one NCCL communicator over the $gpus members on 1 ranks" 1
check "1 rank, $gpus GPU(s): every collective against the host" "$out/c1.log" $run 1 "$prog" collectives

if [ "$gpus" -ge 2 ]; then
  # Two ranks, one GPU each: the id goes over MPI, each rank joins with its GPU.
  check "2 ranks x 1 GPU: path" "$out/p2.log" $run 2 sh -c 'CUDA_VISIBLE_DEVICES=${OMPI_COMM_WORLD_LOCAL_RANK:-0} exec "$0" "$@"' "$prog" path
  agreed "2 ranks x 1 GPU: one NCCL communicator across the ranks" "$out/p2.log" \
    '^nccl: one NCCL communicator over the 2 members on 2 ranks \(its id from rank 0\)$' 2
  has_sum=$(grep -c '^path rank [01]: allreduce of 4099 over 2 members equals the host' "$out/p2.log")
  if [ "$has_sum" -eq 2 ]; then ok "2 ranks x 1 GPU: NCCL all-reduce equals the host's sum on both ranks"
  else notok "2 ranks x 1 GPU: NCCL all-reduce equals the host's sum on both ranks"; fi
  check "2 ranks x 1 GPU: every collective against the host" "$out/c2.log" \
    $run 2 sh -c 'CUDA_VISIBLE_DEVICES=${OMPI_COMM_WORLD_LOCAL_RANK:-0} exec "$0" "$@"' "$prog" collectives
else
  skip "2 ranks x 1 GPU over NCCL: this machine has one GPU, and NCCL takes a GPU once in a communicator"
fi

# Two ranks given the same GPUs: hierarchical (the CUDA devices inside each rank, MPI between), saying why.
check "2 ranks on the same GPU(s): path" "$out/p3.log" $run 2 "$prog" path
agreed "2 ranks on the same GPU(s): hierarchical on both, naming the shared GPU" "$out/p3.log" \
  '^hierarchical: .* not NCCL: members 0 \(rank 0\) and [0-9]+ \(rank 1\) are one GPU' 2
check "2 ranks on the same GPU(s), NCCL asked for" "$out/p4.log" env MPI_CHECK_ALGORITHM=nccl $run 2 "$prog" path
agreed "2 ranks on the same GPU(s), NCCL asked for: refused on both" "$out/p4.log" \
  '^refused: STRATA_ERR_UNSUPPORTED: .*are one GPU' 2
finish
