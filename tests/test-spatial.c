/* SPDX-License-Identifier: MIT */
/* test-spatial.c — spatial parallelism (issue 34): a cnn's images cut by rows into slabs on host virtual devices (and
** PoCL) train as one device does — losses, gradient norms and final parameters —, its activations divide by the
** slabs, a device fault in a halo exchange stops every member, and what it does not run yet is refused. */
#include "spatial.h"

#include <time.h>

#define STEPS 6

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static strata_dataset_t small_ds, hires_ds;

static void setup(void) {
  tc_spatial_data(200, "8", "host,opencl", &small_ds, &hires_ds);
}

static void teardown(void) {
  strata_dataset_free(small_ds);
  strata_dataset_free(hires_ds);
}

TestSuite(spatial, .init = setup, .fini = teardown, .timeout = 300);

static struct strata_train_options options(int accum, int batch) {
  struct strata_train_options o;
  strata_train_options_default(&o);
  o.batch = batch;
  o.accum = accum;
  o.steps = STEPS;
  o.warmup = 1;
  o.lr = 3e-3f;
  o.eps = 1e-6f; /* as test-parallel: keeps AdamW from amplifying last-bit gradient differences near eps */
  o.device = tc_find_device("host", 0);
  return o;
}

struct run {
  float loss[STEPS], norm[STEPS];
  float *params;
  size_t n;
  uint64_t act;                     /* the most activation bytes a device reports */
};

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
  struct strata_train_report rep;
  OK(strata_trainer_report(tr, &rep));
  r->act = 0;
  for (int d = 0; d < rep.devices; d++)
    r->act = rep.dev[d].activation_bytes > r->act ? rep.dev[d].activation_bytes : r->act;
}

static void single(strata_model_t m, strata_dataset_t ds, int accum, int batch, struct run *r) {
  struct strata_train_options o = options(accum, batch);
  strata_trainer_t tr;
  OK(strata_trainer_new(m, ds, &o, &tr));
  run_steps(tr, r);
  strata_trainer_free(tr);
}

/* `n` slabs on each of `dp` replicas over devs[], `m` micro-batches each. */
static void slabs(strata_model_t m, strata_dataset_t ds, int n, int dp, int mbs, int batch, const int *devs,
                  struct run *r) {
  char text[512];
  int at = snprintf(text, sizeof text, "{\"dp\": %d, \"tp\": %d, \"microbatches\": %d, \"devices\": [", dp, n, mbs);
  for (int i = 0; i < n * dp; i++)
    at += snprintf(text + at, sizeof text - (size_t)at, "%s%d", i ? ", " : "", devs[i]);
  snprintf(text + at, sizeof text - (size_t)at, "]}");
  strata_layout_t l;
  OK(strata_layout_from_json(text, "spatial layout", &l));
  struct strata_train_options o = options(1, batch);
  o.spatial = n;
  strata_trainer_t tr;
  OK(strata_trainer_new_layout(m, ds, &o, l, NULL, &tr));
  run_steps(tr, r);
  strata_trainer_free(tr);
  strata_layout_free(l);
}

/*
** The slabs against one device. Not bit for bit: the sums run in other orders — a convolution's weight gradient is
** each slab's GEMM over its own pixels, then summed over the slabs; a halo row's input gradient is its own slab's
** col2im sum plus the neighbour's; an average is the slabs' partial sums added; float32 rounds each order apart, by
** a few units in the last place (1e-7 relative) per sum, which six AdamW steps leave far under 1e-4 (measured: about
** 1e-7 on the losses, at most 5e-5 of a parameter's size). The slabs' halo rows and averages themselves move exactly
** (each slab's exchange buffer is zero but for its own rows: the all-reduce adds zeros).
*/
static void compare(const char *what, const struct run *got, const struct run *ref) {
  for (int s = 0; s < STEPS; s++) {
    cr_assert_float_eq(got->loss[s], ref->loss[s], 1e-4 * fabsf(ref->loss[s]), "%s: step %d loss %.9g, one device %.9g",
                       what, s + 1, got->loss[s], ref->loss[s]);
    cr_assert_float_eq(got->norm[s], ref->norm[s], 1e-4 * fabsf(ref->norm[s]), "%s: step %d norm %.9g, one device %.9g",
                       what, s + 1, got->norm[s], ref->norm[s]);
  }
  cr_assert_eq(got->n, ref->n);
  double worst = 0;
  for (size_t i = 0; i < got->n; i++) {
    double d = fabs((double)got->params[i] - ref->params[i]) / (fabs(ref->params[i]) > 1e-2 ? fabs(ref->params[i]) : 1e-2);
    worst = d > worst ? d : worst;
  }
  cr_log_info("%s: worst parameter difference %.3g (relative, floored at 1e-2)", what, worst);
  cr_assert_lt(worst, 2e-4, "%s: a parameter differs by %.3g of its size", what, worst);
}

static void host_devices(int *h, int n) {
  for (int i = 0; i < n; i++)
    h[i] = tc_find_device("host", i);
  cr_assert_geq(h[n - 1], 0, "needs %d host virtual devices", n);
}

/* 2 slabs, 3 (uneven: 5, 5 and 6 rows of the first map), 2 slabs x dp 2, against one device. */
Test(spatial, slabs_of_a_strided_cnn_train_as_one_device) {
  strata_model_t m = tc_slab_cnn();
  int h[4];
  host_devices(h, 4);
  struct run ref, got;
  single(m, small_ds, 2, 3, &ref);
  slabs(m, small_ds, 2, 1, 2, 3, h, &got);
  compare("spatial 2", &got, &ref);
  free(got.params);
  slabs(m, small_ds, 3, 1, 2, 3, h, &got);
  compare("spatial 3 (uneven slabs)", &got, &ref);
  free(got.params);
  slabs(m, small_ds, 2, 2, 1, 3, h, &got);
  compare("spatial 2 x dp 2", &got, &ref);
  free(got.params);
  free(ref.params);
  strata_model_free(m);
}

/* A pipeline of slab groups through a layout: pp ranks of n slabs each (slab k of a stage sends its rows to slab k of
** the next), m micro-batches, `schedule`. */
static void slab_pipeline(strata_model_t m, strata_dataset_t ds, int n, int pp, const char *split, const char *schedule,
                          int mbs, int batch, const int *devs, struct run *r) {
  char text[512];
  int at = snprintf(text, sizeof text, "{\"pp\": %d, \"spatial\": %d, \"split\": %s, \"schedule\": \"%s\", "
                    "\"microbatches\": %d, \"devices\": [", pp, n, split, schedule, mbs);
  for (int i = 0; i < n * pp; i++)
    at += snprintf(text + at, sizeof text - (size_t)at, "%s%d", i ? ", " : "", devs[i]);
  snprintf(text + at, sizeof text - (size_t)at, "]}");
  strata_layout_t l;
  OK(strata_layout_from_json(text, "spatial pipeline", &l));
  struct strata_train_options o = options(1, batch);
  strata_trainer_t tr;
  OK(strata_trainer_new_layout(m, ds, &o, l, NULL, &tr));
  run_steps(tr, r);
  strata_trainer_free(tr);
  strata_layout_free(l);
}

/*
** With pp: each stage a slab group (issue 34, item 3). 2 stages of 2 slabs on 4 devices, the second starting with a
** 7 x 7 convolution (its halo from the neighbouring slab of its own stage) and ending with the average pool, under 1F1B
** and GPipe; cnn-hires cut after conv.2: one device's losses, norms and parameters as above.
*/
Test(spatial, slab_groups_as_pipeline_stages) {
  strata_model_t m = tc_slab_cnn(), hires;
  OK(strata_model_from_preset("cnn-hires", &hires));
  int h[4];
  host_devices(h, 4);
  struct run ref, got;
  single(m, small_ds, 2, 3, &ref);
  slab_pipeline(m, small_ds, 2, 2, "[2, 2]", "1f1b", 2, 3, h, &got);
  compare("spatial 2 x pp 2 (1f1b)", &got, &ref);
  free(got.params);
  slab_pipeline(m, small_ds, 2, 2, "[3, 1]", "gpipe", 2, 3, h, &got);
  compare("spatial 2 x pp 2 (gpipe, the classifier alone)", &got, &ref);
  free(got.params);
  free(ref.params);
  single(hires, hires_ds, 2, 1, &ref);
  slab_pipeline(hires, hires_ds, 2, 2, "[3, 3]", "1f1b", 2, 1, h, &got);
  compare("cnn-hires spatial 2 x pp 2", &got, &ref);
  free(got.params);
  free(ref.params);
  strata_model_free(hires);
  strata_model_free(m);
}

/* cnn-hires (512 x 512) with 2 and 4 slabs: the losses, and the activations a device reports at most 0.6x and 0.35x
** of one device's (the slabs keep their rows, the rows they convolve — their own and the halo —, and the averages). */
Test(spatial, cnn_hires_with_2_and_4_slabs) {
  strata_model_t m;
  OK(strata_model_from_preset("cnn-hires", &m));
  int h[4];
  host_devices(h, 4);
  struct run ref, got;
  single(m, hires_ds, 2, 1, &ref);
  const int ns[] = {2, 4};
  for (int k = 0; k < 2; k++) {
    slabs(m, hires_ds, ns[k], 1, 2, 1, h, &got);
    char what[32];
    snprintf(what, sizeof what, "cnn-hires spatial %d", ns[k]);
    compare(what, &got, &ref);
    const double bound = ns[k] == 2 ? 0.6 : 0.35;
    cr_log_info("%s: %llu activation bytes on a device, one device %llu (%.3f)", what, (unsigned long long)got.act,
                (unsigned long long)ref.act, (double)got.act / (double)ref.act);
    cr_assert_leq((double)got.act, bound * (double)ref.act, "%s: %llu activation bytes > %.2f x %llu", what,
                  (unsigned long long)got.act, bound, (unsigned long long)ref.act);
    free(got.params);
  }
  free(ref.params);
  strata_model_free(m);
}

/* A PoCL device and a host device as the two slabs. */
Test(spatial, pocl_and_host_slabs) {
  int p0 = tc_find_device("opencl", 0), h0 = tc_find_device("host", 0);
  if (p0 < 0)
    cr_skip_test("no OpenCL device");
  strata_model_t m = tc_slab_cnn();
  struct run ref, got;
  single(m, small_ds, 2, 3, &ref);
  const int devs[2] = {p0, h0};
  slabs(m, small_ds, 2, 1, 2, 3, devs, &got);
  compare("spatial 2 over PoCL and host", &got, &ref);
  free(got.params);
  free(ref.params);
  strata_model_free(m);
}

/* A fault on one slab's device in a step (its ops between the halo exchanges and joins its peer waits in): the step
** fails naming the device, within seconds, the other slab not left waiting; the next step trains. */
Test(spatial, a_fault_on_one_slab_stops_every_slab) {
  strata_model_t m = tc_slab_cnn();
  const char *specs[] = {"device=1,op=30", "device=0,op=150"};
  for (int k = 0; k < 2; k++) {
    strata_shutdown();
    setenv("STRATA_HOST_FAULT", specs[k], 1);
    int h[2];
    host_devices(h, 2);
    char text[200];
    snprintf(text, sizeof text, "{\"tp\": 2, \"microbatches\": 2, \"devices\": [%d, %d]}", h[0], h[1]);
    strata_layout_t l;
    OK(strata_layout_from_json(text, specs[k], &l));
    struct strata_train_options o = options(1, 3);
    o.spatial = 2;
    strata_trainer_t tr;
    OK(strata_trainer_new_layout(m, small_ds, &o, l, NULL, &tr));
    double t0 = now_s();
    int rc = STRATA_OK;
    for (int s = 0; s < 4 && rc == STRATA_OK; s++)
      rc = strata_trainer_step(tr, NULL);
    cr_assert_neq(rc, STRATA_OK, "%s: no step failed", specs[k]);
    cr_assert(strstr(strata_last_error(), "injected fault"), "%s: %s", specs[k], strata_last_error());
    cr_assert(strstr(strata_last_error(), "host virtual device"), "%s names the device: %s", specs[k],
              strata_last_error());
    cr_assert_lt(now_s() - t0, 30.0, "%s: failing took %.1f s", specs[k], now_s() - t0);
    struct strata_step_stats st;
    OK(strata_trainer_step(tr, &st));
    cr_assert(isfinite(st.loss));
    strata_trainer_free(tr);
    strata_layout_free(l);
    unsetenv("STRATA_HOST_FAULT");
    strata_shutdown();
  }
  strata_model_free(m);
}

/* Refused: a one-device trainer asked for slabs, a layout whose slices are not the slabs (on any rank), ZeRO, bf16. */
Test(spatial, refused) {
  strata_model_t m = tc_slab_cnn();
  int h[4];
  host_devices(h, 4);
  struct strata_train_options o = options(1, 3);
  o.spatial = 2;
  strata_trainer_t tr = NULL;
  cr_assert_eq(strata_trainer_new(m, small_ds, &o, &tr), STRATA_ERR_INVALID);
  cr_assert(strstr(strata_last_error(), "spatial 2"), "%s", strata_last_error());
  static const char *const bad[] = {"{\"tp\": 3, \"devices\": [%d, %d, %d]}", "{\"pp\": 2, \"tp\": [2, 1], \"devices\": [%d, %d, %d]}",
                                    "{\"dp\": 2, \"tp\": 2, \"zero\": 1, \"devices\": [%d, %d, %d, %d]}",
                                    "{\"tp\": 2, \"precision\": \"bf16\", \"devices\": [%d, %d]}",
                                    "{\"pp\": 2, \"tp\": 2, \"schedule\": \"zb\", \"devices\": [%d, %d, %d, %d]}"};
  static const char *const says[] = {"must be its 2 slabs", "tp 1 on rank 1", "ZeRO", "bf16",
                                     "not with a split backward (zb"};
  for (int k = 0; k < 5; k++) {
    char text[200];
    snprintf(text, sizeof text, bad[k], h[0], h[1], h[2], h[3]);
    strata_layout_t l;
    OK(strata_layout_from_json(text, "bad", &l));
    tr = NULL;
    cr_assert_neq(strata_trainer_new_layout(m, small_ds, &o, l, NULL, &tr), STRATA_OK, "%s", text);
    cr_assert(strstr(strata_last_error(), says[k]), "%s: %s", text, strata_last_error());
    cr_assert_null(tr);
    strata_layout_free(l);
  }
  strata_model_free(m);
}

/* The gradient pass (strata_trainer_loss_grad: one micro-batch forward and back, nothing updated) of 2 slabs: one
** device's loss and gradient (each layer's summed over the slabs, the classifier's once), within float32's
** reordering; and a checkpoint of the slabs, taken mid-run, continues on one device as one device would. */
Test(spatial, gradient_pass_and_checkpoint) {
  strata_model_t m = tc_slab_cnn();
  int h[2];
  host_devices(h, 2);
  struct strata_train_options o = options(1, 3);
  strata_trainer_t one, two;
  OK(strata_trainer_new(m, small_ds, &o, &one));
  char text[200];
  snprintf(text, sizeof text, "{\"tp\": 2, \"microbatches\": 1, \"devices\": [%d, %d]}", h[0], h[1]);
  strata_layout_t l;
  OK(strata_layout_from_json(text, "spatial 2", &l));
  o.spatial = 2;
  OK(strata_trainer_new_layout(m, small_ds, &o, l, NULL, &two));
  float in[3 * 32 * 32];
  int32_t tg[3];
  uint64_t st = 17;
  OK(strata_dataset_sample(small_ds, STRATA_SPLIT_TRAIN, 3, 0, &st, in, tg));
  size_t n = 0, n2 = 0;
  OK(strata_trainer_params(one, NULL, &n));
  OK(strata_trainer_params(two, NULL, &n2));
  cr_assert_eq(n, n2);
  float *g1 = malloc(n * 4), *g2 = malloc(n * 4), l1, l2;
  OK(strata_trainer_loss_grad(one, in, tg, 3, &l1, g1));
  OK(strata_trainer_loss_grad(two, in, tg, 3, &l2, g2));
  cr_assert_float_eq(l1, l2, 1e-6 * fabsf(l1), "loss: one device %.9g, 2 slabs %.9g", l1, l2);
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    num += ((double)g1[i] - g2[i]) * ((double)g1[i] - g2[i]);
    den += (double)g1[i] * g1[i];
  }
  cr_assert_gt(den, 0);
  cr_assert_lt(sqrt(num / den), 1e-5, "gradient: relative difference %.3g", sqrt(num / den));
  /* two steps of the slabs, saved; a third on one device from that checkpoint, against the slabs' own third */
  char path[256];
  snprintf(path, sizeof path, "%s/strata-spatial-%d.st", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
  struct strata_step_stats s2, s1;
  OK(strata_trainer_step(two, &s2));
  OK(strata_trainer_step(two, &s2));
  OK(strata_trainer_save(two, path));
  OK(strata_trainer_load(one, path));
  OK(strata_trainer_step(two, &s2));
  OK(strata_trainer_step(one, &s1));
  cr_assert_float_eq(s1.loss, s2.loss, 1e-4 * fabsf(s2.loss), "step 3 from the slabs' checkpoint: one device %.9g, "
                     "the slabs %.9g", s1.loss, s2.loss);
  unlink(path);
  free(g1);
  free(g2);
  strata_trainer_free(one);
  strata_trainer_free(two);
  strata_layout_free(l);
  strata_model_free(m);
}

/* "spatial": N in strata-layout/1: read (tp left out is N), written back only when set, refused with another tp (on
** any rank); a layout that says it trains the slabs without the option, as the option does; the memory plan costs it. */
Test(spatial, the_layout_field) {
  strata_layout_t l = NULL, back = NULL;
  OK(strata_layout_from_json("{\"dp\": 2, \"spatial\": 2, \"microbatches\": 2}", "spatial layout", &l));
  cr_assert_eq(strata_layout_spatial(l), 2);
  cr_assert_eq(strata_layout_tp(l, 0), 2);
  cr_assert_eq(strata_layout_device_count(l), 4);
  char *j = NULL, *j2 = NULL;
  OK(strata_layout_to_json(l, &j));
  cr_assert(strstr(j, "\"spatial\":2"), "%s", j);
  OK(strata_layout_from_json(j, "round trip", &back));
  OK(strata_layout_to_json(back, &j2));
  cr_assert_str_eq(j, j2);
  free(j);
  free(j2);
  strata_layout_free(back);
  OK(strata_layout_from_json("{\"dp\": 2, \"tp\": 2}", "tp layout", &back));
  cr_assert_eq(strata_layout_spatial(back), 1);
  OK(strata_layout_to_json(back, &j));
  cr_assert_null(strstr(j, "spatial"), "%s", j);
  free(j);
  strata_layout_free(back);
  static const char *const bad[] = {"{\"pp\": 2, \"tp\": [2, 1], \"spatial\": 2}", "{\"tp\": 3, \"spatial\": 2}",
                                    "{\"spatial\": 0}"};
  for (int k = 0; k < 3; k++) {
    back = NULL;
    cr_assert_neq(strata_layout_from_json(bad[k], "bad", &back), STRATA_OK, "%s", bad[k]);
    cr_assert(strstr(strata_last_error(), "spatial"), "%s: %s", bad[k], strata_last_error());
    cr_assert_null(back);
  }
  strata_model_t m = tc_slab_cnn();
  uint64_t bytes = 0;
  OK(strata_layout_from_json("{\"dp\": 2, \"spatial\": 2, \"split\": [4]}", "split", &back));
  OK(strata_plan_memory(m, back, 12, 0, &bytes)); /* (the busiest slab's: test-spatial-plan.c sets it against the
                                                   ** trainer's plan) */
  cr_assert_gt(bytes, 0);
  strata_layout_free(back);
  /* trained through the layout (host devices 0..3) against the option's run */
  int h[4];
  host_devices(h, 4);
  char text[200];
  snprintf(text, sizeof text, "{\"dp\": 2, \"spatial\": 2, \"microbatches\": 1, \"devices\": [%d, %d, %d, %d]}", h[0],
           h[1], h[2], h[3]);
  strata_layout_free(l);
  OK(strata_layout_from_json(text, "spatial layout", &l));
  struct strata_train_options o = options(1, 3);
  strata_trainer_t tr;
  OK(strata_trainer_new_layout(m, small_ds, &o, l, NULL, &tr));
  struct run got, ref;
  run_steps(tr, &got);
  strata_trainer_free(tr);
  slabs(m, small_ds, 2, 2, 1, 3, h, &ref);
  for (int s = 0; s < STEPS; s++)
    cr_assert_eq(got.loss[s], ref.loss[s], "step %d: the layout's %.9g, the option's %.9g", s + 1, got.loss[s],
                 ref.loss[s]);
  o.spatial = 3; /* the options and the layout disagree */
  tr = NULL;
  cr_assert_eq(strata_trainer_new_layout(m, small_ds, &o, l, NULL, &tr), STRATA_ERR_INVALID);
  cr_assert(strstr(strata_last_error(), "spatial 3 in the options, 2 in the layout"), "%s", strata_last_error());
  free(got.params);
  free(ref.params);
  strata_layout_free(l);
  strata_model_free(m);
}
