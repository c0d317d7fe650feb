/* SPDX-License-Identifier: MIT */
/* test-hf-llama.c — Hugging Face Llama configs (tests/fixtures/llama, made by transformers) in both rope forms, what
** strata cannot represent refused naming the field, and sharded weights (model.safetensors.index.json) loading as one
** file does, their faults refused naming the file or tensor with nothing written. */
#include <jansson.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

#define LLAMA_FIXTURES HF_FIXTURES "/../llama"

static void setup(void) {
  setenv("STRATA_BACKENDS", "host", 0);
  setenv("STRATA_HOST_DEVICES", "2", 1);
}

TestSuite(hf_llama, .init = setup);

/* ---------------------------------------------------------------- config.json */

/* The config of fixture `name` (tests/fixtures/llama/NAME). */
static struct strata_model_config fixture_config(const char *name) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/%s", LLAMA_FIXTURES, name);
  struct strata_model_config c;
  OK(strata_hf_config(dir, &c));
  cr_assert_str_eq(c.name, name);
  return c;
}

/* What make.py built: hidden 64, 2 layers, 4 heads over 2 key/value heads, SwiGLU 128, vocabulary 192, 64 positions,
** eps 1e-5, untied, rope_theta 50000. */
static void the_tiny_llama(const struct strata_model_config *c) {
  cr_assert_eq(c->kind, STRATA_MODEL_LLAMA);
  cr_assert_eq(c->d_model, 64);
  cr_assert_eq(c->layers, 2);
  cr_assert_eq(c->heads, 4);
  cr_assert_eq(c->kv_heads, 2);
  cr_assert_eq(c->d_ff, 128);
  cr_assert_eq(c->vocab, 192);
  cr_assert_eq(c->context, 64);
  cr_assert_eq(c->tied, 0);
  cr_assert_eq(c->norm_eps, 1e-5);
  cr_assert_eq(c->rope_theta, 50000.0);
}

Test(hf_llama, both_rope_forms_give_the_same_config) {
  struct strata_model_config now = fixture_config("fp32"), old = fixture_config("bf16"),
                             sharded = fixture_config("sharded-fp16"), l3 = fixture_config("llama3");
  the_tiny_llama(&now);
  cr_assert_eq(now.rope_scaling.type, STRATA_ROPE_DEFAULT);
  /* transformers 4's top-level rope_theta with rope_scaling null: the same config but for the name */
  memset(old.name, 0, sizeof old.name);
  memset(sharded.name, 0, sizeof sharded.name);
  memset(now.name, 0, sizeof now.name);
  cr_assert(memcmp(&now, &old, sizeof now) == 0, "the older form reads differently");
  cr_assert(memcmp(&now, &sharded, sizeof now) == 0, "the sharded fixture's config reads differently");
  /* rope_parameters of rope_type llama3 */
  the_tiny_llama(&l3);
  cr_assert_eq(l3.rope_scaling.type, STRATA_ROPE_LLAMA3);
  cr_assert_eq(l3.rope_scaling.factor, 8.0);
  cr_assert_eq(l3.rope_scaling.low_freq_factor, 1.0);
  cr_assert_eq(l3.rope_scaling.high_freq_factor, 4.0);
  cr_assert_eq(l3.rope_scaling.original_context, 16);
}

/* Fixture fp32's config.json with `edit` applied (members replace the config's; a null member deletes one), in a new
** scratch directory `tmp` (holding config.json only). */
static void edited_config(const char *edit, char *tmp) {
  char path[1200];
  strcpy(tmp, "/tmp/strata-hfl-XXXXXX");
  cr_assert(mkdtemp(tmp));
  json_error_t err;
  snprintf(path, sizeof path, "%s/fp32/config.json", LLAMA_FIXTURES);
  json_t *cfg = json_load_file(path, 0, &err), *e = json_loads(edit, 0, &err);
  cr_assert(cfg && e, "%s: %s", edit, err.text);
  const char *k;
  json_t *v;
  json_object_foreach(e, k, v) {
    if (json_is_null(v))
      json_object_del(cfg, k);
    else
      json_object_set(cfg, k, v);
  }
  snprintf(path, sizeof path, "%s/config.json", tmp);
  cr_assert(json_dump_file(cfg, path, 0) == 0);
  json_decref(cfg);
  json_decref(e);
}

/* `edit` of fp32's config is refused with `status` and a message holding `words`, by strata_hf_config and
** strata_hf_model alike. */
static void refused(const char *edit, int status, const char *words) {
  char tmp[64];
  edited_config(edit, tmp);
  struct strata_model_config c;
  int rc = strata_hf_config(tmp, &c);
  cr_assert_eq(rc, status, "%s: %s (%s)", edit, strata_err_name(rc), strata_last_error());
  cr_assert(strstr(strata_last_error(), words), "%s: message '%s' lacks '%s'", edit, strata_last_error(), words);
  cr_assert(strstr(strata_last_error(), "config.json"), "%s: '%s' names no file", edit, strata_last_error());
  strata_model_t m = NULL;
  cr_assert_eq(strata_hf_model(tmp, &m), status, "%s", edit);
  cr_assert_null(m);
  tc_remove_dir(tmp);
}

Test(hf_llama, what_strata_cannot_represent_is_refused_naming_the_field) {
  const int U = STRATA_ERR_UNSUPPORTED, P = STRATA_ERR_PARSE;
  refused("{\"attention_bias\": true}", U, "attention_bias is true");
  refused("{\"mlp_bias\": true}", U, "mlp_bias is true");
  refused("{\"sliding_window\": 4096}", U, "sliding_window");
  refused("{\"use_sliding_window\": true}", U, "sliding_window");
  refused("{\"hidden_act\": \"gelu\"}", U, "hidden_act \"gelu\"");
  refused("{\"architectures\": [\"MistralForCausalLM\"]}", U, "architectures lists \"MistralForCausalLM\"");
  refused("{\"model_type\": \"qwen2\"}", U, "model_type \"qwen2\"");
  refused("{\"head_dim\": 32}", U, "head_dim");
  refused("{\"num_key_value_heads\": 3}", U, "num_key_value_heads 3 does not divide num_attention_heads 4");
  refused("{\"num_attention_heads\": 3, \"num_key_value_heads\": 3, \"head_dim\": null}", U,
          "num_attention_heads 3 does not divide hidden_size 64");
  refused("{\"quantization_config\": {\"quant_method\": \"bitsandbytes\"}}", U, "quantization_config");
  refused("{\"rope_parameters\": {\"rope_type\": \"yarn\", \"rope_theta\": 10000.0, \"factor\": 4.0}}", U,
          "rope_parameters.rope_type \"yarn\"");
  refused("{\"rope_parameters\": null, \"rope_theta\": 10000.0, \"rope_scaling\": {\"type\": \"linear\", "
          "\"factor\": 2.0}}", U, "rope_scaling.rope_type \"linear\"");
  refused("{\"rope_parameters\": null, \"rope_scaling\": {\"rope_type\": \"dynamic\", \"factor\": 2.0}}", U,
          "rope_scaling.rope_type \"dynamic\"");
  refused("{\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 10000.0, \"partial_rotary_factor\": 0.5}}",
          U, "partial_rotary_factor");
  refused("{\"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 500000.0, \"factor\": 8.0}}", P,
          "no \"low_freq_factor\"");
  refused("{\"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 500000.0, \"factor\": 8.0, "
          "\"low_freq_factor\": 4.0, \"high_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192}}", P,
          "high_freq_factor 1 must exceed low_freq_factor 4");
  refused("{\"rope_scaling\": {\"rope_type\": \"default\"}}", P, "both rope_parameters and rope_scaling");
  refused("{\"rope_theta\": 10000.0}", P, "rope_theta 10000 differs from rope_parameters.rope_theta 50000");
  refused("{\"hidden_size\": null}", P, "no \"hidden_size\"");
  refused("{\"vocab_size\": \"big\"}", P, "\"vocab_size\" must be a positive integer");
  refused("{\"rms_norm_eps\": -1}", P, "rms_norm_eps");
  refused("{\"tie_word_embeddings\": 1}", P, "tie_word_embeddings");
}

/* Llama 3.2's config as transformers 4 wrote it (rope_theta beside rope_scaling), and LlamaConfig's defaults for keys
** left out: num_key_value_heads = num_attention_heads, rms_norm_eps 1e-6, rope_theta 10000, untied. */
Test(hf_llama, the_older_llama3_form_and_the_defaults) {
  char tmp[64];
  edited_config("{\"rope_parameters\": null, \"rope_theta\": 500000.0, \"rope_scaling\": {\"factor\": 32.0, "
                "\"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192, "
                "\"rope_type\": \"llama3\"}, \"tie_word_embeddings\": true}", tmp);
  struct strata_model_config c;
  OK(strata_hf_config(tmp, &c));
  cr_assert_eq(c.kind, STRATA_MODEL_LLAMA);
  cr_assert_eq(c.rope_theta, 500000.0);
  cr_assert_eq(c.rope_scaling.type, STRATA_ROPE_LLAMA3);
  cr_assert_eq(c.rope_scaling.factor, 32.0);
  cr_assert_eq(c.rope_scaling.original_context, 8192);
  cr_assert_eq(c.tied, 1);
  tc_remove_dir(tmp);
  edited_config("{\"rope_parameters\": null, \"num_key_value_heads\": null, \"rms_norm_eps\": null, "
                "\"tie_word_embeddings\": null, \"head_dim\": null, \"hidden_act\": null, \"architectures\": null}",
                tmp);
  OK(strata_hf_config(tmp, &c));
  cr_assert_eq(c.kv_heads, 4);
  cr_assert_eq(c.norm_eps, 1e-6);
  cr_assert_eq(c.rope_theta, 10000.0);
  cr_assert_eq(c.rope_scaling.type, STRATA_ROPE_DEFAULT);
  cr_assert_eq(c.tied, 0);
  tc_remove_dir(tmp);
}

/* ---------------------------------------------------------------- sharded weights */

/* GPT-2 fixture `small` (the trainable model on main) in `shards` shards of tensors dealt round, with an index, in a
** new scratch directory `tmp`; config.json linked. `edit` (may be NULL) changes the index's weight_map members. */
static void sharded_copy(int shards, const char *edit, char *tmp) {
  char src[1024], a[1200], b[1200];
  snprintf(src, sizeof src, "%s/small", HF_FIXTURES);
  strcpy(tmp, "/tmp/strata-hfs-XXXXXX");
  cr_assert(mkdtemp(tmp));
  snprintf(a, sizeof a, "%s/config.json", src);
  snprintf(b, sizeof b, "%s/config.json", tmp);
  cr_assert(symlink(a, b) == 0);
  strata_safetensors_t f;
  snprintf(a, sizeof a, "%s/model.safetensors", src);
  OK(strata_safetensors_read(a, &f));
  size_t n = strata_safetensors_count(f);
  struct strata_st_tensor *ts = calloc(n, sizeof *ts);
  json_t *map = json_object();
  struct strata_st_meta meta = {"format", "pt"};
  for (int s = 0; s < shards; s++) {
    size_t k = 0;
    char name[64];
    snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, shards);
    for (size_t i = (size_t)s; i < n; i += (size_t)shards) {
      ts[k].name = strata_safetensors_name(f, i);
      OK(strata_safetensors_get(f, ts[k].name, &ts[k].ndim, ts[k].shape, &ts[k].data));
      json_object_set_new(map, ts[k].name, json_string(name));
      k++;
    }
    snprintf(b, sizeof b, "%s/%s", tmp, name);
    OK(strata_safetensors_write(b, ts, k, &meta, 1));
  }
  if (edit) {
    json_error_t err;
    json_t *e = json_loads(edit, 0, &err);
    cr_assert(e, "%s", edit);
    const char *k;
    json_t *v;
    json_object_foreach(e, k, v) {
      if (json_is_null(v))
        json_object_del(map, k);
      else
        json_object_set(map, k, v);
    }
    json_decref(e);
  }
  json_t *index = json_pack("{s:{s:i}, s:o}", "metadata", "total_size", 0, "weight_map", map);
  snprintf(b, sizeof b, "%s/model.safetensors.index.json", tmp);
  cr_assert(json_dump_file(index, b, JSON_INDENT(2)) == 0);
  json_decref(index);
  free(ts);
  strata_safetensors_free(f);
}

/* The parameters of `tr`, malloc'd; *count receives their number. */
static float *params_of(strata_trainer_t tr, size_t *count) {
  OK(strata_trainer_params(tr, NULL, count));
  float *p = malloc(*count * sizeof *p);
  OK(strata_trainer_params(tr, p, count));
  return p;
}

Test(hf_llama, sharded_weights_load_as_one_file_does) {
  char dir[1024], tmp[64];
  snprintf(dir, sizeof dir, "%s/small", HF_FIXTURES);
  strata_model_t m;
  OK(strata_hf_model(dir, &m));
  struct strata_train_options o;
  strata_train_options_default(&o);
  o.device = tc_find_device("host", 0);
  o.batch = 2;
  strata_trainer_t one, many;
  OK(strata_trainer_new(m, NULL, &o, &one));
  OK(strata_trainer_new(m, NULL, &o, &many));
  size_t n1, n2;
  float *fresh = params_of(many, &n2);
  OK(strata_trainer_load_hf(one, dir));
  float *want = params_of(one, &n1);
  cr_assert_eq(n1, n2);
  cr_assert(memcmp(want, fresh, n1 * sizeof *want) != 0, "loading changes the fresh weights");
  for (int shards = 2; shards <= 5; shards += 3) {
    sharded_copy(shards, NULL, tmp);
    OK(strata_trainer_load_hf(many, tmp));
    float *got = params_of(many, &n2);
    cr_assert(n2 == n1 && memcmp(got, want, n1 * sizeof *got) == 0, "%d shards load other weights", shards);
    free(got);
    tc_remove_dir(tmp);
  }
  strata_trainer_free(one);
  strata_trainer_free(many);
  /* faults of the shards: one line naming the file or tensor; the trainer keeps its weights */
  OK(strata_trainer_new(m, NULL, &o, &many));
  free(fresh);
  fresh = params_of(many, &n2);
  static const struct {
    const char *edit, *words;
    int status;
  } cases[] = {
      {"{\"transformer.wte.weight\": \"model-00003-of-00002.safetensors\"}",
       "weight_map names shard model-00003-of-00002.safetensors, which is missing", STRATA_ERR_PARSE},
      {"{\"transformer.wte.weight\": null}", "tensor 'transformer.wte.weight' is not in the index's weight_map",
       STRATA_ERR_PARSE},
      {"{\"transformer.wte.weight\": \"model-00002-of-00002.safetensors\"}",
       "model-00001-of-00002.safetensors: tensor 'transformer.wte.weight' is here, the index puts it in "
       "model-00002-of-00002.safetensors", STRATA_ERR_PARSE},
      {"{\"transformer.h.9.mlp.c_fc.weight\": \"model-00001-of-00002.safetensors\"}",
       "model-00001-of-00002.safetensors: the index puts tensor 'transformer.h.9.mlp.c_fc.weight' in this shard",
       STRATA_ERR_PARSE},
      {"{\"transformer.wte.weight\": \"../small/model.safetensors\"}", "a shard is a file name in the directory",
       STRATA_ERR_PARSE},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    sharded_copy(2, cases[c].edit, tmp);
    int rc = strata_trainer_load_hf(many, tmp);
    cr_assert_eq(rc, cases[c].status, "%s: %s (%s)", cases[c].edit, strata_err_name(rc), strata_last_error());
    cr_assert(strstr(strata_last_error(), cases[c].words), "%s: '%s'", cases[c].edit, strata_last_error());
    tc_remove_dir(tmp);
  }
  /* a shard holding a tensor of the wrong shape, and one in a dtype strata does not read */
  char path[1200];
  for (int bad = 0; bad < 2; bad++) {
    sharded_copy(2, NULL, tmp);
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", tmp);
    strata_safetensors_t f;
    OK(strata_safetensors_read(path, &f));
    size_t n = strata_safetensors_count(f);
    struct strata_st_tensor *ts = calloc(n, sizeof *ts);
    const char *first = NULL;
    for (size_t i = 0; i < n; i++) {
      ts[i].name = strata_safetensors_name(f, i);
      OK(strata_safetensors_get(f, ts[i].name, &ts[i].ndim, ts[i].shape, &ts[i].data));
      if (ts[i].ndim == 2 && !first) {
        first = ts[i].name;
        ts[i].shape[0] = 1; /* a prefix of its rows */
      }
    }
    unlink(path);
    struct strata_st_meta meta = {"format", "pt"};
    if (bad) /* the shapes as they were: only the dtype is wrong */
      ts[0] = (struct strata_st_tensor){.name = ts[0].name, .ndim = ts[0].ndim, .data = ts[0].data};
    for (size_t i = 0; bad && i < n; i++)
      OK(strata_safetensors_get(f, ts[i].name, &ts[i].ndim, ts[i].shape, &ts[i].data));
    OK(strata_safetensors_write(path, ts, n, &meta, 1));
    if (bad) { /* an I32 tensor: the header's first dtype changed in place (the same byte count) */
      FILE *fp = fopen(path, "r+b");
      cr_assert_not_null(fp);
      uint64_t hl;
      cr_assert(fread(&hl, 8, 1, fp) == 1);
      char *h = calloc(hl + 1, 1);
      cr_assert(fread(h, 1, hl, fp) == hl);
      char *d = strstr(h, "\"F32\"");
      cr_assert_not_null(d);
      memcpy(d, "\"I32\"", 5);
      cr_assert(fseek(fp, 8, SEEK_SET) == 0 && fwrite(h, 1, hl, fp) == hl && fclose(fp) == 0);
      free(h);
    }
    int rc = strata_trainer_load_hf(many, tmp);
    cr_assert_eq(rc, bad ? STRATA_ERR_UNSUPPORTED : STRATA_ERR_SHAPE, "%s (%s)", strata_err_name(rc),
                 strata_last_error());
    cr_assert(strstr(strata_last_error(), "model-00002-of-00002.safetensors"), "%s", strata_last_error());
    cr_assert(strstr(strata_last_error(), bad ? "has dtype I32" : "the model wants"), "%s", strata_last_error());
    free(ts);
    strata_safetensors_free(f);
    tc_remove_dir(tmp);
  }
  float *after = params_of(many, &n2);
  cr_assert(memcmp(after, fresh, n1 * sizeof *after) == 0, "a refused load changed the trainer's weights");
  free(after);
  free(want);
  free(fresh);
  strata_trainer_free(many);
  strata_model_free(m);
}
