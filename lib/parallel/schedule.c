/* SPDX-License-Identifier: MIT */
/* schedule.c — pipeline schedules as data: the GPipe, 1F1B, interleaved 1F1B, ZB-H1, ZB-V and DualPipeV generators, schedules from lists, names, accessors. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/schedule.h>

#include "core/core.h"
#include "parallel/parallel.h"

/* The most actions a generated schedule may hold over all its devices;
** keeps every index and size computation far from overflow. */
#define STRATA__SCHEDULE_MAX_ACTIONS (1 << 26)

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

const char *strata__action_str(const struct strata_action *a, char buf[STRATA__ACTION_STR]) {
  if (strata__per_stage(a->kind) && a->microbatch < 0) /* (ZeRO-3's PARAM_GATHER has a micro-batch) */
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

/*
** The V schedules (ZB-V and DualPipeV) on device d of p: the model is cut into
** 2p chunks laid out in a V, device d holding chunk 0 = stage d on the way
** down and chunk 1 = stage 2p - 1 - d on the way back up, so stages p - 1
** and p share device p - 1 and the last stage (the loss) sits on device 0
** beside the first. Backward is split into BI and W as in ZB-H1, and every W
** runs right after its BI: a device holds at most one micro-batch between
** its BI and its W (one dsave region, the output-side gradients W reads).
**
** Memory. A chunk holds half of a 1F1B stage's layers, so 1F1B's first
** device, p stage micro-batches in flight (F until W), holds what 2p chunk
** micro-batches hold. But device 0 of the V holds the two end chunks, and
** with the cut that balances time (the embedding with a block, the head with
** a block) each is heavier than a block: with b a block's kept bytes, emb a
** token row (its int32 ids) and h the head's above a block, 1F1B's device 0
** holds p(2b + emb) and the V's n0(b + emb) + n1(b + h) for n0 micro-batches
** of chunk 0 and n1 of chunk 1 in flight. The lists therefore keep device 0
** to n0 <= 2p - 1 always and n0 <= 2p - 2 while a micro-batch of the last
** chunk is in flight (n1 <= 1 there: its F, BI and W follow one another or
** nearly): no more than 1F1B's device 0 holds whenever (p - 1)emb <= b and
** (p - 2)emb + h <= b, which the GPTs hold with room (a block keeps ten and
** more rows of d_model floats per token, the head its normalised input and
** the logits: vocab / d_model of a row). The other devices hold at most 2p.
**
** Rounds (p >= 3; p = 2 runs pairs of micro-batches, strata__gen_v_pairs).
** Each device runs the same round over and over, of four blocks in a
** per-device order: F0 (chunk 0's forward), B0 (its BI and W), F1, B1; block
** x of round r is micro-batch r + ahead[x], and a block whose micro-batch is
** out of 0 .. m - 1 is left out, which makes the warm-up (rounds before r = 0, forwards only at first) and the
** cool-down (the last rounds, backwards only). How far each block runs ahead
** and in which order fixes the time a micro-batch takes from a device's F0
** back to its B0 (F's and BI's hop from device to device, waiting at each
** for its place in the round) and with it what the device holds: the
** round trip must fit in the rounds the F0 runs ahead of B0. With every
** device in the order F0 B0 F1 B1 (the paper's steady state) each hop there
** and back costs a full round, and device 0 must run 2p - 1 rounds ahead,
** holding 2p of chunk 0; changing the order on devices 1 .. p - 1 lets the
** micro-batches pass those with less waiting, one round sooner back at device
** 0, so that 2p - 2 ahead suffice. The per-chunk order of micro-batches is
** ascending in every block, so each W adds its gradient in the order one
** device does. Unit-cost bubbles (strata_schedule_bubble) and peaks are
** checked by test-schedule for every p <= 8, 2p <= m <= 32.
**
** The cap has a price in real costs (BI about 1.4 F, W 0.6 F): the paper's
** extra micro-batch in flight on device 0 is slack that absorbs uneven costs,
** and the lists without it run a little longer (strata-plan --simulate on the
** 512 x 8 GPT, pp 4, 8 micro-batches: ZB-V's step 0.9% longer, DualPipeV's
** 0.4%; pp 2: 0.8% shorter at 8, 2.2% longer at 16 for ZB-V, 1.7% and 3.8%
** longer for DualPipeV).
*/

/* A device's round: its four blocks in order, and how far ahead of the round each runs. */
enum { STRATA__V_F0, STRATA__V_B0, STRATA__V_F1, STRATA__V_B1 };
struct strata__v_round {
  int order[4];
  int ahead[4]; /* by block: F0, B0, F1, B1 */
};

/* Emit block x (STRATA__V_*) of micro-batch mb on device d's chunk. */
static int strata__v_block(struct strata_schedule *s, int d, int x, int mb) {
  const int stage = x < STRATA__V_F1 ? d : 2 * s->devices - 1 - d;
  if (x == STRATA__V_F0 || x == STRATA__V_F1)
    return strata__emit(s, STRATA_ACTION_FORWARD, stage, mb);
  int rc = strata__emit(s, STRATA_ACTION_BACKWARD_INPUT, stage, mb);
  return rc == STRATA_OK ? strata__emit(s, STRATA_ACTION_BACKWARD_WEIGHT, stage, mb) : rc;
}

/* Device d's list: its rounds from the first with a micro-batch in range (B0 runs none ahead: the last is m - 1). */
static int strata__gen_v_rounds(struct strata_schedule *s, int d, const struct strata__v_round *v) {
  const int m = s->microbatches;
  int first = 0, rc = STRATA_OK;
  for (int x = 0; x < 4; x++)
    first = v->ahead[x] > first ? v->ahead[x] : first;
  for (int r = -first; r < m && rc == STRATA_OK; r++)
    for (int i = 0; i < 4 && rc == STRATA_OK; i++) {
      const int x = v->order[i], mb = r + v->ahead[x];
      if (mb >= 0 && mb < m)
        rc = strata__v_block(s, d, x, mb);
    }
  return rc;
}

/*
** One device (p = 1) holds both chunks: each micro-batch runs F0 F1 B1 B0 in
** turn, two chunk micro-batches at once (the whole model, as 1F1B's one
** stage), no bubble.
*/
static const struct strata__v_round strata__v_alone = {{STRATA__V_F0, STRATA__V_F1, STRATA__V_B1, STRATA__V_B0}, {0}};

/*
** The V on two devices (ZB-V and DualPipeV alike): pairs of micro-batches. Device 1 runs F1 F2 of both,
** then B2 B1 of both (a B is BI with its W right after); device 0 first F0 of
** the first pair and F3 B3 of each as it comes back, then for each next pair
** its two forwards of chunk 0 each followed by a chunk-0 backward of the pair
** before (F0 B0 F0 B0) and F3 B3 of both, then the last backwards. Device 0
** holds 3 of chunk 0 only between such an F0 and its B0, 2 while chunk 1
** runs; device 1 holds 4. With m odd the last micro-batch goes alone, forward
** before the pair before it is done on device 1. With F = BI = W = 1 the span
** is the paper's steady state's, 6m + 2: the bubble 1 / (3m + 1). (Rounds
** within the caps on two devices reach 2 / (3m + 2) at best, ZB-H1's; a
** search of the lists under real costs found none better than these pairs.)
*/
static int strata__gen_v_pairs(struct strata_schedule *s, int d) {
  const int m = s->microbatches;
  int k = 0, rc = STRATA_OK;
#define STRATA__ZBV(x, mb)                                                                                             \
  do {                                                                                                                 \
    if (rc == STRATA_OK)                                                                                               \
      rc = strata__v_block(s, d, (x), (mb));                                                                           \
  } while (0)
  if (d == 0) {
    STRATA__ZBV(STRATA__V_F0, 0);
    STRATA__ZBV(STRATA__V_F0, 1);
    for (k = 0; k < 2; k++) {
      STRATA__ZBV(STRATA__V_F1, k);
      STRATA__ZBV(STRATA__V_B1, k);
    }
    for (; k + 1 < m; k += 2) {
      for (int j = 0; j < 2; j++) {
        STRATA__ZBV(STRATA__V_F0, k + j);
        STRATA__ZBV(STRATA__V_B0, k - 2 + j);
      }
      for (int j = 0; j < 2; j++) {
        STRATA__ZBV(STRATA__V_F1, k + j);
        STRATA__ZBV(STRATA__V_B1, k + j);
      }
    }
    if (k < m) { /* m odd: the last micro-batch alone */
      STRATA__ZBV(STRATA__V_F0, k);
      STRATA__ZBV(STRATA__V_B0, k - 2);
      STRATA__ZBV(STRATA__V_F1, k);
      STRATA__ZBV(STRATA__V_B1, k);
    }
    STRATA__ZBV(STRATA__V_B0, m - 2);
    STRATA__ZBV(STRATA__V_B0, m - 1);
  } else {
    for (k = 0; k + 1 < m; k += 2) {
      for (int j = 0; j < 2; j++) {
        STRATA__ZBV(STRATA__V_F0, k + j);
        STRATA__ZBV(STRATA__V_F1, k + j);
      }
      STRATA__ZBV(STRATA__V_B1, k);
      STRATA__ZBV(STRATA__V_B0, k);
      STRATA__ZBV(STRATA__V_B1, k + 1);
      if (k + 3 == m) { /* m odd: the last micro-batch, alone, forward before this pair's last chunk-0 backward */
        STRATA__ZBV(STRATA__V_F0, k + 2);
        STRATA__ZBV(STRATA__V_F1, k + 2);
        STRATA__ZBV(STRATA__V_B0, k + 1);
        STRATA__ZBV(STRATA__V_B1, k + 2);
        STRATA__ZBV(STRATA__V_B0, k + 2);
      } else
        STRATA__ZBV(STRATA__V_B0, k + 1);
    }
  }
#undef STRATA__ZBV
  return rc;
}

/*
** ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, section 6).
** For p >= 3 the rounds (block: micro-batches ahead of round r; p <= 2 above):
**
**   device 0        F0 B0 F1 B1   F0: 2p - 2, F1 and B1: p
**   device 1        F0 B0 B1 F1   F0: 2p - 3, F1: p, B1: p - 1
**   device d >= 2   F0 F1 B1 B0   F0: 2p - 3 - d, F1: p - 2, B1: p - 1 - d
**
** Device 0 holds at most 2p - 1 chunk micro-batches, 2p - 2 of chunk 0 while
** one of chunk 1 is in flight; device 1 2p - 1; device d >= 2 2p - d, 2p - 2
** at most. With F = BI = W = 1 the span is 6m + 2p, two units over the
** paper's steady state with every device in the order F0 B0 F1 B1 (6m +
** 2(p - 1) with each W right after its BI), which has device 0 hold 2p of
** chunk 0 with one of chunk 1 on top: device 0 must idle one unit before
** micro-batch 0 first comes back to it (2p - 2 forwards fill 2p - 1 units),
** and one more waiting for the first gradients. The bubble is p / (3m + p),
** below ZB-H1's (p - 1) / (1.5m + p - 1). With the costs calibrated on the
** 512 x 8 GPT (BI 1.4 F, W 0.6 F, pp 4, 8 micro-batches) strata-plan
** --simulate predicts a step 0.9% longer than the paper's steady state's.
** The lists need m >= 2p, as the paper sets them (PyTorch's
** ScheduleZBVZeroBubble pads smaller counts with idle slots instead).
*/
static int strata__gen_zbv(struct strata_schedule *s, int d) {
  const int p = s->devices;
  if (p <= 2)
    return p == 1 ? strata__gen_v_rounds(s, d, &strata__v_alone) : strata__gen_v_pairs(s, d);
  struct strata__v_round v = {{STRATA__V_F0, STRATA__V_F1, STRATA__V_B1, STRATA__V_B0},
                              {2 * p - 3 - d, 0, p - 2, p - 1 - d}};
  if (d == 0)
    v = (struct strata__v_round){{STRATA__V_F0, STRATA__V_B0, STRATA__V_F1, STRATA__V_B1}, {2 * p - 2, 0, p, p}};
  else if (d == 1)
    v = (struct strata__v_round){{STRATA__V_F0, STRATA__V_B0, STRATA__V_B1, STRATA__V_F1}, {2 * p - 3, 0, p, p - 1}};
  return strata__gen_v_rounds(s, d, &v);
}

/*
** DualPipeV (DeepSeek-V3's DualPipe, "cut in half" into a V by Sea AI's
** DualPipeV, as PyTorch's ScheduleDualPipeV generates it): each step pairs
** a forward of one chunk with a backward of the other, (F0, B1) and (F1,
** B0), so that one's communication hides behind the other's compute (its
** point for expert parallelism); strata's executor runs a device's list in
** order, so a pair is one then the other, and a B is its BI with its W
** right after (the same arithmetic as ZB-H1's lists: bit for bit as one
** device). The rounds, each two such pairs (block: micro-batches ahead of
** round r):
**
**   device 0              B1 F0, B0 F1   F0: 2p - 2, F1 and B1: p
**   device 1              F0 B1, B0 F1   F0: 2p - 3, F1: p, B1: p - 2
**   device d >= 2         B1 F0, B0 F1   F0: 2p - 1 - d, F1: p, B1: p - d
**
** (the round written from its F0: device 0 F0 B0 F1 B1, as the paper's ZB-V).
** Device 0 holds at most 2p - 1 chunk micro-batches, 2p - 2 of chunk 0 while
** one of chunk 1 is in flight, the others at most 2p (devices 2 .. p - 1
** run the paper's steady state). With F = BI = W = 1 the span is 6m + 2p +
** 2, the bubble (p + 1) / (3m + p + 1), below 1F1B's (p - 1) / (m + p - 1)
** and not above ZB-H1's (equal at p = 3, m = 6). The reference's lists
** (steps with counts, device 0 warming up with 2p - 1 forwards of chunk 0)
** reach ZB-V's (p - 1) / (3m + p - 1) holding 2p of chunk 0 on device 0 with
** one of chunk 1 on top, 2p + 1 with each pair's F before its B (DeepSeek-V3's
** table: PP + 1 chunks' activations). On two devices DualPipeV runs ZB-V's
** pairs (strata__gen_v_pairs): rounds of its pairings within the caps reach
** 2 / (3m + 2) there at best, and with calibrated costs a step longer than
** 1F1B's. m >= 2p, as PyTorch asks.
*/
static int strata__gen_dualpipev(struct strata_schedule *s, int d) {
  const int p = s->devices;
  if (p <= 2)
    return p == 1 ? strata__gen_v_rounds(s, d, &strata__v_alone) : strata__gen_v_pairs(s, d);
  struct strata__v_round v = {{STRATA__V_F0, STRATA__V_B0, STRATA__V_F1, STRATA__V_B1},
                              {2 * p - 1 - d, 0, p, p - d}};
  if (d == 0)
    v.ahead[STRATA__V_F0] = 2 * p - 2;
  else if (d == 1)
    v = (struct strata__v_round){{STRATA__V_F0, STRATA__V_B1, STRATA__V_B0, STRATA__V_F1}, {2 * p - 3, 0, p, p - 2}};
  return strata__gen_v_rounds(s, d, &v);
}

/* ---------------------------------------------------------------- what a kind implies */

/* The kinds whose 2p stages lie in a V. */
static int strata__in_v(int kind) { return kind == STRATA_SCHEDULE_ZBV || kind == STRATA_SCHEDULE_DUALPIPEV; }

STRATA_API int strata_schedule_kind_stages_per_device(int kind, int virtual_stages) {
  if (kind == STRATA_SCHEDULE_INTERLEAVED)
    return virtual_stages ? virtual_stages : 2;
  return strata__in_v(kind) ? 2 : 1;
}

STRATA_API int strata_schedule_kind_stage_device(int kind, int devices, int stage) {
  if (devices < 1 || stage < 0)
    return -1;
  if (strata__in_v(kind))
    return stage >= 2 * devices ? -1 : stage < devices ? stage : 2 * devices - 1 - stage;
  return stage % devices;
}

STRATA_API int strata_schedule_kind_split_backward(int kind) {
  return kind == STRATA_SCHEDULE_ZB_H1 || strata__in_v(kind);
}

STRATA_API int strata_schedule_kind_min_microbatches(int kind, int devices) {
  return strata__in_v(kind) ? 2 * devices : 1;
}

STRATA_API int strata_schedule_generate(int kind, int devices, int microbatches, int virtual_stages,
                                        strata_schedule_t *out) {
  if (!out)
    return strata__error(STRATA_ERR_INVALID, "strata_schedule_generate: NULL out");
  *out = NULL;
  if (kind < STRATA_SCHEDULE_GPIPE || kind > STRATA_SCHEDULE_DUALPIPEV)
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
  if (microbatches < strata_schedule_kind_min_microbatches(kind, devices))
    return strata__error(STRATA_ERR_INVALID,
                         "strata_schedule_generate: %s needs at least 2 x pp = %d micro-batches on %d devices, got %d "
                         "(device 0's warm-up runs 2 x pp - 1 forwards of its first chunk; the steady phase that fills "
                         "the bubble comes after them)",
                         strata_schedule_kind_name(kind), strata_schedule_kind_min_microbatches(kind, devices), devices,
                         microbatches);
  v = strata_schedule_kind_stages_per_device(kind, v);
  /* each (stage, micro-batch) takes at most 7 actions (RA F SA RG BI SG W), plus one OPTIMIZER per stage */
  uint64_t stages = (uint64_t)devices * (uint64_t)v, units = 0;
  if (!strata__mul_ok(stages, (uint64_t)microbatches, &units) || units > STRATA__SCHEDULE_MAX_ACTIONS / 8)
    return strata__error(STRATA_ERR_RANGE, "strata_schedule_generate: %d devices x %d stages x %d micro-batches is too large",
                         devices, v, microbatches);

  struct strata_schedule *s = strata__schedule_alloc(kind, devices, (int)stages, microbatches);
  if (!s)
    return strata__error(STRATA_ERR_NOMEM, "strata_schedule_generate: out of memory");
  for (int st = 0; st < s->stages; st++)
    s->stage_device[st] = strata_schedule_kind_stage_device(kind, devices, st);
  int rc = STRATA_OK;
  for (int d = 0; d < devices && rc == STRATA_OK; d++) {
    switch (kind) {
    case STRATA_SCHEDULE_GPIPE: rc = strata__gen_gpipe(s, d); break;
    case STRATA_SCHEDULE_1F1B: rc = strata__gen_1f1b(s, d, 0); break;
    case STRATA_SCHEDULE_ZB_H1: rc = strata__gen_1f1b(s, d, 1); break;
    case STRATA_SCHEDULE_ZBV: rc = strata__gen_zbv(s, d); break;
    case STRATA_SCHEDULE_DUALPIPEV: rc = strata__gen_dualpipev(s, d); break;
    default: rc = strata__gen_interleaved(s, d, v); break;
    }
    /* the device's stages in order: d, d + p, ... (the V: d, then 2p - 1 - d) */
    for (int st = 0; st < s->stages && rc == STRATA_OK; st++)
      if (s->stage_device[st] == d)
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
** Push action (kind, stage, mb) on device d; with ZeRO-3 (zero >= 3) a compute
** action that reads the stage's weights (F, B, BI, W) comes right after a
** PARAM_GATHER of the same stage and micro-batch: the gathers of its layers'
** weights from the replicas' shards, the first posted there and each next one
** while the layer before computes (the executor's prefetch, lib/train/gather.c).
*/
static int strata__push_gathered(struct strata_schedule *s, int d, int zero, int kind, int stage, int mb) {
  const int reads = kind == STRATA_ACTION_FORWARD || kind == STRATA_ACTION_BACKWARD ||
                    kind == STRATA_ACTION_BACKWARD_INPUT || kind == STRATA_ACTION_BACKWARD_WEIGHT;
  if (zero >= 3 && reads)
    TRY(strata__push(s, d, STRATA_ACTION_PARAM_GATHER, stage, mb));
  return strata__push(s, d, kind, stage, mb);
}

/*
** Replicate a pipeline schedule over `replicas` data-parallel copies of
** `tp` chains each: the lists of chain c are those of the base with every
** stage moved by c x (base stages), on devices moved by c x (base devices),
** each forward and backward followed by its TP_JOIN (tp > 1), and each
** stage's gradient collective placed right after its last backward work
** on its device (a GR there lets that stage's reduction overlap whatever
** the device runs next), ZeRO-1's and 2's PARAM_GATHERs after the device's
** last OPTIMIZER (where the executor updates all the device's stages), and
** ZeRO-3's right before each F, B, BI and W (strata__push_gathered).
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
    actions += 3u * (uint64_t)base->counts[d] + 2u * (uint64_t)base->stages;
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
          rc = strata__push_gathered(s, dd, zero, a->kind, st, a->microbatch);
        const int joins = tp[d] > 1;
        if (!rc && joins && a->kind == STRATA_ACTION_FORWARD)
          rc = strata__push(s, dd, STRATA_ACTION_TP_JOIN_FORWARD, st, a->microbatch);
        if (!rc && joins && (a->kind == STRATA_ACTION_BACKWARD || a->kind == STRATA_ACTION_BACKWARD_INPUT))
          rc = strata__push(s, dd, STRATA_ACTION_TP_JOIN_BACKWARD, st, a->microbatch);
        if (!rc && a->kind == STRATA_ACTION_OPTIMIZER && zero && zero < 3 && i == last_opt)
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
      /* (a PARAM_GATHER is ZeRO-1's of the whole step, -1, or ZeRO-3's of a micro-batch) */
      const int either = a->kind == STRATA_ACTION_PARAM_GATHER && a->microbatch >= 0 && a->microbatch < microbatches;
      if (!either &&
          (strata__per_stage(a->kind) ? a->microbatch != -1 : (a->microbatch < 0 || a->microbatch >= microbatches)))
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
  {"zbv", STRATA_SCHEDULE_ZBV},
  {"dualpipev", STRATA_SCHEDULE_DUALPIPEV},
};

STRATA_API const char *strata_schedule_kind_names(void) {
  return "gpipe, 1f1b, interleaved, zb (or zb-h1), zbv, dualpipev";
}

STRATA_API int strata_schedule_kind_parse(const char *name, int *kind) {
  if (!name || !kind)
    return strata__error(STRATA_ERR_INVALID, "strata_schedule_kind_parse: NULL argument");
  for (size_t i = 0; i < sizeof strata__schedule_names / sizeof strata__schedule_names[0]; i++)
    if (strcmp(name, strata__schedule_names[i].name) == 0) {
      *kind = strata__schedule_names[i].kind;
      return STRATA_OK;
    }
  return strata__error(STRATA_ERR_PARSE, "unknown schedule '%s' (expected one of %s)", name,
                       strata_schedule_kind_names());
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

/*
** An RC before every backward part: B, BI and W. A split backward's weight pass reads the blocks' activations (their
** inputs, layernorm and GELU outputs, attention output) as much as its input pass does, and the stage's recompute
** buffer holds one block, the one whose backward runs; so the W recomputes each block again, just before its weight
** gradient, rather than keeping the BI's recomputed blocks until the W: that would hold, for every micro-batch between
** its BI and its W (zero-bubble schedules defer W on purpose, up to p of them), all its blocks' activations — the
** memory recomputation exists to save. The price is one more forward (full) or attention (selective) per micro-batch,
** the same bits (the same ops on the same inputs). On a tp-cut stage the W's recomputation joins the slices (its
** forward's all-reduces), settled by a TP_JOIN_BACKWARD right after the W, as a forward's by its TP_JOIN_FORWARD.
*/
STRATA_API int strata_schedule_with_recompute(strata_schedule_t s, strata_schedule_t *out) {
  if (!s || !out)
    return strata__error(STRATA_ERR_INVALID, "strata_schedule_with_recompute: NULL argument");
  *out = NULL;
  struct strata_action **lists = calloc((size_t)s->devices, sizeof *lists);
  int *counts = calloc((size_t)s->devices, sizeof *counts);
  int rc = lists && counts ? STRATA_OK : strata__error(STRATA_ERR_NOMEM, "strata_schedule_with_recompute: out of memory");
  for (int d = 0; d < s->devices && !rc; d++) {
    size_t n = 0;
    for (int i = 0; i < s->counts[d]; i++) /* (lists hold at most STRATA__SCHEDULE_MAX_ACTIONS: thrice fits an int) */
      n += 1 + (s->lists[d][i].kind >= STRATA_ACTION_BACKWARD && s->lists[d][i].kind <= STRATA_ACTION_BACKWARD_WEIGHT) +
           (s->lists[d][i].kind == STRATA_ACTION_BACKWARD_WEIGHT);
    if (!(lists[d] = malloc((n + 1) * sizeof *lists[d]))) {
      rc = strata__error(STRATA_ERR_NOMEM, "strata_schedule_with_recompute: out of memory");
      break;
    }
    for (int i = 0; i < s->counts[d]; i++) {
      const struct strata_action *a = &s->lists[d][i];
      const int part = a->kind >= STRATA_ACTION_BACKWARD && a->kind <= STRATA_ACTION_BACKWARD_WEIGHT;
      if (part)
        lists[d][counts[d]++] = (struct strata_action){.kind = STRATA_ACTION_RECOMPUTE, .stage = a->stage,
                                                       .microbatch = a->microbatch};
      lists[d][counts[d]++] = *a;
      if (a->kind == STRATA_ACTION_BACKWARD_WEIGHT && strata__tp_at(s, a->stage) > 1)
        lists[d][counts[d]++] = (struct strata_action){.kind = STRATA_ACTION_TP_JOIN_BACKWARD, .stage = a->stage,
                                                       .microbatch = a->microbatch};
    }
  }
  if (!rc)
    rc = strata_schedule_with_lists(s, (const struct strata_action *const *)lists, counts, out);
  for (int d = 0; lists && d < s->devices; d++)
    free(lists[d]);
  free(lists);
  free(counts);
  return rc;
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

STRATA_API int strata_schedule_device_peak(strata_schedule_t s, int device, const double *bytes, double *peak,
                                           int *counts) {
  if (!s || !peak)
    return strata__error(STRATA_ERR_INVALID, "strata_schedule_device_peak: NULL argument");
  if (device < 0 || device >= s->devices)
    return strata__error(STRATA_ERR_RANGE, "strata_schedule_device_peak: device %d out of range (%d devices)", device,
                         s->devices);
  int *n = counts ? calloc((size_t)s->stages, sizeof *n) : NULL;
  if (counts && !n)
    return strata__error(STRATA_ERR_NOMEM, "strata_schedule_device_peak: out of host memory");
  /* a micro-batch is in flight on a stage from its F until its B, or its W when the backward is split */
  double now = 0, top = 0;
  for (int i = 0; i < s->counts[device]; i++) {
    const struct strata_action *a = &s->lists[device][i];
    const double w = bytes ? bytes[a->stage] : 1;
    if (a->kind == STRATA_ACTION_FORWARD) {
      now += w;
      if (n)
        n[a->stage]++;
      if (now > top) {
        top = now;
        for (int j = 0; n && j < s->stages; j++)
          if (s->stage_device[j] == device)
            counts[j] = n[j];
      }
    } else if (a->kind == STRATA_ACTION_BACKWARD || a->kind == STRATA_ACTION_BACKWARD_WEIGHT) {
      now -= w;
      if (n)
        n[a->stage]--;
    }
  }
  free(n);
  *peak = top;
  return STRATA_OK;
}

/* A stage's micro-batches between their BI and their W in its device's list: the most at once. */
STRATA_API int strata_schedule_peak_pending(strata_schedule_t s, int stage, int *peak) {
  return strata__schedule_stage_peak(s, stage, STRATA_ACTION_BACKWARD_INPUT, STRATA_ACTION_BACKWARD_WEIGHT,
                                     STRATA_ACTION_BACKWARD_WEIGHT, "strata_schedule_peak_pending", peak);
}

STRATA_API int strata_schedule_device_pending(strata_schedule_t s, int device, int *peak) {
  if (!s || !peak)
    return strata__error(STRATA_ERR_INVALID, "strata_schedule_device_pending: NULL argument");
  if (device < 0 || device >= s->devices)
    return strata__error(STRATA_ERR_RANGE, "strata_schedule_device_pending: device %d out of range (%d devices)",
                         device, s->devices);
  int now = 0, top = 0;
  for (int i = 0; i < s->counts[device]; i++) {
    const int k = s->lists[device][i].kind;
    now += k == STRATA_ACTION_BACKWARD_INPUT ? 1 : k == STRATA_ACTION_BACKWARD_WEIGHT ? -1 : 0;
    top = now > top ? now : top;
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
