/* SPDX-License-Identifier: MIT */
/* optimizer.c — the update of a step: the global gradient norm and its clip, AdamW per stage, and the learning rate
** (linear warm-up, cosine decay). */
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

float strata__clip_scale(const strata_trainer_t tr, float *norm) {
  double sum = 0;
  for (size_t t = 0; t < tr->ntensors; t++) {
    /* a cut tensor's sum is its slices', in slice order (a part held by several slices: its first's); a whole one
    ** is the same on every slice; with ZeRO each replica has the sums of its shard's part, added in replica order */
    double x = 0;
    for (int r = 0; r < (tr->zero ? tr->replicas : 1); r++)
      for (int k = 0; k < (tr->tensor_split[t] ? tr->tp : 1); k += tr->tensor_split[t] ? tr->tensor_split[t] : 1)
        x += tr->sumsq[(size_t)(r * tr->tp + k) * tr->ntensors + t];
    sum += x;
  }
  *norm = (float)sqrt(sum);
  return (tr->opt.clip > 0 && *norm > tr->opt.clip) ? tr->opt.clip / *norm : 1.0f;
}

int strata__stage_optimize(strata_trainer_t tr, int s, float gscale, float lr) {
  const struct strata_train_options *o = &tr->opt;
  TRY(strata__stage_update(tr->st[s], gscale, lr, o->beta1, o->beta2, o->eps, o->weight_decay, tr->step + 1));
  return strata_queue_finish(tr->st[s]->q);
}

int strata__stage_sumsq(strata_trainer_t tr, int s) {
  /* where stage s's tensors start: its chain's row (replica 0's chains without ZeRO) */
  size_t base = (size_t)(tr->zero ? strata__stage_chain(tr, s) : strata__stage_slice(tr, s)) * tr->ntensors;
  for (int i = 0; i < s % tr->nstages; i++)
    base += (size_t)strata__home_stage(tr, 0, i)->ntensors;
  return strata__stage_grad_sumsq(tr->st[s], tr->sumsq + base);
}

/* Learning rate of step `s` (0-based): linear warm-up, then cosine to min_lr. */
float strata__lr_at(const struct strata_train_options *o, int64_t s) {
  if (o->warmup > 0 && s < o->warmup)
    return o->lr * (float)(s + 1) / (float)o->warmup;
  double span = (double)(o->steps - o->warmup);
  double t = span > 0 ? (double)(s - o->warmup) / span : 1.0;
  if (t > 1)
    t = 1;
  return (float)(o->min_lr + 0.5 * (o->lr - o->min_lr) * (1 + cos(M_PI * t)));
}
