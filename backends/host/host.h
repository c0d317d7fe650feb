/* SPDX-License-Identifier: MIT */
/* host.h — shared between the host backend's queue machinery and its op implementations. */
#ifndef STRATA__HOST_H
#define STRATA__HOST_H

#include "backend.h"

/* Run one op record synchronously on the calling thread. */
int strata__host_op_run(const struct strata__op *op);

/* Threads each op of a virtual device may use (host-ops.c). */
extern int strata__host_threads;

/* Which ops the host backend implements (all of them). */
int strata__host_op_supported(enum strata__op_id id);

#endif /* STRATA__HOST_H */
