/* SPDX-License-Identifier: MIT */
/* algorithms.c — a lane's part of a collective, as steps on its queue: the chunked ring or direct reads. */
#include "config.h"

#include <string.h>

#include <strata/comm.h>

#include "comm/comm.h"
#include "comm/lanes.h"
#include "device/registry.h"

/* ------------------------------------------------------------ steps */

/* A piece of one member's buffer: buffer and offset, in elements of the collective's type. */
struct piece {
  strata_buffer_t buf;
  size_t off;
};

static struct piece at(strata_buffer_t buf, size_t off) {
  struct piece p = {buf, off};
  return p;
}

/* dst = src over n elements, on the lane's queue (dst is on the lane's device): bytes, whatever the type. */
static int step_copy(struct lane *l, struct coll *co, struct piece dst, struct piece src, size_t n) {
  if (!n || (dst.buf == src.buf && dst.off == src.off))
    return STRATA_OK;
  size_t es = co->esize;
  if (src.buf->dev != l->dev) /* (bytes read from another member: strata_comm_info's moved_bytes) */
    __atomic_fetch_add(&l->comm->moved, (uint64_t)(n * es), __ATOMIC_RELAXED);
  return strata_buffer_copy(l->q, dst.buf, dst.off * es, src.buf, src.off * es, n * es);
}

static int enqueue_op(struct lane *l, const struct strata__op *op) {
  const struct strata__slot *s = l->dev->slot;
  return s->be->op(s->ctx, l->q->h, op);
}

/*
** y = a (op) b over n elements on the lane's queue. bfloat16 adds in
** float32 and rounds once (the backend's REDUCE); the record's types say
** so, and a backend without bfloat16 refuses it, failing the collective.
*/
static int step_reduce(struct lane *l, struct coll *co, struct piece y, struct piece a, struct piece b, size_t n) {
  if (!n)
    return STRATA_OK;
  struct strata__op op;
  memset(&op, 0, sizeof op);
  op.id = STRATA__OP_REDUCE;
  op.dtypes = 1u << co->dtype;
  op.u.reduce.a.h = a.buf->h;
  op.u.reduce.a.off = a.off;
  op.u.reduce.a.dtype = co->dtype;
  op.u.reduce.b.h = b.buf->h;
  op.u.reduce.b.off = b.off;
  op.u.reduce.b.dtype = co->dtype;
  op.u.reduce.y.h = y.buf->h;
  op.u.reduce.y.off = y.off;
  op.u.reduce.y.dtype = co->dtype;
  op.u.reduce.n = (int64_t)n;
  op.u.reduce.dtype = co->dtype;
  op.u.reduce.op = co->op == STRATA_MAX ? STRATA_MAX : STRATA_SUM;
  return enqueue_op(l, &op);
}

/* x /= size for an average, once, where a segment's sum is complete (bfloat16: rounded once more). */
static int step_average(struct lane *l, struct coll *co, struct piece x, size_t n) {
  if (co->op != STRATA_AVG || !n || co->n == 1)
    return STRATA_OK;
  struct strata__op op;
  memset(&op, 0, sizeof op);
  op.id = STRATA__OP_SCALE;
  op.dtypes = 1u << co->dtype;
  op.u.ew.x.h = x.buf->h;
  op.u.ew.x.off = x.off;
  op.u.ew.x.dtype = co->dtype;
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
  if (theirs.buf->dev->slot == l->dev->slot && l->dev->slot->be->peer_operands) {
    if (theirs.buf->dev != l->dev)
      __atomic_fetch_add(&l->comm->moved, (uint64_t)(n * co->esize), __ATOMIC_RELAXED);
    return step_reduce(l, co, y, mine, theirs, n);
  }
  TRY(step_copy(l, co, tmp, theirs, n));
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
**   reduce: a chain to the root, one step: the position after the root's
**     starts it with its input, each next one adds its own to what the one
**     before holds (partial sums in its scratch), the root last into recv.
**     Each member's input crosses one hop: half the bytes of an all-reduce's
**     reduce-scatter and all-gather.
** Segment j of the ring is the block of rank ring[j], so reduce-scatter
** leaves block r on rank r.
*/
int strata__run_ring(struct lane *l, struct coll *co) {
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
        if ((rc = strata__wait_for(l, co, prevp, need)))
          break;
        size_t e = segoff + so;
        if (rs) {
          struct piece theirs = s == 0 ? at(pv->sbuf, pv->soff + e) : at(pv->rbuf, pv->roff + e);
          struct piece y = at(me->rbuf, me->roff + e);
          rc = step_reduce_from(l, co, y, at(me->sbuf, me->soff + e), theirs, tmp, sn);
          if (!rc && s == n - 2)
            rc = step_average(l, co, y, sn);
        } else {
          rc = step_copy(l, co, at(me->rbuf, me->roff + e), at(pv->rbuf, pv->roff + e), sn);
        }
        break;
      }
      case COLL_REDUCESCATTER: {
        int s = g, j = mod(p - s - 2, n);
        size_t blk = (size_t)c->ring[j] * co->count;
        chunk_of(co->count, ce, ch, &so, &sn);
        if ((rc = strata__wait_for(l, co, prevp, need)))
          break;
        /* acc[s % 2] is free once next has read what step s - 2 left there */
        if (s >= 2 && (rc = strata__wait_for(l, co, nextp, 2 + (long)(s - 1) * nch + ch)))
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
          rc = step_copy(l, co, at(me->rbuf, me->roff + blk + so), at(me->sbuf, me->soff + so), sn);
        } else {
          int s = g - 1, j = mod(p - s - 1, n);
          size_t blk = (size_t)c->ring[j] * co->count;
          if ((rc = strata__wait_for(l, co, prevp, need)))
            break;
          rc = step_copy(l, co, at(me->rbuf, me->roff + blk + so), at(pv->rbuf, pv->roff + blk + so), sn);
        }
        break;
      }
      case COLL_REDUCE: {
        /* place in the chain (n - 1: the root); scratch: a middle one's partial sums, where what the one before
        ** holds is copied first when the backend cannot read it in place, or the root's copy of a chunk */
        const int k = mod(p - c->lanes[co->root].pos - 1, n);
        chunk_of(co->count, ce, ch, &so, &sn);
        if (k == 0) /* its input is what the next one reads */
          break;
        if ((rc = strata__wait_for(l, co, prevp, 2 + ch)))
          break;
        struct piece theirs = k == 1 ? at(pv->sbuf, pv->soff + so) : at(pl->scratch, so);
        struct piece y = k == n - 1 ? at(me->rbuf, me->roff + so) : at(l->scratch, so);
        rc = step_reduce_from(l, co, y, at(me->sbuf, me->soff + so), theirs, k == n - 1 ? tmp : y, sn);
        if (!rc && k == n - 1)
          rc = step_average(l, co, y, sn);
        break;
      }
      case COLL_BROADCAST: {
        chunk_of(co->count, ce, ch, &so, &sn);
        if (l->rank == co->root) {
          rc = step_copy(l, co, at(me->rbuf, me->roff + so), at(me->sbuf, me->soff + so), sn);
        } else {
          if ((rc = strata__wait_for(l, co, prevp, 2 + ch)))
            break;
          rc = step_copy(l, co, at(me->rbuf, me->roff + so), at(pv->rbuf, pv->roff + so), sn);
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
      strata__set_units(l, co, 2 + (long)g * nch + ch);
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
int strata__run_direct(struct lane *l, struct coll *co) {
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
      if (!(rc = strata__wait_for(l, co, c->lanes[k].pos, 1)))
        rc = step_copy(l, co, at(l->scratch, (size_t)k * cnt), at(o->sbuf, o->soff + blk), cnt);
    }
    if (!rc)
      rc = lane_finish(l);
    if (rc)
      break;
    strata__set_units(l, co, 2);
    for (int k = 0; k < n && !rc && co->kind == COLL_ALLREDUCE; k++)
      rc = strata__wait_for(l, co, k, 2);
    struct piece y = at(me->rbuf, me->roff);
    if (!rc && n == 1)
      rc = step_copy(l, co, y, at(l->scratch, 0), cnt);
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
      if (!(rc = strata__wait_for(l, co, c->lanes[k].pos, 1)))
        rc = step_copy(l, co, at(me->rbuf, me->roff + (size_t)k * cnt), at(o->sbuf, o->soff), cnt);
    }
    break;
  case COLL_REDUCE: { /* the root reads every other member's input in rank order and adds it to its own */
    if (r != co->root)
      break; /* its input is read where it lies */
    struct piece y = at(me->rbuf, me->roff), tmp = at(l->scratch, 0);
    int first = 1;
    for (int k = 0; k < n && !rc; k++) {
      struct member_args *o = &co->m[k];
      if (k == r || (rc = strata__wait_for(l, co, c->lanes[k].pos, 1)))
        continue;
      rc = step_reduce_from(l, co, y, first ? at(me->sbuf, me->soff) : y, at(o->sbuf, o->soff), tmp, cnt);
      first = 0;
    }
    if (!rc && first) /* one member */
      rc = step_copy(l, co, y, at(me->sbuf, me->soff), cnt);
    if (!rc)
      rc = step_average(l, co, y, cnt);
    break;
  }
  case COLL_BROADCAST: {
    struct member_args *o = &co->m[co->root];
    if (!(rc = strata__wait_for(l, co, c->lanes[co->root].pos, 1)))
      rc = step_copy(l, co, at(me->rbuf, me->roff), at(o->sbuf, o->soff), cnt);
    break;
  }
  default: /* barrier: every input ready */
    for (int k = 0; k < n && !rc; k++)
      rc = strata__wait_for(l, co, k, 1);
    break;
  }
  if (!rc)
    rc = lane_finish(l);
  return rc;
}
