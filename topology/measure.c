/* SPDX-License-Identifier: MIT */
/* measure.c — bandwidth calibration: time copies between every pair of runtime devices and between host and device, through the public device API only. */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "core/core.h"

#define MEASURE_DEFAULT_BYTES ((size_t)16 << 20)
#define MEASURE_DEFAULT_REPS 3

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Per device: one buffer and one queue, made on first use. */
struct mdev {
  strata_buffer_t buf;
  strata_queue_t queue;
  int failed;
};

static int prepare(struct mdev *m, int dev, size_t bytes, const void *pattern) {
  if (m->failed)
    return STRATA_ERR_STATE;
  int rc = STRATA_OK;
  if (!m->queue)
    rc = strata_queue_new(dev, &m->queue);
  if (rc == STRATA_OK && !m->buf)
    rc = strata_buffer_new(dev, bytes, &m->buf);
  if (rc == STRATA_OK)
    rc = strata_buffer_upload(m->queue, m->buf, 0, pattern, bytes); /* also warms the path */
  if (rc != STRATA_OK)
    m->failed = 1;
  return rc;
}

/* Best time of `reps` runs of one copy kind; returns GB/s, or 0 on error (*rc set). */
static double time_copy(struct mdev *dst, struct mdev *src, void *host, size_t bytes, int reps, int *rc) {
  double best = 0;
  for (int r = 0; r < reps + 1; r++) { /* the first run is a warm-up */
    double t0 = now_s();
    int e;
    if (dst && src) {
      e = strata_buffer_copy(dst->queue, dst->buf, 0, src->buf, 0, bytes);
      if (e == STRATA_OK)
        e = strata_queue_finish(dst->queue);
    } else if (dst) {
      e = strata_buffer_write(dst->queue, dst->buf, 0, host, bytes);
      if (e == STRATA_OK)
        e = strata_queue_finish(dst->queue);
    } else {
      e = strata_buffer_read(src->queue, src->buf, 0, host, bytes);
      if (e == STRATA_OK)
        e = strata_queue_finish(src->queue);
    }
    double dt = now_s() - t0;
    if (e != STRATA_OK) {
      *rc = e;
      return 0;
    }
    if (r > 0 && dt > 0) {
      double gbps = (double)bytes / dt / 1e9;
      if (gbps > best)
        best = gbps;
    }
  }
  return best;
}

/*
** Host to each device, each device to the host, then every ordered pair.
** Buffers and queues are freed before returning. The first failure is
** kept (its message too) and returned once every pair was tried.
*/
STRATA_API int strata_topology_measure(strata_topology_t t, size_t bytes, int reps) {
  if (!t)
    return strata__error(STRATA_ERR_INVALID, "strata_topology_measure: NULL topology");
  if (!t->devs)
    return strata__error(STRATA_ERR_STATE, "strata_topology_measure: map the runtime devices first");
  if (bytes == 0)
    bytes = MEASURE_DEFAULT_BYTES;
  if (reps <= 0)
    reps = MEASURE_DEFAULT_REPS;
  int n = t->ndev;
  struct mdev *m = calloc((size_t)n + 1, sizeof *m);
  unsigned char *host = malloc(bytes);
  if (!m || !host) {
    free(m);
    free(host);
    return strata__error(STRATA_ERR_NOMEM, "strata_topology_measure: out of memory for %zu bytes", bytes);
  }
  for (size_t i = 0; i < bytes; i++)
    host[i] = (unsigned char)(i * 131u + 7u);
  int first_rc = STRATA_OK;
  char first_msg[256] = "";
#define KEEP(e)                                                                                                        \
  do {                                                                                                                 \
    if ((e) != STRATA_OK && first_rc == STRATA_OK) {                                                                   \
      first_rc = (e);                                                                                                  \
      strata__strlcpy(first_msg, strata_last_error(), sizeof first_msg);                                              \
    }                                                                                                                  \
  } while (0)
  for (int d = 0; d < n; d++) {
    int rc = prepare(&m[d], d, bytes, host);
    KEEP(rc);
  }
  for (int d = 0; d < n; d++) {
    if (m[d].failed)
      continue;
    int rc = STRATA_OK;
    double gbps = time_copy(&m[d], NULL, host, bytes, reps, &rc);
    KEEP(rc);
    if (gbps > 0)
      strata_topology_set_measured(t, STRATA_TOPOLOGY_HOST, d, gbps);
    rc = STRATA_OK;
    gbps = time_copy(NULL, &m[d], host, bytes, reps, &rc);
    KEEP(rc);
    if (gbps > 0)
      strata_topology_set_measured(t, d, STRATA_TOPOLOGY_HOST, gbps);
  }
  for (int a = 0; a < n; a++)
    for (int b = 0; b < n; b++) {
      if (a == b || m[a].failed || m[b].failed)
        continue;
      int rc = STRATA_OK;
      double gbps = time_copy(&m[b], &m[a], NULL, bytes, reps, &rc);
      KEEP(rc);
      if (gbps > 0)
        strata_topology_set_measured(t, a, b, gbps);
    }
#undef KEEP
  for (int d = 0; d < n; d++) {
    if (m[d].buf)
      strata_buffer_free(m[d].buf);
    if (m[d].queue)
      strata_queue_free(m[d].queue);
  }
  free(m);
  free(host);
  if (first_rc != STRATA_OK)
    return strata__error(first_rc, "strata_topology_measure: %s", first_msg);
  return STRATA_OK;
}
