/* SPDX-License-Identifier: MIT */
/* joins.c — the collectives a step posts (ordered against a failure's abort), and tensor parallelism's joins inside a
** sharded stage: all-reduces over its slices, settled by the TP_JOIN actions. */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/file.h"
#include "comm/comm.h"
#include "train/ranks.h"
#include "device/registry.h"
#include "train/trainer.h"


/*
** Post one of the step's collectives (of the operands' type), ordered against a failure's
** abort by the trainer's lock: an abort either comes first (the post is
** refused) or finds the collective open and fails it. A communicator that
** enqueues returns the completion in *done (NULL: the member's queue waits
** for it); one that cannot enqueue (no gates) is waited for here, on the
** host, after the lock is let go, and reports this member's own status (the
** lanes' timeout bounds a member that never comes); its completion, already
** finished, still goes to *done, whose release tells when the data moved.
*/
int strata__post_collective(strata_trainer_t tr, strata_comm_t c, int async, int kind, int rank, strata_queue_t q,
                            strata_mem_t send, strata_mem_t recv, size_t count, int op, void **done) {
  return strata__post_collective_to(tr, c, async, kind, rank, 0, q, send, recv, count, op, done);
}

int strata__post_collective_to(strata_trainer_t tr, strata_comm_t c, int async, int kind, int rank, int root,
                               strata_queue_t q, strata_mem_t send, strata_mem_t recv, size_t count, int op,
                               void **done) {
  void *mine = NULL;
  if (done)
    *done = NULL;
  TRY(strata__trainer_post_begin(tr));
  int rc = strata__comm_post_rank(c, kind, rank, q, send, recv, count, send.dtype, op, root, async ? done : &mine);
  strata__trainer_post_end(tr);
  if (async || rc)
    return rc;
  rc = strata__comm_wait(c, q, mine);
  if (rc || !done)
    strata__comm_release(c, mine, NULL, NULL);
  else
    *done = mine;
  return rc;
}

/* ---- tensor-parallel joins ---- */

/*
** A sharded stage's join: an all-reduce over the slices, posted on the
** stage's queue. The queue waits for it (its next op reads the sum) and the
** action's TP_JOIN accounts for it. A communicator that cannot enqueue
** (CUDA outside NCCL) waits in the call.
*/
/* Room for one more join in the member's list. */
static int member_grow(struct strata__tp_member *m) {
  if (m->n < m->cap)
    return STRATA_OK;
  int cap = m->cap ? 2 * m->cap : 16;
  void **p = realloc(m->pending, (size_t)cap * sizeof *p);
  if (p)
    m->pending = p;
  uint64_t *b = p ? realloc(m->bytes, (size_t)cap * sizeof *b) : NULL;
  if (b)
    m->bytes = b;
  double *t = b ? realloc(m->posted, (size_t)cap * sizeof *t) : NULL;
  if (t)
    m->posted = t;
  double *e = t ? realloc(m->ended, (size_t)cap * sizeof *e) : NULL;
  if (e)
    m->ended = e;
  const char **o = e ? realloc(m->op, (size_t)cap * sizeof *o) : NULL;
  if (o)
    m->op = o;
  unsigned char *l = o ? realloc(m->later, (size_t)cap * sizeof *l) : NULL;
  if (!l)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory for a tensor-parallel join");
  m->later = l;
  m->cap = cap;
  return STRATA_OK;
}

int strata__tp_join(void *member, strata_queue_t q, strata_mem_t x, size_t count, int op) {
  struct strata__tp_member *m = member;
  TRY(member_grow(m));
  const int k = m->n;
  m->bytes[k] = (uint64_t)count * 4;
  m->posted[k] = strata__now();
  m->pending[k] = NULL;
  const struct strata__stage *st = m->tr->st[m - m->tr->tp_member];
  m->op[k] = st && st->join_what ? st->join_what : "allreduce"; /* (spatial slabs' halo exchanges: their own name) */
  m->later[k] = 0;
  if (m->across) { /* the slices are on several ranks: through the cluster, done in the call */
    TRY(strata__ranks_join(m->tr, (int)(m - m->tr->tp_member), q, x, count, op));
    m->ended[k] = strata__now();
    m->n++;
    return STRATA_OK;
  }
  TRY(strata__post_collective(m->tr, m->comm, m->async, STRATA__COLL_ALLREDUCE, m->rank, q, x, x, count, op, &m->pending[k]));
  m->n++;
  if (!m->async) { /* done in the call */
    m->ended[k] = strata__now();
    return STRATA_OK;
  }
  if (st && st->join_later) { /* the queue waits for it at the stage's join_wait (or the settle) */
    m->later[k] = 1;
    return STRATA_OK;
  }
  return strata__comm_wait(m->comm, q, m->pending[k]);
}

int strata__tp_join_wait(void *member, strata_queue_t q) {
  struct strata__tp_member *m = member;
  for (int i = 0; i < m->n; i++)
    if (m->later[i]) {
      m->later[i] = 0;
      TRY(strata__comm_wait(m->comm, q, m->pending[i]));
    }
  return STRATA_OK;
}

/*
** Sequence parallelism's collectives over the slices (stage.h's seq hook), posted and accounted as the joins are: an
** all-gather (each slice's `count` elements at send into recv, slice by slice) or a reduce-scatter in place. Each is
** its own event in the trace ("all_gather", "reduce_scatter"), of the bytes each slice contributes.
*/
int strata__tp_seq(void *member, strata_queue_t q, int gather, strata_mem_t send, strata_mem_t recv, size_t count) {
  struct strata__tp_member *m = member;
  if (m->across)
    return strata__error(STRATA_ERR_UNSUPPORTED, "sequence parallelism across MPI ranks is not built yet");
  TRY(member_grow(m));
  const int k = m->n;
  const int slices = strata__stage_tp(m->tr, (int)(m - m->tr->tp_member)); /* a reduce-scatter's send is all of them */
  m->bytes[k] = (uint64_t)count * strata_dtype_size(send.dtype) * (gather ? 1 : (uint64_t)slices);
  m->posted[k] = strata__now();
  m->pending[k] = NULL;
  m->op[k] = gather ? "all_gather" : "reduce_scatter";
  m->later[k] = 0;
  TRY(strata__post_collective(m->tr, m->comm, m->async, gather ? STRATA__COLL_ALLGATHER : STRATA__COLL_REDUCESCATTER,
                              m->rank, q, send, recv, count, STRATA_SUM, &m->pending[k]));
  m->n++;
  if (!m->async) {
    m->ended[k] = strata__now();
    return STRATA_OK;
  }
  return strata__comm_wait(m->comm, q, m->pending[k]);
}

int strata__tp_settle(strata_trainer_t tr, int s, strata__join_trace_fn fn, void *arg) {
  if (!tr->tp_member)
    return STRATA_OK;
  struct strata__tp_member *m = &tr->tp_member[s];
  int rc = strata__tp_join_wait(m, tr->st[s]->q); /* (a stage's own code waits for what it posted later: none left) */
  int fin = strata_queue_finish(tr->st[s]->q);
  rc = rc ? rc : fin;
  for (int i = 0; i < m->n; i++) {
    double t0 = m->posted[i], t1 = m->ended[i];
    if (m->pending[i]) {
      double a = 0, b = 0;
      strata__comm_release(m->comm, m->pending[i], &a, &b);
      t0 = a > t0 ? a : t0; /* when its data moved */
      t1 = b;
    }
    if (fn && !rc)
      fn(arg, m->op[i], m->bytes[i], t0, t1 > t0 ? t1 : t0);
  }
  m->n = 0;
  return rc;
}

void strata__tp_drop(strata_trainer_t tr, int s) {
  if (!tr->tp_member)
    return;
  struct strata__tp_member *m = &tr->tp_member[s];
  if (m->n && tr->st[s])
    strata_queue_finish(tr->st[s]->q);
  for (int i = 0; i < m->n; i++)
    if (m->pending[i])
      strata__comm_release(m->comm, m->pending[i], NULL, NULL);
  m->n = 0;
}
