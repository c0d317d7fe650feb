/* SPDX-License-Identifier: MIT */
/* cuda.c — the CUDA backend module: cudart devices, memory, streams, events, copies; cuBLAS GEMM; kernels/ops.k ops. */
#define _GNU_SOURCE 1 /* dladdr */
#include "config.h"

#include <ctype.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <strata/comm.h>
#include "device/backend.h"
#include "collectives.h"
#include "launch.h"

/* A device buffer: the pointer cudaMalloc gave and the device it lives on
** (cudaMemcpyPeerAsync needs both ordinals). */
struct strata__cuda_buf {
  char *ptr;
  int dev;
};

/* A queue: one non-blocking stream with its own cuBLAS handle bound to it,
** and the scratch of partial sums that sumsq needs. The scratch belongs to
** the queue rather than to the device because two queues of one device run
** concurrently and would otherwise overwrite each other's partials. */
struct strata__cuda_queue {
  int dev;
  cudaStream_t stream;
  cublasHandle_t blas;
  float *partials;          /* STRATA__CUDA_SUMSQ_PARTS floats on `dev` */
};

struct strata__cuda_event {
  int dev;
  cudaEvent_t ev;
  struct strata__cuda_event *next; /* in the device's pool while free */
};

/* The backend's context: the services and, per ordered device pair, whether
** peer access has been tried (enabled or not possible). */
struct strata__cuda {
  const struct strata__services *svc;
  int count;
  int wg;                    /* block size of the cooperative kernels (STRATA_KERNEL_WORKGROUP, default 256) */
  int tf32;                  /* STRATA_CUDA_TF32=1: float32 GEMMs on TF32 tensor cores (off: exact float32) */
  pthread_mutex_t peer_lock;
  unsigned char *peer_tried; /* count * count, row = from-device */
  /* The driver's current-context calls, reached through cudart (the module
  ** does not link libcuda): entry points save the caller's context and put
  ** it back, even when it was none. */
  CUresult (*ctx_get)(CUcontext *);
  CUresult (*ctx_set)(CUcontext);
  /* Events already created and free for another record, per device: one
  ** cudaEventCreate per event ever live at once, not one per record. */
  pthread_mutex_t event_lock;
  struct strata__cuda_event **event_pool; /* count lists */
  /* Page-locked host memory handed out, with the device each was allocated
  ** for: freed with that device's context current (under pinned_lock). */
  pthread_mutex_t pinned_lock;
  struct strata__cuda_pinned *pinned;
};

struct strata__cuda_pinned {
  void *ptr;
  int dev;
  struct strata__cuda_pinned *next;
};

/* The file of the shared library holding `sym` (a function), "?" if unknown. */
static const char *strata__cuda_lib_path(void *sym) {
  Dl_info di;
  return dladdr(sym, &di) && di.dli_fname ? di.dli_fname : "?";
}

/* Record `what` failed with `e`; clears the (non-sticky) last error so that
** a later launch check does not report it again. */
static int strata__cuda_fail(const struct strata__cuda *cx, const char *what, cudaError_t e) {
  (void)cudaGetLastError();
  int status = e == cudaErrorMemoryAllocation ? STRATA_ERR_DEVICE_MEMORY : STRATA_ERR_BACKEND;
  return cx->svc->error(status, "cuda: %s: %s", what, cudaGetErrorString(e));
}

static int strata__cublas_fail(const struct strata__cuda *cx, const char *what, cublasStatus_t s) {
  int status = s == CUBLAS_STATUS_ALLOC_FAILED ? STRATA_ERR_DEVICE_MEMORY : STRATA_ERR_BACKEND;
  return cx->svc->error(status, "cuda: %s: %s", what, cublasGetStatusString(s));
}

/*
** Make `dev` current for this thread (the runtime API keeps one current
** device per host thread and the runtime may call from any thread) after
** saving the caller's context in *saved; every entry point that enters
** leaves with strata__cuda_leave, so the application's current device is
** what it was. On failure nothing is changed and there is nothing to leave.
*/
static int strata__cuda_enter(const struct strata__cuda *cx, int dev, CUcontext *saved /* OUT */) {
  *saved = NULL;
  if (cx->ctx_get(saved) != CUDA_SUCCESS)
    *saved = NULL;
  cudaError_t e = cudaSetDevice(dev);
  if (e != cudaSuccess) {
    cx->ctx_set(*saved);
    return strata__cuda_fail(cx, "cudaSetDevice", e);
  }
  return STRATA_OK;
}

/* Put back the context strata__cuda_enter saved (NULL: none current). */
static void strata__cuda_leave(const struct strata__cuda *cx, CUcontext saved) { (void)cx->ctx_set(saved); }

/* Run `call` (a status expression) with `dev` current, then restore the caller's context. */
#define STRATA__CUDA_ON(cx, dev, call)                                                                                \
  do {                                                                                                                 \
    CUcontext saved_;                                                                                                  \
    int rc_ = strata__cuda_enter((cx), (dev), &saved_);                                                                \
    if (rc_)                                                                                                           \
      return rc_;                                                                                                      \
    rc_ = (call);                                                                                                      \
    strata__cuda_leave((cx), saved_);                                                                                  \
    return rc_;                                                                                                        \
  } while (0)

/* For nccl.c: the caller's driver context, and putting it back. */
void *strata__cuda_context_save(void *ctx) {
  const struct strata__cuda *cx = ctx;
  CUcontext saved = NULL;
  if (!cx || cx->ctx_get(&saved) != CUDA_SUCCESS)
    saved = NULL;
  return (void *)saved;
}

void strata__cuda_context_restore(void *ctx, void *saved) {
  const struct strata__cuda *cx = ctx;
  if (cx)
    (void)cx->ctx_set((CUcontext)saved);
}

/* The driver function `name` through cudart, or NULL. */
static void *strata__cuda_driver_fn(const char *name) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(name, &fn, CUDART_VERSION, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return NULL;
  }
  return fn;
}

/* Log, at level info, the driver's CUDA version and the libraries this module
** resolved: cudart, cuBLAS and (when linked) NCCL, each with its version and
** the file it was loaded from. tests/gpu/run prints these before any test. */
static void strata__cuda_log_versions(const struct strata__services *svc) {
  int drv = 0, rt = 0, blas = 0;
  if (cudaDriverGetVersion(&drv) != cudaSuccess)
    drv = 0;
  if (cudaRuntimeGetVersion(&rt) != cudaSuccess)
    rt = 0;
  if (cublasGetVersion(NULL, &blas) != CUBLAS_STATUS_SUCCESS)
    blas = 0;
  (void)cudaGetLastError();
  char driver[48];
  if (drv > 0)
    snprintf(driver, sizeof driver, "supports CUDA %d.%d", drv / 1000, drv % 1000 / 10);
  else
    snprintf(driver, sizeof driver, "none found (no libcuda)");
  svc->log(STRATA_LOG_INFO, "cuda", "driver %s; cudart %d.%d (%s); cuBLAS %d.%d.%d (%s)", driver, rt / 1000,
           rt % 1000 / 10, strata__cuda_lib_path((void *)(uintptr_t)cudaGetDeviceCount), blas / 10000,
           blas % 10000 / 100, blas % 100, strata__cuda_lib_path((void *)(uintptr_t)cublasGetVersion));
  /* NCCL is loaded at run time: nccl.c says which one, or why none */
  char nccl[256];
  strata__nccl_probe(NULL, nccl, sizeof nccl);
  svc->log(STRATA_LOG_INFO, "cuda", "%s", nccl);
}

/*
** Start the backend: count the devices. A machine without the driver or
** without a device is not an error: 0 devices and a one-line reason. No
** CUDA context is created here (cudaGetDeviceCount does not create one).
*/
static int strata__cuda_init(const struct strata__services *svc, void **ctx /* OUT */, char *why /* OUT */,
                             size_t why_len) {
  *ctx = NULL;
  if (svc->api_version != STRATA__BACKEND_API_VERSION)
    return svc->error(STRATA_ERR_VERSION, "cuda: module built for backend API %d, runtime speaks %d",
                      STRATA__BACKEND_API_VERSION, svc->api_version);
  int wg = STRATA__CUDA_WG_MAX;
  const char *env = getenv("STRATA_KERNEL_WORKGROUP");
  if (env && *env) {
    char *end = NULL;
    unsigned long v = strtoul(env, &end, 10);
    if (!end || *end || v == 0 || v > STRATA__CUDA_WG_MAX || (v & (v - 1)))
      return svc->error(STRATA_ERR_PARSE, "STRATA_KERNEL_WORKGROUP='%s' is not a power of two from 1 to %d", env,
                        STRATA__CUDA_WG_MAX);
    wg = (int)v;
  }
  int tf32 = 0;
  env = getenv("STRATA_CUDA_TF32");
  if (env && *env) {
    if (strcmp(env, "0") && strcmp(env, "1"))
      return svc->error(STRATA_ERR_PARSE, "STRATA_CUDA_TF32='%s': expected 0 or 1", env);
    tf32 = env[0] == '1';
  }
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  strata__cuda_log_versions(svc);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    snprintf(why, why_len, "no CUDA device (cudaGetDeviceCount: %s)", cudaGetErrorString(e));
    return 0;
  }
  if (count <= 0) {
    snprintf(why, why_len, "no CUDA device (cudaGetDeviceCount found none)");
    return 0;
  }
  CUresult (*ctx_get)(CUcontext *) = (CUresult(*)(CUcontext *))strata__cuda_driver_fn("cuCtxGetCurrent");
  CUresult (*ctx_set)(CUcontext) = (CUresult(*)(CUcontext))strata__cuda_driver_fn("cuCtxSetCurrent");
  if (!ctx_get || !ctx_set) {
    snprintf(why, why_len, "the CUDA driver offers no cuCtxGetCurrent/cuCtxSetCurrent through cudart");
    return 0;
  }
  struct strata__cuda *cx = calloc(1, sizeof *cx);
  unsigned char *tried = calloc((size_t)count * (size_t)count, 1);
  struct strata__cuda_event **pool = calloc((size_t)count, sizeof *pool);
  if (!cx || !tried || !pool) {
    free(cx);
    free(tried);
    free(pool);
    return svc->error(STRATA_ERR_NOMEM, "cuda: out of host memory starting the backend");
  }
  cx->svc = svc;
  strata__nccl_svc = svc;
  cx->count = count;
  cx->wg = wg;
  cx->tf32 = tf32;
  if (tf32)
    svc->log(STRATA_LOG_INFO, "cuda", "STRATA_CUDA_TF32=1: float32 GEMMs on TF32 tensor cores (10-bit mantissas)");
  cx->peer_tried = tried;
  cx->ctx_get = ctx_get;
  cx->ctx_set = ctx_set;
  cx->event_pool = pool;
  pthread_mutex_init(&cx->peer_lock, NULL);
  pthread_mutex_init(&cx->event_lock, NULL);
  pthread_mutex_init(&cx->pinned_lock, NULL);
  *ctx = cx;
  return count;
}

/* Stop the backend. Every buffer, queue and event must be freed already;
** the devices themselves are left as they are (another library of the
** process may use them). NULL (no devices) does nothing. */
static void strata__cuda_fini(void *ctx) {
  struct strata__cuda *cx = ctx;
  if (!cx)
    return;
  for (int d = 0; d < cx->count; d++) {
    while (cx->event_pool[d]) {
      struct strata__cuda_event *ev = cx->event_pool[d];
      cx->event_pool[d] = ev->next;
      CUcontext saved;
      if (strata__cuda_enter(cx, ev->dev, &saved) == STRATA_OK) {
        cudaEventDestroy(ev->ev);
        strata__cuda_leave(cx, saved);
      }
      free(ev);
    }
  }
  while (cx->pinned) { /* the runtime frees its staging memory first: nothing should be left */
    struct strata__cuda_pinned *p = cx->pinned;
    cx->pinned = p->next;
    free(p);
  }
  (void)cudaGetLastError();
  pthread_mutex_destroy(&cx->pinned_lock);
  pthread_mutex_destroy(&cx->event_lock);
  pthread_mutex_destroy(&cx->peer_lock);
  free(cx->event_pool);
  free(cx->peer_tried);
  free(cx);
}

/* Name, vendor, SM count, memory and the PCI bus id as "dddd:bb:dd.f"
** in lower case (the form hwloc and the other backends use). */
static int strata__cuda_device_info(void *ctx, int dev, struct strata__device_info *info /* OUT */) {
  struct strata__cuda *cx = ctx;
  struct cudaDeviceProp prop;
  cudaError_t e = cudaGetDeviceProperties(&prop, dev);
  if (e != cudaSuccess)
    return strata__cuda_fail(cx, "cudaGetDeviceProperties", e);
  memset(info, 0, sizeof *info);
  snprintf(info->name, sizeof info->name, "%.*s", (int)sizeof info->name - 1, prop.name);
  snprintf(info->vendor, sizeof info->vendor, "NVIDIA");
  info->is_cpu = 0;
  info->compute_units = prop.multiProcessorCount;
  info->total_memory = (uint64_t)prop.totalGlobalMem;
  char bus[64] = "";
  unsigned domain, busno, slot, fn;
  e = cudaDeviceGetPCIBusId(bus, (int)sizeof bus, dev);
  if (e == cudaSuccess && sscanf(bus, "%x:%x:%x.%x", &domain, &busno, &slot, &fn) == 4) {
    snprintf(info->pci_bus_id, sizeof info->pci_bus_id, "%04x:%02x:%02x.%x", domain, busno, slot, fn);
  } else {
    (void)cudaGetLastError();
    snprintf(info->pci_bus_id, sizeof info->pci_bus_id, "%04x:%02x:%02x.0", (unsigned)prop.pciDomainID,
             (unsigned)prop.pciBusID, (unsigned)prop.pciDeviceID);
  }
  for (char *p = info->pci_bus_id; *p; p++)
    *p = (char)tolower((unsigned char)*p);
  return STRATA_OK;
}

/* ------------------------------------------------------------------ memory */

/* A device buffer of `bytes` on `dev`; the caller frees it with
** strata__cuda_free. Out of memory is STRATA_ERR_DEVICE_MEMORY. */
static int strata__cuda_alloc_on(struct strata__cuda *cx, int dev, size_t bytes, void **buf /* OUT */) {
  struct strata__cuda_buf *b = malloc(sizeof *b);
  if (!b)
    return cx->svc->error(STRATA_ERR_NOMEM, "cuda: out of host memory");
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    free(b);
    char what[96];
    snprintf(what, sizeof what, "cudaMalloc of %zu bytes on device %d", bytes, dev);
    return strata__cuda_fail(cx, what, e);
  }
  b->ptr = p;
  b->dev = dev;
  *buf = b;
  return STRATA_OK;
}

static int strata__cuda_alloc(void *ctx, int dev, size_t bytes, void **buf /* OUT */) {
  *buf = NULL;
  STRATA__CUDA_ON(ctx, dev, strata__cuda_alloc_on(ctx, dev, bytes, buf));
}

/* cudaFree synchronises the device, so no queued work still uses it. */
static void strata__cuda_free(void *ctx, int dev, void *buf) {
  struct strata__cuda *cx = ctx;
  struct strata__cuda_buf *b = buf;
  if (!b)
    return;
  CUcontext saved;
  if (strata__cuda_enter(cx, b->dev, &saved) == STRATA_OK) {
    cudaError_t e = cudaFree(b->ptr);
    if (e != cudaSuccess)
      cx->svc->log(STRATA_LOG_WARN, "cuda", "cudaFree on device %d: %s", dev, cudaGetErrorString(e));
    strata__cuda_leave(cx, saved);
  }
  (void)cudaGetLastError();
  free(b);
}

/* Page-locked host memory, portable to every device's context, for the
** runtime's staged copies into or out of `dev`: allocated with `dev` current,
** so that it is that device's context (not device 0's) that pins it. */
static int strata__cuda_host_alloc_on(struct strata__cuda *cx, int dev, size_t bytes, void **ptr /* OUT */) {
  cudaError_t e = cudaHostAlloc(ptr, bytes, cudaHostAllocPortable);
  if (e != cudaSuccess) {
    *ptr = NULL;
    (void)cudaGetLastError();
    return cx->svc->error(STRATA_ERR_NOMEM, "cuda: cudaHostAlloc of %zu bytes for device %d: %s", bytes, dev,
                          cudaGetErrorString(e));
  }
  return STRATA_OK;
}

/* The allocation is remembered with its device, for strata__cuda_host_free. */
static int strata__cuda_host_alloc(void *ctx, int dev, size_t bytes, void **ptr /* OUT */) {
  struct strata__cuda *cx = ctx;
  *ptr = NULL;
  struct strata__cuda_pinned *p = malloc(sizeof *p);
  if (!p)
    return cx->svc->error(STRATA_ERR_NOMEM, "cuda: out of host memory");
  CUcontext saved;
  int rc = strata__cuda_enter(cx, dev, &saved);
  if (!rc) {
    rc = strata__cuda_host_alloc_on(cx, dev, bytes, ptr);
    strata__cuda_leave(cx, saved);
  }
  if (rc) {
    free(p);
    return rc;
  }
  p->ptr = *ptr;
  p->dev = dev;
  pthread_mutex_lock(&cx->pinned_lock);
  p->next = cx->pinned;
  cx->pinned = p;
  pthread_mutex_unlock(&cx->pinned_lock);
  return STRATA_OK;
}

/* Freed with the device it was allocated for current (the calling thread may
** have no context, or another device's), the caller's context put back. */
static void strata__cuda_host_free(void *ctx, void *ptr) {
  struct strata__cuda *cx = ctx;
  if (!ptr)
    return;
  int dev = -1;
  pthread_mutex_lock(&cx->pinned_lock);
  for (struct strata__cuda_pinned **p = &cx->pinned; *p; p = &(*p)->next)
    if ((*p)->ptr == ptr) {
      struct strata__cuda_pinned *found = *p;
      *p = found->next;
      dev = found->dev;
      free(found);
      break;
    }
  pthread_mutex_unlock(&cx->pinned_lock);
  CUcontext saved;
  int entered = dev >= 0 && strata__cuda_enter(cx, dev, &saved) == STRATA_OK;
  cudaError_t e = cudaFreeHost(ptr);
  if (e != cudaSuccess)
    cx->svc->log(STRATA_LOG_WARN, "cuda", "cudaFreeHost for device %d: %s", dev, cudaGetErrorString(e));
  if (entered)
    strata__cuda_leave(cx, saved);
  (void)cudaGetLastError();
}

/* ------------------------------------------------------------------ queues */

/* A non-blocking stream on `dev` (it does not synchronise with the legacy
** default stream), a cuBLAS handle bound to it and the sumsq scratch. On
** failure everything taken so far is released. */
static int strata__cuda_queue_new_on(struct strata__cuda *cx, int dev, void **queue /* OUT */) {
  int rc;
  struct strata__cuda_queue *q = calloc(1, sizeof *q);
  if (!q)
    return cx->svc->error(STRATA_ERR_NOMEM, "cuda: out of host memory");
  q->dev = dev;
  cudaError_t e = cudaStreamCreateWithFlags(&q->stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    free(q);
    return strata__cuda_fail(cx, "cudaStreamCreateWithFlags", e);
  }
  cublasStatus_t s = cublasCreate(&q->blas);
  if (s != CUBLAS_STATUS_SUCCESS) {
    rc = strata__cublas_fail(cx, "cublasCreate", s);
    goto fail_stream;
  }
  s = cublasSetStream(q->blas, q->stream);
  if (s != CUBLAS_STATUS_SUCCESS) {
    rc = strata__cublas_fail(cx, "cublasSetStream", s);
    goto fail_blas;
  }
  /* Plain fp32 GEMM (no TF32 tensor-op downconversion) unless
  ** STRATA_CUDA_TF32=1: results stay comparable with the host and OpenCL
  ** backends. bf16 GEMMs use tensor cores either way (cublasGemmEx). */
  s = cublasSetMathMode(q->blas, cx->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
  if (s != CUBLAS_STATUS_SUCCESS) {
    rc = strata__cublas_fail(cx, "cublasSetMathMode", s);
    goto fail_blas;
  }
  e = cudaMalloc((void **)&q->partials, STRATA__CUDA_SUMSQ_PARTS * sizeof(float));
  if (e != cudaSuccess) {
    rc = strata__cuda_fail(cx, "cudaMalloc of the sumsq scratch", e);
    goto fail_blas;
  }
  *queue = q;
  return STRATA_OK;

fail_blas:
  cublasDestroy(q->blas);
fail_stream:
  cudaStreamDestroy(q->stream);
  (void)cudaGetLastError();
  free(q);
  return rc;
}

static int strata__cuda_queue_new(void *ctx, int dev, void **queue /* OUT */) {
  *queue = NULL;
  STRATA__CUDA_ON(ctx, dev, strata__cuda_queue_new_on(ctx, dev, queue));
}

/* The runtime has finished the queue; release its stream, handle, scratch. */
static void strata__cuda_queue_free(void *ctx, void *queue) {
  struct strata__cuda_queue *q = queue;
  if (!q)
    return;
  CUcontext saved;
  if (strata__cuda_enter(ctx, q->dev, &saved) == STRATA_OK) {
    cudaStreamSynchronize(q->stream);
    cudaFree(q->partials);
    cublasDestroy(q->blas);
    cudaStreamDestroy(q->stream);
    strata__cuda_leave(ctx, saved);
  }
  (void)cudaGetLastError();
  free(q);
}

/*
** Wait for a stream (ev NULL) or an event of device `dev`. While NCCL
** communicators are live, poll instead of blocking and check them for
** asynchronous errors between polls: a peer that failed leaves NCCL's
** kernels spinning and a blocking wait would never end. *nccl_rc is then
** the error (naming the device; the communicator is aborted).
*/
static cudaError_t strata__cuda_wait(struct strata__cuda *cx, int dev, cudaStream_t st, cudaEvent_t ev,
                                     int *nccl_rc /* OUT */) {
  *nccl_rc = STRATA_OK;
  if (!strata__nccl_live())
    return ev ? cudaEventSynchronize(ev) : cudaStreamSynchronize(st);
  for (long polls = 0;; polls++) {
    cudaError_t e = ev ? cudaEventQuery(ev) : cudaStreamQuery(st);
    if (e != cudaErrorNotReady)
      return e;
    (void)cudaGetLastError(); /* "not ready" is no error */
    if ((*nccl_rc = strata__nccl_check(cx, dev)) != STRATA_OK)
      return cudaSuccess;
    /* short work is found at once; a long wait costs a poll every 100 us */
    struct timespec ts = {0, polls < 64 ? 2000 : 100000};
    nanosleep(&ts, NULL);
  }
}

/* Wait for the stream. Errors of kernels and copies that ran asynchronously
** (an illegal address, a failed launch) and NCCL's are reported here. */
static int strata__cuda_queue_finish_on(struct strata__cuda *cx, struct strata__cuda_queue *q) {
  int nccl_rc;
  cudaError_t e = strata__cuda_wait(cx, q->dev, q->stream, NULL, &nccl_rc);
  if (nccl_rc)
    return nccl_rc;
  if (e != cudaSuccess) {
    char what[64];
    snprintf(what, sizeof what, "work on device %d failed", q->dev);
    return strata__cuda_fail(cx, what, e);
  }
  return STRATA_OK;
}

static int strata__cuda_queue_finish(void *ctx, void *queue) {
  struct strata__cuda_queue *q = queue;
  STRATA__CUDA_ON(ctx, q->dev, strata__cuda_queue_finish_on(ctx, q));
}

/* ------------------------------------------------------------------ events */

/* An event at the queue's current end: one from the device's pool, or a new
** one created without timing (cheaper, and all the runtime needs is
** ordering). Freed by strata__cuda_event_free, which returns it to the pool. */
static int strata__cuda_event_record_on(struct strata__cuda *cx, struct strata__cuda_queue *q, void **event /* OUT */) {
  pthread_mutex_lock(&cx->event_lock);
  struct strata__cuda_event *ev = cx->event_pool[q->dev];
  if (ev)
    cx->event_pool[q->dev] = ev->next;
  pthread_mutex_unlock(&cx->event_lock);
  cudaError_t e;
  if (!ev) {
    ev = malloc(sizeof *ev);
    if (!ev)
      return cx->svc->error(STRATA_ERR_NOMEM, "cuda: out of host memory");
    ev->dev = q->dev;
    e = cudaEventCreateWithFlags(&ev->ev, cudaEventDisableTiming);
    if (e != cudaSuccess) {
      free(ev);
      return strata__cuda_fail(cx, "cudaEventCreateWithFlags", e);
    }
  }
  ev->next = NULL;
  e = cudaEventRecord(ev->ev, q->stream);
  if (e != cudaSuccess) {
    int rc = strata__cuda_fail(cx, "cudaEventRecord", e);
    cudaEventDestroy(ev->ev);
    free(ev);
    return rc;
  }
  *event = ev;
  return STRATA_OK;
}

static int strata__cuda_event_record(void *ctx, void *queue, void **event /* OUT */) {
  struct strata__cuda_queue *q = queue;
  *event = NULL;
  STRATA__CUDA_ON(ctx, q->dev, strata__cuda_event_record_on(ctx, q, event));
}

/* The device makes the queue wait, also for an event of another device. */
static int strata__cuda_event_wait_on(struct strata__cuda *cx, struct strata__cuda_queue *q,
                                      struct strata__cuda_event *ev) {
  cudaError_t e = cudaStreamWaitEvent(q->stream, ev->ev, 0);
  return e == cudaSuccess ? STRATA_OK : strata__cuda_fail(cx, "cudaStreamWaitEvent", e);
}

static int strata__cuda_event_wait(void *ctx, void *queue, void *event) {
  struct strata__cuda_queue *q = queue;
  STRATA__CUDA_ON(ctx, q->dev, strata__cuda_event_wait_on(ctx, q, event));
}

static int strata__cuda_event_sync_on(struct strata__cuda *cx, struct strata__cuda_event *ev) {
  int nccl_rc;
  cudaError_t e = strata__cuda_wait(cx, ev->dev, NULL, ev->ev, &nccl_rc);
  if (nccl_rc)
    return nccl_rc;
  return e == cudaSuccess ? STRATA_OK : strata__cuda_fail(cx, "cudaEventSynchronize", e);
}

static int strata__cuda_event_sync(void *ctx, void *event) {
  struct strata__cuda_event *ev = event;
  STRATA__CUDA_ON(ctx, ev->dev, strata__cuda_event_sync_on(ctx, ev));
}

/* Does not wait: the event goes back to its device's pool. Recording it
** again later is safe: a stream that waits on it has already captured the
** work it waits for (cudaStreamWaitEvent), and the runtime waits on an
** event only before freeing it. */
static void strata__cuda_event_free(void *ctx, void *event) {
  struct strata__cuda *cx = ctx;
  struct strata__cuda_event *ev = event;
  if (!ev)
    return;
  pthread_mutex_lock(&cx->event_lock);
  ev->next = cx->event_pool[ev->dev];
  cx->event_pool[ev->dev] = ev;
  pthread_mutex_unlock(&cx->event_lock);
}

/* ------------------------------------------------------------------ copies */

static int strata__cuda_memcpy_on(struct strata__cuda *cx, struct strata__cuda_queue *q, void *dst, const void *src,
                                  size_t bytes, enum cudaMemcpyKind kind) {
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, q->stream);
  return e == cudaSuccess ? STRATA_OK
                          : strata__cuda_fail(cx, kind == cudaMemcpyHostToDevice ? "cudaMemcpyAsync host to device"
                                                                                 : "cudaMemcpyAsync device to host",
                                              e);
}

static int strata__cuda_write(void *ctx, void *queue, void *dst, size_t dst_off, const void *src, size_t bytes) {
  struct strata__cuda_queue *q = queue;
  struct strata__cuda_buf *d = dst;
  STRATA__CUDA_ON(ctx, q->dev, strata__cuda_memcpy_on(ctx, q, d->ptr + dst_off, src, bytes, cudaMemcpyHostToDevice));
}

static int strata__cuda_read(void *ctx, void *queue, void *src, size_t src_off, void *dst, size_t bytes) {
  struct strata__cuda_queue *q = queue;
  struct strata__cuda_buf *s = src;
  STRATA__CUDA_ON(ctx, q->dev, strata__cuda_memcpy_on(ctx, q, dst, s->ptr + src_off, bytes, cudaMemcpyDeviceToHost));
}

/*
** Enable direct access between devices a and b, both ways, the first time
** the pair copies (enabling creates contexts, so it is not done at init).
** Where the hardware cannot (cudaDeviceCanAccessPeer says 0) nothing is
** done and cudaMemcpyPeerAsync stages through the host by itself; a failure
** to enable is therefore only logged. Leaves device `cur` current.
*/
static void strata__cuda_peer_enable(struct strata__cuda *cx, int a, int b, int cur) {
  pthread_mutex_lock(&cx->peer_lock);
  for (int k = 0; k < 2; k++) {
    int from = k ? b : a, to = k ? a : b;
    unsigned char *tried = &cx->peer_tried[(size_t)from * (size_t)cx->count + (size_t)to];
    if (*tried)
      continue;
    *tried = 1;
    int can = 0;
    if (cudaDeviceCanAccessPeer(&can, from, to) != cudaSuccess || !can)
      continue;
    cudaError_t e = cudaSetDevice(from);
    if (e == cudaSuccess)
      e = cudaDeviceEnablePeerAccess(to, 0);
    if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
      cx->svc->log(STRATA_LOG_WARN, "cuda", "peer access %d -> %d: %s (copies are staged)", from, to,
                   cudaGetErrorString(e));
    else
      cx->svc->log(STRATA_LOG_DEBUG, "cuda", "peer access %d -> %d enabled", from, to);
  }
  (void)cudaGetLastError();
  cudaSetDevice(cur);
  pthread_mutex_unlock(&cx->peer_lock);
}

/* Buffer to buffer on the queue's stream; between two devices through
** cudaMemcpyPeerAsync (direct over NVLink/PCIe when peer access is on). */
static int strata__cuda_copy_on(struct strata__cuda *cx, struct strata__cuda_queue *q, struct strata__cuda_buf *d,
                                size_t dst_off, struct strata__cuda_buf *s, size_t src_off, size_t bytes) {
  cudaError_t e;
  if (d->dev == s->dev) {
    e = cudaMemcpyAsync(d->ptr + dst_off, s->ptr + src_off, bytes, cudaMemcpyDeviceToDevice, q->stream);
  } else {
    strata__cuda_peer_enable(cx, d->dev, s->dev, q->dev);
    e = cudaMemcpyPeerAsync(d->ptr + dst_off, d->dev, s->ptr + src_off, s->dev, bytes, q->stream);
  }
  return e == cudaSuccess ? STRATA_OK : strata__cuda_fail(cx, "device to device copy", e);
}

static int strata__cuda_copy(void *ctx, void *queue, void *dst, size_t dst_off, void *src, size_t src_off,
                             size_t bytes) {
  struct strata__cuda_queue *q = queue;
  STRATA__CUDA_ON(ctx, q->dev, strata__cuda_copy_on(ctx, q, dst, dst_off, src, src_off, bytes));
}

/* -------------------------------------------------------------------- GEMM */

/*
** Row-major GEMM on column-major cuBLAS. A row-major r x c matrix with row
** stride ld is, read column-major with leading dimension ld, its transpose
** (c x r). So the row-major C (m x n, ldc) is, to cuBLAS, C^T (n x m, ldc),
** and we ask cuBLAS for C^T = alpha op(B)^T op(A)^T + beta C^T:
**   - first operand op(B)^T (n x k). If trans_b = 0, B is stored k x n
**     row-major, which cuBLAS reads as B^T (n x k, ldb): op N. If trans_b = 1,
**     B is stored n x k row-major, read as B^T (k x n, ldb), and op(B)^T =
**     (B^T)^T: op T. Either way: cuBLAS transa = trans_b, matrix B, ldb.
**   - second operand op(A)^T (k x m): by the same argument cuBLAS
**     transb = trans_a, matrix A, lda.
**   - cuBLAS sizes: m' = n, n' = m, k' = k; strides unchanged.
** The leading dimensions are the row strides as given: a stored row-major
** r x c matrix needs ld >= c, exactly cuBLAS's ld >= rows of its view.
*/
/*
** bf16 A and B (C bf16 or float32): cublasGemmStridedBatchedEx with
** CUDA_R_16BF operands and CUBLAS_COMPUTE_32F (float32 sums, C rounded
** once). cuBLAS has no float32 A and B with a bf16 C: refused, saying so.
*/
static int strata__cuda_gemm_bf16(struct strata__cuda *cx, struct strata__cuda_queue *q, const struct strata__op *op) {
  const __typeof__(op->u.gemm) *g = &op->u.gemm;
  if (g->a.dtype != STRATA_BFLOAT16)
    return cx->svc->error(STRATA_ERR_UNSUPPORTED, "cuda: gemm of float32 A and B into a bf16 C is not supported");
  const uint16_t *a = (const uint16_t *)((struct strata__cuda_buf *)g->a.h)->ptr + g->a.off;
  const uint16_t *b = (const uint16_t *)((struct strata__cuda_buf *)g->b.h)->ptr + g->b.off;
  const int cbf = g->c.dtype == STRATA_BFLOAT16;
  void *c = (char *)((struct strata__cuda_buf *)g->c.h)->ptr + g->c.off * (cbf ? 2 : 4);
  const cudaDataType_t ct = cbf ? CUDA_R_16BF : CUDA_R_32F;
  /* the same column-major reading as strata__cuda_gemm below */
  cublasOperation_t ta = g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  int64_t m = g->n, n = g->m, k = g->k;
  if (m == 0 || n == 0 || g->batch <= 0)
    return STRATA_OK;
  int64_t lda = g->lda > 0 ? g->lda : 1, ldb = g->ldb > 0 ? g->ldb : 1;
  float alpha = g->alpha, beta = g->beta;
  cublasStatus_t s;
#if CUBLAS_VER_MAJOR >= 12
  s = cublasGemmStridedBatchedEx_64(q->blas, ta, tb, m, n, k, &alpha, b, CUDA_R_16BF, ldb, g->stride_b, a,
                                    CUDA_R_16BF, lda, g->stride_a, &beta, c, ct, g->ldc, g->stride_c, g->batch,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
#else
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX || g->ldc > INT_MAX ||
      g->batch > INT_MAX)
    return cx->svc->error(STRATA_ERR_RANGE, "cuda: gemm sizes past 2^31 need cuBLAS 12");
  s = cublasGemmStridedBatchedEx(q->blas, ta, tb, (int)m, (int)n, (int)k, &alpha, b, CUDA_R_16BF, (int)ldb,
                                 g->stride_b, a, CUDA_R_16BF, (int)lda, g->stride_a, &beta, c, ct, (int)g->ldc,
                                 g->stride_c, (int)g->batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
#endif
  return s == CUBLAS_STATUS_SUCCESS ? STRATA_OK : strata__cublas_fail(cx, "cublasGemmStridedBatchedEx (bf16)", s);
}

static int strata__cuda_gemm(struct strata__cuda *cx, struct strata__cuda_queue *q, const struct strata__op *op) {
  if (op->dtypes & STRATA__DTYPES_BF16)
    return strata__cuda_gemm_bf16(cx, q, op);
  const float *a = (const float *)((struct strata__cuda_buf *)op->u.gemm.a.h)->ptr + op->u.gemm.a.off;
  const float *b = (const float *)((struct strata__cuda_buf *)op->u.gemm.b.h)->ptr + op->u.gemm.b.off;
  float *c = (float *)((struct strata__cuda_buf *)op->u.gemm.c.h)->ptr + op->u.gemm.c.off;
  cublasOperation_t ta = op->u.gemm.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t tb = op->u.gemm.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  int64_t m = op->u.gemm.n, n = op->u.gemm.m, k = op->u.gemm.k;
  int64_t batch = op->u.gemm.batch;
  float alpha = op->u.gemm.alpha, beta = op->u.gemm.beta;
  cublasStatus_t s;
  if (m == 0 || n == 0 || batch <= 0)
    return STRATA_OK;
  /* cuBLAS wants ld >= 1 even for an empty operand (k = 0). */
  int64_t lda = op->u.gemm.lda > 0 ? op->u.gemm.lda : 1;
  int64_t ldb = op->u.gemm.ldb > 0 ? op->u.gemm.ldb : 1;
#if CUBLAS_VER_MAJOR >= 12
  s = cublasSgemmStridedBatched_64(q->blas, ta, tb, m, n, k, &alpha, b, ldb, op->u.gemm.stride_b, a, lda,
                                   op->u.gemm.stride_a, &beta, c, op->u.gemm.ldc, op->u.gemm.stride_c, batch);
#else
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX || op->u.gemm.ldc > INT_MAX ||
      batch > INT_MAX)
    return cx->svc->error(STRATA_ERR_RANGE, "cuda: gemm sizes past 2^31 need cuBLAS 12");
  s = cublasSgemmStridedBatched(q->blas, ta, tb, (int)m, (int)n, (int)k, &alpha, b, (int)ldb, op->u.gemm.stride_b,
                                a, (int)lda, op->u.gemm.stride_a, &beta, c, (int)op->u.gemm.ldc,
                                op->u.gemm.stride_c, (int)batch);
#endif
  return s == CUBLAS_STATUS_SUCCESS ? STRATA_OK : strata__cublas_fail(cx, "cublasSgemmStridedBatched", s);
}

/* --------------------------------------------------------------------- ops */

/* Every op of lib/device/backend.h on every device, on float32 and bfloat16 operands: GEMM through cuBLAS, the
** others through the shared kernels (backends/cuda/ops.c). */
static int strata__cuda_op_supported(void *ctx, int dev, enum strata__op_id id) {
  (void)ctx;
  (void)dev;
  return (int)id >= 0 && (int)id < STRATA__OP_COUNT && id != STRATA__OP_ADAMW_FUSED &&
         id != STRATA__OP_SUMSQ_SPANS && id != STRATA__OP_LINEAR;
}

/* Enqueue one op on the queue's stream. Launch failures are reported now; faults during execution at the next
** queue_finish. */
static int strata__cuda_op(void *ctx, void *queue, const struct strata__op *op) {
  struct strata__cuda *cx = ctx;
  struct strata__cuda_queue *q = queue;
  if (op->id == STRATA__OP_GEMM)
    STRATA__CUDA_ON(cx, q->dev, strata__cuda_gemm(cx, q, op));
  STRATA__CUDA_ON(cx, q->dev, strata__cuda_kernel_op(cx->svc, q->stream, q->dev, cx->wg, q->partials, op));
}

/* ------------------------------------------------------------------- table */

/* For nccl.c: the raw handles under a buffer and a queue. */
void *strata__cuda_buf_ptr(void *buf) { return ((struct strata__cuda_buf *)buf)->ptr; }
cudaStream_t strata__cuda_queue_stream(void *queue) { return ((struct strata__cuda_queue *)queue)->stream; }
int strata__cuda_queue_dev(void *queue) { return ((struct strata__cuda_queue *)queue)->dev; }

static const struct strata__backend strata__cuda_backend = {
    .api_version = STRATA__BACKEND_API_VERSION,
    .name = "cuda",
    .init = strata__cuda_init,
    .fini = strata__cuda_fini,
    .device_info = strata__cuda_device_info,
    .alloc = strata__cuda_alloc,
    .free = strata__cuda_free,
    .host_alloc = strata__cuda_host_alloc,
    .host_free = strata__cuda_host_free,
    .queue_new = strata__cuda_queue_new,
    .queue_free = strata__cuda_queue_free,
    .queue_finish = strata__cuda_queue_finish,
    .event_record = strata__cuda_event_record,
    .event_wait = strata__cuda_event_wait,
    .event_sync = strata__cuda_event_sync,
    .event_free = strata__cuda_event_free,
    .write = strata__cuda_write,
    .read = strata__cuda_read,
    .copy = strata__cuda_copy,
    .op_supported = strata__cuda_op_supported,
    .op = strata__cuda_op,
    .gate_new = NULL, /* no host-completed events: a mixed collective waits in the call */
    .comm_new = strata__nccl_comm_new,
    .comm_free = strata__nccl_comm_free,
    .comm_coll = strata__nccl_comm_coll,
    .comm_probe = strata__nccl_probe,
    .comm_unique_id = strata__nccl_comm_unique_id,
    .comm_new_rank = strata__nccl_comm_new_rank,
};

/* The module's one exported symbol. */
__attribute__((visibility("default"))) const struct strata__backend *strata_backend_entry(void);
__attribute__((visibility("default"))) const struct strata__backend *strata_backend_entry(void) {
  return &strata__cuda_backend;
}
