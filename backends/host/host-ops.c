/* SPDX-License-Identifier: MIT */
/* host-ops.c — the host backend's ops in plain C (the reference other backends are tested against) and CBLAS GEMM. */
#include "config.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <strata/comm.h>

#include "bf16.h"
#include "device/cpu.h"
#include "host.h"
#include "vecmath.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_CHAINS_AVX512 1
#elif defined(__SSE__)
#include <xmmintrin.h>
#endif

#define F(m) ((float *)(m).h + (m).off)

/*
** Threads for the elementwise and row-wise ops (set by host.c: the cores a
** virtual device owns). Every element or row is computed by the same code
** whichever thread runs it, and reductions keep their serial order, so the
** results do not depend on the thread count.
*/
int strata__host_threads = 1;
#define PAR_MIN 16384 /* below this many elements threads cost more than they save */
#define PAR(n) _Pragma("omp parallel for schedule(static) num_threads(strata__host_threads) if (par_n >= PAR_MIN)")
#define INT(m) ((int32_t *)(m).h + (m).off)
#define STREAM_MIN (1 << 18) /* elements: below this the result is better left in the cache */
#define SPAN 4096             /* elements per piece of an elementwise op: each piece one vector loop */
#define COLS_SPAN 256         /* columns per piece of a column reduction (bias and layernorm gradients) */

/* Run span(lo, len, ctx) over [0, n) in pieces of SPAN, the pieces spread over the op's threads. */
#define FOR_SPANS(n, body)                                                                                          \
  do {                                                                                                             \
    int64_t n_ = (n), par_n = n_, pieces_ = (n_ + SPAN - 1) / SPAN;                                                \
    PAR(par_n)                                                                                                     \
    for (int64_t s_ = 0; s_ < pieces_; s_++) {                                                                     \
      int64_t lo = s_ * SPAN, len = n_ - lo < SPAN ? n_ - lo : SPAN;                                               \
      body;                                                                                                        \
    }                                                                                                              \
  } while (0)

/*
** With strata__host_gemm_split, the BLAS runs single-threaded and a GEMM's
** threads are the op's OpenMP team, like every other op's: batches spread
** over the threads, or one product cut into row (or column) panels of C,
** one BLAS call each. One pool of threads that sleep when idle, instead of
** OpenBLAS's own pool yielding against the OpenMP team on the same cores.
*/
int strata__host_gemm_split = 0;
#define GEMM_SPLIT_MIN 2.0e6 /* flops below which one call on one thread is quicker */

static void gemm_one(const struct strata__op *o, int64_t i) {
  strata__host_sgemm(o->u.gemm.trans_a, o->u.gemm.trans_b, o->u.gemm.m, o->u.gemm.n, o->u.gemm.k, o->u.gemm.alpha,
                     F(o->u.gemm.a) + i * o->u.gemm.stride_a, o->u.gemm.lda, F(o->u.gemm.b) + i * o->u.gemm.stride_b,
                     o->u.gemm.ldb, o->u.gemm.beta, F(o->u.gemm.c) + i * o->u.gemm.stride_c, o->u.gemm.ldc);
}

static void gemm(const struct strata__op *o) {
  int64_t m = o->u.gemm.m, n = o->u.gemm.n, k = o->u.gemm.k, batch = o->u.gemm.batch;
  int nt = strata__host_threads;
  double flops = 2.0 * (double)m * (double)n * (double)k * (double)batch;
  if (!strata__host_gemm_split || nt < 2 || flops < GEMM_SPLIT_MIN) {
    for (int64_t i = 0; i < batch; i++)
      gemm_one(o, i);
    return;
  }
  if (batch >= nt) {
    _Pragma("omp parallel for schedule(static) num_threads(nt)")
    for (int64_t i = 0; i < batch; i++)
      gemm_one(o, i);
    return;
  }
  int ta = o->u.gemm.trans_a, tb = o->u.gemm.trans_b;
  int64_t lda = o->u.gemm.lda, ldb = o->u.gemm.ldb, ldc = o->u.gemm.ldc;
  int rows = m >= n; /* cut the longer side of C, in panels of whole 16-element vectors */
  int64_t len = rows ? m : n, step = ((len + nt - 1) / nt + 15) / 16 * 16;
  int pieces = (int)((len + step - 1) / step);
  for (int64_t i = 0; i < batch; i++) {
    const float *a = F(o->u.gemm.a) + i * o->u.gemm.stride_a, *b = F(o->u.gemm.b) + i * o->u.gemm.stride_b;
    float *c = F(o->u.gemm.c) + i * o->u.gemm.stride_c;
    _Pragma("omp parallel for schedule(static) num_threads(pieces)")
    for (int t = 0; t < pieces; t++) {
      int64_t lo = t * step, cnt = len - lo < step ? len - lo : step;
      if (rows)
        strata__host_sgemm(ta, tb, cnt, n, k, o->u.gemm.alpha, a + (ta ? lo : lo * lda), lda, b, ldb, o->u.gemm.beta,
                           c + lo * ldc, ldc);
      else
        strata__host_sgemm(ta, tb, m, cnt, k, o->u.gemm.alpha, a, lda, b + (tb ? lo * ldb : lo), ldb, o->u.gemm.beta,
                           c + lo, ldc);
    }
  }
}

static HOST_SIMD void bias_rows(float *y, const float *b, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; r++) {
    float *yr = y + r * cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; c++)
      yr[c] += b[c];
  }
}

static void bias_add(const struct strata__op *o) {
  float *y = F(o->u.bias.y);
  const float *b = F(o->u.bias.bias);
  int64_t cols = o->u.bias.cols, rows = o->u.bias.rows;
  int64_t par_n = rows * cols, per = cols >= SPAN ? 1 : SPAN / cols, pieces = (rows + per - 1) / per;
  PAR(par_n)
  for (int64_t i = 0; i < pieces; i++) {
    int64_t r0 = i * per, nr = rows - r0 < per ? rows - r0 : per;
    bias_rows(y + r0 * cols, b, nr, cols);
  }
}

/* Column sums over `rows` rows of n columns (row stride ld), each column summed in row order as a serial loop
** would, into db[0, n) (added to it when accumulate). Also the bfloat16 ops' (host-bf16.c), on widened rows. */
static HOST_SIMD void host_col_sums_simd(const float *dy, int64_t ld, float *db, int64_t rows, int64_t n,
                                         int accumulate) {
  if (!accumulate)
    for (int64_t c = 0; c < n; c++)
      db[c] = 0.0f;
  for (int64_t r = 0; r < rows; r++) {
    const float *dr = dy + r * ld;
#pragma omp simd
    for (int64_t c = 0; c < n; c++)
      db[c] += dr[c];
  }
}

/* (one plain symbol for the callers in other files: clang gives a target_clones function's ifunc another name) */
void strata__host_col_sums(const float *dy, int64_t ld, float *db, int64_t rows, int64_t n, int accumulate) {
  host_col_sums_simd(dy, ld, db, rows, n, accumulate);
}

static void bias_grad(const struct strata__op *o) {
  const float *dy = F(o->u.bias.y);
  float *db = F(o->u.bias.bias);
  int64_t cols = o->u.bias.cols, rows = o->u.bias.rows;
  int64_t par_n = rows * cols, pieces = (cols + COLS_SPAN - 1) / COLS_SPAN;
  PAR(par_n)
  for (int64_t i = 0; i < pieces; i++) {
    int64_t c0 = i * COLS_SPAN, c1 = c0 + COLS_SPAN < cols ? c0 + COLS_SPAN : cols;
    strata__host_col_sums(dy + c0, cols, db + c0, rows, c1 - c0, o->u.bias.accumulate);
  }
}

#define GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_C 0.044715f

static HOST_SIMD void gelu_fwd_span(const float *x, float *y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++) {
    float v = x[i];
    y[i] = 0.5f * v * (1.0f + vm_tanh(GELU_K * (v + GELU_C * v * v * v)));
  }
}

static HOST_SIMD void gelu_bwd_span(const float *x, const float *dy, float *dx, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++) {
    float v = x[i];
    float t = vm_tanh(GELU_K * (v + GELU_C * v * v * v));
    float dt = (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_C * v * v);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * dt);
  }
}

static void gelu_fwd(const struct strata__op *o) {
  const float *x = F(o->u.ew.x);
  float *y = F(o->u.ew.y);
  FOR_SPANS(o->u.ew.n, gelu_fwd_span(x + lo, y + lo, len));
}

static void gelu_bwd(const struct strata__op *o) {
  const float *x = F(o->u.ew.x), *dy = F(o->u.ew.dy);
  float *dx = F(o->u.ew.dx);
  FOR_SPANS(o->u.ew.n, gelu_bwd_span(x + lo, dy + lo, dx + lo, len));
}

static void relu_fwd(const struct strata__op *o) {
  const float *x = F(o->u.ew.x);
  float *y = F(o->u.ew.y);
  int64_t par_n = o->u.ew.n;
  PAR(par_n)
  for (int64_t i = 0; i < o->u.ew.n; i++)
    y[i] = x[i] > 0 ? x[i] : 0.0f;
}

static void relu_bwd(const struct strata__op *o) {
  const float *x = F(o->u.ew.x), *dy = F(o->u.ew.dy);
  float *dx = F(o->u.ew.dx);
  int64_t par_n = o->u.ew.n;
  PAR(par_n)
  for (int64_t i = 0; i < o->u.ew.n; i++)
    dx[i] = x[i] > 0 ? dy[i] : 0.0f;
}

static void add(const struct strata__op *o) {
  const float *a = F(o->u.ew.x), *b = F(o->u.ew.b);
  float *y = F(o->u.ew.y);
  int64_t par_n = o->u.ew.n;
  PAR(par_n)
  for (int64_t i = 0; i < o->u.ew.n; i++)
    y[i] = a[i] + b[i];
}

/* y = a (op) b, float32 or int32, SUM or MAX (collectives' reduction step). */
static void reduce(const struct strata__op *o) {
  int64_t n = o->u.reduce.n, par_n = n;
  if (o->u.reduce.dtype == 1) {
    const int32_t *a = (const int32_t *)o->u.reduce.a.h + o->u.reduce.a.off;
    const int32_t *b = (const int32_t *)o->u.reduce.b.h + o->u.reduce.b.off;
    int32_t *y = (int32_t *)o->u.reduce.y.h + o->u.reduce.y.off;
    if (o->u.reduce.op == 2) {
      PAR(par_n)
      for (int64_t i = 0; i < n; i++)
        y[i] = a[i] > b[i] ? a[i] : b[i];
    } else {
      /* wrap-around sums, as NCCL and the GPU kernels do */
      PAR(par_n)
      for (int64_t i = 0; i < n; i++)
        y[i] = (int32_t)((uint32_t)a[i] + (uint32_t)b[i]);
    }
    return;
  }
  const float *a = F(o->u.reduce.a), *b = F(o->u.reduce.b);
  float *y = F(o->u.reduce.y);
#if defined(__SSE__)
  /* Large sums are memory-bound: stream the result past the caches, which
  ** saves reading y's lines before writing them (a third of the traffic);
  ** in place those lines were just read, and plain stores are better.
  ** Same additions, same order, same bits as the loop below. */
  if (o->u.reduce.op != 2 && n >= STREAM_MIN && ((uintptr_t)y & 3) == 0 && y != a && y != b) {
    int64_t head = (int64_t)(((16 - ((uintptr_t)y & 15)) & 15) / 4); /* up to y's first 16-byte boundary */
    int64_t body = head + ((n - head) & ~(int64_t)3);
    for (int64_t i = 0; i < head; i++)
      y[i] = a[i] + b[i];
    PAR(par_n)
    for (int64_t i = head; i < body; i += 4)
      _mm_stream_ps(y + i, _mm_add_ps(_mm_loadu_ps(a + i), _mm_loadu_ps(b + i)));
    _mm_sfence();
    for (int64_t i = body; i < n; i++)
      y[i] = a[i] + b[i];
    return;
  }
#endif
  if (o->u.reduce.op == 2) {
    PAR(par_n)
    for (int64_t i = 0; i < n; i++)
      y[i] = fmaxf(a[i], b[i]);
  } else {
    PAR(par_n)
    for (int64_t i = 0; i < n; i++)
      y[i] = a[i] + b[i];
  }
}

static void scale(const struct strata__op *o) {
  float *x = F(o->u.ew.x);
  int64_t par_n = o->u.ew.n;
  PAR(par_n)
  for (int64_t i = 0; i < o->u.ew.n; i++)
    x[i] *= o->u.ew.alpha;
}

/*
** x[i] = alpha. A +0 fill (the gradients' zeroing each step, about 4 bytes a
** parameter) is memset over each thread's share, which the C library writes
** without first reading the lines it overwrites (rep stosb, or streaming
** stores past the cache's size): all-zero bits either way.
*/
static void fill(const struct strata__op *o) {
  float *x = F(o->u.ew.x);
  const float alpha = o->u.ew.alpha;
  uint32_t bits;
  memcpy(&bits, &alpha, sizeof bits);
  int64_t n = o->u.ew.n, par_n = n;
  if (bits == 0 && n >= STREAM_MIN) {
    int64_t parts = strata__host_threads > 1 ? strata__host_threads : 1, per = (n + parts - 1) / parts;
    PAR(par_n)
    for (int64_t t = 0; t < parts; t++) {
      int64_t lo = t * per, len = lo >= n ? 0 : n - lo < per ? n - lo : per;
      if (len > 0)
        memset(x + lo, 0, (size_t)len * sizeof *x);
    }
    return;
  }
  PAR(par_n)
  for (int64_t i = 0; i < n; i++)
    x[i] = alpha;
}

/* One row: mean, 1/std, y = (x - mean) / std * gamma + beta. Sums in double. */
static HOST_SIMD void layernorm_row(const float *xr, const float *g, const float *b, float *yr, int64_t cols,
                                    float eps, float *mean, float *rstd) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t c = 0; c < cols; c++)
    s += xr[c];
  float mu = (float)(s / (double)cols);
  double v = 0;
#pragma omp simd reduction(+ : v)
  for (int64_t c = 0; c < cols; c++) {
    float d = xr[c] - mu;
    v += (double)(d * d);
  }
  float rs = 1.0f / sqrtf((float)(v / (double)cols) + eps);
  *mean = mu;
  *rstd = rs;
#pragma omp simd
  for (int64_t c = 0; c < cols; c++)
    yr[c] = (xr[c] - mu) * rs * g[c] + b[c];
}

void strata__host_layernorm_row(const float *xr, const float *g, const float *b, float *yr, int64_t cols, float eps,
                                float *mean, float *rstd) {
  layernorm_row(xr, g, b, yr, cols, eps, mean, rstd);
}

static void layernorm_fwd(const struct strata__op *o) {
  const float *x = F(o->u.ln.x), *g = F(o->u.ln.gamma), *b = F(o->u.ln.beta);
  float *y = F(o->u.ln.y), *mean = F(o->u.ln.mean), *rstd = F(o->u.ln.rstd);
  int64_t cols = o->u.ln.cols;
  int64_t par_n = o->u.ln.rows * cols;
  PAR(par_n)
  for (int64_t r = 0; r < o->u.ln.rows; r++)
    layernorm_row(x + r * cols, g, b, y + r * cols, cols, o->u.ln.eps, mean + r, rstd + r);
}

/* dgamma and dbeta over `rows` rows of n columns (x and dy: row stride ld; mean, rstd: one a row), each column
** summed over the rows in order, into dg[0, n) and db[0, n) (added to them when accumulate). */
static HOST_SIMD void host_ln_param_grads_simd(const float *x, const float *dy, int64_t ld, const float *mean,
                                           const float *rstd, float *dg, float *db, int64_t rows, int64_t n,
                                           int accumulate) {
  if (!accumulate)
    for (int64_t c = 0; c < n; c++)
      dg[c] = db[c] = 0.0f;
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * ld, *dr = dy + r * ld;
    float mu = mean[r], rs = rstd[r];
#pragma omp simd
    for (int64_t c = 0; c < n; c++) {
      float d = dr[c];
      dg[c] += d * ((xr[c] - mu) * rs);
      db[c] += d;
    }
  }
}

void strata__host_ln_param_grads(const float *x, const float *dy, int64_t ld, const float *mean,
                                           const float *rstd, float *dg, float *db, int64_t rows, int64_t n,
                                           int accumulate) {
  host_ln_param_grads_simd(x, dy, ld, mean, rstd, dg, db, rows, n, accumulate);
}

/* dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dy * gamma; dx may be dy. */
static HOST_SIMD void host_ln_dx_row_simd(const float *xr, const float *dyr, const float *g, float *dxr, int64_t cols,
                                       float mu, float rs) {
  double s1 = 0, s2 = 0;
#pragma omp simd reduction(+ : s1, s2)
  for (int64_t c = 0; c < cols; c++) {
    float xh = (xr[c] - mu) * rs;
    float dxh = dyr[c] * g[c];
    s1 += dxh;
    s2 += (double)dxh * xh;
  }
  float m1 = (float)(s1 / (double)cols), m2 = (float)(s2 / (double)cols);
#pragma omp simd
  for (int64_t c = 0; c < cols; c++) {
    float xh = (xr[c] - mu) * rs;
    dxr[c] = rs * (dyr[c] * g[c] - m1 - xh * m2);
  }
}

void strata__host_ln_dx_row(const float *xr, const float *dyr, const float *g, float *dxr, int64_t cols,
                                       float mu, float rs) {
  host_ln_dx_row_simd(xr, dyr, g, dxr, cols, mu, rs);
}

static void layernorm_bwd(const struct strata__op *o) {
  const float *x = F(o->u.ln.x), *g = F(o->u.ln.gamma), *mean = F(o->u.ln.mean), *rstd = F(o->u.ln.rstd);
  const float *dy = F(o->u.ln.dy);
  float *dx = F(o->u.ln.dx), *dg = F(o->u.ln.dgamma), *db = F(o->u.ln.dbeta);
  int64_t cols = o->u.ln.cols, rows = o->u.ln.rows;
  /* gamma and beta first: dx may be dy */
  int64_t par_n = rows * cols, pieces = (cols + COLS_SPAN - 1) / COLS_SPAN;
  PAR(par_n)
  for (int64_t i = 0; i < pieces; i++) {
    int64_t c0 = i * COLS_SPAN, c1 = c0 + COLS_SPAN < cols ? c0 + COLS_SPAN : cols;
    strata__host_ln_param_grads(x + c0, dy + c0, cols, mean, rstd, dg + c0, db + c0, rows, c1 - c0, o->u.ln.accumulate);
  }
  PAR(par_n)
  for (int64_t r = 0; r < rows; r++)
    strata__host_ln_dx_row(x + r * cols, dy + r * cols, g, dx + r * cols, cols, mean[r], rstd[r]);
}

/* One row of softmax(scale * x) over its first `valid` entries, zeros after them. */
static HOST_SIMD void softmax_row(const float *xr, float *yr, int64_t valid, int64_t cols, float sc) {
  float mx = -FLT_MAX;
#pragma omp simd reduction(max : mx)
  for (int64_t c = 0; c < valid; c++) {
    float v = sc * xr[c];
    mx = v > mx ? v : mx;
  }
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t c = 0; c < valid; c++) {
    float e = vm_exp(sc * xr[c] - mx);
    yr[c] = e;
    s += e;
  }
  float inv = (float)(1.0 / s);
#pragma omp simd
  for (int64_t c = 0; c < valid; c++)
    yr[c] *= inv;
  for (int64_t c = valid; c < cols; c++)
    yr[c] = 0.0f;
}

static void softmax_fwd(const struct strata__op *o) {
  const float *x = F(o->u.softmax.x);
  float *y = F(o->u.softmax.y);
  int64_t cols = o->u.softmax.cols;
  int64_t par_n = o->u.softmax.rows * cols;
  PAR(par_n)
  for (int64_t r = 0; r < o->u.softmax.rows; r++) {
    int64_t valid = o->u.softmax.causal ? r % cols + 1 : cols;
    softmax_row(x + r * cols, y + r * cols, valid, cols, o->u.softmax.scale);
  }
}

static HOST_SIMD void softmax_bwd_row(const float *yr, const float *dyr, float *dxr, int64_t cols, float sc) {
  double dot = 0;
#pragma omp simd reduction(+ : dot)
  for (int64_t c = 0; c < cols; c++)
    dot += (double)yr[c] * dyr[c];
  float d = (float)dot;
#pragma omp simd
  for (int64_t c = 0; c < cols; c++)
    dxr[c] = sc * yr[c] * (dyr[c] - d);
}

static void softmax_bwd(const struct strata__op *o) {
  const float *y = F(o->u.softmax.y), *dy = F(o->u.softmax.dy);
  float *dx = F(o->u.softmax.dx);
  int64_t cols = o->u.softmax.cols;
  int64_t par_n = o->u.softmax.rows * cols;
  PAR(par_n)
  for (int64_t r = 0; r < o->u.softmax.rows; r++)
    softmax_bwd_row(y + r * cols, dy + r * cols, dx + r * cols, cols, o->u.softmax.scale);
}

static void embedding_fwd(const struct strata__op *o) {
  const int32_t *tok = INT(o->u.emb.tokens);
  const float *table = F(o->u.emb.table);
  float *out = F(o->u.emb.out);
  int64_t dim = o->u.emb.dim;
  int64_t par_n = o->u.emb.n * dim;
  PAR(par_n)
  for (int64_t i = 0; i < o->u.emb.n; i++) {
    int32_t t = tok[i];
    if (t >= 0 && t < o->u.emb.vocab)
      memcpy(out + i * dim, table + (int64_t)t * dim, (size_t)dim * sizeof *out);
    else
      memset(out + i * dim, 0, (size_t)dim * sizeof *out);
  }
}

static void embedding_bwd(const struct strata__op *o) {
  const int32_t *tok = INT(o->u.emb.tokens);
  const float *dout = F(o->u.emb.dout);
  float *dtable = F(o->u.emb.dtable);
  int64_t dim = o->u.emb.dim;
  if (!o->u.emb.accumulate)
    memset(dtable, 0, (size_t)(o->u.emb.vocab * dim) * sizeof *dtable);
  for (int64_t i = 0; i < o->u.emb.n; i++) {
    int32_t t = tok[i];
    if (t < 0 || t >= o->u.emb.vocab)
      continue;
    for (int64_t d = 0; d < dim; d++)
      dtable[(int64_t)t * dim + d] += dout[i * dim + d];
  }
}

/* log(sum(exp(row))) computed around the row maximum. */
static HOST_SIMD float logsumexp(const float *row, int64_t n) {
  float mx = -FLT_MAX;
#pragma omp simd reduction(max : mx)
  for (int64_t c = 0; c < n; c++)
    mx = row[c] > mx ? row[c] : mx;
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t c = 0; c < n; c++)
    s += vm_exp(row[c] - mx);
  return mx + (float)log(s);
}

static void xent_fwd(const struct strata__op *o) {
  const float *logits = F(o->u.xent.logits);
  const int32_t *tgt = INT(o->u.xent.targets);
  float *loss = F(o->u.xent.loss);
  int64_t v = o->u.xent.vocab;
  int64_t par_n = o->u.xent.rows * v;
  PAR(par_n)
  for (int64_t r = 0; r < o->u.xent.rows; r++) {
    int32_t t = tgt[r];
    loss[r] = t < 0 || t >= v ? 0.0f : logsumexp(logits + r * v, v) - logits[r * v + t];
  }
}

static HOST_SIMD void xent_bwd_row(const float *lr, float *dr, int64_t v, float lse, float scale) {
#pragma omp simd
  for (int64_t c = 0; c < v; c++)
    dr[c] = scale * vm_exp(lr[c] - lse);
}

static void xent_bwd(const struct strata__op *o) {
  const float *logits = F(o->u.xent.logits);
  const int32_t *tgt = INT(o->u.xent.targets);
  float *dl = F(o->u.xent.dlogits);
  int64_t v = o->u.xent.vocab;
  int64_t par_n = o->u.xent.rows * v;
  PAR(par_n)
  for (int64_t r = 0; r < o->u.xent.rows; r++) {
    int32_t t = tgt[r];
    float *dr = dl + r * v;
    if (t < 0 || t >= v) {
      memset(dr, 0, (size_t)v * sizeof *dr);
      continue;
    }
    const float *lr = logits + r * v;
    float lse = logsumexp(lr, v);
    xent_bwd_row(lr, dr, v, lse, o->u.xent.scale);
    dr[t] = o->u.xent.scale * (vm_exp(lr[t] - lse) - 1.0f);
  }
}

static HOST_SIMD void adamw_span(float *p, float *m, float *v, const float *g, int64_t n, float b1, float b2, float c1,
                                 float c2, float lr, float eps, float wd) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++) {
    float mi = b1 * m[i] + (1.0f - b1) * g[i];
    float vi = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    m[i] = mi;
    v[i] = vi;
    float mh = mi / c1, vh = vi / c2;
    p[i] -= lr * (mh / (sqrtf(vh) + eps) + wd * p[i]);
  }
}

/* adamw_span with the gradient scaled first and written back (g[i] *= gs, as SCALE): in the same loop, so the
** gradient is read once; the update reads the scaled float, so the bits are those of the two passes. */
static HOST_SIMD void adamw_span_scaled(float *p, float *m, float *v, float *g, int64_t n, float gs, float b1,
                                        float b2, float c1, float c2, float lr, float eps, float wd) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++) {
    float gi = g[i] * gs;
    g[i] = gi;
    float mi = b1 * m[i] + (1.0f - b1) * gi;
    float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float mh = mi / c1, vh = vi / c2;
    p[i] -= lr * (mh / (sqrtf(vh) + eps) + wd * p[i]);
  }
}

/*
** Vocabulary-parallel cross-entropy over one slice: the host reference's
** formulas (logsumexp, xent_fwd, xent_bwd above), split where the slices
** reduce. Maxima in eight lanes (a maximum does not depend on the order);
** sums of exponentials in double and in column order, as logsumexp.
*/
static float row_max(const float *row, int64_t n) {
  float m[8];
  for (int k = 0; k < 8; k++)
    m[k] = -FLT_MAX;
  int64_t c = 0;
  for (; c + 8 <= n; c += 8)
    for (int k = 0; k < 8; k++)
      m[k] = fmaxf(m[k], row[c + k]);
  for (; c < n; c++)
    m[0] = fmaxf(m[0], row[c]);
  for (int k = 1; k < 8; k++)
    m[0] = fmaxf(m[0], m[k]);
  return m[0];
}

static void xent_vp_max(const struct strata__op *o) {
  const float *logits = F(o->u.xvp.logits);
  float *rowmax = F(o->u.xvp.rowmax);
  int64_t vl = o->u.xvp.vl;
  int64_t par_n = o->u.xvp.rows * vl;
  PAR(par_n)
  for (int64_t r = 0; r < o->u.xvp.rows; r++)
    rowmax[r] = row_max(logits + r * vl, vl);
}

/* sum(exp(row - mx)) in double, as logsumexp sums it (the same exponential, so that the slices' sums add up to
** what the whole row's would be to rounding) */
static HOST_SIMD double sum_exp(const float *row, int64_t n, float mx) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t c = 0; c < n; c++)
    s += vm_exp(row[c] - mx);
  return s;
}

static void xent_vp_sums(const struct strata__op *o) {
  const float *logits = F(o->u.xvp.logits), *rowmax = F(o->u.xvp.rowmax);
  const int32_t *tgt = INT(o->u.xvp.targets);
  float *sumexp = F(o->u.xvp.sumexp), *tlogit = F(o->u.xvp.tlogit);
  int64_t vl = o->u.xvp.vl, off = o->u.xvp.off;
  int64_t par_n = o->u.xvp.rows * vl;
  PAR(par_n)
  for (int64_t r = 0; r < o->u.xvp.rows; r++) {
    const float *row = logits + r * vl;
    sumexp[r] = (float)sum_exp(row, vl, rowmax[r]);
    int64_t t = tgt[r];
    tlogit[r] = t >= off && t < off + vl ? row[t - off] : 0.0f;
  }
}

static void xent_vp_loss(const struct strata__op *o) {
  const float *rowmax = F(o->u.xvp.rowmax), *sumexp = F(o->u.xvp.sumexp), *tlogit = F(o->u.xvp.tlogit);
  const int32_t *tgt = INT(o->u.xvp.targets);
  float *loss = F(o->u.xvp.loss);
  int64_t par_n = o->u.xvp.rows;
  PAR(par_n)
  for (int64_t r = 0; r < o->u.xvp.rows; r++) {
    int32_t t = tgt[r];
    loss[r] = t < 0 || t >= o->u.xvp.vocab ? 0.0f : rowmax[r] + (float)log((double)sumexp[r]) - tlogit[r];
  }
}

static void xent_vp_bwd(const struct strata__op *o) {
  const float *logits = F(o->u.xvp.logits), *rowmax = F(o->u.xvp.rowmax), *sumexp = F(o->u.xvp.sumexp);
  const int32_t *tgt = INT(o->u.xvp.targets);
  float *dl = F(o->u.xvp.dlogits);
  int64_t vl = o->u.xvp.vl, off = o->u.xvp.off;
  float sc = o->u.xvp.scale;
  int64_t par_n = o->u.xvp.rows * vl;
  PAR(par_n)
  for (int64_t r = 0; r < o->u.xvp.rows; r++) {
    int64_t t = tgt[r];
    const float *row = logits + r * vl;
    float *dr = dl + r * vl;
    if (t < 0 || t >= o->u.xvp.vocab) {
      memset(dr, 0, (size_t)vl * sizeof *dr);
      continue;
    }
    float lse = rowmax[r] + (float)log((double)sumexp[r]);
    /* the one-hot column apart, so that the loop carries no comparison; its
    ** probability first, since dlogits may be logits */
    int own = t >= off && t < off + vl;
    float pt = own ? vm_exp(row[t - off] - lse) : 0.0f;
    xent_bwd_row(row, dr, vl, lse, sc);
    if (own)
      dr[t - off] = sc * (pt - 1.0f);
  }
}

/* out[i] = tokens[i] - off inside [off, off + count), else -1; out may be tokens. */
static void tokens_shift(const struct strata__op *o) {
  const int32_t *tok = INT(o->u.shift.tokens);
  int32_t *out = INT(o->u.shift.out);
  int64_t off = o->u.shift.off, end = o->u.shift.off + o->u.shift.count;
  int64_t par_n = o->u.shift.n;
  PAR(par_n)
  for (int64_t i = 0; i < o->u.shift.n; i++) {
    int64_t t = tok[i];
    out[i] = t >= off && t < end ? (int32_t)(t - off) : -1;
  }
}

/*
** ADAMW_FUSED: a piece of SPAN at a time, the gradient scaled as SCALE
** does and the AdamW span as ADAMW does (one loop, adamw_span_scaled),
** the updated parameters rounded into the bfloat16 copy as CONVERT does:
** the three ops' bits, with each piece still in the cache for the next,
** and one fork for all. The copy is streamed (strata__bf16_from_f32_stream):
** nothing reads it before the next step's forward, and its lines are not
** read in first (512x8 GPT, three alternated runs: AdamW 18.3 ms a step
** with plain stores, 17.2 streamed).
*/
static void adamw_fused(const struct strata__op *o) {
  float *p = F(o->u.adamw.param), *m = F(o->u.adamw.m), *v = F(o->u.adamw.v), *g = F(o->u.adamw.grad);
  uint16_t *p16 = o->u.adamw.param16.h ? (uint16_t *)o->u.adamw.param16.h + o->u.adamw.param16.off : NULL;
  float b1 = o->u.adamw.beta1, b2 = o->u.adamw.beta2, gs = o->u.adamw.gscale;
  const float c1 = o->u.adamw.bc1, c2 = o->u.adamw.bc2;
  FOR_SPANS(o->u.adamw.n, {
    if (gs != 1.0f)
      adamw_span_scaled(p + lo, m + lo, v + lo, g + lo, len, gs, b1, b2, c1, c2, o->u.adamw.lr, o->u.adamw.eps,
                        o->u.adamw.weight_decay);
    else
      adamw_span(p + lo, m + lo, v + lo, g + lo, len, b1, b2, c1, c2, o->u.adamw.lr, o->u.adamw.eps,
                 o->u.adamw.weight_decay);
    if (p16)
      strata__bf16_from_f32_stream(p + lo, p16 + lo, len);
  });
}

static void adamw(const struct strata__op *o) {
  float *p = F(o->u.adamw.param), *m = F(o->u.adamw.m), *v = F(o->u.adamw.v);
  const float *g = F(o->u.adamw.grad);
  float b1 = o->u.adamw.beta1, b2 = o->u.adamw.beta2;
  const float c1 = o->u.adamw.bc1, c2 = o->u.adamw.bc2;
  FOR_SPANS(o->u.adamw.n, adamw_span(p + lo, m + lo, v + lo, g + lo, len, b1, b2, c1, c2, o->u.adamw.lr,
                                     o->u.adamw.eps, o->u.adamw.weight_decay));
}

/* The sum of x^2 over n elements, in double, in order. */
static double sum_squares(const float *x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++)
    s += (double)x[i] * x[i];
  return s;
}

static void sumsq(const struct strata__op *o) {
  double s = sum_squares(F(o->u.sumsq.x), o->u.sumsq.n);
  float *out = F(o->u.sumsq.out);
  out[0] = (o->u.sumsq.accumulate ? out[0] : 0.0f) + (float)s;
}

/*
** The sums of x[k]^2 over n[k] elements for k < CHAINS (an empty span: 0),
** each its own chain of double additions in element order, so each is
** sum_squares' bits; the chains advance together, so one addition's
** latency hides behind the others' (eight keep a core's two adders busy).
** Chains drop out as their spans end.
*/
#define CHAINS 8
#define CHAINS_STEP(K)                                                                                             \
  do {                                                                                                             \
    double a_[K];                                                                                                  \
    for (int j = 0; j < (K); j++)                                                                                  \
      a_[j] = s[j];                                                                                                \
    for (; i < m; i++) {                                                                                           \
      _Pragma("GCC unroll 8") for (int j = 0; j < (K); j++) a_[j] += (double)p[j][i] * p[j][i];                    \
    }                                                                                                              \
    for (int j = 0; j < (K); j++)                                                                                  \
      s[j] = a_[j];                                                                                                \
  } while (0)

static void sum_squares_chains_plain(const float *const *x, const int64_t *n, double *out) {
  double s[CHAINS] = {0};
  const float *p[CHAINS];
  int at[CHAINS], k = 0;
  for (int j = 0; j < CHAINS; j++)
    if (n[j] > 0)
      at[k] = j, p[k++] = x[j];
  int64_t i = 0;
  while (k > 0) {
    int64_t m = n[at[0]];
    for (int j = 1; j < k; j++)
      m = n[at[j]] < m ? n[at[j]] : m;
    switch (k) {
    case 8: CHAINS_STEP(8); break;
    case 7: CHAINS_STEP(7); break;
    case 6: CHAINS_STEP(6); break;
    case 5: CHAINS_STEP(5); break;
    case 4: CHAINS_STEP(4); break;
    case 3: CHAINS_STEP(3); break;
    case 2: CHAINS_STEP(2); break;
    default: CHAINS_STEP(1); break;
    }
    /* the chains whose spans ended leave; the others keep their places' order */
    int kept = 0;
    for (int j = 0; j < k; j++) {
      if (n[at[j]] > m) {
        at[kept] = at[j], p[kept] = p[j], s[kept] = s[j];
        kept++;
      } else {
        out[at[j]] = s[j];
      }
    }
    k = kept;
  }
  for (int j = 0; j < CHAINS; j++)
    if (n[j] <= 0)
      out[j] = 0;
}

#ifdef HAVE_CHAINS_AVX512
#define AVX512F __attribute__((target("avx512f")))

/* r[k] lane j = r[j] lane k: eight rows of eight floats transposed. */
AVX512F static inline void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  _Pragma("GCC unroll 8") for (int j = 0; j < 8; j += 2) {
    t[j] = _mm256_unpacklo_ps(r[j], r[j + 1]);
    t[j + 1] = _mm256_unpackhi_ps(r[j], r[j + 1]);
  }
  _Pragma("GCC unroll 8") for (int j = 0; j < 8; j += 4) {
    u[j] = _mm256_shuffle_ps(t[j], t[j + 2], 0x44);
    u[j + 1] = _mm256_shuffle_ps(t[j], t[j + 2], 0xee);
    u[j + 2] = _mm256_shuffle_ps(t[j + 1], t[j + 3], 0x44);
    u[j + 3] = _mm256_shuffle_ps(t[j + 1], t[j + 3], 0xee);
  }
  _Pragma("GCC unroll 8") for (int k = 0; k < 4; k++) {
    r[k] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x20);
    r[k + 4] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x31);
  }
}

/*
** sum_squares_chains_plain's sums with the eight chains side by side in
** the lanes of one vector of doubles: eight elements of each span loaded,
** transposed, widened (exactly) and added as x*x + s by fused multiply-adds
** in element order. A float's square is exact in double, so the fused
** multiply-add rounds once where the plain chain's product and sum round
** once too (the product exactly): the same bits. A chain whose span ended
** reads zeros (adding 0 to a sum of squares leaves it); a segment's last
** few elements go one at a time. Eight streams at once are more than the
** CPU's prefetcher runs ahead of: each is prefetched AHEAD elements on
** (with the gradients in memory, 8 ms for 24 M floats on one core, not 12).
*/
#define AHEAD 512
AVX512F static void sum_squares_chains_avx512(const float *const *x, const int64_t *n, double *out) {
  static const float zeros[8];
  __m512d s = _mm512_setzero_pd();
  unsigned live = 0;
  for (int j = 0; j < CHAINS; j++)
    live |= n[j] > 0 ? 1u << j : 0;
  int64_t i = 0;
  while (live) {
    int64_t m = INT64_MAX;
    for (int j = 0; j < CHAINS; j++)
      m = (live >> j & 1) && n[j] < m ? n[j] : m;
    const float *q[8]; /* a live chain's elements at q[j] + i, an ended one's zeros at q[j] + 0 */
    int64_t at[8];
    for (int j = 0; j < 8; j++)
      q[j] = (live >> j & 1) ? x[j] : zeros, at[j] = (live >> j & 1) ? -1 : 0;
    for (; i + 8 <= m; i += 8) {
      __m256 r[8];
      _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) {
        r[j] = _mm256_loadu_ps(q[j] + (i & at[j]));
        _mm_prefetch((const char *)((uintptr_t)q[j] + (uintptr_t)((i + AHEAD) & at[j]) * 4), _MM_HINT_T0);
      }
      transpose8(r);
      _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
        __m512d d = _mm512_cvtps_pd(r[k]);
        s = _mm512_fmadd_pd(d, d, s);
      }
    }
    double a[8];
    _mm512_storeu_pd(a, s);
    for (; i < m; i++)
      for (int j = 0; j < CHAINS; j++)
        if (live >> j & 1)
          a[j] += (double)x[j][i] * x[j][i];
    s = _mm512_loadu_pd(a);
    for (int j = 0; j < CHAINS; j++)
      if ((live >> j & 1) && n[j] == m)
        out[j] = a[j], live &= ~(1u << j);
  }
  for (int j = 0; j < CHAINS; j++)
    if (n[j] <= 0)
      out[j] = 0;
}
#endif

/* The chains side by side in a vector where the CPU has AVX-512 (STRATA_HOST_CPU_HIDE=avx512f: not), else in turn. */
static void sum_squares_chains(const float *const *x, const int64_t *n, double *out) {
#ifdef HAVE_CHAINS_AVX512
  static int avx512 = -1;
  int v = __atomic_load_n(&avx512, __ATOMIC_RELAXED);
  if (v < 0)
    __atomic_store_n(&avx512, v = (strata__cpu_features() & STRATA__CPU_AVX512F) != 0, __ATOMIC_RELAXED);
  if (v) {
    sum_squares_chains_avx512(x, n, out);
    return;
  }
#endif
  sum_squares_chains_plain(x, n, out);
}

struct span_len {
  int64_t n, t;
};

/* Longest first (ties: the earlier span first). */
static int by_length(const void *pa, const void *pb) {
  const struct span_len *a = pa, *b = pb;
  return a->n != b->n ? (a->n < b->n) - (a->n > b->n) : (a->t > b->t) - (a->t < b->t);
}

/* The sums of the k <= CHAINS spans sp[0, k) of x as one group of chains, into out[sp[j].t]. */
static void sumsq_group(const float *x, const int64_t *bd, const struct span_len *sp, int64_t k, float *out) {
  const float *xs[CHAINS];
  int64_t ns[CHAINS];
  double sums[CHAINS];
  for (int j = 0; j < CHAINS; j++)
    xs[j] = j < k ? x + bd[2 * sp[j].t] : x, ns[j] = j < k ? bd[2 * sp[j].t + 1] : 0;
  sum_squares_chains(xs, ns, sums);
  for (int j = 0; j < k; j++)
    out[sp[j].t] = 0.0f + (float)sums[j];
}

/*
** SUMSQ_SPANS: each span's sum as SUMSQ's, in groups of CHAINS spans of
** about the same length whose chains run together. The spans are dealt
** out to the threads longest first, each to the one with the fewest
** elements so far, and each thread groups its own in that order: a model's
** few largest tensors (eight of them a group) no longer leave one thread
** a whole group behind the other. Which thread sums a span does not change
** its bits.
*/
static void sumsq_spans(const struct strata__op *o) {
  const float *x = F(o->u.spans.x);
  const int64_t *bd = o->u.spans.bounds;
  float *out = F(o->u.spans.out);
  int64_t count = o->u.spans.count, par_n = 0;
  for (int64_t t = 0; t < count; t++)
    par_n += bd[2 * t + 1];
  const int nt = par_n >= PAR_MIN && strata__host_threads > 1 ? strata__host_threads : 1;
  struct span_len *sp = malloc((size_t)count * 2 * sizeof *sp + (size_t)(2 * nt + 1) * sizeof(int64_t));
  if (!sp) { /* in the spans' order, on this thread */
    for (int64_t g = 0; g < count; g += CHAINS) {
      struct span_len one[CHAINS];
      for (int64_t j = 0; j < CHAINS && g + j < count; j++)
        one[j] = (struct span_len){0, g + j};
      sumsq_group(x, bd, one, count - g < CHAINS ? count - g : CHAINS, out);
    }
    return;
  }
  struct span_len *mine = sp + count; /* thread k's spans: mine[start[k], start[k + 1]) */
  int64_t *load = (int64_t *)(mine + count), *start = load + nt;
  for (int64_t t = 0; t < count; t++)
    sp[t] = (struct span_len){bd[2 * t + 1], t};
  qsort(sp, (size_t)count, sizeof *sp, by_length);
  for (int k = 0; k < nt; k++)
    load[k] = 0, start[k] = 0;
  for (int64_t i = 0; i < count; i++) { /* the least loaded thread takes it; its number kept in n for now */
    int k = 0;
    for (int j = 1; j < nt; j++)
      k = load[j] < load[k] ? j : k;
    load[k] += sp[i].n;
    sp[i].n = k;
    start[k]++;
  }
  int64_t at = 0;
  for (int k = 0; k <= nt; k++) { /* counts to offsets */
    int64_t c = k < nt ? start[k] : 0;
    start[k] = at, at += c;
  }
  for (int k = 0; k < nt; k++)
    load[k] = start[k];
  for (int64_t i = 0; i < count; i++)
    mine[load[sp[i].n]++] = sp[i];
  _Pragma("omp parallel for schedule(static, 1) num_threads(nt) if (nt > 1)")
  for (int k = 0; k < nt; k++)
    for (int64_t g = start[k]; g < start[k + 1]; g += CHAINS)
      sumsq_group(x, bd, mine + g, start[k + 1] - g < CHAINS ? start[k + 1] - g : CHAINS, out);
  free(sp);
}

static void im2col(const struct strata__op *o) {
  const float *x = F(o->u.im2col.x);
  float *col = F(o->u.im2col.col);
  int64_t h = o->u.im2col.h, w = o->u.im2col.w, r = o->u.im2col.r, s = o->u.im2col.s;
  int64_t p = o->u.im2col.p, q = o->u.im2col.q, st = o->u.im2col.stride, pad = o->u.im2col.pad;
  for (int64_t c = 0; c < o->u.im2col.c; c++)
    for (int64_t i = 0; i < r; i++)
      for (int64_t j = 0; j < s; j++) {
        float *row = col + ((c * r + i) * s + j) * p * q;
        for (int64_t y = 0; y < p; y++)
          for (int64_t xx = 0; xx < q; xx++) {
            int64_t iy = y * st - pad + i, ix = xx * st - pad + j;
            row[y * q + xx] = (iy >= 0 && iy < h && ix >= 0 && ix < w) ? x[(c * h + iy) * w + ix] : 0.0f;
          }
      }
}

static void col2im(const struct strata__op *o) {
  float *x = F(o->u.im2col.x);
  const float *col = F(o->u.im2col.col);
  int64_t h = o->u.im2col.h, w = o->u.im2col.w, r = o->u.im2col.r, s = o->u.im2col.s;
  int64_t p = o->u.im2col.p, q = o->u.im2col.q, st = o->u.im2col.stride, pad = o->u.im2col.pad;
  memset(x, 0, (size_t)(o->u.im2col.c * h * w) * sizeof *x);
  for (int64_t c = 0; c < o->u.im2col.c; c++)
    for (int64_t i = 0; i < r; i++)
      for (int64_t j = 0; j < s; j++) {
        const float *row = col + ((c * r + i) * s + j) * p * q;
        for (int64_t y = 0; y < p; y++)
          for (int64_t xx = 0; xx < q; xx++) {
            int64_t iy = y * st - pad + i, ix = xx * st - pad + j;
            if (iy >= 0 && iy < h && ix >= 0 && ix < w)
              x[(c * h + iy) * w + ix] += row[y * q + xx];
          }
      }
}

static void maxpool_fwd(const struct strata__op *o) {
  const float *x = F(o->u.pool.x);
  float *y = F(o->u.pool.y);
  int32_t *idx = INT(o->u.pool.idx);
  int64_t h = o->u.pool.h, w = o->u.pool.w, p = o->u.pool.p, q = o->u.pool.q;
  int64_t size = o->u.pool.size, st = o->u.pool.stride;
  for (int64_t pl = 0; pl < o->u.pool.planes; pl++)
    for (int64_t i = 0; i < p; i++)
      for (int64_t j = 0; j < q; j++) {
        float best = -FLT_MAX;
        int32_t at = -1;
        for (int64_t a = 0; a < size; a++)
          for (int64_t b = 0; b < size; b++) {
            int64_t pos = (i * st + a) * w + (j * st + b);
            float v = x[pl * h * w + pos];
            if (at < 0 || v > best) {
              best = v;
              at = (int32_t)pos;
            }
          }
        y[(pl * p + i) * q + j] = best;
        idx[(pl * p + i) * q + j] = at;
      }
}

static void maxpool_bwd(const struct strata__op *o) {
  const float *dy = F(o->u.pool.dy);
  const int32_t *idx = INT(o->u.pool.idx);
  float *dx = F(o->u.pool.dx);
  int64_t hw = o->u.pool.h * o->u.pool.w, pq = o->u.pool.p * o->u.pool.q;
  memset(dx, 0, (size_t)(o->u.pool.planes * hw) * sizeof *dx);
  for (int64_t pl = 0; pl < o->u.pool.planes; pl++)
    for (int64_t k = 0; k < pq; k++) {
      int32_t at = idx[pl * pq + k];
      if (at >= 0 && at < hw)
        dx[pl * hw + at] += dy[pl * pq + k];
    }
}

typedef void (*host_fn)(const struct strata__op *);

static const host_fn host_ops[STRATA__OP_COUNT] = {
    [STRATA__OP_GEMM] = gemm,
    [STRATA__OP_BIAS_ADD] = bias_add,
    [STRATA__OP_BIAS_GRAD] = bias_grad,
    [STRATA__OP_GELU_FWD] = gelu_fwd,
    [STRATA__OP_GELU_BWD] = gelu_bwd,
    [STRATA__OP_RELU_FWD] = relu_fwd,
    [STRATA__OP_RELU_BWD] = relu_bwd,
    [STRATA__OP_ADD] = add,
    [STRATA__OP_SCALE] = scale,
    [STRATA__OP_FILL] = fill,
    [STRATA__OP_LAYERNORM_FWD] = layernorm_fwd,
    [STRATA__OP_LAYERNORM_BWD] = layernorm_bwd,
    [STRATA__OP_SOFTMAX_FWD] = softmax_fwd,
    [STRATA__OP_SOFTMAX_BWD] = softmax_bwd,
    [STRATA__OP_EMBEDDING_FWD] = embedding_fwd,
    [STRATA__OP_EMBEDDING_BWD] = embedding_bwd,
    [STRATA__OP_XENT_FWD] = xent_fwd,
    [STRATA__OP_XENT_BWD] = xent_bwd,
    [STRATA__OP_ADAMW] = adamw,
    [STRATA__OP_SUMSQ] = sumsq,
    [STRATA__OP_IM2COL] = im2col,
    [STRATA__OP_COL2IM] = col2im,
    [STRATA__OP_MAXPOOL_FWD] = maxpool_fwd,
    [STRATA__OP_MAXPOOL_BWD] = maxpool_bwd,
    [STRATA__OP_REDUCE] = reduce,
    [STRATA__OP_XENT_VP_MAX] = xent_vp_max,
    [STRATA__OP_XENT_VP_SUMS] = xent_vp_sums,
    [STRATA__OP_XENT_VP_LOSS] = xent_vp_loss,
    [STRATA__OP_XENT_VP_BWD] = xent_vp_bwd,
    [STRATA__OP_TOKENS_SHIFT] = tokens_shift,
    [STRATA__OP_ADAMW_FUSED] = adamw_fused,
    [STRATA__OP_SUMSQ_SPANS] = sumsq_spans,
    [STRATA__OP_RMSNORM_FWD] = strata__host_rmsnorm_fwd,
    [STRATA__OP_RMSNORM_BWD] = strata__host_rmsnorm_bwd,
    [STRATA__OP_SWIGLU_FWD] = strata__host_swiglu_fwd,
    [STRATA__OP_SWIGLU_BWD] = strata__host_swiglu_bwd,
    [STRATA__OP_ROPE_FWD] = strata__host_rope,
    [STRATA__OP_ROPE_BWD] = strata__host_rope,
};

int strata__host_op_supported(enum strata__op_id id) {
  return ((unsigned)id < STRATA__OP_COUNT && host_ops[id] != NULL) || id == STRATA__OP_ATTENTION_FWD ||
         id == STRATA__OP_ATTENTION_BWD || id == STRATA__OP_CONVERT || id == STRATA__OP_LINEAR;
}

/* The types of up to three operands as a record's dtypes bits. */
static unsigned dtypes_of(struct strata__mem a, struct strata__mem b, struct strata__mem c) {
  return (1u << a.dtype) | (1u << b.dtype) | (1u << c.dtype);
}

/*
** LINEAR: fused where gemm-bf16.c can (bfloat16 x, w, y through oneDNN),
** else the records of strata_gemm (alpha 1, beta 0), strata_bias_add and
** strata_add(y, res, y) run in turn: the separate ops' bits.
*/
static int linear(const struct strata__op *op) {
  int rc = strata__host_linear_fused(op);
  if (rc != STRATA_ERR_UNSUPPORTED)
    return rc;
  const __typeof__(op->u.linear) *l = &op->u.linear;
  struct strata__op g = {.id = STRATA__OP_GEMM}, b = {.id = STRATA__OP_BIAS_ADD}, a = {.id = STRATA__OP_ADD};
  g.dtypes = dtypes_of(l->x, l->w, l->y);
  g.u.gemm.m = l->rows, g.u.gemm.n = l->out, g.u.gemm.k = l->in;
  g.u.gemm.lda = l->in, g.u.gemm.ldb = l->out, g.u.gemm.ldc = l->out, g.u.gemm.batch = 1;
  g.u.gemm.alpha = 1.0f, g.u.gemm.beta = 0.0f;
  g.u.gemm.a = l->x, g.u.gemm.b = l->w, g.u.gemm.c = l->y;
  if ((rc = strata__host_op_run(&g)) != STRATA_OK)
    return rc;
  b.dtypes = dtypes_of(l->y, l->bias, l->y);
  b.u.bias.y = l->y, b.u.bias.bias = l->bias, b.u.bias.rows = l->rows, b.u.bias.cols = l->out;
  if ((rc = strata__host_op_run(&b)) != STRATA_OK || !l->res.h)
    return rc;
  a.dtypes = dtypes_of(l->y, l->res, l->y);
  a.u.ew.x = l->y, a.u.ew.b = l->res, a.u.ew.y = l->y, a.u.ew.n = l->rows * l->out;
  return strata__host_op_run(&a);
}

int strata__host_op_run(const struct strata__op *op) {
  if (op->id == STRATA__OP_LINEAR)
    return linear(op);
  if ((op->dtypes & STRATA__DTYPES_BF16) || op->id == STRATA__OP_CONVERT ||
      (op->id == STRATA__OP_REDUCE && op->u.reduce.dtype == STRATA_BFLOAT16))
    return strata__host_op_run_bf16(op);
  return strata__host_op_run_f32(op);
}

int strata__host_op_run_f32(const struct strata__op *op) {
  if (op->id == STRATA__OP_LINEAR) /* a sequence of records, not a kernel of the table */
    return linear(op);
  /* the ops that allocate scratch, and so can fail */
  if (op->id == STRATA__OP_ATTENTION_FWD)
    return strata__host_attention_fwd(op);
  if (op->id == STRATA__OP_ATTENTION_BWD)
    return strata__host_attention_bwd(op);
  if (!strata__host_op_supported(op->id))
    return STRATA_ERR_UNSUPPORTED;
  host_ops[op->id](op);
  return STRATA_OK;
}
