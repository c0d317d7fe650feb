/* SPDX-License-Identifier: MIT */
/* blas.c — the host backend's one GEMM entry point over the library configure chose, and its start-up check. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "host.h"

#if defined(STRATA_BLAS_DNNL)
#include <oneapi/dnnl/dnnl.h>
#else
#include <cblas.h>
#endif
#if defined(STRATA_BLAS_OPENBLAS)
char *openblas_get_corename(void);
char *openblas_get_config(void);
#endif
#if defined(STRATA_BLAS_BLIS)
void bli_thread_set_num_threads(long n); /* BLIS's dim_t is a 64-bit integer on LP64 */
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

void strata__host_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                        int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
#if defined(STRATA_BLAS_DNNL)
  dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#else
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n,
              (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
#endif
}

static int blas_threads = 0; /* 0: the library's default */

void strata__host_blas_threads(int n) {
  blas_threads = n;
#if defined(STRATA_BLAS_OPENBLAS)
  openblas_set_num_threads(n);
#elif defined(STRATA_BLAS_BLIS)
  bli_thread_set_num_threads(n);
#endif
}

void strata__host_blas_worker_start(void) {
#if defined(STRATA_BLAS_DNNL) && defined(_OPENMP)
  /* dnnl_sgemm sizes its OpenMP team from the calling thread's setting: each queue's worker sets its own */
  if (blas_threads > 0)
    omp_set_num_threads(blas_threads);
#endif
}

const char *strata__host_blas_describe(char *buf, size_t len) {
#if defined(STRATA_BLAS_OPENBLAS)
  const char *env = getenv("OPENBLAS_CORETYPE");
  snprintf(buf, len, "OpenBLAS (%s), %s kernels%s%s%s", openblas_get_config(), openblas_get_corename(),
           env && *env ? " (OPENBLAS_CORETYPE=" : "", env && *env ? env : "", env && *env ? ")" : "");
#elif defined(STRATA_BLAS_DNNL)
  const dnnl_version_t *v = dnnl_version();
  snprintf(buf, len, "oneDNN %d.%d.%d dnnl_sgemm (kernels generated for this CPU at run time)", v->major, v->minor,
           v->patch);
#elif defined(STRATA_BLAS_BLIS)
  snprintf(buf, len, "BLIS cblas_sgemm (kernels chosen from the CPU at run time)");
#else
  snprintf(buf, len, "CBLAS cblas_sgemm (pkg-config blas)");
#endif
  return buf;
}

/* One GEMM of every transpose combination, odd sizes and strides, alpha and beta, against a double-precision loop. */
int strata__host_blas_check(char *why, size_t why_len) {
  enum { M = 37, N = 29, K = 53, LD = 61 };
  enum { ROWS_A = M > K ? M : K, ROWS_B = K > N ? K : N };
  float *a = malloc(sizeof(float) * ROWS_A * LD), *b = malloc(sizeof(float) * ROWS_B * LD);
  float *c = malloc(sizeof(float) * M * LD), *c0 = malloc(sizeof(float) * M * LD);
  int rc = 0;
  if (!a || !b || !c || !c0) {
    snprintf(why, why_len, "out of memory");
    rc = -1;
    goto out;
  }
  uint32_t s = 12345;
  for (int i = 0; i < ROWS_B * LD; i++) {
    s = s * 1664525u + 1013904223u;
    b[i] = (float)((int)(s >> 9) % 2001 - 1000) / 1000.0f;
  }
  for (int i = 0; i < ROWS_A * LD; i++) {
    s = s * 1664525u + 1013904223u;
    a[i] = (float)((int)(s >> 9) % 2001 - 1000) / 1000.0f;
  }
  for (int i = 0; i < M * LD; i++)
    c0[i] = (float)(i % 7) - 3.0f;
  for (int ta = 0; ta < 2 && !rc; ta++)
    for (int tb = 0; tb < 2 && !rc; tb++) {
      const float alpha = 0.75f, beta = -0.5f;
      memcpy(c, c0, sizeof(float) * M * LD);
      strata__host_sgemm(ta, tb, M, N, K, alpha, a, LD, b, LD, beta, c, LD);
      for (int i = 0; i < M && !rc; i++)
        for (int j = 0; j < LD && !rc; j++) {
          double want = c0[i * LD + j];
          if (j < N) {
            double dot = 0;
            for (int p = 0; p < K; p++)
              dot += (double)(ta ? a[p * LD + i] : a[i * LD + p]) * (tb ? b[j * LD + p] : b[p * LD + j]);
            want = alpha * dot + beta * want;
          }
          if (fabs(c[i * LD + j] - want) > 1e-4 * (1.0 + fabs(want))) {
            snprintf(why, why_len,
                     "GEMM check failed (%s%s, %dx%dx%d): C[%d][%d] = %.7g, expected %.7g", ta ? "T" : "N",
                     tb ? "T" : "N", M, N, K, i, j, c[i * LD + j], want);
            rc = -1;
          }
        }
    }
out:
  free(a);
  free(b);
  free(c);
  free(c0);
  return rc;
}

int strata__host_blas_coretype_honoured(char *why, size_t why_len) {
#if defined(STRATA_BLAS_OPENBLAS)
  const char *env = getenv("OPENBLAS_CORETYPE"), *got = openblas_get_corename();
  if (env && *env && strcasecmp(env, got) != 0) {
    snprintf(why, why_len, "OPENBLAS_CORETYPE=%.40s was not taken: OpenBLAS runs its %.40s kernels", env, got);
    return 0;
  }
#endif
  (void)why;
  (void)why_len;
  return 1;
}
