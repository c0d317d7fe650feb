/* SPDX-License-Identifier: MIT */
/* ranges.c — the memory model over every cut of a model at once: any run of layers' stage bytes in constant time,
** from the layers' figures (prefix sums and range maxima), for the balancers that weigh all cuts. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "model/stage.h"

#define LEVELS 32
#define W 5                  /* the maxima kept per layer range */

struct strata__stage_ranges {
  const struct strata_model *model;
  int64_t mb;
  int split_backward, L;
  struct strata__cut cut;
  struct strata__layer_mem *m, *alone;
  int *partner;
  size_t *pre;               /* [4][L + 1]: prefix sums of params, tensors, kept, dsave */
  size_t *top[LEVELS];       /* top[k][W i + w]: the most scratch (w 0), io (1), join (2), recompute (3) and params_most (4) of
                             ** layers [i, i + 2^k) */
  int levels;
};

static size_t io_of(const struct strata__layer_mem *m) { return m->in > m->out ? m->in : m->out; }

void strata__stage_ranges_free(struct strata__stage_ranges *r) {
  if (!r)
    return;
  free(r->m);
  free(r->alone);
  free(r->partner);
  free(r->pre);
  for (int k = 0; k < LEVELS; k++)
    free(r->top[k]);
  free(r);
}

int strata__stage_ranges_new(const struct strata_model *model, int64_t mb, int split_backward,
                             const struct strata__cut *cut, struct strata__stage_ranges **out) {
  *out = NULL;
  const int L = model->nlayers;
  struct strata__stage_ranges *r = calloc(1, sizeof *r);
  if (!r)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory weighing cuts");
  r->model = model;
  r->mb = mb;
  r->split_backward = split_backward != 0;
  if (cut)
    r->cut = *cut;
  else
    r->cut = (struct strata__cut){{0, 1}, {0, 1}, STRATA_FLOAT32, STRATA_FLOAT32, STRATA_RECOMPUTE_NONE, 0,
                                  {0, 1}, 0};
  r->L = L;
  r->m = calloc((size_t)L, sizeof *r->m);
  r->alone = calloc((size_t)L, sizeof *r->alone);
  r->partner = calloc((size_t)L, sizeof *r->partner);
  r->pre = calloc(4 * ((size_t)L + 1), sizeof *r->pre);
  int rc = r->m && r->alone && r->partner && r->pre ? STRATA_OK
                                                    : strata__error(STRATA_ERR_NOMEM, "out of host memory weighing cuts");
  if (!rc)
    rc = strata__stage_layer_mems(model, mb, cut, r->m, r->alone, r->partner);
  for (int i = 0; !rc && i < L; i++) {
    const size_t v[4] = {r->m[i].params, r->m[i].tensors, r->m[i].kept, r->m[i].dsave};
    for (int k = 0; k < 4; k++)
      r->pre[(size_t)k * ((size_t)L + 1) + (size_t)i + 1] = r->pre[(size_t)k * ((size_t)L + 1) + (size_t)i] + v[k];
  }
  /* sparse tables of the maxima: level k covers 2^k layers */
  for (int k = 0; !rc && k < LEVELS && (k == 0 || (1 << k) <= L); k++) {
    r->top[k] = calloc(W * ((size_t)L + 1), sizeof *r->top[k]);
    if (!r->top[k]) {
      rc = strata__error(STRATA_ERR_NOMEM, "out of host memory weighing cuts");
      break;
    }
    r->levels = k + 1;
    for (int i = 0; i + (1 << k) <= L; i++) {
      if (k == 0) {
        r->top[0][W * i] = r->m[i].scratch;
        r->top[0][W * i + 1] = io_of(&r->m[i]);
        r->top[0][W * i + 2] = r->m[i].join;
        r->top[0][W * i + 3] = r->m[i].recompute;
        r->top[0][W * i + 4] = r->m[i].params_most;
        continue;
      }
      const size_t *p = r->top[k - 1];
      const int j = i + (1 << (k - 1));
      for (int w = 0; w < W; w++)
        r->top[k][W * i + w] = p[W * i + w] > p[W * j + w] ? p[W * i + w] : p[W * j + w];
    }
  }
  if (rc) {
    strata__stage_ranges_free(r);
    return rc;
  }
  *out = r;
  return STRATA_OK;
}

/* The most scratch (which 0), io (1), join (2), recompute (3) or params_most (4) of layers [a, b), a < b. */
static size_t most(const struct strata__stage_ranges *r, int a, int b, int which) {
  int k = 0;
  while (k + 1 < r->levels && (1 << (k + 1)) <= b - a)
    k++;
  size_t x = r->top[k][W * a + which], y = r->top[k][W * (b - (1 << k)) + which];
  return x > y ? x : y;
}

int strata__stage_ranges_bytes(const struct strata__stage_ranges *r, int a, int b, struct strata__stage_bytes *out) {
  if (a < 0 || b > r->L || a >= b)
    return strata__error(STRATA_ERR_INVALID, "stage: layers [%d, %d) do not lie in a model of %d layers", a, b, r->L);
  /* the inner layers as the whole model lays them out; an end layer cut from its tp partner is held whole */
  const int lo_alone = r->partner[a] >= 0 && r->partner[a] < a, hi_alone = r->partner[b - 1] >= b;
  struct strata__layer_mem s = {0};
  const size_t N = (size_t)r->L + 1;
  const int ia = a + lo_alone, ib = b - hi_alone; /* [ia, ib): layers taken as laid out in the whole */
  if (ia < ib) {
    s.params = r->pre[(size_t)ib] - r->pre[(size_t)ia];
    s.tensors = r->pre[N + (size_t)ib] - r->pre[N + (size_t)ia];
    s.kept = r->pre[2 * N + (size_t)ib] - r->pre[2 * N + (size_t)ia];
    s.dsave = r->pre[3 * N + (size_t)ib] - r->pre[3 * N + (size_t)ia];
    s.scratch = most(r, ia, ib, 0);
    s.io = most(r, ia, ib, 1);
    s.join = most(r, ia, ib, 2);
    s.recompute = most(r, ia, ib, 3);
    s.params_most = most(r, ia, ib, 4);
  }
  const struct strata__layer_mem *first = lo_alone ? &r->alone[a] : &r->m[a];
  const struct strata__layer_mem *last = hi_alone ? &r->alone[b - 1] : &r->m[b - 1];
  if (lo_alone)
    strata__layer_mem_add(&s, first, 0, 0);
  if (hi_alone)
    strata__layer_mem_add(&s, last, 0, 0);
  s.in = first->in;
  s.out = last->out;
  s.params_first = first->params;
  strata__stage_bytes_of(r->model, a, b, r->mb, r->split_backward, &r->cut, &s, out);
  return STRATA_OK;
}
