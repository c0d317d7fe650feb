/* SPDX-License-Identifier: MIT */
/* spatial.c — spatial parallelism's geometry: a cnn's rows cut into slabs, the halo rows each convolution needs
** from its neighbours, and what a slab keeps. */
#include "config.h"

#include <stdio.h>

#include "model/model.h"
#include "core/core.h"

/* Rows [first, first + rows) of `total` that slab r of n holds: as evenly as they go, the larger slabs last. */
static void share(int64_t total, int n, int r, int64_t *first, int64_t *rows) {
  *first = total * r / n;
  *rows = total * (r + 1) / n - *first;
}

/*
** Slab r's view of convolution L: the rows of its output (pooled), of its input (the previous layer's output
** slab, or the image's), and the input rows the filter reaches outside them: rows [c0 stride - r/2, (c1 - 1)
** stride + r - r/2) for convolution rows [c0, c1) = the output rows times the pool window, clipped to the image.
*/
static void conv_slab(const struct strata__layer *L, int n, int r, struct strata_spatial_layer *o) {
  const int64_t ho = L->ch / L->pool, pad = L->r / 2;
  share(L->h, n, r, &o->in_first, &o->in_rows); /* the previous layer's output shares the same way */
  share(ho, n, r, &o->out_first, &o->out_rows);
  const int64_t c0 = o->out_first * L->pool, c1 = (o->out_first + o->out_rows) * L->pool;
  int64_t need0 = c0 * L->stride - pad, need1 = (c1 - 1) * L->stride + L->r - pad;
  need0 = need0 < 0 ? 0 : need0;
  need1 = need1 > L->h ? L->h : need1;
  o->halo_top = o->in_first > need0 ? o->in_first - need0 : 0;
  o->halo_bottom = need1 > o->in_first + o->in_rows ? need1 - (o->in_first + o->in_rows) : 0;
  const uint64_t in = (uint64_t)(L->c * (o->in_rows + o->halo_top + o->halo_bottom) * L->w);
  const uint64_t conv = (uint64_t)(L->k * (c1 - c0) * L->cw), pooled = (uint64_t)(L->k * o->out_rows * (L->cw / L->pool));
  o->act_bytes = 4 * (in + (L->pool > 1 ? 2 * conv + pooled : conv));
  o->halo_bytes = 4 * (uint64_t)(L->c * (o->halo_top + o->halo_bottom) * L->w);
}

/* The whole check and the layer, in one walk (layer < 0: check only). */
static int spatial_walk(strata_model_t m, int slabs, int rank, int layer, struct strata_spatial_layer *out) {
  if (!m)
    return strata__error(STRATA_ERR_INVALID, "spatial: the model is NULL");
  const char *name = m->cfg.name;
  if (m->cfg.kind != STRATA_MODEL_CNN)
    return strata__error(STRATA_ERR_INVALID, "%s: spatial parallelism cuts images by rows: it needs a cnn, not %s",
                         name, m->cfg.kind == STRATA_MODEL_GPT ? "a gpt" : "an mlp");
  if (!m->cfg.gap)
    return strata__error(STRATA_ERR_INVALID,
                         "%s: spatial parallelism needs the cnn's \"gap\" (its slabs join their averages; a "
                         "classifier over every pixel would need the whole map on one device)", name);
  if (slabs < 1 || slabs > 65536)
    return strata__error(STRATA_ERR_RANGE, "%s: %d spatial slabs: give 1 or more", name, slabs);
  if (rank < 0 || rank >= slabs)
    return strata__error(STRATA_ERR_RANGE, "spatial: slab %d of %d", rank, slabs);
  if (layer >= m->nlayers)
    return strata__error(STRATA_ERR_RANGE, "spatial: layer %d out of range (the model has %d)", layer, m->nlayers);
  for (int i = 0; i < m->nlayers; i++) {
    const struct strata__layer *L = &m->layers[i];
    struct strata_spatial_layer s = {0};
    if (L->kind == STRATA__LAYER_CONV) {
      const int64_t ho = L->ch / L->pool;
      if (slabs > ho)
        return strata__error(STRATA_ERR_SHAPE, "%s: %d spatial slabs are more than the %lld rows of %s's output", name,
                             slabs, (long long)ho, L->info.name);
      /* each slab's halo must lie in its neighbour's slab (one exchange with each neighbour) */
      for (int r = 0; r < slabs; r++) {
        struct strata_spatial_layer a, up = {0}, down = {0};
        conv_slab(L, slabs, r, &a);
        if (r > 0)
          conv_slab(L, slabs, r - 1, &up);
        if (r + 1 < slabs)
          conv_slab(L, slabs, r + 1, &down);
        const int short_up = r > 0 && a.halo_top > up.in_rows, short_down = r + 1 < slabs && a.halo_bottom > down.in_rows;
        if (short_up || short_down)
          return strata__error(STRATA_ERR_SHAPE,
                               "%s: %d spatial slabs leave slab %d of %s %lld input rows, fewer than the %lld-row "
                               "halo its %lldx%lld filter needs from it",
                               name, slabs, short_up ? r - 1 : r + 1, L->info.name,
                               (long long)(short_up ? up.in_rows : down.in_rows),
                               (long long)(short_up ? a.halo_top : a.halo_bottom), (long long)L->r, (long long)L->r);
      }
      conv_slab(L, slabs, rank, &s);
    } else { /* the gap classifier: the slab's share of the last map, its averages joined; logits whole */
      share(L->h, slabs, rank, &s.in_first, &s.in_rows);
      s.out_first = 0;
      s.out_rows = 1;
      s.act_bytes = 4 * (uint64_t)(L->c * s.in_rows * L->w + L->in + 2 * L->out);
    }
    if (i == layer)
      *out = s;
  }
  return STRATA_OK;
}

STRATA_API int strata_model_spatial_check(strata_model_t m, int slabs) { return spatial_walk(m, slabs, 0, -1, NULL); }

STRATA_API int strata_model_spatial_layer(strata_model_t m, int slabs, int rank, int layer,
                                          struct strata_spatial_layer *out) {
  if (!out || layer < 0)
    return strata__error(STRATA_ERR_INVALID, "strata_model_spatial_layer: NULL output or negative layer");
  return spatial_walk(m, slabs, rank, layer, out);
}
