/* SPDX-License-Identifier: MIT */
/* schedule.c — pipeline schedules as data: the GPipe, 1F1B, interleaved 1F1B and ZB-H1 generators, the validator and the unit-cost simulator. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/schedule.h>

#include "core/core.h"

/* The most actions a generated schedule may hold over all its devices;
** keeps every index and size computation far from overflow. */
#define STRATA__SCHEDULE_MAX_ACTIONS (1 << 26)

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

static const char *const strata__action_labels[] = {
#define STRATA__ACTION_LABEL(id, label) label,
  STRATA_ACTION_MAP(STRATA__ACTION_LABEL)
#undef STRATA__ACTION_LABEL
};

STRATA_API const char *strata_action_label(int kind) {
  if (kind < 0 || kind >= STRATA_ACTION_KIND_COUNT)
    return "?";
  return strata__action_labels[kind];
}

/* Kinds that have no micro-batch (-1): the optimizer and the gradient collectives. */
static int strata__per_stage(int kind) {
  return kind == STRATA_ACTION_OPTIMIZER || kind == STRATA_ACTION_GRAD_REDUCE || kind == STRATA_ACTION_GRAD_SCATTER ||
         kind == STRATA_ACTION_PARAM_GATHER;
}

/* The gradient collectives (one per stage, over the replicas) and the tensor-parallel joins (per micro-batch, over
** the slices): actions that complete when every member of their group has reached them. */
static int strata__grad_collective(int kind) {
  return kind == STRATA_ACTION_GRAD_REDUCE || kind == STRATA_ACTION_GRAD_SCATTER || kind == STRATA_ACTION_PARAM_GATHER;
}
static int strata__tp_join(int kind) {
  return kind == STRATA_ACTION_TP_JOIN_FORWARD || kind == STRATA_ACTION_TP_JOIN_BACKWARD;
}
static int strata__collective(int kind) { return strata__grad_collective(kind) || strata__tp_join(kind); }

/* Data-parallel copies (chains / tp). */
static int strata__dp(const struct strata_schedule *s) { return s->replicas / s->tp; }

/* Stages per replica, and whether stage st has a neighbour before / after it in its chain. */
static int strata__chain(const struct strata_schedule *s) { return s->stages / s->replicas; }
static int strata__has_prev(const struct strata_schedule *s, int st) { return st % strata__chain(s) != 0; }
static int strata__has_next(const struct strata_schedule *s, int st) { return (st + 1) % strata__chain(s) != 0; }

/*
** Tensor-parallel degree per stage. Chain c's stage at position j (st = c x chain + j) is slice c % tp of its
** replica; when the stage's own degree is smaller, no device holds it, and the slice (c % tp) % degree of the same
** replica — its owner — stands for it: it receives from that one and sends to it. A send fans out to every stage of
** the neighbouring position that it stands for.
*/
static int strata__tp_at(const struct strata_schedule *s, int st) {
  return s->stage_tp ? s->stage_tp[st % strata__chain(s)] : s->tp;
}
static int strata__held(const struct strata_schedule *s, int st) {
  return st / strata__chain(s) % s->tp < strata__tp_at(s, st);
}
static int strata__owner(const struct strata_schedule *s, int st) {
  const int chain = strata__chain(s), c = st / chain;
  return ((c / s->tp) * s->tp + (c % s->tp) % strata__tp_at(s, st)) * chain + st % chain;
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

/* Write "F2.5" (or "OPT2") for `a` into buf. */
static const char *strata__action_str(const struct strata_action *a, char buf[STRATA__ACTION_STR]) {
  if (strata__per_stage(a->kind))
    snprintf(buf, STRATA__ACTION_STR, "%s%d", strata_action_label(a->kind), a->stage);
  else
    snprintf(buf, STRATA__ACTION_STR, "%s%d.%d", strata_action_label(a->kind), a->stage, a->microbatch);
  return buf;
}

/* ---------------------------------------------------------------- the object */

/* A schedule with its shape and empty lists; NULL when out of memory. */
static struct strata_schedule *strata__schedule_alloc(int kind, int devices, int stages, int microbatches) {
  struct strata_schedule *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  s->kind = kind;
  s->devices = devices;
  s->stages = stages;
  s->microbatches = microbatches;
  s->replicas = 1;
  s->tp = 1;
  s->stage_device = calloc((size_t)stages, sizeof *s->stage_device);
  s->counts = calloc((size_t)devices, sizeof *s->counts);
  s->caps = calloc((size_t)devices, sizeof *s->caps);
  s->lists = calloc((size_t)devices, sizeof *s->lists);
  if (!s->stage_device || !s->counts || !s->caps || !s->lists) {
    strata_schedule_free(s);
    return NULL;
  }
  return s;
}

STRATA_API void strata_schedule_free(strata_schedule_t s) {
  if (!s)
    return;
  if (s->lists)
    for (int d = 0; d < s->devices; d++)
      free(s->lists[d]);
  free(s->lists);
  free(s->caps);
  free(s->counts);
  free(s->stage_device);
  free(s->stage_tp);
  free(s);
}

/* Append one action to device d's list, growing it as needed. */
static int strata__push(struct strata_schedule *s, int d, int kind, int stage, int microbatch) {
  if (s->counts[d] == s->caps[d]) {
    int cap = s->caps[d] ? 2 * s->caps[d] : 64;
    struct strata_action *grown = realloc(s->lists[d], (size_t)cap * sizeof *grown);
    if (!grown)
      return strata__error(STRATA_ERR_NOMEM, "schedule: out of memory for %d actions on dev %d", cap, d);
    s->lists[d] = grown;
    s->caps[d] = cap;
  }
  s->lists[d][s->counts[d]++] = (struct strata_action){.kind = kind, .stage = stage, .microbatch = microbatch};
  return STRATA_OK;
}

/*
** Append a compute action of the stage's device with the transfers around
** it: a forward is preceded by the receive of its input and followed by
** the send of its output, a backward (B or BI) preceded by the receive of
** its output gradient and followed by the send of its input gradient —
** each only where the neighbouring stage lives on another device. A
** receive right before its consumer is the latest safe place for it, so
** the order of the compute actions alone decides deadlock-freedom.
*/
static int strata__emit(struct strata_schedule *s, int kind, int stage, int microbatch) {
  const int d = s->stage_device[stage];
  const int remote_prev = strata__has_prev(s, stage) && s->stage_device[stage - 1] != d;
  const int remote_next = strata__has_next(s, stage) && s->stage_device[stage + 1] != d;
  int rc = STRATA_OK;
  switch (kind) {
  case STRATA_ACTION_FORWARD:
    if (remote_prev && (rc = strata__push(s, d, STRATA_ACTION_RECV_ACT, stage, microbatch)))
      return rc;
    if ((rc = strata__push(s, d, kind, stage, microbatch)))
      return rc;
    if (remote_next)
      rc = strata__push(s, d, STRATA_ACTION_SEND_ACT, stage, microbatch);
    return rc;
  case STRATA_ACTION_BACKWARD:
  case STRATA_ACTION_BACKWARD_INPUT:
    if (remote_next && (rc = strata__push(s, d, STRATA_ACTION_RECV_GRAD, stage, microbatch)))
      return rc;
    if ((rc = strata__push(s, d, kind, stage, microbatch)))
      return rc;
    if (remote_prev)
      rc = strata__push(s, d, STRATA_ACTION_SEND_GRAD, stage, microbatch);
    return rc;
  default:
    return strata__push(s, d, kind, stage, microbatch);
  }
}

/* The backward of (stage, mb): one B, or BI and right away its W (ZB-H1). */
static int strata__emit_backward(struct strata_schedule *s, int split, int stage, int microbatch) {
  if (!split)
    return strata__emit(s, STRATA_ACTION_BACKWARD, stage, microbatch);
  int rc = strata__emit(s, STRATA_ACTION_BACKWARD_INPUT, stage, microbatch);
  if (rc == STRATA_OK)
    rc = strata__emit(s, STRATA_ACTION_BACKWARD_WEIGHT, stage, microbatch);
  return rc;
}

/* ---------------------------------------------------------------- generators */

/* GPipe on device d (stage d): every forward, then every backward in order. */
static int strata__gen_gpipe(struct strata_schedule *s, int d) {
  int rc = STRATA_OK;
  for (int i = 0; i < s->microbatches && rc == STRATA_OK; i++)
    rc = strata__emit(s, STRATA_ACTION_FORWARD, d, i);
  for (int i = 0; i < s->microbatches && rc == STRATA_OK; i++)
    rc = strata__emit(s, STRATA_ACTION_BACKWARD, d, i);
  return rc;
}

/*
** 1F1B on device d (stage d): min(p - d - 1, m) warm-up forwards, then one
** forward and one backward while forwards remain, then the cool-down
** backwards. At most p - d micro-batches are in flight on stage d.
**
** With `split` this is ZB-H1: every B becomes BI followed at once by its W.
** Counting a micro-batch in flight until its W (as the peak measure does),
** stage d may hold p - d of them; W therefore cannot move past the next
** forward without raising 1F1B's peak, and the only freedom left is in
** the cool-down, where W fills exactly the gap while the next gradient
** travels. The gain comes from the cheaper BI on the gradient's critical
** path: with F = BI = W = 1 the span is 3m + 2(p - 1) against 1F1B's
** 3(m + p - 1), and no schedule with 1F1B's in-flight limits does better
** (the last stage must run F, BI, W strictly in turn from time p - 1, so
** its BI of m - 1 ends no sooner than 3m + p - 2; the chain of BIs back to
** stage 0 adds p - 1 and stage 0's last W one more).
*/
static int strata__gen_1f1b(struct strata_schedule *s, int d, int split) {
  const int p = s->devices, m = s->microbatches;
  const int warmup = p - d - 1 < m ? p - d - 1 : m;
  int rc = STRATA_OK;
  for (int i = 0; i < warmup && rc == STRATA_OK; i++)
    rc = strata__emit(s, STRATA_ACTION_FORWARD, d, i);
  for (int i = 0; i < m - warmup && rc == STRATA_OK; i++) {
    rc = strata__emit(s, STRATA_ACTION_FORWARD, d, warmup + i);
    if (rc == STRATA_OK)
      rc = strata__emit_backward(s, split, d, i);
  }
  for (int i = m - warmup; i < m && rc == STRATA_OK; i++)
    rc = strata__emit_backward(s, split, d, i);
  return rc;
}

/*
** Interleaved 1F1B (Megatron-LM's forward_backward_pipelining_with_interleaving)
** on device d, which holds stages d, d + p, ..., d + (v - 1)p (its chunks).
** The m·v (chunk, micro-batch) units are visited in groups of p
** micro-batches: unit k belongs to chunk (k mod pv) / p and micro-batch
** (k / pv)·p + k mod p; forwards go through the chunks in order, backwards
** in reverse order. Device d runs min(2(p - d - 1) + (v - 1)p, mv) warm-up
** forwards, then alternates one forward and one backward, then the
** remaining backwards. Megatron runs every forward first when m = p, for
** the sake of its paired send/receive calls; these lists keep the formula
** there too, since here a receive sits right before its consumer and sends
** are buffered. The suite validates every p <= 8, v in {2, 3} and m <= 32
** multiple of p.
*/
static int strata__gen_interleaved(struct strata_schedule *s, int d, int v) {
  const int p = s->devices, units = s->microbatches * v;
  const int group = p * v;
  int warmup = 2 * (p - d - 1) + (v - 1) * p;
  if (warmup > units)
    warmup = units;
  int rc = STRATA_OK;
#define STRATA__UNIT_CHUNK(k) (((k) % group) / p)
#define STRATA__UNIT_MB(k) (((k) / group) * p + (k) % p)
  for (int k = 0; k < units && rc == STRATA_OK; k++) {
    /* forward unit k, then backward unit k - warmup once the warm-up is over */
    rc = strata__emit(s, STRATA_ACTION_FORWARD, STRATA__UNIT_CHUNK(k) * p + d, STRATA__UNIT_MB(k));
    int b = k - warmup;
    if (rc == STRATA_OK && b >= 0)
      rc = strata__emit(s, STRATA_ACTION_BACKWARD, (v - 1 - STRATA__UNIT_CHUNK(b)) * p + d, STRATA__UNIT_MB(b));
  }
  for (int b = units - warmup; b < units && rc == STRATA_OK; b++)
    rc = strata__emit(s, STRATA_ACTION_BACKWARD, (v - 1 - STRATA__UNIT_CHUNK(b)) * p + d, STRATA__UNIT_MB(b));
#undef STRATA__UNIT_CHUNK
#undef STRATA__UNIT_MB
  return rc;
}

STRATA_API int strata_schedule_generate(int kind, int devices, int microbatches, int virtual_stages,
                                        strata_schedule_t *out) {
  if (!out)
    return strata__error(STRATA_ERR_INVALID, "strata_schedule_generate: NULL out");
  *out = NULL;
  if (kind < STRATA_SCHEDULE_GPIPE || kind > STRATA_SCHEDULE_ZB_H1)
    return strata__error(STRATA_ERR_INVALID, "strata_schedule_generate: unknown schedule kind %d", kind);
  if (devices < 1)
    return strata__error(STRATA_ERR_INVALID, "strata_schedule_generate: %d devices (need at least 1)", devices);
  if (microbatches < 1)
    return strata__error(STRATA_ERR_INVALID, "strata_schedule_generate: %d micro-batches (need at least 1)",
                         microbatches);
  int v = 1;
  if (kind == STRATA_SCHEDULE_INTERLEAVED) {
    if (virtual_stages < 2)
      return strata__error(STRATA_ERR_INVALID,
                           "strata_schedule_generate: interleaved needs at least 2 virtual stages per device, got %d",
                           virtual_stages);
    if (microbatches % devices)
      return strata__error(STRATA_ERR_INVALID,
                           "strata_schedule_generate: interleaved needs micro-batches (%d) a multiple of devices (%d)",
                           microbatches, devices);
    v = virtual_stages;
  }
  /* each (stage, micro-batch) takes at most 7 actions (RA F SA RG BI SG W), plus one OPTIMIZER per stage */
  uint64_t stages = (uint64_t)devices * (uint64_t)v, units = 0;
  if (!strata__mul_ok(stages, (uint64_t)microbatches, &units) || units > STRATA__SCHEDULE_MAX_ACTIONS / 8)
    return strata__error(STRATA_ERR_RANGE, "strata_schedule_generate: %d devices x %d stages x %d micro-batches is too large",
                         devices, v, microbatches);

  struct strata_schedule *s = strata__schedule_alloc(kind, devices, (int)stages, microbatches);
  if (!s)
    return strata__error(STRATA_ERR_NOMEM, "strata_schedule_generate: out of memory");
  for (int st = 0; st < s->stages; st++)
    s->stage_device[st] = st % devices;
  int rc = STRATA_OK;
  for (int d = 0; d < devices && rc == STRATA_OK; d++) {
    switch (kind) {
    case STRATA_SCHEDULE_GPIPE: rc = strata__gen_gpipe(s, d); break;
    case STRATA_SCHEDULE_1F1B: rc = strata__gen_1f1b(s, d, 0); break;
    case STRATA_SCHEDULE_ZB_H1: rc = strata__gen_1f1b(s, d, 1); break;
    default: rc = strata__gen_interleaved(s, d, v); break;
    }
    for (int st = d; st < s->stages && rc == STRATA_OK; st += devices)
      rc = strata__push(s, d, STRATA_ACTION_OPTIMIZER, st, -1);
  }
  if (rc != STRATA_OK) {
    strata_schedule_free(s);
    return rc;
  }
  *out = s;
  return STRATA_OK;
}

/*
** Replicate a pipeline schedule over `replicas` data-parallel copies of
** `tp` chains each: the lists of chain c are those of the base with every
** stage moved by c x (base stages), on devices moved by c x (base devices),
** each forward and backward followed by its TP_JOIN (tp > 1), and each
** stage's gradient collective placed right after its last backward work
** on its device (a GR there lets that stage's reduction overlap whatever
** the device runs next), the PARAM_GATHERs after the device's last
** OPTIMIZER (where the executor updates all the device's stages).
*/
STRATA_API int strata_schedule_generate_hybrid(int kind, int devices, int microbatches, int virtual_stages,
                                               int replicas, int tp, int zero, strata_schedule_t *out) {
  if (!out)
    return strata__error(STRATA_ERR_INVALID, "strata_schedule_generate_hybrid: NULL out");
  *out = NULL;
  if (devices < 1 || devices > (1 << 20))
    return strata__error(STRATA_ERR_INVALID, "strata_schedule_generate: %d devices (need 1 .. %d)", devices, 1 << 20);
  int *each = malloc((size_t)devices * sizeof *each);
  if (!each)
    return strata__error(STRATA_ERR_NOMEM, "strata_schedule_generate_hybrid: out of memory");
  for (int d = 0; d < devices; d++)
    each[d] = tp;
  int rc = strata_schedule_generate_hybrid_ranks(kind, devices, microbatches, virtual_stages, replicas, each, zero, out);
  free(each);
  return rc;
}

STRATA_API int strata_schedule_generate_hybrid_ranks(int kind, int devices, int microbatches, int virtual_stages,
                                                     int replicas, const int *tp, int zero, strata_schedule_t *out) {
  if (!out || !tp)
    return strata__error(STRATA_ERR_INVALID, "strata_schedule_generate_hybrid: NULL %s", out ? "tp" : "out");
  *out = NULL;
  if (replicas < 1 || replicas > (1 << 16))
    return strata__error(STRATA_ERR_INVALID, "strata_schedule_generate_hybrid: %d replicas", replicas);
  if (devices < 1 || devices > (1 << 20))
    return strata__error(STRATA_ERR_INVALID, "strata_schedule_generate: %d devices (need 1 .. %d)", devices, 1 << 20);
  int T = 1, uniform = 1;
  int64_t per_replica = 0;
  for (int d = 0; d < devices; d++) {
    if (tp[d] < 1 || tp[d] > (1 << 16))
      return strata__error(STRATA_ERR_INVALID, "strata_schedule_generate_hybrid: %d tensor-parallel slices on pipeline "
                           "rank %d", tp[d], d);
    T = tp[d] > T ? tp[d] : T;
    uniform &= tp[d] == tp[0];
    per_replica += tp[d];
  }
  if (zero && replicas < 2)
    return strata__error(STRATA_ERR_INVALID, "strata_schedule_generate_hybrid: ZeRO-1 needs at least 2 replicas");
  strata_schedule_t base;
  TRY(strata_schedule_generate(kind, devices, microbatches, virtual_stages, &base));
  const int chains = replicas * T;
  if (chains == 1) {
    *out = base;
    return STRATA_OK;
  }
  uint64_t actions = 0;
  for (int d = 0; d < base->devices; d++)
    actions += 2u * (uint64_t)base->counts[d] + 2u * (uint64_t)base->stages;
  if (actions * (uint64_t)chains > STRATA__SCHEDULE_MAX_ACTIONS || per_replica * replicas > INT32_MAX) {
    strata_schedule_free(base);
    return strata__error(STRATA_ERR_RANGE, "strata_schedule_generate_hybrid: %d x %d chains of %d devices is too large",
                         replicas, T, devices);
  }
  const int ndev = (int)(per_replica * replicas), S = base->stages;
  struct strata_schedule *s = strata__schedule_alloc(kind, ndev, S * chains, microbatches);
  /* each (chain, pipeline rank)'s device, -1 where the rank has fewer slices: replica-major, then slice, then rank */
  int *dev_of = malloc((size_t)chains * (size_t)devices * sizeof *dev_of);
  if (s && !uniform)
    s->stage_tp = malloc((size_t)S * sizeof *s->stage_tp);
  if (!s || !dev_of || (!uniform && !s->stage_tp)) {
    free(dev_of);
    strata_schedule_free(s);
    strata_schedule_free(base);
    return strata__error(STRATA_ERR_NOMEM, "strata_schedule_generate_hybrid: out of memory");
  }
  s->replicas = chains;
  s->tp = T;
  for (int j = 0; s->stage_tp && j < S; j++)
    s->stage_tp[j] = tp[base->stage_device[j]];
  for (int r = 0, next = 0; r < replicas; r++)
    for (int t = 0; t < T; t++)
      for (int d = 0; d < devices; d++)
        dev_of[(r * T + t) * devices + d] = t < tp[d] ? next++ : -1;
  for (int c = 0; c < chains; c++)
    for (int st = 0; st < S; st++)
      s->stage_device[c * S + st] = dev_of[(strata__owner(s, c * S + st) / S) * devices + base->stage_device[st]];
  int rc = STRATA_OK;
  for (int d = 0; d < devices && !rc; d++) {
    const struct strata_action *l = base->lists[d];
    const int n = base->counts[d];
    int last_opt = -1;
    for (int i = 0; i < n; i++)
      if (l[i].kind == STRATA_ACTION_OPTIMIZER)
        last_opt = i;
    for (int c = 0; c < chains && !rc; c++) {
      const int dd = dev_of[c * devices + d];
      if (dd < 0)
        continue; /* this rank has fewer slices */
      for (int i = 0; i < n && !rc; i++) {
        const struct strata_action *a = &l[i];
        const int st = c * S + a->stage;
        /* a send only to a stage this slice holds: the neighbour's slices that this one stands for receive it too */
        int keep = !((a->kind == STRATA_ACTION_SEND_ACT && !strata__held(s, st + 1)) ||
                     (a->kind == STRATA_ACTION_SEND_GRAD && !strata__held(s, st - 1)));
        if (keep)
          rc = strata__push(s, dd, a->kind, st, a->microbatch);
        const int joins = tp[d] > 1;
        if (!rc && joins && a->kind == STRATA_ACTION_FORWARD)
          rc = strata__push(s, dd, STRATA_ACTION_TP_JOIN_FORWARD, st, a->microbatch);
        if (!rc && joins && (a->kind == STRATA_ACTION_BACKWARD || a->kind == STRATA_ACTION_BACKWARD_INPUT))
          rc = strata__push(s, dd, STRATA_ACTION_TP_JOIN_BACKWARD, st, a->microbatch);
        if (!rc && a->kind == STRATA_ACTION_OPTIMIZER && zero && i == last_opt)
          /* after the device's last OPTIMIZER, which updates all its stages: every stage's gather, in the order
          ** of their OPTIMIZERs */
          for (int j = 0; j < n && !rc; j++)
            if (l[j].kind == STRATA_ACTION_OPTIMIZER)
              rc = strata__push(s, dd, STRATA_ACTION_PARAM_GATHER, c * S + l[j].stage, -1);
        if (rc || replicas < 2 || (a->kind != STRATA_ACTION_BACKWARD && a->kind != STRATA_ACTION_BACKWARD_WEIGHT))
          continue;
        /* the stage's last backward work on this device: nothing of its kind follows */
        int last = 1;
        for (int j = i + 1; j < n && last; j++)
          last = !(l[j].stage == a->stage &&
                   (l[j].kind == STRATA_ACTION_BACKWARD || l[j].kind == STRATA_ACTION_BACKWARD_WEIGHT));
        if (last) {
          /* after the send of its input gradient, if that comes right after it */
          if (i + 1 < n && l[i + 1].kind == STRATA_ACTION_SEND_GRAD && l[i + 1].stage == a->stage) {
            if (strata__held(s, st - 1))
              rc = strata__push(s, dd, l[i + 1].kind, st, l[i + 1].microbatch);
            i++;
          }
          if (!rc)
            rc = strata__push(s, dd, zero ? STRATA_ACTION_GRAD_SCATTER : STRATA_ACTION_GRAD_REDUCE, st, -1);
        }
      }
    }
  }
  free(dev_of);
  strata_schedule_free(base);
  if (rc) {
    strata_schedule_free(s);
    return rc;
  }
  *out = s;
  return STRATA_OK;
}

STRATA_API int strata_schedule_generate_replicated(int kind, int devices, int microbatches, int virtual_stages,
                                                   int replicas, int zero, strata_schedule_t *out) {
  return strata_schedule_generate_hybrid(kind, devices, microbatches, virtual_stages, replicas, 1, zero, out);
}

/*
** Copy explicit lists into a new schedule (kind 0). Checks the shape only:
** at least one device, stage and micro-batch; stage_device entries name a
** device; every action has a known kind, a stage in range and a
** micro-batch in range (-1 for OPTIMIZER, which has none). Whether the
** lists make a working schedule is strata_schedule_validate's question.
*/
STRATA_API int strata_schedule_from_lists(int devices, int stages, int microbatches, const int *stage_device,
                                          const struct strata_action *const *lists, const int *counts,
                                          strata_schedule_t *out) {
  return strata_schedule_from_replica_lists(1, devices, stages, microbatches, stage_device, lists, counts, out);
}

STRATA_API int strata_schedule_from_replica_lists(int replicas, int devices, int stages, int microbatches,
                                                  const int *stage_device, const struct strata_action *const *lists,
                                                  const int *counts, strata_schedule_t *out) {
  return strata_schedule_from_hybrid_lists(replicas, 1, devices, stages, microbatches, stage_device, lists, counts,
                                           out);
}

STRATA_API int strata_schedule_from_hybrid_lists(int replicas, int tp, int devices, int stages, int microbatches,
                                                 const int *stage_device, const struct strata_action *const *lists,
                                                 const int *counts, strata_schedule_t *out) {
  if (!out)
    return strata__error(STRATA_ERR_INVALID, "strata_schedule_from_lists: NULL out");
  *out = NULL;
  if (replicas < 1 || tp < 1 || replicas > (1 << 16) || tp > (1 << 16) || stages % (replicas * tp))
    return strata__error(STRATA_ERR_INVALID,
                         "strata_schedule_from_lists: %d stages do not make %d x %d chains of equal pipelines", stages,
                         replicas, tp);
  replicas *= tp; /* chains */
  if (devices < 1 || stages < 1 || microbatches < 1)
    return strata__error(STRATA_ERR_INVALID,
                         "strata_schedule_from_lists: %d devices, %d stages, %d micro-batches (each needs at least 1)",
                         devices, stages, microbatches);
  if (!stage_device || !lists || !counts)
    return strata__error(STRATA_ERR_INVALID, "strata_schedule_from_lists: NULL %s",
                         !stage_device ? "stage_device" : !lists ? "lists" : "counts");
  for (int st = 0; st < stages; st++)
    if (stage_device[st] < 0 || stage_device[st] >= devices)
      return strata__error(STRATA_ERR_INVALID, "strata_schedule_from_lists: stage %d on dev %d, out of range (%d devices)",
                           st, stage_device[st], devices);
  uint64_t total = 0;
  for (int d = 0; d < devices; d++) {
    if (counts[d] < 0 || (counts[d] > 0 && !lists[d]))
      return strata__error(STRATA_ERR_INVALID, "strata_schedule_from_lists: dev %d has %d actions and %s list", d,
                           counts[d], lists[d] ? "a" : "no");
    total += (uint64_t)counts[d];
    for (int i = 0; i < counts[d]; i++) {
      const struct strata_action *a = &lists[d][i];
      if (a->kind < 0 || a->kind >= STRATA_ACTION_KIND_COUNT)
        return strata__error(STRATA_ERR_INVALID, "strata_schedule_from_lists: dev %d #%d: unknown action kind %d", d, i,
                             a->kind);
      if (a->stage < 0 || a->stage >= stages)
        return strata__error(STRATA_ERR_INVALID, "strata_schedule_from_lists: dev %d #%d %s: stage %d out of range (%d stages)",
                             d, i, strata_action_label(a->kind), a->stage, stages);
      if (strata__per_stage(a->kind) ? a->microbatch != -1 : (a->microbatch < 0 || a->microbatch >= microbatches))
        return strata__error(STRATA_ERR_INVALID,
                             "strata_schedule_from_lists: dev %d #%d %s%d: micro-batch %d out of range (%s)", d, i,
                             strata_action_label(a->kind), a->stage, a->microbatch,
                             strata__per_stage(a->kind) ? "OPTIMIZER and the gradient collectives take -1"
                                                        : "0 .. micro-batches - 1");
    }
  }
  uint64_t cells = 0;
  if (total > STRATA__SCHEDULE_MAX_ACTIONS || !strata__mul_ok((uint64_t)stages, (uint64_t)microbatches, &cells) ||
      cells > STRATA__SCHEDULE_MAX_ACTIONS)
    return strata__error(STRATA_ERR_RANGE, "strata_schedule_from_lists: %llu actions over %d stages x %d micro-batches is too large",
                         (unsigned long long)total, stages, microbatches);

  struct strata_schedule *s = strata__schedule_alloc(0, devices, stages, microbatches);
  if (!s)
    return strata__error(STRATA_ERR_NOMEM, "strata_schedule_from_lists: out of memory");
  s->replicas = replicas;
  s->tp = tp;
  memcpy(s->stage_device, stage_device, (size_t)stages * sizeof *stage_device);
  for (int d = 0; d < devices; d++) {
    if (counts[d] == 0)
      continue;
    s->lists[d] = malloc((size_t)counts[d] * sizeof *s->lists[d]);
    if (!s->lists[d]) {
      strata_schedule_free(s);
      return strata__error(STRATA_ERR_NOMEM, "strata_schedule_from_lists: out of memory for dev %d's %d actions", d,
                           counts[d]);
    }
    memcpy(s->lists[d], lists[d], (size_t)counts[d] * sizeof *lists[d]);
    s->counts[d] = s->caps[d] = counts[d];
  }
  *out = s;
  return STRATA_OK;
}

/* ---------------------------------------------------------------- names and accessors */

static const struct {
  const char *name;
  int kind;
} strata__schedule_names[] = {
  {"gpipe", STRATA_SCHEDULE_GPIPE},
  {"1f1b", STRATA_SCHEDULE_1F1B},
  {"interleaved", STRATA_SCHEDULE_INTERLEAVED},
  {"zb-h1", STRATA_SCHEDULE_ZB_H1},
  {"zb", STRATA_SCHEDULE_ZB_H1},
};

STRATA_API int strata_schedule_kind_parse(const char *name, int *kind) {
  if (!name || !kind)
    return strata__error(STRATA_ERR_INVALID, "strata_schedule_kind_parse: NULL argument");
  for (size_t i = 0; i < sizeof strata__schedule_names / sizeof strata__schedule_names[0]; i++)
    if (strcmp(name, strata__schedule_names[i].name) == 0) {
      *kind = strata__schedule_names[i].kind;
      return STRATA_OK;
    }
  return strata__error(STRATA_ERR_PARSE, "unknown schedule '%s' (expected gpipe, 1f1b, interleaved, zb or zb-h1)", name);
}

/* The canonical name of a kind ("zb-h1" for ZB_H1), "custom" for 0 (lists), "?" otherwise. A static string. */
STRATA_API const char *strata_schedule_kind_name(int kind) {
  if (kind == 0)
    return "custom";
  for (size_t i = 0; i < sizeof strata__schedule_names / sizeof strata__schedule_names[0]; i++)
    if (strata__schedule_names[i].kind == kind)
      return strata__schedule_names[i].name;
  return "?";
}

/* The accessors return 0 (-1 for a stage's device) for a NULL schedule or an out-of-range index. */
STRATA_API int strata_schedule_kind(strata_schedule_t s) { return s ? s->kind : 0; }
STRATA_API int strata_schedule_devices(strata_schedule_t s) { return s ? s->devices : 0; }
STRATA_API int strata_schedule_replicas(strata_schedule_t s) { return s ? strata__dp(s) : 0; }
STRATA_API int strata_schedule_tp(strata_schedule_t s) { return s ? s->tp : 0; }
STRATA_API int strata_schedule_stages(strata_schedule_t s) { return s ? s->stages : 0; }
STRATA_API int strata_schedule_microbatches(strata_schedule_t s) { return s ? s->microbatches : 0; }

STRATA_API int strata_schedule_stage_device(strata_schedule_t s, int stage) {
  if (!s || stage < 0 || stage >= s->stages)
    return -1;
  return s->stage_device[stage];
}

STRATA_API int strata_schedule_stage_tp(strata_schedule_t s, int stage) {
  if (!s || stage < 0 || stage >= s->stages)
    return 0;
  return strata__tp_at(s, stage);
}

STRATA_API int strata_schedule_stage_held(strata_schedule_t s, int stage) {
  if (!s || stage < 0 || stage >= s->stages)
    return 0;
  return strata__held(s, stage);
}

STRATA_API int strata_schedule_stage_owner(strata_schedule_t s, int stage) {
  if (!s || stage < 0 || stage >= s->stages)
    return -1;
  return strata__owner(s, stage);
}

STRATA_API int strata_schedule_with_lists(strata_schedule_t like, const struct strata_action *const *lists,
                                          const int *counts, strata_schedule_t *out) {
  if (!like || !out)
    return strata__error(STRATA_ERR_INVALID, "strata_schedule_with_lists: NULL argument");
  *out = NULL;
  strata_schedule_t s;
  TRY(strata_schedule_from_hybrid_lists(like->replicas / like->tp, like->tp, like->devices, like->stages,
                                        like->microbatches, like->stage_device, lists, counts, &s));
  s->kind = like->kind;
  const int chain = strata__chain(like);
  if (like->stage_tp) {
    if (!(s->stage_tp = malloc((size_t)chain * sizeof *s->stage_tp))) {
      strata_schedule_free(s);
      return strata__error(STRATA_ERR_NOMEM, "strata_schedule_with_lists: out of memory");
    }
    memcpy(s->stage_tp, like->stage_tp, (size_t)chain * sizeof *s->stage_tp);
  }
  *out = s;
  return STRATA_OK;
}

STRATA_API const struct strata_action *strata_schedule_actions(strata_schedule_t s, int device, int *count) {
  if (!s || device < 0 || device >= s->devices) {
    if (count)
      *count = 0;
    return NULL;
  }
  if (count)
    *count = s->counts[device];
  return s->lists[device];
}

/* ---------------------------------------------------------------- validation and simulation */

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
}

static int strata__index_init(struct strata__index *x, const struct strata_schedule *s) {
  memset(x, 0, sizeof *x);
  x->s = s;
  size_t n = strata__key(s, STRATA_ACTION_KIND_COUNT, 0, 0);
  x->count = calloc(n, sizeof *x->count);
  x->dev = malloc(n * sizeof *x->dev);
  x->pos = malloc(n * sizeof *x->pos);
  x->finish = malloc(n * sizeof *x->finish);
  x->arrive = malloc(n * sizeof *x->arrive);
  x->bw_done = calloc((size_t)s->stages, sizeof *x->bw_done);
  x->bw_last = calloc((size_t)s->stages, sizeof *x->bw_last);
  x->next = calloc((size_t)s->devices, sizeof *x->next);
  x->clock = calloc((size_t)s->devices, sizeof *x->clock);
  if (!x->count || !x->dev || !x->pos || !x->finish || !x->arrive || !x->bw_done || !x->bw_last || !x->next || !x->clock) {
    strata__index_free(x);
    return strata__error(STRATA_ERR_NOMEM, "schedule: out of memory for the validator's tables (%zu entries)", n);
  }
  for (size_t i = 0; i < n; i++)
    x->finish[i] = x->arrive[i] = -1;
  for (int d = 0; d < s->devices; d++)
    for (int i = 0; i < s->counts[d]; i++) {
      const struct strata_action *a = &s->lists[d][i];
      size_t k = strata__key(s, a->kind, a->stage, a->microbatch);
      if (x->count[k]++ == 0) {
        x->dev[k] = d;
        x->pos[k] = i;
      }
    }
  return STRATA_OK;
}

/* The backward of (stage, mb) that the schedule has: B when it has one, BI otherwise. */
static int strata__backward_kind(const struct strata__index *x, int stage, int microbatch) {
  return x->count[strata__key(x->s, STRATA_ACTION_BACKWARD, stage, microbatch)] ? STRATA_ACTION_BACKWARD
                                                                                 : STRATA_ACTION_BACKWARD_INPUT;
}

/*
** The actions `a` waits for, other than OPTIMIZER's (which waits for its
** whole stage): up to two, stored in deps; returns how many.
*/
static int strata__deps(const struct strata__index *x, const struct strata_action *a, struct strata_action deps[2]) {
  const struct strata_schedule *s = x->s;
  const int st = a->stage, mb = a->microbatch;
  int n = 0;
#define STRATA__DEP(k, sg) (deps[n++] = (struct strata_action){.kind = (k), .stage = (sg), .microbatch = mb})
  switch (a->kind) {
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
    STRATA__DEP(STRATA_ACTION_FORWARD, st);
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
  case STRATA_ACTION_BACKWARD_WEIGHT: STRATA__DEP(STRATA_ACTION_BACKWARD_INPUT, st); break;
  case STRATA_ACTION_PARAM_GATHER:
    deps[n++] = (struct strata_action){.kind = STRATA_ACTION_OPTIMIZER, .stage = st, .microbatch = -1};
    break;
  case STRATA_ACTION_TP_JOIN_FORWARD: STRATA__DEP(STRATA_ACTION_FORWARD, st); break;
  case STRATA_ACTION_TP_JOIN_BACKWARD: STRATA__DEP(strata__backward_kind(x, st, mb), st); break;
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
      if (strata__tp_join(a->kind)) {
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
      size_t k = strata__key(s, a->kind, st, a->microbatch);
      if (x->count[k] > 1 && (x->dev[k] != d || x->pos[k] != i))
        return strata__error(STRATA_ERR_INVALID, "dev %d #%d %s: duplicate (first at dev %d #%d)", d, i, b1, x->dev[k],
                             x->pos[k]);
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
      int n = strata__deps(x, a, deps);
      for (int j = 0; j < n; j++) {
        size_t k = strata__key(s, deps[j].kind, deps[j].stage, deps[j].microbatch);
        if (x->dev[k] == d && x->pos[k] > i)
          return strata__error(STRATA_ERR_INVALID, "dev %d #%d %s: comes before %s (#%d on the same device) that it needs",
                               d, i, strata__action_str(a, b1), strata__action_str(&deps[j], b2), x->pos[k]);
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
        double ready = x->clock[d];
        const size_t self = strata__key(s, a->kind, a->stage, a->microbatch);
        if (strata__collective(a->kind) && x->finish[self] >= 0) {
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
          int n = strata__deps(x, a, deps), waiting = 0;
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
        if (strata__collective(a->kind)) {
          /* arrive, and complete once every member's device has */
          if (x->arrive[self] < 0)
            x->arrive[self] = ready;
          const int g = strata__group_size(s, a->kind, a->stage);
          double last = 0;
          int all = 1;
          for (int r = 0; r < g && all; r++) {
            double t = x->arrive[strata__key(s, a->kind, strata__member(s, a->kind, a->stage, r), a->microbatch)];
            all = t >= 0;
            last = t > last ? t : last;
          }
          if (!all)
            break;
          double c = cost ? cost[a->kind] : 0;
          for (int r = 0; r < g; r++)
            x->finish[strata__key(s, a->kind, strata__member(s, a->kind, a->stage, r), a->microbatch)] = last + c;
          work += c * g;
          continue; /* this device takes it on its next turn */
        }
        double c = cost ? cost[a->kind] : 0;
        x->clock[d] = ready + c;
        work += c;
        x->finish[strata__key(s, a->kind, a->stage, a->microbatch)] = x->clock[d];
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
    struct strata_action w = {0}, deps[2];
    int replica_wait = 0;
    if (strata__collective(a->kind) && x->arrive[strata__key(s, a->kind, a->stage, a->microbatch)] >= 0) {
      /* here already: waits for a member that is not */
      const int g = strata__group_size(s, a->kind, a->stage);
      for (int r = 0; r < g && !replica_wait; r++) {
        int m = strata__member(s, a->kind, a->stage, r);
        if (x->arrive[strata__key(s, a->kind, m, a->microbatch)] < 0) {
          w = (struct strata_action){.kind = a->kind, .stage = m, .microbatch = a->microbatch};
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
      int n = strata__deps(x, a, deps);
      for (int j = n - 1; j >= 0; j--)
        if (x->finish[strata__key(s, deps[j].kind, deps[j].stage, deps[j].microbatch)] < 0)
          w = deps[j];
    }
    int wd = x->count[strata__key(s, w.kind, w.stage, w.microbatch)] ? x->dev[strata__key(s, w.kind, w.stage, w.microbatch)]
                                                                      : s->stage_device[w.stage];
    (void)replica_wait;
    strata__append(msg, sizeof msg, &len, "%sdev %d at #%d %s waits for %s on dev %d", len ? "; " : "deadlock: ", d,
                   x->next[d], strata__action_str(a, b1), strata__action_str(&w, b2), wd);
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
** Simulate with unit costs: F 1, B 2, BI 1, W 1, OPTIMIZER and transfers 0.
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
** A micro-batch is in flight on a stage from its F until its B, or until
** its W when the backward is split (W still reads the activations).
*/
STRATA_API int strata_schedule_peak_inflight(strata_schedule_t s, int stage, int *peak) {
  if (!s || !peak)
    return strata__error(STRATA_ERR_INVALID, "strata_schedule_peak_inflight: NULL argument");
  if (stage < 0 || stage >= s->stages)
    return strata__error(STRATA_ERR_RANGE, "strata_schedule_peak_inflight: stage %d out of range (%d stages)", stage,
                         s->stages);
  const int d = s->stage_device[stage];
  int now = 0, top = 0;
  for (int i = 0; i < s->counts[d]; i++) {
    const struct strata_action *a = &s->lists[d][i];
    if (a->stage != stage)
      continue;
    if (a->kind == STRATA_ACTION_FORWARD && ++now > top)
      top = now;
    else if (a->kind == STRATA_ACTION_BACKWARD || a->kind == STRATA_ACTION_BACKWARD_WEIGHT)
      now--;
  }
  *peak = top;
  return STRATA_OK;
}

STRATA_API int strata_schedule_to_text(strata_schedule_t s, char **text) {
  if (!s || !text)
    return strata__error(STRATA_ERR_INVALID, "strata_schedule_to_text: NULL argument");
  *text = NULL;
  char b[STRATA__ACTION_STR];
  size_t len = 1;
  for (int d = 0; d < s->devices; d++) {
    len += (size_t)snprintf(NULL, 0, "dev %d:\n", d);
    for (int i = 0; i < s->counts[d]; i++)
      len += 1 + strlen(strata__action_str(&s->lists[d][i], b));
  }
  char *out = malloc(len), *p = out;
  if (!out)
    return strata__error(STRATA_ERR_NOMEM, "strata_schedule_to_text: out of memory for %zu bytes", len);
  for (int d = 0; d < s->devices; d++) {
    p += sprintf(p, "dev %d:", d);
    for (int i = 0; i < s->counts[d]; i++)
      p += sprintf(p, " %s", strata__action_str(&s->lists[d][i], b));
    *p++ = '\n';
  }
  *p = '\0';
  *text = out;
  return STRATA_OK;
}
