/* SPDX-License-Identifier: MIT */
/* gather.c — ZeRO-3's gathers as the executor runs them: each layer's weights copied from the replicas' shards into
** the stage's window, PARAM_GATHER posting a pass's first ones ahead, and each gather in the trace. */
#include "config.h"

#include <stdio.h>

#include "train/trainer.h"

int strata__gather_fetch(void *hook, strata_queue_t q, size_t lo, size_t hi, strata_mem_t dst) {
  const struct strata__gather_hook *h = hook;
  return strata__trainer_gather_weights(h->tr, h->s, q, lo, hi, dst);
}

/* The stage layer that holds stage tensor t. */
static int layer_of(const struct strata__stage *st, int t) {
  const int n = strata__stage_layer_count(st);
  int i = 0;
  while (i + 1 < n && st->layer_tensor[i + 1] <= t)
    i++;
  return i;
}

void strata__gather_landed(void *hook, int t, size_t lo, size_t hi, double posted, double landed) {
  const struct strata__gather_hook *h = hook;
  char name[48];
  snprintf(name, sizeof name, "gather %d.%d %d", h->s, h->mb, layer_of(h->tr->st[h->s], t));
  pthread_mutex_lock(h->lock);
  strata__trace_add_comm(h->tr, name, "allgather", (uint64_t)(hi - lo) * 4, STRATA__GROUP_REPLICAS, h->s, posted,
                         landed > posted ? landed : posted, 2 * h->rank + 1, posted);
  pthread_mutex_unlock(h->lock);
}

int strata__gather_action(strata_trainer_t tr, int s, int next) {
  struct strata__stage *st = tr->st[s];
  if (!st->zero3)
    return STRATA_OK; /* (a schedule gathers only for a ZeRO-3 trainer; another has its weights whole) */
  return strata__stage_window_prefetch(st, next);
}
