/* SPDX-License-Identifier: MIT */
/* strata-train.c — train a model (preset or JSON file) on one device or a pipeline of several: progress with loss, tokens/s, MFU and bubble, evaluation, atomic checkpoints, a summary. */
#include "config.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <strata/strata.h>

#include "cli.h"
#include "train.h"

/* The share of --data that validates when no --val-data is given. */
#define VAL_FRACTION 0.1
/* Synthetic image task for mlp/cnn models: images drawn (the last 10% validate). */
#define IMAGE_COUNT 8192
/* Largest GEMM of the peak measurement, and the longest one repetition may take
** before a smaller N is used instead (slow devices). */
#define PEAK_N 1024
#define PEAK_MAX_SECONDS 0.25
#define PEAK_GPU_N 8192

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
  (void)sig;
  interrupted = 1;
}

/* strata_trainer_set_stop's poll: a Ctrl-C stops an evaluation between batches. */
static int stop_requested(void *arg) {
  (void)arg;
  return interrupted != 0;
}

double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/*
** Before step 1: draw one validation batch and one training batch of the
** run's shape, so that a split too short for the context fails now, not at
** the first evaluation after the training. Returns 0 or EXIT_RUNTIME.
*/
static int check_data_splits(const struct run *r) {
  int text = r->cfg->kind == STRATA_MODEL_GPT || r->cfg->kind == STRATA_MODEL_LLAMA;
  int64_t ctx = text ? r->cfg->context : 0;
  size_t cells = (size_t)r->topts.batch * (size_t)(text ? ctx : r->cfg->channels * r->cfg->image * r->cfg->image);
  size_t rows = (size_t)r->topts.batch * (size_t)(text ? ctx : 1);
  void *in = malloc(cells * 4 + 4);
  int32_t *tg = malloc(rows * 4 + 4);
  int rc = in && tg ? 0 : -1;
  if (rc)
    fprintf(stderr, PROG ": out of host memory checking the data\n");
  for (int split = 0; split < 2 && !rc; split++) {
    uint64_t state = 1;
    if (strata_dataset_sample(r->data, split ? STRATA_SPLIT_VAL : STRATA_SPLIT_TRAIN, r->topts.batch, ctx, &state, in,
                              tg)) {
      fprintf(stderr, PROG ": %s (checked before step 1)\n", strata_last_error());
      rc = -1;
    }
  }
  free(in);
  free(tg);
  return rc ? EXIT_RUNTIME : 0;
}

static int fail(const char *what) {
  if (what)
    fprintf(stderr, PROG ": %s: %s\n", what, strata_last_error());
  else
    fprintf(stderr, PROG ": %s\n", strata_last_error());
  return EXIT_RUNTIME;
}

/* ---------------------------------------------------------------- device speed */

/* Say that device `dev`'s peak (measure_peak, time_gemm) failed, with the last error: training goes on without MFU. */
static void no_peak(int dev) {
  fprintf(stderr, PROG ": device %d's matrix-product peak could not be measured (%s); MFU is not reported\n", dev,
          strata_last_error());
}

/*
** The device's sgemm peak: N = PEAK_N unless one product of that size would
** take longer than PEAK_MAX_SECONDS at the rate a 256 product shows, then
** the largest power of two that fits (never below 256). `rough` is a rate
** already known (GFLOP/s, 0 if none) to skip the probe.
*/
static int measure_peak(int dev, int dtype, double rough, double *gflops /* OUT */, int *n_used /* OUT */) {
  int rc = STRATA_OK;
  if (rough <= 0)
    rc = strata_device_gemm_speed(dev, 256, 3, &rough, NULL);
  if (rc)
    return rc;
  int n = PEAK_N;
  while (n > 256 && 2.0 * n * n * n / (rough * 1e9) > PEAK_MAX_SECONDS)
    n /= 2;
  /* A GPU's 1024 product is over in microseconds, launch-bound (an H100 showed 110 TFLOP/s there in bf16 against
  ** 780 at 8192, and its 256 probe under 2 TFLOP/s): N is PEAK_GPU_N unless one product would take longer than
  ** PEAK_MAX_SECONDS at the rate a 1024 product shows. CPUs reach their peak at 1024. */
  struct strata_device_props p;
  if (n == PEAK_N && strata_device_props(dev, &p) == STRATA_OK && !p.is_cpu) {
    double at1024 = 0;
    rc = strata_device_gemm_speed_as(dev, dtype, PEAK_N, 2, &at1024, NULL);
    if (rc == STRATA_OK && at1024 > 0)
      for (n = PEAK_GPU_N; n > PEAK_N && 2.0 * n * n * n / (at1024 * 1e9) > PEAK_MAX_SECONDS; n /= 2)
        ;
    rc = STRATA_OK; /* a refused 1024 product is met again below, where smaller ones are tried */
  }
  /* Fall back to smaller products when the device's memory cap refuses the big ones. */
  for (; n >= 128; n /= 2) {
    rc = strata_device_gemm_speed_as(dev, dtype, n, PEAK_REPS, gflops, NULL);
    if (rc != STRATA_ERR_DEVICE_MEMORY)
      break;
  }
  *n_used = n;
  return rc;
}

/*
** Choose the fastest device: a 512 product (after a 256 probe that also
** warms up) on every device, the highest GFLOP/s wins. The figures are
** written into `why` for the report. Devices whose measurement fails are
** skipped with their reason; none left is an error.
*/
static int pick_best_device(int ndev, int *best /* OUT */, double *rate /* OUT */, char *why, size_t why_size) {
  double top = -1;
  int top_dev = -1;
  size_t len = 0;
  why[0] = '\0';
  for (int d = 0; d < ndev; d++) {
    struct strata_device_props p;
    double g = 0;
    int rc = strata_device_props(d, &p);
    if (!rc)
      rc = strata_device_gemm_speed(d, 256, 1, &g, NULL);
    if (!rc)
      rc = strata_device_gemm_speed(d, 512, 2, &g, NULL);
    if (rc) {
      len += (size_t)snprintf(why + len, len < why_size ? why_size - len : 0, "%s%d %s: failed (%s)",
                              len ? "; " : "", d, rc ? "?" : p.backend, strata_last_error());
      continue;
    }
    len += (size_t)snprintf(why + len, len < why_size ? why_size - len : 0, "%s%d %s %.1f GFLOP/s", len ? ", " : "",
                            d, p.backend, g);
    if (g > top) {
      top = g;
      top_dev = d;
    }
  }
  if (top_dev < 0) {
    fprintf(stderr, PROG ": no device could run a matrix product: %s\n", why);
    return -1;
  }
  *best = top_dev;
  *rate = top;
  return 0;
}

/* ---------------------------------------------------------------- training */

/*
** After every step: the trainer's report of it (every trainer has one, a
** single device's 1 x 1 x 1 included), summed into the run's figures (the
** run's first step also kept apart, for the summary leaves it out like
** tokens/s), peaks kept.
*/
static int keep_report(struct run *r) {
  if (strata_trainer_report(r->tr, &r->rep))
    return -1;
  int first = r->step - r->start_step == 1;
  r->step_bubble = r->rep.bubble;
  r->host_waits_all += r->rep.host_waits;
  r->wall_all += r->rep.wall_s;
  if (first)
    r->wall_first = r->rep.wall_s;
  for (int i = 0; i < r->rep.devices && i < MAX_DEVICES; i++) {
    const struct strata_train_device_stats *d = &r->rep.dev[i];
    r->busy_all[i] += d->busy_s;
    if (first)
      r->busy_first[i] = d->busy_s;
    if (d->peak_bytes > r->peak_bytes[i])
      r->peak_bytes[i] = d->peak_bytes;
    if (d->peak_inflight > r->peak_inflight[i])
      r->peak_inflight[i] = d->peak_inflight;
  }
  return 0;
}

static int save_checkpoint(struct run *r, const struct options *o) {
  double t0 = now();
  if (strata_trainer_save(r->tr, o->save)) {
    progress_end(r);
    return fail(NULL);
  }
  r->save_s += now() - t0;
  r->saved = o->save;
  r->saved_step = r->step;
  if (o->json)
    report_save(r, o->save);
  return 0;
}

/* One validation: 0 done, EVAL_INTERRUPTED stopped by a Ctrl-C (no loss), else EXIT_RUNTIME after a message. */
#define EVAL_INTERRUPTED (-1)
static int evaluate(struct run *r, const struct options *o) {
  double t0 = now();
  float v;
  int rc = strata_trainer_eval(r->tr, o->eval_batches, &v);
  if (rc == STRATA_ERR_INTERRUPTED) {
    r->eval_s += now() - t0;
    return EVAL_INTERRUPTED;
  }
  if (rc) {
    progress_end(r);
    return fail("validation");
  }
  r->eval_s += now() - t0;
  r->val_loss = v;
  r->val_step = r->step;
  if (o->json)
    report_eval(r, v, t0);
  return 0;
}

/* The loop: steps up to opts.steps, evaluations, periodic checkpoints, SIGINT. Returns an exit status. */
static int train(struct run *r, const struct options *o) {
  int64_t total = r->topts.steps;
  int64_t end = r->end = o->stop_at > 0 && o->stop_at < total ? o->stop_at : total;
  int64_t plain_every = total / 20 > 0 ? total / 20 : 1; /* plain lines: about twenty per run */
  double last_plain = now();
  while (r->step < end && !interrupted) {
    struct strata_step_stats s;
    double t0 = now();
    if (strata_trainer_step(r->tr, &s)) {
      progress_end(r);
      return fail(NULL);
    }
    double dt = now() - t0;
    r->step = s.step;
    r->loss = s.loss;
    if (keep_report(r)) {
      progress_end(r);
      return fail(NULL);
    }
    if (r->step - r->start_step == 1) {
      r->first_s = dt;
      r->first_tokens = s.tokens;
      r->first_flops = s.flops;
    } else {
      r->train_s += dt;
      r->train_tokens += s.tokens;
      r->train_flops += s.flops;
    }
    if (o->json)
      report_step(r, &s, dt);
    if (!isfinite(s.loss)) {
      /* Nothing is saved from here on: a diverged model must not replace a good checkpoint. */
      progress_end(r);
      fprintf(stderr, PROG ": the loss is not finite at step %lld (training diverged; try a lower --lr)%s\n",
              (long long)s.step, r->saved ? "; the last checkpoint written is kept" : "; no checkpoint written");
      return EXIT_RUNTIME;
    }
    int last = r->step >= end;
    int evaluated = 0;
    if (!last && o->eval_every > 0 && r->step % o->eval_every == 0 && !interrupted) {
      int erc = evaluate(r, o);
      if (erc == EXIT_RUNTIME) {
        /* the steps are done and good: keep them before failing */
        if (o->save && r->saved_step != r->step && r->step > r->start_step)
          save_checkpoint(r, o);
        return EXIT_RUNTIME;
      }
      evaluated = erc == 0;
    }
    if (!o->json && !o->quiet) {
      if (r->progress_tty)
        progress(r);
      else if (r->step - r->start_step == 1 || r->step % plain_every == 0 || evaluated || last ||
               now() - last_plain > 30) {
        progress(r);
        last_plain = now();
      }
    }
    if (!last && o->save && o->save_every > 0 && r->step % o->save_every == 0 && !interrupted)
      if (save_checkpoint(r, o))
        return EXIT_RUNTIME;
  }
  progress_end(r);
  return 0;
}

/* ---------------------------------------------------------------- setup */

/* Exit status of a failed call on input the user gave: 2 when the input itself is malformed or unusable, else 1. */
static int fail_input(int code) {
  fprintf(stderr, PROG ": %s\n", strata_last_error());
  return code == STRATA_ERR_PARSE || code == STRATA_ERR_RANGE || code == STRATA_ERR_UNSUPPORTED ||
                 code == STRATA_ERR_SHAPE
             ? EXIT_USAGE
             : EXIT_RUNTIME;
}

static int load_data(struct run *r, const struct options *o) {
  if (r->cfg->kind == STRATA_MODEL_GPT || r->cfg->kind == STRATA_MODEL_LLAMA) {
    if (o->val_data) {
      int rc = strata_dataset_tokens_split(o->data, o->val_data,
                                           o->data_format < 0 ? STRATA_TOKENS_AUTO : o->data_format, r->cfg->vocab,
                                           &r->data);
      if (rc)
        return fail_input(rc);
    } else if (!o->data || o->data_format == STRATA_TOKENS_BYTES) {
      if (strata_dataset_text(o->data, VAL_FRACTION, &r->data))
        return fail(NULL);
    } else {
      int rc = strata_dataset_tokens(o->data, o->data_format < 0 ? STRATA_TOKENS_AUTO : o->data_format,
                                     r->cfg->vocab, VAL_FRACTION, &r->data);
      if (rc)
        return fail_input(rc);
    }
  } else {
    if (o->data_format >= 0 || o->val_data) {
      fprintf(stderr, PROG ": %s is for text models; %s is an image model\n",
              o->val_data ? "--val-data" : "--data-format", r->cfg->name);
      return EXIT_USAGE;
    }
    if (o->data) {
      fprintf(stderr, PROG ": --data is for text models; %s is an image model and trains on synthetic shapes\n",
              r->cfg->name);
      return EXIT_USAGE;
    }
    if (strata_dataset_images(IMAGE_COUNT, r->cfg->image, r->cfg->classes, (uint64_t)r->topts.seed, &r->data))
      return fail(NULL);
  }
  if (strata_dataset_info(r->data, &r->dinfo))
    return fail(NULL);
  r->baseline = r->dinfo.kind == STRATA_DATA_TEXT ? r->dinfo.unigram_entropy : log((double)r->cfg->classes);
  return 0;
}

/* --model NAME or FILE: 0, or after one line cli_model_status's code (2 for what the name or file says, 1 for a
** file that cannot be read). */
static int load_model(const char *name, strata_model_t *out /* OUT */) {
  int rc = strata_model_load(name, out);
  if (!rc)
    return 0;
  fprintf(stderr, PROG ": %s\n", strata_last_error());
  return cli_model_status(rc);
}

/* The model of a checkpoint, from the model config the trainer stores in its metadata ("model", the model-file JSON).
** Every failure is 1, as for the rest of a checkpoint: strata-train treats a checkpoint it cannot read or parse (a
** missing or corrupt --resume, one of another model) as a runtime failure, and so its model config too. */
static int model_from_checkpoint(const char *path, strata_model_t *out /* OUT */) {
  strata_safetensors_t st = NULL;
  if (strata_safetensors_read(path, &st))
    return fail(NULL);
  const char *json = strata_safetensors_meta(st, "model");
  if (!json) {
    fprintf(stderr, PROG ": %s: no model config in the checkpoint's metadata; give --model\n", path);
    strata_safetensors_free(st);
    return EXIT_RUNTIME;
  }
  int rc = strata_model_from_json(json, path, out);
  strata_safetensors_free(st);
  if (rc) {
    fprintf(stderr, PROG ": %s: the checkpoint's model config: %s\n", path, strata_last_error());
    return EXIT_RUNTIME;
  }
  return 0;
}

/*
** The properties of global device `dev`: this process's own, or under
** mpirun another rank's as the cluster view describes it (name, backend,
** memory; its free memory and speed are that rank's to know).
*/
static int device_props(const struct run *r, int dev, struct strata_device_props *p) {
  struct strata_cluster_info ci;
  if (!r->cluster || strata_cluster_info(r->cluster, &ci) || ci.size == 1)
    return strata_device_props(dev, p);
  struct strata_cluster_device d;
  int rc = strata_cluster_device(r->cluster, dev, &d);
  if (rc)
    return rc;
  if (d.rank == ci.rank)
    return strata_device_props(d.local, p);
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", d.info.name);
  snprintf(p->backend, sizeof p->backend, "%s", d.info.backend);
  snprintf(p->vendor, sizeof p->vendor, "%s", d.info.vendor);
  p->is_cpu = d.info.is_cpu;
  p->total_memory = p->memory_limit = p->free_memory = d.info.memory;
  return STRATA_OK;
}

/*
** The pipeline's devices: those of --devices, or the first --pp; each must
** exist (else bad usage). Fills r->pp, r->dev and r->props; r->device and
** r->dprops become the first's.
*/
static int pipeline_devices(struct run *r, const struct options *o, int ndev) {
  /* every device of the run: a replica's pipeline ranks, replica after replica */
  const int want = o->layout ? o->ndevices : (o->dp ? o->dp : 1) * replica_devices(o);
  r->pp = want;
  r->ranks = o->pp > 1 ? o->pp : 1;
  r->slabs = o->layout ? strata_layout_spatial(o->layout) : o->spatial;
  r->slabs = r->slabs > 1 ? r->slabs : 1;
  /* one tp degree for every rank: each stage's slices side by side, reported as slabs are */
  const int tpd = uniform_tp(o);
  r->slices = r->slabs == 1 && tpd > 1 ? tpd : 1;
  if (!o->ndevices && want > ndev) {
    char what[200], cut[160];
    if (o->dp || o->ntp)
      snprintf(what, sizeof what, "%s = %d devices", cut_text(o, cut, sizeof cut), want);
    else
      snprintf(what, sizeof what, "--pp %d", o->pp);
    fprintf(stderr, PROG ": %s: there %s only %d device%s (see strata-topo; STRATA_HOST_DEVICES=N makes N host devices)\n",
            what, ndev == 1 ? "is" : "are", ndev, ndev == 1 ? "" : "s");
    return EXIT_USAGE;
  }
  for (int i = 0; i < want; i++) {
    r->dev[i] = o->ndevices ? o->devices[i] : i;
    if (r->dev[i] >= ndev) {
      fprintf(stderr, PROG ": --devices: no device %d; there %s %d (see strata-topo)\n", r->dev[i],
              ndev == 1 ? "is" : "are", ndev);
      return EXIT_USAGE;
    }
    if (device_props(r, r->dev[i], &r->props[i]))
      return fail(NULL);
  }
  /* devices chosen here with --tp: each tensor-parallel group inside one island of the topology (the fastest
  ** links), the pipeline and the replicas across them; under mpirun the global order, rank by rank, keeps each
  ** group on one rank when the ranks' device counts allow it (this process's topology knows only its own) */
  if (!o->ndevices && !o->layout && o->ntp == 1 && o->tp[0] > 1 && !r->topts.cluster) {
    strata_topology_t topo = NULL;
    int order[MAX_DEVICES];
    int rc = strata_topology_load(NULL, &topo);
    if (!rc)
      rc = strata_topology_map_runtime(topo);
    if (!rc)
      rc = strata_topology_tp_order(topo, r->dev, want, o->tp[0], order);
    strata_topology_free(topo);
    if (rc) {
      if (!o->json && !o->quiet)
        printf("placement tp groups in device order: the topology is unknown (%s)\n", strata_last_error());
    } else {
      for (int i = 0; i < want; i++)
        if ((r->dev[i] = order[i]) >= 0 && strata_device_props(r->dev[i], &r->props[i]))
          return fail(NULL);
    }
  }
  r->device = r->dev[0];
  r->dprops = r->props[0];
  return 0;
}

/*
** --plan auto: calibrate this machine's devices, search layouts for the
** model and the global batch (--batch x --accum samples) on them, and train
** the best as --layout would; each micro-batch is then the global batch over
** the layout's replicas and micro-batches.
*/
static int plan_auto(struct run *r, struct options *o) {
  const int64_t global = r->topts.batch * r->topts.accum;
  if (!o->json && !o->quiet) {
    printf("plan      calibrating the devices and searching layouts for %lld samples per step ...\n",
           (long long)global);
    fflush(stdout);
  }
  char *json = NULL;
  strata_machine_t mach = NULL;
  strata_plan_t plan = NULL;
  int rc = strata_calibrate(NULL, 0, &json);
  if (!rc && o->precision == STRATA_BFLOAT16) { /* a bf16 plan needs each device's bf16 GEMM speed */
    char *with = NULL;
    rc = strata_calibrate_bf16(json, &with);
    free(json);
    json = with;
  }
  if (!rc)
    rc = strata_machine_from_calibration(json, "this machine", NULL, &mach);
  struct strata_plan_options po = {.batch = global, .top = 1, .precision = o->precision};
  if (!rc)
    rc = strata_plan_search(mach, r->model, &po, &plan);
  struct strata_plan_candidate best;
  if (!rc)
    rc = strata_plan_candidate(plan, 0, &best);
  if (!rc)
    rc = strata_layout_copy(best.layout, &o->layout); /* it outlives the plan */
  if (rc) {
    fprintf(stderr, PROG ": --plan auto: %s\n", strata_last_error());
    free(json);
    strata_plan_free(plan);
    strata_machine_free(mach);
    return rc == STRATA_ERR_DEVICE_MEMORY ? EXIT_RUNTIME : EXIT_USAGE;
  }
  const int64_t share = (int64_t)strata_layout_dp(o->layout) * strata_layout_microbatches(o->layout);
  if (!o->json && !o->quiet) {
    char *what = NULL;
    strata_layout_describe(o->layout, &what);
    printf("plan      %s: predicted %.3f s per step (%s)\n", what ? what : "(no description: out of memory)",
           best.step_s, best.reason);
    free(what);
  }
  free(json);
  strata_plan_free(plan);
  strata_machine_free(mach);
  if (share < 1 || global % share) {
    fprintf(stderr, PROG ": --plan auto: the plan's %lld micro-batches do not divide the %lld samples of a step\n",
            (long long)share, (long long)global);
    return EXIT_RUNTIME;
  }
  r->topts.batch = global / share;
  o->accum_given = 0; /* --accum counted the step's samples; the layout's micro-batches take its place */
  int urc = adopt_layout(o, "--plan auto");
  r->topts.accum = o->accum;
  return urc;
}

/*
** Each pipeline device's sgemm peak, before the trainer allocates; the
** peak of MFU (r->peak_gflops) is their sum, 0 (unknown) when one fails.
** All use the N of the first, so that the figures compare.
*/
static void measure_pipeline_peaks(struct run *r) {
  double sum = 0;
  for (int i = 0; i < r->pp; i++) {
    int n = 0;
    int rc = i == 0 ? measure_peak(r->dev[i], r->topts.precision, 0, &r->dev_peak[i], &n)
                    : strata_device_gemm_speed_as(r->dev[i], r->topts.precision, r->peak_n, PEAK_REPS, &r->dev_peak[i],
                                                  NULL);
    if (i == 0)
      r->peak_n = n;
    if (rc) {
      no_peak(r->dev[i]);
      r->peak_gflops = 0;
      return;
    }
    sum += r->dev_peak[i];
  }
  r->peak_gflops = sum;
}

/*
** strata_trainer_new_pipeline with the command line's options. A pipeline
** the library refuses for its shape (a split that does not cover the
** model's layers, more stages than layers) is bad usage, EXIT_USAGE.
*/
static int new_layout_trainer(struct run *r, const struct options *o) {
  strata_layout_t l = o->layout, built = NULL;
  if (!l) { /* --dp: the layout of the command line */
    struct strata_layout_desc d = {.dp = o->dp, .pp = o->pp, .devices = r->dev, .ndevices = r->pp,
                                   .tp_all = o->ntp == 1 ? o->tp[0] : 0, .tp = o->ntp > 1 ? o->tp : NULL,
                                   .zero = o->zero, .recompute = o->recompute, .sp = o->sp,
                                   .split = o->nsplit ? o->split : NULL, .nsplit = o->nsplit,
                                   .schedule = o->schedule, .microbatches = (int)o->microbatches,
                                   .virtual_stages = o->schedule == STRATA_SCHEDULE_INTERLEAVED ? (int)o->virtual_stages : 0};
    if (strata_layout_new(&d, &built)) {
      fprintf(stderr, PROG ": %s\n", strata_last_error());
      return EXIT_USAGE;
    }
    l = built;
  }
  int rc = strata_trainer_new_layout(r->model, r->data, &r->topts, l, o->trace, &r->tr);
  strata_layout_free(built);
  if (rc == STRATA_ERR_SHAPE || rc == STRATA_ERR_INVALID || rc == STRATA_ERR_UNSUPPORTED || rc == STRATA_ERR_NOT_FOUND) {
    fprintf(stderr, PROG ": %s\n", strata_last_error());
    return EXIT_USAGE;
  }
  if (rc || strata_trainer_report(r->tr, &r->rep))
    return fail(NULL);
  return 0;
}

static int new_pipeline_trainer(struct run *r, const struct options *o) {
  if (o->dp || o->ntp || o->layout)
    return new_layout_trainer(r, o);
  struct strata_pipeline_options pp;
  memset(&pp, 0, sizeof pp);
  pp.devices = r->pp;
  pp.device = r->dev;
  pp.split = o->nsplit ? o->split : NULL;
  pp.schedule = o->schedule;
  pp.microbatches = (int)o->microbatches;
  pp.virtual_stages = o->schedule == STRATA_SCHEDULE_INTERLEAVED ? (int)o->virtual_stages : 0;
  pp.trace = o->trace;
  int rc = strata_trainer_new_pipeline(r->model, r->data, &r->topts, &pp, &r->tr);
  if (rc == STRATA_ERR_SHAPE || rc == STRATA_ERR_INVALID) {
    fprintf(stderr, PROG ": %s\n", strata_last_error());
    return EXIT_USAGE;
  }
  if (rc || strata_trainer_report(r->tr, &r->rep))
    return fail(NULL);
  return 0;
}

/*
** --spatial N: the model's slabs checked (strata_model_spatial_check: a gpt, a cnn without gap, more slabs than a
** layer's rows, a halo past a neighbour's slab); the run's tp slices are then its slabs. 0 or EXIT_USAGE.
*/
static int check_spatial(struct run *r, const struct options *o) {
  if (strata_model_spatial_check(r->model, o->spatial)) {
    fprintf(stderr, PROG ": --spatial %d: %s\n", o->spatial, strata_last_error());
    return EXIT_USAGE;
  }
  return 0;
}

/* --sp (or a layout's "sp"): a GPT or a llama, whose context every rank's tp divides (--plan auto: the planner's cut, the
** trainer's check). 0 or EXIT_USAGE. */
static int check_sp_model(struct run *r, const struct options *o) {
  if (r->cfg->kind != STRATA_MODEL_GPT && r->cfg->kind != STRATA_MODEL_LLAMA) {
    fprintf(stderr, PROG ": --sp is for GPT models and llamas; model '%s' is %s\n", r->cfg->name,
            r->cfg->kind == STRATA_MODEL_MLP ? "an MLP (no sequence)" : "a CNN (no sequence)");
    return EXIT_USAGE;
  }
  const int ranks = o->layout ? strata_layout_pp(o->layout) : o->ntp;
  for (int k = 0; k < ranks; k++) {
    const int t = rank_tp(o, k);
    if (t > 0 && r->cfg->context % t) {
      fprintf(stderr, PROG ": --sp: tp %d does not divide the context %lld of '%s' (each slice holds context / tp of "
              "every sequence)\n", t, (long long)r->cfg->context, r->cfg->name);
      return EXIT_USAGE;
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  struct options o;
  int rc = parse_args(argc, argv, &o);
  if (rc) { /* a layout read before a later check refused the command line */
    strata_layout_free(o.layout);
    return rc < 0 ? 0 : rc;
  }

  struct run r;
  memset(&r, 0, sizeof r);
  r.t_start = now();
  r.val_loss = NAN;
  r.progress_tty = isatty(STDERR_FILENO);

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sa.sa_flags = SA_RESETHAND; /* a second Ctrl-C stops at once */
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);

  /* Under mpirun (or srun) every rank runs this program: join the job; rank 0 prints, the others stay quiet. */
  int ranks = 1;
  if (strata_cluster_available()) {
    struct strata_cluster_info ci;
    if (strata_cluster_init(&argc, &argv, NULL, &r.cluster) || strata_cluster_info(r.cluster, &ci))
      strata_cluster_abort(r.cluster, EXIT_RUNTIME, NULL);
    ranks = ci.size;
    r.rank = ci.rank;
    if (ranks > 1)
      r.topts.cluster = r.cluster;
    if (r.rank > 0) {
      o.quiet = 1;
      if (!freopen("/dev/null", "w", stdout))
        o.json = 0;
    }
  }

  int ndev = 0;
  char why[1024];
  int exit_code = 0;
  double rough = 0;
  if (o.init_from) {
    if ((rc = strata_hf_model_context(o.init_from, o.context, &r.model)) != 0) {
      rc = fail_input(rc);
    } else if (o.untie) {
      struct strata_model_config untied = *strata_model_config(r.model);
      strata_model_free(r.model);
      r.model = NULL;
      if (!untied.tied) {
        fprintf(stderr, PROG ": --untie: %s is not tied\n", o.init_from);
        rc = EXIT_USAGE;
      } else {
        untied.tied = 0;
        rc = strata_model_from_config(&untied, &r.model) ? fail(NULL) : 0;
      }
    }
  } else if (o.model)
    rc = load_model(o.model, &r.model);
  else if (o.resume)
    rc = model_from_checkpoint(o.resume, &r.model);
  else
    rc = load_model(DEFAULT_PRESET, &r.model);
  if (rc)
    goto out;
  r.cfg = strata_model_config(r.model);
  if (o.spatial && (rc = check_spatial(&r, &o)))
    goto out;

  strata_train_options_default(&r.topts);
  r.topts.cluster = ranks > 1 ? r.cluster : NULL;
  r.topts.steps = o.steps;
  r.topts.batch = o.batch;
  r.topts.accum = o.accum;
  r.topts.seed = (uint64_t)o.seed;
  r.topts.precision = o.precision;
  r.topts.grad_reduce = o.grad_reduce;
  r.topts.recompute = o.recompute;
  if (o.recompute && r.cfg->kind != STRATA_MODEL_GPT && r.cfg->kind != STRATA_MODEL_LLAMA) { /* bad usage, before
                                                                                                ** any device work */
    fprintf(stderr, PROG ": --recompute %s is for GPT and llama blocks; model '%s' (%s) keeps its activations\n",
            strata_recompute_name(o.recompute), r.cfg->name, r.cfg->kind == STRATA_MODEL_MLP ? "an MLP" : "a CNN");
    rc = EXIT_USAGE;
    goto out;
  }
  r.topts.spatial = o.spatial;
  r.topts.sp = o.sp;
  if (o.sp && (rc = check_sp_model(&r, &o)))
    goto out;
  if (o.warmup >= 0)
    r.topts.warmup = o.warmup;
  else
    r.topts.warmup = o.steps / 20;
  if (o.lr > 0) {
    /* The decay floor stays the default's fraction of the peak. */
    double frac = r.topts.lr > 0 ? r.topts.min_lr / r.topts.lr : 0.1;
    r.topts.lr = (float)o.lr;
    r.topts.min_lr = (float)(o.lr * frac);
  }
  if (o.clip >= 0)
    r.topts.clip = (float)o.clip;
  if (o.weight_decay >= 0)
    r.topts.weight_decay = (float)o.weight_decay;

  if ((rc = load_data(&r, &o)))
    goto out;

  int drc = strata_device_count(&ndev);
  struct strata_cluster_info ci;
  if (!drc && ranks > 1 && !(drc = strata_cluster_info(r.cluster, &ci)))
    ndev = ci.device_count; /* the layout names the cluster's devices, every rank's */
  if (drc) {
    fail(NULL);
    rc = cli_device_status(drc);
    goto out;
  }
  if (ndev == 0) {
    fprintf(stderr, PROG ": no devices (STRATA_BACKENDS=%s; see strata-topo)\n",
            getenv("STRATA_BACKENDS") ? getenv("STRATA_BACKENDS") : "all");
    rc = EXIT_RUNTIME;
    goto out;
  }
  if (ranks > 1 && (o.plan_auto || !o.pp)) {
    fprintf(stderr, PROG ": under mpirun with %d ranks give --dp, --pp (devices over the ranks) or --layout; "
            "%s\n", ranks, o.plan_auto ? "--plan auto plans one process" : "one device per job is one process's");
    rc = EXIT_USAGE;
    goto out;
  }
  if (o.plan_auto && (rc = plan_auto(&r, &o)))
    goto out;
  if (o.pp) {
    if ((rc = pipeline_devices(&r, &o, ndev)))
      goto out;
    if (ranks == 1) /* MFU over one process's devices (another rank's speed is not known here) */
      measure_pipeline_peaks(&r);
    r.topts.device = r.device;
    if ((rc = new_pipeline_trainer(&r, &o)))
      goto out;
  } else {
    if (o.device >= ndev) {
      fprintf(stderr, PROG ": --device %d: there %s %d device%s (see strata-topo)\n", o.device,
              ndev == 1 ? "is" : "are", ndev, ndev == 1 ? "" : "s");
      rc = EXIT_USAGE;
      goto out;
    }
    if (o.device >= 0) {
      r.device = o.device;
      why[0] = '\0';
    } else if (ndev == 1) {
      r.device = 0;
      snprintf(why, sizeof why, "the only device");
    } else if (pick_best_device(ndev, &r.device, &rough, why, sizeof why)) {
      rc = EXIT_RUNTIME;
      goto out;
    }
    if (strata_device_props(r.device, &r.dprops)) {
      rc = fail(NULL);
      goto out;
    }
    r.topts.device = r.device;

    /* The peak before the trainer allocates, so that a memory cap does not starve the measurement. */
    if (measure_peak(r.device, r.topts.precision, rough, &r.peak_gflops, &r.peak_n)) { /* training may still run: said, not hidden */
      no_peak(r.device);
      r.peak_gflops = 0;
    }

    if (o.trace) { /* traced: the layout of this one device, whose trainer takes a trace */
      struct strata_layout_desc d = {.devices = &r.device, .ndevices = 1, .microbatches = (int)r.topts.accum};
      strata_layout_t one = NULL;
      int lrc = strata_layout_new(&d, &one);
      if (!lrc)
        lrc = strata_trainer_new_layout(r.model, r.data, &r.topts, one, o.trace, &r.tr);
      strata_layout_free(one);
      if (lrc) {
        rc = fail(NULL);
        goto out;
      }
    } else if (strata_trainer_new(r.model, r.data, &r.topts, &r.tr)) {
      rc = fail(NULL);
      goto out;
    }
  }
  if (o.resume) {
    if (strata_trainer_load(r.tr, o.resume)) {
      rc = fail(NULL);
      goto out;
    }
    r.start_step = r.step = strata_trainer_steps_done(r.tr);
  }
  if (o.init_from && (rc = strata_trainer_load_hf(r.tr, o.init_from)) != 0) {
    rc = fail_input(rc);
    goto out;
  }
  strata_trainer_set_stop(r.tr, stop_requested, NULL);
  if ((rc = check_data_splits(&r)))
    goto out;

  print_header(&r, &o, o.pp ? NULL : o.device < 0 ? why : NULL);
  if (r.step >= r.topts.steps && !o.json && !o.quiet)
    printf("nothing to train: the checkpoint is at step %lld, --steps is %lld\n", (long long)r.step,
           (long long)r.topts.steps);

  exit_code = train(&r, &o);
  if (exit_code)
    goto out_rc;
  /* The checkpoint first: a final evaluation that fails or is interrupted must not cost the training. */
  if (o.save && r.step > r.start_step && r.saved_step != r.step && save_checkpoint(&r, &o)) {
    exit_code = EXIT_RUNTIME;
    goto out_rc;
  }
  /* Measured again after training, and the higher figure kept: on a shared machine a busy
  ** moment during the first measurement would otherwise inflate MFU (even past 100%). */
  r.peak_before = r.peak_gflops;
  if (!interrupted && r.step > r.start_step && r.peak_gflops > 0) {
    double again = 0, sum = 0;
    for (int i = 0; i < (r.pp ? r.pp : 1); i++) {
      double *peak = r.pp ? &r.dev_peak[i] : &r.peak_gflops;
      const int dev = r.pp ? r.dev[i] : r.device;
      if (strata_device_gemm_speed_as(dev, r.topts.precision, r.peak_n, PEAK_REPS, &again, NULL) != STRATA_OK)
        fprintf(stderr, PROG ": device %d's matrix-product peak could not be measured again after training (%s); "
                "MFU uses the first measurement\n", dev, strata_last_error());
      else if (again > *peak)
        *peak = again;
      sum += *peak;
    }
    if (r.pp)
      r.peak_gflops = sum;
  }
  if (!interrupted && r.step > r.start_step && o.eval_batches > 0 && evaluate(&r, &o) == EXIT_RUNTIME) {
    exit_code = EXIT_RUNTIME;
    goto out_rc;
  }
  print_summary(&r, interrupted, &o);
  if (interrupted)
    exit_code = EXIT_INTERRUPTED;
out_rc:
  rc = exit_code;
out:
  /* a failed rank ends the whole job: the others may be waiting for it (its message is printed above) */
  if (rc && ranks > 1)
    strata_cluster_abort(r.cluster, rc, *strata_last_error() ? NULL : "stopped (the reason is printed above)");
  strata_trainer_free(r.tr);
  strata_layout_free(o.layout);
  strata_dataset_free(r.data);
  strata_model_free(r.model);
  strata_cluster_free(r.cluster);
  strata_shutdown();
  return rc;
}
