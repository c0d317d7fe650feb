/* SPDX-License-Identifier: MIT */
/* bench-mpi.c — strata-bench mpi: traffic between ranks through strata beside OpenMPI's own calls, measured in the same run. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <strata/cluster.h>

#include "bench-mpi.h"
#include "cli.h"

#ifdef STRATA_HAVE_MPI
#include <mpi.h>

#define MPI_MAX_SIZES 16

struct mpi_options {
  size_t sizes[MPI_MAX_SIZES];
  int nsizes;
  int reps;
  int device;                   /* local device of every rank */
};

static void mpi_usage(FILE *f) {
  fprintf(f,
          "Usage: mpirun -np N strata-bench mpi [OPTIONS]\n"
          "Traffic between MPI ranks through strata beside OpenMPI called directly, in the same run:\n"
          "  p2p        ping-pong between ranks 0 and 1: strata_cluster_send/recv of a device buffer\n"
          "             (in place for host memory, else staged) against MPI_Send/MPI_Recv of host memory,\n"
          "             GB/s = 2 x size / round trip;\n"
          "  allreduce  float32 sum over one device of every rank: strata_cluster_allreduce against\n"
          "             MPI_Allreduce of host memory; algbw = size / time, busbw = algbw x 2(n-1)/n.\n"
          "Rank 0 prints; medians of the repetitions, the two alternated.\n"
          "\n"
          "Options:\n"
          "  -d, --device N     each rank's local device (default 0; see strata-topo)\n"
          "  -s, --sizes LIST   message sizes in bytes (default 4K,64K,1M,16M,64M)\n"
          "  -r, --reps R       timed repetitions (default 10)\n"
          "  -h, --help         this help\n"
          "\n"
          "Exit status: 0 on success, 1 if a measurement failed, 2 on bad usage.\n");
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int parse_sizes(const char *s, struct mpi_options *o) {
  o->nsizes = 0;
  while (*s) {
    char item[64];
    size_t len = strcspn(s, ",");
    uint64_t v = 0;
    if (len == 0 || len >= sizeof item || o->nsizes == MPI_MAX_SIZES)
      return -1;
    memcpy(item, s, len);
    item[len] = '\0';
    if (strata__parse_size(item, &v) || v < 4 || v > (1ull << 30) || v % 4)
      return -1;
    o->sizes[o->nsizes++] = (size_t)v;
    s += len;
    if (*s == ',')
      s++;
  }
  return o->nsizes ? 0 : -1;
}

/* One round of each, alternated; times[2*rep] strata, times[2*rep+1] MPI. Ranks other than 0 and 1 wait. */
static int bench_p2p(strata_cluster_t cl, const struct strata_cluster_info *ci, const struct mpi_options *o,
                     size_t bytes, double *t_strata, double *t_mpi) {
  int dev = o->device, rc = 0;
  strata_queue_t q = NULL;
  strata_buffer_t b = NULL;
  char *h = malloc(bytes);
  if (!h)
    return STRATA_ERR_NOMEM;
  memset(h, 1, bytes);
  if (ci->rank < 2) {
    rc = strata_queue_new(dev, &q);
    if (!rc)
      rc = strata_buffer_new(dev, bytes, &b);
  }
  int peer = 1 - ci->rank;
  for (int rep = -1; rep < o->reps && !rc; rep++) {   /* -1: warm-up */
    if (ci->rank < 2) {
      double t0 = now();
      for (int leg = 0; leg < 2 && !rc; leg++)
        rc = (leg == 0) == (ci->rank == 0) ? strata_cluster_send(cl, peer, 9, q, strata_mem(b, 0), bytes)
                                           : strata_cluster_recv(cl, peer, 9, q, strata_mem(b, 0), bytes);
      double t1 = now();
      for (int leg = 0; leg < 2; leg++) {
        if ((leg == 0) == (ci->rank == 0))
          MPI_Send(h, (int)bytes, MPI_BYTE, peer, 10, MPI_COMM_WORLD);
        else
          MPI_Recv(h, (int)bytes, MPI_BYTE, peer, 10, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      }
      double t2 = now();
      if (rep >= 0) {
        t_strata[rep] = t1 - t0;
        t_mpi[rep] = t2 - t1;
      }
    }
  }
  strata_buffer_free(b);
  strata_queue_free(q);
  free(h);
  return rc;
}

static int bench_allreduce(strata_cluster_t cl, const struct strata_cluster_info *ci, strata_cluster_comm_t cc,
                           const struct mpi_options *o, size_t bytes, double *t_strata, double *t_mpi) {
  size_t count = bytes / 4;
  strata_queue_t q = NULL;
  strata_buffer_t sb = NULL, rb = NULL;
  float *hs = malloc(bytes), *hr = malloc(bytes);
  int rc = hs && hr ? 0 : STRATA_ERR_NOMEM;
  for (size_t i = 0; hs && i < count; i++)
    hs[i] = (float)(i % 17);
  if (!rc)
    rc = strata_queue_new(o->device, &q);
  if (!rc)
    rc = strata_buffer_new(o->device, bytes, &sb);
  if (!rc)
    rc = strata_buffer_new(o->device, bytes, &rb);
  if (!rc)
    rc = strata_buffer_upload(q, sb, 0, hs, bytes);
  strata_mem_t s = strata_mem(sb, 0), r = strata_mem(rb, 0);
  for (int rep = -1; rep < o->reps && !rc; rep++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    rc = strata_cluster_allreduce(cc, &q, &s, &r, count, STRATA_FLOAT32, STRATA_SUM);
    MPI_Barrier(MPI_COMM_WORLD);
    double t1 = now();
    MPI_Allreduce(hs, hr, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t2 = now();
    if (rep >= 0) {
      t_strata[rep] = t1 - t0;
      t_mpi[rep] = t2 - t1;
    }
  }
  (void)ci;
  (void)cl;
  strata_buffer_free(sb);
  strata_buffer_free(rb);
  strata_queue_free(q);
  free(hs);
  free(hr);
  return rc;
}

int strata_bench_mpi_main(int argc, char **argv) {
  struct mpi_options o = {.reps = 10};
  parse_sizes("4K,64K,1M,16M,64M", &o);
  static const struct option longopts[] = {{"device", required_argument, NULL, 'd'},
                                           {"sizes", required_argument, NULL, 's'},
                                           {"reps", required_argument, NULL, 'r'},
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  int c;
  optind = 2;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":d:s:r:h", longopts, NULL)) != -1) {
    int64_t v = 0;
    switch (c) {
    case 'd':
      if (strata__parse_int(optarg, 0, 4095, &v)) {
        fprintf(stderr, "strata-bench: --device '%s' is not a device index\n", optarg);
        return 2;
      }
      o.device = (int)v;
      break;
    case 's':
      if (parse_sizes(optarg, &o)) {
        fprintf(stderr, "strata-bench: --sizes '%s': sizes from 4 bytes to 1G, multiples of 4, at most %d\n", optarg,
                MPI_MAX_SIZES);
        return 2;
      }
      break;
    case 'r':
      if (strata__parse_int(optarg, 1, 100000, &v)) {
        fprintf(stderr, "strata-bench: --reps '%s' is not a count from 1\n", optarg);
        return 2;
      }
      o.reps = (int)v;
      break;
    case 'h': mpi_usage(stdout); return 0;
    default: cli_refuse("strata-bench", c, argc, argv); return 2;
    }
  }
  if (cli_refuse("strata-bench", 0, argc, argv))
    return 2;
  if (!strata_cluster_available()) {
    fprintf(stderr, "strata-bench mpi: not started by an MPI launcher (run it under mpirun -np 2 or more)\n");
    return 2;
  }
  strata_cluster_t cl = NULL;
  if (strata_cluster_init(&argc, &argv, NULL, &cl) != STRATA_OK) {
    fprintf(stderr, "strata-bench: %s\n", strata_last_error());
    strata_cluster_abort(NULL, 1, NULL);
  }
  struct strata_cluster_info ci;
  strata_cluster_info(cl, &ci);
  if (ci.size < 2 || o.device >= ci.local_device_count) {
    if (ci.rank == 0)
      fprintf(stderr, "strata-bench mpi: %s\n", ci.size < 2 ? "needs 2 ranks or more" : "no such local device");
    strata_cluster_free(cl);
    strata_shutdown();
    return 2;
  }
  int *devs = calloc((size_t)ci.size, sizeof *devs);
  double *ts = calloc((size_t)o.reps, sizeof *ts), *tm = calloc((size_t)o.reps, sizeof *tm);
  strata_cluster_comm_t cc = NULL;
  for (int r = 0; devs && r < ci.size; r++)
    strata_cluster_global_device(cl, r, o.device, &devs[r]);
  int rc = devs && ts && tm ? strata_cluster_comm_new(cl, devs, ci.size, NULL, &cc) : STRATA_ERR_NOMEM;
  struct strata_cluster_device d0;
  strata_cluster_device(cl, devs ? devs[0] : 0, &d0);
  if (!rc && ci.rank == 0) {
    printf("# strata-bench mpi: %d ranks on %d nodes, local device %d of each (rank 0's: %s, %s), %s\n", ci.size,
           ci.node_count, o.device, d0.info.backend, d0.info.name, ci.mpi_library);
    printf("# start-up ping-pong: shared memory %.2f GB/s, network %.2f GB/s (%s)\n", ci.shm_gbps, ci.network_gbps,
           ci.network_source == STRATA_CLUSTER_MEASURED ? "measured" : "not measured");
    printf("#\n# %-9s %12s %10s %10s %8s\n", "p2p", "size", "strata", "MPI", "ratio");
    printf("# %-9s %12s %10s %10s %8s\n", "", "(B)", "(GB/s)", "(GB/s)", "");
  }
  for (int i = 0; i < o.nsizes && !rc; i++) {
    rc = bench_p2p(cl, &ci, &o, o.sizes[i], ts, tm);
    if (!rc && ci.rank == 0) {
      double a = 2.0 * (double)o.sizes[i] / median(ts, o.reps) / 1e9, b = 2.0 * (double)o.sizes[i] / median(tm, o.reps) / 1e9;
      printf("  %-9s %12zu %10.2f %10.2f %7.1f%%\n", "", o.sizes[i], a, b, 100.0 * a / b);
    }
  }
  if (!rc && ci.rank == 0) {
    printf("#\n# %-9s %12s %10s %10s %10s %8s\n", "allreduce", "size", "strata", "MPI", "strata", "ratio");
    printf("# %-9s %12s %10s %10s %10s %8s\n", "", "(B)", "algbw", "algbw", "busbw", "");
  }
  for (int i = 0; i < o.nsizes && !rc; i++) {
    rc = bench_allreduce(cl, &ci, cc, &o, o.sizes[i], ts, tm);
    if (!rc && ci.rank == 0) {
      double a = (double)o.sizes[i] / median(ts, o.reps) / 1e9, b = (double)o.sizes[i] / median(tm, o.reps) / 1e9;
      printf("  %-9s %12zu %10.2f %10.2f %10.2f %7.1f%%\n", "", o.sizes[i], a, b,
             a * 2.0 * (ci.size - 1) / ci.size, 100.0 * a / b);
    }
  }
  fflush(stdout);
  if (rc) {
    fprintf(stderr, "strata-bench mpi: %s\n", strata_last_error());
    strata_cluster_abort(cl, 1, NULL);
  }
  strata_cluster_comm_free(cc);
  free(devs);
  free(ts);
  free(tm);
  strata_cluster_free(cl);
  strata_shutdown();
  return 0;
}

#else /* !STRATA_HAVE_MPI */

int strata_bench_mpi_main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "strata-bench mpi: strata was built without MPI (./configure --with-mpi)\n");
  return 2;
}

#endif /* STRATA_HAVE_MPI */
