/* SPDX-License-Identifier: MIT */
/* stage.c — a sharded stage of a model: its tensors, their slices and initial values, its buffers and slots, its optimizer step. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/stage.h"
#include "core/core.h"

#define AT(b, o) strata_mem((b), (size_t)(o))

/* ---- parameters ---- */

/* The parameter tensors of layer L, in a fixed order (the order of
** strata_trainer_params). Returns how many; `t` may be NULL to count. */
static int layer_tensors(const struct strata_model *m, const struct strata__layer *L, int role,
                         const struct strata__shard *sh, struct strata__tensor *t) {
  const struct strata_model_config *c = &m->cfg;
  struct strata__tensor tmp[16];
  struct strata__tensor *o = t ? t : tmp;
  char n[64];
  int k = 0;
  float std = 0.02f, proj = 0.02f / sqrtf(2.0f * (float)(c->layers > 0 ? c->layers : 1));
  const int llama = c->kind == STRATA_MODEL_LLAMA;
  switch (L->kind) {
  case STRATA__LAYER_EMBED:
    /* vocabulary-parallel (tp dividing the vocabulary): each slice holds V / tp rows; a llama has no positions */
    strata__tensor_def(&o[k++], llama ? "embed_tokens.weight" : "wte.weight", 2, c->vocab, c->d_model, 0, 0, 1, std, 0);
    if (sh && sh->size > 1 && c->vocab % sh->size == 0)
      strata__tensor_shard(&o[k - 1], 0, 1, sh);
    if (!llama)
      strata__tensor_def(&o[k++], "wpe.weight", 2, c->context, c->d_model, 0, 0, 1, std, 0);
    break;
  case STRATA__LAYER_LLAMA_BLOCK:
    k += strata__llama_tensors(c, L->index, sh, std, proj, o + k);
    break;
  case STRATA__LAYER_BLOCK: {
    int64_t D = c->d_model, F = c->d_ff;
    int i = L->index;
#define P(suffix, ...)                                                                                                 \
  do {                                                                                                                 \
    snprintf(n, sizeof n, "h.%d.%s", i, suffix);                                                                       \
    strata__tensor_def(&o[k++], n, __VA_ARGS__);                                                                       \
  } while (0)
    P("ln_1.weight", 1, D, 0, 0, 0, 0, 0, 1);
    P("ln_1.bias", 1, D, 0, 0, 0, 0, 0, 0);
    /* sharded: the Q, K and V columns of a head group, c_proj's matching
    ** rows; c_fc's columns, the MLP c_proj's rows; row-split biases whole */
    P("attn.c_attn.weight", 2, D, 3 * D, 0, 0, 1, std, 0);
    strata__tensor_shard(&o[k - 1], -1, 3, sh);
    P("attn.c_attn.bias", 1, 3 * D, 0, 0, 0, 0, 0, 0);
    strata__tensor_shard(&o[k - 1], -1, 3, sh);
    P("attn.c_proj.weight", 2, D, D, 0, 0, 1, proj, 0);
    strata__tensor_shard(&o[k - 1], 0, 1, sh);
    P("attn.c_proj.bias", 1, D, 0, 0, 0, 0, 0, 0);
    P("ln_2.weight", 1, D, 0, 0, 0, 0, 0, 1);
    P("ln_2.bias", 1, D, 0, 0, 0, 0, 0, 0);
    P("mlp.c_fc.weight", 2, D, F, 0, 0, 1, std, 0);
    strata__tensor_shard(&o[k - 1], -1, 1, sh);
    P("mlp.c_fc.bias", 1, F, 0, 0, 0, 0, 0, 0);
    strata__tensor_shard(&o[k - 1], -1, 1, sh);
    P("mlp.c_proj.weight", 2, F, D, 0, 0, 1, proj, 0);
    strata__tensor_shard(&o[k - 1], 0, 1, sh);
    P("mlp.c_proj.bias", 1, D, 0, 0, 0, 0, 0, 0);
#undef P
    break;
  }
  case STRATA__LAYER_LM_HEAD:
    strata__tensor_def(&o[k++], llama ? "norm.weight" : "ln_f.weight", 1, c->d_model, 0, 0, 0, 0, 0, 1);
    if (!llama)
      strata__tensor_def(&o[k++], "ln_f.bias", 1, c->d_model, 0, 0, 0, 0, 0, 0);
    if (!c->tied) {
      strata__tensor_def(&o[k++], "lm_head.weight", 2, c->vocab, c->d_model, 0, 0, 1, std, 0);
      if (sh && sh->size > 1 && c->vocab % sh->size == 0)
        strata__tensor_shard(&o[k - 1], 0, 1, sh);
    }
    break;
  case STRATA__LAYER_LINEAR:
    /* cut by outputs: the weight's columns and the bias; by inputs: the weight's rows, the bias whole */
    snprintf(n, sizeof n, "fc.%d.weight", L->index);
    strata__tensor_def(&o[k++], n, 2, L->in, L->out, 0, 0, 1, sqrtf(2.0f / (float)L->in), 0);
    if (role)
      strata__tensor_shard(&o[k - 1], role == STRATA__TP_OUTPUTS ? -1 : 0, 1, sh);
    snprintf(n, sizeof n, "fc.%d.bias", L->index);
    strata__tensor_def(&o[k++], n, 1, L->out, 0, 0, 0, 0, 0, 0);
    if (role == STRATA__TP_OUTPUTS)
      strata__tensor_shard(&o[k - 1], -1, 1, sh);
    break;
  case STRATA__LAYER_CONV:
    /* [out channels, in channels, r, r]: cut by outputs along the first dimension, by inputs along the second */
    snprintf(n, sizeof n, "conv.%d.weight", L->index);
    strata__tensor_def(&o[k++], n, 4, L->k, L->c, L->r, L->r, 1, sqrtf(2.0f / (float)(L->c * L->r * L->r)), 0);
    if (role)
      strata__tensor_shard(&o[k - 1], role == STRATA__TP_OUTPUTS ? 0 : 1, 1, sh);
    break;
  case STRATA__LAYER_CLASSIFIER:
    strata__tensor_def(&o[k++], "classifier.weight", 2, L->in, L->out, 0, 0, 1, sqrtf(1.0f / (float)L->in), 0);
    strata__tensor_def(&o[k++], "classifier.bias", 1, L->out, 0, 0, 0, 0, 0, 0);
    break;
  }
  return k;
}

/* ---- sizes (floats) per layer ---- */

struct strata__dims strata__stage_dims(const struct strata__stage *st) {
  const struct strata_model_config *c = &st->model->cfg;
  struct strata__dims d = {.B = st->mb, .R = st->rows, .act = st->act, .rc = st->recompute, .Rs = st->rows,
                           .seqpar = st->seqpar};
  if (st->seqpar) /* (the stage checked that tp divides the rows) */
    d.Rs = st->rows / st->tp.size;
  if (strata__model_text(c)) {
    int64_t parts = st->tp.size > 1 ? st->tp.size : 1;
    d.rms = c->kind == STRATA_MODEL_LLAMA;
    d.kvall = d.rms ? c->kv_heads : c->heads;
    d.kvrep = parts > d.kvall ? parts / d.kvall : 1; /* (a llama: tp a multiple of n_kv_heads, each kv head shared) */
    d.KV = d.kvall * d.kvrep / parts;
    d.Akv = d.KV * (c->d_model / c->heads);
    d.T = c->context;
    d.D = c->d_model;
    d.H = c->heads / parts;
    d.hd = c->d_model / c->heads;
    d.A = d.H * d.hd;
    d.F = c->d_ff / parts;
    d.Vall = c->vocab;
    d.vp = parts > 1 && c->vocab % parts == 0;
    d.V = d.vp ? c->vocab / parts : c->vocab;
    d.voff = d.vp ? d.V * st->tp.rank : 0;
  }
  return d;
}

struct strata__block_saved strata__block_layout(const struct strata__dims *d) {
  struct strata__block_saved s;
  const int a = d->act;
  /* the layernorms' outputs and statistics and the residual xmid: the slice's Rs rows (R but with seqpar) */
  size_t RD = strata__units((size_t)(d->Rs * d->D), a), RA = (size_t)(d->R * d->A), R = (size_t)d->Rs,
         RF = strata__units((size_t)(d->R * d->F), a);
  s.ln1 = 0;
  s.mean1 = s.ln1 + RD;
  s.rstd1 = s.mean1 + R;
  s.qkv = s.rstd1 + R;
  /* the fused attention's output and each query's float32 log-sum-exp; with selective recomputation both live in the
  ** stage's recompute buffer (rcbuf: att | lse), one block's at a time, recomputed from the kept Q, K and V */
  const int sel = d->rc == STRATA_RECOMPUTE_SELECTIVE;
  s.lse = s.qkv + strata__units(3 * RA, a);
  s.att = s.lse + (sel ? 0 : (size_t)(d->B * d->H * d->T));
  s.xmid = s.att + (sel ? 0 : strata__units(RA, a));
  s.ln2 = s.xmid + RD;
  s.mean2 = s.ln2 + RD;
  s.rstd2 = s.mean2 + R;
  s.h = s.rstd2 + R; /* the MLP pre-activation; not its GELU output, which the backward recomputes (layers.c) */
  s.end = s.h + RF;
  return s;
}

struct strata__head_saved strata__head_layout(const struct strata__dims *d) {
  struct strata__head_saved s;
  const size_t R = (size_t)d->R, Rs = (size_t)d->Rs; /* (seqpar: the layernorm on the slice's Rs rows) */
  s.ln = 0;
  s.mean = s.ln + strata__units((size_t)(d->Rs * d->D), d->act);
  s.rstd = s.mean + (d->rms ? 0 : Rs); /* (RMSNorm keeps no mean) */
  s.logits = s.rstd + Rs;
  s.loss = s.logits + strata__units((size_t)(d->R * d->V), d->act);
  s.mx = s.loss + R;
  s.se = s.mx + R;
  s.tl = s.se + R;
  s.end = d->vp ? s.tl + R : s.mx;
  return s;
}

/* Units of a bfloat16 copy of the model's float32 input (images) that the model's first layer keeps for its GEMMs
** (0 in float32, or for a layer that does not start the model). */
static size_t layer_xin(const struct strata__stage *st, const struct strata__layer *L) {
  struct strata__dims d = strata__stage_dims(st);
  if (d.act == STRATA_FLOAT32 || !L->first || L->kind == STRATA__LAYER_EMBED)
    return 0;
  return strata__units((size_t)(L->kind == STRATA__LAYER_CONV ? d.B * L->in : d.R * L->in), d.act);
}

/* Elements of the largest bfloat16 region the layer joins over its tp slices (summed in a float32 copy: the
** stage's join32); 0 without tp or in float32. */
static size_t layer_join(const struct strata__stage *st, const struct strata__layer *L) {
  struct strata__dims d = strata__stage_dims(st);
  if (d.act == STRATA_FLOAT32 || st->tp.size <= 1)
    return 0;
  switch (L->kind) {
  case STRATA__LAYER_EMBED:
  case STRATA__LAYER_LM_HEAD:
    return d.vp ? (size_t)(d.R * d.D) : 0;
  case STRATA__LAYER_BLOCK:
  case STRATA__LAYER_LLAMA_BLOCK:
    return (size_t)(d.R * d.D);
  case STRATA__LAYER_LINEAR:
    return L->tp_role == STRATA__TP_INPUTS ? (size_t)(d.R * L->out)
           : L->tp_role == STRATA__TP_OUTPUTS ? (size_t)(d.R * L->in) : 0;
  case STRATA__LAYER_CONV:
    return L->tp_role == STRATA__TP_INPUTS ? (size_t)(d.B * strata__conv_big(L))
           : L->tp_role == STRATA__TP_OUTPUTS ? (size_t)(d.B * L->in) : 0;
  case STRATA__LAYER_CLASSIFIER:
    return 0;
  }
  return 0;
}

/* The 4-byte units a layer keeps per slot for its backward pass (its output apart). Activations are of the
** stage's type (d.act); statistics, losses and ids are 4 bytes. Only GPT stages run in bfloat16. */
static size_t layer_saved(const struct strata__stage *st, const struct strata__layer *L) {
  struct strata__dims d = strata__stage_dims(st);
  switch (L->kind) {
  case STRATA__LAYER_EMBED:
    return 0;
  case STRATA__LAYER_BLOCK: /* full recomputation: nothing (its input is the previous layer's output) */
    return d.rc == STRATA_RECOMPUTE_FULL ? 0 : strata__block_layout(&d).end;
  case STRATA__LAYER_LLAMA_BLOCK: /* (full recomputation: nothing, as a GPT block) */
    return d.rc == STRATA_RECOMPUTE_FULL ? 0 : strata__llama_layout(&d).end;
  case STRATA__LAYER_LM_HEAD: /* ln | mean | rstd | logits | losses (| row max | sum of exps | target logit) */
    return strata__head_layout(&d).end;
  case STRATA__LAYER_LINEAR: /* pre-activation (| the model's input, converted) */
    return strata__units((size_t)(d.R * L->out), d.act) + layer_xin(st, L);
  case STRATA__LAYER_CONV: /* convolution | (pooled:) ReLU | (4-byte) pooling indices (| the model's input, converted)
                           ** (| a slab's: its halo rows, from the neighbours) */
    return (L->pool > 1 ? 2 : 1) * strata__units((size_t)(d.B * strata__conv_big(L)), d.act) +
           (L->pool > 1 ? (size_t)(d.B * L->out) : 0) + layer_xin(st, L) +
           (L->sl.on ? (size_t)(d.B * L->c * (L->sl.ht + L->sl.hb) * L->w) : 0);
  case STRATA__LAYER_CLASSIFIER: /* logits | (float32) losses (| the model's input, converted) (| gap: the averages) */
    return strata__units((size_t)(d.R * L->out), d.act) + (size_t)d.R + layer_xin(st, L) +
           (L->gap ? strata__units((size_t)(d.R * L->in), d.act) : 0);
  }
  return 0;
}

/* Units a layer's recomputation writes to the stage's recompute buffer: a block's attention output and log-sum-exps
** (selective), or all
** it saves and its output (full); nothing for other layers, which keep what they save. */
static size_t layer_recompute(const struct strata__stage *st, const struct strata__layer *L) {
  struct strata__dims d = strata__stage_dims(st);
  const int llama = L->kind == STRATA__LAYER_LLAMA_BLOCK;
  if ((L->kind != STRATA__LAYER_BLOCK && !llama) || d.rc == STRATA_RECOMPUTE_NONE)
    return 0;
  if (d.rc == STRATA_RECOMPUTE_SELECTIVE)
    return strata__units((size_t)(d.R * d.A), d.act) + (size_t)(d.B * d.H * d.T);
  return (llama ? strata__llama_layout(&d).end : strata__block_layout(&d).end) +
         strata__units((size_t)(d.Rs * d.D), d.act);
}

/* Units of a layer's output. */
static size_t layer_out(const struct strata__stage *st, const struct strata__layer *L) {
  struct strata__dims d = strata__stage_dims(st);
  switch (L->kind) {
  case STRATA__LAYER_EMBED:
  case STRATA__LAYER_BLOCK: /* (seqpar: the slice's rows) */
  case STRATA__LAYER_LLAMA_BLOCK:
    return strata__units((size_t)(d.Rs * d.D), d.act);
  case STRATA__LAYER_LINEAR:
    return strata__units((size_t)(d.R * L->out), d.act);
  case STRATA__LAYER_CONV:
    return strata__units((size_t)(d.B * L->out), d.act);
  case STRATA__LAYER_LM_HEAD:
  case STRATA__LAYER_CLASSIFIER:
    return 0;
  }
  return 0;
}

/*
** Is a stage's output kept apart from its slots (strata__stage.out_apart)? No layer's backward reads its own output
** (the next layer's backward reads it as its input, in the same slot), so the stage's last layer's output is needed
** only until the next stage has it: it goes to a buffer of the trainer's output pool, not one per micro-batch in
** flight. But an embedding alone, folded in a split backward, keeps its output gradient over its output from BI to W.
*/
static int out_apart(const struct strata_model *model, int first, int last, int split_backward, size_t out) {
  return out > 0 && !(split_backward && last - first == 1 && model->layers[first].kind == STRATA__LAYER_EMBED);
}

/* Units of a layer's input. */
static size_t layer_in(const struct strata__stage *st, const struct strata__layer *L) {
  struct strata__dims d = strata__stage_dims(st);
  switch (L->kind) {
  case STRATA__LAYER_EMBED:
    return (size_t)d.R; /* int32 tokens */
  case STRATA__LAYER_BLOCK:
  case STRATA__LAYER_LLAMA_BLOCK:
  case STRATA__LAYER_LM_HEAD:
    return strata__units((size_t)(d.Rs * d.D), d.act);
  case STRATA__LAYER_LINEAR: /* the model's input: float32 images; else the previous layer's activations */
  case STRATA__LAYER_CLASSIFIER: {
    const size_t n = (size_t)(d.R * (L->gap ? L->c * L->h * L->w : L->in));
    return L->first ? n : strata__units(n, d.act);
  }
  case STRATA__LAYER_CONV:
    return L->first ? (size_t)(d.B * L->in) : strata__units((size_t)(d.B * L->in), d.act);
  }
  return 0;
}

/* strata__stage_folds as a split backward would have it: a layer's own figure, whatever stage it starts or ends. */
static int layer_folds(const struct strata__stage *st, int i) {
  const int next = st->first + i + 1;
  if (st->recompute != STRATA_RECOMPUTE_NONE || st->zero2 || st->seqpar || i < 0 || i >= st->last - st->first)
    return 0;
  switch (strata__stage_layer_at(st, i)->kind) {
  case STRATA__LAYER_BLOCK:
  case STRATA__LAYER_LLAMA_BLOCK:
  case STRATA__LAYER_LM_HEAD:
    return 1;
  case STRATA__LAYER_EMBED: /* its output is the model's next layer's input (here, or sent): a block's W does not
                            ** read it */
    return next < st->model->nlayers && (st->model->layers[next].kind == STRATA__LAYER_BLOCK ||
                                         st->model->layers[next].kind == STRATA__LAYER_LLAMA_BLOCK);
  default:
    return 0;
  }
}

int strata__stage_folds(const struct strata__stage *st, int i) { return st->split && layer_folds(st, i); }

/* Units of output-side gradients stage layer i keeps between its input and weight backward parts in a dsave region
** (none where it keeps them in its saved activations: strata__stage_folds). */
static size_t layer_dsave(const struct strata__stage *st, int i) {
  const struct strata__layer *L = strata__stage_layer_at(st, i);
  struct strata__dims d = strata__stage_dims(st);
  if (layer_folds(st, i))
    return 0;
  const size_t RD = strata__units((size_t)(d.R * d.D), d.act);
  switch (L->kind) {
  case STRATA__LAYER_EMBED:
    return RD;
  case STRATA__LAYER_BLOCK: /* dout | dh | dln2 | dxmid | dqkv | dln1 */
    return 4 * RD + strata__units((size_t)(3 * d.R * d.A), d.act) + strata__units((size_t)(d.R * d.F), d.act);
  case STRATA__LAYER_LLAMA_BLOCK: /* dout | dgu | dln2 | dxmid | dqkv | dln1 */
    return 4 * RD + strata__units((size_t)(2 * d.R * d.F), d.act) +
           strata__units((size_t)(d.R * (d.A + 2 * d.Akv)), d.act);
  case STRATA__LAYER_LM_HEAD: /* dlogits | dlnx */
    return strata__units((size_t)(d.R * d.V), d.act) + RD;
  case STRATA__LAYER_LINEAR:
  case STRATA__LAYER_CLASSIFIER:
    return strata__units((size_t)(d.R * L->out), d.act);
  case STRATA__LAYER_CONV:
    return strata__units((size_t)(d.B * strata__conv_big(L)), d.act);
  }
  return 0;
}

/* Units of a layer's temporaries. */
static size_t layer_scratch(const struct strata__stage *st, const struct strata__layer *L) {
  struct strata__dims d = strata__stage_dims(st);
  const size_t RD = strata__units((size_t)(d.R * d.D), d.act);
  switch (L->kind) {
  case STRATA__LAYER_EMBED: /* the positions' rows | (vocabulary-parallel) the tokens of this slice */
    return RD + (d.vp ? (size_t)d.R : 0);
  case STRATA__LAYER_BLOCK: /* dqkv | f | d1 | d2 | d3 | (float32) junk (the fused attention needs no T x T scores)
                            ** (| seqpar: the gathered rows); f holds the GELU output in the forward and, recomputed,
                            ** for the weight part of the backward, then dh */
    return strata__units((size_t)(3 * d.R * d.A), d.act) + strata__units((size_t)(d.R * d.F), d.act) + 3 * RD +
           (size_t)(d.R * d.D) + (d.seqpar ? RD : 0);
  case STRATA__LAYER_LLAMA_BLOCK: /* dqkv | dgu | dh | d1 | d2 | d3 | (float32) junk (| key/value heads replicated
                                  ** over kvrep slices: every head's k_proj and v_proj gradient, float32) (| seqpar:
                                  ** the gathered rows) */
    return strata__units((size_t)(d.R * (d.A + 2 * d.Akv)), d.act) + strata__units((size_t)(2 * d.R * d.F), d.act) +
           strata__units((size_t)(d.R * d.F), d.act) + 3 * RD + (size_t)(d.R * d.D) +
           (d.kvrep > 1 ? (size_t)(2 * d.kvall * d.D * d.Akv) : 0) + (d.seqpar ? RD : 0);
  case STRATA__LAYER_LM_HEAD: /* dlogits | dlnx | (float32) junk (| seqpar: the gathered layernorm output) */
    return strata__units((size_t)(d.R * d.V), d.act) + RD + (size_t)(d.R * d.D) + (d.seqpar ? RD : 0);
  case STRATA__LAYER_LINEAR:
    return strata__units((size_t)(d.R * L->out), d.act);
  case STRATA__LAYER_CONV: { /* the im2col workspace | the gradient through pooling and ReLU */
    struct strata_conv2d g = strata__conv_geometry(L, 1);
    int64_t p, q, ws = 0;
    strata_conv2d_shape(&g, &p, &q, &ws);
    if (L->sl.on) /* | a slab's: the whole convolution's output, the exchange, the convolved rows and gradient, 1.0f */
      return strata__slab_scratch_of(L, d.B, strata__units((size_t)ws, d.act)).end;
    return strata__units((size_t)ws, d.act) + strata__units((size_t)(d.B * strata__conv_big(L)), d.act);
  }
  case STRATA__LAYER_CLASSIFIER: /* dlogits (| gap: the averages' gradient | h x w ones) */
    return strata__units((size_t)(d.R * L->out), d.act) +
           (L->gap ? strata__units((size_t)(d.R * L->in), d.act) + strata__units((size_t)(L->h * L->w), d.act) : 0);
  }
  return 0;
}

/* ---- construction ---- */

/*
** The stage's own copies of its layers: a tensor-parallel stage pairs each
** even-numbered linear layer (convolution) with the next when both are
** here, the first cut by its outputs and the second by its inputs, and
** gives them their slice's sizes. Other layers stay whole.
*/
static void stage_roles(struct strata__stage *st) {
  const int n = st->last - st->first, T = st->tp.size;
  for (int i = 0; i < n; i++)
    st->layers[i] = st->model->layers[st->first + i];
  if (T <= 1)
    return;
  for (int i = 0; i + 1 < n; i++) {
    struct strata__layer *a = &st->layers[i], *b = &st->layers[i + 1];
    if ((a->kind != STRATA__LAYER_LINEAR && a->kind != STRATA__LAYER_CONV) || b->kind != a->kind || a->index % 2 ||
        b->index != a->index + 1)
      continue;
    a->tp_role = STRATA__TP_OUTPUTS;
    b->tp_role = STRATA__TP_INPUTS;
    a->out /= T;
    b->in /= T;
    if (a->kind == STRATA__LAYER_CONV) {
      a->k /= T;
      b->c /= T;
    }
    i++;
  }
}

static int stage_layers(const struct strata__stage *st) { return st->last - st->first; }

static int alloc(int dev, size_t floats, strata_buffer_t *b) {
  return strata_buffer_new(dev, (floats ? floats : 1) * 4, b);
}

int strata__stage_can_cut(const struct strata_model *model, int first, int last) {
  if (strata__model_text(&model->cfg) && model->cfg.tied && (first > 0 || last < model->nlayers))
    return strata__error(STRATA_ERR_UNSUPPORTED,
                         "a model with tied embeddings cannot be cut: the embedding and the output projection must share "
                         "one stage (use an untied model)");
  return STRATA_OK;
}

/* The most floats of one or two adjacent tensors of stage layer i: what one call of its backward writes at most. */
static size_t group_most(const struct strata__stage *st, int i) {
  size_t most = 0;
  for (int t = st->layer_tensor[i]; t < st->layer_tensor[i + 1]; t++) {
    size_t g = st->tensors[t].n + (t + 1 < st->layer_tensor[i + 1] ? st->tensors[t + 1].n : 0);
    most = g > most ? g : most;
  }
  return most;
}

/*
** A stage of layers [first, last) laid out, nothing allocated on a device:
** its tensors, where each layer keeps its activations in a slot, the sizes
** of every buffer. The caller frees it with strata__stage_free.
*/
static int stage_layout(const struct strata_model *model, int first, int last, int dev, int64_t mb,
                        int split_backward, const struct strata__cut *cut, struct strata__stage **out) {
  const struct strata__shard *tp = cut ? &cut->tp : NULL;
  *out = NULL;
  if (!model || first < 0 || last > model->nlayers || first >= last)
    return strata__error(STRATA_ERR_INVALID, "stage: layers [%d, %d) do not lie in a model of %d layers", first, last,
                         model ? model->nlayers : 0);
  if (mb < 1)
    return strata__error(STRATA_ERR_INVALID, "stage: micro-batch of %lld samples", (long long)mb);
  if (tp && tp->size > 1) {
    const struct strata_model_config *c = &model->cfg;
    if (tp->rank < 0 || tp->rank >= tp->size)
      return strata__error(STRATA_ERR_INVALID, "stage: tensor-parallel rank %d of %d", tp->rank, tp->size);
    if (c->kind == STRATA_MODEL_GPT && (c->heads % tp->size || c->d_ff % tp->size))
      return strata__error(STRATA_ERR_SHAPE, "tensor parallelism: tp %d does not divide both the %lld heads and d_ff "
                           "%lld of '%s'", tp->size, (long long)c->heads, (long long)c->d_ff, c->name);
    if (c->kind == STRATA_MODEL_LLAMA)
      TRY(strata__llama_tp_check(c, tp->size, "tensor parallelism", STRATA_ERR_SHAPE));
  }
  struct strata__stage *st = calloc(1, sizeof *st);
  if (!st)
    return strata__error(STRATA_ERR_NOMEM, "out of memory creating a stage");
  st->model = model;
  st->first = first;
  st->last = last;
  st->dev = dev;
  st->mb = mb;
  st->split = split_backward != 0;
  st->tp = tp && tp->size > 1 ? *tp : (struct strata__shard){0, 1};
  st->act = cut ? cut->precision : STRATA_FLOAT32;
  st->recompute = cut ? cut->recompute : STRATA_RECOMPUTE_NONE;
  st->seqpar = cut && cut->seqpar && st->tp.size > 1;
  const int sq = st->seqpar ? strata__seqpar_check(model, st->tp.size, split_backward) : STRATA_OK;
  if (sq) {
    free(st);
    return sq;
  }
  int why = st->recompute < STRATA_RECOMPUTE_NONE || st->recompute > STRATA_RECOMPUTE_FULL ? 1
            : st->recompute && !strata__model_text(&model->cfg)                             ? 2
                                                                                           : 0;
  if (why) {
    const int r = st->recompute;
    free(st);
    if (why == 1)
      return strata__error(STRATA_ERR_INVALID, "stage: recompute mode %d is not one of strata/layout.h", r);
    return strata__error(STRATA_ERR_UNSUPPORTED, "stage: recomputation is for GPT and llama blocks only");
  }
  if (st->act != STRATA_FLOAT32 && st->act != STRATA_BFLOAT16) {
    const int act = st->act;
    free(st);
    return strata__error(STRATA_ERR_INVALID, "stage: precision %d is neither float32 nor bfloat16", act);
  }
  st->zero = cut && cut->zero.size > 1 ? cut->zero : (struct strata__shard){0, 1};
  if (st->zero.rank < 0 || st->zero.rank >= st->zero.size) {
    strata__stage_free(st);
    return strata__error(STRATA_ERR_INVALID, "stage: optimizer shard %d of %d", st->zero.rank, st->zero.size);
  }
  st->rows = strata__model_text(&model->cfg) ? mb * model->cfg.context : mb;
  int n = stage_layers(st);
  st->layers = calloc((size_t)n, sizeof *st->layers);
  if (!st->layers) {
    free(st);
    return strata__error(STRATA_ERR_NOMEM, "out of memory creating a stage");
  }
  stage_roles(st);
  st->sp = cut && cut->sp.size > 1 ? cut->sp : (struct strata__shard){0, 1};
  if (st->sp.size > 1) { /* spatial slabs: whole tensors, float32, whole backwards, one stage of a cnn */
    int rc = st->sp.rank < 0 || st->sp.rank >= st->sp.size
                 ? strata__error(STRATA_ERR_INVALID, "stage: spatial slab %d of %d", st->sp.rank, st->sp.size)
             : st->tp.size > 1 || st->act != STRATA_FLOAT32 || split_backward
                 ? strata__error(STRATA_ERR_UNSUPPORTED, "spatial parallelism runs whole float32 stages with whole "
                                 "backwards: not with tp, bf16 or a split backward")
                 : strata__slab_layers(st);
    if (rc) {
      strata__stage_free(st);
      return rc;
    }
  }
  st->layer_tensor = calloc((size_t)n + 1, sizeof *st->layer_tensor);
  st->saved_off = calloc((size_t)n, sizeof *st->saved_off);
  st->dsave_off = calloc((size_t)n, sizeof *st->dsave_off);
  st->out_off = calloc((size_t)n, sizeof *st->out_off);
  int nt = 0;
  for (int i = 0; i < n; i++)
    nt += layer_tensors(model, &model->layers[first + i], strata__stage_layer_at(st, i)->tp_role, &st->tp, NULL);
  st->tensors = calloc((size_t)(nt ? nt : 1), sizeof *st->tensors);
  if (!st->layer_tensor || !st->saved_off || !st->dsave_off || !st->out_off || !st->tensors) {
    strata__stage_free(st);
    return strata__error(STRATA_ERR_NOMEM, "out of memory creating a stage");
  }
  /* tensors, and where each layer keeps its activations within a slot */
  size_t off = 0;
  st->in_units = layer_in(st, strata__stage_layer_at(st, 0));
  size_t slot = st->in_units;
  for (int i = 0; i < n; i++) {
    const struct strata__layer *L = strata__stage_layer_at(st, i);
    st->layer_tensor[i] = st->ntensors;
    int k = layer_tensors(model, &model->layers[first + i], L->tp_role, &st->tp, st->tensors + st->ntensors);
    for (int j = 0; j < k; j++) {
      st->tensors[st->ntensors + j].off = off;
      off += st->tensors[st->ntensors + j].n;
    }
    st->ntensors += k;
    st->saved_off[i] = slot;
    slot += layer_saved(st, L);
    st->out_apart = i == n - 1 && out_apart(model, first, last, split_backward, layer_out(st, L));
    st->out_off[i] = st->out_apart ? 0 : slot; /* (apart: in the output buffer the executor lends) */
    slot += st->out_apart ? 0 : layer_out(st, L);
    size_t o = layer_out(st, L), in = layer_in(st, L), s = layer_scratch(st, L);
    if (o > st->max_out)
      st->max_out = o;
    if (in > st->max_out)
      st->max_out = in;
    if (s > st->max_scratch)
      st->max_scratch = s;
    if (layer_join(st, L) > st->max_join)
      st->max_join = layer_join(st, L);
    if (layer_recompute(st, L) > st->rc_units)
      st->rc_units = layer_recompute(st, L);
  }
  st->layer_tensor[n] = st->ntensors;
  st->targets_off = slot;
  if (strata__stage_has_loss(st))
    slot += (size_t)st->rows;
  /* the boundary gradients live in a buffer of their own, so that a
  ** micro-batch's activations can go as soon as its backward is done while
  ** its input gradient still waits to be sent */
  st->gout_off = 0;
  st->gin_off = strata__stage_has_loss(st) ? 0 : layer_out(st, strata__stage_layer_at(st, n - 1));
  st->grad_units = st->gin_off + (first > 0 ? st->in_units : 0);
  st->zero2 = st->zero.size > 1 && cut && cut->zero_stage >= 2; /* (before the dsave figures: strata__stage_folds) */
  /* a split backward's gradients kept from BI to W: a region of their own, taken from the device's cache */
  for (int i = 0; i < n; i++) {
    st->dsave_off[i] = st->dsave_units;
    if (split_backward)
      st->dsave_units += layer_dsave(st, i);
  }
  st->slot_units = slot;
  st->nparams = off;
  st->chunk = (off + (size_t)st->zero.size - 1) / (size_t)st->zero.size;
  st->zero3 = st->zero.size > 1 && cut && cut->zero_stage >= 3;
  if (st->zero2) /* the gradient window (layer_mem's params_most); a tied head writes the embedding's first */
    for (int i = 0; i < n; i++) {
      st->gwin = group_most(st, i) > st->gwin ? group_most(st, i) : st->gwin;
      if (i == 0 && model->cfg.tied && first == 0 && last == model->nlayers)
        st->tied_n = st->tensors[st->layer_tensor[1] - 1].off + st->tensors[st->layer_tensor[1] - 1].n;
    }
  *out = st;
  return STRATA_OK;
}

/* ---- the memory model: what a stage allocates, from its layers' figures ---- */

/* Bytes of one allocation of `floats` floats, as alloc() asks the device for. */
static uint64_t alloc_bytes(size_t floats) { return (uint64_t)(floats ? floats : 1) * 4; }

/* Stage layer i's figures as stage_layout lays it out (layer_tensor set). */
static void layer_mem(const struct strata__stage *st, int i, struct strata__layer_mem *m) {
  const struct strata__layer *L = strata__stage_layer_at(st, i);
  memset(m, 0, sizeof *m);
  for (int t = st->layer_tensor[i]; t < st->layer_tensor[i + 1]; t++)
    m->params += st->tensors[t].n;
  m->tensors = (size_t)(st->layer_tensor[i + 1] - st->layer_tensor[i]);
  m->kept = layer_saved(st, L) + layer_out(st, L);
  m->dsave = layer_dsave(st, i);
  m->scratch = layer_scratch(st, L);
  m->in = layer_in(st, L);
  m->out = layer_out(st, L);
  m->join = layer_join(st, L);
  m->recompute = layer_recompute(st, L);
  m->params_most = group_most(st, i);
  m->params_first = m->params;
}

void strata__layer_mem_add(struct strata__layer_mem *sum, const struct strata__layer_mem *m, int first, int last) {
  sum->params += m->params;
  sum->tensors += m->tensors;
  sum->kept += m->kept;
  sum->dsave += m->dsave;
  if (m->scratch > sum->scratch)
    sum->scratch = m->scratch;
  size_t io = m->in > m->out ? m->in : m->out;
  if (io > sum->io)
    sum->io = io;
  if (m->join > sum->join)
    sum->join = m->join;
  if (m->recompute > sum->recompute)
    sum->recompute = m->recompute;
  if (m->params_most > sum->params_most)
    sum->params_most = m->params_most;
  if (first) {
    sum->in = m->in;
    sum->params_first = m->params;
  }
  if (last)
    sum->out = m->out;
}

void strata__stage_bytes_of(const struct strata_model *model, int first, int last, int64_t mb, int split_backward,
                            const struct strata__cut *cut, const struct strata__layer_mem *s,
                            struct strata__stage_bytes *b) {
  const int zero = cut ? cut->zero.size : 1, bf16 = cut && cut->precision == STRATA_BFLOAT16;
  const size_t z = zero > 1 ? (size_t)zero : 1, chunk = (s->params + z - 1) / z;
  const size_t rows = strata__model_text(&model->cfg) ? (size_t)(mb * model->cfg.context) : (size_t)mb;
  const int has_loss = last == model->nlayers;
  memset(b, 0, sizeof *b);
  /* parameters and gradients (zero x chunk: the last shard padded), the two moments (one chunk); ZeRO-2 keeps
  ** instead of the gradients their shard (one chunk), a window of the most one call writes (two adjacent tensors
  ** of a layer) and, in a tied stage, the embedding's gradients; ZeRO-3 the parameters the same way, in a region
  ** of a window and an eighth: the tensors a layer reads and the next ones' gather, prefetched (window.c) */
  b->params = 2 * alloc_bytes(chunk * z) + 2 * alloc_bytes(chunk);
  const int z3 = z > 1 && cut->zero_stage >= 3; /* ZeRO-3: the parameters' shard and a window as the gradients' */
  if (z > 1 && cut->zero_stage >= 2) {
    const int tied = model->cfg.tied && first == 0 && last == model->nlayers;
    b->params = (z3 ? alloc_bytes(chunk) + alloc_bytes(strata__window_floats(s->params_most))
                    : alloc_bytes(chunk * z)) +
                alloc_bytes(s->params_most) + 3 * alloc_bytes(chunk) + (tied ? alloc_bytes(s->params_first) : 0);
  }
  if (z > 1 && cut->zero_stage >= 2) { /* the window's reduce at the communicator's defaults (lib/comm: direct up
                                        ** to 32 KiB or more than 2 members: a window's copy; else one ring chunk) */
    const int tied = model->cfg.tied && first == 0 && last == model->nlayers;
    const size_t n = tied && s->params_first > s->params_most ? s->params_first : s->params_most, few = (n + 7) / 8;
    const size_t e = few > (1u << 18) ? (few < (1u << 22) ? few : (1u << 22)) : (1u << 18);
    b->comm = n * 4 <= (32u << 10) || z > 2 || n <= e ? (uint64_t)n * 4 : (uint64_t)e * 4;
  } else if (z > 1) { /* ZeRO-1's reduce-scatter of the whole gradients (a shard of `chunk` each), at the same
                      ** defaults: direct up to a 32 KiB shard, a copy of every member's input; else the ring, a chunk
                      ** (1 MiB, or an eighth of the shard up to 16 MiB) and two shards of partial sums */
    const size_t es = cut->reduce == STRATA_BFLOAT16 ? 2 : 4, few = (chunk + 7) / 8;
    const size_t e = few > (1u << 20) / es ? (few < (16u << 20) / es ? few : (16u << 20) / es) : (1u << 20) / es;
    b->comm = (uint64_t)(chunk * es <= (32u << 10) ? chunk * z : e + 2 * chunk) * es;
  }
  /* the per-tensor scalars, one layer's scratch, the two backward ping-pong buffers, the embedding's positions */
  b->fixed = b->params + alloc_bytes(s->tensors + 1) + alloc_bytes(s->scratch) + 2 * alloc_bytes(s->io);
  if (first == 0 && model->cfg.kind == STRATA_MODEL_GPT)
    b->fixed += alloc_bytes(rows);
  if (model->cfg.kind == STRATA_MODEL_LLAMA) /* RoPE's inverse frequencies */
    b->fixed += alloc_bytes(strata__rope_floats(&model->cfg));
  /* bfloat16: the parameters' compute copy, and with tp the float32 copy a join sums in */
  if (bf16)
    b->fixed += alloc_bytes(strata__units(z3 ? s->params_most : chunk * z, STRATA_BFLOAT16));
  if (s->join)
    b->fixed += alloc_bytes(s->join);
  if (cut && cut->reduce == STRATA_BFLOAT16) /* the gradients' bf16 copy the replicas reduce */
    b->fixed += alloc_bytes(strata__units(chunk * z, STRATA_BFLOAT16));
  /* recomputation: one block's recomputed activations at a time */
  b->recompute = s->recompute ? alloc_bytes(s->recompute) : 0;
  b->fixed += b->recompute;
  /* a slot: the stage input, every layer's saved activations and output but the stage's own (out_apart), the
  ** targets; a dsave region (split
  ** backward): the gradients a micro-batch's W reads, kept from its BI */
  const int apart = out_apart(model, first, last, split_backward, s->out); /* (its output in a buffer of its own) */
  b->slot = alloc_bytes(s->in + s->kept - (apart ? s->out : 0) + (has_loss ? rows : 0));
  b->send = apart ? alloc_bytes(s->out) : 0;
  b->dsave = split_backward && s->dsave ? alloc_bytes(s->dsave) : 0;
  /* the boundary gradients: of the output (not the last stage), of the input (not the first) */
  size_t grad = (has_loss ? 0 : s->out) + (first > 0 ? s->in : 0);
  b->grad = grad ? alloc_bytes(grad) : 0;
  b->in = (uint64_t)s->in * 4;
  b->out = (uint64_t)s->out * 4;
}

int strata__stage_plan(const struct strata_model *model, int first, int last, int64_t mb, int split_backward,
                       const struct strata__cut *cut, struct strata__stage_bytes *b) {
  struct strata__stage *st = NULL;
  TRY(stage_layout(model, first, last, -1, mb, split_backward, cut, &st));
  struct strata__layer_mem sum = {0}, m;
  const int n = stage_layers(st);
  for (int i = 0; i < n; i++) {
    layer_mem(st, i, &m);
    strata__layer_mem_add(&sum, &m, i == 0, i == n - 1);
  }
  const struct strata__cut whole = {{0, 1}, {0, 1}, STRATA_FLOAT32, STRATA_FLOAT32, STRATA_RECOMPUTE_NONE, 0,
                                    {0, 1}, 0};
  strata__stage_bytes_of(model, first, last, mb, split_backward, cut ? cut : &whole, &sum, b);
  strata__stage_free(st);
  return STRATA_OK;
}

int strata__stage_layer_mems(const struct strata_model *model, int64_t mb, const struct strata__cut *cut,
                             struct strata__layer_mem *m, struct strata__layer_mem *alone, int *partner) {
  struct strata__stage *st = NULL;
  const int L = model->nlayers;
  TRY(stage_layout(model, 0, L, -1, mb, 0, cut, &st));
  int rc = STRATA_OK;
  for (int i = 0; i < L && !rc; i++) {
    layer_mem(st, i, &m[i]);
    alone[i] = m[i];
    const int role = strata__stage_layer_at(st, i)->tp_role;
    if (partner)
      partner[i] = role == STRATA__TP_OUTPUTS ? i + 1 : role == STRATA__TP_INPUTS ? i - 1 : -1;
    if (role == STRATA__TP_WHOLE)
      continue;
    /* a layer of a tp pair (an MLP's or CNN's linear or convolution pair), in a stage without its partner, is whole */
    struct strata__stage *one = NULL;
    rc = stage_layout(model, i, i + 1, -1, mb, 0, cut, &one);
    if (!rc)
      layer_mem(one, 0, &alone[i]);
    strata__stage_free(one);
  }
  strata__stage_free(st);
  return rc;
}

uint64_t strata__stage_need(const struct strata__stage_bytes *b, const struct strata__stage_place *p, uint64_t *act,
                            uint64_t *bufs) {
  const uint64_t k = (uint64_t)(p->inflight > 1 ? p->inflight : 1);
  const uint64_t a = k * b->slot;
  /* boundary gradients may outlive the activations until the previous stage took them */
  const uint64_t g = (k + !p->first) * b->grad;
  uint64_t recv = 0;
  if (!p->first && p->prev_remote) /* sent here, not yet consumed */
    recv += (uint64_t)(p->prev_inflight > 1 ? p->prev_inflight : 1) * b->in;
  if (!p->last && p->next_remote) /* gradients sent back here */
    recv += k * b->out;
  /* the output buffers: the stage's outputs until the next stage has them (out_apart) */
  recv += (uint64_t)(p->outs > 0 ? p->outs : 0) * b->send;
  /* a split backward's dsave regions: as many as the schedule keeps a BI done and its W pending */
  const uint64_t ds = (uint64_t)(p->pending > 0 ? p->pending : 0) * b->dsave;
  if (act)
    *act += a + ds + b->recompute;
  if (bufs)
    *bufs += b->fixed - b->params - b->recompute + g + recv + b->comm;
  return b->fixed + a + ds + g + recv + b->comm;
}

int strata__stage_shell(const struct strata_model *model, int first, int last, int64_t mb, int split_backward,
                        const struct strata__cut *cut, struct strata__stage **out) {
  TRY(strata__stage_can_cut(model, first, last));
  return stage_layout(model, first, last, -1, mb, split_backward, cut, out);
}

int strata__stage_new(const struct strata_model *model, int first, int last, int dev, int64_t mb, uint64_t seed,
                      int split_backward, const struct strata__cut *cut, struct strata__stage **out) {
  struct strata__stage *st = NULL;
  TRY(strata__stage_can_cut(model, first, last));
  TRY(stage_layout(model, first, last, dev, mb, split_backward, cut, &st));
  size_t off = st->nparams, padded = st->chunk * (size_t)st->zero.size;
  int rc;
  rc = strata_queue_new(dev, &st->q);
  if (!rc)
    rc = alloc(dev, st->zero3 ? strata__window_floats(st->gwin) : padded, &st->params); /* ZeRO-3: the window */
  if (!rc && st->zero3)
    rc = alloc(dev, st->chunk, &st->pshard);
  if (!rc)
    rc = alloc(dev, st->zero2 ? st->gwin : padded, &st->grads);
  if (!rc && st->zero2)
    rc = alloc(dev, st->chunk, &st->gshard);
  if (!rc && st->tied_n)
    rc = alloc(dev, st->tied_n, &st->gtied);
  if (!rc)
    rc = alloc(dev, st->chunk, &st->m);
  if (!rc)
    rc = alloc(dev, st->chunk, &st->v);
  if (!rc)
    rc = alloc(dev, (size_t)st->ntensors + 1, &st->scalar);
  if (!rc)
    rc = alloc(dev, st->max_scratch, &st->scratch);
  for (int i = 0; i < 2 && !rc; i++)
    rc = alloc(dev, st->max_out, &st->gbuf[i]);
  if (!rc && first == 0 && model->cfg.kind == STRATA_MODEL_GPT)
    rc = alloc(dev, (size_t)st->rows, &st->positions);
  if (!rc && model->cfg.kind == STRATA_MODEL_LLAMA)
    rc = strata__rope_table(st);
  if (!rc && st->act == STRATA_BFLOAT16)
    rc = alloc(dev, strata__units(st->zero3 ? st->gwin : padded, STRATA_BFLOAT16), &st->params16);
  if (!rc && st->max_join)
    rc = alloc(dev, st->max_join, &st->join32);
  if (!rc && cut && cut->reduce == STRATA_BFLOAT16)
    rc = alloc(dev, strata__units(padded, STRATA_BFLOAT16), &st->grads16);
  if (!rc && st->rc_units)
    rc = alloc(dev, st->rc_units, &st->rcbuf);
  st->params16_stale = 1;
  if (rc) {
    strata__stage_free(st);
    return rc;
  }
  /* initial values, computed on the host tensor by tensor */
  float *host = malloc((off ? off : 1) * sizeof *host);
  if (!host) {
    strata__stage_free(st);
    return strata__error(STRATA_ERR_NOMEM, "out of host memory initialising %zu parameters", off);
  }
  size_t most = 0; /* the largest split tensor, made whole on the host and cut */
  for (int t = 0; t < st->ntensors; t++)
    if (st->tensors[t].split && st->tensors[t].full_n > most)
      most = st->tensors[t].full_n;
  float *whole = most ? malloc(most * sizeof *whole) : NULL;
  if (most && !whole) {
    free(host);
    strata__stage_free(st);
    return strata__error(STRATA_ERR_NOMEM, "out of host memory initialising %zu parameters", most);
  }
  for (int t = 0; t < st->ntensors; t++) {
    const struct strata__tensor *x = &st->tensors[t];
    if (!x->split) {
      strata__tensor_init(x, seed, host + x->off);
      continue;
    }
    strata__tensor_init(x, seed, whole);
    strata__tensor_cut(x, whole, host + x->off, 0);
  }
  free(whole);
  if (st->zero3) { /* this replica's shard only; the padding of the last shard is never read */
    const size_t base = (size_t)st->zero.rank * st->chunk;
    const size_t n = base < off ? (off - base < st->chunk ? off - base : st->chunk) : 0;
    rc = strata_fill(st->q, AT(st->pshard, 0), 0, (int64_t)(st->chunk ? st->chunk : 1));
    if (!rc) /* the window holds nothing yet */
      rc = strata_fill(st->q, AT(st->params, 0), 0, (int64_t)(st->gwin ? strata__window_floats(st->gwin) : 1));
    if (!rc && n)
      rc = strata_buffer_upload(st->q, st->pshard, 0, host + base, n * 4);
  } else {
    rc = strata_buffer_upload(st->q, st->params, 0, host, off * 4);
    if (!rc && padded > off) /* the padding of the last shard: reduced and gathered, never read */
      rc = strata_fill(st->q, AT(st->params, off), 0, (int64_t)(padded - off));
  }
  free(host);
  if (!rc)
    rc = strata_fill(st->q, AT(st->m, 0), 0, (int64_t)(st->chunk ? st->chunk : 1));
  if (!rc)
    rc = strata_fill(st->q, AT(st->v, 0), 0, (int64_t)(st->chunk ? st->chunk : 1));
  if (!rc)
    rc = strata__stage_zero_grads(st);
  if (!rc && st->positions) {
    int32_t *pos = malloc((size_t)st->rows * sizeof *pos);
    if (!pos)
      rc = strata__error(STRATA_ERR_NOMEM, "out of host memory");
    for (int64_t r = 0; !rc && r < st->rows; r++)
      pos[r] = (int32_t)(r % model->cfg.context);
    if (!rc)
      rc = strata_buffer_upload(st->q, st->positions, 0, pos, (size_t)st->rows * 4);
    free(pos);
  }
  if (!rc && st->params16) { /* the compute copy now: a device that cannot hold bfloat16 says so at creation */
    rc = strata_convert(st->q, AT(st->params, 0), strata_mem_typed(st->params16, 0, STRATA_BFLOAT16),
                        (int64_t)(st->zero3 ? (st->gwin ? st->gwin : 1) : padded ? padded : 1));
    if (rc) {
      char *why = strdup(strata_last_error());
      struct strata_device_props p;
      if (strata_device_props(dev, &p))
        snprintf(p.backend, sizeof p.backend, "?");
      rc = strata__error(rc, "bf16 precision: device %d (%s backend) cannot run it (%s); train on host devices or in "
                         "fp32", dev, p.backend, why ? why : "out of host memory");
      free(why);
    }
    st->params16_stale = 0;
  }
  if (!rc)
    rc = strata_queue_finish(st->q);
  if (rc) {
    strata__stage_free(st);
    return rc;
  }
  *out = st;
  return STRATA_OK;
}

void strata__stage_free(struct strata__stage *st) {
  if (!st)
    return;
  if (st->q)
    strata_queue_finish(st->q);
  for (int s = 0; s < st->nslots; s++) {
    strata_buffer_free(st->slots[s].buf);
    strata_buffer_free(st->slots[s].grad);
    strata_buffer_free(st->slots[s].dsave);
  }
  free(st->slots);
  strata__stage_window_free(st); /* (its gathers in flight write params) */
  strata_buffer_free(st->params);
  strata_buffer_free(st->params16);
  strata_buffer_free(st->join32);
  strata_buffer_free(st->grads16);
  strata_buffer_free(st->rcbuf);
  strata_buffer_free(st->grads);
  strata_buffer_free(st->gshard);
  strata_buffer_free(st->gtied);
  strata_buffer_free(st->pshard);
  strata_buffer_free(st->m);
  strata_buffer_free(st->v);
  strata_buffer_free(st->scalar);
  strata_buffer_free(st->scratch);
  strata_buffer_free(st->gbuf[0]);
  strata_buffer_free(st->gbuf[1]);
  strata_buffer_free(st->positions);
  strata_buffer_free(st->rope);
  strata_queue_free(st->q);
  free(st->tensors);
  free(st->layer_tensor);
  free(st->gfirst);
  free(st->saved_off);
  free(st->dsave_off);
  free(st->out_off);
  free(st->layers);
  free(st);
}

/* Make room for slot s in the table. */
static int slots_grow(struct strata__stage *st, int s) {
  if (s < st->nslots)
    return STRATA_OK;
  int n = st->nslots ? st->nslots : 4;
  while (n <= s)
    n *= 2;
  struct strata__slot_mem *t = realloc(st->slots, (size_t)n * sizeof *t);
  if (!t)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory for %d micro-batch slots", n);
  memset(t + st->nslots, 0, (size_t)(n - st->nslots) * sizeof *t);
  st->slots = t;
  st->nslots = n;
  return STRATA_OK;
}

int strata__stage_slot_take(struct strata__stage *st, int *slot) {
  int s = 0;
  while (s < st->nslots && (st->slots[s].taken || st->slots[s].buf || st->slots[s].grad))
    s++;
  TRY(slots_grow(st, s));
  st->slots[s].taken = 1;
  *slot = s;
  return STRATA_OK;
}

/* A taken slot whose halves are both released is free again. */
static void slot_settle(struct strata__stage *st, int s) {
  if (!st->slots[s].buf && !st->slots[s].grad)
    st->slots[s].taken = 0;
}

int strata__stage_acquire(struct strata__stage *st, int s) {
  if (s < 0)
    return strata__error(STRATA_ERR_RANGE, "stage: slot %d out of range", s);
  TRY(slots_grow(st, s));
  /* for the stage's queue: a block another slot released behind queued work is used in the queue's order */
  if (!st->slots[s].buf)
    TRY(strata_buffer_new_on(st->q, (st->slot_units ? st->slot_units : 1) * 4, &st->slots[s].buf));
  if (!st->slots[s].grad && st->grad_units) {
    int rc = strata_buffer_new_on(st->q, st->grad_units * 4, &st->slots[s].grad);
    if (rc) {
      strata_buffer_free(st->slots[s].buf);
      st->slots[s].buf = NULL;
      slot_settle(st, s);
      return rc;
    }
  }
  return STRATA_OK;
}

void strata__stage_release_activations(struct strata__stage *st, int s) {
  if (s < 0 || s >= st->nslots || !st->slots[s].buf)
    return;
  strata_buffer_free_on(st->q, st->slots[s].buf); /* queued work may still read it: freed behind it */
  st->slots[s].buf = NULL;
  st->slots[s].out = NULL; /* (the executor's: back in its pool once sent) */
  st->slots[s].armed = 0;
  strata__stage_dsave_give(st, s); /* (a step that failed between a BI and its W) */
  slot_settle(st, s);
}

int strata__stage_dsave_take(struct strata__stage *st, int s) {
  if (!st->split)
    return STRATA_OK;
  if (st->slots[s].bi)
    return strata__error(STRATA_ERR_STATE, "stage: slot %d ran its input pass (BI) twice before its weight pass (W)",
                         s);
  st->slots[s].bi = 1;
  if (!st->dsave_units)
    return STRATA_OK;
  const size_t units = st->dsave_alloc > st->dsave_units ? st->dsave_alloc : st->dsave_units;
  return strata_buffer_new_on(st->q, units * 4, &st->slots[s].dsave);
}

void strata__stage_dsave_give(struct strata__stage *st, int s) {
  st->slots[s].bi = 0;
  if (!st->slots[s].dsave)
    return;
  strata_buffer_free_on(st->q, st->slots[s].dsave); /* the W that read it is queued: freed behind it */
  st->slots[s].dsave = NULL;
}

void strata__stage_release_gradients(struct strata__stage *st, int s) {
  if (s < 0 || s >= st->nslots || !st->slots[s].grad)
    return;
  strata_buffer_free_on(st->q, st->slots[s].grad);
  st->slots[s].grad = NULL;
  slot_settle(st, s);
}

void strata__stage_release(struct strata__stage *st, int s) {
  strata__stage_release_activations(st, s);
  strata__stage_release_gradients(st, s);
}

strata_mem_t strata__stage_input(struct strata__stage *st, int s) {
  /* the model's input (token ids, float32 images: 4 bytes each), else activations of the stage's type */
  return strata__at(st->slots[s].buf, 0, 0, st->first == 0 ? STRATA_FLOAT32 : st->act);
}
strata_mem_t strata__stage_targets(struct strata__stage *st, int s) { return AT(st->slots[s].buf, st->targets_off); }
strata_mem_t strata__stage_output(struct strata__stage *st, int s) {
  return strata__at(st->out_apart ? st->slots[s].out : st->slots[s].buf, st->out_off[stage_layers(st) - 1], 0,
                    st->act);
}
size_t strata__stage_in_units(const struct strata__stage *st) { return st->in_units; }
size_t strata__stage_out_units(const struct strata__stage *st) {
  return layer_out(st, strata__stage_layer_at(st, stage_layers(st) - 1));
}
strata_mem_t strata__stage_grad_output(struct strata__stage *st, int s) {
  return strata__at(st->slots[s].grad, st->gout_off, 0, st->act);
}
strata_mem_t strata__stage_grad_input(struct strata__stage *st, int s) {
  return strata__at(st->slots[s].grad, st->gin_off, 0, st->act);
}

void strata__stage_layer_range(const struct strata__stage *st, int a, int b, size_t *lo, size_t *hi) {
  int t0 = st->layer_tensor[a], t1 = st->layer_tensor[b];
  *lo = t0 < st->ntensors ? st->tensors[t0].off : st->nparams;
  *hi = t1 < st->ntensors ? st->tensors[t1].off : st->nparams;
  if (t1 == t0)
    *hi = *lo;
}

int strata__stage_layer_count(const struct strata__stage *st) { return stage_layers(st); }
