/* SPDX-License-Identifier: MIT */
/* bench-comm.h — the collective benchmarks of strata-bench (bench-comm.c). */
#ifndef STRATA_TOOLS_BENCH_COMM_H
#define STRATA_TOOLS_BENCH_COMM_H

/* 1 when `name` is one of the collective benchmarks. */
static inline int strata_bench_is_comm(const char *name) {
  return !strcmp(name, "allreduce") || !strcmp(name, "allgather") || !strcmp(name, "reducescatter") ||
         !strcmp(name, "broadcast");
}

/* strata-bench COLLECTIVE [OPTIONS]: argv[1] is the collective. Returns the exit status. */
int strata_bench_comm_main(int argc, char **argv);

#endif /* STRATA_TOOLS_BENCH_COMM_H */
