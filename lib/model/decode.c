/* SPDX-License-Identifier: MIT */
/* decode.c — one token at a time through a whole-model stage (GPT or llama) with each block's keys and values kept. */
#include "config.h"

#include <math.h>
#include <stdlib.h>

#include "model/stage.h"
#include "core/core.h"

#define AT(b, o) strata_mem((b), (size_t)(o))

/*
** The decoder: for each block a cache of `ctx` q|k|v rows (the block's
** fused projection row, width W = A + 2 Akv, k rotated for a llama), of
** which rows [0, pos) are filled; and one work buffer for the one new row:
** x | y | xmid | ln | hidden (gate|up + silu*up, or pre/post GELU) | att |
** scores | probs | mean | rstd | logits | ids (int32 token, position).
*/
struct strata__decoder {
  struct strata__stage *st;
  int64_t pos, ctx, D, H, KV, hd, A, Akv, W, F, V;
  int llama, nlayers;
  int32_t ids[2];         /* the token and its position, as written to the work buffer (until the step's finish) */
  strata_buffer_t *cache; /* [nlayers]: a block's cache, NULL for the embedding and head */
  strata_buffer_t work;
  size_t o_x, o_y, o_xmid, o_ln, o_h, o_att, o_sc, o_pr, o_mean, o_rstd, o_logits, o_ids;
};

#define WK(d, o) AT((d)->work, (d)->o)
#define PRM(d, t, i) strata__stage_param((d)->st, (t)[i].off)

int strata__decoder_new(struct strata__stage *st, struct strata__decoder **out) {
  *out = NULL;
  if (st->act != STRATA_FLOAT32)
    return strata__error(STRATA_ERR_UNSUPPORTED, "KV-cache decoding: bf16 precision is not in this version (float32 "
                         "only)");
  if (st->zero3 || st->tp.size > 1 || st->sp.size > 1)
    return strata__error(STRATA_ERR_UNSUPPORTED, "KV-cache decoding: a sharded stage (tp, ZeRO-3) is not in this "
                         "version");
  const struct strata_model_config *cfg = &st->model->cfg;
  struct strata__dims dm = strata__stage_dims(st);
  struct strata__decoder *d = calloc(1, sizeof *d);
  if (!d)
    return strata__error(STRATA_ERR_NOMEM, "KV-cache decoding: out of host memory");
  d->st = st;
  d->nlayers = strata__stage_layer_count(st);
  d->ctx = cfg->context;
  d->llama = dm.rms;
  d->D = dm.D, d->H = dm.H, d->hd = dm.hd, d->A = dm.A, d->F = dm.F, d->V = dm.V;
  d->KV = d->llama ? dm.KV : dm.H;
  d->Akv = d->llama ? dm.Akv : dm.A;
  d->W = d->A + 2 * d->Akv;
  size_t u = 0;
#define PLACE(field, n) (d->field = u, u += (size_t)(n))
  PLACE(o_x, d->D);
  PLACE(o_y, d->D);
  PLACE(o_xmid, d->D);
  PLACE(o_ln, d->D);
  PLACE(o_h, 3 * d->F);
  PLACE(o_att, d->A);
  PLACE(o_sc, d->H * d->ctx);
  PLACE(o_pr, d->H * d->ctx);
  PLACE(o_mean, 1);
  PLACE(o_rstd, 1);
  PLACE(o_logits, d->V);
  PLACE(o_ids, 2);
#undef PLACE
  int rc = STRATA_OK;
  d->cache = calloc((size_t)d->nlayers, sizeof *d->cache);
  if (!d->cache)
    rc = strata__error(STRATA_ERR_NOMEM, "KV-cache decoding: out of host memory");
  if (!rc)
    rc = strata_buffer_new(st->dev, u * 4, &d->work);
  for (int i = 0; i < d->nlayers && !rc; i++) {
    enum strata__layer_kind k = strata__stage_layer_at(st, i)->kind;
    if (k == STRATA__LAYER_BLOCK || k == STRATA__LAYER_LLAMA_BLOCK)
      rc = strata_buffer_new(st->dev, (size_t)(d->ctx * d->W) * 4, &d->cache[i]);
    else if (k != STRATA__LAYER_EMBED && k != STRATA__LAYER_LM_HEAD)
      rc = strata__error(STRATA_ERR_UNSUPPORTED, "KV-cache decoding: not a text model");
  }
  if (rc) {
    strata__decoder_free(d);
    return rc;
  }
  *out = d;
  return STRATA_OK;
}

void strata__decoder_free(struct strata__decoder *d) {
  if (!d)
    return;
  for (int i = 0; d->cache && i < d->nlayers; i++)
    if (d->cache[i])
      strata_buffer_free(d->cache[i]);
  free(d->cache);
  if (d->work)
    strata_buffer_free(d->work);
  free(d);
}

int64_t strata__decoder_pos(const struct strata__decoder *d) { return d->pos; }

void strata__decoder_reset(struct strata__decoder *d) { d->pos = 0; }

/* y[1, n] = x[1, k] W[k, n] (+ b): a projection of the one row. */
static int row_proj(const struct strata__decoder *d, int64_t k, int64_t n, strata_mem_t x, strata_mem_t W,
                    strata_mem_t b, strata_mem_t y) {
  TRY(strata_gemm(d->st->q, 0, 0, 1, n, k, 1, x, k, 0, W, n, 0, 0, y, n, 0, 1));
  return b.buf ? strata_bias_add(d->st->q, y, b, 1, n) : STRATA_OK;
}

/*
** The one new query (row pos of the cache, q at its columns 0..A) over the
** cached keys and values 0..pos: for each key/value head g, its G = H / KV
** query heads' scores, their softmax, and the weighted values. The fused
** attention's result, to float rounding (two GEMMs around a softmax).
*/
static int row_attention(const struct strata__decoder *d, strata_buffer_t cache) {
  const int64_t P = d->pos + 1, G = d->H / d->KV, hd = d->hd, W = d->W;
  strata_queue_t q = d->st->q;
  TRY(strata_gemm(q, 0, 1, G, P, hd, 1, AT(cache, d->pos * W), hd, G * hd, AT(cache, d->A), W, hd, 0, WK(d, o_sc), P,
                  G * P, d->KV));
  TRY(strata_softmax_fwd(q, WK(d, o_sc), WK(d, o_pr), d->H, P, 1.0f / sqrtf((float)hd), 0));
  return strata_gemm(q, 0, 0, G, hd, P, 1, WK(d, o_pr), P, G * P, AT(cache, d->A + d->Akv), W, hd, 0, WK(d, o_att),
                     hd, G * hd, d->KV);
}

enum { LN1_W, LN1_B, ATTN_W, ATTN_B, PROJ_W, PROJ_B, LN2_W, LN2_B, FC_W, FC_B, FCP_W, FCP_B };
enum { LL_IN_NORM, LL_Q, LL_K, LL_V, LL_O, LL_POST_NORM, LL_GATE, LL_UP, LL_DOWN };

/* A GPT block on the one row x into y: the forward's ops (lib/model/layers.c block_fwd) with one row. */
static int gpt_row(const struct strata__decoder *d, const struct strata__tensor *t, strata_buffer_t cache) {
  strata_queue_t q = d->st->q;
  const int64_t D = d->D, A = d->A, F = d->F;
  strata_mem_t x = WK(d, o_x), xmid = WK(d, o_xmid), ln = WK(d, o_ln);
  TRY(strata_layernorm_fwd(q, x, PRM(d, t, LN1_W), PRM(d, t, LN1_B), ln, WK(d, o_mean), WK(d, o_rstd), 1, D, 1e-5f));
  TRY(row_proj(d, D, 3 * A, ln, PRM(d, t, ATTN_W), PRM(d, t, ATTN_B), AT(cache, d->pos * d->W)));
  TRY(row_attention(d, cache));
  TRY(row_proj(d, A, D, WK(d, o_att), PRM(d, t, PROJ_W), PRM(d, t, PROJ_B), xmid));
  TRY(strata_add(q, xmid, x, xmid, D));
  TRY(strata_layernorm_fwd(q, xmid, PRM(d, t, LN2_W), PRM(d, t, LN2_B), ln, WK(d, o_mean), WK(d, o_rstd), 1, D,
                           1e-5f));
  TRY(row_proj(d, D, F, ln, PRM(d, t, FC_W), PRM(d, t, FC_B), WK(d, o_h)));
  TRY(strata_gelu_fwd(q, WK(d, o_h), AT(d->work, d->o_h + (size_t)F), F));
  TRY(row_proj(d, F, D, AT(d->work, d->o_h + (size_t)F), PRM(d, t, FCP_W), PRM(d, t, FCP_B), WK(d, o_y)));
  return strata_add(q, WK(d, o_y), xmid, x, D);
}

/* A llama block on the one row x (into x): layers.c llama_block_fwd's ops with one row, RoPE at position pos. */
static int llama_row(const struct strata__decoder *d, const struct strata__tensor *t, strata_buffer_t cache) {
  strata_queue_t q = d->st->q;
  const int64_t D = d->D, A = d->A, Akv = d->Akv, F = d->F, W = d->W;
  const float eps = (float)d->st->model->cfg.norm_eps;
  strata_mem_t x = WK(d, o_x), xmid = WK(d, o_xmid), ln = WK(d, o_ln), nul = {0};
  strata_mem_t row = AT(cache, d->pos * W), gu = WK(d, o_h), h = AT(d->work, d->o_h + (size_t)(2 * F));
  TRY(strata_rmsnorm_fwd(q, x, PRM(d, t, LL_IN_NORM), ln, WK(d, o_rstd), 1, D, eps));
  TRY(row_proj(d, D, A, ln, PRM(d, t, LL_Q), nul, row));
  TRY(row_proj(d, D, Akv, ln, PRM(d, t, LL_K), nul, AT(cache, d->pos * W + A)));
  TRY(row_proj(d, D, Akv, ln, PRM(d, t, LL_V), nul, AT(cache, d->pos * W + A + Akv)));
  TRY(strata_rope_fwd(q, row, row, AT(d->st->rope, 0), 1, 1, d->H + d->KV, d->hd, W, d->pos));
  TRY(row_attention(d, cache));
  TRY(row_proj(d, A, D, WK(d, o_att), PRM(d, t, LL_O), nul, xmid));
  TRY(strata_add(q, xmid, x, xmid, D));
  TRY(strata_rmsnorm_fwd(q, xmid, PRM(d, t, LL_POST_NORM), ln, WK(d, o_rstd), 1, D, eps));
  TRY(strata_gemm(q, 0, 0, 1, F, D, 1, ln, D, 0, PRM(d, t, LL_GATE), F, 0, 0, gu, 2 * F, 0, 1));
  TRY(strata_gemm(q, 0, 0, 1, F, D, 1, ln, D, 0, PRM(d, t, LL_UP), F, 0, 0, AT(d->work, d->o_h + (size_t)F), 2 * F, 0,
                  1));
  TRY(strata_swiglu_fwd(q, gu, h, 1, F));
  TRY(row_proj(d, F, D, h, PRM(d, t, LL_DOWN), nul, WK(d, o_y)));
  return strata_add(q, WK(d, o_y), xmid, x, D);
}

/* The head on the one row: final norm, output projection (the embedding's when tied) into the logits. */
static int head_row(const struct strata__decoder *d, const struct strata__tensor *t) {
  strata_queue_t q = d->st->q;
  const struct strata__stage *st = d->st;
  strata_mem_t x = WK(d, o_x), ln = WK(d, o_ln);
  if (d->llama)
    TRY(strata_rmsnorm_fwd(q, x, PRM(d, t, 0), ln, WK(d, o_rstd), 1, d->D, (float)st->model->cfg.norm_eps));
  else
    TRY(strata_layernorm_fwd(q, x, PRM(d, t, 0), PRM(d, t, 1), ln, WK(d, o_mean), WK(d, o_rstd), 1, d->D, 1e-5f));
  strata_mem_t W = st->model->cfg.tied ? strata__stage_param(st, st->tensors[st->layer_tensor[0]].off)
                                       : PRM(d, t, d->llama ? 1 : 2);
  return strata_gemm(q, 0, 1, 1, d->V, d->D, 1, ln, d->D, 0, W, d->D, 0, 0, WK(d, o_logits), d->V, 0, 1);
}

int strata__decoder_step(struct strata__decoder *d, int32_t token, float *logits) {
  struct strata__stage *st = d->st;
  if (d->pos >= d->ctx)
    return strata__error(STRATA_ERR_RANGE, "KV-cache decoding: the context of %lld is full", (long long)d->ctx);
  if (token < 0 || token >= d->V)
    return strata__error(STRATA_ERR_RANGE, "KV-cache decoding: token %lld is outside the vocabulary (%lld)",
                         (long long)token, (long long)d->V);
  strata_queue_t q = st->q;
  d->ids[0] = token;
  d->ids[1] = (int32_t)d->pos;
  TRY(strata_buffer_write(q, d->work, d->o_ids * 4, d->ids, sizeof d->ids));
  strata_mem_t tok = AT(d->work, d->o_ids), pos = AT(d->work, d->o_ids + 1);
  for (int i = 0; i < d->nlayers; i++) {
    const struct strata__tensor *t = &st->tensors[st->layer_tensor[i]];
    switch (strata__stage_layer_at(st, i)->kind) {
    case STRATA__LAYER_EMBED:
      TRY(strata_embedding_fwd(q, tok, PRM(d, t, 0), WK(d, o_x), 1, d->D, d->V));
      if (!d->llama) {
        TRY(strata_embedding_fwd(q, pos, PRM(d, t, 1), WK(d, o_y), 1, d->D, d->ctx));
        TRY(strata_add(q, WK(d, o_x), WK(d, o_y), WK(d, o_x), d->D));
      }
      break;
    case STRATA__LAYER_BLOCK: TRY(gpt_row(d, t, d->cache[i])); break;
    case STRATA__LAYER_LLAMA_BLOCK: TRY(llama_row(d, t, d->cache[i])); break;
    case STRATA__LAYER_LM_HEAD: /* a prefill's rows need no logits */
      if (logits)
        TRY(head_row(d, t));
      break;
    default: return strata__error(STRATA_ERR_UNSUPPORTED, "KV-cache decoding: not a text model");
    }
  }
  d->pos++;
  if (!logits) /* (the ids stay unchanged until the queue has run this step) */
    return strata_queue_finish(q);
  TRY(strata_buffer_read(q, d->work, d->o_logits * 4, logits, (size_t)d->V * 4));
  return strata_queue_finish(q);
}
