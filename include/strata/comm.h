/* SPDX-License-Identifier: MIT */
/* strata/comm.h — communicators over any group of devices, of any backends, and the collectives on them. */
#ifndef STRATA_COMM_H
#define STRATA_COMM_H

#include <strata/common.h>
#include <strata/device.h>
#include <strata/ops.h>
#include <strata/topology.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
** A communicator joins an ordered group of global devices (its members,
** ranked 0 .. size-1 in the order given). Any devices may be members:
** CUDA, OpenCL and host devices in one group.
**
** How a collective moves data is chosen per group and per size:
**   nccl    every member is a CUDA device and libnccl could be loaded;
**   ring    a chunked, pipelined ring: reduce-scatter then all-gather, each
**           hop one of the device layer's copies (same-backend copies where
**           the backend has them, the staged path through pinned host
**           memory otherwise), the reduction on the receiving device, every
**           hop busy at once;
**   direct  messages up to `direct_max_bytes`: every member reads the
**           others' data once and reduces it locally in rank order.
** The ring's order comes from the topology's link matrix when one is given
** (widest bottleneck first, then fewest slow hops), else from the ranks.
** The reduction order is fixed for a given group, size and algorithm:
** results never depend on timing, and repeated runs are bit-identical.
**
** Collectives are enqueued: each call takes one queue per member (on that
** member's device) and returns without waiting for the data. The collective
** starts on a member once the work enqueued before it on that member's
** queue has run, and work enqueued on that queue afterwards runs after the
** member's result is complete — as for any other op. Meanwhile every other
** queue keeps running, so compute overlaps communication. (A member whose
** backend cannot make its queue wait for the host, CUDA outside NCCL, makes
** the call return only once the collective is complete.) The communicator
** moves data on queues and threads of its own, one per member.
**
** Failure: a member that fails (an allocation, a copy, a kernel) fails the
** collective on every member: each member's queue reports the error at its
** next strata_queue_finish, and strata_comm_finish returns it with a
** message naming the device and the collective. A member that makes no
** progress for `timeout_s` seconds fails it the same way, so nothing waits
** forever. Calls whose arguments are wrong fail before anything moves.
**
** Threads: the calls of one communicator must not run concurrently with
** each other (one thread drives a group, as with NCCL's group calls).
*/
typedef struct strata_comm *strata_comm_t;

/*
** Element types. Sizes and offsets of collectives count elements of the
** collective's type (strata_dtype_size bytes each); the operands' own types
** (strata_mem_t.dtype) must be that type, or for a 4-byte collective another
** 4-byte type (strata_mem's float32 default carries int32 too), else the
** call fails with STRATA_ERR_INVALID. Byte sizes (chunk_bytes,
** direct_max_bytes) stay bytes whatever the type.
**
** bfloat16 (the upper half of a float32: 8 bits of exponent, 7 of mantissa)
** is moved by every collective, and every backend copies it. Each reduction
** step adds two bfloat16 operands in float32 and rounds the sum once to
** bfloat16 (to nearest, ties to even; MAX is exact). A ring therefore rounds
** at each of its n - 1 reduction steps, as NCCL's bfloat16 all-reduce does:
** its result can differ from the float32 sum of the inputs rounded once by
** a few units in the last place (at most about (n - 1) x 2^-8 of the sum of
** the magnitudes), while the fixed order keeps repeated runs bit-identical.
** Direct reduces in rank order with the same per-step rounding. The host
** and OpenCL reduce bfloat16; a backend whose reduction cannot take it (CUDA
** outside NCCL, so far) fails the collective with STRATA_ERR_UNSUPPORTED,
** naming the device; on the NCCL path NCCL reduces (ncclBfloat16, NCCL 2.10
** or later).
*/
enum strata_dtype {
  STRATA_FLOAT32 = 0,
  STRATA_INT32 = 1,
  STRATA_BFLOAT16 = 2
};

/* Reductions. AVG is the sum divided by the group size, for float32 and
** bfloat16 (the bfloat16 sum scaled in float32 and rounded once more). */
enum strata_redop {
  STRATA_SUM = 0,
  STRATA_AVG = 1,
  STRATA_MAX = 2
};

/* Algorithms, for strata_comm_options.algorithm and strata_comm_info. */
enum strata_comm_algorithm {
  STRATA_COMM_AUTO = 0,     /* nccl where possible, else direct for small messages and ring otherwise */
  STRATA_COMM_RING = 1,
  STRATA_COMM_DIRECT = 2,
  STRATA_COMM_NCCL = 3
};

/* Choices for strata_comm_new; zero (or a NULL pointer) means the default. */
struct strata_comm_options {
  strata_topology_t topology;   /* ring order from its links between runtime devices
                                   (strata_topology_map_runtime done); NULL: rank order */
  int algorithm;                /* enum strata_comm_algorithm; default STRATA_COMM_AUTO,
                                   or STRATA_COMM_ALGORITHM=ring|direct|nccl */
  size_t chunk_bytes;           /* ring chunk; default STRATA_COMM_CHUNK or 1M */
  size_t direct_max_bytes;      /* largest message per member sent direct; default
                                   STRATA_COMM_DIRECT_MAX or 32K */
  double timeout_s;             /* a member stalled this long fails the collective;
                                   default STRATA_COMM_TIMEOUT or 300 */
};

/*
** Create a communicator over `count` (1 .. 64) distinct global devices,
** `devices[rank]` being member `rank`. `opts` may be NULL. Creates one
** queue and one thread per member; scratch memory is allocated on the
** members' devices as collectives need it (at most 2 chunks per member
** for the ring, size x message for direct) and kept until
** strata_comm_free, accounted like any buffer.
*/
STRATA_API int strata_comm_new(const int *devices, int count, const struct strata_comm_options *opts,
                               strata_comm_t *comm /* OUT */);

/* Wait for the communicator's collectives, then free it. NULL does nothing. */
STRATA_API void strata_comm_free(strata_comm_t comm);

/* What a communicator is. Plain, caller-filled; `ring` has `size` entries and
** belongs to the communicator (valid until strata_comm_free). */
struct strata_comm_info {
  int size;
  const int *devices;           /* global device of each rank */
  const int *ring;              /* ranks in ring order, starting with rank 0 */
  int algorithm;                /* STRATA_COMM_NCCL when NCCL carries every collective,
                                   else STRATA_COMM_RING (direct below direct_max_bytes) */
  size_t chunk_bytes;
  size_t direct_max_bytes;
  int asynchronous;             /* 1 when every collective returns before the data moved */
  double ring_bottleneck_gbps;  /* narrowest hop of the ring by the topology, 0 without one */
  uint64_t moved_bytes;         /* bytes its members read from the other members' memory since
                                   strata_comm_new (the ring's and direct's reads; NCCL's not counted) */
};
STRATA_API int strata_comm_info(strata_comm_t comm, struct strata_comm_info *info /* OUT */);

/*
** The collectives. `queues`, `send` and `recv` have one entry per rank;
** every buffer of rank r lies on member r's device, as does queues[r].
** `count` is in elements of `dtype`. In place means send[r] and recv[r]
** are the same memory (for all-gather: send[r] is block r of recv[r];
** for reduce-scatter: recv[r] is block r of send[r]); otherwise the two
** must not overlap. A count of 0 does nothing.
*/

/* recv[r] = op over all ranks of send[.] (count elements each). */
STRATA_API int strata_allreduce(strata_comm_t comm, const strata_queue_t *queues, const strata_mem_t *send,
                                const strata_mem_t *recv, size_t count, int dtype, int op);

/* recv[r] (size x count) = send[0] | send[1] | ... (count elements each). */
STRATA_API int strata_allgather(strata_comm_t comm, const strata_queue_t *queues, const strata_mem_t *send,
                                const strata_mem_t *recv, size_t count, int dtype);

/* recv[r] (count elements) = block r of op over all ranks of send[.]
** (size x count elements each). */
STRATA_API int strata_reducescatter(strata_comm_t comm, const strata_queue_t *queues, const strata_mem_t *send,
                                    const strata_mem_t *recv, size_t count, int dtype, int op);

/* recv[r] = send[root] (count elements). Only send[root] is read; the other
** send entries may have a NULL buffer. */
STRATA_API int strata_broadcast(strata_comm_t comm, const strata_queue_t *queues, const strata_mem_t *send,
                                const strata_mem_t *recv, size_t count, int dtype, int root);

/* recv[root] = op over all ranks of send[.] (count elements each); the
** other members' recv entries are not written and may have a NULL buffer.
** Each member's input crosses the group once (a chain to the root, or the
** root's direct reads): half the bytes of an all-reduce of the same count. */
STRATA_API int strata_reduce(strata_comm_t comm, const strata_queue_t *queues, const strata_mem_t *send,
                             const strata_mem_t *recv, size_t count, int dtype, int op, int root);

/* Work enqueued on any queues[r] after the barrier runs only after every
** member's work enqueued before it has run. */
STRATA_API int strata_comm_barrier(strata_comm_t comm, const strata_queue_t *queues);

/*
** Block until every collective enqueued on the communicator so far is
** complete on every member; returns the first failure among them (with its
** message) and forgets it. The member queues themselves are not finished.
*/
STRATA_API int strata_comm_finish(strata_comm_t comm);

/* Blocking convenience: strata_allreduce, then strata_comm_finish. */
STRATA_API int strata_allreduce_sync(strata_comm_t comm, const strata_queue_t *queues, const strata_mem_t *send,
                                     const strata_mem_t *recv, size_t count, int dtype, int op);

/*
** The same collectives called by one member at a time — from each
** device's own thread, or (with MPI) from each process: the k-th call of
** every rank together form the k-th collective of the communicator, and
** their kinds, counts, types, reductions and roots must agree (a mismatch
** fails that collective on every member). Calls of different ranks may run
** concurrently; one rank's calls must not. Each returns once its member's
** part is enqueued; the collective starts when every member has called.
** A member that never calls makes the others fail after the timeout. On a
** communicator that is not asynchronous (strata_comm_info: a CUDA device
** outside NCCL) each call waits for its own collective instead, so the
** ranks must call from threads of their own, and returns that collective's
** status (its failure stays for strata_comm_finish too).
*/
STRATA_API int strata_allreduce_rank(strata_comm_t comm, int rank, strata_queue_t queue, strata_mem_t send,
                                     strata_mem_t recv, size_t count, int dtype, int op);
STRATA_API int strata_allgather_rank(strata_comm_t comm, int rank, strata_queue_t queue, strata_mem_t send,
                                     strata_mem_t recv, size_t count, int dtype);
STRATA_API int strata_reducescatter_rank(strata_comm_t comm, int rank, strata_queue_t queue, strata_mem_t send,
                                         strata_mem_t recv, size_t count, int dtype, int op);
STRATA_API int strata_broadcast_rank(strata_comm_t comm, int rank, strata_queue_t queue, strata_mem_t send,
                                     strata_mem_t recv, size_t count, int dtype, int root);
STRATA_API int strata_reduce_rank(strata_comm_t comm, int rank, strata_queue_t queue, strata_mem_t send,
                                  strata_mem_t recv, size_t count, int dtype, int op, int root);

/*
** Fail every collective that some member has not called yet, with `status`
** and `message` (NULL: "by the caller"): the members that did call return
** the error at once instead of waiting for the timeout, and a later call of
** such a collective by a missing member fails too (STRATA_ERR_STATE). For an
** executor whose worker failed before reaching its collective.
*/
STRATA_API void strata_comm_abort(strata_comm_t comm, int status, const char *message);

/* Names for messages and benchmarks: "allreduce", "sum", "float32", "ring"; "?" out of range. */
STRATA_API const char *strata_dtype_name(int dtype);
/* Bytes of one element of `dtype` (4, 4, 2); 0 for an unknown type. */
STRATA_API size_t strata_dtype_size(int dtype);
STRATA_API const char *strata_redop_name(int op);
STRATA_API const char *strata_comm_algorithm_name(int algorithm);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_COMM_H */
