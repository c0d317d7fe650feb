/* SPDX-License-Identifier: MIT */
/* calibrate.c — measured device and link costs of this machine (GEMM speed by size, memory bandwidth, launch overhead, copies), as a small JSON cache the planner reads. */
#include "config.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <strata/comm.h>
#include <strata/device.h>
#include <strata/model.h>
#include <strata/ops.h>

#include "plan/plan.h"
#include "core/core.h"

/* GEMM sizes measured, and repetitions of each. The GEMMs and row ops count their median: a step of
** training, whose median the simulator predicts, runs under the machine's load as it is, and the best
** of a few runs on a machine others load is what a step rarely gets. The repetitions go round every
** size (every op) in turn, so that a burst of load falls on all of them alike rather than on one. */
static const int gemm_sizes[] = {32, 64, 128, 256, 512, 1024};
#define NSIZES 6
#define REPS 3
#define OP_REPS 5
/* Bytes written to measure memory bandwidth, and tiny ops timed for the launch overhead. */
#define FILL_BYTES (32u << 20)
#define LAUNCHES 200
/* Round trips (a tiny op enqueued, then waited for) per group, and groups: the median group counts. */
#define SYNCS 20
#define SYNC_GROUPS 9
/* Bytes of each device-to-device copy the link measurement times. */
#define COPY_BYTES (16u << 20)
/* Elements each row or elementwise op is timed over (about a layer's activations), and the row width. */
#define OP_ELEMS (256 * 1024)
#define OP_COLS 256
/* The softmax runs causal rows, as attention does, at two widths: a per-element and a per-row cost. */
#define SOFTMAX_WIDE 512
#define SOFTMAX_NARROW 64
/* Each timed run repeats its op until this long has passed: a step's ops last that long in all, and a
** shorter run on a shared machine sees either a free core or a preempted one, rarely the mix a step sees. */
#define RUN_S 0.02

/* One run of op k over OP_ELEMS elements of the buffers at x, y, z, w (each OP_ELEMS floats), g (gamma, beta)
** and r (row stats); a softmax's rows are `cols` wide. */
static int run_op(strata_queue_t q, int k, int64_t cols, strata_buffer_t b) {
  const int64_t n = OP_ELEMS, rows = OP_ELEMS / OP_COLS;
  strata_mem_t x = strata_mem(b, 0), y = strata_mem(b, (size_t)n), z = strata_mem(b, 2 * (size_t)n),
               w = strata_mem(b, 3 * (size_t)n), g = strata_mem(b, 4 * (size_t)n),
               r = strata_mem(b, 4 * (size_t)n + OP_COLS), r2 = strata_mem(b, 4 * (size_t)n + OP_COLS + (size_t)rows),
               db = strata_mem(b, 5 * (size_t)n);
  switch (k) {
  case STRATA_PLAN_OP_ADD: return strata_add(q, x, y, z, n);
  case STRATA_PLAN_OP_GELU_FWD: return strata_gelu_fwd(q, x, y, n);
  case STRATA_PLAN_OP_GELU_BWD: return strata_gelu_bwd(q, x, y, z, n);
  case STRATA_PLAN_OP_LAYERNORM_FWD: return strata_layernorm_fwd(q, x, g, g, y, r, r2, rows, OP_COLS, 1e-5f);
  case STRATA_PLAN_OP_LAYERNORM_BWD: return strata_layernorm_bwd(q, x, g, r, r2, y, z, w, w, rows, OP_COLS, 1);
  case STRATA_PLAN_OP_SOFTMAX_FWD: return strata_softmax_fwd(q, x, y, n / cols, cols, 0.125f, 1);
  case STRATA_PLAN_OP_SOFTMAX_BWD: return strata_softmax_bwd(q, y, x, z, n / cols, cols, 0.125f);
  case STRATA_PLAN_OP_BIAS_ADD: return strata_bias_add(q, z, g, rows, OP_COLS);
  case STRATA_PLAN_OP_BIAS_GRAD: return strata_bias_grad(q, x, db, rows, OP_COLS, 1);
  default: /* an optimizer step over n parameters: the update, the gradient's squared norm, the clip's scaling,
           ** its zeroing */
    TRY(strata_adamw(q, x, y, z, w, n, 1e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, 1));
    TRY(strata_sumsq(q, y, n, r, 0));
    TRY(strata_scale(q, y, 1.0f, n));
    return strata_fill(q, y, 0, n);
  }
}

double strata__plan_median(double *v, int n) {
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
      double x = v[j];
      v[j] = v[j - 1];
      v[j - 1] = x;
    }
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* One timed run of op k (rows `cols` wide): repeated until RUN_S has passed. Seconds per run. */
static int time_op(strata_queue_t q, int k, int64_t cols, strata_buffer_t b, double *s) {
  double t0 = strata__now(), dt = 0;
  int64_t runs = 0;
  int rc = STRATA_OK;
  while (!rc && dt < RUN_S) {
    for (int i = 0; i < 4 && !rc; i++)
      rc = run_op(q, k, cols, b);
    if (!rc)
      rc = strata_queue_finish(q);
    runs += 4;
    dt = strata__now() - t0;
  }
  *s = dt / (double)runs;
  return rc;
}

/* The op jobs timed: every op of enum strata_plan_op once, then the softmax's narrow rows. */
#define JOBS (STRATA_PLAN_OP_COUNT + 2)

static int job_op(int j) {
  if (j < STRATA_PLAN_OP_COUNT)
    return j;
  return j == STRATA_PLAN_OP_COUNT ? STRATA_PLAN_OP_SOFTMAX_FWD : STRATA_PLAN_OP_SOFTMAX_BWD;
}

static int64_t job_cols(int j) {
  const int k = job_op(j);
  if (k != STRATA_PLAN_OP_SOFTMAX_FWD && k != STRATA_PLAN_OP_SOFTMAX_BWD)
    return OP_COLS;
  return j < STRATA_PLAN_OP_COUNT ? SOFTMAX_WIDE : SOFTMAX_NARROW;
}

/* One device being measured: its queue and buffers, the rounds' samples, and what they come to. */
struct probe {
  int dev;
  strata_queue_t q;
  strata_buffer_t a, c, f, ops;
  double gemm[NSIZES][OP_REPS], job[JOBS][OP_REPS];
  /* the figures: median GEMM GFLOP/s of each size, fill bandwidth (best), launch overhead, a wait's round
  ** trip, ns per element of each op and per row of the softmax */
  double gflops[NSIZES], mem_gbps, launch_us, sync_us, op_ns[STRATA_PLAN_OP_COUNT], row_ns[STRATA_PLAN_OP_COUNT];
};

static int probe_open(struct probe *p, int dev) {
  const int64_t nmax = gemm_sizes[NSIZES - 1];
  const size_t floats = 6 * (size_t)OP_ELEMS;
  p->dev = dev;
  int rc = strata_queue_new(dev, &p->q);
  if (!rc)
    rc = strata_buffer_new(dev, (size_t)(nmax * nmax * 4), &p->a);
  if (!rc)
    rc = strata_buffer_new(dev, (size_t)(nmax * nmax * 4), &p->c);
  if (!rc)
    rc = strata_buffer_new(dev, FILL_BYTES, &p->f);
  if (!rc)
    rc = strata_buffer_new(dev, floats * 4, &p->ops);
  if (!rc)
    rc = strata_fill(p->q, strata_mem(p->a, 0), 0.5f, nmax * nmax);
  if (!rc)
    rc = strata_fill(p->q, strata_mem(p->ops, 0), 0.25f, (int64_t)floats);
  return rc;
}

static void probe_close(struct probe *p) {
  strata_buffer_free(p->a);
  strata_buffer_free(p->c);
  strata_buffer_free(p->f);
  strata_buffer_free(p->ops);
  strata_queue_free(p->q);
}

/* Round r of the GEMMs, every size once (round 0, which may compile kernels, runs each size once, not counted). */
static int probe_gemm_round(struct probe *p, int r) {
  const int64_t nmax = gemm_sizes[NSIZES - 1];
  int rc = STRATA_OK;
  for (int s = 0; s < NSIZES && !rc; s++) {
    const int64_t n = gemm_sizes[s];
    /* small GEMMs in a run before one wait, as a step enqueues them: the wait's own cost is not theirs */
    const int64_t calls = (nmax / n) * (nmax / n) * (nmax / n) < 64 ? (nmax / n) * (nmax / n) * (nmax / n) : 64;
    double t0 = strata__now(), dt = 0;
    int64_t done = 0;
    while (!rc && dt < RUN_S) {
      for (int64_t i = 0; i < calls && !rc; i++)
        rc = strata_gemm(p->q, 0, 0, n, n, n, 1, strata_mem(p->a, 0), n, 0, strata_mem(p->a, 0), n, 0, 0,
                         strata_mem(p->c, 0), n, 0, 1);
      if (!rc)
        rc = strata_queue_finish(p->q);
      done += calls;
      dt = strata__now() - t0;
      if (r == 0)
        break;
    }
    if (r > 0)
      p->gemm[s][r - 1] = 2.0 * (double)n * (double)n * (double)n * (double)done / dt / 1e9;
  }
  return rc;
}

/* Round r of the op jobs (round 0 a warm-up, not counted). */
static int probe_ops_round(struct probe *p, int r) {
  int rc = STRATA_OK;
  for (int j = 0; j < JOBS && !rc; j++) {
    double x;
    rc = time_op(p->q, job_op(j), job_cols(j), p->ops, &x);
    if (r > 0)
      p->job[j][r - 1] = x;
  }
  return rc;
}

/*
** The figures measured in one go (memory bandwidth, launch overhead, a
** wait's round trip), then the rounds' medians; for the softmax, causal
** rows at two widths with the same elements, solved for a cost per element
** and one per row: a narrow row pays its loops' fixed cost over fewer
** elements.
*/
static int probe_finish(struct probe *p) {
  int rc = STRATA_OK;
  double bw = 0;
  for (int r = 0; r <= REPS && !rc; r++) {
    double t0 = strata__now();
    rc = strata_fill(p->q, strata_mem(p->f, 0), 1.0f, FILL_BYTES / 4);
    if (!rc)
      rc = strata_queue_finish(p->q);
    double g = FILL_BYTES / (strata__now() - t0) / 1e9;
    if (r > 0 && g > bw)
      bw = g;
  }
  p->mem_gbps = bw;
  if (!rc) {
    double t0 = strata__now();
    for (int i = 0; i < LAUNCHES && !rc; i++)
      rc = strata_fill(p->q, strata_mem(p->f, 0), 2.0f, 1);
    if (!rc)
      rc = strata_queue_finish(p->q);
    p->launch_us = (strata__now() - t0) / LAUNCHES * 1e6;
  }
  /* the round trip of a wait: the queue's worker wakes for the op, the waiting thread for its end */
  double groups[SYNC_GROUPS];
  for (int g = 0; g < SYNC_GROUPS && !rc; g++) {
    double t0 = strata__now();
    for (int i = 0; i < SYNCS && !rc; i++) {
      rc = strata_fill(p->q, strata_mem(p->f, 0), 3.0f, 1);
      if (!rc)
        rc = strata_queue_finish(p->q);
    }
    groups[g] = (strata__now() - t0) / SYNCS * 1e6;
  }
  if (rc)
    return rc;
  p->sync_us = strata__plan_median(groups, SYNC_GROUPS);
  for (int s = 0; s < NSIZES; s++)
    p->gflops[s] = strata__plan_median(p->gemm[s], OP_REPS);
  double t[JOBS];
  for (int j = 0; j < JOBS; j++)
    t[j] = strata__plan_median(p->job[j], OP_REPS);
  for (int k = 0; k < STRATA_PLAN_OP_COUNT; k++) {
    p->op_ns[k] = t[k] / OP_ELEMS * 1e9;
    p->row_ns[k] = 0;
  }
  for (int j = STRATA_PLAN_OP_COUNT; j < JOBS; j++) {
    const int k = job_op(j);
    const double wide_rows = (double)OP_ELEMS / SOFTMAX_WIDE, narrow_rows = (double)OP_ELEMS / SOFTMAX_NARROW;
    double row = (t[j] - t[k]) / (narrow_rows - wide_rows);
    row = row > 0 ? row : 0;
    double elem = (t[k] - wide_rows * row) / OP_ELEMS;
    p->op_ns[k] = (elem > 0 ? elem : 0) * 1e9;
    p->row_ns[k] = row * 1e9;
  }
  return STRATA_OK;
}

/*
** Every device's figures. Each round goes device by device, so that a
** burst of others' load falls on every device alike, not on the one being
** measured then: devices that are alike come out alike.
*/
static int measure_all(const int *dev, int n, struct probe *p) {
  int rc = STRATA_OK, opened = 0;
  for (int i = 0; i < n && !rc; i++, opened++)
    rc = probe_open(&p[i], dev[i]);
  for (int r = 0; r <= OP_REPS && !rc; r++)
    for (int i = 0; i < n && !rc; i++)
      rc = probe_gemm_round(&p[i], r);
  for (int r = 0; r <= OP_REPS && !rc; r++)
    for (int i = 0; i < n && !rc; i++)
      rc = probe_ops_round(&p[i], r);
  for (int i = 0; i < n && !rc; i++)
    rc = probe_finish(&p[i]);
  for (int i = 0; i < opened; i++)
    probe_close(&p[i]);
  return rc;
}

/* Seconds each GEMM loop of the core measurement runs, and its GEMMs' size. */
#define BUSY_S 0.2
#define BUSY_N 256
/* Rounds of the core measurement (each device alone, then all at once), the median share counted. */
#define BUSY_ROUNDS 5

struct busy {
  int dev;
  double start;                 /* when to begin (strata__now), so that every device's loop runs at once */
  double rate;                  /* rounds of the loop per second */
  double *window;               /* [BUSY_WINDOWS] seconds of each run of rounds lasting SPREAD_WINDOW_S or more */
  int nwindow;
  int rc;
};

/* The spread of a device's run times is measured over windows of about a training step's action on a small
** model (a few layers' forward or backward): a few milliseconds of the loop's rounds each. */
#define SPREAD_WINDOW_S 0.003
#define BUSY_WINDOWS 4096

/*
** A loop like a training step's work on one device for BUSY_S seconds
** from b->start: a GEMM of BUSY_N, then an add and a GELU over OP_ELEMS
** elements, then a wait, each round on buffers of about a layer's size. So
** the devices running at once contend as a step's do, for the cores and for
** the caches and memory bandwidth that GEMMs alone hardly use. Rounds per
** second.
*/
static void *busy_main(void *arg) {
  struct busy *b = arg;
  strata_queue_t q = NULL;
  strata_buffer_t a = NULL;
  const int64_t n = BUSY_N, e = OP_ELEMS;
  const size_t floats = (size_t)(2 * n * n) + 3 * (size_t)e;
  b->rc = strata_queue_new(b->dev, &q);
  if (!b->rc)
    b->rc = strata_buffer_new(b->dev, floats * 4, &a);
  if (!b->rc)
    b->rc = strata_fill(q, strata_mem(a, 0), 0.5f, (int64_t)floats);
  if (!b->rc)
    b->rc = strata_queue_finish(q);
  while (!b->rc && strata__now() < b->start)
    usleep(1000);
  const size_t x = (size_t)(2 * n * n);
  double t0 = strata__now(), t = t0, w0 = t0;
  int64_t rounds = 0;
  b->nwindow = 0;
  while (!b->rc && t - t0 < BUSY_S) {
    b->rc = strata_gemm(q, 0, 0, n, n, n, 1, strata_mem(a, 0), n, 0, strata_mem(a, 0), n, 0, 0,
                        strata_mem(a, (size_t)(n * n)), n, 0, 1);
    if (!b->rc)
      b->rc = strata_add(q, strata_mem(a, x), strata_mem(a, x + (size_t)e), strata_mem(a, x + 2 * (size_t)e), e);
    if (!b->rc)
      b->rc = strata_gelu_fwd(q, strata_mem(a, x + 2 * (size_t)e), strata_mem(a, x), e);
    if (!b->rc)
      b->rc = strata_queue_finish(q);
    rounds++;
    t = strata__now();
    if (b->window && t - w0 >= SPREAD_WINDOW_S && b->nwindow < BUSY_WINDOWS) {
      b->window[b->nwindow++] = t - w0;
      w0 = t;
    }
  }
  b->rate = (double)rounds / (t - t0);
  strata_buffer_free(a);
  strata_queue_free(q);
  return NULL;
}

/* Quantiles at probabilities (i + 0.5) / np of v[0..n) (sorted here), linear between the sorted values. */
static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
static void quantiles(double *v, int n, int np, double *out) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  for (int i = 0; i < np; i++) {
    const double at = (i + 0.5) / np * (n - 1);
    const int j = (int)at;
    out[i] = j + 1 < n ? v[j] + (at - j) * (v[j + 1] - v[j]) : v[n - 1];
  }
}

/* Append each window of b over the median window of b to r (at *nr; their order there is the median's). */
static void add_ratios(const struct busy *b, double *r, int *nr) {
  if (b->nwindow < 1)
    return;
  double *w = &r[*nr];
  memcpy(w, b->window, (size_t)b->nwindow * sizeof *w);
  const double med = strata__plan_median(w, b->nwindow);
  if (!(med > 0))
    return;
  for (int k = 0; k < b->nwindow; k++)
    w[k] /= med;
  *nr += b->nwindow;
}

/*
** The host cores that the devices computing on the CPU get together, as
** the machine is now (other processes take their share): each device's
** speed at a step's kind of work (busy_main) alone, then all at once;
** each device counts its threads times the share of its speed it keeps
** (the median of BUSY_ROUNDS rounds: one round on a machine others load
** often catches a burst). Written beside the core count the system
** reports, which the simulator uses when this is missing. And each
** device's spread (spread[i * STRATA_PLAN_SPREAD_POINTS ...]): the
** quantiles of its windows' times over each loop's median window, in the
** loops all at once (alone where it is the only one), as the devices of a
** step run.
*/
static int effective_cores(const int *cpu, const int *threads, int n, double *cores, double *spread) {
  *cores = 0;
  if (n == 0)
    return STRATA_OK;
  struct busy *alone = calloc((size_t)n, sizeof *alone), *all = calloc((size_t)n, sizeof *all);
  pthread_t *th = calloc((size_t)n, sizeof *th);
  double *win = calloc((size_t)n * BUSY_WINDOWS, sizeof *win);
  double *ratio = calloc((size_t)n * BUSY_ROUNDS * BUSY_WINDOWS, sizeof *ratio);
  int *nratio = calloc((size_t)n, sizeof *nratio);
  int rc = alone && all && th && win && ratio && nratio ? STRATA_OK
                                                        : strata__error(STRATA_ERR_NOMEM, "calibration: out of host memory");
  double keep[BUSY_ROUNDS][64];
  const int nk = n < 64 ? n : 64;
  for (int round = 0; round < BUSY_ROUNDS && !rc; round++) {
    for (int i = 0; i < n && !rc; i++) {
      alone[i] = (struct busy){.dev = cpu[i], .window = n == 1 ? &win[(size_t)i * BUSY_WINDOWS] : NULL};
      busy_main(&alone[i]);
      rc = alone[i].rc;
    }
    if (!rc && n > 1) {
      /* buffers and queues take a while to set up: every loop starts at one time, after that */
      const double go = strata__now() + 0.1;
      int made = 0;
      for (int i = 0; i < n; i++) {
        all[i] = (struct busy){.dev = cpu[i], .start = go, .window = &win[(size_t)i * BUSY_WINDOWS]};
        if (pthread_create(&th[i], NULL, busy_main, &all[i]) != 0) {
          rc = strata__error(STRATA_ERR_INTERNAL, "calibration: cannot start a thread");
          break;
        }
        made++;
      }
      for (int i = 0; i < made; i++) {
        pthread_join(th[i], NULL);
        rc = rc ? rc : all[i].rc;
      }
    }
    for (int i = 0; i < n && !rc; i++)
      add_ratios(n > 1 ? &all[i] : &alone[i], &ratio[(size_t)i * BUSY_ROUNDS * BUSY_WINDOWS], &nratio[i]);
    for (int i = 0; i < nk && !rc; i++) {
      double k = n > 1 ? all[i].rate / alone[i].rate : 1;
      keep[round][i] = k < 1 ? k : 1;
    }
  }
  for (int i = 0; i < n && !rc; i++) {
    double v[BUSY_ROUNDS];
    for (int round = 0; round < BUSY_ROUNDS; round++)
      v[round] = keep[round][i < nk ? i : nk - 1];
    *cores += threads[i] * strata__plan_median(v, BUSY_ROUNDS);
    double *sp = &spread[(size_t)i * STRATA_PLAN_SPREAD_POINTS];
    if (nratio[i] > 0)
      quantiles(&ratio[(size_t)i * BUSY_ROUNDS * BUSY_WINDOWS], nratio[i], STRATA_PLAN_SPREAD_POINTS, sp);
    else
      for (int q = 0; q < STRATA_PLAN_SPREAD_POINTS; q++)
        sp[q] = 0; /* too slow a device for one window: no spread */
  }
  free(alone);
  free(all);
  free(th);
  free(win);
  free(ratio);
  free(nratio);
  return rc;
}

/* Each timed run of one of a model's GEMMs repeats it until this long has passed (at least once). */
#define SHAPE_RUN_S 0.005
/* A model's GEMMs are enqueued this many at a time before one wait, as a step enqueues its layers' GEMMs
** without waiting between them: the wait's round trip (tens of microseconds on a host device, as long as
** a small GEMM) is not the GEMM's. */
#define SHAPE_CALLS 8

/* One timed run of `sh` on q over the buffers a, b, c (big enough): seconds per GEMM batch. */
static int time_shape(strata_queue_t q, const struct strata_gemm_shape *sh, strata_buffer_t a, strata_buffer_t b,
                      strata_buffer_t c, double *s) {
  const int64_t m = sh->m, n = sh->n, k = sh->k;
  const int64_t lda = sh->trans_a ? m : k, ldb = sh->trans_b ? k : n;
  double t0 = strata__now(), dt = 0;
  int64_t runs = 0;
  int rc = STRATA_OK;
  while (!rc && (runs == 0 || dt < SHAPE_RUN_S)) {
    for (int i = 0; i < SHAPE_CALLS && !rc; i++, runs++)
      rc = strata_gemm(q, sh->trans_a, sh->trans_b, m, n, k, 1, strata_mem(a, 0), lda, m * k, strata_mem(b, 0), ldb,
                       k * n, 0, strata_mem(c, 0), n, m * n, sh->batch);
    if (!rc)
      rc = strata_queue_finish(q);
    dt = strata__now() - t0;
  }
  *s = dt / (double)runs;
  return rc;
}

/*
** GFLOP/s of each of the `ns` GEMMs `sh` on each of the n devices (out[i *
** ns + s]): the median of OP_REPS rounds after a warm-up, each round going
** device by device and shape by shape, as the other figures are measured.
*/
static int measure_shapes(const int *dev, int n, const struct strata_gemm_shape *sh, int ns, double *out) {
  size_t fa = 1, fb = 1, fc = 1;
  for (int s = 0; s < ns; s++) {
    const size_t bt = (size_t)sh[s].batch;
    fa = (size_t)(sh[s].m * sh[s].k) * bt > fa ? (size_t)(sh[s].m * sh[s].k) * bt : fa;
    fb = (size_t)(sh[s].k * sh[s].n) * bt > fb ? (size_t)(sh[s].k * sh[s].n) * bt : fb;
    fc = (size_t)(sh[s].m * sh[s].n) * bt > fc ? (size_t)(sh[s].m * sh[s].n) * bt : fc;
  }
  strata_queue_t *q = calloc((size_t)n, sizeof *q);
  strata_buffer_t *buf = calloc(3 * (size_t)n, sizeof *buf);
  double *t = calloc((size_t)n * (size_t)ns * OP_REPS, sizeof *t);
  int rc = q && buf && t ? STRATA_OK : strata__error(STRATA_ERR_NOMEM, "calibration: out of host memory");
  for (int i = 0; i < n && !rc; i++) {
    const size_t floats[3] = {fa, fb, fc};
    rc = strata_queue_new(dev[i], &q[i]);
    for (int j = 0; j < 3 && !rc; j++) {
      rc = strata_buffer_new(dev[i], floats[j] * 4, &buf[3 * i + j]);
      if (!rc)
        rc = strata_fill(q[i], strata_mem(buf[3 * i + j], 0), 0.5f, (int64_t)floats[j]);
    }
    if (rc)
      rc = strata__error(rc, "calibration: device %d: cannot hold the model's largest GEMM (%zu, %zu and %zu floats): %s",
                         dev[i], fa, fb, fc, strata_last_error());
  }
  for (int r = 0; r <= OP_REPS && !rc; r++)
    for (int i = 0; i < n && !rc; i++)
      for (int s = 0; s < ns && !rc; s++) {
        double x = 0;
        rc = time_shape(q[i], &sh[s], buf[3 * i], buf[3 * i + 1], buf[3 * i + 2], &x);
        if (r > 0)
          t[((size_t)i * (size_t)ns + (size_t)s) * OP_REPS + (size_t)(r - 1)] = x;
      }
  for (int i = 0; i < n && !rc; i++)
    for (int s = 0; s < ns; s++) {
      const double sec = strata__plan_median(&t[((size_t)i * (size_t)ns + (size_t)s) * OP_REPS], OP_REPS);
      out[(size_t)i * (size_t)ns + (size_t)s] =
          sec > 0 ? 2.0 * (double)sh[s].m * (double)sh[s].n * (double)sh[s].k * (double)sh[s].batch / sec / 1e9 : 0;
    }
  for (int i = 0; q && buf && i < n; i++) {
    for (int j = 0; j < 3; j++)
      strata_buffer_free(buf[3 * i + j]);
    strata_queue_free(q[i]);
  }
  free(q);
  free(buf);
  free(t);
  return rc;
}

/* *json anew from root, after a probe added to it; the old text freed. */
static int redump(json_t *root, int rc, char **json) {
  free(*json);
  *json = rc ? NULL : json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
  return rc || *json ? rc : strata__error(STRATA_ERR_NOMEM, "calibration: out of host memory");
}

/* The distinct GEMMs the simulator costs `model` with, for every micro-batch size and tp degree asked. */
static int model_shapes(strata_model_t model, const int64_t *rows, int nrows, int max_tp,
                        struct strata_gemm_shape **out, int *count) {
  *out = NULL;
  *count = 0;
  const struct strata_model_config *cfg = strata_model_config(model);
  struct strata_gemm_shape *all = NULL;
  int n = 0, rc = STRATA_OK;
  for (int r = 0; r < nrows && !rc; r++)
    for (int t = 1; t <= max_tp && !rc; t++)
      if (cfg->kind != STRATA_MODEL_GPT || cfg->heads % t == 0)
        rc = strata__plan_gemm_shapes(model, t, rows[r], &all, &n);
  if (rc) {
    free(all);
    return rc;
  }
  *out = all;
  *count = n;
  return STRATA_OK;
}

/* Floats of the all-reduces timed between each pair (the first, small one also gives the pair's latency: what
** a send or a collective pays beyond its bytes), the repetitions of each, and the GEMM (n x n x n) each
** member computes before each all-reduce in the timing between work. */
static const double coll_floats[] = {256, 4096, 32768, 262144, 2097152};
#define NCOLL (int)(sizeof coll_floats / sizeof coll_floats[0])
#define COLL_REPS 5
#define COLL_ROUNDS 12
#define COLL_GEMM_N 128

/* Seconds of COLL_ROUNDS rounds on the pair: each member's GEMM, then the all-reduce of `count` floats (none
** where count is 0), all enqueued before one wait. */
static int pair_rounds(strata_comm_t comm, strata_queue_t *q, strata_mem_t *x, strata_buffer_t *g, size_t count,
                       double *sec) {
  const int64_t n = COLL_GEMM_N;
  double t0 = strata__now();
  int rc = STRATA_OK;
  for (int r = 0; r < COLL_ROUNDS && !rc; r++) {
    for (int i = 0; i < 2 && !rc; i++)
      rc = strata_gemm(q[i], 0, 0, n, n, n, 1, strata_mem(g[i], 0), n, 0, strata_mem(g[i], 0), n, 0, 0,
                       strata_mem(g[i], (size_t)(n * n)), n, 0, 1);
    if (!rc && count)
      rc = strata_allreduce(comm, q, x, x, count, STRATA_FLOAT32, STRATA_SUM);
  }
  if (!rc)
    rc = strata_comm_finish(comm);
  for (int i = 0; i < 2 && !rc; i++)
    rc = strata_queue_finish(q[i]);
  *sec = strata__now() - t0;
  return rc;
}

/*
** Seconds that strata's own all-reduce between devices a and b, the pair
** its only members, adds at each of the sizes coll_floats, and the pair's
** latency in microseconds. Through a communicator, as a tp join or a
** gradient reduction runs it (its threads, hand-offs, chunks and copies).
** A join sits between work that needs it: each is timed between GEMMs on
** both members, less the GEMMs alone, rounds enqueued at once, as a step
** enqueues them; on a host device this costs two to three times an
** all-reduce alone (the queues' threads hand the work back and forth). At
** least the all-reduce alone and waited for, whose smallest gives the
** latency (a ring of two takes two steps: half of it). Medians of
** COLL_REPS after a warm-up.
*/
static int pair_allreduce(int a, int b, double *sec, double *lat_us) {
  const int devs[2] = {a, b};
  const int64_t most = (int64_t)coll_floats[NCOLL - 1], gn = COLL_GEMM_N;
  strata_comm_t comm = NULL;
  strata_queue_t q[2] = {NULL, NULL};
  strata_buffer_t buf[2] = {NULL, NULL}, g[2] = {NULL, NULL};
  strata_mem_t m[2];
  int rc = strata_comm_new(devs, 2, NULL, &comm);
  for (int i = 0; i < 2 && !rc; i++) {
    rc = strata_queue_new(devs[i], &q[i]);
    if (!rc)
      rc = strata_buffer_new(devs[i], (size_t)most * 4, &buf[i]);
    if (!rc)
      rc = strata_buffer_new(devs[i], (size_t)(2 * gn * gn * 4), &g[i]);
    if (!rc) {
      m[i] = strata_mem(buf[i], 0);
      rc = strata_fill(q[i], m[i], 1.0f / 1024, most);
    }
    if (!rc)
      rc = strata_fill(q[i], strata_mem(g[i], 0), 0.5f, 2 * gn * gn);
  }
  for (int s = 0; s < NCOLL && !rc; s++) {
    double alone[COLL_REPS], between[COLL_REPS];
    for (int r = 0; r <= COLL_REPS && !rc; r++) {
      double t0 = strata__now(), work = 0, both = 0;
      rc = strata_allreduce_sync(comm, q, m, m, (size_t)coll_floats[s], STRATA_FLOAT32, STRATA_SUM);
      for (int i = 0; i < 2 && !rc; i++)
        rc = strata_queue_finish(q[i]);
      const double t1 = strata__now() - t0;
      if (!rc)
        rc = pair_rounds(comm, q, m, g, 0, &work);
      if (!rc)
        rc = pair_rounds(comm, q, m, g, (size_t)coll_floats[s], &both);
      if (r > 0) {
        alone[r - 1] = t1;
        between[r - 1] = (both - work) / COLL_ROUNDS;
      }
    }
    if (!rc) {
      const double x = strata__plan_median(alone, COLL_REPS), y = strata__plan_median(between, COLL_REPS);
      sec[s] = y > x ? y : x;
      if (s == 0)
        *lat_us = x / 2 * 1e6;
    }
  }
  strata_comm_free(comm);
  for (int i = 0; i < 2; i++) {
    strata_buffer_free(buf[i]);
    strata_buffer_free(g[i]);
    strata_queue_free(q[i]);
  }
  if (rc)
    rc = strata__error(rc, "calibration: the all-reduce between devices %d and %d: %s", a, b, strata_last_error());
  return rc;
}

/* A calibration's progress, logged (info, subsystem "calibrate") with the seconds since it began. */
__attribute__((format(printf, 2, 3))) static void progress(double t_start, const char *fmt, ...) {
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  strata__log(STRATA_LOG_INFO, "calibrate", "%.1f s: %s", strata__now() - t_start, what);
}

STRATA_API int strata_calibrate(const int *devices, int n, char **json) {
  if (!json)
    return strata__error(STRATA_ERR_INVALID, "strata_calibrate: json is NULL");
  return strata_calibrate_model(devices, n, NULL, NULL, 0, 0, json);
}

STRATA_API int strata_calibrate_model(const int *devices, int n, strata_model_t model, const int64_t *rows, int nrows,
                                      int max_tp, char **json) {
  if (!json)
    return strata__error(STRATA_ERR_INVALID, "strata_calibrate_model: json is NULL");
  *json = NULL;
  if (model && (!rows || nrows < 1 || max_tp < 1))
    return strata__error(STRATA_ERR_INVALID,
                         "strata_calibrate_model: a model needs at least one micro-batch size and a tp degree of 1 or "
                         "more");
  for (int r = 0; model && r < nrows; r++)
    if (rows[r] < 1 || rows[r] > (1 << 20))
      return strata__error(STRATA_ERR_RANGE, "calibration: %lld samples per micro-batch, expected 1 to %d",
                           (long long)rows[r], 1 << 20);
  int count = 0;
  TRY(strata_device_count(&count));
  if (!devices)
    n = count;
  if (n < 1)
    return strata__error(STRATA_ERR_NOT_FOUND, "calibration: no device to measure");
  for (int i = 0; devices && i < n; i++)
    if (devices[i] < 0 || devices[i] >= count)
      return strata__error(STRATA_ERR_RANGE, "calibration: device %d does not exist (%d devices)", devices[i], count);
  const double t_start = strata__now();
  strata_topology_t topo = NULL;
  int rc = strata_topology_load(NULL, &topo);
  if (!rc)
    rc = strata_topology_map_runtime(topo);
  /* copies between every pair of devices, as the links' planning figures */
  if (!rc && n > 1) {
    progress(t_start, "copies between %d pair%s of devices", n * (n - 1) / 2, n == 2 ? "" : "s");
    rc = strata_topology_measure(topo, COPY_BYTES, REPS);
  }
  json_t *root = json_object(), *devs = json_array(), *gbps = json_array(), *lat = json_array();
  int *cpu = calloc((size_t)n, sizeof *cpu), *cpu_threads = calloc((size_t)n, sizeof *cpu_threads), ncpu = 0;
  if (!cpu || !cpu_threads)
    rc = rc ? rc : strata__error(STRATA_ERR_NOMEM, "calibration: out of host memory");
  if (!root || !devs || !gbps || !lat)
    rc = rc ? rc : strata__error(STRATA_ERR_NOMEM, "calibration: out of host memory");
  int *dev = calloc((size_t)n, sizeof *dev);
  struct probe *probes = calloc((size_t)n, sizeof *probes);
  if (!dev || !probes)
    rc = rc ? rc : strata__error(STRATA_ERR_NOMEM, "calibration: out of host memory");
  for (int i = 0; i < n && !rc; i++)
    dev[i] = devices ? devices[i] : i;
  if (!rc) {
    progress(t_start, "GEMM speeds, ops, memory and launch overhead of %d device%s", n, n == 1 ? "" : "s");
    rc = measure_all(dev, n, probes);
  }
  /* the model's own GEMMs, where one is given */
  struct strata_gemm_shape *shapes = NULL;
  int nshapes = 0;
  double *shape_gflops = NULL;
  if (!rc && model)
    rc = model_shapes(model, rows, nrows, max_tp, &shapes, &nshapes);
  if (!rc && nshapes > 0) {
    shape_gflops = calloc((size_t)n * (size_t)nshapes, sizeof *shape_gflops);
    progress(t_start, "the model's %d GEMMs on each device", nshapes);
    rc = shape_gflops ? measure_shapes(dev, n, shapes, nshapes, shape_gflops)
                      : strata__error(STRATA_ERR_NOMEM, "calibration: out of host memory");
  }
  /* a GPT's stage probe, for the first micro-batch size */
  strata_model_t pm = NULL;
  double *probe_s = NULL;
  const int probing = model && strata_model_config(model)->kind == STRATA_MODEL_GPT;
  if (!rc && probing) {
    probe_s = calloc((size_t)n, sizeof *probe_s);
    rc = probe_s ? strata__plan_probe_model(model, &pm)
                 : strata__error(STRATA_ERR_NOMEM, "calibration: out of host memory");
    if (!rc) {
      progress(t_start, "the stage probe (one block, %lld samples) on each device", (long long)rows[0]);
      rc = strata__plan_probe_stages(dev, n, pm, rows[0], probe_s);
    }
  }
  /* a pipeline over them all, with as many blocks */
  strata_model_t pipe_m = NULL;
  double pipe_s = 0;
  if (!rc && probing && n > 1) {
    struct strata_model_config pc = *strata_model_config(model);
    pc.layers = n;
    rc = strata_model_from_config(&pc, &pipe_m);
    if (rc)
      rc = strata__error_prefix(rc, "calibration: the pipeline probe's model: ");
    else {
      progress(t_start, "the pipeline probe (%d blocks over %d devices)", n, n);
      rc = strata__plan_pipe_measure(dev, n, pipe_m, rows[0], &pipe_s);
    }
  }
  /* the runtime's all-reduce between every pair, timed once per pair (both directions alike) */
  double *ar = calloc((size_t)n * (size_t)n * NCOLL, sizeof *ar), *ar_lat = calloc((size_t)n * (size_t)n, sizeof *ar_lat);
  if (!ar || !ar_lat)
    rc = rc ? rc : strata__error(STRATA_ERR_NOMEM, "calibration: out of host memory");
  if (!rc && n > 1)
    progress(t_start, "all-reduces between %d pair%s of devices", n * (n - 1) / 2, n == 2 ? "" : "s");
  for (int i = 0; i < n && !rc; i++)
    for (int j = i + 1; j < n && !rc; j++) {
      double *ij = &ar[((size_t)i * (size_t)n + (size_t)j) * NCOLL], *ji = &ar[((size_t)j * (size_t)n + (size_t)i) * NCOLL];
      rc = pair_allreduce(dev[i], dev[j], ij, &ar_lat[(size_t)i * (size_t)n + (size_t)j]);
      memcpy(ji, ij, NCOLL * sizeof *ji);
      ar_lat[(size_t)j * (size_t)n + (size_t)i] = ar_lat[(size_t)i * (size_t)n + (size_t)j];
    }
  for (int i = 0; i < n && !rc; i++) {
    const int d = dev[i];
    struct strata_device_props p;
    const struct probe *pr = &probes[i];
    const double *g = pr->gflops, bw = pr->mem_gbps, launch = pr->launch_us, sync = pr->sync_us;
    const double *ops = pr->op_ns, *per_row = pr->row_ns;
    rc = strata_device_props(d, &p);
    if (rc)
      break;
    if (p.is_cpu) {
      cpu[ncpu] = d;
      cpu_threads[ncpu++] = p.compute_units > 0 ? p.compute_units : 1;
    }
    json_t *sizes = json_array();
    for (int s = 0; s < NSIZES; s++)
      json_array_append_new(sizes, json_pack("[i, f]", gemm_sizes[s], g[s]));
    /* the planning figure: the largest size, nearest the GEMMs of a training step (the smaller ones
    ** fit in cache and may run faster than a layer's) */
    const double best = g[NSIZES - 1];
    json_t *opj = json_object(), *rowj = json_object();
    for (int k = 0; k < STRATA_PLAN_OP_COUNT; k++) {
      json_object_set_new(opj, strata__plan_op_names[k], json_real(ops[k]));
      if (per_row[k] > 0)
        json_object_set_new(rowj, strata__plan_op_names[k], json_real(per_row[k]));
    }
    /* a device that computes on the host's cores shares them with the other such devices */
    json_t *entry = json_pack("{s:i, s:s, s:s, s:f, s:o, s:f, s:f, s:f, s:I, s:o, s:o, s:i}", "device", d, "name",
                              p.name, "backend", p.backend, "gflops", best, "gemm", sizes, "mem_gbps", bw,
                              "launch_us", launch, "sync_us", sync, "memory", (json_int_t)p.memory_limit, "op_ns",
                              opj, "op_row_ns", rowj, "cpu_threads",
                              p.is_cpu ? (p.compute_units > 0 ? p.compute_units : 1) : 0);
    if (entry && nshapes > 0) {
      /* [m, n, k, trans_a, trans_b, batch, GFLOP/s] */
      json_t *shj = json_array();
      for (int s = 0; s < nshapes; s++)
        json_array_append_new(shj, json_pack("[I, I, I, i, i, I, f]", (json_int_t)shapes[s].m,
                                             (json_int_t)shapes[s].n, (json_int_t)shapes[s].k, shapes[s].trans_a,
                                             shapes[s].trans_b, (json_int_t)shapes[s].batch,
                                             shape_gflops[(size_t)i * (size_t)nshapes + (size_t)s]));
      json_object_set_new(entry, "gemm_shapes", shj);
    }
    json_array_append_new(devs, entry);
    json_t *row = json_array(), *lrow = json_array();
    for (int j = 0; j < n; j++) {
      struct strata_link l = {0};
      const int e = devices ? devices[j] : j;
      if (i != j && strata_topology_device_link(topo, d, e, &l) != STRATA_OK)
        l.gbps = 0;
      const double cl = ar_lat[(size_t)i * (size_t)n + (size_t)j];
      if (i != j && cl > l.latency_us)
        l.latency_us = cl; /* what the runtime's own collectives and sends pay, beyond the copy's */
      json_array_append_new(row, json_real(i == j ? 0 : l.gbps));
      json_array_append_new(lrow, json_real(i == j ? 0 : l.latency_us));
    }
    json_array_append_new(gbps, row);
    json_array_append_new(lat, lrow);
  }
  if (!rc) {
    struct strata_topology_host h;
    strata_topology_host(topo, &h);
    json_object_set_new(root, "schema", json_string("strata-calibration/1"));
    json_object_set_new(root, "host", json_string(h.hostname));
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    double eff = 0, *spread = calloc((size_t)(ncpu > 0 ? ncpu : 1) * STRATA_PLAN_SPREAD_POINTS, sizeof *spread);
    rc = spread ? effective_cores(cpu, cpu_threads, ncpu, &eff, spread)
                : strata__error(STRATA_ERR_NOMEM, "calibration: out of host memory");
    json_object_set_new(root, "cpu_cores", json_integer(cores > 0 ? cores : 1));
    if (!rc && ncpu > 0)
      json_object_set_new(root, "cpu_cores_effective", json_real(eff < cores ? eff : (double)cores));
    /* the CPU devices' spreads, in the order they were listed */
    for (int i = 0, c = 0; !rc && i < n; i++) {
      json_t *entry = json_array_get(devs, (size_t)i);
      if (json_integer_value(json_object_get(entry, "cpu_threads")) <= 0)
        continue;
      const double *sp = &spread[(size_t)c++ * STRATA_PLAN_SPREAD_POINTS];
      if (!(sp[0] > 0))
        continue;
      json_t *arr = json_array();
      for (int q = 0; q < STRATA_PLAN_SPREAD_POINTS; q++)
        json_array_append_new(arr, json_real(sp[q]));
      json_object_set_new(entry, "spread", arr);
    }
    free(spread);
  }
  if (!rc) {
    json_object_set_new(root, "devices", devs);
    json_object_set_new(root, "gbps", gbps);
    json_object_set_new(root, "latency_us", lat);
    devs = gbps = lat = NULL;
    if (n > 1) {
      /* {"floats": [sizes], "seconds": [n x n x sizes]}: the pairs' all-reduces, which the simulator's
      ** collectives take instead of the links' figures */
      json_t *arj = json_object(), *fl = json_array(), *sec = json_array();
      for (int s = 0; s < NCOLL; s++)
        json_array_append_new(fl, json_integer((json_int_t)coll_floats[s]));
      for (int i = 0; i < n; i++) {
        json_t *row = json_array();
        for (int j = 0; j < n; j++) {
          json_t *cell = json_array();
          for (int s = 0; s < NCOLL; s++)
            json_array_append_new(cell, json_real(ar[((size_t)i * (size_t)n + (size_t)j) * NCOLL + (size_t)s]));
          json_array_append_new(row, cell);
        }
        json_array_append_new(sec, row);
      }
      json_object_set_new(arj, "floats", fl);
      json_object_set_new(arj, "seconds", sec);
      json_object_set_new(root, "allreduce", arj);
    }
    *json = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (!*json)
      rc = strata__error(STRATA_ERR_NOMEM, "calibration: out of host memory");
    if (!rc && probing)
      rc = redump(root, strata__plan_stage_factors(root, *json, pm, rows[0], probe_s), json);
    if (!rc && pipe_m) /* on the figures with the stage factors */
      rc = redump(root, strata__plan_pipe_fit(root, *json, pipe_m, n, rows[0], pipe_s), json);
  }
  strata_model_free(pm);
  strata_model_free(pipe_m);
  free(probe_s);
  free(dev);
  free(probes);
  free(shapes);
  free(shape_gflops);
  free(ar);
  free(ar_lat);
  free(cpu);
  free(cpu_threads);
  json_decref(devs);
  json_decref(gbps);
  json_decref(lat);
  json_decref(root);
  strata_topology_free(topo);
  if (!rc)
    progress(t_start, "done");
  return rc;
}

/* Sizes and timed products of strata_calibrate_bf16's GEMMs: the fp32 calibration's larger sizes (the small ones
** say little of a training step's GEMMs), the fastest of a few. */
static const int bf16_sizes[] = {128, 256, 512, 1024};
#define BF16_NSIZES ((int)(sizeof bf16_sizes / sizeof bf16_sizes[0]))
#define BF16_REPS 3

STRATA_API int strata_calibrate_bf16(const char *in, char **out) {
  if (!out)
    return strata__error(STRATA_ERR_INVALID, "strata_calibrate_bf16: out is NULL");
  *out = NULL;
  if (!in)
    return strata__error(STRATA_ERR_INVALID, "strata_calibrate_bf16: the calibration is NULL");
  json_error_t err;
  json_t *root = json_loads(in, JSON_REJECT_DUPLICATES, &err);
  if (!root)
    return strata__error(STRATA_ERR_PARSE, "calibration: line %d: %s", err.line, err.text);
  json_t *devs = json_object_get(root, "devices");
  int rc = json_is_array(devs) ? STRATA_OK
                               : strata__error(STRATA_ERR_PARSE, "calibration: no \"devices\" array to add bf16 to");
  for (size_t i = 0; !rc && i < json_array_size(devs); i++) {
    json_t *d = json_array_get(devs, i), *dv = json_object_get(d, "device");
    if (!json_is_integer(dv) || json_integer_value(dv) < 0 || json_integer_value(dv) > INT_MAX) {
      rc = strata__error(STRATA_ERR_PARSE, "calibration: device %zu: \"device\" must be a runtime index", i);
      break;
    }
    const int dev = (int)json_integer_value(dv);
    json_t *sizes = json_array();
    double g = 0;
    for (int s = 0; s < BF16_NSIZES && !rc; s++) {
      rc = strata_device_gemm_speed_as(dev, STRATA_BFLOAT16, bf16_sizes[s], BF16_REPS, &g, NULL);
      if (!rc)
        json_array_append_new(sizes, json_pack("[i, f]", bf16_sizes[s], g));
    }
    if (rc == STRATA_ERR_UNSUPPORTED) { /* a backend without bf16 operands: the device plans fp32 only, said */
      strata__log(STRATA_LOG_WARN, "calibrate", "device %d has no bf16 GEMM (%s): no \"bf16_gflops\" for it, and a "
                  "bf16 plan on it is refused", dev, strata_last_error());
      json_decref(sizes);
      rc = STRATA_OK;
      continue;
    }
    if (rc) {
      json_decref(sizes);
      rc = strata__error(rc, "calibrating device %d's bf16 GEMMs: %s", dev, strata_last_error());
      break;
    }
    strata__log(STRATA_LOG_INFO, "calibrate", "device %d: bf16 GEMM %.1f GFLOP/s at n = %d", dev, g,
                bf16_sizes[BF16_NSIZES - 1]);
    /* the planning figure: the largest size's, as for fp32 */
    json_object_set_new(d, "bf16_gflops", json_real(g));
    json_object_set_new(d, "bf16_gemm", sizes);
  }
  if (!rc) {
    *out = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS); /* as strata_calibrate writes it */
    if (!*out)
      rc = strata__error(STRATA_ERR_NOMEM, "out of host memory writing a calibration");
  }
  json_decref(root);
  return rc;
}
