/* SPDX-License-Identifier: MIT */
/* launch.h — the C-callable launchers of backends/cuda/kernels.cu, one per kernel of kernels/ops.k and attention.k. Internal. */
#ifndef STRATA__CUDA_LAUNCH_H
#define STRATA__CUDA_LAUNCH_H

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
** Each strata__cuda_<kernel> enqueues kernel k_<kernel> on `stream` (of the
** current device) as `blocks` blocks of `threads` threads: for the kernels
** of one item per thread ("Items: ..." in kernels/ops.k) ceil(items /
** STRATA__CUDA_BLOCK) blocks of STRATA__CUDA_BLOCK; for the cooperative
** ones ("Work-groups: ...") one block per work-group, of a power of two <=
** STRATA__CUDA_WG_MAX threads. Nothing is launched when blocks is 0.
** `mask` is the kernels' buffer-type mask (kernels/dialect.h: bit i set
** when the i-th buffer parameter is bfloat16). The parameters after it are
** exactly the kernel's, in its order; buffers are device pointers of the
** current device, offsets count elements of each buffer's type. Returns the
** launch status (cudaGetLastError after the launch): failures during
** execution surface later, at the stream's synchronisation.
*/
#define STRATA__CUDA_BLOCK 256

/* Columns of a column reduction's tile (STRATA_K_COL_TILE of kernels/ops.k; OpenCL's is 32): at 32 a 768-column
** bias gradient ran 24 blocks of 256 threads, each summing 1,024 rows, on an H100's 132 SMs (~0.4 ms where reading
** the 8192 x 768 rows takes microseconds); at 8, 96 blocks and 256 rows a thread. A warp still reads 32 bytes of
** each of 4 rows (float32: whole sectors). */
#define STRATA_K_COL_TILE 8

/* STRATA_K_WG_MAX of kernels/ops.k: the size of the reductions' shared arrays. */
#define STRATA__CUDA_WG_MAX 256

/* Partial sums of k_sumsq_partial: the most a queue's scratch holds. */
#define STRATA__CUDA_SUMSQ_PARTS 4096

typedef long long strata__i64;

struct strata__services;
struct strata__op;

/*
** Enqueue op `op` (any op but GEMM) on `stream` of device `dev` (current),
** with operands of either float type: the kernels of kernels/ops.k and
** attention.k (backends/cuda/ops.c), `wg` threads a block for the
** cooperative ones, `partials` (STRATA__CUDA_SUMSQ_PARTS floats on the
** device, the queue's own) for sumsq. STRATA_OK, or a failure reported
** through svc->error.
*/
int strata__cuda_kernel_op(const struct strata__services *svc, cudaStream_t stream, int dev, int wg, float *partials,
                           const struct strata__op *op);

cudaError_t strata__cuda_bias_add(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask, void *y,
                                  strata__i64 y_off, const void *bias, strata__i64 bias_off, strata__i64 rows,
                                  strata__i64 cols);
cudaError_t strata__cuda_bias_grad(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask, const void *dy,
                                   strata__i64 dy_off, void *dbias, strata__i64 dbias_off, strata__i64 rows,
                                   strata__i64 cols, int accumulate);
cudaError_t strata__cuda_gelu_fwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask, const void *x,
                                  strata__i64 x_off, void *y, strata__i64 y_off, strata__i64 n);
cudaError_t strata__cuda_gelu_bwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask, const void *x,
                                  strata__i64 x_off, const void *dy, strata__i64 dy_off, void *dx, strata__i64 dx_off,
                                  strata__i64 n);
cudaError_t strata__cuda_relu_fwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask, const void *x,
                                  strata__i64 x_off, void *y, strata__i64 y_off, strata__i64 n);
cudaError_t strata__cuda_relu_bwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask, const void *x,
                                  strata__i64 x_off, const void *dy, strata__i64 dy_off, void *dx, strata__i64 dx_off,
                                  strata__i64 n);
cudaError_t strata__cuda_add(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask, const void *a,
                             strata__i64 a_off, const void *b, strata__i64 b_off, void *y, strata__i64 y_off,
                             strata__i64 n);
cudaError_t strata__cuda_convert(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask, const void *x,
                                 strata__i64 x_off, void *y, strata__i64 y_off, strata__i64 n);
cudaError_t strata__cuda_reduce_f32(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask, const void *a,
                                    strata__i64 a_off, const void *b, strata__i64 b_off, void *y, strata__i64 y_off,
                                    strata__i64 n, int op);
cudaError_t strata__cuda_reduce_i32(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask, const int *a,
                                    strata__i64 a_off, const int *b, strata__i64 b_off, int *y, strata__i64 y_off,
                                    strata__i64 n, int op);
cudaError_t strata__cuda_scale(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask, void *x,
                               strata__i64 x_off, float alpha, strata__i64 n);
cudaError_t strata__cuda_fill(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask, void *x,
                              strata__i64 x_off, float value, strata__i64 n);
cudaError_t strata__cuda_layernorm_fwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                       const void *x, strata__i64 x_off, const void *gamma, strata__i64 gamma_off,
                                       const void *beta, strata__i64 beta_off, void *y, strata__i64 y_off, void *mean,
                                       strata__i64 mean_off, void *rstd, strata__i64 rstd_off, strata__i64 rows,
                                       strata__i64 cols, float eps);
cudaError_t strata__cuda_layernorm_bwd_dx(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                          const void *x, strata__i64 x_off, const void *gamma, strata__i64 gamma_off,
                                          const void *mean, strata__i64 mean_off, const void *rstd,
                                          strata__i64 rstd_off, const void *dy, strata__i64 dy_off, void *dx,
                                          strata__i64 dx_off, strata__i64 rows, strata__i64 cols);
cudaError_t strata__cuda_layernorm_bwd_dparams(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                               const void *x, strata__i64 x_off, const void *mean, strata__i64 mean_off,
                                               const void *rstd, strata__i64 rstd_off, const void *dy,
                                               strata__i64 dy_off, void *dgamma, strata__i64 dgamma_off, void *dbeta,
                                               strata__i64 dbeta_off, strata__i64 rows, strata__i64 cols,
                                               int accumulate);
cudaError_t strata__cuda_softmax_fwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask, const void *x,
                                     strata__i64 x_off, void *y, strata__i64 y_off, strata__i64 rows, strata__i64 cols,
                                     float scale, int causal);
cudaError_t strata__cuda_softmax_bwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask, const void *y,
                                     strata__i64 y_off, const void *dy, strata__i64 dy_off, void *dx,
                                     strata__i64 dx_off, strata__i64 rows, strata__i64 cols, float scale);
cudaError_t strata__cuda_embedding_fwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                       const int *tokens, strata__i64 tokens_off, const void *table,
                                       strata__i64 table_off, void *out, strata__i64 out_off, strata__i64 n,
                                       strata__i64 dim, strata__i64 vocab);
cudaError_t strata__cuda_embedding_bwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                       const int *tokens, strata__i64 tokens_off, const void *dout,
                                       strata__i64 dout_off, void *dtable, strata__i64 dtable_off, strata__i64 n,
                                       strata__i64 dim, strata__i64 vocab);
cudaError_t strata__cuda_cross_entropy_fwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                           const void *logits, strata__i64 logits_off, const int *targets,
                                           strata__i64 targets_off, void *loss, strata__i64 loss_off, strata__i64 rows,
                                           strata__i64 vocab);
cudaError_t strata__cuda_cross_entropy_bwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                           const void *logits, strata__i64 logits_off, const int *targets,
                                           strata__i64 targets_off, void *dlogits, strata__i64 dlogits_off,
                                           strata__i64 rows, strata__i64 vocab, float scale);
cudaError_t strata__cuda_xent_vp_max(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                     const void *logits, strata__i64 logits_off, void *rowmax, strata__i64 rowmax_off,
                                     strata__i64 rows, strata__i64 vl);
cudaError_t strata__cuda_xent_vp_sums(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                      const void *logits, strata__i64 logits_off, const int *targets,
                                      strata__i64 targets_off, const void *rowmax, strata__i64 rowmax_off, void *sumexp,
                                      strata__i64 sumexp_off, void *tlogit, strata__i64 tlogit_off, strata__i64 rows,
                                      strata__i64 vl, strata__i64 off);
cudaError_t strata__cuda_xent_vp_loss(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                      const void *rowmax, strata__i64 rowmax_off, const void *sumexp,
                                      strata__i64 sumexp_off, const void *tlogit, strata__i64 tlogit_off,
                                      const int *targets, strata__i64 targets_off, void *loss, strata__i64 loss_off,
                                      strata__i64 rows, strata__i64 vocab);
cudaError_t strata__cuda_xent_vp_bwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                     const void *logits, strata__i64 logits_off, const int *targets,
                                     strata__i64 targets_off, const void *rowmax, strata__i64 rowmax_off,
                                     const void *sumexp, strata__i64 sumexp_off, void *dlogits, strata__i64 dlogits_off,
                                     strata__i64 rows, strata__i64 vl, strata__i64 off, strata__i64 vocab, float scale);
cudaError_t strata__cuda_tokens_shift(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                      const int *tokens, strata__i64 tokens_off, int *out, strata__i64 out_off,
                                      strata__i64 n, strata__i64 off, strata__i64 count);
cudaError_t strata__cuda_adamw(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask, float *param,
                               strata__i64 param_off, const float *grad, strata__i64 grad_off, float *m,
                               strata__i64 m_off, float *v, strata__i64 v_off, strata__i64 n, float lr, float beta1,
                               float beta2, float eps, float weight_decay, float bc1, float bc2);
cudaError_t strata__cuda_sumsq_partial(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                       const void *x, strata__i64 x_off, strata__i64 n, float *part,
                                       strata__i64 part_off, strata__i64 nparts);
cudaError_t strata__cuda_sumsq_final(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                     const float *part, strata__i64 part_off, strata__i64 nparts, float *out,
                                     strata__i64 out_off, int accumulate);
cudaError_t strata__cuda_im2col(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask, const void *x,
                                strata__i64 x_off, void *col, strata__i64 col_off, strata__i64 c, strata__i64 h,
                                strata__i64 w, strata__i64 r, strata__i64 s, strata__i64 stride, strata__i64 pad,
                                strata__i64 p, strata__i64 q);
cudaError_t strata__cuda_col2im(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask, const void *col,
                                strata__i64 col_off, void *x, strata__i64 x_off, strata__i64 c, strata__i64 h,
                                strata__i64 w, strata__i64 r, strata__i64 s, strata__i64 stride, strata__i64 pad,
                                strata__i64 p, strata__i64 q);
cudaError_t strata__cuda_maxpool_fwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask, const void *x,
                                     strata__i64 x_off, void *y, strata__i64 y_off, int *idx, strata__i64 idx_off,
                                     strata__i64 planes, strata__i64 h, strata__i64 w, strata__i64 size,
                                     strata__i64 stride, strata__i64 p, strata__i64 q);
cudaError_t strata__cuda_maxpool_bwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                     const void *dy, strata__i64 dy_off, const int *idx, strata__i64 idx_off, void *dx,
                                     strata__i64 dx_off, strata__i64 planes, strata__i64 h, strata__i64 w,
                                     strata__i64 size, strata__i64 stride, strata__i64 p, strata__i64 q);
cudaError_t strata__cuda_attention_fwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                       const void *qkv, strata__i64 qkv_off, void *out, strata__i64 out_off, void *lse,
                                       strata__i64 lse_off, strata__i64 batch, strata__i64 seq, strata__i64 heads,
                                       strata__i64 kv_heads, strata__i64 head_dim, float scale, int causal);
cudaError_t strata__cuda_attention_bwd_dq(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                          const void *qkv, strata__i64 qkv_off, const void *out, strata__i64 out_off,
                                          const void *dout, strata__i64 dout_off, const void *lse, strata__i64 lse_off,
                                          void *dqkv, strata__i64 dqkv_off, strata__i64 batch, strata__i64 seq,
                                          strata__i64 heads, strata__i64 kv_heads, strata__i64 head_dim, float scale,
                                          int causal);
cudaError_t strata__cuda_attention_bwd_dkv(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                           const void *qkv, strata__i64 qkv_off, const void *out, strata__i64 out_off,
                                           const void *dout, strata__i64 dout_off, const void *lse, strata__i64 lse_off,
                                           void *dqkv, strata__i64 dqkv_off, strata__i64 batch, strata__i64 seq,
                                           strata__i64 heads, strata__i64 kv_heads, strata__i64 head_dim, float scale,
                                          int causal);
cudaError_t strata__cuda_rmsnorm_fwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                     const void *x, strata__i64 x_off, const void *w, strata__i64 w_off, void *y,
                                     strata__i64 y_off, void *rstd, strata__i64 rstd_off, strata__i64 rows,
                                     strata__i64 cols, float eps);
cudaError_t strata__cuda_rmsnorm_bwd_dx(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                        const void *x, strata__i64 x_off, const void *w, strata__i64 w_off,
                                        const void *rstd, strata__i64 rstd_off, const void *dy, strata__i64 dy_off,
                                        void *dx, strata__i64 dx_off, strata__i64 rows, strata__i64 cols);
cudaError_t strata__cuda_rmsnorm_bwd_dw(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                        const void *x, strata__i64 x_off, const void *rstd, strata__i64 rstd_off,
                                        const void *dy, strata__i64 dy_off, void *dw, strata__i64 dw_off,
                                        strata__i64 rows, strata__i64 cols, int accumulate);
cudaError_t strata__cuda_swiglu_fwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                    const void *gu, strata__i64 gu_off, void *h, strata__i64 h_off, strata__i64 rows,
                                    strata__i64 cols);
cudaError_t strata__cuda_swiglu_bwd(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask,
                                    const void *gu, strata__i64 gu_off, const void *dh, strata__i64 dh_off, void *dgu,
                                    strata__i64 dgu_off, strata__i64 rows, strata__i64 cols);
cudaError_t strata__cuda_rope(cudaStream_t stream, strata__i64 blocks, int threads, unsigned mask, const void *x,
                              strata__i64 x_off, void *y, strata__i64 y_off, const void *freq, strata__i64 freq_off,
                              strata__i64 batch, strata__i64 seq, strata__i64 heads, strata__i64 head_dim,
                              strata__i64 ld, strata__i64 pos0, float sign);

#ifdef __cplusplus
}
#endif
#endif /* STRATA__CUDA_LAUNCH_H */
