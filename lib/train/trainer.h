/* SPDX-License-Identifier: MIT */
/* trainer.h — the trainer's state and its parts' internal calls, shared by the files of lib/train/ (the trainer API, the
** executor, the memory plan, the optimizer, passes, parameters, checkpoints, trace, joins, ranks). Internal. */
#ifndef STRATA__TRAINER_H
#define STRATA__TRAINER_H

#include <pthread.h>

#include <strata/comm.h>
#include <strata/schedule.h>
#include <strata/train.h>

#include "model/stage.h"

struct strata__staging;                  /* registry.h */
struct strata__ranks;                    /* parallel/ranks.h */

/* Sizes past which indices would overflow (not limits of the design: a 1,000-device layout is far inside). */
#define STRATA__MAX_RANKS (1 << 20)
#define STRATA__MAX_STAGES_ALL (1 << 24)

/* A sharded stage's joins (its all-reduces with the other slices) posted during an action, until the action's
** TP_JOIN accounts for them. */
struct strata__tp_member {
  struct strata_trainer *tr;
  strata_comm_t comm;
  int rank;                          /* the slice */
  int async;                         /* the communicator enqueues (else each call waits) */
  int across;                        /* the group crosses ranks: no comm, its joins meet through tr->ranks */
  void **pending;                    /* [n]: each join's completion (NULL: the call waited) */
  uint64_t *bytes;
  double *posted, *ended;            /* when each was called, and (waited in the call) done */
  const char **op;                   /* each one's collective: "allreduce", sequence parallelism's "all_gather",
                                     ** "reduce_scatter", or spatial slabs' halo exchanges, "halo" and "halo_grad" */
  unsigned char *later;              /* [n]: posted with the stage's join_later, its queue not yet made to wait */
  int n, cap;
};

/* A collective's members in a trace: the replicas of a stage's slice (data parallelism), or the slices of a stage's
** replica (tensor parallelism). */
enum { STRATA__GROUP_NONE, STRATA__GROUP_REPLICAS, STRATA__GROUP_SLICES };

struct strata__trace_event {
  char name[24];
  const char *cat;          /* "compute", "send", "recv", "idle", "optimizer", "comm" */
  double ts, dur;           /* microseconds since the trainer started */
  int tid;                  /* 2 x rank: compute, 2 x rank + 1: transfers */
  int64_t step;
  uint64_t bytes;           /* comm: bytes each member contributes */
  const char *op;           /* comm: the collective ("allreduce") */
  int group_kind;           /* comm: its members (STRATA__GROUP_*), of stage group_stage: written as their devices, */
  int group_stage;          /* "0,2", so that a group of any size fits */
  double posted;            /* comm: when the device handed it over (microseconds, as ts), or -1 */
};

/* Receive buffers of one stage boundary and direction, kept between
** messages and steps: as many as were ever in flight at once there. */
struct strata__pool {
  strata_buffer_t *free;
  int n, cap;
};

/* Keep b in the pool (growing it); 0, or -1 when there is no room to grow (the caller frees b). */
int strata__pool_put(struct strata__pool *pool, strata_buffer_t b);

/*
** The events of one executor run (chain.c). act[k] / grad[k], k = s * m + mb: the end of stage s's forward /
** backward (its input gradient) of micro-batch mb on the stage's queue; pool[p].ev[i]: the end of the last read of
** receive pool p's buffer free[i] (NULL: none queued). The executor frees them at the end of the run.
*/
struct strata__chain {
  int cells, npools;
  strata_event_t *act, *grad;
  struct {
    strata_event_t *ev;
    int cap;
  } *pool;
};
int strata__chain_init(struct strata__chain *c, int stages, int m, int npools);
void strata__chain_free(struct strata__chain *c);
/* Mark the end of the forward (grad 0) or backward (1) of cell k on queue q. */
int strata__chain_mark(struct strata__chain *c, int grad, int k, strata_queue_t q);
/* Make q run what follows only after cell k's mark (on the device; across backends, or unmarked: `producer`, the
** queue that marks it, is waited for on the host). */
int strata__chain_after(struct strata__chain *c, int grad, int k, strata_queue_t q, strata_queue_t producer);
/* Take a buffer of pool p (pool `pool`, under `lock`; *b NULL when empty) to be written on q: q waits for the last
** read of it first. */
int strata__chain_pool_take(struct strata__chain *c, pthread_mutex_t *lock, struct strata__pool *pool, int p,
                            strata_queue_t q, strata_buffer_t *b);
/* Give b back to pool p once the work queued on q (its last reader; NULL: none queued) has run, without waiting for
** it; a buffer the pool cannot keep is freed after a wait. */
int strata__chain_pool_return(struct strata__chain *c, pthread_mutex_t *lock, struct strata__pool *pool, int p,
                              strata_queue_t q, strata_buffer_t b);

/* A worker's list over the queues of the stages on device `rank` (qc: [stages all], filled for those): their clocks
** at its start; at its end a wait for each (the first failure's stage in *failed) and the device's busy seconds,
** *busy holding the actions' wall time on queues without CPU clocks: plus what the CPU-clocked queues spent since
** t0, plus the drain where a queue has none, at most the list's wall time. */
struct strata__queue_clock;
void strata__list_clocks(const struct strata_trainer *tr, int rank, struct strata__queue_clock *qc);
int strata__list_drain(const struct strata_trainer *tr, int rank, const struct strata__queue_clock *qc, double t0,
                       double *busy, int *failed);

struct strata_trainer {
  strata_model_t model;
  strata_dataset_t data;
  struct strata_train_options opt;
  int nstages;                       /* stages of one chain (the model, cut) */
  int replicas;                      /* data-parallel copies */
  int tp;                            /* tensor-parallel slices of the widest stage (chains per replica) */
  int spatial;                       /* > 1: the slices are spatial slabs (opt.spatial): each stage whole, on its
                                     ** rows of every image, its joins the halo exchanges, averages and gradients */
  int *tps;                          /* [nstages]: the slices of each stage of a chain (its pipeline rank's degree);
                                     ** stage s of a chain whose slice is tps[s] or more is held by no device: st[] is
                                     ** NULL there, and slice (slice % tps) of the same replica stands for it */
  int zero;                          /* the ZeRO stage (0 none): 1, replica r's optimizer updates shard r of each
                                     ** stage; 2, replica r keeps only shard r of the reduced gradients too */
  uint64_t bucket_bytes;             /* data parallelism: gradients all-reduced in runs of layers of this size */
  int chains;                        /* replicas x tp chains of stages: chain c = replica c / tp, slice c % tp;
                                     ** chain c's stage s is st[c x nstages + s] */
  int pp;                            /* pipeline ranks of one chain: ndev = chains x pp */
  int mtot;                          /* micro-batches per step over every replica (replicas x m) */
  struct strata__stage **st;         /* [stages all] */
  strata_comm_t *comm;               /* [tp x nstages], replicas > 1: comm[t x nstages + s] joins slice t of
                                     ** stage s of every replica, one member per replica */
  strata_comm_t *tp_comm;            /* [replicas x nstages], tp > 1: tp_comm[r x nstages + s] joins the slices
                                     ** of replica r's stage s, member t = slice t */
  struct strata__tp_member *tp_member; /* [stages all], tp > 1: each stage's join state */
  int *tensor_split;                 /* [ntensors]: 0 whole, else the tensor is cut over the slices and its norm sums
                                     ** theirs, every `tensor_split`-th (the first of each part's copies) */
  int comm_stale;                    /* a failed step left the communicators' calls out of step */
  pthread_mutex_t abort_lock;        /* orders every collective's posting against a failure's abort: */
  int aborted;                       /* the step failed: no member may start a collective its peers left */
  int ndev;                          /* ranks: chain c's pipeline rank p is c x pp + p */
  int *dev;                          /* [ndev]: global device of each rank */
  int *stage_rank;                   /* [stages all] */
  strata_schedule_t sched;           /* the training schedule (one device: 1F1B over one stage) */
  strata_schedule_t pass[2];         /* the passes' lists: forward, forward and backward (made when first run) */
  int m;                             /* micro-batches per step of each replica */
  int64_t step;
  uint64_t data_state;
  int images;
  size_t in_elems;                   /* input elements per micro-batch */
  int64_t rows;                      /* target rows per micro-batch */
  void **inputs;                     /* [mtot] host micro-batches; replica r's micro-batch k is r x m + k */
  int32_t **targets;                 /* [mtot] */
  float **losses;                    /* [mtot] per-row losses read back (pipeline) */
  struct strata__staging *host_mem;  /* [3 mtot]: the memory of inputs, targets, losses (pinned where it can be) */
  strata_queue_t *send_q;            /* [ndev]: each rank's copy queue, made at the first pipeline step */
  double *mb_loss;                   /* [mtot] summed losses of each micro-batch */
  size_t ntensors;                   /* over one chain's stages */
  double *sumsq;                     /* [tp x ntensors]: slice t's sums of squares at t x ntensors */
  struct strata__pool *pools;        /* [3 x stages all]: [2 s] stage s's inputs, [2 s + 1] its output gradients
                                     ** (receive pools); [2 x stages all + s] its outputs (out_apart: the buffers its
                                     ** forwards write their output to, until the next stage has it) */
  struct strata_train_report report; /* its arrays are these: */
  int *rep_split, *rep_stage_device;  /* [stages all] */
  struct strata_train_device_stats *rep_dev; /* [ndev] */
  double t0;                         /* trainer creation, for trace timestamps */
  char *trace_path;
  struct strata__trace_event *events;
  size_t nevents, cap_events;
  int (*stop)(void *);               /* strata_trainer_set_stop: polled between evaluation batches */
  void *stop_arg;
  int unfit_split;                   /* the balancer found no cut within memory: the split is the fastest one */
  struct strata__ranks *ranks;       /* the devices of several processes (parallel/ranks.h); NULL in one process */
  int home;                          /* the first replica whose stages are this process's (0 in one process):
                                     ** whole-model questions (tensors, parameters, evaluation) are asked of it */
};

/* Where stage s runs in the trainer's schedule, for the memory model (strata__stage_need): the memory plan of
** trainer creation and the balancer both ask it. */
void strata__trainer_place(strata_trainer_t tr, int s, struct strata__stage_place *p /* OUT */);

/*
** One run of the executor (executor.c): the trainer gives the stages, devices, queues and communicators; the work
** says what runs. A training step runs the trainer's schedule (tr->sched) with its update, gradient collectives,
** report and trace; a pass (evaluation, logits, a gradient check) runs lists derived from it
** (strata__pass_schedule) and touches none of those.
*/
struct strata__work {
  strata_schedule_t sched;          /* the per-device lists */
  const void *const *inputs;        /* [replicas x m]: replica r's micro-batch k is r x m + k: its inputs
                                    ** (in_elems 4-byte elements: token ids or pixels) ... */
  const int32_t *const *targets;    /* ... and targets (rows) */
  float *const *losses;             /* ... and where its per-row losses land (rows) */
  size_t in_elems;
  int64_t rows;
  int train;                        /* a training step (else a pass) */
  float lr;                         /* the update's learning rate */
  /* Called after the forward of a chain's last stage st (stage index s) on micro-batch mb in slot `slot`, from the
  ** device's worker thread, before its queue is waited for; a non-zero status fails the run. NULL: nothing. */
  int (*forwarded)(void *arg, struct strata__stage *st, int s, int slot, int mb);
  void *arg;
};

/* Post one of a step's collectives (of the operands' type) on communicator c as member `rank`, ordered against a failure's abort by
** the trainer's lock (joins.c). A communicator that enqueues (`async`) returns the completion in *done (NULL: the
** member's queue waits for it); one that cannot waits in the call, made after the lock is let go. */
int strata__post_collective(strata_trainer_t tr, strata_comm_t c, int async, int kind, int rank, strata_queue_t q,
                            strata_mem_t send, strata_mem_t recv, size_t count, int op, void **done);
/* The same, for a collective with a root (a reduce onto member `root`). */
int strata__post_collective_to(strata_trainer_t tr, strata_comm_t c, int async, int kind, int rank, int root,
                               strata_queue_t q, strata_mem_t send, strata_mem_t recv, size_t count, int op,
                               void **done);

/* ---- the trainer's parts, one file each (train.c, memory.c, optimizer.c, params.c, pass.c) ---- */

/* The sum of micro-batch k's per-row losses (tr->losses[k]), in row order, as strata__stage_loss adds them. */
static inline double strata__trainer_rows_loss(const struct strata_trainer *tr, int k) {
  double sum = 0;
  for (int64_t r = 0; r < tr->rows; r++)
    sum += tr->losses[k][r];
  return sum;
}

/* Wait for every stage's queue (train.c); the first error. */
int strata__trainer_finish_all(strata_trainer_t tr);
/* Wait for every queue, then free every stage's slots (their blocks stay in the devices' caches) (train.c). */
void strata__trainer_release_all(strata_trainer_t tr);
/* Micro-batches stage s keeps in flight at most: the schedule's peak (memory.c). */
int strata__stage_inflight(strata_trainer_t tr, int s);
/* Split backward: the most micro-batches of stage s between their BI and their W at once (its dsave regions). */
int strata__stage_pending(strata_trainer_t tr, int s);
/* Split backward: rank r's micro-batches with their BI done and their W pending at most over its stages together
** (its dsave regions), and the units of one region there (the largest of its stages'; 0 without a split backward). */
int strata__rank_pending(strata_trainer_t tr, int r);
size_t strata__rank_dsave_units(strata_trainer_t tr, int r);
/* Give every stage its rank's dsave region size (strata__rank_dsave_units), so that a V's two stages share regions. */
void strata__trainer_dsave_sizes(strata_trainer_t tr);
/* The memory plan against what each device has free (memory.c); a message that says what is needed and what there is. */
int strata__trainer_check_memory(strata_trainer_t tr, const int *split);
/* When layers [first, last) do not fit on device dev: say what they need, keeping the failed allocation's reason. */
int strata__trainer_explain_memory(strata_trainer_t tr, int first, int last, int dev);
/* Learning rate of step s (0-based): linear warm-up, then cosine to min_lr (optimizer.c). */
float strata__lr_at(const struct strata_train_options *o, int64_t s);
/* Buffer `which` (0 params, 1 grads, 2 m, 3 v) of the home replica into host, in global tensor order; and every
** replica's and slice's copy from host (params.c). */
int strata__trainer_gather(strata_trainer_t tr, int which, float *host);
int strata__trainer_scatter(strata_trainer_t tr, int which, const float *host);
/* Whole parameters of the model; whole floats of one stage (its tensors unsliced) (params.c). */
size_t strata__trainer_total_params(strata_trainer_t tr);
/*
** ZeRO-3: flat parameters [lo, hi) of stage s into dst (a window on the stage's device), each part from the shard
** of the replica that holds it (the same stage and slice of every replica, on its device, copied; the shards change
** only in the update, after every replica's last backward of the step, or in a load). Enqueued on q (the stage's
** queue, or its window's gather queue: a queue of the stage's device); a failed copy is said with the stage, the
** replica and its device.
*/
int strata__trainer_gather_weights(strata_trainer_t tr, int s, strata_queue_t q, size_t lo, size_t hi,
                                   strata_mem_t dst);
/*
** ZeRO-3's gathers as the executor runs them (gather.c). A stage's hook while one of its actions runs: its
** params_fetch is strata__gather_fetch, its params_landed (traced runs) strata__gather_landed, which adds each gather
** to the trace as a comm event of the replicas, "gather <stage>.<micro-batch> <stage layer>", under `lock`.
** strata__gather_action runs PARAM_GATHER s m: the gather of the first tensors that the action after it (`next`, an
** F, B, BI or W of the stage) reads is posted, to land while the device gets there.
*/
struct strata__gather_hook {
  strata_trainer_t tr;
  pthread_mutex_t *lock;
  int s, rank, mb;
};
int strata__gather_fetch(void *hook, strata_queue_t q, size_t lo, size_t hi, strata_mem_t dst);
void strata__gather_landed(void *hook, int t, size_t lo, size_t hi, double posted, double landed);
int strata__gather_action(strata_trainer_t tr, int s, int next);
size_t strata__stage_full(const struct strata__stage *st);
/*
** Data parallelism's gradient buckets (buckets.c): runs of whole layers of a stage, at least tr->bucket_bytes each,
** last layers first. During a stage's last backward of the step each bucket's all-reduce over communicator c is
** posted as soon as its layers' gradients are enqueued (strata__buckets_ready, the stage's grads_done hook), so that
** it overlaps the backward of the layers before it; GRAD_REDUCE posts what is left (strata__buckets_post_rest) and
** OPTIMIZER waits for done[k] of each posted one. c is NULL where the replicas are on several ranks.
*/
struct strata__buckets {
  strata_trainer_t tr;
  strata_comm_t c;
  int s;
  int n, posted;             /* buckets, and how many are posted */
  int *first;                /* [n]: bucket k holds stage layers [first[k], k ? first[k - 1] : layers) */
  void **done;               /* [n] */
  double *when;              /* [n]: when posted */
};
int strata__buckets_init(strata_trainer_t tr, strata_comm_t c, int s, struct strata__buckets *b);
void strata__buckets_range(const struct strata__buckets *b, int k, size_t *lo, size_t *hi);
int strata__buckets_ready(void *arg, int layer);
int strata__buckets_post_rest(struct strata__buckets *b);
void strata__buckets_free(struct strata__buckets *b);

/* Run `w` on the trainer's devices; *grad_norm (may be NULL) gets a training step's gradient norm. */
/* What a training step's run measured, for the trainer's report and trace. */
struct strata__work_done {
  double t_start, t_end;            /* strata__now() when the workers started and when the last one ended */
  double *busy;                     /* [devices]: each device's compute seconds (the caller's array) */
  int *peak;                        /* [stages all]: the most micro-batches in flight on each stage (the caller's) */
  float grad_norm;                  /* the clipped step's gradient norm */
};
/* Run `w`; a training step fills *done (NULL for a pass). */
int strata__execute(strata_trainer_t tr, const struct strata__work *w, struct strata__work_done *done);

/* The lists of a pass outside training, derived from the training schedule: micro-batch 0 of the home replica
** through its stages (forwards, their sends, receives and tp joins) and, with `backward`, back (each backward whole:
** B for BI, no W), without update or gradient collective. The caller frees it. */
int strata__pass_schedule(strata_trainer_t tr, int backward, strata_schedule_t *out /* OUT */);

/* Fill the receive pools with what can be in flight at each boundary, and each stage's output pool with its
** place's outs (after the stages are built). */
int strata__pipeline_prefill(strata_trainer_t tr);

/* Split the model's layers into tr->nstages stages over the ranks
** (stage s on rank stage_rank[s]), balancing FLOPs against measured device
** speed within memory limits; `split` receives layers per stage. */
int strata__pipeline_balance(strata_trainer_t tr, int *split);

/* Stage s's per-tensor gradient sums of squares into tr->sumsq at its place in the global tensor order. */
int strata__stage_sumsq(strata_trainer_t tr, int s);

/* Clip factor from the per-tensor sums of squares (summed in tensor order). */
float strata__clip_scale(const strata_trainer_t tr, float *norm);

/* Apply the optimizer to stage s with gradient scale `gscale`. */
int strata__stage_optimize(strata_trainer_t tr, int s, float gscale, float lr);

/* Make the replicas' communicators anew (after a failed step left them out of step). */
int strata__trainer_comms_renew(strata_trainer_t tr);

/*
** A failure: abort every communicator's open collectives (the members
** waiting in them for this one return its error) and refuse new ones until
** the communicators are made anew, so that no member waits the timeout for
** a peer that stopped before calling. Returns 1 for the step's first
** failure, 0 when another had aborted it already.
*/
int strata__trainer_abort(strata_trainer_t tr, int status, const char *what);
/* One micro-batch of `tr->rows` samples forward and backward on a one-device trainer, its gradients left on the
** device and nothing updated, waited for: the calibration's stage probe (lib/plan/calibrate.c). */
int strata__trainer_forward_backward(strata_trainer_t tr, const void *inputs, const int32_t *targets);
/* One training step of every micro-batch on the same tokens (`ninputs` and `ntargets` those of a micro-batch), without
** a dataset: the calibration's pipeline probe runs the executor so. */
int strata__trainer_step_fixed(strata_trainer_t tr, const int32_t *inputs, size_t ninputs, const int32_t *targets,
                               size_t ntargets);
/* Before posting a collective: STRATA_ERR_STATE when the step has failed (else the lock is held until
** strata__trainer_post_end). */
int strata__trainer_post_begin(strata_trainer_t tr);
void strata__trainer_post_end(strata_trainer_t tr);

/* Write the trace file (all events so far), atomically. */
int strata__trace_write(strata_trainer_t tr);
void strata__trace_add(strata_trainer_t tr, const char *name, const char *cat, double t_start, double t_end, int tid);
/* A collective's event: as strata__trace_add, with its bytes, kind, group (STRATA__GROUP_* of stage `stage`) and when
** the device handed it over (`posted`, on t_start's clock; negative: not known). */
void strata__trace_add_comm(strata_trainer_t tr, const char *name, const char *op, uint64_t bytes, int group,
                            int stage, double t_start, double t_end, int tid, double posted);

/* spatial.c: a layout whose tp slices are opts->spatial slabs (pp 1, tp the same everywhere, its devices there, a
** cnn the slabs can cut, no ZeRO, float32, a whole backward); the tp-slice checks of strata_layout_check do not apply. */
int strata__spatial_check(strata_model_t model, const struct strata_train_options *opts, strata_layout_t layout,
                          int ndevices);

/* How stage s is cut: its tp slice, or (spatial) its slab of whole stages; its ZeRO shard and stage; the precisions;
** the recompute mode; sequence parallelism (opt.sp, where the stage is cut for tp). */
static inline struct strata__cut strata__trainer_cut(const struct strata_trainer *tr, int s) {
  const int slice = (s / tr->nstages) % tr->tp, sp = tr->spatial > 1;
  struct strata__cut cut = {{sp ? 0 : slice, sp ? 1 : tr->tps[s % tr->nstages]},
                            {s / tr->nstages / tr->tp, tr->zero ? tr->replicas : 1},
                            tr->opt.precision, tr->opt.grad_reduce, tr->opt.recompute, tr->zero,
                            {sp ? slice : 0, sp ? tr->spatial : 1},
                            tr->opt.sp && !sp && tr->tps[s % tr->nstages] > 1};
  return cut;
}

/* Stages in all (every chain's) and whether stage s has a neighbour before / after it in its chain. */
static inline int strata__stages_all(const struct strata_trainer *tr) { return tr->nstages * tr->chains; }
/* Chain of stage s, its replica and slice. */
static inline int strata__stage_chain(const struct strata_trainer *tr, int s) { return s / tr->nstages; }
static inline int strata__stage_replica(const struct strata_trainer *tr, int s) { return s / tr->nstages / tr->tp; }
static inline int strata__stage_slice(const struct strata_trainer *tr, int s) { return s / tr->nstages % tr->tp; }
/* Stage s's tensor-parallel degree, whether a device holds it, and the stage that stands for it (itself when held). */
static inline int strata__stage_tp(const struct strata_trainer *tr, int s) { return tr->tps[s % tr->nstages]; }
/* (the schedule's answers; without one the trainer is one device, whose stages are all held) */
static inline int strata__stage_held(const struct strata_trainer *tr, int s) {
  return tr->sched ? strata_schedule_stage_held(tr->sched, s) : 1;
}
static inline int strata__stage_owner(const struct strata_trainer *tr, int s) {
  return tr->sched ? strata_schedule_stage_owner(tr->sched, s) : s;
}
/*
** The stages that receive what stage s sends, towards the next stage (dir 0: its output) or the previous one (dir 1:
** its input gradient): its own chain's neighbour, when held, and every neighbour of the same replica that s stands
** for. At most tr->tp; returns how many, in out (NULL: only count).
*/
int strata__stage_consumers(const struct strata_trainer *tr, int s, int dir, int *out);

/* A sharded stage's join (stage.h's join hook): post an all-reduce over the slices. */
int strata__tp_join(void *member, strata_queue_t q, strata_mem_t x, size_t count, int op);
/* The stage's queue waits for every join posted with join_later so far (stage.h's join_wait hook). */
int strata__tp_join_wait(void *member, strata_queue_t q);
/* Sequence parallelism (stage.h's seq hook): post an all-gather (gather 1) or an in-place reduce-scatter over them. */
int strata__tp_seq(void *member, strata_queue_t q, int gather, strata_mem_t send, strata_mem_t recv, size_t count);
/* Account for stage s's joins posted so far: wait for them, and with `fn` tell it each join's bytes and when its
** data moved (strata__now seconds). */
typedef void (*strata__join_trace_fn)(void *arg, const char *op, uint64_t bytes, double t_start, double t_end);
int strata__tp_settle(strata_trainer_t tr, int s, strata__join_trace_fn fn, void *arg);
/* Drop stage s's pending joins after a failure (waits for the stage's queue). */
void strata__tp_drop(strata_trainer_t tr, int s);
/* The home replica's stage s, slice k, that another rank holds: its layout without memory (parallel/ranks.c). */
struct strata__stage *strata__ranks_shell(const struct strata_trainer *tr, int k, int s);
/* Stage s (0 .. nstages-1) of slice k of the home replica. NULL never: this process's, or (a pipeline across
** ranks) the layout of another rank's, whose `params` is NULL. */
static inline struct strata__stage *strata__home_stage(const struct strata_trainer *tr, int k, int s) {
  struct strata__stage *st = tr->st[(tr->home * tr->tp + k) * tr->nstages + s];
  return st ? st : strata__ranks_shell(tr, k, s);
}
static inline int strata__stage_first(const struct strata_trainer *tr, int s) { return s % tr->nstages == 0; }
static inline int strata__stage_last(const struct strata_trainer *tr, int s) { return (s + 1) % tr->nstages == 0; }

#endif /* STRATA__TRAINER_H */
