# SPDX-License-Identifier: MIT
# lib/device/ — the backend interface, the device registry, buffers, copies (staged across backends), op dispatch
# and the CPU's features.
libstrata_la_SOURCES += \
	%reldir%/backend.h \
	%reldir%/registry.c \
	%reldir%/registry.h \
	%reldir%/cpu.c \
	%reldir%/cpu.h \
	%reldir%/buffer.c \
	%reldir%/copy.c \
	%reldir%/ops.c \
	%reldir%/speed.c

stratainclude_HEADERS += include/strata/device.h include/strata/ops.h
