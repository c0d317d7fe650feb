/* SPDX-License-Identifier: MIT */
/* trainer.h — the trainer's state, shared by the trainer API (train.c) and the pipeline executor (pipeline.c). Internal. */
#ifndef STRATA__TRAINER_H
#define STRATA__TRAINER_H

#include <strata/schedule.h>
#include <strata/train.h>

#include "stage.h"

struct strata__trace_event {
  char name[24];
  const char *cat;          /* "compute", "send", "recv", "idle", "optimizer" */
  double ts, dur;           /* microseconds since the trainer started */
  int tid;                  /* 2 x rank: compute, 2 x rank + 1: transfers */
  int64_t step;
};

/* Receive buffers of one stage boundary and direction, kept between
** messages and steps: as many as were ever in flight at once there. */
#define STRATA__POOL_MAX 64
struct strata__pool {
  strata_buffer_t free[STRATA__POOL_MAX];
  int n;
};

struct strata_trainer {
  strata_model_t model;
  strata_dataset_t data;
  struct strata_train_options opt;
  int nstages;
  struct strata__stage *st[STRATA_MAX_STAGES];
  int ndev;                          /* pipeline ranks */
  int dev[STRATA_MAX_PIPELINE];      /* global device of each rank */
  int stage_rank[STRATA_MAX_STAGES];
  strata_schedule_t sched;           /* NULL: stages run one after another */
  int m;                             /* micro-batches per step */
  int64_t step;
  uint64_t data_state;
  int images;
  size_t in_elems;                   /* input elements per micro-batch */
  int64_t rows;                      /* target rows per micro-batch */
  void **inputs;                     /* [m] host micro-batches */
  int32_t **targets;                 /* [m] */
  float **losses;                    /* [m] per-row losses read back (pipeline) */
  double *mb_loss;                   /* [m] summed losses of each micro-batch */
  size_t ntensors;                   /* over all stages */
  double *sumsq;                     /* [ntensors] */
  struct strata__pool pools[2 * STRATA_MAX_STAGES]; /* [2 s]: stage s's inputs, [2 s + 1]: its output gradients */
  struct strata_pipeline_report report;
  double t0;                         /* trainer creation, for trace timestamps */
  char *trace_path;
  struct strata__trace_event *events;
  size_t nevents, cap_events;
  int (*stop)(void *);               /* strata_trainer_set_stop: polled between evaluation batches */
  void *stop_arg;
  int unfit_split;                   /* the balancer found no cut within memory: the split is the fastest one */
};

double strata__now(void);

/*
** Bytes stage s (planned as `b`; `prev` the previous stage's plan, NULL for
** the first) needs on its device during a step: its fixed buffers, the
** activations and boundary gradients of the micro-batches in flight, the
** receive buffers of its neighbours' messages. Adds the activations to *act
** and the buffers other than parameters to *bufs (either may be NULL).
** The memory plan of trainer creation and the balancer both use it.
*/
uint64_t strata__stage_need(strata_trainer_t tr, int s, const struct strata__stage_bytes *b,
                            const struct strata__stage_bytes *prev, uint64_t *act, uint64_t *bufs);

/* One optimizer step over the pipeline schedule (pipeline.c). The
** micro-batches are in tr->inputs/targets; per-row losses land in tr->losses. */
int strata__pipeline_step(strata_trainer_t tr, float *grad_norm, float lr);

/* Split the model's layers into tr->nstages stages over the ranks
** (stage s on rank stage_rank[s]), balancing FLOPs against measured device
** speed within memory limits; `split` receives layers per stage. */
int strata__pipeline_balance(strata_trainer_t tr, int *split);

/* Stage s's per-tensor gradient sums of squares into tr->sumsq at its place in the global tensor order. */
int strata__stage_sumsq(strata_trainer_t tr, int s);

/* Clip factor from the per-tensor sums of squares (summed in tensor order). */
float strata__clip_scale(const strata_trainer_t tr, float *norm);

/* Apply the optimizer to stage s with gradient scale `gscale`. */
int strata__stage_optimize(strata_trainer_t tr, int s, float gscale, float lr);

/* Write the trace file (all events so far), atomically. */
int strata__trace_write(strata_trainer_t tr);
void strata__trace_add(strata_trainer_t tr, const char *name, const char *cat, double t_start, double t_end, int tid);

#endif /* STRATA__TRAINER_H */
