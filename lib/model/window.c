/* SPDX-License-Identifier: MIT */
/* window.c — ZeRO-3's parameter window: one region of a window and an eighth, the tensors a layer reads at one end
** and the next ones gathered at the other on the stage's gather queue while the layer computes (FSDP's prefetch), as
** much of them as does not overlap the layer's, in the order each pass read them last time. */
#include "config.h"

#include <stdlib.h>

#include "core/core.h"
#include <strata/schedule.h>

#include "model/stage.h"

#define AT(b, o) strata_mem((b), (size_t)(o))

enum { PASSES = 4 }; /* F, B, BI, W: each reads the stage's tensors in an order of its own */

struct strata__window {
  strata_queue_t gq;         /* the gathers posted ahead run here, beside the stage's queue */
  int pass;                  /* the pass running (0 .. PASSES - 1), -1 outside one: it learns nothing then */
  int prev;                  /* the tensor its last take started at (-1: none yet) */
  int nt;
  int *next_t, *next_k;      /* [PASSES x (nt + 1)]: after a take at tensor t (entry t + 1; entry 0: the pass's
                             ** start), the pass took [next_t, next_t + next_k) last time; -1: not known */
  int on;                    /* a gather in flight ... */
  int t;                     /* ... of tensors [t, ...), flat floats [lo, hi), to lie from `at` in the region: */
  size_t lo, hi, at;
  size_t flo, fhi;           /* the part of [lo, hi) it copies (the rest overlaps the tensors read meanwhile) */
  strata_event_t done;       /* recorded on gq after its copies */
  double posted;
};

static int pass_index(int kind) {
  switch (kind) {
  case STRATA_ACTION_FORWARD: return 0;
  case STRATA_ACTION_BACKWARD: return 1;
  case STRATA_ACTION_BACKWARD_INPUT: return 2;
  case STRATA_ACTION_BACKWARD_WEIGHT: return 3;
  default: return -1;
  }
}

/* The stage's window state, made on first use. */
static int window_of(struct strata__stage *st, struct strata__window **out) {
  if (!st->win) {
    struct strata__window *w = calloc(1, sizeof *w);
    const size_t n = (size_t)PASSES * ((size_t)st->ntensors + 1);
    if (w) {
      w->next_t = malloc(n * sizeof *w->next_t);
      w->next_k = malloc(n * sizeof *w->next_k);
    }
    if (!w || !w->next_t || !w->next_k) {
      if (w) {
        free(w->next_t);
        free(w->next_k);
      }
      free(w);
      return strata__error(STRATA_ERR_NOMEM, "out of host memory for ZeRO-3's parameter window");
    }
    for (size_t i = 0; i < n; i++)
      w->next_t[i] = w->next_k[i] = -1;
    w->nt = st->ntensors;
    w->pass = -1;
    w->prev = -1;
    int rc = strata_queue_new(strata_queue_device(st->q), &w->gq);
    if (rc) {
      free(w->next_t);
      free(w->next_k);
      free(w);
      return strata__error_prefix(rc, "ZeRO-3 gather queue: ");
    }
    st->win = w;
  }
  *out = st->win;
  return STRATA_OK;
}

/* Flat floats [*lo, *hi) of stage tensors [t, t + k). */
static void span(const struct strata__stage *st, int t, int k, size_t *lo, size_t *hi) {
  *lo = st->tensors[t].off;
  *hi = st->tensors[t + k - 1].off + st->tensors[t + k - 1].n;
}

/*
** Where tensors of n floats go in the region (`size` floats): at its start or its end, whichever overlaps less of
** what the layers read now, [pat, pat + pend - pbase) (the other end: every placement is at one end).
*/
static size_t place(const struct strata__stage *st, size_t n) {
  const size_t size = strata__window_floats(st->gwin), a = st->pat, b = st->pat + (st->pend - st->pbase);
  const size_t end = size - n, ov0 = b > 0 && a < n ? (b < n ? b : n) - a : 0;
  const size_t ov1 = b > end ? b - (a > end ? a : end) : 0;
  return ov1 <= ov0 ? end : 0;
}

/* The part of [p, p + n) of the region outside what the layers read now: [*x, *y) (empty: x = y). */
static void clear_part(const struct strata__stage *st, size_t p, size_t n, size_t *x, size_t *y) {
  const size_t a = st->pat, b = st->pat + (st->pend - st->pbase);
  *x = p;
  *y = p + n;
  if (b <= a || b <= p || a >= p + n)
    return; /* no overlap */
  if (a > p) /* (placed at an end: the part before the tensors read now, or the part after) */
    *y = a;
  else
    *x = b < p + n ? b : p + n;
}

/*
** Post the gather of tensors [t, t + k) on the gather queue, after the work the stage's queue holds so far (which
** may still read where it lands): the part of their place that the layers do not read now (the rest is gathered
** when they are taken). Nothing when a gather is in flight, the window holds them, none of their place is free, or
** no gather is set.
*/
static int post(struct strata__stage *st, struct strata__window *w, int t, int k) {
  if (w->on || t < 0 || k < 1 || t + k > st->ntensors || !st->params_fetch)
    return STRATA_OK;
  size_t lo, hi;
  span(st, t, k, &lo, &hi);
  if ((lo >= st->pbase && hi <= st->pend && !st->params16_stale) || hi - lo > st->gwin || hi == lo)
    return STRATA_OK;
  const size_t p = place(st, hi - lo);
  size_t x, y;
  clear_part(st, p, hi - lo, &x, &y);
  if (y <= x)
    return STRATA_OK;
  strata_event_t reads;
  TRY(strata_event_record(st->q, &reads));
  int rc = strata_event_wait(w->gq, reads);
  strata_event_free(reads);
  TRY(rc);
  w->posted = strata__now();
  TRY(st->params_fetch(st->params_fetch_arg, w->gq, lo + (x - p), lo + (y - p), AT(st->params, x)));
  TRY(strata_event_record(w->gq, &w->done));
  w->on = 1;
  w->t = t;
  w->lo = lo;
  w->hi = hi;
  w->at = p;
  w->flo = lo + (x - p);
  w->fhi = lo + (y - p);
  return STRATA_OK;
}

/* The gather in flight lands: the stage's queue waits for it (and a traced run hears when it was there). */
static int land(struct strata__stage *st, struct strata__window *w, int *t, double *posted) {
  w->on = 0;
  int rc = strata_event_wait(st->q, w->done);
  if (!rc && st->params_landed)
    rc = strata_event_sync(w->done);
  strata_event_free(w->done);
  w->done = NULL;
  *t = w->t;
  *posted = w->posted;
  return rc;
}

int strata__stage_param_take(struct strata__stage *st, int t, int k) {
  if (!st->zero3)
    return STRATA_OK;
  struct strata__window *w;
  TRY(window_of(st, &w));
  if (w->pass >= 0) { /* learn the pass's order: what it takes after its previous take */
    const size_t at = (size_t)w->pass * ((size_t)w->nt + 1) + (size_t)(w->prev + 1);
    w->next_t[at] = t;
    w->next_k[at] = k;
    w->prev = t;
  }
  size_t lo, hi;
  span(st, t, k, &lo, &hi);
  const size_t ahead = w->pass >= 0 ? (size_t)w->pass * ((size_t)w->nt + 1) + (size_t)t + 1 : 0;
  if (lo >= st->pbase && hi <= st->pend && !st->params16_stale) /* held already */
    return w->pass >= 0 ? post(st, w, w->next_t[ahead], w->next_k[ahead]) : STRATA_OK;
  if (hi - lo > st->gwin)
    return strata__error(STRATA_ERR_INTERNAL, "stage: %zu parameters for a window of %zu", hi - lo, st->gwin);
  if (!st->params_fetch)
    return strata__error(STRATA_ERR_STATE, "stage: ZeRO-3's parameters read with no gather to fetch them");
  size_t at;
  if (w->on && w->lo == lo && w->hi == hi) { /* prefetched, but for the part where the last layer's tensors lay */
    int tt;
    double posted;
    TRY(land(st, w, &tt, &posted));
    at = w->at;
    st->pend = st->pbase; /* (nothing held should the gather fail) */
    if (w->flo > lo) /* (on the stage's queue: after the ops that read the last tensors) */
      TRY(st->params_fetch(st->params_fetch_arg, st->q, lo, w->flo, AT(st->params, at)));
    if (w->fhi < hi)
      TRY(st->params_fetch(st->params_fetch_arg, st->q, w->fhi, hi, AT(st->params, at + (w->fhi - lo))));
    if (st->params_landed)
      st->params_landed(st->params_fetch_arg, t, lo, hi, posted, strata__now());
  } else {
    if (w->on) { /* another gather in flight (the pass read in another order): the region is written after it */
      int tt;
      double posted;
      TRY(land(st, w, &tt, &posted));
    }
    at = place(st, hi - lo);
    st->pend = st->pbase;
    const double t0 = strata__now();
    TRY(st->params_fetch(st->params_fetch_arg, st->q, lo, hi, AT(st->params, at)));
    if (st->params_landed) { /* (traced runs time the gather itself) */
      TRY(strata_queue_finish(st->q));
      st->params_landed(st->params_fetch_arg, t, lo, hi, t0, strata__now());
    }
  }
  st->pat = at;
  st->pbase = lo;
  st->pend = hi;
  if (st->params16) /* (one window: the ops that read the tensors before are ahead of it on the stage's queue) */
    TRY(strata_convert(st->q, AT(st->params, at), strata_mem_typed(st->params16, 0, STRATA_BFLOAT16),
                       (int64_t)(hi - lo)));
  st->params16_stale = 0;
  /* the next tensors, gathered while this layer computes */
  return w->pass >= 0 ? post(st, w, w->next_t[ahead], w->next_k[ahead]) : STRATA_OK;
}

int strata__stage_window_begin(struct strata__stage *st, int pass) {
  if (!st->zero3)
    return STRATA_OK;
  struct strata__window *w;
  TRY(window_of(st, &w));
  w->pass = pass_index(pass);
  w->prev = -1;
  return STRATA_OK;
}

int strata__stage_window_prefetch(struct strata__stage *st, int pass) {
  const int p = pass_index(pass);
  if (!st->zero3 || p < 0)
    return STRATA_OK;
  struct strata__window *w;
  TRY(window_of(st, &w));
  const size_t at = (size_t)p * ((size_t)w->nt + 1);
  return post(st, w, w->next_t[at], w->next_k[at]);
}

int strata__stage_window_end(struct strata__stage *st) {
  struct strata__window *w = st->win;
  if (!w)
    return STRATA_OK;
  w->pass = -1;
  int rc = STRATA_OK;
  if (w->on) { /* posted for a read that did not come: nothing may write the half after this pass unordered */
    int tt;
    double posted;
    rc = land(st, w, &tt, &posted);
  }
  const int grc = strata_queue_finish(w->gq); /* a gather's failure the queue met after its copies were posted */
  if (!rc && grc)
    rc = strata__error_prefix(grc, "ZeRO-3 gather of stage tensors into the window: ");
  if (rc)
    st->pend = st->pbase; /* what the half holds is not known */
  return rc;
}

void strata__stage_window_free(struct strata__stage *st) {
  struct strata__window *w = st->win;
  if (!w)
    return;
  if (w->on)
    strata_event_sync(w->done);
  strata_event_free(w->done);
  strata_queue_free(w->gq); /* waits for its copies */
  free(w->next_t);
  free(w->next_k);
  free(w);
  st->win = NULL;
}
