/* SPDX-License-Identifier: MIT */
/* strata/plan.h — the cost model of devices and links, the simulator that runs a layout's action lists on it, and the planner that searches layouts with it. */
#ifndef STRATA_PLAN_H
#define STRATA_PLAN_H

#include <strata/common.h>
#include <strata/layout.h>
#include <strata/model.h>
#include <strata/schedule.h>
#include <strata/topology.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- devices: nominal figures of GPU models ---- */

/*
** One row of the table of GPU models (lib/plan/devices.c), each with its
** published peak and where that figure comes from. A layout in fp32 is
** costed at fp32_tflops, one in bf16 at bf16_tflops (dense tensor-core or
** matrix-core bf16 with fp32 accumulation, no sparsity; a part without bf16
** matrix units has its fp32 figure there, as a bf16 run on it computes at
** the fp32 rate); tf32_tflops (dense, 0 where the part has no such mode) is
** informative. Strings are static.
*/
struct strata_gpu_model {
  const char *name;             /* "A100-SXM4-80GB" */
  const char *vendor;           /* "NVIDIA", "AMD" */
  double fp32_tflops;           /* peak fp32 (vector or matrix, the larger one a GEMM reaches) */
  double tf32_tflops;           /* peak dense tf32 / xf32 matrix, 0 when none */
  double bf16_tflops;           /* peak dense bf16 matrix with fp32 accumulation (fp32_tflops where there is none) */
  double mem_gbps;              /* peak memory bandwidth, GB/s */
  uint64_t memory;              /* bytes */
  double launch_us;             /* per-kernel launch overhead, microseconds */
  const char *source;           /* the datasheet the figures come from */
};

/* Rows in the table, and row i (STRATA_ERR_RANGE outside). */
STRATA_API int strata_gpu_model_count(void);
STRATA_API int strata_gpu_model_get(int index, struct strata_gpu_model *out /* OUT */);
/*
** The row for a GPU: by name (case-insensitive; a topology's "Tesla
** V100-SXM3-32GB-H", a short "A100-80GB" or "MI250X"), else by PCI vendor
** and device id (0: not known). STRATA_ERR_NOT_FOUND when nothing matches.
*/
STRATA_API int strata_gpu_model_find(const char *name, unsigned vendor_id, unsigned device_id,
                                     struct strata_gpu_model *out /* OUT */);

/*
** What one device costs to the simulator: sustained GEMM FLOP/s (the
** nominal peak times the sustained fraction, or a measured figure), memory
** bandwidth and capacity, launch overhead. `model` and `source` are static
** strings or owned by the machine that returned them.
*/
/* The row and elementwise ops a step runs, each with its own measured speed (op_ns). */
enum strata_plan_op {
  STRATA_PLAN_OP_ADD,           /* add (residuals), embedding rows, copies: per element */
  STRATA_PLAN_OP_GELU_FWD,
  STRATA_PLAN_OP_GELU_BWD,
  STRATA_PLAN_OP_LAYERNORM_FWD, /* per element of the rows */
  STRATA_PLAN_OP_LAYERNORM_BWD,
  STRATA_PLAN_OP_SOFTMAX_FWD,   /* per element (causal attention scores, logits of the cross-entropy), and per row
                                ** (op_row_ns) */
  STRATA_PLAN_OP_SOFTMAX_BWD,
  STRATA_PLAN_OP_ADAMW,         /* per parameter: AdamW, the gradient's squared norm and scaling (the clip),
                                ** zeroing it */
  STRATA_PLAN_OP_BIAS_ADD,      /* per element of the matrix the bias is added to (0: as ADD) */
  STRATA_PLAN_OP_BIAS_GRAD,     /* per element of the output gradient summed (0: as ADD) */
  STRATA_PLAN_OP_COUNT
};

/* GEMM sizes a device's speed may be given for (calibration measures these). */
#define STRATA_PLAN_GEMM_SIZES 6
/* Most all-reduce sizes a node description gives for its pairs (strata_node_desc.allreduce_sizes). */
#define STRATA_PLAN_ALLREDUCE_SIZES 8
/* Points of a device's spread of run times (strata_device_cost.spread). */
#define STRATA_PLAN_SPREAD_POINTS 16

/* One GEMM of a model's layers as the simulator costs them (C = op(A) op(B), m x n x k, `batch` of them) and
** the FLOP/s a device sustains on it: measured by strata_calibrate_model, used instead of the speed by size
** wherever the simulator meets that very shape. */
struct strata_gemm_shape {
  int64_t m, n, k, batch;
  int trans_a, trans_b;
  double flops;
};

struct strata_device_cost {
  double flops;                 /* sustained GEMM FLOP/s (of large GEMMs) */
  double mem_gbps;              /* memory bandwidth, GB/s */
  uint64_t memory;              /* capacity, bytes */
  double launch_us;             /* per-op overhead, microseconds */
  double sync_us;               /* a queue's round trip (an op enqueued and waited for), as the executor pays once
                                ** per action when it waits for the action's work; 0: none */
  const char *model;            /* "T4", "A100-SXM4-80GB", "host", ... */
  const char *source;           /* where the figures come from */
  /* Measured refinements; zeros where only nominal figures are known. */
  int ngemm;                    /* entries of gemm_n / gemm_flops, ascending n (0: `flops` at every size) */
  double gemm_n[STRATA_PLAN_GEMM_SIZES];     /* a square GEMM's n ... */
  double gemm_flops[STRATA_PLAN_GEMM_SIZES]; /* ... and the FLOP/s it sustains there */
  double op_ns[STRATA_PLAN_OP_COUNT]; /* ns per element of each op (0: its bytes at mem_gbps) */
  double op_row_ns[STRATA_PLAN_OP_COUNT]; /* ns per row on top of op_ns, for the row ops measured so (0: none) */
  int cpu_threads;              /* host cores its ops run on (0: its own silicon); see strata_node_desc.cpu_cores */
  int nshapes;                  /* entries of `shapes` (0: none) */
  const struct strata_gemm_shape *shapes; /* a model's own GEMMs as measured; a machine keeps its own copy */
  /* How far its run times stray from their median, as measured with the node's devices computing at once:
  ** nspread quantiles (at probabilities (i + 0.5) / nspread, ascending) of a window of work's time over the
  ** median window's. A simulation with samples (strata_sim_options) draws each compute action's time from
  ** it. 0: the device keeps time exactly. */
  int nspread;
  double spread[STRATA_PLAN_SPREAD_POINTS];
  /* A stage's compute as the runtime runs it (lib/model/layers.c's ops in sequence, each on its own buffers, through
  ** the executor's queue) over what the same ops cost timed one by one: measured by strata_calibrate_model on a
  ** one-block copy of the model, applied to every compute action. 0: none (1). */
  double stage_factor;
  /* What the pipeline executor adds to each compute action beyond its ops, in microseconds: the wake-ups of its
  ** threads and queues around an action that waits on another device, as they go on a loaded host. Measured by
  ** strata_calibrate_model's pipeline probe (the model's blocks as a real pipeline over the calibrated devices);
  ** the simulator adds it to every forward that takes its input, and every backward that takes its gradient, from
  ** another device, in a layout with a pipeline. 0: none. */
  double action_us;
  /* The same GEMM speeds for bf16 operands with fp32 sums, what a layout in bf16 is costed at: `bf16_flops` of
  ** large GEMMs (0: not known, and a bf16 layout on this device is refused, naming what is missing), and where
  ** calibration measured them, bf16_ngemm square sizes with their FLOP/s (0: bf16_flops at every size). */
  double bf16_flops;
  int bf16_ngemm;
  double bf16_gemm_n[STRATA_PLAN_GEMM_SIZES];
  double bf16_gemm_flops[STRATA_PLAN_GEMM_SIZES];
  /* A GPU of the table's figures (strata_device_cost_from_model): bytes of a GEMM operand's element as it computes
  ** (4, float32; 2 in a bf16 view), and a GEMM takes at least its operands' and result's bytes at mem_gbps. 0: a
  ** device whose speeds were measured (a CPU's GEMMs live in its caches), no such bound. */
  int gemm_elem_bytes;
};

/* The fraction of a datasheet's peak that a large GEMM sustains (fp32 or
** bf16), applied to nominal figures (measured figures are taken as they are). */
#define STRATA_PLAN_SUSTAINED 0.7

/* The share of a device's memory a plan may fill: the rest is left to the
** allocator's slack, the driver's context and workspace buffers. */
#define STRATA_PLAN_MEMORY_USABLE 0.9

/* A table row as a cost (each peak, fp32 and bf16, x STRATA_PLAN_SUSTAINED). */
STRATA_API int strata_device_cost_from_model(const struct strata_gpu_model *m, struct strata_device_cost *out /* OUT */);

/* ---- machines: devices and the links between them ---- */

/*
** A machine is what the simulator and the planner place on (an MPI job is a cluster, strata/cluster.h): `nodes`
** copies of one node (its devices, the links between them, their islands
** and the PCIe uplinks they share), joined by a network. Read-only once
** built; the caller frees it.
*/
typedef struct strata_machine *strata_machine_t;

/* How nodes are joined, and which devices of a node to use; zeros are defaults. */
struct strata_machine_options {
  int nodes;                    /* copies of the node (default 1; 0 is the default, negative an error) */
  double network_gbps;          /* Gb/s of one network interface (bits; default 100) */
  int nics;                     /* interfaces per node, each carrying its own flows (default 1) */
  double network_latency_us;    /* one-way latency (default 5) */
  const int *devices;           /* the node's devices to use (topology GPU indices), or NULL for all */
  int ndevices;
  uint64_t gpu_memory;          /* bytes of each GPU whose memory neither the dump nor the table of GPU models
                                   (by name or PCI id) gives; 0: such a GPU is refused, not guessed */
};

/*
** A node described by hand (tests, and machines without a dump): `devices`
** devices with their costs, and for each ordered pair (row-major, n x n)
** the bandwidth in GB/s and latency in us and the path kind
** (enum strata_path_kind); `island` gives each device's island (devices of
** one island may form a tensor-parallel group; NULL: each its own),
** `uplink` the PCIe uplink a device's traffic to devices of other islands
** shares (NULL: none shared). Arrays are copied.
*/
struct strata_node_desc {
  int devices;
  const struct strata_device_cost *cost;
  const double *gbps;
  const double *latency_us;
  const int *kind;              /* may be NULL: NVLINK when gbps > 50, else PHB */
  const int *island;
  const int *uplink;
  double uplink_gbps;           /* bandwidth of each shared uplink (0: no contention modelled) */
  const char *name;             /* "8xA100-80GB:nvswitch"; copied */
  double cpu_cores;             /* cores of the node's host that devices with cpu_threads share (0: none
                                   shared; may be fractional, the share other processes leave): devices
                                   computing at once whose threads exceed them run slower in proportion */
  /* The runtime's own all-reduce between each pair, measured at a few sizes (strata-bench calibrate): where
  ** given, collectives between the node's devices are costed from it instead of from gbps and latency_us. */
  int allreduce_sizes;            /* sizes measured (0: none; at most STRATA_PLAN_ALLREDUCE_SIZES) */
  const double *allreduce_floats; /* [allreduce_sizes] floats of each size, ascending */
  const double *allreduce_s;      /* [devices x devices x allreduce_sizes] seconds of an all-reduce of each size
                                     with the pair as the only members (diagonal ignored) */
};

STRATA_API int strata_machine_new(const struct strata_node_desc *node, const struct strata_machine_options *opts,
                                  strata_machine_t *out /* OUT */);
/*
** From a topology: its GPUs (costed from the table by name or PCI id, one
** line of why for a GPU the table does not know, which then gets a
** labelled guess of its speed), links from its link model, islands as the
** topology found them, uplinks from the PCIe paths. A GPU's memory is the
** dump's, else the table's (by name or PCI id), else opts->gpu_memory; a
** GPU with none of them is STRATA_ERR_NOT_FOUND naming it, never a guess.
** A box of unlike GPUs is described as mixed ("mixed: 2 x A, 1 x B").
** The topology's warnings are the machine's first warnings.
** A topology with no GPU is STRATA_ERR_NOT_FOUND ("nothing to place on").
*/
STRATA_API int strata_machine_from_topology(strata_topology_t topo, const struct strata_machine_options *opts,
                                            strata_machine_t *out /* OUT */);
/*
** A synthetic node "COUNTxMODEL:FABRIC": MODEL a table row ("A100-80GB",
** "MI250X", "T4"), FABRIC one of nvswitch (every pair NVLink at the
** model's generation), nvlink (pairs), xgmi (every pair one xGMI link),
** pcie (pairs under one PCIe switch, half the switches on each socket).
** STRATA_ERR_PARSE naming the part that is wrong.
*/
STRATA_API int strata_machine_synthetic(const char *spec, const struct strata_machine_options *opts,
                                        strata_machine_t *out /* OUT */);
STRATA_API void strata_machine_free(strata_machine_t c);

/*
** Calibration of this machine's runtime devices (`devices` lists runtime
** indices; NULL: all of them, n ignored): per device the median GFLOP/s of
** fp32 GEMMs of N = 32 to 1024 (the largest size's is what it plans with
** where no size is given), the per-element cost of the row ops, the
** bandwidth of a 32 MiB fill, the launch overhead of a one-element op, a
** queue's round trip, its memory; per pair a timed 16 MiB copy and a small
** all-reduce; the host cores the CPU devices get together. *json ("strata-calibration/1",
** the file strata-bench calibrate writes) is the caller's to free().
*/
STRATA_API int strata_calibrate(const int *devices, int n, char **json /* OUT */);
/*
** strata_calibrate, and besides, on every device, the GEMMs that the
** simulator costs `model`'s layers with (every distinct shape of a forward
** and a backward) for micro-batches of each of the `nrows` sample counts
** `rows`, at every tensor-parallel degree from 1 to max_tp that divides the
** heads: each device's entry then lists them under "gemm_shapes", and a
** simulation of that model meets its own GEMMs' speeds instead of those of
** square ones of a like size (a GEMM of a layer runs up to a third slower
** or faster than a square one of its FLOPs). For a GPT, each device's stage
** probe ("stage_probe": a one-block copy run as a stage runs, over its ops'
** figures) and, with two or more devices, the pipeline probe
** ("pipeline_probe": one block per device as a real 1F1B pipeline over them;
** its "action_us" is strata_device_cost.action_us of every device).
** STRATA_ERR_UNSTEADY, naming the device, when a stage probe took under a tenth
** or over ten times what the figures just measured cost its ops at (the
** device's speed moved while it was calibrated; nothing is returned).
*/
STRATA_API int strata_calibrate_model(const int *devices, int n, strata_model_t model, const int64_t *rows, int nrows,
                                      int max_tp, char **json /* OUT */);
/*
** The calibration text `in` (strata_calibrate's or strata_calibrate_model's)
** with each of its devices' bf16 GEMMs measured besides (A and B bfloat16,
** C float32, through strata_gemm: strata_device_gemm_speed_as at n = 128 to
** 1024): "bf16_gflops" (the largest size's, what a bf16 plan uses) and
** "bf16_gemm" ([n, GFLOP/s] pairs) in each device's entry; a device whose
** backend has no bf16 GEMM (STRATA_ERR_UNSUPPORTED) gets none, with a
** warning in the log. A device without them plans fp32 only: a bf16 plan on
** it is refused, naming "bf16_gflops". *out is the caller's to free().
*/
STRATA_API int strata_calibrate_bf16(const char *in, char **out /* OUT */);
/*
** A one-node machine of calibrated devices; layout devices are their
** runtime indices. `source` names the text in messages. STRATA_ERR_PARSE
** naming the field for anything but a strata-calibration/1 text (a key
** given twice, a "device" that is no int, a "memory" of 2^64 bytes or
** more), the machine's own refusal (a device of no speed or memory)
** prefixed with `source`.
*/
STRATA_API int strata_machine_from_calibration(const char *json, const char *source,
                                               const struct strata_machine_options *opts, strata_machine_t *out /* OUT */);
/*
** strata_machine_from_calibration of the file at `path` (at most 64 MiB),
** opened as every input is: a FIFO, a device or a directory is refused
** without blocking (STRATA_ERR_IO), a missing file is STRATA_ERR_NOT_FOUND.
*/
STRATA_API int strata_machine_load_calibration(const char *path, const struct strata_machine_options *opts,
                                               strata_machine_t *out /* OUT */);

/* One device of a machine (global index node x per_node + local). */
struct strata_machine_device {
  int node;
  int local;                    /* index inside the node */
  int id;                       /* the node's own index for it: topology GPU index or descriptor index */
  int island;                   /* island inside the node */
  const char *name;             /* owned by the machine */
  struct strata_device_cost cost;
};
STRATA_API int strata_machine_device_count(strata_machine_t c);
STRATA_API int strata_machine_nodes(strata_machine_t c);
STRATA_API int strata_machine_device(strata_machine_t c, int device, struct strata_machine_device *out /* OUT */);
/* The link between two devices (GB/s, us, kind NET across nodes). */
STRATA_API int strata_machine_link(strata_machine_t c, int from, int to, struct strata_link *out /* OUT */);
/* What the machine is, in words ("4 x Tesla T4 (aws-g4dn...xml)"); lives as long as the machine. */
STRATA_API const char *strata_machine_describe(strata_machine_t c);
/* Warnings from building it (a GPU the table did not know ...); count, then each. */
STRATA_API int strata_machine_warning_count(strata_machine_t c);
STRATA_API const char *strata_machine_warning(strata_machine_t c, int index);

/* ---- the simulator ---- */

struct strata_sim_options {
  int64_t batch;                /* global batch of a step, in samples; dp x microbatches must divide it */
  const char *trace;            /* write a Chrome/Perfetto trace here (the executor's format), or NULL */
  int symmetric;                /* 1: replicas on identical devices; simulate two and cost the collectives
                                   over all dp (exact when the replicas' devices are alike), and one slice
                                   of each tp group of like devices, its joins inside its F and B */
  int samples;                  /* 0 or 1: one step at the devices' median costs; more: that many steps, each
                                   compute action's time drawn from its device's spread (devices without a
                                   spread keep theirs), the step of the median time reported */
  uint64_t seed;                /* of the draws (the same seed, the same steps); 0 is a seed like any other */
};

/*
** What a simulated step gives. Arrays have `devices` entries, one per
** device of the schedule: (replica, tp slice, rank), rank fastest; a tp
** group whose joins run inline (a degree per rank, or symmetric mode)
** counts as its first device. The caller releases them with strata_sim_result_destroy.
*/
struct strata_sim_result {
  double step_s;                /* one optimizer step, seconds (with samples: the median step's) */
  double step_lo_s, step_hi_s;  /* the fastest and the slowest of the sampled steps (step_s without samples) */
  int samples;                  /* steps simulated (1 without a spread to draw from) */
  double bubble;                /* 1 - compute / (devices x step) */
  double comm_share;            /* communication's share of the devices' working time: transfers, collectives
                                   and tp joins over those plus compute (overlapped or not) */
  double samples_per_s;
  double tokens_per_s;          /* samples x context for a GPT, else samples */
  double flops_per_device;      /* model FLOP/s achieved per device (every device of the layout) */
  uint64_t peak_bytes;          /* largest per-device memory */
  int devices;                  /* schedule devices (dp x pp) */
  double *busy;                 /* [devices] compute time / step */
  uint64_t *memory;             /* [devices] peak bytes */
  int fits;                     /* every device's peak within its capacity */
};
STRATA_API void strata_sim_result_destroy(struct strata_sim_result *r);

/*
** Simulate one step of `layout` for `model` on `machine` (layout devices
** are machine device indices): the same per-device action lists the
** executor runs (strata_schedule_generate_hybrid, or
** strata_schedule_generate_hybrid_ranks for a tp degree per rank: a
** device per tp slice, each TP_JOIN an all-reduce over the stage's group
** on its links, of the bytes that the part's joins post, once every slice
** has reached it),
** compute costed op by op on each slice's device (a GPT: each GEMM at the
** speed calibrated for its size, the row and elementwise ops at theirs, a
** launch each; other models from their per-layer profile), devices on one
** host's cores sharing them, the optimizer's updates after every stage's
** norm, transfers on the links with the sender's copy engine and shared
** uplinks contended, gradient collectives as rings hop by hop; a send
** goes to every slice of the next rank that takes it from the sender.
** Action kinds it does not know are zero-cost synchronisation. A layout
** that does not fit still gives its figures, with fits = 0.
**
** In the layout's precision (strata_layout_precision), as the trainer runs
** it. bf16: GEMMs at each device's bf16 speeds (bf16_flops, bf16_gemm_*;
** a calibrated model's own shapes were timed in fp32 and are not used),
** the row and elementwise ops reading and writing half the bytes of their
** bf16 activations where they are costed by bytes (measured op speeds were
** measured in fp32 and are kept), AdamW's update as in fp32 plus the bf16
** copy of the weights it writes, pipeline messages (activations forward,
** gradients back) at 2 bytes an element, the memory model's bf16 bytes; tp
** joins at 4 bytes an element, as the trainer sums a bf16 region in a
** float32 buffer today, and the replicas' gradient collectives in fp32.
** A device without a bf16 speed (bf16_flops 0: a calibration file that did
** not measure one) is STRATA_ERR_NOT_FOUND naming the device and the field.
*/
STRATA_API int strata_simulate(strata_machine_t machine, strata_model_t model, strata_layout_t layout,
                               const struct strata_sim_options *opts, struct strata_sim_result *out /* OUT */);
/*
** Simulate a bare schedule with one cost per action kind (`cost` has
** STRATA_ACTION_KIND_COUNT entries, NULL: unit costs F 1, B 2, BI 1, W 1,
** the rest 0; transfers take their kind's cost and need no link). With
** unit costs the bubble is strata_schedule_bubble's.
*/
STRATA_API int strata_simulate_schedule(strata_schedule_t s, const double *cost, struct strata_sim_result *out /* OUT */);

/* ---- the planner ---- */

/* A memory mode of struct strata_plan_options: searched (AUTO), or this value only. */
#define STRATA_PLAN_AUTO 0
#define STRATA_PLAN_ONLY(value) ((value) + 1)

struct strata_plan_options {
  int64_t batch;                /* global batch in samples (required) */
  int top;                      /* candidates to keep (default 5) */
  int exhaustive;               /* 1: every device order and every split (small cases; the reference) */
  int max_microbatches;         /* per replica (default 256) */
  int no_zero;                  /* 1: never ZeRO (any stage); the same as zero = STRATA_PLAN_ONLY(0) */
  int fixed_tp;                 /* only this tp degree (0: search) */
  /* The memory modes the search tries, each STRATA_PLAN_AUTO (0, the default: every one that applies) or
  ** STRATA_PLAN_ONLY(value) for that value only: */
  int recompute;                /* enum strata_recompute (strata/layout.h), for GPT models with a schedule whose
                                   backward is not split */
  int zero;                     /* the ZeRO stage 0-3 where dp >= 2 (a layout of dp 1 has none) */
  int sp;                       /* sequence parallelism (0 off, 1 on) where every rank has the same tp >= 2, for
                                   GPT models with a schedule whose backward is not split */
  int precision;                /* STRATA_FLOAT32 (0) or STRATA_BFLOAT16 (strata/comm.h): what the layouts it
                                   builds say, and so how the simulator costs them and the memory model counts
                                   their bytes; bf16 plans GPT and llama models, on devices with a bf16 GEMM speed */
};

typedef struct strata_plan *strata_plan_t;

/* A ranked layout. Pointers live as long as the plan. */
struct strata_plan_candidate {
  strata_layout_t layout;
  double step_s;
  double samples_per_s;
  double flops_per_device;
  double bubble;
  uint64_t peak_bytes;
  const char *reason;           /* one line: why it is ranked where it is */
};

/*
** Search layouts (dp x pp x tp, device assignment, split, micro-batches,
** schedule, and the memory modes: activation recomputation, the ZeRO stage
** and sequence parallelism, as opts allows) for `model` and a global batch
** on `machine`, in
** numbered passes: 1 tensor-parallel groups inside islands, fastest first;
** 2 dp x pp over the groups, replicas across nodes or inside them;
** 3 micro-batches and schedules; 4 the split, balanced by each rank's
** speed and bounded by its memory, pruned when it cannot fit; 5 simulate
** and rank. Nothing that fits: STRATA_ERR_DEVICE_MEMORY, with the smallest
** number of this machine's devices that would fit in the message (and
** from strata_plan_min_devices).
*/
STRATA_API int strata_plan_search(strata_machine_t machine, strata_model_t model, const struct strata_plan_options *opts,
                                  strata_plan_t *out /* OUT */);
STRATA_API void strata_plan_free(strata_plan_t p);
STRATA_API int strata_plan_count(strata_plan_t p);
STRATA_API int strata_plan_candidate(strata_plan_t p, int index, struct strata_plan_candidate *out /* OUT */);
/* Layouts simulated, and those pruned by memory before simulating. */
STRATA_API int strata_plan_stats(strata_plan_t p, int *simulated /* OUT */, int *pruned /* OUT */);
/*
** The search's counts: layouts it formed (`considered`: every assignment, micro-batch count, schedule and memory
** mode, and each refinement move), those pruned by memory (before simulating, or by the simulation), those
** pruned as dominated (a lower bound on their step, each device's own compute and the pipeline's fill, above the
** slowest step the search keeps, so they could not be kept; or a recompute mode, or sequence parallelism, where a
** mode that recomputes no more, without it, fits with the same split, which it could only slow or equal: never
** simulated), and those simulated. Any OUT may be NULL.
*/
STRATA_API int strata_plan_counts(strata_plan_t p, int *considered /* OUT */, int *pruned_memory /* OUT */,
                                  int *pruned_dominated /* OUT */, int *simulated /* OUT */);
/* The choice in words: why these devices form a tp group, why this split (caller frees). */
STRATA_API int strata_plan_explain(strata_plan_t p, char **text /* OUT */);

/*
** The smallest number of devices like the machine's first one (nodes of
** the same kind when the machine has several nodes, counted in devices;
** past 256 on a one-node machine, in multiples of the node's devices
** rounded up to a power of two) that would fit `model` at this batch;
** STRATA_ERR_RANGE past `limit`. STRATA_ERR_DEVICE_MEMORY, the reason in
** the message, when no count can ever fit (a fixed tp no island holds or
** the model does not divide, a layer larger than one device at its
** smallest) or none up to the most devices a layout of it uses does. It counts for at most
** STRATA_PLAN_MIN_DEVICES_S seconds, then STRATA_ERR_TIMEOUT with
** *devices the most it found not to fit.
*/
#define STRATA_PLAN_MIN_DEVICES_S 5.0
STRATA_API int strata_plan_min_devices(strata_machine_t machine, strata_model_t model,
                                       const struct strata_plan_options *opts, int limit, int *devices /* OUT */);

/* The memory one device of rank `rank` needs under `layout` (bytes), as the planner prunes by it (spatial slabs: the
** most any slab of the rank needs). */
STRATA_API int strata_plan_memory(strata_model_t model, strata_layout_t layout, int64_t batch, int rank,
                                  uint64_t *bytes /* OUT */);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_PLAN_H */
