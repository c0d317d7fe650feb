/* SPDX-License-Identifier: MIT */
/* train.c — the trainer: stages on one or several devices, micro-batches, gradient accumulation, clipping, AdamW with
** warm-up and cosine decay, evaluation, and checkpoints with the full training state. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <strata/checkpoint.h>
#include <strata/layout.h>
#include <strata/train.h>

#include "core/file.h"
#include "train/ranks.h"
#include "core/parse.h"
#include "device/registry.h"
#include "train/trainer.h"

#define CHECKPOINT_FORMAT "strata-checkpoint/1"

STRATA_API void strata_train_options_default(struct strata_train_options *o) {
  if (!o)
    return;
  memset(o, 0, sizeof *o);
  o->batch = 8;
  o->accum = 1;
  o->steps = 1000;
  o->lr = 1e-3f;
  o->min_lr = 1e-4f;
  o->warmup = 50;
  o->weight_decay = 0.1f;
  o->beta1 = 0.9f;
  o->beta2 = 0.95f;
  o->eps = 1e-8f;
  o->clip = 1.0f;
  o->seed = 1;
}

static int check_options(const struct strata_train_options *o) {
  if (o->batch < 1 || o->batch > 1 << 20)
    return strata__error(STRATA_ERR_INVALID, "batch = %lld must lie in [1, 1048576]", (long long)o->batch);
  if (o->accum < 1 || o->accum > 1 << 20)
    return strata__error(STRATA_ERR_INVALID, "accum = %lld must lie in [1, 1048576]", (long long)o->accum);
  if (o->steps < 1)
    return strata__error(STRATA_ERR_INVALID, "steps = %lld must be positive", (long long)o->steps);
  if (o->warmup < 0)
    return strata__error(STRATA_ERR_INVALID, "warmup = %lld must not be negative", (long long)o->warmup);
  if (!(o->lr >= 0) || !(o->min_lr >= 0) || !(o->weight_decay >= 0) || !(o->clip >= 0) || !(o->eps > 0) ||
      !(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1))
    return strata__error(STRATA_ERR_INVALID,
                         "optimizer settings out of range (lr, min_lr, weight decay, clip >= 0; eps > 0; 0 <= betas < 1)");
  return STRATA_OK;
}

/* The model and the data must describe the same task. */
static int check_data(strata_model_t model, strata_dataset_t data, int *images) {
  struct strata_dataset_info di;
  TRY(strata_dataset_info(data, &di));
  const struct strata_model_config *c = &model->cfg;
  *images = c->kind != STRATA_MODEL_GPT;
  if (*images && di.kind != STRATA_DATA_IMAGES)
    return strata__error(STRATA_ERR_INVALID, "model '%s' (%s) needs image data, the dataset holds text", c->name,
                         c->kind == STRATA_MODEL_MLP ? "mlp" : "cnn");
  if (!*images && di.kind != STRATA_DATA_TEXT)
    return strata__error(STRATA_ERR_INVALID, "model '%s' is a GPT and needs text data", c->name);
  if (!*images && c->vocab < di.vocab)
    return strata__error(STRATA_ERR_SHAPE, "model '%s' has a vocabulary of %lld, the data has %lld tokens", c->name,
                         (long long)c->vocab, (long long)di.vocab);
  if (*images && (c->image != di.image || c->channels != di.channels || c->classes < di.vocab))
    return strata__error(STRATA_ERR_SHAPE,
                         "model '%s' expects %lldx%lld images with %lld channels and %lld classes; the data has "
                         "%lldx%lld, %lld channel(s), %lld classes",
                         c->name, (long long)c->image, (long long)c->image, (long long)c->channels,
                         (long long)c->classes, (long long)di.image, (long long)di.image, (long long)di.channels,
                         (long long)di.vocab);
  return STRATA_OK;
}

/* When a stage does not fit: say what the whole stage needs, not only the allocation that failed. */
static int explain_memory(strata_trainer_t tr, int first, int last, int dev) {
  char *msg = strdup(strata_last_error()); /* whole: a long message keeps its reason */
  uint64_t p = 0, act = 0;
  for (int i = first; i < last; i++) {
    p += tr->model->layers[i].info.params;
    act += tr->model->layers[i].info.act_bytes + tr->model->layers[i].info.out_bytes;
  }
  const char *what = (first == 0 && last == tr->model->nlayers) ? "model" : "stage";
  int rc = strata__error(STRATA_ERR_DEVICE_MEMORY,
                       "%s '%s' (layers %d-%d) does not fit on device %d: it needs %.1f MiB for parameters, gradients "
                       "and AdamW moments plus about %.1f MiB of activations per micro-batch of %lld (%s)",
                       what, tr->model->cfg.name, first, last - 1, dev, 16.0 * (double)p / 1048576.0,
                       (double)act * (double)tr->opt.batch / 1048576.0, (long long)tr->opt.batch,
                       msg ? msg : "out of host memory");
  free(msg);
  return rc;
}

/* Micro-batches stage s keeps in flight at most: the schedule's peak, one without a schedule. */
static int stage_inflight(strata_trainer_t tr, int s) {
  int k = 1;
  if (tr->sched && (strata_schedule_peak_inflight(tr->sched, s, &k) || k < 1))
    k = 1;
  return k;
}

uint64_t strata__stage_need(strata_trainer_t tr, int s, const struct strata__stage_bytes *b,
                            const struct strata__stage_bytes *prev, uint64_t *act, uint64_t *bufs) {
  int k = stage_inflight(tr, s);
  uint64_t a = (uint64_t)k * b->slot;
  /* boundary gradients may outlive the activations until the previous stage took them */
  int first = strata__stage_first(tr, s), last = strata__stage_last(tr, s);
  uint64_t g = (uint64_t)(k + (!first && tr->sched ? 1 : 0)) * b->grad, recv = 0;
  if (tr->sched && !first && prev && tr->stage_rank[s - 1] != tr->stage_rank[s])
    recv += (uint64_t)stage_inflight(tr, strata__stage_owner(tr, s - 1)) * b->in; /* sent here, not yet consumed */
  if (tr->sched && !last && tr->stage_rank[s + 1] != tr->stage_rank[s])
    recv += (uint64_t)k * b->out; /* gradients sent back here */
  if (act)
    *act += a;
  if (bufs)
    *bufs += b->fixed - b->params + g + recv;
  return b->fixed + a + g + recv;
}

/*
** The memory plan, before anything is allocated: per device, every stage's
** parameters, gradients, moments and buffers, the activations and boundary
** gradients of the micro-batches the schedule keeps in flight on it (one
** without a schedule), and the buffers that receive its neighbours'
** activations and gradients, against what the device has free now. The
** message says what is needed and what there is ("needs X, has Y").
*/
static int check_memory_of(strata_trainer_t tr, const int *split, uint64_t *need, uint64_t *params, uint64_t *act,
                           uint64_t *bufs, int *lo, int *hi, int *nst);
static int check_memory(strata_trainer_t tr, const int *split) {
  const size_t R = (size_t)tr->ndev;
  uint64_t *u = calloc(4 * R, sizeof *u);
  int *ints = calloc(3 * R, sizeof *ints);
  if (!u || !ints) {
    free(u);
    free(ints);
    return strata__error(STRATA_ERR_NOMEM, "out of host memory planning memory");
  }
  int rc = check_memory_of(tr, split, u, u + R, u + 2 * R, u + 3 * R, ints, ints + R, ints + 2 * R);
  free(u);
  free(ints);
  return rc;
}

/* check_memory with its per-rank tables: need, params, act, bufs, lo, hi, nst (zeroed, ndev entries each). */
static int check_memory_of(strata_trainer_t tr, const int *split, uint64_t *need, uint64_t *params, uint64_t *act,
                           uint64_t *bufs, int *lo, int *hi, int *nst) {
  struct strata__stage_bytes b, prev;
  int split_backward = tr->report.schedule == STRATA_SCHEDULE_ZB_H1;
  for (int s = 0, first = 0; s < strata__stages_all(tr); s++) {
    const int n = split[s % tr->nstages];
    if (strata__stage_first(tr, s))
      first = 0;
    if (!strata__stage_held(tr, s)) {
      first += n;
      continue;
    }
    struct strata__cut cut = {{strata__stage_slice(tr, s), strata__stage_tp(tr, s)},
                              {strata__stage_replica(tr, s), tr->zero ? tr->replicas : 1}};
    TRY(strata__stage_plan(tr->model, first, first + n, tr->opt.batch, split_backward, &cut, &b));
    int r = tr->stage_rank[s];
    need[r] += strata__stage_need(tr, s, &b, strata__stage_first(tr, s) ? NULL : &prev, &act[r], &bufs[r]);
    params[r] += b.params;
    if (!nst[r]++)
      lo[r] = first;
    hi[r] = first + n - 1;
    prev = b;
    first += n;
  }
  for (int r = 0; r < tr->ndev; r++) {
    struct strata_device_props p;
    if (!strata__rank_mine(tr, r))
      continue; /* its rank checks it */
    TRY(strata_device_props(tr->dev[r], &p));
    if (need[r] <= p.free_memory)
      continue;
    const double MiB = 1048576.0;
    char what[200], hint[160] = "";
    const struct strata__layer *L = &tr->model->layers[lo[r]];
    if (tr->nstages == 1)
      snprintf(what, sizeof what, "model '%s' (layers %d-%d)", tr->model->cfg.name, lo[r], hi[r]);
    else if (lo[r] == hi[r])
      snprintf(what, sizeof what, "layer %d of model '%s' (%s) alone", lo[r], tr->model->cfg.name, L->info.name);
    else
      snprintf(what, sizeof what, "%s of model '%s' on this device (layers %d-%d)", nst[r] == 1 ? "the stage" : "the stages",
               tr->model->cfg.name, lo[r], hi[r]);
    if (tr->unfit_split && lo[r] == hi[r] && L->kind == STRATA__LAYER_BLOCK)
      snprintf(hint, sizeof hint, "; no pipeline split can help: tensor parallelism (tp %d or more) splits the layer "
               "itself", 2 * strata__stage_tp(tr, lo[r]));
    return strata__error(STRATA_ERR_DEVICE_MEMORY,
                         "%s%s does not fit on device %d: a step needs %.1f MiB (%.1f MiB for parameters, gradients and "
                         "AdamW moments, %.1f MiB of activations for micro-batches of %lld, %.1f MiB of other buffers), "
                         "the device has %.1f MiB free (limit %.1f MiB, %.1f MiB in use)%s",
                         tr->unfit_split ? "no cut of the model fits these devices' memory; with the fastest cut, " : "",
                         what, strata__rank_device(tr, r), (double)need[r] / MiB, (double)params[r] / MiB, (double)act[r] / MiB,
                         (long long)tr->opt.batch, (double)bufs[r] / MiB, (double)p.free_memory / MiB,
                         (double)p.memory_limit / MiB, (double)p.used_memory / MiB, hint);
  }
  return STRATA_OK;
}

/* Allocate the host-side micro-batch buffers for m micro-batches: inputs
** feed the first stage's device, targets the last's, losses come back from
** it; each is pinned by that device's backend where it can be (CUDA), so
** that the copies run asynchronously instead of through pageable memory. */
static int host_buffers(strata_trainer_t tr) {
  tr->inputs = calloc((size_t)tr->mtot, sizeof *tr->inputs);
  tr->targets = calloc((size_t)tr->mtot, sizeof *tr->targets);
  tr->losses = calloc((size_t)tr->mtot, sizeof *tr->losses);
  tr->mb_loss = calloc((size_t)tr->mtot, sizeof *tr->mb_loss);
  tr->host_mem = calloc(3 * (size_t)tr->mtot, sizeof *tr->host_mem);
  if (!tr->inputs || !tr->targets || !tr->losses || !tr->mb_loss || !tr->host_mem)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory creating a trainer");
  for (int i = 0; i < tr->mtot; i++) {
    /* replica i / m's first and last stages' devices (of its slice 0); another rank's replica's: the home one's */
    int c = (strata__stage_mine(tr, i / tr->m * tr->tp * tr->nstages) ? i / tr->m : tr->home) * tr->tp;
    int first = strata__ranks_host_device(tr, tr->stage_rank[c * tr->nstages]),
        last = strata__ranks_host_device(tr, tr->stage_rank[(c + 1) * tr->nstages - 1]);
    struct strata__staging *h = &tr->host_mem[3 * (size_t)i];
    TRY(strata__host_memory_new(first, tr->in_elems * 4, &h[0]));
    TRY(strata__host_memory_new(last, (size_t)tr->rows * 4, &h[1]));
    TRY(strata__host_memory_new(last, (size_t)tr->rows * 4, &h[2]));
    tr->inputs[i] = h[0].p;
    tr->targets[i] = h[1].p;
    tr->losses[i] = h[2].p;
  }
  return STRATA_OK;
}

/* A device's failure `rc` (its message the last error), named with the device and what it was doing
** (printf-style): "device 1 (host: ...), stage 2's update: host: virtual device 1 failed (...)". */
static int device_error(int rc, int dev, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int device_error(int rc, int dev, const char *fmt, ...) {
  char what[128], label[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  const struct strata__device *d = strata__device_get(dev);
  return strata__error(rc, "%s, %s: %s", d ? strata__device_label(d, label, sizeof label) : "a device that is gone",
                       what, strata_last_error());
}

/* Build the stages from the split (layers per stage) on their ranks' devices. */
static int build_stages(strata_trainer_t tr, const int *split, int split_backward) {
  int first = 0;
  for (int s = 0; s < strata__stages_all(tr); s++) {
    if (strata__stage_first(tr, s))
      first = 0;
    int last = first + split[s % tr->nstages];
    int dev = tr->dev[tr->stage_rank[s]];
    tr->rep_split[s] = split[s % tr->nstages];
    tr->rep_stage_device[s] = strata__stage_held(tr, s) ? strata__rank_device(tr, tr->stage_rank[s]) : -1;
    if (!strata__stage_held(tr, s) || !strata__stage_mine(tr, s)) { /* another slice stands for it, or another rank's */
      first = last;
      continue;
    }
    /* every replica initialises its stages from the same seed: the copies
    ** start equal, and each slice is cut from the same whole tensors */
    struct strata__cut cut = {{strata__stage_slice(tr, s), strata__stage_tp(tr, s)},
                              {strata__stage_replica(tr, s), tr->zero ? tr->replicas : 1}};
    int rc = strata__stage_new(tr->model, first, last, dev, tr->opt.batch, tr->opt.seed, split_backward, &cut,
                               &tr->st[s]);
    if (rc == STRATA_ERR_DEVICE_MEMORY)
      rc = explain_memory(tr, first, last, dev);
    else if (rc) /* a device that fails while the stage is set up: named, with the stage */
      rc = device_error(rc, dev, "setting up stage %d (layers %d-%d)", s, first, last - 1);
    if (rc)
      return rc;
    if (strata__stage_tp(tr, s) > 1) {
      tr->st[s]->join = strata__tp_join;
      tr->st[s]->join_arg = &tr->tp_member[s];
    }
    first = last;
  }
  TRY(strata__ranks_shells(tr, split, split_backward)); /* the home replica's stages other ranks hold */
  tr->ntensors = 0;
  for (int s = 0; s < tr->nstages; s++)
    tr->ntensors += (size_t)strata__home_stage(tr, 0, s)->ntensors;
  tr->sumsq = calloc((size_t)(tr->zero ? tr->chains : tr->tp) * tr->ntensors + 1, sizeof *tr->sumsq);
  tr->tensor_split = calloc(tr->ntensors + 1, sizeof *tr->tensor_split);
  if (!tr->sumsq || !tr->tensor_split)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory");
  for (int s = 0, t = 0; s < tr->nstages; s++)
    for (int j = 0; j < strata__home_stage(tr, 0, s)->ntensors; j++)
      tr->tensor_split[t++] = strata__home_stage(tr, 0, s)->tensors[j].split != STRATA__SPLIT_NONE;
  return STRATA_OK;
}

static int check_pipeline(const struct strata_pipeline_options *pp, int nlayers, int *kind, int *nstages) {
  if (pp->devices < 1 || pp->devices > STRATA__MAX_RANKS)
    return strata__error(STRATA_ERR_INVALID, "pipeline: %d devices (1..%d)", pp->devices, STRATA__MAX_RANKS);
  if (!pp->device)
    return strata__error(STRATA_ERR_INVALID, "pipeline: no device list");
  *kind = pp->schedule ? pp->schedule : STRATA_SCHEDULE_1F1B;
  int v = *kind == STRATA_SCHEDULE_INTERLEAVED ? (pp->virtual_stages ? pp->virtual_stages : 2) : 1;
  if (v < 1 || (int64_t)v * pp->devices > nlayers)
    return strata__error(v < 1 ? STRATA_ERR_INVALID : STRATA_ERR_SHAPE,
                         "pipeline: %d virtual stages per device on %d devices, the model has %d layers", v,
                         pp->devices, nlayers);
  *nstages = v * pp->devices;
  if (*nstages > nlayers)
    return strata__error(STRATA_ERR_SHAPE, "pipeline: %d stages but the model has only %d layers", *nstages, nlayers);
  if (pp->microbatches < 1)
    return strata__error(STRATA_ERR_INVALID, "pipeline: %d micro-batches", pp->microbatches);
  int given = 0, sum = 0;
  for (int s = 0; pp->split && s < *nstages; s++) {
    if (pp->split[s] < 0)
      return strata__error(STRATA_ERR_INVALID, "pipeline: stage %d has %d layers", s, pp->split[s]);
    given |= pp->split[s] != 0;
    sum += pp->split[s];
  }
  if (given) {
    for (int s = 0; s < *nstages; s++)
      if (pp->split[s] == 0)
        return strata__error(STRATA_ERR_INVALID, "pipeline: stage %d of the split has no layers", s);
    if (sum != nlayers)
      return strata__error(STRATA_ERR_SHAPE, "pipeline: the split covers %d layers, the model has %d", sum, nlayers);
  }
  for (int i = 0; i < pp->devices; i++)
    for (int j = i + 1; j < pp->devices; j++)
      if (pp->device[i] == pp->device[j])
        return strata__error(STRATA_ERR_INVALID, "pipeline: device %d is listed twice", pp->device[i]);
  /* The trace is written at the end of every step, after the update: a path
  ** that cannot be written would fail each step once its work is done. */
  if (pp->trace) {
    if (!pp->trace[0])
      return strata__error(STRATA_ERR_INVALID, "pipeline: the trace path is empty");
    int rc = strata__out_check(pp->trace);
    if (rc)
      return strata__error_prefix(STRATA_ERR_IO, "pipeline: cannot write the trace: ");
  }
  return STRATA_OK;
}

/*
** How a trainer is cut, from whichever entry point: dp replicas of a
** pipeline of `pp` ranks over `devices` (replica-major), `nstages` stages
** per replica, the schedule (0: stages one after another, single device),
** micro-batches per replica, an explicit split or a balanced one.
*/
struct plan {
  int replicas, pp, tp, kind, m, nstages;    /* chain c = replica x tp + slice */
  const int *tps;                            /* [pp]: the tp degree of each pipeline rank, or NULL: tp for all */
  int zero;                                  /* ZeRO-1 over the replicas */
  const int *devices;                        /* [replicas x sum(tps)]: replica by replica, slice by slice, rank by
                                             ** rank (slice t's ranks those with more than t slices) */
  const int *split;                          /* [nstages], when given */
  int given;                         /* split given (else balanced) */
  const char *trace;
};

/*
** Leave in each device's block cache what the schedule may hold at once:
** every stage's activations for the micro-batches in flight and the boundary
** gradients that may outlive them (the memory plan's counts). Which of them
** are live together depends on the threads' timing; warmed up front, no
** step asks the backend for one, however it is timed.
*/
static int warm_cache(strata_trainer_t tr) {
  if (!tr->sched)
    return STRATA_OK;
  size_t cap = 0, n = 0;
  strata_buffer_t *held = NULL;
  int rc = STRATA_OK;
  for (int s = 0; s < strata__stages_all(tr) && !rc; s++) {
    struct strata__stage *st = tr->st[s];
    if (!st)
      continue; /* another rank's, or a slice another stands for */
    int k = stage_inflight(tr, s), kg = k + !strata__stage_first(tr, s);
    for (int i = 0; i < k + (st->grad_floats ? kg : 0) && !rc; i++) {
      if (n == cap) {
        size_t nc = cap ? 2 * cap : 64;
        strata_buffer_t *g = realloc(held, nc * sizeof *g);
        if (!g) {
          rc = strata__error(STRATA_ERR_NOMEM, "out of host memory creating a trainer");
          break;
        }
        held = g;
        cap = nc;
      }
      size_t floats = i < k ? st->slot_floats : st->grad_floats;
      rc = strata_buffer_new(st->dev, floats * 4, &held[n]);
      if (!rc)
        n++;
    }
  }
  for (size_t i = 0; i < n; i++)
    strata_buffer_free(held[i]);
  free(held);
  return rc;
}

/*
** The communicators: for data parallelism one per (slice, stage) over the
** replicas' copies; for tensor parallelism one per (replica, stage) over
** its slices, each slice's stage a member that posts its joins there.
*/
static int make_comms(strata_trainer_t tr) {
  const int S = tr->nstages;
  if (tr->replicas > 1 && tr->ranks) {
    TRY(strata__ranks_comms(tr)); /* the replicas live on several ranks */
  } else if (tr->replicas > 1) {
    if (!tr->comm && !(tr->comm = calloc((size_t)(tr->tp * S), sizeof *tr->comm)))
      return strata__error(STRATA_ERR_NOMEM, "out of host memory creating a trainer");
    int *devs = calloc((size_t)tr->replicas, sizeof *devs);
    if (!devs)
      return strata__error(STRATA_ERR_NOMEM, "out of host memory creating a trainer");
    int rc = STRATA_OK;
    for (int k = 0; k < tr->tp * S && !rc; k++) {
      strata_comm_free(tr->comm[k]);
      tr->comm[k] = NULL;
      if (k / S >= tr->tps[k % S])
        continue; /* a slice that stage does not have */
      for (int r = 0; r < tr->replicas; r++)
        devs[r] = tr->dev[tr->stage_rank[(r * tr->tp + k / S) * S + k % S]];
      rc = strata_comm_new(devs, tr->replicas, NULL, &tr->comm[k]);
    }
    free(devs);
    TRY(rc);
  }
  if (tr->tp > 1) {
    TRY(strata__ranks_tp_comms(tr)); /* first the groups whose slices live on several ranks */
    if (!tr->tp_comm && !(tr->tp_comm = calloc((size_t)(tr->replicas * S), sizeof *tr->tp_comm)))
      return strata__error(STRATA_ERR_NOMEM, "out of host memory creating a trainer");
    int *devs = calloc((size_t)tr->tp, sizeof *devs);
    if (!devs)
      return strata__error(STRATA_ERR_NOMEM, "out of host memory creating a trainer");
    int rc = STRATA_OK;
    for (int k = 0; k < tr->replicas * S && !rc; k++) {
      const int deg = tr->tps[k % S];
      strata_comm_free(tr->tp_comm[k]);
      tr->tp_comm[k] = NULL;
      const int s0 = k / S * tr->tp * S + k % S; /* slice 0's stage */
      if (deg == 1 || !strata__stage_mine(tr, s0) || strata__ranks_tp_spans(tr, s0))
        continue; /* a stage that is not cut joins nothing; another rank's group is made there, one across ranks
                  ** below */
      for (int t = 0; t < deg; t++)
        devs[t] = tr->dev[tr->stage_rank[(k / S * tr->tp + t) * S + k % S]];
      rc = strata_comm_new(devs, deg, NULL, &tr->tp_comm[k]);
      struct strata_comm_info info;
      if (!rc)
        rc = strata_comm_info(tr->tp_comm[k], &info);
      for (int t = 0; t < deg && !rc; t++) {
        struct strata__tp_member *m = &tr->tp_member[(k / S * tr->tp + t) * S + k % S];
        m->tr = tr;
        m->comm = tr->tp_comm[k];
        m->rank = t;
        m->async = info.asynchronous;
      }
    }
    free(devs);
    TRY(rc);
    for (int s = 0; s < strata__stages_all(tr); s++) {
      struct strata__tp_member *m = &tr->tp_member[s];
      if (tr->st[s] && strata__ranks_tp_spans(tr, s)) { /* its joins meet through the cluster */
        m->tr = tr;
        m->comm = NULL;
        m->rank = strata__stage_slice(tr, s);
        m->async = 0;
        m->across = 1;
      }
    }
  }
  tr->comm_stale = 0;
  return STRATA_OK;
}

int strata__trainer_comms_renew(strata_trainer_t tr) {
  TRY(make_comms(tr));
  pthread_mutex_lock(&tr->abort_lock);
  tr->aborted = 0;
  pthread_mutex_unlock(&tr->abort_lock);
  return STRATA_OK;
}

int strata__trainer_abort(strata_trainer_t tr, int status, const char *what) {
  pthread_mutex_lock(&tr->abort_lock);
  const int first = !tr->aborted;
  tr->aborted = 1;
  for (int s = 0; tr->comm && s < tr->tp * tr->nstages; s++)
    strata_comm_abort(tr->comm[s], status, what);
  for (int s = 0; tr->tp_comm && s < tr->replicas * tr->nstages; s++)
    strata_comm_abort(tr->tp_comm[s], status, what);
  if (tr->comm || tr->tp_comm)
    tr->comm_stale = 1;
  pthread_mutex_unlock(&tr->abort_lock);
  return first;
}

int strata__trainer_post_begin(strata_trainer_t tr) {
  pthread_mutex_lock(&tr->abort_lock);
  if (!tr->aborted)
    return STRATA_OK;
  pthread_mutex_unlock(&tr->abort_lock);
  return strata__error(STRATA_ERR_STATE, "the step failed elsewhere: its collectives were aborted");
}

void strata__trainer_post_end(strata_trainer_t tr) { pthread_mutex_unlock(&tr->abort_lock); }

/*
** The one constructor behind strata_trainer_new, _new_pipeline and
** _new_layout: a single device is 1 x 1 (no schedule), a pipeline 1 x p,
** data parallelism d x p with every replica's stages trained on its own
** micro-batches and their gradients all-reduced before the update.
*/
static int trainer_create(strata_model_t model, strata_dataset_t data, const struct strata_train_options *opts,
                          const struct plan *pl, strata_trainer_t *out) {
  if (!model || !opts || !out)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_new: NULL argument");
  TRY(check_options(opts));
  int images = model->cfg.kind != STRATA_MODEL_GPT;
  if (data)
    TRY(check_data(model, data, &images));
  if ((int64_t)pl->replicas * pl->tp * pl->pp > STRATA__MAX_RANKS ||
      (int64_t)pl->replicas * pl->tp * pl->nstages > STRATA__MAX_STAGES_ALL)
    return strata__error(STRATA_ERR_RANGE, "%d x %d x %d devices and %d stages per chain: too large to index",
                         pl->replicas, pl->pp, pl->tp, pl->nstages);
  int per_replica = 0;
  for (int p = 0; p < pl->pp; p++)
    per_replica += pl->tps ? pl->tps[p] : pl->tp;
  const int chains = pl->replicas * pl->tp, ndev = pl->replicas * per_replica, kind = pl->kind, nstages = pl->nstages;
  for (int i = 0; i < ndev && !opts->cluster; i++) /* a cluster's devices are checked against it */
    if (!strata__device_get(pl->devices[i]))
      return STRATA_ERR_NOT_FOUND;
  if (kind == STRATA_SCHEDULE_INTERLEAVED && pl->m % pl->pp)
    return strata__error(STRATA_ERR_INVALID, "interleaved schedule: micro-batches (%d) must be a multiple of the %d devices",
                         pl->m, pl->pp);
  struct strata_trainer *tr = calloc(1, sizeof *tr);
  if (!tr)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory creating a trainer");
  tr->t0 = strata__now();
  pthread_mutex_init(&tr->abort_lock, NULL);
  tr->model = model;
  tr->data = data;
  tr->opt = *opts;
  tr->images = images;
  tr->data_state = opts->seed;
  tr->rows = images ? opts->batch : opts->batch * model->cfg.context;
  tr->in_elems = images ? (size_t)(opts->batch * model->cfg.channels * model->cfg.image * model->cfg.image)
                        : (size_t)tr->rows;
  tr->replicas = pl->replicas;
  tr->tp = pl->tp;
  tr->zero = pl->zero;
  tr->chains = chains;
  tr->bucket_bytes = 4u << 20;
  const char *bucket = getenv("STRATA_GRAD_BUCKET");
  if (bucket && *bucket) {
    uint64_t v = 0;
    int prc = strata__parse_size(bucket, &v);
    if (prc || v == 0) {
      strata_trainer_free(tr);
      return strata__error(prc ? prc : STRATA_ERR_RANGE, "STRATA_GRAD_BUCKET='%s' is not a size (e.g. 4M, 512K): %s",
                           bucket, prc ? strata__parse_why() : "zero");
    }
    tr->bucket_bytes = v;
  }
  tr->pp = pl->pp;
  tr->ndev = ndev;
  tr->nstages = nstages;
  tr->m = pl->m;
  tr->mtot = pl->m * pl->replicas;
  tr->report.schedule = kind; /* the balancer and the memory plan read it */
  const size_t S_all = (size_t)nstages * (size_t)chains;
  tr->st = calloc(S_all, sizeof *tr->st);
  tr->stage_rank = calloc(S_all, sizeof *tr->stage_rank);
  tr->pools = calloc(2 * S_all, sizeof *tr->pools);
  tr->rep_split = calloc(S_all, sizeof *tr->rep_split);
  tr->rep_stage_device = calloc(S_all, sizeof *tr->rep_stage_device);
  tr->dev = calloc((size_t)ndev, sizeof *tr->dev);
  tr->tps = calloc((size_t)nstages, sizeof *tr->tps);
  tr->send_q = calloc((size_t)ndev, sizeof *tr->send_q);
  tr->rep_dev = calloc((size_t)ndev, sizeof *tr->rep_dev);
  int *split = calloc((size_t)nstages, sizeof *split);
  if (!tr->st || !tr->stage_rank || !tr->pools || !tr->rep_split || !tr->rep_stage_device || !tr->dev || !tr->tps ||
      !tr->send_q || !tr->rep_dev || !split) {
    free(split);
    strata_trainer_free(tr);
    return strata__error(STRATA_ERR_NOMEM, "out of host memory creating a trainer");
  }
  tr->report.split = tr->rep_split;
  tr->report.stage_device = tr->rep_stage_device;
  tr->report.dev = tr->rep_dev;
  for (int i = 0; i < ndev; i++)
    tr->dev[i] = pl->devices[i];
  for (int s = 0; s < nstages; s++)
    tr->tps[s] = pl->tps ? pl->tps[s % pl->pp] : pl->tp;
  int rc = STRATA_OK;
  {
    /* the ranks are the schedule's devices: each stage's rank is its device there (a stage no device holds, the
    ** rank of the slice that stands for it). One device without a schedule asked for runs the degenerate one, 1F1B
    ** over one stage (F0 B0 F1 B1 ... OPT0), through the same executor; the report says no schedule (kind 0). */
    const int run_kind = kind ? kind : STRATA_SCHEDULE_1F1B;
    if (pl->tps)
      rc = strata_schedule_generate_hybrid_ranks(run_kind, pl->pp, tr->m, nstages / pl->pp, pl->replicas, pl->tps,
                                                 pl->zero, &tr->sched);
    else
      rc = strata_schedule_generate_hybrid(run_kind, pl->pp, tr->m, nstages / pl->pp, pl->replicas, pl->tp,
                                           pl->zero, &tr->sched);
    if (!rc)
      rc = strata_schedule_validate(tr->sched);
    for (int s = 0; !rc && s < (int)S_all; s++)
      tr->stage_rank[s] = strata_schedule_stage_device(tr->sched, s);
  }
  if (!rc)
    rc = strata__ranks_new(tr, opts->cluster);
  if (!rc)
    rc = host_buffers(tr);
  if (!rc && tr->tp > 1 && !(tr->tp_member = calloc((size_t)(nstages * chains), sizeof *tr->tp_member)))
    rc = strata__error(STRATA_ERR_NOMEM, "out of host memory creating a trainer");
  if (!rc && kind) {
    if (pl->given) {
      memcpy(split, pl->split, sizeof *split * (size_t)nstages);
    } else {
      /* balance one replica over its ranks: the others are its copies (its own process balances it, the others
      ** take that split) */
      tr->ndev = pl->pp;
      if (strata__rank_mine(tr, 0) || (tr->ranks && tr->ranks->spans)) /* (spanning ranks: measured by each) */
        rc = strata__pipeline_balance(tr, split);
      tr->ndev = ndev;
      if (!rc)
        rc = strata__ranks_split(tr, split, nstages);
    }
    if (!rc && pl->trace && !(tr->trace_path = strdup(pl->trace)))
      rc = strata__error(STRATA_ERR_NOMEM, "out of host memory");
  } else {
    split[0] = model->nlayers;
  }
  if (!rc)
    rc = check_memory(tr, split);
  if (!rc)
    rc = build_stages(tr, split, kind == STRATA_SCHEDULE_ZB_H1);
  if (!rc)
    rc = strata__pipeline_prefill(tr);
  if (!rc)
    rc = warm_cache(tr);
  if (!rc)
    rc = make_comms(tr);
  free(split);
  if (rc) {
    char *msg = strdup(strata_last_error()); /* freeing may touch the message */
    strata_trainer_free(tr);
    if (msg)
      strata__error(rc, "%s", msg);
    free(msg);
    return rc;
  }
  tr->report.devices = ndev;
  tr->report.stages = strata__stages_all(tr);
  tr->report.microbatches = tr->m;
  tr->report.schedule = kind;
  if (kind)
    strata_schedule_bubble(tr->sched, &tr->report.bubble_ideal);
  for (int i = 0; i < ndev; i++)
    tr->rep_dev[i].device = strata__rank_device(tr, i);
  for (int s = 0; s < strata__stages_all(tr); s++) {
    struct strata_pipeline_device_stats *d = &tr->rep_dev[tr->stage_rank[s]];
    const struct strata__stage *st = tr->st[s];
    if (!st)
      continue; /* another rank's, or a slice another stands for */
    d->param_bytes += (uint64_t)st->nparams * 4;
    d->grad_bytes += (uint64_t)st->nparams * 4;
    d->optimizer_bytes += 2 * (uint64_t)st->chunk * 4;
    d->activation_bytes += (uint64_t)stage_inflight(tr, s) * st->slot_floats * 4;
  }
  *out = tr;
  return STRATA_OK;
}

STRATA_API int strata_trainer_new(strata_model_t model, strata_dataset_t data, const struct strata_train_options *opts,
                                  strata_trainer_t *out) {
  if (!opts)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_new: NULL argument");
  struct plan pl = {.replicas = 1, .pp = 1, .tp = 1, .kind = 0, .m = (int)opts->accum, .nstages = 1,
                    .devices = &opts->device};
  return trainer_create(model, data, opts, &pl, out);
}

STRATA_API int strata_trainer_new_pipeline(strata_model_t model, strata_dataset_t data,
                                           const struct strata_train_options *opts,
                                           const struct strata_pipeline_options *pipeline, strata_trainer_t *out) {
  if (!pipeline || !model)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_new_pipeline: NULL argument");
  struct plan pl = {.replicas = 1, .pp = pipeline->devices, .tp = 1, .m = pipeline->microbatches,
                    .trace = pipeline->trace};
  TRY(check_pipeline(pipeline, model->nlayers, &pl.kind, &pl.nstages));
  pl.devices = pipeline->device;
  for (int s = 0; pipeline->split && s < pl.nstages; s++)
    pl.given |= pipeline->split[s] != 0;
  pl.split = pipeline->split;
  return trainer_create(model, data, opts, &pl, out);
}

STRATA_API int strata_trainer_new_layout(strata_model_t model, strata_dataset_t data,
                                         const struct strata_train_options *opts, strata_layout_t layout,
                                         const char *trace, strata_trainer_t *out) {
  if (!model || !layout || !out)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_new_layout: NULL argument");
  *out = NULL;
  int ndevices = 0;
  if (opts && opts->cluster) { /* the layout names the cluster's devices */
    struct strata_cluster_info ci;
    TRY(strata_cluster_info(opts->cluster, &ci));
    ndevices = ci.device_count;
  } else {
    TRY(strata_device_count(&ndevices));
  }
  TRY(strata_layout_check(layout, model, ndevices));
  const int dp = strata_layout_dp(layout), pp = strata_layout_pp(layout);
  int *tps = calloc((size_t)pp, sizeof *tps);
  if (!tps)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory");
  int tp = 1, uniform = 1, per_replica = 0;
  for (int r = 0; r < pp; r++) {
    tps[r] = strata_layout_tp(layout, r);
    tp = tps[r] > tp ? tps[r] : tp;
    uniform &= tps[r] == tps[0];
    per_replica += tps[r];
  }
  struct plan pl = {.replicas = dp, .pp = pp, .tp = tp, .tps = uniform ? NULL : tps,
                    .zero = strata_layout_zero(layout) != 0,
                    .m = strata_layout_microbatches(layout),
                    .nstages = strata_layout_stages(layout), .trace = trace};
  /* one device and one replica: the stages one after another, no schedule; traced, a pipeline of one, whose
  ** executor writes the trace (the same arithmetic) */
  pl.kind = dp == 1 && pp == 1 && tp == 1 && !trace ? 0 : strata_layout_schedule(layout);
  if (trace) {
    if (!trace[0]) {
      free(tps);
      return strata__error(STRATA_ERR_INVALID, "layout: the trace path is empty");
    }
    if (strata__out_check(trace)) {
      free(tps);
      return strata__error_prefix(STRATA_ERR_IO, "cannot write the trace: ");
    }
  }
  /* the layout lists (replica, rank, slice); the trainer's ranks go replica by replica, slice by slice */
  int *devices = calloc((size_t)dp * (size_t)per_replica, sizeof *devices);
  if (!devices) {
    free(tps);
    return strata__error(STRATA_ERR_NOMEM, "out of host memory");
  }
  for (int r = 0, i = 0; r < dp; r++)
    for (int t = 0; t < tp; t++)
      for (int p = 0; p < pp; p++)
        if (t < tps[p])
          (void)strata_layout_device(layout, r, p, t, &devices[i++]); /* in range: checked */
  pl.devices = devices;
  pl.split = strata_layout_split(layout);
  pl.given = pl.split != NULL;
  struct strata_train_options o = *opts;
  if (!pl.kind)
    o.accum = pl.m; /* the single device runs its micro-batches one after another */
  int rc = trainer_create(model, data, &o, &pl, out);
  free(devices);
  free(tps);
  return rc;
}

STRATA_API void strata_trainer_free(strata_trainer_t tr) {
  if (!tr)
    return;
  for (int s = 0; tr->st && s < strata__stages_all(tr); s++)
    if (tr->tp_member && tr->st[s])
      strata__tp_drop(tr, s);
  for (int s = 0; tr->comm && s < tr->tp * tr->nstages; s++)
    strata_comm_free(tr->comm[s]);
  free(tr->comm);
  for (int s = 0; tr->st && s < strata__stages_all(tr); s++)
    strata__stage_free(tr->st[s]);
  free(tr->st);
  for (int s = 0; tr->tp_comm && s < tr->replicas * tr->nstages; s++)
    strata_comm_free(tr->tp_comm[s]);
  free(tr->tp_comm);
  for (int s = 0; tr->tp_member && s < strata__stages_all(tr); s++) {
    free(tr->tp_member[s].pending);
    free(tr->tp_member[s].bytes);
    free(tr->tp_member[s].posted);
    free(tr->tp_member[s].ended);
  }
  free(tr->tp_member);
  free(tr->tensor_split);
  free(tr->tps);
  strata__ranks_free(tr);
  pthread_mutex_destroy(&tr->abort_lock);
  for (int p = 0; tr->pools && p < 2 * strata__stages_all(tr); p++) {
    while (tr->pools[p].n > 0)
      strata_buffer_free(tr->pools[p].free[--tr->pools[p].n]);
    free(tr->pools[p].free);
  }
  free(tr->pools);
  for (int r = 0; tr->send_q && r < tr->ndev; r++)
    strata_queue_free(tr->send_q[r]);
  free(tr->send_q);
  free(tr->dev);
  free(tr->stage_rank);
  free(tr->rep_split);
  free(tr->rep_stage_device);
  free(tr->rep_dev);
  for (size_t i = 0; tr->host_mem && i < 3 * (size_t)tr->mtot; i++)
    strata__host_memory_free(&tr->host_mem[i]);
  free(tr->host_mem);
  free(tr->inputs);
  free(tr->targets);
  free(tr->losses);
  free(tr->mb_loss);
  free(tr->sumsq);
  strata_schedule_free(tr->sched);
  strata_schedule_free(tr->pass[0]);
  strata_schedule_free(tr->pass[1]);
  free(tr->trace_path);
  free(tr->events);
  free(tr);
}

STRATA_API int64_t strata_trainer_steps_done(strata_trainer_t tr) { return tr ? tr->step : 0; }

STRATA_API void strata_trainer_set_stop(strata_trainer_t tr, int (*stop)(void *), void *arg) {
  if (!tr)
    return;
  tr->stop = stop;
  tr->stop_arg = arg;
}

STRATA_API int strata_trainer_report(strata_trainer_t tr, struct strata_pipeline_report *r) {
  if (!tr || !r)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_report: NULL argument");
  *r = tr->report;
  return STRATA_OK;
}

/* ---- passes outside training (evaluation, logits, gradient checks) through the executor ---- */

static int finish_all(strata_trainer_t tr);
static void release_all(strata_trainer_t tr);

int strata__pass_schedule(strata_trainer_t tr, int backward, strata_schedule_t *out) {
  const int D = strata_schedule_devices(tr->sched);
  struct strata_action **lists = calloc((size_t)D, sizeof *lists);
  int *counts = calloc((size_t)D, sizeof *counts);
  int rc = lists && counts ? STRATA_OK : strata__error(STRATA_ERR_NOMEM, "out of host memory");
  for (int d = 0; d < D && !rc; d++) {
    int n = 0;
    const struct strata_action *list = strata_schedule_actions(tr->sched, d, &n);
    if (!(lists[d] = malloc(((size_t)n + 1) * sizeof *lists[d]))) {
      rc = strata__error(STRATA_ERR_NOMEM, "out of host memory");
      break;
    }
    for (int i = 0; i < n; i++) {
      struct strata_action a = list[i];
      if (a.microbatch != 0 || strata__stage_replica(tr, a.stage) != tr->home)
        continue; /* one micro-batch of the home replica; no update or gradient collective (micro-batch -1) */
      switch (a.kind) {
      case STRATA_ACTION_FORWARD:
      case STRATA_ACTION_SEND_ACT:
      case STRATA_ACTION_RECV_ACT:
      case STRATA_ACTION_TP_JOIN_FORWARD:
        break;
      case STRATA_ACTION_BACKWARD_INPUT: /* the backward whole, as one device runs it */
        a.kind = STRATA_ACTION_BACKWARD;
        /* fall through */
      case STRATA_ACTION_BACKWARD:
      case STRATA_ACTION_SEND_GRAD:
      case STRATA_ACTION_RECV_GRAD:
      case STRATA_ACTION_TP_JOIN_BACKWARD:
        if (!backward)
          continue;
        break;
      default: /* W (inside B here) */
        continue;
      }
      lists[d][counts[d]++] = a;
    }
  }
  if (!rc)
    rc = strata_schedule_with_lists(tr->sched, (const struct strata_action *const *)lists, counts, out);
  for (int d = 0; lists && d < D; d++)
    free(lists[d]);
  free(lists);
  free(counts);
  return rc;
}

/*
** Run micro-batch 0 of the home replica on `inputs` and `targets` through the stages and, with `backward`, back:
** the executor on the pass's lists, its per-row losses in tr->losses[home x m]. `forwarded` as in strata__work.
*/
static int run_pass(strata_trainer_t tr, const void *inputs, const int32_t *targets, int backward,
                    int (*forwarded)(void *, struct strata__stage *, int, int, int), void *arg) {
  if (tr->comm_stale)
    TRY(strata__trainer_comms_renew(tr));
  if (!tr->pass[backward])
    TRY(strata__pass_schedule(tr, backward, &tr->pass[backward]));
  const void **in = calloc((size_t)tr->mtot, sizeof *in);
  const int32_t **tg = calloc((size_t)tr->mtot, sizeof *tg);
  if (!in || !tg) {
    free(in);
    free(tg);
    return strata__error(STRATA_ERR_NOMEM, "out of host memory");
  }
  in[tr->home * tr->m] = inputs;
  tg[tr->home * tr->m] = targets;
  struct strata__work w = {.sched = tr->pass[backward], .inputs = in, .targets = tg, .forwarded = forwarded,
                           .arg = arg};
  int rc = strata__execute(tr, &w, NULL);
  free(in);
  free(tg);
  if (!rc)
    rc = finish_all(tr);
  release_all(tr); /* to the devices' caches, for the next pass */
  return rc;
}

/* Sum of the per-row losses of the pass's micro-batch, as strata__stage_loss adds them. */
static double pass_loss(strata_trainer_t tr) {
  double sum = 0;
  for (int64_t r = 0; r < tr->rows; r++)
    sum += tr->losses[tr->home * tr->m][r];
  return sum;
}

static int finish_all(strata_trainer_t tr) {
  int rc = STRATA_OK;
  for (int s = 0; s < strata__stages_all(tr); s++) {
    int r = tr->st[s] ? strata_queue_finish(tr->st[s]->q) : STRATA_OK; /* (another rank's, or stood for) */
    if (!rc)
      rc = r;
  }
  return rc;
}

/*
** Free every stage's slots. Every queue is waited for first, not only the
** slot's own stage's: stage s + 1's queue may still hold the copy out of
** stage s's output (or s - 1's out of s's input gradient) when a call
** failed half-way, and stage_release waits for its own stage only. Errors
** from this wait are the caller's already, or none.
*/
static void release_all(strata_trainer_t tr) {
  (void)finish_all(tr);
  for (int s = 0; s < strata__stages_all(tr); s++)
    for (int k = 0; tr->st[s] && k < tr->st[s]->nslots; k++) {
      strata__stage_release(tr->st[s], k);
      tr->st[s]->slots[k].taken = 0;
    }
}

float strata__clip_scale(const strata_trainer_t tr, float *norm) {
  double sum = 0;
  for (size_t t = 0; t < tr->ntensors; t++) {
    /* a cut tensor's sum is its slices', in slice order; a whole one is the same on every slice; with ZeRO each
    ** replica has the sums of its shard's part, added in replica order */
    double x = 0;
    for (int r = 0; r < (tr->zero ? tr->replicas : 1); r++)
      for (int k = 0; k < (tr->tensor_split[t] ? tr->tp : 1); k++)
        x += tr->sumsq[(size_t)(r * tr->tp + k) * tr->ntensors + t];
    sum += x;
  }
  *norm = (float)sqrt(sum);
  return (tr->opt.clip > 0 && *norm > tr->opt.clip) ? tr->opt.clip / *norm : 1.0f;
}

int strata__stage_optimize(strata_trainer_t tr, int s, float gscale, float lr) {
  const struct strata_train_options *o = &tr->opt;
  TRY(strata__stage_update(tr->st[s], gscale, lr, o->beta1, o->beta2, o->eps, o->weight_decay, tr->step + 1));
  return strata_queue_finish(tr->st[s]->q);
}

int strata__stage_sumsq(strata_trainer_t tr, int s) {
  /* where stage s's tensors start: its chain's row (replica 0's chains without ZeRO) */
  size_t base = (size_t)(tr->zero ? strata__stage_chain(tr, s) : strata__stage_slice(tr, s)) * tr->ntensors;
  for (int i = 0; i < s % tr->nstages; i++)
    base += (size_t)strata__home_stage(tr, 0, i)->ntensors;
  return strata__stage_grad_sumsq(tr->st[s], tr->sumsq + base);
}

/* Learning rate of step `s` (0-based): linear warm-up, then cosine to min_lr. */
static float schedule(const struct strata_train_options *o, int64_t s) {
  if (o->warmup > 0 && s < o->warmup)
    return o->lr * (float)(s + 1) / (float)o->warmup;
  double span = (double)(o->steps - o->warmup);
  double t = span > 0 ? (double)(s - o->warmup) / span : 1.0;
  if (t > 1)
    t = 1;
  return (float)(o->min_lr + 0.5 * (o->lr - o->min_lr) * (1 + cos(M_PI * t)));
}

/* One step on the micro-batches in tr->inputs and tr->targets; `state` is the data stream's after them. */
static int run_step(strata_trainer_t tr, uint64_t state, struct strata_step_stats *stats) {
  const struct strata_train_options *o = &tr->opt;
  /* d(mean loss of the step)/d(per-row loss): every replica's rows count, so
  ** that the replicas' gradients, summed, are one device's over them all */
  for (int s = 0; s < strata__stages_all(tr); s++) {
    if (!tr->st[s])
      continue; /* another rank's, or a slice another stands for */
    tr->st[s]->loss_scale = 1.0f / (float)(tr->rows * tr->mtot);
    int rc = strata__stage_zero_grads(tr->st[s]);
    if (rc) /* before the step's actions: named as they are, by device and stage */
      return device_error(rc, tr->st[s]->dev, "clearing stage %d's gradients for step %lld", s,
                          (long long)tr->step + 1);
  }
  if (tr->comm_stale)
    TRY(strata__trainer_comms_renew(tr));
  float lr = schedule(o, tr->step), norm = 0;
  struct strata__work w = {.sched = tr->sched, .inputs = (const void *const *)tr->inputs,
                           .targets = (const int32_t *const *)tr->targets, .train = 1, .lr = lr};
  int rc = strata__execute(tr, &w, &norm);
  if (!rc)
    rc = finish_all(tr);
  release_all(tr); /* the slots follow the schedule; their blocks stay in the devices' caches (warm_cache) */
  if (rc)
    return rc;
  double loss = 0;
  for (int k = 0; k < tr->mtot; k++) { /* the same sums, in the same order, as strata__stage_loss */
    tr->mb_loss[k] = 0;
    for (int64_t r = 0; r < tr->rows; r++)
      tr->mb_loss[k] += tr->losses[k][r];
  }
  TRY(strata__ranks_losses(tr)); /* other ranks' replicas' micro-batches */
  TRY(strata__ranks_report(tr)); /* and other ranks' devices' figures */
  for (int k = 0; k < tr->mtot; k++)
    loss += tr->mb_loss[k];
  if (!isfinite(norm))
    return strata__error(STRATA_ERR_RANGE, "step %lld: the gradient norm is not finite (loss %g): training diverged",
                         (long long)(tr->step + 1), loss / (double)(tr->rows * tr->mtot));
  tr->data_state = state;
  tr->step++;
  if (stats) {
    stats->step = tr->step;
    stats->loss = (float)(loss / (double)(tr->rows * tr->mtot));
    stats->grad_norm = norm;
    stats->lr = lr;
    stats->samples = (uint64_t)(o->batch * tr->mtot);
    stats->tokens = (uint64_t)(tr->rows * tr->mtot);
    stats->flops = strata_model_flops(tr->model) * (double)stats->samples;
  }
  /* the step is done and counted: a trace that cannot be written is
  ** reported, and a retry does not apply the update twice */
  if (tr->trace_path)
    return strata__trace_write(tr);
  return STRATA_OK;
}

STRATA_API int strata_trainer_step(strata_trainer_t tr, struct strata_step_stats *stats) {
  if (!tr)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_step: trainer is NULL");
  if (!tr->data)
    return strata__error(STRATA_ERR_STATE, "strata_trainer_step: the trainer was made without data");
  const int64_t ctx = tr->images ? 0 : tr->model->cfg.context;
  /* the step's micro-batches, drawn in order before anything runs: replica r takes the r-th m of them */
  uint64_t state = tr->data_state;
  for (int k = 0; k < tr->mtot; k++)
    TRY(strata_dataset_sample(tr->data, STRATA_SPLIT_TRAIN, tr->opt.batch, ctx, &state, tr->inputs[k],
                              tr->targets[k]));
  return run_step(tr, state, stats);
}

int strata__trainer_step_fixed(strata_trainer_t tr, const int32_t *inputs, size_t ninputs, const int32_t *targets,
                               size_t ntargets) {
  if (tr->images || ninputs != (size_t)tr->in_elems || ntargets != (size_t)tr->rows)
    return strata__error(STRATA_ERR_INVALID, "a step on given tokens needs %lld inputs and %lld targets of a text "
                         "model, not %zu and %zu", (long long)tr->in_elems, (long long)tr->rows, ninputs, ntargets);
  for (int k = 0; k < tr->mtot; k++) {
    memcpy(tr->inputs[k], inputs, ninputs * sizeof *inputs);
    memcpy(tr->targets[k], targets, ntargets * sizeof *targets);
  }
  return run_step(tr, tr->data_state, NULL);
}

/* Mean loss of one batch run forward through the stages (slot 0). */
static int forward_loss(strata_trainer_t tr, const void *inputs, const int32_t *targets, double *sum) {
  int rc = run_pass(tr, inputs, targets, 0, NULL, NULL);
  *sum = 0;
  if (!rc && strata__home_stage(tr, 0, tr->nstages - 1)->params) /* (else another rank's: its sum comes below) */
    *sum = pass_loss(tr);
  if (!rc)
    rc = strata__ranks_loss_sum(tr, sum);
  return rc;
}

STRATA_API int strata_trainer_eval(strata_trainer_t tr, int64_t batches, float *loss) {
  if (!tr || !loss || batches < 1)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_eval: need a trainer, an output and batches >= 1");
  if (!tr->data)
    return strata__error(STRATA_ERR_STATE, "strata_trainer_eval: the trainer was made without data");
  uint64_t state = 0x5eed5eedull ^ tr->opt.seed; /* the same validation batches every time */
  int64_t ctx = tr->images ? 0 : tr->model->cfg.context;
  double sum = 0;
  int rc = STRATA_OK;
  for (int64_t b = 0; b < batches && !rc; b++) {
    if (tr->stop && tr->stop(tr->stop_arg)) {
      rc = strata__error(STRATA_ERR_INTERRUPTED, "validation interrupted after %lld of %lld batches", (long long)b,
                         (long long)batches);
      break;
    }
    rc = strata_dataset_sample(tr->data, STRATA_SPLIT_VAL, tr->opt.batch, ctx, &state, tr->inputs[0], tr->targets[0]);
    double one = 0;
    if (!rc)
      rc = forward_loss(tr, tr->inputs[0], tr->targets[0], &one);
    sum += one;
  }
  release_all(tr);
  if (!rc)
    *loss = (float)(sum / (double)(tr->rows * batches));
  return rc;
}

/* ---- parameters in host memory, in global tensor order ---- */

/*
** Host copies of the parameters (and gradients, moments) hold whole tensors
** in global tensor order, however the trainer is cut: replica 0's stages
** one after another, each tensor assembled from its slices.
*/
static strata_buffer_t buffer_of(struct strata__stage *st, int which) {
  return which == 0 ? st->params : which == 1 ? st->grads : which == 2 ? st->m : st->v;
}

/* Whole floats of stage s (of any chain): its tensors unsliced. */
static size_t stage_full(const struct strata__stage *st) {
  size_t n = 0;
  for (int t = 0; t < st->ntensors; t++)
    n += st->tensors[t].full_n;
  return n;
}

/* Stage j of slice k's flat buffer `which` into local (nparams floats): replica 0's copy, or with ZeRO the moments
** from every replica's shard. */
static int download_flat(strata_trainer_t tr, int k, int j, int which, float *local) {
  struct strata__stage *st = strata__home_stage(tr, k, j);
  if (!tr->zero || which < 2)
    return strata_buffer_download(st->q, buffer_of(st, which), 0, local, st->nparams * 4);
  for (int r = 0; r < tr->replicas; r++) {
    struct strata__stage *x = tr->st[(r * tr->tp + k) * tr->nstages + j];
    if (!x)
      continue; /* another rank's shard: below */
    size_t at = (size_t)r * x->chunk, n = at < x->nparams ? x->nparams - at : 0;
    if (n > x->chunk)
      n = x->chunk;
    if (n)
      TRY(strata_buffer_download(x->q, buffer_of(x, which), 0, local + at, n * 4));
  }
  return strata__ranks_shards(tr, k, j, local);
}

/* Copy buffer `which` (0 params, 1 grads, 2 m, 3 v) of the home replica into host. */
static int gather(strata_trainer_t tr, int which, float *host) {
  size_t at = 0, most = 0;
  for (int s = 0; s < tr->nstages; s++)
    most = strata__home_stage(tr, 0, s)->nparams > most ? strata__home_stage(tr, 0, s)->nparams : most;
  float *local = malloc((most ? most : 1) * sizeof *local);
  if (!local)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory");
  int rc = STRATA_OK;
  for (int s = 0; s < tr->nstages && !rc; s++) {
    for (int k = 0; k < tr->tps[s] && !rc; k++) {
      struct strata__stage *st = strata__home_stage(tr, k, s);
      if (tr->zero && which >= 2) {
        rc = download_flat(tr, k, s, which, local); /* every replica's shard, from wherever it is */
      } else {
        if (st->params)
          rc = download_flat(tr, k, s, which, local);
        if (!rc) /* another rank's slice (a pipeline or a tensor-parallel group across ranks): its values from there */
          rc = strata__ranks_slice_values(tr, k, s, local, st->nparams);
      }
      size_t o = at;
      for (int t = 0; t < st->ntensors && !rc; t++) {
        const struct strata__tensor *x = &st->tensors[t];
        if (k == 0 || x->split) /* a whole tensor from slice 0: the others hold the same values */
          strata__tensor_cut(x, host + o, local + x->off, 1);
        o += x->full_n;
      }
    }
    at += stage_full(strata__home_stage(tr, 0, s));
  }
  free(local);
  return rc;
}

/* Every replica's copy of the stages, every slice, receives the same values (with ZeRO, each its shard of the
** moments). */
static int scatter(strata_trainer_t tr, int which, const float *host) {
  size_t most = 0;
  for (int s = 0; s < strata__stages_all(tr); s++)
    most = tr->st[s] && tr->st[s]->nparams > most ? tr->st[s]->nparams : most;
  float *local = malloc((most ? most : 1) * sizeof *local);
  if (!local)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory");
  int rc = STRATA_OK;
  for (int c = 0; c < tr->chains && !rc; c++) {
    size_t at = 0;
    for (int s = 0; s < tr->nstages && !rc; s++) {
      struct strata__stage *st = tr->st[c * tr->nstages + s];
      if (!st) { /* another rank's, or held by another slice: its whole tensors come after */
        at += stage_full(strata__home_stage(tr, 0, s));
        continue;
      }
      for (int t = 0; t < st->ntensors; t++) {
        const struct strata__tensor *x = &st->tensors[t];
        strata__tensor_cut(x, (float *)host + at, local + x->off, 0);
        at += x->full_n;
      }
      if (tr->zero && which >= 2) {
        size_t lo = (size_t)st->zero.rank * st->chunk, n = lo < st->nparams ? st->nparams - lo : 0;
        if (n > st->chunk)
          n = st->chunk;
        rc = n ? strata_buffer_upload(st->q, buffer_of(st, which), 0, local + lo, n * 4) : STRATA_OK;
      } else {
        rc = strata_buffer_upload(st->q, buffer_of(st, which), 0, local, st->nparams * 4);
      }
    }
  }
  free(local);
  return rc;
}

static size_t total_params(strata_trainer_t tr) {
  size_t n = 0;
  for (int s = 0; s < tr->nstages; s++)
    n += stage_full(strata__home_stage(tr, 0, s));
  return n;
}

STRATA_API int strata_trainer_params(strata_trainer_t tr, float *params, size_t *count) {
  if (!tr || !count)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_params: NULL argument");
  size_t n = total_params(tr);
  if (params) {
    if (*count < n)
      return strata__error(STRATA_ERR_RANGE, "strata_trainer_params: room for %zu floats, the model has %zu", *count, n);
    TRY(gather(tr, 0, params));
  }
  *count = n;
  return STRATA_OK;
}

STRATA_API int strata_trainer_set_params(strata_trainer_t tr, const float *params, size_t count) {
  if (!tr || !params)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_set_params: NULL argument");
  if (count != total_params(tr))
    return strata__error(STRATA_ERR_SHAPE, "strata_trainer_set_params: %zu floats given, the model has %zu", count,
                         total_params(tr));
  return scatter(tr, 0, params);
}

STRATA_API int strata_trainer_loss_grad(strata_trainer_t tr, const void *inputs, const int32_t *targets, int64_t batch,
                                        float *loss, float *grads) {
  if (!tr || !inputs || !targets || !loss)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_loss_grad: NULL argument");
  if (batch != tr->opt.batch)
    return strata__error(STRATA_ERR_SHAPE, "strata_trainer_loss_grad: batch %lld, the trainer was built for %lld",
                         (long long)batch, (long long)tr->opt.batch);
  for (int s = 0; s < strata__stages_all(tr); s++) {
    if (!tr->st[s])
      continue; /* another rank's, or a slice another stands for */
    tr->st[s]->loss_scale = 1.0f / (float)tr->rows;
    TRY(strata__stage_zero_grads(tr->st[s]));
  }
  if (grads && tr->ranks && tr->ranks->spans)
    return strata__error(STRATA_ERR_UNSUPPORTED, "a backward pass outside the pipeline schedule, over a pipeline or "
                         "tensor-parallel group across ranks, is not in this version");
  double sum = 0;
  int rc = run_pass(tr, inputs, targets, grads != NULL, NULL, NULL);
  if (!rc)
    sum = pass_loss(tr);
  if (!rc && grads)
    rc = gather(tr, 1, grads);
  release_all(tr);
  if (!rc)
    *loss = (float)(sum / (double)tr->rows);
  return rc;
}

int strata__trainer_forward_backward(strata_trainer_t tr, const void *inputs, const int32_t *targets) {
  for (int s = 0; s < strata__stages_all(tr); s++) {
    if (!tr->st[s])
      continue;
    tr->st[s]->loss_scale = 1.0f / (float)tr->rows;
    TRY(strata__stage_zero_grads(tr->st[s]));
  }
  if (tr->ranks && tr->ranks->spans)
    return strata__error(STRATA_ERR_UNSUPPORTED, "a backward pass outside the pipeline schedule, over a pipeline or "
                         "tensor-parallel group across ranks, is not in this version");
  return run_pass(tr, inputs, targets, 1, NULL, NULL);
}

/* The logits a pass's last stage leaves: each slice its columns of the vocabulary (all of it without a
** vocabulary-parallel head, read from slice 0). */
struct logits_read {
  strata_trainer_t tr;
  int64_t batch, first, count;
  float *logits;
};

static int read_logits(void *arg, struct strata__stage *last, int s, int slot, int mb) {
  (void)mb;
  const struct logits_read *lr = arg;
  const int64_t T = lr->tr->model->cfg.context, V = lr->tr->model->cfg.vocab;
  int64_t c0 = 0, vl = V;
  if (!strata__stage_vocab(last, &c0, &vl) && strata__stage_slice(lr->tr, s) > 0)
    return STRATA_OK;
  strata_mem_t lg = strata__stage_logits(last, slot);
  for (int64_t b = 0; b < lr->batch; b++)
    for (int64_t p = 0; p < lr->count; p++)
      TRY(strata_buffer_read(last->q, lg.buf, (lg.off + (size_t)((b * T + lr->first + p) * vl)) * 4,
                             lr->logits + (b * lr->count + p) * V + c0, (size_t)vl * 4));
  return strata_queue_finish(last->q);
}

STRATA_API int strata_trainer_logits(strata_trainer_t tr, const int32_t *tokens, int64_t batch, float *logits) {
  if (!tr)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_logits: NULL argument");
  return strata_trainer_logits_at(tr, tokens, batch, tr->images ? 0 : tr->model->cfg.context - 1, 1, logits);
}

STRATA_API int strata_trainer_logits_at(strata_trainer_t tr, const int32_t *tokens, int64_t batch, int64_t first,
                                        int64_t count, float *logits) {
  if (!tr || !tokens || !logits)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_logits: NULL argument");
  if (tr->images)
    return strata__error(STRATA_ERR_UNSUPPORTED, "strata_trainer_logits: '%s' is not a text model",
                         tr->model->cfg.name);
  if (tr->ranks && tr->ranks->spans)
    return strata__error(STRATA_ERR_UNSUPPORTED, "strata_trainer_logits: a pipeline or tensor-parallel group across "
                         "ranks gives no logits in this version");
  if (batch < 1 || batch > tr->opt.batch)
    return strata__error(STRATA_ERR_SHAPE, "strata_trainer_logits: batch %lld, at most %lld", (long long)batch,
                         (long long)tr->opt.batch);
  int64_t T = tr->model->cfg.context, V = tr->model->cfg.vocab;
  if (first < 0 || count < 1 || first > T - count)
    return strata__error(STRATA_ERR_RANGE, "strata_trainer_logits: positions [%lld, %lld) outside the context of %lld",
                         (long long)first, (long long)(first + count), (long long)T);
  int32_t *in = tr->inputs[0];
  for (int64_t i = 0; i < tr->rows; i++) {
    in[i] = i < batch * T ? tokens[i] : 0;
    if (in[i] < 0 || in[i] >= V) {
      release_all(tr);
      return strata__error(STRATA_ERR_RANGE, "strata_trainer_logits: token %lld at position %lld is outside the "
                           "vocabulary (%lld)", (long long)in[i], (long long)i, (long long)V);
    }
    tr->targets[0][i] = -1; /* no loss wanted */
  }
  struct logits_read lr = {.tr = tr, .batch = batch, .first = first, .count = count, .logits = logits};
  int rc = run_pass(tr, in, tr->targets[0], 0, read_logits, &lr);
  release_all(tr);
  return rc;
}

/* ---- checkpoints ---- */

static int options_json(const struct strata_train_options *o, char **out) {
  json_t *j = json_pack("{s:I, s:I, s:I, s:f, s:f, s:I, s:f, s:f, s:f, s:f, s:f}", "batch", (json_int_t)o->batch,
                        "accum", (json_int_t)o->accum, "steps", (json_int_t)o->steps, "lr", (double)o->lr, "min_lr",
                        (double)o->min_lr, "warmup", (json_int_t)o->warmup, "weight_decay", (double)o->weight_decay,
                        "beta1", (double)o->beta1, "beta2", (double)o->beta2, "eps", (double)o->eps, "clip",
                        (double)o->clip);
  if (!j)
    return strata__error(STRATA_ERR_NOMEM, "out of memory writing options");
  *out = json_dumps(j, JSON_SORT_KEYS | JSON_COMPACT);
  json_decref(j);
  return *out ? STRATA_OK : strata__error(STRATA_ERR_NOMEM, "out of memory writing options");
}

/* Every tensor of every stage, in global order. */
static const struct strata__tensor *tensor_at(strata_trainer_t tr, size_t t, size_t *host_off) {
  size_t base = 0, at = 0;
  for (int s = 0; s < tr->nstages; s++) {
    const struct strata__stage *st = strata__home_stage(tr, 0, s);
    if (t < base + (size_t)st->ntensors) {
      const struct strata__tensor *x = &st->tensors[t - base];
      for (size_t j = base; j < t; j++)
        at += st->tensors[j - base].full_n;
      *host_off = at;
      return x;
    }
    base += (size_t)st->ntensors;
    at += stage_full(st);
  }
  return NULL;
}

STRATA_API int strata_trainer_save(strata_trainer_t tr, const char *path) {
  if (!tr || !path)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_save: NULL argument");
  size_t n = total_params(tr), nt = tr->ntensors;
  float *host = malloc((3 * n + 1) * sizeof *host);
  struct strata_st_tensor *ts = calloc(3 * nt + 1, sizeof *ts);
  char *names = calloc(3 * nt + 1, 96);
  char *model_json = NULL, *opt_json = NULL;
  int rc = (!host || !ts || !names) ? strata__error(STRATA_ERR_NOMEM, "out of host memory saving a checkpoint")
                                    : STRATA_OK;
  for (int k = 0; k < 3 && !rc; k++)
    rc = gather(tr, k == 0 ? 0 : k + 1, host + (size_t)k * n);
  if (!rc)
    rc = strata_model_to_json(tr->model, &model_json);
  if (!rc)
    rc = options_json(&tr->opt, &opt_json);
  if (!rc) {
    static const char *const prefix[3] = {"", "optimizer.m.", "optimizer.v."};
    for (int k = 0; k < 3 && !rc; k++)
      for (size_t t = 0; t < nt && !rc; t++) {
        size_t off = 0;
        const struct strata__tensor *x = tensor_at(tr, t, &off);
        if (!x) {
          rc = strata__error(STRATA_ERR_INTERNAL, "tensor %zu of %zu not found", t, nt);
          break;
        }
        struct strata_st_tensor *o = &ts[(size_t)k * nt + t];
        char *nm = names + ((size_t)k * nt + t) * 96;
        snprintf(nm, 96, "%s%s", prefix[k], x->name);
        o->name = nm;
        o->ndim = x->ndim;
        memcpy(o->shape, x->full, sizeof o->shape);
        o->data = host + (size_t)k * n + off;
      }
    char step[32], seed[32], state[32];
    snprintf(step, sizeof step, "%" PRId64, tr->step);
    snprintf(seed, sizeof seed, "%" PRIu64, tr->opt.seed);
    snprintf(state, sizeof state, "%" PRIu64, tr->data_state);
    struct strata_st_meta meta[] = {{"format", CHECKPOINT_FORMAT}, {"model", model_json}, {"options", opt_json},
                                    {"step", step},                {"seed", seed},        {"data_state", state}};
    if (!rc && strata__ranks_writer(tr)) /* one file for the whole job, from rank 0's gathered tensors */
      rc = strata_safetensors_write(path, ts, 3 * nt, meta, sizeof meta / sizeof meta[0]);
    rc = strata__ranks_status(tr, rc); /* every rank learns whether it was written */
  }
  free(model_json);
  free(opt_json);
  free(host);
  free(ts);
  free(names);
  return rc;
}

/* Parse an unsigned decimal metadata field ('step' at most INT64_MAX). */
static int meta_u64(strata_safetensors_t f, const char *path, const char *key, uint64_t *v) {
  const char *s = strata_safetensors_meta(f, key);
  if (!s || !*s)
    return strata__error(STRATA_ERR_PARSE, "%s: checkpoint metadata has no '%s'", path, key);
  int rc = strata__parse_uint(s, strcmp(key, "step") == 0 ? (uint64_t)INT64_MAX : UINT64_MAX, v);
  if (rc)
    return strata__error(STRATA_ERR_PARSE, "%s: checkpoint metadata '%s' = '%s' is not a number: %s", path, key, s,
                         strata__parse_why());
  return STRATA_OK;
}

STRATA_API int strata_trainer_load(strata_trainer_t tr, const char *path) {
  if (!tr || !path)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_load: NULL argument");
  strata_safetensors_t f = NULL;
  TRY(strata_safetensors_read(path, &f));
  size_t n = total_params(tr);
  float *host = NULL;
  char *want = NULL;
  int rc = STRATA_OK;
  const char *format = strata_safetensors_meta(f, "format");
  if (!format || strcmp(format, CHECKPOINT_FORMAT) != 0)
    rc = strata__error(STRATA_ERR_PARSE, "%s: not a strata checkpoint (metadata 'format' is %s%s%s, want %s)", path,
                       format ? "'" : "", format ? format : "missing", format ? "'" : "", CHECKPOINT_FORMAT);
  /* the model must be the same one (its name aside) */
  if (!rc)
    rc = strata_model_to_json(tr->model, &want);
  if (!rc) {
    const char *have = strata_safetensors_meta(f, "model");
    json_t *a = have ? json_loads(have, 0, NULL) : NULL, *b = json_loads(want, 0, NULL);
    if (a && b) {
      json_object_del(a, "name");
      json_object_del(b, "name");
    }
    if (!a || !b || !json_equal(a, b))
      rc = strata__error(STRATA_ERR_SHAPE, "%s: the checkpoint holds model %s, not this one (%s)", path,
                         have ? have : "(none)", want);
    json_decref(a);
    json_decref(b);
  }
  uint64_t step = 0, seed = 0, state = 0;
  if (!rc)
    rc = meta_u64(f, path, "step", &step);
  if (!rc)
    rc = meta_u64(f, path, "seed", &seed);
  if (!rc)
    rc = meta_u64(f, path, "data_state", &state);
  if (!rc && !(host = malloc((3 * n + 1) * sizeof *host)))
    rc = strata__error(STRATA_ERR_NOMEM, "out of host memory loading a checkpoint");
  static const char *const prefix[3] = {"", "optimizer.m.", "optimizer.v."};
  for (int k = 0; k < 3 && !rc; k++)
    for (size_t t = 0; t < tr->ntensors && !rc; t++) {
      size_t off = 0;
      const struct strata__tensor *x = tensor_at(tr, t, &off);
      if (!x) {
        rc = strata__error(STRATA_ERR_INTERNAL, "tensor %zu of %zu not found", t, tr->ntensors);
        break;
      }
      char nm[96];
      snprintf(nm, sizeof nm, "%s%s", prefix[k], x->name);
      int ndim;
      int64_t shape[STRATA_ST_MAX_DIMS];
      const float *data;
      rc = strata_safetensors_get(f, nm, &ndim, shape, &data);
      if (rc == STRATA_ERR_NOT_FOUND)
        rc = strata__error(STRATA_ERR_PARSE, "%s: tensor '%s' is missing", path, nm);
      else if (!rc && (ndim != x->ndim || memcmp(shape, x->full, (size_t)ndim * sizeof *shape) != 0))
        rc = strata__error(STRATA_ERR_SHAPE, "%s: tensor '%s' has the wrong shape", path, nm);
      if (!rc)
        memcpy(host + (size_t)k * n + off, data, x->full_n * 4);
    }
  /* only now, with everything read and checked, overwrite the trainer */
  for (int k = 0; k < 3 && !rc; k++)
    rc = scatter(tr, k == 0 ? 0 : k + 1, host + (size_t)k * n);
  if (!rc) {
    tr->step = (int64_t)step;
    tr->opt.seed = seed;
    tr->data_state = state;
  }
  free(want);
  free(host);
  strata_safetensors_free(f);
  return rc;
}
