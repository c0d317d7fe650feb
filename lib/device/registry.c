/* SPDX-License-Identifier: MIT */
/* registry.c — loads the backend modules, builds the global device list, accounts device memory. */
#include "config.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device/cpu.h"
#include "core/parse.h"
#include "device/registry.h"

/* Backends in the order their devices are numbered: a GPU seen by both CUDA
** and OpenCL is listed once, under CUDA, so CUDA comes first. */
static const char *const backend_names[STRATA__MAX_BACKENDS] = {"cuda", "opencl", "host"};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static int registry_state;            /* 0: not initialised, 1: done */
static int registry_status;
static char registry_message[1024];
static struct strata__slot slots[STRATA__MAX_BACKENDS];
static struct strata__device *devices[STRATA__MAX_DEVICES];
static int device_count;

static int services_error(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int services_error(int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  strata__verror(status, fmt, ap);
  va_end(ap);
  return status;
}

static void services_log(int level, const char *subsystem, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void services_log(int level, const char *subsystem, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  strata__vlog(level, subsystem, fmt, ap);
  va_end(ap);
}

static const struct strata__services services = {
    .api_version = STRATA__BACKEND_API_VERSION,
    .error = services_error,
    .log = services_log,
};

/* Is backend `name` enabled by STRATA_BACKENDS (unset: all)? */
static int backend_wanted(const char *name) {
  const char *env = getenv("STRATA_BACKENDS");
  if (!env || !*env)
    return 1;
  size_t n = strlen(name);
  for (const char *p = env; *p;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len == n && strncmp(p, name, n) == 0)
      return 1;
    if (!end)
      break;
    p = end + 1;
  }
  return 0;
}

/* Check STRATA_BACKENDS names only known backends. */
static int check_backend_list(void) {
  const char *env = getenv("STRATA_BACKENDS");
  if (!env || !*env)
    return STRATA_OK;
  char buf[256];
  strata__strlcpy(buf, env, sizeof buf);
  char *save = NULL;
  for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    int known = 0;
    for (int i = 0; i < STRATA__MAX_BACKENDS; i++)
      known |= strcmp(tok, backend_names[i]) == 0;
    if (!known)
      return strata__error(STRATA_ERR_INVALID, "STRATA_BACKENDS names an unknown backend '%s' (known: cuda, opencl, host)",
                           tok);
  }
  return STRATA_OK;
}

/*
** The top of the build tree this program runs from, or "" when it is not
** run from one. A program of a build tree lives in a folder of it (tools/,
** tests/, ...) or, behind a libtool wrapper script, in that folder's .libs/;
** the top beside it holds config.status and libstrata.la, which an install
** prefix never has. So an installed program never takes this path and loads
** only installed modules. Linux's /proc/self/exe names the executable; where
** it is missing the answer is "".
*/
static void build_tree_top(char *top, size_t size) {
  top[0] = '\0';
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0 || (size_t)n >= sizeof exe - 1)
    return;
  exe[n] = '\0';
  char *slash = strrchr(exe, '/');
  if (!slash || slash == exe)
    return;
  *slash = '\0'; /* the executable's folder */
  slash = strrchr(exe, '/');
  if (slash && strcmp(slash, "/.libs") == 0)
    *slash = '\0';
  slash = strrchr(exe, '/');
  if (!slash || slash == exe)
    return;
  *slash = '\0'; /* its parent: the top of a build tree? */
  char probe[4096 + 32];
  snprintf(probe, sizeof probe, "%s/config.status", exe);
  if (access(probe, F_OK) != 0)
    return;
  snprintf(probe, sizeof probe, "%s/libstrata.la", exe);
  if (access(probe, F_OK) != 0)
    return;
  strata__strlcpy(top, exe, size);
}

/*
** Find and open module `strata-NAME.so`. With STRATA_BACKEND_PATH set: each
** of its directories, then the package library directory. Without it, a
** program run from a build tree (build_tree_top) looks in that tree's
** backends/NAME/.libs only, as hwloc and GStreamer do for uninstalled
** runs, so that it never mixes with an older installed module; any other
** program looks in the package library directory. Fills slot->path and
** slot->dl, or slot->reason.
*/
static void slot_open(struct strata__slot *slot) {
  char file[64];
  snprintf(file, sizeof file, "strata-%s.so", slot->name);
  char dirs[4096] = "", where[512];
  const char *env = getenv("STRATA_BACKEND_PATH");
  char top[2048];
  if (env && *env) {
    snprintf(dirs, sizeof dirs, "%s:%s", env, STRATA_PKGLIBDIR);
    snprintf(where, sizeof where, "STRATA_BACKEND_PATH, %s", STRATA_PKGLIBDIR);
  } else if (build_tree_top(top, sizeof top), top[0]) {
    snprintf(dirs, sizeof dirs, "%s/backends/%s/.libs", top, slot->name);
    snprintf(where, sizeof where, "the build tree's %.400s", dirs);
  } else {
    strata__strlcpy(dirs, STRATA_PKGLIBDIR, sizeof dirs);
    snprintf(where, sizeof where, "STRATA_BACKEND_PATH, %s", STRATA_PKGLIBDIR);
  }
  char *save = NULL;
  char first_error[256] = "";
  for (char *dir = strtok_r(dirs, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
    char *path = strata__format("%s/%s", dir, file);
    if (!path) {
      snprintf(slot->reason, sizeof slot->reason, "out of host memory looking for the module");
      return;
    }
    if (access(path, F_OK) != 0) {
      free(path);
      continue;
    }
    /* NODELETE: a module and the libraries it brought (libgomp, CUDA) stay
    ** mapped after shutdown; their static state outlives no handle of ours */
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (dl) {
      slot->dl = dl;
      slot->path = path; /* the slot's now */
      return;
    }
    free(path);
    if (!first_error[0])
      snprintf(first_error, sizeof first_error, "%s", dlerror());
  }
  if (first_error[0])
    snprintf(slot->reason, sizeof slot->reason, "module failed to load: %.200s", first_error);
  else
    snprintf(slot->reason, sizeof slot->reason, "module %s not found (%.160s)", file, where);
}

/* Load one backend and start it. A missing module or driver is not an
** error (the slot records why); a broken module or bad settings are. */
static int slot_load(struct strata__slot *slot, int *ndev) {
  *ndev = 0;
  /* The host backend's OpenMP threads share the cores with OpenBLAS's:
  ** spinning long while they wait would steal them (a third less throughput
  ** on two cores), so idle threads sleep (PASSIVE) -- after a short spin of
  ** 3000 pauses (about 30 us here, the time a futex wake-up takes): a step
  ** runs hundreds of parallel regions with gaps shorter than that, and a
  ** helper woken from sleep for each cost a bf16 step about 9% on two cores;
  ** a longer spin costs more where other processes want the cores (two
  ** trainings on two cores: -5% at 3000, -14% at 10000). libgomp and OpenBLAS
  ** read these once, when the module loads them (not if the program loaded
  ** them before); a value the user set is kept, and a wait policy the user
  ** chose gets libgomp's own spin for it. */
  if (strcmp(slot->name, "host") == 0) {
    if (!getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT"))
      setenv("GOMP_SPINCOUNT", "3000", 0);
    setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
    /* likewise OpenBLAS's workers, which otherwise spin (yielding) for
    ** about 2^28 cycles after every GEMM: half again more training
    ** throughput with its AVX-512 kernels on two cores */
    setenv("OPENBLAS_THREAD_TIMEOUT", "4", 0);
    /* OpenBLAS picks its kernels from the CPU model when it loads, and falls
    ** back to generic SSE3 ones for a model it does not know (virtual CPUs,
    ** newer chips): several times slower GEMMs. Choose from the feature flags.
    ** A host backend on another library sets it too, for any OpenBLAS the
    ** process loads beside it (strata-bench gemm --compare times one), but
    ** does not refuse to start over a value it does not use. */
    char chosen[32], why_cpu[320];
    int rc = strata__cpu_blas_prepare(chosen, sizeof chosen, why_cpu, sizeof why_cpu);
#ifdef STRATA_BLAS_OPENBLAS
    if (rc)
      return strata__error(rc, "host backend: %s", why_cpu);
    const enum strata_log_level said = STRATA_LOG_WARN;
#else
    (void)rc; /* a refused value is said below, and harms nothing the backend computes with */
    const enum strata_log_level said = STRATA_LOG_INFO;
#endif
    if (chosen[0])
      strata__log(STRATA_LOG_INFO, "host", "OPENBLAS_CORETYPE=%s chosen from the CPU's feature flags", chosen);
    else if (why_cpu[0])
      strata__log(said, "host", "%s", why_cpu);
  }
  slot_open(slot);
  if (!slot->dl)
    return STRATA_OK;
  strata__backend_entry_fn entry = (strata__backend_entry_fn)(uintptr_t)dlsym(slot->dl, STRATA__BACKEND_ENTRY);
  const struct strata__backend *be = entry ? entry() : NULL;
  char why[256] = "";
  if (!be)
    snprintf(why, sizeof why, "%.180s does not export %s", slot->path, STRATA__BACKEND_ENTRY);
  else if (be->api_version != STRATA__BACKEND_API_VERSION)
    snprintf(why, sizeof why, "%.180s was built for backend API %d, this library speaks %d", slot->path,
             be->api_version, STRATA__BACKEND_API_VERSION);
  if (why[0]) { /* a stale or foreign module is refused, not called */
    strata__strlcpy(slot->reason, why, sizeof slot->reason);
    dlclose(slot->dl);
    slot->dl = NULL;
    return STRATA_OK;
  }
  int n = be->init(&services, &slot->ctx, why, sizeof why);
  if (n < 0) {
    dlclose(slot->dl);
    slot->dl = NULL;
    return strata__error_prefix(n, "%s backend: ", slot->name);
  }
  slot->be = be;
  if (n == 0)
    strata__strlcpy(slot->reason, why[0] ? why : "no devices", sizeof slot->reason);
  *ndev = n;
  return STRATA_OK;
}

static void registry_teardown(void) {
  for (int i = 0; i < device_count; i++) {
    strata__cache_release(devices[i]);
    strata__staging_release(devices[i]);
    pthread_mutex_destroy(&devices[i]->stage_lock);
    pthread_mutex_destroy(&devices[i]->lock);
    free(devices[i]);
    devices[i] = NULL;
  }
  device_count = 0;
  for (int i = 0; i < STRATA__MAX_BACKENDS; i++) {
    struct strata__slot *s = &slots[i];
    if (s->be && s->be->fini)
      s->be->fini(s->ctx);
    if (s->dl)
      dlclose(s->dl);
    free(s->path);
    memset(s, 0, sizeof *s);
  }
}

/* Is a device with this PCI bus id already listed (under an earlier backend)? */
static int pci_listed(const char *bus_id) {
  if (!bus_id[0])
    return 0;
  for (int i = 0; i < device_count; i++)
    if (strcmp(devices[i]->info.pci_bus_id, bus_id) == 0)
      return 1;
  return 0;
}

static int registry_build(void) {
  int rc = check_backend_list();
  if (rc)
    return rc;
  uint64_t cap = 0;
  const char *cap_env = getenv("STRATA_DEVICE_MEMORY_LIMIT");
  if (cap_env && *cap_env) {
    int prc = strata__parse_size(cap_env, &cap);
    if (prc || cap == 0)
      return strata__error(prc ? prc : STRATA_ERR_RANGE, "STRATA_DEVICE_MEMORY_LIMIT='%s' is not a size (e.g. 256M, 2G): %s",
                           cap_env, prc ? strata__parse_why() : "zero");
  }
  for (int b = 0; b < STRATA__MAX_BACKENDS; b++) {
    struct strata__slot *slot = &slots[b];
    strata__strlcpy(slot->name, backend_names[b], sizeof slot->name);
    if (!backend_wanted(slot->name)) {
      strata__strlcpy(slot->reason, "not selected by STRATA_BACKENDS", sizeof slot->reason);
      continue;
    }
    int n = 0;
    rc = slot_load(slot, &n);
    if (rc)
      return rc;
    for (int i = 0; i < n; i++) {
      struct strata__device_info info;
      memset(&info, 0, sizeof info);
      rc = slot->be->device_info(slot->ctx, i, &info);
      if (rc)
        return rc;
      if (pci_listed(info.pci_bus_id)) {
        strata__log(STRATA_LOG_INFO, "device", "%s device %d (%s) is PCI %s, already listed: skipped", slot->name, i,
                    info.name, info.pci_bus_id);
        continue;
      }
      if (device_count == STRATA__MAX_DEVICES)
        return strata__error(STRATA_ERR_RANGE, "more than %d devices", STRATA__MAX_DEVICES);
      struct strata__device *d = calloc(1, sizeof *d);
      if (!d)
        return strata__error(STRATA_ERR_NOMEM, "out of memory listing devices");
      d->index = device_count;
      d->slot = slot;
      d->local = i;
      d->info = info;
      d->limit = info.total_memory;
      if (cap && (cap < d->limit || d->limit == 0))
        d->limit = cap;
      pthread_mutex_init(&d->lock, NULL);
      pthread_mutex_init(&d->stage_lock, NULL);
      devices[device_count++] = d;
      slot->device_count++;
    }
    if (n > 0 && slot->device_count == 0)
      strata__strlcpy(slot->reason, "all its devices are listed under another backend", sizeof slot->reason);
    strata__log(STRATA_LOG_INFO, "device", "backend %s: %d device(s)%s%s", slot->name, slot->device_count,
                slot->reason[0] ? ": " : "", slot->reason);
  }
  return STRATA_OK;
}

STRATA_API int strata_init(void) {
  pthread_mutex_lock(&registry_lock);
  if (!registry_state) {
    registry_status = registry_build();
    if (registry_status) {
      strata__strlcpy(registry_message, strata_last_error(), sizeof registry_message);
      registry_teardown();
    }
    registry_state = 1;
  }
  int rc = registry_status;
  pthread_mutex_unlock(&registry_lock);
  if (rc)
    strata__error(rc, "%s", registry_message);
  return rc;
}

STRATA_API void strata_shutdown(void) {
  pthread_mutex_lock(&registry_lock);
  registry_teardown();
  registry_state = 0;
  registry_status = 0;
  pthread_mutex_unlock(&registry_lock);
}

int strata__ready(void) {
  pthread_mutex_lock(&registry_lock);
  int state = registry_state, rc = registry_status;
  pthread_mutex_unlock(&registry_lock);
  if (state) {
    if (rc)
      strata__error(rc, "%s", registry_message);
    return rc;
  }
  return strata_init();
}

STRATA_API int strata_backend_count(int *count) {
  if (!count)
    return strata__error(STRATA_ERR_INVALID, "strata_backend_count: count is NULL");
  *count = STRATA__MAX_BACKENDS;
  return STRATA_OK;
}

STRATA_API int strata_backend_info(int index, struct strata_backend_info *info) {
  if (!info)
    return strata__error(STRATA_ERR_INVALID, "strata_backend_info: info is NULL");
  if (index < 0 || index >= STRATA__MAX_BACKENDS)
    return strata__error(STRATA_ERR_RANGE, "backend index %d out of range (0..%d)", index, STRATA__MAX_BACKENDS - 1);
  int rc = strata__ready();
  if (rc)
    return rc;
  const struct strata__slot *s = &slots[index];
  memset(info, 0, sizeof *info);
  strata__strlcpy(info->name, backend_names[index], sizeof info->name);
  info->loaded = s->be != NULL;
  info->device_count = s->device_count;
  strata__strlcpy(info->reason, s->reason, sizeof info->reason);
  info->path = s->path ? s->path : "";
  if (!s->be)
    info->collectives[0] = '\0';
  else if (s->be->comm_probe)
    s->be->comm_probe(s->ctx, info->collectives, sizeof info->collectives);
  else
    strata__strlcpy(info->collectives, "strata's ring", sizeof info->collectives);
  return STRATA_OK;
}

STRATA_API int strata_device_count(int *count) {
  if (!count)
    return strata__error(STRATA_ERR_INVALID, "strata_device_count: count is NULL");
  int rc = strata__ready();
  if (rc)
    return rc;
  *count = device_count;
  return STRATA_OK;
}

struct strata__device *strata__device_get(int dev) {
  if (strata__ready())
    return NULL;
  if (dev < 0 || dev >= device_count) {
    strata__error(STRATA_ERR_NOT_FOUND, "no device %d (there are %d)", dev, device_count);
    return NULL;
  }
  return devices[dev];
}

const char *strata__device_label(const struct strata__device *d, char *buf, size_t len) {
  snprintf(buf, len, "device %d (%s: %s)", d->index, d->slot->name, d->info.name);
  return buf;
}

STRATA_API int strata_device_props(int dev, struct strata_device_props *props) {
  if (!props)
    return strata__error(STRATA_ERR_INVALID, "strata_device_props: props is NULL");
  struct strata__device *d = strata__device_get(dev);
  if (!d)
    return STRATA_ERR_NOT_FOUND;
  memset(props, 0, sizeof *props);
  strata__strlcpy(props->name, d->info.name, sizeof props->name);
  strata__strlcpy(props->vendor, d->info.vendor, sizeof props->vendor);
  strata__strlcpy(props->backend, d->slot->name, sizeof props->backend);
  strata__strlcpy(props->pci_bus_id, d->info.pci_bus_id, sizeof props->pci_bus_id);
  props->backend_index = d->local;
  props->is_cpu = d->info.is_cpu;
  props->compute_units = d->info.compute_units;
  props->total_memory = d->info.total_memory;
  pthread_mutex_lock(&d->lock);
  props->memory_limit = d->limit;
  props->used_memory = d->used;
  pthread_mutex_unlock(&d->lock);
  props->free_memory = props->memory_limit > props->used_memory ? props->memory_limit - props->used_memory : 0;
  return STRATA_OK;
}

STRATA_API int strata_device_memory(int dev, uint64_t *used, uint64_t *peak, uint64_t *limit) {
  struct strata__device *d = strata__device_get(dev);
  if (!d)
    return STRATA_ERR_NOT_FOUND;
  pthread_mutex_lock(&d->lock);
  if (used)
    *used = d->used;
  if (peak)
    *peak = d->peak;
  if (limit)
    *limit = d->limit;
  pthread_mutex_unlock(&d->lock);
  return STRATA_OK;
}

STRATA_API int strata_device_reset_peak(int dev) {
  struct strata__device *d = strata__device_get(dev);
  if (!d)
    return STRATA_ERR_NOT_FOUND;
  pthread_mutex_lock(&d->lock);
  d->peak = d->used;
  pthread_mutex_unlock(&d->lock);
  return STRATA_OK;
}

static void format_bytes(uint64_t b, char *buf, size_t len) {
  if (b >= (1ull << 30))
    snprintf(buf, len, "%.2f GiB", b / 1073741824.0);
  else if (b >= (1ull << 20))
    snprintf(buf, len, "%.1f MiB", b / 1048576.0);
  else
    snprintf(buf, len, "%" PRIu64 " bytes", b);
}

int strata__device_reserve(struct strata__device *d, uint64_t bytes) {
  pthread_mutex_lock(&d->lock);
  uint64_t used = d->used;
  int fits = bytes <= d->limit && used <= d->limit - bytes;
  if (fits) {
    d->used += bytes;
    if (d->used > d->peak)
      d->peak = d->used;
  }
  pthread_mutex_unlock(&d->lock);
  if (fits)
    return STRATA_OK;
  char label[256], want[32], lim[32], inuse[32];
  format_bytes(bytes, want, sizeof want);
  format_bytes(d->limit, lim, sizeof lim);
  format_bytes(used, inuse, sizeof inuse);
  return strata__error(STRATA_ERR_DEVICE_MEMORY, "%s: allocating %s would exceed its memory limit of %s (%s in use)",
                       strata__device_label(d, label, sizeof label), want, lim, inuse);
}

void strata__device_release(struct strata__device *d, uint64_t bytes) {
  pthread_mutex_lock(&d->lock);
  d->used = d->used >= bytes ? d->used - bytes : 0;
  pthread_mutex_unlock(&d->lock);
}
