# SPDX-License-Identifier: MIT
# lib/ — libstrata: status and logging, device registry, buffers, queues, copies, ops.
lib_LTLIBRARIES += libstrata.la
libstrata_la_SOURCES = \
	%reldir%/status.c \
	%reldir%/log.c \
	%reldir%/util.c \
	%reldir%/parse.c \
	%reldir%/parse.h \
	%reldir%/file.c \
	%reldir%/file.h \
	%reldir%/util.h \
	%reldir%/backend.h \
	%reldir%/registry.c \
	%reldir%/cpu.c \
	%reldir%/cpu.h \
	%reldir%/registry.h \
	%reldir%/buffer.c \
	%reldir%/copy.c \
	%reldir%/ops.c \
	%reldir%/model.c \
	%reldir%/model.h \
	%reldir%/stage.c \
	%reldir%/stage.h \
	%reldir%/train.c \
	%reldir%/trainer.h \
	%reldir%/pipeline.c \
	%reldir%/comm/comm.c \
	%reldir%/comm/comm.h \
	%reldir%/comm/mpi.c \
	%reldir%/comm/mpi.h \
	%reldir%/parallel/layout.c \
	%reldir%/parallel/ranks.c \
	%reldir%/parallel/ranks.h
libstrata_la_CPPFLAGS = $(AM_CPPFLAGS) $(HWLOC_CFLAGS) $(JANSSON_CFLAGS) $(MPI_CFLAGS)
# MPI_LIBS is empty unless configure enabled MPI (STRATA_HAVE_MPI in config.h).
libstrata_la_LIBADD = $(HWLOC_LIBS) $(JANSSON_LIBS) $(PTHREAD_LIBS) $(MPI_LIBS)
libstrata_la_LDFLAGS = -version-info $(STRATA_LT_VERSION) -no-undefined

stratainclude_HEADERS += \
	include/strata/strata.h \
	include/strata/common.h \
	include/strata/device.h \
	include/strata/ops.h \
	include/strata/model.h \
	include/strata/data.h \
	include/strata/checkpoint.h \
	include/strata/train.h \
	include/strata/schedule.h \
	include/strata/comm.h \
	include/strata/cluster.h \
	include/strata/layout.h
include lib/plan/local.mk
