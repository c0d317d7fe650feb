# SPDX-License-Identifier: MIT
# backends/opencl/ — the OpenCL backend module: ICD loader, CLBlast GEMM, kernels/ compiled at run time.
if BUILD_OPENCL
pkglib_LTLIBRARIES += %reldir%/strata-opencl.la
%canon_reldir%_strata_opencl_la_SOURCES = \
	%reldir%/opencl.c \
	%reldir%/opencl.h \
	%reldir%/ops.c
nodist_%canon_reldir%_strata_opencl_la_SOURCES = kernels/opencl-source.c
%canon_reldir%_strata_opencl_la_CPPFLAGS = $(AM_CPPFLAGS) $(OPENCL_CFLAGS) -DCL_TARGET_OPENCL_VERSION=120
%canon_reldir%_strata_opencl_la_LIBADD = $(OPENCL_LIBS) $(PTHREAD_LIBS)
%canon_reldir%_strata_opencl_la_LDFLAGS = -module -avoid-version -shared -no-undefined
endif
