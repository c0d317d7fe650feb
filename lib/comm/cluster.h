/* SPDX-License-Identifier: MIT */
/* comm/cluster.h — the cluster's state and the calls that cluster.c, p2p.c and collectives.c share. Internal. */
#ifndef STRATA__COMM_CLUSTER_H
#define STRATA__COMM_CLUSTER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <strata/cluster.h>

#include "device/registry.h"

#ifdef STRATA_HAVE_MPI
#include <mpi.h>
#endif

#define CLUSTER_TAG_MAX 32767
/* Staging buffers kept between transfers (pinned memory is slow to get: cudaHostAlloc). */
#define STAGING_POOL 16
#define STAGING_KEEP_BYTES ((size_t)256 << 20)

/* What each rank tells the others about itself. Sent as bytes: every rank
** runs the same build of strata (the layout of this struct is part of it). */
struct rank_rec {
  int32_t device_count;
  int32_t gpu_count;
  int64_t pid;
  char node_name[64];           /* as shown (ranks_per_node may have renamed it) */
  char real_node[64];           /* the processor name: who can see whose processes */
  struct strata_topology_host host;
};

/* One local link, endpoints 0 .. n-1 and n for the host. */
struct link_rec {
  int32_t kind;
  double gbps, latency_us;
};

struct strata_cluster {
  int rank, size, mpi, thread_level, init_here;
  double timeout_s;
  struct rank_rec *ranks;       /* by rank */
  int *node_of;                 /* by rank */
  struct strata_cluster_node *nodes;
  int node_count;
  int *first_dev;               /* by rank, size + 1 entries */
  struct strata_topology_device *devs;  /* by global device */
  struct link_rec **links;      /* by rank: (n+1) x (n+1) */
  double net_gbps, net_lat, shm_gbps, shm_lat;
  int net_src, shm_src;
  char mpi_library[128];
  strata_topology_t topo;
  pthread_mutex_t lock;         /* serialises strata's MPI calls; guards `broken` */
  int broken;
  int broken_status;
  char broken_msg[1024];
  int comm_ids;                 /* groups made so far: each gets its own tag */
  size_t chunk_cap;             /* STRATA_STAGING_CHUNK when the cluster started; 0: not a valid size */
  char chunk_env[64];           /* its text, for the message */
  pthread_mutex_t pool_lock;    /* guards pool */
  struct pooled {
    int dev;
    struct strata__staging mem; /* mem.p NULL: an empty slot */
  } pool[STAGING_POOL];         /* host staging memory not in use, kept for the next transfer */
#ifdef STRATA_HAVE_MPI
  MPI_Comm p2p, coll, ctl;      /* duplicates of MPI_COMM_WORLD */
#endif
};

/* cluster.c: the job's failure state, its bounded MPI calls, its device view (each contract at its definition). */
int strata__check_broken(struct strata_cluster *c);
int strata__rank_of_device(const struct strata_cluster *c, int dev);
#ifdef STRATA_HAVE_MPI
int strata__breakdown(struct strata_cluster *c, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int strata__wait_requests(struct strata_cluster *c, MPI_Request *reqs, const int *peers, int n, MPI_Status *statuses,
                          const char *what);
int strata__probe_message(struct strata_cluster *c, int peer, int tag, MPI_Message *msg, size_t *bytes,
                          const char *what);
int strata__imrecv(struct strata_cluster *c, void *p, int n, MPI_Message *m, MPI_Request *r, const char *what);
int strata__isend(struct strata_cluster *c, MPI_Comm comm, const void *p, int n, MPI_Datatype t, int peer, int tag,
                  MPI_Request *r, const char *what);
int strata__irecv(struct strata_cluster *c, MPI_Comm comm, void *p, int n, MPI_Datatype t, int peer, int tag,
                  MPI_Request *r, const char *what);
int strata__allgather_bytes(struct strata_cluster *c, const void *mine, size_t bytes, void *out, const char *what);
int strata__bcast_bytes(struct strata_cluster *c, int root, void *p, size_t bytes, const char *what);
#endif

/* p2p.c: the staging pool, and what collectives across ranks share with point-to-point. */
int strata__staging_take(struct strata_cluster *c, int dev, size_t bytes, struct strata__staging *out);
void strata__staging_give(struct strata_cluster *c, int dev, struct strata__staging *mem);
#ifdef STRATA_HAVE_MPI
int strata__transfer_failed(struct strata_cluster *c, int rc, const char *what);
char *strata__host_address(strata_mem_t mem);
#endif

#endif /* STRATA__COMM_CLUSTER_H */
