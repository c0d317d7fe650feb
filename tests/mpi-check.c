/* SPDX-License-Identifier: MIT */
/* mpi-check.c — one rank of the cluster tests (tests/test-mpi.sh and tests/test-mpi-nccl.sh run it under mpirun): the view, point-to-point, collectives and the path they take, failures. */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <strata/strata.h>

static strata_cluster_t cl;
static struct strata_cluster_info ci;
static int failures;

/* A failed check: say which rank, count it. */
static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "mpi-check: rank %d: FAIL: ", ci.rank);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  failures++;
}

/* A strata call that must succeed; a failure ends the job (the others would wait for this rank). */
#define MUST(call)                                                                                                     \
  do {                                                                                                                 \
    int rc_ = (call);                                                                                                  \
    if (rc_) {                                                                                                         \
      fprintf(stderr, "mpi-check: rank %d: %s -> %s\n", ci.rank, #call, strata_err_name(rc_));                         \
      strata_cluster_abort(cl, 3, NULL);                                                                               \
    }                                                                                                                  \
  } while (0)

/* The value member `g` contributes at element i: small integers, so any order of summation is exact. */
static float ival(int g, size_t i) { return (float)((int)((g * 7 + i * 3) % 101) - 50); }
/* ... and values whose sum depends on the order: for bit-identity between runs. */
static float rval(int g, size_t i) { return sinf((float)g * 1.37f + (float)i * 0.001f) * 1e3f + 1e-3f * (float)g; }

static uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
  const unsigned char *s = p;
  for (size_t i = 0; i < n; i++) {
    h ^= s[i];
    h *= 1099511628211ull;
  }
  return h;
}

/* ---------------------------------------------------------------- view */

static int cmd_view(void) {
  int ndev = 0;
  MUST(strata_device_count(&ndev));
  if (ci.local_device_count != ndev)
    fail("local_device_count %d, strata_device_count %d", ci.local_device_count, ndev);
  /* rank-major numbering: first_device is the sum of the lower ranks' counts */
  int sum = 0;
  for (int r = 0; r < ci.size; r++) {
    struct strata_cluster_rank ri;
    MUST(strata_cluster_rank_info(cl, r, &ri));
    if (ri.first_device != sum)
      fail("rank %d's first device is %d, expected %d", r, ri.first_device, sum);
    for (int k = 0; k < ri.device_count; k++) {
      struct strata_cluster_device d;
      int g = -1;
      MUST(strata_cluster_global_device(cl, r, k, &g));
      MUST(strata_cluster_device(cl, g, &d));
      if (g != sum + k || d.rank != r || d.local != k || d.node != ri.node)
        fail("device (%d, %d) is global %d (rank %d local %d node %d)", r, k, g, d.rank, d.local, d.node);
    }
    sum += ri.device_count;
    if (ri.pid <= 0 || !ri.node_name[0])
      fail("rank %d: pid %ld node '%s'", r, ri.pid, ri.node_name);
  }
  if (sum != ci.device_count)
    fail("device_count %d, the ranks add up to %d", ci.device_count, sum);
  /* this rank's own devices, as the cluster shows them */
  for (int k = 0; k < ndev; k++) {
    struct strata_device_props p;
    struct strata_cluster_device d;
    MUST(strata_device_props(k, &p));
    MUST(strata_cluster_device(cl, ci.first_device + k, &d));
    if (strcmp(p.name, d.info.name) != 0 || strcmp(p.backend, d.info.backend) != 0)
      fail("global device %d is '%s' (%s), locally '%s' (%s)", ci.first_device + k, d.info.name, d.info.backend,
           p.name, p.backend);
  }
  /* expected shape from the environment: devices per rank and ranks per node */
  const char *e = getenv("MPI_CHECK_DEVICES_PER_RANK");
  if (e && ndev != atoi(e))
    fail("%d local devices, %s expected", ndev, e);
  const char *rpn = getenv("STRATA_CLUSTER_RANKS_PER_NODE");
  int per = rpn ? atoi(rpn) : 0;
  int want_nodes = per > 0 ? (ci.size + per - 1) / per : 1;
  if (ci.node_count != want_nodes)
    fail("%d nodes, %d expected", ci.node_count, want_nodes);
  for (int a = 0; a < ci.device_count; a++)
    for (int b = 0; b < ci.device_count; b++) {
      struct strata_cluster_device da, db;
      struct strata_cluster_link l;
      MUST(strata_cluster_device(cl, a, &da));
      MUST(strata_cluster_device(cl, b, &db));
      MUST(strata_cluster_link(cl, a, b, &l));
      int want = da.rank == db.rank ? STRATA_CLUSTER_SAME_RANK
                 : da.node == db.node ? STRATA_CLUSTER_SAME_NODE
                                      : STRATA_CLUSTER_NETWORK;
      if (l.scope != want || !(l.gbps > 0 || (a == b)))
        fail("link %d -> %d: scope %s, %g GB/s; expected %s", a, b, strata_cluster_scope_name(l.scope), l.gbps,
             strata_cluster_scope_name(want));
      if (want == STRATA_CLUSTER_NETWORK && l.kind != STRATA_PATH_NET)
        fail("link %d -> %d crosses nodes but is %s", a, b, strata_path_kind_name(l.kind));
    }
  if (per > 0 && ci.size > per) {
    struct strata_cluster_node n0, n1;
    MUST(strata_cluster_node_info(cl, 0, &n0));
    MUST(strata_cluster_node_info(cl, 1, &n1));
    if (strcmp(n0.name, n1.name) == 0 || n0.rank_count != per || n1.first_rank != per)
      fail("nodes '%s' (%d ranks) and '%s' (first rank %d)", n0.name, n0.rank_count, n1.name, n1.first_rank);
  }
  if (ci.rank == 0)
    printf("view: %d ranks, %d nodes, %d devices; network %.2f GB/s (%s), shared memory %.2f GB/s (%s), MPI thread "
           "level %d, %s\n",
           ci.size, ci.node_count, ci.device_count, ci.network_gbps,
           ci.network_source == STRATA_CLUSTER_MEASURED ? "measured" : ci.network_source == STRATA_CLUSTER_GIVEN
                                                                           ? "given" : "nominal",
           ci.shm_gbps, ci.shm_source == STRATA_CLUSTER_MEASURED ? "measured" : "nominal", ci.thread_level,
           ci.mpi_library[0] ? ci.mpi_library : "no MPI");
  return failures;
}

/* ----------------------------------------------------------------- p2p */

struct sender {
  int peer, tag, dev;
  size_t bytes;
  int rc;
  char msg[512];
};

static float pval(int rank, int dev, size_t i) { return (float)(rank * 1000003 + dev * 7919 + (int)(i % 65521)); }

static int p2p_sizes(void);

static void *send_thread(void *arg) {
  struct sender *s = arg;
  strata_queue_t q = NULL;
  strata_buffer_t b = NULL;
  size_t n = s->bytes / 4;
  float *h = malloc(s->bytes);
  s->rc = h ? strata_queue_new(s->dev, &q) : STRATA_ERR_NOMEM;
  if (!s->rc)
    s->rc = strata_buffer_new(s->dev, s->bytes, &b);
  for (size_t i = 0; h && i < n; i++)
    h[i] = pval(ci.rank, s->dev, i);
  if (!s->rc)
    s->rc = strata_buffer_upload(q, b, 0, h, s->bytes);
  if (!s->rc)
    s->rc = strata_cluster_send(cl, s->peer, s->tag, q, strata_mem(b, 0), s->bytes);
  if (s->rc)
    snprintf(s->msg, sizeof s->msg, "%s", strata_last_error());
  strata_buffer_free(b);
  strata_queue_free(q);
  free(h);
  return NULL;
}

/* Every rank sends each of its devices' buffers to the next rank (from a thread
** of its own) while receiving the previous rank's into the same local device. */
static int cmd_p2p(void) {
  if (ci.size < 2) {
    fail("p2p needs 2 ranks or more");
    return failures;
  }
  int ndev = ci.local_device_count;
  size_t bytes = (size_t)(10u << 20) + 12;   /* several chunks and a short tail */
  int next = (ci.rank + 1) % ci.size, prev = (ci.rank + ci.size - 1) % ci.size;
  for (int d = 0; d < ndev; d++) {
    struct strata_device_props p;
    MUST(strata_device_props(d, &p));
    struct sender s = {.peer = next, .tag = 100 + d, .dev = d, .bytes = bytes};
    pthread_t t;
    pthread_create(&t, NULL, send_thread, &s);
    strata_queue_t q;
    strata_buffer_t b;
    MUST(strata_queue_new(d, &q));
    MUST(strata_buffer_new(d, bytes + 64, &b));
    MUST(strata_cluster_recv(cl, prev, 100 + d, q, strata_mem(b, 16), bytes));
    float *h = malloc(bytes);
    MUST(strata_buffer_download(q, b, 64, h, bytes));
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < bytes / 4; i++)
      if (h[i] != pval(prev, d, i) && !bad++)
        first = i;
    if (bad)
      fail("device %d (%s): %zu of %zu floats from rank %d wrong, first at %zu (%g, expected %g)", d, p.backend, bad,
           bytes / 4, prev, first, h[first], pval(prev, d, first));
    pthread_join(t, NULL);
    if (s.rc)
      fail("send from device %d: %s: %s", d, strata_err_name(s.rc), s.msg);
    free(h);
    strata_buffer_free(b);
    strata_queue_free(q);
    if (ci.rank == 0)
      printf("p2p: device %d (%s) %zu bytes to rank %d and back from rank %d: %s\n", d, p.backend, bytes, next, prev,
             bad ? "WRONG" : "ok");
  }
  /* bandwidth, rank 0 -> rank 1, device 0 (host memory staged) */
  if (ci.rank < 2) {
    size_t big = 64u << 20;
    strata_queue_t q;
    strata_buffer_t b;
    MUST(strata_queue_new(0, &q));
    MUST(strata_buffer_new(0, big, &b));
    double best = 0;
    for (int rep = 0; rep < 4; rep++) {
      struct timespec t0, t1;
      clock_gettime(CLOCK_MONOTONIC, &t0);
      if (ci.rank == 0)
        MUST(strata_cluster_send(cl, 1, 7, q, strata_mem(b, 0), big));
      else
        MUST(strata_cluster_recv(cl, 0, 7, q, strata_mem(b, 0), big));
      /* the receiver's answer closes the round, so the time counts arrival */
      if (ci.rank == 1)
        MUST(strata_cluster_send(cl, 0, 8, q, strata_mem(b, 0), 4));
      else
        MUST(strata_cluster_recv(cl, 1, 8, q, strata_mem(b, 0), 4));
      clock_gettime(CLOCK_MONOTONIC, &t1);
      double dt = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
      if (rep > 0 && (double)big / dt / 1e9 > best)
        best = (double)big / dt / 1e9;
    }
    if (ci.rank == 0)
      printf("p2p: 64 MiB rank 0 -> rank 1 through strata: %.2f GB/s (start-up ping-pong: %.2f GB/s)\n", best,
             ci.shm_gbps);
    strata_buffer_free(b);
    strata_queue_free(q);
  }
  return p2p_sizes();
}

/* Byte k of the message that rank `rank` sends from device `dev` at size index `si`. */
static unsigned char bval(int rank, int dev, int si, size_t k) { return (unsigned char)(rank * 31 + dev * 7 + si * 5 + k * 13); }

struct byte_sender {
  int peer, tag, dev, si;
  size_t bytes;
  int rc;
  char msg[512];
};

static void *send_bytes_thread(void *arg) {
  struct byte_sender *s = arg;
  strata_queue_t q = NULL;
  strata_buffer_t b = NULL;
  unsigned char *h = malloc(s->bytes + 16);
  s->rc = h ? strata_queue_new(s->dev, &q) : STRATA_ERR_NOMEM;
  if (!s->rc)
    s->rc = strata_buffer_new(s->dev, s->bytes + 16, &b);
  for (size_t k = 0; h && k < s->bytes; k++)
    h[8 + k] = bval(ci.rank, s->dev, s->si, k);
  if (!s->rc)
    s->rc = strata_buffer_upload(q, b, 0, h, s->bytes + 16);
  if (!s->rc)   /* from element 2: an offset into the buffer */
    s->rc = strata_cluster_send(cl, s->peer, s->tag, q, strata_mem(b, 2), s->bytes);
  if (s->rc)
    snprintf(s->msg, sizeof s->msg, "%s", strata_last_error());
  strata_buffer_free(b);
  strata_queue_free(q);
  free(h);
  return NULL;
}

/*
** Sizes on either side of the header's and of one piece's, partial pieces,
** and nothing: every rank to the next, from one kind of device into
** another (a host virtual device's memory goes to MPI directly, a PoCL
** device's through staging), at an offset, the bytes around the message
** untouched.
*/
static int p2p_sizes(void) {
  static const size_t sizes[] = {0, 4, 24, 28, 4099, 65536, 65540, 300000, (1u << 20) + 12};
  int ndev = ci.local_device_count;
  int next = (ci.rank + 1) % ci.size, prev = (ci.rank + ci.size - 1) % ci.size;
  int nsz = (int)(sizeof sizes / sizeof sizes[0]), bad_sizes = 0;
  for (int si = 0; si < nsz; si++) {
    size_t bytes = sizes[si];
    int ds = si % ndev, dr = (si + 1 + si / ndev) % ndev;   /* every pair of kinds over the sizes */
    struct byte_sender s = {.peer = next, .tag = 200 + si, .dev = ds, .si = si, .bytes = bytes};
    pthread_t t;
    pthread_create(&t, NULL, send_bytes_thread, &s);
    strata_queue_t q;
    strata_buffer_t b;
    size_t room = bytes + 64;
    unsigned char *h = malloc(room);
    memset(h, 0xee, room);
    MUST(strata_queue_new(dr, &q));
    MUST(strata_buffer_new(dr, room, &b));
    MUST(strata_buffer_upload(q, b, 0, h, room));
    MUST(strata_cluster_recv(cl, prev, 200 + si, q, strata_mem(b, 5), bytes));
    MUST(strata_buffer_download(q, b, 0, h, room));
    size_t bad = 0;
    for (size_t k = 0; k < room; k++) {
      unsigned char want = k >= 20 && k < 20 + bytes ? bval(prev, (si) % ndev, si, k - 20) : 0xee;
      bad += h[k] != want;
    }
    if (bad) {
      fail("p2p of %zu bytes from rank %d's device %d into device %d: %zu bytes wrong", bytes, prev, ds, dr, bad);
      bad_sizes++;
    }
    pthread_join(t, NULL);
    if (s.rc)
      fail("send of %zu bytes from device %d: %s: %s", bytes, ds, strata_err_name(s.rc), s.msg);
    free(h);
    strata_buffer_free(b);
    strata_queue_free(q);
  }
  if (ci.rank == 0)
    printf("p2p: %d sizes from 0 to %zu bytes between device kinds, at offsets: %s\n", nsz, sizes[nsz - 1],
           bad_sizes ? "WRONG" : "ok");
  return failures;
}

/* Rank 0 sends MPI_CHECK_SEND bytes, rank 1 expects MPI_CHECK_RECV, on local device MPI_CHECK_DEVICE:
** rank 1's receive must fail with STRATA_ERR_SHAPE (it prints the message and ends the job). */
static int cmd_mismatch(void) {
  const char *sv = getenv("MPI_CHECK_SEND"), *rv = getenv("MPI_CHECK_RECV"), *dv = getenv("MPI_CHECK_DEVICE");
  size_t sb = sv ? (size_t)atol(sv) : 4096, rb = rv ? (size_t)atol(rv) : 8192;
  int dev = dv ? atoi(dv) : 0;
  strata_queue_t q;
  strata_buffer_t b;
  MUST(strata_queue_new(dev, &q));
  MUST(strata_buffer_new(dev, (sb > rb ? sb : rb) + 4, &b));
  if (ci.rank == 0) {
    int rc = strata_cluster_send(cl, 1, 3, q, strata_mem(b, 0), sb);
    fprintf(stderr, "mismatch: rank 0: send %s\n", rc ? strata_err_name(rc) : "returned");
    sleep(60);   /* rank 1 ends the job */
  } else if (ci.rank == 1) {
    int rc = strata_cluster_recv(cl, 0, 3, q, strata_mem(b, 0), rb);
    printf("mismatch: rank 1: %s: %s\n", strata_err_name(rc), rc ? strata_last_error() : "");
    fflush(stdout);
    strata_cluster_abort(cl, rc == STRATA_ERR_SHAPE ? 6 : 7, "the receive is over");
  }
  return failures;
}

/* --------------------------------------------------------- collectives */

struct group {
  strata_cluster_comm_t cc;
  int n, nlocal;
  int members[256];
  strata_queue_t q[64];
  strata_buffer_t sb[64], rb[64];
  strata_mem_t s[64], r[64];
};

static void group_new(struct group *g, const int *devs, int n) {
  memset(g, 0, sizeof *g);
  MUST(strata_cluster_comm_new(cl, devs, n, NULL, &g->cc));
  g->n = n;
  MUST(strata_cluster_comm_local(g->cc, &g->nlocal, g->members));
  for (int i = 0; i < g->nlocal; i++)
    MUST(strata_queue_new(devs[g->members[i]] - ci.first_device, &g->q[i]));
}

static void group_buffers(struct group *g, size_t sbytes, size_t rbytes) {
  for (int i = 0; i < g->nlocal; i++) {
    int d = strata_queue_device(g->q[i]);
    strata_buffer_free(g->sb[i]);
    strata_buffer_free(g->rb[i]);
    MUST(strata_buffer_new(d, sbytes, &g->sb[i]));
    MUST(strata_buffer_new(d, rbytes, &g->rb[i]));
    g->s[i] = strata_mem(g->sb[i], 0);
    g->r[i] = strata_mem(g->rb[i], 0);
  }
}

static void group_free(struct group *g) {
  for (int i = 0; i < g->nlocal; i++) {
    strata_buffer_free(g->sb[i]);
    strata_buffer_free(g->rb[i]);
    strata_queue_free(g->q[i]);
  }
  strata_cluster_comm_free(g->cc);
}

static void upload(struct group *g, int i, float (*f)(int, size_t), size_t count, int as_int) {
  float *h = malloc(count * 4);
  int m = g->members[i];
  for (size_t k = 0; k < count; k++) {
    float v = f(m, k);
    if (as_int) {
      int32_t iv = (int32_t)v;
      memcpy(&h[k], &iv, 4);
    } else {
      h[k] = v;
    }
  }
  MUST(strata_buffer_upload(g->q[i], g->sb[i], 0, h, count * 4));
  free(h);
}

/* bfloat16 <-> float32 as strata/ops.h states it: exact widening; to nearest, ties to even. */
static float bf_widen(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static uint16_t bf_round(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  uint32_t mag = u & 0x7fffffffu;
  if (mag > 0x7f800000u)
    return (uint16_t)((u >> 16) | 0x40u);
  if (mag < 0x00800000u)
    return (uint16_t)((u >> 16) & 0x8000u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* bfloat16 values of member g at element i: integers in [-8, 8], whose sums over up to 32 members (|sum| <= 256)
** are exact in any order; and values whose sums round. */
static float bval16(int g, size_t i) { return (float)((int)((g * 7 + i * 3) % 17) - 8); }
static float rval16(int g, size_t i) { return sinf((float)g * 1.37f + (float)i * 0.001f) * 4.0f; }

/* Member i's send as bfloat16 values of f (typed operands), and its recv typed likewise. */
static void upload16(struct group *g, int i, float (*f)(int, size_t), size_t count) {
  uint16_t *h = malloc(count * 2);
  for (size_t k = 0; k < count; k++)
    h[k] = bf_round(f(g->members[i], k));
  MUST(strata_buffer_upload(g->q[i], g->sb[i], 0, h, count * 2));
  g->s[i] = strata_mem_typed(g->sb[i], 0, STRATA_BFLOAT16);
  g->r[i] = strata_mem_typed(g->rb[i], 0, STRATA_BFLOAT16);
  free(h);
}

/* Compare member i's bfloat16 recv with `want` bit for bit; returns the result's hash. */
static uint64_t check16(struct group *g, int i, const uint16_t *want, size_t count, const char *what) {
  uint16_t *h = malloc(count * 2);
  MUST(strata_buffer_download(g->q[i], g->rb[i], 0, h, count * 2));
  size_t bad = 0, first = 0;
  for (size_t k = 0; k < count; k++)
    if (h[k] != want[k] && !bad++)
      first = k;
  if (bad)
    fail("%s: member %d: %zu of %zu elements wrong, first at %zu (%g, expected %g)", what, g->members[i], bad, count,
         first, bf_widen(h[first]), bf_widen(want[first]));
  uint64_t hash = hash_bytes(1469598103934665603ull, h, count * 2);
  free(h);
  return hash;
}

/*
** The bfloat16 collectives over the group (buffers of count x n elements at
** least): sum, max and avg of all-reduce exact on integers, all-gather and
** broadcast bit for bit, reduce-scatter's block; values whose sums round:
** the same bits on every member and repetition, within n - 1 bfloat16
** roundings of the exact sum (relative to the sum of magnitudes).
** Reductions only when `reduce` (CUDA devices reduce bfloat16 only through NCCL so far).
*/
static void collectives_bf16(struct group *g, int n, size_t count, int reduce) {
  uint16_t *want = malloc(count * 2 * (size_t)n);
  char what[128];
  for (int op = STRATA_SUM; op <= STRATA_MAX && reduce; op++) {
    for (int i = 0; i < g->nlocal; i++)
      upload16(g, i, bval16, count);
    for (size_t k = 0; k < count; k++) {
      float acc = op == STRATA_MAX ? -INFINITY : 0;
      for (int m = 0; m < n; m++)
        acc = op == STRATA_MAX ? fmaxf(acc, bval16(m, k)) : acc + bval16(m, k);
      want[k] = op == STRATA_AVG ? bf_round(bf_widen(bf_round(acc)) * (1.0f / (float)n)) : bf_round(acc);
    }
    MUST(strata_cluster_allreduce(g->cc, g->q, g->s, g->r, count, STRATA_BFLOAT16, op));
    snprintf(what, sizeof what, "allreduce %s bfloat16 of %zu", strata_redop_name(op), count);
    for (int i = 0; i < g->nlocal; i++)
      check16(g, i, want, count, what);
  }
  for (int i = 0; i < g->nlocal; i++)
    upload16(g, i, rval16, count);
  for (int m = 0; m < n; m++)
    for (size_t k = 0; k < count; k++)
      want[(size_t)m * count + k] = bf_round(rval16(m, k));
  MUST(strata_cluster_allgather(g->cc, g->q, g->s, g->r, count, STRATA_BFLOAT16));
  snprintf(what, sizeof what, "allgather bfloat16 of %zu", count);
  for (int i = 0; i < g->nlocal; i++)
    check16(g, i, want, count * (size_t)n, what);
  for (int i = 0; i < g->nlocal && reduce; i++)
    upload16(g, i, bval16, count * (size_t)n);
  if (reduce)
    MUST(strata_cluster_reducescatter(g->cc, g->q, g->s, g->r, count, STRATA_BFLOAT16, STRATA_SUM));
  snprintf(what, sizeof what, "reducescatter bfloat16 of %zu", count);
  for (int i = 0; i < g->nlocal && reduce; i++) {
    for (size_t k = 0; k < count; k++) {
      float acc = 0;
      for (int m = 0; m < n; m++)
        acc += bval16(m, (size_t)g->members[i] * count + k);
      want[k] = bf_round(acc);
    }
    check16(g, i, want, count, what);
  }
  for (int i = 0; i < g->nlocal; i++)
    upload16(g, i, rval16, count);
  for (size_t k = 0; k < count; k++)
    want[k] = bf_round(rval16(n - 1, k));
  MUST(strata_cluster_broadcast(g->cc, g->q, g->s, g->r, count, STRATA_BFLOAT16, n - 1));
  snprintf(what, sizeof what, "broadcast bfloat16 of %zu", count);
  for (int i = 0; i < g->nlocal; i++)
    check16(g, i, want, count, what);
  uint64_t h0 = 0;
  for (int rep = 0; rep < 2 && reduce; rep++) {
    for (int i = 0; i < g->nlocal; i++)
      upload16(g, i, rval16, count);
    MUST(strata_cluster_allreduce(g->cc, g->q, g->s, g->r, count, STRATA_BFLOAT16, STRATA_SUM));
    MUST(strata_buffer_download(g->q[0], g->rb[0], 0, want, count * 2));
    for (size_t k = 0; k < count; k++) {
      double exact = 0, mag = 0;
      for (int m = 0; m < n; m++) {
        exact += bf_widen(bf_round(rval16(m, k)));
        mag += fabs(bf_widen(bf_round(rval16(m, k))));
      }
      if (fabs(bf_widen(want[k]) - exact) > (n - 1) * (ldexp(1, -8) + ldexp(1, -23)) * mag && !failures)
        fail("bfloat16 allreduce at %zu: %g, the exact sum is %g (more than %d roundings away)", k,
             bf_widen(want[k]), exact, n - 1);
    }
    uint64_t h = 0;
    for (int i = 0; i < g->nlocal; i++)
      h = check16(g, i, want, count, "repeated bfloat16 allreduce (members differ)");
    if (rep == 0)
      h0 = h;
    else if (h != h0)
      fail("repeated bfloat16 allreduce of %zu: other bits", count);
  }
  for (int i = 0; i < g->nlocal; i++) {
    g->s[i] = strata_mem(g->sb[i], 0);
    g->r[i] = strata_mem(g->rb[i], 0);
  }
  free(want);
}

/* Compare member i's recv with expected; returns the result's hash. */
static uint64_t check(struct group *g, int i, const float *want, size_t count, const char *what) {
  float *h = malloc(count * 4);
  MUST(strata_buffer_download(g->q[i], g->rb[i], 0, h, count * 4));
  size_t bad = 0, first = 0;
  for (size_t k = 0; k < count; k++)
    if (memcmp(&h[k], &want[k], 4) != 0 && !bad++)
      first = k;
  if (bad)
    fail("%s: member %d: %zu of %zu elements wrong, first at %zu (%g, expected %g)", what, g->members[i], bad, count,
         first, h[first], want[first]);
  uint64_t hash = hash_bytes(1469598103934665603ull, h, count * 4);
  free(h);
  return hash;
}

/* The group: every rank's devices from local device MPI_CHECK_DEVICE (default 0), or
** (spread) that one device of each rank. */
static int collectives(int spread, int *devs) {
  int n = 0;
  const char *fv = getenv("MPI_CHECK_DEVICE");
  int first = fv ? atoi(fv) : 0;
  for (int r = 0; r < ci.size; r++) {
    struct strata_cluster_rank ri;
    MUST(strata_cluster_rank_info(cl, r, &ri));
    for (int k = first; k < ri.device_count && n < 256; k++)
      if (!spread || k == first)
        devs[n++] = ri.first_device + k;
  }
  return n;
}

static int cmd_collectives(void) {
  int devs[256];
  int n = collectives(0, devs);
  struct group g;
  group_new(&g, devs, n);
  static const size_t counts[] = {1, 3, 1000, 262147};
  uint64_t h_repeat = 0;
  /* bfloat16 reductions run where every member's backend has them: CUDA's only through NCCL so far */
  struct strata_cluster_comm_info gi;
  MUST(strata_cluster_comm_info(g.cc, &gi));
  int bf16_reduce = 1;
  for (int m = 0; m < n && !gi.nccl; m++) {
    struct strata_cluster_device d;
    MUST(strata_cluster_device(cl, devs[m], &d));
    if (strcmp(d.info.backend, "cuda") == 0)
      bf16_reduce = 0;
  }
  for (size_t ci_ = 0; ci_ < sizeof counts / sizeof counts[0]; ci_++) {
    size_t count = counts[ci_];
    float *want = malloc(count * 4 * (size_t)n);
    char what[128];
    group_buffers(&g, count * 4 * (size_t)n, count * 4 * (size_t)n);
    /* all-reduce: sum, max, avg of float32, sum of int32 */
    for (int op = 0; op < 4; op++) {
      int dtype = op == 3 ? STRATA_INT32 : STRATA_FLOAT32, rop = op == 3 ? STRATA_SUM : op;
      for (int i = 0; i < g.nlocal; i++)
        upload(&g, i, ival, count, dtype == STRATA_INT32);
      for (size_t k = 0; k < count; k++) {
        double acc = rop == STRATA_MAX ? -1e30 : 0;
        for (int m = 0; m < n; m++)
          acc = rop == STRATA_MAX ? fmax(acc, ival(m, k)) : acc + ival(m, k);
        if (dtype == STRATA_INT32) {
          int32_t iv = (int32_t)acc;
          memcpy(&want[k], &iv, 4);
        } else {
          want[k] = rop == STRATA_AVG ? (float)acc / (float)n : (float)acc;
        }
      }
      MUST(strata_cluster_allreduce(g.cc, g.q, g.s, g.r, count, dtype, rop));
      snprintf(what, sizeof what, "allreduce %s %s of %zu", strata_redop_name(rop), strata_dtype_name(dtype), count);
      for (int i = 0; i < g.nlocal; i++)
        check(&g, i, want, count, what);
    }
    /* all-gather */
    for (int i = 0; i < g.nlocal; i++)
      upload(&g, i, ival, count, 0);
    for (int m = 0; m < n; m++)
      for (size_t k = 0; k < count; k++)
        want[(size_t)m * count + k] = ival(m, k);
    MUST(strata_cluster_allgather(g.cc, g.q, g.s, g.r, count, STRATA_FLOAT32));
    snprintf(what, sizeof what, "allgather of %zu", count);
    for (int i = 0; i < g.nlocal; i++)
      check(&g, i, want, count * (size_t)n, what);
    /* reduce-scatter: member m gets block m of the sum */
    for (int i = 0; i < g.nlocal; i++)
      upload(&g, i, ival, count * (size_t)n, 0);
    MUST(strata_cluster_reducescatter(g.cc, g.q, g.s, g.r, count, STRATA_FLOAT32, STRATA_SUM));
    snprintf(what, sizeof what, "reducescatter of %zu", count);
    for (int i = 0; i < g.nlocal; i++) {
      int mine = g.members[i];
      for (size_t k = 0; k < count; k++) {
        double acc = 0;
        for (int m = 0; m < n; m++)
          acc += ival(m, (size_t)mine * count + k);
        want[k] = (float)acc;
      }
      check(&g, i, want, count, what);
    }
    /* broadcast from the last member */
    for (int i = 0; i < g.nlocal; i++)
      upload(&g, i, ival, count, 0);
    for (size_t k = 0; k < count; k++)
      want[k] = ival(n - 1, k);
    MUST(strata_cluster_broadcast(g.cc, g.q, g.s, g.r, count, STRATA_FLOAT32, n - 1));
    snprintf(what, sizeof what, "broadcast of %zu", count);
    for (int i = 0; i < g.nlocal; i++)
      check(&g, i, want, count, what);
    /* order-dependent values: every member and every repetition the same bits */
    for (int rep = 0; rep < 3; rep++) {
      for (int i = 0; i < g.nlocal; i++)
        upload(&g, i, rval, count, 0);
      MUST(strata_cluster_allreduce(g.cc, g.q, g.s, g.r, count, STRATA_FLOAT32, STRATA_SUM));
      float *first = malloc(count * 4);
      MUST(strata_buffer_download(g.q[0], g.rb[0], 0, first, count * 4));
      for (size_t k = 0; k < count; k++) {
        double acc = 0;
        for (int m = 0; m < n; m++)
          acc += rval(m, k);
        if (fabs(first[k] - acc) > 1e-3 * (1 + fabs(acc)) && !failures)
          fail("allreduce of order-dependent values at %zu: %g, the double-precision sum is %g", k, first[k], acc);
      }
      uint64_t h = 0;
      for (int i = 0; i < g.nlocal; i++)
        h = check(&g, i, first, count, "repeated allreduce (members differ)");
      if (ci_ + 1 == sizeof counts / sizeof counts[0]) {
        if (rep == 0)
          h_repeat = h;
        else if (h != h_repeat)
          fail("repeated allreduce: repetition %d has other bits", rep);
      }
      free(first);
    }
    collectives_bf16(&g, n, count, bf16_reduce);
    free(want);
  }
  /* the run's result, for the driver to compare across ranks and runs */
  printf("hash rank %d: %016llx\n", ci.rank, (unsigned long long)h_repeat);
  if (ci.rank == 0)
    printf("collectives: %d devices on %d ranks: allreduce (sum, max, avg, int32 sum, bfloat16), allgather, "
           "reducescatter, broadcast (float32, bfloat16) of 1 .. 262147 elements checked against the host%s\n",
           n, ci.size, bf16_reduce ? "" : " (bfloat16 reductions skipped: CUDA members outside NCCL have no bfloat16 REDUCE)");
  group_free(&g);
  return failures;
}

/* ---------------------------------------------------------------- path */

/* The path a group over every rank's devices (from MPI_CHECK_DEVICE) takes:
** MPI_CHECK_ALGORITHM (auto, ring, direct, nccl) is the algorithm asked for,
** on every rank or only on rank MPI_CHECK_ALGORITHM_RANK. Prints the path
** and its reason, or the refusal, one line per rank, for the driver to
** compare; with a group made, one all-reduce is checked against the host
** (not with MPI_CHECK_PATH_ONLY=1: the fake CUDA module's devices have no
** ops, so only its communicator across ranks can reduce). */
static int cmd_path(void) {
  int devs[256];
  int n = collectives(0, devs);
  struct strata_comm_options o;
  memset(&o, 0, sizeof o);
  const char *a = getenv("MPI_CHECK_ALGORITHM"), *ar = getenv("MPI_CHECK_ALGORITHM_RANK");
  if (a && (!ar || atoi(ar) == ci.rank))
    o.algorithm = !strcmp(a, "nccl") ? STRATA_COMM_NCCL : !strcmp(a, "ring") ? STRATA_COMM_RING
                  : !strcmp(a, "direct") ? STRATA_COMM_DIRECT : STRATA_COMM_AUTO;
  strata_cluster_comm_t cc = NULL;
  int rc = strata_cluster_comm_new(cl, devs, n, &o, &cc);
  if (rc) {
    printf("path rank %d: refused: %s: %s\n", ci.rank, strata_err_name(rc), strata_last_error());
    return failures;
  }
  struct strata_cluster_comm_info info;
  MUST(strata_cluster_comm_info(cc, &info));
  printf("path rank %d: %s\n", ci.rank, info.path);
  if (strncmp(info.path, info.nccl ? "nccl: " : "hierarchical: ", info.nccl ? 6 : 14) != 0)
    fail("strata_cluster_comm_info: nccl %d but the path says '%s'", info.nccl, info.path);
  if (info.size != n || info.ranks != ci.size)
    fail("strata_cluster_comm_info: %d members on %d ranks, expected %d on %d", info.size, info.ranks, n, ci.size);
  strata_cluster_comm_free(cc);
  const char *only = getenv("MPI_CHECK_PATH_ONLY");
  if (only && strcmp(only, "1") == 0)
    return failures;
  /* the same group again, through the collectives: all-reduce against the host's sum */
  struct group g;
  memset(&g, 0, sizeof g);
  MUST(strata_cluster_comm_new(cl, devs, n, &o, &g.cc));
  g.n = n;
  MUST(strata_cluster_comm_local(g.cc, &g.nlocal, g.members));
  for (int i = 0; i < g.nlocal; i++)
    MUST(strata_queue_new(devs[g.members[i]] - ci.first_device, &g.q[i]));
  size_t count = 4099;
  group_buffers(&g, count * 4, count * 4);
  for (int i = 0; i < g.nlocal; i++)
    upload(&g, i, ival, count, 0);
  float *want = malloc(count * 4);
  for (size_t k = 0; k < count; k++) {
    double acc = 0;
    for (int m = 0; m < n; m++)
      acc += ival(m, k);
    want[k] = (float)acc;
  }
  MUST(strata_cluster_allreduce(g.cc, g.q, g.s, g.r, count, STRATA_FLOAT32, STRATA_SUM));
  for (int i = 0; i < g.nlocal; i++)
    check(&g, i, want, count, "allreduce on the path taken");
  free(want);
  group_free(&g);
  if (!failures)
    printf("path rank %d: allreduce of %zu over %d members equals the host's sum\n", ci.rank, count, n);
  return failures;
}

/* ------------------------------------------------------------- failure */

/* Rank size-1 dies (MPI_CHECK_FAULT=kill) or stops answering (=stall) at the third
** all-reduce of a group over every rank's first device; the others must fail naming it. */
static int cmd_fault(const char *mode) {
  int devs[256];
  int n = collectives(strcmp(mode, "fault") != 0, devs);
  struct group g;
  group_new(&g, devs, n);
  size_t count = 1u << 20;
  group_buffers(&g, count * 4, count * 4);
  for (int it = 0; it < 6; it++) {
    if (it == 2 && ci.rank == ci.size - 1 && strcmp(mode, "fault") != 0) {
      fprintf(stderr, "mpi-check: rank %d: %s now (pid %ld)\n", ci.rank, mode, (long)getpid());
      if (strcmp(mode, "kill") == 0)
        raise(SIGKILL);
      sleep(600);
    }
    int rc = strata_cluster_allreduce(g.cc, g.q, g.s, g.r, count, STRATA_FLOAT32, STRATA_SUM);
    if (rc) {
      fprintf(stderr, "mpi-check: rank %d: allreduce %d failed (%s): %s\n", ci.rank, it, strata_err_name(rc),
              strata_last_error());
      strata_cluster_abort(cl, 4, NULL);
    }
  }
  fail("every allreduce succeeded although rank %d was to %s", ci.size - 1, mode);
  group_free(&g);
  return failures;
}

/* Rank 1 dies; rank 0's receive from it into local device MPI_CHECK_DEVICE must fail naming it. */
static int cmd_p2pkill(void) {
  const char *dv = getenv("MPI_CHECK_DEVICE");
  int dev = dv ? atoi(dv) : 0;
  if (ci.rank == 1) {
    fprintf(stderr, "mpi-check: rank 1: kill now (pid %ld)\n", (long)getpid());
    raise(SIGKILL);
  }
  if (ci.rank == 0) {
    strata_queue_t q;
    strata_buffer_t b;
    MUST(strata_queue_new(dev, &q));
    MUST(strata_buffer_new(dev, 1u << 20, &b));
    int rc = strata_cluster_recv(cl, 1, 5, q, strata_mem(b, 0), 1u << 20);
    fprintf(stderr, "mpi-check: rank 0: receive failed (%s): %s\n", strata_err_name(rc), strata_last_error());
    strata_cluster_abort(cl, 4, NULL);
  }
  sleep(60);
  return failures;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: mpi-check view|p2p|collectives|path|mismatch|kill|stall|fault|p2pkill\n");
    return 2;
  }
  const char *cmd = argv[1];
  /* fault: the last rank's first host virtual device fails its third op (the launcher says which rank is last) */
  const char *wr = getenv("OMPI_COMM_WORLD_RANK"), *ws = getenv("OMPI_COMM_WORLD_SIZE");
  if (strcmp(cmd, "fault") == 0 && wr && ws && atoi(wr) == atoi(ws) - 1)
    setenv("STRATA_HOST_FAULT", "device=0,op=3", 1);
  int rc = strata_cluster_init(&argc, &argv, NULL, &cl);
  if (rc) {
    fprintf(stderr, "mpi-check: %s\n", strata_last_error());
    return 3;
  }
  MUST(strata_cluster_info(cl, &ci));
  int bad;
  if (strcmp(cmd, "view") == 0)
    bad = cmd_view();
  else if (strcmp(cmd, "p2p") == 0)
    bad = cmd_p2p();
  else if (strcmp(cmd, "collectives") == 0)
    bad = cmd_collectives();
  else if (strcmp(cmd, "path") == 0)
    bad = cmd_path();
  else if (strcmp(cmd, "mismatch") == 0)
    bad = cmd_mismatch();
  else if (strcmp(cmd, "p2pkill") == 0)
    bad = cmd_p2pkill();
  else if (strcmp(cmd, "kill") == 0 || strcmp(cmd, "stall") == 0 || strcmp(cmd, "fault") == 0)
    bad = cmd_fault(cmd);
  else {
    fprintf(stderr, "mpi-check: unknown command '%s'\n", cmd);
    bad = 1;
  }
  fflush(stdout);
  if (bad)
    strata_cluster_abort(cl, 5, "checks failed");
  strata_cluster_free(cl);
  strata_shutdown();
  return 0;
}
