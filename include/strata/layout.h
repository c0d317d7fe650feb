/* SPDX-License-Identifier: MIT */
/* strata/layout.h — how one training job is cut: dp x pp x tp, which device holds each piece, the split, the schedule. */
#ifndef STRATA_LAYOUT_H
#define STRATA_LAYOUT_H

#include <strata/common.h>
#include <strata/model.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
** A layout is plain data: dp data-parallel replicas of a pipeline of pp
** ranks, pipeline rank r tensor-parallel over tp[r] devices (the degree may
** differ per rank), the layers of each (virtual) stage, the schedule, the
** micro-batches each replica runs per step, the virtual stages per rank
** (interleaving: stage s on rank s % pp; ZB-V, DualPipeV: two per rank in a V, rank d
** holding stages d and 2 pp - 1 - d) and the optimizer sharding
** (ZeRO stage 1, 2 or 3 across replicas). A single device is 1 x 1 x 1; a pipeline
** of p devices is 1 x p x 1.
**
** Devices are listed by (replica, pipeline rank, tp rank), replica-major:
** replica d's rank r's tp rank t is devices[offset(d, r) + t] where every
** replica holds sum(tp) devices. The global batch of a step is
** dp x microbatches x the trainer's batch.
**
** The JSON form (schema "strata-layout/1", the file strata-plan writes and
** strata-train --layout reads):
**   {"schema": "strata-layout/1", "dp": 2, "pp": 2, "tp": [2, 1],
**    "devices": [0, 1, 2, 3, 4, 5], "split": [5, 3], "schedule": "1f1b",
**    "microbatches": 8, "virtual_stages": 1, "zero": 0}
** "tp" may be one number for every rank; "devices" may be omitted (0, 1,
** ... in order) and so may "split" (balanced by the trainer).
** "precision" is "fp32" (the default) or "bf16" (mixed precision,
** Megatron's scheme: strata_train_options.precision); it is written only
** for bf16, so that an fp32 layout's text is what it was before the field
** existed, and read either way. "fp16" is refused by name (strata has no
** float16 loss scaler).
** "recompute" is "none" (the default), "selective" or "full" (activation
** recomputation, enum strata_recompute); like "precision" it is written
** only when it is not "none".
** "spatial": N (N > 1; written only then) makes the slices spatial slabs
** (strata_train_options.spatial): each replica's every rank is N devices,
** each running the rank's stages on its rows of every image (slab k of a
** stage sends to slab k of the next); "tp" may be left out (it is N) or must
** say N on every rank.
** "sp": true (written only then; false is the default) runs sequence
** parallelism with the tp slices (strata_train_options.sp): every rank's tp
** the same and above 1, a GPT whose context tp divides, no slabs, not zb,
** zbv or dualpipev.
*/
typedef struct strata_layout *strata_layout_t;

/*
** Activation recomputation (Korthikanti et al. 2022), for GPT blocks:
**   NONE       every block keeps what its backward reads;
**   SELECTIVE  a block drops its attention output and the fused attention's
**              per-query log-sum-exps (R x d_model + B x heads x T: no block
**              keeps a T x T matrix in any mode) and reruns the fused
**              attention from its kept Q, K and V just before its backward;
**   FULL       a block keeps only its input (the previous layer's output)
**              and reruns its forward just before its backward.
** The recomputed values are the first forward's bit for bit. The recompute
** of a block lands in one buffer per stage (one block's worth).
*/
enum strata_recompute {
  STRATA_RECOMPUTE_NONE = 0,
  STRATA_RECOMPUTE_SELECTIVE = 1,
  STRATA_RECOMPUTE_FULL = 2
};
/* Parse "none", "selective", "full"; STRATA_ERR_PARSE naming them otherwise. */
STRATA_API int strata_recompute_parse(const char *name, int *mode /* OUT */);
/* "none", "selective", "full"; "?" out of range. */
STRATA_API const char *strata_recompute_name(int mode);

/* Explicit values for strata_layout_new; zero means the default. Arrays are copied. */
struct strata_layout_desc {
  int dp;                       /* replicas; default 1 */
  int pp;                       /* pipeline ranks; default 1 */
  int tp_all;                   /* tp degree of every rank when `tp` is NULL; default 1 */
  const int *tp;                /* pp entries: tp degree per pipeline rank, or NULL */
  const int *devices;           /* dp x sum(tp) global devices, or NULL for 0, 1, ... */
  int ndevices;                 /* entries of `devices` (checked against dp x sum(tp)) */
  const int *split;             /* layers per virtual stage (pp x virtual_stages entries), or NULL */
  int nsplit;
  int schedule;                 /* STRATA_SCHEDULE_* (strata/schedule.h); default 1F1B */
  int microbatches;             /* per replica per step; default 1 */
  int virtual_stages;           /* per rank, INTERLEAVED only (>= 2; default 2 there, 1 otherwise; ZBV, DUALPIPEV: 2) */
  int zero;                     /* the ZeRO stage across replicas (dp >= 2): 1 shards the optimizer state, 2 also
                                   the reduced gradients, 3 also the parameters; 0 none */
  int precision;                /* STRATA_FLOAT32 (0, the default) or STRATA_BFLOAT16 (enum strata_dtype of
                                   strata/comm.h): what the job computes in, for the trainer and the planner */
  int recompute;                /* enum strata_recompute (0: none) */
  int spatial;                  /* > 1: the slices are that many spatial slabs (tp, when given, the same on every
                                   rank) */
  int sp;                       /* 1: sequence parallelism with tp (strata_train_options.sp); "sp": true in JSON */
};

/*
** Build and check a layout on its own: positive degrees, a device count
** that is dp x sum(tp), no device twice, a schedule that fits (interleaving
** needs microbatches a multiple of pp, ZB-V and DualPipeV at least 2 x pp), a split with pp x virtual_stages
** positive entries. Fails with one line naming the field, nothing allocated.
*/
STRATA_API int strata_layout_new(const struct strata_layout_desc *desc, strata_layout_t *out /* OUT */);
/* Parse the JSON form (`source` names it in messages, may be NULL), or read it from a file. */
STRATA_API int strata_layout_from_json(const char *json, const char *source, strata_layout_t *out /* OUT */);
STRATA_API int strata_layout_load(const char *path, strata_layout_t *out /* OUT */);
STRATA_API void strata_layout_free(strata_layout_t layout);
/* A copy of `layout` that lives on its own (a plan's candidate outlives its plan so); the caller frees it. */
STRATA_API int strata_layout_copy(strata_layout_t layout, strata_layout_t *out /* OUT */);

/* The JSON form, deterministic (the caller frees *json with free()). */
STRATA_API int strata_layout_to_json(strata_layout_t layout, char **json /* OUT */);

/*
** Check the layout against a model and the devices there are (`devices`
** global devices; < 0 skips that check): every listed device exists; the
** split covers the model's layers exactly, at most one stage per layer
** when balanced; each rank's tp degree divides what it splits — a GPT's
** heads and d_ff, an MLP's hidden widths, a CNN's convolution channels
** (a vocabulary that tp does not divide is replicated instead, not an error);
** recomputation only for a GPT (with any schedule: one that splits the
** backward recomputes before its weight pass too).
** Returns STRATA_OK or a one-line error naming the rank and the field.
*/
STRATA_API int strata_layout_check(strata_layout_t layout, strata_model_t model, int devices);

/* The numbers (read-only views; arrays belong to the layout). */
STRATA_API int strata_layout_dp(strata_layout_t layout);
STRATA_API int strata_layout_pp(strata_layout_t layout);
/* Tensor-parallel degree of pipeline rank `rank` (0 .. pp-1), or -1 out of range. */
STRATA_API int strata_layout_tp(strata_layout_t layout, int rank);
/* Virtual stages in all: pp x virtual_stages. */
STRATA_API int strata_layout_stages(strata_layout_t layout);
STRATA_API int strata_layout_virtual_stages(strata_layout_t layout);
STRATA_API int strata_layout_schedule(strata_layout_t layout);
STRATA_API int strata_layout_microbatches(strata_layout_t layout);
/* The ZeRO stage: 0 (none), 1, 2 or 3. "zero" in the JSON form is that number, or true for 1. */
STRATA_API int strata_layout_zero(strata_layout_t layout);
/* STRATA_FLOAT32 or STRATA_BFLOAT16 (strata/comm.h); STRATA_FLOAT32 for NULL. */
STRATA_API int strata_layout_precision(strata_layout_t layout);
/* enum strata_recompute; STRATA_RECOMPUTE_NONE for NULL. */
STRATA_API int strata_layout_recompute(strata_layout_t layout);
/* 1 when the layout runs sequence parallelism with its tp (0 for NULL). */
STRATA_API int strata_layout_sp(strata_layout_t layout);
/* The spatial slabs of each replica (1: none, the slices are tp's). */
STRATA_API int strata_layout_spatial(strata_layout_t layout);
/* Devices in all (dp x sum(tp)) and the list itself. */
STRATA_API int strata_layout_device_count(strata_layout_t layout);
STRATA_API const int *strata_layout_devices(strata_layout_t layout);
/* The device of (replica, pipeline rank, tp rank); STRATA_ERR_RANGE outside. */
STRATA_API int strata_layout_device(strata_layout_t layout, int replica, int rank, int tp_rank, int *device /* OUT */);
/* Layers per virtual stage (strata_layout_stages entries), or NULL when the trainer balances them. */
STRATA_API const int *strata_layout_split(strata_layout_t layout);

/* One line, e.g. "dp 2 x pp 2 x tp 2,1 over 6 devices, 1f1b, 8 micro-batches per replica" (caller frees). */
STRATA_API int strata_layout_describe(strata_layout_t layout, char **text /* OUT */);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_LAYOUT_H */
