/* SPDX-License-Identifier: MIT */
/* train-args.c — strata-train's command line: the options, the --help text, and the checks that turn argv into a struct options before any device is touched. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <strata/strata.h>

#include "cli.h"
#include "train.h"

/* Bounds of the counts (the library's own limits, and for validation the
** most that a run's final evaluation should take). */
#define MAX_BATCH 1048576
#define MAX_MICROBATCHES 1048576
#define MAX_EVAL_BATCHES 100000

enum {
  OPT_DEVICE = 256, OPT_ACCUM, OPT_LR, OPT_WARMUP, OPT_SEED, OPT_CLIP, OPT_WD, OPT_SAVE_EVERY, OPT_STOP_AT, OPT_EVAL_BATCHES,
  OPT_VERSION, OPT_PP, OPT_DEVICES, OPT_SPLIT, OPT_SCHEDULE, OPT_MICROBATCHES, OPT_VIRTUAL_STAGES, OPT_TRACE,
  OPT_DATA_FORMAT, OPT_INIT_FROM, OPT_UNTIE, OPT_CONTEXT, OPT_VAL_DATA, OPT_DP, OPT_LAYOUT, OPT_TP, OPT_ZERO, OPT_PLAN,
  OPT_SPATIAL, OPT_PRECISION, OPT_GRAD_REDUCE, OPT_RECOMPUTE, OPT_SP
};

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
          "                           a NUL byte, else text), text, nanogpt (raw uint16), u32 (raw\n"
          "                           uint32, never guessed) or llmc (uint16 or uint32 by its header)\n"
          "      --val-data FILE      validate on FILE (e.g. nanoGPT's val.bin) instead of the last\n"
          "                           10%% of --data\n"
          "      --init-from DIR      start from a Hugging Face GPT-2 or Llama (config.json +\n"
          "                           model.safetensors, or the shards model.safetensors.index.json names)\n"
          "      --untie              with --init-from a tied model: train an untied copy (the head\n"
          "                           starts as the embedding), which --pp can cut\n"
          "      --context N          with --init-from a Llama: train on sequences of N tokens, up to\n"
          "                           its max_position_embeddings (default: that)\n"
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
          "      --grad-reduce T      with --dp: fp32 (default) or bf16, the type the gradient all-reduce\n"
          "                           (ZeRO: reduce-scatter) moves; bf16 halves its traffic\n"
          "      --precision P        fp32 (default) or bf16: mixed precision as Megatron-LM trains,\n"
          "                           float32 master weights, gradients and AdamW moments, bfloat16\n"
          "                           activations, messages and GEMM operands with float32 sums (host\n"
          "                           and OpenCL devices so far); with --layout, the layout's\n"
          "                           \"precision\" is the run's and a --precision that differs is refused\n"
          "      --recompute MODE     none (default), selective or full: activation recomputation of a GPT's\n"
          "                           or a llama's blocks (Korthikanti et al. 2022). selective drops each block's\n"
          "                           attention output and log-sum-exps and reruns the fused attention\n"
          "                           before its backward; full keeps only each block's input and reruns its\n"
          "                           forward. Bit for bit the losses of none; with zb, zbv and\n"
          "                           dualpipev the weight pass (W) recomputes again; a layout's\n"
          "                           \"recompute\" is the run's\n"
          "      --sp                 sequence parallelism with --tp (GPT, llama): each slice's norms and\n"
          "                           residual adds run on 1/T of every micro-batch's tokens, the tp\n"
          "                           all-reduces become an all-gather before and a reduce-scatter\n"
          "                           after each split matrix (Megatron-LM's); those activations divide\n"
          "                           by T. T must divide the context and be the same on every rank;\n"
          "                           not with zb, zbv, dualpipev; a layout's \"sp\": true is the run's\n"
          "\n"
          "Pipeline parallelism (the model cut into stages over several devices):\n"
          "      --pp N               pipeline over N devices (without it: one device, no pipeline)\n"
          "      --devices LIST       their global indices, e.g. 0,1,2,3 (default: the first N)\n"
          "      --split LIST         layers per stage, e.g. 3,3,2,2 (N stages, N x V interleaved,\n"
          "                           2N with zbv and dualpipev; default: balanced by the library)\n"
          "      --schedule NAME      gpipe, 1f1b, interleaved, zb (zb-h1), zbv or dualpipev (default\n"
          "                           1f1b); zbv and dualpipev: two stages per device in a V (device d\n"
          "                           holds stages d and 2N-1-d), backward split, at least 2N\n"
          "                           micro-batches\n"
          "      --microbatches M     micro-batches per step, the same as --accum (default: --accum,\n"
          "                           else 2N)\n"
          "      --virtual-stages V   stages per device with --schedule interleaved (default 2)\n"
          "      --trace FILE         write a Chrome/Perfetto trace (JSON) of the steps (one device too)\n"
          "\n"
          "Data parallelism (replicas of the model, each on its share of the step's micro-batches):\n"
          "      --dp D               D replicas of the pipeline (of one device without --pp), over\n"
          "                           D x N devices (--devices lists them replica by replica);\n"
          "                           --microbatches counts each replica's; gradients are all-reduced\n"
          "      --tp T[,T...]        tensor parallelism: every stage split over T devices (GPT: heads\n"
          "                           and MLP units; llama: query-head groups with their key/value heads,\n"
          "                           T dividing n_kv_heads or a multiple of it (key/value heads then\n"
          "                           replicated), and SwiGLU units; MLP, CNN: pairs of layers),\n"
          "                           one degree for every rank,\n"
          "                           or one per pipeline rank (--pp 2 --tp 2,1: rank 0 over 2 devices, rank\n"
          "                           1 whole on a third); --devices lists each replica's ranks' slices in\n"
          "                           turn (dp x sum(T) devices)\n"
          "      --zero[=N]           ZeRO stage N (1 when N is left out) with --dp: 1, gradients\n"
          "                           reduce-scattered, each replica's AdamW over its 1/D of the\n"
          "                           parameters (the moments shrink by D), the updated parameters\n"
          "                           all-gathered; 2, also each weight's gradients summed over the\n"
          "                           replicas as the backward writes them, each replica keeping its 1/D of\n"
          "                           them (the gradients shrink by D); 3, also the parameters: each\n"
          "                           layer's weights gathered from the replicas' shards as it reads them,\n"
          "                           in the forward and the backward (one process only)\n"
          "      --plan auto          the whole cut chosen by the planner (strata-plan) for this machine's\n"
          "                           devices, calibrated first, for a global batch of --batch x --accum\n"
          "      --layout FILE        the whole cut from a layout file (schema strata-layout/1, as\n"
          "                           strata-plan writes it) instead of --dp, --pp, --devices, --split,\n"
          "                           --schedule, --microbatches and --virtual-stages\n"
          "      --spatial N          spatial parallelism (a cnn with \"gap\", e.g. cnn-hires): each image's\n"
          "                           rows cut into N slabs on N devices (uneven too), the halo rows a\n"
          "                           filter reaches exchanged with the neighbours, the averages and the\n"
          "                           gradients summed over the slabs; with --dp D: D x N devices; with\n"
          "                           --pp P each stage N slabs (slab k to slab k), P x N devices; not\n"
          "                           with --tp, --zero, bf16 or a split backward (zb, zbv, dualpipev) yet\n"
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
             "device error, divergence), 2 on bad usage or malformed input (a --model file or a token\n"
             "file or a Hugging Face config strata cannot use, an unknown preset), 130 when interrupted\n"
             "(after saving).\n");
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
** another kind: --save must not name the --data or --model file (it may
** replace its own --resume), --trace none of the files (strata_file_preflight:
** compared by device and inode, so links and other spellings are caught,
** and neither may be a FIFO, a device or a directory); an existing --save
** must be a safetensors file and an existing --trace a strata trace.
** Both outputs are checked creatable now, temporary name included, rather
** than fail after hours of training. Returns 0 or EXIT_USAGE after one line.
*/
static int check_outputs(const struct options *o) {
  char hf_config[4096] = "", hf_weights[4096] = ""; /* --init-from DIR's files */
  if (o->init_from) {
    snprintf(hf_config, sizeof hf_config, "%s/config.json", o->init_from);
    snprintf(hf_weights, sizeof hf_weights, "%s/model.safetensors", o->init_from);
  }
  const struct strata_file_use files[] = {
      {.path = o->data, .what = "--data"},
      {.path = o->val_data, .what = "--val-data"},
      {.path = o->model, .what = "--model"},
      {.path = o->resume, .what = "--resume"},
      {.path = o->layout_path, .what = "--layout"},
      {.path = hf_config, .what = "--init-from config.json"},
      {.path = hf_weights, .what = "--init-from model.safetensors"},
      {.path = o->save, .what = "--save", .output = 1, .replaces = "--resume"},
      {.path = o->trace, .what = "--trace", .output = 1}};
  if (strata_file_preflight(files, (int)(sizeof files / sizeof files[0]))) {
    fprintf(stderr, PROG ": %s\n", strata_last_error());
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
  return 0;
}

/* "--dp 2 x --pp 2 x --tp 2" (the parts given), for messages. */
const char *cut_text(const struct options *o, char *buf, size_t cap) {
  size_t at = (size_t)snprintf(buf, cap, "--dp %d x --pp %d", o->dp ? o->dp : 1, o->pp);
  if (o->ntp && at < cap) {
    at += (size_t)snprintf(buf + at, cap - at, " x --tp ");
    for (int i = 0; i < o->ntp && at < cap; i++)
      at += (size_t)snprintf(buf + at, cap - at, "%s%d", i ? "," : "", o->tp[i]);
  }
  return buf;
}

/* Devices of one replica: the sum over its pipeline ranks of their tp degrees. */
int replica_devices(const struct options *o) {
  if (o->ntp <= 1)
    return o->pp * (o->ntp ? o->tp[0] : 1);
  int n = 0;
  for (int i = 0; i < o->ntp; i++)
    n += o->tp[i];
  return n;
}

int rank_tp(const struct options *o, int k) { return o->layout ? strata_layout_tp(o->layout, k) : o->tp[k]; }

int uniform_tp(const struct options *o) {
  const int ranks = o->layout ? strata_layout_pp(o->layout) : o->ntp;
  int t = ranks > 0 ? rank_tp(o, 0) : 1;
  for (int k = 1; k < ranks; k++)
    if (rank_tp(o, k) != t)
      return 0;
  return t;
}

/* The tool's own view of the cut of o->layout (from --layout or --plan auto), for its reports and checks. */
int adopt_layout(struct options *o, const char *from) {
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
    o->zero = strata_layout_zero(o->layout);
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
    /* precision is the layout's data: a command line that says otherwise is a mistake, not an override */
    const int lp = strata_layout_precision(o->layout);
    if (o->precision_given && o->precision != lp) {
      fprintf(stderr, PROG ": --precision %s and the layout's %s differ (give the layout's, or leave --precision out)\n",
              o->precision == STRATA_BFLOAT16 ? "bf16" : "fp32", lp == STRATA_BFLOAT16 ? "bf16" : "fp32");
      return EXIT_USAGE;
    }
    o->precision = lp;
    /* so is a recompute mode it names; one it leaves out (none) is the command line's */
    const int lr = strata_layout_recompute(o->layout);
    if (lr && o->recompute_given && o->recompute != lr) {
      fprintf(stderr, PROG ": --recompute %s and the layout's %s differ (give the layout's, or leave --recompute "
              "out)\n", strata_recompute_name(o->recompute), strata_recompute_name(lr));
      return EXIT_USAGE;
    }
    if (lr)
      o->recompute = lr;
    if (strata_layout_sp(o->layout)) /* likewise sequence parallelism */
      o->sp = 1;
    if (o->trace && check_out_path("--trace", o->trace))
      return EXIT_USAGE;
    return 0;
  }
}

/* Sequence parallelism needs tp > 1 on every pipeline rank (the command line's or the layout's; --plan auto's cut
** is the planner's, checked by the trainer) and a whole backward. */
static int check_sp(const struct options *o) {
  if (!o->sp || o->plan_auto)
    return 0;
  const int ranks = o->layout ? strata_layout_pp(o->layout) : o->ntp;
  int low = ranks == 0;
  for (int k = 0; k < ranks; k++)
    low |= rank_tp(o, k) < 2;
  if (low) {
    fprintf(stderr, PROG ": --sp needs --tp > 1 (sequence parallelism cuts the sequence over the tp slices%s)\n",
            ranks > 1 ? ", on every pipeline rank" : "");
    return EXIT_USAGE;
  }
  if (o->schedule && strata_schedule_kind_split_backward(o->schedule)) {
    fprintf(stderr, PROG ": --sp with --schedule %s is not built (its weight pass would gather the sequence again); "
            "use 1f1b, gpipe or interleaved\n", strata_schedule_kind_name(o->schedule));
    return EXIT_USAGE;
  }
  return 0;
}

/* A bf16 gradient reduction needs replicas to reduce over: after the cut is known (--dp or a layout's dp). */
static int check_grad_reduce(const struct options *o) {
  if (check_sp(o))
    return EXIT_USAGE;
  if (o->grad_reduce == STRATA_BFLOAT16 && o->dp < 2) {
    fprintf(stderr, PROG ": --grad-reduce bf16 halves the data-parallel gradient all-reduce: give --dp 2 or more "
            "(or a layout with dp 2 or more)\n");
    return EXIT_USAGE;
  }
  return 0;
}

/* The cut of the command line (--pp, --dp, --tp, --devices ...) when no layout gives it. */
static int check_cut_args(struct options *o) {
  if (o->spatial > 1) { /* the slabs run as the slices of one stage (of each --dp replica) */
    char split[96];
    snprintf(split, sizeof split, "--schedule %s (a split backward)", strata_schedule_kind_name(o->schedule));
    const char *with = o->ntp ? "--tp" : o->sp ? "--sp (the slabs cut images, not sequences)" : o->zero ? "--zero"
                       : o->precision == STRATA_BFLOAT16 ? "--precision bf16"
                       : o->schedule && strata_schedule_kind_split_backward(o->schedule) ? split
                       : o->device_given ? "--device (the slabs' devices: --devices)" : NULL;
    if (with) {
      fprintf(stderr, PROG ": --spatial %d: not with %s yet (spatial slabs combine with --dp and --pp)\n", o->spatial, with);
      return EXIT_USAGE;
    }
    o->tp[0] = o->spatial;
    o->ntp = 1;
  }
  if (o->zero && o->dp < 2) {
    fprintf(stderr, PROG ": --zero=%d shards over data-parallel replicas: give --dp 2 or more\n", o->zero);
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
    o->virtual_stages = strata_schedule_kind_stages_per_device(o->schedule, 0); /* zbv: two in a V */
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
    else if (o->virtual_stages > 1)
      fprintf(stderr, PROG ": --split lists %d stage%s; --schedule %s on --pp %d makes %lld (%lld per device)\n",
              o->nsplit, o->nsplit == 1 ? "" : "s", strata_schedule_kind_name(o->schedule), o->pp, (long long)stages,
              (long long)o->virtual_stages);
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
  const int fewest = strata_schedule_kind_min_microbatches(o->schedule, o->pp);
  if (o->microbatches < fewest) {
    fprintf(stderr, PROG ": --schedule %s wants at least 2 x --pp = %d micro-batches, not %lld (its V warms up with "
            "2 x pp - 1 forwards on the first device)\n", strata_schedule_kind_name(o->schedule), fewest,
            (long long)o->microbatches);
    return EXIT_USAGE;
  }
  if (o->trace && check_out_path("--trace", o->trace))
    return EXIT_USAGE;
  return 0;
}

/*
** The pipeline options' checks that need no device: every pipeline option
** wants --pp; --devices has N distinct entries; --split one per stage;
** --accum and --microbatches agree; interleaving's constraints. Fills in
** the defaults (schedule, micro-batches, virtual stages). Returns 0 or
** EXIT_USAGE after one line on stderr.
*/
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
    int rc = adopt_layout(o, "--layout");
    return rc ? rc : check_grad_reduce(o);
  }
  int rc = check_cut_args(o);
  return rc ? rc : check_grad_reduce(o);
}

/*
** The command line into *o, defaults first, then checked as a whole (the
** cut, the outputs): 0 to run; -1 after --help or --version printed what
** was asked (the exit status is then 0); else EXIT_USAGE after one line.
*/
int parse_args(int argc, char **argv, struct options *o) {
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
      {"tp", required_argument, NULL, OPT_TP},      {"plan", required_argument, NULL, OPT_PLAN},      {"zero", optional_argument, NULL, OPT_ZERO},
      {"spatial", required_argument, NULL, OPT_SPATIAL},
      {"data-format", required_argument, NULL, OPT_DATA_FORMAT},
      {"init-from", required_argument, NULL, OPT_INIT_FROM},
      {"untie", no_argument, NULL, OPT_UNTIE},
      {"context", required_argument, NULL, OPT_CONTEXT},
      {"val-data", required_argument, NULL, OPT_VAL_DATA},
      {"precision", required_argument, NULL, OPT_PRECISION},
      {"grad-reduce", required_argument, NULL, OPT_GRAD_REDUCE},
      {"recompute", required_argument, NULL, OPT_RECOMPUTE},
      {"sp", no_argument, NULL, OPT_SP},
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
      else if (strcmp(optarg, "u32") == 0)
        o->data_format = STRATA_TOKENS_U32;
      else {
        fprintf(stderr, PROG ": --data-format wants auto, text, nanogpt, u32 or llmc, not '%s'\n", optarg);
        return EXIT_USAGE;
      }
      break;
    case OPT_INIT_FROM: o->init_from = optarg; break;
    case OPT_UNTIE: o->untie = 1; break;
    case OPT_CONTEXT: if (cli_parse_range(PROG, "--context", optarg, 1, 65536, &o->context)) return EXIT_USAGE; break;
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
    case OPT_SPATIAL:
      if (cli_parse_range(PROG, "--spatial", optarg, 1, MAX_DEVICES, &v))
        return EXIT_USAGE;
      o->spatial = (int)v;
      o->cut_given = o->cut_given ? o->cut_given : "--spatial"; /* a layout says "spatial" itself */
      break;
    case OPT_PLAN:
      if (strcmp(optarg, "auto") != 0) {
        fprintf(stderr, PROG ": --plan '%s': only 'auto' (strata-plan --out FILE, then --layout FILE, runs another)\n",
                optarg);
        return EXIT_USAGE;
      }
      o->plan_auto = 1;
      break;
    case OPT_PRECISION:
      if (!strcmp(optarg, "fp32") || !strcmp(optarg, "float32")) {
        o->precision = STRATA_FLOAT32;
      } else if (!strcmp(optarg, "bf16") || !strcmp(optarg, "bfloat16")) {
        o->precision = STRATA_BFLOAT16;
      } else if (!strcmp(optarg, "fp16") || !strcmp(optarg, "float16")) {
        fprintf(stderr, PROG ": --precision fp16: not built (float16 needs a dynamic loss scaler strata does not have); "
                "bf16 trains without one\n");
        return EXIT_USAGE;
      } else {
        fprintf(stderr, PROG ": --precision '%s': expected fp32 or bf16\n", optarg);
        return EXIT_USAGE;
      }
      o->precision_given = 1;
      break;
    case OPT_GRAD_REDUCE:
      if (!strcmp(optarg, "fp32") || !strcmp(optarg, "float32")) {
        o->grad_reduce = STRATA_FLOAT32;
      } else if (!strcmp(optarg, "bf16") || !strcmp(optarg, "bfloat16")) {
        o->grad_reduce = STRATA_BFLOAT16;
      } else {
        fprintf(stderr, PROG ": --grad-reduce '%s': expected fp32 or bf16\n", optarg);
        return EXIT_USAGE;
      }
      break;
    case OPT_SP:
      o->sp = 1;
      break;
    case OPT_RECOMPUTE:
      if (strata_recompute_parse(optarg, &o->recompute)) {
        fprintf(stderr, PROG ": --recompute '%s': expected none, selective or full\n", optarg);
        return EXIT_USAGE;
      }
      o->recompute_given = 1;
      break;
    case OPT_ZERO:
      if (optarg && strcmp(optarg, "1") && strcmp(optarg, "2") && strcmp(optarg, "3")) {
        fprintf(stderr, PROG ": --zero=%s: the ZeRO stage is 1, 2 or 3\n", optarg);
        return EXIT_USAGE;
      }
      o->zero = optarg ? optarg[0] - '0' : 1;
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
        fprintf(stderr, PROG ": --schedule wants one of %s, not '%s'\n", strata_schedule_kind_names(), optarg);
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
      o->trace = optarg; /* one device too: its steps run through the same executor as a pipeline's */
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
    case OPT_VERSION: printf("strata-train %s\n", strata_version()); return -1;
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
  if (o->context && !o->init_from) {
    fprintf(stderr, PROG ": --context is for --init-from a Llama (a --model file says its own context)\n");
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
