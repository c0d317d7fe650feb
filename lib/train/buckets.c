/* SPDX-License-Identifier: MIT */
/* buckets.c — data parallelism's gradient buckets as the executor runs them: a stage's layers in runs of at least
** the trainer's bucket bytes, each one's all-reduce over the replicas posted as soon as its gradients are enqueued. */
#include "config.h"

#include <stdlib.h>

#include "comm/comm.h"
#include "core/core.h"
#include "train/ranks.h"
#include "train/trainer.h"

int strata__buckets_init(strata_trainer_t tr, strata_comm_t c, int s, struct strata__buckets *b) {
  struct strata__stage *st = tr->st[s];
  b->tr = tr;
  b->c = c;
  b->s = s;
  if (!st)
    return STRATA_OK; /* another rank's */
  const int L = strata__stage_layer_count(st);
  b->first = calloc((size_t)L, sizeof *b->first);
  b->done = calloc((size_t)L, sizeof *b->done);
  b->when = calloc((size_t)L, sizeof *b->when);
  if (!b->first || !b->done || !b->when)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory for gradient buckets");
  uint64_t acc = 0;
  for (int i = L - 1; i >= 0; i--) {
    size_t lo, hi;
    strata__stage_layer_range(st, i, i + 1, &lo, &hi);
    acc += (uint64_t)(hi - lo) * 4;
    if (acc >= tr->bucket_bytes || i == 0) {
      b->first[b->n++] = i;
      acc = 0;
    }
  }
  return STRATA_OK;
}

void strata__buckets_range(const struct strata__buckets *b, int k, size_t *lo, size_t *hi) {
  const struct strata__stage *st = b->tr->st[b->s];
  strata__stage_layer_range(st, b->first[k], k ? b->first[k - 1] : strata__stage_layer_count(st), lo, hi);
}

/*
** Bucket k to the stage's communicator (this replica's member), and go on:
** the device's queue keeps computing while the communicator's threads move
** the data, and the stage's OPTIMIZER waits for it. Without gates on this
** backend the call itself waits.
*/
static int bucket_post(struct strata__buckets *b, int k) {
  strata_trainer_t tr = b->tr;
  const int s = b->s;
  struct strata__stage *st = tr->st[s];
  struct strata_comm_info info;
  size_t lo, hi;
  strata__buckets_range(b, k, &lo, &hi);
  b->posted = k + 1;
  b->when[k] = strata__now();
  strata_mem_t g = strata_mem(st->grads, lo);
  if (st->grads16) { /* a bf16 reduction: the bucket's gradients rounded into their bf16 copy, reduced there */
    strata_mem_t h = strata_mem_typed(st->grads16, lo, STRATA_BFLOAT16);
    TRY(strata_convert(st->q, g, h, (int64_t)(hi - lo)));
    g = h;
  }
  /* the replicas on several ranks: posted to this rank's thread for the group, which calls the cluster */
  int x = strata__ranks_post(tr, STRATA__COLL_ALLREDUCE, s, st->q, g, g, hi - lo, &b->done[k]);
  if (x != 1)
    return x;
  TRY(strata_comm_info(b->c, &info));
  /* every replica posts the same buckets in the same order, so the k-th calls meet */
  return strata__post_collective(tr, b->c, info.asynchronous, STRATA__COLL_ALLREDUCE, strata__stage_replica(tr, s),
                                 st->q, g, g, hi - lo, STRATA_SUM, &b->done[k]);
}

int strata__buckets_ready(void *arg, int layer) {
  struct strata__buckets *b = arg;
  while (b->posted < b->n && layer <= b->first[b->posted])
    TRY(bucket_post(b, b->posted));
  return STRATA_OK;
}

int strata__buckets_post_rest(struct strata__buckets *b) {
  while (b->posted < b->n)
    TRY(bucket_post(b, b->posted));
  return STRATA_OK;
}

void strata__buckets_free(struct strata__buckets *b) {
  for (int k = 0; k < b->posted && b->done && b->c; k++) /* (across ranks: the step's end) */
    if (b->done[k]) { /* a failed step: never waited for */
      strata_queue_finish(b->tr->st[b->s]->q);
      strata__comm_release(b->c, b->done[k], NULL, NULL);
    }
  free(b->first);
  free(b->done);
  free(b->when);
}
