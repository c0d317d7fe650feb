/* SPDX-License-Identifier: MIT */
/* chain.c — how the executor orders work across queues with events instead of host waits: the end of each (stage,
** micro-batch)'s forward and backward on its stage's queue, and the last read of each receive-pool buffer. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "device/registry.h"
#include "train/trainer.h"

int strata__chain_init(struct strata__chain *c, int stages, int m, int npools) {
  memset(c, 0, sizeof *c);
  c->cells = stages * m;
  c->npools = npools;
  c->act = calloc((size_t)c->cells + 1, sizeof *c->act);
  c->grad = calloc((size_t)c->cells + 1, sizeof *c->grad);
  c->pool = calloc((size_t)npools + 1, sizeof *c->pool);
  if (!c->act || !c->grad || !c->pool)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory for the step's events");
  return STRATA_OK;
}

void strata__chain_free(struct strata__chain *c) {
  for (int k = 0; k < c->cells && c->act && c->grad; k++) {
    strata_event_free(c->act[k]);
    strata_event_free(c->grad[k]);
  }
  for (int p = 0; p < c->npools && c->pool; p++) {
    for (int i = 0; i < c->pool[p].cap; i++)
      strata_event_free(c->pool[p].ev[i]);
    free(c->pool[p].ev);
  }
  free(c->act);
  free(c->grad);
  free(c->pool);
  memset(c, 0, sizeof *c);
}

int strata__chain_mark(struct strata__chain *c, int grad, int k, strata_queue_t q) {
  strata_event_t *e = grad ? &c->grad[k] : &c->act[k];
  strata_event_free(*e);
  *e = NULL;
  return strata_event_record(q, e);
}

int strata__chain_after(struct strata__chain *c, int grad, int k, strata_queue_t q, strata_queue_t producer) {
  strata_event_t e = grad ? c->grad[k] : c->act[k];
  if (!e) /* not marked (a producer that failed, or ran before this step): its queue is waited for */
    return strata_queue_finish(producer);
  return strata_event_wait(q, e);
}

int strata__chain_pool_take(struct strata__chain *c, pthread_mutex_t *lock, struct strata__pool *pool, int p,
                            strata_queue_t q, strata_buffer_t *b) {
  strata_event_t e = NULL;
  pthread_mutex_lock(lock);
  *b = pool->n > 0 ? pool->free[--pool->n] : NULL;
  if (*b && pool->n < c->pool[p].cap) {
    e = c->pool[p].ev[pool->n];
    c->pool[p].ev[pool->n] = NULL;
  }
  pthread_mutex_unlock(lock);
  if (!e)
    return STRATA_OK;
  int rc = strata_event_wait(q, e); /* (across backends: on the host) */
  strata_event_free(e);
  return rc;
}

int strata__chain_pool_return(struct strata__chain *c, pthread_mutex_t *lock, struct strata__pool *pool, int p,
                              strata_queue_t q, strata_buffer_t b) {
  strata_event_t e = NULL;
  int rc = q ? strata_event_record(q, &e) : STRATA_OK;
  if (rc) { /* no event: the reader is waited for here */
    e = NULL;
    int rc2 = strata_queue_finish(q);
    rc = rc2;
  }
  pthread_mutex_lock(lock);
  int kept = rc == STRATA_OK && strata__pool_put(pool, b) == 0;
  if (kept && c->pool[p].cap < pool->cap) {
    strata_event_t *ev = realloc(c->pool[p].ev, (size_t)pool->cap * sizeof *ev);
    if (ev) {
      memset(ev + c->pool[p].cap, 0, (size_t)(pool->cap - c->pool[p].cap) * sizeof *ev);
      c->pool[p].ev = ev;
      c->pool[p].cap = pool->cap;
    }
  }
  if (kept && pool->n <= c->pool[p].cap) {
    strata_event_free(c->pool[p].ev[pool->n - 1]);
    c->pool[p].ev[pool->n - 1] = e;
    e = NULL;
  } else if (kept) { /* no room for its event: waited for now */
    pthread_mutex_unlock(lock);
    int rc2 = strata_event_sync(e);
    strata_event_free(e);
    return rc2;
  }
  pthread_mutex_unlock(lock);
  if (!kept) {
    strata_event_sync(e);
    strata_buffer_free(b);
  }
  strata_event_free(e);
  return rc;
}

int strata__stage_consumers(const struct strata_trainer *tr, int s, int dir, int *out) {
  const int S = tr->nstages, j = s % S + (dir == 0 ? 1 : -1);
  if (j < 0 || j >= S || !strata__stage_held(tr, s - s % S + j))
    return 0; /* an edge of the chain, or the neighbour of this slice is stood for by another */
  const int c0 = s / S / tr->tp * tr->tp;
  int n = 0;
  for (int u = 0; u < tr->tps[j]; u++) { /* the neighbour's slices whose input (gradient) s stands for */
    const int t = (c0 + u) * S + j;
    if (strata__stage_owner(tr, dir == 0 ? t - 1 : t + 1) == s) {
      if (out)
        out[n] = t;
      n++;
    }
  }
  return n;
}

void strata__list_clocks(const struct strata_trainer *tr, int rank, struct strata__queue_clock *qc) {
  for (int s = 0; s < strata__stages_all(tr); s++)
    if (tr->stage_rank[s] == rank && tr->st[s])
      strata__queue_clock_read(tr->st[s]->q, &qc[s]);
}

int strata__list_drain(const struct strata_trainer *tr, int rank, const struct strata__queue_clock *qc, double t0,
                       double *busy, int *failed) {
  const double d0 = strata__now();
  double cpu = 0, drain = 0;
  int rc = STRATA_OK;
  for (int s = 0; s < strata__stages_all(tr); s++) {
    if (tr->stage_rank[s] != rank || !tr->st[s])
      continue;
    const int r = strata_queue_finish(tr->st[s]->q);
    if (r && !rc) {
      rc = r;
      *failed = s;
    }
    struct strata__queue_clock c1;
    strata__queue_clock_read(tr->st[s]->q, &c1);
    if (qc[s].cpu && c1.cpu)
      cpu += strata__queue_busy(&qc[s], &c1, strata__now() - t0);
    else
      drain = strata__now() - d0;
  }
  const double wall = strata__now() - t0, b = *busy + cpu + drain;
  *busy = b < wall ? b : wall;
  return rc;
}
