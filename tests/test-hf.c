/* SPDX-License-Identifier: MIT */
/* test-hf.c — Hugging Face GPT-2 checkpoints: strata reproduces transformers' logits and loss on the fixtures made by
** tests/fixtures/hf-gpt2/make-fixture.py, on every backend, from fp32, bf16 and fp16 weights; export round-trips bit
** for bit, in fp32 and in bf16; what strata cannot represent is refused naming the field; fine-tuning a fixture on a
** pipeline gives one device's losses. */
#include <jansson.h>
#include <stdio.h>
#include <sys/stat.h>

#include "common.h"

static void setup(void) {
  setenv("STRATA_BACKENDS", "host,opencl,cuda", 0);
  setenv("STRATA_HOST_DEVICES", "2", 1);
}

TestSuite(hf, .init = setup);

/* The reference transformers computed for one fixture. */
struct ref {
  strata_safetensors_t st;
  int64_t batch, len;       /* tokens [batch, len = T + 1] */
  const float *tokens, *logits;
  int last_only;            /* logits [batch, V] of the last position, else [batch, T, V] */
  float loss;
};

static void ref_load(const char *fixture, struct ref *r) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s/reference.safetensors", HF_FIXTURES, fixture);
  OK(strata_safetensors_read(path, &r->st));
  int nd;
  int64_t sh[STRATA_ST_MAX_DIMS];
  const float *loss;
  OK(strata_safetensors_get(r->st, "tokens", &nd, sh, &r->tokens));
  r->batch = sh[0];
  r->len = sh[1];
  OK(strata_safetensors_get(r->st, "logits", &nd, sh, &r->logits));
  r->last_only = nd == 2;
  OK(strata_safetensors_get(r->st, "loss", NULL, NULL, &loss));
  r->loss = loss[0];
}

static void fixture_dir(const char *fixture, char *buf, size_t n) { snprintf(buf, n, "%s/%s", HF_FIXTURES, fixture); }

/* A data-less trainer for `dir`'s model on `dev` with batch `batch`, its weights loaded from `dir`. */
static strata_trainer_t hf_trainer(const char *dir, int dev, int64_t batch, strata_model_t *model) {
  OK(strata_hf_model(dir, model));
  struct strata_train_options o;
  strata_train_options_default(&o);
  o.device = dev;
  o.batch = batch;
  strata_trainer_t tr;
  OK(strata_trainer_new(*model, NULL, &o, &tr));
  OK(strata_trainer_load_hf(tr, dir));
  return tr;
}

/* Load the model of `dir` on device `dev` and compare its loss and logits with transformers' for fixture `name`. */
static void reproduce_dir(const char *dir, const char *name, int dev) {
  struct ref r;
  ref_load(name, &r);
  strata_model_t m;
  strata_trainer_t tr = hf_trainer(dir, dev, r.batch, &m);
  const struct strata_model_config *c = strata_model_config(m);
  int64_t T = c->context, V = c->vocab, B = r.batch;
  cr_assert_eq(r.len, T + 1);
  int32_t *in = malloc((size_t)(B * T) * sizeof *in), *tg = malloc((size_t)(B * T) * sizeof *tg);
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < T; t++) {
      in[b * T + t] = (int32_t)r.tokens[b * (T + 1) + t];
      tg[b * T + t] = (int32_t)r.tokens[b * (T + 1) + t + 1];
    }
  float loss = 0;
  OK(strata_trainer_loss_grad(tr, in, tg, B, &loss, NULL));
  double rel = fabs((double)loss - r.loss) / fabs((double)r.loss);
  cr_log_info("%s on device %d: loss %.9g, transformers %.9g, relative difference %.3g", name, dev, loss, r.loss, rel);
  cr_assert(rel <= 1e-5, "%s: loss %.9g, transformers %.9g (relative %.3g)", name, loss, r.loss, rel);
  int64_t count = r.last_only ? 1 : T;
  float *lg = malloc((size_t)(B * count * V) * sizeof *lg);
  OK(strata_trainer_logits_at(tr, in, B, T - count, count, lg));
  size_t where = 0;
  double worst = tc_excess(lg, r.logits, (size_t)(B * count * V), 1e-4, 0, &where);
  double absdiff = fabs((double)lg[where] - r.logits[where]);
  cr_log_info("%s on device %d: %lld logits, largest difference %.3g", name, dev, (long long)(B * count * V), absdiff);
  cr_assert(worst <= 1, "%s: logit %zu is %.7g, transformers %.7g", name, where, lg[where], r.logits[where]);
  free(lg);
  free(in);
  free(tg);
  strata_trainer_free(tr);
  strata_model_free(m);
  strata_safetensors_free(r.st);
}

/* Load fixture `name` on device `dev` and compare its loss and logits with transformers'. */
static void reproduce(const char *name, int dev) {
  char dir[1024];
  fixture_dir(name, dir, sizeof dir);
  reproduce_dir(dir, name, dev);
}

Test(hf, small_fixture_matches_transformers_on_host) { reproduce("small", tc_find_device("host", 0)); }

/* small's weights saved by transformers in bf16 and in fp16: strata widens them to float32 exactly, so its logits
** are transformers' for those weights computed in fp32 (make-fixture.py), at the fp32 fixtures' tolerance */
Test(hf, bf16_and_fp16_fixtures_match_transformers_on_host) {
  reproduce("small-bf16", tc_find_device("host", 0));
  reproduce("small-fp16", tc_find_device("host", 0));
}

Test(hf, tied_gpt2_vocabulary_matches_transformers_on_host) { reproduce("tied-50257", tc_find_device("host", 0)); }

Test(hf, both_fixtures_match_transformers_on_opencl, .timeout = 600) {
  int o = tc_find_device("opencl", 0);
  if (o < 0)
    cr_skip_test("no OpenCL device (backend not built or no platform)");
  reproduce("small", o);
  reproduce("small-bf16", o);
  reproduce("small-fp16", o);
  reproduce("tied-50257", o);
}

Test(hf, both_fixtures_match_transformers_on_cuda) {
  int c = tc_find_device("cuda", 0);
  if (c < 0)
    cr_skip_test("no CUDA device (backend not built, or no GPU or driver)");
  reproduce("small", c);
  reproduce("small-bf16", c);
  reproduce("small-fp16", c);
  reproduce("tied-50257", c);
}

Test(hf, the_model_follows_config_json) {
  char dir[1024];
  fixture_dir("small", dir, sizeof dir);
  strata_model_t m;
  OK(strata_hf_model(dir, &m));
  const struct strata_model_config *c = strata_model_config(m);
  cr_assert_eq(c->vocab, 384);
  cr_assert_eq(c->context, 32);
  cr_assert_eq(c->d_model, 64);
  cr_assert_eq(c->layers, 2);
  cr_assert_eq(c->heads, 4);
  cr_assert_eq(c->d_ff, 256);
  cr_assert_eq(c->tied, 0);
  cr_assert_str_eq(c->name, "small");
  strata_model_free(m);
  fixture_dir("tied-50257", dir, sizeof dir);
  OK(strata_hf_model(dir, &m));
  cr_assert_eq(strata_model_config(m)->vocab, 50257);
  cr_assert_eq(strata_model_config(m)->tied, 1);
  strata_model_free(m);
  /* a config.json that is a FIFO is refused at once, without blocking on it */
  char tmp[] = "/tmp/strata-hf-XXXXXX", fifo[64];
  cr_assert(mkdtemp(tmp));
  snprintf(fifo, sizeof fifo, "%s/config.json", tmp);
  cr_assert(mkfifo(fifo, 0600) == 0);
  m = NULL;
  cr_assert_eq(strata_hf_model(tmp, &m), STRATA_ERR_IO, "%s", strata_last_error());
  cr_assert(strstr(strata_last_error(), "FIFO"), "%s", strata_last_error());
  cr_assert_null(m);
  unlink(fifo);
  tc_remove_dir(tmp);
}

/* Every tensor of `a` is in `b` under the same name, shape and bytes, and the counts agree. */
static void same_tensors(const char *a, const char *b) {
  strata_safetensors_t x, y;
  OK(strata_safetensors_read(a, &x));
  OK(strata_safetensors_read(b, &y));
  cr_assert_eq(strata_safetensors_count(x), strata_safetensors_count(y), "%zu tensors in %s, %zu in %s",
               strata_safetensors_count(x), a, strata_safetensors_count(y), b);
  for (size_t i = 0; i < strata_safetensors_count(x); i++) {
    const char *name = strata_safetensors_name(x, i);
    int n1, n2;
    int64_t s1[STRATA_ST_MAX_DIMS], s2[STRATA_ST_MAX_DIMS];
    const float *d1, *d2;
    OK(strata_safetensors_get(x, name, &n1, s1, &d1));
    int rc = strata_safetensors_get(y, name, &n2, s2, &d2);
    cr_assert_eq(rc, STRATA_OK, "%s: no tensor %s", b, name);
    cr_assert_eq(n1, n2, "%s", name);
    cr_assert(memcmp(s1, s2, sizeof s1) == 0, "%s: shapes differ", name);
    size_t n = 1;
    for (int d = 0; d < n1; d++)
      n *= (size_t)s1[d];
    cr_assert(memcmp(d1, d2, n * sizeof *d1) == 0, "%s: values differ", name);
  }
  cr_assert_str_eq(strata_safetensors_meta(y, "format"), "pt");
  strata_safetensors_free(x);
  strata_safetensors_free(y);
}

/* Import, save as a strata checkpoint, export: the same tensors bit for bit, the same config, and the export loads back. */
static void round_trip(const char *name) {
  char dir[1024], tmp[] = "/tmp/strata-hf-XXXXXX";
  fixture_dir(name, dir, sizeof dir);
  cr_assert(mkdtemp(tmp));
  char ckpt[1200], out[1200], a[2048], b[2048];
  snprintf(ckpt, sizeof ckpt, "%s/run.st", tmp);
  snprintf(out, sizeof out, "%s/exported", tmp);
  strata_model_t m;
  strata_trainer_t tr = hf_trainer(dir, tc_find_device("host", 0), 1, &m);
  OK(strata_trainer_save(tr, ckpt));
  OK(strata_hf_export(ckpt, out));
  snprintf(a, sizeof a, "%s/model.safetensors", dir);
  snprintf(b, sizeof b, "%s/model.safetensors", out);
  same_tensors(a, b);
  /* an fp32 export says no dtype in config.json, as before bf16 exports existed */
  json_error_t jerr;
  snprintf(a, sizeof a, "%s/config.json", out);
  json_t *jc = json_load_file(a, 0, &jerr);
  cr_assert(jc && !json_object_get(jc, "torch_dtype") && !json_object_get(jc, "dtype"));
  json_decref(jc);
  /* the exported config describes the same model, and loads into it */
  strata_model_t m2;
  OK(strata_hf_model(out, &m2));
  const struct strata_model_config *c1 = strata_model_config(m), *c2 = strata_model_config(m2);
  cr_assert(c1->vocab == c2->vocab && c1->context == c2->context && c1->d_model == c2->d_model &&
            c1->layers == c2->layers && c1->heads == c2->heads && c1->d_ff == c2->d_ff && c1->tied == c2->tied);
  OK(strata_trainer_load_hf(tr, out));
  json_error_t err;
  snprintf(a, sizeof a, "%s/config.json", dir);
  snprintf(b, sizeof b, "%s/config.json", out);
  json_t *ja = json_load_file(a, 0, &err), *jb = json_load_file(b, 0, &err);
  cr_assert(ja && jb);
  static const char *const keys[] = {"model_type", "vocab_size", "n_positions", "n_embd", "n_layer", "n_head",
                                     "n_inner", "activation_function", "layer_norm_epsilon", "tie_word_embeddings",
                                     NULL};
  for (int k = 0; keys[k]; k++)
    cr_assert(json_equal(json_object_get(ja, keys[k]), json_object_get(jb, keys[k])), "config field %s differs",
              keys[k]);
  json_decref(ja);
  json_decref(jb);
  strata_model_free(m2);
  strata_trainer_free(tr);
  strata_model_free(m);
  unlink(ckpt);
  snprintf(a, sizeof a, "%s/model.safetensors", out);
  unlink(a);
  snprintf(a, sizeof a, "%s/config.json", out);
  unlink(a);
  rmdir(out);
  tc_remove_dir(tmp);
}

Test(hf, export_round_trips_bit_for_bit) {
  round_trip("small");
  round_trip("tied-50257");
}

/* Copy fixture `name`'s files into a new scratch directory, with config.json changed by `edit` (a JSON object whose
** members replace the config's; a null member deletes one). */
static void edited_copy(const char *name, const char *edit, char *tmp) {
  char dir[1024], a[1200], b[1200];
  fixture_dir(name, dir, sizeof dir);
  strcpy(tmp, "/tmp/strata-hf-XXXXXX");
  cr_assert(mkdtemp(tmp));
  snprintf(a, sizeof a, "%s/model.safetensors", dir);
  snprintf(b, sizeof b, "%s/model.safetensors", tmp);
  cr_assert(symlink(a, b) == 0);
  json_error_t err;
  snprintf(a, sizeof a, "%s/config.json", dir);
  json_t *cfg = json_load_file(a, 0, &err), *e = json_loads(edit, 0, &err);
  cr_assert(cfg && e, "%s", edit);
  const char *k;
  json_t *v;
  json_object_foreach(e, k, v) {
    if (json_is_null(v))
      json_object_del(cfg, k);
    else
      json_object_set(cfg, k, v);
  }
  snprintf(b, sizeof b, "%s/config.json", tmp);
  cr_assert(json_dump_file(cfg, b, 0) == 0);
  json_decref(cfg);
  json_decref(e);
}

/* `edit` of the small fixture's config is refused with `status` and a message holding `words`. */
static void refused(const char *edit, int status, const char *words) {
  char tmp[64];
  edited_copy("small", edit, tmp);
  strata_model_t m = NULL;
  int rc = strata_hf_model(tmp, &m);
  cr_assert_eq(rc, status, "%s: %s (%s)", edit, strata_err_name(rc), strata_last_error());
  cr_assert(strstr(strata_last_error(), words), "%s: message '%s' lacks '%s'", edit, strata_last_error(), words);
  cr_assert_null(m);
  tc_remove_dir(tmp);
}

Test(hf, what_strata_cannot_represent_is_refused_naming_the_field) {
  refused("{\"activation_function\": \"relu\"}", STRATA_ERR_UNSUPPORTED, "activation_function \"relu\"");
  refused("{\"activation_function\": \"gelu\"}", STRATA_ERR_UNSUPPORTED, "activation_function");
  refused("{\"layer_norm_epsilon\": 1e-6}", STRATA_ERR_UNSUPPORTED, "layer_norm_epsilon");
  refused("{\"model_type\": \"mistral\"}", STRATA_ERR_UNSUPPORTED, "model_type \"mistral\"");
  refused("{\"architectures\": [\"GPT2DoubleHeadsModel\"]}", STRATA_ERR_UNSUPPORTED, "GPT2DoubleHeadsModel");
  refused("{\"scale_attn_by_inverse_layer_idx\": true}", STRATA_ERR_UNSUPPORTED, "scale_attn_by_inverse_layer_idx");
  refused("{\"scale_attn_weights\": false}", STRATA_ERR_UNSUPPORTED, "scale_attn_weights");
  refused("{\"add_cross_attention\": true}", STRATA_ERR_UNSUPPORTED, "add_cross_attention");
  refused("{\"quantization_config\": {\"bits\": 4}}", STRATA_ERR_UNSUPPORTED, "quantization_config");
  refused("{\"n_ctx\": 64}", STRATA_ERR_UNSUPPORTED, "n_ctx");
  refused("{\"n_embd\": null}", STRATA_ERR_PARSE, "n_embd");
  refused("{\"n_head\": \"four\"}", STRATA_ERR_PARSE, "n_head");
  /* sizes strata's models do not take are the file's values it cannot use, named with their Hugging Face keys */
  refused("{\"n_head\": 5}", STRATA_ERR_UNSUPPORTED, "heads = 5 does not divide");
  refused("{\"n_positions\": 100000, \"n_ctx\": null}", STRATA_ERR_UNSUPPORTED, "n_positions is its context");
  refused("{\"n_layer\": 5000}", STRATA_ERR_UNSUPPORTED, "layers = 5000 must lie in");
  /* dropout is accepted: strata trains without it, transformers evaluates without it */
  char tmp[64];
  edited_copy("small", "{\"resid_pdrop\": 0.3, \"gelu\": null, \"activation_function\": \"gelu_pytorch_tanh\"}", tmp);
  strata_model_t m;
  OK(strata_hf_model(tmp, &m));
  strata_model_free(m);
  tc_remove_dir(tmp);
}

Test(hf, weights_that_do_not_fit_are_refused_naming_the_tensor) {
  char dir[1024], tmp[64], path[1200];
  fixture_dir("small", dir, sizeof dir);
  strata_model_t m;
  strata_trainer_t tr = hf_trainer(dir, tc_find_device("host", 0), 1, &m);
  /* another model's config: refused before any weight is read */
  edited_copy("small", "{\"n_layer\": 3}", tmp);
  int rc = strata_trainer_load_hf(tr, tmp);
  cr_assert_eq(rc, STRATA_ERR_SHAPE, "%s", strata_last_error());
  tc_remove_dir(tmp);
  /* a tensor missing, one of the wrong shape, one too many */
  strata_safetensors_t f;
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  OK(strata_safetensors_read(path, &f));
  size_t n = strata_safetensors_count(f);
  struct strata_st_tensor *ts = calloc(n + 1, sizeof *ts);
  for (size_t i = 0; i < n; i++) {
    ts[i].name = strata_safetensors_name(f, i);
    OK(strata_safetensors_get(f, ts[i].name, &ts[i].ndim, ts[i].shape, &ts[i].data));
  }
  struct strata_st_meta meta = {"format", "pt"};
  static const struct {
    const char *what, *words;
    int status;
  } cases[] = {{"missing", "transformer.h.1.mlp.c_fc.bias' is missing", STRATA_ERR_PARSE},
               {"shape", "transformer.wpe.weight' is [16, 64], the model wants [32, 64]", STRATA_ERR_SHAPE},
               {"extra", "transformer.h.0.attn.rotary.weight' has no place", STRATA_ERR_UNSUPPORTED}};
  for (int c = 0; c < 3; c++) {
    edited_copy("small", "{}", tmp);
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    unlink(path);
    struct strata_st_tensor *w = calloc(n + 1, sizeof *w);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
      if (c == 0 && strcmp(ts[i].name, "transformer.h.1.mlp.c_fc.bias") == 0)
        continue;
      w[k] = ts[i];
      if (c == 1 && strcmp(ts[i].name, "transformer.wpe.weight") == 0)
        w[k].shape[0] = 16;
      k++;
    }
    if (c == 2) {
      w[k] = ts[0];
      w[k++].name = "transformer.h.0.attn.rotary.weight";
    }
    OK(strata_safetensors_write(path, w, k, &meta, 1));
    rc = strata_trainer_load_hf(tr, tmp);
    cr_assert_eq(rc, cases[c].status, "%s: %s: %s", cases[c].what, strata_err_name(rc), strata_last_error());
    cr_assert(strstr(strata_last_error(), cases[c].words), "%s: '%s'", cases[c].what, strata_last_error());
    free(w);
    tc_remove_dir(tmp);
  }
  /* the old attention-mask buffers are skipped */
  edited_copy("small", "{}", tmp);
  snprintf(path, sizeof path, "%s/model.safetensors", tmp);
  unlink(path);
  static float mask[32 * 32];
  struct strata_st_tensor *w = calloc(n + 1, sizeof *w);
  memcpy(w, ts, n * sizeof *w);
  w[n] = (struct strata_st_tensor){.name = "transformer.h.0.attn.bias", .ndim = 4, .shape = {1, 1, 32, 32},
                                   .data = mask};
  OK(strata_safetensors_write(path, w, n + 1, &meta, 1));
  OK(strata_trainer_load_hf(tr, tmp));
  free(w);
  tc_remove_dir(tmp);
  /* weights in a dtype strata does not read (integers, fp64, fp8) are refused naming it, saying how to get fp32 */
  static const char *const odd[] = {"I64", "F64", "I8"};
  for (int d = 0; d < 3; d++) {
    edited_copy("small", "{}", tmp);
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    unlink(path);
    char head[200];
    int hn = snprintf(head, sizeof head,
                      "{\"transformer.wte.weight\":{\"dtype\":\"%s\",\"shape\":[1],\"data_offsets\":[0,%d]}}",
                      odd[d], d == 2 ? 1 : 8);
    FILE *hf = fopen(path, "wb");
    uint64_t hlen = (uint64_t)hn;
    cr_assert(hf && fwrite(&hlen, 8, 1, hf) == 1 && fwrite(head, 1, hlen, hf) == hlen &&
              fwrite("\0\0\0\0\0\0\0\0", 1, d == 2 ? 1 : 8, hf) == (d == 2 ? 1u : 8u));
    cr_assert(fclose(hf) == 0);
    rc = strata_trainer_load_hf(tr, tmp);
    cr_assert_eq(rc, STRATA_ERR_UNSUPPORTED, "%s", strata_last_error());
    char says[64];
    snprintf(says, sizeof says, "'transformer.wte.weight' has dtype %s", odd[d]);
    cr_assert(strstr(strata_last_error(), says) && strstr(strata_last_error(), "model.float()"), "%s",
              strata_last_error());
    tc_remove_dir(tmp);
  }
  /* a missing directory; a directory without weights, or with them only as a pickle */
  cr_assert_eq(strata_trainer_load_hf(tr, "/nonexistent/gpt2"), STRATA_ERR_NOT_FOUND);
  edited_copy("small", "{}", tmp);
  snprintf(path, sizeof path, "%s/model.safetensors", tmp);
  unlink(path);
  cr_assert_eq(strata_trainer_load_hf(tr, tmp), STRATA_ERR_NOT_FOUND);
  cr_assert(strstr(strata_last_error(), "no model.safetensors"), "%s", strata_last_error());
  snprintf(path, sizeof path, "%s/pytorch_model.bin", tmp);
  FILE *pk = fopen(path, "wb");
  cr_assert(pk && fclose(pk) == 0);
  cr_assert_eq(strata_trainer_load_hf(tr, tmp), STRATA_ERR_UNSUPPORTED);
  cr_assert(strstr(strata_last_error(), "pytorch_model.bin"), "%s", strata_last_error());
  tc_remove_dir(tmp);
  cr_assert_eq(strata_hf_model("/nonexistent/gpt2", &m), STRATA_ERR_NOT_FOUND);
  free(ts);
  strata_safetensors_free(f);
  strata_trainer_free(tr);
  strata_model_free(m);
}

Test(hf, a_tied_checkpoint_loads_untied_with_the_head_a_copy_of_the_embedding) {
  char dir[1024];
  fixture_dir("tied-50257", dir, sizeof dir);
  struct ref r;
  ref_load("tied-50257", &r);
  strata_model_t tied;
  OK(strata_hf_model(dir, &tied));
  struct strata_model_config c = *strata_model_config(tied);
  c.tied = 0;
  strata_model_t m;
  OK(strata_model_from_config(&c, &m));
  struct strata_train_options o;
  strata_train_options_default(&o);
  o.device = tc_find_device("host", 0);
  o.batch = r.batch;
  strata_trainer_t tr;
  OK(strata_trainer_new(m, NULL, &o, &tr));
  OK(strata_trainer_load_hf(tr, dir));
  int64_t T = c.context, B = r.batch;
  int32_t *in = malloc((size_t)(B * T) * sizeof *in), *tg = malloc((size_t)(B * T) * sizeof *tg);
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < T; t++) {
      in[b * T + t] = (int32_t)r.tokens[b * (T + 1) + t];
      tg[b * T + t] = (int32_t)r.tokens[b * (T + 1) + t + 1];
    }
  float loss;
  OK(strata_trainer_loss_grad(tr, in, tg, B, &loss, NULL));
  cr_assert(fabs((double)loss - r.loss) <= 1e-5 * r.loss, "untied: loss %.9g, transformers %.9g", loss, r.loss);
  /* but an untied checkpoint does not load into a tied model */
  strata_trainer_t tt;
  OK(strata_trainer_new(tied, NULL, &o, &tt));
  fixture_dir("small", dir, sizeof dir);
  cr_assert_eq(strata_trainer_load_hf(tt, dir), STRATA_ERR_SHAPE);
  strata_trainer_free(tt);
  free(in);
  free(tg);
  strata_trainer_free(tr);
  strata_model_free(m);
  strata_model_free(tied);
  strata_safetensors_free(r.st);
}

/* Steps of fine-tuning `model` (its weights from `dir`) on `ds`, on one device (pp 0) or a pipeline of two. */
static void fine_tune(strata_model_t model, const char *dir, strata_dataset_t ds, int pp, int steps,
                      float *losses /* OUT */) {
  struct strata_train_options o;
  strata_train_options_default(&o);
  o.device = tc_find_device("host", 0);
  o.batch = 2;
  o.accum = 4;
  o.steps = steps;
  o.warmup = 1;
  o.lr = 1e-2f;
  o.min_lr = 1e-3f;
  strata_trainer_t tr;
  if (pp) {
    const int devs[2] = {tc_find_device("host", 0), tc_find_device("host", 1)};
    struct strata_pipeline_options p = {.devices = 2, .device = devs, .microbatches = 4};
    OK(strata_trainer_new_pipeline(model, ds, &o, &p, &tr));
  } else {
    OK(strata_trainer_new(model, ds, &o, &tr));
  }
  OK(strata_trainer_load_hf(tr, dir));
  for (int s = 0; s < steps; s++) {
    struct strata_step_stats st;
    OK(strata_trainer_step(tr, &st));
    losses[s] = st.loss;
  }
  strata_trainer_free(tr);
}

Test(hf, fine_tuning_the_fixture_on_a_pipeline_gives_one_devices_losses) {
  if (tc_find_device("host", 1) < 0)
    cr_skip_test("needs two host devices (STRATA_HOST_DEVICES=2)");
  char dir[1024], tmp[] = "/tmp/strata-hf-XXXXXX", path[1100];
  fixture_dir("small", dir, sizeof dir);
  cr_assert(mkdtemp(tmp));
  /* an llm.c token file of ids 0..383 with some structure: a walk that mostly steps by one */
  enum { N = 6000 };
  static uint8_t bytes[1024 + 2 * N];
  uint32_t head[3] = {20240520u, 1u, N};
  memcpy(bytes, head, sizeof head);
  uint32_t t = 0, s = 12345;
  for (int i = 0; i < N; i++) {
    s = s * 1103515245u + 12345u;
    t = (s >> 16) % 8 == 0 ? (s >> 8) % 384 : (t + 1) % 384;
    bytes[1024 + 2 * i] = (uint8_t)(t & 0xff);
    bytes[1024 + 2 * i + 1] = (uint8_t)(t >> 8);
  }
  snprintf(path, sizeof path, "%s/train.bin", tmp);
  FILE *f = fopen(path, "wb");
  cr_assert(f && fwrite(bytes, 1, sizeof bytes, f) == sizeof bytes && fclose(f) == 0);
  strata_model_t m;
  OK(strata_hf_model(dir, &m));
  strata_dataset_t ds;
  OK(strata_dataset_tokens(path, STRATA_TOKENS_AUTO, 384, 0.1, &ds));
  enum { STEPS = 16 };
  float one[STEPS], two[STEPS];
  fine_tune(m, dir, ds, 0, STEPS, one);
  fine_tune(m, dir, ds, 1, STEPS, two);
  for (int i = 0; i < STEPS; i++)
    cr_assert(one[i] == two[i], "step %d: one device %.9g, --pp 2 %.9g", i + 1, one[i], two[i]);
  cr_assert(one[STEPS - 1] < one[0] - 0.3f, "fine-tuning learns: %.4f -> %.4f", one[0], one[STEPS - 1]);
  cr_log_info("fine-tuning, one device = a pipeline of two: step 1 %.6f, step %d %.6f", one[0], STEPS,
              one[STEPS - 1]);
  strata_dataset_free(ds);
  strata_model_free(m);
  unlink(path);
  tc_remove_dir(tmp);
}

/* Both files (read widened) hold the same tensors: names, shapes, how they are stored, and values bit for bit. */
static void same_widened(const char *a, const char *b) {
  strata_safetensors_t x, y;
  OK(strata_safetensors_read_flags(a, STRATA_ST_READ_WIDEN, &x));
  OK(strata_safetensors_read_flags(b, STRATA_ST_READ_WIDEN, &y));
  cr_assert_eq(strata_safetensors_count(x), strata_safetensors_count(y));
  for (size_t i = 0; i < strata_safetensors_count(x); i++) {
    const char *name = strata_safetensors_name(x, i);
    int n1, n2;
    int64_t s1[STRATA_ST_MAX_DIMS], s2[STRATA_ST_MAX_DIMS];
    const float *d1, *d2;
    enum strata_st_dtype t1, t2;
    OK(strata_safetensors_get(x, name, &n1, s1, &d1));
    cr_assert_eq(strata_safetensors_get(y, name, &n2, s2, &d2), STRATA_OK, "%s: no %s", b, name);
    OK(strata_safetensors_dtype(x, name, &t1));
    OK(strata_safetensors_dtype(y, name, &t2));
    cr_assert(n1 == n2 && memcmp(s1, s2, sizeof s1) == 0 && t1 == t2, "%s: shape or dtype differs", name);
    size_t n = 1;
    for (int d = 0; d < n1; d++)
      n *= (size_t)s1[d];
    cr_assert(memcmp(d1, d2, n * sizeof *d1) == 0, "%s: values differ", name);
  }
  strata_safetensors_free(x);
  strata_safetensors_free(y);
}

/* float32 rounded to the nearest bfloat16, ties to even, and widened back: torch's tensor.to(torch.bfloat16), written
** here from its definition rather than taken from the library */
static float bf16_rounded(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    u |= 0x00400000u;
  else
    u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* The tensors of `file` (read widened), checked against those of `fp32` (an F32 file of the same names and shapes):
** each stored as `dtype`, and bf16 ones equal to the fp32 values rounded, bit for bit; fp16 ones within binary16's
** rounding (half an ulp: 2^-11 relative for normals, 2^-25 absolute below 2^-14). */
static void rounded_from(const char *file, const char *fp32, enum strata_st_dtype dtype) {
  strata_safetensors_t h, f;
  OK(strata_safetensors_read_flags(file, STRATA_ST_READ_WIDEN, &h));
  OK(strata_safetensors_read(fp32, &f));
  cr_assert_eq(strata_safetensors_count(h), strata_safetensors_count(f));
  size_t total = 0;
  for (size_t i = 0; i < strata_safetensors_count(f); i++) {
    const char *name = strata_safetensors_name(f, i);
    int n1, n2;
    int64_t s1[STRATA_ST_MAX_DIMS], s2[STRATA_ST_MAX_DIMS];
    const float *want, *got;
    enum strata_st_dtype dt;
    OK(strata_safetensors_get(f, name, &n1, s1, &want));
    cr_assert_eq(strata_safetensors_get(h, name, &n2, s2, &got), STRATA_OK, "%s: no %s", file, name);
    OK(strata_safetensors_dtype(h, name, &dt));
    cr_assert_eq(dt, dtype, "%s: %s is stored as %d", file, name, (int)dt);
    cr_assert(n1 == n2 && memcmp(s1, s2, sizeof s1) == 0, "%s: shapes differ", name);
    size_t n = 1;
    for (int d = 0; d < n1; d++)
      n *= (size_t)s1[d];
    for (size_t k = 0; k < n; k++) {
      if (dtype == STRATA_ST_BF16) {
        float r = bf16_rounded(want[k]);
        cr_assert(memcmp(&r, &got[k], sizeof r) == 0, "%s[%zu]: %.9g, the rounding of %.9g is %.9g", name, k,
                  got[k], want[k], r);
      } else {
        double err = fabs((double)got[k] - want[k]), ok = fmax(ldexp(fabs(want[k]), -11), ldexp(1, -25));
        cr_assert(err <= ok, "%s[%zu]: %.9g from %.9g", name, k, got[k], want[k]);
      }
    }
    total += n;
  }
  cr_log_info("%s: %zu values, each the rounding of %s's", file, total, fp32);
  strata_safetensors_free(h);
  strata_safetensors_free(f);
}

Test(hf, the_half_fixtures_are_small_rounded_by_torch) {
  char a[1100], b[1100];
  snprintf(a, sizeof a, "%s/small/model.safetensors", HF_FIXTURES);
  snprintf(b, sizeof b, "%s/small-bf16/model.safetensors", HF_FIXTURES);
  rounded_from(b, a, STRATA_ST_BF16);
  snprintf(b, sizeof b, "%s/small-fp16/model.safetensors", HF_FIXTURES);
  rounded_from(b, a, STRATA_ST_F16);
  /* read as strata reads its own checkpoints, they are refused: a plain read is F32 only */
  strata_safetensors_t st = NULL;
  cr_assert_eq(strata_safetensors_read(b, &st), STRATA_ERR_UNSUPPORTED);
  cr_assert(strstr(strata_last_error(), "has dtype F16"), "%s", strata_last_error());
}

Test(hf, a_bf16_export_is_the_weights_rounded_and_loads_back) {
  char dir[1024], tmp[] = "/tmp/strata-hf-XXXXXX", ckpt[1200], out[1200], a[2048], b[2048];
  fixture_dir("small", dir, sizeof dir);
  cr_assert(mkdtemp(tmp));
  snprintf(ckpt, sizeof ckpt, "%s/run.st", tmp);
  snprintf(out, sizeof out, "%s/exported", tmp);
  strata_model_t m;
  strata_trainer_t tr = hf_trainer(dir, tc_find_device("host", 0), 1, &m);
  OK(strata_trainer_save(tr, ckpt));
  OK(strata_hf_export_as(ckpt, out, STRATA_ST_BF16));
  /* every weight rounded to bf16 as torch rounds it: what transformers saved as small-bf16, byte for byte */
  snprintf(a, sizeof a, "%s/model.safetensors", dir);
  snprintf(b, sizeof b, "%s/model.safetensors", out);
  rounded_from(b, a, STRATA_ST_BF16);
  snprintf(a, sizeof a, "%s/small-bf16/model.safetensors", HF_FIXTURES);
  same_widened(a, b);
  /* config.json says so, as transformers does */
  json_error_t err;
  snprintf(a, sizeof a, "%s/config.json", out);
  json_t *cfg = json_load_file(a, 0, &err);
  cr_assert(cfg);
  cr_assert_str_eq(json_string_value(json_object_get(cfg, "torch_dtype")), "bfloat16");
  json_decref(cfg);
  /* and it loads back: transformers' logits for small-bf16 */
  reproduce_dir(out, "small-bf16", tc_find_device("host", 0));
  /* fp16 is not written, nor an unknown dtype; nothing is */
  snprintf(b, sizeof b, "%s/other", tmp);
  cr_assert_eq(strata_hf_export_as(ckpt, b, STRATA_ST_F16), STRATA_ERR_UNSUPPORTED);
  cr_assert_eq(strata_hf_export_as(ckpt, b, (enum strata_st_dtype)9), STRATA_ERR_INVALID);
  cr_assert_eq(access(b, F_OK), -1);
  strata_trainer_free(tr);
  strata_model_free(m);
  tc_remove_dir(tmp);
}
