/* SPDX-License-Identifier: MIT */
/* search-counts.c — the planner's pass 2: replica and rank counts over the tp groups, and the orders of the groups
** over the ranks (every distinct order on small machines, rank permutations where devices differ), each assignment
** handed to passes 3-5 (search.c). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "plan/search.h"
#include "core/core.h"

/* Groups at most for which every count of them is tried (above: all of them only). */
#define ALL_COUNTS_UP_TO 16
/* Pipelines of at most this many ranks over devices that differ get every rank order. */
#define PERMUTE_UP_TO 4

/* ---- pass 2: dp x pp over the groups ---- */

/*
** Canonical form of a group order, for the exhaustive search and the rank
** permutations: the sequence of (cost class, island, node) with islands and
** nodes renamed by first use. Two orders of one form are counted once;
** that is exact when links depend only on whether two devices share an
** island or a node (every synthetic node, and the tests' machines), and
** an approximation on a dump whose islands differ among themselves.
*/
static void canonical(const struct search *s, const struct group *const *gl, int n, int *sig) {
  int *isl = malloc(sizeof *isl * (size_t)n * 2), *nod = isl ? isl + n : NULL, ni = 0, nn = 0;
  for (int i = 0; i < n && isl; i++) {
    int a = -1, b = -1;
    for (int j = 0; j < ni; j++)
      if (isl[j] == gl[i]->island + gl[i]->node * s->c->k)
        a = j;
    if (a < 0)
      isl[a = ni++] = gl[i]->island + gl[i]->node * s->c->k;
    for (int j = 0; j < nn; j++)
      if (nod[j] == gl[i]->node)
        b = j;
    if (b < 0)
      nod[b = nn++] = gl[i]->node;
    int cls = 0;
    for (int q = 0; q < s->c->k; q++)
      if (s->c->cost[q].flops == s->c->cost[gl[i]->devs[0] % s->c->k].flops &&
          s->c->cost[q].memory == s->c->cost[gl[i]->devs[0] % s->c->k].memory) {
        cls = q;
        break;
      }
    sig[3 * i] = cls * 65536 + gl[i]->t;
    sig[3 * i + 1] = a;
    sig[3 * i + 2] = b;
  }
  free(isl);
}

struct exh {
  struct search *s;
  int n, dp, pp;
  const struct group **gl;
  int *used;
  int **seen;
  int nseen, capseen;
};

/* Every ordered choice of n groups (distinct up to renaming), each tried as dp x pp. */
static void exhaust(struct exh *x, int depth) {
  struct search *s = x->s;
  if (s->rc)
    return;
  if (depth == x->n) {
    int *sig = malloc(sizeof *sig * 3 * (size_t)x->n);
    if (!sig) {
      s->rc = strata__error(STRATA_ERR_NOMEM, "planner: out of host memory");
      return;
    }
    canonical(s, x->gl, x->n, sig);
    for (int i = 0; i < x->nseen; i++)
      if (memcmp(x->seen[i], sig, sizeof *sig * 3 * (size_t)x->n) == 0) {
        free(sig);
        return;
      }
    if (x->nseen == x->capseen) {
      int cap = x->capseen ? 2 * x->capseen : 64;
      int **ns = realloc(x->seen, sizeof *ns * (size_t)cap);
      if (!ns) {
        free(sig);
        s->rc = strata__error(STRATA_ERR_NOMEM, "planner: out of host memory");
        return;
      }
      x->seen = ns;
      x->capseen = cap;
    }
    x->seen[x->nseen++] = sig;
    strata__plan_try_assignment(s, x->dp, x->pp, x->gl);
    return;
  }
  for (int g = 0; g < s->ngroups; g++)
    if (!x->used[g]) {
      x->used[g] = 1;
      x->gl[depth] = &s->groups[g];
      exhaust(x, depth + 1);
      x->used[g] = 0;
    }
}

/*
** Every order of the pp ranks of a replica (replica r's groups stay its
** own), skipping orders whose sequence of (speed, memory, island, node)
** was tried already: two such orders are the same layout up to renaming
** devices that are alike.
*/
static void permute_ranks(struct search *s, int dp, int pp, const struct group **use, const struct group **alt) {
  int perm[PERMUTE_UP_TO], c[PERMUTE_UP_TO] = {0};
  for (int i = 0; i < pp; i++)
    perm[i] = i;
  int *seen = NULL, nseen = 0;
  /* Heap's algorithm: every permutation once */
  for (int i = 0;;) {
    for (int r = 0; r < dp; r++)
      for (int k = 0; k < pp; k++)
        alt[r * pp + k] = use[r * pp + perm[k]];
    int sig[3 * PERMUTE_UP_TO];
    canonical(s, alt, pp, sig);
    int dup = 0;
    for (int q = 0; q < nseen && !dup; q++)
      dup = memcmp(&seen[q * 3 * PERMUTE_UP_TO], sig, sizeof *sig * 3 * (size_t)pp) == 0;
    if (!dup) {
      int *ns = realloc(seen, sizeof *ns * 3 * PERMUTE_UP_TO * (size_t)(nseen + 1));
      if (!ns) {
        s->rc = strata__error(STRATA_ERR_NOMEM, "planner: out of host memory");
        break;
      }
      seen = ns;
      memset(&seen[nseen * 3 * PERMUTE_UP_TO], 0, sizeof *sig * 3 * PERMUTE_UP_TO);
      memcpy(&seen[nseen * 3 * PERMUTE_UP_TO], sig, sizeof *sig * 3 * (size_t)pp);
      nseen++;
      strata__plan_try_assignment(s, dp, pp, alt);
      if (s->rc || (s->fits_only && s->found))
        break;
    }
    while (i < pp && c[i] >= i) {
      c[i] = 0;
      i++;
    }
    if (i >= pp)
      break;
    int j = i % 2 ? c[i] : 0, t = perm[j];
    perm[j] = perm[i];
    perm[i] = t;
    c[i]++;
    i = 0;
  }
  free(seen);
}

/* The path kind from group a to group b (their first devices). */
static int hop_kind(const struct search *s, const struct group *a, const struct group *b) {
  double g, l;
  int k;
  strata__machine_link(s->c, a->devs[0], b->devs[0], &g, &l, &k);
  return k;
}

/* Whether two assignments have the same kinds of hop everywhere: along each pipeline and around each ring of replicas. */
static int same_hops(const struct search *s, int dp, int pp, const struct group **x, const struct group **y) {
  for (int r = 0; r < dp; r++)
    for (int k = 0; k < pp; k++) {
      const int i = r * pp + k, next = ((r + 1) % dp) * pp + k;
      if (k + 1 < pp && hop_kind(s, x[i], x[i + 1]) != hop_kind(s, y[i], y[i + 1]))
        return 0;
      if (hop_kind(s, x[i], x[next]) != hop_kind(s, y[i], y[next]))
        return 0;
    }
  return 1;
}

/* Position order of groups: node, then island order, then first device. */
/* alt: the n = dp x pp groups of use with each replica's ranks sorted (stably) by memory, most first, or (by_flops)
** by speed, fastest first. */
static void ranks_sorted(const struct group **use, int n, int dp, int pp, int by_flops, const struct group **alt) {
  memcpy(alt, use, sizeof *alt * (size_t)n);
  for (int r = 0; r < dp; r++)
    for (int i = 1; i < pp; i++)
      for (int j = r * pp + i;
           j > r * pp && (by_flops ? alt[j]->flops > alt[j - 1]->flops : alt[j]->memory > alt[j - 1]->memory); j--) {
        const struct group *t = alt[j];
        alt[j] = alt[j - 1];
        alt[j - 1] = t;
      }
}

static int by_position(const void *a, const void *b) {
  const struct group *x = *(const struct group *const *)a, *y = *(const struct group *const *)b;
  return x->devs[0] - y->devs[0];
}

/* The fastest group first; among equals, the order of s->groups (groups of one array: their addresses). */
static int by_speed(const void *a, const void *b) {
  const struct group *x = *(const struct group *const *)a, *y = *(const struct group *const *)b;
  if (x->flops != y->flops)
    return x->flops < y->flops ? 1 : -1;
  return (x > y) - (x < y);
}

void strata__plan_try_counts(struct search *s) {
  const int G = s->ngroups;
  if (G < 1)
    return;
  const struct group **gl = malloc(sizeof *gl * (size_t)G), **use = malloc(sizeof *use * (size_t)G);
  int *used = calloc((size_t)G, sizeof *used);
  if (!gl || !use || !used) {
    s->rc = strata__error(STRATA_ERR_NOMEM, "planner: out of host memory");
    goto out;
  }
  /* the fastest groups first (stable: position order among equals) */
  for (int i = 0; i < G; i++)
    gl[i] = &s->groups[i];
  qsort(gl, (size_t)G, sizeof *gl, by_speed);
  for (int n = G; n >= 1 && !s->rc; n--) {
    if (G > ALL_COUNTS_UP_TO && n != G)
      break;
    for (int dp = 1; dp <= n && !s->rc; dp++) {
      if (n % dp || s->o->batch % dp)
        continue;
      if (s->mixed_tp && dp > 1)
        continue; /* ranks of unlike tp: one pipeline (replicas would need the same tp at every rank) */
      const int pp = n / dp;
      if (pp > s->L)
        continue;
      if (s->o->exhaustive) {
        struct exh x = {.s = s, .n = n, .dp = dp, .pp = pp, .gl = use, .used = used};
        exhaust(&x, 0);
        for (int i = 0; i < x.nseen; i++)
          free(x.seen[i]);
        free(x.seen);
        continue;
      }
      /* the n fastest, in position order: (a) each replica a run of consecutive
      ** groups (pipelines inside nodes, replicas across), (b) replicas
      ** interleaved (replicas inside nodes, pipelines across), (c) as (a)
      ** with each pipeline's ranks by memory, largest first (1F1B's first
      ** ranks hold the most micro-batches) */
      memcpy(use, gl, sizeof *use * (size_t)n);
      qsort(use, (size_t)n, sizeof *use, by_position);
      const struct group **alt = malloc(sizeof *alt * (size_t)n);
      if (!alt) {
        s->rc = strata__error(STRATA_ERR_NOMEM, "planner: out of host memory");
        break;
      }
      strata__plan_try_assignment(s, dp, pp, use);
      int mixed = 0;
      for (int i = 1; i < n; i++)
        mixed |= use[i]->memory != use[0]->memory || use[i]->flops != use[0]->flops;
      if (dp > 1 && pp > 1 && !s->rc) {
        for (int r = 0; r < dp; r++)
          for (int k = 0; k < pp; k++)
            alt[r * pp + k] = use[k * dp + r];
        /* symmetry: on like devices, an order whose pipeline and ring hops are of the same kinds is the same layout */
        if (mixed || !same_hops(s, dp, pp, use, alt))
          strata__plan_try_assignment(s, dp, pp, alt);
        /* (d) on devices that differ, (b) skewed: rank k of replica r takes the (r + k) % dp-th group of its
        ** position, so a rank's replicas stay together (their gradient ring) while each pipeline mixes the
        ** positions (where each island holds a fast and a slow device, every pipeline gets one of each) */
        if (mixed && !s->rc) {
          for (int r = 0; r < dp; r++)
            for (int k = 0; k < pp; k++)
              alt[r * pp + k] = use[k * dp + (r + k) % dp];
          strata__plan_try_assignment(s, dp, pp, alt);
        }
      }
      if (mixed && pp > 1 && pp <= PERMUTE_UP_TO && !s->rc) {
        /* a short pipeline over devices that differ: every order of its ranks, the same in each replica */
        permute_ranks(s, dp, pp, use, alt);
      } else if (mixed && pp > 1 && !s->rc) {
        ranks_sorted(use, n, dp, pp, 0, alt);
        strata__plan_try_assignment(s, dp, pp, alt);
        /* and by speed, fastest first */
        ranks_sorted(use, n, dp, pp, 1, alt);
        strata__plan_try_assignment(s, dp, pp, alt);
      }
      free(alt);
      if (s->fits_only && s->found)
        goto out;
    }
  }
out:
  free(gl);
  free(use);
  free(used);
}
