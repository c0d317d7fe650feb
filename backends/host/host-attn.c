/* SPDX-License-Identifier: MIT */
/* host-attn.c — the host backend's fused (grouped-query) attention, forward and backward, with no T x T matrix. */
#include "config.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <strata/comm.h>

#include "host.h"
#include "vecmath.h"

#define F(m) ((float *)(m).h + (m).off)
#define PAR_MIN 16384 /* as host-ops.c: below this many elements threads cost more than they save */

/* ---- fused attention ---- */

/*
** Blocked over queries and keys: QB queries at a time against keys in
** vectors of VL, accumulators held in registers, so each key and value row
** is read once per QB queries (not once per query). Keys and values are
** first copied per head into padded, contiguous (and for the scores,
** transposed) scratch; a query's scores for keys it may see live in a
** QB x T block only for the time of its block — never a T x T matrix.
*/
#define QB 8
#define VL 16
#define ROUND_VL(n) (((n) + VL - 1) / VL * VL)

/* s[r][j] = sum_d a[r][d] bt[d][j], r < QB, j < np (a multiple of VL). */
static HOST_SIMD void blk_scores(const float *a, int64_t lda, const float *bt, int64_t ldbt, int64_t hd, int64_t np,
                                 float *s, int64_t lds) {
  for (int64_t j0 = 0; j0 < np; j0 += VL) {
    float acc[QB][VL] = {{0}};
    for (int64_t d = 0; d < hd; d++) {
      const float *b = bt + d * ldbt + j0;
      _Pragma("GCC unroll 8") for (int r = 0; r < QB; r++) {
        float ar = a[r * lda + d];
#pragma omp simd
        for (int v = 0; v < VL; v++)
          acc[r][v] += ar * b[v];
      }
    }
    _Pragma("GCC unroll 8") for (int r = 0; r < QB; r++)
      for (int v = 0; v < VL; v++)
        s[r * lds + j0 + v] = acc[r][v];
  }
}

/* o[r][d] = sum_{j < n} w[r][j] rows[j][d], r < QB, d < dp (a multiple of VL). */
static HOST_SIMD void blk_combine(const float *w, int64_t ldw, const float *rows, int64_t ldr, int64_t n, int64_t dp,
                                  float *o, int64_t ldo) {
  for (int64_t d0 = 0; d0 < dp; d0 += VL) {
    float acc[QB][VL] = {{0}};
    for (int64_t j = 0; j < n; j++) {
      const float *x = rows + j * ldr + d0;
      _Pragma("GCC unroll 8") for (int r = 0; r < QB; r++) {
        float wr = w[r * ldw + j];
#pragma omp simd
        for (int v = 0; v < VL; v++)
          acc[r][v] += wr * x[v];
      }
    }
    _Pragma("GCC unroll 8") for (int r = 0; r < QB; r++)
      for (int v = 0; v < VL; v++)
        o[r * ldo + d0 + v] = acc[r][v];
  }
}

/* acc[j][d] += sum_r w[r][j] x[r][d], j < n, d < dp (a multiple of VL): the block's share of dK or dV. */
static HOST_SIMD void blk_scatter(const float *w, int64_t ldw, const float *x, int64_t ldx, int64_t n, int64_t dp,
                                  float *acc, int64_t lda) {
  for (int64_t j = 0; j < n; j++) {
    float wj[QB];
    for (int r = 0; r < QB; r++)
      wj[r] = w[r * ldw + j];
    for (int64_t d0 = 0; d0 < dp; d0 += VL) {
      float t[VL];
#pragma omp simd
      for (int v = 0; v < VL; v++)
        t[v] = acc[j * lda + d0 + v];
      _Pragma("GCC unroll 8") for (int r = 0; r < QB; r++) {
#pragma omp simd
        for (int v = 0; v < VL; v++)
          t[v] += wj[r] * x[r * ldx + d0 + v];
      }
#pragma omp simd
      for (int v = 0; v < VL; v++)
        acc[j * lda + d0 + v] = t[v];
    }
  }
}

/* s[j] = exp(s[j] - max) for j < n, 0 for n <= j < np; returns the row's log-sum-exp, its sum through *sum. */
static HOST_SIMD float attn_exp_row(float *s, int64_t n, int64_t np, double *sum) {
  float mx = -FLT_MAX;
#pragma omp simd reduction(max : mx)
  for (int64_t j = 0; j < n; j++)
    mx = s[j] > mx ? s[j] : mx;
  double t = 0;
#pragma omp simd reduction(+ : t)
  for (int64_t j = 0; j < n; j++) {
    float e = vm_exp(s[j] - mx);
    s[j] = e;
    t += e;
  }
  for (int64_t j = n; j < np; j++)
    s[j] = 0.0f;
  *sum = t;
  return mx + (float)log(t);
}

/* p[j] = exp(p[j] - lse), ds[j] = p[j] (ds[j] - rowsum) for j < n (dp given in ds); both 0 for n <= j < np. */
static HOST_SIMD void attn_probs_grad(float *p, float *ds, int64_t n, int64_t np, float lse, float rowsum) {
#pragma omp simd
  for (int64_t j = 0; j < n; j++) {
    float pj = vm_exp(p[j] - lse);
    p[j] = pj;
    ds[j] = pj * (ds[j] - rowsum);
  }
  for (int64_t j = n; j < np; j++)
    p[j] = ds[j] = 0.0f;
}

/* t[d][j] = rows[j][d] (d < hd, j < n), zeros for n <= j < ldt: keys or values transposed, padded. */
static void attn_transpose(const float *rows, int64_t ld, int64_t n, int64_t hd, float *t, int64_t ldt) {
  for (int64_t d = 0; d < hd; d++) {
    for (int64_t j = 0; j < n; j++)
      t[d * ldt + j] = rows[j * ld + d];
    for (int64_t j = n; j < ldt; j++)
      t[d * ldt + j] = 0.0f;
  }
}

/* c[r][d] = scale * rows[r][d] for r < n, d < hd, zeros up to nrows x dp: a padded, contiguous copy. */
static void attn_pad(const float *rows, int64_t ld, int64_t n, int64_t nrows, int64_t hd, int64_t dp, float scale,
                     float *c) {
  for (int64_t r = 0; r < nrows; r++)
    for (int64_t d = 0; d < dp; d++)
      c[r * dp + d] = r < n && d < hd ? scale * rows[r * ld + d] : 0.0f;
}

static int attn_threads(const struct strata__op *o) {
  int64_t pairs = o->u.attn.batch * o->u.attn.heads;
  int64_t work = o->u.attn.seq * o->u.attn.seq * o->u.attn.head_dim * pairs;
  int t = work >= PAR_MIN * 16 ? strata__host_threads : 1;
  return t > pairs ? (int)pairs : t;
}

#ifdef _OPENMP
#define THREAD_ID() omp_get_thread_num()
#else
#define THREAD_ID() 0
#endif

/* One (sequence, head) per task; query blocks in order within it. */
int strata__host_attention_fwd(const struct strata__op *o) {
  const float *qkv = F(o->u.attn.qkv);
  float *out = F(o->u.attn.out), *lse = F(o->u.attn.lse);
  int64_t B = o->u.attn.batch, T = o->u.attn.seq, H = o->u.attn.heads, hd = o->u.attn.head_dim;
  int64_t KV = o->u.attn.kv_heads, G = H / KV, D = H * hd, ld = (H + 2 * KV) * hd, Tp = ROUND_VL(T),
          dp = ROUND_VL(hd);
  float scale = o->u.attn.scale;
  int causal = o->u.attn.causal, nt = attn_threads(o);
  size_t per = (size_t)(hd * Tp + T * dp + QB * Tp + 2 * QB * dp);
  float *scratch = malloc((size_t)nt * per * sizeof *scratch);
  if (!scratch)
    return STRATA_ERR_NOMEM;
  _Pragma("omp parallel for schedule(static) num_threads(nt)")
  for (int64_t bh = 0; bh < B * H; bh++) {
    int64_t b = bh / H, h = bh % H;
    float *kt = scratch + (size_t)THREAD_ID() * per, *vp = kt + hd * Tp, *s = vp + T * dp, *qb = s + QB * Tp,
          *ob = qb + QB * dp;
    /* query head h's q, and its group's k and v (the same columns as D + h hd, 2 D + h hd when G = 1) */
    const float *base = qkv + b * T * ld + h * hd, *kbase = qkv + b * T * ld + D + h / G * hd,
                *vbase = kbase + KV * hd;
    attn_transpose(kbase, ld, T, hd, kt, Tp);
    attn_pad(vbase, ld, T, T, hd, dp, 1.0f, vp);
    for (int64_t i0 = 0; i0 < T; i0 += QB) {
      int64_t nq = T - i0 < QB ? T - i0 : QB, nmax = causal ? i0 + nq : T, np = ROUND_VL(nmax);
      double inv[QB];
      attn_pad(base + i0 * ld, ld, nq, QB, hd, dp, scale, qb);
      blk_scores(qb, dp, kt, Tp, hd, np, s, Tp);
      for (int64_t r = 0; r < QB; r++) {
        if (r >= nq) {
          memset(s + r * Tp, 0, (size_t)np * sizeof *s);
          continue;
        }
        double sum;
        lse[bh * T + i0 + r] = attn_exp_row(s + r * Tp, causal ? i0 + r + 1 : T, np, &sum);
        inv[r] = 1.0 / sum;
      }
      blk_combine(s, Tp, vp, dp, nmax, dp, ob, dp);
      for (int64_t r = 0; r < nq; r++) {
        float *orow = out + (b * T + i0 + r) * D + h * hd, f = (float)inv[r];
        for (int64_t d = 0; d < hd; d++)
          orow[d] = ob[r * dp + d] * f;
      }
    }
  }
  free(scratch);
  return STRATA_OK;
}

/*
** Backward of one (sequence, key/value head): for each query head of its
** group in order, query block by query block: the probabilities recomputed
** from lse, dS = P (dP - rowsum(dO o O)) with dP = dO V^T, dQ = scale dS K,
** and dK += scale dS^T Q, dV += P^T dO summed in padded scratch in head and
** block order (so the same bits whatever the threads; with one query head
** a group, the order of the plain attention's).
*/
int strata__host_attention_bwd(const struct strata__op *o) {
  const float *qkv = F(o->u.attn.qkv), *out = F(o->u.attn.out), *dout = F(o->u.attn.dout), *lse = F(o->u.attn.lse);
  float *dqkv = F(o->u.attn.dqkv);
  int64_t B = o->u.attn.batch, T = o->u.attn.seq, H = o->u.attn.heads, hd = o->u.attn.head_dim;
  int64_t KV = o->u.attn.kv_heads, G = H / KV, D = H * hd, ld = (H + 2 * KV) * hd, Tp = ROUND_VL(T),
          dp = ROUND_VL(hd);
  float scale = o->u.attn.scale;
  int causal = o->u.attn.causal, nt = attn_threads(o);
  if (nt > B * KV)
    nt = (int)(B * KV);
  size_t per = (size_t)(2 * hd * Tp + 3 * T * dp + 2 * QB * Tp + 3 * QB * dp);
  float *scratch = malloc((size_t)nt * per * sizeof *scratch);
  if (!scratch)
    return STRATA_ERR_NOMEM;
  _Pragma("omp parallel for schedule(static) num_threads(nt)")
  for (int64_t bk = 0; bk < B * KV; bk++) {
    int64_t b = bk / KV, kh = bk % KV;
    float *kt = scratch + (size_t)THREAD_ID() * per, *vt = kt + hd * Tp, *kp = vt + hd * Tp, *dk = kp + T * dp,
          *dv = dk + T * dp, *p = dv + T * dp, *ds = p + QB * Tp, *qb = ds + QB * Tp, *dob = qb + QB * dp,
          *dqb = dob + QB * dp;
    const float *kbase = qkv + b * T * ld + D + kh * hd, *vbase = kbase + KV * hd;
    float *dkbase = dqkv + b * T * ld + D + kh * hd, *dvbase = dkbase + KV * hd;
    attn_transpose(kbase, ld, T, hd, kt, Tp);
    attn_transpose(vbase, ld, T, hd, vt, Tp);
    attn_pad(kbase, ld, T, T, hd, dp, 1.0f, kp);
    memset(dk, 0, (size_t)(2 * T * dp) * sizeof *dk);
    for (int64_t h = kh * G; h < (kh + 1) * G; h++) {
      int64_t bh = b * H + h;
      const float *base = qkv + b * T * ld + h * hd;
      float *dbase = dqkv + b * T * ld + h * hd;
      for (int64_t i0 = 0; i0 < T; i0 += QB) {
        int64_t nq = T - i0 < QB ? T - i0 : QB, nmax = causal ? i0 + nq : T, np = ROUND_VL(nmax);
        attn_pad(base + i0 * ld, ld, nq, QB, hd, dp, scale, qb);
        attn_pad(dout + (b * T + i0) * D + h * hd, D, nq, QB, hd, dp, 1.0f, dob);
        blk_scores(qb, dp, kt, Tp, hd, np, p, Tp);
        blk_scores(dob, dp, vt, Tp, hd, np, ds, Tp);
        for (int64_t r = 0; r < QB; r++) {
          if (r >= nq) {
            memset(p + r * Tp, 0, (size_t)np * sizeof *p);
            memset(ds + r * Tp, 0, (size_t)np * sizeof *ds);
            continue;
          }
          const float *orow = out + (b * T + i0 + r) * D + h * hd;
          double rs = 0;
          for (int64_t d = 0; d < hd; d++)
            rs += (double)dob[r * dp + d] * orow[d];
          attn_probs_grad(p + r * Tp, ds + r * Tp, causal ? i0 + r + 1 : T, np, lse[bh * T + i0 + r], (float)rs);
        }
        blk_combine(ds, Tp, kp, dp, nmax, dp, dqb, dp);
        for (int64_t r = 0; r < nq; r++)
          for (int64_t d = 0; d < hd; d++)
            dbase[(i0 + r) * ld + d] = scale * dqb[r * dp + d];
        /* qb holds scale q: dK = scale dS^T q */
        blk_scatter(ds, Tp, qb, dp, nmax, dp, dk, dp);
        blk_scatter(p, Tp, dob, dp, nmax, dp, dv, dp);
      }
    }
    for (int64_t j = 0; j < T; j++)
      for (int64_t d = 0; d < hd; d++) {
        dkbase[j * ld + d] = dk[j * dp + d];
        dvbase[j * ld + d] = dv[j * dp + d];
      }
  }
  free(scratch);
  return STRATA_OK;
}
