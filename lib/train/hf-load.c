/* SPDX-License-Identifier: MIT */
/* hf-load.c — a Hugging Face GPT-2's or Llama's weights (one model.safetensors, or shards named by
** model.safetensors.index.json) into a trainer, however the trainer is cut (strata_trainer_load_hf). The config is
** read by io/hf.c. */
#include "config.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <strata/checkpoint.h>
#include <strata/hf.h>

#include "core/core.h"
#include "core/file.h"
#include "io/hf.h"
#include "train/trainer.h"

/* One whole tensor of the trainer: where it goes in the host buffer and what the file calls it. */
struct hf_slot {
  const struct strata__tensor *x;
  char name[160];  /* the Hugging Face name */
  char alt[160];   /* another name read for it ("" none): GPT2Model's, without "transformer." */
  size_t at;       /* its first float in the host buffer */
  int transpose;   /* the file holds the [in, out] matrix as torch.nn.Linear's [out, in] */
  int filled;
};

struct hf_load {
  const struct strata_model_config *have, *want;
  struct hf_slot *slots;
  int nslots;
  int embed, head;   /* the slots of the embedding and of the head (-1: none, a tied trainer) */
  float *host;
  size_t total;
  float *file_head;  /* a tied checkpoint's own lm_head.weight, for a tied trainer to compare with the embedding */
  char head_from[4096];
};

/* Is `name` a buffer older transformers saved beside the weights: GPT-2's attention masks (h.N.attn.bias,
** h.N.attn.masked_bias), Llama's rotary inverse frequencies (layers.N.self_attn.rotary_emb.inv_freq)? */
static int hf_buffer(const char *name) {
  const char *dot = strrchr(name, '.');
  if (dot && strcmp(dot, ".inv_freq") == 0 && strstr(name, "rotary_emb"))
    return 1;
  if (strncmp(name, STRATA__HF_PREFIX, strlen(STRATA__HF_PREFIX)) == 0)
    name += strlen(STRATA__HF_PREFIX);
  if (strncmp(name, "h.", 2) != 0)
    return 0;
  dot = strchr(name + 2, '.');
  return dot && (strcmp(dot, ".attn.bias") == 0 || strcmp(dot, ".attn.masked_bias") == 0);
}

/* Does the trainer's model match the config's (for a tied checkpoint, its untied form too)? */
static int hf_same_model(const struct strata_model_config *have, const struct strata_model_config *want) {
  if (have->kind != want->kind || have->vocab != want->vocab || have->d_model != want->d_model ||
      have->layers != want->layers || have->heads != want->heads || have->d_ff != want->d_ff ||
      (have->tied && !want->tied))
    return 0;
  if (have->kind == STRATA_MODEL_GPT)
    return have->context == want->context;
  /* a Llama has no position table: any context up to the config's */
  return have->context <= want->context && have->kv_heads == want->kv_heads && have->norm_eps == want->norm_eps &&
         have->rope_theta == want->rope_theta && have->rope_scaling.type == want->rope_scaling.type &&
         (have->rope_scaling.type == STRATA_ROPE_DEFAULT ||
          (have->rope_scaling.factor == want->rope_scaling.factor &&
           have->rope_scaling.low_freq_factor == want->rope_scaling.low_freq_factor &&
           have->rope_scaling.high_freq_factor == want->rope_scaling.high_freq_factor &&
           have->rope_scaling.original_context == want->rope_scaling.original_context));
}

/* The slots of every whole tensor of the trainer, in the order strata_trainer_set_params takes them. */
static int hf_slots(strata_trainer_t tr, struct hf_load *L) {
  int n = 0;
  for (int s = 0; s < tr->nstages; s++)
    n += tr->st[s]->ntensors;
  L->slots = calloc(n ? (size_t)n : 1, sizeof *L->slots);
  if (!L->slots)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory loading a Hugging Face model");
  L->embed = L->head = -1;
  const int llama = L->have->kind == STRATA_MODEL_LLAMA;
  for (int s = 0; s < tr->nstages; s++)
    for (int t = 0; t < tr->st[s]->ntensors; t++) {
      struct hf_slot *o = &L->slots[L->nslots];
      const struct strata__tensor *x = &tr->st[s]->tensors[t];
      const int head = strcmp(x->name, "lm_head.weight") == 0;
      o->x = x;
      o->at = L->total;
      L->total += x->full_n;
      if (llama) {
        snprintf(o->name, sizeof o->name, "%s%s", head ? "" : STRATA__HF_LLAMA_PREFIX, x->name);
        o->transpose = strata__hf_llama_transposed(L->have, x->name, x->ndim, x->full);
      } else {
        /* GPT2LMHeadModel's names, then the bare GPT2Model's; lm_head sits outside the transformer */
        snprintf(o->name, sizeof o->name, "%s%s", head ? "" : STRATA__HF_PREFIX, x->name);
        if (!head)
          snprintf(o->alt, sizeof o->alt, "%s", x->name);
      }
      if (head)
        L->head = L->nslots;
      if (strcmp(x->name, llama ? "embed_tokens.weight" : "wte.weight") == 0)
        L->embed = L->nslots;
      L->nslots++;
    }
  L->host = malloc((L->total ? L->total : 1) * sizeof *L->host);
  if (!L->host)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory loading a Hugging Face model");
  return STRATA_OK;
}

/* "[a, b]" of a shape. */
static void hf_shape(char *buf, size_t size, int ndim, const int64_t *shape) {
  buf[0] = '\0';
  for (int d = 0; d < ndim && d < STRATA_ST_MAX_DIMS; d++)
    snprintf(buf + strlen(buf), size - strlen(buf), "%s%lld", d ? ", " : "", (long long)shape[d]);
}

/* The slot whose name (or other name) is `name`, or -1. */
static int hf_find(const struct hf_load *L, const char *name) {
  for (int i = 0; i < L->nslots; i++)
    if (strcmp(L->slots[i].name, name) == 0 || (L->slots[i].alt[0] && strcmp(L->slots[i].alt, name) == 0))
      return i;
  return -1;
}

/* Copy tensor `name` of `f` (read from `path`) into its slot, checking its shape; a tensor without a slot is
** skipped (an old buffer), kept (a tied checkpoint's head) or refused naming it. */
static int hf_place(struct hf_load *L, strata_safetensors_t f, const char *path, const char *name) {
  int ndim;
  int64_t shape[STRATA_ST_MAX_DIMS];
  const float *data;
  TRY(strata_safetensors_get(f, name, &ndim, shape, &data));
  int i = hf_find(L, name);
  if (i < 0) {
    if (hf_buffer(name))
      return STRATA_OK;
    if (strcmp(name, "lm_head.weight") == 0 && L->want->tied && L->have->tied && !L->file_head) {
      size_t n = 1;
      for (int d = 0; d < ndim; d++)
        n *= (size_t)shape[d];
      L->file_head = malloc((n ? n : 1) * sizeof *L->file_head);
      if (!L->file_head)
        return strata__error(STRATA_ERR_NOMEM, "out of host memory loading %s", path);
      memcpy(L->file_head, data, n * sizeof *data);
      snprintf(L->head_from, sizeof L->head_from, "%s", path);
      return STRATA_OK;
    }
    return strata__error(STRATA_ERR_UNSUPPORTED, "%s: tensor '%s' has no place in a %s model", path, name,
                         L->have->kind == STRATA_MODEL_LLAMA ? "Llama" : "GPT-2");
  }
  struct hf_slot *o = &L->slots[i];
  const struct strata__tensor *x = o->x;
  if (o->filled)
    return strata__error(STRATA_ERR_UNSUPPORTED, "%s: tensor '%s' is given twice (as '%s' and '%s')", path, o->name,
                         o->name, o->alt);
  int64_t wants[STRATA_ST_MAX_DIMS] = {0};
  memcpy(wants, x->full, (size_t)x->ndim * sizeof *wants);
  if (o->transpose) {
    wants[0] = x->full[1];
    wants[1] = x->full[0];
  }
  if (ndim != x->ndim || memcmp(shape, wants, (size_t)ndim * sizeof *shape) != 0) {
    char a[64], b[64];
    hf_shape(a, sizeof a, x->ndim, wants);
    hf_shape(b, sizeof b, ndim, shape);
    return strata__error(STRATA_ERR_SHAPE, "%s: tensor '%s' is [%s], the model wants [%s]", path, name, b, a);
  }
  float *dst = L->host + o->at;
  if (o->transpose) { /* the file's [out, in] row r is strata's column r */
    const int64_t rows = shape[0], cols = shape[1];
    for (int64_t r = 0; r < rows; r++)
      for (int64_t c = 0; c < cols; c++)
        dst[c * rows + r] = data[r * cols + c];
  } else {
    memcpy(dst, data, x->full_n * sizeof *dst);
  }
  o->filled = 1;
  return STRATA_OK;
}

/* Read one safetensors file with bf16 and fp16 widened exactly to fp32, saying how to get fp32 when the dtype is
** another. */
static int hf_open(const char *path, strata_safetensors_t *f) {
  int rc = strata_safetensors_read_flags(path, STRATA_ST_READ_WIDEN, f);
  if (rc == STRATA_ERR_UNSUPPORTED) {
    char msg[768];
    snprintf(msg, sizeof msg, "%s", strata_last_error());
    return strata__error(rc, "%s (in transformers, model.float().save_pretrained(DIR) writes fp32)", msg);
  }
  return rc;
}

/* Place every tensor of the one file `path`. */
static int hf_load_file(struct hf_load *L, const char *path) {
  strata_safetensors_t f = NULL;
  TRY(hf_open(path, &f));
  int rc = STRATA_OK;
  for (size_t i = 0; i < strata_safetensors_count(f) && !rc; i++)
    rc = hf_place(L, f, path, strata_safetensors_name(f, i));
  strata_safetensors_free(f);
  return rc;
}

/* A shard's file name as the index gives it: a plain name in the directory. */
static int hf_shard_name_ok(const char *s) {
  return s[0] && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

/*
** Place every tensor of the shards `index` (model.safetensors.index.json of
** `dir`) names. Before any shard is read: the index parses, its weight_map
** maps names to plain file names, and every file it names exists. Then each
** shard holds exactly the tensors the map puts in it.
*/
static int hf_load_sharded(struct hf_load *L, const char *dir, const char *index) {
  json_error_t err;
  FILE *fi = NULL;
  TRY(strata__fopen_input(index, STRATA_ERR_NOT_FOUND, &fi));
  json_t *root = json_loadf(fi, JSON_REJECT_DUPLICATES, &err);
  fclose(fi);
  if (!root)
    return strata__error(STRATA_ERR_PARSE, "%s: line %d: %s", index, err.line, err.text);
  int rc = STRATA_OK;
  json_t *map = json_object_get(root, "weight_map");
  if (!json_is_object(map) || json_object_size(map) == 0)
    rc = strata__error(STRATA_ERR_PARSE, "%s: no \"weight_map\" object of tensor names and shard files", index);
  const char *name;
  json_t *v;
  json_t *shards = json_array();
  if (!rc && !shards)
    rc = strata__error(STRATA_ERR_NOMEM, "out of host memory reading %s", index);
  if (!rc)
    json_object_foreach(map, name, v) {
      const char *file = json_string_value(v);
      if (!file || !hf_shard_name_ok(file)) {
        rc = strata__error(STRATA_ERR_PARSE, "%s: weight_map puts '%s' in %s; a shard is a file name in the directory",
                           index, name, file ? file : "something not a string");
        break;
      }
      int seen = 0;
      for (size_t k = 0; k < json_array_size(shards) && !seen; k++)
        seen = strcmp(json_string_value(json_array_get(shards, k)), file) == 0;
      if (seen)
        continue;
      char path[4096];
      struct stat sb;
      rc = strata__hf_path(path, sizeof path, dir, file);
      if (!rc && (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)))
        rc = strata__error(STRATA_ERR_PARSE, "%s: weight_map names shard %s, which is missing (tensor '%s')", index,
                           file, name);
      if (!rc && json_array_append_new(shards, json_string(file)))
        rc = strata__error(STRATA_ERR_NOMEM, "out of host memory reading %s", index);
      if (rc)
        break;
    }
  for (size_t k = 0; k < json_array_size(shards) && !rc; k++) {
    const char *file = json_string_value(json_array_get(shards, k));
    char path[4096];
    strata_safetensors_t f = NULL;
    rc = strata__hf_path(path, sizeof path, dir, file);
    if (!rc)
      rc = hf_open(path, &f);
    for (size_t i = 0; !rc && i < strata_safetensors_count(f); i++) {
      const char *t = strata_safetensors_name(f, i);
      const char *there = json_string_value(json_object_get(map, t));
      if (!there)
        rc = strata__error(STRATA_ERR_PARSE, "%s: tensor '%s' is not in the index's weight_map", path, t);
      else if (strcmp(there, file) != 0)
        rc = strata__error(STRATA_ERR_PARSE, "%s: tensor '%s' is here, the index puts it in %s", path, t, there);
      else
        rc = hf_place(L, f, path, t);
    }
    /* every tensor the map puts in this shard is in it */
    if (!rc)
      json_object_foreach(map, name, v) {
        if (strcmp(json_string_value(v), file) == 0 && strata_safetensors_dtype(f, name, &(enum strata_st_dtype){0})) {
          rc = strata__error(STRATA_ERR_PARSE, "%s: the index puts tensor '%s' in this shard, which does not hold it",
                             path, name);
          break;
        }
      }
    strata_safetensors_free(f);
  }
  json_decref(shards);
  json_decref(root);
  return rc;
}

/* After every file: the head of a tied checkpoint, missing tensors. `where` names the weights in messages. */
static int hf_finish(struct hf_load *L, const char *where) {
  /* an untied trainer of a tied checkpoint: the head starts as a copy of the embedding */
  if (L->head >= 0 && !L->slots[L->head].filled && L->want->tied && L->embed >= 0 && L->slots[L->embed].filled) {
    struct hf_slot *h = &L->slots[L->head];
    const struct hf_slot *e = &L->slots[L->embed];
    const int64_t rows = e->x->full[0], cols = e->x->full[1]; /* [vocab, d_model] */
    float *dst = L->host + h->at;
    const float *src = L->host + e->at;
    if (h->transpose)
      for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
          dst[c * rows + r] = src[r * cols + c];
    else
      memcpy(dst, src, h->x->full_n * sizeof *dst);
    h->filled = 1;
  }
  for (int i = 0; i < L->nslots; i++)
    if (!L->slots[i].filled)
      return strata__error(STRATA_ERR_PARSE, "%s: tensor '%s' is missing", where, L->slots[i].name);
  /* a tied trainer: a head the file holds must be the embedding */
  if (L->file_head && L->embed >= 0 &&
      memcmp(L->file_head, L->host + L->slots[L->embed].at, L->slots[L->embed].x->full_n * sizeof(float)) != 0)
    return strata__error(STRATA_ERR_UNSUPPORTED, "%s: lm_head.weight differs from %s but config.json says "
                         "tie_word_embeddings (%s)", L->head_from, L->slots[L->embed].name,
                         L->have->kind == STRATA_MODEL_LLAMA ? "true" : "the default: true");
  return STRATA_OK;
}

STRATA_API int strata_trainer_load_hf(strata_trainer_t tr, const char *dir) {
  if (!tr || !dir)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_load_hf: NULL argument");
  struct strata_model_config want;
  TRY(strata__hf_read_config(dir, &want));
  const struct strata_model_config *have = &tr->model->cfg;
  if (!hf_same_model(have, &want))
    return strata__error(STRATA_ERR_SHAPE, "%s: config.json describes another model than the trainer's '%s'", dir,
                         have->name);
  char path[4096], index[4096];
  TRY(strata__hf_path(path, sizeof path, dir, "model.safetensors"));
  TRY(strata__hf_path(index, sizeof index, dir, "model.safetensors.index.json"));
  const int one = access(path, F_OK) == 0, sharded = !one && access(index, F_OK) == 0;
  if (!one && !sharded) {
    char other[4096];
    if (strata__hf_path(other, sizeof other, dir, "pytorch_model.bin") == STRATA_OK && access(other, F_OK) == 0)
      return strata__error(STRATA_ERR_UNSUPPORTED, "%s: the weights are a pickle (pytorch_model.bin); strata reads "
                           "model.safetensors (save_pretrained(..., safe_serialization=True) writes it)", dir);
    return strata__error(STRATA_ERR_NOT_FOUND, "%s: no model.safetensors (nor model.safetensors.index.json)", dir);
  }
  struct hf_load L = {.have = have, .want = &want};
  int rc = hf_slots(tr, &L);
  if (!rc)
    rc = sharded ? hf_load_sharded(&L, dir, index) : hf_load_file(&L, path);
  if (!rc)
    rc = hf_finish(&L, sharded ? index : path);
  /* nothing reaches the trainer before every tensor is in place and checked */
  if (!rc)
    rc = strata_trainer_set_params(tr, L.host, L.total);
  free(L.host);
  free(L.slots);
  free(L.file_head);
  return rc;
}
