# SPDX-License-Identifier: MIT
# lib/model/ — model kinds, their layers and cost profile, and the sharded stages that run them on one device.
libstrata_la_SOURCES += \
	%reldir%/layers.c \
	%reldir%/decode.c \
	%reldir%/grads.c \
	%reldir%/llama.c \
	%reldir%/loss.c \
	%reldir%/model.c \
	%reldir%/model.h \
	%reldir%/ranges.c \
	%reldir%/seqpar.c \
	%reldir%/slab.c \
	%reldir%/spatial.c \
	%reldir%/stage.c \
	%reldir%/stage.h \
	%reldir%/tensor.c \
	%reldir%/window.c

stratainclude_HEADERS += include/strata/model.h
