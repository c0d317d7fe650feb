/* SPDX-License-Identifier: MIT */
/* parallel/ranks.h — a trainer whose devices belong to several processes (MPI ranks): which pieces are this rank's,
** the data-parallel groups that cross ranks, and the exchanges that give every rank the same step. Internal. */
#ifndef STRATA__TRAIN_RANKS_H
#define STRATA__TRAIN_RANKS_H

#include <strata/cluster.h>

#include "train/trainer.h"

/*
** The cluster side of one trainer. In one process (no cluster, or a
** cluster of one rank) there is none: tr->ranks is NULL, every device is
** this process's, and each hook below returns at once, so the one-process
** trainer runs the same code. With several ranks the layout names global
** devices (the cluster's numbering, rank-major); this rank builds only the
** stages on its own devices, runs only their action lists, and tr->dev
** holds its local index of each of its pipeline ranks' devices (-1 for
** another rank's). The replicas, and so the data-parallel collectives, may
** cross ranks, and so may a replica's pipeline: its activations and
** gradients to a stage on another rank go through the cluster's
** point-to-point calls (host-staged), one tag per (receiving stage,
** direction, micro-batch). So may a tensor-parallel group (one replica's
** stage's slices): its joins then go through a cluster group of its own.
*/
struct strata__meet;

struct strata__ranks {
  strata_cluster_t cluster;
  int rank, size;
  int *global;                       /* [ndev]: each pipeline rank's global device */
  int *owner;                        /* [ndev]: the rank that holds it */
  int local_stages;                  /* stages of every chain that are this rank's */
  strata_cluster_comm_t *comm;       /* [tp x nstages], replicas > 1: as tr->comm, over the ranks */
  struct strata__meet *meet;         /* [tp x nstages]: this rank's members of each meeting there */
  int tp_spans;                      /* some tensor-parallel group crosses ranks */
  strata_cluster_comm_t *tp_comm;    /* [replicas x nstages], tp_spans: each group across ranks (NULL: inside one, or
                                     ** a whole stage), over its slices */
  struct strata__meet *tp_meet;      /* [replicas x nstages]: this rank's slices of each */
  int spans;                         /* some replica's pipeline, or tensor-parallel group, crosses ranks */
  struct strata__stage **shell;      /* [tp x nstages], spans: the home replica's stages another rank holds, as
                                     ** layouts only (no memory): their tensors' names, shapes and sizes */
  int npairs;                        /* (local pipeline rank, remote pipeline rank) pairs with messages between */
  int *pairs;                        /* [2 x npairs]: receiver, sender */
  strata_queue_t *recv_q;            /* [npairs]: each receiver's queue on its device, made at the first step */
  strata_queue_t *coll_q;            /* [all stages]: each of this rank's stages' queue for its data-parallel
                                     ** collectives, a second one on its device, made at its first */
};

/*
** Take tr->dev (global devices of the cluster `c`) as the layout gave it:
** with several ranks make tr->ranks, check that every replica lies on one
** rank, turn tr->dev into local indices and choose tr->home (this rank's
** first replica). NULL `c`, or a cluster of one rank: nothing to do.
*/
int strata__ranks_new(strata_trainer_t tr, strata_cluster_t c);
void strata__ranks_free(strata_trainer_t tr);

/* Pipeline rank r's device is this process's. */
static inline int strata__rank_mine(const struct strata_trainer *tr, int r) {
  return !tr->ranks || tr->ranks->owner[r] == tr->ranks->rank;
}
static inline int strata__stage_mine(const struct strata_trainer *tr, int s) {
  return strata__rank_mine(tr, tr->stage_rank[s]);
}
/* The global device of pipeline rank r (for reports, traces, messages). */
static inline int strata__rank_device(const struct strata_trainer *tr, int r) {
  return tr->ranks ? tr->ranks->global[r] : tr->dev[r];
}
/* Stages this rank runs. */
static inline int strata__stages_mine(const struct strata_trainer *tr) {
  return tr->ranks ? tr->ranks->local_stages : strata__stages_all(tr);
}

/* The home replica's stage s, slice k, when another rank holds it: a layout without memory (NULL: none). */
struct strata__stage *strata__ranks_shell(const struct strata_trainer *tr, int k, int s);
/* Make the shells of the stages another rank holds (after this rank's stages are built from `split`). */
int strata__ranks_shells(strata_trainer_t tr, const int *split, int split_backward);

/*
** A pipeline message across ranks: the activation (dir 0) or input
** gradient (dir 1) of micro-batch mb for stage `to`, `bytes` of `mem` on
** `q`'s device, sent to the rank that holds `to`, or received from the one
** that holds its producer. Bounded as every cluster call.
*/
int strata__ranks_send(strata_trainer_t tr, int to, int dir, int mb, strata_queue_t q, strata_mem_t mem, size_t bytes);
int strata__ranks_recv(strata_trainer_t tr, int to, int dir, int mb, strata_queue_t q, strata_mem_t mem, size_t bytes);
/* A step failed on this rank: with a pipeline across ranks, break the cluster so that this rank's threads
** waiting for peers' messages return (the job is ending). */
void strata__ranks_abort(strata_trainer_t tr, int status, const char *what);

/* Balancing: each device's speed and free memory (pipeline ranks [0, n)) from the rank that measured it, devices of
** one kind (backend and name) taking the first one's speed, as in one process. */
int strata__ranks_measures(strata_trainer_t tr, int n, double *speed, uint64_t *limit);
/* Slice k of stage j's flat buffer (`n` floats at `local`, this rank's copy where it holds one) from the rank that
** holds replica 0's copy of it. Collective: every rank calls it for the same (k, j) in the same order. */
int strata__ranks_slice_values(strata_trainer_t tr, int k, int j, float *local, size_t n);
/* After a step: every device's figures in the report from the rank that holds it (busy time, peak memory, in
** flight, what its stages hold), and the bubble over all of them. Collective. */
int strata__ranks_report(strata_trainer_t tr);
/* Evaluation: the home replica's loss sum from the rank of replica 0's last stage. */
int strata__ranks_loss_sum(strata_trainer_t tr, double *sum);
/* A local device for host memory meant for pipeline rank r (its own when it is this process's). */
int strata__ranks_host_device(const struct strata_trainer *tr, int r);

/*
** A trace over several ranks: this rank's events since the last call go to
** rank 0, which adds them to its own (on its clock) and writes the file;
** the others keep none. Collective: every rank calls it after each step.
*/
int strata__ranks_trace_merge(strata_trainer_t tr);
/* Pipeline rank r's device's backend name, from the cluster view (any rank's device). */
int strata__ranks_backend(const struct strata_trainer *tr, int r, char *backend, size_t cap);

/* The data-parallel groups across ranks (collective over the world: every rank makes every group). */
int strata__ranks_comms(strata_trainer_t tr);
/* The tensor-parallel groups that cross ranks (collective over the world, as above); none: nothing to do. */
int strata__ranks_tp_comms(strata_trainer_t tr);
/* Stage s's tensor-parallel group crosses ranks (its joins go through strata__ranks_join). */
int strata__ranks_tp_spans(const struct strata_trainer *tr, int s);
/* Stage s's join (an all-reduce of `count` floats in place, reduction `op`) through its group across ranks: this
** rank's slices meet, the last makes the call (strata/cluster.h: bit-identical between runs). */
int strata__ranks_join(strata_trainer_t tr, int s, strata_queue_t q, strata_mem_t x, size_t count, int op);

/*
** Post stage s's data-parallel collective (STRATA__COLL_ALLREDUCE,
** _REDUCESCATTER, _ALLGATHER of `count` floats, strata/cluster.h's
** conventions) to its group across ranks, and go on: an event recorded
** now on `q` (the stage's queue) closes its data; the group's thread,
** once every member of this rank posted it, makes the cluster's call for
** them all on a second queue of each member's device, so `q` keeps
** computing meanwhile. Every member posts its group's collectives in the
** same order. *done is the ticket for strata__ranks_settle, valid until
** the step's end. 1 when the group stays in this process (the caller posts
** on tr->comm as before), else 0 or a status.
*/
int strata__ranks_post(strata_trainer_t tr, int kind, int s, strata_queue_t q, strata_mem_t send, strata_mem_t recv,
                       size_t count, void **done /* OUT */);
/* Wait for a posted collective: its status, and when its data moved (*t0 .. *t1). The result is in the member's
** buffer, before anything enqueued next on the stage's queue. Returns at once, STRATA_ERR_STATE, when the step failed
** on this rank. */
int strata__ranks_settle(strata_trainer_t tr, void *done, double *t0 /* OUT */, double *t1 /* OUT */);
/* After a step (its workers joined): the groups' threads stop, after the call in progress, and the step's rounds go
** (unsettled ones after a failure too). */
void strata__ranks_step_end(strata_trainer_t tr);

/* The split: the rank of replica 0's first device balanced it (or it was given); every rank takes that one. */
int strata__ranks_split(strata_trainer_t tr, int *split, int nstages);
/* Each micro-batch's loss sum (tr->mb_loss) from the rank whose replica ran it. */
int strata__ranks_losses(strata_trainer_t tr);
/* With ZeRO, every chain's row of tr->sumsq from the rank that holds the chain. */
int strata__ranks_sumsq(strata_trainer_t tr);
/* With ZeRO, stage j of slice k's moment shards (flat, nparams floats in `local`) from their replicas' ranks. */
int strata__ranks_shards(strata_trainer_t tr, int k, int j, float *local);
/* Rank 0's status `rc` (and its message) on every rank; 0 in one process returns rc. */
int strata__ranks_status(strata_trainer_t tr, int rc);
/* This trainer writes files (checkpoints, traces): rank 0, or one process. */
static inline int strata__ranks_writer(const struct strata_trainer *tr) { return !tr->ranks || tr->ranks->rank == 0; }

#endif /* STRATA__TRAIN_RANKS_H */
