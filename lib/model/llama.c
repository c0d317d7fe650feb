/* SPDX-License-Identifier: MIT */
/* llama.c — what a llama stage holds besides GPT's: its blocks' tensors and saved activations, RoPE's table. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "model/stage.h"
#include "core/core.h"

/*
** The nine tensors of llama block `index` into o: Hugging Face's names less
** "model.", the projections [in, out]. Sharded, a slice holds whole
** query-head groups' worth of heads: q_proj's columns of its heads, o_proj's
** matching rows; k_proj's and v_proj's columns of the key/value heads they
** read — tp dividing n_kv_heads, n_kv_heads / tp of them; tp a multiple of
** it, the one its query heads share, which the tp / n_kv_heads slices of
** that group each hold (copies; n_kv_heads 1: whole on every slice);
** gate_proj's and up_proj's columns, down_proj's rows; the norms whole
** (initialised to 1). o_proj and down_proj start from `proj`'s spread, the
** others from `std`'s.
*/
int strata__llama_tensors(const struct strata_model_config *c, int index, const struct strata__shard *sh, float std,
                          float proj, struct strata__tensor *o) {
  const int64_t D = c->d_model, F = c->d_ff, A = c->d_model, Akv = c->kv_heads * (c->d_model / c->heads);
  static const char *const sfx[] = {"input_layernorm.weight",  "self_attn.q_proj.weight",
                                    "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                                    "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                                    "mlp.gate_proj.weight",    "mlp.up_proj.weight",
                                    "mlp.down_proj.weight"};
  const int64_t rows[] = {D, D, D, D, A, D, D, D, F}, cols[] = {0, A, Akv, Akv, D, 0, F, F, D};
  /* the key/value heads' cut: the slice's group of the n_kv_heads where tp exceeds them */
  const int copies = sh && sh->size > c->kv_heads ? (int)(sh->size / c->kv_heads) : 1;
  const struct strata__shard kv = {sh ? sh->rank / copies : 0, sh ? sh->size / copies : 1};
  char n[64];
  for (int j = 0; j < 9; j++) {
    snprintf(n, sizeof n, "layers.%d.%s", index, sfx[j]);
    const int norm = cols[j] == 0, out = j == 4 || j == 8, kvp = j == 2 || j == 3;
    strata__tensor_def(&o[j], n, norm ? 1 : 2, rows[j], cols[j], 0, 0, !norm, norm ? 0 : out ? proj : std, norm);
    if (!norm)
      strata__tensor_shard(&o[j], out ? 0 : -1, 1, kvp ? &kv : sh);
    if (kvp)
      o[j].copies = copies;
  }
  return 9;
}

int strata__llama_tp_check(const struct strata_model_config *c, int tp, const char *what, int code) {
  if (tp <= 1)
    return STRATA_OK;
  const int64_t kv = c->kv_heads;
  if (kv % tp && tp % kv)
    return strata__error(code, "%s: tp %d neither divides n_kv_heads %lld nor is a multiple of it (a slice holds whole "
                         "key/value heads, or one replicated over tp / n_kv_heads slices)", what, tp, (long long)kv);
  if (c->heads % tp)
    return strata__error(code, "%s: tp %d does not divide the model's %lld heads (a slice holds whole query heads)",
                         what, tp, (long long)c->heads);
  if (c->d_ff % tp)
    return strata__error(code, "%s: tp %d does not divide the model's d_ff %lld", what, tp, (long long)c->d_ff);
  return STRATA_OK;
}

struct strata__llama_saved strata__llama_layout(const struct strata__dims *d) {
  struct strata__llama_saved s;
  const int a = d->act;
  /* the norms' outputs and rstd and the residual x_mid: the slice's Rs rows (R but with seqpar) */
  const size_t RD = strata__units((size_t)(d->Rs * d->D), a), R = (size_t)d->Rs,
               RF = strata__units((size_t)(d->R * d->F), a);
  s.ln1 = 0;
  s.rstd1 = s.ln1 + RD;
  s.qkv = s.rstd1 + R;
  /* selective recomputation: the attention's output and log-sum-exps in the stage's rcbuf (att | lse), as GPT's */
  const int sel = d->rc == STRATA_RECOMPUTE_SELECTIVE;
  s.lse = s.qkv + strata__units((size_t)(d->R * (d->A + 2 * d->Akv)), a);
  s.att = s.lse + (sel ? 0 : (size_t)(d->B * d->H * d->T));
  s.xmid = s.att + (sel ? 0 : strata__units((size_t)(d->R * d->A), a));
  s.ln2 = s.xmid + RD;
  s.rstd2 = s.ln2 + RD;
  s.gu = s.rstd2 + R;
  s.h = s.gu + strata__units((size_t)(2 * d->R * d->F), a);
  s.end = s.h + RF;
  return s;
}

size_t strata__rope_floats(const struct strata_model_config *c) { return (size_t)(c->d_model / c->heads / 2); }

/* The inverse frequencies of the model's rope_theta and rope_scaling, computed in double by strata_rope_inv_freq and
** rounded to float (as Hugging Face's float32 inv_freq is), uploaded to a buffer of the stage's device. */
int strata__rope_table(struct strata__stage *st) {
  const struct strata_model_config *c = &st->model->cfg;
  const size_t n = strata__rope_floats(c);
  double *f = malloc(n * sizeof *f);
  float *h = malloc(n * sizeof *h);
  int rc = f && h ? STRATA_OK : strata__error(STRATA_ERR_NOMEM, "out of host memory");
  if (!rc)
    rc = strata_rope_inv_freq(c, c->d_model / c->heads, f);
  for (size_t i = 0; !rc && i < n; i++)
    h[i] = (float)f[i];
  if (!rc)
    rc = strata_buffer_new(st->dev, n * 4, &st->rope);
  if (!rc)
    rc = strata_buffer_upload(st->q, st->rope, 0, h, n * 4);
  free(f);
  free(h);
  return rc;
}
