# SPDX-License-Identifier: MIT
# lib/parallel/ — layouts (dp x pp x tp, as data with a JSON form), pipeline schedules as per-device action lists,
# their validator and bubble, and the one balancer of layers over stages (split.c).
libstrata_la_SOURCES += \
	%reldir%/layout.c \
	%reldir%/parallel.h \
	%reldir%/schedule.c \
	%reldir%/validate.c \
	%reldir%/split.c \
	%reldir%/split.h

stratainclude_HEADERS += include/strata/layout.h include/strata/schedule.h
