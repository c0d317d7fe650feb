# SPDX-License-Identifier: MIT
# tools/ — strata-bench (strata-topo is built from topology/local.mk).
bin_PROGRAMS += tools/strata-bench
tools_strata_bench_SOURCES = %reldir%/strata-bench.c %reldir%/bench-comm.c %reldir%/bench-comm.h %reldir%/cli.h lib/parse.c lib/parse.h
tools_strata_bench_CPPFLAGS = $(AM_CPPFLAGS)
tools_strata_bench_LDADD = libstrata.la -lm
if BUILD_OPENCL
tools_strata_bench_CPPFLAGS += $(OPENCL_CFLAGS) -DSTRATA_HAVE_OPENCL
tools_strata_bench_LDADD += $(OPENCL_LIBS)
endif
dist_man_MANS += man/strata-bench.1
