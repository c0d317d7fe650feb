# SPDX-License-Identifier: MIT
# tools/ — strata-bench (strata-topo is built from topology/local.mk).
bin_PROGRAMS += tools/strata-bench
tools_strata_bench_SOURCES = %reldir%/strata-bench.c %reldir%/bench-comm.c %reldir%/bench-comm.h \
	%reldir%/bench-mpi.c %reldir%/bench-mpi.h %reldir%/cli.h lib/parse.c lib/parse.h
# MPI_CFLAGS / MPI_LIBS are empty without MPI: `strata-bench mpi` calls OpenMPI itself to compare.
tools_strata_bench_CPPFLAGS = $(AM_CPPFLAGS) $(MPI_CFLAGS)
tools_strata_bench_LDADD = libstrata.la $(MPI_LIBS) -lm
if BUILD_OPENCL
tools_strata_bench_CPPFLAGS += $(OPENCL_CFLAGS) -DSTRATA_HAVE_OPENCL
tools_strata_bench_LDADD += $(OPENCL_LIBS)
endif
dist_man_MANS += man/strata-bench.1
