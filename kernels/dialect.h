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
**   U32 U16     unsigned integers of 32 and 16 bits
**   SQRT EXP LOG TANH FMAX COS SIN  float math
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
**
** Every kernel's parameter list starts with MASKP: nothing in OpenCL C, where
** a program is built per buffer-type mask (below); in CUDA C the mask
** itself (unsigned strata_mask), so that one compiled kernel serves every
** mix of float32 and bfloat16 buffers, each access testing its bit (the
** same for every thread of a launch).
*/
#if defined(__OPENCL_VERSION__) || defined(__OPENCL_C_VERSION__)
#define KERNEL __kernel
#define GLOBAL __global
#define I64 long
#define U32 uint
#define U16 ushort
#define AS_FLOAT(u) as_float(u)
#define AS_U32(f) as_uint(f)
#define GID ((I64)get_global_id(0))
#define SQRT(x) sqrt(x)
#define EXP(x) exp(x)
#define LOG(x) log(x)
#define TANH(x) tanh(x)
#define FMAX(a, b) fmax(a, b)
#define POW(a, b) pow(a, b)
#define COS(x) cos(x)
#define SIN(x) sin(x)
#define INLINE static inline
#define LOCAL __local
#define LOCAL_PTR __local
#define LID ((I64)get_local_id(0))
#define LSIZE ((I64)get_local_size(0))
#define GROUP ((I64)get_group_id(0))
#define BARRIER() barrier(CLK_LOCAL_MEM_FENCE)
#define MASKP
#define F4 float4
#define LOCAL_F32_ALIGN16(name, n) __local float name[n] __attribute__((aligned(16)))
#define LDL4(arr, i) vload4(0, (arr) + (i))
#elif defined(__CUDACC__)
#define KERNEL extern "C" __global__
#define GLOBAL
#define I64 long long
#define U32 unsigned int
#define U16 unsigned short
#define AS_FLOAT(u) __uint_as_float(u)
#define AS_U32(f) __float_as_uint(f)
#define GID ((I64)blockIdx.x * (I64)blockDim.x + (I64)threadIdx.x)
#define SQRT(x) sqrtf(x)
#define EXP(x) expf(x)
#define LOG(x) logf(x)
#define TANH(x) tanhf(x)
#define FMAX(a, b) fmaxf(a, b)
#define POW(a, b) powf(a, b)
#define COS(x) cosf(x)
#define SIN(x) sinf(x)
#define INLINE __device__ static inline
#define LOCAL __shared__
#define LOCAL_PTR
#define LID ((I64)threadIdx.x)
#define LSIZE ((I64)blockDim.x)
#define GROUP ((I64)blockIdx.x)
#define BARRIER() __syncthreads()
#define MASKP unsigned strata_mask,
#define F4 float4
#define LOCAL_F32_ALIGN16(name, n) __shared__ __align__(16) float name[n]
#define LDL4(arr, i) (*(const float4 *)((arr) + (i)))
#else
#error "kernels/dialect.h is for OpenCL C or CUDA C"
#endif

/*
** Register-tiled loops: UNROLL before a loop of constant bounds unrolls it
** whole, so that private arrays indexed by its variable stay in registers.
** LOCAL_F32_ALIGN16(name, n) declares a float array in local memory on a
** 16-byte boundary, and LDL4(name, i) reads its elements i .. i + 3 (i a
** multiple of 4) as one F4 (.x .y .z .w): one 16-byte shared-memory load on
** a GPU where four scalar loads would each pair with a multiply-add.
*/
#if defined(__CUDACC__)
#define UNROLL _Pragma("unroll")
#else
#define UNROLL /* OpenCL: PoCL compiles a program per buffer-type mask at run time, and whole unrolled tiles made each
                  compile minutes long; its vectoriser works across work-items, not along these loops */
#endif

/*
** bfloat16 is stored as 16-bit words (U16): the upper half of a float32.
** Loads widen exactly; stores round as the host backend does
** (backends/host/bf16.h, x86's vcvtneps2bf16), so that every backend
** writes the same bits for the same float: to nearest, ties to even; NaN
** stays NaN (made quiet, sign and upper payload kept); infinities stay; a
** float32 denormal becomes a zero of its sign; values past the largest
** bfloat16 round to infinity.
*/
INLINE float strata_bf16_widen(U16 h)
{
  return AS_FLOAT((U32)h << 16);
}

INLINE U16 strata_bf16_round(float f)
{
  U32 u = AS_U32(f), mag = u & 0x7fffffffu;
  if (mag > 0x7f800000u) return (U16)((u >> 16) | 0x40u);
  if (mag < 0x00800000u) return (U16)((u >> 16) & 0x8000u);
  return (U16)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

#if defined(__CUDACC__)
/* CUDA's typed accesses: element i of a buffer whose mask bit is `bf`. */
INLINE float strata_ld(const void *p, I64 i, unsigned bf)
{
  return bf ? strata_bf16_widen(((const U16 *)p)[i]) : ((const float *)p)[i];
}

INLINE void strata_st(void *p, I64 i, float v, unsigned bf)
{
  if (bf)
    ((U16 *)p)[i] = strata_bf16_round(v);
  else
    ((float *)p)[i] = v;
}
#endif

#endif /* STRATA_KERNEL_DIALECT_H */

/*
** Storage types of a kernel's buffers, by position: the i-th buffer
** parameter of a kernel (0, 1, ... counting every GLOBAL pointer, int32
** ones included) is declared GLOBAL Ti * and read with LDi(p, index),
** written with STi(p, index, value), always as float. Bit i of
** STRATA_BF16_MASK (a build option, 0 when absent) makes it bfloat16, else
** it is float32 and LDi / STi are plain accesses (so the float32 kernels
** are exactly what they were before bfloat16). An int32 buffer ignores
** its bit. This part is read again at every inclusion, so that one
** translation unit may compile the kernels under several masks.
*/
#ifndef STRATA_BF16_MASK
#define STRATA_BF16_MASK 0
#endif
#undef T0
#undef LD0
#undef ST0
#undef T1
#undef LD1
#undef ST1
#undef T2
#undef LD2
#undef ST2
#undef T3
#undef LD3
#undef ST3
#undef T4
#undef LD4
#undef ST4
#undef T5
#undef LD5
#undef ST5
#if defined(__CUDACC__)
/* CUDA: buffers are untyped; the kernel's strata_mask (MASKP) says each one's type */
#define T0 void
#define LD0(p, i) strata_ld((p), (i), strata_mask & 1u)
#define ST0(p, i, v) strata_st((p), (i), (v), strata_mask & 1u)
#define T1 void
#define LD1(p, i) strata_ld((p), (i), strata_mask & 2u)
#define ST1(p, i, v) strata_st((p), (i), (v), strata_mask & 2u)
#define T2 void
#define LD2(p, i) strata_ld((p), (i), strata_mask & 4u)
#define ST2(p, i, v) strata_st((p), (i), (v), strata_mask & 4u)
#define T3 void
#define LD3(p, i) strata_ld((p), (i), strata_mask & 8u)
#define ST3(p, i, v) strata_st((p), (i), (v), strata_mask & 8u)
#define T4 void
#define LD4(p, i) strata_ld((p), (i), strata_mask & 16u)
#define ST4(p, i, v) strata_st((p), (i), (v), strata_mask & 16u)
#define T5 void
#define LD5(p, i) strata_ld((p), (i), strata_mask & 32u)
#define ST5(p, i, v) strata_st((p), (i), (v), strata_mask & 32u)
#else
#define STRATA_LD_F32(p, i) ((p)[i])
#define STRATA_ST_F32(p, i, v) ((p)[i] = (v))
#define STRATA_LD_BF16(p, i) strata_bf16_widen((p)[i])
#define STRATA_ST_BF16(p, i, v) ((p)[i] = strata_bf16_round(v))
#if (STRATA_BF16_MASK) & 1
#define T0 U16
#define LD0 STRATA_LD_BF16
#define ST0 STRATA_ST_BF16
#else
#define T0 float
#define LD0 STRATA_LD_F32
#define ST0 STRATA_ST_F32
#endif
#if (STRATA_BF16_MASK) & 2
#define T1 U16
#define LD1 STRATA_LD_BF16
#define ST1 STRATA_ST_BF16
#else
#define T1 float
#define LD1 STRATA_LD_F32
#define ST1 STRATA_ST_F32
#endif
#if (STRATA_BF16_MASK) & 4
#define T2 U16
#define LD2 STRATA_LD_BF16
#define ST2 STRATA_ST_BF16
#else
#define T2 float
#define LD2 STRATA_LD_F32
#define ST2 STRATA_ST_F32
#endif
#if (STRATA_BF16_MASK) & 8
#define T3 U16
#define LD3 STRATA_LD_BF16
#define ST3 STRATA_ST_BF16
#else
#define T3 float
#define LD3 STRATA_LD_F32
#define ST3 STRATA_ST_F32
#endif
#if (STRATA_BF16_MASK) & 16
#define T4 U16
#define LD4 STRATA_LD_BF16
#define ST4 STRATA_ST_BF16
#else
#define T4 float
#define LD4 STRATA_LD_F32
#define ST4 STRATA_ST_F32
#endif
#if (STRATA_BF16_MASK) & 32
#define T5 U16
#define LD5 STRATA_LD_BF16
#define ST5 STRATA_ST_BF16
#else
#define T5 float
#define LD5 STRATA_LD_F32
#define ST5 STRATA_ST_F32
#endif
#endif
