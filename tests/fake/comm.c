/* SPDX-License-Identifier: MIT */
/* comm.c — the fake "cuda" module's communicator across processes (built into tests/fake/ccl/): NCCL's part played
** through a shared file, so that the cluster's one-communicator path runs under mpirun on machines without a GPU. */
#include "config.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "device/backend.h"
#include "fake-comm.h"

/* Bytes each member may put into the shared file per call, and the longest wait for the others. */
#define SLOT_BYTES ((size_t)8 << 20)
#define WAIT_S 60.0

/* The file: a counter of arrivals, then one slot per member of the whole group. */
struct shared {
  _Atomic uint64_t arrived;
  char pad[56];
};

/* This process's share of a communicator. */
struct fake_comm {
  int nranks, nlocal;
  int *ranks;                   /* member index by local member */
  uint64_t barriers;            /* barriers passed so far */
  struct shared *sh;
  size_t bytes;
  char path[STRATA__COMM_ID_BYTES];
};

static const struct strata__services *svc;

void strata__fake_comm_services(const struct strata__services *s) { svc = s; }

static char *slot(struct fake_comm *c, int member) {
  return (char *)(c->sh + 1) + (size_t)member * SLOT_BYTES;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Every member of the group arrives (this process's nlocal at once), then all go on. */
static int barrier(struct fake_comm *c, const char *what) {
  uint64_t target = ++c->barriers * (uint64_t)c->nranks;
  atomic_fetch_add(&c->sh->arrived, (uint64_t)c->nlocal);
  double t0 = now_s();
  while (atomic_load(&c->sh->arrived) < target) {
    if (now_s() - t0 > WAIT_S)
      return svc->error(STRATA_ERR_TIMEOUT, "fake cuda: %s: the other members did not arrive in %g s", what, WAIT_S);
    struct timespec d = {0, 200000};
    nanosleep(&d, NULL);
  }
  return STRATA_OK;
}

int strata__fake_comm_probe(void *ctx, char *why, size_t len) {
  (void)ctx;
  snprintf(why, len, "fake NCCL (a shared file)");
  return STRATA_OK;
}

/* The id names a new file; STRATA_FAKE_COMM_FAIL=id makes it fail here. */
int strata__fake_comm_unique_id(void *ctx, void *id, size_t cap) {
  static int made;
  (void)ctx;
  const char *f = getenv("STRATA_FAKE_COMM_FAIL");
  if (f && strcmp(f, "id") == 0)
    return svc->error(STRATA_ERR_BACKEND, "fake cuda: no id (STRATA_FAKE_COMM_FAIL=id)");
  const char *dir = getenv("TMPDIR");
  char *p = id;
  memset(p, 0, cap);
  snprintf(p, cap, "%s/strata-fake-comm-%ld-%d", dir && *dir ? dir : "/tmp", (long)getpid(), made++);
  unlink(p); /* a file left by an earlier process of this pid would hold its counts */
  return STRATA_OK;
}

void strata__fake_comm_free(void *ctx, void *comm) {
  struct fake_comm *c = comm;
  (void)ctx;
  if (!c)
    return;
  if (c->sh)
    munmap(c->sh, c->bytes);
  for (int i = 0; i < c->nlocal && c->ranks; i++)
    if (c->ranks[i] == 0)
      unlink(c->path); /* every member has joined, so has the file open */
  free(c->ranks);
  free(c);
}

/* Join: map the file the id names, wait for every member. STRATA_FAKE_COMM_FAIL=join (or join:M, in the process
** holding member M) fails after the others joined (as an NCCL error past its bootstrap would), so that they return
** and agree on the failure. */
int strata__fake_comm_new_rank(void *ctx, const void *id, int nranks, int nlocal, const int *ranks, const int *devs,
                               void **out) {
  (void)devs;
  *out = NULL;
  struct fake_comm *c = calloc(1, sizeof *c);
  if (!c || !(c->ranks = malloc(sizeof *c->ranks * (size_t)nlocal))) {
    free(c);
    return svc->error(STRATA_ERR_NOMEM, "fake cuda: out of memory");
  }
  c->nranks = nranks;
  c->nlocal = nlocal;
  memcpy(c->ranks, ranks, sizeof *ranks * (size_t)nlocal);
  memcpy(c->path, id, sizeof c->path);
  c->path[sizeof c->path - 1] = '\0';
  c->bytes = sizeof(struct shared) + (size_t)nranks * SLOT_BYTES;
  int fd = open(c->path, O_RDWR | O_CREAT, 0600);
  int rc = fd < 0 || ftruncate(fd, (off_t)c->bytes) != 0
               ? svc->error(STRATA_ERR_IO, "fake cuda: cannot open the communicator's file %s", c->path)
               : STRATA_OK;
  if (!rc) {
    void *p = mmap(NULL, c->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
      rc = svc->error(STRATA_ERR_IO, "fake cuda: cannot map %s", c->path);
    else
      c->sh = p;
  }
  if (fd >= 0)
    close(fd);
  if (!rc)
    rc = barrier(c, "joining");
  const char *f = getenv("STRATA_FAKE_COMM_FAIL");
  int fail = f && strncmp(f, "join", 4) == 0 && (f[4] == '\0' || f[4] == ':');
  if (fail && f[4] == ':') {
    fail = 0;
    for (int i = 0; i < nlocal; i++)
      fail |= ranks[i] == atoi(f + 5);
  }
  if (!rc && fail)
    rc = svc->error(STRATA_ERR_BACKEND, "fake cuda: join refused (STRATA_FAKE_COMM_FAIL=%s)", f);
  if (rc) {
    strata__fake_comm_free(ctx, c);
    return rc;
  }
  *out = c;
  return STRATA_OK;
}

/* bfloat16 <-> float32: exact widening; to nearest, ties to even (finite values: what the tests send). */
static float bf_widen(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static uint16_t bf_round(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* y[e] = op of every member's x[off + e], in member order (bfloat16: each step rounded, as NCCL's ring). */
static void fold(struct fake_comm *c, void *y, size_t off, size_t count, int dtype, int op) {
  for (size_t e = 0; e < count; e++) {
    if (dtype == 2) {
      uint16_t acc = 0;
      for (int m = 0; m < c->nranks; m++) {
        uint16_t v;
        memcpy(&v, slot(c, m) + (off + e) * 2, 2);
        float a = bf_widen(acc), b = bf_widen(v);
        acc = m == 0 ? v : bf_round(op == 2 ? (b > a ? b : a) : a + b);
      }
      if (op == 1)
        acc = bf_round(bf_widen(acc) * (1.0f / (float)c->nranks));
      memcpy((char *)y + e * 2, &acc, 2);
    } else if (dtype == 1) {
      int32_t acc = 0;
      for (int m = 0; m < c->nranks; m++) {
        int32_t v;
        memcpy(&v, slot(c, m) + (off + e) * 4, 4);
        acc = m == 0 ? v : op == 2 ? (v > acc ? v : acc) : (int32_t)((uint32_t)acc + (uint32_t)v);
      }
      memcpy((char *)y + e * 4, &acc, 4);
    } else {
      float acc = 0;
      for (int m = 0; m < c->nranks; m++) {
        float v;
        memcpy(&v, slot(c, m) + (off + e) * 4, 4);
        acc = m == 0 ? v : op == 2 ? (v > acc ? v : acc) : acc + v;
      }
      if (op == 1)
        acc /= (float)c->nranks;
      memcpy((char *)y + e * 4, &acc, 4);
    }
  }
}

/* Kinds as lib/backend.h's comm_coll: each local member's send into its slot, every member there, each result
** from the slots, every member done reading. Only the whole group's call (member < 0). */
int strata__fake_comm_coll(void *ctx, void *comm, int kind, int member, void *const *queues,
                           const struct strata__mem *send, const struct strata__mem *recv, size_t count, int dtype,
                           int op, int root) {
  struct fake_comm *c = comm;
  (void)ctx;
  (void)queues;
  if (member >= 0)
    return svc->error(STRATA_ERR_UNSUPPORTED, "fake cuda: one member's part of a collective");
  size_t in = kind == 2 ? count * (size_t)c->nranks : kind == 4 ? 0 : count, es = dtype == 2 ? 2 : 4;
  if (in * es > SLOT_BYTES)
    return svc->error(STRATA_ERR_RANGE, "fake cuda: %zu elements are more than a slot holds", in);
  for (int i = 0; i < c->nlocal; i++)
    if (send[i].h && (kind != 3 || c->ranks[i] == root))
      memcpy(slot(c, c->ranks[i]), (const char *)send[i].h + send[i].off * es, in * es);
  int rc = barrier(c, "a collective");
  if (rc)
    return rc;
  for (int i = 0; i < c->nlocal; i++) {
    char *y = kind == 4 ? NULL : (char *)recv[i].h + recv[i].off * es;
    switch (kind) {
    case 0:
      fold(c, y, 0, count, dtype, op);
      break;
    case 1:
      for (int m = 0; m < c->nranks; m++)
        memcpy(y + (size_t)m * count * es, slot(c, m), count * es);
      break;
    case 2:
      fold(c, y, (size_t)c->ranks[i] * count, count, dtype, op);
      break;
    case 3:
      memcpy(y, slot(c, root), count * es);
      break;
    default:
      break;
    }
  }
  return barrier(c, "a collective's end");
}
