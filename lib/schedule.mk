# SPDX-License-Identifier: MIT
# lib/schedule.mk — pipeline schedules as data (generators, validator, bubble) and their Criterion suite.
libstrata_la_SOURCES += lib/schedule.c

if HAVE_CRITERION
check_PROGRAMS += tests/test-schedule
TESTS += tests/test-schedule
tests_test_schedule_SOURCES = tests/test-schedule.c tests/common.h
tests_test_schedule_CFLAGS = $(AM_CFLAGS) $(CRITERION_CFLAGS)
tests_test_schedule_LDADD = libstrata.la $(CRITERION_LIBS) -lm
endif
