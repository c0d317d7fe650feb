/* SPDX-License-Identifier: MIT */
/* sim.c — the simulator: a discrete-event run of a schedule's per-device action lists on the cost model of devices and links. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "parallel/split.h"
#include "plan/plan.h"
#include "core/core.h"

/* A stage's forward and backward FLOPs (`arg`: each layer's, read once): the time the one balancer weighs a split by
** in the simulator, as the trainer does on devices of one speed. */
static double flops_time(void *arg, int j, int a, int b) {
  (void)j;
  const double *flops = arg;
  double f = 0;
  for (int l = a; l < b; l++)
    f += flops[l];
  return f;
}

/* A layout without a split: the one balancer's (parallel/split.c), by FLOPs. */
static int balanced_split(strata_model_t model, int S, int *split) {
  const int L = strata_model_layer_count(model);
  if (L < S)
    return strata__error(STRATA_ERR_INVALID, "the model has %d layers, fewer than the layout's %d stages", L, S);
  double *flops = malloc(sizeof *flops * (size_t)L);
  if (!flops)
    return strata__error(STRATA_ERR_NOMEM, "simulator: out of host memory");
  for (int l = 0; l < L; l++) {
    struct strata_layer_info li;
    strata_model_layer(model, l, &li);
    flops[l] = li.fwd_flops + li.bwd_flops;
  }
  struct strata__split_costs costs = {.time = flops_time, .arg = flops};
  int rc = strata__split_best(L, S, &costs, split);
  free(flops);
  return rc == 1 ? strata__error(STRATA_ERR_INTERNAL, "no split of %d layers into %d stages", L, S) : rc;
}

/* ---- the engine ---- */

/* A heap entry: device `dev` at time t starts its next action (gen < 0), or ends the compute on host
** cores it runs now, if `gen` is still that compute's generation (a later share of the cores moved it). */
struct strata__plan_heap_item {
  double t;
  int dev;
  int gen;
};

/* A device's compute on the host's cores, running: it advances at `rate` (its share of the cores) and
** has `work` seconds (alone) left as of `since`. */
struct strata__plan_shared_run {
  int on, gen;
  int threads, node;
  double work, since, rate;
  double t0, comm; /* when the action started; the seconds of its inline joins, which follow it */
};

/* The next of a seeded stream of uniform numbers in [0, 1) (splitmix64: one state word, every seed good). */
static double uniform(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return (double)(z >> 11) * 0x1.0p-53;
}

/* A draw from a spread of n quantiles at probabilities (i + 0.5) / n: linear between them, the end ones held. */
static double spread_draw(const double *q, int n, double u) {
  const double x = u * n - 0.5;
  if (x <= 0)
    return q[0];
  const int i = (int)x;
  if (i >= n - 1)
    return q[n - 1];
  return q[i] + (x - i) * (q[i + 1] - q[i]);
}

/* The factor on stage st's next compute action: a draw from its device's spread, or 1. */
static double jitter(struct strata__plan_engine *e, int st) {
  if (!e->draws || !e->sc || st < 0 || st >= e->S)
    return 1;
  const struct strata_device_cost *w = &e->c->cost[e->sc[st].dev % e->c->k];
  return w->nspread > 0 ? spread_draw(w->spread, w->nspread, uniform(&e->rng)) : 1;
}

static size_t key(const struct strata__plan_engine *e, int kind, int stage, int mb) {
  return ((size_t)kind * (size_t)e->S + (size_t)stage) * (size_t)(e->M + 1) + (size_t)(mb + 1);
}

/*
** The key kind of action i of device d's list: its own, but a TP_JOIN_BACKWARD right after a W (a tp-cut stage
** recomputing: the W's recomputation's joins) is a join apart from the one after its BI, under TJW.
*/
#define TJW STRATA_ACTION_KIND_COUNT
static int join_kind(const struct strata__plan_engine *e, int d, int i) {
  int n;
  const struct strata_action *l = strata_schedule_actions(e->s, d, &n);
  if (l[i].kind == STRATA_ACTION_TP_JOIN_BACKWARD && i > 0 && l[i - 1].kind == STRATA_ACTION_BACKWARD_WEIGHT &&
      l[i - 1].stage == l[i].stage && l[i - 1].microbatch == l[i].microbatch)
    return TJW;
  return l[i].kind;
}

static int coll_index(int kind) {
  return kind == STRATA_ACTION_GRAD_REDUCE ? 0 : kind == STRATA_ACTION_GRAD_SCATTER ? 1
         : kind == STRATA_ACTION_PARAM_GATHER ? 2 : -1;
}

/* The stage of replica r that matches stage st (same slice, same place in the chain). */
static int peer_stage(const struct strata__plan_engine *e, int st, int r) {
  return (r * e->T + st / e->chain % e->T) * e->chain + st % e->chain;
}
/* Slice t of st's replica's stage. */
static int slice_stage(const struct strata__plan_engine *e, int st, int t) {
  return (st / e->chain / e->T * e->T + t) * e->chain + st % e->chain;
}
/* The slot of stage st's gradient collective `kind` (one per slice and place in the chain). */
static int coll_slot(const struct strata__plan_engine *e, int kind, int st) {
  return (coll_index(kind) * e->T + st / e->chain % e->T) * e->chain + st % e->chain;
}
static int has_prev(const struct strata__plan_engine *e, int st) { return st % e->chain != 0; }
static int has_next(const struct strata__plan_engine *e, int st) { return (st + 1) % e->chain != 0; }

static void heap_push(struct strata__plan_engine *e, double t, int dev, int gen) {
  if (e->nheap == e->cap_heap) {
    int cap = e->cap_heap ? 2 * e->cap_heap : 64;
    struct strata__plan_heap_item *h = realloc(e->heap, sizeof *h * (size_t)cap);
    if (!h) {
      e->failed = 1;
      return;
    }
    e->heap = h;
    e->cap_heap = cap;
  }
  int i = e->nheap++;
  while (i > 0) {
    int p = (i - 1) / 2;
    if (e->heap[p].t < t || (e->heap[p].t == t && e->heap[p].dev < dev))
      break;
    e->heap[i] = e->heap[p];
    i = p;
  }
  e->heap[i] = (struct strata__plan_heap_item){t, dev, gen};
}

static struct strata__plan_heap_item heap_pop(struct strata__plan_engine *e) {
  struct strata__plan_heap_item top = e->heap[0], last = e->heap[--e->nheap];
  int i = 0;
  for (;;) {
    int l = 2 * i + 1, r = l + 1, m = i;
    struct strata__plan_heap_item *best = &last;
    if (l < e->nheap && (e->heap[l].t < best->t || (e->heap[l].t == best->t && e->heap[l].dev < best->dev)))
      m = l, best = &e->heap[l];
    if (r < e->nheap && (e->heap[r].t < best->t || (e->heap[r].t == best->t && e->heap[r].dev < best->dev)))
      m = r, best = &e->heap[r];
    if (m == i)
      break;
    e->heap[i] = e->heap[m];
    i = m;
  }
  if (e->nheap)
    e->heap[i] = last;
  return top;
}

/* A pass that reads the stage's weights: under ZeRO-3 a PARAM_GATHER of its micro-batch comes right before it. */
static int reads_weights(int kind) {
  return kind == STRATA_ACTION_FORWARD || kind == STRATA_ACTION_BACKWARD || kind == STRATA_ACTION_BACKWARD_INPUT ||
         kind == STRATA_ACTION_BACKWARD_WEIGHT;
}

/* When device d's next action can start: 1 and *t, or 0 while it waits for something not yet known. */
static int ready(const struct strata__plan_engine *e, int d, double *t) {
  int n;
  const struct strata_action *a = &strata_schedule_actions(e->s, d, &n)[e->next[d]];
  const int st = a->stage, mb = a->microbatch;
  double r = e->clock[d], f = 0;
#define NEED(x)                                                                                                        \
  do {                                                                                                                 \
    f = (x);                                                                                                           \
    if (f < 0)                                                                                                         \
      return 0;                                                                                                        \
    if (f > r)                                                                                                         \
      r = f;                                                                                                           \
  } while (0)
  if (e->gather_first && st >= 0 && st < e->S && reads_weights(a->kind) && e->gather_first[st] >= 0)
    NEED(e->gather_first[st]); /* ZeRO-3: its first layer's weights, gathered (PARAM_GATHER right before it) */
  switch (a->kind) {
  case STRATA_ACTION_FORWARD:
    if (has_prev(e, st)) {
      /* the previous stage, or the slice that stands for it */
      const int p = strata_schedule_stage_owner(e->s, st - 1);
      NEED(strata_schedule_stage_device(e->s, p) == d ? e->finish[key(e, STRATA_ACTION_FORWARD, p, mb)]
                                                      : e->finish[key(e, STRATA_ACTION_RECV_ACT, st, mb)]);
    }
    break;
  case STRATA_ACTION_SEND_ACT: NEED(e->finish[key(e, STRATA_ACTION_FORWARD, st, mb)]); break;
  /* a transfer's arrival is kept under the stage before (after) the receiver: the sender may stand for it */
  case STRATA_ACTION_RECV_ACT: NEED(e->arrive[key(e, STRATA_ACTION_SEND_ACT, st - 1, mb)]); break;
  case STRATA_ACTION_BACKWARD:
  case STRATA_ACTION_BACKWARD_INPUT:
    NEED(e->finish[key(e, STRATA_ACTION_FORWARD, st, mb)]);
    if (has_next(e, st)) {
      const int nx = strata_schedule_stage_owner(e->s, st + 1);
      if (strata_schedule_stage_device(e->s, nx) == d) {
        double b = e->finish[key(e, STRATA_ACTION_BACKWARD, nx, mb)];
        if (b < 0)
          b = e->finish[key(e, STRATA_ACTION_BACKWARD_INPUT, nx, mb)];
        NEED(b);
      } else {
        NEED(e->finish[key(e, STRATA_ACTION_RECV_GRAD, st, mb)]);
      }
    }
    break;
  case STRATA_ACTION_SEND_GRAD: {
    double b = e->finish[key(e, STRATA_ACTION_BACKWARD, st, mb)];
    if (b < 0)
      b = e->finish[key(e, STRATA_ACTION_BACKWARD_INPUT, st, mb)];
    NEED(b);
    break;
  }
  case STRATA_ACTION_RECV_GRAD: NEED(e->arrive[key(e, STRATA_ACTION_SEND_GRAD, st + 1, mb)]); break;
  case STRATA_ACTION_BACKWARD_WEIGHT: NEED(e->finish[key(e, STRATA_ACTION_BACKWARD_INPUT, st, mb)]); break;
  case STRATA_ACTION_OPTIMIZER:
    if (e->arrive[key(e, a->kind, st, mb)] >= 0) {
      /* the device's last: its updates wait until every stage's gradient norm is in (the global clip) */
      if (e->opt_arrived < e->held)
        return 0;
      NEED(e->opt_max);
      break;
    }
    if (e->bw_done[st] < e->M)
      return 0;
    NEED(e->bw_last[st]);
    if (e->Rdp > 1) {
      double g = e->coll_fin[coll_slot(e, STRATA_ACTION_GRAD_REDUCE, st)];
      if (g < 0)
        g = e->coll_fin[coll_slot(e, STRATA_ACTION_GRAD_SCATTER, st)];
      NEED(g);
    }
    break;
  case STRATA_ACTION_GRAD_REDUCE:
  case STRATA_ACTION_GRAD_SCATTER:
    if (e->bw_done[st] < e->M)
      return 0;
    NEED(e->bw_last[st]);
    break;
  case STRATA_ACTION_PARAM_GATHER:
    if (mb < 0) /* (ZeRO-3's of a micro-batch reads the shards, there all along) */
      NEED(e->finish[key(e, STRATA_ACTION_OPTIMIZER, st, -1)]);
    break;
  case STRATA_ACTION_TP_JOIN_FORWARD:
  case STRATA_ACTION_TP_JOIN_BACKWARD: {
    /* arrive when the device gets here; then wait for the join to end */
    const int kk = join_kind(e, d, e->next[d]);
    if (e->arrive[key(e, kk, st, mb)] >= 0)
      NEED(e->finish[key(e, kk, st, mb)]);
    break;
  }
  default: break; /* kinds the simulator does not know: a synchronisation point that costs nothing */
  }
#undef NEED
  *t = r;
  return 1;
}

/* Push device d if its next action can start, else park it until what it waits for is known. */
static void schedule_device(struct strata__plan_engine *e, int d) {
  int n;
  strata_schedule_actions(e->s, d, &n);
  if (e->next[d] >= n) {
    e->parked[d] = 0;
    return;
  }
  double t;
  if (ready(e, d, &t)) {
    e->parked[d] = 0;
    heap_push(e, t, d, -1);
  } else {
    e->parked[d] = 1;
  }
}

static void wake(struct strata__plan_engine *e, int d) {
  if (e->parked[d])
    schedule_device(e, d);
}

/* Earliest-free lane of `n` lanes starting at base. */
static double *lane(double *base, int n) {
  double *best = base;
  for (int i = 1; i < n; i++)
    if (base[i] < *best)
      best = &base[i];
  return best;
}

/*
** A transfer of `bytes` from schedule device `from` (its machine device a)
** to b at time t: it waits for the sender's copy engine, for a shared PCIe
** uplink on either side when it leaves that island, and for a network
** interface on each side when it leaves the node; all of them are held
** until it arrives. Returns the arrival time and the seconds it took.
*/
static double transfer(struct strata__plan_engine *e, int from, int a, int b, double bytes, double t, double *dur) {
  const struct strata_machine *c = e->c;
  double gbps, lat;
  int kind;
  strata__machine_link(c, a, b, &gbps, &lat, &kind);
  double *held[6];
  int nheld = 0;
  held[nheld++] = &e->sender_free[from];
  const int la = a % c->k, lb = b % c->k;
  const size_t nk = (size_t)c->nodes * (size_t)c->k;
  int leaves = kind == STRATA_PATH_NET || c->island[la] != c->island[lb];
  if (leaves && c->uplink[la] >= 0) {
    held[nheld++] = &e->res_free[(size_t)(a / c->k) * (size_t)c->k + (size_t)c->uplink[la]];
    if (c->uplink_gbps[la] > 0 && c->uplink_gbps[la] < gbps)
      gbps = c->uplink_gbps[la];
  }
  if (leaves && c->uplink[lb] >= 0 && !(a / c->k == b / c->k && c->uplink[la] == c->uplink[lb])) {
    held[nheld++] = &e->res_free[(size_t)(b / c->k) * (size_t)c->k + (size_t)c->uplink[lb]];
    if (c->uplink_gbps[lb] > 0 && c->uplink_gbps[lb] < gbps)
      gbps = c->uplink_gbps[lb];
  }
  if (kind == STRATA_PATH_NET) {
    held[nheld++] = lane(&e->res_free[nk + (size_t)(a / c->k) * (size_t)c->nics], c->nics);
    held[nheld++] = lane(&e->res_free[nk + (size_t)c->nodes * (size_t)c->nics + (size_t)(b / c->k) * (size_t)c->nics],
                         c->nics);
  }
  double start = t;
  for (int i = 0; i < nheld; i++)
    if (*held[i] > start)
      start = *held[i];
  *dur = lat * 1e-6 + bytes / (gbps * 1e9);
  double end = start + *dur;
  for (int i = 0; i < nheld; i++)
    *held[i] = end;
  return end;
}

/*
** The collective `kind` of stage st: a ring per tp rank over the stage's
** replicas, paced by its narrowest hop. A hop that leaves the node shares
** the node's interfaces with the rings of the other tp ranks. In symmetric
** mode two replicas stand for dp: their hop is every hop's kind.
** Seconds, and the bytes each member contributes.
*/
static double collective_s(const struct strata__plan_engine *e, int kind, int st, double *bytes) {
  if (e->unit) {
    *bytes = 0;
    return e->unit[kind];
  }
  const struct strata__plan_stage_cost *c = &e->sc[st];
  /* each hop: a two-member all-reduce of 2 bytes / dp, the time of two of the ring's steps */
  const double pair_floats = 2.0 * c->grad_bytes / e->dp / 4;
  double worst = 0;
  for (int r = 0; r < e->Rdp; r++) {
    int a = e->sc[peer_stage(e, st, r)].dev, b = e->sc[peer_stage(e, st, (r + 1) % e->Rdp)].dev;
    if (a == b)
      continue;
    double g, lt, pair;
    int k;
    strata__machine_link(e->c, a, b, &g, &lt, &k);
    if (k == STRATA_PATH_NET) {
      double share = e->c->net_gbps * e->c->nics / c->tp;
      g = share < e->c->net_gbps ? share : e->c->net_gbps;
      pair = strata__pair_allreduce_s(pair_floats, g, lt);
    } else {
      pair = strata__machine_pair_allreduce(e->c, a, b, pair_floats);
    }
    worst = pair > worst ? pair : worst;
  }
  *bytes = c->grad_bytes;
  double ar = e->dp > 1 ? (e->dp - 1) * worst : 0;
  if (kind == STRATA_ACTION_GRAD_SCATTER && e->zero2) { /* each micro-batch's gradients reduced onto their owner */
    *bytes *= e->M;
    return ar / 2 * e->M; /* (a reduce: half the ring, as a reduce-scatter) */
  }
  /* (ZeRO-3's PARAM_GATHER of a micro-batch: the stage's weights all-gathered once, half the ring, as ZeRO-1's) */
  return kind == STRATA_ACTION_GRAD_REDUCE ? ar : ar / 2; /* reduce-scatter or all-gather: half the ring */
}

static double action_cost(const struct strata__plan_engine *e, const struct strata_action *a, double *comm) {
  *comm = 0;
  if (e->unit)
    return a->kind >= 0 && a->kind < STRATA_ACTION_KIND_COUNT ? e->unit[a->kind] : 0;
  const struct strata__plan_stage_cost *c = &e->sc[a->stage];
  switch (a->kind) {
  case STRATA_ACTION_FORWARD: *comm = c->f_comm; return c->f;
  case STRATA_ACTION_BACKWARD: *comm = c->b_comm; return c->b;
  case STRATA_ACTION_BACKWARD_INPUT: *comm = c->bi_comm; return c->bi;
  case STRATA_ACTION_BACKWARD_WEIGHT: return c->w;
  case STRATA_ACTION_RECOMPUTE: *comm = c->rc_comm; return c->rc;
  case STRATA_ACTION_OPTIMIZER: return 0; /* the device's last OPTIMIZER updates all its stages: opt_s */
  default: return 0;
  }
}

/* Seconds of device d's updates: the AdamW steps of all its stages, after the global norm. */
static double opt_s(const struct strata__plan_engine *e, int d) {
  double t = 0;
  for (int g = 0; g < e->S; g++)
    if (strata_schedule_stage_device(e->s, g) == d && strata_schedule_stage_held(e->s, g))
      t += e->unit ? e->unit[STRATA_ACTION_OPTIMIZER] : e->sc[g].opt;
  return t;
}

/*
** Compute on the host's cores, as processor sharing: the devices of a node
** that compute there share its cores (the effective count calibration
** measured); while the threads of those computing exceed the cores, each
** runs at cores / threads of its speed alone. The share changes whenever one
** starts or ends, so a running compute's end is re-timed then: its heap
** entry carries a generation, and the older entries are dropped.
*/
static int shares_cores(const struct strata__plan_engine *e, int st) {
  return !e->unit && e->run && e->sc[st].threads > 0;
}

/* Advance every running compute of `node` to time t at its current rate, then give them all the new share. */
static void reshare(struct strata__plan_engine *e, int node, double t, int advance_only) {
  double demand = 0;
  for (int x = 0; x < e->P; x++) {
    struct strata__plan_shared_run *r = &e->run[x];
    if (!r->on || r->node != node)
      continue;
    r->work -= (t - r->since) * r->rate;
    r->work = r->work > 0 ? r->work : 0;
    r->since = t;
    demand += r->threads;
  }
  if (advance_only)
    return;
  const double rate = demand > e->c->cpu_cores ? e->c->cpu_cores / demand : 1;
  for (int x = 0; x < e->P; x++) {
    struct strata__plan_shared_run *r = &e->run[x];
    if (!r->on || r->node != node)
      continue;
    r->rate = rate;
    heap_push(e, t + r->work / rate, x, ++r->gen);
  }
}

/* Device d starts `work` seconds (alone) of compute on host cores at t, then `comm` seconds of inline joins. */
static void shared_start(struct strata__plan_engine *e, int d, int st, double t, double work, double comm) {
  const int node = e->sc[st].dev / e->c->k;
  reshare(e, node, t, 1);
  struct strata__plan_shared_run *r = &e->run[d];
  r->on = 1;
  r->threads = e->sc[st].threads;
  r->node = node;
  r->work = work;
  r->since = r->t0 = t;
  r->rate = 1;
  r->comm = comm;
  reshare(e, node, t, 0);
}

/*
** The end of device d's compute action `a`, started at t0, its device free
** again at t1 (comm of it in inline joins): the figures, the trace, the
** memory in flight and the stage's backward count.
*/
static void compute_done(struct strata__plan_engine *e, int d, const struct strata_action *a, double t0, double t1,
                         double comm) {
  const int st = a->stage;
  if (e->gather_end && reads_weights(a->kind) && e->gather_end[st] > t1) { /* ZeRO-3: its last layer's weights */
    comm += e->gather_end[st] - t1;
    t1 = e->gather_end[st];
  }
  if (e->gather_end && reads_weights(a->kind)) /* (the next pass of the stage has a gather of its own) */
    e->gather_first[st] = e->gather_end[st] = -1;
  e->clock[d] = t1;
  e->finish[key(e, a->kind, st, a->microbatch)] = t1;
  e->compute[d] += t1 - t0 - comm;
  e->comm[d] += comm;
  strata__plan_trace_event(e, a->kind == STRATA_ACTION_OPTIMIZER ? "optimizer" : "compute", a, NULL, 2 * d, t0, t1, 0);
  if (!e->unit) {
    if (a->kind == STRATA_ACTION_FORWARD) {
      e->mem_now[d] += e->sc[st].act_bytes;
      if (e->mem_now[d] > e->mem_peak[d])
        e->mem_peak[d] = e->mem_now[d];
    } else if (a->kind == STRATA_ACTION_BACKWARD || a->kind == STRATA_ACTION_BACKWARD_WEIGHT) {
      e->mem_now[d] -= e->sc[st].act_bytes;
    }
  }
  if (a->kind == STRATA_ACTION_BACKWARD || a->kind == STRATA_ACTION_BACKWARD_WEIGHT) {
    e->bw_done[st]++;
    if (t1 > e->bw_last[st])
      e->bw_last[st] = t1;
  }
}

/*
** ZeRO-3's PARAM_GATHER s m at t: the stage's weights all-gathered from the replicas' shards for the pass after it,
** layer by layer on the device's comm stream from when it is free (each next layer's posted while the one before
** computes: FSDP's prefetch). The pass starts once its first layer's share is in and ends no sooner than the last's
** (compute_done); the device itself goes on at once.
*/
static void weight_gather(struct strata__plan_engine *e, int d, const struct strata_action *a, double t) {
  const int st = a->stage;
  double bytes = 0, dur = e->unit ? e->unit[a->kind] : 0;
  if (!e->unit && e->sc)
    dur = collective_s(e, a->kind, st, &bytes);
  const int layers = !e->unit && e->sc && e->sc[st].layers > 0 ? e->sc[st].layers : 1;
  const double start = e->comm_free[d] > t ? e->comm_free[d] : t, end = start + dur;
  e->comm_free[d] = end;
  e->comm[d] += dur;
  if (e->gather_first) {
    e->gather_first[st] = start + dur / layers;
    e->gather_end[st] = end;
  }
  e->finish[key(e, a->kind, st, a->microbatch)] = t;
  strata__plan_trace_event(e, "comm", a, "allgather", 2 * d + 1, start, end, bytes);
  e->clock[d] = t;
}

/* Run the engine to the end; STRATA_ERR_INVALID when the lists cannot finish. */
static int engine_run(struct strata__plan_engine *e) {
  for (int d = 0; d < e->P; d++)
    schedule_device(e, d);
  while (e->nheap > 0 && !e->failed) {
    struct strata__plan_heap_item it = heap_pop(e);
    const int d = it.dev;
    int n;
    if (it.gen >= 0) {
      /* a compute on host cores ends, unless a change of share moved its end since this entry */
      struct strata__plan_shared_run *r = &e->run[d];
      if (!r->on || it.gen != r->gen)
        continue;
      const struct strata_action *a = &strata_schedule_actions(e->s, d, &n)[e->next[d]];
      reshare(e, r->node, it.t, 1);
      r->on = 0;
      compute_done(e, d, a, r->t0, it.t + r->comm, r->comm);
      reshare(e, r->node, it.t, 0);
      e->next[d]++;
      schedule_device(e, d);
      continue;
    }
    const struct strata_action *a = &strata_schedule_actions(e->s, d, &n)[e->next[d]];
    const double t = it.t;
    const int st = a->stage, mb = a->microbatch;
    const int kk = join_kind(e, d, e->next[d]); /* (a->kind, but TJW for a TP_JOIN_BACKWARD after a W) */
    const size_t self = key(e, kk, st, mb);
    switch (a->kind) {
    case STRATA_ACTION_FORWARD:
    case STRATA_ACTION_BACKWARD:
    case STRATA_ACTION_BACKWARD_INPUT:
    case STRATA_ACTION_BACKWARD_WEIGHT:
    case STRATA_ACTION_RECOMPUTE:
    case STRATA_ACTION_OPTIMIZER: {
      double comm, dur = action_cost(e, a, &comm);
      if (a->kind == STRATA_ACTION_OPTIMIZER && e->next[d] == e->last_opt[d]) {
        if (e->arrive[self] < 0) {
          /* its norm is in; the updates wait for every stage's */
          e->arrive[self] = t;
          e->opt_max = t > e->opt_max ? t : e->opt_max;
          if (++e->opt_arrived == e->held)
            for (int x = 0; x < e->P; x++)
              wake(e, x);
          e->clock[d] = t;
          schedule_device(e, d);
          continue;
        }
        dur = opt_s(e, d);
      } else if (a->kind == STRATA_ACTION_OPTIMIZER) {
        e->opt_max = t > e->opt_max ? t : e->opt_max;
        if (++e->opt_arrived == e->held)
          for (int x = 0; x < e->P; x++)
            wake(e, x);
      }
      dur = comm + (dur - comm) * jitter(e, st); /* the compute strays as its device's does; the joins keep time */
      if (shares_cores(e, st)) {
        shared_start(e, d, st, t, dur - comm, comm); /* its end comes through the heap */
        continue;
      }
      compute_done(e, d, a, t, t + dur, comm);
      break;
    }
    case STRATA_ACTION_SEND_ACT:
    case STRATA_ACTION_SEND_GRAD: {
      /* buffered: the device goes on; its copy engine carries the data, the whole (joined) tensor, to every
      ** slice of the neighbouring stage that takes it from this one (itself, and those whose neighbour no
      ** device holds and this stage stands for); each arrival is kept under the receiver's neighbour */
      e->finish[self] = t;
      const int act = a->kind == STRATA_ACTION_SEND_ACT, peer = act ? st + 1 : st - 1;
      for (int x = 0; x < e->T; x++) {
        const int to = slice_stage(e, peer, x), from = act ? to - 1 : to + 1;
        if (!strata_schedule_stage_held(e->s, to) || strata_schedule_stage_owner(e->s, from) != st)
          continue;
        double dur = 0, end;
        if (e->unit) {
          dur = e->unit[a->kind];
          end = t + dur;
        } else {
          const struct strata__plan_stage_cost *c = &e->sc[st];
          const double bytes = act ? c->out_bytes : c->in_bytes;
          end = transfer(e, d, c->dev, e->sc[to].dev, bytes, t, &dur);
          strata__plan_trace_event(e, "send", a, NULL, 2 * d + 1, end - dur, end, bytes);
        }
        e->comm[d] += dur;
        e->arrive[key(e, a->kind, from, mb)] = end;
        wake(e, strata_schedule_stage_device(e->s, to));
      }
      break;
    }
    case STRATA_ACTION_RECV_ACT:
    case STRATA_ACTION_RECV_GRAD:
      e->finish[self] = t;
      strata__plan_trace_event(e, "recv", a, NULL, 2 * d, e->clock[d], t, 0);
      e->clock[d] = t;
      break;
    case STRATA_ACTION_PARAM_GATHER:
      if (mb >= 0) { /* ZeRO-3's, of a micro-batch; ZeRO-1's, of the whole step, is a collective */
        weight_gather(e, d, a, t);
        break;
      }
      /* fall through */
    case STRATA_ACTION_GRAD_REDUCE:
    case STRATA_ACTION_GRAD_SCATTER: {
      /* arrive; the collective runs on the communication stream once every replica has */
      const int ci = coll_slot(e, a->kind, st);
      e->finish[self] = -1;
      if (t > e->coll_max[ci])
        e->coll_max[ci] = t;
      if (++e->coll_count[ci] == e->Rdp) {
        double start = e->coll_max[ci];
        for (int r = 0; r < e->Rdp; r++) {
          int dv = strata_schedule_stage_device(e->s, peer_stage(e, st, r));
          if (e->comm_free[dv] > start)
            start = e->comm_free[dv];
        }
        double bytes, dur = collective_s(e, a->kind, st, &bytes), end = start + dur;
        e->coll_fin[ci] = end;
        for (int r = 0; r < e->Rdp; r++) {
          int sg = peer_stage(e, st, r), dv = strata_schedule_stage_device(e->s, sg);
          struct strata_action ra = {a->kind, sg, -1};
          e->comm_free[dv] = end;
          e->comm[dv] += dur;
          e->finish[key(e, a->kind, sg, -1)] = end;
          strata__plan_trace_event(e, "comm", &ra, a->kind == STRATA_ACTION_GRAD_REDUCE ? "allreduce"
                                : a->kind == STRATA_ACTION_GRAD_SCATTER ? (e->zero2 ? "reduce" : "reducescatter")
                                                                        : "allgather",
                2 * dv + 1, start, end, bytes);
        }
        for (int r = 0; r < e->Rdp; r++)
          wake(e, strata_schedule_stage_device(e->s, peer_stage(e, st, r)));
      }
      e->clock[d] = t;
      break;
    }
    case STRATA_ACTION_TP_JOIN_FORWARD:
    case STRATA_ACTION_TP_JOIN_BACKWARD: {
      if (e->arrive[self] < 0) {
        /* arrive; the join runs once every slice of the stage has, and each slice waits for its end */
        e->arrive[self] = t;
        e->clock[d] = t;
        const size_t k0 = key(e, kk, slice_stage(e, st, 0), mb);
        const int slices = strata_schedule_stage_tp(e->s, st);
        e->tj_max[k0] = t > e->tj_max[k0] ? t : e->tj_max[k0];
        if (++e->tj_count[k0] == slices) {
          const int fwd = a->kind == STRATA_ACTION_TP_JOIN_FORWARD;
          double start = e->tj_max[k0];
          double dur = e->unit ? e->unit[a->kind] : fwd ? e->sc[st].tjf : kk == TJW ? e->sc[st].tjw : e->sc[st].tjb;
          double bytes = e->unit  ? 0
                         : fwd      ? e->sc[st].tjf_bytes
                         : kk == TJW ? e->sc[st].tjw_bytes
                                     : e->sc[st].tjb_bytes;
          for (int x = 0; x < slices; x++) {
            int sg = slice_stage(e, st, x), dv = strata_schedule_stage_device(e->s, sg);
            struct strata_action ja = {a->kind, sg, mb};
            e->finish[key(e, kk, sg, mb)] = start + dur;
            e->comm[dv] += dur;
            strata__plan_trace_event(e, "comm", &ja, "allreduce", 2 * dv + 1, start, start + dur, bytes);
          }
          for (int x = 0; x < slices; x++)
            wake(e, strata_schedule_stage_device(e->s, slice_stage(e, st, x)));
        }
        schedule_device(e, d);
        continue;
      }
      e->clock[d] = t;
      break;
    }
    default: e->clock[d] = t; break; /* unknown kinds: a free synchronisation point (see ready) */
    }
    e->next[d]++;
    schedule_device(e, d);
    /* a device waiting on this one's stage for a same-device dependency never parks;
    ** the neighbours waiting for a transfer were woken above */
  }
  if (e->failed)
    return strata__error(STRATA_ERR_NOMEM, "simulator: out of host memory");
  for (int d = 0; d < e->P; d++) {
    int n;
    const struct strata_action *l = strata_schedule_actions(e->s, d, &n);
    if (e->next[d] < n)
      return strata__error(STRATA_ERR_INVALID, "simulator: dev %d cannot run #%d %s%d.%d: the lists do not finish", d,
                           e->next[d], strata_action_label(l[e->next[d]].kind), l[e->next[d]].stage,
                           l[e->next[d]].microbatch);
  }
  return STRATA_OK;
}

static void engine_free(struct strata__plan_engine *e) {
  free(e->finish);
  free(e->arrive);
  free(e->clock);
  free(e->sender_free);
  free(e->comm_free);
  free(e->gather_first);
  free(e->gather_end);
  free(e->compute);
  free(e->comm);
  free(e->mem_now);
  free(e->mem_peak);
  free(e->next);
  free(e->parked);
  free(e->bw_done);
  free(e->bw_last);
  free(e->coll_count);
  free(e->coll_max);
  free(e->coll_fin);
  free(e->tj_count);
  free(e->tj_max);
  free(e->last_opt);
  free(e->run);
  free(e->res_free);
  free(e->heap);
  free(e->ev);
}

static int engine_init(struct strata__plan_engine *e, strata_schedule_t s, const struct strata_machine *c) {
  e->s = s;
  e->P = strata_schedule_devices(s);
  e->S = strata_schedule_stages(s);
  e->M = strata_schedule_microbatches(s);
  e->T = strata_schedule_tp(s);
  e->Rdp = strata_schedule_replicas(s);
  e->R = e->Rdp * e->T;
  e->chain = e->S / e->R;
  e->c = c;
  for (int g = 0; g < e->S; g++)
    e->held += strata_schedule_stage_held(s, g);
  size_t keys = (size_t)(TJW + 1) * (size_t)e->S * (size_t)(e->M + 1), P = (size_t)e->P; /* (kinds and TJW) */
  size_t res = c ? (size_t)c->nodes * ((size_t)c->k + 2 * (size_t)c->nics) : 1;
  e->finish = malloc(keys * sizeof *e->finish);
  e->arrive = malloc(keys * sizeof *e->arrive);
  e->clock = calloc(P, sizeof *e->clock);
  e->sender_free = calloc(P, sizeof *e->sender_free);
  e->comm_free = calloc(P, sizeof *e->comm_free);
  e->compute = calloc(P, sizeof *e->compute);
  e->comm = calloc(P, sizeof *e->comm);
  e->mem_now = calloc(P, sizeof *e->mem_now);
  e->mem_peak = calloc(P, sizeof *e->mem_peak);
  e->next = calloc(P, sizeof *e->next);
  e->parked = calloc(P, sizeof *e->parked);
  e->bw_done = calloc((size_t)e->S, sizeof *e->bw_done);
  e->bw_last = calloc((size_t)e->S, sizeof *e->bw_last);
  int gathers = 0; /* ZeRO-3's lists: a PARAM_GATHER of a micro-batch before each pass */
  for (int d = 0; d < e->P && !gathers; d++) {
    int n = 0;
    const struct strata_action *l = strata_schedule_actions(s, d, &n);
    for (int i = 0; i < n && !gathers; i++)
      gathers = l[i].kind == STRATA_ACTION_PARAM_GATHER && l[i].microbatch >= 0;
  }
  if (gathers) {
    e->gather_first = malloc((size_t)e->S * sizeof *e->gather_first);
    e->gather_end = malloc((size_t)e->S * sizeof *e->gather_end);
    for (int g = 0; e->gather_first && e->gather_end && g < e->S; g++)
      e->gather_first[g] = e->gather_end[g] = -1;
  }
  const size_t slots = 3 * (size_t)e->T * (size_t)e->chain;
  e->coll_count = calloc(slots, sizeof *e->coll_count);
  e->coll_max = calloc(slots, sizeof *e->coll_max);
  e->coll_fin = malloc(slots * sizeof *e->coll_fin);
  e->tj_count = calloc(keys, sizeof *e->tj_count);
  e->tj_max = calloc(keys, sizeof *e->tj_max);
  e->last_opt = malloc(P * sizeof *e->last_opt);
  if (c && c->cpu_cores > 0)
    e->run = calloc(P, sizeof *e->run);
  e->res_free = calloc(res, sizeof *e->res_free);
  if (!e->finish || !e->arrive || !e->clock || !e->sender_free || !e->comm_free || !e->compute || !e->comm ||
      !e->mem_now || !e->mem_peak || !e->next || !e->parked || !e->bw_done || !e->bw_last || !e->coll_count ||
      !e->coll_max || !e->coll_fin || !e->res_free || !e->tj_count || !e->tj_max || !e->last_opt ||
      (c && c->cpu_cores > 0 && !e->run) || (gathers && (!e->gather_first || !e->gather_end))) {
    engine_free(e);
    return strata__error(STRATA_ERR_NOMEM, "simulator: out of host memory for %d devices and %d stages", e->P, e->S);
  }
  for (size_t i = 0; i < keys; i++)
    e->finish[i] = e->arrive[i] = -1;
  for (size_t i = 0; i < slots; i++)
    e->coll_fin[i] = -1;
  for (int d = 0; d < e->P; d++) {
    int n;
    const struct strata_action *l = strata_schedule_actions(s, d, &n);
    e->last_opt[d] = -1;
    for (int i = 0; i < n; i++)
      if (l[i].kind == STRATA_ACTION_OPTIMIZER)
        e->last_opt[d] = i;
  }
  return STRATA_OK;
}

/* When a finished engine's step ends: its last device's last action, send or collective. */
static double engine_end(const struct strata__plan_engine *e) {
  double end = 0;
  for (int d = 0; d < e->P; d++) {
    if (e->clock[d] > end)
      end = e->clock[d];
    if (e->comm_free[d] > end)
      end = e->comm_free[d];
    if (e->sender_free[d] > end)
      end = e->sender_free[d];
  }
  return end;
}

/* Fill the figures every simulation gives from a finished engine. */
static int engine_result(const struct strata__plan_engine *e, struct strata_sim_result *out) {
  memset(out, 0, sizeof *out);
  out->devices = e->P;
  out->busy = calloc((size_t)e->P, sizeof *out->busy);
  out->memory = calloc((size_t)e->P, sizeof *out->memory);
  if (!out->busy || !out->memory) {
    strata_sim_result_destroy(out);
    return strata__error(STRATA_ERR_NOMEM, "simulator: out of host memory");
  }
  double end = engine_end(e), work = 0, comm = 0;
  for (int d = 0; d < e->P; d++) {
    work += e->compute[d];
    comm += e->comm[d];
    out->busy[d] = end > 0 ? e->compute[d] / end : 0;
  }
  out->step_s = out->step_lo_s = out->step_hi_s = end;
  out->samples = 1;
  out->bubble = end > 0 ? 1.0 - work / ((double)e->P * end) : 0.0;
  out->comm_share = work + comm > 0 ? comm / (work + comm) : 0.0;
  out->fits = 1;
  return STRATA_OK;
}

STRATA_API void strata_sim_result_destroy(struct strata_sim_result *r) {
  if (!r)
    return;
  free(r->busy);
  free(r->memory);
  r->busy = NULL;
  r->memory = NULL;
}

STRATA_API int strata_simulate_schedule(strata_schedule_t s, const double *cost, struct strata_sim_result *out) {
  if (!s || !out)
    return strata__error(STRATA_ERR_INVALID, "strata_simulate_schedule: NULL argument");
  TRY(strata_schedule_validate(s));
  double unit[STRATA_ACTION_KIND_COUNT] = {0};
  unit[STRATA_ACTION_FORWARD] = 1;
  unit[STRATA_ACTION_BACKWARD] = 2;
  unit[STRATA_ACTION_BACKWARD_INPUT] = 1;
  unit[STRATA_ACTION_BACKWARD_WEIGHT] = 1;
  struct strata__plan_engine e;
  memset(&e, 0, sizeof e);
  TRY(engine_init(&e, s, NULL));
  e.unit = cost ? cost : unit;
  e.dp = e.R;
  int rc = engine_run(&e);
  if (!rc)
    rc = engine_result(&e, out);
  engine_free(&e);
  return rc;
}

/* Each device's memory at the step's start: its stages' parameters, gradients and optimizer state. */
static void start_memory(struct strata__plan_engine *e) {
  for (int g = 0; g < e->S; g++) {
    int d = strata_schedule_stage_device(e->s, g);
    e->mem_now[d] += e->sc[g].static_bytes; /* 0 for a stage no device holds */
    e->mem_peak[d] = e->mem_now[d];
  }
}

/* Whether a device that holds one of the S stages has a spread to draw from. */
static int has_spread(const struct strata_machine *c, const struct strata__plan_stage_cost *sc, int S) {
  for (int g = 0; g < S; g++)
    if (c->cost[sc[g].dev % c->k].nspread > 0)
      return 1;
  return 0;
}

/* The seed of sample k's draws. */
static uint64_t sample_seed(uint64_t seed, int k) { return seed ^ (0xd1b54a32d192ed03ULL * (uint64_t)(k + 1)); }

/*
** Run `samples` steps of the engine `proto` describes (its schedule, machine and stage costs; it has not run),
** each compute action's time drawn from its device's spread; set proto to draw as the step of the median time
** does (the lower middle of an even count), and give the fastest and the slowest.
*/
struct sample {
  double t;
  int k;
};
static int by_time(const void *a, const void *b) {
  const struct sample *x = a, *y = b;
  return x->t < y->t ? -1 : x->t > y->t ? 1 : x->k - y->k;
}

static int sample_steps(struct strata__plan_engine *proto, int samples, uint64_t seed, double *lo, double *hi) {
  struct sample *t = malloc((size_t)samples * sizeof *t);
  if (!t)
    return strata__error(STRATA_ERR_NOMEM, "simulator: out of host memory for %d samples", samples);
  int rc = STRATA_OK;
  for (int k = 0; k < samples && !rc; k++) {
    struct strata__plan_engine x;
    memset(&x, 0, sizeof x);
    rc = engine_init(&x, proto->s, proto->c);
    if (rc)
      break;
    x.dp = proto->dp;
    x.sc = proto->sc;
    x.draws = 1;
    x.rng = sample_seed(seed, k);
    start_memory(&x);
    rc = engine_run(&x);
    t[k] = (struct sample){engine_end(&x), k};
    engine_free(&x);
  }
  if (!rc) {
    qsort(t, (size_t)samples, sizeof *t, by_time);
    *lo = t[0].t;
    *hi = t[samples - 1].t;
    proto->draws = 1;
    proto->rng = sample_seed(seed, t[(samples - 1) / 2].k);
  }
  free(t);
  return rc;
}

/* strata_simulate on machine c as it computes in the layout's precision (strata__machine_in). */
static int simulate_in(struct strata_machine *c, strata_model_t model, strata_layout_t l,
                       const struct strata_sim_options *o, struct strata_sim_result *out) {
  const int dp = strata_layout_dp(l), pp = strata_layout_pp(l), S = strata_layout_stages(l);
  const int m = strata_layout_microbatches(l), v = strata_layout_virtual_stages(l);
  const int ndev = strata_machine_device_count(c);
  TRY(strata_layout_check(l, model, ndev));
  if (o->batch < 1 || o->batch % ((int64_t)dp * m))
    return strata__error(STRATA_ERR_INVALID, "batch %lld is not a multiple of dp %d x %d micro-batches",
                         (long long)o->batch, dp, m);
  const int64_t rows = o->batch / ((int64_t)dp * m);
  /* pipeline messages in the layout's precision: a layer's out_bytes count float32 elements. (tp joins stay
  ** float32, as the trainer sums a bf16 region in a float32 buffer; the replicas' gradients are float32.) */
  const double elem = strata_layout_precision(l) == STRATA_BFLOAT16 ? 0.5 : 1.0;
  int *split = malloc(sizeof *split * (size_t)S);
  if (!split)
    return strata__error(STRATA_ERR_NOMEM, "simulator: out of host memory");
  int rc = STRATA_OK;
  if (strata_layout_split(l))
    memcpy(split, strata_layout_split(l), sizeof *split * (size_t)S);
  else
    rc = balanced_split(model, S, split);
  /* symmetric: two replicas stand for all, the collectives still span dp */
  const int R = o->symmetric && dp > 2 ? 2 : dp;
  /* the executor's own lists (strata_schedule_generate_hybrid_ranks for a tp degree per rank): a slice per
  ** device and its joins as TP_JOIN actions. Symmetric mode on one degree over groups of like devices runs one
  ** slice for all: the slices reach every join at one time, so the join ends its cost after either's arrival,
  ** as in the lists of all slices. */
  int *tps = malloc(sizeof *tps * (size_t)pp);
  if (!tps)
    rc = strata__error(STRATA_ERR_NOMEM, "simulator: out of host memory");
  int uniform = 1;
  for (int r = 0; tps && r < pp; r++) {
    tps[r] = strata_layout_tp(l, r);
    uniform &= tps[r] == tps[0];
  }
  /* (spatial slabs: each its own list, their joins TP_JOIN actions, as their work differs from slab to slab) */
  const int spatial = strata_layout_spatial(l) > 1;
  const int inline_joins =
      tps && uniform && o->symmetric && tps[0] > 1 && !spatial && strata__plan_groups_alike(c, l, R);
  if (inline_joins)
    tps[0] = 1;
  strata_schedule_t s = NULL;
  if (!rc && uniform)
    rc = strata_schedule_generate_hybrid(strata_layout_schedule(l), pp, m, v, R, tps[0], strata_layout_zero(l), &s);
  else if (!rc)
    rc = strata_schedule_generate_hybrid_ranks(strata_layout_schedule(l), pp, m, v, R, tps, strata_layout_zero(l),
                                               &s);
  free(tps);
  if (!rc && strata_layout_recompute(l)) { /* an RC before every backward, as the trainer's lists have */
    strata_schedule_t with;
    rc = strata_schedule_with_recompute(s, &with);
    strata_schedule_free(s);
    s = rc ? NULL : with;
  }
  const int T = s ? strata_schedule_tp(s) : 1;
  struct strata__plan_engine e;
  memset(&e, 0, sizeof e);
  int inited = 0;
  if (!rc && (rc = engine_init(&e, s, c)) == STRATA_OK)
    inited = 1;
  if (!rc) {
    e.dp = dp;
    e.zero2 = strata_layout_zero(l) >= 2 && dp > 1;
    e.zero3 = strata_layout_zero(l) >= 3 && dp > 1;
    e.tracing = o->trace != NULL;
    e.sc = calloc((size_t)e.S, sizeof *e.sc);
    if (!e.sc)
      rc = strata__error(STRATA_ERR_NOMEM, "simulator: out of host memory");
  }
  for (int g = 0; !rc && g < e.S; g++) {
    /* schedule stage g: chain g / S (replica, slice), virtual stage j on the schedule's rank of it */
    const int ch = g / S, rep = ch / T, slice = ch % T, j = g % S, rank = strata__plan_stage_rank(l, j);
    struct strata__plan_stage_cost *sc = &e.sc[g];
    sc->tp = strata__plan_group_of(l, rep, rank, &sc->devs);
    if (!strata_schedule_stage_held(s, g)) {
      sc->dev = sc->devs[slice % sc->tp]; /* no device holds it: the slice that stands for it does its work */
      continue;
    }
    const int t = sc->tp, a = strata__plan_stage_first(split, j);
    /* the device whose costs this stage's actions take: the slice's own, or the group's slowest */
    struct strata_device_cost w =
        inline_joins ? strata__plan_group_cost(c, sc->devs, t) : c->cost[sc->devs[slice] % c->k];
    sc->dev = sc->devs[inline_joins ? 0 : slice];
    sc->threads = c->cpu_cores > 0 ? c->cost[sc->dev % c->k].cpu_threads : 0;
    double params = 0, jf = 0, jb = 0, jr = 0;
    int nf = 0, nb = 0, nr = 0;
    const int recompute = strata_layout_recompute(l);
    /* a split backward's parts as the stage runs them: folded (model/stage.h strata__stage_folds) without
    ** recomputation, ZeRO-2/3 or seqpar */
    const int fold = recompute == STRATA_RECOMPUTE_NONE && !e.zero2 && !(strata_layout_sp(l) && t > 1);
    /* spatial: the step's gradient sums over the slabs, a share of each micro-batch's TJB (the executor joins them in
    ** the step's last B), and the seconds of the backward's exchanges its compute covers */
    double grad_join = 0, grad_bytes = 0, spatial_in = 1, hidden_f = 0, hidden_b = 0;
    if (spatial) { /* one stage of the whole model on its slab: its share of the work, its exchanges (sim-spatial.c) */
      struct strata__plan_spatial sp;
      if ((rc = strata__plan_spatial_stage(c, &w, model, a, a + split[j], t, slice, rows, sc->devs, &sp)))
        break;
      struct strata_layer_info last;
      strata_model_layer(model, a + split[j] - 1, &last);
      sc->out_bytes = (double)last.out_bytes * (double)rows * elem * sp.out_share; /* (this slab's rows) */
      spatial_in = sp.in_share;
      sc->f = sp.f, sc->b = sp.b, sc->bi = sp.b;
      jf = sp.jf, nf = sp.nf, jb = sp.jb, nb = sp.nb;
      params = sp.params;
      grad_join = sp.grad_exposed_s / (m > 0 ? m : 1); /* (the rest overlap the backward) */
      hidden_f = sp.hidden_f, hidden_b = sp.hidden_b;
      grad_bytes = sp.grad_bytes / (m > 0 ? m : 1);
    }
    for (int li = a; li < a + split[j] && !spatial; li++) {
      struct strata_layer_info info;
      strata_model_layer(model, li, &info);
      struct strata__plan_work f = strata__plan_layer_part(&w, model, t, li, rows, STRATA__PLAN_PART_FWD),
                               b = strata__plan_layer_part(&w, model, t, li, rows, STRATA__PLAN_PART_FULL);
      struct strata__plan_work bi = strata__plan_layer_part(&w, model, t, li, rows, fold ? STRATA__PLAN_PART_INPUT_FOLD
                                                                                    : STRATA__PLAN_PART_INPUT),
                               bw = strata__plan_layer_part(&w, model, t, li, rows, fold ? STRATA__PLAN_PART_WEIGHT_FOLD
                                                                                    : STRATA__PLAN_PART_WEIGHT);
      sc->f += f.s;
      sc->b += b.s;
      sc->bi += bi.s;
      sc->w += bw.s;
      jf += f.join_bytes, nf += f.joins;
      jb += b.join_bytes, nb += b.joins;
      /* recomputation: a block's forward again (full), or its attention core (selective) */
      if (recompute == STRATA_RECOMPUTE_FULL && strcmp(info.type, "block") == 0)
        sc->rc += f.s, jr += f.join_bytes, nr += f.joins;
      else if (recompute == STRATA_RECOMPUTE_SELECTIVE)
        sc->rc += strata__plan_layer_part(&w, model, t, li, rows, STRATA__PLAN_PART_CORE).s;
      params += (double)info.params;
      if (li == a + split[j] - 1)
        sc->out_bytes = (double)info.out_bytes * (double)rows * elem;
    }
    /* each action ends waiting for its work: one round trip of the device's queue; one that waits on another
    ** device's message (a forward after the first stage, a backward before the last) pays what the executor's
    ** threads add around such a hand-off besides */
    const double sync = w.sync_us * 1e-6, hand = w.action_us * 1e-6;
    sc->f += sync + (j > 0 ? hand : 0), sc->w += sync;
    sc->b += sync + (j < S - 1 ? hand : 0), sc->bi += sync + (j < S - 1 ? hand : 0);
    double tjf = strata__plan_joins_s(c, sc->devs, jf, nf, t) - hidden_f; /* (spatial: less what compute covers) */
    double tjb = strata__plan_joins_s(c, sc->devs, jb, nb, t) - hidden_b;
    tjf = tjf > 0 ? tjf : 0, tjb = tjb > 0 ? tjb : 0;
    const double tjr = strata__plan_joins_s(c, sc->devs, jr, nr, t);
    if (inline_joins) {
      sc->rc += tjr, sc->rc_comm = tjr;
      sc->f += tjf, sc->f_comm = tjf;
      sc->b += tjb, sc->b_comm = tjb;
      sc->bi += tjb, sc->bi_comm = tjb;
    } else {
      sc->tjf = tjf, sc->tjf_bytes = jf;
      /* the recomputation's joins are settled with the backward's, at its TP_JOIN_BACKWARD */
      sc->tjb = tjb + tjr + grad_join, sc->tjb_bytes = jb + jr + grad_bytes;
      sc->tjw = tjr, sc->tjw_bytes = jr; /* (a split backward's W recomputes again: its joins, after it) */
    }
    if (a > 0) {
      struct strata_layer_info prev;
      strata_model_layer(model, a - 1, &prev);
      sc->in_bytes = (double)prev.out_bytes * (double)rows * elem * spatial_in; /* the gradient of this stage's input
                                                                                 ** (a slab's: its rows) */
    }
    int zero = strata_layout_zero(l) && dp > 1;
    /* the update and the norm's sums, each waited for */
    const int cut_t = spatial ? 1 : t; /* (spatial slabs hold the whole weights) */
    sc->opt = strata__plan_op_s(&w, STRATA_PLAN_OP_ADAMW, params / cut_t / (zero ? dp : 1)) +
              8 * w.launch_us * 1e-6 + 2 * w.sync_us * 1e-6;
    sc->grad_bytes = 4.0 * params / cut_t;
    sc->layers = split[j];
    /* the memory model's bytes of the stage (as the trainer of this layout plans them): what it holds from the start
    ** (its output buffers too), and what each micro-batch in flight adds — its activations, its boundary gradients */
    struct strata__stage_bytes bytes;
    struct strata__cut cut = strata__plan_cut(l, t);
    cut.sp.rank = spatial ? slice : 0; /* (this slab's rows) */
    rc = strata__stage_plan(model, a, a + split[j], rows, strata__plan_split_backward(l), &cut, &bytes);
    if (rc)
      break;
    int prev_k = 1, outs = 0;
    if (j > 0)
      strata_schedule_peak_inflight(s, g - 1, &prev_k);
    (void)(j < S - 1 && strata_schedule_peak_handoff(s, g, &outs)); /* (its output buffers; 0 on the last stage) */
    /* (ZB-V's turn, stages pp - 1 and pp, shares a rank: no transfer buffers between them) */
    struct strata__stage_place one = {.inflight = 1, .first = j == 0, .last = j == S - 1,
                                      .prev_remote = j > 0 && strata__plan_stage_rank(l, j - 1) != rank,
                                      .prev_inflight = prev_k, .pending = 0, .outs = outs,
                                      .next_remote = j < S - 1 && strata__plan_stage_rank(l, j + 1) != rank},
                               two = one;
    two.inflight = 2;
    const uint64_t need1 = strata__stage_need(&bytes, &one, NULL, NULL);
    const uint64_t per_mb = strata__stage_need(&bytes, &two, NULL, NULL) - need1;
    sc->act_bytes = (double)per_mb;
    /* (a split backward's dsave regions, the device's: held from the start, counted on its first stage) */
    sc->static_bytes = (double)(need1 - per_mb + strata__plan_dsave_bytes(s, g, model, l, split, rows, &cut));
    sc->capacity = inline_joins ? w.memory : c->cost[sc->dev % c->k].memory;
  }
  /* with samples: that many steps with their draws, then the median one again for the figures and the trace */
  double lo = 0, hi = 0;
  int samples = 1;
  if (!rc && o->samples > 1 && has_spread(c, e.sc, e.S)) {
    samples = o->samples;
    rc = sample_steps(&e, samples, o->seed, &lo, &hi);
  }
  if (!rc) {
    start_memory(&e);
    rc = engine_run(&e);
  }
  if (!rc)
    rc = engine_result(&e, out);
  if (!rc && samples > 1) {
    out->step_lo_s = lo;
    out->step_hi_s = hi;
    out->samples = samples;
  }
  if (!rc) {
    const struct strata_model_config *cfg = strata_model_config(model);
    out->samples_per_s = out->step_s > 0 ? (double)o->batch / out->step_s : 0;
    out->tokens_per_s = out->samples_per_s * (cfg->kind == STRATA_MODEL_GPT || cfg->kind == STRATA_MODEL_LLAMA
                                                  ? (double)cfg->context
                                                  : 1.0);
    out->flops_per_device = out->samples_per_s * strata_model_flops(model) / strata_layout_device_count(l);
    for (int d = 0; d < e.P; d++) {
      uint64_t cap = UINT64_MAX;
      for (int g = 0; g < e.S; g++)
        if (strata_schedule_stage_device(s, g) == d && strata_schedule_stage_held(s, g) && e.sc[g].capacity < cap)
          cap = e.sc[g].capacity;
      out->memory[d] = (uint64_t)e.mem_peak[d];
      if (out->memory[d] > out->peak_bytes)
        out->peak_bytes = out->memory[d];
      if ((double)out->memory[d] > (double)cap * STRATA_PLAN_MEMORY_USABLE)
        out->fits = 0;
    }
    if (o->trace)
      rc = strata__plan_trace_write(&e, l, o->trace);
    if (rc)
      strata_sim_result_destroy(out);
  }
  if (inited) {
    free(e.sc);
    engine_free(&e);
  }
  strata_schedule_free(s);
  free(split);
  return rc;
}

STRATA_API int strata_simulate(strata_machine_t c, strata_model_t model, strata_layout_t l,
                               const struct strata_sim_options *o, struct strata_sim_result *out) {
  if (!c || !model || !l || !o || !out)
    return strata__error(STRATA_ERR_INVALID, "strata_simulate: NULL argument");
  memset(out, 0, sizeof *out);
  const int precision = strata_layout_precision(l);
  if (precision == STRATA_BFLOAT16 && strata_model_config(model)->kind != STRATA_MODEL_GPT &&
      strata_model_config(model)->kind != STRATA_MODEL_LLAMA)
    return strata__error(STRATA_ERR_UNSUPPORTED, "simulator: bf16 is for GPT models and llamas (as the trainer "
                         "trains them), not '%s'", strata_model_config(model)->name);
  struct strata_machine *v;
  TRY(strata__machine_in(c, precision, &v));
  int rc = simulate_in(v, model, l, o, out);
  strata__machine_in_free(v);
  return rc;
}
