/* SPDX-License-Identifier: MIT */
/* buffer.c — buffers with memory accounting, queues and events over the backends' own handles. */
#include "config.h"

#include <stdlib.h>

#include "registry.h"

STRATA_API int strata_buffer_new(int dev, size_t bytes, strata_buffer_t *out) {
  if (!out)
    return strata__error(STRATA_ERR_INVALID, "strata_buffer_new: out is NULL");
  *out = NULL;
  struct strata__device *d = strata__device_get(dev);
  if (!d)
    return STRATA_ERR_NOT_FOUND;
  if (bytes == 0)
    return strata__error(STRATA_ERR_INVALID, "strata_buffer_new: a buffer of 0 bytes on device %d", dev);
  int rc = strata__device_reserve(d, bytes);
  if (rc)
    return rc;
  struct strata_buffer *b = calloc(1, sizeof *b);
  if (!b) {
    strata__device_release(d, bytes);
    return strata__error(STRATA_ERR_NOMEM, "out of host memory allocating a buffer handle");
  }
  rc = d->slot->be->alloc(d->slot->ctx, d->local, bytes, &b->h);
  if (rc) {
    free(b);
    strata__device_release(d, bytes);
    return rc;
  }
  b->dev = d;
  b->size = bytes;
  *out = b;
  return STRATA_OK;
}

STRATA_API void strata_buffer_free(strata_buffer_t b) {
  if (!b)
    return;
  b->dev->slot->be->free(b->dev->slot->ctx, b->dev->local, b->h);
  strata__device_release(b->dev, b->size);
  free(b);
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
  return q->dev->slot->be->queue_finish(q->dev->slot->ctx, q->h);
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
  return e->dev->slot->be->event_sync(e->dev->slot->ctx, e->h);
}

STRATA_API void strata_event_free(strata_event_t e) {
  if (!e)
    return;
  e->dev->slot->be->event_free(e->dev->slot->ctx, e->h);
  free(e);
}
