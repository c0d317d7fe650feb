/* SPDX-License-Identifier: MIT */
/* spatial.h — what the spatial suites (test-spatial.c, test-spatial-plan.c) share: their host settings and image sets,
** and the small cnn whose slabs meet every kind of edge. */
#ifndef STRATA_TESTS_SPATIAL_H
#define STRATA_TESTS_SPATIAL_H

#include "common.h"

/* The suites' two image sets (4 classes, seed 3): `images` images of 32 x 32 and of 512 x 512, on `devices` host
** virtual devices of one thread each among `backends` (each setting kept where the environment gives it). */
static inline void tc_spatial_data(int images, const char *devices, const char *backends, strata_dataset_t *small,
                                   strata_dataset_t *hires) {
  setenv("STRATA_HOST_DEVICES", devices, 0);
  setenv("STRATA_HOST_THREADS", "1", 0);
  setenv("STRATA_BACKENDS", backends, 0);
  OK(strata_dataset_images(images, 32, 4, 3, small));
  OK(strata_dataset_images(images, 512, 4, 3, hires));
}

/* Filters of 3, 5 and 7, a stride of 2 at a slab edge, pooled and unpooled layers, the average pool. */
static inline strata_model_t tc_slab_cnn(void) {
  struct strata_model_config c = {.kind = STRATA_MODEL_CNN, .image = 32, .channels = 1, .classes = 4,
                                  .conv = {4, 8, 8}, .kernel = {3, 5, 7}, .stride = {1, 2, 1}, .pool = {2, 1, 1},
                                  .gap = 1};
  strata_model_t m;
  OK(strata_model_from_config(&c, &m));
  return m;
}

#endif /* STRATA_TESTS_SPATIAL_H */
