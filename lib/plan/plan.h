/* SPDX-License-Identifier: MIT */
/* plan/plan.h — internals shared by the cost model, the simulator and the planner. */
#ifndef STRATA__PLAN_PLAN_H
#define STRATA__PLAN_PLAN_H

#include <stdarg.h>

#include <strata/plan.h>

/*
** A cluster: `nodes` copies of one node of `k` devices. Device g is local
** device g % k of node g / k. Matrices are k x k, row-major.
*/
struct strata_machine {
  int nodes, k;
  char **names;                    /* [k] */
  struct strata_device_cost *cost; /* [k] */
  struct strata_gemm_shape **shapes; /* [k] the copies cost[i].shapes points to (NULL: none) */
  int *id;                         /* [k] the node's own index (topology GPU) */
  double *gbps, *lat;              /* [k x k] GB/s, us */
  int *kind;                       /* [k x k] enum strata_path_kind */
  int *island;                     /* [k] */
  int *uplink;                     /* [k] shared PCIe uplink id, -1 for none */
  double *uplink_gbps;             /* [k] */
  double net_gbps;                 /* GB/s per interface */
  int nics;                        /* interfaces per node */
  double net_lat;                  /* us */
  double cpu_cores;                /* host cores shared by the devices with cpu_threads (0: none) */
  int ar_n;                        /* all-reduce sizes measured per pair (0: collectives from gbps and lat) */
  double ar_floats[STRATA_PLAN_ALLREDUCE_SIZES]; /* their floats, ascending */
  double *ar_s;                    /* [k x k x ar_n] seconds of a two-member all-reduce of each size */
  int uniform;                     /* every device alike */
  char *desc;
  char **warnings;
  int nwarnings;
};

/* The link between cluster devices a and b (NET across nodes). */
void strata__cluster_link(const struct strata_machine *c, int a, int b, double *gbps, double *lat_us, int *kind);
/* Seconds of an all-reduce of `floats` over a pair joined by a link of `gbps` GB/s and `lat_us`: a ring of
** two, two steps of half the floats each. */
static inline double strata__pair_allreduce_s(double floats, double gbps, double lat_us) {
  return 2.0 * (floats * 4 / 2 / (gbps * 1e9) + lat_us * 1e-6);
}
/* Seconds of an all-reduce of `floats` with cluster devices a and b as its only members: from the measured
** sizes where the node has them (linear between them, and beyond the largest along its last piece),
** else from the link's bandwidth and latency. */
double strata__cluster_pair_allreduce(const struct strata_machine *c, int a, int b, double floats);

/*
** The simulator's costing of one layout, exposed to the planner so that it
** can prune by memory and balance a split with the same numbers.
** layer_time: seconds of forward (fwd) and backward (bwd) of layer l for
** `rows` samples on the tp group of rank r of replica 0, tp joins included.
*/
double strata__plan_layer_time(const struct strata_machine *c, strata_model_t model, strata_layout_t layout, int rank,
                               int layer, int64_t rows, int backward);
/* Seconds of a forward and a backward of every layer of `model` for `rows` samples on one device of cost w, op by
** op as the simulator costs them but at no stage factor, and one wait: what a stage probe's measured time
** (strata_calibrate_model) is set against. */
double strata__plan_ops_time(const struct strata_device_cost *w, strata_model_t model, int64_t rows);
/* Add to the list *v (*n entries, the caller's to free(); NULL and 0 to start one) the GEMMs not yet in it that
** the simulator costs layer work of `model` with on a t-way tensor-parallel stage for micro-batches of `rows`
** samples (every layer, forward and backward), their `flops` 0. */
int strata__plan_gemm_shapes(strata_model_t model, int t, int64_t rows, struct strata_gemm_shape **v, int *n);
/* Memory a device of rank `rank` needs with `split` (layers per virtual stage)
** given the micro-batches in flight on each of its stages (inflight[stage]). */
uint64_t strata__plan_rank_memory(strata_model_t model, strata_layout_t layout, const int *split, const int *inflight,
                                  int64_t rows, int rank);

#endif /* STRATA__PLAN_PLAN_H */
