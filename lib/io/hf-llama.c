/* SPDX-License-Identifier: MIT */
/* hf-llama.c — a Hugging Face LlamaForCausalLM config.json to a strata llama config and back, in both of its rope forms. */
#include "config.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/checkpoint.h>

#include "core/core.h"
#include "io/hf.h"

/* LlamaConfig's defaults for keys a config.json may leave out. */
#define HF_LLAMA_THETA 10000.0
#define HF_LLAMA_EPS 1e-6

/* Does a Llama tensor of strata's name hold a projection that Hugging Face stores transposed? */
int strata__hf_llama_transposed(const struct strata_model_config *c, const char *name, int ndim, const int64_t *shape) {
  if (ndim != 2)
    return 0;
  size_t n = strlen(name);
  if (n > 12 && strcmp(name + n - 12, "_proj.weight") == 0)
    return 1;
  /* the head as [in, out] = [d_model, vocab] (torch: [vocab, d_model]) */
  return strcmp(name, "lm_head.weight") == 0 && shape[0] == c->d_model && shape[1] == c->vocab;
}

/* A required positive integer field. */
static int ll_int(json_t *o, const char *src, const char *key, int64_t *v) {
  json_t *j = json_object_get(o, key);
  if (!j)
    return strata__error(STRATA_ERR_PARSE, "%s: no \"%s\" (a Llama config.json has hidden_size, num_hidden_layers, "
                         "num_attention_heads, intermediate_size, vocab_size and max_position_embeddings)", src, key);
  if (!json_is_integer(j) || json_integer_value(j) < 1)
    return strata__error(STRATA_ERR_PARSE, "%s: \"%s\" must be a positive integer", src, key);
  *v = (int64_t)json_integer_value(j);
  return STRATA_OK;
}

/* An optional number; absent or null gives `dflt`. `where` prefixes the key in messages ("rope_scaling."). */
static int ll_num(json_t *o, const char *src, const char *where, const char *key, double dflt, double *v) {
  json_t *j = json_object_get(o, key);
  if (!j || json_is_null(j)) {
    *v = dflt;
    return STRATA_OK;
  }
  if (!json_is_number(j) || !isfinite(json_number_value(j)) || json_number_value(j) <= 0)
    return strata__error(STRATA_ERR_PARSE, "%s: \"%s%s\" must be a positive number", src, where, key);
  *v = json_number_value(j);
  return STRATA_OK;
}

/*
** The rope of one object: transformers 5's rope_parameters (rope_theta and
** rope_type inside it) or transformers 4's rope_scaling (rope_type, or the
** older "type"; rope_theta beside it at the top level, passed as `theta`).
** `field` names the object in messages.
*/
static int ll_rope(json_t *r, const char *src, const char *field, double theta, struct strata_model_config *c) {
  if (!json_is_object(r))
    return strata__error(STRATA_ERR_PARSE, "%s: \"%s\" must be an object or null", src, field);
  char where[40];
  snprintf(where, sizeof where, "%s.", field);
  if (json_object_get(r, "rope_theta"))
    TRY(ll_num(r, src, where, "rope_theta", theta, &theta));
  c->rope_theta = theta;
  json_t *t = json_object_get(r, "rope_type");
  if (!t)
    t = json_object_get(r, "type");
  if (t && !json_is_string(t))
    return strata__error(STRATA_ERR_PARSE, "%s: \"%s.rope_type\" must be a string", src, field);
  const char *type = t ? json_string_value(t) : "default";
  double partial;
  TRY(ll_num(r, src, where, "partial_rotary_factor", 1.0, &partial));
  if (partial != 1.0)
    return strata__error(STRATA_ERR_UNSUPPORTED, "%s: %s.partial_rotary_factor %g; strata rotates whole heads", src,
                         field, partial);
  if (strcmp(type, "default") == 0) {
    c->rope_scaling.type = STRATA_ROPE_DEFAULT;
    return STRATA_OK;
  }
  if (strcmp(type, "llama3") != 0)
    return strata__error(STRATA_ERR_UNSUPPORTED, "%s: %s.rope_type \"%s\"; strata's RoPE is \"default\" or Llama 3's "
                         "\"llama3\"", src, field, type);
  c->rope_scaling.type = STRATA_ROPE_LLAMA3;
  static const char *const need[] = {"factor", "low_freq_factor", "high_freq_factor",
                                     "original_max_position_embeddings"};
  for (int i = 0; i < 4; i++)
    if (!json_object_get(r, need[i]))
      return strata__error(STRATA_ERR_PARSE, "%s: %s has rope_type \"llama3\" but no \"%s\"", src, field, need[i]);
  TRY(ll_num(r, src, where, "factor", 0, &c->rope_scaling.factor));
  TRY(ll_num(r, src, where, "low_freq_factor", 0, &c->rope_scaling.low_freq_factor));
  TRY(ll_num(r, src, where, "high_freq_factor", 0, &c->rope_scaling.high_freq_factor));
  json_t *orig = json_object_get(r, "original_max_position_embeddings");
  if (!json_is_integer(orig) || json_integer_value(orig) < 1)
    return strata__error(STRATA_ERR_PARSE, "%s: \"%s.original_max_position_embeddings\" must be a positive integer",
                         src, field);
  c->rope_scaling.original_context = (int64_t)json_integer_value(orig);
  if (!(c->rope_scaling.high_freq_factor > c->rope_scaling.low_freq_factor))
    return strata__error(STRATA_ERR_PARSE, "%s: %s.high_freq_factor %g must exceed low_freq_factor %g", src, field,
                         c->rope_scaling.high_freq_factor, c->rope_scaling.low_freq_factor);
  return STRATA_OK;
}

/*
** A parsed LlamaForCausalLM config.json (model_type "llama") into a strata
** llama config named `name`, refusing what strata cannot represent with the
** field's name (see hf.h). `src` names the file in messages.
*/
int strata__hf_llama_config(json_t *root, const char *src, const char *name, struct strata_model_config *c) {
  json_t *arch = json_object_get(root, "architectures");
  if (arch && !json_is_null(arch)) {
    if (!json_is_array(arch))
      return strata__error(STRATA_ERR_PARSE, "%s: \"architectures\" must be an array of names", src);
    for (size_t i = 0; i < json_array_size(arch); i++) {
      const char *a = json_string_value(json_array_get(arch, i));
      if (!a || strcmp(a, "LlamaForCausalLM") != 0)
        return strata__error(STRATA_ERR_UNSUPPORTED, "%s: architectures lists \"%s\"; strata represents "
                             "LlamaForCausalLM only", src, a ? a : "(not a string)");
    }
  }
  json_t *act = json_object_get(root, "hidden_act");
  if (act && !json_is_string(act))
    return strata__error(STRATA_ERR_PARSE, "%s: \"hidden_act\" must be a string", src);
  if (act && strcmp(json_string_value(act), "silu") != 0)
    return strata__error(STRATA_ERR_UNSUPPORTED, "%s: hidden_act \"%s\"; strata's SwiGLU gates with \"silu\"", src,
                         json_string_value(act));
  int flag;
  TRY(strata__hf_bool(root, src, "attention_bias", 0, &flag));
  if (flag)
    return strata__error(STRATA_ERR_UNSUPPORTED, "%s: attention_bias is true; strata's Llama has no biases", src);
  TRY(strata__hf_bool(root, src, "mlp_bias", 0, &flag));
  if (flag)
    return strata__error(STRATA_ERR_UNSUPPORTED, "%s: mlp_bias is true; strata's Llama has no biases", src);
  TRY(strata__hf_bool(root, src, "use_sliding_window", 0, &flag));
  json_t *sw = json_object_get(root, "sliding_window");
  if (flag || (sw && !json_is_null(sw)))
    return strata__error(STRATA_ERR_UNSUPPORTED, "%s: sliding_window is set; strata's attention sees the whole "
                         "context", src);
  json_t *q = json_object_get(root, "quantization_config");
  if (q && !json_is_null(q))
    return strata__error(STRATA_ERR_UNSUPPORTED, "%s: quantization_config is set; strata reads fp32, bf16 and fp16 "
                         "weights only", src);
  memset(c, 0, sizeof *c);
  c->kind = STRATA_MODEL_LLAMA;
  snprintf(c->name, sizeof c->name, "%s", name);
  TRY(ll_int(root, src, "vocab_size", &c->vocab));
  TRY(ll_int(root, src, "max_position_embeddings", &c->context));
  TRY(ll_int(root, src, "hidden_size", &c->d_model));
  TRY(ll_int(root, src, "num_hidden_layers", &c->layers));
  TRY(ll_int(root, src, "num_attention_heads", &c->heads));
  TRY(ll_int(root, src, "intermediate_size", &c->d_ff));
  json_t *kv = json_object_get(root, "num_key_value_heads");
  if (!kv || json_is_null(kv))
    c->kv_heads = c->heads; /* LlamaConfig's default: multi-head attention */
  else
    TRY(ll_int(root, src, "num_key_value_heads", &c->kv_heads));
  if (c->heads % c->kv_heads != 0)
    return strata__error(STRATA_ERR_UNSUPPORTED, "%s: num_key_value_heads %lld does not divide num_attention_heads "
                         "%lld", src, (long long)c->kv_heads, (long long)c->heads);
  if (c->d_model % c->heads != 0)
    return strata__error(STRATA_ERR_UNSUPPORTED, "%s: num_attention_heads %lld does not divide hidden_size %lld", src,
                         (long long)c->heads, (long long)c->d_model);
  json_t *hd = json_object_get(root, "head_dim");
  if (hd && !json_is_null(hd) && (!json_is_integer(hd) || json_integer_value(hd) != c->d_model / c->heads))
    return strata__error(STRATA_ERR_UNSUPPORTED, "%s: head_dim is not hidden_size / num_attention_heads (%lld); "
                         "strata's heads split the hidden size", src, (long long)(c->d_model / c->heads));
  TRY(ll_num(root, src, "", "rms_norm_eps", HF_LLAMA_EPS, &c->norm_eps));
  TRY(strata__hf_bool(root, src, "tie_word_embeddings", 0, &c->tied));
  /* rope: transformers 5's rope_parameters, else transformers 4's rope_theta and rope_scaling */
  double theta;
  TRY(ll_num(root, src, "", "rope_theta", HF_LLAMA_THETA, &theta));
  json_t *params = json_object_get(root, "rope_parameters"), *scaling = json_object_get(root, "rope_scaling");
  if (params && !json_is_null(params)) {
    if (scaling && !json_is_null(scaling))
      return strata__error(STRATA_ERR_PARSE, "%s: both rope_parameters and rope_scaling are set; say the rope once",
                           src);
    TRY(ll_rope(params, src, "rope_parameters", theta, c));
    if (json_object_get(root, "rope_theta") && c->rope_theta != theta)
      return strata__error(STRATA_ERR_PARSE, "%s: rope_theta %g differs from rope_parameters.rope_theta %g", src,
                           theta, c->rope_theta);
  } else if (scaling && !json_is_null(scaling)) {
    TRY(ll_rope(scaling, src, "rope_scaling", theta, c));
  } else {
    c->rope_theta = theta;
    c->rope_scaling.type = STRATA_ROPE_DEFAULT;
  }
  return STRATA_OK;
}

/*
** config.json of a strata llama config, as LlamaForCausalLM reads it: the
** rope in transformers 4's form (top-level rope_theta, rope_scaling null or
** Llama 3's), which transformers 5 reads too. bf16 weights say
** "torch_dtype": "bfloat16". *out is malloc'd text ending in a newline.
*/
int strata__hf_llama_config_json(const struct strata_model_config *c, enum strata_st_dtype dtype, char **out) {
  json_t *o = json_object(), *arch = json_array();
  if (!o || !arch || json_array_append_new(arch, json_string("LlamaForCausalLM"))) {
    json_decref(o);
    json_decref(arch);
    return strata__error(STRATA_ERR_NOMEM, "out of host memory writing config.json");
  }
  int bad = json_object_set_new(o, "architectures", arch);
  bad |= json_object_set_new(o, "model_type", json_string("llama"));
  bad |= json_object_set_new(o, "vocab_size", json_integer(c->vocab));
  bad |= json_object_set_new(o, "max_position_embeddings", json_integer(c->context));
  bad |= json_object_set_new(o, "hidden_size", json_integer(c->d_model));
  bad |= json_object_set_new(o, "intermediate_size", json_integer(c->d_ff));
  bad |= json_object_set_new(o, "num_hidden_layers", json_integer(c->layers));
  bad |= json_object_set_new(o, "num_attention_heads", json_integer(c->heads));
  bad |= json_object_set_new(o, "num_key_value_heads", json_integer(c->kv_heads ? c->kv_heads : c->heads));
  bad |= json_object_set_new(o, "head_dim", json_integer(c->d_model / c->heads));
  bad |= json_object_set_new(o, "hidden_act", json_string("silu"));
  bad |= json_object_set_new(o, "rms_norm_eps", json_real(c->norm_eps));
  bad |= json_object_set_new(o, "rope_theta", json_real(c->rope_theta));
  if (c->rope_scaling.type == STRATA_ROPE_LLAMA3) {
    json_t *s = json_object();
    bad |= !s;
    bad |= json_object_set_new(s, "rope_type", json_string("llama3"));
    bad |= json_object_set_new(s, "factor", json_real(c->rope_scaling.factor));
    bad |= json_object_set_new(s, "low_freq_factor", json_real(c->rope_scaling.low_freq_factor));
    bad |= json_object_set_new(s, "high_freq_factor", json_real(c->rope_scaling.high_freq_factor));
    bad |= json_object_set_new(s, "original_max_position_embeddings", json_integer(c->rope_scaling.original_context));
    bad |= json_object_set_new(o, "rope_scaling", s);
  } else {
    bad |= json_object_set_new(o, "rope_scaling", json_null());
  }
  bad |= json_object_set_new(o, "attention_bias", json_false());
  bad |= json_object_set_new(o, "mlp_bias", json_false());
  bad |= json_object_set_new(o, "attention_dropout", json_real(0.0));
  bad |= json_object_set_new(o, "tie_word_embeddings", json_boolean(c->tied));
  bad |= json_object_set_new(o, "torch_dtype", json_string(dtype == STRATA_ST_BF16 ? "bfloat16" : "float32"));
  /* 17 digits: the doubles strata holds, read back the same */
  char *s = bad ? NULL : json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
  json_decref(o);
  size_t n = s ? strlen(s) : 0;
  char *t = s ? realloc(s, n + 2) : NULL;
  if (!t) {
    free(s);
    return strata__error(STRATA_ERR_NOMEM, "out of host memory writing config.json");
  }
  t[n] = '\n';
  t[n + 1] = '\0';
  *out = t;
  return STRATA_OK;
}
