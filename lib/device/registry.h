/* SPDX-License-Identifier: MIT */
/* registry.h — the runtime's view of loaded backends, their devices and the handles built on them. Internal. */
#ifndef STRATA__REGISTRY_H
#define STRATA__REGISTRY_H

#include <pthread.h>

#include "device/backend.h"
#include "core/core.h"

#define STRATA__MAX_BACKENDS 3
#define STRATA__MAX_DEVICES 256

struct strata__slot {
  char name[16];
  const struct strata__backend *be;   /* NULL when not loaded */
  void *ctx;
  void *dl;                           /* dlopen handle */
  int device_count;                   /* devices it contributes (after de-duplication) */
  char reason[256];
  char *path;                         /* the module file it was loaded from, whole (owned), or NULL */
};

/* Pinned (or plain) host memory for staged copies, and who allocated it. */
struct strata__staging {
  const struct strata__backend *be;   /* NULL: malloc */
  void *ctx;
  void *p;
  size_t bytes;
};

/* Freed blocks a device keeps for reuse (buffer.c), oldest first. */
#define STRATA__CACHE_MAX 256
struct strata__cached {
  void *h;                            /* the backend's buffer */
  size_t bytes;
  void *ev, *q;                       /* freed behind queued work: the backend's event marking the end of that work on
                                      ** queue q (strata_buffer_free_on), waited for before the block is used again;
                                      ** NULL: free to use at once */
  struct strata_buffer *handle;       /* with ev: the freed buffer's handle, which that work may still read: kept
                                      ** (unchanged) and handed out again with the block, freed with the block */
};

struct strata__device {
  int index;                          /* global index */
  struct strata__slot *slot;
  int local;                          /* index inside the backend */
  struct strata__device_info info;
  pthread_mutex_t lock;               /* guards the accounting and the cache below */
  uint64_t used, peak, limit;
  struct strata__cached cache[STRATA__CACHE_MAX];
  int ncache;
  uint64_t cached;                    /* bytes in cache[] */
  uint64_t backend_allocs, backend_frees, reuses, backend_queues;
  /* Staged copies through this device (copy.c), made on first use and kept:
  ** creating queues and pinning memory can stall a GPU, so not per copy. */
  pthread_mutex_t stage_lock;         /* one staged copy at a time uses them */
  void *stage_q;                      /* the backend's queue for them */
  struct strata__staging stage_buf[2];/* chunks for copies into this device */
};

/* Free a device's staging queue and chunks (registry teardown). */
void strata__staging_release(struct strata__device *d);

/* Give every cached block of the device back to its backend (buffer.c). */
void strata__cache_release(struct strata__device *d);

/* Make device `dev`'s cache hold `count` blocks of `bytes` (allocating the
** missing ones from the backend) for buffers that will come and go later,
** as far as the cache's room and the memory limit allow: what does not fit
** is simply not reserved. Returns a status only for backend failures. */
int strata__cache_fill(int dev, size_t bytes, int count);

/* Host memory that feeds device `dev` or receives from it: pinned by the
** device's backend where it can, else malloc (copy.c). Freed with
** strata__host_memory_free; a zeroed struct frees nothing. */
int strata__host_memory_new(int dev, size_t bytes, struct strata__staging *mem /* OUT */);
void strata__host_memory_free(struct strata__staging *mem);

struct strata_buffer {
  struct strata__device *dev;
  void *h;
  size_t size;
};

struct strata_queue {
  struct strata__device *dev;
  void *h;
};

struct strata_event {
  struct strata__device *dev;
  void *h;
};

/* Ensure strata_init has run; returns its status. */
int strata__ready(void);

/* The device with global index `dev`, or NULL after recording an error. */
struct strata__device *strata__device_get(int dev);

/* A one-line label for messages: "device 2 (opencl: pthread-skylake...)". */
const char *strata__device_label(const struct strata__device *d, char *buf, size_t len);

/* Reserve / release `bytes` of the device's accounted memory. */
int strata__device_reserve(struct strata__device *d, uint64_t bytes);
void strata__device_release(struct strata__device *d, uint64_t bytes);

/* What a queue's threads had spent at one moment (the backend's
** queue_cpu_time); cpu is 0 where the backend does not say. */
struct strata__queue_clock {
  int cpu;
  double worker_s, team_s;
};
void strata__queue_clock_read(strata_queue_t q, struct strata__queue_clock *c /* OUT */);

/* Busy seconds of an action that took `wall_s` between two readings of its
** queue's clock: the larger change of the two CPU clocks, at most the wall
** time; the wall time where the backend has no CPU clock. */
double strata__queue_busy(const struct strata__queue_clock *before, const struct strata__queue_clock *after,
                          double wall_s);

/* Host waits: every time a thread of this process blocked on a queue or an
** event through strata (strata_queue_finish, strata_event_sync, a strata_event_wait
** across backends, a staged copy's chunks, a queue-ordered block used off its
** queue), counted over the process's life; strata__host_wait_count adds one. */
uint64_t strata__host_waits(void);
void strata__host_wait_count(void);

#endif /* STRATA__REGISTRY_H */
