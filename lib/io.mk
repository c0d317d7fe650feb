# SPDX-License-Identifier: MIT
# lib/io.mk — training data (text, synthetic shapes) and safetensors checkpoints, with their Criterion suites.
libstrata_la_SOURCES += lib/data.c lib/checkpoint.c

if HAVE_CRITERION
check_PROGRAMS += tests/test-data tests/test-checkpoint
TESTS += tests/test-data tests/test-checkpoint
tests_test_data_SOURCES = tests/test-data.c tests/common.h
tests_test_data_CFLAGS = $(AM_CFLAGS) $(CRITERION_CFLAGS) $(JANSSON_CFLAGS)
tests_test_data_LDADD = libstrata.la $(CRITERION_LIBS) $(JANSSON_LIBS) -lm
tests_test_checkpoint_SOURCES = tests/test-checkpoint.c tests/common.h
tests_test_checkpoint_CFLAGS = $(AM_CFLAGS) $(CRITERION_CFLAGS) $(JANSSON_CFLAGS)
tests_test_checkpoint_LDADD = libstrata.la $(CRITERION_LIBS) $(JANSSON_LIBS) -lm
endif
