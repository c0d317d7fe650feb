/* SPDX-License-Identifier: MIT */
/* min-devices.c — what no device count changes (whether a model can ever fit devices like a machine's, the most devices a layout of it can use) and the machines the count is probed on, so that strata_plan_min_devices stays bounded in memory and time. */
#include "config.h"

#include <math.h>
#include <stdlib.h>

#include "plan/plan.h"
#include "plan/search.h"
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
** in `precision`, ZeRO stage `zero` (0: none), recompute mode `recompute` and with sequence parallelism where `sp`
** and t > 1.
*/
static double layer_floor(strata_model_t model, int l, int t, int dp, int zero, int recompute, int sp, int precision) {
  struct strata__cut cut = {{0, t}, {0, 1}, precision, STRATA_FLOAT32, recompute, zero, {0, 1}, sp && t > 1};
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
  /* the optimizer state (ZeRO-1), the gradients (2) and the parameters (3) shard over at most one replica a sample:
  ** the most saving stage the options allow */
  const int zero = o->no_zero || o->batch < 2 ? 0 : o->zero == STRATA_PLAN_AUTO ? 3 : o->zero - 1;
  const int dp = zero ? (o->batch < (1 << 30) ? (int)o->batch : 1 << 30) : 1;
  /* and each recompute mode the options allow (for a GPT or a llama) */
  int rcs[3], nrc = 0;
  const int text = strata_model_config(model)->kind == STRATA_MODEL_GPT ||
                   strata_model_config(model)->kind == STRATA_MODEL_LLAMA;
  for (int r = STRATA_RECOMPUTE_NONE; r <= STRATA_RECOMPUTE_FULL; r++)
    if ((r == STRATA_RECOMPUTE_NONE || text) &&
        (o->recompute == STRATA_PLAN_AUTO || o->recompute == STRATA_PLAN_ONLY(r)))
      rcs[nrc++] = r;
  /* and sequence parallelism where the options allow it (a GPT or a llama) */
  const int sp = o->sp != STRATA_PLAN_ONLY(0) && text;
  const double usable = (double)c->cost[0].memory * STRATA_PLAN_MEMORY_USABLE;
  const int L = strata_model_layer_count(model);
  for (int l = 0; l < L; l++) {
    int best_t = tps[0];
    double least = INFINITY;
    for (int i = 0; i < nt; i++)
      for (int k = 0; k < nrc; k++) {
        double b = layer_floor(model, l, tps[i], dp, zero, rcs[k], sp, o->precision);
        if (b < least)
          least = b, best_t = tps[i];
      }
    if (least > usable) {
      struct strata_layer_info li;
      strata_model_layer(model, l, &li);
      return strata__error(STRATA_ERR_DEVICE_MEMORY, "%s can never fit devices like %s, however many: its layer %s "
                           "alone needs %.2f GB at tp %d%s and one sample in flight, and %.2f GB of one is usable",
                           name, dev, li.name, least / 1e9, best_t,
                           zero == 3 ? ", its parameters, gradients and optimizer state sharded (ZeRO-3)"
                           : zero == 2 ? ", its gradients and optimizer state sharded (ZeRO-2)"
                           : zero ? ", its optimizer state sharded" : "",
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

/* ---- the count: searches that stop at the first layout that fits ---- */

/* Whether `n` devices like the machine's first would fit the model: a
** machine of n of them (the node's links kept where there are enough) and
** a search that stops at the first layout within memory, or at `deadline`
** (STRATA_ERR_TIMEOUT). */
static int fits_with(strata_machine_t c, strata_model_t model, const struct strata_plan_options *o, int n,
                     double deadline, int *fits) {
  struct strata_machine *t = NULL;
  /* one node of n devices, or nodes of them (strata__plan_probe_node) */
  const int k = strata__plan_probe_node(c, n), nodes = n / k;
  /* a node of k devices, all like device 0, in copies of the node's islands; between copies,
  ** the node's slowest link */
  struct strata_device_cost *cost = malloc(sizeof *cost * (size_t)k);
  double *g = malloc(sizeof *g * (size_t)k * (size_t)k), *lat = malloc(sizeof *lat * (size_t)k * (size_t)k);
  int *isl = malloc(sizeof *isl * (size_t)k);
  int rc = STRATA_OK;
  if (!cost || !g || !lat || !isl)
    rc = strata__error(STRATA_ERR_NOMEM, "planner: out of host memory");
  double slow = INFINITY, slow_lat = 0;
  for (int a = 0; a < c->k; a++)
    for (int b = 0; b < c->k; b++)
      if (a != b) {
        size_t ab = (size_t)a * (size_t)c->k + (size_t)b;
        slow = c->gbps[ab] < slow ? c->gbps[ab] : slow;
        slow_lat = c->lat[ab] > slow_lat ? c->lat[ab] : slow_lat;
      }
  if (isinf(slow))
    slow = 10, slow_lat = 5; /* a node of one device: a PCIe-class link */
  for (int i = 0; i < k && !rc; i++) {
    cost[i] = c->cost[0];
    isl[i] = c->island[i % c->k] + (i / c->k) * c->k;
    for (int j = 0; j < k; j++) {
      size_t ij = (size_t)i * (size_t)k + (size_t)j;
      int a = i % c->k, b = j % c->k;
      int same = i / c->k == j / c->k && a != b;
      g[ij] = same ? c->gbps[(size_t)a * (size_t)c->k + (size_t)b] : slow;
      lat[ij] = same ? c->lat[(size_t)a * (size_t)c->k + (size_t)b] : slow_lat;
    }
  }
  struct strata_node_desc nd = {.devices = k, .cost = cost, .gbps = g, .latency_us = lat, .island = isl};
  struct strata_machine_options co = {.nodes = nodes, .network_gbps = c->net_gbps * 8, .nics = c->nics,
                                      .network_latency_us = c->net_lat};
  if (!rc)
    rc = strata_machine_new(&nd, &co, &t);
  free(cost);
  free(g);
  free(lat);
  free(isl);
  if (rc)
    return rc;
  struct strata_plan *p = calloc(1, sizeof *p);
  if (!p) {
    strata_machine_free(t);
    return strata__error(STRATA_ERR_NOMEM, "planner: out of host memory");
  }
  p->top = 1;
  p->c = calloc(1, sizeof *p->c);
  struct search s = {.c = t, .model = model, .o = o, .plan = p, .fits_only = 1, .deadline = deadline};
  rc = p->c ? strata__plan_run_search(&s) : strata__error(STRATA_ERR_NOMEM, "planner: out of host memory");
  if (!rc && !s.found && strata__plan_past_deadline(&s))
    rc = STRATA_ERR_TIMEOUT; /* a split given up: not a count that does not fit */
  *fits = s.found;
  strata__plan_search_free(&s);
  strata_plan_free(p);
  strata_machine_free(t);
  return rc;
}

/* strata_plan_min_devices on machine c as it computes in the options' precision (strata__machine_in). */
static int min_devices_in(strata_machine_t c, strata_model_t model, const struct strata_plan_options *o, int limit,
                          int *devices) {
  /* what no count of devices changes first: a model that can never fit, and the most devices a layout uses */
  int64_t most = 0;
  TRY(strata__plan_reach(c, model, o, &most));
  /* the largest count worth a probe: past `most` devices no layout gains one more */
  const int by_most = strata__plan_probe_round(c, most) <= limit;
  int64_t top = by_most ? strata__plan_probe_round(c, most) : limit;
  top = top / strata__plan_probe_unit(c, top) * strata__plan_probe_unit(c, top);
  const char *name = strata_model_config(model)->name;
  const double deadline = strata__now() + STRATA_PLAN_MIN_DEVICES_S;
  /* double until it fits, then bisect (more devices never fit less: each holds a smaller share) */
  int64_t lo = 0, hi = strata__plan_probe_unit(c, 1);
  int fits = 0, rc;
  for (;;) {
    hi = hi < top ? hi : top;
    if (hi <= lo) {
      if (!by_most)
        return strata__error(STRATA_ERR_RANGE, "%s does not fit on %d devices like %s", name, limit, c->names[0]);
      return strata__error(STRATA_ERR_DEVICE_MEMORY, "%s at batch %lld: no layout found on %lld devices like %s, the most a "
                           "layout of it uses (dp up to the batch, pp up to the layers, tp up to an island)", name,
                           (long long)o->batch, (long long)lo, c->names[0]);
    }
    if ((rc = fits_with(c, model, o, (int)hi, deadline, &fits)) == STRATA_ERR_TIMEOUT) {
      *devices = (int)lo;
      return strata__error(rc, "%s at batch %lld does not fit on %lld devices like %s, and counting more stopped "
                           "after %g s", name, (long long)o->batch, (long long)lo, c->names[0],
                           STRATA_PLAN_MIN_DEVICES_S);
    }
    TRY(rc);
    if (fits)
      break;
    lo = hi;
    hi *= 2;
  }
  for (;;) {
    const int64_t mid = strata__plan_probe_round(c, lo + (hi - lo) / 2);
    if (mid <= lo || mid >= hi)
      break;
    if ((rc = fits_with(c, model, o, (int)mid, deadline, &fits)) == STRATA_ERR_TIMEOUT) {
      *devices = (int)lo;
      return strata__error(rc, "%s at batch %lld does not fit on %lld devices like %s but fits %lld (counting "
                           "stopped after %g s)", name, (long long)o->batch, (long long)lo, c->names[0],
                           (long long)hi, STRATA_PLAN_MIN_DEVICES_S);
    }
    TRY(rc);
    if (fits)
      hi = mid;
    else
      lo = mid;
  }
  *devices = (int)hi;
  return STRATA_OK;
}

STRATA_API int strata_plan_min_devices(strata_machine_t c, strata_model_t model, const struct strata_plan_options *o,
                                       int limit, int *devices) {
  TRY(strata__plan_check_options(c, model, o));
  if (!devices || limit < 1)
    return strata__error(STRATA_ERR_INVALID, "strata_plan_min_devices: bad argument");
  struct strata_machine *v;
  TRY(strata__machine_in(c, o->precision, &v));
  int rc = min_devices_in(v, model, o, limit, devices);
  strata__machine_in_free(v);
  return rc;
}
