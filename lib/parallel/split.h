/* SPDX-License-Identifier: MIT */
/* split.h — the one balancer of a model's layers over pipeline stages (split.c), for the trainer and the planner.
** Internal. */
#ifndef STRATA__PARALLEL_SPLIT_H
#define STRATA__PARALLEL_SPLIT_H

/* What a split costs: the caller's model of its stages. */
struct strata__split_costs {
  /* The time of stage j (0-based) holding layers [a, b), in any unit the caller keeps to. */
  double (*time)(void *arg, int j, int a, int b);
  /* Whether layers [a, b) fit stage j's device; NULL: every stage fits. */
  int (*fits)(void *arg, int j, int a, int b);
  /* Whether to give up, asked once a stage (a search with a deadline); NULL: never. Given up, no split is found. */
  int (*stop)(void *arg);
  void *arg;
  /* Stages j and S - 1 - j share a device (ZB-V's and DualPipeV's V; S even): minimise the slowest device's two
  ** stages together instead of the slowest stage. */
  int v;
  /* Fewer layers never take longer: time(j, a, b) grows as a falls, so the search over a stage's first layer stops
  ** where it takes longer than the best found, and asks fits only of those that would better it (the same split,
  ** found sooner). 0: every first layer is asked. */
  int monotone;
};

/*
** The contiguous split of L layers into S stages of at least one layer each that minimises the slowest stage's
** time among the splits whose every stage fits, by dynamic programming over (stage, first layer); of equal splits,
** the one whose stages end earliest, stage by stage from the last. Returns 0 with split[] (S entries) filled, 1
** when no split fits (or L < S, or c->stop gave up), STRATA_ERR_NOMEM when the tables cannot be made. With c->v,
** the split whose slowest device (the sum of its two stages' times) is the least, within 1e-9 of it (each stage
** fitting on its own); ties as the search meets them.
*/
int strata__split_best(int L, int S, const struct strata__split_costs *c, int *split /* OUT */);

#endif /* STRATA__PARALLEL_SPLIT_H */
