/* SPDX-License-Identifier: MIT */
/* test-plan.c — the cost model, the simulator against hand-computed figures and the schedules' own bubble, and the
** planner against exhaustive search and the topology rules of real machines. */
#include <strata/plan.h>

#include "common.h"

TestSuite(plan, .timeout = 120);

/* ---- the simulator ---- */

/* With unit costs the simulated bubble is the schedule's own, for every schedule, depth, micro-batch count and replica count. */
Test(plan, unit_cost_bubble_is_the_schedules) {
  const int kinds[] = {STRATA_SCHEDULE_GPIPE, STRATA_SCHEDULE_1F1B, STRATA_SCHEDULE_INTERLEAVED, STRATA_SCHEDULE_ZB_H1};
  int checked = 0;
  for (int k = 0; k < 4; k++)
    for (int p = 1; p <= 4; p++)
      for (int m = 1; m <= 8; m++)
        for (int r = 1; r <= 2; r++) {
          if (kinds[k] == STRATA_SCHEDULE_INTERLEAVED && (m % p || p < 2))
            continue;
          strata_schedule_t s;
          OK(strata_schedule_generate_replicated(kinds[k], p, m, 2, r, 0, &s));
          double want;
          OK(strata_schedule_bubble(s, &want));
          struct strata_sim_result res;
          OK(strata_simulate_schedule(s, NULL, &res));
          cr_assert_float_eq(res.bubble, want, 1e-12, "%s p %d m %d replicas %d: simulated %g, schedule %g",
                             strata_schedule_kind_name(kinds[k]), p, m, r, res.bubble, want);
          cr_assert_eq(res.devices, p * r);
          strata_sim_result_destroy(&res);
          strata_schedule_free(s);
          checked++;
        }
  cr_assert_gt(checked, 100);
}

/* 1F1B with unit costs: span (m + p - 1) x 3, the closed form (p - 1) / (m + p - 1). */
Test(plan, unit_cost_1f1b_span_is_the_closed_form) {
  for (int p = 1; p <= 6; p++)
    for (int m = 1; m <= 12; m++) {
      strata_schedule_t s;
      OK(strata_schedule_generate(STRATA_SCHEDULE_1F1B, p, m, 1, &s));
      struct strata_sim_result res;
      OK(strata_simulate_schedule(s, NULL, &res));
      cr_assert_float_eq(res.step_s, 3.0 * (m + p - 1), 1e-9, "p %d m %d: span %g", p, m, res.step_s);
      cr_assert_float_eq(res.bubble, (double)(p - 1) / (m + p - 1), 1e-12);
      strata_sim_result_destroy(&res);
      strata_schedule_free(s);
    }
}

/* ---- helpers ---- */

/* A GPT of `blocks` blocks (blocks + 2 layers) small enough for exhaustive search. */
static strata_model_t small_gpt(int blocks) {
  struct strata_model_config c = {.kind = STRATA_MODEL_GPT, .vocab = 256, .context = 64, .d_model = 128,
                                  .layers = blocks, .heads = 4, .d_ff = 512};
  strata_model_t m;
  OK(strata_model_from_config(&c, &m));
  return m;
}

/*
** A node of n devices: device i does flops[i] FLOP/s with memory[i]
** bytes, no launch overhead and memory so fast it never binds; every pair
** linked at `gbps` (inside an island) or `slow_gbps` (across), no latency.
*/
static strata_cluster_t node(int n, const double *flops, const uint64_t *memory, const int *island, double gbps,
                             double slow_gbps, const int *uplink, double uplink_gbps) {
  struct strata_device_cost *cost = calloc((size_t)n, sizeof *cost);
  double *g = calloc((size_t)n * n, sizeof *g), *lat = calloc((size_t)n * n, sizeof *lat);
  for (int i = 0; i < n; i++) {
    cost[i] = (struct strata_device_cost){.flops = flops[i], .mem_gbps = 1e9, .memory = memory[i], .launch_us = 0};
    for (int j = 0; j < n; j++)
      g[i * n + j] = !island || island[i] == island[j] ? gbps : slow_gbps;
  }
  struct strata_node_desc d = {.devices = n, .cost = cost, .gbps = g, .latency_us = lat, .island = island,
                               .uplink = uplink, .uplink_gbps = uplink_gbps};
  strata_cluster_t c;
  OK(strata_cluster_new(&d, NULL, &c));
  free(cost);
  free(g);
  free(lat);
  return c;
}

static strata_layout_t layout(int dp, int pp, int tp, const int *devs, const int *split, int schedule, int m, int zero) {
  int n = dp * pp * tp;
  int *d = malloc(sizeof *d * (size_t)n);
  for (int i = 0; i < n; i++)
    d[i] = devs ? devs[i] : i;
  struct strata_layout_desc desc = {.dp = dp, .pp = pp, .tp_all = tp, .devices = d, .ndevices = n, .split = split,
                                    .nsplit = split ? pp : 0, .schedule = schedule, .microbatches = m, .zero = zero};
  strata_layout_t l;
  OK(strata_layout_new(&desc, &l));
  free(d);
  return l;
}

#define GIB (1024ull * 1024ull * 1024ull)

/* ---- the simulator against figures computed by hand ---- */

/* One device: the step is every layer's forward and backward FLOPs at the device's speed (memory never binds,
** no launches), for the whole batch, plus an optimizer step that costs nothing at this memory bandwidth. */
Test(plan, one_device_step_is_the_flops_over_the_speed) {
  strata_model_t m = small_gpt(4);
  double f[1] = {1e12};
  uint64_t mem[1] = {64 * GIB};
  strata_cluster_t c = node(1, f, mem, NULL, 100, 100, NULL, 0);
  strata_layout_t l = layout(1, 1, 1, NULL, NULL, STRATA_SCHEDULE_1F1B, 4, 0);
  struct strata_sim_options o = {.batch = 16};
  struct strata_sim_result r;
  OK(strata_simulate(c, m, l, &o, &r));
  double flops = 0;
  for (int i = 0; i < strata_model_layer_count(m); i++) {
    struct strata_layer_info li;
    OK(strata_model_layer(m, i, &li));
    flops += li.fwd_flops + li.bwd_flops;
  }
  double want = flops * 16 / 1e12;
  cr_assert_float_eq(r.step_s, want, want * 1e-6, "step %g s, by hand %g s", r.step_s, want);
  cr_assert_float_eq(r.bubble, 0, 1e-6);
  cr_assert(r.fits);
  strata_sim_result_destroy(&r);
  strata_layout_free(l);
  strata_cluster_free(c);
  strata_model_free(m);
}

/* Two stages, GPipe, one micro-batch: forward 0, the activation over the link, forward 1, backward 1, the
** gradient back, backward 0 — a chain, so the step is their sum. */
Test(plan, two_stage_step_is_the_chain_by_hand) {
  strata_model_t m = small_gpt(4); /* 6 layers */
  double f[2] = {1e12, 1e12};
  uint64_t mem[2] = {64 * GIB, 64 * GIB};
  strata_cluster_t c = node(2, f, mem, NULL, 1.0 /* GB/s */, 1.0, NULL, 0);
  int split[2] = {3, 3};
  strata_layout_t l = layout(1, 2, 1, NULL, split, STRATA_SCHEDULE_GPIPE, 1, 0);
  const int64_t batch = 2;
  struct strata_sim_options o = {.batch = batch};
  struct strata_sim_result r;
  OK(strata_simulate(c, m, l, &o, &r));
  double f0 = 0, b0 = 0, f1 = 0, b1 = 0, out2 = 0;
  for (int i = 0; i < 6; i++) {
    struct strata_layer_info li;
    OK(strata_model_layer(m, i, &li));
    *(i < 3 ? &f0 : &f1) += li.fwd_flops * batch / 1e12;
    *(i < 3 ? &b0 : &b1) += li.bwd_flops * batch / 1e12;
    if (i == 2)
      out2 = (double)li.out_bytes * batch;
  }
  double want = f0 + out2 / 1e9 + f1 + b1 + out2 / 1e9 + b0;
  cr_assert_float_eq(r.step_s, want, want * 1e-6, "step %g s, by hand %g s", r.step_s, want);
  strata_sim_result_destroy(&r);
  strata_layout_free(l);
  strata_cluster_free(c);
  strata_model_free(m);
}

/* Two replicas of two stages whose activations leave one island through one shared uplink: the second
** transfer waits for the first, and the step grows by exactly one transfer over what it is without sharing. */
Test(plan, transfers_through_one_uplink_are_contended) {
  strata_model_t m = small_gpt(4);
  double f[4] = {1e12, 1e12, 1e12, 1e12};
  uint64_t mem[4] = {64 * GIB, 64 * GIB, 64 * GIB, 64 * GIB};
  int island[4] = {0, 0, 1, 1}, uplink[4] = {0, 0, 1, 1};
  strata_cluster_t shared = node(4, f, mem, island, 10, 1.0, uplink, 1.0);
  strata_cluster_t free_ = node(4, f, mem, island, 10, 1.0, NULL, 0);
  /* replica 0: 0 -> 2, replica 1: 1 -> 3 */
  int devs[4] = {0, 2, 1, 3}, split[2] = {3, 3};
  strata_layout_t l = layout(2, 2, 1, devs, split, STRATA_SCHEDULE_GPIPE, 1, 0);
  struct strata_sim_options o = {.batch = 4};
  struct strata_sim_result a, b;
  OK(strata_simulate(shared, m, l, &o, &a));
  OK(strata_simulate(free_, m, l, &o, &b));
  struct strata_layer_info li;
  OK(strata_model_layer(m, 2, &li));
  double xfer = (double)li.out_bytes * 2 /* rows */ / 1e9;
  cr_assert_float_eq(a.step_s - b.step_s, xfer, xfer * 1e-6, "shared %g s, unshared %g s, one transfer %g s",
                     a.step_s, b.step_s, xfer);
  strata_sim_result_destroy(&a);
  strata_sim_result_destroy(&b);
  strata_layout_free(l);
  strata_cluster_free(shared);
  strata_cluster_free(free_);
  strata_model_free(m);
}

/* Symmetric mode (two replicas stand for dp) gives the full simulation's figures on identical devices. */
Test(plan, symmetric_replicas_equal_the_full_run) {
  strata_model_t m = small_gpt(4);
  double f[8];
  uint64_t mem[8];
  for (int i = 0; i < 8; i++)
    f[i] = 2e12, mem[i] = 64 * GIB;
  strata_cluster_t c = node(8, f, mem, NULL, 20, 20, NULL, 0);
  int split[2] = {3, 3};
  for (int zero = 0; zero <= 1; zero++) {
    strata_layout_t l = layout(4, 2, 1, NULL, split, STRATA_SCHEDULE_1F1B, 4, zero);
    struct strata_sim_options full = {.batch = 64}, sym = {.batch = 64, .symmetric = 1};
    struct strata_sim_result a, b;
    OK(strata_simulate(c, m, l, &full, &a));
    OK(strata_simulate(c, m, l, &sym, &b));
    cr_assert_float_eq(a.step_s, b.step_s, a.step_s * 1e-9, "zero %d: full %g s, symmetric %g s", zero, a.step_s,
                       b.step_s);
    cr_assert_eq(a.peak_bytes, b.peak_bytes);
    strata_sim_result_destroy(&a);
    strata_sim_result_destroy(&b);
    strata_layout_free(l);
  }
  strata_cluster_free(c);
  strata_model_free(m);
}

/* The predicted trace has the executor's shape: a compute and a transfers thread per device, one event per F and B. */
Test(plan, trace_has_every_compute_action) {
  strata_model_t m = small_gpt(4);
  double f[2] = {1e12, 1e12};
  uint64_t mem[2] = {64 * GIB, 64 * GIB};
  strata_cluster_t c = node(2, f, mem, NULL, 1, 1, NULL, 0);
  int split[2] = {3, 3};
  strata_layout_t l = layout(1, 2, 1, NULL, split, STRATA_SCHEDULE_1F1B, 4, 0);
  char path[] = "/tmp/strata-plan-trace-XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  close(fd);
  struct strata_sim_options o = {.batch = 8, .trace = path};
  struct strata_sim_result r;
  OK(strata_simulate(c, m, l, &o, &r));
  FILE *fp = fopen(path, "r");
  cr_assert_not_null(fp);
  char line[4096];
  int compute = 0, names = 0, sends = 0;
  while (fgets(line, sizeof line, fp)) {
    compute += strstr(line, "\"cat\": \"compute\"") != NULL;
    names += strstr(line, "\"thread_name\"") != NULL;
    sends += strstr(line, "\"cat\": \"send\"") != NULL;
  }
  fclose(fp);
  unlink(path);
  cr_assert_eq(compute, 2 * 4 * 2, "one event per F and B of 4 micro-batches on 2 stages: %d", compute);
  cr_assert_eq(names, 4);
  cr_assert_eq(sends, 2 * 4);
  strata_sim_result_destroy(&r);
  strata_layout_free(l);
  strata_cluster_free(c);
  strata_model_free(m);
}

/* ---- the planner against exhaustive search ---- */

/* Plan, and search every device order and every split; the planner's best must be the exhaustive best. */
static void planner_equals_exhaustive(strata_cluster_t c, strata_model_t m, int64_t batch, const char *what) {
  struct strata_plan_options o = {.batch = batch, .top = 3};
  strata_plan_t fast, all;
  OK(strata_plan_search(c, m, &o, &fast));
  o.exhaustive = 1;
  OK(strata_plan_search(c, m, &o, &all));
  struct strata_plan_candidate a, b;
  OK(strata_plan_candidate(fast, 0, &a));
  OK(strata_plan_candidate(all, 0, &b));
  int sa = 0, sb = 0;
  OK(strata_plan_stats(fast, &sa, NULL));
  OK(strata_plan_stats(all, &sb, NULL));
  char *ja = NULL, *jb = NULL;
  OK(strata_layout_to_json(a.layout, &ja));
  OK(strata_layout_to_json(b.layout, &jb));
  cr_assert_float_eq(a.step_s, b.step_s, b.step_s * 1e-9,
                     "%s: planner %g s (%d simulated) %s, exhaustive %g s (%d simulated) %s", what, a.step_s, sa, ja,
                     b.step_s, sb, jb);
  cr_assert_lt(sa, sb, "%s: the planner simulated %d layouts, the exhaustive search %d", what, sa, sb);
  free(ja);
  free(jb);
  strata_plan_free(fast);
  strata_plan_free(all);
}

Test(plan, planner_equals_exhaustive_on_four_like_devices) {
  strata_model_t m = small_gpt(6); /* 8 layers */
  double f[4] = {1e12, 1e12, 1e12, 1e12};
  uint64_t mem[4] = {64 * GIB, 64 * GIB, 64 * GIB, 64 * GIB};
  strata_cluster_t c = node(4, f, mem, NULL, 5, 5, NULL, 0);
  planner_equals_exhaustive(c, m, 8, "4 like devices");
  strata_cluster_free(c);
  strata_model_free(m);
}

Test(plan, planner_equals_exhaustive_on_two_fast_and_two_slow) {
  strata_model_t m = small_gpt(6);
  double f[4] = {2e12, 1e12, 2e12, 1e12};
  uint64_t mem[4] = {64 * GIB, 64 * GIB, 64 * GIB, 64 * GIB};
  int island[4] = {0, 0, 1, 1};
  strata_cluster_t c = node(4, f, mem, island, 50, 2, NULL, 0);
  planner_equals_exhaustive(c, m, 8, "2 fast + 2 slow in 2 islands");
  strata_cluster_free(c);
  strata_model_free(m);
}

Test(plan, planner_equals_exhaustive_when_memory_binds) {
  strata_model_t m = small_gpt(6);
  /* the fast device holds little: the split must respect it */
  double f[3] = {3e12, 1e12, 1e12};
  uint64_t mem[3] = {6ull << 20, 64 * GIB, 64 * GIB};
  strata_cluster_t c = node(3, f, mem, NULL, 5, 5, NULL, 0);
  planner_equals_exhaustive(c, m, 8, "a fast device with little memory");
  strata_cluster_free(c);
  strata_model_free(m);
}

Test(plan, planner_equals_exhaustive_on_eight_devices_in_two_islands) {
  strata_model_t m = small_gpt(6);
  double f[8];
  uint64_t mem[8];
  int island[8];
  for (int i = 0; i < 8; i++)
    f[i] = 1e12, mem[i] = 64 * GIB, island[i] = i / 4;
  strata_cluster_t c = node(8, f, mem, island, 100, 3, NULL, 0);
  planner_equals_exhaustive(c, m, 16, "8 devices in 2 islands");
  strata_cluster_free(c);
  strata_model_free(m);
}

/* ---- heterogeneous devices ---- */

/* The blocks of the best layout's rank on `fast_device` and of the other rank (over all their virtual stages). */
static void blocks_per_rank(strata_plan_t p, int *fast_blocks, int *slow_blocks, int fast_device) {
  struct strata_plan_candidate k;
  OK(strata_plan_candidate(p, 0, &k));
  cr_assert_eq(strata_layout_pp(k.layout), 2, "the best layout is a pipeline of the two devices");
  const int *split = strata_layout_split(k.layout);
  const int S = strata_layout_stages(k.layout);
  int d0;
  OK(strata_layout_device(k.layout, 0, 0, 0, &d0));
  int blocks[2] = {0, 0};
  for (int j = 0; j < S; j++)
    /* the first stage also holds the embedding, the last the head: count blocks only */
    blocks[j % 2] += split[j] - (j == 0) - (j == S - 1);
  *fast_blocks = blocks[d0 == fast_device ? 0 : 1];
  *slow_blocks = blocks[d0 == fast_device ? 1 : 0];
}

/* Two devices of 2:1 speed: about 2:1 blocks, and a step faster than the even split's. */
Test(plan, two_to_one_speed_gives_two_to_one_layers) {
  strata_model_t m = small_gpt(12);
  double f[2] = {2e12, 1e12};
  uint64_t mem[2] = {64 * GIB, 64 * GIB};
  strata_cluster_t c = node(2, f, mem, NULL, 50, 50, NULL, 0);
  struct strata_plan_options o = {.batch = 32, .top = 3};
  strata_plan_t p;
  OK(strata_plan_search(c, m, &o, &p));
  int fb, sb;
  blocks_per_rank(p, &fb, &sb, 0);
  cr_assert(fb + sb == 12 && fb >= 7 && fb <= 9, "fast %d blocks, slow %d (2:1 is 8:4)", fb, sb);
  /* the even split of the same layout predicts slower */
  struct strata_plan_candidate k;
  OK(strata_plan_candidate(p, 0, &k));
  const int S = strata_layout_stages(k.layout);
  int even[8] = {0};
  cr_assert_leq(S, 8);
  for (int j = 0; j < S; j++)
    even[j] = 14 / S + (j < 14 % S);
  struct strata_layout_desc d = {.pp = 2, .devices = strata_layout_devices(k.layout), .ndevices = 2, .split = even,
                                 .nsplit = S, .schedule = strata_layout_schedule(k.layout),
                                 .microbatches = strata_layout_microbatches(k.layout),
                                 .virtual_stages = strata_layout_virtual_stages(k.layout)};
  strata_layout_t l;
  OK(strata_layout_new(&d, &l));
  struct strata_sim_options so = {.batch = 32};
  struct strata_sim_result r;
  OK(strata_simulate(c, m, l, &so, &r));
  cr_assert_lt(k.step_s, r.step_s * 0.9, "planned %g s, even split %g s", k.step_s, r.step_s);
  strata_sim_result_destroy(&r);
  strata_layout_free(l);
  strata_plan_free(p);
  strata_cluster_free(c);
  strata_model_free(m);
}

/* The fast device cannot hold its 2:1 share: it gets fewer blocks, and what it gets fits. */
Test(plan, a_device_too_small_for_its_share_gets_fewer_layers) {
  strata_model_t m = small_gpt(12);
  /* a block's parameters, gradients and moments are 16 bytes a parameter: room for about 5 of them */
  struct strata_layer_info blk;
  OK(strata_model_layer(m, 1, &blk));
  uint64_t small = (uint64_t)(16.0 * blk.params * 5.5 / STRATA_PLAN_MEMORY_USABLE);
  double f[2] = {2e12, 1e12};
  uint64_t mem[2] = {small, 64 * GIB};
  strata_cluster_t c = node(2, f, mem, NULL, 50, 50, NULL, 0);
  struct strata_plan_options o = {.batch = 4, .top = 3};
  strata_plan_t p;
  OK(strata_plan_search(c, m, &o, &p));
  int fb, sb;
  blocks_per_rank(p, &fb, &sb, 0);
  cr_assert(fb < 8 && fb >= 1, "fast but small: %d blocks (its speed alone would give 8)", fb);
  struct strata_plan_candidate k;
  OK(strata_plan_candidate(p, 0, &k));
  /* what the simulator says each device holds at its peak fits it */
  struct strata_sim_options so = {.batch = 4};
  struct strata_sim_result r;
  OK(strata_simulate(c, m, k.layout, &so, &r));
  cr_assert(r.fits);
  for (int q = 0; q < 2; q++) {
    int d;
    OK(strata_layout_device(k.layout, 0, q, 0, &d));
    cr_assert_leq((double)r.memory[q], (double)mem[d] * STRATA_PLAN_MEMORY_USABLE, "rank %d holds %llu of %llu", q,
                  (unsigned long long)r.memory[q], (unsigned long long)mem[d]);
  }
  strata_sim_result_destroy(&r);
  strata_plan_free(p);
  strata_cluster_free(c);
  strata_model_free(m);
}
