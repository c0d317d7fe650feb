/* SPDX-License-Identifier: MIT */
/* test-llama.c — the llama model kind: its presets and cost profile by hand, its JSON and bad input, and training it
** against the single device in every layout. */
#include <stdio.h>

#include "common.h"

TestSuite(llama);

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
  const char *j = "{\"kind\": \"llama\", \"vocab\": 300, \"context\": 16, \"d_model\": 32, \"layers\": 2, \"heads\": 4, "
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
       "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4}}", "rope_scaling.rope_type\" \"yarn\"", STRATA_ERR_UNSUPPORTED},
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
