/* SPDX-License-Identifier: MIT */
/* loss.c — what a stage's last layer leaves in a slot for the trainer to read: its per-row losses, its logits. */
#include "config.h"

#include <stdlib.h>

#include "model/stage.h"
#include "core/core.h"

static int check_slot(struct strata__stage *st, int s) {
  if (s < 0 || s >= st->nslots || !st->slots[s].buf)
    return strata__error(STRATA_ERR_STATE, "stage: slot %d holds no micro-batch", s);
  return STRATA_OK;
}

/* Offset and count of the per-row losses of the loss layer in a slot. */
static int loss_region(struct strata__stage *st, size_t *off, int64_t *rows) {
  if (!strata__stage_has_loss(st))
    return strata__error(STRATA_ERR_STATE, "stage: only the last stage has a loss");
  int i = strata__stage_layer_count(st) - 1;
  const struct strata__layer *L = strata__stage_layer_at(st, i);
  struct strata__dims d = strata__stage_dims(st);
  if (L->kind == STRATA__LAYER_LM_HEAD)
    *off = st->saved_off[i] + strata__head_layout(&d).loss;
  else
    *off = st->saved_off[i] + strata__units((size_t)(d.R * L->out), d.act);
  *rows = d.R;
  return STRATA_OK;
}

int strata__stage_loss(struct strata__stage *st, int s, double *sum) {
  TRY(check_slot(st, s));
  size_t off = 0;
  int64_t rows = 0;
  TRY(loss_region(st, &off, &rows));
  float *l = malloc((size_t)rows * sizeof *l);
  if (!l)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory reading losses");
  int rc = strata_buffer_download(st->q, st->slots[s].buf, off * 4, l, (size_t)rows * 4);
  double acc = 0;
  for (int64_t r = 0; r < rows; r++)
    acc += l[r];
  free(l);
  if (!rc)
    *sum = acc;
  return rc;
}

int strata__stage_loss_read(struct strata__stage *st, int s, float *rows) {
  TRY(check_slot(st, s));
  size_t off = 0;
  int64_t n = 0;
  TRY(loss_region(st, &off, &n));
  return strata_buffer_read(st->q, st->slots[s].buf, off * 4, rows, (size_t)n * 4);
}

int strata__stage_vocab(const struct strata__stage *st, int64_t *first, int64_t *count) {
  struct strata__dims d = strata__stage_dims(st);
  *first = d.voff;
  *count = d.V;
  return d.vp;
}

strata_mem_t strata__stage_logits(struct strata__stage *st, int s) {
  int i = strata__stage_layer_count(st) - 1;
  struct strata__dims d = strata__stage_dims(st);
  return strata__at(st->slots[s].buf, st->saved_off[i] + strata__head_layout(&d).logits, 0, st->act);
}
