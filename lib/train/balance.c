/* SPDX-License-Identifier: MIT */
/* balance.c — the trainer's split of the layers over a pipeline's ranks: each device's speed measured, the slowest
** stage's time minimised within the memory plan. */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/file.h"
#include "comm/comm.h"
#include "train/ranks.h"
#include "device/registry.h"
#include "parallel/split.h"
#include "train/trainer.h"

/* ---- balancing the split ---- */

/*
** Contiguous split minimising the slowest stage's time (its layers' FLOPs
** over its device's speed) subject to each stage's memory (parameters,
** gradients and moments, plus activations for the micro-batches the
** schedule keeps in flight on it) fitting its device's limit. Dynamic
** programming over (stages, layers).
*/
/*
** A device's rated speed, the same in every run: 1 for every device, 1/F for
** a host virtual device slowed F times (STRATA_HOST_SLOW names it so). A
** timed GEMM is not: on a shared or busy machine the same device measured
** 25 to 230 GFLOP/s from run to run, so a PoCL + host pipeline was cut
** 1+3, 2+2 or 3+1 by chance and did not repeat its own bits.
*/
static double rated_speed(const struct strata_device_props *p) {
  const char *slow = strcmp(p->backend, "host") == 0 ? strstr(p->name, ", slowed ") : NULL;
  double f = slow ? strtod(slow + strlen(", slowed "), NULL) : 1;
  return f > 1 ? 1 / f : 1;
}

/* STRATA_BALANCE: "measured" (default: each kind of device's speed timed by a GEMM, as strata-plan's calibration
** does, so a fast device takes more layers; on a busy machine the timing, and with it the cut, may differ by run) or
** "rated" (the split a function of the model, the devices and their memory only: the same cut in every run). */
static int balance_measured(int *measured) {
  const char *env = getenv("STRATA_BALANCE");
  *measured = 1;
  if (!env || !*env || strcmp(env, "measured") == 0)
    return STRATA_OK;
  if (strcmp(env, "rated") == 0) {
    *measured = 0;
    return STRATA_OK;
  }
  return strata__error(STRATA_ERR_PARSE, "STRATA_BALANCE='%.60s': expected rated or measured", env);
}

/* Each rank's device speed (rated, or one measurement per kind of device) and free memory. */
static int measure_devices(strata_trainer_t tr, double *speed, uint64_t *limit) {
  int measured;
  TRY(balance_measured(&measured));
  for (int r = 0; r < tr->ndev; r++) {
    if (!strata__rank_mine(tr, r))
      continue; /* its own rank measures it (a pipeline across ranks): below */
    /* devices of one kind (backend and name: host virtual devices, identical
    ** GPUs) get one measurement, so that timing noise cannot cut a model
    ** differently from run to run */
    struct strata_device_props pr, pq;
    TRY(strata_device_props(tr->dev[r], &pr));
    int same = -1;
    for (int q = 0; q < r && same < 0; q++) {
      if (!strata__rank_mine(tr, q))
        continue;
      TRY(strata_device_props(tr->dev[q], &pq));
      /* host virtual devices are slices of one CPU (unless one is slowed: STRATA_HOST_SLOW names it so); other
      ** devices match by name */
      const char *sr = strstr(pr.name, ", slowed "), *sq = strstr(pq.name, ", slowed ");
      if (strcmp(pr.backend, pq.backend) == 0 &&
          (strcmp(pr.backend, "host") == 0 ? (!sr && !sq) || (sr && sq && strcmp(sr, sq) == 0)
                                           : strcmp(pr.name, pq.name) == 0))
        same = q;
    }
    if (same >= 0)
      speed[r] = speed[same];
    else if (!measured)
      speed[r] = rated_speed(&pr);
    else
      TRY(strata_device_gemm_speed(tr->dev[r], 256, 3, &speed[r], NULL)); /* what the split weighs layers against */
    TRY(strata_device_props(tr->dev[r], &pr));
    limit[r] = pr.free_memory;
  }
  return strata__ranks_measures(tr, tr->ndev, speed, limit);
}

/* What the one balancer (parallel/split.c) asks of the trainer's stages: their time at the measured speeds and
** whether the memory model lets them fit. */
struct balance_costs {
  strata_trainer_t tr;
  const double *speed;               /* [ranks]: GFLOP/s */
  const uint64_t *limit;             /* [ranks]: free bytes */
  struct strata__stage_ranges **ranges; /* [degrees]: every cut's bytes, per tp degree */
  const int *deg_of;                 /* [stages]: the index of its tp degree */
  int ignore_memory;                 /* the second pass: the fastest cut regardless */
  int plan_rc;                       /* the first cut that cannot be a stage (a tied model cut) ... */
  char *plan_msg;                    /* ... and why */
};

static double stage_time(void *arg, int j, int a, int b) {
  const struct balance_costs *c = arg;
  double flops = 0;
  for (int i = a; i < b; i++)
    flops += c->tr->model->layers[i].info.fwd_flops + c->tr->model->layers[i].info.bwd_flops;
  /* a stage cut in tp slices computes a tp-th of its work on each (the joins aside) */
  return flops / (c->speed[c->tr->stage_rank[j]] * c->tr->tps[j]);
}

static int stage_fits(void *arg, int j, int a, int b) {
  struct balance_costs *c = arg;
  struct strata__stage_bytes bytes;
  int rc = strata__stage_can_cut(c->tr->model, a, b);
  if (!rc)
    rc = strata__stage_ranges_bytes(c->ranges[c->deg_of[j]], a, b, &bytes);
  if (rc) {
    if (!c->plan_rc) {
      c->plan_rc = rc;
      c->plan_msg = strdup(strata_last_error());
    }
    return 0;
  }
  if (c->ignore_memory)
    return 1;
  struct strata__stage_place place;
  strata__trainer_place(c->tr, j, &place);
  return strata__stage_need(&bytes, &place, NULL, NULL) <= c->limit[c->tr->stage_rank[j]];
}

int strata__pipeline_balance(strata_trainer_t tr, int *split) {
  int S = tr->nstages, L = tr->model->nlayers;
  double *speed = calloc((size_t)tr->ndev, sizeof *speed);
  uint64_t *limit = calloc((size_t)tr->ndev, sizeof *limit);
  int mrc = speed && limit ? measure_devices(tr, speed, limit)
                           : strata__error(STRATA_ERR_NOMEM, "out of host memory balancing stages");
  if (mrc) {
    free(speed);
    free(limit);
    return mrc;
  }
  /* every cut's bytes once per tensor-parallel degree of the ranks, as slice 0 of replica 0 holds it (tensor
  ** parallelism and ZeRO shrink what one device needs): what trainer creation will check */
  int ndeg = 0, *deg = calloc((size_t)S, sizeof *deg), *deg_of = calloc((size_t)S, sizeof *deg_of);
  for (int s = 0; deg && deg_of && s < S; s++) {
    int k = 0;
    while (k < ndeg && deg[k] != tr->tps[s])
      k++;
    if (k == ndeg)
      deg[ndeg++] = tr->tps[s];
    deg_of[s] = k;
  }
  struct strata__stage_ranges **ranges = calloc((size_t)(ndeg ? ndeg : 1), sizeof *ranges);
  int rrc = deg && deg_of && ranges ? STRATA_OK : strata__error(STRATA_ERR_NOMEM, "out of host memory balancing stages");
  const int split_backward = strata_schedule_kind_split_backward(tr->report.schedule);
  for (int k = 0; !rrc && k < ndeg; k++) {
    struct strata__cut cut = {{0, deg[k]}, {0, tr->zero ? tr->replicas : 1}, tr->opt.precision,
                              tr->opt.grad_reduce, tr->opt.recompute, tr->zero, {0, 1},
                              tr->opt.sp && deg[k] > 1};
    rrc = strata__stage_ranges_new(tr->model, tr->opt.batch, split_backward, &cut, &ranges[k]);
  }
  tr->unfit_split = 0;
  /* pass 0 within the devices' memory; pass 1, when no cut fits, the fastest
  ** cut regardless, which the memory plan then refuses saying what it needs */
  struct balance_costs bc = {.tr = tr, .speed = speed, .limit = limit, .ranges = ranges, .deg_of = deg_of};
  /* a V (ZB-V, DualPipeV: stages j and S - 1 - j on one rank): balance each rank's pair of stages */
  int v = S % 2 == 0 && S > 1;
  for (int j = 0; j < S && v; j++)
    v = tr->stage_rank[j] == tr->stage_rank[S - 1 - j];
  struct strata__split_costs costs = {.time = stage_time, .fits = stage_fits, .arg = &bc, .v = v};
  int brc = rrc ? -1 : 1;
  for (int pass = 0; pass < 2 && brc == 1; pass++) {
    bc.ignore_memory = pass == 1;
    brc = strata__split_best(L, S, &costs, split);
    tr->unfit_split = pass == 1;
  }
  for (int k = 0; ranges && k < ndeg; k++)
    strata__stage_ranges_free(ranges[k]);
  free(ranges);
  free(speed);
  free(limit);
  free(deg);
  free(deg_of);
  char *plan_msg = bc.plan_msg;
  const int plan_rc = bc.plan_rc;
  if (rrc) {
    free(plan_msg);
    return rrc;
  }
  if (brc < 0) {
    free(plan_msg);
    return brc;
  }
  const int ok = brc == 0;
  if (!ok && plan_rc) {
    strata__error(plan_rc, "%s", plan_msg ? plan_msg : "a stage cannot be built");
    free(plan_msg);
    return plan_rc;
  }
  free(plan_msg);
  if (!ok)
    return strata__error(STRATA_ERR_DEVICE_MEMORY,
                         "model '%s' cannot be split over these %d devices: no cut into %d stages fits their memory "
                         "limits (give more devices or a smaller batch)",
                         tr->model->cfg.name, tr->ndev, S);
  return STRATA_OK;
}
