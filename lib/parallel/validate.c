/* SPDX-License-Identifier: MIT */
/* validate.c — a schedule's validator and unit-cost simulator: placement, completeness, deadlock, bubble, micro-batches in flight. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/schedule.h>

#include "core/core.h"
#include "parallel/parallel.h"

/* The gradient collectives (one per stage, over the replicas) and the tensor-parallel joins (per micro-batch, over
** the slices): actions that complete when every member of their group has reached them. */
static int strata__grad_collective(int kind) {
  return kind == STRATA_ACTION_GRAD_REDUCE || kind == STRATA_ACTION_GRAD_SCATTER || kind == STRATA_ACTION_PARAM_GATHER;
}
static int strata__tp_join(int kind) {
  return kind == STRATA_ACTION_TP_JOIN_FORWARD || kind == STRATA_ACTION_TP_JOIN_BACKWARD;
}
static int strata__collective(int kind) { return strata__grad_collective(kind) || strata__tp_join(kind); }
/* ZeRO-3's PARAM_GATHER of one micro-batch (before its F, B, BI or W): its device reads the replicas' shards, which
** hold the step's parameters all along, so it waits for no other device. */
static int strata__weight_gather(const struct strata_action *a) {
  return a->kind == STRATA_ACTION_PARAM_GATHER && a->microbatch >= 0;
}
/* Does action `a` complete only when every member of its group has reached it? */
static int strata__joins(const struct strata_action *a) {
  return strata__collective(a->kind) && !strata__weight_gather(a);
}

/* The group of collective `kind` at `stage`: its size, and the stage of its i-th member — the same stage of the
** same slice of every replica (gradient collectives), or of every slice of the same replica (tp joins). */
static int strata__group_size(const struct strata_schedule *s, int kind, int stage) {
  return strata__tp_join(kind) ? strata__tp_at(s, stage) : strata__dp(s);
}
static int strata__member(const struct strata_schedule *s, int kind, int stage, int i) {
  const int chain = strata__chain(s), c = stage / chain, base = stage % chain;
  if (strata__tp_join(kind))
    return ((c / s->tp) * s->tp + i) * chain + base;
  return (i * s->tp + c % s->tp) * chain + base;
}

/* ---------------------------------------------------------------- validation and simulation */

/*
** With recomputation and a split backward, a (stage, micro-batch) has two RECOMPUTEs — one for its BI, one for its
** W — and, on a tp-cut stage, a second TP_JOIN_BACKWARD right after its W (the joins of the W's recomputation). The
** validator keys them apart as two more kinds: an RC is the W's when the next backward work of its (stage, micro-batch)
** on its device is the W, a TJB the W's when it comes right after the W. Messages print them as RC and TJB.
*/
enum { STRATA__RC_W = STRATA_ACTION_KIND_COUNT, STRATA__TJ_W, STRATA__KINDS };

static int strata__label_kind(int kind) {
  return kind == STRATA__RC_W ? STRATA_ACTION_RECOMPUTE : kind == STRATA__TJ_W ? STRATA_ACTION_TP_JOIN_BACKWARD : kind;
}
static const char *strata__str(const struct strata_action *a, char buf[STRATA__ACTION_STR]) {
  struct strata_action b = *a;
  b.kind = strata__label_kind(b.kind);
  return strata__action_str(&b, buf);
}

/*
** Where every (kind, stage, micro-batch) occurs: how often, and its first
** place (device, index). OPTIMIZER uses micro-batch slot 0.
*/
struct strata__index {
  const struct strata_schedule *s;
  int *count, *dev, *pos;
  double *finish; /* simulation: completion time, < 0 while not done */
  double *arrive; /* collectives: when this replica's device reached it, < 0 before */
  int *bw_done;   /* [stages]: B and W actions done */
  double *bw_last;
  int *next;      /* [devices]: next position of each device */
  double *clock;  /* [devices] */
  int recompute;  /* the lists hold RECOMPUTE actions: each backward part (B, BI, W) waits for its own */
  int **kind;     /* [devices][position]: each action's kind as keyed (the W's RC and TJB apart, see above) */
};

static size_t strata__key(const struct strata_schedule *s, int kind, int stage, int microbatch) {
  return ((size_t)kind * (size_t)s->stages + (size_t)stage) * (size_t)s->microbatches +
         (size_t)(microbatch < 0 ? 0 : microbatch);
}

static void strata__index_free(struct strata__index *x) {
  free(x->count);
  free(x->dev);
  free(x->pos);
  free(x->finish);
  free(x->arrive);
  free(x->bw_done);
  free(x->bw_last);
  free(x->next);
  free(x->clock);
  for (int d = 0; x->kind && d < x->s->devices; d++)
    free(x->kind[d]);
  free(x->kind);
}

static int strata__index_init(struct strata__index *x, const struct strata_schedule *s) {
  memset(x, 0, sizeof *x);
  x->s = s;
  size_t n = strata__key(s, STRATA__KINDS, 0, 0);
  x->count = calloc(n, sizeof *x->count);
  x->dev = malloc(n * sizeof *x->dev);
  x->pos = malloc(n * sizeof *x->pos);
  x->finish = malloc(n * sizeof *x->finish);
  x->arrive = malloc(n * sizeof *x->arrive);
  x->bw_done = calloc((size_t)s->stages, sizeof *x->bw_done);
  x->bw_last = calloc((size_t)s->stages, sizeof *x->bw_last);
  x->next = calloc((size_t)s->devices, sizeof *x->next);
  x->clock = calloc((size_t)s->devices, sizeof *x->clock);
  x->kind = calloc((size_t)s->devices, sizeof *x->kind);
  int *after = calloc((size_t)s->stages * (size_t)s->microbatches, sizeof *after); /* the next backward kind + 1 */
  for (int d = 0; x->kind && d < s->devices; d++)
    if (!(x->kind[d] = malloc(((size_t)s->counts[d] + 1) * sizeof *x->kind[d])))
      break;
  if (!x->count || !x->dev || !x->pos || !x->finish || !x->arrive || !x->bw_done || !x->bw_last || !x->next ||
      !x->clock || !x->kind || !after || (s->devices && !x->kind[s->devices - 1])) {
    free(after);
    strata__index_free(x);
    return strata__error(STRATA_ERR_NOMEM, "schedule: out of memory for the validator's tables (%zu entries)", n);
  }
  for (size_t i = 0; i < n; i++)
    x->finish[i] = x->arrive[i] = -1;
  for (int d = 0; d < s->devices; d++) {
    /* keyed kinds, from the end: an RC takes the part of the next backward work of its (stage, micro-batch); the
    ** table is left zero again for the next device (by its entries, not the whole: devices x stages x micro-batches
    ** would be too many) */
    for (int i = s->counts[d] - 1; i >= 0; i--) {
      const struct strata_action *a = &s->lists[d][i];
      const int ok = a->stage >= 0 && a->stage < s->stages && a->microbatch >= 0 && a->microbatch < s->microbatches;
      int *next = ok ? &after[(size_t)a->stage * (size_t)s->microbatches + (size_t)a->microbatch] : NULL;
      const struct strata_action *p = i > 0 ? &s->lists[d][i - 1] : NULL;
      x->kind[d][i] = a->kind;
      if (next && a->kind == STRATA_ACTION_RECOMPUTE && *next == STRATA_ACTION_BACKWARD_WEIGHT + 1)
        x->kind[d][i] = STRATA__RC_W;
      else if (a->kind == STRATA_ACTION_TP_JOIN_BACKWARD && p && p->kind == STRATA_ACTION_BACKWARD_WEIGHT &&
               p->stage == a->stage && p->microbatch == a->microbatch)
        x->kind[d][i] = STRATA__TJ_W;
      if (next && a->kind >= STRATA_ACTION_BACKWARD && a->kind <= STRATA_ACTION_BACKWARD_WEIGHT)
        *next = a->kind + 1;
    }
    for (int i = 0; i < s->counts[d]; i++) {
      const struct strata_action *a = &s->lists[d][i];
      if (a->stage >= 0 && a->stage < s->stages && a->microbatch >= 0 && a->microbatch < s->microbatches)
        after[(size_t)a->stage * (size_t)s->microbatches + (size_t)a->microbatch] = 0;
    }
    for (int i = 0; i < s->counts[d]; i++) {
      const struct strata_action *a = &s->lists[d][i];
      size_t k = strata__key(s, x->kind[d][i], a->stage, a->microbatch);
      if (x->count[k]++ == 0) {
        x->dev[k] = d;
        x->pos[k] = i;
      }
      x->recompute |= a->kind == STRATA_ACTION_RECOMPUTE;
    }
  }
  free(after);
  return STRATA_OK;
}

/* The backward of (stage, mb) that the schedule has: B when it has one, BI otherwise. */
static int strata__backward_kind(const struct strata__index *x, int stage, int microbatch) {
  return x->count[strata__key(x->s, STRATA_ACTION_BACKWARD, stage, microbatch)] ? STRATA_ACTION_BACKWARD
                                                                                 : STRATA_ACTION_BACKWARD_INPUT;
}

/*
** The actions `a` (of keyed kind `kind`) waits for, other than OPTIMIZER's
** (which waits for its whole stage): up to two, stored in deps (keyed
** kinds); returns how many.
*/
static int strata__deps(const struct strata__index *x, const struct strata_action *a, int kind,
                        struct strata_action deps[2]) {
  const struct strata_schedule *s = x->s;
  const int st = a->stage, mb = a->microbatch;
  int n = 0;
#define STRATA__DEP(k, sg) (deps[n++] = (struct strata_action){.kind = (k), .stage = (sg), .microbatch = mb})
  switch (kind) {
  case STRATA_ACTION_FORWARD:
    if (strata__has_prev(s, st)) {
      const int prev = strata__owner(s, st - 1);
      if (s->stage_device[prev] == s->stage_device[st])
        STRATA__DEP(STRATA_ACTION_FORWARD, prev);
      else
        STRATA__DEP(STRATA_ACTION_RECV_ACT, st);
    }
    break;
  case STRATA_ACTION_SEND_ACT: STRATA__DEP(STRATA_ACTION_FORWARD, st); break;
  case STRATA_ACTION_RECV_ACT: STRATA__DEP(STRATA_ACTION_SEND_ACT, strata__owner(s, st - 1)); break;
  case STRATA_ACTION_BACKWARD:
  case STRATA_ACTION_BACKWARD_INPUT:
    /* with recomputation its RECOMPUTE, which waits for the forward */
    STRATA__DEP(x->recompute ? STRATA_ACTION_RECOMPUTE : STRATA_ACTION_FORWARD, st);
    if (strata__has_next(s, st)) {
      const int next = strata__owner(s, st + 1);
      if (s->stage_device[next] == s->stage_device[st])
        STRATA__DEP(strata__backward_kind(x, next, mb), next);
      else
        STRATA__DEP(STRATA_ACTION_RECV_GRAD, st);
    }
    break;
  case STRATA_ACTION_SEND_GRAD: STRATA__DEP(strata__backward_kind(x, st, mb), st); break;
  case STRATA_ACTION_RECV_GRAD: STRATA__DEP(STRATA_ACTION_SEND_GRAD, strata__owner(s, st + 1)); break;
  case STRATA_ACTION_BACKWARD_WEIGHT: /* (with recomputation its own RC too: the buffer holds the BI's no more) */
    STRATA__DEP(STRATA_ACTION_BACKWARD_INPUT, st);
    if (x->recompute)
      STRATA__DEP(STRATA__RC_W, st);
    break;
  case STRATA_ACTION_PARAM_GATHER:
    if (mb >= 0)
      break; /* ZeRO-3's, of one micro-batch: the shards are there all along */
    deps[n++] = (struct strata_action){.kind = STRATA_ACTION_OPTIMIZER, .stage = st, .microbatch = -1};
    break;
  case STRATA_ACTION_TP_JOIN_FORWARD: STRATA__DEP(STRATA_ACTION_FORWARD, st); break;
  case STRATA_ACTION_RECOMPUTE:
  case STRATA__RC_W: STRATA__DEP(STRATA_ACTION_FORWARD, st); break;
  case STRATA_ACTION_TP_JOIN_BACKWARD: STRATA__DEP(strata__backward_kind(x, st, mb), st); break;
  case STRATA__TJ_W: STRATA__DEP(STRATA_ACTION_BACKWARD_WEIGHT, st); break;
  default: break;
  }
#undef STRATA__DEP
  return n;
}

/* The backward work OPTIMIZER(stage) still waits for (a B or a W), or 0 when none; stored in *w. */
static int strata__optimizer_waits(const struct strata__index *x, int stage, struct strata_action *w) {
  for (int mb = 0; mb < x->s->microbatches; mb++) {
    int k = strata__backward_kind(x, stage, mb) == STRATA_ACTION_BACKWARD ? STRATA_ACTION_BACKWARD
                                                                           : STRATA_ACTION_BACKWARD_WEIGHT;
    if (x->finish[strata__key(x->s, k, stage, mb)] < 0) {
      *w = (struct strata_action){.kind = k, .stage = stage, .microbatch = mb};
      return 1;
    }
  }
  return 0;
}

/*
** The static half of validation: every action on its stage's device, no
** transfer where none belongs, nothing twice, nothing missing, and on each
** device nothing before the same-device work it needs.
*/
static int strata__check_lists(const struct strata__index *x) {
  const struct strata_schedule *s = x->s;
  const int S = s->stages, M = s->microbatches;
  char b1[STRATA__ACTION_STR], b2[STRATA__ACTION_STR];
  for (int d = 0; d < s->devices; d++)
    for (int i = 0; i < s->counts[d]; i++) {
      const struct strata_action *a = &s->lists[d][i];
      const int st = a->stage, home = s->stage_device[st];
      strata__action_str(a, b1);
      if (!strata__held(s, st))
        return strata__error(STRATA_ERR_INVALID, "dev %d #%d %s: no device holds stage %d (slice %d of a stage cut in "
                             "%d)", d, i, b1, st, st / strata__chain(s) % s->tp, strata__tp_at(s, st));
      if (home != d)
        return strata__error(STRATA_ERR_INVALID, "dev %d #%d %s: stage %d is on dev %d, not here", d, i, b1, st, home);
      int other = -1;
      switch (a->kind) {
      case STRATA_ACTION_SEND_ACT:
      case STRATA_ACTION_RECV_GRAD: other = st + 1; break;
      case STRATA_ACTION_RECV_ACT:
      case STRATA_ACTION_SEND_GRAD: other = st - 1; break;
      default: break;
      }
      if ((a->kind == STRATA_ACTION_SEND_ACT || a->kind == STRATA_ACTION_SEND_GRAD) && other >= 0 &&
          other / strata__chain(s) == st / strata__chain(s) && !strata__held(s, other))
        return strata__error(STRATA_ERR_INVALID, "dev %d #%d %s: no device holds stage %d of this slice: another slice "
                             "sends there", d, i, b1, other);
      if (other >= 0 && other / strata__chain(s) == st / strata__chain(s))
        other = strata__owner(s, other);
      if ((a->kind == STRATA_ACTION_RECV_ACT || a->kind == STRATA_ACTION_SEND_GRAD) && !strata__has_prev(s, st))
        return strata__error(STRATA_ERR_INVALID, "dev %d #%d %s: stage %d has no stage before it in its replica", d, i,
                             b1, st);
      if ((a->kind == STRATA_ACTION_SEND_ACT || a->kind == STRATA_ACTION_RECV_GRAD) && !strata__has_next(s, st))
        return strata__error(STRATA_ERR_INVALID, "dev %d #%d %s: stage %d is the last stage of its replica", d, i, b1,
                             st);
      if (strata__grad_collective(a->kind) && strata__dp(s) == 1)
        return strata__error(STRATA_ERR_INVALID, "dev %d #%d %s: a gradient collective in a schedule of one replica", d,
                             i, b1);
      if (strata__tp_join(a->kind) && strata__tp_at(s, st) == 1)
        return strata__error(STRATA_ERR_INVALID, "dev %d #%d %s: a tensor-parallel join %s", d, i, b1,
                             s->tp == 1 ? "in a schedule without slices" : "of a stage that is not cut");
      if (x->kind[d][i] == STRATA__TJ_W && !x->recompute)
        return strata__error(STRATA_ERR_INVALID, "dev %d #%d %s: right after a W, which has no joins to settle without "
                             "recomputation", d, i, b1);
      if (strata__tp_join(a->kind) && x->kind[d][i] != STRATA__TJ_W) {
        /* right after the work it joins: the executor runs the joins inside it */
        int want = a->kind == STRATA_ACTION_TP_JOIN_FORWARD ? STRATA_ACTION_FORWARD : -1;
        const struct strata_action *p = i > 0 ? &s->lists[d][i - 1] : NULL;
        int ok = p && p->stage == st && p->microbatch == a->microbatch &&
                 (want >= 0 ? p->kind == want
                            : (p->kind == STRATA_ACTION_BACKWARD || p->kind == STRATA_ACTION_BACKWARD_INPUT));
        if (!ok)
          return strata__error(STRATA_ERR_INVALID, "dev %d #%d %s: not right after the %s%d.%d whose joins it is", d, i,
                               b1, want >= 0 ? "F" : "B (or BI) ", st, a->microbatch);
      }
      if (other >= 0 && s->stage_device[other] == d)
        return strata__error(STRATA_ERR_INVALID, "dev %d #%d %s: stage %d is on dev %d but stage %d too — no %s needed", d,
                             i, b1, st, d, other,
                             a->kind == STRATA_ACTION_SEND_ACT || a->kind == STRATA_ACTION_SEND_GRAD ? "send"
                                                                                                    : "receive");
      size_t k = strata__key(s, x->kind[d][i], st, a->microbatch);
      if (x->count[k] > 1 && (x->dev[k] != d || x->pos[k] != i) && !strata__weight_gather(a)) /* (one per F/B/W) */
        return strata__error(STRATA_ERR_INVALID, "dev %d #%d %s: duplicate (first at dev %d #%d)%s", d, i, b1, x->dev[k],
                             x->pos[k], a->kind == STRATA_ACTION_RECOMPUTE ? ": one RC before each backward part" : "");
    }

  /* completeness */
  for (int st = 0; st < S; st++) {
    const int home = s->stage_device[st];
    const int cut_next = strata__has_next(s, st) && s->stage_device[st + 1] != home;
    if (!strata__held(s, st)) {
      /* stood for by another slice: the next stage of this slice, if held, receives from that one */
      for (int mb = 0; cut_next && strata__held(s, st + 1) && mb < M; mb++)
        if (!x->count[strata__key(s, STRATA_ACTION_RECV_ACT, st + 1, mb)])
          return strata__error(STRATA_ERR_INVALID, "missing RA%d.%d on dev %d (its input comes from stage %d on dev %d)",
                               st + 1, mb, s->stage_device[st + 1], st, home);
      continue;
    }
    const int next_held = strata__has_next(s, st) && strata__held(s, st + 1);
    for (int mb = 0; mb < M; mb++) {
      const int nf = x->count[strata__key(s, STRATA_ACTION_FORWARD, st, mb)];
      const int nb = x->count[strata__key(s, STRATA_ACTION_BACKWARD, st, mb)];
      const int nbi = x->count[strata__key(s, STRATA_ACTION_BACKWARD_INPUT, st, mb)];
      const int nw = x->count[strata__key(s, STRATA_ACTION_BACKWARD_WEIGHT, st, mb)];
      if (!nf)
        return strata__error(STRATA_ERR_INVALID, "missing F%d.%d (stage %d is on dev %d)", st, mb, st, home);
      if (nb && (nbi || nw))
        return strata__error(STRATA_ERR_INVALID, "stage %d micro-batch %d has both B and %s on dev %d", st, mb,
                             nbi ? "BI" : "W", home);
      if (!nb && !nbi && !nw)
        return strata__error(STRATA_ERR_INVALID, "missing backward of stage %d micro-batch %d (B%d.%d, or BI and W, on dev %d)",
                             st, mb, st, mb, home);
      if (!nb && !nw)
        return strata__error(STRATA_ERR_INVALID, "missing W%d.%d after BI%d.%d on dev %d", st, mb, st, mb, home);
      if (!nb && !nbi)
        return strata__error(STRATA_ERR_INVALID, "W%d.%d on dev %d has no BI%d.%d", st, mb, home, st, mb);
      if (x->recompute && !x->count[strata__key(s, STRATA_ACTION_RECOMPUTE, st, mb)])
        return strata__error(STRATA_ERR_INVALID, "missing RC%d.%d on dev %d: the stages recompute, and %s%d.%d has no "
                             "recomputation before it", st, mb, home, nb ? "B" : "BI", st, mb);
      if (x->recompute && !nb && !x->count[strata__key(s, STRATA__RC_W, st, mb)])
        return strata__error(STRATA_ERR_INVALID, "missing RC%d.%d on dev %d between BI%d.%d and W%d.%d: the stages "
                             "recompute, and the weight pass reads the recomputed activations too", st, mb, home, st,
                             mb, st, mb);
      if (x->recompute && !nb && strata__tp_at(s, st) > 1 && !x->count[strata__key(s, STRATA__TJ_W, st, mb)])
        return strata__error(STRATA_ERR_INVALID, "missing TJB%d.%d on dev %d right after W%d.%d: slice %d of stage %d "
                             "does not join the other slices' recomputation in its weight pass", st, mb, home, st, mb,
                             st / strata__chain(s) % s->tp, st % strata__chain(s));
      if (strata__tp_at(s, st) > 1)
        for (int k = STRATA_ACTION_TP_JOIN_FORWARD; k <= STRATA_ACTION_TP_JOIN_BACKWARD; k++)
          if (!x->count[strata__key(s, k, st, mb)])
            return strata__error(STRATA_ERR_INVALID, "missing %s%d.%d on dev %d: slice %d of stage %d does not join the "
                                 "other slices' %s", strata_action_label(k), st, mb, home,
                                 st / strata__chain(s) % s->tp, st % strata__chain(s),
                                 k == STRATA_ACTION_TP_JOIN_FORWARD ? "forward" : "backward");
      if (!cut_next)
        continue;
      const int next = s->stage_device[st + 1];
      const struct {
        int kind, stage, dev;
      } need[4] = {
        {STRATA_ACTION_RECV_GRAD, st, home},
        {STRATA_ACTION_SEND_ACT, st, home},
        {STRATA_ACTION_RECV_ACT, st + 1, next},
        {STRATA_ACTION_SEND_GRAD, st + 1, next},
      };
      for (int j = 0; j < (next_held ? 4 : 1); j++)
        if (!x->count[strata__key(s, need[j].kind, need[j].stage, mb)])
          return strata__error(STRATA_ERR_INVALID, "missing %s%d.%d on dev %d (stage %d is on dev %d, stage %d on dev %d)",
                               strata_action_label(need[j].kind), need[j].stage, mb, need[j].dev, st, home, st + 1,
                               next);
    }
    if (!x->count[strata__key(s, STRATA_ACTION_OPTIMIZER, st, 0)])
      return strata__error(STRATA_ERR_INVALID, "missing OPT%d on dev %d", st, home);
    if (strata__dp(s) > 1) {
      /* one gradient collective, the same on every replica of the stage */
      const int base = strata__member(s, STRATA_ACTION_GRAD_REDUCE, st, 0);
      const int gr = x->count[strata__key(s, STRATA_ACTION_GRAD_REDUCE, st, 0)];
      const int gs = x->count[strata__key(s, STRATA_ACTION_GRAD_SCATTER, st, 0)];
      const int pg = x->count[strata__key(s, STRATA_ACTION_PARAM_GATHER, st, 0)];
      const int b0gr = x->count[strata__key(s, STRATA_ACTION_GRAD_REDUCE, base, 0)];
      if (!gr && !gs)
        return strata__error(STRATA_ERR_INVALID, "missing GR%d (or GRS%d) on dev %d: replica %d of stage %d does not "
                             "join the others' gradients", st, st, home, st / strata__chain(s) / s->tp, base);
      if (gr && gs)
        return strata__error(STRATA_ERR_INVALID, "stage %d has both GR and GRS on dev %d", st, home);
      if ((gr != 0) != (b0gr != 0))
        return strata__error(STRATA_ERR_INVALID, "stage %d on dev %d reduces its gradients with %s, replica 0 with %s",
                             st, home, gr ? "GR" : "GRS", b0gr ? "GR" : "GRS");
      if (gs && !pg)
        return strata__error(STRATA_ERR_INVALID, "missing PAG%d on dev %d after GRS%d", st, home, st);
      if (gr && pg)
        return strata__error(STRATA_ERR_INVALID, "PAG%d on dev %d without GRS%d", st, home, st);
    }
  }

  /* order within a device: what an action needs from its own device comes first */
  for (int d = 0; d < s->devices; d++)
    for (int i = 0; i < s->counts[d]; i++) {
      const struct strata_action *a = &s->lists[d][i];
      struct strata_action deps[2];
      int n = strata__deps(x, a, x->kind[d][i], deps);
      for (int j = 0; j < n; j++) {
        size_t k = strata__key(s, deps[j].kind, deps[j].stage, deps[j].microbatch);
        if (x->count[k] && x->dev[k] == d && x->pos[k] > i)
          return strata__error(STRATA_ERR_INVALID, "dev %d #%d %s: comes before %s (#%d on the same device) that it needs",
                               d, i, strata__action_str(a, b1), strata__str(&deps[j], b2), x->pos[k]);
      }
      if (a->kind == STRATA_ACTION_OPTIMIZER)
        for (int kind = STRATA_ACTION_GRAD_REDUCE; kind <= STRATA_ACTION_GRAD_SCATTER; kind++) {
          size_t k = strata__key(s, kind, a->stage, 0);
          if (x->count[k] && x->pos[k] > i) {
            struct strata_action w = {.kind = kind, .stage = a->stage, .microbatch = -1};
            return strata__error(STRATA_ERR_INVALID, "dev %d #%d %s: comes before %s (#%d) that joins its gradients",
                                 d, i, strata__action_str(a, b1), strata__action_str(&w, b2), x->pos[k]);
          }
        }
      if (a->kind != STRATA_ACTION_OPTIMIZER && a->kind != STRATA_ACTION_GRAD_REDUCE &&
          a->kind != STRATA_ACTION_GRAD_SCATTER)
        continue;
      for (int mb = 0; mb < M; mb++)
        for (int kind = STRATA_ACTION_BACKWARD; kind <= STRATA_ACTION_BACKWARD_WEIGHT; kind++) {
          size_t k = strata__key(s, kind, a->stage, mb);
          if (x->count[k] && x->pos[k] > i) {
            struct strata_action w = {.kind = kind, .stage = a->stage, .microbatch = mb};
            return strata__error(STRATA_ERR_INVALID, "dev %d #%d %s: comes before %s (#%d), not after all its backward work",
                                 d, i, strata__action_str(a, b1), strata__action_str(&w, b2), x->pos[k]);
          }
        }
    }
  return STRATA_OK;
}

/* The compute action that reads a stage's weights (F, B, BI or W): under ZeRO-3 it needs its PARAM_GATHER. */
static int strata__reads_weights(int kind) {
  return kind == STRATA_ACTION_FORWARD || kind == STRATA_ACTION_BACKWARD || kind == STRATA_ACTION_BACKWARD_INPUT ||
         kind == STRATA_ACTION_BACKWARD_WEIGHT;
}

/*
** ZeRO-3's gathers: a schedule with a PARAM_GATHER of a micro-batch (s m, m >= 0) has one right before every F, B,
** BI and W of every stage (only that backward's RECOMPUTE between them), none anywhere else, and no PARAM_GATHER of
** the whole step (s -1: ZeRO-1's all-gather after the update, which ZeRO-3 has no whole parameters for).
*/
static int strata__check_gathers(const struct strata__index *x) {
  const struct strata_schedule *s = x->s;
  int any = 0;
  for (int d = 0; d < s->devices && !any; d++)
    for (int i = 0; i < s->counts[d] && !any; i++)
      any = strata__weight_gather(&s->lists[d][i]);
  if (!any)
    return STRATA_OK;
  char b1[STRATA__ACTION_STR];
  for (int d = 0; d < s->devices; d++)
    for (int i = 0; i < s->counts[d]; i++) {
      const struct strata_action *a = &s->lists[d][i];
      if (a->kind == STRATA_ACTION_PARAM_GATHER && a->microbatch < 0)
        return strata__error(STRATA_ERR_INVALID, "dev %d #%d %s: a gather of the whole step in a schedule that gathers "
                             "each micro-batch's weights (ZeRO-3)", d, i, strata__action_str(a, b1));
      if (!strata__weight_gather(a) && !strata__reads_weights(a->kind))
        continue;
      /* the partner: the gather before the compute action, the compute action after the gather (a RECOMPUTE of
      ** the same stage and micro-batch may stand between: it runs inside the backward) */
      const int step = strata__weight_gather(a) ? 1 : -1;
      int j = i + step;
      while (j >= 0 && j < s->counts[d] && s->lists[d][j].kind == STRATA_ACTION_RECOMPUTE &&
             s->lists[d][j].stage == a->stage && s->lists[d][j].microbatch == a->microbatch)
        j += step;
      const struct strata_action *p = j >= 0 && j < s->counts[d] ? &s->lists[d][j] : NULL;
      const int ok = p && p->stage == a->stage && p->microbatch == a->microbatch &&
                     (step > 0 ? strata__reads_weights(p->kind) : strata__weight_gather(p));
      if (!ok)
        return strata__error(STRATA_ERR_INVALID, step > 0 ? "dev %d #%d %s: not right before an F, B, BI or W of "
                             "stage %d, micro-batch %d that reads the weights it gathers" : "dev %d #%d %s: not right "
                             "after a PAG%d.%d: ZeRO-3 gathers the weights of every forward and backward", d, i,
                             strata__action_str(a, b1), a->stage, a->microbatch);
    }
  return STRATA_OK;
}

/* Append to buf (of size cap, holding *len bytes) without overflowing; the tail is cut when full. */
static void strata__append(char *buf, size_t cap, size_t *len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void strata__append(char *buf, size_t cap, size_t *len, const char *fmt, ...) {
  if (*len + 1 >= cap)
    return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + *len, cap - *len, fmt, ap);
  va_end(ap);
  if (n > 0)
    *len = (size_t)n >= cap - *len ? cap - 1 : *len + (size_t)n;
}

/*
** The dynamic half: run the lists, devices in turn, each advancing while
** its next action's inputs are done (sends never wait). `cost` gives each
** kind's duration (NULL: times are not needed); an action starts when its
** device is free and its inputs are done, so a receive completes at its
** send's time. Returns STRATA_ERR_INVALID naming every stuck device when
** the lists deadlock; otherwise the busy time and the span.
*/
static int strata__run(struct strata__index *x, const double *cost, double *busy, double *span) {
  const struct strata_schedule *s = x->s;
  double work = 0;
  for (;;) {
    int progress = 0;
    for (int d = 0; d < s->devices; d++)
      while (x->next[d] < s->counts[d]) {
        const struct strata_action *a = &s->lists[d][x->next[d]];
        const int kind = x->kind[d][x->next[d]];
        double ready = x->clock[d];
        const size_t self = strata__key(s, kind, a->stage, a->microbatch);
        if (strata__joins(a) && x->finish[self] >= 0) {
          /* completed when the last replica arrived */
          if (x->finish[self] > x->clock[d])
            x->clock[d] = x->finish[self];
          x->next[d]++;
          progress = 1;
          continue;
        }
        if (a->kind == STRATA_ACTION_OPTIMIZER || a->kind == STRATA_ACTION_GRAD_REDUCE ||
            a->kind == STRATA_ACTION_GRAD_SCATTER) {
          if (x->bw_done[a->stage] < s->microbatches)
            break;
          if (x->bw_last[a->stage] > ready)
            ready = x->bw_last[a->stage];
          if (a->kind == STRATA_ACTION_OPTIMIZER && strata__dp(s) > 1) {
            double f = x->finish[strata__key(s, STRATA_ACTION_GRAD_REDUCE, a->stage, 0)];
            if (f < 0)
              f = x->finish[strata__key(s, STRATA_ACTION_GRAD_SCATTER, a->stage, 0)];
            if (f < 0)
              break;
            if (f > ready)
              ready = f;
          }
        } else {
          struct strata_action deps[2];
          int n = strata__deps(x, a, kind, deps), waiting = 0;
          for (int j = 0; j < n && !waiting; j++) {
            double f = x->finish[strata__key(s, deps[j].kind, deps[j].stage, deps[j].microbatch)];
            if (f < 0)
              waiting = 1;
            else if (f > ready)
              ready = f;
          }
          if (waiting)
            break;
        }
        if (strata__joins(a)) {
          /* arrive, and complete once every member's device has */
          if (x->arrive[self] < 0)
            x->arrive[self] = ready;
          const int g = strata__group_size(s, a->kind, a->stage);
          double last = 0;
          int all = 1;
          for (int r = 0; r < g && all; r++) {
            double t = x->arrive[strata__key(s, kind, strata__member(s, a->kind, a->stage, r), a->microbatch)];
            all = t >= 0;
            last = t > last ? t : last;
          }
          if (!all)
            break;
          double c = cost ? cost[a->kind] : 0;
          for (int r = 0; r < g; r++)
            x->finish[strata__key(s, kind, strata__member(s, a->kind, a->stage, r), a->microbatch)] = last + c;
          work += c * g;
          continue; /* this device takes it on its next turn */
        }
        double c = cost ? cost[a->kind] : 0;
        x->clock[d] = ready + c;
        work += c;
        x->finish[self] = x->clock[d];
        if (a->kind == STRATA_ACTION_BACKWARD || a->kind == STRATA_ACTION_BACKWARD_WEIGHT) {
          x->bw_done[a->stage]++;
          if (x->clock[d] > x->bw_last[a->stage])
            x->bw_last[a->stage] = x->clock[d];
        }
        x->next[d]++;
        progress = 1;
      }
    if (!progress)
      break;
  }

  char msg[900], b1[STRATA__ACTION_STR], b2[STRATA__ACTION_STR];
  size_t len = 0;
  for (int d = 0; d < s->devices; d++) {
    if (x->next[d] == s->counts[d])
      continue;
    const struct strata_action *a = &s->lists[d][x->next[d]];
    const int kind = x->kind[d][x->next[d]];
    struct strata_action w = {0}, deps[2];
    int replica_wait = 0;
    if (strata__joins(a) && x->arrive[strata__key(s, kind, a->stage, a->microbatch)] >= 0) {
      /* here already: waits for a member that is not */
      const int g = strata__group_size(s, a->kind, a->stage);
      for (int r = 0; r < g && !replica_wait; r++) {
        int m = strata__member(s, a->kind, a->stage, r);
        if (x->arrive[strata__key(s, kind, m, a->microbatch)] < 0) {
          w = (struct strata_action){.kind = kind, .stage = m, .microbatch = a->microbatch};
          replica_wait = 1;
        }
      }
    } else if (a->kind == STRATA_ACTION_OPTIMIZER || a->kind == STRATA_ACTION_GRAD_REDUCE ||
               a->kind == STRATA_ACTION_GRAD_SCATTER) {
      if (!strata__optimizer_waits(x, a->stage, &w) && a->kind == STRATA_ACTION_OPTIMIZER) {
        int k = x->count[strata__key(s, STRATA_ACTION_GRAD_REDUCE, a->stage, 0)] ? STRATA_ACTION_GRAD_REDUCE
                                                                                 : STRATA_ACTION_GRAD_SCATTER;
        w = (struct strata_action){.kind = k, .stage = a->stage, .microbatch = -1};
      }
    } else {
      int n = strata__deps(x, a, kind, deps);
      for (int j = n - 1; j >= 0; j--)
        if (x->finish[strata__key(s, deps[j].kind, deps[j].stage, deps[j].microbatch)] < 0)
          w = deps[j];
    }
    int wd = x->count[strata__key(s, w.kind, w.stage, w.microbatch)] ? x->dev[strata__key(s, w.kind, w.stage, w.microbatch)]
                                                                      : s->stage_device[w.stage];
    (void)replica_wait;
    strata__append(msg, sizeof msg, &len, "%sdev %d at #%d %s waits for %s on dev %d", len ? "; " : "deadlock: ", d,
                   x->next[d], strata__action_str(a, b1), strata__str(&w, b2), wd);
  }
  if (len)
    return strata__error(STRATA_ERR_INVALID, "%s", msg);
  double end = 0;
  for (int d = 0; d < s->devices; d++)
    if (x->clock[d] > end)
      end = x->clock[d];
  if (busy)
    *busy = work;
  if (span)
    *span = end;
  return STRATA_OK;
}

/* Validate `s`, and with `cost` simulate it: busy time and span. */
static int strata__check(const struct strata_schedule *s, const double *cost, double *busy, double *span) {
  struct strata__index x;
  int rc = strata__index_init(&x, s);
  if (rc != STRATA_OK)
    return rc;
  rc = strata__check_gathers(&x); /* (first: ZeRO-1's gather of a stage would count as a duplicate of PAG s.0) */
  if (!rc)
    rc = strata__check_lists(&x);
  if (rc == STRATA_OK)
    rc = strata__run(&x, cost, busy, span);
  strata__index_free(&x);
  return rc;
}

STRATA_API int strata_schedule_validate(strata_schedule_t s) {
  if (!s)
    return strata__error(STRATA_ERR_INVALID, "strata_schedule_validate: NULL schedule");
  return strata__check(s, NULL, NULL, NULL);
}

/*
** Simulate with unit costs: F 1, B 2, BI 1, W 1, OPTIMIZER, transfers and RC 0 (a recomputation's cost is its
** mode's: the simulator's).
** Validates first (an invalid schedule has no bubble) and returns its error.
*/
STRATA_API int strata_schedule_bubble(strata_schedule_t s, double *bubble) {
  if (!s || !bubble)
    return strata__error(STRATA_ERR_INVALID, "strata_schedule_bubble: NULL argument");
  double cost[STRATA_ACTION_KIND_COUNT] = {0};
  cost[STRATA_ACTION_FORWARD] = 1;
  cost[STRATA_ACTION_BACKWARD] = 2;
  cost[STRATA_ACTION_BACKWARD_INPUT] = 1;
  cost[STRATA_ACTION_BACKWARD_WEIGHT] = 1;
  double busy = 0, span = 0;
  int rc = strata__check(s, cost, &busy, &span);
  if (rc != STRATA_OK)
    return rc;
  *bubble = span > 0 ? 1.0 - busy / ((double)s->devices * span) : 0.0;
  return STRATA_OK;
}

/*
** The most micro-batches of `stage` at once between an action of kind `open` and one of the kinds `close` or
** `close2` in its device's list (fn names the public call for the errors).
*/
int strata__schedule_stage_peak(strata_schedule_t s, int stage, int open, int close, int close2, const char *fn,
                                int *peak) {
  if (!s || !peak)
    return strata__error(STRATA_ERR_INVALID, "%s: NULL argument", fn);
  if (stage < 0 || stage >= s->stages)
    return strata__error(STRATA_ERR_RANGE, "%s: stage %d out of range (%d stages)", fn, stage, s->stages);
  const int d = s->stage_device[stage];
  int now = 0, top = 0;
  for (int i = 0; i < s->counts[d]; i++) {
    const struct strata_action *a = &s->lists[d][i];
    if (a->stage != stage)
      continue;
    if (a->kind == open && ++now > top)
      top = now;
    else if (a->kind == close || a->kind == close2)
      now--;
  }
  *peak = top;
  return STRATA_OK;
}

/*
** A micro-batch is in flight on a stage from its F until its B, or until
** its W when the backward is split (W still reads the activations).
*/
STRATA_API int strata_schedule_peak_inflight(strata_schedule_t s, int stage, int *peak) {
  return strata__schedule_stage_peak(s, stage, STRATA_ACTION_FORWARD, STRATA_ACTION_BACKWARD,
                                     STRATA_ACTION_BACKWARD_WEIGHT, "strata_schedule_peak_inflight", peak);
}

/* A stage's outputs handed to the next stage on its own device: from the stage's F until the next stage's F of the
** same micro-batch (which copies it in); 1 for a next stage elsewhere (a copy thread takes each output as it is
** made) or none. */
STRATA_API int strata_schedule_peak_handoff(strata_schedule_t s, int stage, int *peak) {
  if (!s || !peak)
    return strata__error(STRATA_ERR_INVALID, "strata_schedule_peak_handoff: NULL argument");
  if (stage < 0 || stage >= s->stages)
    return strata__error(STRATA_ERR_RANGE, "strata_schedule_peak_handoff: stage %d out of range (%d stages)", stage,
                         s->stages);
  const int d = s->stage_device[stage];
  int now = 0, top = 0;
  if (strata__has_next(s, stage) && s->stage_device[stage + 1] == d)
    for (int i = 0; i < s->counts[d]; i++) {
      const struct strata_action *a = &s->lists[d][i];
      if (a->kind == STRATA_ACTION_FORWARD && a->stage == stage && ++now > top)
        top = now;
      else if (a->kind == STRATA_ACTION_FORWARD && a->stage == stage + 1)
        now--;
    }
  *peak = top > 1 ? top : 1;
  return STRATA_OK;
}
