# SPDX-License-Identifier: MIT
# topology/ — hwloc discovery, the link model, islands, rings and link calibration, in libstrata (strata/topology.h).
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

# The topology suite's own dumps (tests/local.mk runs the suites).
EXTRA_DIST += \
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
