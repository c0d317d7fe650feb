/* SPDX-License-Identifier: MIT */
/* collectives.h — the CUDA module's collectives through NCCL, loaded at run time (nccl.c, which loads libnccl with dlopen), and what they need of cuda.c. */
#ifndef STRATA__CUDA_NCCL_H
#define STRATA__CUDA_NCCL_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#include "device/backend.h"

/* From cuda.c: a buffer's device pointer, a queue's stream and device. */
void *strata__cuda_buf_ptr(void *buf);
cudaStream_t strata__cuda_queue_stream(void *queue);
int strata__cuda_queue_dev(void *queue);
/* From cuda.c: the calling thread's current driver context (hence device), and putting it back (even none), so that
** NCCL's calls, which select devices, leave the caller's context as it was. */
void *strata__cuda_context_save(void *ctx);
void strata__cuda_context_restore(void *ctx, void *saved);

/* The backend table's comm slots (see lib/device/backend.h). comm_new fails with
** STRATA_ERR_UNSUPPORTED, naming why, when libnccl cannot be loaded. */
int strata__nccl_comm_new(void *ctx, int n, const int *devs, void **comm);
void strata__nccl_comm_free(void *ctx, void *comm);
int strata__nccl_comm_coll(void *ctx, void *comm, int kind, int member, void *const *queues, const struct strata__mem *send,
                           const struct strata__mem *recv, size_t count, int dtype, int op, int root);
/* Across processes (lib/device/backend.h's comm_unique_id and comm_new_rank): the
** id from the process holding member 0, then every process's members. */
int strata__nccl_comm_unique_id(void *ctx, void *id, size_t cap);
int strata__nccl_comm_new_rank(void *ctx, const void *id, int nranks, int nlocal, const int *ranks, const int *devs,
                               void **comm);
/* Whether NCCL can be used here: 0 and its version in `why`, or a status and the reason. */
int strata__nccl_probe(void *ctx, char *why, size_t len);

/* Whether any NCCL communicator is live (cuda.c then polls its waits instead of blocking). */
int strata__nccl_live(void);
/* While a queue of device `dev` is waited for: STRATA_ERR_BACKEND, naming the device and NCCL's reason, when a live
** communicator with a member on `dev` reports an asynchronous error (it is then aborted, and refuses later calls). */
int strata__nccl_check(void *ctx, int dev);

/* Services for messages (set by cuda.c's init). */
extern const struct strata__services *strata__nccl_svc;

#endif /* STRATA__CUDA_NCCL_H */
