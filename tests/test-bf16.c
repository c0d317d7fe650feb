/* SPDX-License-Identifier: MIT */
/* test-bf16.c — bfloat16 operands on the host backend: rounding and conversions on the native and the emulated path,
** every op against the float32 op on the same values and the training ops against float64, GEMMs, bad types; and on
** OpenCL (PoCL) devices: every op against the host's on the same operands, conversions, GEMMs, a bf16 pipeline. */
#include <float.h>
#include <pthread.h>

#include "common.h"

#define PAD 3   /* operands start PAD elements into their buffer ... */
#define GUARD 2 /* ... and GUARD elements follow them: both must survive untouched */
#define FILLER 0xa5
#define MAXA 10

/* bfloat16 has 8 significant bits: one rounding moves a value by at most 2^-9 of it. Tolerances below allow 2^-8
** (twice that) relative to the result, plus what the float32 arithmetic may add, stated relative to the inputs. */
#define BF16_REL (1.0 / 256)

/* The reference rounding, written apart from the library's: nearest, ties to even; NaN stays NaN (quiet); a float32
** denormal becomes a zero of its sign (as vcvtneps2bf16). */
static uint16_t ref_round(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t exp = (u >> 23) & 0xff, man = u & 0x7fffff;
  if (exp == 0xff && man)
    return (uint16_t)((u >> 16) | 0x40);
  if (exp == 0)
    return (uint16_t)((u >> 31) << 15);
  uint32_t hi = u >> 16, rest = u & 0xffff;
  if (rest > 0x8000 || (rest == 0x8000 && (hi & 1)))
    hi++;
  return (uint16_t)hi;
}

static float widen(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static float rbf(float f) { return widen(ref_round(f)); }

static float *rnd_bf(size_t n, uint32_t seed, float lo, float hi) {
  float *x = malloc(n * 4);
  tc_fill(x, n, seed, lo, hi);
  for (size_t i = 0; i < n; i++)
    x[i] = rbf(x[i]);
  return x;
}

/* Log capture: the host backend says once which conversion path it uses. */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_text[4096];

static void capture(int level, const char *subsystem, const char *message, void *ud) {
  (void)level, (void)subsystem, (void)ud;
  pthread_mutex_lock(&log_lock);
  size_t at = strlen(log_text);
  snprintf(log_text + at, sizeof log_text - at, "%s\n", message);
  pthread_mutex_unlock(&log_lock);
}

static void setup(void) {
  setenv("STRATA_HOST_DEVICES", "1", 1);
  strata_log_set_handler(capture, STRATA_LOG_INFO, NULL);
}

TestSuite(bf16, .init = setup);

static int host_dev(void) {
  int d = tc_find_device("host", 0);
  cr_assert(d >= 0, "no host device: %s", strata_last_error());
  return d;
}

/* ---- running an op over typed operands ---- */

/* One operand: its type ('b' bfloat16, 'f' float32, 'i' int32; 'h' bfloat16 given as raw 16-bit patterns), element
** count and initial contents (floats for 'b' and 'f', rounded for 'b'; int32 for 'i'; uint16 for 'h'; NULL: zeros). */
struct targ {
  char type;
  size_t n;
  const void *init;
};

typedef int (*body_fn)(strata_queue_t q, strata_mem_t *m, const void *p);

static int dtype_of(char t) {
  return t == 'b' || t == 'h' ? STRATA_BFLOAT16 : t == 'i' ? STRATA_INT32 : STRATA_FLOAT32;
}

/* Run body on device dev; out[i] (n[i] 4-byte values) receives operand i afterwards, a bfloat16 one widened.
** Fails the test if anything was written before or after an operand. */
static int run_on(int dev, int nargs, const struct targ *a, body_fn body, const void *p, float **out) {
  strata_queue_t q;
  OK(strata_queue_new(dev, &q));
  strata_buffer_t b[MAXA];
  strata_mem_t m[MAXA];
  for (int i = 0; i < nargs; i++) {
    size_t es = dtype_of(a[i].type) == STRATA_BFLOAT16 ? 2 : 4, bytes = (PAD + a[i].n + GUARD) * es;
    unsigned char *h = malloc(bytes);
    memset(h, FILLER, bytes);
    for (size_t j = 0; j < a[i].n; j++) {
      if (a[i].type == 'b' || a[i].type == 'h') {
        uint16_t v = a[i].type == 'h' ? (a[i].init ? ((const uint16_t *)a[i].init)[j] : 0)
                                      : ref_round(a[i].init ? ((const float *)a[i].init)[j] : 0.0f);
        memcpy(h + (PAD + j) * 2, &v, 2);
      } else {
        uint32_t v = 0;
        if (a[i].init)
          memcpy(&v, (const char *)a[i].init + j * 4, 4);
        memcpy(h + (PAD + j) * 4, &v, 4);
      }
    }
    OK(strata_buffer_new(dev, bytes, &b[i]));
    OK(strata_buffer_upload(q, b[i], 0, h, bytes));
    free(h);
    m[i] = strata_mem_typed(b[i], PAD, dtype_of(a[i].type));
  }
  int rc = body(q, m, p);
  int rc2 = strata_queue_finish(q);
  if (!rc)
    rc = rc2;
  for (int i = 0; i < nargs; i++) {
    size_t es = dtype_of(a[i].type) == STRATA_BFLOAT16 ? 2 : 4, bytes = (PAD + a[i].n + GUARD) * es;
    unsigned char *h = malloc(bytes);
    OK(strata_buffer_download(q, b[i], 0, h, bytes));
    for (size_t j = 0; j < PAD * es; j++)
      cr_assert_eq(h[j], FILLER, "operand %d: written before its start", i);
    for (size_t j = (PAD + a[i].n) * es; j < bytes; j++)
      cr_assert_eq(h[j], FILLER, "operand %d: written past its end", i);
    if (out)
      for (size_t j = 0; j < a[i].n; j++) {
        if (es == 2) {
          uint16_t v;
          memcpy(&v, h + (PAD + j) * 2, 2);
          out[i][j] = widen(v);
        } else {
          memcpy(&out[i][j], h + (PAD + j) * 4, 4);
        }
      }
    free(h);
    strata_buffer_free(b[i]);
  }
  strata_queue_free(q);
  return rc;
}

static float **outputs(int nargs, const struct targ *a) {
  float **o = calloc(MAXA, sizeof *o);
  for (int i = 0; i < nargs; i++)
    o[i] = calloc(a[i].n ? a[i].n : 1, 4);
  return o;
}

static void outputs_free(int nargs, float **o) {
  for (int i = 0; i < nargs; i++)
    free(o[i]);
  free(o);
}

/*
** An op over operands whose kinds `kinds` gives ('x' a float operand of
** either type, 'f' one that must be float32, 'i' int32 ids), run with the
** float operands typed by `variant` (0: all bfloat16; 1: even ones
** bfloat16, odd float32; 2: the reverse) and again with all of them
** float32, from the same values (float inputs rounded to bfloat16 first):
** a bfloat16 output must be the float32 op's output rounded once, and a
** float32 output equal to it bit for bit.
*/
struct opcase {
  const char *name;
  body_fn body;
  const void *p;
  const char *kinds;
  size_t n[MAXA];
  const void *init[MAXA];
};

static void same_as_f32(const struct opcase *c, int variant) {
  int nargs = (int)strlen(c->kinds), dev = host_dev();
  struct targ mixed[MAXA], plain[MAXA];
  float *rounded[MAXA] = {0};
  for (int i = 0; i < nargs; i++) {
    char k = c->kinds[i];
    const void *init = c->init[i];
    if (k == 'x' && init) {
      rounded[i] = malloc(c->n[i] * 4);
      for (size_t j = 0; j < c->n[i]; j++)
        rounded[i][j] = rbf(((const float *)init)[j]);
      init = rounded[i];
    }
    char t = k == 'x' ? (variant == 0 || (variant == 1) == (i % 2 == 0) ? 'b' : 'f') : k;
    mixed[i] = (struct targ){t, c->n[i], init};
    plain[i] = (struct targ){k == 'i' ? 'i' : 'f', c->n[i], init};
  }
  float **om = outputs(nargs, mixed), **op = outputs(nargs, plain);
  int rcm = run_on(dev, nargs, mixed, c->body, c->p, om);
  cr_assert_eq(rcm, STRATA_OK, "%s (variant %d): %s", c->name, variant, strata_last_error());
  OK(run_on(dev, nargs, plain, c->body, c->p, op));
  for (int i = 0; i < nargs; i++)
    for (size_t j = 0; j < c->n[i]; j++) {
      if (mixed[i].type == 'b')
        cr_assert_eq(ref_round(om[i][j]), ref_round(op[i][j]),
                     "%s (variant %d): operand %d [%zu] is %a, the float32 op's %a rounds to %a", c->name, variant, i,
                     j, (double)om[i][j], (double)op[i][j], (double)rbf(op[i][j]));
      else
        cr_assert(memcmp(&om[i][j], &op[i][j], 4) == 0, "%s (variant %d): float32 operand %d [%zu] is %a, not %a",
                  c->name, variant, i, j, (double)om[i][j], (double)op[i][j]);
    }
  outputs_free(nargs, om);
  outputs_free(nargs, op);
  for (int i = 0; i < nargs; i++)
    free(rounded[i]);
}

/* ---- the op bodies ---- */

struct ew_p {
  int64_t n;
  float alpha;
  int in_place;
};
static int b_gelu_f(strata_queue_t q, strata_mem_t *m, const void *p) {
  const struct ew_p *e = p;
  return strata_gelu_fwd(q, m[0], e->in_place ? m[0] : m[1], e->n);
}
static int b_gelu_b(strata_queue_t q, strata_mem_t *m, const void *p) {
  return strata_gelu_bwd(q, m[0], m[1], m[2], ((const struct ew_p *)p)->n);
}
static int b_relu_f(strata_queue_t q, strata_mem_t *m, const void *p) {
  return strata_relu_fwd(q, m[0], m[1], ((const struct ew_p *)p)->n);
}
static int b_relu_b(strata_queue_t q, strata_mem_t *m, const void *p) {
  return strata_relu_bwd(q, m[0], m[1], m[2], ((const struct ew_p *)p)->n);
}
static int b_add(strata_queue_t q, strata_mem_t *m, const void *p) {
  return strata_add(q, m[0], m[1], m[2], ((const struct ew_p *)p)->n);
}
static int b_scale(strata_queue_t q, strata_mem_t *m, const void *p) {
  const struct ew_p *e = p;
  return strata_scale(q, m[0], e->alpha, e->n);
}
static int b_fill(strata_queue_t q, strata_mem_t *m, const void *p) {
  const struct ew_p *e = p;
  return strata_fill(q, m[0], e->alpha, e->n);
}
static int b_convert(strata_queue_t q, strata_mem_t *m, const void *p) {
  return strata_convert(q, m[0], m[1], ((const struct ew_p *)p)->n);
}

struct rc_p {
  int64_t rows, cols;
  int acc, causal;
  float f;
};
static int b_bias_add(strata_queue_t q, strata_mem_t *m, const void *p) {
  const struct rc_p *r = p;
  return strata_bias_add(q, m[0], m[1], r->rows, r->cols);
}
static int b_bias_grad(strata_queue_t q, strata_mem_t *m, const void *p) {
  const struct rc_p *r = p;
  return strata_bias_grad(q, m[0], m[1], r->rows, r->cols, r->acc);
}
static int b_ln_f(strata_queue_t q, strata_mem_t *m, const void *p) {
  const struct rc_p *r = p;
  return strata_layernorm_fwd(q, m[0], m[1], m[2], m[3], m[4], m[5], r->rows, r->cols, 1e-5f);
}
/* x gamma mean rstd dy dx dgamma dbeta */
static int b_ln_b(strata_queue_t q, strata_mem_t *m, const void *p) {
  const struct rc_p *r = p;
  return strata_layernorm_bwd(q, m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7], r->rows, r->cols, r->acc);
}
static int b_sm_f(strata_queue_t q, strata_mem_t *m, const void *p) {
  const struct rc_p *r = p;
  return strata_softmax_fwd(q, m[0], m[1], r->rows, r->cols, r->f, r->causal);
}
static int b_sm_b(strata_queue_t q, strata_mem_t *m, const void *p) {
  const struct rc_p *r = p;
  return strata_softmax_bwd(q, m[0], m[1], m[2], r->rows, r->cols, r->f);
}
static int b_xe_f(strata_queue_t q, strata_mem_t *m, const void *p) {
  const struct rc_p *r = p;
  return strata_cross_entropy_fwd(q, m[0], m[1], m[2], r->rows, r->cols);
}
static int b_xe_b(strata_queue_t q, strata_mem_t *m, const void *p) {
  const struct rc_p *r = p;
  return strata_cross_entropy_bwd(q, m[0], m[1], m[2], r->rows, r->cols, r->f);
}
/* logits rowmax | logits targets rowmax sumexp tlogit | ... : vocab-parallel slices at off 3 of cols + 7 */
static int b_vp_max(strata_queue_t q, strata_mem_t *m, const void *p) {
  const struct rc_p *r = p;
  return strata_xent_vp_max(q, m[0], m[1], r->rows, r->cols);
}
static int b_vp_sums(strata_queue_t q, strata_mem_t *m, const void *p) {
  const struct rc_p *r = p;
  return strata_xent_vp_sums(q, m[0], m[1], m[2], m[3], m[4], r->rows, r->cols, 3, r->cols + 7);
}
static int b_vp_loss(strata_queue_t q, strata_mem_t *m, const void *p) {
  const struct rc_p *r = p;
  return strata_xent_vp_loss(q, m[0], m[1], m[2], m[3], m[4], r->rows, r->cols + 7);
}
static int b_vp_bwd(strata_queue_t q, strata_mem_t *m, const void *p) {
  const struct rc_p *r = p; /* causal: in place (dlogits may be logits) */
  return strata_xent_vp_bwd(q, m[0], m[1], m[2], m[3], r->causal ? m[0] : m[4], r->rows, r->cols, 3, r->cols + 7,
                            r->f);
}
static int b_sumsq(strata_queue_t q, strata_mem_t *m, const void *p) {
  const struct rc_p *r = p;
  return strata_sumsq(q, m[0], r->rows, m[1], r->acc);
}

struct emb_p {
  int64_t n, dim, vocab;
  int acc;
};
static int b_emb_f(strata_queue_t q, strata_mem_t *m, const void *p) {
  const struct emb_p *e = p;
  return strata_embedding_fwd(q, m[0], m[1], m[2], e->n, e->dim, e->vocab);
}
static int b_emb_b(strata_queue_t q, strata_mem_t *m, const void *p) {
  const struct emb_p *e = p;
  return strata_embedding_bwd(q, m[0], m[1], m[2], e->n, e->dim, e->vocab, e->acc);
}

struct attn_p {
  int64_t b, t, h, hd;
  int causal;
};
static int b_attn_f(strata_queue_t q, strata_mem_t *m, const void *p) {
  const struct attn_p *a = p;
  return strata_attention_fwd(q, m[0], m[1], m[2], a->b, a->t, a->h, a->hd, 1.0f / sqrtf((float)a->hd), a->causal);
}
static int b_attn_b(strata_queue_t q, strata_mem_t *m, const void *p) {
  const struct attn_p *a = p;
  return strata_attention_bwd(q, m[0], m[1], m[2], m[3], m[4], a->b, a->t, a->h, a->hd, 1.0f / sqrtf((float)a->hd),
                              a->causal);
}

static const struct strata_pool2d pool_g = {2, 3, 9, 8, 3, 2};
static int b_pool_f(strata_queue_t q, strata_mem_t *m, const void *p) {
  (void)p;
  return strata_maxpool_fwd(q, &pool_g, m[0], m[1], m[2]);
}
static int b_pool_b(strata_queue_t q, strata_mem_t *m, const void *p) {
  (void)p;
  return strata_maxpool_bwd(q, &pool_g, m[0], m[1], m[2]);
}

/* ---- every op: the float32 op on the same values, rounded once ---- */

typedef void (*case_check_fn)(const struct opcase *c, int variant);

/* Every op case below, each under the three typings of same_as_f32, handed to `check`. */
static void each_op_case(case_check_fn check) {
  enum { N = 360007 }; /* several blocks of staging, over threads; the largest operand below */
  float *x = malloc(N * 4), *y = malloc(N * 4), *z = malloc(N * 4);
  tc_fill(x, N, 1, -4, 4);
  tc_fill(y, N, 2, -2, 2);
  tc_fill(z, N, 3, -1, 1);
  struct ew_p ew = {N, 0.37f, 0}, ew_ip = {N, 0, 1}, ew_fill = {N, -2.7182817f, 0};
  /* x and y with bad values sprinkled in: NaN, infinities, zeros of both signs, a denormal, values past the
  ** exponential's clamps and near the largest float */
  float *xs = malloc(N * 4), *ys = malloc(N * 4);
  const float bad[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, -1e-40f, 30.0f, -30.0f, 3e38f, -3e38f};
  for (size_t i = 0; i < N; i++) {
    xs[i] = i % 7 == 0 ? bad[i / 7 % 12] : x[i];
    ys[i] = i % 11 == 0 ? bad[i / 11 % 12] : y[i];
  }
  int32_t *tgt = malloc(600 * 4);
  for (int r = 0; r < 600; r++)
    tgt[r] = r % 13 == 5 ? -1 : (r * 37) % 307; /* some rows without a target, some outside a slice */
  struct rc_p ln = {300, 700, 0, 0, 0}, ln_acc = {300, 700, 1, 0, 0}, bias = {700, 300, 0, 0, 0},
              bias_acc = {700, 300, 1, 0, 0}, sm = {600, 300, 0, 0, 0.7f}, smc = {4 * 300, 300, 0, 1, 0.7f},
              xe = {600, 300, 0, 0, 1.0f / 600}, xe_ip = {600, 300, 0, 1, 1.0f / 600}, ss = {N, 0, 1, 0, 0};
  float *rowmax = malloc(600 * 4), *sumexp = malloc(600 * 4);
  for (int r = 0; r < 600; r++) {
    rowmax[r] = 2.0f + (float)(r % 5) * 0.25f;
    sumexp[r] = 20.0f + (float)(r % 7);
  }
  float one = 1.5f;
  int32_t *tok = malloc(500 * 4);
  for (int i = 0; i < 500; i++)
    tok[i] = i % 17 == 3 ? 1000 : (i * 7919) % 251; /* repeated ids, and one outside the vocabulary */
  struct emb_p ep = {500, 96, 251, 0}, ep_acc = {500, 96, 251, 1};
  struct attn_p ap = {2, 37, 3, 24, 1}, apn = {2, 37, 3, 24, 0};
  size_t qkv = 2 * 37 * 3 * 72, ao = 2 * 37 * 72, lse = 2 * 3 * 37;
  int32_t idx[2 * 3 * 4 * 3];
  for (size_t i = 0; i < sizeof idx / 4; i++) /* a place inside window i (3 x 3 at stride 2, 4 x 3 windows of 9 x 8) */
    idx[i] = (int32_t)(((i / 3 % 4) * 2 + i * 5 % 3) * 8 + (i % 3) * 2 + i * 7 % 3);
  const struct opcase cases[] = {
      {"gelu_fwd", b_gelu_f, &ew, "xx", {N, N}, {x}},
      {"gelu_fwd in place", b_gelu_f, &ew_ip, "x", {N}, {x}},
      {"gelu_bwd", b_gelu_b, &ew, "xxx", {N, N, N}, {x, y}},
      {"gelu_fwd bad values", b_gelu_f, &ew, "xx", {N, N}, {xs}},
      {"gelu_bwd bad values", b_gelu_b, &ew, "xxx", {N, N, N}, {xs, ys}},
      {"gelu_bwd bad values in x only", b_gelu_b, &ew, "xxx", {N, N, N}, {xs, y}},
      {"relu_fwd", b_relu_f, &ew, "xx", {N, N}, {x}},
      {"relu_bwd", b_relu_b, &ew, "xxx", {N, N, N}, {x, y}},
      {"add", b_add, &ew, "xxx", {N, N, N}, {x, y}},
      {"scale", b_scale, &ew, "x", {N}, {x}},
      {"fill", b_fill, &ew_fill, "x", {N}, {NULL}},
      {"convert", b_convert, &ew, "xx", {N, N}, {x}},
      {"bias_add", b_bias_add, &bias, "xx", {700 * 300, 300}, {x, y}},
      {"bias_grad", b_bias_grad, &bias, "xx", {700 * 300, 300}, {x, y}},
      {"bias_grad accumulate", b_bias_grad, &bias_acc, "xx", {700 * 300, 300}, {x, y}},
      {"bias_grad float32 gradient", b_bias_grad, &bias, "xf", {700 * 300, 300}, {x, y}},
      {"bias_grad float32 gradient accumulate", b_bias_grad, &bias_acc, "xf", {700 * 300, 300}, {x, y}},
      {"layernorm_fwd", b_ln_f, &ln, "xxxxxx", {300 * 700, 700, 700, 300 * 700, 300, 300}, {x, y, z}},
      {"layernorm_bwd",
       b_ln_b,
       &ln,
       "xxxxxxxx",
       {300 * 700, 700, 300, 300, 300 * 700, 300 * 700, 700, 700},
       {x, y, z, y, z}},
      {"layernorm_bwd accumulate",
       b_ln_b,
       &ln_acc,
       "xxxxxxxx",
       {300 * 700, 700, 300, 300, 300 * 700, 300 * 700, 700, 700},
       {x, y, z, y, z, NULL, x, y}},
      /* float32 parameter gradients, as training keeps them: the bfloat16 rows read in place */
      {"layernorm_bwd float32 gradients",
       b_ln_b,
       &ln,
       "xxxxxxff",
       {300 * 700, 700, 300, 300, 300 * 700, 300 * 700, 700, 700},
       {x, y, z, y, z}},
      {"layernorm_bwd float32 gradients accumulate",
       b_ln_b,
       &ln_acc,
       "xxxxxxff",
       {300 * 700, 700, 300, 300, 300 * 700, 300 * 700, 700, 700},
       {x, y, z, y, z, NULL, x, y}},
      {"softmax_fwd", b_sm_f, &sm, "xx", {600 * 300, 600 * 300}, {x}},
      {"softmax_fwd causal", b_sm_f, &smc, "xx", {1200 * 300, 1200 * 300}, {x}},
      {"softmax_bwd", b_sm_b, &sm, "xxx", {600 * 300, 600 * 300, 600 * 300}, {z, y}},
      {"cross_entropy_fwd", b_xe_f, &xe, "xix", {600 * 300, 600, 600}, {x, tgt}},
      {"cross_entropy_bwd", b_xe_b, &xe, "xix", {600 * 300, 600, 600 * 300}, {x, tgt}},
      {"xent_vp_max", b_vp_max, &xe, "xx", {600 * 300, 600}, {x}},
      {"xent_vp_sums", b_vp_sums, &xe, "xixxx", {600 * 300, 600, 600, 600, 600}, {x, tgt, rowmax}},
      {"xent_vp_loss", b_vp_loss, &xe, "xxxix", {600, 600, 600, 600, 600}, {rowmax, sumexp, y, tgt}},
      {"xent_vp_bwd", b_vp_bwd, &xe, "xixxx", {600 * 300, 600, 600, 600, 600 * 300}, {x, tgt, rowmax, sumexp}},
      {"xent_vp_bwd in place", b_vp_bwd, &xe_ip, "xixx", {600 * 300, 600, 600, 600}, {x, tgt, rowmax, sumexp}},
      {"sumsq", b_sumsq, &ss, "xf", {N, 1}, {x, &one}},
      {"embedding_fwd", b_emb_f, &ep, "ixx", {500, 251 * 96, 500 * 96}, {tok, y}},
      {"embedding_bwd", b_emb_b, &ep, "ixx", {500, 500 * 96, 251 * 96}, {tok, z}},
      {"embedding_bwd accumulate", b_emb_b, &ep_acc, "ixx", {500, 500 * 96, 251 * 96}, {tok, z, y}},
      {"attention_fwd causal", b_attn_f, &ap, "xxx", {qkv, ao, lse}, {z}},
      {"attention_fwd", b_attn_f, &apn, "xxx", {qkv, ao, lse}, {z}},
      {"attention_bwd causal", b_attn_b, &ap, "xxxxx", {qkv, ao, ao, lse, qkv}, {z, y, x, rowmax}},
      {"maxpool_fwd", b_pool_f, NULL, "xxi", {2 * 3 * 72, 2 * 3 * 4 * 3, 2 * 3 * 4 * 3}, {x}},
      {"maxpool_bwd", b_pool_b, NULL, "xix", {2 * 3 * 4 * 3, 2 * 3 * 4 * 3, 2 * 3 * 72}, {y, idx}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (int v = 0; v < 3; v++)
      check(&cases[c], v);
  free(x);
  free(y);
  free(z);
  free(xs);
  free(ys);
  free(tgt);
  free(tok);
  free(rowmax);
  free(sumexp);
}

Test(bf16, every_op_is_the_float32_op_rounded_once) { each_op_case(same_as_f32); }

/* The same on the emulated conversions: the CPU's bfloat16 instructions hidden. */
Test(bf16, every_op_is_the_float32_op_rounded_once_emulated) {
  setenv("STRATA_HOST_CPU_HIDE", "avx512bf16", 1);
  each_op_case(same_as_f32);
  cr_assert(strstr(log_text, "bf16 conversions: emulated"), "the host did not say it emulates: %s", log_text);
}

/* ---- conversions ---- */

/* Hand-picked float32 patterns and the bfloat16 each must become. */
static const uint32_t patterns[][2] = {
    {0x3f800000, 0x3f80}, /* 1 */
    {0x3f808000, 0x3f80}, /* tie, even below: stays */
    {0x3f818000, 0x3f82}, /* tie, odd below: up to even */
    {0x3f808001, 0x3f81}, /* just above the tie */
    {0x3f807fff, 0x3f80}, /* just below it */
    {0xbf818000, 0xbf82}, /* negative tie */
    {0xc0490fdb, 0xc049}, /* -pi */
    {0x7f7fffff, 0x7f80}, /* FLT_MAX rounds to infinity */
    {0x7f7f7fff, 0x7f7f}, /* the largest bfloat16 below it stays */
    {0x7f800000, 0x7f80}, /* inf */
    {0xff800000, 0xff80}, /* -inf */
    {0x7fc00000, 0x7fc0}, /* quiet NaN */
    {0x7f800001, 0x7fc0}, /* a signalling NaN whose payload is all in the dropped half: still NaN, made quiet */
    {0xffa00000, 0xffe0}, /* negative NaN, payload kept */
    {0x00000001, 0x0000}, /* the smallest denormal: zero */
    {0x807fffff, 0x8000}, /* the largest negative denormal: minus zero */
    {0x00800000, 0x0080}, /* FLT_MIN */
    {0x00808000, 0x0080}, /* a tie just above it */
    {0x80000000, 0x8000}, /* -0 */
    {0x00000000, 0x0000},
};
#define NPAT (sizeof patterns / sizeof patterns[0])

/* patterns, then random float32 bit patterns (every exponent), converted by strata_convert; want ref_round */
static void convert_matches_reference(int dev) {
  enum { NR = 1 << 20 };
  size_t n = NPAT + NR;
  uint32_t *bits = malloc(n * 4);
  for (size_t i = 0; i < NPAT; i++)
    bits[i] = patterns[i][0];
  uint64_t s = 99;
  for (size_t i = NPAT; i < n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    bits[i] = (uint32_t)(s >> 32);
  }
  struct targ a[2] = {{'f', n, bits}, {'b', n, NULL}};
  float **o = outputs(2, a);
  struct ew_p p = {(int64_t)n, 0, 0};
  OK(run_on(dev, 2, a, b_convert, &p, o));
  for (size_t i = 0; i < n; i++) {
    float f;
    memcpy(&f, &bits[i], 4);
    uint32_t got;
    memcpy(&got, &o[1][i], 4);
    uint16_t want = i < NPAT ? (uint16_t)patterns[i][1] : ref_round(f);
    cr_assert_eq(got >> 16, want, "float32 0x%08x became bfloat16 0x%04x, not 0x%04x", bits[i], got >> 16, want);
    if (i < NPAT)
      cr_assert_eq(ref_round(f), want, "the test's own rounding of 0x%08x", bits[i]);
  }
  outputs_free(2, o);
  free(bits);
}

Test(bf16, convert_rounds_to_nearest_even) {
  convert_matches_reference(host_dev());
  cr_assert(strstr(log_text, "bf16 conversions: "), "the host did not say which conversions it uses: %s", log_text);
}

/* The emulated path gives the same bits as the reference, so the same bits as the native one. */
Test(bf16, convert_rounds_to_nearest_even_emulated) {
  setenv("STRATA_HOST_CPU_HIDE", "avx512bf16", 1);
  convert_matches_reference(host_dev());
  cr_assert(strstr(log_text, "bf16 conversions: emulated"), "%s", log_text);
}

/* Every bfloat16 widens exactly and comes back the same, but for NaNs (made quiet) and denormals (zero of their sign:
** their float32 values are denormals). */
static int b_round_trip(strata_queue_t q, strata_mem_t *m, const void *p) {
  int64_t n = ((const struct ew_p *)p)->n;
  int rc = strata_convert(q, m[0], m[1], n);
  return rc ? rc : strata_convert(q, m[1], m[2], n);
}

static void round_trip_on(int dev) {
  enum { N = 65536 };
  uint16_t *all = malloc(N * 2);
  for (int i = 0; i < N; i++)
    all[i] = (uint16_t)i;
  struct targ a[3] = {{'h', N, all}, {'f', N, NULL}, {'b', N, NULL}};
  float **o = outputs(3, a);
  struct ew_p p = {N, 0, 0};
  OK(run_on(dev, 3, a, b_round_trip, &p, o));
  for (uint32_t i = 0; i < N; i++) {
    uint32_t f, b;
    memcpy(&f, &o[1][i], 4);
    memcpy(&b, &o[2][i], 4);
    cr_assert_eq(f, i << 16, "bfloat16 0x%04x widened to 0x%08x", i, f);
    int nan = (i & 0x7f80) == 0x7f80 && (i & 0x7f), denormal = (i & 0x7f80) == 0 && (i & 0x7f);
    uint32_t want = nan ? i | 0x40 : denormal ? i & 0x8000 : i;
    cr_assert_eq(b >> 16, want, "bfloat16 0x%04x came back as 0x%04x, not 0x%04x", i, b >> 16, want);
  }
  outputs_free(3, o);
  free(all);
}

Test(bf16, convert_round_trip) { round_trip_on(host_dev()); }

/* ---- GEMM against float64 ---- */

struct gemm_p {
  int ta, tb;
  int64_t m, n, k, lda, ldb, ldc, sa, sb, sc, batch;
  float alpha, beta;
};

static int b_gemm(strata_queue_t q, strata_mem_t *m, const void *p) {
  const struct gemm_p *g = p;
  return strata_gemm(q, g->ta, g->tb, g->m, g->n, g->k, g->alpha, m[0], g->lda, g->sa, m[1], g->ldb, g->sb, g->beta,
                     m[2], g->ldc, g->sc, g->batch);
}

/*
** bfloat16 A and B (C float32 or bfloat16) against sums in double of the
** same values. Tolerance: 1e-5 of sum |alpha a b| + |beta c| (float32
** sums over k <= 320 terms: k 2^-24 is 2e-5 at worst, far less in practice),
** plus 2^-8 of the result when C is bfloat16 (its one rounding). Elements
** of C's storage outside the product (strides, leading dimensions) must
** keep their values.
*/
static void gemm_check_on(int dev, const struct gemm_p *g, char ctype) {
  size_t na = (size_t)((g->batch - 1) * g->sa + ((g->ta ? g->k : g->m) - 1) * g->lda + (g->ta ? g->m : g->k));
  size_t nb = (size_t)((g->batch - 1) * g->sb + ((g->tb ? g->n : g->k) - 1) * g->ldb + (g->tb ? g->k : g->n));
  size_t nc = (size_t)((g->batch - 1) * g->sc + (g->m - 1) * g->ldc + g->n);
  float *a = rnd_bf(na, 11, -1, 1), *b = rnd_bf(nb, 12, -1, 1), *c = rnd_bf(nc, 13, -2, 2);
  struct targ t[3] = {{'b', na, a}, {'b', nb, b}, {ctype, nc, c}};
  float **o = outputs(3, t);
  OK(run_on(dev, 3, t, b_gemm, g, o));
  char *touched = calloc(nc, 1);
  for (int64_t bi = 0; bi < g->batch; bi++)
    for (int64_t i = 0; i < g->m; i++)
      for (int64_t j = 0; j < g->n; j++) {
        size_t at = (size_t)(bi * g->sc + i * g->ldc + j);
        double dot = 0, mag = 0;
        for (int64_t p = 0; p < g->k; p++) {
          double av = a[bi * g->sa + (g->ta ? p * g->lda + i : i * g->lda + p)];
          double bv = b[bi * g->sb + (g->tb ? j * g->ldb + p : p * g->ldb + j)];
          dot += av * bv;
          mag += fabs(av * bv);
        }
        double want = g->alpha * dot + (g->beta != 0 ? g->beta * (double)c[at] : 0);
        double tol = 1e-5 * (fabs(g->alpha) * mag + fabs(g->beta * c[at])) + (ctype == 'b' ? BF16_REL * fabs(want) : 0);
        cr_assert(fabs(o[2][at] - want) <= tol,
                  "gemm %c%c %lldx%lldx%lld batch %lld C %s beta %g: C[%lld][%lld][%lld] = %.8g, want %.8g (tol %.3g)",
                  g->ta ? 'T' : 'N', g->tb ? 'T' : 'N', (long long)g->m, (long long)g->n, (long long)g->k,
                  (long long)g->batch, ctype == 'b' ? "bf16" : "fp32", (double)g->beta, (long long)bi, (long long)i,
                  (long long)j, (double)o[2][at], want, tol);
        touched[at] = 1;
      }
  for (size_t i = 0; i < nc; i++)
    if (!touched[i])
      cr_assert_eq(o[2][i], c[i], "gemm wrote C's element %zu outside the product", i);
  free(touched);
  outputs_free(3, o);
  free(a);
  free(b);
  free(c);
}

/* Every transpose, batched or not, C of either type, beta 0 or 1, on device `dev`. */
static void gemm_shapes(int dev) {
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (int cb = 0; cb < 2; cb++)
        for (int beta = 0; beta < 2; beta++) {
          struct gemm_p g = {ta, tb, 37, 29, 53, 0, 0, 31, 0, 0, 0, 3, 0.75f, (float)beta};
          g.lda = (ta ? g.m : g.k) + 3;
          g.ldb = (tb ? g.k : g.n) + 5;
          g.sa = (ta ? g.k : g.m) * g.lda + 7;
          g.sb = (tb ? g.n : g.k) * g.ldb + 2;
          g.sc = g.m * g.ldc + 4;
          gemm_check_on(dev, &g, cb ? 'b' : 'f');
          g.batch = 1, g.alpha = 1.0f; /* one product, alpha 1: the plain matmul */
          gemm_check_on(dev, &g, cb ? 'b' : 'f');
        }
  /* B shared by the batch (stride 0), and the heads of an attention matrix written side by side (stride_c = n) */
  struct gemm_p shared = {0, 1, 16, 24, 40, 40, 40, 4 * 24, 16 * 40, 0, 24, 4, 1.0f, 0.0f};
  gemm_check_on(dev, &shared, 'f');
  gemm_check_on(dev, &shared, 'b');
  /* a larger one, so that the library's blocked kernels run */
  struct gemm_p big = {0, 0, 256, 192, 320, 320, 192, 192, 0, 0, 0, 1, 1.0f, 1.0f};
  gemm_check_on(dev, &big, 'f');
  gemm_check_on(dev, &big, 'b');
  /* a weight gradient's x^T dy, wide (n >= 1024): on oneDNN its A is laid plainly by a reorder first */
  for (int beta = 0; beta < 2; beta++) {
    struct gemm_p wg = {1, 0, 40, 1030, 70, 40, 1030, 1030, 0, 0, 0, 1, 1.0f, (float)beta};
    gemm_check_on(dev, &wg, 'f');
    gemm_check_on(dev, &wg, 'b');
  }
}

Test(bf16, gemm_every_transpose_batch_and_type) {
  gemm_shapes(host_dev());
  /* a build on oneDNN runs every one of these shapes as oneDNN's matmul */
  if (strstr(log_text, "GEMM: oneDNN")) {
    cr_assert(strstr(log_text, "bf16 GEMM: oneDNN"), "%s", log_text);
    cr_assert(!strstr(log_text, "no oneDNN matmul"), "%s", log_text);
    cr_assert(strstr(log_text, "transposed 70x40 A: laid plainly by a oneDNN reorder"), "%s", log_text);
  }
}

/* float32 A and B with a bfloat16 C: the float32 product rounded once. */
Test(bf16, gemm_float32_inputs_bf16_output) {
  struct gemm_p g = {1, 0, 21, 33, 17, 21, 33, 40, 0, 0, 0, 1, 0.5f, 1.0f};
  float *a = rnd_bf(17 * 21, 1, -1, 1), *b = rnd_bf(17 * 33, 2, -1, 1), *c = rnd_bf(21 * 40, 3, -1, 1);
  struct targ t[3] = {{'f', 17 * 21, a}, {'f', 17 * 33, b}, {'b', 21 * 40, c}};
  struct targ u[3] = {{'f', 17 * 21, a}, {'f', 17 * 33, b}, {'f', 21 * 40, c}};
  float **o = outputs(3, t), **w = outputs(3, u);
  OK(run_on(host_dev(), 3, t, b_gemm, &g, o));
  OK(run_on(host_dev(), 3, u, b_gemm, &g, w));
  for (int i = 0; i < 21 * 40; i++)
    cr_assert_eq(ref_round(o[2][i]), ref_round(w[2][i]), "C[%d]", i);
  outputs_free(3, o);
  outputs_free(3, w);
  free(a);
  free(b);
  free(c);
}

/* ---- the training ops against float64, all their float operands bfloat16 ---- */

/* |got - want| <= 2^-8 |want| + atol, else fail naming the op and the element */
#define NEAR(what, i, got, want, atol)                                                                                 \
  do {                                                                                                                 \
    double g_ = (got), w_ = (want), t_ = BF16_REL * fabs(w_) + (atol);                                                 \
    cr_assert(fabs(g_ - w_) <= t_, "%s [%zu]: %.8g, want %.8g (tol %.3g)", what, (size_t)(i), g_, w_, t_);             \
  } while (0)

Test(bf16, elementwise_ops_against_float64) {
  enum { N = 70001 };
  float *x = rnd_bf(N, 5, -5, 5), *y = rnd_bf(N, 6, -3, 3);
  struct ew_p p = {N, 0, 0};
  struct targ t[3] = {{'b', N, x}, {'b', N, y}, {'b', N, NULL}};
  float **o = outputs(3, t);
  /* gelu: vm_tanh is within a few float32 ulp of tanh, 2^-20 (1 + |x|) absolute covers it */
  OK(run_on(host_dev(), 2, t, b_gelu_f, &p, o));
  for (size_t i = 0; i < N; i++) {
    double v = x[i], want = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    NEAR("gelu_fwd", i, o[1][i], want, ldexp(1 + fabs(v), -20));
  }
  /* add: two bfloat16 values sum exactly in float32, so the result is their sum rounded once, exactly */
  OK(run_on(host_dev(), 3, t, b_add, &p, o));
  for (size_t i = 0; i < N; i++)
    cr_assert_eq(o[2][i], rbf(x[i] + y[i]), "add [%zu]", i);
  outputs_free(3, o);
  free(x);
  free(y);
}

Test(bf16, row_ops_against_float64) {
  enum { R = 67, C = 301 };
  float *x = rnd_bf(R * C, 7, -3, 3), *g = rnd_bf(C, 8, 0.5f, 1.5f), *be = rnd_bf(C, 9, -0.5f, 0.5f);
  /* bias_add: y + b of two bfloat16 is exact in float32: rounded once, exactly */
  struct rc_p rc = {R, C, 1, 0, 0};
  struct targ tb[2] = {{'b', R * C, x}, {'b', C, be}};
  float **o = outputs(2, tb);
  OK(run_on(host_dev(), 2, tb, b_bias_add, &rc, o));
  for (size_t i = 0; i < R * C; i++)
    cr_assert_eq(o[0][i], rbf(x[i] + be[i % C]), "bias_add [%zu]", i);
  /* bias_grad, accumulating onto be: float32 sums of R terms, 2^-20 of sum |dy| */
  OK(run_on(host_dev(), 2, tb, b_bias_grad, &rc, o));
  for (size_t c = 0; c < C; c++) {
    double s = be[c], mag = 0;
    for (size_t r = 0; r < R; r++)
      s += x[r * C + c], mag += fabs(x[r * C + c]);
    NEAR("bias_grad", c, o[1][c], s, ldexp(mag, -20));
  }
  outputs_free(2, o);
  /* layernorm: y = xhat g + b; float32 arithmetic adds ~1e-6 of |xhat g| + |b| (2^-16 allowed); mean and rstd
  ** float32 within 1e-5 relative */
  struct targ tl[6] = {{'b', R * C, x}, {'b', C, g}, {'b', C, be}, {'b', R * C, NULL}, {'f', R, NULL}, {'f', R, NULL}};
  o = outputs(6, tl);
  OK(run_on(host_dev(), 6, tl, b_ln_f, &rc, o));
  for (size_t r = 0; r < R; r++) {
    double mu = 0, var = 0;
    for (size_t c = 0; c < C; c++)
      mu += x[r * C + c];
    mu /= C;
    for (size_t c = 0; c < C; c++)
      var += (x[r * C + c] - mu) * (x[r * C + c] - mu);
    double rs = 1 / sqrt(var / C + 1e-5);
    cr_assert(fabs(o[4][r] - mu) <= 1e-5 * (1 + fabs(mu)), "layernorm mean [%zu]", r);
    cr_assert(fabs(o[5][r] - rs) <= 1e-5 * rs, "layernorm rstd [%zu]", r);
    for (size_t c = 0; c < C; c++) {
      double xh = (x[r * C + c] - mu) * rs;
      NEAR("layernorm_fwd", r * C + c, o[3][r * C + c], xh * g[c] + be[c], ldexp(fabs(xh * g[c]) + fabs(be[c]), -16));
    }
  }
  outputs_free(6, o);
  /* causal softmax of 0.7 x over stacks of C x C: probabilities, 2^-20 absolute for float32's exp and sums */
  struct rc_p sc = {2 * 64, 64, 0, 1, 0.7f};
  struct targ ts[2] = {{'b', 2 * 64 * 64, x}, {'b', 2 * 64 * 64, NULL}};
  o = outputs(2, ts);
  OK(run_on(host_dev(), 2, ts, b_sm_f, &sc, o));
  for (size_t r = 0; r < 2 * 64; r++) {
    size_t valid = r % 64 + 1;
    double mx = -INFINITY, s = 0;
    for (size_t c = 0; c < valid; c++)
      mx = fmax(mx, 0.7 * x[r * 64 + c]);
    for (size_t c = 0; c < valid; c++)
      s += exp(0.7 * x[r * 64 + c] - mx);
    for (size_t c = 0; c < 64; c++)
      NEAR("softmax_fwd", r * 64 + c, o[1][r * 64 + c], c < valid ? exp(0.7 * x[r * 64 + c] - mx) / s : 0, 0x1p-20);
  }
  outputs_free(2, o);
  /* cross-entropy against int32 targets, loss bfloat16: float32 log-sum-exp within 2^-16 of max |logit| */
  int32_t tgt[R];
  for (int r = 0; r < R; r++)
    tgt[r] = r % 9 == 4 ? -1 : (r * 31) % C;
  struct rc_p xr = {R, C, 0, 0, 0};
  struct targ tx[3] = {{'b', R * C, x}, {'i', R, tgt}, {'b', R, NULL}};
  o = outputs(3, tx);
  OK(run_on(host_dev(), 3, tx, b_xe_f, &xr, o));
  for (size_t r = 0; r < R; r++) {
    double mx = -INFINITY, s = 0;
    for (size_t c = 0; c < C; c++)
      mx = fmax(mx, x[r * C + c]);
    for (size_t c = 0; c < C; c++)
      s += exp(x[r * C + c] - mx);
    double want = tgt[r] < 0 ? 0 : mx + log(s) - x[r * C + tgt[r]];
    NEAR("cross_entropy_fwd", r, o[2][r], want, 3 * 0x1p-16);
  }
  outputs_free(3, o);
  free(x);
  free(g);
  free(be);
}

/* Attention: out is a weighted mean of value rows, so 2^-12 of max |v| covers float32 (it holds 2^-8 |out| beside);
** lse float32 within 1e-5. On the host and, where there is one, the first OpenCL device (kernels/attention.k). The
** host on AVX-512 BF16 (host-attn-bf16.c) rounds the probabilities to bfloat16 for P V, as FlashAttention and
** PyTorch's CPU flash attention do in bfloat16: each weight within 2^-9 of itself, so out within 2^-9 of max |v|
** (1 here) beside the output's own rounding. */
Test(bf16, attention_against_float64) {
  enum { B = 2, T = 29, H = 2, HD = 16, D = H * HD };
  float *qkv = rnd_bf(B * T * 3 * D, 21, -1, 1);
  struct attn_p ap = {B, T, H, HD, 1};
  struct targ t[3] = {{'b', B * T * 3 * D, qkv}, {'b', B * T * D, NULL}, {'f', B * H * T, NULL}};
  const int devs[2] = {host_dev(), tc_find_device("opencl", 0)};
  for (int dv = 0; dv < 2 && devs[dv] >= 0; dv++) {
    float **o = outputs(3, t);
    OK(run_on(devs[dv], 3, t, b_attn_f, &ap, o));
    double scale = 1 / sqrt((double)HD);
    for (int b = 0; b < B; b++)
      for (int h = 0; h < H; h++)
        for (int i = 0; i < T; i++) {
          const float *q = qkv + (b * T + i) * 3 * D + h * HD;
          double s[T], mx = -INFINITY, sum = 0;
          for (int j = 0; j <= i; j++) {
            const float *k = qkv + (b * T + j) * 3 * D + D + h * HD;
            s[j] = 0;
            for (int d = 0; d < HD; d++)
              s[j] += scale * q[d] * k[d];
            mx = fmax(mx, s[j]);
          }
          for (int j = 0; j <= i; j++)
            sum += exp(s[j] - mx);
          cr_assert(fabs(o[2][(b * H + h) * T + i] - (mx + log(sum))) <= 1e-5 * (1 + fabs(mx + log(sum))), "lse on device %d", devs[dv]);
          for (int d = 0; d < HD; d++) {
            double want = 0;
            for (int j = 0; j <= i; j++)
              want += exp(s[j] - mx) / sum * qkv[(b * T + j) * 3 * D + 2 * D + h * HD + d];
            size_t at = (size_t)((b * T + i) * D + h * HD + d);
            NEAR("attention_fwd", at, o[1][at], want, dv == 0 ? 0x1p-9 : 0x1p-12);
          }
        }
    outputs_free(3, o);
  }
  free(qkv);
}

/* Embedding: a bfloat16 table's rows copied bit for bit, widened exactly into float32, or a float32 table's rounded
** once; the gradient summed in float32 (1e-6 of sum |dout|) into float32 or (plus one rounding) bfloat16. */
Test(bf16, embedding_and_sumsq_against_float64) {
  enum { NT = 40, DIM = 33, V = 17 };
  int32_t tok[NT];
  for (int i = 0; i < NT; i++)
    tok[i] = i == 7 ? -3 : (i * 5) % V;
  float *table = rnd_bf(V * DIM, 31, -2, 2), *dout = rnd_bf(NT * DIM, 32, -1, 1);
  float *table32 = malloc(V * DIM * 4);
  tc_fill(table32, V * DIM, 33, -2, 2);
  struct emb_p ep = {NT, DIM, V, 1};
  for (int k = 0; k < 3; k++) {
    char tt = k == 2 ? 'f' : 'b', ot = k == 1 ? 'f' : 'b';
    const float *tab = k == 2 ? table32 : table;
    struct targ t[3] = {{'i', NT, tok}, {tt, V * DIM, tab}, {ot, NT * DIM, NULL}};
    float **o = outputs(3, t);
    OK(run_on(host_dev(), 3, t, b_emb_f, &ep, o));
    for (int i = 0; i < NT; i++)
      for (int d = 0; d < DIM; d++)
        cr_assert_eq(o[2][i * DIM + d],
                     tok[i] < 0 ? 0.0f : ot == 'b' ? rbf(tab[tok[i] * DIM + d]) : tab[tok[i] * DIM + d],
                     "embedding_fwd (%c table, %c out) [%d][%d]", tt, ot, i, d);
    outputs_free(3, o);
  }
  for (int k = 0; k < 2; k++) {
    char dt = k ? 'b' : 'f';
    struct targ t[3] = {{'i', NT, tok}, {'b', NT * DIM, dout}, {dt, V * DIM, table}};
    float **o = outputs(3, t);
    OK(run_on(host_dev(), 3, t, b_emb_b, &ep, o));
    for (int v = 0; v < V; v++)
      for (int d = 0; d < DIM; d++) {
        double want = table[v * DIM + d], mag = fabs(want);
        for (int i = 0; i < NT; i++)
          if (tok[i] == v)
            want += dout[i * DIM + d], mag += fabs(dout[i * DIM + d]);
        double got = o[2][v * DIM + d];
        if (dt == 'b')
          NEAR("embedding_bwd (bf16 table)", (size_t)(v * DIM + d), got, want, 1e-6 * mag);
        else
          cr_assert(fabs(got - want) <= 1e-6 * mag, "embedding_bwd [%d][%d]: %g, want %g", v, d, got, want);
      }
    outputs_free(3, o);
  }
  /* sumsq: double sums of the widened values, stored float32 */
  float start = 0.25f;
  struct rc_p ss = {NT * DIM, 0, 1, 0, 0};
  struct targ t[2] = {{'b', NT * DIM, dout}, {'f', 1, &start}};
  float **o = outputs(2, t);
  OK(run_on(host_dev(), 2, t, b_sumsq, &ss, o));
  double want = 0.25;
  for (int i = 0; i < NT * DIM; i++)
    want += (double)dout[i] * dout[i];
  cr_assert(fabs(o[1][0] - want) <= 1e-6 * want, "sumsq %g, want %g", (double)o[1][0], want);
  outputs_free(2, o);
  free(table);
  free(table32);
  free(dout);
}

/* conv2d composes im2col and GEMMs: bfloat16 x, w, y and work against the float32 op on the same values, within
** 2^-7 of the magnitude of the products (GEMMs of other libraries, a rounding of work and of y). */
static const struct strata_conv2d conv_g = {2, 3, 9, 8, 4, 3, 3, 1, 1};
static int b_conv_f(strata_queue_t q, strata_mem_t *m, const void *p) {
  (void)p;
  return strata_conv2d_fwd(q, &conv_g, m[0], m[1], m[2], m[3]);
}
static int b_conv_b(strata_queue_t q, strata_mem_t *m, const void *p) {
  (void)p;
  return strata_conv2d_bwd(q, &conv_g, m[0], m[1], m[2], m[3], m[4], m[5], 0);
}

Test(bf16, conv2d_near_float32) {
  int64_t pp, qq, ws;
  OK(strata_conv2d_shape(&conv_g, &pp, &qq, &ws));
  size_t nx = 2 * 3 * 9 * 8, nw = 4 * 3 * 3 * 3, ny = (size_t)(2 * 4 * pp * qq);
  float *x = rnd_bf(nx, 41, -1, 1), *w = rnd_bf(nw, 42, -1, 1), *dy = rnd_bf(ny, 43, -1, 1);
  for (int k = 0; k < 2; k++) {
    char t = k ? 'b' : 'f';
    struct targ fa[4] = {{t, nx, x}, {t, nw, w}, {t, ny, NULL}, {t, (size_t)ws, NULL}};
    struct targ ba[6] = {{t, nx, x}, {t, nw, w}, {t, ny, dy}, {t, nx, NULL}, {t, nw, NULL}, {t, (size_t)ws, NULL}};
    static float **fo[2], **bo[2];
    fo[k] = outputs(4, fa);
    bo[k] = outputs(6, ba);
    OK(run_on(host_dev(), 4, fa, b_conv_f, NULL, fo[k]));
    OK(run_on(host_dev(), 6, ba, b_conv_b, NULL, bo[k]));
    if (k == 1) {
      for (size_t i = 0; i < ny; i++)
        NEAR("conv2d_fwd y", i, fo[1][2][i], fo[0][2][i], 0x1p-7 * 27);
      for (size_t i = 0; i < nx; i++)
        NEAR("conv2d_bwd dx", i, bo[1][3][i], bo[0][3][i], 0x1p-7 * 36);
      for (size_t i = 0; i < nw; i++)
        NEAR("conv2d_bwd dw", i, bo[1][4][i], bo[0][4][i], 0x1p-7 * (double)(2 * pp * qq));
      for (int j = 0; j < 2; j++) {
        outputs_free(4, fo[j]);
        outputs_free(6, bo[j]);
      }
    }
  }
  free(x);
  free(w);
  free(dy);
}

/* ---- bad types ---- */

#define EXPECT(call, status, text)                                                                                     \
  do {                                                                                                                 \
    int rc_ = (call);                                                                                                  \
    cr_assert_eq(rc_, (status), "%s returned %s (%s)", #call, strata_err_name(rc_), strata_last_error());             \
    cr_assert(strstr(strata_last_error(), (text)), "%s: message '%s' lacks '%s'", #call, strata_last_error(), (text)); \
  } while (0)

Test(bf16, bad_types_are_errors) {
  int dev = host_dev();
  strata_queue_t q;
  strata_buffer_t b;
  OK(strata_queue_new(dev, &q));
  OK(strata_buffer_new(dev, 16384, &b));
  strata_mem_t f = strata_mem(b, 0), h = strata_mem_typed(b, 0, STRATA_BFLOAT16);
  strata_mem_t i = strata_mem_typed(b, 0, STRATA_INT32);
  EXPECT(strata_embedding_fwd(q, h, f, f, 4, 4, 4), STRATA_ERR_INVALID,
         "embedding_fwd: operand 'tokens' is bfloat16 but must be 4-byte int32 ids");
  EXPECT(strata_cross_entropy_fwd(q, h, h, f, 2, 4), STRATA_ERR_INVALID, "operand 'targets' is bfloat16");
  EXPECT(strata_tokens_shift(q, i, h, 4, 0, 2), STRATA_ERR_INVALID, "tokens_shift: operand 'out' is bfloat16");
  EXPECT(strata_maxpool_bwd(q, &pool_g, f, h, f), STRATA_ERR_INVALID, "maxpool_bwd: operand 'idx' is bfloat16");
  EXPECT(strata_gemm(q, 0, 0, 4, 4, 4, 1, h, 4, 0, f, 4, 0, 0, f, 4, 0, 1), STRATA_ERR_INVALID,
         "gemm: operands 'A' (bfloat16) and 'B' (float32) must share a type");
  EXPECT(strata_adamw(q, h, f, f, f, 4, 1e-3f, 0.9f, 0.999f, 1e-8f, 0, 1), STRATA_ERR_INVALID,
         "adamw: operand 'param' is bfloat16 but must be float32");
  EXPECT(strata_adamw(q, f, f, f, h, 4, 1e-3f, 0.9f, 0.999f, 1e-8f, 0, 1), STRATA_ERR_INVALID,
         "adamw: operand 'v' is bfloat16");
  EXPECT(strata_sumsq(q, h, 4, h, 0), STRATA_ERR_INVALID, "sumsq: operand 'out' is bfloat16 but must be float32");
  EXPECT(strata_gelu_fwd(q, i, f, 4), STRATA_ERR_INVALID, "gelu_fwd: operand 'x' is int32 but must be float32");
  EXPECT(strata_gelu_fwd(q, strata_mem_typed(b, 0, 7), f, 4), STRATA_ERR_INVALID,
         "gelu_fwd: operand 'x' has unknown element type 7");
  /* bounds count elements of the operand's type: 16384 bytes hold 8192 bfloat16 */
  OK(strata_scale(q, strata_mem_typed(b, 4096, STRATA_BFLOAT16), 2.0f, 4096));
  EXPECT(strata_scale(q, strata_mem_typed(b, 4097, STRATA_BFLOAT16), 2.0f, 4096), STRATA_ERR_RANGE,
         "needs 4096 elements from offset 4097 but its buffer holds 8192 of bfloat16");
  EXPECT(strata_convert(q, strata_mem_typed(b, 2, STRATA_BFLOAT16), strata_mem(b, 0), 8), STRATA_ERR_INVALID,
         "convert: operands 'x' and 'y' overlap");
  struct strata_conv2d cg = conv_g;
  EXPECT(strata_conv2d_fwd(q, &cg, h, h, h, f), STRATA_ERR_INVALID, "operands 'w' and 'work' must share a type");
  OK(strata_queue_finish(q));
  cr_assert_eq(strcmp(strata_dtype_name(STRATA_BFLOAT16), "bfloat16"), 0);
  cr_assert_eq(strata_dtype_size(STRATA_BFLOAT16), 2);
  cr_assert_eq(strata_dtype_size(STRATA_FLOAT32), 4);
  cr_assert_eq(strata_dtype_size(STRATA_INT32), 4);
  cr_assert_eq(strata_dtype_size(3), 0);
  strata_buffer_free(b);
  strata_queue_free(q);
}

/* ---- strata_linear: a linear layer's GEMM, bias and residual in one op ---- */

struct lin_p {
  int64_t rows, in, out;
  int res;
};
/* x w bias res y */
static int b_linear(strata_queue_t q, strata_mem_t *m, const void *p) {
  const struct lin_p *l = p;
  return strata_linear(q, l->rows, l->in, l->out, m[0], m[1], m[2], l->res ? m[3] : (strata_mem_t){0}, m[4]);
}
/* the same as the three ops it stands for */
static int b_linear_ops(strata_queue_t q, strata_mem_t *m, const void *p) {
  const struct lin_p *l = p;
  int rc = strata_gemm(q, 0, 0, l->rows, l->out, l->in, 1.0f, m[0], l->in, 0, m[1], l->out, 0, 0.0f, m[4], l->out,
                       0, 1);
  if (!rc)
    rc = strata_bias_add(q, m[4], m[2], l->rows, l->out);
  return rc || !l->res ? rc : strata_add(q, m[4], m[3], m[4], l->rows * l->out);
}

/*
** y = x w + bias (+ res) on the host and the first OpenCL device, against
** sums in double of the same values: 1e-5 of sum |x w| + |bias| + |res|
** (float32 sums), plus for a bfloat16 y 2^-8 of |x w| + |x w + bias| +
** |y| (a rounding after each op where they run apart; the host's fused
** matmul rounds once). Where the op runs as its three ops (every float32
** y; the OpenCL backend, which has no fused kernel), its bits are theirs.
*/
static void linear_check_on(int dev, const struct lin_p *l, char xt, char yt, char bt) {
  size_t nx = (size_t)(l->rows * l->in), nw = (size_t)(l->in * l->out), ny = (size_t)(l->rows * l->out);
  float *x = rnd_bf(nx, 31, -1, 1), *w = rnd_bf(nw, 32, -1, 1), *b = rnd_bf((size_t)l->out, 33, -2, 2),
        *r = rnd_bf(ny, 34, -4, 4), *y0 = rnd_bf(ny, 35, -1, 1);
  struct targ t[5] = {{xt, nx, x}, {xt, nw, w}, {bt, (size_t)l->out, b}, {yt, ny, r}, {yt, ny, y0}};
  float **o = outputs(5, t), **s = outputs(5, t);
  OK(run_on(dev, 5, t, b_linear, l, o));
  OK(run_on(dev, 5, t, b_linear_ops, l, s));
  char lb[16];
  struct strata_device_props props;
  OK(strata_device_props(dev, &props));
  snprintf(lb, sizeof lb, "%s", props.backend);
  for (int64_t i = 0; i < l->rows; i++)
    for (int64_t j = 0; j < l->out; j++) {
      size_t at = (size_t)(i * l->out + j);
      double dot = 0, mag = 0;
      for (int64_t p = 0; p < l->in; p++) {
        double v = (double)x[i * l->in + p] * w[p * l->out + j];
        dot += v;
        mag += fabs(v);
      }
      double rv = l->res ? (double)r[at] : 0, want = dot + b[j] + rv;
      double tol = 1e-5 * (mag + fabs(b[j]) + fabs(rv)) +
                   (yt == 'b' ? BF16_REL * (fabs(dot) + fabs(dot + b[j]) + fabs(want)) : 0);
      cr_assert(fabs(o[4][at] - want) <= tol,
                "linear on %s %lldx%lldx%lld x %c y %c bias %c res %d: y[%lld][%lld] = %.8g, want %.8g (tol %.3g)", lb,
                (long long)l->rows, (long long)l->in, (long long)l->out, xt, yt, bt, l->res, (long long)i,
                (long long)j, (double)o[4][at], want, tol);
      if (yt == 'f' || strcmp(lb, "host") != 0)
        cr_assert(memcmp(&o[4][at], &s[4][at], 4) == 0, "linear on %s (y %c): y[%zu] = %a, its three ops' %a", lb, yt,
                  at, (double)o[4][at], (double)s[4][at]);
    }
  for (size_t i = 0; i < ny; i++) /* the residual is read, not written */
    cr_assert(memcmp(&o[3][i], &s[3][i], 4) == 0, "linear on %s wrote its residual [%zu]", lb, i);
  outputs_free(5, o);
  outputs_free(5, s);
  free(x), free(w), free(b), free(r), free(y0);
}

Test(bf16, linear_against_float64_and_its_three_ops) {
  const int devs[2] = {host_dev(), tc_find_device("opencl", 0)};
  /* a small odd shape, and one large enough for oneDNN's blocked (brgemm) kernels */
  const struct lin_p shapes[2] = {{37, 29, 53, 0}, {256, 320, 192, 0}};
  for (int dv = 0; dv < 2 && devs[dv] >= 0; dv++)
    for (int si = 0; si < 2; si++)
      for (int res = 0; res < 2; res++) {
        struct lin_p l = shapes[si];
        l.res = res;
        linear_check_on(devs[dv], &l, 'b', 'b', 'f'); /* training's types: bf16 rows, a float32 bias */
        linear_check_on(devs[dv], &l, 'b', 'b', 'b');
        linear_check_on(devs[dv], &l, 'b', 'f', 'f');
        linear_check_on(devs[dv], &l, 'f', 'f', 'f'); /* float32: the three ops' bits */
      }
  cr_assert(!strstr(log_text, "no fused oneDNN matmul") || !strstr(log_text, "256x192x320"),
            "the large shape was not fused: %s", log_text);
}

/* Bad input: one line, nothing run. */
Test(bf16, linear_bad_input_is_an_error) {
  int dev = host_dev();
  strata_queue_t q;
  OK(strata_queue_new(dev, &q));
  strata_buffer_t b;
  OK(strata_buffer_new(dev, 4096, &b));
  strata_mem_t m = strata_mem(b, 0), m16 = strata_mem_typed(b, 0, STRATA_BFLOAT16);
  cr_assert_eq(strata_linear(q, 4, 4, 4, m, m, m, strata_mem(b, 100), strata_mem(b, 90)), STRATA_ERR_INVALID);
  cr_assert(strstr(strata_last_error(), "overlaps"), "%s", strata_last_error());
  cr_assert_eq(strata_linear(q, 4, 4, 4, m16, m, m, (strata_mem_t){0}, strata_mem(b, 100)), STRATA_ERR_INVALID);
  cr_assert(strstr(strata_last_error(), "must share a type"), "%s", strata_last_error());
  cr_assert_eq(strata_linear(q, 0, 4, 4, m, m, m, (strata_mem_t){0}, strata_mem(b, 100)), STRATA_ERR_SHAPE);
  cr_assert_eq(strata_linear(q, 4, 4, 1000, m, m, m, (strata_mem_t){0}, strata_mem(b, 100)), STRATA_ERR_RANGE);
  strata_buffer_free(b);
  strata_queue_free(q);
}

/* ---- OpenCL (PoCL) against the host ---- */

/* The first OpenCL device, or a skip saying there is none. */
static int ocl_dev(void) {
  int d = tc_find_device("opencl", 0);
  if (d < 0)
    cr_skip_test("no OpenCL device (PoCL): %s", strata_last_error());
  return d;
}

/* Ops whose float32 arithmetic is the same expression in the same order on both backends: their outputs must be the
** host's bit for bit. */
static int same_arithmetic(const char *name) {
  static const char *const exact[] = {"convert",   "fill",          "add",           "scale",
                                      "bias_add",  "relu_fwd",      "relu_bwd",      "embedding_fwd",
                                      "maxpool_fwd", "maxpool_bwd", "embedding_bwd", "embedding_bwd accumulate"};
  for (size_t i = 0; i < sizeof exact / sizeof *exact; i++)
    if (strcmp(name, exact[i]) == 0)
      return 1;
  return 0;
}

/*
** One op case on the OpenCL device and on the host with the same typed
** operands (as same_as_f32 types them) from the same values. Outputs of
** the ops of same_arithmetic are bit-identical; the others' each within
** 2^-7 of itself (both round a float32 result once, and two float32 results
** a few ulps apart may round one bfloat16 step apart: 2^-8 to 2^-7 of the
** value) plus 1e-4 of the operand's largest magnitude (float32 sums in
** another order: work-group trees against the host's loops, and PoCL's exp,
** log and tanh against the host's; the fused attention's online softmax and
** per-item sums against the host's blocks).
*/
static void same_as_host(const struct opcase *c, int variant) {
  if (strstr(c->name, "bad values")) /* the host's own bits (same_as_f32); OpenCL's GELU(-inf) is -inf, not NaN */
    return;
  int nargs = (int)strlen(c->kinds), host = host_dev(), ocl = tc_find_device("opencl", 0);
  struct targ t[MAXA];
  float *rounded[MAXA] = {0};
  for (int i = 0; i < nargs; i++) {
    char k = c->kinds[i];
    const void *init = c->init[i];
    if (k == 'x' && init) {
      rounded[i] = malloc(c->n[i] * 4);
      for (size_t j = 0; j < c->n[i]; j++)
        rounded[i][j] = rbf(((const float *)init)[j]);
      init = rounded[i];
    }
    t[i] = (struct targ){k == 'x' ? (variant == 0 || (variant == 1) == (i % 2 == 0) ? 'b' : 'f') : k, c->n[i], init};
  }
  float **oo = outputs(nargs, t), **oh = outputs(nargs, t);
  int rc = run_on(ocl, nargs, t, c->body, c->p, oo);
  cr_assert_eq(rc, STRATA_OK, "%s (variant %d) on OpenCL: %s", c->name, variant, strata_last_error());
  OK(run_on(host, nargs, t, c->body, c->p, oh));
  int exact = same_arithmetic(c->name);
  for (int i = 0; i < nargs; i++) {
    if (t[i].type == 'i')
      continue;
    double top = 0;
    for (size_t j = 0; j < c->n[i]; j++)
      top = fabs(oh[i][j]) > top ? fabs(oh[i][j]) : top;
    for (size_t j = 0; j < c->n[i]; j++) {
      if (exact) {
        cr_assert(memcmp(&oo[i][j], &oh[i][j], 4) == 0, "%s (variant %d): operand %d [%zu] is %a, the host's %a",
                  c->name, variant, i, j, (double)oo[i][j], (double)oh[i][j]);
        continue;
      }
      double tol = (t[i].type == 'b' ? 1.0 / 128 : 1e-5) * fabs(oh[i][j]) + 1e-4 * top;
      cr_assert(fabs((double)oo[i][j] - oh[i][j]) <= tol || (isnan(oo[i][j]) && isnan(oh[i][j])),
                "%s (variant %d): %s operand %d [%zu] is %.8g, the host's %.8g (tol %.3g)", c->name, variant,
                t[i].type == 'b' ? "bf16" : "fp32", i, j, (double)oo[i][j], (double)oh[i][j], tol);
    }
  }
  outputs_free(nargs, oo);
  outputs_free(nargs, oh);
  for (int i = 0; i < nargs; i++)
    free(rounded[i]);
}

Test(bf16, opencl_ops_match_the_host, .timeout = 600) {
  ocl_dev();
  each_op_case(same_as_host);
}

/* The kernels' rounding (kernels/dialect.h) against the test's own: every pattern, a million random floats, and every
** bfloat16 there and back. */
Test(bf16, opencl_convert_rounds_as_the_host) {
  int dev = ocl_dev();
  convert_matches_reference(dev);
  round_trip_on(dev);
}

/* strata's GEMM kernels (kernels/gemm.k: PoCL's CPU devices) read bf16 A and B and sum in float32. */
Test(bf16, opencl_gemm_strata_kernels) {
  setenv("STRATA_OPENCL_GEMM", "strata", 1);
  gemm_shapes(ocl_dev());
}

/* CLBlast has no bf16 GEMM: it runs in float32 on converted operands, and the log says so once per device. */
Test(bf16, opencl_gemm_clblast_in_float32) {
  setenv("STRATA_OPENCL_GEMM", "clblast", 1);
  gemm_shapes(ocl_dev());
  const char *say = "run in float32 on converted operands";
  const char *first = strstr(log_text, say);
  cr_assert(first, "the log does not say how bf16 GEMMs run: %s", log_text);
  cr_assert(!strstr(first + 1, say), "said more than once for one device: %s", log_text);
}

/* ---- a pipeline in bf16 on PoCL devices against host devices ---- */

#define PIPE_STEPS 6

/* Six steps' losses of a small GPT in bf16 on the 2-stage pipeline over devices d0 and d1. */
static void pipeline_losses(strata_dataset_t ds, int d0, int d1, float *loss) {
  struct strata_model_config c = {.kind = STRATA_MODEL_GPT, .vocab = 256, .context = 8, .d_model = 16,
                                  .layers = 4, .heads = 2, .d_ff = 32};
  strata_model_t m;
  OK(strata_model_from_config(&c, &m));
  char text[256];
  snprintf(text, sizeof text, "{\"dp\":1,\"pp\":2,\"tp\":1,\"schedule\":\"1f1b\",\"microbatches\":4,\"devices\":[%d,%d]}",
           d0, d1);
  strata_layout_t l;
  OK(strata_layout_from_json(text, "bf16 pipeline", &l));
  struct strata_train_options o;
  strata_train_options_default(&o);
  o.batch = 2;
  o.accum = 1;
  o.steps = PIPE_STEPS;
  o.warmup = 2;
  o.lr = 1e-2f;
  o.eps = 1e-6f; /* as test-parallel.c: gradients near eps would move AdamW's steps by their last bits */
  o.precision = STRATA_BFLOAT16;
  strata_trainer_t tr;
  OK(strata_trainer_new_layout(m, ds, &o, l, NULL, &tr));
  for (int s = 0; s < PIPE_STEPS; s++) {
    struct strata_step_stats st;
    OK(strata_trainer_step(tr, &st));
    loss[s] = st.loss;
  }
  strata_trainer_free(tr);
  strata_layout_free(l);
  strata_model_free(m);
}

/*
** pp 2 (1F1B, 4 micro-batches) in bf16 over two PoCL devices tracks the same pipeline over two host devices. Both
** round the same float32 results to bf16 where the arithmetic is the same expression (elementwise ops, conversions,
** the embedding); GEMMs, row reductions and exp/tanh sum or approximate differently, so a bf16 activation or weight
** copy now and then lands one step (2^-8) apart and the difference grows with each AdamW step. Bound: 5e-3 relative
** on each of six steps' losses (the for bf16 layouts against one device); see the log for the measured worst.
*/
Test(bf16, opencl_pipeline_tracks_host_pipeline, .timeout = 600) {
  setenv("STRATA_HOST_DEVICES", "2", 1);
  setenv("STRATA_BACKENDS", "host,opencl", 1);
  int o0 = tc_find_device("opencl", 0), o1 = tc_find_device("opencl", 1);
  if (o0 < 0 || o1 < 0)
    cr_skip_test("fewer than two OpenCL devices (POCL_DEVICES=\"pthread pthread\" gives two)");
  char dir[256], corpus[300];
  snprintf(dir, sizeof dir, "%s/strata-bf16-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  cr_assert_not_null(mkdtemp(dir));
  snprintf(corpus, sizeof corpus, "%s/corpus.txt", dir);
  FILE *f = fopen(corpus, "w");
  cr_assert_not_null(f);
  for (int i = 0; i < 300; i++)
    fprintf(f, "stage %d of a pipeline passes its activations on in bf16; the last one computes the loss. ", i % 5);
  fclose(f);
  strata_dataset_t ds;
  OK(strata_dataset_text(corpus, 0.2, &ds));
  float host[PIPE_STEPS], ocl[PIPE_STEPS];
  pipeline_losses(ds, tc_find_device("host", 0), tc_find_device("host", 1), host);
  pipeline_losses(ds, o0, o1, ocl);
  double worst = 0;
  for (int s = 0; s < PIPE_STEPS; s++) {
    double rel = fabs((double)ocl[s] - host[s]) / fabs((double)host[s]);
    worst = rel > worst ? rel : worst;
    cr_assert(rel <= 5e-3, "step %d: loss %.7g on PoCL, %.7g on host devices (%.2g relative)", s + 1, ocl[s], host[s],
              rel);
  }
  cr_log_info("bf16 pp 2 on PoCL against host devices: worst %.2g relative over %d steps", worst, PIPE_STEPS);
  strata_dataset_free(ds);
  tc_remove_dir(dir);
}
