# SPDX-License-Identifier: MIT
# tests/ — Criterion suites, run through the TAP driver so that every test case is counted.
LOG_DRIVER = env AM_TAP_AWK='$(AWK)' $(SHELL) $(top_srcdir)/build-aux/tap-driver.sh
SH_LOG_DRIVER = $(LOG_DRIVER)
LOG_COMPILER = $(top_srcdir)/tests/run-test
SH_LOG_COMPILER = $(top_srcdir)/tests/run-test
TEST_EXTENSIONS = .sh
AM_TESTS_ENVIRONMENT = top_builddir='$(abs_top_builddir)'; top_srcdir='$(abs_top_srcdir)'; MPIRUN='$(MPIRUN)'; export MPIRUN; \
	strata_pkglibdir='$(pkglibdir)'; export top_builddir top_srcdir strata_pkglibdir;
EXTRA_DIST += tests/run-test tests/common.h tests/lsan.supp

if HAVE_CRITERION
check_PROGRAMS += tests/test-device tests/test-ops
TESTS += tests/test-device tests/test-ops
tests_test_device_SOURCES = tests/test-device.c tests/common.h
tests_test_device_CFLAGS = $(AM_CFLAGS) $(CRITERION_CFLAGS)
tests_test_device_LDADD = libstrata.la $(CRITERION_LIBS) -lm
tests_test_ops_SOURCES = tests/test-ops.c tests/common.h
tests_test_ops_CFLAGS = $(AM_CFLAGS) $(CRITERION_CFLAGS)
tests_test_ops_LDADD = libstrata.la $(CRITERION_LIBS) -lm
endif

if HAVE_CRITERION
check_PROGRAMS += tests/test-blas
TESTS += tests/test-blas
tests_test_blas_SOURCES = tests/test-blas.c tests/common.h lib/cpu.c lib/cpu.h
tests_test_blas_CFLAGS = $(AM_CFLAGS) $(CRITERION_CFLAGS)
tests_test_blas_LDADD = libstrata.la $(CRITERION_LIBS) -lm
endif

if HAVE_CRITERION
check_PROGRAMS += tests/test-train
TESTS += tests/test-train
tests_test_train_SOURCES = tests/test-train.c tests/common.h
tests_test_train_CFLAGS = $(AM_CFLAGS) $(CRITERION_CFLAGS)
tests_test_train_LDADD = libstrata.la $(CRITERION_LIBS) -lm
endif

if HAVE_CRITERION
check_PROGRAMS += tests/test-pipeline
TESTS += tests/test-pipeline
tests_test_pipeline_SOURCES = tests/test-pipeline.c tests/common.h
tests_test_pipeline_CFLAGS = $(AM_CFLAGS) $(CRITERION_CFLAGS) $(JANSSON_CFLAGS)
tests_test_pipeline_LDADD = libstrata.la $(CRITERION_LIBS) $(JANSSON_LIBS) -lm
endif

if HAVE_CRITERION
check_PROGRAMS += tests/test-comm
TESTS += tests/test-comm
tests_test_comm_SOURCES = tests/test-comm.c tests/common.h
tests_test_comm_CPPFLAGS = $(AM_CPPFLAGS) -DSTRATA_TEST_TOPOLOGIES_DIR='"$(abs_top_srcdir)/../shared/topologies"'
tests_test_comm_CFLAGS = $(AM_CFLAGS) $(CRITERION_CFLAGS)
tests_test_comm_LDADD = libstrata.la $(CRITERION_LIBS) -lm
endif

if HAVE_CRITERION
check_PROGRAMS += tests/test-layout
TESTS += tests/test-layout
tests_test_layout_SOURCES = tests/test-layout.c tests/common.h
tests_test_layout_CFLAGS = $(AM_CFLAGS) $(CRITERION_CFLAGS)
tests_test_layout_LDADD = libstrata.la $(CRITERION_LIBS) -lm
endif

if HAVE_CRITERION
check_PROGRAMS += tests/test-parallel
TESTS += tests/test-parallel
tests_test_parallel_SOURCES = tests/test-parallel.c tests/common.h
tests_test_parallel_CFLAGS = $(AM_CFLAGS) $(CRITERION_CFLAGS) $(JANSSON_CFLAGS)
tests_test_parallel_LDADD = libstrata.la $(CRITERION_LIBS) $(JANSSON_LIBS) -lm
endif

# Fake backend modules for the registry tests: a "cuda" and an "opencl" whose
# devices share a PCI id, a stale module and one without the entry symbol.
EXTRA_DIST += tests/fake/backend.c tests/fake/gone.c tests/fake/comm.c tests/fake/fake-comm.h
if HAVE_CRITERION
fake_module_flags = -module -avoid-version -shared -rpath /nowhere -no-undefined
check_LTLIBRARIES = tests/fake/cuda/strata-cuda.la tests/fake/opencl/strata-opencl.la \
	tests/fake/stale/strata-host.la tests/fake/noentry/strata-host.la \
	tests/fake/gone/libstrata-test-gone.la tests/fake/unloadable/strata-cuda.la
tests_fake_cuda_strata_cuda_la_SOURCES = tests/fake/backend.c
tests_fake_cuda_strata_cuda_la_CPPFLAGS = $(AM_CPPFLAGS) -DFAKE_NAME='"cuda"' \
	-DFAKE_PCI='"0000:3b:00.0", "0000:86:00.0"'
tests_fake_cuda_strata_cuda_la_LDFLAGS = $(fake_module_flags)
tests_fake_opencl_strata_opencl_la_SOURCES = tests/fake/backend.c
tests_fake_opencl_strata_opencl_la_CPPFLAGS = $(AM_CPPFLAGS) -DFAKE_NAME='"opencl"' \
	-DFAKE_PCI='"0000:86:00.0", "0000:af:00.0", ""'
tests_fake_opencl_strata_opencl_la_LDFLAGS = $(fake_module_flags)
tests_fake_stale_strata_host_la_SOURCES = tests/fake/backend.c
tests_fake_stale_strata_host_la_CPPFLAGS = $(AM_CPPFLAGS) -DFAKE_NAME='"host"' -DFAKE_PCI='""' -DFAKE_API_VERSION=999
tests_fake_stale_strata_host_la_LDFLAGS = $(fake_module_flags)
tests_fake_noentry_strata_host_la_SOURCES = tests/fake/backend.c
tests_fake_noentry_strata_host_la_CPPFLAGS = $(AM_CPPFLAGS) -DFAKE_NAME='"host"' -DFAKE_PCI='""' -DFAKE_NO_ENTRY
tests_fake_noentry_strata_host_la_LDFLAGS = $(fake_module_flags)

# A "cuda" module that needs a library installed nowhere the loader looks:
# tests/gpu/run must fail on it, naming the library.
tests_fake_gone_libstrata_test_gone_la_SOURCES = tests/fake/gone.c
tests_fake_gone_libstrata_test_gone_la_LDFLAGS = -avoid-version -shared -rpath /nonexistent-strata-test-dir -no-undefined
tests_fake_unloadable_strata_cuda_la_SOURCES = tests/fake/backend.c
tests_fake_unloadable_strata_cuda_la_CPPFLAGS = $(AM_CPPFLAGS) -DFAKE_NAME='"cuda"' -DFAKE_PCI='""' -DFAKE_NEEDS_GONE
# Passed to the linker past libtool, which would add the build directory of
# a library it knows to the RUNPATH; named before the object, so not --as-needed.
tests_fake_unloadable_strata_cuda_la_LDFLAGS = $(fake_module_flags) \
	-Wl,--no-as-needed,-Ltests/fake/gone/.libs,-lstrata-test-gone
tests_fake_unloadable_strata_cuda_la_DEPENDENCIES = tests/fake/gone/libstrata-test-gone.la

# A "cuda" module whose communicators span processes through a shared file
# (NCCL's part, played on CPUs): tests/test-mpi.sh runs the cluster's
# one-communicator path with it.
check_LTLIBRARIES += tests/fake/ccl/strata-cuda.la
tests_fake_ccl_strata_cuda_la_SOURCES = tests/fake/backend.c tests/fake/comm.c tests/fake/fake-comm.h
tests_fake_ccl_strata_cuda_la_CPPFLAGS = $(AM_CPPFLAGS) -DFAKE_NAME='"cuda"' -DFAKE_PCI='"", ""' -DFAKE_COMM
tests_fake_ccl_strata_cuda_la_LDFLAGS = $(fake_module_flags)

EXTRA_DIST += tests/test-gpu-run.sh
TESTS += tests/test-gpu-run.sh

check_PROGRAMS += tests/test-registry
TESTS += tests/test-registry
tests_test_registry_SOURCES = tests/test-registry.c tests/common.h
tests_test_registry_CFLAGS = $(AM_CFLAGS) $(CRITERION_CFLAGS)
tests_test_registry_CPPFLAGS = $(AM_CPPFLAGS) -DFAKE_DIR='"$(abs_top_builddir)/tests/fake"'
tests_test_registry_LDADD = libstrata.la $(CRITERION_LIBS)
endif

# The hardening classes: numbers (the one parser, compiled in, and the
# environment the library reads through it) and files (inputs that are not
# regular files, the atomic writer, long paths and escaped messages).
if HAVE_CRITERION
check_PROGRAMS += tests/test-numbers tests/test-files
TESTS += tests/test-numbers tests/test-files
tests_test_numbers_SOURCES = tests/test-numbers.c tests/common.h lib/parse.c lib/parse.h
tests_test_numbers_CPPFLAGS = $(AM_CPPFLAGS) -DSTRATA_TEST_FIXTURES='"$(abs_top_srcdir)/tests/fixtures/topology"'
tests_test_numbers_CFLAGS = $(AM_CFLAGS) $(CRITERION_CFLAGS)
tests_test_numbers_LDADD = libstrata.la $(CRITERION_LIBS) -lm
tests_test_files_SOURCES = tests/test-files.c tests/common.h
tests_test_files_CPPFLAGS = $(AM_CPPFLAGS) -DSTRATA_TEST_FIXTURES='"$(abs_top_srcdir)/tests/fixtures/topology"'
tests_test_files_CFLAGS = $(AM_CFLAGS) $(CRITERION_CFLAGS)
tests_test_files_LDADD = libstrata.la $(CRITERION_LIBS) -lm
endif

# The cluster layer (strata/cluster.h): one rank's checks in tests/mpi-check, run by
# tests/test-mpi.sh under mpirun -np 2 and -np 4 when configure enabled MPI (alone otherwise).
check_PROGRAMS += tests/mpi-check
tests_mpi_check_SOURCES = tests/mpi-check.c
tests_mpi_check_LDADD = libstrata.la $(PTHREAD_LIBS) -lm
TESTS += tests/test-mpi.sh
EXTRA_DIST += tests/test-mpi.sh
# Collectives across ranks on real CUDA devices (NCCL); skipped without one, run by tests/gpu/run.
TESTS += tests/test-mpi-nccl.sh
EXTRA_DIST += tests/test-mpi-nccl.sh

if HAVE_CRITERION
check_PROGRAMS += tests/test-cluster
TESTS += tests/test-cluster
tests_test_cluster_SOURCES = tests/test-cluster.c tests/common.h
tests_test_cluster_CFLAGS = $(AM_CFLAGS) $(CRITERION_CFLAGS) $(JANSSON_CFLAGS)
tests_test_cluster_LDADD = libstrata.la $(CRITERION_LIBS) $(JANSSON_LIBS) -lm
endif
