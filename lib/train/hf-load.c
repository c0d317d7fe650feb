/* SPDX-License-Identifier: MIT */
/* hf-load.c — a Hugging Face GPT-2's model.safetensors into a trainer, however the trainer is cut
** (strata_trainer_load_hf). The config is read by io/hf.c. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <strata/checkpoint.h>
#include <strata/hf.h>

#include "core/core.h"
#include "io/hf.h"
#include "train/trainer.h"

/* Is `name` one of the attention-mask buffers older transformers saved (h.N.attn.bias, h.N.attn.masked_bias)? */
static int hf_mask_buffer(const char *name) {
  if (strncmp(name, STRATA__HF_PREFIX, strlen(STRATA__HF_PREFIX)) == 0)
    name += strlen(STRATA__HF_PREFIX);
  if (strncmp(name, "h.", 2) != 0)
    return 0;
  const char *dot = strchr(name + 2, '.');
  return dot && (strcmp(dot, ".attn.bias") == 0 || strcmp(dot, ".attn.masked_bias") == 0);
}

STRATA_API int strata_trainer_load_hf(strata_trainer_t tr, const char *dir) {
  if (!tr || !dir)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_load_hf: NULL argument");
  struct strata_model_config want;
  TRY(strata__hf_read_config(dir, &want));
  const struct strata_model_config *have = &tr->model->cfg;
  if (have->kind != STRATA_MODEL_GPT || have->vocab != want.vocab || have->context != want.context ||
      have->d_model != want.d_model || have->layers != want.layers || have->heads != want.heads ||
      have->d_ff != want.d_ff || (have->tied && !want.tied))
    return strata__error(STRATA_ERR_SHAPE, "%s: config.json describes another model than the trainer's '%s'", dir,
                         have->name);
  char path[4096];
  TRY(strata__hf_path(path, sizeof path, dir, "model.safetensors"));
  if (access(path, F_OK) != 0) {
    char other[4096];
    if (strata__hf_path(other, sizeof other, dir, "model.safetensors.index.json") == STRATA_OK && access(other, F_OK) == 0)
      return strata__error(STRATA_ERR_UNSUPPORTED, "%s: the weights are sharded (model.safetensors.index.json); strata "
                           "reads one model.safetensors", dir);
    if (strata__hf_path(other, sizeof other, dir, "pytorch_model.bin") == STRATA_OK && access(other, F_OK) == 0)
      return strata__error(STRATA_ERR_UNSUPPORTED, "%s: the weights are a pickle (pytorch_model.bin); strata reads "
                           "model.safetensors (save_pretrained(..., safe_serialization=True) writes it)", dir);
    return strata__error(STRATA_ERR_NOT_FOUND, "%s: no model.safetensors", dir);
  }
  strata_safetensors_t f = NULL;
  /* bf16 and fp16 weights (most published checkpoints are bf16) become the trainer's float32 exactly */
  int rc = strata_safetensors_read_flags(path, STRATA_ST_READ_WIDEN, &f);
  if (rc == STRATA_ERR_UNSUPPORTED) {
    char msg[768];
    snprintf(msg, sizeof msg, "%s", strata_last_error());
    return strata__error(rc, "%s (in transformers, model.float().save_pretrained(DIR) writes fp32)", msg);
  }
  if (rc)
    return rc;
  size_t total = 0;
  for (int s = 0; s < tr->nstages; s++) /* whole tensors, however the trainer is cut */
    for (int t = 0; t < tr->st[s]->ntensors; t++)
      total += tr->st[s]->tensors[t].full_n;
  size_t nfile = strata_safetensors_count(f);
  float *host = malloc((total ? total : 1) * sizeof *host);
  unsigned char *used = calloc(nfile ? nfile : 1, 1);
  rc = (!host || !used) ? strata__error(STRATA_ERR_NOMEM, "out of host memory loading %s", path) : STRATA_OK;
  size_t at = 0;
  for (int s = 0; s < tr->nstages && !rc; s++) {
    const struct strata__stage *st = tr->st[s];
    for (int t = 0; t < st->ntensors && !rc; t++) {
      const struct strata__tensor *x = &st->tensors[t];
      /* GPT2LMHeadModel's names, then the bare GPT2Model's; lm_head sits outside the transformer */
      char full[128];
      snprintf(full, sizeof full, "%s%s", strcmp(x->name, "lm_head.weight") == 0 ? "" : STRATA__HF_PREFIX, x->name);
      const char *name = full;
      int ndim;
      int64_t shape[STRATA_ST_MAX_DIMS];
      const float *data;
      rc = strata_safetensors_get(f, name, &ndim, shape, &data);
      if (rc == STRATA_ERR_NOT_FOUND) {
        name = x->name;
        rc = strata_safetensors_get(f, name, &ndim, shape, &data);
      }
      /* an untied trainer of a tied checkpoint: the head starts as a copy of the embedding */
      if (rc == STRATA_ERR_NOT_FOUND && want.tied && strcmp(x->name, "lm_head.weight") == 0) {
        name = STRATA__HF_PREFIX "wte.weight";
        rc = strata_safetensors_get(f, name, &ndim, shape, &data);
        if (rc == STRATA_ERR_NOT_FOUND) {
          name = "wte.weight";
          rc = strata_safetensors_get(f, name, &ndim, shape, &data);
        }
      }
      if (rc == STRATA_ERR_NOT_FOUND) {
        rc = strata__error(STRATA_ERR_PARSE, "%s: tensor '%s' is missing", path, full);
        break;
      }
      if (!rc && (ndim != x->ndim || memcmp(shape, x->full, (size_t)ndim * sizeof *shape) != 0)) {
        char a[64] = "", b[64] = "";
        for (int d = 0; d < x->ndim; d++)
          snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", d ? ", " : "", (long long)x->full[d]);
        for (int d = 0; d < ndim && d < STRATA_ST_MAX_DIMS; d++)
          snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", d ? ", " : "", (long long)shape[d]);
        rc = strata__error(STRATA_ERR_SHAPE, "%s: tensor '%s' is [%s], the model wants [%s]", path, name, b, a);
      }
      if (rc)
        break;
      memcpy(host + at, data, x->full_n * sizeof *host);
      at += x->full_n;
      for (size_t i = 0; i < nfile; i++)
        if (strcmp(strata_safetensors_name(f, i), name) == 0)
          used[i] = 1;
    }
  }
  /* every tensor of the file has its place, or is a mask buffer, or a tied head's copy of wte */
  for (size_t i = 0; i < nfile && !rc; i++) {
    const char *name = strata_safetensors_name(f, i);
    if (used[i] || hf_mask_buffer(name))
      continue;
    if (want.tied && have->tied && strcmp(name, "lm_head.weight") == 0) {
      const float *head, *wte;
      int64_t hs[STRATA_ST_MAX_DIMS], ws[STRATA_ST_MAX_DIMS];
      int hn, wn;
      if (strata_safetensors_get(f, name, &hn, hs, &head) == STRATA_OK &&
          (strata_safetensors_get(f, STRATA__HF_PREFIX "wte.weight", &wn, ws, &wte) == STRATA_OK ||
           strata_safetensors_get(f, "wte.weight", &wn, ws, &wte) == STRATA_OK) &&
          hn == wn && memcmp(hs, ws, sizeof hs) == 0 &&
          memcmp(head, wte, (size_t)(hs[0] * hs[1]) * sizeof *head) == 0)
        continue;
      rc = strata__error(STRATA_ERR_UNSUPPORTED, "%s: lm_head.weight differs from wte.weight but config.json says "
                         "tie_word_embeddings (the default: true)", path);
      break;
    }
    rc = strata__error(STRATA_ERR_UNSUPPORTED, "%s: tensor '%s' has no place in a GPT-2 model", path, name);
  }
  if (!rc)
    rc = strata_trainer_set_params(tr, host, total);
  free(host);
  free(used);
  strata_safetensors_free(f);
  return rc;
}

