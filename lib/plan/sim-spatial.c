/* SPDX-License-Identifier: MIT */
/* sim-spatial.c — the simulator's costing of a spatial slab: its share of each layer's work, its halo exchanges, the
** averages' join and the replicated weights' gradient join, as model/slab.c runs them, and what of the backward's
** joins its compute covers. */
#include "config.h"

#include <stdlib.h>

#include "model/model.h"
#include "plan/plan.h"
#include "core/core.h"

int strata__plan_spatial_stage(const struct strata_machine *c, const struct strata_device_cost *w,
                               strata_model_t model, int first, int last, int n, int slab, int64_t rows,
                               const int *devs, struct strata__plan_spatial *out) {
  *out = (struct strata__plan_spatial){0};
  double gbytes = 0;
  int gjoins = 0;
  /* each layer's backward (seconds) and its gradient sum's, for the overlap below */
  double *lb = calloc((size_t)(last - first) * 2 + 1, sizeof *lb), *lg = lb + (last - first);
  if (!lb)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory simulating a spatial stage");
  for (int li = first; li < last; li++) {
    const struct strata__layer *Ly = &model->layers[li];
    struct strata_spatial_layer mine, whole;
    TRY(strata_model_spatial_layer(model, n, slab, li, &mine));
    TRY(strata_model_spatial_layer(model, 1, 0, li, &whole));
    /* the slab's output rows of the layer's (the classifier: all of it, every slab computes its logits) */
    const double share = whole.out_rows > 0 ? (double)mine.out_rows / (double)whole.out_rows : 1.0;
    if (li == first && li > 0) /* its input rows' gradient, sent back to the same slab of the stage before */
      out->in_share = (double)mine.in_rows / (double)Ly->h;
    if (li == last - 1) /* its output rows, sent to the same slab of the next stage */
      out->out_share = share;
    const struct strata__plan_work f = strata__plan_layer_part(w, model, 1, li, rows, STRATA__PLAN_PART_FWD),
                                   b = strata__plan_layer_part(w, model, 1, li, rows, STRATA__PLAN_PART_FULL);
    out->f += f.s * share;
    out->b += b.s * share;
    lb[li - first] = b.s * share;
    struct strata_layer_info info;
    strata_model_layer(model, li, &info);
    out->params += (double)info.params;
    if (info.params) { /* the step's last backward sums each layer's gradients over the slabs, one join a layer */
      gbytes += 4.0 * (double)info.params;
      gjoins++;
      lg[li - first] = strata__plan_joins_s(c, devs, 4.0 * (double)info.params, 1, n);
    }
    if (Ly->kind != STRATA__LAYER_CONV) { /* the gap classifier: its slab's share of the averages, joined */
      out->jf += 4.0 * (double)rows * (double)Ly->c;
      out->nf++;
      continue;
    }
    /* the rows the slab convolves (its own and the halo) copied in, forward and again (restored) backward; the
    ** convolution writes the rows it keeps and the weights' gradient reads their gradient as they are; the input's
    ** gradient (not the first layer's) takes the rows' gradient into the whole convolution's and its own rows back */
    const double in_rows = (double)rows * (double)Ly->c * (double)(mine.in_rows + mine.halo_top + mine.halo_bottom) *
                           (double)Ly->w,
                 out_rows = (double)rows * (double)Ly->k * (double)(mine.out_rows * Ly->pool) * (double)Ly->cw;
    out->f += strata__plan_op_s(w, STRATA_PLAN_OP_ADD, in_rows);
    const double copies = strata__plan_op_s(w, STRATA_PLAN_OP_ADD, Ly->first ? in_rows : 2 * in_rows + out_rows);
    out->b += copies;
    lb[li - first] += copies;
    /* the halo exchange: an all-reduce of 2 n slots of the most rows any slab receives (slab.c's exchange buffer),
    ** forward and, for the input gradient (not the first layer's), backward */
    int64_t hmax = 0;
    for (int k = 0; k < n; k++) {
      struct strata_spatial_layer o;
      TRY(strata_model_spatial_layer(model, n, k, li, &o));
      hmax = o.halo_top > hmax ? o.halo_top : hmax;
      hmax = o.halo_bottom > hmax ? o.halo_bottom : hmax;
    }
    if (Ly->first || hmax == 0)
      continue;
    const double xbuf = 4.0 * 2 * n * (double)rows * (double)(Ly->c * hmax * Ly->w);
    out->jf += xbuf, out->nf++;
    out->jb += xbuf, out->nb++;
    out->halo_bytes += xbuf;
    /* the halo exchange is in flight while the slab's own rows are copied in; the halo gradients' while the
    ** weights' gradient is computed */
    const double ex = strata__plan_joins_s(c, devs, xbuf, 1, n),
                 own = strata__plan_op_s(w, STRATA_PLAN_OP_ADD, in_rows),
                 wt = strata__plan_layer_part(w, model, 1, li, rows, STRATA__PLAN_PART_WEIGHT).s * share;
    out->hidden_f += ex < own ? ex : own;
    out->hidden_b += ex < wt ? ex : wt;
  }
  out->grad_s = strata__plan_joins_s(c, devs, gbytes, gjoins, n);
  out->grad_bytes = gbytes;
  /* the gradient sums, posted as each layer's backward ends (last layer first), move one after another while the
  ** backward goes on; what is left when it ends is waited for */
  double t = 0, done = 0;
  for (int li = last - 1; li >= first; li--) {
    t += lb[li - first];
    if (lg[li - first] > 0)
      done = (done > t ? done : t) + lg[li - first];
  }
  out->grad_exposed_s = done > t ? done - t : 0;
  free(lb);
  return STRATA_OK;
}
