/* SPDX-License-Identifier: MIT */
/* test-comm.c — collectives: every collective, size and group of 1 to 8 host devices, PoCL and mixed groups, float32,
** int32 and bfloat16, against a host computation; one GPU's NCCL communicator; bit-identical repeats; enqueue order;
** bad calls; injected faults; ring order on real dumps. */
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>

#include "common.h"

static void setup(void) {
  setenv("STRATA_HOST_DEVICES", "8", 0);
  setenv("STRATA_BACKENDS", "host,opencl", 0);
}

TestSuite(comm, .init = setup, .timeout = 240);

enum { K_ALLREDUCE, K_ALLGATHER, K_REDUCESCATTER, K_BROADCAST, K_REDUCE };
static const char *const knames[] = {"allreduce", "allgather", "reducescatter", "broadcast", "reduce"};

/* The n devices of a group: host virtual devices 0..n-1, or an explicit list. */
static void host_group(int n, int *devs) {
  for (int i = 0; i < n; i++) {
    devs[i] = tc_find_device("host", i);
    cr_assert_geq(devs[i], 0, "host virtual device %d is missing (STRATA_HOST_DEVICES=8)", i);
  }
}

/* STRATA_HOST_NO_GATES=1 (tests/local.mk runs the suite so too): host devices have no gates, as CUDA devices outside
** NCCL have none, so a collective with a host member is done in the call, which reports its failure. */
static int no_gates(void) {
  const char *e = getenv("STRATA_HOST_NO_GATES");
  return e && strcmp(e, "1") == 0;
}

/* One member's per-rank all-reduce call (strata_allreduce_rank), its status and message. */
struct rank_call {
  strata_comm_t c;
  int rank;
  strata_queue_t q;
  strata_mem_t m;
  size_t count;
  int dtype;
  int entered, rc;
  char err[1024];
  pthread_t th;
};

static void *rank_call_main(void *p) {
  struct rank_call *a = p;
  __atomic_store_n(&a->entered, 1, __ATOMIC_SEQ_CST);
  a->rc = strata_allreduce_rank(a->c, a->rank, a->q, a->m, a->m, a->count, a->dtype, STRATA_SUM);
  snprintf(a->err, sizeof a->err, "%s", a->rc ? strata_last_error() : "");
  return NULL;
}

/* Make the n calls: with gates one after the other from this thread (each only enqueues); without, each from its own
** thread (each waits for its collective), started here and joined by rank_calls_join. */
static void rank_calls_start(struct rank_call *a, int n) {
  for (int i = 0; i < n; i++) {
    if (no_gates())
      cr_assert_eq(pthread_create(&a[i].th, NULL, rank_call_main, &a[i]), 0);
    else
      rank_call_main(&a[i]);
  }
  /* every thread inside its call, and a moment more for it to be posted */
  for (int i = 0; i < n && no_gates(); i++)
    while (!__atomic_load_n(&a[i].entered, __ATOMIC_SEQ_CST))
      usleep(1000);
  if (no_gates())
    usleep(200000);
}

static void rank_calls_join(struct rank_call *a, int n) {
  for (int i = 0; i < n && no_gates(); i++)
    pthread_join(a[i].th, NULL);
}

/* Each call failed, saying `words` (NULL: anything): without gates its own call said so, with gates its queue. */
static void rank_calls_failed(struct rank_call *a, int n, int status, const char *words, const char *what) {
  for (int i = 0; i < n; i++) {
    int rc = a[i].rc;
    const char *msg = a[i].err;
    if (!no_gates()) {
      cr_assert_eq(rc, STRATA_OK, "%s: rank %d's call only enqueues: %s", what, a[i].rank, msg);
      rc = strata_queue_finish(a[i].q);
      msg = strata_last_error();
    }
    cr_assert_neq(rc, STRATA_OK, "%s: rank %d did not fail", what, a[i].rank);
    if (status)
      cr_assert_eq(rc, status, "%s: rank %d: %s", what, a[i].rank, msg);
    if (words)
      cr_assert(strstr(msg, words), "%s: rank %d: %s", what, a[i].rank, msg);
  }
}

/* Elements each rank sends and receives for a collective of `count` over n. */
static size_t send_elems(int kind, size_t count, int n) { return kind == K_REDUCESCATTER ? count * n : count; }
static size_t recv_elems(int kind, size_t count, int n) { return kind == K_ALLGATHER ? count * n : count; }

/* Input of rank r: small integers (exact in any summation order) or random floats. */
static void make_input(float *x, size_t len, int r, int integers, uint32_t seed) {
  if (integers) {
    for (size_t i = 0; i < len; i++)
      x[i] = (float)((int)((i * 7 + (size_t)r * 13 + seed) % 17) - 8);
  } else {
    tc_fill(x, len, seed * 131 + (uint32_t)r, -1, 1);
  }
}

/* What rank r must hold afterwards, computed on the host in double. */
static void expected(int kind, int op, size_t count, int n, int r, int root, float *const *in, double *out) {
  size_t rl = recv_elems(kind, count, n);
  for (size_t i = 0; i < rl; i++) {
    if (kind == K_BROADCAST) {
      out[i] = in[root][i];
    } else if (kind == K_ALLGATHER) {
      out[i] = in[i / count][i % count];
    } else {
      size_t at = kind == K_REDUCESCATTER ? (size_t)r * count + i : i;
      double acc = op == STRATA_MAX ? -INFINITY : 0;
      for (int k = 0; k < n; k++)
        acc = op == STRATA_MAX ? fmax(acc, in[k][at]) : acc + in[k][at];
      out[i] = op == STRATA_AVG ? acc / n : acc;
    }
  }
}

static int call(int kind, strata_comm_t c, strata_queue_t *q, strata_mem_t *s, strata_mem_t *d, size_t count, int op,
                int root) {
  switch (kind) {
  case K_ALLREDUCE:
    return strata_allreduce(c, q, s, d, count, STRATA_FLOAT32, op);
  case K_ALLGATHER:
    return strata_allgather(c, q, s, d, count, STRATA_FLOAT32);
  case K_REDUCESCATTER:
    return strata_reducescatter(c, q, s, d, count, STRATA_FLOAT32, op);
  case K_REDUCE:
    return strata_reduce(c, q, s, d, count, STRATA_FLOAT32, op, root);
  default:
    return strata_broadcast(c, q, s, d, count, STRATA_FLOAT32, root);
  }
}

/*
** Run one collective over `devs` (n of them) with `algorithm`, in place or
** not, and compare with the host: exactly for integer inputs, within
** `rtol` (relative to the sum of magnitudes) for random ones. With `out`
** non-NULL, rank 0's result is copied there (for bit-for-bit repeats).
*/
static size_t test_chunk = 4096; /* ring chunk of check_collective; 0: the communicator's default */

static void check_collective(const int *devs, int n, int algorithm, int kind, int op, size_t count, int in_place,
                             int integers, float *out) {
  struct strata_comm_options o = {.algorithm = algorithm, .chunk_bytes = test_chunk, .timeout_s = 60};
  strata_comm_t c;
  OK(strata_comm_new(devs, n, &o, &c));
  size_t sl = send_elems(kind, count, n), rl = recv_elems(kind, count, n);
  size_t big = sl > rl ? sl : rl;
  strata_queue_t q[8];
  strata_buffer_t sb[8], rb[8];
  strata_mem_t s[8], d[8];
  float *in[8];
  float *got = malloc(sizeof *got * (rl ? rl : 1));
  double *want = malloc(sizeof *want * (rl ? rl : 1));
  int root = kind == K_REDUCE ? (int)(count % (size_t)n) : n - 1; /* (a reduce's chain starts anywhere) */
  for (int r = 0; r < n; r++) {
    OK(strata_queue_new(devs[r], &q[r]));
    in[r] = malloc(sizeof **in * (sl ? sl : 1));
    make_input(in[r], sl, r, integers, (uint32_t)count);
    OK(strata_buffer_new(devs[r], 4 * (big + 8), &sb[r]));
    if (in_place) {
      rb[r] = sb[r];
      /* the in-place layouts: all-gather sends block r of recv; reduce-scatter receives block r of send */
      size_t soff = kind == K_ALLGATHER ? (size_t)r * count : 0, roff = kind == K_REDUCESCATTER ? (size_t)r * count : 0;
      s[r] = strata_mem(sb[r], soff + 3);
      d[r] = strata_mem(rb[r], roff + 3);
    } else {
      OK(strata_buffer_new(devs[r], 4 * (big + 8), &rb[r]));
      s[r] = strata_mem(sb[r], 3);
      d[r] = strata_mem(rb[r], 5);
      float *junk = malloc(4 * (big + 8));
      for (size_t i = 0; i < big + 8; i++)
        junk[i] = 1e30f;
      OK(strata_buffer_upload(q[r], rb[r], 0, junk, 4 * (big + 8)));
      free(junk);
    }
    if (sl)
      OK(strata_buffer_upload(q[r], sb[r], s[r].off * 4, in[r], 4 * sl));
  }
  OK(call(kind, c, q, s, d, count, op, root));
  for (int r = 0; r < n; r++)
    OK(strata_queue_finish(q[r]));
  OK(strata_comm_finish(c));
  for (int r = 0; r < n; r++) {
    if (rl)
      OK(strata_buffer_download(q[r], rb[r], d[r].off * 4, got, 4 * rl));
    expected(kind, op, count, n, r, root, in, want);
    for (size_t i = 0; i < rl && kind == K_REDUCE && r != root; i++) /* not written: its input, or the junk */
      want[i] = in_place ? in[r][i] : 1e30f;
    for (size_t i = 0; i < rl; i++) {
      /* exact for integers (an average: to the rounding of sum x (1/n)); random
      ** floats: float32 sums of n terms in [-1, 1) are within n ulp of 1 */
      double tol = 0;
      if (kind == K_ALLREDUCE || kind == K_REDUCESCATTER || (kind == K_REDUCE && r == root)) {
        if (!integers)
          tol = 1.2e-7 * n * (op == STRATA_AVG ? 1.0 / n : 1.0) * 2 + 1.2e-7 * fabs(want[i]);
        else if (op == STRATA_AVG)
          tol = 2.4e-7 * fabs(want[i]);
      }
      cr_assert(fabs(got[i] - want[i]) <= tol,
                "%s %s, %d members, %s, %s, count %zu: rank %d element %zu is %.9g, expected %.9g", knames[kind],
                strata_redop_name(op), n, strata_comm_algorithm_name(algorithm), in_place ? "in place" : "out of place",
                count, r, i, got[i], want[i]);
    }
    if (out && r == 0 && rl)
      memcpy(out, got, 4 * rl);
    if (!in_place) { /* nothing outside recv[r] was written */
      float edge[5];
      OK(strata_buffer_download(q[r], rb[r], 0, edge, sizeof edge));
      for (int i = 0; i < 5; i++)
        cr_assert_eq(edge[i], 1e30f, "%s wrote before recv[%d]", knames[kind], r);
      if (rl + 5 < big + 8) {
        OK(strata_buffer_download(q[r], rb[r], 4 * (d[r].off + rl), edge, 4));
        cr_assert_eq(edge[0], 1e30f, "%s wrote past recv[%d]", knames[kind], r);
      }
    }
  }
  for (int r = 0; r < n; r++) {
    if (!in_place)
      strata_buffer_free(rb[r]);
    strata_buffer_free(sb[r]);
    strata_queue_free(q[r]);
    free(in[r]);
  }
  strata_comm_free(c);
  free(got);
  free(want);
}

static const size_t sizes[] = {0, 1, 2, 3, 7, 17, 1000, 4099, 65537};

/* Every collective, reduction and size, on groups of 1 to 8 host devices, ring and direct, both layouts. */
Test(comm, host_groups_exact) {
  int devs[8];
  host_group(8, devs);
  for (int n = 1; n <= 8; n++)
    for (int alg = STRATA_COMM_RING; alg <= STRATA_COMM_DIRECT; alg++)
      for (int kind = 0; kind < 5; kind++)
        for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
          for (int in_place = 0; in_place < 2; in_place++) {
            int op = kind == K_ALLREDUCE ? (int)(si % 3) : kind == K_REDUCESCATTER ? (int)((si + 1) % 3)
                     : kind == K_REDUCE ? (int)((si + 2) % 3) : 0;
            if (n > 4 && sizes[si] > 5000 && alg == STRATA_COMM_DIRECT)
              continue; /* direct is for small messages */
            check_collective(devs, n, alg, kind, op, sizes[si], in_place, 1, NULL);
          }
}

/* Several MB through the automatic choice (ring, chunks of 4 KiB), counts not divisible by the group. */
Test(comm, host_large_messages) {
  int devs[8];
  host_group(8, devs);
  int groups[] = {2, 3, 5, 8};
  for (int g = 0; g < 4; g++) {
    check_collective(devs, groups[g], STRATA_COMM_AUTO, K_ALLREDUCE, STRATA_SUM, (1u << 20) + 3, g % 2, 1, NULL);
    check_collective(devs, groups[g], STRATA_COMM_AUTO, K_REDUCESCATTER, STRATA_AVG, 300007, 0, 0, NULL);
    check_collective(devs, groups[g], STRATA_COMM_AUTO, K_ALLGATHER, STRATA_SUM, 300007, 1, 0, NULL);
    check_collective(devs, groups[g], STRATA_COMM_AUTO, K_BROADCAST, STRATA_SUM, (1u << 20) + 1, 0, 0, NULL);
  }
}

/* Random floats within tolerance, and the same bits on every repeat. */
Test(comm, random_floats_reproducible) {
  int devs[8];
  host_group(8, devs);
  size_t count = 100003;
  float *first = malloc(4 * count), *again = malloc(4 * count);
  for (int alg = STRATA_COMM_RING; alg <= STRATA_COMM_DIRECT; alg++) {
    check_collective(devs, 5, alg, K_ALLREDUCE, STRATA_SUM, count, 0, 0, first);
    for (int rep = 0; rep < 3; rep++) {
      check_collective(devs, 5, alg, K_ALLREDUCE, STRATA_SUM, count, rep % 2, 0, again);
      cr_assert_eq(memcmp(first, again, 4 * count), 0, "%s all-reduce differs between runs",
                   strata_comm_algorithm_name(alg));
    }
  }
  free(first);
  free(again);
}

/*
** Large chunks take the host's streaming paths (non-temporal stores for
** sums and copies of a MiB and more): the same additions in the same order,
** so the same bits as small chunks through the plain loops.
*/
Test(comm, host_streaming_paths_give_the_same_bits) {
  int devs[8];
  host_group(8, devs);
  size_t count = (4u << 20) + 5;
  float *small = malloc(4 * count), *large = malloc(4 * count);
  for (int n = 2; n <= 3; n++) {
    test_chunk = 4096;
    check_collective(devs, n, STRATA_COMM_RING, K_ALLREDUCE, STRATA_SUM, count, 0, 0, small);
    test_chunk = 0;
    check_collective(devs, n, STRATA_COMM_RING, K_ALLREDUCE, STRATA_SUM, count, 0, 0, large);
    cr_assert_eq(memcmp(small, large, 4 * count), 0, "%d members: streamed sums differ from the plain ones", n);
    check_collective(devs, n, STRATA_COMM_RING, K_ALLREDUCE, STRATA_SUM, count, 1, 1, NULL);
    check_collective(devs, n, STRATA_COMM_RING, K_ALLGATHER, STRATA_SUM, count / n, 0, 1, NULL);
  }
  test_chunk = 4096;
  free(small);
  free(large);
}

/* Two PoCL devices, and PoCL and host devices mixed in one ring. */
Test(comm, pocl_and_mixed_groups) {
  int p0 = tc_find_device("opencl", 0), p1 = tc_find_device("opencl", 1);
  if (p0 < 0 || p1 < 0)
    cr_skip_test("two OpenCL devices are needed (POCL_DEVICES=\"pthread pthread\")");
  int h0 = tc_find_device("host", 0), h1 = tc_find_device("host", 1);
  int pocl[2] = {p0, p1}, mixed[4] = {p0, h0, p1, h1};
  for (int kind = 0; kind < 5; kind++)
    for (int alg = STRATA_COMM_RING; alg <= STRATA_COMM_DIRECT; alg++) {
      int op = kind == K_ALLREDUCE ? STRATA_SUM : STRATA_MAX;
      check_collective(pocl, 2, alg, kind, op, 5003, 0, 1, NULL);
      check_collective(pocl, 2, alg, kind, op, 1, 1, 1, NULL);
      check_collective(mixed, 4, alg, kind, op, 5003, alg == STRATA_COMM_RING, 1, NULL);
      check_collective(mixed, 3, alg, kind, STRATA_AVG, 777, 0, 0, NULL);
    }
  check_collective(mixed, 4, STRATA_COMM_AUTO, K_ALLREDUCE, STRATA_SUM, 400009, 1, 1, NULL);
}

/* A GPU with host devices in one ring, every kind and algorithm, against the host's reference (tests/gpu/run;
** elsewhere skipped, saying why); with two GPUs, the two alone (NCCL where it loads, else the ring). */
Test(comm, cuda_and_host_groups) {
  char why[512];
  TC_NEED_CUDA(tc_cuda_why(why, sizeof why));
  int c0 = tc_find_device("cuda", 0), c1 = tc_find_device("cuda", 1);
  int h0 = tc_find_device("host", 0), h1 = tc_find_device("host", 1);
  cr_assert(c0 >= 0 && h1 >= 0, "needs a CUDA device and 2 host devices");
  int mixed[3] = {h0, c0, h1};
  for (int kind = 0; kind < 5; kind++)
    for (int alg = STRATA_COMM_RING; alg <= STRATA_COMM_DIRECT; alg++) {
      int op = kind == K_ALLREDUCE ? STRATA_SUM : STRATA_MAX;
      check_collective(mixed, 2, alg, kind, op, 5003, 0, 1, NULL);
      check_collective(mixed, 3, alg, kind, op, 5003, alg == STRATA_COMM_RING, 1, NULL);
      check_collective(mixed, 3, alg, kind, STRATA_AVG, 777, 0, 0, NULL);
    }
  check_collective(mixed, 3, STRATA_COMM_AUTO, K_ALLREDUCE, STRATA_SUM, 400009, 1, 1, NULL);
  if (c1 >= 0) {
    int gpus[2] = {c0, c1};
    for (int kind = 0; kind < 5; kind++)
      check_collective(gpus, 2, STRATA_COMM_AUTO, kind, kind == K_ALLREDUCE ? STRATA_SUM : STRATA_MAX, 400009, 1, 1,
                       NULL);
  }
}

/* One GPU alone (the GPU machine has one): a one-member NCCL communicator, as every all-CUDA group gets it, runs every
** collective — float32 (every reduction, both layouts), bfloat16 and a barrier — against the host's reference, which
** for one member is its input bit for bit (an average too). Skips, saying why, without a CUDA device or, unless
** STRATA_TEST_REQUIRE_NCCL=1 (tests/gpu/run sets it where it found libnccl), without NCCL. */
Test(comm, one_gpu_nccl_every_collective) {
  char why[512];
  TC_NEED_CUDA(tc_cuda_why(why, sizeof why));
  int c0 = tc_find_device("cuda", 0);
  cr_assert_geq(c0, 0);
  struct strata_comm_options o = {.algorithm = STRATA_COMM_NCCL};
  strata_comm_t c;
  int rc = strata_comm_new(&c0, 1, &o, &c);
  if (rc == STRATA_ERR_UNSUPPORTED) {
    const char *need = getenv("STRATA_TEST_REQUIRE_NCCL");
    if (need && strcmp(need, "1") == 0)
      cr_assert_fail("STRATA_TEST_REQUIRE_NCCL=1 but NCCL is not available: %s", strata_last_error());
    cr_skip_test("NCCL is not available: %s", strata_last_error());
  }
  OK(rc);
  struct strata_comm_info info;
  OK(strata_comm_info(c, &info));
  cr_assert_eq(info.algorithm, STRATA_COMM_NCCL, "asked for NCCL, got %s", strata_comm_algorithm_name(info.algorithm));
  strata_queue_t q;
  OK(strata_queue_new(c0, &q));
  for (int i = 0; i < 3; i++)
    OK(strata_comm_barrier(c, &q));
  OK(strata_queue_finish(q));
  strata_queue_free(q);
  strata_comm_free(c);
  /* AUTO takes NCCL for an all-CUDA group, one member included */
  OK(strata_comm_new(&c0, 1, NULL, &c));
  OK(strata_comm_info(c, &info));
  cr_assert_eq(info.algorithm, STRATA_COMM_NCCL, "auto over one GPU: %s", strata_comm_algorithm_name(info.algorithm));
  strata_comm_free(c);
  static const size_t counts[] = {1, 4099, 400009};
  for (int kind = 0; kind < 5; kind++)
    for (size_t i = 0; i < sizeof counts / sizeof *counts; i++)
      for (int op = STRATA_SUM; op <= STRATA_MAX; op++) {
        if (op != STRATA_SUM && kind != K_ALLREDUCE && kind != K_REDUCESCATTER && kind != K_REDUCE)
          continue;
        check_collective(&c0, 1, STRATA_COMM_NCCL, kind, op, counts[i], 0, 0, NULL);
        check_collective(&c0, 1, STRATA_COMM_NCCL, kind, op, counts[i], 1, 0, NULL);
      }
}

/* int32 sums (wrapping) and maxima. */
Test(comm, int32_sum_and_max) {
  int devs[8];
  host_group(4, devs);
  int p0 = tc_find_device("opencl", 0);
  if (p0 >= 0)
    devs[3] = p0;
  strata_comm_t c;
  struct strata_comm_options o = {.chunk_bytes = 64};
  OK(strata_comm_new(devs, 4, &o, &c));
  size_t count = 1001;
  strata_queue_t q[4];
  strata_buffer_t b[4];
  strata_mem_t m[4];
  int32_t *in[4];
  for (int r = 0; r < 4; r++) {
    OK(strata_queue_new(devs[r], &q[r]));
    OK(strata_buffer_new(devs[r], 4 * count, &b[r]));
    m[r] = strata_mem(b[r], 0);
    in[r] = malloc(4 * count);
    for (size_t i = 0; i < count; i++)
      in[r][i] = (int32_t)((i * 2654435761u + (unsigned)r * 40503u) & 0x7fffffff) - (r == 2 ? 0x40000000 : 0);
  }
  for (int op = STRATA_SUM; op <= STRATA_MAX; op += 2)
    for (int alg = STRATA_COMM_RING; alg <= STRATA_COMM_DIRECT; alg++) {
      struct strata_comm_options oa = {.algorithm = alg, .chunk_bytes = 64};
      strata_comm_t ca;
      OK(strata_comm_new(devs, 4, &oa, &ca));
      for (int r = 0; r < 4; r++)
        OK(strata_buffer_write(q[r], b[r], 0, in[r], 4 * count));
      OK(strata_allreduce(ca, q, m, m, count, STRATA_INT32, op));
      int32_t *got = malloc(4 * count);
      for (int r = 0; r < 4; r++) {
        OK(strata_buffer_download(q[r], b[r], 0, got, 4 * count));
        for (size_t i = 0; i < count; i++) {
          uint32_t sum = 0;
          int32_t mx = INT32_MIN;
          for (int k = 0; k < 4; k++) {
            sum += (uint32_t)in[k][i];
            mx = in[k][i] > mx ? in[k][i] : mx;
          }
          int32_t want = op == STRATA_MAX ? mx : (int32_t)sum;
          cr_assert_eq(got[i], want, "int32 %s (%s) rank %d element %zu: %d, expected %d", strata_redop_name(op),
                       strata_comm_algorithm_name(alg), r, i, got[i], want);
        }
      }
      free(got);
      OK(strata_comm_finish(ca));
      strata_comm_free(ca);
    }
  cr_assert_eq(strata_allreduce(c, q, m, m, count, STRATA_INT32, STRATA_AVG), STRATA_ERR_UNSUPPORTED);
  for (int r = 0; r < 4; r++) {
    strata_buffer_free(b[r]);
    strata_queue_free(q[r]);
    free(in[r]);
  }
  strata_comm_free(c);
}

/*
** Enqueued, not blocking: work before the collective on a member's queue
** produces its input, work after it reads the result; other queues run
** meanwhile.
*/
Test(comm, ordered_on_member_queues) {
  int devs[8];
  host_group(3, devs);
  strata_comm_t c;
  OK(strata_comm_new(devs, 3, NULL, &c));
  struct strata_comm_info info;
  OK(strata_comm_info(c, &info));
  cr_assert_eq(info.size, 3);
  if (no_gates())
    cr_assert(!info.asynchronous, "STRATA_HOST_NO_GATES=1: collectives wait in the call");
  else
    cr_assert(info.asynchronous, "host devices have gates: collectives must return before the data moved");
  size_t count = 200000;
  strata_queue_t q[3];
  strata_buffer_t b[3];
  strata_mem_t m[3];
  for (int r = 0; r < 3; r++) {
    OK(strata_queue_new(devs[r], &q[r]));
    OK(strata_buffer_new(devs[r], 4 * count, &b[r]));
    m[r] = strata_mem(b[r], 0);
  }
  for (int round = 1; round <= 4; round++) {
    for (int r = 0; r < 3; r++)
      OK(strata_fill(q[r], m[r], (float)(r + round), (int64_t)count));
    OK(strata_allreduce(c, q, m, m, count, STRATA_FLOAT32, STRATA_SUM));
    for (int r = 0; r < 3; r++)
      OK(strata_scale(q[r], m[r], 0.5f, (int64_t)count));
    float *got = malloc(4 * count);
    for (int r = 0; r < 3; r++) {
      OK(strata_buffer_download(q[r], b[r], 0, got, 4 * count));
      float want = 0.5f * (float)(0 + 1 + 2 + 3 * round);
      for (size_t i = 0; i < count; i += 997)
        cr_assert_eq(got[i], want, "round %d rank %d element %zu: %g, expected %g", round, r, i, got[i], want);
    }
    free(got);
  }
  OK(strata_comm_finish(c));
  for (int r = 0; r < 3; r++) {
    strata_buffer_free(b[r]);
    strata_queue_free(q[r]);
  }
  strata_comm_free(c);
}

/* Bad calls fail before anything moves: recv[] keeps its contents. */
Test(comm, bad_calls_move_nothing) {
  int devs[8];
  host_group(4, devs);
  int dup[2] = {devs[0], devs[0]};
  strata_comm_t c;
  cr_assert_eq(strata_comm_new(dup, 2, NULL, &c), STRATA_ERR_INVALID);
  cr_assert(strstr(strata_last_error(), "twice"), "%s", strata_last_error());
  cr_assert_eq(strata_comm_new(devs, 0, NULL, &c), STRATA_ERR_INVALID);
  int missing[2] = {devs[0], 9999};
  cr_assert_eq(strata_comm_new(missing, 2, NULL, &c), STRATA_ERR_NOT_FOUND);
  setenv("STRATA_COMM_ALGORITHM", "fastest", 1);
  cr_assert_eq(strata_comm_new(devs, 2, NULL, &c), STRATA_ERR_PARSE);
  unsetenv("STRATA_COMM_ALGORITHM");
  struct strata_comm_options nccl = {.algorithm = STRATA_COMM_NCCL};
  cr_assert_eq(strata_comm_new(devs, 2, &nccl, &c), STRATA_ERR_UNSUPPORTED, "host devices cannot use NCCL");

  OK(strata_comm_new(devs, 3, NULL, &c));
  strata_queue_t q[4];
  strata_buffer_t b[4];
  strata_mem_t m[4];
  for (int r = 0; r < 4; r++) {
    OK(strata_queue_new(devs[r], &q[r]));
    OK(strata_buffer_new(devs[r], 4 * 64, &b[r]));
    m[r] = strata_mem(b[r], 0);
    OK(strata_fill(q[r], m[r], 42.0f, 64));
  }
  /* a buffer on a device outside the group */
  strata_mem_t wrong[3] = {m[0], m[3], m[2]};
  cr_assert_eq(strata_allreduce(c, q, wrong, wrong, 64, STRATA_FLOAT32, STRATA_SUM), STRATA_ERR_DEVICE_MISMATCH);
  cr_assert(strstr(strata_last_error(), "send[1]") || strstr(strata_last_error(), "recv[1]"), "%s",
            strata_last_error());
  /* a queue of another member */
  strata_queue_t wq[3] = {q[1], q[1], q[2]};
  cr_assert_eq(strata_allreduce(c, wq, m, m, 64, STRATA_FLOAT32, STRATA_SUM), STRATA_ERR_DEVICE_MISMATCH);
  /* sizes: the buffers hold 64 elements */
  cr_assert_eq(strata_allreduce(c, q, m, m, 65, STRATA_FLOAT32, STRATA_SUM), STRATA_ERR_RANGE);
  cr_assert_eq(strata_allgather(c, q, m, m, 22, STRATA_FLOAT32), STRATA_ERR_RANGE, "3 x 22 > 64");
  cr_assert_eq(strata_reducescatter(c, q, m, m, 22, STRATA_FLOAT32, STRATA_SUM), STRATA_ERR_RANGE);
  /* overlapping, not in place */
  strata_mem_t shifted[3] = {strata_mem(b[0], 1), strata_mem(b[1], 1), strata_mem(b[2], 1)};
  cr_assert_eq(strata_allreduce(c, q, m, shifted, 32, STRATA_FLOAT32, STRATA_SUM), STRATA_ERR_INVALID);
  cr_assert_eq(strata_broadcast(c, q, m, m, 8, STRATA_FLOAT32, 3), STRATA_ERR_RANGE);
  cr_assert_eq(strata_allreduce(c, q, m, m, 8, 7, STRATA_SUM), STRATA_ERR_INVALID);
  cr_assert_eq(strata_allreduce(c, q, m, m, 8, STRATA_FLOAT32, 9), STRATA_ERR_INVALID);
  cr_assert_eq(strata_allreduce(c, q, NULL, m, 8, STRATA_FLOAT32, STRATA_SUM), STRATA_ERR_INVALID);
  OK(strata_comm_finish(c));
  float got[64];
  for (int r = 0; r < 3; r++) {
    OK(strata_buffer_download(q[r], b[r], 0, got, sizeof got));
    for (int i = 0; i < 64; i++)
      cr_assert_eq(got[i], 42.0f, "a refused call changed rank %d element %d", r, i);
  }
  for (int r = 0; r < 4; r++) {
    strata_buffer_free(b[r]);
    strata_queue_free(q[r]);
  }
  strata_comm_free(c);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/*
** A fault injected on one member mid-collective (its k-th copy or op)
** makes every member's queue and strata_comm_finish fail, naming the
** device and the collective, well before any timeout.
*/
static void fault_case(const char *spec, int algorithm, int kind) {
  strata_shutdown(); /* the host backend reads STRATA_HOST_FAULT, and counts calls, from its start */
  setenv("STRATA_HOST_FAULT", spec, 1);
  int devs[8];
  host_group(4, devs);
  struct strata_comm_options o = {.algorithm = algorithm, .chunk_bytes = 4096, .timeout_s = 30};
  strata_comm_t c;
  OK(strata_comm_new(devs, 4, &o, &c));
  size_t count = 40000;
  strata_queue_t q[4];
  strata_buffer_t b[4], r[4];
  strata_mem_t m[4], d[4];
  for (int k = 0; k < 4; k++) {
    OK(strata_queue_new(devs[k], &q[k]));
    OK(strata_buffer_new(devs[k], 4 * count * 4, &b[k]));
    OK(strata_buffer_new(devs[k], 4 * count * 4, &r[k]));
    m[k] = strata_mem(b[k], 0);
    d[k] = strata_mem(r[k], 0);
  }
  double t0 = now_s();
  int rc = call(kind, c, q, m, d, count, STRATA_SUM, 0);
  if (no_gates()) { /* the call waited: it says what failed where */
    cr_assert_neq(rc, STRATA_OK, "%s with %s: the call that waits did not fail", knames[kind], spec);
    for (int k = 0; k < 4; k++)
      OK(strata_queue_finish(q[k])); /* nothing of the collective ran on them */
  } else {
    cr_assert_eq(rc, STRATA_OK, "the call itself only enqueues: %s", strata_last_error());
    for (int k = 0; k < 4; k++) {
      int qrc = strata_queue_finish(q[k]);
      cr_assert_neq(qrc, STRATA_OK, "%s with %s: member %d's queue did not report the failure", knames[kind], spec,
                    k);
      cr_assert(strstr(strata_last_error(), "device"), "member %d: %s", k, strata_last_error());
    }
    rc = strata_comm_finish(c);
    cr_assert_neq(rc, STRATA_OK);
  }
  const char *msg = strata_last_error();
  cr_assert(strstr(msg, knames[kind]) && strstr(msg, "injected fault"), "%s", msg);
  char label[64];
  snprintf(label, sizeof label, "device %d", devs[1]);
  cr_assert(strstr(msg, label), "the message names %s: %s", label, msg);
  cr_assert_lt(now_s() - t0, 20.0, "failing took %.1f s", now_s() - t0);
  /* the communicator still works once the device does */
  unsetenv("STRATA_HOST_FAULT");
  for (int k = 0; k < 4; k++)
    OK(strata_fill(q[k], m[k], 1.0f, (int64_t)count));
  OK(strata_allreduce(c, q, m, m, count, STRATA_FLOAT32, STRATA_SUM));
  OK(strata_comm_finish(c));
  float v;
  OK(strata_buffer_download(q[3], b[3], 4 * 123, &v, 4));
  cr_assert_eq(v, 4.0f);
  for (int k = 0; k < 4; k++) {
    strata_buffer_free(b[k]);
    strata_buffer_free(r[k]);
    strata_queue_free(q[k]);
  }
  strata_comm_free(c);
  strata_shutdown();
}

Test(comm, fault_on_one_member_stops_all) {
  /* host virtual device 1 is global device devs[1]; its copies and ops are counted from its creation */
  int devs[8];
  host_group(4, devs);
  char spec[64];
  int local = devs[1] - devs[0];
  /* host devices reduce from their peers' memory without copying, so the
  ** ring's reductions fail through an op, its gathers through a copy */
  static const struct {
    const char *what;
    int alg, kind;
  } cases[] = {
      {"copy=3", STRATA_COMM_RING, K_ALLREDUCE},      {"op=2", STRATA_COMM_RING, K_ALLREDUCE},
      {"op=5", STRATA_COMM_RING, K_REDUCESCATTER},    {"copy=3", STRATA_COMM_RING, K_ALLGATHER},
      {"copy=2", STRATA_COMM_RING, K_BROADCAST},      {"copy=1", STRATA_COMM_DIRECT, K_ALLREDUCE},
      {"op=1", STRATA_COMM_DIRECT, K_REDUCESCATTER},  {"copy=2", STRATA_COMM_DIRECT, K_ALLGATHER},
      {"copy=1", STRATA_COMM_DIRECT, K_BROADCAST},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    snprintf(spec, sizeof spec, "device=%d,%s", local, cases[i].what);
    fault_case(spec, cases[i].alg, cases[i].kind);
  }
}

/* ----------------------------------------------------------------- rings on real dumps */

static strata_topology_t load_dump(const char *name) {
  static char p[4096];
  struct stat st;
  snprintf(p, sizeof p, "%s/%s", STRATA_TEST_TOPOLOGIES_DIR, name);
  cr_assert_eq(stat(p, &st), 0, "%s is missing: the real hwloc dumps are fixtures of the tree (tests/fixtures/topologies)",
               p);
  strata_topology_t t = NULL;
  OK(strata_topology_load(p, &t));
  return t;
}

/* The kind of each hop of `order` (n GPUs). */
static void hop_kinds(strata_topology_t t, const int *order, int n, int *kinds) {
  for (int i = 0; i < n; i++) {
    struct strata_link l;
    OK(strata_topology_link(t, order[i], order[(i + 1) % n], &l));
    kinds[i] = l.kind;
  }
}

static int gpu_count(strata_topology_t t) {
  int n;
  OK(strata_topology_gpu_count(t, &n));
  return n;
}

/* DGX-2: 16 V100 on NVSwitch (SOURCES.md): every hop of the ring is NVLink through the switches. */
Test(comm, ring_dgx2_all_nvswitch) {
  strata_topology_t t = load_dump("nvidia-dgx2-v100-16gpu-nvswitch.xml");
  int n = gpu_count(t), order[16], kinds[16];
  cr_assert_eq(n, 16);
  double bn;
  OK(strata_topology_ring(t, NULL, 0, order, &bn));
  hop_kinds(t, order, n, kinds);
  for (int i = 0; i < n; i++)
    cr_assert_eq(kinds[i], STRATA_PATH_NVLINK, "hop %d (%d -> %d) is %s", i, order[i], order[(i + 1) % n],
                 strata_path_kind_name(kinds[i]));
  cr_assert_gt(bn, 100.0, "NVSwitch ring bottleneck %g GB/s", bn);
  strata_topology_free(t);
}

/* Dell XE8640: 4 H100 SXM, NVLink between every pair (SOURCES.md). */
Test(comm, ring_h100_all_nvlink) {
  strata_topology_t t = load_dump("dell-xe8640-h100-4gpu-nvlink.xml");
  int order[4], kinds[4];
  cr_assert_eq(gpu_count(t), 4);
  double bn;
  OK(strata_topology_ring(t, NULL, 0, order, &bn));
  hop_kinds(t, order, 4, kinds);
  for (int i = 0; i < 4; i++)
    cr_assert_eq(kinds[i], STRATA_PATH_NVLINK, "hop %d is %s", i, strata_path_kind_name(kinds[i]));
  cr_assert_gt(bn, 100.0);
  strata_topology_free(t);
}

/*
** AWS g4dn.metal: 8 T4 in pairs under PCIe switches / host bridges, 4 per
** socket (SOURCES.md). A good ring visits each pair in one go: 4 hops stay
** inside a pair, 4 leave one, so each pair's boundary is crossed twice;
** and it crosses between the sockets only twice.
*/
Test(comm, ring_t4_fewest_boundary_crossings) {
  strata_topology_t t = load_dump("aws-g4dn-metal-t4-8gpu-pcie.xml");
  int n = gpu_count(t), order[8], kinds[8];
  cr_assert_eq(n, 8);
  OK(strata_topology_ring(t, NULL, 0, order, NULL));
  hop_kinds(t, order, n, kinds);
  /* the pairs are the topology's islands */
  int island[8];
  for (int g = 0; g < 8; g++)
    OK(strata_topology_gpu_island(t, g, &island[g]));
  int inside = 0, sys = 0, crossings[8] = {0};
  for (int i = 0; i < n; i++) {
    int a = order[i], b = order[(i + 1) % n];
    if (island[a] == island[b])
      inside++;
    else {
      crossings[island[a]]++;
      crossings[island[b]]++;
    }
    sys += kinds[i] == STRATA_PATH_SYS;
  }
  cr_assert_eq(inside, 4, "hops inside a pair: %d", inside);
  for (int g = 0; g < 8; g++)
    cr_assert_eq(crossings[island[g]], 2, "pair of GPU %d is crossed %d times", g, crossings[island[g]]);
  cr_assert_eq(sys, 2, "the ring crosses the sockets %d times", sys);
  strata_topology_free(t);
}

/* Threadripper with a GTX 1070 and a Vega FE (SOURCES.md): two GPUs, a ring of two over the host bridge side. */
Test(comm, ring_mixed_vendor_pair) {
  strata_topology_t t = load_dump("mixed-threadripper-gtx1070-vega-fe.xml");
  cr_assert_eq(gpu_count(t), 2);
  int order[2], kinds[2];
  double bn;
  OK(strata_topology_ring(t, NULL, 0, order, &bn));
  cr_assert(order[0] == 0 && order[1] == 1);
  hop_kinds(t, order, 2, kinds);
  cr_assert(kinds[0] >= STRATA_PATH_PHB && kinds[0] != STRATA_PATH_NET,
            "the two cards share no switch or NVLink: %s", strata_path_kind_name(kinds[0]));
  cr_assert_gt(bn, 0.0);
  strata_topology_free(t);
}

/* The ring over an explicit subset starts with its first GPU and uses each once. */
Test(comm, ring_subset_and_bad_input) {
  strata_topology_t t = load_dump("aws-g4dn-metal-t4-8gpu-pcie.xml");
  int sub[4] = {6, 0, 7, 1}, order[4];
  OK(strata_topology_ring(t, sub, 4, order, NULL));
  cr_assert_eq(order[0], 6);
  int seen = 0;
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++)
      seen += order[i] == sub[j];
  cr_assert_eq(seen, 4);
  int twice[2] = {1, 1};
  cr_assert_eq(strata_topology_ring(t, twice, 2, order, NULL), STRATA_ERR_INVALID);
  int out_of_range[2] = {0, 99};
  cr_assert_neq(strata_topology_ring(t, out_of_range, 2, order, NULL), STRATA_OK);
  strata_topology_free(t);
}

/* ----------------------------------------------------------------- per-rank calls */

struct rank_arg {
  strata_comm_t c;
  int rank, dev, rounds;
  size_t count;
  int rc;
  float got;
};

/* One member's thread: fill, all-reduce, all-gather its rank, read back. */
static void *rank_main(void *p) {
  struct rank_arg *a = p;
  strata_queue_t q;
  strata_buffer_t b, g;
  a->rc = strata_queue_new(a->dev, &q);
  if (!a->rc)
    a->rc = strata_buffer_new(a->dev, 4 * a->count, &b);
  if (!a->rc)
    a->rc = strata_buffer_new(a->dev, 4 * 8, &g);
  for (int k = 0; k < a->rounds && !a->rc; k++) {
    a->rc = strata_fill(q, strata_mem(b, 0), (float)(a->rank + k), (int64_t)a->count);
    if (!a->rc)
      a->rc = strata_allreduce_rank(a->c, a->rank, q, strata_mem(b, 0), strata_mem(b, 0), a->count, STRATA_FLOAT32,
                                    STRATA_SUM);
    if (!a->rc)
      a->rc = strata_fill(q, strata_mem(g, a->rank), (float)(10 * a->rank), 1);
    if (!a->rc)
      a->rc = strata_allgather_rank(a->c, a->rank, q, strata_mem(g, a->rank), strata_mem(g, 0), 1, STRATA_FLOAT32);
    if (!a->rc)
      a->rc = strata_queue_finish(q);
  }
  float v[8] = {0};
  if (!a->rc)
    a->rc = strata_buffer_download(q, b, 4 * (a->count - 1), &a->got, 4);
  if (!a->rc)
    a->rc = strata_buffer_download(q, g, 0, v, sizeof v);
  for (int r = 0; r < 4 && !a->rc; r++)
    if (v[r] != 10.0f * r)
      a->rc = -100 - r;
  strata_buffer_free(g);
  strata_buffer_free(b);
  strata_queue_free(q);
  return NULL;
}

/* Four threads, one per member, each calling for its own rank: the k-th calls meet. */
Test(comm, per_rank_calls_from_threads) {
  int devs[8];
  host_group(4, devs);
  for (int alg = STRATA_COMM_RING; alg <= STRATA_COMM_DIRECT; alg++) {
    struct strata_comm_options o = {.algorithm = alg, .chunk_bytes = 4096};
    strata_comm_t c;
    OK(strata_comm_new(devs, 4, &o, &c));
    pthread_t th[4];
    struct rank_arg a[4];
    for (int r = 0; r < 4; r++) {
      a[r] = (struct rank_arg){.c = c, .rank = r, .dev = devs[r], .rounds = 5, .count = 30001};
      cr_assert_eq(pthread_create(&th[r], NULL, rank_main, &a[r]), 0);
    }
    for (int r = 0; r < 4; r++) {
      pthread_join(th[r], NULL);
      cr_assert_eq(a[r].rc, STRATA_OK, "rank %d: %d", r, a[r].rc);
      cr_assert_eq(a[r].got, (float)(0 + 1 + 2 + 3 + 4 * 4), "rank %d: %g", r, a[r].got); /* last round k = 4 */
    }
    OK(strata_comm_finish(c));
    strata_comm_free(c);
  }
}

/* Calls that disagree fail on every member; a member that never calls is aborted, or times out. */
Test(comm, per_rank_mismatch_abort_and_timeout) {
  int devs[8];
  host_group(3, devs);
  struct strata_comm_options o = {.timeout_s = 1.0};
  strata_comm_t c;
  OK(strata_comm_new(devs, 3, &o, &c));
  strata_queue_t q[3];
  strata_buffer_t b[3];
  for (int r = 0; r < 3; r++) {
    OK(strata_queue_new(devs[r], &q[r]));
    OK(strata_buffer_new(devs[r], 4 * 100, &b[r]));
  }
  struct rank_call a[3];
  for (int r = 0; r < 3; r++)
    a[r] = (struct rank_call){.c = c, .rank = r, .q = q[r], .m = strata_mem(b[r], 0), .dtype = STRATA_FLOAT32};
  /* rank 2 asks for 99 elements where the others ask for 100 */
  for (int r = 0; r < 3; r++)
    a[r].count = r == 2 ? 99 : 100;
  rank_calls_start(a, 3);
  rank_calls_join(a, 3);
  rank_calls_failed(a, 3, STRATA_ERR_INVALID, "same calls in the same order", "mismatched calls");
  cr_assert_eq(strata_comm_finish(c), STRATA_ERR_INVALID);
  cr_assert(strstr(strata_last_error(), "same calls in the same order"), "%s", strata_last_error());

  /* ranks 0 and 1 call, rank 2 does not: an abort releases them at once */
  double t0 = now_s();
  for (int r = 0; r < 3; r++)
    a[r].count = 100;
  rank_calls_start(a, 2);
  strata_comm_abort(c, STRATA_ERR_BACKEND, "worker 2 failed");
  rank_calls_join(a, 2);
  rank_calls_failed(a, 2, 0, "worker 2 failed", "aborted");
  cr_assert_lt(now_s() - t0, 0.9, "the abort did not wait for the timeout");
  cr_assert_eq(strata_allreduce_rank(c, 2, q[2], strata_mem(b[2], 0), strata_mem(b[2], 0), 100, STRATA_FLOAT32,
                                     STRATA_SUM),
               STRATA_ERR_STATE, "rank 2's late call of the aborted collective");
  strata_comm_finish(c);

  /* rank 1 never calls: the others time out, naming it */
  t0 = now_s();
  struct rank_call two[2] = {a[0], a[2]};
  rank_calls_start(two, 2);
  rank_calls_join(two, 2);
  rank_calls_failed(two, 2, STRATA_ERR_TIMEOUT, "only 2 of the members", "a member that never calls");
  cr_assert_lt(now_s() - t0, 5.0);
  strata_comm_abort(c, 0, NULL);
  strata_comm_finish(c);
  for (int r = 0; r < 3; r++) {
    strata_buffer_free(b[r]);
    strata_queue_free(q[r]);
  }
  strata_comm_free(c);
}

/* ------------------------------------------------------------ bfloat16 */

/* bfloat16 <-> float32 as strata/ops.h states it: exact widening; rounding to nearest, ties to even. */
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

/* One reduction step as the REDUCE op does it: a float32 sum (or max) rounded once. */
static uint16_t bf_step(uint16_t a, uint16_t b, int op) {
  float x = bf_widen(a), y = bf_widen(b);
  return bf_round(op == STRATA_MAX ? fmaxf(x, y) : x + y);
}

/* Input of rank r: bfloat16 values of magnitudes 2^-2 .. 2^2, both signs, so that sums cancel and round. */
static void make_bf16(uint16_t *x, size_t len, int r, uint32_t seed) {
  float *f = malloc(sizeof *f * (len ? len : 1));
  tc_fill(f, len, seed * 977 + (uint32_t)r, -1, 1);
  for (size_t i = 0; i < len; i++)
    x[i] = bf_round(ldexpf(f[i], (int)((i + (size_t)r * 3) % 5) - 2));
  free(f);
}

/* The ring's segment (all-reduce) that element i of `count` over n lies in: as lib/comm/algorithms.c cuts it. */
static int ring_segment(size_t count, int n, size_t i) {
  size_t base = count / (size_t)n, rem = count % (size_t)n;
  for (int k = 0; k < n; k++) {
    size_t off = (size_t)k * base + ((size_t)k < rem ? (size_t)k : rem), len = base + ((size_t)k < rem ? 1 : 0);
    if (i >= off && i < off + len)
      return k;
  }
  return n - 1;
}

/*
** What member r of a bfloat16 all-reduce or reduce-scatter holds at element
** i, in the group's own order (rank order, no topology): direct reduces the
** ranks 0, 1, ..., n-1 one after the other; the ring starts segment j (the
** block of rank j) on rank j + 1 and adds ranks j + 2, ..., j last. Each
** step rounds once; an average scales the rounded sum and rounds again.
*/
static uint16_t bf_reference(int kind, int algo, int op, size_t count, int n, int r, size_t i,
                             uint16_t *const *in) {
  size_t at = kind == K_REDUCESCATTER ? (size_t)r * count + i : i;
  int first = 0;
  if (algo == STRATA_COMM_RING)
    first = ((kind == K_REDUCESCATTER ? r : ring_segment(count, n, i)) + 1) % n;
  int lop = op == STRATA_MAX ? STRATA_MAX : STRATA_SUM;
  uint16_t acc = in[first][at];
  for (int k = 1; k < n; k++)
    acc = bf_step(acc, in[(first + k) % n][at], lop);
  if (op == STRATA_AVG && n > 1)
    acc = bf_round(bf_widen(acc) * (1.0f / (float)n));
  return acc;
}

static int call_bf16(int kind, strata_comm_t c, strata_queue_t *q, strata_mem_t *s, strata_mem_t *d, size_t count,
                     int op, int root) {
  switch (kind) {
  case K_ALLREDUCE:
    return strata_allreduce(c, q, s, d, count, STRATA_BFLOAT16, op);
  case K_ALLGATHER:
    return strata_allgather(c, q, s, d, count, STRATA_BFLOAT16);
  case K_REDUCESCATTER:
    return strata_reducescatter(c, q, s, d, count, STRATA_BFLOAT16, op);
  default:
    return strata_broadcast(c, q, s, d, count, STRATA_BFLOAT16, root);
  }
}

/* chunk_bytes of the bfloat16 checks: 1 KiB = 512 elements, so large counts take many chunks a segment */
#define BF16_CHUNK 1024
#define BF16_DIRECT_MAX (32u << 10) /* the default direct_max_bytes: AUTO sends up to 16K bfloat16 elements direct */

/*
** One bfloat16 collective over `devs` (n of them), in place or not, at
** element offsets that are odd (byte offsets not 4-aligned). All-gather and
** broadcast must copy the bits; all-reduce and reduce-scatter must give
** the bits of the group's order (bf_reference) and lie within n - 1
** bfloat16 roundings of the exact sum: |got - sum| <= (n - 1) (2^-8 + 2^-23)
** sum |x|. Nothing outside recv is written. With `out`, rank 0's result.
** Returns the collective's status when it fails on a member (a backend
** without bfloat16 reductions), after checking the message names bfloat16.
*/
static int check_bf16(const int *devs, int n, int algorithm, int kind, int op, size_t count, int in_place,
                      uint16_t *out) {
  struct strata_comm_options o = {.algorithm = algorithm, .chunk_bytes = BF16_CHUNK, .timeout_s = 60};
  strata_comm_t c;
  OK(strata_comm_new(devs, n, &o, &c));
  size_t sl = send_elems(kind, count, n), rl = recv_elems(kind, count, n);
  size_t big = sl > rl ? sl : rl, room = big + 2 * (size_t)n + 16;
  int algo = n == 1 ? STRATA_COMM_DIRECT
             : algorithm == STRATA_COMM_AUTO ? (count * 2 <= BF16_DIRECT_MAX ? STRATA_COMM_DIRECT : STRATA_COMM_RING)
                                             : algorithm;
  strata_queue_t q[8];
  strata_buffer_t sb[8], rb[8];
  strata_mem_t s[8], d[8];
  uint16_t *in[8];
  uint16_t *got = malloc(2 * room);
  uint16_t *guard = malloc(2 * room);
  for (size_t i = 0; i < room; i++)
    guard[i] = 0x7f7f; /* a large finite bfloat16 no result can equal by chance */
  int root = kind == K_REDUCE ? (int)(count % (size_t)n) : n - 1; /* (a reduce's chain starts anywhere) */
  for (int r = 0; r < n; r++) {
    OK(strata_queue_new(devs[r], &q[r]));
    in[r] = malloc(2 * (sl ? sl : 1));
    make_bf16(in[r], sl, r, (uint32_t)count);
    OK(strata_buffer_new(devs[r], 2 * room, &sb[r]));
    OK(strata_buffer_upload(q[r], sb[r], 0, guard, 2 * room));
    if (in_place) {
      rb[r] = sb[r];
      size_t soff = kind == K_ALLGATHER ? (size_t)r * count : 0, roff = kind == K_REDUCESCATTER ? (size_t)r * count : 0;
      s[r] = strata_mem_typed(sb[r], soff + 3, STRATA_BFLOAT16);
      d[r] = strata_mem_typed(rb[r], roff + 3, STRATA_BFLOAT16);
    } else {
      OK(strata_buffer_new(devs[r], 2 * room, &rb[r]));
      OK(strata_buffer_upload(q[r], rb[r], 0, guard, 2 * room));
      s[r] = strata_mem_typed(sb[r], 3, STRATA_BFLOAT16);
      d[r] = strata_mem_typed(rb[r], 5, STRATA_BFLOAT16);
    }
    if (sl)
      OK(strata_buffer_upload(q[r], sb[r], 2 * s[r].off, in[r], 2 * sl));
  }
  int rc = call_bf16(kind, c, q, s, d, count, op, root);
  for (int r = 0; r < n; r++) {
    int qrc = strata_queue_finish(q[r]);
    rc = rc ? rc : qrc;
  }
  int frc = strata_comm_finish(c);
  rc = rc ? rc : frc;
  if (rc) {
    cr_assert(strstr(strata_last_error(), "bf16") || strstr(strata_last_error(), "bfloat16"),
              "a failed bfloat16 %s does not say why: %s", knames[kind], strata_last_error());
  } else {
    for (int r = 0; r < n; r++) {
      if (rl)
        OK(strata_buffer_download(q[r], rb[r], 2 * d[r].off, got, 2 * rl));
      for (size_t i = 0; i < rl; i++) {
        uint16_t want = kind == K_BROADCAST   ? in[root][i]
                        : kind == K_ALLGATHER ? in[i / count][i % count]
                                              : bf_reference(kind, algo, op, count, n, r, i, in);
        cr_assert_eq(got[i], want,
                     "bfloat16 %s %s, %d members, %s, %s, count %zu: rank %d element %zu is %#06x (%.6g), expected "
                     "%#06x (%.6g)",
                     knames[kind], strata_redop_name(op), n, strata_comm_algorithm_name(algo),
                     in_place ? "in place" : "out of place", count, r, i, got[i], bf_widen(got[i]), want,
                     bf_widen(want));
        if ((kind == K_ALLREDUCE || kind == K_REDUCESCATTER) && op == STRATA_SUM) {
          /* independent of the order: within n - 1 roundings of the exact sum */
          size_t at = kind == K_REDUCESCATTER ? (size_t)r * count + i : i;
          double exact = 0, mag = 0;
          for (int k = 0; k < n; k++) {
            exact += bf_widen(in[k][at]);
            mag += fabs(bf_widen(in[k][at]));
          }
          double tol = (n - 1) * (ldexp(1, -8) + ldexp(1, -23)) * mag;
          cr_assert(fabs(bf_widen(got[i]) - exact) <= tol, "bfloat16 sum rank %d element %zu: %.9g, exact %.9g", r,
                    i, bf_widen(got[i]), exact);
        }
      }
      if (out && r == 0 && rl)
        memcpy(out, got, 2 * rl);
      if (!in_place) { /* nothing outside recv[r] was written */
        OK(strata_buffer_download(q[r], rb[r], 0, got, 2 * room));
        for (size_t i = 0; i < room; i++)
          if (i < d[r].off || i >= d[r].off + rl)
            cr_assert_eq(got[i], 0x7f7f, "bfloat16 %s wrote element %zu of rank %d's buffer outside recv [%zu, %zu)",
                         knames[kind], i, r, d[r].off, d[r].off + rl);
      }
    }
  }
  for (int r = 0; r < n; r++) {
    if (!in_place)
      strata_buffer_free(rb[r]);
    strata_buffer_free(sb[r]);
    strata_queue_free(q[r]);
    free(in[r]);
  }
  strata_comm_free(c);
  free(got);
  free(guard);
  return rc;
}

/*
** bfloat16 on host devices: every collective for groups of 2 to 4, odd
** counts small (direct) and large (the ring, many 512-element chunks a
** segment), both layouts; sums in the group's order to the bit, maxima
** exact, copies bit for bit.
*/
Test(comm, bf16_host_groups) {
  int devs[8];
  host_group(4, devs);
  static const size_t counts[] = {1, 3, 7, 1001, 30011};
  for (int n = 2; n <= 4; n++)
    for (int alg = STRATA_COMM_RING; alg <= STRATA_COMM_DIRECT; alg++)
      for (int kind = 0; kind < 4; kind++)
        for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++)
          for (int in_place = 0; in_place < 2; in_place++) {
            int op = kind == K_ALLREDUCE ? (int)((ci + (size_t)in_place) % 3)
                     : kind == K_REDUCESCATTER ? (int)((ci + 1 + (size_t)in_place) % 3) : 0;
            OK(check_bf16(devs, n, alg, kind, op, counts[ci], in_place, NULL));
          }
}

/* The automatic choice counts bytes: 10001 bfloat16 elements (20 KB) go direct, 300007 take the ring. */
Test(comm, bf16_auto_sizes_in_bytes) {
  int devs[8];
  host_group(4, devs);
  for (int n = 2; n <= 4; n++) {
    OK(check_bf16(devs, n, STRATA_COMM_AUTO, K_ALLREDUCE, STRATA_SUM, 10001, n % 2, NULL));
    OK(check_bf16(devs, n, STRATA_COMM_AUTO, K_ALLREDUCE, STRATA_SUM, 300007, 0, NULL));
    OK(check_bf16(devs, n, STRATA_COMM_AUTO, K_REDUCESCATTER, STRATA_SUM, 100003, 1, NULL));
    OK(check_bf16(devs, n, STRATA_COMM_AUTO, K_ALLGATHER, STRATA_SUM, 100003, 0, NULL));
    OK(check_bf16(devs, n, STRATA_COMM_AUTO, K_BROADCAST, STRATA_SUM, 300007, 1, NULL));
  }
}

/* The same bits on every repeat, ring and direct, in place or not. */
Test(comm, bf16_reproducible) {
  int devs[8];
  host_group(4, devs);
  size_t count = 100003;
  uint16_t *first = malloc(2 * count), *again = malloc(2 * count);
  for (int alg = STRATA_COMM_RING; alg <= STRATA_COMM_DIRECT; alg++) {
    OK(check_bf16(devs, 3, alg, K_ALLREDUCE, STRATA_SUM, count, 0, first));
    for (int rep = 0; rep < 2; rep++) {
      OK(check_bf16(devs, 3, alg, K_ALLREDUCE, STRATA_SUM, count, rep % 2 == 0, again));
      cr_assert_eq(memcmp(first, again, 2 * count), 0, "bfloat16 %s all-reduce differs between runs",
                   strata_comm_algorithm_name(alg));
    }
  }
  free(first);
  free(again);
}

/*
** PoCL devices, alone and mixed with host devices: copies (all-gather,
** broadcast) need no kernel; reductions run the OpenCL backend's bfloat16
** REDUCE, and must give the bits of the host's (a build whose OpenCL backend
** lacks it fails the collective saying so, and the reductions are skipped).
*/
Test(comm, bf16_pocl_and_mixed_groups) {
  int p0 = tc_find_device("opencl", 0), p1 = tc_find_device("opencl", 1);
  if (p0 < 0 || p1 < 0)
    cr_skip_test("two OpenCL devices are needed (POCL_DEVICES=\"pthread pthread\")");
  int h0 = tc_find_device("host", 0), h1 = tc_find_device("host", 1);
  int pocl[2] = {p0, p1}, mixed[4] = {p0, h0, p1, h1};
  for (int alg = STRATA_COMM_RING; alg <= STRATA_COMM_DIRECT; alg++)
    for (int kind = K_ALLGATHER; kind <= K_BROADCAST; kind += 2) {
      OK(check_bf16(pocl, 2, alg, kind, STRATA_SUM, 5003, 0, NULL));
      OK(check_bf16(pocl, 2, alg, kind, STRATA_SUM, 1, 1, NULL));
      OK(check_bf16(mixed, 4, alg, kind, STRATA_SUM, 5003, alg == STRATA_COMM_RING, NULL));
      OK(check_bf16(mixed, 3, alg, kind, STRATA_SUM, 777, 0, NULL));
    }
  int rc = check_bf16(pocl, 2, STRATA_COMM_RING, K_ALLREDUCE, STRATA_SUM, 5003, 0, NULL);
  if (rc == STRATA_ERR_UNSUPPORTED) {
    fprintf(stderr, "bf16_pocl_and_mixed_groups: reductions skipped: %s\n", strata_last_error());
    cr_skip_test("the OpenCL backend has no bfloat16 REDUCE yet (copies checked)");
  }
  OK(rc);
  for (int alg = STRATA_COMM_RING; alg <= STRATA_COMM_DIRECT; alg++)
    for (int op = STRATA_SUM; op <= STRATA_MAX; op++) {
      OK(check_bf16(pocl, 2, alg, K_ALLREDUCE, op, 5003, 1, NULL));
      OK(check_bf16(mixed, 4, alg, K_ALLREDUCE, op, 5003, 0, NULL));
      OK(check_bf16(mixed, 3, alg, K_REDUCESCATTER, op, 777, 1, NULL));
    }
}

/* bfloat16 on one GPU's NCCL communicator (see one_gpu_nccl_every_collective): every kind and reduction, in place or
** not; a one-member result is the input's bits. Skips as that test does. */
Test(comm, bf16_one_gpu_nccl) {
  char why[512];
  TC_NEED_CUDA(tc_cuda_why(why, sizeof why));
  int c0 = tc_find_device("cuda", 0);
  struct strata_comm_options o = {.algorithm = STRATA_COMM_NCCL};
  strata_comm_t c;
  int rc = strata_comm_new(&c0, 1, &o, &c);
  if (rc == STRATA_ERR_UNSUPPORTED) {
    const char *need = getenv("STRATA_TEST_REQUIRE_NCCL");
    if (need && strcmp(need, "1") == 0)
      cr_assert_fail("STRATA_TEST_REQUIRE_NCCL=1 but NCCL is not available: %s", strata_last_error());
    cr_skip_test("NCCL is not available: %s", strata_last_error());
  }
  OK(rc);
  strata_comm_free(c);
  for (int kind = 0; kind < 4; kind++)
    for (int op = STRATA_SUM; op <= STRATA_MAX; op++)
      for (int in_place = 0; in_place <= 1; in_place++)
        if (op == STRATA_SUM || kind == K_ALLREDUCE || kind == K_REDUCESCATTER)
          OK(check_bf16(&c0, 1, STRATA_COMM_NCCL, kind, op, 5003, in_place, NULL));
}

/* Bad bfloat16 calls: operands of another type, members that disagree on the type; each says what is wrong. */
Test(comm, bf16_bad_calls) {
  int devs[8];
  host_group(3, devs);
  struct strata_comm_options o = {.timeout_s = 5};
  strata_comm_t c;
  OK(strata_comm_new(devs, 3, &o, &c));
  strata_queue_t q[3];
  strata_buffer_t b[3];
  strata_mem_t m[3], f32[3];
  uint16_t ones[64];
  for (int i = 0; i < 64; i++)
    ones[i] = 0x3f80; /* 1.0 */
  for (int r = 0; r < 3; r++) {
    OK(strata_queue_new(devs[r], &q[r]));
    OK(strata_buffer_new(devs[r], sizeof ones, &b[r]));
    OK(strata_buffer_upload(q[r], b[r], 0, ones, sizeof ones));
    m[r] = strata_mem_typed(b[r], 0, STRATA_BFLOAT16);
    f32[r] = strata_mem(b[r], 0);
  }
  /* a float32 operand in a bfloat16 collective, and the reverse */
  strata_mem_t one_wrong[3] = {m[0], f32[1], m[2]};
  cr_assert_eq(strata_allreduce(c, q, one_wrong, one_wrong, 8, STRATA_BFLOAT16, STRATA_SUM), STRATA_ERR_INVALID);
  cr_assert(strstr(strata_last_error(), "[1] is float32 but the collective moves bfloat16"), "%s",
            strata_last_error());
  cr_assert_eq(strata_allgather(c, q, m, m, 4, STRATA_FLOAT32), STRATA_ERR_INVALID);
  cr_assert(strstr(strata_last_error(), "is bfloat16 but the collective moves float32"), "%s", strata_last_error());
  /* bounds count bfloat16 elements: 64 of them fit, 65 do not */
  cr_assert_eq(strata_allreduce(c, q, m, m, 65, STRATA_BFLOAT16, STRATA_SUM), STRATA_ERR_RANGE);
  cr_assert(strstr(strata_last_error(), "of bfloat16"), "%s", strata_last_error());
  cr_assert_eq(strata_allgather(c, q, m, m, 22, STRATA_BFLOAT16), STRATA_ERR_RANGE, "3 x 22 > 64");
  OK(strata_comm_finish(c));
  uint16_t got[64];
  for (int r = 0; r < 3; r++) {
    OK(strata_buffer_download(q[r], b[r], 0, got, sizeof got));
    cr_assert_eq(memcmp(got, ones, sizeof ones), 0, "a refused call changed rank %d", r);
  }
  /* members that disagree on the type: the collective fails on every member, naming both */
  struct rank_call a[3];
  for (int r = 0; r < 3; r++)
    a[r] = (struct rank_call){.c = c, .rank = r, .q = q[r], .m = r == 1 ? f32[r] : m[r], .count = 16,
                              .dtype = r == 1 ? STRATA_FLOAT32 : STRATA_BFLOAT16};
  rank_calls_start(a, 3);
  rank_calls_join(a, 3);
  rank_calls_failed(a, 3, 0, NULL, "types that disagree");
  cr_assert_eq(strata_comm_finish(c), STRATA_ERR_INVALID);
  cr_assert(strstr(strata_last_error(), "float32") && strstr(strata_last_error(), "bfloat16"), "%s",
            strata_last_error());
  /* an average is the rounded sum scaled once: 3 x 1.0 / 3 = 1.0 */
  OK(strata_allreduce(c, q, m, m, 64, STRATA_BFLOAT16, STRATA_AVG));
  OK(strata_comm_finish(c));
  for (int r = 0; r < 3; r++) {
    OK(strata_buffer_download(q[r], b[r], 0, got, sizeof got));
    cr_assert_eq(memcmp(got, ones, sizeof ones), 0, "bfloat16 avg of ones on rank %d", r);
  }
  for (int r = 0; r < 3; r++) {
    strata_buffer_free(b[r]);
    strata_queue_free(q[r]);
  }
  strata_comm_free(c);
}

/* A reduce moves each member's input across the group once — half the bytes of an all-reduce of the same count on the
** ring, (n - 1) x count either way — as the communicator counts what its lanes read from other members. */
Test(comm, reduce_moves_half_an_allreduce) {
  int devs[8];
  host_group(8, devs);
  for (int n = 2; n <= 5; n++)
    for (int alg = STRATA_COMM_RING; alg <= STRATA_COMM_DIRECT; alg++) {
      const size_t count = 10007;
      struct strata_comm_options o = {.algorithm = alg, .chunk_bytes = 4096, .timeout_s = 60};
      strata_comm_t c;
      OK(strata_comm_new(devs, n, &o, &c));
      strata_queue_t q[8];
      strata_buffer_t b[8];
      strata_mem_t m[8];
      for (int r = 0; r < n; r++) {
        OK(strata_queue_new(devs[r], &q[r]));
        OK(strata_buffer_new(devs[r], 4 * count, &b[r]));
        m[r] = strata_mem(b[r], 0);
        OK(strata_fill(q[r], m[r], 1.0f, (int64_t)count));
      }
      struct strata_comm_info i0, i1, i2;
      OK(strata_comm_info(c, &i0));
      OK(strata_allreduce_sync(c, q, m, m, count, STRATA_FLOAT32, STRATA_SUM));
      OK(strata_comm_info(c, &i1));
      OK(strata_reduce(c, q, m, m, count, STRATA_FLOAT32, STRATA_SUM, n / 2));
      for (int r = 0; r < n; r++)
        OK(strata_queue_finish(q[r]));
      OK(strata_comm_finish(c));
      OK(strata_comm_info(c, &i2));
      const uint64_t all = i1.moved_bytes - i0.moved_bytes, red = i2.moved_bytes - i1.moved_bytes;
      cr_log_info("%d members, %s: all-reduce moved %llu bytes, reduce %llu", n, strata_comm_algorithm_name(alg),
                  (unsigned long long)all, (unsigned long long)red);
      cr_assert_eq(red, (uint64_t)(n - 1) * count * 4, "%d members, %s: the reduce moved %llu bytes", n,
                   strata_comm_algorithm_name(alg), (unsigned long long)red);
      if (alg == STRATA_COMM_RING)
        cr_assert_eq(all, 2 * red, "%d members: the ring all-reduce moved %llu bytes", n, (unsigned long long)all);
      else /* (direct: every member reads every other's input) */
        cr_assert_eq(all, (uint64_t)n * red, "%d members: direct all-reduce moved %llu bytes", n,
                     (unsigned long long)all);
      float v;
      OK(strata_buffer_download(q[n / 2], b[n / 2], 4 * (count - 1), &v, 4));
      cr_assert_eq(v, (float)(n * n), "the root holds %g, expected %d", v, n * n);
      for (int r = 0; r < n; r++) {
        strata_buffer_free(b[r]);
        strata_queue_free(q[r]);
      }
      strata_comm_free(c);
    }
}
