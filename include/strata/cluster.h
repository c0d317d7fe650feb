/* SPDX-License-Identifier: MIT */
/* strata/cluster.h — the processes of one job (MPI ranks), one view of every rank's devices, and the traffic between ranks. */
#ifndef STRATA_CLUSTER_H
#define STRATA_CLUSTER_H

#include <strata/comm.h>
#include <strata/common.h>
#include <strata/device.h>
#include <strata/ops.h>
#include <strata/topology.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
** A cluster is the set of processes of one job: the ranks of MPI's world
** when strata was built with MPI (./configure --with-mpi) and the program
** runs under mpirun or srun, else this process alone (a cluster of one
** rank, in which every call below still works and nothing crosses a
** process). Each rank owns the devices of its own strata_init; the cluster
** view numbers all of them globally, rank-major (rank 0's devices first),
** and knows how any two are connected:
**   same rank   the local topology's link (strata/topology.h);
**   same node   two processes of one machine: host memory shared through
**               MPI's shared-memory transport, bandwidth measured at start-up;
**   network     different nodes: the network, bandwidth measured at
**               start-up by a ping-pong, or given (STRATA_NETWORK_GBPS).
**
** Failure is bounded: every MPI call strata makes is non-blocking and
** polled. A peer that sends nothing for the timeout (STRATA_COMM_TIMEOUT,
** default 300 s), or a peer on the same node whose process is gone
** (detected within a fraction of a second), fails the call with
** STRATA_ERR_TIMEOUT and a message naming the rank, its node and the
** operation. The cluster is then broken: later calls fail at once with
** STRATA_ERR_STATE and the same message. A program that meets such an error
** should call strata_cluster_abort, which ends every rank of the job.
**
** Threads: a cluster may be used from several threads at once (one thread
** per (peer, tag) for point-to-point, one per group for collectives). strata
** asks MPI for MPI_THREAD_MULTIPLE and accepts MPI_THREAD_SERIALIZED, since
** it serialises its own MPI calls with a lock (each one short and
** non-blocking, so no thread holds it while waiting for a peer); an
** application that initialised MPI itself with less than SERIALIZED is
** refused (STRATA_ERR_STATE), as strata's calls come from the threads of
** the executor, not only the main one.
*/
typedef struct strata_cluster *strata_cluster_t;

/* Choices for strata_cluster_init; zero (or a NULL pointer) means the default. */
struct strata_cluster_options {
  double timeout_s;             /* a peer silent this long fails the call; default STRATA_COMM_TIMEOUT or 300 */
  double network_gbps;          /* the network's bandwidth, GB/s; default STRATA_NETWORK_GBPS, else measured */
  size_t pingpong_bytes;        /* message of the start-up ping-pong; default STRATA_CLUSTER_PINGPONG or 4M */
  int no_measure;               /* 1: no ping-pong; links take the given or nominal figures */
  int ranks_per_node;           /* pretend that every this many consecutive ranks form a node (named
                                   "HOST/k"): a network between processes of one machine, for tests;
                                   default STRATA_CLUSTER_RANKS_PER_NODE, 0 = real node names */
  const char *topology_xml;     /* each rank's topology from this hwloc dump; NULL: as strata_topology_load */
};

/*
** 1 when strata_cluster_init would join MPI: strata was built with MPI and
** MPI is initialised already, or a launcher (mpirun, srun: OMPI_COMM_WORLD_SIZE,
** PMIX_RANK, PMI_RANK, SLURM_STEP_ID ...) started this process; STRATA_MPI=1
** or 0 overrides the guess. 0 otherwise: strata_cluster_init then makes a
** cluster of this process alone, without starting MPI.
*/
STRATA_API int strata_cluster_available(void);

/*
** Join the job. Works whether or not the application already called
** MPI_Init / MPI_Init_thread: if it did not, strata initialises MPI
** (MPI_Init_thread asking for MPI_THREAD_MULTIPLE, `argc`/`argv` may be
** NULL) and finalises it in strata_cluster_free. Calls strata_init, loads
** this rank's topology and maps its devices, gathers every rank's view
** (collective: every rank of MPI_COMM_WORLD calls it) and measures the
** links between ranks. strata's traffic runs on duplicates of
** MPI_COMM_WORLD, so it never matches the application's own messages.
** On success *out is a new cluster the caller frees; on failure *out is
** untouched and the message says which rank and why. After a failure in a
** job of several ranks MPI stays initialised (finalising would wait for the
** other ranks): exit, or strata_cluster_abort(NULL, code, NULL).
*/
STRATA_API int strata_cluster_init(int *argc, char ***argv, const struct strata_cluster_options *opts,
                                   strata_cluster_t *out /* OUT */);

/*
** Free the cluster (collective: every rank calls it, after its traffic is
** done, and before strata_shutdown: it keeps up to 256 MiB of host staging
** memory, pinned by the devices' backends, between transfers). MPI is finalised only if strata_cluster_init initialised it, and
** not when the cluster is broken (MPI_Finalize waits for every rank: the
** program should strata_cluster_abort instead). NULL does nothing.
*/
STRATA_API void strata_cluster_free(strata_cluster_t c);

/*
** End the whole job after a failure: print "strata: rank R (NODE): MESSAGE"
** on stderr (MESSAGE NULL: the cluster's failure, else the last error) and
** abort every rank with exit status `code` (1 when 0) through MPI_Abort
** whenever MPI is initialised (`c` may be NULL after a failed
** strata_cluster_init). Without MPI it exits this process. Does not return.
*/
STRATA_API void strata_cluster_abort(strata_cluster_t c, int code, const char *message)
    __attribute__((noreturn));

/* Where a link figure comes from. */
enum strata_cluster_source {
  STRATA_CLUSTER_NOMINAL = 0,   /* a documented default (the topology's net_gbps, 12.5) */
  STRATA_CLUSTER_MEASURED = 1,  /* the start-up ping-pong */
  STRATA_CLUSTER_GIVEN = 2      /* options.network_gbps or STRATA_NETWORK_GBPS */
};

/* The cluster as a whole. Plain, caller-filled. */
struct strata_cluster_info {
  int rank, size;               /* this process, and how many */
  int mpi;                      /* 1 when the ranks are MPI's; 0: built without MPI or MPI not running */
  int thread_level;             /* MPI_THREAD_* that MPI provides, -1 without MPI */
  int mpi_initialised_here;     /* strata called MPI_Init_thread (and finalises) */
  int node, node_count;         /* this rank's node, and how many nodes */
  int device_count;             /* devices over all ranks */
  int first_device;             /* global index of this rank's local device 0 */
  int local_device_count;
  double timeout_s;
  double network_gbps;          /* between nodes */
  int network_source;           /* enum strata_cluster_source */
  double network_latency_us;    /* one-way, half the ping-pong's round trip of a small message (or nominal) */
  double shm_gbps;              /* between ranks of one node */
  int shm_source;
  double shm_latency_us;
  char mpi_library[128];        /* MPI_Get_library_version's first line, "" without MPI */
};
STRATA_API int strata_cluster_info(strata_cluster_t c, struct strata_cluster_info *info /* OUT */);

/* One rank. Plain, caller-filled. */
struct strata_cluster_rank {
  int rank, node;
  long pid;
  int first_device, device_count;
  char node_name[64];           /* MPI_Get_processor_name (or "HOST/k" with ranks_per_node) */
  struct strata_topology_host host;   /* its topology's summary */
  int gpu_count;                /* GPUs its hwloc sees */
};
STRATA_API int strata_cluster_rank_info(strata_cluster_t c, int rank, struct strata_cluster_rank *info /* OUT */);

/* One node: its name, and its ranks (consecutive in rank order or not). */
struct strata_cluster_node {
  int node;
  char name[64];
  int rank_count;
  int first_rank;               /* its lowest rank */
  int device_count;
};
STRATA_API int strata_cluster_node_info(strata_cluster_t c, int node, struct strata_cluster_node *info /* OUT */);

/* One global device: where it lives and what it is (its rank's topology record). */
struct strata_cluster_device {
  int device;                   /* global index */
  int rank, local, node;        /* owner, its index there (strata/device.h), its node */
  struct strata_topology_device info;  /* info.device is the local index */
};
STRATA_API int strata_cluster_device(strata_cluster_t c, int device, struct strata_cluster_device *info /* OUT */);

/* The global index of rank `rank`'s local device `local`. */
STRATA_API int strata_cluster_global_device(strata_cluster_t c, int rank, int local, int *device /* OUT */);

/* How two global devices are connected. */
enum strata_cluster_scope {
  STRATA_CLUSTER_SAME_RANK = 0, /* one process: the topology's link */
  STRATA_CLUSTER_SAME_NODE = 1, /* processes of one node: shared memory */
  STRATA_CLUSTER_NETWORK = 2    /* different nodes */
};
struct strata_cluster_link {
  int scope;                    /* enum strata_cluster_scope */
  int kind;                     /* path kind: the local link's; STRATA_PATH_SYS for same node (host memory
                                   between processes); STRATA_PATH_NET for the network */
  double gbps;                  /* to plan with */
  double latency_us;
  int source;                   /* enum strata_cluster_source for cross-rank links */
};
STRATA_API int strata_cluster_link(strata_cluster_t c, int from, int to, struct strata_cluster_link *link /* OUT */);
STRATA_API const char *strata_cluster_scope_name(int scope);   /* "rank", "node", "network"; "?" */

/*
** The whole view as JSON (schema "strata-cluster/1", see strata-topo(1)):
** ranks, nodes, devices and the link of every ordered pair of global
** devices. Every rank gets the same text. *json is the caller's, free().
*/
STRATA_API int strata_cluster_to_json(strata_cluster_t c, char **json /* OUT */);

/*
** Point-to-point: `bytes` bytes of device memory `mem` from its offset
** (counted in elements of mem's type; any backend; on
** this rank's device that owns `queue`) sent to, or received from, rank
** `peer` (not this rank). Where the device's memory is the host's own (the
** host's virtual devices) MPI reads and writes it in place; otherwise the
** data is staged through host memory (pinned where the backend can) in
** chunks of STRATA_STAGING_CHUNK (default 4M), two in flight, so copying
** one chunk overlaps moving the other. Both calls first wait for `queue`'s
** earlier work and return once the data has left (send) or arrived in
** device memory (recv). Messages between two ranks with one `tag`
** (0 .. 32767) arrive in the order sent; the two sides must agree on
** `bytes`: a mismatch fails the receive with STRATA_ERR_SHAPE, naming both
** sizes, before anything is written (the sender may have returned; the
** cluster is broken). One thread per (peer, tag) at a time.
*/
STRATA_API int strata_cluster_send(strata_cluster_t c, int peer, int tag, strata_queue_t queue, strata_mem_t mem,
                                   size_t bytes);
STRATA_API int strata_cluster_recv(strata_cluster_t c, int peer, int tag, strata_queue_t queue, strata_mem_t mem,
                                   size_t bytes);

/*
** A group of global devices that may span ranks. Its collectives take one
** of two paths, chosen when the group is made and agreed by every rank:
**  * NCCL: when every member (on every rank) is a CUDA device, NCCL loads
**    on every rank with members, no two members are one GPU and no rank
**    was asked for another algorithm, one NCCL communicator spans all the
**    members: the rank holding member 0 makes its unique id, MPI carries
**    it to every rank, and each rank joins with its members
**    (ncclCommInitRank, NCCL rank = member index). The collectives run on
**    the members' own queues, device to device. A group within one rank
**    takes this path too.
**    A rank that cannot join says so, and every rank frees its part and
**    falls back.
**  * hierarchical, otherwise: inside each rank a local communicator
**    (strata/comm.h) over that rank's members; across ranks MPI between one
**    leader per rank (its first member), over the ranks in ascending order.
** `opts` configures the local communicators; its algorithm (or
** STRATA_COMM_ALGORITHM) applies to the group: STRATA_COMM_NCCL on any rank
** makes every rank fail with the same status and reason when the NCCL
** path cannot be had (STRATA_ERR_UNSUPPORTED, or the failure of the rank
** that could not join); RING or DIRECT asks for the
** hierarchical path. strata_cluster_comm_info tells the path taken and why
** (also logged at info level, subsystem "comm"). Every rank of the cluster
** calls strata_cluster_comm_new with the same list (ranks with no member
** too: it is collective over the world); a list that differs between
** ranks fails on every rank. Members are ranked 0 .. count-1 in the order
** given.
*/
typedef struct strata_cluster_comm *strata_cluster_comm_t;
STRATA_API int strata_cluster_comm_new(strata_cluster_t c, const int *devices, int count,
                                       const struct strata_comm_options *opts, strata_cluster_comm_t *out /* OUT */);
/* Free the group; NULL does nothing. Not collective. */
STRATA_API void strata_cluster_comm_free(strata_cluster_comm_t cc);

/* This rank's members: their number and (members, caller's array of at least that
** many, may be NULL) their group ranks, ascending. The collectives' arrays follow this order. */
STRATA_API int strata_cluster_comm_local(strata_cluster_comm_t cc, int *count /* OUT */, int *members /* OUT */);

/* How a group's collectives run. Plain, caller-filled; `path` belongs to
** the group (valid until strata_cluster_comm_free). */
struct strata_cluster_comm_info {
  int size;                     /* members */
  int ranks;                    /* ranks with members */
  int local;                    /* this rank's members */
  int nccl;                     /* 1: one NCCL communicator over every member; 0: hierarchical */
  const char *path;             /* one line, the same on every rank: the path and, when not NCCL, why */
};
STRATA_API int strata_cluster_comm_info(strata_cluster_comm_t cc, struct strata_cluster_comm_info *info /* OUT */);

/*
** The collectives of strata/comm.h over the group, called by every rank
** that has members, with one entry per local member in `queues`, `send`
** and `recv` (the order of strata_cluster_comm_local). Counts, types,
** reductions and roots must agree. Each call returns once this rank's
** results are in its members' recv buffers. On the hierarchical path
** reductions run in a fixed order (inside each rank the local
** communicator's, across ranks a ring in rank order), so results are
** bit-identical between runs and on every member; on the NCCL path the
** order is NCCL's, which strata does not promise between runs. bfloat16
** reduces as in strata/comm.h: on the hierarchical path each step (inside
** a rank on its devices, across ranks on the leaders' host memory) adds in
** float32 and rounds once to bfloat16, so a group of n members rounds at
** most n - 1 times; MPI only carries the 16-bit words. For
** all-gather, recv is size x count with member g's block at g x count; for
** reduce-scatter, send is size x count and recv gets block g; for
** broadcast, `root` is a group rank.
*/
STRATA_API int strata_cluster_allreduce(strata_cluster_comm_t cc, const strata_queue_t *queues,
                                        const strata_mem_t *send, const strata_mem_t *recv, size_t count, int dtype,
                                        int op);
STRATA_API int strata_cluster_allgather(strata_cluster_comm_t cc, const strata_queue_t *queues,
                                        const strata_mem_t *send, const strata_mem_t *recv, size_t count, int dtype);
STRATA_API int strata_cluster_reducescatter(strata_cluster_comm_t cc, const strata_queue_t *queues,
                                            const strata_mem_t *send, const strata_mem_t *recv, size_t count,
                                            int dtype, int op);
STRATA_API int strata_cluster_broadcast(strata_cluster_comm_t cc, const strata_queue_t *queues,
                                        const strata_mem_t *send, const strata_mem_t *recv, size_t count, int dtype,
                                        int root);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_CLUSTER_H */
