/* SPDX-License-Identifier: MIT */
/* speed.c — the runtime's one GEMM timer: a device's sgemm speed through strata's own call, for the balancer and the
** tools' MFU peak. */
#include "config.h"

#include <strata/device.h>
#include <strata/ops.h>
#include <strata/comm.h>

#include "core/core.h"

STRATA_API int strata_device_gemm_speed(int dev, int64_t n, int reps, double *gflops, double *seconds) {
  return strata_device_gemm_speed_as(dev, STRATA_FLOAT32, n, reps, gflops, seconds);
}

STRATA_API int strata_device_gemm_speed_as(int dev, int dtype, int64_t n, int reps, double *gflops, double *seconds) {
  if (dtype != STRATA_FLOAT32 && dtype != STRATA_BFLOAT16)
    return strata__error(STRATA_ERR_INVALID, "strata_device_gemm_speed: type %d is neither float32 nor bfloat16",
                         dtype);
  if (!gflops)
    return strata__error(STRATA_ERR_INVALID, "strata_device_gemm_speed: gflops is NULL");
  if (n < 1 || n > 65536 || reps < 1 || reps > 1000)
    return strata__error(STRATA_ERR_RANGE, "strata_device_gemm_speed: n = %lld and reps = %d, want n in [1, 65536] "
                         "and reps in [1, 1000]", (long long)n, reps);
  const size_t elems = (size_t)n * (size_t)n;
  strata_buffer_t a = NULL, b = NULL, c = NULL;
  strata_queue_t q = NULL;
  double best = 0; /* FLOP/s */
  int rc = strata_queue_new(dev, &q);
  if (!rc)
    rc = strata_buffer_new(dev, elems * strata_dtype_size(dtype), &a);
  if (!rc)
    rc = strata_buffer_new(dev, elems * strata_dtype_size(dtype), &b);
  if (!rc)
    rc = strata_buffer_new(dev, elems * 4, &c);
  if (!rc)
    rc = strata_fill(q, strata_mem_typed(a, 0, dtype), 0.5f, (int64_t)elems);
  if (!rc)
    rc = strata_fill(q, strata_mem_typed(b, 0, dtype), 0.25f, (int64_t)elems);
  if (!rc)
    rc = strata_queue_finish(q);
  const double flops = 2.0 * (double)n * (double)n * (double)n;
  for (int r = -1; r < reps && !rc; r++) { /* r = -1 warms up: kernel compilation, caches, thread start */
    double t0 = strata__now();
    rc = strata_gemm(q, STRATA_NO_TRANS, STRATA_NO_TRANS, n, n, n, 1.0f, strata_mem_typed(a, 0, dtype), n, 0,
                     strata_mem_typed(b, 0, dtype), n, 0, 0.0f, strata_mem(c, 0), n, 0, 1);
    if (!rc)
      rc = strata_queue_finish(q);
    double dt = strata__now() - t0;
    if (!rc && r >= 0 && dt > 0 && flops / dt > best)
      best = flops / dt;
  }
  /* the queue first: freeing it waits for work still queued on the buffers (a failed enqueue leaves some) */
  strata_queue_free(q);
  strata_buffer_free(a);
  strata_buffer_free(b);
  strata_buffer_free(c);
  if (rc)
    return rc;
  if (best <= 0) /* a clock that did not move: a product too small to time */
    return strata__error(STRATA_ERR_RANGE, "strata_device_gemm_speed: device %d's %lld^3 product took no measurable "
                         "time", dev, (long long)n);
  *gflops = best * 1e-9;
  if (seconds)
    *seconds = flops / best;
  return STRATA_OK;
}
