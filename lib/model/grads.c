/* SPDX-License-Identifier: MIT */
/* grads.c — a stage's gradients and its update: zeroing (or the first write's beta 0), ZeRO-2's windows and shard,
** the sum of squares and AdamW (moved out of stage.c unchanged). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "model/stage.h"
#include "core/core.h"

#define AT(b, o) strata_mem((b), (size_t)(o))

enum { GF_FIRST = 1, GF_PENDING = 2 };

int strata__stage_zero_grads(struct strata__stage *st) {
  if (st->gfirst) /* nothing pending: all of it is zeroed */
    for (int t = 0; t < st->ntensors; t++)
      st->gfirst[t] &= (unsigned char)~GF_PENDING;
  if (st->zero2) /* the window is zeroed layer by layer as a backward reaches it */
    return strata_fill(st->q, AT(st->gshard, 0), 0, (int64_t)(st->chunk ? st->chunk : 1));
  size_t padded = st->chunk * (size_t)st->zero.size;
  return strata_fill(st->q, AT(st->grads, 0), 0, (int64_t)(padded ? padded : 1));
}

/* Zero gradient floats [lo, hi) (none when hi <= lo). */
static int zero_range(struct strata__stage *st, size_t lo, size_t hi) {
  return hi > lo ? strata_fill(st->q, AT(st->grads, lo), 0, (int64_t)(hi - lo)) : STRATA_OK;
}

int strata__stage_clear_grads(struct strata__stage *st) {
  const size_t padded = st->chunk * (size_t)st->zero.size;
  if (st->zero2 || st->sp.size > 1 || st->ntensors == 0 || padded < st->nparams)
    return strata__stage_zero_grads(st);
  if (!st->gfirst) {
    st->gfirst = calloc((size_t)st->ntensors, 1);
    if (!st->gfirst)
      return strata__stage_zero_grads(st);
    strata__layers_grad_first(st, st->gfirst);
    for (int t = 0; t < st->ntensors; t++) /* (in the flat vector's order, or none of it: everything zeroed) */
      if (st->gfirst[t] && (st->tensors[t].off + st->tensors[t].n > st->nparams ||
                            (t > 0 && st->tensors[t].off < st->tensors[t - 1].off + st->tensors[t - 1].n)))
        memset(st->gfirst, 0, (size_t)st->ntensors);
  }
  size_t at = 0; /* zeroed up to here */
  for (int t = 0; t < st->ntensors; t++) {
    if (!(st->gfirst[t] & GF_FIRST))
      continue;
    TRY(zero_range(st, at, st->tensors[t].off));
    st->gfirst[t] |= GF_PENDING;
    at = st->tensors[t].off + st->tensors[t].n;
  }
  return zero_range(st, at, padded); /* the rest, and ZeRO-1's padding */
}

float strata__stage_grad_beta(struct strata__stage *st, int t) {
  if (!st->gfirst || t < 0 || t >= st->ntensors || !(st->gfirst[t] & GF_PENDING))
    return 1.0f;
  st->gfirst[t] &= (unsigned char)~GF_PENDING;
  return 0.0f;
}

int strata__stage_grads_settle(struct strata__stage *st) {
  for (int t = 0; st->gfirst && t < st->ntensors; t++)
    if (st->gfirst[t] & GF_PENDING) {
      st->gfirst[t] &= (unsigned char)~GF_PENDING;
      TRY(zero_range(st, st->tensors[t].off, st->tensors[t].off + st->tensors[t].n));
    }
  return STRATA_OK;
}

int strata__stage_grad_begin(struct strata__stage *st) {
  if (!st->zero2)
    return STRATA_OK;
  st->gend = st->gbase;
  return st->gtied ? strata_fill(st->q, AT(st->gtied, 0), 0, (int64_t)st->tied_n) : STRATA_OK;
}

/* Hand floats [lo, hi) at g on to the executor (a pass, which has no hook, drops them). */
static int hand_on(struct strata__stage *st, size_t lo, size_t hi, strata_mem_t g) {
  return st->grads_flush && hi > lo ? st->grads_flush(st->grads_flush_arg, lo, hi, g) : STRATA_OK;
}

int strata__stage_grad_flush(struct strata__stage *st, int tied) {
  if (!st->zero2)
    return STRATA_OK;
  const size_t lo = st->gbase, hi = st->gend;
  st->gend = st->gbase;
  TRY(hand_on(st, lo, hi, AT(st->grads, 0)));
  return tied && st->gtied ? hand_on(st, 0, st->tied_n, AT(st->gtied, 0)) : STRATA_OK;
}

int strata__stage_grad_take(struct strata__stage *st, int t, int k) {
  if (!st->zero2)
    return STRATA_OK;
  const size_t lo = st->tensors[t].off, hi = st->tensors[t + k - 1].off + st->tensors[t + k - 1].n;
  if (st->gtied && lo < st->tied_n)
    return STRATA_OK; /* the tied embedding's, kept whole for the backward */
  if (hi - lo > st->gwin)
    return strata__error(STRATA_ERR_INTERNAL, "stage: %zu gradients for a window of %zu", hi - lo, st->gwin);
  TRY(strata__stage_grad_flush(st, 0));
  st->gbase = lo;
  st->gend = hi;
  return hi > lo ? strata_fill(st->q, AT(st->grads, 0), 0, (int64_t)(hi - lo)) : STRATA_OK;
}

int strata__stage_shard_add(struct strata__stage *st, size_t lo, size_t hi, strata_mem_t g) {
  const size_t a = (size_t)st->zero.rank * st->chunk, x = lo > a ? lo : a, y = hi < a + st->chunk ? hi : a + st->chunk;
  if (y <= x)
    return STRATA_OK; /* none of it in this replica's shard */
  g.off += x - lo;
  return strata_add(st->q, AT(st->gshard, x - a), g, AT(st->gshard, x - a), (int64_t)(y - x));
}

/* The gradients of flat floats from `lo` on as the optimizer reads them: the whole vector's, or ZeRO-2's shard. */
static strata_mem_t shard_grad(const struct strata__stage *st, size_t lo) {
  return st->zero2 ? AT(st->gshard, lo - (size_t)st->zero.rank * st->chunk) : AT(st->grads, lo);
}

/* The part of tensor t inside the stage's optimizer shard: [*lo, *hi) in floats of the flat vector (empty: lo = hi). */
static void shard_part(const struct strata__stage *st, int t, size_t *lo, size_t *hi) {
  const struct strata__tensor *x = &st->tensors[t];
  size_t a = (size_t)st->zero.rank * st->chunk, b = a + st->chunk;
  *lo = x->off > a ? x->off : a;
  *hi = x->off + x->n < b ? x->off + x->n : b;
  if (*hi < *lo)
    *hi = *lo;
}

/* Each tensor's sum of squares in its own op, or all in one (the same bits) where the device has it. */
int strata__stage_grad_sumsq(struct strata__stage *st, double *sumsq) {
  const size_t padded = st->chunk * (size_t)st->zero.size;
  TRY(strata__stage_grads_settle(st)); /* (none pending after a backward: each layer wrote its own) */
  float *v = malloc(((size_t)st->ntensors + 1) * sizeof *v);
  int64_t *spans = malloc(((size_t)st->ntensors + 1) * 2 * sizeof *spans);
  int rc = v && spans ? STRATA_OK : strata__error(STRATA_ERR_NOMEM, "out of host memory");
  /* (ZeRO-2/3 keep the shard apart from the gradient windows: tensor by tensor there) */
  const int one_op = st->ntensors > 0 && padded > 0 && !st->zero2 && strata_fused_optimizer_supported(st->q);
  for (int t = 0; t < st->ntensors && !rc; t++) {
    size_t lo, hi;
    shard_part(st, t, &lo, &hi);
    if (one_op)
      spans[2 * t] = (int64_t)lo, spans[2 * t + 1] = (int64_t)(hi - lo);
    else if (hi == lo) /* nothing of it here: a zero sum */
      rc = strata_fill(st->q, AT(st->scalar, (size_t)t), 0, 1);
    else
      rc = strata_sumsq(st->q, shard_grad(st, lo), (int64_t)(hi - lo), AT(st->scalar, (size_t)t), 0);
  }
  if (!rc && one_op)
    rc = strata_sumsq_spans(st->q, AT(st->grads, 0), (int64_t)padded, spans, st->ntensors, AT(st->scalar, 0));
  if (!rc) /* waits for the queue: the spans are read by then */
    rc = strata_buffer_download(st->q, st->scalar, 0, v, (size_t)st->ntensors * 4);
  for (int t = 0; t < st->ntensors && !rc; t++)
    sumsq[t] = v[t];
  free(spans);
  free(v);
  return rc;
}

int strata__stage_update(struct strata__stage *st, float gscale, float lr, float beta1, float beta2, float eps,
                         float weight_decay, int64_t step) {
  const size_t base = (size_t)st->zero.rank * st->chunk; /* where the shard (and m, v) starts */
  /* where the device has it, one pass a tensor scales its gradient, updates it and (when this stage updates
  ** every parameter: no optimizer shard) refreshes the bfloat16 copy — the same bits as the separate ops */
  const int fused = strata_fused_optimizer_supported(st->q);
  const int refresh = fused && st->params16 && st->zero.size == 1;
  TRY(strata__stage_grads_settle(st));
  strata__stage_params_changed(st);
  if (gscale != 1.0f && !fused)
    TRY(strata_scale(st->q, shard_grad(st, base), gscale, (int64_t)(st->chunk ? st->chunk : 1)));
  for (int t = 0; t < st->ntensors; t++) {
    const struct strata__tensor *x = &st->tensors[t];
    size_t lo, hi;
    shard_part(st, t, &lo, &hi);
    if (hi == lo)
      continue;
    float wd = x->decay ? weight_decay : 0.0f;
    strata_mem_t p = st->zero3 ? AT(st->pshard, lo - base) : AT(st->params, lo);
    if (fused)
      TRY(strata_adamw_fused(st->q, p, shard_grad(st, lo), AT(st->m, lo - base), AT(st->v, lo - base),
                             refresh ? strata_mem_typed(st->params16, lo, STRATA_BFLOAT16) : (strata_mem_t){0},
                             (int64_t)(hi - lo), gscale, lr, beta1, beta2, eps, wd, step));
    else
      TRY(strata_adamw(st->q, p, shard_grad(st, lo), AT(st->m, lo - base), AT(st->v, lo - base), (int64_t)(hi - lo),
                       lr, beta1, beta2, eps, wd, step));
  }
  if (refresh) /* the tensors cover the parameters; the padding after them never changes */
    st->params16_stale = 0;
  return STRATA_OK;
}
