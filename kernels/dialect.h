/* SPDX-License-Identifier: MIT */
/* dialect.h — the few macros that let one kernel source compile as OpenCL C and as CUDA C. */
#ifndef STRATA_KERNEL_DIALECT_H
#define STRATA_KERNEL_DIALECT_H

/*
** Kernels are one-dimensional: each work-item/thread handles one index
** GID < some count passed as an argument and returns when GID is past it.
** Buffers travel as a pointer plus an element offset (OpenCL cannot offset
** a cl_mem on the host side without sub-buffers), so every kernel indexes
** p[p_off + i].
**
**   KERNEL      entry point             GLOBAL   pointer to device memory
**   I64         64-bit signed integer   GID      global index of this item
**   SQRT EXP LOG TANH FMAX  float math
*/
#if defined(__OPENCL_VERSION__) || defined(__OPENCL_C_VERSION__)
#define KERNEL __kernel
#define GLOBAL __global
#define I64 long
#define GID ((I64)get_global_id(0))
#define SQRT(x) sqrt(x)
#define EXP(x) exp(x)
#define LOG(x) log(x)
#define TANH(x) tanh(x)
#define FMAX(a, b) fmax(a, b)
#define POW(a, b) pow(a, b)
#define INLINE inline
#elif defined(__CUDACC__)
#define KERNEL extern "C" __global__
#define GLOBAL
#define I64 long long
#define GID ((I64)blockIdx.x * (I64)blockDim.x + (I64)threadIdx.x)
#define SQRT(x) sqrtf(x)
#define EXP(x) expf(x)
#define LOG(x) logf(x)
#define TANH(x) tanhf(x)
#define FMAX(a, b) fmaxf(a, b)
#define POW(a, b) powf(a, b)
#define INLINE __device__ static inline
#else
#error "kernels/dialect.h is for OpenCL C or CUDA C"
#endif

#endif /* STRATA_KERNEL_DIALECT_H */
