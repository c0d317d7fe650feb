# SPDX-License-Identifier: MIT
# topology/ — hwloc discovery, link model, islands and calibration in libstrata; the strata-topo tool, its man page and tests.
libstrata_la_SOURCES += \
	%reldir%/internal.h \
	%reldir%/xmlcheck.c \
	%reldir%/discover.c \
	%reldir%/fabric.c \
	%reldir%/links.c \
	%reldir%/topology.c \
	%reldir%/json.c \
	%reldir%/measure.c \
	%reldir%/ring.c

stratainclude_HEADERS += include/strata/topology.h

bin_PROGRAMS += tools/strata-topo
tools_strata_topo_SOURCES = tools/strata-topo.c lib/parse.c lib/parse.h
tools_strata_topo_CFLAGS = $(AM_CFLAGS)
tools_strata_topo_LDADD = libstrata.la $(HWLOC_LIBS) $(JANSSON_LIBS) -lm

dist_man_MANS += man/strata-topo.1

EXTRA_DIST += \
	tests/test-strata-topo.sh \
	tests/fixtures/topology/two-socket-4gpu-nvlink.xml \
	tests/fixtures/topology/cpu-only.xml \
	tests/fixtures/topology/malformed.xml \
	tests/fixtures/topology/truncated.xml \
	tests/fixtures/topology/no-pci.xml \
	tests/fixtures/topology/wrong-matrix-size.xml \
	tests/fixtures/topology/class-a-bmc-vga.xml \
	tests/fixtures/topology/class-a-bmc-vga-no-gpu.xml \
	tests/fixtures/topology/class-b-gpu-memory-numa.xml \
	tests/fixtures/topology/class-b-gpu-memory-numa-v1.xml \
	tests/fixtures/topology/class-c-pcie-power-saving.xml \
	tests/fixtures/topology/class-d-duplicate-pci.xml \
	tests/fixtures/topology/class-e-missed-gpu.xml \
	tests/fixtures/topology/hwloc-crash-core-without-complete-cpuset.xml \
	tests/fixtures/topology/xml-version-3.0.xml \
	tests/fixtures/topology/hwloc-leak-unknown-element.xml

if HAVE_CRITERION
check_PROGRAMS += tests/test-topology
TESTS += tests/test-topology tests/test-strata-topo.sh
tests_test_topology_SOURCES = tests/test-topology.c
tests_test_topology_CPPFLAGS = $(AM_CPPFLAGS) \
	-DSTRATA_TEST_FIXTURES='"$(abs_top_srcdir)/tests/fixtures/topology"' \
	-DSTRATA_TEST_TOPOLOGIES_DIR='"$(abs_top_srcdir)/../shared/topologies"'
tests_test_topology_CFLAGS = $(AM_CFLAGS) $(CRITERION_CFLAGS) $(JANSSON_CFLAGS)
tests_test_topology_LDADD = libstrata.la $(CRITERION_LIBS) $(JANSSON_LIBS) -lm
endif
