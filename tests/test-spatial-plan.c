/* SPDX-License-Identifier: MIT */
/* test-spatial-plan.c — spatial slabs in the planner's one memory model and the simulator (issue 34, item 4): what a
** slab's device needs is the trainer's plan to the byte, the simulated joins move the bytes the trainer's trace shows,
** and strata-plan proposes slabs for a cnn whose activations no device holds whole — a layout that then trains there. */
#include "spatial.h"

#include <jansson.h>
#include <unistd.h>

#define MIB (1024.0 * 1024.0)

static strata_dataset_t small_ds, hires_ds;

static void setup(void) {
  tc_spatial_data(64, "4", "host", &small_ds, &hires_ds);
}

static void teardown(void) {
  strata_dataset_free(small_ds);
  strata_dataset_free(hires_ds);
}

TestSuite(spatial_plan, .init = setup, .fini = teardown, .timeout = 300);

static struct strata_train_options options(int batch, int spatial) {
  struct strata_train_options o;
  strata_train_options_default(&o);
  o.batch = batch;
  o.steps = 1;
  o.spatial = spatial;
  return o;
}

/* n identical devices of `memory` bytes, 10 GB/s apart. */
static strata_machine_t machine(int n, uint64_t memory) {
  struct strata_device_cost cost[4];
  double g[16], lat[16];
  for (int i = 0; i < n; i++) {
    cost[i] = (struct strata_device_cost){.flops = 1e11, .mem_gbps = 20, .memory = memory, .launch_us = 5};
    for (int j = 0; j < n; j++)
      g[i * n + j] = i == j ? 0 : 10, lat[i * n + j] = i == j ? 0 : 10;
  }
  struct strata_node_desc d = {.devices = n, .cost = cost, .gbps = g, .latency_us = lat};
  strata_machine_t c;
  OK(strata_machine_new(&d, NULL, &c));
  return c;
}

/*
** One memory model: strata_plan_memory of a spatial layout is the most any slab's device needs, and that is, to the
** byte, what the trainer of the layout planned for the device of that slab (the others plan at most as much): 2 slabs,
** 3 uneven slabs (5, 5 and 6 rows of the first map; every slab holds the whole image), 2 slabs x dp 2 with 2
** micro-batches, 2 stages of 2 slabs (each rank's own), and cnn-hires with 2
** and 4, and 2 x pp 2.
*/
Test(spatial_plan, the_planner_predicts_the_slabs_memory_plan) {
  strata_model_t small = tc_slab_cnn(), hires;
  OK(strata_model_from_preset("cnn-hires", &hires));
  const struct {
    strata_model_t m;
    strata_dataset_t ds;
    const char *layout;
    int batch;
  } cases[] = {
      {small, small_ds, "{\"dp\": 1, \"spatial\": 2, \"microbatches\": 1, \"split\": [4]}", 3},
      {small, small_ds, "{\"dp\": 1, \"spatial\": 3, \"microbatches\": 2, \"split\": [4]}", 2},
      {small, small_ds, "{\"dp\": 2, \"spatial\": 2, \"microbatches\": 2, \"split\": [4]}", 2},
      {small, small_ds, "{\"pp\": 2, \"spatial\": 2, \"microbatches\": 2, \"split\": [2, 2]}", 2},
      {hires, hires_ds, "{\"dp\": 1, \"spatial\": 2, \"microbatches\": 1, \"split\": [6]}", 1},
      {hires, hires_ds, "{\"pp\": 2, \"spatial\": 2, \"microbatches\": 4, \"split\": [3, 3]}", 1},
      {hires, hires_ds, "{\"dp\": 1, \"spatial\": 4, \"microbatches\": 1, \"split\": [6]}", 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    strata_layout_t l;
    OK(strata_layout_from_json(cases[i].layout, "spatial layout", &l));
    const int n = strata_layout_spatial(l), dp = strata_layout_dp(l);
    struct strata_train_options o = options(cases[i].batch, n);
    strata_trainer_t tr;
    OK(strata_trainer_new_layout(cases[i].m, cases[i].ds, &o, l, NULL, &tr));
    struct strata_train_report rep;
    OK(strata_trainer_report(tr, &rep));
    cr_assert_eq(rep.devices, n * dp * strata_layout_pp(l), "%s: %d devices", cases[i].layout, rep.devices);
    for (int k = 0; k < strata_layout_pp(l); k++) { /* each pipeline rank: its slabs' devices of every replica */
      uint64_t predicted, most = 0;
      OK(strata_plan_memory(cases[i].m, l, (int64_t)o.batch * dp * strata_layout_microbatches(l), k, &predicted));
      for (int r = 0; r < dp; r++)
        for (int q = 0; q < n; q++) {
          int dv = -1;
          OK(strata_layout_device(l, r, k, q, &dv));
          for (int d = 0; d < rep.devices; d++) {
            if (rep.dev[d].device != dv)
              continue;
            cr_assert_leq(rep.dev[d].planned_bytes, predicted, "%s: device %d planned %llu, over the prediction %llu",
                          cases[i].layout, dv, (unsigned long long)rep.dev[d].planned_bytes,
                          (unsigned long long)predicted);
            most = rep.dev[d].planned_bytes > most ? rep.dev[d].planned_bytes : most;
          }
        }
      cr_assert_eq(most, predicted, "%s: rank %d's busiest slab planned %llu bytes, the planner predicts %llu",
                   cases[i].layout, k, (unsigned long long)most, (unsigned long long)predicted);
    }
    strata_trainer_free(tr);
    strata_layout_free(l);
  }
  strata_model_free(small);
  strata_model_free(hires);
}

/* The sum over the events named `name` on track `tid` of a trace (the trainer's or the simulator's, `predicted`; the
** trainer's of step 1 only) of their args' bytes, or with `seconds` of their durations. */
static double trace_sum(const char *path, const char *name, int tid, int predicted, int seconds) {
  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  cr_assert(root, "%s: %s", path, err.text);
  json_t *ev = json_object_get(root, "traceEvents"), *e;
  size_t k;
  double sum = 0;
  json_array_foreach(ev, k, e) {
    json_t *args = json_object_get(e, "args");
    if (!json_is_string(json_object_get(e, "name")) || strcmp(json_string_value(json_object_get(e, "name")), name) ||
        json_integer_value(json_object_get(e, "tid")) != tid || (!seconds && !args))
      continue;
    if (!predicted && json_integer_value(json_object_get(args, "step")) != 1)
      continue;
    sum += seconds ? json_number_value(json_object_get(e, "dur")) * 1e-6
                   : json_number_value(json_object_get(args, "bytes"));
  }
  json_decref(root);
  return sum;
}

static double trace_bytes(const char *path, const char *name, int tid, int predicted) {
  return trace_sum(path, name, tid, predicted, 0);
}

/* The seconds of the simulator's events `name` of track `tid` in its trace. */
static double trace_seconds(const char *path, const char *name, int tid) { return trace_sum(path, name, tid, 1, 1); }

/*
** The simulator's joins of a slab are the trainer's: cnn-hires in 2 slabs, 2 micro-batches of one image. The first
** slab's TP_JOIN_FORWARD of a micro-batch moves, in the trainer's trace, the halo exchanges of conv.1-4 and the
** averages' join; the simulator's moves the same bytes (2 slots a slab x the halo rows of each layer, and the 32
** averages: 131200). The backward's two micro-batches together move the halo gradients twice and the gradients once
** (the last one sums them): the simulator's two TP_JOIN_BACKWARDs add up to the same. The predicted step of the slabs is
** under one device's and over half of it (each slab does half the convolutions, then waits for the joins).
*/
Test(spatial_plan, the_simulator_costs_the_joins_the_trainer_makes) {
  strata_model_t m;
  OK(strata_model_from_preset("cnn-hires", &m));
  strata_layout_t l, one;
  OK(strata_layout_from_json("{\"dp\": 1, \"spatial\": 2, \"microbatches\": 2, \"split\": [6]}", "spatial", &l));
  OK(strata_layout_from_json("{\"dp\": 1, \"pp\": 1, \"microbatches\": 2, \"split\": [6]}", "one", &one));
  char real[] = "/tmp/strata-spatial-real-XXXXXX", sim[] = "/tmp/strata-spatial-sim-XXXXXX";
  int fd = mkstemp(real);
  cr_assert_geq(fd, 0);
  close(fd);
  fd = mkstemp(sim);
  cr_assert_geq(fd, 0);
  close(fd);
  struct strata_train_options o = options(1, 2);
  strata_trainer_t tr;
  OK(strata_trainer_new_layout(m, hires_ds, &o, l, real, &tr));
  OK(strata_trainer_step(tr, NULL));
  strata_trainer_free(tr); /* (writes the trace) */
  strata_machine_t c = machine(2, (uint64_t)(16 * 1024 * MIB));
  struct strata_sim_options so = {.batch = 2, .trace = sim};
  struct strata_sim_result r2, r1;
  OK(strata_simulate(c, m, l, &so, &r2));
  so.trace = NULL;
  OK(strata_simulate(c, m, one, &so, &r1));
  const double fwd = trace_bytes(real, "TJF0.0", 1, 0), sfwd = trace_bytes(sim, "TJF0.0", 1, 1);
  const double bwd = trace_bytes(real, "TJB0.0", 1, 0) + trace_bytes(real, "TJB0.1", 1, 0);
  const double sbwd = trace_bytes(sim, "TJB0.0", 1, 1) + trace_bytes(sim, "TJB0.1", 1, 1);
  cr_assert_eq(fwd, 131200, "the trainer's forward joins of a micro-batch: %.0f bytes", fwd);
  cr_assert_eq(sfwd, fwd, "the simulator's forward joins %.0f bytes, the trainer's %.0f", sfwd, fwd);
  cr_assert_eq(sbwd, bwd, "the simulator's backward joins %.0f bytes, the trainer's %.0f", sbwd, bwd);
  /* the backward moves more (the same halo rows, and the gradients) but its halo gradients' exchanges are in flight
  ** while the weights' gradients are computed, and the gradient sums while it goes on: its two TJBs take less than
  ** the forward's one, whose exchanges only the copies of a slab's own rows cover (without the overlaps: 2.8x it) */
  const double tjf = trace_seconds(sim, "TJF0.0", 1),
               tjb = trace_seconds(sim, "TJB0.0", 1) + trace_seconds(sim, "TJB0.1", 1);
  cr_assert(tjb < tjf && tjf > 0, "the simulator's backward joins %g s, its forward's %g s", tjb, tjf);
  cr_assert(r2.step_s < r1.step_s && r2.step_s > 0.5 * r1.step_s, "2 slabs' step %.6f s, one device's %.6f s",
            r2.step_s, r1.step_s);
  cr_assert_gt(r2.comm_share, 0);
  strata_sim_result_destroy(&r2);
  strata_sim_result_destroy(&r1);
  unlink(real);
  unlink(sim);
  strata_machine_free(c);
  strata_layout_free(l);
  strata_layout_free(one);
  strata_model_free(m);
}

/*
** Devices of 48 MiB: no layout of whole 512 x 512 images fits one (conv.0 alone keeps 20 MiB an image, and the
** buffers of a stage around it), so strata-plan proposes slabs — every candidate spatial, the best 2 slabs on the 2
** devices —; its prediction of the busiest slab fits, the one device's does not; and the proposed layout, under a
** 48 MiB limit on 2 host devices, trains a step there, while one device is refused before it.
*/
Test(spatial_plan, slabs_proposed_when_no_device_holds_an_image_and_they_train) {
  setenv("STRATA_DEVICE_MEMORY_LIMIT", "48M", 1);
  strata_model_t m;
  OK(strata_model_from_preset("cnn-hires", &m));
  const uint64_t cap = (uint64_t)(48 * MIB);
  strata_machine_t c = machine(2, cap);
  struct strata_plan_options po = {.batch = 4};
  strata_plan_t p;
  OK(strata_plan_search(c, m, &po, &p));
  cr_assert_geq(strata_plan_count(p), 1);
  for (int i = 0; i < strata_plan_count(p); i++) {
    struct strata_plan_candidate cand;
    OK(strata_plan_candidate(p, i, &cand));
    cr_assert_eq(strata_layout_spatial(cand.layout), 2, "candidate %d is not 2 slabs", i);
  }
  struct strata_plan_candidate best;
  OK(strata_plan_candidate(p, 0, &best));
  uint64_t slab, whole;
  OK(strata_plan_memory(m, best.layout, 4, 0, &slab));
  strata_layout_t one;
  OK(strata_layout_from_json("{\"dp\": 1, \"pp\": 1, \"microbatches\": 4, \"split\": [6]}", "one", &one));
  OK(strata_plan_memory(m, one, 4, 0, &whole));
  cr_assert_leq((double)slab, 0.9 * (double)cap, "a slab needs %.1f MiB", (double)slab / MIB);
  cr_assert_gt((double)whole, 0.9 * (double)cap, "one device needs %.1f MiB", (double)whole / MIB);
  /* trained as planned: one image a micro-batch (batch 4 over the layout's micro-batches) */
  struct strata_train_options o = options((int)(4 / strata_layout_microbatches(best.layout)), 2);
  strata_trainer_t tr;
  OK(strata_trainer_new_layout(m, hires_ds, &o, best.layout, NULL, &tr));
  struct strata_step_stats st;
  OK(strata_trainer_step(tr, &st));
  cr_assert(st.loss > 0 && st.loss < 10, "loss %g", st.loss);
  strata_trainer_free(tr);
  o = options(1, 0);
  o.accum = 4;
  tr = NULL;
  cr_assert_eq(strata_trainer_new(m, hires_ds, &o, &tr), STRATA_ERR_DEVICE_MEMORY);
  cr_assert(strstr(strata_last_error(), "largest activation is conv.0's"), "%s", strata_last_error());
  strata_layout_free(one);
  strata_plan_free(p);
  strata_machine_free(c);
  strata_model_free(m);
}
