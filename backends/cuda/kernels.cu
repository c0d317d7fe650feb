/* SPDX-License-Identifier: MIT */
/* kernels.cu — the shared kernels of kernels/ops.k compiled as CUDA C, and the extern "C" launchers cuda.c calls. */
#include <cuda_runtime.h>

/* The kernels, exactly as the OpenCL backend compiles them: dialect first. */
#include "dialect.h"
#include "ops.k"

#include "launch.h"

/*
** Launch `kernel` over `items` threads on `stream`: ceil(items / 256)
** blocks of STRATA__CUDA_BLOCK threads; nothing for items <= 0 (an empty
** grid is an invalid configuration). The status is the launch's own
** (cudaGetLastError also clears it for the next check).
*/
#define STRATA__CUDA_LAUNCH(kernel, ...)                                                             \
  do {                                                                                               \
    if (items <= 0)                                                                                  \
      return cudaSuccess;                                                                            \
    strata__i64 blocks_ = (items + STRATA__CUDA_BLOCK - 1) / STRATA__CUDA_BLOCK;                     \
    if (blocks_ > 0x7fffffffLL)                                                                      \
      return cudaErrorInvalidConfiguration;                                                          \
    kernel<<<(unsigned)blocks_, STRATA__CUDA_BLOCK, 0, stream>>>(__VA_ARGS__);                       \
    return cudaGetLastError();                                                                       \
  } while (0)

/* Launch a cooperative kernel ("Work-groups: ..." in kernels/ops.k) as
** `groups` blocks of `wg` threads (a power of two <= STRATA__CUDA_WG_MAX). */
#define STRATA__CUDA_LAUNCH_GROUPS(kernel, ...)                                                      \
  do {                                                                                               \
    if (groups <= 0)                                                                                 \
      return cudaSuccess;                                                                            \
    if (groups > 0x7fffffffLL || wg < 1 || wg > STRATA__CUDA_WG_MAX)                                 \
      return cudaErrorInvalidConfiguration;                                                          \
    kernel<<<(unsigned)groups, (unsigned)wg, 0, stream>>>(__VA_ARGS__);                              \
    return cudaGetLastError();                                                                       \
  } while (0)


extern "C" cudaError_t strata__cuda_bias_add(cudaStream_t stream, strata__i64 items, float *y, strata__i64 y_off,
                                             const float *bias, strata__i64 bias_off, strata__i64 rows,
                                             strata__i64 cols)
{
  STRATA__CUDA_LAUNCH(k_bias_add, y, y_off, bias, bias_off, rows, cols);
}

extern "C" cudaError_t strata__cuda_bias_grad(cudaStream_t stream, strata__i64 groups, int wg, const float *dy,
                                              strata__i64 dy_off, float *dbias, strata__i64 dbias_off,
                                              strata__i64 rows, strata__i64 cols, int accumulate)
{
  STRATA__CUDA_LAUNCH_GROUPS(k_bias_grad, dy, dy_off, dbias, dbias_off, rows, cols, accumulate);
}

extern "C" cudaError_t strata__cuda_gelu_fwd(cudaStream_t stream, strata__i64 items, const float *x,
                                             strata__i64 x_off, float *y, strata__i64 y_off, strata__i64 n)
{
  STRATA__CUDA_LAUNCH(k_gelu_fwd, x, x_off, y, y_off, n);
}

extern "C" cudaError_t strata__cuda_gelu_bwd(cudaStream_t stream, strata__i64 items, const float *x,
                                             strata__i64 x_off, const float *dy, strata__i64 dy_off, float *dx,
                                             strata__i64 dx_off, strata__i64 n)
{
  STRATA__CUDA_LAUNCH(k_gelu_bwd, x, x_off, dy, dy_off, dx, dx_off, n);
}

extern "C" cudaError_t strata__cuda_relu_fwd(cudaStream_t stream, strata__i64 items, const float *x,
                                             strata__i64 x_off, float *y, strata__i64 y_off, strata__i64 n)
{
  STRATA__CUDA_LAUNCH(k_relu_fwd, x, x_off, y, y_off, n);
}

extern "C" cudaError_t strata__cuda_relu_bwd(cudaStream_t stream, strata__i64 items, const float *x,
                                             strata__i64 x_off, const float *dy, strata__i64 dy_off, float *dx,
                                             strata__i64 dx_off, strata__i64 n)
{
  STRATA__CUDA_LAUNCH(k_relu_bwd, x, x_off, dy, dy_off, dx, dx_off, n);
}

extern "C" cudaError_t strata__cuda_add(cudaStream_t stream, strata__i64 items, const float *a, strata__i64 a_off,
                                        const float *b, strata__i64 b_off, float *y, strata__i64 y_off,
                                        strata__i64 n)
{
  STRATA__CUDA_LAUNCH(k_add, a, a_off, b, b_off, y, y_off, n);
}

extern "C" cudaError_t strata__cuda_reduce_f32(cudaStream_t stream, strata__i64 items, const float *a,
                                               strata__i64 a_off, const float *b, strata__i64 b_off, float *y,
                                               strata__i64 y_off, strata__i64 n, int op)
{
  STRATA__CUDA_LAUNCH(k_reduce_f32, a, a_off, b, b_off, y, y_off, n, op);
}

extern "C" cudaError_t strata__cuda_reduce_i32(cudaStream_t stream, strata__i64 items, const int *a,
                                               strata__i64 a_off, const int *b, strata__i64 b_off, int *y,
                                               strata__i64 y_off, strata__i64 n, int op)
{
  STRATA__CUDA_LAUNCH(k_reduce_i32, a, a_off, b, b_off, y, y_off, n, op);
}

extern "C" cudaError_t strata__cuda_scale(cudaStream_t stream, strata__i64 items, float *x, strata__i64 x_off,
                                          float alpha, strata__i64 n)
{
  STRATA__CUDA_LAUNCH(k_scale, x, x_off, alpha, n);
}

extern "C" cudaError_t strata__cuda_fill(cudaStream_t stream, strata__i64 items, float *x, strata__i64 x_off,
                                         float value, strata__i64 n)
{
  STRATA__CUDA_LAUNCH(k_fill, x, x_off, value, n);
}

extern "C" cudaError_t strata__cuda_layernorm_fwd(cudaStream_t stream, strata__i64 groups, int wg, const float *x,
                                                  strata__i64 x_off, const float *gamma, strata__i64 gamma_off,
                                                  const float *beta, strata__i64 beta_off, float *y,
                                                  strata__i64 y_off, float *mean, strata__i64 mean_off, float *rstd,
                                                  strata__i64 rstd_off, strata__i64 rows, strata__i64 cols,
                                                  float eps)
{
  STRATA__CUDA_LAUNCH_GROUPS(k_layernorm_fwd, x, x_off, gamma, gamma_off, beta, beta_off, y, y_off, mean, mean_off, rstd,
                      rstd_off, rows, cols, eps);
}

extern "C" cudaError_t strata__cuda_layernorm_bwd_dx(cudaStream_t stream, strata__i64 groups, int wg, const float *x,
                                                     strata__i64 x_off, const float *gamma, strata__i64 gamma_off,
                                                     const float *mean, strata__i64 mean_off, const float *rstd,
                                                     strata__i64 rstd_off, const float *dy, strata__i64 dy_off,
                                                     float *dx, strata__i64 dx_off, strata__i64 rows,
                                                     strata__i64 cols)
{
  STRATA__CUDA_LAUNCH_GROUPS(k_layernorm_bwd_dx, x, x_off, gamma, gamma_off, mean, mean_off, rstd, rstd_off, dy, dy_off, dx,
                      dx_off, rows, cols);
}

extern "C" cudaError_t strata__cuda_layernorm_bwd_dparams(cudaStream_t stream, strata__i64 groups, int wg, const float *x,
                                                          strata__i64 x_off, const float *mean, strata__i64 mean_off,
                                                          const float *rstd, strata__i64 rstd_off, const float *dy,
                                                          strata__i64 dy_off, float *dgamma, strata__i64 dgamma_off,
                                                          float *dbeta, strata__i64 dbeta_off, strata__i64 rows,
                                                          strata__i64 cols, int accumulate)
{
  STRATA__CUDA_LAUNCH_GROUPS(k_layernorm_bwd_dparams, x, x_off, mean, mean_off, rstd, rstd_off, dy, dy_off, dgamma,
                      dgamma_off, dbeta, dbeta_off, rows, cols, accumulate);
}

extern "C" cudaError_t strata__cuda_softmax_fwd(cudaStream_t stream, strata__i64 groups, int wg, const float *x,
                                                strata__i64 x_off, float *y, strata__i64 y_off, strata__i64 rows,
                                                strata__i64 cols, float scale, int causal)
{
  STRATA__CUDA_LAUNCH_GROUPS(k_softmax_fwd, x, x_off, y, y_off, rows, cols, scale, causal);
}

extern "C" cudaError_t strata__cuda_softmax_bwd(cudaStream_t stream, strata__i64 groups, int wg, const float *y,
                                                strata__i64 y_off, const float *dy, strata__i64 dy_off, float *dx,
                                                strata__i64 dx_off, strata__i64 rows, strata__i64 cols, float scale)
{
  STRATA__CUDA_LAUNCH_GROUPS(k_softmax_bwd, y, y_off, dy, dy_off, dx, dx_off, rows, cols, scale);
}

extern "C" cudaError_t strata__cuda_embedding_fwd(cudaStream_t stream, strata__i64 items, const int *tokens,
                                                  strata__i64 tokens_off, const float *table, strata__i64 table_off,
                                                  float *out, strata__i64 out_off, strata__i64 n, strata__i64 dim,
                                                  strata__i64 vocab)
{
  STRATA__CUDA_LAUNCH(k_embedding_fwd, tokens, tokens_off, table, table_off, out, out_off, n, dim, vocab);
}

extern "C" cudaError_t strata__cuda_embedding_bwd(cudaStream_t stream, strata__i64 items, const int *tokens,
                                                  strata__i64 tokens_off, const float *dout, strata__i64 dout_off,
                                                  float *dtable, strata__i64 dtable_off, strata__i64 n,
                                                  strata__i64 dim, strata__i64 vocab)
{
  STRATA__CUDA_LAUNCH(k_embedding_bwd, tokens, tokens_off, dout, dout_off, dtable, dtable_off, n, dim, vocab);
}

extern "C" cudaError_t strata__cuda_cross_entropy_fwd(cudaStream_t stream, strata__i64 groups, int wg, const float *logits,
                                                      strata__i64 logits_off, const int *targets,
                                                      strata__i64 targets_off, float *loss, strata__i64 loss_off,
                                                      strata__i64 rows, strata__i64 vocab)
{
  STRATA__CUDA_LAUNCH_GROUPS(k_cross_entropy_fwd, logits, logits_off, targets, targets_off, loss, loss_off, rows, vocab);
}

extern "C" cudaError_t strata__cuda_cross_entropy_bwd(cudaStream_t stream, strata__i64 groups, int wg, const float *logits,
                                                      strata__i64 logits_off, const int *targets,
                                                      strata__i64 targets_off, float *dlogits,
                                                      strata__i64 dlogits_off, strata__i64 rows, strata__i64 vocab,
                                                      float scale)
{
  STRATA__CUDA_LAUNCH_GROUPS(k_cross_entropy_bwd, logits, logits_off, targets, targets_off, dlogits, dlogits_off, rows,
                      vocab, scale);
}

extern "C" cudaError_t strata__cuda_adamw(cudaStream_t stream, strata__i64 items, float *param, strata__i64 param_off,
                                          const float *grad, strata__i64 grad_off, float *m, strata__i64 m_off,
                                          float *v, strata__i64 v_off, strata__i64 n, float lr, float beta1,
                                          float beta2, float eps, float weight_decay, float bc1, float bc2)
{
  STRATA__CUDA_LAUNCH(k_adamw, param, param_off, grad, grad_off, m, m_off, v, v_off, n, lr, beta1, beta2, eps,
                      weight_decay, bc1, bc2);
}

extern "C" cudaError_t strata__cuda_sumsq_partial(cudaStream_t stream, strata__i64 items, const float *x,
                                                  strata__i64 x_off, strata__i64 n, float *part, strata__i64 part_off,
                                                  strata__i64 nparts)
{
  STRATA__CUDA_LAUNCH(k_sumsq_partial, x, x_off, n, part, part_off, nparts);
}

extern "C" cudaError_t strata__cuda_sumsq_final(cudaStream_t stream, strata__i64 items, const float *part,
                                                strata__i64 part_off, strata__i64 nparts, float *out,
                                                strata__i64 out_off, int accumulate)
{
  STRATA__CUDA_LAUNCH(k_sumsq_final, part, part_off, nparts, out, out_off, accumulate);
}

extern "C" cudaError_t strata__cuda_im2col(cudaStream_t stream, strata__i64 items, const float *x, strata__i64 x_off,
                                           float *col, strata__i64 col_off, strata__i64 c, strata__i64 h,
                                           strata__i64 w, strata__i64 r, strata__i64 s, strata__i64 stride,
                                           strata__i64 pad, strata__i64 p, strata__i64 q)
{
  STRATA__CUDA_LAUNCH(k_im2col, x, x_off, col, col_off, c, h, w, r, s, stride, pad, p, q);
}

extern "C" cudaError_t strata__cuda_col2im(cudaStream_t stream, strata__i64 items, const float *col,
                                           strata__i64 col_off, float *x, strata__i64 x_off, strata__i64 c,
                                           strata__i64 h, strata__i64 w, strata__i64 r, strata__i64 s,
                                           strata__i64 stride, strata__i64 pad, strata__i64 p, strata__i64 q)
{
  STRATA__CUDA_LAUNCH(k_col2im, col, col_off, x, x_off, c, h, w, r, s, stride, pad, p, q);
}

extern "C" cudaError_t strata__cuda_maxpool_fwd(cudaStream_t stream, strata__i64 items, const float *x,
                                                strata__i64 x_off, float *y, strata__i64 y_off, int *idx,
                                                strata__i64 idx_off, strata__i64 planes, strata__i64 h, strata__i64 w,
                                                strata__i64 size, strata__i64 stride, strata__i64 p, strata__i64 q)
{
  STRATA__CUDA_LAUNCH(k_maxpool_fwd, x, x_off, y, y_off, idx, idx_off, planes, h, w, size, stride, p, q);
}

extern "C" cudaError_t strata__cuda_maxpool_bwd(cudaStream_t stream, strata__i64 items, const float *dy,
                                                strata__i64 dy_off, const int *idx, strata__i64 idx_off, float *dx,
                                                strata__i64 dx_off, strata__i64 planes, strata__i64 h, strata__i64 w,
                                                strata__i64 size, strata__i64 stride, strata__i64 p, strata__i64 q)
{
  STRATA__CUDA_LAUNCH(k_maxpool_bwd, dy, dy_off, idx, idx_off, dx, dx_off, planes, h, w, size, stride, p, q);
}

extern "C" cudaError_t strata__cuda_xent_vp_max(cudaStream_t stream, strata__i64 groups, int wg, const float *logits,
                                                strata__i64 logits_off, float *rowmax, strata__i64 rowmax_off,
                                                strata__i64 rows, strata__i64 vl)
{
  STRATA__CUDA_LAUNCH_GROUPS(k_xent_vp_max, logits, logits_off, rowmax, rowmax_off, rows, vl);
}

extern "C" cudaError_t strata__cuda_xent_vp_sums(cudaStream_t stream, strata__i64 groups, int wg, const float *logits,
                                                 strata__i64 logits_off, const int *targets, strata__i64 targets_off,
                                                 const float *rowmax, strata__i64 rowmax_off, float *sumexp,
                                                 strata__i64 sumexp_off, float *tlogit, strata__i64 tlogit_off,
                                                 strata__i64 rows, strata__i64 vl, strata__i64 off)
{
  STRATA__CUDA_LAUNCH_GROUPS(k_xent_vp_sums, logits, logits_off, targets, targets_off, rowmax, rowmax_off, sumexp,
                             sumexp_off, tlogit, tlogit_off, rows, vl, off);
}

extern "C" cudaError_t strata__cuda_xent_vp_loss(cudaStream_t stream, strata__i64 items, const float *rowmax,
                                                 strata__i64 rowmax_off, const float *sumexp, strata__i64 sumexp_off,
                                                 const float *tlogit, strata__i64 tlogit_off, const int *targets,
                                                 strata__i64 targets_off, float *loss, strata__i64 loss_off,
                                                 strata__i64 rows, strata__i64 vocab)
{
  STRATA__CUDA_LAUNCH(k_xent_vp_loss, rowmax, rowmax_off, sumexp, sumexp_off, tlogit, tlogit_off, targets, targets_off,
                      loss, loss_off, rows, vocab);
}

extern "C" cudaError_t strata__cuda_xent_vp_bwd(cudaStream_t stream, strata__i64 items, const float *logits,
                                                strata__i64 logits_off, const int *targets, strata__i64 targets_off,
                                                const float *rowmax, strata__i64 rowmax_off, const float *sumexp,
                                                strata__i64 sumexp_off, float *dlogits, strata__i64 dlogits_off,
                                                strata__i64 rows, strata__i64 vl, strata__i64 off, strata__i64 vocab,
                                                float scale)
{
  STRATA__CUDA_LAUNCH(k_xent_vp_bwd, logits, logits_off, targets, targets_off, rowmax, rowmax_off, sumexp, sumexp_off,
                      dlogits, dlogits_off, rows, vl, off, vocab, scale);
}

extern "C" cudaError_t strata__cuda_tokens_shift(cudaStream_t stream, strata__i64 items, const int *tokens,
                                                 strata__i64 tokens_off, int *out, strata__i64 out_off, strata__i64 n,
                                                 strata__i64 off, strata__i64 count)
{
  STRATA__CUDA_LAUNCH(k_tokens_shift, tokens, tokens_off, out, out_off, n, off, count);
}

/*
** convert's two directions: k_convert of ops.k compiled again under the
** buffer-type masks of kernels/dialect.h that make x (mask 1) or y (mask 2)
** bfloat16, each in a namespace of its own (KERNEL without extern "C":
** the names repeat). The other kernels take no bfloat16 yet on CUDA: the
** backend refuses those operands, saying so.
*/
#undef KERNEL
#define KERNEL __global__
namespace strata_k_from_bf16 {
#undef STRATA_BF16_MASK
#define STRATA_BF16_MASK 1
#include "dialect.h"
#include "ops.k"
}
namespace strata_k_to_bf16 {
#undef STRATA_BF16_MASK
#define STRATA_BF16_MASK 2
#include "dialect.h"
#include "ops.k"
}

extern "C" cudaError_t strata__cuda_convert(cudaStream_t stream, strata__i64 items, const void *x, strata__i64 x_off,
                                            int x_bf16, void *y, strata__i64 y_off, strata__i64 n)
{
  if (x_bf16)
    STRATA__CUDA_LAUNCH(strata_k_from_bf16::k_convert, (const unsigned short *)x, x_off, (float *)y, y_off, n);
  STRATA__CUDA_LAUNCH(strata_k_to_bf16::k_convert, (const float *)x, x_off, (unsigned short *)y, y_off, n);
}
