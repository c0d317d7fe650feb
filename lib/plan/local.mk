# SPDX-License-Identifier: MIT
# lib/plan/ — the cost model of devices and links, the simulator and the planner (strata/plan.h), and strata-plan.
libstrata_la_SOURCES += \
	lib/plan/plan.h \
	lib/plan/devices.c \
	lib/plan/cluster.c \
	lib/plan/sim.c \
	lib/plan/search.c \
	lib/plan/calibrate.c

stratainclude_HEADERS += include/strata/plan.h

if HAVE_CRITERION
check_PROGRAMS += tests/test-plan
TESTS += tests/test-plan
tests_test_plan_SOURCES = tests/test-plan.c tests/common.h
tests_test_plan_CPPFLAGS = $(AM_CPPFLAGS) -DSTRATA_TEST_TOPOLOGIES_DIR='"$(abs_top_srcdir)/../shared/topologies"'
tests_test_plan_CFLAGS = $(AM_CFLAGS) $(CRITERION_CFLAGS) $(JANSSON_CFLAGS)
tests_test_plan_LDADD = libstrata.la $(CRITERION_LIBS) $(JANSSON_LIBS) -lm
endif

bin_PROGRAMS += tools/strata-plan
tools_strata_plan_SOURCES = tools/strata-plan.c tools/cli.h lib/parse.c lib/parse.h
tools_strata_plan_CPPFLAGS = $(AM_CPPFLAGS) $(JANSSON_CFLAGS)
tools_strata_plan_LDADD = libstrata.la $(JANSSON_LIBS) -lm

dist_man_MANS += man/strata-plan.1
EXTRA_DIST += tests/test-strata-plan.sh bench/plan.sh bench/gpt3-175b.json bench/sim-vs-real.sh bench/plan-vs-brute.sh
TESTS += tests/test-strata-plan.sh
