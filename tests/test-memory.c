/* SPDX-License-Identifier: MIT */
/* test-memory.c — the one memory model (lib/model/stage.c, ranges.c): a stage's bytes summed from its layers' figures
** are what the stage really allocates through the device layer, and every cut's bytes weighed at once (the
** balancers' and the planner's search) equal the bytes of the stage built alone. Built from the model's sources, with
** the library for everything public. */
#include "common.h"

#include "model/stage.h"

TestSuite(memory, .timeout = 120);

static strata_model_t model_of(const struct strata_model_config *c) {
  strata_model_t m;
  OK(strata_model_from_config(c, &m));
  return m;
}

/* The models the trainer cuts: GPTs whose vocabulary tp 2 splits (256) or not (255), an MLP and CNNs whose tp
** pairs a cut can separate. */
static int models(strata_model_t *out) {
  struct strata_model_config g = {.kind = STRATA_MODEL_GPT, .vocab = 256, .context = 8, .d_model = 16, .layers = 4,
                                  .heads = 2, .d_ff = 32};
  struct strata_model_config odd = g;
  odd.vocab = 255;
  struct strata_model_config mlp = {.kind = STRATA_MODEL_MLP, .image = 8, .channels = 1, .classes = 3,
                                    .hidden = {32, 16, 8, 0}};
  struct strata_model_config cnn = {.kind = STRATA_MODEL_CNN, .image = 8, .channels = 1, .classes = 3,
                                    .conv = {4, 8, 0}};
  out[0] = model_of(&g);
  out[1] = model_of(&odd);
  out[2] = model_of(&mlp);
  out[3] = model_of(&cnn);
  /* cnn-hires's layers, small: filters of 3, 5 and 7, a stride, unpooled layers, the global average pool */
  struct strata_model_config hires = {.kind = STRATA_MODEL_CNN, .image = 16, .channels = 1, .classes = 3,
                                      .conv = {4, 8, 4}, .kernel = {3, 5, 7}, .stride = {1, 2, 1}, .pool = {2, 1, 1},
                                      .gap = 1};
  out[4] = model_of(&hires);
  return 5;
}

static int same(const struct strata__stage_bytes *a, const struct strata__stage_bytes *b) {
  return a->params == b->params && a->fixed == b->fixed && a->slot == b->slot && a->grad == b->grad &&
         a->in == b->in && a->out == b->out;
}

/* Every [a, b) of every model, tp 1 and 2 (each slice), ZeRO 1 and 3 shards, split backward or not, 1 and 3
** samples per micro-batch, fp32 and bf16: the constant-time figures are the stage's. */
Test(memory, every_cut_weighed_at_once_is_the_stage_alone) {
  strata_model_t m[5];
  const int n = models(m);
  int checked = 0;
  for (int i = 0; i < n; i++)
    for (int tp = 1; tp <= 2; tp++)
      for (int slice = 0; slice < tp; slice++)
        for (int zero = 1; zero <= 3; zero += 2)
          for (int split = 0; split <= 1; split++)
            for (int64_t mb = 1; mb <= 3; mb += 2)
            for (int bf = 0; bf <= 1; bf++) {
              const struct strata__cut cut = {{slice, tp}, {0, zero}, bf ? STRATA_BFLOAT16 : STRATA_FLOAT32, bf ? STRATA_BFLOAT16 : STRATA_FLOAT32, {0, 1}};
              struct strata__stage_ranges *r;
              OK(strata__stage_ranges_new(m[i], mb, split, &cut, &r));
              const int L = strata_model_layer_count(m[i]);
              for (int a = 0; a < L; a++)
                for (int b = a + 1; b <= L; b++) {
                  struct strata__stage_bytes want, got;
                  OK(strata__stage_plan(m[i], a, b, mb, split, &cut, &want));
                  OK(strata__stage_ranges_bytes(r, a, b, &got));
                  cr_assert(same(&got, &want),
                            "model %d tp %d.%d zero %d split %d mb %lld bf16 %d, layers [%d, %d): weighed fixed %llu "
                            "slot %llu grad %llu params %llu, alone fixed %llu slot %llu grad %llu params %llu",
                            i, slice, tp, zero, split, (long long)mb, bf, a, b, (unsigned long long)got.fixed,
                            (unsigned long long)got.slot, (unsigned long long)got.grad, (unsigned long long)got.params,
                            (unsigned long long)want.fixed, (unsigned long long)want.slot,
                            (unsigned long long)want.grad, (unsigned long long)want.params);
                  checked++;
                }
              strata__stage_ranges_free(r);
            }
  cr_assert_gt(checked, 1000);
  for (int i = 0; i < n; i++)
    strata_model_free(m[i]);
}

/* The figures against the runtime's accounting: a stage built on a host device allocates its fixed bytes, and a
** slot taken for a micro-batch adds one slot's activations and boundary gradients, byte for byte, in fp32 and in bf16
** (where the fixed bytes hold the weights' bf16 copy and, with tp, the float32 copy a join sums in). */
Test(memory, the_figures_are_what_a_stage_allocates) {
  setenv("STRATA_HOST_DEVICES", "1", 0);
  setenv("STRATA_BACKENDS", "host", 0);
  strata_model_t m[5];
  const int n = models(m);
  int dev = tc_find_device("host", 0);
  cr_assert_geq(dev, 0);
  for (int i = 0; i < n; i++)
    for (int tp = 1; tp <= 2; tp++)
      for (int split = 0; split <= 1; split++)
      for (int bf = 0; bf <= 1; bf++) {
        const int L = strata_model_layer_count(m[i]);
        for (int a = 0; a < L; a++)
          for (int b = a + 1; b <= L; b++) {
            const struct strata__cut cut = {{tp - 1, tp}, {1, 2}, bf ? STRATA_BFLOAT16 : STRATA_FLOAT32, STRATA_FLOAT32, {0, 1}};
            struct strata__stage_bytes want;
            OK(strata__stage_plan(m[i], a, b, 2, split, &cut, &want));
            uint64_t before, after, taken;
            OK(strata_device_memory(dev, &before, NULL, NULL));
            struct strata__stage *st;
            OK(strata__stage_new(m[i], a, b, dev, 2, 7, split, &cut, &st));
            OK(strata_device_memory(dev, &after, NULL, NULL));
            cr_assert_eq(after - before, want.fixed, "model %d tp %d split %d [%d, %d): allocated %llu, figured %llu",
                         i, tp, split, a, b, (unsigned long long)(after - before), (unsigned long long)want.fixed);
            int s;
            OK(strata__stage_slot_take(st, &s));
            OK(strata__stage_acquire(st, s));
            OK(strata_device_memory(dev, &taken, NULL, NULL));
            cr_assert_eq(taken - after, want.slot + want.grad,
                         "model %d tp %d split %d [%d, %d): a slot took %llu, figured %llu + %llu", i, tp, split, a, b,
                         (unsigned long long)(taken - after), (unsigned long long)want.slot,
                         (unsigned long long)want.grad);
            strata__stage_free(st);
          }
      }
  for (int i = 0; i < n; i++)
    strata_model_free(m[i]);
}
