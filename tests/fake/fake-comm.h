/* SPDX-License-Identifier: MIT */
/* fake-comm.h — the fake "cuda" module's communicator across processes (comm.c), for backend.c's table. */
#ifndef STRATA_TEST_FAKE_COMM_H
#define STRATA_TEST_FAKE_COMM_H

#include "device/backend.h"

void strata__fake_comm_services(const struct strata__services *svc);
int strata__fake_comm_probe(void *ctx, char *why, size_t len);
int strata__fake_comm_unique_id(void *ctx, void *id, size_t cap);
int strata__fake_comm_new_rank(void *ctx, const void *id, int nranks, int nlocal, const int *ranks, const int *devs,
                               void **comm);
void strata__fake_comm_free(void *ctx, void *comm);
int strata__fake_comm_coll(void *ctx, void *comm, int kind, int member, void *const *queues,
                           const struct strata__mem *send, const struct strata__mem *recv, size_t count, int dtype,
                           int op, int root);

#endif /* STRATA_TEST_FAKE_COMM_H */
