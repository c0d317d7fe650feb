# SPDX-License-Identifier: MIT
# tests/ — Criterion suites, run through the TAP driver so that every test case is counted.
LOG_DRIVER = env AM_TAP_AWK='$(AWK)' $(SHELL) $(top_srcdir)/build-aux/tap-driver.sh
SH_LOG_DRIVER = $(LOG_DRIVER)
LOG_COMPILER = $(top_srcdir)/tests/run-test
SH_LOG_COMPILER = $(top_srcdir)/tests/run-test
TEST_EXTENSIONS = .sh
AM_TESTS_ENVIRONMENT = top_builddir='$(abs_top_builddir)'; top_srcdir='$(abs_top_srcdir)'; \
	export top_builddir top_srcdir;
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
