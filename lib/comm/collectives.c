/* SPDX-License-Identifier: MIT */
/* collectives.c — groups of devices across ranks and their collectives: one NCCL communicator when every rank can
** join it, else each rank's local communicator with MPI between ranks in a fixed order. */
#include "config.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/cluster.h>

#include "device/registry.h"
#include "core/bf16.h"
#include "core/core.h"
#include "comm/comm.h"
#include "comm/cluster.h"

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
    return strata__allgather_bytes(c, mine, bytes, all, what);
#endif
  (void)what;
  memcpy(all, mine, bytes);
  return STRATA_OK;
}

/* `bytes` at p from rank `root` to every rank; nothing to do in a cluster of one. */
static int bcast_all(struct strata_cluster *c, int root, void *p, size_t bytes, const char *what) {
#ifdef STRATA_HAVE_MPI
  if (c->mpi && c->size > 1)
    return strata__bcast_bytes(c, root, p, bytes, what);
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
  TRY(strata__check_broken(c));
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
    int rc = strata__allgather_bytes(c, &h, sizeof h, all, "strata_cluster_comm_new");
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
    cc->rank_of[i] = strata__rank_of_device(c, devices[i]);
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
  if (dtype != STRATA_FLOAT32 && dtype != STRATA_INT32 && dtype != STRATA_BFLOAT16)
    return strata__error(STRATA_ERR_INVALID, "%s: unknown element type %d", fn, dtype);
  if (op != STRATA_SUM && op != STRATA_AVG && op != STRATA_MAX)
    return strata__error(STRATA_ERR_INVALID, "%s: unknown reduction %d", fn, op);
  if (op == STRATA_AVG && dtype == STRATA_INT32)
    return strata__error(STRATA_ERR_INVALID, "%s: avg is for float32 and bfloat16 only", fn);
  size_t es = strata_dtype_size(dtype);
  for (int i = 0; i < cc->nlocal; i++) {
    if (!queues[i] || strata_queue_device(queues[i]) != cc->local_devices[i])
      return strata__error(STRATA_ERR_DEVICE_MISMATCH, "%s: queue %d is not on local device %d (member %d)", fn, i,
                           cc->local_devices[i], cc->local_members[i]);
    /* offsets count elements of the operand's type: it must be the collective's (or another of 4 bytes) */
    for (int k = 0; k < 2; k++) {
      strata_mem_t m = k ? recv[i] : send[i];
      if (m.buf && m.dtype != dtype && strata_dtype_size(m.dtype) != es)
        return strata__error(STRATA_ERR_INVALID, "%s: %s[%d] is %s but the collective moves %s", fn,
                             k ? "recv" : "send", i, strata_dtype_name(m.dtype), strata_dtype_name(dtype));
    }
  }
  return strata__check_broken(cc->c);
}

#ifdef STRATA_HAVE_MPI
/* The MPI type that carries `dtype` (bfloat16 as 16-bit words: MPI only moves it, strata reduces). */
static MPI_Datatype mpi_type(int dtype) {
  return dtype == STRATA_FLOAT32 ? MPI_FLOAT : dtype == STRATA_INT32 ? MPI_INT32_T : MPI_UINT16_T;
}

/* y = op(a, x) over n elements, `a` this rank's part so far and `x` the part
** that arrived (y may be a); the order of the ranks' contributions is the
** caller's. bfloat16 as the devices' REDUCE: a float32 sum (or fmax) rounded once. */
static void reduce_into(void *y, const void *a, const void *x, size_t n, int dtype, int op) {
  if (dtype == STRATA_BFLOAT16) {
    uint16_t *o = y;
    const uint16_t *p = a, *q = x;
    if (op == STRATA_MAX)
      for (size_t i = 0; i < n; i++)
        o[i] = strata__bf16_round(fmaxf(strata__bf16_widen(p[i]), strata__bf16_widen(q[i])), 0);
    else
      for (size_t i = 0; i < n; i++)
        o[i] = strata__bf16_round(strata__bf16_widen(p[i]) + strata__bf16_widen(q[i]), 0);
  } else if (dtype == STRATA_FLOAT32) {
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
** All-reduce of `count` elements of `dtype` in host memory `src` into `dst`
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
  MPI_Datatype t = mpi_type(dtype);
  size_t es = strata_dtype_size(dtype);
  size_t maxseg = count / (size_t)P + 1;
  if (maxseg > INT_MAX)
    return strata__error(STRATA_ERR_RANGE, "%s: %zu elements per rank segment is more than MPI counts", what, maxseg);
  struct strata__staging tmp;
  TRY(strata__staging_take(c, cc->local_devices[0], maxseg * es, &tmp));
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
    rc = strata__isend(c, c->coll, from + SEG_LO(ks) * es, (int)SEG_N(ks), t, next, cc->tag, &r[0], what);
    if (!rc)
      rc = strata__irecv(c, c->coll, tmp.p, (int)SEG_N(kr), t, prev, cc->tag, &r[1], what);
    if (!rc)
      rc = strata__wait_requests(c, r, peers, 2, NULL, what);
    if (!rc)
      reduce_into(base + SEG_LO(kr) * es, in + SEG_LO(kr) * es, tmp.p, SEG_N(kr), dtype, op);
  }
  for (int s = 0; s < P - 1 && !rc; s++) {
    int ks = ((me + 1 - s) % P + P) % P, kr = ((me - s) % P + P) % P;
    MPI_Request r[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    rc = strata__isend(c, c->coll, base + SEG_LO(ks) * es, (int)SEG_N(ks), t, next, cc->tag, &r[0], what);
    if (!rc)
      rc = strata__irecv(c, c->coll, base + SEG_LO(kr) * es, (int)SEG_N(kr), t, prev, cc->tag, &r[1], what);
    if (!rc)
      rc = strata__wait_requests(c, r, peers, 2, NULL, what);
  }
#undef SEG_LO
#undef SEG_N
  if (!rc || !c->broken)
    strata__staging_give(c, cc->local_devices[0], &tmp);
  return rc;
}
#endif /* STRATA_HAVE_MPI */

/* AVG: the sum over the group's n members, divided in host memory. bfloat16
** as the local communicators' average: times 1/n in float32, rounded once more. */
static void divide(void *h, size_t count, int dtype, int n) {
  if (dtype == STRATA_BFLOAT16) {
    uint16_t *b = h;
    float inv = 1.0f / (float)n;
    for (size_t i = 0; i < count; i++)
      b[i] = strata__bf16_round(strata__bf16_widen(b[i]) * inv, 0);
    return;
  }
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
  size_t es = strata_dtype_size(dtype);
  if (cc->nlocal > 1) {
    TRY(strata_allreduce_sync(cc->local, queues, src, dst, count, dtype, lop));
    TRY(strata_buffer_download(queues[0], dst[0].buf, dst[0].off * es, h, count * es));
  } else {
    /* alone in its rank: the member's own data is the rank's part (dst is written by the caller) */
    TRY(strata_buffer_download(queues[0], src[0].buf, src[0].off * es, h, count * es));
  }
#ifdef STRATA_HAVE_MPI
  if (cc->nranks > 1)
    TRY(ring_allreduce(cc, h, h, count, dtype, lop, what));
#endif
  if (op == STRATA_AVG)
    divide(h, count, dtype, cc->n);
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
  char *rp = strata__host_address(recv[0]), *sp = cc->nlocal == 1 ? strata__host_address(send[0]) : rp;
  if (!rp || !sp)
    return 0;
  *done = 1;
  int lop = op == STRATA_AVG ? STRATA_SUM : op;
  if (cc->nlocal > 1)
    TRY(strata_allreduce_sync(cc->local, queues, send, recv, count, dtype, lop));
  TRY(strata_queue_finish(queues[0]));   /* the leader's earlier work (and the local reduction) is done */
  TRY(ring_allreduce(cc, sp, rp, count, dtype, lop, what));
  if (op == STRATA_AVG)
    divide(rp, count, dtype, cc->n);
  if (cc->nlocal > 1) {
    /* back inside the rank: the leader's result to the other members */
    TRY(strata_broadcast(cc->local, queues, recv, recv, count, dtype, 0));
    TRY(strata_comm_finish(cc->local));
  }
  return 0;
}
#endif /* STRATA_HAVE_MPI */

/* A collective over several ranks that failed on this rank leaves the others
** waiting: the cluster is broken (see strata__transfer_failed). Returns rc. */
static int coll_failed(struct strata_cluster_comm *cc, int rc, const char *what) {
#ifdef STRATA_HAVE_MPI
  if (rc && cc->nranks > 1)
    return strata__transfer_failed(cc->c, rc, what);
#endif
  return rc;
}

/* Member i's operand `arg` of a library collective: on its device, `elems` elements of `dtype` from its offset. */
static int check_operand(const struct strata_cluster_comm *cc, const char *fn, int i, const char *arg, strata_mem_t m,
                         int dtype, size_t elems) {
  if (!m.buf)
    return strata__error(STRATA_ERR_INVALID, "%s: %s[%d] has no buffer", fn, arg, i);
  if (m.buf->dev->index != cc->local_devices[i])
    return strata__error(STRATA_ERR_DEVICE_MISMATCH, "%s: %s[%d] is on device %d, not local device %d (member %d)",
                         fn, arg, i, m.buf->dev->index, cc->local_devices[i], cc->local_members[i]);
  size_t es = strata_dtype_size(dtype);
  if (m.dtype != dtype && strata_dtype_size(m.dtype) != es)
    return strata__error(STRATA_ERR_INVALID, "%s: %s[%d] is %s but the collective moves %s", fn, arg, i,
                         strata_dtype_name(m.dtype), strata_dtype_name(dtype));
  size_t have = m.buf->size / es;
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
  if (count > SIZE_MAX / strata_dtype_size(dtype) / n)
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
      rc = check_operand(cc, fn, i, "send", send[i], dtype, sn);
    if (!rc)
      rc = check_operand(cc, fn, i, "recv", recv[i], dtype, rn);
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
  size_t es = strata_dtype_size(dtype);
  struct strata__staging h;
  memset(&h, 0, sizeof h);
  TRY(strata__staging_take(cc->c, cc->local_devices[0], count * es, &h));
  int rc = reduce_to_host(cc, queues, send, recv, count, dtype, op, h.p, what);
  if (!rc)
    rc = strata_buffer_upload(queues[0], recv[0].buf, recv[0].off * es, h.p, count * es);
  if (!rc && cc->nlocal > 1) {
    /* back inside the rank: the leader's result to the other members */
    rc = strata_broadcast(cc->local, queues, recv, recv, count, dtype, 0);
    if (!rc)
      rc = strata_comm_finish(cc->local);
  }
  rc = coll_failed(cc, rc, what);
  if (!rc || !cc->c->broken)
    strata__staging_give(cc->c, cc->local_devices[0], &h);
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
  size_t total = count * (size_t)cc->n, es = strata_dtype_size(dtype);
  strata_buffer_t *tmp = calloc((size_t)cc->nlocal, sizeof *tmp);
  strata_mem_t *tm = calloc((size_t)cc->nlocal, sizeof *tm);
  struct strata__staging h;
  memset(&h, 0, sizeof h);
  int rc = tmp && tm ? 0 : strata__error(STRATA_ERR_NOMEM, "%s: out of host memory", what);
  for (int i = 0; !rc && i < cc->nlocal; i++) {
    rc = strata_buffer_new(cc->local_devices[i], total * es, &tmp[i]);
    if (!rc)
      tm[i] = strata_mem_typed(tmp[i], 0, dtype);
  }
  if (!rc)
    rc = strata__staging_take(cc->c, cc->local_devices[0], total * es, &h);
  if (!rc)
    rc = reduce_to_host(cc, queues, send, tm, total, dtype, op, h.p, what);
  for (int i = 0; !rc && i < cc->nlocal; i++)
    rc = strata_buffer_upload(queues[i], recv[i].buf, recv[i].off * es,
                              (char *)h.p + (size_t)cc->local_members[i] * count * es, count * es);
  rc = coll_failed(cc, rc, what);
  if (!rc || !cc->c->broken) {
    for (int i = 0; tmp && i < cc->nlocal; i++)
      strata_buffer_free(tmp[i]);
    strata__staging_give(cc->c, cc->local_devices[0], &h);
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
  size_t es = strata_dtype_size(dtype), block = count * es;
  struct strata__staging h;
  memset(&h, 0, sizeof h);
  TRY(strata__staging_take(cc->c, cc->local_devices[0], block * (size_t)cc->n, &h));
  char *base = h.p;
  int rc = 0;
  for (int i = 0; !rc && i < cc->nlocal; i++)
    rc = strata_buffer_download(queues[i], send[i].buf, send[i].off * es, base + (size_t)cc->local_members[i] * block,
                                block);
#ifdef STRATA_HAVE_MPI
  if (!rc && cc->nranks > 1) {
    /* Every rank's blocks to every other rank, in member order (messages of one pair and tag keep their order). */
    struct strata_cluster *c = cc->c;
    size_t nreq = (size_t)cc->n * 2;
    MPI_Request *r = calloc(nreq, sizeof *r);
    int *peers = calloc(nreq, sizeof *peers);
    size_t k = 0;
    MPI_Datatype t = mpi_type(dtype);
    if (!r || !peers || count > INT_MAX)
      rc = strata__error(r && peers ? STRATA_ERR_RANGE : STRATA_ERR_NOMEM, "%s: cannot post the messages", what);
    for (int q = 0; !rc && q < cc->nranks; q++) {
      int peer = cc->ranks[q];
      if (peer == c->rank)
        continue;
      for (int g = 0; !rc && g < cc->n; g++) {
        if (cc->rank_of[g] == c->rank) {
          peers[k] = peer;
          rc = strata__isend(c, c->coll, base + (size_t)g * block, (int)count, t, peer, cc->tag, &r[k++], what);
        } else if (cc->rank_of[g] == peer) {
          peers[k] = peer;
          rc = strata__irecv(c, c->coll, base + (size_t)g * block, (int)count, t, peer, cc->tag, &r[k++], what);
        }
      }
    }
    if (!rc)
      rc = strata__wait_requests(c, r, peers, (int)k, NULL, what);
    if (!rc || !c->broken) {
      free(r);
      free(peers);
    }
  }
#endif
  for (int i = 0; !rc && i < cc->nlocal; i++)
    rc = strata_buffer_upload(queues[i], recv[i].buf, recv[i].off * es, base, block * (size_t)cc->n);
  rc = coll_failed(cc, rc, what);
  if (!rc || !cc->c->broken)
    strata__staging_give(cc->c, cc->local_devices[0], &h);
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
  size_t es = strata_dtype_size(dtype);
  struct strata__staging h;
  memset(&h, 0, sizeof h);
  TRY(strata__staging_take(cc->c, cc->local_devices[0], count * es, &h));
  int rc = 0;
  if (li >= 0)
    rc = strata_buffer_download(queues[li], send[li].buf, send[li].off * es, h.p, count * es);
#ifdef STRATA_HAVE_MPI
  if (!rc && cc->nranks > 1) {
    MPI_Datatype t = mpi_type(dtype);
    MPI_Request *r = calloc((size_t)cc->nranks, sizeof *r);
    int *peers = calloc((size_t)cc->nranks, sizeof *peers);
    int k = 0;
    if (!r || !peers || count > INT_MAX)
      rc = strata__error(r && peers ? STRATA_ERR_RANGE : STRATA_ERR_NOMEM, "%s: cannot post the messages", what);
    for (int q = 0; !rc && q < cc->nranks; q++) {
      int peer = cc->ranks[q];
      if (c->rank == root_rank && peer != c->rank) {
        peers[k] = peer;
        rc = strata__isend(c, c->coll, h.p, (int)count, t, peer, cc->tag, &r[k++], what);
      } else if (c->rank != root_rank && peer == root_rank) {
        peers[k] = peer;
        rc = strata__irecv(c, c->coll, h.p, (int)count, t, peer, cc->tag, &r[k++], what);
      }
    }
    if (!rc)
      rc = strata__wait_requests(c, r, peers, k, NULL, what);
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
    rc = strata_buffer_upload(queues[i], recv[i].buf, recv[i].off * es, h.p, count * es);
  rc = coll_failed(cc, rc, what);
  if (!rc || !c->broken)
    strata__staging_give(cc->c, cc->local_devices[0], &h);
  return rc;
}
