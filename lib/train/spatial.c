/* SPDX-License-Identifier: MIT */
/* spatial.c — the trainer's side of spatial parallelism: which layouts and options run a cnn's images as slabs. */
#include "config.h"

#include <strata/layout.h>

#include "train/trainer.h"
#include "core/core.h"

int strata__spatial_check(strata_model_t model, const struct strata_train_options *opts, strata_layout_t layout,
                          int ndevices) {
  const int n = opts->spatial;
  TRY(strata_model_spatial_check(model, n));
  const int pp = strata_layout_pp(layout);
  for (int r = 0; r < pp; r++) /* with pp, every stage is a slab group of the same N (slab k sends to slab k) */
    if (strata_layout_tp(layout, r) != n)
      return strata__error(STRATA_ERR_INVALID, "spatial %d: the layout's slices (tp %d on rank %d) must be its %d slabs",
                           n, strata_layout_tp(layout, r), r, n);
  if (strata_layout_zero(layout))
    return strata__error(STRATA_ERR_UNSUPPORTED, "spatial %d: not with ZeRO yet", n);
  if (opts->precision != STRATA_FLOAT32 || strata_layout_precision(layout) != STRATA_FLOAT32)
    return strata__error(STRATA_ERR_UNSUPPORTED, "spatial %d: float32 only so far, not bf16", n);
  if (strata_schedule_kind_split_backward(strata_layout_schedule(layout)))
    return strata__error(STRATA_ERR_UNSUPPORTED, "spatial %d: not with a split backward (%s)", n,
                         strata_schedule_kind_name(strata_layout_schedule(layout)));
  if (opts->cluster)
    return strata__error(STRATA_ERR_UNSUPPORTED, "spatial %d: not across MPI ranks yet", n);
  const int dp = strata_layout_dp(layout);
  for (int r = 0; r < dp; r++)
    for (int k = 0; k < n * pp; k++) {
      int d = -1;
      TRY(strata_layout_device(layout, r, k / n, k % n, &d));
      if (d < 0 || d >= ndevices)
        return strata__error(STRATA_ERR_NOT_FOUND, "spatial %d: no device %d (there are %d)", n, d, ndevices);
    }
  return STRATA_OK;
}
