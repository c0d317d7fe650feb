/* SPDX-License-Identifier: MIT */
/* trace.c — the trainer's trace: compute, transfer and idle events of each step, written as Chrome/Perfetto JSON. */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/file.h"
#include "comm/comm.h"
#include "train/ranks.h"
#include "device/registry.h"
#include "train/trainer.h"


/* ---- traces ---- */

/* The devices of a collective's members, "0,2": the replicas of stage s's slice, or the slices of its replica. */
static void print_group(FILE *f, const struct strata_trainer *tr, int kind, int s) {
  const int S = tr->nstages;
  if (s < 0 || s >= strata__stages_all(tr))
    return; /* (an event from another rank names its stage by the same numbers: never out of range) */
  if (kind == STRATA__GROUP_REPLICAS)
    for (int r = 0; r < tr->replicas; r++)
      fprintf(f, "%s%d", r ? "," : "",
              strata__rank_device(tr, tr->stage_rank[(r * tr->tp + strata__stage_slice(tr, s)) * S + s % S]));
  else if (kind == STRATA__GROUP_SLICES)
    for (int t = 0, c0 = strata__stage_replica(tr, s) * tr->tp; t < strata__stage_tp(tr, s); t++)
      fprintf(f, "%s%d", t ? "," : "", strata__rank_device(tr, tr->stage_rank[(c0 + t) * S + s % S]));
}

void strata__trace_add(strata_trainer_t tr, const char *name, const char *cat, double t_start, double t_end, int tid) {
  if (tr->nevents == tr->cap_events) {
    size_t cap = tr->cap_events ? 2 * tr->cap_events : 1024;
    if (cap > (1u << 22))
      return; /* a bounded trace: the first four million events */
    struct strata__trace_event *e = realloc(tr->events, cap * sizeof *e);
    if (!e)
      return;
    tr->events = e;
    tr->cap_events = cap;
  }
  struct strata__trace_event *e = &tr->events[tr->nevents++];
  snprintf(e->name, sizeof e->name, "%s", name);
  e->cat = cat;
  e->ts = (t_start - tr->t0) * 1e6;
  e->dur = (t_end - t_start) * 1e6;
  e->tid = tid;
  e->step = tr->step;
  e->bytes = 0;
  e->op = NULL;
  e->group_kind = STRATA__GROUP_NONE;
  e->group_stage = 0;
  e->posted = -1;
}

void strata__trace_add_comm(strata_trainer_t tr, const char *name, const char *op, uint64_t bytes, int group,
                            int stage, double t_start, double t_end, int tid, double posted) {
  size_t n = tr->nevents;
  strata__trace_add(tr, name, "comm", t_start, t_end, tid);
  if (tr->nevents == n + 1) {
    struct strata__trace_event *e = &tr->events[n];
    e->bytes = bytes;
    e->op = op;
    e->group_kind = group;
    e->group_stage = stage;
    if (posted >= 0)
      e->posted = (posted - tr->t0) * 1e6;
  }
}

/* The trace, through the atomic writer: a reader never sees half a file, and
** a planted file or link at a temporary name is never written through. */
int strata__trace_write(strata_trainer_t tr) {
  TRY(strata__ranks_trace_merge(tr)); /* several ranks: every rank's events, on rank 0 */
  if (!strata__ranks_writer(tr))
    return STRATA_OK;
  struct strata__out o;
  TRY(strata__out_open(&o, tr->trace_path));
  FILE *f = strata__out_stream(&o);
  if (!f) {
    strata__out_abort(&o);
    return strata__error_prefix(STRATA_ERR_NOMEM, "cannot write the trace: ");
  }
  fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
  for (int r = 0; r < tr->ndev; r++) {
    /* one pair of tracks per device of the job, named by its global index (and rank, over several) */
    struct strata_device_props p;
    char backend[sizeof p.backend] = "?", where[32] = "";
    if (!tr->ranks && !strata_device_props(tr->dev[r], &p))
      strata__strlcpy(backend, p.backend, sizeof backend);
    if (tr->ranks) {
      strata__ranks_backend(tr, r, backend, sizeof backend);
      snprintf(where, sizeof where, ", rank %d", tr->ranks->owner[r]);
    }
    fprintf(f,
            "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, \"args\": {\"name\": \"device %d "
            "(%s%s) compute\"}},\n",
            2 * r, strata__rank_device(tr, r), backend, where);
    fprintf(f,
            "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, \"args\": {\"name\": \"device %d "
            "(%s%s) transfers\"}},\n",
            2 * r + 1, strata__rank_device(tr, r), backend, where);
  }
  for (size_t i = 0; i < tr->nevents; i++) {
    const struct strata__trace_event *e = &tr->events[i];
    fprintf(f,
            "{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": 0, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, "
            "\"args\": {\"step\": %lld",
            e->name, e->cat, e->tid, e->ts, e->dur, (long long)e->step + 1);
    if (e->op) {
      fprintf(f, ", \"collective\": \"%s\", \"bytes\": %llu, \"group\": [", e->op, (unsigned long long)e->bytes);
      print_group(f, tr, e->group_kind, e->group_stage);
      fputc(']', f);
    }
    if (e->posted >= 0) /* when the device handed it over: before ts when the data waited for the link */
      fprintf(f, ", \"posted\": %.3f", e->posted);
    fprintf(f, "}}%s\n", i + 1 < tr->nevents ? "," : "");
  }
  fprintf(f, "]}\n");
  return strata__out_commit(&o);
}
