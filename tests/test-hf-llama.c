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
  setenv("STRATA_BACKENDS", "host,opencl,cuda", 0);
  setenv("STRATA_HOST_DEVICES", "2", 1);
}

TestSuite(hf_llama, .init = setup);

/* ---------------------------------------------------------------- config.json */

/* Two configs say the same model (every field but the name). */
static int same_config(const struct strata_model_config *a, const struct strata_model_config *b) {
  return a->kind == b->kind && a->vocab == b->vocab && a->context == b->context && a->d_model == b->d_model &&
         a->layers == b->layers && a->heads == b->heads && a->d_ff == b->d_ff && a->tied == b->tied &&
         a->kv_heads == b->kv_heads && a->rope_theta == b->rope_theta && a->norm_eps == b->norm_eps &&
         a->rope_scaling.type == b->rope_scaling.type && a->rope_scaling.factor == b->rope_scaling.factor &&
         a->rope_scaling.low_freq_factor == b->rope_scaling.low_freq_factor &&
         a->rope_scaling.high_freq_factor == b->rope_scaling.high_freq_factor &&
         a->rope_scaling.original_context == b->rope_scaling.original_context;
}

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
  cr_assert(same_config(&now, &old), "the older form reads differently");
  cr_assert(same_config(&now, &sharded), "the sharded fixture's config reads differently");
  cr_assert(!same_config(&now, &l3), "the llama3 config reads as the default rope");
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

/* ---------------------------------------------------------------- strata against transformers */

/* What transformers computed for a fixture (make.py): tokens [B, T], logits [B, T, V], greedy [P + G]. */
struct ref {
  strata_safetensors_t st;
  int64_t batch, len, vocab, nseq;
  const float *tokens, *logits, *greedy;
  int prompt;
};

static void ref_load(const char *name, struct ref *r) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s/reference.safetensors", LLAMA_FIXTURES, name);
  OK(strata_safetensors_read(path, &r->st));
  int nd;
  int64_t sh[STRATA_ST_MAX_DIMS];
  OK(strata_safetensors_get(r->st, "tokens", &nd, sh, &r->tokens));
  r->batch = sh[0];
  r->len = sh[1];
  OK(strata_safetensors_get(r->st, "logits", &nd, sh, &r->logits));
  r->vocab = sh[2];
  OK(strata_safetensors_get(r->st, "greedy", &nd, sh, &r->greedy));
  r->nseq = sh[0];
  const char *p = strata_safetensors_meta(r->st, "prompt");
  cr_assert_not_null(p);
  r->prompt = atoi(p);
}

/* A trainer on `dev` of `dir`'s model with context `context` (a Llama has no position table: any context up to
** max_position_embeddings), its weights loaded from `dir`. */
static strata_trainer_t llama_trainer(const char *dir, int64_t context, int dev, strata_model_t *m) {
  struct strata_model_config c;
  OK(strata_hf_config(dir, &c));
  c.context = context;
  OK(strata_model_from_config(&c, m));
  struct strata_train_options o;
  strata_train_options_default(&o);
  o.device = dev;
  o.batch = 2;
  strata_trainer_t tr;
  OK(strata_trainer_new(*m, NULL, &o, &tr));
  OK(strata_trainer_load_hf(tr, dir));
  return tr;
}

/*
** The Llama of `dir` against transformers' reference `name`: every logit of the batch within 1e-4 (absolute; the
** logits are of order 1 to 10, fp32 sums in another order), and the greedy continuation of the prompt token for
** token (each step's argmax of the last position's logits, the sequence so far padded to the context, which
** causal attention does not see).
*/
static void reproduce_dir(const char *dir, const char *name, int dev) {
  struct ref r;
  ref_load(name, &r);
  strata_model_t m;
  const int64_t T = r.len, B = r.batch, V = r.vocab;
  strata_trainer_t tr = llama_trainer(dir, T, dev, &m);
  int32_t *in = calloc((size_t)(B * T), sizeof *in);
  for (int64_t i = 0; i < B * T; i++)
    in[i] = (int32_t)r.tokens[i];
  float *lg = malloc((size_t)(B * T * V) * sizeof *lg);
  OK(strata_trainer_logits_at(tr, in, B, 0, T, lg));
  size_t where = 0;
  double worst = tc_excess(lg, r.logits, (size_t)(B * T * V), 1e-4, 0, &where);
  cr_log_info("%s (%s) on device %d: %lld logits, largest difference %.3g", name, dir, dev, (long long)(B * T * V),
              fabs((double)lg[where] - r.logits[where]));
  cr_assert(worst <= 1, "%s: logit %zu is %.7g, transformers %.7g", name, where, lg[where], r.logits[where]);
  /* greedy: one sequence at a time in row 0 */
  cr_assert(r.nseq <= T, "the greedy sequence fits the context");
  memset(in, 0, (size_t)(B * T) * sizeof *in);
  for (int k = 0; k < r.prompt; k++)
    in[k] = (int32_t)r.greedy[k];
  for (int64_t n = r.prompt; n < r.nseq; n++) {
    OK(strata_trainer_logits_at(tr, in, B, n - 1, 1, lg));
    int best = 0;
    for (int v = 1; v < V; v++)
      if (lg[v] > lg[best])
        best = v;
    cr_assert_eq(best, (int)r.greedy[n], "%s: greedy token %lld is %d, transformers' %d", name, (long long)n, best,
                 (int)r.greedy[n]);
    in[n] = best;
  }
  free(lg);
  free(in);
  strata_trainer_free(tr);
  strata_model_free(m);
  strata_safetensors_free(r.st);
}

static void reproduce(const char *name, int dev) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/%s", LLAMA_FIXTURES, name);
  reproduce_dir(dir, name, dev);
}

/* fixture llama3's config beside fp32's weights, in a new scratch directory `tmp` */
static void llama3_dir(char *tmp) {
  char a[1200], b[1200];
  strcpy(tmp, "/tmp/strata-hf3-XXXXXX");
  cr_assert(mkdtemp(tmp));
  snprintf(a, sizeof a, "%s/llama3/config.json", LLAMA_FIXTURES);
  snprintf(b, sizeof b, "%s/config.json", tmp);
  cr_assert(symlink(a, b) == 0);
  snprintf(a, sizeof a, "%s/fp32/model.safetensors", LLAMA_FIXTURES);
  snprintf(b, sizeof b, "%s/model.safetensors", tmp);
  cr_assert(symlink(a, b) == 0);
}

Test(hf_llama, every_form_matches_transformers_on_host) {
  const int dev = tc_find_device("host", 0);
  reproduce("fp32", dev);
  reproduce("bf16", dev);
  reproduce("sharded-fp16", dev);
  char tmp[64];
  llama3_dir(tmp);
  reproduce_dir(tmp, "llama3", dev);
  tc_remove_dir(tmp);
}

/* The same on an OpenCL device (PoCL here) and on a CUDA one where there is one: every form, the same tolerance,
** greedy tokens exact. */
static void every_form_on(int dev) {
  reproduce("fp32", dev);
  reproduce("bf16", dev);
  reproduce("sharded-fp16", dev);
  char tmp[64];
  llama3_dir(tmp);
  reproduce_dir(tmp, "llama3", dev);
  tc_remove_dir(tmp);
}

Test(hf_llama, every_form_matches_transformers_on_opencl, .timeout = 600) {
  int o = tc_find_device("opencl", 0);
  if (o < 0)
    cr_skip_test("no OpenCL device (backend not built or no platform)");
  every_form_on(o);
}

Test(hf_llama, every_form_matches_transformers_on_cuda) {
  int c = tc_find_device("cuda", 0);
  if (c < 0)
    cr_skip_test("no CUDA device (backend not built, or no GPU or driver)");
  every_form_on(c);
}

/* The same weights under Llama 3's frequency scaling give other logits: the scaling is applied, not dropped. */
Test(hf_llama, llama3_scaling_changes_the_logits) {
  struct ref a, b;
  ref_load("fp32", &a);
  ref_load("llama3", &b);
  size_t n = (size_t)(a.batch * a.len * a.vocab), where = 0;
  cr_assert(tc_excess(a.logits, b.logits, n, 1e-2, 0, &where) > 1, "the fixtures do not tell the two ropes apart");
  strata_safetensors_free(a.st);
  strata_safetensors_free(b.st);
}

/* Every tensor of file `a` is in file `b` with the same shape and the same bits, and the counts agree. */
static void same_tensors(const char *a, const char *b) {
  strata_safetensors_t fa, fb;
  OK(strata_safetensors_read(a, &fa));
  OK(strata_safetensors_read(b, &fb));
  cr_assert_eq(strata_safetensors_count(fa), strata_safetensors_count(fb), "%s and %s hold other tensor counts", a, b);
  for (size_t i = 0; i < strata_safetensors_count(fa); i++) {
    const char *name = strata_safetensors_name(fa, i);
    int na, nb;
    int64_t sa[STRATA_ST_MAX_DIMS], sb[STRATA_ST_MAX_DIMS];
    const float *da, *db;
    OK(strata_safetensors_get(fa, name, &na, sa, &da));
    cr_assert_eq(strata_safetensors_get(fb, name, &nb, sb, &db), STRATA_OK, "%s lacks '%s'", b, name);
    cr_assert(na == nb && memcmp(sa, sb, (size_t)na * sizeof *sa) == 0, "'%s' has another shape", name);
    size_t n = 1;
    for (int d = 0; d < na; d++)
      n *= (size_t)sa[d];
    cr_assert(memcmp(da, db, n * sizeof *da) == 0, "'%s' differs", name);
  }
  strata_safetensors_free(fa);
  strata_safetensors_free(fb);
}

/* fp32 in, a strata checkpoint, strata_hf_export out: transformers' own file back, tensor for tensor, bit for bit
** (names, [out, in] transposes); the exported config reads back to the same config; the export reproduces
** transformers' logits and greedy tokens. The llama3 config likewise keeps its scaling. */
Test(hf_llama, export_round_trips_bit_for_bit) {
  for (int l3 = 0; l3 < 2; l3++) {
    char src[1024], tmp[64] = "", out[256], ckpt[256], path[512], want[1200];
    if (l3)
      llama3_dir(tmp);
    else
      snprintf(src, sizeof src, "%s/fp32", LLAMA_FIXTURES);
    const char *dir = l3 ? tmp : src;
    strata_model_t m;
    struct strata_model_config c;
    OK(strata_hf_config(dir, &c));
    strata_trainer_t tr = llama_trainer(dir, c.context, tc_find_device("host", 0), &m);
    char scratch[] = "/tmp/strata-hfx-XXXXXX";
    cr_assert(mkdtemp(scratch));
    snprintf(ckpt, sizeof ckpt, "%s/tuned.st", scratch);
    snprintf(out, sizeof out, "%s/%s", scratch, l3 ? "llama3" : "fp32");
    OK(strata_trainer_save(tr, ckpt));
    OK(strata_hf_export(ckpt, out));
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    snprintf(want, sizeof want, "%s/fp32/model.safetensors", LLAMA_FIXTURES);
    same_tensors(want, path);
    struct strata_model_config back;
    OK(strata_hf_config(out, &back));
    cr_assert(same_config(&back, &c), "the exported config reads back otherwise");
    reproduce_dir(out, l3 ? "llama3" : "fp32", tc_find_device("host", 0));
    strata_trainer_free(tr);
    strata_model_free(m);
    tc_remove_dir(scratch);
    if (l3)
      tc_remove_dir(tmp);
  }
}

/* A tied Llama (tie_word_embeddings true, no lm_head.weight in the file, as transformers saves one) loads into a tied
** trainer and into its untied form (the head a copy of the embedding) with the same logits; a file whose lm_head.weight
** differs from the embedding is refused for a tied trainer; the tied model exports without a head. */
Test(hf_llama, a_tied_llama_loads_tied_and_untied) {
  char tmp[64], src[1200], path[1200];
  edited_config("{\"tie_word_embeddings\": true}", tmp);
  snprintf(src, sizeof src, "%s/fp32/model.safetensors", LLAMA_FIXTURES);
  strata_safetensors_t f;
  OK(strata_safetensors_read(src, &f));
  size_t n = strata_safetensors_count(f), k = 0;
  struct strata_st_tensor *ts = calloc(n, sizeof *ts);
  for (size_t i = 0; i < n; i++) {
    const char *name = strata_safetensors_name(f, i);
    if (strcmp(name, "lm_head.weight") == 0)
      continue;
    ts[k].name = name;
    OK(strata_safetensors_get(f, name, &ts[k].ndim, ts[k].shape, &ts[k].data));
    k++;
  }
  cr_assert_eq(k, n - 1);
  struct strata_st_meta meta = {"format", "pt"};
  snprintf(path, sizeof path, "%s/model.safetensors", tmp);
  OK(strata_safetensors_write(path, ts, k, &meta, 1));
  const int dev = tc_find_device("host", 0);
  strata_model_t mt, mu;
  strata_trainer_t tied = llama_trainer(tmp, 16, dev, &mt);
  struct strata_model_config c;
  OK(strata_hf_config(tmp, &c));
  cr_assert_eq(c.tied, 1);
  c.tied = 0;
  c.context = 16;
  OK(strata_model_from_config(&c, &mu));
  struct strata_train_options o;
  strata_train_options_default(&o);
  o.device = dev;
  o.batch = 2;
  strata_trainer_t untied;
  OK(strata_trainer_new(mu, NULL, &o, &untied));
  OK(strata_trainer_load_hf(untied, tmp));
  struct ref r;
  ref_load("fp32", &r);
  const int64_t T = 16, B = 2, V = r.vocab;
  int32_t in[2 * 16];
  for (int i = 0; i < B * T; i++)
    in[i] = (int32_t)r.tokens[i];
  float *a = malloc((size_t)(B * T * V) * sizeof *a), *b = malloc((size_t)(B * T * V) * sizeof *b);
  OK(strata_trainer_logits_at(tied, in, B, 0, T, a));
  OK(strata_trainer_logits_at(untied, in, B, 0, T, b));
  size_t where = 0;
  cr_assert(tc_excess(a, b, (size_t)(B * T * V), 1e-5, 0, &where) <= 1, "logit %zu: tied %.7g, untied %.7g", where,
            a[where], b[where]);
  /* and not transformers' untied model: the head is the embedding now */
  cr_assert(tc_excess(a, r.logits, (size_t)(B * T * V), 1e-2, 0, &where) > 1, "the head was not tied");
  /* exported, the tied model has no head of its own, and the embedding is the file's */
  char scratch[] = "/tmp/strata-hft-XXXXXX", ck[64], out[64], wts[96];
  cr_assert(mkdtemp(scratch));
  snprintf(ck, sizeof ck, "%s/t.st", scratch);
  snprintf(out, sizeof out, "%s/hf", scratch);
  snprintf(wts, sizeof wts, "%s/model.safetensors", out);
  OK(strata_trainer_save(tied, ck));
  OK(strata_hf_export(ck, out));
  same_tensors(path, wts);
  tc_remove_dir(scratch);
  /* a head of its own in the file, for a tied trainer: refused naming it */
  ts[k] = (struct strata_st_tensor){.name = "lm_head.weight"};
  OK(strata_safetensors_get(f, "lm_head.weight", &ts[k].ndim, ts[k].shape, &ts[k].data));
  unlink(path);
  OK(strata_safetensors_write(path, ts, k + 1, &meta, 1));
  cr_assert_eq(strata_trainer_load_hf(tied, tmp), STRATA_ERR_UNSUPPORTED, "%s", strata_last_error());
  cr_assert(strstr(strata_last_error(), "lm_head.weight differs from model.embed_tokens.weight"), "%s",
            strata_last_error());
  free(a);
  free(b);
  free(ts);
  strata_safetensors_free(f);
  strata_safetensors_free(r.st);
  strata_trainer_free(tied);
  strata_trainer_free(untied);
  strata_model_free(mt);
  strata_model_free(mu);
  tc_remove_dir(tmp);
}
