/* SPDX-License-Identifier: MIT */
/* search.c — the planner: layouts searched in numbered passes, pruned by memory, ranked by the simulator (kept and explained by search-result.c). */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/split.h"
#include "plan/plan.h"
#include "plan/search.h"
#include "core/core.h"

#define DEFAULT_TOP 5
#define DEFAULT_MAX_MICROBATCHES 256
/* Micro-batch counts tried per (dp, pp) when the batch has more divisors than that. */
#define MAX_M_CHOICES 8
/* Candidates the search keeps before the refinement (search-refine.c). */
#define POOL 24

/* The prefix sums of the layers' times (forward and backward, tp joins included) on a tp group, for micro-batches of
** `rows`: the same for every group of the same devices of a node (nodes are copies), so built once. */
struct times_entry {
  int64_t rows;
  int t;
  int *local;                       /* [t] the group's devices in their node */
  double *prefix;                   /* [L + 1] */
  struct times_entry *next;
};

/* The memory model's figures of every cut (model/ranges.c) for one micro-batch size, cut (the tp slice, ZeRO degree
** and stage, precision, recompute mode and whatever else strata__plan_cut sets: the whole struct is the key) and
** whether backward is split: the same for many layouts, so built once. */
struct ranges_entry {
  int64_t rows;
  struct strata__cut cut;
  int split;
  struct strata__stage_ranges *r;
  struct ranges_entry *next;
};

/* Peak micro-batches in flight on each stage of one schedule shape: the
** same for every dp, tp and device order, so computed once. */
struct inflight_entry {
  int kind, pp, m, v;
  int *peak;                        /* [pp x v] */
  struct strata__plan_peaks *pk;    /* what a rank of several stages holds at once (NULL: one stage a rank) */
  struct inflight_entry *next;
};

static int inflight_of(struct search *s, int kind, int pp, int m, int v, int *out,
                       const struct strata__plan_peaks **pk_out) {
  const int S = pp * v;
  for (struct inflight_entry *e = s->inflight; e; e = e->next)
    if (e->kind == kind && e->pp == pp && e->m == m && e->v == v) {
      memcpy(out, e->peak, sizeof *out * 3 * (size_t)S);
      *pk_out = e->pk;
      return STRATA_OK;
    }
  strata_schedule_t sch;
  TRY(strata_schedule_generate(kind, pp, m, v, &sch));
  struct inflight_entry *e = calloc(1, sizeof *e);
  int *peak = malloc(sizeof *peak * 3 * (size_t)S); /* in flight, pending, handoff (strata__plan_peaks_of) */
  if (!e || !peak) {
    free(e);
    free(peak);
    strata_schedule_free(sch);
    return strata__error(STRATA_ERR_NOMEM, "planner: out of host memory");
  }
  strata__plan_peaks_of(sch, peak);
  struct strata__plan_peaks *pk = NULL;
  /* a V's ranks (as the trainer's plan weighs them): what each holds of its two stages at once */
  const int in_v = S == 2 * pp && strata_schedule_kind_stage_device(kind, pp, S - 1) == 0;
  int rc = in_v ? strata__plan_peaks_new(sch, &pk) : STRATA_OK;
  strata_schedule_free(sch);
  if (rc) {
    free(e);
    free(peak);
    return rc;
  }
  *e = (struct inflight_entry){.kind = kind, .pp = pp, .m = m, .v = v, .peak = peak, .pk = pk, .next = s->inflight};
  s->inflight = e;
  memcpy(out, peak, sizeof *out * 3 * (size_t)S);
  *pk_out = pk;
  return STRATA_OK;
}

/* ---- pass 4: the split ---- */

/* The cuts' figures for layout l's rank of tp t and micro-batches of `rows`; NULL when the model cannot be laid out
** so (the error set). */
static struct strata__stage_ranges *ranges_for(struct search *s, strata_layout_t l, int t, int64_t rows) {
  /* (a cut is ints and shards of ints, no padding: memcmp compares its fields, any field added later included) */
  struct strata__cut cut;
  memset(&cut, 0, sizeof cut);
  cut = strata__plan_cut(l, t);
  const int split = strata__plan_split_backward(l);
  for (struct ranges_entry **at = &s->ranges, *e; (e = *at) != NULL; at = &e->next)
    if (e->rows == rows && e->split == split && memcmp(&e->cut, &cut, sizeof cut) == 0) {
      *at = e->next; /* to the front: the next layouts mostly ask the same cut again */
      e->next = s->ranges;
      s->ranges = e;
      return e->r;
    }
  struct ranges_entry *e = calloc(1, sizeof *e);
  if (!e) {
    strata__error(STRATA_ERR_NOMEM, "planner: out of host memory");
    return NULL;
  }
  if (strata__stage_ranges_new(s->model, rows, split, &cut, &e->r)) {
    free(e);
    return NULL;
  }
  e->rows = rows, e->cut = cut, e->split = split;
  e->next = s->ranges;
  s->ranges = e;
  return e->r;
}

/*
** The split of L layers into S stages (stage j on the schedule's rank of it) that
** minimises the slowest stage, each stage's layers timed on its rank and
** within its rank's memory (a rank of v stages: 1/v of it each), by
** dynamic programming over (stage, first layer). 0 and split[] filled, or
** -1 when no split fits.
*/
/* What the one balancer (parallel/split.c) asks of a layout's stages: their time on their rank (prefix sums) and
** whether they fit its memory. */
struct split_costs {
  const struct search *s;
  strata_layout_t l;
  const double *tp_;            /* prefix sums of time per rank */
  struct strata__stage_ranges **rk; /* [pp]: every cut's bytes on the rank */
  const uint64_t *cap;          /* [pp]: what a rank's smallest member holds */
  const int *inflight;
};

static double split_cost_time(void *arg, int j, int a, int b) {
  const struct split_costs *c = arg;
  const double *pt = &c->tp_[(size_t)strata__plan_stage_rank(c->l, j) * (size_t)(c->s->L + 1)];
  return pt[b] - pt[a];
}

static int split_cost_fits(void *arg, int j, int a, int b) {
  const struct split_costs *c = arg;
  const int r = strata__plan_stage_rank(c->l, j);
  const double limit = (double)c->cap[r] * STRATA_PLAN_MEMORY_USABLE / strata_layout_virtual_stages(c->l);
  struct strata__stage_bytes bytes;
  struct strata__stage_place place;
  if (strata__stage_ranges_bytes(c->rk[r], a, b, &bytes))
    return 0;
  strata__plan_stage_place(c->l, c->inflight, j, &place);
  return !((double)strata__stage_need(&bytes, &place, NULL, NULL) > limit);
}

/* Whether a search with a deadline is past it. */
int strata__plan_past_deadline(const struct search *s) {
  return s->deadline > 0 && strata__now() > s->deadline;
}

static int split_cost_stop(void *arg) {
  return strata__plan_past_deadline(((const struct split_costs *)arg)->s);
}

/* The prefix sums of rank r's layer times (replica 0's group, as strata__plan_layer_time times them), from the
** search's cache; NULL out of memory (the error set). */
static const double *rank_times(struct search *s, strata_layout_t l, int r, int64_t rows) {
  const int *devs;
  const int t = strata__plan_group_of(l, 0, r, &devs), L = s->L, k = s->c->k;
  for (struct times_entry *e = s->times; e; e = e->next) {
    if (e->rows != rows || e->t != t)
      continue;
    int same = 1;
    for (int q = 0; q < t && same; q++)
      same = e->local[q] == devs[q] % k;
    if (same)
      return e->prefix;
  }
  struct times_entry *e = calloc(1, sizeof *e);
  if (e) {
    e->local = malloc(sizeof *e->local * (size_t)t);
    e->prefix = malloc(sizeof *e->prefix * (size_t)(L + 1));
  }
  if (!e || !e->local || !e->prefix) {
    if (e) {
      free(e->local);
      free(e->prefix);
    }
    free(e);
    strata__error(STRATA_ERR_NOMEM, "planner: out of host memory");
    return NULL;
  }
  e->rows = rows, e->t = t;
  for (int q = 0; q < t; q++)
    e->local[q] = devs[q] % k;
  e->prefix[0] = 0;
  for (int li = 0; li < L; li++)
    e->prefix[li + 1] = e->prefix[li] + strata__plan_layer_time(s->c, s->model, l, r, li, rows, 0) +
                        strata__plan_layer_time(s->c, s->model, l, r, li, rows, 1);
  e->next = s->times;
  s->times = e;
  return e->prefix;
}

static int best_split(struct search *s, strata_layout_t l, const int64_t rows, const int *inflight, int *split) {
  const int pp = strata_layout_pp(l), S = strata_layout_stages(l), L = s->L;
  s->split_free = 0;
  if (L < S)
    return -1;
  /* prefix sums of time per rank (forward + backward) */
  double *tp_ = calloc((size_t)pp * (size_t)(L + 1), sizeof *tp_);
  struct strata__stage_ranges **rk = calloc((size_t)pp, sizeof *rk);
  uint64_t *cap = malloc(sizeof *cap * (size_t)pp);
  int rc = -1;
  if (!tp_ || !rk || !cap)
    goto out;
  for (int r = 0; r < pp; r++)
    if (!(rk[r] = ranges_for(s, l, strata_layout_tp(l, r), rows)))
      goto out;
  for (int r = 0; r < pp && !strata__plan_past_deadline(s); r++) {
    const double *pre = rank_times(s, l, r, rows);
    if (!pre)
      goto out;
    memcpy(&tp_[(size_t)r * (size_t)(L + 1)], pre, sizeof *tp_ * (size_t)(L + 1));
  }
  for (int r = 0; r < pp; r++) {
    /* a rank holds what its smallest member holds */
    uint64_t m = UINT64_MAX;
    for (int q = 0; q < strata_layout_tp(l, r); q++) {
      int dv;
      strata_layout_device(l, 0, r, q, &dv);
      uint64_t mm = s->c->cost[dv % s->c->k].memory;
      m = mm < m ? mm : m;
    }
    cap[r] = m;
  }
  struct split_costs c = {.s = s, .l = l, .tp_ = tp_, .rk = rk, .cap = cap, .inflight = inflight};
  /* a V (stages j and S - 1 - j on one rank): balance the ranks' pairs */
  int v = S == 2 * pp;
  for (int j = 0; j < S && v; j++)
    v = strata__plan_stage_rank(l, j) == strata__plan_stage_rank(l, S - 1 - j);
  struct strata__split_costs costs = {.time = split_cost_time, .fits = split_cost_fits, .stop = split_cost_stop,
                                      .arg = &c, .v = v, .monotone = 1}; /* (prefix sums of times) */
  /* the split balanced by time alone, where its every stage fits, is the one the balancer finds within memory: the
  ** dynamic programme's least slowest stage is the same, and so is each choice it backtracks (every prefix of that
  ** split fits and is at its least; a smaller first layer within it would be one without memory too). A V balances
  ** otherwise: asked as it is. */
  if (!v) {
    costs.fits = NULL;
    int all = strata__split_best(L, S, &costs, split) == 0;
    for (int j = 0, a = 0; j < S && all; a += split[j], j++)
      all = split_cost_fits(&c, j, a, a + split[j]);
    costs.fits = split_cost_fits;
    if (all) {
      rc = 0;
      s->split_free = 1;
      goto out;
    }
  }
  rc = strata__split_best(L, S, &costs, split) == 0 ? 0 : -1;
out:
  free(tp_);
  free(rk);
  free(cap);
  return rc;
}

/*
** A quick necessary condition before the split is searched: the ranks
** together hold at least the whole model as one stage of the widest rank's
** slice (parameters and their state, the buffers, and the activations of
** the fewest micro-batches any stage keeps in flight), so when its pp-th
** part exceeds the largest device no split can fit.
*/
static int average_fits(struct search *s, strata_layout_t l, int64_t rows, const int *inflight) {
  const int pp = strata_layout_pp(l), S = strata_layout_stages(l);
  int fewest = inflight[0], t = strata_layout_tp(l, 0);
  for (int j = 1; j < S; j++)
    fewest = inflight[j] < fewest ? inflight[j] : fewest;
  for (int r = 1; r < pp; r++)
    t = strata_layout_tp(l, r) > t ? strata_layout_tp(l, r) : t;
  struct strata__stage_ranges *rk = ranges_for(s, l, t, rows);
  struct strata__stage_bytes whole;
  if (!rk || strata__stage_ranges_bytes(rk, 0, s->L, &whole))
    return 0;
  const struct strata__stage_place place = {.inflight = fewest, .first = 1, .last = 1};
  const double total = (double)strata__stage_need(&whole, &place, NULL, NULL);
  uint64_t cap = 0;
  for (int i = 0; i < s->c->k; i++)
    cap = s->c->cost[i].memory > cap ? s->c->cost[i].memory : cap;
  return total / pp <= (double)cap * STRATA_PLAN_MEMORY_USABLE;
}

/* Whether every rank fits its memory under `split` (the planner's prune; the simulator decides in the end). */
static int split_fits(const struct search *s, strata_layout_t l, int64_t rows, const int *inflight,
                      const struct strata__plan_peaks *pk, const int *split) {
  for (int r = 0; r < strata_layout_pp(l); r++) {
    uint64_t need = strata__plan_rank_memory(s->model, l, split, inflight, pk, rows, r);
    for (int q = 0; q < strata_layout_tp(l, r); q++) {
      int dv;
      strata_layout_device(l, 0, r, q, &dv);
      if ((double)need > (double)s->c->cost[dv % s->c->k].memory * STRATA_PLAN_MEMORY_USABLE)
        return 0;
    }
  }
  return 1;
}

/* ---- pass 5: simulate and rank ---- */

/* Simulate a built layout and keep it; 1 when it fits. */
int strata__plan_evaluate(struct search *s, strata_layout_t l) {
  struct strata_sim_options so = {.batch = s->o->batch, .symmetric = s->c->uniform};
  struct strata_sim_result res;
  int rc = strata_simulate((strata_machine_t)s->c, s->model, l, &so, &res);
  s->plan->simulated++;
  if (rc) {
    strata_layout_free(l);
    if (rc == STRATA_ERR_NOMEM)
      s->rc = rc;
    return 0;
  }
  if (!res.fits) {
    s->plan->pruned++;
    strata_layout_free(l);
    strata_sim_result_destroy(&res);
    return 0;
  }
  s->found = 1;
  strata__plan_keep(s->plan, l, &res);
  return 1;
}

/*
** Whether layout l (with its split) cannot be among the candidates kept: on a machine of like devices, once the pool
** is full, a lower bound on its step (strata__plan_step_bound) above the slowest kept step. Such a layout is
** counted as dominated and never simulated; the kept candidates are the same as if it had been. A layout of more
** devices than the refinement takes (search-refine.c) is kept only to be shown: once the `top` it shows are found, the
** slowest of them bounds it (those shown only get faster).
*/
static int dominated(struct search *s, strata_layout_t l, int64_t rows) {
  const struct strata_plan *p = s->plan;
  const int shown = s->o->top > 0 ? s->o->top : DEFAULT_TOP;
  const int pool = strata_layout_device_count(l) > STRATA__PLAN_REFINE_MAX_DEVICES && shown < p->top ? shown : p->top;
  if (!s->c->uniform || p->n < pool || !strata__plan_groups_alike(s->c, l, 1))
    return 0; /* (replica 0's devices, which the simulator runs, each costing what its group's slowest costs) */
  const double worst = p->c[pool - 1].res.step_s;
  if (!(strata__plan_step_bound(s->c, s->model, l, rows) > worst * (1 + 1e-9)))
    return 0;
  s->plan->dominated++;
  return 1;
}

/* A memory mode of a layout: its ZeRO stage, recompute mode (enum strata_recompute) and sequence parallelism. */
struct mode {
  int zero, recompute, sp;
};

/* The layout of these choices, or NULL (out of memory, or refused by strata_layout_new). */
static strata_layout_t build(struct search *s, int dp, int pp, const struct group *const *gl, int schedule, int m, int v,
                             const struct mode *mode, const int *split) {
  /* each rank's tp degree is its group's (replica 0's; the others' groups match it or the layout refuses them) */
  int n = 0;
  for (int g = 0; g < dp * pp; g++)
    n += gl[g]->t;
  int *devs = malloc(sizeof *devs * (size_t)n), *tp = malloc(sizeof *tp * (size_t)pp);
  if (!devs || !tp) {
    free(devs);
    free(tp);
    return NULL;
  }
  for (int g = 0, at = 0; g < dp * pp; at += gl[g]->t, g++)
    memcpy(devs + at, gl[g]->devs, sizeof *devs * (size_t)gl[g]->t);
  for (int r = 0; r < pp; r++)
    tp[r] = gl[r]->t;
  struct strata_layout_desc d = {.dp = dp, .pp = pp, .tp = tp, .devices = devs, .ndevices = n, .split = split,
                                 .nsplit = split ? pp * v : 0, .schedule = schedule, .microbatches = m,
                                 .virtual_stages = v, .zero = mode->zero, .precision = s->o->precision,
                                 .recompute = mode->recompute, .sp = mode->sp};
  strata_layout_t l = NULL;
  strata_layout_new(&d, &l);
  free(devs);
  free(tp);
  return l;
}

/* Micro-batch counts for a replica's share of the batch: every divisor when few, else a spread from pp up. */
static int m_choices(int64_t share, int pp, int max_m, int *out) {
  int all[4096], n = 0;
  for (int64_t d = 1; d <= share && d <= max_m && n < 4096; d++)
    if (share % d == 0)
      all[n++] = (int)d;
  if (n <= MAX_M_CHOICES) {
    memcpy(out, all, sizeof *out * (size_t)n);
    return n;
  }
  /* the largest divisor below pp, then roughly doubling from pp */
  int k = 0, last = 0;
  for (int i = 0; i < n; i++)
    if (all[i] < pp)
      last = all[i];
  if (last)
    out[k++] = last;
  for (int i = 0; i < n && k < MAX_M_CHOICES; i++)
    if (all[i] >= pp && (k == 0 || all[i] >= 2 * out[k - 1] || i == n - 1))
      out[k++] = all[i];
  return k;
}

/* The ZeRO stages a layout of dp replicas is tried with, least saving first: the options' one, or every stage; none
** below dp 2. */
static int zero_choices(const struct search *s, int dp, int *out) {
  const int only = s->o->no_zero ? STRATA_PLAN_ONLY(0) : s->o->zero;
  if (dp < 2) {
    out[0] = 0;
    return 1;
  }
  if (only != STRATA_PLAN_AUTO) {
    out[0] = only - 1;
    return 1;
  }
  for (int z = 0; z < 4; z++)
    out[z] = z;
  return 4;
}

/* The recompute modes tried, least saving first: the options' one, or every mode (the layout check then drops those
** the model or the schedule does not allow). */
static int recompute_choices(const struct search *s, int *out) {
  if (s->o->recompute != STRATA_PLAN_AUTO) {
    out[0] = s->o->recompute - 1;
    return 1;
  }
  for (int r = STRATA_RECOMPUTE_NONE; r <= STRATA_RECOMPUTE_FULL; r++)
    out[r] = r;
  return 3;
}

/* The sequence parallelism choices, without it first: the options' one, or both where every rank has the same tp
** degree above 1 (the layout refuses it otherwise); without it elsewhere. */
static int sp_choices(const struct search *s, int pp, const struct group *const *gl, int *out) {
  int uniform = gl[0]->t > 1;
  for (int r = 1; r < pp && uniform; r++)
    uniform = gl[r]->t == gl[0]->t;
  if (s->o->sp != STRATA_PLAN_AUTO) {
    out[0] = s->o->sp - 1;
    return 1;
  }
  out[0] = 0, out[1] = 1;
  return uniform ? 2 : 1;
}

/* The exhaustive search's pass 4: every composition of L layers into S stages, each in every memory mode (zs, rs)
** that fits simulated — but for a recompute mode where one of the same ZeRO stage that recomputes less fitted at the
** same split (dominated, as in try_mode). */
static void try_every_split(struct search *s, int dp, int pp, const struct group *const *gl, int kind, int m, int v,
                            const int *zs, int nz, const int *rs, int nr, int64_t rows, const int *inflight,
                            const struct strata__plan_peaks *pk, int *split) {
  const int S = pp * v;
  strata_layout_t l[12] = {NULL}; /* [zero choice x recompute choice], NULL where the check refuses the mode */
  for (int i = 0; i < nz * nr && !s->rc; i++) {
    const struct mode mode = {.zero = zs[i / nr], .recompute = rs[i % nr], .sp = s->o->sp == STRATA_PLAN_ONLY(1)};
    if (!(l[i] = build(s, dp, pp, gl, kind, m, v, &mode, NULL)))
      s->rc = mode.sp ? STRATA_OK : strata__error(STRATA_ERR_NOMEM, "planner: out of host memory");
    else if ((mode.recompute || mode.sp) && strata_layout_check(l[i], s->model, -1) != STRATA_OK)
      strata_layout_free(l[i]), l[i] = NULL;
  }
  for (int j = 0; j < S; j++)
    split[j] = 1;
  split[S - 1] = s->L - (S - 1);
  for (int done = s->rc != 0; !done;) {
    for (int zi = 0; zi < nz; zi++)
      for (int ri = 0, fit = 0; ri < nr; ri++) {
        strata_layout_t base = l[zi * nr + ri];
        if (!base)
          continue;
        s->plan->considered++;
        if (fit) {
          s->plan->dominated++;
        } else if (!split_fits(s, base, rows, inflight, pk, split)) {
          s->plan->pruned++;
        } else {
          const struct mode mode = {.zero = zs[zi], .recompute = rs[ri], .sp = strata_layout_sp(base)};
          strata_layout_t full = build(s, dp, pp, gl, kind, m, v, &mode, split);
          fit = full && strata__plan_evaluate(s, full);
        }
      }
    /* next composition: move one layer from the last stage leftwards, odometer style */
    int j = S - 2;
    while (j >= 0) {
      int rest = 0;
      for (int q = j + 1; q < S; q++)
        rest += split[q] - 1;
      if (rest > 0) {
        split[j]++;
        int used = 0;
        for (int q = 0; q <= j; q++)
          used += split[q];
        for (int q = j + 1; q < S - 1; q++)
          split[q] = 1, used++;
        split[S - 1] = s->L - used;
        break;
      }
      j--;
    }
    done = j < 0 || S == 1;
  }
  for (int i = 0; i < nz * nr; i++)
    strata_layout_free(l[i]);
}

/* Layout l of one memory mode formed: -1 when the layout check refuses the mode (a recompute mode or sequence
** parallelism with this model or schedule; not counted), 0 pruned by memory, 1 with a balanced split that fits
** (split[] filled). */
static int form(struct search *s, strata_layout_t l, const struct mode *mode, int64_t rows, const int *inflight,
                const struct strata__plan_peaks *pk, int *split) {
  if ((mode->recompute || mode->sp) && strata_layout_check(l, s->model, -1) != STRATA_OK)
    return -1;
  s->plan->considered++;
  if (!average_fits(s, l, rows, inflight) || best_split(s, l, rows, inflight, split) != 0 ||
      !split_fits(s, l, rows, inflight, pk, split)) {
    s->plan->pruned++;
    return 0;
  }
  return 1;
}

/* Keep layout l (its split set) for strata__plan_run_deferred; takes ownership. 1, or 0 out of memory (s->rc set). */
static int defer(struct search *s, strata_layout_t l, int64_t rows) {
  if (s->ndeferred == s->capdeferred) {
    const int cap = s->capdeferred ? 2 * s->capdeferred : 64;
    struct strata__plan_deferred *d = realloc(s->deferred, sizeof *d * (size_t)cap);
    if (!d) {
      strata_layout_free(l);
      s->rc = strata__error(STRATA_ERR_NOMEM, "planner: out of host memory");
      return 0;
    }
    s->deferred = d;
    s->capdeferred = cap;
  }
  const double bound = s->c->uniform && strata__plan_groups_alike(s->c, l, 1)
                           ? strata__plan_step_bound(s->c, s->model, l, rows) : 0;
  s->deferred[s->ndeferred++] = (struct strata__plan_deferred){.layout = l, .bound = bound, .rows = rows};
  return 1;
}

static int by_bound(const void *a, const void *b) {
  const struct strata__plan_deferred *x = a, *y = b;
  return (x->bound > y->bound) - (x->bound < y->bound);
}

/*
** The deferred layouts (saving modes: ZeRO-2/3, recomputation), simulated once every other layout has been, the
** lowest step bound first: as the pool fills with the fastest, the rest are dominated by it (dominated(): the kept
** candidates are the same as if each had been simulated where it was formed), so few saving layouts are simulated
** where a plain one is fast, and every one is where nothing else fits.
*/
static void run_deferred(struct search *s) {
  if (s->ndeferred > 1) /* none deferred: no array at all, and qsort's base must not be NULL */
    qsort(s->deferred, (size_t)s->ndeferred, sizeof *s->deferred, by_bound);
  for (int i = 0; i < s->ndeferred; i++) {
    strata_layout_t l = s->deferred[i].layout;
    s->deferred[i].layout = NULL;
    if (s->rc || dominated(s, l, s->deferred[i].rows))
      strata_layout_free(l);
    else
      strata__plan_evaluate(s, l);
  }
  s->ndeferred = 0;
}

/*
** A formed layout of one mode with its split: simulated unless dominated — its step's bound above the slowest kept,
** or (`fitted`, n_fit entries of a recompute mode and S split sizes each) the split of a mode of the same ZeRO stage
** that recomputes no more, without sequence parallelism or with it as this one, and fitted: this one only adds work
** to it (the same lists with more RECOMPUTE work on each device, each action's cost no less; sequence parallelism
** moves the tp joins' bytes as an all-gather and a reduce-scatter, which the simulator costs as the all-reduce). A
** layout that fitted (or was dominated by its bound) adds its split to `fitted` (FITTED_MAX entries at most).
*/
#define FITTED_MAX 6
static void run_mode(struct search *s, int dp, int pp, const struct group *const *gl, int kind, int m, int v,
                     const struct mode *mode, int64_t rows, const int *split, int *fitted, int *n_fit, int *free_rc) {
  const int S = pp * v;
  if (s->fits_only) {
    s->found = 1;
    return;
  }
  int same = 0;
  for (int i = 0; i < *n_fit && !same; i++) {
    const int *f = &fitted[(size_t)i * (size_t)(S + 1)];
    same = f[0] <= mode->recompute && memcmp(f + 1, split, sizeof *split * (size_t)S) == 0;
  }
  strata_layout_t full = same ? NULL : build(s, dp, pp, gl, kind, m, v, mode, split);
  int fit = 0;
  if (same)
    s->plan->dominated++;
  else if (!full)
    s->rc = strata__error(STRATA_ERR_NOMEM, "planner: out of host memory");
  else if (dominated(s, full, rows))
    strata_layout_free(full), fit = 1;
  else if (mode->zero >= 2 || mode->recompute || mode->sp)
    fit = defer(s, full, rows); /* (taken as fitting: its memory did, by the model the simulator checks too) */
  else
    fit = strata__plan_evaluate(s, full);
  if (fit && s->split_free && (*free_rc < 0 || mode->recompute < *free_rc))
    *free_rc = mode->recompute;
  if (fit && *n_fit < FITTED_MAX) {
    int *f = &fitted[(size_t)(*n_fit)++ * (size_t)(S + 1)];
    f[0] = mode->recompute;
    memcpy(f + 1, split, sizeof *split * (size_t)S);
  }
}

/*
** The recompute modes rs[0..nr) (least saving first) of one ZeRO stage: the most saving formed first, as a stage's
** bytes shrink with recomputation (none keeps every block's activations of each micro-batch in flight, selective
** all but the attention's output and log-sum-exps, full only the block's input, each recomputing mode adding one
** block's recomputed values once): where it finds no split that fits, neither does a mode that recomputes less, and
** those are counted pruned unformed. Otherwise each is formed and run, the least saving first.
*/
static void try_modes(struct search *s, int dp, int pp, const struct group *const *gl, int kind, int m, int v,
                      int zero, int sp, const int *rs, int nr, int64_t rows, const int *inflight,
                      const struct strata__plan_peaks *pk, int *split, int *fitted, int *n_fit, int *free_rc) {
  const int S = pp * v;
  int last = -1;
  strata_layout_t l[3] = {NULL};
  int *last_split = malloc(sizeof *last_split * (size_t)S);
  if (!last_split)
    s->rc = strata__error(STRATA_ERR_NOMEM, "planner: out of host memory");
  /* (the layouts without their split are built as they are needed) */
  if (!s->rc && nr > 1) {
    const struct mode mode = {.zero = zero, .recompute = rs[nr - 1], .sp = sp};
    if (!(l[nr - 1] = build(s, dp, pp, gl, kind, m, v, &mode, NULL)))
      s->rc = sp ? STRATA_OK : strata__error(STRATA_ERR_NOMEM, "planner: out of host memory");
    else
      last = form(s, l[nr - 1], &mode, rows, inflight, pk, last_split);
    if (!l[nr - 1]) /* (sequence parallelism the layout refuses: not formed) */
      last = 0, nr = 1;
    if (last == 0 && l[nr - 1]) /* (the check that accepted it accepts every mode that recomputes less) */
      s->plan->considered += nr - 1, s->plan->pruned += nr - 1;
  }
  for (int i = 0; i < nr && !s->rc && last != 0 && !(s->fits_only && s->found); i++) {
    const struct mode mode = {.zero = zero, .recompute = rs[i], .sp = sp};
    if (*free_rc >= 0 && rs[i] >= *free_rc && (i < nr - 1 || nr == 1)) {
      /* a mode that recomputes no less (and with sp, or as the one) fitted at the split by time alone: this one
      ** holds no more, so its split is that one too (every stage of it fits), and it only adds work (run_mode) */
      s->plan->considered++, s->plan->dominated++;
      continue;
    }
    if (!l[i] && !(l[i] = build(s, dp, pp, gl, kind, m, v, &mode, NULL))) {
      if (!sp) /* (sequence parallelism the layout refuses: not formed) */
        s->rc = strata__error(STRATA_ERR_NOMEM, "planner: out of host memory");
      break;
    }
    const int formed = i == nr - 1 && nr > 1 ? last : form(s, l[i], &mode, rows, inflight, pk, split);
    if (formed == 1)
      run_mode(s, dp, pp, gl, kind, m, v, &mode, rows, i == nr - 1 && nr > 1 ? last_split : split, fitted, n_fit,
               free_rc);
  }
  for (int i = 0; i < 3; i++)
    strata_layout_free(l[i]);
  free(last_split);
}

/*
** Whether any mode of one ZeRO stage can fit, by its most saving one: sequence parallelism (a slice holds 1/tp of the
** rows outside the split matrices, nothing more) with the most saving recompute mode `last`. Where its split does not
** fit, no mode's does: the 2 x nr modes are counted pruned (nr - 1 of them unformed, as try_modes counts them) and 0
** returned. Layouts the check refuses are not counted, and 1 returned (try_modes forms them as it goes).
*/
static int fits_at_all(struct search *s, int dp, int pp, const struct group *const *gl, int kind, int m, int v,
                       int zero, int last, int nr, int64_t rows, const int *inflight,
                       const struct strata__plan_peaks *pk, int *split) {
  const struct mode most = {.zero = zero, .recompute = last, .sp = 1};
  strata_layout_t l = build(s, dp, pp, gl, kind, m, v, &most, NULL);
  if (!l)
    return 1;
  int rc = 1;
  if (strata_layout_check(l, s->model, -1) == STRATA_OK) {
    const int considered = s->plan->considered, pruned = s->plan->pruned;
    const int formed = form(s, l, &most, rows, inflight, pk, split);
    s->plan->considered = considered, s->plan->pruned = pruned; /* (try_modes counts it where it forms it) */
    if (formed == 0) {
      s->plan->considered += 2 * nr, s->plan->pruned += 2 * nr;
      rc = 0;
    }
  }
  strata_layout_free(l);
  return rc;
}

/*
** Pass 3 and 4 for one assignment of groups to (replica, rank): every
** micro-batch count, schedule and memory mode (ZeRO stage, recompute
** mode), the split balanced (or with `exhaustive` every split), pruned
** by memory, then simulated.
*/
void strata__plan_try_assignment(struct search *s, int dp, int pp, const struct group *const *gl) {
  const int64_t share = s->o->batch / dp;
  int ms[MAX_M_CHOICES];
  int nm = m_choices(share, pp, s->o->max_microbatches > 0 ? s->o->max_microbatches : DEFAULT_MAX_MICROBATCHES, ms);
  static const int kinds[] = {STRATA_SCHEDULE_1F1B, STRATA_SCHEDULE_GPIPE, STRATA_SCHEDULE_ZB_H1,
                              STRATA_SCHEDULE_INTERLEAVED, STRATA_SCHEDULE_ZBV, STRATA_SCHEDULE_DUALPIPEV};
  int zs[4], rs[3], sps[2];
  const int nz = zero_choices(s, dp, zs), nr = recompute_choices(s, rs), nsp = sp_choices(s, pp, gl, sps);
  for (int mi = 0; mi < nm && !s->rc; mi++)
    for (int ki = 0; ki < 6 && !s->rc; ki++) {
      const int kind = kinds[ki], m = ms[mi], v = strata_schedule_kind_stages_per_device(kind, 0);
      if (pp == 1 && kind != STRATA_SCHEDULE_1F1B)
        continue; /* one stage: every schedule is the same list */
      if ((kind == STRATA_SCHEDULE_INTERLEAVED && m % pp) || m < strata_schedule_kind_min_microbatches(kind, pp) ||
          s->L < pp * v)
        continue;
      if (strata__plan_past_deadline(s)) {
        s->rc = STRATA_ERR_TIMEOUT; /* strata_plan_min_devices says how far it got */
        break;
      }
      const int S = pp * v;
      const int64_t rows = share / m;
      int *inflight = malloc(sizeof *inflight * 3 * (size_t)S), *split = malloc(sizeof *split * (size_t)S);
      int *fitted = malloc(sizeof *fitted * FITTED_MAX * (size_t)(S + 1));
      const struct strata__plan_peaks *pk = NULL;
      if (!inflight || !split || !fitted || inflight_of(s, kind, pp, m, v, inflight, &pk) != STRATA_OK) {
        if (!inflight || !split || !fitted)
          s->rc = strata__error(STRATA_ERR_NOMEM, "planner: out of host memory");
        free(inflight);
        free(split);
        free(fitted);
        continue;
      }
      if (s->o->exhaustive)
        try_every_split(s, dp, pp, gl, kind, m, v, zs, nz, rs, nr, rows, inflight, pk, split);
      for (int zi = 0; zi < nz && !s->o->exhaustive && !s->rc && !(s->fits_only && s->found); zi++) {
        int n_fit = 0, free_rc = -1; /* (shared by the sequence parallelism choices: a mode with it at a split
                                     ** without it fitted at is dominated) */
        if (nsp == 2 && !fits_at_all(s, dp, pp, gl, kind, m, v, zs[zi], rs[nr - 1], nr, rows, inflight, pk, split))
          continue;
        for (int si = 0; si < nsp && !s->rc && !(s->fits_only && s->found); si++)
          try_modes(s, dp, pp, gl, kind, m, v, zs[zi], sps[si], rs, nr, rows, inflight, pk, split, fitted, &n_fit,
                    &free_rc);
      }
      free(inflight);
      free(split);
      free(fitted);
      if (s->fits_only && s->found)
        return;
    }
}

/* ---- the search ---- */

/* Run passes 1-5; fills s->plan. */
int strata__plan_run_search(struct search *s) {
  s->L = strata_model_layer_count(s->model);
  int tps[32];
  int nt = strata__plan_tp_degrees(s, tps);
  for (int i = 0; i < nt && !s->rc; i++) {
    /* pass 1: groups of tps[i]; then, where islands leave devices out, every device in groups of
    ** tps[i] and less (a tp degree per rank) */
    for (int mixed = 0; mixed <= (tps[i] > 1 && !s->o->fixed_tp) && !s->rc; mixed++) {
      int rc = strata__plan_make_groups(s, tps[i], mixed);
      if (rc)
        return rc;
      int used = 0, uniform = 1;
      for (int g = 0; g < s->ngroups; g++)
        used += s->groups[g].t, uniform &= s->groups[g].t == tps[i];
      if (s->ngroups == 0 || (mixed && (uniform || used < s->c->nodes * s->c->k)))
        continue; /* mixed adds nothing where every island divides into groups of tps[i] */
      s->mixed_tp = mixed;
      strata__plan_try_counts(s); /* passes 2-5 (search-counts.c) */
      if (s->fits_only && s->found)
        break;
    }
    if (s->fits_only && s->found)
      break;
  }
  s->mixed_tp = 0;
  if (!s->rc)
    run_deferred(s);
  if (!s->rc && !s->found) /* a cnn's layer too large for a device: its images cut by rows (search-spatial.c) */
    strata__plan_try_spatial(s);
  if (!s->rc && !s->fits_only && !s->o->exhaustive)
    strata__plan_refine(s);
  return s->rc;
}

void strata__plan_search_free(struct search *s) {
  strata__plan_groups_free(s);
  for (int i = 0; i < s->ndeferred; i++)
    strata_layout_free(s->deferred[i].layout);
  free(s->deferred);
  s->deferred = NULL;
  s->ndeferred = s->capdeferred = 0;
  while (s->inflight) {
    struct inflight_entry *e = s->inflight;
    s->inflight = e->next;
    strata__plan_peaks_free(e->pk);
    free(e->peak);
    free(e);
  }
  while (s->times) {
    struct times_entry *e = s->times;
    s->times = e->next;
    free(e->local);
    free(e->prefix);
    free(e);
  }
  while (s->ranges) {
    struct ranges_entry *e = s->ranges;
    s->ranges = e->next;
    strata__stage_ranges_free(e->r);
    free(e);
  }
}

int strata__plan_check_options(strata_machine_t c, strata_model_t m, const struct strata_plan_options *o) {
  if (!c || !m || !o)
    return strata__error(STRATA_ERR_INVALID, "planner: NULL argument");
  if (o->batch < 1)
    return strata__error(STRATA_ERR_INVALID, "planner: batch %lld must be positive", (long long)o->batch);
  if (o->top < 0 || o->max_microbatches < 0 || o->fixed_tp < 0)
    return strata__error(STRATA_ERR_INVALID, "planner: negative option");
  if (o->precision != STRATA_FLOAT32 && o->precision != STRATA_BFLOAT16)
    return strata__error(STRATA_ERR_INVALID, "planner: precision %d is neither STRATA_FLOAT32 nor STRATA_BFLOAT16",
                         o->precision);
  if (o->recompute < STRATA_PLAN_AUTO || o->recompute > STRATA_PLAN_ONLY(STRATA_RECOMPUTE_FULL) ||
      o->zero < STRATA_PLAN_AUTO || o->zero > STRATA_PLAN_ONLY(3) || o->sp < STRATA_PLAN_AUTO ||
      o->sp > STRATA_PLAN_ONLY(1))
    return strata__error(STRATA_ERR_INVALID, "planner: recompute %d, zero %d or sp %d is neither STRATA_PLAN_AUTO nor "
                         "STRATA_PLAN_ONLY of a mode", o->recompute, o->zero, o->sp);
  if (o->no_zero && o->zero > STRATA_PLAN_ONLY(0))
    return strata__error(STRATA_ERR_INVALID, "planner: no_zero and ZeRO-%d both asked for", o->zero - 1);
  if (o->recompute > STRATA_PLAN_ONLY(STRATA_RECOMPUTE_NONE) && strata_model_config(m)->kind != STRATA_MODEL_GPT &&
      strata_model_config(m)->kind != STRATA_MODEL_LLAMA)
    return strata__error(STRATA_ERR_UNSUPPORTED, "planner: recompute %s is for GPT and llama blocks, not '%s'",
                         strata_recompute_name(o->recompute - 1), strata_model_config(m)->name);
  if (o->sp == STRATA_PLAN_ONLY(1) && strata_model_config(m)->kind != STRATA_MODEL_GPT &&
      strata_model_config(m)->kind != STRATA_MODEL_LLAMA)
    return strata__error(STRATA_ERR_UNSUPPORTED, "planner: sequence parallelism is for GPT models and llamas, not '%s'",
                         strata_model_config(m)->name);
  if (o->precision == STRATA_BFLOAT16 && strata_model_config(m)->kind != STRATA_MODEL_GPT &&
      strata_model_config(m)->kind != STRATA_MODEL_LLAMA)
    return strata__error(STRATA_ERR_UNSUPPORTED, "planner: bf16 is for GPT models and llamas (as the trainer "
                         "trains them), not '%s'", strata_model_config(m)->name);
  return STRATA_OK;
}

STRATA_API int strata_plan_search(strata_machine_t c, strata_model_t model, const struct strata_plan_options *o,
                                  strata_plan_t *out) {
  if (!out)
    return strata__error(STRATA_ERR_INVALID, "strata_plan_search: out is NULL");
  *out = NULL;
  TRY(strata__plan_check_options(c, model, o));
  /* every cost the search reads is the precision's: it searches on the machine as it computes in it */
  struct strata_machine *v;
  TRY(strata__machine_in(c, o->precision, &v));
  struct strata_plan *p = calloc(1, sizeof *p);
  if (!p) {
    strata__machine_in_free(v);
    return strata__error(STRATA_ERR_NOMEM, "planner: out of host memory");
  }
  const int want = o->top > 0 ? o->top : DEFAULT_TOP;
  p->top = want > POOL ? want : POOL; /* a wider pool for the refinement, cut to `want` after it */
  p->c = calloc((size_t)p->top, sizeof *p->c);
  if (!p->c) {
    free(p);
    strata__machine_in_free(v);
    return strata__error(STRATA_ERR_NOMEM, "planner: out of host memory");
  }
  struct search s = {.c = v, .model = model, .o = o, .plan = p};
  int rc = strata__plan_run_search(&s);
  strata__plan_search_free(&s);
  while (p->n > want) {
    p->n--;
    strata_layout_free(p->c[p->n].layout);
    strata_sim_result_destroy(&p->c[p->n].res);
  }
  p->top = want;
  if (!rc && p->n == 0) {
    int need = 0;
    const int have = strata_machine_device_count(c);
    const int why = strata_plan_min_devices(c, model, o, 1 << 16, &need);
    /* a mixed box is not "n x its first GPU": say so, and count devices like its first */
    char on[480], like[160];
    const int mixed = strata__machine_mixed(c);
    if (mixed)
      snprintf(on, sizeof on, "the %d GPUs of %s", have, strata_machine_describe(c));
    else
      snprintf(on, sizeof on, "%d x %s", have, c->names[0]);
    snprintf(like, sizeof like, mixed ? "devices like its first, %s" : "of them%.0s", c->names[0]);
    if (why == STRATA_OK && need > have)
      rc = strata__error(STRATA_ERR_DEVICE_MEMORY, "%s at batch %lld does not fit on %s: it needs at least %d %s",
                         strata_model_config(model)->name, (long long)o->batch, on, need, like);
    else if (why == STRATA_ERR_DEVICE_MEMORY || why == STRATA_ERR_TIMEOUT)
      rc = STRATA_ERR_DEVICE_MEMORY; /* no count ever fits, or how many would is not known: its message stands */
    else
      rc = strata__error(STRATA_ERR_DEVICE_MEMORY,
                         "%s at batch %lld: no layout on %s fits (the batch may not divide into micro-batches)",
                         strata_model_config(model)->name, (long long)o->batch, on);
  }
  if (rc) {
    strata_plan_free(p);
    strata__machine_in_free(v);
    return rc;
  }
  strata__plan_explain_candidates(s.plan, s.c);
  strata__machine_in_free(v);
  *out = p;
  return STRATA_OK;
}
