/* SPDX-License-Identifier: MIT */
/* test-ops.c — every op on every device against the host backend, host results against hand-computed values,
** every backward op against finite differences, and the ops' bad-input errors. */
#include <float.h>
#include <stdio.h>

#include "common.h"

#define MAXB 12
#define PAD 5     /* operands start PAD elements into their buffer ... */
#define GUARD 3   /* ... and GUARD elements follow them: both must survive untouched */
#define SENTINEL 1234.5f

/* The body of a case: enqueue ops on q over operands m[0..nbuf). */
typedef int (*body_fn)(strata_queue_t q, strata_mem_t *m, const void *params);

struct opcase {
  const char *name;
  body_fn body;
  const void *params;
  int nbuf;
  size_t count[MAXB];   /* 4-byte elements per operand */
  void *init[MAXB];     /* initial contents (NULL: zeros) */
};

/* Run a case on device `dev`; out[i] receives operand i afterwards (count[i] elements).
** Returns the body's status; fails the test if the guard elements moved. */
static int exec(int dev, const struct opcase *c, void **out) {
  strata_queue_t q;
  OK(strata_queue_new(dev, &q));
  strata_buffer_t b[MAXB];
  strata_mem_t m[MAXB];
  for (int i = 0; i < c->nbuf; i++) {
    size_t n = c->count[i] + PAD + GUARD;
    float *host = malloc(n * 4);
    for (size_t j = 0; j < n; j++)
      host[j] = SENTINEL;
    if (c->init[i])
      memcpy(host + PAD, c->init[i], c->count[i] * 4);
    else
      memset(host + PAD, 0, c->count[i] * 4);
    OK(strata_buffer_new(dev, n * 4, &b[i]));
    OK(strata_buffer_upload(q, b[i], 0, host, n * 4));
    free(host);
    m[i] = strata_mem(b[i], PAD);
  }
  int rc = c->body(q, m, c->params);
  int rc2 = strata_queue_finish(q);
  if (!rc)
    rc = rc2;
  for (int i = 0; i < c->nbuf; i++) {
    size_t n = c->count[i] + PAD + GUARD;
    float *host = malloc(n * 4);
    OK(strata_buffer_download(q, b[i], 0, host, n * 4));
    for (size_t j = 0; j < PAD; j++)
      cr_assert_eq(host[j], SENTINEL, "%s on device %d wrote before operand %d", c->name, dev, i);
    for (size_t j = 0; j < GUARD; j++)
      cr_assert_eq(host[PAD + c->count[i] + j], SENTINEL, "%s on device %d wrote past operand %d", c->name, dev, i);
    if (out)
      memcpy(out[i], host + PAD, c->count[i] * 4);
    free(host);
    strata_buffer_free(b[i]);
  }
  strata_queue_free(q);
  return rc;
}

static void **alloc_outputs(const struct opcase *c) {
  void **o = calloc(MAXB, sizeof *o);
  for (int i = 0; i < c->nbuf; i++)
    o[i] = calloc(c->count[i], 4);
  return o;
}

static void free_outputs(const struct opcase *c, void **o) {
  for (int i = 0; i < c->nbuf; i++)
    free(o[i]);
  free(o);
}

/* The reference device: the first host device. */
static int ref_device(void) {
  int d = tc_find_device("host", 0);
  cr_assert_geq(d, 0, "no host device: %s", strata_last_error());
  return d;
}

/* Run on the host and on every other device; compare operands in `outputs`
** (bitmask) within |a-b| <= atol + rtol |b|. Returns the host results. */
static void **compare_devices(const struct opcase *c, unsigned outputs, double atol, double rtol) {
  int ref = ref_device(), n;
  void **want = alloc_outputs(c);
  int rc = exec(ref, c, want);
  cr_assert_eq(rc, STRATA_OK, "%s on host: %s", c->name, strata_last_error());
  OK(strata_device_count(&n));
  for (int d = 0; d < n; d++) {
    struct strata_device_props p;
    OK(strata_device_props(d, &p));
    if (d == ref || strcmp(p.backend, "host") == 0)
      continue;
    void **got = alloc_outputs(c);
    rc = exec(d, c, got);
    cr_assert_eq(rc, STRATA_OK, "%s on device %d (%s): %s", c->name, d, p.backend, strata_last_error());
    for (int i = 0; i < c->nbuf; i++) {
      if (!(outputs & (1u << i)))
        continue;
      size_t at = 0;
      double e = tc_excess(got[i], want[i], c->count[i], atol, rtol, &at);
      cr_assert_leq(e, 1.0, "%s on device %d (%s): operand %d element %zu is %.7g, host says %.7g", c->name, d,
                    p.backend, i, at, (double)((float *)got[i])[at], (double)((float *)want[i])[at]);
    }
    free_outputs(c, got);
  }
  return want;
}

/*
** Finite differences: the loss is L = sum_j w[j] * out[j], where operand
** `wi` holds w and operand `yi` the forward output; the case's backward
** body writes dL/d(operand xi) into operand gi. Checks every element of
** operand xi (at most `limit`) by central differences with step h.
*/
static void check_fd(const struct opcase *fwd, const struct opcase *bwd, int xi, int gi, int yi, int wi, double h,
                     double atol, double rtol, size_t limit) {
  int dev = ref_device();
  void **g = alloc_outputs(bwd);
  cr_assert_eq(exec(dev, bwd, g), STRATA_OK, "%s: %s", bwd->name, strata_last_error());
  struct opcase f = *fwd;
  float *x = malloc(f.count[xi] * 4);
  memcpy(x, f.init[xi], f.count[xi] * 4);
  f.init[xi] = x;
  const float *w = fwd->init[wi];
  void **o = alloc_outputs(&f);
  size_t n = f.count[xi] < limit ? f.count[xi] : limit;
  for (size_t j = 0; j < n; j++) {
    double l[2];
    for (int s = 0; s < 2; s++) {
      float saved = x[j];
      x[j] = saved + (s ? -1.0f : 1.0f) * (float)h;
      cr_assert_eq(exec(dev, &f, o), STRATA_OK, "%s: %s", f.name, strata_last_error());
      x[j] = saved;
      double sum = 0;
      const float *y = o[yi];
      for (size_t k = 0; k < f.count[yi]; k++)
        sum += (double)w[k] * y[k];
      l[s] = sum;
    }
    double num = (l[0] - l[1]) / (2 * h);
    double ana = ((float *)g[gi])[j];
    cr_assert_leq(fabs(num - ana), atol + rtol * fabs(num), "%s: d/dx[%zu] analytic %.6g, finite differences %.6g",
                  bwd->name, j, ana, num);
  }
  free_outputs(&f, o);
  free_outputs(bwd, g);
  free(x);
}

static float *rnd(size_t n, uint32_t seed, float lo, float hi) {
  float *x = malloc(n * 4);
  tc_fill(x, n, seed, lo, hi);
  return x;
}

static void setup(void) {
  setenv("STRATA_HOST_DEVICES", "1", 1);
}

TestSuite(ops, .init = setup);

/* ---- GEMM ---- */

struct gemm_p {
  int ta, tb;
  int64_t m, n, k, lda, ldb, ldc, sa, sb, sc, batch;
  float alpha, beta;
};

static int gemm_body(strata_queue_t q, strata_mem_t *m, const void *pp) {
  const struct gemm_p *p = pp;
  return strata_gemm(q, p->ta, p->tb, p->m, p->n, p->k, p->alpha, m[0], p->lda, p->sa, m[1], p->ldb, p->sb, p->beta,
                     m[2], p->ldc, p->sc, p->batch);
}

/* Reference GEMM in double, straight from the definition. */
static void gemm_ref(const struct gemm_p *p, const float *a, const float *b, float *c) {
  for (int64_t t = 0; t < p->batch; t++)
    for (int64_t i = 0; i < p->m; i++)
      for (int64_t j = 0; j < p->n; j++) {
        double s = 0;
        for (int64_t l = 0; l < p->k; l++) {
          float av = p->ta ? a[t * p->sa + l * p->lda + i] : a[t * p->sa + i * p->lda + l];
          float bv = p->tb ? b[t * p->sb + j * p->ldb + l] : b[t * p->sb + l * p->ldb + j];
          s += (double)av * bv;
        }
        float *cv = &c[t * p->sc + i * p->ldc + j];
        *cv = (float)(p->alpha * s + p->beta * *cv);
      }
}

Test(ops, gemm_transposes_and_batches) {
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      struct gemm_p p = {.ta = ta, .tb = tb, .m = 13, .n = 7, .k = 9, .batch = 3, .alpha = 1.5f, .beta = 0.5f};
      p.lda = (ta ? p.m : p.k) + 2;
      p.ldb = (tb ? p.k : p.n) + 1;
      p.ldc = p.n + 3;
      p.sa = (ta ? p.k : p.m) * p.lda + 4;
      p.sb = (tb ? p.n : p.k) * p.ldb;
      p.sc = p.m * p.ldc + 1;
      size_t na = (size_t)(p.sa * p.batch), nb = (size_t)(p.sb * p.batch), nc = (size_t)(p.sc * p.batch);
      struct opcase c = {"gemm", gemm_body, &p, 3, {na, nb, nc}, {rnd(na, 1, -1, 1), rnd(nb, 2, -1, 1), rnd(nc, 3, -1, 1)}};
      /* host against the definition */
      float *want = malloc(nc * 4);
      memcpy(want, c.init[2], nc * 4);
      gemm_ref(&p, c.init[0], c.init[1], want);
      void **got = compare_devices(&c, 1u << 2, 1e-4, 1e-4);
      /* only the elements inside the matrices are defined; the gaps keep their values */
      size_t at = 0;
      cr_assert_leq(tc_excess(got[2], want, nc, 1e-5, 1e-5, &at), 1.0, "ta=%d tb=%d: C[%zu] = %g, want %g", ta, tb, at,
                    (double)((float *)got[2])[at], (double)want[at]);
      free_outputs(&c, got);
      free(want);
      for (int i = 0; i < 3; i++)
        free(c.init[i]);
    }
}

Test(ops, gemm_square_sizes) {
  for (int64_t n = 1; n <= 130; n += 43) {
    struct gemm_p p = {.m = n, .n = n, .k = n, .lda = n, .ldb = n, .ldc = n, .batch = 1, .alpha = 1, .beta = 0};
    size_t nn = (size_t)(n * n);
    struct opcase c = {"gemm", gemm_body, &p, 3, {nn, nn, nn}, {rnd(nn, 4, -1, 1), rnd(nn, 5, -1, 1), NULL}};
    void **got = compare_devices(&c, 1u << 2, 1e-4, 1e-4);
    float *want = calloc(nn, 4);
    gemm_ref(&p, c.init[0], c.init[1], want);
    cr_assert_leq(tc_excess(got[2], want, nn, 1e-4, 1e-4, NULL), 1.0, "n = %lld", (long long)n);
    free(want);
    free_outputs(&c, got);
    free(c.init[0]);
    free(c.init[1]);
  }
}

/*
** One OpenCL device's GEMMs under STRATA_OPENCL_GEMM=`mode` against the
** definition: every transpose, shapes that cover kernels/gemm.k's whole
** tiles (8 x 32) and its cut edges (rows, columns, both), batches with
** padded strides and a B shared by every batch item (stride 0), alpha and
** beta; with beta 0 a C full of NaN is not read. Each result repeats bit for
** bit.
*/
static void same_twice(int dev, const struct opcase *c, unsigned outputs, int wg);
static void gemm_mode_cases(const char *mode) {
  setenv("STRATA_OPENCL_GEMM", mode, 1);
  strata_shutdown(); /* the backend reads it when it starts */
  int o0 = tc_find_device("opencl", 0);
  if (o0 < 0) {
    unsetenv("STRATA_OPENCL_GEMM");
    cr_skip_test("no OpenCL device (PoCL)");
  }
  static const int64_t shapes[][3] = {{64, 96, 40}, {37, 70, 19}, {8, 32, 1}, {5, 33, 64}, {70, 31, 9}};
  int cases = 0;
  for (int sh = 0; sh < 5; sh++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (int shared = 0; shared < 2; shared++) {
          struct gemm_p p = {.ta = ta, .tb = tb, .m = shapes[sh][0], .n = shapes[sh][1], .k = shapes[sh][2],
                             .batch = 2, .alpha = 0.75f, .beta = shared ? 0.0f : -0.5f};
          p.lda = (ta ? p.m : p.k) + 3;
          p.ldb = (tb ? p.k : p.n) + (shared ? 0 : 5);
          p.ldc = p.n + 2;
          p.sa = (ta ? p.k : p.m) * p.lda + 7;
          p.sb = shared ? 0 : (tb ? p.n : p.k) * p.ldb + 1;
          p.sc = p.m * p.ldc + 3;
          size_t na = (size_t)(p.sa * p.batch), nb = (size_t)((tb ? p.n : p.k) * p.ldb + p.sb * p.batch),
                 nc = (size_t)(p.sc * p.batch);
          float *c0 = rnd(nc, 13, -1, 1);
          if (p.beta == 0.0f)
            for (size_t i = 0; i < nc; i++)
              c0[i] = NAN; /* beta 0: C is written, never read */
          struct opcase c = {"gemm", gemm_body, &p, 3, {na, nb, nc}, {rnd(na, 11, -1, 1), rnd(nb, 12, -1, 1), c0}};
          float *want = calloc(nc, 4); /* beta 0: the definition reads no C */
          if (p.beta != 0.0f)
            memcpy(want, c0, nc * 4);
          gemm_ref(&p, c.init[0], c.init[1], want);
          void **got = alloc_outputs(&c);
          cr_assert_eq(exec(o0, &c, got), STRATA_OK, "%s: %s", mode, strata_last_error());
          /* inside the matrices the definition; the gaps between them keep their values (NaN stays NaN) */
          for (int64_t t = 0; t < p.batch; t++)
            for (int64_t i = 0; i < p.m; i++)
              for (int64_t j = 0; j < p.n; j++) {
                const size_t at = (size_t)(t * p.sc + i * p.ldc + j);
                const float g = ((float *)got[2])[at], w = want[at];
                cr_assert(fabsf(g - w) <= 1e-5f + 1e-5f * fabsf(w),
                          "STRATA_OPENCL_GEMM=%s, %lldx%lldx%lld ta %d tb %d shared B %d: C[%lld][%lld][%lld] = %.7g, "
                          "want %.7g",
                          mode, (long long)p.m, (long long)p.n, (long long)p.k, ta, tb, shared, (long long)t,
                          (long long)i, (long long)j, (double)g, (double)w);
              }
          same_twice(o0, &c, 4, 0);
          free_outputs(&c, got);
          free(want);
          for (int i = 0; i < 3; i++)
            free(c.init[i]);
          cases++;
        }
  cr_assert_eq(cases, 5 * 8);
}

/* strata's CPU kernels (kernels/gemm.k: what PoCL runs by default), and CLBlast (what GPUs run) forced on PoCL. */
Test(ops, opencl_gemm_kernels_on_cpu_devices) {
  gemm_mode_cases("auto");
  gemm_mode_cases("strata");
  gemm_mode_cases("clblast");
  unsetenv("STRATA_OPENCL_GEMM");
  strata_shutdown();
}

/* STRATA_OPENCL_GEMM other than auto, clblast or strata is refused when the backend starts. */
Test(ops, bad_opencl_gemm_choice_is_an_error) {
  setenv("STRATA_BACKENDS", "opencl", 1);
  setenv("STRATA_OPENCL_GEMM", "cublas", 1);
  strata_shutdown();
  int n;
  cr_assert_eq(strata_device_count(&n), STRATA_ERR_PARSE, "STRATA_OPENCL_GEMM=cublas accepted");
  cr_assert(strstr(strata_last_error(), "STRATA_OPENCL_GEMM"), "%s", strata_last_error());
  unsetenv("STRATA_OPENCL_GEMM");
  unsetenv("STRATA_BACKENDS");
  strata_shutdown();
}

/* A linear layer's backward is two GEMMs: dA = dC B^T, dB = A^T dC. */
static int linear_fwd(strata_queue_t q, strata_mem_t *m, const void *pp) {
  const int64_t *d = pp; /* m, k, n */
  return strata_gemm(q, 0, 0, d[0], d[2], d[1], 1, m[0], d[1], 0, m[1], d[2], 0, 0, m[2], d[2], 0, 1);
}

static int linear_bwd(strata_queue_t q, strata_mem_t *m, const void *pp) {
  const int64_t *d = pp;
  int rc = strata_gemm(q, 0, 1, d[0], d[1], d[2], 1, m[3], d[2], 0, m[1], d[2], 0, 0, m[4], d[1], 0, 1);
  if (!rc)
    rc = strata_gemm(q, 1, 0, d[1], d[2], d[0], 1, m[0], d[1], 0, m[3], d[2], 0, 0, m[5], d[2], 0, 1);
  return rc;
}

Test(ops, gemm_backward_finite_differences) {
  int64_t d[3] = {4, 5, 3};
  size_t na = 20, nb = 15, nc = 12;
  float *a = rnd(na, 7, -1, 1), *b = rnd(nb, 8, -1, 1), *w = rnd(nc, 9, -1, 1);
  struct opcase f = {"linear_fwd", linear_fwd, d, 4, {na, nb, nc, nc}, {a, b, NULL, w}};
  struct opcase g = {"linear_bwd", linear_bwd, d, 6, {na, nb, nc, nc, na, nb}, {a, b, NULL, w, NULL, NULL}};
  check_fd(&f, &g, 0, 4, 2, 3, 1e-2, 1e-3, 1e-2, 100);
  check_fd(&f, &g, 1, 5, 2, 3, 1e-2, 1e-3, 1e-2, 100);
  free(a);
  free(b);
  free(w);
}

/* ---- bias ---- */

static int bias_add_body(strata_queue_t q, strata_mem_t *m, const void *pp) {
  const int64_t *d = pp;
  return strata_bias_add(q, m[0], m[1], d[0], d[1]);
}

static int bias_grad_body(strata_queue_t q, strata_mem_t *m, const void *pp) {
  const int64_t *d = pp;
  return strata_bias_grad(q, m[0], m[1], d[0], d[1], (int)d[2]);
}

Test(ops, bias_add_and_grad) {
  int64_t d[3] = {3, 4, 0};
  float y[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, b[4] = {1, -1, 0.5f, 2};
  struct opcase c = {"bias_add", bias_add_body, d, 2, {12, 4}, {y, b}};
  void **got = compare_devices(&c, 1, 0, 0);
  for (int i = 0; i < 12; i++)
    cr_assert_eq(((float *)got[0])[i], y[i] + b[i % 4]);
  free_outputs(&c, got);
  /* gradient: column sums, overwritten then accumulated */
  for (d[2] = 0; d[2] < 2; d[2]++) {
    struct opcase g = {"bias_grad", bias_grad_body, d, 2, {12, 4}, {y, b}};
    got = compare_devices(&g, 2, 1e-6, 1e-6);
    for (int j = 0; j < 4; j++)
      cr_assert_eq(((float *)got[1])[j], (d[2] ? b[j] : 0) + y[j] + y[j + 4] + y[j + 8], "col %d acc %lld", j,
                   (long long)d[2]);
    free_outputs(&g, got);
  }
}

/* dL/dbias for L = sum w * (y + bias) is sum_r w[r] — bias_grad of w. */
static int biasfd_fwd(strata_queue_t q, strata_mem_t *m, const void *pp) {
  const int64_t *d = pp;
  int rc = strata_fill(q, m[2], 0, d[0] * d[1]);
  if (!rc)
    rc = strata_add(q, m[2], m[0], m[2], d[0] * d[1]);
  if (!rc)
    rc = strata_bias_add(q, m[2], m[1], d[0], d[1]);
  return rc;
}

static int biasfd_bwd(strata_queue_t q, strata_mem_t *m, const void *pp) {
  const int64_t *d = pp;
  return strata_bias_grad(q, m[3], m[4], d[0], d[1], 0);
}

Test(ops, bias_backward_finite_differences) {
  int64_t d[2] = {5, 3};
  float *x = rnd(15, 11, -1, 1), *b = rnd(3, 12, -1, 1), *w = rnd(15, 13, -1, 1);
  struct opcase f = {"bias_fwd", biasfd_fwd, d, 4, {15, 3, 15, 15}, {x, b, NULL, w}};
  struct opcase g = {"bias_bwd", biasfd_bwd, d, 5, {15, 3, 15, 15, 3}, {x, b, NULL, w, NULL}};
  check_fd(&f, &g, 1, 4, 2, 3, 1e-2, 1e-3, 1e-2, 100);
  free(x);
  free(b);
  free(w);
}

/* ---- elementwise ---- */

static int gelu_f(strata_queue_t q, strata_mem_t *m, const void *pp) {
  return strata_gelu_fwd(q, m[0], m[1], *(const int64_t *)pp);
}
static int gelu_b(strata_queue_t q, strata_mem_t *m, const void *pp) {
  return strata_gelu_bwd(q, m[0], m[2], m[3], *(const int64_t *)pp);
}
static int relu_f(strata_queue_t q, strata_mem_t *m, const void *pp) {
  return strata_relu_fwd(q, m[0], m[1], *(const int64_t *)pp);
}
static int relu_b(strata_queue_t q, strata_mem_t *m, const void *pp) {
  return strata_relu_bwd(q, m[0], m[2], m[3], *(const int64_t *)pp);
}

Test(ops, gelu_values_devices_and_gradient) {
  int64_t n = 1001;
  float *x = rnd((size_t)n, 21, -4, 4), *w = rnd((size_t)n, 22, -1, 1);
  x[0] = 0;
  x[1] = 1;
  x[2] = -1;
  struct opcase f = {"gelu_fwd", gelu_f, &n, 3, {1001, 1001, 1001}, {x, NULL, w}};
  void **got = compare_devices(&f, 2, 1e-6, 1e-5);
  float *y = got[1];
  /* GELU(0) = 0; tanh-approximation values at +-1 (hand-computed) */
  cr_assert_eq(y[0], 0.0f);
  cr_assert_float_eq(y[1], 0.841192f, 1e-5);
  cr_assert_float_eq(y[2], -0.158808f, 1e-5);
  free_outputs(&f, got);
  struct opcase b = {"gelu_bwd", gelu_b, &n, 4, {1001, 1001, 1001, 1001}, {x, NULL, w, NULL}};
  /* near |x| = 4 the derivative amplifies tanh's last-ulp differences about
  ** tenfold (devices' tanh is good to ~2 ulp): 4e-6 absolute */
  got = compare_devices(&b, 8, 4e-6, 1e-5);
  free_outputs(&b, got);
  check_fd(&f, &b, 0, 3, 1, 2, 1e-2, 1e-3, 1e-2, 60);
  free(x);
  free(w);
}

Test(ops, relu_values_devices_and_gradient) {
  int64_t n = 777;
  float *x = rnd((size_t)n, 23, -2, 2), *w = rnd((size_t)n, 24, -1, 1);
  for (int64_t i = 0; i < n; i++) /* keep clear of the kink for finite differences */
    if (fabsf(x[i]) < 0.05f)
      x[i] = 0.5f;
  struct opcase f = {"relu_fwd", relu_f, &n, 3, {777, 777, 777}, {x, NULL, w}};
  void **got = compare_devices(&f, 2, 0, 0);
  for (int64_t i = 0; i < n; i++)
    cr_assert_eq(((float *)got[1])[i], x[i] > 0 ? x[i] : 0.0f);
  free_outputs(&f, got);
  struct opcase b = {"relu_bwd", relu_b, &n, 4, {777, 777, 777, 777}, {x, NULL, w, NULL}};
  got = compare_devices(&b, 8, 0, 0);
  free_outputs(&b, got);
  check_fd(&f, &b, 0, 3, 1, 2, 1e-2, 1e-3, 1e-2, 60);
  free(x);
  free(w);
}

static int add_body(strata_queue_t q, strata_mem_t *m, const void *pp) {
  int64_t n = *(const int64_t *)pp;
  int rc = strata_add(q, m[0], m[1], m[2], n);
  if (!rc)
    rc = strata_scale(q, m[2], -0.5f, n);
  if (!rc)
    rc = strata_fill(q, m[3], 3.25f, n);
  if (!rc)
    rc = strata_add(q, m[0], m[3], m[0], n); /* in place */
  return rc;
}

Test(ops, add_scale_fill) {
  int64_t n = 513;
  float *a = rnd(513, 31, -1, 1), *b = rnd(513, 32, -1, 1);
  struct opcase c = {"add/scale/fill", add_body, &n, 4, {513, 513, 513, 513}, {a, b, NULL, NULL}};
  void **got = compare_devices(&c, 0xf, 0, 0);
  for (int i = 0; i < 513; i++) {
    cr_assert_eq(((float *)got[2])[i], (a[i] + b[i]) * -0.5f);
    cr_assert_eq(((float *)got[3])[i], 3.25f);
    cr_assert_eq(((float *)got[0])[i], a[i] + 3.25f);
  }
  free_outputs(&c, got);
  free(a);
  free(b);
}

/*
** A fill past the host's streaming size (its +0 fill is memset over the
** threads' shares) at an odd offset and length in a buffer of NaNs: every
** element inside is the value's bits (+0, and -0, which is no memset), and
** the NaNs before and after it are left as they were.
*/
Test(ops, large_fill_writes_its_range_only) {
  int dev = ref_device();
  strata_queue_t q;
  OK(strata_queue_new(dev, &q));
  enum { LEAD = 37, N = 3 * (1 << 18) + 5 };
  const size_t total = (size_t)N + 2 * LEAD;
  float *h = malloc(total * 4);
  const float values[3] = {0.0f, -0.0f, 1.5f};
  for (int v = 0; v < 3; v++) {
    for (size_t i = 0; i < total; i++)
      h[i] = NAN;
    strata_buffer_t b;
    OK(strata_buffer_new(dev, total * 4, &b));
    OK(strata_buffer_upload(q, b, 0, h, total * 4));
    OK(strata_fill(q, strata_mem(b, LEAD), values[v], N));
    OK(strata_buffer_download(q, b, 0, h, total * 4));
    for (size_t i = 0; i < total; i++) {
      if (i < LEAD || i >= LEAD + (size_t)N)
        cr_assert(isnan(h[i]), "fill %g: element %zu outside the range was overwritten (%a)", (double)values[v], i,
                  (double)h[i]);
      else
        cr_assert(memcmp(&h[i], &values[v], 4) == 0, "fill %g: element %zu is %a", (double)values[v], i,
                  (double)h[i]);
    }
    strata_buffer_free(b);
  }
  free(h);
  strata_queue_free(q);
}

/* ---- layernorm ---- */

static int ln_f(strata_queue_t q, strata_mem_t *m, const void *pp) {
  const int64_t *d = pp;
  return strata_layernorm_fwd(q, m[0], m[1], m[2], m[3], m[4], m[5], d[0], d[1], 1e-5f);
}

static int ln_b(strata_queue_t q, strata_mem_t *m, const void *pp) {
  const int64_t *d = pp;
  int rc = ln_f(q, m, pp);
  if (!rc)
    rc = strata_layernorm_bwd(q, m[0], m[1], m[4], m[5], m[6], m[7], m[1 + 7], m[2 + 7], d[0], d[1], 0);
  return rc;
}

Test(ops, layernorm_values_devices_and_gradients) {
  int64_t d[2] = {6, 10};
  size_t n = 60;
  float *x = rnd(n, 41, -2, 2), *g = rnd(10, 42, 0.5f, 1.5f), *b = rnd(10, 43, -0.5f, 0.5f), *w = rnd(n, 44, -1, 1);
  struct opcase f = {"layernorm_fwd", ln_f, d, 7, {n, 10, 10, n, 6, 6, n}, {x, g, b, NULL, NULL, NULL, w}};
  void **got = compare_devices(&f, 0x38, 1e-5, 1e-4);
  /* each row of (y - beta) / gamma has mean 0 and variance 1 - eps-ish */
  for (int r = 0; r < 6; r++) {
    double s = 0, s2 = 0;
    for (int c = 0; c < 10; c++) {
      double z = (((float *)got[3])[r * 10 + c] - b[c]) / g[c];
      s += z;
      s2 += z * z;
    }
    cr_assert_float_eq(s / 10, 0.0, 1e-5);
    cr_assert_float_eq(s2 / 10, 1.0, 1e-3);
  }
  free_outputs(&f, got);
  /* operands: x g b y mean rstd dy dx dgamma dbeta */
  struct opcase bw = {"layernorm_bwd", ln_b, d, 10, {n, 10, 10, n, 6, 6, n, n, 10, 10},
                      {x, g, b, NULL, NULL, NULL, w, NULL, NULL, NULL}};
  got = compare_devices(&bw, 0x380, 1e-5, 1e-4);
  free_outputs(&bw, got);
  check_fd(&f, &bw, 0, 7, 3, 6, 1e-2, 2e-3, 2e-2, 60);
  check_fd(&f, &bw, 1, 8, 3, 6, 1e-2, 2e-3, 2e-2, 10);
  check_fd(&f, &bw, 2, 9, 3, 6, 1e-2, 2e-3, 2e-2, 10);
  free(x);
  free(g);
  free(b);
  free(w);
}

/* ---- softmax ---- */

struct sm_p {
  int64_t rows, cols;
  float scale;
  int causal;
};

static int sm_f(strata_queue_t q, strata_mem_t *m, const void *pp) {
  const struct sm_p *p = pp;
  return strata_softmax_fwd(q, m[0], m[1], p->rows, p->cols, p->scale, p->causal);
}

static int sm_b(strata_queue_t q, strata_mem_t *m, const void *pp) {
  const struct sm_p *p = pp;
  int rc = sm_f(q, m, pp);
  if (!rc)
    rc = strata_softmax_bwd(q, m[1], m[2], m[3], p->rows, p->cols, p->scale);
  return rc;
}

Test(ops, softmax_causal_values_devices_and_gradient) {
  for (int causal = 0; causal < 2; causal++) {
    struct sm_p p = {.rows = 12, .cols = 6, .scale = 0.7f, .causal = causal};
    size_t n = 72;
    float *x = rnd(n, 51, -3, 3), *w = rnd(n, 52, -1, 1);
    struct opcase f = {"softmax_fwd", sm_f, &p, 3, {n, n, n}, {x, NULL, w}};
    void **got = compare_devices(&f, 2, 1e-6, 1e-5);
    float *y = got[1];
    for (int r = 0; r < 12; r++) {
      double s = 0;
      for (int c = 0; c < 6; c++) {
        if (causal && c > r % 6)
          cr_assert_eq(y[r * 6 + c], 0.0f, "masked entry (%d,%d) not zero", r, c);
        s += y[r * 6 + c];
      }
      cr_assert_float_eq(s, 1.0, 1e-5, "row %d sums to %g", r, s);
    }
    /* row 0 of a causal stack sees only itself */
    if (causal)
      cr_assert_eq(y[0], 1.0f);
    free_outputs(&f, got);
    struct opcase b = {"softmax_bwd", sm_b, &p, 4, {n, n, n, n}, {x, NULL, w, NULL}};
    got = compare_devices(&b, 8, 1e-6, 1e-4);
    free_outputs(&b, got);
    check_fd(&f, &b, 0, 3, 1, 2, 1e-2, 1e-3, 1e-2, 72);
    free(x);
    free(w);
  }
}

/* ---- fused attention ---- */

struct at_p {
  int64_t B, T, H, hd;
  float scale;
  int causal;
};
/* operands: 0 qkv, 1 out, 2 lse, 3 w (= dout), 4 dqkv, then the composition's 5 S, 6 P, 7 dP, 8 dS */

static int at_fused_f(strata_queue_t q, strata_mem_t *m, const void *pp) {
  const struct at_p *p = pp;
  return strata_attention_fwd(q, m[0], m[1], m[2], p->B, p->T, p->H, p->hd, p->scale, p->causal);
}

static int at_fused_b(strata_queue_t q, strata_mem_t *m, const void *pp) {
  const struct at_p *p = pp;
  int rc = at_fused_f(q, m, pp);
  return rc ? rc : strata_attention_bwd(q, m[0], m[1], m[3], m[2], m[4], p->B, p->T, p->H, p->hd, p->scale, p->causal);
}

#define AT_OFF(m, k) strata_mem((m).buf, (m).off + (size_t)(k))

/* The GPT block's attention as it is composed of the unfused ops (lib/model/stage.c). */
static int at_ref_f(strata_queue_t q, strata_mem_t *m, const void *pp) {
  const struct at_p *p = pp;
  int64_t T = p->T, H = p->H, hd = p->hd, D = H * hd, HTT = H * T * T;
  int rc = 0;
  for (int64_t b = 0; b < p->B && !rc; b++)
    rc = strata_gemm(q, 0, 1, T, T, hd, 1, AT_OFF(m[0], b * T * 3 * D), 3 * D, hd, AT_OFF(m[0], b * T * 3 * D + D),
                     3 * D, hd, 0, AT_OFF(m[5], b * HTT), T, T * T, H);
  if (!rc)
    rc = strata_softmax_fwd(q, m[5], m[6], p->B * H * T, T, p->scale, p->causal);
  for (int64_t b = 0; b < p->B && !rc; b++)
    rc = strata_gemm(q, 0, 0, T, hd, T, 1, AT_OFF(m[6], b * HTT), T, T * T, AT_OFF(m[0], b * T * 3 * D + 2 * D), 3 * D,
                     hd, 0, AT_OFF(m[1], b * T * D), D, hd, H);
  return rc;
}

static int at_ref_b(strata_queue_t q, strata_mem_t *m, const void *pp) {
  const struct at_p *p = pp;
  int64_t T = p->T, H = p->H, hd = p->hd, D = H * hd, HTT = H * T * T;
  int rc = at_ref_f(q, m, pp);
  for (int64_t b = 0; b < p->B && !rc; b++) {
    rc = strata_gemm(q, 0, 1, T, T, hd, 1, AT_OFF(m[3], b * T * D), D, hd, AT_OFF(m[0], b * T * 3 * D + 2 * D), 3 * D,
                     hd, 0, AT_OFF(m[7], b * HTT), T, T * T, H);
    if (!rc)
      rc = strata_gemm(q, 1, 0, T, hd, T, 1, AT_OFF(m[6], b * HTT), T, T * T, AT_OFF(m[3], b * T * D), D, hd, 0,
                       AT_OFF(m[4], b * T * 3 * D + 2 * D), 3 * D, hd, H);
  }
  if (!rc)
    rc = strata_softmax_bwd(q, m[6], m[7], m[8], p->B * H * T, T, p->scale);
  for (int64_t b = 0; b < p->B && !rc; b++) {
    rc = strata_gemm(q, 0, 0, T, hd, T, 1, AT_OFF(m[8], b * HTT), T, T * T, AT_OFF(m[0], b * T * 3 * D + D), 3 * D, hd,
                     0, AT_OFF(m[4], b * T * 3 * D), 3 * D, hd, H);
    if (!rc)
      rc = strata_gemm(q, 1, 0, T, hd, T, 1, AT_OFF(m[8], b * HTT), T, T * T, AT_OFF(m[0], b * T * 3 * D), 3 * D, hd, 0,
                       AT_OFF(m[4], b * T * 3 * D + D), 3 * D, hd, H);
  }
  return rc;
}

/* Fused against composed, on the host, for every output; lse against a double-precision loop. */
static void attention_case(const struct at_p *p, uint32_t seed, size_t fd_limit) {
  int dev = ref_device();
  size_t rows = (size_t)(p->B * p->T), D = (size_t)(p->H * p->hd), tt = (size_t)(p->B * p->H * p->T * p->T);
  float *qkv = rnd(rows * 3 * D, seed, -1.5f, 1.5f), *w = rnd(rows * D, seed + 1, -1, 1);
  struct opcase c = {"attention", at_fused_b, p, 9,
                     {rows * 3 * D, rows * D, (size_t)(p->B * p->H * p->T), rows * D, rows * 3 * D, tt, tt, tt, tt},
                     {qkv, NULL, NULL, w, NULL, NULL, NULL, NULL, NULL}};
  struct opcase r = c;
  r.name = "attention (composed)";
  r.body = at_ref_b;
  void **got = alloc_outputs(&c), **want = alloc_outputs(&r);
  OK(exec(dev, &c, got));
  OK(exec(dev, &r, want));
  for (int i = 1; i <= 4; i += 3) { /* out, dqkv */
    size_t at = 0;
    double e = tc_excess(got[i], want[i], c.count[i], 1e-5, 1e-4, &at);
    cr_assert_leq(e, 1.0, "attention (B %lld T %lld H %lld hd %lld causal %d) operand %d element %zu: fused %.7g, composed %.7g",
                  (long long)p->B, (long long)p->T, (long long)p->H, (long long)p->hd, p->causal, i, at,
                  (double)((float *)got[i])[at], (double)((float *)want[i])[at]);
  }
  const float *lse = got[2];
  for (int64_t b = 0; b < p->B; b++)
    for (int64_t h = 0; h < p->H; h++)
      for (int64_t i = 0; i < p->T; i++) {
        double mx = -1e300, s = 0, sc[64];
        int64_t n = p->causal ? i + 1 : p->T;
        for (int64_t j = 0; j < n; j++) {
          double dot = 0;
          for (int64_t d = 0; d < p->hd; d++)
            dot += (double)qkv[(b * p->T + i) * 3 * D + h * p->hd + d] * qkv[(b * p->T + j) * 3 * D + D + h * p->hd + d];
          sc[j] = p->scale * dot;
          mx = sc[j] > mx ? sc[j] : mx;
        }
        for (int64_t j = 0; j < n; j++)
          s += exp(sc[j] - mx);
        double want_lse = mx + log(s);
        cr_assert_float_eq(lse[(b * p->H + h) * p->T + i], want_lse, 1e-5 * (1 + fabs(want_lse)), "lse (%lld,%lld,%lld)",
                           (long long)b, (long long)h, (long long)i);
      }
  free_outputs(&c, got);
  free_outputs(&r, want);
  /* finite differences of L = sum w . out over every element of qkv */
  struct opcase f = c;
  f.body = at_fused_f;
  check_fd(&f, &c, 0, 4, 1, 3, 1e-2, 1e-3, 1e-2, fd_limit);
  free(qkv);
  free(w);
}

Test(ops, attention_fused_against_composed_and_finite_differences) {
  for (int causal = 0; causal < 2; causal++) {
    struct at_p small = {.B = 2, .T = 7, .H = 3, .hd = 5, .scale = 0.4472136f, .causal = causal};
    attention_case(&small, 61 + (uint32_t)causal, 5 * 45); /* q, k and v of five queries */
  }
  /* one query (T = 1), and head_dim a multiple of the vector width with more keys */
  struct at_p one = {.B = 1, .T = 1, .H = 2, .hd = 4, .scale = 0.5f, .causal = 1};
  attention_case(&one, 71, SIZE_MAX);
  struct at_p wide = {.B = 1, .T = 33, .H = 2, .hd = 16, .scale = 0.25f, .causal = 1};
  attention_case(&wide, 72, 200); /* q, k and v of the first rows */
}

/* out, lse and dqkv of the fused attention in double, straight from the definition: P = softmax(scale q k^T) (causal
** mask), out = P v, dS = P (dO v^T - rowsum(dO o out)), dq = scale dS k, dk = scale dS^T q, dv = P^T dO. */
static void attention_f64(const struct at_p *p, const float *qkv, const float *dout, double *out, double *lse,
                          double *dqkv) {
  int64_t T = p->T, H = p->H, hd = p->hd, D = H * hd, ld = 3 * D;
  double *P = malloc((size_t)(T * T) * sizeof *P), *dS = malloc((size_t)(T * T) * sizeof *dS);
  memset(dqkv, 0, (size_t)(p->B * T * ld) * sizeof *dqkv);
  for (int64_t b = 0; b < p->B; b++)
    for (int64_t h = 0; h < H; h++) {
      const float *q = qkv + b * T * ld + h * hd, *k = q + D, *v = q + 2 * D;
      const float *dO = dout + b * T * D + h * hd;
      double *dq = dqkv + b * T * ld + h * hd, *dk = dq + D, *dv = dq + 2 * D;
      for (int64_t i = 0; i < T; i++) {
        int64_t n = p->causal ? i + 1 : T;
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < T; j++) {
          double s = 0;
          for (int64_t d = 0; d < hd; d++)
            s += (double)q[i * ld + d] * k[j * ld + d];
          P[i * T + j] = p->scale * s;
          if (j < n)
            mx = fmax(mx, P[i * T + j]);
        }
        for (int64_t j = 0; j < T; j++)
          sum += j < n ? exp(P[i * T + j] - mx) : 0;
        for (int64_t j = 0; j < T; j++)
          P[i * T + j] = j < n ? exp(P[i * T + j] - mx) / sum : 0;
        lse[(b * H + h) * T + i] = mx + log(sum);
        double rs = 0;
        for (int64_t d = 0; d < hd; d++) {
          double o = 0;
          for (int64_t j = 0; j < T; j++)
            o += P[i * T + j] * v[j * ld + d];
          out[(b * T + i) * D + h * hd + d] = o;
          rs += o * dO[i * D + d];
        }
        for (int64_t j = 0; j < T; j++) {
          double dp = 0;
          for (int64_t d = 0; d < hd; d++)
            dp += (double)dO[i * D + d] * v[j * ld + d];
          dS[i * T + j] = P[i * T + j] * (dp - rs);
        }
      }
      for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < T; j++)
          for (int64_t d = 0; d < hd; d++) {
            dq[i * ld + d] += p->scale * dS[i * T + j] * k[j * ld + d];
            dk[j * ld + d] += p->scale * dS[i * T + j] * q[i * ld + d];
            dv[j * ld + d] += P[i * T + j] * dO[i * D + d];
          }
    }
  free(P);
  free(dS);
}

/* Operand i of a device's result against the double reference: |got - want| <= atol + rtol |want|. */
static void near_f64(const char *what, const struct at_p *p, int dev, const float *got, const double *want, size_t n,
                     double atol, double rtol) {
  for (size_t i = 0; i < n; i++)
    cr_assert(fabs(got[i] - want[i]) <= atol + rtol * fabs(want[i]),
              "attention (B %lld T %lld H %lld hd %lld causal %d) on device %d: %s[%zu] is %.8g, float64 says %.8g",
              (long long)p->B, (long long)p->T, (long long)p->H, (long long)p->hd, p->causal, dev, what, i,
              (double)got[i], want[i]);
}

/*
** The fused attention (kernels/attention.k on OpenCL, the host's own) on
** every device against float64 (out, lse, dqkv) and the host within the
** same bounds, bit for bit from run to run; shapes with one query, with
** more queries and keys than a tile (32) and a work-group, head_dim over
** one chunk of columns (64), causal or not. On PoCL with work-groups of 1,
** 32, 64 and 256 the results are the same bits whatever the size (each
** output is summed by one item in a fixed order).
*/
Test(ops, attention_fused_on_every_device_against_float64) {
  static const struct at_p shapes[] = {
      {.B = 2, .T = 7, .H = 3, .hd = 5, .scale = 0.4472136f, .causal = 1},
      {.B = 2, .T = 7, .H = 3, .hd = 5, .scale = 0.4472136f, .causal = 0},
      {.B = 1, .T = 1, .H = 2, .hd = 4, .scale = 0.5f, .causal = 1},
      {.B = 1, .T = 70, .H = 2, .hd = 80, .scale = 0.1118034f, .causal = 1},
      {.B = 2, .T = 45, .H = 1, .hd = 64, .scale = 0.125f, .causal = 0},
  };
  static const int sizes[] = {1, 32, 64, 256};
  const int nshapes = sizeof shapes / sizeof shapes[0];
  void **first[sizeof shapes / sizeof shapes[0]] = {0};
  for (int k = 0; k < 4; k++) {
    char v[8];
    snprintf(v, sizeof v, "%d", sizes[k]);
    setenv("STRATA_KERNEL_WORKGROUP", v, 1);
    strata_shutdown(); /* the backends read it when they start */
    int ocl = tc_find_device("opencl", 0), n;
    OK(strata_device_count(&n));
    for (int sh = 0; sh < nshapes; sh++) {
      const struct at_p *p = &shapes[sh];
      size_t rows = (size_t)(p->B * p->T), D = (size_t)(p->H * p->hd), nl = (size_t)(p->B * p->H * p->T);
      float *qkv = rnd(rows * 3 * D, 81 + (uint32_t)sh, -1.5f, 1.5f), *w = rnd(rows * D, 91 + (uint32_t)sh, -1, 1);
      double *out = malloc(rows * D * sizeof *out), *lse = malloc(nl * sizeof *lse),
             *dqkv = malloc(rows * 3 * D * sizeof *dqkv);
      attention_f64(p, qkv, w, out, lse, dqkv);
      struct opcase c = {"attention", at_fused_b, p, 5, {rows * 3 * D, rows * D, nl, rows * D, rows * 3 * D},
                         {qkv, NULL, NULL, w, NULL}};
      for (int d = 0; d < n; d++) {
        struct strata_device_props props;
        OK(strata_device_props(d, &props));
        if (k > 0 && d != ocl) /* the work-group size is OpenCL's */
          continue;
        void **got = alloc_outputs(&c);
        cr_assert_eq(exec(d, &c, got), STRATA_OK, "attention on device %d (%s): %s", d, props.backend,
                     strata_last_error());
        near_f64("out", p, d, got[1], out, rows * D, 2e-6, 1e-4);
        near_f64("lse", p, d, got[2], lse, nl, 1e-5, 1e-5);
        near_f64("dqkv", p, d, got[4], dqkv, rows * 3 * D, 1e-5, 1e-4);
        same_twice(d, &c, 0x16, sizes[k]);
        if (d == ocl) {
          if (!first[sh])
            first[sh] = got, got = NULL;
          else
            for (int i = 1; i <= 4; i += (i == 2 ? 2 : 1))
              cr_assert(memcmp(got[i], first[sh][i], c.count[i] * 4) == 0,
                        "attention shape %d: operand %d with work-groups of %d differs from work-groups of 1", sh, i,
                        sizes[k]);
        }
        if (got)
          free_outputs(&c, got);
      }
      free(qkv);
      free(w);
      free(out);
      free(lse);
      free(dqkv);
    }
  }
  unsetenv("STRATA_KERNEL_WORKGROUP");
  strata_shutdown();
  for (int sh = 0; sh < nshapes; sh++)
    if (first[sh]) {
      struct opcase c = {"attention", at_fused_b, &shapes[sh], 5, {0}, {0}};
      free_outputs(&c, first[sh]);
    }
}

Test(ops, attention_everywhere_and_bad_shapes_refused) {
  int n;
  OK(strata_device_count(&n));
  for (int d = 0; d < n; d++) {
    struct strata_device_props p;
    OK(strata_device_props(d, &p));
    strata_queue_t q;
    strata_buffer_t b;
    OK(strata_queue_new(d, &q));
    OK(strata_buffer_new(d, 4096, &b));
    strata_mem_t m = strata_mem(b, 0), m2 = strata_mem(b, 512);
    cr_assert_eq(strata_attention_supported(q), 1, "device %d (%s)", d, p.backend);
    int rc = strata_attention_fwd(q, m, m2, strata_mem(b, 800), 1, 4, 2, 4, 0.5f, 1);
    cr_assert_eq(rc, STRATA_OK, "device %d (%s): %s", d, p.backend, strata_err_name(rc));
    cr_assert_eq(strata_attention_fwd(q, m, m2, m2, 1, 4, 2, 0, 0.5f, 1), STRATA_ERR_SHAPE);
    cr_assert_eq(strata_attention_bwd(q, m, m2, m2, m2, m, 1, 4, 2, 4, 0.5f, 1), STRATA_ERR_INVALID);
    cr_assert_eq(strata_attention_fwd(q, m, m2, m2, 1, 1000, 2, 4, 0.5f, 1), STRATA_ERR_RANGE);
    OK(strata_queue_finish(q));
    strata_buffer_free(b);
    strata_queue_free(q);
  }
  cr_assert_eq(strata_attention_supported(NULL), 0);
}

/* ---- embedding ---- */

static int emb_f(strata_queue_t q, strata_mem_t *m, const void *pp) {
  const int64_t *d = pp; /* n dim vocab */
  return strata_embedding_fwd(q, m[0], m[1], m[2], d[0], d[1], d[2]);
}

static int emb_b(strata_queue_t q, strata_mem_t *m, const void *pp) {
  const int64_t *d = pp;
  return strata_embedding_bwd(q, m[0], m[3], m[4], d[0], d[1], d[2], (int)d[3]);
}

Test(ops, embedding_values_devices_and_gradient) {
  int64_t d[4] = {9, 4, 5, 0};
  int32_t tok[9] = {0, 3, 3, 4, 1, 3, -1, 5, 2}; /* -1 and 5 are out of range */
  float *table = rnd(20, 61, -1, 1), *w = rnd(36, 62, -1, 1), *dt0 = rnd(20, 63, -1, 1);
  struct opcase f = {"embedding_fwd", emb_f, d, 4, {9, 20, 36, 36}, {tok, table, NULL, w}};
  void **got = compare_devices(&f, 4, 0, 0);
  for (int i = 0; i < 9; i++)
    for (int k = 0; k < 4; k++)
      cr_assert_eq(((float *)got[2])[i * 4 + k], tok[i] >= 0 && tok[i] < 5 ? table[tok[i] * 4 + k] : 0.0f);
  free_outputs(&f, got);
  for (d[3] = 0; d[3] < 2; d[3]++) {
    struct opcase b = {"embedding_bwd", emb_b, d, 5, {9, 20, 36, 36, 20}, {tok, table, NULL, w, dt0}};
    got = compare_devices(&b, 16, 1e-6, 1e-6);
    float *dt = got[4];
    for (int v = 0; v < 5; v++)
      for (int k = 0; k < 4; k++) {
        float s = d[3] ? dt0[v * 4 + k] : 0.0f;
        for (int i = 0; i < 9; i++)
          if (tok[i] == v)
            s += w[i * 4 + k];
        cr_assert_float_eq(dt[v * 4 + k], s, 1e-6, "dtable[%d][%d] accumulate=%lld", v, k, (long long)d[3]);
      }
    free_outputs(&b, got);
  }
  d[3] = 0;
  struct opcase b = {"embedding_bwd", emb_b, d, 5, {9, 20, 36, 36, 20}, {tok, table, NULL, w, NULL}};
  check_fd(&f, &b, 1, 4, 2, 3, 1e-2, 1e-3, 1e-2, 20);
  free(table);
  free(w);
  free(dt0);
}

/* ---- cross-entropy ---- */

static int xe_f(strata_queue_t q, strata_mem_t *m, const void *pp) {
  const int64_t *d = pp;
  return strata_cross_entropy_fwd(q, m[0], m[1], m[2], d[0], d[1]);
}

static int xe_b(strata_queue_t q, strata_mem_t *m, const void *pp) {
  const int64_t *d = pp;
  return strata_cross_entropy_bwd(q, m[0], m[1], m[4], d[0], d[1], 1.0f / (float)d[0]);
}

Test(ops, cross_entropy_values_devices_and_gradient) {
  int64_t d[2] = {5, 7};
  int32_t tgt[5] = {0, 6, 3, -1, 2};
  float *logits = rnd(35, 71, -3, 3), w[5];
  for (int i = 0; i < 5; i++)
    w[i] = 1.0f / 5;
  logits[7 * 2 + 3] = 50; /* a confident right answer, and large logits stay finite */
  struct opcase f = {"cross_entropy_fwd", xe_f, d, 4, {35, 5, 5, 5}, {logits, tgt, NULL, w}};
  void **got = compare_devices(&f, 4, 1e-6, 1e-5);
  float *loss = got[2];
  for (int r = 0; r < 5; r++) {
    if (tgt[r] < 0) {
      cr_assert_eq(loss[r], 0.0f);
      continue;
    }
    double s = 0;
    for (int c = 0; c < 7; c++)
      s += exp((double)logits[r * 7 + c]);
    cr_assert_float_eq(loss[r], log(s) - logits[r * 7 + tgt[r]], 1e-4, "row %d", r);
  }
  cr_assert_lt(loss[2], 1e-6);
  free_outputs(&f, got);
  struct opcase b = {"cross_entropy_bwd", xe_b, d, 5, {35, 5, 5, 5, 35}, {logits, tgt, NULL, w, NULL}};
  got = compare_devices(&b, 16, 1e-6, 1e-5);
  for (int c = 0; c < 7; c++)
    cr_assert_eq(((float *)got[4])[3 * 7 + c], 0.0f, "ignored row has gradient");
  free_outputs(&b, got);
  logits[7 * 2 + 3] = 2;
  check_fd(&f, &b, 0, 4, 2, 3, 1e-2, 1e-4, 1e-2, 35);
  free(logits);
}

/* ---- vocabulary-parallel cross-entropy ---- */

/* A device buffer of n 4-byte elements, the operand PAD elements into it. */
struct dbuf {
  strata_buffer_t b;
  strata_mem_t m;
};

/* The SENTINEL margins around it are checked when it is read back (dget). */
static struct dbuf dput(int dev, strata_queue_t q, const void *data, size_t n) {
  struct dbuf d;
  float *host = malloc((n + PAD + GUARD) * 4);
  cr_assert(host);
  for (size_t j = 0; j < n + PAD + GUARD; j++)
    host[j] = SENTINEL;
  if (data)
    memcpy(host + PAD, data, n * 4);
  else
    memset(host + PAD, 0, n * 4);
  OK(strata_buffer_new(dev, (n + PAD + GUARD) * 4, &d.b));
  OK(strata_buffer_upload(q, d.b, 0, host, (n + PAD + GUARD) * 4));
  free(host);
  d.m = strata_mem(d.b, PAD);
  return d;
}

/* Read n elements of d into out (NULL: only check) after the queue's work,
** fail if anything wrote into its margins, and free d. */
static void dget(strata_queue_t q, struct dbuf d, void *out, size_t n) {
  float *host = malloc((n + PAD + GUARD) * 4);
  cr_assert(host);
  OK(strata_buffer_download(q, d.b, 0, host, (n + PAD + GUARD) * 4));
  for (size_t j = 0; j < PAD; j++)
    cr_assert_eq(host[j], SENTINEL, "an op wrote before its operand");
  for (size_t j = 0; j < GUARD; j++)
    cr_assert_eq(host[PAD + n + j], SENTINEL, "an op wrote past its operand");
  if (out)
    memcpy(out, host + PAD, n * 4);
  free(host);
  strata_buffer_free(d.b);
}

struct vp_case {
  int64_t rows, vocab;
  const float *logits;   /* rows x vocab */
  const int32_t *tgt;    /* rows */
  float scale;
};

/*
** The vocabulary-parallel loss and gradient on device `dev` with the
** vocabulary cut at cuts[0] = 0 < cuts[1] < ... < cuts[nslices] = vocab: each
** slice's logits uploaded on their own, the all-reduces done here in slice
** order (fmaxf, then float sums), as the caller of the ops would. loss
** (rows) and dl (rows x vocab, the slices' dlogits side by side) are written.
*/
static void vp_run(int dev, const struct vp_case *c, const int64_t *cuts, int nslices, float *loss, float *dl) {
  int64_t R = c->rows, V = c->vocab;
  strata_queue_t q;
  OK(strata_queue_new(dev, &q));
  float *gmax = malloc((size_t)R * 4), *se = calloc((size_t)R, 4), *tl = calloc((size_t)R, 4);
  float *part = malloc((size_t)R * 4), *part2 = malloc((size_t)R * 4), *sl = malloc((size_t)(R * V) * 4);
  struct dbuf *lg = calloc((size_t)nslices, sizeof *lg);
  cr_assert(gmax && se && tl && part && part2 && sl && lg);
  for (int64_t r = 0; r < R; r++)
    gmax[r] = -FLT_MAX;
  struct dbuf tg = dput(dev, q, c->tgt, (size_t)R);
  for (int s = 0; s < nslices; s++) {
    int64_t off = cuts[s], vl = cuts[s + 1] - cuts[s];
    for (int64_t r = 0; r < R; r++)
      memcpy(sl + r * vl, c->logits + r * V + off, (size_t)vl * 4);
    lg[s] = dput(dev, q, sl, (size_t)(R * vl));
    struct dbuf mx = dput(dev, q, NULL, (size_t)R);
    OK(strata_xent_vp_max(q, lg[s].m, mx.m, R, vl));
    dget(q, mx, part, (size_t)R);
    for (int64_t r = 0; r < R; r++)
      gmax[r] = fmaxf(gmax[r], part[r]);
  }
  struct dbuf gm = dput(dev, q, gmax, (size_t)R);
  for (int s = 0; s < nslices; s++) {
    int64_t off = cuts[s], vl = cuts[s + 1] - cuts[s];
    struct dbuf e = dput(dev, q, NULL, (size_t)R), t = dput(dev, q, NULL, (size_t)R);
    OK(strata_xent_vp_sums(q, lg[s].m, tg.m, gm.m, e.m, t.m, R, vl, off, V));
    dget(q, e, part, (size_t)R);
    dget(q, t, part2, (size_t)R);
    for (int64_t r = 0; r < R; r++) {
      se[r] += part[r];
      tl[r] += part2[r];
    }
  }
  struct dbuf sd = dput(dev, q, se, (size_t)R), td = dput(dev, q, tl, (size_t)R), ld = dput(dev, q, NULL, (size_t)R);
  OK(strata_xent_vp_loss(q, gm.m, sd.m, td.m, tg.m, ld.m, R, V));
  dget(q, ld, loss, (size_t)R);
  dget(q, td, NULL, (size_t)R);
  for (int s = 0; s < nslices; s++) {
    int64_t off = cuts[s], vl = cuts[s + 1] - cuts[s];
    struct dbuf d = dput(dev, q, NULL, (size_t)(R * vl));
    OK(strata_xent_vp_bwd(q, lg[s].m, tg.m, gm.m, sd.m, d.m, R, vl, off, V, c->scale));
    dget(q, d, sl, (size_t)(R * vl));
    for (int64_t r = 0; r < R; r++)
      memcpy(dl + r * V + off, sl + r * vl, (size_t)vl * 4);
    /* in place (dlogits = logits): the same bits */
    OK(strata_xent_vp_bwd(q, lg[s].m, tg.m, gm.m, sd.m, lg[s].m, R, vl, off, V, c->scale));
    dget(q, lg[s], sl, (size_t)(R * vl));
    for (int64_t r = 0; r < R; r++)
      cr_assert(memcmp(sl + r * vl, dl + r * V + off, (size_t)vl * 4) == 0,
                "xent_vp_bwd in place differs on device %d, slice %d, row %lld", dev, s, (long long)r);
  }
  dget(q, sd, NULL, (size_t)R);
  dget(q, gm, NULL, (size_t)R);
  dget(q, tg, NULL, (size_t)R);
  strata_queue_free(q);
  free(lg);
  free(gmax);
  free(se);
  free(tl);
  free(part);
  free(part2);
  free(sl);
}

/* The whole-vocabulary cross_entropy_fwd and _bwd of the same case on device `dev`. */
static void vp_whole(int dev, const struct vp_case *c, float *loss, float *dl) {
  int64_t R = c->rows, V = c->vocab;
  strata_queue_t q;
  OK(strata_queue_new(dev, &q));
  struct dbuf lg = dput(dev, q, c->logits, (size_t)(R * V)), tg = dput(dev, q, c->tgt, (size_t)R);
  struct dbuf l = dput(dev, q, NULL, (size_t)R), d = dput(dev, q, NULL, (size_t)(R * V));
  OK(strata_cross_entropy_fwd(q, lg.m, tg.m, l.m, R, V));
  OK(strata_cross_entropy_bwd(q, lg.m, tg.m, d.m, R, V, c->scale));
  dget(q, l, loss, (size_t)R);
  dget(q, d, dl, (size_t)(R * V));
  dget(q, lg, NULL, (size_t)(R * V));
  dget(q, tg, NULL, (size_t)R);
  strata_queue_free(q);
}

/*
** Split a rows x vocab logits matrix (vocab > 157) into 1, 2 and 3 column
** slices (uneven, not multiples of a work-group), run the
** vocabulary-parallel ops per slice on device `d` with the reductions done
** here, and compare with cross_entropy_fwd/bwd of the whole matrix on the
** same device. Tolerance 1e-6 relative (plus 1e-6 absolute for losses near
** 0, 1e-7 for gradients near 0): slicing changes only the order in which
** the exponentials are summed (per slice, then across the slices), and on
** the host rounds each slice's double sum to float: a few float ulps of
** sumexp (well under 1e-6 relative), which reach the loss through log
** (absolute) and the gradient through 1 / sumexp (relative). One slice on a
** device is the whole op's own reduction: bit for bit. Every run repeats
** bit for bit.
*/
static void vp_check(int d, const struct vp_case *c) {
  const int64_t R = c->rows, V = c->vocab;
  const int64_t cut1[] = {0, V}, cut2[] = {0, 128, V}, cut3[] = {0, 100, 157, V};
  const int64_t *cuts[] = {cut1, cut2, cut3};
  float *wl = malloc((size_t)R * 4), *wd = malloc((size_t)(R * V) * 4);
  float *vl = malloc((size_t)R * 4), *vd = malloc((size_t)(R * V) * 4);
  float *vl2 = malloc((size_t)R * 4), *vd2 = malloc((size_t)(R * V) * 4);
  cr_assert(wl && wd && vl && vd && vl2 && vd2 && V > 157);
  struct strata_device_props p;
  OK(strata_device_props(d, &p));
  int host = strcmp(p.backend, "host") == 0;
  vp_whole(d, c, wl, wd);
  for (int k = 1; k <= 3; k++) {
    vp_run(d, c, cuts[k - 1], k, vl, vd);
    size_t at = 0;
    double e = tc_excess(vl, wl, (size_t)R, 1e-6, 1e-6, &at);
    cr_assert_leq(e, 1.0, "%d slices on device %d (%s): loss[%zu] = %.9g, cross_entropy_fwd %.9g", k, d, p.backend, at,
                  (double)vl[at], (double)wl[at]);
    e = tc_excess(vd, wd, (size_t)(R * V), 1e-7, 1e-6, &at);
    cr_assert_leq(e, 1.0, "%d slices on device %d (%s): dlogits[%zu] = %.9g, cross_entropy_bwd %.9g", k, d, p.backend,
                  at, (double)vd[at], (double)wd[at]);
    for (int64_t r = 0; r < R; r++) {
      if (c->tgt[r] >= 0 && c->tgt[r] < V)
        continue;
      cr_assert_eq(vl[r], 0.0f, "row %lld without a target has a loss", (long long)r);
      for (int64_t j = 0; j < V; j++)
        cr_assert_eq(vd[r * V + j], 0.0f, "row %lld without a target has a gradient", (long long)r);
    }
    if (k == 1 && !host) {
      cr_assert(memcmp(vl, wl, (size_t)R * 4) == 0, "one slice on device %d (%s): loss not bit for bit", d, p.backend);
      cr_assert(memcmp(vd, wd, (size_t)(R * V) * 4) == 0, "one slice on device %d (%s): dlogits not bit for bit", d,
                p.backend);
    }
    vp_run(d, c, cuts[k - 1], k, vl2, vd2);
    cr_assert(memcmp(vl, vl2, (size_t)R * 4) == 0 && memcmp(vd, vd2, (size_t)(R * V) * 4) == 0,
              "%d slices on device %d (%s): two runs differ", k, d, p.backend);
  }
  free(wl);
  free(wd);
  free(vl);
  free(vd);
  free(vl2);
  free(vd2);
}

/* Every device; rows with targets -1, vocab and beyond, targets on the
** slices' first and last columns; the host's losses also against the
** definition in double. */
Test(ops, vocab_parallel_cross_entropy_matches_the_whole) {
  const int64_t R = 29, V = 301;
  float *logits = rnd((size_t)(R * V), 121, -8, 8);
  int32_t tgt[29];
  for (int64_t r = 0; r < R; r++)
    tgt[r] = r % 7 == 3 ? -1 : r % 9 == 4 ? (int32_t)V : r % 11 == 6 ? (int32_t)(V + 1000) : (int32_t)((r * 97) % V);
  tgt[0] = 0;              /* first column of the first slice */
  tgt[1] = (int32_t)V - 1; /* last column of the last slice */
  tgt[2] = 128;            /* first column of the second slice of two */
  tgt[5] = 127;            /* last column of the first slice of two */
  logits[2 * V + 128] = 40; /* a confident right answer at a slice edge */
  struct vp_case c = {.rows = R, .vocab = V, .logits = logits, .tgt = tgt, .scale = 0.5f};
  int n;
  OK(strata_device_count(&n));
  for (int d = 0; d < n; d++)
    vp_check(d, &c);
  static const int64_t cut3[] = {0, 100, 157, 301};
  float *vl = malloc((size_t)R * 4), *vd = malloc((size_t)(R * V) * 4);
  vp_run(ref_device(), &c, cut3, 3, vl, vd);
  for (int64_t r = 0; r < R; r++) {
    if (tgt[r] < 0 || tgt[r] >= V)
      continue;
    double s = 0;
    for (int64_t j = 0; j < V; j++)
      s += exp((double)logits[r * V + j]);
    cr_assert_float_eq(vl[r], log(s) - logits[r * V + tgt[r]], 1e-5, "row %lld", (long long)r);
  }
  cr_assert_lt(vl[2], 1e-6, "the confident row");
  free(logits);
  free(vl);
  free(vd);
}

static int shift_body(strata_queue_t q, strata_mem_t *m, const void *pp) {
  const int64_t *d = pp; /* n off count */
  int rc = strata_tokens_shift(q, m[0], m[1], d[0], d[1], d[2]);
  if (!rc)
    rc = strata_tokens_shift(q, m[2], m[2], d[0], d[1], d[2]); /* in place */
  return rc;
}

/* tokens_shift against a hand-computed case on every device, then the
** shifted tokens through embedding_fwd on a slice of the table: the slices'
** lookups add up to the whole table's. */
Test(ops, tokens_shift_by_hand_and_through_the_embedding) {
  int64_t d[3] = {10, 10, 5};
  int32_t tok[10] = {0, 5, 9, 10, 14, 15, -1, 100, 12, 2147483647};
  const int32_t want[10] = {-1, -1, -1, 0, 4, -1, -1, -1, 2, -1};
  struct opcase c = {"tokens_shift", shift_body, d, 3, {10, 10, 10}, {tok, NULL, tok}};
  int n;
  OK(strata_device_count(&n));
  for (int dev = 0; dev < n; dev++) {
    void **got = alloc_outputs(&c);
    cr_assert_eq(exec(dev, &c, got), STRATA_OK, "tokens_shift on device %d: %s", dev, strata_last_error());
    for (int i = 0; i < 10; i++) {
      cr_assert_eq(((int32_t *)got[1])[i], want[i], "device %d: tokens_shift(%d) = %d, want %d", dev, tok[i],
                   ((int32_t *)got[1])[i], want[i]);
      cr_assert_eq(((int32_t *)got[2])[i], want[i], "device %d, in place: tokens_shift(%d) = %d, want %d", dev,
                   tok[i], ((int32_t *)got[2])[i], want[i]);
    }
    free_outputs(&c, got);
  }
  /* a vocabulary of 7 in slices [0, 3) and [3, 7): table rows by slice */
  const int64_t V = 7, D = 3, N = 9;
  int32_t ids[9] = {0, 6, 3, 2, -1, 7, 4, 3, 1};
  float *table = rnd((size_t)(V * D), 131, -1, 1), sum[27] = {0}, out[27];
  int dev = ref_device();
  strata_queue_t q;
  OK(strata_queue_new(dev, &q));
  struct dbuf tk = dput(dev, q, ids, (size_t)N);
  static const int64_t cut[] = {0, 3, 7};
  for (int s = 0; s < 2; s++) {
    int64_t off = cut[s], cnt = cut[s + 1] - cut[s];
    struct dbuf sh = dput(dev, q, NULL, (size_t)N), tb = dput(dev, q, table + off * D, (size_t)(cnt * D));
    struct dbuf o = dput(dev, q, NULL, (size_t)(N * D));
    OK(strata_tokens_shift(q, tk.m, sh.m, N, off, cnt));
    OK(strata_embedding_fwd(q, sh.m, tb.m, o.m, N, D, cnt));
    dget(q, o, out, (size_t)(N * D));
    dget(q, sh, NULL, (size_t)N);
    dget(q, tb, NULL, (size_t)(cnt * D));
    for (int i = 0; i < 27; i++)
      sum[i] += out[i];
  }
  dget(q, tk, NULL, (size_t)N);
  strata_queue_free(q);
  for (int64_t i = 0; i < N; i++)
    for (int64_t k = 0; k < D; k++)
      cr_assert_eq(sum[i * D + k], ids[i] >= 0 && ids[i] < V ? table[ids[i] * D + k] : 0.0f, "token %lld",
                   (long long)i);
  free(table);
}

/* Bad arguments: the status and message style of the other ops, and nothing written. */
Test(ops, vocab_parallel_bad_input_is_an_error) {
  strata_buffer_t a, b;
  strata_queue_t q;
  OK(strata_buffer_new(0, 64 * 4, &a));
  OK(strata_buffer_new(0, 64 * 4, &b));
  OK(strata_queue_new(0, &q));
  float ones[64];
  for (int i = 0; i < 64; i++)
    ones[i] = 1;
  OK(strata_buffer_upload(q, b, 0, ones, sizeof ones));
  strata_mem_t ma = strata_mem(a, 0), mb = strata_mem(b, 0), none = strata_mem(NULL, 0);
#define EXPECT(call, status, text)                                                                                     \
  do {                                                                                                                 \
    cr_assert_eq((call), (status), "%s", #call);                                                                       \
    cr_assert(strstr(strata_last_error(), (text)), "%s: message '%s' lacks '%s'", #call, strata_last_error(), (text)); \
  } while (0)
  EXPECT(strata_xent_vp_max(NULL, ma, mb, 4, 4), STRATA_ERR_INVALID, "xent_vp_max: queue is NULL");
  EXPECT(strata_xent_vp_max(q, none, mb, 4, 4), STRATA_ERR_INVALID, "xent_vp_max: operand 'logits' has no buffer");
  EXPECT(strata_xent_vp_max(q, ma, mb, 0, 4), STRATA_ERR_SHAPE, "xent_vp_max: rows = 0, must be positive");
  EXPECT(strata_xent_vp_max(q, ma, mb, 4, -2), STRATA_ERR_SHAPE, "xent_vp_max: vl = -2, must be positive");
  EXPECT(strata_xent_vp_max(q, ma, mb, 8, 9), STRATA_ERR_RANGE, "xent_vp_max: operand 'logits' needs 72 elements");
  EXPECT(strata_xent_vp_sums(q, ma, ma, ma, mb, mb, 4, 4, -1, 8), STRATA_ERR_SHAPE,
         "xent_vp_sums: the slice [off, off + vl) = [-1, 3) must lie inside the vocabulary [0, 8)");
  EXPECT(strata_xent_vp_sums(q, ma, ma, ma, mb, mb, 4, 4, 5, 8), STRATA_ERR_SHAPE,
         "xent_vp_sums: the slice [off, off + vl) = [5, 9) must lie inside the vocabulary [0, 8)");
  EXPECT(strata_xent_vp_sums(q, ma, ma, ma, mb, none, 4, 4, 4, 8), STRATA_ERR_INVALID,
         "xent_vp_sums: operand 'tlogit' has no buffer");
  EXPECT(strata_xent_vp_sums(NULL, ma, ma, ma, mb, mb, 4, 4, 4, 8), STRATA_ERR_INVALID, "xent_vp_sums: queue is NULL");
  EXPECT(strata_xent_vp_sums(q, ma, ma, ma, mb, mb, 0, 4, 0, 8), STRATA_ERR_SHAPE, "xent_vp_sums: rows = 0");
  EXPECT(strata_xent_vp_sums(q, ma, ma, ma, mb, mb, 4, 4, 0, 0), STRATA_ERR_SHAPE, "xent_vp_sums: vocab = 0");
  EXPECT(strata_xent_vp_loss(q, ma, ma, ma, ma, none, 4, 8), STRATA_ERR_INVALID,
         "xent_vp_loss: operand 'loss' has no buffer");
  EXPECT(strata_xent_vp_loss(q, ma, ma, ma, ma, mb, -1, 8), STRATA_ERR_SHAPE, "xent_vp_loss: rows = -1");
  EXPECT(strata_xent_vp_loss(NULL, ma, ma, ma, ma, mb, 4, 8), STRATA_ERR_INVALID, "xent_vp_loss: queue is NULL");
  EXPECT(strata_xent_vp_loss(q, ma, ma, ma, ma, strata_mem(b, 62), 4, 8), STRATA_ERR_RANGE,
         "xent_vp_loss: operand 'loss' needs 4 elements from offset 62");
  EXPECT(strata_xent_vp_bwd(q, ma, ma, ma, ma, mb, 4, 4, 6, 8, 1), STRATA_ERR_SHAPE,
         "xent_vp_bwd: the slice [off, off + vl) = [6, 10) must lie inside the vocabulary [0, 8)");
  EXPECT(strata_xent_vp_bwd(q, ma, ma, ma, ma, mb, 4, 4, -4, 8, 1), STRATA_ERR_SHAPE, "must lie inside the vocabulary");
  EXPECT(strata_xent_vp_bwd(q, ma, ma, ma, ma, mb, 0, 4, 0, 8, 1), STRATA_ERR_SHAPE, "xent_vp_bwd: rows = 0");
  EXPECT(strata_xent_vp_bwd(q, ma, ma, none, ma, mb, 4, 4, 0, 8, 1), STRATA_ERR_INVALID,
         "xent_vp_bwd: operand 'rowmax' has no buffer");
  EXPECT(strata_xent_vp_bwd(NULL, ma, ma, ma, ma, mb, 4, 4, 0, 8, 1), STRATA_ERR_INVALID, "xent_vp_bwd: queue is NULL");
  EXPECT(strata_tokens_shift(q, ma, mb, 4, -1, 4), STRATA_ERR_SHAPE, "tokens_shift: off = -1, must not be negative");
  EXPECT(strata_tokens_shift(q, ma, mb, 4, 0, 0), STRATA_ERR_SHAPE, "tokens_shift: count = 0, must be positive");
  EXPECT(strata_tokens_shift(q, ma, mb, 0, 0, 4), STRATA_ERR_SHAPE, "tokens_shift: n = 0, must be positive");
  EXPECT(strata_tokens_shift(q, none, mb, 4, 0, 4), STRATA_ERR_INVALID, "tokens_shift: operand 'tokens' has no buffer");
  EXPECT(strata_tokens_shift(NULL, ma, mb, 4, 0, 4), STRATA_ERR_INVALID, "tokens_shift: queue is NULL");
#undef EXPECT
  float back[64];
  OK(strata_buffer_download(q, b, 0, back, sizeof back));
  cr_assert(memcmp(back, ones, sizeof ones) == 0, "a rejected op wrote to its output");
  strata_queue_free(q);
  strata_buffer_free(a);
  strata_buffer_free(b);
}

/* ---- AdamW and sum of squares ---- */

static int adamw_body(strata_queue_t q, strata_mem_t *m, const void *pp) {
  int64_t n = *(const int64_t *)pp;
  int rc = 0;
  for (int64_t step = 1; step <= 3 && !rc; step++)
    rc = strata_adamw(q, m[0], m[1], m[2], m[3], n, 0.01f, 0.9f, 0.999f, 1e-8f, 0.1f, step);
  return rc;
}

Test(ops, adamw_against_hand_computation) {
  int64_t n = 301;
  float *p = rnd(301, 81, -1, 1), *g = rnd(301, 82, -1, 1);
  struct opcase c = {"adamw", adamw_body, &n, 4, {301, 301, 301, 301}, {p, g, NULL, NULL}};
  void **got = compare_devices(&c, 0xd, 1e-6, 1e-5);
  for (int i = 0; i < 301; i++) {
    double pv = p[i], m = 0, v = 0;
    for (int t = 1; t <= 3; t++) {
      m = 0.9 * m + 0.1 * g[i];
      v = 0.999 * v + 0.001 * (double)g[i] * g[i];
      double mh = m / (1 - pow(0.9, t)), vh = v / (1 - pow(0.999, t));
      pv -= 0.01 * (mh / (sqrt(vh) + 1e-8) + 0.1 * pv);
    }
    cr_assert_float_eq(((float *)got[0])[i], pv, 1e-5, "param %d", i);
  }
  free_outputs(&c, got);
  free(p);
  free(g);
}

static int sumsq_body(strata_queue_t q, strata_mem_t *m, const void *pp) {
  int64_t n = *(const int64_t *)pp;
  int rc = strata_sumsq(q, m[0], n, m[1], 0);
  if (!rc)
    rc = strata_sumsq(q, m[0], n, m[2], 0);
  if (!rc)
    rc = strata_sumsq(q, m[0], 10, m[2], 1);
  return rc;
}

Test(ops, sumsq_deterministic_norm) {
  int64_t n = 100003;
  float *x = rnd((size_t)n, 91, -1, 1);
  struct opcase c = {"sumsq", sumsq_body, &n, 3, {(size_t)n, 1, 1}, {x, NULL, NULL}};
  void **got = compare_devices(&c, 6, 0, 1e-5);
  double s = 0, s10 = 0;
  for (int64_t i = 0; i < n; i++)
    s += (double)x[i] * x[i];
  for (int i = 0; i < 10; i++)
    s10 += (double)x[i] * x[i];
  cr_assert_float_eq(((float *)got[1])[0], s, s * 1e-5);
  cr_assert_float_eq(((float *)got[2])[0], s + s10, s * 1e-5);
  free_outputs(&c, got);
  /* run twice on each device: bit-identical */
  int nd;
  OK(strata_device_count(&nd));
  for (int d = 0; d < nd; d++) {
    void **a = alloc_outputs(&c), **b = alloc_outputs(&c);
    OK(exec(d, &c, a));
    OK(exec(d, &c, b));
    cr_assert(memcmp(a[1], b[1], 4) == 0, "sumsq not deterministic on device %d", d);
    free_outputs(&c, a);
    free_outputs(&c, b);
  }
  free(x);
}

/* ---- the optimizer's fused ops ---- */

/* A float32 buffer on `q`'s device holding x (n floats), or zeros when x is NULL. */
static strata_buffer_t fused_buf(int dev, strata_queue_t q, const float *x, size_t n) {
  strata_buffer_t b;
  OK(strata_buffer_new(dev, n * 4, &b));
  float *z = x ? NULL : calloc(n, 4);
  OK(strata_buffer_upload(q, b, 0, x ? x : z, n * 4));
  free(z);
  return b;
}

static void fused_get(strata_queue_t q, strata_buffer_t b, void *out, size_t bytes) {
  OK(strata_buffer_download(q, b, 0, out, bytes));
}

/*
** strata_adamw_fused against strata_scale, strata_adamw and strata_convert
** run one after the other, over three steps with gradient scales below,
** at and above 1, with and without weight decay and the bfloat16 copy:
** every float of the parameters, gradients, moments and copy the same.
*/
Test(ops, adamw_fused_is_scale_adamw_convert_bit_for_bit) {
  int dev = ref_device();
  strata_queue_t q;
  OK(strata_queue_new(dev, &q));
  cr_assert(strata_fused_optimizer_supported(q), "the host backend has the fused optimizer ops");
  enum { N = 100003 };
  float *p0 = rnd(N, 101, -1, 1), *g0 = rnd(N, 102, -3, 3);
  const float scales[3] = {0.37f, 1.0f, 2.5f};
  for (int with16 = 0; with16 < 2; with16++)
    for (int decay = 0; decay < 2; decay++) {
      strata_buffer_t b[2][5];
      for (int k = 0; k < 2; k++) {
        b[k][0] = fused_buf(dev, q, p0, N);
        b[k][1] = fused_buf(dev, q, g0, N);
        b[k][2] = fused_buf(dev, q, NULL, N);
        b[k][3] = fused_buf(dev, q, NULL, N);
        b[k][4] = fused_buf(dev, q, NULL, (N + 1) / 2); /* the bfloat16 copy */
      }
      float wd = decay ? 0.1f : 0.0f;
      for (int step = 1; step <= 3; step++) {
        float gs = scales[step - 1];
        if (gs != 1.0f)
          OK(strata_scale(q, strata_mem(b[0][1], 0), gs, N));
        OK(strata_adamw(q, strata_mem(b[0][0], 0), strata_mem(b[0][1], 0), strata_mem(b[0][2], 0),
                        strata_mem(b[0][3], 0), N, 0.01f, 0.9f, 0.999f, 1e-8f, wd, step));
        if (with16)
          OK(strata_convert(q, strata_mem(b[0][0], 0), strata_mem_typed(b[0][4], 0, STRATA_BFLOAT16), N));
        OK(strata_adamw_fused(q, strata_mem(b[1][0], 0), strata_mem(b[1][1], 0), strata_mem(b[1][2], 0),
                              strata_mem(b[1][3], 0),
                              with16 ? strata_mem_typed(b[1][4], 0, STRATA_BFLOAT16) : (strata_mem_t){0}, N, gs,
                              0.01f, 0.9f, 0.999f, 1e-8f, wd, step));
      }
      for (int i = 0; i < 5; i++) {
        size_t bytes = i == 4 ? (size_t)N * 2 : (size_t)N * 4;
        unsigned char *x = malloc(bytes), *y = malloc(bytes);
        fused_get(q, b[0][i], x, bytes);
        fused_get(q, b[1][i], y, bytes);
        size_t at = 0;
        while (at < bytes && x[at] == y[at])
          at++;
        cr_assert_eq(at, bytes, "adamw_fused (copy %d, decay %d): operand %d differs at byte %zu", with16, decay, i,
                     at);
        free(x);
        free(y);
      }
      if (with16) { /* and the copy is the updated parameters, rounded to bfloat16 (8 bits of mantissa) */
        uint16_t h[2];
        float f[2], w;
        fused_get(q, b[1][4], h, sizeof h);
        fused_get(q, b[1][0], f, sizeof f);
        uint32_t u = (uint32_t)h[1] << 16;
        memcpy(&w, &u, 4);
        cr_assert(f[1] != p0[1] && fabs((double)w - f[1]) <= fabs((double)f[1]) / 256, "copy %g of %g", (double)w,
                  (double)f[1]);
      }
      for (int k = 0; k < 2; k++)
        for (int i = 0; i < 5; i++)
          strata_buffer_free(b[k][i]);
    }
  free(p0);
  free(g0);
  strata_queue_free(q);
}

/*
** The fused optimizer's bfloat16 copy where it starts part-way into a cache
** line and ends in one: the host streams the copy's whole lines around the
** caches and writes the rest plainly, so at each offset and length every
** element is strata_convert's rounding of the updated parameter, and the
** elements on either side are untouched.
*/
Test(ops, adamw_fused_copy_at_any_offset_is_convert) {
  int dev = ref_device();
  strata_queue_t q;
  OK(strata_queue_new(dev, &q));
  enum { N = 4133, SLACK = 64 };
  float *p0 = rnd(N, 111, -1, 1), *g0 = rnd(N, 112, -3, 3);
  const int64_t offs[] = {0, 1, 7, 31, 32, 33}, lens[] = {1, 17, 32, 95, N};
  for (size_t a = 0; a < sizeof offs / sizeof *offs; a++)
    for (size_t l = 0; l < sizeof lens / sizeof *lens; l++) {
      const int64_t off = offs[a], n = lens[l];
      strata_buffer_t p = fused_buf(dev, q, p0, (size_t)n), g = fused_buf(dev, q, g0, (size_t)n);
      strata_buffer_t m = fused_buf(dev, q, NULL, (size_t)n), v = fused_buf(dev, q, NULL, (size_t)n);
      strata_buffer_t c = fused_buf(dev, q, NULL, (size_t)(off + n + SLACK) / 2 + 1);
      strata_buffer_t r = fused_buf(dev, q, NULL, (size_t)(off + n + SLACK) / 2 + 1);
      OK(strata_adamw_fused(q, strata_mem(p, 0), strata_mem(g, 0), strata_mem(m, 0), strata_mem(v, 0),
                            strata_mem_typed(c, (size_t)off, STRATA_BFLOAT16), n, 0.5f, 0.01f, 0.9f, 0.999f, 1e-8f,
                            0.1f, 1));
      OK(strata_convert(q, strata_mem(p, 0), strata_mem_typed(r, (size_t)off, STRATA_BFLOAT16), n));
      const size_t bytes = (size_t)(off + n + SLACK) / 2 * 4;
      unsigned char *x = malloc(bytes), *y = malloc(bytes);
      fused_get(q, c, x, bytes);
      fused_get(q, r, y, bytes);
      size_t at = 0;
      while (at < bytes && x[at] == y[at])
        at++;
      cr_assert_eq(at, bytes, "offset %lld, %lld elements: the copy differs from convert's at byte %zu", (long long)off,
                   (long long)n, at);
      free(x);
      free(y);
      strata_buffer_t all[] = {p, g, m, v, c, r};
      for (int i = 0; i < 6; i++)
        strata_buffer_free(all[i]);
    }
  free(p0);
  free(g0);
  strata_queue_free(q);
}

/*
** strata_sumsq_spans against strata_sumsq over each span (float32 and
** bfloat16 x, empty and overlapping spans): the same bits; bad spans,
** scales and copies refused with nothing written; devices without the ops
** say so.
*/
static void sumsq_spans_case(void) {
  int dev = ref_device();
  strata_queue_t q;
  OK(strata_queue_new(dev, &q));
  enum { N = 200003, T = 19 };
  float *x0 = rnd(N, 103, -2, 2);
  /* lengths in groups (the host runs eight chains together) of all sizes once sorted, a full group and a part
  ** one, chains that end at different places */
  const int64_t bounds[2 * T] = {0,     10,     10,    0,     10,     100000, 100010, 99993, 5,      7,
                                 N - 1, 1,      200,   5000,  300,    4999,   7,      5001,  9,      3,
                                 60000, 60000,  17,    123456, 3,     77777,  100,    1,     0,      0,
                                 50000, 150000, 2,     199999, 1,     8,      190000, 10003};
  strata_buffer_t x = fused_buf(dev, q, x0, N), out = fused_buf(dev, q, NULL, 2 * T);
  strata_buffer_t x16 = fused_buf(dev, q, NULL, (N + 1) / 2);
  OK(strata_convert(q, strata_mem(x, 0), strata_mem_typed(x16, 0, STRATA_BFLOAT16), N));
  for (int bf = 0; bf < 2; bf++) {
    strata_mem_t xm = bf ? strata_mem_typed(x16, 0, STRATA_BFLOAT16) : strata_mem(x, 0);
    OK(strata_sumsq_spans(q, xm, N, bounds, T, strata_mem(out, 0)));
    for (int t = 0; t < T; t++) {
      if (bounds[2 * t + 1] > 0) {
        strata_mem_t at = bf ? strata_mem_typed(x16, (size_t)bounds[2 * t], STRATA_BFLOAT16)
                             : strata_mem(x, (size_t)bounds[2 * t]);
        OK(strata_sumsq(q, at, bounds[2 * t + 1], strata_mem(out, (size_t)(T + t)), 0));
      } else {
        OK(strata_fill(q, strata_mem(out, (size_t)(T + t)), 0, 1));
      }
    }
    float got[2 * T];
    fused_get(q, out, got, sizeof got);
    for (int t = 0; t < T; t++)
      cr_assert(memcmp(&got[t], &got[T + t], 4) == 0, "sumsq_spans (bf16 %d) span %d: %a, its sumsq %a", bf, t,
                (double)got[t], (double)got[T + t]);
    /* and the spans' sums are sums of squares: the first by hand */
    double s = 0;
    for (int i = 0; i < 10; i++)
      s += (double)x0[i] * x0[i];
    cr_assert_float_eq((double)got[0], s, s * (bf ? 2e-2 : 1e-6));
  }
  /* bad input: nothing written */
  float marks[2 * T];
  for (int i = 0; i < 2 * T; i++)
    marks[i] = 7;
  OK(strata_buffer_upload(q, out, 0, marks, sizeof marks));
  const int64_t outside[2] = {N - 5, 6}, negative[2] = {-1, 3};
  cr_assert_eq(strata_sumsq_spans(q, strata_mem(x, 0), N, outside, 1, strata_mem(out, 0)), STRATA_ERR_RANGE);
  cr_assert_eq(strata_sumsq_spans(q, strata_mem(x, 0), N, negative, 1, strata_mem(out, 0)), STRATA_ERR_RANGE);
  cr_assert_eq(strata_sumsq_spans(q, strata_mem(x, 0), N, NULL, 1, strata_mem(out, 0)), STRATA_ERR_INVALID);
  cr_assert_eq(strata_sumsq_spans(q, strata_mem(x, 0), N + 1, bounds, T, strata_mem(out, 0)), STRATA_ERR_RANGE);
  cr_assert_eq(strata_sumsq_spans(q, strata_mem(x, 0), N, bounds, 0, strata_mem(out, 0)), STRATA_ERR_SHAPE);
  strata_mem_t xm = strata_mem(x, 0);
  cr_assert_eq(strata_adamw_fused(q, xm, xm, xm, xm, (strata_mem_t){0}, 8, NAN, 0.01f, 0.9f, 0.999f, 1e-8f, 0, 1),
               STRATA_ERR_INVALID);
  cr_assert_eq(strata_adamw_fused(q, xm, xm, xm, xm, strata_mem(out, 0), 8, 1, 0.01f, 0.9f, 0.999f, 1e-8f, 0, 1),
               STRATA_ERR_INVALID, "a float32 copy is refused");
  float back[2 * T];
  fused_get(q, out, back, sizeof back);
  cr_assert(memcmp(back, marks, sizeof marks) == 0, "a refused op wrote to its output");
  cr_assert_eq(strata_fused_optimizer_supported(NULL), 0);
  strata_buffer_free(x);
  strata_buffer_free(x16);
  strata_buffer_free(out);
  strata_queue_free(q);
  /* the other backends' devices have no such ops: they say so and the trainer uses the separate ones */
  int nd;
  OK(strata_device_count(&nd));
  for (int d = 0; d < nd; d++) {
    struct strata_device_props pr;
    OK(strata_device_props(d, &pr));
    if (strcmp(pr.backend, "host") == 0)
      continue;
    strata_queue_t oq;
    OK(strata_queue_new(d, &oq));
    strata_buffer_t ob = fused_buf(d, oq, x0, 64);
    cr_assert_eq(strata_fused_optimizer_supported(oq), 0, "device %d (%s)", d, pr.backend);
    cr_assert_eq(strata_sumsq_spans(oq, strata_mem(ob, 0), 64, bounds, 1, strata_mem(ob, 0)), STRATA_ERR_UNSUPPORTED);
    strata_buffer_free(ob);
    strata_queue_free(oq);
  }
  free(x0);
}

Test(ops, sumsq_spans_is_each_sumsq_bit_for_bit_and_bad_input_refused) { sumsq_spans_case(); }

/* The same where the host's chains run one after another (AVX-512 hidden) instead of side by side in a vector. */
Test(ops, sumsq_spans_is_each_sumsq_bit_for_bit_without_avx512) {
  setenv("STRATA_HOST_CPU_HIDE", "avx512f", 1);
  sumsq_spans_case();
}

/* ---- conv2d and pooling ---- */

static int conv_f(strata_queue_t q, strata_mem_t *m, const void *pp) {
  return strata_conv2d_fwd(q, pp, m[0], m[1], m[2], m[3]);
}

static int conv_b(strata_queue_t q, strata_mem_t *m, const void *pp) {
  return strata_conv2d_bwd(q, pp, m[0], m[1], m[4], m[5], m[6], m[3], 0);
}

Test(ops, conv2d_values_devices_and_gradients) {
  struct strata_conv2d g = {.n = 2, .c = 3, .h = 7, .w = 6, .k = 4, .r = 3, .s = 3, .stride = 2, .pad = 1};
  int64_t p, qq, ws;
  OK(strata_conv2d_shape(&g, &p, &qq, &ws));
  cr_assert_eq(p, 4);
  cr_assert_eq(qq, 3);
  size_t nx = 2 * 3 * 7 * 6, nw = 4 * 3 * 3 * 3, ny = (size_t)(2 * 4 * p * qq);
  float *x = rnd(nx, 101, -1, 1), *w = rnd(nw, 102, -1, 1), *wt = rnd(ny, 103, -1, 1);
  struct opcase f = {"conv2d_fwd", conv_f, &g, 5, {nx, nw, ny, (size_t)ws, ny}, {x, w, NULL, NULL, wt}};
  void **got = compare_devices(&f, 4, 1e-5, 1e-4);
  /* direct convolution by definition */
  for (int n = 0; n < 2; n++)
    for (int k = 0; k < 4; k++)
      for (int i = 0; i < p; i++)
        for (int j = 0; j < qq; j++) {
          double s = 0;
          for (int c = 0; c < 3; c++)
            for (int a = 0; a < 3; a++)
              for (int b = 0; b < 3; b++) {
                int iy = i * 2 - 1 + a, ix = j * 2 - 1 + b;
                if (iy >= 0 && iy < 7 && ix >= 0 && ix < 6)
                  s += (double)x[((n * 3 + c) * 7 + iy) * 6 + ix] * w[((k * 3 + c) * 3 + a) * 3 + b];
              }
          cr_assert_float_eq(((float *)got[2])[((n * 4 + k) * p + i) * qq + j], s, 1e-5);
        }
  free_outputs(&f, got);
  /* operands: x w y work dy dx dw */
  struct opcase b = {"conv2d_bwd", conv_b, &g, 7, {nx, nw, ny, (size_t)ws, ny, nx, nw}, {x, w, NULL, NULL, wt, NULL, NULL}};
  got = compare_devices(&b, 0x60, 1e-5, 1e-4);
  free_outputs(&b, got);
  check_fd(&f, &b, 0, 5, 2, 4, 1e-2, 1e-3, 1e-2, 60);
  check_fd(&f, &b, 1, 6, 2, 4, 1e-2, 1e-3, 1e-2, 40);
  free(x);
  free(w);
  free(wt);
}

/* output rows [1, 3) of the 4 (a spatial slab's kept rows): operands x w y work dy dw */
static int conv_rows_f(strata_queue_t q, strata_mem_t *m, const void *pp) {
  return strata_conv2d_fwd_rows(q, pp, 1, 2, m[0], m[1], m[2], m[3]);
}

static int conv_rows_bw(strata_queue_t q, strata_mem_t *m, const void *pp) {
  return strata_conv2d_bwd_w_rows(q, pp, 1, 2, m[0], m[4], m[5], m[3], 0);
}

Test(ops, conv2d_rows_are_the_whole_convolutions_rows) {
  struct strata_conv2d g = {.n = 2, .c = 3, .h = 7, .w = 6, .k = 4, .r = 3, .s = 3, .stride = 2, .pad = 1};
  int64_t p, qq, ws;
  OK(strata_conv2d_shape(&g, &p, &qq, &ws));
  const int64_t r0 = 1, rows = 2;
  size_t nx = 2 * 3 * 7 * 6, nw = 4 * 3 * 3 * 3, ny = (size_t)(2 * 4 * rows * qq);
  float *x = rnd(nx, 121, -1, 1), *w = rnd(nw, 122, -1, 1), *dy = rnd(ny, 123, -1, 1);
  struct opcase f = {"conv2d_fwd_rows", conv_rows_f, &g, 6, {nx, nw, ny, (size_t)ws, ny, nw},
                     {x, w, NULL, NULL, dy, NULL}};
  void **got = compare_devices(&f, 4, 1e-5, 1e-4);
  /* direct convolution by definition, on the rows asked for only; dw from their gradient alone */
  double dw[4 * 3 * 3 * 3] = {0};
  for (int n = 0; n < 2; n++)
    for (int k = 0; k < 4; k++)
      for (int i = 0; i < rows; i++)
        for (int j = 0; j < qq; j++) {
          double s = 0, gy = dy[((n * 4 + k) * rows + i) * qq + j];
          for (int c = 0; c < 3; c++)
            for (int a = 0; a < 3; a++)
              for (int b = 0; b < 3; b++) {
                int iy = (int)(i + r0) * 2 - 1 + a, ix = j * 2 - 1 + b;
                if (iy >= 0 && iy < 7 && ix >= 0 && ix < 6) {
                  s += (double)x[((n * 3 + c) * 7 + iy) * 6 + ix] * w[((k * 3 + c) * 3 + a) * 3 + b];
                  dw[((k * 3 + c) * 3 + a) * 3 + b] += gy * x[((n * 3 + c) * 7 + iy) * 6 + ix];
                }
              }
          cr_assert_float_eq(((float *)got[2])[((n * 4 + k) * rows + i) * qq + j], s, 1e-5);
        }
  free_outputs(&f, got);
  struct opcase b = {"conv2d_bwd_w_rows", conv_rows_bw, &g, 6, {nx, nw, ny, (size_t)ws, ny, nw},
                     {x, w, NULL, NULL, dy, NULL}};
  got = compare_devices(&b, 0x20, 1e-5, 1e-4);
  for (size_t i = 0; i < nw; i++)
    cr_assert_float_eq(((float *)got[5])[i], dw[i], 1e-4, "dw[%zu]", i);
  free_outputs(&b, got);
  /* rows outside the output are refused, with nothing enqueued */
  strata_queue_t q;
  OK(strata_queue_new(ref_device(), &q));
  strata_buffer_t buf;
  OK(strata_buffer_new(ref_device(), 4096 * 4, &buf));
  strata_mem_t m = strata_mem(buf, 0);
  cr_assert_eq(strata_conv2d_fwd_rows(q, &g, 3, 2, m, m, m, m), STRATA_ERR_SHAPE);
  cr_assert_eq(strata_conv2d_bwd_w_rows(q, &g, -1, 1, m, m, m, m, 0), STRATA_ERR_SHAPE);
  cr_assert_eq(strata_conv2d_fwd_rows(q, &g, 0, 0, m, m, m, m), STRATA_ERR_SHAPE);
  strata_buffer_free(buf);
  strata_queue_free(q);
  free(x);
  free(w);
  free(dy);
}

static int pool_f(strata_queue_t q, strata_mem_t *m, const void *pp) {
  return strata_maxpool_fwd(q, pp, m[0], m[1], m[2]);
}

static int pool_b(strata_queue_t q, strata_mem_t *m, const void *pp) {
  int rc = pool_f(q, m, pp);
  if (!rc)
    rc = strata_maxpool_bwd(q, pp, m[3], m[2], m[4]);
  return rc;
}

Test(ops, maxpool_values_devices_and_gradient) {
  for (int64_t stride = 1; stride <= 2; stride++) {
    struct strata_pool2d g = {.n = 2, .c = 2, .h = 6, .w = 5, .size = 2, .stride = stride};
    int64_t p, qq;
    OK(strata_pool2d_shape(&g, &p, &qq));
    size_t nx = 120, ny = (size_t)(4 * p * qq);
    /* distinct values at least 0.05 apart, shuffled: no ties for finite differences */
    float *x = malloc(nx * 4), *w = rnd(ny, 111, -1, 1);
    for (size_t i = 0; i < nx; i++)
      x[i] = 0.05f * (float)((i * 37) % nx) - 3.0f;
    struct opcase f = {"maxpool_fwd", pool_f, &g, 4, {nx, ny, ny, ny}, {x, NULL, NULL, w}};
    void **got = compare_devices(&f, 6, 0, 0);
    for (int pl = 0; pl < 4; pl++)
      for (int i = 0; i < p; i++)
        for (int j = 0; j < qq; j++) {
          float best = -FLT_MAX;
          for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++)
              best = fmaxf(best, x[pl * 30 + (i * stride + a) * 5 + j * stride + b]);
          cr_assert_eq(((float *)got[1])[(pl * p + i) * qq + j], best);
        }
    free_outputs(&f, got);
    struct opcase b = {"maxpool_bwd", pool_b, &g, 5, {nx, ny, ny, ny, nx}, {x, NULL, NULL, w, NULL}};
    got = compare_devices(&b, 16, 1e-6, 1e-6);
    free_outputs(&b, got);
    check_fd(&f, &b, 0, 4, 1, 3, 1e-2, 1e-3, 1e-2, 120);
    free(x);
    free(w);
  }
}

/* ---- bad input ---- */

/* Run case `c` twice on device `dev` and fail unless both runs agree bit for bit. */
static void same_twice(int dev, const struct opcase *c, unsigned outputs, int wg) {
  void **a = alloc_outputs(c), **b = alloc_outputs(c);
  cr_assert_eq(exec(dev, c, a), STRATA_OK, "%s: %s", c->name, strata_last_error());
  cr_assert_eq(exec(dev, c, b), STRATA_OK, "%s: %s", c->name, strata_last_error());
  for (int i = 0; i < c->nbuf; i++)
    if (outputs & (1u << i))
      cr_assert(memcmp(a[i], b[i], c->count[i] * 4) == 0, "%s, work-groups of %d: operand %d differs between runs",
                c->name, wg, i);
  free_outputs(c, a);
  free_outputs(c, b);
}

/*
** The row and column reductions cooperate in work-groups (kernels/ops.k):
** on PoCL with work-groups of 1, 32, 64 and 256 items, rows and columns
** longer than a work-group and not a multiple of it, they agree with the
** host reference and repeat bit for bit; the vocabulary-parallel
** cross-entropy matches the whole one (vp_check); the embedding gradient
** is the host's bit for bit and the sum of squares within 1e-5.
*/
Test(ops, reductions_in_work_groups_of_1_32_64_256) {
  static const int sizes[] = {1, 32, 64, 256};
  int64_t rc_ln[2] = {37, 300}, rc_xe[2] = {37, 300}, rc_bias[3] = {300, 37, 0};
  struct sm_p smp[2] = {{.rows = 40, .cols = 300, .scale = 0.3f, .causal = 0},
                        {.rows = 300, .cols = 300, .scale = 0.3f, .causal = 1}};
  size_t n = 37 * 300;
  float *x = rnd(9 * n, 91, -3, 3), *g = rnd(300, 92, 0.5f, 1.5f), *be = rnd(300, 93, -0.5f, 0.5f);
  float *w = rnd(9 * n, 94, -1, 1);
  int32_t tgt[37], tok[300];
  for (int r = 0; r < 37; r++)
    tgt[r] = r % 11 == 5 ? -1 : (r * 97) % 300; /* a few rows without a target */
  for (int i = 0; i < 300; i++)
    tok[i] = i % 41 == 7 ? 20 : (i * 13) % 19; /* token 19 never, 20 outside the vocabulary */
  int32_t *tok2 = malloc(2500 * 4);
  for (int i = 0; i < 2500; i++)
    tok2[i] = i % 7 == 3 ? (i * 13) % 19 : 5;
  int64_t emb[4] = {300, 37, 20, 0}, emb2[4] = {2500, 37, 20, 1}, nss = 9 * 37 * 300 - 11;
  for (int k = 0; k < 4; k++) {
    char v[8];
    snprintf(v, sizeof v, "%d", sizes[k]);
    setenv("STRATA_KERNEL_WORKGROUP", v, 1);
    strata_shutdown(); /* the backends read it when they start */
    int o0 = tc_find_device("opencl", 0);
    if (o0 < 0)
      cr_skip_test("no OpenCL device (PoCL)");
    struct opcase lf = {"layernorm_fwd", ln_f, rc_ln, 7, {n, 300, 300, n, 37, 37, n}, {x, g, be, NULL, NULL, NULL, w}};
    free_outputs(&lf, compare_devices(&lf, 0x38, 1e-5, 1e-4));
    same_twice(o0, &lf, 0x38, sizes[k]);
    struct opcase lb = {"layernorm_bwd", ln_b, rc_ln, 10, {n, 300, 300, n, 37, 37, n, n, 300, 300},
                        {x, g, be, NULL, NULL, NULL, w, NULL, NULL, NULL}};
    free_outputs(&lb, compare_devices(&lb, 0x380, 1e-5, 1e-4));
    same_twice(o0, &lb, 0x380, sizes[k]);
    for (int c = 0; c < 2; c++) {
      size_t m = (size_t)(smp[c].rows * smp[c].cols);
      struct opcase sf = {"softmax_fwd", sm_f, &smp[c], 3, {m, m, m}, {x, NULL, w}};
      free_outputs(&sf, compare_devices(&sf, 2, 1e-6, 1e-5));
      same_twice(o0, &sf, 2, sizes[k]);
      struct opcase sb = {"softmax_bwd", sm_b, &smp[c], 4, {m, m, m, m}, {x, NULL, w, NULL}};
      free_outputs(&sb, compare_devices(&sb, 8, 1e-6, 1e-4));
      same_twice(o0, &sb, 8, sizes[k]);
    }
    struct opcase xf = {"cross_entropy_fwd", xe_f, rc_xe, 4, {n, 37, 37, 37}, {x, tgt, NULL, w}};
    free_outputs(&xf, compare_devices(&xf, 4, 1e-5, 1e-5));
    same_twice(o0, &xf, 4, sizes[k]);
    struct opcase xb = {"cross_entropy_bwd", xe_b, rc_xe, 5, {n, 37, 37, 37, n}, {x, tgt, NULL, w, NULL}};
    void **got = compare_devices(&xb, 16, 1e-6, 1e-5);
    for (int c = 0; c < 300; c++)
      cr_assert_eq(((float *)got[4])[5 * 300 + c], 0.0f, "a row without a target has a gradient");
    free_outputs(&xb, got);
    same_twice(o0, &xb, 16, sizes[k]);
    struct vp_case vc = {.rows = 37, .vocab = 300, .logits = x, .tgt = tgt, .scale = 1.0f / 37};
    vp_check(o0, &vc);
    for (rc_bias[2] = 0; rc_bias[2] < 2; rc_bias[2]++) {
      struct opcase bg = {"bias_grad", bias_grad_body, rc_bias, 2, {n, 37}, {x, g}};
      free_outputs(&bg, compare_devices(&bg, 2, 1e-5, 1e-5));
      same_twice(o0, &bg, 2, sizes[k]);
    }
    /* the embedding gradient (a group per position, the first of each token summing its rows) and the two-level
    ** sum of squares: tokens repeated far apart, more positions than a work-group */
    for (emb[3] = 0; emb[3] < 2; emb[3]++) {
      struct opcase eb = {"embedding_bwd", emb_b, emb, 5, {300, 20 * 37, 300 * 37, 300 * 37, 20 * 37},
                          {tok, NULL, NULL, w, x}};
      free_outputs(&eb, compare_devices(&eb, 16, 0, 0)); /* the host's sums in the host's order: bit for bit */
      same_twice(o0, &eb, 16, sizes[k]);
    }
    /* one token at 2143 of 2500 positions: more than a group lists (1024), the rest found by its scan */
    struct opcase el = {"embedding_bwd", emb_b, emb2, 5, {2500, 20 * 37, 2500 * 37, 2500 * 37, 20 * 37},
                        {tok2, NULL, NULL, x, w}};
    free_outputs(&el, compare_devices(&el, 16, 0, 0));
    same_twice(o0, &el, 16, sizes[k]);
    struct opcase ss = {"sumsq", sumsq_body, &nss, 3, {(size_t)nss, 1, 1}, {x, NULL, NULL}};
    free_outputs(&ss, compare_devices(&ss, 6, 0, 1e-5));
    same_twice(o0, &ss, 6, sizes[k]);
  }
  unsetenv("STRATA_KERNEL_WORKGROUP");
  free(x);
  free(g);
  free(be);
  free(w);
  free(tok2);
}

/* A work-group size that is not a power of two up to 256 is refused when the backends start. */
Test(ops, bad_work_group_size_is_an_error) {
  setenv("STRATA_BACKENDS", "opencl", 1);
  static const char *const bad[] = {"0", "3", "512", "32x", "-64"};
  for (int i = 0; i < 5; i++) {
    setenv("STRATA_KERNEL_WORKGROUP", bad[i], 1);
    strata_shutdown();
    int n;
    cr_assert_eq(strata_device_count(&n), STRATA_ERR_PARSE, "STRATA_KERNEL_WORKGROUP=%s accepted", bad[i]);
    cr_assert(strstr(strata_last_error(), "STRATA_KERNEL_WORKGROUP"), "%s", strata_last_error());
  }
  unsetenv("STRATA_KERNEL_WORKGROUP");
}

Test(ops, bad_input_is_an_error_not_a_crash) {
  setenv("STRATA_HOST_DEVICES", "2", 1);
  strata_buffer_t a, b, other;
  strata_queue_t q;
  OK(strata_buffer_new(0, 64 * 4, &a));
  OK(strata_buffer_new(0, 64 * 4, &b));
  OK(strata_buffer_new(1, 64 * 4, &other));
  OK(strata_queue_new(0, &q));
  float ones[64];
  for (int i = 0; i < 64; i++)
    ones[i] = 1;
  OK(strata_buffer_upload(q, b, 0, ones, sizeof ones));
  /* wrong shapes */
  cr_assert_eq(strata_gemm(q, 0, 0, 8, 8, 0, 1, strata_mem(a, 0), 8, 0, strata_mem(a, 0), 8, 0, 0, strata_mem(b, 0), 8,
                           0, 1),
               STRATA_ERR_SHAPE);
  cr_assert_eq(strata_gemm(q, 0, 0, 8, 8, 8, 1, strata_mem(a, 0), 4, 0, strata_mem(a, 0), 8, 0, 0, strata_mem(b, 0), 8,
                           0, 1),
               STRATA_ERR_SHAPE, "lda < k");
  cr_assert_eq(strata_gemm(q, 0, 0, 8, 9, 8, 1, strata_mem(a, 0), 8, 0, strata_mem(a, 0), 9, 0, 0, strata_mem(b, 0), 9,
                           0, 1),
               STRATA_ERR_RANGE, "B larger than its buffer");
  cr_assert(strstr(strata_last_error(), "operand 'B'"), "message: %s", strata_last_error());
  cr_assert_eq(strata_softmax_fwd(q, strata_mem(a, 0), strata_mem(b, 0), 10, 4, 1, 1), STRATA_ERR_SHAPE);
  cr_assert_eq(strata_relu_fwd(q, strata_mem(a, 60), strata_mem(b, 0), 8), STRATA_ERR_RANGE, "offset pushes past end");
  cr_assert_eq(strata_relu_fwd(q, strata_mem(a, 0), strata_mem(b, 0), -3), STRATA_ERR_SHAPE);
  cr_assert_eq(strata_relu_fwd(q, strata_mem(NULL, 0), strata_mem(b, 0), 3), STRATA_ERR_INVALID);
  /* a buffer on another device */
  cr_assert_eq(strata_add(q, strata_mem(a, 0), strata_mem(other, 0), strata_mem(b, 0), 8), STRATA_ERR_DEVICE_MISMATCH);
  cr_assert(strstr(strata_last_error(), "operand 'b' is on device 1"), "message: %s", strata_last_error());
  cr_assert_eq(strata_adamw(q, strata_mem(a, 0), strata_mem(a, 0), strata_mem(a, 0), strata_mem(a, 0), 8, 1, 1.5f,
                            0.9f, 1e-8f, 0, 1),
               STRATA_ERR_INVALID);
  struct strata_conv2d g = {.n = 1, .c = 1, .h = 2, .w = 2, .k = 1, .r = 5, .s = 5, .stride = 1, .pad = 0};
  cr_assert_eq(strata_conv2d_fwd(q, &g, strata_mem(a, 0), strata_mem(a, 0), strata_mem(b, 0), strata_mem(a, 0)),
               STRATA_ERR_SHAPE);
  cr_assert_eq(strata_conv2d_fwd(q, NULL, strata_mem(a, 0), strata_mem(a, 0), strata_mem(b, 0), strata_mem(a, 0)),
               STRATA_ERR_INVALID);
  struct strata_pool2d pg = {.n = 1, .c = 1, .h = 2, .w = 2, .size = 3, .stride = 1};
  cr_assert_eq(strata_maxpool_fwd(q, &pg, strata_mem(a, 0), strata_mem(b, 0), strata_mem(b, 8)), STRATA_ERR_SHAPE);
  cr_assert_eq(strata_scale(NULL, strata_mem(a, 0), 1, 4), STRATA_ERR_INVALID);
  /* nothing above touched b */
  float back[64];
  OK(strata_buffer_download(q, b, 0, back, sizeof back));
  cr_assert(memcmp(back, ones, sizeof ones) == 0, "a rejected op wrote to its output");
  strata_queue_free(q);
  strata_buffer_free(a);
  strata_buffer_free(b);
  strata_buffer_free(other);
}

/* The one GEMM timer: its two figures are one product's (2 n^3 FLOPs in `seconds` at `gflops`), bad sizes refused. */
Test(ops, gemm_speed_figures_agree_and_bad_sizes_are_refused) {
  int d = tc_find_device("host", 0);
  double g = 0, s = 0;
  OK(strata_device_gemm_speed(d, 128, 2, &g, &s));
  cr_assert_gt(g, 0);
  cr_assert_gt(s, 0);
  cr_assert_float_eq(g * 1e9 * s, 2.0 * 128 * 128 * 128, 1e-6 * 2.0 * 128 * 128 * 128);
  OK(strata_device_gemm_speed(d, 64, 1, &g, NULL));
  cr_assert_eq(strata_device_gemm_speed(d, 0, 1, &g, NULL), STRATA_ERR_RANGE);
  cr_assert_eq(strata_device_gemm_speed(d, 64, 0, &g, NULL), STRATA_ERR_RANGE);
  cr_assert_eq(strata_device_gemm_speed(d, 64, 1, NULL, NULL), STRATA_ERR_INVALID);
  cr_assert_neq(strata_device_gemm_speed(9999, 64, 1, &g, NULL), STRATA_OK, "no such device");
}
