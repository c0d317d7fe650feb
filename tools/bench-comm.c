/* SPDX-License-Identifier: MIT */
/* bench-comm.c — strata-bench allreduce|allgather|reducescatter|broadcast: nccl-tests' columns over a strata communicator. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <strata/strata.h>

#include "bench-comm.h"
#include "cli.h"

/* Return the status of `expr` unless it is STRATA_OK. */
#define TRY_BENCH(expr)                                                                                                \
  do {                                                                                                                 \
    int rc_ = (expr);                                                                                                  \
    if (rc_)                                                                                                           \
      return rc_;                                                                                                      \
  } while (0)

#define MAX_SIZES 32
#define MAX_MEMBERS 64

enum { K_ALLREDUCE, K_ALLGATHER, K_REDUCESCATTER, K_BROADCAST };
static const char *const kinds[] = {"allreduce", "allgather", "reducescatter", "broadcast"};

struct comm_options {
  int kind;
  int devices[MAX_MEMBERS];
  int ndevices;                 /* 0: every device */
  size_t sizes[MAX_SIZES];      /* bytes, as nccl-tests counts them */
  int nsizes;
  int op, dtype, algorithm, root;
  int iters, warmup;            /* 0 iters: chosen by size */
  int json;
};

static void comm_usage(FILE *f) {
  fprintf(f,
          "Usage: strata-bench allreduce|allgather|reducescatter|broadcast [OPTIONS]\n"
          "Time a collective over a group of devices through a strata communicator and\n"
          "print nccl-tests' columns: size, count, type, redop, root, time, algbw, busbw\n"
          "and #wrong (elements differing from the host's result), out of place then in\n"
          "place, and the memcpy bandwidth of this machine measured in the same run.\n"
          "\n"
          "Options:\n"
          "  -g, --devices LIST  devices of the group, e.g. 0,1,2 (default: every device)\n"
          "  -s, --sizes LIST    message sizes in bytes, e.g. 1K,64M (default: 1K to 256M by 4)\n"
          "  -o, --op OP         sum, avg or max (default sum)\n"
          "  -t, --type T        float32, int32 or bf16 (default float32); also --dtype\n"
          "  -a, --algorithm A   auto, ring, direct or nccl (default auto)\n"
          "  -R, --root R        broadcast root rank (default 0)\n"
          "  -n, --iters N       timed iterations per size (default: by size, 4 to 50)\n"
          "  -w, --warmup N      untimed iterations first (default 2)\n"
          "      --json          one JSON object per line instead of the table\n"
          "  -h, --help          this help\n"
          "\n"
          "Sizes: all-reduce and broadcast count one rank's buffer; all-gather its\n"
          "output, reduce-scatter its input (size x count elements), as nccl-tests do.\n"
          "busbw = algbw x 2(n-1)/n for all-reduce, (n-1)/n for all-gather and\n"
          "reduce-scatter, 1 for broadcast (nccl-tests' doc/PERFORMANCE.md).\n"
          "bf16 reductions round each step (n-1 roundings): #wrong counts results\n"
          "further than (n-1) x 2^-8 of the exact sum (one more 2^-8 for avg).\n"
          "\n"
          "Exit status: 0 on success, 1 if a run failed or a result was wrong, 2 on bad usage.\n");
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A comma-separated list parsed item by item with `one`; -1 on any bad item. */
static int parse_devices(const char *s, struct comm_options *o) {
  o->ndevices = 0;
  for (const char *p = s;;) {
    char *end;
    errno = 0;
    long v = (*p >= '0' && *p <= '9') ? strtol(p, &end, 10) : -1;
    if (v < 0 || errno || v > 1 << 20 || o->ndevices == MAX_MEMBERS || (*end && *end != ','))
      return -1;
    o->devices[o->ndevices++] = (int)v;
    if (!*end)
      return 0;
    p = end + 1;
  }
}

static int parse_byte_sizes(const char *s, struct comm_options *o) {
  o->nsizes = 0;
  char item[64];
  for (const char *p = s;;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len == 0 || len >= sizeof item || o->nsizes == MAX_SIZES)
      return -1;
    memcpy(item, p, len);
    item[len] = '\0';
    uint64_t v;
    if (strata_parse_size(item, &v) != STRATA_OK || v < 4 || v > (4ull << 30))
      return -1;
    o->sizes[o->nsizes++] = (size_t)v;
    if (!end)
      return 0;
    p = end + 1;
  }
}

/* memcpy of `bytes` on one thread, best of 5: GB/s of bytes copied. */
static double memcpy_gbps(size_t bytes) {
  char *a = malloc(bytes), *b = malloc(bytes);
  if (!a || !b) {
    free(a);
    free(b);
    return 0;
  }
  memset(a, 1, bytes);
  memset(b, 2, bytes);
  double best = 1e30;
  for (int i = 0; i < 5; i++) {
    double t0 = now_s();
    memcpy(b, a, bytes);
    double t = now_s() - t0;
    best = t < best ? t : best;
    a[i] = b[bytes - 1 - (size_t)i]; /* keep the copies observable */
  }
  free(a);
  free(b);
  return (double)bytes / best / 1e9;
}

/* Input element i of rank r: small integers, exact in any order in float32 and int32 (and in bf16 while sums stay
** within 256). */
static float input_value(size_t i, int r) { return (float)((i * 3 + (size_t)r * 5) % 8); }

/* bf16 of small integers (exact: the upper half of the float32), and back. */
static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return (uint16_t)(u >> 16);
}

static double from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static const char *type_name(int dtype) {
  return dtype == STRATA_INT32 ? "int32" : dtype == STRATA_BFLOAT16 ? "bf16" : "float";
}

/* One member's buffers and the host copy of its input. */
struct member {
  strata_queue_t q;
  strata_buffer_t sb, rb;
  void *host;                   /* send elements, in the benchmark's type */
  void *check;                  /* recv elements read back */
};

struct group {
  int n;
  struct member m[MAX_MEMBERS];
  strata_queue_t q[MAX_MEMBERS];
  strata_mem_t send[MAX_MEMBERS], recv[MAX_MEMBERS];
  size_t scount, rcount, count;
};

static int run_once(strata_comm_t c, struct group *g, const struct comm_options *o) {
  switch (o->kind) {
  case K_ALLREDUCE:
    return strata_allreduce(c, g->q, g->send, g->recv, g->count, o->dtype, o->op);
  case K_ALLGATHER:
    return strata_allgather(c, g->q, g->send, g->recv, g->count, o->dtype);
  case K_REDUCESCATTER:
    return strata_reducescatter(c, g->q, g->send, g->recv, g->count, o->dtype, o->op);
  default:
    return strata_broadcast(c, g->q, g->send, g->recv, g->count, o->dtype, o->root);
  }
}

static int finish_all(strata_comm_t c, struct group *g) {
  int rc = strata_comm_finish(c);
  for (int r = 0; r < g->n; r++) {
    int rc2 = strata_queue_finish(g->q[r]);
    rc = rc ? rc : rc2;
  }
  return rc;
}

/* Upload every rank's input (into send, or into its place inside recv when in place). */
static int load_inputs(struct group *g, int in_place) {
  for (int r = 0; r < g->n; r++) {
    size_t es = strata_dtype_size(g->send[r].dtype);
    size_t at = in_place ? g->send[r].off * es : 0;
    strata_buffer_t dst = in_place ? g->m[r].rb : g->m[r].sb;
    int rc = strata_buffer_upload(g->q[r], dst, at, g->m[r].host, g->scount * es);
    if (rc)
      return rc;
  }
  return STRATA_OK;
}

/* Elements of every rank's recv that differ from the host's answer (bf16 sums: by more than their roundings). */
static long count_wrong(struct group *g, const struct comm_options *o) {
  long wrong = 0;
  int n = g->n;
  size_t es = strata_dtype_size(o->dtype);
  for (int r = 0; r < n; r++) {
    if (strata_buffer_download(g->q[r], g->m[r].rb, g->recv[r].off * es, g->m[r].check, g->rcount * es))
      return -1;
    for (size_t i = 0; i < g->rcount; i++) {
      double want;
      if (o->kind == K_BROADCAST) {
        want = input_value(i, o->root);
      } else if (o->kind == K_ALLGATHER) {
        want = input_value(i % g->count, (int)(i / g->count));
      } else {
        size_t at = o->kind == K_REDUCESCATTER ? (size_t)r * g->count + i : i;
        want = 0; /* inputs are >= 0, so 0 starts a maximum too */
        for (int k = 0; k < n; k++) {
          double v = input_value(at, k);
          want = o->op == STRATA_MAX ? (v > want ? v : want) : want + v;
        }
        if (o->op == STRATA_AVG)
          want /= n;
      }
      double got = o->dtype == STRATA_INT32      ? (double)((int32_t *)g->m[r].check)[i]
                   : o->dtype == STRATA_BFLOAT16 ? from_bf16(((uint16_t *)g->m[r].check)[i])
                                                 : ((float *)g->m[r].check)[i];
      int reduced = o->kind == K_ALLREDUCE || o->kind == K_REDUCESCATTER;
      /* inputs are >= 0: the sum of magnitudes is the sum */
      double tol = o->dtype == STRATA_BFLOAT16 && reduced
                       ? ((n - 1) + (o->op == STRATA_AVG)) * ldexp(1, -8) * fabs(want) * (1 + ldexp(1, -15))
                   : o->op == STRATA_AVG && reduced ? 1e-6 * fabs(want)
                                                    : 0;
      wrong += fabs(got - want) > tol;
    }
  }
  return wrong;
}

/* Time `iters` back-to-back collectives: microseconds per collective. */
static int time_runs(strata_comm_t c, struct group *g, const struct comm_options *o, int iters, double *us) {
  for (int i = 0; i < o->warmup; i++)
    TRY_BENCH(run_once(c, g, o));
  TRY_BENCH(finish_all(c, g));
  double t0 = now_s();
  for (int i = 0; i < iters; i++)
    TRY_BENCH(run_once(c, g, o));
  TRY_BENCH(finish_all(c, g));
  *us = (now_s() - t0) / iters * 1e6;
  return STRATA_OK;
}

static void free_group(struct group *g) {
  for (int r = 0; r < g->n; r++) {
    strata_queue_free(g->m[r].q);
    strata_buffer_free(g->m[r].sb);
    strata_buffer_free(g->m[r].rb);
    free(g->m[r].host);
    free(g->m[r].check);
  }
}

static int setup_group(struct group *g, const struct comm_options *o, size_t bytes) {
  int n = g->n;
  size_t es = strata_dtype_size(o->dtype), elem_count = bytes / es;
  /* count per rank as nccl-tests: the "size" column is the largest buffer */
  g->count = o->kind == K_ALLGATHER || o->kind == K_REDUCESCATTER ? elem_count / (size_t)n : elem_count;
  if (g->count == 0)
    g->count = 1;
  g->scount = o->kind == K_REDUCESCATTER ? g->count * (size_t)n : g->count;
  g->rcount = o->kind == K_ALLGATHER ? g->count * (size_t)n : g->count;
  size_t big = g->scount > g->rcount ? g->scount : g->rcount;
  for (int r = 0; r < n; r++) {
    struct member *m = &g->m[r];
    memset(m, 0, sizeof *m);
    TRY_BENCH(strata_queue_new(o->devices[r], &m->q));
    TRY_BENCH(strata_buffer_new(o->devices[r], g->scount * es, &m->sb));
    TRY_BENCH(strata_buffer_new(o->devices[r], big * es, &m->rb));
    m->host = malloc(g->scount * es);
    m->check = malloc(g->rcount * es);
    if (!m->host || !m->check)
      return STRATA_ERR_NOMEM;
    for (size_t i = 0; i < g->scount; i++) {
      if (o->dtype == STRATA_INT32)
        ((int32_t *)m->host)[i] = (int32_t)input_value(i, r);
      else if (o->dtype == STRATA_BFLOAT16)
        ((uint16_t *)m->host)[i] = to_bf16(input_value(i, r));
      else
        ((float *)m->host)[i] = input_value(i, r);
    }
    g->q[r] = m->q;
  }
  return STRATA_OK;
}

/* Point send/recv (operands of the benchmark's type) at the out-of-place or in-place layout. */
static void layout(struct group *g, const struct comm_options *o, int in_place) {
  int t = o->dtype;
  for (int r = 0; r < g->n; r++) {
    g->recv[r] = strata_mem_typed(g->m[r].rb, 0, t);
    if (!in_place)
      g->send[r] = strata_mem_typed(g->m[r].sb, 0, t);
    else if (o->kind == K_ALLGATHER)
      g->send[r] = strata_mem_typed(g->m[r].rb, (size_t)r * g->count, t);
    else if (o->kind == K_REDUCESCATTER) {
      g->send[r] = strata_mem_typed(g->m[r].rb, 0, t);
      g->recv[r] = strata_mem_typed(g->m[r].rb, (size_t)r * g->count, t);
    } else
      g->send[r] = strata_mem_typed(g->m[r].rb, 0, t);
  }
}

static double bus_factor(int kind, int n) {
  if (kind == K_ALLREDUCE)
    return 2.0 * (n - 1) / n;
  if (kind == K_BROADCAST)
    return 1.0;
  return (double)(n - 1) / n;
}

static int bench_comm(struct comm_options *o) {
  int total;
  if (strata_device_count(&total)) {
    fprintf(stderr, "strata-bench: %s\n", strata_last_error());
    return 1;
  }
  if (o->ndevices == 0) {
    if (total > MAX_MEMBERS)
      total = MAX_MEMBERS;
    for (int i = 0; i < total; i++)
      o->devices[i] = i;
    o->ndevices = total;
  }
  for (int i = 0; i < o->ndevices; i++)
    if (o->devices[i] >= total) {
      fprintf(stderr, "strata-bench: --devices names device %d, but there are %d (see strata-topo)\n", o->devices[i],
              total);
      return 2;
    }
  if (o->ndevices == 0) {
    fprintf(stderr, "strata-bench: no device to benchmark on\n");
    return 1;
  }
  if (o->kind == K_BROADCAST && o->root >= o->ndevices) {
    fprintf(stderr, "strata-bench: --root %d is not a rank of a group of %d\n", o->root, o->ndevices);
    return 2;
  }
  struct strata_comm_options co = {.algorithm = o->algorithm};
  strata_comm_t c;
  if (strata_comm_new(o->devices, o->ndevices, &co, &c)) {
    fprintf(stderr, "strata-bench: %s\n", strata_last_error());
    return o->algorithm == STRATA_COMM_NCCL ? 2 : 1;
  }
  struct strata_comm_info info;
  strata_comm_info(c, &info);
  int n = o->ndevices;
  size_t mc_bytes = 64u << 20;
  double mc = memcpy_gbps(mc_bytes);
  const char *tname = type_name(o->dtype);
  if (o->json) {
    printf("{\"benchmark\":\"%s\",\"devices\":[", kinds[o->kind]);
    for (int r = 0; r < n; r++)
      printf("%s%d", r ? "," : "", o->devices[r]);
    printf("],\"algorithm\":\"%s\",\"chunk_bytes\":%zu,\"direct_max_bytes\":%zu,\"memcpy_gbps\":%.3f}\n",
           strata_comm_algorithm_name(info.algorithm), info.chunk_bytes, info.direct_max_bytes, mc);
  } else {
    printf("# strata-bench %s: %d devices, %s %s, algorithm %s (chunk %zu B, direct up to %zu B)\n", kinds[o->kind],
           n, tname, strata_redop_name(o->op), strata_comm_algorithm_name(info.algorithm), info.chunk_bytes,
           info.direct_max_bytes);
    for (int r = 0; r < n; r++) {
      struct strata_device_props p;
      strata_device_props(o->devices[r], &p);
      printf("#  rank %2d device %2d  %-7s %s\n", r, o->devices[r], p.backend, p.name);
    }
    printf("#  ring order:");
    for (int i = 0; i < n; i++)
      printf(" %d", info.ring[i]);
    printf("\n# memcpy bandwidth (64 MiB, one thread, best of 5): %.2f GB/s\n#\n", mc);
    printf("# %49s%-32s%s\n", "", "out-of-place", "in-place");
    printf("# %10s %12s %6s %6s %5s %10s %7s %7s %6s %10s %7s %7s %6s\n", "size", "count", "type", "redop", "root",
           "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    printf("# %10s %12s %6s %6s %5s %10s %7s %7s %6s %10s %7s %7s %6s\n", "(B)", "(elements)", "", "", "", "(us)",
           "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  }
  int status = 0;
  double bus_sum = 0;
  int bus_n = 0;
  long wrong_total = 0;
  for (int si = 0; si < o->nsizes && !status; si++) {
    struct group *g = calloc(1, sizeof *g);
    if (!g) {
      status = 1;
      break;
    }
    g->n = n;
    int rc = setup_group(g, o, o->sizes[si]);
    size_t bytes = (o->kind == K_ALLGATHER ? g->rcount : g->scount) * strata_dtype_size(o->dtype);
    int iters = o->iters ? o->iters : (int)fmin(50, fmax(4, (double)(256u << 20) / (double)bytes / 4));
    double us[2] = {0, 0};
    long wrong[2] = {0, 0};
    for (int ip = 0; ip < 2 && !rc; ip++) {
      layout(g, o, ip);
      rc = load_inputs(g, ip);
      if (!rc)
        rc = time_runs(c, g, o, iters, &us[ip]);
      /* a fresh input, one run, then the check (in place, the runs above changed it) */
      if (!rc)
        rc = load_inputs(g, ip);
      if (!rc)
        rc = run_once(c, g, o);
      if (!rc)
        rc = finish_all(c, g);
      if (!rc)
        wrong[ip] = count_wrong(g, o);
      if (wrong[ip] < 0)
        rc = STRATA_ERR_BACKEND;
    }
    if (rc) {
      fprintf(stderr, "strata-bench: %s of %zu bytes: %s\n", kinds[o->kind], o->sizes[si], strata_last_error());
      status = 1;
    } else {
      double alg[2], bus[2];
      for (int ip = 0; ip < 2; ip++) {
        alg[ip] = (double)bytes / (us[ip] * 1e-6) / 1e9;
        bus[ip] = alg[ip] * bus_factor(o->kind, n);
        bus_sum += bus[ip];
        bus_n++;
        wrong_total += wrong[ip];
      }
      int root = o->kind == K_BROADCAST ? o->root : -1;
      const char *redop = o->kind == K_ALLREDUCE || o->kind == K_REDUCESCATTER ? strata_redop_name(o->op) : "none";
      if (o->json)
        printf("{\"size\":%zu,\"count\":%zu,\"type\":\"%s\",\"redop\":\"%s\",\"root\":%d,\"iters\":%d,"
               "\"out_of_place\":{\"time_us\":%.2f,\"algbw\":%.3f,\"busbw\":%.3f,\"wrong\":%ld},"
               "\"in_place\":{\"time_us\":%.2f,\"algbw\":%.3f,\"busbw\":%.3f,\"wrong\":%ld}}\n",
               bytes, g->count, tname, redop, root, iters, us[0], alg[0], bus[0], wrong[0], us[1], alg[1], bus[1],
               wrong[1]);
      else
        printf("  %10zu %12zu %6s %6s %5d %10.1f %7.2f %7.2f %6ld %10.1f %7.2f %7.2f %6ld\n", bytes, g->count, tname,
               redop, root, us[0], alg[0], bus[0], wrong[0], us[1], alg[1], bus[1], wrong[1]);
      fflush(stdout);
    }
    free_group(g);
    free(g);
  }
  double avg = bus_n ? bus_sum / bus_n : 0;
  if (o->json)
    printf("{\"avg_busbw\":%.3f,\"wrong\":%ld,\"memcpy_gbps\":%.3f}\n", avg, wrong_total, mc);
  else
    printf("# Out of bounds values : %ld %s\n# Avg bus bandwidth    : %.3f GB/s\n# memcpy bandwidth     : %.3f GB/s\n",
           wrong_total, wrong_total ? "WRONG" : "OK", avg, mc);
  strata_comm_free(c);
  return status ? status : wrong_total ? 1 : 0;
}

int strata_bench_comm_main(int argc, char **argv) {
  struct comm_options o = {.op = STRATA_SUM, .dtype = STRATA_FLOAT32, .warmup = 2};
  o.kind = -1;
  for (int k = 0; k < 4; k++)
    if (!strcmp(argv[1], kinds[k]))
      o.kind = k;
  parse_byte_sizes("1K,4K,16K,64K,256K,1M,4M,16M,64M,256M", &o);
  static const struct option longopts[] = {
      {"devices", required_argument, NULL, 'g'}, {"sizes", required_argument, NULL, 's'},
      {"op", required_argument, NULL, 'o'},      {"type", required_argument, NULL, 't'},
      {"dtype", required_argument, NULL, 't'},
      {"algorithm", required_argument, NULL, 'a'}, {"root", required_argument, NULL, 'R'},
      {"iters", required_argument, NULL, 'n'},   {"warmup", required_argument, NULL, 'w'},
      {"json", no_argument, NULL, 'j'},          {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  int c;
  int64_t v;
  optind = 2;
  while ((c = getopt_long(argc, argv, ":g:s:o:t:a:R:n:w:h", longopts, NULL)) != -1) {
    switch (c) {
    case 'g':
      if (parse_devices(optarg, &o)) {
        fprintf(stderr, "strata-bench: --devices wants a list like 0,1,2 (at most %d), not '%s'\n", MAX_MEMBERS,
                optarg);
        return 2;
      }
      for (int i = 0; i < o.ndevices; i++)
        for (int j = 0; j < i; j++)
          if (o.devices[i] == o.devices[j]) {
            fprintf(stderr, "strata-bench: --devices lists device %d twice\n", o.devices[i]);
            return 2;
          }
      break;
    case 's':
      if (parse_byte_sizes(optarg, &o)) {
        fprintf(stderr, "strata-bench: --sizes wants a list like 1K,64M (each 4 bytes to 4G, at most %d), not '%s'\n",
                MAX_SIZES, optarg);
        return 2;
      }
      break;
    case 'o':
      o.op = !strcmp(optarg, "sum") ? STRATA_SUM : !strcmp(optarg, "avg") ? STRATA_AVG : !strcmp(optarg, "max") ? STRATA_MAX : -1;
      if (o.op < 0) {
        fprintf(stderr, "strata-bench: --op wants sum, avg or max, not '%s'\n", optarg);
        return 2;
      }
      break;
    case 't':
      o.dtype = !strcmp(optarg, "float32") || !strcmp(optarg, "float")  ? STRATA_FLOAT32
                : !strcmp(optarg, "int32")                              ? STRATA_INT32
                : !strcmp(optarg, "bf16") || !strcmp(optarg, "bfloat16") ? STRATA_BFLOAT16
                                                                        : -1;
      if (o.dtype < 0) {
        fprintf(stderr, "strata-bench: --type wants float32, int32 or bf16, not '%s'\n", optarg);
        return 2;
      }
      break;
    case 'a':
      o.algorithm = !strcmp(optarg, "auto")     ? STRATA_COMM_AUTO
                    : !strcmp(optarg, "ring")   ? STRATA_COMM_RING
                    : !strcmp(optarg, "direct") ? STRATA_COMM_DIRECT
                    : !strcmp(optarg, "nccl")   ? STRATA_COMM_NCCL
                                                : -1;
      if (o.algorithm < 0) {
        fprintf(stderr, "strata-bench: --algorithm wants auto, ring, direct or nccl, not '%s'\n", optarg);
        return 2;
      }
      break;
    case 'R':
      if (cli_parse_int("strata-bench", "--root", optarg, 0, &v) || v >= MAX_MEMBERS)
        return 2;
      o.root = (int)v;
      break;
    case 'n':
      if (cli_parse_int("strata-bench", "--iters", optarg, 1, &v) || v > 100000) {
        fprintf(stderr, "strata-bench: --iters wants 1 .. 100000\n");
        return 2;
      }
      o.iters = (int)v;
      break;
    case 'w':
      if (cli_parse_int("strata-bench", "--warmup", optarg, 0, &v) || v > 1000) {
        fprintf(stderr, "strata-bench: --warmup wants 0 .. 1000\n");
        return 2;
      }
      o.warmup = (int)v;
      break;
    case 'j':
      o.json = 1;
      break;
    case 'h':
      comm_usage(stdout);
      return 0;
    default:
      if (cli_refuse("strata-bench", c, argc, argv))
        return 2;
    }
  }
  if (cli_refuse("strata-bench", 0, argc, argv))
    return 2;
  if (o.op == STRATA_AVG && o.dtype == STRATA_INT32) {
    fprintf(stderr, "strata-bench: --op avg is for float32 and bf16 only\n");
    return 2;
  }
  int rc = bench_comm(&o);
  strata_shutdown();
  return rc;
}
