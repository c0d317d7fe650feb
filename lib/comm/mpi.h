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
/* Rank `root`'s `bytes` bytes at `p` into every rank's `p`: collective over the world, bounded as above. */
int strata__cluster_broadcast(strata_cluster_t c, int root, void *p, size_t bytes);

/*
** Mark the cluster broken by a local failure (`status`, `what`): this
** process's calls waiting for peers return within a fraction of a second,
** later ones fail at once. For a trainer whose step failed while its other
** threads wait for messages; the job is ending. A broken cluster stays so.
*/
void strata__cluster_break(strata_cluster_t c, int status, const char *what);

#endif /* STRATA__COMM_MPI_H */
