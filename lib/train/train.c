/* SPDX-License-Identifier: MIT */
/* train.c — the trainer API: options, the trainer made from a model and a layout (stages on their devices, schedule,
** communicators, memory plan), its training step through the executor, and its end. Passes are in pass.c, the update
** in optimizer.c, parameters in params.c, checkpoints in state.c. */
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
  if (o->precision != STRATA_FLOAT32 && o->precision != STRATA_BFLOAT16)
    return strata__error(STRATA_ERR_INVALID, "precision %d: float32 (STRATA_FLOAT32) or bfloat16 (STRATA_BFLOAT16)",
                         o->precision);
  if (o->grad_reduce != STRATA_FLOAT32 && o->grad_reduce != STRATA_BFLOAT16)
    return strata__error(STRATA_ERR_INVALID, "grad_reduce %d: float32 (STRATA_FLOAT32) or bfloat16 (STRATA_BFLOAT16)",
                         o->grad_reduce);
  if (o->recompute < STRATA_RECOMPUTE_NONE || o->recompute > STRATA_RECOMPUTE_FULL)
    return strata__error(STRATA_ERR_INVALID, "recompute %d: none, selective or full (enum strata_recompute)",
                         o->recompute);
  if (o->sp != 0 && o->sp != 1)
    return strata__error(STRATA_ERR_INVALID, "sp %d: 0 or 1 (sequence parallelism off or on)", o->sp);
  return STRATA_OK;
}

/* The model and the data must describe the same task. */
static int check_data(strata_model_t model, strata_dataset_t data, int *images) {
  struct strata_dataset_info di;
  TRY(strata_dataset_info(data, &di));
  const struct strata_model_config *c = &model->cfg;
  *images = !strata__model_text(c);
  if (*images && di.kind != STRATA_DATA_IMAGES)
    return strata__error(STRATA_ERR_INVALID, "model '%s' (%s) needs image data, the dataset holds text", c->name,
                         c->kind == STRATA_MODEL_MLP ? "mlp" : "cnn");
  if (!*images && di.kind != STRATA_DATA_TEXT)
    return strata__error(STRATA_ERR_INVALID, "model '%s' is a %s and needs text data", c->name,
                         c->kind == STRATA_MODEL_LLAMA ? "llama" : "GPT");
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
    struct strata__cut cut = strata__trainer_cut(tr, s);
    int rc = strata__stage_new(tr->model, first, last, dev, tr->opt.batch, tr->opt.seed, split_backward, &cut,
                               &tr->st[s]);
    if (rc == STRATA_ERR_DEVICE_MEMORY)
      rc = strata__trainer_explain_memory(tr, first, last, dev);
    else if (rc) /* a device that fails while the stage is set up: named, with the stage */
      rc = device_error(rc, dev, "setting up stage %d (layers %d-%d)", s, first, last - 1);
    if (rc)
      return rc;
    if (strata__stage_tp(tr, s) > 1) {
      tr->st[s]->join = strata__tp_join;
      tr->st[s]->join_wait = strata__tp_join_wait;
      tr->st[s]->seq = strata__tp_seq;
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
      tr->tensor_split[t++] = strata__home_stage(tr, 0, s)->tensors[j].split != STRATA__SPLIT_NONE
                                  ? strata__home_stage(tr, 0, s)->tensors[j].copies
                                  : 0;
  return STRATA_OK;
}

static int check_pipeline(const struct strata_pipeline_options *pp, int nlayers, int *kind, int *nstages) {
  if (pp->devices < 1 || pp->devices > STRATA__MAX_RANKS)
    return strata__error(STRATA_ERR_INVALID, "pipeline: %d devices (1..%d)", pp->devices, STRATA__MAX_RANKS);
  if (!pp->device)
    return strata__error(STRATA_ERR_INVALID, "pipeline: no device list");
  *kind = pp->schedule ? pp->schedule : STRATA_SCHEDULE_1F1B;
  int v = strata_schedule_kind_stages_per_device(*kind, pp->virtual_stages);
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
  int zero;                                  /* the ZeRO stage over the replicas (0 none, 1, 2) */
  const int *devices;                        /* [replicas x sum(tps)]: replica by replica, slice by slice, rank by
                                             ** rank (slice t's ranks those with more than t slices) */
  const int *split;                          /* [nstages], when given */
  int given;                         /* split given (else balanced) */
  const char *trace;
};

/* Sequence parallelism: the same tp > 1 on every pipeline rank (the ranks' messages carry 1/tp of the rows), tp
** dividing the context, a GPT, no slabs, a whole backward, one process. */
static int check_seqpar(strata_model_t model, const struct strata_train_options *opts, const struct plan *pl) {
  for (int p = 0; p < pl->pp; p++) {
    const int t = pl->tps ? pl->tps[p] : pl->tp;
    if (t < 2)
      return strata__error(STRATA_ERR_INVALID, "sequence parallelism needs tensor parallelism: tp > 1 on every "
                           "pipeline rank (rank %d has tp %d)", p, t);
    if (t != pl->tp)
      return strata__error(STRATA_ERR_UNSUPPORTED, "sequence parallelism needs the same tp on every pipeline rank "
                           "(rank %d has tp %d, the widest %d)", p, t, pl->tp);
  }
  if (opts->spatial > 1)
    return strata__error(STRATA_ERR_UNSUPPORTED, "sequence parallelism with spatial slabs: the slabs cut images, "
                         "not sequences");
  if (opts->cluster)
    return strata__error(STRATA_ERR_UNSUPPORTED, "sequence parallelism across MPI ranks is not built yet: run its "
                         "tp slices in one process");
  return strata__seqpar_check(model, pl->tp, strata_schedule_kind_split_backward(pl->kind));
}

/* One more buffer of `bytes` on `dev` into the growing array *held (*n of *cap): warm_cache's allocations. */
static int hold_buffer(strata_buffer_t **held, size_t *n, size_t *cap, int dev, size_t bytes) {
  if (*n == *cap) {
    size_t nc = *cap ? 2 * *cap : 64;
    strata_buffer_t *g = realloc(*held, nc * sizeof *g);
    if (!g)
      return strata__error(STRATA_ERR_NOMEM, "out of host memory creating a trainer");
    *held = g;
    *cap = nc;
  }
  int rc = strata_buffer_new(dev, bytes, &(*held)[*n]);
  if (!rc)
    ++*n;
  return rc;
}

/*
** Leave in each device's block cache what the schedule may hold at once:
** every stage's activations for the micro-batches in flight and the boundary
** gradients that may outlive them, a split backward's dsave regions (the
** memory plan's counts). Which of them
** are live together depends on the threads' timing; warmed up front, no
** step asks the backend for one, however it is timed.
*/
static int warm_cache(strata_trainer_t tr) {
  size_t cap = 0, n = 0;
  strata_buffer_t *held = NULL;
  int rc = STRATA_OK;
  /* a V's device (ZB-V, DualPipeV) holds its two stages' peaks at different points: it warms what its list holds at
  ** once at its heaviest point, as the memory plan counts it */
  const int S = strata__stages_all(tr);
  int *at = NULL;
  if (tr->report.schedule == STRATA_SCHEDULE_ZBV || tr->report.schedule == STRATA_SCHEDULE_DUALPIPEV) {
    double *w = calloc((size_t)S, sizeof *w);
    at = calloc((size_t)S, sizeof *at);
    for (int s = 0; w && at && s < S; s++)
      w[s] = tr->st[s] ? (double)tr->st[s]->slot_units : 0;
    for (int r = 0; w && at && r < tr->ndev; r++) {
      double top;
      strata_schedule_device_peak(tr->sched, r, w, &top, at);
    }
    if (!w) {
      free(at);
      at = NULL;
    }
    free(w);
  }
  for (int s = 0; s < S && !rc; s++) {
    struct strata__stage *st = tr->st[s];
    if (!st)
      continue; /* another rank's, or a slice another stands for */
    int k = at ? at[s] : strata__stage_inflight(tr, s), kg = k + !strata__stage_first(tr, s);
    for (int i = 0; i < k + (st->grad_units ? kg : 0) && !rc; i++) {
      rc = hold_buffer(&held, &n, &cap, st->dev, (i < k ? st->slot_units : st->grad_units) * 4);
    }
  }
  /* a split backward's dsave regions: the device's list's most at once, of the one size its stages take */
  for (int r = 0; r < tr->ndev && !rc; r++) {
    const size_t units = strata__rank_dsave_units(tr, r);
    int dev = -1;
    for (int st = 0; st < S && dev < 0; st++)
      if (tr->st[st] && tr->stage_rank[st] == r)
        dev = tr->st[st]->dev;
    for (int i = 0; units && dev >= 0 && i < strata__rank_pending(tr, r) && !rc; i++) {
      rc = hold_buffer(&held, &n, &cap, dev, units * 4);
    }
  }
  for (size_t i = 0; i < n; i++)
    strata_buffer_free(held[i]);
  free(held);
  free(at);
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
  int images = !strata__model_text(&model->cfg);
  if (data)
    TRY(check_data(model, data, &images));
  if ((int64_t)pl->replicas * pl->tp * pl->pp > STRATA__MAX_RANKS ||
      (int64_t)pl->replicas * pl->tp * pl->nstages > STRATA__MAX_STAGES_ALL)
    return strata__error(STRATA_ERR_RANGE, "%d x %d x %d devices and %d stages per chain: too large to index",
                         pl->replicas, pl->pp, pl->tp, pl->nstages);
  if (opts->grad_reduce == STRATA_BFLOAT16 && pl->replicas < 2)
    return strata__error(STRATA_ERR_INVALID, "a bf16 gradient reduction needs data parallelism (dp 2 or more): with "
                         "one replica there is no gradient all-reduce");
  if (opts->recompute && !strata__model_text(&model->cfg))
    return strata__error(STRATA_ERR_UNSUPPORTED, "recompute %s is for GPT and llama blocks; model '%s' (%s) keeps "
                         "its activations (recompute none)", strata_recompute_name(opts->recompute), model->cfg.name,
                         model->cfg.kind == STRATA_MODEL_MLP ? "an MLP" : "a CNN");
  if (opts->grad_reduce == STRATA_BFLOAT16 && opts->cluster)
    return strata__error(STRATA_ERR_UNSUPPORTED, "a bf16 gradient reduction across MPI ranks is not built yet: reduce "
                         "in float32");
  if (pl->zero < 0 || pl->zero > 3)
    return strata__error(STRATA_ERR_INVALID, "ZeRO stage %d: 1, 2 or 3", pl->zero);
  if (pl->zero >= 3 && opts->cluster)
    return strata__error(STRATA_ERR_UNSUPPORTED, "ZeRO-3 across MPI ranks is not in this version: each replica "
                         "gathers the weights from the others' devices in its own process (use ZeRO-2)");
  if (opts->sp)
    TRY(check_seqpar(model, opts, pl));
  if (pl->zero >= 2 && opts->grad_reduce == STRATA_BFLOAT16)
    return strata__error(STRATA_ERR_UNSUPPORTED, "ZeRO-2 reduces each weight's gradients in float32 as the "
                         "backward writes them: a bf16 gradient reduction is not built for it (use ZeRO-1 or reduce in "
                         "float32)");
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
  tr->spatial = opts->spatial > 1 ? opts->spatial : 1;
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
  tr->pools = calloc(3 * S_all, sizeof *tr->pools);
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
    tr->tps[s] = pl->tps ? pl->tps[strata_schedule_kind_stage_device(kind, pl->pp, s)] : pl->tp;
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
    if (!rc && opts->recompute) { /* an RC before every backward: the executor, the trace and the simulator see it */
      strata_schedule_t with;
      rc = strata_schedule_with_recompute(tr->sched, &with);
      strata_schedule_free(tr->sched);
      tr->sched = rc ? NULL : with;
    }
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
    rc = strata__trainer_check_memory(tr, split);
  if (!rc)
    rc = build_stages(tr, split, strata_schedule_kind_split_backward(kind));
  if (!rc) /* a split backward's dsave regions: one size a device */
    strata__trainer_dsave_sizes(tr);
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
    struct strata_train_device_stats *d = &tr->rep_dev[tr->stage_rank[s]];
    const struct strata__stage *st = tr->st[s];
    if (!st)
      continue; /* another rank's, or a slice another stands for */
    /* ZeRO-3: the shard of the parameters and the window's region: the weights a layer reads, the next gathered */
    d->param_bytes +=
        st->zero3 ? ((uint64_t)st->chunk + strata__window_floats(st->gwin)) * 4 : (uint64_t)st->nparams * 4;
    /* ZeRO-2: the shard of the reduced sums, one layer's window and a tied stage's embedding gradients */
    d->grad_bytes += st->zero2 ? ((uint64_t)st->chunk + st->gwin + st->tied_n) * 4 : (uint64_t)st->nparams * 4;
    d->optimizer_bytes += 2 * (uint64_t)st->chunk * 4;
    d->activation_bytes += (uint64_t)strata__stage_inflight(tr, s) * st->slot_units * 4;
    if (st->rcbuf) /* the recomputation's one block (as the memory model counts it: strata__stage_need) */
      d->activation_bytes += (uint64_t)st->rc_units * 4;
  }
  /* a split backward's dsave regions: as many as the device's list keeps a BI done and its W pending at once, over
  ** its stages together (their BIs take regions of one size from the device's cache, warmed with that many) */
  for (int r = 0; r < ndev; r++)
    tr->rep_dev[r].activation_bytes += (uint64_t)strata__rank_pending(tr, r) * strata__rank_dsave_units(tr, r) * 4;
  /* a V's device (ZB-V, DualPipeV) holds, of its two stages' micro-batches in flight, what its list holds at once,
  ** as the memory plan counts it (memory.c), not each stage's peak added up */
  if (kind == STRATA_SCHEDULE_ZBV || kind == STRATA_SCHEDULE_DUALPIPEV) {
    const int S = strata__stages_all(tr);
    double *w = calloc((size_t)S, sizeof *w);
    for (int r = 0; w && r < ndev; r++) {
      double own = 0, joint = 0;
      for (int s = 0; s < S; s++) {
        w[s] = tr->st[s] && tr->stage_rank[s] == r ? (double)tr->st[s]->slot_units * 4 : 0;
        own += strata__stage_inflight(tr, s) * w[s];
      }
      if (strata_schedule_device_peak(tr->sched, r, w, &joint, NULL) == STRATA_OK && joint < own)
        tr->rep_dev[r].activation_bytes -= (uint64_t)(own - joint);
    }
    free(w);
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
  if (opts->spatial > 1)
    return strata__error(STRATA_ERR_INVALID, "spatial %d: slabs run on a layout of tp %d (strata_trainer_new_layout)",
                         opts->spatial, opts->spatial);
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
  struct strata_train_options sopts; /* the options with the slabs of the layout or of the options */
  if (opts && (opts->spatial > 1 || strata_layout_spatial(layout) > 1)) {
    sopts = *opts;
    if (sopts.spatial > 1 && strata_layout_spatial(layout) > 1 && sopts.spatial != strata_layout_spatial(layout))
      return strata__error(STRATA_ERR_INVALID, "spatial %d in the options, %d in the layout", sopts.spatial,
                           strata_layout_spatial(layout));
    sopts.spatial = sopts.spatial > 1 ? sopts.spatial : strata_layout_spatial(layout);
    opts = &sopts;
    TRY(strata__spatial_check(model, opts, layout, ndevices)); /* the slices are slabs: their checks, not tp's */
  } else {
    TRY(strata_layout_check(layout, model, ndevices));
  }
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
                    .zero = strata_layout_zero(layout),
                    .m = strata_layout_microbatches(layout),
                    .nstages = strata_layout_stages(layout), .trace = trace};
  /* one device and one replica: the degenerate schedule, reported as none (kind 0); traced, the layout's schedule
  ** and a trace (the same arithmetic either way: one stage runs F B F B ... through the same executor) */
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
  if (strata_layout_precision(layout) == STRATA_BFLOAT16)
    o.precision = STRATA_BFLOAT16; /* a layout that states bf16 is trained in it; one that states nothing takes opts' */
  if (strata_layout_recompute(layout))
    o.recompute = strata_layout_recompute(layout); /* likewise */
  if (strata_layout_sp(layout))
    o.sp = 1; /* likewise */
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
    free(tr->tp_member[s].op);
    free(tr->tp_member[s].later);
  }
  free(tr->tp_member);
  free(tr->tensor_split);
  free(tr->tps);
  strata__ranks_free(tr);
  pthread_mutex_destroy(&tr->abort_lock);
  for (int p = 0; tr->pools && p < 3 * strata__stages_all(tr); p++) {
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

STRATA_API int strata_trainer_report(strata_trainer_t tr, struct strata_train_report *r) {
  if (!tr || !r)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_report: NULL argument");
  *r = tr->report;
  return STRATA_OK;
}

int strata__trainer_finish_all(strata_trainer_t tr) {
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
void strata__trainer_release_all(strata_trainer_t tr) {
  (void)strata__trainer_finish_all(tr);
  for (int s = 0; s < strata__stages_all(tr); s++)
    for (int k = 0; tr->st[s] && k < tr->st[s]->nslots; k++) {
      strata__stage_release(tr->st[s], k);
      tr->st[s]->slots[k].taken = 0;
    }
}

/* A step's figures into the report (wall time, each device's compute seconds, peak memory and micro-batches in
** flight, the bubble) and, traced, each device's idle gaps between its events of the step into the trace. */
static void record_step(strata_trainer_t tr, const struct strata__work_done *done) {
  struct strata_train_report *rep = &tr->report;
  rep->wall_s = done->t_end - done->t_start;
  double busy = 0;
  for (int r = 0; r < tr->ndev; r++) {
    tr->rep_dev[r].busy_s = done->busy[r];
    busy += done->busy[r];
    if (strata__rank_mine(tr, r)) /* (another rank's device: its figures are there) */
      strata_device_memory(tr->dev[r], NULL, &tr->rep_dev[r].peak_bytes, NULL);
    tr->rep_dev[r].peak_inflight = 0;
  }
  for (int s = 0; s < strata__stages_all(tr); s++) {
    struct strata_train_device_stats *d = &tr->rep_dev[tr->stage_rank[s]];
    if (done->peak[s] > d->peak_inflight)
      d->peak_inflight = done->peak[s];
  }
  rep->bubble = rep->wall_s > 0 ? 1.0 - busy / ((double)tr->ndev * rep->wall_s) : 0;
  if (!tr->trace_path)
    return;
  /* idle time: the gaps between a device's compute and receive events in this step */
  size_t n0 = tr->nevents;
  for (int r = 0; r < tr->ndev; r++) {
    if (!strata__rank_mine(tr, r))
      continue; /* another rank's device: that rank counts its idle time */
    double last = done->t_start;
    for (size_t e = 0; e < n0; e++) {
      struct strata__trace_event *ev = &tr->events[e];
      if (ev->tid != 2 * r || ev->step != tr->step)
        continue;
      double start = tr->t0 + ev->ts * 1e-6;
      if (start > last + 1e-6)
        strata__trace_add(tr, "idle", "idle", last, start, 2 * r);
      last = tr->t0 + (ev->ts + ev->dur) * 1e-6;
    }
    if (done->t_end > last + 1e-6)
      strata__trace_add(tr, "idle", "idle", last, done->t_end, 2 * r);
  }
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
    int rc = strata__stage_clear_grads(tr->st[s]); /* (the weight-gradient GEMMs write theirs first: beta 0) */
    if (rc) /* before the step's actions: named as they are, by device and stage */
      return device_error(rc, tr->st[s]->dev, "clearing stage %d's gradients for step %lld", s,
                          (long long)tr->step + 1);
  }
  if (tr->comm_stale)
    TRY(strata__trainer_comms_renew(tr));
  const uint64_t waits0 = strata__host_waits();
  float lr = strata__lr_at(o, tr->step), norm = 0;
  struct strata__work w = {.sched = tr->sched, .inputs = (const void *const *)tr->inputs,
                           .targets = (const int32_t *const *)tr->targets, .losses = tr->losses,
                           .in_elems = tr->in_elems, .rows = tr->rows, .train = 1, .lr = lr};
  double *busy = calloc((size_t)tr->ndev, sizeof *busy);
  int *peak = calloc((size_t)strata__stages_all(tr), sizeof *peak);
  struct strata__work_done done = {.busy = busy, .peak = peak};
  int rc = busy && peak ? strata__execute(tr, &w, &done) : strata__error(STRATA_ERR_NOMEM, "out of host memory");
  if (!rc) {
    norm = done.grad_norm;
    record_step(tr, &done);
  }
  free(busy);
  free(peak);
  if (!rc)
    rc = strata__trainer_finish_all(tr);
  strata__trainer_release_all(tr); /* the slots follow the schedule; their blocks stay in the devices' caches (warm_cache) */
  tr->report.host_waits = strata__host_waits() - waits0;
  if (rc)
    return rc;
  double loss = 0;
  for (int k = 0; k < tr->mtot; k++)
    tr->mb_loss[k] = strata__trainer_rows_loss(tr, k);
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
