/* SPDX-License-Identifier: MIT */
/* comm/mpi.h — the cluster's host-memory exchange, for the runtime's own small messages between ranks. Internal. */
#ifndef STRATA__COMM_MPI_H
#define STRATA__COMM_MPI_H

#include <stddef.h>

#include <strata/cluster.h>

/*
** Every rank's `bytes` bytes of host memory `mine` into `all` (size x bytes,
** rank 0's first): collective over the world, bounded as every other call
** of the cluster (a dead or silent rank fails it, naming the rank, and
** breaks the cluster). In a cluster of one process it copies. For the
** trainer's losses, norms, split and checkpoint shards; `bytes` at most
** INT_MAX.
*/
int strata__cluster_allgather(strata_cluster_t c, const void *mine, size_t bytes, void *all /* OUT */);

#endif /* STRATA__COMM_MPI_H */
