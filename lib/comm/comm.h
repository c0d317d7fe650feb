/* SPDX-License-Identifier: MIT */
/* comm.h — what the runtime's executor uses of the communicator beyond strata/comm.h. Internal. */
#ifndef STRATA__COMM_H
#define STRATA__COMM_H

#include <strata/comm.h>

/* Collective kinds, as lib/comm/comm.c and the backends' comm_coll number them. */
enum strata__coll_kind {
  STRATA__COLL_ALLREDUCE = 0,
  STRATA__COLL_ALLGATHER = 1,
  STRATA__COLL_REDUCESCATTER = 2,
  STRATA__COLL_BROADCAST = 3,
  STRATA__COLL_BARRIER = 4,
  STRATA__COLL_REDUCE = 5
};

/*
** One member's call (the strata_*_rank functions). With `done` non-NULL the
** member's queue is not made to wait: *done receives a completion that the
** caller hands to strata__comm_wait and then strata__comm_release, so that the queue
** computes on while the collective moves data (gradient buckets). On a
** communicator without gates (strata_comm_info's asynchronous is 0: CUDA
** outside NCCL, host devices under STRATA_HOST_NO_GATES=1) the call returns
** once posted too, and strata__comm_wait then waits on the host; without
** `done` such a call waits for its own collective and returns its status.
*/
int strata__comm_post_rank(strata_comm_t comm, int kind, int rank, strata_queue_t queue, strata_mem_t send,
                           strata_mem_t recv, size_t count, int dtype, int op, int root, void **done);

/* Make `queue` (on the member's device) wait for the completion `done`; without gates, wait for it in the call and
** return the collective's status (naming the member that failed). NULL does nothing. */
int strata__comm_wait(strata_comm_t comm, strata_queue_t queue, void *done);

/* Release a completion (exactly once, waited for or not). Once the queue that
** waited for it has finished, *t_start and *t_end (strata__now seconds; may be
** NULL) tell when its member's data moved. */
void strata__comm_release(strata_comm_t comm, void *done, double *t_start, double *t_end);

/* The algorithm (enum strata_comm_algorithm) that `opts` (may be NULL) and
** STRATA_COMM_ALGORITHM ask for, with every option checked as strata_comm_new does. */
int strata__comm_algorithm(const struct strata_comm_options *opts, int *algorithm /* OUT */);

#endif /* STRATA__COMM_H */
