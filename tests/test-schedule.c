/* SPDX-License-Identifier: MIT */
/* test-schedule.c — pipeline schedules: every generator validates, hand-checked lists, bubbles, in-flight peaks, broken lists rejected. */
#include "common.h"

#include <strata/schedule.h>

#define MAX_P 8
#define MAX_M 32

static const int plain_kinds[] = {STRATA_SCHEDULE_GPIPE, STRATA_SCHEDULE_1F1B, STRATA_SCHEDULE_ZB_H1};

/* Generate, failing the test with the library's message if it does not work. */
static strata_schedule_t gen(int kind, int p, int m, int v) {
  strata_schedule_t s = NULL;
  int rc = strata_schedule_generate(kind, p, m, v, &s);
  cr_assert_eq(rc, STRATA_OK, "generate %s p=%d m=%d v=%d: %s", strata_schedule_kind_name(kind), p, m, v,
               strata_last_error());
  return s;
}

static double bubble_of(strata_schedule_t s) {
  double b = -1;
  OK(strata_schedule_bubble(s, &b));
  return b;
}

static double bubble_gen(int kind, int p, int m, int v) {
  strata_schedule_t s = gen(kind, p, m, v);
  double b = bubble_of(s);
  strata_schedule_free(s);
  return b;
}

static int peak_of(strata_schedule_t s, int stage) {
  int peak = -1;
  OK(strata_schedule_peak_inflight(s, stage, &peak));
  return peak;
}

static void expect_text(strata_schedule_t s, const char *want) {
  char *text = NULL;
  OK(strata_schedule_to_text(s, &text));
  cr_assert_str_eq(text, want);
  free(text);
}

/* ---------------------------------------------------------------- every generated schedule */

Test(schedule, every_plain_schedule_validates) {
  for (size_t k = 0; k < sizeof plain_kinds / sizeof plain_kinds[0]; k++)
    for (int p = 1; p <= MAX_P; p++)
      for (int m = 1; m <= MAX_M; m++) {
        strata_schedule_t s = gen(plain_kinds[k], p, m, 0);
        int rc = strata_schedule_validate(s);
        cr_assert_eq(rc, STRATA_OK, "%s p=%d m=%d: %s", strata_schedule_kind_name(plain_kinds[k]), p, m,
                     strata_last_error());
        cr_assert_eq(strata_schedule_kind(s), plain_kinds[k]);
        cr_assert_eq(strata_schedule_devices(s), p);
        cr_assert_eq(strata_schedule_stages(s), p);
        cr_assert_eq(strata_schedule_microbatches(s), m);
        for (int st = 0; st < p; st++)
          cr_assert_eq(strata_schedule_stage_device(s, st), st);
        strata_schedule_free(s);
      }
}

Test(schedule, every_interleaved_schedule_validates) {
  for (int v = 2; v <= 3; v++)
    for (int p = 1; p <= MAX_P; p++)
      for (int m = p; m <= MAX_M; m += p) {
        strata_schedule_t s = gen(STRATA_SCHEDULE_INTERLEAVED, p, m, v);
        int rc = strata_schedule_validate(s);
        cr_assert_eq(rc, STRATA_OK, "interleaved p=%d m=%d v=%d: %s", p, m, v, strata_last_error());
        cr_assert_eq(strata_schedule_stages(s), p * v);
        for (int st = 0; st < p * v; st++)
          cr_assert_eq(strata_schedule_stage_device(s, st), st % p);
        strata_schedule_free(s);
      }
}

/* ---------------------------------------------------------------- hand-computed lists */

Test(schedule, gpipe_p2_m2) {
  strata_schedule_t s = gen(STRATA_SCHEDULE_GPIPE, 2, 2, 0);
  expect_text(s, "dev 0: F0.0 SA0.0 F0.1 SA0.1 RG0.0 B0.0 RG0.1 B0.1 OPT0\n"
                 "dev 1: RA1.0 F1.0 RA1.1 F1.1 B1.0 SG1.0 B1.1 SG1.1 OPT1\n");
  strata_schedule_free(s);
}

Test(schedule, one_f_one_b_p2_m3) {
  strata_schedule_t s = gen(STRATA_SCHEDULE_1F1B, 2, 3, 0);
  expect_text(s, "dev 0: F0.0 SA0.0 F0.1 SA0.1 RG0.0 B0.0 F0.2 SA0.2 RG0.1 B0.1 RG0.2 B0.2 OPT0\n"
                 "dev 1: RA1.0 F1.0 B1.0 SG1.0 RA1.1 F1.1 B1.1 SG1.1 RA1.2 F1.2 B1.2 SG1.2 OPT1\n");
  int n = 0;
  const struct strata_action *a = strata_schedule_actions(s, 1, &n);
  cr_assert_eq(n, 13);
  cr_assert_eq(a[0].kind, STRATA_ACTION_RECV_ACT);
  cr_assert_eq(a[12].kind, STRATA_ACTION_OPTIMIZER);
  cr_assert_eq(a[12].microbatch, -1);
  cr_assert_null(strata_schedule_actions(s, 2, &n));
  cr_assert_eq(n, 0);
  strata_schedule_free(s);
}

Test(schedule, zb_h1_p2_m2) {
  strata_schedule_t s = gen(STRATA_SCHEDULE_ZB_H1, 2, 2, 0);
  expect_text(s, "dev 0: F0.0 SA0.0 F0.1 SA0.1 RG0.0 BI0.0 W0.0 RG0.1 BI0.1 W0.1 OPT0\n"
                 "dev 1: RA1.0 F1.0 BI1.0 SG1.0 W1.0 RA1.1 F1.1 BI1.1 SG1.1 W1.1 OPT1\n");
  strata_schedule_free(s);
}

/* p = 2, v = 2: device 0 holds stages 0 and 2, device 1 stages 1 and 3. Device 0
** warms up with min(2 + 2, 4) forwards (all of them); device 1 with 2. */
Test(schedule, interleaved_p2_m2_v2) {
  strata_schedule_t s = gen(STRATA_SCHEDULE_INTERLEAVED, 2, 2, 2);
  expect_text(s, "dev 0: F0.0 SA0.0 F0.1 SA0.1 RA2.0 F2.0 SA2.0 RA2.1 F2.1 SA2.1 "
                 "RG2.0 B2.0 SG2.0 RG2.1 B2.1 SG2.1 RG0.0 B0.0 RG0.1 B0.1 OPT0 OPT2\n"
                 "dev 1: RA1.0 F1.0 SA1.0 RA1.1 F1.1 SA1.1 RA3.0 F3.0 B3.0 SG3.0 RA3.1 F3.1 B3.1 SG3.1 "
                 "RG1.0 B1.0 SG1.0 RG1.1 B1.1 SG1.1 OPT1 OPT3\n");
  strata_schedule_free(s);
}

/* One device, two virtual stages: the stages pass data without transfers. */
Test(schedule, interleaved_one_device) {
  strata_schedule_t s = gen(STRATA_SCHEDULE_INTERLEAVED, 1, 2, 2);
  expect_text(s, "dev 0: F0.0 F1.0 B1.0 F0.1 B0.0 F1.1 B1.1 B0.1 OPT0 OPT1\n");
  OK(strata_schedule_validate(s));
  strata_schedule_free(s);
}

/* ---------------------------------------------------------------- bubbles */

Test(schedule, bubble_gpipe_and_1f1b_exact) {
  for (int p = 1; p <= MAX_P; p++)
    for (int m = 1; m <= MAX_M; m++) {
      double want = (double)(p - 1) / (m + p - 1);
      double g = bubble_gen(STRATA_SCHEDULE_GPIPE, p, m, 0), o = bubble_gen(STRATA_SCHEDULE_1F1B, p, m, 0);
      cr_assert(fabs(g - want) < 1e-12, "gpipe p=%d m=%d: %.15f, want %.15f", p, m, g, want);
      cr_assert(fabs(o - want) < 1e-12, "1f1b p=%d m=%d: %.15f, want %.15f", p, m, o, want);
    }
}

Test(schedule, bubble_zb_h1_below_1f1b) {
  for (int p = 2; p <= MAX_P; p++)
    for (int m = p; m <= MAX_M; m++) {
      double z = bubble_gen(STRATA_SCHEDULE_ZB_H1, p, m, 0), o = bubble_gen(STRATA_SCHEDULE_1F1B, p, m, 0);
      cr_assert(z < o, "zb-h1 p=%d m=%d: %f, 1f1b %f", p, m, z, o);
      /* the span is 3m + 2(p - 1) with F = BI = W = 1 */
      double want = 1.0 - 3.0 * m / (3.0 * m + 2.0 * (p - 1));
      cr_assert(fabs(z - want) < 1e-12, "zb-h1 p=%d m=%d: %.15f, want %.15f", p, m, z, want);
    }
}

Test(schedule, bubble_interleaved_below_1f1b) {
  for (int p = 2; p <= MAX_P; p++)
    for (int m = 2 * p; m <= MAX_M; m += p) {
      double i = bubble_gen(STRATA_SCHEDULE_INTERLEAVED, p, m, 2), o = bubble_gen(STRATA_SCHEDULE_1F1B, p, m, 0);
      cr_assert(i < o, "interleaved p=%d m=%d: %f, 1f1b %f", p, m, i, o);
    }
  /* Megatron's (p - 1) / (v m + p - 1) for p = 4, m = 8, v = 2 */
  double i = bubble_gen(STRATA_SCHEDULE_INTERLEAVED, 4, 8, 2);
  cr_assert(fabs(i - 3.0 / 19.0) < 1e-12, "interleaved p=4 m=8 v=2: %.15f", i);
}

/* ---------------------------------------------------------------- activations in flight */

Test(schedule, peak_inflight) {
  for (int p = 1; p <= MAX_P; p++)
    for (int m = 1; m <= MAX_M; m++) {
      strata_schedule_t g = gen(STRATA_SCHEDULE_GPIPE, p, m, 0);
      strata_schedule_t o = gen(STRATA_SCHEDULE_1F1B, p, m, 0);
      strata_schedule_t z = gen(STRATA_SCHEDULE_ZB_H1, p, m, 0);
      cr_assert_eq(peak_of(g, 0), m, "gpipe p=%d m=%d", p, m);
      cr_assert_eq(peak_of(o, 0), p < m ? p : m, "1f1b p=%d m=%d", p, m);
      for (int st = 0; st < p; st++) {
        int po = peak_of(o, st), pz = peak_of(z, st);
        cr_assert_leq(po, p - st, "1f1b p=%d m=%d stage %d: %d", p, m, st, po);
        cr_assert_leq(pz, po, "zb-h1 p=%d m=%d stage %d: %d > 1f1b %d", p, m, st, pz, po);
      }
      strata_schedule_free(g);
      strata_schedule_free(o);
      strata_schedule_free(z);
    }
}

/* ---------------------------------------------------------------- broken lists */

/* A mutable copy of a schedule's lists, room for a few more actions per device. */
struct lists {
  int p, stages, m;
  int stage_device[64];
  int counts[MAX_P];
  struct strata_action *list[MAX_P];
};

static void lists_from(struct lists *l, strata_schedule_t s) {
  l->p = strata_schedule_devices(s);
  l->stages = strata_schedule_stages(s);
  l->m = strata_schedule_microbatches(s);
  cr_assert(l->p <= MAX_P && l->stages <= 64);
  for (int st = 0; st < l->stages; st++)
    l->stage_device[st] = strata_schedule_stage_device(s, st);
  for (int d = 0; d < l->p; d++) {
    const struct strata_action *a = strata_schedule_actions(s, d, &l->counts[d]);
    l->list[d] = calloc((size_t)l->counts[d] + 4, sizeof *a);
    cr_assert_not_null(l->list[d]);
    memcpy(l->list[d], a, (size_t)l->counts[d] * sizeof *a);
  }
}

static void lists_free(struct lists *l) {
  for (int d = 0; d < l->p; d++)
    free(l->list[d]);
}

/* Position of (kind, stage, mb) in device d's list; fails the test when absent. */
static int lists_find(struct lists *l, int d, int kind, int stage, int mb) {
  for (int i = 0; i < l->counts[d]; i++) {
    const struct strata_action *a = &l->list[d][i];
    if (a->kind == kind && a->stage == stage && a->microbatch == mb)
      return i;
  }
  cr_assert_fail("%s%d.%d not on dev %d", strata_action_label(kind), stage, mb, d);
  return -1;
}

static void lists_remove(struct lists *l, int d, int i) {
  memmove(&l->list[d][i], &l->list[d][i + 1], (size_t)(l->counts[d] - i - 1) * sizeof l->list[d][0]);
  l->counts[d]--;
}

static void lists_insert(struct lists *l, int d, int i, struct strata_action a) {
  memmove(&l->list[d][i + 1], &l->list[d][i], (size_t)(l->counts[d] - i) * sizeof l->list[d][0]);
  l->list[d][i] = a;
  l->counts[d]++;
}

/* Build from the lists and expect the validator to refuse them with a message holding every `want`. */
static void expect_rejected(struct lists *l, const char *const *want, int nwant) {
  strata_schedule_t s = NULL;
  OK(strata_schedule_from_lists(l->p, l->stages, l->m, l->stage_device, (const struct strata_action *const *)l->list,
                                l->counts, &s));
  cr_assert_eq(strata_schedule_kind(s), 0);
  int rc = strata_schedule_validate(s);
  const char *msg = strata_last_error();
  cr_assert_eq(rc, STRATA_ERR_INVALID, "validate -> %s", strata_err_name(rc));
  for (int j = 0; j < nwant; j++)
    cr_assert_not_null(strstr(msg, want[j]), "message '%s' lacks '%s'", msg, want[j]);
  double b;
  cr_assert_eq(strata_schedule_bubble(s, &b), STRATA_ERR_INVALID);
  strata_schedule_free(s);
  lists_free(l);
}

#define REJECTED(l, ...)                                                                                               \
  do {                                                                                                                 \
    const char *const want_[] = {__VA_ARGS__};                                                                         \
    expect_rejected((l), want_, (int)(sizeof want_ / sizeof want_[0]));                                              \
  } while (0)

static struct strata_action act(int kind, int stage, int mb) {
  return (struct strata_action){.kind = kind, .stage = stage, .microbatch = mb};
}

/* 1F1B over 3 devices and 4 micro-batches, as mutable lists. */
static void base(struct lists *l) {
  strata_schedule_t s = gen(STRATA_SCHEDULE_1F1B, 3, 4, 0);
  lists_from(l, s);
  strata_schedule_free(s);
}

Test(schedule, copy_of_valid_lists_validates) {
  struct lists l;
  base(&l);
  strata_schedule_t s = NULL;
  OK(strata_schedule_from_lists(l.p, l.stages, l.m, l.stage_device, (const struct strata_action *const *)l.list, l.counts,
                                &s));
  OK(strata_schedule_validate(s));
  double b;
  OK(strata_schedule_bubble(s, &b));
  cr_assert(fabs(b - 2.0 / 6.0) < 1e-12);
  strata_schedule_free(s);
  lists_free(&l);
}

Test(schedule, rejects_missing_send) {
  struct lists l;
  base(&l);
  lists_remove(&l, 0, lists_find(&l, 0, STRATA_ACTION_SEND_ACT, 0, 1));
  REJECTED(&l, "SA0.1", "dev 0");
}

Test(schedule, rejects_missing_receive) {
  struct lists l;
  base(&l);
  lists_remove(&l, 1, lists_find(&l, 1, STRATA_ACTION_RECV_GRAD, 1, 2));
  REJECTED(&l, "RG1.2", "dev 1");
}

Test(schedule, rejects_duplicated_forward) {
  struct lists l;
  base(&l);
  int i = lists_find(&l, 1, STRATA_ACTION_FORWARD, 1, 2);
  lists_insert(&l, 1, i + 1, act(STRATA_ACTION_FORWARD, 1, 2));
  REJECTED(&l, "duplicate", "F1.2", "dev 1");
}

Test(schedule, rejects_backward_before_forward) {
  struct lists l;
  base(&l);
  /* the last stage: RA2.0 F2.0 B2.0 SG2.0 ... — swap F2.0 and B2.0 */
  int f = lists_find(&l, 2, STRATA_ACTION_FORWARD, 2, 0), b = lists_find(&l, 2, STRATA_ACTION_BACKWARD, 2, 0);
  cr_assert_eq(b, f + 1);
  l.list[2][f] = act(STRATA_ACTION_BACKWARD, 2, 0);
  l.list[2][b] = act(STRATA_ACTION_FORWARD, 2, 0);
  REJECTED(&l, "dev 2", "B2.0", "F2.0");
}

Test(schedule, rejects_action_on_wrong_device) {
  struct lists l;
  base(&l);
  /* move F1.3 (and its transfers stay) from dev 1 to the end of dev 0 */
  lists_remove(&l, 1, lists_find(&l, 1, STRATA_ACTION_FORWARD, 1, 3));
  lists_insert(&l, 0, l.counts[0], act(STRATA_ACTION_FORWARD, 1, 3));
  REJECTED(&l, "dev 0", "F1.3", "stage 1 is on dev 1");
}

Test(schedule, rejects_send_between_stages_on_one_device) {
  struct lists l;
  strata_schedule_t s = gen(STRATA_SCHEDULE_INTERLEAVED, 1, 2, 2);
  lists_from(&l, s);
  strata_schedule_free(s);
  int i = lists_find(&l, 0, STRATA_ACTION_FORWARD, 0, 0);
  lists_insert(&l, 0, i + 1, act(STRATA_ACTION_SEND_ACT, 0, 0));
  REJECTED(&l, "dev 0 #1 SA0.0", "no send needed");
}

Test(schedule, rejects_missing_optimizer) {
  struct lists l;
  base(&l);
  lists_remove(&l, 2, lists_find(&l, 2, STRATA_ACTION_OPTIMIZER, 2, -1));
  REJECTED(&l, "missing OPT2", "dev 2");
}

Test(schedule, rejects_optimizer_before_backward) {
  struct lists l;
  base(&l);
  int o = lists_find(&l, 1, STRATA_ACTION_OPTIMIZER, 1, -1);
  lists_remove(&l, 1, o);
  lists_insert(&l, 1, 0, act(STRATA_ACTION_OPTIMIZER, 1, -1));
  REJECTED(&l, "dev 1 #0 OPT1", "B1.");
}

Test(schedule, rejects_missing_weight_gradient) {
  struct lists l;
  strata_schedule_t s = gen(STRATA_SCHEDULE_ZB_H1, 2, 2, 0);
  lists_from(&l, s);
  strata_schedule_free(s);
  lists_remove(&l, 1, lists_find(&l, 1, STRATA_ACTION_BACKWARD_WEIGHT, 1, 1));
  REJECTED(&l, "W1.1", "dev 1");
}

/* dev 0 receives stage 0's output gradient before sending the activation that
** dev 1 needs to produce it: each waits for the other. */
Test(schedule, rejects_cycle_as_deadlock) {
  struct lists l;
  strata_schedule_t s = gen(STRATA_SCHEDULE_1F1B, 2, 1, 0);
  lists_from(&l, s);
  strata_schedule_free(s);
  /* dev 0: F0.0 SA0.0 RG0.0 B0.0 OPT0 -> RG0.0 F0.0 SA0.0 B0.0 OPT0 */
  int rg = lists_find(&l, 0, STRATA_ACTION_RECV_GRAD, 0, 0);
  cr_assert_eq(rg, 2);
  lists_remove(&l, 0, rg);
  lists_insert(&l, 0, 0, act(STRATA_ACTION_RECV_GRAD, 0, 0));
  REJECTED(&l, "deadlock", "dev 0 at #0 RG0.0 waits for SG1.0 on dev 1", "dev 1 at #0 RA1.0 waits for SA0.0 on dev 0");
}

/* A longer cycle over three devices in a bigger schedule. */
Test(schedule, rejects_cycle_in_1f1b) {
  struct lists l;
  base(&l);
  /* dev 0 waits for the gradient of micro-batch 0 before its first forward */
  int rg = lists_find(&l, 0, STRATA_ACTION_RECV_GRAD, 0, 0);
  lists_remove(&l, 0, rg);
  lists_insert(&l, 0, 0, act(STRATA_ACTION_RECV_GRAD, 0, 0));
  REJECTED(&l, "deadlock", "dev 0 at #0 RG0.0 waits for SG1.0 on dev 1", "dev 1", "dev 2");
}

/* ---------------------------------------------------------------- arguments, names, text */

Test(schedule, bad_arguments) {
  strata_schedule_t s = (strata_schedule_t)1;
  cr_assert_eq(strata_schedule_generate(STRATA_SCHEDULE_1F1B, 0, 4, 0, &s), STRATA_ERR_INVALID);
  cr_assert_null(s);
  cr_assert_eq(strata_schedule_generate(STRATA_SCHEDULE_GPIPE, 2, 0, 0, &s), STRATA_ERR_INVALID);
  cr_assert_eq(strata_schedule_generate(STRATA_SCHEDULE_ZB_H1, -1, 2, 0, &s), STRATA_ERR_INVALID);
  cr_assert_eq(strata_schedule_generate(STRATA_SCHEDULE_INTERLEAVED, 4, 6, 2, &s), STRATA_ERR_INVALID);
  cr_assert_not_null(strstr(strata_last_error(), "multiple"));
  cr_assert_eq(strata_schedule_generate(STRATA_SCHEDULE_INTERLEAVED, 4, 8, 1, &s), STRATA_ERR_INVALID);
  cr_assert_eq(strata_schedule_generate(STRATA_SCHEDULE_INTERLEAVED, 4, 8, 0, &s), STRATA_ERR_INVALID);
  cr_assert_eq(strata_schedule_generate(99, 4, 8, 0, &s), STRATA_ERR_INVALID);
  cr_assert_eq(strata_schedule_generate(0, 4, 8, 0, &s), STRATA_ERR_INVALID);
  cr_assert_eq(strata_schedule_generate(STRATA_SCHEDULE_1F1B, 4, 8, 0, NULL), STRATA_ERR_INVALID);
  cr_assert_eq(strata_schedule_generate(STRATA_SCHEDULE_1F1B, 1 << 20, 1 << 20, 0, &s), STRATA_ERR_RANGE);
  cr_assert_null(s);

  cr_assert_eq(strata_schedule_validate(NULL), STRATA_ERR_INVALID);
  double b;
  cr_assert_eq(strata_schedule_bubble(NULL, &b), STRATA_ERR_INVALID);
  int peak;
  cr_assert_eq(strata_schedule_peak_inflight(NULL, 0, &peak), STRATA_ERR_INVALID);
  char *text;
  cr_assert_eq(strata_schedule_to_text(NULL, &text), STRATA_ERR_INVALID);
  strata_schedule_free(NULL);

  s = gen(STRATA_SCHEDULE_GPIPE, 2, 2, 0);
  cr_assert_eq(strata_schedule_peak_inflight(s, 2, &peak), STRATA_ERR_RANGE);
  cr_assert_eq(strata_schedule_peak_inflight(s, -1, &peak), STRATA_ERR_RANGE);
  cr_assert_eq(strata_schedule_stage_device(s, 2), -1);
  strata_schedule_free(s);
}

Test(schedule, from_lists_shape_errors) {
  const struct strata_action d0[] = {{STRATA_ACTION_FORWARD, 0, 0}, {STRATA_ACTION_SEND_ACT, 0, 0}};
  const struct strata_action d1[] = {{STRATA_ACTION_RECV_ACT, 1, 0}, {STRATA_ACTION_FORWARD, 1, 0}};
  const struct strata_action *lists[] = {d0, d1};
  int counts[] = {2, 2}, stage_device[] = {0, 1};
  strata_schedule_t s = NULL;
  OK(strata_schedule_from_lists(2, 2, 1, stage_device, lists, counts, &s));
  /* the copy does not alias the caller's arrays */
  int n;
  cr_assert_neq(strata_schedule_actions(s, 0, &n), d0);
  cr_assert_eq(n, 2);
  strata_schedule_free(s);

  int bad_device[] = {0, 2};
  cr_assert_eq(strata_schedule_from_lists(2, 2, 1, bad_device, lists, counts, &s), STRATA_ERR_INVALID);
  cr_assert_null(s);
  cr_assert_not_null(strstr(strata_last_error(), "stage 1 on dev 2"));

  const struct strata_action bad_stage[] = {{STRATA_ACTION_FORWARD, 2, 0}};
  const struct strata_action *l2[] = {bad_stage, d1};
  int c2[] = {1, 2};
  cr_assert_eq(strata_schedule_from_lists(2, 2, 1, stage_device, l2, c2, &s), STRATA_ERR_INVALID);
  cr_assert_not_null(strstr(strata_last_error(), "stage 2 out of range"));

  const struct strata_action bad_mb[] = {{STRATA_ACTION_FORWARD, 0, 1}};
  const struct strata_action *l3[] = {bad_mb, d1};
  cr_assert_eq(strata_schedule_from_lists(2, 2, 1, stage_device, l3, c2, &s), STRATA_ERR_INVALID);
  cr_assert_not_null(strstr(strata_last_error(), "micro-batch 1 out of range"));

  const struct strata_action bad_opt[] = {{STRATA_ACTION_OPTIMIZER, 0, 0}};
  const struct strata_action *l4[] = {bad_opt, d1};
  cr_assert_eq(strata_schedule_from_lists(2, 2, 1, stage_device, l4, c2, &s), STRATA_ERR_INVALID);

  const struct strata_action bad_kind[] = {{STRATA_ACTION_KIND_COUNT, 0, 0}};
  const struct strata_action *l5[] = {bad_kind, d1};
  cr_assert_eq(strata_schedule_from_lists(2, 2, 1, stage_device, l5, c2, &s), STRATA_ERR_INVALID);

  cr_assert_eq(strata_schedule_from_lists(0, 2, 1, stage_device, lists, counts, &s), STRATA_ERR_INVALID);
  cr_assert_eq(strata_schedule_from_lists(2, 2, 0, stage_device, lists, counts, &s), STRATA_ERR_INVALID);
  cr_assert_eq(strata_schedule_from_lists(2, 2, 1, NULL, lists, counts, &s), STRATA_ERR_INVALID);
  int negative[] = {-1, 2};
  cr_assert_eq(strata_schedule_from_lists(2, 2, 1, stage_device, lists, negative, &s), STRATA_ERR_INVALID);
  cr_assert_null(s);
}

/* Shape-valid lists that are incomplete: the validator names what is missing. */
Test(schedule, validator_names_missing_pieces) {
  const struct strata_action d0[] = {{STRATA_ACTION_FORWARD, 0, 0}, {STRATA_ACTION_SEND_ACT, 0, 0}};
  const struct strata_action d1[] = {{STRATA_ACTION_RECV_ACT, 1, 0}, {STRATA_ACTION_FORWARD, 1, 0}};
  const struct strata_action *lists[] = {d0, d1};
  int counts[] = {2, 2}, stage_device[] = {0, 1};
  strata_schedule_t s = NULL;
  OK(strata_schedule_from_lists(2, 2, 1, stage_device, lists, counts, &s));
  cr_assert_eq(strata_schedule_validate(s), STRATA_ERR_INVALID);
  cr_assert_not_null(strstr(strata_last_error(), "missing backward of stage 0"), "%s", strata_last_error());
  strata_schedule_free(s);

  /* a send from the last stage */
  const struct strata_action e1[] = {{STRATA_ACTION_RECV_ACT, 1, 0}, {STRATA_ACTION_FORWARD, 1, 0},
                                     {STRATA_ACTION_SEND_ACT, 1, 0}};
  const struct strata_action *l2[] = {d0, e1};
  int c2[] = {2, 3};
  OK(strata_schedule_from_lists(2, 2, 1, stage_device, l2, c2, &s));
  cr_assert_eq(strata_schedule_validate(s), STRATA_ERR_INVALID);
  cr_assert_not_null(strstr(strata_last_error(), "dev 1 #2 SA1.0: stage 1 is the last stage"), "%s",
                     strata_last_error());
  strata_schedule_free(s);
}

Test(schedule, kind_names) {
  int kind = 0;
  OK(strata_schedule_kind_parse("gpipe", &kind));
  cr_assert_eq(kind, STRATA_SCHEDULE_GPIPE);
  OK(strata_schedule_kind_parse("1f1b", &kind));
  cr_assert_eq(kind, STRATA_SCHEDULE_1F1B);
  OK(strata_schedule_kind_parse("interleaved", &kind));
  cr_assert_eq(kind, STRATA_SCHEDULE_INTERLEAVED);
  OK(strata_schedule_kind_parse("zb", &kind));
  cr_assert_eq(kind, STRATA_SCHEDULE_ZB_H1);
  kind = 0;
  OK(strata_schedule_kind_parse("zb-h1", &kind));
  cr_assert_eq(kind, STRATA_SCHEDULE_ZB_H1);
  cr_assert_eq(strata_schedule_kind_parse("pipedream", &kind), STRATA_ERR_PARSE);
  cr_assert_eq(strata_schedule_kind_parse("", &kind), STRATA_ERR_PARSE);
  cr_assert_eq(strata_schedule_kind_parse(NULL, &kind), STRATA_ERR_INVALID);
  cr_assert_eq(kind, STRATA_SCHEDULE_ZB_H1);
  for (int k = STRATA_SCHEDULE_GPIPE; k <= STRATA_SCHEDULE_DUALPIPEV; k++) {
    int back = 0;
    OK(strata_schedule_kind_parse(strata_schedule_kind_name(k), &back));
    cr_assert_eq(back, k);
  }
  cr_assert_str_eq(strata_schedule_kind_name(STRATA_SCHEDULE_ZB_H1), "zb-h1");
  cr_assert_str_eq(strata_schedule_kind_name(0), "custom");
  cr_assert_str_eq(strata_schedule_kind_name(42), "?");
  cr_assert_str_eq(strata_action_label(STRATA_ACTION_BACKWARD_INPUT), "BI");
  cr_assert_str_eq(strata_action_label(STRATA_ACTION_OPTIMIZER), "OPT");
  cr_assert_str_eq(strata_action_label(-1), "?");
  cr_assert_str_eq(strata_action_label(STRATA_ACTION_KIND_COUNT), "?");
}

/* ---------------------------------------------------------------- data-parallel replicas */

/* Every replicated schedule validates; its unit-cost bubble is its pipeline's (collectives cost nothing there). */
Test(schedule, every_replicated_schedule_validates) {
  const int kinds[] = {STRATA_SCHEDULE_GPIPE, STRATA_SCHEDULE_1F1B, STRATA_SCHEDULE_ZB_H1, STRATA_SCHEDULE_INTERLEAVED};
  for (int k = 0; k < 4; k++)
    for (int p = 1; p <= 4; p++)
      for (int m = p; m <= 8; m += p)
        for (int dp = 1; dp <= 3; dp++)
          for (int zero = 0; zero <= (dp > 1); zero++) {
            int v = kinds[k] == STRATA_SCHEDULE_INTERLEAVED ? 2 : 0;
            strata_schedule_t s = NULL;
            OK(strata_schedule_generate_replicated(kinds[k], p, m, v, dp, zero, &s));
            int rc = strata_schedule_validate(s);
            cr_assert_eq(rc, STRATA_OK, "%s p=%d m=%d dp=%d zero=%d: %s", strata_schedule_kind_name(kinds[k]), p, m, dp,
                         zero, strata_last_error());
            cr_assert_eq(strata_schedule_replicas(s), dp);
            cr_assert_eq(strata_schedule_devices(s), p * dp);
            int stages = strata_schedule_stages(s);
            /* one gradient collective per stage, on its device, after its last backward work */
            for (int st = 0; st < stages && dp > 1; st++) {
              int d = strata_schedule_stage_device(s, st), n = 0, at = -1, last_bw = -1, opt = -1, pag = -1;
              const struct strata_action *a = strata_schedule_actions(s, d, &n);
              for (int i = 0; i < n; i++) {
                if (a[i].stage != st)
                  continue;
                if (a[i].kind == (zero ? STRATA_ACTION_GRAD_SCATTER : STRATA_ACTION_GRAD_REDUCE))
                  at = i;
                if (a[i].kind == STRATA_ACTION_BACKWARD || a[i].kind == STRATA_ACTION_BACKWARD_WEIGHT)
                  last_bw = i;
                if (a[i].kind == STRATA_ACTION_OPTIMIZER)
                  opt = i;
                if (a[i].kind == STRATA_ACTION_PARAM_GATHER)
                  pag = i;
              }
              cr_assert(at > last_bw && at < opt, "stage %d: collective at %d, last backward %d, optimizer %d", st, at,
                        last_bw, opt);
              int last_opt = -1;
              for (int i = 0; i < n; i++)
                last_opt = a[i].kind == STRATA_ACTION_OPTIMIZER ? i : last_opt;
              cr_assert(zero ? pag > last_opt : pag == -1, "stage %d: PAG at %d, the device's last OPT at %d", st,
                        pag, last_opt);
            }
            strata_schedule_t b = gen(kinds[k], p, m, v);
            cr_assert(fabs(bubble_of(s) - bubble_of(b)) < 1e-12, "%s p=%d m=%d dp=%d", strata_schedule_kind_name(kinds[k]),
                      p, m, dp);
            strata_schedule_free(b);
            strata_schedule_free(s);
          }
}

/* Replicated lists as mutable lists (dp = 2 of 1F1B over 2 devices, 4 micro-batches). */
static void replicated(struct lists *l, int kind, int zero) {
  strata_schedule_t s = NULL;
  OK(strata_schedule_generate_replicated(kind, 2, 4, kind == STRATA_SCHEDULE_INTERLEAVED ? 2 : 0, 2, zero, &s));
  lists_from(l, s);
  strata_schedule_free(s);
}

/* Build dp x tp chains from the lists and expect the validator to refuse them with `want` in the message. */
static void expect_rejected_hybrid(struct lists *l, int dp, int tp, const char *want) {
  strata_schedule_t s = NULL;
  OK(strata_schedule_from_hybrid_lists(dp, tp, l->p, l->stages, l->m, l->stage_device,
                                       (const struct strata_action *const *)l->list, l->counts, &s));
  int rc = strata_schedule_validate(s);
  cr_assert_eq(rc, STRATA_ERR_INVALID, "validate -> %s", strata_err_name(rc));
  cr_assert_not_null(strstr(strata_last_error(), want), "message '%s' lacks '%s'", strata_last_error(), want);
  strata_schedule_free(s);
  lists_free(l);
}

static void expect_rejected_replicas(struct lists *l, const char *want) { expect_rejected_hybrid(l, 2, 1, want); }

Test(schedule, replicated_copy_validates_and_missing_collective_is_rejected) {
  struct lists l;
  replicated(&l, STRATA_SCHEDULE_1F1B, 0);
  strata_schedule_t s = NULL;
  OK(strata_schedule_from_replica_lists(2, l.p, l.stages, l.m, l.stage_device,
                                        (const struct strata_action *const *)l.list, l.counts, &s));
  OK(strata_schedule_validate(s));
  strata_schedule_free(s);
  /* replica 1's stage 1 (global stage 3, on dev 3) never joins its gradients */
  lists_remove(&l, 3, lists_find(&l, 3, STRATA_ACTION_GRAD_REDUCE, 3, -1));
  expect_rejected_replicas(&l, "missing GR3");
}

Test(schedule, replicated_rejects_collective_before_backward_and_optimizer_before_collective) {
  struct lists l;
  replicated(&l, STRATA_SCHEDULE_1F1B, 0);
  int at = lists_find(&l, 2, STRATA_ACTION_GRAD_REDUCE, 2, -1);
  lists_remove(&l, 2, at);
  lists_insert(&l, 2, 0, act(STRATA_ACTION_GRAD_REDUCE, 2, -1));
  expect_rejected_replicas(&l, "GR2");
  replicated(&l, STRATA_SCHEDULE_1F1B, 0);
  int opt = lists_find(&l, 1, STRATA_ACTION_OPTIMIZER, 1, -1);
  at = lists_find(&l, 1, STRATA_ACTION_GRAD_REDUCE, 1, -1);
  l.list[1][opt] = act(STRATA_ACTION_GRAD_REDUCE, 1, -1);
  l.list[1][at] = act(STRATA_ACTION_OPTIMIZER, 1, -1);
  expect_rejected_replicas(&l, "that joins its gradients");
}

Test(schedule, replicated_rejects_mixed_zero_and_missing_gather) {
  struct lists l;
  replicated(&l, STRATA_SCHEDULE_1F1B, 1);
  lists_remove(&l, 2, lists_find(&l, 2, STRATA_ACTION_PARAM_GATHER, 2, -1));
  expect_rejected_replicas(&l, "missing PAG2");
  replicated(&l, STRATA_SCHEDULE_1F1B, 0);
  int at = lists_find(&l, 3, STRATA_ACTION_GRAD_REDUCE, 3, -1);
  l.list[3][at] = act(STRATA_ACTION_GRAD_SCATTER, 3, -1);
  lists_insert(&l, 3, lists_find(&l, 3, STRATA_ACTION_OPTIMIZER, 3, -1) + 1, act(STRATA_ACTION_PARAM_GATHER, 3, -1));
  expect_rejected_replicas(&l, "replica 0 with GR");
}

/* A compute action that reads a stage's weights. */
static int reads_weights(int kind) {
  return kind == STRATA_ACTION_FORWARD || kind == STRATA_ACTION_BACKWARD || kind == STRATA_ACTION_BACKWARD_INPUT ||
         kind == STRATA_ACTION_BACKWARD_WEIGHT;
}

/* ZeRO-3 (zero 3): every schedule kind, dp 2 x pp 2 (x tp 2), with and without recomputation, validates, and each
** F, B, BI and W of every stage comes right after a PARAM_GATHER of its stage and micro-batch (a RECOMPUTE of it may
** stand between), with no PARAM_GATHER of the whole step (ZeRO-1's) and none elsewhere; ZeRO-1's schedules keep
** theirs. */
Test(schedule, zero3_gathers_before_every_pass) {
  const int kinds[] = {STRATA_SCHEDULE_GPIPE, STRATA_SCHEDULE_1F1B, STRATA_SCHEDULE_INTERLEAVED, STRATA_SCHEDULE_ZB_H1,
                       STRATA_SCHEDULE_ZBV, STRATA_SCHEDULE_DUALPIPEV};
  for (int k = 0; k < 6; k++)
    for (int tp = 1; tp <= 2; tp++)
      for (int rc = 0; rc <= 1; rc++) {
        const int split = strata_schedule_kind_split_backward(kinds[k]);
        if (rc && split)
          continue; /* (recomputation runs with a whole backward) */
        strata_schedule_t s = NULL, with = NULL;
        OK(strata_schedule_generate_hybrid(kinds[k], 2, 4, kinds[k] == STRATA_SCHEDULE_INTERLEAVED ? 2 : 0, 2, tp, 3,
                                           &s));
        if (rc) {
          OK(strata_schedule_with_recompute(s, &with));
          strata_schedule_free(s);
          s = with;
        }
        const int v = strata_schedule_validate(s);
        cr_assert_eq(v, STRATA_OK, "%s tp %d rc %d: %s", strata_schedule_kind_name(kinds[k]), tp, rc,
                     strata_last_error());
        int gathers = 0, passes = 0;
        for (int d = 0; d < strata_schedule_devices(s); d++) {
          int n = 0;
          const struct strata_action *a = strata_schedule_actions(s, d, &n);
          for (int i = 0; i < n; i++) {
            if (a[i].kind == STRATA_ACTION_PARAM_GATHER) {
              cr_assert_geq(a[i].microbatch, 0, "%s dev %d #%d: a gather of the whole step under ZeRO-3",
                            strata_schedule_kind_name(kinds[k]), d, i);
              gathers++;
            }
            if (!reads_weights(a[i].kind))
              continue;
            passes++;
            int j = i - 1;
            while (j >= 0 && a[j].kind == STRATA_ACTION_RECOMPUTE && a[j].stage == a[i].stage &&
                   a[j].microbatch == a[i].microbatch)
              j--;
            cr_assert(j >= 0 && a[j].kind == STRATA_ACTION_PARAM_GATHER && a[j].stage == a[i].stage &&
                      a[j].microbatch == a[i].microbatch, "%s tp %d rc %d dev %d #%d: no gather right before it",
                      strata_schedule_kind_name(kinds[k]), tp, rc, d, i);
          }
        }
        cr_assert_eq(gathers, passes, "%s: %d gathers for %d passes", strata_schedule_kind_name(kinds[k]), gathers,
                     passes);
        double bubble = 0, plain_bubble = 0;
        strata_schedule_t plain = NULL;
        OK(strata_schedule_generate_hybrid(kinds[k], 2, 4, kinds[k] == STRATA_SCHEDULE_INTERLEAVED ? 2 : 0, 2, tp, 2,
                                           &plain));
        OK(strata_schedule_bubble(s, &bubble));
        OK(strata_schedule_bubble(plain, &plain_bubble));
        cr_assert_float_eq(bubble, plain_bubble, 1e-12, "the gathers cost no device time at unit costs");
        strata_schedule_free(plain);
        strata_schedule_free(s);
      }
}

/* The validator refuses a ZeRO-3 forward or backward without its gather, a gather not before the pass it gathers
** for, and a gather of the whole step among the micro-batches' ones. */
Test(schedule, zero3_rejects_a_pass_without_its_gather) {
  struct lists l;
  replicated(&l, STRATA_SCHEDULE_1F1B, 3);
  /* dev 1 (stage 1 of replica 0): its F1.2's gather dropped */
  int f = lists_find(&l, 1, STRATA_ACTION_FORWARD, 1, 2);
  cr_assert(f > 0 && l.list[1][f - 1].kind == STRATA_ACTION_PARAM_GATHER);
  lists_remove(&l, 1, f - 1);
  expect_rejected_replicas(&l, "not right after a PAG1.2");
  /* dev 2's gather before B2.0 moved to the start of its list */
  replicated(&l, STRATA_SCHEDULE_1F1B, 3);
  int b = lists_find(&l, 2, STRATA_ACTION_BACKWARD, 2, 0);
  lists_remove(&l, 2, b - 1);
  lists_insert(&l, 2, 0, act(STRATA_ACTION_PARAM_GATHER, 2, 0));
  expect_rejected_replicas(&l, "PAG2.0");
  /* a gather of the whole step after dev 0's update */
  replicated(&l, STRATA_SCHEDULE_1F1B, 3);
  lists_insert(&l, 0, lists_find(&l, 0, STRATA_ACTION_OPTIMIZER, 0, -1) + 1, act(STRATA_ACTION_PARAM_GATHER, 0, -1));
  expect_rejected_replicas(&l, "a gather of the whole step");
}

/* Interleaving puts two stages on a device: replicas that reduce them in opposite orders deadlock. */
Test(schedule, replicated_rejects_collectives_in_opposite_orders) {
  struct lists l;
  replicated(&l, STRATA_SCHEDULE_INTERLEAVED, 0);
  /* replica 0's device 0 holds stages 0 and 2 and, backward running last chunk first, reduces 2 then 0 */
  int g2 = lists_find(&l, 0, STRATA_ACTION_GRAD_REDUCE, 2, -1), g0 = lists_find(&l, 0, STRATA_ACTION_GRAD_REDUCE, 0, -1);
  cr_assert(g2 < g0, "replica 0 reduces stage 2 before stage 0 (%d, %d)", g2, g0);
  /* replica 1's device 2 holds their copies, stages 4 and 6: make it reduce 4 first, then 6 */
  lists_remove(&l, 2, lists_find(&l, 2, STRATA_ACTION_GRAD_REDUCE, 6, -1));
  lists_insert(&l, 2, lists_find(&l, 2, STRATA_ACTION_GRAD_REDUCE, 4, -1) + 1, act(STRATA_ACTION_GRAD_REDUCE, 6, -1));
  expect_rejected_replicas(&l, "deadlock");
}

Test(schedule, collective_in_one_replica_schedule_is_rejected) {
  struct lists l;
  base(&l);
  lists_insert(&l, 0, lists_find(&l, 0, STRATA_ACTION_OPTIMIZER, 0, -1), act(STRATA_ACTION_GRAD_REDUCE, 0, -1));
  REJECTED(&l, "schedule of one replica");
}

/* ---------------------------------------------------------------- tensor-parallel slices */

/* Every dp x pp x tp schedule validates; each forward and backward has its join right after it on every slice;
** the unit-cost bubble is the pipeline's (joins cost nothing there). */
Test(schedule, every_hybrid_schedule_validates) {
  const int kinds[] = {STRATA_SCHEDULE_GPIPE, STRATA_SCHEDULE_1F1B, STRATA_SCHEDULE_ZB_H1, STRATA_SCHEDULE_INTERLEAVED};
  for (int k = 0; k < 4; k++)
    for (int p = 1; p <= 3; p++)
      for (int m = p; m <= 6; m += p)
        for (int dp = 1; dp <= 2; dp++)
          for (int tp = 1; tp <= 4; tp *= 2) {
            int v = kinds[k] == STRATA_SCHEDULE_INTERLEAVED ? 2 : 0;
            strata_schedule_t s = NULL;
            OK(strata_schedule_generate_hybrid(kinds[k], p, m, v, dp, tp, 0, &s));
            int rc = strata_schedule_validate(s);
            cr_assert_eq(rc, STRATA_OK, "%s p=%d m=%d dp=%d tp=%d: %s", strata_schedule_kind_name(kinds[k]), p, m, dp,
                         tp, strata_last_error());
            cr_assert_eq(strata_schedule_replicas(s), dp);
            cr_assert_eq(strata_schedule_tp(s), tp);
            cr_assert_eq(strata_schedule_devices(s), p * dp * tp);
            int joins = 0, work = 0;
            for (int d = 0; d < strata_schedule_devices(s); d++) {
              int n = 0;
              const struct strata_action *a = strata_schedule_actions(s, d, &n);
              for (int i = 0; i < n; i++) {
                int kd = a[i].kind;
                if (kd == STRATA_ACTION_FORWARD || kd == STRATA_ACTION_BACKWARD || kd == STRATA_ACTION_BACKWARD_INPUT) {
                  work++;
                  if (tp > 1) {
                    cr_assert_lt(i + 1, n);
                    cr_assert_eq(a[i + 1].kind, kd == STRATA_ACTION_FORWARD ? STRATA_ACTION_TP_JOIN_FORWARD
                                                                           : STRATA_ACTION_TP_JOIN_BACKWARD);
                    cr_assert(a[i + 1].stage == a[i].stage && a[i + 1].microbatch == a[i].microbatch);
                  }
                }
                joins += kd == STRATA_ACTION_TP_JOIN_FORWARD || kd == STRATA_ACTION_TP_JOIN_BACKWARD;
              }
            }
            cr_assert_eq(joins, tp > 1 ? work : 0, "%d joins for %d forwards and backwards", joins, work);
            strata_schedule_t b = gen(kinds[k], p, m, v);
            cr_assert(fabs(bubble_of(s) - bubble_of(b)) < 1e-12, "%s p=%d m=%d dp=%d tp=%d",
                      strata_schedule_kind_name(kinds[k]), p, m, dp, tp);
            strata_schedule_free(b);
            strata_schedule_free(s);
          }
}

/* dp 1 x pp 2 x tp 2 of 1F1B over 4 micro-batches as mutable lists: chains 0 (devices 0, 1) and 1 (devices 2, 3). */
static void sliced(struct lists *l) {
  strata_schedule_t s = NULL;
  OK(strata_schedule_generate_hybrid(STRATA_SCHEDULE_1F1B, 2, 4, 0, 1, 2, 0, &s));
  lists_from(l, s);
  strata_schedule_free(s);
}


Test(schedule, sliced_copy_validates_and_a_join_missing_on_one_slice_is_rejected) {
  struct lists l;
  sliced(&l);
  strata_schedule_t s = NULL;
  OK(strata_schedule_from_hybrid_lists(1, 2, l.p, l.stages, l.m, l.stage_device,
                                       (const struct strata_action *const *)l.list, l.counts, &s));
  OK(strata_schedule_validate(s));
  strata_schedule_free(s);
  /* slice 1's stage 1 (global stage 3, on dev 3) skips the join of micro-batch 2's forward */
  lists_remove(&l, 3, lists_find(&l, 3, STRATA_ACTION_TP_JOIN_FORWARD, 3, 2));
  expect_rejected_hybrid(&l, 1, 2, "missing TJF3.2");
  /* a join away from its forward */
  sliced(&l);
  int at = lists_find(&l, 1, STRATA_ACTION_TP_JOIN_BACKWARD, 1, 0);
  lists_remove(&l, 1, at);
  lists_insert(&l, 1, l.counts[1] - 1, act(STRATA_ACTION_TP_JOIN_BACKWARD, 1, 0));
  expect_rejected_hybrid(&l, 1, 2, "not right after");
  /* the two slices join their micro-batches in different orders: deadlock */
  sliced(&l);
  int f0 = lists_find(&l, 2, STRATA_ACTION_FORWARD, 2, 0), f1 = lists_find(&l, 2, STRATA_ACTION_FORWARD, 2, 1);
  for (int j = 0; j < 3; j++) { /* F, its TJF and its SA */
    l.list[2][f0 + j].microbatch = 1;
    l.list[2][f1 + j].microbatch = 0;
  }
  expect_rejected_hybrid(&l, 1, 2, "deadlock");
}

/* A join in a schedule without slices is refused. */
Test(schedule, join_without_slices_is_rejected) {
  struct lists l;
  strata_schedule_t s = NULL;
  OK(strata_schedule_generate(STRATA_SCHEDULE_1F1B, 2, 2, 0, &s));
  lists_from(&l, s);
  strata_schedule_free(s);
  lists_insert(&l, 0, lists_find(&l, 0, STRATA_ACTION_FORWARD, 0, 0) + 1, act(STRATA_ACTION_TP_JOIN_FORWARD, 0, 0));
  const char *want[] = {"tensor-parallel join in a schedule without slices"};
  expect_rejected(&l, want, 1);
}

/* A layout of 1,280 devices (dp 40 x pp 8 x tp 4, 16 micro-batches): generated, validated, and the bubble is the
** pipeline's — nothing in the schedule is sized for fewer. */
Test(schedule, a_thousand_device_hybrid_validates) {
  strata_schedule_t s = NULL;
  OK(strata_schedule_generate_hybrid(STRATA_SCHEDULE_1F1B, 8, 16, 0, 40, 4, 1, &s));
  cr_assert_eq(strata_schedule_devices(s), 1280);
  cr_assert_eq(strata_schedule_stages(s), 8 * 160);
  OK(strata_schedule_validate(s));
  double b = 0;
  OK(strata_schedule_bubble(s, &b));
  cr_assert_float_eq(b, 7.0 / 23.0, 1e-9, "1F1B p=8 m=16: (p-1)/(m+p-1), got %g", b);
  strata_schedule_free(s);
}

/* A tp degree per pipeline rank: every kind, 2 and 3 ranks, several degree lists, dp 1 and 2 (with and without ZeRO)
** — each validates, holds dp x sum(tp) devices, has the pipeline's bubble, and a stage of a narrower rank is held by
** no device and stood for by slice t % degree. */
Test(schedule, a_tp_degree_per_rank_validates) {
  const int kinds[] = {STRATA_SCHEDULE_GPIPE, STRATA_SCHEDULE_1F1B, STRATA_SCHEDULE_ZB_H1, STRATA_SCHEDULE_INTERLEAVED};
  const int degrees[][3] = {{2, 1, 0}, {1, 2, 0}, {4, 2, 0}, {2, 1, 2}, {1, 2, 4}, {3, 1, 2}};
  for (int k = 0; k < 4; k++)
    for (int g = 0; g < 6; g++)
      for (int dp = 1; dp <= 2; dp++)
        for (int zero = 0; zero <= (dp > 1); zero++) {
          const int *tp = degrees[g], p = tp[2] ? 3 : 2, m = 2 * p;
          const int v = kinds[k] == STRATA_SCHEDULE_INTERLEAVED ? 2 : 0, sum = tp[0] + tp[1] + (p == 3 ? tp[2] : 0);
          int top = 0;
          for (int d = 0; d < p; d++)
            top = tp[d] > top ? tp[d] : top;
          strata_schedule_t s = NULL;
          OK(strata_schedule_generate_hybrid_ranks(kinds[k], p, m, v, dp, tp, zero, &s));
          int rc = strata_schedule_validate(s);
          cr_assert_eq(rc, STRATA_OK, "%s tp %d,%d,%d dp %d zero %d: %s", strata_schedule_kind_name(kinds[k]), tp[0],
                       tp[1], tp[2], dp, zero, strata_last_error());
          cr_assert_eq(strata_schedule_devices(s), dp * sum);
          cr_assert_eq(strata_schedule_tp(s), top);
          cr_assert_eq(strata_schedule_replicas(s), dp);
          const int chain = strata_schedule_stages(s) / (dp * top);
          for (int st = 0; st < strata_schedule_stages(s); st++) {
            int c = st / chain, j = st % chain, deg = tp[j % p];
            cr_assert_eq(strata_schedule_stage_tp(s, st), deg);
            cr_assert_eq(strata_schedule_stage_held(s, st), c % top < deg);
            cr_assert_eq(strata_schedule_stage_owner(s, st), (c / top * top + c % top % deg) * chain + j);
            int n = 0, d = strata_schedule_stage_device(s, st), forwards = 0;
            const struct strata_action *a = strata_schedule_actions(s, d, &n);
            for (int i = 0; i < n; i++)
              forwards += a[i].stage == st && a[i].kind == STRATA_ACTION_FORWARD;
            cr_assert_eq(forwards, c % top < deg ? m : 0, "stage %d: %d forwards on dev %d", st, forwards, d);
          }
          strata_schedule_t b = gen(kinds[k], p, m, v);
          cr_assert(fabs(bubble_of(s) - bubble_of(b)) < 1e-12, "%s tp %d,%d,%d dp %d", strata_schedule_kind_name(kinds[k]),
                    tp[0], tp[1], tp[2], dp);
          strata_schedule_free(b);
          strata_schedule_free(s);
        }
}

/* The lists in a schedule shaped like `like`: refused with `want` in the message; frees the lists. */
static void expect_rejected_like(strata_schedule_t like, struct lists *l, const char *want) {
  strata_schedule_t t = NULL;
  OK(strata_schedule_with_lists(like, (const struct strata_action *const *)l->list, l->counts, &t));
  cr_assert_eq(strata_schedule_validate(t), STRATA_ERR_INVALID);
  cr_assert_not_null(strstr(strata_last_error(), want), "'%s' lacks '%s'", strata_last_error(), want);
  strata_schedule_free(t);
  lists_free(l);
}

/* pp 2 with tp 2,1 over 2 micro-batches of 1F1B, by hand: devices 0 (slice 0 of rank 0), 1 (rank 1), 2 (slice 1 of
** rank 0). Rank 1's one stage takes slice 0's activations only and sends its input gradient to both slices; slice 1
** sends nothing forward. */
Test(schedule, tp_2_1_lists_by_hand) {
  strata_schedule_t s = NULL;
  OK(strata_schedule_generate_hybrid_ranks(STRATA_SCHEDULE_1F1B, 2, 2, 0, 1, (const int[]){2, 1}, 0, &s));
  char *text = NULL;
  OK(strata_schedule_to_text(s, &text));
  cr_assert_str_eq(text, "dev 0: F0.0 TJF0.0 SA0.0 F0.1 TJF0.1 SA0.1 RG0.0 B0.0 TJB0.0 RG0.1 B0.1 TJB0.1 OPT0\n"
                         "dev 1: RA1.0 F1.0 B1.0 SG1.0 RA1.1 F1.1 B1.1 SG1.1 OPT1\n"
                         "dev 2: F2.0 TJF2.0 F2.1 TJF2.1 RG2.0 B2.0 TJB2.0 RG2.1 B2.1 TJB2.1 OPT2\n");
  free(text);
  cr_assert_eq(strata_schedule_stage_device(s, 3), 1, "stage 3 (slice 1 of rank 1) stands for stage 1");
  struct lists l;
  lists_from(&l, s);
  strata_schedule_t t = NULL;
  OK(strata_schedule_with_lists(s, (const struct strata_action *const *)l.list, l.counts, &t));
  OK(strata_schedule_validate(t));
  strata_schedule_free(t);
  /* slice 1 never receives the gradient of micro-batch 1 */
  lists_remove(&l, 2, lists_find(&l, 2, STRATA_ACTION_RECV_GRAD, 2, 1));
  expect_rejected_like(s, &l, "missing RG2.1");
  /* slice 1 sends its activations to a stage no device holds */
  lists_from(&l, s);
  lists_insert(&l, 2, lists_find(&l, 2, STRATA_ACTION_FORWARD, 2, 0) + 2, act(STRATA_ACTION_SEND_ACT, 2, 0));
  expect_rejected_like(s, &l, "no device holds stage 3");
  /* a join on the stage that is not cut */
  lists_from(&l, s);
  lists_insert(&l, 1, lists_find(&l, 1, STRATA_ACTION_FORWARD, 1, 0) + 1, act(STRATA_ACTION_TP_JOIN_FORWARD, 1, 0));
  expect_rejected_like(s, &l, "not cut");
  strata_schedule_free(s);
}

/* ---------------------------------------------------------------- ZB-V: two chunks per device in a V */

/* The activations a device holds at once over all its stages (forwarded, W not yet run), from its list. */
static int device_peak_of(strata_schedule_t s, int d) {
  int n = 0, now = 0, top = 0;
  const struct strata_action *a = strata_schedule_actions(s, d, &n);
  for (int i = 0; i < n; i++)
    if (a[i].kind == STRATA_ACTION_FORWARD && ++now > top)
      top = now;
    else if (a[i].kind == STRATA_ACTION_BACKWARD || a[i].kind == STRATA_ACTION_BACKWARD_WEIGHT)
      now--;
  return top;
}

/*
** Device 0 of a V (stages 0 and 2p - 1, the two end chunks): the most micro-batches of stage 0 in flight at once
** (*first), and the most of stage 0 while one of stage 2p - 1 is in flight too (*with_last).
*/
static void v_device0_of(strata_schedule_t s, int *first, int *with_last) {
  int n = 0, c[2] = {0, 0};
  const struct strata_action *a = strata_schedule_actions(s, 0, &n);
  *first = *with_last = 0;
  for (int i = 0; i < n; i++) {
    const int k = a[i].stage != 0;
    if (a[i].kind == STRATA_ACTION_FORWARD)
      c[k]++;
    else if (a[i].kind == STRATA_ACTION_BACKWARD_WEIGHT)
      c[k]--;
    *first = c[0] > *first ? c[0] : *first;
    if (c[1] > 0 && c[0] > *with_last)
      *with_last = c[0];
  }
}

/*
** What the V schedules hold (strata__gen_zbv, strata__gen_dualpipev): every device at most 2p chunk micro-batches,
** 1F1B's p full stages, one W pending at a time; from p = 2 on device 0, with both end chunks, at most 2p - 1, 2p - 1
** of the first chunk and 2p - 2 while one of the last is in flight (with the cut that balances time no more than
** 1F1B's device 0: test-memory). (The paper's lists hold 2p there: 2p - 1 of the first beside one of the last.)
*/
static void expect_v_memory(strata_schedule_t s, const char *name, int p, int m) {
  for (int d = 0; d < p; d++) {
    int pend = -1;
    OK(strata_schedule_device_pending(s, d, &pend));
    cr_assert_eq(pend, 1, "%s p=%d m=%d dev %d: %d Ws pending at once", name, p, m, d, pend);
    cr_assert_leq(device_peak_of(s, d), 2 * p, "%s p=%d m=%d dev %d", name, p, m, d);
  }
  if (p == 1) /* both chunks on one device: the whole model, as 1F1B's one stage */
    return;
  int first = 0, with_last = 0;
  v_device0_of(s, &first, &with_last);
  cr_assert_leq(device_peak_of(s, 0), 2 * p - 1, "%s p=%d m=%d dev 0", name, p, m);
  cr_assert_leq(first, 2 * p - 1, "%s p=%d m=%d dev 0: %d of the first chunk", name, p, m, first);
  cr_assert_leq(with_last, 2 * p - 2, "%s p=%d m=%d dev 0: %d of the first chunk beside the last", name, p, m,
                with_last);
}

Test(schedule, zbv_kind_helpers) {
  int kind = 0;
  OK(strata_schedule_kind_parse("zbv", &kind));
  cr_assert_eq(kind, STRATA_SCHEDULE_ZBV);
  cr_assert_str_eq(strata_schedule_kind_name(STRATA_SCHEDULE_ZBV), "zbv");
  cr_assert_eq(strata_schedule_kind_parse("zb-v", &kind), STRATA_ERR_PARSE);
  cr_assert_not_null(strstr(strata_last_error(), "zbv"), "%s", strata_last_error());
  cr_assert_not_null(strstr(strata_schedule_kind_names(), "zbv"));
  /* the V on 4 devices: 0 1 2 3 3 2 1 0 */
  const int v4[] = {0, 1, 2, 3, 3, 2, 1, 0};
  for (int st = 0; st < 8; st++)
    cr_assert_eq(strata_schedule_kind_stage_device(STRATA_SCHEDULE_ZBV, 4, st), v4[st], "stage %d", st);
  cr_assert_eq(strata_schedule_kind_stage_device(STRATA_SCHEDULE_ZBV, 4, 8), -1);
  cr_assert_eq(strata_schedule_kind_stage_device(STRATA_SCHEDULE_INTERLEAVED, 4, 6), 2);
  cr_assert_eq(strata_schedule_kind_stage_device(STRATA_SCHEDULE_1F1B, 0, 0), -1);
  cr_assert_eq(strata_schedule_kind_stages_per_device(STRATA_SCHEDULE_ZBV, 0), 2);
  cr_assert_eq(strata_schedule_kind_stages_per_device(STRATA_SCHEDULE_INTERLEAVED, 0), 2);
  cr_assert_eq(strata_schedule_kind_stages_per_device(STRATA_SCHEDULE_INTERLEAVED, 3), 3);
  cr_assert_eq(strata_schedule_kind_stages_per_device(STRATA_SCHEDULE_ZB_H1, 0), 1);
  cr_assert(strata_schedule_kind_split_backward(STRATA_SCHEDULE_ZBV));
  cr_assert(strata_schedule_kind_split_backward(STRATA_SCHEDULE_ZB_H1));
  cr_assert(!strata_schedule_kind_split_backward(STRATA_SCHEDULE_1F1B));
  cr_assert_eq(strata_schedule_kind_min_microbatches(STRATA_SCHEDULE_ZBV, 4), 8);
  cr_assert_eq(strata_schedule_kind_min_microbatches(STRATA_SCHEDULE_1F1B, 4), 1);
}

/* Fewer than 2p micro-batches are refused with the constraint named. */
Test(schedule, zbv_refuses_too_few_microbatches) {
  strata_schedule_t s = (strata_schedule_t)1;
  cr_assert_eq(strata_schedule_generate(STRATA_SCHEDULE_ZBV, 4, 7, 0, &s), STRATA_ERR_INVALID);
  cr_assert_null(s);
  cr_assert_not_null(strstr(strata_last_error(), "at least 2 x pp = 8 micro-batches"), "%s", strata_last_error());
  cr_assert_eq(strata_schedule_generate(STRATA_SCHEDULE_ZBV, 1, 1, 0, &s), STRATA_ERR_INVALID);
  cr_assert_eq(strata_schedule_generate_hybrid(STRATA_SCHEDULE_ZBV, 2, 3, 0, 2, 2, 0, &s), STRATA_ERR_INVALID);
  cr_assert_null(s);
}

/* Every p <= 8 and 2p <= m <= 32: complete and deadlock-free, in the V. */
Test(schedule, every_zbv_schedule_validates) {
  for (int p = 1; p <= MAX_P; p++)
    for (int m = 2 * p; m <= MAX_M; m++) {
      strata_schedule_t s = gen(STRATA_SCHEDULE_ZBV, p, m, 0);
      int rc = strata_schedule_validate(s);
      cr_assert_eq(rc, STRATA_OK, "zbv p=%d m=%d: %s", p, m, strata_last_error());
      cr_assert_eq(strata_schedule_kind(s), STRATA_SCHEDULE_ZBV);
      cr_assert_eq(strata_schedule_devices(s), p);
      cr_assert_eq(strata_schedule_stages(s), 2 * p);
      for (int d = 0; d < p; d++) {
        cr_assert_eq(strata_schedule_stage_device(s, d), d);
        cr_assert_eq(strata_schedule_stage_device(s, 2 * p - 1 - d), d);
      }
      strata_schedule_free(s);
    }
}

/* p = 2, m = 4, checked by hand against strata__gen_v_pairs. Device 0 holds stages 0 and 3 (the loss), device 1
** stages 1 and 2, which pass data between them without transfers; they work on pairs of micro-batches. Device 0: F0
** of the first pair, then F3 BI3 W3 of each as it comes back; then each of the next pair's chunk-0 forwards followed
** by a chunk-0 backward of the first pair (F0.2 BI0.0 W0.0 F0.3 BI0.1 W0.1: 3 of stage 0 at most, 2 while stage 3
** holds one), F3 BI3 W3 of the second pair, the last chunk-0 backwards. Device 1: F1 F2 of a pair, then BI2 W2 BI1
** W1 of each, each W right after its BI. */
static const char v_p2_m4[] =
    "dev 0: F0.0 SA0.0 F0.1 SA0.1 RA3.0 F3.0 BI3.0 SG3.0 W3.0 RA3.1 F3.1 BI3.1 SG3.1 W3.1 F0.2 SA0.2 RG0.0 BI0.0 "
    "W0.0 F0.3 SA0.3 RG0.1 BI0.1 W0.1 RA3.2 F3.2 BI3.2 SG3.2 W3.2 RA3.3 F3.3 BI3.3 SG3.3 W3.3 RG0.2 BI0.2 W0.2 RG0.3 "
    "BI0.3 W0.3 OPT0 OPT3\n"
    "dev 1: RA1.0 F1.0 F2.0 SA2.0 RA1.1 F1.1 F2.1 SA2.1 RG2.0 BI2.0 W2.0 BI1.0 SG1.0 W1.0 RG2.1 BI2.1 W2.1 BI1.1 "
    "SG1.1 W1.1 RA1.2 F1.2 F2.2 SA2.2 RA1.3 F1.3 F2.3 SA2.3 RG2.2 BI2.2 W2.2 BI1.2 SG1.2 W1.2 RG2.3 BI2.3 W2.3 BI1.3 "
    "SG1.3 W1.3 OPT1 OPT2\n";
Test(schedule, zbv_p2_m4) {
  strata_schedule_t s = gen(STRATA_SCHEDULE_ZBV, 2, 4, 0);
  expect_text(s, v_p2_m4);
  strata_schedule_free(s);
}

/*
** Unit costs (F = BI = W = 1 per chunk; the bubble is a ratio, so chunks of half a stage's layers change nothing):
** for p >= 3 (strata__gen_zbv's rounds) the span is 6m + 2p, the bubble p / (3m + p); for p = 2 (pairs of
** micro-batches) 6m + 2, the bubble 1 / (3m + 1), as the paper's steady state with each W right after its BI gives
** it — all below ZB-H1's (p - 1) / (1.5m + p - 1) and 1F1B's.
*/
Test(schedule, bubble_zbv_below_zb_h1) {
  for (int p = 2; p <= MAX_P; p++)
    for (int m = 2 * p; m <= MAX_M; m++) {
      double v = bubble_gen(STRATA_SCHEDULE_ZBV, p, m, 0), z = bubble_gen(STRATA_SCHEDULE_ZB_H1, p, m, 0),
             o = bubble_gen(STRATA_SCHEDULE_1F1B, p, m, 0);
      cr_assert(v < z && z < o, "p=%d m=%d: zbv %f, zb-h1 %f, 1f1b %f", p, m, v, z, o);
      double want = p <= 2 ? (p - 1.0) / (3.0 * m + p - 1) : (double)p / (3.0 * m + p);
      cr_assert(fabs(v - want) < 1e-12, "zbv p=%d m=%d: %.15f, want %.15f", p, m, v, want);
    }
  cr_assert(fabs(bubble_gen(STRATA_SCHEDULE_ZBV, 4, 8, 0) - 4.0 / 28.0) < 1e-12);
  cr_assert(fabs(bubble_gen(STRATA_SCHEDULE_ZBV, 1, 2, 0)) < 1e-12);
}

/*
** Activations in flight. A chunk holds half the layers of a 1F1B stage, so a device of ZB-V holding 2p chunk
** micro-batches at once holds what 1F1B's first device holds (p stage micro-batches): no device exceeds that, and
** device 0, with the two end chunks, holds at most 2p - 1 (expect_v_memory). Stage by stage
** (strata_schedule_peak_inflight, what the memory model reads) the two chunks' peaks may come at different times,
** so their sum is at least the device's true peak — the memory plan is on the safe side.
*/
Test(schedule, zbv_peak_inflight_within_1f1b) {
  for (int p = 1; p <= MAX_P; p++)
    for (int m = 2 * p; m <= MAX_M; m++) {
      strata_schedule_t v = gen(STRATA_SCHEDULE_ZBV, p, m, 0), o = gen(STRATA_SCHEDULE_1F1B, p, m, 0);
      const int o0 = peak_of(o, 0);
      cr_assert_eq(o0, p);
      expect_v_memory(v, "zbv", p, m);
      for (int d = 0; d < p; d++) {
        int dev = device_peak_of(v, d), c0 = peak_of(v, d), c1 = peak_of(v, 2 * p - 1 - d);
        cr_assert_leq(dev, 2 * o0, "zbv p=%d m=%d dev %d: %d chunk micro-batches, 1f1b %d stage ones", p, m, d, dev,
                      o0);
        cr_assert_leq(dev, c0 + c1, "p=%d m=%d dev %d: %d at once, %d + %d by chunk", p, m, d, dev, c0, c1);
      }
      strata_schedule_free(v);
      strata_schedule_free(o);
    }
}

/* ZB-V over dp and tp: the same validation, one collective per stage, the pipeline's bubble. */
Test(schedule, zbv_hybrid_validates) {
  for (int p = 1; p <= 4; p++)
    for (int m = 2 * p; m <= 2 * p + 2; m++)
      for (int dp = 1; dp <= 2; dp++)
        for (int tp = 1; tp <= 2; tp++)
          for (int zero = 0; zero <= (dp > 1); zero++) {
            strata_schedule_t s = NULL;
            OK(strata_schedule_generate_hybrid(STRATA_SCHEDULE_ZBV, p, m, 0, dp, tp, zero, &s));
            int rc = strata_schedule_validate(s);
            cr_assert_eq(rc, STRATA_OK, "zbv p=%d m=%d dp=%d tp=%d zero=%d: %s", p, m, dp, tp, zero,
                         strata_last_error());
            cr_assert_eq(strata_schedule_devices(s), p * dp * tp);
            cr_assert_eq(strata_schedule_stages(s), 2 * p * dp * tp);
            /* chain c's stage j lives on the chain's device of the V's rank of j */
            for (int st = 0; st < strata_schedule_stages(s); st++) {
              int c = st / (2 * p), j = st % (2 * p);
              cr_assert_eq(strata_schedule_stage_device(s, st),
                           c * p + strata_schedule_kind_stage_device(STRATA_SCHEDULE_ZBV, p, j), "stage %d", st);
            }
            strata_schedule_t b = gen(STRATA_SCHEDULE_ZBV, p, m, 0);
            cr_assert(fabs(bubble_of(s) - bubble_of(b)) < 1e-12, "zbv p=%d m=%d dp=%d tp=%d", p, m, dp, tp);
            strata_schedule_free(b);
            strata_schedule_free(s);
          }
  /* a tp degree per rank */
  strata_schedule_t s = NULL;
  OK(strata_schedule_generate_hybrid_ranks(STRATA_SCHEDULE_ZBV, 2, 4, 0, 2, (const int[]){2, 1}, 0, &s));
  int rc = strata_schedule_validate(s);
  cr_assert_eq(rc, STRATA_OK, "%s", strata_last_error());
  strata_schedule_free(s);
}

/* ZB-V p = 2, m = 4 as mutable lists. */
static void zbv_base(struct lists *l) {
  strata_schedule_t s = gen(STRATA_SCHEDULE_ZBV, 2, 4, 0);
  lists_from(l, s);
  strata_schedule_free(s);
}

Test(schedule, zbv_copy_validates) {
  struct lists l;
  zbv_base(&l);
  strata_schedule_t s = NULL;
  OK(strata_schedule_from_lists(l.p, l.stages, l.m, l.stage_device, (const struct strata_action *const *)l.list, l.counts,
                                &s));
  OK(strata_schedule_validate(s));
  cr_assert(fabs(bubble_of(s) - 1.0 / 13.0) < 1e-12); /* span 6m + 2(p - 1) = 26 units for 24 of work a device */
  strata_schedule_free(s);
  lists_free(&l);
}

Test(schedule, zbv_rejects_a_missing_weight_gradient) {
  struct lists l;
  zbv_base(&l);
  /* the last stage's (device 0's chunk 1) W of micro-batch 2 */
  lists_remove(&l, 0, lists_find(&l, 0, STRATA_ACTION_BACKWARD_WEIGHT, 3, 2));
  REJECTED(&l, "missing W3.2 after BI3.2 on dev 0");
}

/* Device 0 runs its chunk 1 (stage 3) first: its input comes from stage 2 on device 1, which waits for stage 0's
** output that device 0 has not produced yet. */
Test(schedule, zbv_rejects_a_chunk_order_that_deadlocks) {
  struct lists l;
  zbv_base(&l);
  int ra = lists_find(&l, 0, STRATA_ACTION_RECV_ACT, 3, 0);
  cr_assert_eq(lists_find(&l, 0, STRATA_ACTION_FORWARD, 3, 0), ra + 1);
  lists_remove(&l, 0, ra + 1);
  lists_remove(&l, 0, ra);
  lists_insert(&l, 0, 0, act(STRATA_ACTION_FORWARD, 3, 0));
  lists_insert(&l, 0, 0, act(STRATA_ACTION_RECV_ACT, 3, 0));
  REJECTED(&l, "deadlock", "dev 0 at #0 RA3.0 waits for SA2.0 on dev 1", "dev 1 at #0 RA1.0 waits for SA0.0 on dev 0");
}

/* Device 1, the bottom of the V, runs stage 2 (its chunk 1) before stage 1 that feeds it on the same device. */
Test(schedule, zbv_rejects_chunks_swapped_on_the_turning_device) {
  struct lists l;
  zbv_base(&l);
  int f1 = lists_find(&l, 1, STRATA_ACTION_FORWARD, 1, 0), f2 = lists_find(&l, 1, STRATA_ACTION_FORWARD, 2, 0);
  cr_assert_eq(f2, f1 + 1);
  l.list[1][f1] = act(STRATA_ACTION_FORWARD, 2, 0);
  l.list[1][f2] = act(STRATA_ACTION_FORWARD, 1, 0);
  REJECTED(&l, "dev 1", "F2.0", "comes before F1.0");
}

/* ---------------------------------------------------------------- DualPipeV: the same V, forwards and backwards paired */

Test(schedule, dualpipev_kind_and_refusals) {
  int kind = 0;
  OK(strata_schedule_kind_parse("dualpipev", &kind));
  cr_assert_eq(kind, STRATA_SCHEDULE_DUALPIPEV);
  cr_assert_str_eq(strata_schedule_kind_name(STRATA_SCHEDULE_DUALPIPEV), "dualpipev");
  for (int st = 0; st < 8; st++)
    cr_assert_eq(strata_schedule_kind_stage_device(STRATA_SCHEDULE_DUALPIPEV, 4, st),
                 strata_schedule_kind_stage_device(STRATA_SCHEDULE_ZBV, 4, st));
  cr_assert_eq(strata_schedule_kind_stages_per_device(STRATA_SCHEDULE_DUALPIPEV, 0), 2);
  cr_assert(strata_schedule_kind_split_backward(STRATA_SCHEDULE_DUALPIPEV));
  strata_schedule_t s = (strata_schedule_t)1;
  cr_assert_eq(strata_schedule_generate(STRATA_SCHEDULE_DUALPIPEV, 3, 5, 0, &s), STRATA_ERR_INVALID);
  cr_assert_null(s);
  cr_assert_not_null(strstr(strata_last_error(), "dualpipev needs at least 2 x pp = 6"), "%s", strata_last_error());
}

/* p = 2, m = 4: on two devices DualPipeV runs ZB-V's pairs (strata__gen_dualpipev), the lists of zbv_p2_m4. */
Test(schedule, dualpipev_p2_m4) {
  strata_schedule_t s = gen(STRATA_SCHEDULE_DUALPIPEV, 2, 4, 0);
  expect_text(s, v_p2_m4);
  strata_schedule_free(s);
}

/*
** Every p <= 8 and 2p <= m <= 32 validates. With unit costs, a paired F and B run one after the other (strata runs
** a device's list in order, so the pairing's overlap of communication does not show) and each W right after its BI
** (one dsave region a device, strata_schedule_device_pending). For p >= 3 (strata__gen_dualpipev's rounds) the span
** is 6m + 2p + 2, the bubble (p + 1) / (3m + p + 1), below 1F1B's and not above ZB-H1's (equal at p = 3, m = 6:
** 4 / 22); for p = 2 (ZB-V's pairs) 6m + 2, 1 / (3m + 1). A device holds at most 2p half-size chunk micro-batches at
** once — 1F1B's p full stages — and device 0 2p - 1 (expect_v_memory). (The reference's steps reach ZB-V's paper's
** (p - 1) / (3m + p - 1) for every p with 2p on device 0, one of them of the last chunk beside 2p - 1 of the first;
** DeepSeek-V3's table gives DualPipe PP + 1 chunks' activations against 1F1B's PP.)
*/
Test(schedule, every_dualpipev_validates_with_its_bubble_and_peak) {
  for (int p = 1; p <= MAX_P; p++)
    for (int m = 2 * p; m <= MAX_M; m++) {
      strata_schedule_t s = gen(STRATA_SCHEDULE_DUALPIPEV, p, m, 0);
      int rc = strata_schedule_validate(s);
      cr_assert_eq(rc, STRATA_OK, "dualpipev p=%d m=%d: %s", p, m, strata_last_error());
      cr_assert_eq(strata_schedule_stages(s), 2 * p);
      double b = bubble_of(s), want = p <= 2 ? (p - 1.0) / (3.0 * m + p - 1) : (p + 1.0) / (3.0 * m + p + 1);
      cr_assert(fabs(b - want) < 1e-12, "dualpipev p=%d m=%d: %.15f, want %.15f", p, m, b, want);
      if (p > 1) {
        cr_assert_lt(b, bubble_gen(STRATA_SCHEDULE_1F1B, p, m, 0), "dualpipev p=%d m=%d", p, m);
        cr_assert_leq(b, bubble_gen(STRATA_SCHEDULE_ZB_H1, p, m, 0) + 1e-12, "dualpipev p=%d m=%d", p, m);
      }
      expect_v_memory(s, "dualpipev", p, m);
      strata_schedule_free(s);
    }
}

Test(schedule, dualpipev_hybrid_validates_and_a_missing_weight_is_rejected) {
  for (int p = 1; p <= 3; p++)
    for (int dp = 1; dp <= 2; dp++)
      for (int tp = 1; tp <= 2; tp++) {
        strata_schedule_t s = NULL;
        OK(strata_schedule_generate_hybrid(STRATA_SCHEDULE_DUALPIPEV, p, 2 * p + 1, 0, dp, tp, dp > 1, &s));
        int rc = strata_schedule_validate(s);
        cr_assert_eq(rc, STRATA_OK, "dualpipev p=%d dp=%d tp=%d: %s", p, dp, tp, strata_last_error());
        strata_schedule_free(s);
      }
  struct lists l;
  strata_schedule_t s = gen(STRATA_SCHEDULE_DUALPIPEV, 2, 4, 0);
  lists_from(&l, s);
  strata_schedule_free(s);
  /* a held-back W of the cool-down */
  lists_remove(&l, 1, lists_find(&l, 1, STRATA_ACTION_BACKWARD_WEIGHT, 2, 3));
  REJECTED(&l, "missing W2.3 after BI2.3 on dev 1");
}

/* ---------------------------------------------------------------- activation recomputation */

/* An RC right before each backward part (B, or BI and W), by hand; the schedules of every kind with replicas and
** slices validate with their RCs (and, after a W of a cut stage, the TJB of its recomputation's joins) and keep their
** unit-cost bubble (an RC costs nothing there: its cost depends on the mode, the simulator's); an RC missing, after
** its backward or before its forward is refused. */
Test(schedule, recompute_before_each_backward) {
  strata_schedule_t s = gen(STRATA_SCHEDULE_1F1B, 2, 3, 0), r = NULL;
  OK(strata_schedule_with_recompute(s, &r));
  expect_text(r, "dev 0: F0.0 SA0.0 F0.1 SA0.1 RG0.0 RC0.0 B0.0 F0.2 SA0.2 RG0.1 RC0.1 B0.1 RG0.2 RC0.2 B0.2 OPT0\n"
                 "dev 1: RA1.0 F1.0 RC1.0 B1.0 SG1.0 RA1.1 F1.1 RC1.1 B1.1 SG1.1 RA1.2 F1.2 RC1.2 B1.2 SG1.2 OPT1\n");
  OK(strata_schedule_validate(r));
  cr_assert_float_eq(bubble_of(r), bubble_of(s), 1e-12);
  cr_assert_str_eq(strata_action_label(STRATA_ACTION_RECOMPUTE), "RC");
  strata_schedule_free(s);
  const int kinds[] = {STRATA_SCHEDULE_GPIPE, STRATA_SCHEDULE_1F1B, STRATA_SCHEDULE_INTERLEAVED, STRATA_SCHEDULE_ZB_H1,
                       STRATA_SCHEDULE_ZBV, STRATA_SCHEDULE_DUALPIPEV};
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    strata_schedule_t h = NULL, hr = NULL;
    OK(strata_schedule_generate_hybrid(kinds[k], 2, 4, 2, 2, 2, 1, &h));
    OK(strata_schedule_with_recompute(h, &hr));
    cr_assert_eq(strata_schedule_validate(hr), STRATA_OK, "%s dp 2 x pp 2 x tp 2 with RC: %s",
                 strata_schedule_kind_name(kinds[k]), strata_last_error());
    cr_assert_eq(strata_schedule_tp(hr), 2);
    cr_assert_eq(strata_schedule_replicas(hr), 2);
    int backward = 0, rc = 0, weight = 0;
    for (int d = 0; d < strata_schedule_devices(hr); d++) {
      int n = 0;
      const struct strata_action *a = strata_schedule_actions(hr, d, &n);
      for (int i = 0; i < n; i++) {
        backward += a[i].kind >= STRATA_ACTION_BACKWARD && a[i].kind <= STRATA_ACTION_BACKWARD_WEIGHT;
        if (a[i].kind == STRATA_ACTION_RECOMPUTE) {
          rc++;
          cr_assert(i + 1 < n && a[i + 1].stage == a[i].stage && a[i + 1].microbatch == a[i].microbatch &&
                    a[i + 1].kind >= STRATA_ACTION_BACKWARD && a[i + 1].kind <= STRATA_ACTION_BACKWARD_WEIGHT);
        }
        if (a[i].kind == STRATA_ACTION_BACKWARD_WEIGHT) {
          weight++;
          cr_assert(i + 1 < n && a[i + 1].kind == STRATA_ACTION_TP_JOIN_BACKWARD && a[i + 1].stage == a[i].stage &&
                    a[i + 1].microbatch == a[i].microbatch, "%s: no TJB right after a W (tp 2)",
                    strata_schedule_kind_name(kinds[k]));
        }
      }
    }
    cr_assert_eq(rc, backward);
    cr_assert_eq(weight > 0, strata_schedule_kind_split_backward(kinds[k]));
    strata_schedule_free(h);
    strata_schedule_free(hr);
  }
  struct lists l;
  lists_from(&l, r);
  lists_remove(&l, 0, lists_find(&l, 0, STRATA_ACTION_RECOMPUTE, 0, 1));
  REJECTED(&l, "missing RC0.1", "dev 0");
  lists_from(&l, r); /* after its backward */
  int at = lists_find(&l, 1, STRATA_ACTION_RECOMPUTE, 1, 0);
  lists_remove(&l, 1, at);
  lists_insert(&l, 1, at + 1, act(STRATA_ACTION_RECOMPUTE, 1, 0));
  REJECTED(&l, "B1.0", "RC1.0", "dev 1");
  lists_from(&l, r); /* before its forward */
  at = lists_find(&l, 1, STRATA_ACTION_RECOMPUTE, 1, 2);
  lists_remove(&l, 1, at);
  lists_insert(&l, 1, lists_find(&l, 1, STRATA_ACTION_FORWARD, 1, 2), act(STRATA_ACTION_RECOMPUTE, 1, 2));
  REJECTED(&l, "RC1.2", "F1.2");
  strata_schedule_free(r);
}

/* Lists in the shape of `like` (its replicas and slices) that the validator must refuse with a message holding `a`
** and `b`. */
static void rejected_like(strata_schedule_t like, struct lists *l, const char *a, const char *b) {
  strata_schedule_t s = NULL;
  OK(strata_schedule_with_lists(like, (const struct strata_action *const *)l->list, l->counts, &s));
  cr_assert_eq(strata_schedule_validate(s), STRATA_ERR_INVALID, "lists like %s validate",
               strata_schedule_kind_name(strata_schedule_kind(like)));
  cr_assert(strstr(strata_last_error(), a) && strstr(strata_last_error(), b), "message '%s' lacks '%s' or '%s'",
            strata_last_error(), a, b);
  strata_schedule_free(s);
  lists_free(l);
}

/* Position of the n-th (from 0) (kind, stage, mb) in device d's list. */
static int lists_find_nth(struct lists *l, int d, int kind, int stage, int mb, int n) {
  for (int i = 0; i < l->counts[d]; i++) {
    const struct strata_action *a = &l->list[d][i];
    if (a->kind == kind && a->stage == stage && a->microbatch == mb && n-- == 0)
      return i;
  }
  cr_assert_fail("%s%d.%d #%d not on dev %d", strata_action_label(kind), stage, mb, n, d);
  return -1;
}

/*
** With a split backward the W reads the recomputed activations too: an RC before it as before its BI (the validator
** keys the two apart by the backward part that follows each). Refused: the W's RC missing, both RCs before the BI,
** the W's RC after the W; with tp, the W's TJB missing, and two slices settling their W's joins in different orders
** (a deadlock the run finds, each slice waiting for the other's); without recomputation, a TJB after a W.
*/
Test(schedule, recompute_before_each_weight_pass) {
  const int kinds[] = {STRATA_SCHEDULE_ZB_H1, STRATA_SCHEDULE_ZBV, STRATA_SCHEDULE_DUALPIPEV};
  for (size_t k = 0; k < 3; k++)
    for (int p = 2; p <= 4; p += 2)
      for (int m = 2 * p; m <= 4 * p; m += 2 * p) {
        strata_schedule_t s = gen(kinds[k], p, m, 0), r = NULL;
        OK(strata_schedule_with_recompute(s, &r));
        cr_assert_eq(strata_schedule_validate(r), STRATA_OK, "%s pp %d m %d: %s", strata_schedule_kind_name(kinds[k]),
                     p, m, strata_last_error());
        cr_assert_float_eq(bubble_of(r), bubble_of(s), 1e-12);
        strata_schedule_free(s);
        strata_schedule_free(r);
      }
  strata_schedule_t s = gen(STRATA_SCHEDULE_ZBV, 2, 4, 0), r = NULL;
  OK(strata_schedule_with_recompute(s, &r));
  struct lists l;
  lists_from(&l, r); /* the W's RC missing */
  lists_remove(&l, 0, lists_find_nth(&l, 0, STRATA_ACTION_RECOMPUTE, 3, 1, 1));
  REJECTED(&l, "missing RC3.1", "between BI3.1 and W3.1");
  lists_from(&l, r); /* both before the BI */
  int at = lists_find_nth(&l, 0, STRATA_ACTION_RECOMPUTE, 3, 1, 1);
  lists_remove(&l, 0, at);
  lists_insert(&l, 0, lists_find(&l, 0, STRATA_ACTION_BACKWARD_INPUT, 3, 1), act(STRATA_ACTION_RECOMPUTE, 3, 1));
  REJECTED(&l, "RC3.1", "duplicate");
  lists_from(&l, r); /* after the W */
  at = lists_find_nth(&l, 0, STRATA_ACTION_RECOMPUTE, 0, 2, 1);
  lists_remove(&l, 0, at);
  lists_insert(&l, 0, lists_find(&l, 0, STRATA_ACTION_BACKWARD_WEIGHT, 0, 2) + 1, act(STRATA_ACTION_RECOMPUTE, 0, 2));
  REJECTED(&l, "RC0.2");
  strata_schedule_free(r);
  /* tp 2: the W's joins */
  strata_schedule_t h = NULL;
  OK(strata_schedule_generate_hybrid(STRATA_SCHEDULE_ZBV, 2, 4, 0, 1, 2, 0, &h));
  OK(strata_schedule_with_recompute(h, &r));
  OK(strata_schedule_validate(r));
  lists_from(&l, r);
  lists_remove(&l, 1, lists_find_nth(&l, 1, STRATA_ACTION_TP_JOIN_BACKWARD, 1, 2, 1));
  rejected_like(r, &l, "missing TJB1.2", "right after W1.2");
  /* slice 1's rank 0 (device 2) runs W7.0, with its RC and TJB, after W7.1; slice 0 (device 0) W3.0 first */
  lists_from(&l, r);
  at = lists_find_nth(&l, 2, STRATA_ACTION_RECOMPUTE, 7, 0, 1);
  for (int j = 0; j < 3; j++)
    lists_remove(&l, 2, at);
  at = lists_find_nth(&l, 2, STRATA_ACTION_TP_JOIN_BACKWARD, 7, 1, 1) + 1;
  lists_insert(&l, 2, at, act(STRATA_ACTION_TP_JOIN_BACKWARD, 7, 0));
  lists_insert(&l, 2, at, act(STRATA_ACTION_BACKWARD_WEIGHT, 7, 0));
  lists_insert(&l, 2, at, act(STRATA_ACTION_RECOMPUTE, 7, 0));
  rejected_like(r, &l, "deadlock", "TJB");
  strata_schedule_free(r);
  /* without recomputation, a TJB after a W joins nothing */
  lists_from(&l, h);
  at = lists_find(&l, 0, STRATA_ACTION_BACKWARD_WEIGHT, 0, 1);
  lists_insert(&l, 0, at + 1, act(STRATA_ACTION_TP_JOIN_BACKWARD, 0, 1));
  rejected_like(h, &l, "TJB0.1", "without recomputation");
  strata_schedule_free(h);
  strata_schedule_free(s);
}

/* The outputs a stage hands to the next stage on its own device at once (strata_schedule_peak_handoff, the trainer's
** output pool): by hand, a device running F0.0 F0.1 before F1.0 holds two of stage 0's outputs, and one of a stage
** whose next stage is elsewhere or none; ZB-V's and DualPipeV's turn (stages p - 1 and p on device p - 1) runs each
** F(p-1).k right before F(p).k, so every stage of theirs holds one. */
Test(schedule, peak_handoff) {
  const struct strata_action d0[] = {{STRATA_ACTION_FORWARD, 0, 0}, {STRATA_ACTION_FORWARD, 0, 1},
                                     {STRATA_ACTION_FORWARD, 1, 0}, {STRATA_ACTION_FORWARD, 1, 1},
                                     {STRATA_ACTION_BACKWARD, 1, 0}, {STRATA_ACTION_BACKWARD, 0, 0},
                                     {STRATA_ACTION_BACKWARD, 1, 1}, {STRATA_ACTION_BACKWARD, 0, 1}};
  const struct strata_action *lists[] = {d0};
  int counts[] = {8}, stage_device[] = {0, 0}, k = 0;
  strata_schedule_t s = NULL;
  OK(strata_schedule_from_lists(1, 2, 2, stage_device, lists, counts, &s));
  OK(strata_schedule_peak_handoff(s, 0, &k));
  cr_assert_eq(k, 2, "stage 0 hands over %d outputs at once", k);
  OK(strata_schedule_peak_handoff(s, 1, &k));
  cr_assert_eq(k, 1, "the last stage: %d", k);
  cr_assert_eq(strata_schedule_peak_handoff(s, 2, &k), STRATA_ERR_RANGE);
  strata_schedule_free(s);
  for (int v = 0; v < 2; v++)
    for (int p = 2; p <= MAX_P; p++)
      for (int m = 2 * p; m <= MAX_M; m++) {
        strata_schedule_t g = gen(v ? STRATA_SCHEDULE_DUALPIPEV : STRATA_SCHEDULE_ZBV, p, m, 0);
        for (int st = 0; st < 2 * p; st++) {
          OK(strata_schedule_peak_handoff(g, st, &k));
          cr_assert_eq(k, 1, "%s p=%d m=%d stage %d: %d outputs at once", v ? "dualpipev" : "zbv", p, m, st, k);
        }
        strata_schedule_free(g);
      }
}
