/* SPDX-License-Identifier: MIT */
/* search-refine.c — the planner's refinement pass: single-layer moves between the stages of the best candidates, each simulated, kept while the step shortens. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "plan/search.h"
#include "core/core.h"

/* Layer moves the refinement pass may simulate per candidate, and the stages it refines at most. */
#define REFINE_BUDGET 400
#define REFINE_MAX_STAGES 16
/* The candidates it refines. */
#define REFINE_TOP 8

/* ---- refinement: boundary moves on the best candidates, simulated ---- */

void strata__plan_refine(struct search *s) {
  /* the candidates to refine, copied first: evaluate() reorders the pool */
  int nref = s->plan->n < REFINE_TOP ? s->plan->n : REFINE_TOP;
  strata_layout_t *bases = calloc((size_t)nref + 1, sizeof *bases);
  double *steps = calloc((size_t)nref + 1, sizeof *steps);
  if (!bases || !steps) {
    free(bases);
    free(steps);
    s->rc = strata__error(STRATA_ERR_NOMEM, "planner: out of host memory");
    return;
  }
  for (int i = 0; i < nref; i++) {
    char *js = NULL;
    if (strata_layout_to_json(s->plan->c[i].layout, &js) == STRATA_OK)
      strata_layout_from_json(js, NULL, &bases[i]);
    free(js);
    steps[i] = s->plan->c[i].res.step_s;
  }
  for (int ci = 0; ci < nref && !s->rc; ci++) {
    int budget = REFINE_BUDGET;
    strata_layout_t base = bases[ci];
    if (!base)
      continue;
    const int S = strata_layout_stages(base);
    /* large jobs keep the balanced split: their simulations cost the most, and gain the least */
    if (S < 2 || S > REFINE_MAX_STAGES || strata_layout_device_count(base) > STRATA__PLAN_REFINE_MAX_DEVICES)
      continue;
    int *split = malloc(sizeof *split * (size_t)S);
    if (!split)
      break;
    memcpy(split, strata_layout_split(base), sizeof *split * (size_t)S);
    double cur = steps[ci];
    /* copy what a layout with another split needs */
    const int dp = strata_layout_dp(base), pp = strata_layout_pp(base), n = strata_layout_device_count(base);
    int *devs = malloc(sizeof *devs * (size_t)n), *tps = malloc(sizeof *tps * (size_t)pp);
    if (!devs || !tps) {
      free(split);
      free(devs);
      free(tps);
      break;
    }
    memcpy(devs, strata_layout_devices(base), sizeof *devs * (size_t)n);
    for (int r = 0; r < pp; r++)
      tps[r] = strata_layout_tp(base, r);
    struct strata_layout_desc d = {.dp = dp, .pp = pp, .tp = tps, .devices = devs, .ndevices = n, .nsplit = S,
                                   .schedule = strata_layout_schedule(base),
                                   .microbatches = strata_layout_microbatches(base),
                                   .virtual_stages = strata_layout_virtual_stages(base), .zero = strata_layout_zero(base),
                                   .precision = strata_layout_precision(base),
                                   .recompute = strata_layout_recompute(base),
                                   .sp = strata_layout_sp(base)}; /* its memory modes */
    int improved = 1;
    while (improved && budget > 0 && !s->rc) {
      improved = 0;
      int bj = -1, bdir = 0;
      double bt = cur;
      for (int from = 0; from < S && budget > 0; from++)
        for (int to = 0; to < S && budget > 0; to++) {
          /* one layer from stage `from` to stage `to`: the boundaries between them shift by one */
          if (from == to || split[from] <= 1)
            continue;
          split[from]--, split[to]++;
          d.split = split;
          strata_layout_t l = NULL;
          s->plan->considered++;
          if (strata_layout_new(&d, &l) == STRATA_OK) {
            struct strata_sim_options so = {.batch = s->o->batch, .symmetric = s->c->uniform};
            struct strata_sim_result res;
            budget--;
            s->plan->simulated++;
            if (strata_simulate((strata_machine_t)s->c, s->model, l, &so, &res) == STRATA_OK) {
              if (res.fits && res.step_s < bt * (1 - 1e-12)) {
                bt = res.step_s;
                bj = from;
                bdir = to;
              }
              strata_sim_result_destroy(&res);
            }
            strata_layout_free(l);
          }
          split[from]++, split[to]--;
        }
      if (bj >= 0) {
        split[bj]--, split[bdir]++;
        cur = bt;
        improved = 1;
        d.split = split;
        strata_layout_t l = NULL;
        if (strata_layout_new(&d, &l) == STRATA_OK)
          strata__plan_evaluate(s, l);
      }
    }
    free(split);
    free(devs);
    free(tps);
  }
  for (int i = 0; i < nref; i++)
    strata_layout_free(bases[i]);
  free(bases);
  free(steps);
}
