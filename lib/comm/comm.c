/* SPDX-License-Identifier: MIT */
/* comm.c — communicators: one thread and queue per member moving collectives as chunked rings or direct reads. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <strata/comm.h>

#include "registry.h"

#define COMM_MAX_MEMBERS 64
#define COMM_DEFAULT_CHUNK (1u << 20)
#define COMM_DEFAULT_DIRECT_MAX (32u << 10)
#define COMM_DEFAULT_TIMEOUT 300.0
#define RING_CHUNKS 8                 /* chunks per ring segment, at most (above the configured size) */
#define RING_CHUNK_MAX (16u << 20)    /* ... unless that makes them larger than this */

enum coll_kind { COLL_ALLREDUCE, COLL_ALLGATHER, COLL_REDUCESCATTER, COLL_BROADCAST, COLL_BARRIER };
static const char *const kind_names[] = {"allreduce", "allgather", "reducescatter", "broadcast", "barrier"};

/* One member's operands of one collective. Offsets in elements. */
struct member_args {
  strata_buffer_t sbuf, rbuf;
  size_t soff, roff;
  void *in_ev;                  /* recorded on the member's queue: its input is ready */
  void *gate;                   /* the member's queue waits for it; NULL when the call blocks */
};

/* One collective call, shared by the lanes of every member. Its progress
** counters are guarded by the communicator's lock. */
struct coll {
  int kind, dtype, op, root, algo;
  size_t count;
  size_t ce;                    /* ring chunk, elements */
  int n;
  struct member_args *m;        /* by rank */
  long *progress;               /* by ring position: units done (1: input ready) */
  int status;                   /* first failure, 0 while all is well */
  char msg[1024];
  int stopped;                  /* lanes that no longer touch any buffer */
  int left;                     /* lanes still holding the collective */
};

struct job {
  struct job *next;
  struct coll *coll;
};

/* A member's lane: its own queue and thread, and its scratch memory. */
struct lane {
  struct strata_comm *comm;
  int rank, pos;
  struct strata__device *dev;
  strata_queue_t q;
  strata_buffer_t scratch;
  pthread_t thread;
  int started;
  struct job *head, *tail;
  pthread_cond_t wake;
};

struct strata_comm {
  int n;
  int *devices;                 /* global device by rank */
  int *ring;                    /* rank by ring position */
  struct lane *lanes;           /* by rank */
  size_t chunk_bytes, direct_max;
  double timeout_s;
  int algorithm;                /* as configured (AUTO, RING, DIRECT, NCCL) */
  int async;                    /* every member's backend has gates */
  double bottleneck;
  const struct strata__slot *nccl_slot;
  void *nccl;                   /* the backend's communicator, NULL without */
  pthread_mutex_t lock;
  pthread_cond_t changed;       /* progress, failure, a collective released */
  int pending;                  /* collectives not yet released by every lane */
  int stop;
  int status;                   /* first failure since the last strata_comm_finish */
  char msg[1024];
};

STRATA_API const char *strata_dtype_name(int dtype) {
  return dtype == STRATA_FLOAT32 ? "float32" : dtype == STRATA_INT32 ? "int32" : "?";
}

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

static int wait_for(struct lane *l, struct coll *co, int pos, long units) {
  pthread_mutex_lock(&l->comm->lock);
  int rc = wait_units(l, co, pos, units);
  pthread_mutex_unlock(&l->comm->lock);
  return rc;
}

static void set_units(struct lane *l, struct coll *co, long units) {
  pthread_mutex_lock(&l->comm->lock);
  co->progress[l->pos] = units;
  pthread_cond_broadcast(&l->comm->changed);
  pthread_mutex_unlock(&l->comm->lock);
}

/* ------------------------------------------------------------ steps */

/* A piece of one member's buffer: buffer and element offset. */
struct piece {
  strata_buffer_t buf;
  size_t off;
};

static struct piece at(strata_buffer_t buf, size_t off) {
  struct piece p = {buf, off};
  return p;
}

/* dst = src over n elements, on the lane's queue (dst is on the lane's device). */
static int step_copy(struct lane *l, struct piece dst, struct piece src, size_t n) {
  if (!n || (dst.buf == src.buf && dst.off == src.off))
    return STRATA_OK;
  return strata_buffer_copy(l->q, dst.buf, dst.off * 4, src.buf, src.off * 4, n * 4);
}

static int enqueue_op(struct lane *l, const struct strata__op *op) {
  const struct strata__slot *s = l->dev->slot;
  return s->be->op(s->ctx, l->q->h, op);
}

/* y = a (op) b over n elements on the lane's queue. */
static int step_reduce(struct lane *l, struct coll *co, struct piece y, struct piece a, struct piece b, size_t n) {
  if (!n)
    return STRATA_OK;
  struct strata__op op;
  memset(&op, 0, sizeof op);
  op.id = STRATA__OP_REDUCE;
  op.u.reduce.a.h = a.buf->h;
  op.u.reduce.a.off = a.off;
  op.u.reduce.b.h = b.buf->h;
  op.u.reduce.b.off = b.off;
  op.u.reduce.y.h = y.buf->h;
  op.u.reduce.y.off = y.off;
  op.u.reduce.n = (int64_t)n;
  op.u.reduce.dtype = co->dtype;
  op.u.reduce.op = co->op == STRATA_MAX ? STRATA_MAX : STRATA_SUM;
  return enqueue_op(l, &op);
}

/* x /= size for an average, once, where a segment's sum is complete. */
static int step_average(struct lane *l, struct coll *co, struct piece x, size_t n) {
  if (co->op != STRATA_AVG || !n || co->n == 1)
    return STRATA_OK;
  struct strata__op op;
  memset(&op, 0, sizeof op);
  op.id = STRATA__OP_SCALE;
  op.u.ew.x.h = x.buf->h;
  op.u.ew.x.off = x.off;
  op.u.ew.n = (int64_t)n;
  op.u.ew.alpha = 1.0f / (float)co->n;
  return enqueue_op(l, &op);
}

/* y = mine (op) theirs, where theirs lies on another member's device:
** read in place where the backend allows it, else copied into `tmp` first. */
static int step_reduce_from(struct lane *l, struct coll *co, struct piece y, struct piece mine, struct piece theirs,
                            struct piece tmp, size_t n) {
  if (!n)
    return STRATA_OK;
  if (theirs.buf->dev->slot == l->dev->slot && l->dev->slot->be->peer_operands)
    return step_reduce(l, co, y, mine, theirs, n);
  TRY(step_copy(l, tmp, theirs, n));
  return step_reduce(l, co, y, mine, tmp, n);
}

static int lane_finish(struct lane *l) { return strata_queue_finish(l->q); }

/* ------------------------------------------------------------ algorithms */

/* Segment k of an all-reduce of `count` over n: as even as possible. */
static void ar_segment(size_t count, int n, int k, size_t *off, size_t *len) {
  size_t base = count / (size_t)n, rem = count % (size_t)n;
  *off = (size_t)k * base + ((size_t)k < rem ? (size_t)k : rem);
  *len = base + ((size_t)k < rem ? 1 : 0);
}

static int mod(int a, int n) { return ((a % n) + n) % n; }

/* Chunk c of a segment of `len` elements, chunks of `ce`: offset and length (0 past the end). */
static void chunk_of(size_t len, size_t ce, long c, size_t *off, size_t *n) {
  size_t o = (size_t)c * ce;
  *off = o;
  *n = o >= len ? 0 : (len - o < ce ? len - o : ce);
}

/*
** The ring. Position p receives from prev = p - 1. Every lane runs its
** units in the same order (step-major, chunk-minor), so unit (g, c) of
** position p waits only for unit (g - 1, c) of prev: chunks flow round the
** ring with every hop busy at once. Progress after unit (g, c) is
** 2 + g * nch + c.
**   all-reduce: steps 0 .. n-2 reduce-scatter (position p receives segment
**     p - s - 2 and adds its own, the sum of segment j completing on
**     position j), steps n-1 .. 2n-3 all-gather (receives segment p - s - 1).
**   reduce-scatter: as the first phase, partial sums in two scratch
**     segments used alternately, the last step writing recv.
**   all-gather: step 0 places the member's own block, steps 1 .. n-1
**     receive block p - s - 1 (s = g - 1).
**   broadcast: a chain from the root; one step.
** Segment j of the ring is the block of rank ring[j], so reduce-scatter
** leaves block r on rank r.
*/
static int run_ring(struct lane *l, struct coll *co) {
  struct strata_comm *c = l->comm;
  int n = co->n, p = l->pos, prevp = mod(p - 1, n), nextp = mod(p + 1, n);
  struct member_args *me = &co->m[l->rank], *pv = &co->m[c->ring[prevp]];
  struct lane *pl = &c->lanes[c->ring[prevp]];
  size_t ce = co->ce;
  size_t maxseg = co->kind == COLL_ALLREDUCE ? (co->count + (size_t)n - 1) / (size_t)n : co->count;
  long nch = maxseg ? (long)((maxseg + ce - 1) / ce) : 1;
  struct piece tmp = at(l->scratch, 0);
  int rc = STRATA_OK;

  int steps = co->kind == COLL_ALLREDUCE ? 2 * n - 2
              : co->kind == COLL_REDUCESCATTER ? n - 1
              : co->kind == COLL_ALLGATHER ? n
                                           : 1;
  for (int g = 0; g < steps && !rc; g++) {
    for (long ch = 0; ch < nch && !rc; ch++) {
      long need = g == 0 ? 1 : 2 + (long)(g - 1) * nch + ch;
      size_t so, sn; /* the chunk inside its segment */
      switch (co->kind) {
      case COLL_ALLREDUCE: {
        int rs = g < n - 1, s = rs ? g : g - (n - 1);
        int j = rs ? mod(p - s - 2, n) : mod(p - s - 1, n);
        size_t segoff, seglen;
        ar_segment(co->count, n, c->ring[j], &segoff, &seglen);
        chunk_of(seglen, ce, ch, &so, &sn);
        if ((rc = wait_for(l, co, prevp, need)))
          break;
        size_t e = segoff + so;
        if (rs) {
          struct piece theirs = s == 0 ? at(pv->sbuf, pv->soff + e) : at(pv->rbuf, pv->roff + e);
          struct piece y = at(me->rbuf, me->roff + e);
          rc = step_reduce_from(l, co, y, at(me->sbuf, me->soff + e), theirs, tmp, sn);
          if (!rc && s == n - 2)
            rc = step_average(l, co, y, sn);
        } else {
          rc = step_copy(l, at(me->rbuf, me->roff + e), at(pv->rbuf, pv->roff + e), sn);
        }
        break;
      }
      case COLL_REDUCESCATTER: {
        int s = g, j = mod(p - s - 2, n);
        size_t blk = (size_t)c->ring[j] * co->count;
        chunk_of(co->count, ce, ch, &so, &sn);
        if ((rc = wait_for(l, co, prevp, need)))
          break;
        /* acc[s % 2] is free once next has read what step s - 2 left there */
        if (s >= 2 && (rc = wait_for(l, co, nextp, 2 + (long)(s - 1) * nch + ch)))
          break;
        size_t acc = ce; /* scratch: [tmp chunk | acc0 | acc1] */
        struct piece theirs = s == 0 ? at(pv->sbuf, pv->soff + blk + so)
                                     : at(pl->scratch, acc + (size_t)((s - 1) % 2) * co->count + so);
        struct piece y = s == n - 2 ? at(me->rbuf, me->roff + so) : at(l->scratch, acc + (size_t)(s % 2) * co->count + so);
        rc = step_reduce_from(l, co, y, at(me->sbuf, me->soff + blk + so), theirs, tmp, sn);
        if (!rc && s == n - 2)
          rc = step_average(l, co, y, sn);
        break;
      }
      case COLL_ALLGATHER: {
        chunk_of(co->count, ce, ch, &so, &sn);
        if (g == 0) {
          size_t blk = (size_t)l->rank * co->count;
          rc = step_copy(l, at(me->rbuf, me->roff + blk + so), at(me->sbuf, me->soff + so), sn);
        } else {
          int s = g - 1, j = mod(p - s - 1, n);
          size_t blk = (size_t)c->ring[j] * co->count;
          if ((rc = wait_for(l, co, prevp, need)))
            break;
          rc = step_copy(l, at(me->rbuf, me->roff + blk + so), at(pv->rbuf, pv->roff + blk + so), sn);
        }
        break;
      }
      case COLL_BROADCAST: {
        chunk_of(co->count, ce, ch, &so, &sn);
        if (l->rank == co->root) {
          rc = step_copy(l, at(me->rbuf, me->roff + so), at(me->sbuf, me->soff + so), sn);
        } else {
          if ((rc = wait_for(l, co, prevp, 2 + ch)))
            break;
          rc = step_copy(l, at(me->rbuf, me->roff + so), at(pv->rbuf, pv->roff + so), sn);
        }
        break;
      }
      default:
        break;
      }
      if (rc)
        break;
      if ((rc = lane_finish(l)))
        break;
      set_units(l, co, 2 + (long)g * nch + ch);
    }
  }
  return rc;
}

/*
** Direct: every member reads what it needs from every other member once,
** in rank order, and reduces locally in rank order. One round of latency.
** All-reduce copies every input into scratch slots first and waits until
** every member has done so before writing recv (which may be its send).
*/
static int run_direct(struct lane *l, struct coll *co) {
  struct strata_comm *c = l->comm;
  int n = co->n, r = l->rank;
  struct member_args *me = &co->m[r];
  size_t cnt = co->count;
  int rc = STRATA_OK;
  switch (co->kind) {
  case COLL_ALLREDUCE:
  case COLL_REDUCESCATTER: {
    size_t blk = co->kind == COLL_REDUCESCATTER ? (size_t)r * cnt : 0;
    for (int k = 0; k < n && !rc; k++) {
      struct member_args *o = &co->m[k];
      if (!(rc = wait_for(l, co, c->lanes[k].pos, 1)))
        rc = step_copy(l, at(l->scratch, (size_t)k * cnt), at(o->sbuf, o->soff + blk), cnt);
    }
    if (!rc)
      rc = lane_finish(l);
    if (rc)
      break;
    set_units(l, co, 2);
    for (int k = 0; k < n && !rc && co->kind == COLL_ALLREDUCE; k++)
      rc = wait_for(l, co, k, 2);
    struct piece y = at(me->rbuf, me->roff);
    if (!rc && n == 1)
      rc = step_copy(l, y, at(l->scratch, 0), cnt);
    if (!rc && n > 1)
      rc = step_reduce(l, co, y, at(l->scratch, 0), at(l->scratch, cnt), cnt);
    for (int k = 2; k < n && !rc; k++)
      rc = step_reduce(l, co, y, y, at(l->scratch, (size_t)k * cnt), cnt);
    if (!rc)
      rc = step_average(l, co, y, cnt);
    break;
  }
  case COLL_ALLGATHER:
    for (int k = 0; k < n && !rc; k++) {
      struct member_args *o = &co->m[k];
      if (!(rc = wait_for(l, co, c->lanes[k].pos, 1)))
        rc = step_copy(l, at(me->rbuf, me->roff + (size_t)k * cnt), at(o->sbuf, o->soff), cnt);
    }
    break;
  case COLL_BROADCAST: {
    struct member_args *o = &co->m[co->root];
    if (!(rc = wait_for(l, co, c->lanes[co->root].pos, 1)))
      rc = step_copy(l, at(me->rbuf, me->roff), at(o->sbuf, o->soff), cnt);
    break;
  }
  default: /* barrier: every input ready */
    for (int k = 0; k < n && !rc; k++)
      rc = wait_for(l, co, k, 1);
    break;
  }
  if (!rc)
    rc = lane_finish(l);
  return rc;
}

/* ------------------------------------------------------------ lanes */

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
  if (rc)
    fail_lane(l, co, rc);
  else
    set_units(l, co, 1);
  if (!rc) {
    rc = co->algo == STRATA_COMM_DIRECT ? run_direct(l, co) : run_ring(l, co);
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
  while (co->stopped < co->n) {
    if (pthread_cond_timedwait(&c->changed, &c->lock, &dl) == ETIMEDOUT && co->stopped < co->n) {
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
  if (strata_parse_size(v, &x) != STRATA_OK || (!zero_ok && x == 0) || x > (1ull << 31))
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
    char *end = NULL;
    errno = 0;
    double v = strtod(t, &end);
    if (errno || end == t || *end || !isfinite(v) || v <= 0 || v > 1e6)
      return strata__error(STRATA_ERR_PARSE, "STRATA_COMM_TIMEOUT='%s' is not a number of seconds in (0, 1e6]", t);
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

/* ------------------------------------------------------------ life cycle */

STRATA_API void strata_comm_free(strata_comm_t c) {
  if (!c)
    return;
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
  int rc = STRATA_OK;
  if (!c->devices || !c->ring || !c->lanes) {
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

/* Check that m holds `count` elements on the member's device. */
static int check_mem(struct strata_comm *c, const char *what, int kind, int r, const char *arg, strata_mem_t m,
                     uint64_t count) {
  if (!m.buf)
    return strata__error(STRATA_ERR_INVALID, "%s: %s[%d] has no buffer", kind_names[kind], arg, r);
  if (m.buf->dev->index != c->devices[r]) {
    char lb[200];
    return strata__error(STRATA_ERR_DEVICE_MISMATCH, "%s: %s[%d] is on %s, but rank %d is device %d", what, arg, r,
                         strata__device_label(m.buf->dev, lb, sizeof lb), r, c->devices[r]);
  }
  uint64_t elems = m.buf->size / 4;
  if (m.off > elems || count > elems - m.off)
    return strata__error(STRATA_ERR_RANGE, "%s: %s[%d] needs %llu elements from offset %zu but its buffer holds %llu",
                         what, arg, r, (unsigned long long)count, m.off, (unsigned long long)elems);
  return STRATA_OK;
}

/* Make every lane's scratch hold `elems` elements (waiting for running
** collectives before replacing a smaller one). */
static int ensure_scratch(struct strata_comm *c, size_t elems) {
  if (!elems)
    return STRATA_OK;
  int grow = 0;
  for (int r = 0; r < c->n; r++)
    grow |= !c->lanes[r].scratch || strata_buffer_size(c->lanes[r].scratch) < elems * 4;
  if (!grow)
    return STRATA_OK;
  pthread_mutex_lock(&c->lock);
  wait_idle_locked(c);
  pthread_mutex_unlock(&c->lock);
  for (int r = 0; r < c->n; r++) {
    struct lane *l = &c->lanes[r];
    if (l->scratch && strata_buffer_size(l->scratch) >= elems * 4)
      continue;
    strata_buffer_free(l->scratch);
    l->scratch = NULL;
    TRY(strata_buffer_new(c->devices[r], elems * 4, &l->scratch));
  }
  return STRATA_OK;
}

/*
** Check one collective's arguments, choose its algorithm and hand it to
** every lane (or to the backend's own library). Nothing is enqueued
** anywhere unless every check passed.
*/
static int post(struct strata_comm *c, int kind, const strata_queue_t *queues, const strata_mem_t *send,
                const strata_mem_t *recv, size_t count, int dtype, int op, int root) {
  const char *what = kind_names[kind];
  if (!c)
    return strata__error(STRATA_ERR_INVALID, "%s: communicator is NULL", what);
  if (!queues)
    return strata__error(STRATA_ERR_INVALID, "%s: queues is NULL", what);
  if (kind != COLL_BARRIER && (!send || !recv))
    return strata__error(STRATA_ERR_INVALID, "%s: send or recv is NULL", what);
  if (dtype != STRATA_FLOAT32 && dtype != STRATA_INT32)
    return strata__error(STRATA_ERR_INVALID, "%s: unknown element type %d", what, dtype);
  int reduces = kind == COLL_ALLREDUCE || kind == COLL_REDUCESCATTER;
  if (reduces && op != STRATA_SUM && op != STRATA_AVG && op != STRATA_MAX)
    return strata__error(STRATA_ERR_INVALID, "%s: unknown reduction %d", what, op);
  if (reduces && op == STRATA_AVG && dtype != STRATA_FLOAT32)
    return strata__error(STRATA_ERR_UNSUPPORTED, "%s: avg is for float32 only", what);
  if (kind == COLL_BROADCAST && (root < 0 || root >= c->n))
    return strata__error(STRATA_ERR_RANGE, "broadcast: root %d is not a rank of this group of %d", root, c->n);
  int n = c->n;
  uint64_t total = 0;
  if (!strata__mul_ok(count, (uint64_t)n, &total) || total > (UINT64_MAX >> 3))
    return strata__error(STRATA_ERR_RANGE, "%s: %zu elements x %d members overflow", what, count, n);
  uint64_t scount = kind == COLL_REDUCESCATTER ? total : count, rcount = kind == COLL_ALLGATHER ? total : count;
  for (int r = 0; r < n; r++) {
    if (!queues[r])
      return strata__error(STRATA_ERR_INVALID, "%s: queues[%d] is NULL", what, r);
    if (queues[r]->dev->index != c->devices[r]) {
      char lq[200];
      return strata__error(STRATA_ERR_DEVICE_MISMATCH, "%s: queues[%d] is on %s, but rank %d is device %d", what, r,
                           strata__device_label(queues[r]->dev, lq, sizeof lq), r, c->devices[r]);
    }
    if (kind == COLL_BARRIER)
      continue;
    TRY(check_mem(c, what, kind, r, "recv", recv[r], rcount));
    if (kind == COLL_BROADCAST && r != root)
      continue;
    TRY(check_mem(c, what, kind, r, "send", send[r], scount));
    if (send[r].buf != recv[r].buf)
      continue;
    /* the same buffer: in place, or not overlapping at all */
    uint64_t so = send[r].off, ro = recv[r].off;
    int in_place = kind == COLL_ALLGATHER       ? so == ro + (uint64_t)r * count
                   : kind == COLL_REDUCESCATTER ? ro == so + (uint64_t)r * count
                                                : so == ro;
    if (!in_place && so < ro + rcount && ro < so + scount)
      return strata__error(STRATA_ERR_INVALID,
                           "%s: send[%d] and recv[%d] overlap without being the in-place layout", what, r, r);
  }
  if (kind != COLL_BARRIER && count == 0)
    return STRATA_OK;

  if (c->nccl) {
    void **qh = malloc(sizeof *qh * (size_t)n);
    struct strata__mem *sm = calloc((size_t)n, sizeof *sm), *rm = calloc((size_t)n, sizeof *rm);
    int rc = !qh || !sm || !rm ? strata__error(STRATA_ERR_NOMEM, "%s: out of host memory", what) : STRATA_OK;
    for (int r = 0; r < n && !rc; r++) {
      qh[r] = queues[r]->h;
      if (kind != COLL_BARRIER) {
        rm[r].h = recv[r].buf->h;
        rm[r].off = recv[r].off;
        if (send[r].buf) {
          sm[r].h = send[r].buf->h;
          sm[r].off = send[r].off;
        }
      }
    }
    if (!rc)
      rc = c->nccl_slot->be->comm_coll(c->nccl_slot->ctx, c->nccl, kind, qh, sm, rm, count, dtype, op, root);
    free(qh);
    free(sm);
    free(rm);
    return rc;
  }

  int algo = c->algorithm == STRATA_COMM_RING || c->algorithm == STRATA_COMM_DIRECT ? c->algorithm
             : count * 4 <= c->direct_max || n == 1 || kind == COLL_BARRIER ? STRATA_COMM_DIRECT
                                                                           : STRATA_COMM_RING;
  if (kind == COLL_BARRIER || n == 1)
    algo = STRATA_COMM_DIRECT;
  /* Chunks: at least the configured size, and few enough per segment (at
  ** most RING_CHUNKS, up to 16 MiB each) that handing a chunk from lane to
  ** lane costs little next to moving it. */
  size_t ce = c->chunk_bytes / 4 ? c->chunk_bytes / 4 : 1, scratch = 0;
  size_t seg = kind == COLL_ALLREDUCE ? (count + (size_t)n - 1) / (size_t)n : count;
  size_t few = (seg + RING_CHUNKS - 1) / RING_CHUNKS;
  if (few > ce)
    ce = few < RING_CHUNK_MAX / 4 ? few : (RING_CHUNK_MAX / 4 > ce ? RING_CHUNK_MAX / 4 : ce);
  if (algo == STRATA_COMM_DIRECT && reduces)
    scratch = (size_t)total;
  else if (algo == STRATA_COMM_RING && kind == COLL_ALLREDUCE)
    scratch = ce < count ? ce : count;
  else if (algo == STRATA_COMM_RING && kind == COLL_REDUCESCATTER)
    scratch = ce + 2 * count;
  TRY(ensure_scratch(c, scratch));

  struct coll *co = calloc(1, sizeof *co);
  if (co) {
    co->m = calloc((size_t)n, sizeof *co->m);
    co->progress = calloc((size_t)n, sizeof *co->progress);
  }
  /* one job per lane, each freed by its lane */
  struct job **jobs = calloc((size_t)n, sizeof *jobs);
  int short_of_memory = !co || !co->m || !co->progress || !jobs;
  for (int r = 0; r < n && !short_of_memory; r++)
    short_of_memory = !(jobs[r] = calloc(1, sizeof **jobs));
  if (short_of_memory) {
    if (co) {
      free(co->m);
      free(co->progress);
    }
    free(co);
    for (int r = 0; r < n && jobs; r++)
      free(jobs[r]);
    free(jobs);
    return strata__error(STRATA_ERR_NOMEM, "%s: out of host memory", what);
  }
  co->kind = kind;
  co->dtype = dtype;
  co->op = op;
  co->root = root;
  co->algo = algo;
  co->count = count;
  co->ce = ce;
  co->n = n;
  co->left = n;
  int rc = STRATA_OK;
  for (int r = 0; r < n && !rc; r++) {
    struct member_args *m = &co->m[r];
    if (kind != COLL_BARRIER) {
      m->rbuf = recv[r].buf;
      m->roff = recv[r].off;
      m->sbuf = send[r].buf;
      m->soff = send[r].off;
    }
    const struct strata__slot *s = queues[r]->dev->slot;
    rc = s->be->event_record(s->ctx, queues[r]->h, &m->in_ev);
    if (!rc && c->async) {
      rc = s->be->gate_new(s->ctx, queues[r]->dev->local, &m->gate);
      if (!rc && (rc = s->be->gate_wait(s->ctx, queues[r]->h, m->gate))) {
        s->be->gate_free(s->ctx, m->gate);
        m->gate = NULL;
      }
    }
  }
  if (rc) { /* undo: free the events, open the gates already waited for */
    char msg[700];
    strata__strlcpy(msg, strata_last_error(), sizeof msg);
    for (int r = 0; r < n; r++) {
      const struct strata__slot *s = queues[r]->dev->slot;
      if (co->m[r].in_ev)
        s->be->event_free(s->ctx, co->m[r].in_ev);
      if (co->m[r].gate) {
        s->be->gate_open(s->ctx, co->m[r].gate, rc, msg);
        s->be->gate_free(s->ctx, co->m[r].gate);
      }
    }
    free(co->m);
    free(co->progress);
    free(co);
    for (int r = 0; r < n; r++)
      free(jobs[r]);
    free(jobs);
    return strata__error(rc, "%s", msg);
  }
  pthread_mutex_lock(&c->lock);
  c->pending++;
  for (int r = 0; r < n; r++) {
    struct lane *l = &c->lanes[r];
    jobs[r]->coll = co;
    if (l->tail)
      l->tail->next = jobs[r];
    else
      l->head = jobs[r];
    l->tail = jobs[r];
    pthread_cond_signal(&l->wake);
  }
  pthread_mutex_unlock(&c->lock);
  free(jobs);
  if (c->async)
    return STRATA_OK;
  return strata_comm_finish(c);
}

STRATA_API int strata_allreduce(strata_comm_t c, const strata_queue_t *queues, const strata_mem_t *send,
                                const strata_mem_t *recv, size_t count, int dtype, int op) {
  return post(c, COLL_ALLREDUCE, queues, send, recv, count, dtype, op, 0);
}

STRATA_API int strata_allgather(strata_comm_t c, const strata_queue_t *queues, const strata_mem_t *send,
                                const strata_mem_t *recv, size_t count, int dtype) {
  return post(c, COLL_ALLGATHER, queues, send, recv, count, dtype, STRATA_SUM, 0);
}

STRATA_API int strata_reducescatter(strata_comm_t c, const strata_queue_t *queues, const strata_mem_t *send,
                                    const strata_mem_t *recv, size_t count, int dtype, int op) {
  return post(c, COLL_REDUCESCATTER, queues, send, recv, count, dtype, op, 0);
}

STRATA_API int strata_broadcast(strata_comm_t c, const strata_queue_t *queues, const strata_mem_t *send,
                                const strata_mem_t *recv, size_t count, int dtype, int root) {
  return post(c, COLL_BROADCAST, queues, send, recv, count, dtype, STRATA_SUM, root);
}

STRATA_API int strata_comm_barrier(strata_comm_t c, const strata_queue_t *queues) {
  return post(c, COLL_BARRIER, queues, NULL, NULL, 0, STRATA_FLOAT32, STRATA_SUM, 0);
}

STRATA_API int strata_allreduce_sync(strata_comm_t c, const strata_queue_t *queues, const strata_mem_t *send,
                                     const strata_mem_t *recv, size_t count, int dtype, int op) {
  TRY(strata_allreduce(c, queues, send, recv, count, dtype, op));
  TRY(strata_comm_finish(c));
  for (int r = 0; r < c->n; r++)
    TRY(strata_queue_finish(queues[r]));
  return STRATA_OK;
}
