/* SPDX-License-Identifier: MIT */
/* search-bound.c — a lower bound on a layout's simulated step, from each device's own compute and the pipeline's fill, so that the planner skips layouts that cannot be among those it keeps (dominated) without simulating them. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "core/core.h"

/*
** Why it bounds strata_simulate's step from below on a machine of like devices: a device runs its compute actions
** one after another (the simulator's clock per device, compute shared with nothing faster), and every action takes
** at least its ops' time (the joins, transfers, hand-offs and waits only add), so the step is at least each device's
** compute: m forwards and m backwards (B, or BI and W) of each of its stages, each with the queue's round trip, the
** recomputation's work of each backward (RECOMPUTE's, its joins left out), and its updates. Before a device's first
** forward, micro-batch 0's forwards of every stage before its first have run (each on its own device, in order); with a backward that is not split, after its last backward (its last compute
** before the update), that micro-batch's backwards of every stage before its first still run before the step ends.
** Each stage is costed as the simulator costs it on its group's slowest member, which on like devices is every one.
*/
double strata__plan_step_bound(const struct strata_machine *c, strata_model_t model, strata_layout_t l, int64_t rows) {
  const int S = strata_layout_stages(l), pp = strata_layout_pp(l), m = strata_layout_microbatches(l);
  const int dp = strata_layout_dp(l), split_bw = strata__plan_split_backward(l);
  const int *split = strata_layout_split(l);
  if (!split)
    return 0;
  const int recompute = strata_layout_recompute(l);
  double *f = malloc(sizeof *f * (size_t)S * 4), *b = f ? f + S : NULL, *opt = f ? f + 2 * S : NULL;
  double *rc = f ? f + 3 * S : NULL;
  if (!f)
    return 0;
  for (int j = 0, a = 0; j < S; a += split[j], j++) {
    const int *devs;
    const int r = strata__plan_stage_rank(l, j), t = strata__plan_group_of(l, 0, r, &devs);
    const struct strata_device_cost w = strata__plan_group_cost(c, devs, t);
    const double sync = w.sync_us * 1e-6;
    double params = 0;
    f[j] = sync;
    b[j] = split_bw ? 2 * sync : sync;
    rc[j] = 0;
    for (int li = a; li < a + split[j]; li++) {
      struct strata_layer_info info;
      strata_model_layer(model, li, &info);
      params += (double)info.params;
      const double fl = strata__plan_layer_part(&w, model, t, li, rows, STRATA__PLAN_PART_FWD).s;
      f[j] += fl;
      /* recomputation (as the simulator costs RECOMPUTE): a block's forward again, or its attention core */
      if (recompute == STRATA_RECOMPUTE_FULL && strcmp(info.type, "block") == 0)
        rc[j] += fl;
      else if (recompute == STRATA_RECOMPUTE_SELECTIVE)
        rc[j] += strata__plan_layer_part(&w, model, t, li, rows, STRATA__PLAN_PART_CORE).s;
      if (split_bw)
        b[j] += strata__plan_layer_part(&w, model, t, li, rows, STRATA__PLAN_PART_INPUT).s +
                strata__plan_layer_part(&w, model, t, li, rows, STRATA__PLAN_PART_WEIGHT).s;
      else
        b[j] += strata__plan_layer_part(&w, model, t, li, rows, STRATA__PLAN_PART_FULL).s;
    }
    const int zero = strata_layout_zero(l) && dp > 1;
    opt[j] = strata__plan_op_s(&w, STRATA_PLAN_OP_ADAMW, params / t / (zero ? dp : 1)) + 8 * w.launch_us * 1e-6 +
             2 * w.sync_us * 1e-6;
  }
  double bound = 0;
  for (int r = 0; r < pp; r++) {
    double own = 0, fill = 0, drain = 0;
    int first = -1;
    for (int j = 0; j < S; j++)
      if (strata__plan_stage_rank(l, j) == r) {
        own += m * (f[j] + b[j] + rc[j]) + opt[j];
        if (first < 0)
          first = j;
      }
    for (int j = 0; j < first; j++) {
      fill += f[j];
      drain += split_bw ? 0 : b[j];
    }
    const double t = fill + own + drain;
    bound = t > bound ? t : bound;
  }
  free(f);
  return bound;
}
