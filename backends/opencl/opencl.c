/* SPDX-License-Identifier: MIT */
/* opencl.c — the OpenCL backend: platforms and devices, buffers, queues, events, copies, and its backend table. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CL/cl.h>
#include <CL/cl_ext.h>
#include <clblast_c.h>

#include "opencl.h"

/* Vendor queries for a device's PCI address, used when cl_khr_pci_bus_info
** is missing (values from the NVIDIA and AMD extension specifications). */
#define STRATA__CL_DEVICE_PCI_BUS_ID_NV 0x4008
#define STRATA__CL_DEVICE_PCI_SLOT_ID_NV 0x4009
#define STRATA__CL_DEVICE_PCI_DOMAIN_ID_NV 0x400A
#define STRATA__CL_DEVICE_TOPOLOGY_AMD 0x4037
#define STRATA__CL_DEVICE_TOPOLOGY_TYPE_PCIE_AMD 1

/* Layout of cl_device_topology_amd's PCIe member (24 bytes). */
struct strata__amd_topology {
  cl_uint type;
  cl_char unused[17];
  cl_char bus, device, function;
};

/* The kernel sources as lines, generated from kernels/ by kernels/local.mk. */
extern const char *const strata__opencl_source[];
extern const size_t strata__opencl_source_count;

/* ------------------------------------------------------------------ errors */

#define STRATA__CL_ERR_MAP(X)                                                                                    \
  X(CL_DEVICE_NOT_FOUND) X(CL_DEVICE_NOT_AVAILABLE) X(CL_COMPILER_NOT_AVAILABLE)                                 \
  X(CL_MEM_OBJECT_ALLOCATION_FAILURE) X(CL_OUT_OF_RESOURCES) X(CL_OUT_OF_HOST_MEMORY)                            \
  X(CL_PROFILING_INFO_NOT_AVAILABLE) X(CL_MEM_COPY_OVERLAP) X(CL_IMAGE_FORMAT_MISMATCH)                          \
  X(CL_IMAGE_FORMAT_NOT_SUPPORTED) X(CL_BUILD_PROGRAM_FAILURE) X(CL_MAP_FAILURE)                                 \
  X(CL_MISALIGNED_SUB_BUFFER_OFFSET) X(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)                             \
  X(CL_COMPILE_PROGRAM_FAILURE) X(CL_LINKER_NOT_AVAILABLE) X(CL_LINK_PROGRAM_FAILURE)                            \
  X(CL_DEVICE_PARTITION_FAILED) X(CL_KERNEL_ARG_INFO_NOT_AVAILABLE) X(CL_INVALID_VALUE)                          \
  X(CL_INVALID_DEVICE_TYPE) X(CL_INVALID_PLATFORM) X(CL_INVALID_DEVICE) X(CL_INVALID_CONTEXT)                    \
  X(CL_INVALID_QUEUE_PROPERTIES) X(CL_INVALID_COMMAND_QUEUE) X(CL_INVALID_HOST_PTR)                              \
  X(CL_INVALID_MEM_OBJECT) X(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR) X(CL_INVALID_IMAGE_SIZE)                        \
  X(CL_INVALID_SAMPLER) X(CL_INVALID_BINARY) X(CL_INVALID_BUILD_OPTIONS) X(CL_INVALID_PROGRAM)                   \
  X(CL_INVALID_PROGRAM_EXECUTABLE) X(CL_INVALID_KERNEL_NAME) X(CL_INVALID_KERNEL_DEFINITION)                     \
  X(CL_INVALID_KERNEL) X(CL_INVALID_ARG_INDEX) X(CL_INVALID_ARG_VALUE) X(CL_INVALID_ARG_SIZE)                    \
  X(CL_INVALID_KERNEL_ARGS) X(CL_INVALID_WORK_DIMENSION) X(CL_INVALID_WORK_GROUP_SIZE)                           \
  X(CL_INVALID_WORK_ITEM_SIZE) X(CL_INVALID_GLOBAL_OFFSET) X(CL_INVALID_EVENT_WAIT_LIST) X(CL_INVALID_EVENT)     \
  X(CL_INVALID_OPERATION) X(CL_INVALID_GL_OBJECT) X(CL_INVALID_BUFFER_SIZE) X(CL_INVALID_MIP_LEVEL)              \
  X(CL_INVALID_GLOBAL_WORK_SIZE) X(CL_INVALID_PROPERTY) X(CL_INVALID_IMAGE_DESCRIPTOR)                           \
  X(CL_INVALID_COMPILER_OPTIONS) X(CL_INVALID_LINKER_OPTIONS) X(CL_INVALID_DEVICE_PARTITION_COUNT)

const char *strata__ocl_err_name(cl_int err) {
  switch (err) {
  case CL_SUCCESS:
    return "CL_SUCCESS";
#define STRATA__CL_ERR_CASE(name) \
  case name:                      \
    return #name;
    STRATA__CL_ERR_MAP(STRATA__CL_ERR_CASE)
#undef STRATA__CL_ERR_CASE
  case -1001:
    return "CL_PLATFORM_NOT_FOUND_KHR";
  default:
    return "unknown OpenCL error";
  }
}

int strata__ocl_fail(const struct strata__ocl *ocl, cl_int err, const char *what) {
  int status = STRATA_ERR_BACKEND;
  if (err == CL_OUT_OF_HOST_MEMORY)
    status = STRATA_ERR_NOMEM;
  else if (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_INVALID_BUFFER_SIZE)
    status = STRATA_ERR_DEVICE_MEMORY;
  return ocl->svc->error(status, "opencl: %s: %s (%d)", what, strata__ocl_err_name(err), (int)err);
}

/* ------------------------------------------------------- devices and init */

/* Copy a string property of a device into dst (always terminated, "" on failure). */
static void device_string(cl_device_id d, cl_device_info what, char *dst, size_t len) {
  size_t got = 0;
  dst[0] = '\0';
  if (clGetDeviceInfo(d, what, len, dst, &got) != CL_SUCCESS) {
    /* too long for dst: fetch all and truncate */
    char *tmp = NULL;
    if (clGetDeviceInfo(d, what, 0, NULL, &got) == CL_SUCCESS && got && (tmp = malloc(got))) {
      if (clGetDeviceInfo(d, what, got, tmp, NULL) == CL_SUCCESS)
        snprintf(dst, len, "%s", tmp);
      free(tmp);
    }
    return;
  }
  dst[len - 1] = '\0';
}

/* Does the device list `ext` among its extensions (whole word)? */
static int device_has_extension(cl_device_id d, const char *ext) {
  size_t len = 0;
  int found = 0;
  if (clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, 0, NULL, &len) != CL_SUCCESS || !len)
    return 0;
  char *all = malloc(len + 1);
  if (!all)
    return 0;
  if (clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, len, all, NULL) == CL_SUCCESS) {
    all[len] = '\0';
    size_t n = strlen(ext);
    for (const char *p = strstr(all, ext); p; p = strstr(p + 1, ext))
      if ((p == all || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) {
        found = 1;
        break;
      }
  }
  free(all);
  return found;
}

/* Fill `out` (32 bytes) with the device's PCI address "dddd:bb:dd.f", or ""
** when no extension tells it. */
static void device_pci_bus_id(cl_device_id d, char *out, size_t len) {
  out[0] = '\0';
  if (device_has_extension(d, "cl_khr_pci_bus_info")) {
    cl_device_pci_bus_info_khr info;
    if (clGetDeviceInfo(d, CL_DEVICE_PCI_BUS_INFO_KHR, sizeof info, &info, NULL) == CL_SUCCESS) {
      snprintf(out, len, "%04x:%02x:%02x.%x", info.pci_domain & 0xffffu, info.pci_bus & 0xffu,
               info.pci_device & 0x1fu, info.pci_function & 0x7u);
      return;
    }
  }
  if (device_has_extension(d, "cl_nv_device_attribute_query")) {
    cl_uint bus = 0, slot = 0, domain = 0;
    if (clGetDeviceInfo(d, STRATA__CL_DEVICE_PCI_BUS_ID_NV, sizeof bus, &bus, NULL) == CL_SUCCESS &&
        clGetDeviceInfo(d, STRATA__CL_DEVICE_PCI_SLOT_ID_NV, sizeof slot, &slot, NULL) == CL_SUCCESS) {
      if (clGetDeviceInfo(d, STRATA__CL_DEVICE_PCI_DOMAIN_ID_NV, sizeof domain, &domain, NULL) != CL_SUCCESS)
        domain = 0;
      /* the slot id packs device (bits 3..7) and function (bits 0..2) */
      snprintf(out, len, "%04x:%02x:%02x.%x", domain & 0xffffu, bus & 0xffu, (slot >> 3) & 0x1fu, slot & 0x7u);
      return;
    }
  }
  if (device_has_extension(d, "cl_amd_device_attribute_query")) {
    union {
      struct strata__amd_topology pcie;
      unsigned char raw[24];
    } topo;
    memset(&topo, 0, sizeof topo);
    if (clGetDeviceInfo(d, STRATA__CL_DEVICE_TOPOLOGY_AMD, sizeof topo, &topo, NULL) == CL_SUCCESS &&
        topo.pcie.type == STRATA__CL_DEVICE_TOPOLOGY_TYPE_PCIE_AMD) {
      snprintf(out, len, "%04x:%02x:%02x.%x", 0u, (unsigned)(unsigned char)topo.pcie.bus,
               (unsigned)(unsigned char)topo.pcie.device & 0x1fu, (unsigned)(unsigned char)topo.pcie.function & 0x7u);
      return;
    }
  }
}

static void device_fill_info(struct strata__ocl_device *dev) {
  struct strata__device_info *info = &dev->info;
  cl_device_type type = 0;
  cl_uint units = 0;
  cl_ulong mem = 0;
  memset(info, 0, sizeof *info);
  device_string(dev->id, CL_DEVICE_NAME, info->name, sizeof info->name);
  device_string(dev->id, CL_DEVICE_VENDOR, info->vendor, sizeof info->vendor);
  if (clGetDeviceInfo(dev->id, CL_DEVICE_TYPE, sizeof type, &type, NULL) == CL_SUCCESS)
    info->is_cpu = (type & CL_DEVICE_TYPE_CPU) != 0;
  if (clGetDeviceInfo(dev->id, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL) == CL_SUCCESS)
    info->compute_units = (int)units;
  if (clGetDeviceInfo(dev->id, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL) == CL_SUCCESS)
    info->total_memory = mem;
  device_pci_bus_id(dev->id, info->pci_bus_id, sizeof info->pci_bus_id);
}

/*
** Context callback: the driver reports an asynchronous failure (a kernel
** that crashed, memory lost). Keep the first message; the next
** queue_finish on this platform reports it.
*/
static void CL_CALLBACK context_notify(const char *errinfo, const void *private_info, size_t cb, void *user) {
  struct strata__ocl_platform *pl = user;
  (void)private_info;
  (void)cb;
  pthread_mutex_lock(&pl->async_lock);
  if (!pl->async_error[0])
    snprintf(pl->async_error, sizeof pl->async_error, "%s", errinfo ? errinfo : "unspecified failure");
  pthread_mutex_unlock(&pl->async_lock);
}

static void ocl_fini(void *ctx) {
  struct strata__ocl *ocl = ctx;
  if (!ocl)
    return;
  /* CLBlast caches programs per context; drop them before the contexts go. */
  if (ocl->ndevices)
    CLBlastClearCache();
  for (int i = 0; i < ocl->nplatforms; i++) {
    struct strata__ocl_platform *pl = &ocl->platforms[i];
    if (pl->program)
      clReleaseProgram(pl->program);
    for (unsigned m = 0; m < STRATA__OCL_MASKS; m++)
      if (pl->variants[m])
        clReleaseProgram(pl->variants[m]);
    if (pl->context)
      clReleaseContext(pl->context);
    pthread_mutex_destroy(&pl->lock);
    pthread_mutex_destroy(&pl->async_lock);
  }
  free(ocl->platforms);
  free(ocl->devices);
  free(ocl);
}

/*
** Open platform `pl`: list its devices (all types), make one context over
** them and append them to ocl->devices (sized for all devices already).
** A platform that fails, or that now has more devices than the `room`
** left, is skipped with a log line; returns how many devices it added.
*/
static int platform_open(struct strata__ocl *ocl, struct strata__ocl_platform *pl, cl_uint room) {
  cl_uint n = 0;
  cl_int err = clGetDeviceIDs(pl->id, CL_DEVICE_TYPE_ALL, 0, NULL, &n);
  if (err != CL_SUCCESS || n == 0 || n > room)
    return 0;
  cl_device_id *ids = calloc(n, sizeof *ids);
  if (!ids)
    return 0;
  err = clGetDeviceIDs(pl->id, CL_DEVICE_TYPE_ALL, n, ids, NULL);
  if (err == CL_SUCCESS) {
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)pl->id, 0};
    pl->context = clCreateContext(props, n, ids, context_notify, pl, &err);
  }
  if (err != CL_SUCCESS || !pl->context) {
    ocl->svc->log(STRATA_LOG_WARN, "device", "opencl: platform '%s' skipped: %s (%d)", pl->name,
                  strata__ocl_err_name(err), (int)err);
    pl->context = NULL;
    free(ids);
    return 0;
  }
  for (cl_uint i = 0; i < n; i++) {
    struct strata__ocl_device *dev = &ocl->devices[ocl->ndevices++];
    dev->id = ids[i];
    dev->platform = pl;
    device_fill_info(dev);
  }
  free(ids);
  return (int)n;
}

/*
** init: every device of every platform. No ICD, no platform or no device
** is not an error: 0 devices and a one-line reason in `why`.
*/
static int ocl_init(const struct strata__services *svc, void **ctx, char *why, size_t why_len) {
  *ctx = NULL;
  size_t wg = 0;
  const char *env = getenv("STRATA_KERNEL_WORKGROUP");
  if (env && *env) {
    char *end = NULL;
    unsigned long v = strtoul(env, &end, 10);
    if (!end || *end || v == 0 || v > STRATA__OCL_WG_MAX || (v & (v - 1)))
      return svc->error(STRATA_ERR_PARSE, "STRATA_KERNEL_WORKGROUP='%s' is not a power of two from 1 to %d", env,
                        STRATA__OCL_WG_MAX);
    wg = (size_t)v;
  }
  enum strata__ocl_gemm gemm = STRATA__OCL_GEMM_AUTO;
  env = getenv("STRATA_OPENCL_GEMM");
  if (env && *env) {
    if (!strcmp(env, "clblast"))
      gemm = STRATA__OCL_GEMM_CLBLAST;
    else if (!strcmp(env, "strata"))
      gemm = STRATA__OCL_GEMM_STRATA;
    else if (strcmp(env, "auto"))
      return svc->error(STRATA_ERR_PARSE, "STRATA_OPENCL_GEMM='%s': expected auto, clblast or strata", env);
  }
  struct strata__ocl *ocl = calloc(1, sizeof *ocl);
  if (!ocl)
    return svc->error(STRATA_ERR_NOMEM, "opencl: out of host memory starting the backend");
  ocl->svc = svc;
  ocl->wg_request = wg;
  ocl->gemm = gemm;
  cl_uint np = 0;
  cl_int err = clGetPlatformIDs(0, NULL, &np);
  if (err != CL_SUCCESS || np == 0) {
    snprintf(why, why_len, "no OpenCL platform found (clGetPlatformIDs: %d)", (int)err);
    *ctx = ocl;
    return 0;
  }
  cl_platform_id *pids = calloc(np, sizeof *pids);
  ocl->platforms = calloc(np, sizeof *ocl->platforms);
  if (!pids || !ocl->platforms) {
    free(pids);
    ocl_fini(ocl);
    return svc->error(STRATA_ERR_NOMEM, "opencl: out of host memory listing platforms");
  }
  err = clGetPlatformIDs(np, pids, NULL);
  if (err != CL_SUCCESS) {
    free(pids);
    snprintf(why, why_len, "no OpenCL platform found (clGetPlatformIDs: %d)", (int)err);
    *ctx = ocl;
    return 0;
  }
  /* count devices first so that ocl->devices never moves (devices point at platforms and back) */
  cl_uint total = 0;
  for (cl_uint i = 0; i < np; i++) {
    cl_uint n = 0;
    if (clGetDeviceIDs(pids[i], CL_DEVICE_TYPE_ALL, 0, NULL, &n) == CL_SUCCESS)
      total += n;
  }
  if (total)
    ocl->devices = calloc(total, sizeof *ocl->devices);
  if (total && !ocl->devices) {
    free(pids);
    ocl_fini(ocl);
    return svc->error(STRATA_ERR_NOMEM, "opencl: out of host memory listing devices");
  }
  for (cl_uint i = 0; i < np; i++) {
    struct strata__ocl_platform *pl = &ocl->platforms[ocl->nplatforms++];
    pl->id = pids[i];
    pthread_mutex_init(&pl->lock, NULL);
    pthread_mutex_init(&pl->async_lock, NULL);
    if (clGetPlatformInfo(pl->id, CL_PLATFORM_NAME, sizeof pl->name, pl->name, NULL) != CL_SUCCESS)
      snprintf(pl->name, sizeof pl->name, "platform %u", (unsigned)i);
    pl->name[sizeof pl->name - 1] = '\0';
    platform_open(ocl, pl, total - (cl_uint)ocl->ndevices);
  }
  free(pids);
  if (ocl->ndevices == 0)
    snprintf(why, why_len, "%u OpenCL platform(s) but no usable device", (unsigned)np);
  for (int d = 0; d < ocl->ndevices; d++)
    svc->log(STRATA_LOG_INFO, "opencl", "GEMM on %s: %s", ocl->devices[d].info.name,
             strata__ocl_gemm_ours(ocl, &ocl->devices[d]) ? "strata's CPU kernels (kernels/gemm.k)" : "CLBlast");
  *ctx = ocl;
  return ocl->ndevices;
}

int strata__ocl_gemm_ours(const struct strata__ocl *ocl, const struct strata__ocl_device *d) {
  return ocl->gemm == STRATA__OCL_GEMM_STRATA || (ocl->gemm == STRATA__OCL_GEMM_AUTO && d->info.is_cpu);
}

static int ocl_device_info(void *ctx, int dev, struct strata__device_info *info) {
  struct strata__ocl *ocl = ctx;
  *info = ocl->devices[dev].info;
  return STRATA_OK;
}

/* ---------------------------------------------------------------- buffers */

static int ocl_alloc(void *ctx, int dev, size_t bytes, void **buf) {
  struct strata__ocl *ocl = ctx;
  struct strata__ocl_device *d = &ocl->devices[dev];
  *buf = NULL;
  struct strata__ocl_buffer *b = calloc(1, sizeof *b);
  if (!b)
    return ocl->svc->error(STRATA_ERR_NOMEM, "opencl: out of host memory allocating a buffer handle");
  cl_int err;
  b->mem = clCreateBuffer(d->platform->context, CL_MEM_READ_WRITE, bytes, NULL, &err);
  if (err != CL_SUCCESS || !b->mem) {
    free(b);
    char what[256];
    snprintf(what, sizeof what, "clCreateBuffer of %zu bytes on %s", bytes, d->info.name);
    return strata__ocl_fail(ocl, err, what);
  }
  b->dev = d;
  *buf = b;
  return STRATA_OK;
}

static void ocl_free(void *ctx, int dev, void *buf) {
  struct strata__ocl_buffer *b = buf;
  (void)ctx;
  (void)dev;
  if (!b)
    return;
  clReleaseMemObject(b->mem);
  free(b);
}

/* ----------------------------------------------------------------- queues */

/*
** Create and build the kernel program of platform `pl` with build options
** `options` into *out. On failure writes the message (with the start of
** the first build log) into `msg` and returns a status; nothing is kept.
** The caller holds pl->lock.
*/
static int build_program(struct strata__ocl_platform *pl, const char *options, cl_program *out, char *msg,
                         size_t len) {
  cl_int err;
  *out = NULL;
  cl_program prog = clCreateProgramWithSource(pl->context, (cl_uint)strata__opencl_source_count,
                                              (const char **)strata__opencl_source, NULL, &err);
  if (err != CL_SUCCESS) {
    snprintf(msg, len, "opencl: clCreateProgramWithSource on '%s': %s (%d)", pl->name, strata__ocl_err_name(err),
             (int)err);
    return err == CL_OUT_OF_HOST_MEMORY ? STRATA_ERR_NOMEM : STRATA_ERR_BACKEND;
  }
  err = clBuildProgram(prog, 0, NULL, options, NULL, NULL);
  if (err != CL_SUCCESS) {
    /* the log of the first device that has one, flattened and truncated */
    char log[320] = "";
    cl_uint nd = 0;
    cl_device_id devs[64];
    if (clGetProgramInfo(prog, CL_PROGRAM_NUM_DEVICES, sizeof nd, &nd, NULL) == CL_SUCCESS && nd > 0) {
      if (nd > 64)
        nd = 64;
      if (clGetProgramInfo(prog, CL_PROGRAM_DEVICES, nd * sizeof *devs, devs, NULL) != CL_SUCCESS)
        nd = 0;
    }
    for (cl_uint i = 0; i < nd && !log[0]; i++) {
      size_t loglen = 0;
      if (clGetProgramBuildInfo(prog, devs[i], CL_PROGRAM_BUILD_LOG, 0, NULL, &loglen) != CL_SUCCESS || loglen < 2)
        continue;
      char *full = malloc(loglen + 1);
      if (!full)
        break;
      if (clGetProgramBuildInfo(prog, devs[i], CL_PROGRAM_BUILD_LOG, loglen, full, NULL) == CL_SUCCESS) {
        full[loglen] = '\0';
        size_t o = 0;
        for (const char *p = full; *p && o + 1 < sizeof log; p++)
          log[o++] = (*p == '\n' || *p == '\r') ? ' ' : *p;
        log[o] = '\0';
      }
      free(full);
    }
    snprintf(msg, len, "opencl: clBuildProgram of the strata kernels%s%s on '%s': %s (%d): %s", options[0] ? " with " : "",
             options, pl->name, strata__ocl_err_name(err), (int)err, log[0] ? log : "no build log");
    clReleaseProgram(prog);
    return err == CL_OUT_OF_HOST_MEMORY ? STRATA_ERR_NOMEM : STRATA_ERR_BACKEND;
  }
  *out = prog;
  return STRATA_OK;
}

/*
** Build the float32 kernel program of a platform once (for all its
** devices); later calls return the result of the first. A failed build is
** kept with its log and reported again on every call.
*/
static int platform_program(struct strata__ocl *ocl, struct strata__ocl_platform *pl) {
  int rc;
  pthread_mutex_lock(&pl->lock);
  if (!pl->program && !pl->build_status)
    pl->build_status = build_program(pl, "", &pl->program, pl->build_error, sizeof pl->build_error);
  rc = pl->build_status;
  if (rc)
    ocl->svc->error(rc, "%s", pl->build_error);
  pthread_mutex_unlock(&pl->lock);
  return rc;
}

/* The kernels that cooperate in work-groups of the queue's size q->wg. */
static const enum strata__ocl_kernel coop_kernels[] = {
    STRATA__OCL_K_BIAS_GRAD,   STRATA__OCL_K_LAYERNORM_FWD, STRATA__OCL_K_LAYERNORM_BWD_DX,
    STRATA__OCL_K_LAYERNORM_BWD_DPARAMS, STRATA__OCL_K_SOFTMAX_FWD, STRATA__OCL_K_SOFTMAX_BWD,
    STRATA__OCL_K_XENT_FWD,    STRATA__OCL_K_XENT_BWD,      STRATA__OCL_K_XENT_VP_MAX,
    STRATA__OCL_K_XENT_VP_SUMS, STRATA__OCL_K_EMBEDDING_BWD, STRATA__OCL_K_SUMSQ_PARTIAL,
    STRATA__OCL_K_SUMSQ_FINAL, STRATA__OCL_K_ATTN_FWD,      STRATA__OCL_K_ATTN_BWD_DQ,
    STRATA__OCL_K_ATTN_BWD_DKV};

static int is_coop(enum strata__ocl_kernel kid) {
  for (size_t i = 0; i < sizeof coop_kernels / sizeof coop_kernels[0]; i++)
    if (coop_kernels[i] == kid)
      return 1;
  return 0;
}

int strata__ocl_kernel(struct strata__ocl *ocl, struct strata__ocl_queue *q, enum strata__ocl_kernel kid, unsigned mask,
                       cl_kernel *k) {
  *k = NULL;
  if (mask == 0) {
    *k = q->kernels[kid];
    return STRATA_OK;
  }
  if (mask >= STRATA__OCL_MASKS)
    return ocl->svc->error(STRATA_ERR_INTERNAL, "opencl: buffer-type mask %#x of %s out of range", mask,
                           strata__ocl_kernel_names[kid]);
  if (q->variants && q->variants[kid][mask]) {
    *k = q->variants[kid][mask];
    return STRATA_OK;
  }
  if (!q->variants && !(q->variants = calloc(STRATA__OCL_K_COUNT, sizeof *q->variants)))
    return ocl->svc->error(STRATA_ERR_NOMEM, "opencl: out of host memory for a queue's bf16 kernels");
  struct strata__ocl_platform *pl = q->dev->platform;
  char msg[512] = "";
  pthread_mutex_lock(&pl->lock);
  if (!pl->variants[mask] && !pl->variant_status[mask]) {
    char options[64];
    snprintf(options, sizeof options, "-DSTRATA_BF16_MASK=%u", mask);
    pl->variant_status[mask] = build_program(pl, options, &pl->variants[mask], msg, sizeof msg);
    if (pl->variant_status[mask])
      ocl->svc->log(STRATA_LOG_ERROR, "opencl", "%s", msg);
  }
  int rc = pl->variant_status[mask];
  cl_program prog = pl->variants[mask];
  pthread_mutex_unlock(&pl->lock);
  if (rc)
    return ocl->svc->error(rc, "%s", msg[0] ? msg : "opencl: the bf16 kernels did not build (see the log)");
  cl_int err;
  cl_kernel kern = clCreateKernel(prog, strata__ocl_kernel_names[kid], &err);
  if (err != CL_SUCCESS) {
    char what[256];
    snprintf(what, sizeof what, "clCreateKernel(%s, bf16 mask %#x) on %s", strata__ocl_kernel_names[kid], mask,
             q->dev->info.name);
    return strata__ocl_fail(ocl, err, what);
  }
  if (is_coop(kid)) {
    size_t kmax = 0;
    err = clGetKernelWorkGroupInfo(kern, q->dev->id, CL_KERNEL_WORK_GROUP_SIZE, sizeof kmax, &kmax, NULL);
    if (err == CL_SUCCESS && kmax < q->wg) {
      clReleaseKernel(kern);
      return ocl->svc->error(STRATA_ERR_UNSUPPORTED,
                             "opencl: %s with bf16 operands takes work-groups of at most %zu on %s, not %zu",
                             strata__ocl_kernel_names[kid], kmax, q->dev->info.name, q->wg);
    }
  }
  q->variants[kid][mask] = kern;
  *k = kern;
  return STRATA_OK;
}

static void ocl_queue_free(void *ctx, void *queue) {
  struct strata__ocl_queue *q = queue;
  (void)ctx;
  if (!q)
    return;
  for (int i = 0; i < STRATA__OCL_K_COUNT; i++) {
    if (q->kernels[i])
      clReleaseKernel(q->kernels[i]);
    for (unsigned m = 0; q->variants && m < STRATA__OCL_MASKS; m++)
      if (q->variants[i][m])
        clReleaseKernel(q->variants[i][m]);
  }
  free(q->variants);
  for (int i = 0; i < 3; i++)
    if (q->stage[i])
      clReleaseMemObject(q->stage[i]);
  if (q->sumsq_parts)
    clReleaseMemObject(q->sumsq_parts);
  if (q->gemm_tmp)
    clReleaseMemObject(q->gemm_tmp);
  if (q->q)
    clReleaseCommandQueue(q->q);
  pthread_mutex_destroy(&q->gate_lock);
  free(q);
}

/* A queue: an in-order command queue, its own kernel objects and the
** sumsq scratch. The first queue of a platform builds the program. */
static int ocl_queue_new(void *ctx, int dev, void **queue) {
  struct strata__ocl *ocl = ctx;
  struct strata__ocl_device *d = &ocl->devices[dev];
  *queue = NULL;
  int rc = platform_program(ocl, d->platform);
  if (rc)
    return rc;
  struct strata__ocl_queue *q = calloc(1, sizeof *q);
  if (!q)
    return ocl->svc->error(STRATA_ERR_NOMEM, "opencl: out of host memory allocating a queue");
  pthread_mutex_init(&q->gate_lock, NULL);
  q->dev = d;
  cl_int err;
  char what[256];
  q->q = clCreateCommandQueue(d->platform->context, d->id, 0, &err);
  if (err != CL_SUCCESS) {
    q->q = NULL;
    snprintf(what, sizeof what, "clCreateCommandQueue on %s", d->info.name);
    goto fail;
  }
  for (int i = 0; i < STRATA__OCL_K_COUNT; i++) {
    q->kernels[i] = clCreateKernel(d->platform->program, strata__ocl_kernel_names[i], &err);
    if (err != CL_SUCCESS) {
      q->kernels[i] = NULL;
      snprintf(what, sizeof what, "clCreateKernel(%s) on %s", strata__ocl_kernel_names[i], d->info.name);
      goto fail;
    }
  }
  /* The cooperative kernels' work-group: STRATA_KERNEL_WORKGROUP, which
  ** every one of them must accept, or else the largest power of two up to
  ** STRATA__OCL_WG_MAX that they all accept. */
  const enum strata__ocl_kernel *coop = coop_kernels;
  size_t most = STRATA__OCL_WG_MAX;
  for (size_t i = 0; i < sizeof coop_kernels / sizeof coop_kernels[0]; i++) {
    size_t kmax = 0;
    err = clGetKernelWorkGroupInfo(q->kernels[coop[i]], d->id, CL_KERNEL_WORK_GROUP_SIZE, sizeof kmax, &kmax, NULL);
    if (err != CL_SUCCESS) {
      snprintf(what, sizeof what, "clGetKernelWorkGroupInfo(%s) on %s", strata__ocl_kernel_names[coop[i]],
               d->info.name);
      goto fail;
    }
    if (kmax < most)
      most = kmax;
  }
  if (ocl->wg_request) {
    if (ocl->wg_request > most) {
      int rc2 = ocl->svc->error(STRATA_ERR_UNSUPPORTED,
                                "opencl: STRATA_KERNEL_WORKGROUP=%zu but the reduction kernels on %s take at most %zu",
                                ocl->wg_request, d->info.name, most);
      ocl_queue_free(ctx, q);
      return rc2;
    }
    q->wg = ocl->wg_request;
  } else {
    for (q->wg = 1; q->wg * 2 <= most; q->wg *= 2)
      ;
  }
  q->sumsq_parts =
      clCreateBuffer(d->platform->context, CL_MEM_READ_WRITE, STRATA__OCL_SUMSQ_PARTS * sizeof(float), NULL, &err);
  if (err != CL_SUCCESS) {
    q->sumsq_parts = NULL;
    snprintf(what, sizeof what, "clCreateBuffer for the sumsq scratch on %s", d->info.name);
    goto fail;
  }
  *queue = q;
  return STRATA_OK;
fail:
  ocl_queue_free(ctx, q);
  return strata__ocl_fail(ocl, err, what);
}

/* Wait for the queue; report a failed wait, or an error the driver
** reported asynchronously on this platform since the last finish. */
static int ocl_queue_finish(void *ctx, void *queue) {
  struct strata__ocl *ocl = ctx;
  struct strata__ocl_queue *q = queue;
  cl_int err = clFinish(q->q);
  if (err != CL_SUCCESS) {
    char what[256];
    snprintf(what, sizeof what, "clFinish on %s (an earlier command failed)", q->dev->info.name);
    return strata__ocl_fail(ocl, err, what);
  }
  pthread_mutex_lock(&q->gate_lock);
  int gate_status = q->gate_status;
  char gate_msg[sizeof q->gate_error];
  memcpy(gate_msg, q->gate_error, sizeof gate_msg);
  q->gate_status = 0;
  q->gate_error[0] = '\0';
  pthread_mutex_unlock(&q->gate_lock);
  if (gate_status)
    return ocl->svc->error(gate_status, "%s", gate_msg);
  struct strata__ocl_platform *pl = q->dev->platform;
  char msg[sizeof pl->async_error] = "";
  pthread_mutex_lock(&pl->async_lock);
  if (pl->async_error[0]) {
    memcpy(msg, pl->async_error, sizeof msg);
    pl->async_error[0] = '\0';
  }
  pthread_mutex_unlock(&pl->async_lock);
  if (msg[0])
    return ocl->svc->error(STRATA_ERR_BACKEND, "opencl: %s reported: %s", pl->name, msg);
  return STRATA_OK;
}

/* ----------------------------------------------------------------- events */

static int ocl_event_record(void *ctx, void *queue, void **event) {
  struct strata__ocl *ocl = ctx;
  struct strata__ocl_queue *q = queue;
  *event = NULL;
  struct strata__ocl_event *e = calloc(1, sizeof *e);
  if (!e)
    return ocl->svc->error(STRATA_ERR_NOMEM, "opencl: out of host memory allocating an event");
  cl_int err = clEnqueueMarkerWithWaitList(q->q, 0, NULL, &e->ev);
  if (err != CL_SUCCESS) {
    free(e);
    return strata__ocl_fail(ocl, err, "clEnqueueMarkerWithWaitList (event record)");
  }
  e->context = q->dev->platform->context;
  *event = e;
  return STRATA_OK;
}

static int ocl_event_sync(void *ctx, void *event) {
  struct strata__ocl_event *e = event;
  cl_int err = clWaitForEvents(1, &e->ev);
  if (err != CL_SUCCESS)
    return strata__ocl_fail(ctx, err, "clWaitForEvents (event sync)");
  return STRATA_OK;
}

/* Within one context the device waits (a barrier on the queue); an event
** of another platform's context cannot enter its wait list, so the caller
** waits for it instead. */
static int ocl_event_wait(void *ctx, void *queue, void *event) {
  struct strata__ocl_queue *q = queue;
  struct strata__ocl_event *e = event;
  if (e->context != q->dev->platform->context)
    return ocl_event_sync(ctx, event);
  cl_int err = clEnqueueBarrierWithWaitList(q->q, 1, &e->ev, NULL);
  if (err != CL_SUCCESS)
    return strata__ocl_fail(ctx, err, "clEnqueueBarrierWithWaitList (event wait)");
  return STRATA_OK;
}

static void ocl_event_free(void *ctx, void *event) {
  struct strata__ocl_event *e = event;
  (void)ctx;
  if (!e)
    return;
  clReleaseEvent(e->ev);
  free(e);
}

/* ------------------------------------------------------------------ gates */

/* A gate is a user event of the device's context; it remembers the one
** queue that waits for it so that a failure can be reported there. */
struct ocl_gate {
  cl_event ev;
  struct strata__ocl_queue *waiter;
};

static int ocl_gate_new(void *ctx, int dev, void **out) {
  struct strata__ocl *ocl = ctx;
  struct ocl_gate *g = calloc(1, sizeof *g);
  if (!g)
    return ocl->svc->error(STRATA_ERR_NOMEM, "opencl: out of host memory allocating a gate");
  cl_int err;
  g->ev = clCreateUserEvent(ocl->devices[dev].platform->context, &err);
  if (err != CL_SUCCESS) {
    free(g);
    return strata__ocl_fail(ocl, err, "clCreateUserEvent (gate)");
  }
  *out = g;
  return STRATA_OK;
}

static int ocl_gate_wait(void *ctx, void *queue, void *gate) {
  struct strata__ocl_queue *q = queue;
  struct ocl_gate *g = gate;
  g->waiter = q;
  cl_int err = clEnqueueBarrierWithWaitList(q->q, 1, &g->ev, NULL);
  if (err != CL_SUCCESS) {
    g->waiter = NULL;
    return strata__ocl_fail(ctx, err, "clEnqueueBarrierWithWaitList (gate)");
  }
  return STRATA_OK;
}

/* A failed gate still completes its event (so that the queue drains) and
** leaves the failure on the waiting queue for its next finish. */
static void ocl_gate_open(void *ctx, void *gate, int status, const char *message) {
  struct ocl_gate *g = gate;
  (void)ctx;
  if (status && g->waiter) {
    pthread_mutex_lock(&g->waiter->gate_lock);
    if (!g->waiter->gate_status) {
      g->waiter->gate_status = status;
      snprintf(g->waiter->gate_error, sizeof g->waiter->gate_error, "%s", message ? message : "");
    }
    pthread_mutex_unlock(&g->waiter->gate_lock);
  }
  clSetUserEventStatus(g->ev, CL_COMPLETE);
}

static void ocl_gate_free(void *ctx, void *gate) {
  struct ocl_gate *g = gate;
  (void)ctx;
  if (!g)
    return;
  clReleaseEvent(g->ev);
  free(g);
}

/* ----------------------------------------------------------------- copies */

static int ocl_write(void *ctx, void *queue, void *dst, size_t dst_off, const void *src, size_t bytes) {
  struct strata__ocl_queue *q = queue;
  struct strata__ocl_buffer *b = dst;
  cl_int err = clEnqueueWriteBuffer(q->q, b->mem, CL_FALSE, dst_off, bytes, src, 0, NULL, NULL);
  if (err != CL_SUCCESS)
    return strata__ocl_fail(ctx, err, "clEnqueueWriteBuffer (host to device)");
  return STRATA_OK;
}

static int ocl_read(void *ctx, void *queue, void *src, size_t src_off, void *dst, size_t bytes) {
  struct strata__ocl_queue *q = queue;
  struct strata__ocl_buffer *b = src;
  cl_int err = clEnqueueReadBuffer(q->q, b->mem, CL_FALSE, src_off, bytes, dst, 0, NULL, NULL);
  if (err != CL_SUCCESS)
    return strata__ocl_fail(ctx, err, "clEnqueueReadBuffer (device to host)");
  return STRATA_OK;
}

/*
** Copy between buffers of two platforms (two contexts): wait for `q`, then
** read chunks of src through a temporary queue of src's device (blocking)
** and write them into dst through a queue of dst's device (blocking).
** Returns once the data has arrived.
*/
static int copy_across_contexts(struct strata__ocl *ocl, struct strata__ocl_queue *q, struct strata__ocl_buffer *dst,
                                size_t dst_off, struct strata__ocl_buffer *src, size_t src_off, size_t bytes) {
  enum { CHUNK = 4 << 20 };
  cl_int err = clFinish(q->q);
  if (err != CL_SUCCESS)
    return strata__ocl_fail(ocl, err, "clFinish before a copy between OpenCL platforms");
  size_t chunk = bytes < CHUNK ? bytes : CHUNK;
  void *tmp = malloc(chunk);
  if (!tmp)
    return ocl->svc->error(STRATA_ERR_NOMEM, "opencl: out of host memory staging a copy between platforms");
  const char *what = "clCreateCommandQueue for a copy between OpenCL platforms";
  cl_command_queue sq = clCreateCommandQueue(src->dev->platform->context, src->dev->id, 0, &err);
  cl_command_queue dq = NULL;
  if (err == CL_SUCCESS)
    dq = clCreateCommandQueue(dst->dev->platform->context, dst->dev->id, 0, &err);
  for (size_t done = 0; err == CL_SUCCESS && done < bytes; done += chunk) {
    size_t len = bytes - done < chunk ? bytes - done : chunk;
    err = clEnqueueReadBuffer(sq, src->mem, CL_TRUE, src_off + done, len, tmp, 0, NULL, NULL);
    what = "clEnqueueReadBuffer (copy between OpenCL platforms)";
    if (err == CL_SUCCESS) {
      err = clEnqueueWriteBuffer(dq, dst->mem, CL_TRUE, dst_off + done, len, tmp, 0, NULL, NULL);
      what = "clEnqueueWriteBuffer (copy between OpenCL platforms)";
    }
  }
  if (dq)
    clReleaseCommandQueue(dq);
  if (sq)
    clReleaseCommandQueue(sq);
  free(tmp);
  if (err != CL_SUCCESS)
    return strata__ocl_fail(ocl, err, what);
  return STRATA_OK;
}

static int ocl_copy(void *ctx, void *queue, void *dst, size_t dst_off, void *src, size_t src_off, size_t bytes) {
  struct strata__ocl_queue *q = queue;
  struct strata__ocl_buffer *d = dst, *s = src;
  if (d->dev->platform != s->dev->platform)
    return copy_across_contexts(ctx, q, d, dst_off, s, src_off, bytes);
  cl_int err = clEnqueueCopyBuffer(q->q, s->mem, d->mem, src_off, dst_off, bytes, 0, NULL, NULL);
  if (err != CL_SUCCESS)
    return strata__ocl_fail(ctx, err, "clEnqueueCopyBuffer (device to device)");
  return STRATA_OK;
}

/* --------------------------------------------------------------------- ops */

/* Every op has a kernel (or CLBlast for GEMM) on every device, on float32 and bfloat16 operands, the fused
** attention included (kernels/attention.k); not the optimizer's fused ops (the host's only). */
static int ocl_op_supported(void *ctx, int dev, enum strata__op_id id) {
  (void)ctx;
  (void)dev;
  return id >= 0 && id < STRATA__OP_COUNT && id != STRATA__OP_ADAMW_FUSED &&
         id != STRATA__OP_SUMSQ_SPANS && id != STRATA__OP_LINEAR;
}

/* ------------------------------------------------------------------ table */

static const struct strata__backend strata__opencl_backend = {
    .api_version = STRATA__BACKEND_API_VERSION,
    .name = "opencl",
    .init = ocl_init,
    .fini = ocl_fini,
    .device_info = ocl_device_info,
    .alloc = ocl_alloc,
    .free = ocl_free,
    .host_alloc = NULL, /* malloc by the runtime */
    .host_free = NULL,
    .queue_new = ocl_queue_new,
    .queue_free = ocl_queue_free,
    .queue_finish = ocl_queue_finish,
    .event_record = ocl_event_record,
    .event_wait = ocl_event_wait,
    .event_sync = ocl_event_sync,
    .event_free = ocl_event_free,
    .write = ocl_write,
    .read = ocl_read,
    .copy = ocl_copy,
    .op_supported = ocl_op_supported,
    .op = strata__ocl_op,
    .gate_new = ocl_gate_new,
    .gate_wait = ocl_gate_wait,
    .gate_open = ocl_gate_open,
    .gate_free = ocl_gate_free,
    .comm_new = NULL, /* collectives through the runtime's ring */
};

/* The module's one exported symbol. */
__attribute__((visibility("default"))) const struct strata__backend *strata_backend_entry(void);
__attribute__((visibility("default"))) const struct strata__backend *strata_backend_entry(void) {
  return &strata__opencl_backend;
}
