/* SPDX-License-Identifier: MIT */
/* comm.c — communicators: one thread and queue per member (its lane), each call matched with the other members' and
** handed to the lanes, which move it as a chunked ring or direct reads (algorithms.c). */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <strata/comm.h>

#include "comm/comm.h"
#include "comm/lanes.h"
#include "core/parse.h"
#include "device/registry.h"

#define COMM_MAX_MEMBERS 64
#define COMM_DEFAULT_CHUNK (1u << 20)
#define COMM_DEFAULT_DIRECT_MAX (32u << 10)
#define COMM_DEFAULT_TIMEOUT 300.0
#define RING_CHUNKS 8                 /* chunks per ring segment, at most (above the configured size) */
#define RING_CHUNK_MAX (16u << 20)    /* ... unless that makes them larger than this */

static const char *const kind_names[] = {"allreduce", "allgather", "reducescatter", "broadcast", "barrier",
                                           "reduce"};

/* A gate handed to the caller instead of gating the member's queue: opened
** by the lane, waited for by the caller, freed by whichever lets go last.
** On a communicator without gates (a member's backend has none) it has no
** gate: the lane marks it finished, with the collective's status, and the
** caller waits for that on the host (strata__comm_wait). */
struct completion {
  const struct strata__slot *slot;
  void *gate;                   /* NULL without gates */
  int refs;
  double t_start, t_end;        /* when the lane found its input ready, and opened the gate (strata__now) */
  int finished, status;         /* without gates, under the communicator's lock: the lane is through */
  char msg[1024];
};

STRATA_API const char *strata_redop_name(int op) {
  return op == STRATA_SUM ? "sum" : op == STRATA_AVG ? "avg" : op == STRATA_MAX ? "max" : "?";
}

STRATA_API const char *strata_comm_algorithm_name(int a) {
  static const char *const names[] = {"auto", "ring", "direct", "nccl"};
  return a >= 0 && a <= STRATA_COMM_NCCL ? names[a] : "?";
}

/* ------------------------------------------------------------ failure */

/* Record the collective's first failure (lock held) and wake everybody. */
static void fail_locked(struct strata_comm *c, struct coll *co, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void fail_locked(struct strata_comm *c, struct coll *co, int status, const char *fmt, ...) {
  if (!co->status) {
    co->status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(co->msg, sizeof co->msg, fmt, ap);
    va_end(ap);
    if (!c->status) {
      c->status = status;
      memcpy(c->msg, co->msg, sizeof c->msg);
    }
  }
  pthread_cond_broadcast(&c->changed);
}

/* A lane's own step failed with `rc` (its message is this thread's last error). */
static void fail_lane(struct lane *l, struct coll *co, int rc) {
  struct strata_comm *c = l->comm;
  char label[200], why[700];
  strata__device_label(l->dev, label, sizeof label);
  strata__strlcpy(why, strata_last_error(), sizeof why);
  pthread_mutex_lock(&c->lock);
  fail_locked(c, co, rc, "%s of %zu %s over %d devices failed on %s (rank %d): %s", kind_names[co->kind], co->count,
              strata_dtype_name(co->dtype), co->n, label, l->rank, why[0] ? why : strata_strerror(rc));
  pthread_mutex_unlock(&c->lock);
}

static void deadline_after(double s, struct timespec *ts) {
  clock_gettime(CLOCK_REALTIME, ts);
  double whole = floor(s);
  ts->tv_sec += (time_t)whole;
  ts->tv_nsec += (long)((s - whole) * 1e9);
  if (ts->tv_nsec >= 1000000000L) {
    ts->tv_sec++;
    ts->tv_nsec -= 1000000000L;
  }
}

/*
** Wait (lock held) until ring position `pos` has done `units` units, or the
** collective failed. Waiting longer than the timeout without that progress
** fails the collective, naming the member that stalled.
*/
static int wait_units(struct lane *l, struct coll *co, int pos, long units) {
  struct strata_comm *c = l->comm;
  struct timespec dl;
  deadline_after(c->timeout_s, &dl);
  while (co->progress[pos] < units && !co->status) {
    if (pthread_cond_timedwait(&c->changed, &c->lock, &dl) == ETIMEDOUT && co->progress[pos] < units &&
        !co->status) {
      char label[200];
      strata__device_label(c->lanes[c->ring[pos]].dev, label, sizeof label);
      fail_locked(c, co, STRATA_ERR_TIMEOUT, "%s over %d devices: %s (rank %d) made no progress for %g s",
                  kind_names[co->kind], co->n, label, c->ring[pos], c->timeout_s);
    }
  }
  return co->status;
}

int strata__wait_for(struct lane *l, struct coll *co, int pos, long units) {
  pthread_mutex_lock(&l->comm->lock);
  int rc = wait_units(l, co, pos, units);
  pthread_mutex_unlock(&l->comm->lock);
  return rc;
}

void strata__set_units(struct lane *l, struct coll *co, long units) {
  pthread_mutex_lock(&l->comm->lock);
  co->progress[l->pos] = units;
  pthread_cond_broadcast(&l->comm->changed);
  pthread_mutex_unlock(&l->comm->lock);
}

/* ------------------------------------------------------------ lanes */

/* Drop one of the two holds on a completion (the lane's, the waiter's); the last frees it. */
static void completion_drop(struct strata_comm *c, struct completion *k) {
  pthread_mutex_lock(&c->lock);
  int last = --k->refs == 0;
  pthread_mutex_unlock(&c->lock);
  if (last) {
    if (k->gate)
      k->slot->be->gate_free(k->slot->ctx, k->gate);
    free(k);
  }
}

/* Drop the lane's hold on a collective; the last one frees it. Lock held. */
static void coll_release_locked(struct strata_comm *c, struct coll *co) {
  if (--co->left > 0)
    return;
  free(co->m);
  free(co->progress);
  free(co);
  c->pending--;
  pthread_cond_broadcast(&c->changed);
}

/*
** One member's part of a collective: wait for its input, run its steps,
** then wait until no lane touches any buffer of the collective (a failed
** lane stops at once, the others at their next wait) before the member's
** queue may go on.
*/
static void lane_run(struct lane *l, struct coll *co) {
  struct strata_comm *c = l->comm;
  struct member_args *me = &co->m[l->rank];
  const struct strata__slot *s = l->dev->slot;
  int rc = STRATA_OK;
  if (me->in_ev) {
    rc = s->be->event_sync(s->ctx, me->in_ev);
    s->be->event_free(s->ctx, me->in_ev);
    me->in_ev = NULL;
  }
  /* every member's call must be there (per-rank calls arrive one by one) */
  pthread_mutex_lock(&c->lock);
  struct timespec pdl;
  deadline_after(c->timeout_s, &pdl);
  while (co->posted < co->n && !co->status)
    if (pthread_cond_timedwait(&c->changed, &c->lock, &pdl) == ETIMEDOUT && co->posted < co->n && !co->status)
      fail_locked(c, co, STRATA_ERR_TIMEOUT, "%s over %d devices: only %d of the members called it within %g s",
                  kind_names[co->kind], co->n, co->posted, c->timeout_s);
  if (co->status && !rc)
    rc = co->status;
  pthread_mutex_unlock(&c->lock);
  /* the lane's scratch, grown here: no other lane reads it before this lane's first unit */
  if (!rc && co->scratch && (!l->scratch || strata_buffer_size(l->scratch) < co->scratch * co->esize)) {
    strata_buffer_free(l->scratch);
    l->scratch = NULL;
    rc = strata_buffer_new(l->dev->index, co->scratch * co->esize, &l->scratch);
  }
  if (rc)
    fail_lane(l, co, rc);
  else
    strata__set_units(l, co, 1);
  if (me->done)
    ((struct completion *)me->done)->t_start = strata__now();
  if (!rc) {
    rc = co->algo == STRATA_COMM_DIRECT ? strata__run_direct(l, co) : strata__run_ring(l, co);
    if (rc)
      fail_lane(l, co, rc); /* does nothing when another member failed first */
  }
  if (rc) /* leave the lane's queue empty and its error consumed */
    strata_queue_finish(l->q);
  pthread_mutex_lock(&c->lock);
  co->stopped++;
  pthread_cond_broadcast(&c->changed);
  struct timespec dl;
  deadline_after(c->timeout_s, &dl);
  /* after a failure, the members that never called touch nothing */
  while (co->stopped < (co->status || co->aborted ? co->posted : co->n)) {
    if (pthread_cond_timedwait(&c->changed, &c->lock, &dl) == ETIMEDOUT &&
        co->stopped < (co->status || co->aborted ? co->posted : co->n)) {
      fail_locked(c, co, STRATA_ERR_TIMEOUT, "%s over %d devices: a member did not finish within %g s",
                  kind_names[co->kind], co->n, c->timeout_s);
      break;
    }
  }
  int status = co->status;
  char msg[sizeof co->msg];
  memcpy(msg, co->msg, sizeof msg);
  pthread_mutex_unlock(&c->lock);
  if (me->gate) {
    s->be->gate_open(s->ctx, me->gate, status, msg);
    s->be->gate_free(s->ctx, me->gate);
    me->gate = NULL;
  }
  if (me->done) {
    struct completion *k = me->done;
    k->t_end = strata__now();
    if (!k->t_start)
      k->t_start = k->t_end;
    if (k->gate) {
      k->slot->be->gate_open(k->slot->ctx, k->gate, status, msg);
    } else { /* its caller waits on the host */
      pthread_mutex_lock(&c->lock);
      k->status = status;
      strata__strlcpy(k->msg, msg, sizeof k->msg);
      k->finished = 1;
      pthread_cond_broadcast(&c->changed);
      pthread_mutex_unlock(&c->lock);
    }
    completion_drop(c, k);
    me->done = NULL;
  }
  pthread_mutex_lock(&c->lock);
  coll_release_locked(c, co);
  pthread_mutex_unlock(&c->lock);
}

static void *lane_main(void *arg) {
  struct lane *l = arg;
  struct strata_comm *c = l->comm;
  pthread_mutex_lock(&c->lock);
  for (;;) {
    while (!l->head && !c->stop)
      pthread_cond_wait(&l->wake, &c->lock);
    if (!l->head)
      break;
    struct job *j = l->head;
    l->head = j->next;
    if (!l->head)
      l->tail = NULL;
    pthread_mutex_unlock(&c->lock);
    lane_run(l, j->coll);
    free(j);
    pthread_mutex_lock(&c->lock);
  }
  pthread_mutex_unlock(&c->lock);
  return NULL;
}

/* Wait (lock held) until every posted collective is released. */
static void wait_idle_locked(struct strata_comm *c) {
  while (c->pending > 0)
    pthread_cond_wait(&c->changed, &c->lock);
}

/* ------------------------------------------------------------ options */

static int env_size(const char *name, size_t *out, int zero_ok) {
  const char *v = getenv(name);
  if (!v || !*v)
    return STRATA_OK;
  uint64_t x = 0;
  if (strata__parse_size(v, &x) != STRATA_OK || (!zero_ok && x == 0) || x > (1ull << 31))
    return strata__error(STRATA_ERR_PARSE, "%s='%s' is not a size between %s and 2G", name, v,
                         zero_ok ? "0" : "1 byte");
  *out = (size_t)x;
  return STRATA_OK;
}

static int resolve_options(const struct strata_comm_options *o, struct strata_comm *c) {
  c->algorithm = STRATA_COMM_AUTO;
  c->chunk_bytes = COMM_DEFAULT_CHUNK;
  c->direct_max = COMM_DEFAULT_DIRECT_MAX;
  c->timeout_s = COMM_DEFAULT_TIMEOUT;
  const char *a = getenv("STRATA_COMM_ALGORITHM");
  if (a && *a) {
    if (!strcmp(a, "auto"))
      c->algorithm = STRATA_COMM_AUTO;
    else if (!strcmp(a, "ring"))
      c->algorithm = STRATA_COMM_RING;
    else if (!strcmp(a, "direct"))
      c->algorithm = STRATA_COMM_DIRECT;
    else if (!strcmp(a, "nccl"))
      c->algorithm = STRATA_COMM_NCCL;
    else
      return strata__error(STRATA_ERR_PARSE, "STRATA_COMM_ALGORITHM='%s': expected auto, ring, direct or nccl", a);
  }
  TRY(env_size("STRATA_COMM_CHUNK", &c->chunk_bytes, 0));
  TRY(env_size("STRATA_COMM_DIRECT_MAX", &c->direct_max, 1));
  const char *t = getenv("STRATA_COMM_TIMEOUT");
  if (t && *t) {
    double v;
    if (strata__parse_real(t, 0, 1e6, STRATA__PARSE_ABOVE_MIN, &v) != STRATA_OK)
      return strata__error(STRATA_ERR_PARSE, "STRATA_COMM_TIMEOUT='%s' is not a number of seconds in (0, 1e6]: %s", t,
                           strata__parse_why());
    c->timeout_s = v;
  }
  if (!o)
    return STRATA_OK;
  if (o->algorithm < 0 || o->algorithm > STRATA_COMM_NCCL)
    return strata__error(STRATA_ERR_INVALID, "strata_comm_new: algorithm %d is not one of strata_comm_algorithm",
                         o->algorithm);
  if (o->algorithm)
    c->algorithm = o->algorithm;
  if (o->chunk_bytes) {
    if (o->chunk_bytes < 4 || o->chunk_bytes > (1ull << 31))
      return strata__error(STRATA_ERR_RANGE, "strata_comm_new: chunk of %zu bytes (4 .. 2G)", o->chunk_bytes);
    c->chunk_bytes = o->chunk_bytes;
  }
  if (o->direct_max_bytes)
    c->direct_max = o->direct_max_bytes;
  if (o->timeout_s != 0) {
    if (!isfinite(o->timeout_s) || o->timeout_s < 0 || o->timeout_s > 1e6)
      return strata__error(STRATA_ERR_RANGE, "strata_comm_new: timeout %g s (0 .. 1e6)", o->timeout_s);
    c->timeout_s = o->timeout_s;
  }
  return STRATA_OK;
}

/* The algorithm `opts` and STRATA_COMM_ALGORITHM ask for (the cluster's
** groups agree on it across ranks); the other options are checked too. */
int strata__comm_algorithm(const struct strata_comm_options *opts, int *algorithm) {
  struct strata_comm tmp;
  memset(&tmp, 0, sizeof tmp);
  TRY(resolve_options(opts, &tmp));
  *algorithm = tmp.algorithm;
  return STRATA_OK;
}

/* ------------------------------------------------------------ life cycle */

STRATA_API void strata_comm_free(strata_comm_t c) {
  if (!c)
    return;
  if (c->open) /* calls some member never made: nothing would complete them */
    strata_comm_abort(c, STRATA_ERR_STATE, "the communicator was freed");
  pthread_mutex_lock(&c->lock);
  wait_idle_locked(c);
  c->stop = 1;
  for (int r = 0; r < c->n && c->lanes; r++)
    pthread_cond_signal(&c->lanes[r].wake);
  pthread_mutex_unlock(&c->lock);
  for (int r = 0; r < c->n && c->lanes; r++) {
    struct lane *l = &c->lanes[r];
    if (l->started)
      pthread_join(l->thread, NULL);
    pthread_cond_destroy(&l->wake);
    strata_buffer_free(l->scratch);
    strata_queue_free(l->q);
  }
  if (c->nccl)
    c->nccl_slot->be->comm_free(c->nccl_slot->ctx, c->nccl);
  pthread_mutex_destroy(&c->lock);
  pthread_cond_destroy(&c->changed);
  free(c->lanes);
  free(c->devices);
  free(c->ring);
  free(c->next_seq);
  free(c);
}

/* Ring order: from the topology's links, else the ranks' own order. */
static int choose_ring(struct strata_comm *c, strata_topology_t topo) {
  for (int r = 0; r < c->n; r++)
    c->ring[r] = r;
  if (!topo || c->n < 3)
    return STRATA_OK;
  int *order = malloc(sizeof *order * (size_t)c->n);
  if (!order)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory ordering a ring of %d", c->n);
  int rc = strata_topology_device_ring(topo, c->devices, c->n, order, &c->bottleneck);
  for (int i = 0; i < c->n && !rc; i++)
    for (int r = 0; r < c->n; r++)
      if (c->devices[r] == order[i])
        c->ring[i] = r;
  free(order);
  return rc;
}

/* NCCL when every member is on one backend that offers it. */
static int try_backend_comm(struct strata_comm *c) {
  if (c->algorithm != STRATA_COMM_AUTO && c->algorithm != STRATA_COMM_NCCL)
    return STRATA_OK;
  const struct strata__slot *s = c->lanes[0].dev->slot;
  int same = 1;
  for (int r = 1; r < c->n; r++)
    same &= c->lanes[r].dev->slot == s;
  if (!same || !s->be->comm_new) {
    if (c->algorithm == STRATA_COMM_NCCL)
      return strata__error(STRATA_ERR_UNSUPPORTED,
                           "strata_comm_new: NCCL needs every member on the CUDA backend with NCCL available");
    return STRATA_OK;
  }
  int *local = malloc(sizeof *local * (size_t)c->n);
  if (!local)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory listing %d devices", c->n);
  for (int r = 0; r < c->n; r++)
    local[r] = c->lanes[r].dev->local;
  int rc = s->be->comm_new(s->ctx, c->n, local, &c->nccl);
  free(local);
  if (rc) {
    c->nccl = NULL;
    if (c->algorithm == STRATA_COMM_NCCL)
      return rc;
    strata__log(STRATA_LOG_INFO, "comm", "%s: %s; collectives use strata's ring", s->name, strata_last_error());
    return STRATA_OK;
  }
  c->nccl_slot = s;
  return STRATA_OK;
}

STRATA_API int strata_comm_new(const int *devices, int count, const struct strata_comm_options *opts,
                               strata_comm_t *out) {
  if (!out)
    return strata__error(STRATA_ERR_INVALID, "strata_comm_new: out is NULL");
  *out = NULL;
  if (!devices || count < 1 || count > COMM_MAX_MEMBERS)
    return strata__error(STRATA_ERR_INVALID, "strata_comm_new: %d members (1 .. %d, with a device list)", count,
                         COMM_MAX_MEMBERS);
  for (int i = 0; i < count; i++) {
    if (!strata__device_get(devices[i]))
      return STRATA_ERR_NOT_FOUND;
    for (int j = 0; j < i; j++)
      if (devices[j] == devices[i])
        return strata__error(STRATA_ERR_INVALID, "strata_comm_new: device %d is listed twice (ranks %d and %d)",
                             devices[i], j, i);
  }
  struct strata_comm *c = calloc(1, sizeof *c);
  if (!c)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory creating a communicator");
  pthread_mutex_init(&c->lock, NULL);
  pthread_cond_init(&c->changed, NULL);
  c->n = count;
  c->devices = malloc(sizeof *c->devices * (size_t)count);
  c->ring = malloc(sizeof *c->ring * (size_t)count);
  c->lanes = calloc((size_t)count, sizeof *c->lanes);
  c->next_seq = calloc((size_t)count, sizeof *c->next_seq);
  int rc = STRATA_OK;
  if (!c->devices || !c->ring || !c->lanes || !c->next_seq) {
    free(c->devices);
    free(c->ring);
    free(c->lanes);
    c->lanes = NULL;
    c->n = 0;
    strata_comm_free(c);
    return strata__error(STRATA_ERR_NOMEM, "out of host memory creating a communicator of %d", count);
  }
  memcpy(c->devices, devices, sizeof *devices * (size_t)count);
  for (int r = 0; r < count; r++)
    pthread_cond_init(&c->lanes[r].wake, NULL);
  rc = resolve_options(opts, c);
  if (!rc)
    rc = choose_ring(c, opts ? opts->topology : NULL);
  c->async = 1;
  for (int r = 0; r < count && !rc; r++) {
    struct lane *l = &c->lanes[r];
    l->comm = c;
    l->rank = r;
    l->dev = strata__device_get(devices[r]);
    for (int i = 0; i < count; i++)
      if (c->ring[i] == r)
        l->pos = i;
    c->async &= l->dev->slot->be->gate_new != NULL;
    rc = strata_queue_new(devices[r], &l->q);
  }
  if (!rc)
    rc = try_backend_comm(c);
  if (c->nccl)
    c->async = 1; /* NCCL enqueues on the members' own streams */
  for (int r = 0; r < count && !rc && !c->nccl; r++) {
    int err = pthread_create(&c->lanes[r].thread, NULL, lane_main, &c->lanes[r]);
    if (err)
      rc = strata__error(STRATA_ERR_INTERNAL, "strata_comm_new: cannot start a thread: %s", strerror(err));
    else
      c->lanes[r].started = 1;
  }
  if (rc) {
    strata_comm_free(c);
    return rc;
  }
  *out = c;
  return STRATA_OK;
}

STRATA_API int strata_comm_info(strata_comm_t c, struct strata_comm_info *info) {
  if (!c || !info)
    return strata__error(STRATA_ERR_INVALID, "strata_comm_info: communicator or info is NULL");
  memset(info, 0, sizeof *info);
  info->size = c->n;
  info->devices = c->devices;
  info->ring = c->ring;
  info->algorithm = c->nccl ? STRATA_COMM_NCCL : c->algorithm == STRATA_COMM_DIRECT ? STRATA_COMM_DIRECT
                                                                                      : STRATA_COMM_RING;
  info->chunk_bytes = c->chunk_bytes;
  info->direct_max_bytes = c->direct_max;
  info->asynchronous = c->async;
  info->ring_bottleneck_gbps = c->bottleneck;
  info->moved_bytes = __atomic_load_n(&c->moved, __ATOMIC_RELAXED);
  return STRATA_OK;
}

STRATA_API int strata_comm_finish(strata_comm_t c) {
  if (!c)
    return strata__error(STRATA_ERR_INVALID, "strata_comm_finish: communicator is NULL");
  if (c->nccl) /* NCCL runs on the members' own queues, which report its errors */
    return STRATA_OK;
  pthread_mutex_lock(&c->lock);
  wait_idle_locked(c);
  int rc = c->status;
  char msg[sizeof c->msg];
  memcpy(msg, c->msg, sizeof msg);
  c->status = 0;
  c->msg[0] = '\0';
  pthread_mutex_unlock(&c->lock);
  return rc ? strata__error(rc, "%s", msg) : STRATA_OK;
}

/* ------------------------------------------------------------ calls */

/*
** Check that m holds `count` elements of `dtype` on rank r's device. The
** operand's own type must be the collective's, or, for a 4-byte collective,
** another 4-byte type (float32 operands, strata_mem's default, carry int32
** too): its offset counts elements of that size.
*/
static int check_mem(struct strata_comm *c, const char *what, int r, const char *arg, strata_mem_t m, int dtype,
                     uint64_t count) {
  if (!m.buf)
    return strata__error(STRATA_ERR_INVALID, "%s: %s[%d] has no buffer", what, arg, r);
  if (m.buf->dev->index != c->devices[r]) {
    char lb[200];
    return strata__error(STRATA_ERR_DEVICE_MISMATCH, "%s: %s[%d] is on %s, but rank %d is device %d", what, arg, r,
                         strata__device_label(m.buf->dev, lb, sizeof lb), r, c->devices[r]);
  }
  size_t esize = strata_dtype_size(dtype);
  if (m.dtype != dtype && strata_dtype_size(m.dtype) != esize)
    return strata__error(STRATA_ERR_INVALID, "%s: %s[%d] is %s but the collective moves %s", what, arg, r,
                         strata_dtype_name(m.dtype), strata_dtype_name(dtype));
  uint64_t elems = m.buf->size / esize;
  if (m.off > elems || count > elems - m.off)
    return strata__error(STRATA_ERR_RANGE,
                         "%s: %s[%d] needs %llu elements from offset %zu but its buffer holds %llu%s%s", what, arg,
                         r, (unsigned long long)count, m.off, (unsigned long long)elems, esize == 4 ? "" : " of ",
                         esize == 4 ? "" : strata_dtype_name(dtype));
  return STRATA_OK;
}

/* What one collective is, as every member's call must say it. */
struct coll_shape {
  int kind, dtype, op, root;
  size_t count;
};

/* The checks of the shape that need no member. */
static int check_shape(struct strata_comm *c, const struct coll_shape *sh) {
  const char *what = kind_names[sh->kind];
  if (!c)
    return strata__error(STRATA_ERR_INVALID, "%s: communicator is NULL", what);
  if (sh->dtype != STRATA_FLOAT32 && sh->dtype != STRATA_INT32 && sh->dtype != STRATA_BFLOAT16)
    return strata__error(STRATA_ERR_INVALID, "%s: unknown element type %d", what, sh->dtype);
  int reduces = sh->kind == COLL_ALLREDUCE || sh->kind == COLL_REDUCESCATTER || sh->kind == COLL_REDUCE;
  if (reduces && sh->op != STRATA_SUM && sh->op != STRATA_AVG && sh->op != STRATA_MAX)
    return strata__error(STRATA_ERR_INVALID, "%s: unknown reduction %d", what, sh->op);
  if (reduces && sh->op == STRATA_AVG && sh->dtype == STRATA_INT32)
    return strata__error(STRATA_ERR_UNSUPPORTED, "%s: avg is for float32 and bfloat16 only", what);
  if ((sh->kind == COLL_BROADCAST || sh->kind == COLL_REDUCE) && (sh->root < 0 || sh->root >= c->n))
    return strata__error(STRATA_ERR_RANGE, "%s: root %d is not a rank of this group of %d", what, sh->root, c->n);
  uint64_t total = 0;
  if (!strata__mul_ok(sh->count, (uint64_t)c->n, &total) || total > (UINT64_MAX >> 3))
    return strata__error(STRATA_ERR_RANGE, "%s: %zu elements x %d members overflow", what, sh->count, c->n);
  return STRATA_OK;
}

/* The checks of member r's queue and buffers. */
static int check_member(struct strata_comm *c, const struct coll_shape *sh, int r, strata_queue_t q, strata_mem_t send,
                        strata_mem_t recv) {
  const char *what = kind_names[sh->kind];
  if (r < 0 || r >= c->n)
    return strata__error(STRATA_ERR_RANGE, "%s: rank %d of a group of %d", what, r, c->n);
  if (!q)
    return strata__error(STRATA_ERR_INVALID, "%s: queues[%d] is NULL", what, r);
  if (q->dev->index != c->devices[r]) {
    char lq[200];
    return strata__error(STRATA_ERR_DEVICE_MISMATCH, "%s: queues[%d] is on %s, but rank %d is device %d", what, r,
                         strata__device_label(q->dev, lq, sizeof lq), r, c->devices[r]);
  }
  if (sh->kind == COLL_BARRIER)
    return STRATA_OK;
  uint64_t total = (uint64_t)sh->count * (uint64_t)c->n;
  uint64_t scount = sh->kind == COLL_REDUCESCATTER ? total : sh->count;
  uint64_t rcount = sh->kind == COLL_ALLGATHER ? total : sh->count;
  if (sh->kind == COLL_REDUCE && r != sh->root)
    return check_mem(c, what, r, "send", send, sh->dtype, scount); /* (its recv is not written) */
  TRY(check_mem(c, what, r, "recv", recv, sh->dtype, rcount));
  if (sh->kind == COLL_BROADCAST && r != sh->root)
    return STRATA_OK;
  TRY(check_mem(c, what, r, "send", send, sh->dtype, scount));
  if (send.buf != recv.buf)
    return STRATA_OK;
  /* the same buffer: in place, or not overlapping at all */
  uint64_t so = send.off, ro = recv.off;
  int in_place = sh->kind == COLL_ALLGATHER       ? so == ro + (uint64_t)r * sh->count
                 : sh->kind == COLL_REDUCESCATTER ? ro == so + (uint64_t)r * sh->count
                                                  : so == ro;
  if (!in_place && so < ro + rcount && ro < so + scount)
    return strata__error(STRATA_ERR_INVALID, "%s: send[%d] and recv[%d] overlap without being the in-place layout",
                         what, r, r);
  return STRATA_OK;
}

/* The algorithm, ring chunk and scratch (elements of the collective's type
** per lane) of a collective. Sizes chosen in bytes (direct_max, chunk_bytes,
** RING_CHUNK_MAX) hold for every type: a bfloat16 chunk has twice the elements. */
static void plan_coll(struct strata_comm *c, const struct coll_shape *sh, int *algo, size_t *ce, size_t *scratch) {
  int n = c->n;
  size_t count = sh->count, esize = strata_dtype_size(sh->dtype);
  int reduces = sh->kind == COLL_ALLREDUCE || sh->kind == COLL_REDUCESCATTER;
  *algo = c->algorithm == STRATA_COMM_RING || c->algorithm == STRATA_COMM_DIRECT ? c->algorithm
          : count * esize <= c->direct_max                                      ? STRATA_COMM_DIRECT
                                                                                 : STRATA_COMM_RING;
  if (sh->kind == COLL_BARRIER || n == 1)
    *algo = STRATA_COMM_DIRECT;
  /* Chunks: at least the configured size, and few enough per segment (at
  ** most RING_CHUNKS, up to 16 MiB each) that handing a chunk from lane to
  ** lane costs little next to moving it. */
  size_t e = c->chunk_bytes / esize ? c->chunk_bytes / esize : 1, emax = RING_CHUNK_MAX / esize;
  size_t seg = sh->kind == COLL_ALLREDUCE ? (count + (size_t)n - 1) / (size_t)n : count;
  size_t few = (seg + RING_CHUNKS - 1) / RING_CHUNKS;
  if (few > e)
    e = few < emax ? few : (emax > e ? emax : e);
  *ce = e;
  *scratch = 0;
  if (*algo == STRATA_COMM_DIRECT && reduces)
    *scratch = count * (size_t)n;
  else if (*algo == STRATA_COMM_RING && sh->kind == COLL_ALLREDUCE)
    *scratch = e < count ? e : count;
  else if (*algo == STRATA_COMM_RING && sh->kind == COLL_REDUCESCATTER)
    *scratch = e + 2 * count;
  else if (sh->kind == COLL_REDUCE) /* direct: a member's input copied; ring: the root a chunk, a middle its sums */
    *scratch = *algo == STRATA_COMM_DIRECT || n > 2 ? count : e < count ? e : count;
}

/* The collective of sequence number `seq` (lock held), created on first use. */
static struct coll *coll_at_locked(struct strata_comm *c, uint64_t seq) {
  for (struct coll *co = c->open; co; co = co->next_open)
    if (co->seq == seq)
      return co;
  struct coll *co = calloc(1, sizeof *co);
  if (co) {
    co->m = calloc((size_t)c->n, sizeof *co->m);
    co->progress = calloc((size_t)c->n, sizeof *co->progress);
  }
  if (!co || !co->m || !co->progress) {
    if (co) {
      free(co->m);
      free(co->progress);
    }
    free(co);
    return NULL;
  }
  co->seq = seq;
  co->n = c->n;
  co->left = c->n;
  co->next_open = c->open;
  c->open = co;
  c->pending++;
  return co;
}

static void unlink_open_locked(struct strata_comm *c, struct coll *co) {
  for (struct coll **p = &c->open; *p; p = &(*p)->next_open)
    if (*p == co) {
      *p = co->next_open;
      return;
    }
}

/*
** Hand member r's part of its next collective to its lane: mark the
** member's queue (input ready), make it wait for the result (a gate) unless
** `done` asks for the completion instead, and match the call with the other
** members' calls of the same sequence number. The shape and member were
** checked. Any failure here happens before anything is enqueued.
*/
static int post_member(struct strata_comm *c, const struct coll_shape *sh, int r, strata_queue_t q, strata_mem_t send,
                       strata_mem_t recv, void **done) {
  const struct strata__slot *s = q->dev->slot;
  struct job *j = calloc(1, sizeof *j);
  struct completion *k = done ? calloc(1, sizeof *k) : NULL;
  if (!j || (done && !k)) {
    free(j);
    free(k);
    return strata__error(STRATA_ERR_NOMEM, "%s: out of host memory", kind_names[sh->kind]);
  }
  if (k) {
    k->slot = s;
    k->refs = 2; /* the lane's and the waiter's */
    *done = k;
  }
  void *ev = NULL, *gate = NULL;
  int rc = s->be->event_record(s->ctx, q->h, &ev);
  int gated = c->async;
  if (!rc && gated) {
    rc = s->be->gate_new(s->ctx, q->dev->local, &gate);
    if (!rc && !done && (rc = s->be->gate_wait(s->ctx, q->h, gate))) {
      s->be->gate_free(s->ctx, gate);
      gate = NULL;
    }
  }
  if (rc) {
    if (ev)
      s->be->event_free(s->ctx, ev);
    free(j);
    free(k);
    if (done)
      *done = NULL;
    return rc;
  }
  int algo;
  size_t ce, scratch;
  plan_coll(c, sh, &algo, &ce, &scratch);
  pthread_mutex_lock(&c->lock);
  if (c->next_seq[r] < c->aborted_below) { /* its other members were told it failed */
    uint64_t seq = c->next_seq[r]++;
    pthread_mutex_unlock(&c->lock);
    s->be->event_free(s->ctx, ev);
    if (gate) {
      s->be->gate_open(s->ctx, gate, STRATA_OK, NULL); /* the call reports it: the queue just goes on */
      s->be->gate_free(s->ctx, gate);
    }
    free(j);
    free(k);
    if (done)
      *done = NULL;
    return strata__error(STRATA_ERR_STATE, "%s: collective #%llu of this communicator was aborted",
                         kind_names[sh->kind], (unsigned long long)seq);
  }
  struct coll *co = coll_at_locked(c, c->next_seq[r]);
  if (!co) {
    pthread_mutex_unlock(&c->lock);
    if (gate) {
      s->be->gate_open(s->ctx, gate, STRATA_OK, NULL);
      s->be->gate_free(s->ctx, gate);
    }
    s->be->event_free(s->ctx, ev);
    free(j);
    free(k);
    if (done)
      *done = NULL;
    return strata__error(STRATA_ERR_NOMEM, "%s: out of host memory", kind_names[sh->kind]);
  }
  c->next_seq[r]++;
  if (co->posted == 0) {
    co->kind = sh->kind;
    co->dtype = sh->dtype;
    co->esize = strata_dtype_size(sh->dtype);
    co->op = sh->op;
    co->root = sh->root;
    co->count = sh->count;
    co->algo = algo;
    co->ce = ce;
    co->scratch = scratch;
  } else if (co->kind != sh->kind || co->dtype != sh->dtype || co->count != sh->count ||
             ((sh->kind == COLL_ALLREDUCE || sh->kind == COLL_REDUCESCATTER) && co->op != sh->op) ||
             ((sh->kind == COLL_BROADCAST || sh->kind == COLL_REDUCE) && co->root != sh->root) ||
             (sh->kind == COLL_REDUCE && co->op != sh->op)) {
    fail_locked(c, co, STRATA_ERR_INVALID,
                "collective #%llu: rank %d called %s of %zu %s but another rank %s of %zu %s (every rank must make "
                "the same calls in the same order)",
                (unsigned long long)co->seq, r, kind_names[sh->kind], sh->count, strata_dtype_name(sh->dtype),
                kind_names[co->kind], co->count, strata_dtype_name(co->dtype));
  }
  struct member_args *m = &co->m[r];
  if (done) {
    m->done = *done;
    ((struct completion *)m->done)->gate = gate;
  }
  if (sh->kind != COLL_BARRIER) {
    m->rbuf = recv.buf;
    m->roff = recv.off;
    m->sbuf = send.buf;
    m->soff = send.off;
  }
  m->in_ev = ev;
  m->gate = done ? NULL : gate;
  if (++co->posted == c->n) {
    unlink_open_locked(c, co);
    pthread_cond_broadcast(&c->changed);
  }
  struct lane *l = &c->lanes[r];
  j->coll = co;
  if (l->tail)
    l->tail->next = j;
  else
    l->head = j;
  l->tail = j;
  pthread_cond_signal(&l->wake);
  pthread_mutex_unlock(&c->lock);
  return STRATA_OK;
}

/* The backend library's collective: every member at once, or one (member >= 0). */
static int post_backend(struct strata_comm *c, const struct coll_shape *sh, int member, const strata_queue_t *queues,
                        const strata_mem_t *send, const strata_mem_t *recv) {
  int n = c->n;
  void **qh = calloc((size_t)n, sizeof *qh);
  struct strata__mem *sm = calloc((size_t)n, sizeof *sm), *rm = calloc((size_t)n, sizeof *rm);
  int rc = !qh || !sm || !rm ? strata__error(STRATA_ERR_NOMEM, "%s: out of host memory", kind_names[sh->kind])
                             : STRATA_OK;
  for (int r = 0; r < n && !rc; r++) {
    if (member >= 0 && r != member)
      continue;
    int k = member >= 0 ? 0 : r;
    qh[r] = queues[k]->h;
    if (sh->kind != COLL_BARRIER && recv[k].buf) { /* (a reduce's other members write no recv) */
      rm[r].h = recv[k].buf->h;
      rm[r].off = recv[k].off;
      if (send[k].buf) {
        sm[r].h = send[k].buf->h;
        sm[r].off = send[k].off;
      }
    }
  }
  if (!rc)
    rc = c->nccl_slot->be->comm_coll(c->nccl_slot->ctx, c->nccl, sh->kind, member, qh, sm, rm, sh->count, sh->dtype,
                                     sh->op, sh->root);
  free(qh);
  free(sm);
  free(rm);
  return rc;
}

/*
** One collective for the whole group: every member checked before any is
** posted; then each member's part handed to its lane.
*/
static int post_group(struct strata_comm *c, int kind, const strata_queue_t *queues, const strata_mem_t *send,
                      const strata_mem_t *recv, size_t count, int dtype, int op, int root) {
  struct coll_shape sh = {kind, dtype, op, root, count};
  TRY(check_shape(c, &sh));
  const char *what = kind_names[kind];
  if (!queues)
    return strata__error(STRATA_ERR_INVALID, "%s: queues is NULL", what);
  if (kind != COLL_BARRIER && (!send || !recv))
    return strata__error(STRATA_ERR_INVALID, "%s: send or recv is NULL", what);
  strata_mem_t none = strata_mem(NULL, 0);
  for (int r = 0; r < c->n; r++)
    TRY(check_member(c, &sh, r, queues[r], send ? send[r] : none, recv ? recv[r] : none));
  if (kind != COLL_BARRIER && count == 0)
    return STRATA_OK;
  if (c->nccl)
    return post_backend(c, &sh, -1, queues, send, recv);
  for (int r = 0; r < c->n; r++) {
    int rc = post_member(c, &sh, r, queues[r], send ? send[r] : none, recv ? recv[r] : none, NULL);
    if (rc) {
      /* the members posted so far would wait for the others: fail them */
      char msg[700];
      strata__strlcpy(msg, strata_last_error(), sizeof msg);
      strata_comm_abort(c, rc, msg);
      return strata__error(rc, "%s", msg);
    }
  }
  if (c->async)
    return STRATA_OK;
  return strata_comm_finish(c);
}

/* One member's call; `done` (internal callers) takes the completion instead of gating the queue. */
int strata__comm_post_rank(strata_comm_t c, int kind, int rank, strata_queue_t queue, strata_mem_t send,
                           strata_mem_t recv, size_t count, int dtype, int op, int root, void **done) {
  struct coll_shape sh = {kind, dtype, op, root, count};
  if (done)
    *done = NULL;
  TRY(check_shape(c, &sh));
  TRY(check_member(c, &sh, rank, queue, send, recv));
  if (kind != COLL_BARRIER && count == 0)
    return STRATA_OK;
  if (c->nccl)
    return post_backend(c, &sh, rank, &queue, &send, &recv);
  if (c->async || done)
    return post_member(c, &sh, rank, queue, send, recv, done);
  /* without gates the call waits for its own collective (which needs every
  ** rank's call), and reports its own status: never another call's */
  void *mine = NULL;
  TRY(post_member(c, &sh, rank, queue, send, recv, &mine));
  int rc = strata__comm_wait(c, queue, mine);
  strata__comm_release(c, mine, NULL, NULL);
  return rc;
}

/* Make `queue` (on the member's device) wait for a completion from
** strata__comm_post_rank; without gates, wait for it here, on the host, and
** return the collective's status. */
int strata__comm_wait(strata_comm_t c, strata_queue_t queue, void *done) {
  struct completion *k = done;
  if (!k)
    return STRATA_OK;
  if (k->gate)
    return queue ? k->slot->be->gate_wait(k->slot->ctx, queue->h, k->gate) : STRATA_OK;
  /* the lane always gets through: it gives up on members that never call after the timeout */
  pthread_mutex_lock(&c->lock);
  while (!k->finished)
    pthread_cond_wait(&c->changed, &c->lock);
  int rc = k->status;
  char msg[sizeof k->msg];
  memcpy(msg, k->msg, sizeof msg);
  pthread_mutex_unlock(&c->lock);
  return rc ? strata__error(rc, "%s", msg[0] ? msg : strata_strerror(rc)) : STRATA_OK;
}

/* Let a completion go; with the queue that waited for it finished, *t_start
** and *t_end (may be NULL) say when its member moved data. */
void strata__comm_release(strata_comm_t c, void *done, double *t_start, double *t_end) {
  struct completion *k = done;
  if (!k)
    return;
  pthread_mutex_lock(&c->lock);
  double a = k->t_start, b = k->t_end;
  pthread_mutex_unlock(&c->lock);
  if (t_start)
    *t_start = a;
  if (t_end)
    *t_end = b;
  completion_drop(c, k);
}

STRATA_API void strata_comm_abort(strata_comm_t c, int status, const char *message) {
  if (!c)
    return;
  pthread_mutex_lock(&c->lock);
  while (c->open) {
    struct coll *co = c->open;
    c->open = co->next_open;
    fail_locked(c, co, status ? status : STRATA_ERR_STATE, "collective #%llu aborted: %s",
                (unsigned long long)co->seq, message ? message : "by the caller");
    co->aborted = 1;
    if (co->seq + 1 > c->aborted_below)
      c->aborted_below = co->seq + 1;
    co->left -= co->n - co->posted; /* the members that never called hold nothing */
    co->left++;
    coll_release_locked(c, co);
  }
  pthread_cond_broadcast(&c->changed);
  pthread_mutex_unlock(&c->lock);
}

STRATA_API int strata_allreduce(strata_comm_t c, const strata_queue_t *queues, const strata_mem_t *send,
                                const strata_mem_t *recv, size_t count, int dtype, int op) {
  return post_group(c, COLL_ALLREDUCE, queues, send, recv, count, dtype, op, 0);
}

STRATA_API int strata_allgather(strata_comm_t c, const strata_queue_t *queues, const strata_mem_t *send,
                                const strata_mem_t *recv, size_t count, int dtype) {
  return post_group(c, COLL_ALLGATHER, queues, send, recv, count, dtype, STRATA_SUM, 0);
}

STRATA_API int strata_reducescatter(strata_comm_t c, const strata_queue_t *queues, const strata_mem_t *send,
                                    const strata_mem_t *recv, size_t count, int dtype, int op) {
  return post_group(c, COLL_REDUCESCATTER, queues, send, recv, count, dtype, op, 0);
}

STRATA_API int strata_broadcast(strata_comm_t c, const strata_queue_t *queues, const strata_mem_t *send,
                                const strata_mem_t *recv, size_t count, int dtype, int root) {
  return post_group(c, COLL_BROADCAST, queues, send, recv, count, dtype, STRATA_SUM, root);
}

STRATA_API int strata_reduce(strata_comm_t c, const strata_queue_t *queues, const strata_mem_t *send,
                             const strata_mem_t *recv, size_t count, int dtype, int op, int root) {
  return post_group(c, COLL_REDUCE, queues, send, recv, count, dtype, op, root);
}

STRATA_API int strata_comm_barrier(strata_comm_t c, const strata_queue_t *queues) {
  return post_group(c, COLL_BARRIER, queues, NULL, NULL, 0, STRATA_FLOAT32, STRATA_SUM, 0);
}

STRATA_API int strata_allreduce_rank(strata_comm_t c, int rank, strata_queue_t queue, strata_mem_t send,
                                     strata_mem_t recv, size_t count, int dtype, int op) {
  return strata__comm_post_rank(c, COLL_ALLREDUCE, rank, queue, send, recv, count, dtype, op, 0, NULL);
}

STRATA_API int strata_allgather_rank(strata_comm_t c, int rank, strata_queue_t queue, strata_mem_t send,
                                     strata_mem_t recv, size_t count, int dtype) {
  return strata__comm_post_rank(c, COLL_ALLGATHER, rank, queue, send, recv, count, dtype, STRATA_SUM, 0, NULL);
}

STRATA_API int strata_reducescatter_rank(strata_comm_t c, int rank, strata_queue_t queue, strata_mem_t send,
                                         strata_mem_t recv, size_t count, int dtype, int op) {
  return strata__comm_post_rank(c, COLL_REDUCESCATTER, rank, queue, send, recv, count, dtype, op, 0, NULL);
}

STRATA_API int strata_broadcast_rank(strata_comm_t c, int rank, strata_queue_t queue, strata_mem_t send,
                                     strata_mem_t recv, size_t count, int dtype, int root) {
  return strata__comm_post_rank(c, COLL_BROADCAST, rank, queue, send, recv, count, dtype, STRATA_SUM, root, NULL);
}

STRATA_API int strata_reduce_rank(strata_comm_t c, int rank, strata_queue_t queue, strata_mem_t send, strata_mem_t recv,
                                  size_t count, int dtype, int op, int root) {
  return strata__comm_post_rank(c, COLL_REDUCE, rank, queue, send, recv, count, dtype, op, root, NULL);
}

STRATA_API int strata_allreduce_sync(strata_comm_t c, const strata_queue_t *queues, const strata_mem_t *send,
                                     const strata_mem_t *recv, size_t count, int dtype, int op) {
  TRY(strata_allreduce(c, queues, send, recv, count, dtype, op));
  TRY(strata_comm_finish(c));
  for (int r = 0; r < c->n; r++)
    TRY(strata_queue_finish(queues[r]));
  return STRATA_OK;
}
