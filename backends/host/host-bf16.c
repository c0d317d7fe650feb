/* SPDX-License-Identifier: MIT */
/* host-bf16.c — the host's ops on bfloat16 operands: the float32 kernels over blocks of rows staged through float32
** scratch, and the ops that need no staging (convert, reduce, embedding, sumsq). */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <strata/comm.h>

#include "bf16.h"
#include "host.h"
#include "vecmath.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 10
#include <immintrin.h>
#define HAVE_NATIVE_BF16 1
#endif

#define F(m) ((float *)(m).h + (m).off)
#define BF(m) ((uint16_t *)(m).h + (m).off)
#define INT(m) ((int32_t *)(m).h + (m).off)
#define IS_BF16(m) ((m).dtype == STRATA_BFLOAT16)

#define CHUNK 4096   /* elements converted by one thread at a time */
#define PAR_MIN 16384 /* below this many elements threads cost more than they save (as host-ops.c) */
#define BLOCK 65536  /* elements of the widest staged operand per block: a block's scratch stays in the caches */

/*
** Float32 scratch of the calling thread (a queue's worker): grown when an op
** needs more, and kept, so that once the shapes of a training step have been
** seen no op allocates. Freed when the thread ends.
*/
struct scratch {
  float *p;
  size_t cap;
};
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static int scratch_key_ok;

static void scratch_free(void *v) {
  struct scratch *s = v;
  free(s->p);
  free(s);
}

static void scratch_init(void) { scratch_key_ok = pthread_key_create(&scratch_key, scratch_free) == 0; }

float *strata__host_scratch(size_t n) {
  pthread_once(&scratch_once, scratch_init);
  if (!scratch_key_ok)
    return NULL;
  struct scratch *s = pthread_getspecific(scratch_key);
  if (!s) {
    s = calloc(1, sizeof *s);
    if (!s || pthread_setspecific(scratch_key, s) != 0) {
      free(s);
      return NULL;
    }
  }
  if (s->cap < n) {
    void *p = strata__host_alloc(n * sizeof(float));
    if (!p)
      return NULL;
    free(s->p);
    s->p = p;
    s->cap = n;
  }
  return s->p;
}

/* Array conversions over the op's threads, in pieces of CHUNK. */
static void widen(const uint16_t *x, float *y, int64_t n) {
  int64_t pieces = (n + CHUNK - 1) / CHUNK;
  _Pragma("omp parallel for schedule(static) num_threads(strata__host_threads) if (n >= PAR_MIN)")
  for (int64_t s = 0; s < pieces; s++) {
    int64_t lo = s * CHUNK, len = n - lo < CHUNK ? n - lo : CHUNK;
    strata__bf16_to_f32(x + lo, y + lo, len);
  }
}

static void narrow(const float *x, uint16_t *y, int64_t n) {
  int64_t pieces = (n + CHUNK - 1) / CHUNK;
  _Pragma("omp parallel for schedule(static) num_threads(strata__host_threads) if (n >= PAR_MIN)")
  for (int64_t s = 0; s < pieces; s++) {
    int64_t lo = s * CHUNK, len = n - lo < CHUNK ? n - lo : CHUNK;
    strata__bf16_from_f32(x + lo, y + lo, len);
  }
}

/* ---- staging: the float32 kernels over float32 copies of the bfloat16 operands ---- */

/* How an op uses an operand: per row (read, written, both), or whole (read once; summed into over all rows). */
enum role { ROW_IN = 1, ROW_OUT = 2, ROW_INOUT = 3, WHOLE_IN = 4, WHOLE_ACC = 8 };

struct operand {
  struct strata__mem *m; /* the field in the record the kernels get */
  int64_t width;         /* elements per row; for whole operands, all of them */
  int role;
};

/*
** An op seen as `rows` independent rows: its row operands hold `width`
** elements a row, one after the other; a record of the same op over rows
** [r0, r0 + n) is the record with *rows_field = n and each row operand
** moved on by r0 rows. Whole operands are the same for every block; an
** accumulated one (a gradient summed over the rows) takes the op's
** accumulate flag for the first block and 1 after it, so the blocks sum
** into it in row order exactly as one call over all rows would.
*/
struct plan {
  int64_t rows, align;  /* blocks hold a multiple of `align` rows */
  int64_t *rows_field;
  int *acc_flag;        /* NULL when nothing accumulates */
  int64_t one;          /* rows_field of the ops that are one row (im2col, col2im) */
  int n;
  struct operand a[10];
};

#define OPND(field, w, r) (p->a[p->n++] = (struct operand){&o->u.field, (w), (r)})

/* The plan of op `o` (whose fields it points into); 0 for an op that is not staged. */
static int plan_of(struct strata__op *o, struct plan *p) {
  memset(p, 0, sizeof *p);
  p->align = 1;
  switch (o->id) {
  case STRATA__OP_GELU_FWD:
  case STRATA__OP_RELU_FWD:
    p->rows = o->u.ew.n, p->rows_field = &o->u.ew.n;
    OPND(ew.x, 1, ROW_IN), OPND(ew.y, 1, ROW_OUT);
    break;
  case STRATA__OP_GELU_BWD:
  case STRATA__OP_RELU_BWD:
    p->rows = o->u.ew.n, p->rows_field = &o->u.ew.n;
    OPND(ew.x, 1, ROW_IN), OPND(ew.dy, 1, ROW_IN), OPND(ew.dx, 1, ROW_OUT);
    break;
  case STRATA__OP_ADD:
    p->rows = o->u.ew.n, p->rows_field = &o->u.ew.n;
    OPND(ew.x, 1, ROW_IN), OPND(ew.b, 1, ROW_IN), OPND(ew.y, 1, ROW_OUT);
    break;
  case STRATA__OP_SCALE:
    p->rows = o->u.ew.n, p->rows_field = &o->u.ew.n;
    OPND(ew.x, 1, ROW_INOUT);
    break;
  case STRATA__OP_FILL:
    p->rows = o->u.ew.n, p->rows_field = &o->u.ew.n;
    OPND(ew.x, 1, ROW_OUT);
    break;
  case STRATA__OP_BIAS_ADD:
    p->rows = o->u.bias.rows, p->rows_field = &o->u.bias.rows;
    OPND(bias.y, o->u.bias.cols, ROW_INOUT), OPND(bias.bias, o->u.bias.cols, WHOLE_IN);
    break;
  case STRATA__OP_BIAS_GRAD:
    p->rows = o->u.bias.rows, p->rows_field = &o->u.bias.rows, p->acc_flag = &o->u.bias.accumulate;
    OPND(bias.y, o->u.bias.cols, ROW_IN), OPND(bias.bias, o->u.bias.cols, WHOLE_ACC);
    break;
  case STRATA__OP_LAYERNORM_FWD: {
    int64_t c = o->u.ln.cols;
    p->rows = o->u.ln.rows, p->rows_field = &o->u.ln.rows;
    OPND(ln.x, c, ROW_IN), OPND(ln.gamma, c, WHOLE_IN), OPND(ln.beta, c, WHOLE_IN), OPND(ln.y, c, ROW_OUT);
    OPND(ln.mean, 1, ROW_OUT), OPND(ln.rstd, 1, ROW_OUT);
    break;
  }
  case STRATA__OP_LAYERNORM_BWD: {
    int64_t c = o->u.ln.cols;
    p->rows = o->u.ln.rows, p->rows_field = &o->u.ln.rows, p->acc_flag = &o->u.ln.accumulate;
    OPND(ln.x, c, ROW_IN), OPND(ln.gamma, c, WHOLE_IN), OPND(ln.mean, 1, ROW_IN), OPND(ln.rstd, 1, ROW_IN);
    OPND(ln.dy, c, ROW_IN), OPND(ln.dx, c, ROW_OUT), OPND(ln.dgamma, c, WHOLE_ACC), OPND(ln.dbeta, c, WHOLE_ACC);
    break;
  }
  case STRATA__OP_SOFTMAX_FWD:
    p->rows = o->u.softmax.rows, p->rows_field = &o->u.softmax.rows;
    p->align = o->u.softmax.causal ? o->u.softmax.cols : 1; /* the mask reads a row's place in its matrix */
    OPND(softmax.x, o->u.softmax.cols, ROW_IN), OPND(softmax.y, o->u.softmax.cols, ROW_OUT);
    break;
  case STRATA__OP_SOFTMAX_BWD:
    p->rows = o->u.softmax.rows, p->rows_field = &o->u.softmax.rows;
    OPND(softmax.y, o->u.softmax.cols, ROW_IN), OPND(softmax.dy, o->u.softmax.cols, ROW_IN);
    OPND(softmax.dx, o->u.softmax.cols, ROW_OUT);
    break;
  case STRATA__OP_XENT_FWD:
    p->rows = o->u.xent.rows, p->rows_field = &o->u.xent.rows;
    OPND(xent.logits, o->u.xent.vocab, ROW_IN), OPND(xent.targets, 1, ROW_IN), OPND(xent.loss, 1, ROW_OUT);
    break;
  case STRATA__OP_XENT_BWD:
    p->rows = o->u.xent.rows, p->rows_field = &o->u.xent.rows;
    OPND(xent.logits, o->u.xent.vocab, ROW_IN), OPND(xent.targets, 1, ROW_IN);
    OPND(xent.dlogits, o->u.xent.vocab, ROW_OUT);
    break;
  case STRATA__OP_XENT_VP_MAX:
    p->rows = o->u.xvp.rows, p->rows_field = &o->u.xvp.rows;
    OPND(xvp.logits, o->u.xvp.vl, ROW_IN), OPND(xvp.rowmax, 1, ROW_OUT);
    break;
  case STRATA__OP_XENT_VP_SUMS:
    p->rows = o->u.xvp.rows, p->rows_field = &o->u.xvp.rows;
    OPND(xvp.logits, o->u.xvp.vl, ROW_IN), OPND(xvp.targets, 1, ROW_IN), OPND(xvp.rowmax, 1, ROW_IN);
    OPND(xvp.sumexp, 1, ROW_OUT), OPND(xvp.tlogit, 1, ROW_OUT);
    break;
  case STRATA__OP_XENT_VP_LOSS:
    p->rows = o->u.xvp.rows, p->rows_field = &o->u.xvp.rows;
    OPND(xvp.rowmax, 1, ROW_IN), OPND(xvp.sumexp, 1, ROW_IN), OPND(xvp.tlogit, 1, ROW_IN);
    OPND(xvp.targets, 1, ROW_IN), OPND(xvp.loss, 1, ROW_OUT);
    break;
  case STRATA__OP_XENT_VP_BWD:
    p->rows = o->u.xvp.rows, p->rows_field = &o->u.xvp.rows;
    OPND(xvp.logits, o->u.xvp.vl, ROW_IN), OPND(xvp.targets, 1, ROW_IN), OPND(xvp.rowmax, 1, ROW_IN);
    OPND(xvp.sumexp, 1, ROW_IN), OPND(xvp.dlogits, o->u.xvp.vl, ROW_OUT);
    break;
  case STRATA__OP_IM2COL:
  case STRATA__OP_COL2IM: {
    int64_t img = o->u.im2col.c * o->u.im2col.h * o->u.im2col.w;
    int64_t col = o->u.im2col.c * o->u.im2col.r * o->u.im2col.s * o->u.im2col.p * o->u.im2col.q;
    int in = o->id == STRATA__OP_IM2COL;
    p->rows = 1, p->rows_field = &p->one;
    OPND(im2col.x, img, in ? ROW_IN : ROW_OUT), OPND(im2col.col, col, in ? ROW_OUT : ROW_IN);
    break;
  }
  case STRATA__OP_MAXPOOL_FWD: {
    int64_t hw = o->u.pool.h * o->u.pool.w, pq = o->u.pool.p * o->u.pool.q;
    p->rows = o->u.pool.planes, p->rows_field = &o->u.pool.planes;
    OPND(pool.x, hw, ROW_IN), OPND(pool.y, pq, ROW_OUT), OPND(pool.idx, pq, ROW_OUT);
    break;
  }
  case STRATA__OP_MAXPOOL_BWD: {
    int64_t hw = o->u.pool.h * o->u.pool.w, pq = o->u.pool.p * o->u.pool.q;
    p->rows = o->u.pool.planes, p->rows_field = &o->u.pool.planes;
    OPND(pool.dy, pq, ROW_IN), OPND(pool.idx, pq, ROW_IN), OPND(pool.dx, hw, ROW_OUT);
    break;
  }
  case STRATA__OP_ATTENTION_FWD:
  case STRATA__OP_ATTENTION_BWD: {
    int64_t t = o->u.attn.seq, d = o->u.attn.heads * o->u.attn.head_dim;
    int64_t w = (o->u.attn.heads + 2 * o->u.attn.kv_heads) * o->u.attn.head_dim; /* a row of qkv: q | k | v */
    int fwd = o->id == STRATA__OP_ATTENTION_FWD;
    p->rows = o->u.attn.batch, p->rows_field = &o->u.attn.batch;
    OPND(attn.qkv, t * w, ROW_IN), OPND(attn.out, t * d, fwd ? ROW_OUT : ROW_IN);
    OPND(attn.lse, t * o->u.attn.heads, fwd ? ROW_OUT : ROW_IN);
    if (!fwd)
      OPND(attn.dout, t * d, ROW_IN), OPND(attn.dqkv, t * w, ROW_OUT);
    break;
  }
  case STRATA__OP_RMSNORM_FWD: {
    int64_t c = o->u.rms.cols;
    p->rows = o->u.rms.rows, p->rows_field = &o->u.rms.rows;
    OPND(rms.x, c, ROW_IN), OPND(rms.w, c, WHOLE_IN), OPND(rms.y, c, ROW_OUT), OPND(rms.rstd, 1, ROW_OUT);
    break;
  }
  case STRATA__OP_RMSNORM_BWD: {
    int64_t c = o->u.rms.cols;
    p->rows = o->u.rms.rows, p->rows_field = &o->u.rms.rows, p->acc_flag = &o->u.rms.accumulate;
    OPND(rms.x, c, ROW_IN), OPND(rms.w, c, WHOLE_IN), OPND(rms.rstd, 1, ROW_IN), OPND(rms.dy, c, ROW_IN);
    OPND(rms.dx, c, ROW_OUT), OPND(rms.dw, c, WHOLE_ACC);
    break;
  }
  case STRATA__OP_SWIGLU_FWD:
    p->rows = o->u.swiglu.rows, p->rows_field = &o->u.swiglu.rows;
    OPND(swiglu.gu, 2 * o->u.swiglu.cols, ROW_IN), OPND(swiglu.h, o->u.swiglu.cols, ROW_OUT);
    break;
  case STRATA__OP_SWIGLU_BWD:
    p->rows = o->u.swiglu.rows, p->rows_field = &o->u.swiglu.rows;
    OPND(swiglu.gu, 2 * o->u.swiglu.cols, ROW_IN), OPND(swiglu.dh, o->u.swiglu.cols, ROW_IN);
    OPND(swiglu.dgu, 2 * o->u.swiglu.cols, ROW_OUT);
    break;
  default:
    return 0;
  }
  return 1;
}

/* One block of rows [r0, r0 + nr) of a staged op: the bfloat16 row operands widened into `rows` (their places in
** `at`), the float32 kernel run on `o` (whose operands `p` points at), the written ones rounded back. `par`: the
** conversions spread over the op's threads (0 inside a region that already has them). */
static int run_block(struct strata__op *o, struct plan *p, const struct strata__mem *orig, const size_t *at,
                     float *rows, int64_t r0, int64_t nr, int par) {
  *p->rows_field = nr;
  for (int i = 0; i < p->n; i++) {
    if (p->a[i].role > ROW_INOUT)
      continue;
    if (!IS_BF16(orig[i])) {
      *p->a[i].m = orig[i];
      p->a[i].m->off += (size_t)(r0 * p->a[i].width);
      continue;
    }
    *p->a[i].m = (struct strata__mem){rows + at[i], 0, STRATA_FLOAT32};
    if (p->a[i].role & ROW_IN) {
      if (par)
        widen(BF(orig[i]) + r0 * p->a[i].width, rows + at[i], nr * p->a[i].width);
      else
        strata__bf16_to_f32(BF(orig[i]) + r0 * p->a[i].width, rows + at[i], nr * p->a[i].width);
    }
  }
  int rc = strata__host_op_run_f32(o);
  if (rc)
    return rc;
  for (int i = 0; i < p->n; i++)
    if (IS_BF16(orig[i]) && p->a[i].role <= ROW_INOUT && (p->a[i].role & ROW_OUT)) {
      if (par)
        narrow(rows + at[i], BF(orig[i]) + r0 * p->a[i].width, nr * p->a[i].width);
      else
        strata__bf16_from_f32(rows + at[i], BF(orig[i]) + r0 * p->a[i].width, nr * p->a[i].width);
    }
  return STRATA_OK;
}

/*
** Run `op` through the float32 kernel of its id, a block of rows at a time:
** each bfloat16 operand's block widened into scratch before the kernel,
** and rounded back after it where the op writes it. float32 and index
** operands are used in place. Every row is computed by the float32 code on
** exactly the widened inputs, so the result is the float32 op's on them,
** rounded once.
**
** An op whose rows are independent (nothing summed over them) and that
** spans several blocks runs them in one parallel region: each thread takes
** whole blocks, widening, computing (the kernel's own region nested, so on
** that thread alone) and rounding them in its own scratch — one fork and
** join for the op rather than three a block. A row is computed by the same
** code either way, so the bits do not change. An op that sums over its rows
** runs its blocks in order, each one threaded as its kernel is.
*/
static int staged(const struct strata__op *op) {
  struct strata__op o = *op;
  struct plan p;
  if (!plan_of(&o, &p))
    return STRATA_ERR_UNSUPPORTED;
  o.dtypes = 0;
  struct strata__mem orig[10];
  int64_t widest = 0;
  for (int i = 0; i < p.n; i++) {
    orig[i] = *p.a[i].m;
    if (IS_BF16(orig[i]) && p.a[i].role <= ROW_INOUT && p.a[i].width > widest)
      widest = p.a[i].width;
  }
  int64_t per = p.rows;
  if (widest) {
    per = BLOCK / widest / p.align * p.align;
    per = per < p.align ? p.align : per > p.rows ? p.rows : per;
  }
  /* the scratch: the whole operands first, then one block of each row operand (from `row0`) */
  size_t at[10], whole = 0, need = 0;
  for (int i = 0; i < p.n; i++)
    if (IS_BF16(orig[i]) && p.a[i].role > ROW_INOUT) {
      at[i] = whole;
      whole += ((size_t)p.a[i].width + 15) & ~(size_t)15;
    }
  for (int i = 0; i < p.n; i++)
    if (IS_BF16(orig[i]) && p.a[i].role <= ROW_INOUT) {
      at[i] = need;
      need += ((size_t)(per * p.a[i].width) + 15) & ~(size_t)15;
    }
  float *s = whole + need ? strata__host_scratch(whole + need) : NULL;
  if (whole + need && !s)
    return STRATA_ERR_NOMEM;
  for (int i = 0; i < p.n; i++)
    if (IS_BF16(orig[i]) && p.a[i].role > ROW_INOUT) {
      if (p.a[i].role == WHOLE_IN || *p.acc_flag)
        widen(BF(orig[i]), s + at[i], p.a[i].width);
      *p.a[i].m = (struct strata__mem){s + at[i], 0, STRATA_FLOAT32};
    }
  int64_t blocks = (p.rows + per - 1) / per;
  if (!p.acc_flag && blocks > 1 && strata__host_threads > 1 && p.rows * widest >= PAR_MIN) {
    int rc = STRATA_OK;
    _Pragma("omp parallel num_threads(strata__host_threads)") {
      /* this thread's copy of the record, its plan pointing into it; the master's row scratch follows the whole
      ** operands, another thread's is its own */
      struct strata__op ot = o;
      struct plan pt;
      plan_of(&ot, &pt);
      for (int i = 0; i < pt.n; i++)
        if (pt.a[i].role > ROW_INOUT)
          *pt.a[i].m = *p.a[i].m;
#ifdef _OPENMP
      float *rows = omp_get_thread_num() == 0 ? s + whole : need ? strata__host_scratch(need) : NULL;
#else
      float *rows = s + whole;
#endif
      _Pragma("omp for schedule(static)")
      for (int64_t b = 0; b < blocks; b++) {
        int64_t r0 = b * per, nr = p.rows - r0 < per ? p.rows - r0 : per;
        int brc = need && !rows ? STRATA_ERR_NOMEM : run_block(&ot, &pt, orig, at, rows, r0, nr, 0);
        if (brc) {
          _Pragma("omp critical(strata_host_staged)")
          rc = rc ? rc : brc;
        }
      }
    }
    return rc;
  }
  for (int64_t r0 = 0; r0 < p.rows; r0 += per) {
    int rc = run_block(&o, &p, orig, at, s + whole, r0, p.rows - r0 < per ? p.rows - r0 : per, 1);
    if (rc)
      return rc;
    if (p.acc_flag)
      *p.acc_flag = 1;
  }
  for (int i = 0; i < p.n; i++)
    if (IS_BF16(orig[i]) && p.a[i].role == WHOLE_ACC)
      narrow(s + at[i], BF(orig[i]), p.a[i].width);
  return STRATA_OK;
}

/* ---- ops that need no staging ---- */

/* y = x in y's type; x and y are the same memory (same type) or disjoint. */
static int convert(const struct strata__op *o) {
  struct strata__mem x = o->u.ew.x, y = o->u.ew.y;
  int64_t n = o->u.ew.n;
  if (x.dtype == y.dtype) {
    size_t size = IS_BF16(x) ? 2 : 4;
    const char *xs = (const char *)x.h + x.off * size;
    char *ys = (char *)y.h + y.off * size;
    if (xs != ys)
      memcpy(ys, xs, (size_t)n * size);
  } else if (IS_BF16(x)) {
    widen(BF(x), F(y), n);
  } else {
    narrow(F(x), BF(y), n);
  }
  return STRATA_OK;
}

/* y = a (op) b over bfloat16 (record dtype STRATA_BFLOAT16: all three): float32 arithmetic, rounded once. */
static int reduce(const struct strata__op *o) {
  const uint16_t *a = BF(o->u.reduce.a), *b = BF(o->u.reduce.b);
  uint16_t *y = BF(o->u.reduce.y);
  int64_t n = o->u.reduce.n, pieces = (n + CHUNK - 1) / CHUNK;
  int max = o->u.reduce.op == STRATA_MAX;
  _Pragma("omp parallel for schedule(static) num_threads(strata__host_threads) if (n >= PAR_MIN)")
  for (int64_t s = 0; s < pieces; s++) {
    int64_t lo = s * CHUNK, len = n - lo < CHUNK ? n - lo : CHUNK;
    float fa[CHUNK], fb[CHUNK];
    strata__bf16_to_f32(a + lo, fa, len);
    strata__bf16_to_f32(b + lo, fb, len);
    if (max)
      for (int64_t i = 0; i < len; i++)
        fa[i] = fmaxf(fa[i], fb[i]);
    else
      for (int64_t i = 0; i < len; i++)
        fa[i] += fb[i];
    strata__bf16_from_f32(fa, y + lo, len);
  }
  return STRATA_OK;
}

/* out[i] = table[tokens[i]], each row converted to out's type (or copied). */
static int embedding_fwd(const struct strata__op *o) {
  const int32_t *tok = INT(o->u.emb.tokens);
  struct strata__mem table = o->u.emb.table, out = o->u.emb.out;
  int64_t dim = o->u.emb.dim, n = o->u.emb.n, par_n = n * dim;
  size_t osize = IS_BF16(out) ? 2 : 4;
  _Pragma("omp parallel for schedule(static) num_threads(strata__host_threads) if (par_n >= PAR_MIN)")
  for (int64_t i = 0; i < n; i++) {
    int32_t t = tok[i];
    int64_t from = (int64_t)t * dim, to = i * dim;
    if (t < 0 || t >= o->u.emb.vocab)
      memset((char *)out.h + (out.off + (size_t)to) * osize, 0, (size_t)dim * osize);
    else if (table.dtype == out.dtype)
      memcpy((char *)out.h + (out.off + (size_t)to) * osize, (const char *)table.h + (table.off + (size_t)from) * osize,
             (size_t)dim * osize);
    else if (IS_BF16(table))
      strata__bf16_to_f32(BF(table) + from, F(out) + to, dim);
    else
      strata__bf16_from_f32(F(table) + from, BF(out) + to, dim);
  }
  return STRATA_OK;
}

struct token_at {
  int32_t t;
  int64_t i;
};

static int token_order(const void *pa, const void *pb) {
  const struct token_at *a = pa, *b = pb;
  return a->t != b->t ? (a->t > b->t) - (a->t < b->t) : (a->i > b->i) - (a->i < b->i);
}

/*
** dtable (+)= scatter of dout, each table row summed in token order as the
** float32 op sums it. A float32 table takes the widened rows in place; a
** bfloat16 one is summed a row at a time in float32 (the tokens sorted by
** (id, position)) and rounded once.
*/
static int embedding_bwd(const struct strata__op *o) {
  const int32_t *tok = INT(o->u.emb.tokens);
  struct strata__mem dout = o->u.emb.dout, dtable = o->u.emb.dtable;
  int64_t dim = o->u.emb.dim, n = o->u.emb.n, vocab = o->u.emb.vocab;
  if (!IS_BF16(dtable)) {
    float *dt = F(dtable);
    if (!o->u.emb.accumulate)
      memset(dt, 0, (size_t)(vocab * dim) * sizeof *dt);
    for (int64_t i = 0; i < n; i++) {
      int32_t t = tok[i];
      if (t < 0 || t >= vocab)
        continue;
      float *row = dt + (int64_t)t * dim;
      if (IS_BF16(dout)) {
        const uint16_t *src = BF(dout) + i * dim;
        for (int64_t d = 0; d < dim; d++)
          row[d] += bf16_widen(src[d]);
      } else {
        const float *src = F(dout) + i * dim;
        for (int64_t d = 0; d < dim; d++)
          row[d] += src[d];
      }
    }
    return STRATA_OK;
  }
  size_t pairs = ((size_t)n * sizeof(struct token_at) + sizeof(float) - 1) / sizeof(float);
  float *s = strata__host_scratch(pairs + (size_t)dim);
  if (!s)
    return STRATA_ERR_NOMEM;
  struct token_at *order = (struct token_at *)(void *)s;
  float *acc = s + pairs;
  int64_t m = 0;
  for (int64_t i = 0; i < n; i++)
    if (tok[i] >= 0 && tok[i] < vocab)
      order[m++] = (struct token_at){tok[i], i};
  qsort(order, (size_t)m, sizeof *order, token_order);
  uint16_t *dt = BF(dtable);
  if (!o->u.emb.accumulate)
    memset(dt, 0, (size_t)(vocab * dim) * sizeof *dt);
  for (int64_t j = 0; j < m;) {
    int32_t t = order[j].t;
    uint16_t *row = dt + (int64_t)t * dim;
    if (o->u.emb.accumulate)
      strata__bf16_to_f32(row, acc, dim);
    else
      memset(acc, 0, (size_t)dim * sizeof *acc);
    for (; j < m && order[j].t == t; j++) {
      int64_t i = order[j].i;
      if (IS_BF16(dout)) {
        const uint16_t *src = BF(dout) + i * dim;
        for (int64_t d = 0; d < dim; d++)
          acc[d] += bf16_widen(src[d]);
      } else {
        const float *src = F(dout) + i * dim;
        for (int64_t d = 0; d < dim; d++)
          acc[d] += src[d];
      }
    }
    strata__bf16_from_f32(acc, row, dim);
  }
  return STRATA_OK;
}

/* The sum of x^2 in double over the widened x, in order (as the float32 op). */
static double sum_squares(const uint16_t *x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) {
    float v = bf16_widen(x[i]);
    s += (double)v * v;
  }
  return s;
}

/* out[0] (+)= sum of x^2 over the widened x. out is float32. */
static int sumsq(const struct strata__op *o) {
  double s = sum_squares(BF(o->u.sumsq.x), o->u.sumsq.n);
  float *out = F(o->u.sumsq.out);
  out[0] = (o->u.sumsq.accumulate ? out[0] : 0.0f) + (float)s;
  return STRATA_OK;
}

/* Each span's sum as sumsq's, the spans shared out between the threads (as the float32 op). */
static int sumsq_spans(const struct strata__op *o) {
  const uint16_t *x = BF(o->u.spans.x);
  const int64_t *bd = o->u.spans.bounds;
  float *out = F(o->u.spans.out);
  int64_t count = o->u.spans.count, par_n = 0;
  for (int64_t t = 0; t < count; t++)
    par_n += bd[2 * t + 1];
  _Pragma("omp parallel for schedule(dynamic) num_threads(strata__host_threads) if (par_n >= PAR_MIN)")
  for (int64_t t = 0; t < count; t++)
    out[t] = 0.0f + (float)sum_squares(x + bd[2 * t], bd[2 * t + 1]);
  return STRATA_OK;
}

/* ---- ops summed over their rows, reading bfloat16 in place ---- */

#define COLS_SPAN 256 /* columns per piece of a column sum (as host-ops.c) */
#define ROWS_SPAN 16  /* rows of a piece widened at a time */

/* Element i of a float32 or bfloat16 operand, as float32. */
static inline float elem(struct strata__mem m, int64_t i) { return IS_BF16(m) ? bf16_widen(BF(m)[i]) : F(m)[i]; }

/* Rows [r0, r0 + nr) and columns [c0, c0 + w) of a matrix of `cols` columns (float32 or bfloat16) into buf as
** float32, row stride w. */
static void widen_piece(struct strata__mem m, int64_t cols, int64_t r0, int64_t nr, int64_t c0, int64_t w,
                        float *buf) {
  for (int64_t r = 0; r < nr; r++) {
    size_t at = (size_t)((r0 + r) * cols + c0);
    if (IS_BF16(m))
      strata__bf16_to_f32(BF(m) + at, buf + r * w, w);
    else
      memcpy(buf + r * w, F(m) + at, (size_t)w * sizeof(float));
  }
}

#ifdef HAVE_NATIVE_BF16
#define NATIVE __attribute__((target("avx512bf16,avx512f,avx512vl,avx512bw")))
#define NATIVE_FMA __attribute__((target("avx512bf16,avx512f,avx512vl,avx512bw,fma")))

/* 16 bfloat16 widened (exactly) to float32; masked-off lanes 0. */
NATIVE static inline __m512 widen16(__mmask16 k, const uint16_t *x) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, x)), 16));
}

/* 16 float32 rounded as strata__bf16_from_f32 rounds them (vcvtneps2bf16: to nearest even). */
NATIVE static inline void narrow16(__mmask16 k, __m512 x, uint16_t *y) {
  _mm256_mask_storeu_epi16((void *)y, k, (__m256i)_mm512_cvtneps_pbh(x));
}

static inline __mmask16 mask16(int64_t left) {
  return left >= 16 ? (__mmask16)0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
}

#define SWEEP 128 /* columns summed in registers over all the rows at a time (8 vectors) */

/*
** Software prefetches where the CPU's own prefetchers fall behind (measured on
** the 512x8 GPT's bf16 step, AMX Xeon, 2 cores): a column sweep steps down
** rows thousands of bytes apart, one 256-byte piece each, so the rows
** PF_ROWS ahead are asked for (bias and layernorm gradients: 2.3 and 4.2 ms a
** step before, 1.95 and 3.8 after); a GELU lookup's gathers leave the loads
** of its inputs unprefetched, so the inputs PF_GELU elements ahead are
** (forward and backward: 8.2 and 3.1 ms a step before, 4.3 and 1.9 after).
** A prefetch changes no result, and one past an array's end is harmless (it
** never faults).
*/
#define PF_ROWS 8
#define PF_GELU 2048

/* The SWEEP columns at p (bfloat16) into the L1 cache. */
static inline void prefetch_sweep(const uint16_t *p) {
  for (int l = 0; l < SWEEP; l += 32)
    _mm_prefetch((const char *)(p + l), _MM_HINT_T0);
}

/*
** db[0, w) (+)= the column sums of `rows` rows of w bfloat16 at dy (row
** stride ld), each column over the rows in order: host_col_sums's float32
** additions on the exactly widened values, so its bits, in registers and
** without the widened copy. db is set beforehand (0 or the sums so far).
*/
NATIVE static void col_sums_bf16(const uint16_t *dy, int64_t ld, float *db, int64_t rows, int64_t w) {
  for (int64_t c0 = 0; c0 < w; c0 += SWEEP) {
    __mmask16 k[SWEEP / 16];
    __m512 s[SWEEP / 16];
    _Pragma("GCC unroll 8") for (int v = 0; v < SWEEP / 16; v++) {
      k[v] = mask16(w - c0 - 16 * v);
      s[v] = _mm512_maskz_loadu_ps(k[v], db + c0 + 16 * v);
    }
    for (int64_t r = 0; r < rows; r++) {
      const uint16_t *dr = dy + r * ld + c0;
      if (r + PF_ROWS < rows)
        prefetch_sweep(dr + PF_ROWS * ld);
      _Pragma("GCC unroll 8") for (int v = 0; v < SWEEP / 16; v++)
        s[v] = _mm512_add_ps(s[v], widen16(k[v], dr + 16 * v));
    }
    _Pragma("GCC unroll 8") for (int v = 0; v < SWEEP / 16; v++)
      _mm512_mask_storeu_ps(db + c0 + 16 * v, k[v], s[v]);
  }
}

/*
** dgamma, dbeta (+)= over `rows` rows of w columns of bfloat16 x and dy (row
** stride ld; mean, rstd one a row, float32 or bfloat16), each column over
** the rows in order: host_ln_param_grads's arithmetic as its AVX-512 clone
** computes it (dg += d ((x - mean) rstd) contracted to one fused
** multiply-add, db += d), so its bits, in registers. dg, db set beforehand.
*/
NATIVE_FMA static void ln_param_grads_bf16(const uint16_t *x, const uint16_t *dy, int64_t ld, struct strata__mem mean,
                                           struct strata__mem rstd, float *dg, float *db, int64_t rows, int64_t w) {
  for (int64_t c0 = 0; c0 < w; c0 += SWEEP) {
    __mmask16 k[SWEEP / 16];
    __m512 g[SWEEP / 16], b[SWEEP / 16];
    _Pragma("GCC unroll 8") for (int v = 0; v < SWEEP / 16; v++) {
      k[v] = mask16(w - c0 - 16 * v);
      g[v] = _mm512_maskz_loadu_ps(k[v], dg + c0 + 16 * v);
      b[v] = _mm512_maskz_loadu_ps(k[v], db + c0 + 16 * v);
    }
    for (int64_t r = 0; r < rows; r++) {
      const uint16_t *xr = x + r * ld + c0, *dr = dy + r * ld + c0;
      if (r + PF_ROWS < rows) {
        prefetch_sweep(xr + PF_ROWS * ld);
        prefetch_sweep(dr + PF_ROWS * ld);
      }
      const __m512 mu = _mm512_set1_ps(elem(mean, r)), rs = _mm512_set1_ps(elem(rstd, r));
      _Pragma("GCC unroll 8") for (int v = 0; v < SWEEP / 16; v++) {
        __m512 d = widen16(k[v], dr + 16 * v), xh = _mm512_mul_ps(_mm512_sub_ps(widen16(k[v], xr + 16 * v), mu), rs);
        g[v] = _mm512_fmadd_ps(d, xh, g[v]);
        b[v] = _mm512_add_ps(b[v], d);
      }
    }
    _Pragma("GCC unroll 8") for (int v = 0; v < SWEEP / 16; v++) {
      _mm512_mask_storeu_ps(dg + c0 + 16 * v, k[v], g[v]);
      _mm512_mask_storeu_ps(db + c0 + 16 * v, k[v], b[v]);
    }
  }
}
#endif

/*
** db (+)= the column sums of bfloat16 dy into float32 db: each piece of
** columns summed in registers (AVX-512 BF16: col_sums_bf16), else widened a
** few rows at a time and summed by the float32 op's kernel, over the rows in
** order — the staged op's bits, in one region and without a float32 copy of
** dy.
*/
static int bias_grad_native(const struct strata__op *o) {
  const struct strata__mem dy = o->u.bias.y;
  float *db = F(o->u.bias.bias);
  int64_t cols = o->u.bias.cols, rows = o->u.bias.rows, par_n = rows * cols;
  int64_t pieces = (cols + COLS_SPAN - 1) / COLS_SPAN;
  int acc = o->u.bias.accumulate, direct = 0;
#ifdef HAVE_NATIVE_BF16
  direct = IS_BF16(dy) && strata__bf16_path(NULL);
#endif
  _Pragma("omp parallel for schedule(static) num_threads(strata__host_threads) if (par_n >= PAR_MIN)")
  for (int64_t i = 0; i < pieces; i++) {
    int64_t c0 = i * COLS_SPAN, w = cols - c0 < COLS_SPAN ? cols - c0 : COLS_SPAN;
    float buf[ROWS_SPAN * COLS_SPAN];
    if (!acc)
      memset(db + c0, 0, (size_t)w * sizeof *db);
#ifdef HAVE_NATIVE_BF16
    if (direct) {
      col_sums_bf16(BF(dy) + c0, cols, db + c0, rows, w);
      continue;
    }
#endif
    for (int64_t r0 = 0; r0 < rows; r0 += ROWS_SPAN) {
      int64_t nr = rows - r0 < ROWS_SPAN ? rows - r0 : ROWS_SPAN;
      widen_piece(dy, cols, r0, nr, c0, w, buf);
      strata__host_col_sums(buf, w, db + c0, nr, w, 1);
    }
  }
  return STRATA_OK;
}

#ifdef HAVE_NATIVE_BF16
/*
** Whether the float32 op's kernel (strata__host_ln_param_grads, as this build
** compiled the clone this CPU runs) contracts dg += d ((x - mean) rstd) into
** one fused multiply-add, as ln_param_grads_bf16 does: an optimised build's
** AVX-512 clone does, an -O1 build's (CI's sanitizer build) does not. Asked
** once, of the kernel itself, on values where the two differ: d = xh = 1 + 2^-12,
** dg = -(1 + 2^-11) gives 2^-24 fused, 0 rounded twice. Where it does not,
** the bfloat16 path widens and calls that kernel, so the bits stay the op's.
*/
static int f32_kernel_fuses(void) {
  static int known = -1;
  int k = __atomic_load_n(&known, __ATOMIC_ACQUIRE);
  if (k >= 0)
    return k;
  float x[16], dy[16], dg[16], db[16], mu = 0.0f, rs = 1.0f;
  for (int c = 0; c < 16; c++) {
    x[c] = dy[c] = 1.0f + 0x1p-12f;
    dg[c] = -(1.0f + 0x1p-11f);
    db[c] = 0.0f;
  }
  strata__host_ln_param_grads(x, dy, 16, &mu, &rs, dg, db, 1, 16, 1);
  k = dg[0] != 0.0f;
  __atomic_store_n(&known, k, __ATOMIC_RELEASE);
  return k;
}
#endif

/* One float32 or bfloat16 element set to f (rounded once where bfloat16, as the staged op's conversion rounds). */
static inline void put(struct strata__mem m, int64_t i, float f) {
  if (IS_BF16(m))
    strata__bf16_from_f32(&f, BF(m) + i, 1);
  else
    F(m)[i] = f;
}

/* n floats of a team thread's own for a row loop: thread 0's past what the caller already holds in its scratch
** (`own`, in the calling thread's), the others' their own scratch; NULL when that cannot be had. */
static float *team_scratch(float *own, size_t n) {
#ifdef _OPENMP
  return omp_get_thread_num() == 0 ? own : strata__host_scratch(n);
#else
  (void)n;
  return own;
#endif
}

/*
** Layernorm's forward with any operands float32 or bfloat16, read and
** written in place a row at a time: the row widened into the thread's
** scratch, the float32 op's kernel run on it, y (and mean, rstd) rounded
** once — the staged op's bits, with each row in the L1 cache rather than
** blocks of rows through the L2 one, and no staging copies. y may be x.
*/
static int layernorm_fwd_native(const struct strata__op *o) {
  const struct strata__mem x = o->u.ln.x, gm = o->u.ln.gamma, bt = o->u.ln.beta, y = o->u.ln.y;
  int64_t cols = o->u.ln.cols, rows = o->u.ln.rows, par_n = rows * cols;
  /* the master's scratch: gamma and beta as float32, then its two rows; another thread's: its own two rows */
  float *s = strata__host_scratch((size_t)(4 * cols));
  if (!s)
    return STRATA_ERR_NOMEM;
  const float *g = IS_BF16(gm) ? s : F(gm), *b = IS_BF16(bt) ? s + cols : F(bt);
  if (IS_BF16(gm))
    strata__bf16_to_f32(BF(gm), s, cols);
  if (IS_BF16(bt))
    strata__bf16_to_f32(BF(bt), s + cols, cols);
  int rc = STRATA_OK;
  _Pragma("omp parallel num_threads(strata__host_threads) if (par_n >= PAR_MIN)") {
    float *w = team_scratch(s + 2 * cols, (size_t)(2 * cols));
    if (!w) {
      _Pragma("omp critical(strata_host_ln)")
      rc = STRATA_ERR_NOMEM;
    }
    _Pragma("omp for schedule(static)")
    for (int64_t r = 0; r < rows; r++) {
      if (!w)
        continue;
      float mu, rs, *xr = w, *yr = IS_BF16(y) ? w + cols : F(y) + r * cols;
      widen_piece(x, cols, r, 1, 0, cols, xr);
      strata__host_layernorm_row(xr, g, b, yr, cols, o->u.ln.eps, &mu, &rs);
      if (IS_BF16(y))
        strata__bf16_from_f32(yr, BF(y) + r * cols, cols);
      put(o->u.ln.mean, r, mu);
      put(o->u.ln.rstd, r, rs);
    }
  }
  return rc;
}

/*
** Layernorm's backward with float32 dgamma and dbeta, the other operands
** float32 or bfloat16, read in place: the parameter gradients by pieces of
** columns (rows in order; in registers where x and dy are bfloat16 on AVX-512
** BF16: ln_param_grads_bf16), then dx a row at a time from widened rows, each
** by the float32 op's kernel — the staged op's bits. dx may be dy.
*/
static int layernorm_bwd_native(const struct strata__op *o) {
  const struct strata__mem x = o->u.ln.x, gm = o->u.ln.gamma, mean = o->u.ln.mean, rstd = o->u.ln.rstd;
  const struct strata__mem dy = o->u.ln.dy, dx = o->u.ln.dx;
  float *dg = F(o->u.ln.dgamma), *db = F(o->u.ln.dbeta);
  int64_t cols = o->u.ln.cols, rows = o->u.ln.rows, par_n = rows * cols;
  int64_t pieces = (cols + COLS_SPAN - 1) / COLS_SPAN;
  int acc = o->u.ln.accumulate, direct = 0;
#ifdef HAVE_NATIVE_BF16
  direct = IS_BF16(x) && IS_BF16(dy) && strata__bf16_path(NULL) && f32_kernel_fuses();
#endif
  _Pragma("omp parallel for schedule(static) num_threads(strata__host_threads) if (par_n >= PAR_MIN)")
  for (int64_t i = 0; i < pieces; i++) {
    int64_t c0 = i * COLS_SPAN, w = cols - c0 < COLS_SPAN ? cols - c0 : COLS_SPAN;
    float xb[ROWS_SPAN * COLS_SPAN], yb[ROWS_SPAN * COLS_SPAN], mu[ROWS_SPAN], rs[ROWS_SPAN];
    if (!acc) {
      memset(dg + c0, 0, (size_t)w * sizeof *dg);
      memset(db + c0, 0, (size_t)w * sizeof *db);
    }
#ifdef HAVE_NATIVE_BF16
    if (direct) {
      ln_param_grads_bf16(BF(x) + c0, BF(dy) + c0, cols, mean, rstd, dg + c0, db + c0, rows, w);
      continue;
    }
#endif
    for (int64_t r0 = 0; r0 < rows; r0 += ROWS_SPAN) {
      int64_t nr = rows - r0 < ROWS_SPAN ? rows - r0 : ROWS_SPAN;
      widen_piece(x, cols, r0, nr, c0, w, xb);
      widen_piece(dy, cols, r0, nr, c0, w, yb);
      for (int64_t r = 0; r < nr; r++)
        mu[r] = elem(mean, r0 + r), rs[r] = elem(rstd, r0 + r);
      strata__host_ln_param_grads(xb, yb, w, mu, rs, dg + c0, db + c0, nr, w, 1);
    }
  }
  /* the master's scratch: gamma as float32, then its three rows; another thread's: its own three rows */
  size_t row3 = (size_t)(3 * cols);
  float *s = strata__host_scratch((size_t)cols + row3);
  if (!s)
    return STRATA_ERR_NOMEM;
  const float *g = s;
  if (IS_BF16(gm))
    strata__bf16_to_f32(BF(gm), s, cols);
  else
    g = F(gm);
  int rc = STRATA_OK;
  _Pragma("omp parallel num_threads(strata__host_threads) if (par_n >= PAR_MIN)") {
    float *b = team_scratch(s + cols, row3);
    if (!b) {
      _Pragma("omp critical(strata_host_ln)")
      rc = STRATA_ERR_NOMEM;
    }
    _Pragma("omp for schedule(static)")
    for (int64_t r = 0; r < rows; r++) {
      if (!b)
        continue;
      float *xr = b, *dyr = b + cols, *dxr = b + 2 * cols;
      widen_piece(x, cols, r, 1, 0, cols, xr);
      widen_piece(dy, cols, r, 1, 0, cols, dyr);
      strata__host_ln_dx_row(xr, dyr, g, dxr, cols, elem(mean, r), elem(rstd, r));
      if (IS_BF16(dx))
        strata__bf16_from_f32(dxr, BF(dx) + r * cols, cols);
      else
        memcpy(F(dx) + r * cols, dxr, (size_t)cols * sizeof(float));
    }
  }
  return rc;
}

/* ---- GELU on bfloat16 through tables of the float32 kernels' results ---- */

/*
** A bfloat16 input has 65536 values, so the float32 kernels are run once
** on every one of them (in a process's first bfloat16 GELU) and their
** results kept: gelu_tab16[h], GELU_FWD of h widened, rounded as the
** staged op rounds it; gelu_tab[65536 + h], GELU_BWD of h widened with
** dy = 1, which is the factor the kernel multiplies dy by (dy * (...): one
** product, nothing added to it, so dy times the factor is the kernel's
** float for any dy), rounded after the product. A staged block gives the
** kernel's float on the widened values and rounds it once; so does a
** lookup: the bits are the staged op's. 384 KiB, in the caches while a
** GELU runs.
*/
static float *gelu_tab; /* [2][65536]: the forward's floats, the backward's factors; NULL when making them failed */
static uint16_t gelu_tab16[65536 + 2]; /* the forward, rounded (2 more: a 4-byte gather of the last) */
static pthread_once_t gelu_once = PTHREAD_ONCE_INIT;

static void gelu_tab_make(void) {
  float *t = NULL, *in = malloc(65536 * 2 * sizeof *in);
  if (!in || posix_memalign((void **)&t, 64, 2 * 65536 * sizeof *t) != 0) {
    free(in);
    return;
  }
  float *ones = in + 65536;
  for (uint32_t h = 0; h < 65536; h++)
    in[h] = bf16_widen((uint16_t)h), ones[h] = 1.0f;
  struct strata__op f = {.id = STRATA__OP_GELU_FWD}, b = {.id = STRATA__OP_GELU_BWD};
  f.u.ew.n = b.u.ew.n = 65536;
  f.u.ew.x = b.u.ew.x = (struct strata__mem){in, 0, STRATA_FLOAT32};
  f.u.ew.y = (struct strata__mem){t, 0, STRATA_FLOAT32};
  b.u.ew.dy = (struct strata__mem){ones, 0, STRATA_FLOAT32};
  b.u.ew.dx = (struct strata__mem){t + 65536, 0, STRATA_FLOAT32};
  if (strata__host_op_run_f32(&f) == STRATA_OK && strata__host_op_run_f32(&b) == STRATA_OK) {
    strata__bf16_from_f32(t, gelu_tab16, 65536);
    gelu_tab = t;
  } else {
    free(t);
  }
  free(in);
}

/* y = GELU(x) over n bfloat16 by lookup (x may be y); dx = GELU'(x) dy likewise (any of them the same memory). */
static void gelu_fwd_tab(const uint16_t *tab, const uint16_t *x, uint16_t *y, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    y[i] = tab[x[i]];
}

static HOST_SIMD void gelu_bwd_tab(const float *tab, const uint16_t *x, const uint16_t *dy, uint16_t *dx, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++)
    dx[i] = bf16_round(bf16_widen(dy[i]) * tab[x[i]]);
}

/* ---- elementwise ops on bfloat16 in registers (AVX-512 BF16): the staged op's bits without its scratch ---- */

#ifdef HAVE_NATIVE_BF16

/* y = a + b over n bfloat16 (any of them the same memory): the float32 sum of the widened values, rounded once. */
NATIVE static void add_span(const uint16_t *a, const uint16_t *b, uint16_t *y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 k = mask16(n - i);
    narrow16(k, _mm512_add_ps(widen16(k, a + i), widen16(k, b + i)), y + i);
  }
}

/* y[r][c] = y[r][c] + b[c] over rows of bfloat16 y, b float32 or bfloat16 (b16 non-NULL). */
NATIVE static void bias_span(uint16_t *y, const float *b, const uint16_t *b16, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; r++) {
    uint16_t *yr = y + r * cols;
    for (int64_t c = 0; c < cols; c += 16) {
      __mmask16 k = mask16(cols - c);
      __m512 bv = b16 ? widen16(k, b16 + c) : _mm512_maskz_loadu_ps(k, b + c);
      narrow16(k, _mm512_add_ps(widen16(k, yr + c), bv), yr + c);
    }
  }
}

/* ADD with every operand bfloat16, BIAS_ADD with a bfloat16 y: in registers on a CPU with AVX-512 BF16 (the staged
** op's arithmetic: exact widening, the float32 addition, one rounding to nearest even); STRATA_ERR_UNSUPPORTED
** elsewhere (the caller stages it). */
static int elementwise_native(const struct strata__op *o) {
  if (!strata__bf16_path(NULL))
    return STRATA_ERR_UNSUPPORTED;
  if (o->id == STRATA__OP_ADD) {
    if (!IS_BF16(o->u.ew.x) || !IS_BF16(o->u.ew.b) || !IS_BF16(o->u.ew.y))
      return STRATA_ERR_UNSUPPORTED;
    const uint16_t *a = BF(o->u.ew.x), *b = BF(o->u.ew.b);
    uint16_t *y = BF(o->u.ew.y);
    int64_t n = o->u.ew.n, pieces = (n + CHUNK - 1) / CHUNK;
    _Pragma("omp parallel for schedule(static) num_threads(strata__host_threads) if (n >= PAR_MIN)")
    for (int64_t s = 0; s < pieces; s++) {
      int64_t lo = s * CHUNK, len = n - lo < CHUNK ? n - lo : CHUNK;
      add_span(a + lo, b + lo, y + lo, len);
    }
    return STRATA_OK;
  }
  if (!IS_BF16(o->u.bias.y))
    return STRATA_ERR_UNSUPPORTED;
  uint16_t *y = BF(o->u.bias.y);
  const int b16 = IS_BF16(o->u.bias.bias);
  int64_t cols = o->u.bias.cols, rows = o->u.bias.rows, par_n = rows * cols;
  int64_t per = cols >= CHUNK ? 1 : CHUNK / cols, pieces = (rows + per - 1) / per;
  _Pragma("omp parallel for schedule(static) num_threads(strata__host_threads) if (par_n >= PAR_MIN)")
  for (int64_t i = 0; i < pieces; i++) {
    int64_t r0 = i * per, nr = rows - r0 < per ? rows - r0 : per;
    bias_span(y + r0 * cols, b16 ? NULL : F(o->u.bias.bias), b16 ? BF(o->u.bias.bias) : NULL, nr, cols);
  }
  return STRATA_OK;
}

/* gelu_fwd_tab with AVX-512 gathers: 16 4-byte words at tab + x (x 2-byte units), their low halves kept. */
NATIVE static void gelu_fwd_gather(const uint16_t *tab, const uint16_t *x, uint16_t *y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 k = mask16(n - i);
    if ((i & 31) == 0) /* one 64-byte line of inputs each 32 */
      _mm_prefetch((const char *)(x + i + PF_GELU), _MM_HINT_T0);
    __m512i idx = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, x + i));
    __m512i w = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), k, idx, tab, 2);
    _mm256_mask_storeu_epi16((void *)(y + i), k, _mm512_cvtepi32_epi16(w));
  }
}

/* gelu_bwd_tab with AVX-512 gathers of the factors: the same products, rounded by vcvtneps2bf16 (bf16_round's
** bits). */
NATIVE static void gelu_bwd_gather(const float *tab, const uint16_t *x, const uint16_t *dy, uint16_t *dx, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 k = mask16(n - i);
    if ((i & 31) == 0) {
      _mm_prefetch((const char *)(x + i + PF_GELU), _MM_HINT_T0);
      _mm_prefetch((const char *)(dy + i + PF_GELU), _MM_HINT_T0);
    }
    __m512i idx = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, x + i));
    __m512 f = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), k, idx, tab, 4);
    narrow16(k, _mm512_mul_ps(widen16(k, dy + i), f), dx + i);
  }
}

/* One piece of a GELU lookup: gathers where the CPU has AVX-512 BF16 (the conversions' path), else plain loops. */
static void gelu_piece(int fwd, const uint16_t *x, const uint16_t *dy, uint16_t *y, int64_t n) {
  const int native = strata__bf16_path(NULL);
  if (fwd && native)
    gelu_fwd_gather(gelu_tab16, x, y, n);
  else if (fwd)
    gelu_fwd_tab(gelu_tab16, x, y, n);
  else if (native)
    gelu_bwd_gather(gelu_tab + 65536, x, dy, y, n);
  else
    gelu_bwd_tab(gelu_tab + 65536, x, dy, y, n);
}
#else
static int elementwise_native(const struct strata__op *o) {
  (void)o;
  return STRATA_ERR_UNSUPPORTED;
}

static void gelu_piece(int fwd, const uint16_t *x, const uint16_t *dy, uint16_t *y, int64_t n) {
  if (fwd)
    gelu_fwd_tab(gelu_tab16, x, y, n);
  else
    gelu_bwd_tab(gelu_tab + 65536, x, dy, y, n);
}
#endif

/* GELU_FWD/BWD with every operand bfloat16 through the tables, in pieces of CHUNK over the op's threads;
** STRATA_ERR_UNSUPPORTED for mixed types or without the tables (the caller stages them). */
static int gelu_lookup(const struct strata__op *o) {
  const int fwd = o->id == STRATA__OP_GELU_FWD;
  if (!IS_BF16(o->u.ew.x) || !IS_BF16(fwd ? o->u.ew.y : o->u.ew.dx) || (!fwd && !IS_BF16(o->u.ew.dy)))
    return STRATA_ERR_UNSUPPORTED;
  pthread_once(&gelu_once, gelu_tab_make);
  if (!gelu_tab)
    return STRATA_ERR_UNSUPPORTED;
  const uint16_t *x = BF(o->u.ew.x), *dy = fwd ? NULL : BF(o->u.ew.dy);
  uint16_t *y = fwd ? BF(o->u.ew.y) : BF(o->u.ew.dx);
  int64_t n = o->u.ew.n, pieces = (n + CHUNK - 1) / CHUNK;
  _Pragma("omp parallel for schedule(static) num_threads(strata__host_threads) if (n >= PAR_MIN)")
  for (int64_t s = 0; s < pieces; s++) {
    int64_t lo = s * CHUNK, len = n - lo < CHUNK ? n - lo : CHUNK;
    gelu_piece(fwd, x + lo, fwd ? NULL : dy + lo, y + lo, len);
  }
  return STRATA_OK;
}

int strata__host_op_run_bf16(const struct strata__op *op) {
  switch (op->id) {
  case STRATA__OP_CONVERT:
    return convert(op);
  case STRATA__OP_REDUCE:
    return op->u.reduce.dtype == STRATA_BFLOAT16 ? reduce(op) : strata__host_op_run_f32(op);
  case STRATA__OP_GEMM:
    return strata__host_gemm_bf16(op);
  case STRATA__OP_EMBEDDING_FWD:
    return embedding_fwd(op);
  case STRATA__OP_EMBEDDING_BWD:
    return embedding_bwd(op);
  case STRATA__OP_SUMSQ:
    return sumsq(op);
  case STRATA__OP_SUMSQ_SPANS:
    return IS_BF16(op->u.spans.x) ? sumsq_spans(op) : strata__host_op_run_f32(op);
  case STRATA__OP_ADAMW_FUSED: /* bfloat16 only in the copy it writes */
    return strata__host_op_run_f32(op);
  case STRATA__OP_BIAS_GRAD:
    return IS_BF16(op->u.bias.y) && !IS_BF16(op->u.bias.bias) ? bias_grad_native(op) : staged(op);
  case STRATA__OP_LAYERNORM_FWD:
    return layernorm_fwd_native(op);
  case STRATA__OP_LAYERNORM_BWD:
    return !IS_BF16(op->u.ln.dgamma) && !IS_BF16(op->u.ln.dbeta) ? layernorm_bwd_native(op) : staged(op);
  case STRATA__OP_ATTENTION_FWD: /* bfloat16 blocks on AVX-512 BF16 dot products where the CPU has them */
  case STRATA__OP_ATTENTION_BWD: {
    int rc = strata__host_attention_bf16(op);
    return rc == STRATA_ERR_UNSUPPORTED ? staged(op) : rc;
  }
  case STRATA__OP_GELU_FWD:
  case STRATA__OP_GELU_BWD: {
    int rc = gelu_lookup(op);
    return rc == STRATA_ERR_UNSUPPORTED ? staged(op) : rc;
  }
  case STRATA__OP_ADD:
  case STRATA__OP_BIAS_ADD: {
    int rc = elementwise_native(op);
    return rc == STRATA_ERR_UNSUPPORTED ? staged(op) : rc;
  }
  case STRATA__OP_ROPE_FWD: /* strided rows: read and written in place, element by element, in either type */
  case STRATA__OP_ROPE_BWD:
    return strata__host_op_run_f32(op);
  case STRATA__OP_ADAMW:        /* float32 only: the runtime refuses bfloat16 operands */
  case STRATA__OP_TOKENS_SHIFT: /* int32 only */
    return STRATA_ERR_UNSUPPORTED;
  default:
    return staged(op);
  }
}
