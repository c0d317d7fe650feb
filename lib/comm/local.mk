# SPDX-License-Identifier: MIT
# lib/comm/ — communicators over devices of any backends (rings, reductions in a fixed order) and the MPI cluster.
libstrata_la_SOURCES += \
	%reldir%/comm.c \
	%reldir%/comm.h \
	%reldir%/lanes.h \
	%reldir%/algorithms.c \
	%reldir%/cluster.c \
	%reldir%/cluster.h \
	%reldir%/p2p.c \
	%reldir%/collectives.c \
	%reldir%/mpi.h

stratainclude_HEADERS += include/strata/comm.h include/strata/cluster.h
