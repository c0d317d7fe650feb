# SPDX-License-Identifier: MIT
# lib/core/ — status codes and the last error, logging, checked arithmetic, the clock, files, the one number parser,
# the version.
libstrata_la_SOURCES += \
	%reldir%/bf16.h \
	%reldir%/core.h \
	%reldir%/status.c \
	%reldir%/log.c \
	%reldir%/time.c \
	%reldir%/util.c \
	%reldir%/file.c \
	%reldir%/file.h \
	%reldir%/version.c

# The number parser, compiled once: libstrata, the host backend module, the tools and test-numbers link it.
noinst_LTLIBRARIES += lib/core/libparse.la
lib_core_libparse_la_SOURCES = %reldir%/parse.c %reldir%/parse.h

stratainclude_HEADERS += include/strata/strata.h include/strata/common.h
# include/strata/version.h is configure's (from version.h.in), in the build tree: installed, not distributed, and
# found there by every compile.
nodist_stratainclude_HEADERS = include/strata/version.h
AM_CPPFLAGS += -I$(top_builddir)/include
