/* SPDX-License-Identifier: MIT */
/* test-cuda.c — the CUDA backend against the host backend: every op on the same inputs, copies, events, peers, and a
** GPT and a CNN trained on one GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#ifndef STRATA_TEST_BACKEND_PATH
#define STRATA_TEST_BACKEND_PATH ""
#endif

/* Elements of sentinel before and after every operand: the op sees its
** operand at offset PAD (so element offsets are exercised) and the test
** checks that neither margin changed (nothing written out of bounds). */
#define PAD 3
#define SENTINEL (-1234.5f)
#define ISENTINEL (-777)

static int cuda_dev = -1;     /* first CUDA device */
static int host_dev = -1;     /* first host device: the reference */
static char cuda_skip[320];   /* why the CUDA tests cannot run, "" if they can */

/*
** Load the backends from this build tree (unless the environment already
** says where) and find the devices. Skipping happens in each test (NEED_CUDA):
** a reason found here is only recorded.
*/
static void setup(void) {
  if (STRATA_TEST_BACKEND_PATH[0])
    setenv("STRATA_BACKEND_PATH", STRATA_TEST_BACKEND_PATH, 0);
  cuda_skip[0] = '\0';
#if defined(STRATA_TEST_CUDA_SELF_CHECK)
  /* Checks the suite itself on a machine without a GPU: a second host
  ** device stands in for the CUDA one (build with
  ** CPPFLAGS=-DSTRATA_TEST_CUDA_SELF_CHECK, run with STRATA_HOST_DEVICES=3).
  ** The props test then fails by design: it expects NVIDIA.
  ** STRATA_TEST_CUDA_STANDIN=opencl runs the suite on the first OpenCL
  ** device instead (the same kernels of kernels/ops.k, e.g. on PoCL), which
  ** checks the tolerances against kernels that are not the host's code. */
  OK(strata_init());
  const char *standin = getenv("STRATA_TEST_CUDA_STANDIN");
  cuda_dev = standin && *standin ? tc_find_device(standin, 0) : tc_find_device("host", 1);
  host_dev = tc_find_device("host", 0);
  if (cuda_dev < 0)
    snprintf(cuda_skip, sizeof cuda_skip, "self-check needs STRATA_HOST_DEVICES >= 2 or a %s device",
             standin && *standin ? standin : "second host");
  return;
#elif !defined(STRATA_TEST_CUDA_BUILT)
  snprintf(cuda_skip, sizeof cuda_skip, "CUDA backend not built");
  return;
#else
  OK(strata_init());
  tc_cuda_why(cuda_skip, sizeof cuda_skip);
  if (cuda_skip[0])
    return;
  cuda_dev = tc_find_device("cuda", 0);
  host_dev = tc_find_device("host", 0);
  cr_assert_geq(cuda_dev, 0, "the cuda backend reports devices but none is listed");
  cr_assert_geq(host_dev, 0, "no host device to compare with");
#endif
}

static void teardown(void) {
  strata_shutdown();
}

TestSuite(cuda, .init = setup, .fini = teardown, .timeout = 120);

/* Skip, saying why, when the CUDA tests cannot run; under tests/gpu/run
** (STRATA_TEST_REQUIRE_CUDA=1) fail instead: a GPU run never passes by skipping. */
#define NEED_CUDA() TC_NEED_CUDA(cuda_skip)

/* tests/gpu/run runs this one first: the module loaded (it logs the driver's
** and the libraries' versions at STRATA_LOG=info,cuda) and has a device. */
Test(cuda, backend_loaded_with_a_device) {
  NEED_CUDA();
  struct strata_device_props p;
  OK(strata_device_props(cuda_dev, &p));
  cr_log_info("CUDA device %d: %s, %d SMs, %.1f GiB, PCI %s", cuda_dev, p.name, p.compute_units,
              p.total_memory / 1073741824.0, p.pci_bus_id);
  cr_assert_gt(p.total_memory, 0, "the CUDA device reports no memory");
}

/* ----------------------------------------------------------------- harness */

#define MAX_OPERANDS 10

/* What an operand is: float or int32, and whether its contents are
** compared after the op (outputs, and inputs the op updates in place). */
enum { T_F32 = 0, T_I32 = 1 };
enum { NO_CHECK = 0, CHECK = 1 };

struct operand {
  int type;
  int check;
  size_t n;              /* elements */
  const void *init;      /* n elements, or NULL: 0.5f (float) / 0 (int) */
};

/* Enqueue the op under test on `q` with the operands at `m`. */
typedef int (*op_fn)(strata_queue_t q, const strata_mem_t *m, const void *arg);

/* Run `fn` on device `dev` over fresh copies of the operands and return
** their contents afterwards (one malloc'd array of n elements each, which
** the caller frees). Checks the sentinel margins. */
static void run_on(int dev, const struct operand *o, int nops, op_fn fn, const void *arg, void **out) {
  strata_queue_t q;
  strata_buffer_t b[MAX_OPERANDS];
  strata_mem_t m[MAX_OPERANDS];
  OK(strata_queue_new(dev, &q));
  for (int i = 0; i < nops; i++) {
    size_t total = o[i].n + 2 * PAD;
    uint32_t *h = malloc(total * 4);
    cr_assert(h);
    for (size_t j = 0; j < total; j++) {
      float fs = SENTINEL;
      int32_t is = ISENTINEL;
      if (o[i].type == T_F32)
        memcpy(&h[j], &fs, 4);
      else
        memcpy(&h[j], &is, 4);
    }
    if (o[i].init) {
      memcpy(h + PAD, o[i].init, o[i].n * 4);
    } else {
      for (size_t j = 0; j < o[i].n; j++) {
        float f = 0.5f;
        int32_t z = 0;
        memcpy(&h[PAD + j], o[i].type == T_F32 ? (void *)&f : (void *)&z, 4);
      }
    }
    OK(strata_buffer_new(dev, total * 4, &b[i]));
    OK(strata_buffer_upload(q, b[i], 0, h, total * 4));
    free(h);
    m[i] = strata_mem(b[i], PAD);
  }
  OK(fn(q, m, arg));
  OK(strata_queue_finish(q));
  for (int i = 0; i < nops; i++) {
    size_t total = o[i].n + 2 * PAD;
    uint32_t *h = malloc(total * 4);
    cr_assert(h);
    OK(strata_buffer_download(q, b[i], 0, h, total * 4));
    for (size_t j = 0; j < total; j++) {
      if (j >= PAD && j < PAD + o[i].n)
        continue;
      uint32_t s;
      float fs = SENTINEL;
      int32_t is = ISENTINEL;
      memcpy(&s, o[i].type == T_F32 ? (void *)&fs : (void *)&is, 4);
      cr_expect_eq(h[j], s, "device %d, operand %d: margin element %lld was overwritten", dev, i,
                   (long long)j - PAD);
    }
    out[i] = malloc(o[i].n * 4 + 4);
    cr_assert(out[i]);
    memcpy(out[i], h + PAD, o[i].n * 4);
    free(h);
    strata_buffer_free(b[i]);
  }
  strata_queue_free(q);
}

/* Run the op on the CUDA device (`fn`) and on the host device (`host_fn`) and compare every CHECK operand: floats
** within atol + rtol |host|, ints exactly. */
static void compare_with(const char *what, const struct operand *o, int nops, op_fn fn, op_fn host_fn, const void *arg,
                         double atol, double rtol) {
  void *dc[MAX_OPERANDS], *dh[MAX_OPERANDS];
  cr_assert_leq(nops, MAX_OPERANDS);
  run_on(cuda_dev, o, nops, fn, arg, dc);
  run_on(host_dev, o, nops, host_fn, arg, dh);
  for (int i = 0; i < nops; i++) {
    if (o[i].check) {
      if (o[i].type == T_F32) {
        size_t at = 0;
        double ex = tc_excess(dc[i], dh[i], o[i].n, atol, rtol, &at);
        cr_expect_leq(ex, 1.0, "%s: operand %d differs at %zu: cuda %.9g, host %.9g (excess %.3g)", what, i, at,
                      (double)((float *)dc[i])[at], (double)((float *)dh[i])[at], ex);
      } else {
        const int32_t *a = dc[i], *h = dh[i];
        for (size_t j = 0; j < o[i].n; j++)
          if (a[j] != h[j]) {
            cr_expect_eq(a[j], h[j], "%s: int operand %d differs at %zu", what, i, j);
            break;
          }
      }
    }
    free(dc[i]);
    free(dh[i]);
  }
}

/* The same op on both devices. */
static void compare(const char *what, const struct operand *o, int nops, op_fn fn, const void *arg, double atol,
                    double rtol) {
  compare_with(what, o, nops, fn, fn, arg, atol, rtol);
}

static float *rnd(size_t n, uint32_t seed, float lo, float hi) {
  float *x = malloc((n ? n : 1) * sizeof *x);
  cr_assert(x);
  tc_fill(x, n, seed, lo, hi);
  return x;
}

/* -------------------------------------------------------------- the device */

Test(cuda, device_props) {
  NEED_CUDA();
  struct strata_device_props p;
  OK(strata_device_props(cuda_dev, &p));
  cr_expect_str_eq(p.backend, "cuda");
  cr_expect_str_eq(p.vendor, "NVIDIA");
  cr_expect_eq(p.is_cpu, 0);
  cr_expect_gt(p.compute_units, 0);
  cr_expect_gt(p.total_memory, (uint64_t)0);
  cr_expect_gt(strlen(p.name), (size_t)0);
  unsigned d, b, s, f;
  char tail;
  cr_expect_eq(sscanf(p.pci_bus_id, "%4x:%2x:%2x.%1x%c", &d, &b, &s, &f, &tail), 4, "pci bus id '%s'",
               p.pci_bus_id);
  cr_expect_eq(strlen(p.pci_bus_id), (size_t)12, "pci bus id '%s' is not dddd:bb:dd.f", p.pci_bus_id);
  for (const char *c = p.pci_bus_id; *c; c++)
    cr_expect(!(*c >= 'A' && *c <= 'Z'), "pci bus id '%s' is not lower case", p.pci_bus_id);
}

/* -------------------------------------------------------------------- GEMM */

struct gemm_arg {
  int ta, tb;
  int64_t m, n, k, lda, ldb, ldc, sa, sb, sc, batch;
  float alpha, beta;
};

static int run_gemm(strata_queue_t q, const strata_mem_t *m, const void *arg) {
  const struct gemm_arg *g = arg;
  return strata_gemm(q, g->ta, g->tb, g->m, g->n, g->k, g->alpha, m[0], g->lda, g->sa, m[1], g->ldb, g->sb, g->beta,
                     m[2], g->ldc, g->sc, g->batch);
}

/* One GEMM with padded leading dimensions and batch strides. */
static void gemm_case(int ta, int tb, int64_t m, int64_t n, int64_t k, int64_t batch, int broadcast_b, float alpha,
                      float beta) {
  struct gemm_arg g = {.ta = ta, .tb = tb, .m = m, .n = n, .k = k, .batch = batch, .alpha = alpha, .beta = beta};
  int64_t ar = ta ? k : m, ac = ta ? m : k; /* stored rows x cols of A */
  int64_t br = tb ? n : k, bc = tb ? k : n;
  g.lda = ac + 2;
  g.ldb = bc + 1;
  g.ldc = n + 3;
  g.sa = ar * g.lda + 5;
  g.sb = broadcast_b ? 0 : br * g.ldb + 7;
  g.sc = m * g.ldc + 1;
  size_t na = (size_t)(g.sa * (batch - 1) + ar * g.lda);
  size_t nb = (size_t)(g.sb * (batch - 1) + br * g.ldb);
  size_t nc = (size_t)(g.sc * (batch - 1) + m * g.ldc);
  float *a = rnd(na, 11, -1, 1), *b = rnd(nb, 12, -1, 1), *c = rnd(nc, 13, -1, 1);
  struct operand o[] = {{T_F32, NO_CHECK, na, a}, {T_F32, NO_CHECK, nb, b}, {T_F32, CHECK, nc, c}};
  char what[128];
  snprintf(what, sizeof what, "gemm ta=%d tb=%d %lldx%lldx%lld batch %lld%s", ta, tb, (long long)m, (long long)n,
           (long long)k, (long long)batch, broadcast_b ? " (B shared)" : "");
  /* float32 GEMMs summing in other orders differ by about 1e-7 sqrt(k) here (inputs in [-1, 1]); 1e-5 sqrt(k) (and
  ** 1e-6 relative, for beta C) leaves them 8x room, while TF32's 10-bit mantissas (STRATA_CUDA_TF32=1, or a cuBLAS
  ** that took it by default) miss it 17 to 37 times over on these shapes (simulated against float32 on the CPU) */
  compare(what, o, 3, run_gemm, &g, 1e-5 * sqrt((double)k), 1e-6);
  free(a);
  free(b);
  free(c);
}

Test(cuda, gemm_transposes_and_batches) {
  NEED_CUDA();
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      gemm_case(ta, tb, 37, 29, 45, 3, 0, 0.75f, 0.25f);
      gemm_case(ta, tb, 1, 17, 5, 2, 1, -1.0f, 1.0f);
    }
}

Test(cuda, gemm_large_and_beta_zero) {
  NEED_CUDA();
  gemm_case(0, 0, 257, 193, 320, 1, 0, 1.0f, 0.0f);
  gemm_case(1, 1, 64, 128, 96, 4, 0, 0.5f, 0.0f);
  gemm_case(0, 1, 130, 70, 1, 2, 0, 1.0f, 0.5f);
}

/* ------------------------------------------------------------ elementwise */

struct ew_arg {
  int64_t n, rows, cols;
  float alpha;
  int which, accumulate;
};

static int run_ew(strata_queue_t q, const strata_mem_t *m, const void *arg) {
  const struct ew_arg *a = arg;
  switch (a->which) {
  case 0: return strata_gelu_fwd(q, m[0], m[1], a->n);
  case 1: return strata_gelu_bwd(q, m[0], m[1], m[2], a->n);
  case 2: return strata_relu_fwd(q, m[0], m[1], a->n);
  case 3: return strata_relu_bwd(q, m[0], m[1], m[2], a->n);
  case 4: return strata_add(q, m[0], m[1], m[2], a->n);
  case 5: return strata_scale(q, m[0], a->alpha, a->n);
  case 6: return strata_fill(q, m[0], a->alpha, a->n);
  case 7: return strata_bias_add(q, m[0], m[1], a->rows, a->cols);
  case 8: return strata_bias_grad(q, m[0], m[1], a->rows, a->cols, a->accumulate);
  case 9: return strata_gelu_fwd(q, m[0], m[0], a->n);     /* in place */
  case 10: return strata_add(q, m[0], m[1], m[0], a->n);   /* y = a */
  default: return STRATA_ERR_INVALID;
  }
}

Test(cuda, elementwise) {
  NEED_CUDA();
  const int64_t n = 1000 * 257 + 3; /* several blocks and a ragged tail */
  float *x = rnd((size_t)n, 21, -4, 4), *dy = rnd((size_t)n, 22, -1, 1), *y = rnd((size_t)n, 23, -1, 1);
  static const char *names[] = {"gelu_fwd", "gelu_bwd", "relu_fwd", "relu_bwd", "add", "scale", "fill"};
  for (int w = 0; w <= 6; w++) {
    struct ew_arg a = {.n = n, .alpha = -1.75f, .which = w};
    struct operand o3[] = {
        {T_F32, NO_CHECK, (size_t)n, x}, {T_F32, NO_CHECK, (size_t)n, dy}, {T_F32, CHECK, (size_t)n, y}};
    if (w == 0 || w == 2) {
      struct operand o[] = {{T_F32, NO_CHECK, (size_t)n, x}, {T_F32, CHECK, (size_t)n, y}};
      compare(names[w], o, 2, run_ew, &a, 1e-6, 1e-5);
    } else if (w == 5 || w == 6) {
      struct operand o[] = {{T_F32, CHECK, (size_t)n, x}};
      compare(names[w], o, 1, run_ew, &a, 1e-30, 1e-7);
    } else if (w == 1) {
      /* gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) du with t = tanh(u): near
      ** |x| = 4, t is within 1e-4 of -1 or 1 and d gelu' / dt = x t du is about
      ** 10, so each ulp of tanh (6e-8 there) moves dx by up to 6e-7 |dy|.
      ** CUDA's tanhf is within 2 ulp, the host's tanh within a few: an
      ** absolute tolerance of 4e-6 holds that (1e-6 did not, by simulation
      ** over these 257003 inputs, for a tanh 1 ulp off). */
      compare(names[w], o3, 3, run_ew, &a, 4e-6, 1e-5);
    } else {
      compare(names[w], o3, 3, run_ew, &a, 1e-6, 1e-5);
    }
  }
  struct ew_arg in_place = {.n = n, .which = 9};
  struct operand o1[] = {{T_F32, CHECK, (size_t)n, x}};
  compare("gelu_fwd in place", o1, 1, run_ew, &in_place, 1e-6, 1e-5);
  struct ew_arg add_in_place = {.n = n, .which = 10};
  struct operand o2[] = {{T_F32, CHECK, (size_t)n, x}, {T_F32, NO_CHECK, (size_t)n, dy}};
  compare("add in place", o2, 2, run_ew, &add_in_place, 1e-30, 1e-7);
  free(x);
  free(dy);
  free(y);
}

Test(cuda, bias) {
  NEED_CUDA();
  const int64_t rows = 333, cols = 129;
  float *y = rnd((size_t)(rows * cols), 31, -1, 1), *bias = rnd((size_t)cols, 32, -1, 1);
  struct ew_arg a = {.rows = rows, .cols = cols, .which = 7};
  struct operand o[] = {{T_F32, CHECK, (size_t)(rows * cols), y}, {T_F32, NO_CHECK, (size_t)cols, bias}};
  compare("bias_add", o, 2, run_ew, &a, 1e-6, 1e-6);
  for (int acc = 0; acc < 2; acc++) {
    struct ew_arg g = {.rows = rows, .cols = cols, .which = 8, .accumulate = acc};
    struct operand og[] = {{T_F32, NO_CHECK, (size_t)(rows * cols), y}, {T_F32, CHECK, (size_t)cols, bias}};
    compare(acc ? "bias_grad accumulate" : "bias_grad", og, 2, run_ew, &g, 1e-4, 1e-4);
  }
  free(y);
  free(bias);
}

/* -------------------------------------------------------------- row ops */

struct row_arg {
  int64_t rows, cols;
  float eps, scale;
  int causal, accumulate;
};

/* Layer norm forward then backward: operands x, gamma, beta, y, mean,
** rstd, dy, dx, dgamma, dbeta. */
static int run_layernorm(strata_queue_t q, const strata_mem_t *m, const void *arg) {
  const struct row_arg *a = arg;
  int rc = strata_layernorm_fwd(q, m[0], m[1], m[2], m[3], m[4], m[5], a->rows, a->cols, a->eps);
  if (rc)
    return rc;
  return strata_layernorm_bwd(q, m[0], m[1], m[4], m[5], m[6], m[7], m[8], m[9], a->rows, a->cols, a->accumulate);
}

Test(cuda, layernorm) {
  NEED_CUDA();
  const int64_t rows = 67, cols = 300;
  size_t rc = (size_t)(rows * cols);
  float *x = rnd(rc, 41, -3, 5), *gamma = rnd((size_t)cols, 42, 0.5f, 1.5f), *beta = rnd((size_t)cols, 43, -1, 1);
  float *dy = rnd(rc, 44, -1, 1), *dg = rnd((size_t)cols, 45, -1, 1), *db = rnd((size_t)cols, 46, -1, 1);
  for (int acc = 0; acc < 2; acc++) {
    struct row_arg a = {.rows = rows, .cols = cols, .eps = 1e-5f, .accumulate = acc};
    struct operand o[] = {{T_F32, NO_CHECK, rc, x},          {T_F32, NO_CHECK, (size_t)cols, gamma},
                          {T_F32, NO_CHECK, (size_t)cols, beta}, {T_F32, CHECK, rc, NULL},
                          {T_F32, CHECK, (size_t)rows, NULL}, {T_F32, CHECK, (size_t)rows, NULL},
                          {T_F32, NO_CHECK, rc, dy},          {T_F32, CHECK, rc, NULL},
                          {T_F32, CHECK, (size_t)cols, dg},   {T_F32, CHECK, (size_t)cols, db}};
    compare(acc ? "layernorm (accumulate)" : "layernorm", o, 10, run_layernorm, &a, 1e-4, 1e-4);
  }
  free(x);
  free(gamma);
  free(beta);
  free(dy);
  free(dg);
  free(db);
}

/* Softmax forward then backward: x, y, dy, dx. */
static int run_softmax(strata_queue_t q, const strata_mem_t *m, const void *arg) {
  const struct row_arg *a = arg;
  int rc = strata_softmax_fwd(q, m[0], m[1], a->rows, a->cols, a->scale, a->causal);
  if (rc)
    return rc;
  return strata_softmax_bwd(q, m[1], m[2], m[3], a->rows, a->cols, a->scale);
}

Test(cuda, softmax) {
  NEED_CUDA();
  const int64_t cols = 48, rows = 5 * cols;
  size_t rc = (size_t)(rows * cols);
  float *x = rnd(rc, 51, -6, 6), *dy = rnd(rc, 52, -1, 1);
  for (int causal = 0; causal < 2; causal++) {
    struct row_arg a = {.rows = rows, .cols = cols, .scale = 0.37f, .causal = causal};
    struct operand o[] = {
        {T_F32, NO_CHECK, rc, x}, {T_F32, CHECK, rc, NULL}, {T_F32, NO_CHECK, rc, dy}, {T_F32, CHECK, rc, NULL}};
    compare(causal ? "softmax causal" : "softmax", o, 4, run_softmax, &a, 1e-6, 1e-4);
  }
  free(x);
  free(dy);
}

/* ------------------------------------------------- embedding, cross-entropy */

struct tok_arg {
  int64_t n, dim, vocab;
  float scale;
  int accumulate;
};

/* Embedding forward then backward: tokens, table, out, dout, dtable. */
static int run_embedding(strata_queue_t q, const strata_mem_t *m, const void *arg) {
  const struct tok_arg *a = arg;
  int rc = strata_embedding_fwd(q, m[0], m[1], m[2], a->n, a->dim, a->vocab);
  if (rc)
    return rc;
  return strata_embedding_bwd(q, m[0], m[3], m[4], a->n, a->dim, a->vocab, a->accumulate);
}

Test(cuda, embedding) {
  NEED_CUDA();
  const int64_t n = 301, dim = 65, vocab = 50;
  int32_t *tok = malloc((size_t)n * sizeof *tok);
  cr_assert(tok);
  for (int64_t i = 0; i < n; i++)
    tok[i] = (int32_t)((i * 7919) % (vocab + 3)) - 1; /* -1 .. vocab+1: some out of range, many repeats */
  float *table = rnd((size_t)(vocab * dim), 61, -1, 1), *dout = rnd((size_t)(n * dim), 62, -1, 1);
  float *dtable = rnd((size_t)(vocab * dim), 63, -1, 1);
  for (int acc = 0; acc < 2; acc++) {
    struct tok_arg a = {.n = n, .dim = dim, .vocab = vocab, .accumulate = acc};
    struct operand o[] = {{T_I32, NO_CHECK, (size_t)n, tok},
                          {T_F32, NO_CHECK, (size_t)(vocab * dim), table},
                          {T_F32, CHECK, (size_t)(n * dim), NULL},
                          {T_F32, NO_CHECK, (size_t)(n * dim), dout},
                          {T_F32, CHECK, (size_t)(vocab * dim), dtable}};
    compare(acc ? "embedding (accumulate)" : "embedding", o, 5, run_embedding, &a, 1e-5, 1e-5);
  }
  free(tok);
  free(table);
  free(dout);
  free(dtable);
}

/* Cross-entropy forward and backward: logits, targets, loss, dlogits. */
static int run_xent(strata_queue_t q, const strata_mem_t *m, const void *arg) {
  const struct tok_arg *a = arg;
  int rc = strata_cross_entropy_fwd(q, m[0], m[1], m[2], a->n, a->vocab);
  if (rc)
    return rc;
  return strata_cross_entropy_bwd(q, m[0], m[1], m[3], a->n, a->vocab, a->scale);
}

Test(cuda, cross_entropy) {
  NEED_CUDA();
  const int64_t rows = 97, vocab = 1003;
  int32_t *tgt = malloc((size_t)rows * sizeof *tgt);
  cr_assert(tgt);
  for (int64_t r = 0; r < rows; r++)
    tgt[r] = r % 10 == 3 ? -1 : (r % 13 == 5 ? (int32_t)vocab : (int32_t)((r * 131) % vocab));
  float *logits = rnd((size_t)(rows * vocab), 71, -8, 8);
  struct tok_arg a = {.n = rows, .vocab = vocab, .scale = 1.0f / (float)rows};
  struct operand o[] = {{T_F32, NO_CHECK, (size_t)(rows * vocab), logits},
                        {T_I32, NO_CHECK, (size_t)rows, tgt},
                        {T_F32, CHECK, (size_t)rows, NULL},
                        {T_F32, CHECK, (size_t)(rows * vocab), NULL}};
  compare("cross_entropy", o, 4, run_xent, &a, 1e-6, 1e-4);
  free(tgt);
  free(logits);
}

/* --------------------------------------- vocabulary-parallel cross-entropy */

struct vp_arg {
  int64_t rows, vl, off, vocab, n, count;
  float scale;
};

/* One slice's ops in a row: logits, targets, rowmax, sumexp, tlogit, loss,
** dlogits, tokens, shifted tokens. */
static int run_xent_vp(strata_queue_t q, const strata_mem_t *m, const void *arg) {
  const struct vp_arg *a = arg;
  int rc = strata_xent_vp_max(q, m[0], m[2], a->rows, a->vl);
  if (!rc)
    rc = strata_xent_vp_sums(q, m[0], m[1], m[2], m[3], m[4], a->rows, a->vl, a->off, a->vocab);
  if (!rc)
    rc = strata_xent_vp_loss(q, m[2], m[3], m[4], m[1], m[5], a->rows, a->vocab);
  if (!rc)
    rc = strata_xent_vp_bwd(q, m[0], m[1], m[2], m[3], m[6], a->rows, a->vl, a->off, a->vocab, a->scale);
  if (!rc)
    rc = strata_tokens_shift(q, m[7], m[8], a->n, a->off, a->count);
  return rc;
}

Test(cuda, vocab_parallel_cross_entropy) {
  NEED_CUDA();
  const int64_t rows = 97, vocab = 1003, off = 300, vl = 401, n = 301;
  int32_t *tgt = malloc((size_t)rows * sizeof *tgt), *tok = malloc((size_t)n * sizeof *tok);
  cr_assert(tgt && tok);
  /* global ids: inside the slice, outside it, -1 and vocab */
  for (int64_t r = 0; r < rows; r++)
    tgt[r] = r % 10 == 3 ? -1 : (r % 13 == 5 ? (int32_t)vocab : (int32_t)((r * 131) % vocab));
  for (int64_t i = 0; i < n; i++)
    tok[i] = (int32_t)((i * 7919) % (vocab + 3)) - 1;
  float *logits = rnd((size_t)(rows * vl), 72, -8, 8);
  struct vp_arg a = {.rows = rows, .vl = vl, .off = off, .vocab = vocab, .n = n, .count = vl,
                     .scale = 1.0f / (float)rows};
  struct operand o[] = {{T_F32, NO_CHECK, (size_t)(rows * vl), logits},
                        {T_I32, NO_CHECK, (size_t)rows, tgt},
                        {T_F32, CHECK, (size_t)rows, NULL},
                        {T_F32, CHECK, (size_t)rows, NULL},
                        {T_F32, CHECK, (size_t)rows, NULL},
                        {T_F32, CHECK, (size_t)rows, NULL},
                        {T_F32, CHECK, (size_t)(rows * vl), NULL},
                        {T_I32, NO_CHECK, (size_t)n, tok},
                        {T_I32, CHECK, (size_t)n, NULL}};
  compare("xent_vp_max/sums/loss/bwd, tokens_shift", o, 9, run_xent_vp, &a, 1e-6, 1e-4);
  free(tgt);
  free(tok);
  free(logits);
}

/* ------------------------------------------------------- optimizer, norms */

struct opt_arg {
  int64_t n, step;
  int accumulate;
};

static int run_adamw(strata_queue_t q, const strata_mem_t *m, const void *arg) {
  const struct opt_arg *a = arg;
  return strata_adamw(q, m[0], m[1], m[2], m[3], a->n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, a->step);
}

Test(cuda, adamw) {
  NEED_CUDA();
  const int64_t n = 70001;
  float *p = rnd((size_t)n, 81, -1, 1), *g = rnd((size_t)n, 82, -1, 1), *mm = rnd((size_t)n, 83, -0.1f, 0.1f);
  float *v = rnd((size_t)n, 84, 0, 0.01f);
  for (int64_t step = 1; step <= 3; step += 2) {
    struct opt_arg a = {.n = n, .step = step};
    struct operand o[] = {{T_F32, CHECK, (size_t)n, p},
                          {T_F32, NO_CHECK, (size_t)n, g},
                          {T_F32, CHECK, (size_t)n, mm},
                          {T_F32, CHECK, (size_t)n, v}};
    compare(step == 1 ? "adamw step 1" : "adamw step 3", o, 4, run_adamw, &a, 1e-6, 1e-5);
  }
  free(p);
  free(g);
  free(mm);
  free(v);
}

static int run_sumsq(strata_queue_t q, const strata_mem_t *m, const void *arg) {
  const struct opt_arg *a = arg;
  return strata_sumsq(q, m[0], a->n, m[1], a->accumulate);
}

Test(cuda, sumsq) {
  NEED_CUDA();
  static const int64_t sizes[] = {1, 7, 4096, 4097, 1000003};
  float *x = rnd(1000003, 91, -1, 1);
  float start = 2.5f;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    for (int acc = 0; acc < 2; acc++) {
      struct opt_arg a = {.n = sizes[i], .accumulate = acc};
      struct operand o[] = {{T_F32, NO_CHECK, (size_t)sizes[i], x}, {T_F32, CHECK, 1, &start}};
      char what[64];
      snprintf(what, sizeof what, "sumsq n=%lld%s", (long long)sizes[i], acc ? " accumulate" : "");
      compare(what, o, 2, run_sumsq, &a, 1e-6, 2e-5);
    }
  free(x);
}

/* ---------------------------------------------------------- conv and pool */

struct conv_arg {
  struct strata_conv2d g;
  int accumulate, with_dx;
};

/* Forward then backward: x, w, y, work, dy, dx, dw. */
static int run_conv(strata_queue_t q, const strata_mem_t *m, const void *arg) {
  const struct conv_arg *a = arg;
  int rc = strata_conv2d_fwd(q, &a->g, m[0], m[1], m[2], m[3]);
  if (rc)
    return rc;
  strata_mem_t dx = a->with_dx ? m[5] : strata_mem(NULL, 0);
  return strata_conv2d_bwd(q, &a->g, m[0], m[1], m[4], dx, m[6], m[3], a->accumulate);
}

Test(cuda, conv2d) {
  NEED_CUDA();
  struct conv_arg a = {.g = {.n = 2, .c = 3, .h = 9, .w = 11, .k = 4, .r = 3, .s = 3, .stride = 2, .pad = 1}};
  int64_t p, qw, ws;
  OK(strata_conv2d_shape(&a.g, &p, &qw, &ws));
  size_t nx = (size_t)(a.g.n * a.g.c * a.g.h * a.g.w), nw = (size_t)(a.g.k * a.g.c * a.g.r * a.g.s);
  size_t ny = (size_t)(a.g.n * a.g.k * p * qw);
  float *x = rnd(nx, 101, -1, 1), *w = rnd(nw, 102, -1, 1), *dy = rnd(ny, 103, -1, 1), *dw = rnd(nw, 104, -1, 1);
  for (int variant = 0; variant < 2; variant++) {
    a.accumulate = variant;
    a.with_dx = !variant;
    struct operand o[] = {{T_F32, NO_CHECK, nx, x}, {T_F32, NO_CHECK, nw, w},  {T_F32, CHECK, ny, NULL},
                          {T_F32, NO_CHECK, (size_t)ws, NULL}, {T_F32, NO_CHECK, ny, dy},
                          {T_F32, variant ? NO_CHECK : CHECK, nx, NULL}, {T_F32, CHECK, nw, dw}};
    compare(variant ? "conv2d (dw accumulate, no dx)" : "conv2d", o, 7, run_conv, &a, 1e-4, 1e-4);
  }
  free(x);
  free(w);
  free(dy);
  free(dw);
}

/* Max pooling forward then backward: x, y, idx, dy, dx. */
static int run_pool(strata_queue_t q, const strata_mem_t *m, const void *arg) {
  const struct strata_pool2d *g = arg;
  int rc = strata_maxpool_fwd(q, g, m[0], m[1], m[2]);
  if (rc)
    return rc;
  return strata_maxpool_bwd(q, g, m[3], m[2], m[4]);
}

Test(cuda, maxpool) {
  NEED_CUDA();
  static const struct strata_pool2d geoms[] = {
      {.n = 2, .c = 3, .h = 9, .w = 10, .size = 3, .stride = 2}, /* overlapping windows */
      {.n = 1, .c = 5, .h = 8, .w = 8, .size = 2, .stride = 2},
  };
  for (size_t i = 0; i < sizeof geoms / sizeof geoms[0]; i++) {
    const struct strata_pool2d *g = &geoms[i];
    int64_t p, qw;
    OK(strata_pool2d_shape(g, &p, &qw));
    size_t nx = (size_t)(g->n * g->c * g->h * g->w), ny = (size_t)(g->n * g->c * p * qw);
    float *x = rnd(nx, 111 + (uint32_t)i, -1, 1), *dy = rnd(ny, 121 + (uint32_t)i, -1, 1);
    struct operand o[] = {{T_F32, NO_CHECK, nx, x},
                          {T_F32, CHECK, ny, NULL},
                          {T_I32, CHECK, ny, NULL},
                          {T_F32, NO_CHECK, ny, dy},
                          {T_F32, CHECK, nx, NULL}};
    compare("maxpool", o, 5, run_pool, g, 1e-6, 1e-6);
    free(x);
    free(dy);
  }
}

/* ---- the fused attention (kernels/attention.k), and the kernel ops on bf16 operands ---- */

struct attn_arg {
  int64_t b, t, h, hd;
  float scale;
  int causal;
};

/* The fused attention forward then backward: qkv, out, lse, dout, dqkv. */
static int run_attention(strata_queue_t q, const strata_mem_t *m, const void *arg) {
  const struct attn_arg *a = arg;
  int rc = strata_attention_fwd(q, m[0], m[1], m[2], a->b, a->t, a->h, a->hd, a->scale, a->causal);
  if (rc)
    return rc;
  return strata_attention_bwd(q, m[0], m[1], m[3], m[2], m[4], a->b, a->t, a->h, a->hd, a->scale, a->causal);
}

/* Against the host's fused attention (its own blocked code): out, lse and dqkv within float32 sums in other orders;
** the same bits from run to run on the GPU (each output summed by one thread in a fixed order). Shapes: one tile,
** several tiles and blocks, head_dim over one chunk of 64 columns, causal or not. */
Test(cuda, attention) {
  NEED_CUDA();
  static const struct attn_arg shapes[] = {{2, 7, 3, 5, 0.4472136f, 1},   {2, 7, 3, 5, 0.4472136f, 0},
                                           {1, 70, 2, 80, 0.1118034f, 1}, {2, 45, 1, 64, 0.125f, 0},
                                           {1, 300, 4, 64, 0.125f, 1}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    const struct attn_arg *a = &shapes[i];
    size_t rows = (size_t)(a->b * a->t), d = (size_t)(a->h * a->hd), nl = (size_t)(a->b * a->h * a->t);
    float *qkv = rnd(rows * 3 * d, 131 + (uint32_t)i, -1.5f, 1.5f), *dout = rnd(rows * d, 141 + (uint32_t)i, -1, 1);
    struct operand o[] = {{T_F32, NO_CHECK, rows * 3 * d, qkv},
                          {T_F32, CHECK, rows * d, NULL},
                          {T_F32, CHECK, nl, NULL},
                          {T_F32, NO_CHECK, rows * d, dout},
                          {T_F32, CHECK, rows * 3 * d, NULL}};
    char what[96];
    snprintf(what, sizeof what, "attention B %lld T %lld H %lld hd %lld causal %d", (long long)a->b, (long long)a->t,
             (long long)a->h, (long long)a->hd, a->causal);
    compare(what, o, 5, run_attention, a, 1e-5, 1e-4);
    void *r1[5], *r2[5];
    run_on(cuda_dev, o, 5, run_attention, a, r1);
    run_on(cuda_dev, o, 5, run_attention, a, r2);
    for (int k = 0; k < 5; k++) {
      cr_expect(memcmp(r1[k], r2[k], o[k].n * 4) == 0, "%s: operand %d differs between two runs", what, k);
      free(r1[k]);
      free(r2[k]);
    }
    free(qkv);
    free(dout);
  }
}

/* An op on bfloat16 copies of some of its operands: bit i of `bf` makes operand i bfloat16 (converted from the
** float32 operand before the op, and back after it). */
struct bf_arg {
  op_fn fn;
  const void *arg;
  unsigned bf;
  int nops;
  const struct operand *o;
};

static int run_bf16(strata_queue_t q, const strata_mem_t *m, const void *arg) {
  const struct bf_arg *a = arg;
  strata_buffer_t b[MAX_OPERANDS] = {0};
  strata_mem_t m2[MAX_OPERANDS];
  int dev = strata_queue_device(q), rc = STRATA_OK;
  for (int i = 0; i < a->nops && !rc; i++) {
    m2[i] = m[i];
    if (!(a->bf & (1u << i)))
      continue;
    rc = strata_buffer_new(dev, a->o[i].n * 2 + 2, &b[i]);
    if (!rc) {
      m2[i] = strata_mem_typed(b[i], 0, STRATA_BFLOAT16);
      rc = strata_convert(q, m[i], m2[i], (int64_t)a->o[i].n);
    }
  }
  if (!rc)
    rc = a->fn(q, m2, a->arg);
  for (int i = 0; i < a->nops && !rc; i++)
    if (a->bf & (1u << i))
      rc = strata_convert(q, m2[i], m[i], (int64_t)a->o[i].n);
  int rc2 = strata_queue_finish(q);
  for (int i = 0; i < a->nops; i++)
    if (b[i])
      strata_buffer_free(b[i]);
  return rc ? rc : rc2;
}

/* Round each operand of a bf_arg's mask to bfloat16 in place (float32 buffers holding bfloat16 values). */
static int round_masked(strata_queue_t q, const strata_mem_t *m, const struct bf_arg *a) {
  int dev = strata_queue_device(q), rc = STRATA_OK;
  for (int i = 0; i < a->nops && !rc; i++) {
    if (!(a->bf & (1u << i)))
      continue;
    strata_buffer_t b;
    rc = strata_buffer_new(dev, a->o[i].n * 2 + 2, &b);
    if (rc)
      break;
    strata_mem_t h = strata_mem_typed(b, 0, STRATA_BFLOAT16);
    rc = strata_convert(q, m[i], h, (int64_t)a->o[i].n);
    if (!rc)
      rc = strata_convert(q, h, m[i], (int64_t)a->o[i].n);
    int rc2 = strata_queue_finish(q);
    strata_buffer_free(b);
    rc = rc ? rc : rc2;
  }
  return rc;
}

/* The attention of a bf_arg on float32 operands holding bfloat16 values: the masked operands rounded before the
** forward, between it and the backward (out, which the backward reads) and after — what a kernel that widens
** bfloat16 operands, computes in float32 and rounds each output once gives, without the host's bfloat16 kernels. */
static int run_attention_bf16_values_in_f32(strata_queue_t q, const strata_mem_t *m, const void *arg) {
  const struct bf_arg *a = arg;
  const struct attn_arg *t = a->arg;
  int rc = round_masked(q, m, a);
  if (!rc)
    rc = strata_attention_fwd(q, m[0], m[1], m[2], t->b, t->t, t->h, t->hd, t->scale, t->causal);
  if (!rc)
    rc = round_masked(q, m, a);
  if (!rc)
    rc = strata_attention_bwd(q, m[0], m[1], m[3], m[2], m[4], t->b, t->t, t->h, t->hd, t->scale, t->causal);
  if (!rc)
    rc = round_masked(q, m, a);
  return rc;
}

/*
** The kernel ops with bfloat16 activations as the bf16 training path types them (statistics, losses, log-sum-exps
** and parameter gradients float32; a few with every float operand bfloat16), against the host on the same bfloat16
** values: both compute in float32 and round once, so within 2^-7 of the host's value (two float32 results a few ulps
** apart may round one bfloat16 step apart) plus 2e-3 for float32 sums in other orders on inputs of magnitude <= 8.
*/
Test(cuda, bf16_kernel_ops_against_the_host) {
  NEED_CUDA();
  const int64_t n = 4099, rows = 67, cols = 300;
  size_t rc = (size_t)(rows * cols);
  float *x = rnd(rc, 151, -3, 3), *y = rnd(rc, 152, -1, 1), *g = rnd((size_t)cols, 153, 0.5f, 1.5f);
  float *be = rnd((size_t)cols, 154, -1, 1), *dg = rnd((size_t)cols, 155, -1, 1);
  int32_t tok[301];
  for (int i = 0; i < 301; i++)
    tok[i] = (int32_t)((i * 7919) % 53) - 1; /* -1 .. 51 of a vocabulary of 50: out of range, repeats */
  struct ew_arg gelu = {.n = n, .which = 1}, add = {.n = n, .which = 4}, scale = {.n = n, .alpha = -1.75f, .which = 5};
  struct ew_arg bias = {.rows = rows, .cols = cols, .which = 7}, bgrad = {.rows = rows, .cols = cols, .which = 8};
  struct row_arg ln = {.rows = rows, .cols = cols, .eps = 1e-5f}, sm = {.rows = 3 * 75, .cols = 75, .scale = 0.3f,
                                                                         .causal = 1};
  struct tok_arg emb = {.n = 301, .dim = 65, .vocab = 50, .accumulate = 1}, xe = {.n = rows, .vocab = cols,
                                                                                   .scale = 1.0f / 67};
  struct opt_arg ss = {.n = (int64_t)rc, .accumulate = 1};
  struct attn_arg at = {2, 45, 2, 24, 0.2041241f, 1};
  float start = 2.5f;
  const struct operand o_ew[] = {{T_F32, NO_CHECK, (size_t)n, x}, {T_F32, CHECK, (size_t)n, y},
                                 {T_F32, CHECK, (size_t)n, NULL}};
  const struct operand o_sc[] = {{T_F32, CHECK, (size_t)n, x}};
  const struct operand o_bias[] = {{T_F32, CHECK, rc, x}, {T_F32, CHECK, (size_t)cols, g}};
  const struct operand o_ln[] = {{T_F32, NO_CHECK, rc, x},          {T_F32, NO_CHECK, (size_t)cols, g},
                                 {T_F32, NO_CHECK, (size_t)cols, be}, {T_F32, CHECK, rc, NULL},
                                 {T_F32, CHECK, (size_t)rows, NULL}, {T_F32, CHECK, (size_t)rows, NULL},
                                 {T_F32, NO_CHECK, rc, y},          {T_F32, CHECK, rc, NULL},
                                 {T_F32, CHECK, (size_t)cols, dg},   {T_F32, CHECK, (size_t)cols, be}};
  const size_t smn = (size_t)(3 * 75 * 75);
  const struct operand o_sm[] = {{T_F32, NO_CHECK, smn, x}, {T_F32, CHECK, smn, NULL}, {T_F32, NO_CHECK, smn, y},
                                 {T_F32, CHECK, smn, NULL}};
  const struct operand o_emb[] = {{T_I32, NO_CHECK, 301, tok},
                                  {T_F32, NO_CHECK, 50 * 65, x},
                                  {T_F32, CHECK, 301 * 65, NULL},
                                  {T_F32, NO_CHECK, 301 * 65, y},
                                  {T_F32, CHECK, 50 * 65, y}};
  int32_t tgt[67];
  for (int r = 0; r < 67; r++)
    tgt[r] = r % 10 == 3 ? -1 : (r * 131) % 300;
  const struct operand o_xe[] = {{T_F32, NO_CHECK, rc, x}, {T_I32, NO_CHECK, 67, tgt}, {T_F32, CHECK, 67, NULL},
                                 {T_F32, CHECK, rc, NULL}};
  const struct operand o_ss[] = {{T_F32, NO_CHECK, rc, x}, {T_F32, CHECK, 1, &start}};
  const size_t an = 2 * 45 * 48;
  const struct operand o_at[] = {{T_F32, NO_CHECK, 3 * an, x},
                                 {T_F32, CHECK, an, NULL},
                                 {T_F32, CHECK, 2 * 2 * 45, NULL},
                                 {T_F32, NO_CHECK, an, y},
                                 {T_F32, CHECK, 3 * an, NULL}};
  const struct bf_arg cases[] = {
      {run_ew, &gelu, 7, 3, o_ew},     {run_ew, &add, 7, 3, o_ew},        {run_ew, &add, 5, 3, o_ew},
      {run_ew, &scale, 1, 1, o_sc},    {run_ew, &bias, 1, 2, o_bias},     {run_ew, &bias, 3, 2, o_bias},
      {run_ew, &bgrad, 1, 2, o_bias},  {run_ew, &bgrad, 3, 2, o_bias},    {run_layernorm, &ln, 0xc9, 10, o_ln},
      {run_layernorm, &ln, 0x3ff, 10, o_ln}, {run_softmax, &sm, 0xf, 4, o_sm}, {run_embedding, &emb, 0xe, 5, o_emb},
      {run_embedding, &emb, 0x1e, 5, o_emb}, {run_xent, &xe, 0x9, 4, o_xe}, {run_xent, &xe, 0xd, 4, o_xe},
      {run_sumsq, &ss, 1, 2, o_ss},    {run_attention, &at, 0x1b, 5, o_at}, {run_attention, &at, 0x1f, 5, o_at},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char what[64];
    snprintf(what, sizeof what, "bf16 case %zu (mask 0x%x)", i, cases[i].bf);
    /* The host's own bfloat16 attention (bfloat16 activations, float32 lse: case 16) rounds the probabilities and
    ** dS to bfloat16 for its AMX / AVX-512 BF16 products, as FlashAttention does; the shared kernel keeps them
    ** float32. There the reference is the host's float32 attention on the same bfloat16 values, outputs rounded
    ** once: what the kernel computes, up to float32 sums in other orders. */
    op_fn host_fn = cases[i].fn == run_attention && cases[i].bf == 0x1b ? run_attention_bf16_values_in_f32 : run_bf16;
    compare_with(what, cases[i].o, cases[i].nops, run_bf16, host_fn, &cases[i], 2e-3, 1.0 / 128);
  }
  free(x);
  free(y);
  free(g);
  free(be);
  free(dg);
}

/* ------------------------------------------------------------ copies, events */

static unsigned char *bytes_pattern(size_t n, unsigned seed) {
  unsigned char *p = malloc(n ? n : 1);
  cr_assert(p);
  for (size_t i = 0; i < n; i++)
    p[i] = (unsigned char)((i * 131u + seed * 17u + (i >> 8)) & 0xff);
  return p;
}

/*
** Copy `len` bytes from `from` (at byte offset soff) to `to` (at doff) with
** the queue on the device `qdev` (one of the two), then check the bytes
** that arrived and that the destination's bytes around them did not change.
*/
static void copy_check(int from, int to, int qdev, size_t len, size_t soff, size_t doff) {
  size_t ssize = soff + len + 5, dsize = doff + len + 9;
  unsigned char *src = bytes_pattern(ssize, 1), *dst0 = bytes_pattern(dsize, 2), *got = malloc(dsize);
  cr_assert(got);
  strata_buffer_t s, d;
  strata_queue_t qs, qd, q;
  OK(strata_queue_new(from, &qs));
  OK(strata_queue_new(to, &qd));
  OK(strata_buffer_new(from, ssize, &s));
  OK(strata_buffer_new(to, dsize, &d));
  OK(strata_buffer_upload(qs, s, 0, src, ssize));
  OK(strata_buffer_upload(qd, d, 0, dst0, dsize));
  q = qdev == from ? qs : qd;
  OK(strata_buffer_copy(q, d, doff, s, soff, len));
  OK(strata_queue_finish(q));
  OK(strata_buffer_download(qd, d, 0, got, dsize));
  cr_expect(memcmp(got, dst0, doff) == 0, "copy %d -> %d: bytes before the destination changed", from, to);
  cr_expect(memcmp(got + doff, src + soff, len) == 0, "copy %d -> %d of %zu bytes (queue on %d): data differs", from,
            to, len, qdev);
  cr_expect(memcmp(got + doff + len, dst0 + doff + len, dsize - doff - len) == 0,
            "copy %d -> %d: bytes after the destination changed", from, to);
  strata_buffer_free(s);
  strata_buffer_free(d);
  strata_queue_free(qs);
  strata_queue_free(qd);
  free(src);
  free(dst0);
  free(got);
}

Test(cuda, cross_backend_copies) {
  NEED_CUDA();
  /* Small chunks so that the odd sizes below take several double-buffered rounds. */
  setenv("STRATA_STAGING_CHUNK", "1000", 1);
  static const size_t lens[] = {1, 3, 999, 1000, 1001, 4097, 65537};
  for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
    copy_check(cuda_dev, host_dev, cuda_dev, lens[i], 1, 7);
    copy_check(cuda_dev, host_dev, host_dev, lens[i], 5, 0);
    copy_check(host_dev, cuda_dev, cuda_dev, lens[i], 0, 3);
    copy_check(host_dev, cuda_dev, host_dev, lens[i], 2, 13);
  }
  unsetenv("STRATA_STAGING_CHUNK");
  copy_check(host_dev, cuda_dev, cuda_dev, (5u << 20) + 13, 1, 1); /* default 4M chunks */
  copy_check(cuda_dev, host_dev, host_dev, (5u << 20) + 13, 3, 2);
}

Test(cuda, same_device_copy) {
  NEED_CUDA();
  copy_check(cuda_dev, cuda_dev, cuda_dev, 12345, 3, 5);
}

Test(cuda, peer_copy) {
  NEED_CUDA();
#ifdef STRATA_TEST_CUDA_SELF_CHECK
  int second = tc_find_device("host", 2);
#else
  int second = tc_find_device("cuda", 1);
#endif
  if (second < 0)
    cr_skip_test("peer copy needs two CUDA devices, this machine has one");
  static const size_t lens[] = {1, 4093, (3u << 20) + 7};
  for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
    copy_check(cuda_dev, second, cuda_dev, lens[i], 1, 2);
    copy_check(cuda_dev, second, second, lens[i], 0, 5);
    copy_check(second, cuda_dev, cuda_dev, lens[i], 7, 0);
  }
}

/* Work on queue A, an event, queue B waits for it on the device: B sees A's result. */
Test(cuda, events_order_queues) {
  NEED_CUDA();
  const int64_t n = 1 << 20;
  strata_queue_t qa, qb;
  strata_buffer_t buf;
  strata_event_t ev;
  OK(strata_queue_new(cuda_dev, &qa));
  OK(strata_queue_new(cuda_dev, &qb));
  OK(strata_buffer_new(cuda_dev, (size_t)n * 4, &buf));
  OK(strata_fill(qa, strata_mem(buf, 0), 1.0f, n));
  OK(strata_scale(qa, strata_mem(buf, 0), 3.0f, n));
  OK(strata_event_record(qa, &ev));
  OK(strata_event_wait(qb, ev));
  OK(strata_scale(qb, strata_mem(buf, 0), 2.0f, n));
  float *h = malloc((size_t)n * 4);
  cr_assert(h);
  OK(strata_buffer_read(qb, buf, 0, h, (size_t)n * 4));
  OK(strata_queue_finish(qb));
  OK(strata_event_sync(ev));
  size_t bad = 0;
  for (int64_t i = 0; i < n; i++)
    bad += h[i] != 6.0f;
  cr_expect_eq(bad, (size_t)0, "%zu of %lld values are not 6 (first: %g)", bad, (long long)n, (double)h[0]);
  strata_event_free(ev);
  strata_buffer_free(buf);
  strata_queue_free(qa);
  strata_queue_free(qb);
  free(h);
}

/* The runtime's accounting sees CUDA allocations; memory is returned on free. */
Test(cuda, memory_accounting) {
  NEED_CUDA();
  uint64_t used0, used1, used2;
  OK(strata_device_memory(cuda_dev, &used0, NULL, NULL));
  strata_buffer_t b;
  OK(strata_buffer_new(cuda_dev, 64u << 20, &b));
  OK(strata_device_memory(cuda_dev, &used1, NULL, NULL));
  cr_expect_eq(used1 - used0, (uint64_t)64 << 20);
  strata_buffer_free(b);
  OK(strata_device_memory(cuda_dev, &used2, NULL, NULL));
  cr_expect_eq(used2, used0);
}

/* ---- bf16: convert and GEMM ---- */

/* Convert `n` values from x (type xt) to a buffer of type yt on device `dev`; the result read back into out
** (yt's element size each). */
static void convert_on(int dev, const void *x, int xt, int yt, size_t n, void *out) {
  strata_queue_t q;
  strata_buffer_t bx, by;
  size_t xs = strata_dtype_size(xt), ys = strata_dtype_size(yt);
  OK(strata_queue_new(dev, &q));
  OK(strata_buffer_new(dev, n * xs, &bx));
  OK(strata_buffer_new(dev, n * ys, &by));
  OK(strata_buffer_upload(q, bx, 0, x, n * xs));
  OK(strata_convert(q, strata_mem_typed(bx, 0, xt), strata_mem_typed(by, 0, yt), (int64_t)n));
  OK(strata_buffer_download(q, by, 0, out, n * ys));
  OK(strata_queue_finish(q));
  strata_buffer_free(bx);
  strata_buffer_free(by);
  strata_queue_free(q);
}

/* float32 -> bf16 rounds as the host does (kernels/dialect.h), bit for bit, over random bit patterns of every
** exponent (NaNs, denormals and ties among them); bf16 -> float32 is exact for all 65536 patterns. */
Test(cuda, bf16_convert_as_the_host) {
  NEED_CUDA();
  enum { N = 1 << 18 };
  uint32_t *bits = malloc(N * 4);
  uint16_t *gc = malloc(N * 2), *gh = malloc(N * 2);
  uint64_t s = 7;
  for (size_t i = 0; i < N; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    bits[i] = i < 65536 ? (uint32_t)i << 16 | (uint32_t)(s >> 48 & 0xffff) : (uint32_t)(s >> 32);
  }
  convert_on(cuda_dev, bits, STRATA_FLOAT32, STRATA_BFLOAT16, N, gc);
  convert_on(host_dev, bits, STRATA_FLOAT32, STRATA_BFLOAT16, N, gh);
  for (size_t i = 0; i < N; i++)
    cr_assert_eq(gc[i], gh[i], "float32 0x%08x: CUDA 0x%04x, host 0x%04x", bits[i], gc[i], gh[i]);
  uint16_t *all = malloc(65536 * 2);
  uint32_t *wide = malloc(65536 * 4);
  for (uint32_t i = 0; i < 65536; i++)
    all[i] = (uint16_t)i;
  convert_on(cuda_dev, all, STRATA_BFLOAT16, STRATA_FLOAT32, 65536, wide);
  for (uint32_t i = 0; i < 65536; i++)
    cr_assert_eq(wide[i], i << 16, "bf16 0x%04x widened to 0x%08x", i, wide[i]);
  free(bits);
  free(gc);
  free(gh);
  free(all);
  free(wide);
}

/* bf16 A and B (batched, A transposed), C bf16 and float32, against the host's bf16 GEMM on the same operands:
** both sum in float32 (in other orders), so within 1e-5 of sum |a b| plus 2^-7 of C when C is bf16. */
Test(cuda, bf16_gemm_against_the_host) {
  NEED_CUDA();
  const int64_t m = 67, n = 45, k = 129, batch = 3;
  const size_t na = (size_t)(batch * k * m), nb = (size_t)(batch * k * n), nc = (size_t)(batch * m * n);
  float *fa = rnd(na, 31, -1, 1), *fb = rnd(nb, 32, -1, 1);
  for (int cbf = 0; cbf < 2; cbf++) {
    float *res[2];
    for (int side = 0; side < 2; side++) {
      int dev = side ? host_dev : cuda_dev, ct = cbf ? STRATA_BFLOAT16 : STRATA_FLOAT32;
      strata_queue_t q;
      strata_buffer_t a32, b32, a, b, c, c32;
      OK(strata_queue_new(dev, &q));
      OK(strata_buffer_new(dev, na * 4, &a32));
      OK(strata_buffer_new(dev, nb * 4, &b32));
      OK(strata_buffer_new(dev, na * 2, &a));
      OK(strata_buffer_new(dev, nb * 2, &b));
      OK(strata_buffer_new(dev, nc * 4, &c));
      OK(strata_buffer_new(dev, nc * 4, &c32));
      OK(strata_buffer_upload(q, a32, 0, fa, na * 4));
      OK(strata_buffer_upload(q, b32, 0, fb, nb * 4));
      OK(strata_convert(q, strata_mem(a32, 0), strata_mem_typed(a, 0, STRATA_BFLOAT16), (int64_t)na));
      OK(strata_convert(q, strata_mem(b32, 0), strata_mem_typed(b, 0, STRATA_BFLOAT16), (int64_t)nb));
      OK(strata_gemm(q, STRATA_TRANS, STRATA_NO_TRANS, m, n, k, 1.0f, strata_mem_typed(a, 0, STRATA_BFLOAT16), m, k * m,
                     strata_mem_typed(b, 0, STRATA_BFLOAT16), n, k * n, 0.0f, strata_mem_typed(c, 0, ct), n, m * n,
                     batch));
      if (cbf)
        OK(strata_convert(q, strata_mem_typed(c, 0, STRATA_BFLOAT16), strata_mem(c32, 0), (int64_t)nc));
      res[side] = malloc(nc * 4);
      OK(strata_buffer_download(q, cbf ? c32 : c, 0, res[side], nc * 4));
      OK(strata_queue_finish(q));
      strata_buffer_t all[] = {a32, b32, a, b, c, c32};
      for (int i = 0; i < 6; i++)
        strata_buffer_free(all[i]);
      strata_queue_free(q);
    }
    for (size_t i = 0; i < nc; i++) {
      double tol = 1e-5 * (double)k + (cbf ? fabs(res[1][i]) / 128 : 0);
      cr_assert(fabs((double)res[0][i] - res[1][i]) <= tol, "bf16 gemm (C %s) [%zu]: CUDA %.8g, host %.8g",
                cbf ? "bf16" : "fp32", i, (double)res[0][i], (double)res[1][i]);
    }
    free(res[0]);
    free(res[1]);
  }
  free(fa);
  free(fb);
}

/* ----------------------------------------------------------- whole models */

#define TRAIN_STEPS 6

/* Train `m` on `data` for TRAIN_STEPS steps on device `dev`: each step's loss, and the final parameters (malloc'd). */
static float *train_on(int dev, strata_model_t m, strata_dataset_t data, float *loss, size_t *n) {
  struct strata_train_options o;
  strata_train_options_default(&o);
  o.batch = 4;
  o.accum = 2;
  o.steps = TRAIN_STEPS;
  o.warmup = 1;
  o.lr = 1e-2f;
  o.eps = 1e-6f; /* as test-parallel: a gradient near eps would turn last-bit differences into whole AdamW steps */
  o.device = dev;
  strata_trainer_t tr;
  OK(strata_trainer_new(m, data, &o, &tr));
  for (int s = 0; s < TRAIN_STEPS; s++) {
    struct strata_step_stats st;
    OK(strata_trainer_step(tr, &st));
    loss[s] = st.loss;
  }
  OK(strata_trainer_params(tr, NULL, n));
  float *p = malloc(*n * 4 + 4);
  cr_assert(p);
  OK(strata_trainer_params(tr, p, n));
  strata_trainer_free(tr);
  return p;
}

/*
** The whole model trained on the GPU and on the host, from the same start on
** the same batches: cuBLAS and the host's BLAS sum every product in other
** orders, so the runs drift apart in the last bits; within the tolerance of
** the mixed pipelines (test-pipeline, test-parallel): each step's loss within
** 1e-3 relative, every parameter within 2e-4 after the steps. And the model
** learned (the last loss below the first), so that equal garbage cannot pass.
*/
static void trains_as_on_the_host(const char *what, strata_model_t m, strata_dataset_t data) {
  float lc[TRAIN_STEPS], lh[TRAIN_STEPS];
  size_t nc = 0, nh = 0;
  float *pc = train_on(cuda_dev, m, data, lc, &nc);
  float *ph = train_on(host_dev, m, data, lh, &nh);
  double worst_loss = 0;
  for (int s = 0; s < TRAIN_STEPS; s++) {
    double rel = fabs((double)lc[s] - lh[s]) / fabs((double)lh[s]);
    worst_loss = rel > worst_loss ? rel : worst_loss;
    cr_expect(rel <= 1e-3, "%s step %d: loss %.7g on the GPU, %.7g on the host", what, s + 1, lc[s], lh[s]);
  }
  cr_expect_lt(lc[TRAIN_STEPS - 1], lc[0], "%s did not learn on the GPU: loss %.7g after %.7g", what,
               lc[TRAIN_STEPS - 1], lc[0]);
  cr_assert_eq(nc, nh);
  size_t at = 0;
  double excess = tc_excess(pc, ph, nc, 2e-4, 0, &at);
  cr_log_info("%s, %d steps: losses within %.3g relative, parameters within %.3g (bounds 1e-3, 2e-4)", what,
              TRAIN_STEPS, worst_loss, excess * 2e-4);
  cr_expect_leq(excess, 1.0, "%s: parameter %zu is %.7g on the GPU, %.7g on the host", what, at, (double)pc[at],
                (double)ph[at]);
  free(pc);
  free(ph);
}

/* One GPU alone trains a GPT and a CNN as the host does (the GPU machine has one GPU: no second one needed). */
Test(cuda, gpt_and_cnn_train_as_on_the_host) {
  NEED_CUDA();
  char dir[256], corpus[300];
  snprintf(dir, sizeof dir, "%s/strata-cuda-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  cr_assert_not_null(mkdtemp(dir));
  snprintf(corpus, sizeof corpus, "%s/corpus.txt", dir);
  FILE *f = fopen(corpus, "w");
  cr_assert_not_null(f);
  for (int i = 0; i < 200; i++)
    fprintf(f, "a kernel on the GPU and a loop on the CPU must learn the same sentence %d times. ", i % 5);
  fclose(f);
  strata_dataset_t text, images;
  OK(strata_dataset_text(corpus, 0.2, &text));
  struct strata_model_config gpt = {.kind = STRATA_MODEL_GPT, .vocab = 256, .context = 16, .d_model = 32,
                                    .layers = 2, .heads = 2, .d_ff = 64};
  strata_model_t m;
  OK(strata_model_from_config(&gpt, &m));
  trains_as_on_the_host("GPT", m, text);
  strata_model_free(m);
  strata_dataset_free(text);
  unlink(corpus);
  rmdir(dir);
  OK(strata_dataset_images(200, 8, 3, 5, &images));
  struct strata_model_config cnn = {.kind = STRATA_MODEL_CNN, .image = 8, .channels = 1, .classes = 3,
                                    .conv = {4, 8}};
  OK(strata_model_from_config(&cnn, &m));
  trains_as_on_the_host("CNN", m, images);
  strata_model_free(m);
  strata_dataset_free(images);
}
