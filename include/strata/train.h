/* SPDX-License-Identifier: MIT */
/* strata/train.h — training a model on a device: forward, backward, AdamW, schedules, evaluation, checkpoints. */
#ifndef STRATA_TRAIN_H
#define STRATA_TRAIN_H

#include <strata/common.h>
#include <strata/data.h>
#include <strata/layout.h>
#include <strata/model.h>
#include <strata/schedule.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct strata_trainer *strata_trainer_t;

struct strata_train_options {
  int device;               /* global device index */
  int64_t batch;            /* samples (sequences or images) per micro-batch */
  int64_t accum;            /* micro-batches per optimizer step (gradient accumulation), >= 1 */
  int64_t steps;            /* total optimizer steps (for the schedule) */
  float lr;                 /* peak learning rate */
  float min_lr;             /* floor of the cosine decay */
  int64_t warmup;           /* linear warm-up steps */
  float weight_decay;       /* AdamW decoupled decay, applied to weight matrices only */
  float beta1, beta2, eps;
  float clip;               /* clip the global gradient norm to this; 0 = off */
  uint64_t seed;            /* parameters and data order */
  int precision;            /* STRATA_FLOAT32 (0) or STRATA_BFLOAT16 (strata/comm.h): mixed precision, Megatron's
                            ** scheme — float32 parameters, gradients and AdamW moments; bfloat16 activations,
                            ** boundary gradients, pipeline messages and a bfloat16 copy of the parameters that the
                            ** GEMMs read, refreshed after each update; sums, norms, softmax and losses in float32.
                            ** Host and OpenCL devices so far */
  int grad_reduce;          /* STRATA_FLOAT32 (0) or STRATA_BFLOAT16: the type the data-parallel gradient
                            ** all-reduce (ZeRO: reduce-scatter) moves — bf16 halves its traffic, each reduction
                            ** step summing in float32 and rounding once; gradients stay float32 before and after.
                            ** Needs replicas (dp >= 2) in one process */
  int recompute;            /* enum strata_recompute of strata/layout.h (0: none): GPT blocks drop activations and
                            ** recompute them during the backward (an RC action before each B, BI and W); losses,
                            ** gradients and parameters equal those of none bit for bit. Not with MLP or CNN models
                            ** (their layers keep their activations) */
  int spatial;              /* 0 or 1: whole images. N > 1 (strata_trainer_new_layout, a cnn with "gap"): spatial
                            ** parallelism, the layout's tp slices (tp N, pp 1) are N slabs of every image's rows,
                            ** each stage whole on its rows, halo rows exchanged, averages and gradients joined */
  struct strata_cluster *cluster; /* NULL: the devices are this process's. Else the job of strata/cluster.h:
                                  ** devices are numbered globally over its ranks, every rank creates the
                                  ** trainer with the same layout and options, builds only the stages on its
                                  ** own devices, and every call below is then collective (see
                                  ** strata_trainer_new_layout); the cluster must outlive the trainer */
  int sp;                   /* 1: sequence parallelism with tensor parallelism (Megatron's): a GPT's layernorms and
                            ** residual adds run on 1/tp of each micro-batch's token rows on each slice, the tp joins
                            ** are an all-gather before each column-split matrix and a reduce-scatter after each
                            ** row-split one (instead of one all-reduce). Needs tp > 1 on every stage, the same tp
                            ** everywhere, tp dividing the context, one process, and not zb, zbv or dualpipev */
};

/* Sensible defaults: device 0, batch 8, accum 1, steps 1000, lr 1e-3 -> 1e-4,
** warm-up 5% of steps, weight decay 0.1, betas 0.9/0.95, eps 1e-8, clip 1, seed 1. */
STRATA_API void strata_train_options_default(struct strata_train_options *opts /* OUT */);

/*
** Create a trainer: allocates parameters, gradients and AdamW moments on
** the device and initialises the parameters from the seed (GPT-2 style:
** normal(0, 0.02), residual projections scaled by 1/sqrt(2 layers)). The
** model and dataset must outlive the trainer. `data` may be NULL for a
** trainer that only loads checkpoints and computes logits or losses of
** given batches (strata_trainer_step and _eval then fail). Fails cleanly (nothing left
** allocated) when the device's memory limit is too small, saying how much
** the model needs.
*/
STRATA_API int strata_trainer_new(strata_model_t model, strata_dataset_t data, const struct strata_train_options *opts,
                                  strata_trainer_t *out /* OUT */);
STRATA_API void strata_trainer_free(strata_trainer_t tr);

struct strata_step_stats {
  int64_t step;             /* optimizer steps done, after this one */
  float loss;               /* mean training loss over the step's micro-batches */
  float grad_norm;          /* global gradient norm before clipping */
  float lr;                 /* learning rate used */
  uint64_t samples;         /* samples processed in the step */
  uint64_t tokens;          /* tokens (text) or samples (images) processed */
  double flops;             /* model FLOPs of the step (forward + backward) */
};

/* One optimizer step: accum micro-batches forward and backward, clip, AdamW. */
STRATA_API int strata_trainer_step(strata_trainer_t tr, struct strata_step_stats *stats /* OUT, may be NULL */);

/* Mean loss over `batches` validation micro-batches drawn from a fixed
** stream (the same batches every call). */
STRATA_API int strata_trainer_eval(strata_trainer_t tr, int64_t batches, float *loss /* OUT */);

/*
** Let the caller stop long calls promptly (a Ctrl-C): `stop` (NULL: never)
** is called with `arg` before every validation batch of strata_trainer_eval
** and, when it returns non-zero, the evaluation returns
** STRATA_ERR_INTERRUPTED without a loss; the trainer is unchanged. It must
** be cheap and may be called from the caller's thread only.
*/
STRATA_API void strata_trainer_set_stop(strata_trainer_t tr, int (*stop)(void *arg), void *arg);

/*
** Save the parameters (GPT-2 style names, e.g. h.0.attn.c_attn.weight),
** the AdamW moments (optimizer.m.NAME, optimizer.v.NAME) and the training
** state (step, seed, data stream, options, model config) as metadata, to a
** safetensors file, atomically. Load checks that the file matches the
** model and restores everything, so training continues exactly.
*/
STRATA_API int strata_trainer_save(strata_trainer_t tr, const char *path);
STRATA_API int strata_trainer_load(strata_trainer_t tr, const char *path);

STRATA_API int64_t strata_trainer_steps_done(strata_trainer_t tr);

/*
** Copy every parameter to host memory in a fixed order (the layers', then
** each layer's tensors): `count` receives the total number of floats;
** `params` (may be NULL to ask the size) receives them.
*/
STRATA_API int strata_trainer_params(strata_trainer_t tr, float *params /* OUT */, size_t *count /* IN/OUT */);

/*
** Loss and gradient for one given batch without updating anything: for
** tests and gradient checks. `inputs`/`targets` as strata_dataset_sample
** gives them for `batch` samples; `grads` receives the gradient in the
** order of strata_trainer_params (may be NULL).
*/
STRATA_API int strata_trainer_loss_grad(strata_trainer_t tr, const void *inputs, const int32_t *targets, int64_t batch,
                                        float *loss /* OUT */, float *grads /* OUT */);
/* Overwrite every parameter from host memory (same order and count). */
STRATA_API int strata_trainer_set_params(strata_trainer_t tr, const float *params, size_t count);

/*
** Logits for the last position of each of `batch` token sequences of the
** model's context length (text models): `logits` receives batch * vocab floats.
*/
STRATA_API int strata_trainer_logits(strata_trainer_t tr, const int32_t *tokens, int64_t batch, float *logits /* OUT */);
/*
** Logits at positions [first, first + count) of each of `batch` token
** sequences of the model's context length: `logits` receives batch x count
** x vocab floats, sequence by sequence. The attention is causal, so the
** logits at position p depend on tokens 0..p only: a prompt shorter than
** the context, padded after its end, gives at its last position the logits
** a model run on the prompt alone gives.
*/
STRATA_API int strata_trainer_logits_at(strata_trainer_t tr, const int32_t *tokens, int64_t batch, int64_t first,
                                        int64_t count, float *logits /* OUT */);

/*
** Generation with a KV cache (text models, GPT or llama, on a one-device
** trainer in float32: a pipeline, tensor-parallel, replicated, ZeRO-3 or bf16
** trainer is refused by name). A decoder keeps each block's keys and values
** (after RoPE for a llama) for positions 0, 1, ... of one sequence, so each
** new token runs one row through the model instead of the whole prefix.
** strata_decoder_feed runs `count` tokens at the next positions (a prompt's
** prefill, or one new token) and writes the logits after the last of them
** into `logits` (vocab floats; NULL: none). The positions end at the model's
** context: a feed past it is refused (STRATA_ERR_RANGE) with nothing run, and
** the caller decides (strata-generate slides the window with the full-window
** path, strata_trainer_logits_at). strata_decoder_reset empties the cache.
** Ownership: the decoder owns its cache and reads the trainer's parameters at
** every feed: free it (strata_decoder_free, NULL allowed) before the trainer,
** and do not train or load between feeds unless that change is wanted.
** Greedy decoding gives the tokens of the full-window path (the attention of
** the one query is two GEMMs around a softmax: equal to float rounding).
*/
typedef struct strata_decoder *strata_decoder_t;
STRATA_API int strata_trainer_decoder(strata_trainer_t tr, strata_decoder_t *dec /* OUT */);
STRATA_API int strata_decoder_feed(strata_decoder_t dec, const int32_t *tokens, int64_t count, float *logits /* OUT */);
STRATA_API int64_t strata_decoder_position(strata_decoder_t dec);
STRATA_API void strata_decoder_reset(strata_decoder_t dec);
STRATA_API void strata_decoder_free(strata_decoder_t dec);

/* ---- pipeline parallelism ---- */

/* The arrays are the caller's, read during strata_trainer_new_pipeline only. */
struct strata_pipeline_options {
  int devices;                      /* pipeline devices p (>= 1) */
  const int *device;                /* [devices]: global device index of each pipeline rank */
  const int *split;                 /* [devices x virtual stages]: layers per stage, in order; NULL (or all 0):
                                    ** balanced automatically */
  int schedule;                     /* STRATA_SCHEDULE_* of strata/schedule.h; 0 = 1F1B */
  int microbatches;                 /* m micro-batches per step (each of opts->batch samples); replaces accum */
  int virtual_stages;               /* v stages per device for INTERLEAVED (default 2) */
  const char *trace;                /* Chrome/Perfetto trace JSON written after every step, or NULL */
};

/*
** A trainer whose model is cut into consecutive stages over several
** devices (of any backends) and trained by a pipeline schedule: one worker
** thread per device runs its action list, activations and gradients move
** between devices on separate copy threads, and each stage updates its own
** weights. With the same seed, batch and micro-batches it computes what
** strata_trainer_new with accum = m computes. The balanced split (split all
** 0) weighs each layer's FLOPs against each kind of device's speed timed by
** a GEMM (STRATA_BALANCE=rated: every device alike, 1/F for a host device
** slowed F times, the same cut in every run) and keeps each stage inside its
** device's memory limit.
*/
STRATA_API int strata_trainer_new_pipeline(strata_model_t model, strata_dataset_t data,
                                           const struct strata_train_options *opts,
                                           const struct strata_pipeline_options *pipeline,
                                           strata_trainer_t *out /* OUT */);

struct strata_train_device_stats {
  int device;                       /* global device index */
  double busy_s;                    /* compute seconds in the last step; on the host backend the CPU time its
                                    ** threads spent, so devices time-sharing cores are not counted busy
                                    ** while they wait for one */
  uint64_t peak_bytes;              /* the device's peak memory in the last step */
  int peak_inflight;                /* most micro-batches whose activations one of its stages held at once */
  /* what its stages hold, from the runtime's accounting at creation (a tensor-parallel slice holds its part) */
  uint64_t param_bytes;             /* parameters */
  uint64_t grad_bytes;              /* their gradients */
  uint64_t optimizer_bytes;         /* the two AdamW moments */
  uint64_t activation_bytes;        /* one micro-batch's activations, times the schedule's peak in flight */
  uint64_t planned_bytes;           /* what the memory plan checked at creation that a step needs at most here: the
                                    ** figure strata_plan_memory predicts for the same layout (one memory model) */
};

/* What a trainer reports, of every layout (one device is 1 x 1 x 1, its schedule 0). The arrays belong to the
** trainer: valid while it lives, updated by each step. */
struct strata_train_report {
  int devices, stages, microbatches, schedule;
  const int *split;                 /* [stages]: layers per stage */
  const int *stage_device;          /* [stages]: -1 for a stage no device holds (a missing slice of a rank with
                                    ** fewer tp slices than the widest: slice t % its degree stands for it) */
  double wall_s;                    /* the last step, compute and transfers */
  double bubble;                    /* measured: 1 - sum(busy) / (devices x wall) */
  double bubble_ideal;              /* the schedule's, with unit costs */
  const struct strata_train_device_stats *dev; /* [devices] */
  uint64_t host_waits;              /* the last step's host waits: how often a thread of this process blocked on a
                                    ** device queue or event (strata_queue_finish, strata_event_sync, a staged
                                    ** copy's chunk, ...), every thread of the process counted */
};

/* The names of 0.1, deprecated: they will be removed in the release after 0.2. */
#define strata_pipeline_report strata_train_report
#define strata_pipeline_device_stats strata_train_device_stats

/*
** The trainer of a layout (strata/layout.h), checked against the model and
** the devices first: dp replicas of a pipeline (pp ranks, the layout's
** schedule and micro-batches per replica), each replica training on its own
** dp-th of the step's micro-batches (replica r the r-th run of
** microbatches, in the order one device with accum = dp x microbatches
** draws them), every stage's gradients all-reduced across the replicas right
** after its backward work (overlapping what the device runs next), then the
** same clipping and AdamW step on every replica, whose copies stay equal. A
** 1 x 1 x 1 layout is strata_trainer_new's single device, 1 x p x 1 its
** pipeline. `trace` (may be NULL) as strata_pipeline_options.trace.
**
** Tensor parallelism (tp > 1, GPT models): every stage is tp slices on tp
** devices (Megatron's split: each slice holds a group of heads — their Q, K
** and V columns of c_attn, the matching rows of c_proj — and a tp-th of the
** MLP's hidden units; when tp divides the vocabulary, a tp-th of the token
** embedding's and the head's rows, whose cross-entropy joins only each row's
** max, sum of exponentials and target logit; layernorms and the position
** embedding whole on every slice); the two row-split products of every block are all-reduced over
** the slices in the forward, the two column-split input gradients in the
** backward, each slice allocating, computing and updating only its part.
** MLP and CNN layers are cut in pairs inside a stage: an even-numbered
** linear layer (convolution) by its outputs, the next by its inputs, whose
** partial results are all-reduced before its bias and ReLU.
** Parameters, checkpoints and strata_trainer_params hold whole tensors
** whatever the layout. A tp degree that differs between pipeline ranks is
** refused (STRATA_ERR_UNSUPPORTED) in this version.
**
** Precision: a layout that states bf16 (strata_layout_precision) trains in
** bf16 whatever opts->precision says; a layout in fp32, the default, which
** states nothing, trains in opts->precision. (strata-train refuses a
** --precision that differs from its layout file's instead.)
**
** ZeRO-1 (the layout's zero, dp >= 2): each stage's gradients are
** reduce-scattered over the replicas, replica r's AdamW updates shard r of
** the stage's flat parameters (its moments hold only that shard), and the
** updated shards are all-gathered after the device's last update. ZeRO-2
** (zero 2): replica r also keeps only shard r of the reduced gradients —
** each weight's (and its bias's) gradients of every micro-batch are summed
** over the replicas as the backward writes them, into a window of that
** size, and shard r's part added into the shard's sums; a pass that returns
** whole gradients (strata_trainer_loss_grad with grads) is refused, and so
** is a bf16 gradient reduction. ZeRO-3 (zero 3): replica r also keeps only
** shard r of the parameters (and of their bf16 copy); before a layer reads
** a weight and its bias, in a forward or a backward (or a pass), they are
** gathered into a window of that size from every replica's shard (copies
** from the other replicas' devices: one process only, refused with a
** cluster), and the update writes the shard in place.
**
** Several processes (opts->cluster, a job of strata/cluster.h of more than
** one rank): the layout's devices are the cluster's global ones, and every
** rank calls this with the same model, data, options and layout. Each rank
** builds and runs only the stages on its own devices; every rank holds one
** at least, in this version each tensor-parallel group lies on one rank
** (else STRATA_ERR_UNSUPPORTED); a trace is one file from rank 0. The
** replicas' gradient collectives go through the cluster's hierarchical
** ones (strata_cluster_allreduce, _reducescatter, _allgather), blocking
** the device's worker while they run; a pipeline's
** messages to a stage on another rank go through strata_cluster_send and
** _recv (host-staged), overlapped with compute as on one box. Then
** strata_trainer_step, _save, _load and _free are collective (every rank
** calls them, in the same order): every rank's step reports the same loss
** and gradient norm, which are the one-process run's; _save writes one
** file from rank 0 (whole tensors; ZeRO's moments gathered) and returns its
** status on every rank; _load reads the file on every rank. _eval,
** _params and _logits answer from this rank's first replica, with no
** traffic when that replica is this rank's alone; with its pipeline across
** ranks _eval and _params are collective too (the stages' activations and
** values through the cluster) and _logits is refused. A failure between ranks fails the call, naming the rank; the
** cluster is then broken (see strata_cluster_abort).
*/
STRATA_API int strata_trainer_new_layout(strata_model_t model, strata_dataset_t data,
                                         const struct strata_train_options *opts, strata_layout_t layout,
                                         const char *trace, strata_trainer_t *out /* OUT */);

/* How the model is cut and how the last step went (a single-device trainer
** reports one stage). */
STRATA_API int strata_trainer_report(strata_trainer_t tr, struct strata_train_report *report /* OUT */);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_TRAIN_H */
