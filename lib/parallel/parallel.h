/* SPDX-License-Identifier: MIT */
/* parallel.h — the schedule object and the shape of its chains and slices, shared by schedule.c and validate.c. Internal. */
#ifndef STRATA__PARALLEL_H
#define STRATA__PARALLEL_H

#include <strata/schedule.h>

/* Room for one action's label: "OPT" or "RG", two ints and a dot. */
#define STRATA__ACTION_STR 40

struct strata_schedule {
  int kind;                      /* STRATA_SCHEDULE_*, or 0 when built from lists */
  int devices, stages, microbatches;
  int replicas;                  /* chains of stages / replicas stages each (data-parallel copies x tp) */
  int tp;                        /* tensor-parallel slices: chain c is slice c % tp of replica c / tp */
  int *stage_tp;                 /* [stages / replicas], or NULL (every stage tp): the slices of each stage of a
                                 ** chain; stage st of a chain whose slice is at least its degree is held by no
                                 ** device (the slice c % stage_tp of the same replica stands for it) */
  int *stage_device;             /* [stages]: a stage held by no device names its stand-in's */
  int *counts;                   /* [devices] */
  int *caps;                     /* [devices], allocated room of each list */
  struct strata_action **lists;  /* [devices], lists[d] holds counts[d] actions */
};

/* Kinds that have no micro-batch (-1): the optimizer and the gradient collectives. */
static inline int strata__per_stage(int kind) {
  return kind == STRATA_ACTION_OPTIMIZER || kind == STRATA_ACTION_GRAD_REDUCE || kind == STRATA_ACTION_GRAD_SCATTER ||
         kind == STRATA_ACTION_PARAM_GATHER;
}

/* Data-parallel copies (chains / tp). */
static inline int strata__dp(const struct strata_schedule *s) { return s->replicas / s->tp; }

/* Stages per replica, and whether stage st has a neighbour before / after it in its chain. */
static inline int strata__chain(const struct strata_schedule *s) { return s->stages / s->replicas; }
static inline int strata__has_prev(const struct strata_schedule *s, int st) { return st % strata__chain(s) != 0; }
static inline int strata__has_next(const struct strata_schedule *s, int st) { return (st + 1) % strata__chain(s) != 0; }

/*
** Tensor-parallel degree per stage. Chain c's stage at position j (st = c x chain + j) is slice c % tp of its
** replica; when the stage's own degree is smaller, no device holds it, and the slice (c % tp) % degree of the same
** replica — its owner — stands for it: it receives from that one and sends to it. A send fans out to every stage of
** the neighbouring position that it stands for.
*/
static inline int strata__tp_at(const struct strata_schedule *s, int st) {
  return s->stage_tp ? s->stage_tp[st % strata__chain(s)] : s->tp;
}
static inline int strata__held(const struct strata_schedule *s, int st) {
  return st / strata__chain(s) % s->tp < strata__tp_at(s, st);
}
static inline int strata__owner(const struct strata_schedule *s, int st) {
  const int chain = strata__chain(s), c = st / chain;
  return ((c / s->tp) * s->tp + (c % s->tp) % strata__tp_at(s, st)) * chain + st % chain;
}

/* Write "F2.5" (or "OPT2") for `a` into buf. */
const char *strata__action_str(const struct strata_action *a, char buf[STRATA__ACTION_STR]);
int strata__schedule_stage_peak(strata_schedule_t s, int stage, int open, int close, int close2, const char *fn,
                                int *peak);

#endif /* STRATA__PARALLEL_H */
