/* SPDX-License-Identifier: MIT */
/* ring.c — the ring order of a group of devices from the link matrix: widest bottleneck, fewest slow hops. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <strata/topology.h>

#include "internal.h"
#include "core/core.h"

/* Exhaustive search up to this many members: 9! orders at most. */
#define RING_EXHAUSTIVE_MAX 10

/* The links of a group: hop (i, j) in the group's own indices. */
struct ring_graph {
  int n;
  const double *gbps;   /* n x n */
  const int *kind;      /* n x n */
};

/* How good a ring is, compared field by field (ring_better). */
struct ring_score {
  double min_gbps;
  int hops[STRATA_PATH_KIND_COUNT]; /* hops of each path kind */
  double sum_gbps;
};

static void ring_eval(const struct ring_graph *g, const int *order, struct ring_score *s) {
  memset(s, 0, sizeof *s);
  s->min_gbps = -1;
  for (int i = 0; i < g->n; i++) {
    int a = order[i], b = order[(i + 1) % g->n];
    double bw = g->gbps[a * g->n + b];
    int k = g->kind[a * g->n + b];
    if (s->min_gbps < 0 || bw < s->min_gbps)
      s->min_gbps = bw;
    if (k >= 0 && k < STRATA_PATH_KIND_COUNT)
      s->hops[k]++;
    s->sum_gbps += bw;
  }
}

/* Bandwidths closer than this are the same figure (they come from tables). */
static int same_gbps(double a, double b) {
  double d = a > b ? a - b : b - a;
  double m = a > b ? a : b;
  return d <= 1e-9 * (m > 1 ? m : 1);
}

/* 1 when a is a better ring than b: wider bottleneck; then, from the slowest
** path kind up, fewer hops of that kind; then more bandwidth in total. */
static int ring_better(const struct ring_score *a, const struct ring_score *b) {
  if (!same_gbps(a->min_gbps, b->min_gbps))
    return a->min_gbps > b->min_gbps;
  for (int k = STRATA_PATH_KIND_COUNT - 1; k >= 0; k--)
    if (a->hops[k] != b->hops[k])
      return a->hops[k] < b->hops[k];
  if (!same_gbps(a->sum_gbps, b->sum_gbps))
    return a->sum_gbps > b->sum_gbps;
  return 0;
}

/* Every order with member 0 first, by Heap's-free recursive permutation. */
static void ring_exhaustive(const struct ring_graph *g, int *cur, int depth, int *used, int *best,
                            struct ring_score *best_score, int *have) {
  if (depth == g->n) {
    struct ring_score s;
    ring_eval(g, cur, &s);
    if (!*have || ring_better(&s, best_score)) {
      *best_score = s;
      memcpy(best, cur, sizeof *cur * (size_t)g->n);
      *have = 1;
    }
    return;
  }
  for (int v = 1; v < g->n; v++) {
    if (used[v])
      continue;
    used[v] = 1;
    cur[depth] = v;
    ring_exhaustive(g, cur, depth + 1, used, best, best_score, have);
    used[v] = 0;
  }
}

/* Greedy ring from `start`: always the widest (then fastest kind, then lowest
** index) link to a member not yet visited. */
static void ring_greedy(const struct ring_graph *g, int start, int *order, int *used) {
  memset(used, 0, sizeof *used * (size_t)g->n);
  order[0] = start;
  used[start] = 1;
  for (int i = 1; i < g->n; i++) {
    int from = order[i - 1], pick = -1;
    for (int v = 0; v < g->n; v++) {
      if (used[v])
        continue;
      if (pick < 0) {
        pick = v;
        continue;
      }
      double bv = g->gbps[from * g->n + v], bp = g->gbps[from * g->n + pick];
      int kv = g->kind[from * g->n + v], kp = g->kind[from * g->n + pick];
      if ((!same_gbps(bv, bp) && bv > bp) || (same_gbps(bv, bp) && kv < kp))
        pick = v;
    }
    order[i] = pick;
    used[pick] = 1;
  }
}

/* Reverse segments while that makes the ring better (2-opt), bounded. */
static void ring_two_opt(const struct ring_graph *g, int *order, int *tmp) {
  struct ring_score cur, s;
  ring_eval(g, order, &cur);
  for (int round = 0, improved = 1; improved && round < 64; round++) {
    improved = 0;
    for (int i = 1; i < g->n - 1; i++)
      for (int j = i + 1; j < g->n; j++) {
        memcpy(tmp, order, sizeof *order * (size_t)g->n);
        for (int a = i, b = j; a < b; a++, b--) {
          int t = tmp[a];
          tmp[a] = tmp[b];
          tmp[b] = t;
        }
        ring_eval(g, tmp, &s);
        if (ring_better(&s, &cur)) {
          memcpy(order, tmp, sizeof *order * (size_t)g->n);
          cur = s;
          improved = 1;
        }
      }
  }
}

/* Rotate `order` so that member 0 comes first. */
static void ring_rotate_to_zero(int n, int *order, int *tmp) {
  int at = 0;
  while (order[at] != 0)
    at++;
  for (int i = 0; i < n; i++)
    tmp[i] = order[(at + i) % n];
  memcpy(order, tmp, sizeof *order * (size_t)n);
}

/*
** The best ring over the group (indices 0 .. n-1 of `g`), member 0 first,
** into `order`; the narrowest hop into *bottleneck. Allocates scratch.
*/
static int ring_search(const struct ring_graph *g, int *order, double *bottleneck) {
  int n = g->n;
  if (n <= 0)
    return strata__error(STRATA_ERR_INVALID, "a ring needs at least one member");
  int *a = calloc((size_t)n * 3, sizeof *a);
  if (!a)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory searching a ring of %d", n);
  int *cur = a, *used = a + n, *tmp = a + 2 * n;
  struct ring_score best_score;
  if (n <= RING_EXHAUSTIVE_MAX) {
    int have = 0;
    cur[0] = 0;
    used[0] = 1;
    ring_exhaustive(g, cur, 1, used, order, &best_score, &have);
  } else {
    int have = 0;
    for (int start = 0; start < n; start++) {
      ring_greedy(g, start, cur, used);
      ring_rotate_to_zero(n, cur, tmp);
      ring_two_opt(g, cur, tmp);
      struct ring_score s;
      ring_eval(g, cur, &s);
      if (!have || ring_better(&s, &best_score)) {
        best_score = s;
        memcpy(order, cur, sizeof *order * (size_t)n);
        have = 1;
      }
    }
  }
  ring_eval(g, order, &best_score);
  if (bottleneck)
    *bottleneck = n > 1 ? best_score.min_gbps : 0;
  free(a);
  return STRATA_OK;
}

/* Fill the group's matrices through `link(from, to)` and search. */
static int ring_over(strata_topology_t topo, const int *ids, int n, int devices, int *order, double *bottleneck) {
  double *gbps = calloc((size_t)n * (size_t)n, sizeof *gbps);
  int *kind = calloc((size_t)n * (size_t)n, sizeof *kind);
  int *local = calloc((size_t)n, sizeof *local);
  int rc = STRATA_OK;
  if (!gbps || !kind || !local)
    rc = strata__error(STRATA_ERR_NOMEM, "out of host memory searching a ring of %d", n);
  for (int i = 0; i < n && !rc; i++)
    for (int j = 0; j < n && !rc; j++) {
      if (i != j && ids[i] == ids[j]) {
        rc = strata__error(STRATA_ERR_INVALID, "a ring lists %s %d twice", devices ? "device" : "GPU", ids[i]);
        break;
      }
      struct strata_link l;
      rc = devices ? strata_topology_device_link(topo, ids[i], ids[j], &l)
                   : strata_topology_link(topo, ids[i], ids[j], &l);
      gbps[i * n + j] = l.gbps;
      kind[i * n + j] = l.kind;
    }
  if (!rc) {
    struct ring_graph g = {n, gbps, kind};
    rc = ring_search(&g, local, bottleneck);
  }
  for (int i = 0; i < n && !rc; i++)
    order[i] = ids[local[i]];
  free(gbps);
  free(kind);
  free(local);
  return rc;
}

STRATA_API int strata_topology_ring(strata_topology_t topo, const int *gpus, int count, int *order,
                                    double *bottleneck_gbps) {
  if (!topo || !order)
    return strata__error(STRATA_ERR_INVALID, "strata_topology_ring: topology or order is NULL");
  int *all = NULL;
  if (!gpus) {
    TRY(strata_topology_gpu_count(topo, &count));
    if (count == 0)
      return strata__error(STRATA_ERR_NOT_FOUND, "the topology has no GPU to put in a ring");
    all = malloc(sizeof *all * (size_t)count);
    if (!all)
      return strata__error(STRATA_ERR_NOMEM, "out of host memory listing %d GPUs", count);
    for (int i = 0; i < count; i++)
      all[i] = i;
    gpus = all;
  } else if (count <= 0) {
    return strata__error(STRATA_ERR_INVALID, "strata_topology_ring: %d GPUs", count);
  }
  int rc = ring_over(topo, gpus, count, 0, order, bottleneck_gbps);
  free(all);
  return rc;
}

STRATA_API int strata_topology_device_ring(strata_topology_t topo, const int *devices, int count, int *order,
                                           double *bottleneck_gbps) {
  if (!topo || !devices || !order || count <= 0)
    return strata__error(STRATA_ERR_INVALID, "strata_topology_device_ring: bad arguments (%d devices)", count);
  return ring_over(topo, devices, count, 1, order, bottleneck_gbps);
}

/* ---------------------------------------------------------------- tensor-parallel groups */

/* The island of mapped runtime device d, or nislands (one more "island": the host) when it is not on a GPU. */
static int island_of_device(const struct strata_topology *t, int d) {
  int g = t->devs[d].gpu;
  return g >= 0 && g < t->ngpus ? t->gpu_island[g] : t->nislands;
}

STRATA_API int strata_topology_tp_order(strata_topology_t topo, const int *devices, int count, int tp, int *order) {
  if (!topo || !devices || !order || count <= 0 || tp <= 0 || count % tp)
    return strata__error(STRATA_ERR_INVALID, "strata_topology_tp_order: %d devices in groups of %d", count, tp);
  for (int i = 0; i < count; i++)
    if (devices[i] < 0 || devices[i] >= topo->ndev)
      return strata__error(STRATA_ERR_RANGE, "strata_topology_tp_order: device %d is not mapped (%d devices)",
                           devices[i], topo->ndev);
  const int K = topo->nislands + 1;
  int *rank = malloc(sizeof(int) * (size_t)K), *used = calloc((size_t)count, sizeof *used);
  if (!rank || !used) {
    free(rank);
    free(used);
    return strata__error(STRATA_ERR_NOMEM, "out of memory ordering tensor-parallel groups");
  }
  /* islands by their bandwidth inside, fastest first (ties: by index); the host last */
  for (int k = 0; k < K; k++)
    rank[k] = k;
  for (int a = 1; a < K - 1; a++)
    for (int b = a; b > 0 && topo->islands[rank[b]].gbps > topo->islands[rank[b - 1]].gbps; b--) {
      int x = rank[b];
      rank[b] = rank[b - 1];
      rank[b - 1] = x;
    }
  int at = 0;
  for (int r = 0; r < K; r++) {
    int k = rank[r], have = 0;
    for (int i = 0; i < count; i++)
      have += !used[i] && island_of_device(topo, devices[i]) == k;
    /* whole groups from this island, the devices in the order given */
    for (int take = have / tp * tp, i = 0; take > 0 && i < count; i++)
      if (!used[i] && island_of_device(topo, devices[i]) == k) {
        used[i] = 1;
        order[at++] = devices[i];
        take--;
      }
  }
  for (int i = 0; i < count; i++) /* what fills no group inside one island */
    if (!used[i])
      order[at++] = devices[i];
  free(rank);
  free(used);
  return STRATA_OK;
}
