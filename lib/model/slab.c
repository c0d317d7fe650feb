/* SPDX-License-Identifier: MIT */
/* slab.c — spatial parallelism inside a stage: a cnn layer on one slab of rows of each image, the halo rows its
** filter reaches gathered from the neighbouring slabs (forward) and their gradients sent back (backward), each an
** all-reduce of an exchange buffer through the stage's join, which the TP_JOIN actions settle; the stage's queue
** waits for an exchange only where it reads the result (join_later, join_wait), the work in between overlapping it. */
#include "config.h"

#include "model/stage.h"
#include "core/core.h"

void strata__slab_share(int64_t total, int n, int r, int64_t *first, int64_t *rows) {
  *first = total * r / n;
  *rows = total * (r + 1) / n - *first;
}

void strata__slab_conv(const struct strata__layer *L, int n, int r, struct strata__slab *s) {
  const int64_t ho = L->ch / L->pool, pad = L->r / 2, st = L->stride;
  int64_t o0, orows;
  *s = (struct strata__slab){0};
  s->on = 1;
  s->rank = r;
  s->n = n;
  s->H = L->h;
  strata__slab_share(L->h, n, r, &s->in0, &s->rows);
  strata__slab_share(ho, n, r, &o0, &orows);
  s->c0 = o0 * L->pool;
  const int64_t c1 = (o0 + orows) * L->pool;
  s->need0 = s->c0 * st - pad < 0 ? 0 : s->c0 * st - pad;
  s->need1 = (c1 - 1) * st + L->r - pad > L->h ? L->h : (c1 - 1) * st + L->r - pad;
  s->e0 = s->need0 / st * st;
  s->he = s->need1 - s->e0;
  s->ht = L->first || s->in0 <= s->need0 ? 0 : s->in0 - s->need0;
  s->hb = L->first || s->need1 <= s->in0 + s->rows ? 0 : s->need1 - (s->in0 + s->rows);
  s->P = (s->he + 2 * pad - L->r) / st + 1;
  s->j0 = s->c0 - s->e0 / st;
}

int strata__slab_layers(struct strata__stage *st) {
  const int n = st->sp.size, r = st->sp.rank;
  for (int i = 0; i < st->last - st->first; i++) {
    struct strata__layer *L = &st->layers[i];
    if (L->kind == STRATA__LAYER_CLASSIFIER && L->gap) {
      L->sl = (struct strata__slab){.on = 1, .rank = r, .n = n, .H = L->h};
      strata__slab_share(L->h, n, r, &L->sl.in0, &L->sl.rows);
      if (L->sl.rows < 1)
        return strata__error(STRATA_ERR_SHAPE, "spatial: slab %d of %d holds none of the classifier's %lld rows", r,
                             n, (long long)L->h);
      L->h = L->sl.rows;
      continue;
    }
    if (L->kind != STRATA__LAYER_CONV)
      return strata__error(STRATA_ERR_SHAPE, "spatial: layer %s is not a convolution or an averaging classifier",
                           L->info.name);
    struct strata__slab s, up = {0}, down = {0};
    strata__slab_conv(L, n, r, &s);
    if (r > 0)
      strata__slab_conv(L, n, r - 1, &up);
    if (r + 1 < n)
      strata__slab_conv(L, n, r + 1, &down);
    s.up = up.hb;
    s.down = down.ht;
    for (int k = 0; k < n; k++) {
      struct strata__slab o;
      strata__slab_conv(L, n, k, &o);
      s.hmax = o.ht > s.hmax ? o.ht : s.hmax;
      s.hmax = o.hb > s.hmax ? o.hb : s.hmax;
    }
    int64_t o0, orows;
    strata__slab_share(L->ch / L->pool, n, r, &o0, &orows);
    if (orows < 1 || s.rows < 1 || s.up > s.rows || s.down > s.rows || s.ht > up.rows || s.hb > down.rows ||
        s.j0 < 0 || s.j0 + orows * L->pool > s.P)
      return strata__error(STRATA_ERR_SHAPE, "spatial: %d slabs cannot cut %s (slab %d: %lld rows, halo %lld + %lld)",
                           n, L->info.name, r, (long long)s.rows, (long long)s.ht, (long long)s.hb);
    L->sl = s;
    L->in = L->first ? L->c * L->h * L->w : L->c * s.rows * L->w;
    L->ch = orows * L->pool;
    L->out = L->k * orows * (L->cw / L->pool);
  }
  return STRATA_OK;
}

size_t strata__slab_xbuf(const struct strata__layer *L, int64_t B) {
  return (size_t)(2 * L->sl.n) * (size_t)(B * L->c * L->sl.hmax * L->w);
}

struct strata__slab_scratch strata__slab_scratch_of(const struct strata__layer *L, int64_t B, size_t ws) {
  struct strata__slab_scratch o;
  o.dr = ws;
  o.y = o.dr + (size_t)(B * strata__conv_big(L));
  o.xbuf = o.y + (size_t)(B * L->k * L->sl.P * L->cw);
  o.de = o.xbuf + strata__slab_xbuf(L, B);
  o.e = o.de + (size_t)(B * L->c * L->sl.he * L->w);
  o.one = o.e + (size_t)(B * L->c * L->sl.he * L->w);
  o.end = o.one + 1;
  return o;
}

static strata_mem_t at(strata_mem_t m, size_t e) {
  m.off += e;
  return m;
}

/* dst planes' rows [drow, drow + rows) = (beta: + ) src planes' rows [srow, ...): `planes` planes w wide, src's
** sstride apart and dst's dstride apart; a batched GEMM of k = 1 against one 1.0f, exact. */
static int copy_rows(strata_queue_t q, strata_mem_t one, strata_mem_t src, int64_t sstride, int64_t srow,
                     strata_mem_t dst, int64_t dstride, int64_t drow, int64_t rows, int64_t w, int64_t planes,
                     float beta) {
  if (rows <= 0)
    return STRATA_OK;
  return strata_gemm(q, 0, 0, 1, rows * w, 1, 1.0f, one, 1, 0, at(src, (size_t)(srow * w)), rows * w, sstride, beta,
                     at(dst, (size_t)(drow * w)), rows * w, dstride, planes);
}

int strata__slab_join(struct strata__stage *st, strata_mem_t x, size_t n) {
  if (!st->join)
    return strata__error(STRATA_ERR_STATE, "stage: a spatial stage has no communicator to join its slabs");
  return st->join(st->join_arg, st->q, x, n, STRATA_SUM);
}

/* A halo exchange (what: "halo" forward, "halo_grad" backward): the stage's join of the exchange buffer, named so
** for the trace. */
static int halo_join(struct strata__stage *st, strata_mem_t x, size_t n, const char *what) {
  st->join_what = what;
  int rc = strata__slab_join(st, x, n);
  st->join_what = NULL;
  return rc;
}

static int halo_post(struct strata__stage *st, strata_mem_t x, size_t n, const char *what);

/* E's rows from the slab's own: its rows that the filter reads (the first layer: the image's). Those and the halo
** rows cover [need0, need1): E is zeroed first only when it starts above them (a stride's rounding of e0). */
static int own_rows(struct strata__stage *st, const struct strata__layer *L, int64_t B, strata_mem_t x, strata_mem_t e,
                    strata_mem_t one) {
  const struct strata__slab *s = &L->sl;
  const int64_t W = L->w, planes = B * L->c, he = s->he;
  if (s->e0 < s->need0)
    TRY(strata_fill(st->q, e, 0.0f, planes * he * W));
  if (L->first) /* every slab has the whole image */
    return copy_rows(st->q, one, x, s->H * W, s->need0, e, he * W, s->need0 - s->e0, s->need1 - s->need0, W, planes,
                     0);
  const int64_t lo = s->in0 > s->need0 ? s->in0 : s->need0;
  const int64_t hi = s->in0 + s->rows < s->need1 ? s->in0 + s->rows : s->need1;
  return copy_rows(st->q, one, x, s->rows * W, lo - s->in0, e, he * W, lo - s->e0, hi - lo, W, planes, 0);
}

/* The halo rows between E (he rows a plane) and the slab's kept copy (ht + hb rows a plane): dir 0 keeps, 1 restores. */
static int halo_rows(struct strata__stage *st, const struct strata__layer *L, int64_t B, strata_mem_t e,
                     strata_mem_t halo, strata_mem_t one, int dir) {
  const struct strata__slab *s = &L->sl;
  const int64_t W = L->w, planes = B * L->c, he = s->he, hh = s->ht + s->hb;
  const int64_t top = s->in0 - s->ht - s->e0, bottom = s->in0 + s->rows - s->e0;
  if (dir == 0) {
    TRY(copy_rows(st->q, one, e, he * W, top, halo, hh * W, 0, s->ht, W, planes, 0));
    return copy_rows(st->q, one, e, he * W, bottom, halo, hh * W, s->ht, s->hb, W, planes, 0);
  }
  TRY(copy_rows(st->q, one, halo, hh * W, 0, e, he * W, top, s->ht, W, planes, 0));
  return copy_rows(st->q, one, halo, hh * W, s->ht, e, he * W, bottom, s->hb, W, planes, 0);
}

int strata__slab_gather(struct strata__stage *st, const struct strata__layer *L, int64_t B, strata_mem_t x,
                        strata_mem_t halo, strata_mem_t e, const struct strata__slab_scratch *o) {
  const struct strata__slab *s = &L->sl;
  strata_queue_t q = st->q;
  const int64_t W = L->w, planes = B * L->c, he = s->he;
  strata_mem_t buf = strata_mem(st->scratch, 0), one = at(buf, o->one), xb = at(buf, o->xbuf);
  TRY(strata_fill(q, one, 1.0f, 1));
  if (L->first || s->hmax == 0)
    return own_rows(st, L, B, x, e, one);
  const size_t slot = (size_t)(planes * s->hmax * W), n = strata__slab_xbuf(L, B);
  const int r = s->rank;
  TRY(strata_fill(q, xb, 0.0f, (int64_t)n));
  /* slot (r, 0): my first rows for the slab above; (r, 1): my last for the one below */
  TRY(copy_rows(q, one, x, s->rows * W, 0, at(xb, (size_t)(2 * r) * slot), s->hmax * W, 0, s->up, W, planes, 0));
  TRY(copy_rows(q, one, x, s->rows * W, s->rows - s->down, at(xb, (size_t)(2 * r + 1) * slot), s->hmax * W, 0,
                s->down, W, planes, 0));
  TRY(halo_post(st, xb, n, "halo"));
  TRY(own_rows(st, L, B, x, e, one)); /* (while the exchange is in flight) */
  if (st->join_wait)
    TRY(st->join_wait(st->join_arg, q));
  if (s->ht)
    TRY(copy_rows(q, one, at(xb, (size_t)(2 * r - 1) * slot), s->hmax * W, 0, e, he * W, s->in0 - s->ht - s->e0,
                  s->ht, W, planes, 0));
  if (s->hb)
    TRY(copy_rows(q, one, at(xb, (size_t)(2 * r + 2) * slot), s->hmax * W, 0, e, he * W, s->in0 + s->rows - s->e0,
                  s->hb, W, planes, 0));
  return halo_rows(st, L, B, e, halo, one, 0); /* what the backward needs beyond the slab's own rows */
}

int strata__slab_restore(struct strata__stage *st, const struct strata__layer *L, int64_t B, strata_mem_t x,
                         strata_mem_t halo, strata_mem_t e, const struct strata__slab_scratch *o) {
  strata_mem_t one = strata_mem(st->scratch, o->one);
  TRY(strata_fill(st->q, one, 1.0f, 1));
  TRY(own_rows(st, L, B, x, e, one));
  return L->first ? STRATA_OK : halo_rows(st, L, B, e, halo, one, 1);
}

int strata__slab_rows(struct strata__stage *st, const struct strata__layer *L, int64_t B, strata_mem_t y,
                      strata_mem_t slab, const struct strata__slab_scratch *o) {
  const struct strata__slab *s = &L->sl;
  const int64_t planes = B * L->k, cw = L->cw, crows = L->ch;
  strata_mem_t one = strata_mem(st->scratch, o->one);
  TRY(strata_fill(st->q, one, 1.0f, 1));
  /* only the rows outside [j0, j0 + crows) need zeros; they are at most a few per plane, the fill is one op */
  TRY(strata_fill(st->q, y, 0.0f, planes * s->P * cw));
  return copy_rows(st->q, one, slab, crows * cw, 0, y, s->P * cw, s->j0, crows, cw, planes, 0);
}

/* A halo join posted to be waited for later (join_later), when the stage can (join_wait); else waited for now. */
static int halo_post(struct strata__stage *st, strata_mem_t x, size_t n, const char *what) {
  st->join_later = st->join_wait != NULL;
  int rc = halo_join(st, x, n, what);
  st->join_later = 0;
  return rc;
}

int strata__slab_scatter_post(struct strata__stage *st, const struct strata__layer *L, int64_t B, strata_mem_t de,
                              strata_mem_t dx, const struct strata__slab_scratch *o) {
  const struct strata__slab *s = &L->sl;
  strata_queue_t q = st->q;
  const int64_t W = L->w, planes = B * L->c, he = s->he;
  strata_mem_t buf = strata_mem(st->scratch, 0), one = at(buf, o->one), xb = at(buf, o->xbuf);
  TRY(strata_fill(q, one, 1.0f, 1));
  const int64_t lo = s->in0 > s->need0 ? s->in0 : s->need0;
  const int64_t hi = s->in0 + s->rows < s->need1 ? s->in0 + s->rows : s->need1;
  if (lo > s->in0 || hi < s->in0 + s->rows) /* rows of the slab the filter does not read: their gradient is 0 */
    TRY(strata_fill(q, dx, 0.0f, planes * s->rows * W));
  TRY(copy_rows(q, one, de, he * W, lo - s->e0, dx, s->rows * W, lo - s->in0, hi - lo, W, planes, 0));
  if (s->hmax == 0)
    return STRATA_OK;
  const size_t slot = (size_t)(planes * s->hmax * W), n = strata__slab_xbuf(L, B);
  const int r = s->rank;
  TRY(strata_fill(q, xb, 0.0f, (int64_t)n));
  /* slot (r, 0): the gradient of the rows from the slab above, for it; (r, 1): of those from below */
  TRY(copy_rows(q, one, de, he * W, s->in0 - s->ht - s->e0, at(xb, (size_t)(2 * r) * slot), s->hmax * W, 0, s->ht,
                W, planes, 0));
  TRY(copy_rows(q, one, de, he * W, s->in0 + s->rows - s->e0, at(xb, (size_t)(2 * r + 1) * slot), s->hmax * W, 0,
                s->hb, W, planes, 0));
  return halo_post(st, xb, n, "halo_grad");
}

int strata__slab_scatter_end(struct strata__stage *st, const struct strata__layer *L, int64_t B, strata_mem_t dx,
                             const struct strata__slab_scratch *o) {
  const struct strata__slab *s = &L->sl;
  if (s->hmax == 0)
    return STRATA_OK;
  strata_queue_t q = st->q;
  const int64_t W = L->w, planes = B * L->c;
  strata_mem_t buf = strata_mem(st->scratch, 0), one = at(buf, o->one), xb = at(buf, o->xbuf);
  const size_t slot = (size_t)(planes * s->hmax * W);
  const int r = s->rank;
  if (st->join_wait)
    TRY(st->join_wait(st->join_arg, q));
  if (s->up)
    TRY(copy_rows(q, one, at(xb, (size_t)(2 * r - 1) * slot), s->hmax * W, 0, dx, s->rows * W, 0, s->up, W, planes,
                  1));
  if (s->down)
    TRY(copy_rows(q, one, at(xb, (size_t)(2 * r + 2) * slot), s->hmax * W, 0, dx, s->rows * W, s->rows - s->down,
                  s->down, W, planes, 1));
  return STRATA_OK;
}
