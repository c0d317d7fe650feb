/* SPDX-License-Identifier: MIT */
/* executor.c — the one executor: runs per-device action lists (a training step's schedule, or a pass derived from it),
** one worker per device executing its list (the process's only device in the caller's thread), a sender per device
** that sends, receivers for messages from other ranks, the cross-stage optimizer barrier, gradient collectives. */
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

/* A message waiting on its receiver's device: a stage input or an output gradient. */
struct msg {
  strata_buffer_t buf;
  int posted;
};

struct job {
  struct job *next;
  int kind;                  /* STRATA_ACTION_SEND_ACT or _SEND_GRAD */
  int stage, mb;             /* the sending stage */
  strata_mem_t src;
  size_t bytes;
  int dst_dev;
  int to;                    /* the receiving stage; another rank's when dst is NULL */
  int apart;                 /* an output kept apart from the stage's slot (out_apart): its buffer goes back to the
                             ** stage's output pool once every copy is made */
  struct msg *dst;
  struct strata__pool *pool;  /* receive buffers of the destination, reused from step to step */
  int p;                     /* its index in tr->pools */
};

struct sender {
  pthread_t thread;
  int started;
  struct job *head, *tail;
  int stop;
  strata_queue_t q;          /* copy queue on the rank's device */
  pthread_cond_t cond;       /* a job for it, the end of the step, or a failure */
};

struct exec {
  strata_trainer_t tr;
  const struct strata__work *w; /* what this run does: its lists, micro-batches, update and hooks */
  int traced;                /* a training step of a traced trainer: its actions go into the trace */
  int m, S;
  pthread_mutex_t lock;
  /* each thread waits on its own condition, signalled only for what it waits for: on a box with fewer cores than
  ** threads, waking every waiter at each message cost pp 4 hundreds of context switches a step */
  pthread_cond_t *wake;      /* [ndev]: rank r's worker (a message for one of its stages, the update's go) */
  int nwake;                 /* how many of wake[] and snd[].cond are initialised */
  int failed;
  int fail_status;
  char fail_msg[4096];
  struct msg *act, *grad;    /* [S x m]: input of stage s / gradient of stage s's output, micro-batch mb */
  int *hold_act;             /* [S x m]: what still keeps slot (s, mb)'s activations ... */
  int *hold_grad;            /* ... and its boundary gradients */
  int *hold_out;             /* [S x m]: what still keeps the output buffer of (s, mb) (a stage with out_apart) ... */
  strata_buffer_t *outb;     /* ... that buffer, lent by the stage's output pool (tr->pools[2 S + s]) */
  int *inflight, *peak;      /* per stage: micro-batches whose activations are held */
  int *pending;              /* [S x m]: bit 1 activations, bit 2 gradients ready to be freed by the rank's worker */
  int *slot;                 /* [S x m]: the stage's slot holding micro-batch mb (taken at its forward), -1 before */
  int opt_arrived;
  int opt_ready;
  int chain;                 /* stages per replica */
  int held;                  /* stages this process's devices hold (each has an OPTIMIZER) */
  void **done;               /* [S]: the completion of each stage's gradient reduce-scatter (ZeRO), until its OPTIMIZER */
  double *done_post;         /* [S]: when it was posted (0: not this step) */
  struct strata__buckets *bk; /* [S]: data parallelism: each stage's gradient buckets (buckets.c) */
  struct shard_hook *zh;     /* [S]: ZeRO-2: what each stage's backward hands its layers' gradients to */
  struct strata__gather_hook *gh; /* [S]: ZeRO-3: what each stage's gathers are for (gather.c) */
  float gscale, norm, lr;
  double *busy;              /* [ndev] */
  struct sender *snd;        /* [ndev] */
  struct strata__chain ch;   /* the ends of forwards and backwards, and of the pool buffers' reads, as events */
};

struct worker_arg {
  struct exec *ex;
  int rank;
};

/* ZeRO-2: the backward of micro-batch `mb` of stage s on `rank` (stage.h's gradient window). */
struct shard_hook {
  struct exec *ex;
  int s, rank, mb;
};

static int rank_of(const struct exec *ex, int s) { return ex->tr->stage_rank[s]; }

static int shard_ready(void *arg, size_t lo, size_t hi, strata_mem_t g);

/* ZeRO-2/3: stage s's hooks for micro-batch mb (`on`; else cleared): a training backward's (`grads`) reductions of
** the gradient window, and ZeRO-3's gathers of the parameter window in every forward and backward. */
static void zero_hooks(struct exec *ex, struct strata__stage *st, int s, int rank, int mb, int grads, int on) {
  if (ex->zh)
    ex->zh[s] = (struct shard_hook){ex, s, rank, mb};
  if (ex->gh)
    ex->gh[s] = (struct strata__gather_hook){ex->tr, &ex->lock, s, rank, mb};
  st->grads_flush = on && grads && ex->zh && ex->w->train ? shard_ready : NULL;
  st->grads_flush_arg = st->grads_flush ? &ex->zh[s] : NULL;
  st->params_fetch = on && st->zero3 && ex->gh ? strata__gather_fetch : NULL;
  st->params_landed = st->params_fetch && ex->traced ? strata__gather_landed : NULL;
  st->params_fetch_arg = st->params_fetch ? &ex->gh[s] : NULL;
}

/* Record the first failure; every waiting thread wakes up and stops. */
static void fail(struct exec *ex, int status, const char *what) {
  pthread_mutex_lock(&ex->lock);
  if (!ex->failed) {
    ex->failed = 1;
    ex->fail_status = status;
    snprintf(ex->fail_msg, sizeof ex->fail_msg, "%s: %s", what, strata_last_error());
  }
  for (int r = 0; r < ex->nwake; r++) {
    ex->snd[r].stop = 1;
    pthread_cond_broadcast(&ex->snd[r].cond);
    pthread_cond_broadcast(&ex->wake[r]);
  }
  pthread_mutex_unlock(&ex->lock);
  /* replicas and slices waiting in a collective for this one must not wait for the timeout */
  strata__trainer_abort(ex->tr, status, what);
  /* nor this rank's receivers waiting for another rank's messages (a pipeline across ranks) */
  strata__ranks_abort(ex->tr, status, ex->fail_msg); /* (the first failure's, set once) */
}

enum { ACT = 1, GRAD = 2 };

/* Drop one hold on the activations (ACT) or gradients (GRAD) of slot
** (s, mb); the last one marks that half for release. Caller holds the lock. */
static void drop_locked(struct exec *ex, int s, int mb, int what) {
  int k = s * ex->m + mb;
  int *h = what == ACT ? &ex->hold_act[k] : &ex->hold_grad[k];
  if (--*h == 0) {
    ex->pending[k] |= what;
    if (what == ACT)
      ex->inflight[s]--;
  }
}

static void drop(struct exec *ex, int s, int mb, int what) {
  pthread_mutex_lock(&ex->lock);
  drop_locked(ex, s, mb, what);
  pthread_mutex_unlock(&ex->lock);
}

/* Free the slots of this rank's stages that nothing holds any more. */
static void release_pending(struct exec *ex, int rank) {
  for (int s = 0; s < ex->S; s++) {
    if (rank_of(ex, s) != rank || !ex->tr->st[s])
      continue;
    for (int mb = 0; mb < ex->m; mb++) {
      int k = s * ex->m + mb;
      pthread_mutex_lock(&ex->lock);
      int go = ex->pending[k];
      ex->pending[k] = 0;
      pthread_mutex_unlock(&ex->lock);
      if (go & ACT)
        strata__stage_release_activations(ex->tr->st[s], ex->slot[k]);
      if (go & GRAD)
        strata__stage_release_gradients(ex->tr->st[s], ex->slot[k]);
    }
  }
}

/* Drop one hold on the output buffer of (s, mb); the last gives it back to the stage's output pool behind the work
** queued on q (its last reader; NULL: none queued) and wakes the stage's worker, which may wait for it. */
static int out_drop(struct exec *ex, int s, int mb, strata_queue_t q) {
  const int k = s * ex->m + mb, p = 2 * ex->S + s;
  pthread_mutex_lock(&ex->lock);
  strata_buffer_t b = --ex->hold_out[k] == 0 ? ex->outb[k] : NULL;
  if (b)
    ex->outb[k] = NULL;
  pthread_mutex_unlock(&ex->lock);
  if (!b)
    return STRATA_OK;
  const int rc = strata__chain_pool_return(&ex->ch, &ex->lock, &ex->tr->pools[p], p, q, b);
  pthread_mutex_lock(&ex->lock);
  pthread_cond_signal(&ex->wake[rank_of(ex, s)]);
  pthread_mutex_unlock(&ex->lock);
  return rc;
}

/* A buffer of stage s's output pool for a forward on `rank`, waited for while the pool's are all lent (their copies
** on the way: the sender makes them without the worker, so the wait ends). */
static int out_take(struct exec *ex, int rank, int s, strata_buffer_t *b) {
  const int p = 2 * ex->S + s;
  struct strata__pool *pool = &ex->tr->pools[p];
  for (;;) {
    TRY(strata__chain_pool_take(&ex->ch, &ex->lock, pool, p, ex->tr->st[s]->q, b));
    if (*b)
      return STRATA_OK;
    pthread_mutex_lock(&ex->lock);
    while (!pool->n && !ex->failed)
      pthread_cond_wait(&ex->wake[rank], &ex->lock);
    const int failed = ex->failed;
    pthread_mutex_unlock(&ex->lock);
    if (failed)
      return strata__error(STRATA_ERR_STATE, "the step failed elsewhere while stage %d waited for an output buffer",
                           s);
  }
}

static void trace(struct exec *ex, const char *cat, int kind, int s, int mb, double t0, double t1, int tid) {
  if (!ex->traced)
    return;
  char name[24];
  if (kind == STRATA_ACTION_OPTIMIZER)
    snprintf(name, sizeof name, "OPT%d", s);
  else if (kind < 0)
    snprintf(name, sizeof name, "%s", cat);
  else
    snprintf(name, sizeof name, "%s%d.%d", strata_action_label(kind), s, mb);
  pthread_mutex_lock(&ex->lock);
  strata__trace_add(ex->tr, name, cat, t0, t1, tid);
  pthread_mutex_unlock(&ex->lock);
}

/* ---- sender threads ---- */

static void *sender_main(void *arg) {
  struct worker_arg *wa = arg;
  struct exec *ex = wa->ex;
  struct sender *sd = &ex->snd[wa->rank];
  for (;;) {
    pthread_mutex_lock(&ex->lock);
    while (!sd->head && !sd->stop)
      pthread_cond_wait(&sd->cond, &ex->lock);
    struct job *j = sd->head;
    if (!j || ex->failed) {
      pthread_mutex_unlock(&ex->lock);
      break;
    }
    sd->head = j->next;
    if (!sd->head)
      sd->tail = NULL;
    pthread_mutex_unlock(&ex->lock);
    double t0 = strata__now();
    const int grad = j->kind == STRATA_ACTION_SEND_GRAD, k = j->stage * ex->m + j->mb;
    /* the copy queue runs after the stage's queue has produced what it sends (an event, not a wait) */
    int crc = strata__chain_after(&ex->ch, grad, k, sd->q, ex->tr->st[j->stage]->q);
    if (!j->dst) { /* to another rank: through the cluster, from the stage's memory (host-staged) */
      int rc = crc ? crc : strata__ranks_send(ex->tr, j->to, grad, j->mb, sd->q, j->src, j->bytes);
      if (rc) {
        char what[200];
        snprintf(what, sizeof what, "device %d, %s%d.%d (send to stage %d on another rank)",
                 strata__rank_device(ex->tr, wa->rank), strata_action_label(j->kind), j->stage, j->mb, j->to);
        fail(ex, rc, what);
        free(j);
        break;
      }
      trace(ex, "send", j->kind, j->stage, j->mb, t0, strata__now(), 2 * wa->rank + 1);
      if (j->apart) /* (the copy queue's work read it) */
        rc = out_drop(ex, j->stage, j->mb, sd->q);
      else
        drop(ex, j->stage, j->mb, j->kind == STRATA_ACTION_SEND_ACT ? ACT : GRAD); /* (no thread waits on a hold) */
      free(j);
      if (rc) {
        fail(ex, rc, "returning a sent output to its pool");
        break;
      }
      continue;
    }
    strata_buffer_t b = NULL;
    int rc = crc ? crc : strata__chain_pool_take(&ex->ch, &ex->lock, j->pool, j->p, sd->q, &b);
    if (!rc && !b)
      rc = strata_buffer_new(j->dst_dev, j->bytes, &b);
    if (!rc)
      rc = strata_buffer_copy(sd->q, b, 0, j->src.buf, strata__mem_byte(j->src), j->bytes);
    if (!rc) /* (the copy thread waits, not the worker: the message is whole, the sent slot free once it is posted) */
      rc = strata_queue_finish(sd->q);
    if (rc) {
      strata_buffer_free(b);
      char what[240], label[160];
      snprintf(what, sizeof what, "%s, %s%d.%d (copy to device %d)",
               strata__device_label(strata__device_get(ex->tr->dev[wa->rank]), label, sizeof label),
               strata_action_label(j->kind), j->stage, j->mb, j->dst_dev);
      fail(ex, rc, what);
      free(j);
      break;
    }
    trace(ex, "send", j->kind, j->stage, j->mb, t0, strata__now(), 2 * wa->rank + 1);
    pthread_mutex_lock(&ex->lock);
    j->dst->buf = b;
    j->dst->posted = 1;
    if (!j->apart)
      drop_locked(ex, j->stage, j->mb, j->kind == STRATA_ACTION_SEND_ACT ? ACT : GRAD);
    pthread_cond_signal(&ex->wake[rank_of(ex, j->to)]); /* the receiving stage's worker, alone */
    pthread_mutex_unlock(&ex->lock);
    rc = j->apart ? out_drop(ex, j->stage, j->mb, NULL) : STRATA_OK; /* (copied: the queue is through) */
    free(j);
    if (rc) {
      fail(ex, rc, "returning a sent output to its pool");
      break;
    }
  }
  return NULL;
}

static void send_job(struct exec *ex, int rank, struct job *j) {
  struct sender *sd = &ex->snd[rank];
  pthread_mutex_lock(&ex->lock);
  j->next = NULL;
  if (sd->tail)
    sd->tail->next = j;
  else
    sd->head = j;
  sd->tail = j;
  pthread_cond_signal(&sd->cond);
  pthread_mutex_unlock(&ex->lock);
}

/* Rank `rank`'s worker waits for a message; returns 0 when it is there, -1 when the run failed. */
static int wait_msg(struct exec *ex, int rank, struct msg *mg) {
  pthread_mutex_lock(&ex->lock);
  while (!mg->posted && !ex->failed)
    pthread_cond_wait(&ex->wake[rank], &ex->lock);
  int ok = mg->posted && !ex->failed;
  pthread_mutex_unlock(&ex->lock);
  return ok ? 0 : -1;
}

/* Take a posted message's buffer into dst (on q); the buffer goes back to
** its pool for the next message across the same boundary. */
static int consume(struct exec *ex, struct msg *mg, int p, strata_queue_t q, strata_mem_t dst, size_t bytes) {
  int rc = strata_buffer_copy(q, dst.buf, strata__mem_byte(dst), mg->buf, 0, bytes);
  pthread_mutex_lock(&ex->lock);
  strata_buffer_t b = mg->buf;
  mg->buf = NULL;
  pthread_mutex_unlock(&ex->lock);
  if (rc) {
    strata_queue_finish(q); /* (a failed copy: nothing reads b once the queue is through) */
    strata_buffer_free(b);
    return rc;
  }
  return strata__chain_pool_return(&ex->ch, &ex->lock, &ex->tr->pools[p], p, q, b); /* (no wait: behind the copy) */
}

/* Does device r's list send anything (an activation or a gradient)? Only such a device needs a sender thread. */
static int list_sends(strata_schedule_t sched, int r) {
  int n = 0;
  const struct strata_action *list = strata_schedule_actions(sched, r, &n);
  for (int i = 0; i < n; i++)
    if (list[i].kind == STRATA_ACTION_SEND_ACT || list[i].kind == STRATA_ACTION_SEND_GRAD)
      return 1;
  return 0;
}

/* ---- actions ---- */

/* The slot of stage s holding micro-batch mb. */
static int slot_of(const struct exec *ex, int s, int mb) { return ex->slot[s * ex->m + mb]; }

static int do_forward(struct exec *ex, int rank, int s, int mb) {
  strata_trainer_t tr = ex->tr;
  struct strata__stage *st = tr->st[s];
  int k = s * ex->m + mb, sl = 0;
  TRY(strata__stage_slot_take(st, &sl));
  ex->slot[k] = sl;
  TRY(strata__stage_acquire(st, sl));
  strata_buffer_t ob = NULL; /* the output's buffer, apart from the slot */
  if (st->out_apart)
    TRY(out_take(ex, rank, s, &ob));
  st->slots[sl].out = ob;
  pthread_mutex_lock(&ex->lock);
  /* activations: the backward pass, and (kept in the slot) the send to the next device; the output apart: the
  ** forward, and every next stage taking it (a copy made here, or sent); gradients: the backward pass, and the
  ** previous stage taking the input gradient */
  const int first = strata__stage_first(tr, s), last = strata__stage_last(tr, s);
  const int mbi = strata__stage_replica(tr, s) * ex->m + mb; /* the replica's micro-batch among the step's */
  const int takers = last ? 0 : strata__stage_consumers(tr, s, 0, NULL);
  ex->hold_act[k] = 1 + (!ob && !last && rank_of(ex, s + 1) != rank ? takers : 0);
  ex->hold_out[k] = 1 + takers;
  ex->outb[k] = ob;
  ex->hold_grad[k] = 1 + (first ? 0 : rank_of(ex, s - 1) == rank ? 1 : strata__stage_consumers(tr, s, 1, NULL));
  if (++ex->inflight[s] > ex->peak[s])
    ex->peak[s] = ex->inflight[s];
  pthread_mutex_unlock(&ex->lock);
  strata_mem_t in = strata__stage_input(st, sl);
  size_t in_bytes = strata__stage_in_units(st) * 4;
  if (first) {
    TRY(strata_buffer_write(st->q, in.buf, strata__mem_byte(in), ex->w->inputs[mbi], ex->w->in_elems * 4));
  } else if (rank_of(ex, s - 1) == rank) {
    const int prev = strata__stage_owner(tr, s - 1);
    strata_mem_t o = strata__stage_output(tr->st[prev], slot_of(ex, prev, mb));
    TRY(strata__chain_after(&ex->ch, 0, prev * ex->m + mb, st->q, tr->st[prev]->q));
    TRY(strata_buffer_copy(st->q, in.buf, strata__mem_byte(in), o.buf, strata__mem_byte(o), in_bytes));
    if (tr->st[prev]->out_apart) /* (taken: its buffer goes back behind this copy) */
      TRY(out_drop(ex, prev, mb, st->q));
  } else {
    struct msg *mg = &ex->act[k];
    if (!mg->posted)
      return strata__error(STRATA_ERR_STATE, "no activation received for stage %d, micro-batch %d", s, mb);
    TRY(consume(ex, mg, 2 * s, st->q, in, in_bytes));
  }
  if (last) {
    strata_mem_t tg = strata__stage_targets(st, sl);
    TRY(strata_buffer_write(st->q, tg.buf, strata__mem_byte(tg), ex->w->targets[mbi], (size_t)ex->w->rows * 4));
  }
  zero_hooks(ex, st, s, rank, mb, 0, 1);
  int frc = strata__stage_window_begin(st, STRATA_ACTION_FORWARD); /* ZeRO-3: its gathers, prefetched */
  if (!frc)
    frc = strata__stage_forward(st, sl);
  const int wrc = strata__stage_window_end(st);
  zero_hooks(ex, st, s, rank, mb, 0, 0);
  TRY(frc ? frc : wrc);
  if (last && ex->w->forwarded)
    TRY(ex->w->forwarded(ex->w->arg, st, s, sl, mb));
  if (last && strata__stage_slice(tr, s) == 0) /* every slice computes the same losses */
    TRY(strata__stage_loss_read(st, sl, ex->w->losses[mbi])); /* (read once the list's queues are through) */
  TRY(strata__chain_mark(&ex->ch, 0, k, st->q)); /* no wait: who reads the output waits for this on its queue */
  if (ob) /* (the forward's own hold: a stage no next stage takes from gives its buffer back behind the forward) */
    TRY(out_drop(ex, s, mb, st->q));
  return ex->traced ? strata_queue_finish(st->q) : STRATA_OK; /* (traced: the event spans the compute) */
}


/* A traced backward's recomputations (RC s.mb), one event per block: the queue is waited for around each. */
struct recompute_trace {
  struct exec *ex;
  int rank, s, mb;
  double t0;
};

static int recompute_traced(void *arg, int layer, int done) {
  struct recompute_trace *r = arg;
  (void)layer;
  TRY(strata_queue_finish(r->ex->tr->st[r->s]->q));
  if (!done)
    r->t0 = strata__now();
  else
    trace(r->ex, "compute", STRATA_ACTION_RECOMPUTE, r->s, r->mb, r->t0, strata__now(), 2 * r->rank);
  return STRATA_OK;
}

static int do_backward(struct exec *ex, int rank, int kind, int s, int mb, int last) {
  strata_trainer_t tr = ex->tr;
  struct strata__stage *st = tr->st[s];
  if (last && ex->bk) { /* the stage's last gradients of the step: each bucket goes as soon as it is done */
    st->grads_done = strata__buckets_ready;
    st->grads_done_arg = &ex->bk[s];
  }
  zero_hooks(ex, st, s, rank, mb, kind != STRATA_ACTION_BACKWARD_INPUT, 1); /* ZeRO-2/3: reductions and gathers */
  if (kind != STRATA_ACTION_BACKWARD_WEIGHT && !strata__stage_last(tr, s)) {
    strata_mem_t go = strata__stage_grad_output(st, slot_of(ex, s, mb));
    size_t bytes = strata__stage_out_units(st) * 4;
    if (rank_of(ex, s + 1) == rank) {
      const int next = strata__stage_owner(tr, s + 1);
      strata_mem_t gi = strata__stage_grad_input(tr->st[next], slot_of(ex, next, mb));
      TRY(strata__chain_after(&ex->ch, 1, next * ex->m + mb, st->q, tr->st[next]->q));
      TRY(strata_buffer_copy(st->q, go.buf, strata__mem_byte(go), gi.buf, strata__mem_byte(gi), bytes));
      /* the next stage's queue passes this copy before its gradients are released (behind that queue's work) */
      strata_event_t e = NULL;
      TRY(strata_event_record(st->q, &e));
      const int erc = strata_event_wait(tr->st[next]->q, e);
      strata_event_free(e);
      TRY(erc);
      drop(ex, next, mb, GRAD);
    } else {
      struct msg *mg = &ex->grad[s * ex->m + mb];
      if (!mg->posted)
        return strata__error(STRATA_ERR_STATE, "no gradient received for stage %d, micro-batch %d", s, mb);
      TRY(consume(ex, mg, 2 * s + 1, st->q, go, bytes));
    }
  }
  const int sl = slot_of(ex, s, mb);
  struct recompute_trace rt = {.ex = ex, .rank = rank, .s = s, .mb = mb};
  if (ex->traced && st->recompute) { /* (unset below, before any return) */
    st->recomputing = recompute_traced;
    st->recomputing_arg = &rt;
  }
  st->sp_grads = last; /* spatial slabs: the step's gradients summed over them as the last backward makes them */
  int rc = strata__stage_window_begin(st, kind); /* ZeRO-3: its gathers, prefetched */
  if (!rc && kind == STRATA_ACTION_BACKWARD)
    rc = strata__stage_backward(st, sl);
  else if (!rc && kind == STRATA_ACTION_BACKWARD_INPUT)
    rc = strata__stage_backward_input(st, sl);
  else if (!rc)
    rc = strata__stage_backward_weight(st, sl);
  const int wrc = strata__stage_window_end(st);
  rc = rc ? rc : wrc;
  st->grads_done = NULL;
  st->grads_done_arg = NULL;
  st->recomputing = NULL;
  st->recomputing_arg = NULL;
  zero_hooks(ex, st, s, rank, mb, 0, 0);
  st->sp_grads = 0;
  TRY(rc);
  if (kind != STRATA_ACTION_BACKWARD_WEIGHT) /* no wait: the input gradient's readers wait for this on their queues */
    TRY(strata__chain_mark(&ex->ch, 1, s * ex->m + mb, st->q));
  if (ex->traced) /* a traced step's compute events span the work itself, not its enqueueing */
    TRY(strata_queue_finish(st->q));
  if (kind != STRATA_ACTION_BACKWARD_WEIGHT)
    drop(ex, s, mb, GRAD); /* its output gradient is used, its input gradient written */
  if (kind != STRATA_ACTION_BACKWARD_INPUT)
    drop(ex, s, mb, ACT);
  return STRATA_OK;
}

/* The communicator joining stage s with the same slice of the same stage of every other replica. */
static strata_comm_t replica_comm(const struct exec *ex, int s) {
  if (!ex->tr->comm)
    return NULL; /* the replicas are on several ranks (parallel/ranks.h) */
  return ex->tr->comm[strata__stage_slice(ex->tr, s) * ex->chain + s % ex->chain];
}

/* Wait for a gradient collective of stage s posted at `posted` (*done; NULL afterwards), and trace it. */
static int settle_replicas(struct exec *ex, int rank, int s, void **done, double posted, const char *name,
                           const char *op, uint64_t bytes) {
  strata_trainer_t tr = ex->tr;
  if (!*done)
    return STRATA_OK;
  strata_comm_t c = replica_comm(ex, s);
  double t0 = 0, t1 = 0;
  void *d = *done;
  *done = NULL;
  int rc;
  if (!c) { /* across ranks: the rank's thread for the group made the call; its times are when the data moved */
    rc = strata__ranks_settle(tr, d, &t0, &t1);
  } else {
    rc = strata__comm_wait(c, tr->st[s]->q, d);
    if (!rc)
      rc = strata_queue_finish(tr->st[s]->q);
    strata__comm_release(c, d, &t0, &t1);
  }
  if (rc || !ex->traced)
    return rc;
  pthread_mutex_lock(&ex->lock);
  strata__trace_add_comm(tr, name, op, bytes, STRATA__GROUP_REPLICAS, s, t0 > posted ? t0 : posted, t1, 2 * rank + 1,
                         posted);
  pthread_mutex_unlock(&ex->lock);
  return STRATA_OK;
}

/*
** OPTIMIZER: each stage adds its gradients' sums of squares; the global
** norm (hence the clip factor) needs every stage's, so a device's last
** OPTIMIZER waits for all stages, then updates all of that device's stages.
*/
static int do_optimizer(struct exec *ex, int rank, int s, int last_on_rank) {
  strata_trainer_t tr = ex->tr;
  /* the stage's gradients must have been joined with the other replicas' */
  struct strata__buckets *bk = ex->bk ? &ex->bk[s] : NULL;
  for (int k = 0; bk && k < bk->posted; k++) {
    size_t lo, hi;
    strata__buckets_range(bk, k, &lo, &hi);
    char name[24];
    snprintf(name, sizeof name, "GR%d.%d", s, k);
    const struct strata__stage *st = tr->st[s];
    TRY(settle_replicas(ex, rank, s, &bk->done[k], bk->when[k], name, "allreduce",
                        (uint64_t)(hi - lo) * (st->grads16 ? 2 : 4)));
    if (st->grads16) /* the reduced bf16 sums back into the float32 gradients the optimizer reads */
      TRY(strata_convert(st->q, strata_mem_typed(st->grads16, lo, STRATA_BFLOAT16), strata_mem(st->grads, lo),
                         (int64_t)(hi - lo)));
  }
  if (ex->done_post[s] > 0) { /* ZeRO-1's reduce-scatter (without gates, done in the call: no completion left) */
    char name[24];
    snprintf(name, sizeof name, "GRS%d", s);
    const struct strata__stage *st = tr->st[s];
    TRY(settle_replicas(ex, rank, s, &ex->done[s], ex->done_post[s], name, "reducescatter",
                        (uint64_t)st->chunk * (uint64_t)tr->replicas * (st->grads16 ? 2 : 4)));
    if (st->grads16) { /* this replica's reduced shard back into the float32 gradients */
      const size_t at = (size_t)strata__stage_replica(tr, s) * st->chunk;
      TRY(strata_convert(st->q, strata_mem_typed(st->grads16, at, STRATA_BFLOAT16), strata_mem(st->grads, at),
                         (int64_t)st->chunk));
    }
  }
  /* the global norm from one replica's stages (its slices'): after the
  ** all-reduce every replica has the same gradients; after ZeRO's
  ** reduce-scatter each has its shard of them */
  if (tr->zero || strata__stage_replica(tr, s) == tr->home)
    TRY(strata__stage_sumsq(tr, s));
  pthread_mutex_lock(&ex->lock);
  const int all_here = ++ex->opt_arrived == ex->held;
  pthread_mutex_unlock(&ex->lock);
  if (all_here) /* the sums of the stages other ranks hold (with ZeRO), outside the lock: a dead rank fails it */
    TRY(strata__ranks_sumsq(tr));
  pthread_mutex_lock(&ex->lock);
  if (all_here) {
    ex->gscale = strata__clip_scale(tr, &ex->norm);
    ex->opt_ready = 1;
    for (int r = 0; r < ex->nwake; r++) /* once a step: every worker that waits for the go */
      pthread_cond_signal(&ex->wake[r]);
  }
  if (!last_on_rank) {
    pthread_mutex_unlock(&ex->lock);
    return STRATA_OK;
  }
  while (!ex->opt_ready && !ex->failed)
    pthread_cond_wait(&ex->wake[rank], &ex->lock);
  int ok = ex->opt_ready && !ex->failed;
  float gscale = ex->gscale, norm = ex->norm;
  pthread_mutex_unlock(&ex->lock);
  if (!ok || !isfinite(norm))
    return STRATA_OK; /* a failure elsewhere, or a diverged step the caller reports */
  for (int t = 0; t < ex->S; t++)
    if (rank_of(ex, t) == rank && tr->st[t])
      TRY(strata__stage_optimize(tr, t, gscale, ex->lr));
  return STRATA_OK;
}

/*
** ZeRO-2: flat gradients [lo, hi) of one micro-batch, at g in the stage's
** window (stage.h), are summed onto the replica whose optimizer shard holds
** them: a reduce to that replica per shard the range touches (one, rarely
** two: the shards are contiguous runs of the flat vector), half an
** all-reduce's bytes. Every replica hands on the same ranges in the same
** order, so the calls meet; the owner adds the sums into its shard's sums of
** the step before the window takes the next tensors. Replicas on several
** ranks all-reduce the range instead. Each is traced as a comm event of the
** replicas, GRS<stage>.<micro-batch>.
*/
static int shard_ready(void *arg, size_t lo, size_t hi, strata_mem_t g) {
  const struct shard_hook *h = arg;
  struct exec *ex = h->ex;
  strata_trainer_t tr = ex->tr;
  struct strata__stage *st = tr->st[h->s];
  void *done = NULL;
  char name[40];
  snprintf(name, sizeof name, "GRS%d.%d", h->s, h->mb);
  double t0 = strata__now();
  int x = strata__ranks_post(tr, STRATA__COLL_ALLREDUCE, h->s, st->q, g, g, hi - lo, &done);
  if (x != 1) {
    TRY(x);
    TRY(settle_replicas(ex, h->rank, h->s, &done, t0, name, "allreduce", (uint64_t)(hi - lo) * 4));
    return strata__stage_shard_add(st, lo, hi, g);
  }
  strata_comm_t c = replica_comm(ex, h->s);
  struct strata_comm_info info;
  TRY(strata_comm_info(c, &info));
  for (size_t a = lo, b; a < hi; a = b) {
    const int owner = (int)(a / st->chunk);
    b = (size_t)(owner + 1) * st->chunk < hi ? (size_t)(owner + 1) * st->chunk : hi;
    strata_mem_t piece = g;
    piece.off += a - lo;
    t0 = strata__now();
    TRY(strata__post_collective_to(tr, c, info.asynchronous, STRATA__COLL_REDUCE, strata__stage_replica(tr, h->s),
                                   owner, st->q, piece, piece, b - a, STRATA_SUM, &done));
    TRY(settle_replicas(ex, h->rank, h->s, &done, t0, name, "reduce", (uint64_t)(b - a) * 4));
  }
  return strata__stage_shard_add(st, lo, hi, g);
}

/* GRAD_REDUCE: post the stage's buckets its backward has not posted (buckets.c); its OPTIMIZER waits for them. */
static int do_grad_reduce(struct exec *ex, int s) { return strata__buckets_post_rest(&ex->bk[s]); }

/* A TP_JOIN's collectives, each a comm event on the device's transfer track. */
struct join_trace {
  struct exec *ex;
  int kind, s, mb, tid;
};

static void join_traced(void *arg, const char *op, uint64_t bytes, double t0, double t1) {
  struct join_trace *j = arg;
  char name[24];
  snprintf(name, sizeof name, "%s%d.%d", strata_action_label(j->kind), j->s, j->mb);
  pthread_mutex_lock(&j->ex->lock);
  strata__trace_add_comm(j->ex->tr, name, op, bytes, STRATA__GROUP_SLICES, j->s, t0, t1, j->tid, -1);
  pthread_mutex_unlock(&j->ex->lock);
}

/*
** ZeRO-1. GRAD_SCATTER: reduce-scatter the stage's gradients over the
** replicas (replica r keeps the sum of shard r), overlapping as GR does.
** PARAM_GATHER, after the device's updates: all-gather the updated shards,
** enqueued before the next step's work on the stage's queue.
*/
static int do_grad_scatter(struct exec *ex, int s) {
  strata_trainer_t tr = ex->tr;
  struct strata__stage *st = tr->st[s];
  if (st->zero2)
    return STRATA_OK; /* ZeRO-2: every layer's gradients went to the shards as its backward ended (shard_ready) */
  strata_comm_t c = replica_comm(ex, s);
  struct strata_comm_info info;
  const int r = strata__stage_replica(tr, s);
  strata_mem_t g = strata_mem(st->grads, 0), mine = strata_mem(st->grads, (size_t)r * st->chunk);
  if (st->grads16) { /* a bf16 reduction: every shard rounded into the gradients' bf16 copy, scattered there */
    TRY(strata_convert(st->q, g, strata_mem_typed(st->grads16, 0, STRATA_BFLOAT16),
                       (int64_t)(st->chunk * (size_t)tr->replicas)));
    g = strata_mem_typed(st->grads16, 0, STRATA_BFLOAT16);
    mine = strata_mem_typed(st->grads16, (size_t)r * st->chunk, STRATA_BFLOAT16);
  }
  ex->done_post[s] = strata__now();
  int x = strata__ranks_post(tr, STRATA__COLL_REDUCESCATTER, s, st->q, g, mine, st->chunk, &ex->done[s]);
  if (x != 1)
    return x;
  TRY(strata_comm_info(c, &info));
  return strata__post_collective(tr, c, info.asynchronous, STRATA__COLL_REDUCESCATTER, r, st->q, g, mine, st->chunk,
                         STRATA_SUM, &ex->done[s]);
}

/* PARAM_GATHER through the replicas' communicator in this process: done once the stage's queue has it (*t1). */
static int post_gather(strata_trainer_t tr, strata_comm_t c, int r, struct strata__stage *st, double *t1) {
  struct strata_comm_info info;
  TRY(strata_comm_info(c, &info));
  /* no completion kept: the stage's queue waits for it, before the next step's work */
  TRY(strata__post_collective(tr, c, info.asynchronous, STRATA__COLL_ALLGATHER, r, st->q,
                      strata_mem(st->params, (size_t)r * st->chunk), strata_mem(st->params, 0), st->chunk, STRATA_SUM,
                      NULL));
  TRY(strata_queue_finish(st->q));
  *t1 = strata__now();
  return STRATA_OK;
}

static int do_param_gather(struct exec *ex, int rank, int s) {
  strata_trainer_t tr = ex->tr;
  struct strata__stage *st = tr->st[s];
  if (st->zero3)
    return STRATA_OK; /* ZeRO-3: the updated shards are the parameters; each layer gathers what it reads */
  strata_comm_t c = replica_comm(ex, s);
  const int r = strata__stage_replica(tr, s);
  double t0 = strata__now(), t1 = 0;
  void *done = NULL;
  int x = strata__ranks_post(tr, STRATA__COLL_ALLGATHER, s, st->q, strata_mem(st->params, (size_t)r * st->chunk),
                             strata_mem(st->params, 0), st->chunk, &done);
  if (x == 0) /* across ranks: the updated shards go once the updates are done; the next step's work follows */
    x = strata__ranks_settle(tr, done, &t0, &t1);
  else if (x == 1)
    x = post_gather(tr, c, r, st, &t1);
  TRY(x);
  if (ex->traced) {
    char name[24];
    snprintf(name, sizeof name, "PAG%d", s);
    pthread_mutex_lock(&ex->lock);
    strata__trace_add_comm(tr, name, "allgather", (uint64_t)st->chunk * 4, STRATA__GROUP_REPLICAS, s, t0, t1,
                           2 * rank + 1, -1);
    pthread_mutex_unlock(&ex->lock);
  }
  return STRATA_OK;
}

static void *worker_main(void *arg) {
  struct worker_arg *wa = arg;
  struct exec *ex = wa->ex;
  int rank = wa->rank, n = 0;
  const struct strata_action *list = strata_schedule_actions(ex->w->sched, rank, &n);
  int last_opt = -1;
  for (int i = 0; i < n; i++)
    if (list[i].kind == STRATA_ACTION_OPTIMIZER)
      last_opt = i;
  /* each stage's last backward work (B or W) in this list: where its gradient buckets go */
  int *last_bw = calloc((size_t)ex->S, sizeof *last_bw);
  int *peers = calloc((size_t)ex->tr->tp, sizeof *peers);
  struct strata__queue_clock *qc = calloc((size_t)ex->S, sizeof *qc); /* each stage's queue at the list's start */
  if (!last_bw || !peers || !qc) {
    free(last_bw);
    free(peers);
    free(qc);
    fail(ex, strata__error(STRATA_ERR_NOMEM, "out of host memory"), "pipeline");
    return NULL;
  }
  for (int i = 0; i < n; i++)
    if (list[i].kind == STRATA_ACTION_BACKWARD || list[i].kind == STRATA_ACTION_BACKWARD_WEIGHT)
      last_bw[list[i].stage] = i + 1;
  const double list_t0 = strata__now();
  strata__list_clocks(ex->tr, rank, qc);
  int i;
  for (i = 0; i < n; i++) {
    pthread_mutex_lock(&ex->lock);
    int failed = ex->failed;
    pthread_mutex_unlock(&ex->lock);
    if (failed)
      break;
    const struct strata_action *a = &list[i];
    int s = a->stage, mb = a->microbatch, rc = STRATA_OK;
    /* busy: the CPU time of the stage's queue where its backend says, so time-sharing a core is not work */
    struct strata__queue_clock c0, c1;
    strata_queue_t busy_q = s >= 0 && s < ex->S ? ex->tr->st[s]->q : NULL;
    strata__queue_clock_read(busy_q, &c0);
    double t0 = strata__now();
    const char *cat = "compute";
    switch (a->kind) {
    case STRATA_ACTION_FORWARD:
      rc = do_forward(ex, rank, s, mb);
      break;
    case STRATA_ACTION_BACKWARD:
    case STRATA_ACTION_BACKWARD_INPUT:
    case STRATA_ACTION_BACKWARD_WEIGHT:
      rc = do_backward(ex, rank, a->kind, s, mb, last_bw[s] == i + 1);
      break;
    case STRATA_ACTION_SEND_ACT:
    case STRATA_ACTION_SEND_GRAD: {
      /* one copy to each stage that takes it: the next (previous) stage of this slice, and those it stands for */
      const int act = a->kind == STRATA_ACTION_SEND_ACT;
      const int np = strata__stage_consumers(ex->tr, s, act ? 0 : 1, peers);
      struct strata__stage *st = ex->tr->st[s];
      for (int q = 0; q < np && !rc; q++) {
        struct job *j = calloc(1, sizeof *j);
        if (!j) {
          rc = strata__error(STRATA_ERR_NOMEM, "out of host memory");
          break;
        }
        const int peer = peers[q];
        j->kind = a->kind;
        j->stage = s;
        j->mb = mb;
        j->src = act ? strata__stage_output(st, slot_of(ex, s, mb)) : strata__stage_grad_input(st, slot_of(ex, s, mb));
        j->bytes = (act ? strata__stage_out_units(st) : strata__stage_in_units(st)) * 4;
        j->dst_dev = ex->tr->dev[rank_of(ex, peer)];
        j->to = peer;
        j->apart = act && st->out_apart;
        if (strata__stage_mine(ex->tr, peer)) /* (else another rank's: the message goes through the cluster) */
          j->dst = act ? &ex->act[peer * ex->m + mb] : &ex->grad[peer * ex->m + mb];
        j->p = 2 * peer + !act;
        j->pool = &ex->tr->pools[j->p];
        send_job(ex, rank, j);
      }
      cat = NULL;
      break;
    }
    case STRATA_ACTION_RECV_ACT:
    case STRATA_ACTION_RECV_GRAD:
      if (wait_msg(ex, rank, a->kind == STRATA_ACTION_RECV_ACT ? &ex->act[s * ex->m + mb] : &ex->grad[s * ex->m + mb]))
        goto drain; /* the run failed elsewhere */
      cat = "recv";
      break;
    case STRATA_ACTION_OPTIMIZER:
      rc = do_optimizer(ex, rank, s, i == last_opt);
      cat = "optimizer";
      break;
    case STRATA_ACTION_GRAD_REDUCE:
      rc = do_grad_reduce(ex, s);
      cat = NULL; /* traced with its duration at the optimizer */
      break;
    case STRATA_ACTION_GRAD_SCATTER:
      rc = do_grad_scatter(ex, s);
      cat = NULL; /* traced with its duration at the optimizer */
      break;
    case STRATA_ACTION_PARAM_GATHER:
      if (mb >= 0) { /* ZeRO-3: the first weights of the F, B, BI or W after it (past its RECOMPUTE), posted */
        int j = i + 1;
        while (j < n && list[j].kind == STRATA_ACTION_RECOMPUTE)
          j++;
        struct strata__stage *st = ex->tr->st[s];
        zero_hooks(ex, st, s, rank, mb, 0, 1);
        rc = j < n && list[j].stage == s ? strata__gather_action(ex->tr, s, list[j].kind) : STRATA_OK;
        zero_hooks(ex, st, s, rank, mb, 0, 0);
      } else {
        rc = do_param_gather(ex, rank, s);
      }
      cat = NULL;
      break;
    case STRATA_ACTION_RECOMPUTE: /* armed here, run block by block inside the backward, traced there */
      rc = strata__stage_recompute(ex->tr->st[s], slot_of(ex, s, mb));
      cat = NULL;
      break;
    case STRATA_ACTION_TP_JOIN_FORWARD:
    case STRATA_ACTION_TP_JOIN_BACKWARD: {
      struct join_trace jt = {.ex = ex, .kind = a->kind, .s = s, .mb = mb, .tid = 2 * rank + 1};
      rc = strata__tp_settle(ex->tr, s, ex->traced ? join_traced : NULL, &jt);
      cat = NULL; /* traced as its collectives */
      break;
    }
    default:
      rc = strata__error(STRATA_ERR_INTERNAL, "unknown action kind %d", a->kind);
    }
    double t1 = strata__now();
    strata__queue_clock_read(busy_q, &c1);
    if (rc) {
      char what[200], label[160], step[16] = "";
      if (mb >= 0) /* a stage's whole-step actions (the update, gradient reductions) have no micro-batch */
        snprintf(step, sizeof step, ".%d", mb);
      snprintf(what, sizeof what, "%s, action #%d %s%d%s",
               strata__device_label(strata__device_get(ex->tr->dev[rank]), label, sizeof label), i,
               strata_action_label(a->kind), s, step);
      fail(ex, rc, what);
      break;
    }
    if (cat && strcmp(cat, "recv") != 0 && (!c0.cpu || !c1.cpu)) /* (CPU clocks: counted over the list, below) */
      ex->busy[rank] += t1 - t0;
    if (cat)
      trace(ex, cat, a->kind, s, mb, t0, t1, 2 * rank);
    release_pending(ex, rank);
  }
  /* the list's one wait per stage: what it enqueued has run (the losses read, a failure met) before the step ends */
drain:;
  int at = -1;
  const int drc = strata__list_drain(ex->tr, rank, qc, list_t0, &ex->busy[rank], &at);
  if (drc && i == n) {
    char what[200], label[160];
    snprintf(what, sizeof what, "%s, the work of stage %d its list enqueued (action #%d and before)",
             strata__device_label(strata__device_get(ex->tr->dev[rank]), label, sizeof label), at, n - 1);
    fail(ex, drc, what);
  }
  release_pending(ex, rank);
  free(last_bw);
  free(peers);
  free(qc);
  return NULL;
}

/* ---- receiver threads: a pipeline across ranks ---- */

struct receiver_arg {
  struct exec *ex;
  int pair;                  /* tr->ranks->pairs[2 pair]: this rank's pipeline rank, [2 pair + 1]: the sender's */
  pthread_t thread;
  int started;
};

/*
** One pair's receiver: the messages another rank's pipeline rank e sends to
** this rank's pipeline rank d, received in the order e sends them (its
** action list, each send's consumers in order), so that e's sender never
** waits for a receive posted behind another. Each lands in a buffer of its
** boundary's pool and is posted as a local copy is: RECV_ACT / RECV_GRAD
** wait on it alike. A failure anywhere on this rank breaks the cluster,
** which ends a receive waiting here within a fraction of a second.
*/
static void *receiver_main(void *arg) {
  struct receiver_arg *ra = arg;
  struct exec *ex = ra->ex;
  strata_trainer_t tr = ex->tr;
  const struct strata__ranks *R = tr->ranks;
  const int d = R->pairs[2 * ra->pair], e = R->pairs[2 * ra->pair + 1];
  strata_queue_t q = R->recv_q[ra->pair];
  int n = 0;
  const struct strata_action *list = strata_schedule_actions(ex->w->sched, e, &n);
  int *peers = calloc((size_t)tr->tp + 1, sizeof *peers);
  if (!peers) {
    fail(ex, strata__error(STRATA_ERR_NOMEM, "out of host memory"), "pipeline receiver");
    return NULL;
  }
  for (int i = 0; i < n; i++) {
    const struct strata_action *a = &list[i];
    if (a->kind != STRATA_ACTION_SEND_ACT && a->kind != STRATA_ACTION_SEND_GRAD)
      continue;
    const int dir = a->kind == STRATA_ACTION_SEND_GRAD, np = strata__stage_consumers(tr, a->stage, dir, peers);
    for (int k = 0; k < np; k++) {
      const int to = peers[k], mb = a->microbatch;
      if (rank_of(ex, to) != d)
        continue;
      struct strata__pool *pool = &tr->pools[2 * to + dir];
      pthread_mutex_lock(&ex->lock);
      const int failed = ex->failed;
      pthread_mutex_unlock(&ex->lock);
      if (failed)
        goto out;
      strata_buffer_t b = NULL;
      int rc = strata__chain_pool_take(&ex->ch, &ex->lock, pool, 2 * to + dir, q, &b);
      const size_t bytes = (dir == 0 ? strata__stage_in_units(tr->st[to]) : strata__stage_out_units(tr->st[to])) * 4;
      double t0 = strata__now();
      if (!rc && !b)
        rc = strata_buffer_new(tr->dev[d], bytes, &b);
      if (!rc)
        rc = strata__ranks_recv(tr, to, dir, mb, q, strata_mem(b, 0), bytes);
      if (rc) {
        char what[200];
        snprintf(what, sizeof what, "device %d, receive of %s%d.%d from device %d on another rank",
                 strata__rank_device(tr, d), dir ? "gradient " : "activation ", to, mb, strata__rank_device(tr, e));
        fail(ex, rc, what);
        if (b) { /* kept for the next step once nothing writes it */
          strata_queue_finish(q);
          pthread_mutex_lock(&ex->lock);
          if (strata__pool_put(pool, b) == 0)
            b = NULL;
          pthread_mutex_unlock(&ex->lock);
          strata_buffer_free(b);
        }
        goto out;
      }
      trace(ex, "recv", dir ? STRATA_ACTION_RECV_GRAD : STRATA_ACTION_RECV_ACT, to, mb, t0, strata__now(), 2 * d + 1);
      pthread_mutex_lock(&ex->lock);
      struct msg *mg = dir == 0 ? &ex->act[to * ex->m + mb] : &ex->grad[to * ex->m + mb];
      mg->buf = b;
      mg->posted = 1;
      pthread_cond_signal(&ex->wake[rank_of(ex, to)]);
      pthread_mutex_unlock(&ex->lock);
    }
  }
out:
  free(peers);
  return NULL;
}

int strata__execute(strata_trainer_t tr, const struct strata__work *w, struct strata__work_done *done) {
  struct exec ex;
  memset(&ex, 0, sizeof ex);
  ex.tr = tr;
  ex.w = w;
  ex.traced = w->train && tr->trace_path;
  ex.m = tr->m;
  ex.S = strata__stages_all(tr);
  ex.chain = tr->nstages;
  for (int s = 0; s < ex.S; s++)
    ex.held += tr->st[s] != NULL; /* held by a device of this process */
  ex.lr = w->lr;
  ex.norm = 0;
  size_t cells = (size_t)ex.S * (size_t)ex.m;
  ex.act = calloc(cells, sizeof *ex.act);
  ex.grad = calloc(cells, sizeof *ex.grad);
  ex.hold_act = calloc(cells, sizeof *ex.hold_act);
  ex.hold_grad = calloc(cells, sizeof *ex.hold_grad);
  ex.hold_out = calloc(cells, sizeof *ex.hold_out);
  ex.outb = calloc(cells, sizeof *ex.outb);
  ex.pending = calloc(cells, sizeof *ex.pending);
  ex.slot = malloc(cells * sizeof *ex.slot);
  for (size_t k = 0; ex.slot && k < cells; k++)
    ex.slot[k] = -1;
  ex.inflight = calloc((size_t)ex.S, sizeof *ex.inflight);
  ex.peak = calloc((size_t)ex.S, sizeof *ex.peak);
  ex.done = calloc((size_t)ex.S, sizeof *ex.done);
  ex.done_post = calloc((size_t)ex.S, sizeof *ex.done_post);
  ex.busy = calloc((size_t)tr->ndev, sizeof *ex.busy);
  ex.snd = calloc((size_t)tr->ndev, sizeof *ex.snd);
  const int buckets = w->train && tr->replicas > 1 && !tr->zero; /* a pass has no gradient collective */
  const int hooks = (w->train && tr->zero >= 2) || tr->zero >= 3; /* (ZeRO-3's passes gather too) */
  if (hooks)
    ex.zh = calloc((size_t)ex.S, sizeof *ex.zh);
  if (tr->zero >= 3)
    ex.gh = calloc((size_t)ex.S, sizeof *ex.gh);
  if (buckets) {
    ex.bk = calloc((size_t)ex.S, sizeof *ex.bk);
    for (int s = 0; ex.bk && s < ex.S; s++)
      if (strata__buckets_init(tr, replica_comm(&ex, s), s, &ex.bk[s])) {
        for (int t = 0; t <= s; t++)
          strata__buckets_free(&ex.bk[t]);
        free(ex.bk);
        ex.bk = NULL;
        break;
      }
  }
  ex.wake = calloc((size_t)tr->ndev, sizeof *ex.wake);
  const int chain_rc = strata__chain_init(&ex.ch, ex.S, ex.m, 3 * ex.S);
  struct worker_arg *args = calloc((size_t)tr->ndev, sizeof *args);
  pthread_t *workers = calloc((size_t)tr->ndev, sizeof *workers);
  int rc = (!ex.act || !ex.grad || !ex.hold_act || !ex.hold_grad || !ex.hold_out || !ex.outb || !ex.pending || !ex.slot || !ex.inflight || !ex.peak ||
            !ex.done || !ex.done_post || !ex.busy || !ex.snd || !ex.wake || !args || !workers ||
            (buckets && !ex.bk) || (hooks && !ex.zh) || (tr->zero >= 3 && !ex.gh))
               ? strata__error(STRATA_ERR_NOMEM, "out of host memory running a pipeline step")
               : chain_rc;
  pthread_mutex_init(&ex.lock, NULL);
  for (int r = 0; r < tr->ndev && !rc; r++, ex.nwake++) {
    pthread_cond_init(&ex.wake[r], NULL);
    pthread_cond_init(&ex.snd[r].cond, NULL);
  }
  /* the copy queues live as long as the trainer: a queue is a stream, a
  ** cuBLAS handle and a scratch allocation on CUDA, too dear per step */
  /* the receive pools were filled at creation (strata__pipeline_prefill) */
  for (int r = 0; r < tr->ndev && !rc; r++) {
    if (!strata__rank_mine(tr, r))
      continue; /* another rank runs it */
    if (!tr->send_q[r])
      rc = strata_queue_new(tr->dev[r], &tr->send_q[r]);
    ex.snd[r].q = tr->send_q[r];
    if (!rc && w->train) /* a step's peak is its own; a pass leaves the step's */
      rc = strata_device_reset_peak(tr->dev[r]);
  }
  int started = 0, mine = 0;
  double t_start = strata__now();
  for (int r = 0; r < tr->ndev && !rc; r++) {
    args[r].ex = &ex;
    args[r].rank = r;
    if (!strata__rank_mine(tr, r))
      continue;
    mine++;
    if (!list_sends(w->sched, r))
      continue; /* nothing to send: no sender (one device alone, or a list whose neighbours share its device) */
    if (pthread_create(&ex.snd[r].thread, NULL, sender_main, &args[r]) != 0) {
      rc = strata__error(STRATA_ERR_BACKEND, "cannot start a pipeline thread");
      break;
    }
    ex.snd[r].started = 1;
  }
  /* a pipeline across ranks: one receiver per (this rank's device, another rank's device that sends to it) */
  const int npairs = tr->ranks ? tr->ranks->npairs : 0;
  struct receiver_arg *rcv = calloc((size_t)npairs + 1, sizeof *rcv);
  if (!rc && !rcv)
    rc = strata__error(STRATA_ERR_NOMEM, "out of host memory running a pipeline step");
  for (int i = 0; i < npairs && !rc; i++) {
    strata_queue_t *q = &tr->ranks->recv_q[i];
    if (!*q)
      rc = strata_queue_new(tr->dev[tr->ranks->pairs[2 * i]], q);
    rcv[i].ex = &ex;
    rcv[i].pair = i;
    if (!rc && pthread_create(&rcv[i].thread, NULL, receiver_main, &rcv[i]) != 0)
      rc = strata__error(STRATA_ERR_BACKEND, "cannot start a pipeline thread");
    rcv[i].started = !rc;
  }
  if (rc && npairs)
    fail(&ex, rc, "pipeline"); /* the receivers started so far stop */
  for (int r = 0; r < tr->ndev && !rc && mine == 1 && !npairs; r++)
    if (strata__rank_mine(tr, r)) { /* the process's only device, no receivers: its list runs in this thread */
      worker_main(&args[r]);
      mine = 0;
    }
  for (int r = 0; r < tr->ndev && !rc && mine; r++) {
    if (!strata__rank_mine(tr, r))
      continue;
    if (pthread_create(&workers[r], NULL, worker_main, &args[r]) != 0) {
      rc = strata__error(STRATA_ERR_BACKEND, "cannot start a pipeline thread");
      fail(&ex, rc, "pipeline");
      break;
    }
    started = r + 1;
  }
  for (int r = 0; r < started; r++)
    if (strata__rank_mine(tr, r))
      pthread_join(workers[r], NULL);
  /* the senders have nothing left once every worker is through its list */
  pthread_mutex_lock(&ex.lock);
  for (int r = 0; r < ex.nwake; r++) {
    ex.snd[r].stop = 1;
    pthread_cond_signal(&ex.snd[r].cond);
  }
  pthread_mutex_unlock(&ex.lock);
  for (int r = 0; ex.snd && r < tr->ndev; r++)
    if (ex.snd[r].started)
      pthread_join(ex.snd[r].thread, NULL);
  for (int i = 0; rcv && i < npairs; i++)
    if (rcv[i].started)
      pthread_join(rcv[i].thread, NULL);
  free(rcv);
  double t_end = strata__now();
  for (int r = 0; ex.snd && r < tr->ndev; r++) {
    while (ex.snd[r].head) { /* jobs never run after a failure */
      struct job *j = ex.snd[r].head;
      ex.snd[r].head = j->next;
      free(j);
    }
    if (ex.snd[r].q && ex.failed) /* a failed copy may have left work in it (else each copy was waited for) */
      strata_queue_finish(ex.snd[r].q);
  }
  for (size_t k = 0; k < cells && ex.act; k++) {
    strata_buffer_free(ex.act[k].buf);
    strata_buffer_free(ex.grad[k].buf);
    /* an output a failed step left lent goes back to its pool (the queues are through) */
    if (ex.outb && ex.outb[k] && strata__pool_put(&tr->pools[2 * ex.S + (int)(k / (size_t)ex.m)], ex.outb[k]))
      strata_buffer_free(ex.outb[k]);
  }
  strata__ranks_step_end(tr); /* the groups' threads across ranks, and their unsettled rounds after a failure */
  for (int s = 0; ex.done && s < ex.S && tr->comm; s++) /* (across ranks: gone with the step's rounds) */
    if (ex.done[s]) { /* a failed step: the stage never reached its optimizer */
      strata_queue_finish(tr->st[s]->q);
      strata__comm_release(replica_comm(&ex, s), ex.done[s], NULL, NULL);
    }
  for (int s = 0; tr->tp_member && s < ex.S; s++) /* joins a failed step left unsettled */
    strata__tp_drop(tr, s);
  if (!rc && ex.failed)
    rc = strata__error(ex.fail_status, "%s", ex.fail_msg);
  if (!rc && done && w->train) {
    done->t_start = t_start;
    done->t_end = t_end;
    done->grad_norm = ex.norm;
    memcpy(done->busy, ex.busy, sizeof *ex.busy * (size_t)tr->ndev);
    memcpy(done->peak, ex.peak, sizeof *ex.peak * (size_t)ex.S);
  }
  pthread_mutex_destroy(&ex.lock);
  for (int r = 0; r < ex.nwake; r++) {
    pthread_cond_destroy(&ex.wake[r]);
    pthread_cond_destroy(&ex.snd[r].cond);
  }
  free(ex.wake);
  free(ex.act);
  free(ex.grad);
  free(ex.hold_act);
  free(ex.hold_grad);
  free(ex.hold_out);
  free(ex.outb);
  free(ex.pending);
  free(ex.slot);
  free(ex.inflight);
  free(ex.peak);
  free(ex.done);
  free(ex.done_post);
  for (int s = 0; ex.bk && s < ex.S; s++)
    strata__buckets_free(&ex.bk[s]);
  free(ex.bk);
  free(ex.zh);
  free(ex.gh);
  free(ex.busy);
  free(ex.snd);
  strata__chain_free(&ex.ch);
  free(args);
  free(workers);
  return rc;
}
