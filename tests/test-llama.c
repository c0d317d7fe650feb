/* SPDX-License-Identifier: MIT */
/* test-llama.c — the llama model kind: its presets and cost profile by hand, its JSON and bad input, and training it
** against the single device in every layout. */
#include <stdarg.h>
#include <stdio.h>

#include "common.h"

#define STEPS 12

static char dir[256], corpus[512];
static strata_dataset_t ds;

static void setup(void) {
  setenv("STRATA_HOST_DEVICES", "8", 0);
  setenv("STRATA_BACKENDS", "host,opencl", 0);
  snprintf(dir, sizeof dir, "%s/strata-llama-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  cr_assert_not_null(mkdtemp(dir));
  snprintf(corpus, sizeof corpus, "%s/corpus.txt", dir);
  FILE *f = fopen(corpus, "w");
  for (int i = 0; i < 300; i++)
    fprintf(f, "a llama rotates its queries and keys %d times; its key heads serve two query heads each. ", i % 9);
  fclose(f);
  OK(strata_dataset_text(corpus, 0.2, &ds));
}

static void teardown(void) {
  strata_dataset_free(ds);
  tc_remove_dir(dir);
}

TestSuite(llama);
TestSuite(llama_train, .init = setup, .fini = teardown, .timeout = 240);

/* ---- the model ---- */

/* One llama block's parameters from its shape: two RMSNorm weights, q and o (D x D), k and v (D x kv hd), and the
** SwiGLU's gate, up and down (D x F each); no biases. */
static uint64_t block_params(int64_t D, int64_t H, int64_t KV, int64_t F) {
  const int64_t Akv = KV * (D / H);
  return (uint64_t)(2 * D + 2 * D * D + 2 * D * Akv + 3 * D * F);
}

Test(llama, presets_and_cost_profile_by_hand) {
  strata_model_t m;
  /* Llama 3 8B: 8,030,261,248 parameters (its model card's 8.03 B), untied */
  OK(strata_model_from_preset("llama3-8b", &m));
  cr_assert_eq(strata_model_params(m), 8030261248ull, "llama3-8b has %llu parameters",
               (unsigned long long)strata_model_params(m));
  const struct strata_model_config *c = strata_model_config(m);
  cr_assert_eq(c->kind, STRATA_MODEL_LLAMA);
  cr_assert_eq(c->kv_heads, 8);
  cr_assert_float_eq(c->rope_theta, 500000.0, 0);
  strata_model_free(m);
  /* Llama 2 7B: 6,738,415,616 (multi-head: kv heads = heads); Llama 3 70B: 70,553,706,496 */
  OK(strata_model_from_preset("llama2-7b", &m));
  cr_assert_eq(strata_model_params(m), 6738415616ull);
  strata_model_free(m);
  OK(strata_model_from_preset("llama3-70b", &m));
  cr_assert_eq(strata_model_params(m), 70553706496ull);
  cr_assert_eq(strata_model_layer_count(m), 82);
  strata_model_free(m);

  OK(strata_model_from_preset("llama-tiny", &m));
  c = strata_model_config(m);
  const int64_t V = 256, T = c->context, D = c->d_model, H = c->heads, KV = c->kv_heads, F = c->d_ff, L = c->layers;
  cr_assert(KV < H && H % KV == 0, "llama-tiny has grouped-query attention (%lld kv heads of %lld)", (long long)KV,
            (long long)H);
  cr_assert_eq(strata_model_params(m), (uint64_t)(V * D) + (uint64_t)L * block_params(D, H, KV, F) +
                                           (uint64_t)(D + V * D));
  cr_assert_eq(strata_model_layer_count(m), (int)L + 2);
  struct strata_layer_info li;
  OK(strata_model_layer(m, 0, &li));
  cr_assert_str_eq(li.name, "embed_tokens");
  cr_assert_eq(li.params, (uint64_t)(V * D), "no position table");
  OK(strata_model_layer(m, 1, &li));
  cr_assert_str_eq(li.name, "layers.0");
  cr_assert_str_eq(li.type, "block");
  const double Akv = (double)(KV * (D / H));
  /* q, k, v, o, gate, up, down as multiply-adds over T rows; scores and their product with V in full T x T */
  const double fwd = (double)T * (2.0 * D * (D + 2 * Akv) + 2.0 * D * D + 6.0 * D * F) + 4.0 * T * T * D;
  cr_assert_float_eq(li.fwd_flops, fwd, 1);
  cr_assert_float_eq(li.bwd_flops, 2 * fwd, 1);
  /* kept: x normed, q|k|v, the attention output, x_mid, x_mid normed, gate, up, silu(gate) up; two rstd; lse */
  cr_assert_eq(li.act_bytes, (uint64_t)(4 * (T * (D + D + 2 * Akv + D + D + D + 3 * F) + 2 * T + H * T)));
  cr_assert_eq(li.out_bytes, (uint64_t)(4 * T * D));
  OK(strata_model_layer(m, (int)L + 1, &li));
  cr_assert_str_eq(li.name, "norm+lm_head");
  cr_assert_eq(li.params, (uint64_t)(D + V * D));
  cr_assert_float_eq(li.fwd_flops, 2.0 * T * D * V, 1);
  strata_model_free(m);

  /* every preset the list names loads, the llama ones included */
  const char *const *names = strata_model_presets();
  int llamas = 0;
  for (int i = 0; names[i]; i++) {
    OK(strata_model_from_preset(names[i], &m));
    llamas += strata_model_config(m)->kind == STRATA_MODEL_LLAMA;
    strata_model_free(m);
  }
  cr_assert_eq(llamas, 5);
}

Test(llama, json_round_trip_with_llama3_scaling) {
  const char *j = "{\"kind\": \"llama\", \"vocab\": 300, \"context\": 16, \"d_model\": 32, \"layers\": 2, "
                  "\"heads\": 4, "
                  "\"n_kv_heads\": 2, \"d_ff\": 80, \"rope_theta\": 250000.5, \"norm_eps\": 1e-6, \"tied\": true, "
                  "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
                  "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}}";
  strata_model_t m, back;
  OK(strata_model_from_json(j, "test", &m));
  const struct strata_model_config *c = strata_model_config(m);
  cr_assert_eq(c->kv_heads, 2);
  cr_assert_float_eq(c->rope_theta, 250000.5, 0);
  cr_assert_float_eq(c->norm_eps, 1e-6, 0);
  cr_assert_eq(c->tied, 1);
  cr_assert_eq(c->rope_scaling.type, STRATA_ROPE_LLAMA3);
  cr_assert_float_eq(c->rope_scaling.factor, 8.0, 0);
  cr_assert_float_eq(c->rope_scaling.high_freq_factor, 4.0, 0);
  cr_assert_eq(c->rope_scaling.original_context, 8192);
  /* tied: the head adds only its norm */
  cr_assert_eq(strata_model_params(m), (uint64_t)(300 * 32) + 2 * block_params(32, 4, 2, 80) + 32);
  char *text = NULL;
  OK(strata_model_to_json(m, &text));
  OK(strata_model_from_json(text, "round trip", &back));
  const struct strata_model_config *b = strata_model_config(back);
  cr_assert_eq(b->kind, STRATA_MODEL_LLAMA, "%s", text);
  cr_assert_eq(b->kv_heads, c->kv_heads);
  cr_assert_eq(b->rope_theta, c->rope_theta, "%s", text);
  cr_assert_eq(b->norm_eps, c->norm_eps, "%s", text);
  cr_assert_eq(b->rope_scaling.type, c->rope_scaling.type);
  cr_assert_eq(b->rope_scaling.low_freq_factor, c->rope_scaling.low_freq_factor);
  cr_assert_eq(b->rope_scaling.original_context, c->rope_scaling.original_context);
  cr_assert_eq(strata_model_params(back), strata_model_params(m));
  free(text);
  strata_model_free(back);
  strata_model_free(m);
  /* defaults: n_kv_heads = heads, rope_theta 10000, norm_eps 1e-5, no scaling */
  OK(strata_model_from_json("{\"kind\": \"llama\", \"context\": 8, \"d_model\": 16, \"layers\": 1, \"heads\": 2, "
                            "\"d_ff\": 40}", "defaults", &m));
  c = strata_model_config(m);
  cr_assert_eq(c->kv_heads, 2);
  cr_assert_eq(c->vocab, 256);
  cr_assert_float_eq(c->rope_theta, 10000.0, 0);
  cr_assert_float_eq(c->norm_eps, 1e-5, 0);
  cr_assert_eq(c->rope_scaling.type, STRATA_ROPE_DEFAULT);
  strata_model_free(m);
}

/* Each bad model is refused with a message naming the field (and the value where there is one). */
Test(llama, bad_models_are_refused_naming_the_field) {
  static const struct {
    const char *json, *says;
    int rc;
  } bad[] = {
      {"{\"kind\": \"llama\", \"context\": 8, \"d_model\": 24, \"layers\": 1, \"heads\": 6, \"n_kv_heads\": 4, "
       "\"d_ff\": 40}", "n_kv_heads = 4 does not divide heads = 6", STRATA_ERR_SHAPE},
      {"{\"kind\": \"llama\", \"context\": 8, \"d_model\": 24, \"layers\": 1, \"heads\": 2, \"n_kv_heads\": 3, "
       "\"d_ff\": 40}", "n_kv_heads", STRATA_ERR_INVALID},
      {"{\"kind\": \"llama\", \"context\": 8, \"d_model\": 12, \"layers\": 1, \"heads\": 4, \"d_ff\": 40}", "odd",
       STRATA_ERR_SHAPE},
      {"{\"kind\": \"llama\", \"context\": 8, \"d_model\": 16, \"layers\": 1, \"heads\": 2, \"d_ff\": 40, "
       "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4}}", "rope_scaling.rope_type\" \"yarn\"",
       STRATA_ERR_UNSUPPORTED},
      {"{\"kind\": \"llama\", \"context\": 8, \"d_model\": 16, \"layers\": 1, \"heads\": 2, \"d_ff\": 40, "
       "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8}}", "low_freq_factor", STRATA_ERR_PARSE},
      {"{\"kind\": \"llama\", \"context\": 8, \"d_model\": 16, \"layers\": 1, \"heads\": 2, \"d_ff\": 40, "
       "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 4, \"high_freq_factor\": 1, "
       "\"original_max_position_embeddings\": 64}}", "high_freq_factor", STRATA_ERR_INVALID},
      {"{\"kind\": \"llama\", \"context\": 8, \"d_model\": 16, \"layers\": 1, \"heads\": 2, \"d_ff\": 40, "
       "\"rope_theta\": -1}", "rope_theta", STRATA_ERR_INVALID},
      {"{\"kind\": \"llama\", \"context\": 8, \"d_model\": 16, \"layers\": 1, \"heads\": 2, \"d_ff\": 40, "
       "\"norm_eps\": \"small\"}", "norm_eps", STRATA_ERR_PARSE},
      {"{\"kind\": \"llama\", \"context\": 8, \"d_model\": 16, \"layers\": 1, \"heads\": 2}", "d_ff", STRATA_ERR_PARSE},
      {"{\"kind\": \"gpt\", \"context\": 8, \"d_model\": 16, \"layers\": 1, \"heads\": 2, \"n_kv_heads\": 1}",
       "n_kv_heads", STRATA_ERR_PARSE},
      {"{\"kind\": \"llama\", \"context\": 8, \"d_model\": 16, \"layers\": 1, \"heads\": 2, \"d_ff\": 40, "
       "\"rope_scaling\": {\"rope_type\": \"llama3\", \"scale\": 2}}", "rope_scaling.scale", STRATA_ERR_PARSE},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    strata_model_t m = NULL;
    cr_assert_eq(strata_model_from_json(bad[i].json, "bad", &m), bad[i].rc, "%s: %s", bad[i].json,
                 strata_last_error());
    cr_assert(strstr(strata_last_error(), bad[i].says), "'%s' names '%s'", strata_last_error(), bad[i].says);
    cr_assert_null(m);
  }
}

/* ---- training ---- */

/* A small llama with grouped-query attention (4 query heads on 2 key/value heads of 4), untied, and optionally Llama
** 3's frequency scaling over a short original context (so that it changes some frequencies). */
static strata_model_t small_llama_kv(int scaled, int tied, int kv) {
  struct strata_model_config c = {.kind = STRATA_MODEL_LLAMA, .vocab = 256, .context = 8, .d_model = 16, .layers = 2,
                                  .heads = 4, .kv_heads = kv, .d_ff = 24, .rope_theta = 500, .norm_eps = 1e-5,
                                  .tied = tied};
  if (scaled)
    c.rope_scaling.type = STRATA_ROPE_LLAMA3, c.rope_scaling.factor = 4, c.rope_scaling.low_freq_factor = 1,
    c.rope_scaling.high_freq_factor = 2, c.rope_scaling.original_context = 6;
  strata_model_t m;
  OK(strata_model_from_config(&c, &m));
  return m;
}
static strata_model_t small_llama(int scaled, int tied) { return small_llama_kv(scaled, tied, 2); }

/* Every parameter's gradient of one batch's loss against central finite differences (in float32 forward passes):
** each within 2e-3 + 10%, and all of them within 2% in the root-mean-square sense. */
static void finite_differences(strata_trainer_t tr, const int32_t *in, const int32_t *tg, int batch, double h) {
  size_t n = 0;
  OK(strata_trainer_params(tr, NULL, &n));
  float *p = malloc(n * 4), *g = malloc(n * 4);
  OK(strata_trainer_params(tr, p, &n));
  float loss;
  OK(strata_trainer_loss_grad(tr, in, tg, batch, &loss, g));
  double num2 = 0, err2 = 0;
  for (size_t i = 0; i < n; i++) {
    const float keep = p[i];
    double l[2];
    for (int side = 0; side < 2; side++) {
      p[i] = keep + (side ? -(float)h : (float)h);
      OK(strata_trainer_set_params(tr, p, n));
      float v;
      OK(strata_trainer_loss_grad(tr, in, tg, batch, &v, NULL));
      l[side] = v;
    }
    p[i] = keep;
    const double num = (l[0] - l[1]) / (2 * h);
    cr_assert_leq(fabs(num - g[i]), 2e-3 + 0.1 * fabs(num), "parameter %zu: analytic %.6g, finite differences %.6g", i,
                  (double)g[i], num);
    num2 += num * num;
    err2 += (num - g[i]) * (num - g[i]);
  }
  OK(strata_trainer_set_params(tr, p, n));
  cr_assert_gt(num2, 0);
  cr_assert_lt(sqrt(err2 / num2), 0.02, "relative gradient error %.4f", sqrt(err2 / num2));
  if (getenv("STRATA_TEST_VERBOSE"))
    fprintf(stderr, "relative gradient error %.3g, rms gradient %.3g over %zu parameters\n", sqrt(err2 / num2),
            sqrt(num2 / (double)n), n);
  free(p);
  free(g);
}

/* The whole model's gradient (embedding, RMSNorms, RoPE'd grouped-query attention, SwiGLU, head) against finite
** differences, with Llama 3's scaled frequencies and tied, each on a host device. */
Test(llama_train, gradients_match_finite_differences) {
  for (int k = 0; k < 2; k++) {
    strata_model_t m = small_llama(k == 0, k == 1);
    struct strata_train_options o;
    strata_train_options_default(&o);
    o.batch = 2;
    o.device = tc_find_device("host", 0);
    strata_trainer_t tr;
    OK(strata_trainer_new(m, ds, &o, &tr));
    int32_t in[16], tg[16];
    uint64_t st = 5;
    OK(strata_dataset_sample(ds, STRATA_SPLIT_TRAIN, 2, 8, &st, in, tg));
    /* weights larger than the 0.02 initialisation make every gradient measurable (at 10 times, as test-train.c's
    ** GPT, the RMSNorm weights of 10 make the loss so curved that central differences of 1e-3 are 20% off) */
    size_t n = 0;
    OK(strata_trainer_params(tr, NULL, &n));
    float *p = malloc(n * 4);
    OK(strata_trainer_params(tr, p, &n));
    for (size_t i = 0; i < n; i++)
      p[i] *= 5;
    OK(strata_trainer_set_params(tr, p, n));
    free(p);
    finite_differences(tr, in, tg, 2, 1e-3);
    strata_trainer_free(tr);
    strata_model_free(m);
  }
}

struct run {
  float loss[STEPS], norm[STEPS];
  float *params;
  size_t n;
};

static struct strata_train_options options(int accum) {
  struct strata_train_options o;
  strata_train_options_default(&o);
  o.batch = 2;
  o.accum = accum;
  o.steps = STEPS;
  o.warmup = 2;
  o.lr = 1e-2f;
  o.eps = 1e-6f; /* (test-parallel.c: keeps AdamW from magnifying last-bit differences of tiny gradients) */
  o.device = tc_find_device("host", 0);
  return o;
}

static void run_steps(strata_trainer_t tr, struct run *r) {
  for (int s = 0; s < STEPS; s++) {
    struct strata_step_stats st;
    OK(strata_trainer_step(tr, &st));
    r->loss[s] = st.loss;
    r->norm[s] = st.grad_norm;
  }
  OK(strata_trainer_params(tr, NULL, &r->n));
  r->params = malloc(r->n * 4);
  OK(strata_trainer_params(tr, r->params, &r->n));
}

/* One host device, `accum` micro-batches of 2 a step: the reference. */
static void single(strata_model_t m, int accum, struct run *r) {
  struct strata_train_options o = options(accum);
  strata_trainer_t tr;
  OK(strata_trainer_new(m, ds, &o, &tr));
  run_steps(tr, r);
  strata_trainer_free(tr);
}

/* The layout of JSON `fmt` over host devices 0 .. 7 (as many as it names), trained STEPS steps. */
static void laid_out(strata_model_t m, const char *fmt, struct run *r) {
  int h[8];
  for (int i = 0; i < 8; i++)
    h[i] = tc_find_device("host", i);
  cr_assert_geq(h[7], 0, "needs 8 host virtual devices");
  char text[512];
  snprintf(text, sizeof text, fmt, h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]);
  strata_layout_t l;
  OK(strata_layout_from_json(text, "llama layout", &l));
  struct strata_train_options o = options(1);
  strata_trainer_t tr;
  OK(strata_trainer_new_layout(m, ds, &o, l, NULL, &tr));
  run_steps(tr, r);
  strata_trainer_free(tr);
  strata_layout_free(l);
}

/*
** A layout against one device: bit for bit where the arithmetic is the same (a pipeline moves no sum), else within
** 1e-5 relative on the losses, 1e-4 on the gradient norms and 5e-5 on the parameters after STEPS AdamW steps (the
** bounds of test-parallel.c: dp adds finished gradients, tp splits each row-split product's sum over the slices).
*/
static void compare(const char *what, const struct run *got, const struct run *ref, int exact) {
  cr_assert_eq(got->n, ref->n, "%s", what);
  for (int s = 0; s < STEPS; s++) {
    if (exact) {
      cr_assert_eq(got->loss[s], ref->loss[s], "%s step %d: loss %.9g, one device %.9g", what, s + 1, got->loss[s],
                   ref->loss[s]);
      continue;
    }
    cr_assert(fabs(got->loss[s] - ref->loss[s]) <= 1e-5 * fabs(ref->loss[s]), "%s step %d: loss %.9g, one device %.9g",
              what, s + 1, got->loss[s], ref->loss[s]);
    cr_assert(fabs(got->norm[s] - ref->norm[s]) <= 1e-4 * fabs(ref->norm[s]), "%s step %d: norm %.9g, one device %.9g",
              what, s + 1, got->norm[s], ref->norm[s]);
  }
  if (exact) {
    cr_assert(memcmp(got->params, ref->params, got->n * 4) == 0, "%s: final parameters differ", what);
    return;
  }
  double worst = 0;
  for (size_t i = 0; i < got->n; i++)
    worst = fmax(worst, fabs(got->params[i] - ref->params[i]));
  cr_assert(worst <= 5e-5, "%s: parameters up to %.3g apart", what, worst);
  if (getenv("STRATA_TEST_VERBOSE"))
    fprintf(stderr, "%s: largest parameter difference %.3g\n", what, worst);
}

static void layout_case(strata_model_t m, const char *fmt, const struct run *ref, const char *what, int exact) {
  struct run got;
  laid_out(m, fmt, &got);
  compare(what, &got, ref, exact);
  free(got.params);
}

/* pp 2 (1F1B, ZB-H1, GPipe, interleaved) moves no sum: the single device's bits; dp 2, ZeRO-1 and 2 and 3 within
** the bounds. */
Test(llama_train, pipeline_data_parallel_and_zero_match_one_device) {
  strata_model_t m = small_llama(1, 0);
  struct run ref2, ref4;
  single(m, 2, &ref2);
  single(m, 4, &ref4);
  cr_assert(ref4.loss[STEPS - 1] < ref4.loss[0] - 0.5, "it learns: %.4f -> %.4f", ref4.loss[0], ref4.loss[STEPS - 1]);
  layout_case(m, "{\"pp\": 2, \"devices\": [%d, %d], \"microbatches\": 4}", &ref4, "pp 2 1f1b", 1);
  layout_case(m, "{\"pp\": 2, \"devices\": [%d, %d], \"microbatches\": 4, \"schedule\": \"zb\"}", &ref4, "pp 2 zb",
              1);
  layout_case(m, "{\"pp\": 2, \"devices\": [%d, %d], \"microbatches\": 4, \"schedule\": \"interleaved\"}", &ref4,
              "pp 2 interleaved", 1);
  layout_case(m, "{\"pp\": 4, \"devices\": [%d, %d, %d, %d], \"microbatches\": 4, \"schedule\": \"gpipe\"}",
              &ref4, "pp 4 gpipe", 1);
  layout_case(m, "{\"dp\": 2, \"devices\": [%d, %d], \"microbatches\": 1}", &ref2, "dp 2", 0);
  layout_case(m, "{\"dp\": 2, \"pp\": 2, \"devices\": [%d, %d, %d, %d], \"microbatches\": 2}", &ref4,
              "dp 2 x pp 2", 0);
  layout_case(m, "{\"dp\": 2, \"zero\": 1, \"devices\": [%d, %d], \"microbatches\": 1}", &ref2, "dp 2 ZeRO-1", 0);
  layout_case(m, "{\"dp\": 2, \"pp\": 2, \"zero\": 1, \"devices\": [%d, %d, %d, %d], \"microbatches\": 2}", &ref4,
              "dp 2 x pp 2 ZeRO-1", 0);
  layout_case(m, "{\"dp\": 2, \"zero\": 2, \"devices\": [%d, %d], \"microbatches\": 1}", &ref2, "dp 2 ZeRO-2", 0);
  layout_case(m, "{\"dp\": 2, \"zero\": 3, \"devices\": [%d, %d], \"microbatches\": 1}", &ref2, "dp 2 ZeRO-3", 0);
  free(ref2.params);
  free(ref4.params);
  strata_model_free(m);
}

/* tp 2 (each slice: 2 query heads with their key/value head, half of gate, up and down, half the vocabulary), with
** pp and dp, 2 x 2 x 2, and a tp degree per rank. */
Test(llama_train, tensor_parallel_gqa_matches_one_device) {
  strata_model_t m = small_llama(1, 0);
  struct run ref2, ref4;
  single(m, 2, &ref2);
  single(m, 4, &ref4);
  layout_case(m, "{\"tp\": 2, \"devices\": [%d, %d], \"microbatches\": 2}", &ref2, "tp 2", 0);
  layout_case(m, "{\"pp\": 2, \"tp\": 2, \"devices\": [%d, %d, %d, %d], \"microbatches\": 4}", &ref4,
              "pp 2 x tp 2", 0);
  layout_case(m, "{\"dp\": 2, \"tp\": 2, \"zero\": 1, \"devices\": [%d, %d, %d, %d], \"microbatches\": 1}", &ref2,
              "dp 2 x tp 2 ZeRO-1", 0);
  layout_case(m,
              "{\"dp\": 2, \"pp\": 2, \"tp\": 2, \"devices\": [%d, %d, %d, %d, %d, %d, %d, %d], \"microbatches\": 2}",
              &ref4, "dp 2 x pp 2 x tp 2", 0);
  layout_case(m, "{\"pp\": 2, \"tp\": [2, 1], \"devices\": [%d, %d, %d], \"microbatches\": 4, \"schedule\": \"zb\"}",
              &ref4, "pp 2 with tp 2,1 (zb)", 0);
  free(ref2.params);
  free(ref4.params);
  strata_model_free(m);
}

/*
** tp above n_kv_heads (Megatron's replication): 4 query heads on 2 key/value heads at tp 4, and on 1 at tp 2 and 4 —
** each slice holds its query heads and the key/value head they share, k_proj's and v_proj's gradients summed over
** the slices sharing it — alone, with pp 2 (1F1B and ZB-H1), dp 2 and ZeRO, against one device within the bounds.
*/
Test(llama_train, tensor_parallel_above_kv_heads_matches_one_device) {
  for (int kv = 2; kv >= 1; kv--) {
    strata_model_t m = small_llama_kv(1, 0, kv);
    struct run ref2, ref4;
    single(m, 2, &ref2);
    single(m, 4, &ref4);
    char what[64];
    struct {
      const char *fmt, *what;
      int four, tp4;
    } cases[] = {
        {"{\"tp\": 2, \"devices\": [%d, %d], \"microbatches\": 2}", "tp 2", 0, 0},
        {"{\"tp\": 4, \"devices\": [%d, %d, %d, %d], \"microbatches\": 2}", "tp 4", 0, 1},
        {"{\"pp\": 2, \"tp\": 4, \"devices\": [%d, %d, %d, %d, %d, %d, %d, %d], \"microbatches\": 4}",
         "pp 2 x tp 4", 1, 1},
        {"{\"pp\": 2, \"tp\": [2, 4], \"devices\": [%d, %d, %d, %d, %d, %d], \"microbatches\": 4, "
         "\"schedule\": \"zb\"}", "pp 2 with tp 2,4 (zb)", 1, 1},
        {"{\"dp\": 2, \"tp\": 4, \"devices\": [%d, %d, %d, %d, %d, %d, %d, %d], \"microbatches\": 1}",
         "dp 2 x tp 4", 0, 1},
        {"{\"dp\": 2, \"tp\": 2, \"zero\": 2, \"devices\": [%d, %d, %d, %d], \"microbatches\": 1}",
         "dp 2 x tp 2 ZeRO-2", 0, 0},
        {"{\"dp\": 2, \"pp\": 2, \"tp\": 2, \"devices\": [%d, %d, %d, %d, %d, %d, %d, %d], \"microbatches\": 2}",
         "dp 2 x pp 2 x tp 2", 1, 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
      if (kv == 2 && !cases[k].tp4) /* (tp 2 divides 2 key/value heads: tensor_parallel_gqa_matches_one_device) */
        continue;
      snprintf(what, sizeof what, "%s over %d key/value head(s)", cases[k].what, kv);
      layout_case(m, cases[k].fmt, cases[k].four ? &ref4 : &ref2, what, 0);
    }
    free(ref2.params);
    free(ref4.params);
    strata_model_free(m);
  }
}

/* The layout of `fmt` (NULL: one device, 4 micro-batches) in bf16, STEPS steps' losses. */
static void bf16_losses(strata_model_t m, const char *fmt, float *loss) {
  struct strata_train_options o = options(4);
  o.precision = STRATA_BFLOAT16;
  struct run r;
  strata_trainer_t tr;
  if (fmt) {
    int h[8];
    for (int i = 0; i < 8; i++)
      h[i] = tc_find_device("host", i);
    char text[512];
    snprintf(text, sizeof text, fmt, h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]);
    strata_layout_t l;
    OK(strata_layout_from_json(text, "llama bf16 layout", &l));
    o.accum = 1;
    OK(strata_trainer_new_layout(m, ds, &o, l, NULL, &tr));
    strata_layout_free(l);
  } else {
    OK(strata_trainer_new(m, ds, &o, &tr));
  }
  run_steps(tr, &r);
  strata_trainer_free(tr);
  memcpy(loss, r.loss, sizeof r.loss);
  free(r.params);
}

/*
** bf16 (activations and GEMM weights in bfloat16, float32 master weights): one host device tracks its float32 run
** within 2e-3 relative over STEPS steps (measured 1e-4: the losses differ, so bf16 is in effect); a pipeline moves
** no sum, so pp 2 is its bits; dp 2 x tp 2 and tp 2 x pp 2 sum in other orders before rounding to bf16 and stay
** within 5e-3 relative of it (the bf16 issue's bound for layouts against one device; measured 6e-5).
*/
Test(llama_train, bf16_tracks_float32_and_its_layouts_one_device) {
  strata_model_t m = small_llama(0, 0);
  struct run ref;
  single(m, 4, &ref);
  float one[STEPS], got[STEPS];
  bf16_losses(m, NULL, one);
  double worst = 0;
  for (int s = 0; s < STEPS; s++) {
    worst = fmax(worst, fabs(one[s] - ref.loss[s]) / ref.loss[s]);
    cr_assert(fabs(one[s] - ref.loss[s]) <= 2e-3 * ref.loss[s], "bf16 step %d: %.7g, float32 %.7g", s + 1, one[s],
              ref.loss[s]);
  }
  cr_assert_gt(worst, 0, "bf16 gave float32's losses");
  if (getenv("STRATA_TEST_VERBOSE"))
    fprintf(stderr, "bf16 against float32: %.3g relative at worst\n", worst);
  bf16_losses(m, "{\"pp\": 2, \"devices\": [%d, %d], \"microbatches\": 4}", got);
  for (int s = 0; s < STEPS; s++)
    cr_assert_eq(got[s], one[s], "bf16 pp 2 step %d: %.9g, one device %.9g", s + 1, got[s], one[s]);
  const char *other[] = {"{\"dp\": 2, \"tp\": 2, \"devices\": [%d, %d, %d, %d], \"microbatches\": 2}",
                         "{\"pp\": 2, \"tp\": 2, \"devices\": [%d, %d, %d, %d], \"microbatches\": 4}"};
  for (int k = 0; k < 2; k++) {
    bf16_losses(m, other[k], got);
    worst = 0;
    for (int s = 0; s < STEPS; s++) {
      worst = fmax(worst, fabs(got[s] - one[s]) / one[s]);
      cr_assert(fabs(got[s] - one[s]) <= 5e-3 * one[s], "bf16 %s step %d: %.7g, one device %.7g", other[k], s + 1,
                got[s], one[s]);
    }
    if (getenv("STRATA_TEST_VERBOSE"))
      fprintf(stderr, "bf16 %s: %.3g relative at worst\n", other[k], worst);
  }
  free(ref.params);
  strata_model_free(m);
}

/* Train the layout of `fmt` for `save_after` steps and save to `ckpt`, or (0) load `ckpt`; then one more step's
** loss. */
static float step_after(strata_model_t m, const char *fmt, const char *ckpt, int save_after) {
  int h[8];
  for (int i = 0; i < 8; i++)
    h[i] = tc_find_device("host", i);
  char text[512];
  snprintf(text, sizeof text, fmt, h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]);
  strata_layout_t l;
  OK(strata_layout_from_json(text, "llama checkpoint", &l));
  struct strata_train_options o = options(1);
  strata_trainer_t tr;
  OK(strata_trainer_new_layout(m, ds, &o, l, NULL, &tr));
  struct strata_step_stats st = {0};
  for (int s = 0; s < save_after; s++)
    OK(strata_trainer_step(tr, &st));
  if (save_after)
    OK(strata_trainer_save(tr, ckpt));
  else
    OK(strata_trainer_load(tr, ckpt));
  OK(strata_trainer_step(tr, &st));
  strata_trainer_free(tr);
  strata_layout_free(l);
  return st.loss;
}

/* A checkpoint of tp 2 x pp 2 holds whole tensors under Hugging Face's names (less "model."), the projections
** [in, out], and the model's JSON; it resumes at pp 4, dp 2 with ZeRO-1, tp 2 alone and one device with the
** uninterrupted run's next loss (1e-5 relative: one forward's float32 rounding). */
Test(llama_train, checkpoints_hold_whole_named_tensors_and_resume_under_other_layouts) {
  strata_model_t m = small_llama(1, 0);
  char ckpt[600];
  snprintf(ckpt, sizeof ckpt, "%s/llama.safetensors", dir);
  const float next =
      step_after(m, "{\"pp\": 2, \"tp\": 2, \"devices\": [%d, %d, %d, %d], \"microbatches\": 4}", ckpt, 5);
  strata_safetensors_t st;
  OK(strata_safetensors_read(ckpt, &st));
  static const struct {
    const char *name;
    int64_t rows, cols;
  } want[] = {{"embed_tokens.weight", 256, 16},
              {"layers.0.input_layernorm.weight", 16, 0},
              {"layers.0.self_attn.q_proj.weight", 16, 16},
              {"layers.0.self_attn.k_proj.weight", 16, 8},
              {"layers.1.self_attn.v_proj.weight", 16, 8},
              {"layers.1.self_attn.o_proj.weight", 16, 16},
              {"layers.1.post_attention_layernorm.weight", 16, 0},
              {"layers.1.mlp.gate_proj.weight", 16, 24},
              {"layers.1.mlp.up_proj.weight", 16, 24},
              {"layers.1.mlp.down_proj.weight", 24, 16},
              {"norm.weight", 16, 0},
              {"lm_head.weight", 256, 16}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    int nd = 0;
    int64_t shape[STRATA_ST_MAX_DIMS];
    OK(strata_safetensors_get(st, want[i].name, &nd, shape, NULL));
    cr_assert_eq(nd, want[i].cols ? 2 : 1, "%s", want[i].name);
    cr_assert_eq(shape[0], want[i].rows, "%s", want[i].name);
    if (want[i].cols)
      cr_assert_eq(shape[1], want[i].cols, "%s", want[i].name);
  }
  /* the embedding, 9 tensors a block, the norm and the head; each with AdamW's two moments */
  cr_assert_eq(strata_safetensors_count(st), 3 * (1 + 2 * 9 + 2));
  const char *model = strata_safetensors_meta(st, "model");
  cr_assert(model && strstr(model, "\"kind\":\"llama\"") && strstr(model, "\"n_kv_heads\":2") &&
                strstr(model, "\"rope_type\":\"llama3\""),
            "the checkpoint carries the model: %s", model ? model : "(none)");
  strata_safetensors_free(st);
  const char *others[] = {"{\"pp\": 4, \"devices\": [%d, %d, %d, %d], \"microbatches\": 4}",
                          "{\"dp\": 2, \"zero\": 1, \"devices\": [%d, %d], \"microbatches\": 2}",
                          "{\"tp\": 2, \"devices\": [%d, %d], \"microbatches\": 4}",
                          "{\"devices\": [%d], \"microbatches\": 4}"};
  for (int k = 0; k < 4; k++) {
    const float got = step_after(m, others[k], ckpt, 0);
    cr_assert(fabs(got - next) <= 1e-5 * fabs(next), "%s: next loss %.9g, uninterrupted %.9g", others[k], got, next);
  }
  strata_model_free(m);
}

/*
** Replicated key/value heads in checkpoints: tp 4 over 2 key/value heads writes k_proj and v_proj whole (each head's
** columns once, from the first of the slices holding it); the checkpoint resumes at tp 2, pp 2 x tp 4 and one
** device, and tp 2's resumes at tp 4; one key/value head's tp 4 resumes at tp 2 and one device — each with the
** uninterrupted run's next loss (1e-5 relative).
*/
Test(llama_train, checkpoints_resume_across_tp_above_kv_heads) {
  char ckpt[600];
  snprintf(ckpt, sizeof ckpt, "%s/llama-kv.safetensors", dir);
  for (int kv = 2; kv >= 1; kv--) {
    strata_model_t m = small_llama_kv(1, 0, kv);
    const char *tp4 = "{\"tp\": 4, \"devices\": [%d, %d, %d, %d], \"microbatches\": 4}",
               *tp2 = "{\"tp\": 2, \"devices\": [%d, %d], \"microbatches\": 4}";
    float next = step_after(m, tp4, ckpt, 5);
    strata_safetensors_t st;
    OK(strata_safetensors_read(ckpt, &st));
    int nd = 0;
    int64_t shape[STRATA_ST_MAX_DIMS];
    OK(strata_safetensors_get(st, "layers.1.self_attn.k_proj.weight", &nd, shape, NULL));
    cr_assert(nd == 2 && shape[0] == 16 && shape[1] == 4 * kv, "k_proj whole: %lld x %lld", (long long)shape[0],
              (long long)shape[1]);
    OK(strata_safetensors_get(st, "layers.0.self_attn.v_proj.weight", &nd, shape, NULL));
    cr_assert(nd == 2 && shape[0] == 16 && shape[1] == 4 * kv);
    strata_safetensors_free(st);
    const char *others[] = {tp2, "{\"pp\": 2, \"tp\": 4, \"devices\": [%d, %d, %d, %d, %d, %d, %d, %d], "
                                 "\"microbatches\": 4}",
                            "{\"devices\": [%d], \"microbatches\": 4}"};
    for (int k = 0; k < 3; k++) {
      const float got = step_after(m, others[k], ckpt, 0);
      cr_assert(fabs(got - next) <= 1e-5 * fabs(next), "%d kv heads, saved at tp 4, %s: next loss %.9g, "
                "uninterrupted %.9g", kv, others[k], got, next);
    }
    next = step_after(m, tp2, ckpt, 5);
    const float got = step_after(m, tp4, ckpt, 0);
    cr_assert(fabs(got - next) <= 1e-5 * fabs(next), "%d kv heads, saved at tp 2, at tp 4: next loss %.9g, "
              "uninterrupted %.9g", kv, got, next);
    strata_model_free(m);
  }
}

/* The layout of `fmt` (its "%s" a layout's extra fields, e.g. the recompute mode; "%%d" host devices 0 ..) with
** `extra` in `precision`, STEPS steps. */
static void with_fields(strata_model_t m, const char *fmt, const char *extra, int precision, struct run *r) {
  int h[8];
  for (int i = 0; i < 8; i++)
    h[i] = tc_find_device("host", i);
  char devs[600], text[600];
  snprintf(devs, sizeof devs, fmt, extra);
  snprintf(text, sizeof text, devs, h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]);
  strata_layout_t l;
  OK(strata_layout_from_json(text, "llama layout", &l));
  struct strata_train_options o = options(1);
  o.precision = precision;
  strata_trainer_t tr;
  OK(strata_trainer_new_layout(m, ds, &o, l, NULL, &tr));
  run_steps(tr, r);
  strata_trainer_free(tr);
  strata_layout_free(l);
}

/*
** Recomputation of llama blocks (selective: the attention's output and log-sum-exps again from the kept rotated
** q|k|v; full: the block's forward again from its input) runs the forward's own code on the same inputs: each mode
** gives the losses, gradient norms and final parameters of the run without it, bit for bit, on one device, pp 2
** (1F1B and ZB-H1, whose weight pass recomputes again), tp 2 and tp 4 over 2 key/value heads, in fp32 and bf16.
*/
Test(llama_train, recompute_is_bit_for_bit) {
  strata_model_t m = small_llama(1, 0);
  static const char *const modes[] = {"none", "selective", "full"};
  static const char *const fmts[] = {
      "{\"devices\": [%%d], \"microbatches\": 4, \"recompute\": \"%s\"}",
      "{\"pp\": 2, \"devices\": [%%d, %%d], \"microbatches\": 4, \"recompute\": \"%s\"}",
      "{\"pp\": 2, \"devices\": [%%d, %%d], \"microbatches\": 4, \"schedule\": \"zb\", \"recompute\": \"%s\"}",
      "{\"tp\": 2, \"devices\": [%%d, %%d], \"microbatches\": 4, \"recompute\": \"%s\"}",
      "{\"tp\": 4, \"devices\": [%%d, %%d, %%d, %%d], \"microbatches\": 4, \"recompute\": \"%s\"}"};
  for (int bf = 0; bf <= 1; bf++)
    for (size_t f = 0; f < sizeof fmts / sizeof fmts[0]; f++) {
      struct run ref, got;
      with_fields(m, fmts[f], "none", bf ? STRATA_BFLOAT16 : STRATA_FLOAT32, &ref);
      for (int k = 1; k <= 2; k++) {
        char what[200];
        snprintf(what, sizeof what, "%s %s recompute %s", bf ? "bf16" : "fp32", fmts[f], modes[k]);
        with_fields(m, fmts[f], modes[k], bf ? STRATA_BFLOAT16 : STRATA_FLOAT32, &got);
        compare(what, &got, &ref, 1);
        for (int s = 0; s < STEPS; s++)
          cr_assert_eq(got.norm[s], ref.norm[s], "%s step %d: norm %.9g, without %.9g", what, s + 1, got.norm[s],
                       ref.norm[s]);
        free(got.params);
      }
      free(ref.params);
    }
  strata_model_free(m);
}

/*
** Sequence parallelism for llama blocks (Megatron's: the RMSNorms and residuals on 1/tp of each micro-batch's rows,
** an all-gather before q|k|v and gate|up, a reduce-scatter after o_proj and down_proj, the RMSNorm weights' gradients
** summed over the slices) changes where sums are split, not what is summed: against tp without it, losses, gradient
** norms and every final parameter (relative to the larger of it and 0.02) within 1e-4 — tp 2, tp 4 over 2 key/value
** heads (replicated), tp 2 over 1, pp 2 x tp 2, dp 2 x tp 2 with ZeRO-1, each recompute mode, a tied head — and in
** bf16 within 5e-3 (the bf16 issue's bound for a layout against another).
*/
Test(llama_train, sequence_parallel_matches_tp) {
  strata_model_t m = small_llama(1, 0), one = small_llama_kv(1, 0, 1), tied = small_llama(0, 1);
  const struct {
    strata_model_t m;
    const char *fmt, *extra, *what;
    int bf;
  } cases[] = {
      {m, "{\"tp\": 2, \"devices\": [%%d, %%d], \"microbatches\": 2%s}", "", "tp 2", 0},
      {m, "{\"tp\": 4, \"devices\": [%%d, %%d, %%d, %%d], \"microbatches\": 2%s}", "", "tp 4 over 2 kv heads", 0},
      {one, "{\"tp\": 2, \"devices\": [%%d, %%d], \"microbatches\": 2%s}", "", "tp 2 over 1 kv head", 0},
      {m, "{\"pp\": 2, \"tp\": 2, \"devices\": [%%d, %%d, %%d, %%d], \"microbatches\": 4%s}", "", "pp 2 x tp 2", 0},
      {m, "{\"dp\": 2, \"tp\": 2, \"zero\": 1, \"devices\": [%%d, %%d, %%d, %%d], \"microbatches\": 1%s}", "",
       "dp 2 x tp 2 ZeRO-1", 0},
      {m, "{\"tp\": 2, \"devices\": [%%d, %%d], \"microbatches\": 2%s}", ", \"recompute\": \"selective\"",
       "tp 2 recompute selective", 0},
      {m, "{\"pp\": 2, \"tp\": 2, \"devices\": [%%d, %%d, %%d, %%d], \"microbatches\": 4%s}",
       ", \"recompute\": \"full\"", "pp 2 x tp 2 recompute full", 0},
      {tied, "{\"tp\": 2, \"devices\": [%%d, %%d], \"microbatches\": 2%s}", "", "tp 2, tied head", 0},
      {m, "{\"pp\": 2, \"tp\": 2, \"devices\": [%%d, %%d, %%d, %%d], \"microbatches\": 4%s}", "",
       "bf16 pp 2 x tp 2", 1},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    struct run ref, got;
    const double tol = cases[k].bf ? 5e-3 : 1e-4;
    const int prec = cases[k].bf ? STRATA_BFLOAT16 : STRATA_FLOAT32;
    char sp[128];
    snprintf(sp, sizeof sp, "%s, \"sp\": true", cases[k].extra);
    with_fields(cases[k].m, cases[k].fmt, cases[k].extra, prec, &ref);
    with_fields(cases[k].m, cases[k].fmt, sp, prec, &got);
    cr_assert_eq(got.n, ref.n);
    for (int s = 0; s < STEPS; s++) {
      cr_assert(fabs(got.loss[s] - ref.loss[s]) <= tol * fabs(ref.loss[s]), "%s step %d: loss %.9g, without sp %.9g",
                cases[k].what, s + 1, got.loss[s], ref.loss[s]);
      cr_assert(fabs(got.norm[s] - ref.norm[s]) <= tol * fabs(ref.norm[s]), "%s step %d: norm %.9g, without sp %.9g",
                cases[k].what, s + 1, got.norm[s], ref.norm[s]);
    }
    double worst = 0;
    for (size_t i = 0; i < got.n; i++) {
      const double scale = fabs(ref.params[i]) > 0.02 ? fabs(ref.params[i]) : 0.02;
      worst = fmax(worst, fabs(got.params[i] - ref.params[i]) / scale);
    }
    cr_assert(worst <= tol, "%s: parameters up to %.3g apart (relative)", cases[k].what, worst);
    cr_assert(worst > 0 || cases[k].bf, "%s: sp gave tp's very bits (is it on?)", cases[k].what);
    if (getenv("STRATA_TEST_VERBOSE"))
      fprintf(stderr, "sp %s: largest parameter difference %.3g (relative)\n", cases[k].what, worst);
    free(ref.params);
    free(got.params);
  }
  strata_model_free(tied);
  strata_model_free(one);
  strata_model_free(m);
}

/* The trainer of `fmt` over host devices 0 .. 7 (1 micro-batch of 2 a replica), after one step. */
static strata_trainer_t stepped(strata_model_t m, const char *fmt, strata_layout_t *l) {
  int h[8];
  for (int i = 0; i < 8; i++)
    h[i] = tc_find_device("host", i);
  char text[512];
  snprintf(text, sizeof text, fmt, h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]);
  OK(strata_layout_from_json(text, "llama memory", l));
  struct strata_train_options o = options(1);
  strata_trainer_t tr;
  OK(strata_trainer_new_layout(m, ds, &o, *l, NULL, &tr));
  OK(strata_trainer_step(tr, NULL));
  return tr;
}

/*
** strata-plan counts the replicated key/value heads: at tp 4 over 2 key/value heads and tp 2 and 4 over 1, each
** slice holds, by hand, V D / tp of the embedding and the head, and per block the two norms whole, D x D / tp of q
** and o, one head's D x hd of k and v (the replicated copy), 3 D F / tp of the MLP; the trainer's parameter bytes
** are those, its memory plan is strata_plan_memory's to the byte, and strata_simulate costs a step of each layout
** on a synthetic node.
*/
Test(llama_train, planner_counts_replicated_kv_heads) {
  const struct strata_machine_options mo = {.nodes = 1};
  strata_machine_t mach;
  OK(strata_machine_synthetic("8xH100-80GB:nvswitch", &mo, &mach));
  const struct {
    int kv, tp;
    const char *fmt;
  } cases[] = {{2, 4, "{\"tp\": 4, \"split\": [4], \"devices\": [%d, %d, %d, %d], \"microbatches\": 1}"},
               {1, 2, "{\"tp\": 2, \"split\": [4], \"devices\": [%d, %d], \"microbatches\": 1}"},
               {1, 4, "{\"pp\": 2, \"tp\": 4, \"split\": [2, 2], \"devices\": [%d, %d, %d, %d, %d, %d, %d, %d], "
                      "\"microbatches\": 2}"}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    strata_model_t m = small_llama_kv(0, 0, cases[k].kv);
    const int64_t V = 256, D = 16, hd = 4, F = 24, t = cases[k].tp;
    const uint64_t block = (uint64_t)(2 * D + 2 * D * D / t + 2 * D * hd + 3 * D * F / t);
    strata_layout_t l;
    strata_trainer_t tr = stepped(m, cases[k].fmt, &l);
    struct strata_train_report rep;
    OK(strata_trainer_report(tr, &rep));
    const int pp = strata_layout_pp(l);
    for (int d = 0; d < rep.devices; d++) {
      const int rank = pp == 1 ? 0 : d >= rep.devices / 2; /* (pp 2: the first rank's slices come first) */
      int dv;
      OK(strata_layout_device(l, 0, rank, d % (int)t, &dv));
      const struct strata_train_device_stats *s = NULL;
      for (int e = 0; e < rep.devices; e++)
        s = rep.dev[e].device == dv ? &rep.dev[e] : s;
      cr_assert_not_null(s);
      /* pp 2 splits the 4 layers 2 | 2: the embedding and block 0, block 1 and the head */
      const uint64_t want = pp == 1 ? (uint64_t)(V * D / t) + 2 * block + (uint64_t)(D + V * D / t)
                            : rank == 0 ? (uint64_t)(V * D / t) + block
                                        : block + (uint64_t)(D + V * D / t);
      cr_assert_eq(s->param_bytes, 4 * want, "kv %d tp %lld device %d: %llu parameter bytes, by hand %llu",
                   cases[k].kv, (long long)t, dv, (unsigned long long)s->param_bytes, (unsigned long long)(4 * want));
      uint64_t predicted;
      OK(strata_plan_memory(m, l, 2 * strata_layout_microbatches(l), rank, &predicted));
      cr_assert_eq(s->planned_bytes, predicted, "kv %d tp %lld device %d: planned %llu, strata_plan_memory %llu",
                   cases[k].kv, (long long)t, dv, (unsigned long long)s->planned_bytes,
                   (unsigned long long)predicted);
    }
    strata_trainer_free(tr);
    /* the same layout on the synthetic node's devices */
    strata_layout_t sl;
    char text[256];
    snprintf(text, sizeof text, cases[k].fmt, 0, 1, 2, 3, 4, 5, 6, 7);
    OK(strata_layout_from_json(text, "simulated", &sl));
    OK(strata_layout_check(sl, m, strata_machine_device_count(mach)));
    struct strata_sim_options so = {.batch = 2 * strata_layout_microbatches(sl)};
    struct strata_sim_result r;
    OK(strata_simulate(mach, m, sl, &so, &r));
    cr_assert(r.step_s > 0 && r.fits && r.peak_bytes > 0, "kv %d tp %lld: step %g s", cases[k].kv, (long long)t,
              r.step_s);
    strata_sim_result_destroy(&r);
    strata_layout_free(sl);
    strata_layout_free(l);
    strata_model_free(m);
  }
  strata_machine_free(mach);
}

/*
** Recomputation's memory, exact: on one device (one micro-batch of 2 x 8 token rows, fp32) the trainer's memory plan is
** strata_plan_memory's for each mode, and it is smaller than without by, per block less the one block whose
** recomputation the buffer holds, what the mode drops: selective the attention output (rows x d_model) and
** log-sum-exps (batch x heads x context); full all a block keeps (x normed and x_mid normed, x_mid, rows x d_model
** each; q|k|v, rows x (d_model + 2 kv hd); the attention output and lse; gate|up and silu(gate) up, 3 rows x d_ff;
** two rstd, rows each) less the buffer's copy of the block's output (rows x d_model). The runtime's accounting of a
** step peaks within the plan.
*/
Test(llama_train, recompute_memory_is_exact_and_smaller) {
  struct strata_model_config c = {.kind = STRATA_MODEL_LLAMA, .vocab = 256, .context = 8, .d_model = 16, .layers = 4,
                                  .heads = 4, .kv_heads = 2, .d_ff = 24, .rope_theta = 500, .norm_eps = 1e-5};
  strata_model_t m;
  OK(strata_model_from_config(&c, &m));
  static const char *const fmts[] = {"{\"split\": [6], \"devices\": [%d], \"microbatches\": 1}",
                                     "{\"split\": [6], \"devices\": [%d], \"microbatches\": 1, \"recompute\": "
                                     "\"selective\"}",
                                     "{\"split\": [6], \"devices\": [%d], \"microbatches\": 1, \"recompute\": "
                                     "\"full\"}"};
  uint64_t planned[3];
  for (int k = 0; k < 3; k++) {
    strata_layout_t l;
    strata_trainer_t tr = stepped(m, fmts[k], &l);
    struct strata_train_report rep;
    OK(strata_trainer_report(tr, &rep));
    cr_assert_eq(rep.devices, 1);
    uint64_t predicted;
    OK(strata_plan_memory(m, l, 2, 0, &predicted));
    cr_assert_eq(rep.dev[0].planned_bytes, predicted, "%s: planned %llu, strata_plan_memory %llu", fmts[k],
                 (unsigned long long)rep.dev[0].planned_bytes, (unsigned long long)predicted);
    cr_assert_leq(rep.dev[0].peak_bytes, rep.dev[0].planned_bytes, "%s: peaked at %llu, planned %llu", fmts[k],
                  (unsigned long long)rep.dev[0].peak_bytes, (unsigned long long)rep.dev[0].planned_bytes);
    planned[k] = predicted;
    strata_trainer_free(tr);
    strata_layout_free(l);
  }
  const uint64_t R = 2 * 8, D = 16, B = 2, H = 4, T = 8, Akv = 2 * 4, F = 24, blocks = 4;
  const uint64_t att = R * D + B * H * T, kept = 3 * R * D + R * (D + 2 * Akv) + att + 3 * R * F + 2 * R;
  cr_assert_eq(planned[0] - planned[1], 4 * (blocks - 1) * att, "selective saves %llu bytes, by hand %llu",
               (unsigned long long)(planned[0] - planned[1]), (unsigned long long)(4 * (blocks - 1) * att));
  cr_assert_eq(planned[0] - planned[2], 4 * ((blocks - 1) * kept - R * D), "full saves %llu bytes, by hand %llu",
               (unsigned long long)(planned[0] - planned[2]), (unsigned long long)(4 * ((blocks - 1) * kept - R * D)));
  strata_model_free(m);
}

/*
** Sequence parallelism's memory, exact: at tp 2 (one micro-batch of 2 x 8 rows) each slice's memory plan is
** strata_plan_memory's with and without sp, and its activations are smaller by what sp cuts to the slice's half of
** the rows, by hand: the embedding's output, per block its two RMSNorm outputs and rstd, x_mid and its output, the
** head's RMSNorm output and rstd ((R - R / 2) x (D + (3 D + 2 + D) 2 + D + 1) floats).
*/
Test(llama_train, sequence_parallel_memory_is_exact_and_smaller) {
  strata_model_t m = small_llama(0, 0);
  static const char *const fmts[] = {"{\"tp\": 2, \"split\": [4], \"devices\": [%d, %d], \"microbatches\": 1}",
                                     "{\"tp\": 2, \"split\": [4], \"devices\": [%d, %d], \"microbatches\": 1, "
                                     "\"sp\": true}"};
  uint64_t act[2], planned[2];
  for (int k = 0; k < 2; k++) {
    strata_layout_t l;
    strata_trainer_t tr = stepped(m, fmts[k], &l);
    struct strata_train_report rep;
    OK(strata_trainer_report(tr, &rep));
    cr_assert_eq(rep.devices, 2);
    uint64_t predicted;
    OK(strata_plan_memory(m, l, 2, 0, &predicted));
    for (int d = 0; d < 2; d++)
      cr_assert_eq(rep.dev[d].planned_bytes, predicted, "%s: device %d planned %llu, strata_plan_memory %llu",
                   fmts[k], d, (unsigned long long)rep.dev[d].planned_bytes, (unsigned long long)predicted);
    act[k] = rep.dev[0].activation_bytes;
    planned[k] = predicted;
    strata_trainer_free(tr);
    strata_layout_free(l);
  }
  const uint64_t R = 16, Rs = 8, D = 16, cut = (R - Rs) * (D + 2 * (3 * D + 2 + D) + D + 1);
  cr_assert_eq(act[0] - act[1], 4 * cut, "sp keeps %llu activation bytes less, by hand %llu",
               (unsigned long long)(act[0] - act[1]), (unsigned long long)(4 * cut));
  cr_assert_lt(planned[1], planned[0]);
  strata_model_free(m);
}

/* What is not built is refused at creation, naming why: tp 3 over 2 key/value heads (neither dividing them nor a
** multiple of them), tp 8 over 4 query heads, a tied llama cut into stages. */
Test(llama_train, refused_layouts_name_the_field) {
  strata_model_t m = small_llama(0, 0), tied = small_llama(0, 1);
  int h[8];
  for (int i = 0; i < 8; i++)
    h[i] = tc_find_device("host", i);
  static const struct {
    const char *fmt, *says;
    int tied;
  } bad[] = {
      {"{\"tp\": 3, \"devices\": [%d, %d, %d], \"microbatches\": 1}",
       "tp 3 neither divides n_kv_heads 2 nor is a multiple of it", 0},
      {"{\"tp\": 8, \"devices\": [%d, %d, %d, %d, %d, %d, %d, %d], \"microbatches\": 1}", "tp 8 does not divide the "
       "model's 4 heads", 0},
      {"{\"pp\": 2, \"devices\": [%d, %d], \"microbatches\": 2}", "tied", 1},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char text[256];
    snprintf(text, sizeof text, bad[i].fmt, h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]);
    strata_layout_t l;
    OK(strata_layout_from_json(text, "refused", &l));
    struct strata_train_options o = options(1);
    strata_trainer_t tr = NULL;
    cr_assert_neq(strata_trainer_new_layout(bad[i].tied ? tied : m, ds, &o, l, NULL, &tr), STRATA_OK, "%s", text);
    cr_assert(strstr(strata_last_error(), bad[i].says), "%s: '%s' names '%s'", text, strata_last_error(),
              bad[i].says);
    cr_assert_null(tr);
    strata_layout_free(l);
  }
  strata_model_free(tied);
  strata_model_free(m);
}

/* The layout of `fmt` over devices d[0 ..] (one device: fmt NULL, 4 micro-batches), STEPS steps. */
static void run_on(strata_model_t m, const char *fmt, const int *d, struct run *r) {
  struct strata_train_options o = options(fmt ? 1 : 4);
  o.device = d[0];
  strata_trainer_t tr;
  if (fmt) {
    char text[512];
    snprintf(text, sizeof text, fmt, d[0], d[1]); /* every format names two devices */
    strata_layout_t l;
    OK(strata_layout_from_json(text, "llama on opencl", &l));
    OK(strata_trainer_new_layout(m, ds, &o, l, NULL, &tr));
    strata_layout_free(l);
  } else {
    OK(strata_trainer_new(m, ds, &o, &tr));
  }
  run_steps(tr, r);
  strata_trainer_free(tr);
}

/*
** On OpenCL (PoCL) devices, which run the llama ops as kernels and the GEMMs through CLBlast or strata's kernels:
** one device, a PoCL + host pipeline and tp 2 over two PoCL devices track one host device within test-parallel.c's
** bounds for mixed GEMM libraries (1e-3 relative on losses, 2e-4 on parameters), and tp 2 over one key/value head
** (replicated) too; sequence parallelism over the two PoCL devices tracks tp 2 there within 1e-4.
*/
Test(llama_train, opencl_devices_track_the_host) {
  int p0 = tc_find_device("opencl", 0), p1 = tc_find_device("opencl", 1), h0 = tc_find_device("host", 0);
  if (p1 < 0)
    cr_skip_test("needs two OpenCL devices (PoCL)");
  strata_model_t m = small_llama(1, 0);
  struct run ref, got;
  const int host[1] = {h0};
  run_on(m, NULL, host, &ref);
  const int one[1] = {p0}, mixed[2] = {p0, h0}, two[2] = {p0, p1};
  const struct {
    const char *fmt, *what;
    const int *d;
  } cases[] = {{NULL, "one PoCL device", one},
               {"{\"pp\": 2, \"devices\": [%d, %d], \"microbatches\": 4}", "pp 2 over PoCL and host", mixed},
               {"{\"tp\": 2, \"devices\": [%d, %d], \"microbatches\": 4}", "tp 2 over two PoCL devices", two}};
  for (int k = 0; k < 3; k++) {
    run_on(m, cases[k].fmt, cases[k].d, &got);
    cr_assert_eq(got.n, ref.n);
    for (int s = 0; s < STEPS; s++)
      cr_assert(fabs(got.loss[s] - ref.loss[s]) <= 1e-3 * fabs(ref.loss[s]), "%s step %d: %.7g, host %.7g",
                cases[k].what, s + 1, got.loss[s], ref.loss[s]);
    double worst = 0;
    for (size_t i = 0; i < got.n; i++)
      worst = fmax(worst, fabs(got.params[i] - ref.params[i]));
    cr_assert(worst <= 2e-4, "%s: parameters up to %.3g from the host's", cases[k].what, worst);
    if (getenv("STRATA_TEST_VERBOSE"))
      fprintf(stderr, "%s: parameters within %.3g of the host's\n", cases[k].what, worst);
    free(got.params);
  }
  free(ref.params);
  /* sequence parallelism on two PoCL devices: tp 2's losses, norms and parameters within 1e-4 (relative) */
  run_on(m, "{\"tp\": 2, \"devices\": [%d, %d], \"microbatches\": 4}", two, &ref);
  run_on(m, "{\"tp\": 2, \"devices\": [%d, %d], \"microbatches\": 4, \"sp\": true}", two, &got);
  cr_assert_eq(got.n, ref.n);
  for (int s = 0; s < STEPS; s++) {
    cr_assert(fabs(got.loss[s] - ref.loss[s]) <= 1e-4 * fabs(ref.loss[s]), "sp on PoCL step %d: %.7g, without %.7g",
              s + 1, got.loss[s], ref.loss[s]);
    cr_assert(fabs(got.norm[s] - ref.norm[s]) <= 1e-4 * fabs(ref.norm[s]), "sp on PoCL step %d: norm %.7g, without "
              "%.7g", s + 1, got.norm[s], ref.norm[s]);
  }
  for (size_t i = 0; i < got.n; i++)
    cr_assert(fabs(got.params[i] - ref.params[i]) <= 1e-4 * fmax(fabs(ref.params[i]), 0.02), "sp on PoCL: parameter "
              "%zu is %.9g, without sp %.9g", i, got.params[i], ref.params[i]);
  free(got.params);
  free(ref.params);
  strata_model_free(m);
  /* one key/value head replicated on both PoCL slices (its gradients summed over them): the same bounds */
  m = small_llama_kv(1, 0, 1);
  run_on(m, NULL, host, &ref);
  run_on(m, "{\"tp\": 2, \"devices\": [%d, %d], \"microbatches\": 4}", two, &got);
  cr_assert_eq(got.n, ref.n);
  for (int s = 0; s < STEPS; s++)
    cr_assert(fabs(got.loss[s] - ref.loss[s]) <= 1e-3 * fabs(ref.loss[s]), "tp 2 over one kv head on PoCL step %d: "
              "%.7g, host %.7g", s + 1, got.loss[s], ref.loss[s]);
  double worst = 0;
  for (size_t i = 0; i < got.n; i++)
    worst = fmax(worst, fabs(got.params[i] - ref.params[i]));
  cr_assert(worst <= 2e-4, "tp 2 over one kv head on PoCL: parameters up to %.3g from the host's", worst);
  free(got.params);
  free(ref.params);
  strata_model_free(m);
}

/* ---- planning ---- */

/* strata-plan's search plans llama3-70b on 16 synthetic nodes of 8 H100s (fp32 and bf16): the best plan splits its
** layers with tp, each tp group inside one node, tp dividing the 8 key/value heads. */
Test(llama, llama3_70b_plans_with_tp_inside_a_node) {
  const struct strata_machine_options mo = {.nodes = 16};
  strata_machine_t mach;
  OK(strata_machine_synthetic("8xH100-80GB:nvswitch", &mo, &mach));
  strata_model_t m;
  OK(strata_model_from_preset("llama3-70b", &m));
  for (int bf = 0; bf <= 1; bf++) {
    struct strata_plan_options po = {.batch = 64, .precision = bf ? STRATA_BFLOAT16 : STRATA_FLOAT32};
    strata_plan_t plan;
    OK(strata_plan_search(mach, m, &po, &plan));
    cr_assert_gt(strata_plan_count(plan), 0);
    struct strata_plan_candidate best;
    OK(strata_plan_candidate(plan, 0, &best));
    strata_layout_t l = best.layout;
    OK(strata_layout_check(l, m, strata_machine_device_count(mach)));
    cr_assert(best.step_s > 0 && best.peak_bytes > 0);
    cr_assert_gt(strata_layout_tp(l, 0), 1, "a 70B model's layers are cut by tp");
    for (int r = 0; r < strata_layout_pp(l); r++) {
      const int t = strata_layout_tp(l, r);
      cr_assert(t >= 1 && 8 % t == 0, "tp %d divides the 8 key/value heads", t);
      for (int d = 0; d < strata_layout_dp(l); d++) {
        int first, dev;
        OK(strata_layout_device(l, d, r, 0, &first));
        for (int k = 1; k < t; k++) {
          OK(strata_layout_device(l, d, r, k, &dev));
          cr_assert_eq(dev / 8, first / 8, "replica %d rank %d: slice %d on node %d, slice 0 on node %d", d, r, k,
                       dev / 8, first / 8);
        }
      }
    }
    strata_plan_free(plan);
  }
  strata_model_free(m);
  strata_machine_free(mach);
}
