/* SPDX-License-Identifier: MIT */
/* ops.c — the public ops: argument checks, op records handed to backends, and ops composed from others. */
#include "config.h"

#include <math.h>
#include <string.h>

#include <strata/comm.h>
#include <strata/model.h>
#include <strata/ops.h>

#include "device/registry.h"

static const char *const op_names[STRATA__OP_COUNT] = {
#define STRATA__OP_NAME(id, name) name,
    STRATA__OP_MAP(STRATA__OP_NAME)
#undef STRATA__OP_NAME
};

/* The types an operand takes, as bits 1u << dtype. */
#define FLOATS ((1u << STRATA_FLOAT32) | (1u << STRATA_BFLOAT16))
#define INDEX ((1u << STRATA_FLOAT32) | (1u << STRATA_INT32)) /* 4-byte int32 ids */
#define F32_ONLY (1u << STRATA_FLOAT32)

/* strata/comm.h declares these; they live here, in the lowest layer that names types. */
STRATA_API const char *strata_dtype_name(int dtype) {
  return dtype == STRATA_FLOAT32    ? "float32"
         : dtype == STRATA_INT32    ? "int32"
         : dtype == STRATA_BFLOAT16 ? "bfloat16"
                                    : "?";
}

STRATA_API size_t strata_dtype_size(int dtype) {
  return dtype == STRATA_FLOAT32 || dtype == STRATA_INT32 ? 4 : dtype == STRATA_BFLOAT16 ? 2 : 0;
}

/*
** Check that operand `m` lies on q's device, has a type in `allow` and
** holds `count` elements of its type from its offset; translate it to the
** backend's handle and add its type to op->dtypes (op may be NULL: a
** check only).
*/
static int operand(strata_queue_t q, struct strata__op *op, const char *name, const char *arg, strata_mem_t m,
                   uint64_t count, unsigned allow, struct strata__mem *out) {
  if (!m.buf)
    return strata__error(STRATA_ERR_INVALID, "%s: operand '%s' has no buffer", name, arg);
  if (m.buf->dev != q->dev) {
    char lb[200], lq[200];
    return strata__error(STRATA_ERR_DEVICE_MISMATCH, "%s: operand '%s' is on %s but the queue is on %s", name, arg,
                         strata__device_label(m.buf->dev, lb, sizeof lb), strata__device_label(q->dev, lq, sizeof lq));
  }
  size_t size = strata_dtype_size(m.dtype);
  if (!size)
    return strata__error(STRATA_ERR_INVALID, "%s: operand '%s' has unknown element type %d", name, arg, m.dtype);
  if (!(allow & (1u << m.dtype)))
    return strata__error(STRATA_ERR_INVALID, "%s: operand '%s' is %s but must be %s", name, arg,
                         strata_dtype_name(m.dtype),
                         allow == INDEX ? "4-byte int32 ids (STRATA_INT32 or STRATA_FLOAT32)" : "float32");
  uint64_t elems = m.buf->size / size;
  if (m.off > elems || count > elems - m.off)
    return strata__error(STRATA_ERR_RANGE,
                         "%s: operand '%s' needs %llu elements from offset %zu but its buffer holds %llu%s%s", name,
                         arg, (unsigned long long)count, m.off, (unsigned long long)elems, m.dtype ? " of " : "",
                         m.dtype ? strata_dtype_name(m.dtype) : "");
  out->h = m.buf->h;
  out->off = m.off;
  out->dtype = m.dtype;
  if (op)
    op->dtypes |= 1u << m.dtype;
  return STRATA_OK;
}

/* Whether n elements of x and n of y (each of its own type) share a byte; whether they are the very same memory. */
static int overlap(strata_mem_t x, strata_mem_t y, uint64_t n) {
  uint64_t xs = strata_dtype_size(x.dtype), ys = strata_dtype_size(y.dtype), x0 = x.off * xs, y0 = y.off * ys;
  return x.buf && x.buf == y.buf && x0 < y0 + n * ys && y0 < x0 + n * xs;
}
static int same_mem(strata_mem_t x, strata_mem_t y) { return x.buf == y.buf && x.off == y.off && x.dtype == y.dtype; }

/* Dimensions must be positive; products are checked against overflow. */
static int positive(const char *op, const char *name, int64_t v) {
  if (v <= 0)
    return strata__error(STRATA_ERR_SHAPE, "%s: %s = %lld, must be positive", op, name, (long long)v);
  return STRATA_OK;
}

static int product(const char *op, int64_t a, int64_t b, uint64_t *out) {
  *out = 0;
  if (!strata__mul_ok((uint64_t)a, (uint64_t)b, out) || *out > (UINT64_MAX >> 3))
    return strata__error(STRATA_ERR_RANGE, "%s: %lld x %lld elements overflow", op, (long long)a, (long long)b);
  return STRATA_OK;
}

static int check_queue(strata_queue_t q, enum strata__op_id id) {
  if (!q)
    return strata__error(STRATA_ERR_INVALID, "%s: queue is NULL", op_names[id]);
  const struct strata__slot *s = q->dev->slot;
  if (!s->be->op_supported || !s->be->op_supported(s->ctx, q->dev->local, id)) {
    char l[200];
    return strata__error(STRATA_ERR_UNSUPPORTED, "%s has no op '%s'", strata__device_label(q->dev, l, sizeof l),
                         op_names[id]);
  }
  return STRATA_OK;
}

static int submit(strata_queue_t q, struct strata__op *op) {
  return q->dev->slot->be->op(q->dev->slot->ctx, q->h, op);
}

/* Elements spanned by `batch` rows x cols matrices with row stride ld and batch stride. */
static int matrix_extent(const char *op, const char *arg, int64_t rows, int64_t cols, int64_t ld, int64_t stride,
                         int64_t batch, uint64_t *out) {
  if (ld < cols)
    return strata__error(STRATA_ERR_SHAPE, "%s: leading dimension of %s is %lld, less than its %lld columns", op, arg,
                         (long long)ld, (long long)cols);
  if (stride < 0)
    return strata__error(STRATA_ERR_SHAPE, "%s: batch stride of %s is negative", op, arg);
  uint64_t one = 0, last = 0;
  TRY(product(op, rows - 1, ld, &one));
  one += (uint64_t)cols;
  TRY(product(op, batch - 1, stride, &last));
  *out = last + one;
  return STRATA_OK;
}

/* A product's two operands (named an and bn in the message) are of one type. */
static int share_type(const char *name, const char *an, strata_mem_t a, const char *bn, strata_mem_t b) {
  if (a.dtype == b.dtype)
    return STRATA_OK;
  return strata__error(STRATA_ERR_INVALID, "%s: operands '%s' (%s) and '%s' (%s) must share a type", name, an,
                       strata_dtype_name(a.dtype), bn, strata_dtype_name(b.dtype));
}

STRATA_API int strata_gemm(strata_queue_t q, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                           strata_mem_t a, int64_t lda, int64_t stride_a, strata_mem_t b, int64_t ldb,
                           int64_t stride_b, float beta, strata_mem_t c, int64_t ldc, int64_t stride_c,
                           int64_t batch) {
  const char *name = "gemm";
  TRY(check_queue(q, STRATA__OP_GEMM));
  TRY(positive(name, "m", m));
  TRY(positive(name, "n", n));
  TRY(positive(name, "k", k));
  TRY(positive(name, "batch", batch));
  if ((trans_a != 0 && trans_a != 1) || (trans_b != 0 && trans_b != 1))
    return strata__error(STRATA_ERR_INVALID, "gemm: transpose flags must be STRATA_NO_TRANS or STRATA_TRANS");
  uint64_t ea, eb, ec;
  TRY(matrix_extent(name, "A", trans_a ? k : m, trans_a ? m : k, lda, stride_a, batch, &ea));
  TRY(matrix_extent(name, "B", trans_b ? n : k, trans_b ? k : n, ldb, stride_b, batch, &eb));
  TRY(matrix_extent(name, "C", m, n, ldc, stride_c, batch, &ec));
  /* Interleaved outputs (the heads of one attention matrix: stride_c = head
  ** width, ldc = model width) are fine; C matrices sharing an element are not. */
  if (batch > 1 && stride_c < n && stride_c < (m - 1) * ldc + n)
    return strata__error(STRATA_ERR_SHAPE, "gemm: batch stride of C (%lld) makes the outputs overlap",
                         (long long)stride_c);
  struct strata__op op = {.id = STRATA__OP_GEMM};
  TRY(operand(q, &op, name, "A", a, ea, FLOATS, &op.u.gemm.a));
  TRY(operand(q, &op, name, "B", b, eb, FLOATS, &op.u.gemm.b));
  TRY(operand(q, &op, name, "C", c, ec, FLOATS, &op.u.gemm.c));
  TRY(share_type(name, "A", a, "B", b));
  op.u.gemm.trans_a = trans_a;
  op.u.gemm.trans_b = trans_b;
  op.u.gemm.m = m;
  op.u.gemm.n = n;
  op.u.gemm.k = k;
  op.u.gemm.lda = lda;
  op.u.gemm.ldb = ldb;
  op.u.gemm.ldc = ldc;
  op.u.gemm.stride_a = stride_a;
  op.u.gemm.stride_b = stride_b;
  op.u.gemm.stride_c = stride_c;
  op.u.gemm.batch = batch;
  op.u.gemm.alpha = alpha;
  op.u.gemm.beta = beta;
  return submit(q, &op);
}

static int bias_common(strata_queue_t q, enum strata__op_id id, strata_mem_t y, strata_mem_t bias, int64_t rows,
                       int64_t cols, int accumulate) {
  const char *name = op_names[id];
  TRY(check_queue(q, id));
  TRY(positive(name, "rows", rows));
  TRY(positive(name, "cols", cols));
  uint64_t total;
  TRY(product(name, rows, cols, &total));
  struct strata__op op = {.id = id};
  TRY(operand(q, &op, name, id == STRATA__OP_BIAS_ADD ? "y" : "dy", y, total, FLOATS, &op.u.bias.y));
  TRY(operand(q, &op, name, id == STRATA__OP_BIAS_ADD ? "bias" : "dbias", bias, (uint64_t)cols, FLOATS,
              &op.u.bias.bias));
  op.u.bias.rows = rows;
  op.u.bias.cols = cols;
  op.u.bias.accumulate = accumulate != 0;
  return submit(q, &op);
}

/* A backend's fused kernel where it has one (STRATA__OP_LINEAR), else strata_gemm, strata_bias_add and strata_add
** in turn (the checks are theirs). */
STRATA_API int strata_linear(strata_queue_t q, int64_t rows, int64_t in, int64_t out, strata_mem_t x, strata_mem_t w,
                             strata_mem_t bias, strata_mem_t res, strata_mem_t y) {
  const char *name = "linear";
  if (!q)
    return strata__error(STRATA_ERR_INVALID, "linear: queue is NULL");
  TRY(positive(name, "rows", rows));
  TRY(positive(name, "in", in));
  TRY(positive(name, "out", out));
  uint64_t ny, nx, nw;
  TRY(product(name, rows, out, &ny));
  TRY(product(name, rows, in, &nx));
  TRY(product(name, in, out, &nw));
  if (res.buf && res.buf == y.buf && res.dtype == y.dtype && res.off < y.off + ny && y.off < res.off + ny)
    return strata__error(STRATA_ERR_INVALID, "linear: the residual 'res' overlaps the output 'y'");
  const struct strata__slot *s = q->dev->slot;
  if (!s->be->op_supported || !s->be->op_supported(s->ctx, q->dev->local, STRATA__OP_LINEAR)) {
    TRY(strata_gemm(q, 0, 0, rows, out, in, 1.0f, x, in, 0, w, out, 0, 0.0f, y, out, 0, 1));
    TRY(strata_bias_add(q, y, bias, rows, out));
    return res.buf ? strata_add(q, y, res, y, (int64_t)ny) : STRATA_OK;
  }
  struct strata__op op = {.id = STRATA__OP_LINEAR};
  TRY(operand(q, &op, name, "x", x, nx, FLOATS, &op.u.linear.x));
  TRY(operand(q, &op, name, "w", w, nw, FLOATS, &op.u.linear.w));
  TRY(operand(q, &op, name, "bias", bias, (uint64_t)out, FLOATS, &op.u.linear.bias));
  if (res.buf)
    TRY(operand(q, &op, name, "res", res, ny, FLOATS, &op.u.linear.res));
  TRY(operand(q, &op, name, "y", y, ny, FLOATS, &op.u.linear.y));
  TRY(share_type(name, "x", x, "w", w));
  op.u.linear.rows = rows;
  op.u.linear.in = in;
  op.u.linear.out = out;
  return submit(q, &op);
}

STRATA_API int strata_bias_add(strata_queue_t q, strata_mem_t y, strata_mem_t bias, int64_t rows, int64_t cols) {
  return bias_common(q, STRATA__OP_BIAS_ADD, y, bias, rows, cols, 0);
}

STRATA_API int strata_bias_grad(strata_queue_t q, strata_mem_t dy, strata_mem_t dbias, int64_t rows, int64_t cols,
                                int accumulate) {
  return bias_common(q, STRATA__OP_BIAS_GRAD, dy, dbias, rows, cols, accumulate);
}

/* Elementwise ops: every operand given (non-NULL name) holds n elements. */
static int elementwise(strata_queue_t q, enum strata__op_id id, int64_t n, float alpha, const char *n1,
                       strata_mem_t m1, struct strata__mem *f1, const char *n2, strata_mem_t m2,
                       struct strata__mem *f2, const char *n3, strata_mem_t m3, struct strata__mem *f3,
                       struct strata__op *op) {
  const char *name = op_names[id];
  TRY(check_queue(q, id));
  TRY(positive(name, "n", n));
  if (n1)
    TRY(operand(q, op, name, n1, m1, (uint64_t)n, FLOATS, f1));
  if (n2)
    TRY(operand(q, op, name, n2, m2, (uint64_t)n, FLOATS, f2));
  if (n3)
    TRY(operand(q, op, name, n3, m3, (uint64_t)n, FLOATS, f3));
  op->id = id;
  op->u.ew.n = n;
  op->u.ew.alpha = alpha;
  return submit(q, op);
}

static const strata_mem_t no_mem;

STRATA_API int strata_gelu_fwd(strata_queue_t q, strata_mem_t x, strata_mem_t y, int64_t n) {
  struct strata__op op = {0};
  return elementwise(q, STRATA__OP_GELU_FWD, n, 0, "x", x, &op.u.ew.x, "y", y, &op.u.ew.y, NULL, no_mem, NULL, &op);
}

STRATA_API int strata_gelu_bwd(strata_queue_t q, strata_mem_t x, strata_mem_t dy, strata_mem_t dx, int64_t n) {
  struct strata__op op = {0};
  return elementwise(q, STRATA__OP_GELU_BWD, n, 0, "x", x, &op.u.ew.x, "dy", dy, &op.u.ew.dy, "dx", dx, &op.u.ew.dx,
                     &op);
}

STRATA_API int strata_relu_fwd(strata_queue_t q, strata_mem_t x, strata_mem_t y, int64_t n) {
  struct strata__op op = {0};
  return elementwise(q, STRATA__OP_RELU_FWD, n, 0, "x", x, &op.u.ew.x, "y", y, &op.u.ew.y, NULL, no_mem, NULL, &op);
}

STRATA_API int strata_relu_bwd(strata_queue_t q, strata_mem_t x, strata_mem_t dy, strata_mem_t dx, int64_t n) {
  struct strata__op op = {0};
  return elementwise(q, STRATA__OP_RELU_BWD, n, 0, "x", x, &op.u.ew.x, "dy", dy, &op.u.ew.dy, "dx", dx, &op.u.ew.dx,
                     &op);
}

STRATA_API int strata_add(strata_queue_t q, strata_mem_t a, strata_mem_t b, strata_mem_t y, int64_t n) {
  struct strata__op op = {0};
  return elementwise(q, STRATA__OP_ADD, n, 0, "a", a, &op.u.ew.x, "b", b, &op.u.ew.b, "y", y, &op.u.ew.y, &op);
}

STRATA_API int strata_scale(strata_queue_t q, strata_mem_t x, float alpha, int64_t n) {
  struct strata__op op = {0};
  return elementwise(q, STRATA__OP_SCALE, n, alpha, "x", x, &op.u.ew.x, NULL, no_mem, NULL, NULL, no_mem, NULL, &op);
}

STRATA_API int strata_fill(strata_queue_t q, strata_mem_t x, float value, int64_t n) {
  struct strata__op op = {0};
  return elementwise(q, STRATA__OP_FILL, n, value, "x", x, &op.u.ew.x, NULL, no_mem, NULL, NULL, no_mem, NULL, &op);
}

STRATA_API int strata_convert(strata_queue_t q, strata_mem_t x, strata_mem_t y, int64_t n) {
  struct strata__op op = {0};
  /* distinct byte ranges or the very same memory: a conversion in place would read what it has just written */
  if (!same_mem(x, y) && n > 0 && overlap(x, y, (uint64_t)n))
    return strata__error(STRATA_ERR_INVALID, "convert: operands 'x' and 'y' overlap");
  return elementwise(q, STRATA__OP_CONVERT, n, 0, "x", x, &op.u.ew.x, "y", y, &op.u.ew.y, NULL, no_mem, NULL, &op);
}

STRATA_API int strata_layernorm_fwd(strata_queue_t q, strata_mem_t x, strata_mem_t gamma, strata_mem_t beta,
                                    strata_mem_t y, strata_mem_t mean, strata_mem_t rstd, int64_t rows, int64_t cols,
                                    float eps) {
  const char *name = "layernorm_fwd";
  TRY(check_queue(q, STRATA__OP_LAYERNORM_FWD));
  TRY(positive(name, "rows", rows));
  TRY(positive(name, "cols", cols));
  if (!(eps > 0))
    return strata__error(STRATA_ERR_INVALID, "layernorm_fwd: eps must be positive");
  uint64_t total;
  TRY(product(name, rows, cols, &total));
  struct strata__op op = {.id = STRATA__OP_LAYERNORM_FWD};
  TRY(operand(q, &op, name, "x", x, total, FLOATS, &op.u.ln.x));
  TRY(operand(q, &op, name, "gamma", gamma, (uint64_t)cols, FLOATS, &op.u.ln.gamma));
  TRY(operand(q, &op, name, "beta", beta, (uint64_t)cols, FLOATS, &op.u.ln.beta));
  TRY(operand(q, &op, name, "y", y, total, FLOATS, &op.u.ln.y));
  TRY(operand(q, &op, name, "mean", mean, (uint64_t)rows, FLOATS, &op.u.ln.mean));
  TRY(operand(q, &op, name, "rstd", rstd, (uint64_t)rows, FLOATS, &op.u.ln.rstd));
  op.u.ln.rows = rows;
  op.u.ln.cols = cols;
  op.u.ln.eps = eps;
  return submit(q, &op);
}

STRATA_API int strata_layernorm_bwd(strata_queue_t q, strata_mem_t x, strata_mem_t gamma, strata_mem_t mean,
                                    strata_mem_t rstd, strata_mem_t dy, strata_mem_t dx, strata_mem_t dgamma,
                                    strata_mem_t dbeta, int64_t rows, int64_t cols, int accumulate) {
  const char *name = "layernorm_bwd";
  TRY(check_queue(q, STRATA__OP_LAYERNORM_BWD));
  TRY(positive(name, "rows", rows));
  TRY(positive(name, "cols", cols));
  uint64_t total;
  TRY(product(name, rows, cols, &total));
  struct strata__op op = {.id = STRATA__OP_LAYERNORM_BWD};
  TRY(operand(q, &op, name, "x", x, total, FLOATS, &op.u.ln.x));
  TRY(operand(q, &op, name, "gamma", gamma, (uint64_t)cols, FLOATS, &op.u.ln.gamma));
  TRY(operand(q, &op, name, "mean", mean, (uint64_t)rows, FLOATS, &op.u.ln.mean));
  TRY(operand(q, &op, name, "rstd", rstd, (uint64_t)rows, FLOATS, &op.u.ln.rstd));
  TRY(operand(q, &op, name, "dy", dy, total, FLOATS, &op.u.ln.dy));
  TRY(operand(q, &op, name, "dx", dx, total, FLOATS, &op.u.ln.dx));
  TRY(operand(q, &op, name, "dgamma", dgamma, (uint64_t)cols, FLOATS, &op.u.ln.dgamma));
  TRY(operand(q, &op, name, "dbeta", dbeta, (uint64_t)cols, FLOATS, &op.u.ln.dbeta));
  op.u.ln.rows = rows;
  op.u.ln.cols = cols;
  op.u.ln.accumulate = accumulate != 0;
  return submit(q, &op);
}

STRATA_API int strata_rmsnorm_fwd(strata_queue_t q, strata_mem_t x, strata_mem_t w, strata_mem_t y, strata_mem_t rstd,
                                  int64_t rows, int64_t cols, float eps) {
  const char *name = "rmsnorm_fwd";
  TRY(check_queue(q, STRATA__OP_RMSNORM_FWD));
  TRY(positive(name, "rows", rows));
  TRY(positive(name, "cols", cols));
  if (!(eps > 0) || !isfinite(eps))
    return strata__error(STRATA_ERR_INVALID, "rmsnorm_fwd: eps = %g, must be a positive number", eps);
  uint64_t total;
  TRY(product(name, rows, cols, &total));
  struct strata__op op = {.id = STRATA__OP_RMSNORM_FWD};
  TRY(operand(q, &op, name, "x", x, total, FLOATS, &op.u.rms.x));
  TRY(operand(q, &op, name, "w", w, (uint64_t)cols, FLOATS, &op.u.rms.w));
  TRY(operand(q, &op, name, "y", y, total, FLOATS, &op.u.rms.y));
  TRY(operand(q, &op, name, "rstd", rstd, (uint64_t)rows, FLOATS, &op.u.rms.rstd));
  op.u.rms.rows = rows;
  op.u.rms.cols = cols;
  op.u.rms.eps = eps;
  return submit(q, &op);
}

STRATA_API int strata_rmsnorm_bwd(strata_queue_t q, strata_mem_t x, strata_mem_t w, strata_mem_t rstd, strata_mem_t dy,
                                  strata_mem_t dx, strata_mem_t dw, int64_t rows, int64_t cols, int accumulate) {
  const char *name = "rmsnorm_bwd";
  TRY(check_queue(q, STRATA__OP_RMSNORM_BWD));
  TRY(positive(name, "rows", rows));
  TRY(positive(name, "cols", cols));
  uint64_t total;
  TRY(product(name, rows, cols, &total));
  struct strata__op op = {.id = STRATA__OP_RMSNORM_BWD};
  TRY(operand(q, &op, name, "x", x, total, FLOATS, &op.u.rms.x));
  TRY(operand(q, &op, name, "w", w, (uint64_t)cols, FLOATS, &op.u.rms.w));
  TRY(operand(q, &op, name, "rstd", rstd, (uint64_t)rows, FLOATS, &op.u.rms.rstd));
  TRY(operand(q, &op, name, "dy", dy, total, FLOATS, &op.u.rms.dy));
  TRY(operand(q, &op, name, "dx", dx, total, FLOATS, &op.u.rms.dx));
  TRY(operand(q, &op, name, "dw", dw, (uint64_t)cols, FLOATS, &op.u.rms.dw));
  op.u.rms.rows = rows;
  op.u.rms.cols = cols;
  op.u.rms.accumulate = accumulate != 0;
  return submit(q, &op);
}

STRATA_API int strata_swiglu_fwd(strata_queue_t q, strata_mem_t gu, strata_mem_t h, int64_t rows, int64_t cols) {
  const char *name = "swiglu_fwd";
  TRY(check_queue(q, STRATA__OP_SWIGLU_FWD));
  TRY(positive(name, "rows", rows));
  TRY(positive(name, "cols", cols));
  uint64_t total, total2;
  TRY(product(name, rows, cols, &total));
  TRY(product(name, rows, 2 * cols, &total2));
  struct strata__op op = {.id = STRATA__OP_SWIGLU_FWD};
  TRY(operand(q, &op, name, "gu", gu, total2, FLOATS, &op.u.swiglu.gu));
  TRY(operand(q, &op, name, "h", h, total, FLOATS, &op.u.swiglu.h));
  op.u.swiglu.rows = rows;
  op.u.swiglu.cols = cols;
  return submit(q, &op);
}

STRATA_API int strata_swiglu_bwd(strata_queue_t q, strata_mem_t gu, strata_mem_t dh, strata_mem_t dgu, int64_t rows,
                                 int64_t cols) {
  const char *name = "swiglu_bwd";
  TRY(check_queue(q, STRATA__OP_SWIGLU_BWD));
  TRY(positive(name, "rows", rows));
  TRY(positive(name, "cols", cols));
  uint64_t total, total2;
  TRY(product(name, rows, cols, &total));
  TRY(product(name, rows, 2 * cols, &total2));
  struct strata__op op = {.id = STRATA__OP_SWIGLU_BWD};
  TRY(operand(q, &op, name, "gu", gu, total2, FLOATS, &op.u.swiglu.gu));
  TRY(operand(q, &op, name, "dh", dh, total, FLOATS, &op.u.swiglu.dh));
  TRY(operand(q, &op, name, "dgu", dgu, total2, FLOATS, &op.u.swiglu.dgu));
  if (gu.buf == dgu.buf && (gu.off != dgu.off || gu.dtype != dgu.dtype)) {
    uint64_t gs = strata_dtype_size(gu.dtype), ds = strata_dtype_size(dgu.dtype);
    uint64_t g0 = (uint64_t)gu.off * gs, d0 = (uint64_t)dgu.off * ds;
    if (g0 < d0 + total2 * ds && d0 < g0 + total2 * gs)
      return strata__error(STRATA_ERR_INVALID, "swiglu_bwd: dgu overlaps gu without being it");
  }
  op.u.swiglu.rows = rows;
  op.u.swiglu.cols = cols;
  return submit(q, &op);
}

static int rope_common(strata_queue_t q, enum strata__op_id id, strata_mem_t x, strata_mem_t y, strata_mem_t freq,
                       int64_t batch, int64_t seq, int64_t heads, int64_t head_dim, int64_t ld, int64_t pos0) {
  const char *name = op_names[id];
  int fwd = id == STRATA__OP_ROPE_FWD;
  TRY(check_queue(q, id));
  TRY(positive(name, "batch", batch));
  TRY(positive(name, "seq", seq));
  TRY(positive(name, "heads", heads));
  TRY(positive(name, "head_dim", head_dim));
  if (head_dim % 2)
    return strata__error(STRATA_ERR_SHAPE, "%s: head_dim = %lld must be even (pairs i, i + head_dim / 2)", name,
                         (long long)head_dim);
  if (pos0 < 0)
    return strata__error(STRATA_ERR_SHAPE, "%s: pos0 = %lld must not be negative", name, (long long)pos0);
  if (pos0 > (INT64_C(1) << 40) || seq > (INT64_C(1) << 40))
    return strata__error(STRATA_ERR_RANGE, "%s: positions up to %lld + %lld are out of range", name, (long long)pos0,
                         (long long)seq);
  uint64_t rows, width, extent;
  TRY(product(name, batch, seq, &rows));
  TRY(product(name, heads, head_dim, &width));
  if (ld < (int64_t)width)
    return strata__error(STRATA_ERR_SHAPE, "%s: ld = %lld is less than heads x head_dim = %llu", name, (long long)ld,
                         (unsigned long long)width);
  TRY(product(name, (int64_t)rows - 1, ld, &extent));
  extent += width;
  struct strata__op op = {.id = id};
  TRY(operand(q, &op, name, fwd ? "x" : "dy", x, extent, FLOATS, &op.u.rope.x));
  TRY(operand(q, &op, name, fwd ? "y" : "dx", y, extent, FLOATS, &op.u.rope.y));
  TRY(operand(q, &op, name, "freq", freq, (uint64_t)(head_dim / 2), F32_ONLY, &op.u.rope.freq));
  if (!same_mem(x, y) && overlap(x, y, extent))
    return strata__error(STRATA_ERR_INVALID, "%s: operands '%s' and '%s' overlap without being the same", name,
                         fwd ? "x" : "dy", fwd ? "y" : "dx");
  op.u.rope.batch = batch;
  op.u.rope.seq = seq;
  op.u.rope.heads = heads;
  op.u.rope.head_dim = head_dim;
  op.u.rope.ld = ld;
  op.u.rope.pos0 = pos0;
  return submit(q, &op);
}

STRATA_API int strata_rope_fwd(strata_queue_t q, strata_mem_t x, strata_mem_t y, strata_mem_t freq, int64_t batch,
                               int64_t seq, int64_t heads, int64_t head_dim, int64_t ld, int64_t pos0) {
  return rope_common(q, STRATA__OP_ROPE_FWD, x, y, freq, batch, seq, heads, head_dim, ld, pos0);
}

STRATA_API int strata_rope_bwd(strata_queue_t q, strata_mem_t dy, strata_mem_t dx, strata_mem_t freq, int64_t batch,
                               int64_t seq, int64_t heads, int64_t head_dim, int64_t ld, int64_t pos0) {
  return rope_common(q, STRATA__OP_ROPE_BWD, dy, dx, freq, batch, seq, heads, head_dim, ld, pos0);
}

STRATA_API int strata_rope_inv_freq(const struct strata_model_config *config, int64_t head_dim, double *out) {
  if (!config || !out)
    return strata__error(STRATA_ERR_INVALID, "rope_inv_freq: %s is NULL", !config ? "config" : "out");
  if (head_dim < 2 || head_dim % 2)
    return strata__error(STRATA_ERR_INVALID, "rope_inv_freq: head_dim = %lld must be even and at least 2",
                         (long long)head_dim);
  double theta = config->rope_theta == 0 ? 10000.0 : config->rope_theta;
  if (!(theta > 0) || !isfinite(theta))
    return strata__error(STRATA_ERR_INVALID, "rope_inv_freq: rope_theta = %g must be a positive number", theta);
  const __typeof__(config->rope_scaling) *rs = &config->rope_scaling;
  if (rs->type != STRATA_ROPE_DEFAULT && rs->type != STRATA_ROPE_LLAMA3)
    return strata__error(STRATA_ERR_INVALID, "rope_inv_freq: rope_scaling type %d is not one strata knows", rs->type);
  if (rs->type == STRATA_ROPE_LLAMA3) {
    if (!(rs->factor > 0) || !isfinite(rs->factor))
      return strata__error(STRATA_ERR_INVALID, "rope_inv_freq: rope_scaling factor = %g must be positive", rs->factor);
    if (rs->original_context <= 0)
      return strata__error(STRATA_ERR_INVALID,
                           "rope_inv_freq: rope_scaling original_max_position_embeddings = %lld must be positive",
                           (long long)rs->original_context);
    if (!(rs->low_freq_factor > 0) || !(rs->high_freq_factor > rs->low_freq_factor) || !isfinite(rs->high_freq_factor))
      return strata__error(STRATA_ERR_INVALID,
                           "rope_inv_freq: rope_scaling needs 0 < low_freq_factor < high_freq_factor (got %g, %g)",
                           rs->low_freq_factor, rs->high_freq_factor);
  }
  const double pi = 3.14159265358979323846;
  for (int64_t i = 0; i < head_dim / 2; i++) {
    double f = pow(theta, -(double)(2 * i) / (double)head_dim);
    if (rs->type == STRATA_ROPE_LLAMA3) {
      double ctx = (double)rs->original_context, wavelen = 2 * pi / f;
      double low_wavelen = ctx / rs->low_freq_factor, high_wavelen = ctx / rs->high_freq_factor;
      if (wavelen > low_wavelen) {
        f = f / rs->factor;
      } else if (!(wavelen < high_wavelen)) {
        double s = (ctx / wavelen - rs->low_freq_factor) / (rs->high_freq_factor - rs->low_freq_factor);
        f = (1 - s) * f / rs->factor + s * f;
      }
    }
    out[i] = f;
  }
  return STRATA_OK;
}

STRATA_API int strata_softmax_fwd(strata_queue_t q, strata_mem_t x, strata_mem_t y, int64_t rows, int64_t cols,
                                  float scale, int causal) {
  const char *name = "softmax_fwd";
  TRY(check_queue(q, STRATA__OP_SOFTMAX_FWD));
  TRY(positive(name, "rows", rows));
  TRY(positive(name, "cols", cols));
  if (causal && rows % cols)
    return strata__error(STRATA_ERR_SHAPE,
                         "softmax_fwd: causal rows (%lld) must be a multiple of cols (%lld): a stack of square matrices",
                         (long long)rows, (long long)cols);
  uint64_t total;
  TRY(product(name, rows, cols, &total));
  struct strata__op op = {.id = STRATA__OP_SOFTMAX_FWD};
  TRY(operand(q, &op, name, "x", x, total, FLOATS, &op.u.softmax.x));
  TRY(operand(q, &op, name, "y", y, total, FLOATS, &op.u.softmax.y));
  op.u.softmax.rows = rows;
  op.u.softmax.cols = cols;
  op.u.softmax.scale = scale;
  op.u.softmax.causal = causal != 0;
  return submit(q, &op);
}

STRATA_API int strata_softmax_bwd(strata_queue_t q, strata_mem_t y, strata_mem_t dy, strata_mem_t dx, int64_t rows,
                                  int64_t cols, float scale) {
  const char *name = "softmax_bwd";
  TRY(check_queue(q, STRATA__OP_SOFTMAX_BWD));
  TRY(positive(name, "rows", rows));
  TRY(positive(name, "cols", cols));
  uint64_t total;
  TRY(product(name, rows, cols, &total));
  struct strata__op op = {.id = STRATA__OP_SOFTMAX_BWD};
  TRY(operand(q, &op, name, "y", y, total, FLOATS, &op.u.softmax.y));
  TRY(operand(q, &op, name, "dy", dy, total, FLOATS, &op.u.softmax.dy));
  TRY(operand(q, &op, name, "dx", dx, total, FLOATS, &op.u.softmax.dx));
  op.u.softmax.rows = rows;
  op.u.softmax.cols = cols;
  op.u.softmax.scale = scale;
  return submit(q, &op);
}

/* Shapes and operands shared by the attention ops; fills every field of op->u.attn but the gradients'. */
static int attention_common(strata_queue_t q, enum strata__op_id id, strata_mem_t qkv, strata_mem_t out,
                            strata_mem_t lse, int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads,
                            int64_t head_dim, float scale, int causal, struct strata__op *op, uint64_t *qkv_count) {
  const char *name = op_names[id];
  TRY(check_queue(q, id));
  TRY(positive(name, "batch", batch));
  TRY(positive(name, "seq", seq));
  TRY(positive(name, "heads", heads));
  TRY(positive(name, "kv_heads", kv_heads));
  TRY(positive(name, "head_dim", head_dim));
  if (kv_heads > heads || heads % kv_heads)
    return strata__error(STRATA_ERR_SHAPE, "%s: kv_heads = %lld must divide heads = %lld", name, (long long)kv_heads,
                         (long long)heads);
  if (!(scale == scale) || scale == 0.0f)
    return strata__error(STRATA_ERR_INVALID, "%s: scale must be a nonzero number", name);
  uint64_t rows, d, width, outn, lsen;
  TRY(product(name, batch, seq, &rows));
  TRY(product(name, heads, head_dim, &d));
  TRY(product(name, heads + 2 * kv_heads, head_dim, &width));
  TRY(product(name, (int64_t)rows, (int64_t)width, qkv_count));
  TRY(product(name, (int64_t)rows, (int64_t)d, &outn));
  TRY(product(name, (int64_t)rows, heads, &lsen));
  op->id = id;
  TRY(operand(q, op, name, "qkv", qkv, *qkv_count, FLOATS, &op->u.attn.qkv));
  TRY(operand(q, op, name, "out", out, outn, FLOATS, &op->u.attn.out));
  TRY(operand(q, op, name, "lse", lse, lsen, FLOATS, &op->u.attn.lse));
  op->u.attn.batch = batch;
  op->u.attn.seq = seq;
  op->u.attn.heads = heads;
  op->u.attn.kv_heads = kv_heads;
  op->u.attn.head_dim = head_dim;
  op->u.attn.scale = scale;
  op->u.attn.causal = causal != 0;
  return STRATA_OK;
}

STRATA_API int strata_attention_gqa_fwd(strata_queue_t q, strata_mem_t qkv, strata_mem_t out, strata_mem_t lse,
                                        int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_dim,
                                        float scale, int causal) {
  struct strata__op op = {.id = STRATA__OP_ATTENTION_FWD};
  uint64_t n;
  TRY(attention_common(q, STRATA__OP_ATTENTION_FWD, qkv, out, lse, batch, seq, heads, kv_heads, head_dim, scale,
                       causal, &op, &n));
  return submit(q, &op);
}

STRATA_API int strata_attention_gqa_bwd(strata_queue_t q, strata_mem_t qkv, strata_mem_t out, strata_mem_t dout,
                                        strata_mem_t lse, strata_mem_t dqkv, int64_t batch, int64_t seq, int64_t heads,
                                        int64_t kv_heads, int64_t head_dim, float scale, int causal) {
  struct strata__op op = {.id = STRATA__OP_ATTENTION_BWD};
  uint64_t n;
  TRY(attention_common(q, STRATA__OP_ATTENTION_BWD, qkv, out, lse, batch, seq, heads, kv_heads, head_dim, scale,
                       causal, &op, &n));
  TRY(operand(q, &op, "attention_bwd", "dout", dout, (uint64_t)batch * (uint64_t)seq * (uint64_t)(heads * head_dim),
              FLOATS, &op.u.attn.dout));
  TRY(operand(q, &op, "attention_bwd", "dqkv", dqkv, n, FLOATS, &op.u.attn.dqkv));
  if (op.u.attn.dqkv.h == op.u.attn.qkv.h && op.u.attn.dqkv.off == op.u.attn.qkv.off)
    return strata__error(STRATA_ERR_INVALID, "attention_bwd: dqkv cannot be qkv");
  return submit(q, &op);
}

STRATA_API int strata_attention_fwd(strata_queue_t q, strata_mem_t qkv, strata_mem_t out, strata_mem_t lse,
                                    int64_t batch, int64_t seq, int64_t heads, int64_t head_dim, float scale,
                                    int causal) {
  return strata_attention_gqa_fwd(q, qkv, out, lse, batch, seq, heads, heads, head_dim, scale, causal);
}

STRATA_API int strata_attention_bwd(strata_queue_t q, strata_mem_t qkv, strata_mem_t out, strata_mem_t dout,
                                    strata_mem_t lse, strata_mem_t dqkv, int64_t batch, int64_t seq, int64_t heads,
                                    int64_t head_dim, float scale, int causal) {
  return strata_attention_gqa_bwd(q, qkv, out, dout, lse, dqkv, batch, seq, heads, heads, head_dim, scale, causal);
}

STRATA_API int strata_attention_supported(strata_queue_t q) {
  if (!q)
    return 0;
  const struct strata__slot *s = q->dev->slot;
  return s->be->op_supported && s->be->op_supported(s->ctx, q->dev->local, STRATA__OP_ATTENTION_FWD) &&
         s->be->op_supported(s->ctx, q->dev->local, STRATA__OP_ATTENTION_BWD);
}

static int embedding_common(strata_queue_t q, enum strata__op_id id, strata_mem_t tokens, strata_mem_t table,
                            strata_mem_t rows, int64_t n, int64_t dim, int64_t vocab, int accumulate) {
  const char *name = op_names[id];
  int fwd = id == STRATA__OP_EMBEDDING_FWD;
  TRY(check_queue(q, id));
  TRY(positive(name, "n", n));
  TRY(positive(name, "dim", dim));
  TRY(positive(name, "vocab", vocab));
  uint64_t tsize, osize;
  TRY(product(name, vocab, dim, &tsize));
  TRY(product(name, n, dim, &osize));
  struct strata__op op = {.id = id};
  TRY(operand(q, &op, name, "tokens", tokens, (uint64_t)n, INDEX, &op.u.emb.tokens));
  TRY(operand(q, &op, name, fwd ? "table" : "dtable", table, tsize, FLOATS, fwd ? &op.u.emb.table : &op.u.emb.dtable));
  TRY(operand(q, &op, name, fwd ? "out" : "dout", rows, osize, FLOATS, fwd ? &op.u.emb.out : &op.u.emb.dout));
  op.u.emb.n = n;
  op.u.emb.dim = dim;
  op.u.emb.vocab = vocab;
  op.u.emb.accumulate = accumulate != 0;
  return submit(q, &op);
}

STRATA_API int strata_embedding_fwd(strata_queue_t q, strata_mem_t tokens, strata_mem_t table, strata_mem_t out,
                                    int64_t n, int64_t dim, int64_t vocab) {
  return embedding_common(q, STRATA__OP_EMBEDDING_FWD, tokens, table, out, n, dim, vocab, 0);
}

STRATA_API int strata_embedding_bwd(strata_queue_t q, strata_mem_t tokens, strata_mem_t dout, strata_mem_t dtable,
                                    int64_t n, int64_t dim, int64_t vocab, int accumulate) {
  return embedding_common(q, STRATA__OP_EMBEDDING_BWD, tokens, dtable, dout, n, dim, vocab, accumulate);
}

STRATA_API int strata_cross_entropy_fwd(strata_queue_t q, strata_mem_t logits, strata_mem_t targets, strata_mem_t loss,
                                        int64_t rows, int64_t vocab) {
  const char *name = "cross_entropy_fwd";
  TRY(check_queue(q, STRATA__OP_XENT_FWD));
  TRY(positive(name, "rows", rows));
  TRY(positive(name, "vocab", vocab));
  uint64_t total;
  TRY(product(name, rows, vocab, &total));
  struct strata__op op = {.id = STRATA__OP_XENT_FWD};
  TRY(operand(q, &op, name, "logits", logits, total, FLOATS, &op.u.xent.logits));
  TRY(operand(q, &op, name, "targets", targets, (uint64_t)rows, INDEX, &op.u.xent.targets));
  TRY(operand(q, &op, name, "loss", loss, (uint64_t)rows, FLOATS, &op.u.xent.loss));
  op.u.xent.rows = rows;
  op.u.xent.vocab = vocab;
  return submit(q, &op);
}

STRATA_API int strata_cross_entropy_bwd(strata_queue_t q, strata_mem_t logits, strata_mem_t targets,
                                        strata_mem_t dlogits, int64_t rows, int64_t vocab, float scale) {
  const char *name = "cross_entropy_bwd";
  TRY(check_queue(q, STRATA__OP_XENT_BWD));
  TRY(positive(name, "rows", rows));
  TRY(positive(name, "vocab", vocab));
  uint64_t total;
  TRY(product(name, rows, vocab, &total));
  struct strata__op op = {.id = STRATA__OP_XENT_BWD};
  TRY(operand(q, &op, name, "logits", logits, total, FLOATS, &op.u.xent.logits));
  TRY(operand(q, &op, name, "targets", targets, (uint64_t)rows, INDEX, &op.u.xent.targets));
  TRY(operand(q, &op, name, "dlogits", dlogits, total, FLOATS, &op.u.xent.dlogits));
  op.u.xent.rows = rows;
  op.u.xent.vocab = vocab;
  op.u.xent.scale = scale;
  return submit(q, &op);
}

/* The vocabulary slice [off, off + vl) must lie inside [0, vocab). */
static int vocab_slice(const char *op, int64_t off, int64_t vl, int64_t vocab) {
  if (off < 0 || off > vocab - vl)
    return strata__error(STRATA_ERR_SHAPE,
                         "%s: the slice [off, off + vl) = [%lld, %lld) must lie inside the vocabulary [0, %lld)", op,
                         (long long)off, (long long)off + (long long)vl, (long long)vocab);
  return STRATA_OK;
}

STRATA_API int strata_xent_vp_max(strata_queue_t q, strata_mem_t logits, strata_mem_t rowmax, int64_t rows,
                                  int64_t vl) {
  const char *name = "xent_vp_max";
  TRY(check_queue(q, STRATA__OP_XENT_VP_MAX));
  TRY(positive(name, "rows", rows));
  TRY(positive(name, "vl", vl));
  uint64_t total;
  TRY(product(name, rows, vl, &total));
  struct strata__op op = {.id = STRATA__OP_XENT_VP_MAX};
  TRY(operand(q, &op, name, "logits", logits, total, FLOATS, &op.u.xvp.logits));
  TRY(operand(q, &op, name, "rowmax", rowmax, (uint64_t)rows, FLOATS, &op.u.xvp.rowmax));
  op.u.xvp.rows = rows;
  op.u.xvp.vl = vl;
  return submit(q, &op);
}

STRATA_API int strata_xent_vp_sums(strata_queue_t q, strata_mem_t logits, strata_mem_t targets, strata_mem_t rowmax,
                                   strata_mem_t sumexp, strata_mem_t tlogit, int64_t rows, int64_t vl, int64_t off,
                                   int64_t vocab) {
  const char *name = "xent_vp_sums";
  TRY(check_queue(q, STRATA__OP_XENT_VP_SUMS));
  TRY(positive(name, "rows", rows));
  TRY(positive(name, "vl", vl));
  TRY(positive(name, "vocab", vocab));
  TRY(vocab_slice(name, off, vl, vocab));
  uint64_t total;
  TRY(product(name, rows, vl, &total));
  struct strata__op op = {.id = STRATA__OP_XENT_VP_SUMS};
  TRY(operand(q, &op, name, "logits", logits, total, FLOATS, &op.u.xvp.logits));
  TRY(operand(q, &op, name, "targets", targets, (uint64_t)rows, INDEX, &op.u.xvp.targets));
  TRY(operand(q, &op, name, "rowmax", rowmax, (uint64_t)rows, FLOATS, &op.u.xvp.rowmax));
  TRY(operand(q, &op, name, "sumexp", sumexp, (uint64_t)rows, FLOATS, &op.u.xvp.sumexp));
  TRY(operand(q, &op, name, "tlogit", tlogit, (uint64_t)rows, FLOATS, &op.u.xvp.tlogit));
  op.u.xvp.rows = rows;
  op.u.xvp.vl = vl;
  op.u.xvp.off = off;
  op.u.xvp.vocab = vocab;
  return submit(q, &op);
}

STRATA_API int strata_xent_vp_loss(strata_queue_t q, strata_mem_t rowmax, strata_mem_t sumexp, strata_mem_t tlogit,
                                   strata_mem_t targets, strata_mem_t loss, int64_t rows, int64_t vocab) {
  const char *name = "xent_vp_loss";
  TRY(check_queue(q, STRATA__OP_XENT_VP_LOSS));
  TRY(positive(name, "rows", rows));
  TRY(positive(name, "vocab", vocab));
  struct strata__op op = {.id = STRATA__OP_XENT_VP_LOSS};
  TRY(operand(q, &op, name, "rowmax", rowmax, (uint64_t)rows, FLOATS, &op.u.xvp.rowmax));
  TRY(operand(q, &op, name, "sumexp", sumexp, (uint64_t)rows, FLOATS, &op.u.xvp.sumexp));
  TRY(operand(q, &op, name, "tlogit", tlogit, (uint64_t)rows, FLOATS, &op.u.xvp.tlogit));
  TRY(operand(q, &op, name, "targets", targets, (uint64_t)rows, INDEX, &op.u.xvp.targets));
  TRY(operand(q, &op, name, "loss", loss, (uint64_t)rows, FLOATS, &op.u.xvp.loss));
  op.u.xvp.rows = rows;
  op.u.xvp.vocab = vocab;
  return submit(q, &op);
}

STRATA_API int strata_xent_vp_bwd(strata_queue_t q, strata_mem_t logits, strata_mem_t targets, strata_mem_t rowmax,
                                  strata_mem_t sumexp, strata_mem_t dlogits, int64_t rows, int64_t vl, int64_t off,
                                  int64_t vocab, float scale) {
  const char *name = "xent_vp_bwd";
  TRY(check_queue(q, STRATA__OP_XENT_VP_BWD));
  TRY(positive(name, "rows", rows));
  TRY(positive(name, "vl", vl));
  TRY(positive(name, "vocab", vocab));
  TRY(vocab_slice(name, off, vl, vocab));
  uint64_t total;
  TRY(product(name, rows, vl, &total));
  struct strata__op op = {.id = STRATA__OP_XENT_VP_BWD};
  TRY(operand(q, &op, name, "logits", logits, total, FLOATS, &op.u.xvp.logits));
  TRY(operand(q, &op, name, "targets", targets, (uint64_t)rows, INDEX, &op.u.xvp.targets));
  TRY(operand(q, &op, name, "rowmax", rowmax, (uint64_t)rows, FLOATS, &op.u.xvp.rowmax));
  TRY(operand(q, &op, name, "sumexp", sumexp, (uint64_t)rows, FLOATS, &op.u.xvp.sumexp));
  TRY(operand(q, &op, name, "dlogits", dlogits, total, FLOATS, &op.u.xvp.dlogits));
  op.u.xvp.rows = rows;
  op.u.xvp.vl = vl;
  op.u.xvp.off = off;
  op.u.xvp.vocab = vocab;
  op.u.xvp.scale = scale;
  return submit(q, &op);
}

STRATA_API int strata_tokens_shift(strata_queue_t q, strata_mem_t tokens, strata_mem_t out, int64_t n, int64_t off,
                                   int64_t count) {
  const char *name = "tokens_shift";
  TRY(check_queue(q, STRATA__OP_TOKENS_SHIFT));
  TRY(positive(name, "n", n));
  TRY(positive(name, "count", count));
  if (off < 0)
    return strata__error(STRATA_ERR_SHAPE, "tokens_shift: off = %lld, must not be negative", (long long)off);
  struct strata__op op = {.id = STRATA__OP_TOKENS_SHIFT};
  TRY(operand(q, &op, name, "tokens", tokens, (uint64_t)n, INDEX, &op.u.shift.tokens));
  TRY(operand(q, &op, name, "out", out, (uint64_t)n, INDEX, &op.u.shift.out));
  op.u.shift.n = n;
  op.u.shift.off = off;
  op.u.shift.count = count;
  return submit(q, &op);
}

/* The checks and the record of an AdamW op (plain or fused). */
static int adamw_record(strata_queue_t q, enum strata__op_id id, struct strata__op *op, strata_mem_t param,
                        strata_mem_t grad, strata_mem_t m, strata_mem_t v, int64_t n, float lr, float beta1,
                        float beta2, float eps, float weight_decay, int64_t step) {
  const char *name = op_names[id];
  TRY(check_queue(q, id));
  TRY(positive(name, "n", n));
  TRY(positive(name, "step", step));
  if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1) || !(eps > 0) || !(lr >= 0) || !(weight_decay >= 0))
    return strata__error(STRATA_ERR_INVALID,
                         "%s: need 0 <= beta1, beta2 < 1, eps > 0, lr >= 0, weight_decay >= 0 (got %g %g %g %g %g)",
                         name, beta1, beta2, eps, lr, weight_decay);
  *op = (struct strata__op){.id = id};
  TRY(operand(q, op, name, "param", param, (uint64_t)n, F32_ONLY, &op->u.adamw.param));
  TRY(operand(q, op, name, "grad", grad, (uint64_t)n, F32_ONLY, &op->u.adamw.grad));
  TRY(operand(q, op, name, "m", m, (uint64_t)n, F32_ONLY, &op->u.adamw.m));
  TRY(operand(q, op, name, "v", v, (uint64_t)n, F32_ONLY, &op->u.adamw.v));
  op->u.adamw.n = n;
  /* the bias corrections once for the whole update, so that every backend applies the same two floats */
  op->u.adamw.bc1 = 1.0f - powf(beta1, (float)step);
  op->u.adamw.bc2 = 1.0f - powf(beta2, (float)step);
  op->u.adamw.lr = lr;
  op->u.adamw.beta1 = beta1;
  op->u.adamw.beta2 = beta2;
  op->u.adamw.eps = eps;
  op->u.adamw.weight_decay = weight_decay;
  op->u.adamw.gscale = 1.0f;
  return STRATA_OK;
}

STRATA_API int strata_adamw(strata_queue_t q, strata_mem_t param, strata_mem_t grad, strata_mem_t m, strata_mem_t v,
                            int64_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                            int64_t step) {
  struct strata__op op;
  TRY(adamw_record(q, STRATA__OP_ADAMW, &op, param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, step));
  return submit(q, &op);
}

STRATA_API int strata_fused_optimizer_supported(strata_queue_t q) {
  if (!q)
    return 0;
  const struct strata__slot *s = q->dev->slot;
  return s->be->op_supported && s->be->op_supported(s->ctx, q->dev->local, STRATA__OP_ADAMW_FUSED) &&
         s->be->op_supported(s->ctx, q->dev->local, STRATA__OP_SUMSQ_SPANS);
}

STRATA_API int strata_adamw_fused(strata_queue_t q, strata_mem_t param, strata_mem_t grad, strata_mem_t m, strata_mem_t v,
                                  strata_mem_t param16, int64_t n, float gscale, float lr, float beta1, float beta2,
                                  float eps, float weight_decay, int64_t step) {
  struct strata__op op;
  TRY(adamw_record(q, STRATA__OP_ADAMW_FUSED, &op, param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay,
                   step));
  if (!isfinite(gscale))
    return strata__error(STRATA_ERR_INVALID, "adamw_fused: gradient scale %g is not a finite number", gscale);
  op.u.adamw.gscale = gscale;
  if (param16.buf)
    TRY(operand(q, &op, "adamw_fused", "param16", param16, (uint64_t)n, 1u << STRATA_BFLOAT16,
                &op.u.adamw.param16));
  return submit(q, &op);
}

STRATA_API int strata_sumsq_spans(strata_queue_t q, strata_mem_t x, int64_t extent, const int64_t *bounds,
                                  int64_t count, strata_mem_t out) {
  const char *name = "sumsq_spans";
  TRY(check_queue(q, STRATA__OP_SUMSQ_SPANS));
  TRY(positive(name, "extent", extent));
  TRY(positive(name, "count", count));
  if (!bounds)
    return strata__error(STRATA_ERR_INVALID, "sumsq_spans: bounds is NULL");
  for (int64_t t = 0; t < count; t++)
    if (bounds[2 * t] < 0 || bounds[2 * t + 1] < 0 || bounds[2 * t + 1] > extent - bounds[2 * t])
      return strata__error(STRATA_ERR_RANGE, "sumsq_spans: span %lld [%lld, +%lld) is outside the %lld elements",
                           (long long)t, (long long)bounds[2 * t], (long long)bounds[2 * t + 1], (long long)extent);
  struct strata__op op = {.id = STRATA__OP_SUMSQ_SPANS};
  TRY(operand(q, &op, name, "x", x, (uint64_t)extent, FLOATS, &op.u.spans.x));
  TRY(operand(q, &op, name, "out", out, (uint64_t)count, F32_ONLY, &op.u.spans.out));
  op.u.spans.count = count;
  op.u.spans.bounds = bounds;
  return submit(q, &op);
}

STRATA_API int strata_sumsq(strata_queue_t q, strata_mem_t x, int64_t n, strata_mem_t out, int accumulate) {
  const char *name = "sumsq";
  TRY(check_queue(q, STRATA__OP_SUMSQ));
  TRY(positive(name, "n", n));
  struct strata__op op = {.id = STRATA__OP_SUMSQ};
  TRY(operand(q, &op, name, "x", x, (uint64_t)n, FLOATS, &op.u.sumsq.x));
  TRY(operand(q, &op, name, "out", out, 1, F32_ONLY, &op.u.sumsq.out));
  op.u.sumsq.n = n;
  op.u.sumsq.accumulate = accumulate != 0;
  return submit(q, &op);
}

STRATA_API int strata_conv2d_shape(const struct strata_conv2d *g, int64_t *p, int64_t *qw, int64_t *workspace) {
  const char *name = "conv2d";
  if (!g)
    return strata__error(STRATA_ERR_INVALID, "conv2d: geometry is NULL");
  TRY(positive(name, "n", g->n));
  TRY(positive(name, "c", g->c));
  TRY(positive(name, "h", g->h));
  TRY(positive(name, "w", g->w));
  TRY(positive(name, "k", g->k));
  TRY(positive(name, "r", g->r));
  TRY(positive(name, "s", g->s));
  TRY(positive(name, "stride", g->stride));
  if (g->pad < 0 || g->pad >= g->r || g->pad >= g->s)
    return strata__error(STRATA_ERR_SHAPE, "conv2d: pad = %lld must lie in [0, filter size)", (long long)g->pad);
  if (g->h + 2 * g->pad < g->r || g->w + 2 * g->pad < g->s)
    return strata__error(STRATA_ERR_SHAPE, "conv2d: the %lldx%lld filter is larger than the padded %lldx%lld image",
                         (long long)g->r, (long long)g->s, (long long)g->h, (long long)g->w);
  int64_t pp = (g->h + 2 * g->pad - g->r) / g->stride + 1;
  int64_t qq = (g->w + 2 * g->pad - g->s) / g->stride + 1;
  uint64_t crs, pq, ws;
  TRY(product(name, g->c * g->r, g->s, &crs));
  TRY(product(name, pp, qq, &pq));
  TRY(product(name, (int64_t)crs, (int64_t)pq, &ws));
  if (p)
    *p = pp;
  if (qw)
    *qw = qq;
  if (workspace)
    *workspace = (int64_t)ws;
  return STRATA_OK;
}

/* The im2col/col2im record for image `i` of x (or dx). */
static int im2col_op(strata_queue_t q, enum strata__op_id id, const struct strata_conv2d *g, int64_t pp, int64_t qq,
                     strata_mem_t img, strata_mem_t work) {
  const char *name = op_names[id];
  TRY(check_queue(q, id));
  struct strata__op op = {.id = id};
  TRY(operand(q, &op, name, id == STRATA__OP_IM2COL ? "x" : "dx", img, (uint64_t)(g->c * g->h * g->w), FLOATS,
              &op.u.im2col.x));
  TRY(operand(q, &op, name, "work", work, (uint64_t)(g->c * g->r * g->s * pp * qq), FLOATS, &op.u.im2col.col));
  op.u.im2col.c = g->c;
  op.u.im2col.h = g->h;
  op.u.im2col.w = g->w;
  op.u.im2col.r = g->r;
  op.u.im2col.s = g->s;
  op.u.im2col.stride = g->stride;
  op.u.im2col.pad = g->pad;
  op.u.im2col.p = pp;
  op.u.im2col.q = qq;
  return submit(q, &op);
}

/* Check every conv operand up front so that no work is enqueued for a call that fails. */
static int conv_check(strata_queue_t q, const struct strata_conv2d *g, int64_t *pp, int64_t *qq, const char *name,
                      int nmem, const char *const *names, const strata_mem_t *mems, const uint64_t *counts) {
  if (!q)
    return strata__error(STRATA_ERR_INVALID, "%s: queue is NULL", name);
  int64_t ws;
  TRY(strata_conv2d_shape(g, pp, qq, &ws));
  TRY(check_queue(q, STRATA__OP_IM2COL));
  TRY(check_queue(q, STRATA__OP_GEMM));
  for (int i = 0; i < nmem; i++) {
    struct strata__mem tmp;
    uint64_t cnt = counts[i] ? counts[i] : (uint64_t)ws;
    TRY(operand(q, NULL, name, names[i], mems[i], cnt, FLOATS, &tmp));
  }
  /* mems[1..3] are w, y or dy, and work: the GEMMs multiply work by w (and dy), whose types must agree */
  int bwd = strcmp(names[2], "dy") == 0;
  if (mems[1].dtype != mems[3].dtype || (bwd && mems[2].dtype != mems[3].dtype))
    return strata__error(STRATA_ERR_INVALID, "%s: operands 'w'%s and 'work' must share a type (their GEMMs' A and B)",
                         name, bwd ? ", 'dy'" : "");
  return STRATA_OK;
}

/* Output rows [row0, row0 + rows) of a convolution of pp x qq outputs: in range and not empty. */
static int conv_rows_check(const char *name, int64_t pp, int64_t row0, int64_t rows) {
  if (row0 < 0 || rows < 1 || row0 > pp - rows)
    return strata__error(STRATA_ERR_SHAPE, "%s: output rows [%lld, %lld) are not within the %lld the image has", name,
                         (long long)row0, (long long)(row0 + rows), (long long)pp);
  return STRATA_OK;
}

/* The forward over output rows [row0, row0 + rows) of each image: the whole im2col matrix, its columns of those rows
** multiplied (ldb the matrix's width), each image's rows written rows x qq a plane. */
static int conv_fwd_rows(strata_queue_t q, const char *name, const struct strata_conv2d *g, int64_t row0, int64_t rows,
                         strata_mem_t x, strata_mem_t w, strata_mem_t y, strata_mem_t work) {
  int64_t pp, qq;
  TRY(strata_conv2d_shape(g, &pp, &qq, NULL));
  TRY(conv_rows_check(name, pp, row0, rows));
  uint64_t img = (uint64_t)(g->c * g->h * g->w), crs = (uint64_t)(g->c * g->r * g->s);
  const char *names[] = {"x", "w", "y", "work"};
  strata_mem_t mems[] = {x, w, y, work};
  uint64_t out = (uint64_t)(g->k * rows * qq);
  uint64_t counts[] = {img * (uint64_t)g->n, (uint64_t)g->k * crs, out * (uint64_t)g->n, 0};
  TRY(conv_check(q, g, &pp, &qq, name, 4, names, mems, counts));
  for (int64_t i = 0; i < g->n; i++) {
    TRY(im2col_op(q, STRATA__OP_IM2COL, g, pp, qq,
                  strata_mem_typed(x.buf, x.off + (size_t)(i * (int64_t)img), x.dtype), work));
    /* y_i (k x rows qq) = w (k x crs) * col's columns of the rows (crs x rows qq, pp qq apart) */
    TRY(strata_gemm(q, STRATA_NO_TRANS, STRATA_NO_TRANS, g->k, rows * qq, (int64_t)crs, 1.0f, w, (int64_t)crs, 0,
                    strata_mem_typed(work.buf, work.off + (size_t)(row0 * qq), work.dtype), pp * qq, 0, 0.0f,
                    strata_mem_typed(y.buf, y.off + (size_t)(i * (int64_t)out), y.dtype), rows * qq, 0, 1));
  }
  return STRATA_OK;
}

STRATA_API int strata_conv2d_fwd(strata_queue_t q, const struct strata_conv2d *g, strata_mem_t x, strata_mem_t w,
                                 strata_mem_t y, strata_mem_t work) {
  int64_t pp;
  if (!g)
    return strata__error(STRATA_ERR_INVALID, "conv2d_fwd: geometry is NULL");
  TRY(strata_conv2d_shape(g, &pp, NULL, NULL));
  return conv_fwd_rows(q, "conv2d_fwd", g, 0, pp, x, w, y, work);
}

STRATA_API int strata_conv2d_fwd_rows(strata_queue_t q, const struct strata_conv2d *g, int64_t row0, int64_t rows,
                                      strata_mem_t x, strata_mem_t w, strata_mem_t y, strata_mem_t work) {
  if (!g)
    return strata__error(STRATA_ERR_INVALID, "conv2d_fwd_rows: geometry is NULL");
  return conv_fwd_rows(q, "conv2d_fwd_rows", g, row0, rows, x, w, y, work);
}

STRATA_API int strata_conv2d_bwd_w_rows(strata_queue_t q, const struct strata_conv2d *g, int64_t row0, int64_t rows,
                                        strata_mem_t x, strata_mem_t dy, strata_mem_t dw, strata_mem_t work,
                                        int accumulate) {
  const char *name = "conv2d_bwd_w_rows";
  int64_t pp, qq;
  if (!g)
    return strata__error(STRATA_ERR_INVALID, "%s: geometry is NULL", name);
  TRY(strata_conv2d_shape(g, &pp, &qq, NULL));
  TRY(conv_rows_check(name, pp, row0, rows));
  uint64_t img = (uint64_t)(g->c * g->h * g->w), crs = (uint64_t)(g->c * g->r * g->s);
  uint64_t out = (uint64_t)(g->k * rows * qq);
  int64_t ws;
  TRY(strata_conv2d_shape(g, NULL, NULL, &ws));
  TRY(check_queue(q, STRATA__OP_IM2COL));
  TRY(check_queue(q, STRATA__OP_GEMM));
  const char *names[] = {"x", "dy", "dw", "work"};
  const strata_mem_t mems[] = {x, dy, dw, work};
  const uint64_t counts[] = {img * (uint64_t)g->n, out * (uint64_t)g->n, (uint64_t)g->k * crs, (uint64_t)ws};
  for (int i = 0; i < 4; i++) {
    struct strata__mem tmp;
    TRY(operand(q, NULL, name, names[i], mems[i], counts[i], FLOATS, &tmp));
  }
  if (dy.dtype != work.dtype) /* the GEMM's A and B */
    return strata__error(STRATA_ERR_INVALID, "%s: operands 'dy' and 'work' must share a type", name);
  for (int64_t i = 0; i < g->n; i++) {
    TRY(im2col_op(q, STRATA__OP_IM2COL, g, pp, qq,
                  strata_mem_typed(x.buf, x.off + (size_t)(i * (int64_t)img), x.dtype), work));
    /* dw (k x crs) (+)= dy_i (k x rows qq) * (col's columns of the rows)^T */
    float beta = (accumulate || i > 0) ? 1.0f : 0.0f;
    TRY(strata_gemm(q, STRATA_NO_TRANS, STRATA_TRANS, g->k, (int64_t)crs, rows * qq, 1.0f,
                    strata_mem_typed(dy.buf, dy.off + (size_t)(i * (int64_t)out), dy.dtype), rows * qq, 0,
                    strata_mem_typed(work.buf, work.off + (size_t)(row0 * qq), work.dtype), pp * qq, 0, beta, dw,
                    (int64_t)crs, 0, 1));
  }
  return STRATA_OK;
}

STRATA_API int strata_conv2d_bwd(strata_queue_t q, const struct strata_conv2d *g, strata_mem_t x, strata_mem_t w,
                                 strata_mem_t dy, strata_mem_t dx, strata_mem_t dw, strata_mem_t work,
                                 int accumulate) {
  int64_t pp, qq;
  if (!g)
    return strata__error(STRATA_ERR_INVALID, "conv2d_bwd: geometry is NULL");
  if (!dx.buf && !dw.buf)
    return strata__error(STRATA_ERR_INVALID, "conv2d_bwd: neither dx nor dw is wanted");
  TRY(strata_conv2d_shape(g, &pp, &qq, NULL));
  uint64_t img = (uint64_t)(g->c * g->h * g->w), crs = (uint64_t)(g->c * g->r * g->s);
  uint64_t out = (uint64_t)(g->k * pp * qq);
  const char *names[6] = {"x", "w", "dy", "work"};
  strata_mem_t mems[6] = {x, w, dy, work};
  uint64_t counts[6] = {img * (uint64_t)g->n, (uint64_t)g->k * crs, out * (uint64_t)g->n, 0};
  int nm = 4;
  if (dw.buf) {
    names[nm] = "dw";
    mems[nm] = dw;
    counts[nm++] = (uint64_t)g->k * crs;
  }
  if (dx.buf) {
    names[nm] = "dx";
    mems[nm] = dx;
    counts[nm++] = img * (uint64_t)g->n;
  }
  TRY(conv_check(q, g, &pp, &qq, "conv2d_bwd", nm, names, mems, counts));
  if (dx.buf)
    TRY(check_queue(q, STRATA__OP_COL2IM));
  for (int64_t i = 0; i < g->n; i++) {
    strata_mem_t dyi = strata_mem_typed(dy.buf, dy.off + (size_t)(i * (int64_t)out), dy.dtype);
    if (dw.buf) {
      TRY(im2col_op(q, STRATA__OP_IM2COL, g, pp, qq,
                    strata_mem_typed(x.buf, x.off + (size_t)(i * (int64_t)img), x.dtype), work));
      /* dw (k x crs) (+)= dy_i (k x pq) * col^T (pq x crs) */
      float beta = (accumulate || i > 0) ? 1.0f : 0.0f;
      TRY(strata_gemm(q, STRATA_NO_TRANS, STRATA_TRANS, g->k, (int64_t)crs, pp * qq, 1.0f, dyi, pp * qq, 0, work,
                      pp * qq, 0, beta, dw, (int64_t)crs, 0, 1));
    }
    if (dx.buf) {
      /* col (crs x pq) = w^T (crs x k) * dy_i (k x pq), then scatter back by gathering per pixel */
      TRY(strata_gemm(q, STRATA_TRANS, STRATA_NO_TRANS, (int64_t)crs, pp * qq, g->k, 1.0f, w, (int64_t)crs, 0, dyi,
                      pp * qq, 0, 0.0f, work, pp * qq, 0, 1));
      TRY(im2col_op(q, STRATA__OP_COL2IM, g, pp, qq,
                    strata_mem_typed(dx.buf, dx.off + (size_t)(i * (int64_t)img), dx.dtype), work));
    }
  }
  return STRATA_OK;
}

STRATA_API int strata_pool2d_shape(const struct strata_pool2d *g, int64_t *p, int64_t *qw) {
  const char *name = "maxpool";
  if (!g)
    return strata__error(STRATA_ERR_INVALID, "maxpool: geometry is NULL");
  TRY(positive(name, "n", g->n));
  TRY(positive(name, "c", g->c));
  TRY(positive(name, "h", g->h));
  TRY(positive(name, "w", g->w));
  TRY(positive(name, "size", g->size));
  TRY(positive(name, "stride", g->stride));
  if (g->size > g->h || g->size > g->w)
    return strata__error(STRATA_ERR_SHAPE, "maxpool: window %lld is larger than the %lldx%lld image",
                         (long long)g->size, (long long)g->h, (long long)g->w);
  if (p)
    *p = (g->h - g->size) / g->stride + 1;
  if (qw)
    *qw = (g->w - g->size) / g->stride + 1;
  return STRATA_OK;
}

static int maxpool_common(strata_queue_t q, enum strata__op_id id, const struct strata_pool2d *g, strata_mem_t big,
                          strata_mem_t small, strata_mem_t idx) {
  const char *name = op_names[id];
  int fwd = id == STRATA__OP_MAXPOOL_FWD;
  int64_t pp, qq;
  TRY(check_queue(q, id));
  TRY(strata_pool2d_shape(g, &pp, &qq));
  uint64_t planes, in, out;
  TRY(product(name, g->n, g->c, &planes));
  TRY(product(name, (int64_t)planes, g->h * g->w, &in));
  TRY(product(name, (int64_t)planes, pp * qq, &out));
  struct strata__op op = {.id = id};
  TRY(operand(q, &op, name, fwd ? "x" : "dx", big, in, FLOATS, fwd ? &op.u.pool.x : &op.u.pool.dx));
  TRY(operand(q, &op, name, fwd ? "y" : "dy", small, out, FLOATS, fwd ? &op.u.pool.y : &op.u.pool.dy));
  TRY(operand(q, &op, name, "idx", idx, out, INDEX, &op.u.pool.idx));
  op.u.pool.planes = (int64_t)planes;
  op.u.pool.h = g->h;
  op.u.pool.w = g->w;
  op.u.pool.size = g->size;
  op.u.pool.stride = g->stride;
  op.u.pool.p = pp;
  op.u.pool.q = qq;
  return submit(q, &op);
}

STRATA_API int strata_maxpool_fwd(strata_queue_t q, const struct strata_pool2d *g, strata_mem_t x, strata_mem_t y,
                                  strata_mem_t idx) {
  return maxpool_common(q, STRATA__OP_MAXPOOL_FWD, g, x, y, idx);
}

STRATA_API int strata_maxpool_bwd(strata_queue_t q, const struct strata_pool2d *g, strata_mem_t dy, strata_mem_t idx,
                                  strata_mem_t dx) {
  return maxpool_common(q, STRATA__OP_MAXPOOL_BWD, g, dx, dy, idx);
}
