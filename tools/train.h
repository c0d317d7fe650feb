/* SPDX-License-Identifier: MIT */
/* train.h — what the three parts of strata-train share: its limits and exit statuses, the options of the command line, the figures of the run, and the functions each part lends the others. */
#ifndef STRATA_TOOLS_TRAIN_H
#define STRATA_TOOLS_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include <strata/strata.h>

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
/* Timed repetitions of each sgemm of the peak measurement (the best one counts). */
#define PEAK_REPS 5

struct options {
  const char *model;        /* NULL: the checkpoint's model with --resume, else DEFAULT_PRESET */
  const char *data;         /* NULL: the default corpus */
  int data_format;          /* STRATA_TOKENS_*; -1: not given (auto) */
  const char *val_data;     /* the validation split's own file (nanoGPT's val.bin), or NULL: the last 10% of --data */
  const char *init_from;    /* a Hugging Face GPT-2 or Llama directory, or NULL */
  int untie;                /* --untie: an untied copy of a tied --init-from model */
  int64_t context;          /* --context: the sequence length of an --init-from Llama; 0: its max_position_embeddings */
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
  int zero;                 /* --zero[=N]: the ZeRO stage (1, 2, 3) over the --dp replicas; 0: none */
  int spatial;              /* --spatial: slabs of each image; 0: not given */
  int precision;            /* --precision: STRATA_FLOAT32 (default) or STRATA_BFLOAT16 */
  int precision_given;
  int grad_reduce;          /* --grad-reduce: STRATA_FLOAT32 (default) or STRATA_BFLOAT16 */
  int recompute;            /* --recompute: enum strata_recompute (default none) */
  int recompute_given;
  int sp;                   /* --sp (or a layout's "sp"): sequence parallelism with tp */
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
  int ranks;                /* with pp: pipeline ranks (stages in a line; 1: one stage, its slices or slabs) */
  int slabs;                /* with pp: spatial slabs per stage (1: whole images) */
  int slices;               /* with pp: tensor-parallel slices per stage, one degree for every rank (else 1) */
  int dev[MAX_DEVICES];
  struct strata_device_props props[MAX_DEVICES];
  double dev_peak[MAX_DEVICES];   /* each device's measured sgemm peak, GFLOP/s; r->peak_gflops is their sum */
  struct strata_train_report rep;         /* the stages, then the last step's figures */
  strata_cluster_t cluster;                /* under mpirun (several ranks): the job; NULL in one process */
  int rank;                                /* this process's rank in it (0 in one process) */
  double step_bubble;                      /* measured bubble of the last step */
  uint64_t host_waits_all;                 /* host waits of the run's steps, summed (the trainer's report) */
  /* step figures summed over the run's steps, and the first step's apart (the summary leaves it out) */
  double wall_all, wall_first;
  double busy_all[MAX_DEVICES], busy_first[MAX_DEVICES];
  uint64_t peak_bytes[MAX_DEVICES];
  int peak_inflight[MAX_DEVICES];
};

/* train-args.c: the command line */

/*
** Read the command line into *o (defaults first) and check it: 0 to run,
** -1 when --help or --version printed what was asked (exit 0), else the
** exit status after one line on stderr (EXIT_USAGE).
*/
int parse_args(int argc, char **argv, struct options *o);

/* The tool's own view of the cut of o->layout (from --layout or --plan auto); 0 or EXIT_USAGE after one line. */
int adopt_layout(struct options *o, const char *from);

/* "--dp 2 x --pp 2 x --tp 2" (the parts given) into buf, for messages; returns buf. */
const char *cut_text(const struct options *o, char *buf, size_t cap);

/* Devices of one replica: the sum over its pipeline ranks of their tp degrees. */
int replica_devices(const struct options *o);

/* The tp degree of pipeline rank k (the layout's, else --tp's), and the degree all ranks share: 1 without tp, 0 when
** they differ. */
int rank_tp(const struct options *o, int k);
int uniform_tp(const struct options *o);

/* strata-train.c: the run */

/* Seconds on the monotonic clock. */
double now(void);

/* train-report.c: what the run prints (the header, the progress lines, the --json events, the summary) */

/* End a progress line left open on stderr, if any. */
void progress_end(struct run *r);

/* One progress report: a redrawn line on a terminal, else a plain line. */
void progress(struct run *r);

/*
** The run's header before step 1: the model, the data, the device(s) and
** their peak, the training and the pipeline; `why` says how the device was
** chosen (NULL: given). With --json the "start" event; nothing with --quiet.
*/
void print_header(const struct run *r, const struct options *o, const char *why);

/* The --json "step" event of step s, which took dt seconds. */
void report_step(const struct run *r, const struct strata_step_stats *s, double dt);

/* The --json "eval" event: validation loss v, the evaluation begun at t0 (now()). */
void report_eval(const struct run *r, float v, double t0);

/* The --json "save" event: a checkpoint written at `path`. */
void report_save(const struct run *r, const char *path);

/* The summary at the end of the run (--json: the "summary" event); was_interrupted: a Ctrl-C stopped it. */
void print_summary(struct run *r, int was_interrupted, const struct options *o);

#endif /* STRATA_TOOLS_TRAIN_H */
