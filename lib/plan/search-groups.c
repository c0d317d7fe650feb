/* SPDX-License-Identifier: MIT */
/* search-groups.c — the planner's pass 1: tensor-parallel groups cut from the islands of each node, fastest first, and the tp degrees a search tries. */
#include "config.h"

#include <math.h>
#include <stdlib.h>

#include "plan/plan.h"
#include "plan/search.h"
#include "core/core.h"

/* ---- pass 1: tensor-parallel groups ---- */

void strata__plan_groups_free(struct search *s) {
  for (int i = 0; i < s->ngroups; i++)
    free(s->groups[i].devs);
  free(s->groups);
  s->groups = NULL;
  s->ngroups = 0;
}

/* The islands of one node, fastest first (narrowest inner link), as lists of local devices. */
static int island_order(const struct strata_machine *c, int *order, int *nislands) {
  int n = 0;
  for (int i = 0; i < c->k; i++) {
    int seen = 0;
    for (int j = 0; j < n && !seen; j++)
      seen = order[j] == c->island[i];
    if (!seen)
      order[n++] = c->island[i];
  }
  /* an island's speed: its narrowest link between two members (a single device: none, last); one pass over
  ** the pairs, each device's island looked up once */
  double *bw = malloc(sizeof *bw * (size_t)n);
  int *at = malloc(sizeof *at * (size_t)c->k);
  if (!bw || !at) {
    free(bw);
    free(at);
    return strata__error(STRATA_ERR_NOMEM, "planner: out of host memory");
  }
  for (int j = 0; j < n; j++)
    bw[j] = INFINITY;
  for (int a = 0; a < c->k; a++)
    for (at[a] = 0; order[at[a]] != c->island[a]; at[a]++)
      ;
  for (int a = 0; a < c->k; a++)
    for (int b = 0; b < c->k; b++)
      if (a != b && at[a] == at[b]) {
        double g = c->gbps[(size_t)a * (size_t)c->k + (size_t)b];
        bw[at[a]] = g < bw[at[a]] ? g : bw[at[a]];
      }
  for (int j = 0; j < n; j++)
    bw[j] = isinf(bw[j]) ? 0 : bw[j];
  free(at);
  for (int i = 1; i < n; i++) /* stable insertion sort, widest first */
    for (int j = i; j > 0 && bw[j] > bw[j - 1]; j--) {
      double tb = bw[j];
      bw[j] = bw[j - 1];
      bw[j - 1] = tb;
      int ti = order[j];
      order[j] = order[j - 1];
      order[j - 1] = ti;
    }
  free(bw);
  *nislands = n;
  return STRATA_OK;
}

/*
** Groups of t devices: each island of each node cut into consecutive runs
** of t of its devices, the fastest islands first; what is left of an
** island smaller than t stays out (a tp group never spans two islands) —
** or with `mixed`, forms groups of the largest degree below t that the
** model divides, so that every device is used and ranks differ in tp.
*/
int strata__plan_make_groups(struct search *s, int t, int mixed) {
  const struct strata_machine *c = s->c;
  strata__plan_groups_free(s);
  int *order = malloc(sizeof *order * (size_t)c->k), nisl = 0;
  if (!order)
    return strata__error(STRATA_ERR_NOMEM, "planner: out of host memory");
  int rc = island_order(c, order, &nisl);
  size_t cap = (size_t)c->nodes * (size_t)c->k + 1;
  s->groups = rc ? NULL : calloc(cap, sizeof *s->groups);
  if (!rc && !s->groups)
    rc = strata__error(STRATA_ERR_NOMEM, "planner: out of host memory");
  int *members = rc ? NULL : malloc(sizeof *members * (size_t)c->k);
  if (!rc && !members)
    rc = strata__error(STRATA_ERR_NOMEM, "planner: out of host memory");
  for (int node = 0; node < c->nodes && !rc; node++)
    for (int j = 0; j < nisl && !rc; j++) {
      int nm = 0;
      for (int i = 0; i < c->k; i++)
        if (c->island[i] == order[j])
          members[nm++] = i;
      for (int g0 = 0, size = t; g0 < nm && !rc; g0 += size) {
        size = t;
        if (g0 + t > nm) {
          if (!mixed)
            break;
          /* the rest of the island: the largest power of two that fits and that the model divides */
          for (size = 1; 2 * size <= nm - g0; size *= 2)
            ;
          while (size > 1 && !strata__plan_tp_divides(s->model, size))
            size /= 2;
        }
        struct group *g = &s->groups[s->ngroups];
        g->devs = malloc(sizeof *g->devs * (size_t)size);
        if (!g->devs) {
          rc = strata__error(STRATA_ERR_NOMEM, "planner: out of host memory");
          break;
        }
        s->ngroups++;
        g->t = size;
        g->node = node;
        g->island = order[j];
        double fmin = INFINITY;
        uint64_t mmin = UINT64_MAX;
        for (int q = 0; q < size; q++) {
          int local = members[g0 + q];
          g->devs[q] = node * c->k + local;
          fmin = c->cost[local].flops < fmin ? c->cost[local].flops : fmin;
          mmin = c->cost[local].memory < mmin ? c->cost[local].memory : mmin;
        }
        g->flops = fmin * size;
        g->memory = mmin;
      }
    }
  free(order);
  free(members);
  return rc;
}

int strata__plan_tp_degrees(const struct search *s, int *out) {
  int max_island = 1, n = 0;
  for (int i = 0; i < s->c->k; i++) {
    int size = 0;
    for (int j = 0; j < s->c->k; j++)
      size += s->c->island[j] == s->c->island[i];
    max_island = size > max_island ? size : max_island;
  }
  for (int t = 1; t <= max_island; t *= 2)
    if ((!s->o->fixed_tp || s->o->fixed_tp == t) && strata__plan_tp_divides(s->model, t))
      out[n++] = t;
  return n;
}
