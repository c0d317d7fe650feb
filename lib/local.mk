# SPDX-License-Identifier: MIT
# lib/ — libstrata, one folder per layer; calls go one way, bottom up (lib/README.md draws it):
# core -> device -> topology (top-level topology/) -> model -> io -> comm -> parallel -> train -> plan;
# tests/test-layers.sh checks it on the built objects.
lib_LTLIBRARIES += libstrata.la
libstrata_la_SOURCES =
libstrata_la_CPPFLAGS = $(AM_CPPFLAGS) $(HWLOC_CFLAGS) $(JANSSON_CFLAGS) $(MPI_CFLAGS)
# MPI_LIBS is empty unless configure enabled MPI (STRATA_HAVE_MPI in config.h).
libstrata_la_LIBADD = lib/core/libparse.la $(HWLOC_LIBS) $(JANSSON_LIBS) $(PTHREAD_LIBS) $(MPI_LIBS)
libstrata_la_LDFLAGS = -version-info $(STRATA_LT_VERSION) -no-undefined
EXTRA_DIST += lib/README.md

include lib/core/local.mk
include lib/device/local.mk
include topology/local.mk
include lib/model/local.mk
include lib/io/local.mk
include lib/comm/local.mk
include lib/parallel/local.mk
include lib/train/local.mk
include lib/plan/local.mk
