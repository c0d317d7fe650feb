/* SPDX-License-Identifier: MIT */
/* layers.c — forward and backward of a stage's layers (GPT, MLP, CNN), whole or sharded, and the losses and logits they leave. */
#include "config.h"

#include <math.h>
#include <stdlib.h>

#include "model/stage.h"
#include "core/core.h"

#define AT(b, o) strata_mem((b), (size_t)(o))

/* ---- the layers ---- */

struct lctx {
  struct strata__stage *st;
  const struct strata__layer *L;
  struct strata__dims d;
  strata_queue_t q;
  strata_buffer_t slot;    /* where the layer's saved activations are (rcbuf for a fully recomputed block) */
  strata_buffer_t mslot;   /* the micro-batch's dsave region (split backward: from the stage's pool, its BI to its W) */
  int mode;                /* enum bmode, backward only */
  int fold;                /* split backward: W's gradients kept where only BI read (strata__stage_folds) */
  size_t saved;            /* offset of this layer's saved activations in the slot */
  size_t dsave;            /* offset of the gradients kept between BACKWARD_INPUT and BACKWARD_WEIGHT */
  strata_mem_t in, out;    /* input and output activations */
  const struct strata__tensor *t;   /* this layer's tensors */
  strata_mem_t wide;       /* seqpar (block, head): scratch for a region of every row, gathered or to scatter */
};

/*
** Operands. Offsets of regions are in 4-byte units (model/stage.h); a
** region holds activations of the stage's type (SV, SC, DSAVE: its element
** e) or float32 (SAVED, SCR: statistics, losses, ids). PARAM is a float32
** parameter as the ops that compute in float32 take it (biases, layernorm
** weights, embeddings); WT is a weight matrix as the GEMMs read it: the
** bfloat16 copy in bfloat16 precision.
*/
#define PARAM(c, i) strata__stage_param((c)->st, (c)->t[i].off)
#define GRAD(c, i) strata__stage_grad((c)->st, (c)->t[i].off)
/* The beta of the weight-gradient GEMM that writes the layer's tensor i: 0 for the step's first write (stage.h). */
#define GBETA(c, i) strata__stage_grad_beta((c)->st, (int)((c)->t - (c)->st->tensors) + (i))
#define WT(c, i) weight((c)->st, (c)->t[i].off)
/* Before a layer reads its tensors i .. i + k - 1: ZeRO-3's parameter window holds them (gathered). */
#define FETCH(c, i, k) strata__stage_param_take((c)->st, (int)((c)->t - (c)->st->tensors) + (i), (k))
/* Before the weight part writes the gradients of the layer's tensors i .. i + k - 1: ZeRO-2's window takes them. */
#define TAKE(c, i, k)                                                                                                  \
  ((c)->mode == BM_INPUT ? STRATA_OK : strata__stage_grad_take((c)->st, (int)((c)->t - (c)->st->tensors) + (i), (k)))
#define SAVED(c, o) AT((c)->slot, (c)->saved + (size_t)(o))
#define SCR(c, o) AT((c)->st->scratch, (size_t)(o))
#define SV(c, b, e) strata__at((c)->slot, (c)->saved + (size_t)(b), (size_t)(e), (c)->d.act)
#define SC(c, b, e) strata__at((c)->st->scratch, (size_t)(b), (size_t)(e), (c)->d.act)

static strata_mem_t weight(const struct strata__stage *st, size_t off) {
  const size_t at = st->zero3 ? off - st->pbase : off; /* ZeRO-3: in the window (float32: its current half) */
  return st->params16 ? strata_mem_typed(st->params16, at, STRATA_BFLOAT16) : AT(st->params, at + st->pat);
}

/* Element e further into the region of m, of m's type. */
static strata_mem_t plus(strata_mem_t m, size_t e) {
  m.off += e;
  return m;
}

/* y[R, out] = x[R, in] W[in, out] + b (b.buf NULL: no bias) */
static int linear_fwd(strata_queue_t q, int64_t R, int64_t in, int64_t outf, strata_mem_t x, strata_mem_t W,
                      strata_mem_t b, strata_mem_t y) {
  if (b.buf)
    return strata_linear(q, R, in, outf, x, W, b, (strata_mem_t){0}, y);
  return strata_gemm(q, 0, 0, R, outf, in, 1, x, in, 0, W, outf, 0, 0, y, outf, 0, 1);
}

/* Weight part of a linear layer's backward: dW = x^T dy + beta dW (GBETA); db += colsum(dy) (db.buf NULL: none). */
static int linear_bwd_w(strata_queue_t q, int64_t R, int64_t in, int64_t outf, strata_mem_t x, strata_mem_t dy,
                        strata_mem_t dW, strata_mem_t db, float beta) {
  TRY(strata_gemm(q, 1, 0, in, outf, R, 1, x, in, 0, dy, outf, 0, beta, dW, outf, 0, 1));
  return db.buf ? strata_bias_grad(q, dy, db, R, outf, 1) : STRATA_OK;
}

/* Input part: dx = dy W^T (dx.buf NULL: nothing to do). */
static int linear_bwd_x(strata_queue_t q, int64_t R, int64_t in, int64_t outf, strata_mem_t W, strata_mem_t dy,
                        strata_mem_t dx) {
  return dx.buf ? strata_gemm(q, 0, 1, R, in, outf, 1, dy, outf, 0, W, outf, 0, 0, dx, in, 0, 1) : STRATA_OK;
}

static int join(struct lctx *c, strata_mem_t x, size_t n);

/* Vocabulary-parallel: this slice's token ids (t - voff where t is one of its V, else -1: a zero row, no gradient). */
static strata_mem_t slice_tokens(struct lctx *c, int *rc) {
  strata_mem_t tok = SCR(c, strata__units((size_t)(c->d.R * c->d.D), c->d.act));
  *rc = strata_tokens_shift(c->q, c->in, tok, c->d.R, c->d.voff, c->d.V);
  return tok;
}

/* A llama's RMSNorm epsilon. */
static float norm_eps(const struct lctx *c) { return (float)c->st->model->cfg.norm_eps; }

/* seqpar: the slice's rows of a region of every row (count elements of them each); else the region. */
static strata_mem_t rows_mine(const struct lctx *c, strata_mem_t m, size_t count) {
  return c->d.seqpar ? strata__seq_mine(c->st, m, count) : m;
}

/* The embedding; with seqpar its output is the slice's Rs rows (Megatron scatters after the embedding): their own
** lookups, or vocabulary-parallel every row's partial lookup reduce-scattered. A llama's has no position table. */
static int embed_fwd(struct lctx *c) {
  struct strata__dims d = c->d;
  TRY(FETCH(c, 0, d.rms ? 1 : 2));
  strata_mem_t pos = rows_mine(c, AT(c->st->positions, 0), (size_t)d.Rs);
  if (d.vp) { /* each slice looks up its rows of the vocabulary, the others' are zero: the sum is the lookup */
    int rc = STRATA_OK;
    strata_mem_t tok = slice_tokens(c, &rc), part;
    TRY(rc);
    if (d.seqpar) {
      TRY(strata_embedding_fwd(c->q, tok, PARAM(c, 0), SC(c, 0, 0), d.R, d.D, d.V));
      TRY(strata__seq_scatter(c->st, c->q, SC(c, 0, 0), (size_t)(d.Rs * d.D), &part));
      if (d.rms) /* (a llama: no position table) */
        return strata_buffer_copy(c->q, c->out.buf, strata__mem_byte(c->out), part.buf, strata__mem_byte(part),
                                  (size_t)(d.Rs * d.D) * strata_dtype_size(c->out.dtype));
      TRY(strata_embedding_fwd(c->q, pos, PARAM(c, 1), c->out, d.Rs, d.D, d.T));
      return strata_add(c->q, part, c->out, c->out, d.Rs * d.D);
    }
    TRY(strata_embedding_fwd(c->q, tok, PARAM(c, 0), c->out, d.R, d.D, d.V));
    TRY(join(c, c->out, (size_t)(d.R * d.D)));
  } else {
    TRY(strata_embedding_fwd(c->q, rows_mine(c, c->in, (size_t)d.Rs), PARAM(c, 0), c->out, d.Rs, d.D, d.V));
  }
  if (d.rms)
    return STRATA_OK;
  TRY(strata_embedding_fwd(c->q, pos, PARAM(c, 1), SC(c, 0, 0), d.Rs, d.D, d.T));
  return strata_add(c->q, c->out, SC(c, 0, 0), c->out, d.Rs * d.D);
}

enum { LN1_W, LN1_B, ATTN_W, ATTN_B, PROJ_W, PROJ_B, LN2_W, LN2_B, FC_W, FC_B, FCP_W, FCP_B };

/* Sharded stages: sum the partial results at x (n floats) over the slices; each ends with the whole sum. */
static int join_op(struct lctx *c, strata_mem_t x, size_t n, int op) {
  struct strata__stage *st = c->st;
  if (st->tp.size <= 1)
    return STRATA_OK;
  if (!st->join)
    return strata__error(STRATA_ERR_STATE, "stage: a tensor-parallel stage has no communicator to join its slices");
  return st->join(st->join_arg, c->q, x, n, op);
}

/* A bfloat16 region is summed in float32 (join32) and rounded once. */
static int join(struct lctx *c, strata_mem_t x, size_t n) {
  if (c->st->tp.size <= 1)
    return STRATA_OK;
  if (x.dtype != STRATA_BFLOAT16)
    return join_op(c, x, n, STRATA_SUM);
  strata_mem_t w = AT(c->st->join32, 0);
  TRY(strata_convert(c->q, x, w, (int64_t)n));
  TRY(join_op(c, w, n, STRATA_SUM));
  return strata_convert(c->q, w, x, (int64_t)n);
}

/* y = x W + b (+ res: the slice's rows, res.buf NULL for none) for a row-split W: the slices' partial products
** joined, then the (whole) bias once, then the residual; unsplit, the three as one strata_linear. */
static int linear_fwd_rows(struct lctx *c, int64_t R, int64_t in, int64_t outf, strata_mem_t x, strata_mem_t W,
                           strata_mem_t b, strata_mem_t res, strata_mem_t y) {
  if (c->st->tp.size <= 1 && !c->d.seqpar)
    return strata_linear(c->q, R, in, outf, x, W, b, res, y);
  if (c->d.seqpar) { /* every row's partial product reduce-scattered (not all-reduced): y is the slice's rows */
    strata_mem_t part;
    const size_t n = (size_t)(c->d.Rs * outf);
    TRY(strata_gemm(c->q, 0, 0, R, outf, in, 1, x, in, 0, W, outf, 0, 0, c->wide, outf, 0, 1));
    TRY(strata__seq_scatter(c->st, c->q, c->wide, n, &part));
    TRY(strata_buffer_copy(c->q, y.buf, strata__mem_byte(y), part.buf, strata__mem_byte(part),
                           n * strata_dtype_size(y.dtype)));
    TRY(strata_bias_add(c->q, y, b, c->d.Rs, outf));
  } else {
    TRY(strata_gemm(c->q, 0, 0, R, outf, in, 1, x, in, 0, W, outf, 0, 0, y, outf, 0, 1));
    TRY(join(c, y, (size_t)(R * outf)));
    TRY(strata_bias_add(c->q, y, b, R, outf));
  }
  return res.buf ? strata_add(c->q, y, res, y, c->d.Rs * outf) : STRATA_OK;
}

/* seqpar: the slice's rows at `mine` (Rs x cols) gathered from every slice into the layer's wide scratch (all R rows,
** as the column-split matrix after it reads them); else `mine` itself. */
static strata_mem_t gathered(struct lctx *c, strata_mem_t mine, int64_t cols, int *rc) {
  *rc = STRATA_OK;
  if (!c->d.seqpar)
    return mine;
  *rc = strata__seq_gather(c->st, c->q, mine, c->wide, (size_t)(c->d.Rs * cols));
  return c->wide;
}

/* The input gradient of a column-split matrix (partial sums, R x cols at *x) joined over the slices: all-reduced, or
** with seqpar reduce-scattered, *x then the slice's rows of the sum. */
static int rows_join(struct lctx *c, strata_mem_t *x, int64_t cols) {
  if (!c->d.seqpar)
    return join(c, *x, (size_t)(c->d.R * cols));
  return strata__seq_scatter(c->st, c->q, *x, (size_t)(c->d.Rs * cols), x);
}

/* Where a block's attention output and log-sum-exps live: the stage's recompute buffer (att | lse) with selective
** recomputation (one block's at a time), else among its saved activations (with full recomputation those are in the
** buffer too: the context's slot is it). */
static strata_mem_t attn_out(const struct lctx *c, const struct strata__block_saved *s) {
  if (c->d.rc == STRATA_RECOMPUTE_SELECTIVE)
    return strata__at(c->st->rcbuf, 0, 0, c->d.act);
  return SV(c, s->att, 0);
}
static strata_mem_t attn_lse(const struct lctx *c, const struct strata__block_saved *s) {
  if (c->d.rc == STRATA_RECOMPUTE_SELECTIVE)
    return AT(c->st->rcbuf, strata__units((size_t)(c->d.R * c->d.A), c->d.act));
  return SAVED(c, s->lse);
}

/* The fused causal attention of every head from the block's Q, K and V: its output and each query's float32
** log-sum-exp (all its backward keeps: no T x T matrix). The forward and the selective recomputation run this one
** code, so their bits agree. */
static int attn_fwd(struct lctx *c, const struct strata__block_saved *s) {
  struct strata__dims d = c->d;
  return strata_attention_fwd(c->q, SV(c, s->qkv, 0), attn_out(c, s), attn_lse(c, s), d.B, d.T, d.H, d.hd,
                              1.0f / sqrtf((float)d.hd), 1);
}

/* Where a block's GELU output lives while it is read: scratch (its backward's f region, model/stage.c's
** layer_scratch), never the slot. The block keeps only the MLP pre-activation h; its backward recomputes gelu(h) there
** for the MLP c_proj's weight gradient with the forward's op on the same input, so the same bits. */
static strata_mem_t gelu_out(const struct lctx *c) {
  return SC(c, strata__units((size_t)(3 * c->d.R * c->d.A), c->d.act), 0);
}

/*
** A pre-layernorm block. Sharded, this stage holds H of the heads (A = H hd
** columns of each of Q, K, V in c_attn, the matching A rows of c_proj) and F
** of the hidden units (c_fc's columns, the MLP c_proj's rows); the two
** row-split products are joined over the slices, and the layernorms and
** residuals run whole on every slice.
*/
static int block_fwd(struct lctx *c) {
  struct strata__dims d = c->d;
  struct strata__block_saved s = strata__block_layout(&d);
  strata_queue_t q = c->q;
  int64_t D = d.D, A = d.A;
  TRY(FETCH(c, LN1_W, 2));
  int rc;
  TRY(strata_layernorm_fwd(q, c->in, PARAM(c, LN1_W), PARAM(c, LN1_B), SV(c, s.ln1, 0), SAVED(c, s.mean1),
                           SAVED(c, s.rstd1), d.Rs, D, 1e-5f));
  strata_mem_t x = gathered(c, SV(c, s.ln1, 0), D, &rc);
  TRY(rc);
  TRY(FETCH(c, ATTN_W, 2));
  TRY(linear_fwd(q, d.R, D, 3 * A, x, WT(c, ATTN_W), PARAM(c, ATTN_B), SV(c, s.qkv, 0)));
  TRY(attn_fwd(c, &s));
  TRY(FETCH(c, PROJ_W, 2));
  TRY(linear_fwd_rows(c, d.R, A, D, attn_out(c, &s), WT(c, PROJ_W), PARAM(c, PROJ_B), c->in, SV(c, s.xmid, 0)));
  TRY(FETCH(c, LN2_W, 2));
  TRY(strata_layernorm_fwd(q, SV(c, s.xmid, 0), PARAM(c, LN2_W), PARAM(c, LN2_B), SV(c, s.ln2, 0), SAVED(c, s.mean2),
                           SAVED(c, s.rstd2), d.Rs, D, 1e-5f));
  x = gathered(c, SV(c, s.ln2, 0), D, &rc);
  TRY(rc);
  TRY(FETCH(c, FC_W, 2));
  TRY(linear_fwd(q, d.R, D, d.F, x, WT(c, FC_W), PARAM(c, FC_B), SV(c, s.h, 0)));
  strata_mem_t g = gelu_out(c);
  TRY(strata_gelu_fwd(q, SV(c, s.h, 0), g, d.R * d.F));
  TRY(FETCH(c, FCP_W, 2));
  return linear_fwd_rows(c, d.R, d.F, D, g, WT(c, FCP_W), PARAM(c, FCP_B), SV(c, s.xmid, 0), c->out);
}

/*
** What a block's backward needs again (recomputation), into the stage's one-block buffer: selective, its attention
** output and log-sum-exps from its kept Q, K and V; full, its whole forward from its input (the context's slot is the buffer:
** layer_ctx), the output into the buffer after the saved activations, leaving the kept output untouched. The same
** code as the forward on the same inputs: the same bits.
*/
static int block_recompute(struct lctx c) {
  struct strata__block_saved s = strata__block_layout(&c.d);
  if (c.d.rc == STRATA_RECOMPUTE_SELECTIVE)
    return attn_fwd(&c, &s);
  c.out = strata__at(c.st->rcbuf, s.end, 0, c.d.act);
  return block_fwd(&c);
}

/* The output projection as the GEMMs read it (ZeRO-3: gathered first), and its gradient: the head's own weight, or
** the embedding's when tied. */
static int head_weight(struct lctx *c, strata_mem_t *w, strata_mem_t *dw) {
  const int hw = c->d.rms ? 1 : 2; /* after the final norm's one (RMSNorm) or two (layernorm) tensors */
  TRY(c->st->model->cfg.tied ? strata__stage_param_take(c->st, c->st->layer_tensor[0], 1) : FETCH(c, hw, 1));
  if (!c->st->model->cfg.tied) {
    *w = WT(c, hw);
    *dw = GRAD(c, hw);
    return STRATA_OK;
  }
  const struct strata__tensor *wte = &c->st->tensors[c->st->layer_tensor[0]]; /* stage holds every layer */
  *w = weight(c->st, wte->off);
  *dw = strata__stage_grad(c->st, wte->off);
  return STRATA_OK;
}

static int lm_head_fwd(struct lctx *c, strata_mem_t targets) {
  struct strata__dims d = c->d;
  struct strata__head_saved h = strata__head_layout(&d);
  const size_t R = (size_t)d.R;
  strata_mem_t W, dW;
  int rc;
  TRY(FETCH(c, 0, d.rms ? 1 : 2));
  if (d.rms) /* a llama's final RMSNorm */
    TRY(strata_rmsnorm_fwd(c->q, c->in, PARAM(c, 0), SV(c, h.ln, 0), SAVED(c, h.rstd), d.Rs, d.D, norm_eps(c)));
  else
    TRY(strata_layernorm_fwd(c->q, c->in, PARAM(c, 0), PARAM(c, 1), SV(c, h.ln, 0), SAVED(c, h.mean),
                             SAVED(c, h.rstd), d.Rs, d.D, 1e-5f));
  strata_mem_t x = gathered(c, SV(c, h.ln, 0), d.D, &rc); /* seqpar: every row (Megatron gathers before the head) */
  TRY(rc);
  TRY(head_weight(c, &W, &dW));
  TRY(strata_gemm(c->q, 0, 1, d.R, d.V, d.D, 1, x, d.D, 0, W, d.D, 0, 0, SV(c, h.logits, 0), d.V, 0, 1));
  if (!d.vp)
    return strata_cross_entropy_fwd(c->q, SV(c, h.logits, 0), targets, SAVED(c, h.loss), d.R, d.V);
  /* vocabulary-parallel cross-entropy: the rows' max, their sums of exponentials and the target logits are
  ** joined over the slices; the logits themselves never are */
  TRY(strata_xent_vp_max(c->q, SV(c, h.logits, 0), SAVED(c, h.mx), d.R, d.V));
  TRY(join_op(c, SAVED(c, h.mx), R, STRATA_MAX));
  TRY(strata_xent_vp_sums(c->q, SV(c, h.logits, 0), targets, SAVED(c, h.mx), SAVED(c, h.se), SAVED(c, h.tl), d.R, d.V,
                          d.voff, d.Vall));
  TRY(join(c, SAVED(c, h.se), 2 * R));
  return strata_xent_vp_loss(c->q, SAVED(c, h.mx), SAVED(c, h.se), SAVED(c, h.tl), targets, SAVED(c, h.loss), d.R,
                             d.Vall);
}

/*
** The model's first layer in bfloat16 reads float32 images: it keeps a bfloat16 copy of them (at unit `at` of its
** saved region) for its GEMMs, forward and backward. Any other layer's input is the activations as they are.
*/
static strata_mem_t layer_x(struct lctx *c, size_t at, int64_t n, int forward, int *rc) {
  *rc = STRATA_OK;
  if (!c->L->first || c->d.act == STRATA_FLOAT32)
    return c->in;
  strata_mem_t x = SV(c, at, 0);
  if (forward)
    *rc = strata_convert(c->q, c->in, x, n);
  return x;
}

/* A linear layer + ReLU; cut by its inputs (tp), the slices' partial products are joined before the bias. */
static int fc_fwd(struct lctx *c) {
  const struct strata__layer *L = c->L;
  int rc;
  strata_mem_t x = layer_x(c, strata__units((size_t)(c->d.R * L->out), c->d.act), c->d.R * L->in, 1, &rc);
  TRY(rc);
  TRY(FETCH(c, 0, 2));
  if (L->tp_role == STRATA__TP_INPUTS)
    TRY(linear_fwd_rows(c, c->d.R, L->in, L->out, x, WT(c, 0), PARAM(c, 1), (strata_mem_t){0}, SV(c, 0, 0)));
  else
    TRY(linear_fwd(c->q, c->d.R, L->in, L->out, x, WT(c, 0), PARAM(c, 1), SV(c, 0, 0)));
  return strata_relu_fwd(c->q, SV(c, 0, 0), c->out, c->d.R * L->out);
}

static struct strata_conv2d conv_geom(const struct lctx *c) { return strata__conv_geometry(c->L, c->d.B); }

/* A convolution's saved region (units): its output | (pooled) the ReLU's | (4-byte) pooling indices | the converted
** input. Without pooling the ReLU writes the layer's output and there are no indices. */
static void conv_saved(const struct lctx *c, size_t *relu, size_t *idx, size_t *xin) {
  const struct strata__layer *L = c->L;
  const size_t big = strata__units((size_t)(c->d.B * strata__conv_big(L)), c->d.act);
  const int pooled = L->pool > 1;
  *relu = big;
  *idx = (pooled ? 2 : 1) * big;
  *xin = *idx + (pooled ? (size_t)(c->d.B * L->out) : 0);
}

static struct strata_pool2d pool_geom(const struct lctx *c) {
  const struct strata__layer *L = c->L;
  struct strata_pool2d pg = {.n = c->d.B, .c = L->k, .h = L->ch, .w = L->cw, .size = L->pool, .stride = L->pool};
  return pg;
}

static int conv_fwd(struct lctx *c) {
  const struct strata__layer *L = c->L;
  struct strata_conv2d g = conv_geom(c);
  size_t big = (size_t)(c->d.B * strata__conv_big(L)), relu, idx, xin;
  conv_saved(c, &relu, &idx, &xin);
  struct strata_pool2d pg = pool_geom(c);
  int rc;
  strata_mem_t x = layer_x(c, xin, c->d.B * L->in, 1, &rc);
  TRY(rc);
  TRY(FETCH(c, 0, 1));
  if (L->sl.on) { /* a slab: its rows and halo gathered, convolved into the rows it keeps (j0.., of the P) only */
    int64_t p, qq, ws;
    TRY(strata_conv2d_shape(&g, &p, &qq, &ws));
    const struct strata__slab_scratch o = strata__slab_scratch_of(L, c->d.B, (size_t)ws);
    strata_mem_t e = SCR(c, o.e);
    TRY(strata__slab_gather(c->st, L, c->d.B, x, SAVED(c, xin), e, &o));
    TRY(strata_conv2d_fwd_rows(c->q, &g, L->sl.j0, L->ch, e, WT(c, 0), SV(c, 0, 0), SC(c, 0, 0)));
  } else {
    TRY(strata_conv2d_fwd(c->q, &g, x, WT(c, 0), SV(c, 0, 0), SC(c, 0, 0)));
  }
  if (L->tp_role == STRATA__TP_INPUTS) /* each slice convolved its input channels: the sum is the convolution */
    TRY(join(c, SV(c, 0, 0), big));
  if (L->pool <= 1)
    return strata_relu_fwd(c->q, SV(c, 0, 0), c->out, (int64_t)big);
  TRY(strata_relu_fwd(c->q, SV(c, 0, 0), SV(c, relu, 0), (int64_t)big));
  return strata_maxpool_fwd(c->q, &pg, SV(c, relu, 0), c->out, SAVED(c, idx));
}

/* 1 / the pixels a gap classifier averages over: the whole map's, on a slab too. */
static float gap_scale(const struct strata__layer *L) {
  return 1.0f / (float)((L->sl.on ? L->sl.H : L->h) * L->w);
}

/* gap: the classifier's input averaged over its h x w pixels, per image and channel, into `avg` (R x c): a GEMV
** against h x w ones (written at `ones`), 1 / (h w) their weight. */
static int gap_fwd(struct lctx *c, strata_mem_t ones, strata_mem_t avg) {
  const struct strata__layer *L = c->L;
  const int64_t hw = L->h * L->w;
  TRY(strata_fill(c->q, ones, 1.0f, hw));
  TRY(strata_gemm(c->q, 0, 0, c->d.R * L->c, 1, hw, gap_scale(L), c->in, hw, 0, ones, 1, 0, 0, avg, 1, 0, 1));
  /* a slab: its rows' share of each average, joined (summed) over the slabs */
  return L->sl.on ? strata__slab_join(c->st, avg, (size_t)(c->d.R * L->c)) : STRATA_OK;
}

/* Where gap keeps the averages (saved, after the logits, losses and any converted input). */
static size_t gap_avg(const struct lctx *c) {
  const struct strata__layer *L = c->L;
  return strata__units((size_t)(c->d.R * L->out), c->d.act) + (size_t)c->d.R +
         (L->first && c->d.act != STRATA_FLOAT32 ? strata__units((size_t)(c->d.R * L->in), c->d.act) : 0);
}

static int classifier_fwd(struct lctx *c, strata_mem_t targets) {
  const struct strata__layer *L = c->L;
  const size_t lu = strata__units((size_t)(c->d.R * L->out), c->d.act);
  int rc;
  strata_mem_t x = layer_x(c, lu + (size_t)c->d.R, c->d.R * L->in, 1, &rc);
  TRY(rc);
  if (L->gap) {
    x = SV(c, gap_avg(c), 0);
    TRY(gap_fwd(c, SC(c, 0, 0), x));
  }
  TRY(FETCH(c, 0, 2));
  TRY(linear_fwd(c->q, c->d.R, L->in, L->out, x, WT(c, 0), PARAM(c, 1), SV(c, 0, 0)));
  return strata_cross_entropy_fwd(c->q, SV(c, 0, 0), targets, SAVED(c, lu), c->d.R, L->out);
}

/*
** Backward passes. A layer's backward has an input part (the gradient of
** its input) and a weight part (the gradients of its parameters). FULL
** runs both; INPUT runs the input part and keeps, in the micro-batch's
** dsave region (taken from the stage's pool until its W), the output-side
** gradients the weight part needs;
** WEIGHT runs the weight part later from what INPUT kept (zero-bubble
** schedules). Where a gradient lives: scratch when FULL, the dsave region when split.
*/
enum bmode { BM_FULL, BM_INPUT, BM_WEIGHT };

#define DSAVE(c, o) strata__at((c)->mslot, (c)->dsave + (size_t)(o), 0, (c)->d.act)
/* A working gradient (of the activations' type) at unit `so` of scratch (FULL) or `ko` of the dsave region (split). */
#define LOC(c, so, ko) ((c)->mode == BM_FULL ? SC(c, so, 0) : DSAVE(c, ko))
#define DO_IN(c) ((c)->mode != BM_WEIGHT)
#define DO_W(c) ((c)->mode != BM_INPUT)

/* Copy n activations (of the stage's type) from src to dst, on the layer's queue. */
static int copy_act(struct lctx *c, strata_mem_t dst, strata_mem_t src, size_t n) {
  return strata_buffer_copy(c->q, dst.buf, strata__mem_byte(dst), src.buf, strata__mem_byte(src),
                            n * strata_dtype_size(dst.dtype));
}

/* The layer's output gradient as its weight part reads it: as given (FULL; a folded block's, which W does not read),
** copied into the dsave region (a folded embedding's: over its output) first (INPUT), or from it (WEIGHT). */
static int keep_dout(struct lctx *c, strata_mem_t *dout, size_t n) {
  if (c->mode == BM_FULL || (c->fold && c->L->kind != STRATA__LAYER_EMBED))
    return STRATA_OK;
  strata_mem_t k = c->fold ? c->out : DSAVE(c, 0);
  if (c->mode == BM_INPUT)
    TRY(copy_act(c, k, *dout, n));
  *dout = k;
  return STRATA_OK;
}

/* Layernorm backward restricted to the part the mode wants: the input
** gradient into dx, and/or the gamma/beta gradients. The unwanted output
** goes to `junk` (float32 scratch with room for rows x cols floats). */
static int ln_bwd(struct lctx *c, strata_mem_t x, strata_mem_t g, strata_mem_t mean, strata_mem_t rstd, strata_mem_t dy,
                  strata_mem_t dx, strata_mem_t dg, strata_mem_t db, strata_mem_t junk, int64_t rows, int64_t cols) {
  const int mode = c->fold ? (c->mode == BM_WEIGHT ? -1 : BM_FULL) : c->mode; /* folded: whole in BI, none in W */
  if (mode < 0)
    return STRATA_OK;
  if (mode == BM_INPUT) {
    dg = junk;
    db = plus(junk, (size_t)cols);
  } else if (mode == BM_WEIGHT) {
    dx = junk;
  }
  return strata_layernorm_bwd(c->q, x, g, mean, rstd, dy, dx, dg, db, rows, cols, mode != BM_INPUT);
}

/* ln_bwd of a layernorm on the slice's rows (seqpar: a whole backward): its parameters' gradients are the slice's
** rows' share, computed into `part` (float32, 2 x cols) and summed over the slices before they are added. */
static int ln_bwd_rows(struct lctx *c, strata_mem_t x, strata_mem_t g, strata_mem_t mean, strata_mem_t rstd,
                       strata_mem_t dy, strata_mem_t dx, strata_mem_t dg, strata_mem_t db, strata_mem_t part,
                       int64_t cols) {
  if (!c->d.seqpar)
    return ln_bwd(c, x, g, mean, rstd, dy, dx, dg, db, part, c->d.R, cols);
  TRY(strata_layernorm_bwd(c->q, x, g, mean, rstd, dy, dx, part, plus(part, (size_t)cols), c->d.Rs, cols, 0));
  return strata__seq_ln_grads(c->st, c->q, part, dg, db, cols);
}

/* RMSNorm's backward restricted to the part the mode wants, as ln_bwd. */
static int rms_bwd(struct lctx *c, strata_mem_t x, strata_mem_t w, strata_mem_t rstd, strata_mem_t dy, strata_mem_t dx,
                   strata_mem_t dw, strata_mem_t junk, int64_t rows, int64_t cols) {
  const int mode = c->fold ? (c->mode == BM_WEIGHT ? -1 : BM_FULL) : c->mode; /* folded: whole in BI, none in W */
  if (mode < 0)
    return STRATA_OK;
  if (mode == BM_INPUT)
    dw = junk;
  else if (mode == BM_WEIGHT)
    dx = junk;
  return strata_rmsnorm_bwd(c->q, x, w, rstd, dy, dx, dw, rows, cols, mode != BM_INPUT);
}

/* rms_bwd on the slice's rows (seqpar: a whole backward): the weight's gradient is the slice's rows' share, computed
** into `part` (float32, cols) and summed over the slices before it is added. */
static int rms_bwd_rows(struct lctx *c, strata_mem_t x, strata_mem_t w, strata_mem_t rstd, strata_mem_t dy,
                        strata_mem_t dx, strata_mem_t dw, strata_mem_t part, int64_t cols) {
  if (!c->d.seqpar)
    return rms_bwd(c, x, w, rstd, dy, dx, dw, part, c->d.R, cols);
  TRY(strata_rmsnorm_bwd(c->q, x, w, rstd, dy, dx, part, c->d.Rs, cols, 0));
  TRY(join(c, part, (size_t)cols));
  return strata_add(c->q, dw, part, dw, cols);
}

static int embed_bwd(struct lctx *c, strata_mem_t dout) {
  struct strata__dims d = c->d;
  TRY(keep_dout(c, &dout, (size_t)(d.Rs * d.D)));
  if (!DO_W(c))
    return STRATA_OK;
  if (d.seqpar) { /* every row's output gradient (the conjugate of the forward's scatter): whole gradients */
    TRY(strata__seq_gather(c->st, c->q, dout, SC(c, 0, 0), (size_t)(d.Rs * d.D)));
    dout = SC(c, 0, 0);
  }
  strata_mem_t tok = c->in;
  if (d.vp) {
    int rc = STRATA_OK;
    tok = slice_tokens(c, &rc);
    TRY(rc);
  }
  TRY(TAKE(c, 0, d.rms ? 1 : 2));
  TRY(strata_embedding_bwd(c->q, tok, dout, GRAD(c, 0), d.R, d.D, d.V, 1));
  if (d.rms)
    return STRATA_OK;
  return strata_embedding_bwd(c->q, AT(c->st->positions, 0), dout, GRAD(c, 1), d.R, d.D, d.T, 1);
}

/* Backward of a block, sharded as its forward: the input gradients of the
** two column-split matrices (c_fc, c_attn) are the partial sums joined. */
static int block_bwd(struct lctx *c, strata_mem_t dout, strata_mem_t din) {
  struct strata__dims d = c->d;
  struct strata__block_saved s = strata__block_layout(&d);
  strata_queue_t q = c->q;
  const int a = d.act;
  int64_t D = d.D, A = d.A, T = d.T, H = d.H, hd = d.hd, R = d.R;
  size_t RD = (size_t)(R * D), uRD = strata__units(RD, a), u3RA = strata__units((size_t)(3 * R * A), a),
         uRF = strata__units((size_t)(R * d.F), a);
  float scale = 1.0f / sqrtf((float)hd);
  /* scratch (units): dqkv | f | d1 | d2 | d3 | junk (float32) */
  size_t o_dqkv = 0, o_f = o_dqkv + u3RA, o_d1 = o_f + uRF, o_d2 = o_d1 + uRD, o_d3 = o_d2 + uRD, o_junk = o_d3 + uRD;
  /* dsave (units): dout | dh | dln2 | dxmid | dqkv | dln1 */
  size_t k_dh = uRD, k_dln2 = k_dh + uRF, k_dxmid = k_dln2 + uRD, k_dqkv = k_dxmid + uRD, k_dln1 = k_dqkv + u3RA;
  strata_mem_t dh = LOC(c, o_f, k_dh), dln2 = LOC(c, o_d1, k_dln2), dxmid = LOC(c, o_d3, k_dxmid),
               dqkv = LOC(c, o_dqkv, k_dqkv), dln1 = LOC(c, o_d1, k_dln1), junk = SCR(c, o_junk);
  /* folded (strata__stage_folds): BI in scratch as FULL, then dh over h, dqkv over qkv, dxmid over xmid; BI also
  ** computes the MLP c_proj's and the layernorms' weight gradients (ln_bwd), W the other three */
  const int fold = c->fold, early = fold ? c->mode == BM_INPUT : DO_W(c);
  if (fold) {
    dh = c->mode == BM_INPUT ? SC(c, o_f, 0) : SV(c, s.h, 0);
    dqkv = c->mode == BM_INPUT ? SC(c, o_dqkv, 0) : SV(c, s.qkv, 0);
    dln2 = dln1 = SC(c, o_d1, 0);
    dxmid = SV(c, s.xmid, 0);
  }
  /* seqpar: dout and dxmid are the slice's rows, gathered (dall, dxall: every row) before the row-split matrices'
  ** backward; the layernorms' outputs gathered again before the column-split matrices' weight gradients */
  TRY(keep_dout(c, &dout, (size_t)(d.Rs * D)));
  int rc;
  strata_mem_t dall = gathered(c, dout, D, &rc), dxall = dxmid, x;
  TRY(rc);
  /* MLP branch: the MLP c_proj's weight gradient first, from the GELU output recomputed into scratch f (gelu_out),
  ** before the input part's dh takes that room (FULL; split, dh is in the slot) */
  if (early) {
    strata_mem_t g = gelu_out(c);
    TRY(strata_gelu_fwd(q, SV(c, s.h, 0), g, R * d.F));
    TRY(TAKE(c, FCP_W, 2));
    TRY(linear_bwd_w(q, R, d.F, D, g, dall, GRAD(c, FCP_W), GRAD(c, FCP_B), GBETA(c, FCP_W)));
  }
  if (DO_IN(c)) {
    TRY(FETCH(c, FCP_W, 2));
    TRY(linear_bwd_x(q, R, d.F, D, WT(c, FCP_W), dall, dh));
    TRY(strata_gelu_bwd(q, SV(c, s.h, 0), dh, dh, R * d.F));
    if (fold) /* (h read for the last time) */
      TRY(copy_act(c, SV(c, s.h, 0), dh, (size_t)(R * d.F)));
    TRY(FETCH(c, FC_W, 2));
    TRY(linear_bwd_x(q, R, D, d.F, WT(c, FC_W), dh, dln2));
    TRY(rows_join(c, &dln2, D));
  }
  if (DO_W(c)) {
    TRY(TAKE(c, FC_W, 2));
    x = gathered(c, SV(c, s.ln2, 0), D, &rc);
    TRY(rc);
    TRY(linear_bwd_w(q, R, D, d.F, x, dh, GRAD(c, FC_W), GRAD(c, FC_B), GBETA(c, FC_W)));
  }
  TRY(TAKE(c, LN2_W, 2));
  TRY(FETCH(c, LN2_W, 2));
  TRY(ln_bwd_rows(c, SV(c, s.xmid, 0), PARAM(c, LN2_W), SAVED(c, s.mean2), SAVED(c, s.rstd2), dln2, SC(c, o_d2, 0),
                  GRAD(c, LN2_W), GRAD(c, LN2_B), junk, D));
  /* attention branch */
  if (DO_IN(c)) {
    TRY(strata_add(q, dout, SC(c, o_d2, 0), dxmid, d.Rs * D));
    dxall = gathered(c, dxmid, D, &rc);
    TRY(rc);
    TRY(FETCH(c, PROJ_W, 2));
    TRY(linear_bwd_x(q, R, A, D, WT(c, PROJ_W), dxall, SC(c, o_d1, 0)));
    /* the fused attention's backward: probabilities recomputed from the saved log-sum-exps */
    TRY(strata_attention_bwd(q, SV(c, s.qkv, 0), attn_out(c, &s), SC(c, o_d1, 0), attn_lse(c, &s), dqkv, d.B, T, H, hd,
                             scale, 1));
    if (fold) /* (Q, K and V read for the last time) */
      TRY(copy_act(c, SV(c, s.qkv, 0), dqkv, (size_t)(3 * R * A)));
    TRY(FETCH(c, ATTN_W, 2));
    TRY(linear_bwd_x(q, R, D, 3 * A, WT(c, ATTN_W), dqkv, dln1));
    TRY(rows_join(c, &dln1, D));
  }
  if (DO_W(c)) {
    TRY(TAKE(c, PROJ_W, 2));
    TRY(linear_bwd_w(q, R, A, D, attn_out(c, &s), dxall, GRAD(c, PROJ_W), GRAD(c, PROJ_B), GBETA(c, PROJ_W)));
    TRY(TAKE(c, ATTN_W, 2));
    x = gathered(c, SV(c, s.ln1, 0), D, &rc);
    TRY(rc);
    TRY(linear_bwd_w(q, R, D, 3 * A, x, dqkv, GRAD(c, ATTN_W), GRAD(c, ATTN_B), GBETA(c, ATTN_W)));
  }
  TRY(TAKE(c, LN1_W, 2));
  TRY(FETCH(c, LN1_W, 2));
  TRY(ln_bwd_rows(c, c->in, PARAM(c, LN1_W), SAVED(c, s.mean1), SAVED(c, s.rstd1), dln1, SC(c, o_d2, 0),
                  GRAD(c, LN1_W), GRAD(c, LN1_B), junk, D));
  if (DO_IN(c) && din.buf)
    TRY(strata_add(q, dxmid, SC(c, o_d2, 0), din, d.Rs * D));
  return STRATA_OK;
}

static int lm_head_bwd(struct lctx *c, strata_mem_t targets, strata_mem_t din) {
  struct strata__dims d = c->d;
  struct strata__head_saved h = strata__head_layout(&d);
  size_t RD = (size_t)(d.R * d.D), uRD = strata__units(RD, d.act), uRV = strata__units((size_t)(d.R * d.V), d.act);
  strata_mem_t W, dW;
  TRY(head_weight(c, &W, &dW));
  /* scratch: dlogits | dlnx | junk (float32); dsave: dlogits | dlnx */
  strata_mem_t dlogits = LOC(c, 0, 0), dlnx = LOC(c, uRV, uRV), junk = SCR(c, uRV + uRD);
  const int fold = c->fold; /* (strata__stage_folds: BI in scratch as FULL, then dlogits over the logits) */
  if (fold) {
    dlogits = c->mode == BM_INPUT ? SC(c, 0, 0) : SV(c, h.logits, 0);
    dlnx = SC(c, uRV, 0);
  }
  if (DO_IN(c)) {
    if (d.vp)
      TRY(strata_xent_vp_bwd(c->q, SV(c, h.logits, 0), targets, SAVED(c, h.mx), SAVED(c, h.se), dlogits, d.R, d.V,
                             d.voff, d.Vall, c->st->loss_scale));
    else
      TRY(strata_cross_entropy_bwd(c->q, SV(c, h.logits, 0), targets, dlogits, d.R, d.V, c->st->loss_scale));
    if (fold) /* (the logits read for the last time) */
      TRY(copy_act(c, SV(c, h.logits, 0), dlogits, (size_t)(d.R * d.V)));
    TRY(strata_gemm(c->q, 0, 0, d.R, d.D, d.V, 1, dlogits, d.V, 0, W, d.D, 0, 0, dlnx, d.D, 0, 1));
    if (d.vp) /* each slice's vocabulary's part of the input gradient (seqpar: of its rows) */
      TRY(rows_join(c, &dlnx, d.D));
    else /* (every slice has all of it: seqpar, its rows) */
      dlnx = rows_mine(c, dlnx, (size_t)(d.Rs * d.D));
  }
  if (DO_W(c)) {
    if (!c->st->model->cfg.tied) /* (tied: the embedding's, in gtied) */
      TRY(TAKE(c, d.rms ? 1 : 2, 1));
    int rc;
    strata_mem_t x = gathered(c, SV(c, h.ln, 0), d.D, &rc);
    TRY(rc);
    TRY(head_weight(c, &W, &dW));
    const float beta = c->st->model->cfg.tied ? 1.0f : GBETA(c, d.rms ? 1 : 2); /* (tied: the embedding's too) */
    TRY(strata_gemm(c->q, 1, 0, d.V, d.D, d.R, 1, dlogits, d.V, 0, x, d.D, 0, beta, dW, d.D, 0, 1));
  }
  if (!din.buf && c->mode == BM_INPUT && !fold)
    return STRATA_OK;
  TRY(TAKE(c, 0, d.rms ? 1 : 2));
  TRY(FETCH(c, 0, d.rms ? 1 : 2));
  if (d.rms) /* (seqpar: a llama's head has an input gradient to write, its weight's share takes junk) */
    return rms_bwd_rows(c, c->in, PARAM(c, 0), SAVED(c, h.rstd), dlnx, din.buf ? din : junk, GRAD(c, 0), junk, d.D);
  /* (a GPT's head has an input gradient to write: seqpar's parameter gradients take junk) */
  return ln_bwd_rows(c, c->in, PARAM(c, 0), SAVED(c, h.mean), SAVED(c, h.rstd), dlnx, din.buf ? din : junk,
                     GRAD(c, 0), GRAD(c, 1), junk, d.D);
}

static int fc_bwd(struct lctx *c, strata_mem_t dout, strata_mem_t din) {
  const struct strata__layer *L = c->L;
  strata_mem_t dz = LOC(c, 0, 0);
  if (DO_IN(c)) {
    TRY(strata_relu_bwd(c->q, SV(c, 0, 0), dout, dz, c->d.R * L->out));
    TRY(FETCH(c, 0, 2));
    TRY(linear_bwd_x(c->q, c->d.R, L->in, L->out, WT(c, 0), dz, L->first ? AT(NULL, 0) : din));
    if (L->tp_role == STRATA__TP_OUTPUTS && !L->first && din.buf) /* each slice's outputs' share of it */
      TRY(join(c, din, (size_t)(c->d.R * L->in)));
  }
  if (!DO_W(c))
    return STRATA_OK;
  int rc;
  strata_mem_t x = layer_x(c, strata__units((size_t)(c->d.R * L->out), c->d.act), c->d.R * L->in, 0, &rc);
  TRY(TAKE(c, 0, 2));
  return linear_bwd_w(c->q, c->d.R, L->in, L->out, x, dz, GRAD(c, 0), GRAD(c, 1), 1);
}

static int conv_bwd(struct lctx *c, strata_mem_t dout, strata_mem_t din) {
  const struct strata__layer *L = c->L;
  struct strata_conv2d g = conv_geom(c);
  int64_t p, qq, ws;
  TRY(strata_conv2d_shape(&g, &p, &qq, &ws));
  size_t big = (size_t)(c->d.B * strata__conv_big(L)), relu, idx, xin;
  conv_saved(c, &relu, &idx, &xin);
  struct strata_pool2d pg = pool_geom(c);
  strata_mem_t dr = LOC(c, strata__units((size_t)ws, c->d.act), 0);
  if (DO_IN(c)) {
    if (L->pool > 1)
      TRY(strata_maxpool_bwd(c->q, &pg, dout, SAVED(c, idx), dr));
    TRY(strata_relu_bwd(c->q, SV(c, 0, 0), L->pool > 1 ? dr : dout, dr, (int64_t)big));
  }
  strata_mem_t dx = (DO_IN(c) && !L->first) ? din : AT(NULL, 0);
  if (DO_W(c))
    TRY(TAKE(c, 0, 1));
  strata_mem_t dw = DO_W(c) ? GRAD(c, 0) : AT(NULL, 0);
  if (!dx.buf && !dw.buf)
    return STRATA_OK;
  int rc;
  strata_mem_t x = layer_x(c, xin, c->d.B * L->in, 0, &rc);
  TRY(FETCH(c, 0, 1));
  if (L->sl.on) { /* a slab: the input's gradient through the whole convolution (its rows' gradient in P-row planes),
                  ** to its rows and (the halo's) to its neighbours, whose exchange the weights' gradient (from the
                  ** rows it keeps, j0.. of the P) overlaps */
    const struct strata__slab_scratch o = strata__slab_scratch_of(L, c->d.B, (size_t)ws);
    TRY(strata__slab_restore(c->st, L, c->d.B, x, SAVED(c, xin), SCR(c, o.e), &o));
    if (dx.buf) {
      TRY(strata__slab_rows(c->st, L, c->d.B, SCR(c, o.y), dr, &o));
      TRY(strata_conv2d_bwd(c->q, &g, SCR(c, o.e), WT(c, 0), SCR(c, o.y), SCR(c, o.de), AT(NULL, 0), SC(c, 0, 0),
                            1));
      TRY(strata__slab_scatter_post(c->st, L, c->d.B, SCR(c, o.de), dx, &o));
    }
    if (dw.buf)
      TRY(strata_conv2d_bwd_w_rows(c->q, &g, L->sl.j0, L->ch, SCR(c, o.e), dr, dw, SC(c, 0, 0), 1));
    return dx.buf ? strata__slab_scatter_end(c->st, L, c->d.B, dx, &o) : STRATA_OK;
  }
  TRY(strata_conv2d_bwd(c->q, &g, x, WT(c, 0), dr, dx, dw, SC(c, 0, 0), 1));
  if (L->tp_role == STRATA__TP_OUTPUTS && dx.buf) /* each slice's output channels' share of it */
    TRY(join(c, dx, (size_t)(c->d.B * L->in)));
  return STRATA_OK;
}

static int classifier_bwd(struct lctx *c, strata_mem_t targets, strata_mem_t din) {
  const struct strata__layer *L = c->L;
  const size_t lu = strata__units((size_t)(c->d.R * L->out), c->d.act);
  strata_mem_t dlogits = LOC(c, 0, 0);
  /* gap: the averages' gradient and the ones, in scratch after dlogits */
  strata_mem_t davg = SC(c, lu, 0), ones = SC(c, lu + strata__units((size_t)(c->d.R * L->in), c->d.act), 0);
  if (DO_IN(c)) {
    TRY(strata_cross_entropy_bwd(c->q, SV(c, 0, 0), targets, dlogits, c->d.R, L->out, c->st->loss_scale));
    TRY(FETCH(c, 0, 2));
    if (L->gap && !L->first && din.buf) { /* each pixel gets 1 / (h w) of its channel's average's gradient */
      const int64_t hw = L->h * L->w;
      TRY(linear_bwd_x(c->q, c->d.R, L->in, L->out, WT(c, 0), dlogits, davg));
      TRY(strata_fill(c->q, ones, 1.0f, hw));
      TRY(strata_gemm(c->q, 0, 0, c->d.R * L->c, hw, 1, gap_scale(L), davg, 1, 0, ones, hw, 0, 0, din, hw, 0, 1));
    } else if (!L->gap) {
      TRY(linear_bwd_x(c->q, c->d.R, L->in, L->out, WT(c, 0), dlogits, L->first ? AT(NULL, 0) : din));
    }
  }
  if (!DO_W(c) || c->st->sp.rank > 0) /* the slabs' classifiers are one: slab 0 has its gradients, once */
    return STRATA_OK;
  int rc;
  strata_mem_t x = L->gap ? SV(c, gap_avg(c), 0) : layer_x(c, lu + (size_t)c->d.R, c->d.R * L->in, 0, &rc);
  if (!L->gap)
    TRY(rc);
  TRY(TAKE(c, 0, 2));
  return linear_bwd_w(c->q, c->d.R, L->in, L->out, x, dlogits, GRAD(c, 0), GRAD(c, 1), 1);
}

/* ---- the llama block ---- */

/* Its tensors, in layer_tensors' order (Hugging Face's names less "model.layers.N."). */
enum { LL_IN_NORM, LL_Q, LL_K, LL_V, LL_O, LL_POST_NORM, LL_GATE, LL_UP, LL_DOWN };

/* y[R, n] (row stride ldy) (+)= x[R, k] (row stride ldx) W[k, n]: one projection into its columns of a fused row. */
static int proj(strata_queue_t q, int64_t R, int64_t k, int64_t n, strata_mem_t x, int64_t ldx, strata_mem_t W,
                float beta, strata_mem_t y, int64_t ldy) {
  return strata_gemm(q, 0, 0, R, n, k, 1, x, ldx, 0, W, n, 0, beta, y, ldy, 0, 1);
}
/* dx[R, k] (+)= dy[R, n] (row stride ldd) W[k, n]^T: a projection's input gradient. */
static int proj_dx(strata_queue_t q, int64_t R, int64_t k, int64_t n, strata_mem_t dy, int64_t ldd, strata_mem_t W,
                   float beta, strata_mem_t dx) {
  return strata_gemm(q, 0, 1, R, k, n, 1, dy, ldd, 0, W, n, 0, beta, dx, k, 0, 1);
}
/* dW[k, n] = x[R, k]^T dy[R, n] (row stride ldd) + beta dW: a projection's weight gradient (GBETA). */
static int proj_dw(strata_queue_t q, int64_t R, int64_t k, int64_t n, strata_mem_t x, strata_mem_t dy, int64_t ldd,
                   strata_mem_t dW, float beta) {
  return strata_gemm(q, 1, 0, k, n, R, 1, x, k, 0, dy, ldd, 0, beta, dW, n, 0, 1);
}

/* y = x[R, k] W[k, D] for a row-split W (o_proj, down_proj): the slices' partial products joined (seqpar:
** reduce-scattered, y the slice's rows of the sum), no bias. */
static int proj_rows(struct lctx *c, int64_t k, strata_mem_t x, strata_mem_t W, strata_mem_t y) {
  const int64_t R = c->d.R, D = c->d.D;
  if (!c->d.seqpar) {
    TRY(proj(c->q, R, k, D, x, k, W, 0, y, D));
    return join(c, y, (size_t)(R * D));
  }
  strata_mem_t part;
  const size_t n = (size_t)(c->d.Rs * D);
  TRY(proj(c->q, R, k, D, x, k, W, 0, c->wide, D));
  TRY(strata__seq_scatter(c->st, c->q, c->wide, n, &part));
  return strata_buffer_copy(c->q, y.buf, strata__mem_byte(y), part.buf, strata__mem_byte(part),
                            n * strata_dtype_size(y.dtype));
}

/* Where a llama block's attention output and log-sum-exps live: as a GPT block's (attn_out, attn_lse). */
static strata_mem_t ll_att(const struct lctx *c, const struct strata__llama_saved *s) {
  if (c->d.rc == STRATA_RECOMPUTE_SELECTIVE)
    return strata__at(c->st->rcbuf, 0, 0, c->d.act);
  return SV(c, s->att, 0);
}
static strata_mem_t ll_lse(const struct lctx *c, const struct strata__llama_saved *s) {
  if (c->d.rc == STRATA_RECOMPUTE_SELECTIVE)
    return AT(c->st->rcbuf, strata__units((size_t)(c->d.R * c->d.A), c->d.act));
  return SAVED(c, s->lse);
}

/* The fused grouped-query attention of the slice's heads over the kept (rotated) q|k|v rows: the forward and the
** selective recomputation run this one code, so their bits agree. */
static int ll_attn_fwd(struct lctx *c, const struct strata__llama_saved *s) {
  const struct strata__dims d = c->d;
  return strata_attention_gqa_fwd(c->q, SV(c, s->qkv, 0), ll_att(c, s), ll_lse(c, s), d.B, d.T, d.H, d.KV, d.hd,
                                  1.0f / sqrtf((float)d.hd), 1);
}

/*
** k_proj's and v_proj's gradients where tp exceeds n_kv_heads: the slice's
** query heads gave its key/value head only their part of dk and dv (at dkv,
** k then v, rows of the q|k|v stride), so the head's weight gradients are
** summed over the kvrep slices sharing it. Each slice writes its part into
** its group's place in `slots` (float32: n_kv_heads places of k's then v's
** D x Akv, the others zero), one join sums the buffer over the slices —
** each place then holds its group's sum and nothing else's — and the
** slice adds its place to the two (adjacent) gradients. Every slice of a
** group adds the same bits, so the copies stay equal.
*/
static int kv_grads_shared(struct lctx *c, strata_mem_t ln1, strata_mem_t dkv, strata_mem_t slots) {
  const struct strata__dims d = c->d;
  const int64_t D = d.D, Akv = d.Akv, W = d.A + 2 * Akv, place = 2 * D * Akv;
  strata_mem_t mine = plus(slots, (size_t)(c->st->tp.rank / d.kvrep * place));
  TRY(strata_fill(c->q, slots, 0, d.kvall * place));
  for (int j = 0; j < 2; j++)
    TRY(strata_gemm(c->q, 1, 0, D, Akv, d.R, 1, ln1, D, 0, plus(dkv, (size_t)(j * Akv)), W, 0, 0,
                    plus(mine, (size_t)(j * D * Akv)), Akv, 0, 1));
  TRY(join(c, slots, (size_t)(d.kvall * place)));
  return strata_add(c->q, GRAD(c, LL_K), mine, GRAD(c, LL_K), place);
}

/*
** A llama block: h = x + o_proj(attn(RoPE(q), RoPE(k), v)) over RMSNorm(x),
** out = h + down(silu(gate(g)) * up(g)) over g = RMSNorm(h), no biases.
** q, k and v land side by side in one q|k|v row (the grouped-query
** attention's layout), gate and up in one gate|up row (SwiGLU's); RoPE
** rotates q's and k's heads in place in one call. Sharded, the stage holds
** H query heads and their KV key/value heads (A = H hd, Akv = KV hd
** columns; tp above n_kv_heads, the one head they share), F of the hidden
** units: o_proj and down_proj are row-split, their products joined over the
** slices; the norms and residuals run whole on every slice, or with seqpar
** on its Rs rows (gathered before q|k|v and gate|up, the row-split products
** reduce-scattered), as a GPT block's.
*/
static int llama_block_fwd(struct lctx *c) {
  struct strata__dims d = c->d;
  struct strata__llama_saved s = strata__llama_layout(&d);
  strata_queue_t q = c->q;
  const int64_t D = d.D, A = d.A, Akv = d.Akv, W = A + 2 * Akv, F = d.F, R = d.R, RsD = d.Rs * D;
  int rc;
  TRY(FETCH(c, LL_IN_NORM, 1));
  TRY(strata_rmsnorm_fwd(q, c->in, PARAM(c, LL_IN_NORM), SV(c, s.ln1, 0), SAVED(c, s.rstd1), d.Rs, D, norm_eps(c)));
  strata_mem_t x = gathered(c, SV(c, s.ln1, 0), D, &rc); /* seqpar: every row, for the column-split q, k, v */
  TRY(rc);
  TRY(FETCH(c, LL_Q, 1));
  TRY(proj(q, R, D, A, x, D, WT(c, LL_Q), 0, SV(c, s.qkv, 0), W));
  TRY(FETCH(c, LL_K, 1));
  TRY(proj(q, R, D, Akv, x, D, WT(c, LL_K), 0, SV(c, s.qkv, A), W));
  TRY(FETCH(c, LL_V, 1));
  TRY(proj(q, R, D, Akv, x, D, WT(c, LL_V), 0, SV(c, s.qkv, A + Akv), W));
  TRY(strata_rope_fwd(q, SV(c, s.qkv, 0), SV(c, s.qkv, 0), AT(c->st->rope, 0), d.B, d.T, d.H + d.KV, d.hd, W, 0));
  TRY(ll_attn_fwd(c, &s));
  TRY(FETCH(c, LL_O, 1));
  TRY(proj_rows(c, A, ll_att(c, &s), WT(c, LL_O), SV(c, s.xmid, 0)));
  TRY(strata_add(q, SV(c, s.xmid, 0), c->in, SV(c, s.xmid, 0), RsD));
  TRY(FETCH(c, LL_POST_NORM, 1));
  TRY(strata_rmsnorm_fwd(q, SV(c, s.xmid, 0), PARAM(c, LL_POST_NORM), SV(c, s.ln2, 0), SAVED(c, s.rstd2), d.Rs, D,
                         norm_eps(c)));
  x = gathered(c, SV(c, s.ln2, 0), D, &rc);
  TRY(rc);
  TRY(FETCH(c, LL_GATE, 1));
  TRY(proj(q, R, D, F, x, D, WT(c, LL_GATE), 0, SV(c, s.gu, 0), 2 * F));
  TRY(FETCH(c, LL_UP, 1));
  TRY(proj(q, R, D, F, x, D, WT(c, LL_UP), 0, SV(c, s.gu, F), 2 * F));
  TRY(strata_swiglu_fwd(q, SV(c, s.gu, 0), SV(c, s.h, 0), R, F));
  TRY(FETCH(c, LL_DOWN, 1));
  TRY(proj_rows(c, F, SV(c, s.h, 0), WT(c, LL_DOWN), c->out));
  return strata_add(q, c->out, SV(c, s.xmid, 0), c->out, RsD);
}

/* Backward of a llama block, sharded as its forward: the input gradients of the column-split projections (gate and
** up, q, k and v) are the slices' partial sums, joined (seqpar: reduce-scattered, the output gradients gathered
** before the row-split projections' backward and the norms' outputs again before the column-split ones' weight
** gradients, as a GPT block's). */
static int llama_block_bwd(struct lctx *c, strata_mem_t dout, strata_mem_t din) {
  struct strata__dims d = c->d;
  struct strata__llama_saved s = strata__llama_layout(&d);
  strata_queue_t q = c->q;
  const int a = d.act;
  const int64_t D = d.D, A = d.A, Akv = d.Akv, W = A + 2 * Akv, F = d.F, R = d.R, RD = R * D, RsD = d.Rs * D;
  const size_t uRD = strata__units((size_t)RD, a), uW = strata__units((size_t)(R * W), a),
               uGU = strata__units((size_t)(2 * R * F), a), uRF = strata__units((size_t)(R * F), a);
  const float scale = 1.0f / sqrtf((float)d.hd);
  /* scratch (units): dqkv | dgu | dh | d1 | d2 | d3 | junk (float32) (| kv places | seqpar: wide) */
  const size_t o_dqkv = 0, o_dgu = o_dqkv + uW, o_dh = o_dgu + uGU, o_d1 = o_dh + uRF, o_d2 = o_d1 + uRD,
               o_d3 = o_d2 + uRD, o_junk = o_d3 + uRD;
  /* dsave (units): dout | dgu | dln2 | dxmid | dqkv | dln1 */
  const size_t k_dgu = uRD, k_dln2 = k_dgu + uGU, k_dxmid = k_dln2 + uRD, k_dqkv = k_dxmid + uRD,
               k_dln1 = k_dqkv + uW;
  strata_mem_t dgu = LOC(c, o_dgu, k_dgu), dh = SC(c, o_dh, 0), dln2 = LOC(c, o_d1, k_dln2),
               dxmid = LOC(c, o_d3, k_dxmid), dqkv = LOC(c, o_dqkv, k_dqkv), dln1 = LOC(c, o_d1, k_dln1),
               junk = SCR(c, o_junk), x;
  const int fold = c->fold, early = fold ? c->mode == BM_INPUT : DO_W(c); /* (as a GPT block's: dgu over gu) */
  if (fold) {
    dgu = c->mode == BM_INPUT ? SC(c, o_dgu, 0) : SV(c, s.gu, 0);
    dqkv = c->mode == BM_INPUT ? SC(c, o_dqkv, 0) : SV(c, s.qkv, 0);
    dln2 = dln1 = SC(c, o_d1, 0);
    dxmid = SV(c, s.xmid, 0);
  }
  TRY(keep_dout(c, &dout, (size_t)RsD));
  int rc;
  strata_mem_t dall = gathered(c, dout, D, &rc), dxall = dxmid; /* seqpar: every row's */
  TRY(rc);
  /* the MLP */
  if (DO_IN(c)) {
    TRY(FETCH(c, LL_DOWN, 1));
    TRY(proj_dx(q, R, F, D, dall, D, WT(c, LL_DOWN), 0, dh));
    TRY(strata_swiglu_bwd(q, SV(c, s.gu, 0), dh, dgu, R, F));
    if (fold) /* (gate|up read for the last time) */
      TRY(copy_act(c, SV(c, s.gu, 0), dgu, (size_t)(2 * R * F)));
    TRY(FETCH(c, LL_GATE, 1));
    TRY(proj_dx(q, R, D, F, dgu, 2 * F, WT(c, LL_GATE), 0, dln2));
    TRY(FETCH(c, LL_UP, 1));
    TRY(proj_dx(q, R, D, F, plus(dgu, (size_t)F), 2 * F, WT(c, LL_UP), 1, dln2));
    TRY(rows_join(c, &dln2, D));
  }
  if (early) {
    TRY(TAKE(c, LL_DOWN, 1));
    TRY(proj_dw(q, R, F, D, SV(c, s.h, 0), dall, D, GRAD(c, LL_DOWN), GBETA(c, LL_DOWN)));
  }
  if (DO_W(c)) {
    x = gathered(c, SV(c, s.ln2, 0), D, &rc);
    TRY(rc);
    TRY(TAKE(c, LL_GATE, 1));
    TRY(proj_dw(q, R, D, F, x, dgu, 2 * F, GRAD(c, LL_GATE), GBETA(c, LL_GATE)));
    TRY(TAKE(c, LL_UP, 1));
    TRY(proj_dw(q, R, D, F, x, plus(dgu, (size_t)F), 2 * F, GRAD(c, LL_UP), GBETA(c, LL_UP)));
  }
  TRY(TAKE(c, LL_POST_NORM, 1));
  TRY(FETCH(c, LL_POST_NORM, 1));
  TRY(rms_bwd_rows(c, SV(c, s.xmid, 0), PARAM(c, LL_POST_NORM), SAVED(c, s.rstd2), dln2, SC(c, o_d2, 0),
                   GRAD(c, LL_POST_NORM), junk, D));
  /* the attention */
  if (DO_IN(c)) {
    TRY(strata_add(q, dout, SC(c, o_d2, 0), dxmid, RsD));
    dxall = gathered(c, dxmid, D, &rc);
    TRY(rc);
    TRY(FETCH(c, LL_O, 1));
    TRY(proj_dx(q, R, A, D, dxall, D, WT(c, LL_O), 0, SC(c, o_d1, 0)));
    TRY(strata_attention_gqa_bwd(q, SV(c, s.qkv, 0), ll_att(c, &s), SC(c, o_d1, 0), ll_lse(c, &s), dqkv, d.B, d.T,
                                 d.H, d.KV, d.hd, scale, 1));
    /* back through the rotation: the gradients of the projections' outputs */
    TRY(strata_rope_bwd(q, dqkv, dqkv, AT(c->st->rope, 0), d.B, d.T, d.H + d.KV, d.hd, W, 0));
    if (fold) /* (q|k|v read for the last time) */
      TRY(copy_act(c, SV(c, s.qkv, 0), dqkv, (size_t)(R * W)));
    TRY(FETCH(c, LL_Q, 1));
    TRY(proj_dx(q, R, D, A, dqkv, W, WT(c, LL_Q), 0, dln1));
    TRY(FETCH(c, LL_K, 1));
    TRY(proj_dx(q, R, D, Akv, plus(dqkv, (size_t)A), W, WT(c, LL_K), 1, dln1));
    TRY(FETCH(c, LL_V, 1));
    TRY(proj_dx(q, R, D, Akv, plus(dqkv, (size_t)(A + Akv)), W, WT(c, LL_V), 1, dln1));
    TRY(rows_join(c, &dln1, D));
  }
  if (DO_W(c)) {
    TRY(TAKE(c, LL_O, 1));
    TRY(proj_dw(q, R, A, D, ll_att(c, &s), dxall, D, GRAD(c, LL_O), GBETA(c, LL_O)));
    TRY(TAKE(c, LL_Q, 1));
    x = gathered(c, SV(c, s.ln1, 0), D, &rc);
    TRY(rc);
    TRY(proj_dw(q, R, D, A, x, dqkv, W, GRAD(c, LL_Q), GBETA(c, LL_Q)));
    TRY(TAKE(c, LL_K, 2));
    if (d.kvrep > 1)
      TRY(kv_grads_shared(c, x, plus(dqkv, (size_t)A), SCR(c, o_junk + (size_t)RD)));
    else
      for (int j = 0; j < 2; j++)
        TRY(proj_dw(q, R, D, Akv, x, plus(dqkv, (size_t)(A + j * Akv)), W, GRAD(c, LL_K + j), GBETA(c, LL_K + j)));
  }
  TRY(TAKE(c, LL_IN_NORM, 1));
  TRY(FETCH(c, LL_IN_NORM, 1));
  TRY(rms_bwd_rows(c, c->in, PARAM(c, LL_IN_NORM), SAVED(c, s.rstd1), dln1, SC(c, o_d2, 0), GRAD(c, LL_IN_NORM), junk,
                   D));
  if (DO_IN(c) && din.buf)
    TRY(strata_add(q, dxmid, SC(c, o_d2, 0), din, RsD));
  return STRATA_OK;
}

/* A llama block's recomputation, as block_recompute: selective, its attention from the kept q|k|v rows; full, its
** whole forward into the buffer (the output after the saved activations). */
static int llama_recompute(struct lctx c) {
  struct strata__llama_saved s = strata__llama_layout(&c.d);
  if (c.d.rc == STRATA_RECOMPUTE_SELECTIVE)
    return ll_attn_fwd(&c, &s);
  c.out = strata__at(c.st->rcbuf, s.end, 0, c.d.act);
  return llama_block_fwd(&c);
}

/* seqpar: where a block's or the head's wide region starts in scratch (units; 0 for other layers). */
static size_t seq_wide(const struct strata__dims *d, int kind) {
  const size_t uRD = strata__units((size_t)(d->R * d->D), d->act), RD = (size_t)(d->R * d->D);
  if (kind == STRATA__LAYER_BLOCK) /* dqkv | f | d1 | d2 | d3 | (float32) junk | wide */
    return strata__units((size_t)(3 * d->R * d->A), d->act) + strata__units((size_t)(d->R * d->F), d->act) + 3 * uRD +
           RD;
  if (kind == STRATA__LAYER_LLAMA_BLOCK) /* dqkv | dgu | dh | d1 | d2 | d3 | (float32) junk (| kv places) | wide */
    return strata__units((size_t)(d->R * (d->A + 2 * d->Akv)), d->act) +
           strata__units((size_t)(2 * d->R * d->F), d->act) + strata__units((size_t)(d->R * d->F), d->act) + 3 * uRD +
           RD + (d->kvrep > 1 ? (size_t)(2 * d->kvall * d->D * d->Akv) : 0);
  if (kind == STRATA__LAYER_LM_HEAD) /* dlogits | dlnx | (float32) junk | wide */
    return strata__units((size_t)(d->R * d->V), d->act) + uRD + RD;
  return 0;
}

/* The context of stage layer i for slot s. */
static struct lctx layer_ctx(struct strata__stage *st, int s, int i) {
  struct lctx c = {.st = st, .L = strata__stage_layer_at(st, i), .d = strata__stage_dims(st), .q = st->q,
                   .slot = st->slots[s].buf,
                   .mslot = st->slots[s].dsave};
  c.saved = st->saved_off[i];
  c.dsave = st->dsave_off[i];
  c.in = i == 0 ? strata__stage_input(st, s) : strata__at(c.slot, st->out_off[i - 1], 0, st->act);
  c.out = i == strata__stage_layer_count(st) - 1 ? strata__stage_output(st, s)
                                                 : strata__at(c.slot, st->out_off[i], 0, st->act);
  c.t = &st->tensors[st->layer_tensor[i]];
  if (c.d.seqpar) /* after the block's or head's own scratch (model/stage.c's layer_scratch) */
    c.wide = SC(&c, seq_wide(&c.d, c.L->kind), 0);
  if ((c.L->kind == STRATA__LAYER_BLOCK || c.L->kind == STRATA__LAYER_LLAMA_BLOCK) &&
      st->recompute == STRATA_RECOMPUTE_FULL) {
    c.slot = st->rcbuf; /* all a block saves is in the buffer, recomputed before its backward; its output stays kept */
    c.saved = 0;
  }
  return c;
}

static int check_slot(struct strata__stage *st, int s) {
  if (s < 0 || s >= st->nslots || !st->slots[s].buf)
    return strata__error(STRATA_ERR_STATE, "stage: slot %d holds no micro-batch", s);
  return STRATA_OK;
}

/* The bfloat16 copy of the parameters, made anew when they changed (an update, a load) before a forward reads it. */
static int refresh_weights(struct strata__stage *st) {
  if (!st->params16 || !st->params16_stale || st->zero3) /* (ZeRO-3 converts each window it gathers) */
    return STRATA_OK;
  const size_t n = st->chunk * (size_t)st->zero.size;
  TRY(strata_convert(st->q, AT(st->params, 0), strata_mem_typed(st->params16, 0, STRATA_BFLOAT16),
                     (int64_t)(n ? n : 1)));
  st->params16_stale = 0;
  return STRATA_OK;
}

int strata__stage_forward(struct strata__stage *st, int s) {
  TRY(check_slot(st, s));
  if (st->out_apart && !st->slots[s].out)
    return strata__error(STRATA_ERR_STATE, "stage: slot %d has no output buffer", s);
  TRY(refresh_weights(st));
  strata_mem_t targets = strata__stage_targets(st, s);
  for (int i = 0; i < strata__stage_layer_count(st); i++) {
    struct lctx c = layer_ctx(st, s, i);
    int rc = STRATA_OK;
    switch (c.L->kind) {
    case STRATA__LAYER_EMBED: rc = embed_fwd(&c); break;
    case STRATA__LAYER_BLOCK: rc = block_fwd(&c); break;
    case STRATA__LAYER_LM_HEAD: rc = lm_head_fwd(&c, targets); break;
    case STRATA__LAYER_LINEAR: rc = fc_fwd(&c); break;
    case STRATA__LAYER_CONV: rc = conv_fwd(&c); break;
    case STRATA__LAYER_CLASSIFIER: rc = classifier_fwd(&c, targets); break;
    case STRATA__LAYER_LLAMA_BLOCK: rc = llama_block_fwd(&c); break;
    }
    if (rc)
      return rc;
  }
  return STRATA_OK;
}

/* Backward of slot s in `mode`: the last layer reads the output gradient
** from the slot (non-last stage), the first writes its input gradient into
** the slot (non-first stage); in between gradients ping-pong in gbuf. */
static int stage_backward(struct strata__stage *st, int s, int mode) {
  TRY(check_slot(st, s));
  if (mode != BM_FULL && !st->split)
    return strata__error(STRATA_ERR_STATE, "stage: split backward on a stage built without it");
  /* recomputation: every backward part reruns what the mode dropped, the weight part (W) too — it reads the blocks'
  ** activations (layer inputs, the layernorms' and GELU's outputs, the attention output), and the one-block buffer
  ** holds only the block whose backward runs (schedule.h: an RC before W as before BI) */
  const int recompute = st->recompute;
  if (recompute && !st->slots[s].armed)
    return strata__error(STRATA_ERR_STATE, "stage: the %s of slot %d without its recomputation (RC) first",
                         mode == BM_WEIGHT ? "weight pass (W)" : mode == BM_INPUT ? "input pass (BI)" : "backward", s);
  if (mode == BM_WEIGHT && !st->slots[s].bi)
    return strata__error(STRATA_ERR_STATE, "stage: the weight pass (W) of slot %d without its input pass (BI)", s);
  if (mode == BM_INPUT)
    TRY(strata__stage_dsave_take(st, s));
  if (recompute)
    st->slots[s].armed = 0;
  strata_mem_t targets = strata__stage_targets(st, s);
  int n = strata__stage_layer_count(st);
  if (mode != BM_INPUT)
    TRY(strata__stage_grad_begin(st));
  for (int i = n - 1; i >= 0; i--) {
    struct lctx c = layer_ctx(st, s, i);
    c.mode = mode;
    c.fold = mode != BM_FULL && strata__stage_folds(st, i);
    int back = n - 1 - i; /* layers done before this one */
    strata_mem_t dout = back == 0 ? (strata__stage_has_loss(st) ? AT(NULL, 0) : strata__stage_grad_output(st, s))
                                  : strata__at(st->gbuf[(back - 1) % 2], 0, 0, st->act);
    strata_mem_t din = i > 0          ? strata__at(st->gbuf[back % 2], 0, 0, st->act)
                       : st->first > 0 ? strata__stage_grad_input(st, s)
                                       : AT(NULL, 0);
    int rc = STRATA_OK;
    if (recompute && (c.L->kind == STRATA__LAYER_BLOCK || c.L->kind == STRATA__LAYER_LLAMA_BLOCK)) {
      if (st->recomputing)
        TRY(st->recomputing(st->recomputing_arg, i, 0));
      TRY(c.L->kind == STRATA__LAYER_BLOCK ? block_recompute(c) : llama_recompute(c));
      if (st->recomputing)
        TRY(st->recomputing(st->recomputing_arg, i, 1));
    }
    switch (c.L->kind) {
    case STRATA__LAYER_EMBED: rc = embed_bwd(&c, dout); break;
    case STRATA__LAYER_BLOCK: rc = block_bwd(&c, dout, din); break;
    case STRATA__LAYER_LM_HEAD: rc = lm_head_bwd(&c, targets, din); break;
    case STRATA__LAYER_LINEAR: rc = fc_bwd(&c, dout, din); break;
    case STRATA__LAYER_CONV: rc = conv_bwd(&c, dout, din); break;
    case STRATA__LAYER_CLASSIFIER: rc = classifier_bwd(&c, targets, din); break;
    case STRATA__LAYER_LLAMA_BLOCK: rc = llama_block_bwd(&c, dout, din); break;
    }
    if (rc)
      return rc;
    if (mode != BM_INPUT) /* ZeRO-2: the layer's last gradients go (the tied embedding's after the first layer) */
      TRY(strata__stage_grad_flush(st, i == 0));
    if (mode != BM_INPUT && st->sp.size > 1 && st->sp_grads) { /* the step's gradients: the slabs' summed, waited
                                                                 ** for after the backward (buckets: before them) */
      size_t lo, hi;
      strata__stage_layer_range(st, i, i + 1, &lo, &hi);
      st->join_later = !st->grads_done && st->join_wait;
      rc = hi > lo ? strata__slab_join(st, AT(st->grads, lo), hi - lo) : STRATA_OK;
      st->join_later = 0;
      TRY(rc);
    }
    if (mode != BM_INPUT && st->grads_done)
      TRY(st->grads_done(st->grads_done_arg, i));
    if (mode == BM_WEIGHT && i == 0)
      break;
  }
  if (st->sp.size > 1 && st->join_wait) /* the slabs' gradient sums posted above: the queue's next work reads them */
    TRY(st->join_wait(st->join_arg, st->q));
  if (mode == BM_WEIGHT)
    strata__stage_dsave_give(st, s);
  return STRATA_OK;
}

void strata__layers_grad_first(const struct strata__stage *st, unsigned char *first) {
  const struct strata__dims d = strata__stage_dims(st);
  for (int i = 0; i < strata__stage_layer_count(st); i++) {
    unsigned char *f = first + st->layer_tensor[i];
    const int kind = strata__stage_layer_at(st, i)->kind;
    if (kind == STRATA__LAYER_BLOCK) /* linear_bwd_w's four matrices (bias_grad adds to their biases) */
      f[ATTN_W] = f[PROJ_W] = f[FC_W] = f[FCP_W] = 1;
    if (kind == STRATA__LAYER_LLAMA_BLOCK) /* proj_dw's; k and v shared over kvrep slices are added to */
      f[LL_Q] = f[LL_O] = f[LL_GATE] = f[LL_UP] = f[LL_DOWN] = 1, f[LL_K] = f[LL_V] = d.kvrep <= 1;
    if (kind == STRATA__LAYER_LM_HEAD && !st->model->cfg.tied) /* (tied: the embedding's, embedding_bwd's too) */
      f[d.rms ? 1 : 2] = 1;
  }
}

int strata__stage_backward(struct strata__stage *st, int s) { return stage_backward(st, s, BM_FULL); }
int strata__stage_backward_input(struct strata__stage *st, int s) { return stage_backward(st, s, BM_INPUT); }
int strata__stage_backward_weight(struct strata__stage *st, int s) { return stage_backward(st, s, BM_WEIGHT); }

int strata__stage_recompute(struct strata__stage *st, int s) {
  TRY(check_slot(st, s));
  if (!st->recompute)
    return strata__error(STRATA_ERR_STATE, "stage: a recomputation (RC) on a stage built without one");
  st->slots[s].armed = 1;
  return STRATA_OK;
}
