/* SPDX-License-Identifier: MIT */
/* host.h — shared between the host backend's queue machinery and its op implementations. */
#ifndef STRATA__HOST_H
#define STRATA__HOST_H

#include "device/backend.h"

/* Run one op record synchronously on the calling thread. */
int strata__host_op_run(const struct strata__op *op);
/* The same for a record whose operands are all 4-byte (host-ops.c): the float32 kernels. */
int strata__host_op_run_f32(const struct strata__op *op);
/* The same for a record with a bfloat16 operand, and CONVERT (host-bf16.c). */
int strata__host_op_run_bf16(const struct strata__op *op);
/* A GEMM record with a bfloat16 operand (gemm-bf16.c). */
int strata__host_gemm_bf16(const struct strata__op *op);
/* A LINEAR record as one oneDNN matmul with the bias and residual in its epilogue (gemm-bf16.c): x, w and y
** bfloat16 on a build with oneDNN; STRATA_ERR_UNSUPPORTED otherwise (the caller runs GEMM, BIAS_ADD, ADD). */
int strata__host_linear_fused(const struct strata__op *op);

/* `bytes` of host memory for free(), 64-byte aligned; from 4 MiB on, 2 MiB-aligned with transparent huge pages
** asked for (host.c); NULL when memory runs out. */
void *strata__host_alloc(size_t bytes);

/* At least n floats of the calling thread's scratch (host-bf16.c), 64-byte aligned, kept and reused by its later
** ops (grown, never shrunk; freed when the thread ends); NULL when memory runs out. */
float *strata__host_scratch(size_t n);

/* The runtime's log (strata's STRATA_LOG), subsystem "host". */
void strata__host_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Threads each op of a virtual device may use (host-ops.c). */
extern int strata__host_threads;

/* GEMMs threaded by the op's OpenMP team over a single-threaded BLAS (host-ops.c), rather than by the BLAS. */
extern int strata__host_gemm_split;

/* Row kernels of the float32 ops that the bfloat16 ones run on widened rows (host-ops.c; see there). */
void strata__host_col_sums(const float *dy, int64_t ld, float *db, int64_t rows, int64_t n, int accumulate);
void strata__host_ln_param_grads(const float *x, const float *dy, int64_t ld, const float *mean, const float *rstd,
                                 float *dg, float *db, int64_t rows, int64_t n, int accumulate);
void strata__host_layernorm_row(const float *xr, const float *g, const float *b, float *yr, int64_t cols, float eps,
                                float *mean, float *rstd);
void strata__host_ln_dx_row(const float *xr, const float *dyr, const float *g, float *dxr, int64_t cols, float mu,
                            float rs);

/* The fused (grouped-query) attention on float32 operands (host-attn.c); STRATA_ERR_NOMEM when scratch fails. */
int strata__host_attention_fwd(const struct strata__op *op);
int strata__host_attention_bwd(const struct strata__op *op);
/* The same on bfloat16 qkv, out, dout and dqkv with float32 lse, on AVX-512 BF16 dot products (host-attn-bf16.c);
** STRATA_ERR_UNSUPPORTED for other operand types or a CPU without them (the caller stages the float32 one). */
int strata__host_attention_bf16(const struct strata__op *op);

/* LLaMA's ops (host-llama.c): RMSNorm, SwiGLU on float32 operands (bfloat16 ones staged by host-bf16.c); RoPE on
** float32 or bfloat16 operands, read and written in place (its rows are strided). */
void strata__host_rmsnorm_fwd(const struct strata__op *op);
void strata__host_rmsnorm_bwd(const struct strata__op *op);
void strata__host_swiglu_fwd(const struct strata__op *op);
void strata__host_swiglu_bwd(const struct strata__op *op);
void strata__host_rope(const struct strata__op *op);

/* Which ops the host backend implements (all of them). */
int strata__host_op_supported(enum strata__op_id id);

/* blas.c: the GEMM library configure chose (OpenBLAS, BLIS, oneDNN or a generic CBLAS). */
/* C = alpha op(A) op(B) + beta C, row-major. */
void strata__host_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                        int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
/* Threads each GEMM may use (the library's own pool, or OpenMP for oneDNN). */
void strata__host_blas_threads(int n);
/* Called once on each queue's worker thread before its first op. */
void strata__host_blas_worker_start(void);
/* "OpenBLAS (...), SkylakeX kernels (OPENBLAS_CORETYPE=SkylakeX)": which library and kernels run; returns buf. */
const char *strata__host_blas_describe(char *buf, size_t len);
/* A small GEMM of every transpose against a double-precision loop: 0, or -1 with the first wrong element in why. */
int strata__host_blas_check(char *why, size_t why_len);
/* 1 unless OPENBLAS_CORETYPE is set and OpenBLAS runs other kernels (then 0, and why says which). */
int strata__host_blas_coretype_honoured(char *why, size_t why_len);

#endif /* STRATA__HOST_H */
