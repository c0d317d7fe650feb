/* SPDX-License-Identifier: MIT */
/* plan/plan.h — internals shared by the cost model, the simulator and the planner. */
/*
** lib/plan/, one concept a file:
**   devices.c           the table of GPU models (peaks and their sources)
**   machine.c           the machine: N copies of a node (devices with costs, links, islands, uplinks), a network
**   sim-cost.c          the cost of pieces: a layer's parts op by op, a tp group's slowest member and its joins
**   sim-memory.c        the memory model: what a device holds for its stages
**   sim.c               the simulator: a discrete-event run of the executor's action lists
**   sim-trace.c         the simulator's predicted trace (Chrome/Perfetto)
**   sim-spatial.c       a spatial slab's costs: its share of the work, halo exchanges, averages, gradient sums
**   search.c            the planner's search, in numbered passes (memory modes included)
**   search-groups.c     its pass 1: tensor-parallel groups inside islands, and the tp degrees tried
**   min-devices.c       what no device count changes (a model that can never fit, the most devices a layout
**                       uses), and the machines strata_plan_min_devices probes
**   search-result.c     the search's result: candidates kept best first, their reasons, the explanation
**   search-bound.c      a lower bound on a layout's simulated step: what the search skips as dominated
**   search-spatial.c    spatial groups of a cnn's slabs, proposed when no other layout fits
**   calibrate.c         this machine's devices and links measured, written as a calibration file
**   calibrate-probes.c  the calibration's stage and pipeline probes
**   calibrate-read.c    a calibration file read into a machine
*/
#ifndef STRATA__PLAN_PLAN_H
#define STRATA__PLAN_PLAN_H

#include <stdarg.h>

#include <strata/plan.h>

#include "model/stage.h"

struct json_t; /* jansson's json_t */

/*
** A machine: `nodes` copies of one node of `k` devices. Device g is local
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

/* The memory of a GPU the table of models has no row for, by its PCI id (devices.c): 1 with *memory and the
** figure's source (static), 0 when unknown. */
int strata__gpu_memory_by_pci(unsigned vendor_id, unsigned device_id, uint64_t *memory, const char **source);

/*
** Machine c as it computes in `precision`: a machine of its own costs (strata__plan_cost_in of each device's)
** that shares every other array with c, so c must outlive it; freed with strata__machine_in_free. The simulator
** and the planner run on it, so every cost they read is the precision's. STRATA_ERR_NOT_FOUND naming the device
** and the calibration field when a device has no bf16 GEMM speed (bf16_flops 0) for a bf16 view.
*/
int strata__machine_in(const struct strata_machine *c, int precision, struct strata_machine **out /* OUT */);
void strata__machine_in_free(struct strata_machine *view);

/* Whether the node's devices differ by name (a mixed box). */
int strata__machine_mixed(const struct strata_machine *c);

/* The link between machine devices a and b (NET across nodes). */
void strata__machine_link(const struct strata_machine *c, int a, int b, double *gbps, double *lat_us, int *kind);
/* Seconds of an all-reduce of `floats` over a pair joined by a link of `gbps` GB/s and `lat_us`: a ring of
** two, two steps of half the floats each. */
static inline double strata__pair_allreduce_s(double floats, double gbps, double lat_us) {
  return 2.0 * (floats * 4 / 2 / (gbps * 1e9) + lat_us * 1e-6);
}
/* Seconds of an all-reduce of `floats` with machine devices a and b as its only members: from the measured
** sizes where the node has them (linear between them, and beyond the largest along its last piece),
** else from the link's bandwidth and latency. */
double strata__machine_pair_allreduce(const struct strata_machine *c, int a, int b, double floats);

/* ---- the cost of pieces (sim-cost.c) ---- */

/* What a part of a layer's step costs on one slice: seconds of compute, and its joins (bytes, count). */
enum strata__plan_part {
  STRATA__PLAN_PART_FWD,    /* the forward */
  STRATA__PLAN_PART_INPUT,  /* the backward's input gradient (a split backward's first part) */
  STRATA__PLAN_PART_WEIGHT, /* the backward's weight gradient (its second part) */
  STRATA__PLAN_PART_FULL,   /* the whole backward */
  STRATA__PLAN_PART_CORE,   /* a block's attention core forward (selective recomputation) */
  /* a folded split backward's parts (model/stage.h strata__stage_folds: a GPT's or llama's layers without
  ** recomputation, ZeRO-2/3 or seqpar): BI also computes the MLP's output projection's and the norms' weight
  ** gradients and copies what W reads over what only BI read; W the other weight gradients */
  STRATA__PLAN_PART_INPUT_FOLD,
  STRATA__PLAN_PART_WEIGHT_FOLD
};
struct strata__plan_work {
  double s;
  double join_bytes;
  int joins;
};

/*
** What device w costs computing in `precision` (enum strata_dtype): w itself for STRATA_FLOAT32; for
** STRATA_BFLOAT16 its bf16 GEMM speeds in place of the fp32 ones (flops, ngemm, gemm_n, gemm_flops), no
** measured shapes (timed in fp32), and the ops its nominal figures cost by bytes at bf16 bytes (op_ns from the
** memory bandwidth); measured op speeds are kept. Applied twice, the same as once.
*/
struct strata_device_cost strata__plan_cost_in(const struct strata_device_cost *w, int precision);
/* The tp group of (replica, rank): its devices (replica-major, rank, tp rank in the layout's list) and their count. */
int strata__plan_group_of(strata_layout_t l, int replica, int rank, const int **devs);
/* The slowest member of a group of t devices, as a synchronous group runs at its pace. */
struct strata_device_cost strata__plan_group_cost(const struct strata_machine *c, const int *devs, int t);
/* Whether every tp group of the first `replicas` replicas is of devices that cost alike. */
int strata__plan_groups_alike(const struct strata_machine *c, strata_layout_t l, int replicas);
/* Seconds of op `op` over `elems` elements: its measured speed, else (a bias op of an older calibration)
** the add's, else its bytes at the memory bandwidth. */
double strata__plan_op_s(const struct strata_device_cost *w, int op, double elems);
/* One part of layer `layer`'s step on one slice of a t-way stage whose slowest member costs `w`, for `rows`
** samples: a GPT's layers op by op, other layers from the model's profile; its compute at the device's stage
** factor (what its ops cost in sequence in a stage). */
struct strata__plan_work strata__plan_layer_part(const struct strata_device_cost *w, strata_model_t model, int t,
                                                 int layer, int64_t rows, enum strata__plan_part part);
/* Seconds of `joins` all-reduces of `bytes` in all (each the mean size) over the tp group devs of t members. */
double strata__plan_joins_s(const struct strata_machine *c, const int *devs, double bytes, int joins, int t);

/*
** A spatial slab's costs (sim-spatial.c): slab `slab` of n of each image through layers [first, last), for `rows`
** images, on a device of cost w in the group devs: its forward and backward compute (each layer's work at the slab's share of its output rows, the
** rows it copies in and out), the joins of one micro-batch's forward (jf bytes in nf joins: the halo exchanges and the
** averages') and backward (jb in nb: the halo gradients'), and the step's gradient sums over the slabs (grad_s
** seconds, grad_bytes; the weights are whole on every slab, params of them); the slab's share of its last layer's
** output (what it sends the same slab of the next stage) and of its first layer's input (the gradient sent back).
*/
struct strata__plan_spatial {
  double f, b;
  double out_share, in_share;
  double jf, jb, halo_bytes;
  int nf, nb;
  double grad_s, grad_bytes, params;
  double hidden_f;       /* seconds of the forward's halo exchanges the copies of the slab's own rows cover */
  double hidden_b;       /* seconds of the backward's halo exchanges its weight gradients cover */
  double grad_exposed_s; /* seconds of the gradient sums left when the backward ends (the rest overlap it) */
};
int strata__plan_spatial_stage(const struct strata_machine *c, const struct strata_device_cost *w,
                               strata_model_t model, int first, int last, int n, int slab, int64_t rows,
                               const int *devs, struct strata__plan_spatial *out);

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

/* ---- the memory model (sim-memory.c) ---- */

/* The first layer of virtual stage j under `split`. */
int strata__plan_stage_first(const int *split, int j);
/*
** The planner's side of the one memory model (model/stage.h): a layout's
** stages are cut and placed as the trainer of that layout cuts and places
** them, so the bytes the planner predicts are the bytes its memory plan
** checks. The cut of a tp-t rank's slice (a spatial layout's: slab 0 of t,
** the caller sets its rank); whether the schedule splits
** backward; where virtual stage j runs, its schedule keeping inflight[j]
** micro-batches in flight and, of its device's stages together, inflight[S + j]
** (S stages: the array holds 3S) with their BI done and their W pending
** (strata__plan_peaks_of; the device's dsave regions, of one size), and
** inflight[2S + j] output buffers (strata_schedule_peak_handoff).
*/
/* A split backward's dsave regions of the rank that holds stage g of schedule `sch` (g % S the layout's stage), as
** the trainer holds them: as many as the rank's list keeps a BI done and its W pending over its stages together, each
** of the largest of their sizes; counted on the rank's first stage (0 for its others, and without a split backward). */
uint64_t strata__plan_dsave_bytes(strata_schedule_t sch, int g, strata_model_t model, strata_layout_t layout,
                                  const int *split, int64_t rows, const struct strata__cut *cut);
struct strata__cut strata__plan_cut(strata_layout_t layout, int t);
int strata__plan_split_backward(strata_layout_t layout);
/* The pipeline rank of virtual stage j: the schedule's placement (j % pp, or ZB-V's V). */
int strata__plan_stage_rank(strata_layout_t layout, int j);
void strata__plan_stage_place(strata_layout_t layout, const int *inflight, int j, struct strata__stage_place *p);
/* inflight[3S] of schedule `sch` of S stages: each stage's peak in flight, its peak pending, its handoff (above). */
void strata__plan_peaks_of(strata_schedule_t sch, int *inflight);
/*
** The micro-batches in flight on each stage of each device of a schedule (strata_schedule_generate's, a device a
** rank), at the points of the device's list that no other point of it matches or exceeds on every stage: the
** device's peak, whatever a micro-batch of each stage costs, is the largest of these points weighed by those costs
** (strata_schedule_device_peak's figure). Point x of device d: pts[x * v + q] for x in [at[d], at[d + 1]), its
** stage q in stage order, v stages a device.
*/
struct strata__plan_peaks {
  int v;
  int *at;                          /* [devices + 1] */
  int *pts;
};
int strata__plan_peaks_new(strata_schedule_t sch, struct strata__plan_peaks **out /* OUT */);
void strata__plan_peaks_free(struct strata__plan_peaks *pk);
/* Memory a device of rank `rank` needs with `split` (layers per virtual stage) given the micro-batches in flight on
** each of its stages (inflight[stage]) and, for a split backward, its micro-batches with a W pending
** (inflight[S + stage], S the layout's stages: the array holds 2S counts); with the schedule's peaks `pk` (NULL: each stage's peak added up), a rank of
** several stages holds the micro-batches its list keeps in flight at once. */
uint64_t strata__plan_rank_memory(strata_model_t model, strata_layout_t layout, const int *split, const int *inflight,
                                  const struct strata__plan_peaks *pk, int64_t rows, int rank);

/* ---- what no device count changes (min-devices.c) ---- */

/* Whether `model` cuts t ways for tensor parallelism (heads, d_ff, widths, channels), by the layout's own check. */
int strata__plan_tp_divides(strata_model_t model, int t);
/*
** For the smallest device count (strata_plan_min_devices): 0 and *most, the
** most devices any layout of `model` at this batch can use on devices like
** c's first (tp up to the largest island that the model divides, dp up to
** the batch, pp up to the layers); or STRATA_ERR_DEVICE_MEMORY with the
** reason in one line when no count of them can ever fit — a fixed tp larger
** than any island or that the model does not divide, or a layer that alone
** outgrows one device at its smallest (largest tp, the optimizer sharded
** over one replica a sample, one sample in flight).
*/
int strata__plan_reach(const struct strata_machine *c, strata_model_t model, const struct strata_plan_options *o,
                       int64_t *most);
/*
** The machines strata_plan_min_devices probes: n devices like c's first,
** in copies of c's node. Up to 256 of them on a one-node machine, one node
** of n; past that, nodes of a power of two of devices joined by the network
** (where c's node is not a power of two, its islands are cut at their
** edges), so that a probe's links stay one node's k x k; on a machine of
** several nodes, its own nodes. probe_unit: what a count of about n is a
** multiple of; probe_node: the devices of one node of a probe of n (a
** multiple of probe_unit); probe_round: n rounded up to a multiple.
*/
int strata__plan_probe_unit(const struct strata_machine *c, int64_t n);
int strata__plan_probe_node(const struct strata_machine *c, int n);
int64_t strata__plan_probe_round(const struct strata_machine *c, int64_t n);

/* ---- the simulator's engine (sim.c) and its trace (sim-trace.c) ---- */

/*
** What every stage of the schedule costs: seconds per action, bytes per
** transfer. A stage is one slice on its own device, and its joins are the
** TP_JOIN actions of the executor's lists; a stage no device holds (a slice
** beyond its rank's tp degree) costs nothing. In symmetric mode on like
** groups a stage is its whole group, costed at its slowest member, the
** joins inside its F and B.
*/
struct strata__plan_stage_cost {
  double f, b, bi, w, opt;          /* compute (joins included when inline) */
  double rc;                        /* RECOMPUTE: the forward work the recompute mode reruns (joins as f's) */
  double f_comm, b_comm, bi_comm, rc_comm; /* the inline joins' part */
  double tjf, tjb;                  /* TP_JOIN_FORWARD / _BACKWARD: the joins of one micro-batch's F, B or BI */
  double tjf_bytes, tjb_bytes;
  double tjw, tjw_bytes;            /* the TP_JOIN_BACKWARD after a W (recomputing): its recomputation's joins */
  double act_bytes;                 /* kept per micro-batch per device */
  double out_bytes, in_bytes;       /* per micro-batch: output forward, input gradient back */
  double grad_bytes;                /* gradients per device, for the collectives */
  double static_bytes;
  uint64_t capacity;                /* memory of the stage's device (its group's smallest) */
  const int *devs;                  /* the tp group */
  int dev;                          /* the machine device the stage's schedule device stands for */
  int tp;
  int threads;                      /* host cores its compute takes (0: none) */
  int layers;                       /* ZeRO-3: how many gathers a pass of it makes, one a layer */
};

/* One simulation's state: the schedule's devices and stages, what each has finished and when, the resources
** transfers hold, the heap of devices ready to act (its entries and the host-core runs are sim.c's own), and
** the events of the trace (sim-trace.c's). */
struct strata__plan_engine {
  strata_schedule_t s;
  int P, S, M, R, chain, K;
  int T, Rdp;                       /* tp slices per replica, replicas (R = chains = Rdp x T) */
  const double *unit;               /* unit costs by kind, or NULL */
  const struct strata_machine *c;
  struct strata__plan_stage_cost *sc; /* [S], NULL with unit costs */
  int dp;                           /* replicas the collectives span (layout dp, >= R) */
  int zero2;                        /* ZeRO-2: GRAD_SCATTER stands for an all-reduce of every micro-batch's
                                    ** gradients, run in the backward (executor.c's shard_ready) */
  int zero3;                        /* ZeRO-3: a PARAM_GATHER of a micro-batch gathers the stage's weights for
                                    ** the F, B, BI or W after it, layer by layer on the device's comm stream
                                    ** (lib/train/gather.c): the pass starts once the first layer's are in and
                                    ** ends no sooner than the last layer's */
  double *gather_first, *gather_end; /* [S]: the last PARAM_GATHER's first layer in, and all of it in (< 0: none) */
  double *finish, *arrive;          /* [K x S x (M + 1)] */
  double *clock, *sender_free, *comm_free, *compute, *comm, *mem_now, *mem_peak;
  int *next, *parked, *bw_done;
  double *bw_last;
  int *coll_count;                  /* [3 x T x chain] */
  double *coll_max, *coll_fin;
  int *tj_count;                    /* [keys] slices arrived at a TP_JOIN (keyed by the slice-0 stage) */
  double *tj_max;
  int *last_opt;                    /* [P] index of the device's last OPTIMIZER, -1 for none */
  int opt_arrived;                  /* OPTIMIZERs reached: the update waits for every held stage's norm */
  int held;                         /* stages a device holds (all but a slice beyond its rank's tp degree) */
  double opt_max;
  struct strata__plan_shared_run *run; /* [P] compute on host cores (NULL: no device shares them) */
  double *res_free;                 /* [nodes x k] uplinks, then [nodes x nics] out, then in */
  struct strata__plan_heap_item *heap;
  int nheap, cap_heap;
  struct strata__plan_event *ev;
  size_t nev, cap_ev;
  int tracing, failed;
  int draws;                        /* 1: each compute action's time drawn from its device's spread */
  uint64_t rng;                     /* the draws' state */
};

/* Record an event of category `cat` for action `a` (NULL: named by cat) on trace thread `tid` from t0 to t1
** seconds, `op` and `bytes` for a collective (NULL, 0 otherwise); nothing unless e->tracing, nor when it takes
** no time. Out of memory sets e->failed. */
void strata__plan_trace_event(struct strata__plan_engine *e, const char *cat, const struct strata_action *a,
                              const char *op, int tid, double t0, double t1, double bytes);
/* Write the finished engine's events to `path` as a trace in the executor's format (lib/train/trace.c
** strata__trace_write): a compute and a transfers thread per device, complete events in microseconds, idle
** gaps. */
int strata__plan_trace_write(const struct strata__plan_engine *e, strata_layout_t l, const char *path);

/* ---- the search's lower bound (search-bound.c) ---- */

/* A lower bound on the step strata_simulate gives layout l (with its split) on machine c of like devices for
** micro-batches of `rows` samples: the slowest device's own compute with the pipeline's fill before it (and, for a
** backward not split, its drain after). 0 when it cannot be said (no split, out of memory). */
double strata__plan_step_bound(const struct strata_machine *c, strata_model_t model, strata_layout_t l, int64_t rows);

/* ---- the search's result (search-result.c) ---- */

struct strata__plan_cand {
  strata_layout_t layout;
  struct strata_sim_result res;
  char reason[300];
  int used;                         /* devices */
};

struct strata_plan {
  struct strata__plan_cand *c;
  int n, cap;
  int top;
  int simulated, pruned;            /* simulated; pruned by memory (before simulating, or the simulation's) */
  int considered, dominated;        /* layouts formed; never simulated as their step's lower bound exceeds the pool's
                                    ** worst kept */
  char *explain;
};

/* Keep the candidate if it is among the `top` best; takes ownership of layout and result. */
void strata__plan_keep(struct strata_plan *p, strata_layout_t l, struct strata_sim_result *res);
/* Each kept candidate's reason (against #1), and the explanation of #1 on machine m (p->explain; none when out
** of memory). */
void strata__plan_explain_candidates(struct strata_plan *p, const struct strata_machine *m);

/* ---- calibration (calibrate.c, calibrate-probes.c, calibrate-read.c) ---- */

/* The calibration file's names of the ops of enum strata_plan_op. */
extern const char *const strata__plan_op_names[STRATA_PLAN_OP_COUNT];
/* The median of n values (sorted in place). */
double strata__plan_median(double *v, int n);
/* The stage probe's model: `model` with one block. */
int strata__plan_probe_model(strata_model_t model, strata_model_t *out);
/* The stage probe: seconds of the median forward and backward of the one-block model pm for `rows` samples
** on each of the n devices dev (sec[i]). */
int strata__plan_probe_stages(const int *dev, int n, strata_model_t pm, int64_t rows, double *sec);
/* Each device's stage factor: its probe's measured seconds over what the simulator costs the probe's ops at,
** from the figures just measured (the calibration text, read as the simulator reads it). Written into each
** device's entry of root with the probe's figures. */
int strata__plan_stage_factors(struct json_t *root, const char *text, strata_model_t pm, int64_t rows,
                               const double *sec);
/* The pipeline probe's median step over devices dev[0..n), in seconds, measured. */
int strata__plan_pipe_measure(const int *dev, int n, strata_model_t pm, int64_t rows, double *seconds);
/* The overhead per action that brings the simulated pipeline probe to the measured `seconds` (bisection, to
** 0.1 us), written into root as its "pipeline_probe". */
int strata__plan_pipe_fit(struct json_t *root, const char *text, strata_model_t pm, int n, int64_t rows,
                          double seconds);

#endif /* STRATA__PLAN_PLAN_H */
