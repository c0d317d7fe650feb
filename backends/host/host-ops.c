/* SPDX-License-Identifier: MIT */
/* host-ops.c — the host backend's ops in plain C (the reference other backends are tested against) and CBLAS GEMM. */
#include "config.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "host.h"

#if defined(__SSE__)
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

static void gemm(const struct strata__op *o) {
  const float *a = F(o->u.gemm.a), *b = F(o->u.gemm.b);
  float *c = F(o->u.gemm.c);
  for (int64_t i = 0; i < o->u.gemm.batch; i++)
    cblas_sgemm(CblasRowMajor, o->u.gemm.trans_a ? CblasTrans : CblasNoTrans,
                o->u.gemm.trans_b ? CblasTrans : CblasNoTrans, (int)o->u.gemm.m, (int)o->u.gemm.n, (int)o->u.gemm.k,
                o->u.gemm.alpha, a + i * o->u.gemm.stride_a, (int)o->u.gemm.lda, b + i * o->u.gemm.stride_b,
                (int)o->u.gemm.ldb, o->u.gemm.beta, c + i * o->u.gemm.stride_c, (int)o->u.gemm.ldc);
}

static void bias_add(const struct strata__op *o) {
  float *y = F(o->u.bias.y);
  const float *b = F(o->u.bias.bias);
  int64_t cols = o->u.bias.cols;
  int64_t par_n = o->u.bias.rows * cols;
  PAR(par_n)
  for (int64_t r = 0; r < o->u.bias.rows; r++)
    for (int64_t c = 0; c < cols; c++)
      y[r * cols + c] += b[c];
}

static void bias_grad(const struct strata__op *o) {
  const float *dy = F(o->u.bias.y);
  float *db = F(o->u.bias.bias);
  int64_t cols = o->u.bias.cols;
  if (!o->u.bias.accumulate)
    memset(db, 0, (size_t)cols * sizeof *db);
  for (int64_t r = 0; r < o->u.bias.rows; r++)
    for (int64_t c = 0; c < cols; c++)
      db[c] += dy[r * cols + c];
}

#define GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_C 0.044715f

/* tanh through one expf: (e^2u - 1) / (e^2u + 1), with u clamped where
** tanh is 1 to float precision. About three times faster than tanhf, which
** goes through expm1f, and exact to a few ulps of 1 + tanh — what GELU uses. */
static inline float tanh_fast(float u) {
  u = u < -9.0f ? -9.0f : u > 9.0f ? 9.0f : u;
  float e = expf(2.0f * u);
  return (e - 1.0f) / (e + 1.0f);
}

static void gelu_fwd(const struct strata__op *o) {
  const float *x = F(o->u.ew.x);
  float *y = F(o->u.ew.y);
  int64_t par_n = o->u.ew.n;
  PAR(par_n)
  for (int64_t i = 0; i < o->u.ew.n; i++) {
    float v = x[i];
    y[i] = 0.5f * v * (1.0f + tanh_fast(GELU_K * (v + GELU_C * v * v * v)));
  }
}

static void gelu_bwd(const struct strata__op *o) {
  const float *x = F(o->u.ew.x), *dy = F(o->u.ew.dy);
  float *dx = F(o->u.ew.dx);
  int64_t par_n = o->u.ew.n;
  PAR(par_n)
  for (int64_t i = 0; i < o->u.ew.n; i++) {
    float v = x[i];
    float t = tanh_fast(GELU_K * (v + GELU_C * v * v * v));
    float dt = (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_C * v * v);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * dt);
  }
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

static void fill(const struct strata__op *o) {
  float *x = F(o->u.ew.x);
  int64_t par_n = o->u.ew.n;
  PAR(par_n)
  for (int64_t i = 0; i < o->u.ew.n; i++)
    x[i] = o->u.ew.alpha;
}

static void layernorm_fwd(const struct strata__op *o) {
  const float *x = F(o->u.ln.x), *g = F(o->u.ln.gamma), *b = F(o->u.ln.beta);
  float *y = F(o->u.ln.y), *mean = F(o->u.ln.mean), *rstd = F(o->u.ln.rstd);
  int64_t cols = o->u.ln.cols;
  int64_t par_n = o->u.ln.rows * cols;
  PAR(par_n)
  for (int64_t r = 0; r < o->u.ln.rows; r++) {
    const float *xr = x + r * cols;
    double s = 0;
    for (int64_t c = 0; c < cols; c++)
      s += xr[c];
    float mu = (float)(s / (double)cols);
    double v = 0;
    for (int64_t c = 0; c < cols; c++)
      v += (double)(xr[c] - mu) * (xr[c] - mu);
    float rs = 1.0f / sqrtf((float)(v / (double)cols) + o->u.ln.eps);
    mean[r] = mu;
    rstd[r] = rs;
    for (int64_t c = 0; c < cols; c++)
      y[r * cols + c] = (xr[c] - mu) * rs * g[c] + b[c];
  }
}

static void layernorm_bwd(const struct strata__op *o) {
  const float *x = F(o->u.ln.x), *g = F(o->u.ln.gamma), *mean = F(o->u.ln.mean), *rstd = F(o->u.ln.rstd);
  const float *dy = F(o->u.ln.dy);
  float *dx = F(o->u.ln.dx), *dg = F(o->u.ln.dgamma), *db = F(o->u.ln.dbeta);
  int64_t cols = o->u.ln.cols, rows = o->u.ln.rows;
  /* gamma and beta first: dx may be dy */
  int64_t par_n = rows * cols;
  PAR(par_n)
  for (int64_t c = 0; c < cols; c++) {
    float sg = o->u.ln.accumulate ? dg[c] : 0.0f, sb = o->u.ln.accumulate ? db[c] : 0.0f;
    for (int64_t r = 0; r < rows; r++) {
      float d = dy[r * cols + c];
      sg += d * ((x[r * cols + c] - mean[r]) * rstd[r]);
      sb += d;
    }
    dg[c] = sg;
    db[c] = sb;
  }
  PAR(par_n)
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * cols, *dyr = dy + r * cols;
    float mu = mean[r], rs = rstd[r];
    /* dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dy * gamma */
    double s1 = 0, s2 = 0;
    for (int64_t c = 0; c < cols; c++) {
      float xh = (xr[c] - mu) * rs;
      float dxh = dyr[c] * g[c];
      s1 += dxh;
      s2 += (double)dxh * xh;
    }
    float m1 = (float)(s1 / (double)cols), m2 = (float)(s2 / (double)cols);
    for (int64_t c = 0; c < cols; c++) {
      float xh = (xr[c] - mu) * rs;
      dx[r * cols + c] = rs * (dyr[c] * g[c] - m1 - xh * m2);
    }
  }
}

static void softmax_fwd(const struct strata__op *o) {
  const float *x = F(o->u.softmax.x);
  float *y = F(o->u.softmax.y);
  int64_t cols = o->u.softmax.cols;
  float sc = o->u.softmax.scale;
  int64_t par_n = o->u.softmax.rows * cols;
  PAR(par_n)
  for (int64_t r = 0; r < o->u.softmax.rows; r++) {
    int64_t valid = o->u.softmax.causal ? r % cols + 1 : cols;
    const float *xr = x + r * cols;
    float *yr = y + r * cols;
    float mx = -FLT_MAX;
    for (int64_t c = 0; c < valid; c++)
      mx = fmaxf(mx, sc * xr[c]);
    double s = 0;
    for (int64_t c = 0; c < valid; c++) {
      yr[c] = expf(sc * xr[c] - mx);
      s += yr[c];
    }
    float inv = (float)(1.0 / s);
    for (int64_t c = 0; c < valid; c++)
      yr[c] *= inv;
    for (int64_t c = valid; c < cols; c++)
      yr[c] = 0.0f;
  }
}

static void softmax_bwd(const struct strata__op *o) {
  const float *y = F(o->u.softmax.y), *dy = F(o->u.softmax.dy);
  float *dx = F(o->u.softmax.dx);
  int64_t cols = o->u.softmax.cols;
  int64_t par_n = o->u.softmax.rows * cols;
  PAR(par_n)
  for (int64_t r = 0; r < o->u.softmax.rows; r++) {
    const float *yr = y + r * cols, *dyr = dy + r * cols;
    double dot = 0;
    for (int64_t c = 0; c < cols; c++)
      dot += (double)yr[c] * dyr[c];
    for (int64_t c = 0; c < cols; c++)
      dx[r * cols + c] = o->u.softmax.scale * yr[c] * (dyr[c] - (float)dot);
  }
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
static float logsumexp(const float *row, int64_t n, float *mx_out) {
  float mx = -FLT_MAX;
  for (int64_t c = 0; c < n; c++)
    mx = fmaxf(mx, row[c]);
  double s = 0;
  for (int64_t c = 0; c < n; c++)
    s += expf(row[c] - mx);
  *mx_out = mx;
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
    if (t < 0 || t >= v) {
      loss[r] = 0.0f;
      continue;
    }
    float mx;
    loss[r] = logsumexp(logits + r * v, v, &mx) - logits[r * v + t];
  }
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
    float mx;
    float lse = logsumexp(logits + r * v, v, &mx);
    for (int64_t c = 0; c < v; c++)
      dr[c] = o->u.xent.scale * (expf(logits[r * v + c] - lse) - (c == t ? 1.0f : 0.0f));
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

static void xent_vp_sums(const struct strata__op *o) {
  const float *logits = F(o->u.xvp.logits), *rowmax = F(o->u.xvp.rowmax);
  const int32_t *tgt = INT(o->u.xvp.targets);
  float *sumexp = F(o->u.xvp.sumexp), *tlogit = F(o->u.xvp.tlogit);
  int64_t vl = o->u.xvp.vl, off = o->u.xvp.off;
  int64_t par_n = o->u.xvp.rows * vl;
  PAR(par_n)
  for (int64_t r = 0; r < o->u.xvp.rows; r++) {
    const float *row = logits + r * vl;
    float mx = rowmax[r];
    double s = 0;
    for (int64_t c = 0; c < vl; c++)
      s += expf(row[c] - mx);
    sumexp[r] = (float)s;
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
    float pt = own ? expf(row[t - off] - lse) : 0.0f;
    for (int64_t c = 0; c < vl; c++)
      dr[c] = sc * expf(row[c] - lse);
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

static void adamw(const struct strata__op *o) {
  float *p = F(o->u.adamw.param), *m = F(o->u.adamw.m), *v = F(o->u.adamw.v);
  const float *g = F(o->u.adamw.grad);
  float b1 = o->u.adamw.beta1, b2 = o->u.adamw.beta2;
  float c1 = 1.0f - powf(b1, (float)o->u.adamw.step), c2 = 1.0f - powf(b2, (float)o->u.adamw.step);
  int64_t par_n = o->u.adamw.n;
  PAR(par_n)
  for (int64_t i = 0; i < o->u.adamw.n; i++) {
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    float mh = m[i] / c1, vh = v[i] / c2;
    p[i] -= o->u.adamw.lr * (mh / (sqrtf(vh) + o->u.adamw.eps) + o->u.adamw.weight_decay * p[i]);
  }
}

static void sumsq(const struct strata__op *o) {
  const float *x = F(o->u.sumsq.x);
  double s = 0;
  for (int64_t i = 0; i < o->u.sumsq.n; i++)
    s += (double)x[i] * x[i];
  float *out = F(o->u.sumsq.out);
  out[0] = (o->u.sumsq.accumulate ? out[0] : 0.0f) + (float)s;
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
};

int strata__host_op_supported(enum strata__op_id id) {
  return (unsigned)id < STRATA__OP_COUNT && host_ops[id] != NULL;
}

int strata__host_op_run(const struct strata__op *op) {
  if (!strata__host_op_supported(op->id))
    return STRATA_ERR_UNSUPPORTED;
  host_ops[op->id](op);
  return STRATA_OK;
}
