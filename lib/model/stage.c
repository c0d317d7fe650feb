/* SPDX-License-Identifier: MIT */
/* stage.c — forward, backward and update of a contiguous run of layers on one device, for GPT, MLP and CNN layers. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/stage.h"
#include "core/core.h"

#define AT(b, o) strata_mem((b), (size_t)(o))

/* ---- parameters ---- */

static void tensor_def(struct strata__tensor *t, const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2,
                       int64_t d3, int decay, float std, float cst) {
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  t->ndim = ndim;
  int64_t dims[4] = {d0, d1, d2, d3};
  t->n = 1;
  for (int i = 0; i < ndim; i++) {
    t->shape[i] = dims[i];
    t->n *= (size_t)dims[i];
  }
  t->decay = decay;
  t->init_std = std;
  t->init_const = cst;
  memcpy(t->full, t->shape, sizeof t->full);
  t->full_n = t->n;
  t->split = STRATA__SPLIT_NONE;
  t->groups = 1;
  t->part = 0;
  t->parts = 1;
}

/* Make `t`, defined whole, the slice sh->rank of sh->size of dimension
** `dim` (-1: its last), cut in `groups` equal groups. */
static void tensor_shard(struct strata__tensor *t, int dim, int groups, const struct strata__shard *sh) {
  if (!sh || sh->size <= 1)
    return;
  t->dim = dim < 0 ? t->ndim - 1 : dim;
  t->split = t->dim == 0 ? STRATA__SPLIT_ROWS : STRATA__SPLIT_COLS;
  t->groups = groups;
  t->part = sh->rank;
  t->parts = sh->size;
  t->shape[t->dim] /= sh->size;
  t->n = t->full_n / (size_t)sh->size;
}

void strata__tensor_cut(const struct strata__tensor *t, float *full, float *local, int gather) {
  if (t->split == STRATA__SPLIT_NONE) {
    if (gather)
      memcpy(full, local, t->n * sizeof *full);
    else
      memcpy(local, full, t->n * sizeof *full);
    return;
  }
  /* the dimensions before `dim` make rows; from `dim` on, each row is `groups` groups of gw, the slice lw of each */
  size_t cols = 1;
  for (int d = t->dim; d < t->ndim; d++)
    cols *= (size_t)t->full[d];
  size_t rows = t->full_n / cols, gw = cols / (size_t)t->groups, lw = gw / (size_t)t->parts;
  for (size_t r = 0; r < rows; r++)
    for (int g = 0; g < t->groups; g++) {
      float *f = full + r * cols + (size_t)g * gw + (size_t)t->part * lw;
      float *l = local + r * lw * (size_t)t->groups + (size_t)g * lw;
      if (gather)
        memcpy(f, l, lw * sizeof *full);
      else
        memcpy(l, f, lw * sizeof *full);
    }
}

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
  switch (L->kind) {
  case STRATA__LAYER_EMBED:
    /* vocabulary-parallel (tp dividing the vocabulary): each slice holds V / tp rows */
    tensor_def(&o[k++], "wte.weight", 2, c->vocab, c->d_model, 0, 0, 1, std, 0);
    if (sh && sh->size > 1 && c->vocab % sh->size == 0)
      tensor_shard(&o[k - 1], 0, 1, sh);
    tensor_def(&o[k++], "wpe.weight", 2, c->context, c->d_model, 0, 0, 1, std, 0);
    break;
  case STRATA__LAYER_BLOCK: {
    int64_t D = c->d_model, F = c->d_ff;
    int i = L->index;
#define P(suffix, ...)                                                                                                 \
  do {                                                                                                                 \
    snprintf(n, sizeof n, "h.%d.%s", i, suffix);                                                                       \
    tensor_def(&o[k++], n, __VA_ARGS__);                                                                               \
  } while (0)
    P("ln_1.weight", 1, D, 0, 0, 0, 0, 0, 1);
    P("ln_1.bias", 1, D, 0, 0, 0, 0, 0, 0);
    /* sharded: the Q, K and V columns of a head group, c_proj's matching
    ** rows; c_fc's columns, the MLP c_proj's rows; row-split biases whole */
    P("attn.c_attn.weight", 2, D, 3 * D, 0, 0, 1, std, 0);
    tensor_shard(&o[k - 1], -1, 3, sh);
    P("attn.c_attn.bias", 1, 3 * D, 0, 0, 0, 0, 0, 0);
    tensor_shard(&o[k - 1], -1, 3, sh);
    P("attn.c_proj.weight", 2, D, D, 0, 0, 1, proj, 0);
    tensor_shard(&o[k - 1], 0, 1, sh);
    P("attn.c_proj.bias", 1, D, 0, 0, 0, 0, 0, 0);
    P("ln_2.weight", 1, D, 0, 0, 0, 0, 0, 1);
    P("ln_2.bias", 1, D, 0, 0, 0, 0, 0, 0);
    P("mlp.c_fc.weight", 2, D, F, 0, 0, 1, std, 0);
    tensor_shard(&o[k - 1], -1, 1, sh);
    P("mlp.c_fc.bias", 1, F, 0, 0, 0, 0, 0, 0);
    tensor_shard(&o[k - 1], -1, 1, sh);
    P("mlp.c_proj.weight", 2, F, D, 0, 0, 1, proj, 0);
    tensor_shard(&o[k - 1], 0, 1, sh);
    P("mlp.c_proj.bias", 1, D, 0, 0, 0, 0, 0, 0);
#undef P
    break;
  }
  case STRATA__LAYER_LM_HEAD:
    tensor_def(&o[k++], "ln_f.weight", 1, c->d_model, 0, 0, 0, 0, 0, 1);
    tensor_def(&o[k++], "ln_f.bias", 1, c->d_model, 0, 0, 0, 0, 0, 0);
    if (!c->tied) {
      tensor_def(&o[k++], "lm_head.weight", 2, c->vocab, c->d_model, 0, 0, 1, std, 0);
      if (sh && sh->size > 1 && c->vocab % sh->size == 0)
        tensor_shard(&o[k - 1], 0, 1, sh);
    }
    break;
  case STRATA__LAYER_LINEAR:
    /* cut by outputs: the weight's columns and the bias; by inputs: the weight's rows, the bias whole */
    snprintf(n, sizeof n, "fc.%d.weight", L->index);
    tensor_def(&o[k++], n, 2, L->in, L->out, 0, 0, 1, sqrtf(2.0f / (float)L->in), 0);
    if (role)
      tensor_shard(&o[k - 1], role == STRATA__TP_OUTPUTS ? -1 : 0, 1, sh);
    snprintf(n, sizeof n, "fc.%d.bias", L->index);
    tensor_def(&o[k++], n, 1, L->out, 0, 0, 0, 0, 0, 0);
    if (role == STRATA__TP_OUTPUTS)
      tensor_shard(&o[k - 1], -1, 1, sh);
    break;
  case STRATA__LAYER_CONV:
    /* [out channels, in channels, 3, 3]: cut by outputs along the first dimension, by inputs along the second */
    snprintf(n, sizeof n, "conv.%d.weight", L->index);
    tensor_def(&o[k++], n, 4, L->k, L->c, 3, 3, 1, sqrtf(2.0f / (float)(L->c * 9)), 0);
    if (role)
      tensor_shard(&o[k - 1], role == STRATA__TP_OUTPUTS ? 0 : 1, 1, sh);
    break;
  case STRATA__LAYER_CLASSIFIER:
    tensor_def(&o[k++], "classifier.weight", 2, L->in, L->out, 0, 0, 1, sqrtf(1.0f / (float)L->in), 0);
    tensor_def(&o[k++], "classifier.bias", 1, L->out, 0, 0, 0, 0, 0, 0);
    break;
  }
  return k;
}

/* splitmix64: seeds each tensor's generator from (seed, name). */
static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static uint64_t name_seed(uint64_t seed, const char *name) {
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
  for (const unsigned char *p = (const unsigned char *)name; *p; p++)
    h = (h ^ *p) * 0x100000001b3ull;
  return mix64(h ^ mix64(seed));
}

/* Fill `x` with the whole tensor's initial values (t->full_n floats):
** normal(0, std) by Box-Muller, or a constant. A slice is cut from them,
** so a sharded run starts from the same values as a whole one. */
static void tensor_init(const struct strata__tensor *t, uint64_t seed, float *x) {
  if (t->init_std == 0) {
    for (size_t i = 0; i < t->full_n; i++)
      x[i] = t->init_const;
    return;
  }
  uint64_t s = name_seed(seed, t->name);
  for (size_t i = 0; i < t->full_n; i += 2) {
    s = mix64(s);
    double u1 = ((double)(s >> 11) + 0.5) / 9007199254740992.0;
    s = mix64(s);
    double u2 = (double)(s >> 11) / 9007199254740992.0;
    double r = sqrt(-2.0 * log(u1));
    x[i] = (float)(t->init_std * r * cos(2 * M_PI * u2));
    if (i + 1 < t->full_n)
      x[i + 1] = (float)(t->init_std * r * sin(2 * M_PI * u2));
  }
}

/* ---- sizes (floats) per layer ---- */

/* A block's sizes as this stage runs it: H heads of hd (A = H hd wide) and
** F hidden units are the stage's slice; D, the residual width, is whole. */
struct dims {
  int64_t B, T, D, H, hd, A, F, V, R;
  int64_t Vall, voff;       /* vocabulary-parallel: the whole vocabulary, and where this slice's V start */
  int vp;                   /* the embedding and head are cut by vocabulary */
};

static struct dims dims_of(const struct strata__stage *st) {
  const struct strata_model_config *c = &st->model->cfg;
  struct dims d = {.B = st->mb, .R = st->rows};
  if (c->kind == STRATA_MODEL_GPT) {
    int64_t parts = st->tp.size > 1 ? st->tp.size : 1;
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

/* Offsets of a block's saved activations (floats from the layer's start in a slot). */
struct block_saved {
  size_t ln1, mean1, rstd1, qkv, p, att, xmid, ln2, mean2, rstd2, h, g, end;
};

static struct block_saved block_layout(const struct dims *d) {
  struct block_saved s;
  size_t RD = (size_t)(d->R * d->D), RA = (size_t)(d->R * d->A), R = (size_t)d->R;
  s.ln1 = 0;
  s.mean1 = s.ln1 + RD;
  s.rstd1 = s.mean1 + R;
  s.qkv = s.rstd1 + R;
  s.p = s.qkv + 3 * RA;
  s.att = s.p + (size_t)(d->B * d->H * d->T * d->T);
  s.xmid = s.att + RA;
  s.ln2 = s.xmid + RD;
  s.mean2 = s.ln2 + RD;
  s.rstd2 = s.mean2 + R;
  s.h = s.rstd2 + R;
  s.g = s.h + (size_t)(d->R * d->F);
  s.end = s.g + (size_t)(d->R * d->F);
  return s;
}

/* Floats a layer keeps per slot for its backward pass, and its output. */
static size_t saved_floats(const struct strata__stage *st, const struct strata__layer *L) {
  struct dims d = dims_of(st);
  switch (L->kind) {
  case STRATA__LAYER_EMBED:
    return 0;
  case STRATA__LAYER_BLOCK:
    return block_layout(&d).end;
  case STRATA__LAYER_LM_HEAD: /* ln | mean | rstd | logits | losses (| row max | sum of exps | target logit) */
    return (size_t)(d.R * d.D + 3 * d.R + d.R * d.V + (d.vp ? 3 * d.R : 0));
  case STRATA__LAYER_LINEAR:
    return (size_t)(d.R * L->out);
  case STRATA__LAYER_CONV:
    return (size_t)(d.B * L->k * L->h * L->w * 2 + d.B * L->out / 1);
  case STRATA__LAYER_CLASSIFIER:
    return (size_t)(d.R * L->out + d.R);
  }
  return 0;
}

static size_t out_floats(const struct strata__stage *st, const struct strata__layer *L) {
  struct dims d = dims_of(st);
  switch (L->kind) {
  case STRATA__LAYER_EMBED:
  case STRATA__LAYER_BLOCK:
    return (size_t)(d.R * d.D);
  case STRATA__LAYER_LINEAR:
    return (size_t)(d.R * L->out);
  case STRATA__LAYER_CONV:
    return (size_t)(d.B * L->out);
  case STRATA__LAYER_LM_HEAD:
  case STRATA__LAYER_CLASSIFIER:
    return 0;
  }
  return 0;
}

/* Features of a layer's input per row. */
static size_t in_floats(const struct strata__stage *st, const struct strata__layer *L) {
  struct dims d = dims_of(st);
  switch (L->kind) {
  case STRATA__LAYER_EMBED:
    return (size_t)d.R; /* int32 tokens */
  case STRATA__LAYER_BLOCK:
  case STRATA__LAYER_LM_HEAD:
    return (size_t)(d.R * d.D);
  case STRATA__LAYER_LINEAR:
  case STRATA__LAYER_CLASSIFIER:
    return (size_t)(d.R * L->in);
  case STRATA__LAYER_CONV:
    return (size_t)(d.B * L->in);
  }
  return 0;
}

/* Floats of output-side gradients a layer keeps between its input and weight backward parts. */
static size_t dsave_floats(const struct strata__stage *st, const struct strata__layer *L) {
  struct dims d = dims_of(st);
  switch (L->kind) {
  case STRATA__LAYER_EMBED:
    return (size_t)(d.R * d.D);
  case STRATA__LAYER_BLOCK:
    return (size_t)(4 * d.R * d.D + 3 * d.R * d.A + d.R * d.F);
  case STRATA__LAYER_LM_HEAD:
    return (size_t)(d.R * d.V + d.R * d.D);
  case STRATA__LAYER_LINEAR:
  case STRATA__LAYER_CLASSIFIER:
    return (size_t)(d.R * L->out);
  case STRATA__LAYER_CONV:
    return (size_t)(d.B * L->k * L->h * L->w);
  }
  return 0;
}

static size_t scratch_floats(const struct strata__stage *st, const struct strata__layer *L) {
  struct dims d = dims_of(st);
  switch (L->kind) {
  case STRATA__LAYER_EMBED: /* the positions' rows | (vocabulary-parallel) the tokens of this slice */
    return (size_t)(d.R * d.D + (d.vp ? d.R : 0));
  case STRATA__LAYER_BLOCK:
    return (size_t)(2 * d.B * d.H * d.T * d.T + 3 * d.R * d.A + d.R * d.F + 4 * d.R * d.D);
  case STRATA__LAYER_LM_HEAD:
    return (size_t)(d.R * d.V + 2 * d.R * d.D);
  case STRATA__LAYER_LINEAR:
    return (size_t)(d.R * L->out);
  case STRATA__LAYER_CONV: {
    struct strata_conv2d g = {.n = 1, .c = L->c, .h = L->h, .w = L->w, .k = L->k, .r = 3, .s = 3, .stride = 1,
                              .pad = 1};
    int64_t p, q, ws = 0;
    strata_conv2d_shape(&g, &p, &q, &ws);
    return (size_t)(ws + d.B * L->k * L->h * L->w);
  }
  case STRATA__LAYER_CLASSIFIER:
    return (size_t)(d.R * L->out);
  }
  return 0;
}

/* ---- construction ---- */

static const struct strata__layer *layer_at(const struct strata__stage *st, int i) { return &st->layers[i]; }

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

static int has_loss(const struct strata__stage *st) { return st->last == st->model->nlayers; }

static int alloc(int dev, size_t floats, strata_buffer_t *b) {
  return strata_buffer_new(dev, (floats ? floats : 1) * 4, b);
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
  }
  if (model->cfg.kind == STRATA_MODEL_GPT && model->cfg.tied && (first > 0 || last < model->nlayers))
    return strata__error(STRATA_ERR_UNSUPPORTED,
                         "a model with tied embeddings cannot be cut: the embedding and the output projection must share "
                         "one stage (use an untied model)");
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
  st->zero = cut && cut->zero.size > 1 ? cut->zero : (struct strata__shard){0, 1};
  if (st->zero.rank < 0 || st->zero.rank >= st->zero.size) {
    strata__stage_free(st);
    return strata__error(STRATA_ERR_INVALID, "stage: optimizer shard %d of %d", st->zero.rank, st->zero.size);
  }
  st->rows = model->cfg.kind == STRATA_MODEL_GPT ? mb * model->cfg.context : mb;
  int n = stage_layers(st);
  st->layers = calloc((size_t)n, sizeof *st->layers);
  if (!st->layers) {
    free(st);
    return strata__error(STRATA_ERR_NOMEM, "out of memory creating a stage");
  }
  stage_roles(st);
  st->layer_tensor = calloc((size_t)n + 1, sizeof *st->layer_tensor);
  st->saved_off = calloc((size_t)n, sizeof *st->saved_off);
  st->dsave_off = calloc((size_t)n, sizeof *st->dsave_off);
  st->out_off = calloc((size_t)n, sizeof *st->out_off);
  int nt = 0;
  for (int i = 0; i < n; i++)
    nt += layer_tensors(model, &model->layers[first + i], layer_at(st, i)->tp_role, &st->tp, NULL);
  st->tensors = calloc((size_t)(nt ? nt : 1), sizeof *st->tensors);
  if (!st->layer_tensor || !st->saved_off || !st->dsave_off || !st->out_off || !st->tensors) {
    strata__stage_free(st);
    return strata__error(STRATA_ERR_NOMEM, "out of memory creating a stage");
  }
  /* tensors, and where each layer keeps its activations within a slot */
  size_t off = 0;
  st->in_floats = in_floats(st, layer_at(st, 0));
  size_t slot = st->in_floats;
  for (int i = 0; i < n; i++) {
    const struct strata__layer *L = layer_at(st, i);
    st->layer_tensor[i] = st->ntensors;
    int k = layer_tensors(model, &model->layers[first + i], L->tp_role, &st->tp, st->tensors + st->ntensors);
    for (int j = 0; j < k; j++) {
      st->tensors[st->ntensors + j].off = off;
      off += st->tensors[st->ntensors + j].n;
    }
    st->ntensors += k;
    st->saved_off[i] = slot;
    slot += saved_floats(st, L);
    st->out_off[i] = slot;
    slot += out_floats(st, L);
    size_t o = out_floats(st, L), in = in_floats(st, L), s = scratch_floats(st, L);
    if (o > st->max_out)
      st->max_out = o;
    if (in > st->max_out)
      st->max_out = in;
    if (s > st->max_scratch)
      st->max_scratch = s;
  }
  st->layer_tensor[n] = st->ntensors;
  st->targets_off = slot;
  if (has_loss(st))
    slot += (size_t)st->rows;
  /* the boundary gradients live in a buffer of their own, so that a
  ** micro-batch's activations can go as soon as its backward is done while
  ** its input gradient still waits to be sent */
  st->gout_off = 0;
  st->gin_off = has_loss(st) ? 0 : out_floats(st, layer_at(st, n - 1));
  st->grad_floats = st->gin_off + (first > 0 ? st->in_floats : 0);
  for (int i = 0; i < n; i++) {
    st->dsave_off[i] = slot;
    if (split_backward)
      slot += dsave_floats(st, layer_at(st, i));
  }
  st->slot_floats = slot;
  st->nparams = off;
  st->chunk = (off + (size_t)st->zero.size - 1) / (size_t)st->zero.size;
  *out = st;
  return STRATA_OK;
}

/* Bytes of one allocation of `floats` floats, as alloc() asks the device for. */
static uint64_t alloc_bytes(size_t floats) { return (uint64_t)(floats ? floats : 1) * 4; }

int strata__stage_plan(const struct strata_model *model, int first, int last, int64_t mb, int split_backward,
                       const struct strata__cut *cut, struct strata__stage_bytes *b) {
  struct strata__stage *st = NULL;
  TRY(stage_layout(model, first, last, -1, mb, split_backward, cut, &st));
  memset(b, 0, sizeof *b);
  b->params = 2 * alloc_bytes(st->chunk * (size_t)st->zero.size) + 2 * alloc_bytes(st->chunk);
  b->fixed = b->params + alloc_bytes((size_t)st->ntensors + 1) + alloc_bytes(st->max_scratch) +
             2 * alloc_bytes(st->max_out);
  if (first == 0 && model->cfg.kind == STRATA_MODEL_GPT)
    b->fixed += alloc_bytes((size_t)st->rows);
  b->slot = alloc_bytes(st->slot_floats);
  b->grad = st->grad_floats ? alloc_bytes(st->grad_floats) : 0;
  b->in = (uint64_t)st->in_floats * 4;
  b->out = (uint64_t)strata__stage_out_floats(st) * 4;
  strata__stage_free(st);
  return STRATA_OK;
}

int strata__stage_shell(const struct strata_model *model, int first, int last, int64_t mb, int split_backward,
                        const struct strata__cut *cut, struct strata__stage **out) {
  return stage_layout(model, first, last, -1, mb, split_backward, cut, out);
}

int strata__stage_new(const struct strata_model *model, int first, int last, int dev, int64_t mb, uint64_t seed,
                      int split_backward, const struct strata__cut *cut, struct strata__stage **out) {
  struct strata__stage *st = NULL;
  TRY(stage_layout(model, first, last, dev, mb, split_backward, cut, &st));
  size_t off = st->nparams, padded = st->chunk * (size_t)st->zero.size;
  int rc;
  rc = strata_queue_new(dev, &st->q);
  if (!rc)
    rc = alloc(dev, padded, &st->params);
  if (!rc)
    rc = alloc(dev, padded, &st->grads);
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
      tensor_init(x, seed, host + x->off);
      continue;
    }
    tensor_init(x, seed, whole);
    strata__tensor_cut(x, whole, host + x->off, 0);
  }
  free(whole);
  rc = strata_buffer_upload(st->q, st->params, 0, host, off * 4);
  free(host);
  if (!rc && padded > off) /* the padding of the last shard: reduced and gathered, never read */
    rc = strata_fill(st->q, AT(st->params, off), 0, (int64_t)(padded - off));
  if (!rc)
    rc = strata_fill(st->q, AT(st->m, 0), 0, (int64_t)(st->chunk ? st->chunk : 1));
  if (!rc)
    rc = strata_fill(st->q, AT(st->v, 0), 0, (int64_t)(st->chunk ? st->chunk : 1));
  if (!rc)
    rc = strata_fill(st->q, AT(st->grads, 0), 0, (int64_t)(padded ? padded : 1));
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
  }
  free(st->slots);
  strata_buffer_free(st->params);
  strata_buffer_free(st->grads);
  strata_buffer_free(st->m);
  strata_buffer_free(st->v);
  strata_buffer_free(st->scalar);
  strata_buffer_free(st->scratch);
  strata_buffer_free(st->gbuf[0]);
  strata_buffer_free(st->gbuf[1]);
  strata_buffer_free(st->positions);
  strata_queue_free(st->q);
  free(st->tensors);
  free(st->layer_tensor);
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
  if (!st->slots[s].buf)
    TRY(alloc(st->dev, st->slot_floats, &st->slots[s].buf));
  if (!st->slots[s].grad && st->grad_floats) {
    int rc = alloc(st->dev, st->grad_floats, &st->slots[s].grad);
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
  strata_queue_finish(st->q); /* queued work may still read it */
  strata_buffer_free(st->slots[s].buf);
  st->slots[s].buf = NULL;
  slot_settle(st, s);
}

void strata__stage_release_gradients(struct strata__stage *st, int s) {
  if (s < 0 || s >= st->nslots || !st->slots[s].grad)
    return;
  strata_queue_finish(st->q);
  strata_buffer_free(st->slots[s].grad);
  st->slots[s].grad = NULL;
  slot_settle(st, s);
}

void strata__stage_release(struct strata__stage *st, int s) {
  strata__stage_release_activations(st, s);
  strata__stage_release_gradients(st, s);
}

strata_mem_t strata__stage_input(struct strata__stage *st, int s) { return AT(st->slots[s].buf, 0); }
strata_mem_t strata__stage_targets(struct strata__stage *st, int s) { return AT(st->slots[s].buf, st->targets_off); }
strata_mem_t strata__stage_output(struct strata__stage *st, int s) {
  return AT(st->slots[s].buf, st->out_off[stage_layers(st) - 1]);
}
size_t strata__stage_in_floats(const struct strata__stage *st) { return st->in_floats; }
size_t strata__stage_out_floats(const struct strata__stage *st) {
  return out_floats(st, layer_at(st, stage_layers(st) - 1));
}
strata_mem_t strata__stage_grad_output(struct strata__stage *st, int s) { return AT(st->slots[s].grad, st->gout_off); }
strata_mem_t strata__stage_grad_input(struct strata__stage *st, int s) { return AT(st->slots[s].grad, st->gin_off); }

/* ---- the layers ---- */

struct lctx {
  struct strata__stage *st;
  const struct strata__layer *L;
  struct dims d;
  strata_queue_t q;
  strata_buffer_t slot;
  int mode;                /* enum bmode, backward only */
  size_t saved;            /* offset of this layer's saved activations in the slot */
  size_t dsave;            /* offset of the gradients kept between BACKWARD_INPUT and BACKWARD_WEIGHT */
  strata_mem_t in, out;    /* input and output activations */
  const struct strata__tensor *t;   /* this layer's tensors */
};

#define PARAM(c, i) AT((c)->st->params, (c)->t[i].off)
#define GRAD(c, i) AT((c)->st->grads, (c)->t[i].off)
#define SAVED(c, o) AT((c)->slot, (c)->saved + (size_t)(o))
#define SCR(c, o) AT((c)->st->scratch, (size_t)(o))

/* y[R, out] = x[R, in] W[in, out] + b */
static int linear_fwd(strata_queue_t q, int64_t R, int64_t in, int64_t outf, strata_mem_t x, strata_mem_t W,
                      strata_mem_t b, strata_mem_t y) {
  TRY(strata_gemm(q, 0, 0, R, outf, in, 1, x, in, 0, W, outf, 0, 0, y, outf, 0, 1));
  return b.buf ? strata_bias_add(q, y, b, R, outf) : STRATA_OK;
}

/* Weight part of a linear layer's backward: dW += x^T dy; db += colsum(dy) (db.buf NULL: no bias). */
static int linear_bwd_w(strata_queue_t q, int64_t R, int64_t in, int64_t outf, strata_mem_t x, strata_mem_t dy,
                        strata_mem_t dW, strata_mem_t db) {
  TRY(strata_gemm(q, 1, 0, in, outf, R, 1, x, in, 0, dy, outf, 0, 1, dW, outf, 0, 1));
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
  strata_mem_t tok = SCR(c, (size_t)(c->d.R * c->d.D));
  *rc = strata_tokens_shift(c->q, c->in, tok, c->d.R, c->d.voff, c->d.V);
  return tok;
}

static int embed_fwd(struct lctx *c) {
  struct dims d = c->d;
  if (d.vp) { /* each slice looks up its rows of the vocabulary, the others' are zero: the sum is the lookup */
    int rc = STRATA_OK;
    strata_mem_t tok = slice_tokens(c, &rc);
    TRY(rc);
    TRY(strata_embedding_fwd(c->q, tok, PARAM(c, 0), c->out, d.R, d.D, d.V));
    TRY(join(c, c->out, (size_t)(d.R * d.D)));
  } else {
    TRY(strata_embedding_fwd(c->q, c->in, PARAM(c, 0), c->out, d.R, d.D, d.V));
  }
  TRY(strata_embedding_fwd(c->q, AT(c->st->positions, 0), PARAM(c, 1), SCR(c, 0), d.R, d.D, d.T));
  return strata_add(c->q, c->out, SCR(c, 0), c->out, d.R * d.D);
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

static int join(struct lctx *c, strata_mem_t x, size_t n) { return join_op(c, x, n, STRATA_SUM);
}

/* y = x W + b for a row-split W: the slices' partial products joined, then the (whole) bias once. */
static int linear_fwd_rows(struct lctx *c, int64_t R, int64_t in, int64_t outf, strata_mem_t x, strata_mem_t W,
                           strata_mem_t b, strata_mem_t y) {
  TRY(strata_gemm(c->q, 0, 0, R, outf, in, 1, x, in, 0, W, outf, 0, 0, y, outf, 0, 1));
  TRY(join(c, y, (size_t)(R * outf)));
  return strata_bias_add(c->q, y, b, R, outf);
}

/*
** A pre-layernorm block. Sharded, this stage holds H of the heads (A = H hd
** columns of each of Q, K, V in c_attn, the matching A rows of c_proj) and F
** of the hidden units (c_fc's columns, the MLP c_proj's rows); the two
** row-split products are joined over the slices, and the layernorms and
** residuals run whole on every slice.
*/
static int block_fwd(struct lctx *c) {
  struct dims d = c->d;
  struct block_saved s = block_layout(&d);
  strata_queue_t q = c->q;
  int64_t D = d.D, A = d.A, T = d.T, H = d.H, hd = d.hd, HTT = H * T * T;
  float scale = 1.0f / sqrtf((float)hd);
  strata_mem_t S = SCR(c, 0);
  TRY(strata_layernorm_fwd(q, c->in, PARAM(c, LN1_W), PARAM(c, LN1_B), SAVED(c, s.ln1), SAVED(c, s.mean1),
                           SAVED(c, s.rstd1), d.R, D, 1e-5f));
  TRY(linear_fwd(q, d.R, D, 3 * A, SAVED(c, s.ln1), PARAM(c, ATTN_W), PARAM(c, ATTN_B), SAVED(c, s.qkv)));
  for (int64_t b = 0; b < d.B; b++) {
    size_t qkv = s.qkv + (size_t)(b * T * 3 * A);
    TRY(strata_gemm(q, 0, 1, T, T, hd, 1, SAVED(c, qkv), 3 * A, hd, SAVED(c, qkv + (size_t)A), 3 * A, hd, 0,
                    AT(S.buf, S.off + (size_t)(b * HTT)), T, T * T, H));
  }
  TRY(strata_softmax_fwd(q, S, SAVED(c, s.p), d.B * H * T, T, scale, 1));
  for (int64_t b = 0; b < d.B; b++) {
    size_t qkv = s.qkv + (size_t)(b * T * 3 * A);
    TRY(strata_gemm(q, 0, 0, T, hd, T, 1, SAVED(c, s.p + (size_t)(b * HTT)), T, T * T, SAVED(c, qkv + (size_t)(2 * A)),
                    3 * A, hd, 0, SAVED(c, s.att + (size_t)(b * T * A)), A, hd, H));
  }
  TRY(linear_fwd_rows(c, d.R, A, D, SAVED(c, s.att), PARAM(c, PROJ_W), PARAM(c, PROJ_B), SAVED(c, s.xmid)));
  TRY(strata_add(q, SAVED(c, s.xmid), c->in, SAVED(c, s.xmid), d.R * D));
  TRY(strata_layernorm_fwd(q, SAVED(c, s.xmid), PARAM(c, LN2_W), PARAM(c, LN2_B), SAVED(c, s.ln2), SAVED(c, s.mean2),
                           SAVED(c, s.rstd2), d.R, D, 1e-5f));
  TRY(linear_fwd(q, d.R, D, d.F, SAVED(c, s.ln2), PARAM(c, FC_W), PARAM(c, FC_B), SAVED(c, s.h)));
  TRY(strata_gelu_fwd(q, SAVED(c, s.h), SAVED(c, s.g), d.R * d.F));
  TRY(linear_fwd_rows(c, d.R, d.F, D, SAVED(c, s.g), PARAM(c, FCP_W), PARAM(c, FCP_B), c->out));
  return strata_add(q, c->out, SAVED(c, s.xmid), c->out, d.R * D);
}

/* The output projection: the head's own weight, or the embedding's when tied. */
static int head_weight(struct lctx *c, strata_mem_t *w, strata_mem_t *dw) {
  if (!c->st->model->cfg.tied) {
    *w = PARAM(c, 2);
    *dw = GRAD(c, 2);
    return STRATA_OK;
  }
  const struct strata__tensor *wte = &c->st->tensors[c->st->layer_tensor[0]]; /* stage holds every layer */
  *w = AT(c->st->params, wte->off);
  *dw = AT(c->st->grads, wte->off);
  return STRATA_OK;
}

static int lm_head_fwd(struct lctx *c, strata_mem_t targets) {
  struct dims d = c->d;
  size_t RD = (size_t)(d.R * d.D), R = (size_t)d.R;
  strata_mem_t W, dW;
  TRY(head_weight(c, &W, &dW));
  TRY(strata_layernorm_fwd(c->q, c->in, PARAM(c, 0), PARAM(c, 1), SAVED(c, 0), SAVED(c, RD), SAVED(c, RD + R), d.R,
                           d.D, 1e-5f));
  TRY(strata_gemm(c->q, 0, 1, d.R, d.V, d.D, 1, SAVED(c, 0), d.D, 0, W, d.D, 0, 0, SAVED(c, RD + 2 * R), d.V, 0, 1));
  const size_t logits = RD + 2 * R, loss = logits + (size_t)(d.R * d.V);
  if (!d.vp)
    return strata_cross_entropy_fwd(c->q, SAVED(c, logits), targets, SAVED(c, loss), d.R, d.V);
  /* vocabulary-parallel cross-entropy: the rows' max, their sums of exponentials and the target logits are
  ** joined over the slices; the logits themselves never are */
  const size_t mx = loss + R, se = mx + R, tl = se + R;
  TRY(strata_xent_vp_max(c->q, SAVED(c, logits), SAVED(c, mx), d.R, d.V));
  TRY(join_op(c, SAVED(c, mx), R, STRATA_MAX));
  TRY(strata_xent_vp_sums(c->q, SAVED(c, logits), targets, SAVED(c, mx), SAVED(c, se), SAVED(c, tl), d.R, d.V, d.voff,
                          d.Vall));
  TRY(join(c, SAVED(c, se), 2 * R));
  return strata_xent_vp_loss(c->q, SAVED(c, mx), SAVED(c, se), SAVED(c, tl), targets, SAVED(c, loss), d.R, d.Vall);
}

/* A linear layer + ReLU; cut by its inputs (tp), the slices' partial products are joined before the bias. */
static int fc_fwd(struct lctx *c) {
  const struct strata__layer *L = c->L;
  if (L->tp_role == STRATA__TP_INPUTS)
    TRY(linear_fwd_rows(c, c->d.R, L->in, L->out, c->in, PARAM(c, 0), PARAM(c, 1), SAVED(c, 0)));
  else
    TRY(linear_fwd(c->q, c->d.R, L->in, L->out, c->in, PARAM(c, 0), PARAM(c, 1), SAVED(c, 0)));
  return strata_relu_fwd(c->q, SAVED(c, 0), c->out, c->d.R * L->out);
}

static struct strata_conv2d conv_geom(const struct lctx *c) {
  const struct strata__layer *L = c->L;
  struct strata_conv2d g = {.n = c->d.B, .c = L->c, .h = L->h, .w = L->w, .k = L->k, .r = 3, .s = 3, .stride = 1,
                            .pad = 1};
  return g;
}

static int conv_fwd(struct lctx *c) {
  const struct strata__layer *L = c->L;
  struct strata_conv2d g = conv_geom(c);
  size_t big = (size_t)(c->d.B * L->k * L->h * L->w);
  struct strata_pool2d pg = {.n = c->d.B, .c = L->k, .h = L->h, .w = L->w, .size = 2, .stride = 2};
  TRY(strata_conv2d_fwd(c->q, &g, c->in, PARAM(c, 0), SAVED(c, 0), SCR(c, 0)));
  if (L->tp_role == STRATA__TP_INPUTS) /* each slice convolved its input channels: the sum is the convolution */
    TRY(join(c, SAVED(c, 0), big));
  TRY(strata_relu_fwd(c->q, SAVED(c, 0), SAVED(c, big), (int64_t)big));
  return strata_maxpool_fwd(c->q, &pg, SAVED(c, big), c->out, SAVED(c, 2 * big));
}

static int classifier_fwd(struct lctx *c, strata_mem_t targets) {
  const struct strata__layer *L = c->L;
  TRY(linear_fwd(c->q, c->d.R, L->in, L->out, c->in, PARAM(c, 0), PARAM(c, 1), SAVED(c, 0)));
  return strata_cross_entropy_fwd(c->q, SAVED(c, 0), targets, SAVED(c, (size_t)(c->d.R * L->out)), c->d.R, L->out);
}

/*
** Backward passes. A layer's backward has an input part (the gradient of
** its input) and a weight part (the gradients of its parameters). FULL
** runs both; INPUT runs the input part and keeps, in the slot's
** `dsave` region, the output-side gradients the weight part needs;
** WEIGHT runs the weight part later from what INPUT kept (zero-bubble
** schedules). Where a gradient lives: scratch when FULL, the slot when split.
*/
enum bmode { BM_FULL, BM_INPUT, BM_WEIGHT };

#define DSAVE(c, o) AT((c)->slot, (c)->dsave + (size_t)(o))
/* A working gradient at offset `so` of scratch (FULL) or `ko` of the slot's dsave (split). */
#define LOC(c, so, ko) ((c)->mode == BM_FULL ? SCR(c, so) : DSAVE(c, ko))
#define DO_IN(c) ((c)->mode != BM_WEIGHT)
#define DO_W(c) ((c)->mode != BM_INPUT)

/* The layer's output gradient as its weight part reads it: as given (FULL),
** copied into the slot first (INPUT), or from the slot (WEIGHT). */
static int keep_dout(struct lctx *c, strata_mem_t *dout, size_t n) {
  if (c->mode == BM_FULL)
    return STRATA_OK;
  strata_mem_t k = DSAVE(c, 0);
  if (c->mode == BM_INPUT)
    TRY(strata_buffer_copy(c->q, k.buf, k.off * 4, dout->buf, dout->off * 4, n * 4));
  *dout = k;
  return STRATA_OK;
}

/* Layernorm backward restricted to the part the mode wants: the input
** gradient into dx, and/or the gamma/beta gradients. The unwanted output
** goes to `junk` (scratch with room for rows x cols floats). */
static int ln_bwd(struct lctx *c, strata_mem_t x, strata_mem_t g, strata_mem_t mean, strata_mem_t rstd, strata_mem_t dy,
                  strata_mem_t dx, strata_mem_t dg, strata_mem_t db, strata_mem_t junk, int64_t rows, int64_t cols) {
  if (c->mode == BM_INPUT) {
    dg = junk;
    db = AT(junk.buf, junk.off + (size_t)cols);
  } else if (c->mode == BM_WEIGHT) {
    dx = junk;
  }
  return strata_layernorm_bwd(c->q, x, g, mean, rstd, dy, dx, dg, db, rows, cols, c->mode != BM_INPUT);
}

static int embed_bwd(struct lctx *c, strata_mem_t dout) {
  struct dims d = c->d;
  TRY(keep_dout(c, &dout, (size_t)(d.R * d.D)));
  if (!DO_W(c))
    return STRATA_OK;
  strata_mem_t tok = c->in;
  if (d.vp) {
    int rc = STRATA_OK;
    tok = slice_tokens(c, &rc);
    TRY(rc);
  }
  TRY(strata_embedding_bwd(c->q, tok, dout, GRAD(c, 0), d.R, d.D, d.V, 1));
  return strata_embedding_bwd(c->q, AT(c->st->positions, 0), dout, GRAD(c, 1), d.R, d.D, d.T, 1);
}

/* Backward of a block, sharded as its forward: the input gradients of the
** two column-split matrices (c_fc, c_attn) are the partial sums joined. */
static int block_bwd(struct lctx *c, strata_mem_t dout, strata_mem_t din) {
  struct dims d = c->d;
  struct block_saved s = block_layout(&d);
  strata_queue_t q = c->q;
  int64_t D = d.D, A = d.A, T = d.T, H = d.H, hd = d.hd, HTT = H * T * T, R = d.R;
  size_t RD = (size_t)(R * D), RA = (size_t)(R * A), RF = (size_t)(R * d.F);
  float scale = 1.0f / sqrtf((float)hd);
  /* scratch: dP | dS | dqkv (3RA) | f (RF) | d1 | d2 | d3 | junk (RD) */
  size_t o_dp = 0, o_ds = o_dp + (size_t)(d.B * HTT), o_dqkv = o_ds + (size_t)(d.B * HTT), o_f = o_dqkv + 3 * RA,
         o_d1 = o_f + RF, o_d2 = o_d1 + RD, o_d3 = o_d2 + RD, o_junk = o_d3 + RD;
  /* dsave: dout | dh (RF) | dln2 | dxmid | dqkv (3RA) | dln1 */
  size_t k_dh = RD, k_dln2 = k_dh + RF, k_dxmid = k_dln2 + RD, k_dqkv = k_dxmid + RD, k_dln1 = k_dqkv + 3 * RA;
  strata_mem_t dh = LOC(c, o_f, k_dh), dln2 = LOC(c, o_d1, k_dln2), dxmid = LOC(c, o_d3, k_dxmid),
               dqkv = LOC(c, o_dqkv, k_dqkv), dln1 = LOC(c, o_d1, k_dln1), junk = SCR(c, o_junk);
  TRY(keep_dout(c, &dout, RD));
  /* MLP branch */
  if (DO_IN(c)) {
    TRY(linear_bwd_x(q, R, d.F, D, PARAM(c, FCP_W), dout, dh));
    TRY(strata_gelu_bwd(q, SAVED(c, s.h), dh, dh, R * d.F));
    TRY(linear_bwd_x(q, R, D, d.F, PARAM(c, FC_W), dh, dln2));
    TRY(join(c, dln2, RD));
  }
  if (DO_W(c)) {
    TRY(linear_bwd_w(q, R, d.F, D, SAVED(c, s.g), dout, GRAD(c, FCP_W), GRAD(c, FCP_B)));
    TRY(linear_bwd_w(q, R, D, d.F, SAVED(c, s.ln2), dh, GRAD(c, FC_W), GRAD(c, FC_B)));
  }
  TRY(ln_bwd(c, SAVED(c, s.xmid), PARAM(c, LN2_W), SAVED(c, s.mean2), SAVED(c, s.rstd2), dln2, SCR(c, o_d2),
             GRAD(c, LN2_W), GRAD(c, LN2_B), junk, R, D));
  /* attention branch */
  if (DO_IN(c)) {
    TRY(strata_add(q, dout, SCR(c, o_d2), dxmid, R * D));
    TRY(linear_bwd_x(q, R, A, D, PARAM(c, PROJ_W), dxmid, SCR(c, o_d1)));
    for (int64_t b = 0; b < d.B; b++) {
      size_t qkv = s.qkv + (size_t)(b * T * 3 * A), att = o_d1 + (size_t)(b * T * A);
      strata_mem_t dqb = AT(dqkv.buf, dqkv.off + (size_t)(b * T * 3 * A));
      /* dP = datt v^T ; dv = P^T datt */
      TRY(strata_gemm(q, 0, 1, T, T, hd, 1, SCR(c, att), A, hd, SAVED(c, qkv + (size_t)(2 * A)), 3 * A, hd, 0,
                      SCR(c, o_dp + (size_t)(b * HTT)), T, T * T, H));
      TRY(strata_gemm(q, 1, 0, T, hd, T, 1, SAVED(c, s.p + (size_t)(b * HTT)), T, T * T, SCR(c, att), A, hd, 0,
                      AT(dqb.buf, dqb.off + (size_t)(2 * A)), 3 * A, hd, H));
    }
    TRY(strata_softmax_bwd(q, SAVED(c, s.p), SCR(c, o_dp), SCR(c, o_ds), d.B * H * T, T, scale));
    for (int64_t b = 0; b < d.B; b++) {
      size_t qkv = s.qkv + (size_t)(b * T * 3 * A);
      strata_mem_t dqb = AT(dqkv.buf, dqkv.off + (size_t)(b * T * 3 * A));
      strata_mem_t dS = SCR(c, o_ds + (size_t)(b * HTT));
      /* dq = dS k ; dk = dS^T q */
      TRY(strata_gemm(q, 0, 0, T, hd, T, 1, dS, T, T * T, SAVED(c, qkv + (size_t)A), 3 * A, hd, 0, dqb, 3 * A, hd, H));
      TRY(strata_gemm(q, 1, 0, T, hd, T, 1, dS, T, T * T, SAVED(c, qkv), 3 * A, hd, 0,
                      AT(dqb.buf, dqb.off + (size_t)A), 3 * A, hd, H));
    }
    TRY(linear_bwd_x(q, R, D, 3 * A, PARAM(c, ATTN_W), dqkv, dln1));
    TRY(join(c, dln1, RD));
  }
  if (DO_W(c)) {
    TRY(linear_bwd_w(q, R, A, D, SAVED(c, s.att), dxmid, GRAD(c, PROJ_W), GRAD(c, PROJ_B)));
    TRY(linear_bwd_w(q, R, D, 3 * A, SAVED(c, s.ln1), dqkv, GRAD(c, ATTN_W), GRAD(c, ATTN_B)));
  }
  TRY(ln_bwd(c, c->in, PARAM(c, LN1_W), SAVED(c, s.mean1), SAVED(c, s.rstd1), dln1, SCR(c, o_d2), GRAD(c, LN1_W),
             GRAD(c, LN1_B), junk, R, D));
  if (DO_IN(c) && din.buf)
    TRY(strata_add(q, dxmid, SCR(c, o_d2), din, R * D));
  return STRATA_OK;
}

static int lm_head_bwd(struct lctx *c, strata_mem_t targets, strata_mem_t din) {
  struct dims d = c->d;
  size_t RD = (size_t)(d.R * d.D), R = (size_t)d.R, RV = (size_t)(d.R * d.V);
  strata_mem_t W, dW;
  TRY(head_weight(c, &W, &dW));
  /* scratch: dlogits | dlnx | junk; dsave: dlogits | dlnx */
  strata_mem_t dlogits = LOC(c, 0, 0), dlnx = LOC(c, RV, RV), junk = SCR(c, RV + RD);
  if (DO_IN(c)) {
    if (d.vp) {
      const size_t logits = RD + 2 * R, mx = logits + RV + R, se = mx + R;
      TRY(strata_xent_vp_bwd(c->q, SAVED(c, logits), targets, SAVED(c, mx), SAVED(c, se), dlogits, d.R, d.V, d.voff,
                             d.Vall, c->st->loss_scale));
    } else {
      TRY(strata_cross_entropy_bwd(c->q, SAVED(c, RD + 2 * R), targets, dlogits, d.R, d.V, c->st->loss_scale));
    }
    TRY(strata_gemm(c->q, 0, 0, d.R, d.D, d.V, 1, dlogits, d.V, 0, W, d.D, 0, 0, dlnx, d.D, 0, 1));
    if (d.vp) /* each slice's vocabulary's part of the input gradient */
      TRY(join(c, dlnx, RD));
  }
  if (DO_W(c))
    TRY(strata_gemm(c->q, 1, 0, d.V, d.D, d.R, 1, dlogits, d.V, 0, SAVED(c, 0), d.D, 0, 1, dW, d.D, 0, 1));
  if (!din.buf && c->mode == BM_INPUT)
    return STRATA_OK;
  return ln_bwd(c, c->in, PARAM(c, 0), SAVED(c, RD), SAVED(c, RD + R), dlnx, din.buf ? din : junk, GRAD(c, 0),
                GRAD(c, 1), junk, d.R, d.D);
}

static int fc_bwd(struct lctx *c, strata_mem_t dout, strata_mem_t din) {
  const struct strata__layer *L = c->L;
  strata_mem_t dz = LOC(c, 0, 0);
  if (DO_IN(c)) {
    TRY(strata_relu_bwd(c->q, SAVED(c, 0), dout, dz, c->d.R * L->out));
    TRY(linear_bwd_x(c->q, c->d.R, L->in, L->out, PARAM(c, 0), dz, L->first ? AT(NULL, 0) : din));
    if (L->tp_role == STRATA__TP_OUTPUTS && !L->first && din.buf) /* each slice's outputs' share of it */
      TRY(join(c, din, (size_t)(c->d.R * L->in)));
  }
  return DO_W(c) ? linear_bwd_w(c->q, c->d.R, L->in, L->out, c->in, dz, GRAD(c, 0), GRAD(c, 1)) : STRATA_OK;
}

static int conv_bwd(struct lctx *c, strata_mem_t dout, strata_mem_t din) {
  const struct strata__layer *L = c->L;
  struct strata_conv2d g = conv_geom(c);
  int64_t p, qq, ws;
  TRY(strata_conv2d_shape(&g, &p, &qq, &ws));
  size_t big = (size_t)(c->d.B * L->k * L->h * L->w);
  struct strata_pool2d pg = {.n = c->d.B, .c = L->k, .h = L->h, .w = L->w, .size = 2, .stride = 2};
  strata_mem_t dr = LOC(c, (size_t)ws, 0);
  if (DO_IN(c)) {
    TRY(strata_maxpool_bwd(c->q, &pg, dout, SAVED(c, 2 * big), dr));
    TRY(strata_relu_bwd(c->q, SAVED(c, 0), dr, dr, (int64_t)big));
  }
  strata_mem_t dx = (DO_IN(c) && !L->first) ? din : AT(NULL, 0);
  strata_mem_t dw = DO_W(c) ? GRAD(c, 0) : AT(NULL, 0);
  if (!dx.buf && !dw.buf)
    return STRATA_OK;
  TRY(strata_conv2d_bwd(c->q, &g, c->in, PARAM(c, 0), dr, dx, dw, SCR(c, 0), 1));
  if (L->tp_role == STRATA__TP_OUTPUTS && dx.buf) /* each slice's output channels' share of it */
    TRY(join(c, dx, (size_t)(c->d.B * L->in)));
  return STRATA_OK;
}

static int classifier_bwd(struct lctx *c, strata_mem_t targets, strata_mem_t din) {
  const struct strata__layer *L = c->L;
  strata_mem_t dlogits = LOC(c, 0, 0);
  if (DO_IN(c)) {
    TRY(strata_cross_entropy_bwd(c->q, SAVED(c, 0), targets, dlogits, c->d.R, L->out, c->st->loss_scale));
    TRY(linear_bwd_x(c->q, c->d.R, L->in, L->out, PARAM(c, 0), dlogits, L->first ? AT(NULL, 0) : din));
  }
  return DO_W(c) ? linear_bwd_w(c->q, c->d.R, L->in, L->out, c->in, dlogits, GRAD(c, 0), GRAD(c, 1)) : STRATA_OK;
}

/* The context of stage layer i for slot s. */
static struct lctx layer_ctx(struct strata__stage *st, int s, int i) {
  struct lctx c = {.st = st, .L = layer_at(st, i), .d = dims_of(st), .q = st->q, .slot = st->slots[s].buf};
  c.saved = st->saved_off[i];
  c.dsave = st->dsave_off[i];
  c.in = i == 0 ? AT(c.slot, 0) : AT(c.slot, st->out_off[i - 1]);
  c.out = AT(c.slot, st->out_off[i]);
  c.t = &st->tensors[st->layer_tensor[i]];
  return c;
}

static int check_slot(struct strata__stage *st, int s) {
  if (s < 0 || s >= st->nslots || !st->slots[s].buf)
    return strata__error(STRATA_ERR_STATE, "stage: slot %d holds no micro-batch", s);
  return STRATA_OK;
}

int strata__stage_forward(struct strata__stage *st, int s) {
  TRY(check_slot(st, s));
  strata_mem_t targets = strata__stage_targets(st, s);
  for (int i = 0; i < stage_layers(st); i++) {
    struct lctx c = layer_ctx(st, s, i);
    int rc = STRATA_OK;
    switch (c.L->kind) {
    case STRATA__LAYER_EMBED: rc = embed_fwd(&c); break;
    case STRATA__LAYER_BLOCK: rc = block_fwd(&c); break;
    case STRATA__LAYER_LM_HEAD: rc = lm_head_fwd(&c, targets); break;
    case STRATA__LAYER_LINEAR: rc = fc_fwd(&c); break;
    case STRATA__LAYER_CONV: rc = conv_fwd(&c); break;
    case STRATA__LAYER_CLASSIFIER: rc = classifier_fwd(&c, targets); break;
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
  strata_mem_t targets = strata__stage_targets(st, s);
  int n = stage_layers(st);
  for (int i = n - 1; i >= 0; i--) {
    struct lctx c = layer_ctx(st, s, i);
    c.mode = mode;
    int back = n - 1 - i; /* layers done before this one */
    strata_mem_t dout = back == 0 ? (has_loss(st) ? AT(NULL, 0) : strata__stage_grad_output(st, s))
                                  : AT(st->gbuf[(back - 1) % 2], 0);
    strata_mem_t din = i > 0 ? AT(st->gbuf[back % 2], 0) : st->first > 0 ? strata__stage_grad_input(st, s) : AT(NULL, 0);
    int rc = STRATA_OK;
    switch (c.L->kind) {
    case STRATA__LAYER_EMBED: rc = embed_bwd(&c, dout); break;
    case STRATA__LAYER_BLOCK: rc = block_bwd(&c, dout, din); break;
    case STRATA__LAYER_LM_HEAD: rc = lm_head_bwd(&c, targets, din); break;
    case STRATA__LAYER_LINEAR: rc = fc_bwd(&c, dout, din); break;
    case STRATA__LAYER_CONV: rc = conv_bwd(&c, dout, din); break;
    case STRATA__LAYER_CLASSIFIER: rc = classifier_bwd(&c, targets, din); break;
    }
    if (rc)
      return rc;
    if (mode != BM_INPUT && st->grads_done)
      TRY(st->grads_done(st->grads_done_arg, i));
    if (mode == BM_WEIGHT && i == 0)
      break;
  }
  return STRATA_OK;
}

void strata__stage_layer_range(const struct strata__stage *st, int a, int b, size_t *lo, size_t *hi) {
  int t0 = st->layer_tensor[a], t1 = st->layer_tensor[b];
  *lo = t0 < st->ntensors ? st->tensors[t0].off : st->nparams;
  *hi = t1 < st->ntensors ? st->tensors[t1].off : st->nparams;
  if (t1 == t0)
    *hi = *lo;
}

int strata__stage_layer_count(const struct strata__stage *st) { return stage_layers(st); }

int strata__stage_backward(struct strata__stage *st, int s) { return stage_backward(st, s, BM_FULL); }
int strata__stage_backward_input(struct strata__stage *st, int s) { return stage_backward(st, s, BM_INPUT); }
int strata__stage_backward_weight(struct strata__stage *st, int s) { return stage_backward(st, s, BM_WEIGHT); }

/* Offset and count of the per-row losses of the loss layer in a slot. */
static int loss_region(struct strata__stage *st, size_t *off, int64_t *rows) {
  if (!has_loss(st))
    return strata__error(STRATA_ERR_STATE, "stage: only the last stage has a loss");
  int i = stage_layers(st) - 1;
  const struct strata__layer *L = layer_at(st, i);
  struct dims d = dims_of(st);
  if (L->kind == STRATA__LAYER_LM_HEAD)
    *off = st->saved_off[i] + (size_t)(d.R * d.D + 2 * d.R + d.R * d.V);
  else
    *off = st->saved_off[i] + (size_t)(d.R * L->out);
  *rows = d.R;
  return STRATA_OK;
}

int strata__stage_loss(struct strata__stage *st, int s, double *sum) {
  TRY(check_slot(st, s));
  size_t off = 0;
  int64_t rows = 0;
  TRY(loss_region(st, &off, &rows));
  float *l = malloc((size_t)rows * sizeof *l);
  if (!l)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory reading losses");
  int rc = strata_buffer_download(st->q, st->slots[s].buf, off * 4, l, (size_t)rows * 4);
  double acc = 0;
  for (int64_t r = 0; r < rows; r++)
    acc += l[r];
  free(l);
  if (!rc)
    *sum = acc;
  return rc;
}

int strata__stage_loss_read(struct strata__stage *st, int s, float *rows) {
  TRY(check_slot(st, s));
  size_t off = 0;
  int64_t n = 0;
  TRY(loss_region(st, &off, &n));
  return strata_buffer_read(st->q, st->slots[s].buf, off * 4, rows, (size_t)n * 4);
}

int strata__stage_vocab(const struct strata__stage *st, int64_t *first, int64_t *count) {
  struct dims d = dims_of(st);
  *first = d.voff;
  *count = d.V;
  return d.vp;
}

strata_mem_t strata__stage_logits(struct strata__stage *st, int s) {
  int i = stage_layers(st) - 1;
  struct dims d = dims_of(st);
  return AT(st->slots[s].buf, st->saved_off[i] + (size_t)(d.R * d.D + 2 * d.R));
}

int strata__stage_zero_grads(struct strata__stage *st) {
  size_t padded = st->chunk * (size_t)st->zero.size;
  return strata_fill(st->q, AT(st->grads, 0), 0, (int64_t)(padded ? padded : 1));
}

/* The part of tensor t inside the stage's optimizer shard: [*lo, *hi) in floats of the flat vector (empty: lo = hi). */
static void shard_part(const struct strata__stage *st, int t, size_t *lo, size_t *hi) {
  const struct strata__tensor *x = &st->tensors[t];
  size_t a = (size_t)st->zero.rank * st->chunk, b = a + st->chunk;
  *lo = x->off > a ? x->off : a;
  *hi = x->off + x->n < b ? x->off + x->n : b;
  if (*hi < *lo)
    *hi = *lo;
}

int strata__stage_grad_sumsq(struct strata__stage *st, double *sumsq) {
  for (int t = 0; t < st->ntensors; t++) {
    size_t lo, hi;
    shard_part(st, t, &lo, &hi);
    if (hi == lo) { /* nothing of it here: a zero sum */
      TRY(strata_fill(st->q, AT(st->scalar, (size_t)t), 0, 1));
      continue;
    }
    TRY(strata_sumsq(st->q, AT(st->grads, lo), (int64_t)(hi - lo), AT(st->scalar, (size_t)t), 0));
  }
  float *v = malloc(((size_t)st->ntensors + 1) * sizeof *v);
  if (!v)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory");
  int rc = strata_buffer_download(st->q, st->scalar, 0, v, (size_t)st->ntensors * 4);
  for (int t = 0; t < st->ntensors && !rc; t++)
    sumsq[t] = v[t];
  free(v);
  return rc;
}

int strata__stage_update(struct strata__stage *st, float gscale, float lr, float beta1, float beta2, float eps,
                         float weight_decay, int64_t step) {
  const size_t base = (size_t)st->zero.rank * st->chunk; /* where the shard (and m, v) starts */
  if (gscale != 1.0f)
    TRY(strata_scale(st->q, AT(st->grads, base), gscale, (int64_t)(st->chunk ? st->chunk : 1)));
  for (int t = 0; t < st->ntensors; t++) {
    const struct strata__tensor *x = &st->tensors[t];
    size_t lo, hi;
    shard_part(st, t, &lo, &hi);
    if (hi == lo)
      continue;
    TRY(strata_adamw(st->q, AT(st->params, lo), AT(st->grads, lo), AT(st->m, lo - base), AT(st->v, lo - base),
                     (int64_t)(hi - lo), lr, beta1, beta2, eps, x->decay ? weight_decay : 0.0f, step));
  }
  return STRATA_OK;
}
