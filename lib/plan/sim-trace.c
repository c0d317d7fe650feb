/* SPDX-License-Identifier: MIT */
/* sim-trace.c — the simulator's predicted trace: the engine's events recorded as it runs, written in the executor's Chrome/Perfetto format. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/file.h"
#include "plan/plan.h"
#include "core/core.h"

/* One event of the predicted step: a complete event (name, category, thread, start and length in microseconds),
** and for a collective its operation and bytes. */
struct strata__plan_event {
  const char *cat;
  char name[24];
  int tid;
  double ts, dur;
  const char *op;
  double bytes;
};

void strata__plan_trace_event(struct strata__plan_engine *e, const char *cat, const struct strata_action *a,
                              const char *op, int tid, double t0, double t1, double bytes) {
  if (!e->tracing || t1 <= t0)
    return;
  if (e->nev == e->cap_ev) {
    size_t cap = e->cap_ev ? 2 * e->cap_ev : 1024;
    struct strata__plan_event *n = realloc(e->ev, sizeof *n * cap);
    if (!n) {
      e->failed = 1;
      return;
    }
    e->ev = n;
    e->cap_ev = cap;
  }
  struct strata__plan_event *v = &e->ev[e->nev++];
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

int strata__plan_trace_write(const struct strata__plan_engine *e, strata_layout_t l, const char *path) {
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
    const struct strata__plan_event *v = &e->ev[i];
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
      const struct strata__plan_event *v = &e->ev[i];
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
