/* SPDX-License-Identifier: MIT */
/* gemm-bf16.c — the host's GEMMs with bfloat16 operands: oneDNN's matmul, OpenBLAS's sbgemm, or float32 emulation. */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/comm.h>

#include "bf16.h"
#include "host.h"

#if defined(STRATA_BLAS_DNNL)
#include <oneapi/dnnl/dnnl.h>
#elif defined(STRATA_HAVE_SBGEMM)
#include <cblas.h>
#endif

#define IS_BF16(m) ((m).dtype == STRATA_BFLOAT16)
#define ELEM(m, i) ((char *)(m).h + ((m).off + (size_t)(i)) * (IS_BF16(m) ? 2u : 4u))

static pthread_once_t path_once = PTHREAD_ONCE_INIT;

/* Widen a rows x cols matrix (row stride ld) into a packed float32 one. */
static void widen_matrix(const uint16_t *x, int64_t ld, int64_t rows, int64_t cols, float *y) {
  for (int64_t r = 0; r < rows; r++)
    strata__bf16_to_f32(x + r * ld, y + r * cols, cols);
}

/*
** The float32 route, for every combination: bfloat16 A and B widened into
** packed scratch, C computed in float32 — in place when C is float32, else
** in scratch (C's old values widened when beta is not 0) and rounded once.
** A and B are float32 here unless the build has no bfloat16 GEMM (or
** oneDNN refused the shape): then this is the emulated bfloat16 GEMM.
*/
static int gemm_f32_route(const struct strata__op *op) {
  const __typeof__(op->u.gemm) *g = &op->u.gemm;
  int64_t ra = g->trans_a ? g->k : g->m, ca = g->trans_a ? g->m : g->k;
  int64_t rb = g->trans_b ? g->n : g->k, cb = g->trans_b ? g->k : g->n;
  int ab16 = IS_BF16(g->a), c16 = IS_BF16(g->c);
  size_t na = ab16 ? (size_t)(ra * ca) : 0, nb = ab16 ? (size_t)(rb * cb) : 0, nc = c16 ? (size_t)(g->m * g->n) : 0;
  float *s = na + nb + nc ? strata__host_scratch(na + nb + nc) : NULL;
  if (na + nb + nc && !s)
    return STRATA_ERR_NOMEM;
  float *a32 = s, *b32 = s + na, *c32 = s + na + nb;
  for (int64_t i = 0; i < g->batch; i++) {
    const float *a = (const float *)ELEM(g->a, i * g->stride_a), *b = (const float *)ELEM(g->b, i * g->stride_b);
    int64_t lda = g->lda, ldb = g->ldb, ldc = g->ldc;
    if (ab16) {
      widen_matrix((const uint16_t *)ELEM(g->a, i * g->stride_a), g->lda, ra, ca, a32);
      widen_matrix((const uint16_t *)ELEM(g->b, i * g->stride_b), g->ldb, rb, cb, b32);
      a = a32, b = b32, lda = ca, ldb = cb;
    }
    float *c = (float *)ELEM(g->c, i * g->stride_c);
    uint16_t *c16p = (uint16_t *)ELEM(g->c, i * g->stride_c);
    if (c16) {
      if (g->beta != 0.0f)
        widen_matrix(c16p, g->ldc, g->m, g->n, c32);
      c = c32, ldc = g->n;
    }
    strata__host_sgemm(g->trans_a, g->trans_b, g->m, g->n, g->k, g->alpha, a, lda, b, ldb, g->beta, c, ldc);
    if (c16)
      for (int64_t r = 0; r < g->m; r++)
        strata__bf16_from_f32(c32 + r * g->n, c16p + r * g->ldc, g->n);
  }
  return STRATA_OK;
}

#if defined(STRATA_BLAS_DNNL)

/*
** oneDNN matmul primitives, one per shape (sizes, transposes, leading
** dimensions, batch strides, types, alpha and beta), made on first use and
** kept for the module's life: a training step repeats a few dozen shapes.
** alpha is the output scale, beta a sum post-op (dst = alpha A B + beta dst).
** A batch whose strides oneDNN takes runs as one 3-D matmul; otherwise one
** 2-D primitive runs batch times. A LINEAR's key adds its bias (the
** matmul's bias argument) and residual (a binary add post-op), each
** 1 + its type (0: none).
*/
struct mm_key {
  int trans_a, trans_b, c_dtype, bias_dt, res_dt, pad_;
  int64_t m, n, k, lda, ldb, ldc, stride_a, stride_b, stride_c, batch;
  float alpha, beta;
};

struct mm {
  struct mm_key key;
  dnnl_primitive_t prim; /* NULL: oneDNN has no matmul for this key (the float32 route runs it) */
  dnnl_memory_desc_t a, b, c, bias, res;
  dnnl_memory_desc_t pad; /* its scratchpad, which the caller provides (executions run concurrently) */
  size_t pad_bytes;
  int batched;           /* 1: one 3-D matmul for the batch; 0: the 2-D one batch times */
  int brgemm;            /* oneDNN chose its brgemm kernels (AMX, AVX-512), not its plain gemm:jit */
  struct mm *next;
};

#define MM_CACHE_MAX 256 /* shapes kept; beyond, a primitive is made for the call and dropped */

static pthread_mutex_t mm_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mm *mm_cache;
static int mm_count;
static dnnl_engine_t engine;
static pthread_key_t stream_key;
static int engine_ok;

static void stream_free(void *s) { dnnl_stream_destroy(s); }

/* The calling thread's stream (a queue's worker keeps one). */
static dnnl_stream_t thread_stream(void) {
  dnnl_stream_t s = pthread_getspecific(stream_key);
  if (!s) {
    if (dnnl_stream_create(&s, engine, dnnl_stream_default_flags) != dnnl_success)
      return NULL;
    if (pthread_setspecific(stream_key, s) != 0) {
      dnnl_stream_destroy(s);
      return NULL;
    }
  }
  return s;
}

/* A batch (or one, with batched 0) of rows x cols matrices, op(X) of the stored ones (transposed when trans). */
static int matrix_md(dnnl_memory_desc_t *d, int batched, int64_t batch, int64_t rows, int64_t cols, int trans,
                     int64_t ld, int64_t stride, dnnl_data_type_t dt) {
  dnnl_dims_t dims, strides;
  int nd = 0;
  if (batched) {
    /* a batch stride of 0 is one matrix for every product: oneDNN broadcasts a batch dimension of 1 */
    dims[nd] = stride ? batch : 1;
    strides[nd++] = stride ? stride : rows * cols;
  }
  dims[nd] = rows, strides[nd++] = trans ? 1 : ld;
  dims[nd] = cols, strides[nd++] = trans ? ld : 1;
  return dnnl_memory_desc_init_by_strides(d, nd, dims, dt, strides) == dnnl_success;
}

static dnnl_data_type_t dt_of(int dtype) { return dtype == STRATA_BFLOAT16 ? dnnl_bf16 : dnnl_f32; }

static dnnl_primitive_t mm_make(const struct mm_key *k, int batched, struct mm *e) {
  dnnl_memory_desc_t *a = &e->a, *b = &e->b, *c = &e->c, *pad = &e->pad;
  size_t *pad_bytes = &e->pad_bytes;
  dnnl_data_type_t cdt = dt_of(k->c_dtype);
  if (!matrix_md(a, batched, k->batch, k->m, k->k, k->trans_a, k->lda, k->stride_a, dnnl_bf16) ||
      !matrix_md(b, batched, k->batch, k->k, k->n, k->trans_b, k->ldb, k->stride_b, dnnl_bf16) ||
      !matrix_md(c, batched, k->batch, k->m, k->n, 0, k->ldc, k->stride_c, cdt))
    return NULL;
  if (batched && !k->stride_c)
    return NULL;
  if ((k->bias_dt || k->res_dt) && batched)
    return NULL;
  if (k->bias_dt && !matrix_md(&e->bias, 0, 1, 1, k->n, 0, k->n, 0, dt_of(k->bias_dt - 1)))
    return NULL;
  if (k->res_dt && !matrix_md(&e->res, 0, 1, k->m, k->n, 0, k->n, 0, dt_of(k->res_dt - 1)))
    return NULL;
  dnnl_matmul_desc_t desc;
  if (dnnl_matmul_desc_init(&desc, a, b, k->bias_dt ? &e->bias : NULL, c) != dnnl_success)
    return NULL;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t post = NULL;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_primitive_t prim = NULL;
  /* a scratchpad of the caller's: one primitive serves every device's worker thread at once, and oneDNN's own
  ** scratchpad (per primitive, unless built for concurrent execution) would be shared among them */
  int ok = dnnl_primitive_attr_create(&attr) == dnnl_success &&
           dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success;
  if (ok && k->alpha != 1.0f)
    ok = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &k->alpha) == dnnl_success;
  if (ok && (k->beta != 0.0f || k->res_dt))
    ok = dnnl_post_ops_create(&post) == dnnl_success &&
         (k->beta == 0.0f || dnnl_post_ops_append_sum(post, k->beta) == dnnl_success) &&
         (!k->res_dt || dnnl_post_ops_append_binary(post, dnnl_binary_add, &e->res) == dnnl_success) &&
         dnnl_primitive_attr_set_post_ops(attr, post) == dnnl_success;
  if (ok)
    ok = dnnl_primitive_desc_create(&pd, &desc, attr, engine, NULL) == dnnl_success;
  if (ok) {
    const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    *pad_bytes = sp ? dnnl_memory_desc_get_size(sp) : 0;
    if (sp)
      *pad = *sp;
  }
  if (ok && dnnl_primitive_create(&prim, pd) != dnnl_success)
    prim = NULL;
  if (pd)
    dnnl_primitive_desc_destroy(pd);
  if (post)
    dnnl_post_ops_destroy(post);
  if (attr)
    dnnl_primitive_attr_destroy(attr);
  return prim;
}

/* Fill e for key k: the 3-D matmul when oneDNN takes it, else the 2-D one, else none. */
static void mm_fill(struct mm *e, const struct mm_key *k) {
  e->key = *k;
  e->batched = k->batch > 1;
  e->prim = e->batched ? mm_make(k, 1, e) : NULL;
  if (!e->prim) {
    e->batched = 0;
    e->prim = mm_make(k, 0, e);
  }
  e->brgemm = 0;
  if (e->prim) {
    const_dnnl_primitive_desc_t pd = NULL;
    const char *impl = NULL;
    e->brgemm = dnnl_primitive_get_primitive_desc(e->prim, &pd) == dnnl_success && pd &&
                dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, (void *)&impl) == dnnl_success && impl &&
                strncmp(impl, "brg", 3) == 0;
  }
}

/* The calling thread's scratchpad, grown to `bytes` (kept for the thread's next GEMMs). */
static pthread_key_t pad_key;
struct pad {
  void *p;
  size_t bytes;
};
static void pad_free(void *x) {
  struct pad *p = x;
  free(p->p);
  free(p);
}
static void *thread_pad(size_t bytes) {
  struct pad *p = pthread_getspecific(pad_key);
  if (!p) {
    if (!(p = calloc(1, sizeof *p)))
      return NULL;
    if (pthread_setspecific(pad_key, p) != 0) {
      free(p);
      return NULL;
    }
  }
  if (p->bytes < bytes) {
    void *q = strata__host_alloc(bytes);
    if (!q)
      return NULL;
    free(p->p);
    p->p = q;
    p->bytes = bytes;
  }
  return p->p;
}

/* Run e's primitive on a GEMM record's operands; `bias`, `res`: a LINEAR's (NULL for a GEMM). */
static int mm_run(const struct mm *e, const struct strata__op *op, void *bias, void *res) {
  const __typeof__(op->u.gemm) *g = &op->u.gemm;
  dnnl_stream_t st = thread_stream();
  void *pad = e->pad_bytes ? thread_pad(e->pad_bytes) : NULL;
  if (!st || (e->pad_bytes && !pad))
    return STRATA_ERR_NOMEM;
  int64_t times = e->batched ? 1 : g->batch;
  for (int64_t i = 0; i < times; i++) {
    dnnl_memory_t ma = NULL, mb = NULL, mc = NULL, mp = NULL, mbias = NULL, mres = NULL;
    int ok = dnnl_memory_create(&ma, &e->a, engine, ELEM(g->a, i * g->stride_a)) == dnnl_success &&
             dnnl_memory_create(&mb, &e->b, engine, ELEM(g->b, i * g->stride_b)) == dnnl_success &&
             dnnl_memory_create(&mc, &e->c, engine, ELEM(g->c, i * g->stride_c)) == dnnl_success &&
             (!pad || dnnl_memory_create(&mp, &e->pad, engine, pad) == dnnl_success) &&
             (!bias || dnnl_memory_create(&mbias, &e->bias, engine, bias) == dnnl_success) &&
             (!res || dnnl_memory_create(&mres, &e->res, engine, res) == dnnl_success);
    if (ok) {
      dnnl_exec_arg_t args[6] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
      int n = 3;
      if (pad)
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, mp};
      if (bias)
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, mbias};
      if (res) /* the binary post-op: the first, or the second after beta's sum */
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_MULTIPLE_POST_OP(g->beta != 0.0f) | DNNL_ARG_SRC_1, mres};
      ok = dnnl_primitive_execute(e->prim, st, n, args) == dnnl_success && dnnl_stream_wait(st) == dnnl_success;
    }
    if (mbias)
      dnnl_memory_destroy(mbias);
    if (mres)
      dnnl_memory_destroy(mres);
    if (mp)
      dnnl_memory_destroy(mp);
    if (ma)
      dnnl_memory_destroy(ma);
    if (mb)
      dnnl_memory_destroy(mb);
    if (mc)
      dnnl_memory_destroy(mc);
    if (!ok)
      return STRATA_ERR_BACKEND;
  }
  return STRATA_OK;
}

static void path_choose(void) {
  engine_ok = dnnl_engine_create(&engine, dnnl_cpu, 0) == dnnl_success &&
              pthread_key_create(&stream_key, stream_free) == 0 && pthread_key_create(&pad_key, pad_free) == 0;
  const dnnl_version_t *v = dnnl_version();
  if (engine_ok)
    strata__host_log(STRATA_LOG_INFO, "bf16 GEMM: oneDNN %d.%d.%d matmul (bf16 A and B, float32 sums)", v->major,
                     v->minor, v->patch);
  else
    strata__host_log(STRATA_LOG_WARN, "bf16 GEMM: emulated (widened to float32, then sgemm): no oneDNN CPU engine");
}

static int gemm_dnnl(const struct strata__op *op, int inner);

/* 1 when a batch of rows x cols matrices (row stride ld, batch stride `stride`) is stored densely: rows of exactly
** its columns, matrices one after the other (or one matrix for the batch: stride 0). */
static int dense(int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t batch) {
  return ld == cols && (batch == 1 || stride == 0 || stride == rows * cols);
}

/* rows x cols elements of `size` bytes from x (row stride ld, `batch` matrices `stride` apart) into or out of
** packed y; `in`: into y. */
static void pack(char *x, int64_t ld, int64_t stride, int64_t batch, int64_t rows, int64_t cols, size_t size, char *y,
                 int in) {
  for (int64_t i = 0; i < batch; i++)
    for (int64_t r = 0; r < rows; r++) {
      char *xs = x + ((size_t)(i * stride + r * ld)) * size, *ys = y + ((size_t)((i * rows + r) * cols)) * size;
      if (in)
        memcpy(ys, xs, (size_t)cols * size);
      else
        memcpy(xs, ys, (size_t)cols * size);
    }
}

/*
** A GEMM whose matrices lie strided inside wider ones (attention's heads:
** each head's columns of rows that hold every head) gets oneDNN's plain
** gemm:jit, several times slower than its brgemm kernels (AMX, AVX-512),
** which take only dense operands: each strided operand (C too, read back
** when beta reads it) copied densely into the thread's scratch, the dense
** GEMM run, a strided C copied back.
*/
static int gemm_packed(const struct strata__op *op) {
  const __typeof__(op->u.gemm) *g = &op->u.gemm;
  int64_t ra = g->trans_a ? g->k : g->m, ca = g->trans_a ? g->m : g->k;
  int64_t rb = g->trans_b ? g->n : g->k, cb = g->trans_b ? g->k : g->n;
  int64_t ba = g->stride_a ? g->batch : 1, bb = g->stride_b ? g->batch : 1;
  int pa = !dense(ra, ca, g->lda, g->stride_a, g->batch), pb = !dense(rb, cb, g->ldb, g->stride_b, g->batch);
  int pc = !dense(g->m, g->n, g->ldc, g->stride_c, g->batch);
  size_t csize = IS_BF16(g->c) ? 2 : 4, na = pa ? (size_t)(ba * ra * ca) : 0, nb = pb ? (size_t)(bb * rb * cb) : 0;
  size_t nc = pc ? (size_t)(g->batch * g->m * g->n) : 0;
  size_t at_b = (na * 2 + 63) & ~(size_t)63, at_c = at_b + ((nb * 2 + 63) & ~(size_t)63);
  char *s = (char *)strata__host_scratch((at_c + nc * csize + 3) / 4 + 1);
  if (!s)
    return STRATA_ERR_NOMEM;
  struct strata__op d = *op;
  if (pa) {
    pack(ELEM(g->a, 0), g->lda, g->stride_a, ba, ra, ca, 2, s, 1);
    d.u.gemm.a = (struct strata__mem){s, 0, g->a.dtype};
    d.u.gemm.lda = ca, d.u.gemm.stride_a = g->stride_a ? ra * ca : 0;
  }
  if (pb) {
    pack(ELEM(g->b, 0), g->ldb, g->stride_b, bb, rb, cb, 2, s + at_b, 1);
    d.u.gemm.b = (struct strata__mem){s + at_b, 0, g->b.dtype};
    d.u.gemm.ldb = cb, d.u.gemm.stride_b = g->stride_b ? rb * cb : 0;
  }
  if (pc) {
    if (g->beta != 0.0f)
      pack(ELEM(g->c, 0), g->ldc, g->stride_c, g->batch, g->m, g->n, csize, s + at_c, 1);
    d.u.gemm.c = (struct strata__mem){s + at_c, 0, g->c.dtype};
    d.u.gemm.ldc = g->n, d.u.gemm.stride_c = g->m * g->n;
  }
  int rc = gemm_dnnl(&d, 1);
  if (!rc && pc)
    pack(ELEM(g->c, 0), g->ldc, g->stride_c, g->batch, g->m, g->n, csize, s + at_c, 0);
  return rc;
}

/*
** A weight gradient's x^T dy: oneDNN's brgemm reads a transposed A through
** its own per-block copies, about a third slower than a plain A (measured
** on AMX: 512x2048x1024 1.9 ms against 1.2 ms). Where the product is wide
** (n >= AT_N_MIN) its A is cheap beside that gain, so a oneDNN reorder (a
** jitted transpose: 1 MB in ~0.1 ms) lays A plainly in the thread's
** scratch first and the plain product runs; a narrow one (a 2048-row A
** for 512 columns: the reorder costs what it saves) runs as it is. One
** reorder per shape, kept like the matmuls. The float32 sums then run in
** the plain kernel's order: bfloat16 bits of these products differ from
** the transposed kernel's, from run to run never.
*/
#define AT_N_MIN 1024

struct ro {
  int64_t m, k, lda;
  dnnl_primitive_t prim; /* NULL: oneDNN made none (the product runs with its transposed A) */
  dnnl_memory_desc_t src, dst;
  struct ro *next;
};
static struct ro *ro_cache;
static int ro_count;

/* The reorder of a k x m bfloat16 matrix of row stride lda into its plain m x k transpose (cached by shape). */
static struct ro *ro_lookup(int64_t m, int64_t k, int64_t lda) {
  pthread_mutex_lock(&mm_lock);
  struct ro *e = ro_cache;
  while (e && (e->m != m || e->k != k || e->lda != lda))
    e = e->next;
  if (!e && ro_count < MM_CACHE_MAX && (e = calloc(1, sizeof *e)) != NULL) {
    e->m = m, e->k = k, e->lda = lda;
    dnnl_primitive_desc_t pd = NULL;
    if (matrix_md(&e->src, 0, 1, m, k, 1, lda, 0, dnnl_bf16) && matrix_md(&e->dst, 0, 1, m, k, 0, k, 0, dnnl_bf16) &&
        dnnl_reorder_primitive_desc_create(&pd, &e->src, engine, &e->dst, engine, NULL) == dnnl_success &&
        dnnl_primitive_create(&e->prim, pd) != dnnl_success)
      e->prim = NULL;
    if (pd)
      dnnl_primitive_desc_destroy(pd);
    strata__host_log(STRATA_LOG_INFO, "bf16 GEMM with a transposed %lldx%lld A: %s", (long long)k, (long long)m,
                     e->prim ? "laid plainly by a oneDNN reorder, then the plain matmul"
                             : "no oneDNN reorder for it, the matmul reads it transposed");
    e->next = ro_cache;
    ro_cache = e;
    ro_count++;
  }
  pthread_mutex_unlock(&mm_lock);
  return e;
}

/* The GEMM with its transposed A laid plainly first (above); STRATA_ERR_UNSUPPORTED where that does not apply. */
static int gemm_plain_a(const struct strata__op *op) {
  const __typeof__(op->u.gemm) *g = &op->u.gemm;
  if (!g->trans_a || g->batch != 1 || g->n < AT_N_MIN || !IS_BF16(g->a) || !dense(g->k, g->m, g->lda, 0, 1) ||
      !dense(g->k, g->n, g->ldb, g->stride_b, 1) || !dense(g->m, g->n, g->ldc, g->stride_c, 1))
    return STRATA_ERR_UNSUPPORTED;
  struct ro *r = ro_lookup(g->m, g->k, g->lda);
  uint16_t *s = r && r->prim ? (uint16_t *)strata__host_scratch((size_t)(g->m * g->k + 1) / 2) : NULL;
  dnnl_stream_t st = thread_stream();
  if (!s || !st)
    return STRATA_ERR_UNSUPPORTED;
  dnnl_memory_t from = NULL, to = NULL;
  int ok = dnnl_memory_create(&from, &r->src, engine, ELEM(g->a, 0)) == dnnl_success &&
           dnnl_memory_create(&to, &r->dst, engine, s) == dnnl_success;
  if (ok) {
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    ok = dnnl_primitive_execute(r->prim, st, 2, args) == dnnl_success && dnnl_stream_wait(st) == dnnl_success;
  }
  if (from)
    dnnl_memory_destroy(from);
  if (to)
    dnnl_memory_destroy(to);
  if (!ok)
    return STRATA_ERR_BACKEND;
  struct strata__op d = *op;
  d.u.gemm.trans_a = 0, d.u.gemm.lda = g->k;
  d.u.gemm.a = (struct strata__mem){s, 0, g->a.dtype};
  return gemm_dnnl(&d, 1);
}

/* The GEMM through oneDNN's matmul; `inner`: the dense copy of gemm_packed, which a missing primitive
** returns to (STRATA_ERR_UNSUPPORTED) rather than the float32 route, whose scratch is the copies'. */
/* The key of a GEMM record (bias_dt, res_dt 0). */
static struct mm_key gemm_key(const struct strata__op *op) {
  const __typeof__(op->u.gemm) *g = &op->u.gemm;
  struct mm_key k;
  memset(&k, 0, sizeof k);
  k.trans_a = g->trans_a, k.trans_b = g->trans_b, k.c_dtype = g->c.dtype;
  k.m = g->m, k.n = g->n, k.k = g->k, k.lda = g->lda, k.ldb = g->ldb, k.ldc = g->ldc;
  k.stride_a = g->stride_a, k.stride_b = g->stride_b, k.stride_c = g->stride_c, k.batch = g->batch;
  k.alpha = g->alpha, k.beta = g->beta;
  return k;
}

/* The cached primitive of key k, made on first use (`made`: set when this call made it); `once` when the cache is
** full: the caller destroys once's primitive after its call. */
static struct mm *mm_lookup(const struct mm_key *k, struct mm *once, int *made) {
  *made = 0;
  pthread_mutex_lock(&mm_lock);
  struct mm *e = mm_cache;
  while (e && memcmp(&e->key, k, sizeof *k) != 0)
    e = e->next;
  if (!e && mm_count < MM_CACHE_MAX && (e = calloc(1, sizeof *e)) != NULL) {
    mm_fill(e, k);
    e->next = mm_cache;
    mm_cache = e;
    mm_count++;
    *made = 1;
  }
  pthread_mutex_unlock(&mm_lock);
  if (!e) { /* the cache is full (or memory ran out): a primitive for this call alone */
    e = once;
    mm_fill(e, k);
  }
  return e;
}

static int gemm_dnnl(const struct strata__op *op, int inner) {
  const __typeof__(op->u.gemm) *g = &op->u.gemm;
  struct mm_key k = gemm_key(op);
  struct mm once;
  int made;
  struct mm *e = mm_lookup(&k, &once, &made);
  if (made && !e->prim)
    strata__host_log(STRATA_LOG_INFO,
                     "bf16 GEMM %c%c %lldx%lldx%lld (batch %lld): no oneDNN matmul for it, emulated in float32",
                     g->trans_a ? 'T' : 'N', g->trans_b ? 'T' : 'N', (long long)g->m, (long long)g->n,
                     (long long)g->k, (long long)g->batch);
  if (inner && !e->prim)
    return STRATA_ERR_UNSUPPORTED;
  int rc = STRATA_ERR_UNSUPPORTED;
  int64_t ra = g->trans_a ? g->k : g->m, ca = g->trans_a ? g->m : g->k;
  int64_t rb = g->trans_b ? g->n : g->k, cb = g->trans_b ? g->k : g->n;
  int all_dense = dense(ra, ca, g->lda, g->stride_a, g->batch) && dense(rb, cb, g->ldb, g->stride_b, g->batch) &&
                  dense(g->m, g->n, g->ldc, g->stride_c, g->batch);
  if (e->prim && !e->brgemm && !all_dense && (g->batch == 1 || g->stride_c))
    rc = gemm_packed(op);
  if (rc == STRATA_ERR_UNSUPPORTED)
    rc = e->prim ? mm_run(e, op, NULL, NULL) : gemm_f32_route(op);
  if (e == &once && e->prim)
    dnnl_primitive_destroy(e->prim);
  return rc;
}

static int gemm_bf16_ab(const struct strata__op *op) {
  pthread_once(&path_once, path_choose);
  if (!engine_ok)
    return gemm_f32_route(op);
  int rc = gemm_plain_a(op);
  return rc == STRATA_ERR_UNSUPPORTED ? gemm_dnnl(op, 0) : rc;
}

/*
** LINEAR with bfloat16 x, w and y: one matmul whose epilogue adds the bias
** (its bias argument, float32 or bfloat16) and the residual (a binary add
** post-op) to the float32 sums before y is rounded, once. Only where
** oneDNN gives its brgemm kernels for it (else the separate ops are
** faster): STRATA_ERR_UNSUPPORTED otherwise.
*/
int strata__host_linear_fused(const struct strata__op *op) {
  const __typeof__(op->u.linear) *l = &op->u.linear;
  if (!IS_BF16(l->x) || !IS_BF16(l->y))
    return STRATA_ERR_UNSUPPORTED;
  pthread_once(&path_once, path_choose);
  if (!engine_ok)
    return STRATA_ERR_UNSUPPORTED;
  struct strata__op g = {.id = STRATA__OP_GEMM, .dtypes = op->dtypes};
  g.u.gemm.m = l->rows, g.u.gemm.n = l->out, g.u.gemm.k = l->in;
  g.u.gemm.lda = l->in, g.u.gemm.ldb = l->out, g.u.gemm.ldc = l->out, g.u.gemm.batch = 1;
  g.u.gemm.alpha = 1.0f, g.u.gemm.beta = 0.0f;
  g.u.gemm.a = l->x, g.u.gemm.b = l->w, g.u.gemm.c = l->y;
  struct mm_key k = gemm_key(&g);
  k.bias_dt = 1 + l->bias.dtype;
  k.res_dt = l->res.h ? 1 + l->res.dtype : 0;
  struct mm once;
  int made;
  struct mm *e = mm_lookup(&k, &once, &made);
  int rc = STRATA_ERR_UNSUPPORTED;
  if (e->prim && e->brgemm)
    rc = mm_run(e, &g, ELEM(l->bias, 0), l->res.h ? ELEM(l->res, 0) : NULL);
  else if (made)
    strata__host_log(STRATA_LOG_INFO, "bf16 linear %lldx%lldx%lld: no fused oneDNN matmul, GEMM then bias and adds",
                     (long long)l->rows, (long long)l->out, (long long)l->in);
  if (e == &once && e->prim)
    dnnl_primitive_destroy(e->prim);
  return rc;
}

#elif defined(STRATA_HAVE_SBGEMM)

int strata__host_linear_fused(const struct strata__op *op) {
  (void)op;
  return STRATA_ERR_UNSUPPORTED;
}

static void path_choose(void) {
  strata__host_log(STRATA_LOG_INFO, "bf16 GEMM: OpenBLAS cblas_sbgemm (bf16 A and B, float32 sums)");
}

/* cblas_sbgemm writes float32 C: straight into a float32 C, else into scratch rounded once. */
static int gemm_bf16_ab(const struct strata__op *op) {
  pthread_once(&path_once, path_choose);
  const __typeof__(op->u.gemm) *g = &op->u.gemm;
  int c16 = IS_BF16(g->c);
  float *c32 = c16 ? strata__host_scratch((size_t)(g->m * g->n)) : NULL;
  if (c16 && !c32)
    return STRATA_ERR_NOMEM;
  for (int64_t i = 0; i < g->batch; i++) {
    float *c = (float *)ELEM(g->c, i * g->stride_c);
    uint16_t *c16p = (uint16_t *)ELEM(g->c, i * g->stride_c);
    int64_t ldc = g->ldc;
    if (c16) {
      if (g->beta != 0.0f)
        widen_matrix(c16p, g->ldc, g->m, g->n, c32);
      c = c32, ldc = g->n;
    }
    cblas_sbgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans, g->trans_b ? CblasTrans : CblasNoTrans,
                 (int)g->m, (int)g->n, (int)g->k, g->alpha, (const bfloat16 *)ELEM(g->a, i * g->stride_a),
                 (int)g->lda, (const bfloat16 *)ELEM(g->b, i * g->stride_b), (int)g->ldb, g->beta, c, (int)ldc);
    if (c16)
      for (int64_t r = 0; r < g->m; r++)
        strata__bf16_from_f32(c32 + r * g->n, c16p + r * g->ldc, g->n);
  }
  return STRATA_OK;
}

#else

int strata__host_linear_fused(const struct strata__op *op) {
  (void)op;
  return STRATA_ERR_UNSUPPORTED;
}

static void path_choose(void) {
  strata__host_log(STRATA_LOG_INFO,
                   "bf16 GEMM: emulated (A and B widened to float32, then sgemm): the GEMM library has no bf16 GEMM");
}

static int gemm_bf16_ab(const struct strata__op *op) {
  pthread_once(&path_once, path_choose);
  return gemm_f32_route(op);
}

#endif

int strata__host_gemm_bf16(const struct strata__op *op) {
  /* float32 A and B with a bfloat16 C: a float32 GEMM rounded once */
  return IS_BF16(op->u.gemm.a) ? gemm_bf16_ab(op) : gemm_f32_route(op);
}
