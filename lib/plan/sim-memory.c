/* SPDX-License-Identifier: MIT */
/* sim-memory.c — the memory model: what a device holds for its stages (parameters, gradients, AdamW moments, the activations of the micro-batches in flight). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "core/core.h"

int strata__plan_stage_first(const int *split, int j) {
  int a = 0;
  for (int i = 0; i < j; i++)
    a += split[i];
  return a;
}

struct strata__cut strata__plan_cut(strata_layout_t layout, int t) {
  const int dp = strata_layout_dp(layout), slabs = strata_layout_spatial(layout) > 1 ? t : 1;
  struct strata__cut cut = {{0, slabs > 1 ? 1 : t}, {0, strata_layout_zero(layout) && dp > 1 ? dp : 1},
                            strata_layout_precision(layout), STRATA_FLOAT32, strata_layout_recompute(layout),
                            strata_layout_zero(layout), {0, slabs}, strata_layout_sp(layout) && t > 1};
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
  p->pending = inflight[S + j];
  p->first = j == 0;
  p->last = j == S - 1;
  /* a neighbour on another rank needs the transfer buffers (ZB-V's turn, stages pp - 1 and pp, shares a rank) */
  p->prev_remote = !p->first && strata__plan_stage_rank(layout, j - 1) != strata__plan_stage_rank(layout, j);
  p->prev_inflight = p->first ? 0 : inflight[j - 1];
  p->next_remote = !p->last && strata__plan_stage_rank(layout, j + 1) != strata__plan_stage_rank(layout, j);
  p->outs = p->last ? 0 : inflight[2 * S + j]; /* (its output buffers: strata_schedule_peak_handoff) */
}

uint64_t strata__plan_dsave_bytes(strata_schedule_t sch, int g, strata_model_t model, strata_layout_t layout,
                                  const int *split, int64_t rows, const struct strata__cut *cut) {
  const int S = strata_layout_stages(layout), j = g % S, rank = strata__plan_stage_rank(layout, j);
  int pending = 0;
  for (int x = 0; x < j; x++)
    if (strata__plan_stage_rank(layout, x) == rank)
      return 0; /* (counted on the rank's first stage) */
  if (strata_schedule_device_pending(sch, strata_schedule_stage_device(sch, g), &pending) || pending < 1)
    return 0;
  uint64_t region = 0;
  for (int x = j; x < S; x++) {
    struct strata__stage_bytes b;
    const int a = strata__plan_stage_first(split, x);
    if (strata__plan_stage_rank(layout, x) == rank &&
        !strata__stage_plan(model, a, a + split[x], rows, strata__plan_split_backward(layout), cut, &b))
      region = b.dsave > region ? b.dsave : region;
  }
  return (uint64_t)pending * region;
}

void strata__plan_peaks_of(strata_schedule_t sch, int *inflight) {
  const int S = strata_schedule_stages(sch);
  for (int j = 0; j < S; j++) {
    inflight[j] = inflight[S + j] = 0;
    strata_schedule_peak_inflight(sch, j, &inflight[j]);
    /* a split backward's dsave regions: its device's, over its stages together (one size: each stage's figure) */
    strata_schedule_device_pending(sch, strata_schedule_stage_device(sch, j), &inflight[S + j]);
    inflight[2 * S + j] = 1; /* the output buffers the stage holds (stage.h's place) */
    strata_schedule_peak_handoff(sch, j, &inflight[2 * S + j]);
  }
}

int strata__plan_peaks_new(strata_schedule_t sch, struct strata__plan_peaks **out) {
  *out = NULL;
  const int P = strata_schedule_devices(sch), S = strata_schedule_stages(sch), v = S / P;
  struct strata__plan_peaks *pk = calloc(1, sizeof *pk);
  int *slot = malloc(sizeof *slot * (size_t)S), *now = malloc(sizeof *now * (size_t)(v > 0 ? v : 1));
  if (pk)
    pk->at = calloc((size_t)P + 1, sizeof *pk->at);
  int rc = pk && pk->at && slot && now ? STRATA_OK : strata__error(STRATA_ERR_NOMEM, "planner: out of host memory");
  size_t cap = 0;
  if (!rc) {
    pk->v = v;
    /* a stage's place among its device's, in stage order */
    for (int d = 0; d < P; d++)
      for (int j = 0, q = 0; j < S; j++)
        if (strata_schedule_stage_device(sch, j) == d)
          slot[j] = q++;
  }
  for (int d = 0; d < P && !rc; d++) {
    int n;
    const struct strata_action *l = strata_schedule_actions(sch, d, &n);
    memset(now, 0, sizeof *now * (size_t)v);
    const int first = pk->at[d];
    int np = 0;
    for (int i = 0; i < n && !rc; i++) {
      if (l[i].kind == STRATA_ACTION_BACKWARD || l[i].kind == STRATA_ACTION_BACKWARD_WEIGHT)
        now[slot[l[i].stage]]--;
      if (l[i].kind != STRATA_ACTION_FORWARD)
        continue;
      now[slot[l[i].stage]]++;
      /* keep the point unless one kept holds as many on every stage; drop those it holds as many as */
      int dominated = 0;
      for (int x = 0; x < np && !dominated; x++) {
        dominated = 1;
        for (int q = 0; q < v && dominated; q++)
          dominated = pk->pts[(size_t)(first + x) * (size_t)v + (size_t)q] >= now[q];
      }
      if (dominated)
        continue;
      for (int x = 0; x < np;) {
        int below = 1;
        for (int q = 0; q < v && below; q++)
          below = pk->pts[(size_t)(first + x) * (size_t)v + (size_t)q] <= now[q];
        if (below) {
          memmove(&pk->pts[(size_t)(first + x) * (size_t)v], &pk->pts[(size_t)(first + x + 1) * (size_t)v],
                  sizeof *pk->pts * (size_t)(np - x - 1) * (size_t)v);
          np--;
        } else {
          x++;
        }
      }
      if ((size_t)(first + np + 1) * (size_t)v > cap) {
        size_t nc = cap ? 2 * cap : (size_t)16 * (size_t)v;
        int *g = realloc(pk->pts, sizeof *g * nc);
        if (!g) {
          rc = strata__error(STRATA_ERR_NOMEM, "planner: out of host memory");
          break;
        }
        pk->pts = g;
        cap = nc;
      }
      memcpy(&pk->pts[(size_t)(first + np) * (size_t)v], now, sizeof *now * (size_t)v);
      np++;
    }
    pk->at[d + 1] = first + np;
  }
  free(slot);
  free(now);
  if (rc) {
    strata__plan_peaks_free(pk);
    return rc;
  }
  *out = pk;
  return STRATA_OK;
}

void strata__plan_peaks_free(struct strata__plan_peaks *pk) {
  if (!pk)
    return;
  free(pk->at);
  free(pk->pts);
  free(pk);
}

static uint64_t rank_memory(strata_model_t model, strata_layout_t layout, const int *split, const int *inflight,
                            const struct strata__plan_peaks *pk, int64_t rows, int rank, int slab);
uint64_t strata__plan_rank_memory(strata_model_t model, strata_layout_t layout, const int *split, const int *inflight,
                                  const struct strata__plan_peaks *pk, int64_t rows, int rank) {
  /* spatial slabs: the rank's most of any slab's (uneven slabs keep more or less, the first the whole image) */
  uint64_t most = 0;
  for (int k = 0; k < strata_layout_spatial(layout); k++) {
    const uint64_t b = rank_memory(model, layout, split, inflight, pk, rows, rank, k);
    most = b > most ? b : most;
  }
  return most;
}

static uint64_t rank_memory(strata_model_t model, strata_layout_t layout, const int *split, const int *inflight,
                            const struct strata__plan_peaks *pk, int64_t rows, int rank, int slab) {
  const int S = strata_layout_stages(layout);
  struct strata__cut cut = strata__plan_cut(layout, strata_layout_tp(layout, rank));
  cut.sp.rank = slab;
  double total = 0, own = 0, per_mb[64];
  int held = 0, pending = 0;
  uint64_t region = 0;
  for (int j = 0; j < S; j++) {
    if (strata__plan_stage_rank(layout, j) != rank)
      continue;
    const int a = strata__plan_stage_first(split, j);
    struct strata__stage_bytes b;
    struct strata__stage_place place;
    if (strata__stage_plan(model, a, a + split[j], rows, strata__plan_split_backward(layout), &cut, &b))
      return UINT64_MAX; /* no such stage (a tied model cut): nothing fits */
    strata__plan_stage_place(layout, inflight, j, &place);
    /* a split backward's dsave regions: the rank's (as many as its list keeps pending over its stages together, of
    ** the largest of their sizes: the trainer's stages on a device take regions of one size), added below */
    pending = place.pending > pending ? place.pending : pending;
    region = b.dsave > region ? b.dsave : region;
    place.pending = 0;
    const uint64_t need = strata__stage_need(&b, &place, NULL, NULL);
    total += (double)need;
    if (pk && held < 64) {
      /* a micro-batch's activations, held from its F to its B (or W) in the list's order; its boundary gradients,
      ** which may outlive it as the threads go, stay counted at each stage's own peak */
      const int k = place.inflight > 1 ? place.inflight : 1;
      per_mb[held] = (double)b.slot;
      own += k * per_mb[held];
    }
    held++;
  }
  /* a rank of several stages holds, of their micro-batches' activations, what its list holds at once (ZB-V's two
  ** chunks peak apart), not each stage's peak added up */
  if (pk && held > 1 && held == pk->v && held <= 64) {
    double joint = 0;
    for (int x = pk->at[rank]; x < pk->at[rank + 1]; x++) {
      double sum = 0;
      for (int q = 0; q < held; q++)
        sum += pk->pts[(size_t)x * (size_t)held + (size_t)q] * per_mb[q];
      joint = sum > joint ? sum : joint;
    }
    if (joint < own)
      total -= own - joint;
  }
  return (uint64_t)total + (uint64_t)pending * region;
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
  int *inflight = malloc(sizeof *inflight * 3 * (size_t)S);
  if (!inflight) {
    strata_schedule_free(sch);
    return strata__error(STRATA_ERR_NOMEM, "out of host memory");
  }
  strata__plan_peaks_of(sch, inflight);
  struct strata__plan_peaks *pk = NULL;
  const int in_v = S == 2 * strata_layout_pp(layout) && strata__plan_stage_rank(layout, S - 1) == 0;
  int rc = in_v ? strata__plan_peaks_new(sch, &pk) : STRATA_OK;
  if (!rc)
    *bytes = strata__plan_rank_memory(model, layout, strata_layout_split(layout), inflight, pk,
                                      batch / ((int64_t)dp * m), rank);
  strata__plan_peaks_free(pk);
  free(inflight);
  strata_schedule_free(sch);
  return rc;
}
