/* SPDX-License-Identifier: MIT */
/* cluster.c — the MPI job: ranks joined into one device view, its queries, bounded waits that break it on a failure,
** abort, and the trainer's host exchanges between ranks. */
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
#include "comm/cluster.h"
#include "comm/mpi.h"

#define CLUSTER_DEFAULT_TIMEOUT 300.0
#define CLUSTER_DEFAULT_PINGPONG (4u << 20)
#define CLUSTER_DEFAULT_CHUNK (4u << 20)
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
int strata__breakdown(struct strata_cluster *c, int status, const char *fmt, ...) {
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

int strata__check_broken(struct strata_cluster *c) {
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
    if (strata__check_broken(c)) /* another thread of this process failed (strata__cluster_break): the job is ending */
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
      return strata__breakdown(c, STRATA_ERR_TIMEOUT, "%s: rank %d (pid %ld on %s) has exited; rank %d stops", what,
                               gone, (long)c->ranks[gone].pid, node_name_of(c, gone), c->rank);
  }
  if (now - last_progress >= c->timeout_s) {
    int p = -1;
    for (int i = 0; i < n && p < 0; i++)
      if ((!reqs || reqs[i] != MPI_REQUEST_NULL) && peers)
        p = peers[i];
    if (p >= 0)
      return strata__breakdown(c, STRATA_ERR_TIMEOUT, "%s: rank %d (%s) made no progress for %g s; rank %d stops", what,
                               p, node_name_of(c, p), c->timeout_s, c->rank);
    return strata__breakdown(c, STRATA_ERR_TIMEOUT, "%s: not every rank took part within %g s; rank %d stops", what,
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
int strata__wait_requests(struct strata_cluster *c, MPI_Request *reqs, const int *peers, int n, MPI_Status *statuses,
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
          return strata__breakdown(c, STRATA_ERR_SHAPE, "%s: rank %d sends more with that tag than rank %d expects",
                                   what, p, c->rank);
        return strata__breakdown(c, STRATA_ERR_BACKEND, "%s: rank %d: MPI failed talking to %s%d (%s): %s", what,
                                 c->rank, p >= 0 ? "rank " : "every rank, ", p, p >= 0 ? node_name_of(c, p) : "-",
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
  return strata__breakdown(c, STRATA_ERR_BACKEND, "%s: rank %d: %s", what, c->rank, mpi_error_text(rc, e, sizeof e));
}

/*
** Wait for the next message from `peer` with `tag` on the point-to-point
** communicator and take it out of MPI's matching (MPI_Improbe): *msg is
** its handle for MPI_Imrecv, *bytes its size. Bounded as strata__wait_requests.
** Receiving only what is known to fit matters: OpenMPI 4.1 copies a
** message larger than the receive (by shared memory) past its end.
*/
int strata__probe_message(struct strata_cluster *c, int peer, int tag, MPI_Message *msg, size_t *bytes,
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

/* Receive the message `m` matched by strata__probe_message into `p` (n bytes, its size). */
int strata__imrecv(struct strata_cluster *c, void *p, int n, MPI_Message *m, MPI_Request *r, const char *what) {
  pthread_mutex_lock(&c->lock);
  int rc = MPI_Imrecv(p, n, MPI_BYTE, m, r);
  pthread_mutex_unlock(&c->lock);
  return mpi_check(c, rc, what);
}

int strata__isend(struct strata_cluster *c, MPI_Comm comm, const void *p, int n, MPI_Datatype t, int peer, int tag,
                  MPI_Request *r, const char *what) {
  pthread_mutex_lock(&c->lock);
  int rc = MPI_Isend(p, n, t, peer, tag, comm, r);
  pthread_mutex_unlock(&c->lock);
  return mpi_check(c, rc, what);
}

int strata__irecv(struct strata_cluster *c, MPI_Comm comm, void *p, int n, MPI_Datatype t, int peer, int tag,
                  MPI_Request *r, const char *what) {
  pthread_mutex_lock(&c->lock);
  int rc = MPI_Irecv(p, n, t, peer, tag, comm, r);
  pthread_mutex_unlock(&c->lock);
  return mpi_check(c, rc, what);
}

/* Every rank's `bytes` bytes into out (size x bytes), on the control communicator. */
int strata__allgather_bytes(struct strata_cluster *c, const void *mine, size_t bytes, void *out, const char *what) {
  if (bytes > INT_MAX)
    return strata__error(STRATA_ERR_RANGE, "%s: %zu bytes per rank is more than MPI counts", what, bytes);
  MPI_Request r = MPI_REQUEST_NULL;
  pthread_mutex_lock(&c->lock);
  int rc = MPI_Iallgather(mine, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, c->ctl, &r);
  pthread_mutex_unlock(&c->lock);
  TRY(mpi_check(c, rc, what));
  return strata__wait_requests(c, &r, NULL, 1, NULL, what);
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
    rc = strata__wait_requests(c, &r, NULL, 1, NULL, what);
  if (!rc) {
    free(cnt);
    free(disp);
  }
  return rc;
}

int strata__bcast_bytes(struct strata_cluster *c, int root, void *p, size_t bytes, const char *what) {
  MPI_Request r = MPI_REQUEST_NULL;
  pthread_mutex_lock(&c->lock);
  int rc = MPI_Ibcast(p, (int)bytes, MPI_BYTE, root, c->ctl, &r);
  pthread_mutex_unlock(&c->lock);
  TRY(mpi_check(c, rc, what));
  return strata__wait_requests(c, &r, NULL, 1, NULL, what);
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
        rc = sending ? strata__isend(c, c->ctl, buf, (int)n, MPI_BYTE, peer, 1, &r, "start-up ping-pong")
                     : strata__irecv(c, c->ctl, buf, (int)n, MPI_BYTE, peer, 1, &r, "start-up ping-pong");
        if (!rc)
          rc = strata__wait_requests(c, &r, &peer, 1, NULL, "start-up ping-pong");
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
  TRY(strata__bcast_bytes(c, 0, res, sizeof res, "start-up ping-pong results"));
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
  TRY(strata__wait_requests(c, reqs, NULL, 3, NULL, "strata_cluster_init (duplicating MPI_COMM_WORLD)"));
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
      rc = strata__allgather_bytes(c, &me, sizeof me, c->ranks, "strata_cluster_init (gathering the ranks)");
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

int strata__rank_of_device(const struct strata_cluster *c, int dev) {
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
  int r = strata__rank_of_device(c, device);
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
  int ra = strata__rank_of_device(c, from), rb = strata__rank_of_device(c, to);
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
  TRY(strata__check_broken(c));
#ifdef STRATA_HAVE_MPI
  if (c->mpi && c->size > 1)
    return strata__allgather_bytes(c, mine, bytes, all, "the trainer's exchange between ranks");
#endif
  if (bytes)
    memcpy(all, mine, bytes);
  return STRATA_OK;
}

int strata__cluster_broadcast(strata_cluster_t c, int root, void *p, size_t bytes) {
  if (!c || (bytes && !p))
    return strata__error(STRATA_ERR_INVALID, "strata__cluster_broadcast: NULL argument");
  TRY(strata__check_broken(c));
#ifdef STRATA_HAVE_MPI
  if (c->mpi && c->size > 1) {
    if (root < 0 || root >= c->size || bytes > INT_MAX)
      return strata__error(STRATA_ERR_INVALID, "strata__cluster_broadcast: root %d of %d ranks, %zu bytes", root,
                           c->size, bytes);
    return strata__bcast_bytes(c, root, p, bytes, "the trainer's broadcast between ranks");
  }
#endif
  return root == 0 ? STRATA_OK : strata__error(STRATA_ERR_INVALID, "strata__cluster_broadcast: root %d of 1 rank", root);
}
