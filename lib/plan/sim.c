/* SPDX-License-Identifier: MIT */
/* sim.c — the simulator: a discrete-event run of a schedule's per-device action lists on the cost model of devices and links. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/file.h"
#include "plan/plan.h"
#include "core/core.h"

/* Bytes an op moves per element, for a device whose op speeds were not measured (nominal figures):
** it is then paced by its memory bandwidth. */
static const double op_bytes[STRATA_PLAN_OP_COUNT] = {
    [STRATA_PLAN_OP_ADD] = 12, [STRATA_PLAN_OP_GELU_FWD] = 8, [STRATA_PLAN_OP_GELU_BWD] = 12,
    [STRATA_PLAN_OP_LAYERNORM_FWD] = 8, [STRATA_PLAN_OP_LAYERNORM_BWD] = 16, [STRATA_PLAN_OP_SOFTMAX_FWD] = 8,
    [STRATA_PLAN_OP_SOFTMAX_BWD] = 12,
    /* AdamW reads parameter, gradient and both moments and writes three (28); the norm reads the gradient
    ** and zeroing writes it (8) */
    [STRATA_PLAN_OP_ADAMW] = 36, [STRATA_PLAN_OP_BIAS_ADD] = 8, [STRATA_PLAN_OP_BIAS_GRAD] = 4};

/* ---- the cost of pieces ---- */

/* The tp group of (replica, rank): its devices (replica-major, rank, tp rank in the layout's list) and their count. */
static int group_of(strata_layout_t l, int replica, int rank, const int **devs) {
  const int pp = strata_layout_pp(l);
  int per = 0, off = 0;
  for (int r = 0; r < pp; r++) {
    if (r == rank)
      off = per;
    per += strata_layout_tp(l, r);
  }
  *devs = strata_layout_devices(l) + (size_t)replica * (size_t)per + (size_t)off;
  return strata_layout_tp(l, rank);
}

/*
** Seconds of a ring all-reduce of `bytes` over the n devices devs in
** their order: 2(n - 1) steps of bytes / n each, every step as
** long as the slowest hop's. A hop's step is half of its pair's all-reduce
** of 2 bytes / n, as a ring of two takes two such steps: the pair's measured
** all-reduce where the calibration timed one, else its link's bandwidth and
** latency (then 2(n - 1)(bytes / n / bandwidth + latency)).
*/
static double ring_allreduce_s(const struct strata_machine *c, const int *devs, int n, double bytes) {
  if (n <= 1)
    return 0;
  double worst = 0;
  for (int i = 0; i < n; i++) {
    int a = devs[i], b = devs[(i + 1) % n];
    double pair = strata__cluster_pair_allreduce(c, a, b, 2.0 * bytes / n / 4);
    worst = pair > worst ? pair : worst;
  }
  return (n - 1) * worst;
}

/* The slowest member of a group, as a synchronous group runs at its pace. */
static struct strata_device_cost group_cost(const struct strata_machine *c, const int *devs, int t) {
  struct strata_device_cost w = c->cost[devs[0] % c->k];
  for (int i = 1; i < t; i++) {
    const struct strata_device_cost *d = &c->cost[devs[i] % c->k];
    if (d->flops < w.flops) {
      w.flops = d->flops;
      w.ngemm = d->ngemm;
      memcpy(w.gemm_n, d->gemm_n, sizeof w.gemm_n);
      memcpy(w.gemm_flops, d->gemm_flops, sizeof w.gemm_flops);
      w.nshapes = d->nshapes;
      w.shapes = d->shapes;
    }
    if (d->mem_gbps < w.mem_gbps)
      w.mem_gbps = d->mem_gbps;
    if (d->memory < w.memory)
      w.memory = d->memory;
    if (d->launch_us > w.launch_us)
      w.launch_us = d->launch_us;
    if (d->sync_us > w.sync_us)
      w.sync_us = d->sync_us;
    if (d->stage_factor > w.stage_factor)
      w.stage_factor = d->stage_factor;
    if (d->action_us > w.action_us)
      w.action_us = d->action_us;
    for (int k = 0; k < STRATA_PLAN_OP_COUNT; k++) {
      if (d->op_ns[k] > w.op_ns[k])
        w.op_ns[k] = d->op_ns[k];
      if (d->op_row_ns[k] > w.op_row_ns[k])
        w.op_row_ns[k] = d->op_row_ns[k];
    }
  }
  return w;
}

/*
** The FLOP/s a device sustains on a GEMM of m x n x k: the calibrated
** speed at the cube root of its volume (linear in log2 of the size between
** the sizes measured; below the smallest, falling with the size as a
** GEMM too small to fill the device is bound by its fixed costs), or
** `flops` where nothing was measured by size.
*/
static double gemm_rate(const struct strata_device_cost *w, double m, double n, double k) {
  const int g = w->ngemm;
  if (g == 0)
    return w->flops;
  const double size = cbrt(m * n * k);
  if (size <= w->gemm_n[0])
    return w->gemm_flops[0] * size / w->gemm_n[0];
  for (int i = 1; i < g; i++)
    if (size <= w->gemm_n[i]) {
      double f = log2(size / w->gemm_n[i - 1]) / log2(w->gemm_n[i] / w->gemm_n[i - 1]);
      return w->gemm_flops[i - 1] + f * (w->gemm_flops[i] - w->gemm_flops[i - 1]);
    }
  return w->gemm_flops[g - 1];
}

/* While strata__plan_gemm_shapes runs: the list it adds to (the calling thread's). */
static _Thread_local struct shape_list {
  struct strata_gemm_shape **v;
  int *n, failed;
} *collecting;

static void collect(int ta, int tb, double m, double n, double k, double batch) {
  struct shape_list *l = collecting;
  const struct strata_gemm_shape sh = {.m = (int64_t)m, .n = (int64_t)n, .k = (int64_t)k, .batch = (int64_t)batch,
                                       .trans_a = ta, .trans_b = tb};
  for (int i = 0; i < *l->n; i++)
    if (memcmp(&(*l->v)[i], &sh, sizeof sh) == 0)
      return;
  struct strata_gemm_shape *v = realloc(*l->v, (size_t)(*l->n + 1) * sizeof *v);
  if (!v) {
    l->failed = 1;
    return;
  }
  v[(*l->n)++] = sh;
  *l->v = v;
}

/* Seconds of `batch` GEMMs of op(A) op(B), m x n x k: at the speed measured for that very shape where
** calibration measured it (the model's own GEMMs), else at the speed by size. */
static double gemm_s(const struct strata_device_cost *w, int ta, int tb, double m, double n, double k, double batch) {
  if (collecting)
    collect(ta, tb, m, n, k, batch);
  const double flops = batch * 2.0 * m * n * k;
  for (int i = 0; i < w->nshapes; i++) {
    const struct strata_gemm_shape *sh = &w->shapes[i];
    if (sh->flops > 0 && (double)sh->m == m && (double)sh->n == n && (double)sh->k == k && sh->trans_a == ta &&
        sh->trans_b == tb && (double)sh->batch == batch)
      return flops / sh->flops;
  }
  return flops / gemm_rate(w, m, n, k);
}

/* Seconds of op `op` over `elems` elements: its measured speed, else (a bias op of an older calibration)
** the add's, else its bytes at the memory bandwidth. */
static double op_s(const struct strata_device_cost *w, int op, double elems) {
  if (w->op_ns[op] > 0)
    return elems * w->op_ns[op] * 1e-9;
  if ((op == STRATA_PLAN_OP_BIAS_ADD || op == STRATA_PLAN_OP_BIAS_GRAD) && w->op_ns[STRATA_PLAN_OP_ADD] > 0)
    return elems * w->op_ns[STRATA_PLAN_OP_ADD] * 1e-9;
  return elems * op_bytes[op] / (w->mem_gbps * 1e9);
}

/* Seconds of row op `op` over `elems` elements in `rows` rows: per element, and per row where measured so. */
static double rows_s(const struct strata_device_cost *w, int op, double elems, double rows) {
  return op_s(w, op, elems) + rows * w->op_row_ns[op] * 1e-9;
}

/* What a part of a layer's step costs on one slice: seconds of compute, and its joins (bytes, count). */
enum part { PART_FWD, PART_INPUT, PART_WEIGHT, PART_FULL };
struct work {
  double s;
  double join_bytes;
  int joins;
};

/*
** One part of a GPT layer (embedding, block, head) on slice-sized
** matrices of a t-way tensor-parallel stage for `rows` samples, op by op as
** lib/model/stage.c runs them: the GEMMs at the speed calibrated for their size,
** the row and elementwise ops (layernorm, softmax, GELU, biases, residual
** adds, copies) at theirs, a launch each; and the joins (all-reduces of the
** slices' partial sums) that part posts: a block joins rows x context x
** d_model floats twice in its forward and twice in its input gradient; a
** vocabulary-split embedding once in its forward; a vocabulary-split head
** its rows' max and sums (3 floats a row, two joins) forward and its input
** gradient (rows x d_model) backward.
*/
static struct work gpt_part(const struct strata_device_cost *w, const struct strata_model_config *cfg,
                            const struct strata_layer_info *li, int t, int64_t rows, enum part part) {
  const double B = (double)rows, T = (double)cfg->context, D = (double)cfg->d_model, N = B * T;
  const double A = D / t, Ft = (double)cfg->d_ff / t, H = (double)cfg->heads, Ht = H / t, hd = D / H;
  const int vp = t > 1 && cfg->vocab % t == 0;
  const double Vt = vp ? (double)cfg->vocab / t : (double)cfg->vocab;
  const int in = part == PART_FWD ? 0 : part != PART_WEIGHT, wt = part == PART_WEIGHT || part == PART_FULL;
  const int split = part == PART_INPUT || part == PART_WEIGHT;
  double s = 0, launches = 0, jb = 0;
  int joins = 0;
  if (strcmp(li->type, "embed") == 0) {
    if (part == PART_FWD) {
      s += op_s(w, STRATA_PLAN_OP_ADD, 3 * N * D + (vp ? N : 0)); /* two lookups and their sum */
      launches += 3 + vp;
      if (vp)
        jb += N * D * 4, joins++;
    }
    if (split)
      s += op_s(w, STRATA_PLAN_OP_ADD, N * D), launches++; /* the input part keeps the output gradient */
    if (wt)
      s += op_s(w, STRATA_PLAN_OP_ADD, 2 * N * D + (vp ? N : 0)), launches += 2 + vp;
  } else if (strcmp(li->type, "block") == 0) {
    if (part == PART_FWD) {
      s += gemm_s(w, 0, 0, N, 3 * A, D, 1) + gemm_s(w, 0, 0, N, D, A, 1) + gemm_s(w, 0, 0, N, Ft, D, 1) +
           gemm_s(w, 0, 0, N, D, Ft, 1);
      /* scores and their product with V, a head at a time (a sequence's heads in one call) */
      s += gemm_s(w, 0, 1, T, T, hd, Ht) * B + gemm_s(w, 0, 0, T, hd, T, Ht) * B;
      /* the biases of c_attn, c_proj, c_fc and c_proj (a row-split matrix's after the join), two residuals */
      s += op_s(w, STRATA_PLAN_OP_LAYERNORM_FWD, 2 * N * D) +
           rows_s(w, STRATA_PLAN_OP_SOFTMAX_FWD, B * Ht * T * T, B * Ht * T) +
           op_s(w, STRATA_PLAN_OP_GELU_FWD, N * Ft) + op_s(w, STRATA_PLAN_OP_BIAS_ADD, N * (3 * A + Ft + 2 * D)) +
           op_s(w, STRATA_PLAN_OP_ADD, N * 2 * D);
      launches += 14 + 2 * B;
      if (t > 1)
        jb += 2 * N * D * 4, joins += 2;
    }
    if (in) {
      s += gemm_s(w, 0, 1, N, Ft, D, 1) + gemm_s(w, 0, 1, N, D, Ft, 1) + gemm_s(w, 0, 1, N, A, D, 1) +
           gemm_s(w, 0, 1, N, D, 3 * A, 1);
      /* the scores' gradient, V's, Q's and K's */
      s += (gemm_s(w, 0, 1, T, T, hd, Ht) + gemm_s(w, 1, 0, T, hd, T, Ht) + gemm_s(w, 0, 0, T, hd, T, Ht) +
            gemm_s(w, 1, 0, T, hd, T, Ht)) * B;
      s += op_s(w, STRATA_PLAN_OP_GELU_BWD, N * Ft) +
           rows_s(w, STRATA_PLAN_OP_SOFTMAX_BWD, B * Ht * T * T, B * Ht * T) + op_s(w, STRATA_PLAN_OP_ADD, 2 * N * D);
      launches += 8 + 4 * B;
      if (t > 1)
        jb += 2 * N * D * 4, joins += 2;
    }
    if (wt) {
      s += gemm_s(w, 1, 0, Ft, D, N, 1) + gemm_s(w, 1, 0, D, Ft, N, 1) + gemm_s(w, 1, 0, A, D, N, 1) +
           gemm_s(w, 1, 0, D, 3 * A, N, 1);
      s += op_s(w, STRATA_PLAN_OP_BIAS_GRAD, N * (2 * D + Ft + 3 * A));
      launches += 8;
    }
    if (part != PART_FWD) /* both layernorms' backward, run by each part when split */
      s += op_s(w, STRATA_PLAN_OP_LAYERNORM_BWD, 2 * N * D), launches += 2;
    if (split)
      s += op_s(w, STRATA_PLAN_OP_ADD, N * D), launches++;
  } else { /* lm_head */
    if (part == PART_FWD) {
      s += op_s(w, STRATA_PLAN_OP_LAYERNORM_FWD, N * D) + gemm_s(w, 0, 1, N, Vt, D, 1) +
           rows_s(w, STRATA_PLAN_OP_SOFTMAX_FWD, N * Vt, N);
      launches += 3 + 3 * vp;
      if (vp)
        jb += 3 * N * 4, joins += 2;
    }
    if (in) {
      s += rows_s(w, STRATA_PLAN_OP_SOFTMAX_BWD, N * Vt, N) + gemm_s(w, 0, 0, N, D, Vt, 1);
      launches += 2;
      if (vp)
        jb += N * D * 4, joins++;
    }
    if (wt)
      s += gemm_s(w, 1, 0, Vt, D, N, 1), launches++;
    if (part != PART_FWD)
      s += op_s(w, STRATA_PLAN_OP_LAYERNORM_BWD, N * D), launches++;
    if (split)
      s += op_s(w, STRATA_PLAN_OP_ADD, N * (D + Vt)), launches++;
  }
  return (struct work){s + launches * w->launch_us * 1e-6, jb, joins};
}

/*
** One part of layer `layer`'s step on one slice of a t-way stage whose
** slowest member costs `w`, for `rows` samples. A GPT's layers are costed
** op by op (gpt_part); other layers from the model's profile: their FLOPs
** over t at the large-GEMM speed, their kept activations read and written
** at the elementwise speed, the backward split evenly between its parts.
*/
static struct work raw_part(const struct strata_device_cost *w, strata_model_t model, int t, int layer, int64_t rows,
                            enum part part) {
  struct strata_layer_info li;
  strata_model_layer(model, layer, &li);
  const struct strata_model_config *cfg = strata_model_config(model);
  if (cfg->kind == STRATA_MODEL_GPT)
    return gpt_part(w, cfg, &li, t, rows, part);
  double flops = (part == PART_FWD ? li.fwd_flops : li.bwd_flops) * (double)rows / t;
  double elems = (double)li.act_bytes / 4 * (double)rows / t * (part == PART_FWD ? 2 : 3);
  double s = flops / w->flops + op_s(w, STRATA_PLAN_OP_ADD, elems) + (part == PART_FWD ? 4 : 8) * w->launch_us * 1e-6;
  return (struct work){part == PART_INPUT || part == PART_WEIGHT ? s / 2 : s, 0, 0};
}

/* The same, its compute at the device's stage factor (what its ops cost in sequence in a stage). */
static struct work layer_part(const struct strata_device_cost *w, strata_model_t model, int t, int layer,
                              int64_t rows, enum part part) {
  struct work k = raw_part(w, model, t, layer, rows, part);
  if (w->stage_factor > 0)
    k.s *= w->stage_factor;
  return k;
}

double strata__plan_ops_time(const struct strata_device_cost *w, strata_model_t model, int64_t rows) {
  double s = 0;
  const int layers = strata_model_layer_count(model);
  for (int i = 0; i < layers; i++)
    s += raw_part(w, model, 1, i, rows, PART_FWD).s + raw_part(w, model, 1, i, rows, PART_FULL).s;
  return s + w->sync_us * 1e-6;
}

/* Seconds of `joins` all-reduces of `bytes` in all (each the mean size) over the tp group devs of t members. */
static double joins_s(const struct strata_machine *c, const int *devs, double bytes, int joins, int t) {
  if (t <= 1 || joins == 0)
    return 0;
  return joins * ring_allreduce_s(c, devs, t, bytes / joins);
}

double strata__plan_layer_time(const struct strata_machine *c, strata_model_t model, strata_layout_t layout, int rank,
                               int layer, int64_t rows, int backward) {
  const int *devs = NULL;
  int t = group_of(layout, 0, rank, &devs);
  struct strata_device_cost w = group_cost(c, devs, t);
  struct work k = layer_part(&w, model, t, layer, rows, backward ? PART_FULL : PART_FWD);
  return k.s + joins_s(c, devs, k.join_bytes, k.joins, t);
}

int strata__plan_gemm_shapes(strata_model_t model, int t, int64_t rows, struct strata_gemm_shape **v, int *n) {
  struct shape_list l = {.v = v, .n = n};
  const struct strata_device_cost w = {.flops = 1e12, .mem_gbps = 1e3, .memory = 1};
  collecting = &l;
  const int layers = strata_model_layer_count(model);
  for (int i = 0; i < layers && !l.failed; i++) {
    layer_part(&w, model, t, i, rows, PART_FWD);
    layer_part(&w, model, t, i, rows, PART_FULL);
  }
  collecting = NULL;
  return l.failed ? strata__error(STRATA_ERR_NOMEM, "out of host memory listing a model's GEMMs") : STRATA_OK;
}

/* Whether every tp group of the first `replicas` replicas is of devices that cost alike. */
static int groups_alike(const struct strata_machine *c, strata_layout_t l, int replicas) {
  for (int rep = 0; rep < replicas; rep++)
    for (int r = 0; r < strata_layout_pp(l); r++) {
      const int *devs;
      const int t = group_of(l, rep, r, &devs);
      const struct strata_device_cost *a = &c->cost[devs[0] % c->k];
      for (int i = 1; i < t; i++) {
        const struct strata_device_cost *b = &c->cost[devs[i] % c->k];
        if (a->flops != b->flops || a->mem_gbps != b->mem_gbps || a->memory != b->memory ||
            a->launch_us != b->launch_us || a->sync_us != b->sync_us || a->cpu_threads != b->cpu_threads ||
            a->stage_factor != b->stage_factor || a->action_us != b->action_us ||
            a->ngemm != b->ngemm ||
            memcmp(a->gemm_n, b->gemm_n, sizeof a->gemm_n) != 0 ||
            memcmp(a->gemm_flops, b->gemm_flops, sizeof a->gemm_flops) != 0 ||
            memcmp(a->op_ns, b->op_ns, sizeof a->op_ns) != 0 ||
            memcmp(a->op_row_ns, b->op_row_ns, sizeof a->op_row_ns) != 0 || a->nshapes != b->nshapes ||
            (a->nshapes && memcmp(a->shapes, b->shapes, (size_t)a->nshapes * sizeof *a->shapes) != 0))
          return 0;
      }
    }
  return 1;
}

/* Bytes of parameters, gradients and AdamW moments a device of a tp-t rank holds for `params`. */
static double static_bytes(double params, int t, int dp, int zero) {
  double p = params / t;
  return p * 4 /* weights */ + p * 4 /* gradients */ + p * 8 / (zero && dp > 1 ? dp : 1) /* moments */;
}

/* The first layer of virtual stage j under `split`. */
static int stage_first(const int *split, int j) {
  int a = 0;
  for (int i = 0; i < j; i++)
    a += split[i];
  return a;
}

uint64_t strata__plan_rank_memory(strata_model_t model, strata_layout_t layout, const int *split, const int *inflight,
                                  int64_t rows, int rank) {
  const int pp = strata_layout_pp(layout), S = strata_layout_stages(layout), t = strata_layout_tp(layout, rank);
  double total = 0;
  for (int j = rank; j < S; j += pp) {
    int a = stage_first(split, j);
    double params = 0, act = 0;
    for (int l = a; l < a + split[j]; l++) {
      struct strata_layer_info li;
      strata_model_layer(model, l, &li);
      params += (double)li.params;
      act += (double)li.act_bytes;
    }
    struct strata_layer_info last;
    strata_model_layer(model, a + split[j] - 1, &last);
    total += static_bytes(params, t, strata_layout_dp(layout), strata_layout_zero(layout));
    /* activations kept per micro-batch in flight, and its output buffer */
    total += (act / t + (double)last.out_bytes) * (double)rows * inflight[j];
  }
  return (uint64_t)total;
}

/* Layers per stage balanced by FLOPs, for a layout that leaves the split to the trainer. */
static int balanced_split(strata_model_t model, int S, int *split) {
  const int L = strata_model_layer_count(model);
  if (L < S)
    return strata__error(STRATA_ERR_INVALID, "the model has %d layers, fewer than the layout's %d stages", L, S);
  double total = strata_model_flops(model), acc = 0;
  int l = 0;
  for (int j = 0; j < S; j++) {
    int n = 0;
    double goal = total * (j + 1) / S;
    while (l < L && (n == 0 || (L - l > S - j - 1 && acc < goal))) {
      struct strata_layer_info li;
      strata_model_layer(model, l, &li);
      double f = li.fwd_flops + li.bwd_flops;
      /* take the layer when that brings the running sum nearer the goal */
      if (n > 0 && acc + f - goal > goal - acc)
        break;
      acc += f;
      l++;
      n++;
    }
    split[j] = n;
  }
  split[S - 1] += L - l;
  return STRATA_OK;
}

/* ---- the engine ---- */

/*
** What every stage of the schedule costs: seconds per action, bytes per
** transfer. A stage is one slice on its own device, and its joins are the
** TP_JOIN actions of the executor's lists; a stage no device holds (a slice
** beyond its rank's tp degree) costs nothing. In symmetric mode on like
** groups a stage is its whole group, costed at its slowest member, the
** joins inside its F and B.
*/
struct stage_cost {
  double f, b, bi, w, opt;          /* compute (joins included when inline) */
  double f_comm, b_comm, bi_comm;   /* the inline joins' part */
  double tjf, tjb;                  /* TP_JOIN_FORWARD / _BACKWARD: the joins of one micro-batch's F, B or BI */
  double tjf_bytes, tjb_bytes;
  double act_bytes;                 /* kept per micro-batch per device */
  double out_bytes, in_bytes;       /* per micro-batch: output forward, input gradient back */
  double grad_bytes;                /* gradients per device, for the collectives */
  double static_bytes;
  uint64_t capacity;                /* memory of the stage's device (its group's smallest) */
  const int *devs;                  /* the tp group */
  int dev;                          /* the cluster device the stage's schedule device stands for */
  int tp;
  int threads;                      /* host cores its compute takes (0: none) */
};

struct event {
  const char *cat;
  char name[24];
  int tid;
  double ts, dur;
  const char *op;
  double bytes;
};

/* A heap entry: device `dev` at time t starts its next action (gen < 0), or ends the compute on host
** cores it runs now, if `gen` is still that compute's generation (a later share of the cores moved it). */
struct heap_item {
  double t;
  int dev;
  int gen;
};

/* A device's compute on the host's cores, running: it advances at `rate` (its share of the cores) and
** has `work` seconds (alone) left as of `since`. */
struct shared_run {
  int on, gen;
  int threads, node;
  double work, since, rate;
  double t0, comm; /* when the action started; the seconds of its inline joins, which follow it */
};

struct engine {
  strata_schedule_t s;
  int P, S, M, R, chain, K;
  int T, Rdp;                       /* tp slices per replica, replicas (R = chains = Rdp x T) */
  const double *unit;               /* unit costs by kind, or NULL */
  const struct strata_machine *c;
  struct stage_cost *sc;            /* [S], NULL with unit costs */
  int dp;                           /* replicas the collectives span (layout dp, >= R) */
  double *finish, *arrive;          /* [K x S x (M + 1)] */
  double *clock, *sender_free, *comm_free, *compute, *comm, *mem_now, *mem_peak;
  int *next, *parked, *bw_done;
  double *bw_last;
  int *coll_count;                  /* [3 x T x chain] */
  double *coll_max, *coll_fin;
  int *tj_count;                    /* [keys] slices arrived at a TP_JOIN (keyed by the slice-0 stage) */
  double *tj_max;
  int *last_opt;                    /* [P] index of the device's last OPTIMIZER, -1 for none */
  int opt_arrived;                  /* OPTIMIZERs reached: the update waits for every held stage's norm */
  int held;                         /* stages a device holds (all but a slice beyond its rank's tp degree) */
  double opt_max;
  struct shared_run *run;           /* [P] compute on host cores (NULL: no device shares them) */
  double *res_free;                 /* [nodes x k] uplinks, then [nodes x nics] out, then in */
  struct heap_item *heap;
  int nheap, cap_heap;
  struct event *ev;
  size_t nev, cap_ev;
  int tracing, failed;
  int draws;                        /* 1: each compute action's time drawn from its device's spread */
  uint64_t rng;                     /* the draws' state */
};

/* The next of a seeded stream of uniform numbers in [0, 1) (splitmix64: one state word, every seed good). */
static double uniform(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return (double)(z >> 11) * 0x1.0p-53;
}

/* A draw from a spread of n quantiles at probabilities (i + 0.5) / n: linear between them, the end ones held. */
static double spread_draw(const double *q, int n, double u) {
  const double x = u * n - 0.5;
  if (x <= 0)
    return q[0];
  const int i = (int)x;
  if (i >= n - 1)
    return q[n - 1];
  return q[i] + (x - i) * (q[i + 1] - q[i]);
}

/* The factor on stage st's next compute action: a draw from its device's spread, or 1. */
static double jitter(struct engine *e, int st) {
  if (!e->draws || !e->sc || st < 0 || st >= e->S)
    return 1;
  const struct strata_device_cost *w = &e->c->cost[e->sc[st].dev % e->c->k];
  return w->nspread > 0 ? spread_draw(w->spread, w->nspread, uniform(&e->rng)) : 1;
}

static size_t key(const struct engine *e, int kind, int stage, int mb) {
  return ((size_t)kind * (size_t)e->S + (size_t)stage) * (size_t)(e->M + 1) + (size_t)(mb + 1);
}

static int coll_index(int kind) {
  return kind == STRATA_ACTION_GRAD_REDUCE ? 0 : kind == STRATA_ACTION_GRAD_SCATTER ? 1
         : kind == STRATA_ACTION_PARAM_GATHER ? 2 : -1;
}

/* The stage of replica r that matches stage st (same slice, same place in the chain). */
static int peer_stage(const struct engine *e, int st, int r) {
  return (r * e->T + st / e->chain % e->T) * e->chain + st % e->chain;
}
/* Slice t of st's replica's stage. */
static int slice_stage(const struct engine *e, int st, int t) {
  return (st / e->chain / e->T * e->T + t) * e->chain + st % e->chain;
}
/* The slot of stage st's gradient collective `kind` (one per slice and place in the chain). */
static int coll_slot(const struct engine *e, int kind, int st) {
  return (coll_index(kind) * e->T + st / e->chain % e->T) * e->chain + st % e->chain;
}
static int has_prev(const struct engine *e, int st) { return st % e->chain != 0; }
static int has_next(const struct engine *e, int st) { return (st + 1) % e->chain != 0; }

static void heap_push(struct engine *e, double t, int dev, int gen) {
  if (e->nheap == e->cap_heap) {
    int cap = e->cap_heap ? 2 * e->cap_heap : 64;
    struct heap_item *h = realloc(e->heap, sizeof *h * (size_t)cap);
    if (!h) {
      e->failed = 1;
      return;
    }
    e->heap = h;
    e->cap_heap = cap;
  }
  int i = e->nheap++;
  while (i > 0) {
    int p = (i - 1) / 2;
    if (e->heap[p].t < t || (e->heap[p].t == t && e->heap[p].dev < dev))
      break;
    e->heap[i] = e->heap[p];
    i = p;
  }
  e->heap[i] = (struct heap_item){t, dev, gen};
}

static struct heap_item heap_pop(struct engine *e) {
  struct heap_item top = e->heap[0], last = e->heap[--e->nheap];
  int i = 0;
  for (;;) {
    int l = 2 * i + 1, r = l + 1, m = i;
    struct heap_item *best = &last;
    if (l < e->nheap && (e->heap[l].t < best->t || (e->heap[l].t == best->t && e->heap[l].dev < best->dev)))
      m = l, best = &e->heap[l];
    if (r < e->nheap && (e->heap[r].t < best->t || (e->heap[r].t == best->t && e->heap[r].dev < best->dev)))
      m = r, best = &e->heap[r];
    if (m == i)
      break;
    e->heap[i] = e->heap[m];
    i = m;
  }
  if (e->nheap)
    e->heap[i] = last;
  return top;
}

static void trace(struct engine *e, const char *cat, const struct strata_action *a, const char *op, int tid, double t0,
                  double t1, double bytes) {
  if (!e->tracing || t1 <= t0)
    return;
  if (e->nev == e->cap_ev) {
    size_t cap = e->cap_ev ? 2 * e->cap_ev : 1024;
    struct event *n = realloc(e->ev, sizeof *n * cap);
    if (!n) {
      e->failed = 1;
      return;
    }
    e->ev = n;
    e->cap_ev = cap;
  }
  struct event *v = &e->ev[e->nev++];
  v->cat = cat;
  if (!a)
    snprintf(v->name, sizeof v->name, "%s", cat);
  else if (a->microbatch < 0)
    snprintf(v->name, sizeof v->name, "%s%d", strata_action_label(a->kind), a->stage);
  else
    snprintf(v->name, sizeof v->name, "%s%d.%d", strata_action_label(a->kind), a->stage, a->microbatch);
  v->tid = tid;
  v->ts = t0 * 1e6;
  v->dur = (t1 - t0) * 1e6;
  v->op = op;
  v->bytes = bytes;
}

/* When device d's next action can start: 1 and *t, or 0 while it waits for something not yet known. */
static int ready(const struct engine *e, int d, double *t) {
  int n;
  const struct strata_action *a = &strata_schedule_actions(e->s, d, &n)[e->next[d]];
  const int st = a->stage, mb = a->microbatch;
  double r = e->clock[d], f = 0;
#define NEED(x)                                                                                                        \
  do {                                                                                                                 \
    f = (x);                                                                                                           \
    if (f < 0)                                                                                                         \
      return 0;                                                                                                        \
    if (f > r)                                                                                                         \
      r = f;                                                                                                           \
  } while (0)
  switch (a->kind) {
  case STRATA_ACTION_FORWARD:
    if (has_prev(e, st)) {
      /* the previous stage, or the slice that stands for it */
      const int p = strata_schedule_stage_owner(e->s, st - 1);
      NEED(strata_schedule_stage_device(e->s, p) == d ? e->finish[key(e, STRATA_ACTION_FORWARD, p, mb)]
                                                      : e->finish[key(e, STRATA_ACTION_RECV_ACT, st, mb)]);
    }
    break;
  case STRATA_ACTION_SEND_ACT: NEED(e->finish[key(e, STRATA_ACTION_FORWARD, st, mb)]); break;
  /* a transfer's arrival is kept under the stage before (after) the receiver: the sender may stand for it */
  case STRATA_ACTION_RECV_ACT: NEED(e->arrive[key(e, STRATA_ACTION_SEND_ACT, st - 1, mb)]); break;
  case STRATA_ACTION_BACKWARD:
  case STRATA_ACTION_BACKWARD_INPUT:
    NEED(e->finish[key(e, STRATA_ACTION_FORWARD, st, mb)]);
    if (has_next(e, st)) {
      const int nx = strata_schedule_stage_owner(e->s, st + 1);
      if (strata_schedule_stage_device(e->s, nx) == d) {
        double b = e->finish[key(e, STRATA_ACTION_BACKWARD, nx, mb)];
        if (b < 0)
          b = e->finish[key(e, STRATA_ACTION_BACKWARD_INPUT, nx, mb)];
        NEED(b);
      } else {
        NEED(e->finish[key(e, STRATA_ACTION_RECV_GRAD, st, mb)]);
      }
    }
    break;
  case STRATA_ACTION_SEND_GRAD: {
    double b = e->finish[key(e, STRATA_ACTION_BACKWARD, st, mb)];
    if (b < 0)
      b = e->finish[key(e, STRATA_ACTION_BACKWARD_INPUT, st, mb)];
    NEED(b);
    break;
  }
  case STRATA_ACTION_RECV_GRAD: NEED(e->arrive[key(e, STRATA_ACTION_SEND_GRAD, st + 1, mb)]); break;
  case STRATA_ACTION_BACKWARD_WEIGHT: NEED(e->finish[key(e, STRATA_ACTION_BACKWARD_INPUT, st, mb)]); break;
  case STRATA_ACTION_OPTIMIZER:
    if (e->arrive[key(e, a->kind, st, mb)] >= 0) {
      /* the device's last: its updates wait until every stage's gradient norm is in (the global clip) */
      if (e->opt_arrived < e->held)
        return 0;
      NEED(e->opt_max);
      break;
    }
    if (e->bw_done[st] < e->M)
      return 0;
    NEED(e->bw_last[st]);
    if (e->Rdp > 1) {
      double g = e->coll_fin[coll_slot(e, STRATA_ACTION_GRAD_REDUCE, st)];
      if (g < 0)
        g = e->coll_fin[coll_slot(e, STRATA_ACTION_GRAD_SCATTER, st)];
      NEED(g);
    }
    break;
  case STRATA_ACTION_GRAD_REDUCE:
  case STRATA_ACTION_GRAD_SCATTER:
    if (e->bw_done[st] < e->M)
      return 0;
    NEED(e->bw_last[st]);
    break;
  case STRATA_ACTION_PARAM_GATHER: NEED(e->finish[key(e, STRATA_ACTION_OPTIMIZER, st, -1)]); break;
  case STRATA_ACTION_TP_JOIN_FORWARD:
  case STRATA_ACTION_TP_JOIN_BACKWARD:
    /* arrive when the device gets here; then wait for the join to end */
    if (e->arrive[key(e, a->kind, st, mb)] >= 0)
      NEED(e->finish[key(e, a->kind, st, mb)]);
    break;
  default: break; /* kinds the simulator does not know: a synchronisation point that costs nothing */
  }
#undef NEED
  *t = r;
  return 1;
}

/* Push device d if its next action can start, else park it until what it waits for is known. */
static void schedule_device(struct engine *e, int d) {
  int n;
  strata_schedule_actions(e->s, d, &n);
  if (e->next[d] >= n) {
    e->parked[d] = 0;
    return;
  }
  double t;
  if (ready(e, d, &t)) {
    e->parked[d] = 0;
    heap_push(e, t, d, -1);
  } else {
    e->parked[d] = 1;
  }
}

static void wake(struct engine *e, int d) {
  if (e->parked[d])
    schedule_device(e, d);
}

/* Earliest-free lane of `n` lanes starting at base. */
static double *lane(double *base, int n) {
  double *best = base;
  for (int i = 1; i < n; i++)
    if (base[i] < *best)
      best = &base[i];
  return best;
}

/*
** A transfer of `bytes` from schedule device `from` (its cluster device a)
** to b at time t: it waits for the sender's copy engine, for a shared PCIe
** uplink on either side when it leaves that island, and for a network
** interface on each side when it leaves the node; all of them are held
** until it arrives. Returns the arrival time and the seconds it took.
*/
static double transfer(struct engine *e, int from, int a, int b, double bytes, double t, double *dur) {
  const struct strata_machine *c = e->c;
  double gbps, lat;
  int kind;
  strata__cluster_link(c, a, b, &gbps, &lat, &kind);
  double *held[6];
  int nheld = 0;
  held[nheld++] = &e->sender_free[from];
  const int la = a % c->k, lb = b % c->k;
  const size_t nk = (size_t)c->nodes * (size_t)c->k;
  int leaves = kind == STRATA_PATH_NET || c->island[la] != c->island[lb];
  if (leaves && c->uplink[la] >= 0) {
    held[nheld++] = &e->res_free[(size_t)(a / c->k) * (size_t)c->k + (size_t)c->uplink[la]];
    if (c->uplink_gbps[la] > 0 && c->uplink_gbps[la] < gbps)
      gbps = c->uplink_gbps[la];
  }
  if (leaves && c->uplink[lb] >= 0 && !(a / c->k == b / c->k && c->uplink[la] == c->uplink[lb])) {
    held[nheld++] = &e->res_free[(size_t)(b / c->k) * (size_t)c->k + (size_t)c->uplink[lb]];
    if (c->uplink_gbps[lb] > 0 && c->uplink_gbps[lb] < gbps)
      gbps = c->uplink_gbps[lb];
  }
  if (kind == STRATA_PATH_NET) {
    held[nheld++] = lane(&e->res_free[nk + (size_t)(a / c->k) * (size_t)c->nics], c->nics);
    held[nheld++] = lane(&e->res_free[nk + (size_t)c->nodes * (size_t)c->nics + (size_t)(b / c->k) * (size_t)c->nics],
                         c->nics);
  }
  double start = t;
  for (int i = 0; i < nheld; i++)
    if (*held[i] > start)
      start = *held[i];
  *dur = lat * 1e-6 + bytes / (gbps * 1e9);
  double end = start + *dur;
  for (int i = 0; i < nheld; i++)
    *held[i] = end;
  return end;
}

/*
** The collective `kind` of stage st: a ring per tp rank over the stage's
** replicas, paced by its narrowest hop. A hop that leaves the node shares
** the node's interfaces with the rings of the other tp ranks. In symmetric
** mode two replicas stand for dp: their hop is every hop's kind.
** Seconds, and the bytes each member contributes.
*/
static double collective_s(const struct engine *e, int kind, int st, double *bytes) {
  if (e->unit) {
    *bytes = 0;
    return e->unit[kind];
  }
  const struct stage_cost *c = &e->sc[st];
  /* each hop: a two-member all-reduce of 2 bytes / dp, the time of two of the ring's steps */
  const double pair_floats = 2.0 * c->grad_bytes / e->dp / 4;
  double worst = 0;
  for (int r = 0; r < e->Rdp; r++) {
    int a = e->sc[peer_stage(e, st, r)].dev, b = e->sc[peer_stage(e, st, (r + 1) % e->Rdp)].dev;
    if (a == b)
      continue;
    double g, lt, pair;
    int k;
    strata__cluster_link(e->c, a, b, &g, &lt, &k);
    if (k == STRATA_PATH_NET) {
      double share = e->c->net_gbps * e->c->nics / c->tp;
      g = share < e->c->net_gbps ? share : e->c->net_gbps;
      pair = strata__pair_allreduce_s(pair_floats, g, lt);
    } else {
      pair = strata__cluster_pair_allreduce(e->c, a, b, pair_floats);
    }
    worst = pair > worst ? pair : worst;
  }
  *bytes = c->grad_bytes;
  double ar = e->dp > 1 ? (e->dp - 1) * worst : 0;
  return kind == STRATA_ACTION_GRAD_REDUCE ? ar : ar / 2; /* reduce-scatter or all-gather: half the ring */
}

static double action_cost(const struct engine *e, const struct strata_action *a, double *comm) {
  *comm = 0;
  if (e->unit)
    return a->kind >= 0 && a->kind < STRATA_ACTION_KIND_COUNT ? e->unit[a->kind] : 0;
  const struct stage_cost *c = &e->sc[a->stage];
  switch (a->kind) {
  case STRATA_ACTION_FORWARD: *comm = c->f_comm; return c->f;
  case STRATA_ACTION_BACKWARD: *comm = c->b_comm; return c->b;
  case STRATA_ACTION_BACKWARD_INPUT: *comm = c->bi_comm; return c->bi;
  case STRATA_ACTION_BACKWARD_WEIGHT: return c->w;
  case STRATA_ACTION_OPTIMIZER: return 0; /* the device's last OPTIMIZER updates all its stages: opt_s */
  default: return 0;
  }
}

/* Seconds of device d's updates: the AdamW steps of all its stages, after the global norm. */
static double opt_s(const struct engine *e, int d) {
  double t = 0;
  for (int g = 0; g < e->S; g++)
    if (strata_schedule_stage_device(e->s, g) == d && strata_schedule_stage_held(e->s, g))
      t += e->unit ? e->unit[STRATA_ACTION_OPTIMIZER] : e->sc[g].opt;
  return t;
}

/*
** Compute on the host's cores, as processor sharing: the devices of a node
** that compute there share its cores (the effective count calibration
** measured); while the threads of those computing exceed the cores, each
** runs at cores / threads of its speed alone. The share changes whenever one
** starts or ends, so a running compute's end is re-timed then: its heap
** entry carries a generation, and the older entries are dropped.
*/
static int shares_cores(const struct engine *e, int st) { return !e->unit && e->run && e->sc[st].threads > 0; }

/* Advance every running compute of `node` to time t at its current rate, then give them all the new share. */
static void reshare(struct engine *e, int node, double t, int advance_only) {
  double demand = 0;
  for (int x = 0; x < e->P; x++) {
    struct shared_run *r = &e->run[x];
    if (!r->on || r->node != node)
      continue;
    r->work -= (t - r->since) * r->rate;
    r->work = r->work > 0 ? r->work : 0;
    r->since = t;
    demand += r->threads;
  }
  if (advance_only)
    return;
  const double rate = demand > e->c->cpu_cores ? e->c->cpu_cores / demand : 1;
  for (int x = 0; x < e->P; x++) {
    struct shared_run *r = &e->run[x];
    if (!r->on || r->node != node)
      continue;
    r->rate = rate;
    heap_push(e, t + r->work / rate, x, ++r->gen);
  }
}

/* Device d starts `work` seconds (alone) of compute on host cores at t, then `comm` seconds of inline joins. */
static void shared_start(struct engine *e, int d, int st, double t, double work, double comm) {
  const int node = e->sc[st].dev / e->c->k;
  reshare(e, node, t, 1);
  struct shared_run *r = &e->run[d];
  r->on = 1;
  r->threads = e->sc[st].threads;
  r->node = node;
  r->work = work;
  r->since = r->t0 = t;
  r->rate = 1;
  r->comm = comm;
  reshare(e, node, t, 0);
}

/*
** The end of device d's compute action `a`, started at t0, its device free
** again at t1 (comm of it in inline joins): the figures, the trace, the
** memory in flight and the stage's backward count.
*/
static void compute_done(struct engine *e, int d, const struct strata_action *a, double t0, double t1, double comm) {
  const int st = a->stage;
  e->clock[d] = t1;
  e->finish[key(e, a->kind, st, a->microbatch)] = t1;
  e->compute[d] += t1 - t0 - comm;
  e->comm[d] += comm;
  trace(e, a->kind == STRATA_ACTION_OPTIMIZER ? "optimizer" : "compute", a, NULL, 2 * d, t0, t1, 0);
  if (!e->unit) {
    if (a->kind == STRATA_ACTION_FORWARD) {
      e->mem_now[d] += e->sc[st].act_bytes;
      if (e->mem_now[d] > e->mem_peak[d])
        e->mem_peak[d] = e->mem_now[d];
    } else if (a->kind == STRATA_ACTION_BACKWARD || a->kind == STRATA_ACTION_BACKWARD_WEIGHT) {
      e->mem_now[d] -= e->sc[st].act_bytes;
    }
  }
  if (a->kind == STRATA_ACTION_BACKWARD || a->kind == STRATA_ACTION_BACKWARD_WEIGHT) {
    e->bw_done[st]++;
    if (t1 > e->bw_last[st])
      e->bw_last[st] = t1;
  }
}

/* Run the engine to the end; STRATA_ERR_INVALID when the lists cannot finish. */
static int engine_run(struct engine *e) {
  for (int d = 0; d < e->P; d++)
    schedule_device(e, d);
  while (e->nheap > 0 && !e->failed) {
    struct heap_item it = heap_pop(e);
    const int d = it.dev;
    int n;
    if (it.gen >= 0) {
      /* a compute on host cores ends, unless a change of share moved its end since this entry */
      struct shared_run *r = &e->run[d];
      if (!r->on || it.gen != r->gen)
        continue;
      const struct strata_action *a = &strata_schedule_actions(e->s, d, &n)[e->next[d]];
      reshare(e, r->node, it.t, 1);
      r->on = 0;
      compute_done(e, d, a, r->t0, it.t + r->comm, r->comm);
      reshare(e, r->node, it.t, 0);
      e->next[d]++;
      schedule_device(e, d);
      continue;
    }
    const struct strata_action *a = &strata_schedule_actions(e->s, d, &n)[e->next[d]];
    const double t = it.t;
    const int st = a->stage, mb = a->microbatch;
    const size_t self = key(e, a->kind, st, mb);
    switch (a->kind) {
    case STRATA_ACTION_FORWARD:
    case STRATA_ACTION_BACKWARD:
    case STRATA_ACTION_BACKWARD_INPUT:
    case STRATA_ACTION_BACKWARD_WEIGHT:
    case STRATA_ACTION_OPTIMIZER: {
      double comm, dur = action_cost(e, a, &comm);
      if (a->kind == STRATA_ACTION_OPTIMIZER && e->next[d] == e->last_opt[d]) {
        if (e->arrive[self] < 0) {
          /* its norm is in; the updates wait for every stage's */
          e->arrive[self] = t;
          e->opt_max = t > e->opt_max ? t : e->opt_max;
          if (++e->opt_arrived == e->held)
            for (int x = 0; x < e->P; x++)
              wake(e, x);
          e->clock[d] = t;
          schedule_device(e, d);
          continue;
        }
        dur = opt_s(e, d);
      } else if (a->kind == STRATA_ACTION_OPTIMIZER) {
        e->opt_max = t > e->opt_max ? t : e->opt_max;
        if (++e->opt_arrived == e->held)
          for (int x = 0; x < e->P; x++)
            wake(e, x);
      }
      dur = comm + (dur - comm) * jitter(e, st); /* the compute strays as its device's does; the joins keep time */
      if (shares_cores(e, st)) {
        shared_start(e, d, st, t, dur - comm, comm); /* its end comes through the heap */
        continue;
      }
      compute_done(e, d, a, t, t + dur, comm);
      break;
    }
    case STRATA_ACTION_SEND_ACT:
    case STRATA_ACTION_SEND_GRAD: {
      /* buffered: the device goes on; its copy engine carries the data, the whole (joined) tensor, to every
      ** slice of the neighbouring stage that takes it from this one (itself, and those whose neighbour no
      ** device holds and this stage stands for); each arrival is kept under the receiver's neighbour */
      e->finish[self] = t;
      const int act = a->kind == STRATA_ACTION_SEND_ACT, peer = act ? st + 1 : st - 1;
      for (int x = 0; x < e->T; x++) {
        const int to = slice_stage(e, peer, x), from = act ? to - 1 : to + 1;
        if (!strata_schedule_stage_held(e->s, to) || strata_schedule_stage_owner(e->s, from) != st)
          continue;
        double dur = 0, end;
        if (e->unit) {
          dur = e->unit[a->kind];
          end = t + dur;
        } else {
          const struct stage_cost *c = &e->sc[st];
          const double bytes = act ? c->out_bytes : c->in_bytes;
          end = transfer(e, d, c->dev, e->sc[to].dev, bytes, t, &dur);
          trace(e, "send", a, NULL, 2 * d + 1, end - dur, end, bytes);
        }
        e->comm[d] += dur;
        e->arrive[key(e, a->kind, from, mb)] = end;
        wake(e, strata_schedule_stage_device(e->s, to));
      }
      break;
    }
    case STRATA_ACTION_RECV_ACT:
    case STRATA_ACTION_RECV_GRAD:
      e->finish[self] = t;
      trace(e, "recv", a, NULL, 2 * d, e->clock[d], t, 0);
      e->clock[d] = t;
      break;
    case STRATA_ACTION_GRAD_REDUCE:
    case STRATA_ACTION_GRAD_SCATTER:
    case STRATA_ACTION_PARAM_GATHER: {
      /* arrive; the collective runs on the communication stream once every replica has */
      const int ci = coll_slot(e, a->kind, st);
      e->finish[self] = -1;
      if (t > e->coll_max[ci])
        e->coll_max[ci] = t;
      if (++e->coll_count[ci] == e->Rdp) {
        double start = e->coll_max[ci];
        for (int r = 0; r < e->Rdp; r++) {
          int dv = strata_schedule_stage_device(e->s, peer_stage(e, st, r));
          if (e->comm_free[dv] > start)
            start = e->comm_free[dv];
        }
        double bytes, dur = collective_s(e, a->kind, st, &bytes), end = start + dur;
        e->coll_fin[ci] = end;
        for (int r = 0; r < e->Rdp; r++) {
          int sg = peer_stage(e, st, r), dv = strata_schedule_stage_device(e->s, sg);
          struct strata_action ra = {a->kind, sg, -1};
          e->comm_free[dv] = end;
          e->comm[dv] += dur;
          e->finish[key(e, a->kind, sg, -1)] = end;
          trace(e, "comm", &ra, a->kind == STRATA_ACTION_GRAD_REDUCE ? "allreduce"
                                : a->kind == STRATA_ACTION_GRAD_SCATTER ? "reducescatter" : "allgather",
                2 * dv + 1, start, end, bytes);
        }
        for (int r = 0; r < e->Rdp; r++)
          wake(e, strata_schedule_stage_device(e->s, peer_stage(e, st, r)));
      }
      e->clock[d] = t;
      break;
    }
    case STRATA_ACTION_TP_JOIN_FORWARD:
    case STRATA_ACTION_TP_JOIN_BACKWARD: {
      if (e->arrive[self] < 0) {
        /* arrive; the join runs once every slice of the stage has, and each slice waits for its end */
        e->arrive[self] = t;
        e->clock[d] = t;
        const size_t k0 = key(e, a->kind, slice_stage(e, st, 0), mb);
        const int slices = strata_schedule_stage_tp(e->s, st);
        e->tj_max[k0] = t > e->tj_max[k0] ? t : e->tj_max[k0];
        if (++e->tj_count[k0] == slices) {
          const int fwd = a->kind == STRATA_ACTION_TP_JOIN_FORWARD;
          double start = e->tj_max[k0];
          double dur = e->unit ? e->unit[a->kind] : fwd ? e->sc[st].tjf : e->sc[st].tjb;
          double bytes = e->unit ? 0 : fwd ? e->sc[st].tjf_bytes : e->sc[st].tjb_bytes;
          for (int x = 0; x < slices; x++) {
            int sg = slice_stage(e, st, x), dv = strata_schedule_stage_device(e->s, sg);
            struct strata_action ja = {a->kind, sg, mb};
            e->finish[key(e, a->kind, sg, mb)] = start + dur;
            e->comm[dv] += dur;
            trace(e, "comm", &ja, "allreduce", 2 * dv + 1, start, start + dur, bytes);
          }
          for (int x = 0; x < slices; x++)
            wake(e, strata_schedule_stage_device(e->s, slice_stage(e, st, x)));
        }
        schedule_device(e, d);
        continue;
      }
      e->clock[d] = t;
      break;
    }
    default: e->clock[d] = t; break; /* unknown kinds: a free synchronisation point (see ready) */
    }
    e->next[d]++;
    schedule_device(e, d);
    /* a device waiting on this one's stage for a same-device dependency never parks;
    ** the neighbours waiting for a transfer were woken above */
  }
  if (e->failed)
    return strata__error(STRATA_ERR_NOMEM, "simulator: out of host memory");
  for (int d = 0; d < e->P; d++) {
    int n;
    const struct strata_action *l = strata_schedule_actions(e->s, d, &n);
    if (e->next[d] < n)
      return strata__error(STRATA_ERR_INVALID, "simulator: dev %d cannot run #%d %s%d.%d: the lists do not finish", d,
                           e->next[d], strata_action_label(l[e->next[d]].kind), l[e->next[d]].stage,
                           l[e->next[d]].microbatch);
  }
  return STRATA_OK;
}

static void engine_free(struct engine *e) {
  free(e->finish);
  free(e->arrive);
  free(e->clock);
  free(e->sender_free);
  free(e->comm_free);
  free(e->compute);
  free(e->comm);
  free(e->mem_now);
  free(e->mem_peak);
  free(e->next);
  free(e->parked);
  free(e->bw_done);
  free(e->bw_last);
  free(e->coll_count);
  free(e->coll_max);
  free(e->coll_fin);
  free(e->tj_count);
  free(e->tj_max);
  free(e->last_opt);
  free(e->run);
  free(e->res_free);
  free(e->heap);
  free(e->ev);
}

static int engine_init(struct engine *e, strata_schedule_t s, const struct strata_machine *c) {
  e->s = s;
  e->P = strata_schedule_devices(s);
  e->S = strata_schedule_stages(s);
  e->M = strata_schedule_microbatches(s);
  e->T = strata_schedule_tp(s);
  e->Rdp = strata_schedule_replicas(s);
  e->R = e->Rdp * e->T;
  e->chain = e->S / e->R;
  e->c = c;
  for (int g = 0; g < e->S; g++)
    e->held += strata_schedule_stage_held(s, g);
  size_t keys = (size_t)STRATA_ACTION_KIND_COUNT * (size_t)e->S * (size_t)(e->M + 1), P = (size_t)e->P;
  size_t res = c ? (size_t)c->nodes * ((size_t)c->k + 2 * (size_t)c->nics) : 1;
  e->finish = malloc(keys * sizeof *e->finish);
  e->arrive = malloc(keys * sizeof *e->arrive);
  e->clock = calloc(P, sizeof *e->clock);
  e->sender_free = calloc(P, sizeof *e->sender_free);
  e->comm_free = calloc(P, sizeof *e->comm_free);
  e->compute = calloc(P, sizeof *e->compute);
  e->comm = calloc(P, sizeof *e->comm);
  e->mem_now = calloc(P, sizeof *e->mem_now);
  e->mem_peak = calloc(P, sizeof *e->mem_peak);
  e->next = calloc(P, sizeof *e->next);
  e->parked = calloc(P, sizeof *e->parked);
  e->bw_done = calloc((size_t)e->S, sizeof *e->bw_done);
  e->bw_last = calloc((size_t)e->S, sizeof *e->bw_last);
  const size_t slots = 3 * (size_t)e->T * (size_t)e->chain;
  e->coll_count = calloc(slots, sizeof *e->coll_count);
  e->coll_max = calloc(slots, sizeof *e->coll_max);
  e->coll_fin = malloc(slots * sizeof *e->coll_fin);
  e->tj_count = calloc(keys, sizeof *e->tj_count);
  e->tj_max = calloc(keys, sizeof *e->tj_max);
  e->last_opt = malloc(P * sizeof *e->last_opt);
  if (c && c->cpu_cores > 0)
    e->run = calloc(P, sizeof *e->run);
  e->res_free = calloc(res, sizeof *e->res_free);
  if (!e->finish || !e->arrive || !e->clock || !e->sender_free || !e->comm_free || !e->compute || !e->comm ||
      !e->mem_now || !e->mem_peak || !e->next || !e->parked || !e->bw_done || !e->bw_last || !e->coll_count ||
      !e->coll_max || !e->coll_fin || !e->res_free || !e->tj_count || !e->tj_max || !e->last_opt ||
      (c && c->cpu_cores > 0 && !e->run)) {
    engine_free(e);
    return strata__error(STRATA_ERR_NOMEM, "simulator: out of host memory for %d devices and %d stages", e->P, e->S);
  }
  for (size_t i = 0; i < keys; i++)
    e->finish[i] = e->arrive[i] = -1;
  for (size_t i = 0; i < slots; i++)
    e->coll_fin[i] = -1;
  for (int d = 0; d < e->P; d++) {
    int n;
    const struct strata_action *l = strata_schedule_actions(s, d, &n);
    e->last_opt[d] = -1;
    for (int i = 0; i < n; i++)
      if (l[i].kind == STRATA_ACTION_OPTIMIZER)
        e->last_opt[d] = i;
  }
  return STRATA_OK;
}

/* When a finished engine's step ends: its last device's last action, send or collective. */
static double engine_end(const struct engine *e) {
  double end = 0;
  for (int d = 0; d < e->P; d++) {
    if (e->clock[d] > end)
      end = e->clock[d];
    if (e->comm_free[d] > end)
      end = e->comm_free[d];
    if (e->sender_free[d] > end)
      end = e->sender_free[d];
  }
  return end;
}

/* Fill the figures every simulation gives from a finished engine. */
static int engine_result(const struct engine *e, struct strata_sim_result *out) {
  memset(out, 0, sizeof *out);
  out->devices = e->P;
  out->busy = calloc((size_t)e->P, sizeof *out->busy);
  out->memory = calloc((size_t)e->P, sizeof *out->memory);
  if (!out->busy || !out->memory) {
    strata_sim_result_destroy(out);
    return strata__error(STRATA_ERR_NOMEM, "simulator: out of host memory");
  }
  double end = engine_end(e), work = 0, comm = 0;
  for (int d = 0; d < e->P; d++) {
    work += e->compute[d];
    comm += e->comm[d];
    out->busy[d] = end > 0 ? e->compute[d] / end : 0;
  }
  out->step_s = out->step_lo_s = out->step_hi_s = end;
  out->samples = 1;
  out->bubble = end > 0 ? 1.0 - work / ((double)e->P * end) : 0.0;
  out->comm_share = work + comm > 0 ? comm / (work + comm) : 0.0;
  out->fits = 1;
  return STRATA_OK;
}

STRATA_API void strata_sim_result_destroy(struct strata_sim_result *r) {
  if (!r)
    return;
  free(r->busy);
  free(r->memory);
  r->busy = NULL;
  r->memory = NULL;
}

STRATA_API int strata_simulate_schedule(strata_schedule_t s, const double *cost, struct strata_sim_result *out) {
  if (!s || !out)
    return strata__error(STRATA_ERR_INVALID, "strata_simulate_schedule: NULL argument");
  TRY(strata_schedule_validate(s));
  double unit[STRATA_ACTION_KIND_COUNT] = {0};
  unit[STRATA_ACTION_FORWARD] = 1;
  unit[STRATA_ACTION_BACKWARD] = 2;
  unit[STRATA_ACTION_BACKWARD_INPUT] = 1;
  unit[STRATA_ACTION_BACKWARD_WEIGHT] = 1;
  struct engine e;
  memset(&e, 0, sizeof e);
  TRY(engine_init(&e, s, NULL));
  e.unit = cost ? cost : unit;
  e.dp = e.R;
  int rc = engine_run(&e);
  if (!rc)
    rc = engine_result(&e, out);
  engine_free(&e);
  return rc;
}

/* The trace in the executor's format (lib/train/trace.c strata__trace_write): a compute
** and a transfers thread per device, complete events in microseconds, idle gaps. */
static int write_trace(const struct engine *e, strata_layout_t l, const char *path) {
  struct strata__out o;
  TRY(strata__out_open(&o, path));
  FILE *f = strata__out_stream(&o);
  if (!f) {
    strata__out_abort(&o);
    return strata__error_prefix(STRATA_ERR_NOMEM, "cannot write the trace: ");
  }
  fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
  const int pp = strata_layout_pp(l);
  (void)pp;
  for (int r = 0; r < e->P; r++) {
    int dev = 0;
    for (int g = 0; g < e->S; g++)
      if (strata_schedule_stage_device(e->s, g) == r) {
        dev = e->sc[g].dev;
        break;
      }
    const char *name = e->c->names[dev % e->c->k];
    fprintf(f,
            "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, \"args\": {\"name\": \"device %d "
            "(%s) compute\"}},\n",
            2 * r, dev, name);
    fprintf(f,
            "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, \"args\": {\"name\": \"device %d "
            "(%s) transfers\"}},\n",
            2 * r + 1, dev, name);
  }
  double end = 0;
  for (int d = 0; d < e->P; d++)
    end = e->clock[d] > end ? e->clock[d] : end;
  int first = 1;
  for (size_t i = 0; i < e->nev; i++) {
    const struct event *v = &e->ev[i];
    fprintf(f, "%s{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": 0, \"tid\": %d, \"ts\": %.3f, "
               "\"dur\": %.3f, \"args\": {\"step\": 1",
            first ? "" : ",\n", v->name, v->cat, v->tid, v->ts, v->dur);
    if (v->op)
      fprintf(f, ", \"collective\": \"%s\", \"bytes\": %.0f, \"group\": []", v->op, v->bytes);
    fprintf(f, ", \"predicted\": true}}");
    first = 0;
  }
  /* idle: the gaps between a device's compute and receive events */
  for (int d = 0; d < e->P; d++) {
    double last = 0;
    for (size_t i = 0; i < e->nev; i++) {
      const struct event *v = &e->ev[i];
      if (v->tid != 2 * d)
        continue;
      if (v->ts > last + 1e-3)
        fprintf(f, "%s{\"name\": \"idle\", \"cat\": \"idle\", \"ph\": \"X\", \"pid\": 0, \"tid\": %d, \"ts\": %.3f, "
                   "\"dur\": %.3f, \"args\": {\"step\": 1, \"predicted\": true}}",
                first ? "" : ",\n", 2 * d, last, v->ts - last);
      first = 0;
      last = v->ts + v->dur;
    }
    if (end * 1e6 > last + 1e-3)
      fprintf(f, "%s{\"name\": \"idle\", \"cat\": \"idle\", \"ph\": \"X\", \"pid\": 0, \"tid\": %d, \"ts\": %.3f, "
                 "\"dur\": %.3f, \"args\": {\"step\": 1, \"predicted\": true}}",
              first ? "" : ",\n", 2 * d, last, end * 1e6 - last);
    first = 0;
  }
  fprintf(f, "\n]}\n");
  return strata__out_commit(&o);
}

/* Each device's memory at the step's start: its stages' parameters, gradients and optimizer state. */
static void start_memory(struct engine *e) {
  for (int g = 0; g < e->S; g++) {
    int d = strata_schedule_stage_device(e->s, g);
    e->mem_now[d] += e->sc[g].static_bytes; /* 0 for a stage no device holds */
    e->mem_peak[d] = e->mem_now[d];
  }
}

/* Whether a device that holds one of the S stages has a spread to draw from. */
static int has_spread(const struct strata_machine *c, const struct stage_cost *sc, int S) {
  for (int g = 0; g < S; g++)
    if (c->cost[sc[g].dev % c->k].nspread > 0)
      return 1;
  return 0;
}

/* The seed of sample k's draws. */
static uint64_t sample_seed(uint64_t seed, int k) { return seed ^ (0xd1b54a32d192ed03ULL * (uint64_t)(k + 1)); }

/*
** Run `samples` steps of the engine `proto` describes (its schedule, machine and stage costs; it has not run),
** each compute action's time drawn from its device's spread; set proto to draw as the step of the median time
** does (the lower middle of an even count), and give the fastest and the slowest.
*/
struct sample {
  double t;
  int k;
};
static int by_time(const void *a, const void *b) {
  const struct sample *x = a, *y = b;
  return x->t < y->t ? -1 : x->t > y->t ? 1 : x->k - y->k;
}

static int sample_steps(struct engine *proto, int samples, uint64_t seed, double *lo, double *hi) {
  struct sample *t = malloc((size_t)samples * sizeof *t);
  if (!t)
    return strata__error(STRATA_ERR_NOMEM, "simulator: out of host memory for %d samples", samples);
  int rc = STRATA_OK;
  for (int k = 0; k < samples && !rc; k++) {
    struct engine x;
    memset(&x, 0, sizeof x);
    rc = engine_init(&x, proto->s, proto->c);
    if (rc)
      break;
    x.dp = proto->dp;
    x.sc = proto->sc;
    x.draws = 1;
    x.rng = sample_seed(seed, k);
    start_memory(&x);
    rc = engine_run(&x);
    t[k] = (struct sample){engine_end(&x), k};
    engine_free(&x);
  }
  if (!rc) {
    qsort(t, (size_t)samples, sizeof *t, by_time);
    *lo = t[0].t;
    *hi = t[samples - 1].t;
    proto->draws = 1;
    proto->rng = sample_seed(seed, t[(samples - 1) / 2].k);
  }
  free(t);
  return rc;
}

STRATA_API int strata_simulate(strata_machine_t c, strata_model_t model, strata_layout_t l,
                               const struct strata_sim_options *o, struct strata_sim_result *out) {
  if (!c || !model || !l || !o || !out)
    return strata__error(STRATA_ERR_INVALID, "strata_simulate: NULL argument");
  memset(out, 0, sizeof *out);
  const int dp = strata_layout_dp(l), pp = strata_layout_pp(l), S = strata_layout_stages(l);
  const int m = strata_layout_microbatches(l), v = strata_layout_virtual_stages(l);
  const int ndev = strata_machine_device_count(c);
  TRY(strata_layout_check(l, model, ndev));
  if (o->batch < 1 || o->batch % ((int64_t)dp * m))
    return strata__error(STRATA_ERR_INVALID, "batch %lld is not a multiple of dp %d x %d micro-batches",
                         (long long)o->batch, dp, m);
  const int64_t rows = o->batch / ((int64_t)dp * m);
  int *split = malloc(sizeof *split * (size_t)S);
  if (!split)
    return strata__error(STRATA_ERR_NOMEM, "simulator: out of host memory");
  int rc = STRATA_OK;
  if (strata_layout_split(l))
    memcpy(split, strata_layout_split(l), sizeof *split * (size_t)S);
  else
    rc = balanced_split(model, S, split);
  /* symmetric: two replicas stand for all, the collectives still span dp */
  const int R = o->symmetric && dp > 2 ? 2 : dp;
  /* the executor's own lists (strata_schedule_generate_hybrid_ranks for a tp degree per rank): a slice per
  ** device and its joins as TP_JOIN actions. Symmetric mode on one degree over groups of like devices runs one
  ** slice for all: the slices reach every join at one time, so the join ends its cost after either's arrival,
  ** as in the lists of all slices. */
  int *tps = malloc(sizeof *tps * (size_t)pp);
  if (!tps)
    rc = strata__error(STRATA_ERR_NOMEM, "simulator: out of host memory");
  int uniform = 1;
  for (int r = 0; tps && r < pp; r++) {
    tps[r] = strata_layout_tp(l, r);
    uniform &= tps[r] == tps[0];
  }
  const int inline_joins = tps && uniform && o->symmetric && tps[0] > 1 && groups_alike(c, l, R);
  if (inline_joins)
    tps[0] = 1;
  strata_schedule_t s = NULL;
  if (!rc && uniform)
    rc = strata_schedule_generate_hybrid(strata_layout_schedule(l), pp, m, v, R, tps[0], strata_layout_zero(l), &s);
  else if (!rc)
    rc = strata_schedule_generate_hybrid_ranks(strata_layout_schedule(l), pp, m, v, R, tps, strata_layout_zero(l),
                                               &s);
  free(tps);
  const int T = s ? strata_schedule_tp(s) : 1;
  struct engine e;
  memset(&e, 0, sizeof e);
  int inited = 0;
  if (!rc && (rc = engine_init(&e, s, c)) == STRATA_OK)
    inited = 1;
  if (!rc) {
    e.dp = dp;
    e.tracing = o->trace != NULL;
    e.sc = calloc((size_t)e.S, sizeof *e.sc);
    if (!e.sc)
      rc = strata__error(STRATA_ERR_NOMEM, "simulator: out of host memory");
  }
  for (int g = 0; !rc && g < e.S; g++) {
    /* schedule stage g: chain g / S (replica, slice), virtual stage j on rank j % pp */
    const int ch = g / S, rep = ch / T, slice = ch % T, j = g % S, rank = j % pp;
    struct stage_cost *sc = &e.sc[g];
    sc->tp = group_of(l, rep, rank, &sc->devs);
    if (!strata_schedule_stage_held(s, g)) {
      sc->dev = sc->devs[slice % sc->tp]; /* no device holds it: the slice that stands for it does its work */
      continue;
    }
    const int t = sc->tp, a = stage_first(split, j);
    /* the device whose costs this stage's actions take: the slice's own, or the group's slowest */
    struct strata_device_cost w = inline_joins ? group_cost(c, sc->devs, t) : c->cost[sc->devs[slice] % c->k];
    sc->dev = sc->devs[inline_joins ? 0 : slice];
    sc->threads = c->cpu_cores > 0 ? c->cost[sc->dev % c->k].cpu_threads : 0;
    double params = 0, act = 0, jf = 0, jb = 0;
    int nf = 0, nb = 0;
    for (int li = a; li < a + split[j]; li++) {
      struct strata_layer_info info;
      strata_model_layer(model, li, &info);
      struct work f = layer_part(&w, model, t, li, rows, PART_FWD), b = layer_part(&w, model, t, li, rows, PART_FULL);
      struct work bi = layer_part(&w, model, t, li, rows, PART_INPUT), bw = layer_part(&w, model, t, li, rows, PART_WEIGHT);
      sc->f += f.s;
      sc->b += b.s;
      sc->bi += bi.s;
      sc->w += bw.s;
      jf += f.join_bytes, nf += f.joins;
      jb += b.join_bytes, nb += b.joins;
      params += (double)info.params;
      act += (double)info.act_bytes;
      if (li == a + split[j] - 1)
        sc->out_bytes = (double)info.out_bytes * (double)rows;
    }
    /* each action ends waiting for its work: one round trip of the device's queue; one that waits on another
    ** device's message (a forward after the first stage, a backward before the last) pays what the executor's
    ** threads add around such a hand-off besides */
    const double sync = w.sync_us * 1e-6, hand = w.action_us * 1e-6;
    sc->f += sync + (j > 0 ? hand : 0), sc->w += sync;
    sc->b += sync + (j < S - 1 ? hand : 0), sc->bi += sync + (j < S - 1 ? hand : 0);
    const double tjf = joins_s(c, sc->devs, jf, nf, t), tjb = joins_s(c, sc->devs, jb, nb, t);
    if (inline_joins) {
      sc->f += tjf, sc->f_comm = tjf;
      sc->b += tjb, sc->b_comm = tjb;
      sc->bi += tjb, sc->bi_comm = tjb;
    } else {
      sc->tjf = tjf, sc->tjf_bytes = jf;
      sc->tjb = tjb, sc->tjb_bytes = jb;
    }
    if (a > 0) {
      struct strata_layer_info prev;
      strata_model_layer(model, a - 1, &prev);
      sc->in_bytes = (double)prev.out_bytes * (double)rows; /* the gradient of this stage's input */
    }
    int zero = strata_layout_zero(l) && dp > 1;
    /* the update and the norm's sums, each waited for */
    sc->opt = op_s(&w, STRATA_PLAN_OP_ADAMW, params / t / (zero ? dp : 1)) + 8 * w.launch_us * 1e-6 +
              2 * w.sync_us * 1e-6;
    sc->grad_bytes = 4.0 * params / t;
    /* what a micro-batch in flight holds: the activations its backward reads, and the stage's output */
    sc->act_bytes = (act / t) * (double)rows + sc->out_bytes;
    sc->static_bytes = static_bytes(params, t, dp, strata_layout_zero(l));
    sc->capacity = inline_joins ? w.memory : c->cost[sc->dev % c->k].memory;
  }
  /* with samples: that many steps with their draws, then the median one again for the figures and the trace */
  double lo = 0, hi = 0;
  int samples = 1;
  if (!rc && o->samples > 1 && has_spread(c, e.sc, e.S)) {
    samples = o->samples;
    rc = sample_steps(&e, samples, o->seed, &lo, &hi);
  }
  if (!rc) {
    start_memory(&e);
    rc = engine_run(&e);
  }
  if (!rc)
    rc = engine_result(&e, out);
  if (!rc && samples > 1) {
    out->step_lo_s = lo;
    out->step_hi_s = hi;
    out->samples = samples;
  }
  if (!rc) {
    const struct strata_model_config *cfg = strata_model_config(model);
    out->samples_per_s = out->step_s > 0 ? (double)o->batch / out->step_s : 0;
    out->tokens_per_s = out->samples_per_s * (cfg->kind == STRATA_MODEL_GPT ? (double)cfg->context : 1.0);
    out->flops_per_device = out->samples_per_s * strata_model_flops(model) / strata_layout_device_count(l);
    for (int d = 0; d < e.P; d++) {
      uint64_t cap = UINT64_MAX;
      for (int g = 0; g < e.S; g++)
        if (strata_schedule_stage_device(s, g) == d && strata_schedule_stage_held(s, g) && e.sc[g].capacity < cap)
          cap = e.sc[g].capacity;
      out->memory[d] = (uint64_t)e.mem_peak[d];
      if (out->memory[d] > out->peak_bytes)
        out->peak_bytes = out->memory[d];
      if ((double)out->memory[d] > (double)cap * STRATA_PLAN_MEMORY_USABLE)
        out->fits = 0;
    }
    if (o->trace)
      rc = write_trace(&e, l, o->trace);
    if (rc)
      strata_sim_result_destroy(out);
  }
  if (inited) {
    free(e.sc);
    engine_free(&e);
  }
  strata_schedule_free(s);
  free(split);
  return rc;
}
