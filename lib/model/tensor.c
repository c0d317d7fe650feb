/* SPDX-License-Identifier: MIT */
/* tensor.c — a stage's parameter tensors: their definition, their tensor-parallel slices and their initial values. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/stage.h"

/* Define `t` whole: `name`, ndim dimensions d0 .. d3, weight decay or not, initial values normal(0, std) or (std 0)
** the constant cst. */
void strata__tensor_def(struct strata__tensor *t, const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2,
                       int64_t d3, int decay, float std, float cst) {
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  t->ndim = ndim;
  int64_t dims[4] = {d0, d1, d2, d3};
  t->n = 1;
  for (int i = 0; i < ndim; i++) {
    t->shape[i] = dims[i];
    t->n *= (size_t)dims[i];
  }
  t->decay = decay;
  t->init_std = std;
  t->init_const = cst;
  memcpy(t->full, t->shape, sizeof t->full);
  t->full_n = t->n;
  t->split = STRATA__SPLIT_NONE;
  t->groups = 1;
  t->part = 0;
  t->parts = 1;
  t->copies = 1;
}

/* Make `t`, defined whole, the slice sh->rank of sh->size of dimension
** `dim` (-1: its last), cut in `groups` equal groups. */
void strata__tensor_shard(struct strata__tensor *t, int dim, int groups, const struct strata__shard *sh) {
  if (!sh || sh->size <= 1)
    return;
  t->dim = dim < 0 ? t->ndim - 1 : dim;
  t->split = t->dim == 0 ? STRATA__SPLIT_ROWS : STRATA__SPLIT_COLS;
  t->groups = groups;
  t->part = sh->rank;
  t->parts = sh->size;
  t->shape[t->dim] /= sh->size;
  t->n = t->full_n / (size_t)sh->size;
}

void strata__tensor_cut(const struct strata__tensor *t, float *full, float *local, int gather) {
  if (t->split == STRATA__SPLIT_NONE) {
    if (gather)
      memcpy(full, local, t->n * sizeof *full);
    else
      memcpy(local, full, t->n * sizeof *full);
    return;
  }
  /* the dimensions before `dim` make rows; from `dim` on, each row is `groups` groups of gw, the slice lw of each */
  size_t cols = 1;
  for (int d = t->dim; d < t->ndim; d++)
    cols *= (size_t)t->full[d];
  size_t rows = t->full_n / cols, gw = cols / (size_t)t->groups, lw = gw / (size_t)t->parts;
  for (size_t r = 0; r < rows; r++)
    for (int g = 0; g < t->groups; g++) {
      float *f = full + r * cols + (size_t)g * gw + (size_t)t->part * lw;
      float *l = local + r * lw * (size_t)t->groups + (size_t)g * lw;
      if (gather)
        memcpy(f, l, lw * sizeof *full);
      else
        memcpy(l, f, lw * sizeof *full);
    }
}

/* splitmix64: seeds each tensor's generator from (seed, name). */
static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static uint64_t name_seed(uint64_t seed, const char *name) {
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
  for (const unsigned char *p = (const unsigned char *)name; *p; p++)
    h = (h ^ *p) * 0x100000001b3ull;
  return mix64(h ^ mix64(seed));
}

/* Fill `x` with the whole tensor's initial values (t->full_n floats):
** normal(0, std) by Box-Muller, or a constant. A slice is cut from them,
** so a sharded run starts from the same values as a whole one. */
void strata__tensor_init(const struct strata__tensor *t, uint64_t seed, float *x) {
  if (t->init_std == 0) {
    for (size_t i = 0; i < t->full_n; i++)
      x[i] = t->init_const;
    return;
  }
  uint64_t s = name_seed(seed, t->name);
  for (size_t i = 0; i < t->full_n; i += 2) {
    s = mix64(s);
    double u1 = ((double)(s >> 11) + 0.5) / 9007199254740992.0;
    s = mix64(s);
    double u2 = (double)(s >> 11) / 9007199254740992.0;
    double r = sqrt(-2.0 * log(u1));
    x[i] = (float)(t->init_std * r * cos(2 * M_PI * u2));
    if (i + 1 < t->full_n)
      x[i + 1] = (float)(t->init_std * r * sin(2 * M_PI * u2));
  }
}
