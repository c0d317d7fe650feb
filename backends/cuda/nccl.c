/* SPDX-License-Identifier: MIT */
/* nccl.c — collectives among the CUDA module's devices through NCCL, in one process or across MPI ranks, loaded with
** dlopen so that the module still loads (and the runtime's ring takes over) on a machine without libnccl. */
#include "config.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives.h"

const struct strata__services *strata__nccl_svc;

/*
** The part of NCCL's C API used here, declared from its nccl.h (stable since
** NCCL 2.0; ncclAvg since 2.10): opaque communicators, the unique id of a
** communicator across processes (NCCL_UNIQUE_ID_BYTES of opaque bytes,
** passed by value), result codes (0 is success), and the enum values of the
** types and reductions (ncclBfloat16 since 2.10, in builds with CUDA 11).
*/
typedef struct nccl_comm *nccl_comm_t;
typedef struct {
  char internal[STRATA__COMM_ID_BYTES];
} nccl_unique_id;
enum { NCCL_INT32 = 2, NCCL_FLOAT32 = 7, NCCL_BFLOAT16 = 9 };
#define NCCL_BFLOAT16_SINCE 21000   /* NCCL 2.10.0, as ncclGetVersion codes it */
enum { NCCL_SUM = 0, NCCL_MAX = 2, NCCL_AVG = 4 };
enum { NCCL_IN_PROGRESS = 7 };      /* ncclInProgress: not an error (a non-blocking call still running) */

struct nccl_api {
  void *dl;
  int version;
  int (*comm_init_all)(nccl_comm_t *comms, int ndev, const int *devlist);
  int (*get_unique_id)(nccl_unique_id *id);
  int (*comm_init_rank)(nccl_comm_t *comm, int nranks, nccl_unique_id id, int rank);
  int (*comm_destroy)(nccl_comm_t comm);
  int (*group_start)(void);
  int (*group_end)(void);
  int (*all_reduce)(const void *send, void *recv, size_t count, int dtype, int op, nccl_comm_t comm,
                    cudaStream_t stream);
  int (*all_gather)(const void *send, void *recv, size_t count, int dtype, nccl_comm_t comm, cudaStream_t stream);
  int (*reduce_scatter)(const void *send, void *recv, size_t count, int dtype, int op, nccl_comm_t comm,
                        cudaStream_t stream);
  int (*broadcast)(const void *send, void *recv, size_t count, int dtype, int root, nccl_comm_t comm,
                   cudaStream_t stream);
  int (*reduce)(const void *send, void *recv, size_t count, int dtype, int op, int root, nccl_comm_t comm,
                cudaStream_t stream);
  const char *(*error_string)(int result);
  int (*get_version)(int *version);
  /* since NCCL 2.4; NULL where missing: waits then block without checking */
  int (*get_async_error)(nccl_comm_t comm, int *result);
  int (*comm_abort)(nccl_comm_t comm);
};

static pthread_once_t nccl_once = PTHREAD_ONCE_INIT;
static struct nccl_api nccl;
static char nccl_why[256];

/* Load libnccl once: STRATA_NCCL_LIBRARY names it, else libnccl.so.2. */
static void nccl_load(void) {
  const char *name = getenv("STRATA_NCCL_LIBRARY");
  if (!name || !*name)
    name = "libnccl.so.2";
  void *dl = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!dl) {
    snprintf(nccl_why, sizeof nccl_why, "NCCL not loaded (%s): collectives of CUDA devices use strata's ring",
             dlerror());
    return;
  }
#define NCCL_SYM(field, sym)                                                                                           \
  do {                                                                                                                 \
    *(void **)&nccl.field = dlsym(dl, sym);                                                                            \
    if (!nccl.field) {                                                                                                 \
      snprintf(nccl_why, sizeof nccl_why, "%s lacks %s: collectives of CUDA devices use strata's ring", name, sym);  \
      dlclose(dl);                                                                                                     \
      memset(&nccl, 0, sizeof nccl);                                                                                   \
      return;                                                                                                          \
    }                                                                                                                  \
  } while (0)
  NCCL_SYM(comm_init_all, "ncclCommInitAll");
  NCCL_SYM(get_unique_id, "ncclGetUniqueId");
  NCCL_SYM(comm_init_rank, "ncclCommInitRank");
  NCCL_SYM(comm_destroy, "ncclCommDestroy");
  NCCL_SYM(group_start, "ncclGroupStart");
  NCCL_SYM(group_end, "ncclGroupEnd");
  NCCL_SYM(all_reduce, "ncclAllReduce");
  NCCL_SYM(all_gather, "ncclAllGather");
  NCCL_SYM(reduce_scatter, "ncclReduceScatter");
  NCCL_SYM(broadcast, "ncclBroadcast");
  NCCL_SYM(reduce, "ncclReduce");
  NCCL_SYM(error_string, "ncclGetErrorString");
  NCCL_SYM(get_version, "ncclGetVersion");
#undef NCCL_SYM
  *(void **)&nccl.get_async_error = dlsym(dl, "ncclCommGetAsyncError");
  *(void **)&nccl.comm_abort = dlsym(dl, "ncclCommAbort");
  if (!nccl.get_async_error || !nccl.comm_abort)
    nccl.get_async_error = NULL, nccl.comm_abort = NULL;
  nccl.dl = dl;
  if (nccl.get_version(&nccl.version) != 0)
    nccl.version = 0;
  snprintf(nccl_why, sizeof nccl_why, "NCCL %d.%d.%d", nccl.version / 10000, nccl.version / 100 % 100,
           nccl.version % 100);
}

int strata__nccl_probe(void *ctx, char *why, size_t len) {
  (void)ctx;
  pthread_once(&nccl_once, nccl_load);
  snprintf(why, len, "%s", nccl_why);
  return nccl.dl ? STRATA_OK : STRATA_ERR_UNSUPPORTED;
}

/* A communicator's members in this process: all of them (comm_new), or
** this process's share of a group across processes (comm_new_rank). */
struct nccl_group {
  int n;
  int size;                   /* members in the whole group (across processes) */
  int *devs;
  int *ranks;                 /* member index in the whole group by local member; NULL: the same */
  nccl_comm_t *comms;
  int **scratch;              /* one int per member, for barriers, zeroed */
  /* under live_lock: */
  struct nccl_group *next;    /* in the list of live groups */
  int busy;                   /* calls of comm_coll inside NCCL now */
  int failed;                 /* NCCL's asynchronous error, 0 while all is well */
  int aborted;                /* its comms aborted (ncclCommAbort) after that error */
  char why[320];              /* the failure, naming the device */
};

/* The live groups, checked for NCCL's asynchronous errors while a queue is waited for. */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static struct nccl_group *live;
static int live_count;

static int nccl_fail(const char *what, int result) {
  return strata__nccl_svc->error(STRATA_ERR_BACKEND, "cuda: %s: %s (NCCL error %d)", what,
                                 nccl.error_string ? nccl.error_string(result) : "?", result);
}

static void live_add(struct nccl_group *g) {
  pthread_mutex_lock(&live_lock);
  g->next = live;
  live = g;
  __atomic_add_fetch(&live_count, 1, __ATOMIC_SEQ_CST);
  pthread_mutex_unlock(&live_lock);
}

/* Remove g from the live list, if it is there. Lock held. */
static void live_remove_locked(struct nccl_group *g) {
  for (struct nccl_group **p = &live; *p; p = &(*p)->next)
    if (*p == g) {
      *p = g->next;
      __atomic_sub_fetch(&live_count, 1, __ATOMIC_SEQ_CST);
      return;
    }
}

int strata__nccl_live(void) { return __atomic_load_n(&live_count, __ATOMIC_SEQ_CST) > 0; }

/* Abort every comm of a failed group (lock held, nobody inside NCCL with it):
** its kernels stop spinning, so the members' streams drain. */
static void abort_locked(void *ctx, struct nccl_group *g) {
  if (g->aborted || !nccl.comm_abort)
    return;
  void *saved = strata__cuda_context_save(ctx);
  for (int i = 0; i < g->n; i++)
    if (g->comms[i]) {
      (void)nccl.comm_abort(g->comms[i]);
      g->comms[i] = NULL;
    }
  strata__cuda_context_restore(ctx, saved);
  g->aborted = 1;
}

/*
** While a queue of device `dev` is waited for: check every live group with
** a member on `dev` for NCCL's asynchronous errors (a peer that failed, a
** network error), which would otherwise leave NCCL's kernels and the wait
** spinning for ever. A failed group is aborted once nobody is enqueueing
** on it, and the error (naming the device and NCCL's reason) returned;
** later calls on that group are refused.
*/
int strata__nccl_check(void *ctx, int dev) {
  if (!nccl.get_async_error || !strata__nccl_live())
    return STRATA_OK;
  int rc = STRATA_OK;
  char why[sizeof ((struct nccl_group *)0)->why] = "";
  pthread_mutex_lock(&live_lock);
  for (struct nccl_group *g = live; g && !rc; g = g->next) {
    int mine = 0;
    for (int i = 0; i < g->n; i++)
      mine |= g->devs[i] == dev;
    if (!mine)
      continue;
    for (int i = 0; i < g->n && !g->failed; i++) {
      int result = 0;
      if (!g->comms[i])
        continue;
      int r = nccl.get_async_error(g->comms[i], &result);
      if (r == 0 && (result == 0 || result == NCCL_IN_PROGRESS))
        continue;
      int code = r ? r : result;
      g->failed = code;
      snprintf(g->why, sizeof g->why,
               "cuda: NCCL failed on device %d (member %d of %d of its communicator): %s (NCCL error %d); the "
               "communicator was aborted",
               g->devs[i], g->ranks ? g->ranks[i] : i, g->n, nccl.error_string ? nccl.error_string(code) : "?", code);
    }
    if (g->failed) {
      if (!g->busy)
        abort_locked(ctx, g);
      snprintf(why, sizeof why, "%s", g->why);
      rc = STRATA_ERR_BACKEND;
    }
  }
  pthread_mutex_unlock(&live_lock);
  return rc ? strata__nccl_svc->error(rc, "%s", why) : STRATA_OK;
}

void strata__nccl_comm_free(void *ctx, void *comm) {
  struct nccl_group *g = comm;
  if (!g)
    return;
  pthread_mutex_lock(&live_lock);
  live_remove_locked(g);
  pthread_mutex_unlock(&live_lock);
  void *saved = strata__cuda_context_save(ctx);
  for (int i = 0; i < g->n; i++) {
    /* a failed communicator is aborted, not destroyed: destroying waits for work that will never finish */
    if (g->comms && g->comms[i])
      (g->failed && nccl.comm_abort ? nccl.comm_abort : nccl.comm_destroy)(g->comms[i]);
    if (g->scratch && g->scratch[i] && cudaSetDevice(g->devs[i]) == cudaSuccess)
      cudaFree(g->scratch[i]);
  }
  strata__cuda_context_restore(ctx, saved);
  (void)cudaGetLastError();
  free(g->devs);
  free(g->ranks);
  free(g->comms);
  free(g->scratch);
  free(g);
}

/*
** A group of `n` members on devices `devs` (ranks: their member indices in
** a group across processes, NULL in one process), with each member's
** barrier scratch allocated and no NCCL communicator yet, into *out; the
** caller's current device is left as it was.
*/
static int group_alloc(void *ctx, int n, const int *devs, const int *ranks, struct nccl_group **out) {
  *out = NULL;
  struct nccl_group *g = calloc(1, sizeof *g);
  if (g) {
    g->n = n;
    g->devs = malloc(sizeof *g->devs * (size_t)n);
    g->ranks = ranks ? malloc(sizeof *g->ranks * (size_t)n) : NULL;
    g->comms = calloc((size_t)n, sizeof *g->comms);
    g->scratch = calloc((size_t)n, sizeof *g->scratch);
  }
  if (!g || !g->devs || (ranks && !g->ranks) || !g->comms || !g->scratch) {
    strata__nccl_comm_free(ctx, g);
    return strata__nccl_svc->error(STRATA_ERR_NOMEM, "cuda: out of host memory for an NCCL communicator");
  }
  memcpy(g->devs, devs, sizeof *devs * (size_t)n);
  if (ranks)
    memcpy(g->ranks, ranks, sizeof *ranks * (size_t)n);
  void *saved = strata__cuda_context_save(ctx);
  int rc = STRATA_OK;
  for (int i = 0; i < n && !rc; i++) {
    cudaError_t e = cudaSetDevice(devs[i]);
    if (e == cudaSuccess)
      e = cudaMalloc((void **)&g->scratch[i], sizeof(int));
    if (e == cudaSuccess) /* a barrier sums it: zero, so that the sum is defined (and stays zero) */
      e = cudaMemset(g->scratch[i], 0, sizeof(int));
    if (e != cudaSuccess)
      rc = strata__nccl_svc->error(STRATA_ERR_DEVICE_MEMORY, "cuda: NCCL barrier scratch on device %d: %s", devs[i],
                                   cudaGetErrorString(e));
  }
  strata__cuda_context_restore(ctx, saved);
  if (rc) {
    strata__nccl_comm_free(ctx, g);
    return rc;
  }
  *out = g;
  return STRATA_OK;
}

int strata__nccl_comm_new(void *ctx, int n, const int *devs, void **out) {
  *out = NULL;
  pthread_once(&nccl_once, nccl_load);
  if (!nccl.dl)
    return strata__nccl_svc->error(STRATA_ERR_UNSUPPORTED, "cuda: %s", nccl_why);
  struct nccl_group *g;
  int rc = group_alloc(ctx, n, devs, NULL, &g);
  if (rc)
    return rc;
  g->size = n;
  void *saved = strata__cuda_context_save(ctx);
  int r = nccl.comm_init_all(g->comms, n, devs);
  strata__cuda_context_restore(ctx, saved);
  if (r != 0) {
    rc = nccl_fail("ncclCommInitAll", r);
    strata__nccl_comm_free(ctx, g);
    return rc;
  }
  live_add(g);
  *out = g;
  return STRATA_OK;
}

int strata__nccl_comm_unique_id(void *ctx, void *id, size_t cap) {
  (void)ctx;
  pthread_once(&nccl_once, nccl_load);
  if (!nccl.dl)
    return strata__nccl_svc->error(STRATA_ERR_UNSUPPORTED, "cuda: %s", nccl_why);
  nccl_unique_id u;
  if (cap < sizeof u)
    return strata__nccl_svc->error(STRATA_ERR_INTERNAL, "cuda: an NCCL id is %zu bytes, not %zu", sizeof u, cap);
  memset(&u, 0, sizeof u);
  int r = nccl.get_unique_id(&u);
  if (r != 0)
    return nccl_fail("ncclGetUniqueId", r);
  memcpy(id, &u, sizeof u);
  return STRATA_OK;
}

/*
** This process's members of a communicator across processes: one
** ncclCommInitRank per local member (inside one NCCL group when there are
** several, as NCCL requires of one thread initialising several ranks),
** each with its device current. Blocks until every process has joined.
*/
int strata__nccl_comm_new_rank(void *ctx, const void *id, int nranks, int nlocal, const int *ranks, const int *devs,
                               void **out) {
  *out = NULL;
  pthread_once(&nccl_once, nccl_load);
  if (!nccl.dl)
    return strata__nccl_svc->error(STRATA_ERR_UNSUPPORTED, "cuda: %s", nccl_why);
  struct nccl_group *g;
  int rc = group_alloc(ctx, nlocal, devs, ranks, &g);
  if (rc)
    return rc;
  g->size = nranks;
  nccl_unique_id u;
  memcpy(&u, id, sizeof u);
  void *saved = strata__cuda_context_save(ctx);
  const char *what = "ncclGroupStart";
  int r = nlocal > 1 ? nccl.group_start() : 0;
  int grouped = nlocal > 1 && r == 0;
  for (int i = 0; i < nlocal && r == 0 && !rc; i++) {
    cudaError_t e = cudaSetDevice(devs[i]);
    if (e != cudaSuccess) {
      rc = strata__nccl_svc->error(STRATA_ERR_BACKEND, "cuda: selecting device %d for NCCL: %s", devs[i],
                                   cudaGetErrorString(e));
      break;
    }
    what = "ncclCommInitRank";
    r = nccl.comm_init_rank(&g->comms[i], nranks, u, ranks[i]);
  }
  if (grouped) { /* a group once started is ended, whatever failed inside it */
    int r2 = nccl.group_end();
    if (r == 0 && r2 != 0) {
      r = r2;
      what = "ncclGroupEnd";
    }
  }
  strata__cuda_context_restore(ctx, saved);
  if (r != 0 && !rc)
    rc = nccl_fail(what, r);
  if (rc) {
    strata__nccl_comm_free(ctx, g);
    return rc;
  }
  live_add(g);
  *out = g;
  return STRATA_OK;
}

/* One collective on every member's stream, as one NCCL group. Kinds as in
** lib/comm/comm.c: 0 all-reduce, 1 all-gather, 2 reduce-scatter,
** 3 broadcast, 4 barrier (an all-reduce of one int), 5 reduce to root. Members are local
** ones; root is a member index of the whole group. */
int strata__nccl_comm_coll(void *ctx, void *comm, int kind, int member, void *const *queues,
                           const struct strata__mem *send,
                           const struct strata__mem *recv, size_t count, int dtype, int op, int root) {
  struct nccl_group *g = comm;
  /* dtype as in strata/comm.h: 0 float32, 1 int32, 2 bfloat16 (reduced by NCCL itself: its ring rounds each step) */
  int nd = dtype == 2 ? NCCL_BFLOAT16 : dtype == 1 ? NCCL_INT32 : NCCL_FLOAT32;
  size_t es = dtype == 2 ? 2 : 4;
  int no = op == 2 ? NCCL_MAX : op == 1 ? NCCL_AVG : NCCL_SUM;
  /* An average over one member is its own values, which a sum gives exactly. NCCL 2.28.9 on an H100 (strata's GPU
  ** run, 2026-12-05) left the last elements of an out-of-place one-rank ncclAvg of 400009 floats unwritten (400000
  ** written; ncclSum of the same was whole) */
  if (no == NCCL_AVG && g->size == 1)
    no = NCCL_SUM;
  if (dtype == 2 && kind != 4 && nccl.version && nccl.version < NCCL_BFLOAT16_SINCE)
    return strata__nccl_svc->error(STRATA_ERR_UNSUPPORTED, "cuda: NCCL %d.%d.%d has no bfloat16 (2.10 or later has)",
                                   nccl.version / 10000, nccl.version / 100 % 100, nccl.version % 100);
  /* a group whose NCCL failed is aborted: refused, with the failure */
  pthread_mutex_lock(&live_lock);
  int failed = g->failed;
  char why[sizeof g->why];
  snprintf(why, sizeof why, "%s", g->why);
  if (!failed)
    g->busy++;
  pthread_mutex_unlock(&live_lock);
  if (failed)
    return strata__nccl_svc->error(STRATA_ERR_STATE, "%s", why);
  void *saved = strata__cuda_context_save(ctx);
  /* the whole group as one NCCL group, or one member's call from its own thread */
  int r = member < 0 ? nccl.group_start() : 0;
  for (int i = 0; i < g->n && r == 0; i++) {
    if (member >= 0 && i != member)
      continue;
    cudaStream_t st = strata__cuda_queue_stream(queues[i]);
    char *rp = kind == 4 || !recv[i].h ? NULL : (char *)strata__cuda_buf_ptr(recv[i].h) + recv[i].off * es;
    const char *sp = kind == 4 || !send[i].h ? NULL : (const char *)strata__cuda_buf_ptr(send[i].h) + send[i].off * es;
    switch (kind) {
    case 0:
      r = nccl.all_reduce(sp, rp, count, nd, no, g->comms[i], st);
      break;
    case 1:
      r = nccl.all_gather(sp, rp, count, nd, g->comms[i], st);
      break;
    case 2:
      r = nccl.reduce_scatter(sp, rp, count, nd, no, g->comms[i], st);
      break;
    case 3:
      r = nccl.broadcast((g->ranks ? g->ranks[i] : i) == root ? sp : rp, rp, count, nd, root, g->comms[i], st);
      break;
    case 5: /* (recvbuff is read on the root only) */
      r = nccl.reduce(sp, rp, count, nd, no, root, g->comms[i], st);
      break;
    default:
      r = nccl.all_reduce(g->scratch[i], g->scratch[i], 1, NCCL_INT32, NCCL_SUM, g->comms[i], st);
      break;
    }
  }
  int r2 = member < 0 ? nccl.group_end() : 0;
  strata__cuda_context_restore(ctx, saved);
  pthread_mutex_lock(&live_lock);
  g->busy--;
  pthread_mutex_unlock(&live_lock);
  if (r != 0)
    return nccl_fail("enqueueing a collective", r);
  if (r2 != 0)
    return nccl_fail("ncclGroupEnd", r2);
  return STRATA_OK;
}
