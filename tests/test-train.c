/* SPDX-License-Identifier: MIT */
/* test-train.c — models and their cost profiles, end-to-end gradients against finite differences, host vs OpenCL,
** learning below the unigram entropy, exact resume, and bad input. */
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

static char tmpdir[256];

static void make_tmpdir(void) {
  snprintf(tmpdir, sizeof tmpdir, "%s/strata-train-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  cr_assert_not_null(mkdtemp(tmpdir));
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f);
  fputs(text, f);
  fclose(f);
}

/* A text file of `n` bytes with real structure: repeated words. */
static char *text_corpus(size_t n) {
  static const char *const words[] = {"the ", "cat ", "sat ", "on ", "a ", "mat. ", "and ", "then ", "ran ", "far. "};
  char *path = malloc(512);
  snprintf(path, 512, "%s/corpus.txt", tmpdir);
  FILE *f = fopen(path, "wb");
  uint64_t s = 7;
  size_t w = 0;
  while (w < n) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const char *word = words[(s >> 33) % 10];
    fputs(word, f);
    w += strlen(word);
  }
  fclose(f);
  return path;
}

static void setup(void) {
  setenv("STRATA_BACKENDS", "host,opencl", 0);
  make_tmpdir();
}

TestSuite(model, .init = setup);
TestSuite(train, .init = setup);

/* ---- models ---- */

Test(model, gpt_cost_profile_by_hand) {
  strata_model_t m;
  OK(strata_model_from_preset("gpt-tiny", &m));
  const struct strata_model_config *c = strata_model_config(m);
  cr_assert_eq(c->d_model, 64);
  int64_t V = 256, T = 64, D = 64, F = 256, L = 2;
  /* wte + wpe, per block 4D + 3D^2 + 3D + D^2 + D + DF + F + FD + D, ln_f, lm_head */
  uint64_t want = (uint64_t)(V * D + T * D + L * (4 * D + 3 * D * D + 3 * D + D * D + D + D * F + F + F * D + D) +
                             2 * D + V * D);
  cr_assert_eq(strata_model_params(m), want);
  cr_assert_eq(strata_model_layer_count(m), 4);
  struct strata_layer_info li;
  OK(strata_model_layer(m, 1, &li));
  cr_assert_str_eq(li.name, "h.0");
  cr_assert_float_eq(li.fwd_flops, (double)(T * (6 * D * D + 2 * D * D + 4 * D * F) + 4 * T * T * D), 1);
  cr_assert_float_eq(li.bwd_flops, 2 * li.fwd_flops, 1);
  cr_assert_eq(li.out_bytes, (uint64_t)(4 * T * D));
  cr_assert_eq(strata_model_layer(m, 4, &li), STRATA_ERR_RANGE);
  strata_model_free(m);
  /* GPT-2 small's shape: 124M parameters with the 50257-token vocabulary, untied head adds V*D */
  OK(strata_model_from_preset("gpt2-small", &m));
  double p = (double)strata_model_params(m) - 50257.0 * 768;
  cr_assert(p > 123e6 && p < 125e6, "gpt2-small (tied count) has %.0f parameters", p);
  strata_model_free(m);
  strata_model_free(NULL);
}

Test(model, json_files_and_bad_input) {
  char path[512];
  strata_model_t m = NULL;
  snprintf(path, sizeof path, "%s/m.json", tmpdir);
  write_file(path, "{\"kind\": \"gpt\", \"vocab\": 256, \"context\": 16, \"d_model\": 24, \"layers\": 3, \"heads\": 3}");
  OK(strata_model_from_file(path, &m));
  cr_assert_eq(strata_model_config(m)->d_ff, 96, "d_ff defaults to 4 d_model");
  char *json = NULL;
  OK(strata_model_to_json(m, &json));
  cr_assert(strstr(json, "\"d_model\":24"), "%s", json);
  free(json);
  strata_model_free(m);
  m = NULL;

  cr_assert_eq(strata_model_load("gpt-enormous", &m), STRATA_ERR_NOT_FOUND);
  cr_assert(strstr(strata_last_error(), "gpt-tiny"), "the message lists presets: %s", strata_last_error());
  write_file(path, "{\"kind\": \"gpt\", \"d_model\": 30, \"heads\": 4, \"layers\": 1, \"context\": 8}");
  cr_assert_eq(strata_model_from_file(path, &m), STRATA_ERR_SHAPE);
  cr_assert(strstr(strata_last_error(), "does not divide"), "%s", strata_last_error());
  write_file(path, "{\"kind\": \"gpt\", \"d_model\": 32,");
  cr_assert_eq(strata_model_from_file(path, &m), STRATA_ERR_PARSE);
  cr_assert(strstr(strata_last_error(), path), "%s", strata_last_error());
  write_file(path, "{\"kind\": \"gpt\", \"d_modle\": 32}");
  cr_assert_eq(strata_model_from_file(path, &m), STRATA_ERR_PARSE);
  cr_assert(strstr(strata_last_error(), "d_modle"), "%s", strata_last_error());
  write_file(path, "{\"kind\": \"cnn\", \"image\": 12, \"classes\": 3, \"conv\": [4, 4, 4]}");
  cr_assert_eq(strata_model_from_file(path, &m), STRATA_ERR_SHAPE, "12 is not divisible by 8");
  cr_assert_eq(strata_model_from_file("/nonexistent/model.json", &m), STRATA_ERR_IO);
  cr_assert_null(m);
}

/* cnn-hires's fields: kernels, strides, pools and gap read, written back only when set, and refused when wrong. */
Test(model, cnn_kernels_strides_pools_and_gap) {
  strata_model_t m = NULL;
  OK(strata_model_from_preset("cnn-hires", &m));
  const struct strata_model_config *c = strata_model_config(m);
  cr_assert_geq(c->image, 512);
  cr_assert(c->gap);
  char *j = NULL;
  OK(strata_model_to_json(m, &j));
  strata_model_t back = NULL;
  OK(strata_model_from_json(j, "round trip", &back));
  char *j2 = NULL;
  OK(strata_model_to_json(back, &j2));
  cr_assert_str_eq(j, j2);
  cr_assert(strstr(j, "\"kernels\":[3,3,5,3,3]") && strstr(j, "\"gap\":true"), "%s", j);
  cr_assert_eq(strata_model_params(m), strata_model_params(back));
  free(j);
  free(j2);
  strata_model_free(back);
  strata_model_free(m);
  OK(strata_model_from_preset("cnn", &m)); /* the small cnn's JSON as before: no new fields */
  OK(strata_model_to_json(m, &j));
  cr_assert_null(strstr(j, "kernels"), "%s", j);
  cr_assert_null(strstr(j, "gap"), "%s", j);
  free(j);
  strata_model_free(m);
  static const char *const bad[] = {
      "{\"kind\": \"cnn\", \"image\": 16, \"classes\": 3, \"conv\": [4], \"kernels\": [4]}",
      "{\"kind\": \"cnn\", \"image\": 16, \"classes\": 3, \"conv\": [4], \"strides\": [3]}",
      "{\"kind\": \"cnn\", \"image\": 16, \"classes\": 3, \"conv\": [4], \"kernels\": [3, 3]}",
      "{\"kind\": \"cnn\", \"image\": 16, \"classes\": 3, \"conv\": [4], \"gap\": 1}",
      "{\"kind\": \"mlp\", \"image\": 16, \"classes\": 3, \"hidden\": [4], \"gap\": true}",
      "{\"kind\": \"cnn\", \"image\": 8, \"classes\": 3, \"conv\": [4, 4], \"kernels\": [3, 5], "
      "\"pools\": [4, 1]}",
  };
  static const char *const says[] = {"kernels", "stride", "kernels", "gap", "gap", "kernel 5"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    m = NULL;
    cr_assert_neq(strata_model_from_json(bad[i], "bad", &m), STRATA_OK, "%s", bad[i]);
    cr_assert(strstr(strata_last_error(), says[i]), "%s: %s", bad[i], strata_last_error());
    cr_assert_null(m);
  }
}

/* Spatial slabs of cnn-hires: the rows shared out whole and in order, the halos a filter of r reaches at stride 1
** (r / 2 rows each side inside the image) and at stride 2 (k3: one row above, none below) — none on the first layer,
** whose slabs all hold the image —, the activations split: summed over the slabs, a convolution's equal the one
** device's plus the halo rows (and the first's, the image on every slab); a device's at most 0.6x of one device's
** with 2 slabs and 0.35x with 4. */
Test(model, spatial_slabs_share_rows_halos_and_activations) {
  strata_model_t m = NULL;
  OK(strata_model_from_preset("cnn-hires", &m));
  const int L = strata_model_layer_count(m);
  uint64_t one = 0;
  for (int i = 0; i < L; i++) {
    struct strata_layer_info li;
    OK(strata_model_layer(m, i, &li));
    one += li.act_bytes;
  }
  const int ns[] = {2, 3, 4};
  for (int t = 0; t < 3; t++) {
    const int n = ns[t];
    OK(strata_model_spatial_check(m, n));
    uint64_t most = 0;
    for (int r = 0; r < n; r++) {
      uint64_t mine = 0;
      for (int i = 0; i < L; i++) {
        struct strata_spatial_layer a;
        OK(strata_model_spatial_layer(m, n, r, i, &a));
        mine += a.act_bytes;
      }
      most = mine > most ? mine : most;
    }
    for (int i = 0; i < L; i++) {
      struct strata_layer_info li;
      OK(strata_model_layer(m, i, &li));
      const struct strata_model_config *c = strata_model_config(m);
      int64_t next = 0, halo = 0, sum = 0;
      for (int r = 0; r < n; r++) {
        struct strata_spatial_layer a;
        OK(strata_model_spatial_layer(m, n, r, i, &a));
        if (strcmp(li.type, "conv") == 0) {
          cr_assert_eq(a.out_first, next, "n %d slab %d layer %d starts at row %lld", n, r, i, (long long)a.out_first);
          next += a.out_rows;
          const int64_t k = c->kernel[i], st = c->stride[i];
          /* the image's edges have no halo; inside, a filter of k at stride 1 reaches k / 2 rows each way, and
          ** k3 at stride 2 reaches one row above its slab and none below (the slabs even: n divides the rows) */
          if (n != 3) {
            cr_assert_eq(a.halo_top, r == 0 || i == 0 ? 0 : st == 1 ? k / 2 : 1, "n %d slab %d layer %d top", n, r, i);
            cr_assert_eq(a.halo_bottom, r == n - 1 || i == 0 ? 0 : st == 1 ? k / 2 : 0, "n %d slab %d layer %d bottom",
                         n, r, i);
          }
        }
        halo += (int64_t)a.halo_bytes;
        sum += (int64_t)a.act_bytes;
      }
      if (strcmp(li.type, "conv") == 0) {
        struct strata_spatial_layer last;
        OK(strata_model_spatial_layer(m, n, n - 1, i, &last));
        cr_assert_eq(last.out_first + last.out_rows, next);
        const int64_t image = i == 0 ? (int64_t)(n - 1) * 4 * c->image * c->image : 0; /* the others' copies */
        cr_assert_eq(sum, (int64_t)li.act_bytes + halo + image, "n %d layer %d: slabs keep %lld bytes, one device %llu "
                     "+ halo %lld + image %lld", n, i, (long long)sum, (unsigned long long)li.act_bytes, (long long)halo,
                     (long long)image);
      } else { /* the classifier's averages and logits on every slab: the rest is shared */
        const int64_t whole = 4 * (32 + 2 * c->classes);
        cr_assert_eq(sum, (int64_t)li.act_bytes + (n - 1) * whole);
      }
    }
    const double bound = n == 2 ? 0.6 : n == 4 ? 0.35 : 0.45;
    cr_log_info("spatial %d: the most a device keeps %llu of one device's %llu bytes per image (%.3f)", n,
                (unsigned long long)most, (unsigned long long)one, (double)most / (double)one);
    cr_assert_leq((double)most, bound * (double)one, "spatial %d: %llu > %.2f x %llu", n, (unsigned long long)most,
                  bound, (unsigned long long)one);
  }
  /* refused: more slabs than the last convolution's 16 rows, none, a gpt, a cnn without gap */
  cr_assert_eq(strata_model_spatial_check(m, 17), STRATA_ERR_SHAPE);
  cr_assert(strstr(strata_last_error(), "conv.4"), "%s", strata_last_error());
  cr_assert_eq(strata_model_spatial_check(m, 0), STRATA_ERR_RANGE);
  strata_model_free(m);
  OK(strata_model_from_preset("gpt-tiny", &m));
  cr_assert_eq(strata_model_spatial_check(m, 2), STRATA_ERR_INVALID);
  cr_assert(strstr(strata_last_error(), "needs a cnn"), "%s", strata_last_error());
  strata_model_free(m);
  OK(strata_model_from_preset("cnn", &m));
  cr_assert_eq(strata_model_spatial_check(m, 2), STRATA_ERR_INVALID);
  cr_assert(strstr(strata_last_error(), "gap"), "%s", strata_last_error());
  strata_model_free(m);
  /* a 7x7 filter's 3-row halo past slabs of 2 rows (on the second layer: the first reads the whole image) */
  OK(strata_model_from_json("{\"kind\": \"cnn\", \"image\": 16, \"classes\": 3, \"conv\": [4, 4], \"kernels\": [3, 7], "
                            "\"pools\": [1, 1], \"gap\": true}", "k7", &m));
  OK(strata_model_spatial_check(m, 4));
  cr_assert_eq(strata_model_spatial_check(m, 8), STRATA_ERR_SHAPE);
  cr_assert(strstr(strata_last_error(), "3-row halo"), "%s", strata_last_error());
  strata_model_free(m);
}

/* Found by fuzz-model-json: a d_model near INT64_MAX made the default d_ff (4 d_model) overflow
** (UBSan) before the range check; now the range check speaks. */
Test(model, json_sizes_that_would_overflow_are_refused) {
  static const char *const bad[] = {
      "{\"kind\": \"gpt\", \"context\": 16, \"d_model\": 4442222222222222243}",
      "{\"kind\": \"gpt\", \"context\": 16, \"d_model\": 9223372036854775807}",
      "{\"kind\": \"gpt\", \"context\": 16, \"d_model\": -9223372036854775807}",
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    strata_model_t m = NULL;
    cr_assert_eq(strata_model_from_json(bad[i], "fuzz", &m), STRATA_ERR_INVALID, "%s: %s", bad[i],
                 strata_last_error());
    cr_assert(strstr(strata_last_error(), "d_model"), "%s", strata_last_error());
    cr_assert_null(m);
  }
}

/* ---- gradient checks ---- */

/* Compare the trainer's gradient with central differences (step h) of its
** loss on about `per_chunk` parameters spread over the whole vector. */
static void grad_check(strata_trainer_t tr, const void *in, const int32_t *tg, int64_t batch, size_t per_chunk, double h) {
  size_t n = 0;
  OK(strata_trainer_params(tr, NULL, &n));
  float *p = malloc(n * 4), *g = malloc(n * 4);
  OK(strata_trainer_params(tr, p, &n));
  float loss;
  OK(strata_trainer_loss_grad(tr, in, tg, batch, &loss, g));
  cr_assert(isfinite(loss));
  double num2 = 0, err2 = 0;
  size_t checked = 0;
  size_t stride = n / per_chunk + 1;
  for (size_t i = 3; i < n; i += stride) {
    float saved = p[i];
    double l[2];
    for (int s = 0; s < 2; s++) {
      p[i] = saved + (s ? -1 : 1) * (float)h;
      OK(strata_trainer_set_params(tr, p, n));
      float v;
      OK(strata_trainer_loss_grad(tr, in, tg, batch, &v, NULL));
      l[s] = v;
    }
    p[i] = saved;
    double num = (l[0] - l[1]) / (2 * h);
    cr_assert_leq(fabs(num - g[i]), 2e-3 + 0.1 * fabs(num), "param %zu: analytic %.6g, finite differences %.6g", i,
                  (double)g[i], num);
    num2 += num * num;
    err2 += (num - g[i]) * (num - g[i]);
    checked++;
  }
  OK(strata_trainer_set_params(tr, p, n));
  cr_assert_gt(num2, 0, "all checked gradients are zero");
  cr_assert_lt(sqrt(err2 / num2), 0.02, "relative gradient error %.4f over %zu parameters", sqrt(err2 / num2), checked);
  free(p);
  free(g);
}

Test(train, gpt_gradient_matches_finite_differences) {
  char *corpus = text_corpus(4000);
  strata_dataset_t ds;
  OK(strata_dataset_text(corpus, 0.2, &ds));
  struct strata_model_config c = {.kind = STRATA_MODEL_GPT, .vocab = 256, .context = 6, .d_model = 8, .layers = 2,
                                  .heads = 2, .d_ff = 12};
  strata_model_t m;
  OK(strata_model_from_config(&c, &m));
  struct strata_train_options o;
  strata_train_options_default(&o);
  o.batch = 2;
  o.device = tc_find_device("host", 0);
  strata_trainer_t tr;
  OK(strata_trainer_new(m, ds, &o, &tr));
  int32_t in[12], tg[12];
  uint64_t st = 3;
  OK(strata_dataset_sample(ds, STRATA_SPLIT_TRAIN, 2, 6, &st, in, tg));
  /* larger weights than GPT-2's init make the gradients easy to measure */
  size_t n = 0;
  OK(strata_trainer_params(tr, NULL, &n));
  float *p = malloc(n * 4);
  OK(strata_trainer_params(tr, p, &n));
  for (size_t i = 0; i < n; i++)
    p[i] *= 10;
  OK(strata_trainer_set_params(tr, p, n));
  free(p);
  grad_check(tr, in, tg, 2, 150, 1e-3);
  strata_trainer_free(tr);
  strata_model_free(m);
  strata_dataset_free(ds);
  free(corpus);
}

Test(train, cnn_and_mlp_gradients_match_finite_differences) {
  strata_dataset_t ds;
  OK(strata_dataset_images(40, 8, 3, 5, &ds));
  struct strata_model_config cnn = {.kind = STRATA_MODEL_CNN, .image = 8, .channels = 1, .classes = 3, .conv = {3, 4}};
  struct strata_model_config mlp = {.kind = STRATA_MODEL_MLP, .image = 8, .channels = 1, .classes = 3, .hidden = {7}};
  const struct strata_model_config *cfgs[2] = {&cnn, &mlp};
  for (int k = 0; k < 2; k++) {
    strata_model_t m;
    OK(strata_model_from_config(cfgs[k], &m));
    struct strata_train_options o;
    strata_train_options_default(&o);
    o.batch = 3;
    o.device = tc_find_device("host", 0);
    strata_trainer_t tr;
    OK(strata_trainer_new(m, ds, &o, &tr));
    float in[3 * 64];
    int32_t tg[3];
    uint64_t st = 11;
    OK(strata_dataset_sample(ds, STRATA_SPLIT_TRAIN, 3, 0, &st, in, tg));
    /* a small step: max-pooling and ReLU switch where a large one crosses a tie */
    grad_check(tr, in, tg, 3, 120, 1e-4);
    strata_trainer_free(tr);
    strata_model_free(m);
  }
  strata_dataset_free(ds);
}

/* The high-resolution CNN's layers: filters of 3, 5 and 7, a stride of 2, layers without pooling and the global
** average pool before the classifier, against finite differences of the loss. */
Test(train, strided_cnn_with_average_pool_matches_finite_differences) {
  strata_dataset_t ds;
  OK(strata_dataset_images(40, 16, 3, 7, &ds));
  struct strata_model_config c = {.kind = STRATA_MODEL_CNN, .image = 16, .channels = 1, .classes = 3,
                                  .conv = {3, 4, 3}, .kernel = {3, 5, 7}, .stride = {1, 2, 1}, .pool = {2, 1, 1},
                                  .gap = 1};
  strata_model_t m;
  OK(strata_model_from_config(&c, &m));
  cr_assert_eq(strata_model_layer_count(m), 4);
  struct strata_layer_info li;
  OK(strata_model_layer(m, 1, &li));
  cr_assert_eq(li.params, 4 * 3 * 25, "conv.1 holds 4 x 3 x 5 x 5 weights, not %llu", (unsigned long long)li.params);
  OK(strata_model_layer(m, 3, &li));
  cr_assert_eq(li.params, 3 * 3 + 3, "the classifier reads the 3 channels' averages");
  struct strata_train_options o;
  strata_train_options_default(&o);
  o.batch = 3;
  o.device = tc_find_device("host", 0);
  strata_trainer_t tr;
  OK(strata_trainer_new(m, ds, &o, &tr));
  float in[3 * 256];
  int32_t tg[3];
  uint64_t st = 5;
  OK(strata_dataset_sample(ds, STRATA_SPLIT_TRAIN, 3, 0, &st, in, tg));
  grad_check(tr, in, tg, 3, 120, 1e-4);
  strata_trainer_free(tr);
  strata_model_free(m);
  strata_dataset_free(ds);
}

/* ---- training ---- */

/* Train `steps` steps of a small GPT on `dev`; returns the last loss and fills losses[]. */
static void train_gpt(int dev, strata_dataset_t ds, int steps, float *losses, strata_trainer_t *keep) {
  struct strata_model_config c = {.kind = STRATA_MODEL_GPT, .vocab = 256, .context = 16, .d_model = 32, .layers = 2,
                                  .heads = 4, .d_ff = 64};
  static strata_model_t m; /* lives for the test process */
  if (!m)
    OK(strata_model_from_config(&c, &m));
  struct strata_train_options o;
  strata_train_options_default(&o);
  o.batch = 4;
  o.accum = 2;
  o.steps = steps;
  o.warmup = 2;
  o.lr = 3e-3f;
  o.device = dev;
  strata_trainer_t tr;
  OK(strata_trainer_new(m, ds, &o, &tr));
  for (int s = 0; s < steps; s++) {
    struct strata_step_stats st;
    OK(strata_trainer_step(tr, &st));
    cr_assert_eq(st.step, s + 1);
    cr_assert_eq(st.tokens, 4 * 2 * 16);
    losses[s] = st.loss;
  }
  if (keep)
    *keep = tr;
  else
    strata_trainer_free(tr);
}

Test(train, host_and_opencl_give_the_same_losses) {
  int o = tc_find_device("opencl", 0);
  if (o < 0)
    cr_skip_test("no OpenCL device (backend not built or no platform)");
  char *corpus = text_corpus(6000);
  strata_dataset_t ds;
  OK(strata_dataset_text(corpus, 0.2, &ds));
  float a[6], b[6];
  train_gpt(tc_find_device("host", 0), ds, 6, a, NULL);
  train_gpt(o, ds, 6, b, NULL);
  /* tolerance: fp32 GEMMs summed in different orders (OpenBLAS vs CLBlast) */
  for (int s = 0; s < 6; s++)
    cr_assert_float_eq(a[s], b[s], 2e-3 * fabsf(a[s]), "step %d: host %.6f, OpenCL %.6f", s + 1, a[s], b[s]);
  strata_dataset_free(ds);
  free(corpus);
}

Test(train, learns_below_the_unigram_entropy) {
  char *corpus = text_corpus(40000);
  strata_dataset_t ds;
  OK(strata_dataset_text(corpus, 0.1, &ds));
  struct strata_dataset_info info;
  OK(strata_dataset_info(ds, &info));
  cr_assert_gt(info.unigram_entropy, 2.0);
  float loss[150];
  strata_trainer_t tr;
  train_gpt(tc_find_device("host", 0), ds, 150, loss, &tr);
  float val;
  OK(strata_trainer_eval(tr, 4, &val));
  cr_log_info("unigram entropy %.3f nats, loss %.3f -> %.3f, validation %.3f", info.unigram_entropy, loss[0], loss[149],
              val);
  cr_assert_lt(val, info.unigram_entropy - 0.5, "validation loss %.3f is not clearly below the unigram entropy %.3f",
               val, info.unigram_entropy);
  strata_trainer_free(tr);
  strata_dataset_free(ds);
  free(corpus);
}

/* The check: on the default corpus (the machine's licence texts),
** a small GPT gets clearly below the unigram entropy in a bounded number of steps. */
Test(train, default_corpus_below_unigram_entropy) {
  strata_dataset_t ds;
  int rc = strata_dataset_text(NULL, 0.1, &ds);
  if (rc == STRATA_ERR_NOT_FOUND)
    cr_skip_test("no default corpus on this machine: %s", strata_last_error());
  OK(rc);
  struct strata_dataset_info info;
  OK(strata_dataset_info(ds, &info));
  struct strata_model_config c = {.kind = STRATA_MODEL_GPT, .vocab = 256, .context = 32, .d_model = 32, .layers = 2,
                                  .heads = 4, .d_ff = 128};
  strata_model_t m;
  OK(strata_model_from_config(&c, &m));
  struct strata_train_options o;
  strata_train_options_default(&o);
  o.batch = 8;
  o.steps = 300;
  o.warmup = 10;
  o.lr = 3e-3f;
  o.device = tc_find_device("host", 0);
  strata_trainer_t tr;
  OK(strata_trainer_new(m, ds, &o, &tr));
  for (int s = 0; s < o.steps; s++)
    OK(strata_trainer_step(tr, NULL));
  float val;
  OK(strata_trainer_eval(tr, 8, &val));
  cr_log_info("default corpus: unigram entropy %.3f nats, validation loss %.3f after %lld steps", info.unigram_entropy,
              val, (long long)o.steps);
  cr_assert_lt(val, info.unigram_entropy - 0.4, "validation loss %.3f, unigram entropy %.3f", val,
               info.unigram_entropy);
  strata_trainer_free(tr);
  strata_model_free(m);
  strata_dataset_free(ds);
}

Test(train, resume_is_exact) {
  char *corpus = text_corpus(6000);
  strata_dataset_t ds;
  OK(strata_dataset_text(corpus, 0.2, &ds));
  float l[8];
  strata_trainer_t straight, first, second;
  train_gpt(tc_find_device("host", 0), ds, 8, l, &straight);
  /* 4 steps, save, a fresh trainer loads and runs 4 more (the schedule is for 8) */
  struct strata_model_config c = {.kind = STRATA_MODEL_GPT, .vocab = 256, .context = 16, .d_model = 32, .layers = 2,
                                  .heads = 4, .d_ff = 64};
  strata_model_t m;
  OK(strata_model_from_config(&c, &m));
  struct strata_train_options o;
  strata_train_options_default(&o);
  o.batch = 4;
  o.accum = 2;
  o.steps = 8;
  o.warmup = 2;
  o.lr = 3e-3f;
  o.device = tc_find_device("host", 0);
  OK(strata_trainer_new(m, ds, &o, &first));
  for (int s = 0; s < 4; s++)
    OK(strata_trainer_step(first, NULL));
  char path[512];
  snprintf(path, sizeof path, "%s/ckpt.safetensors", tmpdir);
  OK(strata_trainer_save(first, path));
  o.seed = 99; /* the checkpoint's seed and data position win */
  OK(strata_trainer_new(m, ds, &o, &second));
  OK(strata_trainer_load(second, path));
  cr_assert_eq(strata_trainer_steps_done(second), 4);
  for (int s = 0; s < 4; s++)
    OK(strata_trainer_step(second, NULL));
  size_t n = 0;
  OK(strata_trainer_params(straight, NULL, &n));
  float *a = malloc(n * 4), *b = malloc(n * 4);
  OK(strata_trainer_params(straight, a, &n));
  OK(strata_trainer_params(second, b, &n));
  cr_assert(memcmp(a, b, n * 4) == 0, "parameters after 8 steps differ from 4 + resume + 4");

  /* a truncated checkpoint is refused and leaves the trainer as it was */
  FILE *f = fopen(path, "rb");
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fclose(f);
  cr_assert_eq(truncate(path, size / 2), 0);
  cr_assert_neq(strata_trainer_load(second, path), STRATA_OK);
  cr_assert(strstr(strata_last_error(), path), "%s", strata_last_error());
  OK(strata_trainer_params(second, a, &n));
  cr_assert(memcmp(a, b, n * 4) == 0, "a failed load changed the parameters");
  /* a checkpoint of another model is refused */
  strata_trainer_free(first);
  OK(strata_trainer_save(second, path));
  struct strata_model_config c2 = c;
  c2.d_ff = 96;
  strata_model_t m2;
  OK(strata_model_from_config(&c2, &m2));
  OK(strata_trainer_new(m2, ds, &o, &first));
  cr_assert_eq(strata_trainer_load(first, path), STRATA_ERR_SHAPE);
  cr_assert(strstr(strata_last_error(), "not this one"), "%s", strata_last_error());
  strata_trainer_free(first);
  strata_trainer_free(second);
  strata_trainer_free(straight);
  strata_model_free(m);
  strata_model_free(m2);
  strata_dataset_free(ds);
  free(a);
  free(b);
  free(corpus);
}

Test(train, a_model_too_big_for_the_device_is_a_clear_error) {
  setenv("STRATA_DEVICE_MEMORY_LIMIT", "2M", 1);
  char *corpus = text_corpus(4000);
  strata_dataset_t ds;
  OK(strata_dataset_text(corpus, 0.2, &ds));
  strata_model_t m;
  OK(strata_model_from_preset("gpt-small", &m));
  struct strata_train_options o;
  strata_train_options_default(&o);
  o.device = tc_find_device("host", 0);
  strata_trainer_t tr = NULL;
  cr_assert_eq(strata_trainer_new(m, ds, &o, &tr), STRATA_ERR_DEVICE_MEMORY);
  cr_assert_null(tr);
  cr_assert(strstr(strata_last_error(), "does not fit"), "%s", strata_last_error());
  cr_assert(strstr(strata_last_error(), "MiB for parameters"), "%s", strata_last_error());
  uint64_t used;
  OK(strata_device_memory(o.device, &used, NULL, NULL));
  cr_assert_eq(used, 0, "a failed trainer left %llu bytes allocated", (unsigned long long)used);
  strata_model_free(m);
  strata_dataset_free(ds);
  free(corpus);
}

/*
** One trainer's life on host device 0 under STRATA_DEVICE_MEMORY_LIMIT=cap
** ("" for none), in a child process (the cap is read once per process):
** create, one step, one evaluation. Returns the child's exit status: 0 all
** done, 1 refused at creation, 2 failed at the step or evaluation. *peak
** receives the device's peak bytes (may be NULL).
*/
static int capped_life(const char *corpus, const char *cap, uint64_t *peak) {
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    if (*cap)
      setenv("STRATA_DEVICE_MEMORY_LIMIT", cap, 1);
    else
      unsetenv("STRATA_DEVICE_MEMORY_LIMIT");
    strata_dataset_t ds = NULL;
    strata_model_t m = NULL;
    strata_trainer_t tr = NULL;
    struct strata_train_options o;
    strata_train_options_default(&o);
    o.batch = 4;
    o.device = tc_find_device("host", 0);
    int status = 3;
    float loss;
    if (strata_dataset_text(corpus, 0.2, &ds) || strata_model_from_preset("gpt-micro", &m))
      status = 3;
    else if (strata_trainer_new(m, ds, &o, &tr))
      status = strata_last_error()[0] && strstr(strata_last_error(), "a step needs") ? 1 : 4;
    else
      status = strata_trainer_step(tr, NULL) || strata_trainer_eval(tr, 2, &loss) ? 2 : 0;
    uint64_t pk = 0;
    strata_device_memory(o.device, NULL, &pk, NULL);
    if (write(fds[1], &pk, sizeof pk) != (ssize_t)sizeof pk)
      status = 5;
    _exit(status);
  }
  close(fds[1]);
  uint64_t pk = 0;
  cr_assert_eq(read(fds[0], &pk, sizeof pk), (ssize_t)sizeof pk);
  close(fds[0]);
  int ws = 0;
  cr_assert_eq(waitpid(pid, &ws, 0), pid);
  cr_assert(WIFEXITED(ws));
  if (peak)
    *peak = pk;
  return WEXITSTATUS(ws);
}

/* Class 7 (memory planning): a cap one byte below what a step needs is refused when the trainer is created, with
** "needs X, has Y"; at exactly the need, creation, a step and an evaluation all fit. */
Test(train, memory_plan_refuses_at_creation_a_cap_one_byte_short) {
  char *corpus = text_corpus(20000);
  uint64_t peak = 0;
  cr_assert_eq(capped_life(corpus, "", &peak), 0, "the uncapped run must train");
  cr_assert_gt(peak, 0);
  char cap[32];
  snprintf(cap, sizeof cap, "%llu", (unsigned long long)peak);
  cr_assert_eq(capped_life(corpus, cap, NULL), 0, "a cap of exactly the peak (%s bytes) must be enough", cap);
  snprintf(cap, sizeof cap, "%llu", (unsigned long long)peak - 1);
  setenv("STRATA_DEVICE_MEMORY_LIMIT", cap, 1);
  strata_dataset_t ds;
  OK(strata_dataset_text(corpus, 0.2, &ds));
  strata_model_t m;
  OK(strata_model_from_preset("gpt-micro", &m));
  struct strata_train_options o;
  strata_train_options_default(&o);
  o.batch = 4;
  o.device = tc_find_device("host", 0);
  strata_trainer_t tr = NULL;
  cr_assert_eq(strata_trainer_new(m, ds, &o, &tr), STRATA_ERR_DEVICE_MEMORY,
               "a cap one byte below the step's peak must be refused at creation, not at step 1");
  const char *e = strata_last_error();
  cr_assert(strstr(e, "does not fit on device") && strstr(e, "a step needs") && strstr(e, "MiB free") &&
                strstr(e, "MiB for parameters") && strstr(e, "activations"),
            "%s", e);
  uint64_t used = 1;
  OK(strata_device_memory(o.device, &used, NULL, NULL));
  cr_assert_eq(used, 0, "the refused trainer left %llu bytes allocated", (unsigned long long)used);
  strata_model_free(m);
  strata_dataset_free(ds);
  free(corpus);
}

static int stop_after_calls(void *arg) {
  int *left = arg;
  return (*left)-- <= 0;
}

/* Class 4 (work lost at the end): a Ctrl-C must stop even a long evaluation promptly; the stop hook is polled
** before every batch and the trainer is unchanged afterwards. */
Test(train, work_lost_an_evaluation_stops_between_batches_on_request) {
  char *corpus = text_corpus(20000);
  strata_dataset_t ds;
  OK(strata_dataset_text(corpus, 0.2, &ds));
  strata_model_t m;
  OK(strata_model_from_preset("gpt-micro", &m));
  struct strata_train_options o;
  strata_train_options_default(&o);
  o.batch = 2;
  o.device = tc_find_device("host", 0);
  strata_trainer_t tr;
  OK(strata_trainer_new(m, ds, &o, &tr));
  float before = 0, after = 0, loss = -1;
  OK(strata_trainer_eval(tr, 3, &before));
  int left = 2;
  strata_trainer_set_stop(tr, stop_after_calls, &left);
  cr_assert_eq(strata_trainer_eval(tr, 1000000, &loss), STRATA_ERR_INTERRUPTED);
  cr_assert_eq(loss, -1, "an interrupted evaluation must not report a loss");
  cr_assert(strstr(strata_last_error(), "after 2 of 1000000 batches"), "%s", strata_last_error());
  strata_trainer_set_stop(tr, NULL, NULL);
  OK(strata_trainer_eval(tr, 3, &after));
  cr_assert_eq(before, after, "the interrupted evaluation changed the trainer");
  strata_trainer_free(tr);
  strata_model_free(m);
  strata_dataset_free(ds);
  free(corpus);
}

Test(train, model_and_data_must_agree) {
  strata_dataset_t img;
  OK(strata_dataset_images(20, 8, 3, 1, &img));
  strata_model_t m;
  OK(strata_model_from_preset("gpt-micro", &m));
  struct strata_train_options o;
  strata_train_options_default(&o);
  strata_trainer_t tr = NULL;
  cr_assert_eq(strata_trainer_new(m, img, &o, &tr), STRATA_ERR_INVALID);
  o.batch = 0;
  cr_assert_eq(strata_trainer_new(m, img, &o, &tr), STRATA_ERR_INVALID);
  cr_assert_null(tr);
  strata_model_free(m);
  strata_dataset_free(img);
}
