/* SPDX-License-Identifier: MIT */
/* host.c — the CPU backend: N virtual devices (STRATA_HOST_DEVICES), one worker thread per queue. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "host.h"
#include "core/parse.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

static const struct strata__services *svc;

/* Fault injection for tests (STRATA_HOST_FAULT=device=D,op=N | alloc=N | copy=N):
** the N-th such call on virtual device D fails as a broken device would. */
struct fault {
  int device;              /* -1: off */
  char what[8];            /* "op", "alloc", "copy" */
  long at;
  long count;              /* calls seen so far, guarded by fault_lock */
};

static pthread_mutex_t fault_lock = PTHREAD_MUTEX_INITIALIZER;

struct host_ctx {
  struct fault fault;
  double slow[64];         /* STRATA_HOST_SLOW: each device's slowdown factor (1: none) */
  int ndev;
  uint64_t mem_per_device;
  int units_per_device;
  char cpu_name[96];
};

/* Events: set once by the queue that records them; shared by reference count. */
struct host_event {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int done;
  int refs;
  int status;                    /* gates: the status they were opened with */
  char message[512];
};

enum task_kind { TASK_OP, TASK_COPY, TASK_SIGNAL, TASK_WAIT };

struct task {
  struct task *next;
  enum task_kind kind;
  struct strata__op op;          /* TASK_OP */
  void *dst;                     /* TASK_COPY */
  const void *src;
  size_t bytes;
  struct host_event *event;      /* TASK_SIGNAL, TASK_WAIT */
};

#define HOST_CLOCKS_MAX 64

struct host_queue {
  struct host_ctx *ctx;
  int dev;
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cond;           /* work arrived, or stop */
  pthread_cond_t idle;           /* the queue drained */
  struct task *head, *tail;
  int busy;                      /* the worker is running a task */
  int stop;
  double rest_owed;              /* STRATA_HOST_SLOW: seconds of rest not yet taken */
  int status;                    /* first error since the last finish */
  char message[512];
  /* CPU clocks of the threads that run this queue's work: [0] the worker,
  ** then the OpenMP helpers of its parallel regions; set by the worker
  ** before its first task, under `lock` */
  clockid_t clocks[HOST_CLOCKS_MAX];
  int nclocks;
};

static void event_release(struct host_event *e) {
  pthread_mutex_lock(&e->lock);
  int last = --e->refs == 0;
  pthread_mutex_unlock(&e->lock);
  if (last) {
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->cond);
    free(e);
  }
}

void strata__host_log(int level, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (svc)
    svc->log(level, "host", "%s", msg);
}

static void event_block(struct host_event *e) {
  pthread_mutex_lock(&e->lock);
  while (!e->done)
    pthread_cond_wait(&e->cond, &e->lock);
  pthread_mutex_unlock(&e->lock);
}

/*
** Copy between distinct buffers. Large copies stream past the caches
** (non-temporal stores): a copy between devices' memory is not read again
** soon by this core, and skipping the read of the destination's lines saves
** a third of the traffic. Overlapping or small copies use memmove.
*/
#define STREAM_COPY_MIN (1u << 20)
static void host_copy_bytes(void *dst, const void *src, size_t bytes) {
#if defined(__SSE2__)
  const char *s = src;
  char *d = dst;
  if (bytes >= STREAM_COPY_MIN && (d + bytes <= s || s + bytes <= d)) {
    size_t lead = (16 - ((uintptr_t)d & 15)) & 15;
    memcpy(d, s, lead);
    size_t body = (bytes - lead) & ~(size_t)63;
    for (size_t i = lead; i < lead + body; i += 64) {
      __m128i x0 = _mm_loadu_si128((const __m128i *)(s + i)), x1 = _mm_loadu_si128((const __m128i *)(s + i + 16));
      __m128i x2 = _mm_loadu_si128((const __m128i *)(s + i + 32)), x3 = _mm_loadu_si128((const __m128i *)(s + i + 48));
      _mm_stream_si128((__m128i *)(d + i), x0);
      _mm_stream_si128((__m128i *)(d + i + 16), x1);
      _mm_stream_si128((__m128i *)(d + i + 32), x2);
      _mm_stream_si128((__m128i *)(d + i + 48), x3);
    }
    _mm_sfence();
    memcpy(d + lead + body, s + lead + body, bytes - lead - body);
    return;
  }
#endif
  memmove(dst, src, bytes);
}

static double wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/*
** A slowed device (STRATA_HOST_SLOW) rests f - 1 times as long as each op
** took, using no core meanwhile. The rest is owed and taken once it
** reaches a millisecond, the time actually slept paid off: a sleep costs
** tens of microseconds more than asked, which would slow small ops far
** more than f times.
*/
static void rest_after(struct host_queue *q, double f, double t0) {
  q->rest_owed += (f - 1) * (wall_now() - t0);
  if (q->rest_owed < 1e-3)
    return;
  const double rest = q->rest_owed, start = wall_now();
  struct timespec ts = {.tv_sec = (time_t)rest, .tv_nsec = (long)((rest - (double)(time_t)rest) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
  q->rest_owed -= wall_now() - start; /* an oversleep is credited to the next ops */
}

static void task_run(struct host_queue *q, struct task *t) {
  int rc = 0;
  switch (t->kind) {
  case TASK_OP: {
    const double f = q->ctx->slow[q->dev], t0 = f > 1 ? wall_now() : 0;
    rc = strata__host_op_run(&t->op);
    if (f > 1)
      rest_after(q, f, t0);
    break;
  }
  case TASK_COPY:
    host_copy_bytes(t->dst, t->src, t->bytes);
    break;
  case TASK_SIGNAL:
    pthread_mutex_lock(&t->event->lock);
    t->event->done = 1;
    pthread_cond_broadcast(&t->event->cond);
    pthread_mutex_unlock(&t->event->lock);
    event_release(t->event);
    break;
  case TASK_WAIT:
    event_block(t->event);
    if (t->event->status && !rc) {
      rc = t->event->status;
      if (!q->status) {
        q->status = rc;
        snprintf(q->message, sizeof q->message, "%s", t->event->message);
      }
    }
    event_release(t->event);
    break;
  }
  if (rc && !q->status) {
    q->status = rc;
    snprintf(q->message, sizeof q->message, "host: op failed with status %d", rc);
  }
}

/*
** Find the CPU clocks of the threads the calling worker runs its work on:
** its own, and with `with_team` those of the OpenMP team its parallel
** regions use (this starts the team's threads). libgomp
** keeps one pool of helpers per thread that starts regions and reuses them
** in order, so a region of the ops' team size run here meets the helpers
** of every later one. OpenBLAS's own pool (one device, threads left to the
** library) is shared by the process and is not listed: its caller computes
** a share of each GEMM and waits for the rest, so the worker's clock spans it.
*/
static void clocks_find(struct host_queue *q, int with_team) {
  clockid_t found[HOST_CLOCKS_MAX];
  int ok[HOST_CLOCKS_MAX] = {0};
  if (pthread_getcpuclockid(pthread_self(), &found[0]) == 0)
    ok[0] = 1;
#ifdef _OPENMP
  int team = strata__host_threads < HOST_CLOCKS_MAX ? strata__host_threads : HOST_CLOCKS_MAX;
  if (with_team && team > 1) {
#pragma omp parallel num_threads(team)
    {
      int t = omp_get_thread_num();
      if (t > 0 && t < HOST_CLOCKS_MAX && pthread_getcpuclockid(pthread_self(), &found[t]) == 0)
        ok[t] = 1;
    }
  }
#endif
  pthread_mutex_lock(&q->lock);
  q->nclocks = 0;
  for (int t = 0; t < HOST_CLOCKS_MAX; t++)
    if (ok[t])
      q->clocks[q->nclocks++] = found[t];
  pthread_mutex_unlock(&q->lock);
}

static double clock_seconds(clockid_t id, int *ok) {
  struct timespec ts;
  *ok = clock_gettime(id, &ts) == 0;
  return *ok ? (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec : 0;
}

static void *worker(void *arg) {
  struct host_queue *q = arg;
  strata__host_blas_worker_start();
  clocks_find(q, 0); /* the helpers with the first op: a queue that only copies never starts them */
  int team_found = 0;
  pthread_mutex_lock(&q->lock);
  for (;;) {
    while (!q->head && !q->stop)
      pthread_cond_wait(&q->cond, &q->lock);
    if (!q->head && q->stop)
      break;
    struct task *t = q->head;
    q->head = t->next;
    if (!q->head)
      q->tail = NULL;
    q->busy = 1;
    pthread_mutex_unlock(&q->lock);
    if (t->kind == TASK_OP && !team_found) {
      clocks_find(q, 1);
      team_found = 1;
    }
    task_run(q, t);
    free(t);
    pthread_mutex_lock(&q->lock);
    q->busy = 0;
    if (!q->head)
      pthread_cond_broadcast(&q->idle);
  }
  pthread_mutex_unlock(&q->lock);
  return NULL;
}

static int enqueue(struct host_queue *q, struct task *t) {
  t->next = NULL;
  pthread_mutex_lock(&q->lock);
  if (q->tail)
    q->tail->next = t;
  else
    q->head = t;
  q->tail = t;
  pthread_cond_signal(&q->cond);
  pthread_mutex_unlock(&q->lock);
  return STRATA_OK;
}

static struct task *task_new(enum task_kind kind) {
  struct task *t = calloc(1, sizeof *t);
  if (!t)
    svc->error(STRATA_ERR_NOMEM, "host: out of memory queueing work");
  else
    t->kind = kind;
  return t;
}

/* STRATA_HOST_DEVICES: how many virtual devices (0..64, default 1). */
static int read_device_count(int *n) {
  const char *env = getenv("STRATA_HOST_DEVICES");
  *n = 1;
  if (!env || !*env)
    return STRATA_OK;
  int64_t v = 0;
  int rc = strata__parse_int(env, 0, 64, &v);
  if (rc)
    return svc->error(rc, "STRATA_HOST_DEVICES='%s' is not a device count between 0 and 64: %s", env,
                      strata__parse_why());
  *n = (int)v;
  return STRATA_OK;
}

/*
** STRATA_HOST_FAULT=device=D,KIND=N with KIND op, alloc or copy: the N-th
** call of that kind on virtual device D fails. D in [0, 63], N in [1, 2^62].
*/
static int read_fault(struct fault *f) {
  f->device = -1;
  const char *env = getenv("STRATA_HOST_FAULT");
  if (!env || !*env)
    return STRATA_OK;
  static const char form[] = "expected device=D,op=N (or alloc=N, copy=N)";
  char buf[96];
  if (strlen(env) >= sizeof buf || strncmp(env, "device=", 7) != 0)
    return svc->error(STRATA_ERR_PARSE, "STRATA_HOST_FAULT='%.120s': %s", env, form);
  snprintf(buf, sizeof buf, "%s", env + 7);
  char *comma = strchr(buf, ',');
  char *eq = comma ? strchr(comma + 1, '=') : NULL;
  if (!comma || !eq)
    return svc->error(STRATA_ERR_PARSE, "STRATA_HOST_FAULT='%s': %s", env, form);
  *comma = *eq = '\0';
  const char *what = comma + 1;
  if (strcmp(what, "op") && strcmp(what, "alloc") && strcmp(what, "copy"))
    return svc->error(STRATA_ERR_PARSE, "STRATA_HOST_FAULT='%s': unknown kind '%s'; %s", env, what, form);
  int64_t dev = 0, at = 0;
  int rc = strata__parse_int(buf, 0, 63, &dev);
  if (rc)
    return svc->error(rc, "STRATA_HOST_FAULT='%s': device '%s': %s", env, buf, strata__parse_why());
  rc = strata__parse_int(eq + 1, 1, INT64_C(1) << 62, &at);
  if (rc)
    return svc->error(rc, "STRATA_HOST_FAULT='%s': %s count '%s': %s", env, what, eq + 1, strata__parse_why());
  f->device = (int)dev;
  snprintf(f->what, sizeof f->what, "%s", what);
  f->at = (long)at;
  return STRATA_OK;
}

/* Count a call of kind `what` on device `dev`; fail it if it is the injected one. */
static int fault_check(struct host_ctx *c, int dev, const char *what) {
  if (c->fault.device != dev || strcmp(c->fault.what, what) != 0)
    return STRATA_OK;
  pthread_mutex_lock(&fault_lock);
  long n = ++c->fault.count;
  pthread_mutex_unlock(&fault_lock);
  if (n == c->fault.at)
    return svc->error(STRATA_ERR_BACKEND, "host: virtual device %d failed (injected fault: %s #%ld)", dev, what, n);
  return STRATA_OK;
}

/*
** STRATA_HOST_SLOW=D:F[,D:F...]: virtual device D computes F times slower
** (1 < F <= 100): after each op it rests F - 1 times as long as the op
** took, without using a core. Heterogeneous devices on one CPU, for the
** balancer and the planner.
*/
static int read_slow(struct host_ctx *c) {
  for (int d = 0; d < 64; d++)
    c->slow[d] = 1;
  const char *env = getenv("STRATA_HOST_SLOW");
  if (!env || !*env)
    return STRATA_OK;
  static const char form[] = "expected D:F[,D:F...], a device 0..63 and a factor above 1, at most 100";
  const char *p = env;
  while (*p) {
    char *end = NULL;
    errno = 0;
    long d = strtol(p, &end, 10);
    if (end == p || *end != ':' || errno || d < 0 || d > 63)
      return svc->error(STRATA_ERR_PARSE, "STRATA_HOST_SLOW='%.120s': %s", env, form);
    p = end + 1;
    double f = strtod(p, &end);
    if (end == p || (*end && *end != ',') || (*end == ',' && !end[1]) || !(f > 1 && f <= 100))
      return svc->error(STRATA_ERR_PARSE, "STRATA_HOST_SLOW='%.120s': %s", env, form);
    c->slow[d] = f;
    p = *end ? end + 1 : end;
  }
  return STRATA_OK;
}

static void read_cpu_name(char *buf, size_t len) {
  snprintf(buf, len, "CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f)
    return;
  char line[256];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10) == 0) {
      char *colon = strchr(line, ':');
      if (colon) {
        colon++;
        while (*colon == ' ')
          colon++;
        colon[strcspn(colon, "\n")] = '\0';
        snprintf(buf, len, "%s", colon);
      }
      break;
    }
  }
  fclose(f);
}

/* STRATA_HOST_NO_GATES: unset, "" or "0": gates; "1": none (the table strata_backend_entry gave). */
static int no_gates_asked(int *no_gates) {
  const char *env = getenv("STRATA_HOST_NO_GATES");
  *no_gates = env && strcmp(env, "1") == 0;
  return !env || !*env || !strcmp(env, "0") || *no_gates;
}

static int host_init(const struct strata__services *services, void **ctx, char *why, size_t why_len) {
  svc = services;
  int no_gates;
  if (!no_gates_asked(&no_gates))
    return svc->error(STRATA_ERR_PARSE, "STRATA_HOST_NO_GATES='%.60s': expected 1 (no gates) or 0",
                      getenv("STRATA_HOST_NO_GATES"));
  int n;
  int rc = read_device_count(&n);
  if (rc)
    return rc;
  if (n == 0) {
    snprintf(why, why_len, "STRATA_HOST_DEVICES=0");
    *ctx = NULL;
    return 0;
  }
  struct host_ctx *c = calloc(1, sizeof *c);
  if (!c)
    return svc->error(STRATA_ERR_NOMEM, "host: out of memory");
  c->ndev = n;
  rc = read_fault(&c->fault);
  if (!rc)
    rc = read_slow(c);
  if (rc) {
    free(c);
    return rc;
  }
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  uint64_t total = (pages > 0 && page > 0) ? (uint64_t)pages * (uint64_t)page : (1ull << 32);
  c->mem_per_device = total / (uint64_t)n;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  c->units_per_device = cores > n ? (int)(cores / n) : 1;
  strata__host_threads = c->units_per_device;
  read_cpu_name(c->cpu_name, sizeof c->cpu_name);
  /* Several virtual devices each run their own GEMMs: one BLAS thread per
  ** device keeps them from fighting over the cores. STRATA_HOST_THREADS overrides. */
  const char *threads = getenv("STRATA_HOST_THREADS");
  int blas_threads = 0; /* 0: the library's default (OPENBLAS_NUM_THREADS, or every core) */
  if (threads && *threads) {
    int64_t t = 0;
    int prc = strata__parse_int(threads, 1, 1024, &t);
    if (prc) {
      free(c);
      return svc->error(prc, "STRATA_HOST_THREADS='%s' is not a thread count between 1 and 1024: %s", threads,
                        strata__parse_why());
    }
    blas_threads = (int)t;
    strata__host_threads = (int)t; /* one thread count for GEMMs and the OpenMP ops alike */
  } else if (n > 1) {
    blas_threads = 1;
  }
  const char *split = getenv("STRATA_HOST_GEMM_SPLIT");
  strata__host_gemm_split = split && strcmp(split, "1") == 0;
  if (strata__host_gemm_split)
    strata__host_blas_threads(1);
  else if (blas_threads)
    strata__host_blas_threads(blas_threads);
  /* The kernels the library chose (or was told to use) must compute right
  ** on this CPU before any result of theirs is trusted. */
  char blas[256], why_blas[256];
  strata__host_blas_describe(blas, sizeof blas);
  if (strata__host_blas_check(why_blas, sizeof why_blas) != 0) {
    free(c);
    return svc->error(STRATA_ERR_BACKEND, "host: %s: %s", blas, why_blas);
  }
  if (!strata__host_blas_coretype_honoured(why_blas, sizeof why_blas))
    svc->log(STRATA_LOG_WARN, "host", "%s", why_blas);
  svc->log(STRATA_LOG_INFO, "host", "GEMM: %s", blas);
  if (no_gates)
    svc->log(STRATA_LOG_INFO, "host", "STRATA_HOST_NO_GATES=1: no gates, a collective waits in the call");
  *ctx = c;
  return n;
}

static void host_fini(void *ctx) { free(ctx); }

static int host_device_info(void *ctx, int dev, struct strata__device_info *info) {
  struct host_ctx *c = ctx;
  /* a slowed device says so at the end, where a long CPU name cannot cut it off */
  char slow[32] = "";
  if (c->slow[dev] > 1)
    snprintf(slow, sizeof slow, ", slowed %.3gx", c->slow[dev]);
  int room = (int)(sizeof info->name - strlen(slow)) - 40;
  snprintf(info->name, sizeof info->name, "host virtual device %d (%.*s)%s", dev, room > 0 ? room : 0, c->cpu_name, slow);
  snprintf(info->vendor, sizeof info->vendor, "host");
  info->is_cpu = 1;
  info->compute_units = c->units_per_device;
  info->total_memory = c->mem_per_device;
  info->pci_bus_id[0] = '\0';
  return STRATA_OK;
}

/*
** A buffer of HUGE_MIN bytes or more starts on a 2 MiB boundary and asks
** the kernel for transparent huge pages over its whole 2 MiB pieces
** (madvise: the system's policy decides; "never" leaves 4 KiB pages): a
** training step streams hundreds of megabytes of parameters, moments and
** activations, and reads heads' rows kilobytes apart, a page each with
** 4 KiB pages (512x8 GPT in bf16, 5 alternated 40-step runs: 5726 tokens/s
** without, 5972 with). Smaller buffers keep plain 64-byte alignment.
*/
#define HUGE_PAGE ((size_t)2 << 20)
#define HUGE_MIN ((size_t)4 << 20)

void *strata__host_alloc(size_t bytes) {
  void *p = NULL;
  if (bytes < HUGE_MIN)
    return posix_memalign(&p, 64, bytes) == 0 ? p : NULL;
  if (posix_memalign(&p, HUGE_PAGE, bytes) != 0)
    return NULL;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  (void)madvise(p, bytes / HUGE_PAGE * HUGE_PAGE, MADV_HUGEPAGE); /* a refusal leaves 4 KiB pages */
#endif
  return p;
}

static int host_alloc(void *ctx, int dev, size_t bytes, void **buf) {
  int rc = fault_check(ctx, dev, "alloc");
  if (rc)
    return rc;
  void *p = strata__host_alloc(bytes);
  if (!p)
    return svc->error(STRATA_ERR_DEVICE_MEMORY, "host: out of memory allocating %zu bytes on virtual device %d", bytes,
                      dev);
  *buf = p;
  return STRATA_OK;
}

static void host_free(void *ctx, int dev, void *buf) { free(buf); }

static int host_queue_new(void *ctx, int dev, void **out) {
  struct host_queue *q = calloc(1, sizeof *q);
  if (!q)
    return svc->error(STRATA_ERR_NOMEM, "host: out of memory creating a queue");
  pthread_mutex_init(&q->lock, NULL);
  pthread_cond_init(&q->cond, NULL);
  pthread_cond_init(&q->idle, NULL);
  q->ctx = ctx;
  q->dev = dev;
  int err = pthread_create(&q->thread, NULL, worker, q);
  if (err) {
    pthread_mutex_destroy(&q->lock);
    pthread_cond_destroy(&q->cond);
    pthread_cond_destroy(&q->idle);
    free(q);
    return svc->error(STRATA_ERR_BACKEND, "host: cannot start a queue thread: %s", strerror(err));
  }
  *out = q;
  return STRATA_OK;
}

static int host_queue_finish(void *ctx, void *queue) {
  struct host_queue *q = queue;
  pthread_mutex_lock(&q->lock);
  while (q->head || q->busy)
    pthread_cond_wait(&q->idle, &q->lock);
  int rc = q->status;
  char msg[sizeof q->message];
  memcpy(msg, q->message, sizeof msg);
  q->status = 0;
  pthread_mutex_unlock(&q->lock);
  if (rc)
    return svc->error(rc, "%s", msg);
  return STRATA_OK;
}

/* The worker's CPU seconds, and its team's shared out over the team; 0 before the worker has started. */
static int host_queue_cpu_time(void *ctx, void *queue, double *worker_s, double *team_s) {
  struct host_queue *q = queue;
  pthread_mutex_lock(&q->lock);
  double own = 0, sum = 0;
  int counted = 0;
  for (int t = 0; t < q->nclocks; t++) {
    int ok;
    double v = clock_seconds(q->clocks[t], &ok);
    if (!ok) /* a helper libgomp has since retired */
      continue;
    if (t == 0)
      own = v;
    sum += v;
    counted++;
  }
  pthread_mutex_unlock(&q->lock);
  *worker_s = own;
  *team_s = counted ? sum / counted : 0;
  return STRATA_OK;
}

static void host_queue_free(void *ctx, void *queue) {
  struct host_queue *q = queue;
  pthread_mutex_lock(&q->lock);
  q->stop = 1;
  pthread_cond_signal(&q->cond);
  pthread_mutex_unlock(&q->lock);
  pthread_join(q->thread, NULL);
  pthread_mutex_destroy(&q->lock);
  pthread_cond_destroy(&q->cond);
  pthread_cond_destroy(&q->idle);
  free(q);
}

static int host_event_record(void *ctx, void *queue, void **out) {
  struct host_event *e = calloc(1, sizeof *e);
  struct task *t = task_new(TASK_SIGNAL);
  if (!e || !t) {
    free(e);
    free(t);
    return svc->error(STRATA_ERR_NOMEM, "host: out of memory recording an event");
  }
  pthread_mutex_init(&e->lock, NULL);
  pthread_cond_init(&e->cond, NULL);
  e->refs = 2; /* the caller's handle and the signalling task */
  t->event = e;
  enqueue(queue, t);
  *out = e;
  return STRATA_OK;
}

static int host_event_wait(void *ctx, void *queue, void *event) {
  struct host_event *e = event;
  struct task *t = task_new(TASK_WAIT);
  if (!t)
    return STRATA_ERR_NOMEM;
  pthread_mutex_lock(&e->lock);
  e->refs++;
  pthread_mutex_unlock(&e->lock);
  t->event = e;
  return enqueue(queue, t);
}

static int host_event_sync(void *ctx, void *event) {
  event_block(event);
  return STRATA_OK;
}

static void host_event_free(void *ctx, void *event) { event_release(event); }

/* Gates: events that the communicator opens from its own threads. */
static int host_gate_new(void *ctx, int dev, void **out) {
  struct host_event *e = calloc(1, sizeof *e);
  if (!e)
    return svc->error(STRATA_ERR_NOMEM, "host: out of memory creating a gate");
  pthread_mutex_init(&e->lock, NULL);
  pthread_cond_init(&e->cond, NULL);
  e->refs = 1;
  *out = e;
  return STRATA_OK;
}

static void host_gate_open(void *ctx, void *gate, int status, const char *message) {
  struct host_event *e = gate;
  pthread_mutex_lock(&e->lock);
  e->status = status;
  snprintf(e->message, sizeof e->message, "%s", message ? message : "");
  e->done = 1;
  pthread_cond_broadcast(&e->cond);
  pthread_mutex_unlock(&e->lock);
}

static int copy_task(void *queue, void *dst, const void *src, size_t bytes) {
  struct host_queue *q = queue;
  int rc = fault_check(q->ctx, q->dev, "copy");
  if (rc)
    return rc;
  struct task *t = task_new(TASK_COPY);
  if (!t)
    return STRATA_ERR_NOMEM;
  t->dst = dst;
  t->src = src;
  t->bytes = bytes;
  return enqueue(queue, t);
}

static int host_write(void *ctx, void *queue, void *dst, size_t off, const void *src, size_t bytes) {
  return copy_task(queue, (char *)dst + off, src, bytes);
}

static int host_read(void *ctx, void *queue, void *src, size_t off, void *dst, size_t bytes) {
  return copy_task(queue, dst, (const char *)src + off, bytes);
}

static int host_copy(void *ctx, void *queue, void *dst, size_t doff, void *src, size_t soff, size_t bytes) {
  return copy_task(queue, (char *)dst + doff, (const char *)src + soff, bytes);
}

/* A virtual device's buffer is host memory from posix_memalign: its handle is its address. */
static void *host_host_pointer(void *ctx, int dev, void *buf) { return buf; }

static int host_op_supported(void *ctx, int dev, enum strata__op_id id) { return strata__host_op_supported(id); }

static int host_op(void *ctx, void *queue, const struct strata__op *op) {
  struct host_queue *q = queue;
  int rc = fault_check(ctx, q->dev, "op");
  if (rc)
    return rc;
  struct task *t = task_new(TASK_OP);
  if (!t)
    return STRATA_ERR_NOMEM;
  t->op = *op;
  return enqueue(queue, t);
}

static const struct strata__backend host_backend = {
    .api_version = STRATA__BACKEND_API_VERSION,
    .name = "host",
    .init = host_init,
    .fini = host_fini,
    .device_info = host_device_info,
    .alloc = host_alloc,
    .free = host_free,
    .host_alloc = NULL, /* plain malloc: host memory is already where the CPU reads it */
    .host_free = NULL,
    .queue_new = host_queue_new,
    .queue_free = host_queue_free,
    .queue_finish = host_queue_finish,
    .queue_cpu_time = host_queue_cpu_time,
    .event_record = host_event_record,
    .event_wait = host_event_wait,
    .event_sync = host_event_sync,
    .event_free = host_event_free,
    .write = host_write,
    .read = host_read,
    .copy = host_copy,
    .op_supported = host_op_supported,
    .op = host_op,
    .gate_new = host_gate_new,
    .gate_wait = host_event_wait,
    .gate_open = host_gate_open,
    .gate_free = host_event_free,
    .comm_new = NULL, /* collectives through the runtime's ring */
    .peer_operands = 1, /* every virtual device is the same memory */
    .host_pointer = host_host_pointer,
};

/*
** STRATA_HOST_NO_GATES=1 (tests): the same backend without gates, as CUDA
** outside NCCL is, so that any communicator with a host member runs its
** collectives synchronously and a trainer waits for them inside the call
** (lib/comm/comm.c, lib/train/joins.c): that path runs on CPUs.
*/
static struct strata__backend host_backend_no_gates;

__attribute__((visibility("default"))) const struct strata__backend *strata_backend_entry(void);
__attribute__((visibility("default"))) const struct strata__backend *strata_backend_entry(void) {
  int no_gates;
  if (!no_gates_asked(&no_gates) || !no_gates) /* (a bad value is refused by host_init) */
    return &host_backend;
  host_backend_no_gates = host_backend;
  host_backend_no_gates.gate_new = NULL;
  host_backend_no_gates.gate_wait = NULL;
  host_backend_no_gates.gate_open = NULL;
  host_backend_no_gates.gate_free = NULL;
  return &host_backend_no_gates;
}
