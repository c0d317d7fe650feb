# SPDX-License-Identifier: MIT
# lib/comm/ — communicators over devices of any backends (rings, reductions in a fixed order) and the MPI cluster.
libstrata_la_SOURCES += \
	%reldir%/comm.c \
	%reldir%/comm.h \
	%reldir%/mpi.c \
	%reldir%/mpi.h

stratainclude_HEADERS += include/strata/comm.h include/strata/cluster.h
