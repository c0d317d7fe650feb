/* SPDX-License-Identifier: MIT */
/* test-ops-llama.c — the LLaMA ops (RMSNorm, SwiGLU, RoPE, grouped-query attention) against float64 references on
** the host and on OpenCL (PoCL), in float32 and bfloat16; gradients against central differences; the Llama 3
** inverse frequencies against a hand computation; bad arguments. */
#include <float.h>
#include <stdio.h>

#include <strata/model.h>

#include "common.h"

#define F32 STRATA_FLOAT32
#define BF16 STRATA_BFLOAT16

/* Tolerances, |got - want| <= ATOL + RTOL |want|: float32 results against float64 carry a few float roundings of
** values of order 1; bfloat16 results carry the one rounding of the output (2^-9 relative) on bfloat16 inputs. */
#define ATOL_F32 2e-5
#define RTOL_F32 2e-5
#define ATOL_BF16 2e-2
#define RTOL_BF16 1e-2

static void setup(void) { setenv("STRATA_HOST_DEVICES", "1", 1); }

TestSuite(llama, .init = setup);

/* ---- bfloat16 on the test's side: round to nearest even (the inputs of the bf16 cases are bf16 values) ---- */

static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* n deterministic values in [lo, hi), bfloat16 values when dtype is BF16. */
static float *values(size_t n, uint32_t seed, float lo, float hi, int dtype) {
  float *x = malloc(n * sizeof *x);
  tc_fill(x, n, seed, lo, hi);
  if (dtype == BF16)
    for (size_t i = 0; i < n; i++)
      x[i] = from_bf16(to_bf16(x[i]));
  return x;
}

/* ---- devices and operands ---- */

/* The device of a case: the host's, or OpenCL's first (skipping the test, with the reason, when there is none). */
static int device_of(const char *backend) {
  int d = tc_find_device(backend, 0);
  if (d < 0 && strcmp(backend, "opencl") == 0)
    cr_skip_test("no OpenCL device (PoCL with POCL_DEVICES=\"pthread pthread\" gives two): %s", strata_last_error());
  cr_assert_geq(d, 0, "no %s device: %s", backend, strata_last_error());
  return d;
}

struct opnd {
  strata_buffer_t b;
  strata_mem_t m;
  size_t n;
};

/* An operand of n elements of dtype on q's device holding x (zeros when x is NULL). */
static struct opnd put(strata_queue_t q, int dev, const float *x, size_t n, int dtype) {
  struct opnd o = {NULL, {0}, n};
  size_t es = dtype == BF16 ? 2 : 4;
  void *h = calloc(n, es);
  for (size_t i = 0; x && i < n; i++) {
    if (dtype == BF16)
      ((uint16_t *)h)[i] = to_bf16(x[i]);
    else
      ((float *)h)[i] = x[i];
  }
  OK(strata_buffer_new(dev, n * es, &o.b));
  OK(strata_buffer_upload(q, o.b, 0, h, n * es));
  OK(strata_queue_finish(q));
  free(h);
  o.m = strata_mem_typed(o.b, 0, dtype);
  return o;
}

/* Its contents as floats (the queue finished first); the caller frees them. */
static float *get(strata_queue_t q, struct opnd o) {
  size_t es = o.m.dtype == BF16 ? 2 : 4;
  void *h = malloc(o.n * es);
  float *x = malloc(o.n * sizeof *x);
  OK(strata_queue_finish(q));
  OK(strata_buffer_download(q, o.b, 0, h, o.n * es));
  for (size_t i = 0; i < o.n; i++)
    x[i] = o.m.dtype == BF16 ? from_bf16(((uint16_t *)h)[i]) : ((float *)h)[i];
  free(h);
  return x;
}

/* Every element of got within tolerance of want (float64). */
static void near(const char *what, const float *got, const double *want, size_t n, int dtype) {
  double atol = dtype == BF16 ? ATOL_BF16 : ATOL_F32, rtol = dtype == BF16 ? RTOL_BF16 : RTOL_F32;
  for (size_t i = 0; i < n; i++)
    cr_assert(fabs(got[i] - want[i]) <= atol + rtol * fabs(want[i]), "%s (%s) element %zu is %.8g, float64 says %.8g",
              what, dtype == BF16 ? "bf16" : "f32", i, (double)got[i], want[i]);
}

/* ---- RMSNorm ---- */

/* y = w x / sqrt(mean x^2 + eps) over one row, in double. */
static void rms_ref_row(const float *x, const float *w, int64_t n, double eps, double *y, double *rstd) {
  double s = 0;
  for (int64_t c = 0; c < n; c++)
    s += (double)x[c] * x[c];
  double r = 1.0 / sqrt(s / (double)n + eps);
  for (int64_t c = 0; c < n; c++)
    y[c] = (double)w[c] * x[c] * r;
  if (rstd)
    *rstd = r;
}

/* The analytic backward in double: dx and dw (dw0 plus the rows' sum). */
static void rms_ref_bwd(const float *x, const float *w, const float *dy, const float *dw0, int64_t rows, int64_t n,
                        double eps, double *dx, double *dw) {
  for (int64_t c = 0; c < n; c++)
    dw[c] = dw0[c];
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * n, *dr = dy + r * n;
    double s = 0, m = 0;
    for (int64_t c = 0; c < n; c++)
      s += (double)xr[c] * xr[c];
    double rs = 1.0 / sqrt(s / (double)n + eps);
    for (int64_t c = 0; c < n; c++)
      m += (double)dr[c] * w[c] * xr[c] * rs;
    m /= (double)n;
    for (int64_t c = 0; c < n; c++) {
      dx[r * n + c] = rs * ((double)dr[c] * w[c] - xr[c] * rs * m);
      dw[c] += (double)dr[c] * xr[c] * rs;
    }
  }
}

/* x, w, y, dy, dx in dtype; rstd and dw float32 (the statistics); dw accumulated onto dw0. */
static void rmsnorm_case(const char *backend, int dtype) {
  const int64_t rows = 7, cols = 45; /* cols past a work-group's stride and not a multiple of anything */
  const double eps = 1e-5;
  int dev = device_of(backend);
  strata_queue_t q;
  OK(strata_queue_new(dev, &q));
  size_t n = (size_t)(rows * cols);
  float *x = values(n, 11, -2.0f, 2.0f, dtype), *w = values((size_t)cols, 12, 0.5f, 1.5f, dtype);
  float *dy = values(n, 13, -1.0f, 1.0f, dtype), *dw0 = values((size_t)cols, 14, -0.5f, 0.5f, F32);
  struct opnd X = put(q, dev, x, n, dtype), W = put(q, dev, w, (size_t)cols, dtype), Y = put(q, dev, NULL, n, dtype);
  struct opnd R = put(q, dev, NULL, (size_t)rows, F32), DY = put(q, dev, dy, n, dtype);
  struct opnd DX = put(q, dev, NULL, n, dtype), DW = put(q, dev, dw0, (size_t)cols, F32);
  OK(strata_rmsnorm_fwd(q, X.m, W.m, Y.m, R.m, rows, cols, (float)eps));
  OK(strata_rmsnorm_bwd(q, X.m, W.m, R.m, DY.m, DX.m, DW.m, rows, cols, 1));
  float *y = get(q, Y), *rstd = get(q, R), *dx = get(q, DX), *dw = get(q, DW);
  double *ry = malloc(n * sizeof *ry), *rr = malloc((size_t)rows * sizeof *rr), *rdx = malloc(n * sizeof *rdx);
  double *rdw = malloc((size_t)cols * sizeof *rdw);
  for (int64_t r = 0; r < rows; r++)
    rms_ref_row(x + r * cols, w, cols, eps, ry + r * cols, rr + r);
  rms_ref_bwd(x, w, dy, dw0, rows, cols, eps, rdx, rdw);
  near("rmsnorm y", y, ry, n, dtype);
  near("rmsnorm rstd", rstd, rr, (size_t)rows, F32);
  near("rmsnorm dx", dx, rdx, n, dtype);
  /* dw sums rows products of bf16 inputs in float32: float32's tolerance per term, summed */
  near("rmsnorm dw", dw, rdw, (size_t)cols, F32);
  /* dx may be dy: in place, the same values */
  OK(strata_rmsnorm_bwd(q, X.m, W.m, R.m, DY.m, DY.m, DW.m, rows, cols, 0));
  float *dx2 = get(q, DY);
  for (size_t i = 0; i < n; i++)
    cr_assert_eq(dx2[i], dx[i], "rmsnorm dx in place element %zu: %.8g, out of place %.8g", i, (double)dx2[i],
                 (double)dx[i]);
  free(x), free(w), free(dy), free(dw0), free(y), free(rstd), free(dx), free(dw), free(dx2);
  free(ry), free(rr), free(rdx), free(rdw);
  struct opnd all[] = {X, W, Y, R, DY, DX, DW};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    strata_buffer_free(all[i].b);
  strata_queue_free(q);
}

Test(llama, rmsnorm_host_f32) { rmsnorm_case("host", F32); }
Test(llama, rmsnorm_host_bf16) { rmsnorm_case("host", BF16); }
Test(llama, rmsnorm_opencl_f32) { rmsnorm_case("opencl", F32); }
Test(llama, rmsnorm_opencl_bf16) { rmsnorm_case("opencl", BF16); }

/* The backward against central differences of the float64 forward: L = sum_j g[j] y[j]. */
Test(llama, rmsnorm_gradients_against_central_differences) {
  const int64_t rows = 3, cols = 16;
  const double eps = 1e-5, h = 1e-6;
  int dev = device_of("host");
  strata_queue_t q;
  OK(strata_queue_new(dev, &q));
  size_t n = (size_t)(rows * cols);
  float *x = values(n, 21, -2.0f, 2.0f, F32), *w = values((size_t)cols, 22, 0.5f, 1.5f, F32);
  float *g = values(n, 23, -1.0f, 1.0f, F32), *zero = calloc((size_t)cols, 4);
  struct opnd X = put(q, dev, x, n, F32), W = put(q, dev, w, (size_t)cols, F32), Y = put(q, dev, NULL, n, F32);
  struct opnd R = put(q, dev, NULL, (size_t)rows, F32), G = put(q, dev, g, n, F32);
  struct opnd DX = put(q, dev, NULL, n, F32), DW = put(q, dev, NULL, (size_t)cols, F32);
  OK(strata_rmsnorm_fwd(q, X.m, W.m, Y.m, R.m, rows, cols, (float)eps));
  OK(strata_rmsnorm_bwd(q, X.m, W.m, R.m, G.m, DX.m, DW.m, rows, cols, 0));
  float *dx = get(q, DX), *dw = get(q, DW);
  double yr[16];
  /* L as a function of x[j] (only its row changes) and of w[c] (every row) */
  for (size_t j = 0; j < n; j++) {
    int64_t r = (int64_t)j / cols;
    double l[2];
    for (int s = 0; s < 2; s++) {
      double xs[16];
      for (int64_t c = 0; c < cols; c++)
        xs[c] = x[r * cols + c];
      xs[j % (size_t)cols] += s ? -h : h;
      double ss = 0;
      for (int64_t c = 0; c < cols; c++)
        ss += xs[c] * xs[c];
      double rs = 1.0 / sqrt(ss / (double)cols + eps);
      l[s] = 0;
      for (int64_t c = 0; c < cols; c++)
        l[s] += g[r * cols + c] * w[c] * xs[c] * rs;
    }
    double fd = (l[0] - l[1]) / (2 * h);
    cr_assert(fabs(dx[j] - fd) <= 1e-4 + 1e-4 * fabs(fd), "rmsnorm dx[%zu] = %.8g, central difference %.8g", j,
              (double)dx[j], fd);
  }
  for (int64_t c = 0; c < cols; c++) {
    double l[2];
    for (int s = 0; s < 2; s++) {
      float wsave = w[c];
      l[s] = 0;
      for (int64_t r = 0; r < rows; r++) {
        rms_ref_row(x + r * cols, w, cols, eps, yr, NULL);
        /* the perturbed weight enters through y[c] alone: y[c] is linear in w[c] */
        yr[c] = yr[c] / wsave * (wsave + (s ? -h : h));
        for (int64_t k = 0; k < cols; k++)
          l[s] += g[r * cols + k] * yr[k];
      }
    }
    double fd = (l[0] - l[1]) / (2 * h);
    cr_assert(fabs(dw[c] - fd) <= 1e-4 + 1e-4 * fabs(fd), "rmsnorm dw[%lld] = %.8g, central difference %.8g",
              (long long)c, (double)dw[c], fd);
  }
  free(x), free(w), free(g), free(zero), free(dx), free(dw);
  struct opnd all[] = {X, W, Y, R, G, DX, DW};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    strata_buffer_free(all[i].b);
  strata_queue_free(q);
}

/* ---- SwiGLU ---- */

static void swiglu_case(const char *backend, int dtype) {
  const int64_t rows = 5, cols = 37;
  int dev = device_of(backend);
  strata_queue_t q;
  OK(strata_queue_new(dev, &q));
  size_t n = (size_t)(rows * cols);
  float *gu = values(2 * n, 31, -6.0f, 6.0f, dtype), *dh = values(n, 32, -1.0f, 1.0f, dtype);
  struct opnd GU = put(q, dev, gu, 2 * n, dtype), H = put(q, dev, NULL, n, dtype), DH = put(q, dev, dh, n, dtype);
  struct opnd DGU = put(q, dev, NULL, 2 * n, dtype);
  OK(strata_swiglu_fwd(q, GU.m, H.m, rows, cols));
  OK(strata_swiglu_bwd(q, GU.m, DH.m, DGU.m, rows, cols));
  float *h = get(q, H), *dgu = get(q, DGU);
  double *rh = malloc(n * sizeof *rh), *rd = malloc(2 * n * sizeof *rd);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) {
      double g = gu[r * 2 * cols + c], u = gu[r * 2 * cols + cols + c], s = 1 / (1 + exp(-g)), d = dh[r * cols + c];
      rh[r * cols + c] = g * s * u;
      rd[r * 2 * cols + c] = d * u * s * (1 + g * (1 - s));
      rd[r * 2 * cols + cols + c] = d * g * s;
    }
  near("swiglu h", h, rh, n, dtype);
  near("swiglu dgu", dgu, rd, 2 * n, dtype);
  /* dgu may be gu */
  OK(strata_swiglu_bwd(q, GU.m, DH.m, GU.m, rows, cols));
  float *inplace = get(q, GU);
  for (size_t i = 0; i < 2 * n; i++)
    cr_assert_eq(inplace[i], dgu[i], "swiglu dgu in place element %zu: %.8g, out of place %.8g", i,
                 (double)inplace[i], (double)dgu[i]);
  free(gu), free(dh), free(h), free(dgu), free(rh), free(rd), free(inplace);
  struct opnd all[] = {GU, H, DH, DGU};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    strata_buffer_free(all[i].b);
  strata_queue_free(q);
}

Test(llama, swiglu_host_f32) { swiglu_case("host", F32); }
Test(llama, swiglu_host_bf16) { swiglu_case("host", BF16); }
Test(llama, swiglu_opencl_f32) { swiglu_case("opencl", F32); }
Test(llama, swiglu_opencl_bf16) { swiglu_case("opencl", BF16); }

/* ---- RoPE ---- */

/* Hugging Face's rotation in double of rows (b, t) of ld elements, the angle formed as the ops form it (the float32
** product of the float position and the float frequency), sign -1 for the transpose. */
static void rope_ref(const float *x, double *y, const float *freq, int64_t rows, int64_t seq, int64_t heads,
                     int64_t hd, int64_t ld, int64_t pos0, double sign) {
  int64_t half = hd / 2;
  for (int64_t i = 0; i < rows * ld; i++)
    y[i] = x[i];
  for (int64_t r = 0; r < rows; r++)
    for (int64_t h = 0; h < heads; h++)
      for (int64_t i = 0; i < half; i++) {
        double a = (double)((float)(pos0 + r % seq) * freq[i]), c = cos(a), s = sign * sin(a);
        int64_t at = r * ld + h * hd + i;
        double x1 = x[at], x2 = x[at + half];
        y[at] = x1 * c - x2 * s;
        y[at + half] = x2 * c + x1 * s;
      }
}

/* q|k of a fused q|k|v row: heads 3 + 1 rotated, the v head (and a spare column) past them left alone. */
static void rope_case(const char *backend, int dtype) {
  const int64_t batch = 2, seq = 5, heads = 4, hd = 8, ld = (heads + 1) * hd + 1, pos0 = 3, rows = batch * seq;
  int dev = device_of(backend);
  strata_queue_t q;
  OK(strata_queue_new(dev, &q));
  struct strata_model_config cfg = {.kind = STRATA_MODEL_LLAMA, .rope_theta = 500000.0};
  double f64[4];
  float freq[4];
  OK(strata_rope_inv_freq(&cfg, hd, f64));
  for (int i = 0; i < 4; i++)
    freq[i] = (float)f64[i] * 100.0f; /* larger angles than a real model's, to test the trigonometry */
  size_t n = (size_t)(rows * ld);
  float *x = values(n, 41, -2.0f, 2.0f, dtype), *dy = values(n, 42, -1.0f, 1.0f, dtype);
  struct opnd X = put(q, dev, x, n, dtype), Y = put(q, dev, x, n, dtype), FQ = put(q, dev, freq, 4, F32);
  struct opnd DY = put(q, dev, dy, n, dtype), DX = put(q, dev, dy, n, dtype);
  OK(strata_rope_fwd(q, X.m, Y.m, FQ.m, batch, seq, heads, hd, ld, pos0));
  OK(strata_rope_bwd(q, DY.m, DX.m, FQ.m, batch, seq, heads, hd, ld, pos0));
  float *y = get(q, Y), *dx = get(q, DX);
  double *ry = malloc(n * sizeof *ry), *rdx = malloc(n * sizeof *rdx);
  rope_ref(x, ry, freq, rows, seq, heads, hd, ld, pos0, 1.0);
  rope_ref(dy, rdx, freq, rows, seq, heads, hd, ld, pos0, -1.0);
  near("rope y", y, ry, n, dtype);
  near("rope dx", dx, rdx, n, dtype);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = heads * hd; c < ld; c++)
      cr_assert_eq(y[r * ld + c], x[r * ld + c], "rope wrote column %lld of row %lld, past its heads", (long long)c,
                   (long long)r);
  /* in place (the block's use: q|k rotated inside qkv) */
  OK(strata_rope_fwd(q, X.m, X.m, FQ.m, batch, seq, heads, hd, ld, pos0));
  float *xi = get(q, X);
  for (size_t i = 0; i < n; i++)
    cr_assert_eq(xi[i], y[i], "rope in place element %zu: %.8g, out of place %.8g", i, (double)xi[i], (double)y[i]);
  free(x), free(dy), free(y), free(dx), free(ry), free(rdx), free(xi);
  struct opnd all[] = {X, Y, FQ, DY, DX};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    strata_buffer_free(all[i].b);
  strata_queue_free(q);
}

Test(llama, rope_host_f32) { rope_case("host", F32); }
Test(llama, rope_host_bf16) { rope_case("host", BF16); }
Test(llama, rope_opencl_f32) { rope_case("opencl", F32); }
Test(llama, rope_opencl_bf16) { rope_case("opencl", BF16); }

/* The backward against central differences of the float64 forward: L = sum_j g[j] y[j], y = rope(x). */
Test(llama, rope_gradient_against_central_differences) {
  const int64_t batch = 1, seq = 3, heads = 2, hd = 6, ld = heads * hd, pos0 = 7, rows = batch * seq;
  const double h = 1e-3;
  int dev = device_of("host");
  strata_queue_t q;
  OK(strata_queue_new(dev, &q));
  struct strata_model_config cfg = {.kind = STRATA_MODEL_LLAMA, .rope_theta = 10000.0};
  double f64[3];
  float freq[3];
  OK(strata_rope_inv_freq(&cfg, hd, f64));
  for (int i = 0; i < 3; i++)
    freq[i] = (float)f64[i];
  size_t n = (size_t)(rows * ld);
  float *x = values(n, 51, -2.0f, 2.0f, F32), *g = values(n, 52, -1.0f, 1.0f, F32);
  struct opnd G = put(q, dev, g, n, F32), DX = put(q, dev, NULL, n, F32), FQ = put(q, dev, freq, 3, F32);
  OK(strata_rope_bwd(q, G.m, DX.m, FQ.m, batch, seq, heads, hd, ld, pos0));
  float *dx = get(q, DX);
  double *y = malloc(n * sizeof *y);
  for (size_t j = 0; j < n; j++) {
    double l[2];
    float saved = x[j];
    for (int s = 0; s < 2; s++) {
      x[j] = saved + (float)(s ? -h : h);
      rope_ref(x, y, freq, rows, seq, heads, hd, ld, pos0, 1.0);
      l[s] = 0;
      for (size_t k = 0; k < n; k++)
        l[s] += g[k] * y[k];
    }
    double step = ((double)(saved + (float)h) - (double)(saved - (float)h));
    x[j] = saved;
    double fd = (l[0] - l[1]) / step;
    cr_assert(fabs(dx[j] - fd) <= 1e-5 + 1e-4 * fabs(fd), "rope dx[%zu] = %.8g, central difference %.8g", j,
              (double)dx[j], fd);
  }
  free(x), free(g), free(dx), free(y);
  strata_buffer_free(G.b), strata_buffer_free(DX.b), strata_buffer_free(FQ.b);
  strata_queue_free(q);
}

/* ---- inverse frequencies ---- */

Test(llama, rope_inv_freq_default_and_llama3_by_hand) {
  struct strata_model_config cfg = {.kind = STRATA_MODEL_LLAMA};
  double f[4];
  /* theta 0 is Hugging Face's default 10000: 10000^(-2i/8) = 1, 0.1, 0.01, 0.001 */
  OK(strata_rope_inv_freq(&cfg, 8, f));
  const double plain[4] = {1.0, 0.1, 0.01, 0.001};
  for (int i = 0; i < 4; i++)
    cr_assert(fabs(f[i] - plain[i]) <= 1e-15 * plain[i], "default inv_freq[%d] = %.17g, by hand %.17g", i, f[i],
              plain[i]);
  /*
  ** Llama 3 with factor 8, low_freq_factor 1, high_freq_factor 4, original context 1024: the long wavelength
  ** limit is 1024 / 1 = 1024, the short one 1024 / 4 = 256. Wavelengths 2 pi / f: 6.28, 62.8 (both under 256:
  ** kept), 628.3 (between: smoothed), 6283 (over 1024: divided by 8). For f = 0.01:
  ** s = (1024 / 628.3185307 - 1) / (4 - 1) = (1.6297466 - 1) / 3 = 0.20991553,
  ** f' = (1 - s) 0.01 / 8 + s 0.01 = 0.000987605576 + 0.00209915539 = 0.00308676097.
  */
  cfg.rope_scaling.type = STRATA_ROPE_LLAMA3;
  cfg.rope_scaling.factor = 8;
  cfg.rope_scaling.low_freq_factor = 1;
  cfg.rope_scaling.high_freq_factor = 4;
  cfg.rope_scaling.original_context = 1024;
  OK(strata_rope_inv_freq(&cfg, 8, f));
  const double scaled[4] = {1.0, 0.1, 0.00308676097, 0.000125};
  for (int i = 0; i < 4; i++)
    cr_assert(fabs(f[i] - scaled[i]) <= 1e-9 * scaled[i], "llama3 inv_freq[%d] = %.17g, by hand %.17g", i, f[i],
              scaled[i]);
  /* Llama 3.1 8B's own (theta 500000, head_dim 128, original context 8192): the first frequency is 1 and is kept;
  ** the last, 500000^(-126/128) = 2.4130e-6, has a wavelength of 2.6e6 > 8192 and is divided by 8 */
  cfg.rope_theta = 500000;
  cfg.rope_scaling.original_context = 8192;
  double big[64];
  OK(strata_rope_inv_freq(&cfg, 128, big));
  cr_assert(fabs(big[0] - 1.0) < 1e-15, "llama3.1 inv_freq[0] = %.17g", big[0]);
  double last = pow(500000.0, -126.0 / 128.0) / 8;
  cr_assert(fabs(big[63] - last) <= 1e-12 * last, "llama3.1 inv_freq[63] = %.17g, by hand %.17g", big[63], last);
}

Test(llama, rope_inv_freq_bad_input) {
  struct strata_model_config cfg = {.kind = STRATA_MODEL_LLAMA, .rope_theta = 10000};
  double f[8] = {42};
  cr_assert_eq(strata_rope_inv_freq(&cfg, 7, f), STRATA_ERR_INVALID);
  cr_assert(strstr(strata_last_error(), "head_dim"), "%s", strata_last_error());
  cr_assert_eq(f[0], 42, "out written on failure");
  cr_assert_eq(strata_rope_inv_freq(NULL, 8, f), STRATA_ERR_INVALID);
  cfg.rope_theta = -1;
  cr_assert_eq(strata_rope_inv_freq(&cfg, 8, f), STRATA_ERR_INVALID);
  cr_assert(strstr(strata_last_error(), "rope_theta"), "%s", strata_last_error());
  cfg.rope_theta = 10000;
  cfg.rope_scaling.type = 7;
  cr_assert_eq(strata_rope_inv_freq(&cfg, 8, f), STRATA_ERR_INVALID);
  cr_assert(strstr(strata_last_error(), "rope_scaling"), "%s", strata_last_error());
  cfg.rope_scaling.type = STRATA_ROPE_LLAMA3;
  cfg.rope_scaling.factor = 8;
  cfg.rope_scaling.low_freq_factor = 4;
  cfg.rope_scaling.high_freq_factor = 1;
  cfg.rope_scaling.original_context = 8192;
  cr_assert_eq(strata_rope_inv_freq(&cfg, 8, f), STRATA_ERR_INVALID);
  cr_assert(strstr(strata_last_error(), "high_freq_factor"), "%s", strata_last_error());
  cfg.rope_scaling.low_freq_factor = 1;
  cfg.rope_scaling.high_freq_factor = 4;
  cfg.rope_scaling.factor = 0;
  cr_assert_eq(strata_rope_inv_freq(&cfg, 8, f), STRATA_ERR_INVALID);
  cr_assert(strstr(strata_last_error(), "factor"), "%s", strata_last_error());
  cr_assert_eq(f[0], 42, "out written on failure");
}

/* ---- grouped-query attention ---- */

/*
** The definition in double: for query head h of sequence b, key/value head h / (H / KV);
** P = softmax(scale q k^T) (causal: keys up to the query), out = P v, lse; backward with
** dS = P (dO v^T - rowsum(dO o out)), dq = scale dS k, dk += scale dS^T q, dv += P^T dO
** (summed over the group's query heads).
*/
static void gqa_ref(const float *qkv, const float *dout, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t hd,
                    double scale, int causal, double *out, double *lse, double *dqkv) {
  int64_t D = H * hd, ld = (H + 2 * KV) * hd, G = H / KV;
  double *p = malloc((size_t)T * sizeof *p), *dp = malloc((size_t)T * sizeof *dp);
  memset(dqkv, 0, (size_t)(B * T * ld) * sizeof *dqkv);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      int64_t kh = h / G;
      const float *qb = qkv + b * T * ld + h * hd, *kb = qkv + b * T * ld + D + kh * hd, *vb = kb + KV * hd;
      double *dqb = dqkv + b * T * ld + h * hd, *dkb = dqkv + b * T * ld + D + kh * hd, *dvb = dkb + KV * hd;
      for (int64_t i = 0; i < T; i++) {
        int64_t n = causal ? i + 1 : T;
        double mx = -DBL_MAX, sum = 0;
        for (int64_t j = 0; j < n; j++) {
          double s = 0;
          for (int64_t d = 0; d < hd; d++)
            s += (double)qb[i * ld + d] * kb[j * ld + d];
          p[j] = scale * s;
          mx = p[j] > mx ? p[j] : mx;
        }
        for (int64_t j = 0; j < n; j++)
          sum += exp(p[j] - mx);
        for (int64_t j = 0; j < n; j++)
          p[j] = exp(p[j] - mx) / sum;
        lse[(b * H + h) * T + i] = mx + log(sum);
        double *o = out + (b * T + i) * D + h * hd;
        const float *dob = dout + (b * T + i) * D + h * hd;
        for (int64_t d = 0; d < hd; d++) {
          o[d] = 0;
          for (int64_t j = 0; j < n; j++)
            o[d] += p[j] * vb[j * ld + d];
        }
        double rs = 0;
        for (int64_t d = 0; d < hd; d++)
          rs += dob[d] * o[d];
        for (int64_t j = 0; j < n; j++) {
          double s = 0;
          for (int64_t d = 0; d < hd; d++)
            s += dob[d] * (double)vb[j * ld + d];
          dp[j] = p[j] * (s - rs);
        }
        for (int64_t j = 0; j < n; j++)
          for (int64_t d = 0; d < hd; d++) {
            dqb[i * ld + d] += scale * dp[j] * kb[j * ld + d];
            dkb[j * ld + d] += scale * dp[j] * qb[i * ld + d];
            dvb[j * ld + d] += p[j] * dob[d];
          }
      }
    }
  free(p), free(dp);
}

/* The fused GQA forward and backward on device dev over qkv and dout (dtype); out, lse and dqkv as floats. */
static void gqa_run(int dev, int dtype, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t hd, int causal,
                    const float *qkv, const float *dout, float **out, float **lse, float **dqkv) {
  const float scale = 1.0f / sqrtf((float)hd);
  strata_queue_t q;
  OK(strata_queue_new(dev, &q));
  int64_t D = H * hd, ld = (H + 2 * KV) * hd;
  size_t nq = (size_t)(B * T * ld), no = (size_t)(B * T * D), nl = (size_t)(B * H * T);
  struct opnd QKV = put(q, dev, qkv, nq, dtype), O = put(q, dev, NULL, no, dtype), L = put(q, dev, NULL, nl, F32);
  struct opnd DO = put(q, dev, dout, no, dtype), DQKV = put(q, dev, NULL, nq, dtype);
  OK(strata_attention_gqa_fwd(q, QKV.m, O.m, L.m, B, T, H, KV, hd, scale, causal));
  OK(strata_attention_gqa_bwd(q, QKV.m, O.m, DO.m, L.m, DQKV.m, B, T, H, KV, hd, scale, causal));
  *out = get(q, O), *lse = get(q, L), *dqkv = get(q, DQKV);
  struct opnd all[] = {QKV, O, L, DO, DQKV};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++)
    strata_buffer_free(all[i].b);
  strata_queue_free(q);
}

/* The fused GQA against gqa_ref; dK and dV sum H / KV heads of T terms, so bfloat16's input rounding grows with
** them: 4 times its absolute tolerance there. */
static void gqa_check(const char *backend, int dev, int dtype, int64_t B, int64_t T, int64_t H, int64_t KV,
                      int64_t hd, int causal, float **keep) {
  int64_t D = H * hd, ld = (H + 2 * KV) * hd;
  size_t nq = (size_t)(B * T * ld), no = (size_t)(B * T * D), nl = (size_t)(B * H * T);
  float *qkv = values(nq, 61 + (uint32_t)(H * 10 + KV), -1.0f, 1.0f, dtype);
  float *dout = values(no, 62 + (uint32_t)KV, -1.0f, 1.0f, dtype);
  float *out, *lse, *dqkv;
  gqa_run(dev, dtype, B, T, H, KV, hd, causal, qkv, dout, &out, &lse, &dqkv);
  double *ro = malloc(no * sizeof *ro), *rl = malloc(nl * sizeof *rl), *rd = malloc(nq * sizeof *rd);
  gqa_ref(qkv, dout, B, T, H, KV, hd, (double)(1.0f / sqrtf((float)hd)) /* the op's float scale */, causal, ro, rl,
          rd);
  char what[96];
  snprintf(what, sizeof what, "%s gqa H %lld KV %lld hd %lld causal %d out", backend, (long long)H, (long long)KV,
           (long long)hd, causal);
  near(what, out, ro, no, dtype);
  snprintf(what, sizeof what, "%s gqa H %lld KV %lld hd %lld causal %d lse", backend, (long long)H, (long long)KV,
           (long long)hd, causal);
  near(what, lse, rl, nl, F32);
  snprintf(what, sizeof what, "%s gqa H %lld KV %lld hd %lld causal %d dqkv", backend, (long long)H, (long long)KV,
           (long long)hd, causal);
  if (dtype == BF16)
    for (size_t i = 0; i < nq; i++)
      cr_assert(fabs(dqkv[i] - rd[i]) <= 4 * ATOL_BF16 + RTOL_BF16 * fabs(rd[i]),
                "%s (bf16) element %zu is %.8g, float64 says %.8g", what, i, (double)dqkv[i], rd[i]);
  else
    near(what, dqkv, rd, nq, dtype);
  if (keep) /* out, lse and dqkv one after the other, for a comparison of bits */
    for (size_t i = 0; i < no + nl + nq; i++)
      (*keep)[i] = i < no ? out[i] : i < no + nl ? lse[i - no] : dqkv[i - no - nl];
  free(qkv), free(dout), free(out), free(lse), free(dqkv), free(ro), free(rl), free(rd);
}

static void gqa_case(const char *backend, int dtype, int64_t H, int64_t KV, int causal) {
  gqa_check(backend, device_of(backend), dtype, 2, 37, H, KV, 12, causal, NULL); /* T past one tile of keys (32) */
}

/* heads / kv_heads = 1 (GPT's), 2 and 4, causal and not */
static void gqa_all(const char *backend, int dtype) {
  for (int causal = 0; causal < 2; causal++) {
    gqa_case(backend, dtype, 4, 4, causal);
    gqa_case(backend, dtype, 4, 2, causal);
    gqa_case(backend, dtype, 4, 1, causal);
  }
}

Test(llama, gqa_attention_host_f32) { gqa_all("host", F32); }
Test(llama, gqa_attention_host_bf16) { gqa_all("host", BF16); }
Test(llama, gqa_attention_opencl_f32) { gqa_all("opencl", F32); }
Test(llama, gqa_attention_opencl_bf16) { gqa_all("opencl", BF16); }

/* ---- bad arguments: a status and one line naming what is wrong; nothing enqueued ---- */

Test(llama, bad_arguments_refused) {
  int dev = device_of("host");
  strata_queue_t q;
  OK(strata_queue_new(dev, &q));
  strata_buffer_t b;
  OK(strata_buffer_new(dev, 4096 * 4, &b));
  strata_mem_t m = strata_mem(b, 0), m2 = strata_mem(b, 2048);
  /* kv_heads must divide heads */
  cr_assert_eq(strata_attention_gqa_fwd(q, m, m2, m2, 1, 4, 4, 3, 4, 0.5f, 1), STRATA_ERR_SHAPE);
  cr_assert(strstr(strata_last_error(), "kv_heads = 3 must divide heads = 4"), "%s", strata_last_error());
  cr_assert_eq(strata_attention_gqa_bwd(q, m, m2, m2, m2, m, 1, 4, 4, 8, 4, 0.5f, 1), STRATA_ERR_SHAPE);
  cr_assert_eq(strata_attention_gqa_fwd(q, m, m2, m2, 1, 4, 4, 0, 4, 0.5f, 1), STRATA_ERR_SHAPE);
  /* RoPE: head_dim even, ld covering the heads, pos0 not negative, float32 frequencies, no partial overlap */
  cr_assert_eq(strata_rope_fwd(q, m, m, m2, 1, 4, 2, 7, 14, 0), STRATA_ERR_SHAPE);
  cr_assert(strstr(strata_last_error(), "head_dim = 7 must be even"), "%s", strata_last_error());
  cr_assert_eq(strata_rope_bwd(q, m, m, m2, 1, 4, 2, 8, 15, 0), STRATA_ERR_SHAPE);
  cr_assert(strstr(strata_last_error(), "ld = 15"), "%s", strata_last_error());
  cr_assert_eq(strata_rope_fwd(q, m, m, m2, 1, 4, 2, 8, 16, -1), STRATA_ERR_SHAPE);
  cr_assert_eq(strata_rope_fwd(q, m, m, strata_mem_typed(b, 2048, STRATA_BFLOAT16), 1, 4, 2, 8, 16, 0),
               STRATA_ERR_INVALID);
  cr_assert(strstr(strata_last_error(), "freq"), "%s", strata_last_error());
  cr_assert_eq(strata_rope_fwd(q, m, strata_mem(b, 1), m2, 1, 4, 2, 8, 16, 0), STRATA_ERR_INVALID);
  cr_assert(strstr(strata_last_error(), "overlap"), "%s", strata_last_error());
  cr_assert_eq(strata_rope_fwd(q, m, m, m2, 1, 4000, 2, 8, 16, 0), STRATA_ERR_RANGE);
  /* RMSNorm: eps positive; SwiGLU: dgu is gu or apart from it */
  cr_assert_eq(strata_rmsnorm_fwd(q, m, m2, m, m2, 2, 8, 0.0f), STRATA_ERR_INVALID);
  cr_assert(strstr(strata_last_error(), "eps"), "%s", strata_last_error());
  cr_assert_eq(strata_swiglu_bwd(q, m, m2, strata_mem(b, 4), 2, 8), STRATA_ERR_INVALID);
  cr_assert(strstr(strata_last_error(), "overlaps"), "%s", strata_last_error());
  cr_assert_eq(strata_swiglu_fwd(q, m, m2, 2, 0), STRATA_ERR_SHAPE);
  OK(strata_queue_finish(q));
  strata_buffer_free(b);
  strata_queue_free(q);
}

/* OpenCL's GQA kernels give the same bits whatever the work-group size (kernels/attention.k), with head_dim past
** one 64-column chunk, and match float64 at each. */
Test(llama, gqa_attention_opencl_same_bits_whatever_the_work_group) {
  static const int sizes[] = {4, 32, 256};
  const int64_t B = 1, T = 45, H = 4, KV = 2, hd = 80;
  size_t total = (size_t)(B * T * H * hd + B * H * T + B * T * (H + 2 * KV) * hd);
  float *first = malloc(total * sizeof *first), *got = malloc(total * sizeof *got);
  for (int k = 0; k < 3; k++) {
    char v[8];
    snprintf(v, sizeof v, "%d", sizes[k]);
    setenv("STRATA_KERNEL_WORKGROUP", v, 1);
    strata_shutdown(); /* the backends read it when they start */
    int dev = device_of("opencl");
    gqa_check("opencl", dev, F32, B, T, H, KV, hd, 1, k ? &got : &first);
    if (k)
      cr_assert(memcmp(got, first, total * sizeof *got) == 0,
                "gqa with work-groups of %d differs from work-groups of %d", sizes[k], sizes[0]);
  }
  unsetenv("STRATA_KERNEL_WORKGROUP");
  strata_shutdown();
  free(first), free(got);
}

/* The host's bfloat16 attention (host-attn-bf16.c: AMX-BF16 tiles or AVX-512 BF16 dot products on blocks of 32
** queries and keys where the CPU has them, else the staged float32 one) at shapes past its blocks — T with a partial
** block, head_dim odd (a half pair) and 64 (GPT's), T past one group of 8 query blocks whose dK, dV sums the AMX path
** keeps in tiles (290: a group and a partial one) — matches float64, with the same bits on 1 and 2 threads (tasks
** are whole heads). */
static void gqa_blocks(void) {
  static const int64_t shapes[][5] = {{1, 100, 4, 2, 9}, {2, 70, 2, 2, 64}, {1, 290, 2, 1, 64}};
  for (int s = 0; s < 3; s++)
    for (int causal = 0; causal < 2; causal++) {
      const int64_t B = shapes[s][0], T = shapes[s][1], H = shapes[s][2], KV = shapes[s][3], hd = shapes[s][4];
      size_t total = (size_t)(B * T * H * hd + B * H * T + B * T * (H + 2 * KV) * hd);
      float *first = malloc(total * sizeof *first), *got = malloc(total * sizeof *got);
      for (int k = 0; k < 2; k++) {
        setenv("STRATA_HOST_THREADS", k ? "2" : "1", 1);
        strata_shutdown(); /* the host reads it when it starts */
        gqa_check("host", device_of("host"), BF16, B, T, H, KV, hd, causal, k ? &got : &first);
        if (k)
          cr_assert(memcmp(got, first, total * sizeof *got) == 0,
                    "bf16 gqa (T %lld hd %lld causal %d) on 2 threads differs from 1 thread", (long long)T,
                    (long long)hd, causal);
      }
      free(first), free(got);
    }
  unsetenv("STRATA_HOST_THREADS");
  strata_shutdown();
}

Test(llama, gqa_attention_host_bf16_blocks_same_bits_whatever_the_threads) { gqa_blocks(); }

/* The same with AMX hidden (AVX-512 BF16 alone), and with both hidden (the staged float32 attention). */
Test(llama, gqa_attention_host_bf16_blocks_without_amx) {
  setenv("STRATA_HOST_CPU_HIDE", "amxbf16", 1);
  gqa_blocks();
}

Test(llama, gqa_attention_host_bf16_blocks_without_bf16_instructions) {
  setenv("STRATA_HOST_CPU_HIDE", "amxbf16,avx512bf16", 1);
  gqa_blocks();
}
