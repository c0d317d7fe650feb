/* SPDX-License-Identifier: MIT */
/* launch.h — the C-callable launchers of backends/cuda/kernels.cu, one per kernel of kernels/ops.k. Internal. */
#ifndef STRATA__CUDA_LAUNCH_H
#define STRATA__CUDA_LAUNCH_H

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
** Each strata__cuda_<kernel> enqueues kernel k_<kernel> of kernels/ops.k on
** `stream` (of the current device) over `items` threads (the count its
** comment in ops.k names), 256 threads a block, ceil(items / 256) blocks.
** Pointers are device pointers of the current device; offsets count
** elements. Nothing is launched when items is 0. Returns the launch status
** (cudaGetLastError after the launch): failures during execution surface
** later, at the stream's synchronisation.
**
** The parameters after the stream are exactly those of the kernel, in its
** order; `items` comes first because some kernels take no explicit count.
** The cooperative kernels ("Work-groups: ..." in ops.k: row and column
** reductions) take `groups` and `wg` instead: one block of `wg` threads (a
** power of two <= STRATA__CUDA_WG_MAX) per row or column.
*/
#define STRATA__CUDA_BLOCK 256

/* STRATA_K_WG_MAX of kernels/ops.k: the size of the reductions' shared arrays. */
#define STRATA__CUDA_WG_MAX 256

/* Partial sums of k_sumsq_partial: the most a queue's scratch holds. */
#define STRATA__CUDA_SUMSQ_PARTS 4096

typedef long long strata__i64;

cudaError_t strata__cuda_bias_add(cudaStream_t stream, strata__i64 items, float *y, strata__i64 y_off,
                                  const float *bias, strata__i64 bias_off, strata__i64 rows, strata__i64 cols);
cudaError_t strata__cuda_bias_grad(cudaStream_t stream, strata__i64 groups, int wg, const float *dy, strata__i64 dy_off,
                                   float *dbias, strata__i64 dbias_off, strata__i64 rows, strata__i64 cols,
                                   int accumulate);
cudaError_t strata__cuda_gelu_fwd(cudaStream_t stream, strata__i64 items, const float *x, strata__i64 x_off,
                                  float *y, strata__i64 y_off, strata__i64 n);
cudaError_t strata__cuda_gelu_bwd(cudaStream_t stream, strata__i64 items, const float *x, strata__i64 x_off,
                                  const float *dy, strata__i64 dy_off, float *dx, strata__i64 dx_off, strata__i64 n);
cudaError_t strata__cuda_relu_fwd(cudaStream_t stream, strata__i64 items, const float *x, strata__i64 x_off,
                                  float *y, strata__i64 y_off, strata__i64 n);
cudaError_t strata__cuda_relu_bwd(cudaStream_t stream, strata__i64 items, const float *x, strata__i64 x_off,
                                  const float *dy, strata__i64 dy_off, float *dx, strata__i64 dx_off, strata__i64 n);
cudaError_t strata__cuda_add(cudaStream_t stream, strata__i64 items, const float *a, strata__i64 a_off,
                             const float *b, strata__i64 b_off, float *y, strata__i64 y_off, strata__i64 n);
cudaError_t strata__cuda_reduce_f32(cudaStream_t stream, strata__i64 items, const float *a, strata__i64 a_off,
                                    const float *b, strata__i64 b_off, float *y, strata__i64 y_off, strata__i64 n,
                                    int op);
cudaError_t strata__cuda_reduce_i32(cudaStream_t stream, strata__i64 items, const int *a, strata__i64 a_off,
                                    const int *b, strata__i64 b_off, int *y, strata__i64 y_off, strata__i64 n, int op);
cudaError_t strata__cuda_scale(cudaStream_t stream, strata__i64 items, float *x, strata__i64 x_off, float alpha,
                               strata__i64 n);
cudaError_t strata__cuda_fill(cudaStream_t stream, strata__i64 items, float *x, strata__i64 x_off, float value,
                              strata__i64 n);
cudaError_t strata__cuda_layernorm_fwd(cudaStream_t stream, strata__i64 groups, int wg, const float *x, strata__i64 x_off,
                                       const float *gamma, strata__i64 gamma_off, const float *beta,
                                       strata__i64 beta_off, float *y, strata__i64 y_off, float *mean,
                                       strata__i64 mean_off, float *rstd, strata__i64 rstd_off, strata__i64 rows,
                                       strata__i64 cols, float eps);
cudaError_t strata__cuda_layernorm_bwd_dx(cudaStream_t stream, strata__i64 groups, int wg, const float *x, strata__i64 x_off,
                                          const float *gamma, strata__i64 gamma_off, const float *mean,
                                          strata__i64 mean_off, const float *rstd, strata__i64 rstd_off,
                                          const float *dy, strata__i64 dy_off, float *dx, strata__i64 dx_off,
                                          strata__i64 rows, strata__i64 cols);
cudaError_t strata__cuda_layernorm_bwd_dparams(cudaStream_t stream, strata__i64 groups, int wg, const float *x,
                                               strata__i64 x_off, const float *mean, strata__i64 mean_off,
                                               const float *rstd, strata__i64 rstd_off, const float *dy,
                                               strata__i64 dy_off, float *dgamma, strata__i64 dgamma_off,
                                               float *dbeta, strata__i64 dbeta_off, strata__i64 rows,
                                               strata__i64 cols, int accumulate);
cudaError_t strata__cuda_softmax_fwd(cudaStream_t stream, strata__i64 groups, int wg, const float *x, strata__i64 x_off,
                                     float *y, strata__i64 y_off, strata__i64 rows, strata__i64 cols, float scale,
                                     int causal);
cudaError_t strata__cuda_softmax_bwd(cudaStream_t stream, strata__i64 groups, int wg, const float *y, strata__i64 y_off,
                                     const float *dy, strata__i64 dy_off, float *dx, strata__i64 dx_off,
                                     strata__i64 rows, strata__i64 cols, float scale);
cudaError_t strata__cuda_embedding_fwd(cudaStream_t stream, strata__i64 items, const int *tokens,
                                       strata__i64 tokens_off, const float *table, strata__i64 table_off, float *out,
                                       strata__i64 out_off, strata__i64 n, strata__i64 dim, strata__i64 vocab);
cudaError_t strata__cuda_embedding_bwd(cudaStream_t stream, strata__i64 items, const int *tokens,
                                       strata__i64 tokens_off, const float *dout, strata__i64 dout_off, float *dtable,
                                       strata__i64 dtable_off, strata__i64 n, strata__i64 dim, strata__i64 vocab);
cudaError_t strata__cuda_cross_entropy_fwd(cudaStream_t stream, strata__i64 groups, int wg, const float *logits,
                                           strata__i64 logits_off, const int *targets, strata__i64 targets_off,
                                           float *loss, strata__i64 loss_off, strata__i64 rows, strata__i64 vocab);
cudaError_t strata__cuda_cross_entropy_bwd(cudaStream_t stream, strata__i64 groups, int wg, const float *logits,
                                           strata__i64 logits_off, const int *targets, strata__i64 targets_off,
                                           float *dlogits, strata__i64 dlogits_off, strata__i64 rows,
                                           strata__i64 vocab, float scale);
cudaError_t strata__cuda_adamw(cudaStream_t stream, strata__i64 items, float *param, strata__i64 param_off,
                               const float *grad, strata__i64 grad_off, float *m, strata__i64 m_off, float *v,
                               strata__i64 v_off, strata__i64 n, float lr, float beta1, float beta2, float eps,
                               float weight_decay, float bc1, float bc2);
cudaError_t strata__cuda_sumsq_partial(cudaStream_t stream, strata__i64 items, const float *x, strata__i64 x_off,
                                       strata__i64 n, float *part, strata__i64 part_off, strata__i64 nparts);
cudaError_t strata__cuda_sumsq_final(cudaStream_t stream, strata__i64 items, const float *part,
                                     strata__i64 part_off, strata__i64 nparts, float *out, strata__i64 out_off,
                                     int accumulate);
cudaError_t strata__cuda_im2col(cudaStream_t stream, strata__i64 items, const float *x, strata__i64 x_off,
                                float *col, strata__i64 col_off, strata__i64 c, strata__i64 h, strata__i64 w,
                                strata__i64 r, strata__i64 s, strata__i64 stride, strata__i64 pad, strata__i64 p,
                                strata__i64 q);
cudaError_t strata__cuda_col2im(cudaStream_t stream, strata__i64 items, const float *col, strata__i64 col_off,
                                float *x, strata__i64 x_off, strata__i64 c, strata__i64 h, strata__i64 w,
                                strata__i64 r, strata__i64 s, strata__i64 stride, strata__i64 pad, strata__i64 p,
                                strata__i64 q);
cudaError_t strata__cuda_maxpool_fwd(cudaStream_t stream, strata__i64 items, const float *x, strata__i64 x_off,
                                     float *y, strata__i64 y_off, int *idx, strata__i64 idx_off,
                                     strata__i64 planes, strata__i64 h, strata__i64 w, strata__i64 size,
                                     strata__i64 stride, strata__i64 p, strata__i64 q);
cudaError_t strata__cuda_maxpool_bwd(cudaStream_t stream, strata__i64 items, const float *dy, strata__i64 dy_off,
                                     const int *idx, strata__i64 idx_off, float *dx, strata__i64 dx_off,
                                     strata__i64 planes, strata__i64 h, strata__i64 w, strata__i64 size,
                                     strata__i64 stride, strata__i64 p, strata__i64 q);
cudaError_t strata__cuda_xent_vp_max(cudaStream_t stream, strata__i64 groups, int wg, const float *logits,
                                     strata__i64 logits_off, float *rowmax, strata__i64 rowmax_off, strata__i64 rows,
                                     strata__i64 vl);
cudaError_t strata__cuda_xent_vp_sums(cudaStream_t stream, strata__i64 groups, int wg, const float *logits,
                                      strata__i64 logits_off, const int *targets, strata__i64 targets_off,
                                      const float *rowmax, strata__i64 rowmax_off, float *sumexp,
                                      strata__i64 sumexp_off, float *tlogit, strata__i64 tlogit_off, strata__i64 rows,
                                      strata__i64 vl, strata__i64 off);
cudaError_t strata__cuda_xent_vp_loss(cudaStream_t stream, strata__i64 items, const float *rowmax,
                                      strata__i64 rowmax_off, const float *sumexp, strata__i64 sumexp_off,
                                      const float *tlogit, strata__i64 tlogit_off, const int *targets,
                                      strata__i64 targets_off, float *loss, strata__i64 loss_off, strata__i64 rows,
                                      strata__i64 vocab);
cudaError_t strata__cuda_xent_vp_bwd(cudaStream_t stream, strata__i64 items, const float *logits,
                                     strata__i64 logits_off, const int *targets, strata__i64 targets_off,
                                     const float *rowmax, strata__i64 rowmax_off, const float *sumexp,
                                     strata__i64 sumexp_off, float *dlogits, strata__i64 dlogits_off,
                                     strata__i64 rows, strata__i64 vl, strata__i64 off, strata__i64 vocab,
                                     float scale);
/* y = x converted between float32 and bfloat16 (x_bf16: x is bfloat16 and y float32, else the reverse; x and y
** disjoint). Pointers to the buffers' starts, offsets in elements of each one's type. */
cudaError_t strata__cuda_convert(cudaStream_t stream, strata__i64 items, const void *x, strata__i64 x_off, int x_bf16,
                                 void *y, strata__i64 y_off, strata__i64 n);
cudaError_t strata__cuda_tokens_shift(cudaStream_t stream, strata__i64 items, const int *tokens,
                                      strata__i64 tokens_off, int *out, strata__i64 out_off, strata__i64 n,
                                      strata__i64 off, strata__i64 count);

#ifdef __cplusplus
}
#endif
#endif /* STRATA__CUDA_LAUNCH_H */
