/* SPDX-License-Identifier: MIT */
/* layout.c — the layout object: dp x pp x tp with its devices, split and schedule; built, checked, and read and written as JSON. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <strata/comm.h>
#include <strata/layout.h>
#include <strata/schedule.h>

#include "core/core.h"
#include "model/model.h"

#define LAYOUT_MAX_DEGREE (1 << 20)     /* more replicas, ranks or tp devices than any machine room holds */
#define LAYOUT_MAX_FILE (16u << 20)

struct strata_layout {
  int dp, pp, v;
  int *tp;                      /* [pp] */
  int per_replica;              /* sum(tp) */
  int *tp_offset;               /* [pp]: first device of rank r inside a replica */
  int ndevices;
  int *devices;                 /* [dp x per_replica] */
  int *split;                   /* [pp x v], or NULL */
  int schedule, microbatches, zero;
  int precision;                /* enum strata_dtype: STRATA_FLOAT32 or STRATA_BFLOAT16 */
  int recompute;                /* enum strata_recompute */
  int spatial;                  /* > 1: the slices are spatial slabs */
  int sp;                       /* sequence parallelism with tp */
};

static const char *const recompute_names[] = {"none", "selective", "full"};

STRATA_API int strata_recompute_parse(const char *name, int *mode) {
  for (int i = 0; name && mode && i < 3; i++)
    if (strcmp(name, recompute_names[i]) == 0) {
      *mode = i;
      return STRATA_OK;
    }
  return strata__error(STRATA_ERR_PARSE, "recompute '%s': expected none, selective or full", name ? name : "(null)");
}

STRATA_API const char *strata_recompute_name(int mode) {
  return mode >= 0 && mode < 3 ? recompute_names[mode] : "?";
}

STRATA_API void strata_layout_free(strata_layout_t l) {
  if (!l)
    return;
  free(l->tp);
  free(l->tp_offset);
  free(l->devices);
  free(l->split);
  free(l);
}

/* A copy of n ints (NULL for NULL); *ok cleared when memory runs out. */
static int *ints_dup(const int *a, size_t n, int *ok) {
  if (!a)
    return NULL;
  int *b = malloc((n ? n : 1) * sizeof *b);
  if (!b) {
    *ok = 0;
    return NULL;
  }
  memcpy(b, a, n * sizeof *b);
  return b;
}

STRATA_API int strata_layout_copy(strata_layout_t l, strata_layout_t *out) {
  if (!out)
    return strata__error(STRATA_ERR_INVALID, "strata_layout_copy: out is NULL");
  *out = NULL;
  if (!l)
    return strata__error(STRATA_ERR_INVALID, "strata_layout_copy: layout is NULL");
  struct strata_layout *c = malloc(sizeof *c);
  if (!c)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory copying a layout");
  *c = *l;
  int ok = 1;
  c->tp = ints_dup(l->tp, (size_t)l->pp, &ok);
  c->tp_offset = ints_dup(l->tp_offset, (size_t)l->pp, &ok);
  c->devices = ints_dup(l->devices, (size_t)l->ndevices, &ok);
  c->split = ints_dup(l->split, (size_t)l->pp * (size_t)l->v, &ok);
  if (!ok) {
    strata_layout_free(c);
    return strata__error(STRATA_ERR_NOMEM, "out of host memory copying a layout");
  }
  *out = c;
  return STRATA_OK;
}

static int degree(const char *what, int v) {
  if (v < 1 || v > LAYOUT_MAX_DEGREE)
    return strata__error(STRATA_ERR_INVALID, "layout: %s = %d, must be between 1 and %d", what, v, LAYOUT_MAX_DEGREE);
  return STRATA_OK;
}

/* qsort's order of ints, ascending. */
static int by_int(const void *a, const void *b) {
  const int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

STRATA_API int strata_layout_new(const struct strata_layout_desc *d, strata_layout_t *out) {
  if (!out)
    return strata__error(STRATA_ERR_INVALID, "strata_layout_new: out is NULL");
  *out = NULL;
  if (!d)
    return strata__error(STRATA_ERR_INVALID, "strata_layout_new: description is NULL");
  int dp = d->dp ? d->dp : 1, pp = d->pp ? d->pp : 1;
  TRY(degree("dp", dp));
  TRY(degree("pp", pp));
  int schedule = d->schedule ? d->schedule : STRATA_SCHEDULE_1F1B;
  if (!strata_schedule_kind_name(schedule) || strcmp(strata_schedule_kind_name(schedule), "?") == 0)
    return strata__error(STRATA_ERR_INVALID, "layout: schedule %d is not one of strata/schedule.h", schedule);
  int m = d->microbatches ? d->microbatches : 1;
  TRY(degree("microbatches", m));
  int v = 1;
  if (schedule == STRATA_SCHEDULE_INTERLEAVED) {
    v = d->virtual_stages ? d->virtual_stages : 2;
    if (v < 2 || v > 64)
      return strata__error(STRATA_ERR_INVALID, "layout: interleaving wants 2 to 64 virtual stages per rank, not %d", v);
    if (m % pp)
      return strata__error(STRATA_ERR_INVALID,
                           "layout: interleaving needs the micro-batches (%d) to be a multiple of pp (%d)", m, pp);
  } else if (strata_schedule_kind_stages_per_device(schedule, 0) > 1) {
    /* ZB-V, DualPipeV: two chunks per rank in a V, the schedule's own, not a choice */
    v = strata_schedule_kind_stages_per_device(schedule, 0);
    if (d->virtual_stages && d->virtual_stages != v)
      return strata__error(STRATA_ERR_INVALID, "layout: %s holds %d stages per rank (in a V), not %d virtual stages",
                           strata_schedule_kind_name(schedule), v, d->virtual_stages);
    if (m < strata_schedule_kind_min_microbatches(schedule, pp))
      return strata__error(STRATA_ERR_INVALID, "layout: %s needs at least 2 x pp = %d micro-batches, not %d",
                           strata_schedule_kind_name(schedule), strata_schedule_kind_min_microbatches(schedule, pp), m);
  } else if (d->virtual_stages > 1) {
    return strata__error(STRATA_ERR_INVALID, "layout: %d virtual stages need the interleaved schedule, not %s",
                         d->virtual_stages, strata_schedule_kind_name(schedule));
  }
  if (d->zero < 0 || d->zero > 3)
    return strata__error(STRATA_ERR_INVALID, "layout: zero = %d (0, or the ZeRO stage 1, 2 or 3)", d->zero);
  if (d->zero && dp < 2)
    return strata__error(STRATA_ERR_INVALID,
                         "layout: ZeRO-%d shards across data-parallel replicas and needs dp >= 2", d->zero);
  if (d->precision != STRATA_FLOAT32 && d->precision != STRATA_BFLOAT16)
    return strata__error(STRATA_ERR_INVALID, "layout: precision %d is neither STRATA_FLOAT32 nor STRATA_BFLOAT16",
                         d->precision);
  if (d->recompute < STRATA_RECOMPUTE_NONE || d->recompute > STRATA_RECOMPUTE_FULL)
    return strata__error(STRATA_ERR_INVALID, "layout: recompute %d is not one of enum strata_recompute", d->recompute);
  if (d->sp) { /* sequence parallelism: every rank cut the same tp > 1 ways, whole backwards, no slabs */
    for (int r = 0; r < pp; r++) {
      const int t = d->tp ? d->tp[r] : (d->tp_all ? d->tp_all : 1);
      if (d->sp != 1)
        return strata__error(STRATA_ERR_INVALID, "layout: sp = %d (0 or 1)", d->sp);
      if (t < 2)
        return strata__error(STRATA_ERR_INVALID, "layout: sp needs tp > 1 on every rank (rank %d has tp %d)", r, t);
      if (d->tp && t != d->tp[0])
        return strata__error(STRATA_ERR_INVALID, "layout: sp needs the same tp on every rank (rank %d has tp %d, "
                             "rank 0 tp %d)", r, t, d->tp[0]);
    }
    if (d->spatial > 1)
      return strata__error(STRATA_ERR_INVALID, "layout: sp (sequence parallelism) with spatial slabs: the slabs cut "
                           "images, not sequences");
    if (strata_schedule_kind_split_backward(schedule))
      return strata__error(STRATA_ERR_UNSUPPORTED, "layout: sp with %s is not built: its weight pass would gather "
                           "the sequence again; use 1f1b, gpipe or interleaved", strata_schedule_kind_name(schedule));
  }
  struct strata_layout_desc sd;
  if (d->spatial > 1) { /* the slabs are every rank's slices (with pp, each stage a slab group) */
    int bad = d->spatial > LAYOUT_MAX_DEGREE || (d->tp_all > 1 && d->tp_all != d->spatial);
    for (int r = 0; r < pp && d->tp && !bad; r++)
      bad = d->tp[r] != d->spatial;
    if (bad)
      return strata__error(STRATA_ERR_INVALID, "layout: spatial %d needs tp %d on every rank, or none", d->spatial,
                           d->spatial);
    sd = *d;
    sd.tp = NULL;
    sd.tp_all = d->spatial;
    d = &sd;
  } else if (d->spatial < 0) {
    return strata__error(STRATA_ERR_INVALID, "layout: spatial = %d", d->spatial);
  }
  struct strata_layout *l = calloc(1, sizeof *l);
  if (!l)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory for a layout");
  l->dp = dp;
  l->pp = pp;
  l->v = v;
  l->schedule = schedule;
  l->microbatches = m;
  l->zero = d->zero;
  l->precision = d->precision;
  l->recompute = d->recompute;
  l->spatial = d->spatial > 1 ? d->spatial : 1;
  l->sp = d->sp;
  l->tp = malloc(sizeof *l->tp * (size_t)pp);
  l->tp_offset = malloc(sizeof *l->tp_offset * (size_t)pp);
  int rc = !l->tp || !l->tp_offset ? strata__error(STRATA_ERR_NOMEM, "out of host memory for a layout") : STRATA_OK;
  int64_t per = 0;
  for (int r = 0; r < pp && !rc; r++) {
    int t = d->tp ? d->tp[r] : (d->tp_all ? d->tp_all : 1);
    char what[32];
    snprintf(what, sizeof what, "tp of rank %d", r);
    rc = degree(what, t);
    l->tp[r] = t;
    l->tp_offset[r] = (int)per;
    per += t;
  }
  int64_t total = per * dp;
  if (!rc && total > LAYOUT_MAX_DEGREE)
    rc = strata__error(STRATA_ERR_INVALID, "layout: dp x sum(tp) = %lld devices, more than %d", (long long)total,
                       LAYOUT_MAX_DEGREE);
  if (!rc) {
    l->per_replica = (int)per;
    l->ndevices = (int)total;
    l->devices = malloc(sizeof *l->devices * (size_t)total);
    if (!l->devices)
      rc = strata__error(STRATA_ERR_NOMEM, "out of host memory for a layout of %lld devices", (long long)total);
  }
  if (!rc && d->devices && d->ndevices != l->ndevices)
    rc = strata__error(STRATA_ERR_INVALID,
                       "layout: dp x pp x tp needs %d devices (dp %d x sum of tp %d) but %d are given", l->ndevices, dp,
                       l->per_replica, d->ndevices);
  for (int i = 0; i < l->ndevices && !rc; i++) {
    l->devices[i] = d->devices ? d->devices[i] : i;
    if (l->devices[i] < 0)
      rc = strata__error(STRATA_ERR_INVALID, "layout: device %d at position %d is negative", l->devices[i], i);
  }
  /* a device twice: sort a copy */
  if (!rc && l->ndevices > 1) {
    int *s = malloc(sizeof *s * (size_t)l->ndevices);
    if (!s)
      rc = strata__error(STRATA_ERR_NOMEM, "out of host memory checking a layout");
    else {
      memcpy(s, l->devices, sizeof *s * (size_t)l->ndevices);
      /* the planner builds layouts of thousands of devices by the hundred when it counts how many would fit */
      qsort(s, (size_t)l->ndevices, sizeof *s, by_int);
      for (int i = 1; i < l->ndevices && !rc; i++)
        if (s[i] == s[i - 1])
          rc = strata__error(STRATA_ERR_INVALID, "layout: device %d is listed twice", s[i]);
      free(s);
    }
  }
  if (!rc && d->split) {
    int stages = pp * v;
    if (d->nsplit != stages)
      rc = strata__error(STRATA_ERR_INVALID, "layout: the split lists %d stages but the layout has %d (pp %d x %d)",
                         d->nsplit, stages, pp, v);
    l->split = rc ? NULL : malloc(sizeof *l->split * (size_t)stages);
    if (!rc && !l->split)
      rc = strata__error(STRATA_ERR_NOMEM, "out of host memory for a layout");
    for (int s = 0; s < stages && !rc; s++) {
      if (d->split[s] < 1)
        rc = strata__error(STRATA_ERR_INVALID, "layout: stage %d of the split has %d layers", s, d->split[s]);
      l->split[s] = d->split[s];
    }
  }
  if (rc) {
    strata_layout_free(l);
    return rc;
  }
  *out = l;
  return STRATA_OK;
}

/* ------------------------------------------------------------ checks */

/* What rank r's tp degree must divide in the model: 0 or an error. */
static int check_tp(const struct strata_model_config *c, int r, int t) {
  if (t == 1)
    return STRATA_OK;
  switch (c->kind) {
  case STRATA_MODEL_GPT:
    if (c->heads % t)
      return strata__error(STRATA_ERR_INVALID, "layout: tp %d of rank %d does not divide the model's %lld heads", t, r,
                           (long long)c->heads);
    if (c->d_ff % t)
      return strata__error(STRATA_ERR_INVALID, "layout: tp %d of rank %d does not divide the model's d_ff %lld", t, r,
                           (long long)c->d_ff);
    return STRATA_OK;
  case STRATA_MODEL_LLAMA: { /* a slice holds whole key/value heads with their query heads, or one replicated */
    char what[48];
    snprintf(what, sizeof what, "layout: rank %d", r);
    return strata__llama_tp_check(c, t, what, STRATA_ERR_INVALID);
  }
  case STRATA_MODEL_MLP:
    for (int i = 0; i < STRATA_MODEL_MAX_CONV && c->hidden[i]; i++)
      if (c->hidden[i] % t)
        return strata__error(STRATA_ERR_INVALID, "layout: tp %d of rank %d does not divide hidden width %lld (layer %d)",
                             t, r, (long long)c->hidden[i], i);
    return STRATA_OK;
  case STRATA_MODEL_CNN:
    for (int i = 0; i < STRATA_MODEL_MAX_CONV && c->conv[i]; i++)
      if (c->conv[i] % t)
        return strata__error(STRATA_ERR_INVALID,
                             "layout: tp %d of rank %d does not divide the %lld channels of convolution %d", t, r,
                             (long long)c->conv[i], i);
    return STRATA_OK;
  default:
    return strata__error(STRATA_ERR_INVALID, "layout: tensor parallelism for this kind of model");
  }
}

STRATA_API int strata_layout_check(strata_layout_t l, strata_model_t model, int devices) {
  if (!l || !model)
    return strata__error(STRATA_ERR_INVALID, "strata_layout_check: layout or model is NULL");
  for (int i = 0; i < l->ndevices && devices >= 0; i++)
    if (l->devices[i] >= devices)
      return strata__error(STRATA_ERR_NOT_FOUND, "layout: device %d does not exist (there are %d)", l->devices[i],
                           devices);
  int layers = strata_model_layer_count(model), stages = l->pp * l->v;
  if (l->split) {
    int64_t sum = 0;
    for (int s = 0; s < stages; s++)
      sum += l->split[s];
    if (sum != layers)
      return strata__error(STRATA_ERR_INVALID, "layout: the split covers %lld layers but the model has %d",
                           (long long)sum, layers);
  } else if (stages > layers) {
    return strata__error(STRATA_ERR_INVALID, "layout: %d stages for a model of %d layers", stages, layers);
  }
  if (l->spatial > 1) /* slabs: whole layers on rows of the images, not slices of the layers */
    return strata_model_spatial_check(model, l->spatial);
  const struct strata_model_config *c = strata_model_config(model);
  for (int r = 0; r < l->pp; r++)
    TRY(check_tp(c, r, l->tp[r]));
  if (l->sp && !strata__model_text(c))
    return strata__error(STRATA_ERR_UNSUPPORTED, "layout: sp (sequence parallelism) is for GPT models and llamas; "
                         "model '%s' is %s", c->name,
                         c->kind == STRATA_MODEL_MLP ? "an MLP (no sequence)" : "a CNN (no sequence)");
  if (l->sp && c->context % l->tp[0])
    return strata__error(STRATA_ERR_INVALID, "layout: sp: tp %d does not divide the model's context %lld", l->tp[0],
                         (long long)c->context);
  if (l->recompute && !strata__model_text(c))
    return strata__error(STRATA_ERR_UNSUPPORTED, "layout: recompute %s is for GPT and llama blocks; model '%s' (%s) "
                         "keeps its activations (recompute none)", strata_recompute_name(l->recompute), c->name,
                         c->kind == STRATA_MODEL_MLP ? "an MLP" : "a CNN");
  return STRATA_OK;
}

/* ------------------------------------------------------------ accessors */

STRATA_API int strata_layout_dp(strata_layout_t l) { return l ? l->dp : 0; }
STRATA_API int strata_layout_pp(strata_layout_t l) { return l ? l->pp : 0; }
STRATA_API int strata_layout_tp(strata_layout_t l, int r) { return l && r >= 0 && r < l->pp ? l->tp[r] : -1; }
STRATA_API int strata_layout_stages(strata_layout_t l) { return l ? l->pp * l->v : 0; }
STRATA_API int strata_layout_virtual_stages(strata_layout_t l) { return l ? l->v : 0; }
STRATA_API int strata_layout_schedule(strata_layout_t l) { return l ? l->schedule : 0; }
STRATA_API int strata_layout_microbatches(strata_layout_t l) { return l ? l->microbatches : 0; }
STRATA_API int strata_layout_zero(strata_layout_t l) { return l ? l->zero : 0; }
STRATA_API int strata_layout_precision(strata_layout_t l) { return l ? l->precision : STRATA_FLOAT32; }
STRATA_API int strata_layout_recompute(strata_layout_t l) { return l ? l->recompute : STRATA_RECOMPUTE_NONE; }
STRATA_API int strata_layout_sp(strata_layout_t l) { return l ? l->sp : 0; }
STRATA_API int strata_layout_spatial(strata_layout_t l) { return l && l->spatial > 1 ? l->spatial : 1; }
STRATA_API int strata_layout_device_count(strata_layout_t l) { return l ? l->ndevices : 0; }
STRATA_API const int *strata_layout_devices(strata_layout_t l) { return l ? l->devices : NULL; }
STRATA_API const int *strata_layout_split(strata_layout_t l) { return l ? l->split : NULL; }

STRATA_API int strata_layout_device(strata_layout_t l, int replica, int rank, int tp_rank, int *device) {
  if (!l || !device)
    return strata__error(STRATA_ERR_INVALID, "strata_layout_device: layout or device is NULL");
  if (replica < 0 || replica >= l->dp || rank < 0 || rank >= l->pp || tp_rank < 0 || tp_rank >= l->tp[rank])
    return strata__error(STRATA_ERR_RANGE, "layout: no device at replica %d, rank %d, tp rank %d", replica, rank,
                         tp_rank);
  *device = l->devices[(size_t)replica * (size_t)l->per_replica + (size_t)l->tp_offset[rank] + (size_t)tp_rank];
  return STRATA_OK;
}

/* "2" when every rank has the same degree, else "2,1,..." */
static void tp_text(strata_layout_t l, char *buf, size_t len) {
  int same = 1;
  for (int r = 1; r < l->pp; r++)
    same &= l->tp[r] == l->tp[0];
  size_t at = (size_t)snprintf(buf, len, "%d", l->tp[0]);
  for (int r = 1; r < l->pp && !same && at < len; r++)
    at += (size_t)snprintf(buf + at, len - at, ",%d", l->tp[r]);
}

STRATA_API int strata_layout_describe(strata_layout_t l, char **text) {
  if (!l || !text)
    return strata__error(STRATA_ERR_INVALID, "strata_layout_describe: NULL argument");
  char tps[256];
  tp_text(l, tps, sizeof tps);
  char buf[512], zs[16] = "";
  if (l->zero)
    snprintf(zs, sizeof zs, ", ZeRO-%d", l->zero);
  int n = snprintf(buf, sizeof buf, "dp %d x pp %d x tp %s over %d device%s, %s", l->dp, l->pp, tps, l->ndevices,
                   l->ndevices == 1 ? "" : "s", strata_schedule_kind_name(l->schedule));
  if (l->v > 1)
    n += snprintf(buf + n, sizeof buf - (size_t)n, " (%d virtual stages per rank)", l->v);
  n += snprintf(buf + n, sizeof buf - (size_t)n, ", %d micro-batch%s per replica%s%s%s%s", l->microbatches,
                l->microbatches == 1 ? "" : "es", zs, l->precision == STRATA_BFLOAT16 ? ", bf16" : "",
                l->recompute ? ", recompute " : "", l->recompute ? strata_recompute_name(l->recompute) : "");
  if (l->spatial > 1 && n > 0 && (size_t)n < sizeof buf)
    n += snprintf(buf + n, sizeof buf - (size_t)n, ", the slices %d spatial slabs", l->spatial);
  if (l->sp && n > 0 && (size_t)n < sizeof buf)
    snprintf(buf + n, sizeof buf - (size_t)n, ", sequence parallel");
  *text = strdup(buf);
  return *text ? STRATA_OK : strata__error(STRATA_ERR_NOMEM, "out of host memory");
}

/* ------------------------------------------------------------ JSON */

static json_t *int_array(const int *v, int n) {
  json_t *a = json_array();
  for (int i = 0; i < n && a; i++)
    json_array_append_new(a, json_integer(v[i]));
  return a;
}

STRATA_API int strata_layout_to_json(strata_layout_t l, char **json) {
  if (!l || !json)
    return strata__error(STRATA_ERR_INVALID, "strata_layout_to_json: NULL argument");
  *json = NULL;
  json_t *o = json_object();
  if (!o)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory writing a layout");
  json_object_set_new(o, "schema", json_string("strata-layout/1"));
  json_object_set_new(o, "dp", json_integer(l->dp));
  json_object_set_new(o, "pp", json_integer(l->pp));
  json_object_set_new(o, "tp", int_array(l->tp, l->pp));
  json_object_set_new(o, "devices", int_array(l->devices, l->ndevices));
  if (l->split)
    json_object_set_new(o, "split", int_array(l->split, l->pp * l->v));
  json_object_set_new(o, "schedule", json_string(strata_schedule_kind_name(l->schedule)));
  json_object_set_new(o, "microbatches", json_integer(l->microbatches));
  json_object_set_new(o, "virtual_stages", json_integer(l->v));
  json_object_set_new(o, "zero", json_integer(l->zero));
  /* fp32 is the schema's default and stays unwritten: an fp32 layout's text is what it was before the field */
  if (l->precision == STRATA_BFLOAT16)
    json_object_set_new(o, "precision", json_string("bf16"));
  if (l->recompute) /* likewise "none" */
    json_object_set_new(o, "recompute", json_string(strata_recompute_name(l->recompute)));
  if (l->spatial > 1) /* likewise only when there are slabs */
    json_object_set_new(o, "spatial", json_integer(l->spatial));
  if (l->sp) /* likewise only when set */
    json_object_set_new(o, "sp", json_true());
  *json = json_dumps(o, JSON_PRESERVE_ORDER | JSON_COMPACT);
  json_decref(o);
  return *json ? STRATA_OK : strata__error(STRATA_ERR_NOMEM, "out of host memory writing a layout");
}

/* An integer field (or `dflt` when absent) within [lo, hi]. */
static int get_int(json_t *o, const char *src, const char *key, int dflt, int lo, int hi, int *out) {
  json_t *v = json_object_get(o, key);
  if (!v) {
    *out = dflt;
    return STRATA_OK;
  }
  if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
    return strata__error(STRATA_ERR_PARSE, "%s: \"%s\" must be an integer from %d to %d", src, key, lo, hi);
  *out = (int)json_integer_value(v);
  return STRATA_OK;
}

/* "zero": the ZeRO stage 0 to 3, or a boolean (true: stage 1, as layouts said before stages 2 and 3). */
static int get_zero(json_t *o, const char *src, int *out) {
  json_t *v = json_object_get(o, "zero");
  if (v && json_is_boolean(v)) {
    *out = json_is_true(v);
    return STRATA_OK;
  }
  return get_int(o, src, "zero", 0, 0, 3, out);
}

/* An array of integers in [lo, hi] (malloc'ed into *out, *n entries). */
static int get_ints(json_t *a, const char *src, const char *key, int lo, int hi, int **out, int *n) {
  if (!json_is_array(a))
    return strata__error(STRATA_ERR_PARSE, "%s: \"%s\" must be an array of integers", src, key);
  size_t len = json_array_size(a);
  if (len == 0 || len > LAYOUT_MAX_DEGREE)
    return strata__error(STRATA_ERR_PARSE, "%s: \"%s\" has %zu entries", src, key, len);
  int *v = malloc(sizeof *v * len);
  if (!v)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory reading %s", src);
  for (size_t i = 0; i < len; i++) {
    json_t *e = json_array_get(a, i);
    if (!json_is_integer(e) || json_integer_value(e) < lo || json_integer_value(e) > hi) {
      free(v);
      return strata__error(STRATA_ERR_PARSE, "%s: \"%s\"[%zu] must be an integer from %d to %d", src, key, i, lo, hi);
    }
    v[i] = (int)json_integer_value(e);
  }
  *out = v;
  *n = (int)len;
  return STRATA_OK;
}

static int from_object(json_t *o, const char *src, strata_layout_t *out) {
  static const char *const known[] = {"schema", "dp", "pp", "tp", "devices", "split", "schedule", "microbatches",
                                      "virtual_stages", "zero", "precision", "recompute", "spatial", "sp", NULL};
  if (!json_is_object(o))
    return strata__error(STRATA_ERR_PARSE, "%s: a layout is a JSON object", src);
  const char *key;
  json_t *val;
  json_object_foreach(o, key, val) {
    int ok = 0;
    for (int i = 0; known[i]; i++)
      ok |= strcmp(key, known[i]) == 0;
    if (!ok)
      return strata__error(STRATA_ERR_PARSE, "%s: unknown field \"%s\" in a layout", src, key);
  }
  json_t *schema = json_object_get(o, "schema");
  if (schema && (!json_is_string(schema) || strcmp(json_string_value(schema), "strata-layout/1") != 0))
    return strata__error(STRATA_ERR_VERSION, "%s: schema must be \"strata-layout/1\"", src);
  struct strata_layout_desc d;
  memset(&d, 0, sizeof d);
  int *tp = NULL, *devices = NULL, *split = NULL, ntp = 0;
  int rc = get_int(o, src, "dp", 1, 1, LAYOUT_MAX_DEGREE, &d.dp);
  if (!rc)
    rc = get_int(o, src, "pp", 1, 1, LAYOUT_MAX_DEGREE, &d.pp);
  if (!rc)
    rc = get_int(o, src, "microbatches", 1, 1, LAYOUT_MAX_DEGREE, &d.microbatches);
  if (!rc)
    rc = get_int(o, src, "virtual_stages", 0, 0, 64, &d.virtual_stages);
  if (!rc)
    rc = get_zero(o, src, &d.zero);
  if (!rc)
    rc = get_int(o, src, "spatial", 1, 1, LAYOUT_MAX_DEGREE, &d.spatial);
  json_t *t = json_object_get(o, "tp");
  if (!rc && t && json_is_integer(t))
    rc = get_int(o, src, "tp", 1, 1, LAYOUT_MAX_DEGREE, &d.tp_all);
  else if (!rc && t) {
    rc = get_ints(t, src, "tp", 1, LAYOUT_MAX_DEGREE, &tp, &ntp);
    if (!rc && ntp != d.pp)
      rc = strata__error(STRATA_ERR_INVALID, "%s: \"tp\" lists %d ranks but pp is %d", src, ntp, d.pp);
    d.tp = tp;
  }
  json_t *dv = json_object_get(o, "devices");
  if (!rc && dv)
    rc = get_ints(dv, src, "devices", 0, 1 << 30, &devices, &d.ndevices);
  d.devices = devices;
  json_t *sp = json_object_get(o, "split");
  if (!rc && sp)
    rc = get_ints(sp, src, "split", 1, 1 << 30, &split, &d.nsplit);
  d.split = split;
  json_t *sc = json_object_get(o, "schedule");
  if (!rc && sc) {
    if (!json_is_string(sc) || strata_schedule_kind_parse(json_string_value(sc), &d.schedule) != STRATA_OK)
      rc = strata__error(STRATA_ERR_PARSE, "%s: \"schedule\" must be gpipe, 1f1b, interleaved or zb", src);
  }
  json_t *pr = json_object_get(o, "precision");
  if (!rc && pr) {
    const char *name = json_is_string(pr) ? json_string_value(pr) : "";
    if (strcmp(name, "fp32") == 0)
      d.precision = STRATA_FLOAT32;
    else if (strcmp(name, "bf16") == 0)
      d.precision = STRATA_BFLOAT16;
    else if (strcmp(name, "fp16") == 0)
      rc = strata__error(STRATA_ERR_PARSE, "%s: \"precision\" fp16 is not supported (float16 needs a dynamic loss "
                         "scaler strata does not have); fp32 or bf16", src);
    else
      rc = strata__error(STRATA_ERR_PARSE, "%s: \"precision\" must be \"fp32\" or \"bf16\"", src);
  }
  json_t *spj = json_object_get(o, "sp");
  if (!rc && spj && !json_is_boolean(spj))
    rc = strata__error(STRATA_ERR_PARSE, "%s: \"sp\" must be true or false", src);
  d.sp = spj && json_is_true(spj);
  json_t *rcm = json_object_get(o, "recompute");
  if (!rc && rcm && (!json_is_string(rcm) || strata_recompute_parse(json_string_value(rcm), &d.recompute)))
    rc = strata__error(STRATA_ERR_PARSE, "%s: \"recompute\" must be \"none\", \"selective\" or \"full\"", src);
  if (!rc) {
    rc = strata_layout_new(&d, out);
    if (rc) { /* name the file instead of "layout" */
      char why[512];
      const char *m = strata_last_error();
      strata__strlcpy(why, strncmp(m, "layout: ", 8) == 0 ? m + 8 : m, sizeof why);
      rc = strata__error(rc, "%s: %s", src, why);
    }
  }
  free(tp);
  free(devices);
  free(split);
  return rc;
}

STRATA_API int strata_layout_from_json(const char *json, const char *source, strata_layout_t *out) {
  if (!out)
    return strata__error(STRATA_ERR_INVALID, "strata_layout_from_json: out is NULL");
  *out = NULL;
  if (!json)
    return strata__error(STRATA_ERR_INVALID, "strata_layout_from_json: text is NULL");
  const char *src = source ? source : "layout";
  json_error_t err;
  json_t *o = json_loads(json, JSON_REJECT_DUPLICATES, &err);
  if (!o)
    return strata__error(STRATA_ERR_PARSE, "%s: line %d: %s", src, err.line, err.text);
  int rc = from_object(o, src, out);
  json_decref(o);
  return rc;
}

STRATA_API int strata_layout_load(const char *path, strata_layout_t *out) {
  if (!out)
    return strata__error(STRATA_ERR_INVALID, "strata_layout_load: out is NULL");
  *out = NULL;
  if (!path)
    return strata__error(STRATA_ERR_INVALID, "strata_layout_load: path is NULL");
  /* non-blocking open, then a regular file only: a FIFO never hangs the caller */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return strata__error(STRATA_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > (off_t)LAYOUT_MAX_FILE) {
    close(fd);
    return strata__error(STRATA_ERR_IO, "%s: not a regular file of at most 16 MiB", path);
  }
  char *text = malloc((size_t)st.st_size + 1);
  if (!text) {
    close(fd);
    return strata__error(STRATA_ERR_NOMEM, "out of host memory reading %s", path);
  }
  size_t got = 0;
  while (got < (size_t)st.st_size) {
    ssize_t r = read(fd, text + got, (size_t)st.st_size - got);
    if (r <= 0)
      break;
    got += (size_t)r;
  }
  close(fd);
  text[got] = '\0';
  int rc = strlen(text) != got ? strata__error(STRATA_ERR_PARSE, "%s: a layout file holds no NUL byte", path)
                               : strata_layout_from_json(text, path, out);
  free(text);
  return rc;
}
