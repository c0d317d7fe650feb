/* SPDX-License-Identifier: MIT */
/* buffer.c — buffers with memory accounting and a caching allocator per device, queues and events over the backends' own handles. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "device/registry.h"

/*
** The caching allocator. A freed buffer's block stays with its device
** (d->cache, oldest first, at most STRATA__CACHE_MAX) and serves the next
** buffer of exactly its size: training allocates the same sizes every step,
** so after the first step no allocation or free reaches the backend (on
** CUDA, cudaFree waits for the whole device). Accounting is unchanged: a
** buffer's bytes are "used" while it lives, a cached block's are not, and
** d->used + d->cached stays under d->limit, blocks being given back to the
** backend to make room. The contract of strata_buffer_free (no queued work
** uses the buffer any more) makes a block safe to hand out again at once; a
** block freed behind queued work (strata_buffer_free_on) carries an event
** on its queue, and whoever takes it next waits for that event first: its
** own queue, or the host (block_settle).
*/

/* Take out of d's cache the most recently freed block of `bytes` into *out (h NULL: none). Caller holds d->lock. */
static void cache_take_locked(struct strata__device *d, size_t bytes, struct strata__cached *out) {
  memset(out, 0, sizeof *out);
  for (int i = d->ncache - 1; i >= 0; i--) {
    if (d->cache[i].bytes != bytes)
      continue;
    *out = d->cache[i];
    memmove(&d->cache[i], &d->cache[i + 1], (size_t)(d->ncache - 1 - i) * sizeof d->cache[0]);
    d->ncache--;
    d->cached -= bytes;
    d->reuses++;
    return;
  }
}

static uint64_t host_waits;

uint64_t strata__host_waits(void) { return __atomic_load_n(&host_waits, __ATOMIC_RELAXED); }

void strata__host_wait_count(void) { __atomic_fetch_add(&host_waits, 1, __ATOMIC_RELAXED); }

/* Make a block freed behind queued work usable: by `q` (a backend queue of d, or NULL: the host) — on the same
** queue nothing to do, on another of d's queues a wait enqueued there, on the host a wait for the event. */
static int block_settle(struct strata__device *d, struct strata__cached *c, void *q) {
  if (!c->ev)
    return STRATA_OK;
  const struct strata__backend *be = d->slot->be;
  int rc = STRATA_OK;
  if (q && q != c->q)
    rc = be->event_wait(d->slot->ctx, q, c->ev);
  if (!q || rc) {
    strata__host_wait_count();
    rc = be->event_sync(d->slot->ctx, c->ev);
  }
  be->event_free(d->slot->ctx, c->ev);
  c->ev = c->q = NULL;
  return rc;
}

/* Move the oldest cached blocks into out[] until `need` more bytes fit
** beside d->used + d->cached under the limit (all of them when need is
** UINT64_MAX); returns how many. Caller holds d->lock and frees them
** outside it. */
static int cache_evict_locked(struct strata__device *d, uint64_t need, struct strata__cached *out) {
  int n = 0;
  while (d->ncache > n && (need == UINT64_MAX || d->used + d->cached > d->limit ||
                           need > d->limit - d->used - d->cached)) {
    out[n] = d->cache[n];
    d->cached -= out[n].bytes;
    n++;
  }
  memmove(&d->cache[0], &d->cache[n], (size_t)(d->ncache - n) * sizeof d->cache[0]);
  d->ncache -= n;
  d->backend_frees += (uint64_t)n;
  return n;
}

static void cache_free_blocks(struct strata__device *d, struct strata__cached *blocks, int n) {
  for (int i = 0; i < n; i++) {
    block_settle(d, &blocks[i], NULL); /* (a failed wait: the queue's own finish reports it) */
    d->slot->be->free(d->slot->ctx, d->local, blocks[i].h);
    free(blocks[i].handle);
  }
}

/* Give back cached blocks so that `need` bytes fit (UINT64_MAX: all). */
static void cache_evict(struct strata__device *d, uint64_t need) {
  struct strata__cached out[STRATA__CACHE_MAX];
  pthread_mutex_lock(&d->lock);
  int n = cache_evict_locked(d, need, out);
  pthread_mutex_unlock(&d->lock);
  cache_free_blocks(d, out, n);
}

void strata__cache_release(struct strata__device *d) { cache_evict(d, UINT64_MAX); }

/* A block of `bytes` for a new buffer used on backend queue q (NULL: the host): from the cache (settled for q), else
** from the backend after making room under the limit; a backend out of memory is retried once with the cache
** emptied. The bytes are reserved already. */
static int block_get(struct strata__device *d, size_t bytes, void *q, void **h /* OUT */,
                     struct strata_buffer **handle /* OUT */) {
  struct strata__cached c;
  pthread_mutex_lock(&d->lock);
  cache_take_locked(d, bytes, &c);
  pthread_mutex_unlock(&d->lock);
  *h = c.h;
  *handle = c.handle;
  if (*h) {
    int rc = block_settle(d, &c, q);
    if (rc) { /* the queue that last used it failed: the block is given back, the failure reported */
      d->slot->be->free(d->slot->ctx, d->local, c.h);
      free(c.handle);
      *handle = NULL;
    }
    return rc;
  }
  /* d->used already counts `bytes`: room is needed for the cache only */
  cache_evict(d, 0);
  int rc = d->slot->be->alloc(d->slot->ctx, d->local, bytes, h);
  if (rc == STRATA_ERR_DEVICE_MEMORY) {
    pthread_mutex_lock(&d->lock);
    int any = d->ncache > 0;
    pthread_mutex_unlock(&d->lock);
    if (any) {
      cache_evict(d, UINT64_MAX);
      rc = d->slot->be->alloc(d->slot->ctx, d->local, bytes, h);
    }
  }
  if (rc)
    return rc;
  pthread_mutex_lock(&d->lock);
  d->backend_allocs++;
  pthread_mutex_unlock(&d->lock);
  return STRATA_OK;
}

int strata__cache_fill(int dev, size_t bytes, int count) {
  struct strata__device *d = strata__device_get(dev);
  if (!d)
    return STRATA_ERR_NOT_FOUND;
  for (;;) {
    pthread_mutex_lock(&d->lock);
    int have = 0;
    for (int i = 0; i < d->ncache; i++)
      have += d->cache[i].bytes == bytes;
    int room = d->ncache < STRATA__CACHE_MAX && bytes <= d->limit && d->used + d->cached <= d->limit - bytes;
    pthread_mutex_unlock(&d->lock);
    if (have >= count || !room)
      return STRATA_OK;
    void *h = NULL;
    int rc = d->slot->be->alloc(d->slot->ctx, d->local, bytes, &h);
    if (rc == STRATA_ERR_DEVICE_MEMORY)
      return STRATA_OK; /* a reservation, not a need */
    if (rc)
      return rc;
    pthread_mutex_lock(&d->lock);
    d->backend_allocs++;
    int kept = d->ncache < STRATA__CACHE_MAX;
    if (kept) {
      d->cache[d->ncache] = (struct strata__cached){.h = h, .bytes = bytes};
      d->ncache++;
      d->cached += bytes;
    } else {
      d->backend_frees++;
    }
    pthread_mutex_unlock(&d->lock);
    if (!kept) {
      d->slot->be->free(d->slot->ctx, d->local, h);
      return STRATA_OK;
    }
  }
}

/* Under d->lock: make room in a full cache by taking its oldest block out (returned, to be freed after the lock;
** its .h NULL when the cache had room). */
static struct strata__cached cache_make_room_locked(struct strata__device *d) {
  struct strata__cached oldest = {NULL, 0, NULL, NULL, NULL};
  if (d->ncache == STRATA__CACHE_MAX) {
    oldest = d->cache[0];
    memmove(&d->cache[0], &d->cache[1], (size_t)(d->ncache - 1) * sizeof d->cache[0]);
    d->ncache--;
    d->cached -= oldest.bytes;
    d->backend_frees++;
  }
  return oldest;
}

/* A block whose buffer could not be made: back into the cache (its bytes were never "used"). */
static void buffer_cache_block(struct strata__device *d, void *h, size_t bytes) {
  pthread_mutex_lock(&d->lock);
  struct strata__cached oldest = cache_make_room_locked(d);
  d->cache[d->ncache++] = (struct strata__cached){.h = h, .bytes = bytes};
  d->cached += bytes;
  pthread_mutex_unlock(&d->lock);
  if (oldest.h)
    cache_free_blocks(d, &oldest, 1);
}

static int buffer_new(struct strata__device *d, void *q, size_t bytes, strata_buffer_t *out) {
  *out = NULL;
  if (bytes == 0)
    return strata__error(STRATA_ERR_INVALID, "strata_buffer_new: a buffer of 0 bytes on device %d", d->index);
  int rc = strata__device_reserve(d, bytes);
  if (rc)
    return rc;
  void *h = NULL;
  struct strata_buffer *b = NULL; /* a block freed behind queued work comes with its handle, which it may still read */
  rc = block_get(d, bytes, q, &h, &b);
  if (rc) {
    strata__device_release(d, bytes);
    return rc;
  }
  if (!b && !(b = calloc(1, sizeof *b))) {
    buffer_cache_block(d, h, bytes);
    strata__device_release(d, bytes);
    return strata__error(STRATA_ERR_NOMEM, "out of host memory allocating a buffer handle");
  }
  b->h = h;
  b->dev = d;
  b->size = bytes;
  *out = b;
  return STRATA_OK;
}

STRATA_API int strata_buffer_new(int dev, size_t bytes, strata_buffer_t *out) {
  if (!out)
    return strata__error(STRATA_ERR_INVALID, "strata_buffer_new: out is NULL");
  *out = NULL;
  struct strata__device *d = strata__device_get(dev);
  if (!d)
    return STRATA_ERR_NOT_FOUND;
  return buffer_new(d, NULL, bytes, out);
}

STRATA_API int strata_buffer_new_on(strata_queue_t q, size_t bytes, strata_buffer_t *out) {
  if (!q || !out)
    return strata__error(STRATA_ERR_INVALID, "strata_buffer_new_on: NULL argument");
  return buffer_new(q->dev, q->h, bytes, out);
}

/* Put b's block into its device's cache, guarded by backend event ev of queue q (NULL: none; the handle is freed). */
static void buffer_cache(strata_buffer_t b, void *ev, void *q) {
  struct strata__device *d = b->dev;
  pthread_mutex_lock(&d->lock);
  struct strata__cached oldest = cache_make_room_locked(d);
  d->cache[d->ncache] = (struct strata__cached){.h = b->h, .bytes = b->size, .ev = ev, .q = q, .handle = ev ? b : NULL};
  d->ncache++;
  d->cached += b->size;
  d->used = d->used >= b->size ? d->used - b->size : 0;
  pthread_mutex_unlock(&d->lock);
  if (oldest.h)
    cache_free_blocks(d, &oldest, 1);
  if (!ev)
    free(b);
}

STRATA_API void strata_buffer_free(strata_buffer_t b) {
  if (b)
    buffer_cache(b, NULL, NULL);
}

STRATA_API void strata_buffer_free_on(strata_queue_t q, strata_buffer_t b) {
  if (!b)
    return;
  void *ev = NULL;
  const struct strata__backend *be = b->dev->slot->be;
  if (q && q->dev == b->dev && be->event_record(b->dev->slot->ctx, q->h, &ev) != STRATA_OK) {
    ev = NULL; /* no event: the queue is waited for here instead */
    strata__host_wait_count();
    be->queue_finish(b->dev->slot->ctx, q->h);
  }
  buffer_cache(b, ev, ev ? q->h : NULL);
}

STRATA_API int strata_device_alloc_stats(int dev, struct strata_device_alloc_stats *stats) {
  if (!stats)
    return strata__error(STRATA_ERR_INVALID, "strata_device_alloc_stats: stats is NULL");
  struct strata__device *d = strata__device_get(dev);
  if (!d)
    return STRATA_ERR_NOT_FOUND;
  pthread_mutex_lock(&d->lock);
  stats->backend_allocs = d->backend_allocs;
  stats->backend_frees = d->backend_frees;
  stats->reuses = d->reuses;
  stats->cached_bytes = d->cached;
  stats->backend_queues = d->backend_queues;
  pthread_mutex_unlock(&d->lock);
  return STRATA_OK;
}

STRATA_API int strata_device_trim(int dev) {
  struct strata__device *d = strata__device_get(dev);
  if (!d)
    return STRATA_ERR_NOT_FOUND;
  strata__cache_release(d);
  return STRATA_OK;
}

STRATA_API size_t strata_buffer_size(strata_buffer_t b) { return b ? b->size : 0; }

STRATA_API int strata_buffer_device(strata_buffer_t b) { return b ? b->dev->index : -1; }

STRATA_API int strata_queue_new(int dev, strata_queue_t *out) {
  if (!out)
    return strata__error(STRATA_ERR_INVALID, "strata_queue_new: out is NULL");
  *out = NULL;
  struct strata__device *d = strata__device_get(dev);
  if (!d)
    return STRATA_ERR_NOT_FOUND;
  struct strata_queue *q = calloc(1, sizeof *q);
  if (!q)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory allocating a queue");
  int rc = d->slot->be->queue_new(d->slot->ctx, d->local, &q->h);
  if (rc) {
    free(q);
    return rc;
  }
  pthread_mutex_lock(&d->lock);
  d->backend_queues++;
  pthread_mutex_unlock(&d->lock);
  q->dev = d;
  *out = q;
  return STRATA_OK;
}

STRATA_API void strata_queue_free(strata_queue_t q) {
  if (!q)
    return;
  const struct strata__backend *be = q->dev->slot->be;
  be->queue_finish(q->dev->slot->ctx, q->h);
  be->queue_free(q->dev->slot->ctx, q->h);
  free(q);
}

STRATA_API int strata_queue_device(strata_queue_t q) { return q ? q->dev->index : -1; }

STRATA_API int strata_queue_finish(strata_queue_t q) {
  if (!q)
    return strata__error(STRATA_ERR_INVALID, "strata_queue_finish: queue is NULL");
  strata__host_wait_count();
  return q->dev->slot->be->queue_finish(q->dev->slot->ctx, q->h);
}

void strata__queue_clock_read(strata_queue_t q, struct strata__queue_clock *c) {
  memset(c, 0, sizeof *c);
  const struct strata__backend *be = q ? q->dev->slot->be : NULL;
  if (be && be->queue_cpu_time && be->queue_cpu_time(q->dev->slot->ctx, q->h, &c->worker_s, &c->team_s) == 0)
    c->cpu = 1;
}

double strata__queue_busy(const struct strata__queue_clock *before, const struct strata__queue_clock *after,
                          double wall_s) {
  if (!before->cpu || !after->cpu)
    return wall_s;
  double worker = after->worker_s - before->worker_s, team = after->team_s - before->team_s;
  double busy = worker > team ? worker : team;
  return busy < 0 ? 0 : busy < wall_s ? busy : wall_s;
}

STRATA_API int strata_event_record(strata_queue_t q, strata_event_t *out) {
  if (!q || !out)
    return strata__error(STRATA_ERR_INVALID, "strata_event_record: NULL argument");
  *out = NULL;
  struct strata_event *e = calloc(1, sizeof *e);
  if (!e)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory allocating an event");
  int rc = q->dev->slot->be->event_record(q->dev->slot->ctx, q->h, &e->h);
  if (rc) {
    free(e);
    return rc;
  }
  e->dev = q->dev;
  *out = e;
  return STRATA_OK;
}

STRATA_API int strata_event_wait(strata_queue_t q, strata_event_t e) {
  if (!q || !e)
    return strata__error(STRATA_ERR_INVALID, "strata_event_wait: NULL argument");
  if (e->dev->slot == q->dev->slot)
    return q->dev->slot->be->event_wait(q->dev->slot->ctx, q->h, e->h);
  /* Another backend's event cannot enter this queue: wait on the host. */
  return strata_event_sync(e);
}

STRATA_API int strata_event_sync(strata_event_t e) {
  if (!e)
    return strata__error(STRATA_ERR_INVALID, "strata_event_sync: event is NULL");
  strata__host_wait_count();
  return e->dev->slot->be->event_sync(e->dev->slot->ctx, e->h);
}

STRATA_API void strata_event_free(strata_event_t e) {
  if (!e)
    return;
  e->dev->slot->be->event_free(e->dev->slot->ctx, e->h);
  free(e);
}
