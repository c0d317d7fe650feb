/* SPDX-License-Identifier: MIT */
/* stage.h — a contiguous run of a model's layers on one device: parameters, optimizer state, per-micro-batch
** activations, forward, backward and update. A single-device trainer is one stage; a pipeline is several. Internal. */
#ifndef STRATA__STAGE_H
#define STRATA__STAGE_H

#include <strata/device.h>
#include <strata/comm.h>
#include <strata/layout.h>
#include <strata/ops.h>

#include "model/model.h"

/*
** Tensor parallelism: a stage may hold slice `rank` of `size` of its layers
** (Megatron's split: attention by heads, the MLP's first matrix by columns
** and the second by rows; layernorms, embeddings and the head whole). The
** same layer code runs whole and sharded blocks, with narrower matrices.
*/
struct strata__shard {
  int rank, size;            /* 0 of 1: the whole layers */
};

/*
** How a stage is cut and stored: its tensor-parallel slice, (ZeRO-1) which
** of `zero.size` equal shards of its flat parameter vector this replica's
** optimizer updates — its AdamW moments hold only that shard —, and the
** precision it computes in: STRATA_FLOAT32 (0), or STRATA_BFLOAT16 (mixed
** precision, Megatron's scheme: parameters, gradients and moments stay
** float32; activations, boundary gradients, pipeline messages and a
** bfloat16 copy of the parameters that the GEMMs read are bfloat16; the ops
** compute in float32 and round once on store).
*/
struct strata__cut {
  struct strata__shard tp, zero;
  int precision;             /* enum strata_dtype of activations and compute weights */
  int reduce;                /* enum strata_dtype the data-parallel gradient reduction moves (bf16: through a
                             ** bfloat16 copy of the gradients, grads16) */
  int recompute;             /* enum strata_recompute (strata/layout.h): what a GPT or llama block drops from its
                             ** slot and recomputes into the stage's one-block buffer (rcbuf) before its backward */
  int zero_stage;            /* with zero.size > 1: 2 keeps only the shard of the reduced gradients too (ZeRO-2,
                             ** below), 3 of the parameters too (ZeRO-3); 0 or 1 the whole gradients */
  struct strata__shard sp;   /* spatial parallelism (a cnn): the slab of each image this stage runs, of sp.size
                             ** (0 or 1: the whole image); its tensors whole, its joins over the group's slabs */
  int seqpar;                /* sequence parallelism (a GPT with tp.size > 1): 1, the stage's regions outside the
                             ** tp-split matrices (layernorms, residual adds; the embedding's output, the head's
                             ** layernorm) hold 1/tp of each micro-batch's token rows (lib/model/seqpar.c) */
};

/*
** Where a stage keeps things: offsets and sizes in 4-byte units, so that
** float32 statistics, int32 ids and bfloat16 activations share one buffer;
** n elements of `dtype` take strata__units(n, dtype) units (bfloat16: two
** to a unit). strata__at makes the operand for element `elem` of a region
** of `dtype` that starts at unit `base`; strata__mem_byte is an operand's
** byte offset in its buffer.
*/
static inline size_t strata__units(size_t n, int dtype) { return dtype == STRATA_BFLOAT16 ? (n + 1) / 2 : n; }
static inline strata_mem_t strata__at(strata_buffer_t b, size_t base, size_t elem, int dtype) {
  return strata_mem_typed(b, (dtype == STRATA_BFLOAT16 ? 2 * base : base) + elem, dtype);
}
static inline size_t strata__mem_byte(strata_mem_t m) { return m.off * (m.dtype == STRATA_BFLOAT16 ? 2 : 4); }

enum strata__split { STRATA__SPLIT_NONE, STRATA__SPLIT_ROWS, STRATA__SPLIT_COLS };

/* One parameter tensor of the stage; offsets are in floats into the stage's buffers. */
struct strata__tensor {
  char name[64];             /* GPT-2 style: h.0.attn.c_attn.weight */
  int ndim;
  int64_t shape[4];          /* this stage's slice */
  int64_t full[4];           /* the whole tensor (what checkpoints hold) */
  size_t off, n, full_n;
  int split;                 /* enum strata__split: slice `part` of `parts` of dimension `dim` (ROWS: 0) */
  int dim;
  int groups;                /* dimension `dim` is `groups` equal groups (Q, K, V), each cut */
  int part, parts;
  int copies;                /* slices holding the same part (a llama's key/value heads replicated where tp exceeds
                             ** n_kv_heads: tp / n_kv_heads; 1 otherwise): their gradients are summed over those slices */
  int decay;                 /* weight decay applies (matrices, not biases or norms) */
  float init_std;            /* normal(0, std), or ... */
  float init_const;          /* ... this constant when init_std is 0 */
};

/* A micro-batch's memory on the stage. Slots are recycled: the executor
** takes a free one for each forward and it frees itself once both halves
** are released, so a step holds as many as it has micro-batches in flight. */
struct strata__slot_mem {
  strata_buffer_t buf;       /* activations; NULL when the slot holds no micro-batch */
  strata_buffer_t grad;      /* gradients at the stage's boundaries (NULL if none) */
  int taken;                 /* handed out by strata__stage_slot_take, not yet released */
  int armed;                 /* recomputation: its RECOMPUTE came, its backward part (B, BI or W) has not yet */
  strata_buffer_t dsave;     /* split backward: the dsave region its BI took, until its W (NULL: none) */
  int bi;                    /* split backward: its BI ran, its W not yet */
  strata_buffer_t out;       /* the stage's output (st->out_apart): a buffer of the trainer's output pool the
                             ** executor lends the forward, until every next stage has it; NULL otherwise */
};

struct strata__stage {
  const struct strata_model *model;
  int first, last;           /* layers [first, last) */
  struct strata__layer *layers; /* [last - first]: the model's, with this stage's sizes and tp roles */
  int dev;
  strata_queue_t q;
  int64_t mb;                /* samples per micro-batch */
  int64_t rows;              /* rows per micro-batch: tokens (text) or samples */
  int ntensors;
  struct strata__tensor *tensors;
  int *layer_tensor;         /* first tensor of each stage layer */
  size_t nparams;
  strata_buffer_t params, grads, m, v, scalar;
  strata_buffer_t params16;  /* bfloat16 precision: the parameters as the GEMMs read them (NULL in float32) */
  strata_buffer_t join32;    /* bfloat16 precision with tp: a float32 copy a join sums in (NULL otherwise) */
  strata_buffer_t grads16;   /* a bf16 gradient reduction: the gradients as the replicas reduce them (NULL otherwise) */
  int params16_stale;        /* params changed since params16 was made from them */
  int act;                   /* enum strata_dtype of its activations: cut->precision */
  strata_buffer_t scratch;   /* temporaries of one layer at a time */
  strata_buffer_t gbuf[2];   /* gradients flowing backward through the stage (ping-pong) */
  strata_buffer_t positions; /* int32 position of each token row (embedding stage) */
  size_t *saved_off;         /* per stage layer: offset (floats) of its saved activations in a slot */
  size_t *dsave_off;         /* per stage layer: where its gradients kept for BACKWARD_WEIGHT start in a dsave region */
  size_t dsave_units;        /* one dsave region (split stages; 0 otherwise) */
  /* The split backward's dsave regions, not one per slot: a BI takes one of dsave_alloc units (>= dsave_units) for
  ** its micro-batch's output-side gradients from the device's buffer cache, queue-ordered, and its W gives it back,
  ** so a device holds as many as its list keeps a BI done and its W pending at once over all its stages
  ** (strata_schedule_device_pending; the trainer warms the cache with them). A device's stages take regions of one
  ** size, the largest of theirs, so that a V's two chunks reuse each other's. */
  size_t dsave_alloc;
  size_t gout_off, gin_off;  /* in a slot's grad buffer: gradient of the stage's output (non-last) and input (non-first) */
  size_t grad_units;
  int split;                 /* built for split backward (zero-bubble) */
  size_t *out_off;           /* per stage layer: offset of its output in a slot (the last layer's: in slots[].out,
                             ** at 0, when out_apart) */
  int out_apart;             /* the stage's output is not in its slots: no layer of its backward reads it, so it is
                             ** held only until the next stage has it (stage.c's out_apart) */
  size_t in_units;          /* stage input (tokens, images, or the previous stage's output) */
  size_t targets_off;        /* targets (int32 rows), last stage only */
  size_t slot_units;
  size_t max_out, max_scratch;
  size_t max_join;           /* elements of the largest bfloat16 region a tp join sums (join32's size) */
  struct strata__slot_mem *slots; /* [nslots], grown as needed */
  int nslots;
  float loss_scale;          /* d(loss)/d(per-row loss): 1 / rows per optimizer step */
  struct strata__shard tp;   /* which slice of the layers this stage holds */
  struct strata__shard zero; /* ZeRO-1: the shard of the parameters its optimizer updates (0 of 1: all) */
  struct strata__shard sp;   /* spatial parallelism: its slab (0 of 1: whole images); `join` then joins the slabs */
  int sp_grads;              /* set by the executor for the step's last backward: each layer's gradients are joined
                             ** (summed) over the slabs once computed, before grads_done */
  size_t chunk;              /* floats per shard (nparams without ZeRO); params and grads hold zero.size x chunk */
  /*
  ** ZeRO-2 (cut->zero_stage 2): no whole gradient vector. `grads` is a
  ** window of `gwin` floats (the most that one call of a layer's backward
  ** writes: a weight and its bias, a layernorm's two vectors) holding the
  ** gradients of flat floats [gbase, gend) of the micro-batch being
  ** backwarded; `gshard` holds this replica's shard (chunk floats, from
  ** zero.rank x chunk) of the gradients summed over the replicas and over
  ** the step's micro-batches. A stage whose head reads the embedding's weight
  ** (a tied model) keeps its first layer's gradients [0, tied_n) in `gtied`
  ** for a whole backward, as the head writes there first. The window's
  ** contents go to `grads_flush` (the executor sums them over the replicas
  ** and calls strata__stage_shard_add) before it takes the next tensors.
  */
  strata_buffer_t gshard, gtied;
  size_t gwin, gbase, gend, tied_n;
  int (*grads_flush)(void *arg, size_t lo, size_t hi, strata_mem_t g);
  void *grads_flush_arg;
  int zero2;                 /* built for ZeRO-2 or 3 (the shell of one too: no buffers) */
  /* Per tensor (NULL until a step's clear needs it): GF_FIRST, the layers' weight-gradient GEMM is its gradient's only
  ** writer (strata__layers_grad_first); GF_PENDING, the step's clear left it unzeroed for that GEMM's first write. */
  unsigned char *gfirst;
  /*
  ** ZeRO-3 (cut->zero_stage 3, with ZeRO-2's gradients): no whole parameter
  ** vector either. `pshard` holds this replica's shard of the float32
  ** parameters (chunk floats, from zero.rank x chunk: what its AdamW
  ** updates); `params` is one region of strata__window_floats(gwin)
  ** floats (window.c): from `pat` it holds flat floats [pbase, pend),
  ** gathered from every replica's shard before a layer reads them and kept
  ** until other tensors are needed or the parameters change; the next
  ** tensors go to the other end of the region, their part that does not
  ** overlap the current ones prefetched on the window's gather queue while
  ** the layer computes, the rest gathered when they are taken. In bfloat16,
  ** `params16` is one window: the current tensors converted on the stage's
  ** queue. `params_fetch` (the
  ** executor's) enqueues on q the copies that make dst hold [lo, hi);
  ** `params_landed` (NULL: none; traced runs) hears of each gather of
  ** stage tensor t once it is in the window, with when it was posted and
  ** when it was seen there (strata__now seconds).
  */
  int zero3;
  strata_buffer_t pshard;
  size_t pbase, pend, pat;
  int (*params_fetch)(void *arg, strata_queue_t q, size_t lo, size_t hi, strata_mem_t dst);
  void (*params_landed)(void *arg, int t, size_t lo, size_t hi, double posted, double landed);
  void *params_fetch_arg;
  struct strata__window *win; /* window.c's prefetch: its queue, what is in flight, the order each pass reads */
  /* Sharded stages: joins `count` floats at x with the other slices' (an
  ** all-reduce with `op`, STRATA_SUM or STRATA_MAX, enqueued on q), set by the executor. */
  int (*join)(void *arg, strata_queue_t q, strata_mem_t x, size_t count, int op);
  void *join_arg;
  const char *join_what;     /* spatial slabs: what the join in progress is, for the trace ("halo", "halo_grad"; NULL:
                             ** an all-reduce of sums, the averages' or the gradients') */
  /* Spatial slabs: join_later set, the join in progress is only posted (what it sums must stay as it is and its result
  ** is not read) until join_wait makes q wait for every join so posted: work in between overlaps it. */
  int join_later;
  int (*join_wait)(void *arg, strata_queue_t q);
  /* Sequence parallelism (seqpar 1, set with join and called with join_arg): an all-gather (gather 1: recv holds the
  ** slices' `count` elements at send, slice by slice) or a reduce-scatter (gather 0, in place: send holds tp.size x
  ** count elements, recv is this slice's block of it and gets the block summed over the slices). */
  int seqpar;
  int (*seq)(void *arg, strata_queue_t q, int gather, strata_mem_t send, strata_mem_t recv, size_t count);
  /* Called by a backward (full or weight part) after stage layer `layer`'s
  ** gradients are enqueued, last layer first; NULL: none (gradient buckets). */
  int (*grads_done)(void *arg, int layer);
  void *grads_done_arg;
  /* Recomputation: enum strata_recompute, and the buffer a block's recomputed activations land in (one block's
  ** worth, rc_units; NULL without). The hook (NULL: none) is called before (done 0) and after (done 1) stage layer
  ** `layer`'s recomputation is enqueued, within the backward: the executor traces it. */
  int recompute;
  strata_buffer_t rcbuf;
  size_t rc_units;
  int (*recomputing)(void *arg, int layer, int done);
  void *recomputing_arg;
  strata_buffer_t rope;      /* a llama's stage: RoPE's head_dim / 2 inverse frequencies (float32; NULL otherwise) */
};

/* Floats [*lo, *hi) of the flat parameter (gradient) vector holding stage layers [a, b). */
void strata__stage_layer_range(const struct strata__stage *st, int a, int b, size_t *lo, size_t *hi);
/* Stage layers of the stage (last - first). */
int strata__stage_layer_count(const struct strata__stage *st);

/* Build a stage of layers [first, last) of `model` on `dev` for micro-batches
** of `mb` samples, cut as `cut` says (NULL: whole, no ZeRO); allocates parameters, gradients and moments and
** initialises the parameters from `seed` (each tensor from a seed derived
** from its name, so values do not depend on how the model is cut). */
int strata__stage_new(const struct strata_model *model, int first, int last, int dev, int64_t mb, uint64_t seed,
                      int split_backward, const struct strata__cut *cut, struct strata__stage **out);
void strata__stage_free(struct strata__stage *st);
/* The same stage's layout only (tensors, sizes, offsets), with no queue and no memory: what a process asks of a
** stage another process holds. Freed with strata__stage_free. */
int strata__stage_shell(const struct strata_model *model, int first, int last, int64_t mb, int split_backward,
                        const struct strata__cut *cut, struct strata__stage **out);

/* What a stage allocates on its device, in bytes, as strata__stage_new and
** strata__stage_acquire will ask for it. */
struct strata__stage_bytes {
  uint64_t params;           /* parameters, gradients and the two AdamW moments */
  uint64_t fixed;            /* all that the stage allocates at creation (params included) */
  uint64_t slot;             /* one micro-batch's activations */
  uint64_t dsave;            /* one dsave region: a micro-batch's gradients kept from its BI to its W (split backward;
                             ** 0 otherwise) */
  uint64_t grad;             /* one micro-batch's boundary gradients (0: none) */
  uint64_t in, out;          /* one micro-batch's stage input and output (what a neighbour sends) */
  uint64_t send;             /* one output buffer (the output kept apart from the slot until sent: out's
                             ** allocation; 0 when the slot keeps it) */
  uint64_t recompute;        /* the recomputation's buffer, one block's worth (in `fixed`; 0: none) */
  uint64_t comm;             /* ZeRO: the scratch the replicas' communicator takes on the device for ZeRO-1's
                             ** gradient reduce-scatter or ZeRO-2/3's window reduces (not the stage's: beside `fixed`;
                             ** 0: none) */
};

/* STRATA_OK, or why layers [first, last) cannot be a stage of their own (a tied model cut). */
int strata__stage_can_cut(const struct strata_model *model, int first, int last);

/* Plan a stage of layers [first, last) for micro-batches of `mb` samples without allocating anything. */
int strata__stage_plan(const struct strata_model *model, int first, int last, int64_t mb, int split_backward,
                       const struct strata__cut *cut, struct strata__stage_bytes *bytes /* OUT */);

/*
** The memory model, one for the trainer's check, its balancer, the
** planner's search and the simulator. A stage's bytes come from its layers'
** figures (floats for one micro-batch, as the stage lays the layer out):
** summed, or the most of one layer, or its first layer's input and its last
** layer's output. strata__stage_plan sums a stage's own layers; a caller
** that weighs many cuts may sum figures it keeps (strata__stage_layer_mems).
*/
struct strata__layer_mem {
  size_t params;             /* parameter floats (this slice's) */
  size_t tensors;            /* parameter tensors */
  size_t kept;               /* saved activations and output, per slot */
  size_t dsave;              /* gradients kept for the weight pass (split backward) */
  size_t scratch;            /* temporaries */
  size_t in, out;            /* input and output */
  size_t io;                 /* summed: the most of one layer's input or output */
  size_t join;               /* bfloat16 with tp: the most elements one join sums in float32 (the most, summed) */
  size_t recompute;          /* units its recomputation writes to the stage's buffer (the most, summed) */
  size_t params_most;        /* the most parameter floats of two adjacent tensors of one layer (ZeRO-2's window) */
  size_t params_first;       /* summed: the first layer's (a tied stage's embedding gradients under ZeRO-2) */
};
/* Add layer figures `m` to `sum` (zeroed to start); `first`/`last`: the stage's first/last layer. */
void strata__layer_mem_add(struct strata__layer_mem *sum, const struct strata__layer_mem *m, int first, int last);
/* The bytes of stage [first, last) whose layers sum to `s`, cut as `cut` (its ZeRO shards, tp and precision). */
void strata__stage_bytes_of(const struct strata_model *model, int first, int last, int64_t mb, int split_backward,
                            const struct strata__cut *cut, const struct strata__layer_mem *s,
                            struct strata__stage_bytes *b /* OUT */);
/*
** Each layer's figures (m[nlayers]) as a stage holding it whole would lay it
** out, and `alone[nlayers]` as a stage holding it without its tp partner
** (the linear or convolution pair of an MLP/CNN, cut together; other layers
** repeat m): a stage [a, b) sums m over its layers but takes alone[a] when
** layer a's partner is a - 1, and alone[b - 1] when that layer's partner is b.
** `partner[nlayers]` (may be NULL) gets -1, or the partner's index.
*/
int strata__stage_layer_mems(const struct strata_model *model, int64_t mb, const struct strata__cut *cut,
                             struct strata__layer_mem *m, struct strata__layer_mem *alone, int *partner);

/* Every cut of a model weighed at once (ranges.c): stage [a, b)'s bytes in constant time, equal to
** strata__stage_plan's, for micro-batches of `mb` samples cut as `cut` (NULL: whole). */
struct strata__stage_ranges;
int strata__stage_ranges_new(const struct strata_model *model, int64_t mb, int split_backward,
                             const struct strata__cut *cut, struct strata__stage_ranges **out /* OUT */);
/* A stage's bytes as strata__stage_plan's; both leave to the caller whether the model may be cut there
** (strata__stage_can_cut: the trainer refuses to cut a tied model, the planner plans its memory all the same). */
int strata__stage_ranges_bytes(const struct strata__stage_ranges *r, int a, int b, struct strata__stage_bytes *bytes);
void strata__stage_ranges_free(struct strata__stage_ranges *r);

/* Where a stage runs in its schedule: what its neighbours' messages and its micro-batches in flight cost. */
struct strata__stage_place {
  int inflight;              /* the most micro-batches the schedule keeps in flight on it (>= 1) */
  int pending;               /* split backward: the most with their BI done and their W not yet (its dsave regions) */
  int first, last;           /* the first / last stage of its pipeline */
  int prev_remote;           /* the previous stage is on another device: its activations land here ... */
  int prev_inflight;         /* ... as many as that stage keeps in flight */
  int next_remote;           /* the next stage is on another device: its gradients land here */
  int outs;                  /* output buffers (bytes `send` each): 1 with the next stage on another device, the
                             ** list's handoff with it on this one (strata_schedule_peak_handoff), 0 the last stage */
};
/*
** Bytes stage `b` needs on its device during a step, placed as `p`: its
** fixed buffers, the activations and boundary gradients of the micro-batches
** in flight, a split backward's dsave regions (p->pending of them), the
** receive buffers of its neighbours' messages. Adds the activations (those
** of the micro-batches in flight, the dsave regions and the recomputation's
** buffer) to *act and the buffers other than parameters to *bufs (either may
** be NULL).
*/
uint64_t strata__stage_need(const struct strata__stage_bytes *b, const struct strata__stage_place *p, uint64_t *act,
                            uint64_t *bufs);

/* Copy between a tensor's slice (`local`, t->n floats) and the whole tensor
** (`full`, t->full_n floats): gather 1 writes the slice into the whole, 0
** cuts the slice out of it. A tensor that is not split is copied whole. */
void strata__tensor_cut(const struct strata__tensor *t, float *full, float *local, int gather);

/* Make sure slot `s` has activation and boundary-gradient memory (allocated
** on first use and kept until released). The two halves can be released
** apart: the activations once the backward pass is done, the gradients once
** the input gradient has gone to the previous stage. A release does not wait:
** the memory is freed behind the work queued on the stage's queue
** (strata_buffer_free_on), and work of another queue that reads it must be
** waited for by that queue first (the executor's events). */
int strata__stage_acquire(struct strata__stage *st, int s);
/* A slot that holds nothing (the table grows when every one is in use), marked taken until both halves are
** released; the caller acquires it. */
int strata__stage_slot_take(struct strata__stage *st, int *slot /* OUT */);
void strata__stage_release_activations(struct strata__stage *st, int s);
void strata__stage_release_gradients(struct strata__stage *st, int s);
void strata__stage_release(struct strata__stage *st, int s);
/* A BI of slot s takes a dsave region of st->dsave_alloc units (from the device's cache: none is allocated when the
** cache holds one of that size); its W gives it back, behind the work queued on the stage's queue. */
int strata__stage_dsave_take(struct strata__stage *st, int s);
/* Split backward: does stage layer i keep the gradients its W reads in its own saved activations, in what only its
** BI read (a GPT block: dqkv over qkv, dh over h, dxmid over xmid; a llama block the same with dgu over gate|up; the
** head: dlogits over the logits; an embedding before a block: its output gradient over its output), its norms' and
** the MLP's output projection's weight gradients computed in BI instead of W, so that it needs no dsave units? Only without recomputation, ZeRO-2/3 or
** seqpar (their W reads what BI would overwrite, or takes its gradients' window in W). */
int strata__stage_folds(const struct strata__stage *st, int i);
void strata__stage_dsave_give(struct strata__stage *st, int s);

/* Where the stage's input of slot s goes (tokens or images or the previous
** stage's output), its targets (last stage), and its output (non-last stage). */
strata_mem_t strata__stage_input(struct strata__stage *st, int s);
strata_mem_t strata__stage_targets(struct strata__stage *st, int s);
strata_mem_t strata__stage_output(struct strata__stage *st, int s);
size_t strata__stage_in_units(const struct strata__stage *st);
size_t strata__stage_out_units(const struct strata__stage *st);
/* Gradient w.r.t. the stage's output for slot s (filled by the caller for a
** non-last stage before backward) and w.r.t. its input (written by backward,
** non-first stage). */
strata_mem_t strata__stage_grad_output(struct strata__stage *st, int s);
strata_mem_t strata__stage_grad_input(struct strata__stage *st, int s);

/* Enqueue the forward pass of slot s; the backward pass of slot s
** (accumulating into the gradients). */
int strata__stage_forward(struct strata__stage *st, int s);
int strata__stage_backward(struct strata__stage *st, int s);
/* The two halves of a split backward (stage built with split_backward):
** the input gradient (which a previous stage waits for), and later the
** weight gradients. */
int strata__stage_backward_input(struct strata__stage *st, int s);
int strata__stage_backward_weight(struct strata__stage *st, int s);
/* RECOMPUTE of slot s (a stage built with recomputation): arm it. Its next backward part (B, BI or W) reruns, block by
** block just before each block's backward, what the mode dropped (into rcbuf), and refuses to run unarmed. */
int strata__stage_recompute(struct strata__stage *st, int s);
/* Sum of the per-row losses of slot s (last stage; waits for the queue). */
int strata__stage_loss(struct strata__stage *st, int s, double *sum);
/* Enqueue reading slot s's per-row losses into `rows` (last stage; valid after the queue finishes). */
int strata__stage_loss_read(struct strata__stage *st, int s, float *rows);
/* The vocabulary columns [*first, *first + *count) whose logits the stage holds; 1 when that is a slice of the
** vocabulary (tensor parallelism dividing it), 0 when all of it. */
int strata__stage_vocab(const struct strata__stage *st, int64_t *first, int64_t *count);
/* Logits of slot s (last stage of a text model): rows x (its part of the) vocab floats. */
strata_mem_t strata__stage_logits(struct strata__stage *st, int s);

int strata__stage_zero_grads(struct strata__stage *st);
/*
** The step's clear: strata__stage_zero_grads, except that the tensors a
** layer's weight-gradient GEMM alone writes (strata__layers_grad_first)
** are not zeroed but marked pending: the step's first such GEMM writes one
** with beta 0 (strata__stage_grad_beta), as it would write 0 + x (the
** same bits, but for a zero's sign). Where that bookkeeping would not
** hold (ZeRO-2/3's windows, spatial slabs) it zeroes everything.
** _grad_beta: the beta for the GEMM about to write stage tensor t's
** gradient (0 once for a pending tensor, which is pending no more; else 1).
** _grads_settle: zero the tensors still pending (before the gradients are
** read: the sums of squares and the update call it themselves).
*/
int strata__stage_clear_grads(struct strata__stage *st);
float strata__stage_grad_beta(struct strata__stage *st, int t);
int strata__stage_grads_settle(struct strata__stage *st);
/* The gradient of flat float `off` (a tensor's offset) as the layers write it: the whole vector, or under ZeRO-2
** the window (or tied buffer) that holds the layer's gradients now. */
static inline strata_mem_t strata__stage_grad(const struct strata__stage *st, size_t off) {
  if (!st->gshard)
    return strata_mem(st->grads, off);
  if (st->gtied && off < st->tied_n)
    return strata_mem(st->gtied, off);
  return strata_mem(st->grads, off - st->gbase);
}
/*
** ZeRO-2 (nothing otherwise). _grad_begin, before a backward's weight part:
** the window is empty and a tied stage's gtied zeroed. _grad_take, before a
** layer writes the gradients of stage tensors [t, t + k) (adjacent): the
** window hands on what it holds and takes them, zeroed (tensors of gtied
** stay there). _grad_flush, after a layer's weight part: the window hands
** on what it holds, and with `tied` gtied too (after the first layer's).
** _shard_add: flat floats [lo, hi), summed over the replicas at g, added
** into this replica's shard of the step's sums (their part in it).
*/
int strata__stage_grad_begin(struct strata__stage *st);
int strata__stage_grad_take(struct strata__stage *st, int t, int k);
int strata__stage_grad_flush(struct strata__stage *st, int tied);
int strata__stage_shard_add(struct strata__stage *st, size_t lo, size_t hi, strata_mem_t g);
/*
** ZeRO-3's parameter window (window.c; nothing otherwise). _param_take, before a layer reads stage tensors
** [t, t + k) (adjacent): the window holds them — held already, landed from the prefetch, or gathered now — and the
** tensors this pass read after them last time are prefetched into the other half. _window_begin, before a pass of
** kind `pass` (STRATA_ACTION_FORWARD, _BACKWARD, _BACKWARD_INPUT or _BACKWARD_WEIGHT) runs: it starts learning or
** following that pass's order. _window_prefetch (PARAM_GATHER): post the gather of the first tensors such a pass
** read last time, unless held. _window_end, after the pass (or on failure): waits for what is in flight, reporting a
** failed gather. _window_free: for strata__stage_free.
*/
int strata__stage_param_take(struct strata__stage *st, int t, int k);
int strata__stage_window_begin(struct strata__stage *st, int pass);
int strata__stage_window_prefetch(struct strata__stage *st, int pass);
int strata__stage_window_end(struct strata__stage *st);
void strata__stage_window_free(struct strata__stage *st);
/* ZeRO-3's parameter region for windows of `gwin` floats: a window and an eighth (room for the next tensors'
** prefetch beside the current ones': all of it beside a small layer's, the part clear of them beside a big one's). */
static inline size_t strata__window_floats(size_t gwin) { return gwin + (gwin + 7) / 8; }
/* The parameter of flat float `off` as the layers read it (float32): the whole vector, or ZeRO-3's window. */
static inline strata_mem_t strata__stage_param(const struct strata__stage *st, size_t off) {
  return strata_mem(st->params, st->zero3 ? off - st->pbase + st->pat : off);
}
/* The parameters changed (an update, a load): the window, and the bfloat16 copy, are made anew before use. */
static inline void strata__stage_params_changed(struct strata__stage *st) {
  st->params16_stale = 1;
  st->pend = st->pbase;
}
/* Sum of squares of each tensor's gradient (with ZeRO, of its part in the
** stage's shard), into sumsq[ntensors] (waits for the queue). Summed by the caller in tensor order, so that the global norm
** does not depend on how the model is cut. */
int strata__stage_grad_sumsq(struct strata__stage *st, double *sumsq);
/* Scale gradients by `gscale`, then one AdamW step (with ZeRO, of the stage's shard only). */
int strata__stage_update(struct strata__stage *st, float gscale, float lr, float beta1, float beta2, float eps,
                         float weight_decay, int64_t step);

/* ---- shared by stage.c (the stage and its buffers) and layers.c (its layers' passes) ---- */

/* A block's sizes as this stage runs it: H heads of hd (A = H hd wide) and
** F hidden units are the stage's slice; D, the residual width, is whole. */
struct strata__dims {
  int64_t B, T, D, H, hd, A, F, V, R;
  int64_t Vall, voff;       /* vocabulary-parallel: the whole vocabulary, and where this slice's V start */
  int vp;                   /* the embedding and head are cut by vocabulary */
  int act;                  /* the activations' type (the stage's precision) */
  int rc;                   /* enum strata_recompute: selective lays a block's slot out without its attention output
                            ** and log-sum-exps */
  int64_t Rs;               /* rows of the regions outside the tp-split matrices: R, or R / tp with seqpar (the
                            ** slice's rows [tp.rank Rs, (tp.rank + 1) Rs) of the micro-batch's R) */
  int seqpar;
  int64_t KV, Akv;          /* a llama: its slice's key/value heads (grouped-query attention) and their width KV hd */
  int64_t kvrep;            /* a llama with tp a multiple of n_kv_heads (> 1): the slices sharing each key/value head
                            ** (tp / n_kv_heads; KV is 1); 1 otherwise */
  int64_t kvall;            /* a llama: the model's key/value heads (n_kv_heads) */
  int rms;                  /* a llama: RMSNorm (no mean kept) where a GPT has layernorms */
};
struct strata__dims strata__stage_dims(const struct strata__stage *st);
/* Set first[t] to 1 for each stage tensor t whose gradient only a weight-gradient GEMM of its layer's backward writes,
** asking strata__stage_grad_beta for its beta (layers.c); leaves the others as they are. */
void strata__layers_grad_first(const struct strata__stage *st, unsigned char *first);

/* Offsets (units) of a llama block's saved activations: x normed and its rstd, q|k|v rows (q and k rotated), the
** fused attention's log-sum-exps and output, x_mid, x_mid normed and its rstd, gate|up rows (strata_swiglu_fwd's
** input) and silu(gate) * up. Recomputation as a GPT block's (strata__block_layout): selective, the attention's
** output and lse take no room there (they are in rcbuf: att | lse); full, all of it is in rcbuf, then the output. */
struct strata__llama_saved {
  size_t ln1, rstd1, qkv, lse, att, xmid, ln2, rstd2, gu, h, end;
};
struct strata__llama_saved strata__llama_layout(const struct strata__dims *d);

/* ---- a stage's tensors (model/tensor.c) and a llama's (model/llama.c) ---- */

/* Define `t` whole: `name`, ndim dimensions d0 .. d3, weight decay or not, initial values normal(0, std) or (std 0)
** the constant cst. */
void strata__tensor_def(struct strata__tensor *t, const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2,
                        int64_t d3, int decay, float std, float cst);
/* Make `t`, defined whole, the slice sh->rank of sh->size (NULL or size 1: whole) of dimension `dim` (-1: its
** last), cut in `groups` equal groups. */
void strata__tensor_shard(struct strata__tensor *t, int dim, int groups, const struct strata__shard *sh);
/* The whole tensor's initial values (t->full_n floats at x), seeded by (seed, its name): a slice cut from them, so
** that a sharded run starts from the values of a whole one. */
void strata__tensor_init(const struct strata__tensor *t, uint64_t seed, float *x);
/* A llama block's nine tensors (Hugging Face's names less "model.", sliced as `sh` says) into o; returns 9. */
int strata__llama_tensors(const struct strata_model_config *c, int index, const struct strata__shard *sh, float std,
                          float proj, struct strata__tensor *o);
/* Floats of a llama's RoPE table (head_dim / 2), and the stage's table made on its device (st->rope). */
size_t strata__rope_floats(const struct strata_model_config *c);
int strata__rope_table(struct strata__stage *st);

/* Offsets of a block's saved activations (units from the layer's start in a slot); lse: the fused attention's
** per-query log-sum-exps (float32, batch x heads x seq). With selective recomputation the attention's output and lse
** take no room there: they are in the stage's rcbuf (att | lse). With full recomputation all of it is in rcbuf,
** followed by the block's recomputed output. h is the MLP pre-activation; its GELU output is not kept (the backward
** recomputes it into scratch). */
struct strata__block_saved {
  size_t ln1, mean1, rstd1, qkv, lse, att, xmid, ln2, mean2, rstd2, h, end;
};
struct strata__block_saved strata__block_layout(const struct strata__dims *d);
/* Offsets (units) of the head's saved activations: the final layernorm's output, its statistics, the logits, the
** per-row losses and (vocabulary-parallel) the rows' max, sum of exponentials and target logit. */
struct strata__head_saved {
  size_t ln, mean, rstd, logits, loss, mx, se, tl, end;
};
struct strata__head_saved strata__head_layout(const struct strata__dims *d);

/* Stage layer i: the stage's own copy, with its slice's sizes and tp role. */
static inline const struct strata__layer *strata__stage_layer_at(const struct strata__stage *st, int i) {
  return &st->layers[i];
}
/* A convolution layer's output elements per image before pooling, and its geometry over n images. */
static inline int64_t strata__conv_big(const struct strata__layer *L) { return L->k * L->ch * L->cw; }
static inline struct strata_conv2d strata__conv_geometry(const struct strata__layer *L, int64_t n) {
  struct strata_conv2d g = {.n = n, .c = L->c, .h = L->sl.on ? L->sl.he : L->h, .w = L->w, .k = L->k, .r = L->r,
                            .s = L->r, .stride = L->stride, .pad = L->r / 2};
  return g;
}

/* ---- spatial slabs (model/slab.c) ---- */

/* Give a spatial stage's layers (st->sp.size > 1) their slab's geometry; STRATA_ERR_SHAPE when the model cannot be
** cut so (strata_model_spatial_check's reasons). */
int strata__slab_layers(struct strata__stage *st);
/* Where a slab convolution keeps its temporaries in scratch (units from 0, float32): the im2col workspace (ws
** units) | the gradient through pooling and ReLU | the whole convolution's output gradient (for the input's) | the halo
** exchange | the gradient of the rows it convolved | those rows | one 1.0f. */
struct strata__slab_scratch {
  size_t dr, y, xbuf, de, e, one, end;
};
struct strata__slab_scratch strata__slab_scratch_of(const struct strata__layer *L, int64_t B, size_t ws);
/* Rows of the exchange slot (B images x c channels x hmax rows x w) and the buffer (2 n slots). */
size_t strata__slab_xbuf(const struct strata__layer *L, int64_t B);
/* Forward: the rows the slab convolves (B x c x he x w at e, scratch) from its input x (the first layer: the whole
** image), the halo rows from its neighbours through the stage's join (an all-reduce of the exchange buffer, in flight
** while the slab's own rows are copied), kept
** at `halo` (B x c x (ht + hb) x w, the slot's) for the backward. */
int strata__slab_gather(struct strata__stage *st, const struct strata__layer *L, int64_t B, strata_mem_t x,
                        strata_mem_t halo, strata_mem_t e, const struct strata__slab_scratch *o);
/* Backward: the same rows again at e, from x and the kept halo rows (no exchange). */
int strata__slab_restore(struct strata__stage *st, const struct strata__layer *L, int64_t B, strata_mem_t x,
                         strata_mem_t halo, strata_mem_t e, const struct strata__slab_scratch *o);
/* The slab's rows (B x k planes of crows) into rows [j0, j0 + crows) of zeroed planes of P rows at y: the output
** gradient of the whole convolution it ran, for its input gradient (the forward and the weights' gradient take the
** kept rows alone: strata_conv2d_fwd_rows, strata_conv2d_bwd_w_rows). */
int strata__slab_rows(struct strata__stage *st, const struct strata__layer *L, int64_t B, strata_mem_t y,
                      strata_mem_t slab, const struct strata__slab_scratch *o);
/* Sum the `n` floats at x over the group's slabs (the stage's join; an error without one). */
int strata__slab_join(struct strata__stage *st, strata_mem_t x, size_t n);
/* Backward: the input gradient dx of the slab's own rows from the gradient de of the rows it convolved, and its halo
** rows' gradients posted back to the neighbours (the same exchange, waited for later where the stage can: work
** enqueued before strata__slab_scatter_end overlaps it; it must leave the exchange buffer alone); then _end waits
** for it and adds theirs. */
int strata__slab_scatter_post(struct strata__stage *st, const struct strata__layer *L, int64_t B, strata_mem_t de,
                              strata_mem_t dx, const struct strata__slab_scratch *o);
int strata__slab_scatter_end(struct strata__stage *st, const struct strata__layer *L, int64_t B, strata_mem_t dx,
                             const struct strata__slab_scratch *o);

/* ---- sequence parallelism (model/seqpar.c) ---- */

/* STRATA_OK, or why a stage of `model` cut `tp` ways cannot run sequence parallel (not a GPT, tp not dividing the
** context, a split backward). */
int strata__seqpar_check(const struct strata_model *model, int tp, int split_backward);
/* The slice's block of `count` elements of a region holding every slice's (tp.size x count, slice by slice). */
strata_mem_t strata__seq_mine(const struct strata__stage *st, strata_mem_t whole, size_t count);
/* Enqueue on q: `all` (tp.size x count) gets every slice's `count` elements at `mine` (an all-gather). */
int strata__seq_gather(struct strata__stage *st, strata_queue_t q, strata_mem_t mine, strata_mem_t all, size_t count);
/* Enqueue on q: the slice's block of `all` (tp.size x count partial sums) gets that block summed over the slices (a
** reduce-scatter in place; bfloat16 summed in float32 in join32); *mine is the block. */
int strata__seq_scatter(struct strata__stage *st, strata_queue_t q, strata_mem_t all, size_t count,
                        strata_mem_t *mine);
/* A layernorm's weight and bias gradients of the slice's rows (2 x cols float32 at `part`, weight then bias) summed
** over the slices and added to dg and db. */
int strata__seq_ln_grads(struct strata__stage *st, strata_queue_t q, strata_mem_t part, strata_mem_t dg,
                         strata_mem_t db, int64_t cols);

/* Whether the stage ends with the model's loss layer. */
static inline int strata__stage_has_loss(const struct strata__stage *st) { return st->last == st->model->nlayers; }

/*
** KV-cache decoding (model/decode.c) through a stage holding the whole text
** model on one device (float32, unsharded; refused otherwise by name): each
** step runs one token at the next position (0, 1, ...) through every layer,
** keeping each block's q|k|v row (k rotated for a llama), and attends over the
** rows kept. The decoder reads the stage's parameters at each step and owns
** its buffers only; free it before the stage. A step past the context is
** refused (STRATA_ERR_RANGE); reset starts again at position 0.
*/
struct strata__decoder;
int strata__decoder_new(struct strata__stage *st, struct strata__decoder **out);
/* Run `token` at the next position; logits (vocab floats) receives the next token's logits (NULL: none, a prefill). */
int strata__decoder_step(struct strata__decoder *d, int32_t token, float *logits);
int64_t strata__decoder_pos(const struct strata__decoder *d);
void strata__decoder_reset(struct strata__decoder *d);
void strata__decoder_free(struct strata__decoder *d);

#endif /* STRATA__STAGE_H */
