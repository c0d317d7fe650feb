# SPDX-License-Identifier: MIT
# lib/train/ — the trainer API, the one executor of per-device action lists, the memory plan, the optimizer (clip, LR,
# AdamW), passes, parameters, checkpoints, tp joins, trace, the ranks of a job spread over processes, balancing.
libstrata_la_SOURCES += \
	%reldir%/trainer.h \
	%reldir%/train.c \
	%reldir%/memory.c \
	%reldir%/optimizer.c \
	%reldir%/params.c \
	%reldir%/pass.c \
	%reldir%/state.c \
	%reldir%/executor.c \
	%reldir%/chain.c \
	%reldir%/buckets.c \
	%reldir%/gather.c \
	%reldir%/joins.c \
	%reldir%/spatial.c \
	%reldir%/trace.c \
	%reldir%/balance.c \
	%reldir%/ranks.c \
	%reldir%/ranks.h \
	%reldir%/hf-load.c

stratainclude_HEADERS += include/strata/train.h
