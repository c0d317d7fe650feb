/* SPDX-License-Identifier: MIT */
/* model.c — model presets, JSON model files, and the per-layer cost profile the planner splits on. */
#include "config.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/model.h"
#include "core/file.h"
#include "core/core.h"

struct preset {
  const char *name;
  struct strata_model_config cfg;
};

#define GPT(nm, v, t, d, l, hd, ff)                                                                                    \
  {                                                                                                                    \
    nm, {.kind = STRATA_MODEL_GPT, .vocab = v, .context = t, .d_model = d, .layers = l, .heads = hd, .d_ff = ff }      \
  }

#define LLAMA(nm, v, t, d, l, hd, kv, ff, theta)                                                                       \
  {                                                                                                                    \
    nm, {.kind = STRATA_MODEL_LLAMA, .vocab = v, .context = t, .d_model = d, .layers = l, .heads = hd,                 \
         .kv_heads = kv, .d_ff = ff, .rope_theta = theta, .norm_eps = 1e-5 }                                           \
  }

/* Byte-level GPTs from tiny to GPT-2 shapes (vocab 50257 as GPT-2's BPE) and beyond; LLaMA-shaped models (the small
** ones over bytes, with grouped-query attention; the real shapes for planning, untied). */
static const struct preset presets[] = {
    GPT("gpt-micro", 256, 32, 32, 1, 2, 128),
    GPT("gpt-tiny", 256, 64, 64, 2, 4, 256),
    GPT("gpt-small", 256, 128, 128, 4, 4, 512),
    GPT("gpt-medium", 256, 256, 256, 6, 8, 1024),
    GPT("gpt-512x8", 256, 256, 512, 8, 8, 2048),
    GPT("gpt2-small", 50257, 1024, 768, 12, 12, 3072),
    GPT("gpt2-medium", 50257, 1024, 1024, 24, 16, 4096),
    GPT("gpt2-large", 50257, 1024, 1280, 36, 20, 5120),
    GPT("gpt2-xl", 50257, 1024, 1600, 48, 25, 6400),
    GPT("gpt-7b", 50257, 2048, 4096, 32, 32, 16384),
    LLAMA("llama-micro", 256, 32, 32, 1, 4, 2, 96, 10000),
    LLAMA("llama-tiny", 256, 64, 64, 2, 4, 2, 192, 10000),
    LLAMA("llama2-7b", 32000, 4096, 4096, 32, 32, 32, 11008, 10000),
    LLAMA("llama3-8b", 128256, 8192, 4096, 32, 32, 8, 14336, 500000),
    LLAMA("llama3-70b", 128256, 8192, 8192, 80, 64, 8, 28672, 500000),
    {"mlp", {.kind = STRATA_MODEL_MLP, .image = 16, .channels = 1, .classes = 4, .hidden = {256, 128}}},
    {"cnn", {.kind = STRATA_MODEL_CNN, .image = 16, .channels = 1, .classes = 4, .conv = {8, 16}}},
    /* high resolution: 512 x 512 down to 16 x 16 by pooling and strides, averaged, classified */
    {"cnn-hires",
     {.kind = STRATA_MODEL_CNN, .image = 512, .channels = 1, .classes = 4, .conv = {8, 16, 16, 32, 32},
      .kernel = {3, 3, 5, 3, 3}, .stride = {1, 2, 1, 2, 1}, .pool = {2, 1, 2, 1, 2}, .gap = 1}},
};

#define NPRESETS (sizeof presets / sizeof presets[0])

STRATA_API const char *const *strata_model_presets(void) {
  static const char *names[NPRESETS + 1];
  for (size_t i = 0; i < NPRESETS; i++)
    names[i] = presets[i].name;
  names[NPRESETS] = NULL;
  return names;
}

static const char *kind_name(int kind) {
  return kind == STRATA_MODEL_GPT     ? "gpt"
         : kind == STRATA_MODEL_LLAMA ? "llama"
         : kind == STRATA_MODEL_MLP   ? "mlp"
         : kind == STRATA_MODEL_CNN   ? "cnn"
                                      : "?";
}

/* Limits that keep every size product far from overflow. */
#define MAX_DIM 1048576
#define MAX_LAYERS 4096

static int check_range(const char *src, const char *field, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi)
    return strata__error(STRATA_ERR_INVALID, "%s: %s = %lld must lie in [%lld, %lld]", src, field, (long long)v,
                         (long long)lo, (long long)hi);
  return STRATA_OK;
}

/* A llama's own fields (its GPT-shaped ones checked by the caller): grouped-query heads, an even head width for RoPE's
** pairs, a positive RoPE base and RMSNorm epsilon, Llama 3's frequency scaling. */
static int validate_llama(const struct strata_model_config *c, const char *src) {
  TRY(check_range(src, "n_kv_heads", c->kv_heads, 1, c->heads));
  if (c->heads % c->kv_heads)
    return strata__error(STRATA_ERR_SHAPE, "%s: n_kv_heads = %lld does not divide heads = %lld", src,
                         (long long)c->kv_heads, (long long)c->heads);
  if ((c->d_model / c->heads) % 2)
    return strata__error(STRATA_ERR_SHAPE, "%s: the head width d_model / heads = %lld is odd; RoPE rotates pairs", src,
                         (long long)(c->d_model / c->heads));
  if (!(c->rope_theta > 1 && c->rope_theta < 1e12))
    return strata__error(STRATA_ERR_INVALID, "%s: rope_theta = %g must lie in (1, 1e12)", src, c->rope_theta);
  if (!(c->norm_eps > 0 && c->norm_eps < 1))
    return strata__error(STRATA_ERR_INVALID, "%s: norm_eps = %g must lie in (0, 1)", src, c->norm_eps);
  const double f = c->rope_scaling.factor, lo = c->rope_scaling.low_freq_factor, hi = c->rope_scaling.high_freq_factor;
  switch (c->rope_scaling.type) {
  case STRATA_ROPE_DEFAULT:
    return STRATA_OK;
  case STRATA_ROPE_LLAMA3:
    if (!(f >= 1 && f < 1e6))
      return strata__error(STRATA_ERR_INVALID, "%s: rope_scaling.factor = %g must lie in [1, 1e6)", src, f);
    if (!(lo > 0 && hi > lo && hi < 1e6))
      return strata__error(STRATA_ERR_INVALID, "%s: rope_scaling needs 0 < low_freq_factor (%g) < high_freq_factor "
                           "(%g)", src, lo, hi);
    return check_range(src, "rope_scaling.original_max_position_embeddings", c->rope_scaling.original_context, 1,
                       MAX_DIM);
  default:
    return strata__error(STRATA_ERR_INVALID, "%s: rope_scaling.rope_type %d is not one strata knows", src,
                         c->rope_scaling.type);
  }
}

static int validate(const struct strata_model_config *c, const char *src) {
  switch (c->kind) {
  case STRATA_MODEL_GPT:
  case STRATA_MODEL_LLAMA:
    TRY(check_range(src, "vocab", c->vocab, 2, MAX_DIM));
    TRY(check_range(src, "context", c->context, 1, 65536));
    TRY(check_range(src, "d_model", c->d_model, 1, 65536));
    TRY(check_range(src, "layers", c->layers, 1, MAX_LAYERS));
    TRY(check_range(src, "heads", c->heads, 1, c->d_model));
    TRY(check_range(src, "d_ff", c->d_ff, 1, 262144));
    if (c->d_model % c->heads)
      return strata__error(STRATA_ERR_SHAPE, "%s: heads = %lld does not divide d_model = %lld", src,
                           (long long)c->heads, (long long)c->d_model);
    return c->kind == STRATA_MODEL_LLAMA ? validate_llama(c, src) : STRATA_OK;
  case STRATA_MODEL_MLP:
  case STRATA_MODEL_CNN: {
    TRY(check_range(src, "image", c->image, 2, 1024));
    TRY(check_range(src, "channels", c->channels, 1, 64));
    TRY(check_range(src, "classes", c->classes, 2, 65536));
    const int64_t *w = c->kind == STRATA_MODEL_MLP ? c->hidden : c->conv;
    const char *field = c->kind == STRATA_MODEL_MLP ? "hidden" : "conv";
    int n = 0;
    while (n < STRATA_MODEL_MAX_CONV && w[n])
      TRY(check_range(src, field, w[n++], 1, 65536));
    if (c->kind == STRATA_MODEL_CNN) {
      if (n == 0)
        return strata__error(STRATA_ERR_INVALID, "%s: a cnn needs at least one entry in \"conv\"", src);
      int64_t sz = c->image;
      for (int i = 0; i < STRATA_MODEL_MAX_CONV; i++) {
        const int64_t r = c->kernel[i], st = c->stride[i], pl = c->pool[i];
        if (i >= n && (r || st || pl))
          return strata__error(STRATA_ERR_INVALID, "%s: \"kernels\", \"strides\" and \"pools\" have an entry past "
                               "the %d of \"conv\"", src, n);
        if (i >= n)
          continue;
        if (r && (r % 2 == 0 || r > 15))
          return strata__error(STRATA_ERR_INVALID, "%s: kernels[%d] = %lld must be odd and at most 15", src, i,
                               (long long)r);
        TRY(check_range(src, "strides[]", st ? st : 1, 1, 8));
        TRY(check_range(src, "pools[]", pl ? pl : 2, 1, 8));
        const int64_t down = (st ? st : 1) * (pl ? pl : 2);
        if (sz % down || sz / down < 1)
          return strata__error(STRATA_ERR_SHAPE,
                               "%s: conv layer %d: its %lldx%lld input is not divisible by stride %lld x pool %lld",
                               src, i, (long long)sz, (long long)sz, (long long)(st ? st : 1),
                               (long long)(pl ? pl : 2));
        if ((r ? r : 3) / 2 >= sz)
          return strata__error(STRATA_ERR_SHAPE, "%s: conv layer %d: kernel %lld is wider than its %lldx%lld input",
                               src, i, (long long)(r ? r : 3), (long long)sz, (long long)sz);
        sz /= down;
      }
    }
    return STRATA_OK;
  }
  default:
    return strata__error(STRATA_ERR_INVALID, "%s: unknown model kind %d", src, c->kind);
  }
}

static void add_layer(struct strata_model *m, struct strata__layer *l, const char *name, const char *type,
                      uint64_t params, double fwd, double bwd, uint64_t act, uint64_t out) {
  snprintf(l->info.name, sizeof l->info.name, "%s", name);
  snprintf(l->info.type, sizeof l->info.type, "%s", type);
  l->info.params = params;
  l->info.fwd_flops = fwd;
  l->info.bwd_flops = bwd;
  l->info.act_bytes = act;
  l->info.out_bytes = out;
  m->layers[m->nlayers++] = *l;
}

/*
** A llama's layers: the token embedding (no positions: RoPE rotates each
** block's queries and keys), its blocks (q, k, v, o projections without
** biases, n_kv_heads of d_model / heads for K and V; a SwiGLU MLP of three
** d_model x d_ff matrices; two RMSNorm weights), the final RMSNorm and the
** head. Activation bytes are what lib/model/stage.c keeps per sample.
*/
static int build_llama(struct strata_model *m) {
  const struct strata_model_config *c = &m->cfg;
  const double T = (double)c->context, D = (double)c->d_model, F = (double)c->d_ff, V = (double)c->vocab,
               H = (double)c->heads, A = D, Akv = (double)c->kv_heads * (D / H);
  struct strata__layer l = {.kind = STRATA__LAYER_EMBED, .in = 1, .out = c->d_model, .first = 1};
  add_layer(m, &l, "embed_tokens", "embed", (uint64_t)(V * D), 0, 0, (uint64_t)(4 * T), (uint64_t)(4 * T * D));
  for (int64_t i = 0; i < c->layers; i++) {
    struct strata__layer b = {.kind = STRATA__LAYER_LLAMA_BLOCK, .index = (int)i, .in = c->d_model,
                              .out = c->d_model};
    char name[32];
    snprintf(name, sizeof name, "layers.%lld", (long long)i);
    uint64_t params = (uint64_t)(2 * D + D * (A + 2 * Akv) + A * D + 3 * D * F);
    double fwd = T * (2 * D * (A + 2 * Akv) + 2 * A * D + 6 * D * F) + 4 * T * T * A;
    /* saved: x normed, q|k|v (rotated), attention output, x_mid, x_mid normed, gate|up, silu(gate) * up (floats);
    ** two RMSNorm rstd and the attention's log-sum-exps (one a head a token) */
    double act = 4 * (T * (3 * D + 2 * A + 2 * Akv + 3 * F) + 2 * T + H * T);
    add_layer(m, &b, name, "block", params, fwd, 2 * fwd, (uint64_t)act, (uint64_t)(4 * T * D));
  }
  struct strata__layer h = {.kind = STRATA__LAYER_LM_HEAD, .in = c->d_model, .out = c->vocab};
  /* saved: the normed rows, their rstd, the logits, the losses */
  add_layer(m, &h, c->tied ? "norm+lm_head(tied)" : "norm+lm_head", "lm_head", (uint64_t)(D + (c->tied ? 0 : D * V)),
            2 * T * D * V, 4 * T * D * V, (uint64_t)(4 * (T * D + T + T * V + T)), 4);
  return STRATA_OK;
}

/*
** Lay out the layers and their costs. FLOPs count matrix products only
** (2 per multiply-add, the convention of MFU); elementwise work is left
** out. Attention scores are counted in full T x T, as they are computed.
*/
static int build_layers(struct strata_model *m) {
  const struct strata_model_config *c = &m->cfg;
  int cap = 0;
  if (strata__model_text(c))
    cap = (int)c->layers + 2;
  else
    cap = STRATA_MODEL_MAX_CONV + 1;
  m->layers = calloc((size_t)cap, sizeof *m->layers);
  if (!m->layers)
    return strata__error(STRATA_ERR_NOMEM, "out of memory building a model");
  if (c->kind == STRATA_MODEL_GPT) {
    double T = (double)c->context, D = (double)c->d_model, F = (double)c->d_ff, V = (double)c->vocab,
           H = (double)c->heads;
    struct strata__layer l = {.kind = STRATA__LAYER_EMBED, .in = 1, .out = c->d_model, .first = 1};
    add_layer(m, &l, "wte+wpe", "embed", (uint64_t)(V * D + T * D), 0, 0, (uint64_t)(4 * T), (uint64_t)(4 * T * D));
    for (int64_t i = 0; i < c->layers; i++) {
      struct strata__layer b = {.kind = STRATA__LAYER_BLOCK, .index = (int)i, .in = c->d_model, .out = c->d_model};
      char name[32];
      snprintf(name, sizeof name, "h.%lld", (long long)i);
      uint64_t params = (uint64_t)(4 * D + (D * 3 * D + 3 * D) + (D * D + D) + (D * F + F) + (F * D + D));
      double fwd = T * (2 * D * 3 * D + 2 * D * D + 4 * D * F) + 4 * T * T * D;
      /* saved: ln1, qkv (3 wide), att, x_mid, ln2; the attention's log-sum-exps; h, gelu(h); two mean/rstd pairs */
      double act = 4 * (T * D * 7 + H * T + 2 * T * F + 4 * T);
      add_layer(m, &b, name, "block", params, fwd, 2 * fwd, (uint64_t)act, (uint64_t)(4 * T * D));
    }
    struct strata__layer h = {.kind = STRATA__LAYER_LM_HEAD, .in = c->d_model, .out = c->vocab};
    uint64_t params = (uint64_t)(2 * D + (c->tied ? 0 : D * V));
    add_layer(m, &h, c->tied ? "ln_f+lm_head(tied)" : "ln_f+lm_head", "lm_head", params, 2 * T * D * V,
              4 * T * D * V, (uint64_t)(4 * (T * D + 2 * T + T * V + T)), 4);
    return STRATA_OK;
  }
  if (c->kind == STRATA_MODEL_LLAMA)
    return build_llama(m);
  int64_t feat = c->channels * c->image * c->image;
  if (c->kind == STRATA_MODEL_MLP) {
    for (int i = 0; i < STRATA_MODEL_MAX_CONV && c->hidden[i]; i++) {
      struct strata__layer l = {.kind = STRATA__LAYER_LINEAR, .index = i, .in = feat, .out = c->hidden[i],
                                .first = i == 0};
      char name[32];
      snprintf(name, sizeof name, "fc.%d", i);
      double f = 2.0 * (double)feat * (double)c->hidden[i];
      add_layer(m, &l, name, "linear", (uint64_t)(feat * c->hidden[i] + c->hidden[i]), f, i == 0 ? f : 2 * f,
                (uint64_t)(4 * (feat + c->hidden[i])), (uint64_t)(4 * c->hidden[i]));
      feat = c->hidden[i];
    }
  } else {
    int64_t ch = c->channels, sz = c->image;
    for (int i = 0; i < STRATA_MODEL_MAX_CONV && c->conv[i]; i++) {
      int64_t k = c->conv[i], r = c->kernel[i] ? c->kernel[i] : 3, st = c->stride[i] ? c->stride[i] : 1,
              pl = c->pool[i] ? c->pool[i] : 2, cs = sz / st, os = cs / pl;
      struct strata__layer l = {.kind = STRATA__LAYER_CONV, .index = i, .c = ch, .h = sz, .w = sz, .k = k, .r = r,
                                .stride = st, .pool = pl, .ch = cs, .cw = cs, .first = i == 0};
      l.in = ch * sz * sz;
      l.out = k * os * os;
      char name[32];
      snprintf(name, sizeof name, "conv.%d", i);
      double f = 2.0 * (double)k * (double)ch * (double)(r * r) * (double)(cs * cs);
      /* saved: input, conv output, (pooled:) ReLU output and pooling indices */
      uint64_t act = (uint64_t)(4 * (ch * sz * sz + (pl > 1 ? 2 : 1) * k * cs * cs + (pl > 1 ? l.out : 0)));
      add_layer(m, &l, name, "conv", (uint64_t)(k * ch * r * r), f, i == 0 ? f : 2 * f, act, (uint64_t)(4 * l.out));
      ch = k;
      sz = os;
    }
    feat = c->gap ? ch : ch * sz * sz;
    if (c->gap) { /* the classifier averages the last map first */
      struct strata__layer cl = {.kind = STRATA__LAYER_CLASSIFIER, .in = feat, .out = c->classes, .c = ch, .h = sz,
                                 .w = sz, .gap = 1};
      double f = 2.0 * (double)feat * (double)c->classes, pool = (double)(ch * sz * sz);
      add_layer(m, &cl, "gap+classifier", "classifier", (uint64_t)(feat * c->classes + c->classes), f + pool,
                2 * f + pool, (uint64_t)(4 * (ch * sz * sz + feat + 2 * c->classes)), 4);
      return STRATA_OK;
    }
  }
  struct strata__layer cl = {.kind = STRATA__LAYER_CLASSIFIER, .in = feat, .out = c->classes,
                             .first = m->nlayers == 0};
  double f = 2.0 * (double)feat * (double)c->classes;
  add_layer(m, &cl, "classifier", "classifier", (uint64_t)(feat * c->classes + c->classes), f, 2 * f,
            (uint64_t)(4 * (feat + 2 * c->classes)), 4);
  return STRATA_OK;
}

STRATA_API int strata_model_from_config(const struct strata_model_config *config, strata_model_t *out) {
  if (!config || !out)
    return strata__error(STRATA_ERR_INVALID, "strata_model_from_config: NULL argument");
  const char *src = config->name[0] ? config->name : "model";
  struct strata_model_config filled = *config;
  if (filled.kind == STRATA_MODEL_LLAMA) { /* a llama's 0 fields take Hugging Face's defaults (model.h) */
    if (!filled.kv_heads)
      filled.kv_heads = filled.heads;
    if (filled.rope_theta == 0)
      filled.rope_theta = 10000;
    if (filled.norm_eps == 0)
      filled.norm_eps = 1e-5;
  }
  config = &filled;
  TRY(validate(config, src));
  struct strata_model *m = calloc(1, sizeof *m);
  if (!m)
    return strata__error(STRATA_ERR_NOMEM, "out of memory building a model");
  m->cfg = *config;
  if (!m->cfg.name[0])
    snprintf(m->cfg.name, sizeof m->cfg.name, "%s", kind_name(config->kind));
  int rc = build_layers(m);
  if (rc) {
    strata_model_free(m);
    return rc;
  }
  *out = m;
  return STRATA_OK;
}

STRATA_API int strata_model_from_preset(const char *name, strata_model_t *out) {
  if (!name || !out)
    return strata__error(STRATA_ERR_INVALID, "strata_model_from_preset: NULL argument");
  for (size_t i = 0; i < NPRESETS; i++)
    if (strcmp(presets[i].name, name) == 0) {
      struct strata_model_config c = presets[i].cfg;
      snprintf(c.name, sizeof c.name, "%s", name);
      return strata_model_from_config(&c, out);
    }
  char list[512] = "";
  for (size_t i = 0; i < NPRESETS; i++) {
    strncat(list, presets[i].name, sizeof list - strlen(list) - 1);
    if (i + 1 < NPRESETS)
      strncat(list, ", ", sizeof list - strlen(list) - 1);
  }
  return strata__error(STRATA_ERR_NOT_FOUND, "unknown model preset '%s' (presets: %s)", name, list);
}

/* Read an integer field; absent keeps *v. */
static int json_int(json_t *obj, const char *src, const char *key, int64_t *v) {
  json_t *j = json_object_get(obj, key);
  if (!j)
    return STRATA_OK;
  if (!json_is_integer(j))
    return strata__error(STRATA_ERR_PARSE, "%s: \"%s\" must be an integer", src, key);
  *v = (int64_t)json_integer_value(j);
  return STRATA_OK;
}

static int json_list(json_t *obj, const char *src, const char *key, int64_t *v) {
  json_t *j = json_object_get(obj, key);
  if (!j)
    return STRATA_OK;
  if (!json_is_array(j) || json_array_size(j) > STRATA_MODEL_MAX_CONV)
    return strata__error(STRATA_ERR_PARSE, "%s: \"%s\" must be an array of at most %d integers", src, key,
                         STRATA_MODEL_MAX_CONV);
  memset(v, 0, STRATA_MODEL_MAX_CONV * sizeof *v);
  for (size_t i = 0; i < json_array_size(j); i++) {
    json_t *e = json_array_get(j, i);
    if (!json_is_integer(e) || json_integer_value(e) < 1)
      return strata__error(STRATA_ERR_PARSE, "%s: \"%s\"[%zu] must be a positive integer", src, key, i);
    v[i] = (int64_t)json_integer_value(e);
  }
  return STRATA_OK;
}

/* Read a number field (integer or real); absent keeps *v. */
static int json_num(json_t *obj, const char *src, const char *key, double *v) {
  json_t *j = json_object_get(obj, key);
  if (!j)
    return STRATA_OK;
  if (!json_is_number(j))
    return strata__error(STRATA_ERR_PARSE, "%s: \"%s\" must be a number", src, key);
  *v = json_number_value(j);
  return STRATA_OK;
}

/* A llama's own fields: n_kv_heads (absent: heads), rope_theta, norm_eps, and rope_scaling (absent or null: none; an
** object of rope_type "llama3" or "default" with Hugging Face's field names). */
static int llama_from_json(json_t *root, const char *src, struct strata_model_config *c) {
  TRY(json_int(root, src, "n_kv_heads", &c->kv_heads));
  c->rope_theta = 10000;
  c->norm_eps = 1e-5;
  TRY(json_num(root, src, "rope_theta", &c->rope_theta));
  TRY(json_num(root, src, "norm_eps", &c->norm_eps));
  json_t *rs = json_object_get(root, "rope_scaling");
  if (!rs || json_is_null(rs))
    return STRATA_OK;
  if (!json_is_object(rs))
    return strata__error(STRATA_ERR_PARSE, "%s: \"rope_scaling\" must be an object or null", src);
  static const char *const known[] = {"rope_type", "factor", "low_freq_factor", "high_freq_factor",
                                      "original_max_position_embeddings", NULL};
  const char *key;
  json_t *val;
  json_object_foreach(rs, key, val) {
    int ok = 0;
    for (int i = 0; known[i]; i++)
      ok |= strcmp(key, known[i]) == 0;
    if (!ok)
      return strata__error(STRATA_ERR_PARSE, "%s: unknown field \"rope_scaling.%s\"", src, key);
  }
  const char *type = json_string_value(json_object_get(rs, "rope_type"));
  if (!type)
    return strata__error(STRATA_ERR_PARSE, "%s: \"rope_scaling.rope_type\" must be a string (\"llama3\" or "
                         "\"default\")", src);
  if (strcmp(type, "default") == 0) {
    if (json_object_size(rs) > 1)
      return strata__error(STRATA_ERR_PARSE, "%s: \"rope_scaling\" of rope_type \"default\" takes no other field", src);
    return STRATA_OK;
  }
  if (strcmp(type, "llama3") != 0) {
    char esc[64];
    strata__escape(esc, sizeof esc, type);
    return strata__error(STRATA_ERR_UNSUPPORTED, "%s: \"rope_scaling.rope_type\" \"%s\" is not supported "
                         "(\"llama3\" or \"default\")", src, esc);
  }
  c->rope_scaling.type = STRATA_ROPE_LLAMA3;
  static const char *const need[] = {"factor", "low_freq_factor", "high_freq_factor",
                                     "original_max_position_embeddings", NULL};
  for (int i = 0; need[i]; i++)
    if (!json_object_get(rs, need[i]))
      return strata__error(STRATA_ERR_PARSE, "%s: \"rope_scaling\" of rope_type \"llama3\" needs \"%s\"", src, need[i]);
  TRY(json_num(rs, src, "factor", &c->rope_scaling.factor));
  TRY(json_num(rs, src, "low_freq_factor", &c->rope_scaling.low_freq_factor));
  TRY(json_num(rs, src, "high_freq_factor", &c->rope_scaling.high_freq_factor));
  return json_int(rs, src, "original_max_position_embeddings", &c->rope_scaling.original_context);
}

/* Parse a model object (the file format, also stored in checkpoints). */
static int config_from_json(json_t *root, const char *src, struct strata_model_config *c) {
  if (!json_is_object(root))
    return strata__error(STRATA_ERR_PARSE, "%s: a model file holds one JSON object", src);
  static const char *const known[] = {"kind",    "name",   "vocab",    "context", "d_model", "layers",
                                      "heads",   "d_ff",   "tied",     "image",   "channels", "classes",
                                      "hidden",  "conv",   "kernels",  "strides", "pools",   "gap",
                                      "n_kv_heads", "rope_theta", "norm_eps", "rope_scaling", NULL};
  const char *key;
  json_t *val;
  json_object_foreach(root, key, val) {
    int ok = 0;
    for (int i = 0; known[i]; i++)
      ok |= strcmp(key, known[i]) == 0;
    if (!ok)
      return strata__error(STRATA_ERR_PARSE, "%s: unknown field \"%s\"", src, key);
  }
  memset(c, 0, sizeof *c);
  json_t *kind = json_object_get(root, "kind");
  const char *k = json_string_value(kind);
  if (!k)
    return strata__error(STRATA_ERR_PARSE, "%s: \"kind\" must be \"gpt\", \"llama\", \"mlp\" or \"cnn\"", src);
  c->kind = strcmp(k, "gpt") == 0 ? STRATA_MODEL_GPT : strcmp(k, "mlp") == 0 ? STRATA_MODEL_MLP
          : strcmp(k, "cnn") == 0 ? STRATA_MODEL_CNN : strcmp(k, "llama") == 0 ? STRATA_MODEL_LLAMA : 0;
  if (!c->kind)
    return strata__error(STRATA_ERR_PARSE, "%s: unknown kind \"%s\" (gpt, llama, mlp, cnn)", src, k);
  json_t *name = json_object_get(root, "name");
  if (name && !json_is_string(name))
    return strata__error(STRATA_ERR_PARSE, "%s: \"name\" must be a string", src);
  /* the name is printed by the tools: control characters from the file are escaped here, once */
  strata__escape(c->name, sizeof c->name, name ? json_string_value(name) : src);
  TRY(json_int(root, src, "vocab", &c->vocab));
  TRY(json_int(root, src, "context", &c->context));
  TRY(json_int(root, src, "d_model", &c->d_model));
  TRY(json_int(root, src, "layers", &c->layers));
  TRY(json_int(root, src, "heads", &c->heads));
  TRY(json_int(root, src, "d_ff", &c->d_ff));
  json_t *tied = json_object_get(root, "tied");
  if (tied && !json_is_boolean(tied))
    return strata__error(STRATA_ERR_PARSE, "%s: \"tied\" must be true or false", src);
  c->tied = tied && json_is_true(tied);
  TRY(json_int(root, src, "image", &c->image));
  TRY(json_int(root, src, "channels", &c->channels));
  TRY(json_int(root, src, "classes", &c->classes));
  TRY(json_list(root, src, "hidden", c->hidden));
  TRY(json_list(root, src, "conv", c->conv));
  TRY(json_list(root, src, "kernels", c->kernel));
  TRY(json_list(root, src, "strides", c->stride));
  TRY(json_list(root, src, "pools", c->pool));
  json_t *gap = json_object_get(root, "gap");
  if (gap && !json_is_boolean(gap))
    return strata__error(STRATA_ERR_PARSE, "%s: \"gap\" must be true or false", src);
  c->gap = gap && json_is_true(gap);
  if (c->kind == STRATA_MODEL_GPT && !c->d_ff) /* d_model out of range is refused by validate(), first */
    c->d_ff = c->d_model > 0 && c->d_model <= MAX_DIM ? 4 * c->d_model : 0;
  if (c->kind == STRATA_MODEL_LLAMA && !json_object_get(root, "d_ff"))
    return strata__error(STRATA_ERR_PARSE, "%s: a llama model needs \"d_ff\" (its SwiGLU's intermediate width)", src);
  if (strata__model_text(c) && !c->vocab)
    c->vocab = 256;
  if (!strata__model_text(c) && !c->channels)
    c->channels = 1;
  if (c->kind == STRATA_MODEL_LLAMA)
    TRY(llama_from_json(root, src, c));
  const char *gpt_only[] = {"vocab", "context", "d_model", "layers", "heads", "d_ff", "tied", NULL};
  const char *img_only[] = {"image", "channels", "classes", "hidden", "conv", "kernels", "strides", "pools", "gap",
                            NULL};
  const char *llama_only[] = {"n_kv_heads", "rope_theta", "norm_eps", "rope_scaling", NULL};
  const char *const *wrong = strata__model_text(c) ? img_only : gpt_only;
  for (int i = 0; wrong[i]; i++)
    if (json_object_get(root, wrong[i]))
      return strata__error(STRATA_ERR_PARSE, "%s: field \"%s\" does not apply to a %s model", src, wrong[i], k);
  for (int i = 0; c->kind != STRATA_MODEL_LLAMA && llama_only[i]; i++)
    if (json_object_get(root, llama_only[i]))
      return strata__error(STRATA_ERR_PARSE, "%s: field \"%s\" does not apply to a %s model", src, llama_only[i], k);
  if (c->kind == STRATA_MODEL_MLP && json_object_get(root, "conv"))
    return strata__error(STRATA_ERR_PARSE, "%s: field \"conv\" does not apply to an mlp model", src);
  if (c->kind == STRATA_MODEL_CNN && json_object_get(root, "hidden"))
    return strata__error(STRATA_ERR_PARSE, "%s: field \"hidden\" does not apply to a cnn model", src);
  static const char *const cnn_only[] = {"kernels", "strides", "pools", "gap", NULL};
  for (int i = 0; c->kind == STRATA_MODEL_MLP && cnn_only[i]; i++)
    if (json_object_get(root, cnn_only[i]))
      return strata__error(STRATA_ERR_PARSE, "%s: field \"%s\" does not apply to an mlp model", src, cnn_only[i]);
  return STRATA_OK;
}

STRATA_API int strata_model_from_json(const char *text, const char *src, strata_model_t *out) {
  if (!text || !out)
    return strata__error(STRATA_ERR_INVALID, "strata_model_from_json: NULL argument");
  if (!src)
    src = "model JSON";
  json_error_t err;
  json_t *root = json_loads(text, 0, &err);
  if (!root)
    return strata__error(STRATA_ERR_PARSE, "%s: line %d: %s", src, err.line, err.text);
  struct strata_model_config c;
  int rc = config_from_json(root, src, &c);
  json_decref(root);
  if (rc)
    return rc;
  return strata_model_from_config(&c, out);
}

STRATA_API int strata_model_from_file(const char *path, strata_model_t *out) {
  if (!path || !out)
    return strata__error(STRATA_ERR_INVALID, "strata_model_from_file: NULL argument");
  FILE *f = NULL;
  TRY(strata__fopen_input(path, STRATA_ERR_IO, &f));
  json_error_t err;
  json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &err);
  fclose(f);
  if (!root)
    return strata__error(STRATA_ERR_PARSE, "%s: line %d: %s", path, err.line, err.text);
  struct strata_model_config c;
  int rc = config_from_json(root, path, &c);
  json_decref(root);
  if (rc)
    return rc;
  return strata_model_from_config(&c, out);
}

STRATA_API int strata_model_load(const char *preset_or_path, strata_model_t *out) {
  if (!preset_or_path || !out)
    return strata__error(STRATA_ERR_INVALID, "strata_model_load: NULL argument");
  for (size_t i = 0; i < NPRESETS; i++)
    if (strcmp(presets[i].name, preset_or_path) == 0)
      return strata_model_from_preset(preset_or_path, out);
  if (!strchr(preset_or_path, '/') && !strstr(preset_or_path, ".json")) {
    struct stat sb; /* stat, not open: a FIFO of that name must not block here */
    if (stat(preset_or_path, &sb) != 0)
      return strata_model_from_preset(preset_or_path, out); /* names the presets */
  }
  return strata_model_from_file(preset_or_path, out);
}

STRATA_API void strata_model_free(strata_model_t m) {
  if (!m)
    return;
  free(m->layers);
  free(m);
}

STRATA_API const struct strata_model_config *strata_model_config(strata_model_t m) { return m ? &m->cfg : NULL; }

STRATA_API int strata_model_layer_count(strata_model_t m) { return m ? m->nlayers : 0; }

STRATA_API int strata_model_layer(strata_model_t m, int index, struct strata_layer_info *info) {
  if (!m || !info)
    return strata__error(STRATA_ERR_INVALID, "strata_model_layer: NULL argument");
  if (index < 0 || index >= m->nlayers)
    return strata__error(STRATA_ERR_RANGE, "layer %d out of range (the model has %d)", index, m->nlayers);
  *info = m->layers[index].info;
  return STRATA_OK;
}

STRATA_API uint64_t strata_model_params(strata_model_t m) {
  uint64_t s = 0;
  for (int i = 0; m && i < m->nlayers; i++)
    s += m->layers[i].info.params;
  return s;
}

STRATA_API double strata_model_flops(strata_model_t m) {
  double s = 0;
  for (int i = 0; m && i < m->nlayers; i++)
    s += m->layers[i].info.fwd_flops + m->layers[i].info.bwd_flops;
  return s;
}

STRATA_API int strata_model_to_json(strata_model_t m, char **json) {
  if (!m || !json)
    return strata__error(STRATA_ERR_INVALID, "strata_model_to_json: NULL argument");
  const struct strata_model_config *c = &m->cfg;
  json_t *o = json_object();
  json_object_set_new(o, "kind", json_string(kind_name(c->kind)));
  json_object_set_new(o, "name", json_string(c->name));
  if (strata__model_text(c)) {
    json_object_set_new(o, "vocab", json_integer(c->vocab));
    json_object_set_new(o, "context", json_integer(c->context));
    json_object_set_new(o, "d_model", json_integer(c->d_model));
    json_object_set_new(o, "layers", json_integer(c->layers));
    json_object_set_new(o, "heads", json_integer(c->heads));
    json_object_set_new(o, "d_ff", json_integer(c->d_ff));
    json_object_set_new(o, "tied", json_boolean(c->tied));
    if (c->kind == STRATA_MODEL_LLAMA) { /* reals as %.17g: read back to the same doubles */
      json_object_set_new(o, "n_kv_heads", json_integer(c->kv_heads));
      json_object_set_new(o, "rope_theta", json_real(c->rope_theta));
      json_object_set_new(o, "norm_eps", json_real(c->norm_eps));
      if (c->rope_scaling.type == STRATA_ROPE_LLAMA3) {
        json_t *rs = json_object();
        json_object_set_new(rs, "rope_type", json_string("llama3"));
        json_object_set_new(rs, "factor", json_real(c->rope_scaling.factor));
        json_object_set_new(rs, "low_freq_factor", json_real(c->rope_scaling.low_freq_factor));
        json_object_set_new(rs, "high_freq_factor", json_real(c->rope_scaling.high_freq_factor));
        json_object_set_new(rs, "original_max_position_embeddings", json_integer(c->rope_scaling.original_context));
        json_object_set_new(o, "rope_scaling", rs);
      }
    }
  } else {
    json_object_set_new(o, "image", json_integer(c->image));
    json_object_set_new(o, "channels", json_integer(c->channels));
    json_object_set_new(o, "classes", json_integer(c->classes));
    json_t *a = json_array();
    const int64_t *w = c->kind == STRATA_MODEL_MLP ? c->hidden : c->conv;
    for (int i = 0; i < STRATA_MODEL_MAX_CONV && w[i]; i++)
      json_array_append_new(a, json_integer(w[i]));
    json_object_set_new(o, c->kind == STRATA_MODEL_MLP ? "hidden" : "conv", a);
    /* the high-resolution fields only when set, so that a small cnn's JSON stays as it was */
    const int64_t *lists[3] = {c->kernel, c->stride, c->pool};
    const char *keys[3] = {"kernels", "strides", "pools"};
    for (int k = 0; c->kind == STRATA_MODEL_CNN && k < 3; k++) {
      int any = 0;
      for (int i = 0; i < STRATA_MODEL_MAX_CONV; i++)
        any |= lists[k][i] != 0;
      if (!any)
        continue;
      json_t *l = json_array();
      for (int i = 0; i < STRATA_MODEL_MAX_CONV && c->conv[i]; i++)
        json_array_append_new(l, json_integer(lists[k][i] ? lists[k][i] : k == 0 ? 3 : k == 1 ? 1 : 2));
      json_object_set_new(o, keys[k], l);
    }
    if (c->kind == STRATA_MODEL_CNN && c->gap)
      json_object_set_new(o, "gap", json_true());
  }
  char *s = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT);
  json_decref(o);
  if (!s)
    return strata__error(STRATA_ERR_NOMEM, "out of memory writing a model as JSON");
  *json = s;
  return STRATA_OK;
}
