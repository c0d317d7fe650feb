/* SPDX-License-Identifier: MIT */
/* strata/device.h — devices of every backend under one index, buffers, queues, events and copies. */
#ifndef STRATA_DEVICE_H
#define STRATA_DEVICE_H

#include <strata/common.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct strata_buffer *strata_buffer_t;
typedef struct strata_queue *strata_queue_t;
typedef struct strata_event *strata_event_t;

/*
** Load the backend modules and enumerate their devices. Safe to call more
** than once and from several threads; later calls return the first result.
** Modules are looked up in STRATA_BACKEND_PATH (a colon-separated list of
** directories) and then in the package library directory. STRATA_BACKENDS
** (e.g. "host,opencl") restricts which backends are loaded. A backend whose
** driver or library is missing contributes no devices and records why
** (strata_backend_info); that is not an error.
*/
STRATA_API int strata_init(void);

/* Release every device and unload the backends. Buffers and queues still
** alive become invalid. strata_init may be called again afterwards. */
STRATA_API void strata_shutdown(void);

#define STRATA_NAME_MAX 128

struct strata_backend_info {
  char name[16];                /* "cuda", "opencl", "host" */
  int loaded;                   /* 1 when the module loaded and initialised */
  int device_count;             /* devices it contributes to the global list */
  char reason[256];             /* why it has no devices, "" otherwise */
  const char *path;             /* module file it was loaded from, whole, "" if none: owned by strata, valid
                                   until strata_shutdown */
  char collectives[256];        /* how collectives among its devices run: its library and
                                   version ("NCCL 2.21.5"), or "strata's ring" and why */
};

/* Number of backends strata knows of (loaded or not). */
STRATA_API int strata_backend_count(int *count /* OUT */);
STRATA_API int strata_backend_info(int index, struct strata_backend_info *info /* OUT */);

struct strata_device_props {
  char name[STRATA_NAME_MAX];
  char vendor[64];
  char backend[16];             /* "cuda", "opencl", "host" */
  int backend_index;            /* index of the device inside its backend */
  int is_cpu;                   /* the device computes on the host CPU */
  int compute_units;
  uint64_t total_memory;        /* bytes the device has */
  uint64_t memory_limit;        /* bytes strata lets it use: total, or the cap */
  uint64_t used_memory;         /* bytes allocated through strata now */
  uint64_t free_memory;         /* memory_limit - used_memory */
  char pci_bus_id[32];          /* "0000:3b:00.0", or "" without a PCI identity */
};

/* Number of devices over all backends. Calls strata_init if needed. */
STRATA_API int strata_device_count(int *count /* OUT */);

/* Properties of device `dev` (0 .. count-1), filled by the library. */
STRATA_API int strata_device_props(int dev, struct strata_device_props *props /* OUT */);

/* Memory accounting of a device: bytes in use, highest use since the last
** reset, and the limit (STRATA_DEVICE_MEMORY_LIMIT, e.g. "256M", caps every
** device). Any out-parameter may be NULL. */
STRATA_API int strata_device_memory(int dev, uint64_t *used /* OUT */, uint64_t *peak /* OUT */,
                                    uint64_t *limit /* OUT */);
STRATA_API int strata_device_reset_peak(int dev);

/*
** What the device's caching allocator did since strata_init: buffers are
** taken from the backend (backend_allocs) only when no freed block of the
** same size is cached; strata_buffer_free returns a block to the cache
** (backend_frees counts blocks handed back to the backend: evicted, trimmed
** or on a limit hit). Cached blocks are not "used" memory; used + cached
** stays under the device's limit. backend_queues counts queues created.
*/
struct strata_device_alloc_stats {
  uint64_t backend_allocs;      /* blocks allocated by the backend */
  uint64_t backend_frees;       /* blocks given back to the backend */
  uint64_t reuses;              /* buffers served from the cache */
  uint64_t cached_bytes;        /* bytes held in the cache now */
  uint64_t backend_queues;      /* queues created on the device */
};
STRATA_API int strata_device_alloc_stats(int dev, struct strata_device_alloc_stats *stats /* OUT */);

/* Give every cached block of device `dev` back to its backend. */
STRATA_API int strata_device_trim(int dev);

/*
** Allocate `bytes` (> 0) on device `dev`. Fails with STRATA_ERR_DEVICE_MEMORY,
** allocating nothing, when the device's limit would be exceeded (after the
** device's cached blocks were given back to make room). The caller frees the
** buffer with strata_buffer_free once no queued work uses it; its memory
** then stays cached for the next buffer of the same size (no device-wide
** synchronisation, as cudaFree would).
*/
STRATA_API int strata_buffer_new(int dev, size_t bytes, strata_buffer_t *buf /* OUT */);
STRATA_API void strata_buffer_free(strata_buffer_t buf);
/*
** Queue-ordered buffers. strata_buffer_free_on frees `buf` once the work
** enqueued on `queue` (a queue of the buffer's device) so far has run, without
** waiting for it: its block is kept for reuse behind that work.
** strata_buffer_new_on allocates as strata_buffer_new a buffer that `queue`
** will use: a block freed behind another queue's work makes `queue` wait for
** that work (on the device); strata_buffer_new, strata_device_trim and the
** cache's evictions wait for it on the host.
*/
STRATA_API int strata_buffer_new_on(strata_queue_t queue, size_t bytes, strata_buffer_t *buf /* OUT */);
STRATA_API void strata_buffer_free_on(strata_queue_t queue, strata_buffer_t buf);
STRATA_API size_t strata_buffer_size(strata_buffer_t buf);
STRATA_API int strata_buffer_device(strata_buffer_t buf);

/*
** Queues run work in the order it is enqueued, asynchronously to the
** caller. strata_queue_free waits for the queue's work, then frees it.
*/
STRATA_API int strata_queue_new(int dev, strata_queue_t *queue /* OUT */);
STRATA_API void strata_queue_free(strata_queue_t queue);
STRATA_API int strata_queue_device(strata_queue_t queue);
/* Wait until everything enqueued so far has run; returns the first error
** the queue met since the last finish (and clears it). */
STRATA_API int strata_queue_finish(strata_queue_t queue);

/* Mark the current end of `queue`; the event completes when the work before
** it has run. Free with strata_event_free (which does not wait). */
STRATA_API int strata_event_record(strata_queue_t queue, strata_event_t *event /* OUT */);
/* Make `queue` wait for `event` before running what is enqueued after this
** call. Within one backend the wait is done by the device; across backends
** this call blocks the caller until the event completes. */
STRATA_API int strata_event_wait(strata_queue_t queue, strata_event_t event);
/* Block until the event completes. */
STRATA_API int strata_event_sync(strata_event_t event);
STRATA_API void strata_event_free(strata_event_t event);

/*
** Copies. Offsets and sizes are in bytes and must lie inside the buffers.
** Host pointers passed to the asynchronous write/read must stay valid (and,
** for write, unchanged) until the queue has run the copy.
*/
STRATA_API int strata_buffer_write(strata_queue_t queue, strata_buffer_t dst, size_t dst_offset,
                                   const void *src, size_t bytes);
STRATA_API int strata_buffer_read(strata_queue_t queue, strata_buffer_t src, size_t src_offset,
                                  void *dst, size_t bytes);

/*
** Copy between two buffers; `queue` belongs to the device of `dst` or of
** `src`. On one backend the copy is enqueued on `queue` (asynchronous).
** Across backends (CUDA <-> OpenCL <-> host) it is staged through pinned
** host memory in chunks (STRATA_STAGING_CHUNK bytes, default 4M), two chunks
** in flight so that reading one overlaps writing the other; the call first
** waits for `queue`'s earlier work and returns once the data has arrived.
** Work on the other device that produces `src` must have finished (or been
** waited for with an event) before the call.
*/
STRATA_API int strata_buffer_copy(strata_queue_t queue, strata_buffer_t dst, size_t dst_offset,
                                  strata_buffer_t src, size_t src_offset, size_t bytes);

/* Blocking conveniences: enqueue on `queue`, then strata_queue_finish. */
STRATA_API int strata_buffer_upload(strata_queue_t queue, strata_buffer_t dst, size_t dst_offset,
                                    const void *src, size_t bytes);
STRATA_API int strata_buffer_download(strata_queue_t queue, strata_buffer_t src, size_t src_offset,
                                      void *dst, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_DEVICE_H */
