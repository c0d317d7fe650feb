/* SPDX-License-Identifier: MIT */
/* ranks.c — one trainer over several processes: this rank's pieces of the layout, the data-parallel collectives that
** cross ranks (strata/cluster.h's hierarchical ones), and the small exchanges that give every rank the same step. */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "comm/mpi.h"
#include "train/ranks.h"
#include "device/registry.h"
#include "core/core.h"

/* How often a member waiting for this rank's other members looks whether the step failed. */
#define MEET_POLL_NS 50000000L

/*
** A data-parallel collective posted to a group's thread (a round): every
** local member's arguments, filled as each posts it, and its outcome. Lives
** until the step ends (strata__ranks_step_end); members hold it as a ticket.
*/
struct round {
  struct strata__meet *m;
  int kind;
  size_t count;
  int arrived;                       /* members that posted it */
  int done;                          /* the call has returned (or was refused) */
  int rc;
  char msg[1024];
  double t0, t1;                     /* when its data moved: from ready on every member to the call's return */
  strata_queue_t *q;                 /* [n]: each member's collective queue (its device's second queue) */
  strata_event_t *ev;                /* [n]: the end of the member's gradients on its stage's queue, at posting */
  strata_mem_t *send, *recv;         /* [n] */
};

/*
** One group's meeting on this rank: the cluster's collectives take every
** local member's buffers in one call, while each member is a device's
** worker thread reaching its GRAD_REDUCE (or bucket, GRAD_SCATTER,
** PARAM_GATHER; a tensor-parallel group's TP_JOIN) in its own time. A
** tensor-parallel join meets: members arrive, the last one calls for all,
** the others wait for that round to end and share its status. A
** data-parallel collective is posted instead: the members go on, and the
** group's thread makes the rounds' calls in posting order (the same on
** every rank: each member posts the same collectives in the same order),
** once every member posted it and its data is complete on the devices.
** Different groups' threads call at once, each on its own group.
*/
struct strata__meet {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int ready;                         /* lock and cond initialised */
  int n;                             /* this rank's members */
  int *member;                       /* [n]: their group ranks (replicas, or slices), ascending */
  strata_queue_t *q;                 /* [n] the round's arguments */
  strata_mem_t *send, *recv;
  int arrived;
  unsigned long round;
  int rc;                            /* the last round's status and message */
  char msg[1024];
  /* posted rounds (a data-parallel group): its thread, this step's rounds, and how many each member posted */
  strata_trainer_t tr;
  strata_cluster_comm_t cc;
  pthread_t thread;
  int started, stop;
  struct round **rounds;
  int nrounds, cap, next;
  int *posted;                       /* [n] */
};

/* The rank holding stage s (of any chain). */
static int owner_of_stage(const struct strata_trainer *tr, int s) { return tr->ranks->owner[tr->stage_rank[s]]; }

/* Message tags (strata_cluster_send's 0 .. 32767): one per (receiving stage, direction, micro-batch). */
#define CLUSTER_TAG_LIMIT 32768
static int tag_of(const struct strata_trainer *tr, int to, int dir, int mb) { return (2 * to + dir) * tr->m + mb; }

/*
** The (receiver, sender) pairs of pipeline ranks, this rank's and another's,
** between which the schedule sends: each gets a receiver thread during a
** step, taking the sender's messages in the sender's order.
*/
static int make_pairs(strata_trainer_t tr) {
  struct strata__ranks *R = tr->ranks;
  const int nd = tr->ndev;
  char *has = calloc((size_t)nd * (size_t)nd + 1, 1);
  int *peers = calloc((size_t)tr->tp + 1, sizeof *peers);
  if (!has || !peers) {
    free(has);
    free(peers);
    return strata__error(STRATA_ERR_NOMEM, "out of host memory creating a trainer");
  }
  for (int e = 0; e < nd; e++) {
    if (strata__rank_mine(tr, e))
      continue;
    int n = 0;
    const struct strata_action *list = strata_schedule_actions(tr->sched, e, &n);
    for (int i = 0; i < n; i++) {
      if (list[i].kind != STRATA_ACTION_SEND_ACT && list[i].kind != STRATA_ACTION_SEND_GRAD)
        continue;
      const int np = strata__stage_consumers(tr, list[i].stage, list[i].kind == STRATA_ACTION_SEND_GRAD, peers);
      for (int q = 0; q < np; q++) {
        const int d = tr->stage_rank[peers[q]];
        if (strata__rank_mine(tr, d) && !has[(size_t)d * nd + e]) {
          has[(size_t)d * nd + e] = 1;
          R->npairs++;
        }
      }
    }
  }
  R->pairs = calloc(2 * (size_t)R->npairs + 1, sizeof *R->pairs);
  R->recv_q = calloc((size_t)R->npairs + 1, sizeof *R->recv_q);
  int rc = R->pairs && R->recv_q ? STRATA_OK : strata__error(STRATA_ERR_NOMEM, "out of host memory creating a trainer");
  for (size_t k = 0, i = 0; !rc && k < (size_t)nd * nd; k++)
    if (has[k]) {
      R->pairs[2 * i] = (int)(k / (size_t)nd);
      R->pairs[2 * i + 1] = (int)(k % (size_t)nd);
      i++;
    }
  free(has);
  free(peers);
  return rc;
}

int strata__ranks_new(strata_trainer_t tr, strata_cluster_t c) {
  tr->home = 0;
  if (!c)
    return STRATA_OK;
  struct strata_cluster_info ci;
  TRY(strata_cluster_info(c, &ci));
  if (ci.size == 1) { /* one process: global devices are local ones */
    for (int r = 0; r < tr->ndev; r++)
      if (!strata__device_get(tr->dev[r]))
        return strata__error(STRATA_ERR_NOT_FOUND, "layout: no device %d", tr->dev[r]);
    return STRATA_OK;
  }
  struct strata__ranks *R = calloc(1, sizeof *R);
  if (!R)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory creating a trainer");
  tr->ranks = R; /* freed with the trainer, whatever fails below */
  R->cluster = c;
  R->rank = ci.rank;
  R->size = ci.size;
  R->global = calloc((size_t)tr->ndev, sizeof *R->global);
  R->owner = calloc((size_t)tr->ndev, sizeof *R->owner);
  int *local = calloc((size_t)tr->ndev, sizeof *local);
  if (!R->global || !R->owner || !local) {
    free(local);
    return strata__error(STRATA_ERR_NOMEM, "out of host memory creating a trainer");
  }
  for (int r = 0; r < tr->ndev; r++) {
    struct strata_cluster_device d;
    if (strata_cluster_device(c, tr->dev[r], &d)) {
      free(local);
      return strata__error(STRATA_ERR_NOT_FOUND, "layout: device %d is not one of the cluster's %d devices",
                           tr->dev[r], ci.device_count);
    }
    R->global[r] = tr->dev[r];
    R->owner[r] = d.rank;
    local[r] = d.local;
  }
  /* a tensor-parallel group (the slices of one replica's stage) across ranks: its joins go through the cluster, and
  ** each rank holds some slices of the stage, so the others are known by their layouts, as for a pipeline across */
  for (int c0 = 0; c0 < tr->chains; c0 += tr->tp)
    for (int j = 0; j < tr->nstages; j++)
      for (int t = 1; t < tr->tps[j]; t++)
        if (R->owner[tr->stage_rank[c0 * tr->nstages + j]] != R->owner[tr->stage_rank[(c0 + t) * tr->nstages + j]])
          R->spans = R->tp_spans = 1;
  /* the home replica: the first with a stage here (its pipeline may cross ranks: its messages go through the cluster) */
  tr->home = -1;
  for (int c0 = 0; c0 < tr->chains; c0++)
    for (int j = 0; j < tr->nstages; j++) {
      /* (by stage: with a tp degree per rank there are fewer pipeline ranks than chains x pp) */
      const int o = R->owner[tr->stage_rank[c0 * tr->nstages + j]];
      if (o != R->owner[tr->stage_rank[c0 * tr->nstages]])
        R->spans = 1;
      if (o == R->rank && tr->home < 0)
        tr->home = c0 / tr->tp;
    }
  if (tr->home < 0) {
    free(local);
    return strata__error(STRATA_ERR_UNSUPPORTED, "layout: rank %d holds none of its devices; every rank must hold a "
                         "stage", R->rank);
  }
  if (R->spans && (int64_t)2 * strata__stages_all(tr) * tr->m > CLUSTER_TAG_LIMIT) {
    free(local);
    return strata__error(STRATA_ERR_UNSUPPORTED, "layout: %d stages x %d micro-batches need more message tags across "
                         "ranks than MPI's %d", strata__stages_all(tr), tr->m, CLUSTER_TAG_LIMIT);
  }
  for (int r = 0; r < tr->ndev; r++)
    tr->dev[r] = R->owner[r] == R->rank ? local[r] : -1;
  free(local);
  for (int s = 0; s < strata__stages_all(tr); s++)
    R->local_stages += strata__stage_mine(tr, s);
  return R->spans ? make_pairs(tr) : STRATA_OK;
}

static void rounds_end(struct strata__meet *m);

static void group_free(strata_cluster_comm_t *cc, struct strata__meet *m) {
  rounds_end(m);
  strata_cluster_comm_free(*cc);
  *cc = NULL;
  if (m->ready) {
    pthread_mutex_destroy(&m->lock);
    pthread_cond_destroy(&m->cond);
  }
  free(m->member);
  free(m->q);
  free(m->send);
  free(m->recv);
  free(m->posted);
  memset(m, 0, sizeof *m);
}

/* A group across ranks over `devices` (global; collective over the world) and this rank's meeting of its members. */
static int group_new(struct strata__ranks *R, const int *devices, int count, strata_cluster_comm_t *cc,
                     struct strata__meet *m) {
  TRY(strata_cluster_comm_new(R->cluster, devices, count, NULL, cc));
  TRY(strata_cluster_comm_local(*cc, &m->n, NULL));
  size_t n = (size_t)(m->n ? m->n : 1);
  m->member = calloc(n, sizeof *m->member);
  m->q = calloc(n, sizeof *m->q);
  m->send = calloc(n, sizeof *m->send);
  m->recv = calloc(n, sizeof *m->recv);
  m->posted = calloc(n, sizeof *m->posted);
  if (!m->member || !m->q || !m->send || !m->recv || !m->posted)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory creating a trainer");
  TRY(strata_cluster_comm_local(*cc, &m->n, m->member));
  pthread_mutex_init(&m->lock, NULL);
  pthread_cond_init(&m->cond, NULL);
  m->ready = 1;
  return STRATA_OK;
}

void strata__ranks_free(strata_trainer_t tr) {
  struct strata__ranks *R = tr->ranks;
  if (!R)
    return;
  for (int k = 0; R->comm && k < tr->tp * tr->nstages; k++)
    group_free(&R->comm[k], &R->meet[k]);
  free(R->comm);
  free(R->meet);
  for (int k = 0; R->tp_comm && k < tr->replicas * tr->nstages; k++)
    group_free(&R->tp_comm[k], &R->tp_meet[k]);
  free(R->tp_comm);
  free(R->tp_meet);
  for (int k = 0; R->shell && k < tr->tp * tr->nstages; k++)
    strata__stage_free(R->shell[k]);
  free(R->shell);
  for (int s = 0; R->coll_q && s < strata__stages_all(tr); s++)
    strata_queue_free(R->coll_q[s]);
  free(R->coll_q);
  for (int i = 0; R->recv_q && i < R->npairs; i++)
    strata_queue_free(R->recv_q[i]);
  free(R->recv_q);
  free(R->pairs);
  free(R->global);
  free(R->owner);
  free(R);
  tr->ranks = NULL;
}

/* The tables of `groups` groups and their meetings (kept from an earlier call), and room for `width` devices. */
static int groups_alloc(strata_cluster_comm_t **comm, struct strata__meet **meet, int groups, int width, int **devs) {
  if (!*comm && !(*comm = calloc((size_t)groups, sizeof **comm)))
    return strata__error(STRATA_ERR_NOMEM, "out of host memory creating a trainer");
  if (!*meet && !(*meet = calloc((size_t)groups, sizeof **meet)))
    return strata__error(STRATA_ERR_NOMEM, "out of host memory creating a trainer");
  if (!(*devs = calloc((size_t)width, sizeof **devs)))
    return strata__error(STRATA_ERR_NOMEM, "out of host memory creating a trainer");
  return STRATA_OK;
}

int strata__ranks_comms(strata_trainer_t tr) {
  struct strata__ranks *R = tr->ranks;
  const int S = tr->nstages, groups = tr->tp * S;
  int *devs = NULL;
  TRY(groups_alloc(&R->comm, &R->meet, groups, tr->replicas, &devs));
  int rc = STRATA_OK;
  /* in the same order on every rank: making a group is collective over the world */
  for (int k = 0; k < groups && !rc; k++) {
    group_free(&R->comm[k], &R->meet[k]);
    if (k / S >= tr->tps[k % S])
      continue; /* a slice that stage does not have (the same on every rank) */
    for (int r = 0; r < tr->replicas; r++)
      devs[r] = R->global[tr->stage_rank[(r * tr->tp + k / S) * S + k % S]];
    rc = group_new(R, devs, tr->replicas, &R->comm[k], &R->meet[k]);
    R->meet[k].tr = tr;
    R->meet[k].cc = R->comm[k];
  }
  free(devs);
  return rc;
}

int strata__ranks_tp_comms(strata_trainer_t tr) {
  struct strata__ranks *R = tr->ranks;
  const int S = tr->nstages, groups = tr->replicas * S;
  if (!R || !R->tp_spans)
    return STRATA_OK;
  int *devs = NULL;
  TRY(groups_alloc(&R->tp_comm, &R->tp_meet, groups, tr->tp, &devs));
  int rc = STRATA_OK;
  for (int k = 0; k < groups && !rc; k++) {
    group_free(&R->tp_comm[k], &R->tp_meet[k]);
    const int deg = tr->tps[k % S], c0 = k / S * tr->tp;
    int across = 0;
    for (int t = 0; t < deg; t++) {
      devs[t] = R->global[tr->stage_rank[(c0 + t) * S + k % S]];
      across |= R->owner[tr->stage_rank[(c0 + t) * S + k % S]] != R->owner[tr->stage_rank[c0 * S + k % S]];
    }
    if (across) /* (the same on every rank; a group inside one rank joins through its local communicator) */
      rc = group_new(R, devs, deg, &R->tp_comm[k], &R->tp_meet[k]);
  }
  free(devs);
  return rc;
}

int strata__ranks_tp_spans(const struct strata_trainer *tr, int s) {
  const struct strata__ranks *R = tr->ranks;
  return R && R->tp_comm && R->tp_comm[strata__stage_replica(tr, s) * tr->nstages + s % tr->nstages] != NULL;
}

/* The cluster's call for one round, with every local member's queue and buffers. */
static int meet_call(strata_cluster_comm_t cc, const strata_queue_t *q, const strata_mem_t *send,
                     const strata_mem_t *recv, int kind, int op, size_t count) {
  switch (kind) {
  case STRATA__COLL_ALLREDUCE:
    return strata_cluster_allreduce(cc, q, send, recv, count, STRATA_FLOAT32, op);
  case STRATA__COLL_REDUCESCATTER:
    return strata_cluster_reducescatter(cc, q, send, recv, count, STRATA_FLOAT32, op);
  case STRATA__COLL_ALLGATHER:
    return strata_cluster_allgather(cc, q, send, recv, count, STRATA_FLOAT32);
  default:
    return strata__error(STRATA_ERR_INTERNAL, "collective %d across ranks", kind);
  }
}

/* Wait on the meeting's condition (its lock held) for a change, or MEET_POLL_NS at most. */
static void meet_wait(struct strata__meet *m) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_nsec += MEET_POLL_NS;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  pthread_cond_timedwait(&m->cond, &m->lock, &until);
}

/* The step failed elsewhere on this rank: STRATA_ERR_STATE, else 0 (the trainer's abort flag, not held). */
static int step_failed(strata_trainer_t tr) {
  TRY(strata__trainer_post_begin(tr));
  strata__trainer_post_end(tr);
  return STRATA_OK;
}

/* Group rank `member`'s part of a round of the group (cc, m): wait for this rank's other members, or be the last
** and call for them all. */
static int meet(strata_trainer_t tr, strata_cluster_comm_t cc, struct strata__meet *m, int member, int kind, int op,
                strata_queue_t q, strata_mem_t send, strata_mem_t recv, size_t count) {
  int i = 0;
  while (i < m->n && m->member[i] != member)
    i++;
  if (i == m->n)
    return strata__error(STRATA_ERR_INTERNAL, "group rank %d is not a member of its group here", member);
  TRY(step_failed(tr));
  pthread_mutex_lock(&m->lock);
  m->q[i] = q;
  m->send[i] = send;
  m->recv[i] = recv;
  const unsigned long round = m->round;
  if (++m->arrived < m->n) {
    while (m->round == round) {
      meet_wait(m);
      if (m->round == round && step_failed(tr)) {
        m->arrived--;
        pthread_mutex_unlock(&m->lock);
        return STRATA_ERR_STATE;
      }
    }
    int rc = m->rc;
    char msg[sizeof m->msg];
    memcpy(msg, m->msg, sizeof msg);
    pthread_mutex_unlock(&m->lock);
    return rc ? strata__error(rc, "%s", msg) : STRATA_OK;
  }
  pthread_mutex_unlock(&m->lock);
  /* the last member: the others wait in the loop above, so the arrays hold still */
  int rc = meet_call(cc, m->q, m->send, m->recv, kind, op, count);
  pthread_mutex_lock(&m->lock);
  m->rc = rc;
  strata__strlcpy(m->msg, rc ? strata_last_error() : "", sizeof m->msg);
  m->arrived = 0;
  m->round++;
  pthread_cond_broadcast(&m->cond);
  pthread_mutex_unlock(&m->lock);
  return rc;
}

/* ---- the data-parallel groups' threads ---- */

static void round_free(struct round *r, int n) {
  if (!r)
    return;
  for (int i = 0; r->ev && i < n; i++)
    strata_event_free(r->ev[i]);
  free(r->q);
  free(r->ev);
  free(r->send);
  free(r->recv);
  free(r);
}

/* The round is over: its status and times for its members (caller holds m->lock). */
static void round_done(struct strata__meet *m, struct round *r, int rc, double t0, double t1) {
  r->rc = rc;
  strata__strlcpy(r->msg, rc ? strata_last_error() : "", sizeof r->msg);
  r->t0 = t0;
  r->t1 = t1;
  r->done = 1;
  for (int i = 0; i < m->n; i++) { /* (the thread waited for them: their queues are past them) */
    strata_event_free(r->ev[i]);
    r->ev[i] = NULL;
  }
  pthread_cond_broadcast(&m->cond);
}

/*
** A group's thread: each round in posting order, once every local member
** posted it. Its collective queues wait for the events that closed the
** members' data on their stages' queues, then the cluster's call runs on
** them, so the stages' queues go on computing meanwhile. A step that failed
** on this rank refuses the rounds not begun; stop (the step's end) leaves
** the rest.
*/
static void *group_main(void *arg) {
  struct strata__meet *m = arg;
  pthread_mutex_lock(&m->lock);
  for (;;) {
    while (!m->stop && !(m->next < m->nrounds && m->rounds[m->next]->arrived == m->n))
      pthread_cond_wait(&m->cond, &m->lock);
    if (m->stop)
      break;
    struct round *r = m->rounds[m->next++];
    pthread_mutex_unlock(&m->lock);
    int rc = step_failed(m->tr);
    for (int i = 0; i < m->n && !rc; i++)
      rc = strata_event_wait(r->q[i], r->ev[i]);
    for (int i = 0; i < m->n && !rc; i++)
      rc = strata_queue_finish(r->q[i]); /* the members' data is complete */
    const double t0 = strata__now();
    if (!rc)
      rc = meet_call(m->cc, r->q, r->send, r->recv, r->kind, STRATA_SUM, r->count);
    const double t1 = strata__now();
    pthread_mutex_lock(&m->lock);
    round_done(m, r, rc, t0, t1);
  }
  pthread_mutex_unlock(&m->lock);
  return NULL;
}

/* Stop the group's thread (after its round in progress) and free the step's rounds. */
static void rounds_end(struct strata__meet *m) {
  if (!m->ready)
    return;
  pthread_mutex_lock(&m->lock);
  m->stop = 1;
  pthread_cond_broadcast(&m->cond);
  pthread_mutex_unlock(&m->lock);
  if (m->started)
    pthread_join(m->thread, NULL);
  for (int k = 0; k < m->nrounds; k++)
    round_free(m->rounds[k], m->n);
  free(m->rounds);
  m->rounds = NULL;
  m->nrounds = m->cap = m->next = 0;
  m->started = m->stop = 0;
  for (int i = 0; m->posted && i < m->n; i++)
    m->posted[i] = 0;
}

void strata__ranks_step_end(strata_trainer_t tr) {
  struct strata__ranks *R = tr->ranks;
  for (int k = 0; R && R->meet && k < tr->tp * tr->nstages; k++)
    rounds_end(&R->meet[k]);
}

/* Member i's next round of group m (a new one when it is the first to post it); caller holds m->lock. */
static int round_take(struct strata__meet *m, int i, int kind, size_t count, struct round **out) {
  const int at = m->posted[i];
  if (at == m->nrounds) {
    if (m->nrounds == m->cap) {
      int cap = m->cap ? 2 * m->cap : 16;
      struct round **p = realloc(m->rounds, (size_t)cap * sizeof *p);
      if (!p)
        return strata__error(STRATA_ERR_NOMEM, "out of host memory posting a collective");
      m->rounds = p;
      m->cap = cap;
    }
    struct round *r = calloc(1, sizeof *r);
    const size_t n = (size_t)m->n;
    if (r) {
      r->q = calloc(n, sizeof *r->q);
      r->ev = calloc(n, sizeof *r->ev);
      r->send = calloc(n, sizeof *r->send);
      r->recv = calloc(n, sizeof *r->recv);
    }
    if (!r || !r->q || !r->ev || !r->send || !r->recv) {
      round_free(r, m->n);
      return strata__error(STRATA_ERR_NOMEM, "out of host memory posting a collective");
    }
    r->m = m;
    r->kind = kind;
    r->count = count;
    m->rounds[m->nrounds++] = r;
  }
  struct round *r = m->rounds[at];
  if (r->kind != kind || r->count != count)
    return strata__error(STRATA_ERR_INTERNAL, "collective #%d across ranks: members posted different ones (%d of "
                         "%zu, %d of %zu)", at, r->kind, r->count, kind, count);
  m->posted[i]++;
  *out = r;
  return STRATA_OK;
}

int strata__ranks_post(strata_trainer_t tr, int kind, int s, strata_queue_t q, strata_mem_t send, strata_mem_t recv,
                       size_t count, void **done) {
  struct strata__ranks *R = tr->ranks;
  *done = NULL;
  if (!R || tr->replicas < 2)
    return 1;
  const int k = strata__stage_slice(tr, s) * tr->nstages + s % tr->nstages;
  struct strata__meet *m = &R->meet[k];
  const int member = strata__stage_replica(tr, s);
  int i = 0;
  while (i < m->n && m->member[i] != member)
    i++;
  if (i == m->n)
    return strata__error(STRATA_ERR_INTERNAL, "group rank %d is not a member of its group here", member);
  TRY(step_failed(tr));
  if (!R->coll_q && !(R->coll_q = calloc((size_t)strata__stages_all(tr), sizeof *R->coll_q)))
    return strata__error(STRATA_ERR_NOMEM, "out of host memory posting a collective");
  /* (each stage's queue is made by its own device's worker, the only one posting for it) */
  if (!R->coll_q[s])
    TRY(strata_queue_new(strata_queue_device(q), &R->coll_q[s]));
  strata_event_t ev = NULL;
  TRY(strata_event_record(q, &ev));
  pthread_mutex_lock(&m->lock);
  int rc = STRATA_OK;
  if (!m->started) {
    m->stop = 0;
    if (pthread_create(&m->thread, NULL, group_main, m) != 0)
      rc = strata__error(STRATA_ERR_BACKEND, "cannot start a collective thread");
    m->started = !rc;
  }
  struct round *r = NULL;
  if (!rc)
    rc = round_take(m, i, kind, count, &r);
  if (rc) {
    pthread_mutex_unlock(&m->lock);
    strata_event_free(ev);
    return rc;
  }
  r->q[i] = R->coll_q[s];
  r->ev[i] = ev;
  r->send[i] = send;
  r->recv[i] = recv;
  if (++r->arrived == m->n)
    pthread_cond_broadcast(&m->cond);
  pthread_mutex_unlock(&m->lock);
  *done = r;
  return STRATA_OK;
}

int strata__ranks_settle(strata_trainer_t tr, void *done, double *t0, double *t1) {
  struct round *r = done;
  struct strata__meet *m = r->m;
  pthread_mutex_lock(&m->lock);
  while (!r->done) {
    meet_wait(m);
    /* the step failed on this rank: its thread refuses the rounds not begun, and one begun is bounded by the
    ** cluster's timeout (the step's end waits for it) */
    if (!r->done && step_failed(tr)) {
      pthread_mutex_unlock(&m->lock);
      return STRATA_ERR_STATE;
    }
  }
  const int rc = r->rc;
  char msg[sizeof r->msg];
  memcpy(msg, r->msg, sizeof msg);
  *t0 = r->t0;
  *t1 = r->t1;
  pthread_mutex_unlock(&m->lock);
  return rc ? strata__error(rc, "%s", msg) : STRATA_OK;
}

int strata__ranks_join(strata_trainer_t tr, int s, strata_queue_t q, strata_mem_t x, size_t count, int op) {
  struct strata__ranks *R = tr->ranks;
  const int k = strata__stage_replica(tr, s) * tr->nstages + s % tr->nstages;
  return meet(tr, R->tp_comm[k], &R->tp_meet[k], strata__stage_slice(tr, s), STRATA__COLL_ALLREDUCE, op, q, x, x,
              count);
}

/*
** Every rank's `n` items of `size` bytes at `mine` into a table of size x
** n; item i of the result comes from rank pick(i). One allocation, freed here.
*/
static int exchange(strata_trainer_t tr, void *mine, size_t n, size_t size, int (*pick)(strata_trainer_t, size_t)) {
  struct strata__ranks *R = tr->ranks;
  char *all = malloc((size_t)R->size * n * size + 1);
  if (!all)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory exchanging between ranks");
  int rc = strata__cluster_allgather(R->cluster, mine, n * size, all);
  for (size_t i = 0; i < n && !rc; i++) {
    int from = pick(tr, i);
    if (from != R->rank)
      memcpy((char *)mine + i * size, all + ((size_t)from * n + i) * size, size);
  }
  free(all);
  return rc;
}

static int split_owner(strata_trainer_t tr, size_t i) {
  (void)i;
  return tr->ranks->owner[0];
}

int strata__ranks_split(strata_trainer_t tr, int *split, int nstages) {
  if (!tr->ranks)
    return STRATA_OK;
  return exchange(tr, split, (size_t)nstages, sizeof *split, split_owner);
}

/* Micro-batch i is replica i / m's: its last stage's rank read its losses. */
static int loss_owner(strata_trainer_t tr, size_t i) {
  int c = (int)i / tr->m * tr->tp;
  return tr->ranks->owner[tr->stage_rank[(c + 1) * tr->nstages - 1]];
}

int strata__ranks_losses(strata_trainer_t tr) {
  if (!tr->ranks)
    return STRATA_OK;
  return exchange(tr, tr->mb_loss, (size_t)tr->mtot, sizeof *tr->mb_loss, loss_owner);
}

/* Row i / ntensors of tr->sumsq (a chain with ZeRO, else a slice of replica 0) at tensor i % ntensors: the rank
** holding that tensor's stage of that chain. */
static int sumsq_owner(strata_trainer_t tr, size_t i) {
  size_t t = i % tr->ntensors, base = 0;
  int j = 0;
  while (j < tr->nstages - 1 && t >= base + (size_t)strata__home_stage(tr, 0, j)->ntensors)
    base += (size_t)strata__home_stage(tr, 0, j++)->ntensors;
  return owner_of_stage(tr, (int)(i / tr->ntensors) * tr->nstages + j);
}

int strata__ranks_report(strata_trainer_t tr) {
  struct strata__ranks *R = tr->ranks;
  if (!R || !tr->sched)
    return STRATA_OK;
  const size_t n = (size_t)tr->ndev, size = sizeof *tr->rep_dev;
  char *all = malloc((size_t)R->size * n * size + 1);
  if (!all)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory exchanging between ranks");
  int rc = strata__cluster_allgather(R->cluster, tr->rep_dev, n * size, all);
  double busy = 0;
  for (size_t r = 0; r < n && !rc; r++) {
    if (R->owner[r] != R->rank)
      memcpy(&tr->rep_dev[r], all + ((size_t)R->owner[r] * n + r) * size, size);
    busy += tr->rep_dev[r].busy_s;
  }
  free(all);
  if (!rc && tr->report.wall_s > 0)
    tr->report.bubble = 1.0 - busy / ((double)n * tr->report.wall_s);
  return rc;
}

int strata__ranks_sumsq(strata_trainer_t tr) {
  /* without ZeRO each replica has the same reduced gradients: with every replica's stages on one rank the sums agree
  ** already; with a pipeline across ranks each stage's come from the rank that holds replica 0's */
  if (!tr->ranks || (!tr->zero && !tr->ranks->spans))
    return STRATA_OK;
  return exchange(tr, tr->sumsq, (size_t)(tr->zero ? tr->chains : tr->tp) * tr->ntensors, sizeof *tr->sumsq, sumsq_owner);
}

int strata__ranks_shards(strata_trainer_t tr, int k, int j, float *local) {
  struct strata__ranks *R = tr->ranks;
  if (!R || !tr->zero)
    return STRATA_OK;
  const struct strata__stage *st = strata__home_stage(tr, k, j);
  const size_t n = st->nparams;
  float *all = malloc((size_t)R->size * n * sizeof *all + 1);
  if (!all)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory gathering optimizer shards");
  int rc = strata__cluster_allgather(R->cluster, local, n * sizeof *local, all);
  for (int r = 0; r < tr->replicas && !rc; r++) {
    int from = owner_of_stage(tr, (r * tr->tp + k) * tr->nstages + j);
    size_t at = (size_t)r * st->chunk, len = at < n ? n - at : 0;
    if (len > st->chunk)
      len = st->chunk;
    if (from != R->rank && len)
      memcpy(local + at, all + (size_t)from * n + at, len * sizeof *local);
  }
  free(all);
  return rc;
}

int strata__ranks_status(strata_trainer_t tr, int rc) {
  struct strata__ranks *R = tr->ranks;
  if (!R)
    return rc;
  struct {
    int32_t rc;
    char msg[1020];
  } mine, *all = calloc((size_t)R->size, sizeof *all);
  if (!all)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory exchanging between ranks");
  memset(&mine, 0, sizeof mine);
  mine.rc = rc;
  strata__strlcpy(mine.msg, rc ? strata_last_error() : "", sizeof mine.msg);
  int xrc = strata__cluster_allgather(R->cluster, &mine, sizeof mine, all);
  int out = xrc ? xrc : all[0].rc;
  if (!xrc && out && R->rank != 0)
    strata__error(out, "rank 0: %s", all[0].msg);
  free(all);
  return out;
}

struct strata__stage *strata__ranks_shell(const struct strata_trainer *tr, int k, int s) {
  const struct strata__ranks *R = tr->ranks;
  return R && R->shell ? R->shell[k * tr->nstages + s] : NULL;
}

int strata__ranks_shells(strata_trainer_t tr, const int *split, int split_backward) {
  struct strata__ranks *R = tr->ranks;
  if (!R || !R->spans)
    return STRATA_OK;
  if (!R->shell && !(R->shell = calloc((size_t)(tr->tp * tr->nstages), sizeof *R->shell)))
    return strata__error(STRATA_ERR_NOMEM, "out of host memory creating a trainer");
  for (int k = 0; k < tr->tp; k++)
    for (int j = 0, first = 0; j < tr->nstages; first += split[j++]) {
      const int s = (tr->home * tr->tp + k) * tr->nstages + j;
      if (tr->st[s] || !strata__stage_held(tr, s) || R->shell[k * tr->nstages + j])
        continue;
      struct strata__cut cut = strata__trainer_cut(tr, s);
      cut.tp.rank = tr->spatial > 1 ? 0 : k;
      cut.sp.rank = tr->spatial > 1 ? k : 0;
      cut.zero.rank = tr->home;
      TRY(strata__stage_shell(tr->model, first, first + split[j], tr->opt.batch, split_backward, &cut,
                              &R->shell[k * tr->nstages + j]));
    }
  return STRATA_OK;
}

/* The stage whose output (dir 0) or input gradient (dir 1) stage `to` takes. */
static int producer_of(const struct strata_trainer *tr, int to, int dir) {
  return strata__stage_owner(tr, dir == 0 ? to - 1 : to + 1);
}

int strata__ranks_send(strata_trainer_t tr, int to, int dir, int mb, strata_queue_t q, strata_mem_t mem, size_t bytes) {
  struct strata__ranks *R = tr->ranks;
  return strata_cluster_send(R->cluster, owner_of_stage(tr, to), tag_of(tr, to, dir, mb), q, mem, bytes);
}

int strata__ranks_recv(strata_trainer_t tr, int to, int dir, int mb, strata_queue_t q, strata_mem_t mem, size_t bytes) {
  struct strata__ranks *R = tr->ranks;
  return strata_cluster_recv(R->cluster, owner_of_stage(tr, producer_of(tr, to, dir)), tag_of(tr, to, dir, mb), q,
                             mem, bytes);
}

void strata__ranks_abort(strata_trainer_t tr, int status, const char *what) {
  if (tr->ranks && tr->ranks->spans)
    strata__cluster_break(tr->ranks->cluster, status, what);
}

int strata__ranks_measures(strata_trainer_t tr, int n, double *speed, uint64_t *limit) {
  struct strata__ranks *R = tr->ranks;
  if (!R || !R->spans)
    return STRATA_OK; /* one process, or a pipeline inside each rank: measured where it runs */
  struct measure {
    double speed;
    uint64_t limit;
  } *mine = calloc((size_t)n, sizeof *mine), *all = calloc((size_t)n * (size_t)R->size, sizeof *all);
  int rc = mine && all ? STRATA_OK : strata__error(STRATA_ERR_NOMEM, "out of host memory balancing stages");
  for (int r = 0; r < n && !rc; r++)
    mine[r] = (struct measure){speed[r], limit[r]};
  if (!rc)
    rc = strata__cluster_allgather(R->cluster, mine, (size_t)n * sizeof *mine, all);
  for (int r = 0; r < n && !rc; r++) {
    speed[r] = all[(size_t)R->owner[r] * n + r].speed;
    limit[r] = all[(size_t)R->owner[r] * n + r].limit;
    /* one measurement per kind of device, as one process takes it: timing noise must not cut differently */
    struct strata_cluster_device dr, dq;
    rc = strata_cluster_device(R->cluster, R->global[r], &dr);
    for (int q = 0; q < r && !rc; q++) {
      rc = strata_cluster_device(R->cluster, R->global[q], &dq);
      /* host virtual devices are slices of one CPU unless one is slowed (STRATA_HOST_SLOW names it so) */
      const char *sr = strstr(dr.info.name, ", slowed "), *sq = strstr(dq.info.name, ", slowed ");
      if (!rc && strcmp(dr.info.backend, dq.info.backend) == 0 &&
          (strcmp(dr.info.backend, "host") == 0 ? (!sr && !sq) || (sr && sq && strcmp(sr, sq) == 0)
                                                : strcmp(dr.info.name, dq.info.name) == 0)) {
        speed[r] = speed[q];
        break;
      }
    }
  }
  free(mine);
  free(all);
  return rc;
}

int strata__ranks_slice_values(strata_trainer_t tr, int k, int j, float *local, size_t n) {
  struct strata__ranks *R = tr->ranks;
  if (!R || !R->spans)
    return STRATA_OK;
  /* from the rank of replica 0's copy: one slice's floats move, not every rank's */
  return strata__cluster_broadcast(R->cluster, owner_of_stage(tr, k * tr->nstages + j), local, n * sizeof *local);
}

int strata__ranks_loss_sum(strata_trainer_t tr, double *sum) {
  struct strata__ranks *R = tr->ranks;
  if (!R || !R->spans)
    return STRATA_OK;
  double *all = calloc((size_t)R->size, sizeof *all);
  if (!all)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory exchanging between ranks");
  int rc = strata__cluster_allgather(R->cluster, sum, sizeof *sum, all);
  if (!rc)
    *sum = all[owner_of_stage(tr, tr->nstages - 1)];
  free(all);
  return rc;
}

int strata__ranks_host_device(const struct strata_trainer *tr, int r) {
  if (tr->dev[r] >= 0)
    return tr->dev[r];
  for (int q = 0; q < tr->ndev; q++)
    if (tr->dev[q] >= 0)
      return tr->dev[q];
  return 0;
}

/* ---- one trace for the whole job ---- */

/* A trace event between processes: its strings by value (the pointers are each process's). */
struct wire_event {
  char name[24], cat[16], op[16];
  double ts, dur, posted;
  int64_t step;
  uint64_t bytes;
  int32_t tid, has_op, group_kind, group_stage; /* the group by stage: every rank writes its members alike */
};

/* The event kinds and collectives a trace names, so that rank 0 keeps pointers to its own strings. */
static const char *intern(const char *s) {
  static const char *const known[] = {"compute",   "send",          "recv",      "idle",     "optimizer", "comm",
                                      "allreduce", "reducescatter", "allgather", "broadcast", "reduce"};
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
    if (strcmp(s, known[i]) == 0)
      return known[i];
  return "other";
}

int strata__ranks_trace_merge(strata_trainer_t tr) {
  struct strata__ranks *R = tr->ranks;
  if (!R)
    return STRATA_OK;
  struct head {
    uint64_t n;
    double t0;
  } mine = {R->rank == 0 ? 0 : tr->nevents, tr->t0}, *heads = calloc((size_t)R->size, sizeof *heads);
  if (!heads)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory merging the trace");
  int rc = strata__cluster_allgather(R->cluster, &mine, sizeof mine, heads);
  uint64_t most = 0;
  for (int r = 0; r < R->size && !rc; r++)
    most = heads[r].n > most ? heads[r].n : most;
  if (!rc && most * sizeof(struct wire_event) * (uint64_t)R->size > (uint64_t)1 << 30)
    rc = strata__error(STRATA_ERR_RANGE, "the trace of one step over %d ranks is too large to merge", R->size);
  struct wire_event *out = NULL, *all = NULL;
  if (!rc) {
    out = calloc((size_t)most + 1, sizeof *out);
    all = calloc((size_t)most * (size_t)R->size + 1, sizeof *all);
    if (!out || !all)
      rc = strata__error(STRATA_ERR_NOMEM, "out of host memory merging the trace");
  }
  for (uint64_t i = 0; !rc && i < mine.n; i++) {
    const struct strata__trace_event *e = &tr->events[i];
    struct wire_event *w = &out[i];
    strata__strlcpy(w->name, e->name, sizeof w->name);
    strata__strlcpy(w->cat, e->cat, sizeof w->cat);
    strata__strlcpy(w->op, e->op ? e->op : "", sizeof w->op);
    w->group_kind = e->group_kind;
    w->group_stage = e->group_stage;
    w->ts = e->ts;
    w->dur = e->dur;
    w->posted = e->posted;
    w->step = e->step;
    w->bytes = e->bytes;
    w->tid = e->tid;
    w->has_op = e->op != NULL;
  }
  if (!rc)
    rc = strata__cluster_allgather(R->cluster, out, (size_t)most * sizeof *out, all);
  if (!rc && R->rank != 0)
    tr->nevents = 0; /* sent: rank 0 keeps them (this step's idle time was counted before) */
  for (int r = 1; !rc && R->rank == 0 && r < R->size; r++)
    for (uint64_t i = 0; i < heads[r].n; i++) {
      const struct wire_event *w = &all[(size_t)r * most + i];
      /* on rank 0's clock: one machine's ranks share CLOCK_MONOTONIC (across machines the offset is approximate) */
      const double t = tr->t0 + w->ts * 1e-6 + (heads[r].t0 - tr->t0);
      size_t n = tr->nevents;
      strata__trace_add(tr, w->name, intern(w->cat), t, t + w->dur * 1e-6, w->tid);
      if (tr->nevents != n + 1)
        break; /* the trace's bound */
      struct strata__trace_event *e = &tr->events[n];
      e->step = w->step;
      e->bytes = w->bytes;
      e->posted = w->posted < 0 ? -1 : w->posted + (heads[r].t0 - tr->t0) * 1e6;
      e->op = w->has_op ? intern(w->op) : NULL;
      e->group_kind = w->group_kind;
      e->group_stage = w->group_stage;
    }
  free(heads);
  free(out);
  free(all);
  return rc;
}

int strata__ranks_backend(const struct strata_trainer *tr, int r, char *backend, size_t cap) {
  struct strata_cluster_device d;
  TRY(strata_cluster_device(tr->ranks->cluster, tr->ranks->global[r], &d));
  strata__strlcpy(backend, d.info.backend, cap);
  return STRATA_OK;
}
