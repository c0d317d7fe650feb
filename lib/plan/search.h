/* SPDX-License-Identifier: MIT */
/* plan/search.h — the planner's search state, shared by its passes (search.c), its refinement (search-refine.c) and
** the device count's probes (min-devices.c). Internal. */
#ifndef STRATA__PLAN_SEARCH_H
#define STRATA__PLAN_SEARCH_H

#include "plan/plan.h"

/* The most devices of a layout the refinement pass takes (larger jobs keep their balanced split). */
#define STRATA__PLAN_REFINE_MAX_DEVICES 64

/* A tensor-parallel group: devices of one island of one node. */
struct group {
  int *devs;
  int t, node, island;
  double flops;                     /* slowest member's, x t */
  uint64_t memory;                  /* smallest member's */
};

/* Everything one search needs, shared by its passes. */
struct search {
  const struct strata_machine *c;
  strata_model_t model;
  const struct strata_plan_options *o;
  struct strata_plan *plan;
  int L;
  struct ranges_entry *ranges;      /* every cut's bytes, by micro-batch, tp and ZeRO degree and schedule kind */
  struct group *groups;
  int ngroups;
  int fits_only;                    /* min_devices: stop at the first layout that fits, no simulation */
  double deadline;                  /* min_devices: strata__now() past which it stops, STRATA_ERR_TIMEOUT (0: none) */
  int mixed_tp;                     /* the groups differ in tp degree */
  int found;
  int split_free;                   /* the last split balanced was the one by time alone (memory did not bind it) */
  int rc;
  struct inflight_entry *inflight;  /* micro-batches in flight per stage, by schedule shape */
  struct times_entry *times;        /* a rank's layer times, by its group's place in a node and the micro-batch */
  struct strata__plan_deferred *deferred; /* layouts of a saving memory mode, formed with their split, simulated after
                                    ** the rest (strata__plan_run_deferred) */
  int ndeferred, capdeferred;
};

/* A layout whose simulation waits for the pool to fill: the lower bound of its step (0: none) and its micro-batch. */
struct strata__plan_deferred {
  strata_layout_t layout;
  double bound;
  int64_t rows;
};

/* Pass 1 (search-groups.c): free s's groups; make them of t devices each (`mixed`: where an island does not divide
** into groups of t, its rest in groups of the largest degree below t that the model divides); the tp degrees a search
** tries (powers of two up to the largest island that the model divides, or the options' fixed one) into out, their
** count. */
void strata__plan_groups_free(struct search *s);
int strata__plan_make_groups(struct search *s, int t, int mixed);
int strata__plan_tp_degrees(const struct search *s, int *out);
/* Passes 1-5 on s (its machine, model, options and plan set): fills s->plan, or s->found with fits_only. */
int strata__plan_run_search(struct search *s);
/* Free what a search built (its groups and caches; not its plan). */
void strata__plan_search_free(struct search *s);
/* Check a search's arguments (NULLs, the batch, the precision and the model's kind). */
int strata__plan_check_options(strata_machine_t c, strata_model_t m, const struct strata_plan_options *o);
/* Pass 2 (search-counts.c): every count of replicas and ranks over s's groups of this tp degree, and the groups'
** orders over them, each handed to strata__plan_try_assignment. */
void strata__plan_try_counts(struct search *s);
/* Passes 3-5 for one assignment of groups (gl: dp x pp of them, replica after replica) to (replica, rank): every
** micro-batch count, schedule and memory mode, the split balanced and pruned by memory, then simulated. */
void strata__plan_try_assignment(struct search *s, int dp, int pp, const struct group *const *gl);
/* Simulate a built layout and keep it in the plan; 1 when it fits. Takes ownership of l. */
int strata__plan_evaluate(struct search *s, strata_layout_t l);
/* Whether a search with a deadline is past it. */
int strata__plan_past_deadline(const struct search *s);
/* The refinement pass: single-layer moves between the stages of the best candidates, simulated. */
void strata__plan_refine(struct search *s);
/* Spatial groups (search-spatial.c): for a cnn with gap, slabs of N devices and replicas of them, simulated and kept
** (fits_only: s->found at the first that fits); run when no other layout fits. */
void strata__plan_try_spatial(struct search *s);

#endif /* STRATA__PLAN_SEARCH_H */
