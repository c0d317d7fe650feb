/* SPDX-License-Identifier: MIT */
/* common.h — helpers shared by the Criterion suites: device lookup, random data, comparisons. */
#ifndef STRATA_TESTS_COMMON_H
#define STRATA_TESTS_COMMON_H

#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <strata/strata.h>

/* Assert a strata call succeeded, printing the library's message if not. */
#define OK(call)                                                                                                       \
  do {                                                                                                                 \
    int rc_ = (call);                                                                                                  \
    cr_assert_eq(rc_, STRATA_OK, "%s -> %s: %s", #call, strata_err_name(rc_), strata_last_error());                    \
  } while (0)

/* First device of backend `name`, or -1. */
static inline int tc_find_device(const char *name, int nth) {
  int n = 0;
  if (strata_device_count(&n) != STRATA_OK)
    return -1;
  for (int i = 0; i < n; i++) {
    struct strata_device_props p;
    if (strata_device_props(i, &p) == STRATA_OK && strcmp(p.backend, name) == 0 && nth-- == 0)
      return i;
  }
  return -1;
}

/* Whether this run must use a CUDA device: tests/gpu/run sets
** STRATA_TEST_REQUIRE_CUDA=1, and a test that needs one then fails, saying
** why, where elsewhere it skips. */
static inline int tc_cuda_required(void) {
  const char *e = getenv("STRATA_TEST_REQUIRE_CUDA");
  return e && strcmp(e, "1") == 0;
}

/* Why the cuda backend offers no device (its reason), or "" when it does. */
static inline const char *tc_cuda_why(char *buf, size_t len) {
  int nb = 0;
  snprintf(buf, len, "the cuda backend is not known to strata");
  if (strata_backend_count(&nb) != STRATA_OK) {
    snprintf(buf, len, "strata_backend_count: %s", strata_last_error());
    return buf;
  }
  for (int i = 0; i < nb; i++) {
    struct strata_backend_info bi;
    if (strata_backend_info(i, &bi) != STRATA_OK || strcmp(bi.name, "cuda") != 0)
      continue;
    if (bi.loaded && bi.device_count > 0)
      buf[0] = '\0';
    else
      snprintf(buf, len, "the cuda backend has no device: %s", bi.reason[0] ? bi.reason : "(no reason given)");
  }
  return buf;
}

/* Skip the test when `why` is not empty, or fail it under STRATA_TEST_REQUIRE_CUDA=1. */
#define TC_NEED_CUDA(why)                                                                                              \
  do {                                                                                                                 \
    if ((why)[0]) {                                                                                                    \
      if (tc_cuda_required())                                                                                          \
        cr_assert_fail("STRATA_TEST_REQUIRE_CUDA=1 but %s", (why));                                                    \
      cr_skip_test("%s", (why));                                                                                       \
    }                                                                                                                  \
  } while (0)

/* Deterministic uniform values in [lo, hi). */
static inline void tc_fill(float *x, size_t n, uint32_t seed, float lo, float hi) {
  uint64_t s = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = lo + (hi - lo) * (float)((s >> 40) & 0xffffff) / 16777216.0f;
  }
}

/* Largest |a - b| / (atol + rtol |b|) over n values; <= 1 means within tolerance. */
static inline double tc_excess(const float *a, const float *b, size_t n, double atol, double rtol, size_t *where) {
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    double diff = fabs((double)a[i] - b[i]);
    double e = diff == 0 ? 0 : diff / (atol + rtol * fabs((double)b[i]));
    if (!(e <= worst)) {
      worst = isnan(e) ? INFINITY : e;
      if (where)
        *where = i;
    }
  }
  return worst;
}

/* Remove a test's scratch directory and the files (or empty folders) in it. */
static inline void tc_remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return;
  struct dirent *de;
  char p[1024];
  while ((de = readdir(d)) != NULL) {
    if (de->d_name[0] == '.')
      continue;
    snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
    if (unlink(p) != 0)
      rmdir(p);
  }
  closedir(d);
  rmdir(dir);
}

/* The trainer's report with its arrays copied, so that it outlives the trainer (free with tc_report_free). */
static inline void tc_report_keep(strata_trainer_t tr, struct strata_train_report *rep) {
  OK(strata_trainer_report(tr, rep));
  int *split = malloc(sizeof(int) * (size_t)(rep->stages + 1)), *sd = malloc(sizeof(int) * (size_t)(rep->stages + 1));
  struct strata_train_device_stats *dev = malloc(sizeof *dev * (size_t)(rep->devices + 1));
  cr_assert(split && sd && dev);
  memcpy(split, rep->split, sizeof(int) * (size_t)rep->stages);
  memcpy(sd, rep->stage_device, sizeof(int) * (size_t)rep->stages);
  memcpy(dev, rep->dev, sizeof *dev * (size_t)rep->devices);
  rep->split = split;
  rep->stage_device = sd;
  rep->dev = dev;
}

static inline void tc_report_free(struct strata_train_report *rep) {
  free((void *)rep->split);
  free((void *)rep->stage_device);
  free((void *)rep->dev);
}

#endif /* STRATA_TESTS_COMMON_H */
