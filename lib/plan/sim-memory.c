/* SPDX-License-Identifier: MIT */
/* sim-memory.c — the memory model: what a device holds for its stages (parameters, gradients, AdamW moments, the activations of the micro-batches in flight). */
#include "config.h"

#include <stdlib.h>

#include "plan/plan.h"
#include "core/core.h"

int strata__plan_stage_first(const int *split, int j) {
  int a = 0;
  for (int i = 0; i < j; i++)
    a += split[i];
  return a;
}

struct strata__cut strata__plan_cut(strata_layout_t layout, int t) {
  const int dp = strata_layout_dp(layout);
  struct strata__cut cut = {{0, t}, {0, strata_layout_zero(layout) && dp > 1 ? dp : 1},
                            strata_layout_precision(layout), STRATA_FLOAT32, {0, 1}};
  return cut;
}

int strata__plan_split_backward(strata_layout_t layout) {
  return strata_schedule_kind_split_backward(strata_layout_schedule(layout));
}

int strata__plan_stage_rank(strata_layout_t layout, int j) {
  return strata_schedule_kind_stage_device(strata_layout_schedule(layout), strata_layout_pp(layout), j);
}

void strata__plan_stage_place(strata_layout_t layout, const int *inflight, int j, struct strata__stage_place *p) {
  const int S = strata_layout_stages(layout);
  p->inflight = inflight[j];
  p->first = j == 0;
  p->last = j == S - 1;
  /* a neighbour on another rank needs the transfer buffers (ZB-V's turn, stages pp - 1 and pp, shares a rank) */
  p->prev_remote = !p->first && strata__plan_stage_rank(layout, j - 1) != strata__plan_stage_rank(layout, j);
  p->prev_inflight = p->first ? 0 : inflight[j - 1];
  p->next_remote = !p->last && strata__plan_stage_rank(layout, j + 1) != strata__plan_stage_rank(layout, j);
}

uint64_t strata__plan_rank_memory(strata_model_t model, strata_layout_t layout, const int *split, const int *inflight,
                                  int64_t rows, int rank) {
  const int S = strata_layout_stages(layout);
  const struct strata__cut cut = strata__plan_cut(layout, strata_layout_tp(layout, rank));
  uint64_t total = 0;
  for (int j = 0; j < S; j++) {
    if (strata__plan_stage_rank(layout, j) != rank)
      continue;
    const int a = strata__plan_stage_first(split, j);
    struct strata__stage_bytes b;
    struct strata__stage_place place;
    if (strata__stage_plan(model, a, a + split[j], rows, strata__plan_split_backward(layout), &cut, &b))
      return UINT64_MAX; /* no such stage (a tied model cut): nothing fits */
    strata__plan_stage_place(layout, inflight, j, &place);
    total += strata__stage_need(&b, &place, NULL, NULL);
  }
  return total;
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
  if (strata_layout_spatial(layout) > 1)
    return strata__error(STRATA_ERR_UNSUPPORTED, "strata_plan_memory: spatial slabs are not planned yet");
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
