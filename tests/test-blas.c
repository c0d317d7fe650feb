/* SPDX-License-Identifier: MIT */
/* test-blas.c — the host GEMM library's kernels: chosen from the CPU's feature flags, a user's choice kept,
** one this CPU cannot run refused, and the chosen kernels against a reference GEMM through the device layer. */
#include "config.h"

#include "common.h"
#include "device/cpu.h"

#define AVX512 (STRATA__CPU_AVX512F | STRATA__CPU_AVX512BW | STRATA__CPU_AVX512VL | STRATA__CPU_AVX512DQ)
#define AVX2 (STRATA__CPU_AVX | STRATA__CPU_AVX2 | STRATA__CPU_FMA)

/* Every test starts from an environment without the user's choices. */
static void clean_env(void) {
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv("STRATA_HOST_CPU_HIDE");
  unsetenv("STRATA_HOST_DEVICES");
  unsetenv("STRATA_HOST_THREADS");
  unsetenv("STRATA_HOST_GEMM_SPLIT");
  setenv("STRATA_BACKENDS", "host", 1);
}

TestSuite(blas, .init = clean_env);

Test(blas, core_type_from_feature_flags) {
  unsigned base = STRATA__CPU_SSE3 | STRATA__CPU_SSE4_2;
  cr_assert_str_eq(strata__cpu_coretype_for(base | AVX2 | AVX512), "SkylakeX");
  cr_assert_str_eq(strata__cpu_coretype_for(base | AVX2 | AVX512 | STRATA__CPU_AVX512BF16), "SkylakeX");
  /* AVX-512 F without BW/VL (Knights Landing) is not what the SkylakeX kernels run on */
  cr_assert_str_eq(strata__cpu_coretype_for(base | AVX2 | STRATA__CPU_AVX512F), "Haswell");
  cr_assert_str_eq(strata__cpu_coretype_for(base | AVX2), "Haswell");
  cr_assert_str_eq(strata__cpu_coretype_for(base | STRATA__CPU_AVX | STRATA__CPU_AVX2), "SandyBridge");
  cr_assert_str_eq(strata__cpu_coretype_for(base | STRATA__CPU_AVX), "SandyBridge");
  cr_assert_null(strata__cpu_coretype_for(base));
  cr_assert_null(strata__cpu_coretype_for(0));
}

Test(blas, what_each_core_type_needs) {
  cr_assert_eq(strata__cpu_coretype_needs("SkylakeX") & AVX512, AVX512);
  cr_assert_eq(strata__cpu_coretype_needs("skylakex"), strata__cpu_coretype_needs("SkylakeX"));
  cr_assert(strata__cpu_coretype_needs("Cooperlake") & STRATA__CPU_AVX512BF16);
  cr_assert_eq(strata__cpu_coretype_needs("Haswell"), AVX2);
  cr_assert_eq(strata__cpu_coretype_needs("Haswell") & STRATA__CPU_AVX512F, 0u);
  cr_assert_eq(strata__cpu_coretype_needs("Prescott"), STRATA__CPU_SSE3);
  cr_assert_eq(strata__cpu_coretype_needs("NoSuchCore"), 0u);
  /* whatever strata chooses, this CPU runs */
  unsigned f = strata__cpu_features();
  const char *pick = strata__cpu_coretype_for(f);
  if (pick)
    cr_assert_eq(strata__cpu_coretype_needs(pick) & ~f, 0u, "%s needs more than this CPU has", pick);
}

Test(blas, hidden_features_are_gone) {
  unsigned all = strata__cpu_features();
  setenv("STRATA_HOST_CPU_HIDE", "avx512f,AVX2,nonsense", 1);
  unsigned f = strata__cpu_features();
  cr_assert_eq(f & (STRATA__CPU_AVX512F | STRATA__CPU_AVX2), 0u);
  cr_assert_eq(f, all & ~(STRATA__CPU_AVX512F | STRATA__CPU_AVX2));
  char names[160];
  strata__cpu_feature_names(STRATA__CPU_AVX2 | STRATA__CPU_FMA, names, sizeof names);
  cr_assert_str_eq(names, "avx2 fma");
}

/* C = op(A) op(B) (batch products, strided) through the device layer on host device `dev`, against a double loop. */
static void check_gemm_shape(int dev, int ta, int tb, int64_t M, int64_t N, int64_t K, int64_t batch) {
  size_t na = (size_t)(M * K), nb = (size_t)(K * N), nc = (size_t)(M * N);
  float *a = malloc(na * batch * 4), *b = malloc(nb * batch * 4), *c = malloc(nc * batch * 4);
  for (size_t i = 0; i < na * batch; i++)
    a[i] = (float)((i * 7) % 23) / 23.0f - 0.5f;
  for (size_t i = 0; i < nb * batch; i++)
    b[i] = (float)((i * 11) % 19) / 19.0f - 0.5f;
  strata_queue_t q;
  strata_buffer_t ba, bb, bc;
  OK(strata_queue_new(dev, &q));
  OK(strata_buffer_new(dev, na * batch * 4, &ba));
  OK(strata_buffer_new(dev, nb * batch * 4, &bb));
  OK(strata_buffer_new(dev, nc * batch * 4, &bc));
  OK(strata_buffer_upload(q, ba, 0, a, na * batch * 4));
  OK(strata_buffer_upload(q, bb, 0, b, nb * batch * 4));
  int64_t lda = ta ? M : K, ldb = tb ? K : N;
  OK(strata_gemm(q, ta, tb, M, N, K, 1.0f, strata_mem(ba, 0), lda, (int64_t)na, strata_mem(bb, 0), ldb, (int64_t)nb,
                 0.0f, strata_mem(bc, 0), N, (int64_t)nc, batch));
  OK(strata_buffer_download(q, bc, 0, c, nc * batch * 4));
  OK(strata_queue_finish(q));
  for (int64_t t = 0; t < batch; t++)
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        double want = 0;
        for (int64_t p = 0; p < K; p++)
          want += (double)a[t * na + (ta ? p * lda + i : i * lda + p)] * b[t * nb + (tb ? j * ldb + p : p * ldb + j)];
        float got = c[t * nc + i * N + j];
        cr_assert(fabs(got - want) < 1e-4 * (1 + fabs(want)), "%s%s %lldx%lldx%lld batch %lld: C[%lld][%lld][%lld] = %g, expected %g",
                  ta ? "T" : "N", tb ? "T" : "N", (long long)M, (long long)N, (long long)K, (long long)batch,
                  (long long)t, (long long)i, (long long)j, got, want);
      }
  strata_buffer_free(ba);
  strata_buffer_free(bb);
  strata_buffer_free(bc);
  strata_queue_free(q);
  free(a);
  free(b);
  free(c);
}

static void check_gemm(int dev) { check_gemm_shape(dev, 0, 0, 70, 45, 129, 1); }

Test(blas, library_gemm_matches_reference) {
  int dev = tc_find_device("host", 0);
  cr_assert_geq(dev, 0, "%s", strata_last_error());
  check_gemm(dev);
}

Test(blas, unset_core_type_is_chosen_from_the_flags) {
#ifndef STRATA_BLAS_OPENBLAS
  cr_skip_test("the host backend is built with %s, not OpenBLAS", STRATA_BLAS_NAME);
#else
  int dev = tc_find_device("host", 0);
  cr_assert_geq(dev, 0, "%s", strata_last_error());
  const char *pick = strata__cpu_coretype_for(strata__cpu_features());
  const char *env = getenv("OPENBLAS_CORETYPE");
  if (pick)
    cr_assert(env && strcmp(env, pick) == 0, "OPENBLAS_CORETYPE is %s, expected %s", env ? env : "unset", pick);
  else
    cr_assert_null(env);
  check_gemm(dev);
#endif
}

Test(blas, smaller_cpu_gets_smaller_kernels) {
#ifndef STRATA_BLAS_OPENBLAS
  cr_skip_test("the host backend is built with %s, not OpenBLAS", STRATA_BLAS_NAME);
#else
  setenv("STRATA_HOST_CPU_HIDE", "avx512f,avx512bw,avx512vl,avx512dq", 1);
  if (!(strata__cpu_features() & STRATA__CPU_AVX2))
    cr_skip_test("this CPU has no AVX2");
  int dev = tc_find_device("host", 0);
  cr_assert_geq(dev, 0, "%s", strata_last_error());
  cr_assert_str_eq(getenv("OPENBLAS_CORETYPE"), "Haswell");
  check_gemm(dev);
#endif
}

Test(blas, user_core_type_is_kept) {
#ifndef STRATA_BLAS_OPENBLAS
  cr_skip_test("the host backend is built with %s, not OpenBLAS", STRATA_BLAS_NAME);
#else
  setenv("OPENBLAS_CORETYPE", "Prescott", 1);
  int dev = tc_find_device("host", 0);
  cr_assert_geq(dev, 0, "%s", strata_last_error());
  cr_assert_str_eq(getenv("OPENBLAS_CORETYPE"), "Prescott");
  check_gemm(dev);
#endif
}

Test(blas, core_type_the_cpu_cannot_run_is_refused) {
#ifndef STRATA_BLAS_OPENBLAS
  cr_skip_test("the host backend is built with %s, not OpenBLAS", STRATA_BLAS_NAME);
#else
  /* play a CPU without AVX-512 asked for AVX-512 kernels: refused before OpenBLAS loads them */
  setenv("STRATA_HOST_CPU_HIDE", "avx512f", 1);
  setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
  int n = -1;
  int rc = strata_device_count(&n);
  cr_assert_eq(rc, STRATA_ERR_UNSUPPORTED, "%s", strata_err_name(rc));
  cr_assert(strstr(strata_last_error(), "OPENBLAS_CORETYPE=SkylakeX needs avx512f"), "%s", strata_last_error());
  cr_assert_str_eq(getenv("OPENBLAS_CORETYPE"), "SkylakeX"); /* refused, never overridden */
#endif
}

Test(blas, gemm_threaded_by_strata_matches_reference) {
  /* STRATA_HOST_GEMM_SPLIT=1: panels of C (rows when M >= N, else columns) or whole batches per thread */
  setenv("STRATA_HOST_GEMM_SPLIT", "1", 1);
  setenv("STRATA_HOST_THREADS", "3", 1);
  int dev = tc_find_device("host", 0);
  cr_assert_geq(dev, 0, "%s", strata_last_error());
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      check_gemm_shape(dev, ta, tb, 131, 67, 150, 1);  /* rows */
      check_gemm_shape(dev, ta, tb, 50, 147, 150, 1);  /* columns */
      check_gemm_shape(dev, ta, tb, 60, 37, 300, 2);   /* panels of each of fewer batches than threads */
      check_gemm_shape(dev, ta, tb, 40, 37, 300, 4);   /* whole batches */
    }
}
