/* SPDX-License-Identifier: MIT */
/* ops.c — the CUDA backend's ops but GEMM: kernels/ops.k and attention.k through kernels.cu, float32 and bfloat16 operands. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>

#include <cuda_runtime_api.h>
#include <strata/comm.h>
#include <strata/device.h>
#include "device/backend.h"
#include "collectives.h"
#include "launch.h"

/* Device pointer of operand `m` (its buffer's start: kernels index it with the operand's offset), and that offset. */
#define P(m) strata__cuda_buf_ptr((m).h)
#define O(m) ((strata__i64)(m).off)
/* Bit `pos` of a launch's buffer-type mask (kernels/dialect.h) when operand `m` is bfloat16. */
#define B(m, pos) ((m).dtype == STRATA_BFLOAT16 ? 1u << (pos) : 0u)
/* blocks, threads of a launch over `n` items, one a thread; of `g` work-groups of wg threads. */
#define ITEMS(n) (((n) + STRATA__CUDA_BLOCK - 1) / STRATA__CUDA_BLOCK), STRATA__CUDA_BLOCK
#define GROUPS(g) (g), wg

/* Bytes of one element of operand `m`. */
static size_t elem(const struct strata__mem *m) { return m->dtype == STRATA_BFLOAT16 ? 2 : 4; }

/* y = x in y's type: a copy on the stream when the types agree (nothing when x is y), else k_convert. */
static cudaError_t convert(cudaStream_t st, const struct strata__op *op) {
  const __typeof__(op->u.ew) *a = &op->u.ew;
  char *x = P(a->x), *y = P(a->y);
  const size_t xs = elem(&a->x), ys = elem(&a->y);
  if (a->x.dtype != a->y.dtype)
    return strata__cuda_convert(st, ITEMS(a->n), B(a->x, 0) | B(a->y, 1), x, O(a->x), y, O(a->y), a->n);
  if (x + a->x.off * xs == y + a->y.off * ys)
    return cudaSuccess;
  return cudaMemcpyAsync(y + a->y.off * ys, x + a->x.off * xs, (size_t)a->n * xs, cudaMemcpyDeviceToDevice, st);
}

/* The launches of one op; the first failure's status. */
static cudaError_t launch(cudaStream_t st, int wg, float *partials, const struct strata__op *op) {
  cudaError_t e = cudaSuccess;
  switch (op->id) {
  case STRATA__OP_CONVERT:
    return convert(st, op);
  case STRATA__OP_BIAS_ADD: {
    const __typeof__(op->u.bias) *a = &op->u.bias;
    return strata__cuda_bias_add(st, ITEMS(a->rows * a->cols), B(a->y, 0) | B(a->bias, 1), P(a->y), O(a->y),
                                 P(a->bias), O(a->bias), a->rows, a->cols);
  }
  case STRATA__OP_BIAS_GRAD: {
    /* column tiles of min(wg, 32) columns (kernels/ops.k) */
    const __typeof__(op->u.bias) *a = &op->u.bias;
    const strata__i64 cw = wg < STRATA_K_COL_TILE ? wg : STRATA_K_COL_TILE;
    return strata__cuda_bias_grad(st, GROUPS((a->cols + cw - 1) / cw), B(a->y, 0) | B(a->bias, 1), P(a->y), O(a->y),
                                  P(a->bias), O(a->bias), a->rows, a->cols, a->accumulate);
  }
  case STRATA__OP_GELU_FWD:
  case STRATA__OP_RELU_FWD: {
    const __typeof__(op->u.ew) *a = &op->u.ew;
    const unsigned mask = B(a->x, 0) | B(a->y, 1);
    if (op->id == STRATA__OP_GELU_FWD)
      return strata__cuda_gelu_fwd(st, ITEMS(a->n), mask, P(a->x), O(a->x), P(a->y), O(a->y), a->n);
    return strata__cuda_relu_fwd(st, ITEMS(a->n), mask, P(a->x), O(a->x), P(a->y), O(a->y), a->n);
  }
  case STRATA__OP_GELU_BWD:
  case STRATA__OP_RELU_BWD: {
    const __typeof__(op->u.ew) *a = &op->u.ew;
    const unsigned mask = B(a->x, 0) | B(a->dy, 1) | B(a->dx, 2);
    if (op->id == STRATA__OP_GELU_BWD)
      return strata__cuda_gelu_bwd(st, ITEMS(a->n), mask, P(a->x), O(a->x), P(a->dy), O(a->dy), P(a->dx), O(a->dx),
                                   a->n);
    return strata__cuda_relu_bwd(st, ITEMS(a->n), mask, P(a->x), O(a->x), P(a->dy), O(a->dy), P(a->dx), O(a->dx),
                                 a->n);
  }
  case STRATA__OP_ADD: {
    const __typeof__(op->u.ew) *a = &op->u.ew;
    return strata__cuda_add(st, ITEMS(a->n), B(a->x, 0) | B(a->b, 1) | B(a->y, 2), P(a->x), O(a->x), P(a->b),
                            O(a->b), P(a->y), O(a->y), a->n);
  }
  case STRATA__OP_REDUCE: {
    /* the record's dtype types all three operands (their own dtype fields are not set) */
    const __typeof__(op->u.reduce) *a = &op->u.reduce;
    if (a->dtype == STRATA_INT32)
      return strata__cuda_reduce_i32(st, ITEMS(a->n), 0, P(a->a), O(a->a), P(a->b), O(a->b), P(a->y), O(a->y), a->n,
                                     a->op);
    return strata__cuda_reduce_f32(st, ITEMS(a->n), a->dtype == STRATA_BFLOAT16 ? 7u : 0u, P(a->a), O(a->a), P(a->b),
                                   O(a->b), P(a->y), O(a->y), a->n, a->op);
  }
  case STRATA__OP_SCALE:
  case STRATA__OP_FILL: {
    const __typeof__(op->u.ew) *a = &op->u.ew;
    if (op->id == STRATA__OP_SCALE)
      return strata__cuda_scale(st, ITEMS(a->n), B(a->x, 0), P(a->x), O(a->x), a->alpha, a->n);
    return strata__cuda_fill(st, ITEMS(a->n), B(a->x, 0), P(a->x), O(a->x), a->alpha, a->n);
  }
  case STRATA__OP_LAYERNORM_FWD: {
    const __typeof__(op->u.ln) *a = &op->u.ln;
    return strata__cuda_layernorm_fwd(
        st, GROUPS(a->rows),
        B(a->x, 0) | B(a->gamma, 1) | B(a->beta, 2) | B(a->y, 3) | B(a->mean, 4) | B(a->rstd, 5), P(a->x), O(a->x),
        P(a->gamma), O(a->gamma), P(a->beta), O(a->beta), P(a->y), O(a->y), P(a->mean), O(a->mean), P(a->rstd),
        O(a->rstd), a->rows, a->cols, a->eps);
  }
  case STRATA__OP_LAYERNORM_BWD: {
    const __typeof__(op->u.ln) *a = &op->u.ln;
    const strata__i64 cw = wg < STRATA_K_COL_TILE ? wg : STRATA_K_COL_TILE;
    /* dgamma/dbeta first: dx may be dy, and the dx kernel overwrites it */
    e = strata__cuda_layernorm_bwd_dparams(
        st, GROUPS((a->cols + cw - 1) / cw),
        B(a->x, 0) | B(a->mean, 1) | B(a->rstd, 2) | B(a->dy, 3) | B(a->dgamma, 4) | B(a->dbeta, 5), P(a->x),
        O(a->x), P(a->mean), O(a->mean), P(a->rstd), O(a->rstd), P(a->dy), O(a->dy), P(a->dgamma), O(a->dgamma),
        P(a->dbeta), O(a->dbeta), a->rows, a->cols, a->accumulate);
    if (e != cudaSuccess)
      return e;
    return strata__cuda_layernorm_bwd_dx(
        st, GROUPS(a->rows),
        B(a->x, 0) | B(a->gamma, 1) | B(a->mean, 2) | B(a->rstd, 3) | B(a->dy, 4) | B(a->dx, 5), P(a->x), O(a->x),
        P(a->gamma), O(a->gamma), P(a->mean), O(a->mean), P(a->rstd), O(a->rstd), P(a->dy), O(a->dy), P(a->dx),
        O(a->dx), a->rows, a->cols);
  }
  case STRATA__OP_SOFTMAX_FWD: {
    const __typeof__(op->u.softmax) *a = &op->u.softmax;
    return strata__cuda_softmax_fwd(st, GROUPS(a->rows), B(a->x, 0) | B(a->y, 1), P(a->x), O(a->x), P(a->y), O(a->y),
                                    a->rows, a->cols, a->scale, a->causal);
  }
  case STRATA__OP_SOFTMAX_BWD: {
    const __typeof__(op->u.softmax) *a = &op->u.softmax;
    return strata__cuda_softmax_bwd(st, GROUPS(a->rows), B(a->y, 0) | B(a->dy, 1) | B(a->dx, 2), P(a->y), O(a->y),
                                    P(a->dy), O(a->dy), P(a->dx), O(a->dx), a->rows, a->cols, a->scale);
  }
  case STRATA__OP_EMBEDDING_FWD: {
    const __typeof__(op->u.emb) *a = &op->u.emb;
    return strata__cuda_embedding_fwd(st, ITEMS(a->n * a->dim), B(a->table, 1) | B(a->out, 2), P(a->tokens),
                                      O(a->tokens), P(a->table), O(a->table), P(a->out), O(a->out), a->n, a->dim,
                                      a->vocab);
  }
  case STRATA__OP_EMBEDDING_BWD: {
    /* the table zeroed with the device's memset (all-zero bytes in either type), then a block per position */
    const __typeof__(op->u.emb) *a = &op->u.emb;
    const size_t es = elem(&a->dtable);
    if (!a->accumulate && a->vocab * a->dim > 0)
      e = cudaMemsetAsync((char *)P(a->dtable) + a->dtable.off * es, 0, (size_t)(a->vocab * a->dim) * es, st);
    if (e != cudaSuccess)
      return e;
    return strata__cuda_embedding_bwd(st, GROUPS(a->n), B(a->dout, 1) | B(a->dtable, 2), P(a->tokens), O(a->tokens),
                                      P(a->dout), O(a->dout), P(a->dtable), O(a->dtable), a->n, a->dim, a->vocab);
  }
  case STRATA__OP_XENT_FWD: {
    const __typeof__(op->u.xent) *a = &op->u.xent;
    return strata__cuda_cross_entropy_fwd(st, GROUPS(a->rows), B(a->logits, 0) | B(a->loss, 2), P(a->logits),
                                          O(a->logits), P(a->targets), O(a->targets), P(a->loss), O(a->loss), a->rows,
                                          a->vocab);
  }
  case STRATA__OP_XENT_BWD: {
    const __typeof__(op->u.xent) *a = &op->u.xent;
    return strata__cuda_cross_entropy_bwd(st, GROUPS(a->rows), B(a->logits, 0) | B(a->dlogits, 2), P(a->logits),
                                          O(a->logits), P(a->targets), O(a->targets), P(a->dlogits), O(a->dlogits),
                                          a->rows, a->vocab, a->scale);
  }
  case STRATA__OP_ADAMW: {
    const __typeof__(op->u.adamw) *a = &op->u.adamw;
    return strata__cuda_adamw(st, ITEMS(a->n), 0, P(a->param), O(a->param), P(a->grad), O(a->grad), P(a->m), O(a->m),
                              P(a->v), O(a->v), a->n, a->lr, a->beta1, a->beta2, a->eps, a->weight_decay, a->bc1,
                              a->bc2);
  }
  case STRATA__OP_SUMSQ: {
    /* two levels of blocks, each summing in a fixed order through the queue's own partials: the result depends on
    ** nothing but the block size and n */
    const __typeof__(op->u.sumsq) *a = &op->u.sumsq;
    const strata__i64 parts = a->n < STRATA__CUDA_SUMSQ_PARTS ? a->n : STRATA__CUDA_SUMSQ_PARTS;
    e = strata__cuda_sumsq_partial(st, GROUPS(parts), B(a->x, 0), P(a->x), O(a->x), a->n, partials, 0, parts);
    if (e != cudaSuccess)
      return e;
    return strata__cuda_sumsq_final(st, GROUPS(1), 0, partials, 0, parts, P(a->out), O(a->out), a->accumulate);
  }
  case STRATA__OP_IM2COL: {
    const __typeof__(op->u.im2col) *a = &op->u.im2col;
    return strata__cuda_im2col(st, ITEMS(a->c * a->r * a->s * a->p * a->q), B(a->x, 0) | B(a->col, 1), P(a->x),
                               O(a->x), P(a->col), O(a->col), a->c, a->h, a->w, a->r, a->s, a->stride, a->pad, a->p,
                               a->q);
  }
  case STRATA__OP_COL2IM: {
    const __typeof__(op->u.im2col) *a = &op->u.im2col;
    return strata__cuda_col2im(st, ITEMS(a->c * a->h * a->w), B(a->col, 0) | B(a->x, 1), P(a->col), O(a->col),
                               P(a->x), O(a->x), a->c, a->h, a->w, a->r, a->s, a->stride, a->pad, a->p, a->q);
  }
  case STRATA__OP_MAXPOOL_FWD: {
    const __typeof__(op->u.pool) *a = &op->u.pool;
    return strata__cuda_maxpool_fwd(st, ITEMS(a->planes * a->p * a->q), B(a->x, 0) | B(a->y, 1), P(a->x), O(a->x),
                                    P(a->y), O(a->y), P(a->idx), O(a->idx), a->planes, a->h, a->w, a->size, a->stride,
                                    a->p, a->q);
  }
  case STRATA__OP_MAXPOOL_BWD: {
    const __typeof__(op->u.pool) *a = &op->u.pool;
    return strata__cuda_maxpool_bwd(st, ITEMS(a->planes * a->h * a->w), B(a->dy, 0) | B(a->dx, 2), P(a->dy),
                                    O(a->dy), P(a->idx), O(a->idx), P(a->dx), O(a->dx), a->planes, a->h, a->w,
                                    a->size, a->stride, a->p, a->q);
  }
  case STRATA__OP_XENT_VP_MAX: {
    const __typeof__(op->u.xvp) *a = &op->u.xvp;
    return strata__cuda_xent_vp_max(st, GROUPS(a->rows), B(a->logits, 0) | B(a->rowmax, 1), P(a->logits),
                                    O(a->logits), P(a->rowmax), O(a->rowmax), a->rows, a->vl);
  }
  case STRATA__OP_XENT_VP_SUMS: {
    const __typeof__(op->u.xvp) *a = &op->u.xvp;
    return strata__cuda_xent_vp_sums(
        st, GROUPS(a->rows), B(a->logits, 0) | B(a->rowmax, 2) | B(a->sumexp, 3) | B(a->tlogit, 4), P(a->logits),
        O(a->logits), P(a->targets), O(a->targets), P(a->rowmax), O(a->rowmax), P(a->sumexp), O(a->sumexp),
        P(a->tlogit), O(a->tlogit), a->rows, a->vl, a->off);
  }
  case STRATA__OP_XENT_VP_LOSS: {
    const __typeof__(op->u.xvp) *a = &op->u.xvp;
    return strata__cuda_xent_vp_loss(
        st, ITEMS(a->rows), B(a->rowmax, 0) | B(a->sumexp, 1) | B(a->tlogit, 2) | B(a->loss, 4), P(a->rowmax),
        O(a->rowmax), P(a->sumexp), O(a->sumexp), P(a->tlogit), O(a->tlogit), P(a->targets), O(a->targets),
        P(a->loss), O(a->loss), a->rows, a->vocab);
  }
  case STRATA__OP_XENT_VP_BWD: {
    const __typeof__(op->u.xvp) *a = &op->u.xvp;
    return strata__cuda_xent_vp_bwd(
        st, ITEMS(a->rows * a->vl), B(a->logits, 0) | B(a->rowmax, 2) | B(a->sumexp, 3) | B(a->dlogits, 4),
        P(a->logits), O(a->logits), P(a->targets), O(a->targets), P(a->rowmax), O(a->rowmax), P(a->sumexp),
        O(a->sumexp), P(a->dlogits), O(a->dlogits), a->rows, a->vl, a->off, a->vocab, a->scale);
  }
  case STRATA__OP_TOKENS_SHIFT: {
    const __typeof__(op->u.shift) *a = &op->u.shift;
    return strata__cuda_tokens_shift(st, ITEMS(a->n), 0, P(a->tokens), O(a->tokens), P(a->out), O(a->out), a->n,
                                     a->off, a->count);
  }
  case STRATA__OP_ATTENTION_FWD:
  case STRATA__OP_ATTENTION_BWD: {
    /* kernels/attention.k: a block per wg queries (keys) of one sequence and head */
    const __typeof__(op->u.attn) *a = &op->u.attn;
    const strata__i64 blocks = (a->seq + wg - 1) / wg, groups = a->batch * a->heads * blocks;
    if (op->id == STRATA__OP_ATTENTION_FWD)
      return strata__cuda_attention_fwd(st, GROUPS(groups), B(a->qkv, 0) | B(a->out, 1) | B(a->lse, 2), P(a->qkv),
                                        O(a->qkv), P(a->out), O(a->out), P(a->lse), O(a->lse), a->batch, a->seq,
                                        a->heads, a->kv_heads, a->head_dim, a->scale, a->causal);
    const unsigned mask = B(a->qkv, 0) | B(a->out, 1) | B(a->dout, 2) | B(a->lse, 3) | B(a->dqkv, 4);
    e = strata__cuda_attention_bwd_dq(st, GROUPS(groups), mask, P(a->qkv), O(a->qkv), P(a->out), O(a->out),
                                      P(a->dout), O(a->dout), P(a->lse), O(a->lse), P(a->dqkv), O(a->dqkv), a->batch,
                                      a->seq, a->heads, a->kv_heads, a->head_dim, a->scale, a->causal);
    if (e != cudaSuccess)
      return e;
    /* dK and dV: a block per wg keys of one sequence and key/value head */
    return strata__cuda_attention_bwd_dkv(st, GROUPS(a->batch * a->kv_heads * blocks), mask, P(a->qkv), O(a->qkv),
                                          P(a->out), O(a->out), P(a->dout), O(a->dout), P(a->lse), O(a->lse),
                                          P(a->dqkv), O(a->dqkv), a->batch, a->seq, a->heads, a->kv_heads,
                                          a->head_dim, a->scale, a->causal);
  }
  case STRATA__OP_RMSNORM_FWD: {
    const __typeof__(op->u.rms) *a = &op->u.rms;
    return strata__cuda_rmsnorm_fwd(st, GROUPS(a->rows), B(a->x, 0) | B(a->w, 1) | B(a->y, 2) | B(a->rstd, 3),
                                    P(a->x), O(a->x), P(a->w), O(a->w), P(a->y), O(a->y), P(a->rstd), O(a->rstd),
                                    a->rows, a->cols, a->eps);
  }
  case STRATA__OP_RMSNORM_BWD: {
    const __typeof__(op->u.rms) *a = &op->u.rms;
    const strata__i64 cw = wg < STRATA_K_COL_TILE ? wg : STRATA_K_COL_TILE;
    /* dw first: dx may be dy */
    e = strata__cuda_rmsnorm_bwd_dw(st, GROUPS((a->cols + cw - 1) / cw),
                                    B(a->x, 0) | B(a->rstd, 1) | B(a->dy, 2) | B(a->dw, 3), P(a->x), O(a->x),
                                    P(a->rstd), O(a->rstd), P(a->dy), O(a->dy), P(a->dw), O(a->dw), a->rows, a->cols,
                                    a->accumulate);
    if (e != cudaSuccess)
      return e;
    return strata__cuda_rmsnorm_bwd_dx(
        st, GROUPS(a->rows), B(a->x, 0) | B(a->w, 1) | B(a->rstd, 2) | B(a->dy, 3) | B(a->dx, 4), P(a->x), O(a->x),
        P(a->w), O(a->w), P(a->rstd), O(a->rstd), P(a->dy), O(a->dy), P(a->dx), O(a->dx), a->rows, a->cols);
  }
  case STRATA__OP_SWIGLU_FWD: {
    const __typeof__(op->u.swiglu) *a = &op->u.swiglu;
    return strata__cuda_swiglu_fwd(st, ITEMS(a->rows * a->cols), B(a->gu, 0) | B(a->h, 1), P(a->gu), O(a->gu),
                                   P(a->h), O(a->h), a->rows, a->cols);
  }
  case STRATA__OP_SWIGLU_BWD: {
    const __typeof__(op->u.swiglu) *a = &op->u.swiglu;
    return strata__cuda_swiglu_bwd(st, ITEMS(a->rows * a->cols), B(a->gu, 0) | B(a->dh, 1) | B(a->dgu, 2), P(a->gu),
                                   O(a->gu), P(a->dh), O(a->dh), P(a->dgu), O(a->dgu), a->rows, a->cols);
  }
  case STRATA__OP_ROPE_FWD:
  case STRATA__OP_ROPE_BWD: {
    const __typeof__(op->u.rope) *a = &op->u.rope;
    return strata__cuda_rope(st, ITEMS(a->batch * a->seq * a->heads * (a->head_dim / 2)), B(a->x, 0) | B(a->y, 1),
                             P(a->x), O(a->x), P(a->y), O(a->y), P(a->freq), O(a->freq), a->batch, a->seq, a->heads,
                             a->head_dim, a->ld, a->pos0, op->id == STRATA__OP_ROPE_BWD ? -1.0f : 1.0f);
  }
  case STRATA__OP_GEMM: /* cuda.c's, through cuBLAS */
  case STRATA__OP_ADAMW_FUSED: /* the host's only: strata__cuda_op_supported says so before a record is made */
  case STRATA__OP_SUMSQ_SPANS:
  case STRATA__OP_LINEAR: /* the runtime runs it as GEMM, BIAS_ADD and ADD here */
  case STRATA__OP_COUNT:
    break;
  }
  return cudaErrorNotSupported;
}

int strata__cuda_kernel_op(const struct strata__services *svc, cudaStream_t stream, int dev, int wg, float *partials,
                           const struct strata__op *op) {
  if ((int)op->id < 0 || op->id >= STRATA__OP_COUNT || op->id == STRATA__OP_GEMM)
    return svc->error(STRATA_ERR_UNSUPPORTED, "cuda: op %d is not a kernel op of this module", (int)op->id);
  cudaError_t e = launch(stream, wg, partials, op);
  if (e == cudaSuccess)
    return STRATA_OK;
  (void)cudaGetLastError(); /* not sticky: the next launch check must not see it again */
  return svc->error(e == cudaErrorMemoryAllocation ? STRATA_ERR_DEVICE_MEMORY : STRATA_ERR_BACKEND,
                    "cuda: launching %s on device %d: %s", strata__op_name(op->id), dev, cudaGetErrorString(e));
}
