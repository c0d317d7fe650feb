/* SPDX-License-Identifier: MIT */
/* mpi.c — the cluster: MPI ranks joined into one device view, host-staged point-to-point, collectives across ranks
** (one NCCL communicator when every member is a CUDA device, else hierarchical), bounded waits. */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include <strata/cluster.h>

#include "core/parse.h"
#include "device/registry.h"
#include "core/core.h"
#include "comm/comm.h"
#include "comm/mpi.h"

#ifdef STRATA_HAVE_MPI
#include <mpi.h>
#endif

#define CLUSTER_DEFAULT_TIMEOUT 300.0
#define CLUSTER_DEFAULT_PINGPONG (4u << 20)
#define CLUSTER_DEFAULT_CHUNK (4u << 20)
#define CLUSTER_TAG_MAX 32767
/* The first word of a point-to-point header ("strata01"), so that a message that is not one says so. */
#define P2P_MAGIC 0x3130617461727473ull
#define P2P_HEADER_WORDS 3
#define P2P_HEADER_BYTES (P2P_HEADER_WORDS * sizeof(uint64_t))
#define PINGPONG_REPS 5
#define LATENCY_REPS 20
/* Shared memory between two processes when nothing was measured: OpenMPI 4.1's
** vader transport moves 1 MB at 9-11 GB/s on the build machines (shared/BASELINES.md). */
#define NOMINAL_SHM_GBPS 10.0
#define NOMINAL_SHM_LATENCY_US 0.5
/* A wait polls without pause this long, then yields the core until YIELD_S, then sleeps between polls. */
#define SPIN_S 100e-6
#define YIELD_S 2e-3
/* A peer process on the same node is looked for this often while waiting on it. */
#define LIVENESS_PERIOD_S 0.05
/* Staging buffers kept between transfers (pinned memory is slow to get: cudaHostAlloc). */
#define STAGING_POOL 16
#define STAGING_KEEP_BYTES ((size_t)256 << 20)
/* Pieces of a message in flight at once when MPI reads or writes device memory directly. */
#define DIRECT_WINDOW 8

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

struct strata_cluster_comm {
  struct strata_cluster *c;
  int n;
  int *devices;                 /* global, by member */
  int *rank_of;                 /* by member */
  int nlocal;
  int *local_members;           /* group ranks of this rank's members, ascending */
  int *local_devices;           /* their local device indices */
  strata_comm_t local;          /* over local_devices; NULL without members or with `bcomm` */
  const struct strata__slot *bslot; /* the backend whose library communicator (NCCL) spans the group */
  void *bcomm;                  /* its communicator over this rank's members; NULL without members */
  int nccl;                     /* 1: the collectives go through bcomm (every rank agrees); 0: hierarchical */
  char path[400];               /* the path the collectives take and why, the same line on every rank */
  int nranks;
  int *ranks;                   /* ranks with members, ascending */
  int me;                       /* this rank's index in ranks, -1 without members */
  int tag;
};

/* ------------------------------------------------------------ options */

static int env_real(const char *name, double min, double max, double *out) {
  const char *v = getenv(name);
  if (!v || !*v)
    return 0;
  if (strata__parse_real(v, min, max, STRATA__PARSE_ABOVE_MIN, out))
    return strata__error(STRATA_ERR_PARSE, "%s='%s' is not a number above %g (%s)", name, v, min,
                         strata__parse_why());
  return 0;
}

static int resolve_options(const struct strata_cluster_options *in, struct strata_cluster_options *o) {
  memset(o, 0, sizeof *o);
  if (in)
    *o = *in;
  if (!(o->timeout_s > 0)) {
    o->timeout_s = CLUSTER_DEFAULT_TIMEOUT;
    TRY(env_real("STRATA_COMM_TIMEOUT", 0, 1e9, &o->timeout_s));
  }
  if (!(o->network_gbps > 0))
    TRY(env_real("STRATA_NETWORK_GBPS", 0, 1e6, &o->network_gbps));
  if (!o->pingpong_bytes) {
    const char *v = getenv("STRATA_CLUSTER_PINGPONG");
    uint64_t b = CLUSTER_DEFAULT_PINGPONG;
    if (v && *v) {
      if (strata__parse_size(v, &b) || b > (1u << 30))
        return strata__error(STRATA_ERR_PARSE, "STRATA_CLUSTER_PINGPONG='%s' is not a size up to 1G (0: no ping-pong)",
                             v);
      if (b == 0)
        o->no_measure = 1;
    }
    o->pingpong_bytes = b ? (size_t)b : CLUSTER_DEFAULT_PINGPONG;
  }
  if (o->ranks_per_node <= 0) {
    const char *v = getenv("STRATA_CLUSTER_RANKS_PER_NODE");
    int64_t k = 0;
    if (v && *v && strata__parse_int(v, 0, 1 << 20, &k))
      return strata__error(STRATA_ERR_PARSE, "STRATA_CLUSTER_RANKS_PER_NODE='%s' is not a count of ranks (%s)", v,
                           strata__parse_why());
    o->ranks_per_node = (int)k;
  }
  return 0;
}

#ifdef STRATA_HAVE_MPI
/* STRATA_STAGING_CHUNK, read once when the cluster starts (every message's pieces follow it). */
static void read_chunk_cap(struct strata_cluster *cl) {
  const char *v = getenv("STRATA_STAGING_CHUNK");
  uint64_t b = CLUSTER_DEFAULT_CHUNK;
  if (v && *v && (strata__parse_size(v, &b) || b == 0 || b > (1u << 30)))
    b = 0;
  cl->chunk_cap = (size_t)b;
  strata__strlcpy(cl->chunk_env, v ? v : "", sizeof cl->chunk_env);
}
#endif

/* ------------------------------------------------------------ failure */

#ifdef STRATA_HAVE_MPI
/* Mark the cluster broken with the first failure; returns `status`. */
static int breakdown(struct strata_cluster *c, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int breakdown(struct strata_cluster *c, int status, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&c->lock);
  if (!c->broken) {
    c->broken = 1;
    c->broken_status = status;
    strata__strlcpy(c->broken_msg, msg, sizeof c->broken_msg);
  }
  pthread_mutex_unlock(&c->lock);
  return strata__error(status, "%s", msg);
}

#endif /* STRATA_HAVE_MPI */

static int check_broken(struct strata_cluster *c) {
  pthread_mutex_lock(&c->lock);
  int b = c->broken;
  char msg[1024];
  if (b)
    memcpy(msg, c->broken_msg, sizeof msg);
  pthread_mutex_unlock(&c->lock);
  if (b)
    return strata__error(STRATA_ERR_STATE, "the cluster failed earlier: %s", msg);
  return 0;
}

static const char *node_name_of(const struct strata_cluster *c, int rank) {
  return c->ranks && rank >= 0 && rank < c->size ? c->ranks[rank].node_name : "?";
}

#ifdef STRATA_HAVE_MPI
/* 1 when `rank`'s process is known to be gone: it shares this rank's machine
** and its pid no longer names a live process (absent, or a zombie). */
static int peer_gone(const struct strata_cluster *c, int rank) {
  if (!c->ranks || rank < 0 || rank >= c->size || rank == c->rank ||
      strcmp(c->ranks[rank].real_node, c->ranks[c->rank].real_node) != 0)
    return 0;
  pid_t pid = (pid_t)c->ranks[rank].pid;
  if (pid <= 0)
    return 0;
  if (kill(pid, 0) != 0 && errno == ESRCH)
    return 1;
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
  FILE *f = fopen(path, "r");
  if (!f)
    return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *p = strrchr(buf, ')');   /* the state follows the command name */
  return p && (p[2] == 'Z' || p[2] == 'X');
}

/*
** Between two polls of a wait that has seen no progress for `idle`
** seconds: nothing for the first SPIN_S (a message between two processes
** of one machine takes microseconds, and giving the core away costs a
** time slice when other processes want it, as MPI's own blocking calls
** know), then a yield, then short sleeps, so that a long wait uses no core.
*/
static void pause_briefly(double idle) {
  if (idle < SPIN_S)
    return;
  if (idle < YIELD_S) {
    sched_yield();
    return;
  }
  struct timespec ts = {0, idle < 10 * YIELD_S ? 20000 : 200000};
  nanosleep(&ts, NULL);
}


static const char *mpi_error_text(int code, char *buf, size_t n) {
  int len = 0;
  char s[MPI_MAX_ERROR_STRING];
  if (MPI_Error_string(code, s, &len) != MPI_SUCCESS)
    snprintf(s, sizeof s, "MPI error %d", code);
  strata__strlcpy(buf, s, n);
  return buf;
}

/*
** The bound on a wait for `peers` (n of them; those whose request in reqs
** is not complete, or all when reqs is NULL), at time `now`: every
** LIVENESS_PERIOD_S (since *last_check) a failure in another thread of
** this process, or a rank of this machine that has exited; after the
** timeout without progress (since last_progress), the silent peer. Returns
** 0 to go on waiting, else the failure (the cluster is broken then).
*/
static int watch_peers(struct strata_cluster *c, const MPI_Request *reqs, const int *peers, int n, double now,
                       double *last_check, double last_progress, const char *what) {
  if (now - *last_check >= LIVENESS_PERIOD_S) {
    /* The peers waited for first, then any other rank of this machine: a job
    ** with a dead rank is over, and the message should name the dead one. */
    *last_check = now;
    if (check_broken(c)) /* another thread of this process failed (strata__cluster_break): the job is ending */
      return STRATA_ERR_STATE;
    int gone = -1;
    for (int i = 0; i < n && gone < 0; i++) {
      int p = peers ? peers[i] : -1;
      if ((!reqs || reqs[i] != MPI_REQUEST_NULL) && p >= 0 && peer_gone(c, p))
        gone = p;
    }
    for (int r = 0; r < c->size && gone < 0 && c->ranks; r++)
      if (peer_gone(c, r))
        gone = r;
    if (gone >= 0)
      return breakdown(c, STRATA_ERR_TIMEOUT, "%s: rank %d (pid %ld on %s) has exited; rank %d stops", what, gone,
                       (long)c->ranks[gone].pid, node_name_of(c, gone), c->rank);
  }
  if (now - last_progress >= c->timeout_s) {
    int p = -1;
    for (int i = 0; i < n && p < 0; i++)
      if ((!reqs || reqs[i] != MPI_REQUEST_NULL) && peers)
        p = peers[i];
    if (p >= 0)
      return breakdown(c, STRATA_ERR_TIMEOUT, "%s: rank %d (%s) made no progress for %g s; rank %d stops", what, p,
                       node_name_of(c, p), c->timeout_s, c->rank);
    return breakdown(c, STRATA_ERR_TIMEOUT, "%s: not every rank took part within %g s; rank %d stops", what,
                     c->timeout_s, c->rank);
  }
  return 0;
}

/*
** Wait for `n` requests, polling: peers[i] is the rank request i talks to
** (-1: the whole world, a collective). Fails the cluster, naming the peer,
** when one of the peers' processes is gone or nothing completed for the
** timeout. The requests that did not complete are left to MPI, and so are
** their buffers: the caller must not free those after a failure (the
** cluster is broken then and the job is ending). statuses may be NULL.
*/
static int wait_requests(struct strata_cluster *c, MPI_Request *reqs, const int *peers, int n, MPI_Status *statuses,
                         const char *what) {
  double t0 = strata__now(), last_progress = t0, last_check = t0;
  int left = 0;
  for (int i = 0; i < n; i++)
    if (reqs[i] != MPI_REQUEST_NULL)
      left++;
  while (left > 0) {
    int progressed = 0;
    for (int i = 0; i < n; i++) {
      if (reqs[i] == MPI_REQUEST_NULL)
        continue;
      int flag = 0;
      MPI_Status st;
      memset(&st, 0, sizeof st);
      pthread_mutex_lock(&c->lock);
      int rc = MPI_Test(&reqs[i], &flag, &st);
      pthread_mutex_unlock(&c->lock);
      /* (MPI_Test returns a request's error itself: status.MPI_ERROR is only set by the multi-request calls.) */
      if (rc != MPI_SUCCESS) {
        char e[MPI_MAX_ERROR_STRING];
        int p = peers ? peers[i] : -1, cls = 0;
        MPI_Error_class(rc, &cls);
        if (cls == MPI_ERR_TRUNCATE) /* a point-to-point piece larger than the receiver's */
          return breakdown(c, STRATA_ERR_SHAPE, "%s: rank %d sends more with that tag than rank %d expects", what, p,
                           c->rank);
        return breakdown(c, STRATA_ERR_BACKEND, "%s: rank %d: MPI failed talking to %s%d (%s): %s", what, c->rank,
                         p >= 0 ? "rank " : "every rank, ", p, p >= 0 ? node_name_of(c, p) : "-",
                         mpi_error_text(rc, e, sizeof e));
      }
      if (flag) {
        if (statuses)
          statuses[i] = st;
        reqs[i] = MPI_REQUEST_NULL;
        left--;
        progressed = 1;
      }
    }
    if (!left)
      break;
    double now = strata__now();
    if (progressed) {
      last_progress = now;
      continue;
    }
    int rc = watch_peers(c, reqs, peers, n, now, &last_check, last_progress, what);
    if (rc)
      return rc;
    pause_briefly(now - last_progress);
  }
  return 0;
}

/* MPI_I* calls made under the lock, their failures turned into strata errors. */
static int mpi_check(struct strata_cluster *c, int rc, const char *what) {
  if (rc == MPI_SUCCESS)
    return 0;
  char e[MPI_MAX_ERROR_STRING];
  return breakdown(c, STRATA_ERR_BACKEND, "%s: rank %d: %s", what, c->rank, mpi_error_text(rc, e, sizeof e));
}

/*
** Wait for the next message from `peer` with `tag` on the point-to-point
** communicator and take it out of MPI's matching (MPI_Improbe): *msg is
** its handle for MPI_Imrecv, *bytes its size. Bounded as wait_requests.
** Receiving only what is known to fit matters: OpenMPI 4.1 copies a
** message larger than the receive (by shared memory) past its end.
*/
static int probe_message(struct strata_cluster *c, int peer, int tag, MPI_Message *msg, size_t *bytes,
                         const char *what) {
  double t0 = strata__now(), last_check = t0;
  for (;;) {
    int flag = 0;
    MPI_Status st;
    memset(&st, 0, sizeof st);
    pthread_mutex_lock(&c->lock);
    int rc = MPI_Improbe(peer, tag, c->p2p, &flag, msg, &st);
    pthread_mutex_unlock(&c->lock);
    TRY(mpi_check(c, rc, what));
    if (flag) {
      int n = 0;
      MPI_Get_count(&st, MPI_BYTE, &n);
      *bytes = (size_t)n;
      return 0;
    }
    double now = strata__now();
    TRY(watch_peers(c, NULL, &peer, 1, now, &last_check, t0, what));
    pause_briefly(now - t0);
  }
}

/* Receive the message `m` matched by probe_message into `p` (n bytes, its size). */
static int imrecv(struct strata_cluster *c, void *p, int n, MPI_Message *m, MPI_Request *r, const char *what) {
  pthread_mutex_lock(&c->lock);
  int rc = MPI_Imrecv(p, n, MPI_BYTE, m, r);
  pthread_mutex_unlock(&c->lock);
  return mpi_check(c, rc, what);
}

static int isend(struct strata_cluster *c, MPI_Comm comm, const void *p, int n, MPI_Datatype t, int peer, int tag,
                 MPI_Request *r, const char *what) {
  pthread_mutex_lock(&c->lock);
  int rc = MPI_Isend(p, n, t, peer, tag, comm, r);
  pthread_mutex_unlock(&c->lock);
  return mpi_check(c, rc, what);
}

static int irecv(struct strata_cluster *c, MPI_Comm comm, void *p, int n, MPI_Datatype t, int peer, int tag,
                 MPI_Request *r, const char *what) {
  pthread_mutex_lock(&c->lock);
  int rc = MPI_Irecv(p, n, t, peer, tag, comm, r);
  pthread_mutex_unlock(&c->lock);
  return mpi_check(c, rc, what);
}

/* Every rank's `bytes` bytes into out (size x bytes), on the control communicator. */
static int allgather_bytes(struct strata_cluster *c, const void *mine, size_t bytes, void *out, const char *what) {
  if (bytes > INT_MAX)
    return strata__error(STRATA_ERR_RANGE, "%s: %zu bytes per rank is more than MPI counts", what, bytes);
  MPI_Request r = MPI_REQUEST_NULL;
  pthread_mutex_lock(&c->lock);
  int rc = MPI_Iallgather(mine, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, c->ctl, &r);
  pthread_mutex_unlock(&c->lock);
  TRY(mpi_check(c, rc, what));
  return wait_requests(c, &r, NULL, 1, NULL, what);
}

/* Variable-sized contributions: counts[r] bytes from each rank, concatenated in rank order. */
static int allgatherv_bytes(struct strata_cluster *c, const void *mine, const size_t *counts, void *out,
                            const char *what) {
  int *cnt = calloc((size_t)c->size, sizeof *cnt), *disp = calloc((size_t)c->size, sizeof *disp);
  if (!cnt || !disp) {
    free(cnt);
    free(disp);
    return strata__error(STRATA_ERR_NOMEM, "%s: out of host memory", what);
  }
  size_t total = 0;
  for (int r = 0; r < c->size; r++) {
    if (counts[r] > INT_MAX || total > INT_MAX) {
      free(cnt);
      free(disp);
      return strata__error(STRATA_ERR_RANGE, "%s: more bytes than MPI counts", what);
    }
    cnt[r] = (int)counts[r];
    disp[r] = (int)total;
    total += counts[r];
  }
  MPI_Request r = MPI_REQUEST_NULL;
  pthread_mutex_lock(&c->lock);
  int rc = MPI_Iallgatherv(mine, cnt[c->rank], MPI_BYTE, out, cnt, disp, MPI_BYTE, c->ctl, &r);
  pthread_mutex_unlock(&c->lock);
  rc = mpi_check(c, rc, what);
  if (!rc)
    rc = wait_requests(c, &r, NULL, 1, NULL, what);
  if (!rc) {
    free(cnt);
    free(disp);
  }
  return rc;
}

static int bcast_bytes(struct strata_cluster *c, int root, void *p, size_t bytes, const char *what) {
  MPI_Request r = MPI_REQUEST_NULL;
  pthread_mutex_lock(&c->lock);
  int rc = MPI_Ibcast(p, (int)bytes, MPI_BYTE, root, c->ctl, &r);
  pthread_mutex_unlock(&c->lock);
  TRY(mpi_check(c, rc, what));
  return wait_requests(c, &r, NULL, 1, NULL, what);
}

/*
** Round trips of `bytes` between ranks a and b (one of them this rank) on
** the control communicator: the best of PINGPONG_REPS for bandwidth
** (GB/s, 2 x bytes per round trip) and of LATENCY_REPS for 8 bytes (half
** the round trip, microseconds).
*/
static int pingpong(struct strata_cluster *c, int a, int b, size_t bytes, double *gbps, double *lat_us) {
  int peer = c->rank == a ? b : a, first = c->rank == a;
  char *buf = malloc(bytes ? bytes : 8);
  if (!buf)
    return strata__error(STRATA_ERR_NOMEM, "ping-pong: out of host memory for %zu bytes", bytes);
  memset(buf, 0x5a, bytes ? bytes : 8);
  double best_bw = 0, best_lat = 1e30;
  int rc = 0;
  for (int pass = 0; pass < 2 && !rc; pass++) {
    size_t n = pass == 0 ? 8 : bytes;
    int reps = pass == 0 ? LATENCY_REPS : PINGPONG_REPS;
    for (int i = -1; i < reps && !rc; i++) {    /* i = -1: warm-up */
      double t0 = strata__now();
      MPI_Request r = MPI_REQUEST_NULL;
      for (int leg = 0; leg < 2 && !rc; leg++) {
        int sending = (leg == 0) == first;
        rc = sending ? isend(c, c->ctl, buf, (int)n, MPI_BYTE, peer, 1, &r, "start-up ping-pong")
                     : irecv(c, c->ctl, buf, (int)n, MPI_BYTE, peer, 1, &r, "start-up ping-pong");
        if (!rc)
          rc = wait_requests(c, &r, &peer, 1, NULL, "start-up ping-pong");
      }
      double dt = strata__now() - t0;
      if (i >= 0 && dt > 0) {
        if (pass == 0)
          best_lat = fmin(best_lat, dt / 2 * 1e6);
        else
          best_bw = fmax(best_bw, 2.0 * (double)n / dt / 1e9);
      }
    }
  }
  if (!rc) {
    *gbps = best_bw;
    *lat_us = best_lat;
    free(buf);
  }
  return rc;
}

#endif /* STRATA_HAVE_MPI */

/* -------------------------------------------------------------- view */

/* This rank's record, devices and link matrix. */
static int describe_self(struct strata_cluster *c, const struct strata_cluster_options *o,
                         struct strata_topology_device **devs, struct link_rec **links, struct rank_rec *me) {
  TRY(strata_topology_load(o->topology_xml, &c->topo));
  TRY(strata_topology_map_runtime(c->topo));
  int n = 0;
  TRY(strata_topology_device_count(c->topo, &n));
  memset(me, 0, sizeof *me);
  me->device_count = n;
  me->pid = (int64_t)getpid();
  int g = 0;
  strata_topology_gpu_count(c->topo, &g);
  me->gpu_count = g;
  TRY(strata_topology_host(c->topo, &me->host));
  *devs = calloc((size_t)n + 1, sizeof **devs);
  *links = calloc(((size_t)n + 1) * ((size_t)n + 1), sizeof **links);
  if (!*devs || !*links)
    return strata__error(STRATA_ERR_NOMEM, "cluster: out of host memory describing %d devices", n);
  for (int i = 0; i < n; i++)
    TRY(strata_topology_device(c->topo, i, &(*devs)[i]));
  for (int a = 0; a <= n; a++)
    for (int b = 0; b <= n; b++) {
      struct strata_link l;
      TRY(strata_topology_device_link(c->topo, a == n ? STRATA_TOPOLOGY_HOST : a, b == n ? STRATA_TOPOLOGY_HOST : b,
                                      &l));
      struct link_rec *r = &(*links)[(size_t)a * ((size_t)n + 1) + (size_t)b];
      r->kind = l.kind;
      r->gbps = l.gbps;
      r->latency_us = l.latency_us;
    }
  return 0;
}

/* Nodes from the ranks' names, numbered by their lowest rank. */
static int number_nodes(struct strata_cluster *c) {
  c->node_of = calloc((size_t)c->size, sizeof *c->node_of);
  c->nodes = calloc((size_t)c->size, sizeof *c->nodes);
  if (!c->node_of || !c->nodes)
    return strata__error(STRATA_ERR_NOMEM, "cluster: out of host memory");
  for (int r = 0; r < c->size; r++) {
    int k = 0;
    while (k < c->node_count && strcmp(c->nodes[k].name, c->ranks[r].node_name) != 0)
      k++;
    if (k == c->node_count) {
      c->node_count++;
      c->nodes[k].node = k;
      strata__strlcpy(c->nodes[k].name, c->ranks[r].node_name, sizeof c->nodes[k].name);
      c->nodes[k].first_rank = r;
    }
    c->node_of[r] = k;
    c->nodes[k].rank_count++;
    c->nodes[k].device_count += c->ranks[r].device_count;
  }
  return 0;
}

/* Link figures between ranks: given, measured by ping-pong from rank 0, or nominal. */
static int measure_links(struct strata_cluster *c, const struct strata_cluster_options *o) {
  struct strata_topology_options to;
  strata_topology_options(c->topo, &to);
  c->net_gbps = o->network_gbps > 0 ? o->network_gbps : to.net_gbps;
  c->net_src = o->network_gbps > 0 ? STRATA_CLUSTER_GIVEN : STRATA_CLUSTER_NOMINAL;
  c->net_lat = to.net_latency_us;
  c->shm_gbps = NOMINAL_SHM_GBPS;
  c->shm_lat = NOMINAL_SHM_LATENCY_US;
  c->shm_src = STRATA_CLUSTER_NOMINAL;
#ifdef STRATA_HAVE_MPI
  if (!c->mpi || c->size < 2 || o->no_measure)
    return 0;
  int shm_peer = -1, net_peer = -1;
  for (int r = 1; r < c->size; r++) {
    if (c->node_of[r] == c->node_of[0] && shm_peer < 0)
      shm_peer = r;
    if (c->node_of[r] != c->node_of[0] && net_peer < 0)
      net_peer = r;
  }
  if (o->network_gbps > 0)
    net_peer = -1;
  double res[4] = {0, 0, 0, 0};
  if (shm_peer > 0 && (c->rank == 0 || c->rank == shm_peer))
    TRY(pingpong(c, 0, shm_peer, o->pingpong_bytes, &res[0], &res[1]));
  if (net_peer > 0 && (c->rank == 0 || c->rank == net_peer))
    TRY(pingpong(c, 0, net_peer, o->pingpong_bytes, &res[2], &res[3]));
  TRY(bcast_bytes(c, 0, res, sizeof res, "start-up ping-pong results"));
  if (res[0] > 0) {
    c->shm_gbps = res[0];
    c->shm_lat = res[1];
    c->shm_src = STRATA_CLUSTER_MEASURED;
  }
  if (res[2] > 0) {
    c->net_gbps = res[2];
    c->net_lat = res[3];
    c->net_src = STRATA_CLUSTER_MEASURED;
  }
#endif
  return 0;
}

#ifdef STRATA_HAVE_MPI
/* Whether a launcher started this process (so that MPI_Init finds its peers
** rather than starting a singleton), or STRATA_MPI says what to do. */
static int launched(void) {
  const char *force = getenv("STRATA_MPI");
  if (force && *force)
    return strcmp(force, "0") != 0;
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS",
                                     "SLURM_STEP_ID"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
    if (getenv(vars[i]))
      return 1;
  return 0;
}
#endif

STRATA_API int strata_cluster_available(void) {
#ifdef STRATA_HAVE_MPI
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  return !finalized && (inited || launched());
#else
  return 0;
#endif
}

/* Host memory of at least `bytes` for transfers of device `dev`: a kept buffer of that
** device and size, else a new one (pinned by the device's backend where it can). */
static int staging_take(struct strata_cluster *c, int dev, size_t bytes, struct strata__staging *out) {
  pthread_mutex_lock(&c->pool_lock);
  for (int i = 0; i < STAGING_POOL; i++)
    if (c->pool[i].mem.p && c->pool[i].dev == dev && c->pool[i].mem.bytes == bytes) {
      *out = c->pool[i].mem;
      memset(&c->pool[i].mem, 0, sizeof c->pool[i].mem);
      pthread_mutex_unlock(&c->pool_lock);
      return 0;
    }
  pthread_mutex_unlock(&c->pool_lock);
  return strata__host_memory_new(dev, bytes, out);
}

/* Keep `mem` for the next transfer while the pool holds at most STAGING_KEEP_BYTES in
** STAGING_POOL buffers (the oldest kept go first), else free it. */
static void staging_give(struct strata_cluster *c, int dev, struct strata__staging *mem) {
  if (!mem->p)
    return;
  if (mem->bytes > STAGING_KEEP_BYTES) {
    strata__host_memory_free(mem);
    return;
  }
  struct strata__staging evict[STAGING_POOL];
  int nevict = 0;
  pthread_mutex_lock(&c->pool_lock);
  size_t kept = 0;
  int used = 0;
  for (int i = 0; i < STAGING_POOL; i++)
    if (c->pool[i].mem.p) {
      c->pool[used++] = c->pool[i];   /* compact, oldest first */
      kept += c->pool[i].mem.bytes;
    }
  for (int i = used; i < STAGING_POOL; i++)
    memset(&c->pool[i].mem, 0, sizeof c->pool[i].mem);
  while (used > 0 && (used == STAGING_POOL || kept + mem->bytes > STAGING_KEEP_BYTES)) {
    evict[nevict++] = c->pool[0].mem;
    kept -= c->pool[0].mem.bytes;
    memmove(&c->pool[0], &c->pool[1], sizeof c->pool[0] * (size_t)(STAGING_POOL - 1));
    memset(&c->pool[STAGING_POOL - 1].mem, 0, sizeof c->pool[0].mem);
    used--;
  }
  c->pool[used].dev = dev;
  c->pool[used].mem = *mem;
  memset(mem, 0, sizeof *mem);
  pthread_mutex_unlock(&c->pool_lock);
  for (int i = 0; i < nevict; i++)
    strata__host_memory_free(&evict[i]);
}

static void cluster_release(struct strata_cluster *c) {
  if (!c)
    return;
  for (int i = 0; i < STAGING_POOL; i++)
    strata__host_memory_free(&c->pool[i].mem);
  pthread_mutex_destroy(&c->pool_lock);
  if (c->links)
    for (int r = 0; r < c->size; r++)
      free(c->links[r]);
  free(c->links);
  free(c->ranks);
  free(c->node_of);
  free(c->nodes);
  free(c->first_dev);
  free(c->devs);
  strata_topology_free(c->topo);
  pthread_mutex_destroy(&c->lock);
  free(c);
}

#ifdef STRATA_HAVE_MPI
/* MPI's side of init: MPI itself if needed, rank, size and the communicators. */
static int mpi_join(struct strata_cluster *c, int *argc, char ***argv) {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (finalized)
    return strata__error(STRATA_ERR_STATE, "strata_cluster_init: MPI was already finalised");
  if (!inited && !launched())
    return 0;   /* not under a launcher: a cluster of this process alone */
  int provided = MPI_THREAD_SINGLE;
  if (!inited) {
    if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
      return strata__error(STRATA_ERR_BACKEND, "strata_cluster_init: MPI_Init_thread failed");
    c->init_here = 1;
  } else {
    MPI_Query_thread(&provided);
  }
  c->mpi = 1;
  c->thread_level = provided;
  if (provided < MPI_THREAD_SERIALIZED)
    return strata__error(STRATA_ERR_STATE,
                         "strata_cluster_init: MPI provides thread level %d; strata needs MPI_THREAD_SERIALIZED or "
                         "MPI_THREAD_MULTIPLE (its calls come from the executor's threads)",
                         provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &c->size);
  char lib[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  if (MPI_Get_library_version(lib, &len) == MPI_SUCCESS) {
    lib[strcspn(lib, "\n,")] = '\0';
    strata__strlcpy(c->mpi_library, lib, sizeof c->mpi_library);
  }
  MPI_Comm *dups[3] = {&c->p2p, &c->coll, &c->ctl};
  MPI_Request reqs[3];
  for (int i = 0; i < 3; i++) {
    *dups[i] = MPI_COMM_NULL;
    if (MPI_Comm_idup(MPI_COMM_WORLD, dups[i], &reqs[i]) != MPI_SUCCESS)
      return strata__error(STRATA_ERR_BACKEND, "strata_cluster_init: MPI_Comm_idup failed");
  }
  TRY(wait_requests(c, reqs, NULL, 3, NULL, "strata_cluster_init (duplicating MPI_COMM_WORLD)"));
  for (int i = 0; i < 3; i++)
    MPI_Comm_set_errhandler(*dups[i], MPI_ERRORS_RETURN);
  return 0;
}
#endif /* STRATA_HAVE_MPI */

STRATA_API int strata_cluster_init(int *argc, char ***argv, const struct strata_cluster_options *opts,
                                   strata_cluster_t *out) {
  if (!out)
    return strata__error(STRATA_ERR_INVALID, "strata_cluster_init: NULL out");
  struct strata_cluster_options o;
  TRY(resolve_options(opts, &o));
  struct strata_cluster *c = calloc(1, sizeof *c);
  if (!c)
    return strata__error(STRATA_ERR_NOMEM, "strata_cluster_init: out of host memory");
  pthread_mutex_init(&c->lock, NULL);
  pthread_mutex_init(&c->pool_lock, NULL);
  c->size = 1;
  c->thread_level = -1;
  c->timeout_s = o.timeout_s;
#ifdef STRATA_HAVE_MPI
  read_chunk_cap(c);
#endif
  int rc = 0;
#ifdef STRATA_HAVE_MPI
  rc = mpi_join(c, argc, argv);
#endif
  struct strata_topology_device *mydevs = NULL;
  struct link_rec *mylinks = NULL;
  struct rank_rec me;
  memset(&me, 0, sizeof me);
  if (!rc)
    rc = describe_self(c, &o, &mydevs, &mylinks, &me);
  if (!rc) {
    char host[64] = "";
#ifdef STRATA_HAVE_MPI
    if (c->mpi) {
      char pn[MPI_MAX_PROCESSOR_NAME];
      int len = 0;
      if (MPI_Get_processor_name(pn, &len) == MPI_SUCCESS)
        strata__strlcpy(host, pn, sizeof host);
    }
#endif
    if (!host[0] && gethostname(host, sizeof host) != 0)
      strata__strlcpy(host, "localhost", sizeof host);
    host[sizeof host - 1] = '\0';
    strata__strlcpy(me.real_node, host, sizeof me.real_node);
    if (o.ranks_per_node > 0)
      snprintf(me.node_name, sizeof me.node_name, "%.50s/%d", host, c->rank / o.ranks_per_node);
    else
      strata__strlcpy(me.node_name, host, sizeof me.node_name);
    c->ranks = calloc((size_t)c->size, sizeof *c->ranks);
    c->links = calloc((size_t)c->size, sizeof *c->links);
    c->first_dev = calloc((size_t)c->size + 1, sizeof *c->first_dev);
    if (!c->ranks || !c->links || !c->first_dev)
      rc = strata__error(STRATA_ERR_NOMEM, "strata_cluster_init: out of host memory");
  }
  if (!rc) {
    if (c->size == 1) {
      c->ranks[0] = me;
    } else {
#ifdef STRATA_HAVE_MPI
      rc = allgather_bytes(c, &me, sizeof me, c->ranks, "strata_cluster_init (gathering the ranks)");
#endif
    }
  }
  int ndev = 0;
  if (!rc) {
    for (int r = 0; r < c->size; r++) {
      if (c->ranks[r].device_count < 0 || c->ranks[r].device_count > (1 << 16)) {
        rc = strata__error(STRATA_ERR_INTERNAL, "strata_cluster_init: rank %d reports %d devices", r,
                           (int)c->ranks[r].device_count);
        break;
      }
      c->first_dev[r] = ndev;
      ndev += c->ranks[r].device_count;
    }
    c->first_dev[c->size] = ndev;
  }
  if (!rc) {
    c->devs = calloc((size_t)ndev + 1, sizeof *c->devs);
    for (int r = 0; r < c->size && c->devs; r++) {
      size_t n1 = (size_t)c->ranks[r].device_count + 1;
      c->links[r] = calloc(n1 * n1, sizeof **c->links);
      if (!c->links[r])
        break;
    }
    if (!c->devs || !c->links[c->size - 1])
      rc = strata__error(STRATA_ERR_NOMEM, "strata_cluster_init: out of host memory for %d devices", ndev);
  }
  if (!rc && c->size == 1) {
    memcpy(c->devs, mydevs, sizeof *mydevs * (size_t)ndev);
    size_t n1 = (size_t)ndev + 1;
    memcpy(c->links[0], mylinks, sizeof *mylinks * n1 * n1);
  }
#ifdef STRATA_HAVE_MPI
  if (!rc && c->size > 1) {
    size_t *counts = calloc((size_t)c->size, sizeof *counts);
    size_t total = 0;
    for (int r = 0; counts && r < c->size; r++) {
      size_t n1 = (size_t)c->ranks[r].device_count + 1;
      counts[r] = n1 * n1 * sizeof(struct link_rec);
      total += counts[r];
    }
    char *all = counts ? malloc(total ? total : 1) : NULL;
    if (!all)
      rc = strata__error(STRATA_ERR_NOMEM, "strata_cluster_init: out of host memory");
    for (int r = 0; !rc && r < c->size; r++)
      counts[r] = (size_t)c->ranks[r].device_count * sizeof(struct strata_topology_device);
    if (!rc)
      rc = allgatherv_bytes(c, mydevs, counts, c->devs, "strata_cluster_init (gathering the devices)");
    for (int r = 0; !rc && r < c->size; r++) {
      size_t n1 = (size_t)c->ranks[r].device_count + 1;
      counts[r] = n1 * n1 * sizeof(struct link_rec);
    }
    if (!rc)
      rc = allgatherv_bytes(c, mylinks, counts, all, "strata_cluster_init (gathering the links)");
    size_t at = 0;
    for (int r = 0; !rc && r < c->size; r++) {
      memcpy(c->links[r], all + at, counts[r]);
      at += counts[r];
    }
    if (!rc || !c->broken) {
      free(all);
      free(counts);
    }
  }
#endif
  if (!rc)
    rc = number_nodes(c);
  if (!rc)
    rc = measure_links(c, &o);
  if (!rc || !c->broken) {
    free(mydevs);
    free(mylinks);
  }
  if (rc) {
    char msg[1024];
    strata__strlcpy(msg, strata_last_error(), sizeof msg);
#ifdef STRATA_HAVE_MPI
    /* Alone, MPI is finalised again. With other ranks it is not: MPI_Finalize would wait for
    ** ranks that may still be joining; the program exits (or calls strata_cluster_abort(NULL, ...))
    ** and the launcher ends the job. */
    if (c->init_here && !c->broken && c->size == 1)
      MPI_Finalize();
#endif
    int r = c->rank;
    if (!c->broken)
      cluster_release(c);
    return strata__error(rc, "strata_cluster_init (rank %d): %s", r, msg);
  }
  strata__log(STRATA_LOG_INFO, "cluster", "rank %d of %d on %s: %d local devices, %d in all", c->rank, c->size,
              c->ranks[c->rank].node_name, c->ranks[c->rank].device_count, ndev);
  *out = c;
  return STRATA_OK;
}

STRATA_API void strata_cluster_free(strata_cluster_t c) {
  if (!c)
    return;
#ifdef STRATA_HAVE_MPI
  if (c->mpi && !c->broken) {
    MPI_Comm *dups[3] = {&c->p2p, &c->coll, &c->ctl};
    for (int i = 0; i < 3; i++)
      if (*dups[i] != MPI_COMM_NULL)
        MPI_Comm_free(dups[i]);
    if (c->init_here)
      MPI_Finalize();
  }
  if (c->broken)
    return;   /* MPI may still write into buffers the view owns: leave them */
#endif
  cluster_release(c);
}

STRATA_API void strata_cluster_abort(strata_cluster_t c, int code, const char *message) {
  if (!code)
    code = 1;
  char msg[1024];
  if (message)
    strata__strlcpy(msg, message, sizeof msg);
  else if (c && c->broken)
    strata__strlcpy(msg, c->broken_msg, sizeof msg);
  else
    strata__strlcpy(msg, strata_last_error(), sizeof msg);
  fprintf(stderr, "strata: rank %d (%s): %s\n", c ? c->rank : 0, c ? node_name_of(c, c->rank) : "?", msg);
  fflush(stderr);
#ifdef STRATA_HAVE_MPI
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (inited && !finalized)   /* also when strata_cluster_init failed (c NULL) after starting MPI */
    MPI_Abort(MPI_COMM_WORLD, code);
#endif
  _exit(code);
}

/* ------------------------------------------------------------ queries */

STRATA_API int strata_cluster_info(strata_cluster_t c, struct strata_cluster_info *info) {
  if (!c || !info)
    return strata__error(STRATA_ERR_INVALID, "strata_cluster_info: NULL argument");
  memset(info, 0, sizeof *info);
  info->rank = c->rank;
  info->size = c->size;
  info->mpi = c->mpi;
  info->thread_level = c->mpi ? c->thread_level : -1;
  info->mpi_initialised_here = c->init_here;
  info->node = c->node_of[c->rank];
  info->node_count = c->node_count;
  info->device_count = c->first_dev[c->size];
  info->first_device = c->first_dev[c->rank];
  info->local_device_count = c->ranks[c->rank].device_count;
  info->timeout_s = c->timeout_s;
  info->network_gbps = c->net_gbps;
  info->network_source = c->net_src;
  info->network_latency_us = c->net_lat;
  info->shm_gbps = c->shm_gbps;
  info->shm_source = c->shm_src;
  info->shm_latency_us = c->shm_lat;
  strata__strlcpy(info->mpi_library, c->mpi_library, sizeof info->mpi_library);
  return STRATA_OK;
}

STRATA_API int strata_cluster_rank_info(strata_cluster_t c, int rank, struct strata_cluster_rank *info) {
  if (!c || !info)
    return strata__error(STRATA_ERR_INVALID, "strata_cluster_rank_info: NULL argument");
  if (rank < 0 || rank >= c->size)
    return strata__error(STRATA_ERR_RANGE, "strata_cluster_rank_info: rank %d out of range (%d ranks)", rank, c->size);
  memset(info, 0, sizeof *info);
  const struct rank_rec *r = &c->ranks[rank];
  info->rank = rank;
  info->node = c->node_of[rank];
  info->pid = (long)r->pid;
  info->first_device = c->first_dev[rank];
  info->device_count = r->device_count;
  strata__strlcpy(info->node_name, r->node_name, sizeof info->node_name);
  info->host = r->host;
  info->gpu_count = r->gpu_count;
  return STRATA_OK;
}

STRATA_API int strata_cluster_node_info(strata_cluster_t c, int node, struct strata_cluster_node *info) {
  if (!c || !info)
    return strata__error(STRATA_ERR_INVALID, "strata_cluster_node_info: NULL argument");
  if (node < 0 || node >= c->node_count)
    return strata__error(STRATA_ERR_RANGE, "strata_cluster_node_info: node %d out of range (%d nodes)", node,
                         c->node_count);
  *info = c->nodes[node];
  return STRATA_OK;
}

static int rank_of_device(const struct strata_cluster *c, int dev) {
  int r = 0;
  while (r + 1 < c->size && c->first_dev[r + 1] <= dev)
    r++;
  return r;
}

STRATA_API int strata_cluster_device(strata_cluster_t c, int device, struct strata_cluster_device *info) {
  if (!c || !info)
    return strata__error(STRATA_ERR_INVALID, "strata_cluster_device: NULL argument");
  if (device < 0 || device >= c->first_dev[c->size])
    return strata__error(STRATA_ERR_RANGE, "strata_cluster_device: device %d out of range (%d in the cluster)", device,
                         c->first_dev[c->size]);
  int r = rank_of_device(c, device);
  info->device = device;
  info->rank = r;
  info->local = device - c->first_dev[r];
  info->node = c->node_of[r];
  info->info = c->devs[device];
  return STRATA_OK;
}

STRATA_API int strata_cluster_global_device(strata_cluster_t c, int rank, int local, int *device) {
  if (!c || !device)
    return strata__error(STRATA_ERR_INVALID, "strata_cluster_global_device: NULL argument");
  if (rank < 0 || rank >= c->size || local < 0 || local >= c->ranks[rank].device_count)
    return strata__error(STRATA_ERR_RANGE, "strata_cluster_global_device: rank %d has no device %d", rank, local);
  *device = c->first_dev[rank] + local;
  return STRATA_OK;
}

STRATA_API const char *strata_cluster_scope_name(int scope) {
  static const char *const names[] = {"rank", "node", "network"};
  return scope >= 0 && scope <= STRATA_CLUSTER_NETWORK ? names[scope] : "?";
}

STRATA_API int strata_cluster_link(strata_cluster_t c, int from, int to, struct strata_cluster_link *link) {
  if (!c || !link)
    return strata__error(STRATA_ERR_INVALID, "strata_cluster_link: NULL argument");
  int n = c->first_dev[c->size];
  if (from < 0 || from >= n || to < 0 || to >= n)
    return strata__error(STRATA_ERR_RANGE, "strata_cluster_link: devices %d, %d out of range (%d in the cluster)", from,
                         to, n);
  int ra = rank_of_device(c, from), rb = rank_of_device(c, to);
  memset(link, 0, sizeof *link);
  if (ra == rb) {
    size_t n1 = (size_t)c->ranks[ra].device_count + 1;
    const struct link_rec *l = &c->links[ra][(size_t)(from - c->first_dev[ra]) * n1 + (size_t)(to - c->first_dev[ra])];
    link->scope = STRATA_CLUSTER_SAME_RANK;
    link->kind = l->kind;
    link->gbps = l->gbps;
    link->latency_us = l->latency_us;
    link->source = STRATA_CLUSTER_NOMINAL;
  } else if (c->node_of[ra] == c->node_of[rb]) {
    link->scope = STRATA_CLUSTER_SAME_NODE;
    link->kind = STRATA_PATH_SYS;
    link->gbps = c->shm_gbps;
    link->latency_us = c->shm_lat;
    link->source = c->shm_src;
  } else {
    link->scope = STRATA_CLUSTER_NETWORK;
    link->kind = STRATA_PATH_NET;
    link->gbps = c->net_gbps;
    link->latency_us = c->net_lat;
    link->source = c->net_src;
  }
  return STRATA_OK;
}

static const char *source_name(int s) {
  return s == STRATA_CLUSTER_MEASURED ? "measured" : s == STRATA_CLUSTER_GIVEN ? "given" : "nominal";
}

static json_t *num2(double x) { return json_real(round(x * 100.0) / 100.0); }

STRATA_API int strata_cluster_to_json(strata_cluster_t c, char **json) {
  if (!c || !json)
    return strata__error(STRATA_ERR_INVALID, "strata_cluster_to_json: NULL argument");
  json_t *root = json_object(), *ranks = json_array(), *nodes = json_array(), *devs = json_array(),
         *links = json_array(), *net = json_object();
  json_object_set_new(root, "schema", json_string("strata-cluster/1"));
  json_object_set_new(root, "size", json_integer(c->size));
  json_object_set_new(root, "mpi", json_boolean(c->mpi));
  json_object_set_new(root, "mpi_library", json_string(c->mpi_library));
  json_object_set_new(net, "network_gbps", num2(c->net_gbps));
  json_object_set_new(net, "network_source", json_string(source_name(c->net_src)));
  json_object_set_new(net, "network_latency_us", num2(c->net_lat));
  json_object_set_new(net, "shm_gbps", num2(c->shm_gbps));
  json_object_set_new(net, "shm_source", json_string(source_name(c->shm_src)));
  json_object_set_new(net, "shm_latency_us", num2(c->shm_lat));
  json_object_set_new(root, "between_ranks", net);
  for (int k = 0; k < c->node_count; k++) {
    json_t *o = json_object();
    json_object_set_new(o, "node", json_integer(k));
    json_object_set_new(o, "name", json_string(c->nodes[k].name));
    json_object_set_new(o, "ranks", json_integer(c->nodes[k].rank_count));
    json_object_set_new(o, "devices", json_integer(c->nodes[k].device_count));
    json_array_append_new(nodes, o);
  }
  for (int r = 0; r < c->size; r++) {
    json_t *o = json_object();
    json_object_set_new(o, "rank", json_integer(r));
    json_object_set_new(o, "node", json_integer(c->node_of[r]));
    json_object_set_new(o, "node_name", json_string(c->ranks[r].node_name));
    json_object_set_new(o, "pid", json_integer(c->ranks[r].pid));
    json_object_set_new(o, "first_device", json_integer(c->first_dev[r]));
    json_object_set_new(o, "devices", json_integer(c->ranks[r].device_count));
    json_object_set_new(o, "gpus", json_integer(c->ranks[r].gpu_count));
    json_object_set_new(o, "cores", json_integer(c->ranks[r].host.cores));
    json_object_set_new(o, "memory", json_integer((json_int_t)c->ranks[r].host.memory));
    json_object_set_new(o, "cpu_model", json_string(c->ranks[r].host.cpu_model));
    json_array_append_new(ranks, o);
  }
  int n = c->first_dev[c->size];
  for (int d = 0; d < n; d++) {
    struct strata_cluster_device cd;
    strata_cluster_device(c, d, &cd);
    json_t *o = json_object();
    json_object_set_new(o, "device", json_integer(d));
    json_object_set_new(o, "rank", json_integer(cd.rank));
    json_object_set_new(o, "local", json_integer(cd.local));
    json_object_set_new(o, "node", json_integer(cd.node));
    json_object_set_new(o, "backend", json_string(cd.info.backend));
    json_object_set_new(o, "name", json_string(cd.info.name));
    json_object_set_new(o, "vendor", json_string(cd.info.vendor));
    json_object_set_new(o, "memory", json_integer((json_int_t)cd.info.memory));
    json_object_set_new(o, "pci_bus_id", json_string(cd.info.pci_bus_id));
    json_object_set_new(o, "gpu", json_integer(cd.info.gpu));
    json_array_append_new(devs, o);
    for (int e = 0; e < n; e++) {
      if (e == d)
        continue;
      struct strata_cluster_link l;
      strata_cluster_link(c, d, e, &l);
      json_t *lo = json_object();
      json_object_set_new(lo, "from", json_integer(d));
      json_object_set_new(lo, "to", json_integer(e));
      json_object_set_new(lo, "scope", json_string(strata_cluster_scope_name(l.scope)));
      json_object_set_new(lo, "kind", json_string(strata_path_kind_name(l.kind)));
      json_object_set_new(lo, "gbps", num2(l.gbps));
      json_object_set_new(lo, "latency_us", num2(l.latency_us));
      if (l.scope != STRATA_CLUSTER_SAME_RANK)
        json_object_set_new(lo, "source", json_string(source_name(l.source)));
      json_array_append_new(links, lo);
    }
  }
  json_object_set_new(root, "nodes", nodes);
  json_object_set_new(root, "ranks", ranks);
  json_object_set_new(root, "devices", devs);
  json_object_set_new(root, "links", links);
  char *s = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(root);
  if (!s)
    return strata__error(STRATA_ERR_NOMEM, "strata_cluster_to_json: out of host memory");
  *json = s;
  return STRATA_OK;
}

/* ------------------------------------------------------ point-to-point */

/*
** A transfer between ranks that failed part-way leaves its peer waiting for
** the rest: the cluster is broken (if the failure was local, this says so),
** and the program should strata_cluster_abort. Returns rc.
*/
#ifdef STRATA_HAVE_MPI
static int transfer_failed(struct strata_cluster *c, int rc, const char *what) {
  if (c->broken)
    return rc;
  char why[700];
  strata__strlcpy(why, strata_last_error(), sizeof why);
  return breakdown(c, rc, "%s: rank %d failed: %s", what, c->rank, why);
}
#endif

/* Arguments of a send or receive, checked; *bytes_off the byte offset of mem. */
static int check_p2p(struct strata_cluster *c, const char *fn, int peer, int tag, strata_queue_t q, strata_mem_t mem,
                     size_t bytes, size_t *byte_off) {
  if (!c || !q || !mem.buf)
    return strata__error(STRATA_ERR_INVALID, "%s: NULL argument", fn);
  if (peer < 0 || peer >= c->size || peer == c->rank)
    return strata__error(STRATA_ERR_RANGE, "%s: peer %d is not another rank (this is rank %d of %d)", fn, peer,
                         c->rank, c->size);
  if (tag < 0 || tag > CLUSTER_TAG_MAX)
    return strata__error(STRATA_ERR_RANGE, "%s: tag %d outside 0 .. %d", fn, tag, CLUSTER_TAG_MAX);
  if (strata_buffer_device(mem.buf) != strata_queue_device(q))
    return strata__error(STRATA_ERR_DEVICE_MISMATCH, "%s: the buffer is on device %d, the queue on device %d", fn,
                         strata_buffer_device(mem.buf), strata_queue_device(q));
  size_t size = strata_buffer_size(mem.buf);
  if (mem.off > size / 4 || bytes > size - mem.off * 4)
    return strata__error(STRATA_ERR_RANGE, "%s: %zu bytes at element %zu run past the buffer's %zu bytes", fn, bytes,
                         mem.off, size);
  *byte_off = mem.off * 4;
  return check_broken(c);
}

#ifdef STRATA_HAVE_MPI
/*
** The pieces a message of `bytes` moves in: STRATA_STAGING_CHUNK (default
** 4M, read when the cluster starts), but at least 4 pieces of 64K or
** more, so that copying one piece between the device and host memory
** overlaps MPI moving the previous one also for messages of a few chunks. Both sides compute it (the sender
** announces it, and a rank whose STRATA_STAGING_CHUNK differs is refused).
**
** A message of one piece (up to 64K) travels alone; one of several
** pieces, or of no more bytes than a header, follows a header
** {P2P_MAGIC, bytes, piece size} on the same tag. The receiver looks at
** each message before it takes it (probe_message), so a size that differs
** between the sides fails the receive with STRATA_ERR_SHAPE and nothing
** is written.
*/
static int p2p_chunk(const struct strata_cluster *cl, size_t bytes, size_t *chunk) {
  if (!cl->chunk_cap)
    return strata__error(STRATA_ERR_PARSE, "STRATA_STAGING_CHUNK='%s' is not a size between 1 byte and 1G",
                         cl->chunk_env);
  size_t c = bytes / 4;
  if (c < (64u << 10))
    c = 64u << 10;
  if (c > cl->chunk_cap)
    c = cl->chunk_cap;
  if (c > bytes)
    c = bytes ? bytes : 1;
  *chunk = c;
  return 0;
}
#endif

#ifdef STRATA_HAVE_MPI
/*
** The address of device memory `mem` when its device's memory is the host's
** own (the backend's host_pointer: the host's virtual devices), else NULL.
** MPI then reads and writes it in place, once the buffer's queue is
** finished, instead of copying it through staging memory.
*/
static char *host_address(strata_mem_t mem) {
  const struct strata__device *d = mem.buf->dev;
  const struct strata__backend *be = d->slot->be;
  char *p = be->host_pointer ? be->host_pointer(d->slot->ctx, d->local, mem.buf->h) : NULL;
  return p ? p + mem.off * 4 : NULL;
}

/* Append the decimal digits of v at p; returns the end. */
static char *put_decimal(char *p, uint64_t v) {
  char d[24];
  int n = 0;
  do
    d[n++] = (char)('0' + v % 10);
  while ((v /= 10) != 0);
  while (n > 0)
    *p++ = d[--n];
  return p;
}

/*
** `out` (at least 160 bytes) = "send of N bytes to rank P (tag T)" or its
** receive's kind, what every message of the transfer starts with. Written
** by hand: snprintf costs a fifth of a microsecond, a few percent of a
** 64 KiB message between two processes.
*/
static void p2p_what(char *out, const char *verb, size_t bytes, const char *to, int peer, int tag) {
  char *p = out;
  size_t n = strlen(verb);
  memcpy(p, verb, n);
  p = put_decimal(p + n, bytes);
  n = strlen(to);
  memcpy(p, to, n);
  p = put_decimal(p + n, (uint64_t)peer);
  memcpy(p, " (tag ", 6);
  p = put_decimal(p + 6, (uint64_t)tag);
  *p++ = ')';
  *p = '\0';
}

/* 1 when a message of `bytes` in pieces of `chunk` goes without a header (see p2p_chunk). */
static int p2p_alone(size_t bytes, size_t chunk) { return bytes > P2P_HEADER_BYTES && bytes <= chunk; }

/* The size of piece i of a message of `bytes` in pieces of `chunk`. */
static size_t piece_bytes(size_t bytes, size_t chunk, size_t i) {
  size_t off = i * chunk;
  return bytes - off < chunk ? bytes - off : chunk;
}

/*
** The pieces of a send straight from host memory `p`, DIRECT_WINDOW in
** flight. On failure MPI may still read `p` (the cluster is broken then).
*/
static int send_direct(struct strata_cluster *c, int peer, int tag, const char *p, size_t bytes, size_t chunk,
                       const char *what) {
  MPI_Request r[DIRECT_WINDOW];
  int peers[DIRECT_WINDOW];
  for (int k = 0; k < DIRECT_WINDOW; k++) {
    r[k] = MPI_REQUEST_NULL;
    peers[k] = peer;
  }
  size_t nchunks = (bytes + chunk - 1) / chunk;
  int rc = 0;
  for (size_t i = 0; !rc && i < nchunks; i++) {
    int k = (int)(i % DIRECT_WINDOW);
    if (r[k] != MPI_REQUEST_NULL && (rc = wait_requests(c, &r[k], &peer, 1, NULL, what)))
      break;
    rc = isend(c, c->p2p, p + i * chunk, (int)piece_bytes(bytes, chunk, i), MPI_BYTE, peer, tag, &r[k], what);
  }
  if (!rc)
    rc = wait_requests(c, r, peers, DIRECT_WINDOW, NULL, what);
  return rc;
}

/*
** The pieces of a send from device memory through two host staging
** buffers: piece i is copied out while piece i - 1 is on its way. On
** failure the staging stays with MPI (the cluster is broken then).
*/
static int send_staged(struct strata_cluster *c, int peer, int tag, strata_queue_t q, strata_mem_t mem, size_t bytes,
                       size_t chunk, const char *what) {
  MPI_Request r[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  int peers[2] = {peer, peer};
  struct strata__staging st[2];
  memset(st, 0, sizeof st);
  int dev = strata_queue_device(q);
  int rc = staging_take(c, dev, chunk, &st[0]);
  if (!rc)
    rc = staging_take(c, dev, chunk, &st[1]);
  if (rc) {
    staging_give(c, dev, &st[0]);
    return rc;
  }
  size_t nchunks = (bytes + chunk - 1) / chunk;
  for (size_t i = 0; !rc && i < nchunks; i++) {
    int b = (int)(i & 1);
    size_t n = piece_bytes(bytes, chunk, i);
    if (r[b] != MPI_REQUEST_NULL && (rc = wait_requests(c, &r[b], &peer, 1, NULL, what)))
      break;
    rc = strata_buffer_download(q, mem.buf, mem.off * 4 + i * chunk, st[b].p, n);   /* overlaps the other piece's send */
    if (!rc)
      rc = isend(c, c->p2p, st[b].p, (int)n, MPI_BYTE, peer, tag, &r[b], what);
  }
  if (!rc)
    rc = wait_requests(c, r, peers, 2, NULL, what);
  if (rc)
    return rc;
  staging_give(c, dev, &st[0]);
  staging_give(c, dev, &st[1]);
  return 0;
}
#endif /* STRATA_HAVE_MPI */

STRATA_API int strata_cluster_send(strata_cluster_t c, int peer, int tag, strata_queue_t q, strata_mem_t mem,
                                   size_t bytes) {
  size_t boff = 0;
  TRY(check_p2p(c, "strata_cluster_send", peer, tag, q, mem, bytes, &boff));
#ifdef STRATA_HAVE_MPI
  size_t chunk = 0;
  TRY(p2p_chunk(c, bytes, &chunk));
  char what[160];
  p2p_what(what, "send of ", bytes, " bytes to rank ", peer, tag);
  /* On the heap: after a failure MPI may still read it (the cluster is broken then, and it stays). */
  uint64_t *header = NULL;
  MPI_Request hr = MPI_REQUEST_NULL;
  if (!p2p_alone(bytes, chunk)) {
    if (!(header = malloc(P2P_HEADER_BYTES)))
      return strata__error(STRATA_ERR_NOMEM, "%s: out of host memory", what);
    header[0] = P2P_MAGIC;
    header[1] = bytes;
    header[2] = chunk;
    TRY(isend(c, c->p2p, header, P2P_HEADER_WORDS, MPI_UINT64_T, peer, tag, &hr, what));
  }
  char *direct = bytes ? host_address(mem) : NULL;
  int rc = 0;
  if (direct) {
    rc = strata_queue_finish(q);   /* the queue's earlier work has written the buffer */
    if (!rc)
      rc = send_direct(c, peer, tag, direct, bytes, chunk, what);
  } else if (bytes) {
    rc = send_staged(c, peer, tag, q, mem, bytes, chunk, what);
  }
  if (!rc)
    rc = wait_requests(c, &hr, &peer, 1, NULL, what);
  if (rc)
    return transfer_failed(c, rc, what);   /* the header stays: MPI may still read it */
  free(header);
  return 0;
#else
  return strata__error(STRATA_ERR_INTERNAL, "strata_cluster_send: no other rank without MPI");
#endif
}

#ifdef STRATA_HAVE_MPI
/* Piece i of a receive arrived whole (status s), or the sides disagree on the message. */
static int check_piece(struct strata_cluster *c, MPI_Status *s, size_t i, size_t n, int peer, const char *what) {
  int got = 0;
  MPI_Get_count(s, MPI_BYTE, &got);
  if ((size_t)got != n)
    return breakdown(c, STRATA_ERR_SHAPE, "%s: chunk %zu from rank %d has %d bytes, %zu expected", what, i, peer, got,
                     n);
  return 0;
}

/*
** Take the next message from `peer` with `tag` (probe_message), which
** should be `want` bytes: the message alone (*m is then its handle) or the
** header of several pieces (`header`, checked against bytes and chunk).
** A message of another size is not received: STRATA_ERR_SHAPE, naming the
** sender's size (a header's, when a header came instead of a piece).
*/
static int take_first(struct strata_cluster *c, int peer, int tag, size_t bytes, size_t chunk, uint64_t *header,
                      MPI_Message *m, const char *what) {
  size_t got = 0;
  size_t want = header ? P2P_HEADER_BYTES : bytes;
  TRY(probe_message(c, peer, tag, m, &got, what));
  uint64_t h[P2P_HEADER_WORDS] = {0, 0, 0};
  if (!header && got == P2P_HEADER_BYTES) {
    /* a header where one piece alone was expected: it says how much the sender sends */
    MPI_Request r = MPI_REQUEST_NULL;
    uint64_t *hp = malloc(P2P_HEADER_BYTES);   /* on the heap: after a failure MPI may still write it */
    TRY(hp ? 0 : strata__error(STRATA_ERR_NOMEM, "%s: out of host memory", what));
    TRY(imrecv(c, hp, (int)got, m, &r, what));
    TRY(wait_requests(c, &r, &peer, 1, NULL, what));
    memcpy(h, hp, sizeof h);
    free(hp);
    if (h[0] == P2P_MAGIC)
      got = (size_t)h[1];
  }
  if (got != want || (!header && h[0] == P2P_MAGIC))
    return breakdown(c, STRATA_ERR_SHAPE, "%s: rank %d sends %zu bytes with that tag; rank %d expects %zu", what, peer,
                     got, c->rank, bytes);
  if (!header)
    return 0;
  MPI_Request r = MPI_REQUEST_NULL;
  TRY(imrecv(c, header, (int)got, m, &r, what));
  TRY(wait_requests(c, &r, &peer, 1, NULL, what));
  if (header[0] != P2P_MAGIC)
    return breakdown(c, STRATA_ERR_SHAPE, "%s: rank %d sends %zu bytes alone with that tag; rank %d expects %zu", what,
                     peer, got, c->rank, bytes);
  if (header[1] != bytes)
    return breakdown(c, STRATA_ERR_SHAPE, "%s: rank %d sends %llu bytes with that tag; rank %d expects %zu", what,
                     peer, (unsigned long long)header[1], c->rank, bytes);
  if (header[2] != chunk)
    return breakdown(c, STRATA_ERR_SHAPE,
                     "%s: rank %d moves it in pieces of %llu bytes, rank %d in %zu (STRATA_STAGING_CHUNK differs)",
                     what, peer, (unsigned long long)header[2], c->rank, chunk);
  return 0;
}

/* Piece i's receive into p: the message `m` that take_first matched (piece 0 alone), else a posted one. */
static int recv_piece(struct strata_cluster *c, int peer, int tag, void *p, size_t n, MPI_Message *m, MPI_Request *r,
                      const char *what) {
  if (*m != MPI_MESSAGE_NULL)
    return imrecv(c, p, (int)n, m, r, what);
  return irecv(c, c->p2p, p, (int)n, MPI_BYTE, peer, tag, r, what);
}

/*
** The pieces of a receive straight into host memory `p`, DIRECT_WINDOW
** posted at once once the first message said the sides agree (header NULL:
** one piece alone). On failure MPI may still write into `p`.
*/
static int recv_direct(struct strata_cluster *c, int peer, int tag, char *p, size_t bytes, size_t chunk,
                       uint64_t *header, const char *what) {
  MPI_Request r[DIRECT_WINDOW];
  MPI_Message m = MPI_MESSAGE_NULL;
  for (int k = 0; k < DIRECT_WINDOW; k++)
    r[k] = MPI_REQUEST_NULL;
  size_t nchunks = (bytes + chunk - 1) / chunk;
  int rc = take_first(c, peer, tag, bytes, chunk, header, &m, what);
  for (size_t i = 0; !rc && i < DIRECT_WINDOW && i < nchunks; i++)
    rc = recv_piece(c, peer, tag, p + i * chunk, piece_bytes(bytes, chunk, i), &m, &r[i], what);
  for (size_t i = 0; !rc && i < nchunks; i++) {
    int k = (int)(i % DIRECT_WINDOW);
    MPI_Status s;
    rc = wait_requests(c, &r[k], &peer, 1, &s, what);
    if (!rc)
      rc = check_piece(c, &s, i, piece_bytes(bytes, chunk, i), peer, what);
    if (!rc && i + DIRECT_WINDOW < nchunks)
      rc = irecv(c, c->p2p, p + (i + DIRECT_WINDOW) * chunk, (int)piece_bytes(bytes, chunk, i + DIRECT_WINDOW),
                 MPI_BYTE, peer, tag, &r[k], what);
  }
  return rc;
}

/*
** The pieces of a receive through two host staging buffers into device
** memory: piece i is copied in while piece i + 1 arrives (header NULL:
** one piece alone). On failure the staging and the header stay with MPI.
*/
static int recv_staged(struct strata_cluster *c, int peer, int tag, strata_queue_t q, strata_mem_t mem, size_t bytes,
                       size_t chunk, uint64_t *header, const char *what) {
  struct strata__staging st[2];
  memset(st, 0, sizeof st);
  int dev = strata_queue_device(q);
  int rc = 0;
  if (bytes) {
    rc = staging_take(c, dev, chunk, &st[0]);
    if (!rc)
      rc = staging_take(c, dev, chunk, &st[1]);
    if (rc) {
      staging_give(c, dev, &st[0]);
      return rc;
    }
  }
  MPI_Request r[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  MPI_Message m = MPI_MESSAGE_NULL;
  size_t nchunks = bytes ? (bytes + chunk - 1) / chunk : 0;
  rc = take_first(c, peer, tag, bytes, chunk, header, &m, what);
  for (size_t i = 0; !rc && i < 2 && i < nchunks; i++)
    rc = recv_piece(c, peer, tag, st[i].p, piece_bytes(bytes, chunk, i), &m, &r[i], what);
  for (size_t i = 0; !rc && i < nchunks; i++) {
    int b = (int)(i & 1);
    size_t n = piece_bytes(bytes, chunk, i);
    MPI_Status s;
    rc = wait_requests(c, &r[b], &peer, 1, &s, what);
    if (!rc)
      rc = check_piece(c, &s, i, n, peer, what);
    if (!rc)
      rc = strata_buffer_upload(q, mem.buf, mem.off * 4 + i * chunk, st[b].p, n);   /* the next piece arrives meanwhile */
    if (!rc && i + 2 < nchunks)
      rc = irecv(c, c->p2p, st[b].p, (int)piece_bytes(bytes, chunk, i + 2), MPI_BYTE, peer, tag, &r[b], what);
  }
  if (rc)
    return rc;
  staging_give(c, dev, &st[0]);
  staging_give(c, dev, &st[1]);
  return 0;
}
#endif /* STRATA_HAVE_MPI */

STRATA_API int strata_cluster_recv(strata_cluster_t c, int peer, int tag, strata_queue_t q, strata_mem_t mem,
                                   size_t bytes) {
  size_t boff = 0;
  TRY(check_p2p(c, "strata_cluster_recv", peer, tag, q, mem, bytes, &boff));
#ifdef STRATA_HAVE_MPI
  char what[160];
  p2p_what(what, "receive of ", bytes, " bytes from rank ", peer, tag);
  size_t chunk = 0;
  TRY(p2p_chunk(c, bytes, &chunk));
  /* On the heap: after a failure MPI may still write it (the cluster is broken then, and it stays). */
  uint64_t *header = NULL;
  if (!p2p_alone(bytes, chunk) && !(header = calloc(P2P_HEADER_WORDS, sizeof *header)))
    return strata__error(STRATA_ERR_NOMEM, "%s: out of host memory", what);
  char *direct = bytes ? host_address(mem) : NULL;
  int rc = 0;
  if (direct) {
    rc = strata_queue_finish(q);   /* the queue's earlier work is done with the buffer's old contents */
    if (!rc)
      rc = recv_direct(c, peer, tag, direct, bytes, chunk, header, what);
  } else {
    rc = recv_staged(c, peer, tag, q, mem, bytes, chunk, header, what);
  }
  if (rc)
    return transfer_failed(c, rc, what);   /* the header and the memory stay: MPI may still write into them */
  free(header);
  return 0;
#else
  return strata__error(STRATA_ERR_INTERNAL, "strata_cluster_recv: no other rank without MPI");
#endif
}

/* ------------------------------------------------ hierarchical groups */

#ifdef STRATA_HAVE_MPI
static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
  const unsigned char *s = p;
  for (size_t i = 0; i < n; i++) {
    h ^= s[i];
    h *= 1099511628211ull;
  }
  return h;
}
#endif

/* ------------------------------------------------ one library communicator across ranks */

/* Every rank's `bytes` bytes into `all` (rank order); a cluster of one copies its own. */
static int gather_all(struct strata_cluster *c, const void *mine, size_t bytes, void *all, const char *what) {
#ifdef STRATA_HAVE_MPI
  if (c->mpi && c->size > 1)
    return allgather_bytes(c, mine, bytes, all, what);
#endif
  (void)what;
  memcpy(all, mine, bytes);
  return STRATA_OK;
}

/* `bytes` at p from rank `root` to every rank; nothing to do in a cluster of one. */
static int bcast_all(struct strata_cluster *c, int root, void *p, size_t bytes, const char *what) {
#ifdef STRATA_HAVE_MPI
  if (c->mpi && c->size > 1)
    return bcast_bytes(c, root, p, bytes, what);
#endif
  (void)c;
  (void)root;
  (void)p;
  (void)bytes;
  (void)what;
  return STRATA_OK;
}

/* What each rank tells the others while a group picks its path. Sent as
** bytes, like rank_rec: every rank runs the same build. */
struct path_rec {
  int32_t wish;                 /* the enum strata_comm_algorithm this rank was asked for */
  int32_t status;               /* 0: its members can join (or it has none); else why not */
  char why[240];
};

/* The one backend of this rank's members, when it has communicators across
** ranks and its library loads: 0 and *slot (NULL without members), or
** STRATA_ERR_UNSUPPORTED and why not. */
static int local_ready(const struct strata_cluster_comm *cc, const struct strata__slot **slot, char *why,
                       size_t len) {
  const struct strata__slot *s = NULL;
  *slot = NULL;
  for (int i = 0; i < cc->nlocal; i++) {
    const struct strata__device *d = strata__device_get(cc->local_devices[i]);
    int g = cc->local_members[i];
    if (!d->slot->be->comm_new_rank || !d->slot->be->comm_unique_id) {
      snprintf(why, len, "member %d (device %d) is on the %s backend, which has no communicator across ranks", g,
               cc->devices[g], d->slot->name);
      return STRATA_ERR_UNSUPPORTED;
    }
    if (s && d->slot != s) {
      snprintf(why, len, "members %d and %d are on two backends (%s, %s)", cc->local_members[0], g, s->name,
               d->slot->name);
      return STRATA_ERR_UNSUPPORTED;
    }
    s = d->slot;
  }
  if (s && s->be->comm_probe) {
    char w[200] = "";
    int rc = s->be->comm_probe(s->ctx, w, sizeof w);
    if (rc) {
      snprintf(why, len, "%s: %s", s->name, w);
      return STRATA_ERR_UNSUPPORTED;
    }
  }
  *slot = s;
  return STRATA_OK;
}

/* Two members on one GPU (one node, one PCI bus id, two ranks): NCCL takes
** a GPU once in a communicator. 1 and why, or 0. The same on every rank. */
static int shared_gpu(const struct strata_cluster_comm *cc, char *why, size_t len) {
  const struct strata_cluster *c = cc->c;
  for (int a = 0; a < cc->n; a++) {
    const struct strata_topology_device *da = &c->devs[cc->devices[a]];
    if (!da->pci_bus_id[0])
      continue;
    for (int b = a + 1; b < cc->n; b++) {
      const struct strata_topology_device *db = &c->devs[cc->devices[b]];
      int ra = cc->rank_of[a], rb = cc->rank_of[b];
      if (ra != rb && strcmp(da->pci_bus_id, db->pci_bus_id) == 0 &&
          strcmp(c->ranks[ra].real_node, c->ranks[rb].real_node) == 0) {
        snprintf(why, len, "members %d (rank %d) and %d (rank %d) are one GPU (%s on %s), which NCCL takes once", a,
                 ra, b, rb, da->pci_bus_id, c->ranks[ra].real_node);
        return 1;
      }
    }
  }
  return 0;
}

/*
** The library communicator: member 0's rank makes its id, every rank gets
** it, and every rank's members join (each call returns once all have).
** Agreed: when any rank failed, every rank frees its part, and *why (with
** *status) says which rank and why. `all` holds a record per rank and
** `devs` one int per local member (the caller's, allocated before any
** rank waits for another). Returns only failures of MPI itself.
*/
static int join_library(struct strata_cluster_comm *cc, const struct strata__slot *s, struct path_rec *all, int *devs,
                        char *why, size_t len, int *status) {
  struct strata_cluster *c = cc->c;
  struct {
    int32_t status;
    char why[240];
    unsigned char id[STRATA__COMM_ID_BYTES];
  } idm;
  memset(&idm, 0, sizeof idm);
  int root = cc->rank_of[0];
  if (c->rank == root) { /* it holds member 0, so s is its members' backend */
    idm.status = s->be->comm_unique_id(s->ctx, idm.id, sizeof idm.id);
    if (idm.status)
      strata__strlcpy(idm.why, strata_last_error(), sizeof idm.why);
  }
  TRY(bcast_all(c, root, &idm, sizeof idm, "strata_cluster_comm_new (the NCCL id)"));
  if (idm.status) {
    snprintf(why, len, "rank %d could not make the communicator's id: %s", root, idm.why);
    *status = idm.status;
    return STRATA_OK;
  }
  struct path_rec mine;
  memset(&mine, 0, sizeof mine);
  if (cc->nlocal) {
    for (int i = 0; i < cc->nlocal; i++)
      devs[i] = strata__device_get(cc->local_devices[i])->local;
    mine.status = s->be->comm_new_rank(s->ctx, idm.id, cc->n, cc->nlocal, cc->local_members, devs, &cc->bcomm);
    if (mine.status) {
      cc->bcomm = NULL;
      strata__strlcpy(mine.why, strata_last_error(), sizeof mine.why);
    }
  }
  int rc = gather_all(c, &mine, sizeof mine, all, "strata_cluster_comm_new (joining NCCL)");
  for (int r = 0; r < c->size && !rc; r++)
    if (all[r].status) {
      snprintf(why, len, "rank %d could not join the communicator: %s", r, all[r].why);
      *status = all[r].status;
      break;
    }
  if (rc || why[0]) {
    if (cc->bcomm)
      s->be->comm_free(s->ctx, cc->bcomm);
    cc->bcomm = NULL;
    return rc;
  }
  cc->bslot = s;
  cc->nccl = 1;
  return STRATA_OK;
}

/*
** Agree with every rank (collective over the world, as
** strata_cluster_comm_new) on how the group's collectives run: one library
** communicator (NCCL) over all its members when every rank's members are
** on a backend that has one across ranks, its library loads there, no two
** members are one GPU and no rank was asked for the ring or direct
** algorithm; otherwise hierarchical. Every rank takes the same path and
** writes the same line into cc->path (and the log). When some rank was
** asked for NCCL (`wish`, from opts and STRATA_COMM_ALGORITHM) and it
** cannot be had, every rank fails with the same reason.
*/
static int choose_path(struct strata_cluster_comm *cc, int id, int wish) {
  struct strata_cluster *c = cc->c;
  struct path_rec mine, *all = calloc((size_t)c->size, sizeof *all);
  int *devs = calloc((size_t)(cc->nlocal ? cc->nlocal : 1), sizeof *devs);
  if (!all || !devs) {
    free(all);
    free(devs);
    return strata__error(STRATA_ERR_NOMEM, "strata_cluster_comm_new: out of host memory");
  }
  memset(&mine, 0, sizeof mine);
  mine.wish = wish;
  const struct strata__slot *s = NULL;
  mine.status = local_ready(cc, &s, mine.why, sizeof mine.why);
  int rc = gather_all(c, &mine, sizeof mine, all, "strata_cluster_comm_new (choosing the path)");
  int forced = 0, declined = -1, unready = -1;
  for (int r = 0; r < c->size && !rc; r++) {
    forced |= all[r].wish == STRATA_COMM_NCCL;
    if (declined < 0 && (all[r].wish == STRATA_COMM_RING || all[r].wish == STRATA_COMM_DIRECT))
      declined = r;
    if (unready < 0 && all[r].status)
      unready = r;
  }
  char why[300] = "";
  int status = STRATA_ERR_UNSUPPORTED;
  if (!rc && declined >= 0)
    snprintf(why, sizeof why, "rank %d was asked for the %s algorithm", declined,
             strata_comm_algorithm_name(all[declined].wish));
  else if (!rc && unready >= 0)
    snprintf(why, sizeof why, "rank %d: %s", unready, all[unready].why);
  else if (!rc && !shared_gpu(cc, why, sizeof why))
    rc = join_library(cc, s, all, devs, why, sizeof why, &status);
  free(all);
  free(devs);
  if (rc)
    return rc;
  if (cc->nccl)
    snprintf(cc->path, sizeof cc->path,
             "nccl: one NCCL communicator over the %d members on %d ranks (its id from rank %d)", cc->n, cc->nranks,
             cc->rank_of[0]);
  else
    snprintf(cc->path, sizeof cc->path, "hierarchical: inside each rank its local communicator, MPI between ranks; "
             "not NCCL: %s", why);
  if (!cc->nccl && forced)
    return strata__error(status, "strata_cluster_comm_new: NCCL across ranks was asked for and cannot be had: %s",
                         why);
  strata__log(STRATA_LOG_INFO, "comm", "cluster group #%d (%d members on %d ranks): %s", id, cc->n, cc->nranks,
              cc->path);
  return STRATA_OK;
}

STRATA_API int strata_cluster_comm_new(strata_cluster_t c, const int *devices, int count,
                                       const struct strata_comm_options *opts, strata_cluster_comm_t *out) {
  if (!c || !devices || !out)
    return strata__error(STRATA_ERR_INVALID, "strata_cluster_comm_new: NULL argument");
  *out = NULL;
  TRY(check_broken(c));
  int wish = STRATA_COMM_AUTO;
  TRY(strata__comm_algorithm(opts, &wish));
  int ndev = c->first_dev[c->size];
  if (count < 1 || count > 4096)
    return strata__error(STRATA_ERR_RANGE, "strata_cluster_comm_new: %d members (1 .. 4096)", count);
  for (int i = 0; i < count; i++) {
    if (devices[i] < 0 || devices[i] >= ndev)
      return strata__error(STRATA_ERR_RANGE, "strata_cluster_comm_new: member %d is device %d, not one of the %d",
                           i, devices[i], ndev);
    for (int j = 0; j < i; j++)
      if (devices[j] == devices[i])
        return strata__error(STRATA_ERR_INVALID, "strata_cluster_comm_new: device %d listed twice", devices[i]);
  }
  int id = c->comm_ids++;
#ifdef STRATA_HAVE_MPI
  if (c->size > 1) {
    /* Every rank must have been given the same list. */
    uint64_t h = fnv1a(1469598103934665603ull, &count, sizeof count);
    h = fnv1a(h, devices, sizeof *devices * (size_t)count);
    h = fnv1a(h, &id, sizeof id);
    uint64_t *all = calloc((size_t)c->size, sizeof *all);
    if (!all)
      return strata__error(STRATA_ERR_NOMEM, "strata_cluster_comm_new: out of host memory");
    int rc = allgather_bytes(c, &h, sizeof h, all, "strata_cluster_comm_new");
    if (rc)
      return rc;
    for (int r = 0; r < c->size; r++)
      if (all[r] != h) {
        free(all);
        return strata__error(STRATA_ERR_INVALID,
                             "strata_cluster_comm_new: rank %d was given another device list (or group) than rank %d",
                             r, c->rank);
      }
    free(all);
  }
#endif
  struct strata_cluster_comm *cc = calloc(1, sizeof *cc);
  if (!cc)
    return strata__error(STRATA_ERR_NOMEM, "strata_cluster_comm_new: out of host memory");
  cc->c = c;
  cc->n = count;
  cc->tag = 1 + id % CLUSTER_TAG_MAX;
  cc->me = -1;
  cc->devices = calloc((size_t)count, sizeof *cc->devices);
  cc->rank_of = calloc((size_t)count, sizeof *cc->rank_of);
  cc->local_members = calloc((size_t)count, sizeof *cc->local_members);
  cc->local_devices = calloc((size_t)count, sizeof *cc->local_devices);
  cc->ranks = calloc((size_t)c->size, sizeof *cc->ranks);
  if (!cc->devices || !cc->rank_of || !cc->local_members || !cc->local_devices || !cc->ranks) {
    strata_cluster_comm_free(cc);
    return strata__error(STRATA_ERR_NOMEM, "strata_cluster_comm_new: out of host memory");
  }
  for (int i = 0; i < count; i++) {
    cc->devices[i] = devices[i];
    cc->rank_of[i] = rank_of_device(c, devices[i]);
    if (cc->rank_of[i] == c->rank) {
      cc->local_devices[cc->nlocal] = devices[i] - c->first_dev[c->rank];
      cc->local_members[cc->nlocal++] = i;
    }
  }
  for (int r = 0; r < c->size; r++)
    for (int i = 0; i < count; i++)
      if (cc->rank_of[i] == r) {
        if (r == c->rank)
          cc->me = cc->nranks;
        cc->ranks[cc->nranks++] = r;
        break;
      }
  int rc = choose_path(cc, id, wish);
  if (rc) {
    strata_cluster_comm_free(cc);
    return rc;
  }
  if (cc->nlocal && !cc->nccl) {
    rc = strata_comm_new(cc->local_devices, cc->nlocal, opts, &cc->local);
    if (rc) {
      strata_cluster_comm_free(cc);
      return strata__error_prefix(rc, "strata_cluster_comm_new (rank %d's members): ", c->rank);
    }
  }
  *out = cc;
  return STRATA_OK;
}

STRATA_API void strata_cluster_comm_free(strata_cluster_comm_t cc) {
  if (!cc)
    return;
  strata_comm_free(cc->local);
  if (cc->bcomm)
    cc->bslot->be->comm_free(cc->bslot->ctx, cc->bcomm);
  free(cc->devices);
  free(cc->rank_of);
  free(cc->local_members);
  free(cc->local_devices);
  free(cc->ranks);
  free(cc);
}

STRATA_API int strata_cluster_comm_local(strata_cluster_comm_t cc, int *count, int *members) {
  if (!cc || !count)
    return strata__error(STRATA_ERR_INVALID, "strata_cluster_comm_local: NULL argument");
  *count = cc->nlocal;
  if (members)
    memcpy(members, cc->local_members, sizeof *members * (size_t)cc->nlocal);
  return STRATA_OK;
}

STRATA_API int strata_cluster_comm_info(strata_cluster_comm_t cc, struct strata_cluster_comm_info *info) {
  if (!cc || !info)
    return strata__error(STRATA_ERR_INVALID, "strata_cluster_comm_info: NULL argument");
  memset(info, 0, sizeof *info);
  info->size = cc->n;
  info->ranks = cc->nranks;
  info->local = cc->nlocal;
  info->nccl = cc->nccl;
  info->path = cc->path;
  return STRATA_OK;
}

static int check_coll(struct strata_cluster_comm *cc, const char *fn, const strata_queue_t *queues,
                      const strata_mem_t *send, const strata_mem_t *recv, int dtype, int op) {
  if (!cc)
    return strata__error(STRATA_ERR_INVALID, "%s: NULL group", fn);
  if (cc->nlocal && (!queues || !send || !recv))
    return strata__error(STRATA_ERR_INVALID, "%s: NULL array", fn);
  if (dtype != STRATA_FLOAT32 && dtype != STRATA_INT32)
    return strata__error(STRATA_ERR_INVALID, "%s: unknown element type %d", fn, dtype);
  if (op != STRATA_SUM && op != STRATA_AVG && op != STRATA_MAX)
    return strata__error(STRATA_ERR_INVALID, "%s: unknown reduction %d", fn, op);
  if (op == STRATA_AVG && dtype != STRATA_FLOAT32)
    return strata__error(STRATA_ERR_INVALID, "%s: avg is for float32 only", fn);
  for (int i = 0; i < cc->nlocal; i++) {
    if (!queues[i] || strata_queue_device(queues[i]) != cc->local_devices[i])
      return strata__error(STRATA_ERR_DEVICE_MISMATCH, "%s: queue %d is not on local device %d (member %d)", fn, i,
                           cc->local_devices[i], cc->local_members[i]);
  }
  return check_broken(cc->c);
}

#ifdef STRATA_HAVE_MPI
/* y = op(a, x) over n elements, `a` this rank's part so far and `x` the part
** that arrived (y may be a); the order of the ranks' contributions is the caller's. */
static void reduce_into(void *y, const void *a, const void *x, size_t n, int dtype, int op) {
  if (dtype == STRATA_FLOAT32) {
    float *o = y;
    const float *p = a, *q = x;
    if (op == STRATA_MAX)
      for (size_t i = 0; i < n; i++)
        o[i] = q[i] > p[i] ? q[i] : p[i];
    else
      for (size_t i = 0; i < n; i++)
        o[i] = p[i] + q[i];
  } else {
    int32_t *o = y;
    const int32_t *p = a, *q = x;
    if (op == STRATA_MAX)
      for (size_t i = 0; i < n; i++)
        o[i] = q[i] > p[i] ? q[i] : p[i];
    else
      for (size_t i = 0; i < n; i++)
        o[i] = (int32_t)((uint32_t)p[i] + (uint32_t)q[i]);
  }
}
#endif

#ifdef STRATA_HAVE_MPI
/*
** All-reduce of `count` 4-byte elements of host memory `src` into `dst`
** (src may be dst) across the group's ranks (their leaders): a ring in
** ascending rank order, reduce-scatter then all-gather, over segments of
** count / nranks elements. Each segment is reduced once, in the ring's
** fixed order, and then copied everywhere: the result is the same bits on
** every rank and in every run. src is only read, and only during the
** reduce-scatter.
*/
static int ring_allreduce(struct strata_cluster_comm *cc, const void *src, void *dst, size_t count, int dtype, int op,
                          const char *what) {
  struct strata_cluster *c = cc->c;
  int P = cc->nranks, me = cc->me;
  int next = cc->ranks[(me + 1) % P], prev = cc->ranks[(me + P - 1) % P];
  MPI_Datatype t = dtype == STRATA_FLOAT32 ? MPI_FLOAT : MPI_INT32_T;
  size_t maxseg = count / (size_t)P + 1;
  if (maxseg > INT_MAX)
    return strata__error(STRATA_ERR_RANGE, "%s: %zu elements per rank segment is more than MPI counts", what, maxseg);
  struct strata__staging tmp;
  TRY(staging_take(c, cc->local_devices[0], maxseg * 4, &tmp));
  const char *in = src;
  char *base = dst;
#define SEG_LO(k) ((size_t)(k) * count / (size_t)P)
#define SEG_N(k) (SEG_LO((k) + 1) - SEG_LO(k))
  int peers[2] = {next, prev};
  int rc = 0;
  for (int s = 0; s < P - 1 && !rc; s++) {
    /* the first step sends this rank's own data, the later ones what the step before reduced; each
    ** step reduces this rank's own data of another segment with what arrived */
    const char *from = s == 0 ? in : base;
    int ks = ((me - s) % P + P) % P, kr = ((me - s - 1) % P + P) % P;
    MPI_Request r[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    rc = isend(c, c->coll, from + SEG_LO(ks) * 4, (int)SEG_N(ks), t, next, cc->tag, &r[0], what);
    if (!rc)
      rc = irecv(c, c->coll, tmp.p, (int)SEG_N(kr), t, prev, cc->tag, &r[1], what);
    if (!rc)
      rc = wait_requests(c, r, peers, 2, NULL, what);
    if (!rc)
      reduce_into(base + SEG_LO(kr) * 4, in + SEG_LO(kr) * 4, tmp.p, SEG_N(kr), dtype, op);
  }
  for (int s = 0; s < P - 1 && !rc; s++) {
    int ks = ((me + 1 - s) % P + P) % P, kr = ((me - s) % P + P) % P;
    MPI_Request r[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    rc = isend(c, c->coll, base + SEG_LO(ks) * 4, (int)SEG_N(ks), t, next, cc->tag, &r[0], what);
    if (!rc)
      rc = irecv(c, c->coll, base + SEG_LO(kr) * 4, (int)SEG_N(kr), t, prev, cc->tag, &r[1], what);
    if (!rc)
      rc = wait_requests(c, r, peers, 2, NULL, what);
  }
#undef SEG_LO
#undef SEG_N
  if (!rc || !c->broken)
    staging_give(c, cc->local_devices[0], &tmp);
  return rc;
}
#endif /* STRATA_HAVE_MPI */

/* AVG: the sum over the group's n members, divided in host memory. */
static void divide(void *h, size_t count, int n) {
  float *f = h;
  for (size_t i = 0; i < count; i++)
    f[i] /= (float)n;
}

/*
** The shared body of all-reduce and reduce-scatter: op over the group of
** `count` elements of each local member's `src` into host memory `h`
** (every rank with members gets the same bits). With several local
** members `dst` (one per member, count elements) receives the local
** reduction first; with one it is not touched.
*/
static int reduce_to_host(struct strata_cluster_comm *cc, const strata_queue_t *queues, const strata_mem_t *src,
                          const strata_mem_t *dst, size_t count, int dtype, int op, void *h, const char *what) {
  int lop = op == STRATA_AVG ? STRATA_SUM : op;
  if (cc->nlocal > 1) {
    TRY(strata_allreduce_sync(cc->local, queues, src, dst, count, dtype, lop));
    TRY(strata_buffer_download(queues[0], dst[0].buf, dst[0].off * 4, h, count * 4));
  } else {
    /* alone in its rank: the member's own data is the rank's part (dst is written by the caller) */
    TRY(strata_buffer_download(queues[0], src[0].buf, src[0].off * 4, h, count * 4));
  }
#ifdef STRATA_HAVE_MPI
  if (cc->nranks > 1)
    TRY(ring_allreduce(cc, h, h, count, dtype, lop, what));
#endif
  if (op == STRATA_AVG)
    divide(h, count, cc->n);
  return 0;
}

#ifdef STRATA_HAVE_MPI
/*
** All-reduce across ranks in place in the leader's device memory when that
** is host memory: the ring reads `send` (one local member) or the local
** reduction in `recv` (several) and writes `recv`, with no copy through
** staging. Returns 1 through *done when it ran (0: staged instead).
*/
static int allreduce_direct(struct strata_cluster_comm *cc, const strata_queue_t *queues, const strata_mem_t *send,
                            const strata_mem_t *recv, size_t count, int dtype, int op, int *done, const char *what) {
  *done = 0;
  char *rp = host_address(recv[0]), *sp = cc->nlocal == 1 ? host_address(send[0]) : rp;
  if (!rp || !sp)
    return 0;
  *done = 1;
  int lop = op == STRATA_AVG ? STRATA_SUM : op;
  if (cc->nlocal > 1)
    TRY(strata_allreduce_sync(cc->local, queues, send, recv, count, dtype, lop));
  TRY(strata_queue_finish(queues[0]));   /* the leader's earlier work (and the local reduction) is done */
  TRY(ring_allreduce(cc, sp, rp, count, dtype, lop, what));
  if (op == STRATA_AVG)
    divide(rp, count, cc->n);
  if (cc->nlocal > 1) {
    /* back inside the rank: the leader's result to the other members */
    TRY(strata_broadcast(cc->local, queues, recv, recv, count, dtype, 0));
    TRY(strata_comm_finish(cc->local));
  }
  return 0;
}
#endif /* STRATA_HAVE_MPI */

/* A collective over several ranks that failed on this rank leaves the others
** waiting: the cluster is broken (see transfer_failed). Returns rc. */
static int coll_failed(struct strata_cluster_comm *cc, int rc, const char *what) {
#ifdef STRATA_HAVE_MPI
  if (rc && cc->nranks > 1)
    return transfer_failed(cc->c, rc, what);
#endif
  return rc;
}

/* Member i's operand `arg` of a library collective: on its device, `elems` elements from its offset. */
static int check_operand(const struct strata_cluster_comm *cc, const char *fn, int i, const char *arg, strata_mem_t m,
                         size_t elems) {
  if (!m.buf)
    return strata__error(STRATA_ERR_INVALID, "%s: %s[%d] has no buffer", fn, arg, i);
  if (m.buf->dev->index != cc->local_devices[i])
    return strata__error(STRATA_ERR_DEVICE_MISMATCH, "%s: %s[%d] is on device %d, not local device %d (member %d)",
                         fn, arg, i, m.buf->dev->index, cc->local_devices[i], cc->local_members[i]);
  size_t have = m.buf->size / 4;
  if (m.off > have || elems > have - m.off)
    return strata__error(STRATA_ERR_RANGE, "%s: %s[%d] needs %zu elements from offset %zu but its buffer holds %zu",
                         fn, arg, i, elems, m.off, have);
  return STRATA_OK;
}

/*
** A collective through the group's library communicator (NCCL): every
** operand checked, the call enqueued on each local member's queue after
** its earlier work (one NCCL group), then those queues finished, so that
** it returns with this rank's results in recv as the hierarchical path
** does. Member indices are NCCL's ranks, so all-gather and reduce-scatter
** blocks and the broadcast root need no mapping.
*/
static int lib_coll(struct strata_cluster_comm *cc, const char *fn, int kind, const strata_queue_t *queues,
                    const strata_mem_t *send, const strata_mem_t *recv, size_t count, int dtype, int op, int root) {
  size_t n = (size_t)cc->n;
  if (count > SIZE_MAX / 4 / n)
    return strata__error(STRATA_ERR_RANGE, "%s: %zu elements per member is too many", fn, count);
  size_t sn = kind == STRATA__COLL_REDUCESCATTER ? count * n : count;
  size_t rn = kind == STRATA__COLL_ALLGATHER ? count * n : count;
  char what[200];
  snprintf(what, sizeof what, "%s of %zu %s over %d devices on %d ranks (NCCL)", fn + strlen("strata_cluster_"), count,
           strata_dtype_name(dtype), cc->n, cc->nranks);
  /* a bad operand here leaves the other ranks inside NCCL: the cluster is broken, as for any failure */
  int rc = STRATA_OK;
  for (int i = 0; i < cc->nlocal && !rc; i++) {
    if (kind != STRATA__COLL_BROADCAST || cc->local_members[i] == root)
      rc = check_operand(cc, fn, i, "send", send[i], sn);
    if (!rc)
      rc = check_operand(cc, fn, i, "recv", recv[i], rn);
  }
  if (rc)
    return coll_failed(cc, rc, what);
  void **qh = calloc((size_t)cc->nlocal, sizeof *qh);
  struct strata__mem *sm = calloc((size_t)cc->nlocal, sizeof *sm), *rm = calloc((size_t)cc->nlocal, sizeof *rm);
  rc = qh && sm && rm ? STRATA_OK : strata__error(STRATA_ERR_NOMEM, "%s: out of host memory", what);
  for (int i = 0; i < cc->nlocal && !rc; i++) {
    qh[i] = queues[i]->h;
    rm[i].h = recv[i].buf->h;
    rm[i].off = recv[i].off;
    if (kind != STRATA__COLL_BROADCAST || cc->local_members[i] == root) {
      sm[i].h = send[i].buf->h;
      sm[i].off = send[i].off;
    }
  }
  if (!rc)
    rc = cc->bslot->be->comm_coll(cc->bslot->ctx, cc->bcomm, kind, -1, qh, sm, rm, count, dtype, op, root);
  for (int i = 0; i < cc->nlocal && !rc; i++)
    rc = strata_queue_finish(queues[i]);
  free(qh);
  free(sm);
  free(rm);
  return coll_failed(cc, rc, what);
}

STRATA_API int strata_cluster_allreduce(strata_cluster_comm_t cc, const strata_queue_t *queues,
                                        const strata_mem_t *send, const strata_mem_t *recv, size_t count, int dtype,
                                        int op) {
  TRY(check_coll(cc, "strata_cluster_allreduce", queues, send, recv, dtype, op));
  if (!cc->nlocal || !count)
    return 0;
  if (cc->nccl)
    return lib_coll(cc, "strata_cluster_allreduce", STRATA__COLL_ALLREDUCE, queues, send, recv, count, dtype, op, 0);
  if (cc->nranks == 1)
    return strata_allreduce_sync(cc->local, queues, send, recv, count, dtype, op);
  char what[200];
  snprintf(what, sizeof what, "allreduce of %zu %s over %d devices on %d ranks", count, strata_dtype_name(dtype),
           cc->n, cc->nranks);
#ifdef STRATA_HAVE_MPI
  int done = 0;
  int drc = allreduce_direct(cc, queues, send, recv, count, dtype, op, &done, what);
  if (done)
    return coll_failed(cc, drc, what);
#endif
  struct strata__staging h;
  memset(&h, 0, sizeof h);
  TRY(staging_take(cc->c, cc->local_devices[0], count * 4, &h));
  int rc = reduce_to_host(cc, queues, send, recv, count, dtype, op, h.p, what);
  if (!rc)
    rc = strata_buffer_upload(queues[0], recv[0].buf, recv[0].off * 4, h.p, count * 4);
  if (!rc && cc->nlocal > 1) {
    /* back inside the rank: the leader's result to the other members */
    rc = strata_broadcast(cc->local, queues, recv, recv, count, dtype, 0);
    if (!rc)
      rc = strata_comm_finish(cc->local);
  }
  rc = coll_failed(cc, rc, what);
  if (!rc || !cc->c->broken)
    staging_give(cc->c, cc->local_devices[0], &h);
  return rc;
}

STRATA_API int strata_cluster_reducescatter(strata_cluster_comm_t cc, const strata_queue_t *queues,
                                            const strata_mem_t *send, const strata_mem_t *recv, size_t count,
                                            int dtype, int op) {
  TRY(check_coll(cc, "strata_cluster_reducescatter", queues, send, recv, dtype, op));
  if (!cc->nlocal || !count)
    return 0;
  if (cc->nccl)
    return lib_coll(cc, "strata_cluster_reducescatter", STRATA__COLL_REDUCESCATTER, queues, send, recv, count, dtype,
                    op, 0);
  char what[200];
  snprintf(what, sizeof what, "reducescatter of %zu %s over %d devices on %d ranks", count, strata_dtype_name(dtype),
           cc->n, cc->nranks);
  size_t total = count * (size_t)cc->n;
  strata_buffer_t *tmp = calloc((size_t)cc->nlocal, sizeof *tmp);
  strata_mem_t *tm = calloc((size_t)cc->nlocal, sizeof *tm);
  struct strata__staging h;
  memset(&h, 0, sizeof h);
  int rc = tmp && tm ? 0 : strata__error(STRATA_ERR_NOMEM, "%s: out of host memory", what);
  for (int i = 0; !rc && i < cc->nlocal; i++) {
    rc = strata_buffer_new(cc->local_devices[i], total * 4, &tmp[i]);
    if (!rc)
      tm[i] = strata_mem(tmp[i], 0);
  }
  if (!rc)
    rc = staging_take(cc->c, cc->local_devices[0], total * 4, &h);
  if (!rc)
    rc = reduce_to_host(cc, queues, send, tm, total, dtype, op, h.p, what);
  for (int i = 0; !rc && i < cc->nlocal; i++)
    rc = strata_buffer_upload(queues[i], recv[i].buf, recv[i].off * 4, (char *)h.p + (size_t)cc->local_members[i] *
                                                                                        count * 4, count * 4);
  rc = coll_failed(cc, rc, what);
  if (!rc || !cc->c->broken) {
    for (int i = 0; tmp && i < cc->nlocal; i++)
      strata_buffer_free(tmp[i]);
    staging_give(cc->c, cc->local_devices[0], &h);
  }
  free(tmp);
  free(tm);
  return rc;
}

STRATA_API int strata_cluster_allgather(strata_cluster_comm_t cc, const strata_queue_t *queues,
                                        const strata_mem_t *send, const strata_mem_t *recv, size_t count, int dtype) {
  TRY(check_coll(cc, "strata_cluster_allgather", queues, send, recv, dtype, STRATA_SUM));
  if (!cc->nlocal || !count)
    return 0;
  if (cc->nccl)
    return lib_coll(cc, "strata_cluster_allgather", STRATA__COLL_ALLGATHER, queues, send, recv, count, dtype,
                    STRATA_SUM, 0);
  char what[200];
  snprintf(what, sizeof what, "allgather of %zu %s over %d devices on %d ranks", count, strata_dtype_name(dtype),
           cc->n, cc->nranks);
  size_t block = count * 4;
  struct strata__staging h;
  memset(&h, 0, sizeof h);
  TRY(staging_take(cc->c, cc->local_devices[0], block * (size_t)cc->n, &h));
  char *base = h.p;
  int rc = 0;
  for (int i = 0; !rc && i < cc->nlocal; i++)
    rc = strata_buffer_download(queues[i], send[i].buf, send[i].off * 4, base + (size_t)cc->local_members[i] * block,
                                block);
#ifdef STRATA_HAVE_MPI
  if (!rc && cc->nranks > 1) {
    /* Every rank's blocks to every other rank, in member order (messages of one pair and tag keep their order). */
    struct strata_cluster *c = cc->c;
    size_t nreq = (size_t)cc->n * 2;
    MPI_Request *r = calloc(nreq, sizeof *r);
    int *peers = calloc(nreq, sizeof *peers);
    size_t k = 0;
    MPI_Datatype t = dtype == STRATA_FLOAT32 ? MPI_FLOAT : MPI_INT32_T;
    if (!r || !peers || count > INT_MAX)
      rc = strata__error(r && peers ? STRATA_ERR_RANGE : STRATA_ERR_NOMEM, "%s: cannot post the messages", what);
    for (int q = 0; !rc && q < cc->nranks; q++) {
      int peer = cc->ranks[q];
      if (peer == c->rank)
        continue;
      for (int g = 0; !rc && g < cc->n; g++) {
        if (cc->rank_of[g] == c->rank) {
          peers[k] = peer;
          rc = isend(c, c->coll, base + (size_t)g * block, (int)count, t, peer, cc->tag, &r[k++], what);
        } else if (cc->rank_of[g] == peer) {
          peers[k] = peer;
          rc = irecv(c, c->coll, base + (size_t)g * block, (int)count, t, peer, cc->tag, &r[k++], what);
        }
      }
    }
    if (!rc)
      rc = wait_requests(c, r, peers, (int)k, NULL, what);
    if (!rc || !c->broken) {
      free(r);
      free(peers);
    }
  }
#endif
  for (int i = 0; !rc && i < cc->nlocal; i++)
    rc = strata_buffer_upload(queues[i], recv[i].buf, recv[i].off * 4, base, block * (size_t)cc->n);
  rc = coll_failed(cc, rc, what);
  if (!rc || !cc->c->broken)
    staging_give(cc->c, cc->local_devices[0], &h);
  return rc;
}

STRATA_API int strata_cluster_broadcast(strata_cluster_comm_t cc, const strata_queue_t *queues,
                                        const strata_mem_t *send, const strata_mem_t *recv, size_t count, int dtype,
                                        int root) {
  TRY(check_coll(cc, "strata_cluster_broadcast", queues, send, recv, dtype, STRATA_SUM));
  if (root < 0 || root >= cc->n)
    return strata__error(STRATA_ERR_RANGE, "strata_cluster_broadcast: root %d out of range (%d members)", root, cc->n);
  if (!cc->nlocal || !count)
    return 0;
  if (cc->nccl)
    return lib_coll(cc, "strata_cluster_broadcast", STRATA__COLL_BROADCAST, queues, send, recv, count, dtype,
                    STRATA_SUM, root);
  char what[200];
  snprintf(what, sizeof what, "broadcast of %zu %s from member %d over %d devices on %d ranks", count,
           strata_dtype_name(dtype), root, cc->n, cc->nranks);
  struct strata_cluster *c = cc->c;
  int root_rank = cc->rank_of[root], li = -1;
  for (int i = 0; i < cc->nlocal; i++)
    if (cc->local_members[i] == root)
      li = i;
  struct strata__staging h;
  memset(&h, 0, sizeof h);
  TRY(staging_take(cc->c, cc->local_devices[0], count * 4, &h));
  int rc = 0;
  if (li >= 0)
    rc = strata_buffer_download(queues[li], send[li].buf, send[li].off * 4, h.p, count * 4);
#ifdef STRATA_HAVE_MPI
  if (!rc && cc->nranks > 1) {
    MPI_Datatype t = dtype == STRATA_FLOAT32 ? MPI_FLOAT : MPI_INT32_T;
    MPI_Request *r = calloc((size_t)cc->nranks, sizeof *r);
    int *peers = calloc((size_t)cc->nranks, sizeof *peers);
    int k = 0;
    if (!r || !peers || count > INT_MAX)
      rc = strata__error(r && peers ? STRATA_ERR_RANGE : STRATA_ERR_NOMEM, "%s: cannot post the messages", what);
    for (int q = 0; !rc && q < cc->nranks; q++) {
      int peer = cc->ranks[q];
      if (c->rank == root_rank && peer != c->rank) {
        peers[k] = peer;
        rc = isend(c, c->coll, h.p, (int)count, t, peer, cc->tag, &r[k++], what);
      } else if (c->rank != root_rank && peer == root_rank) {
        peers[k] = peer;
        rc = irecv(c, c->coll, h.p, (int)count, t, peer, cc->tag, &r[k++], what);
      }
    }
    if (!rc)
      rc = wait_requests(c, r, peers, k, NULL, what);
    if (!rc || !c->broken) {
      free(r);
      free(peers);
    }
  }
#else
  (void)root_rank;
  (void)c;
#endif
  for (int i = 0; !rc && i < cc->nlocal; i++)
    rc = strata_buffer_upload(queues[i], recv[i].buf, recv[i].off * 4, h.p, count * 4);
  rc = coll_failed(cc, rc, what);
  if (!rc || !c->broken)
    staging_give(cc->c, cc->local_devices[0], &h);
  return rc;
}

/* ------------------------------------------------------------ host exchanges for the trainer */

void strata__cluster_break(strata_cluster_t c, int status, const char *what) {
  if (!c)
    return;
  pthread_mutex_lock(&c->lock);
  if (!c->broken) {
    c->broken = 1;
    c->broken_status = status;
    strata__strlcpy(c->broken_msg, what ? what : "a local failure", sizeof c->broken_msg);
  }
  pthread_mutex_unlock(&c->lock);
}

int strata__cluster_allgather(strata_cluster_t c, const void *mine, size_t bytes, void *all) {
  if (!c || (bytes && (!mine || !all)))
    return strata__error(STRATA_ERR_INVALID, "strata__cluster_allgather: NULL argument");
  TRY(check_broken(c));
#ifdef STRATA_HAVE_MPI
  if (c->mpi && c->size > 1)
    return allgather_bytes(c, mine, bytes, all, "the trainer's exchange between ranks");
#endif
  if (bytes)
    memcpy(all, mine, bytes);
  return STRATA_OK;
}

int strata__cluster_broadcast(strata_cluster_t c, int root, void *p, size_t bytes) {
  if (!c || (bytes && !p))
    return strata__error(STRATA_ERR_INVALID, "strata__cluster_broadcast: NULL argument");
  TRY(check_broken(c));
#ifdef STRATA_HAVE_MPI
  if (c->mpi && c->size > 1) {
    if (root < 0 || root >= c->size || bytes > INT_MAX)
      return strata__error(STRATA_ERR_INVALID, "strata__cluster_broadcast: root %d of %d ranks, %zu bytes", root,
                           c->size, bytes);
    return bcast_bytes(c, root, p, bytes, "the trainer's broadcast between ranks");
  }
#endif
  return root == 0 ? STRATA_OK : strata__error(STRATA_ERR_INVALID, "strata__cluster_broadcast: root %d of 1 rank", root);
}
