/* SPDX-License-Identifier: MIT */
/* bench-cublas.h — cuBLAS called directly for strata-bench gemm, and what its direct references share (bench-cublas.c). */
#ifndef STRATA_TOOLS_BENCH_CUBLAS_H
#define STRATA_TOOLS_BENCH_CUBLAS_H

#include <stddef.h>
#include <stdint.h>

struct bench_cublas;

/* The loaded object (dlopen handle) that itself defines `sym`, its file name in `file` (may be NULL); NULL if none. */
void *strata_bench_find_loaded(const char *sym, char *file, size_t len);

/* f as bfloat16, to nearest, ties to even (finite inputs: the benchmarks' operands), for the direct references. */
uint16_t strata_bench_to_bf16(float f);

/* The file of the cuBLAS the CUDA module loaded, or NULL when none is loaded (or an entry point is missing). */
const char *strata_bench_cublas_file(void);

/*
** Set up C = A B (N x N, row-major) on CUDA device `ordinal` with cuBLAS's
** cublasGemmEx: float32 A and B (no TF32), or bf16 with `bf16` (rounded to
** nearest from a and b), float32 C and sums. 0 on success, -1 otherwise
** (*out NULL).
*/
int strata_bench_cublas_open(int ordinal, int n, const float *a, const float *b, int bf16, struct bench_cublas **out);

/* One product, waited for (cudaDeviceSynchronize); 0 on success. */
int strata_bench_cublas_run(struct bench_cublas *g);

/* Free the buffers and the handle; NULL is ignored. */
void strata_bench_cublas_close(struct bench_cublas *g);

#endif /* STRATA_TOOLS_BENCH_CUBLAS_H */
