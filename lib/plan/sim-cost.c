/* SPDX-License-Identifier: MIT */
/* sim-cost.c — the simulator's cost of pieces: a layer's parts op by op on a device's measured or nominal speeds, a tp group's slowest member and its joins over the machine's links. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

/* The same in bf16 (strata__plan_cost_in): activations, their gradients and the attention scores are stored
** bfloat16 (2 bytes), the ops' sums in float32 registers; AdamW's parameters, gradients and moments stay float32
** and it writes the bf16 copy of the weights besides (2 more). */
static const double op_bytes_bf16[STRATA_PLAN_OP_COUNT] = {
    [STRATA_PLAN_OP_ADD] = 6, [STRATA_PLAN_OP_GELU_FWD] = 4, [STRATA_PLAN_OP_GELU_BWD] = 6,
    [STRATA_PLAN_OP_LAYERNORM_FWD] = 4, [STRATA_PLAN_OP_LAYERNORM_BWD] = 8, [STRATA_PLAN_OP_SOFTMAX_FWD] = 4,
    [STRATA_PLAN_OP_SOFTMAX_BWD] = 6, [STRATA_PLAN_OP_ADAMW] = 38, [STRATA_PLAN_OP_BIAS_ADD] = 4,
    [STRATA_PLAN_OP_BIAS_GRAD] = 2};

struct strata_device_cost strata__plan_cost_in(const struct strata_device_cost *w, int precision) {
  struct strata_device_cost b = *w;
  if (precision != STRATA_BFLOAT16)
    return b;
  b.flops = w->bf16_flops;
  b.ngemm = w->bf16_ngemm;
  b.gemm_elem_bytes = w->gemm_elem_bytes > 0 ? 2 : 0; /* a table row's GEMMs move bf16 operands */
  memcpy(b.gemm_n, w->bf16_gemm_n, sizeof b.gemm_n);
  memcpy(b.gemm_flops, w->bf16_gemm_flops, sizeof b.gemm_flops);
  /* a model's own GEMMs were timed in fp32: the bf16 speeds by size stand for them */
  b.nshapes = 0;
  b.shapes = NULL;
  /* ops costed by their bytes move bf16 ones; measured op speeds (timed in fp32) are kept as they are. The
  ** bias ops of an older calibration fall back to its add (strata__plan_op_s), so they are left alone there. */
  for (int k = 0; k < STRATA_PLAN_OP_COUNT; k++) {
    const int bias = k == STRATA_PLAN_OP_BIAS_ADD || k == STRATA_PLAN_OP_BIAS_GRAD;
    if (w->op_ns[k] == 0 && !(bias && w->op_ns[STRATA_PLAN_OP_ADD] > 0))
      b.op_ns[k] = op_bytes_bf16[k] / w->mem_gbps; /* bytes / (GB/s) = ns */
  }
  return b;
}

int strata__plan_group_of(strata_layout_t l, int replica, int rank, const int **devs) {
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
    double pair = strata__machine_pair_allreduce(c, a, b, 2.0 * bytes / n / 4);
    worst = pair > worst ? pair : worst;
  }
  return (n - 1) * worst;
}

struct strata_device_cost strata__plan_group_cost(const struct strata_machine *c, const int *devs, int t) {
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
  const double t = flops / gemm_rate(w, m, n, k);
  if (w->gemm_elem_bytes <= 0 || w->ngemm > 0 || w->mem_gbps <= 0)
    return t; /* measured speeds: their memory traffic is in them */
  /* a GPU of the table (a datasheet's peak): no faster than its operands and result at the memory bandwidth (the
  ** roofline; Williams, Waterman and Patterson, CACM 2009), which binds the attention's products over a head's
  ** few columns (k = d_model / heads) */
  const double eb = w->gemm_elem_bytes;
  const double bytes = batch * eb * (m * k + k * n + m * n);
  const double tm = bytes / (w->mem_gbps * 1e9);
  return tm > t ? tm : t;
}

double strata__plan_op_s(const struct strata_device_cost *w, int op, double elems) {
  if (w->op_ns[op] > 0)
    return elems * w->op_ns[op] * 1e-9;
  if ((op == STRATA_PLAN_OP_BIAS_ADD || op == STRATA_PLAN_OP_BIAS_GRAD) && w->op_ns[STRATA_PLAN_OP_ADD] > 0)
    return elems * w->op_ns[STRATA_PLAN_OP_ADD] * 1e-9;
  return elems * op_bytes[op] / (w->mem_gbps * 1e9);
}

/* Seconds of row op `op` over `elems` elements in `rows` rows: per element, and per row where measured so. */
static double rows_s(const struct strata_device_cost *w, int op, double elems, double rows) {
  return strata__plan_op_s(w, op, elems) + rows * w->op_row_ns[op] * 1e-9;
}

/*
** One part of a GPT layer (embedding, block, head) on slice-sized
** matrices of a t-way tensor-parallel stage for `rows` samples, op by op as
** lib/model/layers.c runs them: the GEMMs at the speed calibrated for their size,
** the row and elementwise ops (layernorm, softmax, GELU, biases, residual
** adds, copies) at theirs, a launch each; and the joins (all-reduces of the
** slices' partial sums) that part posts: a block joins rows x context x
** d_model floats twice in its forward and twice in its input gradient; a
** vocabulary-split embedding once in its forward; a vocabulary-split head
** its rows' max and sums (3 floats a row, two joins) forward and its input
** gradient (rows x d_model) backward.
*/
static struct strata__plan_work gpt_part(const struct strata_device_cost *w, const struct strata_model_config *cfg,
                                         const struct strata_layer_info *li, int t, int64_t rows,
                                         enum strata__plan_part part) {
  const int fold = part == STRATA__PLAN_PART_INPUT_FOLD || part == STRATA__PLAN_PART_WEIGHT_FOLD,
            fold_bi = part == STRATA__PLAN_PART_INPUT_FOLD;
  if (fold)
    part = fold_bi ? STRATA__PLAN_PART_INPUT : STRATA__PLAN_PART_WEIGHT;
  const double B = (double)rows, T = (double)cfg->context, D = (double)cfg->d_model, N = B * T;
  const double A = D / t, Ft = (double)cfg->d_ff / t, H = (double)cfg->heads, Ht = H / t, hd = D / H;
  const int vp = t > 1 && cfg->vocab % t == 0;
  const double Vt = vp ? (double)cfg->vocab / t : (double)cfg->vocab;
  const int in = part == STRATA__PLAN_PART_FWD ? 0 : part != STRATA__PLAN_PART_WEIGHT,
            wt = part == STRATA__PLAN_PART_WEIGHT || part == STRATA__PLAN_PART_FULL;
  const int split = part == STRATA__PLAN_PART_INPUT || part == STRATA__PLAN_PART_WEIGHT;
  double s = 0, launches = 0, jb = 0;
  int joins = 0;
  if (part == STRATA__PLAN_PART_CORE) { /* a block's scores and their softmax, a sequence's heads in one call */
    if (strcmp(li->type, "block") == 0)
      s += gemm_s(w, 0, 1, T, T, hd, Ht) * B + rows_s(w, STRATA_PLAN_OP_SOFTMAX_FWD, B * Ht * T * T, B * Ht * T),
          launches += B + 1;
    return (struct strata__plan_work){s + launches * w->launch_us * 1e-6, 0, 0};
  }
  if (strcmp(li->type, "embed") == 0) {
    if (part == STRATA__PLAN_PART_FWD) {
      s += strata__plan_op_s(w, STRATA_PLAN_OP_ADD, 3 * N * D + (vp ? N : 0)); /* two lookups and their sum */
      launches += 3 + vp;
      if (vp)
        jb += N * D * 4, joins++;
    }
    if (split)
      s += strata__plan_op_s(w, STRATA_PLAN_OP_ADD, N * D), launches++; /* the input part keeps the output gradient */
    if (wt)
      s += strata__plan_op_s(w, STRATA_PLAN_OP_ADD, 2 * N * D + (vp ? N : 0)), launches += 2 + vp;
  } else if (strcmp(li->type, "block") == 0) {
    if (part == STRATA__PLAN_PART_FWD) {
      s += gemm_s(w, 0, 0, N, 3 * A, D, 1) + gemm_s(w, 0, 0, N, D, A, 1) + gemm_s(w, 0, 0, N, Ft, D, 1) +
           gemm_s(w, 0, 0, N, D, Ft, 1);
      /* scores and their product with V, a head at a time (a sequence's heads in one call) */
      s += gemm_s(w, 0, 1, T, T, hd, Ht) * B + gemm_s(w, 0, 0, T, hd, T, Ht) * B;
      /* the biases of c_attn, c_proj, c_fc and c_proj (a row-split matrix's after the join), two residuals */
      s += strata__plan_op_s(w, STRATA_PLAN_OP_LAYERNORM_FWD, 2 * N * D) +
           rows_s(w, STRATA_PLAN_OP_SOFTMAX_FWD, B * Ht * T * T, B * Ht * T) +
           strata__plan_op_s(w, STRATA_PLAN_OP_GELU_FWD, N * Ft) +
           strata__plan_op_s(w, STRATA_PLAN_OP_BIAS_ADD, N * (3 * A + Ft + 2 * D)) +
           strata__plan_op_s(w, STRATA_PLAN_OP_ADD, N * 2 * D);
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
      s += strata__plan_op_s(w, STRATA_PLAN_OP_GELU_BWD, N * Ft) +
           rows_s(w, STRATA_PLAN_OP_SOFTMAX_BWD, B * Ht * T * T, B * Ht * T) +
           strata__plan_op_s(w, STRATA_PLAN_OP_ADD, 2 * N * D);
      launches += 8 + 4 * B;
      if (t > 1)
        jb += 2 * N * D * 4, joins += 2;
    }
    if (wt && !fold) {
      s += gemm_s(w, 1, 0, Ft, D, N, 1) + gemm_s(w, 1, 0, D, Ft, N, 1) + gemm_s(w, 1, 0, A, D, N, 1) +
           gemm_s(w, 1, 0, D, 3 * A, N, 1);
      /* (and the GELU output, not kept: recomputed from the pre-activation for the MLP c_proj's weight gradient) */
      s += strata__plan_op_s(w, STRATA_PLAN_OP_BIAS_GRAD, N * (2 * D + Ft + 3 * A)) +
           strata__plan_op_s(w, STRATA_PLAN_OP_GELU_FWD, N * Ft);
      launches += 9;
    }
    if (fold_bi) /* folded: the MLP c_proj's weight gradient in BI, and dh and dqkv copied over h and Q|K|V */
      s += gemm_s(w, 1, 0, Ft, D, N, 1) + strata__plan_op_s(w, STRATA_PLAN_OP_BIAS_GRAD, N * D) +
           strata__plan_op_s(w, STRATA_PLAN_OP_GELU_FWD, N * Ft) +
           strata__plan_op_s(w, STRATA_PLAN_OP_ADD, N * (Ft + 3 * A)),
          launches += 5;
    else if (fold) /* folded W: the other three */
      s += gemm_s(w, 1, 0, D, Ft, N, 1) + gemm_s(w, 1, 0, A, D, N, 1) + gemm_s(w, 1, 0, D, 3 * A, N, 1) +
           strata__plan_op_s(w, STRATA_PLAN_OP_BIAS_GRAD, N * (D + Ft + 3 * A)),
          launches += 6;
    if (part != STRATA__PLAN_PART_FWD && !(fold && !fold_bi)) /* both layernorms' backward, by each part when split
                                                              ** (folded: BI's alone) */
      s += strata__plan_op_s(w, STRATA_PLAN_OP_LAYERNORM_BWD, 2 * N * D), launches += 2;
    if (split && !fold)
      s += strata__plan_op_s(w, STRATA_PLAN_OP_ADD, N * D), launches++;
  } else { /* lm_head */
    if (part == STRATA__PLAN_PART_FWD) {
      s += strata__plan_op_s(w, STRATA_PLAN_OP_LAYERNORM_FWD, N * D) + gemm_s(w, 0, 1, N, Vt, D, 1) +
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
    if (part != STRATA__PLAN_PART_FWD && !(fold && !fold_bi)) /* (folded: BI's alone) */
      s += strata__plan_op_s(w, STRATA_PLAN_OP_LAYERNORM_BWD, N * D), launches++;
    if (split) /* (folded: BI copies dlogits over the logits) */
      s += fold && !fold_bi ? 0 : strata__plan_op_s(w, STRATA_PLAN_OP_ADD, fold ? N * Vt : N * (D + Vt)), launches++;
  }
  return (struct strata__plan_work){s + launches * w->launch_us * 1e-6, jb, joins};
}

/*
** One part of a llama layer on a t-way slice, op by op as lib/model/layers.c
** runs a llama block: q (A = d_model / t wide), k and v (Akv = n_kv_heads
** hd / t each; t above n_kv_heads, one replicated head: hd, and the k/v
** weight gradients joined over the slices, 2 n_kv_heads hd d_model floats
** in the weight part), o, gate, up and down as GEMMs; the fused attention's scores
** and products (Ht query heads) costed as GPT's are; RMSNorm at the
** layernorm's speed, SwiGLU at GELU's, RoPE (q and k) and the residuals at
** the add's; the joins as a GPT block's (two of rows x context x d_model
** floats forward, two in the input gradient). Its embedding (one lookup,
** no positions) and head (RMSNorm, GEMM, cross-entropy) cost as GPT's.
*/
static struct strata__plan_work llama_part(const struct strata_device_cost *w, const struct strata_model_config *cfg,
                                           const struct strata_layer_info *li, int t, int64_t rows,
                                           enum strata__plan_part part) {
  if (strcmp(li->type, "block") != 0 || part == STRATA__PLAN_PART_CORE)
    return gpt_part(w, cfg, li, t, rows, part); /* (the embedding's second lookup: a small overcount) */
  const int fold = part == STRATA__PLAN_PART_INPUT_FOLD || part == STRATA__PLAN_PART_WEIGHT_FOLD,
            fold_bi = part == STRATA__PLAN_PART_INPUT_FOLD;
  if (fold)
    part = fold_bi ? STRATA__PLAN_PART_INPUT : STRATA__PLAN_PART_WEIGHT;
  const double B = (double)rows, T = (double)cfg->context, D = (double)cfg->d_model, N = B * T;
  const int rep = t > cfg->kv_heads; /* key/value heads replicated over t / n_kv_heads slices */
  const double H = (double)cfg->heads, hd = D / H, Ht = H / t, A = D / t,
               Akv = rep ? hd : (double)cfg->kv_heads * hd / t,
               Ft = (double)cfg->d_ff / t;
  const int in = part == STRATA__PLAN_PART_FWD ? 0 : part != STRATA__PLAN_PART_WEIGHT,
            wt = part == STRATA__PLAN_PART_WEIGHT || part == STRATA__PLAN_PART_FULL;
  const int split = part == STRATA__PLAN_PART_INPUT || part == STRATA__PLAN_PART_WEIGHT;
  double s = 0, launches = 0, jb = 0;
  int joins = 0;
  if (part == STRATA__PLAN_PART_FWD) {
    s += gemm_s(w, 0, 0, N, A, D, 1) + 2 * gemm_s(w, 0, 0, N, Akv, D, 1) + gemm_s(w, 0, 0, N, D, A, 1) +
         2 * gemm_s(w, 0, 0, N, Ft, D, 1) + gemm_s(w, 0, 0, N, D, Ft, 1);
    s += gemm_s(w, 0, 1, T, T, hd, Ht) * B + gemm_s(w, 0, 0, T, hd, T, Ht) * B;
    s += strata__plan_op_s(w, STRATA_PLAN_OP_LAYERNORM_FWD, 2 * N * D) +
         rows_s(w, STRATA_PLAN_OP_SOFTMAX_FWD, B * Ht * T * T, B * Ht * T) +
         strata__plan_op_s(w, STRATA_PLAN_OP_GELU_FWD, N * Ft) +
         strata__plan_op_s(w, STRATA_PLAN_OP_ADD, N * (2 * D + A + Akv));
    launches += 14 + 2 * B;
    if (t > 1)
      jb += 2 * N * D * 4, joins += 2;
  }
  if (in) {
    s += gemm_s(w, 0, 1, N, Ft, D, 1) + 2 * gemm_s(w, 0, 1, N, D, Ft, 1) + gemm_s(w, 0, 1, N, A, D, 1) +
         gemm_s(w, 0, 1, N, D, A, 1) + 2 * gemm_s(w, 0, 1, N, D, Akv, 1);
    s += (gemm_s(w, 0, 1, T, T, hd, Ht) + gemm_s(w, 1, 0, T, hd, T, Ht) + gemm_s(w, 0, 0, T, hd, T, Ht) +
          gemm_s(w, 1, 0, T, hd, T, Ht)) * B;
    s += strata__plan_op_s(w, STRATA_PLAN_OP_GELU_BWD, 2 * N * Ft) +
         rows_s(w, STRATA_PLAN_OP_SOFTMAX_BWD, B * Ht * T * T, B * Ht * T) +
         strata__plan_op_s(w, STRATA_PLAN_OP_ADD, N * (2 * D + A + Akv));
    launches += 12 + 4 * B;
    if (t > 1)
      jb += 2 * N * D * 4, joins += 2;
  }
  if (fold_bi) /* folded: the down projection's weight gradient in BI, dgu and dqkv copied over gate|up and q|k|v */
    s += gemm_s(w, 1, 0, Ft, D, N, 1) + strata__plan_op_s(w, STRATA_PLAN_OP_ADD, N * (2 * Ft + A + 2 * Akv)),
        launches += 3;
  if (wt) {
    s += (fold ? 0 : gemm_s(w, 1, 0, Ft, D, N, 1)) + 2 * gemm_s(w, 1, 0, D, Ft, N, 1) + gemm_s(w, 1, 0, A, D, N, 1) +
         gemm_s(w, 1, 0, D, A, N, 1) + 2 * gemm_s(w, 1, 0, D, Akv, N, 1);
    launches += fold ? 6 : 7;
    if (rep) /* the shared heads' gradients: a zeroed buffer, the join, the add */
      s += strata__plan_op_s(w, STRATA_PLAN_OP_ADD, 2 * D * Akv * (1 + (double)cfg->kv_heads)), launches += 2,
          jb += 2 * (double)cfg->kv_heads * D * hd * 4, joins++;
  }
  if (part != STRATA__PLAN_PART_FWD && !(fold && !fold_bi)) /* both RMSNorms' backward, run by each part when split
                                                            ** (folded: BI's alone) */
    s += strata__plan_op_s(w, STRATA_PLAN_OP_LAYERNORM_BWD, 2 * N * D), launches += 2;
  if (split && !fold)
    s += strata__plan_op_s(w, STRATA_PLAN_OP_ADD, N * D), launches++;
  return (struct strata__plan_work){s + launches * w->launch_us * 1e-6, jb, joins};
}

/*
** One part of layer `layer`'s step on one slice of a t-way stage whose
** slowest member costs `w`, for `rows` samples. A GPT's and a llama's layers
** are costed op by op (gpt_part, llama_part); other layers from the model's profile: their FLOPs
** over t at the large-GEMM speed, their kept activations read and written
** at the elementwise speed, the backward split evenly between its parts.
*/
static struct strata__plan_work raw_part(const struct strata_device_cost *w, strata_model_t model, int t, int layer,
                                         int64_t rows, enum strata__plan_part part) {
  struct strata_layer_info li;
  strata_model_layer(model, layer, &li);
  const struct strata_model_config *cfg = strata_model_config(model);
  if (cfg->kind == STRATA_MODEL_GPT)
    return gpt_part(w, cfg, &li, t, rows, part);
  if (cfg->kind == STRATA_MODEL_LLAMA)
    return llama_part(w, cfg, &li, t, rows, part);
  if (part == STRATA__PLAN_PART_CORE) /* (no attention: nothing recomputed) */
    return (struct strata__plan_work){0, 0, 0};
  double flops = (part == STRATA__PLAN_PART_FWD ? li.fwd_flops : li.bwd_flops) * (double)rows / t;
  double elems = (double)li.act_bytes / 4 * (double)rows / t * (part == STRATA__PLAN_PART_FWD ? 2 : 3);
  double s = flops / w->flops + strata__plan_op_s(w, STRATA_PLAN_OP_ADD, elems) +
             (part == STRATA__PLAN_PART_FWD ? 4 : 8) * w->launch_us * 1e-6;
  const int split = part == STRATA__PLAN_PART_INPUT || part == STRATA__PLAN_PART_WEIGHT ||
                    part == STRATA__PLAN_PART_INPUT_FOLD || part == STRATA__PLAN_PART_WEIGHT_FOLD;
  return (struct strata__plan_work){split ? s / 2 : s, 0, 0};
}

struct strata__plan_work strata__plan_layer_part(const struct strata_device_cost *w, strata_model_t model, int t,
                                                 int layer, int64_t rows, enum strata__plan_part part) {
  struct strata__plan_work k = raw_part(w, model, t, layer, rows, part);
  if (w->stage_factor > 0)
    k.s *= w->stage_factor;
  return k;
}

double strata__plan_ops_time(const struct strata_device_cost *w, strata_model_t model, int64_t rows) {
  double s = 0;
  const int layers = strata_model_layer_count(model);
  for (int i = 0; i < layers; i++)
    s += raw_part(w, model, 1, i, rows, STRATA__PLAN_PART_FWD).s +
         raw_part(w, model, 1, i, rows, STRATA__PLAN_PART_FULL).s;
  return s + w->sync_us * 1e-6;
}

double strata__plan_joins_s(const struct strata_machine *c, const int *devs, double bytes, int joins, int t) {
  if (t <= 1 || joins == 0)
    return 0;
  return joins * ring_allreduce_s(c, devs, t, bytes / joins);
}

double strata__plan_layer_time(const struct strata_machine *c, strata_model_t model, strata_layout_t layout, int rank,
                               int layer, int64_t rows, int backward) {
  const int *devs = NULL;
  int t = strata__plan_group_of(layout, 0, rank, &devs);
  struct strata_device_cost w = strata__plan_group_cost(c, devs, t);
  struct strata__plan_work k =
      strata__plan_layer_part(&w, model, t, layer, rows, backward ? STRATA__PLAN_PART_FULL : STRATA__PLAN_PART_FWD);
  return k.s + strata__plan_joins_s(c, devs, k.join_bytes, k.joins, t);
}

int strata__plan_gemm_shapes(strata_model_t model, int t, int64_t rows, struct strata_gemm_shape **v, int *n) {
  struct shape_list l = {.v = v, .n = n};
  const struct strata_device_cost w = {.flops = 1e12, .mem_gbps = 1e3, .memory = 1};
  collecting = &l;
  const int layers = strata_model_layer_count(model);
  for (int i = 0; i < layers && !l.failed; i++) {
    strata__plan_layer_part(&w, model, t, i, rows, STRATA__PLAN_PART_FWD);
    strata__plan_layer_part(&w, model, t, i, rows, STRATA__PLAN_PART_FULL);
  }
  collecting = NULL;
  return l.failed ? strata__error(STRATA_ERR_NOMEM, "out of host memory listing a model's GEMMs") : STRATA_OK;
}

int strata__plan_groups_alike(const struct strata_machine *c, strata_layout_t l, int replicas) {
  for (int rep = 0; rep < replicas; rep++)
    for (int r = 0; r < strata_layout_pp(l); r++) {
      const int *devs;
      const int t = strata__plan_group_of(l, rep, r, &devs);
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
