/* SPDX-License-Identifier: MIT */
/* host-attn-bf16.c — the host's fused (grouped-query) attention on bfloat16 operands, its products on AMX-BF16 tiles
** or AVX-512 BF16 dot products, reading and writing bfloat16 in place; other CPUs run the staged float32 one. */
#include "config.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/syscall.h>
#include <unistd.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#include <strata/comm.h>

#include "bf16.h"
#include "device/cpu.h"
#include "host.h"
#include "vecmath.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 10
#include <immintrin.h>
#define HAVE_NATIVE 1
#endif

#define IS_BF16(m) ((m).dtype == STRATA_BFLOAT16)

#ifdef HAVE_NATIVE

#define NEEDS (STRATA__CPU_AVX512BF16 | STRATA__CPU_AVX512F | STRATA__CPU_AVX512VL | STRATA__CPU_AVX512BW)
#define BF(m) ((uint16_t *)(m).h + (m).off)
#define F(m) ((float *)(m).h + (m).off)
#define PAR_MIN 16384 /* as host-ops.c: below this much work threads cost more than they save */

/*
** As the float32 attention (host-attn.c), blocked over queries and keys with
** no T x T matrix, but its products on bfloat16 pairs: vdpbf16ps adds
** a[2p] b[2p] + a[2p+1] b[2p+1] (products exact, sums in float32) to each of
** 16 float32 lanes. So every product's right operand is stored "pair-packed":
** element (p, j) of a K/2 x N matrix holds the pair (B[2p][j], B[2p+1][j]),
** and its left operand is bfloat16 rows whose pairs are broadcast. S = Q K^T
** and dP = dO V^T take K and V transposed and pair-packed over head_dim;
** O = P V and dQ = dS K take V and K pair-packed over keys; dK = dS^T Q and
** dV = P^T dO take Q and dO pair-packed over the block's queries. P and dS
** are rounded to bfloat16 for their products (as FlashAttention and
** PyTorch's CPU flash attention do in bfloat16); softmax, lse, rowsum and
** every sum stay float32. Each (sequence, head) or (sequence, kv head) is one
** task whose arithmetic does not depend on the threads: the same bits every
** run. On a CPU with AMX-BF16 the same pair-packed operands feed the tiles
** (TDPBF16PS takes B in exactly this layout), 32 x 32 blocks of sums at a
** time, and dK, dV are summed transposed (dK^T += Q^T dS, so the zipped dS
** is B with no transpose of it); the bits then differ from the AVX-512 path's
** (another order of float32 sums), never from run to run.
*/
#define QB 32 /* queries of a block */
#define MR 8  /* rows of a register tile */
#define NT 32 /* columns of a register tile (two vectors) */
#define R32(n) (((n) + 31) / 32 * 32)

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma")

/* One MR x (16 nv) tile: c (+)= alpha a b over kp pairs (accumulate: alpha is 1); row r's pair p of a at
** a + r lda + p ldp. */
static inline __attribute__((always_inline)) void tile(const uint16_t *a, int64_t lda, int64_t ldp, const uint16_t *b,
                                                       int64_t ldb, int64_t kp, float *c, int64_t ldc, int nv,
                                                       int acc, float alpha) {
  __m512 s[MR][2];
  _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)
    _Pragma("GCC unroll 2") for (int v = 0; v < nv; v++)
      s[r][v] = acc ? _mm512_loadu_ps(c + r * ldc + 16 * v) : _mm512_setzero_ps();
  for (int64_t p = 0; p < kp; p++) {
    __m512 bv[2];
    bv[0] = _mm512_loadu_ps((const void *)(b + p * ldb));
    bv[1] = nv > 1 ? _mm512_loadu_ps((const void *)(b + p * ldb + 32)) : bv[0];
    _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {
      uint32_t w;
      memcpy(&w, a + r * lda + p * ldp, sizeof w);
      __m512 ar = _mm512_castsi512_ps(_mm512_set1_epi32((int)w));
      _Pragma("GCC unroll 2") for (int v = 0; v < nv; v++)
        s[r][v] = _mm512_dpbf16_ps(s[r][v], (__m512bh)ar, (__m512bh)bv[v]);
    }
  }
  __m512 al = _mm512_set1_ps(alpha);
  _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)
    _Pragma("GCC unroll 2") for (int v = 0; v < nv; v++)
      _mm512_storeu_ps(c + r * ldc + 16 * v, acc ? s[r][v] : _mm512_mul_ps(s[r][v], al));
}

/*
** c[r][j] (+)= alpha sum_{p < kp} a[r][2p] b[p][j][0] + a[r][2p+1] b[p][j][1]
** for r < rows (a multiple of MR), j < n (a multiple of 16): a is bfloat16
** pairs, row r's pair p at a + r lda + p ldp (rows: ldp 2; row-pair
** interleaved, as probs_grad2 writes them: lda 2), b pair-packed in panels of NT
** columns, each panel's pair rows one after the other (64 bfloat16 a row;
** `ps` bfloat16 from one panel to the next), so a tile reads its B
** contiguously (a row stride of a power of two would map every row of a
** column strip to a few cache sets). accumulate: c += a b; else c = alpha a b.
*/
static void mm_pairs(const uint16_t *a, int64_t lda, int64_t ldp, const uint16_t *b, int64_t ps, int64_t kp,
                     int64_t rows, int64_t n, float *c, int64_t ldc, int acc, float alpha) {
  for (int64_t j0 = 0; j0 < n; j0 += NT)
    for (int64_t r0 = 0; r0 < rows; r0 += MR) {
      if (n - j0 >= NT)
        tile(a + r0 * lda, lda, ldp, b + j0 / NT * ps, 2 * NT, kp, c + r0 * ldc + j0, ldc, 2, acc, alpha);
      else
        tile(a + r0 * lda, lda, ldp, b + j0 / NT * ps, 2 * NT, kp, c + r0 * ldc + j0, ldc, 1, acc, alpha);
    }
}

/* y[2i] = a[i], y[2i + 1] = b[i] for i < 32: two rows of 32 bfloat16 zipped into 32 pairs. */
static const uint16_t zip_lo[32] = {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39,
                                    8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
static const uint16_t zip_hi[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                    24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
static inline void zip32(__m512i a, __m512i b, uint16_t *y) {
  __m512i lo = _mm512_loadu_si512((const void *)zip_lo), hi = _mm512_loadu_si512((const void *)zip_hi);
  _mm512_storeu_si512((void *)y, _mm512_permutex2var_epi16(a, lo, b));
  _mm512_storeu_si512((void *)(y + 32), _mm512_permutex2var_epi16(a, hi, b));
}

/* y[i] = bfloat16(f x[i]) for i < n (rounded to nearest even, as strata__bf16_from_f32). */
static void put_row(const float *x, float f, uint16_t *y, int64_t n) {
  __m512 fv = _mm512_set1_ps(f);
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    __m256bh r = _mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), fv));
    _mm256_mask_storeu_epi16((void *)(y + i), k, (__m256i)r);
  }
}

static void tr16(const float *x, int64_t ldx, float *y, int64_t ldy);

/* Pair (p, j) = (rows[j][2p], rows[j][2p + 1]) (j < n, 2p + e < hd; zero up to hd2 x tp pairs) in mm_pairs' panels
** (hd2 pair rows each): rows transposed, pair-packed over d. 16 whole rows of whole pairs (head_dim a multiple of 32,
** an even row stride) are 16 x 16 32-bit words moved by tr16; other blocks are gathered pair by pair. */
static void pack_t(const uint16_t *rows, int64_t ld, int64_t n, int64_t hd, int64_t hd2, int64_t tp, uint16_t *t) {
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  for (int64_t j0 = 0; j0 < tp; j0 += 16) {
    __mmask16 k = n - j0 >= 16 ? (__mmask16)0xffff : n > j0 ? (__mmask16)((1u << (n - j0)) - 1) : 0;
    __m512i idx = _mm512_mullo_epi32(_mm512_add_epi32(lane, _mm512_set1_epi32((int)j0)), _mm512_set1_epi32((int)ld));
    uint16_t *col = t + (j0 / NT * hd2 * NT + j0 % NT) * 2;
    if (k == 0xffff && 2 * hd2 == hd && ld % 2 == 0) {
      for (int64_t p0 = 0; p0 < hd2; p0 += 16)
        tr16((const float *)(const void *)(rows + j0 * ld + 2 * p0), ld / 2, (float *)(void *)(col + p0 * 2 * NT), NT);
      continue;
    }
    for (int64_t p = 0; p < hd2; p++) {
      __m512i w = _mm512_setzero_si512();
      if (2 * p + 1 < hd && k) /* pair p of rows j0..j0 + 15: 32 bits at rows + (j ld + 2p) bfloat16 */
        w = _mm512_mask_i32gather_epi32(w, k, idx, (const void *)(rows + 2 * p), 2);
      _mm512_storeu_si512((void *)(col + p * 2 * NT), w);
      if (2 * p + 1 == hd) /* an odd head_dim's last element, alone in its pair (not read past the row) */
        for (int64_t jj = 0; jj < 16 && j0 + jj < n; jj++)
          col[p * 2 * NT + 2 * jj] = rows[(j0 + jj) * ld + 2 * p];
    }
  }
}

/* Pair (jp, d) = (rows[2 jp][d], rows[2 jp + 1][d]) (2 jp + e < n, d < hd; zero up to np / 2 x dp pairs) in
** mm_pairs' panels (np / 2 pair rows each): pair-packed over rows. */
static void pack_r(const uint16_t *rows, int64_t ld, int64_t n, int64_t np, int64_t hd, int64_t dp, uint16_t *t) {
  for (int64_t d0 = 0; d0 < dp; d0 += NT) {
    __mmask32 k = hd - d0 >= 32 ? ~(__mmask32)0 : hd > d0 ? ((__mmask32)1 << (hd - d0)) - 1 : 0;
    for (int64_t jp = 0; jp < np / 2; jp++) {
      int64_t j = 2 * jp;
      __m512i a = j < n ? _mm512_maskz_loadu_epi16(k, rows + j * ld + d0) : _mm512_setzero_si512();
      __m512i b = j + 1 < n ? _mm512_maskz_loadu_epi16(k, rows + (j + 1) * ld + d0) : _mm512_setzero_si512();
      zip32(a, b, t + (d0 / NT * (np / 2) + jp) * 2 * NT);
    }
  }
}

/* c[r][d] = rows[r][d] for r < n, d < hd; zero up to QB x w. */
static void pad_rows(const uint16_t *rows, int64_t ld, int64_t n, int64_t hd, int64_t w, uint16_t *c) {
  memset(c, 0, (size_t)(QB * w) * sizeof *c);
  for (int64_t r = 0; r < n; r++)
    memcpy(c + r * w, rows + r * ld, (size_t)hd * sizeof *c);
}

/*
** e^x in each lane: vecmath.h's vm_exp (its range reduction x = n ln2 + r
** and Cephes' polynomial for e^r) with 2^n applied by vscalefps, which
** also takes the ends (0 below the clamp at -104, inf past 88.7) and a
** NaN through: 14 instructions where the compiler's vector vm_exp takes
** twice as many (its clamps, exponent bits and NaN test), in the loops that
** are most of the attention's own time.
*/
static inline __m512 exp16(__m512 x) {
  const __m512 c = _mm512_max_ps(_mm512_set1_ps(-104.0f), x); /* a NaN x is max's second operand: kept */
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(c, _mm512_set1_ps(VM_LOG2E)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(VM_LN2_HI), c);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(VM_LN2_LO), r);
  __m512 p = _mm512_set1_ps(VM_EXP_P5);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(VM_EXP_P4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(VM_EXP_P3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(VM_EXP_P2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(VM_EXP_P1));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(VM_EXP_P0));
  const __m512 e = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(e, n);
}

/* The lanes of j .. j + 15 below n. */
static inline __mmask16 below(int64_t j, int64_t n) {
  return n - j >= 16 ? (__mmask16)0xffff : n > j ? (__mmask16)((1u << (n - j)) - 1) : 0;
}

/*
** The forward's softmax of one row of sums s (scores s[j] scale for j < n):
** y[j] = bfloat16(exp(s[j] scale - max)) for j < n, 0 up to np (a multiple
** of 32); returns the row's log-sum-exp, 1 / its sum of exponentials in
** *inv (the sum in float32, 16 lanes then their sum). The max passes over a
** NaN as host-attn.c's does; the exponentials keep it.
*/
static float softmax_row(const float *s, int64_t n, int64_t np, float scale, uint16_t *y, float *inv) {
  const __m512 sc = _mm512_set1_ps(scale);
  __m512 m = _mm512_set1_ps(-FLT_MAX);
  for (int64_t j = 0; j < n; j += 16) { /* max(x, m) is x > m ? x : m */
    __mmask16 k = below(j, n);
    m = _mm512_mask_max_ps(m, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s + j), sc), m);
  }
  float mx = _mm512_reduce_max_ps(m);
  __m512 mv = _mm512_set1_ps(mx), t = _mm512_setzero_ps();
  for (int64_t j = 0; j < np; j += 32) {
    __m512 e[2];
    _Pragma("GCC unroll 2") for (int v = 0; v < 2; v++) {
      __mmask16 k = below(j + 16 * v, n);
      e[v] = k ? _mm512_maskz_mov_ps(k, exp16(_mm512_fmsub_ps(_mm512_loadu_ps(s + j + 16 * v), sc, mv)))
               : _mm512_setzero_ps();
      t = _mm512_add_ps(t, e[v]);
    }
    _mm512_storeu_si512((void *)(y + j), (__m512i)_mm512_cvtne2ps_pbh(e[1], e[0]));
  }
  float sum = _mm512_reduce_add_ps(t);
  *inv = 1.0f / sum;
  return mx + logf(sum);
}

/*
** The backward's probabilities and score gradients of the row pair r, r + 1
** of a block (row r's sums s[r Tp + j], dP dp[r Tp + j]; n[e] its keys,
** lse[e], rowsum rs[e]; a row past the block's queries has n 0): p = exp(s
** scale - lse), ds = p (dp - rowsum), both 0 past n up to np (a multiple of
** 32). Written rounded to bfloat16: ds as rows (dsb, row stride Tp) and p,
** ds zipped over the pair, as pT, dsT (pair j of the row pair at (r / 2 Tp
** + j) 2: the B of dK^T += Q^T dS, dV^T += dO^T P, or the A of the AVX-512
** path's dK += dS^T Q, dV += P^T dO).
*/
static void probs_grad2(const float *s, const float *dp, int64_t Tp, int64_t r, const int64_t n[2], const float lse[2],
                        const float rs[2], int64_t np, float scale, uint16_t *dsb, uint16_t *pT, uint16_t *dsT) {
  const __m512 sc = _mm512_set1_ps(scale);
  for (int64_t j = 0; j < np; j += 32) {
    __m512i pb[2], db[2];
    for (int e = 0; e < 2; e++) {
      const float *se = s + (r + e) * Tp + j, *de = dp + (r + e) * Tp + j;
      __m512 p[2], d[2];
      _Pragma("GCC unroll 2") for (int v = 0; v < 2; v++) {
        __mmask16 k = below(j + 16 * v, n[e]);
        if (k) {
          p[v] =
              _mm512_maskz_mov_ps(k, exp16(_mm512_fmsub_ps(_mm512_loadu_ps(se + 16 * v), sc, _mm512_set1_ps(lse[e]))));
          d[v] = _mm512_mul_ps(p[v], _mm512_sub_ps(_mm512_loadu_ps(de + 16 * v), _mm512_set1_ps(rs[e])));
        } else {
          p[v] = d[v] = _mm512_setzero_ps();
        }
      }
      pb[e] = (__m512i)_mm512_cvtne2ps_pbh(p[1], p[0]);
      db[e] = (__m512i)_mm512_cvtne2ps_pbh(d[1], d[0]);
      _mm512_storeu_si512((void *)(dsb + (r + e) * Tp + j), db[e]);
    }
    zip32(pb[0], pb[1], pT + (r / 2 * Tp + j) * 2);
    zip32(db[0], db[1], dsT + (r / 2 * Tp + j) * 2);
  }
}

/* sum_d a[d] b[d] over bfloat16 rows: vdpbf16ps's pair sums in 16 float32 lanes, then their sum. */
static float dot_rows(const uint16_t *a, const uint16_t *b, int64_t n) {
  __m512 s = _mm512_setzero_ps();
  for (int64_t d = 0; d < n; d += 32) {
    __mmask32 k = n - d >= 32 ? ~(__mmask32)0 : ((__mmask32)1 << (n - d)) - 1;
    s = _mm512_dpbf16_ps(s, (__m512bh)_mm512_maskz_loadu_epi16(k, a + d), (__m512bh)_mm512_maskz_loadu_epi16(k, b + d));
  }
  return _mm512_reduce_add_ps(s);
}

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,amx-tile,amx-bf16")

/* Palette 1: tiles 0-3 a 32 x 32 block of float32 sums (16 x 16 each), 4-5 two 16 x 32 bfloat16 row blocks of A,
** 6-7 two 16 x 16 pair blocks of B. Loaded at the start of each task (the thread's GEMMs load their own). */
static const struct {
  uint8_t palette, start_row, zero[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} __attribute__((aligned(64))) amx_cfg = {1, 0, {0}, {64, 64, 64, 64, 64, 64, 64, 64},
                                         {16, 16, 16, 16, 16, 16, 16, 16}};

/* (a configuration in static memory: GCC's _tile_loadconfig tells the compiler it reads 8 bytes, so stores into an
** automatic one may be dropped as dead) */
static void amx_start(void) { _tile_loadconfig(&amx_cfg); }

static void amx_end(void) { _tile_release(); }

/*
** As mm_pairs on AMX tiles, 32 x 32 blocks of c at a time: rows a multiple
** of 32, n of 32, kp of 16; a bfloat16 rows (pairs contiguous, row stride
** lda); b's pair row p of the 32 columns from j0 at b + j0 / 32 ps + p pr
** (mm_pairs' panels: ps as there, pr 64; probs_grad2's zipped rows: ps 64, pr 2 Tp).
*/
/* Tiles 0-3 loaded from (load) or stored to the 32 x 32 float32 block at c, row stride ldc. */
static inline __attribute__((always_inline)) void amx_sums(int load, float *c, int64_t ldc) {
  const int64_t sc = ldc * 4;
  float *c1 = c + 16 * ldc;
  if (load) {
    _tile_loadd(0, c, sc);
    _tile_loadd(1, c + 16, sc);
    _tile_loadd(2, c1, sc);
    _tile_loadd(3, c1 + 16, sc);
  } else {
    _tile_stored(0, c, sc);
    _tile_stored(1, c + 16, sc);
    _tile_stored(2, c1, sc);
    _tile_stored(3, c1 + 16, sc);
  }
}

/* One step of 16 pairs into tiles 0-3: A's 32 rows of pairs at a (row stride lda bfloat16), B's 16 pair rows of 32
** columns at b (row stride sb bytes, the second 16 columns 32 bfloat16 on). */
static inline __attribute__((always_inline)) void amx_step(const uint16_t *a, int64_t lda, const uint16_t *b,
                                                           int64_t sb) {
  _tile_loadd(4, a, lda * 2);
  _tile_loadd(5, a + 16 * lda, lda * 2);
  _tile_loadd(6, b, sb);
  _tile_loadd(7, b + 32, sb);
  _tile_dpbf16ps(0, 4, 6);
  _tile_dpbf16ps(1, 4, 7);
  _tile_dpbf16ps(2, 5, 6);
  _tile_dpbf16ps(3, 5, 7);
}

static void mm_amx(const uint16_t *a, int64_t lda, const uint16_t *b, int64_t ps, int64_t pr, int64_t kp,
                   int64_t rows, int64_t n, float *c, int64_t ldc, int acc, float alpha) {
  for (int64_t j0 = 0; j0 < n; j0 += 32)
    for (int64_t r0 = 0; r0 < rows; r0 += 32) {
      float *c0 = c + r0 * ldc + j0;
      if (acc) {
        amx_sums(1, c0, ldc);
      } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
      }
      const uint16_t *bp = b + j0 / 32 * ps;
      for (int64_t p0 = 0; p0 < kp; p0 += 16)
        amx_step(a + r0 * lda + 2 * p0, lda, bp + p0 * pr, pr * 2);
      amx_sums(0, c0, ldc);
    }
  if (!acc && alpha != 1.0f) {
    __m512 al = _mm512_set1_ps(alpha);
    for (int64_t r = 0; r < rows; r++)
      for (int64_t j = 0; j < n; j += 16)
        _mm512_storeu_ps(c + r * ldc + j, _mm512_mul_ps(_mm512_loadu_ps(c + r * ldc + j), al));
  }
}

/* Where the last group's dK and dV go: rows (bfloat16, row stride ld) of keys below T, hd columns, scaled by f. */
struct dkv_out {
  uint16_t *rows[2];
  int64_t ld, T, hd;
  float f[2];
};

/*
** A 32 x 32 block of dK^T or dV^T (c: its dims r0 .. r0 + 31, keys j0 ..
** j0 + 31, row stride 32) into rows j0 .. of d, columns r0 ..: each two
** rows scaled, rounded and zipped into pairs (the 32-bit words of the
** rows of dK), the words transposed 16 x 16 (tr16), straight into the rows
** where the block is whole, else through w.
*/
static void put_block(const float *c, const struct dkv_out *d, int m, int64_t r0, int64_t j0) {
  uint16_t zt[16 * 64], w[32 * 32];
  const __m512 fv = _mm512_set1_ps(d->f[m]);
  for (int e = 0; e < 16; e++) {
    const float *c0 = c + 2 * e * 32, *c1 = c0 + 32;
    __m512i a = (__m512i)_mm512_cvtne2ps_pbh(_mm512_mul_ps(_mm512_loadu_ps(c0 + 16), fv),
                                             _mm512_mul_ps(_mm512_loadu_ps(c0), fv));
    __m512i b = (__m512i)_mm512_cvtne2ps_pbh(_mm512_mul_ps(_mm512_loadu_ps(c1 + 16), fv),
                                             _mm512_mul_ps(_mm512_loadu_ps(c1), fv));
    zip32(a, b, zt + e * 64);
  }
  uint16_t *rows = d->rows[m] + j0 * d->ld + r0;
  const int whole = j0 + 32 <= d->T && r0 + 32 <= d->hd && d->ld % 2 == 0 && ((uintptr_t)rows & 3) == 0;
  for (int jj = 0; jj < 32; jj += 16)
    if (whole)
      tr16((const float *)(const void *)(zt + 2 * jj), 32, (float *)(void *)(rows + jj * d->ld), d->ld / 2);
    else
      tr16((const float *)(const void *)(zt + 2 * jj), 32, (float *)(void *)(w + jj * 32), 16);
  if (!whole)
    for (int64_t jj = 0; jj < 32 && j0 + jj < d->T; jj++)
      memcpy(rows + jj * d->ld, w + jj * 32, (size_t)(d->hd - r0 < 32 ? d->hd - r0 : 32) * sizeof *rows);
}

/*
** dK^T += Q^T dS and dV^T += dO^T P for nb query blocks of a group at once
** (AMX): each 32 x 32 block of dK^T and dV^T loaded into tiles once, every
** block of the group whose keys reach it (np[i] > its first key) added in
** block order, stored once — the tile products and order of one mm_amx per
** block, so its bits, with the sums' loads and stores once a group rather
** than once a block. qT, doT: dp rows of ldq bfloat16, block i's pairs from
** column i QB; dsT, pT: block i's zipped rows (probs_grad2) from pair row i
** QB / 2, Tp pairs each; dk, dv: dp rows of ldc floats, their columns from
** fresh (a multiple of 32) not yet written: summed from zero. The last group
** (out not NULL: its blocks reach every key) puts its sums straight into
** the rows of dK and dV (put_block) instead.
*/
static void dkv_amx(const uint16_t *qT, const uint16_t *doT, int64_t ldq, const uint16_t *dsT, const uint16_t *pT,
                    int64_t Tp, int nb, const int64_t *np, int64_t dp, int64_t fresh, float *dk, float *dv, int64_t ldc,
                    const struct dkv_out *out) {
  float blk[32 * 32];
  int64_t nmax = 0;
  for (int i = 0; i < nb; i++)
    nmax = np[i] > nmax ? np[i] : nmax;
  for (int m = 0; m < 2; m++) {
    const uint16_t *a = m ? doT : qT, *b = m ? pT : dsT;
    float *c = m ? dv : dk;
    for (int64_t j0 = 0; j0 < nmax; j0 += 32)
      for (int64_t r0 = 0; r0 < dp; r0 += 32) {
        if (j0 < fresh) {
          amx_sums(1, c + r0 * ldc + j0, ldc);
        } else {
          _tile_zero(0);
          _tile_zero(1);
          _tile_zero(2);
          _tile_zero(3);
        }
        for (int i = 0; i < nb; i++)
          if (np[i] > j0)
            amx_step(a + r0 * ldq + i * QB, ldq, b + (int64_t)i * QB * Tp + 2 * j0, Tp * 4);
        if (out) {
          amx_sums(0, blk, 32);
          put_block(blk, out, m, r0, j0);
        } else {
          amx_sums(0, c + r0 * ldc + j0, ldc);
        }
      }
  }
}

#pragma GCC pop_options

static int amx; /* 1: the products on AMX tiles (chosen once, with the tile data the kernel let this process use) */

/* c (+)= alpha a b with a in rows (mm_pairs' ldp 2), b in mm_pairs' panels: on AMX tiles where chosen. */
static void mm_rows(const uint16_t *a, int64_t lda, const uint16_t *b, int64_t ps, int64_t kp, int64_t rows,
                    int64_t n, float *c, int64_t ldc, int acc, float alpha) {
  if (amx)
    mm_amx(a, lda, b, ps, 2 * NT, kp, rows, n, c, ldc, acc, alpha);
  else
    mm_pairs(a, lda, 2, b, ps, kp, rows, n, c, ldc, acc, alpha);
}

/* y[c][r] = x[r][c] for r, c < 16: 32-bit elements (floats, or bfloat16 pairs: only moved), row strides ldx, ldy.
** Rows i, i + 4, i + 8, i + 12's columns 4q .. 4q + 3 gathered into the lanes of one vector by 128-bit loads and
** inserts (the load ports doing part of the moving), then each lane's 4 x 4 transposed by unpacks. */
static void tr16(const float *x, int64_t ldx, float *y, int64_t ldy) {
  _Pragma("GCC unroll 4") for (int q = 0; q < 4; q++) {
    __m512 v[4];
    _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) { /* lane L: row i + 4L, columns 4q .. 4q + 3 */
      const float *p = x + i * ldx + 4 * q;
      __m512 w = _mm512_castps128_ps512(_mm_loadu_ps(p));
      w = _mm512_insertf32x4(w, _mm_loadu_ps(p + 4 * ldx), 1);
      w = _mm512_insertf32x4(w, _mm_loadu_ps(p + 8 * ldx), 2);
      v[i] = _mm512_insertf32x4(w, _mm_loadu_ps(p + 12 * ldx), 3);
    }
    __m512d t0 = _mm512_castps_pd(_mm512_unpacklo_ps(v[0], v[1])),
            t1 = _mm512_castps_pd(_mm512_unpackhi_ps(v[0], v[1]));
    __m512d t2 = _mm512_castps_pd(_mm512_unpacklo_ps(v[2], v[3])),
            t3 = _mm512_castps_pd(_mm512_unpackhi_ps(v[2], v[3]));
    /* lane L of column 4q + k: rows 4L .. 4L + 3 */
    _mm512_storeu_ps(y + (4 * q) * ldy, _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2)));
    _mm512_storeu_ps(y + (4 * q + 1) * ldy, _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2)));
    _mm512_storeu_ps(y + (4 * q + 2) * ldy, _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3)));
    _mm512_storeu_ps(y + (4 * q + 3) * ldy, _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3)));
  }
}

/* t[d][rp] = pair (x[2 rp][d], x[2 rp + 1][d]) for rp < QB / 2, d < dp, from pack_r's panels of a QB-row block: the
** block transposed, pairs over its rows (rows of ldt bfloat16, QB of them the block's: the A of dK^T += Q^T dS,
** dV^T += dO^T P). */
static void transpose_pairs(const uint16_t *panels, int64_t dp, uint16_t *t, int64_t ldt) {
  for (int64_t d0 = 0; d0 < dp; d0 += 16)
    tr16((const float *)(const void *)(panels + (d0 / NT * (QB / 2) * NT + d0 % NT) * 2), NT,
         (float *)(void *)(t + d0 * ldt), ldt / 2);
}

struct dims {
  int64_t B, T, H, KV, G, hd, D, ld, Tp, dp, hd2, hdq;
  float scale;
  int causal;
};

static struct dims dims_of(const struct strata__op *o) {
  struct dims z;
  z.B = o->u.attn.batch, z.T = o->u.attn.seq, z.H = o->u.attn.heads, z.hd = o->u.attn.head_dim;
  z.KV = o->u.attn.kv_heads, z.G = z.H / z.KV, z.D = z.H * z.hd, z.ld = (z.H + 2 * z.KV) * z.hd;
  z.Tp = R32(z.T), z.dp = R32(z.hd), z.hd2 = z.dp / 2, z.hdq = z.dp;
  z.scale = o->u.attn.scale, z.causal = o->u.attn.causal;
  return z;
}

/* bfloat16 elements of one forward task's scratch, and its float32 ones (after them, 64-byte aligned). */
static size_t fwd_u16(const struct dims *z) {
  return (size_t)(2 * z->hd2 * z->Tp + z->Tp * z->dp + QB * z->hdq + QB * z->Tp + 32) & ~(size_t)31;
}
static size_t fwd_f32(const struct dims *z) { return (size_t)(QB * z->Tp + QB * z->dp); }

/* A block's query rows as the A of its products: in place where the block is whole and head_dim a multiple of 32
** (*lda the rows' stride), else copied into c padded with zeros (*lda w). */
static const uint16_t *rows_a(const uint16_t *rows, int64_t ld, int64_t n, int64_t hd, int64_t w, uint16_t *c,
                              int64_t *lda) {
  if (n == QB && hd == w) {
    *lda = ld;
    return rows;
  }
  pad_rows(rows, ld, n, hd, w, c);
  *lda = w;
  return c;
}

/* Rows r0 .. r1 - 1 (row stride ld elements of es bytes) of n elements from p prefetched into L2. */
static void prefetch_rows(const void *p, int64_t ld, int64_t es, int64_t r0, int64_t r1, int64_t n) {
  for (int64_t r = r0; r < r1; r++) {
    const char *row = (const char *)p + r * ld * es;
    for (uintptr_t at = (uintptr_t)row & ~(uintptr_t)63; at < (uintptr_t)(row + n * es); at += 64)
      _mm_prefetch((const char *)at, _MM_HINT_T1);
  }
}

/*
** Rows i0 .. i0 + QB - 1 of what task t (the thread's next: -1 none) reads
** and writes prefetched into L2 while this one computes: a task's rows are
** head_dim slices of rows thousands of bytes apart, fetched cold (the
** producing GEMM's output is long out of cache).
*/
static void prefetch_task(const struct strata__op *o, const struct dims *z, int fwd, int64_t t, int64_t i0) {
  if (t < 0 || i0 >= z->T)
    return;
  const int64_t T = z->T, i1 = i0 + QB < T ? i0 + QB : T, hd = z->hd, ld = z->ld;
  const int64_t b = t / (fwd ? z->H : z->KV), kh = fwd ? t % z->H / z->G : t % z->KV;
  const int64_t h0 = fwd ? t % z->H : kh * z->G, h1 = fwd ? h0 + 1 : h0 + z->G;
  const uint16_t *qkv = BF(o->u.attn.qkv) + b * T * ld, *out = BF(o->u.attn.out) + b * T * z->D;
  prefetch_rows(qkv + z->D + kh * hd, ld, 2, i0, i1, hd);
  prefetch_rows(qkv + z->D + (z->KV + kh) * hd, ld, 2, i0, i1, hd);
  if (!fwd) {
    const uint16_t *dqkv = BF(o->u.attn.dqkv) + b * T * ld;
    prefetch_rows(dqkv + z->D + kh * hd, ld, 2, i0, i1, hd);
    prefetch_rows(dqkv + z->D + (z->KV + kh) * hd, ld, 2, i0, i1, hd);
  }
  for (int64_t h = h0; h < h1; h++) {
    prefetch_rows(qkv + h * hd, ld, 2, i0, i1, hd);
    prefetch_rows(out + h * hd, z->D, 2, i0, i1, hd);
    if (!fwd) {
      prefetch_rows(BF(o->u.attn.dout) + b * T * z->D + h * hd, z->D, 2, i0, i1, hd);
      prefetch_rows(BF(o->u.attn.dqkv) + b * T * ld + h * hd, ld, 2, i0, i1, hd);
      prefetch_rows(F(o->u.attn.lse) + (b * z->H + h) * T, 0, 4, i0, i0 + 1, i1 - i0);
    }
  }
}

/* The forward of one (sequence, query head). */
static void fwd_task(const struct strata__op *o, const struct dims *z, int64_t bh, int64_t next, void *ws) {
  const uint16_t *qkv = BF(o->u.attn.qkv);
  uint16_t *out = BF(o->u.attn.out);
  float *lse = F(o->u.attn.lse);
  int64_t b = bh / z->H, h = bh % z->H, T = z->T, Tp = z->Tp, dp = z->dp, hdq = z->hdq;
  uint16_t *kt = ws, *v2 = kt + 2 * z->hd2 * Tp, *qb = v2 + Tp * dp, *pb = qb + QB * hdq;
  float *s = (float *)((uint16_t *)ws + fwd_u16(z)), *ob = s + QB * Tp;
  const uint16_t *base = qkv + b * T * z->ld + h * z->hd, *kbase = qkv + b * T * z->ld + z->D + h / z->G * z->hd,
                 *vbase = kbase + z->KV * z->hd;
  pack_t(kbase, z->ld, T, z->hd, z->hd2, Tp, kt);
  pack_r(vbase, z->ld, T, Tp, z->hd, dp, v2);
  for (int64_t i0 = 0; i0 < T; i0 += QB) {
    int64_t nq = T - i0 < QB ? T - i0 : QB, nmax = z->causal ? i0 + nq : T, np = R32(nmax), lda;
    float inv[QB];
    prefetch_task(o, z, 1, next, i0);
    const uint16_t *a = rows_a(base + i0 * z->ld, z->ld, nq, z->hd, hdq, qb, &lda);
    mm_rows(a, lda, kt, 2 * NT * z->hd2, z->hd2, QB, np, s, Tp, 0, 1.0f);
    for (int64_t r = 0; r < QB; r++)
      if (r >= nq)
        memset(pb + r * Tp, 0, (size_t)np * sizeof *pb);
      else
        lse[bh * T + i0 + r] = softmax_row(s + r * Tp, z->causal ? i0 + r + 1 : T, np, z->scale, pb + r * Tp, &inv[r]);
    mm_rows(pb, Tp, v2, NT * Tp, np / 2, QB, dp, ob, dp, 0, 1.0f);
    for (int64_t r = 0; r < nq; r++)
      put_row(ob + r * dp, inv[r], out + (b * T + i0 + r) * z->D + h * z->hd, z->hd);
  }
}

#define GQ 8 /* query blocks of a group: their dK, dV products summed in tiles together (dkv_amx) */

static size_t bwd_u16(const struct dims *z) {
  return (size_t)(4 * z->hd2 * z->Tp + z->Tp * z->dp + 2 * QB * z->hdq + 2 * QB * z->dp + QB * z->Tp +
                  2 * z->Tp * QB * GQ + 2 * QB * GQ * z->dp + 32) & ~(size_t)31;
}
static size_t bwd_f32(const struct dims *z) { return (size_t)(2 * QB * z->Tp + QB * z->dp + 2 * (z->Tp + 16) * z->dp); }

/*
** The backward of one (sequence, kv head): for each query head of its group
** in order, block by block: P from lse, dP = dO V^T, dS = P (dP - rowsum(dO o
** O)), dQ = scale dS K, and dK += dS^T Q, dV += P^T dO in float32 scratch
** (on AMX their transposes, GQ blocks at a time, rows of Tp + 16 floats: a
** stride of a power of two would map a tile's rows to a few cache sets; dK
** scaled once at the end).
*/
static void bwd_task(const struct strata__op *o, const struct dims *z, int64_t bk, int64_t next, void *ws) {
  const uint16_t *qkv = BF(o->u.attn.qkv), *out = BF(o->u.attn.out), *dout = BF(o->u.attn.dout);
  const float *lse = F(o->u.attn.lse);
  uint16_t *dqkv = BF(o->u.attn.dqkv);
  int64_t b = bk / z->KV, kh = bk % z->KV, T = z->T, Tp = z->Tp, dp = z->dp, hd = z->hd, hdq = z->hdq, ld = z->ld;
  uint16_t *kt = ws, *vt = kt + 2 * z->hd2 * Tp, *k2 = vt + 2 * z->hd2 * Tp, *qb = k2 + Tp * dp, *dob = qb + QB * hdq,
           *q2 = dob + QB * hdq, *do2 = q2 + QB * dp, *dsb = do2 + QB * dp, *pTg = dsb + QB * Tp,
           *dsTg = pTg + Tp * QB * GQ, *qT = dsTg + Tp * QB * GQ, *doT = qT + QB * GQ * dp;
  float *s = (float *)((uint16_t *)ws + bwd_u16(z)), *dpf = s + QB * Tp, *dqf = dpf + QB * Tp, *dk = dqf + QB * dp,
        *dv = dk + (Tp + 16) * dp;
  const uint16_t *kbase = qkv + b * T * ld + z->D + kh * hd, *vbase = kbase + z->KV * hd;
  uint16_t *dkbase = dqkv + b * T * ld + z->D + kh * hd, *dvbase = dkbase + z->KV * hd;
  int64_t fresh = 0; /* AMX: the columns of dK^T, dV^T below this written */
  const struct dkv_out dkvo = {{dkbase, dvbase}, ld, T, hd, {z->scale, 1.0f}};
  pack_t(kbase, ld, T, hd, z->hd2, Tp, kt);
  pack_t(vbase, ld, T, hd, z->hd2, Tp, vt);
  pack_r(kbase, ld, T, Tp, hd, dp, k2);
  if (!amx)
    memset(dk, 0, (size_t)(2 * (Tp + 16) * dp) * sizeof *dk);
  for (int64_t h = kh * z->G; h < (kh + 1) * z->G; h++) {
    int64_t bh = b * z->H + h;
    const uint16_t *base = qkv + b * T * ld + h * hd;
    uint16_t *dbase = dqkv + b * T * ld + h * hd;
    int64_t npg[GQ];
    for (int64_t i0 = 0; i0 < T; i0 += QB) {
      int64_t nq = T - i0 < QB ? T - i0 : QB, nmax = z->causal ? i0 + nq : T, np = R32(nmax), lqa, lda;
      const int bi = (int)(i0 / QB % GQ);
      if (h == kh * z->G)
        prefetch_task(o, z, 0, next, i0);
      uint16_t *pT = pTg + bi * QB * Tp, *dsT = dsTg + bi * QB * Tp; /* this block's zipped P and dS */
      const uint16_t *drows = dout + (b * T + i0) * z->D + h * hd;
      const uint16_t *qa = rows_a(base + i0 * ld, ld, nq, hd, hdq, qb, &lqa),
                     *da = rows_a(drows, z->D, nq, hd, hdq, dob, &lda);
      pack_r(base + i0 * ld, ld, nq, QB, hd, dp, q2);
      pack_r(drows, z->D, nq, QB, hd, dp, do2);
      float rsb[QB]; /* rowsum(dO o O) of the block's rows, ahead of the products (their loads overlap) */
      for (int64_t r = 0; r < nq; r++)
        rsb[r] = dot_rows(drows + r * z->D, out + (b * T + i0 + r) * z->D + h * hd, hd);
      mm_rows(qa, lqa, kt, 2 * NT * z->hd2, z->hd2, QB, np, s, Tp, 0, 1.0f);
      mm_rows(da, lda, vt, 2 * NT * z->hd2, z->hd2, QB, np, dpf, Tp, 0, 1.0f);
      for (int64_t r = 0; r < QB; r += 2) {
        int64_t n[2];
        float l[2], rs[2];
        for (int e = 0; e < 2; e++) {
          const int64_t i = i0 + r + e;
          n[e] = r + e >= nq ? 0 : z->causal ? i + 1 : T;
          l[e] = n[e] ? lse[bh * T + i] : 0.0f;
          rs[e] = n[e] ? rsb[r + e] : 0.0f;
        }
        probs_grad2(s, dpf, Tp, r, n, l, rs, np, z->scale, dsb, pT, dsT);
      }
      mm_rows(dsb, Tp, k2, NT * Tp, np / 2, QB, dp, dqf, dp, 0, 1.0f);
      for (int64_t r = 0; r < nq; r++)
        put_row(dqf + r * dp, z->scale, dbase + (i0 + r) * ld, hd);
      if (amx) { /* dK^T += Q^T dS, dV^T += dO^T P: the zipped blocks are their B, summed once the group is whole */
        transpose_pairs(q2, dp, qT + bi * QB, QB * GQ);
        transpose_pairs(do2, dp, doT + bi * QB, QB * GQ);
        npg[bi] = np;
        if (bi == GQ - 1 || i0 + QB >= T) {
          const int last = h == (kh + 1) * z->G - 1 && i0 + QB >= T;
          dkv_amx(qT, doT, QB * GQ, dsTg, pTg, Tp, bi + 1, npg, dp, fresh, dk, dv, Tp + 16, last ? &dkvo : NULL);
          for (int i = 0; i <= bi; i++)
            fresh = npg[i] > fresh ? npg[i] : fresh;
        }
      } else {
        mm_pairs(dsT, 2, 2 * Tp, q2, NT * QB, QB / 2, np, dp, dk, dp, 1, 1.0f);
        mm_pairs(pT, 2, 2 * Tp, do2, NT * QB, QB / 2, np, dp, dv, dp, 1, 1.0f);
      }
    }
  }
  if (!amx) {
    for (int64_t j = 0; j < T; j++) {
      put_row(dk + j * dp, z->scale, dkbase + j * ld, hd);
      put_row(dv + j * dp, 1.0f, dvbase + j * ld, hd);
    }
  }
}

#pragma GCC pop_options

static int native;
static pthread_once_t native_once = PTHREAD_ONCE_INIT;

/* AVX-512 BF16 where the CPU has it (else the staged float32 attention); AMX tiles on top where it has AMX-BF16
** and Linux lets the process use the tile data (arch_prctl ARCH_REQ_XCOMP_PERM, once per process). */
static void native_choose(void) {
  unsigned f = strata__cpu_features();
  native = (f & NEEDS) == NEEDS;
#if defined(__linux__) && defined(SYS_arch_prctl)
  amx = native && (f & STRATA__CPU_AMXBF16) && syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */,
                                                         18 /* XFEATURE_XTILEDATA */) == 0;
#endif
  strata__host_log(STRATA_LOG_INFO, "bf16 attention: %s",
                   amx      ? "AMX-BF16 tiles on bfloat16 blocks"
                   : native ? "AVX-512 BF16 dot products (vdpbf16ps) on bfloat16 blocks"
                            : "float32 kernel on widened blocks (no AVX-512 BF16)");
}

static int run(const struct strata__op *o, int fwd) {
  struct dims z = dims_of(o);
  size_t u16 = fwd ? fwd_u16(&z) : bwd_u16(&z), per = u16 * 2 + 4 * (fwd ? fwd_f32(&z) : bwd_f32(&z));
  int64_t tasks = z.B * (fwd ? z.H : z.KV), work = z.T * z.T * z.hd * z.B * z.H;
  int nt = work >= PAR_MIN * 16 ? strata__host_threads : 1;
  if (nt > tasks)
    nt = (int)tasks;
  per = (per + 63) & ~(size_t)63;
  char *scratch = NULL;
  if (posix_memalign((void **)&scratch, 64, (size_t)nt * per) != 0)
    return STRATA_ERR_NOMEM;
  _Pragma("omp parallel for schedule(static) num_threads(nt)")
  for (int64_t t = 0; t < tasks; t++) {
#ifdef _OPENMP
    void *ws = scratch + (size_t)omp_get_thread_num() * per;
#else
    void *ws = scratch;
#endif
    if (amx)
      amx_start();
    if (fwd)
      fwd_task(o, &z, t, t + 1 < tasks ? t + 1 : -1, ws);
    else
      bwd_task(o, &z, t, t + 1 < tasks ? t + 1 : -1, ws);
    if (amx)
      amx_end();
  }
  free(scratch);
  return STRATA_OK;
}

int strata__host_attention_bf16(const struct strata__op *o) {
  pthread_once(&native_once, native_choose);
  int fwd = o->id == STRATA__OP_ATTENTION_FWD;
  if (!native || o->u.attn.seq * (o->u.attn.heads + 2 * o->u.attn.kv_heads) * o->u.attn.head_dim > INT32_MAX ||
      !IS_BF16(o->u.attn.qkv) || !IS_BF16(o->u.attn.out) || IS_BF16(o->u.attn.lse) ||
      (!fwd && (!IS_BF16(o->u.attn.dout) || !IS_BF16(o->u.attn.dqkv))))
    return STRATA_ERR_UNSUPPORTED;
  return run(o, fwd);
}

#else

int strata__host_attention_bf16(const struct strata__op *o) {
  (void)o;
  return STRATA_ERR_UNSUPPORTED;
}

#endif
