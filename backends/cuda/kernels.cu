/* SPDX-License-Identifier: MIT */
/* kernels.cu — the shared kernels of kernels/ops.k and attention.k compiled as CUDA C, and the extern "C" launchers ops.c calls. */
#include <cuda_runtime.h>

/* The kernels, exactly as the OpenCL backend compiles them: dialect first. In CUDA each kernel takes its
** buffer-type mask as its first parameter (MASKP), so one compiled kernel serves float32 and bfloat16. */
#include "launch.h" /* first: its STRATA_K_COL_TILE is the kernels' */
#include "dialect.h"
#include "ops.k"
#include "attention.k"
#include "llama.k"

/*
** Launch `kernel` as `blocks` blocks of `threads` threads on `stream`, the
** mask first; nothing for blocks <= 0 (an empty grid is an invalid
** configuration). The status is the launch's own (cudaGetLastError also
** clears it for the next check).
*/
#define STRATA__CUDA_LAUNCH(kernel, ...)                                                                              \
  do {                                                                                                               \
    if (blocks <= 0)                                                                                                 \
      return cudaSuccess;                                                                                            \
    if (blocks > 0x7fffffffLL || threads < 1 || threads > 1024)                                                      \
      return cudaErrorInvalidConfiguration;                                                                          \
    kernel<<<(unsigned)blocks, (unsigned)threads, 0, stream>>>(mask, __VA_ARGS__);                                   \
    return cudaGetLastError();                                                                                       \
  } while (0)

extern "C" cudaError_t strata__cuda_bias_add(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                             void *y, strata__i64 y_off, const void *bias, strata__i64 bias_off,
                                             strata__i64 rows, strata__i64 cols)
{
  STRATA__CUDA_LAUNCH(k_bias_add, y, y_off, bias, bias_off, rows, cols);
}

extern "C" cudaError_t strata__cuda_bias_grad(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                              const void *dy, strata__i64 dy_off, void *dbias, strata__i64 dbias_off,
                                              strata__i64 rows, strata__i64 cols, int accumulate)
{
  STRATA__CUDA_LAUNCH(k_bias_grad, dy, dy_off, dbias, dbias_off, rows, cols, accumulate);
}

extern "C" cudaError_t strata__cuda_gelu_fwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                             const void *x, strata__i64 x_off, void *y, strata__i64 y_off,
                                             strata__i64 n)
{
  STRATA__CUDA_LAUNCH(k_gelu_fwd, x, x_off, y, y_off, n);
}

extern "C" cudaError_t strata__cuda_gelu_bwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                             const void *x, strata__i64 x_off, const void *dy, strata__i64 dy_off,
                                             void *dx, strata__i64 dx_off, strata__i64 n)
{
  STRATA__CUDA_LAUNCH(k_gelu_bwd, x, x_off, dy, dy_off, dx, dx_off, n);
}

extern "C" cudaError_t strata__cuda_relu_fwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                             const void *x, strata__i64 x_off, void *y, strata__i64 y_off,
                                             strata__i64 n)
{
  STRATA__CUDA_LAUNCH(k_relu_fwd, x, x_off, y, y_off, n);
}

extern "C" cudaError_t strata__cuda_relu_bwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                             const void *x, strata__i64 x_off, const void *dy, strata__i64 dy_off,
                                             void *dx, strata__i64 dx_off, strata__i64 n)
{
  STRATA__CUDA_LAUNCH(k_relu_bwd, x, x_off, dy, dy_off, dx, dx_off, n);
}

extern "C" cudaError_t strata__cuda_add(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                        const void *a, strata__i64 a_off, const void *b, strata__i64 b_off, void *y,
                                        strata__i64 y_off, strata__i64 n)
{
  STRATA__CUDA_LAUNCH(k_add, a, a_off, b, b_off, y, y_off, n);
}

extern "C" cudaError_t strata__cuda_convert(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                            const void *x, strata__i64 x_off, void *y, strata__i64 y_off, strata__i64 n)
{
  STRATA__CUDA_LAUNCH(k_convert, x, x_off, y, y_off, n);
}

extern "C" cudaError_t strata__cuda_reduce_f32(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                               const void *a, strata__i64 a_off, const void *b, strata__i64 b_off,
                                               void *y, strata__i64 y_off, strata__i64 n, int op)
{
  STRATA__CUDA_LAUNCH(k_reduce_f32, a, a_off, b, b_off, y, y_off, n, op);
}

extern "C" cudaError_t strata__cuda_reduce_i32(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                               const int *a, strata__i64 a_off, const int *b, strata__i64 b_off, int *y,
                                               strata__i64 y_off, strata__i64 n, int op)
{
  STRATA__CUDA_LAUNCH(k_reduce_i32, a, a_off, b, b_off, y, y_off, n, op);
}

extern "C" cudaError_t strata__cuda_scale(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask, void *x,
                                          strata__i64 x_off, float alpha, strata__i64 n)
{
  STRATA__CUDA_LAUNCH(k_scale, x, x_off, alpha, n);
}

extern "C" cudaError_t strata__cuda_fill(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask, void *x,
                                         strata__i64 x_off, float value, strata__i64 n)
{
  STRATA__CUDA_LAUNCH(k_fill, x, x_off, value, n);
}

extern "C" cudaError_t strata__cuda_layernorm_fwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                                  const void *x, strata__i64 x_off, const void *gamma,
                                                  strata__i64 gamma_off, const void *beta, strata__i64 beta_off,
                                                  void *y, strata__i64 y_off, void *mean, strata__i64 mean_off,
                                                  void *rstd, strata__i64 rstd_off, strata__i64 rows, strata__i64 cols,
                                                  float eps)
{
  STRATA__CUDA_LAUNCH(k_layernorm_fwd, x, x_off, gamma, gamma_off, beta, beta_off, y, y_off, mean, mean_off, rstd,
                      rstd_off, rows, cols, eps);
}

extern "C" cudaError_t strata__cuda_layernorm_bwd_dx(cudaStream_t stream, strata__i64 blocks, int threads,
                                                     unsigned mask, const void *x, strata__i64 x_off, const void *gamma,
                                                     strata__i64 gamma_off, const void *mean, strata__i64 mean_off,
                                                     const void *rstd, strata__i64 rstd_off, const void *dy,
                                                     strata__i64 dy_off, void *dx, strata__i64 dx_off, strata__i64 rows,
                                                     strata__i64 cols)
{
  STRATA__CUDA_LAUNCH(k_layernorm_bwd_dx, x, x_off, gamma, gamma_off, mean, mean_off, rstd, rstd_off, dy, dy_off, dx,
                      dx_off, rows, cols);
}

extern "C" cudaError_t strata__cuda_layernorm_bwd_dparams(cudaStream_t stream, strata__i64 blocks, int threads,
                                                          unsigned mask, const void *x, strata__i64 x_off,
                                                          const void *mean, strata__i64 mean_off, const void *rstd,
                                                          strata__i64 rstd_off, const void *dy, strata__i64 dy_off,
                                                          void *dgamma, strata__i64 dgamma_off, void *dbeta,
                                                          strata__i64 dbeta_off, strata__i64 rows, strata__i64 cols,
                                                          int accumulate)
{
  STRATA__CUDA_LAUNCH(k_layernorm_bwd_dparams, x, x_off, mean, mean_off, rstd, rstd_off, dy, dy_off, dgamma, dgamma_off,
                      dbeta, dbeta_off, rows, cols, accumulate);
}

extern "C" cudaError_t strata__cuda_softmax_fwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                                const void *x, strata__i64 x_off, void *y, strata__i64 y_off,
                                                strata__i64 rows, strata__i64 cols, float scale, int causal)
{
  STRATA__CUDA_LAUNCH(k_softmax_fwd, x, x_off, y, y_off, rows, cols, scale, causal);
}

extern "C" cudaError_t strata__cuda_softmax_bwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                                const void *y, strata__i64 y_off, const void *dy, strata__i64 dy_off,
                                                void *dx, strata__i64 dx_off, strata__i64 rows, strata__i64 cols,
                                                float scale)
{
  STRATA__CUDA_LAUNCH(k_softmax_bwd, y, y_off, dy, dy_off, dx, dx_off, rows, cols, scale);
}

extern "C" cudaError_t strata__cuda_embedding_fwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                                  const int *tokens, strata__i64 tokens_off, const void *table,
                                                  strata__i64 table_off, void *out, strata__i64 out_off, strata__i64 n,
                                                  strata__i64 dim, strata__i64 vocab)
{
  STRATA__CUDA_LAUNCH(k_embedding_fwd, tokens, tokens_off, table, table_off, out, out_off, n, dim, vocab);
}

extern "C" cudaError_t strata__cuda_embedding_bwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                                  const int *tokens, strata__i64 tokens_off, const void *dout,
                                                  strata__i64 dout_off, void *dtable, strata__i64 dtable_off,
                                                  strata__i64 n, strata__i64 dim, strata__i64 vocab)
{
  STRATA__CUDA_LAUNCH(k_embedding_bwd, tokens, tokens_off, dout, dout_off, dtable, dtable_off, n, dim, vocab);
}

extern "C" cudaError_t strata__cuda_cross_entropy_fwd(cudaStream_t stream, strata__i64 blocks, int threads,
                                                      unsigned mask, const void *logits, strata__i64 logits_off,
                                                      const int *targets, strata__i64 targets_off, void *loss,
                                                      strata__i64 loss_off, strata__i64 rows, strata__i64 vocab)
{
  STRATA__CUDA_LAUNCH(k_cross_entropy_fwd, logits, logits_off, targets, targets_off, loss, loss_off, rows, vocab);
}

extern "C" cudaError_t strata__cuda_cross_entropy_bwd(cudaStream_t stream, strata__i64 blocks, int threads,
                                                      unsigned mask, const void *logits, strata__i64 logits_off,
                                                      const int *targets, strata__i64 targets_off, void *dlogits,
                                                      strata__i64 dlogits_off, strata__i64 rows, strata__i64 vocab,
                                                      float scale)
{
  STRATA__CUDA_LAUNCH(k_cross_entropy_bwd, logits, logits_off, targets, targets_off, dlogits, dlogits_off, rows, vocab,
                      scale);
}

extern "C" cudaError_t strata__cuda_xent_vp_max(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                                const void *logits, strata__i64 logits_off, void *rowmax,
                                                strata__i64 rowmax_off, strata__i64 rows, strata__i64 vl)
{
  STRATA__CUDA_LAUNCH(k_xent_vp_max, logits, logits_off, rowmax, rowmax_off, rows, vl);
}

extern "C" cudaError_t strata__cuda_xent_vp_sums(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                                 const void *logits, strata__i64 logits_off, const int *targets,
                                                 strata__i64 targets_off, const void *rowmax, strata__i64 rowmax_off,
                                                 void *sumexp, strata__i64 sumexp_off, void *tlogit,
                                                 strata__i64 tlogit_off, strata__i64 rows, strata__i64 vl,
                                                 strata__i64 off)
{
  STRATA__CUDA_LAUNCH(k_xent_vp_sums, logits, logits_off, targets, targets_off, rowmax, rowmax_off, sumexp, sumexp_off,
                      tlogit, tlogit_off, rows, vl, off);
}

extern "C" cudaError_t strata__cuda_xent_vp_loss(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                                 const void *rowmax, strata__i64 rowmax_off, const void *sumexp,
                                                 strata__i64 sumexp_off, const void *tlogit, strata__i64 tlogit_off,
                                                 const int *targets, strata__i64 targets_off, void *loss,
                                                 strata__i64 loss_off, strata__i64 rows, strata__i64 vocab)
{
  STRATA__CUDA_LAUNCH(k_xent_vp_loss, rowmax, rowmax_off, sumexp, sumexp_off, tlogit, tlogit_off, targets, targets_off,
                      loss, loss_off, rows, vocab);
}

extern "C" cudaError_t strata__cuda_xent_vp_bwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                                const void *logits, strata__i64 logits_off, const int *targets,
                                                strata__i64 targets_off, const void *rowmax, strata__i64 rowmax_off,
                                                const void *sumexp, strata__i64 sumexp_off, void *dlogits,
                                                strata__i64 dlogits_off, strata__i64 rows, strata__i64 vl,
                                                strata__i64 off, strata__i64 vocab, float scale)
{
  STRATA__CUDA_LAUNCH(k_xent_vp_bwd, logits, logits_off, targets, targets_off, rowmax, rowmax_off, sumexp, sumexp_off,
                      dlogits, dlogits_off, rows, vl, off, vocab, scale);
}

extern "C" cudaError_t strata__cuda_tokens_shift(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                                 const int *tokens, strata__i64 tokens_off, int *out,
                                                 strata__i64 out_off, strata__i64 n, strata__i64 off, strata__i64 count)
{
  STRATA__CUDA_LAUNCH(k_tokens_shift, tokens, tokens_off, out, out_off, n, off, count);
}

extern "C" cudaError_t strata__cuda_adamw(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                          float *param, strata__i64 param_off, const float *grad, strata__i64 grad_off,
                                          float *m, strata__i64 m_off, float *v, strata__i64 v_off, strata__i64 n,
                                          float lr, float beta1, float beta2, float eps, float weight_decay, float bc1,
                                          float bc2)
{
  STRATA__CUDA_LAUNCH(k_adamw, param, param_off, grad, grad_off, m, m_off, v, v_off, n, lr, beta1, beta2, eps,
                      weight_decay, bc1, bc2);
}

extern "C" cudaError_t strata__cuda_sumsq_partial(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                                  const void *x, strata__i64 x_off, strata__i64 n, float *part,
                                                  strata__i64 part_off, strata__i64 nparts)
{
  STRATA__CUDA_LAUNCH(k_sumsq_partial, x, x_off, n, part, part_off, nparts);
}

extern "C" cudaError_t strata__cuda_sumsq_final(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                                const float *part, strata__i64 part_off, strata__i64 nparts, float *out,
                                                strata__i64 out_off, int accumulate)
{
  STRATA__CUDA_LAUNCH(k_sumsq_final, part, part_off, nparts, out, out_off, accumulate);
}

extern "C" cudaError_t strata__cuda_im2col(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                           const void *x, strata__i64 x_off, void *col, strata__i64 col_off,
                                           strata__i64 c, strata__i64 h, strata__i64 w, strata__i64 r, strata__i64 s,
                                           strata__i64 stride, strata__i64 pad, strata__i64 p, strata__i64 q)
{
  STRATA__CUDA_LAUNCH(k_im2col, x, x_off, col, col_off, c, h, w, r, s, stride, pad, p, q);
}

extern "C" cudaError_t strata__cuda_col2im(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                           const void *col, strata__i64 col_off, void *x, strata__i64 x_off,
                                           strata__i64 c, strata__i64 h, strata__i64 w, strata__i64 r, strata__i64 s,
                                           strata__i64 stride, strata__i64 pad, strata__i64 p, strata__i64 q)
{
  STRATA__CUDA_LAUNCH(k_col2im, col, col_off, x, x_off, c, h, w, r, s, stride, pad, p, q);
}

extern "C" cudaError_t strata__cuda_maxpool_fwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                                const void *x, strata__i64 x_off, void *y, strata__i64 y_off, int *idx,
                                                strata__i64 idx_off, strata__i64 planes, strata__i64 h, strata__i64 w,
                                                strata__i64 size, strata__i64 stride, strata__i64 p, strata__i64 q)
{
  STRATA__CUDA_LAUNCH(k_maxpool_fwd, x, x_off, y, y_off, idx, idx_off, planes, h, w, size, stride, p, q);
}

extern "C" cudaError_t strata__cuda_maxpool_bwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                                const void *dy, strata__i64 dy_off, const int *idx, strata__i64 idx_off,
                                                void *dx, strata__i64 dx_off, strata__i64 planes, strata__i64 h,
                                                strata__i64 w, strata__i64 size, strata__i64 stride, strata__i64 p,
                                                strata__i64 q)
{
  STRATA__CUDA_LAUNCH(k_maxpool_bwd, dy, dy_off, idx, idx_off, dx, dx_off, planes, h, w, size, stride, p, q);
}

extern "C" cudaError_t strata__cuda_attention_fwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                                  const void *qkv, strata__i64 qkv_off, void *out, strata__i64 out_off,
                                                  void *lse, strata__i64 lse_off, strata__i64 batch, strata__i64 seq,
                                                  strata__i64 heads, strata__i64 kv_heads, strata__i64 head_dim, float scale,
                                                  int causal)
{
  STRATA__CUDA_LAUNCH(k_attention_fwd, qkv, qkv_off, out, out_off, lse, lse_off, batch, seq, heads, kv_heads, head_dim,
                      scale, causal);
}

extern "C" cudaError_t strata__cuda_attention_bwd_dq(cudaStream_t stream, strata__i64 blocks, int threads,
                                                     unsigned mask, const void *qkv, strata__i64 qkv_off,
                                                     const void *out, strata__i64 out_off, const void *dout,
                                                     strata__i64 dout_off, const void *lse, strata__i64 lse_off,
                                                     void *dqkv, strata__i64 dqkv_off, strata__i64 batch,
                                                     strata__i64 seq, strata__i64 heads, strata__i64 kv_heads,
                                                     strata__i64 head_dim, float scale, int causal)
{
  STRATA__CUDA_LAUNCH(k_attention_bwd_dq, qkv, qkv_off, out, out_off, dout, dout_off, lse, lse_off, dqkv, dqkv_off,
                      batch, seq, heads, kv_heads, head_dim, scale, causal);
}

extern "C" cudaError_t strata__cuda_attention_bwd_dkv(cudaStream_t stream, strata__i64 blocks, int threads,
                                                      unsigned mask, const void *qkv, strata__i64 qkv_off,
                                                      const void *out, strata__i64 out_off, const void *dout,
                                                      strata__i64 dout_off, const void *lse, strata__i64 lse_off,
                                                      void *dqkv, strata__i64 dqkv_off, strata__i64 batch,
                                                      strata__i64 seq, strata__i64 heads, strata__i64 kv_heads,
                                                      strata__i64 head_dim, float scale, int causal)
{
  STRATA__CUDA_LAUNCH(k_attention_bwd_dkv, qkv, qkv_off, out, out_off, dout, dout_off, lse, lse_off, dqkv, dqkv_off,
                      batch, seq, heads, kv_heads, head_dim, scale, causal);
}

extern "C" cudaError_t strata__cuda_rmsnorm_fwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                                const void *x, strata__i64 x_off, const void *w, strata__i64 w_off,
                                                void *y, strata__i64 y_off, void *rstd, strata__i64 rstd_off,
                                                strata__i64 rows, strata__i64 cols, float eps)
{
  STRATA__CUDA_LAUNCH(k_rmsnorm_fwd, x, x_off, w, w_off, y, y_off, rstd, rstd_off, rows, cols, eps);
}

extern "C" cudaError_t strata__cuda_rmsnorm_bwd_dx(cudaStream_t stream, strata__i64 blocks, int threads,
                                                   unsigned mask, const void *x, strata__i64 x_off, const void *w,
                                                   strata__i64 w_off, const void *rstd, strata__i64 rstd_off,
                                                   const void *dy, strata__i64 dy_off, void *dx, strata__i64 dx_off,
                                                   strata__i64 rows, strata__i64 cols)
{
  STRATA__CUDA_LAUNCH(k_rmsnorm_bwd_dx, x, x_off, w, w_off, rstd, rstd_off, dy, dy_off, dx, dx_off, rows, cols);
}

extern "C" cudaError_t strata__cuda_rmsnorm_bwd_dw(cudaStream_t stream, strata__i64 blocks, int threads,
                                                   unsigned mask, const void *x, strata__i64 x_off, const void *rstd,
                                                   strata__i64 rstd_off, const void *dy, strata__i64 dy_off, void *dw,
                                                   strata__i64 dw_off, strata__i64 rows, strata__i64 cols,
                                                   int accumulate)
{
  STRATA__CUDA_LAUNCH(k_rmsnorm_bwd_dw, x, x_off, rstd, rstd_off, dy, dy_off, dw, dw_off, rows, cols, accumulate);
}

extern "C" cudaError_t strata__cuda_swiglu_fwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                               const void *gu, strata__i64 gu_off, void *h, strata__i64 h_off,
                                               strata__i64 rows, strata__i64 cols)
{
  STRATA__CUDA_LAUNCH(k_swiglu_fwd, gu, gu_off, h, h_off, rows, cols);
}

extern "C" cudaError_t strata__cuda_swiglu_bwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                               const void *gu, strata__i64 gu_off, const void *dh, strata__i64 dh_off,
                                               void *dgu, strata__i64 dgu_off, strata__i64 rows, strata__i64 cols)
{
  STRATA__CUDA_LAUNCH(k_swiglu_bwd, gu, gu_off, dh, dh_off, dgu, dgu_off, rows, cols);
}

extern "C" cudaError_t strata__cuda_rope(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                         const void *x, strata__i64 x_off, void *y, strata__i64 y_off,
                                         const void *freq, strata__i64 freq_off, strata__i64 batch, strata__i64 seq,
                                         strata__i64 heads, strata__i64 head_dim, strata__i64 ld, strata__i64 pos0,
                                         float sign)
{
  STRATA__CUDA_LAUNCH(k_rope, x, x_off, y, y_off, freq, freq_off, batch, seq, heads, head_dim, ld, pos0, sign);
}
