/* SPDX-License-Identifier: MIT */
/* train.c — the single-device trainer: micro-batches, gradient accumulation, clipping, AdamW with warm-up and cosine
** decay, evaluation, and checkpoints with the full training state. */
#include "config.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/checkpoint.h>
#include <strata/train.h>

#include "registry.h"
#include "stage.h"

#define TRY(expr)                                                                                                      \
  do {                                                                                                                 \
    int rc_ = (expr);                                                                                                  \
    if (rc_)                                                                                                           \
      return rc_;                                                                                                      \
  } while (0)

#define CHECKPOINT_FORMAT "strata-checkpoint/1"

struct strata_trainer {
  strata_model_t model;
  strata_dataset_t data;
  struct strata_train_options opt;
  struct strata__stage *st;
  int64_t step;
  uint64_t data_state;
  int images;               /* image model: float inputs */
  size_t in_elems;          /* input elements per micro-batch */
  int64_t rows;             /* target rows per micro-batch */
  void *inputs;             /* host staging of one micro-batch */
  int32_t *targets;
};

STRATA_API void strata_train_options_default(struct strata_train_options *o) {
  if (!o)
    return;
  memset(o, 0, sizeof *o);
  o->batch = 8;
  o->accum = 1;
  o->steps = 1000;
  o->lr = 1e-3f;
  o->min_lr = 1e-4f;
  o->warmup = 50;
  o->weight_decay = 0.1f;
  o->beta1 = 0.9f;
  o->beta2 = 0.95f;
  o->eps = 1e-8f;
  o->clip = 1.0f;
  o->seed = 1;
}

static int check_options(const struct strata_train_options *o) {
  if (o->batch < 1 || o->batch > 1 << 20)
    return strata__error(STRATA_ERR_INVALID, "batch = %lld must lie in [1, 1048576]", (long long)o->batch);
  if (o->accum < 1 || o->accum > 1 << 20)
    return strata__error(STRATA_ERR_INVALID, "accum = %lld must lie in [1, 1048576]", (long long)o->accum);
  if (o->steps < 1)
    return strata__error(STRATA_ERR_INVALID, "steps = %lld must be positive", (long long)o->steps);
  if (o->warmup < 0)
    return strata__error(STRATA_ERR_INVALID, "warmup = %lld must not be negative", (long long)o->warmup);
  if (!(o->lr >= 0) || !(o->min_lr >= 0) || !(o->weight_decay >= 0) || !(o->clip >= 0) || !(o->eps > 0) ||
      !(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1))
    return strata__error(STRATA_ERR_INVALID,
                         "optimizer settings out of range (lr, min_lr, weight decay, clip >= 0; eps > 0; 0 <= betas < 1)");
  return STRATA_OK;
}

STRATA_API int strata_trainer_new(strata_model_t model, strata_dataset_t data, const struct strata_train_options *opts,
                                  strata_trainer_t *out) {
  if (!model || !data || !opts || !out)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_new: NULL argument");
  TRY(check_options(opts));
  struct strata_dataset_info di;
  TRY(strata_dataset_info(data, &di));
  const struct strata_model_config *c = &model->cfg;
  int images = c->kind != STRATA_MODEL_GPT;
  if (images && di.kind != STRATA_DATA_IMAGES)
    return strata__error(STRATA_ERR_INVALID, "model '%s' (%s) needs image data, the dataset holds text", c->name,
                         c->kind == STRATA_MODEL_MLP ? "mlp" : "cnn");
  if (!images && di.kind != STRATA_DATA_TEXT)
    return strata__error(STRATA_ERR_INVALID, "model '%s' is a GPT and needs text data", c->name);
  if (!images && c->vocab < di.vocab)
    return strata__error(STRATA_ERR_SHAPE, "model '%s' has a vocabulary of %lld, the data has %lld tokens", c->name,
                         (long long)c->vocab, (long long)di.vocab);
  if (images && (c->image != di.image || c->channels != di.channels || c->classes < di.vocab))
    return strata__error(STRATA_ERR_SHAPE,
                         "model '%s' expects %lldx%lld images with %lld channels and %lld classes; the data has "
                         "%lldx%lld, %lld channel(s), %lld classes",
                         c->name, (long long)c->image, (long long)c->image, (long long)c->channels,
                         (long long)c->classes, (long long)di.image, (long long)di.image, (long long)di.channels,
                         (long long)di.vocab);
  struct strata__device *d = strata__device_get(opts->device);
  if (!d)
    return STRATA_ERR_NOT_FOUND;
  struct strata_trainer *tr = calloc(1, sizeof *tr);
  if (!tr)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory creating a trainer");
  tr->model = model;
  tr->data = data;
  tr->opt = *opts;
  tr->images = images;
  tr->data_state = opts->seed;
  tr->rows = images ? opts->batch : opts->batch * c->context;
  tr->in_elems = images ? (size_t)(opts->batch * c->channels * c->image * c->image) : (size_t)tr->rows;
  tr->inputs = malloc(tr->in_elems * 4);
  tr->targets = malloc((size_t)tr->rows * 4);
  if (!tr->inputs || !tr->targets) {
    strata_trainer_free(tr);
    return strata__error(STRATA_ERR_NOMEM, "out of host memory creating a trainer");
  }
  int rc = strata__stage_new(model, 0, model->nlayers, opts->device, opts->batch, opts->seed, &tr->st);
  if (!rc)
    rc = strata__stage_acquire(tr->st, 0);
  if (rc) {
    if (rc == STRATA_ERR_DEVICE_MEMORY) {
      /* say what the whole model needs, not only the allocation that failed */
      char msg[768];
      snprintf(msg, sizeof msg, "%s", strata_last_error());
      uint64_t p = strata_model_params(model), act = 0;
      for (int i = 0; i < model->nlayers; i++)
        act += model->layers[i].info.act_bytes + model->layers[i].info.out_bytes;
      strata__error(rc,
                    "model '%s' does not fit on device %d: it needs %.1f MiB for parameters, gradients and AdamW "
                    "moments plus about %.1f MiB of activations per micro-batch of %lld (%s)",
                    c->name, opts->device, 16.0 * (double)p / 1048576.0, (double)act * (double)opts->batch / 1048576.0,
                    (long long)opts->batch, msg);
    }
    strata_trainer_free(tr);
    return rc;
  }
  *out = tr;
  return STRATA_OK;
}

STRATA_API void strata_trainer_free(strata_trainer_t tr) {
  if (!tr)
    return;
  strata__stage_free(tr->st);
  free(tr->inputs);
  free(tr->targets);
  free(tr);
}

STRATA_API int64_t strata_trainer_steps_done(strata_trainer_t tr) { return tr ? tr->step : 0; }

/* Upload one micro-batch (inputs and targets) into slot 0. */
static int load_batch(strata_trainer_t tr, const void *inputs, const int32_t *targets) {
  struct strata__stage *st = tr->st;
  strata_mem_t in = strata__stage_input(st, 0), tg = strata__stage_targets(st, 0);
  TRY(strata_buffer_write(st->q, in.buf, in.off * 4, inputs, tr->in_elems * 4));
  TRY(strata_buffer_write(st->q, tg.buf, tg.off * 4, targets, (size_t)tr->rows * 4));
  return STRATA_OK;
}

/* Forward (and backward when `grad`) of one micro-batch; adds the summed row losses to *loss. */
static int micro_batch(strata_trainer_t tr, const void *inputs, const int32_t *targets, int grad, double *loss) {
  TRY(load_batch(tr, inputs, targets));
  TRY(strata__stage_forward(tr->st, 0));
  if (grad)
    TRY(strata__stage_backward(tr->st, 0));
  double sum = 0;
  TRY(strata__stage_loss(tr->st, 0, &sum)); /* waits: the host buffers may be refilled afterwards */
  *loss += sum;
  return STRATA_OK;
}

/* Learning rate of step `s` (0-based): linear warm-up, then cosine to min_lr. */
static float schedule(const struct strata_train_options *o, int64_t s) {
  if (o->warmup > 0 && s < o->warmup)
    return o->lr * (float)(s + 1) / (float)o->warmup;
  double span = (double)(o->steps - o->warmup);
  double t = span > 0 ? (double)(s - o->warmup) / span : 1.0;
  if (t > 1)
    t = 1;
  return (float)(o->min_lr + 0.5 * (o->lr - o->min_lr) * (1 + cos(M_PI * t)));
}

STRATA_API int strata_trainer_step(strata_trainer_t tr, struct strata_step_stats *stats) {
  if (!tr)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_step: trainer is NULL");
  struct strata__stage *st = tr->st;
  const struct strata_train_options *o = &tr->opt;
  int64_t ctx = tr->images ? 0 : tr->model->cfg.context;
  st->loss_scale = 1.0f / (float)(tr->rows * o->accum);
  TRY(strata__stage_zero_grads(st));
  double loss = 0;
  for (int64_t a = 0; a < o->accum; a++) {
    TRY(strata_dataset_sample(tr->data, STRATA_SPLIT_TRAIN, o->batch, ctx, &tr->data_state, tr->inputs, tr->targets));
    TRY(micro_batch(tr, tr->inputs, tr->targets, 1, &loss));
  }
  double sumsq = 0;
  TRY(strata__stage_grad_sumsq(st, &sumsq));
  float norm = (float)sqrt(sumsq);
  if (!isfinite(norm))
    return strata__error(STRATA_ERR_RANGE, "step %lld: the gradient norm is not finite (loss %g): training diverged",
                         (long long)(tr->step + 1), loss / (double)(tr->rows * o->accum));
  float gscale = (o->clip > 0 && norm > o->clip) ? o->clip / norm : 1.0f;
  float lr = schedule(o, tr->step);
  TRY(strata__stage_update(st, gscale, lr, o->beta1, o->beta2, o->eps, o->weight_decay, tr->step + 1));
  TRY(strata_queue_finish(st->q));
  tr->step++;
  if (stats) {
    stats->step = tr->step;
    stats->loss = (float)(loss / (double)(tr->rows * o->accum));
    stats->grad_norm = norm;
    stats->lr = lr;
    stats->samples = (uint64_t)(o->batch * o->accum);
    stats->tokens = (uint64_t)(tr->rows * o->accum);
    stats->flops = strata_model_flops(tr->model) * (double)stats->samples;
  }
  return STRATA_OK;
}

STRATA_API int strata_trainer_eval(strata_trainer_t tr, int64_t batches, float *loss) {
  if (!tr || !loss || batches < 1)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_eval: need a trainer, an output and batches >= 1");
  uint64_t state = 0x5eed5eedull ^ tr->opt.seed; /* the same validation batches every time */
  int64_t ctx = tr->images ? 0 : tr->model->cfg.context;
  double sum = 0;
  for (int64_t b = 0; b < batches; b++) {
    TRY(strata_dataset_sample(tr->data, STRATA_SPLIT_VAL, tr->opt.batch, ctx, &state, tr->inputs, tr->targets));
    TRY(micro_batch(tr, tr->inputs, tr->targets, 0, &sum));
  }
  *loss = (float)(sum / (double)(tr->rows * batches));
  return STRATA_OK;
}

/* ---- parameters in host memory ---- */

static int download_all(strata_trainer_t tr, strata_buffer_t b, float *host) {
  return strata_buffer_download(tr->st->q, b, 0, host, tr->st->nparams * 4);
}

STRATA_API int strata_trainer_params(strata_trainer_t tr, float *params, size_t *count) {
  if (!tr || !count)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_params: NULL argument");
  if (params) {
    if (*count < tr->st->nparams)
      return strata__error(STRATA_ERR_RANGE, "strata_trainer_params: room for %zu floats, the model has %zu", *count,
                           tr->st->nparams);
    TRY(download_all(tr, tr->st->params, params));
  }
  *count = tr->st->nparams;
  return STRATA_OK;
}

STRATA_API int strata_trainer_set_params(strata_trainer_t tr, const float *params, size_t count) {
  if (!tr || !params)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_set_params: NULL argument");
  if (count != tr->st->nparams)
    return strata__error(STRATA_ERR_SHAPE, "strata_trainer_set_params: %zu floats given, the model has %zu", count,
                         tr->st->nparams);
  return strata_buffer_upload(tr->st->q, tr->st->params, 0, params, count * 4);
}

STRATA_API int strata_trainer_loss_grad(strata_trainer_t tr, const void *inputs, const int32_t *targets, int64_t batch,
                                        float *loss, float *grads) {
  if (!tr || !inputs || !targets || !loss)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_loss_grad: NULL argument");
  if (batch != tr->opt.batch)
    return strata__error(STRATA_ERR_SHAPE, "strata_trainer_loss_grad: batch %lld, the trainer was built for %lld",
                         (long long)batch, (long long)tr->opt.batch);
  tr->st->loss_scale = 1.0f / (float)tr->rows;
  TRY(strata__stage_zero_grads(tr->st));
  double sum = 0;
  TRY(micro_batch(tr, inputs, targets, grads != NULL, &sum));
  *loss = (float)(sum / (double)tr->rows);
  if (grads)
    TRY(download_all(tr, tr->st->grads, grads));
  return STRATA_OK;
}

STRATA_API int strata_trainer_logits(strata_trainer_t tr, const int32_t *tokens, int64_t batch, float *logits) {
  if (!tr || !tokens || !logits)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_logits: NULL argument");
  if (tr->images)
    return strata__error(STRATA_ERR_UNSUPPORTED, "strata_trainer_logits: '%s' is not a text model",
                         tr->model->cfg.name);
  if (batch < 1 || batch > tr->opt.batch)
    return strata__error(STRATA_ERR_SHAPE, "strata_trainer_logits: batch %lld, at most %lld", (long long)batch,
                         (long long)tr->opt.batch);
  int64_t T = tr->model->cfg.context, V = tr->model->cfg.vocab;
  int32_t *in = tr->inputs;
  for (int64_t i = 0; i < tr->rows; i++) {
    in[i] = i < batch * T ? tokens[i] : 0;
    tr->targets[i] = -1; /* no loss wanted */
  }
  TRY(load_batch(tr, in, tr->targets));
  TRY(strata__stage_forward(tr->st, 0));
  strata_mem_t lg = strata__stage_logits(tr->st, 0);
  for (int64_t b = 0; b < batch; b++)
    TRY(strata_buffer_read(tr->st->q, lg.buf, (lg.off + (size_t)((b * T + T - 1) * V)) * 4, logits + b * V,
                           (size_t)V * 4));
  return strata_queue_finish(tr->st->q);
}

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

STRATA_API int strata_trainer_save(strata_trainer_t tr, const char *path) {
  if (!tr || !path)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_save: NULL argument");
  struct strata__stage *st = tr->st;
  size_t n = st->nparams;
  int nt = st->ntensors;
  float *host = malloc((3 * n + 1) * sizeof *host);
  struct strata_st_tensor *ts = calloc((size_t)(3 * nt), sizeof *ts);
  char *names = calloc((size_t)(3 * nt), 96);
  char *model_json = NULL, *opt_json = NULL;
  int rc = (!host || !ts || !names) ? strata__error(STRATA_ERR_NOMEM, "out of host memory saving a checkpoint")
                                    : STRATA_OK;
  if (!rc)
    rc = download_all(tr, st->params, host);
  if (!rc)
    rc = download_all(tr, st->m, host + n);
  if (!rc)
    rc = download_all(tr, st->v, host + 2 * n);
  if (!rc)
    rc = strata_model_to_json(tr->model, &model_json);
  if (!rc)
    rc = options_json(&tr->opt, &opt_json);
  if (!rc) {
    static const char *const prefix[3] = {"", "optimizer.m.", "optimizer.v."};
    for (int k = 0; k < 3; k++)
      for (int t = 0; t < nt; t++) {
        const struct strata__tensor *x = &st->tensors[t];
        struct strata_st_tensor *o = &ts[k * nt + t];
        char *nm = names + (size_t)(k * nt + t) * 96;
        snprintf(nm, 96, "%s%s", prefix[k], x->name);
        o->name = nm;
        o->ndim = x->ndim;
        memcpy(o->shape, x->shape, sizeof o->shape);
        o->data = host + (size_t)k * n + x->off;
      }
    char step[32], seed[32], state[32];
    snprintf(step, sizeof step, "%" PRId64, tr->step);
    snprintf(seed, sizeof seed, "%" PRIu64, tr->opt.seed);
    snprintf(state, sizeof state, "%" PRIu64, tr->data_state);
    struct strata_st_meta meta[] = {{"format", CHECKPOINT_FORMAT}, {"model", model_json}, {"options", opt_json},
                                    {"step", step},                {"seed", seed},        {"data_state", state}};
    rc = strata_safetensors_write(path, ts, (size_t)(3 * nt), meta, sizeof meta / sizeof meta[0]);
  }
  free(model_json);
  free(opt_json);
  free(host);
  free(ts);
  free(names);
  return rc;
}

/* Parse an unsigned decimal metadata field. */
static int meta_u64(strata_safetensors_t f, const char *path, const char *key, uint64_t *v) {
  const char *s = strata_safetensors_meta(f, key);
  char *end = NULL;
  if (!s || !*s)
    return strata__error(STRATA_ERR_PARSE, "%s: checkpoint metadata has no '%s'", path, key);
  unsigned long long x = strtoull(s, &end, 10);
  if (*end || s[0] == '-')
    return strata__error(STRATA_ERR_PARSE, "%s: checkpoint metadata '%s' = '%s' is not a number", path, key, s);
  *v = (uint64_t)x;
  return STRATA_OK;
}

STRATA_API int strata_trainer_load(strata_trainer_t tr, const char *path) {
  if (!tr || !path)
    return strata__error(STRATA_ERR_INVALID, "strata_trainer_load: NULL argument");
  strata_safetensors_t f = NULL;
  TRY(strata_safetensors_read(path, &f));
  struct strata__stage *st = tr->st;
  size_t n = st->nparams;
  float *host = NULL;
  char *want = NULL;
  int rc = STRATA_OK;
  const char *format = strata_safetensors_meta(f, "format");
  if (!format || strcmp(format, CHECKPOINT_FORMAT) != 0)
    rc = strata__error(STRATA_ERR_PARSE, "%s: not a strata checkpoint (metadata 'format' is %s%s%s, want %s)", path,
                       format ? "'" : "", format ? format : "missing", format ? "'" : "", CHECKPOINT_FORMAT);
  /* the model must be the same one */
  if (!rc)
    rc = strata_model_to_json(tr->model, &want);
  if (!rc) {
    const char *have = strata_safetensors_meta(f, "model");
    json_t *a = have ? json_loads(have, 0, NULL) : NULL, *b = json_loads(want, 0, NULL);
    if (a && b)
      json_object_del(a, "name"), json_object_del(b, "name");
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
    for (int t = 0; t < st->ntensors && !rc; t++) {
      const struct strata__tensor *x = &st->tensors[t];
      char nm[96];
      snprintf(nm, sizeof nm, "%s%s", prefix[k], x->name);
      int ndim;
      int64_t shape[STRATA_ST_MAX_DIMS];
      const float *data;
      rc = strata_safetensors_get(f, nm, &ndim, shape, &data);
      if (rc == STRATA_ERR_NOT_FOUND)
        rc = strata__error(STRATA_ERR_PARSE, "%s: tensor '%s' is missing", path, nm);
      else if (!rc && (ndim != x->ndim || memcmp(shape, x->shape, (size_t)ndim * sizeof *shape) != 0))
        rc = strata__error(STRATA_ERR_SHAPE, "%s: tensor '%s' has the wrong shape", path, nm);
      if (!rc)
        memcpy(host + (size_t)k * n + x->off, data, x->n * 4);
    }
  /* only now, with everything read and checked, overwrite the trainer */
  if (!rc)
    rc = strata_buffer_upload(st->q, st->params, 0, host, n * 4);
  if (!rc)
    rc = strata_buffer_upload(st->q, st->m, 0, host + n, n * 4);
  if (!rc)
    rc = strata_buffer_upload(st->q, st->v, 0, host + 2 * n, n * 4);
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
