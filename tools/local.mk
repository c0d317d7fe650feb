# SPDX-License-Identifier: MIT
# tools/ — the command-line programs, their man pages, and the benchmark scripts they come with. They link the
# argument helpers they share (tools/cli.c, compiled once into tools/libcli.la), which link the one number parser
# (lib/core/libparse.la).
bin_PROGRAMS += tools/strata-topo tools/strata-plan tools/strata-bench tools/strata-train tools/strata-generate \
	tools/strata-export
noinst_LTLIBRARIES += tools/libcli.la
tools_libcli_la_SOURCES = %reldir%/cli.c %reldir%/cli.h
tools_libcli_la_LIBADD = lib/core/libparse.la
tools_ldadd = tools/libcli.la libstrata.la
tools_strata_topo_SOURCES = %reldir%/strata-topo.c
tools_strata_topo_LDADD = $(tools_ldadd) $(HWLOC_LIBS) $(JANSSON_LIBS) -lm
tools_strata_plan_SOURCES = %reldir%/strata-plan.c
tools_strata_plan_CPPFLAGS = $(AM_CPPFLAGS) $(JANSSON_CFLAGS)
tools_strata_plan_LDADD = $(tools_ldadd) $(JANSSON_LIBS) -lm
tools_strata_bench_SOURCES = %reldir%/strata-bench.c %reldir%/bench-comm.c %reldir%/bench-comm.h \
  %reldir%/bench-cublas.c %reldir%/bench-cublas.h \
	%reldir%/bench-mpi.c %reldir%/bench-mpi.h
# MPI_CFLAGS / MPI_LIBS are empty without MPI: `strata-bench mpi` calls OpenMPI itself to compare.
tools_strata_bench_CPPFLAGS = $(AM_CPPFLAGS) $(MPI_CFLAGS)
tools_strata_bench_LDADD = $(tools_ldadd) $(MPI_LIBS) -lm
if BUILD_OPENCL
tools_strata_bench_CPPFLAGS += $(OPENCL_CFLAGS) -DSTRATA_HAVE_OPENCL
tools_strata_bench_LDADD += $(OPENCL_LIBS)
endif
tools_strata_train_SOURCES = %reldir%/strata-train.c %reldir%/train-args.c %reldir%/train-report.c %reldir%/train.h
tools_strata_train_LDADD = $(tools_ldadd) -lm
tools_strata_generate_SOURCES = %reldir%/strata-generate.c
tools_strata_generate_LDADD = $(tools_ldadd) -lm
tools_strata_export_SOURCES = %reldir%/strata-export.c
tools_strata_export_LDADD = $(tools_ldadd)

dist_man_MANS += man/strata-topo.1 man/strata-plan.1 man/strata-bench.1 man/strata-train.1 man/strata-generate.1 \
	man/strata-export.1
EXTRA_DIST += bench/lib.sh bench/train-mfu.sh bench/attn-cycles.sh bench/pipeline-1f1b.sh bench/train-parallel.sh bench/hetero.sh \
	bench/plan.sh bench/gpt3-175b.json bench/gpt-530b.json bench/gpt-1t.json bench/sim-vs-real.sh bench/plan-vs-brute.sh bench/same-bits.sh \
	bench/recompute.sh bench/zero.sh bench/schedules.sh bench/spatial.sh \
	bench/peers/run.sh bench/peers/gpt.py bench/peers/gpt_pp.py
# issue 33: the llama peer and the KV-cache benchmark
EXTRA_DIST += bench/peers/llama.py bench/generate.sh
EXTRA_DIST += bench/events.sh
