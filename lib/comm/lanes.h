/* SPDX-License-Identifier: MIT */
/* comm/lanes.h — a communicator's state, its lanes and collectives in flight, for comm.c and algorithms.c. Internal. */
#ifndef STRATA__COMM_LANES_H
#define STRATA__COMM_LANES_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <strata/comm.h>

#include "comm/comm.h"
#include "device/registry.h"

enum coll_kind {
  COLL_ALLREDUCE = STRATA__COLL_ALLREDUCE,
  COLL_ALLGATHER = STRATA__COLL_ALLGATHER,
  COLL_REDUCESCATTER = STRATA__COLL_REDUCESCATTER,
  COLL_BROADCAST = STRATA__COLL_BROADCAST,
  COLL_BARRIER = STRATA__COLL_BARRIER,
  COLL_REDUCE = STRATA__COLL_REDUCE
};

/* One member's operands of one collective. Offsets in elements. */
struct member_args {
  strata_buffer_t sbuf, rbuf;
  size_t soff, roff;
  void *in_ev;                  /* recorded on the member's queue: its input is ready */
  void *gate;                   /* the member's queue waits for it; NULL when the call blocks */
  void *done;                   /* or a completion the caller waits for later (struct completion) */
};

/* One collective call, shared by the lanes of every member. Its progress
** counters are guarded by the communicator's lock. */
struct coll {
  uint64_t seq;                 /* the members' calls with this number form it */
  struct coll *next_open;       /* in the communicator's list until every member posted */
  int posted;                   /* members whose call arrived */
  int kind, dtype, op, root, algo;
  size_t esize;                 /* bytes of one element of dtype */
  size_t count;
  size_t ce;                    /* ring chunk, elements */
  size_t scratch;               /* elements of scratch each lane needs */
  int aborted;                  /* failed before every member called it: only `posted` lanes take part */
  int n;
  struct member_args *m;        /* by rank */
  long *progress;               /* by ring position: units done (1: input ready) */
  int status;                   /* first failure, 0 while all is well */
  char msg[1024];
  int stopped;                  /* lanes that no longer touch any buffer */
  int left;                     /* lanes still holding the collective */
};

struct job {
  struct job *next;
  struct coll *coll;
};

/* A member's lane: its own queue and thread, and its scratch memory. */
struct lane {
  struct strata_comm *comm;
  int rank, pos;
  struct strata__device *dev;
  strata_queue_t q;
  strata_buffer_t scratch;
  pthread_t thread;
  int started;
  struct job *head, *tail;
  pthread_cond_t wake;
};

struct strata_comm {
  int n;
  int *devices;                 /* global device by rank */
  int *ring;                    /* rank by ring position */
  struct lane *lanes;           /* by rank */
  size_t chunk_bytes, direct_max;
  double timeout_s;
  int algorithm;                /* as configured (AUTO, RING, DIRECT, NCCL) */
  int async;                    /* every member's backend has gates */
  double bottleneck;
  const struct strata__slot *nccl_slot;
  void *nccl;                   /* the backend's communicator, NULL without */
  pthread_mutex_t lock;
  pthread_cond_t changed;       /* progress, failure, a collective released */
  struct coll *open;            /* collectives some member has not called yet */
  uint64_t *next_seq;           /* by rank: the number of its next call */
  uint64_t aborted_below;       /* calls numbered below this belong to aborted collectives */
  int pending;                  /* collectives not yet released by every lane */
  int stop;
  int status;                   /* first failure since the last strata_comm_finish */
  char msg[1024];
  uint64_t moved;               /* bytes the lanes read from other members' buffers (atomic; strata_comm_info) */
};

/* comm.c: a lane's wait for another position's progress, and its own progress. */
int strata__wait_for(struct lane *l, struct coll *co, int pos, long units);
void strata__set_units(struct lane *l, struct coll *co, long units);

/* algorithms.c: a lane's part of a collective, as steps on its queue. */
int strata__run_ring(struct lane *l, struct coll *co);
int strata__run_direct(struct lane *l, struct coll *co);

#endif /* STRATA__COMM_LANES_H */
