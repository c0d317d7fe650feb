/* SPDX-License-Identifier: MIT */
/* calibrate-read.c — a calibration file (strata-calibration/1) read back into a machine of the devices it measured. */
#include "config.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "core/core.h"
#include "core/file.h"

/* The largest calibration file read: a file of 65,536 devices' links is far below it. */
#define CALIBRATION_MAX_BYTES (64l << 20)

const char *const strata__plan_op_names[STRATA_PLAN_OP_COUNT] = {
    [STRATA_PLAN_OP_ADD] = "add", [STRATA_PLAN_OP_GELU_FWD] = "gelu_fwd", [STRATA_PLAN_OP_GELU_BWD] = "gelu_bwd",
    [STRATA_PLAN_OP_LAYERNORM_FWD] = "layernorm_fwd", [STRATA_PLAN_OP_LAYERNORM_BWD] = "layernorm_bwd",
    [STRATA_PLAN_OP_SOFTMAX_FWD] = "softmax_fwd", [STRATA_PLAN_OP_SOFTMAX_BWD] = "softmax_bwd",
    [STRATA_PLAN_OP_ADAMW] = "adamw", [STRATA_PLAN_OP_BIAS_ADD] = "bias_add",
    [STRATA_PLAN_OP_BIAS_GRAD] = "bias_grad"};

/* "pipeline_probe" {..., "action_us": from 0 to 100000}: every device's action overhead; none where absent. */
static int read_pipe_probe(json_t *v, const char *src, struct strata_device_cost *cost, size_t n) {
  if (!v)
    return STRATA_OK;
  json_t *a = json_is_object(v) ? json_object_get(v, "action_us") : NULL;
  const double x = json_is_number(a) ? json_number_value(a) : -1;
  if (!(x >= 0 && x <= 1e5))
    return strata__error(STRATA_ERR_PARSE, "%s: \"pipeline_probe\" needs an \"action_us\" from 0 to 100000", src);
  for (size_t i = 0; i < n; i++)
    cost[i].action_us = x;
  return STRATA_OK;
}

/* A positive finite number field of `o`, or an error naming it. */
static int number(json_t *o, const char *field, const char *src, int i, double *out) {
  json_t *v = json_object_get(o, field);
  if (!json_is_number(v) || !(json_number_value(v) >= 0) || !isfinite(json_number_value(v)))
    return strata__error(STRATA_ERR_PARSE, "%s: device %d: \"%s\" must be a non-negative number", src, i, field);
  *out = json_number_value(v);
  return STRATA_OK;
}

/* A device's "stage_probe" (optional: a file of an older strata, or of a model that is no GPT, has none): its
** "stage_factor", a number from 0.1 to 10, or an error naming the device. */
static int read_stage_factor(json_t *v, const char *src, int i, struct strata_device_cost *w) {
  w->stage_factor = 0;
  if (!v)
    return STRATA_OK;
  json_t *f = json_object_get(v, "stage_factor");
  const double x = json_is_number(f) ? json_number_value(f) : NAN;
  if (!json_is_object(v) || !(x >= 0.1 && x <= 10))
    return strata__error(STRATA_ERR_PARSE, "%s: device %d: \"stage_probe\" needs a \"stage_factor\" from 0.1 to 10",
                         src, i);
  w->stage_factor = x;
  return STRATA_OK;
}

/* A device's "spread" (optional): 1 to STRATA_PLAN_SPREAD_POINTS positive ratios, ascending. */
static int read_spread(json_t *v, const char *src, int i, struct strata_device_cost *w) {
  w->nspread = 0;
  if (!v)
    return STRATA_OK;
  const size_t n = json_array_size(v);
  if (!json_is_array(v) || n < 1 || n > STRATA_PLAN_SPREAD_POINTS)
    return strata__error(STRATA_ERR_PARSE, "%s: device %d: \"spread\" must be an array of 1 to %d numbers", src, i,
                         STRATA_PLAN_SPREAD_POINTS);
  for (size_t q = 0; q < n; q++) {
    json_t *x = json_array_get(v, q);
    const double r = json_is_number(x) ? json_number_value(x) : -1;
    if (!(r > 0) || !isfinite(r) || (q > 0 && r < w->spread[q - 1]))
      return strata__error(STRATA_ERR_PARSE, "%s: device %d: \"spread\" entry %zu must be a positive number no less "
                           "than the one before", src, i, q);
    w->spread[q] = r;
  }
  w->nspread = (int)n;
  return STRATA_OK;
}

/* A device's "gemm_shapes" ([m, n, k, trans_a, trans_b, batch, GFLOP/s] each; absent: none) into *out (n of them). */
static int read_shapes(json_t *v, const char *src, int i, struct strata_gemm_shape **out, int *n) {
  *out = NULL;
  *n = 0;
  if (!v)
    return STRATA_OK;
  const size_t count = json_array_size(v);
  if (!json_is_array(v) || count > (1u << 20))
    return strata__error(STRATA_ERR_PARSE, "%s: device %d: \"gemm_shapes\" must be a list of at most %u GEMMs", src,
                         i, 1u << 20);
  if (count == 0)
    return STRATA_OK;
  struct strata_gemm_shape *sh = calloc(count, sizeof *sh);
  if (!sh)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory");
  for (size_t s = 0; s < count; s++) {
    json_t *e = json_array_get(v, s);
    double f[7];
    int ok = json_is_array(e) && json_array_size(e) == 7;
    for (size_t j = 0; ok && j < 7; j++) {
      json_t *x = json_array_get(e, j);
      ok = json_is_number(x) && isfinite(json_number_value(x));
      f[j] = ok ? json_number_value(x) : 0;
    }
    for (int j = 0; ok && j < 6; j++)
      ok = f[j] == floor(f[j]) && f[j] >= 0 && f[j] <= 1e9;
    ok = ok && f[0] >= 1 && f[1] >= 1 && f[2] >= 1 && f[5] >= 1 && f[3] <= 1 && f[4] <= 1 && f[6] > 0;
    if (!ok) {
      free(sh);
      return strata__error(STRATA_ERR_PARSE,
                           "%s: device %d: \"gemm_shapes\" entry %zu must be [m, n, k, trans_a, trans_b, batch, "
                           "GFLOP/s]: sizes and batch whole numbers from 1, transposes 0 or 1, a positive speed",
                           src, i, s);
    }
    sh[s] = (struct strata_gemm_shape){.m = (int64_t)f[0], .n = (int64_t)f[1], .k = (int64_t)f[2],
                                       .trans_a = (int)f[3], .trans_b = (int)f[4], .batch = (int64_t)f[5],
                                       .flops = f[6] * 1e9};
  }
  *out = sh;
  *n = (int)count;
  return STRATA_OK;
}

/*
** The pairs' all-reduce times, where the file has them ("allreduce":
** {"floats": [...], "seconds": [n][n][sizes]}): *sizes 0 where it has none
** (a file of an older strata), else every entry checked.
*/
static int read_allreduce(json_t *root, size_t n, const char *src, int *sizes, double *floats, double **sec) {
  *sizes = 0;
  *sec = NULL;
  json_t *arj = json_object_get(root, "allreduce");
  if (!arj)
    return STRATA_OK;
  json_t *fl = json_object_get(arj, "floats"), *sj = json_object_get(arj, "seconds");
  const size_t ns = json_array_size(fl);
  if (!json_is_object(arj) || ns < 1 || ns > STRATA_PLAN_ALLREDUCE_SIZES || json_array_size(sj) != n)
    return strata__error(STRATA_ERR_PARSE,
                         "%s: \"allreduce\" must give 1 to %d \"floats\" and a row of \"seconds\" per device", src,
                         STRATA_PLAN_ALLREDUCE_SIZES);
  for (size_t s = 0; s < ns; s++) {
    floats[s] = json_number_value(json_array_get(fl, s));
    if (!json_is_number(json_array_get(fl, s)) || !(floats[s] >= 1) || !isfinite(floats[s]) ||
        (s > 0 && !(floats[s] > floats[s - 1])))
      return strata__error(STRATA_ERR_PARSE, "%s: \"allreduce\" size %zu must be 1 float or more, larger than the one "
                           "before", src, s);
  }
  double *v = calloc(n * n * ns, sizeof *v);
  if (!v)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory");
  for (size_t i = 0; i < n; i++) {
    json_t *row = json_array_get(sj, i);
    for (size_t j = 0; j < n; j++) {
      json_t *cell = json_array_get(row, j);
      if (json_array_size(row) != n || (i != j && json_array_size(cell) != ns)) {
        free(v);
        return strata__error(STRATA_ERR_PARSE, "%s: \"allreduce\" seconds %zu -> %zu must list %zu times", src, i, j,
                             ns);
      }
      for (size_t s = 0; i != j && s < ns; s++) {
        const double t = json_number_value(json_array_get(cell, s));
        if (!(t > 0) || !isfinite(t)) {
          free(v);
          return strata__error(STRATA_ERR_PARSE, "%s: \"allreduce\" seconds %zu -> %zu, size %zu: not a positive time",
                               src, i, j, s);
        }
        v[(i * n + j) * ns + s] = t;
      }
    }
  }
  *sizes = (int)ns;
  *sec = v;
  return STRATA_OK;
}

STRATA_API int strata_machine_from_calibration(const char *json, const char *source,
                                               const struct strata_machine_options *o, strata_machine_t *out) {
  if (!out || !json)
    return strata__error(STRATA_ERR_INVALID, "strata_machine_from_calibration: NULL argument");
  *out = NULL;
  const char *src = source ? source : "calibration";
  json_error_t err;
  /* a key given twice is a file edited by hand or two files pasted together: which one is meant is not ours to guess */
  json_t *root = json_loads(json, JSON_REJECT_DUPLICATES, &err);
  if (!root)
    return strata__error(STRATA_ERR_PARSE, "%s: line %d: %s", src, err.line, err.text);
  int rc = STRATA_OK;
  json_t *schema = json_object_get(root, "schema"), *devs = json_object_get(root, "devices");
  json_t *gbps = json_object_get(root, "gbps"), *lat = json_object_get(root, "latency_us");
  if (!json_is_string(schema) || strcmp(json_string_value(schema), "strata-calibration/1") != 0)
    rc = strata__error(STRATA_ERR_PARSE, "%s: not a strata-calibration/1 file", src);
  const size_t n = json_array_size(devs);
  if (!rc && (n < 1 || n > 65536 || json_array_size(gbps) != n || json_array_size(lat) != n))
    rc = strata__error(STRATA_ERR_PARSE, "%s: \"devices\", \"gbps\" and \"latency_us\" must list the same devices",
                       src);
  struct strata_device_cost *cost = rc ? NULL : calloc(n, sizeof *cost);
  double *g = rc ? NULL : calloc(n * n, sizeof *g), *l = rc ? NULL : calloc(n * n, sizeof *l);
  int *ids = rc ? NULL : calloc(n, sizeof *ids);
  struct strata_gemm_shape **shapes = rc ? NULL : calloc(n, sizeof *shapes);
  if (!rc && (!cost || !g || !l || !ids || !shapes))
    rc = strata__error(STRATA_ERR_NOMEM, "out of host memory");
  for (size_t i = 0; i < n && !rc; i++) {
    json_t *d = json_array_get(devs, i);
    double gf = 0, bw = 0, launch = 0, mem = 0, id = 0;
    rc = number(d, "gflops", src, (int)i, &gf);
    if (!rc)
      rc = number(d, "mem_gbps", src, (int)i, &bw);
    if (!rc)
      rc = number(d, "launch_us", src, (int)i, &launch);
    if (!rc)
      rc = number(d, "memory", src, (int)i, &mem);
    if (!rc)
      rc = number(d, "device", src, (int)i, &id);
    if (rc)
      break;
    /* in range before the conversions: a double out of an integer type's range converts with undefined behaviour */
    if (!(mem < 0x1p64)) {
      rc = strata__error(STRATA_ERR_PARSE, "%s: device %zu: \"memory\" %.17g bytes is 2^64 or more", src, i, mem);
      break;
    }
    if (!(id <= INT_MAX) || id != floor(id)) {
      rc = strata__error(STRATA_ERR_PARSE, "%s: device %zu: \"device\" must be a whole runtime index from 0 to %d, "
                         "not %.17g", src, i, INT_MAX, id);
      break;
    }
    cost[i] = (struct strata_device_cost){.flops = gf * 1e9, .mem_gbps = bw, .memory = (uint64_t)mem,
                                          .launch_us = launch, .model = "calibrated", .source = "measured"};
    /* the refinements are optional: a file of an older strata has none */
    json_t *sizes = json_object_get(d, "gemm"), *opj = json_object_get(d, "op_ns"), *ct = json_object_get(d, "cpu_threads");
    json_t *rowj = json_object_get(d, "op_row_ns");
    for (size_t s = 0; s < json_array_size(sizes) && cost[i].ngemm < STRATA_PLAN_GEMM_SIZES; s++) {
      double sn = json_number_value(json_array_get(json_array_get(sizes, s), 0));
      double sg = json_number_value(json_array_get(json_array_get(sizes, s), 1));
      if (sn > 0 && sg > 0 && (cost[i].ngemm == 0 || sn > cost[i].gemm_n[cost[i].ngemm - 1])) {
        cost[i].gemm_n[cost[i].ngemm] = sn;
        cost[i].gemm_flops[cost[i].ngemm++] = sg * 1e9;
      }
    }
    /* bf16 GEMMs (strata-bench calibrate --precision bf16): absent, the device has no bf16 speed and a bf16
    ** plan on it is refused, naming the field; present, a positive number */
    json_t *bfj = json_object_get(d, "bf16_gflops"), *bsizes = json_object_get(d, "bf16_gemm");
    if (bfj && (!json_is_number(bfj) || !(json_number_value(bfj) > 0) || !isfinite(json_number_value(bfj)))) {
      rc = strata__error(STRATA_ERR_PARSE, "%s: device %zu: \"bf16_gflops\" must be a positive number", src, i);
      break;
    }
    cost[i].bf16_flops = bfj ? json_number_value(bfj) * 1e9 : 0;
    for (size_t s = 0; bfj && s < json_array_size(bsizes) && cost[i].bf16_ngemm < STRATA_PLAN_GEMM_SIZES; s++) {
      double sn = json_number_value(json_array_get(json_array_get(bsizes, s), 0));
      double sg = json_number_value(json_array_get(json_array_get(bsizes, s), 1));
      if (sn > 0 && sg > 0 && isfinite(sg) &&
          (cost[i].bf16_ngemm == 0 || sn > cost[i].bf16_gemm_n[cost[i].bf16_ngemm - 1])) {
        cost[i].bf16_gemm_n[cost[i].bf16_ngemm] = sn;
        cost[i].bf16_gemm_flops[cost[i].bf16_ngemm++] = sg * 1e9;
      }
    }
    for (int k = 0; k < STRATA_PLAN_OP_COUNT; k++) {
      double v = json_number_value(json_object_get(opj, strata__plan_op_names[k]));
      cost[i].op_ns[k] = v > 0 && isfinite(v) ? v : 0;
      double rv = json_number_value(json_object_get(rowj, strata__plan_op_names[k]));
      cost[i].op_row_ns[k] = rv > 0 && isfinite(rv) ? rv : 0;
    }
    json_t *sy = json_object_get(d, "sync_us");
    cost[i].sync_us = json_is_number(sy) && json_number_value(sy) > 0 && isfinite(json_number_value(sy))
                          ? json_number_value(sy)
                          : 0;
    cost[i].cpu_threads = json_is_integer(ct) && json_integer_value(ct) > 0 && json_integer_value(ct) <= INT_MAX
                              ? (int)json_integer_value(ct)
                              : 0;
    rc = read_stage_factor(json_object_get(d, "stage_probe"), src, (int)i, &cost[i]);
    if (!rc)
      rc = read_spread(json_object_get(d, "spread"), src, (int)i, &cost[i]);
    if (!rc)
      rc = read_shapes(json_object_get(d, "gemm_shapes"), src, (int)i, &shapes[i], &cost[i].nshapes);
    if (rc)
      break;
    cost[i].shapes = shapes[i];
    ids[i] = (int)id;
    json_t *row = json_array_get(gbps, i), *lrow = json_array_get(lat, i);
    if (json_array_size(row) != n || json_array_size(lrow) != n) {
      rc = strata__error(STRATA_ERR_PARSE, "%s: row %zu of \"gbps\" or \"latency_us\" has not %zu entries", src, i, n);
      break;
    }
    for (size_t j = 0; j < n; j++) {
      g[i * n + j] = json_number_value(json_array_get(row, j));
      l[i * n + j] = json_number_value(json_array_get(lrow, j));
      if (i != j && !(g[i * n + j] > 0))
        rc = strata__error(STRATA_ERR_PARSE, "%s: link %zu -> %zu has no measured bandwidth", src, i, j);
    }
  }
  strata_machine_t c = NULL;
  int ar_sizes = 0;
  double ar_floats[STRATA_PLAN_ALLREDUCE_SIZES], *ar = NULL;
  if (!rc)
    rc = read_allreduce(root, n, src, &ar_sizes, ar_floats, &ar);
  if (!rc)
    rc = read_pipe_probe(json_object_get(root, "pipeline_probe"), src, cost, n);
  if (!rc) {
    /* the cores the CPU devices got together when measured, else the system's count */
    json_t *cc = json_object_get(root, "cpu_cores"), *ce = json_object_get(root, "cpu_cores_effective");
    double cores = json_is_number(ce) && json_number_value(ce) > 0 ? json_number_value(ce)
                   : json_is_integer(cc)                           ? (double)json_integer_value(cc)
                                                                   : 0;
    struct strata_node_desc nd = {.devices = (int)n, .cost = cost, .gbps = g, .latency_us = l, .name = src,
                                  .cpu_cores = cores, .allreduce_sizes = ar_sizes, .allreduce_floats = ar_floats,
                                  .allreduce_s = ar};
    rc = strata_machine_new(&nd, o, &c);
    if (rc)
      strata__error_prefix(rc, "%s: ", src); /* the machine's refusal (a device of no speed or memory) names the file */
  }
  for (size_t i = 0; !rc && i < n; i++) {
    /* the runtime's own names and indices, so that a layout names runtime devices */
    json_t *nm = json_object_get(json_array_get(devs, i), "name");
    char *name = strdup(json_is_string(nm) ? json_string_value(nm) : "device");
    if (!name) {
      rc = strata__error(STRATA_ERR_NOMEM, "out of host memory");
      break;
    }
    free(c->names[i]);
    c->names[i] = name;
    c->id[i] = ids[i];
    c->cost[i].model = "calibrated";
    c->cost[i].source = "measured by strata-bench calibrate";
  }
  for (size_t i = 0; shapes && i < n; i++)
    free(shapes[i]); /* the machine holds its copies */
  free(shapes);
  free(cost);
  free(g);
  free(l);
  free(ids);
  free(ar);
  json_decref(root);
  if (rc) {
    strata_machine_free(c);
    return rc;
  }
  *out = c;
  return STRATA_OK;
}

STRATA_API int strata_machine_load_calibration(const char *path, const struct strata_machine_options *o,
                                               strata_machine_t *out) {
  if (!out || !path)
    return strata__error(STRATA_ERR_INVALID, "strata_machine_load_calibration: NULL argument");
  *out = NULL;
  FILE *f = NULL;
  TRY(strata__fopen_input(path, STRATA_ERR_NOT_FOUND, &f)); /* a regular file, or refused: a FIFO never blocks */
  char *text = NULL;
  long len = -1;
  int rc = STRATA_OK;
  if (fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0)
    rc = strata__error(STRATA_ERR_IO, "%s: cannot find its size", path);
  else if (len > CALIBRATION_MAX_BYTES)
    rc = strata__error(STRATA_ERR_PARSE, "%s: %ld bytes; a calibration file is at most %ld", path, len,
                       CALIBRATION_MAX_BYTES);
  else if (!(text = malloc((size_t)len + 1)))
    rc = strata__error(STRATA_ERR_NOMEM, "out of host memory reading %s", path);
  else if (fread(text, 1, (size_t)len, f) != (size_t)len)
    rc = strata__error(STRATA_ERR_IO, "%s: read error", path);
  fclose(f);
  if (!rc) {
    text[len] = '\0';
    if (strlen(text) != (size_t)len)
      rc = strata__error(STRATA_ERR_PARSE, "%s: a NUL byte in the text; not a calibration file", path);
  }
  if (!rc)
    rc = strata_machine_from_calibration(text, path, o, out);
  free(text);
  return rc;
}
