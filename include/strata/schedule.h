/* SPDX-License-Identifier: MIT */
/* strata/schedule.h — pipeline schedules as data: per-device action lists, their generators and their validator. */
#ifndef STRATA_SCHEDULE_H
#define STRATA_SCHEDULE_H

#include <strata/common.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
** A schedule says, for every device of a pipeline, the order in which it
** runs its actions for one optimizer step over `microbatches` micro-batches.
** The model is cut into `stages` consecutive stages (virtual stages: with
** interleaving a device holds several, stage s on device stage_device[s]).
** Pure data: the executor runs it on devices, the simulator on a cost model.
**
**   FORWARD s m      forward of micro-batch m through stage s
**   BACKWARD s m     full backward (input and weight gradients)
**   BACKWARD_INPUT   input gradient only (zero-bubble) ...
**   BACKWARD_WEIGHT  ... and the weight gradient, later
**   SEND_ACT s m     send stage s's output for m to the device of s + 1
**   RECV_ACT s m     receive stage s's input for m (from the device of s - 1)
**   SEND_GRAD s m    send the gradient of stage s's input to the device of s - 1
**   RECV_GRAD s m    receive the gradient of stage s's output (from the device of s + 1)
**   OPTIMIZER s      the AdamW step of stage s, after all its gradients
**   GRAD_REDUCE s    data parallelism: all-reduce stage s's gradients with the
**                    same stage of every other replica, after its backward work
**   GRAD_SCATTER s   ZeRO-1: reduce-scatter them instead (each replica keeps its shard);
**                    ZeRO-2: the mark that the stage's gradients, summed over the
**                    replicas weight by weight and micro-batch by micro-batch inside
**                    its B and W (the trainer's stage window), are all in the shards
**   PARAM_GATHER s   ZeRO-1: all-gather the updated parameter shards, after OPTIMIZER s
**                    (generated after the device's last OPTIMIZER; micro-batch -1)
**   PARAM_GATHER s m ZeRO-3: the gathers of stage s's weights for the pass right after
**                    it (F, B, BI or W of s m; only its RECOMPUTE may stand between):
**                    one per pass, not one per layer, so a list grows by one action
**                    per compute action. It posts the gather of the pass's first
**                    layer's weights from the replicas' shards; inside the pass each
**                    layer's gather is posted while the layer before computes (FSDP's
**                    prefetch: two layers' weights at most live at once, the stage's
**                    window of two halves), each traced as "gather s.m layer". It
**                    waits for no other device (the shards hold the step's
**                    parameters all along): not a collective
**   TP_JOIN_FORWARD s m   tensor parallelism: the joins (all-reduces over the
**                    stage's tp slices) of F s m, right after it; completes
**                    when every slice's device has reached it
**   TP_JOIN_BACKWARD s m  the same for the backward of s m (B or BI)
**                    (spatial parallelism's slabs are a stage's slices too: their halo
**                    exchanges, joined averages and summed gradients are these joins)
**   RECOMPUTE s m    activation recomputation: the forward work (of the
**                    recompute mode) that stage s's backward of m needs
**                    again, after F s m and right before its B; with a
**                    split backward one before its BI and another before
**                    its W (the weight pass reads the blocks' activations
**                    too, and the one-block buffer holds the BI's no more:
**                    recomputing again keeps the saving, where keeping the
**                    BI's blocks until the W would hold every block of each
**                    micro-batch between the two); run block by block
**                    inside that backward part, into one block's buffer.
**                    On a tp-cut stage the W's recomputation joins the
**                    slices: a TP_JOIN_BACKWARD follows that W too
**
** Sends are buffered (they never wait for the receiver); a receive waits
** for its send. Stages on one device pass data without send/receive.
**
** Data-parallel replicas: a schedule may hold `replicas` copies of one
** pipeline, each a chain of stages/replicas stages (replica r's stage j is
** stage r x (stages/replicas) + j) on its own devices; sends and receives
** stay inside a chain, and the collectives (GRAD_REDUCE, GRAD_SCATTER,
** PARAM_GATHER, micro-batch -1) join the same stage of every replica: each
** completes when every replica's device has reached it (ZeRO-3's PARAM_GATHER
** of a micro-batch does not: see above).
**
** Tensor parallelism: with `tp` slices, each replica is tp chains (chain
** c = replica x tp + slice, stages c x chain .. on devices c x pp ..), one
** per slice, whose stages run the same lists on their own devices; the
** TP_JOIN actions join the slices of one replica's stage, the gradient
** collectives the same slice of every replica.
*/
#define STRATA_ACTION_MAP(X)                                                                                           \
  X(FORWARD, "F")                                                                                                      \
  X(BACKWARD, "B")                                                                                                     \
  X(BACKWARD_INPUT, "BI")                                                                                              \
  X(BACKWARD_WEIGHT, "W")                                                                                              \
  X(SEND_ACT, "SA")                                                                                                    \
  X(RECV_ACT, "RA")                                                                                                    \
  X(SEND_GRAD, "SG")                                                                                                   \
  X(RECV_GRAD, "RG")                                                                                                   \
  X(OPTIMIZER, "OPT")                                                                                                   \
  X(GRAD_REDUCE, "GR")                                                                                                 \
  X(GRAD_SCATTER, "GRS")                                                                                               \
  X(PARAM_GATHER, "PAG")                                                                                               \
  X(TP_JOIN_FORWARD, "TJF")                                                                                            \
  X(TP_JOIN_BACKWARD, "TJB")                                                                                           \
  X(RECOMPUTE, "RC")

enum strata_action_kind {
#define STRATA__ACTION_ENUM(id, label) STRATA_ACTION_##id,
  STRATA_ACTION_MAP(STRATA__ACTION_ENUM)
#undef STRATA__ACTION_ENUM
  STRATA_ACTION_KIND_COUNT
};

/* Short label of a kind ("F", "SA", ...); "?" when out of range. */
STRATA_API const char *strata_action_label(int kind);

struct strata_action {
  int kind;
  int stage;                 /* virtual stage */
  int microbatch;            /* -1 for OPTIMIZER */
};

enum strata_schedule_kind {
  STRATA_SCHEDULE_GPIPE = 1,        /* all forwards, then all backwards */
  STRATA_SCHEDULE_1F1B = 2,         /* warm-up forwards, then one forward one backward */
  STRATA_SCHEDULE_INTERLEAVED = 3,  /* 1F1B over v virtual stages per device (Megatron) */
  STRATA_SCHEDULE_ZB_H1 = 4,        /* zero-bubble H1: backward split into input and weight parts */
  STRATA_SCHEDULE_ZBV = 5,          /* zero-bubble V: two chunks per device in a V, backward split (Qi et al.) */
  STRATA_SCHEDULE_DUALPIPEV = 6     /* DualPipeV: DeepSeek-V3's DualPipe cut in half, the same V, F and B paired */
};

typedef struct strata_schedule *strata_schedule_t;

/*
** Generate a schedule for `devices` pipeline devices (p), `microbatches`
** micro-batches (m) and, for INTERLEAVED, `virtual_stages` stages per
** device (v >= 2; ignored otherwise). Stage s lives on device s % p, except
** for ZBV and DUALPIPEV: 2p stages in a V, device d holding stages d and
** 2p - 1 - d (strata_schedule_kind_stage_device). Constraints: p >= 1,
** m >= 1; INTERLEAVED needs m a multiple of p, ZBV and DUALPIPEV m >= 2p
** (refused with the reason otherwise). The caller frees the schedule.
*/
STRATA_API int strata_schedule_generate(int kind, int devices, int microbatches, int virtual_stages,
                                        strata_schedule_t *out /* OUT */);
/*
** The same schedule for `replicas` data-parallel copies of the pipeline:
** devices x replicas devices (replica r's pipeline rank d is device
** r x devices + d), each replica's list that of its rank with its own
** stages, and after each stage's last backward work a GRAD_REDUCE (with
** `zero`: GRAD_SCATTER, and PARAM_GATHER after the device's last OPTIMIZER; with `zero` 3 instead a
** PARAM_GATHER s m right before every F, B, BI and W). One replica is strata_schedule_generate's schedule.
*/
STRATA_API int strata_schedule_generate_replicated(int kind, int devices, int microbatches, int virtual_stages,
                                                   int replicas, int zero, strata_schedule_t *out /* OUT */);
/*
** dp x pp x tp: `replicas` copies, each of `tp` chains (one per slice) of the
** pipeline of `devices` ranks: chain c = replica x tp + slice runs on
** devices c x devices .. c x devices + devices - 1, each list that of its
** pipeline rank with TP_JOIN_FORWARD / _BACKWARD right after every forward
** and backward (tp > 1) and the gradient collectives as in
** strata_schedule_generate_replicated (replicas > 1). tp 1 is that schedule.
*/
STRATA_API int strata_schedule_generate_hybrid(int kind, int devices, int microbatches, int virtual_stages,
                                               int replicas, int tp, int zero, strata_schedule_t *out /* OUT */);
/*
** As strata_schedule_generate_hybrid with a tp degree per pipeline rank:
** tp[d] slices on rank d (devices entries). Each replica holds sum(tp)
** devices, numbered replica by replica, then slice by slice, then rank by
** rank (slice t's ranks those with more than t slices). Chain c = replica x
** max(tp) + slice still names every stage, but a stage whose slice is at
** least its rank's degree is held by no device: the slice slice % degree of
** the same replica stands for it (strata_schedule_stage_owner). A send goes
** to every stage of the neighbouring rank that it stands for: the input of
** a rank with more slices than the one before comes from that rank's slice
** t % degree, and only the slices of a wider rank that the next one holds
** send to it. Uniform tp is strata_schedule_generate_hybrid's schedule.
*/
STRATA_API int strata_schedule_generate_hybrid_ranks(int kind, int devices, int microbatches, int virtual_stages,
                                                     int replicas, const int *tp, int zero,
                                                     strata_schedule_t *out /* OUT */);
/* As strata_schedule_from_lists, for `replicas` chains of stages/replicas stages each. */
STRATA_API int strata_schedule_from_replica_lists(int replicas, int devices, int stages, int microbatches,
                                                  const int *stage_device, const struct strata_action *const *lists,
                                                  const int *counts, strata_schedule_t *out /* OUT */);
/* As strata_schedule_from_lists, for replicas x tp chains (chain c = replica x tp + slice) of
** stages / (replicas x tp) stages each. */
STRATA_API int strata_schedule_from_hybrid_lists(int replicas, int tp, int devices, int stages, int microbatches,
                                                 const int *stage_device, const struct strata_action *const *lists,
                                                 const int *counts, strata_schedule_t *out /* OUT */);
/* A copy of `s` with a RECOMPUTE s m right before every B s m, BI s m and W s m (activation recomputation) and, on a
** stage cut by tp, a TP_JOIN_BACKWARD s m right after every W s m (the joins of its recomputation); the caller frees
** it. */
STRATA_API int strata_schedule_with_recompute(strata_schedule_t s, strata_schedule_t *out /* OUT */);
/* Build a schedule from explicit lists (for tests and hand-written schedules):
** lists[d] has counts[d] actions; stage_device has `stages` entries. Copies everything. */
STRATA_API int strata_schedule_from_lists(int devices, int stages, int microbatches, const int *stage_device,
                                          const struct strata_action *const *lists, const int *counts,
                                          strata_schedule_t *out /* OUT */);
STRATA_API void strata_schedule_free(strata_schedule_t s);

/* Parse "gpipe", "1f1b", "interleaved", "zb" (or "zb-h1"), "zbv", "dualpipev"; STRATA_ERR_PARSE otherwise, naming the
** known ones. */
STRATA_API int strata_schedule_kind_parse(const char *name, int *kind /* OUT */);
STRATA_API const char *strata_schedule_kind_name(int kind);
/* The names strata_schedule_kind_parse knows, for messages and --help: "gpipe, 1f1b, ..." (a static string). */
STRATA_API const char *strata_schedule_kind_names(void);

/*
** What a kind implies, before any list exists (the trainer, the layout and
** the planner read these rather than knowing the kinds):
**   _stages_per_device: the stages each device holds — `virtual_stages` for
**     INTERLEAVED (2 when 0), 2 for ZBV and DUALPIPEV, 1 otherwise;
**   _stage_device: the device of stage `stage` of a pipeline of `devices`
**     devices — stage % devices, or for ZBV and DUALPIPEV the V: stage for
**     the first half, 2 x devices - 1 - stage for the second; -1 out of range;
**   _split_backward: 1 when the kind splits the backward into BI and W
**     (ZB_H1, ZBV, DUALPIPEV), so stages keep what W needs;
**   _min_microbatches: the fewest micro-batches it serves on `devices`
**     devices (2 x devices for ZBV and DUALPIPEV, 1 otherwise;
**     INTERLEAVED's multiple of devices is checked apart).
*/
STRATA_API int strata_schedule_kind_stages_per_device(int kind, int virtual_stages);
STRATA_API int strata_schedule_kind_stage_device(int kind, int devices, int stage);
STRATA_API int strata_schedule_kind_split_backward(int kind);
STRATA_API int strata_schedule_kind_min_microbatches(int kind, int devices);

STRATA_API int strata_schedule_kind(strata_schedule_t s);
STRATA_API int strata_schedule_devices(strata_schedule_t s);
STRATA_API int strata_schedule_stages(strata_schedule_t s);
STRATA_API int strata_schedule_microbatches(strata_schedule_t s);
STRATA_API int strata_schedule_stage_device(strata_schedule_t s, int stage);
/* Data-parallel replicas (1 for a plain pipeline) and tensor-parallel slices (1 without tp). */
STRATA_API int strata_schedule_replicas(strata_schedule_t s);
STRATA_API int strata_schedule_tp(strata_schedule_t s);
/* A stage's tensor-parallel degree (its pipeline rank's), whether a device holds it (0: another slice stands for
** it, see strata_schedule_generate_hybrid_ranks) and the stage that does (itself when held); 0 / -1 out of range. */
STRATA_API int strata_schedule_stage_tp(strata_schedule_t s, int stage);
STRATA_API int strata_schedule_stage_held(strata_schedule_t s, int stage);
STRATA_API int strata_schedule_stage_owner(strata_schedule_t s, int stage);
/* A schedule of the shape of `like` (devices, stages, replicas, slices, placement) with other lists: for tests and
** hand-edited schedules. Checks the shape as strata_schedule_from_lists does. */
STRATA_API int strata_schedule_with_lists(strata_schedule_t like, const struct strata_action *const *lists,
                                          const int *counts, strata_schedule_t *out /* OUT */);
/* Device d's actions: a pointer valid while `s` lives, and their number. */
STRATA_API const struct strata_action *strata_schedule_actions(strata_schedule_t s, int device, int *count /* OUT */);

/*
** Check that the lists are complete and deadlock-free: every stage runs
** each micro-batch's forward once and its backward once (B, or BI then W),
** on the stage's device; every boundary between stages on different
** devices has exactly one matching send and receive per micro-batch and
** direction, on the right devices, and none where the stages share a
** device; each stage's OPTIMIZER comes once, after all its backward work;
** with replicas, every stage of every replica has the same gradient
** collective (GRAD_REDUCE, or GRAD_SCATTER then PARAM_GATHER) once, after
** its backward work and before (PARAM_GATHER: after) its OPTIMIZER, and a
** schedule without replicas has none; with tp slices, every forward and
** backward (B or BI) has its TP_JOIN right after it on its device, and a
** schedule without slices has none; a schedule with any RECOMPUTE has one
** for every backward part (B, BI and W), after its F and before it — the
** W's after the BI (an RC belongs to the next backward part of its stage
** and micro-batch in its device's list) — and on a tp-cut stage a
** TP_JOIN_BACKWARD right after each W, completing with the other slices'
** (a TP_JOIN_BACKWARD after a W without recomputation is refused); a
** schedule with any PARAM_GATHER of a micro-batch (ZeRO-3) has one right
** before every F, B, BI and W of its stage and micro-batch (only that
** backward part's RECOMPUTE between them), none elsewhere and no
** PARAM_GATHER of the whole step; and executing the lists (sends
** buffered, receives waiting, collectives waiting for every replica) finishes. On
** failure returns STRATA_ERR_INVALID and a message naming the device, the
** position in its list and the action (and, for a deadlock, what each
** stuck device waits for).
*/
STRATA_API int strata_schedule_validate(strata_schedule_t s);

/*
** The ideal bubble fraction of the schedule with unit costs (forward 1,
** backward 2 — or input 1 + weight 1 — transfers and recomputation free): 1 - busy / (p x span),
** computed by simulating the lists. 1F1B/GPipe give (p-1)/(m+p-1).
*/
STRATA_API int strata_schedule_bubble(strata_schedule_t s, double *bubble /* OUT */);

/* Peak number of micro-batches whose activations a stage holds at once
** (forwarded, backward not finished) when its device runs its list. */
STRATA_API int strata_schedule_peak_inflight(strata_schedule_t s, int stage, int *peak /* OUT */);

/*
** The outputs of `stage` waiting at once for the next stage of its chain to take them, when that stage is on the
** same device (a V's turn: the executor hands an output over when the next stage's F copies it in): the most
** micro-batches between the stage's F and the next stage's F of the same micro-batch in the device's list. 1 when
** the next stage is on another device (its copy thread takes each output as it is made) or there is none. Each is
** one output buffer the stage holds apart from its activations (the trainer's output pool).
*/
STRATA_API int strata_schedule_peak_handoff(strata_schedule_t s, int stage, int *peak /* OUT */);

/*
** The most bytes of micro-batches in flight device `device` holds at once when it runs its list: the largest, over
** the list, of the sum over its stages of the micro-batches in flight (as strata_schedule_peak_inflight counts them)
** times bytes[stage] (bytes per micro-batch, one entry per stage; NULL: 1 each, a count of micro-batches). It is
** the sum of its stages' own peaks where they peak together, less where they do not: ZB-V's two chunks on a device
** peak at different points (at most 2p half-size micro-batches at once, no more than their peaks add to; DualPipeV's
** too).
** With `counts` (one entry per stage, or NULL), each of the device's stages gets its micro-batches in flight at the
** first point of that peak (the other entries are left as they are).
*/
STRATA_API int strata_schedule_device_peak(strata_schedule_t s, int device, const double *bytes, double *peak /* OUT */,
                                           int *counts /* OUT */);

/*
** Split backward: the most micro-batches of a stage whose BI has run and whose W has not yet, at once, when its
** device runs its list (0 without BI). Each holds a dsave region, the output-side gradients its W reads: the pool a
** stage allocates is that many regions. ZB-H1 and ZB-V run each W right after its BI (1 a stage); DualPipeV's
** cool-down holds some back.
*/
STRATA_API int strata_schedule_peak_pending(strata_schedule_t s, int stage, int *peak /* OUT */);

/*
** Split backward: the most micro-batches with their BI run and their W not yet, over all the stages of device
** `device`, at once as its list runs (0 without BI). The device's dsave regions: its stages take them from one
** cache of regions of one size (a V's two stages share them), so it holds this many, not its stages' own peaks
** (strata_schedule_peak_pending) added up.
*/
STRATA_API int strata_schedule_device_pending(strata_schedule_t s, int device, int *peak /* OUT */);

/* Text form: one line per device, e.g. "dev 0: F0.0 SA0.0 F0.1 ..." (caller frees). */
STRATA_API int strata_schedule_to_text(strata_schedule_t s, char **text /* OUT */);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_SCHEDULE_H */
