/* SPDX-License-Identifier: MIT */
/* pass.c — passes outside training through the executor: evaluation, logits, a loss and its gradient, on lists
** derived from the training schedule. */
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

#include "core/bf16.h"
#include "core/file.h"
#include "core/parse.h"
#include "device/registry.h"
#include "train/ranks.h"
#include "train/trainer.h"

/* ---- passes outside training (evaluation, logits, gradient checks) through the executor ---- */


int strata__pass_schedule(strata_trainer_t tr, int backward, strata_schedule_t *out) {
  const int D = strata_schedule_devices(tr->sched);
  struct strata_action **lists = calloc((size_t)D, sizeof *lists);
  int *counts = calloc((size_t)D, sizeof *counts);
  int rc = lists && counts ? STRATA_OK : strata__error(STRATA_ERR_NOMEM, "out of host memory");
  for (int d = 0; d < D && !rc; d++) {
    int n = 0;
    const struct strata_action *list = strata_schedule_actions(tr->sched, d, &n);
    if (!(lists[d] = malloc(((size_t)n + 1) * sizeof *lists[d]))) {
      rc = strata__error(STRATA_ERR_NOMEM, "out of host memory");
      break;
    }
    for (int i = 0; i < n; i++) {
      struct strata_action a = list[i];
      if (a.microbatch != 0 || strata__stage_replica(tr, a.stage) != tr->home)
        continue; /* one micro-batch of the home replica; no update or gradient collective (micro-batch -1) */
      if ((a.kind == STRATA_ACTION_RECOMPUTE && i + 1 < n && list[i + 1].kind == STRATA_ACTION_BACKWARD_WEIGHT) ||
          (a.kind == STRATA_ACTION_TP_JOIN_BACKWARD && i > 0 && list[i - 1].kind == STRATA_ACTION_BACKWARD_WEIGHT))
        continue; /* the weight pass's recomputation and its joins (with_recompute): the W is inside B here */
      switch (a.kind) {
      case STRATA_ACTION_FORWARD:
      case STRATA_ACTION_SEND_ACT:
      case STRATA_ACTION_RECV_ACT:
      case STRATA_ACTION_TP_JOIN_FORWARD:
        break;
      case STRATA_ACTION_BACKWARD_INPUT: /* the backward whole, as one device runs it */
        a.kind = STRATA_ACTION_BACKWARD;
        /* fall through */
      case STRATA_ACTION_BACKWARD:
      case STRATA_ACTION_RECOMPUTE:
      case STRATA_ACTION_SEND_GRAD:
      case STRATA_ACTION_RECV_GRAD:
      case STRATA_ACTION_TP_JOIN_BACKWARD:
        if (!backward)
          continue;
        break;
      case STRATA_ACTION_PARAM_GATHER: { /* ZeRO-3's, kept with the F or the backward it gathers for */
        int j = i + 1;
        while (j < n && list[j].kind == STRATA_ACTION_RECOMPUTE)
          j++;
        const int next = j < n ? list[j].kind : -1;
        if (next != STRATA_ACTION_FORWARD &&
            !(backward && (next == STRATA_ACTION_BACKWARD || next == STRATA_ACTION_BACKWARD_INPUT)))
          continue;
        break;
      }
      default: /* W (inside B here) */
        continue;
      }
      lists[d][counts[d]++] = a;
    }
  }
  if (!rc)
    rc = strata_schedule_with_lists(tr->sched, (const struct strata_action *const *)lists, counts, out);
  for (int d = 0; lists && d < D; d++)
    free(lists[d]);
  free(lists);
  free(counts);
  return rc;
}

/*
** Run micro-batch 0 of the home replica on `inputs` and `targets` through the stages and, with `backward`, back:
** the executor on the pass's lists, its per-row losses in tr->losses[home x m]. `forwarded` as in strata__work.
*/
static int run_pass(strata_trainer_t tr, const void *inputs, const int32_t *targets, int backward,
                    int (*forwarded)(void *, struct strata__stage *, int, int, int), void *arg) {
  if (tr->comm_stale)
    TRY(strata__trainer_comms_renew(tr));
  if (!tr->pass[backward])
    TRY(strata__pass_schedule(tr, backward, &tr->pass[backward]));
  const void **in = calloc((size_t)tr->mtot, sizeof *in);
  const int32_t **tg = calloc((size_t)tr->mtot, sizeof *tg);
  if (!in || !tg) {
    free(in);
    free(tg);
    return strata__error(STRATA_ERR_NOMEM, "out of host memory");
  }
  in[tr->home * tr->m] = inputs;
  tg[tr->home * tr->m] = targets;
  struct strata__work w = {.sched = tr->pass[backward], .inputs = in, .targets = tg, .losses = tr->losses,
                           .in_elems = tr->in_elems, .rows = tr->rows, .forwarded = forwarded, .arg = arg};
  int rc = strata__execute(tr, &w, NULL);
  free(in);
  free(tg);
  if (!rc)
    rc = strata__trainer_finish_all(tr);
  strata__trainer_release_all(tr); /* to the devices' caches, for the next pass */
  return rc;
}

/* Sum of the per-row losses of the pass's micro-batch, as strata__stage_loss adds them. */
static double pass_loss(strata_trainer_t tr) { return strata__trainer_rows_loss(tr, tr->home * tr->m); }

/* Mean loss of one batch run forward through the stages (slot 0). */
static int forward_loss(strata_trainer_t tr, const void *inputs, const int32_t *targets, double *sum) {
  int rc = run_pass(tr, inputs, targets, 0, NULL, NULL);
  *sum = 0;
  if (!rc && strata__home_stage(tr, 0, tr->nstages - 1)->params) /* (else another rank's: its sum comes below) */
    *sum = pass_loss(tr);
  if (!rc)
    rc = strata__ranks_loss_sum(tr, sum);
  return rc;
}

STRATA_API int strata_trainer_eval(strata_trainer_t tr, int64_t batches, float *loss) {
  if (!tr || !loss || batches < 1)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_eval: need a trainer, an output and batches >= 1");
  if (!tr->data)
    return strata__error(STRATA_ERR_STATE, "strata_trainer_eval: the trainer was made without data");
  uint64_t state = 0x5eed5eedull ^ tr->opt.seed; /* the same validation batches every time */
  int64_t ctx = tr->images ? 0 : tr->model->cfg.context;
  double sum = 0;
  int rc = STRATA_OK;
  for (int64_t b = 0; b < batches && !rc; b++) {
    if (tr->stop && tr->stop(tr->stop_arg)) {
      rc = strata__error(STRATA_ERR_INTERRUPTED, "validation interrupted after %lld of %lld batches", (long long)b,
                         (long long)batches);
      break;
    }
    rc = strata_dataset_sample(tr->data, STRATA_SPLIT_VAL, tr->opt.batch, ctx, &state, tr->inputs[0], tr->targets[0]);
    double one = 0;
    if (!rc)
      rc = forward_loss(tr, tr->inputs[0], tr->targets[0], &one);
    sum += one;
  }
  strata__trainer_release_all(tr);
  if (!rc)
    *loss = (float)(sum / (double)(tr->rows * batches));
  return rc;
}

STRATA_API int strata_trainer_loss_grad(strata_trainer_t tr, const void *inputs, const int32_t *targets, int64_t batch,
                                        float *loss, float *grads) {
  if (!tr || !inputs || !targets || !loss)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_loss_grad: NULL argument");
  if (batch != tr->opt.batch)
    return strata__error(STRATA_ERR_SHAPE, "strata_trainer_loss_grad: batch %lld, the trainer was built for %lld",
                         (long long)batch, (long long)tr->opt.batch);
  for (int s = 0; s < strata__stages_all(tr); s++) {
    if (!tr->st[s])
      continue; /* another rank's, or a slice another stands for */
    tr->st[s]->loss_scale = 1.0f / (float)tr->rows;
    TRY(strata__stage_zero_grads(tr->st[s]));
  }
  if (grads && tr->zero >= 2)
    return strata__error(STRATA_ERR_UNSUPPORTED, "ZeRO-2 keeps no replica's whole gradients: a pass that returns "
                         "them needs ZeRO-1 or none");
  if (grads && tr->ranks && tr->ranks->spans)
    return strata__error(STRATA_ERR_UNSUPPORTED, "a backward pass outside the pipeline schedule, over a pipeline or "
                         "tensor-parallel group across ranks, is not in this version");
  double sum = 0;
  int rc = run_pass(tr, inputs, targets, grads != NULL, NULL, NULL);
  if (!rc)
    sum = pass_loss(tr);
  if (!rc && grads)
    rc = strata__trainer_gather(tr, 1, grads);
  strata__trainer_release_all(tr);
  if (!rc)
    *loss = (float)(sum / (double)tr->rows);
  return rc;
}

int strata__trainer_forward_backward(strata_trainer_t tr, const void *inputs, const int32_t *targets) {
  for (int s = 0; s < strata__stages_all(tr); s++) {
    if (!tr->st[s])
      continue;
    tr->st[s]->loss_scale = 1.0f / (float)tr->rows;
    TRY(strata__stage_zero_grads(tr->st[s]));
  }
  if (tr->ranks && tr->ranks->spans)
    return strata__error(STRATA_ERR_UNSUPPORTED, "a backward pass outside the pipeline schedule, over a pipeline or "
                         "tensor-parallel group across ranks, is not in this version");
  return run_pass(tr, inputs, targets, 1, NULL, NULL);
}

/* The logits a pass's last stage leaves: each slice its columns of the vocabulary (all of it without a
** vocabulary-parallel head, read from slice 0). */
struct logits_read {
  strata_trainer_t tr;
  int64_t batch, first, count;
  float *logits;
};

static int read_logits(void *arg, struct strata__stage *last, int s, int slot, int mb) {
  (void)mb;
  const struct logits_read *lr = arg;
  const int64_t T = lr->tr->model->cfg.context, V = lr->tr->model->cfg.vocab;
  int64_t c0 = 0, vl = V;
  if (!strata__stage_vocab(last, &c0, &vl) && strata__stage_slice(lr->tr, s) > 0)
    return STRATA_OK;
  strata_mem_t lg = strata__stage_logits(last, slot);
  if (lg.dtype == STRATA_FLOAT32) {
    for (int64_t b = 0; b < lr->batch; b++)
      for (int64_t p = 0; p < lr->count; p++)
        TRY(strata_buffer_read(last->q, lg.buf, strata__mem_byte(lg) + (size_t)((b * T + lr->first + p) * vl) * 4,
                               lr->logits + (b * lr->count + p) * V + c0, (size_t)vl * 4));
    return strata_queue_finish(last->q);
  }
  /* bfloat16 logits: read, then widened (exactly) into the caller's floats */
  const size_t n = (size_t)(lr->batch * lr->count * vl);
  uint16_t *h = malloc((n ? n : 1) * sizeof *h);
  if (!h)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory reading logits");
  int rc = STRATA_OK;
  for (int64_t b = 0; b < lr->batch && !rc; b++)
    for (int64_t p = 0; p < lr->count && !rc; p++)
      rc = strata_buffer_read(last->q, lg.buf, strata__mem_byte(lg) + (size_t)((b * T + lr->first + p) * vl) * 2,
                              h + (size_t)((b * lr->count + p) * vl), (size_t)vl * 2);
  if (!rc)
    rc = strata_queue_finish(last->q);
  for (int64_t r = 0; !rc && r < lr->batch * lr->count; r++)
    for (int64_t v = 0; v < vl; v++)
      lr->logits[r * V + c0 + v] = strata__bf16_widen(h[(size_t)(r * vl + v)]);
  free(h);
  return rc;
}

STRATA_API int strata_trainer_logits(strata_trainer_t tr, const int32_t *tokens, int64_t batch, float *logits) {
  if (!tr)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_logits: NULL argument");
  return strata_trainer_logits_at(tr, tokens, batch, tr->images ? 0 : tr->model->cfg.context - 1, 1, logits);
}

STRATA_API int strata_trainer_logits_at(strata_trainer_t tr, const int32_t *tokens, int64_t batch, int64_t first,
                                        int64_t count, float *logits) {
  if (!tr || !tokens || !logits)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_logits: NULL argument");
  if (tr->images)
    return strata__error(STRATA_ERR_UNSUPPORTED, "strata_trainer_logits: '%s' is not a text model",
                         tr->model->cfg.name);
  if (tr->ranks && tr->ranks->spans)
    return strata__error(STRATA_ERR_UNSUPPORTED, "strata_trainer_logits: a pipeline or tensor-parallel group across "
                         "ranks gives no logits in this version");
  if (batch < 1 || batch > tr->opt.batch)
    return strata__error(STRATA_ERR_SHAPE, "strata_trainer_logits: batch %lld, at most %lld", (long long)batch,
                         (long long)tr->opt.batch);
  int64_t T = tr->model->cfg.context, V = tr->model->cfg.vocab;
  if (first < 0 || count < 1 || first > T - count)
    return strata__error(STRATA_ERR_RANGE, "strata_trainer_logits: positions [%lld, %lld) outside the context of %lld",
                         (long long)first, (long long)(first + count), (long long)T);
  int32_t *in = tr->inputs[0];
  for (int64_t i = 0; i < tr->rows; i++) {
    in[i] = i < batch * T ? tokens[i] : 0;
    if (in[i] < 0 || in[i] >= V) {
      strata__trainer_release_all(tr);
      return strata__error(STRATA_ERR_RANGE, "strata_trainer_logits: token %lld at position %lld is outside the "
                           "vocabulary (%lld)", (long long)in[i], (long long)i, (long long)V);
    }
    tr->targets[0][i] = -1; /* no loss wanted */
  }
  struct logits_read lr = {.tr = tr, .batch = batch, .first = first, .count = count, .logits = logits};
  int rc = run_pass(tr, in, tr->targets[0], 0, read_logits, &lr);
  strata__trainer_release_all(tr);
  return rc;
}

/* ---- generation with a KV cache (model/decode.c over the trainer's one stage) ---- */

struct strata_decoder {
  strata_trainer_t tr;
  struct strata__decoder *d;
};

STRATA_API int strata_trainer_decoder(strata_trainer_t tr, strata_decoder_t *dec) {
  if (!tr || !dec)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_decoder: NULL argument");
  *dec = NULL;
  if (tr->images)
    return strata__error(STRATA_ERR_UNSUPPORTED, "strata_trainer_decoder: '%s' is not a text model",
                         tr->model->cfg.name);
  if ((tr->ranks && tr->ranks->spans) || tr->nstages != 1 || tr->chains != 1)
    return strata__error(STRATA_ERR_UNSUPPORTED, "strata_trainer_decoder: KV-cache decoding runs on a one-device "
                         "trainer; this one has %d pipeline stage%s and %d chain%s (pp, tp or dp)", tr->nstages,
                         tr->nstages == 1 ? "" : "s", tr->chains, tr->chains == 1 ? "" : "s");
  struct strata_decoder *o = calloc(1, sizeof *o);
  if (!o)
    return strata__error(STRATA_ERR_NOMEM, "strata_trainer_decoder: out of host memory");
  o->tr = tr;
  int rc = strata__decoder_new(tr->st[0], &o->d);
  if (rc) {
    free(o);
    return rc;
  }
  *dec = o;
  return STRATA_OK;
}

STRATA_API int strata_decoder_feed(strata_decoder_t dec, const int32_t *tokens, int64_t count, float *logits) {
  if (!dec || !tokens || count < 1)
    return strata__error(STRATA_ERR_INVALID, "strata_decoder_feed: NULL argument or no token");
  const int64_t ctx = dec->tr->model->cfg.context, pos = strata__decoder_pos(dec->d);
  if (count > ctx - pos)
    return strata__error(STRATA_ERR_RANGE, "strata_decoder_feed: %lld token%s at position %lld go past the context "
                         "of %lld", (long long)count, count == 1 ? "" : "s", (long long)pos, (long long)ctx);
  for (int64_t i = 0; i < count; i++)
    TRY(strata__decoder_step(dec->d, tokens[i], i == count - 1 ? logits : NULL));
  return STRATA_OK;
}

STRATA_API int64_t strata_decoder_position(strata_decoder_t dec) { return dec ? strata__decoder_pos(dec->d) : 0; }

STRATA_API void strata_decoder_reset(strata_decoder_t dec) {
  if (dec)
    strata__decoder_reset(dec->d);
}

STRATA_API void strata_decoder_free(strata_decoder_t dec) {
  if (!dec)
    return;
  strata__decoder_free(dec->d);
  free(dec);
}
