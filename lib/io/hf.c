/* SPDX-License-Identifier: MIT */
/* hf.c — Hugging Face GPT-2 and Llama checkpoints: config.json to a strata model (Llama's in io/hf-llama.c), and a
** strata checkpoint to a Hugging Face directory (train/hf-load.c loads the weights into a trainer). */
#include "config.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
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

/* strata's layernorms use this epsilon (model/layers.c); GPT-2's config says 1e-5 too. */
#define STRATA__HF_LN_EPS 1e-5

/* "DIR/NAME" into buf; STRATA_ERR_INVALID when it does not fit. */
int strata__hf_path(char *buf, size_t size, const char *dir, const char *name) {
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/')
    n--;
  int w = snprintf(buf, size, "%.*s/%s", (int)n, dir, name);
  if (w < 0 || (size_t)w >= size)
    return strata__error(STRATA_ERR_INVALID, "%s: path too long", dir);
  return STRATA_OK;
}

/* ---------------------------------------------------------------- config.json -> model */

/* A required positive integer field of the config. */
static int hf_int(json_t *root, const char *src, const char *key, int64_t *v) {
  json_t *j = json_object_get(root, key);
  if (!j)
    return strata__error(STRATA_ERR_PARSE, "%s: no \"%s\" (a GPT-2 config.json has n_embd, n_layer, n_head, "
                         "n_positions and vocab_size)", src, key);
  if (!json_is_integer(j) || json_integer_value(j) < 1)
    return strata__error(STRATA_ERR_PARSE, "%s: \"%s\" must be a positive integer", src, key);
  *v = (int64_t)json_integer_value(j);
  return STRATA_OK;
}

int strata__hf_bool(json_t *root, const char *src, const char *key, int dflt, int *v) {
  json_t *j = json_object_get(root, key);
  if (!j || json_is_null(j)) {
    *v = dflt;
    return STRATA_OK;
  }
  if (!json_is_boolean(j))
    return strata__error(STRATA_ERR_PARSE, "%s: \"%s\" must be true or false", src, key);
  *v = json_is_true(j);
  return STRATA_OK;
}

/*
** Turn a parsed config.json into a strata model config, refusing what
** strata cannot represent with the field's name (see hf.h). `src` names
** the file in messages; `name` becomes the model's name.
*/
static int hf_config(json_t *root, const char *src, const char *name, struct strata_model_config *c) {
  if (!json_is_object(root))
    return strata__error(STRATA_ERR_PARSE, "%s: not a JSON object", src);
  json_t *mt = json_object_get(root, "model_type");
  if (!json_is_string(mt))
    return strata__error(STRATA_ERR_PARSE, "%s: no \"model_type\" string (a Hugging Face config says \"gpt2\" or "
                         "\"llama\")", src);
  if (strcmp(json_string_value(mt), "llama") == 0)
    return strata__hf_llama_config(root, src, name, c);
  if (strcmp(json_string_value(mt), "gpt2") != 0)
    return strata__error(STRATA_ERR_UNSUPPORTED, "%s: model_type \"%s\" is neither GPT-2 nor Llama; strata reads "
                         "\"gpt2\" and \"llama\"", src, json_string_value(mt));
  json_t *arch = json_object_get(root, "architectures");
  if (arch && !json_is_null(arch)) {
    if (!json_is_array(arch))
      return strata__error(STRATA_ERR_PARSE, "%s: \"architectures\" must be an array of names", src);
    for (size_t i = 0; i < json_array_size(arch); i++) {
      const char *a = json_string_value(json_array_get(arch, i));
      if (!a || (strcmp(a, "GPT2LMHeadModel") != 0 && strcmp(a, "GPT2Model") != 0))
        return strata__error(STRATA_ERR_UNSUPPORTED,
                             "%s: architectures lists \"%s\"; strata represents GPT2LMHeadModel (and GPT2Model) only",
                             src, a ? a : "(not a string)");
    }
  }
  json_t *act = json_object_get(root, "activation_function");
  if (act && !json_is_string(act))
    return strata__error(STRATA_ERR_PARSE, "%s: \"activation_function\" must be a string", src);
  if (act && strcmp(json_string_value(act), "gelu_new") != 0 && strcmp(json_string_value(act), "gelu_pytorch_tanh") != 0)
    return strata__error(STRATA_ERR_UNSUPPORTED,
                         "%s: activation_function \"%s\" is not strata's GELU (tanh form: \"gelu_new\" or "
                         "\"gelu_pytorch_tanh\")",
                         src, json_string_value(act));
  json_t *eps = json_object_get(root, "layer_norm_epsilon");
  if (eps && !json_is_number(eps))
    return strata__error(STRATA_ERR_PARSE, "%s: \"layer_norm_epsilon\" must be a number", src);
  if (eps && fabs(json_number_value(eps) - STRATA__HF_LN_EPS) > 1e-6 * STRATA__HF_LN_EPS)
    return strata__error(STRATA_ERR_UNSUPPORTED, "%s: layer_norm_epsilon %g; strata's layernorms use 1e-05", src,
                         json_number_value(eps));
  int flag;
  TRY(strata__hf_bool(root, src, "scale_attn_weights", 1, &flag));
  if (!flag)
    return strata__error(STRATA_ERR_UNSUPPORTED,
                         "%s: scale_attn_weights is false; strata always scales attention by 1/sqrt(head size)", src);
  TRY(strata__hf_bool(root, src, "scale_attn_by_inverse_layer_idx", 0, &flag));
  if (flag)
    return strata__error(STRATA_ERR_UNSUPPORTED, "%s: scale_attn_by_inverse_layer_idx is true; strata does not scale "
                         "attention by layer", src);
  TRY(strata__hf_bool(root, src, "add_cross_attention", 0, &flag));
  if (flag)
    return strata__error(STRATA_ERR_UNSUPPORTED, "%s: add_cross_attention is true; strata's GPT has no cross-attention",
                         src);
  json_t *q = json_object_get(root, "quantization_config");
  if (q && !json_is_null(q))
    return strata__error(STRATA_ERR_UNSUPPORTED, "%s: quantization_config is set; strata reads fp32, bf16 and fp16 "
                         "weights only", src);
  memset(c, 0, sizeof *c);
  c->kind = STRATA_MODEL_GPT;
  snprintf(c->name, sizeof c->name, "%s", name);
  TRY(hf_int(root, src, "vocab_size", &c->vocab));
  TRY(hf_int(root, src, "n_positions", &c->context));
  TRY(hf_int(root, src, "n_embd", &c->d_model));
  TRY(hf_int(root, src, "n_layer", &c->layers));
  TRY(hf_int(root, src, "n_head", &c->heads));
  json_t *ctx = json_object_get(root, "n_ctx");
  if (ctx && !json_is_null(ctx) && (!json_is_integer(ctx) || json_integer_value(ctx) != c->context))
    return strata__error(STRATA_ERR_UNSUPPORTED, "%s: n_ctx differs from n_positions (%lld); strata has one context "
                         "length", src, (long long)c->context);
  json_t *inner = json_object_get(root, "n_inner");
  if (!inner || json_is_null(inner))
    c->d_ff = 4 * c->d_model;
  else
    TRY(hf_int(root, src, "n_inner", &c->d_ff));
  TRY(strata__hf_bool(root, src, "tie_word_embeddings", 1, &c->tied));
  return STRATA_OK;
}

/* The model config of `dir`/config.json. */
int strata__hf_read_config(const char *dir, struct strata_model_config *c) {
  if (!dir)
    return strata__error(STRATA_ERR_INVALID, "Hugging Face model: directory is NULL");
  char path[4096];
  TRY(strata__hf_path(path, sizeof path, dir, "config.json"));
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return strata__error(STRATA_ERR_NOT_FOUND, "%s: not a directory (a Hugging Face model is a directory holding "
                         "config.json and model.safetensors)", dir);
  if (stat(path, &sb) != 0)
    return strata__error(STRATA_ERR_NOT_FOUND, "%s: no config.json (a Hugging Face model directory holds config.json "
                         "and model.safetensors)", dir);
  FILE *f = NULL;
  TRY(strata__fopen_input(path, STRATA_ERR_NOT_FOUND, &f));
  json_error_t err;
  json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &err);
  fclose(f);
  if (!root)
    return strata__error(STRATA_ERR_PARSE, "%s: line %d: %s", path, err.line, err.text);
  /* the model is named after its directory */
  char name[64];
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/')
    n--;
  size_t b = n;
  while (b > 0 && dir[b - 1] != '/')
    b--;
  snprintf(name, sizeof name, "%.*s", (int)(n - b), dir + b);
  int rc = hf_config(root, path, name, c);
  json_decref(root);
  return rc;
}

STRATA_API int strata_hf_config(const char *dir, struct strata_model_config *out) {
  if (!out)
    return strata__error(STRATA_ERR_INVALID, "strata_hf_config: out is NULL");
  struct strata_model_config c;
  TRY(strata__hf_read_config(dir, &c));
  *out = c;
  return STRATA_OK;
}

STRATA_API int strata_hf_model(const char *dir, strata_model_t *out) { return strata_hf_model_context(dir, 0, out); }

STRATA_API int strata_hf_model_context(const char *dir, int64_t context, strata_model_t *out) {
  if (!out)
    return strata__error(STRATA_ERR_INVALID, "strata_hf_model: out is NULL");
  if (context < 0)
    return strata__error(STRATA_ERR_INVALID, "strata_hf_model_context: context %lld < 0", (long long)context);
  struct strata_model_config c;
  TRY(strata__hf_read_config(dir, &c));
  if (context && c.kind == STRATA_MODEL_LLAMA && context > c.context)
    return strata__error(STRATA_ERR_UNSUPPORTED, "%s/config.json: a context of %lld is past max_position_embeddings "
                         "%lld", dir, (long long)context, (long long)c.context);
  if (context && c.kind == STRATA_MODEL_GPT && context != c.context)
    return strata__error(STRATA_ERR_UNSUPPORTED, "%s/config.json: a GPT-2's context is its n_positions (%lld), the "
                         "rows of its position table, not %lld", dir, (long long)c.context, (long long)context);
  if (context)
    c.context = context;
  int rc = strata_model_from_config(&c, out);
  /* sizes outside strata's limits (n_positions past 65536, n_head that does not divide n_embd) are values of the
  ** file that strata cannot use, like an activation it has not: the file's fault, said as such */
  if ((rc == STRATA_ERR_INVALID || rc == STRATA_ERR_SHAPE) && c.kind == STRATA_MODEL_LLAMA)
    return strata__error_prefix(STRATA_ERR_UNSUPPORTED, "%s/config.json: values strata cannot use "
                                "(max_position_embeddings is its context, hidden_size d_model, num_hidden_layers "
                                "layers, num_attention_heads heads, num_key_value_heads n_kv_heads, intermediate_size "
                                "d_ff, vocab_size vocab): ", dir);
  if (rc == STRATA_ERR_INVALID || rc == STRATA_ERR_SHAPE)
    return strata__error_prefix(STRATA_ERR_UNSUPPORTED, "%s/config.json: values strata cannot use (n_positions is its "
                                "context, n_embd d_model, n_layer layers, n_head heads, n_inner d_ff, vocab_size "
                                "vocab): ", dir);
  return rc;
}

/* ---------------------------------------------------------------- checkpoint -> Hugging Face directory */

/* Write `text` to `path` through the one atomic writer (file.h). */
static int hf_write_text(const char *path, const char *text) {
  struct strata__out o;
  TRY(strata__out_open(&o, path));
  FILE *f = strata__out_stream(&o);
  if (!f) {
    strata__out_abort(&o);
    return strata__error_prefix(STRATA_ERR_NOMEM, "cannot write %s: ", path);
  }
  fputs(text, f);
  return strata__out_commit(&o);
}

/*
** config.json for a strata GPT config, with GPT-2's values for what strata
** fixes (activation, epsilon, scaling). Weights stored in bf16 say so as
** transformers 4 wrote it, "torch_dtype": "bfloat16" (transformers 5 reads
** that key too, and writes "dtype"); fp32 ones write no dtype, as before.
*/
static int hf_config_json(const struct strata_model_config *c, enum strata_st_dtype dtype, char **out) {
  json_t *o = json_object();
  json_t *arch = json_array();
  if (!o || !arch || json_array_append_new(arch, json_string("GPT2LMHeadModel"))) {
    json_decref(o);
    json_decref(arch);
    return strata__error(STRATA_ERR_NOMEM, "out of host memory writing config.json");
  }
  int bad = json_object_set_new(o, "architectures", arch);
  bad |= json_object_set_new(o, "model_type", json_string("gpt2"));
  bad |= json_object_set_new(o, "vocab_size", json_integer(c->vocab));
  bad |= json_object_set_new(o, "n_positions", json_integer(c->context));
  bad |= json_object_set_new(o, "n_embd", json_integer(c->d_model));
  bad |= json_object_set_new(o, "n_layer", json_integer(c->layers));
  bad |= json_object_set_new(o, "n_head", json_integer(c->heads));
  bad |= json_object_set_new(o, "n_inner", c->d_ff == 4 * c->d_model ? json_null() : json_integer(c->d_ff));
  bad |= json_object_set_new(o, "activation_function", json_string("gelu_new"));
  bad |= json_object_set_new(o, "layer_norm_epsilon", json_real(STRATA__HF_LN_EPS));
  bad |= json_object_set_new(o, "tie_word_embeddings", json_boolean(c->tied));
  bad |= json_object_set_new(o, "scale_attn_weights", json_true());
  bad |= json_object_set_new(o, "scale_attn_by_inverse_layer_idx", json_false());
  bad |= json_object_set_new(o, "reorder_and_upcast_attn", json_false());
  bad |= json_object_set_new(o, "add_cross_attention", json_false());
  /* strata trains without dropout; transformers' defaults (0.1, GPT-2's) are written for whoever trains on */
  bad |= json_object_set_new(o, "attn_pdrop", json_real(0.1));
  bad |= json_object_set_new(o, "embd_pdrop", json_real(0.1));
  bad |= json_object_set_new(o, "resid_pdrop", json_real(0.1));
  if (dtype == STRATA_ST_BF16)
    bad |= json_object_set_new(o, "torch_dtype", json_string("bfloat16"));
  if (c->vocab == 50257) { /* GPT-2's BPE: <|endoftext|> */
    bad |= json_object_set_new(o, "bos_token_id", json_integer(50256));
    bad |= json_object_set_new(o, "eos_token_id", json_integer(50256));
  }
  char *s = bad ? NULL : json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
  json_decref(o);
  if (!s)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory writing config.json");
  size_t n = strlen(s);
  char *t = realloc(s, n + 2);
  if (!t) {
    free(s);
    return strata__error(STRATA_ERR_NOMEM, "out of host memory writing config.json");
  }
  t[n] = '\n';
  t[n + 1] = '\0';
  *out = t;
  return STRATA_OK;
}

STRATA_API int strata_hf_export(const char *checkpoint, const char *dir) {
  return strata_hf_export_as(checkpoint, dir, STRATA_ST_F32);
}

STRATA_API int strata_hf_export_as(const char *checkpoint, const char *dir, enum strata_st_dtype dtype) {
  if (!checkpoint || !dir || !dir[0])
    return strata__error(STRATA_ERR_INVALID, "strata_hf_export: NULL argument");
  if (dtype != STRATA_ST_F32 && dtype != STRATA_ST_BF16)
    return strata__error(dtype == STRATA_ST_F16 ? STRATA_ERR_UNSUPPORTED : STRATA_ERR_INVALID,
                         "%s: strata exports Hugging Face weights in fp32 or bf16, not dtype %d", dir, (int)dtype);
  /* the export never replaces what it reads: "--hf d d/model.safetensors" would lose the optimizer state */
  static const char *const written[] = {"model.safetensors", "config.json"};
  for (int i = 0; i < 2; i++) {
    char out[4096];
    TRY(strata__hf_path(out, sizeof out, dir, written[i]));
    if (strata_file_same(out, checkpoint))
      return strata__error(STRATA_ERR_INVALID, "%s: is the checkpoint being exported; the export would replace it "
                           "(choose another directory)", out);
  }
  strata_safetensors_t f = NULL;
  TRY(strata_safetensors_read(checkpoint, &f));
  strata_model_t model = NULL;
  struct strata_st_tensor *ts = NULL;
  char *names = NULL, *cfg_json = NULL;
  int rc = STRATA_OK;
  const char *mj = strata_safetensors_meta(f, "model");
  if (!mj)
    rc = strata__error(STRATA_ERR_PARSE, "%s: no model config in the metadata (not a strata checkpoint?)", checkpoint);
  if (!rc)
    rc = strata_model_from_json(mj, checkpoint, &model);
  const struct strata_model_config *c = model ? strata_model_config(model) : NULL;
  if (!rc && c->kind != STRATA_MODEL_GPT && c->kind != STRATA_MODEL_LLAMA)
    rc = strata__error(STRATA_ERR_UNSUPPORTED, "%s: model '%s' is neither a GPT nor a Llama; only those have a Hugging "
                       "Face form", checkpoint, c->name);
  const int llama = c && c->kind == STRATA_MODEL_LLAMA;
  float **flipped = NULL; /* a Llama's projections, transposed to torch.nn.Linear's [out, in] */
  /* the parameters: every tensor but the optimizer's, in the checkpoint's order */
  size_t n = strata_safetensors_count(f), k = 0;
  if (!rc) {
    ts = calloc(n ? n : 1, sizeof *ts);
    names = calloc(n ? n : 1, 128);
    flipped = calloc(n ? n : 1, sizeof *flipped);
    if (!ts || !names || !flipped)
      rc = strata__error(STRATA_ERR_NOMEM, "out of host memory exporting %s", checkpoint);
  }
  int seen_wte = 0;
  for (size_t i = 0; i < n && !rc; i++) {
    const char *name = strata_safetensors_name(f, i);
    if (strncmp(name, "optimizer.", 10) == 0)
      continue;
    struct strata_st_tensor *t = &ts[k];
    char *nm = names + k * 128;
    snprintf(nm, 128, "%s%s", strcmp(name, "lm_head.weight") == 0 ? "" : llama ? STRATA__HF_LLAMA_PREFIX :
                                                                                 STRATA__HF_PREFIX, name);
    t->name = nm;
    rc = strata_safetensors_get(f, name, &t->ndim, t->shape, &t->data);
    seen_wte |= strcmp(name, llama ? "embed_tokens.weight" : "wte.weight") == 0;
    if (!rc && llama && strata__hf_llama_transposed(c, name, t->ndim, t->shape)) {
      const int64_t rows = t->shape[0], cols = t->shape[1]; /* strata's [in, out] */
      float *tr = malloc((size_t)(rows * cols > 0 ? rows * cols : 1) * sizeof *tr);
      if (!tr) {
        rc = strata__error(STRATA_ERR_NOMEM, "out of host memory exporting %s", checkpoint);
        break;
      }
      for (int64_t r = 0; r < rows; r++)
        for (int64_t q = 0; q < cols; q++)
          tr[q * rows + r] = t->data[r * cols + q];
      flipped[k] = tr;
      t->data = tr;
      t->shape[0] = cols;
      t->shape[1] = rows;
    }
    k++;
  }
  /* a GPT: wte, wpe, ln_f's two and 12 a block; a Llama: embed_tokens, norm and 9 a block; the head when untied */
  size_t want = (size_t)((llama ? 2 + 9 * (c ? c->layers : 0) : 4 + 12 * (c ? c->layers : 0)) + (c && !c->tied ? 1 : 0));
  if (!rc && (k != want || !seen_wte))
    rc = strata__error(STRATA_ERR_PARSE, "%s: %zu parameter tensors, a %s of %lld layers has %zu", checkpoint, k,
                       llama ? "Llama" : "GPT", (long long)(c ? c->layers : 0), want);
  if (!rc)
    rc = llama ? strata__hf_llama_config_json(c, dtype, &cfg_json) : hf_config_json(c, dtype, &cfg_json);
  if (!rc && mkdir(dir, 0777) != 0 && errno != EEXIST)
    rc = strata__error(STRATA_ERR_IO, "%s: cannot create the directory: %s", dir, strerror(errno));
  struct stat sb;
  if (!rc && (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)))
    rc = strata__error(STRATA_ERR_IO, "%s: exists and is not a directory", dir);
  char path[4096];
  if (!rc)
    rc = strata__hf_path(path, sizeof path, dir, "model.safetensors");
  if (!rc) {
    struct strata_st_meta meta[] = {{"format", "pt"}};
    rc = strata_safetensors_write_as(path, ts, k, meta, 1, dtype);
  }
  if (!rc)
    rc = strata__hf_path(path, sizeof path, dir, "config.json");
  if (!rc)
    rc = hf_write_text(path, cfg_json);
  free(cfg_json);
  for (size_t i = 0; flipped && i < n; i++)
    free(flipped[i]);
  free(flipped);
  free(ts);
  free(names);
  strata_model_free(model);
  strata_safetensors_free(f);
  return rc;
}
