/* SPDX-License-Identifier: MIT */
/* search-spatial.c — the planner's spatial groups: a cnn's images cut by rows over N devices (pp 1, replicas of the
** group), proposed when no dp x pp x tp layout fits (a layer's activations larger than a device). */
#include "config.h"

#include <stdlib.h>

#include "plan/search.h"
#include "core/core.h"

/* The most slabs a group is tried with, and micro-batch counts a replica's share is tried with (smallest first). */
#define SPATIAL_MAX 64
#define SPATIAL_M_CHOICES 8

/* Whether every slab of layout l (pp 1, m micro-batches of `rows`) fits its device: the memory model's bytes. */
static int slabs_fit(const struct search *s, strata_layout_t l, int64_t rows) {
  /* (pp 1: one micro-batch in flight, 1F1B's, and no W pending: inflight holds the S in-flight counts, then the S
  ** pending ones) */
  const int split = s->L, inflight[2] = {1, 0};
  const uint64_t need = strata__plan_rank_memory(s->model, l, &split, inflight, NULL, rows, 0);
  for (int r = 0; r < strata_layout_dp(l); r++)
    for (int k = 0; k < strata_layout_tp(l, 0); k++) {
      int dv = 0;
      strata_layout_device(l, r, 0, k, &dv);
      if ((double)need > (double)s->c->cost[dv % s->c->k].memory * STRATA_PLAN_MEMORY_USABLE)
        return 0;
    }
  return 1;
}

/*
** Spatial groups of N slabs (2 up to the devices, as the model's rows allow and --tp, when fixed, says), dp replicas
** of them on the machine's first dp x N devices, each with the fewest micro-batches (dividing the replica's share)
** whose slabs fit — more only add steps' overheads — simulated and kept. Float32, no ZeRO or recomputation (what
** the trainer runs slabs with); a search whose options ask for other modes tries none. fits_only (the device count's
** probes): the first that fits ends it.
*/
void strata__plan_try_spatial(struct search *s) {
  const struct strata_model_config *cfg = strata_model_config(s->model);
  const struct strata_plan_options *o = s->o;
  if (s->rc || cfg->kind != STRATA_MODEL_CNN || !cfg->gap || o->precision != STRATA_FLOAT32 ||
      o->zero > STRATA_PLAN_ONLY(0) || o->recompute > STRATA_PLAN_ONLY(STRATA_RECOMPUTE_NONE) ||
      o->sp == STRATA_PLAN_ONLY(1))
    return;
  const int ndev = s->c->nodes * s->c->k, max_m = o->max_microbatches > 0 ? o->max_microbatches : 256;
  int *devs = malloc(sizeof *devs * (size_t)(ndev > 0 ? ndev : 1));
  if (!devs) {
    s->rc = strata__error(STRATA_ERR_NOMEM, "planner: out of host memory");
    return;
  }
  for (int d = 0; d < ndev; d++)
    devs[d] = d;
  for (int n = 2; n <= ndev && n <= SPATIAL_MAX && !s->rc && !(s->fits_only && s->found); n++) {
    if ((o->fixed_tp && o->fixed_tp != n) || strata_model_spatial_check(s->model, n) != STRATA_OK)
      continue;
    for (int dp = 1; dp * n <= ndev && !s->rc && !(s->fits_only && s->found); dp++) {
      if (o->batch % dp)
        continue;
      const int64_t share = o->batch / dp;
      for (int64_t m = 1, tried = 0; m <= share && m <= max_m && tried < SPATIAL_M_CHOICES && !s->rc; m++) {
        if (share % m)
          continue;
        tried++;
        const int tp = n, split = s->L;
        const struct strata_layout_desc d = {.dp = dp, .pp = 1, .tp = &tp, .devices = devs, .ndevices = dp * n,
                                             .split = &split, .nsplit = 1, .schedule = STRATA_SCHEDULE_1F1B,
                                             .microbatches = (int)m, .virtual_stages = 1, .spatial = n};
        strata_layout_t l = NULL;
        if (strata_layout_new(&d, &l) != STRATA_OK)
          continue;
        s->plan->considered++;
        if (!slabs_fit(s, l, share / m)) {
          s->plan->pruned++;
          strata_layout_free(l);
          continue;
        }
        if (s->fits_only) {
          s->found = 1;
          strata_layout_free(l);
        } else {
          strata__plan_evaluate(s, l);
        }
        break; /* the fewest micro-batches that fit: the fastest of this group and dp */
      }
    }
  }
  free(devs);
}
