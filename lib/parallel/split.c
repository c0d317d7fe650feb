/* SPDX-License-Identifier: MIT */
/* split.c — the one balancer: the contiguous split of a model's layers into pipeline stages that minimises the
** slowest stage within what each stage's device holds; the trainer (measured speeds, the memory plan) and the planner
** (its cost model) give the costs. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "parallel/split.h"

/* ---- the V: stages j and S - 1 - j on one device ---- */

/* Whether stage j may hold layers [a, b) within time `budget`. */
static int stage_ok(const struct strata__split_costs *c, int j, int a, int b, double budget) {
  return c->time(c->arg, j, a, b) <= budget && (!c->fits || c->fits(c->arg, j, a, b));
}

/*
** Whether a split exists whose every device's two stages take at most T together (with split non-NULL: that split).
** Pairs are cut from the outside in: pair k takes stage k = [a, a') in front and stage S - 1 - k = [b', b) behind.
** reach[k][a] is the least b with which the first k pairs can end at a in front (L + 1: none), from[k][a] the a it
** came from: a state that leaves a sub-range of another's to the pairs inside fits at least as well (a layer's
** time and bytes are never negative), so the least b for each a is all a level keeps. The innermost pair, the V's
** turn, cuts what is left at any point. No stage may take more than Ts either. reach and from have (S / 2) x (L + 1)
** entries.
*/
static int v_feasible(int L, int S, const struct strata__split_costs *c, double T, double Ts, int *reach, int *from,
                      int *split) {
  const int P = S / 2;
  const size_t W = (size_t)L + 1;
  for (size_t i = 0; i < (size_t)P * W; i++)
    reach[i] = L + 1;
  reach[0] = L;
  for (int k = 0; k + 1 < P; k++) {
    const int inner = 2 * (P - k - 1); /* stages inside pair k, a layer each at least */
    for (int a = 0; a <= L; a++) {
      const int b = reach[(size_t)k * W + (size_t)a];
      if (b > L)
        continue;
      for (int a2 = a + 1; a2 + inner < b; a2++) {
        const double tf = c->time(c->arg, k, a, a2);
        if (tf > T || tf > Ts || (c->fits && !c->fits(c->arg, k, a, a2)))
          break; /* more layers in front take longer and hold more */
        /* the least b2 in [a2 + inner, b - 1] whose back stage fits what is left of T: the stages that fit form
        ** the top of that range */
        int lo = a2 + inner, hi = b - 1;
        const double left = T - tf < Ts ? T - tf : Ts;
        if (!stage_ok(c, S - 1 - k, hi, b, left))
          continue;
        while (lo < hi) {
          const int mid = lo + (hi - lo) / 2;
          if (stage_ok(c, S - 1 - k, mid, b, left))
            hi = mid;
          else
            lo = mid + 1;
        }
        size_t at = (size_t)(k + 1) * W + (size_t)a2;
        if (hi < reach[at]) {
          reach[at] = hi;
          from[at] = a;
        }
      }
    }
  }
  /* the turn: stages P - 1 and P share the device, cut anywhere between */
  for (int a0 = 0; a0 <= L; a0++) {
    int a = a0, b = reach[(size_t)(P - 1) * W + (size_t)a0];
    if (b > L)
      continue;
    for (int x = a + 1; x < b; x++) {
      const double tf = c->time(c->arg, P - 1, a, x);
      if (tf > T || tf > Ts || (c->fits && !c->fits(c->arg, P - 1, a, x)))
        break;
      if (!stage_ok(c, P, x, b, T - tf < Ts ? T - tf : Ts))
        continue;
      if (split) {
        split[P - 1] = x - a;
        split[P] = b - x;
        for (int k = P - 1; k > 0; k--) {
          const int prev = from[(size_t)k * W + (size_t)a], pb = reach[(size_t)(k - 1) * W + (size_t)prev];
          split[k - 1] = a - prev;
          split[S - k] = pb - b;
          a = prev;
          b = pb;
        }
      }
      return 1;
    }
  }
  return 0;
}

/* The caller's fits, each (stage, first layer, length) asked once: the bisections below ask the same many times. */
struct fits_memo {
  const struct strata__split_costs *c;
  int L, most;                      /* layers, and the most a stage can hold (L - S + 1) */
  signed char *known;               /* [S x (L + 1) x most]: -1 not asked yet, else the answer */
};

static int memo_fits(void *arg, int j, int a, int b) {
  struct fits_memo *m = arg;
  if (b - a < 1 || b - a > m->most)
    return 0;
  signed char *k = &m->known[((size_t)j * (size_t)(m->L + 1) + (size_t)a) * (size_t)m->most + (size_t)(b - a - 1)];
  if (*k < 0)
    *k = (signed char)(m->c->fits(m->c->arg, j, a, b) != 0);
  return *k;
}

static double memo_time(void *arg, int j, int a, int b) {
  const struct fits_memo *m = arg;
  return m->c->time(m->c->arg, j, a, b);
}

static int memo_stop(void *arg) {
  const struct fits_memo *m = arg;
  return m->c->stop && m->c->stop(m->c->arg);
}

/*
** strata__split_best for a V, in two bisections. First the least time T of the slowest device (its two stages
** together): the stage-balanced split bounds it within a factor of two (no stage of it is slower than the slowest
** device of the best V split). Then, of the splits within T, one whose slowest stage is the least: devices that
** tie can still differ in how their time is cut (a stage of the embedding alone and one of the head and two blocks
** leave the pipeline waiting on the heavy one). Each to 1e-9 of its value.
*/
static int split_best_v(int L, int S, const struct strata__split_costs *caller, int *split) {
  struct strata__split_costs one = *caller;
  one.v = 0;
  int rc = strata__split_best(L, S, &one, split);
  if (rc)
    return rc;
  /* the caller's fits through a memo */
  struct fits_memo memo = {.c = caller, .L = L, .most = L - S + 1};
  struct strata__split_costs mc = {.time = memo_time, .fits = caller->fits ? memo_fits : NULL, .stop = memo_stop,
                                   .arg = &memo, .v = 1};
  const struct strata__split_costs *c = &mc;
  if (caller->fits) {
    const size_t n = (size_t)S * (size_t)(L + 1) * (size_t)memo.most;
    memo.known = malloc(n);
    if (!memo.known)
      return strata__error(STRATA_ERR_NOMEM, "out of host memory balancing stages");
    memset(memo.known, -1, n);
  }
  double hi = 0, stage = 0;
  for (int j = 0, a = 0, b = L; j < S / 2; j++) {
    const double tf = c->time(c->arg, j, a, a + split[j]), tb = c->time(c->arg, S - 1 - j, b - split[S - 1 - j], b);
    hi = tf + tb > hi ? tf + tb : hi;
    stage = tf > stage ? tf : stage;
    stage = tb > stage ? tb : stage;
    a += split[j];
    b -= split[S - 1 - j];
  }
  const size_t W = (size_t)L + 1;
  int *reach = malloc(sizeof *reach * (size_t)(S / 2) * W), *from = malloc(sizeof *from * (size_t)(S / 2) * W);
  if (!reach || !from) {
    free(reach);
    free(from);
    free(memo.known);
    return strata__error(STRATA_ERR_NOMEM, "out of host memory balancing stages");
  }
  double lo = hi / 2;
  int stopped = 0;
  while (hi - lo > 1e-9 * hi && !(stopped = c->stop && c->stop(c->arg))) {
    const double mid = lo + (hi - lo) / 2;
    if (v_feasible(L, S, c, mid, INFINITY, reach, from, NULL))
      hi = mid;
    else
      lo = mid;
  }
  const double T = hi * (1 + 1e-9);
  /* the slowest stage: at least the stage-balanced split's, at most T */
  double shi = T, slo = stage * (1 - 1e-9);
  while (shi - slo > 1e-9 * shi && !stopped && !(stopped = c->stop && c->stop(c->arg))) {
    const double mid = slo + (shi - slo) / 2;
    if (v_feasible(L, S, c, T, mid, reach, from, NULL))
      shi = mid;
    else
      slo = mid;
  }
  /* feasible: the stage-balanced split's own pairs, or a bisection's (the stage-balanced split kept if rounding
  ** says otherwise) */
  rc = stopped;
  if (!stopped)
    v_feasible(L, S, c, T * (1 + 1e-12), shi * (1 + 1e-12), reach, from, split);
  free(reach);
  free(from);
  free(memo.known);
  return rc;
}

int strata__split_best(int L, int S, const struct strata__split_costs *c, int *split) {
  if (S < 1 || L < S)
    return 1;
  if (c->v && S >= 2 && S % 2 == 0)
    return split_best_v(L, S, c, split);
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
  for (int j = 1; j <= S && !(stopped = c->stop && c->stop(c->arg)); j++) {
    int reached = 0; /* (monotone: a row of stages none of whose ends is reached ends the search, no split) */
    for (int b = j; b <= L - (S - j); b++) {
      if (c->monotone) {
        /* the first layer from the last down: a stage that takes longer than the best so far is not bettered by
        ** more layers; of equal ones the earliest a is kept, as below */
        double *bb = &best[(size_t)j * W + (size_t)b];
        for (int a = b - 1; a >= j - 1; a--) {
          const double t = c->time(c->arg, j - 1, a, b);
          if (t > *bb)
            break;
          const double prev = best[(size_t)(j - 1) * W + (size_t)a], worst = t > prev ? t : prev;
          if (!isfinite(prev) || worst > *bb || (c->fits && !c->fits(c->arg, j - 1, a, b)))
            continue;
          if (worst < *bb || a < from[(size_t)j * W + (size_t)b]) {
            *bb = worst;
            from[(size_t)j * W + (size_t)b] = a;
          }
        }
        reached |= isfinite(*bb);
        continue;
      }
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
    }
    if (c->monotone && !reached)
      break; /* (best[S][L] stays infinite) */
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
