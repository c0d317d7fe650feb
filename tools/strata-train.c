/* SPDX-License-Identifier: MIT */
/* strata-train.c — train a model (preset or JSON file) on one device or a pipeline of several: progress with loss, tokens/s, MFU and bubble, evaluation, atomic checkpoints, a summary. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <strata/strata.h>

#include "cli.h"

#define PROG "strata-train"
/* What this tool's command line lists at most (the library allocates by count; the registry of one process holds
** 256 devices) */
#define MAX_DEVICES 256
#define MAX_STAGES 1024

/* Exit statuses: 0 success, 1 a failure reported by the library (bad file,
** device, divergence), 2 bad usage, 130 interrupted by SIGINT. */
#define EXIT_RUNTIME 1
#define EXIT_USAGE 2
#define EXIT_INTERRUPTED 130

#define DEFAULT_PRESET "gpt-tiny"
#define DEFAULT_STEPS 600
#define DEFAULT_BATCH 16
#define DEFAULT_EVAL_BATCHES 8
/* Bounds of the counts (the library's own limits, and for validation the
** most that a run's final evaluation should take). */
#define MAX_BATCH 1048576
#define MAX_MICROBATCHES 1048576
#define MAX_EVAL_BATCHES 100000
#define VAL_FRACTION 0.1
/* Synthetic image task for mlp/cnn models: images drawn (the last 10% validate). */
#define IMAGE_COUNT 8192
/* Largest GEMM of the peak measurement, and the longest one repetition may take
** before a smaller N is used instead (slow devices). */
#define PEAK_N 1024
#define PEAK_MAX_SECONDS 0.25
#define PEAK_REPS 5

struct options {
  const char *model;        /* NULL: the checkpoint's model with --resume, else DEFAULT_PRESET */
  const char *data;         /* NULL: the default corpus */
  int data_format;          /* STRATA_TOKENS_*; -1: not given (auto) */
  const char *val_data;     /* the validation split's own file (nanoGPT's val.bin), or NULL: the last 10% of --data */
  const char *init_from;    /* a Hugging Face GPT-2 directory, or NULL */
  int untie;                /* --untie: an untied copy of a tied --init-from model */
  int device;               /* -1: the fastest device */
  int64_t steps, batch, accum, warmup, seed;  /* warmup -1: the library's default */
  double lr, clip, weight_decay;              /* < 0: the library's default */
  const char *save, *resume;
  int64_t save_every;       /* 0: only at the end */
  int64_t stop_at;          /* stop after this step (the schedule still spans steps); 0: at the end */
  int64_t eval_every;       /* -1: a fifth of the steps; 0: only at the end */
  int64_t eval_batches;
  int json, quiet;
  int device_given, accum_given;
  /* pipeline: --pp and the options that only mean something with it */
  int pp;                   /* pipeline devices; 0: --pp not given (one device, no pipeline) */
  int ndevices;             /* entries of devices[] given by --devices; 0: the first pp devices */
  int devices[MAX_DEVICES];
  int nsplit;               /* entries of split[] given by --split; 0: balanced by the library */
  int split[MAX_STAGES];
  int schedule;             /* STRATA_SCHEDULE_*; 0: not given (1F1B) */
  int64_t microbatches;     /* 0: not given */
  int64_t virtual_stages;   /* 0: not given (2 with interleaved) */
  const char *trace;        /* Chrome trace JSON, or NULL */
  const char *pipe_only;    /* the first pipeline option given, for "needs --pp" */
  int dp;                   /* data-parallel replicas; 0: --dp not given */
  int tp[MAX_DEVICES]; /* --tp: tensor-parallel degree, one for every rank or one per rank */
  int ntp;                  /* entries of tp; 0: --tp not given */
  int zero;                 /* --zero: ZeRO-1 over the --dp replicas */
  const char *layout_path;  /* --layout FILE */
  int plan_auto;            /* --plan auto: the cut strata-plan's planner chooses for this machine */
  strata_layout_t layout;   /* the layout to train (--layout, or built for --dp); NULL otherwise */
  const char *cut_given;    /* the first of --pp, --dp, --devices, ... given, for "--layout says it" */
};

/* Everything the run reports, kept so that the summary can be printed from any exit path. */
struct run {
  strata_model_t model;
  strata_dataset_t data;
  strata_trainer_t tr;
  const struct strata_model_config *cfg;
  struct strata_dataset_info dinfo;
  struct strata_device_props dprops;
  struct strata_train_options topts;
  int device;
  double baseline;          /* unigram entropy (text) or ln(classes) (images), nats */
  double peak_gflops;       /* measured sgemm peak of the device, 0 if unknown */
  double peak_before;       /* the measurement before training (the header's figure) */
  int peak_n;
  int64_t start_step;       /* steps already done when this run began (resume) */
  int64_t step;             /* steps done now */
  int64_t end;              /* the step this run stops after: --steps, or --stop-at */
  float loss;               /* last training loss */
  float val_loss;           /* last validation loss (NAN before the first evaluation) */
  int64_t val_step;
  double train_s;           /* seconds in steps after the first of this run (the first warms up) */
  uint64_t train_tokens;    /* tokens processed in those steps */
  double train_flops;       /* model FLOPs of those steps */
  double first_s;           /* the first step of the run, kept apart */
  uint64_t first_tokens;
  double first_flops;
  double eval_s, save_s;
  double t_start;
  const char *saved;        /* path of the last checkpoint written, NULL if none */
  int64_t saved_step;
  int progress_tty;         /* stderr is a terminal: redraw one line */
  int progress_open;        /* a progress line is drawn and not yet ended */
  /* pipeline (pp > 0); r->device, r->dprops are those of its first device */
  int pp;                   /* pipeline devices; 0: one device, no pipeline */
  int dev[MAX_DEVICES];
  struct strata_device_props props[MAX_DEVICES];
  double dev_peak[MAX_DEVICES];   /* each device's measured sgemm peak, GFLOP/s; r->peak_gflops is their sum */
  struct strata_pipeline_report rep;       /* the stages, then the last step's figures */
  strata_cluster_t cluster;                /* under mpirun (several ranks): the job; NULL in one process */
  int rank;                                /* this process's rank in it (0 in one process) */
  double step_bubble;                      /* measured bubble of the last step */
  /* step figures summed over the run's steps, and the first step's apart (the summary leaves it out) */
  double wall_all, wall_first;
  double busy_all[MAX_DEVICES], busy_first[MAX_DEVICES];
  uint64_t peak_bytes[MAX_DEVICES];
  int peak_inflight[MAX_DEVICES];
};

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
  (void)sig;
  interrupted = 1;
}

/* strata_trainer_set_stop's poll: a Ctrl-C stops an evaluation between batches. */
static int stop_requested(void *arg) {
  (void)arg;
  return interrupted != 0;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void usage(FILE *f) {
  fprintf(f,
          "Usage: strata-train [OPTION]...\n"
          "Train a model on one device, or on a pipeline of several, and report loss, validation\n"
          "loss, tokens/s, MFU and (pipelines) the bubble.\n"
          "With no options: the %s preset on the default corpus, on the fastest local device.\n"
          "\n"
          "  -m, --model PRESET|FILE  a preset (see below) or a JSON model file (default %s;\n"
          "                           with --resume, the checkpoint's model)\n"
          "  -d, --data FILE          text to train on, one token per byte (default: the default\n"
          "                           corpus), or a nanoGPT/llm.c token file; mlp and cnn models\n"
          "                           train on synthetic images\n"
          "      --data-format F      auto (default: llm.c by its magic, raw uint16 if the file holds\n"
          "                           a NUL byte, else text), text, nanogpt (raw uint16) or llmc\n"
          "      --val-data FILE      validate on FILE (e.g. nanoGPT's val.bin) instead of the last\n"
          "                           10%% of --data\n"
          "      --init-from DIR      start from a Hugging Face GPT-2 (config.json + model.safetensors)\n"
          "      --untie              with --init-from a tied model: train an untied copy (the head\n"
          "                           starts as the embedding), which --pp can cut\n"
          "      --device N|best      global device index, or the fastest by a timed sgemm (default)\n"
          "  -s, --steps N            total optimizer steps, counting resumed ones (default %d)\n"
          "  -b, --batch N            sequences or images per micro-batch (default %d)\n"
          "      --accum N            micro-batches per step (default 1)\n"
          "      --lr X               peak learning rate (default 1e-3, cosine decay to a tenth)\n"
          "      --warmup N           linear warm-up steps (default 5%% of the steps)\n"
          "      --seed N             parameter and data seed (default 1)\n"
          "      --clip X             clip the gradient norm to X, 0 = off (default 1)\n"
          "      --weight-decay X     AdamW decoupled weight decay (default 0.1)\n"
          "  -o, --save FILE          write a checkpoint (safetensors, atomically) at the end\n"
          "      --save-every N       and every N steps (default 0: only at the end)\n"
          "      --stop-at N          stop after step N (the schedule still spans --steps), save;\n"
          "                           --resume continues exactly\n"
          "  -r, --resume FILE        load a checkpoint and continue to --steps in total\n"
          "  -e, --eval-every N       validation loss every N steps and at the end\n"
          "                           (default: a fifth of the steps; 0: only at the end)\n"
          "      --eval-batches N     micro-batches per validation (default %d)\n"
          "\n"
          "Pipeline parallelism (the model cut into stages over several devices):\n"
          "      --pp N               pipeline over N devices (without it: one device, no pipeline)\n"
          "      --devices LIST       their global indices, e.g. 0,1,2,3 (default: the first N)\n"
          "      --split LIST         layers per stage, e.g. 3,3,2,2 (N stages, N x V interleaved;\n"
          "                           default: balanced by the library)\n"
          "      --schedule NAME      gpipe, 1f1b, interleaved or zb (default 1f1b)\n"
          "      --microbatches M     micro-batches per step, the same as --accum (default: --accum,\n"
          "                           else 2N)\n"
          "      --virtual-stages V   stages per device with --schedule interleaved (default 2)\n"
          "      --trace FILE         write a Chrome/Perfetto trace (JSON) of the steps\n"
          "\n"
          "Data parallelism (replicas of the model, each on its share of the step's micro-batches):\n"
          "      --dp D               D replicas of the pipeline (of one device without --pp), over\n"
          "                           D x N devices (--devices lists them replica by replica);\n"
          "                           --microbatches counts each replica's; gradients are all-reduced\n"
          "      --tp T[,T...]        tensor parallelism: every stage split over T devices (GPT: heads\n"
          "                           and MLP units; MLP, CNN: pairs of layers), one degree for every rank,\n"
          "                           or one per pipeline rank (--pp 2 --tp 2,1: rank 0 over 2 devices, rank\n"
          "                           1 whole on a third); --devices lists each replica's ranks' slices in\n"
          "                           turn (dp x sum(T) devices)\n"
          "      --zero               ZeRO-1 with --dp: gradients reduce-scattered, each replica's AdamW\n"
          "                           over its 1/D of the parameters (the moments shrink by D), the\n"
          "                           updated parameters all-gathered\n"
          "      --plan auto          the whole cut chosen by the planner (strata-plan) for this machine's\n"
          "                           devices, calibrated first, for a global batch of --batch x --accum\n"
          "      --layout FILE        the whole cut from a layout file (schema strata-layout/1, as\n"
          "                           strata-plan writes it) instead of --dp, --pp, --devices, --split,\n"
          "                           --schedule, --microbatches and --virtual-stages\n"
          "\n"
          "  -j, --json               one JSON object per line on stdout (start, step, eval, save,\n"
          "                           summary); no progress bar\n"
          "  -q, --quiet              print only errors and the summary\n"
          "  -h, --help               show this help\n"
          "      --version            show the version\n"
          "\n"
          "Presets:",
          DEFAULT_PRESET, DEFAULT_PRESET, DEFAULT_STEPS, DEFAULT_BATCH, DEFAULT_EVAL_BATCHES);
  for (const char *const *p = strata_model_presets(); p && *p; p++)
    fprintf(f, " %s", *p);
  fprintf(f, "\n\n"
             "Exit status: 0 on success, 1 on a runtime failure (unreadable data or checkpoint,\n"
             "device error, divergence), 2 on bad usage or malformed input (a token file or a Hugging\n"
             "Face config strata cannot use), 130 when interrupted (after saving).\n");
}

/* ---------------------------------------------------------------- parsing */

/*
** A comma-separated list of decimal integers >= min (digits only, no
** empty entries), at most `max` of them, for option `opt`; *n receives
** how many.
*/
static int parse_list(const char *opt, const char *text, int64_t min, int max, int *out, int *n /* OUT */) {
  const char *what = min > 0 ? "positive integers" : "device indices";
  const char *p = text;
  *n = 0;
  for (;;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    char item[32];
    int64_t v = 0;
    if (len >= sizeof item || (memcpy(item, p, len), item[len] = '\0', strata__parse_int(item, min, 1000000, &v))) {
      fprintf(stderr, PROG ": %s wants comma-separated %s, not '%s' (item '%.*s': %s)\n", opt, what, text,
              (int)(len < 40 ? len : 40), p, len >= sizeof item ? "too long" : strata__parse_why());
      return -1;
    }
    if (*n == max) {
      fprintf(stderr, PROG ": %s lists more than %d entries\n", opt, max);
      return -1;
    }
    out[(*n)++] = (int)v;
    if (!comma)
      return 0;
    p = comma + 1;
  }
}

/* Check that `opt`'s output file can be written at `path` before spending time on training. */
static int check_out_path(const char *opt, const char *path) {
  struct stat st;
  if (!*path) {
    fprintf(stderr, PROG ": %s wants a file name\n", opt);
    return -1;
  }
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
    fprintf(stderr, PROG ": %s '%s' is a directory; give a file name\n", opt, path);
    return -1;
  }
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash)
    snprintf(dir, sizeof dir, ".");
  else if (slash == dir)
    dir[1] = '\0';
  else
    *slash = '\0';
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    fprintf(stderr, PROG ": %s '%s': no directory '%s'\n", opt, path, dir);
    return -1;
  }
  if (access(dir, W_OK | X_OK) != 0) {
    fprintf(stderr, PROG ": %s '%s': directory '%s' is not writable\n", opt, path, dir);
    return -1;
  }
  return 0;
}

/*
** Outputs are never an input of the same run, nor an existing file of
** another kind: --save must not name the --data or --model file, --trace
** none of --data, --model, --resume and --save (compared by device and
** inode, so links and other spellings are caught); an existing --save must
** be a safetensors file and an existing --trace a strata trace. Then both
** outputs must be creatable now, temporary name included (one is made and
** removed), rather than fail after hours of training. Returns 0 or
** EXIT_USAGE after one line.
*/
static int check_outputs(const struct options *o) {
  const char *in_name[] = {"--data", "--model", "--resume", "--save"};
  const char *in_path[] = {o->data, o->model, o->resume, o->save};
  for (int i = 0; i < 2 && o->save; i++)
    if (cli_same_file(o->save, in_path[i])) {
      fprintf(stderr, PROG ": --save '%s' is the %s file; the checkpoint would replace it (choose another name)\n",
              o->save, in_name[i]);
      return EXIT_USAGE;
    }
  for (int i = 0; i < 4 && o->trace; i++)
    if (cli_same_file(o->trace, in_path[i])) {
      fprintf(stderr, PROG ": --trace '%s' is the %s file; the trace would replace it (choose another name)\n",
              o->trace, in_name[i]);
      return EXIT_USAGE;
    }
  unsigned char head[32];
  ssize_t n;
  /* safetensors: an 8-byte little-endian header length (far below 2^32), then the JSON header's '{' */
  if (o->save && (n = cli_read_head(o->save, head, 9)) >= 0 &&
      !(n == 9 && head[8] == '{' && !head[4] && !head[5] && !head[6] && !head[7])) {
    fprintf(stderr, PROG ": --save '%s' exists and is not a checkpoint (safetensors); it is not replaced (remove it or "
                    "choose another name)\n", o->save);
    return EXIT_USAGE;
  }
  static const char trace_magic[] = "{\"displayTimeUnit\"";
  if (o->trace && (n = cli_read_head(o->trace, head, sizeof trace_magic - 1)) >= 0 &&
      !(n == (ssize_t)sizeof trace_magic - 1 && memcmp(head, trace_magic, sizeof trace_magic - 1) == 0)) {
    fprintf(stderr, PROG ": --trace '%s' exists and is not a strata trace; it is not replaced (remove it or choose "
                    "another name)\n", o->trace);
    return EXIT_USAGE;
  }
  const char *out_name[] = {"--save", "--trace"};
  const char *out_path[] = {o->save, o->trace};
  for (int i = 0; i < 2; i++)
    if (out_path[i] && strata_file_check(out_path[i])) {
      fprintf(stderr, PROG ": %s: %s\n", out_name[i], strata_last_error());
      return EXIT_USAGE;
    }
  return 0;
}

/*
** Before step 1: draw one validation batch and one training batch of the
** run's shape, so that a split too short for the context fails now, not at
** the first evaluation after the training. Returns 0 or EXIT_RUNTIME.
*/
static int check_data_splits(const struct run *r) {
  int text = r->cfg->kind == STRATA_MODEL_GPT;
  int64_t ctx = text ? r->cfg->context : 0;
  size_t cells = (size_t)r->topts.batch * (size_t)(text ? ctx : r->cfg->channels * r->cfg->image * r->cfg->image);
  size_t rows = (size_t)r->topts.batch * (size_t)(text ? ctx : 1);
  void *in = malloc(cells * 4 + 4);
  int32_t *tg = malloc(rows * 4 + 4);
  int rc = in && tg ? 0 : -1;
  if (rc)
    fprintf(stderr, PROG ": out of host memory checking the data\n");
  for (int split = 0; split < 2 && !rc; split++) {
    uint64_t state = 1;
    if (strata_dataset_sample(r->data, split ? STRATA_SPLIT_VAL : STRATA_SPLIT_TRAIN, r->topts.batch, ctx, &state, in,
                              tg)) {
      fprintf(stderr, PROG ": %s (checked before step 1)\n", strata_last_error());
      rc = -1;
    }
  }
  free(in);
  free(tg);
  return rc ? EXIT_RUNTIME : 0;
}

/* ---------------------------------------------------------------- output helpers */

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

static int fail(const char *what) {
  if (what)
    fprintf(stderr, PROG ": %s: %s\n", what, strata_last_error());
  else
    fprintf(stderr, PROG ": %s\n", strata_last_error());
  return EXIT_RUNTIME;
}

/* ---------------------------------------------------------------- device speed */

/*
** Time C = A B (n x n, fp32) through strata_gemm on device `dev`: one
** warm-up call, then `reps` timed ones; *gflops receives the best (the
** peak the device reaches, least disturbed by other processes). Allocates
** three n x n buffers and frees them.
*/
static int time_gemm(int dev, int n, int reps, double *gflops /* OUT */, double *secs /* OUT, may be NULL */) {
  size_t elems = (size_t)n * (size_t)n;
  strata_buffer_t a = NULL, b = NULL, c = NULL;
  strata_queue_t q = NULL;
  double best = 0;
  int rc = strata_queue_new(dev, &q);
  if (!rc)
    rc = strata_buffer_new(dev, elems * 4, &a);
  if (!rc)
    rc = strata_buffer_new(dev, elems * 4, &b);
  if (!rc)
    rc = strata_buffer_new(dev, elems * 4, &c);
  if (!rc)
    rc = strata_fill(q, strata_mem(a, 0), 0.5f, (int64_t)elems);
  if (!rc)
    rc = strata_fill(q, strata_mem(b, 0), 0.25f, (int64_t)elems);
  if (!rc)
    rc = strata_queue_finish(q);
  for (int r = -1; r < reps && !rc; r++) { /* r = -1 warms up: kernel compilation, caches, thread start */
    double t0 = now();
    rc = strata_gemm(q, STRATA_NO_TRANS, STRATA_NO_TRANS, n, n, n, 1.0f, strata_mem(a, 0), n, 0, strata_mem(b, 0), n,
                     0, 0.0f, strata_mem(c, 0), n, 0, 1);
    if (!rc)
      rc = strata_queue_finish(q);
    double dt = now() - t0;
    if (!rc && r >= 0 && dt > 0 && 2.0 * n * n * n / dt > best)
      best = 2.0 * n * n * n / dt;
  }
  /* The queue first: freeing it waits for work still queued on the buffers (a failed enqueue leaves some). */
  strata_queue_free(q);
  strata_buffer_free(a);
  strata_buffer_free(b);
  strata_buffer_free(c);
  if (!rc) {
    *gflops = best * 1e-9;
    if (secs)
      *secs = best > 0 ? 2.0 * n * n * n / best : 0;
  }
  return rc;
}

/* Say that device `dev`'s peak (measure_peak, time_gemm) failed, with the last error: training goes on without MFU. */
static void no_peak(int dev) {
  fprintf(stderr, PROG ": device %d's matrix-product peak could not be measured (%s); MFU is not reported\n", dev,
          strata_last_error());
}

/*
** The device's sgemm peak: N = PEAK_N unless one product of that size would
** take longer than PEAK_MAX_SECONDS at the rate a 256 product shows, then
** the largest power of two that fits (never below 256). `rough` is a rate
** already known (GFLOP/s, 0 if none) to skip the probe.
*/
static int measure_peak(int dev, double rough, double *gflops /* OUT */, int *n_used /* OUT */) {
  int rc = STRATA_OK;
  if (rough <= 0)
    rc = time_gemm(dev, 256, 3, &rough, NULL);
  if (rc)
    return rc;
  int n = PEAK_N;
  while (n > 256 && 2.0 * n * n * n / (rough * 1e9) > PEAK_MAX_SECONDS)
    n /= 2;
  /* Fall back to smaller products when the device's memory cap refuses the big ones. */
  for (; n >= 128; n /= 2) {
    rc = time_gemm(dev, n, PEAK_REPS, gflops, NULL);
    if (rc != STRATA_ERR_DEVICE_MEMORY)
      break;
  }
  *n_used = n;
  return rc;
}

/*
** Choose the fastest device: a 512 product (after a 256 probe that also
** warms up) on every device, the highest GFLOP/s wins. The figures are
** written into `why` for the report. Devices whose measurement fails are
** skipped with their reason; none left is an error.
*/
static int pick_best_device(int ndev, int *best /* OUT */, double *rate /* OUT */, char *why, size_t why_size) {
  double top = -1;
  int top_dev = -1;
  size_t len = 0;
  why[0] = '\0';
  for (int d = 0; d < ndev; d++) {
    struct strata_device_props p;
    double g = 0;
    int rc = strata_device_props(d, &p);
    if (!rc)
      rc = time_gemm(d, 256, 1, &g, NULL);
    if (!rc)
      rc = time_gemm(d, 512, 2, &g, NULL);
    if (rc) {
      len += (size_t)snprintf(why + len, len < why_size ? why_size - len : 0, "%s%d %s: failed (%s)",
                              len ? "; " : "", d, rc ? "?" : p.backend, strata_last_error());
      continue;
    }
    len += (size_t)snprintf(why + len, len < why_size ? why_size - len : 0, "%s%d %s %.1f GFLOP/s", len ? ", " : "",
                            d, p.backend, g);
    if (g > top) {
      top = g;
      top_dev = d;
    }
  }
  if (top_dev < 0) {
    fprintf(stderr, PROG ": no device could run a matrix product: %s\n", why);
    return -1;
  }
  *best = top_dev;
  *rate = top;
  return 0;
}

/* ---------------------------------------------------------------- progress and summary */

static void progress_end(struct run *r) {
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

/* One progress report: a redrawn line on a terminal, else a plain line. */
static void progress(struct run *r) {
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
    snprintf(bub, sizeof bub, "  bubble %.1f%%", 100 * r->step_bubble);
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
static double pipeline_figures(const struct run *r, double *wall /* OUT */, double *busy /* OUT */) {
  int skip = r->step - r->start_step >= 2;
  double total = 0;
  *wall = r->wall_all - (skip ? r->wall_first : 0);
  for (int i = 0; i < r->pp; i++) {
    busy[i] = r->busy_all[i] - (skip ? r->busy_first[i] : 0);
    total += busy[i];
  }
  return *wall > 0 ? 1.0 - total / ((double)r->pp * *wall) : NAN;
}

static void print_summary(struct run *r, int was_interrupted, const struct options *o) {
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
    printf(",\"wall_s\":%.3f,\"train_s\":%.3f,\"eval_s\":%.3f,\"checkpoint\":", wall, r->train_s + r->first_s,
           r->eval_s);
    if (r->saved)
      json_str(stdout, r->saved);
    else
      printf("null");
    if (r->pp) {
      double pwall, busy[MAX_DEVICES];
      double bubble = pipeline_figures(r, &pwall, busy);
      printf(",\"pp\":%d,\"schedule\":", r->pp);
      json_str(stdout, strata_schedule_kind_name(r->rep.schedule));
      printf(",\"bubble\":");
      json_float(stdout, bubble);
      printf(",\"bubble_ideal\":");
      json_float(stdout, r->rep.bubble_ideal);
      printf(",\"pipeline_wall_s\":%.6f,\"devices\":[", pwall);
      for (int i = 0; i < r->pp; i++) {
        printf("%s{\"device\":%d,\"busy\":", i ? "," : "", r->dev[i]);
        json_float(stdout, pwall > 0 ? busy[i] / pwall : NAN);
        printf(",\"busy_s\":%.6f,\"peak_bytes\":%llu,\"peak_inflight\":%d}", busy[i],
               (unsigned long long)r->peak_bytes[i], r->peak_inflight[i]);
      }
      printf("]");
    }
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
      printf("          %s %s/s, MFU unknown (no sgemm peak)\n", tok,
             r->dinfo.kind == STRATA_DATA_TEXT ? "tokens" : "images");
    else
      printf("          %s %s/s, %.2f GFLOP/s of model FLOPs, MFU %.1f%% of the %.1f GFLOP/s sgemm peak%s\n",
             tok, r->dinfo.kind == STRATA_DATA_TEXT ? "tokens" : "images", m * r->peak_gflops, 100 * m,
             r->peak_gflops, done >= 2 ? " (first step excluded)" : "");
    if (r->peak_gflops > r->peak_before && r->peak_before > 0)
      printf("          (peak measured %.1f GFLOP/s before training, %.1f after: the higher is used)\n",
             r->peak_before, r->peak_gflops);
  }
  if (r->pp && done) {
    double pwall, busy[MAX_DEVICES];
    double bubble = pipeline_figures(r, &pwall, busy);
    printf("pipeline  bubble %.1f%% measured vs %.1f%% theoretical (%s, %d device%s, %d micro-batches)%s\n",
           100 * bubble, 100 * r->rep.bubble_ideal, strata_schedule_kind_name(r->rep.schedule), r->pp,
           r->pp == 1 ? "" : "s", r->rep.microbatches, done >= 2 ? ", first step excluded" : "");
    for (int i = 0; i < r->pp; i++)
      printf("          device %d: busy %.1f%% of the wall time, peak memory %.1f MiB, at most %d micro-batch%s in "
             "flight\n",
             r->dev[i], pwall > 0 ? 100 * busy[i] / pwall : 0.0, (double)r->peak_bytes[i] / (1024.0 * 1024.0),
             r->peak_inflight[i], r->peak_inflight[i] == 1 ? "" : "es");
  }
  if (r->saved)
    printf("          checkpoint %s (step %lld)\n", r->saved, (long long)r->saved_step);
  else if (o->save)
    printf("          no checkpoint written\n");
  fflush(stdout);
}

/* ---------------------------------------------------------------- training */

/*
** After a pipeline step: the trainer's report of it, summed into the run's
** figures (the run's first step also kept apart, for the summary leaves it
** out like tokens/s), peaks kept.
*/
static int pipeline_step(struct run *r) {
  if (strata_trainer_report(r->tr, &r->rep))
    return -1;
  int first = r->step - r->start_step == 1;
  r->step_bubble = r->rep.bubble;
  r->wall_all += r->rep.wall_s;
  if (first)
    r->wall_first = r->rep.wall_s;
  for (int i = 0; i < r->pp; i++) {
    const struct strata_pipeline_device_stats *d = &r->rep.dev[i];
    r->busy_all[i] += d->busy_s;
    if (first)
      r->busy_first[i] = d->busy_s;
    if (d->peak_bytes > r->peak_bytes[i])
      r->peak_bytes[i] = d->peak_bytes;
    if (d->peak_inflight > r->peak_inflight[i])
      r->peak_inflight[i] = d->peak_inflight;
  }
  return 0;
}

static int save_checkpoint(struct run *r, const struct options *o) {
  double t0 = now();
  if (strata_trainer_save(r->tr, o->save)) {
    progress_end(r);
    return fail(NULL);
  }
  r->save_s += now() - t0;
  r->saved = o->save;
  r->saved_step = r->step;
  if (o->json) {
    printf("{\"event\":\"save\",\"step\":%lld,\"path\":", (long long)r->step);
    json_str(stdout, o->save);
    printf("}\n");
    fflush(stdout);
  }
  return 0;
}

/* One validation: 0 done, EVAL_INTERRUPTED stopped by a Ctrl-C (no loss), else EXIT_RUNTIME after a message. */
#define EVAL_INTERRUPTED (-1)
static int evaluate(struct run *r, const struct options *o) {
  double t0 = now();
  float v;
  int rc = strata_trainer_eval(r->tr, o->eval_batches, &v);
  if (rc == STRATA_ERR_INTERRUPTED) {
    r->eval_s += now() - t0;
    return EVAL_INTERRUPTED;
  }
  if (rc) {
    progress_end(r);
    return fail("validation");
  }
  r->eval_s += now() - t0;
  r->val_loss = v;
  r->val_step = r->step;
  if (o->json) {
    printf("{\"event\":\"eval\",\"step\":%lld,\"val_loss\":", (long long)r->step);
    json_float(stdout, v);
    printf(",\"eval_s\":%.4f}\n", now() - t0);
    fflush(stdout);
  }
  return 0;
}

/* The loop: steps up to opts.steps, evaluations, periodic checkpoints, SIGINT. Returns an exit status. */
static int train(struct run *r, const struct options *o) {
  int64_t total = r->topts.steps;
  int64_t end = r->end = o->stop_at > 0 && o->stop_at < total ? o->stop_at : total;
  int64_t plain_every = total / 20 > 0 ? total / 20 : 1; /* plain lines: about twenty per run */
  double last_plain = now();
  while (r->step < end && !interrupted) {
    struct strata_step_stats s;
    double t0 = now();
    if (strata_trainer_step(r->tr, &s)) {
      progress_end(r);
      return fail(NULL);
    }
    double dt = now() - t0;
    r->step = s.step;
    r->loss = s.loss;
    if (r->pp && pipeline_step(r)) {
      progress_end(r);
      return fail(NULL);
    }
    if (r->step - r->start_step == 1) {
      r->first_s = dt;
      r->first_tokens = s.tokens;
      r->first_flops = s.flops;
    } else {
      r->train_s += dt;
      r->train_tokens += s.tokens;
      r->train_flops += s.flops;
    }
    if (o->json) {
      printf("{\"event\":\"step\",\"step\":%lld,\"loss\":", (long long)s.step);
      json_float(stdout, s.loss);
      printf(",\"grad_norm\":");
      json_float(stdout, s.grad_norm);
      printf(",\"lr\":");
      json_float(stdout, s.lr);
      printf(",\"tokens\":%llu,\"step_s\":%.6f,\"tokens_per_s\":", (unsigned long long)s.tokens, dt);
      json_float(stdout, dt > 0 ? (double)s.tokens / dt : NAN);
      printf(",\"mfu\":");
      json_float(stdout, r->peak_gflops > 0 && dt > 0 ? s.flops / dt / (r->peak_gflops * 1e9) : NAN);
      if (r->pp) {
        printf(",\"bubble\":");
        json_float(stdout, r->step_bubble);
      }
      printf("}\n");
      fflush(stdout);
    }
    if (!isfinite(s.loss)) {
      /* Nothing is saved from here on: a diverged model must not replace a good checkpoint. */
      progress_end(r);
      fprintf(stderr, PROG ": the loss is not finite at step %lld (training diverged; try a lower --lr)%s\n",
              (long long)s.step, r->saved ? "; the last checkpoint written is kept" : "; no checkpoint written");
      return EXIT_RUNTIME;
    }
    int last = r->step >= end;
    int evaluated = 0;
    if (!last && o->eval_every > 0 && r->step % o->eval_every == 0 && !interrupted) {
      int erc = evaluate(r, o);
      if (erc == EXIT_RUNTIME) {
        /* the steps are done and good: keep them before failing */
        if (o->save && r->saved_step != r->step && r->step > r->start_step)
          save_checkpoint(r, o);
        return EXIT_RUNTIME;
      }
      evaluated = erc == 0;
    }
    if (!o->json && !o->quiet) {
      if (r->progress_tty)
        progress(r);
      else if (r->step - r->start_step == 1 || r->step % plain_every == 0 || evaluated || last ||
               now() - last_plain > 30) {
        progress(r);
        last_plain = now();
      }
    }
    if (!last && o->save && o->save_every > 0 && r->step % o->save_every == 0 && !interrupted)
      if (save_checkpoint(r, o))
        return EXIT_RUNTIME;
  }
  progress_end(r);
  return 0;
}

/* ---------------------------------------------------------------- setup */

/* Exit status of a failed call on input the user gave: 2 when the input itself is malformed or unusable, else 1. */
static int fail_input(int code) {
  fprintf(stderr, PROG ": %s\n", strata_last_error());
  return code == STRATA_ERR_PARSE || code == STRATA_ERR_RANGE || code == STRATA_ERR_UNSUPPORTED ||
                 code == STRATA_ERR_SHAPE
             ? EXIT_USAGE
             : EXIT_RUNTIME;
}

static int load_data(struct run *r, const struct options *o) {
  if (r->cfg->kind == STRATA_MODEL_GPT) {
    if (o->val_data) {
      int rc = strata_dataset_tokens_split(o->data, o->val_data,
                                           o->data_format < 0 ? STRATA_TOKENS_AUTO : o->data_format, r->cfg->vocab,
                                           &r->data);
      if (rc)
        return fail_input(rc);
    } else if (!o->data || o->data_format == STRATA_TOKENS_BYTES) {
      if (strata_dataset_text(o->data, VAL_FRACTION, &r->data))
        return fail(NULL);
    } else {
      int rc = strata_dataset_tokens(o->data, o->data_format < 0 ? STRATA_TOKENS_AUTO : o->data_format,
                                     r->cfg->vocab, VAL_FRACTION, &r->data);
      if (rc)
        return fail_input(rc);
    }
  } else {
    if (o->data_format >= 0 || o->val_data) {
      fprintf(stderr, PROG ": %s is for text models; %s is an image model\n",
              o->val_data ? "--val-data" : "--data-format", r->cfg->name);
      return EXIT_USAGE;
    }
    if (o->data) {
      fprintf(stderr, PROG ": --data is for text models; %s is an image model and trains on synthetic shapes\n",
              r->cfg->name);
      return EXIT_USAGE;
    }
    if (strata_dataset_images(IMAGE_COUNT, r->cfg->image, r->cfg->classes, (uint64_t)r->topts.seed, &r->data))
      return fail(NULL);
  }
  if (strata_dataset_info(r->data, &r->dinfo))
    return fail(NULL);
  r->baseline = r->dinfo.kind == STRATA_DATA_TEXT ? r->dinfo.unigram_entropy : log((double)r->cfg->classes);
  return 0;
}

/* The model of a checkpoint, from the model config the trainer stores in its metadata ("model", the model-file JSON). */
static int model_from_checkpoint(const char *path, strata_model_t *out /* OUT */) {
  strata_safetensors_t st = NULL;
  if (strata_safetensors_read(path, &st))
    return fail(NULL);
  const char *json = strata_safetensors_meta(st, "model");
  if (!json) {
    fprintf(stderr, PROG ": %s: no model config in the checkpoint's metadata; give --model\n", path);
    strata_safetensors_free(st);
    return EXIT_RUNTIME;
  }
  int rc = strata_model_from_json(json, path, out);
  strata_safetensors_free(st);
  if (rc) {
    fprintf(stderr, PROG ": %s: the checkpoint's model config: %s\n", path, strata_last_error());
    return EXIT_RUNTIME;
  }
  return 0;
}

/* "--dp 2 x --pp 2 x --tp 2" (the parts given), for messages. */
static const char *cut_text(const struct options *o, char *buf, size_t cap) {
  size_t at = (size_t)snprintf(buf, cap, "--dp %d x --pp %d", o->dp ? o->dp : 1, o->pp);
  if (o->ntp && at < cap) {
    at += (size_t)snprintf(buf + at, cap - at, " x --tp ");
    for (int i = 0; i < o->ntp && at < cap; i++)
      at += (size_t)snprintf(buf + at, cap - at, "%s%d", i ? "," : "", o->tp[i]);
  }
  return buf;
}

/* Devices of one replica: the sum over its pipeline ranks of their tp degrees. */
static int replica_devices(const struct options *o) {
  if (o->ntp <= 1)
    return o->pp * (o->ntp ? o->tp[0] : 1);
  int n = 0;
  for (int i = 0; i < o->ntp; i++)
    n += o->tp[i];
  return n;
}

/*
** The pipeline's devices: those of --devices, or the first --pp; each must
** exist (else bad usage). Fills r->pp, r->dev and r->props; r->device and
** r->dprops become the first's.
*/
/*
** The properties of global device `dev`: this process's own, or under
** mpirun another rank's as the cluster view describes it (name, backend,
** memory; its free memory and speed are that rank's to know).
*/
static int device_props(const struct run *r, int dev, struct strata_device_props *p) {
  struct strata_cluster_info ci;
  if (!r->cluster || strata_cluster_info(r->cluster, &ci) || ci.size == 1)
    return strata_device_props(dev, p);
  struct strata_cluster_device d;
  int rc = strata_cluster_device(r->cluster, dev, &d);
  if (rc)
    return rc;
  if (d.rank == ci.rank)
    return strata_device_props(d.local, p);
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", d.info.name);
  snprintf(p->backend, sizeof p->backend, "%s", d.info.backend);
  snprintf(p->vendor, sizeof p->vendor, "%s", d.info.vendor);
  p->is_cpu = d.info.is_cpu;
  p->total_memory = p->memory_limit = p->free_memory = d.info.memory;
  return STRATA_OK;
}

static int pipeline_devices(struct run *r, const struct options *o, int ndev) {
  /* every device of the run: a replica's pipeline ranks, replica after replica */
  const int want = o->layout ? o->ndevices : (o->dp ? o->dp : 1) * replica_devices(o);
  r->pp = want;
  if (!o->ndevices && want > ndev) {
    char what[200], cut[160];
    if (o->dp || o->ntp)
      snprintf(what, sizeof what, "%s = %d devices", cut_text(o, cut, sizeof cut), want);
    else
      snprintf(what, sizeof what, "--pp %d", o->pp);
    fprintf(stderr, PROG ": %s: there %s only %d device%s (see strata-topo; STRATA_HOST_DEVICES=N makes N host devices)\n",
            what, ndev == 1 ? "is" : "are", ndev, ndev == 1 ? "" : "s");
    return EXIT_USAGE;
  }
  for (int i = 0; i < want; i++) {
    r->dev[i] = o->ndevices ? o->devices[i] : i;
    if (r->dev[i] >= ndev) {
      fprintf(stderr, PROG ": --devices: no device %d; there %s %d (see strata-topo)\n", r->dev[i],
              ndev == 1 ? "is" : "are", ndev);
      return EXIT_USAGE;
    }
    if (device_props(r, r->dev[i], &r->props[i]))
      return fail(NULL);
  }
  /* devices chosen here with --tp: each tensor-parallel group inside one island of the topology (the fastest
  ** links), the pipeline and the replicas across them; under mpirun the global order, rank by rank, keeps each
  ** group on one rank when the ranks' device counts allow it (this process's topology knows only its own) */
  if (!o->ndevices && !o->layout && o->ntp == 1 && o->tp[0] > 1 && !r->topts.cluster) {
    strata_topology_t topo = NULL;
    int order[MAX_DEVICES];
    int rc = strata_topology_load(NULL, &topo);
    if (!rc)
      rc = strata_topology_map_runtime(topo);
    if (!rc)
      rc = strata_topology_tp_order(topo, r->dev, want, o->tp[0], order);
    strata_topology_free(topo);
    if (rc) {
      if (!o->json && !o->quiet)
        printf("placement tp groups in device order: the topology is unknown (%s)\n", strata_last_error());
    } else {
      for (int i = 0; i < want; i++)
        if ((r->dev[i] = order[i]) >= 0 && strata_device_props(r->dev[i], &r->props[i]))
          return fail(NULL);
    }
  }
  r->device = r->dev[0];
  r->dprops = r->props[0];
  return 0;
}

static int adopt_layout(struct options *o, const char *from);

/*
** --plan auto: calibrate this machine's devices, search layouts for the
** model and the global batch (--batch x --accum samples) on them, and train
** the best as --layout would; each micro-batch is then the global batch over
** the layout's replicas and micro-batches.
*/
static int plan_auto(struct run *r, struct options *o) {
  const int64_t global = r->topts.batch * r->topts.accum;
  if (!o->json && !o->quiet) {
    printf("plan      calibrating the devices and searching layouts for %lld samples per step ...\n",
           (long long)global);
    fflush(stdout);
  }
  char *json = NULL;
  strata_machine_t mach = NULL;
  strata_plan_t plan = NULL;
  int rc = strata_calibrate(NULL, 0, &json);
  if (!rc)
    rc = strata_machine_from_calibration(json, "this machine", NULL, &mach);
  struct strata_plan_options po = {.batch = global, .top = 1};
  if (!rc)
    rc = strata_plan_search(mach, r->model, &po, &plan);
  struct strata_plan_candidate best;
  if (!rc)
    rc = strata_plan_candidate(plan, 0, &best);
  char *text = NULL;
  if (!rc)
    rc = strata_layout_to_json(best.layout, &text);
  if (!rc)
    rc = strata_layout_from_json(text, "the plan", &o->layout);
  if (rc) {
    fprintf(stderr, PROG ": --plan auto: %s\n", strata_last_error());
    free(json);
    free(text);
    strata_plan_free(plan);
    strata_machine_free(mach);
    return rc == STRATA_ERR_DEVICE_MEMORY ? EXIT_RUNTIME : EXIT_USAGE;
  }
  const int64_t share = (int64_t)strata_layout_dp(o->layout) * strata_layout_microbatches(o->layout);
  if (!o->json && !o->quiet) {
    char *what = NULL;
    strata_layout_describe(o->layout, &what);
    printf("plan      %s: predicted %.3f s per step (%s)\n", what ? what : text, best.step_s, best.reason);
    free(what);
  }
  free(json);
  free(text);
  strata_plan_free(plan);
  strata_machine_free(mach);
  if (share < 1 || global % share) {
    fprintf(stderr, PROG ": --plan auto: the plan's %lld micro-batches do not divide the %lld samples of a step\n",
            (long long)share, (long long)global);
    return EXIT_RUNTIME;
  }
  r->topts.batch = global / share;
  o->accum_given = 0; /* --accum counted the step's samples; the layout's micro-batches take its place */
  int urc = adopt_layout(o, "--plan auto");
  r->topts.accum = o->accum;
  return urc;
}

/*
** Each pipeline device's sgemm peak, before the trainer allocates; the
** peak of MFU (r->peak_gflops) is their sum, 0 (unknown) when one fails.
** All use the N of the first, so that the figures compare.
*/
static void measure_pipeline_peaks(struct run *r) {
  double sum = 0;
  for (int i = 0; i < r->pp; i++) {
    int n = 0;
    int rc = i == 0 ? measure_peak(r->dev[i], 0, &r->dev_peak[i], &n)
                    : time_gemm(r->dev[i], r->peak_n, PEAK_REPS, &r->dev_peak[i], NULL);
    if (i == 0)
      r->peak_n = n;
    if (rc) {
      no_peak(r->dev[i]);
      r->peak_gflops = 0;
      return;
    }
    sum += r->dev_peak[i];
  }
  r->peak_gflops = sum;
}

/*
** strata_trainer_new_pipeline with the command line's options. A pipeline
** the library refuses for its shape (a split that does not cover the
** model's layers, more stages than layers) is bad usage, EXIT_USAGE.
*/
static int new_layout_trainer(struct run *r, const struct options *o) {
  strata_layout_t l = o->layout, built = NULL;
  if (!l) { /* --dp: the layout of the command line */
    struct strata_layout_desc d = {.dp = o->dp, .pp = o->pp, .devices = r->dev, .ndevices = r->pp,
                                   .tp_all = o->ntp == 1 ? o->tp[0] : 0, .tp = o->ntp > 1 ? o->tp : NULL,
                                   .zero = o->zero,
                                   .split = o->nsplit ? o->split : NULL, .nsplit = o->nsplit,
                                   .schedule = o->schedule, .microbatches = (int)o->microbatches,
                                   .virtual_stages = o->schedule == STRATA_SCHEDULE_INTERLEAVED ? (int)o->virtual_stages : 0};
    if (strata_layout_new(&d, &built)) {
      fprintf(stderr, PROG ": %s\n", strata_last_error());
      return EXIT_USAGE;
    }
    l = built;
  }
  int rc = strata_trainer_new_layout(r->model, r->data, &r->topts, l, o->trace, &r->tr);
  strata_layout_free(built);
  if (rc == STRATA_ERR_SHAPE || rc == STRATA_ERR_INVALID || rc == STRATA_ERR_UNSUPPORTED || rc == STRATA_ERR_NOT_FOUND) {
    fprintf(stderr, PROG ": %s\n", strata_last_error());
    return EXIT_USAGE;
  }
  if (rc || strata_trainer_report(r->tr, &r->rep))
    return fail(NULL);
  return 0;
}

static int new_pipeline_trainer(struct run *r, const struct options *o) {
  if (o->dp || o->ntp || o->layout)
    return new_layout_trainer(r, o);
  struct strata_pipeline_options pp;
  memset(&pp, 0, sizeof pp);
  pp.devices = r->pp;
  pp.device = r->dev;
  pp.split = o->nsplit ? o->split : NULL;
  pp.schedule = o->schedule;
  pp.microbatches = (int)o->microbatches;
  pp.virtual_stages = o->schedule == STRATA_SCHEDULE_INTERLEAVED ? (int)o->virtual_stages : 0;
  pp.trace = o->trace;
  int rc = strata_trainer_new_pipeline(r->model, r->data, &r->topts, &pp, &r->tr);
  if (rc == STRATA_ERR_SHAPE || rc == STRATA_ERR_INVALID) {
    fprintf(stderr, PROG ": %s\n", strata_last_error());
    return EXIT_USAGE;
  }
  if (rc || strata_trainer_report(r->tr, &r->rep))
    return fail(NULL);
  return 0;
}

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

/* The backend of global device `dev` among the pipeline's. */
static const char *pipeline_backend(const struct run *r, int dev) {
  for (int i = 0; i < r->pp; i++)
    if (r->dev[i] == dev)
      return r->props[i].backend;
  return "?";
}

static void print_header(const struct run *r, const struct options *o, const char *why) {
  const struct strata_model_config *c = r->cfg;
  uint64_t params = strata_model_params(r->model);
  double per_sample = strata_model_flops(r->model);
  int text = c->kind == STRATA_MODEL_GPT;
  double per_token = text ? per_sample / (double)c->context : per_sample;
  /* every replica runs accum micro-batches */
  double step_tokens = (double)r->topts.batch * (double)r->topts.accum * (text ? (double)c->context : 1.0) *
                       (o->dp ? (double)o->dp : 1.0);
  if (o->json) {
    printf("{\"event\":\"start\",\"model\":");
    json_str(stdout, c->name);
    printf(",\"kind\":\"%s\",\"params\":%llu,\"flops_per_token\":%.6g,\"data\":", text ? "gpt" : c->kind == STRATA_MODEL_MLP ? "mlp" : "cnn",
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
    printf(",\"peak_n\":%d,\"steps\":%lld,\"start_step\":%lld,\"batch\":%lld,\"accum\":%lld,\"tokens_per_step\":%.0f",
           r->peak_n, (long long)r->topts.steps, (long long)r->start_step, (long long)r->topts.batch,
           (long long)r->topts.accum, step_tokens);
    if (r->pp) {
      printf(",\"pp\":%d,\"dp\":%d,\"tp\":%d,\"schedule\":", r->pp, o->dp ? o->dp : 1,
             o->layout ? strata_layout_tp(o->layout, 0) : o->ntp ? o->tp[0] : 1);
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
        if (r->rep.stage_device[st] >= 0) /* a stage of a narrower rank's missing slice is held by no device */
          printf("%s{\"stage\":%d,\"first_layer\":%d,\"layers\":%d,\"device\":%d}", n++ ? "," : "", st,
                 first % strata_model_layer_count(r->model), r->rep.split[st], r->rep.stage_device[st]);
      printf("]");
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
  if (text)
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
        printf(", sgemm peak %.1f GFLOP/s", r->dev_peak[i]);
      printf("\n");
    }
    if (!o->ndevices)
      printf("          (the first %d device%s; --devices chooses others)\n", r->pp, r->pp == 1 ? "" : "s");
    if (r->peak_gflops > 0)
      printf("peak      %.1f GFLOP/s: the sum of the devices' sgemm peaks (N=%d, best of %d, through strata)\n",
             r->peak_gflops, r->peak_n, PEAK_REPS);
    else
      printf("peak      unknown (an sgemm measurement failed); MFU not reported\n");
  } else {
    printf("device    %d: %s (%s backend)", r->device, r->dprops.name, r->dprops.backend);
    if (why && strcmp(why, "the only device") == 0)
      printf(", the only device");
    else if (why)
      printf(", the fastest by a 512 sgemm: %s", why);
    printf("\n");
    if (r->peak_gflops > 0)
      printf("peak      %.1f GFLOP/s sgemm (N=%d, best of %d, through strata on device %d)\n", r->peak_gflops,
             r->peak_n, PEAK_REPS, r->device);
    else
      printf("peak      unknown (the sgemm measurement failed); MFU not reported\n");
  }
  char wu[32];
  snprintf(wu, sizeof wu, "%lld", (long long)r->topts.warmup);
  printf("train     %lld steps x %lld %s x %lld %s = %.0f %s/step, lr %g -> %g, warm-up %s, seed %llu\n",
         (long long)r->topts.steps, (long long)r->topts.batch, text ? "sequences" : "images",
         (long long)r->topts.accum, r->pp ? "micro-batches" : "accum", step_tokens, text ? "tokens" : "images",
         r->topts.lr, r->topts.min_lr, wu, (unsigned long long)r->topts.seed);
  if (r->pp) {
    const char *sched = strata_schedule_kind_name(r->rep.schedule);
    if (o->dp)
      printf("replicas  %d (data parallel: each on %d of the step's micro-batches, gradients all-reduced)\n", o->dp,
             r->rep.microbatches);
    int tpd = o->layout ? strata_layout_tp(o->layout, 0) : o->ntp ? o->tp[0] : 1, per_rank = 0;
    for (int k = 1; k < (o->layout ? strata_layout_pp(o->layout) : o->ntp); k++)
      per_rank |= (o->layout ? strata_layout_tp(o->layout, k) : o->tp[k]) != tpd;
    if (per_rank) {
      printf("tensor    slices per pipeline rank");
      for (int k = 0; k < (o->layout ? strata_layout_pp(o->layout) : o->ntp); k++)
        printf("%s%d", k ? "," : " ", o->layout ? strata_layout_tp(o->layout, k) : o->tp[k]);
      printf(" (a rank's slices each hold 1/T of its heads and MLP units; a narrower rank takes slice 0's "
             "activations\n          and sends its gradients to every slice)\n");
    } else if (tpd > 1) {
      printf("tensor    %d slices per stage (each holds 1/%d of the heads and MLP units; joined by all-reduces)\n", tpd,
             tpd);
    }
    printf("pipeline  %d device%s, %d stage%s (%s), %s schedule over %d micro-batches: theoretical bubble %.1f%%\n",
           r->pp, r->pp == 1 ? "" : "s", r->rep.stages, r->rep.stages == 1 ? "" : "s",
           o->nsplit || (o->layout && strata_layout_split(o->layout)) ? "given" : "balanced by the library", sched,
           r->rep.microbatches, 100 * r->rep.bubble_ideal);
    for (int st = 0; st < r->rep.stages; st++) {
      char layers[160];
      if (r->rep.stage_device[st] < 0)
        continue; /* the missing slice of a narrower rank: no device holds it */
      stage_layers(r, st, layers, sizeof layers);
      printf("          stage %d: %s on device %d (%s)\n", st, layers, r->rep.stage_device[st],
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

enum {
  OPT_DEVICE = 256, OPT_ACCUM, OPT_LR, OPT_WARMUP, OPT_SEED, OPT_CLIP, OPT_WD, OPT_SAVE_EVERY, OPT_STOP_AT, OPT_EVAL_BATCHES,
  OPT_VERSION, OPT_PP, OPT_DEVICES, OPT_SPLIT, OPT_SCHEDULE, OPT_MICROBATCHES, OPT_VIRTUAL_STAGES, OPT_TRACE,
  OPT_DATA_FORMAT, OPT_INIT_FROM, OPT_UNTIE, OPT_VAL_DATA, OPT_DP, OPT_LAYOUT, OPT_TP, OPT_ZERO, OPT_PLAN
};

/*
** The pipeline options' checks that need no device: every pipeline option
** wants --pp; --devices has N distinct entries; --split one per stage;
** --accum and --microbatches agree; interleaving's constraints. Fills in
** the defaults (schedule, micro-batches, virtual stages). Returns 0 or
** EXIT_USAGE after one line on stderr.
*/
static int check_cut_args(struct options *o);

static int check_pipeline_args(struct options *o) {
  if (o->plan_auto) {
    if (o->layout_path || o->cut_given || o->device_given) {
      fprintf(stderr, PROG ": --plan auto chooses the whole cut; drop %s\n",
              o->layout_path ? "--layout" : o->cut_given ? o->cut_given : "--device");
      return EXIT_USAGE;
    }
    return 0;
  }
  if (o->layout_path) {
    if (o->cut_given) {
      fprintf(stderr, PROG ": --layout gives the whole cut; drop %s\n", o->cut_given);
      return EXIT_USAGE;
    }
    if (strata_layout_load(o->layout_path, &o->layout)) {
      fprintf(stderr, PROG ": --layout: %s\n", strata_last_error());
      return EXIT_USAGE;
    }
    return adopt_layout(o, "--layout");
  }
  return check_cut_args(o);
}

/* The tool's own view of the cut of o->layout (from --layout or --plan auto), for its reports and checks. */
static int adopt_layout(struct options *o, const char *from) {
  {
    o->dp = strata_layout_dp(o->layout);
    o->pp = strata_layout_pp(o->layout);
    o->ndevices = strata_layout_device_count(o->layout);
    if (o->ndevices > MAX_DEVICES) {
      fprintf(stderr, PROG ": %s: %d devices; this tool trains on at most %d\n", from, o->ndevices, MAX_DEVICES);
      return EXIT_USAGE;
    }
    memcpy(o->devices, strata_layout_devices(o->layout), sizeof(int) * (size_t)o->ndevices);
    o->schedule = strata_layout_schedule(o->layout);
    o->microbatches = strata_layout_microbatches(o->layout);
    o->virtual_stages = strata_layout_virtual_stages(o->layout);
    if (o->device_given) {
      fprintf(stderr, PROG ": --device chooses one device; the layout names its devices\n");
      return EXIT_USAGE;
    }
    if (o->microbatches && o->accum_given && o->microbatches != o->accum) {
      fprintf(stderr, PROG ": --accum %lld and the layout's %lld micro-batches differ (give neither)\n",
              (long long)o->accum, (long long)o->microbatches);
      return EXIT_USAGE;
    }
    o->accum = o->microbatches;
    if (o->trace && check_out_path("--trace", o->trace))
      return EXIT_USAGE;
    return 0;
  }
}

/* The cut of the command line (--pp, --dp, --tp, --devices ...) when no layout gives it. */
static int check_cut_args(struct options *o) {
  if (o->zero && o->dp < 2) {
    fprintf(stderr, PROG ": --zero shards the optimizer over replicas: give --dp 2 or more\n");
    return EXIT_USAGE;
  }
  if ((o->dp || o->ntp) && !o->pp)
    o->pp = 1; /* replicas, or slices, of one stage */
  if (o->ntp > 1 && o->ntp != o->pp) {
    fprintf(stderr, PROG ": --tp lists %d degrees, one per pipeline rank: --pp is %d\n", o->ntp, o->pp);
    return EXIT_USAGE;
  }
  if (!o->pp) {
    if (o->pipe_only) {
      fprintf(stderr, PROG ": %s is a pipeline option; give --pp N too (see --help)\n", o->pipe_only);
      return EXIT_USAGE;
    }
    return 0;
  }
  if (o->device_given) {
    fprintf(stderr, PROG ": --device chooses one device; with --pp, --devices LIST chooses them\n");
    return EXIT_USAGE;
  }
  const int want = (o->dp ? o->dp : 1) * replica_devices(o);
  char cut[160];
  if (want > MAX_DEVICES) {
    fprintf(stderr, PROG ": %s = %d devices; at most %d\n", cut_text(o, cut, sizeof cut), want, MAX_DEVICES);
    return EXIT_USAGE;
  }
  if (o->ndevices && o->ndevices != want) {
    if (o->dp || o->ntp)
      fprintf(stderr, PROG ": --devices lists %d device%s, %s needs %d\n", o->ndevices, o->ndevices == 1 ? "" : "s",
              cut_text(o, cut, sizeof cut), want);
    else
      fprintf(stderr, PROG ": --devices lists %d device%s, --pp is %d\n", o->ndevices, o->ndevices == 1 ? "" : "s",
              o->pp);
    return EXIT_USAGE;
  }
  for (int i = 0; i < o->ndevices; i++)
    for (int j = i + 1; j < o->ndevices; j++)
      if (o->devices[i] == o->devices[j]) {
        fprintf(stderr, PROG ": --devices lists device %d twice\n", o->devices[i]);
        return EXIT_USAGE;
      }
  if (!o->schedule)
    o->schedule = STRATA_SCHEDULE_1F1B;
  int interleaved = o->schedule == STRATA_SCHEDULE_INTERLEAVED;
  if (o->virtual_stages && !interleaved) {
    fprintf(stderr, PROG ": --virtual-stages is for --schedule interleaved\n");
    return EXIT_USAGE;
  }
  if (!o->virtual_stages)
    o->virtual_stages = interleaved ? 2 : 1;
  int64_t stages = (int64_t)o->pp * o->virtual_stages;
  if (stages > MAX_STAGES) {
    fprintf(stderr, PROG ": --pp %d x --virtual-stages %lld = %lld stages; at most %d\n", o->pp,
            (long long)o->virtual_stages, (long long)stages, MAX_STAGES);
    return EXIT_USAGE;
  }
  if (o->nsplit && o->nsplit != stages) {
    if (interleaved)
      fprintf(stderr, PROG ": --split lists %d stage%s; --pp %d x --virtual-stages %lld makes %lld\n", o->nsplit,
              o->nsplit == 1 ? "" : "s", o->pp, (long long)o->virtual_stages, (long long)stages);
    else
      fprintf(stderr, PROG ": --split lists %d stage%s; --pp %d makes %lld\n", o->nsplit, o->nsplit == 1 ? "" : "s",
              o->pp, (long long)stages);
    return EXIT_USAGE;
  }
  if (o->microbatches && o->accum_given && o->microbatches != o->accum) {
    fprintf(stderr, PROG ": --accum %lld and --microbatches %lld differ; with --pp they are the same (give one)\n",
            (long long)o->accum, (long long)o->microbatches);
    return EXIT_USAGE;
  }
  if (!o->microbatches)
    o->microbatches = o->accum_given ? o->accum : 2 * (int64_t)o->pp;
  o->accum = o->microbatches;
  if (interleaved && o->microbatches % o->pp) {
    fprintf(stderr, PROG ": --schedule interleaved wants the micro-batches (%lld) a multiple of --pp (%d)\n",
            (long long)o->microbatches, o->pp);
    return EXIT_USAGE;
  }
  if (o->trace && check_out_path("--trace", o->trace))
    return EXIT_USAGE;
  return 0;
}

static int parse_args(int argc, char **argv, struct options *o) {
  static const struct option longs[] = {
      {"model", required_argument, NULL, 'm'},      {"data", required_argument, NULL, 'd'},
      {"device", required_argument, NULL, OPT_DEVICE}, {"steps", required_argument, NULL, 's'},
      {"batch", required_argument, NULL, 'b'},      {"accum", required_argument, NULL, OPT_ACCUM},
      {"lr", required_argument, NULL, OPT_LR},      {"warmup", required_argument, NULL, OPT_WARMUP},
      {"seed", required_argument, NULL, OPT_SEED},  {"clip", required_argument, NULL, OPT_CLIP},
      {"weight-decay", required_argument, NULL, OPT_WD}, {"save", required_argument, NULL, 'o'},
      {"save-every", required_argument, NULL, OPT_SAVE_EVERY}, {"stop-at", required_argument, NULL, OPT_STOP_AT}, {"resume", required_argument, NULL, 'r'},
      {"eval-every", required_argument, NULL, 'e'}, {"eval-batches", required_argument, NULL, OPT_EVAL_BATCHES},
      {"json", no_argument, NULL, 'j'},             {"quiet", no_argument, NULL, 'q'},
      {"help", no_argument, NULL, 'h'},             {"version", no_argument, NULL, OPT_VERSION},
      {"pp", required_argument, NULL, OPT_PP},      {"devices", required_argument, NULL, OPT_DEVICES},
      {"split", required_argument, NULL, OPT_SPLIT}, {"schedule", required_argument, NULL, OPT_SCHEDULE},
      {"microbatches", required_argument, NULL, OPT_MICROBATCHES},
      {"virtual-stages", required_argument, NULL, OPT_VIRTUAL_STAGES},
      {"trace", required_argument, NULL, OPT_TRACE},
      {"dp", required_argument, NULL, OPT_DP},      {"layout", required_argument, NULL, OPT_LAYOUT},
      {"tp", required_argument, NULL, OPT_TP},      {"plan", required_argument, NULL, OPT_PLAN},      {"zero", no_argument, NULL, OPT_ZERO},
      {"data-format", required_argument, NULL, OPT_DATA_FORMAT},
      {"init-from", required_argument, NULL, OPT_INIT_FROM},
      {"untie", no_argument, NULL, OPT_UNTIE},
      {"val-data", required_argument, NULL, OPT_VAL_DATA},
      {NULL, 0, NULL, 0}};
  memset(o, 0, sizeof *o);
  o->device = -1;
  o->steps = DEFAULT_STEPS;
  o->batch = DEFAULT_BATCH;
  o->accum = 1;
  o->warmup = -1;
  o->seed = 1;
  o->lr = o->clip = o->weight_decay = -1;
  o->eval_every = -1;
  o->eval_batches = DEFAULT_EVAL_BATCHES;
  o->data_format = -1;
  opterr = 0;
  int c, rc;
  while ((c = getopt_long(argc, argv, ":m:d:s:b:o:r:e:jqh", longs, NULL)) != -1) {
    int64_t v;
    switch (c) {
    case 'm': o->model = optarg; break;
    case 'd': o->data = optarg; break;
    case OPT_DATA_FORMAT:
      if (strcmp(optarg, "auto") == 0)
        o->data_format = STRATA_TOKENS_AUTO;
      else if (strcmp(optarg, "text") == 0)
        o->data_format = STRATA_TOKENS_BYTES;
      else if (strcmp(optarg, "nanogpt") == 0)
        o->data_format = STRATA_TOKENS_U16;
      else if (strcmp(optarg, "llmc") == 0)
        o->data_format = STRATA_TOKENS_LLMC;
      else {
        fprintf(stderr, PROG ": --data-format wants auto, text, nanogpt or llmc, not '%s'\n", optarg);
        return EXIT_USAGE;
      }
      break;
    case OPT_INIT_FROM: o->init_from = optarg; break;
    case OPT_UNTIE: o->untie = 1; break;
    case OPT_VAL_DATA: o->val_data = optarg; break;
    case OPT_DEVICE:
      if (strcmp(optarg, "best") == 0) {
        o->device = -1;
        break;
      }
      if (strata__parse_int(optarg, 0, 1000000, &v)) {
        fprintf(stderr, PROG ": --device wants a device index or 'best', not '%s' (%s)\n", optarg, strata__parse_why());
        return EXIT_USAGE;
      }
      o->device = (int)v;
      o->device_given = 1;
      break;
    case 's': if (cli_parse_int(PROG, "--steps", optarg, 1, &o->steps)) return EXIT_USAGE; break;
    case 'b': if (cli_parse_range(PROG, "--batch", optarg, 1, MAX_BATCH, &o->batch)) return EXIT_USAGE; break;
    case OPT_ACCUM:
      if (cli_parse_range(PROG, "--accum", optarg, 1, MAX_MICROBATCHES, &o->accum))
        return EXIT_USAGE;
      o->accum_given = 1;
      break;
    case OPT_PP:
      if (cli_parse_range(PROG, "--pp", optarg, 1, MAX_DEVICES, &v))
        return EXIT_USAGE;
      o->pp = (int)v;
      o->cut_given = o->cut_given ? o->cut_given : "--pp";
      break;
    case OPT_DP:
      if (cli_parse_range(PROG, "--dp", optarg, 1, MAX_DEVICES, &v))
        return EXIT_USAGE;
      o->dp = (int)v;
      o->cut_given = o->cut_given ? o->cut_given : "--dp";
      break;
    case OPT_LAYOUT:
      o->layout_path = optarg;
      break;
    case OPT_PLAN:
      if (strcmp(optarg, "auto") != 0) {
        fprintf(stderr, PROG ": --plan '%s': only 'auto' (strata-plan --out FILE, then --layout FILE, runs another)\n",
                optarg);
        return EXIT_USAGE;
      }
      o->plan_auto = 1;
      break;
    case OPT_ZERO:
      o->zero = 1;
      o->cut_given = o->cut_given ? o->cut_given : "--zero";
      break;
    case OPT_TP:
      if (parse_list("--tp", optarg, 1, MAX_DEVICES, o->tp, &o->ntp))
        return EXIT_USAGE;
      o->cut_given = o->cut_given ? o->cut_given : "--tp";
      break;
    case OPT_DEVICES:
      if (parse_list("--devices", optarg, 0, MAX_DEVICES, o->devices, &o->ndevices))
        return EXIT_USAGE;
      o->pipe_only = o->pipe_only ? o->pipe_only : "--devices";
      o->cut_given = o->cut_given ? o->cut_given : "--devices";
      break;
    case OPT_SPLIT:
      if (parse_list("--split", optarg, 1, MAX_STAGES, o->split, &o->nsplit))
        return EXIT_USAGE;
      o->pipe_only = o->pipe_only ? o->pipe_only : "--split";
      o->cut_given = o->cut_given ? o->cut_given : "--split";
      break;
    case OPT_SCHEDULE:
      if (strata_schedule_kind_parse(optarg, &o->schedule)) {
        fprintf(stderr, PROG ": --schedule wants gpipe, 1f1b, interleaved or zb, not '%s'\n", optarg);
        return EXIT_USAGE;
      }
      o->pipe_only = o->pipe_only ? o->pipe_only : "--schedule";
      o->cut_given = o->cut_given ? o->cut_given : "--schedule";
      break;
    case OPT_MICROBATCHES:
      if (cli_parse_range(PROG, "--microbatches", optarg, 1, MAX_MICROBATCHES, &o->microbatches))
        return EXIT_USAGE;
      o->pipe_only = o->pipe_only ? o->pipe_only : "--microbatches";
      o->cut_given = o->cut_given ? o->cut_given : "--microbatches";
      break;
    case OPT_VIRTUAL_STAGES:
      if (cli_parse_range(PROG, "--virtual-stages", optarg, 2, MAX_STAGES, &o->virtual_stages))
        return EXIT_USAGE;
      o->pipe_only = o->pipe_only ? o->pipe_only : "--virtual-stages";
      o->cut_given = o->cut_given ? o->cut_given : "--virtual-stages";
      break;
    case OPT_TRACE:
      o->trace = optarg;
      o->pipe_only = o->pipe_only ? o->pipe_only : "--trace";
      break;
    case OPT_WARMUP: if (cli_parse_int(PROG, "--warmup", optarg, 0, &o->warmup)) return EXIT_USAGE; break;
    case OPT_SEED: if (cli_parse_range(PROG, "--seed", optarg, 0, INT64_MAX, &o->seed)) return EXIT_USAGE; break;
    case OPT_LR: if (cli_parse_num(PROG, "--lr", optarg, 0, &o->lr)) return EXIT_USAGE; break;
    case OPT_CLIP: if (cli_parse_num(PROG, "--clip", optarg, 1, &o->clip)) return EXIT_USAGE; break;
    case OPT_WD: if (cli_parse_num(PROG, "--weight-decay", optarg, 1, &o->weight_decay)) return EXIT_USAGE; break;
    case 'o': o->save = optarg; break;
    case OPT_STOP_AT: if (cli_parse_int(PROG, "--stop-at", optarg, 1, &o->stop_at)) return EXIT_USAGE; break;
    case OPT_SAVE_EVERY: if (cli_parse_int(PROG, "--save-every", optarg, 0, &o->save_every)) return EXIT_USAGE; break;
    case 'r': o->resume = optarg; break;
    case 'e': if (cli_parse_int(PROG, "--eval-every", optarg, 0, &o->eval_every)) return EXIT_USAGE; break;
    case OPT_EVAL_BATCHES: if (cli_parse_range(PROG, "--eval-batches", optarg, 1, MAX_EVAL_BATCHES, &o->eval_batches)) return EXIT_USAGE; break;
    case 'j': o->json = 1; break;
    case 'q': o->quiet = 1; break;
    case 'h': usage(stdout); return -1;
    case OPT_VERSION: printf("strata-train %s\n", PACKAGE_VERSION); return -1;
    default:
      cli_refuse(PROG, c == ':' ? ':' : '?', argc, argv);
      return EXIT_USAGE;
    }
  }
  if (cli_refuse(PROG, 0, argc, argv))
    return EXIT_USAGE;
  if ((o->data_format >= 0 || o->val_data) && !o->data) {
    fprintf(stderr, PROG ": %s goes with --data FILE; give --data too\n", o->val_data ? "--val-data" : "--data-format");
    return EXIT_USAGE;
  }
  if (o->init_from && (o->model || o->resume)) {
    fprintf(stderr, PROG ": --init-from takes the model from its config.json; it does not go with %s\n",
            o->model ? "--model" : "--resume (which continues a strata checkpoint)");
    return EXIT_USAGE;
  }
  if (o->untie && !o->init_from) {
    fprintf(stderr, PROG ": --untie is for --init-from a tied model\n");
    return EXIT_USAGE;
  }
  if (o->save && check_out_path("--save", o->save))
    return EXIT_USAGE;
  if ((rc = check_pipeline_args(o)))
    return rc;
  if ((rc = check_outputs(o)))
    return rc;
  if (o->eval_every < 0)
    o->eval_every = o->steps / 5;
  return 0;
}

int main(int argc, char **argv) {
  struct options o;
  int rc = parse_args(argc, argv, &o);
  if (rc)
    return rc < 0 ? 0 : rc;

  struct run r;
  memset(&r, 0, sizeof r);
  r.t_start = now();
  r.val_loss = NAN;
  r.progress_tty = isatty(STDERR_FILENO);

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sa.sa_flags = SA_RESETHAND; /* a second Ctrl-C stops at once */
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);

  /* Under mpirun (or srun) every rank runs this program: join the job; rank 0 prints, the others stay quiet. */
  int ranks = 1;
  if (strata_cluster_available()) {
    struct strata_cluster_info ci;
    if (strata_cluster_init(&argc, &argv, NULL, &r.cluster) || strata_cluster_info(r.cluster, &ci))
      strata_cluster_abort(r.cluster, EXIT_RUNTIME, NULL);
    ranks = ci.size;
    r.rank = ci.rank;
    if (ranks > 1)
      r.topts.cluster = r.cluster;
    if (r.rank > 0) {
      o.quiet = 1;
      if (!freopen("/dev/null", "w", stdout))
        o.json = 0;
    }
  }

  int ndev = 0;
  char why[1024];
  int exit_code = 0;
  double rough = 0;
  if (o.init_from) {
    if ((rc = strata_hf_model(o.init_from, &r.model)) != 0) {
      rc = fail_input(rc);
    } else if (o.untie) {
      struct strata_model_config untied = *strata_model_config(r.model);
      strata_model_free(r.model);
      r.model = NULL;
      if (!untied.tied) {
        fprintf(stderr, PROG ": --untie: %s is not tied\n", o.init_from);
        rc = EXIT_USAGE;
      } else {
        untied.tied = 0;
        rc = strata_model_from_config(&untied, &r.model) ? fail(NULL) : 0;
      }
    }
  } else if (o.model)
    rc = strata_model_load(o.model, &r.model) ? fail(NULL) : 0;
  else if (o.resume)
    rc = model_from_checkpoint(o.resume, &r.model);
  else
    rc = strata_model_load(DEFAULT_PRESET, &r.model) ? fail(NULL) : 0;
  if (rc)
    goto out;
  r.cfg = strata_model_config(r.model);

  strata_train_options_default(&r.topts);
  r.topts.cluster = ranks > 1 ? r.cluster : NULL;
  r.topts.steps = o.steps;
  r.topts.batch = o.batch;
  r.topts.accum = o.accum;
  r.topts.seed = (uint64_t)o.seed;
  if (o.warmup >= 0)
    r.topts.warmup = o.warmup;
  else
    r.topts.warmup = o.steps / 20;
  if (o.lr > 0) {
    /* The decay floor stays the default's fraction of the peak. */
    double frac = r.topts.lr > 0 ? r.topts.min_lr / r.topts.lr : 0.1;
    r.topts.lr = (float)o.lr;
    r.topts.min_lr = (float)(o.lr * frac);
  }
  if (o.clip >= 0)
    r.topts.clip = (float)o.clip;
  if (o.weight_decay >= 0)
    r.topts.weight_decay = (float)o.weight_decay;

  if ((rc = load_data(&r, &o)))
    goto out;

  int drc = strata_device_count(&ndev);
  struct strata_cluster_info ci;
  if (!drc && ranks > 1 && !(drc = strata_cluster_info(r.cluster, &ci)))
    ndev = ci.device_count; /* the layout names the cluster's devices, every rank's */
  if (drc) {
    fail(NULL);
    rc = cli_device_status(drc);
    goto out;
  }
  if (ndev == 0) {
    fprintf(stderr, PROG ": no devices (STRATA_BACKENDS=%s; see strata-topo)\n",
            getenv("STRATA_BACKENDS") ? getenv("STRATA_BACKENDS") : "all");
    rc = EXIT_RUNTIME;
    goto out;
  }
  if (ranks > 1 && (o.plan_auto || !o.pp)) {
    fprintf(stderr, PROG ": under mpirun with %d ranks give --dp, --pp (devices over the ranks) or --layout; "
            "%s\n", ranks, o.plan_auto ? "--plan auto plans one process" : "one device per job is one process's");
    rc = EXIT_USAGE;
    goto out;
  }
  if (o.plan_auto && (rc = plan_auto(&r, &o)))
    goto out;
  if (o.pp) {
    if ((rc = pipeline_devices(&r, &o, ndev)))
      goto out;
    if (ranks == 1) /* MFU over one process's devices (another rank's speed is not known here) */
      measure_pipeline_peaks(&r);
    r.topts.device = r.device;
    if ((rc = new_pipeline_trainer(&r, &o)))
      goto out;
  } else {
    if (o.device >= ndev) {
      fprintf(stderr, PROG ": --device %d: there %s %d device%s (see strata-topo)\n", o.device,
              ndev == 1 ? "is" : "are", ndev, ndev == 1 ? "" : "s");
      rc = EXIT_USAGE;
      goto out;
    }
    if (o.device >= 0) {
      r.device = o.device;
      why[0] = '\0';
    } else if (ndev == 1) {
      r.device = 0;
      snprintf(why, sizeof why, "the only device");
    } else if (pick_best_device(ndev, &r.device, &rough, why, sizeof why)) {
      rc = EXIT_RUNTIME;
      goto out;
    }
    if (strata_device_props(r.device, &r.dprops)) {
      rc = fail(NULL);
      goto out;
    }
    r.topts.device = r.device;

    /* The peak before the trainer allocates, so that a memory cap does not starve the measurement. */
    if (measure_peak(r.device, rough, &r.peak_gflops, &r.peak_n)) { /* training may still run: said, not hidden */
      no_peak(r.device);
      r.peak_gflops = 0;
    }

    if (strata_trainer_new(r.model, r.data, &r.topts, &r.tr)) {
      rc = fail(NULL);
      goto out;
    }
  }
  if (o.resume) {
    if (strata_trainer_load(r.tr, o.resume)) {
      rc = fail(NULL);
      goto out;
    }
    r.start_step = r.step = strata_trainer_steps_done(r.tr);
  }
  if (o.init_from && (rc = strata_trainer_load_hf(r.tr, o.init_from)) != 0) {
    rc = fail_input(rc);
    goto out;
  }
  strata_trainer_set_stop(r.tr, stop_requested, NULL);
  if ((rc = check_data_splits(&r)))
    goto out;

  print_header(&r, &o, o.pp ? NULL : o.device < 0 ? why : NULL);
  if (r.step >= r.topts.steps && !o.json && !o.quiet)
    printf("nothing to train: the checkpoint is at step %lld, --steps is %lld\n", (long long)r.step,
           (long long)r.topts.steps);

  exit_code = train(&r, &o);
  if (exit_code)
    goto out_rc;
  /* The checkpoint first: a final evaluation that fails or is interrupted must not cost the training. */
  if (o.save && r.step > r.start_step && r.saved_step != r.step && save_checkpoint(&r, &o)) {
    exit_code = EXIT_RUNTIME;
    goto out_rc;
  }
  /* Measured again after training, and the higher figure kept: on a shared machine a busy
  ** moment during the first measurement would otherwise inflate MFU (even past 100%). */
  r.peak_before = r.peak_gflops;
  if (!interrupted && r.step > r.start_step && r.peak_gflops > 0) {
    double again = 0, sum = 0;
    for (int i = 0; i < (r.pp ? r.pp : 1); i++) {
      double *peak = r.pp ? &r.dev_peak[i] : &r.peak_gflops;
      const int dev = r.pp ? r.dev[i] : r.device;
      if (time_gemm(dev, r.peak_n, PEAK_REPS, &again, NULL) != STRATA_OK)
        fprintf(stderr, PROG ": device %d's matrix-product peak could not be measured again after training (%s); "
                "MFU uses the first measurement\n", dev, strata_last_error());
      else if (again > *peak)
        *peak = again;
      sum += *peak;
    }
    if (r.pp)
      r.peak_gflops = sum;
  }
  if (!interrupted && r.step > r.start_step && o.eval_batches > 0 && evaluate(&r, &o) == EXIT_RUNTIME) {
    exit_code = EXIT_RUNTIME;
    goto out_rc;
  }
  print_summary(&r, interrupted, &o);
  if (interrupted)
    exit_code = EXIT_INTERRUPTED;
out_rc:
  rc = exit_code;
out:
  /* a failed rank ends the whole job: the others may be waiting for it (its message is printed above) */
  if (rc && ranks > 1)
    strata_cluster_abort(r.cluster, rc, *strata_last_error() ? NULL : "stopped (the reason is printed above)");
  strata_trainer_free(r.tr);
  strata_layout_free(o.layout);
  strata_dataset_free(r.data);
  strata_model_free(r.model);
  strata_cluster_free(r.cluster);
  strata_shutdown();
  return rc;
}
