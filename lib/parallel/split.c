/* SPDX-License-Identifier: MIT */
/* split.c — the one balancer: the contiguous split of a model's layers into pipeline stages that minimises the
** slowest stage within what each stage's device holds; the trainer (measured speeds, the memory plan) and the planner
** (its cost model) give the costs. */
#include "config.h"

#include <math.h>
#include <stdlib.h>

#include "core/core.h"
#include "parallel/split.h"

int strata__split_best(int L, int S, const struct strata__split_costs *c, int *split) {
  if (S < 1 || L < S)
    return 1;
  const size_t W = (size_t)L + 1;
  double *best = malloc(sizeof *best * (size_t)(S + 1) * W);
  int *from = malloc(sizeof *from * (size_t)(S + 1) * W);
  if (!best || !from) {
    free(best);
    free(from);
    return strata__error(STRATA_ERR_NOMEM, "out of host memory balancing stages");
  }
  for (size_t i = 0; i < (size_t)(S + 1) * W; i++)
    best[i] = INFINITY;
  best[0] = 0;
  /* best[j][b]: the slowest of stages 0..j-1 over layers [0, b), at its least */
  int stopped = 0;
  for (int j = 1; j <= S && !(stopped = c->stop && c->stop(c->arg)); j++)
    for (int b = j; b <= L - (S - j); b++)
      for (int a = j - 1; a < b; a++) {
        double prev = best[(size_t)(j - 1) * W + (size_t)a];
        if (!isfinite(prev) || (c->fits && !c->fits(c->arg, j - 1, a, b)))
          continue;
        double t = c->time(c->arg, j - 1, a, b), worst = t > prev ? t : prev;
        if (worst < best[(size_t)j * W + (size_t)b]) {
          best[(size_t)j * W + (size_t)b] = worst;
          from[(size_t)j * W + (size_t)b] = a;
        }
      }
  int rc = !stopped && isfinite(best[(size_t)S * W + (size_t)L]) ? 0 : 1;
  for (int j = S, b = L; !rc && j > 0; j--) {
    int a = from[(size_t)j * W + (size_t)b];
    split[j - 1] = b - a;
    b = a;
  }
  free(best);
  free(from);
  return rc;
}
