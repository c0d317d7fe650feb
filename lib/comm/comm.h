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
  STRATA__COLL_BARRIER = 4
};

/*
** One member's call (the strata_*_rank functions). With `done` non-NULL the
** member's queue is not made to wait: *done receives a completion that the
** caller hands to strata__comm_wait later (exactly once), so that the queue
** computes on while the collective moves data (gradient buckets).
*/
int strata__comm_post_rank(strata_comm_t comm, int kind, int rank, strata_queue_t queue, strata_mem_t send,
                           strata_mem_t recv, size_t count, int dtype, int op, int root, void **done);

/* Make `queue` wait for the completion `done`, and release it. NULL does nothing. */
int strata__comm_wait(strata_comm_t comm, strata_queue_t queue, void *done);

#endif /* STRATA__COMM_H */
