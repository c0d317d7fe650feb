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
**
** Kernels that reduce (rows of layernorm, softmax, cross-entropy; columns
** of bias and layernorm gradients) run one work-group (thread block) per row
** or column, its items cooperating through local (shared) memory:
**
**   LOCAL       declares an array in local memory, at kernel scope
**   LOCAL_PTR   qualifies a pointer parameter to such an array
**   LID LSIZE   this item's index in its work-group, the work-group's size
**   GROUP       index of the work-group
**   BARRIER()   every item of the work-group waits here (local memory fence)
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
#define INLINE static inline
#define LOCAL __local
#define LOCAL_PTR __local
#define LID ((I64)get_local_id(0))
#define LSIZE ((I64)get_local_size(0))
#define GROUP ((I64)get_group_id(0))
#define BARRIER() barrier(CLK_LOCAL_MEM_FENCE)
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
#define LOCAL __shared__
#define LOCAL_PTR
#define LID ((I64)threadIdx.x)
#define LSIZE ((I64)blockDim.x)
#define GROUP ((I64)blockIdx.x)
#define BARRIER() __syncthreads()
#else
#error "kernels/dialect.h is for OpenCL C or CUDA C"
#endif

#endif /* STRATA_KERNEL_DIALECT_H */
