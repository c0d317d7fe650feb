/* SPDX-License-Identifier: MIT */
/* test-grads.c — the step's first weight-gradient write (beta 0, no zeroing before it) against zeroing every
** gradient and accumulating: the same losses, norms and parameters, bit for bit, on every layout that writes them. */
#include <math.h>

#include "common.h"

#include "train/trainer.h"

#define STEPS 3

static char dir[256];
static strata_dataset_t ds;

static void setup(void) {
  setenv("STRATA_HOST_DEVICES", "8", 1);
  setenv("STRATA_BACKENDS", "host", 1);
  snprintf(dir, sizeof dir, "%s/strata-grads-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  cr_assert_not_null(mkdtemp(dir));
  char corpus[300];
  snprintf(corpus, sizeof corpus, "%s/corpus.txt", dir);
  FILE *f = fopen(corpus, "w");
  cr_assert_not_null(f);
  for (int i = 0; i < 300; i++)
    fprintf(f, "layer %d writes its weight gradient first; the others add to it. ", i % 7);
  fclose(f);
  OK(strata_dataset_text(corpus, 0.2, &ds));
}

static void teardown(void) {
  strata_dataset_free(ds);
  tc_remove_dir(dir);
}

TestSuite(grads, .init = setup, .fini = teardown, .timeout = 300);

struct run {
  float loss[STEPS], norm[STEPS];
  float *params;
  size_t count;
  int first; /* tensors whose first write is a GEMM's with beta 0, over the stages */
};

/*
** STEPS steps of model m on `layout` (JSON) in `precision`. Before each
** step every stage's gradients are filled with NaN: what a step reads of
** them before writing them shows in the losses and parameters. `zeroed`:
** the reference — every tensor marked as none the GEMMs write first, so
** that the step's clear zeroes all of them and every GEMM accumulates.
*/
static void train(strata_model_t m, const char *layout, int precision, int zeroed, struct run *out) {
  strata_layout_t l;
  OK(strata_layout_from_json(layout, "test", &l));
  struct strata_train_options o;
  strata_train_options_default(&o);
  o.batch = 2;
  o.steps = STEPS;
  o.warmup = 1;
  o.lr = 1e-2f;
  o.precision = precision;
  strata_trainer_t tr;
  OK(strata_trainer_new_layout(m, ds, &o, l, NULL, &tr));
  const int stages = strata__stages_all(tr);
  for (int s = 0; s < stages; s++)
    if (zeroed && tr->st[s]) {
      tr->st[s]->gfirst = calloc((size_t)tr->st[s]->ntensors, 1);
      cr_assert_not_null(tr->st[s]->gfirst);
    }
  for (int k = 0; k < STEPS; k++) {
    for (int s = 0; s < stages; s++) {
      struct strata__stage *st = tr->st[s];
      if (st && st->grads && !st->zero2)
        OK(strata_fill(st->q, strata_mem(st->grads, 0), NAN, (int64_t)(st->chunk * (size_t)st->zero.size)));
    }
    struct strata_step_stats stats;
    OK(strata_trainer_step(tr, &stats));
    out->loss[k] = stats.loss;
    out->norm[k] = stats.grad_norm;
  }
  out->first = 0;
  for (int s = 0; s < stages; s++)
    for (int t = 0; tr->st[s] && tr->st[s]->gfirst && t < tr->st[s]->ntensors; t++)
      out->first += tr->st[s]->gfirst[t] != 0;
  out->count = 0;
  OK(strata_trainer_params(tr, NULL, &out->count));
  out->params = malloc(out->count * sizeof *out->params);
  cr_assert_not_null(out->params);
  OK(strata_trainer_params(tr, out->params, &out->count));
  strata_trainer_free(tr);
  strata_layout_free(l);
}

/* The model of config c, trained on `layout` both ways: equal bits; `first` tensors written first by a GEMM. */
static void check(const char *what, const struct strata_model_config *c, const char *layout, int precision,
                  int first) {
  strata_model_t m;
  OK(strata_model_from_config(c, &m));
  struct run got, want;
  train(m, layout, precision, 0, &got);
  train(m, layout, precision, 1, &want);
  cr_assert_eq(got.first, first, "%s: %d tensors written first by their GEMM, expected %d", what, got.first, first);
  cr_assert_eq(want.first, 0, "%s: the reference wrote %d tensors first", what, want.first);
  for (int k = 0; k < STEPS; k++) {
    cr_assert(memcmp(&got.loss[k], &want.loss[k], 4) == 0 && memcmp(&got.norm[k], &want.norm[k], 4) == 0,
              "%s step %d: loss %.9g norm %.9g, zeroing every gradient: loss %.9g norm %.9g", what, k + 1, got.loss[k],
              got.norm[k], want.loss[k], want.norm[k]);
  }
  cr_assert_eq(got.count, want.count);
  for (size_t i = 0; i < got.count; i++)
    cr_assert(memcmp(&got.params[i], &want.params[i], 4) == 0, "%s: parameter %zu is %a, zeroing every gradient: %a",
              what, i, got.params[i], want.params[i]);
  free(got.params);
  free(want.params);
  strata_model_free(m);
}

static const struct strata_model_config gpt = {.kind = STRATA_MODEL_GPT, .vocab = 256, .context = 8, .d_model = 16,
                                               .layers = 4, .heads = 2, .d_ff = 32};

/* One device, two micro-batches a step (the second accumulates): a GPT's four matrices a block and its untied
** head's weight; tied, the head adds to the embedding's gradient and keeps its zeroing. */
Test(grads, one_device_two_microbatches) {
  struct strata_model_config c = gpt;
  const char *one = "{\"dp\":1,\"pp\":1,\"tp\":1,\"microbatches\":2}";
  c.tied = 1;
  check("fp32 tied", &c, one, STRATA_FLOAT32, 4 * 4);
  c.tied = 0;
  check("fp32 untied", &c, one, STRATA_FLOAT32, 4 * 4 + 1);
  check("bf16 untied", &c, one, STRATA_BFLOAT16, 4 * 4 + 1);
  c.tied = 1;
  check("bf16 tied", &c, one, STRATA_BFLOAT16, 4 * 4);
}

/* Pipelines (1F1B, a split backward's separate weight passes, interleaved chunks), tensor and sequence parallelism,
** data parallelism with ZeRO-1 (gradients reduce-scattered) and ZeRO-2 (its windows: everything zeroed as before). */
Test(grads, parallel_layouts) {
  struct strata_model_config c = gpt;
  c.tied = 0;
  check("pp 2 1f1b", &c, "{\"dp\":1,\"pp\":2,\"tp\":1,\"schedule\":\"1f1b\",\"microbatches\":4}", STRATA_FLOAT32,
        4 * 4 + 1);
  check("pp 2 zb bf16", &c, "{\"dp\":1,\"pp\":2,\"tp\":1,\"schedule\":\"zb\",\"microbatches\":4}", STRATA_BFLOAT16,
        4 * 4 + 1);
  check("pp 2 interleaved", &c,
        "{\"dp\":1,\"pp\":2,\"tp\":1,\"schedule\":\"interleaved\",\"virtual_stages\":2,\"microbatches\":4}",
        STRATA_FLOAT32, 4 * 4 + 1);
  check("tp 2 sp", &c, "{\"dp\":1,\"pp\":1,\"tp\":2,\"sp\":true,\"microbatches\":2}", STRATA_FLOAT32, 2 * (4 * 4 + 1));
  check("dp 2 zero 1", &c, "{\"dp\":2,\"pp\":1,\"tp\":1,\"zero\":1,\"microbatches\":2}", STRATA_FLOAT32,
        2 * (4 * 4 + 1));
  check("dp 2 zero 2", &c, "{\"dp\":2,\"pp\":1,\"tp\":1,\"zero\":2,\"microbatches\":2}", STRATA_FLOAT32, 0);
  check("2x2x2 bf16", &c, "{\"dp\":2,\"pp\":2,\"tp\":2,\"microbatches\":2}", STRATA_BFLOAT16, 2 * 2 * (4 * 4 + 1));
}

/* A llama's seven projections a block; with tp above its key/value heads the slices sharing one add their k and v
** gradients (kv_grads_shared), which keep their zeroing. */
Test(grads, llama) {
  struct strata_model_config c = {.kind = STRATA_MODEL_LLAMA, .vocab = 256, .context = 8, .d_model = 16, .layers = 2,
                                  .heads = 4, .kv_heads = 1, .d_ff = 32};
  check("llama", &c, "{\"dp\":1,\"pp\":1,\"tp\":1,\"microbatches\":2}", STRATA_FLOAT32, 2 * 7 + 1);
  check("llama tp 2", &c, "{\"dp\":1,\"pp\":1,\"tp\":2,\"microbatches\":2}", STRATA_BFLOAT16, 2 * (2 * 5 + 1));
}
