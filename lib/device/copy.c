/* SPDX-License-Identifier: MIT */
/* copy.c — host<->device copies, same-backend copies and cross-backend copies staged through pinned memory. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "core/parse.h"
#include "device/registry.h"

#define DEFAULT_CHUNK (4u << 20)

/* Check that [off, off + bytes) lies inside b. */
static int check_range(const char *what, strata_buffer_t b, size_t off, size_t bytes) {
  if (!b)
    return strata__error(STRATA_ERR_INVALID, "%s: buffer is NULL", what);
  if (off > b->size || bytes > b->size - off)
    return strata__error(STRATA_ERR_RANGE, "%s: bytes [%zu, %zu) lie outside the buffer of %zu bytes", what, off,
                         off + bytes, b->size);
  return STRATA_OK;
}

static int check_queue_device(const char *what, strata_queue_t q, strata_buffer_t b) {
  if (!q)
    return strata__error(STRATA_ERR_INVALID, "%s: queue is NULL", what);
  if (q->dev != b->dev) {
    char lq[200], lb[200];
    return strata__error(STRATA_ERR_DEVICE_MISMATCH, "%s: the buffer is on %s but the queue on %s", what,
                         strata__device_label(b->dev, lb, sizeof lb), strata__device_label(q->dev, lq, sizeof lq));
  }
  return STRATA_OK;
}

STRATA_API int strata_buffer_write(strata_queue_t q, strata_buffer_t dst, size_t off, const void *src, size_t bytes) {
  int rc = check_range("strata_buffer_write", dst, off, bytes);
  if (!rc)
    rc = check_queue_device("strata_buffer_write", q, dst);
  if (rc)
    return rc;
  if (!src && bytes)
    return strata__error(STRATA_ERR_INVALID, "strata_buffer_write: source pointer is NULL");
  if (!bytes)
    return STRATA_OK;
  return q->dev->slot->be->write(q->dev->slot->ctx, q->h, dst->h, off, src, bytes);
}

STRATA_API int strata_buffer_read(strata_queue_t q, strata_buffer_t src, size_t off, void *dst, size_t bytes) {
  int rc = check_range("strata_buffer_read", src, off, bytes);
  if (!rc)
    rc = check_queue_device("strata_buffer_read", q, src);
  if (rc)
    return rc;
  if (!dst && bytes)
    return strata__error(STRATA_ERR_INVALID, "strata_buffer_read: destination pointer is NULL");
  if (!bytes)
    return STRATA_OK;
  return q->dev->slot->be->read(q->dev->slot->ctx, q->h, src->h, off, dst, bytes);
}

STRATA_API int strata_buffer_upload(strata_queue_t q, strata_buffer_t dst, size_t off, const void *src, size_t bytes) {
  int rc = strata_buffer_write(q, dst, off, src, bytes);
  int rc2 = q ? strata_queue_finish(q) : STRATA_OK;
  return rc ? rc : rc2;
}

STRATA_API int strata_buffer_download(strata_queue_t q, strata_buffer_t src, size_t off, void *dst, size_t bytes) {
  int rc = strata_buffer_read(q, src, off, dst, bytes);
  int rc2 = q ? strata_queue_finish(q) : STRATA_OK;
  return rc ? rc : rc2;
}

/* Chunk size of staged copies: STRATA_STAGING_CHUNK, default 4 MiB. */
static int staging_chunk(size_t *chunk) {
  const char *env = getenv("STRATA_STAGING_CHUNK");
  *chunk = DEFAULT_CHUNK;
  if (!env || !*env)
    return STRATA_OK;
  uint64_t v = 0;
  int prc = strata__parse_size(env, &v);
  if (prc || v == 0 || v > (1ull << 31))
    return strata__error(prc ? prc : STRATA_ERR_RANGE, "STRATA_STAGING_CHUNK='%s' is not a size between 1 byte and 2G%s%s",
                         env, prc ? ": " : "", prc ? strata__parse_why() : "");
  *chunk = (size_t)v;
  return STRATA_OK;
}

/* Pinned host memory from the backend that has it (the destination's first), else malloc. */
static int staging_alloc(struct strata__device *a, struct strata__device *b, size_t bytes, struct strata__staging *s) {
  struct strata__device *order[2] = {a, b};
  s->be = NULL;
  s->p = NULL;
  s->bytes = 0;
  for (int i = 0; i < 2; i++) {
    const struct strata__backend *be = order[i]->slot->be;
    if (!be->host_alloc)
      continue;
    if (be->host_alloc(order[i]->slot->ctx, order[i]->local, bytes, &s->p) == STRATA_OK) {
      s->be = be;
      s->ctx = order[i]->slot->ctx;
      s->bytes = bytes;
      return STRATA_OK;
    }
    char label[256];
    strata__log(STRATA_LOG_WARN, "device", "%s: no pinned host memory (%s): copies go through pageable memory",
                strata__device_label(order[i], label, sizeof label), strata_last_error());
  }
  s->p = malloc(bytes);
  if (!s->p)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory for a %zu-byte staging buffer", bytes);
  s->bytes = bytes;
  return STRATA_OK;
}

static void staging_free(struct strata__staging *s) {
  if (!s->p)
    return;
  if (s->be)
    s->be->host_free(s->ctx, s->p);
  else
    free(s->p);
  s->p = NULL;
  s->bytes = 0;
}

int strata__host_memory_new(int dev, size_t bytes, struct strata__staging *mem) {
  memset(mem, 0, sizeof *mem);
  struct strata__device *d = strata__device_get(dev);
  if (!d)
    return STRATA_ERR_NOT_FOUND;
  return staging_alloc(d, d, bytes ? bytes : 1, mem);
}

void strata__host_memory_free(struct strata__staging *mem) { staging_free(mem); }

void strata__staging_release(struct strata__device *d) {
  if (d->stage_q) {
    d->slot->be->queue_finish(d->slot->ctx, d->stage_q);
    d->slot->be->queue_free(d->slot->ctx, d->stage_q);
    d->stage_q = NULL;
  }
  staging_free(&d->stage_buf[0]);
  staging_free(&d->stage_buf[1]);
}

/* The device's staging queue, made on first use. Caller holds d->stage_lock. */
static int staging_queue(struct strata__device *d, void **q) {
  if (!d->stage_q)
    TRY(d->slot->be->queue_new(d->slot->ctx, d->local, &d->stage_q));
  *q = d->stage_q;
  return STRATA_OK;
}

/* Wait on the host for event *ev of backend `be` (a host wait, counted), free it and clear it. */
static int sync_free(const struct strata__backend *be, void *ctx, void **ev) {
  strata__host_wait_count();
  int rc = be->event_sync(ctx, *ev);
  be->event_free(ctx, *ev);
  *ev = NULL;
  return rc;
}

/*
** Copy across backends: chunk i is read from the source into staging
** buffer i % 2 while chunk i - 1 is written from the other one. A staging
** buffer is reused only after the write that last read it has finished.
** The calling thread waits once a chunk for its read (and for the write two
** chunks back): the executor calls it on its copy threads, not its workers.
** The two devices' staging queues and the destination's chunks are kept
** between copies; their locks are taken in device order.
*/
static int copy_staged(strata_queue_t q, strata_buffer_t dst, size_t doff, strata_buffer_t src, size_t soff,
                       size_t bytes) {
  size_t chunk;
  TRY(staging_chunk(&chunk));
  if (chunk > bytes)
    chunk = bytes;
  TRY(strata_queue_finish(q));
  struct strata__device *sd = src->dev, *dd = dst->dev;
  struct strata__device *first = sd->index < dd->index ? sd : dd, *second = first == sd ? dd : sd;
  pthread_mutex_lock(&first->stage_lock);
  pthread_mutex_lock(&second->stage_lock);
  const struct strata__backend *sbe = sd->slot->be, *dbe = dd->slot->be;
  void *sctx = sd->slot->ctx, *dctx = dd->slot->ctx;
  void *sq = NULL, *dq = NULL, *wev[2] = {NULL, NULL};
  struct strata__staging *stage = dd->stage_buf;
  int rc = staging_queue(sd, &sq);
  if (!rc)
    rc = staging_queue(dd, &dq);
  for (int i = 0; i < 2 && !rc; i++)
    if (stage[i].bytes < chunk) {
      staging_free(&stage[i]);
      rc = staging_alloc(dd, sd, chunk, &stage[i]);
    }
  /* chunk i is read into stage[i % 2] once chunk i - 2's write has read that buffer; chunk i - 1 is written once
  ** its read has run, after chunk i's read is queued: the source always has the next read queued while the host
  ** waits for one (a backend cannot wait for another backend's event on its device: one handoff a chunk) */
  const size_t nchunks = (bytes + chunk - 1) / chunk;
  void *rev[2] = {NULL, NULL};
  for (size_t i = 0; !rc && i <= nchunks; i++) {
    if (i < nchunks) {
      const size_t at = i * chunk, len = bytes - at < chunk ? bytes - at : chunk;
      if (wev[i % 2]) /* the write two chunks back still reads this buffer */
        rc = sync_free(dbe, dctx, &wev[i % 2]);
      if (!rc)
        rc = sbe->read(sctx, sq, src->h, soff + at, stage[i % 2].p, len);
      if (!rc)
        rc = sbe->event_record(sctx, sq, &rev[i % 2]);
    }
    if (!rc && i > 0) { /* chunk i - 1 reaches the host before the other backend may read it */
      const size_t k = i - 1, at = k * chunk, len = bytes - at < chunk ? bytes - at : chunk;
      rc = sync_free(sbe, sctx, &rev[k % 2]);
      if (!rc)
        rc = dbe->write(dctx, dq, dst->h, doff + at, stage[k % 2].p, len);
      if (!rc)
        rc = dbe->event_record(dctx, dq, &wev[k % 2]);
    }
  }
  for (int i = 0; i < 2; i++)
    if (rev[i])
      sbe->event_free(sctx, rev[i]);
  /* both queues drain before the chunks can serve another copy */
  if (dq) {
    strata__host_wait_count();
    int rc2 = dbe->queue_finish(dctx, dq);
    if (!rc)
      rc = rc2;
  }
  if (sq) {
    strata__host_wait_count();
    int rc2 = sbe->queue_finish(sctx, sq);
    if (!rc)
      rc = rc2;
  }
  for (int i = 0; i < 2; i++)
    if (wev[i])
      dbe->event_free(dctx, wev[i]);
  pthread_mutex_unlock(&second->stage_lock);
  pthread_mutex_unlock(&first->stage_lock);
  return rc;
}

STRATA_API int strata_buffer_copy(strata_queue_t q, strata_buffer_t dst, size_t doff, strata_buffer_t src, size_t soff,
                                  size_t bytes) {
  int rc = check_range("strata_buffer_copy (destination)", dst, doff, bytes);
  if (!rc)
    rc = check_range("strata_buffer_copy (source)", src, soff, bytes);
  if (rc)
    return rc;
  if (!q)
    return strata__error(STRATA_ERR_INVALID, "strata_buffer_copy: queue is NULL");
  if (q->dev != dst->dev && q->dev != src->dev) {
    char lq[200];
    return strata__error(STRATA_ERR_DEVICE_MISMATCH,
                         "strata_buffer_copy: the queue is on %s, neither the source's nor the destination's device",
                         strata__device_label(q->dev, lq, sizeof lq));
  }
  if (src == dst && soff < doff + bytes && doff < soff + bytes)
    return strata__error(STRATA_ERR_INVALID, "strata_buffer_copy: source and destination ranges overlap");
  if (!bytes)
    return STRATA_OK;
  if (src->dev->slot == dst->dev->slot)
    return q->dev->slot->be->copy(q->dev->slot->ctx, q->h, dst->h, doff, src->h, soff, bytes);
  return copy_staged(q, dst, doff, src, soff, bytes);
}
