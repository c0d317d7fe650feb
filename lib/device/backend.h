/* SPDX-License-Identifier: MIT */
/* backend.h — the table a backend module fills in, and the op records the runtime hands it. Internal. */
#ifndef STRATA__BACKEND_H
#define STRATA__BACKEND_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <strata/device.h>

/* Raised whenever the layout of anything in this file changes; a module
** built against another version is refused when it is loaded. */
#define STRATA__BACKEND_API_VERSION 10

/* The most bytes of a backend library's communicator id (comm_unique_id):
** NCCL's ncclUniqueId is 128. */
#define STRATA__COMM_ID_BYTES 128

/* The symbol every module exports: returns its table. */
#define STRATA__BACKEND_ENTRY "strata_backend_entry"

/* A device-side operand: the backend's buffer handle, its element type
** (enum strata_dtype: 0 float32, 1 int32, 2 bfloat16) and an offset in
** elements of that type. Records built with memset or `{h, off}` are
** 4-byte (float32) operands. */
struct strata__mem {
  void *h;
  size_t off;
  int dtype;
};

/*
** The ops. Each has one record type below; the runtime has already checked
** shapes, devices and bounds, so a backend may trust every field.
** X(id, name) — name is what errors and traces print.
*/
#define STRATA__OP_MAP(X)                                                                          \
  X(GEMM, "gemm")                                                                                  \
  X(BIAS_ADD, "bias_add")                                                                          \
  X(BIAS_GRAD, "bias_grad")                                                                        \
  X(GELU_FWD, "gelu_fwd")                                                                          \
  X(GELU_BWD, "gelu_bwd")                                                                          \
  X(RELU_FWD, "relu_fwd")                                                                          \
  X(RELU_BWD, "relu_bwd")                                                                          \
  X(ADD, "add")                                                                                    \
  X(SCALE, "scale")                                                                                \
  X(FILL, "fill")                                                                                  \
  X(LAYERNORM_FWD, "layernorm_fwd")                                                                \
  X(LAYERNORM_BWD, "layernorm_bwd")                                                                \
  X(SOFTMAX_FWD, "softmax_fwd")                                                                    \
  X(SOFTMAX_BWD, "softmax_bwd")                                                                    \
  X(EMBEDDING_FWD, "embedding_fwd")                                                                \
  X(EMBEDDING_BWD, "embedding_bwd")                                                                \
  X(XENT_FWD, "cross_entropy_fwd")                                                                 \
  X(XENT_BWD, "cross_entropy_bwd")                                                                 \
  X(ADAMW, "adamw")                                                                                \
  X(SUMSQ, "sumsq")                                                                                \
  X(IM2COL, "im2col")                                                                              \
  X(COL2IM, "col2im")                                                                              \
  X(MAXPOOL_FWD, "maxpool_fwd")                                                                    \
  X(MAXPOOL_BWD, "maxpool_bwd")                                                                    \
  X(REDUCE, "reduce")                                                                              \
  X(ATTENTION_FWD, "attention_fwd")                                                                \
  X(ATTENTION_BWD, "attention_bwd")                                                                  \
  X(XENT_VP_MAX, "xent_vp_max")                                                                    \
  X(XENT_VP_SUMS, "xent_vp_sums")                                                                  \
  X(XENT_VP_LOSS, "xent_vp_loss")                                                                  \
  X(XENT_VP_BWD, "xent_vp_bwd")                                                                    \
  X(TOKENS_SHIFT, "tokens_shift")                                                                  \
  X(CONVERT, "convert")                                                                            \
  X(ADAMW_FUSED, "adamw_fused")                                                                    \
  X(SUMSQ_SPANS, "sumsq_spans")                                                                    \
  X(RMSNORM_FWD, "rmsnorm_fwd")                                                                    \
  X(RMSNORM_BWD, "rmsnorm_bwd")                                                                    \
  X(SWIGLU_FWD, "swiglu_fwd")                                                                      \
  X(SWIGLU_BWD, "swiglu_bwd")                                                                      \
  X(ROPE_FWD, "rope_fwd")                                                                          \
  X(ROPE_BWD, "rope_bwd")                                                                          \
  X(LINEAR, "linear")

enum strata__op_id {
#define STRATA__OP_ENUM(id, name) STRATA__OP_##id,
  STRATA__OP_MAP(STRATA__OP_ENUM)
#undef STRATA__OP_ENUM
  STRATA__OP_COUNT
};

/* An op's name, for messages: "gemm"; "?" out of range. */
static inline const char *strata__op_name(enum strata__op_id id) {
  static const char *const names[STRATA__OP_COUNT] = {
#define STRATA__OP_STRING(id, name) name,
      STRATA__OP_MAP(STRATA__OP_STRING)
#undef STRATA__OP_STRING
  };
  return (unsigned)id < STRATA__OP_COUNT ? names[id] : "?";
}

/* The bit of enum strata_dtype's STRATA_BFLOAT16 in strata__op.dtypes. */
#define STRATA__DTYPES_BF16 (1u << 2)

/*
** One op with its arguments. Field meanings follow include/strata/ops.h;
** the comments give the record each op id uses.
*/
struct strata__op {
  enum strata__op_id id;
  /* The types of the op's operands, as bits 1u << dtype, set by the runtime
  ** (0 in records built elsewhere: the communicator's are 4-byte). A backend
  ** without bfloat16 refuses a record with STRATA__DTYPES_BF16 set. */
  unsigned dtypes;
  union {
    /* GEMM (row-major) */
    struct {
      int trans_a, trans_b;
      int64_t m, n, k, lda, ldb, ldc, stride_a, stride_b, stride_c, batch;
      float alpha, beta;
      struct strata__mem a, b, c;
    } gemm;
    /* LINEAR: y = x w + bias (+ res: h NULL for none), y and res rows x out, x rows x in, w in x out, dense */
    struct {
      struct strata__mem x, w, bias, res, y;
      int64_t rows, in, out;
    } linear;
    /* BIAS_ADD: y += bias; BIAS_GRAD: dbias (+)= colsum(dy), y = dy */
    struct {
      struct strata__mem y, bias;
      int64_t rows, cols;
      int accumulate;
    } bias;
    /* GELU_FWD, RELU_FWD: y = f(x). GELU_BWD, RELU_BWD: dx = dy f'(x).
    ** ADD: y = x + b. SCALE: x *= alpha. FILL: x = alpha.
    ** CONVERT: y = x in y's type (x and y are the same memory or disjoint). */
    struct {
      struct strata__mem x, y, dy, dx, b;
      int64_t n;
      float alpha;
    } ew;
    /* LAYERNORM_FWD / LAYERNORM_BWD */
    struct {
      struct strata__mem x, gamma, beta, y, mean, rstd, dy, dx, dgamma, dbeta;
      int64_t rows, cols;
      float eps;
      int accumulate;
    } ln;
    /* SOFTMAX_FWD: y = softmax(scale x) with optional causal mask.
    ** SOFTMAX_BWD: dx from y, dy. */
    struct {
      struct strata__mem x, y, dy, dx;
      int64_t rows, cols;
      float scale;
      int causal;
    } softmax;
    /* EMBEDDING_FWD: out = table[tokens]. EMBEDDING_BWD: dtable (+)= scatter(dout). */
    struct {
      struct strata__mem tokens, table, out, dout, dtable;
      int64_t n, dim, vocab;
      int accumulate;
    } emb;
    /* XENT_FWD: loss per row. XENT_BWD: dlogits = scale (softmax - onehot). */
    struct {
      struct strata__mem logits, targets, loss, dlogits;
      int64_t rows, vocab;
      float scale;
    } xent;
    /* ADAMW: bc1, bc2 the bias corrections of the step, 1 - beta^step (computed once, by the runtime) */
    struct {
      struct strata__mem param, grad, m, v;
      int64_t n;
      float lr, beta1, beta2, eps, weight_decay, bc1, bc2;
      /* ADAMW_FUSED only: grad *= gscale first (written back; 1: left as it is), and after the update
      ** param16 = param rounded to bfloat16 (param16.h NULL: none) — one pass for the three */
      float gscale;
      struct strata__mem param16;
    } adamw;
    /* SUMSQ: out[0] (+)= sum x^2 */
    struct {
      struct strata__mem x, out;
      int64_t n;
      int accumulate;
    } sumsq;
    /* SUMSQ_SPANS: out[t] = sum of x^2 over x[bounds[2t], bounds[2t] + bounds[2t+1]) for t < count, each in
    ** double in order as SUMSQ (so the same bits), the spans spread over the threads; `bounds` is the
    ** caller's and must stay valid until the op has run */
    struct {
      struct strata__mem x, out;
      int64_t count;
      const int64_t *bounds;
    } spans;
    /* IM2COL: col (c*r*s x p*q) from one image x (c x h x w).
    ** COL2IM: x (c x h x w, overwritten) = sum of col entries that map to each pixel. */
    struct {
      struct strata__mem x, col;
      int64_t c, h, w, r, s, stride, pad, p, q;
    } im2col;
    /* REDUCE (collectives): y = a (op) b over n elements of dtype
    ** (enum strata_dtype: the type of all three, whose offsets count its
    ** elements; the mems' own dtype fields are not read), op SUM or MAX
    ** (enum strata_redop; MAX as fmax for floats); y may be a or b.
    ** bfloat16 adds in float32 and rounds once. */
    struct {
      struct strata__mem a, b, y;
      int64_t n;
      int dtype, op;
    } reduce;
    /* ATTENTION_FWD: out, lse from qkv. ATTENTION_BWD: dqkv (overwritten) from qkv, out, dout, lse.
    ** kv_heads key/value heads (dividing heads; == heads for GPT): rows of qkv and dqkv are
    ** (heads + 2 kv_heads) x head_dim, [q | k | v]. */
    struct {
      struct strata__mem qkv, out, lse, dout, dqkv;
      int64_t batch, seq, heads, kv_heads, head_dim;
      float scale;
      int causal;
    } attn;
    /* MAXPOOL_FWD: y, idx from x. MAXPOOL_BWD: dx from dy, idx. Over n*c planes. */
    struct {
      struct strata__mem x, y, idx, dy, dx;
      int64_t planes, h, w, size, stride, p, q;
    } pool;
    /* Vocabulary-parallel cross-entropy over one slice [off, off + vl) of
    ** a vocab-wide vocabulary (logits rows x vl). XENT_VP_MAX: rowmax.
    ** XENT_VP_SUMS: sumexp, tlogit from logits, targets, rowmax.
    ** XENT_VP_LOSS: loss from rowmax, sumexp, tlogit, targets (no logits).
    ** XENT_VP_BWD: dlogits from logits, targets, rowmax, sumexp, scale. */
    struct {
      struct strata__mem logits, targets, rowmax, sumexp, tlogit, loss, dlogits;
      int64_t rows, vl, off, vocab;
      float scale;
    } xvp;
    /* RMSNORM_FWD: y, rstd from x, w. RMSNORM_BWD: dx (overwritten), dw (accumulate) from x, w, rstd, dy. */
    struct {
      struct strata__mem x, w, y, rstd, dy, dx, dw;
      int64_t rows, cols;
      float eps;
      int accumulate;
    } rms;
    /* SWIGLU_FWD: h (rows x cols) from gu (rows x 2cols, [g | u]). SWIGLU_BWD: dgu from gu, dh. */
    struct {
      struct strata__mem gu, h, dh, dgu;
      int64_t rows, cols;
    } swiglu;
    /* ROPE_FWD: y = rotate(x); ROPE_BWD: the transpose rotation (x = dy, y = dx). batch x seq rows of ld
    ** elements, the first heads x head_dim of each rotated; freq: head_dim / 2 float32. */
    struct {
      struct strata__mem x, y, freq;
      int64_t batch, seq, heads, head_dim, ld, pos0;
    } rope;
    /* TOKENS_SHIFT: out[i] = tokens[i] - off inside [off, off + count), else -1. */
    struct {
      struct strata__mem tokens, out;
      int64_t n, off, count;
    } shift;
  } u;
};

/* What the runtime offers a module: error reporting and logging. */
struct strata__services {
  int api_version;
  /* Record a failure message for the caller (printf format); returns `status`. */
  int (*error)(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
  void (*log)(int level, const char *subsystem, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
};

/* What a backend tells of one of its devices. */
struct strata__device_info {
  char name[STRATA_NAME_MAX];
  char vendor[64];
  int is_cpu;
  int compute_units;
  uint64_t total_memory;
  char pci_bus_id[32];   /* "dddd:bb:dd.f" lower-case, or "" */
};

/*
** The backend table. Every slot returns a strata status (0 or negative)
** unless said otherwise, and reports failures through services->error.
** Handles (`ctx`, queues, events, buffers) are the module's own.
** Optional slots say so; the runtime's default is given.
*/
struct strata__backend {
  int api_version;      /* STRATA__BACKEND_API_VERSION */
  const char *name;     /* "host", "opencl", "cuda" */

  /* Start the backend. Returns the number of devices (>= 0) and *ctx, or a
  ** negative status; with no devices, writes a one-line reason into `why`. */
  int (*init)(const struct strata__services *svc, void **ctx, char *why, size_t why_len);
  void (*fini)(void *ctx);
  int (*device_info)(void *ctx, int dev, struct strata__device_info *info);

  int (*alloc)(void *ctx, int dev, size_t bytes, void **buf);
  void (*free)(void *ctx, int dev, void *buf);

  /* Pinned (page-locked) host memory for staged copies into or out of
  ** device `dev` (a GPU backend pins it through that device's context).
  ** Optional: default malloc/free. */
  int (*host_alloc)(void *ctx, int dev, size_t bytes, void **ptr);
  void (*host_free)(void *ctx, void *ptr);

  int (*queue_new)(void *ctx, int dev, void **queue);
  void (*queue_free)(void *ctx, void *queue);        /* after the queue is finished */
  int (*queue_finish)(void *ctx, void *queue);
  /* The CPU time the threads running `queue`'s work have spent since it
  ** was created: *worker_s its own thread's, *team_s the sum over that
  ** thread and the helpers it runs parallel regions on, divided by their
  ** number (a region that keeps them all busy counts once). The runtime
  ** counts a device busy for the larger of the two changes over an action,
  ** so cores shared with other devices do not pass for work. Optional:
  ** NULL means busy time is wall time (a GPU's queue runs on its own). */
  int (*queue_cpu_time)(void *ctx, void *queue, double *worker_s /* OUT */, double *team_s /* OUT */);

  /* An event marking the queue's current end; wait makes `queue` wait for an
  ** event of this backend; sync blocks the caller. */
  int (*event_record)(void *ctx, void *queue, void **event);
  int (*event_wait)(void *ctx, void *queue, void *event);
  int (*event_sync)(void *ctx, void *event);
  void (*event_free)(void *ctx, void *event);

  /* Asynchronous copies, offsets in bytes. copy moves data between two
  ** buffers of this backend, possibly on different devices. */
  int (*write)(void *ctx, void *queue, void *dst, size_t dst_off, const void *src, size_t bytes);
  int (*read)(void *ctx, void *queue, void *src, size_t src_off, void *dst, size_t bytes);
  int (*copy)(void *ctx, void *queue, void *dst, size_t dst_off, void *src, size_t src_off, size_t bytes);

  /* Whether device `dev` implements op `id` (1 or 0), and enqueue one. */
  int (*op_supported)(void *ctx, int dev, enum strata__op_id id);
  int (*op)(void *ctx, void *queue, const struct strata__op *op);

  /* Gates: events completed from the host, which let a queue wait for work
  ** done outside it (the communicator's threads). gate_wait makes `queue`
  ** (at most one per gate) run what follows only after gate_open; opened
  ** with a negative status, the gate makes that queue's next queue_finish
  ** fail with the status and message. gate_free after gate_open. Optional:
  ** without them a collective returns only once it is complete. */
  int (*gate_new)(void *ctx, int dev, void **gate);
  int (*gate_wait)(void *ctx, void *queue, void *gate);
  void (*gate_open)(void *ctx, void *gate, int status, const char *message);
  void (*gate_free)(void *ctx, void *gate);

  /* Collectives of the backend's own library (NCCL) over a group of its
  ** devices. Optional: NULL, or comm_new failing, means the runtime's ring.
  ** comm_new returns STRATA_ERR_UNSUPPORTED with a reason when the library
  ** is missing. coll enqueues one collective on every member's queue
  ** (`queues`, `send`, `recv` indexed by member), or with member >= 0 only
  ** that member's part (its own thread calls it): kind 0 all-reduce, 1
  ** all-gather, 2 reduce-scatter, 3 broadcast (from `root`), 4 barrier;
  ** dtype and op as in strata/comm.h, counts as there. */
  int (*comm_new)(void *ctx, int n, const int *devs, void **comm);
  void (*comm_free)(void *ctx, void *comm);
  int (*comm_coll)(void *ctx, void *comm, int kind, int member, void *const *queues, const struct strata__mem *send,
                   const struct strata__mem *recv, size_t count, int dtype, int op, int root);
  /* Whether comm_new can work here: 0 with the library and version in
  ** `why`, or a status with the reason. Optional. */
  int (*comm_probe)(void *ctx, char *why, size_t len);

  /* The same library's communicators across processes (NCCL over MPI
  ** ranks). comm_unique_id writes the id of a new communicator into `id`
  ** (`cap` >= STRATA__COMM_ID_BYTES bytes) in the process that holds its
  ** member 0; the runtime hands those bytes to every process, and each
  ** calls comm_new_rank with them, the group's size `nranks` and its own
  ** `nlocal` members: `ranks` their member indices in the group, `devs`
  ** their devices. comm_new_rank returns only once every process has
  ** joined. The result goes to comm_coll and comm_free as comm_new's does,
  ** with `queues`, `send`, `recv` and `member` indexed by local member and
  ** `root` a member index of the whole group. Optional (both or neither):
  ** NULL means the runtime's hierarchical path across processes. */
  int (*comm_unique_id)(void *ctx, void *id /* OUT */, size_t cap);
  int (*comm_new_rank)(void *ctx, const void *id, int nranks, int nlocal, const int *ranks, const int *devs,
                       void **comm /* OUT */);

  /* 1 when an op on one device of this backend may read buffers of its
  ** other devices (one address space: the host's virtual devices), so a
  ** collective reduces from a peer's buffer without copying it first. */
  int peer_operands;

  /* The address in this process of buffer `buf` of device `dev` when the
  ** device's memory is the host's own and the host may read and write it
  ** once the buffer's queues are finished (the host's virtual devices): the
  ** cluster then hands it to MPI without staging. The address lives as
  ** long as the buffer. Optional: NULL, or a NULL result, means staged
  ** copies through the queue. */
  void *(*host_pointer)(void *ctx, int dev, void *buf);
};

typedef const struct strata__backend *(*strata__backend_entry_fn)(void);

#endif /* STRATA__BACKEND_H */
