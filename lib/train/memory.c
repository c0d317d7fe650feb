/* SPDX-License-Identifier: MIT */
/* memory.c — the trainer's memory plan: what each stage needs on its device (parameters, gradients, moments, the
** activations and boundary gradients the schedule keeps in flight, receive buffers), checked before anything is
** allocated, and said in full when a stage does not fit. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/checkpoint.h>
#include <strata/train.h>

#include "core/file.h"
#include "core/parse.h"
#include "device/registry.h"
#include "train/ranks.h"
#include "train/trainer.h"

/* When a stage does not fit: say what the whole stage needs, not only the allocation that failed. */
int strata__trainer_explain_memory(strata_trainer_t tr, int first, int last, int dev) {
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

/*
** The largest activation on device r, as the memory model lays its stages out (split: layers per stage of a chain):
** the layer that keeps the most for one micro-batch, said as "; its largest activation is NAME's (SHAPE per image: X
** MiB kept for micro-batches of B)" into buf, with a hint for a cnn on whole images (slabs cut a layer's activations
** by rows). Empty when the figures cannot be had (the check's own message stands alone then).
*/
static void largest_activation(strata_trainer_t tr, const int *split, int r, char *buf, size_t size) {
  const struct strata_model *m = tr->model;
  buf[0] = 0;
  struct strata__layer_mem *mem = calloc(2 * (size_t)m->nlayers, sizeof *mem);
  int best = -1, slab = 0;
  size_t most = 0;
  for (int s = 0; mem && s < strata__stages_all(tr); s++) {
    int first = 0;
    for (int j = 0; j < s % tr->nstages; j++)
      first += split[j];
    const struct strata__cut cut = strata__trainer_cut(tr, s);
    if (tr->stage_rank[s] != r || !strata__stage_held(tr, s) ||
        strata__stage_layer_mems(m, tr->opt.batch, &cut, mem, mem + m->nlayers, NULL))
      continue;
    for (int i = first; i < first + split[s % tr->nstages]; i++)
      if (best < 0 || mem[i].kept > most)
        best = i, most = mem[i].kept, slab = cut.sp.rank;
  }
  free(mem);
  if (best < 0)
    return;
  const struct strata__layer *L = &m->layers[best];
  char shape[96] = "";
  if (L->kind == STRATA__LAYER_CONV) { /* its convolution's output, before pooling (what slabs cut by rows) */
    int64_t o0 = 0, rows = L->ch / L->pool;
    if (tr->spatial > 1) /* the slab's rows of it */
      strata__slab_share(L->ch / L->pool, tr->spatial, slab, &o0, &rows);
    snprintf(shape, sizeof shape, "its %lld x %lld x %lld output per image%s: ", (long long)L->k,
             (long long)(rows * L->pool), (long long)L->cw, tr->spatial > 1 ? " on its slab" : "");
  }
  snprintf(buf, size, "; its largest activation is %s's (%s%.1f MiB kept for micro-batches of %lld)%s", L->info.name,
           shape, 4.0 * (double)most / 1048576.0, (long long)tr->opt.batch,
           m->cfg.kind == STRATA_MODEL_CNN && m->cfg.gap && tr->spatial <= 1
               ? ": spatial slabs cut it by rows (--spatial 2 or more)"
               : "");
}

/* Micro-batches stage s keeps in flight at most: the schedule's peak (at least one). */
int strata__stage_inflight(strata_trainer_t tr, int s) {
  int k = 1;
  if (strata_schedule_peak_inflight(tr->sched, s, &k) || k < 1)
    k = 1;
  return k;
}

/* Split backward: stage s's micro-batches with their BI done and their W pending at most (its dsave regions). */
int strata__stage_pending(strata_trainer_t tr, int s) {
  int k = 0;
  if (strata_schedule_peak_pending(tr->sched, s, &k) || k < 0)
    k = 0;
  return k;
}

/* Split backward: device r's micro-batches with their BI done and their W pending at most, over its stages together. */
int strata__rank_pending(strata_trainer_t tr, int r) {
  int k = 0;
  if (!strata_schedule_kind_split_backward(tr->report.schedule) || strata_schedule_device_pending(tr->sched, r, &k) ||
      k < 0)
    k = 0;
  return k;
}

/* The units of one dsave region on rank r: the largest of its stages' (0 without a split backward). */
size_t strata__rank_dsave_units(strata_trainer_t tr, int r) {
  size_t most = 0;
  for (int s = 0; s < strata__stages_all(tr); s++)
    if (tr->st[s] && tr->stage_rank[s] == r && tr->st[s]->split && tr->st[s]->dsave_units > most)
      most = tr->st[s]->dsave_units;
  return most;
}

void strata__trainer_dsave_sizes(strata_trainer_t tr) {
  for (int s = 0; s < strata__stages_all(tr); s++)
    if (tr->st[s])
      tr->st[s]->dsave_alloc = strata__rank_dsave_units(tr, tr->stage_rank[s]);
}

void strata__trainer_place(strata_trainer_t tr, int s, struct strata__stage_place *p) {
  p->inflight = strata__stage_inflight(tr, s);
  p->pending = strata__stage_pending(tr, s);
  p->first = strata__stage_first(tr, s);
  p->last = strata__stage_last(tr, s);
  p->prev_remote = !p->first && tr->stage_rank[s - 1] != tr->stage_rank[s];
  p->prev_inflight = p->first ? 0 : strata__stage_inflight(tr, strata__stage_owner(tr, s - 1));
  p->next_remote = !p->last && tr->stage_rank[s + 1] != tr->stage_rank[s];
  /* output buffers (out_apart): one a copy thread empties as it goes, or what the list hands over on the device */
  p->outs = 0;
  if (!p->last && (p->next_remote || strata_schedule_peak_handoff(tr->sched, s, &p->outs) || p->outs < 1))
    p->outs = 1;
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
int strata__trainer_check_memory(strata_trainer_t tr, const int *split) {
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
  struct strata__stage_bytes b;
  int split_backward = strata_schedule_kind_split_backward(tr->report.schedule);
  /* each stage's activations of one micro-batch, and each device's stages' peaks of them added up */
  double *per_mb = calloc((size_t)strata__stages_all(tr), sizeof *per_mb), *own = calloc((size_t)tr->ndev, sizeof *own);
  uint64_t *dsave = calloc((size_t)tr->ndev, sizeof *dsave);
  if (!per_mb || !own || !dsave) {
    free(per_mb);
    free(own);
    free(dsave);
    return strata__error(STRATA_ERR_NOMEM, "out of host memory planning memory");
  }
  int rc = STRATA_OK;
  for (int s = 0, first = 0; s < strata__stages_all(tr) && !rc; s++) {
    const int n = split[s % tr->nstages];
    if (strata__stage_first(tr, s))
      first = 0;
    if (!strata__stage_held(tr, s)) {
      first += n;
      continue;
    }
    struct strata__cut cut = strata__trainer_cut(tr, s);
    if ((rc = strata__stage_plan(tr->model, first, first + n, tr->opt.batch, split_backward, &cut, &b)))
      break;
    int r = tr->stage_rank[s];
    struct strata__stage_place place;
    strata__trainer_place(tr, s, &place);
    place.pending = 0; /* (a split backward's dsave regions: the device's, below) */
    need[r] += strata__stage_need(&b, &place, &act[r], &bufs[r]);
    dsave[r] = b.dsave > dsave[r] ? b.dsave : dsave[r];
    /* a micro-batch's activations, held from its F to its B (or W) in the list's order (its boundary gradients may
    ** outlive it as the threads go: they stay at each stage's own peak) */
    per_mb[s] = (double)b.slot;
    own[r] += (place.inflight > 1 ? place.inflight : 1) * per_mb[s];
    params[r] += b.params;
    if (!nst[r]++)
      lo[r] = first;
    hi[r] = first + n - 1;
    first += n;
  }
  /* a V's device (ZB-V, DualPipeV) holds, of its two stages' micro-batches in flight, what its list holds at once
  ** (ZB-V's chunks peak apart), not each stage's peak added up (interleaving keeps them added: a boundary gradient
  ** of one stage can outlive its micro-batch while the other peaks) */
  const int v = tr->report.schedule == STRATA_SCHEDULE_ZBV || tr->report.schedule == STRATA_SCHEDULE_DUALPIPEV;
  for (int r = 0; r < tr->ndev && !rc && v; r++) {
    double joint;
    if (nst[r] > 1 && strata_schedule_device_peak(tr->sched, r, per_mb, &joint, NULL) == STRATA_OK && joint < own[r]) {
      const uint64_t cut = (uint64_t)(own[r] - joint);
      need[r] -= cut;
      act[r] -= cut < act[r] ? cut : act[r];
    }
  }
  /* a split backward's dsave regions: the most the device's list keeps a BI done and its W pending at once over its
  ** stages together, each of the largest of their sizes (the one size its stages take from its cache) */
  for (int r = 0; r < tr->ndev && !rc; r++) {
    const uint64_t ds = (uint64_t)strata__rank_pending(tr, r) * dsave[r];
    need[r] += ds;
    act[r] += ds;
  }
  free(per_mb);
  free(own);
  free(dsave);
  if (rc)
    return rc;
  for (int r = 0; r < tr->ndev; r++)
    tr->rep_dev[r].planned_bytes = need[r];
  for (int r = 0; r < tr->ndev; r++) {
    struct strata_device_props p;
    if (!strata__rank_mine(tr, r))
      continue; /* its rank checks it */
    TRY(strata_device_props(tr->dev[r], &p));
    if (need[r] <= p.free_memory)
      continue;
    const double MiB = 1048576.0;
    char what[200], hint[160] = "", largest[320] = "";
    const struct strata__layer *L = &tr->model->layers[lo[r]];
    if (tr->nstages == 1)
      snprintf(what, sizeof what, "model '%s' (layers %d-%d)", tr->model->cfg.name, lo[r], hi[r]);
    else if (lo[r] == hi[r])
      snprintf(what, sizeof what, "layer %d of model '%s' (%s) alone", lo[r], tr->model->cfg.name, L->info.name);
    else
      snprintf(what, sizeof what, "%s of model '%s' on this device (layers %d-%d)", nst[r] == 1 ? "the stage" : "the stages",
               tr->model->cfg.name, lo[r], hi[r]);
    largest_activation(tr, split, r, largest, sizeof largest);
    if (tr->unfit_split && lo[r] == hi[r] && L->kind == STRATA__LAYER_BLOCK)
      snprintf(hint, sizeof hint, "; no pipeline split can help: tensor parallelism (tp %d or more) splits the layer "
               "itself", 2 * strata__stage_tp(tr, lo[r]));
    return strata__error(STRATA_ERR_DEVICE_MEMORY,
                         "%s%s does not fit on device %d: a step needs %.1f MiB (%.1f MiB for parameters, gradients and "
                         "AdamW moments, %.1f MiB of activations for micro-batches of %lld, %.1f MiB of other buffers), "
                         "the device has %.1f MiB free (limit %.1f MiB, %.1f MiB in use)%s%s",
                         tr->unfit_split ? "no cut of the model fits these devices' memory; with the fastest cut, " : "",
                         what, strata__rank_device(tr, r), (double)need[r] / MiB, (double)params[r] / MiB, (double)act[r] / MiB,
                         (long long)tr->opt.batch, (double)bufs[r] / MiB, (double)p.free_memory / MiB,
                         (double)p.memory_limit / MiB, (double)p.used_memory / MiB, largest, hint);
  }
  return STRATA_OK;
}

/*
** Fill every boundary's receive pool up front with as many buffers as can be
** in flight there: activations waiting at stage s are bounded by the
** micro-batches stage s - 1 keeps in flight, gradients waiting at s by the
** micro-batches s itself keeps (the memory plan counts the same). Steps then
** allocate nothing for messages, however the threads happen to be timed.
*/
int strata__pool_put(struct strata__pool *pool, strata_buffer_t b) {
  if (pool->n == pool->cap) {
    int cap = pool->cap ? 2 * pool->cap : 8;
    strata_buffer_t *f = realloc(pool->free, (size_t)cap * sizeof *f);
    if (!f)
      return -1;
    pool->free = f;
    pool->cap = cap;
  }
  pool->free[pool->n++] = b;
  return 0;
}

int strata__pipeline_prefill(strata_trainer_t tr) {
  const int S = strata__stages_all(tr);
  for (int s = 0; s < S; s++) { /* the output pools: a forward waits for a buffer of its stage's (the executor) */
    struct strata__stage_place place;
    if (!tr->st[s] || !tr->st[s]->out_apart)
      continue;
    strata__trainer_place(tr, s, &place);
    struct strata__pool *pool = &tr->pools[2 * S + s];
    while (pool->n < (place.outs > 1 ? place.outs : 1)) {
      strata_buffer_t b;
      TRY(strata_buffer_new(tr->dev[tr->stage_rank[s]], strata__stage_out_units(tr->st[s]) * 4, &b));
      if (strata__pool_put(pool, b)) {
        strata_buffer_free(b);
        return strata__error(STRATA_ERR_NOMEM, "out of host memory for an output pool");
      }
    }
  }
  for (int s = 0; s < S; s++) {
    for (int dir = 0; dir < 2 && tr->st[s]; dir++) { /* (the stages this rank holds) */
      if (dir == 0 ? strata__stage_first(tr, s) : strata__stage_last(tr, s))
        continue;
      const int peer = strata__stage_owner(tr, dir == 0 ? s - 1 : s + 1);
      if (tr->stage_rank[peer] == tr->stage_rank[s])
        continue;
      const int k = strata__stage_inflight(tr, dir == 0 ? peer : s);
      struct strata__pool *pool = &tr->pools[2 * s + dir];
      size_t bytes = (dir == 0 ? strata__stage_in_units(tr->st[s]) : strata__stage_out_units(tr->st[s])) * 4;
      while (pool->n < k) {
        strata_buffer_t b;
        TRY(strata_buffer_new(tr->dev[tr->stage_rank[s]], bytes, &b));
        if (strata__pool_put(pool, b)) {
          strata_buffer_free(b);
          return strata__error(STRATA_ERR_NOMEM, "out of host memory for a receive pool");
        }
      }
    }
  }
  return STRATA_OK;
}
