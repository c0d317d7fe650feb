/* SPDX-License-Identifier: MIT */
/* sim-memory.c — the memory model: what a device holds for its stages (parameters, gradients, AdamW moments, the activations of the micro-batches in flight). */
#include "config.h"

#include <stdlib.h>

#include "plan/plan.h"
#include "core/core.h"

double strata__plan_static_bytes(double params, int t, int dp, int zero) {
  double p = params / t;
  return p * 4 /* weights */ + p * 4 /* gradients */ + p * 8 / (zero && dp > 1 ? dp : 1) /* moments */;
}

int strata__plan_stage_first(const int *split, int j) {
  int a = 0;
  for (int i = 0; i < j; i++)
    a += split[i];
  return a;
}

uint64_t strata__plan_rank_memory(strata_model_t model, strata_layout_t layout, const int *split, const int *inflight,
                                  int64_t rows, int rank) {
  const int pp = strata_layout_pp(layout), S = strata_layout_stages(layout), t = strata_layout_tp(layout, rank);
  double total = 0;
  for (int j = rank; j < S; j += pp) {
    int a = strata__plan_stage_first(split, j);
    double params = 0, act = 0;
    for (int l = a; l < a + split[j]; l++) {
      struct strata_layer_info li;
      strata_model_layer(model, l, &li);
      params += (double)li.params;
      act += (double)li.act_bytes;
    }
    struct strata_layer_info last;
    strata_model_layer(model, a + split[j] - 1, &last);
    total += strata__plan_static_bytes(params, t, strata_layout_dp(layout), strata_layout_zero(layout));
    /* activations kept per micro-batch in flight, and its output buffer */
    total += (act / t + (double)last.out_bytes) * (double)rows * inflight[j];
  }
  return (uint64_t)total;
}

STRATA_API int strata_plan_memory(strata_model_t model, strata_layout_t layout, int64_t batch, int rank,
                                  uint64_t *bytes) {
  if (!model || !layout || !bytes)
    return strata__error(STRATA_ERR_INVALID, "strata_plan_memory: NULL argument");
  const int dp = strata_layout_dp(layout), m = strata_layout_microbatches(layout), S = strata_layout_stages(layout);
  if (rank < 0 || rank >= strata_layout_pp(layout))
    return strata__error(STRATA_ERR_RANGE, "rank %d out of range", rank);
  if (batch < 1 || batch % ((int64_t)dp * m))
    return strata__error(STRATA_ERR_INVALID, "batch %lld is not a multiple of dp %d x %d micro-batches",
                         (long long)batch, dp, m);
  if (!strata_layout_split(layout))
    return strata__error(STRATA_ERR_INVALID, "strata_plan_memory: the layout has no split");
  TRY(strata_layout_check(layout, model, -1));
  strata_schedule_t sch;
  TRY(strata_schedule_generate(strata_layout_schedule(layout), strata_layout_pp(layout), m,
                               strata_layout_virtual_stages(layout), &sch));
  int *inflight = malloc(sizeof *inflight * (size_t)S);
  if (!inflight) {
    strata_schedule_free(sch);
    return strata__error(STRATA_ERR_NOMEM, "out of host memory");
  }
  for (int j = 0; j < S; j++)
    strata_schedule_peak_inflight(sch, j, &inflight[j]);
  *bytes = strata__plan_rank_memory(model, layout, strata_layout_split(layout), inflight, batch / ((int64_t)dp * m),
                                    rank);
  free(inflight);
  strata_schedule_free(sch);
  return STRATA_OK;
}
