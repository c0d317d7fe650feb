/* SPDX-License-Identifier: MIT */
/* time.c — the runtime's one clock: seconds on the monotonic clock, for step times, traces and timeouts. */
#include "config.h"

#include <time.h>

#include "core/core.h"

double strata__now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
