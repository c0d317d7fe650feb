# SPDX-License-Identifier: MIT
# backends/host/ — the CPU backend module (CBLAS GEMM, virtual devices, bf16 storage; lib/device/cpu.c for the CPU's
# feature flags).
pkglib_LTLIBRARIES += backends/host/strata-host.la
backends_host_strata_host_la_SOURCES = \
	%reldir%/host.c \
	%reldir%/host.h \
	%reldir%/host-ops.c \
	%reldir%/host-attn.c \
	%reldir%/host-attn-bf16.c \
	%reldir%/host-llama.c \
	%reldir%/host-bf16.c \
	%reldir%/bf16.c \
	%reldir%/bf16.h \
	%reldir%/gemm-bf16.c \
	%reldir%/blas.c \
	%reldir%/vecmath.h \
	lib/device/cpu.c \
	lib/device/cpu.h
backends_host_strata_host_la_CPPFLAGS = $(AM_CPPFLAGS) $(BLAS_CFLAGS)
# no errno from sqrtf: its loops vectorise
backends_host_strata_host_la_CFLAGS = $(AM_CFLAGS) $(OPENMP_CFLAGS) -fno-math-errno
backends_host_strata_host_la_LIBADD = lib/core/libparse.la $(BLAS_LIBS) $(PTHREAD_LIBS) -lm
backends_host_strata_host_la_LDFLAGS = -module -avoid-version -shared -no-undefined $(OPENMP_CFLAGS)
