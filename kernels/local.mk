# SPDX-License-Identifier: MIT
# kernels/ — the shared kernel dialect and the op kernels, and the rule that embeds them as a C string for OpenCL.

# The kernel sources, in the order a backend glues them: the dialect first.
# The CUDA backend compiles the same files (#include "dialect.h", "ops.k", "attention.k", "llama.k").
STRATA_KERNEL_FILES = \
	%reldir%/dialect.h \
	%reldir%/ops.k \
	%reldir%/attention.k \
	%reldir%/llama.k
# OpenCL only: GEMM for CPU devices (CLBlast serves the others, cuBLAS CUDA)
STRATA_KERNEL_OPENCL_FILES = %reldir%/gemm.k
EXTRA_DIST += $(STRATA_KERNEL_FILES) $(STRATA_KERNEL_OPENCL_FILES) %reldir%/embed.awk

if BUILD_OPENCL
# kernels/opencl-source.c: the kernel sources as an array of C string lines
# (strata__opencl_source[], strata__opencl_source_count), compiled into the
# OpenCL module and handed to clCreateProgramWithSource at run time.
BUILT_SOURCES += %reldir%/opencl-source.c
CLEANFILES += %reldir%/opencl-source.c
%reldir%/opencl-source.c: $(STRATA_KERNEL_FILES) $(STRATA_KERNEL_OPENCL_FILES) %reldir%/embed.awk
	$(AM_V_GEN)$(MKDIR_P) %reldir% && \
	$(AWK) -v name=strata__opencl_source -f $(srcdir)/%reldir%/embed.awk \
		$(srcdir)/%reldir%/dialect.h $(srcdir)/%reldir%/ops.k $(srcdir)/%reldir%/attention.k \
		$(srcdir)/%reldir%/llama.k $(srcdir)/%reldir%/gemm.k > $@-t && \
	mv -f $@-t $@
endif
