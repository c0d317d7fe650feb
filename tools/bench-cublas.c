/* SPDX-License-Identifier: MIT */
/* bench-cublas.c — strata-bench gemm's direct reference on CUDA devices: cuBLAS called through the copy the CUDA module loaded. */
#include "config.h"

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dl_iterate_phdr, dladdr */
#endif
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench-cublas.h"

/*
** No CUDA header here: strata-bench builds without the toolkit. The few
** entry points are declared by hand with the values of CUDA 12/13's headers
** (library_types.h: CUDA_R_32F 0, CUDA_R_16BF 14; cublas_api.h: CUBLAS_OP_N
** 0, CUBLAS_COMPUTE_32F 68, CUBLAS_GEMM_DEFAULT -1, CUBLAS_DEFAULT_MATH 0;
** cudaMemcpyHostToDevice 1); cudaError_t and cublasStatus_t are ints whose
** success is 0.
*/
typedef int (*cuda_set_device_fn)(int);
typedef int (*cuda_malloc_fn)(void **, size_t);
typedef int (*cuda_free_fn)(void *);
typedef int (*cuda_memcpy_fn)(void *, const void *, size_t, int);
typedef int (*cuda_sync_fn)(void);
typedef int (*cublas_create_fn)(void **);
typedef int (*cublas_destroy_fn)(void *);
typedef int (*cublas_math_fn)(void *, int);
typedef int (*cublas_gemm_ex_fn)(void *, int, int, int, int, int, const void *, const void *, int, int, const void *,
                                 int, int, const void *, void *, int, int, int, int);

static struct {
  int looked;
  char file[512];
  cuda_set_device_fn set_device;
  cuda_malloc_fn malloc_;
  cuda_free_fn free_;
  cuda_memcpy_fn memcpy_;
  cuda_sync_fn sync;
  cublas_create_fn create;
  cublas_destroy_fn destroy;
  cublas_math_fn math;
  cublas_gemm_ex_fn gemm_ex;
} cu;

struct bench_cublas {
  int n, bf16;
  void *blas;
  void *a, *b, *c;
};

struct find {
  const char *sym;
  void *handle;
  char *file;
  size_t len;
};

/* dl_iterate_phdr's callback: the loaded object that itself defines f->sym. */
static int find_cb(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  struct find *f = data;
  if (!info->dlpi_name || !info->dlpi_name[0])
    return 0;
  void *h = dlopen(info->dlpi_name, RTLD_NOW | RTLD_NOLOAD);
  if (!h)
    return 0;
  void *sym = dlsym(h, f->sym);
  Dl_info where;
  if (sym && dladdr(sym, &where) && where.dli_fname && strcmp(where.dli_fname, info->dlpi_name) == 0) {
    f->handle = h;
    if (f->file)
      snprintf(f->file, f->len, "%s", info->dlpi_name);
    return 1;
  }
  dlclose(h);
  return 0;
}

void *strata_bench_find_loaded(const char *sym, char *file, size_t len) {
  struct find f = {sym, NULL, file, len};
  dl_iterate_phdr(find_cb, &f);
  return f.handle;
}

/* Look up cudart's and cuBLAS's entry points in the copies loaded (once); 0 when all are there. */
static int lookup(void) {
  if (cu.looked)
    return cu.gemm_ex && cu.set_device ? 0 : -1;
  cu.looked = 1;
  void *rt = strata_bench_find_loaded("cudaMalloc", NULL, 0);
  void *bl = strata_bench_find_loaded("cublasGemmEx", cu.file, sizeof cu.file);
  if (!rt || !bl)
    return -1;
  cu.set_device = (cuda_set_device_fn)(uintptr_t)dlsym(rt, "cudaSetDevice");
  cu.malloc_ = (cuda_malloc_fn)(uintptr_t)dlsym(rt, "cudaMalloc");
  cu.free_ = (cuda_free_fn)(uintptr_t)dlsym(rt, "cudaFree");
  cu.memcpy_ = (cuda_memcpy_fn)(uintptr_t)dlsym(rt, "cudaMemcpy");
  cu.sync = (cuda_sync_fn)(uintptr_t)dlsym(rt, "cudaDeviceSynchronize");
  cu.create = (cublas_create_fn)(uintptr_t)dlsym(bl, "cublasCreate_v2");
  cu.destroy = (cublas_destroy_fn)(uintptr_t)dlsym(bl, "cublasDestroy_v2");
  cu.math = (cublas_math_fn)(uintptr_t)dlsym(bl, "cublasSetMathMode");
  cu.gemm_ex = (cublas_gemm_ex_fn)(uintptr_t)dlsym(bl, "cublasGemmEx");
  if (!cu.set_device || !cu.malloc_ || !cu.free_ || !cu.memcpy_ || !cu.sync || !cu.create || !cu.destroy ||
      !cu.math || !cu.gemm_ex) {
    cu.gemm_ex = NULL;
    return -1;
  }
  return 0;
}

const char *strata_bench_cublas_file(void) { return lookup() ? NULL : cu.file; }

uint16_t strata_bench_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* Upload `count` floats of `src` to a new device buffer, as bf16 when asked. */
static int upload(void **dst, const float *src, size_t count, int bf16) {
  size_t bytes = count * (bf16 ? 2 : 4);
  if (cu.malloc_(dst, bytes))
    return -1;
  const void *from = src;
  uint16_t *half = NULL;
  if (bf16) {
    half = malloc(bytes);
    if (!half)
      return -1;
    for (size_t i = 0; i < count; i++)
      half[i] = strata_bench_to_bf16(src[i]);
    from = half;
  }
  int rc = cu.memcpy_(*dst, from, bytes, 1 /* cudaMemcpyHostToDevice */) ? -1 : 0;
  free(half);
  return rc;
}

int strata_bench_cublas_open(int ordinal, int n, const float *a, const float *b, int bf16, struct bench_cublas **out) {
  *out = NULL;
  if (lookup() || cu.set_device(ordinal))
    return -1;
  struct bench_cublas *g = calloc(1, sizeof *g);
  if (!g)
    return -1;
  g->n = n;
  g->bf16 = bf16;
  size_t count = (size_t)n * n;
  if (cu.create(&g->blas) || cu.math(g->blas, 0 /* CUBLAS_DEFAULT_MATH: no TF32, as strata's fp32 */) ||
      upload(&g->a, a, count, bf16) || upload(&g->b, b, count, bf16) || cu.malloc_(&g->c, count * 4) || cu.sync()) {
    strata_bench_cublas_close(g);
    return -1;
  }
  *out = g;
  return 0;
}

/*
** C = A B for row-major N x N matrices is, in cuBLAS's column-major terms,
** C^T = B^T A^T: B passed first, no transposes, the same call strata makes.
*/
int strata_bench_cublas_run(struct bench_cublas *g) {
  const float one = 1.0f, zero = 0.0f;
  int type = g->bf16 ? 14 /* CUDA_R_16BF */ : 0 /* CUDA_R_32F */;
  if (cu.gemm_ex(g->blas, 0, 0, g->n, g->n, g->n, &one, g->b, type, g->n, g->a, type, g->n, &zero, g->c,
                 0 /* CUDA_R_32F */, g->n, 68 /* CUBLAS_COMPUTE_32F */, -1 /* CUBLAS_GEMM_DEFAULT */))
    return -1;
  return cu.sync() ? -1 : 0;
}

void strata_bench_cublas_close(struct bench_cublas *g) {
  if (!g)
    return;
  if (g->a)
    cu.free_(g->a);
  if (g->b)
    cu.free_(g->b);
  if (g->c)
    cu.free_(g->c);
  if (g->blas)
    cu.destroy(g->blas);
  free(g);
}
