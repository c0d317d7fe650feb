/* SPDX-License-Identifier: MIT */
/* spatial.c — spatial parallelism's geometry: a cnn's rows cut into slabs, the halo rows each convolution needs
** from its neighbours, and what a slab keeps. */
#include "config.h"

#include <stdio.h>

#include "model/model.h"
#include "core/core.h"

/*
** Slab r's view of convolution L, from the stage's own geometry (strata__slab_conv): the rows of its input (the
** previous layer's output slab; the first layer: every slab keeps the whole image) and output (pooled), the halo
** rows it receives, and what it keeps: its input (and halo rows), the convolution's rows, ReLU and indices.
*/
static void conv_slab(const struct strata__layer *L, int n, int r, struct strata_spatial_layer *o) {
  struct strata__slab s;
  strata__slab_conv(L, n, r, &s);
  const int64_t ho = L->ch / L->pool;
  o->in_first = s.in0;
  o->in_rows = s.rows;
  strata__slab_share(ho, n, r, &o->out_first, &o->out_rows);
  o->halo_top = s.ht;
  o->halo_bottom = s.hb;
  const uint64_t in = (uint64_t)(L->c * (L->first ? L->h : s.rows + s.ht + s.hb) * L->w);
  const uint64_t conv = (uint64_t)(L->k * o->out_rows * L->pool * L->cw);
  const uint64_t pooled = (uint64_t)(L->k * o->out_rows * (L->cw / L->pool));
  o->act_bytes = 4 * (in + (L->pool > 1 ? 2 * conv + pooled : conv));
  o->halo_bytes = 4 * (uint64_t)(L->c * (s.ht + s.hb) * L->w);
}

/* The whole check and the layer, in one walk (layer < 0: check only). */
static int spatial_walk(strata_model_t m, int slabs, int rank, int layer, struct strata_spatial_layer *out) {
  if (!m)
    return strata__error(STRATA_ERR_INVALID, "spatial: the model is NULL");
  const char *name = m->cfg.name;
  if (m->cfg.kind != STRATA_MODEL_CNN)
    return strata__error(STRATA_ERR_INVALID, "%s: spatial parallelism cuts images by rows: it needs a cnn, not %s",
                         name, m->cfg.kind == STRATA_MODEL_GPT     ? "a gpt"
                               : m->cfg.kind == STRATA_MODEL_LLAMA ? "a llama"
                                                                   : "an mlp");
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
      strata__slab_share(L->h, slabs, rank, &s.in_first, &s.in_rows);
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
