/* SPDX-License-Identifier: MIT */
/* calibrate-probes.c — the stage and pipeline probes: a block, then a pipeline, run as the runtime runs them, against the simulator. */
#include "config.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>

#include <strata/model.h>
#include <strata/train.h>

#include "plan/plan.h"
#include "train/trainer.h"
#include "core/core.h"

/*
** The stage probe: what a stage's compute costs as the runtime runs it,
** against the same ops timed one by one. The ops above are each timed in a
** loop on buffers they keep hot; a stage runs dozens of different ones in
** turn, each on its own buffers, through the queue the executor waits on
** (here a stage's forward and backward took 10-25% longer than the sum of
** its ops' figures, on host and PoCL devices alike). The probe is a
** one-block copy of the GPT (its embedding, one block, its head), so that
** it fits wherever a block of the model does: its loss and gradient for
** `rows` samples on each device (lib/model/layers.c's own code, as a one-device
** trainer runs it), PROBE_ROUNDS rounds of about PROBE_S seconds each,
** device by device within a round like the figures above; the median call.
*/
#define PROBE_S 0.1
#define PROBE_ROUNDS 3
#define PROBE_CALLS 4096

struct stage_probe {
  strata_trainer_t tr;
  double *call;
  int ncall;
};

int strata__plan_probe_model(strata_model_t model, strata_model_t *out) {
  struct strata_model_config pc = *strata_model_config(model);
  pc.layers = 1;
  int rc = strata_model_from_config(&pc, out);
  return rc ? strata__error_prefix(rc, "calibration: the stage probe's one-block model: ") : STRATA_OK;
}

/* The probes' tokens: `tokens` inputs and targets of a fixed pattern over the model's vocabulary. */
static int probe_tokens(strata_model_t pm, size_t tokens, int32_t **in, int32_t **tg) {
  const size_t vocab = (size_t)strata_model_config(pm)->vocab;
  *in = malloc(tokens * sizeof **in);
  *tg = malloc(tokens * sizeof **tg);
  if (!*in || !*tg)
    return strata__error(STRATA_ERR_NOMEM, "calibration: out of host memory");
  for (size_t i = 0; i < tokens; i++) {
    (*in)[i] = (int32_t)((i * 7 + 3) % vocab);
    (*tg)[i] = (int32_t)((i * 7 + 10) % vocab);
  }
  return STRATA_OK;
}

int strata__plan_probe_stages(const int *dev, int n, strata_model_t pm, int64_t rows, double *sec) {
  int32_t *in = NULL, *tg = NULL;
  int rc = probe_tokens(pm, (size_t)rows * (size_t)strata_model_config(pm)->context, &in, &tg);
  struct stage_probe *p = calloc((size_t)n, sizeof *p);
  if (!rc && !p)
    rc = strata__error(STRATA_ERR_NOMEM, "calibration: out of host memory");
  for (int i = 0; i < n && !rc; i++) {
    struct strata_train_options o;
    strata_train_options_default(&o);
    o.device = dev[i];
    o.batch = rows;
    o.steps = 1;
    p[i].call = malloc(PROBE_CALLS * sizeof *p[i].call);
    if (!p[i].call) {
      rc = strata__error(STRATA_ERR_NOMEM, "calibration: out of host memory");
      break;
    }
    rc = strata_trainer_new(pm, NULL, &o, &p[i].tr);
    if (!rc) /* the first call allocates and compiles: not counted */
      rc = strata__trainer_forward_backward(p[i].tr, in, tg);
    if (rc)
      rc = strata__error_prefix(rc, "calibration: device %d: the stage probe (one block of the model, %lld samples): ",
                                dev[i], (long long)rows);
  }
  for (int r = 0; r < PROBE_ROUNDS && !rc; r++)
    for (int i = 0; i < n && !rc; i++) {
      const double end = strata__now() + PROBE_S;
      do {
        const double t0 = strata__now();
        rc = strata__trainer_forward_backward(p[i].tr, in, tg);
        if (rc) {
          rc = strata__error_prefix(rc, "calibration: device %d: the stage probe: ", dev[i]);
          break;
        }
        p[i].call[p[i].ncall++] = strata__now() - t0;
      } while (strata__now() < end && p[i].ncall < PROBE_CALLS);
    }
  for (int i = 0; i < n && !rc; i++)
    sec[i] = strata__plan_median(p[i].call, p[i].ncall);
  for (int i = 0; p && i < n; i++) {
    strata_trainer_free(p[i].tr);
    free(p[i].call);
  }
  free(p);
  free(in);
  free(tg);
  return rc;
}

int strata__plan_stage_factors(json_t *root, const char *text, strata_model_t pm, int64_t rows, const double *sec) {
  strata_machine_t c = NULL;
  int rc = strata_machine_from_calibration(text, "calibration", NULL, &c);
  json_t *devs = json_object_get(root, "devices");
  for (size_t i = 0; !rc && i < json_array_size(devs); i++) {
    const double ops = strata__plan_ops_time(&c->cost[i], pm, rows);
    const double f = sec[i] / ops;
    if (!(ops > 0) || !(sec[i] > 0))
      rc = strata__error(STRATA_ERR_INTERNAL, "calibration: the stage probe measured %g s against %g s of ops",
                         sec[i], ops);
    else if (!(f >= 0.1 && f <= 10)) /* what read_stage_factor takes: refused here, not in the file's next reader */
      rc = strata__error(STRATA_ERR_UNSTEADY, "calibration: device %zu: the stage probe took %g s, %.3g times what the "
                         "figures just measured cost its ops at (%g s; from 0.1 to 10 is believable): the device's "
                         "speed moved while it was calibrated; calibrate again on a quieter machine", i, sec[i], f, ops);
    else
      json_object_set_new(json_array_get(devs, i), "stage_probe",
                          json_pack("{s:I, s:I, s:f, s:f, s:f}", "blocks", (json_int_t)1, "rows", (json_int_t)rows,
                                    "seconds", sec[i], "ops_seconds", ops, "stage_factor", f));
  }
  strata_machine_free(c);
  return rc;
}

/*
** The pipeline probe: what the executor adds to each action when the
** devices hand work to each other. The stage probe times a stage alone; in a
** pipeline each action also waits on another device's message, and its
** threads (the worker, the sender, the queues') are woken at every hand-off
** while the other devices compute — on a host whose cores the devices share
** that costs far more than a queue's round trip (here 0.3-0.5 ms an action
** in a trace of host pp 2, against 0.01-0.06 ms). The probe runs the model
** with one block per calibrated device as a real 1F1B pipeline over them
** all (2 micro-batches per device), PIPE_S seconds of steps after two
** warm-up steps, and takes the median step; then the overhead per action
** that makes the simulator's step of the same layout, on the figures just
** measured, equal to it (0 when the simulator is already as slow): each
** forward and backward of a pipelined layout pays it.
*/
#define PIPE_S 1.0
#define PIPE_MIN_STEPS 5
#define PIPE_MAX_STEPS 256

/* The probe's layout over devices dev[0..n) (runtime ids, or the calibration's indices for the simulator). */
static int pipe_layout(const int *dev, int n, int *split, strata_layout_t *out) {
  for (int i = 0; i < n; i++)
    split[i] = i == 0 || i == n - 1 ? 2 : 1; /* the embedding and the head beside the first and last blocks */
  const struct strata_layout_desc d = {.dp = 1, .pp = n, .tp_all = 1, .devices = dev, .ndevices = n, .split = split,
                                       .nsplit = n, .schedule = STRATA_SCHEDULE_1F1B, .microbatches = 2 * n};
  return strata_layout_new(&d, out);
}

int strata__plan_pipe_measure(const int *dev, int n, strata_model_t pm, int64_t rows, double *seconds) {
  const size_t tokens = (size_t)rows * (size_t)strata_model_config(pm)->context;
  int32_t *in = NULL, *tg = NULL;
  int rc = probe_tokens(pm, tokens, &in, &tg);
  double *step = malloc(PIPE_MAX_STEPS * sizeof *step);
  int *split = malloc((size_t)n * sizeof *split);
  strata_layout_t l = NULL;
  strata_trainer_t tr = NULL;
  if (!rc && (!step || !split))
    rc = strata__error(STRATA_ERR_NOMEM, "calibration: out of host memory");
  if (!rc)
    rc = pipe_layout(dev, n, split, &l);
  if (!rc) {
    struct strata_train_options o;
    strata_train_options_default(&o);
    o.batch = rows;
    o.steps = 1000000; /* the rate stays up: no update is skipped */
    rc = strata_trainer_new_layout(pm, NULL, &o, l, NULL, &tr);
  }
  int ns = 0;
  for (int k = 0; !rc && k < 2; k++) /* the first steps allocate and compile: not counted */
    rc = strata__trainer_step_fixed(tr, in, tokens, tg, tokens);
  const double end = strata__now() + PIPE_S;
  while (!rc && ns < PIPE_MAX_STEPS && (ns < PIPE_MIN_STEPS || strata__now() < end)) {
    const double t0 = strata__now();
    rc = strata__trainer_step_fixed(tr, in, tokens, tg, tokens);
    step[ns++] = strata__now() - t0;
  }
  if (rc)
    rc = strata__error_prefix(rc, "calibration: the pipeline probe (%d blocks over %d devices, %lld samples a "
                              "micro-batch): ", n, n, (long long)rows);
  else
    *seconds = strata__plan_median(step, ns);
  strata_trainer_free(tr);
  strata_layout_free(l);
  free(split);
  free(step);
  free(in);
  free(tg);
  return rc;
}

/* The simulator's step of the probe's layout `l` (batch samples a step) with every device paying `us` per action. */
static int pipe_simulate(strata_machine_t c, strata_model_t pm, strata_layout_t l, int64_t batch, double us,
                         double *step) {
  for (int i = 0; i < c->k; i++)
    c->cost[i].action_us = us;
  /* as strata-plan --simulate predicts a step: the median of 15 drawn from the devices' spreads */
  const struct strata_sim_options so = {.batch = batch, .samples = 15, .seed = 1};
  struct strata_sim_result r;
  int rc = strata_simulate(c, pm, l, &so, &r);
  if (!rc) {
    *step = r.step_s;
    strata_sim_result_destroy(&r);
  }
  return rc;
}

int strata__plan_pipe_fit(json_t *root, const char *text, strata_model_t pm, int n, int64_t rows, double seconds) {
  strata_machine_t c = NULL;
  strata_layout_t l = NULL;
  int *idx = malloc((size_t)n * sizeof *idx), *split = malloc((size_t)n * sizeof *split);
  int rc = idx && split ? STRATA_OK : strata__error(STRATA_ERR_NOMEM, "calibration: out of host memory");
  for (int i = 0; !rc && i < n; i++)
    idx[i] = i; /* the calibration's own device indices */
  if (!rc)
    rc = pipe_layout(idx, n, split, &l);
  if (!rc)
    rc = strata_machine_from_calibration(text, "calibration", NULL, &c);
  const int64_t batch = rows * 2 * n;
  double lo = 0, hi = 100, at, simulated = 0, action_us = 0;
  if (!rc)
    rc = pipe_simulate(c, pm, l, batch, 0, &simulated);
  if (!rc && simulated < seconds) {
    while (!rc && (rc = pipe_simulate(c, pm, l, batch, hi, &at)) == STRATA_OK && at < seconds && hi < 1e5)
      lo = hi, hi = fmin(2 * hi, 1e5); /* no more than the file's reader takes */
    while (!rc && hi - lo > 0.1) {
      const double mid = (lo + hi) / 2;
      if ((rc = pipe_simulate(c, pm, l, batch, mid, &at)) == STRATA_OK)
        *(at < seconds ? &lo : &hi) = mid;
    }
    action_us = hi;
  }
  strata_machine_free(c);
  strata_layout_free(l);
  free(split);
  free(idx);
  if (rc)
    return strata__error_prefix(rc, "calibration: simulating the pipeline probe: ");
  json_object_set_new(root, "pipeline_probe",
                      json_pack("{s:I, s:I, s:I, s:f, s:f, s:f}", "blocks", (json_int_t)n, "microbatches",
                                (json_int_t)(2 * n), "rows", (json_int_t)rows, "seconds", seconds,
                                "simulated_seconds", simulated, "action_us", action_us));
  return STRATA_OK;
}
