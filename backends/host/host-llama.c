/* SPDX-License-Identifier: MIT */
/* host-llama.c — the host backend's LLaMA ops: RMSNorm, SwiGLU and rotary position embedding, in plain C. */
#include "config.h"

#include <math.h>
#include <string.h>

#include <strata/comm.h>

#include "bf16.h"
#include "host.h"
#include "vecmath.h"

#define F(m) ((float *)(m).h + (m).off)
#define BF(m) ((uint16_t *)(m).h + (m).off)
#define PAR_MIN 16384  /* as host-ops.c: below this many elements threads cost more than they save */
#define COLS_SPAN 256  /* columns per piece of a column reduction (the weight gradient), as host-ops.c */
#define ROPE_HALF_MAX 256 /* cosines and sines a thread keeps on its stack (2 KiB) */
#define PAR(n) _Pragma("omp parallel for schedule(static) num_threads(strata__host_threads) if (par_n >= PAR_MIN)")

/* ---- RMSNorm ---- */

/* One row: rstd = 1 / sqrt(mean(x^2) + eps) (the sum in double), y = w * (x * rstd) — Hugging Face's order. */
static HOST_SIMD void rms_row(const float *xr, const float *w, float *yr, int64_t cols, float eps, float *rstd) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t c = 0; c < cols; c++)
    s += (double)xr[c] * xr[c];
  float rs = 1.0f / sqrtf((float)(s / (double)cols) + eps);
  *rstd = rs;
#pragma omp simd
  for (int64_t c = 0; c < cols; c++)
    yr[c] = w[c] * (xr[c] * rs);
}

void strata__host_rmsnorm_fwd(const struct strata__op *o) {
  const float *x = F(o->u.rms.x), *w = F(o->u.rms.w);
  float *y = F(o->u.rms.y), *rstd = F(o->u.rms.rstd);
  int64_t cols = o->u.rms.cols, par_n = o->u.rms.rows * cols;
  PAR(par_n)
  for (int64_t r = 0; r < o->u.rms.rows; r++)
    rms_row(x + r * cols, w, y + r * cols, cols, o->u.rms.eps, rstd + r);
}

/* dw[0, n) (+)= sum over `rows` rows (in order) of dy * x * rstd, x and dy of row stride ld. */
static HOST_SIMD void rms_weight_grad(const float *x, const float *dy, int64_t ld, const float *rstd, float *dw,
                                     int64_t rows, int64_t n, int accumulate) {
  if (!accumulate)
    for (int64_t c = 0; c < n; c++)
      dw[c] = 0.0f;
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * ld, *dr = dy + r * ld;
    float rs = rstd[r];
#pragma omp simd
    for (int64_t c = 0; c < n; c++)
      dw[c] += dr[c] * (xr[c] * rs);
  }
}

/* dx = rs (dy w - xhat mean(dy w xhat)), xhat = x rs (the mean's sum in double); dx may be dy. */
static HOST_SIMD void rms_dx_row(const float *xr, const float *dyr, const float *w, float *dxr, int64_t cols,
                                 float rs) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t c = 0; c < cols; c++)
    s += (double)(dyr[c] * w[c]) * (xr[c] * rs);
  float m = (float)(s / (double)cols);
#pragma omp simd
  for (int64_t c = 0; c < cols; c++)
    dxr[c] = rs * (dyr[c] * w[c] - (xr[c] * rs) * m);
}

void strata__host_rmsnorm_bwd(const struct strata__op *o) {
  const float *x = F(o->u.rms.x), *w = F(o->u.rms.w), *rstd = F(o->u.rms.rstd), *dy = F(o->u.rms.dy);
  float *dx = F(o->u.rms.dx), *dw = F(o->u.rms.dw);
  int64_t cols = o->u.rms.cols, rows = o->u.rms.rows;
  /* the weight first: dx may be dy */
  int64_t par_n = rows * cols, pieces = (cols + COLS_SPAN - 1) / COLS_SPAN;
  PAR(par_n)
  for (int64_t i = 0; i < pieces; i++) {
    int64_t c0 = i * COLS_SPAN, c1 = c0 + COLS_SPAN < cols ? c0 + COLS_SPAN : cols;
    rms_weight_grad(x + c0, dy + c0, cols, rstd, dw + c0, rows, c1 - c0, o->u.rms.accumulate);
  }
  PAR(par_n)
  for (int64_t r = 0; r < rows; r++)
    rms_dx_row(x + r * cols, dy + r * cols, w, dx + r * cols, cols, rstd[r]);
}

/* ---- SwiGLU ---- */

/* h = silu(g) u = g / (1 + e^-g) u over one row's n hidden units; e^x is vecmath.h's, so the loop vectorises. */
static HOST_SIMD void swiglu_fwd_row(const float *g, const float *u, float *h, int64_t n) {
#pragma omp simd
  for (int64_t c = 0; c < n; c++)
    h[c] = g[c] / (1.0f + vm_exp(-g[c])) * u[c];
}

void strata__host_swiglu_fwd(const struct strata__op *o) {
  const float *gu = F(o->u.swiglu.gu);
  float *h = F(o->u.swiglu.h);
  int64_t cols = o->u.swiglu.cols, par_n = o->u.swiglu.rows * cols;
  PAR(par_n)
  for (int64_t r = 0; r < o->u.swiglu.rows; r++)
    swiglu_fwd_row(gu + r * 2 * cols, gu + r * 2 * cols + cols, h + r * cols, cols);
}

/* dg = dh u s (1 + g (1 - s)), du = dh g s, s = sigmoid(g), over one row; dg and du may be g and u (each element
** read before it is written, in the same iteration). */
static HOST_SIMD void swiglu_bwd_row(const float *g, const float *u, const float *dh, float *dg, float *du,
                                     int64_t n) {
#pragma omp simd
  for (int64_t c = 0; c < n; c++) {
    float gv = g[c], uv = u[c], s = 1.0f / (1.0f + vm_exp(-gv));
    dg[c] = dh[c] * uv * (s * (1.0f + gv * (1.0f - s)));
    du[c] = dh[c] * (gv * s);
  }
}

/* dgu may be gu (each pair read before it is written). */
void strata__host_swiglu_bwd(const struct strata__op *o) {
  const float *gu = F(o->u.swiglu.gu), *dh = F(o->u.swiglu.dh);
  float *dgu = F(o->u.swiglu.dgu);
  int64_t cols = o->u.swiglu.cols, par_n = o->u.swiglu.rows * cols;
  PAR(par_n)
  for (int64_t r = 0; r < o->u.swiglu.rows; r++) {
    const float *g = gu + r * 2 * cols;
    float *dg = dgu + r * 2 * cols;
    swiglu_bwd_row(g, g + cols, dh + r * cols, dg, dg + cols, cols);
  }
}

/* ---- rotary position embedding ---- */

static inline float load(const struct strata__mem *m, int64_t i) {
  return m->dtype == STRATA_BFLOAT16 ? bf16_widen(BF(*m)[i]) : F(*m)[i];
}

static inline void store(const struct strata__mem *m, int64_t i, float v) {
  if (m->dtype == STRATA_BFLOAT16)
    BF(*m)[i] = bf16_round(v);
  else
    F(*m)[i] = v;
}

/* One row's heads rotated by the angles whose cosines and sines are c[0, half), s[0, half), float32 in and out (in
** place works: pair i reads and writes only i and i + half). Not HOST_SIMD: no FMA, so the same bits as the scalar
** products on every CPU. */
static void rope_row_f32(const float *x, float *y, const float *c, const float *s, int64_t heads, int64_t hd) {
  const int64_t half = hd / 2;
  for (int64_t h = 0; h < heads; h++) {
    const float *xh = x + h * hd;
    float *yh = y + h * hd;
#pragma omp simd
    for (int64_t i = 0; i < half; i++) {
      float x1 = xh[i], x2 = xh[i + half];
      yh[i] = x1 * c[i] - x2 * s[i];
      yh[i + half] = x2 * c[i] + x1 * s[i];
    }
  }
}

/* The same over bfloat16 rows: widened, rotated in float32, rounded once. */
static void rope_row_bf16(const uint16_t *x, uint16_t *y, const float *c, const float *s, int64_t heads, int64_t hd) {
  const int64_t half = hd / 2;
  for (int64_t h = 0; h < heads; h++) {
    const uint16_t *xh = x + h * hd;
    uint16_t *yh = y + h * hd;
#pragma omp simd
    for (int64_t i = 0; i < half; i++) {
      float x1 = bf16_widen(xh[i]), x2 = bf16_widen(xh[i + half]);
      yh[i] = bf16_round(x1 * c[i] - x2 * s[i]);
      yh[i + half] = bf16_round(x2 * c[i] + x1 * s[i]);
    }
  }
}

/*
** Each row (b, t) at position pos0 + t; for each i < head_dim / 2 the
** angle (float)pos * freq[i] and its cosine and sine (float32, as Hugging
** Face's), then every head's pair (i, i + head_dim / 2) rotated. The
** backward rotates by the opposite angle (the transpose). Threads take
** positions: each computes a position's cosines and sines once for the
** batch's rows at it. x and y of one type run a row at a time; mixed types
** element by element. In place works and nothing outside a row's heads is
** touched.
*/
void strata__host_rope(const struct strata__op *o) {
  const struct strata__mem *x = &o->u.rope.x, *y = &o->u.rope.y;
  const float *freq = F(o->u.rope.freq);
  int64_t seq = o->u.rope.seq, batch = o->u.rope.batch, heads = o->u.rope.heads, hd = o->u.rope.head_dim,
          half = hd / 2, ld = o->u.rope.ld;
  int64_t par_n = batch * seq * heads * hd;
  float sign = o->id == STRATA__OP_ROPE_BWD ? -1.0f : 1.0f;
  const int same = x->dtype == y->dtype, bf = x->dtype == STRATA_BFLOAT16;
  PAR(par_n)
  for (int64_t t = 0; t < seq; t++) {
    float cs[2 * ROPE_HALF_MAX], *c = cs, *s = cs + ROPE_HALF_MAX;
    float pos = (float)(o->u.rope.pos0 + t);
    for (int64_t i0 = 0; i0 < half; i0 += ROPE_HALF_MAX) { /* pieces of ROPE_HALF_MAX pairs (one for hd <= 512) */
      int64_t n = half - i0 < ROPE_HALF_MAX ? half - i0 : ROPE_HALF_MAX;
      for (int64_t i = 0; i < n; i++) {
        float a = pos * freq[i0 + i];
        c[i] = cosf(a);
        s[i] = sign * sinf(a);
      }
      for (int64_t b = 0; b < batch; b++) {
        int64_t r = b * seq + t;
        if (same && n == half && !bf) {
          rope_row_f32(F(*x) + r * ld, F(*y) + r * ld, c, s, heads, hd);
        } else if (same && n == half) {
          rope_row_bf16(BF(*x) + r * ld, BF(*y) + r * ld, c, s, heads, hd);
        } else {
          for (int64_t h = 0; h < heads; h++)
            for (int64_t i = 0; i < n; i++) {
              int64_t at = r * ld + h * hd + i0 + i;
              float x1 = load(x, at), x2 = load(x, at + half);
              store(y, at, x1 * c[i] - x2 * s[i]);
              store(y, at + half, x2 * c[i] + x1 * s[i]);
            }
        }
      }
    }
  }
}
