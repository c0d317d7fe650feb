/* SPDX-License-Identifier: MIT */
/* seqpar.c — sequence parallelism's part of a GPT or llama stage: when a stage can run it, and the all-gathers, reduce-scatters
** and gradient sums the layers call at their tensor-parallel join points. */
#include "config.h"

#include "model/stage.h"
#include "core/core.h"

/*
** A stage cut `tp` ways holds, with sequence parallelism, rows [rank R/tp, (rank + 1) R/tp) of each micro-batch's R =
** mb x T token rows in its layernorm and residual regions (Megatron cuts each sequence; strata cuts the micro-batch's
** rows, which is the same bytes and the same collectives, with no reordering: one sequence, the same thing). tp must
** divide the context so that every micro-batch size cuts evenly; a split backward (zb, zbv, dualpipev) would need the
** gathers again in its weight pass and is not built.
*/
int strata__seqpar_check(const struct strata_model *model, int tp, int split_backward) {
  const struct strata_model_config *c = &model->cfg;
  if (!strata__model_text(c))
    return strata__error(STRATA_ERR_UNSUPPORTED, "sequence parallelism is for GPT models and llamas; model '%s' is %s",
                         c->name, c->kind == STRATA_MODEL_MLP ? "an MLP (no sequence)" : "a CNN (no sequence)");
  if (tp < 2)
    return strata__error(STRATA_ERR_INVALID, "sequence parallelism needs tensor parallelism (tp > 1), not tp %d", tp);
  if (c->context % tp)
    return strata__error(STRATA_ERR_SHAPE, "sequence parallelism: tp %d does not divide the context %lld of '%s'", tp,
                         (long long)c->context, c->name);
  if (split_backward)
    return strata__error(STRATA_ERR_UNSUPPORTED, "sequence parallelism with a split backward (zb, zbv, dualpipev) is "
                         "not built: its weight pass would gather again; use 1f1b, gpipe or interleaved");
  return STRATA_OK;
}

strata_mem_t strata__seq_mine(const struct strata__stage *st, strata_mem_t whole, size_t count) {
  whole.off += (size_t)st->tp.rank * count;
  return whole;
}

static int seq_call(struct strata__stage *st, strata_queue_t q, int gather, strata_mem_t send, strata_mem_t recv,
                    size_t count) {
  if (!st->seq)
    return strata__error(STRATA_ERR_STATE, "stage: a sequence-parallel stage has no communicator for its slices' rows");
  return st->seq(st->join_arg, q, gather, send, recv, count);
}

int strata__seq_gather(struct strata__stage *st, strata_queue_t q, strata_mem_t mine, strata_mem_t all, size_t count) {
  return seq_call(st, q, 1, mine, all, count);
}

int strata__seq_scatter(struct strata__stage *st, strata_queue_t q, strata_mem_t all, size_t count,
                        strata_mem_t *mine) {
  *mine = strata__seq_mine(st, all, count);
  if (all.dtype != STRATA_BFLOAT16)
    return seq_call(st, q, 0, all, *mine, count);
  /* bfloat16: summed in float32 (join32, as a join) and rounded once */
  const strata_mem_t w = strata_mem(st->join32, 0), wm = strata__seq_mine(st, w, count);
  TRY(strata_convert(q, all, w, (int64_t)(count * (size_t)st->tp.size)));
  TRY(seq_call(st, q, 0, w, wm, count));
  return strata_convert(q, wm, *mine, (int64_t)count);
}

int strata__seq_ln_grads(struct strata__stage *st, strata_queue_t q, strata_mem_t part, strata_mem_t dg,
                         strata_mem_t db, int64_t cols) {
  if (!st->join)
    return strata__error(STRATA_ERR_STATE, "stage: a sequence-parallel stage has no communicator to join its slices");
  TRY(st->join(st->join_arg, q, part, (size_t)(2 * cols), STRATA_SUM));
  TRY(strata_add(q, dg, part, dg, cols));
  strata_mem_t pb = part;
  pb.off += (size_t)cols;
  return strata_add(q, db, pb, db, cols);
}
