/* SPDX-License-Identifier: MIT */
/* params.c — the trainer's parameters (and gradients, moments) in host memory, in global tensor order, however the
** model is cut: gathered from and scattered to every replica and slice. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/checkpoint.h>
#include <strata/train.h>

#include "core/file.h"
#include "core/parse.h"
#include "device/registry.h"
#include "train/ranks.h"
#include "train/trainer.h"

/* ---- parameters in host memory, in global tensor order ---- */

/*
** Host copies of the parameters (and gradients, moments) hold whole tensors
** in global tensor order, however the trainer is cut: replica 0's stages
** one after another, each tensor assembled from its slices.
*/
static strata_buffer_t buffer_of(struct strata__stage *st, int which) {
  return which == 0 ? (st->zero3 ? st->pshard : st->params) : which == 1 ? st->grads : which == 2 ? st->m : st->v;
}

/* Buffer `which` holds only this replica's shard: the moments under ZeRO, the parameters too under ZeRO-3. */
static int sharded(const struct strata_trainer *tr, int which) {
  return tr->zero && (which >= 2 || (tr->zero >= 3 && which == 0));
}

/* Whole floats of stage s (of any chain): its tensors unsliced. */
size_t strata__stage_full(const struct strata__stage *st) {
  size_t n = 0;
  for (int t = 0; t < st->ntensors; t++)
    n += st->tensors[t].full_n;
  return n;
}

/* A copy of stage j's buffer `which` between st's device and the host that failed with rc (its message the last
** error), said with the device, as the trainer's other device faults are: "device 1 (host: ...), copying stage 0's
** AdamW m to the host: host: virtual device 1 failed (...)". Returns rc. */
static int copy_failed(int rc, const struct strata__stage *st, int j, int which, int to_host) {
  static const char *const names[4] = {"parameters", "gradients", "AdamW m", "AdamW v"};
  const struct strata__device *d = strata__device_get(st->dev);
  char label[160];
  return strata__error_prefix(rc, "%s, copying stage %d's %s %s the host: ",
                              d ? strata__device_label(d, label, sizeof label) : "a device that is gone",
                              j, names[which], to_host ? "to" : "from");
}

/* Stage j of slice k's flat buffer `which` into local (nparams floats): replica 0's copy, or with ZeRO the moments
** from every replica's shard. */
static int download_flat(strata_trainer_t tr, int k, int j, int which, float *local) {
  struct strata__stage *st = strata__home_stage(tr, k, j);
  if (!sharded(tr, which)) {
    int rc = strata_buffer_download(st->q, buffer_of(st, which), 0, local, st->nparams * 4);
    return rc ? copy_failed(rc, st, j, which, 1) : STRATA_OK;
  }
  for (int r = 0; r < tr->replicas; r++) {
    struct strata__stage *x = tr->st[(r * tr->tp + k) * tr->nstages + j];
    if (!x)
      continue; /* another rank's shard: below */
    size_t at = (size_t)r * x->chunk, n = at < x->nparams ? x->nparams - at : 0;
    if (n > x->chunk)
      n = x->chunk;
    int rc = n ? strata_buffer_download(x->q, buffer_of(x, which), 0, local + at, n * 4) : STRATA_OK;
    if (rc)
      return copy_failed(rc, x, j, which, 1);
  }
  return strata__ranks_shards(tr, k, j, local);
}

/* Copy buffer `which` (0 params, 1 grads, 2 m, 3 v) of the home replica into host. */
int strata__trainer_gather(strata_trainer_t tr, int which, float *host) {
  size_t at = 0, most = 0;
  for (int s = 0; s < tr->nstages; s++)
    most = strata__home_stage(tr, 0, s)->nparams > most ? strata__home_stage(tr, 0, s)->nparams : most;
  float *local = malloc((most ? most : 1) * sizeof *local);
  if (!local)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory");
  int rc = STRATA_OK;
  for (int s = 0; s < tr->nstages && !rc; s++) {
    for (int k = 0; k < tr->tps[s] && !rc; k++) {
      struct strata__stage *st = strata__home_stage(tr, k, s);
      if (sharded(tr, which)) {
        rc = download_flat(tr, k, s, which, local); /* every replica's shard, from wherever it is */
      } else {
        if (st->params)
          rc = download_flat(tr, k, s, which, local);
        if (!rc) /* another rank's slice (a pipeline or a tensor-parallel group across ranks): its values from there */
          rc = strata__ranks_slice_values(tr, k, s, local, st->nparams);
      }
      size_t o = at;
      for (int t = 0; t < st->ntensors && !rc; t++) {
        const struct strata__tensor *x = &st->tensors[t];
        if (k == 0 || (x->split && k % x->copies == 0)) /* a whole tensor (a part) from its first slice: the others
                                                         ** hold the same values */
          strata__tensor_cut(x, host + o, local + x->off, 1);
        o += x->full_n;
      }
    }
    at += strata__stage_full(strata__home_stage(tr, 0, s));
  }
  free(local);
  return rc;
}

/* Every replica's copy of the stages, every slice, receives the same values (with ZeRO, each its shard of the
** moments). */
int strata__trainer_scatter(strata_trainer_t tr, int which, const float *host) {
  size_t most = 0;
  for (int s = 0; s < strata__stages_all(tr); s++)
    most = tr->st[s] && tr->st[s]->nparams > most ? tr->st[s]->nparams : most;
  float *local = malloc((most ? most : 1) * sizeof *local);
  if (!local)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory");
  int rc = STRATA_OK;
  for (int c = 0; c < tr->chains && !rc; c++) {
    size_t at = 0;
    for (int s = 0; s < tr->nstages && !rc; s++) {
      struct strata__stage *st = tr->st[c * tr->nstages + s];
      if (!st) { /* another rank's, or held by another slice: its whole tensors come after */
        at += strata__stage_full(strata__home_stage(tr, 0, s));
        continue;
      }
      for (int t = 0; t < st->ntensors; t++) {
        const struct strata__tensor *x = &st->tensors[t];
        strata__tensor_cut(x, (float *)host + at, local + x->off, 0);
        at += x->full_n;
      }
      if (sharded(tr, which)) {
        size_t lo = (size_t)st->zero.rank * st->chunk, n = lo < st->nparams ? st->nparams - lo : 0;
        if (n > st->chunk)
          n = st->chunk;
        rc = n ? strata_buffer_upload(st->q, buffer_of(st, which), 0, local + lo, n * 4) : STRATA_OK;
      } else {
        rc = strata_buffer_upload(st->q, buffer_of(st, which), 0, local, st->nparams * 4);
      }
      if (rc)
        rc = copy_failed(rc, st, s, which, 0);
      if (which == 0) /* the compute copy (and ZeRO-3's window) made anew before the next forward reads them */
        strata__stage_params_changed(st);
    }
  }
  free(local);
  return rc;
}

int strata__trainer_gather_weights(strata_trainer_t tr, int s, strata_queue_t queue, size_t lo, size_t hi,
                                   strata_mem_t dst) {
  struct strata__stage *st = tr->st[s];
  const int r = strata__stage_replica(tr, s);
  for (int q = 0; q < tr->replicas; q++) {
    const size_t a = (size_t)q * st->chunk, x = lo > a ? lo : a, y = hi < a + st->chunk ? hi : a + st->chunk;
    const int sq = s + (q - r) * tr->tp * tr->nstages; /* the same stage and slice of replica q */
    if (y <= x)
      continue;
    if (!tr->st[sq])
      return strata__error(STRATA_ERR_UNSUPPORTED, "ZeRO-3: replica %d's shard of stage %d is on another rank", q, s);
    int rc = strata_buffer_copy(queue, dst.buf, (dst.off + x - lo) * 4, tr->st[sq]->pshard, (x - a) * 4, (y - x) * 4);
    if (rc)
      return strata__error_prefix(rc, "ZeRO-3 gather of stage %d's weights from replica %d (device %d): ", s, q,
                                  tr->dev[tr->stage_rank[sq]]);
  }
  return STRATA_OK;
}

size_t strata__trainer_total_params(strata_trainer_t tr) {
  size_t n = 0;
  for (int s = 0; s < tr->nstages; s++)
    n += strata__stage_full(strata__home_stage(tr, 0, s));
  return n;
}

STRATA_API int strata_trainer_params(strata_trainer_t tr, float *params, size_t *count) {
  if (!tr || !count)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_params: NULL argument");
  size_t n = strata__trainer_total_params(tr);
  if (params) {
    if (*count < n)
      return strata__error(STRATA_ERR_RANGE, "strata_trainer_params: room for %zu floats, the model has %zu", *count, n);
    TRY(strata__trainer_gather(tr, 0, params));
  }
  *count = n;
  return STRATA_OK;
}

STRATA_API int strata_trainer_set_params(strata_trainer_t tr, const float *params, size_t count) {
  if (!tr || !params)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_set_params: NULL argument");
  if (count != strata__trainer_total_params(tr))
    return strata__error(STRATA_ERR_SHAPE, "strata_trainer_set_params: %zu floats given, the model has %zu", count,
                         strata__trainer_total_params(tr));
  return strata__trainer_scatter(tr, 0, params);
}
