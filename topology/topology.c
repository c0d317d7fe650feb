/* SPDX-License-Identifier: MIT */
/* topology.c — the public topology API: loading (live or XML), queries, runtime-device mapping and measured figures. */
#include "config.h"

#include <ctype.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "core/core.h"

static const struct {
  const char *name, *label, *text;
} path_kinds[STRATA_PATH_KIND_COUNT] = {
#define STRATA__PATH_ROW(id, label, text) {#id, label, text},
    STRATA_PATH_KIND_MAP(STRATA__PATH_ROW)
#undef STRATA__PATH_ROW
};

STRATA_API const char *strata_path_kind_name(int kind) {
  return kind >= 0 && kind < STRATA_PATH_KIND_COUNT ? path_kinds[kind].name : "?";
}

STRATA_API const char *strata_path_kind_label(int kind) {
  return kind >= 0 && kind < STRATA_PATH_KIND_COUNT ? path_kinds[kind].label : "?";
}

STRATA_API const char *strata_path_kind_text(int kind) {
  return kind >= 0 && kind < STRATA_PATH_KIND_COUNT ? path_kinds[kind].text : "?";
}

/* The hwloc pointers kept in the GPU list die with the hwloc topology. */
static void forget_hwloc(struct strata_topology *t) {
  for (int i = 0; i < t->ngpus; i++) {
    t->gpus[i].pcidev = NULL;
    t->gpus[i].anchor = NULL;
    memset(t->gpus[i].osdevs, 0, sizeof t->gpus[i].osdevs);
  }
}

/* Does the topology know anything about PCI (devices or bridges)? */
static int has_pci(hwloc_topology_t hw) {
  if (hwloc_get_next_pcidev(hw, NULL))
    return 1;
  return hwloc_get_next_bridge(hw, NULL) != NULL;
}

/*
** Load into `t` from `path` (NULL: this machine). Owns and destroys its
** hwloc topology before returning; what it keeps is plain data.
*/
static int load_into(struct strata_topology *t, const char *path) {
  int rc;
  char *xml = NULL;
  size_t xml_len = 0;
  /* hwloc gets the checked text itself, never the file: what was checked is what loads */
  if (path && (rc = strata__topo_xml_read(path, &xml, &xml_len)) != STRATA_OK)
    return rc;
  hwloc_topology_t hw;
  if (hwloc_topology_init(&hw) < 0) {
    free(xml);
    return strata__error(STRATA_ERR_NOMEM, "topology: hwloc_topology_init failed");
  }
  /* Without an I/O filter hwloc drops PCI and OS devices, and the NVLink/xGMI
  ** matrices with them. KEEP_IMPORTANT keeps what the shared dumps need
  ** (checked with hwloc 2.9: DGX-2 NVSwitch ports, MI300A class 1200), but
  ** KEEP_ALL also keeps every bridge and device whatever a given hwloc
  ** version deems important, so switch structure is never lost; the cost
  ** is a few more objects. */
  hwloc_topology_set_io_types_filter(hw, HWLOC_TYPE_FILTER_KEEP_ALL);
  if (!path) {
    /*
    ** Live discovery loads only the hwloc plugins strata reads. The OpenCL and GL plugins start every
    ** OpenCL platform (PoCL, with its threads and LLVM) and talk to the X server inside
    ** hwloc_topology_load, and leak what they allocate there; strata's own backends find the OpenCL
    ** devices. On Linux the libpciaccess plugin ("pci") duplicates what hwloc's Linux backend reads
    ** from sysfs, and leaks libpciaccess's tables, allocated from a plugin that is unloaded before
    ** exit (so a leak checker cannot even name them). GPUs come from PCI and the cuda/nvml/rsmi/
    ** levelzero plugins, which stay.
    */
    static const char *const skip[] = {"opencl", "gl",
#ifdef __linux__
                                       "pci",
#endif
    };
    for (size_t i = 0; i < sizeof skip / sizeof *skip; i++)
      if (hwloc_topology_set_components(hw, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, skip[i]) < 0)
        strata__log(STRATA_LOG_INFO, "topology", "live: hwloc would not leave out its %s plugin", skip[i]);
  }
  if (path && (xml_len > (size_t)INT_MAX || hwloc_topology_set_xmlbuffer(hw, xml, (int)xml_len) < 0)) {
    hwloc_topology_destroy(hw);
    free(xml);
    return strata__error(STRATA_ERR_PARSE, "%s: hwloc cannot read this XML topology", path);
  }
  int loaded = hwloc_topology_load(hw);
  free(xml);
  if (loaded < 0) {
    hwloc_topology_destroy(hw);
    if (path)
      return strata__error(STRATA_ERR_PARSE,
                           "%s: hwloc rejected the topology (inconsistent objects or distance matrices)", path);
    return strata__error(STRATA_ERR_BACKEND, "topology: hwloc could not discover this machine");
  }
  if (path && !has_pci(hw)) {
    hwloc_topology_destroy(hw);
    return strata__error(STRATA_ERR_NOT_FOUND,
                         "%s: no PCI information in this topology (export it with I/O devices, "
                         "e.g. lstopo --of xml); GPUs cannot be found without it",
                         path);
  }
  if (!path && !has_pci(hw))
    strata__log(STRATA_LOG_INFO, "topology", "live: hwloc sees no PCI device here; only the host is described");
  rc = strata__topo_discover(t, hw);
  if (rc == STRATA_OK) {
    size_t n = (size_t)t->ngpus;
    t->fabric_gbps = calloc(n * n + 1, sizeof *t->fabric_gbps);
    rc = t->fabric_gbps ? STRATA_OK : strata__error(STRATA_ERR_NOMEM, "topology: out of memory");
  }
  if (rc == STRATA_OK)
    rc = strata__topo_read_fabric(t, hw);
  if (rc == STRATA_OK)
    rc = strata__topo_compute_paths(t, hw);
  forget_hwloc(t);
  hwloc_topology_destroy(hw);
  return rc;
}

STRATA_API int strata_topology_load_with(const char *xml, const struct strata_topology_options *opts,
                                         strata_topology_t *out) {
  if (!out)
    return strata__error(STRATA_ERR_INVALID, "strata_topology_load: NULL out");
  if (xml && !*xml)
    return strata__error(STRATA_ERR_INVALID, "strata_topology_load: empty file name");
  const char *path = xml;
  if (!path) {
    const char *env = getenv("STRATA_TOPOLOGY_XML");
    if (env && *env)
      path = env;
  }
  struct strata_topology *t = calloc(1, sizeof *t);
  if (!t)
    return strata__error(STRATA_ERR_NOMEM, "topology: out of memory");
  t->use_measured = 1;
  t->from_xml = path != NULL;
  t->source = strdup(path ? path : "live");
  if (opts)
    t->opts = *opts;
  int rc = t->source ? strata__topo_resolve_options(&t->opts)
                     : strata__error(STRATA_ERR_NOMEM, "topology: out of memory");
  if (rc == STRATA_OK)
    rc = load_into(t, path);
  if (rc != STRATA_OK) {
    strata_topology_free(t);
    return rc;
  }
  strata__log(STRATA_LOG_INFO, "topology", "%s: %d GPU(s), %d island(s)", t->source, t->ngpus, t->nislands);
  *out = t;
  return STRATA_OK;
}

STRATA_API int strata_topology_load(const char *xml, strata_topology_t *out) {
  return strata_topology_load_with(xml, NULL, out);
}

STRATA_API void strata_topology_free(strata_topology_t t) {
  if (!t)
    return;
  for (int i = 0; i < t->nislands; i++)
    free(t->islands[i].gpus);
  free(t->islands);
  free(t->gpu_island);
  free(t->links);
  free(t->narrow_gbps);
  free(t->pcie_kind);
  free(t->fabric_gbps);
  free(t->gpus);
  free(t->devs);
  free(t->measured);
  for (int i = 0; i < t->nwarnings; i++)
    free(t->warnings[i]);
  free(t->warnings);
  free(t->source);
  free(t);
}

void strata__topo_warn(struct strata_topology *t, const char *fmt, ...) {
  char raw[512], line[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(raw, sizeof raw, fmt, ap);
  va_end(ap);
  strata__escape(line, sizeof line, raw); /* text quoted from the dump stays one printable line */
  strata__log(STRATA_LOG_WARN, "topology", "%s: %s", t->source ? t->source : "live", line);
  char **w = realloc(t->warnings, (size_t)(t->nwarnings + 1) * sizeof *w);
  char *copy = strdup(line);
  if (w)
    t->warnings = w;
  if (!w || !copy) {
    free(copy);
    t->warn_nomem = 1;
    return;
  }
  t->warnings[t->nwarnings++] = copy;
}

STRATA_API int strata_topology_warning_count(strata_topology_t t, int *count) {
  if (!t || !count)
    return strata__error(STRATA_ERR_INVALID, "strata_topology_warning_count: NULL argument");
  *count = t->nwarnings;
  return STRATA_OK;
}

STRATA_API int strata_topology_warning(strata_topology_t t, int index, const char **text) {
  if (!t || !text)
    return strata__error(STRATA_ERR_INVALID, "strata_topology_warning: NULL argument");
  if (index < 0 || index >= t->nwarnings)
    return strata__error(STRATA_ERR_RANGE, "strata_topology_warning: warning %d out of range (%d warnings)", index,
                         t->nwarnings);
  *text = t->warnings[index];
  return STRATA_OK;
}

STRATA_API const char *strata_topology_source(strata_topology_t t) {
  return t ? t->source : "";
}

STRATA_API int strata_topology_options(strata_topology_t t, struct strata_topology_options *opts) {
  if (!t || !opts)
    return strata__error(STRATA_ERR_INVALID, "strata_topology_options: NULL argument");
  *opts = t->opts;
  return STRATA_OK;
}

/* Put measured figures where they are wanted: the GPU-level links take the
** best figure measured between runtime devices on those GPUs. */
static void apply_measured(struct strata_topology *t) {
  size_t n = (size_t)t->ngpus + 1;
  for (size_t i = 0; i < n * n; i++) {
    struct strata_link *l = &t->links[i];
    l->gbps = (t->use_measured && l->measured_gbps > 0) ? l->measured_gbps : l->nominal_gbps;
  }
}

STRATA_API int strata_topology_set_options(strata_topology_t t, const struct strata_topology_options *opts) {
  if (!t || !opts)
    return strata__error(STRATA_ERR_INVALID, "strata_topology_set_options: NULL argument");
  if (opts->socket_gbps < 0 || opts->numa_gbps < 0 || opts->net_gbps < 0 || opts->net_latency_us < 0)
    return strata__error(STRATA_ERR_RANGE, "strata_topology_set_options: negative figure");
  struct strata_topology_options o = *opts;
  TRY(strata__topo_resolve_options(&o));
  t->opts = o;
  strata__topo_compute_figures(t);
  apply_measured(t);
  return strata__topo_compute_islands(t);
}

STRATA_API int strata_topology_host(strata_topology_t t, struct strata_topology_host *host) {
  if (!t || !host)
    return strata__error(STRATA_ERR_INVALID, "strata_topology_host: NULL argument");
  *host = t->host;
  return STRATA_OK;
}

STRATA_API int strata_topology_gpu_count(strata_topology_t t, int *count) {
  if (!t || !count)
    return strata__error(STRATA_ERR_INVALID, "strata_topology_gpu_count: NULL argument");
  *count = t->ngpus;
  return STRATA_OK;
}

STRATA_API int strata_topology_gpu(strata_topology_t t, int gpu, struct strata_topology_gpu *info) {
  if (!t || !info)
    return strata__error(STRATA_ERR_INVALID, "strata_topology_gpu: NULL argument");
  if (gpu < 0 || gpu >= t->ngpus)
    return strata__error(STRATA_ERR_RANGE, "strata_topology_gpu: GPU %d out of range (0..%d)", gpu, t->ngpus - 1);
  *info = t->gpus[gpu].pub;
  return STRATA_OK;
}

STRATA_API int strata_topology_link(strata_topology_t t, int from, int to, struct strata_link *link) {
  if (!t || !link)
    return strata__error(STRATA_ERR_INVALID, "strata_topology_link: NULL argument");
  if (from < STRATA_TOPOLOGY_HOST || from >= t->ngpus || to < STRATA_TOPOLOGY_HOST || to >= t->ngpus)
    return strata__error(STRATA_ERR_RANGE, "strata_topology_link: endpoint %d or %d out of range (host, 0..%d)", from,
                         to, t->ngpus - 1);
  int n = t->ngpus + 1;
  int a = from < 0 ? t->ngpus : from, b = to < 0 ? t->ngpus : to;
  *link = t->links[a * n + b];
  return STRATA_OK;
}

STRATA_API int strata_topology_island_count(strata_topology_t t, int *count) {
  if (!t || !count)
    return strata__error(STRATA_ERR_INVALID, "strata_topology_island_count: NULL argument");
  *count = t->nislands;
  return STRATA_OK;
}

STRATA_API int strata_topology_island(strata_topology_t t, int island, struct strata_topology_island *info) {
  if (!t || !info)
    return strata__error(STRATA_ERR_INVALID, "strata_topology_island: NULL argument");
  if (island < 0 || island >= t->nislands)
    return strata__error(STRATA_ERR_RANGE, "strata_topology_island: island %d out of range (%d islands)", island,
                         t->nislands);
  const struct strata__island *is = &t->islands[island];
  info->size = is->size;
  info->gpus = is->gpus;
  info->kind = is->kind;
  info->nlinks = is->nlinks;
  info->gbps = is->gbps;
  return STRATA_OK;
}

STRATA_API int strata_topology_gpu_island(strata_topology_t t, int gpu, int *island) {
  if (!t || !island)
    return strata__error(STRATA_ERR_INVALID, "strata_topology_gpu_island: NULL argument");
  if (gpu < 0 || gpu >= t->ngpus)
    return strata__error(STRATA_ERR_RANGE, "strata_topology_gpu_island: GPU %d out of range", gpu);
  *island = t->gpu_island[gpu];
  return STRATA_OK;
}

/* Parse "dddd:bb:dd.f" or "bb:dd.f" (hex, any case) into one number; -1 when it is neither. */
static long long pci_key(const char *s) {
  unsigned d = 0, b, dev, f;
  char tail;
  if (!s || !*s)
    return -1;
  if (sscanf(s, "%x:%x:%x.%x%c", &d, &b, &dev, &f, &tail) == 4 ||
      (d = 0, sscanf(s, "%x:%x.%x%c", &b, &dev, &f, &tail) == 3))
    return ((long long)d << 24) | ((long long)(b & 0xff) << 16) | ((long long)(dev & 0x1f) << 8) | (f & 7);
  return -1;
}

STRATA_API int strata_topology_map(strata_topology_t t, const struct strata_device_props *props, int count) {
  if (!t || count < 0 || (count > 0 && !props))
    return strata__error(STRATA_ERR_INVALID, "strata_topology_map: invalid argument");
  struct strata_topology_device *devs = calloc((size_t)count + 1, sizeof *devs);
  double *measured = calloc(((size_t)count + 1) * ((size_t)count + 1), sizeof *measured);
  if (!devs || !measured) {
    free(devs);
    free(measured);
    return strata__error(STRATA_ERR_NOMEM, "topology: out of memory");
  }
  for (int i = 0; i < count; i++) {
    const struct strata_device_props *p = &props[i];
    struct strata_topology_device *d = &devs[i];
    d->device = i;
    strata__strlcpy(d->backend, p->backend, sizeof d->backend);
    strata__strlcpy(d->name, p->name, sizeof d->name);
    strata__strlcpy(d->vendor, p->vendor, sizeof d->vendor);
    strata__strlcpy(d->pci_bus_id, p->pci_bus_id, sizeof d->pci_bus_id);
    d->memory = p->total_memory;
    d->is_cpu = p->is_cpu;
    d->gpu = -1;
    d->numa_node = -1;
    long long key = pci_key(p->pci_bus_id);
    if (key < 0 || p->is_cpu)
      continue;
    /* the k-th device of one backend on a PCI id takes partition k */
    int earlier = 0;
    for (int j = 0; j < i; j++)
      if (pci_key(props[j].pci_bus_id) == key && strcmp(props[j].backend, p->backend) == 0 && !props[j].is_cpu)
        earlier++;
    int first = -1, chosen = -1;
    for (int g = 0; g < t->ngpus; g++) {
      if (pci_key(t->gpus[g].pub.pci_bus_id) != key)
        continue;
      if (first < 0)
        first = g;
      if (t->gpus[g].pub.partition == earlier)
        chosen = g;
    }
    d->gpu = chosen >= 0 ? chosen : first;
    if (d->gpu >= 0)
      d->numa_node = t->gpus[d->gpu].pub.numa_node;
    else
      strata__log(STRATA_LOG_INFO, "topology", "device %d (%s, %s) has PCI id %s, not in %s: placed on the host", i,
                  p->backend, p->name, p->pci_bus_id, t->source);
  }
  free(t->devs);
  free(t->measured);
  t->devs = devs;
  t->measured = measured;
  t->ndev = count;
  size_t n = (size_t)t->ngpus + 1;
  for (size_t i = 0; i < n * n; i++)
    t->links[i].measured_gbps = 0;
  apply_measured(t);
  return STRATA_OK;
}

STRATA_API int strata_topology_map_runtime(strata_topology_t t) {
  if (!t)
    return strata__error(STRATA_ERR_INVALID, "strata_topology_map_runtime: NULL topology");
  int count = 0;
  int rc = strata_device_count(&count);
  if (rc != STRATA_OK)
    return rc;
  struct strata_device_props *props = calloc((size_t)count + 1, sizeof *props);
  if (!props)
    return strata__error(STRATA_ERR_NOMEM, "topology: out of memory");
  for (int i = 0; i < count && rc == STRATA_OK; i++)
    rc = strata_device_props(i, &props[i]);
  if (rc == STRATA_OK)
    rc = strata_topology_map(t, props, count);
  free(props);
  return rc;
}

STRATA_API int strata_topology_device_count(strata_topology_t t, int *count) {
  if (!t || !count)
    return strata__error(STRATA_ERR_INVALID, "strata_topology_device_count: NULL argument");
  *count = t->ndev;
  return STRATA_OK;
}

STRATA_API int strata_topology_device(strata_topology_t t, int device, struct strata_topology_device *info) {
  if (!t || !info)
    return strata__error(STRATA_ERR_INVALID, "strata_topology_device: NULL argument");
  if (device < 0 || device >= t->ndev)
    return strata__error(STRATA_ERR_RANGE, "strata_topology_device: device %d out of range (%d mapped)", device,
                         t->ndev);
  *info = t->devs[device];
  return STRATA_OK;
}

/* Topology endpoint of a runtime device (or the host): a GPU index or ngpus for the host. */
static int endpoint(const struct strata_topology *t, int dev) {
  if (dev < 0 || t->devs[dev].gpu < 0)
    return t->ngpus;
  return t->devs[dev].gpu;
}

static int check_dev(const struct strata_topology *t, int dev, const char *fn) {
  if (dev < STRATA_TOPOLOGY_HOST || dev >= t->ndev)
    return strata__error(STRATA_ERR_RANGE, "%s: device %d out of range (host, 0..%d)", fn, dev, t->ndev - 1);
  return STRATA_OK;
}

STRATA_API int strata_topology_device_link(strata_topology_t t, int from, int to, struct strata_link *link) {
  if (!t || !link)
    return strata__error(STRATA_ERR_INVALID, "strata_topology_device_link: NULL argument");
  int rc;
  if ((rc = check_dev(t, from, "strata_topology_device_link")) || (rc = check_dev(t, to, "strata_topology_device_link")))
    return rc;
  int n = t->ngpus + 1;
  *link = t->links[endpoint(t, from) * n + endpoint(t, to)];
  int a = from < 0 ? t->ndev : from, b = to < 0 ? t->ndev : to;
  double m = t->measured[a * (t->ndev + 1) + b];
  link->measured_gbps = m;
  link->gbps = (t->use_measured && m > 0) ? m : link->nominal_gbps;
  return STRATA_OK;
}

STRATA_API int strata_topology_set_measured(strata_topology_t t, int from, int to, double gbps) {
  if (!t)
    return strata__error(STRATA_ERR_INVALID, "strata_topology_set_measured: NULL topology");
  int rc;
  if ((rc = check_dev(t, from, "strata_topology_set_measured")) || (rc = check_dev(t, to, "strata_topology_set_measured")))
    return rc;
  if (!(gbps > 0))
    return strata__error(STRATA_ERR_RANGE, "strata_topology_set_measured: bandwidth must be > 0 GB/s");
  int a = from < 0 ? t->ndev : from, b = to < 0 ? t->ndev : to;
  t->measured[a * (t->ndev + 1) + b] = gbps;
  int ea = endpoint(t, from), eb = endpoint(t, to), n = t->ngpus + 1;
  struct strata_link *l = &t->links[ea * n + eb];
  if (gbps > l->measured_gbps)
    l->measured_gbps = gbps;
  apply_measured(t);
  return STRATA_OK;
}

STRATA_API int strata_topology_use_measured(strata_topology_t t, int on) {
  if (!t)
    return strata__error(STRATA_ERR_INVALID, "strata_topology_use_measured: NULL topology");
  t->use_measured = on != 0;
  apply_measured(t);
  return STRATA_OK;
}
