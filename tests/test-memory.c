/* SPDX-License-Identifier: MIT */
/* test-memory.c — the one memory model (lib/model/stage.c, ranges.c): a stage's bytes summed from its layers' figures
** are what the stage really allocates through the device layer, and every cut's bytes weighed at once (the
** balancers' and the planner's search) equal the bytes of the stage built alone. Built from the model's sources, with
** the library for everything public. */
#include "common.h"

#include "model/stage.h"

TestSuite(memory, .timeout = 120);

static strata_model_t model_of(const struct strata_model_config *c) {
  strata_model_t m;
  OK(strata_model_from_config(c, &m));
  return m;
}

/* The models the trainer cuts: GPTs whose vocabulary tp 2 splits (256) or not (255), an MLP and CNNs whose tp
** pairs a cut can separate, a llama. */
static int models(strata_model_t *out) {
  struct strata_model_config g = {.kind = STRATA_MODEL_GPT, .vocab = 256, .context = 8, .d_model = 16, .layers = 4,
                                  .heads = 2, .d_ff = 32};
  struct strata_model_config odd = g;
  odd.vocab = 255;
  struct strata_model_config mlp = {.kind = STRATA_MODEL_MLP, .image = 8, .channels = 1, .classes = 3,
                                    .hidden = {32, 16, 8, 0}};
  struct strata_model_config cnn = {.kind = STRATA_MODEL_CNN, .image = 8, .channels = 1, .classes = 3,
                                    .conv = {4, 8, 0}};
  out[0] = model_of(&g);
  out[1] = model_of(&odd);
  out[2] = model_of(&mlp);
  out[3] = model_of(&cnn);
  /* cnn-hires's layers, small: filters of 3, 5 and 7, a stride, unpooled layers, the global average pool */
  struct strata_model_config hires = {.kind = STRATA_MODEL_CNN, .image = 16, .channels = 1, .classes = 3,
                                      .conv = {4, 8, 4}, .kernel = {3, 5, 7}, .stride = {1, 2, 1}, .pool = {2, 1, 1},
                                      .gap = 1};
  out[4] = model_of(&hires);
  /* a llama: grouped-query attention (tp 2 gives each slice one key/value head), RoPE's table on every stage */
  struct strata_model_config llama = {.kind = STRATA_MODEL_LLAMA, .vocab = 256, .context = 8, .d_model = 16,
                                      .layers = 3, .heads = 4, .kv_heads = 2, .d_ff = 24};
  out[5] = model_of(&llama);
  return 6;
}

static int same(const struct strata__stage_bytes *a, const struct strata__stage_bytes *b) {
  return a->params == b->params && a->fixed == b->fixed && a->slot == b->slot && a->grad == b->grad &&
         a->in == b->in && a->out == b->out && a->recompute == b->recompute && a->dsave == b->dsave &&
         a->comm == b->comm && a->send == b->send;
}

/* Every [a, b) of every model, tp 1 and 2 (each slice), ZeRO 1 and 3 shards (stage 1, 2 and 3: the gradients whole,
** or their shard and a window, and with 3 the parameters' too), split backward or not, 1 and 3 samples per
** micro-batch, fp32 and bf16, and (GPTs, the llama) each recompute mode (with a split backward too) and, at tp 2, sequence
** parallelism or not (without a split backward): the
** constant-time figures are the stage's. */
Test(memory, every_cut_weighed_at_once_is_the_stage_alone) {
  strata_model_t m[6];
  const int n = models(m);
  int checked = 0;
  for (int i = 0; i < n; i++)
    for (int tp = 1; tp <= 2; tp++)
      for (int slice = 0; slice < tp; slice++)
        for (int zero = 1; zero <= 3; zero += 2)
          for (int zs = 1; zs <= 3; zs++)
          for (int split = 0; split <= 1; split++)
            for (int64_t mb = 1; mb <= 3; mb += 2)
            for (int bf = 0; bf <= 1; bf++)
            for (int rc = 0; rc <= (i < 2 || i == 5 ? STRATA_RECOMPUTE_FULL : 0); rc++)
            for (int sq = 0; sq <= ((i < 2 || i == 5) && !split && tp > 1); sq++) {
              const struct strata__cut cut = {{slice, tp}, {0, zero}, bf ? STRATA_BFLOAT16 : STRATA_FLOAT32,
                                              bf ? STRATA_BFLOAT16 : STRATA_FLOAT32, rc, zs, {0, 1}, sq};
              struct strata__stage_ranges *r;
              OK(strata__stage_ranges_new(m[i], mb, split, &cut, &r));
              const int L = strata_model_layer_count(m[i]);
              for (int a = 0; a < L; a++)
                for (int b = a + 1; b <= L; b++) {
                  struct strata__stage_bytes want, got;
                  OK(strata__stage_plan(m[i], a, b, mb, split, &cut, &want));
                  OK(strata__stage_ranges_bytes(r, a, b, &got));
                  cr_assert(same(&got, &want),
                            "model %d tp %d.%d zero %d.%d split %d mb %lld bf16 %d recompute %d sp %d, layers [%d, %d): "
                            "weighed fixed %llu slot %llu grad %llu params %llu, alone fixed %llu slot %llu grad %llu "
                            "params %llu",
                            i, slice, tp, zero, zs, split, (long long)mb, bf, rc, sq, a, b, (unsigned long long)got.fixed,
                            (unsigned long long)got.slot, (unsigned long long)got.grad, (unsigned long long)got.params,
                            (unsigned long long)want.fixed, (unsigned long long)want.slot,
                            (unsigned long long)want.grad, (unsigned long long)want.params);
                  checked++;
                }
              strata__stage_ranges_free(r);
            }
  cr_assert_gt(checked, 1000);
  for (int i = 0; i < n; i++)
    strata_model_free(m[i]);
}

/* The figures against the runtime's accounting: a stage built on a host device allocates its fixed bytes, and a
** slot taken for a micro-batch adds one slot's activations and boundary gradients, byte for byte, in fp32 and in bf16
** (where the fixed bytes hold the weights' bf16 copy and, with tp, the float32 copy a join sums in), and in each
** recompute mode of a GPT or a llama (the fixed bytes hold the one-block buffer; the slot keeps less), with and
** without sequence parallelism at tp 2; a split backward's dsave regions (its pool, apart from the slots) one figure
** each. */
Test(memory, the_figures_are_what_a_stage_allocates) {
  setenv("STRATA_HOST_DEVICES", "1", 0);
  setenv("STRATA_BACKENDS", "host", 0);
  strata_model_t m[6];
  const int n = models(m);
  int dev = tc_find_device("host", 0);
  cr_assert_geq(dev, 0);
  for (int i = 0; i < n; i++)
    for (int tp = 1; tp <= 2; tp++)
      for (int split = 0; split <= 1; split++)
      for (int zs = 1; zs <= 3; zs++)
      for (int bf = 0; bf <= 1; bf++)
      for (int rc = 0; rc <= (i < 2 || i == 5 ? STRATA_RECOMPUTE_FULL : 0); rc++)
      for (int sq = 0; sq <= ((i < 2 || i == 5) && !split && tp > 1); sq++) {
        const int L = strata_model_layer_count(m[i]);
        for (int a = 0; a < L; a++)
          for (int b = a + 1; b <= L; b++) {
            const struct strata__cut cut = {{tp - 1, tp}, {1, 2}, bf ? STRATA_BFLOAT16 : STRATA_FLOAT32, STRATA_FLOAT32,
                                            rc, zs, {0, 1}, sq};
            struct strata__stage_bytes want;
            OK(strata__stage_plan(m[i], a, b, 2, split, &cut, &want));
            uint64_t before, after, taken;
            OK(strata_device_memory(dev, &before, NULL, NULL));
            struct strata__stage *st;
            OK(strata__stage_new(m[i], a, b, dev, 2, 7, split, &cut, &st));
            OK(strata_device_memory(dev, &after, NULL, NULL));
            cr_assert_eq(after - before, want.fixed,
                         "model %d tp %d split %d zero stage %d rc %d sp %d [%d, %d): allocated %llu, figured %llu", i,
                         tp, split, zs, rc, sq, a, b, (unsigned long long)(after - before), (unsigned long long)want.fixed);
            cr_assert_eq(st->rc_units * 4, want.recompute, "model %d rc %d [%d, %d): a recompute buffer of %zu units",
                         i, rc, a, b, st->rc_units);
            int s;
            OK(strata__stage_slot_take(st, &s));
            OK(strata__stage_acquire(st, s));
            OK(strata_device_memory(dev, &taken, NULL, NULL));
            cr_assert_eq(taken - after, want.slot + want.grad,
                         "model %d tp %d split %d [%d, %d): a slot took %llu, figured %llu + %llu", i, tp, split, a, b,
                         (unsigned long long)(taken - after), (unsigned long long)want.slot,
                         (unsigned long long)want.grad);
            /* the output apart from the slots: one buffer of the trainer's output pool (strata__pipeline_prefill) */
            cr_assert_eq(st->out_apart ? (uint64_t)strata__stage_out_units(st) * 4 : 0, want.send,
                         "model %d split %d [%d, %d): an output buffer of %llu bytes, figured %llu", i, split, a, b,
                         (unsigned long long)(st->out_apart ? strata__stage_out_units(st) * 4 : 0),
                         (unsigned long long)want.send);
            cr_assert(st->out_apart || b == L || (split && a == 0 && b == 1 && i != 2 && i != 3 && i != 4),
                      "model %d split %d [%d, %d): the stage's output kept in its slots", i, split, a, b);
            /* a split backward's dsave region: what a BI takes from the device's cache, one region of the figure */
            uint64_t pooled;
            OK(strata__stage_dsave_take(st, s));
            OK(strata_device_memory(dev, &pooled, NULL, NULL));
            cr_assert_eq(pooled - taken, split ? want.dsave : 0, "model %d tp %d split %d [%d, %d): a dsave region "
                         "took %llu, figured %llu", i, tp, split, a, b, (unsigned long long)(pooled - taken),
                         (unsigned long long)want.dsave);
            strata__stage_dsave_give(st, s);
            cr_assert(split || want.dsave == 0, "model %d [%d, %d): a dsave region without a split backward", i, a, b);
            strata__stage_free(st);
          }
      }
  for (int i = 0; i < n; i++)
    strata_model_free(m[i]);
}

/* Issue 35: a split backward's dsave region (the gradients a W reads, kept from its BI) exactly where a layer's BI
** would overwrite what its W reads: a GPT's or a llama's layers without recomputation, ZeRO-2/3 or seqpar fold their
** W's gradients into what only their BI read (strata__stage_folds) and keep none, in every cut, fp32 and bf16, tp 1
** and 2; with recomputation (W recomputes from what BI overwrote) or a ZeRO-2 gradient window (taken in W) every cut
** keeps one, and so do the MLP's and CNNs' layers. */
Test(memory, a_dsave_region_only_where_bi_would_overwrite_what_w_reads) {
  strata_model_t m[6];
  const int n = models(m);
  for (int tp = 1; tp <= 2; tp++)
    for (int bf = 0; bf <= 1; bf++)
      for (int i = 0; i < n; i++) {
        const int L = strata_model_layer_count(m[i]), text = i < 2 || i == 5;
        for (int a = 0; a < L; a++)
          for (int b = a + 1; b <= L; b++) {
            const struct strata__cut cut = {{tp - 1, tp}, {0, 1}, bf ? STRATA_BFLOAT16 : STRATA_FLOAT32,
                                            STRATA_FLOAT32, STRATA_RECOMPUTE_NONE, 0, {0, 1}, 0};
            struct strata__stage_bytes got;
            OK(strata__stage_plan(m[i], a, b, 2, 1, &cut, &got));
            cr_assert((got.dsave == 0) == text, "model %d tp %d bf16 %d [%d, %d): a dsave region of %llu bytes", i, tp,
                      bf, a, b, (unsigned long long)got.dsave);
            if (!text)
              continue;
            struct strata__cut rc = cut, z2 = cut;
            rc.recompute = STRATA_RECOMPUTE_SELECTIVE;
            z2.zero = (struct strata__shard){0, 2};
            z2.zero_stage = 2;
            OK(strata__stage_plan(m[i], a, b, 2, 1, &rc, &got));
            cr_assert_gt(got.dsave, 0, "model %d [%d, %d) with recomputation: no dsave region", i, a, b);
            OK(strata__stage_plan(m[i], a, b, 2, 1, &z2, &got));
            cr_assert_gt(got.dsave, 0, "model %d [%d, %d) with ZeRO-2: no dsave region", i, a, b);
          }
      }
  for (int i = 0; i < n; i++)
    strata_model_free(m[i]);
}

/* ZeRO-1's scratch: a stage's gradient reduce-scatter over 2 replicas, run as the trainer runs it (in place, each
** replica keeping its shard: fp32 sums, or through the bf16 copy) through a communicator of two host devices at
** lib/comm's defaults, takes on each device what the stage's `comm` figure says, byte for byte: every cut of a GPT
** whose shards go direct (up to 32 KiB) or round the ring (a chunk and two shards), and the whole small models'. */
Test(memory, zero1_reduce_scatter_scratch_is_the_figure) {
  setenv("STRATA_HOST_DEVICES", "2", 1);
  setenv("STRATA_BACKENDS", "host", 1);
  strata_shutdown(); /* the host backend reads the settings when it starts */
  strata_model_t m[7];
  models(m);
  struct strata_model_config big = {.kind = STRATA_MODEL_GPT, .vocab = 256, .context = 8, .d_model = 64, .layers = 2,
                                    .heads = 2, .d_ff = 128};
  m[6] = model_of(&big);
  const int dev[2] = {tc_find_device("host", 0), tc_find_device("host", 1)};
  cr_assert_geq(dev[1], 0, "needs 2 host virtual devices");
  int direct = 0, ring = 0;
  for (int i = 0; i < 7; i++)
    for (int bf = 0; bf <= 1; bf++) {
      const int L = strata_model_layer_count(m[i]);
      for (int a = 0; a < L; a++)
        for (int b = a + 1; b <= L; b++) {
          if (i != 6 && (a != 0 || b != L))
            continue; /* the small models whole, the larger GPT every cut */
          const int dt = bf ? STRATA_BFLOAT16 : STRATA_FLOAT32;
          const struct strata__cut cut = {{0, 1}, {0, 2}, STRATA_FLOAT32, dt, STRATA_RECOMPUTE_NONE, 1, {0, 1}, 0};
          struct strata__stage_bytes want;
          OK(strata__stage_plan(m[i], a, b, 2, 0, &cut, &want));
          struct strata__stage *st;
          OK(strata__stage_new(m[i], a, b, dev[0], 2, 7, 0, &cut, &st));
          const size_t chunk = st->chunk, es = strata_dtype_size(dt);
          strata__stage_free(st);
          strata_comm_t c;
          OK(strata_comm_new(dev, 2, NULL, &c));
          strata_queue_t q[2];
          strata_buffer_t g[2];
          strata_mem_t send[2], recv[2];
          uint64_t before[2], after[2];
          for (int r = 0; r < 2; r++) {
            OK(strata_queue_new(dev[r], &q[r]));
            OK(strata_buffer_new(dev[r], 2 * chunk * es, &g[r]));
            send[r] = strata_mem_typed(g[r], 0, dt);
            recv[r] = strata_mem_typed(g[r], (size_t)r * chunk, dt);
          }
          for (int r = 0; r < 2; r++)
            OK(strata_device_memory(dev[r], &before[r], NULL, NULL));
          OK(strata_reducescatter(c, q, send, recv, chunk, dt, STRATA_SUM));
          OK(strata_comm_finish(c));
          for (int r = 0; r < 2; r++) {
            OK(strata_device_memory(dev[r], &after[r], NULL, NULL));
            cr_assert_eq(after[r] - before[r], want.comm,
                         "model %d [%d, %d) %s, a shard of %zu: device %d took %llu bytes of scratch, figured %llu", i,
                         a, b, strata_dtype_name(dt), chunk, r, (unsigned long long)(after[r] - before[r]),
                         (unsigned long long)want.comm);
          }
          *(chunk * es <= (32u << 10) ? &direct : &ring) += 1;
          strata_comm_free(c);
          for (int r = 0; r < 2; r++) {
            strata_buffer_free(g[r]);
            strata_queue_free(q[r]);
          }
        }
    }
  cr_assert(direct > 0 && ring > 0, "%d direct and %d ring cases", direct, ring);
  for (int i = 0; i < 7; i++)
    strata_model_free(m[i]);
}

/* A text dataset (a tenth held out) of `lines` numbered copies of `sentence`, written into a new temporary directory
** whose path goes to dir (256 bytes; the caller removes it with tc_remove_dir). */
static strata_dataset_t corpus(char *dir, int lines, const char *sentence) {
  char path[300];
  snprintf(dir, 256, "%s/strata-mem-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  cr_assert_not_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/corpus.txt", dir);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  for (int i = 0; i < lines; i++)
    fprintf(f, "line %d: %s ", i, sentence);
  fclose(f);
  strata_dataset_t ds;
  OK(strata_dataset_text(path, 0.1, &ds));
  return ds;
}

/* One training step of a 2-block GPT (d_model 64, 2 heads) of context `context`, batch 1, on device `dev`: the
** runtime's accounting of its peak bytes there (strata-train --json's devices[].peak_bytes). */
static uint64_t gpt_step_peak(strata_dataset_t ds, int dev, int64_t context) {
  struct strata_model_config c = {.kind = STRATA_MODEL_GPT, .vocab = 256, .context = context, .d_model = 64,
                                  .layers = 2, .heads = 2, .d_ff = 128};
  strata_model_t m = model_of(&c);
  struct strata_train_options o;
  strata_train_options_default(&o);
  o.batch = 1;
  o.steps = 1;
  o.warmup = 1;
  o.device = dev;
  strata_trainer_t tr;
  OK(strata_trainer_new(m, ds, &o, &tr));
  struct strata_step_stats s;
  OK(strata_trainer_step(tr, &s));
  cr_assert(isfinite(s.loss), "context %lld: loss %g", (long long)context, (double)s.loss);
  struct strata_train_report rep;
  OK(strata_trainer_report(tr, &rep));
  cr_assert_eq(rep.devices, 1);
  uint64_t peak = rep.dev[0].peak_bytes;
  strata_trainer_free(tr);
  strata_model_free(m);
  return peak;
}

/* The fused attention keeps per query a log-sum-exp, no context x context matrix: a GPT's peak bytes on a PoCL device
** (and on the host) grow at most 5.5 times from context 256 to 1024 (linear parts 4 times; with the T x T scores and
** probabilities kept they grew about 10 times). */
Test(memory, attention_memory_grows_linearly_with_the_context) {
  setenv("STRATA_HOST_DEVICES", "1", 1);
  setenv("STRATA_BACKENDS", "host,opencl", 1);
  char dir[256];
  strata_dataset_t ds = corpus(dir, 600, "attention keeps one number per query for its backward pass.");
  const char *const backends[] = {"opencl", "host"};
  for (int b = 0; b < 2; b++) {
    int dev = tc_find_device(backends[b], 0);
    if (dev < 0) {
      cr_assert_eq(b, 0, "no host device");
      cr_log_warn("no OpenCL device (PoCL): the host only");
      continue;
    }
    uint64_t p256 = gpt_step_peak(ds, dev, 256), p1024 = gpt_step_peak(ds, dev, 1024);
    double ratio = (double)p1024 / (double)p256;
    cr_log_info("%s: peak %llu bytes at context 256, %llu at 1024: %.2fx", backends[b], (unsigned long long)p256,
                (unsigned long long)p1024, ratio);
    cr_assert_leq(ratio, 5.5, "%s: peak %llu bytes at context 256, %llu at 1024 (%.2fx)", backends[b],
                  (unsigned long long)p256, (unsigned long long)p1024, ratio);
    cr_assert_gt(ratio, 1.0, "%s: the longer context must need more", backends[b]);
  }
  strata_dataset_free(ds);
  tc_remove_dir(dir);
}

/* llama3-8b's parameter bytes are its 8,030,261,248 parameters' (float32 parameters, gradients and AdamW's two
** moments: 16 bytes each), whole and under ZeRO-1 over 8 replicas (the moments' shard, rounded up to a float). */
Test(memory, llama3_8b_parameter_bytes_are_its_parameter_count) {
  strata_model_t m;
  OK(strata_model_from_preset("llama3-8b", &m));
  const uint64_t P = 8030261248ull;
  cr_assert_eq(strata_model_params(m), P);
  const int L = strata_model_layer_count(m);
  struct strata__stage_bytes b;
  OK(strata__stage_plan(m, 0, L, 1, 0, NULL, &b));
  cr_assert_eq(b.params, 16 * P, "%llu bytes for %llu parameters", (unsigned long long)b.params,
               (unsigned long long)P);
  const struct strata__cut z8 = {{0, 1}, {3, 8}, STRATA_FLOAT32, STRATA_FLOAT32, STRATA_RECOMPUTE_NONE, 1, {0, 1}, 0};
  OK(strata__stage_plan(m, 0, L, 1, 0, &z8, &b));
  const uint64_t chunk = (P + 7) / 8;
  cr_assert_eq(b.params, 2 * 4 * 8 * chunk + 2 * 4 * chunk);
  strata_model_free(m);
}

/* The runtime's accounting of each device's activation bytes (strata_train_device_stats.activation_bytes) for a
** pipeline of `kind` over p host devices, m micro-batches of one sample, cut by `split` (acts[p]). */
static void pipeline_acts(strata_model_t m, strata_dataset_t ds, const int *h, int p, int kind, int mbs,
                          const int *split, uint64_t *acts) {
  struct strata_train_options o;
  strata_train_options_default(&o);
  o.batch = 1;
  o.steps = 1;
  o.warmup = 1;
  o.device = h[0];
  struct strata_pipeline_options pp = {.devices = p, .device = h, .split = split, .schedule = kind,
                                       .microbatches = mbs};
  strata_trainer_t tr;
  OK(strata_trainer_new_pipeline(m, ds, &o, &pp, &tr));
  OK(strata_trainer_step(tr, NULL));
  struct strata_train_report rep;
  OK(strata_trainer_report(tr, &rep));
  cr_assert_eq(rep.devices, p);
  for (int d = 0; d < p; d++)
    acts[d] = rep.dev[d].activation_bytes;
  strata_trainer_free(tr);
}

/*
** Issue 35: what a split backward's schedule holds, from the runtime's accounting, against the lists read here. A
** micro-batch's activations (a slot) are held from its F to its W; its output-side gradients (a dsave region, which
** its W reads) only from its BI to its W, taken from the device's cache in one size for all its stages (the largest
** of theirs: a V's two chunks reuse each other's). So device d holds max over its list of sum_s slot_s x
** in-flight_s (its stages together), plus the most BIs without their W at once over its stages times that size:
** ZB-H1, ZB-V and DualPipeV run each W right after its BI, one region a device (ZB-V's cool-down once held back d
** pairs of Ws on device d, as PyTorch's does, and each stage had a pool of its own: 2d + 1 regions). A GPT of 6
** blocks (8 layers: p stages of 8 / p layers, or the V's 2p chunks of half as many) at pp 2 and 4 with 8 and 16
** micro-batches: zb, zbv and dualpipev's accounting is that to the byte. Their activations in flight are 1F1B's own
** (ZB-H1, the same cut), or (the Vs) no more than 1F1B's busiest device in layers x micro-batches, at most 2p chunk
** micro-batches a device; in bytes a V's chunks weigh what their layers do (an embedding is light, a head heavy, and
** each chunk keeps its input), so the figures are logged beside 1F1B's. What the regions add is what the lists force:
** nothing for a GPT without recomputation, whose layers keep their W's gradients where only their BI read
** (strata__stage_folds), so that ZB-H1 holds 1F1B's bytes on every device, to the byte.
*/
Test(memory, split_backward_schedules_hold_what_their_lists_force, .timeout = 300) {
  setenv("STRATA_HOST_DEVICES", "4", 1);
  setenv("STRATA_BACKENDS", "host", 1);
  strata_shutdown(); /* the host backend reads the settings when it starts */
  char dir[256];
  strata_dataset_t ds = corpus(dir, 200, "a weight pass reads the gradients its input pass kept.");
  struct strata_model_config c = {.kind = STRATA_MODEL_GPT, .vocab = 256, .context = 16, .d_model = 32, .layers = 6,
                                  .heads = 2, .d_ff = 64};
  strata_model_t m = model_of(&c);
  int h[4];
  for (int i = 0; i < 4; i++)
    h[i] = tc_find_device("host", i);
  cr_assert_geq(h[3], 0, "needs 4 host virtual devices");
  static const int cases[4][2] = {{2, 8}, {2, 16}, {4, 8}, {4, 16}};
  static const int kinds[3] = {STRATA_SCHEDULE_ZB_H1, STRATA_SCHEDULE_ZBV, STRATA_SCHEDULE_DUALPIPEV};
  for (int ci = 0; ci < 4; ci++) {
    const int p = cases[ci][0], mbs = cases[ci][1];
    /* 8 layers over p stages (1F1B, ZB-H1) or the V's 2p chunks */
    static const int line2[2] = {4, 4}, line4[4] = {2, 2, 2, 2}, v2[4] = {2, 2, 2, 2}, v4[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    uint64_t one[4], busiest = 0;
    pipeline_acts(m, ds, h, p, STRATA_SCHEDULE_1F1B, mbs, p == 2 ? line2 : line4, one);
    for (int d = 0; d < p; d++)
      busiest = one[d] > busiest ? one[d] : busiest;
    const int layers_1f1b = p * (8 / p); /* 1F1B's busiest (device 0): p micro-batches of 8 / p layers each */
    for (int k = 0; k < 3; k++) {
      const int kind = kinds[k], v = kind != STRATA_SCHEDULE_ZB_H1, S = v ? 2 * p : p;
      const int *split = v ? (p == 2 ? v2 : v4) : (p == 2 ? line2 : line4);
      const char *name = strata_schedule_kind_name(kind);
      /* each stage's figures: one micro-batch's slot and one dsave region */
      double slot[8], dsave[8];
      for (int s = 0, a = 0; s < S; a += split[s++]) {
        struct strata__stage_bytes b;
        OK(strata__stage_plan(m, a, a + split[s], 1, 1, NULL, &b));
        slot[s] = (double)b.slot;
        dsave[s] = (double)b.dsave;
        cr_assert_eq(b.dsave, 0, "%s: stage %d keeps a dsave region of %llu bytes", name, s,
                     (unsigned long long)b.dsave);
      }
      uint64_t got[4];
      pipeline_acts(m, ds, h, p, kind, mbs, split, got);
      strata_schedule_t sch;
      OK(strata_schedule_generate(kind, p, mbs, 0, &sch));
      for (int d = 0; d < p; d++) {
        int n, pend[8] = {0}, most[8] = {0}, mbs_now = 0, mbs_top = 0, lay_now = 0, lay_top = 0, dnow = 0, dtop = 0;
        const struct strata_action *l = strata_schedule_actions(sch, d, &n);
        double now = 0, top = 0, heaviest = 0;
        for (int i = 0; i < n; i++) {
          const int s = l[i].stage;
          if (l[i].kind == STRATA_ACTION_FORWARD)
            now += slot[s], mbs_now++, lay_now += split[s];
          else if (l[i].kind == STRATA_ACTION_BACKWARD_INPUT)
            most[s] = ++pend[s] > most[s] ? pend[s] : most[s], dtop = ++dnow > dtop ? dnow : dtop;
          else if (l[i].kind == STRATA_ACTION_BACKWARD_WEIGHT)
            pend[s]--, dnow--, now -= slot[s], mbs_now--, lay_now -= split[s];
          top = now > top ? now : top;
          mbs_top = mbs_now > mbs_top ? mbs_now : mbs_top;
          lay_top = lay_now > lay_top ? lay_now : lay_top;
          heaviest = slot[s] > heaviest && strata_schedule_stage_device(sch, s) == d ? slot[s] : heaviest;
        }
        double region = 0; /* the device's stages take regions of one size, the largest of theirs */
        for (int s = 0; s < S; s++) {
          if (strata_schedule_stage_device(sch, s) != d)
            continue;
          region = dsave[s] > region ? dsave[s] : region;
          /* the closed forms: ZB-H1's and ZB-V's every W right after its BI (ZB-V's cool-down holds none back) */
          if (kind == STRATA_SCHEDULE_ZB_H1 || kind == STRATA_SCHEDULE_ZBV)
            cr_assert_eq(most[s], 1, "%s pp %d m %d: stage %d (device %d) holds %d dsave regions", name, p, mbs, s, d,
                         most[s]);
        }
        const double pool = dtop * region;
        /* every W right after its BI: one micro-batch's gradients kept at a time on the device, over its stages */
        cr_assert_eq(dtop, 1, "%s pp %d m %d device %d: %d micro-batches between their BI and their W at once", name,
                     p, mbs, d, dtop);
        cr_log_info("%s pp %d m %d device %d: %llu activation bytes = %.0f in flight + %.0f of dsave regions; 1F1B "
                    "%llu there, %llu at its busiest", name, p, mbs, d, (unsigned long long)got[d], top, pool,
                    (unsigned long long)one[d], (unsigned long long)busiest);
        cr_assert_eq(got[d], (uint64_t)(top + pool), "%s pp %d m %d device %d: accounted %llu, the lists say %.0f + "
                     "%.0f", name, p, mbs, d, (unsigned long long)got[d], top, pool);
        if (!v) /* 1F1B's own lists with each B split: its micro-batches in flight, the same cut; and no region */
          cr_assert(top == (double)one[d] && got[d] == one[d], "zb pp %d m %d device %d: %.0f bytes in flight, %llu "
                    "accounted, 1F1B %llu", p, mbs, d, top, (unsigned long long)got[d], (unsigned long long)one[d]);
        else {
          cr_assert_leq(mbs_top, 2 * p, "%s pp %d m %d device %d: %d chunk micro-batches in flight", name, p, mbs, d,
                        mbs_top);
          cr_assert_leq(top, 2 * p * heaviest, "%s pp %d m %d device %d: %.0f bytes in flight", name, p, mbs, d, top);
          cr_assert_leq(lay_top, layers_1f1b, "%s pp %d m %d device %d: %d layers x micro-batches in flight, "
                        "1F1B's busiest %d", name, p, mbs, d, lay_top, layers_1f1b);
        }
      }
      strata_schedule_free(sch);
    }
  }
  strata_model_free(m);
  strata_dataset_free(ds);
  tc_remove_dir(dir);
}

/*
** Issue 35: peak activations in flight of ZB-V and DualPipeV no more than 1F1B's, from the accounting (the report's
** activation_bytes), compared as the memory that must fit: the most of any device against 1F1B's most. A stage's
** output is not part of its slots (it waits in an output buffer only until the next stage has it), so a chunk's
** micro-batch keeps its input and its layers' saved activations and inner outputs: a V device's 2p half-size chunk
** micro-batches of blocks weigh 1F1B's device 0's p full-size ones, less that device's p token rows. A GPT of 2p
** blocks (2p + 2 layers) at pp 2 and 4, m 8: 1F1B cut 3,3 or 3,2,2,3 (the embedding and the head each with two
** blocks); the V's chunks one block each but the first (the embedding alone) and the last (two blocks and the head:
** the chunk its device keeps one micro-batch of at once): every device of the V holds at most 1F1B's most, devices 1
** to p - 1 the blocks their lists hold at once (strata_schedule_device_peak: at most 2p, 1F1B's device 0 less its p
** token rows). With the cut that balances time (the first chunk the embedding and a block, the last a block and the
** head) device 0 holds at most 2p - 1 micro-batches of its first chunk, 2p - 2 of it beside one of its last
** (strata__gen_zbv): no more than 1F1B's most where (p - 1) token rows and (p - 2) with the head's excess over a
** block (its input, saved activations and targets) weigh no more than a block — on this model the second with
** equality at pp 4. (The paper's lists held 2p - 1 beside one: 1F1B's most plus that excess and p - 1 token rows.)
*/
Test(memory, v_schedules_hold_no_more_activations_than_1f1b, .timeout = 300) {
  setenv("STRATA_HOST_DEVICES", "4", 1);
  setenv("STRATA_BACKENDS", "host", 1);
  strata_shutdown(); /* the host backend reads the settings when it starts */
  char dir[256];
  strata_dataset_t ds = corpus(dir, 200, "an output waits only for its send, not for its backward.");
  int h[4];
  for (int i = 0; i < 4; i++)
    h[i] = tc_find_device("host", i);
  cr_assert_geq(h[3], 0, "needs 4 host virtual devices");
  for (int p = 2; p <= 4; p += 2) {
    struct strata_model_config c = {.kind = STRATA_MODEL_GPT, .vocab = 256, .context = 16, .d_model = 32,
                                    .layers = 2 * p, .heads = 2, .d_ff = 64};
    strata_model_t m = model_of(&c);
    const int L = 2 * p + 2;
    int line[4], fair[8], balanced[8];
    for (int d = 0; d < p; d++)
      line[d] = 2 + (d == 0 || d == p - 1); /* 1F1B: 3,3 or 3,2,2,3 */
    for (int k = 0; k < 2 * p; k++)
      fair[k] = 1, balanced[k] = 1;
    fair[2 * p - 1] = 3;                          /* the embedding alone, the head with two blocks */
    balanced[0] = balanced[2 * p - 1] = 2;        /* the embedding with a block, the head with one */
    uint64_t one[4], most = 0;
    pipeline_acts(m, ds, h, p, STRATA_SCHEDULE_1F1B, 8, line, one);
    for (int d = 0; d < p; d++)
      most = one[d] > most ? one[d] : most;
    /* the figures: a block's kept bytes with its input (one boundary), a token row's int32s */
    struct strata__stage_bytes blk, first, head;
    OK(strata__stage_plan(m, 1, 2, 1, 1, NULL, &blk));
    OK(strata__stage_plan(m, 0, 2, 1, 1, NULL, &first));
    OK(strata__stage_plan(m, L - 2, L, 1, 1, NULL, &head));
    const uint64_t tokens = (uint64_t)c.context * 4;
    cr_assert_eq(first.slot, blk.slot + tokens, "pp %d: the embedding and a block keep a block's bytes and the tokens",
                 p);
    cr_assert_eq(most, one[0], "pp %d: 1F1B's busiest device is its first", p);
    cr_assert_eq(one[0], (uint64_t)p * (tokens + 2 * blk.slot), "pp %d: 1F1B's device 0 holds %llu", p,
                 (unsigned long long)one[0]);
    /* the lists' condition for the cut that balances time (strata__gen_zbv): with emb a token row, b a block, h the
    ** head's excess over a block, (p - 1)emb <= b and (p - 2)emb + h <= b */
    const uint64_t excess = head.slot - blk.slot;
    cr_log_info("pp %d: a block %llu bytes, a token row %llu, the head's excess %llu", p, (unsigned long long)blk.slot,
                (unsigned long long)tokens, (unsigned long long)excess);
    cr_assert_leq((uint64_t)(p - 1) * tokens, blk.slot);
    cr_assert_leq((uint64_t)(p - 2) * tokens + excess, blk.slot);
    for (int v = 0; v < 2; v++) {
      const int kind = v ? STRATA_SCHEDULE_DUALPIPEV : STRATA_SCHEDULE_ZBV;
      const char *name = strata_schedule_kind_name(kind);
      strata_schedule_t sch = NULL;
      OK(strata_schedule_generate(kind, p, 8, 0, &sch));
      uint64_t got[4], top = 0;
      pipeline_acts(m, ds, h, p, kind, 8, fair, got);
      for (int d = 0; d < p; d++) {
        cr_log_info("%s pp %d device %d: %llu activation bytes (1F1B's most %llu)", name, p, d,
                    (unsigned long long)got[d], (unsigned long long)most);
        top = got[d] > top ? got[d] : top;
        double units = 0;
        OK(strata_schedule_device_peak(sch, d, NULL, &units, NULL));
        cr_assert_leq(units, 2 * p);
        if (d > 0) /* block micro-batches as the list holds them at once: at most 2p, 1F1B's device 0 less its tokens */
          cr_assert_eq(got[d], (uint64_t)units * blk.slot, "%s pp %d device %d: %llu bytes, %g blocks", name, p, d,
                       (unsigned long long)got[d], units);
      }
      strata_schedule_free(sch);
      cr_assert_leq(top, most, "%s pp %d: %llu activation bytes at most, 1F1B's most %llu", name, p,
                    (unsigned long long)top, (unsigned long long)most);
      /* the cut that balances time: device 0 holds 2p - 1 of its first chunk, or 2p - 2 of it beside one of its last,
      ** within 1F1B's most (the paper's lists: 2p - 1 beside one, (p - 1) token rows and the head's excess over) */
      pipeline_acts(m, ds, h, p, kind, 8, balanced, got);
      const uint64_t alone = (uint64_t)(2 * p - 1) * first.slot;
      const uint64_t beside = (uint64_t)(2 * p - 2) * first.slot + head.slot;
      cr_assert_eq(got[0], alone > beside ? alone : beside, "%s pp %d: device 0 holds %llu", name, p,
                   (unsigned long long)got[0]);
      for (int d = 0; d < p; d++)
        cr_assert_leq(got[d], most, "%s pp %d: device %d holds %llu, 1F1B's most %llu", name, p, d,
                      (unsigned long long)got[d], (unsigned long long)most);
      cr_log_info("%s pp %d, the time-balanced cut: device 0 %llu bytes, %.4fx 1F1B's most", name, p,
                  (unsigned long long)got[0], (double)got[0] / (double)most);
    }
    strata_model_free(m);
  }
  strata_dataset_free(ds);
  tc_remove_dir(dir);
}
