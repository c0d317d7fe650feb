# SPDX-License-Identifier: MIT
# lib/plan/ — the GPU table, the machine model (devices with costs, links, islands, shared uplinks), the simulator,
# the planner's search and calibration (strata/plan.h).
libstrata_la_SOURCES += \
	%reldir%/plan.h \
	%reldir%/devices.c \
	%reldir%/machine.c \
	%reldir%/sim-cost.c \
	%reldir%/sim-memory.c \
	%reldir%/sim.c \
	%reldir%/sim-trace.c \
	%reldir%/sim-spatial.c \
	%reldir%/search.h \
	%reldir%/search.c \
	%reldir%/search-counts.c \
	%reldir%/search-groups.c \
	%reldir%/search-refine.c \
	%reldir%/search-result.c \
	%reldir%/search-bound.c \
	%reldir%/search-spatial.c \
	%reldir%/min-devices.c \
	%reldir%/calibrate.c \
	%reldir%/calibrate-probes.c \
	%reldir%/calibrate-read.c

stratainclude_HEADERS += include/strata/plan.h
