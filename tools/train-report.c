/* SPDX-License-Identifier: MIT */
/* train-report.c — what strata-train prints: the header, the progress lines on stderr, the --json events on stdout and the summary. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <strata/strata.h>

#include "train.h"

/* ---------------------------------------------------------------- output helpers */

/* The GEMM the run's MFU is measured against, and the precision's name in the report. */
static const char *gemm_name(const struct run *r) {
  return r->topts.precision == STRATA_BFLOAT16 ? "bf16 GEMM" : "sgemm";
}
static const char *precision_name(int p) { return p == STRATA_BFLOAT16 ? "bf16" : "fp32"; }

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p == '\n')
      fputs("\\n", f);
    else if (*p < 0x20)
      fprintf(f, "\\u%04x", *p);
    else
      fputc(*p, f);
  }
  fputc('"', f);
}

/* A float in JSON: enough digits to read back the same float; null when not finite. */
static void json_float(FILE *f, double v) {
  if (isfinite(v))
    fprintf(f, "%.9g", v);
  else
    fputs("null", f);
}

/* "12.3k", "4.56M": a rate or a count in three significant figures. */
static void fmt_si(char *buf, size_t n, double v) {
  if (v >= 1e9)
    snprintf(buf, n, "%.3gG", v / 1e9);
  else if (v >= 1e6)
    snprintf(buf, n, "%.3gM", v / 1e6);
  else if (v >= 1e3)
    snprintf(buf, n, "%.3gk", v / 1e3);
  else
    snprintf(buf, n, "%.3g", v);
}

static void fmt_duration(char *buf, size_t n, double s) {
  if (!isfinite(s) || s < 0)
    snprintf(buf, n, "?");
  else if (s >= 3600)
    snprintf(buf, n, "%d:%02d:%02d", (int)(s / 3600), (int)fmod(s / 60, 60), (int)fmod(s, 60));
  else
    snprintf(buf, n, "%d:%02d", (int)(s / 60), (int)fmod(s, 60));
}

/* ---------------------------------------------------------------- --json events */

void report_step(const struct run *r, const struct strata_step_stats *s, double dt) {
  printf("{\"event\":\"step\",\"step\":%lld,\"loss\":", (long long)s->step);
  json_float(stdout, s->loss);
  printf(",\"grad_norm\":");
  json_float(stdout, s->grad_norm);
  printf(",\"lr\":");
  json_float(stdout, s->lr);
  printf(",\"tokens\":%llu,\"step_s\":%.6f,\"tokens_per_s\":", (unsigned long long)s->tokens, dt);
  json_float(stdout, dt > 0 ? (double)s->tokens / dt : NAN);
  printf(",\"mfu\":");
  json_float(stdout, r->peak_gflops > 0 && dt > 0 ? s->flops / dt / (r->peak_gflops * 1e9) : NAN);
  if (r->pp) {
    printf(",\"bubble\":");
    json_float(stdout, r->step_bubble);
  }
  printf(",\"host_waits\":%llu", (unsigned long long)r->rep.host_waits);
  if (r->pp) { /* (new keys after the old ones: scripts match their order) */
    printf(",\"idle\":");
    json_float(stdout, r->step_bubble);
  }
  printf("}\n");
  fflush(stdout);
}

void report_eval(const struct run *r, float v, double t0) {
  printf("{\"event\":\"eval\",\"step\":%lld,\"val_loss\":", (long long)r->step);
  json_float(stdout, v);
  printf(",\"eval_s\":%.4f}\n", now() - t0);
  fflush(stdout);
}

void report_save(const struct run *r, const char *path) {
  printf("{\"event\":\"save\",\"step\":%lld,\"path\":", (long long)r->step);
  json_str(stdout, path);
  printf("}\n");
  fflush(stdout);
}

/* ---------------------------------------------------------------- progress and summary */

void progress_end(struct run *r) {
  if (r->progress_open) {
    fputc('\n', stderr);
    r->progress_open = 0;
  }
}

/* Seconds per step of the steady state (the run's first step excluded once there are others). */
static double step_seconds(const struct run *r) {
  int64_t n = r->step - r->start_step;
  if (n >= 2)
    return r->train_s / (double)(n - 1);
  return r->first_s;
}

static double tokens_per_s(const struct run *r) {
  if (r->step - r->start_step >= 2 && r->train_s > 0)
    return (double)r->train_tokens / r->train_s;
  return r->first_s > 0 ? (double)r->first_tokens / r->first_s : 0;
}

static double mfu(const struct run *r) {
  if (r->peak_gflops <= 0)
    return NAN;
  double flops = r->step - r->start_step >= 2 ? r->train_flops / r->train_s : r->first_flops / r->first_s;
  return flops / (r->peak_gflops * 1e9);
}

/* The parts of a stage side by side on devices of their own: spatial slabs, or tensor-parallel slices of one degree
** for every rank (1: none), and their name. */
static int side_parts(const struct run *r) { return r->slabs > 1 ? r->slabs : r->slices; }
static const char *side_word(const struct run *r) { return r->slabs > 1 ? "slab" : "slice"; }

/* What the devices' measured idle share is in this run: a pipeline's bubble, or, in one stage of slabs or slices (no
** pipeline), the time its parts wait on each other's halo rows and joins. */
static const char *idle_word(const struct run *r) { return side_parts(r) > 1 && r->ranks == 1 ? "idle" : "bubble"; }

/* One progress report: a redrawn line on a terminal, else a plain line. */
void progress(struct run *r) {
  char tok[32], eta[32], val[32], mf[32];
  double tps = tokens_per_s(r);
  fmt_si(tok, sizeof tok, tps);
  fmt_duration(eta, sizeof eta, step_seconds(r) * (double)(r->end - r->step));
  if (isnan(r->val_loss))
    snprintf(val, sizeof val, "-");
  else
    snprintf(val, sizeof val, "%.4f", r->val_loss);
  double m = mfu(r);
  if (isnan(m))
    snprintf(mf, sizeof mf, "-");
  else
    snprintf(mf, sizeof mf, "%.1f%%", 100 * m);
  int w = (int)snprintf(NULL, 0, "%lld", (long long)r->topts.steps);
  char line[256], bub[32] = "";
  if (r->pp)
    snprintf(bub, sizeof bub, "  %s %.1f%%", idle_word(r), 100 * r->step_bubble);
  snprintf(line, sizeof line, "step %*lld/%lld  loss %.4f  val %s  %s %s/s  MFU %s%s  ETA %s", w, (long long)r->step,
           (long long)r->topts.steps, r->loss, val, tok, r->dinfo.kind == STRATA_DATA_TEXT ? "tok" : "img", mf, bub,
           eta);
  if (r->progress_tty) {
    struct winsize ws;
    int cols = ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col ? ws.ws_col : 80;
    char bar[32] = "";
    int bw = 20;
    if ((int)strlen(line) + bw + 3 < cols) {
      int fill = r->topts.steps ? (int)(bw * r->step / r->topts.steps) : bw;
      bar[0] = '[';
      for (int i = 0; i < bw; i++)
        bar[1 + i] = i < fill ? '#' : '.';
      bar[bw + 1] = ']';
      bar[bw + 2] = ' ';
      bar[bw + 3] = '\0';
    }
    fprintf(stderr, "\r%s%.*s\033[K", bar, cols - 1 - (int)strlen(bar), line);
    r->progress_open = 1;
  } else {
    fprintf(stderr, "%s\n", line);
  }
  fflush(stderr);
}

/*
** The run's pipeline figures over its steps, the first left out once there
** are others: wall seconds of the steps (*wall), each device's compute
** seconds (busy[]), and the measured bubble 1 - sum(busy) / (p x wall)
** (returned; NAN before any step).
*/
static double pipeline_figures_of(const struct run *r, int n, double *wall /* OUT */, double *busy /* OUT */) {
  int skip = r->step - r->start_step >= 2;
  double total = 0;
  *wall = r->wall_all - (skip ? r->wall_first : 0);
  for (int i = 0; i < n; i++) {
    busy[i] = r->busy_all[i] - (skip ? r->busy_first[i] : 0);
    total += busy[i];
  }
  return *wall > 0 && n > 0 ? 1.0 - total / ((double)n * *wall) : NAN;
}

static double pipeline_figures(const struct run *r, double *wall /* OUT */, double *busy /* OUT */) {
  return pipeline_figures_of(r, r->pp, wall, busy);
}

/* Every device of the run, a single device's included: the share of the wall time it computed, its peak memory
** and, from the runtime's accounting, what its stages hold (parameters, gradients, optimizer state, the activations
** of the micro-batches in flight) and what the memory plan said a step needs there. */
static void print_devices_json(const struct run *r) {
  double pwall, busy[MAX_DEVICES];
  const int n = r->rep.devices < MAX_DEVICES ? r->rep.devices : MAX_DEVICES;
  pipeline_figures_of(r, n, &pwall, busy);
  printf(",\"devices\":[");
  for (int i = 0; i < n; i++) {
    const struct strata_train_device_stats *d = &r->rep.dev[i];
    printf("%s{\"device\":%d,\"busy\":", i ? "," : "", d->device);
    json_float(stdout, pwall > 0 ? busy[i] / pwall : NAN);
    printf(",\"busy_s\":%.6f,\"peak_bytes\":%llu,\"peak_inflight\":%d,\"param_bytes\":%llu,\"grad_bytes\":%llu,"
           "\"optimizer_bytes\":%llu,\"activation_bytes\":%llu,\"planned_bytes\":%llu}",
           busy[i], (unsigned long long)r->peak_bytes[i], r->peak_inflight[i], (unsigned long long)d->param_bytes,
           (unsigned long long)d->grad_bytes, (unsigned long long)d->optimizer_bytes,
           (unsigned long long)d->activation_bytes, (unsigned long long)d->planned_bytes);
  }
  printf("]");
}

void print_summary(struct run *r, int was_interrupted, const struct options *o) {
  double wall = now() - r->t_start;
  double tps = tokens_per_s(r);
  double m = mfu(r);
  int64_t done = r->step - r->start_step;
  if (o->json) {
    printf("{\"event\":\"summary\",\"steps\":%lld,\"steps_this_run\":%lld,\"total_steps\":%lld,\"loss\":",
           (long long)r->step, (long long)done, (long long)r->topts.steps);
    json_float(stdout, done ? r->loss : NAN);
    printf(",\"val_loss\":");
    json_float(stdout, r->val_loss);
    printf(",\"val_step\":%lld,\"baseline\":", (long long)r->val_step);
    json_float(stdout, r->baseline);
    printf(",\"tokens_per_s\":");
    json_float(stdout, tps);
    printf(",\"mfu\":");
    json_float(stdout, m);
    printf(",\"peak_gflops\":");
    json_float(stdout, r->peak_gflops);
    printf(",\"peak_gflops_before\":");
    json_float(stdout, r->peak_before);
    printf(",\"precision\":\"%s\"", precision_name(r->topts.precision));
    printf(",\"recompute\":\"%s\",\"sp\":%s", strata_recompute_name(r->topts.recompute),
           r->topts.sp ? "true" : "false");
    printf(",\"wall_s\":%.3f,\"train_s\":%.3f,\"eval_s\":%.3f,\"host_waits_per_step\":", wall, r->train_s + r->first_s,
           r->eval_s);
    json_float(stdout, r->step > r->start_step ? (double)r->host_waits_all / (double)(r->step - r->start_step) : NAN);
    printf(",\"checkpoint\":");
    if (r->saved)
      json_str(stdout, r->saved);
    else
      printf("null");
    if (r->pp) {
      double pwall, busy[MAX_DEVICES];
      double bubble = pipeline_figures(r, &pwall, busy);
      printf(",\"pp\":%d,\"zero\":%d,\"schedule\":", r->pp, o->zero);
      json_str(stdout, strata_schedule_kind_name(r->rep.schedule));
      printf(",\"bubble\":");
      json_float(stdout, bubble);
      printf(",\"bubble_ideal\":");
      json_float(stdout, r->rep.bubble_ideal);
      printf(",\"pipeline_wall_s\":%.6f", pwall);
      printf(",\"pipeline_ranks\":%d,\"spatial\":%d,\"idle\":", r->ranks, r->slabs); /* (new keys last) */
      json_float(stdout, bubble);
    }
    print_devices_json(r);
    printf(",\"interrupted\":%s}\n", was_interrupted ? "true" : "false");
    fflush(stdout);
    return;
  }
  char tok[32], wall_s[32];
  fmt_si(tok, sizeof tok, tps);
  fmt_duration(wall_s, sizeof wall_s, wall);
  progress_end(r);
  if (was_interrupted)
    printf("interrupted at step %lld of %lld\n", (long long)r->step, (long long)r->topts.steps);
  else if (r->step < r->topts.steps && done)
    printf("stopped at step %lld of %lld (--stop-at); --resume continues\n", (long long)r->step,
           (long long)r->topts.steps);
  printf("summary   %lld steps (%lld in this run) in %s wall (%.1f s training, %.1f s validation, %.1f s saving)\n",
         (long long)r->step, (long long)done, wall_s, r->train_s + r->first_s, r->eval_s, r->save_s);
  const char *base = r->dinfo.kind == STRATA_DATA_TEXT ? "unigram entropy" : "chance";
  if (done)
    printf("          train loss %.4f", r->loss);
  else
    printf("          train loss -");
  if (!isnan(r->val_loss))
    printf(", validation loss %.4f (step %lld) vs %s %.4f nats: %s by %.3f\n", r->val_loss, (long long)r->val_step,
           base, r->baseline, r->val_loss < r->baseline ? "below" : "ABOVE", fabs(r->baseline - r->val_loss));
  else
    printf(", no validation loss; %s %.4f nats\n", base, r->baseline);
  if (done) {
    if (isnan(m))
      printf("          %s %s/s, MFU unknown (no %s peak)\n", tok,
             r->dinfo.kind == STRATA_DATA_TEXT ? "tokens" : "images", gemm_name(r));
    else
      printf("          %s %s/s, %.2f GFLOP/s of model FLOPs, MFU %.1f%% of the %.1f GFLOP/s %s peak%s\n",
             tok, r->dinfo.kind == STRATA_DATA_TEXT ? "tokens" : "images", m * r->peak_gflops, 100 * m,
             r->peak_gflops, gemm_name(r), done >= 2 ? " (first step excluded)" : "");
    if (r->peak_gflops > r->peak_before && r->peak_before > 0)
      printf("          (peak measured %.1f GFLOP/s before training, %.1f after: the higher is used)\n",
             r->peak_before, r->peak_gflops);
  }
  if (r->pp && done) {
    double pwall, busy[MAX_DEVICES];
    double bubble = pipeline_figures(r, &pwall, busy);
    if (side_parts(r) > 1 && r->ranks == 1)
      printf("%s idle %.1f%% of the devices' time, waiting on each other's %s (%d %ss on %d device%s, %d "
             "micro-batches)%s\n",
             r->slabs > 1 ? "slabs    " : "tensor   ", 100 * bubble, r->slabs > 1 ? "halo rows and joins" : "joins",
             side_parts(r), side_word(r), r->pp, r->pp == 1 ? "" : "s", r->rep.microbatches,
             done >= 2 ? ", first step excluded" : "");
    else
      printf("pipeline  bubble %.1f%% measured vs %.1f%% theoretical (%s, %d device%s, %d micro-batches)%s\n",
             100 * bubble, 100 * r->rep.bubble_ideal, strata_schedule_kind_name(r->rep.schedule), r->pp,
             r->pp == 1 ? "" : "s", r->rep.microbatches, done >= 2 ? ", first step excluded" : "");
    for (int i = 0; i < r->pp; i++)
      printf("          device %d: busy %.1f%% of the wall time, peak memory %.1f MiB, at most %d micro-batch%s in "
             "flight\n",
             r->dev[i], pwall > 0 ? 100 * busy[i] / pwall : 0.0, (double)r->peak_bytes[i] / (1024.0 * 1024.0),
             r->peak_inflight[i], r->peak_inflight[i] == 1 ? "" : "es");
  }
  for (int i = 0; done && i < r->rep.devices && i < MAX_DEVICES; i++) {
    const struct strata_train_device_stats *d = &r->rep.dev[i];
    const double MiB = 1024.0 * 1024.0;
    printf("%s device %d: %.1f MiB parameters, %.1f gradients, %.1f optimizer state, %.1f activations in flight; "
           "planned %.1f MiB, peak %.1f MiB\n",
           i ? "         " : "memory   ", d->device, (double)d->param_bytes / MiB, (double)d->grad_bytes / MiB,
           (double)d->optimizer_bytes / MiB, (double)d->activation_bytes / MiB, (double)d->planned_bytes / MiB,
           (double)r->peak_bytes[i] / MiB);
  }
  if (r->saved)
    printf("          checkpoint %s (step %lld)\n", r->saved, (long long)r->saved_step);
  else if (o->save)
    printf("          no checkpoint written\n");
  fflush(stdout);
}

/* ---------------------------------------------------------------- header */

/* "layers 0-2 (wte+wpe .. h.1)" for stage s of the report. */
static void stage_layers(const struct run *r, int s, char *buf, size_t n) {
  int first = 0;
  for (int i = 0; i < s; i++)
    first += r->rep.split[i];
  first %= strata_model_layer_count(r->model); /* the stages of every replica and slice, each a whole model */
  int last = first + r->rep.split[s] - 1;
  struct strata_layer_info a, b;
  if (strata_model_layer(r->model, first, &a) || strata_model_layer(r->model, last, &b)) {
    snprintf(buf, n, "layers %d-%d", first, last);
    return;
  }
  if (first == last)
    snprintf(buf, n, "layer %d (%s)", first, a.name);
  else
    snprintf(buf, n, "layers %d-%d (%s .. %s)", first, last, a.name, b.name);
}

/* The report's stage st in a spatial run: which slab (returned) of which stage of its line (*stage). The report lists
** each of the dp replicas' slices (the slabs) in turn, each slice a whole line of stages. */
static int stage_slab(const struct run *r, int st, int dp, int *stage) {
  const int w = side_parts(r), line = r->rep.stages / (dp * w);
  *stage = line > 0 ? st % line : st;
  return line > 0 ? st / line % w : 0;
}

/* The backend of global device `dev` among the pipeline's. */
static const char *pipeline_backend(const struct run *r, int dev) {
  for (int i = 0; i < r->pp; i++)
    if (r->dev[i] == dev)
      return r->props[i].backend;
  return "?";
}

void print_header(const struct run *r, const struct options *o, const char *why) {
  const struct strata_model_config *c = r->cfg;
  uint64_t params = strata_model_params(r->model);
  double per_sample = strata_model_flops(r->model);
  int text = c->kind == STRATA_MODEL_GPT || c->kind == STRATA_MODEL_LLAMA;
  double per_token = text ? per_sample / (double)c->context : per_sample;
  /* every replica runs accum micro-batches */
  double step_tokens = (double)r->topts.batch * (double)r->topts.accum * (text ? (double)c->context : 1.0) *
                       (o->dp ? (double)o->dp : 1.0);
  if (o->json) {
    printf("{\"event\":\"start\",\"model\":");
    json_str(stdout, c->name);
    printf(",\"kind\":\"%s\",\"params\":%llu,\"flops_per_token\":%.6g,\"data\":",
           c->kind == STRATA_MODEL_LLAMA ? "llama" : text ? "gpt" : c->kind == STRATA_MODEL_MLP ? "mlp" : "cnn",
           (unsigned long long)params, per_token);
    json_str(stdout, r->dinfo.source);
    if (o->init_from) {
      printf(",\"init_from\":");
      json_str(stdout, o->init_from);
    }
    printf(",\"train_size\":%llu,\"val_size\":%llu,\"baseline\":", (unsigned long long)r->dinfo.train_size,
           (unsigned long long)r->dinfo.val_size);
    json_float(stdout, r->baseline);
    printf(",\"device\":%d,\"device_name\":", r->device);
    json_str(stdout, r->dprops.name);
    printf(",\"backend\":");
    json_str(stdout, r->dprops.backend);
    printf(",\"peak_gflops\":");
    json_float(stdout, r->peak_gflops);
    printf(",\"precision\":\"%s\"", precision_name(r->topts.precision));
    printf(",\"recompute\":\"%s\",\"sp\":%s", strata_recompute_name(r->topts.recompute),
           r->topts.sp ? "true" : "false");
    printf(",\"peak_n\":%d,\"steps\":%lld,\"start_step\":%lld,\"batch\":%lld,\"accum\":%lld,\"tokens_per_step\":%.0f",
           r->peak_n, (long long)r->topts.steps, (long long)r->start_step, (long long)r->topts.batch,
           (long long)r->topts.accum, step_tokens);
    if (r->pp) {
      printf(",\"pp\":%d,\"dp\":%d,\"tp\":%d,\"zero\":%d,\"schedule\":", r->pp, o->dp ? o->dp : 1,
             o->layout ? strata_layout_tp(o->layout, 0) : o->ntp ? o->tp[0] : 1, o->zero);
      json_str(stdout, strata_schedule_kind_name(r->rep.schedule));
      printf(",\"microbatches\":%d,\"bubble_ideal\":", r->rep.microbatches);
      json_float(stdout, r->rep.bubble_ideal);
      printf(",\"devices\":[");
      for (int i = 0; i < r->pp; i++) {
        printf("%s{\"device\":%d,\"device_name\":", i ? "," : "", r->dev[i]);
        json_str(stdout, r->props[i].name);
        printf(",\"backend\":");
        json_str(stdout, r->props[i].backend);
        printf(",\"peak_gflops\":");
        json_float(stdout, r->peak_gflops > 0 ? r->dev_peak[i] : NAN);
        printf("}");
      }
      printf("],\"stages\":[");
      for (int st = 0, first = 0, n = 0; st < r->rep.stages; first += r->rep.split[st], st++)
        if (r->rep.stage_device[st] >= 0) { /* a stage of a narrower rank's missing slice is held by no device */
          printf("%s{\"stage\":%d,\"first_layer\":%d,\"layers\":%d,\"device\":%d", n++ ? "," : "", st,
                 first % strata_model_layer_count(r->model), r->rep.split[st], r->rep.stage_device[st]);
          int j;
          if (r->slabs > 1)
            printf(",\"slab\":%d", stage_slab(r, st, o->dp ? o->dp : 1, &j));
          printf("}");
        }
      printf("],\"pipeline_ranks\":%d,\"spatial\":%d", r->ranks, r->slabs); /* (new keys last) */
    }
    printf("}\n");
    fflush(stdout);
    return;
  }
  if (o->quiet)
    return;
  char pbuf[32], fbuf[32];
  fmt_si(pbuf, sizeof pbuf, (double)params);
  fmt_si(fbuf, sizeof fbuf, per_token);
  if (text && c->kind == STRATA_MODEL_LLAMA)
    printf("model     %s: llama, %lld layers, d_model %lld, %lld heads on %lld key/value heads, d_ff %lld, context "
           "%lld, vocab %lld, rope_theta %g%s%s\n", c->name, (long long)c->layers, (long long)c->d_model,
           (long long)c->heads, (long long)c->kv_heads, (long long)c->d_ff, (long long)c->context,
           (long long)c->vocab, c->rope_theta, c->rope_scaling.type == STRATA_ROPE_LLAMA3 ? " (llama3 scaling)" : "",
           c->tied ? ", tied" : "");
  else if (text)
    printf("model     %s: gpt, %lld layers, d_model %lld, %lld heads, d_ff %lld, context %lld, vocab %lld%s\n", c->name,
           (long long)c->layers, (long long)c->d_model, (long long)c->heads, (long long)c->d_ff,
           (long long)c->context, (long long)c->vocab, c->tied ? ", tied" : "");
  else
    printf("model     %s: %s over %lldx%lld images of %lld channel(s), %lld classes\n", c->name,
           c->kind == STRATA_MODEL_MLP ? "mlp" : "cnn", (long long)c->image, (long long)c->image,
           (long long)c->channels, (long long)c->classes);
  printf("          %s parameters, %sFLOP per %s (forward + backward)\n", pbuf, fbuf, text ? "token" : "image");
  if (o->init_from)
    printf("weights   %s (Hugging Face GPT-2%s; its dropout is not applied: strata trains without)\n", o->init_from,
           o->untie ? ", untied here" : "");
  int wide = text && strstr(r->dinfo.source, "tokens)") != NULL;
  printf("data      %s: %llu train / %llu validation %s\n", r->dinfo.source, (unsigned long long)r->dinfo.train_size,
         (unsigned long long)r->dinfo.val_size, !text ? "images" : wide ? "tokens" : "bytes");
  if (text)
    printf("          unigram entropy %.4f nats/%s: the loss of a model that ignores context\n", r->baseline,
           wide ? "token" : "byte");
  else
    printf("          chance level ln(%lld) = %.4f nats\n", (long long)c->classes, r->baseline);
  if (r->pp) {
    for (int i = 0; i < r->pp; i++) {
      printf("%s%d: %s (%s backend)", i ? "          " : "devices   ", r->dev[i], r->props[i].name,
             r->props[i].backend);
      if (r->peak_gflops > 0)
        printf(", %s peak %.1f GFLOP/s", gemm_name(r), r->dev_peak[i]);
      printf("\n");
    }
    if (!o->ndevices)
      printf("          (the first %d device%s; --devices chooses others)\n", r->pp, r->pp == 1 ? "" : "s");
    if (r->peak_gflops > 0)
      printf("peak      %.1f GFLOP/s: the sum of the devices' %s peaks (N=%d, best of %d, through strata)\n",
             r->peak_gflops, gemm_name(r), r->peak_n, PEAK_REPS);
    else
      printf("peak      unknown (an %s measurement failed); MFU not reported\n", gemm_name(r));
  } else {
    printf("device    %d: %s (%s backend)", r->device, r->dprops.name, r->dprops.backend);
    if (why && strcmp(why, "the only device") == 0)
      printf(", the only device");
    else if (why)
      printf(", the fastest by a 512 sgemm: %s", why);
    printf("\n");
    if (r->peak_gflops > 0)
      printf("peak      %.1f GFLOP/s %s (N=%d, best of %d, through strata on device %d)\n", r->peak_gflops,
             gemm_name(r), r->peak_n, PEAK_REPS, r->device);
    else
      printf("peak      unknown (the %s measurement failed); MFU not reported\n", gemm_name(r));
  }
  char wu[32];
  snprintf(wu, sizeof wu, "%lld", (long long)r->topts.warmup);
  printf("train     %lld steps x %lld %s x %lld %s = %.0f %s/step, lr %g -> %g, warm-up %s, seed %llu\n",
         (long long)r->topts.steps, (long long)r->topts.batch, text ? "sequences" : "images",
         (long long)r->topts.accum, r->pp ? "micro-batches" : "accum", step_tokens, text ? "tokens" : "images",
         r->topts.lr, r->topts.min_lr, wu, (unsigned long long)r->topts.seed);
  if (r->topts.precision == STRATA_BFLOAT16)
    printf("precision bf16: float32 master weights, gradients and AdamW moments; bfloat16 activations, messages and "
           "GEMM operands, float32 sums\n");
  if (r->topts.recompute)
    printf("recompute %s: %s\n", strata_recompute_name(r->topts.recompute),
           r->topts.recompute == STRATA_RECOMPUTE_FULL
               ? "each block keeps only its input, its forward rerun before its backward"
               : "each block's attention output recomputed from its Q, K, V before its backward");
  if (r->topts.sp)
    printf("sequence  parallel over the tp slices: each keeps 1/tp of every micro-batch's tokens in its layernorms and "
           "residuals; all-gathers and reduce-scatters instead of all-reduces\n");
  if (r->pp) {
    const char *sched = strata_schedule_kind_name(r->rep.schedule);
    if (o->dp)
      printf("replicas  %d (data parallel: each on %d of the step's micro-batches, gradients all-reduced)\n", o->dp,
             r->rep.microbatches);
    if (o->zero)
      printf("zero      ZeRO-%d over the %d replicas: each keeps 1/%d of the AdamW moments%s%s\n", o->zero, o->dp, o->dp,
             o->zero >= 2 ? " and of the reduced gradients (each weight's summed as the backward writes it)" : "",
             o->zero >= 3 ? " and of the parameters (each weight gathered as a layer reads it)" : "");
    const int tpd = uniform_tp(o);
    if (tpd == 0) { /* a degree per rank */
      printf("tensor    slices per pipeline rank");
      for (int k = 0; k < (o->layout ? strata_layout_pp(o->layout) : o->ntp); k++)
        printf("%s%d", k ? "," : " ", rank_tp(o, k));
      printf(" (a rank's slices each hold 1/T of its heads and MLP units; a narrower rank takes slice 0's "
             "activations\n          and sends its gradients to every slice)\n");
    } else if (tpd > 1 && (o->spatial > 1 || (o->layout && strata_layout_spatial(o->layout) > 1))) {
      printf("spatial   %d slabs per stage (each runs it whole on its rows of every image; halo rows exchanged)\n",
             tpd);
    } else if (tpd > 1) {
      printf("tensor    %d slices per stage (each holds 1/%d of the heads and MLP units; joined by all-reduces)\n", tpd,
             tpd);
    }
    if (side_parts(r) > 1 && r->ranks == 1) /* one stage, its parts side by side: no pipeline, no bubble to expect */
      printf("%s%d device%s, one stage in %d %ss%s, %d micro-batches a step (no pipeline)\n",
             r->slabs > 1 ? "slabs     " : "stages    ", r->pp, r->pp == 1 ? "" : "s", side_parts(r), side_word(r),
             o->dp > 1 ? " a replica" : "", r->rep.microbatches);
    else if (side_parts(r) > 1) { /* a pipeline of slab or slice groups: its stages, each in parts */
      const int line = r->rep.stages / ((o->dp ? o->dp : 1) * side_parts(r));
      printf("pipeline  %d devices, %d stage%s of %d %ss%s (%s), %s schedule over %d micro-batches: theoretical "
             "bubble %.1f%%\n", r->pp, line, line == 1 ? "" : "s", side_parts(r), side_word(r), o->dp > 1 ? " a replica" : "",
             o->nsplit || (o->layout && strata_layout_split(o->layout)) ? "given" : "balanced by the library", sched,
             r->rep.microbatches, 100 * r->rep.bubble_ideal);
    } else
      printf("pipeline  %d device%s, %d stage%s (%s), %s schedule over %d micro-batches: theoretical bubble %.1f%%\n",
             r->pp, r->pp == 1 ? "" : "s", r->rep.stages, r->rep.stages == 1 ? "" : "s",
             o->nsplit || (o->layout && strata_layout_split(o->layout)) ? "given" : "balanced by the library", sched,
             r->rep.microbatches, 100 * r->rep.bubble_ideal);
    for (int st = 0; st < r->rep.stages; st++) {
      char layers[160], slab[32] = "";
      if (r->rep.stage_device[st] < 0)
        continue; /* the missing slice of a narrower rank: no device holds it */
      stage_layers(r, st, layers, sizeof layers);
      int j = st;
      if (side_parts(r) > 1) { /* "stage 0 slab 1": the slab (slice) of the stage of its line that the device runs */
        const int k = stage_slab(r, st, o->dp ? o->dp : 1, &j);
        snprintf(slab, sizeof slab, " %s %d", side_word(r), k);
      }
      printf("          stage %d%s: %s on device %d (%s)\n", j, slab, layers, r->rep.stage_device[st],
             pipeline_backend(r, r->rep.stage_device[st]));
    }
    if (o->trace)
      printf("          trace %s (Chrome trace JSON, rewritten after every step)\n", o->trace);
  }
  if (o->eval_every > 0)
    printf("          validation every %lld steps and at the end (%lld batches)\n", (long long)o->eval_every,
           (long long)o->eval_batches);
  else
    printf("          validation at the end (%lld batches)\n", (long long)o->eval_batches);
  if (o->save) {
    if (o->save_every > 0)
      printf("          checkpoint %s every %lld steps and at the end\n", o->save, (long long)o->save_every);
    else
      printf("          checkpoint %s at the end\n", o->save);
  }
  if (o->resume)
    printf("resume    %s at step %lld\n", o->resume, (long long)r->start_step);
  fflush(stdout);
}
