/* SPDX-License-Identifier: MIT */
/* ops.c — the OpenCL backend's ops: kernels of kernels/ops.k launched on a queue, GEMM through CLBlast or, on CPU
** devices, kernels/gemm.k. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>

#include <CL/cl.h>
#include <clblast_c.h>

#include <strata/comm.h>

#include "opencl.h"

const char *const strata__ocl_kernel_names[STRATA__OCL_K_COUNT] = {
#define STRATA__OCL_K_NAME(id, name) [STRATA__OCL_K_##id] = name,
    STRATA__OCL_KERNEL_MAP(STRATA__OCL_K_NAME)
#undef STRATA__OCL_K_NAME
};

/* Work-items are launched in multiples of this; kernels return past their count. */
#define STRATA__OCL_ROUND 64

/*
** The buffer-type mask of a launch (kernels/dialect.h): bit i set when the
** i-th buffer argument ('m' or 'c') is a bfloat16 operand. `fmt` and `ap`
** as for set_args; ap is consumed.
*/
static unsigned buffer_mask(const char *fmt, va_list ap) {
  unsigned mask = 0, pos = 0;
  for (const char *f = fmt; *f; f++) {
    switch (*f) {
    case 'm': {
      const struct strata__mem *m = va_arg(ap, const struct strata__mem *);
      if (m->dtype == STRATA_BFLOAT16)
        mask |= 1u << pos;
      pos++;
      break;
    }
    case 'c':
      (void)va_arg(ap, cl_mem);
      pos++;
      break;
    case 'l':
      (void)va_arg(ap, int64_t);
      break;
    case 'f':
      (void)va_arg(ap, double);
      break;
    default:
      (void)va_arg(ap, int);
      break;
    }
  }
  return mask;
}

/*
** Set the arguments of kernel `kid` of queue `q` from `ap`, in the variant
** for the types of its buffers, returned in *kout. `fmt` gives one letter
** per argument of the kernel's parameter list in kernels/ops.k:
**   'm'  const struct strata__mem *  -> (cl_mem, cl_long element offset of the mem's type)
**   'c'  cl_mem (float32 scratch)    -> (cl_mem, cl_long 0)
**   'l'  int64_t                     -> cl_long
**   'f'  double (a promoted float)   -> cl_float
**   'i'  int                         -> cl_int
*/
static int set_args(struct strata__ocl *ocl, struct strata__ocl_queue *q, enum strata__ocl_kernel kid, cl_kernel *kout,
                    const char *fmt, va_list ap) {
  va_list scan;
  va_copy(scan, ap);
  unsigned mask = buffer_mask(fmt, scan);
  va_end(scan);
  cl_kernel k;
  int rc = strata__ocl_kernel(ocl, q, kid, mask, &k);
  if (rc)
    return rc;
  *kout = k;
  cl_uint arg = 0;
  cl_int err = CL_SUCCESS;
  for (const char *f = fmt; *f && err == CL_SUCCESS; f++) {
    switch (*f) {
    case 'm': {
      const struct strata__mem *m = va_arg(ap, const struct strata__mem *);
      const struct strata__ocl_buffer *b = m->h;
      cl_long off = (cl_long)m->off;
      err = clSetKernelArg(k, arg++, sizeof(cl_mem), &b->mem);
      if (err == CL_SUCCESS)
        err = clSetKernelArg(k, arg++, sizeof off, &off);
      break;
    }
    case 'c': {
      cl_mem mem = va_arg(ap, cl_mem);
      cl_long off = 0;
      err = clSetKernelArg(k, arg++, sizeof(cl_mem), &mem);
      if (err == CL_SUCCESS)
        err = clSetKernelArg(k, arg++, sizeof off, &off);
      break;
    }
    case 'l': {
      cl_long v = (cl_long)va_arg(ap, int64_t);
      err = clSetKernelArg(k, arg++, sizeof v, &v);
      break;
    }
    case 'f': {
      cl_float v = (cl_float)va_arg(ap, double);
      err = clSetKernelArg(k, arg++, sizeof v, &v);
      break;
    }
    case 'i': {
      cl_int v = (cl_int)va_arg(ap, int);
      err = clSetKernelArg(k, arg++, sizeof v, &v);
      break;
    }
    default:
      return ocl->svc->error(STRATA_ERR_INTERNAL, "opencl: bad argument letter '%c' for %s", *f,
                             strata__ocl_kernel_names[kid]);
    }
  }
  if (err != CL_SUCCESS) {
    char what[256];
    snprintf(what, sizeof what, "clSetKernelArg(%s, argument %u)", strata__ocl_kernel_names[kid], arg - 1);
    return strata__ocl_fail(ocl, err, what);
  }
  return STRATA_OK;
}

/* Enqueue kernel `k` (a variant of `kid`) over `global` work-items in work-groups of `local`
** (0: the implementation's choice). */
static int enqueue(struct strata__ocl *ocl, struct strata__ocl_queue *q, enum strata__ocl_kernel kid, cl_kernel k,
                   size_t global, size_t local) {
  cl_int err = clEnqueueNDRangeKernel(q->q, k, 1, NULL, &global, local ? &local : NULL, 0, NULL, NULL);
  if (err != CL_SUCCESS) {
    char what[256];
    snprintf(what, sizeof what, "clEnqueueNDRangeKernel(%s, %zu items, work-groups of %zu) on %s",
             strata__ocl_kernel_names[kid], global, local, q->dev->info.name);
    return strata__ocl_fail(ocl, err, what);
  }
  return STRATA_OK;
}

/* Set the arguments (see set_args) and enqueue kernel `kid` over `items`
** work-items, rounded up (nothing is enqueued when items is 0). */
static int launch(struct strata__ocl *ocl, struct strata__ocl_queue *q, enum strata__ocl_kernel kid, int64_t items,
                  const char *fmt, ...) {
  va_list ap;
  cl_kernel k = NULL;
  va_start(ap, fmt);
  int rc = set_args(ocl, q, kid, &k, fmt, ap);
  va_end(ap);
  if (rc || items <= 0)
    return rc;
  return enqueue(ocl, q, kid, k, (size_t)((items + STRATA__OCL_ROUND - 1) / STRATA__OCL_ROUND * STRATA__OCL_ROUND),
                 0);
}

/* The same for a kernel that cooperates in work-groups ("Work-groups: ..."
** in kernels/ops.k): `groups` work-groups of `wg` items. */
static int launch_groups_of(struct strata__ocl *ocl, struct strata__ocl_queue *q, enum strata__ocl_kernel kid,
                            int64_t groups, size_t wg, const char *fmt, va_list ap) {
  cl_kernel k = NULL;
  int rc = set_args(ocl, q, kid, &k, fmt, ap);
  if (rc || groups <= 0)
    return rc;
  return enqueue(ocl, q, kid, k, (size_t)groups * wg, wg);
}

/* launch_groups_of with the queue's size q->wg. */
static int launch_groups(struct strata__ocl *ocl, struct strata__ocl_queue *q, enum strata__ocl_kernel kid,
                         int64_t groups, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int rc = launch_groups_of(ocl, q, kid, groups, q->wg, fmt, ap);
  va_end(ap);
  return rc;
}

/*
** The work-group size of the attention kernels (kernels/attention.k, whose
** results do not depend on it): the queue's, but at least 4. PoCL 3.1
** fails an assertion compiling them for work-groups of 1 or 2 items (its
** work-item replication); every OpenCL device takes 4.
*/
static size_t attn_wg(const struct strata__ocl_queue *q) { return q->wg < 4 ? 4 : q->wg; }

/* launch_groups_of with attn_wg(q). */
static int launch_attn(struct strata__ocl *ocl, struct strata__ocl_queue *q, enum strata__ocl_kernel kid,
                       int64_t groups, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int rc = launch_groups_of(ocl, q, kid, groups, attn_wg(q), fmt, ap);
  va_end(ap);
  return rc;
}

/* Work-groups of the column reductions (kernels/ops.k, "column tiles"): tiles of min(wg, 32) columns. */
static int64_t col_groups(const struct strata__ocl_queue *q, int64_t cols) {
  const int64_t cw = q->wg < 32 ? (int64_t)q->wg : 32;
  return (cols + cw - 1) / cw;
}

/* Name of a CLBlast status; OpenCL codes (>= -1000 and the KHR ones) by their CL name. */
static const char *clblast_name(CLBlastStatusCode st) {
  switch (st) {
  case CLBlastNotImplemented:
    return "CLBlastNotImplemented";
  case CLBlastInvalidMatrixA:
    return "CLBlastInvalidMatrixA";
  case CLBlastInvalidMatrixB:
    return "CLBlastInvalidMatrixB";
  case CLBlastInvalidMatrixC:
    return "CLBlastInvalidMatrixC";
  case CLBlastInvalidDimension:
    return "CLBlastInvalidDimension";
  case CLBlastInvalidLeadDimA:
    return "CLBlastInvalidLeadDimA";
  case CLBlastInvalidLeadDimB:
    return "CLBlastInvalidLeadDimB";
  case CLBlastInvalidLeadDimC:
    return "CLBlastInvalidLeadDimC";
  case CLBlastInsufficientMemoryA:
    return "CLBlastInsufficientMemoryA";
  case CLBlastInsufficientMemoryB:
    return "CLBlastInsufficientMemoryB";
  case CLBlastInsufficientMemoryC:
    return "CLBlastInsufficientMemoryC";
  case CLBlastInsufficientMemoryTemp:
    return "CLBlastInsufficientMemoryTemp";
  case CLBlastInvalidBatchCount:
    return "CLBlastInvalidBatchCount";
  case CLBlastInvalidLocalMemUsage:
    return "CLBlastInvalidLocalMemUsage";
  case CLBlastDatabaseError:
    return "CLBlastDatabaseError";
  case CLBlastUnknownError:
    return "CLBlastUnknownError";
  case CLBlastUnexpectedError:
    return "CLBlastUnexpectedError";
  default:
    return strata__ocl_err_name((cl_int)st);
  }
}

/* Make one of the queue's scratch buffers (*mem, of *have bytes) hold at least `bytes`; `what` names it. */
static int scratch(struct strata__ocl *ocl, struct strata__ocl_queue *q, cl_mem *mem, size_t *have, size_t bytes,
                   const char *what) {
  if (*mem && *have >= bytes)
    return STRATA_OK;
  if (*mem) {
    /* the queue is in order: commands already enqueued keep the old buffer alive until they are done */
    clReleaseMemObject(*mem);
    *mem = NULL;
    *have = 0;
  }
  cl_int err;
  *mem = clCreateBuffer(q->dev->platform->context, CL_MEM_READ_WRITE, bytes, NULL, &err);
  if (err != CL_SUCCESS) {
    *mem = NULL;
    char msg[256];
    snprintf(msg, sizeof msg, "clCreateBuffer of %zu bytes for %s on %s", bytes, what, q->dev->info.name);
    return strata__ocl_fail(ocl, err, msg);
  }
  *have = bytes;
  return STRATA_OK;
}

/* Make the queue's transpose scratch hold at least `bytes`. */
static int gemm_tmp(struct strata__ocl *ocl, struct strata__ocl_queue *q, size_t bytes) {
  return scratch(ocl, q, &q->gemm_tmp, &q->gemm_tmp_bytes, bytes, "a GEMM's transposed operand");
}

/* Set the arguments (see set_args) and enqueue kernel `kid` over a 3-D range. */
static int launch3(struct strata__ocl *ocl, struct strata__ocl_queue *q, enum strata__ocl_kernel kid,
                   const size_t global[3], const char *fmt, ...) {
  va_list ap;
  cl_kernel k = NULL;
  va_start(ap, fmt);
  int rc = set_args(ocl, q, kid, &k, fmt, ap);
  va_end(ap);
  if (rc)
    return rc;
  cl_int err = clEnqueueNDRangeKernel(q->q, k, 3, NULL, global, NULL, 0, NULL, NULL);
  if (err != CL_SUCCESS) {
    char what[256];
    snprintf(what, sizeof what, "clEnqueueNDRangeKernel(%s, %zu x %zu x %zu items) on %s",
             strata__ocl_kernel_names[kid], global[0], global[1], global[2], q->dev->info.name);
    return strata__ocl_fail(ocl, err, what);
  }
  return STRATA_OK;
}

#define GEMM_TRY(expr)                                                                                                 \
  do {                                                                                                                 \
    int rc_ = (expr);                                                                                                  \
    if (rc_)                                                                                                           \
      return rc_;                                                                                                      \
  } while (0)

/* Tiles of kernels/gemm.k (STRATA_GEMM_TM x STRATA_GEMM_TN). */
#define GEMM_TM 8
#define GEMM_TN 32

/*
** GEMM through kernels/gemm.k, for CPU devices, where CLBlast's tiles in
** local memory run several times slower. A transposed B is first copied
** to k x n in the queue's scratch (once when every batch item shares it).
*/
static int gemm_strata(struct strata__ocl *ocl, struct strata__ocl_queue *q,
                       const __typeof__(((struct strata__op *)0)->u.gemm) *g) {
  if (g->m > INT32_MAX || g->n > INT32_MAX || g->k > INT32_MAX)
    return ocl->svc->error(STRATA_ERR_RANGE, "opencl: GEMM of %lld x %lld x %lld is too large for one launch",
                           (long long)g->m, (long long)g->n, (long long)g->k);
  struct strata__mem b = g->b;
  int64_t ldb = g->ldb, sb = g->stride_b;
  struct strata__ocl_buffer tmp = {NULL, q->dev}; /* the scratch as an operand, for a transposed B */
  if (g->trans_b) {
    const int64_t copies = g->stride_b == 0 ? 1 : g->batch;
    GEMM_TRY(gemm_tmp(ocl, q, (size_t)(copies * g->k * g->n) * sizeof(float)));
    const size_t tg[3] = {(size_t)g->k, (size_t)g->n, (size_t)copies};
    GEMM_TRY(launch3(ocl, q, STRATA__OCL_K_GEMM_TRANSPOSE, tg, "iimllc", (int)g->n, (int)g->k, &g->b, g->ldb,
                     g->stride_b, q->gemm_tmp));
    tmp.mem = q->gemm_tmp;
    b = (struct strata__mem){&tmp, 0, 0 /* float32 */};
    ldb = g->n;
    sb = g->stride_b == 0 ? 0 : g->k * g->n;
  }
  const enum strata__ocl_kernel kid = g->trans_a ? STRATA__OCL_K_GEMM_CPU_TA : STRATA__OCL_K_GEMM_CPU;
  const size_t gl[3] = {(size_t)((g->m + GEMM_TM - 1) / GEMM_TM), (size_t)((g->n + GEMM_TN - 1) / GEMM_TN),
                        (size_t)g->batch};
  return launch3(ocl, q, kid, gl, "iiifmllmllfmll", (int)g->m, (int)g->n, (int)g->k, (double)g->alpha, &g->a, g->lda,
                 g->stride_a, &b, ldb, sb, (double)g->beta, &g->c, g->ldc, g->stride_c);
}

/* Elements spanned by `batch` rows x cols matrices with row stride ld and batch stride `stride`. */
static int64_t span(int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t batch) {
  return (batch - 1) * stride + (rows - 1) * ld + cols;
}

/*
** A float32 copy of operand `m` (n elements from its offset; bfloat16) in
** the queue's staging buffer `slot`, as the operand *out; `widen` 0 only
** makes room (an output that is not read).
*/
static int stage_f32(struct strata__ocl *ocl, struct strata__ocl_queue *q, int slot, const struct strata__mem *m,
                     int64_t n, int widen, struct strata__ocl_buffer *buf, struct strata__mem *out) {
  int rc = scratch(ocl, q, &q->stage[slot], &q->stage_bytes[slot], (size_t)n * sizeof(float),
                   "a float32 copy of a bf16 operand");
  if (rc)
    return rc;
  *buf = (struct strata__ocl_buffer){q->stage[slot], q->dev};
  *out = (struct strata__mem){buf, 0, STRATA_FLOAT32};
  return widen ? launch(ocl, q, STRATA__OCL_K_CONVERT, n, "mml", m, out, n) : STRATA_OK;
}

/*
** CLBlast has no bfloat16 GEMM: bfloat16 operands are widened into
** float32 copies (each whole span, so that C's gaps between rows, other
** matrices' elements, go back as they were: widening and rounding back
** keep every bfloat16 value but a signalling NaN's quiet bit and
** denormals, which strata never stores), the float32 GEMM runs on them,
** and a bfloat16 C is rounded back once. Said once per device in the log.
*/
static int gemm_clblast(struct strata__ocl *ocl, struct strata__ocl_queue *q,
                        const __typeof__(((struct strata__op *)0)->u.gemm) *g);

/*
** GEMM through CLBlast (row-major, offsets in elements). CLBlast refuses
** empty dimensions, so m, n or batch 0 do nothing and k = 0 scales C by
** beta (fills it with 0 when beta is 0). CLBlast itself ignores C when
** beta is 0 (checked with NaN in C, direct and indirect kernels).
*/
static int op_gemm(struct strata__ocl *ocl, struct strata__ocl_queue *q, const struct strata__op *op) {
  const __typeof__(op->u.gemm) *g = &op->u.gemm;
  int rc;
  if (g->m <= 0 || g->n <= 0 || g->batch <= 0)
    return STRATA_OK;
  if (g->k <= 0) {
    for (int64_t b = 0; b < g->batch; b++) {
      if (g->ldc == g->n) {
        struct strata__mem c = {g->c.h, g->c.off + (size_t)(b * g->stride_c), g->c.dtype};
        rc = g->beta == 0.0f ? launch(ocl, q, STRATA__OCL_K_FILL, g->m * g->n, "mfl", &c, 0.0, g->m * g->n)
                             : launch(ocl, q, STRATA__OCL_K_SCALE, g->m * g->n, "mfl", &c, (double)g->beta, g->m * g->n);
        if (rc)
          return rc;
        continue;
      }
      for (int64_t r = 0; r < g->m; r++) {
        struct strata__mem c = {g->c.h, g->c.off + (size_t)(b * g->stride_c + r * g->ldc), g->c.dtype};
        rc = g->beta == 0.0f ? launch(ocl, q, STRATA__OCL_K_FILL, g->n, "mfl", &c, 0.0, g->n)
                             : launch(ocl, q, STRATA__OCL_K_SCALE, g->n, "mfl", &c, (double)g->beta, g->n);
        if (rc)
          return rc;
      }
    }
    return STRATA_OK;
  }
  if (strata__ocl_gemm_ours(ocl, q->dev))
    return gemm_strata(ocl, q, g);
  if (op->dtypes & STRATA__DTYPES_BF16)
    return gemm_clblast(ocl, q, g);
  const struct strata__ocl_buffer *a = g->a.h, *bb = g->b.h, *c = g->c.h;
  CLBlastTranspose ta = g->trans_a ? CLBlastTransposeYes : CLBlastTransposeNo;
  CLBlastTranspose tb = g->trans_b ? CLBlastTransposeYes : CLBlastTransposeNo;
  cl_command_queue cq = q->q;
  CLBlastStatusCode st;
  const char *fn;
  if (g->batch == 1) {
    fn = "CLBlastSgemm";
    st = CLBlastSgemm(CLBlastLayoutRowMajor, ta, tb, (size_t)g->m, (size_t)g->n, (size_t)g->k, g->alpha, a->mem,
                      g->a.off, (size_t)g->lda, bb->mem, g->b.off, (size_t)g->ldb, g->beta, c->mem, g->c.off,
                      (size_t)g->ldc, &cq, NULL);
  } else {
    fn = "CLBlastSgemmStridedBatched";
    st = CLBlastSgemmStridedBatched(CLBlastLayoutRowMajor, ta, tb, (size_t)g->m, (size_t)g->n, (size_t)g->k, g->alpha,
                                    a->mem, g->a.off, (size_t)g->lda, (size_t)g->stride_a, bb->mem, g->b.off,
                                    (size_t)g->ldb, (size_t)g->stride_b, g->beta, c->mem, g->c.off, (size_t)g->ldc,
                                    (size_t)g->stride_c, (size_t)g->batch, &cq, NULL);
  }
  if (st != CLBlastSuccess) {
    int status = st == CLBlastInsufficientMemoryTemp || st == (CLBlastStatusCode)CL_MEM_OBJECT_ALLOCATION_FAILURE
                     ? STRATA_ERR_DEVICE_MEMORY
                     : STRATA_ERR_BACKEND;
    return ocl->svc->error(status,
                           "opencl: %s (m=%lld n=%lld k=%lld batch=%lld) on %s: %s (%d)", fn, (long long)g->m,
                           (long long)g->n, (long long)g->k, (long long)g->batch, q->dev->info.name, clblast_name(st),
                           (int)st);
  }
  return STRATA_OK;
}

static int gemm_clblast(struct strata__ocl *ocl, struct strata__ocl_queue *q,
                        const __typeof__(((struct strata__op *)0)->u.gemm) *g) {
  if (!__atomic_exchange_n(&q->dev->bf16_gemm_said, 1, __ATOMIC_RELAXED))
    ocl->svc->log(STRATA_LOG_INFO, "opencl",
                  "bf16 GEMMs on %s run in float32 on converted operands (CLBlast has no bf16 GEMM)",
                  q->dev->info.name);
  struct strata__op f = {.id = STRATA__OP_GEMM, .dtypes = 1u << STRATA_FLOAT32};
  f.u.gemm = *g;
  struct strata__ocl_buffer bufs[3];
  const struct strata__mem *src[3] = {&g->a, &g->b, &g->c};
  struct strata__mem *dst[3] = {&f.u.gemm.a, &f.u.gemm.b, &f.u.gemm.c};
  const int64_t n[3] = {span(g->trans_a ? g->k : g->m, g->trans_a ? g->m : g->k, g->lda, g->stride_a, g->batch),
                        span(g->trans_b ? g->n : g->k, g->trans_b ? g->k : g->n, g->ldb, g->stride_b, g->batch),
                        span(g->m, g->n, g->ldc, g->stride_c, g->batch)};
  int rc;
  for (int i = 0; i < 3; i++)
    if (src[i]->dtype == STRATA_BFLOAT16 && (rc = stage_f32(ocl, q, i, src[i], n[i], 1, &bufs[i], dst[i])) != 0)
      return rc;
  if ((rc = op_gemm(ocl, q, &f)) != 0)
    return rc;
  if (g->c.dtype == STRATA_BFLOAT16)
    return launch(ocl, q, STRATA__OCL_K_CONVERT, n[2], "mml", dst[2], &g->c, n[2]);
  return STRATA_OK;
}

/* y = x in y's type: a byte copy when the types agree (nothing when x is y), else the kernel. */
static int op_convert(struct strata__ocl *ocl, struct strata__ocl_queue *q, const struct strata__op *op) {
  const __typeof__(op->u.ew) *o = &op->u.ew;
  if (o->x.dtype != o->y.dtype)
    return launch(ocl, q, STRATA__OCL_K_CONVERT, o->n, "mml", &o->x, &o->y, o->n);
  const size_t size = o->x.dtype == STRATA_BFLOAT16 ? 2 : 4;
  const struct strata__ocl_buffer *x = o->x.h, *y = o->y.h;
  if (x == y && o->x.off == o->y.off)
    return STRATA_OK;
  cl_int err = clEnqueueCopyBuffer(q->q, x->mem, y->mem, o->x.off * size, o->y.off * size, (size_t)o->n * size, 0,
                                   NULL, NULL);
  if (err != CL_SUCCESS)
    return strata__ocl_fail(ocl, err, "clEnqueueCopyBuffer (convert between operands of one type)");
  return STRATA_OK;
}

/*
** dtable (+)= scatter of dout: zeroed first unless the op accumulates (a
** float32 or bfloat16 zero is all-zero bytes), then one work-group per
** position, the first position of each token summing its rows in token
** order (kernels/ops.k), each entry read and written once.
*/
static int op_embedding_bwd(struct strata__ocl *ocl, struct strata__ocl_queue *q, const struct strata__op *op) {
  const __typeof__(op->u.emb) *o = &op->u.emb;
  int rc;
  if (!o->accumulate && o->vocab * o->dim > 0) {
    const struct strata__ocl_buffer *b = o->dtable.h;
    const size_t size = o->dtable.dtype == STRATA_BFLOAT16 ? 2 : 4;
    const cl_ushort z = 0;
    cl_int err = clEnqueueFillBuffer(q->q, b->mem, &z, sizeof z, o->dtable.off * size,
                                     (size_t)(o->vocab * o->dim) * size, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
      char what[256];
      snprintf(what, sizeof what, "clEnqueueFillBuffer of an embedding gradient on %s", q->dev->info.name);
      return strata__ocl_fail(ocl, err, what);
    }
  }
  rc = launch_groups(ocl, q, STRATA__OCL_K_EMBEDDING_BWD, o->n, "mmmlll", &o->tokens, &o->dout, &o->dtable, o->n,
                     o->dim, o->vocab);
  return rc;
}

int strata__ocl_op(void *ctx, void *queue, const struct strata__op *op) {
  struct strata__ocl *ocl = ctx;
  struct strata__ocl_queue *q = queue;
  int rc;
  /* operands of either float type: each launch picks the kernels' variant for its buffers' types (set_args) */
  switch (op->id) {
  case STRATA__OP_GEMM:
    return op_gemm(ocl, q, op);
  case STRATA__OP_BIAS_ADD: {
    const __typeof__(op->u.bias) *o = &op->u.bias;
    return launch(ocl, q, STRATA__OCL_K_BIAS_ADD, o->rows * o->cols, "mmll", &o->y, &o->bias, o->rows, o->cols);
  }
  case STRATA__OP_BIAS_GRAD: {
    const __typeof__(op->u.bias) *o = &op->u.bias;
    return launch_groups(ocl, q, STRATA__OCL_K_BIAS_GRAD, col_groups(q, o->cols), "mmlli", &o->y, &o->bias, o->rows,
                         o->cols, o->accumulate);
  }
  case STRATA__OP_GELU_FWD:
  case STRATA__OP_RELU_FWD: {
    const __typeof__(op->u.ew) *o = &op->u.ew;
    return launch(ocl, q, op->id == STRATA__OP_GELU_FWD ? STRATA__OCL_K_GELU_FWD : STRATA__OCL_K_RELU_FWD, o->n,
                  "mml", &o->x, &o->y, o->n);
  }
  case STRATA__OP_GELU_BWD:
  case STRATA__OP_RELU_BWD: {
    const __typeof__(op->u.ew) *o = &op->u.ew;
    return launch(ocl, q, op->id == STRATA__OP_GELU_BWD ? STRATA__OCL_K_GELU_BWD : STRATA__OCL_K_RELU_BWD, o->n,
                  "mmml", &o->x, &o->dy, &o->dx, o->n);
  }
  case STRATA__OP_ADD: {
    const __typeof__(op->u.ew) *o = &op->u.ew;
    return launch(ocl, q, STRATA__OCL_K_ADD, o->n, "mmml", &o->x, &o->b, &o->y, o->n);
  }
  case STRATA__OP_REDUCE: {
    const __typeof__(op->u.reduce) *o = &op->u.reduce;
    /* the record's dtype types all three operands (their own dtype fields are not set) */
    struct strata__mem a = o->a, b = o->b, y = o->y;
    a.dtype = b.dtype = y.dtype = o->dtype == STRATA_BFLOAT16 ? STRATA_BFLOAT16 : STRATA_FLOAT32;
    return launch(ocl, q, o->dtype == STRATA_INT32 ? STRATA__OCL_K_REDUCE_I32 : STRATA__OCL_K_REDUCE_F32, o->n,
                  "mmmli", &a, &b, &y, o->n, o->op);
  }
  case STRATA__OP_CONVERT:
    return op_convert(ocl, q, op);
  case STRATA__OP_SCALE: {
    const __typeof__(op->u.ew) *o = &op->u.ew;
    return launch(ocl, q, STRATA__OCL_K_SCALE, o->n, "mfl", &o->x, (double)o->alpha, o->n);
  }
  case STRATA__OP_FILL: {
    const __typeof__(op->u.ew) *o = &op->u.ew;
    return launch(ocl, q, STRATA__OCL_K_FILL, o->n, "mfl", &o->x, (double)o->alpha, o->n);
  }
  case STRATA__OP_LAYERNORM_FWD: {
    const __typeof__(op->u.ln) *o = &op->u.ln;
    return launch_groups(ocl, q, STRATA__OCL_K_LAYERNORM_FWD, o->rows, "mmmmmmllf", &o->x, &o->gamma, &o->beta, &o->y,
                  &o->mean, &o->rstd, o->rows, o->cols, (double)o->eps);
  }
  case STRATA__OP_LAYERNORM_BWD: {
    const __typeof__(op->u.ln) *o = &op->u.ln;
    /* dgamma/dbeta first: dx may overwrite dy */
    rc = launch_groups(ocl, q, STRATA__OCL_K_LAYERNORM_BWD_DPARAMS, col_groups(q, o->cols), "mmmmmmlli", &o->x,
                       &o->mean, &o->rstd, &o->dy, &o->dgamma, &o->dbeta, o->rows, o->cols, o->accumulate);
    if (rc)
      return rc;
    return launch_groups(ocl, q, STRATA__OCL_K_LAYERNORM_BWD_DX, o->rows, "mmmmmmll", &o->x, &o->gamma, &o->mean,
                         &o->rstd, &o->dy, &o->dx, o->rows, o->cols);
  }
  case STRATA__OP_SOFTMAX_FWD: {
    const __typeof__(op->u.softmax) *o = &op->u.softmax;
    return launch_groups(ocl, q, STRATA__OCL_K_SOFTMAX_FWD, o->rows, "mmllfi", &o->x, &o->y, o->rows, o->cols,
                  (double)o->scale, o->causal);
  }
  case STRATA__OP_SOFTMAX_BWD: {
    const __typeof__(op->u.softmax) *o = &op->u.softmax;
    return launch_groups(ocl, q, STRATA__OCL_K_SOFTMAX_BWD, o->rows, "mmmllf", &o->y, &o->dy, &o->dx, o->rows, o->cols,
                  (double)o->scale);
  }
  case STRATA__OP_EMBEDDING_FWD: {
    const __typeof__(op->u.emb) *o = &op->u.emb;
    return launch(ocl, q, STRATA__OCL_K_EMBEDDING_FWD, o->n * o->dim, "mmmlll", &o->tokens, &o->table, &o->out, o->n,
                  o->dim, o->vocab);
  }
  case STRATA__OP_EMBEDDING_BWD:
    return op_embedding_bwd(ocl, q, op);
  case STRATA__OP_XENT_FWD: {
    const __typeof__(op->u.xent) *o = &op->u.xent;
    return launch_groups(ocl, q, STRATA__OCL_K_XENT_FWD, o->rows, "mmmll", &o->logits, &o->targets, &o->loss, o->rows,
                  o->vocab);
  }
  case STRATA__OP_XENT_BWD: {
    const __typeof__(op->u.xent) *o = &op->u.xent;
    return launch_groups(ocl, q, STRATA__OCL_K_XENT_BWD, o->rows, "mmmllf", &o->logits, &o->targets, &o->dlogits, o->rows,
                  o->vocab, (double)o->scale);
  }
  case STRATA__OP_ADAMW: {
    const __typeof__(op->u.adamw) *o = &op->u.adamw;
    return launch(ocl, q, STRATA__OCL_K_ADAMW, o->n, "mmmmlfffffff", &o->param, &o->grad, &o->m, &o->v, o->n,
                  (double)o->lr, (double)o->beta1, (double)o->beta2, (double)o->eps, (double)o->weight_decay,
                  (double)o->bc1, (double)o->bc2);
  }
  case STRATA__OP_SUMSQ: {
    const __typeof__(op->u.sumsq) *o = &op->u.sumsq;
    /* two levels of work-groups, each in a fixed order (kernels/ops.k) */
    const int64_t parts = o->n < STRATA__OCL_SUMSQ_PARTS ? o->n : STRATA__OCL_SUMSQ_PARTS;
    rc = launch_groups(ocl, q, STRATA__OCL_K_SUMSQ_PARTIAL, parts, "mlcl", &o->x, o->n, q->sumsq_parts, parts);
    if (rc)
      return rc;
    return launch_groups(ocl, q, STRATA__OCL_K_SUMSQ_FINAL, 1, "clmi", q->sumsq_parts, parts, &o->out, o->accumulate);
  }
  case STRATA__OP_IM2COL: {
    const __typeof__(op->u.im2col) *o = &op->u.im2col;
    return launch(ocl, q, STRATA__OCL_K_IM2COL, o->c * o->r * o->s * o->p * o->q, "mmlllllllll", &o->x, &o->col, o->c,
                  o->h, o->w, o->r, o->s, o->stride, o->pad, o->p, o->q);
  }
  case STRATA__OP_COL2IM: {
    const __typeof__(op->u.im2col) *o = &op->u.im2col;
    return launch(ocl, q, STRATA__OCL_K_COL2IM, o->c * o->h * o->w, "mmlllllllll", &o->col, &o->x, o->c, o->h, o->w,
                  o->r, o->s, o->stride, o->pad, o->p, o->q);
  }
  case STRATA__OP_MAXPOOL_FWD: {
    const __typeof__(op->u.pool) *o = &op->u.pool;
    return launch(ocl, q, STRATA__OCL_K_MAXPOOL_FWD, o->planes * o->p * o->q, "mmmlllllll", &o->x, &o->y, &o->idx,
                  o->planes, o->h, o->w, o->size, o->stride, o->p, o->q);
  }
  case STRATA__OP_MAXPOOL_BWD: {
    const __typeof__(op->u.pool) *o = &op->u.pool;
    return launch(ocl, q, STRATA__OCL_K_MAXPOOL_BWD, o->planes * o->h * o->w, "mmmlllllll", &o->dy, &o->idx, &o->dx,
                  o->planes, o->h, o->w, o->size, o->stride, o->p, o->q);
  }
  case STRATA__OP_XENT_VP_MAX: {
    const __typeof__(op->u.xvp) *o = &op->u.xvp;
    return launch_groups(ocl, q, STRATA__OCL_K_XENT_VP_MAX, o->rows, "mmll", &o->logits, &o->rowmax, o->rows, o->vl);
  }
  case STRATA__OP_XENT_VP_SUMS: {
    const __typeof__(op->u.xvp) *o = &op->u.xvp;
    return launch_groups(ocl, q, STRATA__OCL_K_XENT_VP_SUMS, o->rows, "mmmmmlll", &o->logits, &o->targets, &o->rowmax,
                         &o->sumexp, &o->tlogit, o->rows, o->vl, o->off);
  }
  case STRATA__OP_XENT_VP_LOSS: {
    const __typeof__(op->u.xvp) *o = &op->u.xvp;
    return launch(ocl, q, STRATA__OCL_K_XENT_VP_LOSS, o->rows, "mmmmmll", &o->rowmax, &o->sumexp, &o->tlogit,
                  &o->targets, &o->loss, o->rows, o->vocab);
  }
  case STRATA__OP_XENT_VP_BWD: {
    const __typeof__(op->u.xvp) *o = &op->u.xvp;
    return launch(ocl, q, STRATA__OCL_K_XENT_VP_BWD, o->rows * o->vl, "mmmmmllllf", &o->logits, &o->targets,
                  &o->rowmax, &o->sumexp, &o->dlogits, o->rows, o->vl, o->off, o->vocab, (double)o->scale);
  }
  case STRATA__OP_TOKENS_SHIFT: {
    const __typeof__(op->u.shift) *o = &op->u.shift;
    return launch(ocl, q, STRATA__OCL_K_TOKENS_SHIFT, o->n, "mmlll", &o->tokens, &o->out, o->n, o->off, o->count);
  }
  case STRATA__OP_ATTENTION_FWD:
  case STRATA__OP_ATTENTION_BWD: {
    /* kernels/attention.k: a work-group per q->wg queries (keys) of one sequence and head */
    const __typeof__(op->u.attn) *o = &op->u.attn;
    const int64_t wg = (int64_t)attn_wg(q), blocks = (o->seq + wg - 1) / wg, groups = o->batch * o->heads * blocks;
    if (op->id == STRATA__OP_ATTENTION_FWD)
      return launch_attn(ocl, q, STRATA__OCL_K_ATTN_FWD, groups, "mmmlllllfi", &o->qkv, &o->out, &o->lse, o->batch,
                         o->seq, o->heads, o->kv_heads, o->head_dim, (double)o->scale, o->causal);
    rc = launch_attn(ocl, q, STRATA__OCL_K_ATTN_BWD_DQ, groups, "mmmmmlllllfi", &o->qkv, &o->out, &o->dout, &o->lse,
                     &o->dqkv, o->batch, o->seq, o->heads, o->kv_heads, o->head_dim, (double)o->scale, o->causal);
    if (rc)
      return rc;
    /* dK and dV: a work-group per wg keys of one sequence and key/value head */
    return launch_attn(ocl, q, STRATA__OCL_K_ATTN_BWD_DKV, o->batch * o->kv_heads * blocks, "mmmmmlllllfi", &o->qkv,
                       &o->out, &o->dout, &o->lse, &o->dqkv, o->batch, o->seq, o->heads, o->kv_heads, o->head_dim,
                       (double)o->scale, o->causal);
  }
  case STRATA__OP_RMSNORM_FWD: {
    const __typeof__(op->u.rms) *o = &op->u.rms;
    return launch_groups(ocl, q, STRATA__OCL_K_RMSNORM_FWD, o->rows, "mmmmllf", &o->x, &o->w, &o->y, &o->rstd, o->rows,
                         o->cols, (double)o->eps);
  }
  case STRATA__OP_RMSNORM_BWD: {
    const __typeof__(op->u.rms) *o = &op->u.rms;
    /* dw first: dx may overwrite dy */
    rc = launch_groups(ocl, q, STRATA__OCL_K_RMSNORM_BWD_DW, col_groups(q, o->cols), "mmmmlli", &o->x, &o->rstd,
                       &o->dy, &o->dw, o->rows, o->cols, o->accumulate);
    if (rc)
      return rc;
    return launch_groups(ocl, q, STRATA__OCL_K_RMSNORM_BWD_DX, o->rows, "mmmmmll", &o->x, &o->w, &o->rstd, &o->dy,
                         &o->dx, o->rows, o->cols);
  }
  case STRATA__OP_SWIGLU_FWD: {
    const __typeof__(op->u.swiglu) *o = &op->u.swiglu;
    return launch(ocl, q, STRATA__OCL_K_SWIGLU_FWD, o->rows * o->cols, "mmll", &o->gu, &o->h, o->rows, o->cols);
  }
  case STRATA__OP_SWIGLU_BWD: {
    const __typeof__(op->u.swiglu) *o = &op->u.swiglu;
    return launch(ocl, q, STRATA__OCL_K_SWIGLU_BWD, o->rows * o->cols, "mmmll", &o->gu, &o->dh, &o->dgu, o->rows,
                  o->cols);
  }
  case STRATA__OP_ROPE_FWD:
  case STRATA__OP_ROPE_BWD: {
    const __typeof__(op->u.rope) *o = &op->u.rope;
    return launch(ocl, q, STRATA__OCL_K_ROPE, o->batch * o->seq * o->heads * (o->head_dim / 2), "mmmllllllf", &o->x,
                  &o->y, &o->freq, o->batch, o->seq, o->heads, o->head_dim, o->ld, o->pos0,
                  op->id == STRATA__OP_ROPE_BWD ? -1.0 : 1.0);
  }
  case STRATA__OP_ADAMW_FUSED: /* host only: ocl_op_supported says so before a record is made */
  case STRATA__OP_SUMSQ_SPANS:
  case STRATA__OP_LINEAR: /* the runtime runs it as GEMM, BIAS_ADD and ADD here */
  case STRATA__OP_COUNT:
    break;
  }
  return ocl->svc->error(STRATA_ERR_UNSUPPORTED, "opencl: unknown op id %d", (int)op->id);
}
