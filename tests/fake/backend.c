/* SPDX-License-Identifier: MIT */
/* backend.c — a fake backend module for registry tests: devices with chosen PCI ids, memory in malloc, copies done at
** once. Built as several modules (FAKE_NAME, FAKE_PCI, FAKE_API_VERSION, FAKE_NO_ENTRY, FAKE_NEEDS_GONE, FAKE_COMM) to
** play CUDA, OpenCL, a stale module, a broken one, one whose libraries cannot load and CUDA with NCCL across ranks. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/backend.h"
#ifdef FAKE_COMM
#include "fake-comm.h"
#endif

#ifndef FAKE_API_VERSION
#define FAKE_API_VERSION STRATA__BACKEND_API_VERSION
#endif

/* FAKE_PCI: the devices' PCI bus ids, "" for a device without one. */
static const char *const pci[] = {FAKE_PCI};
#define NDEV ((int)(sizeof pci / sizeof pci[0]))

#ifdef FAKE_NEEDS_GONE
/* tests/fake/gone.c: called, so that the module really needs the library. */
int strata_test_gone(void);
#endif

static int fake_init(const struct strata__services *svc, void **ctx, char *why, size_t why_len) {
  (void)svc;
  (void)why;
  (void)why_len;
  *ctx = NULL;
#ifdef FAKE_COMM
  strata__fake_comm_services(svc);
#endif
#ifdef FAKE_NEEDS_GONE
  if (!strata_test_gone())
    return 0;
#endif
  return NDEV;
}

static void fake_fini(void *ctx) { (void)ctx; }

static int fake_device_info(void *ctx, int dev, struct strata__device_info *info) {
  snprintf(info->name, sizeof info->name, "fake %s device %d", FAKE_NAME, dev);
  snprintf(info->vendor, sizeof info->vendor, "fake");
  info->compute_units = 1;
  info->total_memory = 1u << 30;
  snprintf(info->pci_bus_id, sizeof info->pci_bus_id, "%s", pci[dev]);
#ifdef FAKE_COMM
  /* STRATA_FAKE_PCI=dddd:bb:dd: device d is that function d (the same GPUs in every rank that is given it) */
  const char *e = getenv("STRATA_FAKE_PCI");
  if (e && *e)
    snprintf(info->pci_bus_id, sizeof info->pci_bus_id, "%.24s.%d", e, dev);
#endif
  return STRATA_OK;
}

static int fake_alloc(void *ctx, int dev, size_t bytes, void **buf) {
  *buf = malloc(bytes);
  return *buf ? STRATA_OK : STRATA_ERR_DEVICE_MEMORY;
}

static void fake_free(void *ctx, int dev, void *buf) { free(buf); }

/* Queues and events: everything completes when it is enqueued. */
static int fake_queue_new(void *ctx, int dev, void **q) {
  *q = malloc(1);
  return *q ? STRATA_OK : STRATA_ERR_NOMEM;
}

static void fake_queue_free(void *ctx, void *q) { free(q); }
static int fake_queue_finish(void *ctx, void *q) { return STRATA_OK; }

static int fake_event_record(void *ctx, void *q, void **ev) {
  *ev = malloc(1);
  return *ev ? STRATA_OK : STRATA_ERR_NOMEM;
}

static int fake_event_wait(void *ctx, void *q, void *ev) { return STRATA_OK; }
static int fake_event_sync(void *ctx, void *ev) { return STRATA_OK; }
static void fake_event_free(void *ctx, void *ev) { free(ev); }

static int fake_write(void *ctx, void *q, void *dst, size_t off, const void *src, size_t bytes) {
  memcpy((char *)dst + off, src, bytes);
  return STRATA_OK;
}

static int fake_read(void *ctx, void *q, void *src, size_t off, void *dst, size_t bytes) {
  memcpy(dst, (const char *)src + off, bytes);
  return STRATA_OK;
}

static int fake_copy(void *ctx, void *q, void *dst, size_t doff, void *src, size_t soff, size_t bytes) {
  memmove((char *)dst + doff, (const char *)src + soff, bytes);
  return STRATA_OK;
}

static int fake_op_supported(void *ctx, int dev, enum strata__op_id id) { return 0; }

static int fake_op(void *ctx, void *q, const struct strata__op *op) { return STRATA_ERR_UNSUPPORTED; }

static const struct strata__backend fake_backend = {
    .api_version = FAKE_API_VERSION,
    .name = FAKE_NAME,
    .init = fake_init,
    .fini = fake_fini,
    .device_info = fake_device_info,
    .alloc = fake_alloc,
    .free = fake_free,
    .host_alloc = NULL, /* staged copies use malloc */
    .host_free = NULL,
    .queue_new = fake_queue_new,
    .queue_free = fake_queue_free,
    .queue_finish = fake_queue_finish,
    .event_record = fake_event_record,
    .event_wait = fake_event_wait,
    .event_sync = fake_event_sync,
    .event_free = fake_event_free,
    .write = fake_write,
    .read = fake_read,
    .copy = fake_copy,
    .op_supported = fake_op_supported,
    .op = fake_op,
#ifdef FAKE_COMM
    .comm_probe = strata__fake_comm_probe,
    .comm_unique_id = strata__fake_comm_unique_id,
    .comm_new_rank = strata__fake_comm_new_rank,
    .comm_free = strata__fake_comm_free,
    .comm_coll = strata__fake_comm_coll,
#endif
};

#ifndef FAKE_NO_ENTRY
__attribute__((visibility("default"))) const struct strata__backend *strata_backend_entry(void);
__attribute__((visibility("default"))) const struct strata__backend *strata_backend_entry(void) {
  return &fake_backend;
}
#else
__attribute__((visibility("default"))) const struct strata__backend *some_other_symbol(void);
__attribute__((visibility("default"))) const struct strata__backend *some_other_symbol(void) { return &fake_backend; }
#endif
