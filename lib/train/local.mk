# SPDX-License-Identifier: MIT
# lib/train/ — the trainer API, the executor of the per-device action lists, the ranks of a job spread over
# processes, trace and training state.
libstrata_la_SOURCES += \
	%reldir%/trainer.h \
	%reldir%/train.c \
	%reldir%/pipeline.c \
	%reldir%/ranks.c \
	%reldir%/ranks.h \
	%reldir%/hf-load.c

stratainclude_HEADERS += include/strata/train.h
