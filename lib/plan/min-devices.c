/* SPDX-License-Identifier: MIT */
/* min-devices.c — what no device count changes (whether a model can ever fit devices like a machine's, the most devices a layout of it can use) and the machines the count is probed on, so that strata_plan_min_devices stays bounded in memory and time. */
#include "config.h"

#include "plan/plan.h"
#include "core/core.h"

int strata__plan_tp_divides(strata_model_t model, int t) {
  struct strata_layout_desc d = {.tp_all = t};
  strata_layout_t l;
  if (strata_layout_new(&d, &l) != STRATA_OK)
    return 0;
  int ok = strata_layout_check(l, model, -1) == STRATA_OK;
  strata_layout_free(l);
  return ok;
}

/* The most devices of one island of the node: a tp group never spans two. */
static int largest_island(const struct strata_machine *c) {
  int most = 1;
  for (int i = 0; i < c->k; i++) {
    int size = 0;
    for (int j = 0; j < c->k; j++)
      size += c->island[j] == c->island[i];
    most = size > most ? size : most;
  }
  return most;
}

/*
** The least memory layer `l` can take on one device at tp `t`: a stage of
** that layer alone, the optimizer state sharded over `dp` replicas, one
** sample in flight, no neighbour — the memory model's own bytes
** (model/stage.h, as strata__plan_rank_memory adds them) at their smallest,
** in `precision`.
*/
static double layer_floor(strata_model_t model, int l, int t, int dp, int zero, int precision) {
  struct strata__cut cut = {{0, t}, {0, 1}, precision, STRATA_FLOAT32, {0, 1}};
  struct strata__stage_bytes b;
  if (strata__stage_plan(model, l, l + 1, 1, 0, &cut, &b))
    return 0; /* cannot be laid out so: no floor from it (the search says why) */
  /* sharded over more replicas than the layer has parameters, the shards' padding would count: at most one a shard */
  const uint64_t n = b.params / 16; /* parameters, gradients and two moments of 4 bytes each */
  if (zero && dp > 1 && n > 1) {
    cut.zero.size = (uint64_t)dp < n ? dp : (int)(n < (1u << 30) ? n : (1u << 30));
    if (strata__stage_plan(model, l, l + 1, 1, 0, &cut, &b))
      return 0;
  }
  const struct strata__stage_place alone = {.inflight = 1, .first = 1, .last = 1};
  return (double)strata__stage_need(&b, &alone, NULL, NULL);
}

int strata__plan_reach(const struct strata_machine *c, strata_model_t model, const struct strata_plan_options *o,
                       int64_t *most) {
  const char *name = strata_model_config(model)->name, *dev = c->names[0];
  const int island = largest_island(c), fixed = o->fixed_tp;
  if (fixed && (fixed & (fixed - 1)))
    return strata__error(STRATA_ERR_DEVICE_MEMORY, "tp %d can never be planned: the planner forms tp groups of "
                         "powers of two", fixed);
  if (fixed > island)
    return strata__error(STRATA_ERR_DEVICE_MEMORY, "tp %d can never be planned on devices like %s: a tp group stays "
                         "inside one island (devices joined by fast links), and the largest here has %d device%s",
                         fixed, dev, island, island == 1 ? "" : "s");
  if (fixed && !strata__plan_tp_divides(model, fixed))
    return strata__error(STRATA_ERR_DEVICE_MEMORY, "tp %d can never be planned: %s does not cut %d ways (its heads "
                         "and widths do not divide)", fixed, name, fixed);
  /* the tp degrees any count of these devices offers: what the search itself tries */
  int tps[32], nt = 0;
  for (int t = 1; t <= island && nt < 32; t *= 2)
    if ((!fixed || fixed == t) && strata__plan_tp_divides(model, t))
      tps[nt++] = t;
  if (nt == 0)
    return strata__error(STRATA_ERR_DEVICE_MEMORY, "%s can never be planned: it does not cut into tp groups of any "
                         "power of two up to %d", name, island);
  /* the optimizer state shards over at most one replica a sample */
  const int zero = !o->no_zero && o->batch > 1;
  const int dp = zero ? (o->batch < (1 << 30) ? (int)o->batch : 1 << 30) : 1;
  const double usable = (double)c->cost[0].memory * STRATA_PLAN_MEMORY_USABLE;
  const int L = strata_model_layer_count(model);
  for (int l = 0; l < L; l++) {
    int best_t = tps[0];
    double least = layer_floor(model, l, best_t, dp, zero, o->precision);
    for (int i = 1; i < nt; i++) {
      double b = layer_floor(model, l, tps[i], dp, zero, o->precision);
      if (b < least)
        least = b, best_t = tps[i];
    }
    if (least > usable) {
      struct strata_layer_info li;
      strata_model_layer(model, l, &li);
      return strata__error(STRATA_ERR_DEVICE_MEMORY, "%s can never fit devices like %s, however many: its layer %s "
                           "alone needs %.2f GB at tp %d%s and one sample in flight, and %.2f GB of one is usable",
                           name, dev, li.name, least / 1e9, best_t, zero ? ", its optimizer state sharded" : "",
                           usable / 1e9);
    }
  }
  /* a layout uses at most tp x dp x pp devices: dp up to the batch, pp up to the layers */
  *most = (int64_t)tps[nt - 1] * (o->batch < (1 << 30) ? o->batch : 1 << 30) * L;
  return STRATA_OK;
}

/* Devices of one node of a probe, at most, on a one-node machine of up to this many: past them a probe is nodes
** joined by the network, so that its links stay one node's k x k (a node of 4,096 devices holds 600 MB of them). */
#define PROBE_ONE_NODE 256

/* The smallest power of two of n or more. */
static int64_t pow2_ceil(int64_t n) {
  int64_t p = 1;
  while (p < n)
    p *= 2;
  return p;
}

int strata__plan_probe_unit(const struct strata_machine *c, int64_t n) {
  if (c->nodes > 1)
    return c->k;
  return n <= PROBE_ONE_NODE ? 1 : (int)pow2_ceil(c->k);
}

int strata__plan_probe_node(const struct strata_machine *c, int n) {
  if (c->nodes > 1)
    return c->k;
  if (n <= PROBE_ONE_NODE)
    return n;
  const int64_t cap = pow2_ceil(c->k) > PROBE_ONE_NODE ? pow2_ceil(c->k) : PROBE_ONE_NODE;
  int k = 1;
  while (k < cap && n % (2 * k) == 0)
    k *= 2;
  return k;
}

int64_t strata__plan_probe_round(const struct strata_machine *c, int64_t n) {
  const int u = strata__plan_probe_unit(c, n);
  return (n + u - 1) / u * u;
}
