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
/* Each rank's device speed (one measurement per kind of device) and free memory. */
static int measure_devices(strata_trainer_t tr, double *speed, uint64_t *limit) {
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
    else
      TRY(strata_device_gemm_speed(tr->dev[r], 256, 3, &speed[r], NULL)); /* what the split weighs layers against */
    TRY(strata_device_props(tr->dev[r], &pr));
    limit[r] = pr.free_memory;
  }
  return strata__ranks_measures(tr, tr->ndev, speed, limit);
}

/* What the one balancer (parallel/split.c) asks of the trainer's stages: their time at the measured speeds and
** whether the memory plan lets them fit. */
struct balance_costs {
  strata_trainer_t tr;
  const double *speed;               /* [ranks]: GFLOP/s */
  const uint64_t *limit;             /* [ranks]: free bytes */
  const struct strata__stage_bytes *plan; /* [degrees x cells]: stage [a, b) as planned */
  const char *planned;               /* ... and whether it could be */
  const int *deg_of;                 /* [stages]: the index of its tp degree */
  size_t cells;
  int ignore_memory;                 /* the second pass: the fastest cut regardless */
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
  const struct balance_costs *c = arg;
  const int L = c->tr->model->nlayers;
  size_t k = c->cells * (size_t)c->deg_of[j] + (size_t)a * (size_t)(L + 1) + (size_t)b;
  return c->planned[k] && (c->ignore_memory || strata__stage_need(c->tr, j, &c->plan[k], j > 0 ? &c->plan[k] : NULL,
                                                                  NULL, NULL) <= c->limit[c->tr->stage_rank[j]]);
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
  /* each candidate stage [a, l) planned once per tensor-parallel degree of the ranks: what it allocates, as
  ** trainer creation will check it */
  size_t cells = (size_t)(L + 1) * (size_t)(L + 1);
  int ndeg = 0, *deg = calloc((size_t)S, sizeof *deg), *deg_of = calloc((size_t)S, sizeof *deg_of);
  for (int s = 0; deg && deg_of && s < S; s++) {
    int k = 0;
    while (k < ndeg && deg[k] != tr->tps[s])
      k++;
    if (k == ndeg)
      deg[ndeg++] = tr->tps[s];
    deg_of[s] = k;
  }
  struct strata__stage_bytes *plan = calloc(cells * (size_t)(ndeg ? ndeg : 1), sizeof *plan);
  char *planned = calloc(cells * (size_t)(ndeg ? ndeg : 1), 1);
  if (!plan || !planned || !deg || !deg_of) {
    free(deg);
    free(deg_of);
    free(plan);
    free(planned);
    free(speed);
    free(limit);
    return strata__error(STRATA_ERR_NOMEM, "out of host memory balancing stages");
  }
  int split_backward = tr->report.schedule == STRATA_SCHEDULE_ZB_H1;
  int plan_rc = STRATA_OK; /* the first stage that cannot exist (a cut tied model), reported if nothing fits */
  char *plan_msg = NULL;
  for (int k = 0; k < ndeg; k++)
  for (int a = 0; a < L; a++)
    for (int l = a + 1; l <= L; l++) {
      size_t c = cells * (size_t)k + (size_t)a * (size_t)(L + 1) + (size_t)l;
      /* as slice 0 of replica 0 holds it: tensor parallelism and ZeRO shrink what one device needs */
      struct strata__cut cut = {{0, deg[k]}, {0, tr->zero ? tr->replicas : 1}};
      int rc = strata__stage_plan(tr->model, a, l, tr->opt.batch, split_backward, &cut, &plan[c]);
      planned[c] = rc == STRATA_OK;
      if (rc && !plan_rc) {
        plan_rc = rc;
        plan_msg = strdup(strata_last_error());
      }
    }
  tr->unfit_split = 0;
  /* pass 0 within the devices' memory; pass 1, when no cut fits, the fastest
  ** cut regardless, which the memory plan then refuses saying what it needs */
  struct balance_costs bc = {.tr = tr, .speed = speed, .limit = limit, .plan = plan, .planned = planned,
                             .deg_of = deg_of, .cells = cells};
  struct strata__split_costs costs = {.time = stage_time, .fits = stage_fits, .arg = &bc};
  int brc = 1;
  for (int pass = 0; pass < 2 && brc == 1; pass++) {
    bc.ignore_memory = pass == 1;
    brc = strata__split_best(L, S, &costs, split);
    tr->unfit_split = pass == 1;
  }
  free(speed);
  free(limit);
  free(plan);
  free(planned);
  free(deg);
  free(deg_of);
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
