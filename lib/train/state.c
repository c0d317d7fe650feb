/* SPDX-License-Identifier: MIT */
/* state.c — checkpoints with the full training state (parameters, AdamW moments, step, data stream, options), as
** safetensors written atomically, whole tensors under GPT-2 names so that any layout resumes any other. */
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

#define CHECKPOINT_FORMAT "strata-checkpoint/1"

/* ---- checkpoints ---- */

static int options_json(const struct strata_train_options *o, char **out) {
  json_t *j = json_pack("{s:I, s:I, s:I, s:f, s:f, s:I, s:f, s:f, s:f, s:f, s:f}", "batch", (json_int_t)o->batch,
                        "accum", (json_int_t)o->accum, "steps", (json_int_t)o->steps, "lr", (double)o->lr, "min_lr",
                        (double)o->min_lr, "warmup", (json_int_t)o->warmup, "weight_decay", (double)o->weight_decay,
                        "beta1", (double)o->beta1, "beta2", (double)o->beta2, "eps", (double)o->eps, "clip",
                        (double)o->clip);
  if (!j)
    return strata__error(STRATA_ERR_NOMEM, "out of memory writing options");
  *out = json_dumps(j, JSON_SORT_KEYS | JSON_COMPACT);
  json_decref(j);
  return *out ? STRATA_OK : strata__error(STRATA_ERR_NOMEM, "out of memory writing options");
}

/* Every tensor of every stage, in global order. */
static const struct strata__tensor *tensor_at(strata_trainer_t tr, size_t t, size_t *host_off) {
  size_t base = 0, at = 0;
  for (int s = 0; s < tr->nstages; s++) {
    const struct strata__stage *st = strata__home_stage(tr, 0, s);
    if (t < base + (size_t)st->ntensors) {
      const struct strata__tensor *x = &st->tensors[t - base];
      for (size_t j = base; j < t; j++)
        at += st->tensors[j - base].full_n;
      *host_off = at;
      return x;
    }
    base += (size_t)st->ntensors;
    at += strata__stage_full(st);
  }
  return NULL;
}

STRATA_API int strata_trainer_save(strata_trainer_t tr, const char *path) {
  if (!tr || !path)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_save: NULL argument");
  size_t n = strata__trainer_total_params(tr), nt = tr->ntensors;
  float *host = malloc((3 * n + 1) * sizeof *host);
  struct strata_st_tensor *ts = calloc(3 * nt + 1, sizeof *ts);
  char *names = calloc(3 * nt + 1, 96);
  char *model_json = NULL, *opt_json = NULL;
  int rc = (!host || !ts || !names) ? strata__error(STRATA_ERR_NOMEM, "out of host memory saving a checkpoint")
                                    : STRATA_OK;
  for (int k = 0; k < 3 && !rc; k++)
    rc = strata__trainer_gather(tr, k == 0 ? 0 : k + 1, host + (size_t)k * n);
  if (!rc)
    rc = strata_model_to_json(tr->model, &model_json);
  if (!rc)
    rc = options_json(&tr->opt, &opt_json);
  if (!rc) {
    static const char *const prefix[3] = {"", "optimizer.m.", "optimizer.v."};
    for (int k = 0; k < 3 && !rc; k++)
      for (size_t t = 0; t < nt && !rc; t++) {
        size_t off = 0;
        const struct strata__tensor *x = tensor_at(tr, t, &off);
        if (!x) {
          rc = strata__error(STRATA_ERR_INTERNAL, "tensor %zu of %zu not found", t, nt);
          break;
        }
        struct strata_st_tensor *o = &ts[(size_t)k * nt + t];
        char *nm = names + ((size_t)k * nt + t) * 96;
        snprintf(nm, 96, "%s%s", prefix[k], x->name);
        o->name = nm;
        o->ndim = x->ndim;
        memcpy(o->shape, x->full, sizeof o->shape);
        o->data = host + (size_t)k * n + off;
      }
    char step[32], seed[32], state[32];
    snprintf(step, sizeof step, "%" PRId64, tr->step);
    snprintf(seed, sizeof seed, "%" PRIu64, tr->opt.seed);
    snprintf(state, sizeof state, "%" PRIu64, tr->data_state);
    struct strata_st_meta meta[] = {{"format", CHECKPOINT_FORMAT}, {"model", model_json}, {"options", opt_json},
                                    {"step", step},                {"seed", seed},        {"data_state", state}};
    if (!rc && strata__ranks_writer(tr)) /* one file for the whole job, from rank 0's gathered tensors */
      rc = strata_safetensors_write(path, ts, 3 * nt, meta, sizeof meta / sizeof meta[0]);
    rc = strata__ranks_status(tr, rc); /* every rank learns whether it was written */
  }
  free(model_json);
  free(opt_json);
  free(host);
  free(ts);
  free(names);
  return rc;
}

/* Parse an unsigned decimal metadata field ('step' at most INT64_MAX). */
static int meta_u64(strata_safetensors_t f, const char *path, const char *key, uint64_t *v) {
  const char *s = strata_safetensors_meta(f, key);
  if (!s || !*s)
    return strata__error(STRATA_ERR_PARSE, "%s: checkpoint metadata has no '%s'", path, key);
  int rc = strata__parse_uint(s, strcmp(key, "step") == 0 ? (uint64_t)INT64_MAX : UINT64_MAX, v);
  if (rc)
    return strata__error(STRATA_ERR_PARSE, "%s: checkpoint metadata '%s' = '%s' is not a number: %s", path, key, s,
                         strata__parse_why());
  return STRATA_OK;
}

STRATA_API int strata_trainer_load(strata_trainer_t tr, const char *path) {
  if (!tr || !path)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_load: NULL argument");
  strata_safetensors_t f = NULL;
  TRY(strata_safetensors_read(path, &f));
  size_t n = strata__trainer_total_params(tr);
  float *host = NULL;
  char *want = NULL;
  int rc = STRATA_OK;
  const char *format = strata_safetensors_meta(f, "format");
  if (!format || strcmp(format, CHECKPOINT_FORMAT) != 0)
    rc = strata__error(STRATA_ERR_PARSE, "%s: not a strata checkpoint (metadata 'format' is %s%s%s, want %s)", path,
                       format ? "'" : "", format ? format : "missing", format ? "'" : "", CHECKPOINT_FORMAT);
  /* the model must be the same one (its name aside) */
  if (!rc)
    rc = strata_model_to_json(tr->model, &want);
  if (!rc) {
    const char *have = strata_safetensors_meta(f, "model");
    json_t *a = have ? json_loads(have, 0, NULL) : NULL, *b = json_loads(want, 0, NULL);
    if (a && b) {
      json_object_del(a, "name");
      json_object_del(b, "name");
    }
    if (!a || !b || !json_equal(a, b))
      rc = strata__error(STRATA_ERR_SHAPE, "%s: the checkpoint holds model %s, not this one (%s)", path,
                         have ? have : "(none)", want);
    json_decref(a);
    json_decref(b);
  }
  uint64_t step = 0, seed = 0, state = 0;
  if (!rc)
    rc = meta_u64(f, path, "step", &step);
  if (!rc)
    rc = meta_u64(f, path, "seed", &seed);
  if (!rc)
    rc = meta_u64(f, path, "data_state", &state);
  if (!rc && !(host = malloc((3 * n + 1) * sizeof *host)))
    rc = strata__error(STRATA_ERR_NOMEM, "out of host memory loading a checkpoint");
  static const char *const prefix[3] = {"", "optimizer.m.", "optimizer.v."};
  for (int k = 0; k < 3 && !rc; k++)
    for (size_t t = 0; t < tr->ntensors && !rc; t++) {
      size_t off = 0;
      const struct strata__tensor *x = tensor_at(tr, t, &off);
      if (!x) {
        rc = strata__error(STRATA_ERR_INTERNAL, "tensor %zu of %zu not found", t, tr->ntensors);
        break;
      }
      char nm[96];
      snprintf(nm, sizeof nm, "%s%s", prefix[k], x->name);
      int ndim;
      int64_t shape[STRATA_ST_MAX_DIMS];
      const float *data;
      rc = strata_safetensors_get(f, nm, &ndim, shape, &data);
      if (rc == STRATA_ERR_NOT_FOUND)
        rc = strata__error(STRATA_ERR_PARSE, "%s: tensor '%s' is missing", path, nm);
      else if (!rc && (ndim != x->ndim || memcmp(shape, x->full, (size_t)ndim * sizeof *shape) != 0))
        rc = strata__error(STRATA_ERR_SHAPE, "%s: tensor '%s' has the wrong shape", path, nm);
      if (!rc)
        memcpy(host + (size_t)k * n + off, data, x->full_n * 4);
    }
  /* only now, with everything read and checked, overwrite the trainer */
  for (int k = 0; k < 3 && !rc; k++)
    rc = strata__trainer_scatter(tr, k == 0 ? 0 : k + 1, host + (size_t)k * n);
  if (!rc) {
    tr->step = (int64_t)step;
    tr->opt.seed = seed;
    tr->data_state = state;
  }
  free(want);
  free(host);
  strata_safetensors_free(f);
  return rc;
}
