/* SPDX-License-Identifier: MIT */
/* strata/ops.h — the numerical ops (float32 or bfloat16 storage, float32 arithmetic), enqueued on a device queue. */
#ifndef STRATA_OPS_H
#define STRATA_OPS_H

#include <strata/device.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
** An operand: a buffer, an offset into it counted in elements of the
** operand's type, and that type (enum strata_dtype in strata/comm.h).
** dtype 0 is STRATA_FLOAT32, so `{buf, off}` and strata_mem(buf, off) are
** float32 operands. Every op checks that each operand lies on the queue's
** device, that the elements it touches lie inside the buffer, and that its
** type is one the operand takes (STRATA_ERR_INVALID, naming op and operand,
** otherwise); matrices are row-major.
**
** Types: the float operands of every op may be STRATA_BFLOAT16 or
** STRATA_FLOAT32, each operand independently. An op computes in float32
** (bfloat16 inputs widened exactly) and rounds once, when it stores a
** bfloat16 result: to nearest, ties to even; NaN stays NaN, infinities stay;
** float32 denormals become zeros of their sign (as x86's vcvtneps2bf16).
** The exceptions: index operands (tokens, targets, pooling indices, the
** token shift's input and output) hold int32 and must be 4-byte
** (STRATA_FLOAT32 or STRATA_INT32; never bfloat16); strata_adamw's four
** operands and strata_sumsq's out must be float32; strata_gemm's A and B
** share one type (bfloat16 A and B multiply with float32 sums) while C may
** be either; strata_rope_fwd/_bwd's freq must be float32. Every backend
** runs bfloat16 (OpenCL and CUDA kernels widen on load and round once on
** store).
**
** Ops are asynchronous: they are enqueued on `q` and run in order. An op
** that a device's backend lacks fails with STRATA_ERR_UNSUPPORTED. Outputs
** named "accumulate" add to what is there when the flag is 1 and overwrite
** it when it is 0.
*/
typedef struct strata_mem {
  strata_buffer_t buf;
  size_t off;   /* in elements of dtype */
  int dtype;    /* enum strata_dtype; 0 = STRATA_FLOAT32 */
} strata_mem_t;

static inline strata_mem_t strata_mem(strata_buffer_t buf, size_t off) {
  strata_mem_t m;
  m.buf = buf;
  m.off = off;
  m.dtype = 0;
  return m;
}

/* An operand of another type: strata_mem_typed(buf, off, STRATA_BFLOAT16). */
static inline strata_mem_t strata_mem_typed(strata_buffer_t buf, size_t off, int dtype) {
  strata_mem_t m;
  m.buf = buf;
  m.off = off;
  m.dtype = dtype;
  return m;
}

enum { STRATA_NO_TRANS = 0, STRATA_TRANS = 1 };

/*
** C[i] = alpha * op(A[i]) * op(B[i]) + beta * C[i] for i < batch, where
** op(A) is m x k, op(B) is k x n, C is m x n; A[i] starts stride_a elements
** after A[i-1] (likewise B, C). lda/ldb/ldc are row strides of the stored
** matrices. The C matrices must not share elements; they may interleave
** (stride_c = n with ldc = batch * n writes the batch side by side).
** Host: CBLAS; OpenCL: CLBlast; CUDA: cuBLAS.
*/
STRATA_API int strata_gemm(strata_queue_t q, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                           float alpha, strata_mem_t a, int64_t lda, int64_t stride_a, strata_mem_t b,
                           int64_t ldb, int64_t stride_b, float beta, strata_mem_t c, int64_t ldc,
                           int64_t stride_c, int64_t batch);

/*
** A linear layer's forward: y = x w + bias (+ res), y, res rows x out, x
** rows x in, w in x out, bias out elements, all dense and row-major (res.buf
** NULL: no residual; else res and y disjoint); x and w of one type. The
** meaning of strata_gemm (alpha 1, beta 0), strata_bias_add and, with res,
** strata_add(y, res, y) in turn, which is how a backend without a fused
** kernel runs it (the same bits). The host fuses the three into oneDNN's
** bfloat16 matmul where x, w and y are bfloat16: its float32 sum, the bias
** and the residual added in float32, y rounded once rather than after each.
*/
STRATA_API int strata_linear(strata_queue_t q, int64_t rows, int64_t in, int64_t out, strata_mem_t x, strata_mem_t w,
                             strata_mem_t bias, strata_mem_t res, strata_mem_t y);

/* y[r][c] += bias[c] for a rows x cols matrix y (in place). */
STRATA_API int strata_bias_add(strata_queue_t q, strata_mem_t y, strata_mem_t bias, int64_t rows, int64_t cols);
/* dbias[c] (+)= sum over r of dy[r][c]. */
STRATA_API int strata_bias_grad(strata_queue_t q, strata_mem_t dy, strata_mem_t dbias, int64_t rows, int64_t cols,
                                int accumulate);

/* GELU (tanh approximation) and ReLU, elementwise over n: y = f(x); dx = dy * f'(x).
** y may be x (in place); dx may be dy. */
STRATA_API int strata_gelu_fwd(strata_queue_t q, strata_mem_t x, strata_mem_t y, int64_t n);
STRATA_API int strata_gelu_bwd(strata_queue_t q, strata_mem_t x, strata_mem_t dy, strata_mem_t dx, int64_t n);
STRATA_API int strata_relu_fwd(strata_queue_t q, strata_mem_t x, strata_mem_t y, int64_t n);
STRATA_API int strata_relu_bwd(strata_queue_t q, strata_mem_t x, strata_mem_t dy, strata_mem_t dx, int64_t n);

/* y = a + b over n elements (residual connections); y may be a or b. */
STRATA_API int strata_add(strata_queue_t q, strata_mem_t a, strata_mem_t b, strata_mem_t y, int64_t n);
/* x *= alpha over n elements. */
STRATA_API int strata_scale(strata_queue_t q, strata_mem_t x, float alpha, int64_t n);
/* x = value over n elements. */
STRATA_API int strata_fill(strata_queue_t q, strata_mem_t x, float value, int64_t n);
/* y = x over n elements, converted to y's type (float32 <-> bfloat16, rounded as above; a plain copy when the
** types agree). x and y must not overlap unless they are the same memory of the same type. */
STRATA_API int strata_convert(strata_queue_t q, strata_mem_t x, strata_mem_t y, int64_t n);

/*
** Layer normalisation of each row of x (rows x cols):
** y = (x - mean) * rstd * gamma + beta, storing mean[rows] and rstd[rows]
** for the backward pass. Backward: dx (overwritten), dgamma and dbeta
** (accumulate flag).
*/
STRATA_API int strata_layernorm_fwd(strata_queue_t q, strata_mem_t x, strata_mem_t gamma, strata_mem_t beta,
                                    strata_mem_t y, strata_mem_t mean, strata_mem_t rstd, int64_t rows,
                                    int64_t cols, float eps);
STRATA_API int strata_layernorm_bwd(strata_queue_t q, strata_mem_t x, strata_mem_t gamma, strata_mem_t mean,
                                    strata_mem_t rstd, strata_mem_t dy, strata_mem_t dx, strata_mem_t dgamma,
                                    strata_mem_t dbeta, int64_t rows, int64_t cols, int accumulate);

/*
** RMS normalisation of each row of x (rows x cols), LLaMA's RMSNorm:
** y = w * (x * rstd), rstd = 1 / sqrt(mean over the row of x^2 + eps),
** storing rstd[rows] (float32 or bfloat16; float32 keeps the statistic
** exact) for the backward pass; the sum of squares in double on the host.
** Backward: dx (overwritten; may be dy) = rstd * (dy w - xhat mean(dy w xhat)),
** xhat = x rstd, and dw (accumulate flag) = sum over the rows of dy xhat.
*/
STRATA_API int strata_rmsnorm_fwd(strata_queue_t q, strata_mem_t x, strata_mem_t w, strata_mem_t y,
                                  strata_mem_t rstd, int64_t rows, int64_t cols, float eps);
STRATA_API int strata_rmsnorm_bwd(strata_queue_t q, strata_mem_t x, strata_mem_t w, strata_mem_t rstd,
                                  strata_mem_t dy, strata_mem_t dx, strata_mem_t dw, int64_t rows, int64_t cols,
                                  int accumulate);

/*
** SwiGLU (LLaMA's MLP activation) on the output of ONE GEMM for gate|up:
** gu is rows x 2cols, each row [g (cols) | u (cols)] (the fused weight is
** gate_proj's rows stacked over up_proj's; under tensor parallelism each
** slice's own gate and up columns, in the same order), and
** h (rows x cols) = silu(g) * u, silu(g) = g / (1 + exp(-g)).
** Backward: dgu (rows x 2cols, overwritten; may be gu) from gu and dh:
** [dg | du] with dg = dh u silu'(g), du = dh silu(g).
*/
STRATA_API int strata_swiglu_fwd(strata_queue_t q, strata_mem_t gu, strata_mem_t h, int64_t rows, int64_t cols);
STRATA_API int strata_swiglu_bwd(strata_queue_t q, strata_mem_t gu, strata_mem_t dh, strata_mem_t dgu, int64_t rows,
                                 int64_t cols);

/*
** Rotary position embedding in Hugging Face's half-split convention
** (rotate_half: element i of a head pairs with element i + head_dim / 2).
** x holds batch x seq rows, row r = (b, t) starting r * ld elements in
** (ld >= heads * head_dim: the row stride, so that x may be the q|k part
** of a fused q|k|v row — q's heads followed by k's, rotated in one call),
** each row's first heads * head_dim elements being `heads` heads of
** head_dim (even). With p = pos0 + t (pos0 >= 0: the position of the
** first token, for a KV cache), a = (float)p * freq[i] (float32, as
** Hugging Face's), c = cos a, s = sin a, for i < head_dim / 2:
**   y[i] = x[i] c - x[i + hd/2] s,  y[i + hd/2] = x[i + hd/2] c + x[i] s.
** freq: head_dim / 2 float32 inverse frequencies (strata_rope_inv_freq,
** rounded to float). y has x's layout (same ld); y may be x (in place),
** otherwise they must not overlap; elements of a row past heads *
** head_dim are not touched. Backward: the transpose rotation of dy into dx
** (same layout; dx may be dy): dx[i] = dy[i] c + dy[i + hd/2] s,
** dx[i + hd/2] = dy[i + hd/2] c - dy[i] s.
*/
STRATA_API int strata_rope_fwd(strata_queue_t q, strata_mem_t x, strata_mem_t y, strata_mem_t freq, int64_t batch,
                               int64_t seq, int64_t heads, int64_t head_dim, int64_t ld, int64_t pos0);
STRATA_API int strata_rope_bwd(strata_queue_t q, strata_mem_t dy, strata_mem_t dx, strata_mem_t freq, int64_t batch,
                               int64_t seq, int64_t heads, int64_t head_dim, int64_t ld, int64_t pos0);

struct strata_model_config;
/*
** RoPE's inverse frequencies for heads of head_dim (even, >= 2) under
** `config` (include/strata/model.h: rope_theta, 0 meaning Hugging Face's
** default 10000, and rope_scaling), into out[head_dim / 2], in double:
** default: out[i] = theta^(-2i / head_dim);
** STRATA_ROPE_LLAMA3 (Hugging Face's _compute_llama3_parameters): with
** wavelength w = 2 pi / f of each default f, L = original_context /
** low_freq_factor, S = original_context / high_freq_factor:
** w > L: f / factor; w < S: f; else, s = (original_context / w -
** low_freq_factor) / (high_freq_factor - low_freq_factor), (1 - s) f / factor + s f.
** Bad input (odd or non-positive head_dim, a negative or non-finite theta,
** an unknown rope type, llama3 with factor <= 0, original_context <= 0,
** low_freq_factor <= 0 or high_freq_factor <= low_freq_factor, NULL
** pointers): STRATA_ERR_INVALID with a message naming the field; out untouched.
*/
STRATA_API int strata_rope_inv_freq(const struct strata_model_config *config, int64_t head_dim,
                                    double *out /* OUT */);

/*
** Row softmax of scale * x (rows x cols). With causal = 1 the rows are read
** as a stack of cols x cols attention matrices (rows a multiple of cols) and
** entry (i, j) with j > i (row index i taken within its matrix) is masked
** to probability 0. Backward: dx = scale * y * (dy - sum_j dy * y).
*/
STRATA_API int strata_softmax_fwd(strata_queue_t q, strata_mem_t x, strata_mem_t y, int64_t rows, int64_t cols,
                                  float scale, int causal);
STRATA_API int strata_softmax_bwd(strata_queue_t q, strata_mem_t y, strata_mem_t dy, strata_mem_t dx, int64_t rows,
                                  int64_t cols, float scale);

/*
** Fused self-attention of a GPT block, per sequence and head, without the
** T x T score or probability matrices (each query's scores are formed,
** used and dropped). qkv is batch x seq x 3D, D = heads x head_dim, each row
** [q | k | v] with head h at columns h*head_dim of each third (the layout of
** the block's fused QKV projection); out is batch x seq x D (head h at
** columns h*head_dim): out = softmax(scale q k^T, causal mask if causal) v.
** lse (batch x heads x seq) receives each query's log-sum-exp of its scaled
** scores — all the backward needs to recompute the probabilities.
** Backward: dqkv (batch x seq x 3D, overwritten) from qkv, out, dout and lse.
** The same result as two batched GEMMs around strata_softmax_fwd/_bwd, to
** float rounding. Deterministic (each head's sums in a fixed order). On
** every backend (OpenCL and CUDA: kernels/attention.k).
*/
STRATA_API int strata_attention_fwd(strata_queue_t q, strata_mem_t qkv, strata_mem_t out, strata_mem_t lse,
                                    int64_t batch, int64_t seq, int64_t heads, int64_t head_dim, float scale,
                                    int causal);
STRATA_API int strata_attention_bwd(strata_queue_t q, strata_mem_t qkv, strata_mem_t out, strata_mem_t dout,
                                    strata_mem_t lse, strata_mem_t dqkv, int64_t batch, int64_t seq, int64_t heads,
                                    int64_t head_dim, float scale, int causal);

/*
** Grouped-query attention (LLaMA's): the same fused attention with
** kv_heads key/value heads shared by heads query heads (kv_heads divides
** heads; heads / kv_heads query heads form a group). Each row of qkv
** (batch x seq rows) is [q (heads x head_dim) | k (kv_heads x head_dim) |
** v (kv_heads x head_dim)], the layout of one fused q|k|v projection; query
** head h reads key/value head h / (heads / kv_heads). out and lse as above
** (heads query heads); dqkv like qkv, its k and v parts the sums over each
** group's query heads, in head order (deterministic). kv_heads == heads is
** strata_attention_fwd/_bwd exactly (they call these), bit for bit.
** kv_heads not dividing heads: STRATA_ERR_SHAPE.
*/
STRATA_API int strata_attention_gqa_fwd(strata_queue_t q, strata_mem_t qkv, strata_mem_t out, strata_mem_t lse,
                                        int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_dim,
                                        float scale, int causal);
STRATA_API int strata_attention_gqa_bwd(strata_queue_t q, strata_mem_t qkv, strata_mem_t out, strata_mem_t dout,
                                        strata_mem_t lse, strata_mem_t dqkv, int64_t batch, int64_t seq, int64_t heads,
                                        int64_t kv_heads, int64_t head_dim, float scale, int causal);

/* Whether q's device runs strata_attention_fwd/_bwd (1) or the caller must compose them (0). */
STRATA_API int strata_attention_supported(strata_queue_t q);

/*
** Embedding lookup: out[i][:] = table[tokens[i]][:] for n int32 tokens,
** table vocab x dim. A token outside [0, vocab) yields a row of zeros.
** Backward: dtable[v][:] (+)= sum of dout[i][:] over the i with tokens[i] = v,
** summed in token order (deterministic).
*/
STRATA_API int strata_embedding_fwd(strata_queue_t q, strata_mem_t tokens, strata_mem_t table, strata_mem_t out,
                                    int64_t n, int64_t dim, int64_t vocab);
STRATA_API int strata_embedding_bwd(strata_queue_t q, strata_mem_t tokens, strata_mem_t dout, strata_mem_t dtable,
                                    int64_t n, int64_t dim, int64_t vocab, int accumulate);

/*
** Cross-entropy from logits (rows x vocab) against int32 targets:
** loss[r] = logsumexp(logits[r]) - logits[r][target[r]]; a target outside
** [0, vocab) (e.g. -1 for padding) gives loss 0 and gradient 0.
** Backward: dlogits = scale * (softmax(logits) - onehot(target)).
*/
STRATA_API int strata_cross_entropy_fwd(strata_queue_t q, strata_mem_t logits, strata_mem_t targets,
                                        strata_mem_t loss, int64_t rows, int64_t vocab);
STRATA_API int strata_cross_entropy_bwd(strata_queue_t q, strata_mem_t logits, strata_mem_t targets,
                                        strata_mem_t dlogits, int64_t rows, int64_t vocab, float scale);

/*
** Vocabulary-parallel cross-entropy (Megatron-LM's vocab_parallel_cross_entropy):
** each tensor-parallel slice holds the logits of vocabulary columns
** [off, off + vl) of a vocab-wide vocabulary, as a rows x vl matrix, and the
** loss needs only three numbers per row reduced across the slices, never
** the whole logits. targets (int32, rows) hold GLOBAL token ids; a target
** outside [0, vocab) gives loss 0 and gradient 0, as in
** strata_cross_entropy_fwd. The caller reduces between the steps:
**
**   strata_xent_vp_max    rowmax[r] = max_j logits[r][j]
**     -> all-reduce MAX of rowmax over the slices
**   strata_xent_vp_sums   sumexp[r] = sum_j exp(logits[r][j] - rowmax[r]) with
**                         the global rowmax; tlogit[r] = logits[r][t - off] when
**                         off <= t < off + vl (t = targets[r]), else 0
**     -> all-reduce SUM of sumexp and of tlogit (exactly one slice holds t)
**   strata_xent_vp_loss   loss[r] = log(sumexp[r]) + rowmax[r] - tlogit[r], or 0
**                         when t lies outside [0, vocab)
**   strata_xent_vp_bwd    dlogits[r][j] = scale * (exp(logits[r][j] - rowmax[r])
**                         / sumexp[r] - (j == t - off)), a row of zeros when t
**                         lies outside [0, vocab); dlogits is overwritten (no
**                         accumulate flag, as strata_cross_entropy_bwd) and may
**                         be logits. No reduction is needed after it.
**
** Each backend computes these with the formulas and summation order of its
** strata_cross_entropy_fwd/bwd (host: double sums; devices: the same
** work-group reductions), so results repeat bit for bit, and on a device
** one slice (off = 0, vl = vocab) reproduces the whole-vocabulary ops' bits.
** Slices need off >= 0 and off + vl <= vocab (STRATA_ERR_SHAPE otherwise).
*/
STRATA_API int strata_xent_vp_max(strata_queue_t q, strata_mem_t logits, strata_mem_t rowmax, int64_t rows,
                                  int64_t vl);
STRATA_API int strata_xent_vp_sums(strata_queue_t q, strata_mem_t logits, strata_mem_t targets, strata_mem_t rowmax,
                                   strata_mem_t sumexp, strata_mem_t tlogit, int64_t rows, int64_t vl, int64_t off,
                                   int64_t vocab);
STRATA_API int strata_xent_vp_loss(strata_queue_t q, strata_mem_t rowmax, strata_mem_t sumexp, strata_mem_t tlogit,
                                   strata_mem_t targets, strata_mem_t loss, int64_t rows, int64_t vocab);
STRATA_API int strata_xent_vp_bwd(strata_queue_t q, strata_mem_t logits, strata_mem_t targets, strata_mem_t rowmax,
                                  strata_mem_t sumexp, strata_mem_t dlogits, int64_t rows, int64_t vl, int64_t off,
                                  int64_t vocab, float scale);

/*
** A vocabulary slice's view of int32 token ids, for the embedding of a
** vocabulary-parallel table that holds rows [off, off + count):
** out[i] = tokens[i] - off when off <= tokens[i] < off + count, else -1
** (which strata_embedding_fwd turns into a row of zeros and
** strata_embedding_bwd skips). off >= 0, count >= 1; out may be tokens.
*/
STRATA_API int strata_tokens_shift(strata_queue_t q, strata_mem_t tokens, strata_mem_t out, int64_t n, int64_t off,
                                   int64_t count);

/*
** One AdamW step (decoupled weight decay) over n parameters, step >= 1:
** m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
** p -= lr * (m / (1-b1^step) / (sqrt(v / (1-b2^step)) + eps) + wd * p).
*/
STRATA_API int strata_adamw(strata_queue_t q, strata_mem_t param, strata_mem_t grad, strata_mem_t m, strata_mem_t v,
                            int64_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                            int64_t step);

/* out[0] (+)= sum of x[i]^2 over n elements, in a fixed order (the gradient
** norm is the square root of the total over all parameter tensors). */
STRATA_API int strata_sumsq(strata_queue_t q, strata_mem_t x, int64_t n, strata_mem_t out, int accumulate);

/*
** The optimizer's fused ops, on devices whose backend has them
** (strata_fused_optimizer_supported: 1 on the host backend; 0 elsewhere,
** where the separate ops above do the same):
**
** strata_adamw_fused: strata_adamw over n elements with grad *= gscale
** first (written back, as strata_scale; gscale 1 leaves grad alone) and,
** when param16.buf is set (a bfloat16 operand), param16 = param rounded to
** bfloat16 after the update (as strata_convert): the bits of those ops in
** that order, in one pass over the memory.
**
** strata_sumsq_spans: out[t] = the strata_sumsq of x over the span
** [bounds[2t], bounds[2t] + bounds[2t+1]) for t < count (spans inside
** `extent` elements of x; an empty span gives 0), each the same bits as
** its own strata_sumsq, the spans shared out between the device's threads.
** `bounds` is read when the op runs: keep it until the queue has run it.
*/
STRATA_API int strata_fused_optimizer_supported(strata_queue_t q);
STRATA_API int strata_adamw_fused(strata_queue_t q, strata_mem_t param, strata_mem_t grad, strata_mem_t m,
                                  strata_mem_t v, strata_mem_t param16, int64_t n, float gscale, float lr, float beta1,
                                  float beta2, float eps, float weight_decay, int64_t step);
STRATA_API int strata_sumsq_spans(strata_queue_t q, strata_mem_t x, int64_t extent, const int64_t *bounds,
                                  int64_t count, strata_mem_t out);

/* Geometry of a 2-D convolution over NCHW images with a K x C x R x S filter. */
struct strata_conv2d {
  int64_t n, c, h, w;           /* input batch, channels, height, width */
  int64_t k, r, s;              /* output channels, filter height and width */
  int64_t stride, pad;          /* same in both directions */
};
/* Output height and width ((h + 2 pad - r) / stride + 1, likewise w), and the
** workspace it needs in elements (c r s x p q: one image's im2col matrix, of work's type). */
STRATA_API int strata_conv2d_shape(const struct strata_conv2d *g, int64_t *p /* OUT */, int64_t *qw /* OUT */,
                                   int64_t *workspace /* OUT */);
/*
** y (n x k x p x q) = conv(x, w) through im2col + GEMM, one image at a time,
** using `work` (strata_conv2d_shape elements) as scratch. Backward: dw (accumulate flag)
** and dx (overwritten); either may have a NULL buffer when that gradient is not wanted.
** work is the GEMMs' B beside w (and dy): forward, w and work share a type; backward,
** w, dy and work do.
*/
STRATA_API int strata_conv2d_fwd(strata_queue_t q, const struct strata_conv2d *g, strata_mem_t x, strata_mem_t w,
                                 strata_mem_t y, strata_mem_t work);
STRATA_API int strata_conv2d_bwd(strata_queue_t q, const struct strata_conv2d *g, strata_mem_t x, strata_mem_t w,
                                 strata_mem_t dy, strata_mem_t dx, strata_mem_t dw, strata_mem_t work,
                                 int accumulate);
/*
** The same over output rows [row0, row0 + rows) of each image only (spatial slabs: the rows a slab keeps of the rows
** it convolves): y and dy hold n x k x rows x q, the other output rows are neither computed nor read; `work` is
** strata_conv2d_shape's (the whole im2col matrix). The backward gives dw only (accumulate flag): an input gradient
** needs every output row's (strata_conv2d_bwd).
*/
STRATA_API int strata_conv2d_fwd_rows(strata_queue_t q, const struct strata_conv2d *g, int64_t row0, int64_t rows,
                                      strata_mem_t x, strata_mem_t w, strata_mem_t y, strata_mem_t work);
STRATA_API int strata_conv2d_bwd_w_rows(strata_queue_t q, const struct strata_conv2d *g, int64_t row0, int64_t rows,
                                        strata_mem_t x, strata_mem_t dy, strata_mem_t dw, strata_mem_t work,
                                        int accumulate);

/* Geometry of max pooling over NCHW: windows of size x size, moved by stride. */
struct strata_pool2d {
  int64_t n, c, h, w;
  int64_t size, stride;
};
STRATA_API int strata_pool2d_shape(const struct strata_pool2d *g, int64_t *p /* OUT */, int64_t *qw /* OUT */);
/* y = max over each window; idx (int32) records the flat h*w position of the
** maximum inside its channel plane. Backward: dx (overwritten) gathers dy
** at the recorded positions. */
STRATA_API int strata_maxpool_fwd(strata_queue_t q, const struct strata_pool2d *g, strata_mem_t x, strata_mem_t y,
                                  strata_mem_t idx);
STRATA_API int strata_maxpool_bwd(strata_queue_t q, const struct strata_pool2d *g, strata_mem_t dy, strata_mem_t idx,
                                  strata_mem_t dx);

/*
** The speed of device `dev` at a square n x n x n sgemm through strata_gemm: the GFLOP/s of the fastest of `reps`
** timed products, after one untimed (kernels compiled, caches and threads warm), in *gflops; that product's seconds in
** *seconds (may be NULL). The runtime's one GEMM timer: the trainer's balancer and strata-train's MFU peak use it.
** n in [1, 65536], reps in [1, 1000]; STRATA_ERR_RANGE otherwise; the device's errors as they come.
*/
STRATA_API int strata_device_gemm_speed(int dev, int64_t n, int reps, double *gflops /* OUT */,
                                        double *seconds /* OUT, may be NULL */);
/* The same for A and B of `dtype` (STRATA_FLOAT32 or STRATA_BFLOAT16; C float32): the peak a bf16 run's MFU is
** measured against. */
STRATA_API int strata_device_gemm_speed_as(int dev, int dtype, int64_t n, int reps, double *gflops /* OUT */,
                                           double *seconds /* OUT, may be NULL */);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_OPS_H */
