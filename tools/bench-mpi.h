/* SPDX-License-Identifier: MIT */
/* bench-mpi.h — strata-bench mpi (bench-mpi.c): traffic between ranks beside OpenMPI's own calls. */
#ifndef STRATA_TOOLS_BENCH_MPI_H
#define STRATA_TOOLS_BENCH_MPI_H

/* strata-bench mpi [OPTIONS], under mpirun. Returns the exit status. */
int strata_bench_mpi_main(int argc, char **argv);

#endif /* STRATA_TOOLS_BENCH_MPI_H */
