/* SPDX-License-Identifier: MIT */
/* search-result.c — the search's result (strata_plan_t): its candidates kept best first, each one's reason, and the explanation of the best. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "core/core.h"

STRATA_API void strata_plan_free(strata_plan_t p) {
  if (!p)
    return;
  for (int i = 0; i < p->n; i++) {
    strata_layout_free(p->c[i].layout);
    strata_sim_result_destroy(&p->c[i].res);
  }
  free(p->c);
  free(p->explain);
  free(p);
}

STRATA_API int strata_plan_count(strata_plan_t p) { return p ? p->n : 0; }

STRATA_API int strata_plan_candidate(strata_plan_t p, int i, struct strata_plan_candidate *out) {
  if (!p || !out)
    return strata__error(STRATA_ERR_INVALID, "strata_plan_candidate: NULL argument");
  if (i < 0 || i >= p->n)
    return strata__error(STRATA_ERR_RANGE, "candidate %d out of range (%d)", i, p->n);
  const struct strata__plan_cand *c = &p->c[i];
  *out = (struct strata_plan_candidate){.layout = c->layout,
                                        .step_s = c->res.step_s,
                                        .samples_per_s = c->res.samples_per_s,
                                        .flops_per_device = c->res.flops_per_device,
                                        .bubble = c->res.bubble,
                                        .peak_bytes = c->res.peak_bytes,
                                        .reason = c->reason};
  return STRATA_OK;
}

STRATA_API int strata_plan_stats(strata_plan_t p, int *simulated, int *pruned) {
  if (!p)
    return strata__error(STRATA_ERR_INVALID, "strata_plan_stats: NULL plan");
  if (simulated)
    *simulated = p->simulated;
  if (pruned)
    *pruned = p->pruned;
  return STRATA_OK;
}

STRATA_API int strata_plan_counts(strata_plan_t p, int *considered, int *pruned_memory, int *pruned_dominated,
                                  int *simulated) {
  if (!p)
    return strata__error(STRATA_ERR_INVALID, "strata_plan_counts: NULL plan");
  if (considered)
    *considered = p->considered;
  if (pruned_memory)
    *pruned_memory = p->pruned;
  if (pruned_dominated)
    *pruned_dominated = p->dominated;
  if (simulated)
    *simulated = p->simulated;
  return STRATA_OK;
}

static int cand_cmp(const struct strata__plan_cand *a, const struct strata__plan_cand *b) {
  if (a->res.step_s != b->res.step_s)
    return a->res.step_s < b->res.step_s ? -1 : 1;
  /* equal time: fewer devices, then less memory */
  if (a->used != b->used)
    return a->used < b->used ? -1 : 1;
  return a->res.peak_bytes < b->res.peak_bytes ? -1 : a->res.peak_bytes > b->res.peak_bytes;
}

void strata__plan_keep(struct strata_plan *p, strata_layout_t l, struct strata_sim_result *res) {
  struct strata__plan_cand c = {.layout = l, .res = *res, .used = strata_layout_device_count(l)};
  if (p->n == p->top && cand_cmp(&c, &p->c[p->n - 1]) >= 0) {
    strata_layout_free(l);
    strata_sim_result_destroy(res);
    return;
  }
  /* a layout already kept (the refinement may find one twice) is not kept again: the same layout simulates to the
  ** same step, so only those are compared */
  char *js = NULL;
  for (int i = 0; i < p->n; i++) {
    if (p->c[i].res.step_s != res->step_s)
      continue;
    if (!js && strata_layout_to_json(l, &js) != STRATA_OK)
      break;
    char *other = NULL;
    strata_layout_to_json(p->c[i].layout, &other);
    int same = other && strcmp(other, js) == 0;
    free(other);
    if (same) {
      free(js);
      strata_layout_free(l);
      strata_sim_result_destroy(res);
      return;
    }
  }
  free(js);
  if (p->n == p->top && cand_cmp(&c, &p->c[p->n - 1]) >= 0) {
    strata_layout_free(l);
    strata_sim_result_destroy(res);
    return;
  }
  if (p->n == p->top) {
    p->n--;
    strata_layout_free(p->c[p->n].layout);
    strata_sim_result_destroy(&p->c[p->n].res);
  }
  int i = p->n++;
  while (i > 0 && cand_cmp(&c, &p->c[i - 1]) < 0) {
    p->c[i] = p->c[i - 1];
    i--;
  }
  p->c[i] = c;
}


/* ---- reasons and the explanation ---- */

/* The link between the first two devices of layout l's first group (a tp group's or a spatial group's slices 0 and 1,
** of replica 0's rank 0): its speed in GB/s and its path kind. */
static void group_link(const struct strata_machine *m, strata_layout_t l, double *gbps, int *kind) {
  int d0 = 0, d1 = 0;
  double lat;
  strata_layout_device(l, 0, 0, 0, &d0);
  strata_layout_device(l, 0, 0, 1, &d1);
  strata__machine_link(m, d0, d1, gbps, &lat, kind);
}

void strata__plan_explain_candidates(struct strata_plan *p, const struct strata_machine *m) {
  if (p->n == 0)
    return;
  const struct strata__plan_cand *b = &p->c[0];
  for (int i = 0; i < p->n; i++) {
    struct strata__plan_cand *c = &p->c[i];
    strata_layout_t l = c->layout;
    char what[160];
    char tps[64];
    size_t tl = 0;
    int same = 1;
    for (int r = 1; r < strata_layout_pp(l); r++)
      same &= strata_layout_tp(l, r) == strata_layout_tp(l, 0);
    for (int r = 0; r < (same ? 1 : strata_layout_pp(l)) && tl + 12 < sizeof tps; r++)
      tl += (size_t)snprintf(tps + tl, sizeof tps - tl, "%s%d", r ? "," : "", strata_layout_tp(l, r));
    if (strata_layout_spatial(l) > 1) /* the slices are slabs of the images */
      snprintf(what, sizeof what, "dp %d x spatial %d, %s, m %d", strata_layout_dp(l), strata_layout_spatial(l),
               strata_schedule_kind_name(strata_layout_schedule(l)), strata_layout_microbatches(l));
    else
      snprintf(what, sizeof what, "dp %d x pp %d x tp %s, %s, m %d%s%.0d", strata_layout_dp(l), strata_layout_pp(l),
               tps, strata_schedule_kind_name(strata_layout_schedule(l)), strata_layout_microbatches(l),
               strata_layout_zero(l) ? ", ZeRO-" : "", strata_layout_zero(l));
    if (i == 0) {
      snprintf(c->reason, sizeof c->reason, "%s: fastest predicted step (bubble %.1f%%, communication %.1f%%)", what,
               100 * c->res.bubble, 100 * c->res.comm_share);
      continue;
    }
    double slower = 100 * (c->res.step_s / b->res.step_s - 1);
    const char *why;
    if (c->used < b->used)
      why = "uses fewer devices";
    else if (c->res.bubble > b->res.bubble + 0.02)
      why = "a larger pipeline bubble";
    else if (c->res.comm_share > b->res.comm_share + 0.02)
      why = "more time in communication";
    else if (strata_layout_tp(l, 0) != strata_layout_tp(b->layout, 0))
      why = "tensor-parallel joins cost more than they save";
    else
      why = "a less even split of the work";
    snprintf(c->reason, sizeof c->reason, "%s: %.1f%% slower than #1: %s (bubble %.1f%%, communication %.1f%%)", what,
             slower, why, 100 * c->res.bubble, 100 * c->res.comm_share);
  }
  /* the explanation of #1 */
  strata_layout_t l = b->layout;
  size_t cap = 4096 + (size_t)strata_layout_device_count(l) * 16;
  char *t = malloc(cap);
  if (!t)
    return;
  size_t len = 0;
#define ADD(...) len += (size_t)snprintf(t + len, len < cap ? cap - len : 0, __VA_ARGS__)
  const int tp = strata_layout_tp(l, 0), pp = strata_layout_pp(l), S = strata_layout_stages(l);
  double g = 0;
  int k = 0;
  if (tp > 1 || strata_layout_spatial(l) > 1)
    group_link(m, l, &g, &k);
  if (strata_layout_spatial(l) > 1) {
    ADD("spatial %d: no layout of whole images fits a device's memory; each image's rows cut into %d slabs, one a "
        "device (%s links, %.0f GB/s), the halo rows each convolution reaches exchanged with the neighbours\n",
        tp, tp, strata_path_kind_name(k), g);
  } else if (tp > 1) {
    ADD("tp %d: each group's devices share one island (%s links, %.0f GB/s), the fastest there is for the joins "
        "every layer makes\n",
        tp, strata_path_kind_name(k), g);
  } else {
    ADD("tp 1: no group's joins would pay for themselves on these links\n");
  }
  if (pp > 1) {
    ADD("pp %d: split", pp);
    const int *sp = strata_layout_split(l);
    for (int j = 0; j < S; j++)
      ADD("%s%d", j ? "," : " ", sp[j]);
    ADD(" layers, balanced by each rank's speed and bounded by its memory:");
    for (int r = 0; r < pp && r < 16; r++) {
      int dv;
      strata_layout_device(l, 0, r, 0, &dv);
      ADD(" rank %d %s %.1f TFLOPS %.0f GB", r, m->names[dv % m->k], m->cost[dv % m->k].flops / 1e12,
          (double)m->cost[dv % m->k].memory / 1e9);
      ADD(r + 1 < pp && r < 15 ? ";" : "\n");
    }
    if (pp > 16)
      ADD(" ...\n");
  }
  if (strata_layout_dp(l) > 1)
    ADD("dp %d: replicas all-reduce their gradients%s\n", strata_layout_dp(l),
        strata_layout_zero(l) == 1   ? " as a reduce-scatter and an all-gather (ZeRO-1: optimizer state sharded)"
        : strata_layout_zero(l) == 2 ? " weight by weight as the backward writes them, each keeping its shard, and "
                                       "all-gather the parameters (ZeRO-2: gradients and optimizer state sharded)"
        : strata_layout_zero(l) == 3 ? " weight by weight as the backward writes them, each keeping its shard, and "
                                       "gather each layer's weights as it reads them (ZeRO-3: parameters too)"
                                     : "");
  ADD("predicted: %.4g s a step, %.4g samples/s, %.3g TFLOP/s per device, bubble %.1f%%, peak %.2f GB\n",
      b->res.step_s, b->res.samples_per_s, b->res.flops_per_device / 1e12, 100 * b->res.bubble,
      (double)b->res.peak_bytes / 1e9);
#undef ADD
  p->explain = t;
}

STRATA_API int strata_plan_explain(strata_plan_t p, char **text) {
  if (!p || !text)
    return strata__error(STRATA_ERR_INVALID, "strata_plan_explain: NULL argument");
  *text = strdup(p->explain ? p->explain : "");
  return *text ? STRATA_OK : strata__error(STRATA_ERR_NOMEM, "out of host memory");
}
