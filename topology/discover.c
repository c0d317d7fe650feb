/* SPDX-License-Identifier: MIT */
/* discover.c — find the GPUs of an hwloc topology (OS devices and PCI devices, one entry per physical GPU or partition) and describe the host. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "util.h"

/* OS device families that name a GPU, in the order their names are preferred. */
enum gpu_family { FAM_NONE = -1, FAM_CUDA, FAM_NVML, FAM_RSMI, FAM_LEVELZERO, FAM_OPENCL, FAM_COUNT };

static const char *const family_prefix[FAM_COUNT] = {"cuda", "nvml", "rsmi", "ze", "opencl"};

static int prefixed(const char *s, const char *prefix) {
  return s && strncmp(s, prefix, strlen(prefix)) == 0;
}

/*
** The GPU family of an OS device, or FAM_NONE. GPU and COPROC devices
** count (nvml ones may be COPROC without subtype); DRM nodes (card*,
** renderD*, controlD*) are GPU-typed too but never count, nor OpenCL CPU
** devices.
*/
static int osdev_family(hwloc_obj_t o) {
  if (o->type != HWLOC_OBJ_OS_DEVICE || !o->name)
    return FAM_NONE;
  if (o->attr->osdev.type != HWLOC_OBJ_OSDEV_GPU && o->attr->osdev.type != HWLOC_OBJ_OSDEV_COPROC)
    return FAM_NONE;
  if (prefixed(o->name, "card") || prefixed(o->name, "renderD") || prefixed(o->name, "controlD"))
    return FAM_NONE;
  const char *backend = hwloc_obj_get_info_by_name(o, "Backend");
  const char *sub = o->subtype;
  for (int f = 0; f < FAM_COUNT; f++) {
    int match = prefixed(o->name, family_prefix[f]);
    if (f == FAM_LEVELZERO)
      match = (sub && strcmp(sub, "LevelZero") == 0) || (backend && strcmp(backend, "LevelZero") == 0);
    if (f == FAM_NVML && backend && strcmp(backend, "NVML") == 0)
      match = 1;
    if (f == FAM_RSMI && backend && strcmp(backend, "RSMI") == 0)
      match = 1;
    if (!match)
      continue;
    if (f == FAM_OPENCL) {
      const char *type = hwloc_obj_get_info_by_name(o, "OpenCLDeviceType");
      if (type && !strstr(type, "GPU") && !strstr(type, "Accelerator"))
        return FAM_NONE;
    }
    return f;
  }
  return FAM_NONE;
}

/* A PCI device that is a GPU by vendor and class: NVIDIA, AMD or Intel,
** class VGA (0300), 3D (0302), display (0380) or processing accelerator
** (1200, MI300A). */
static int pci_is_gpu(hwloc_obj_t o) {
  unsigned v = o->attr->pcidev.vendor_id;
  unsigned c = o->attr->pcidev.class_id;
  if (v != 0x10de && v != 0x1002 && v != 0x8086)
    return 0;
  return c == 0x0300 || c == 0x0302 || c == 0x0380 || c == 0x1200;
}

static const char *vendor_name(unsigned vendor_id, int family) {
  switch (vendor_id) {
  case 0x10de: return "NVIDIA";
  case 0x1002: return "AMD";
  case 0x8086: return "Intel";
  default: break;
  }
  switch (family) {
  case FAM_CUDA:
  case FAM_NVML: return "NVIDIA";
  case FAM_RSMI: return "AMD";
  case FAM_LEVELZERO: return "Intel";
  default: return "unknown";
  }
}

/* Order OS device names numerically: "rsmi2" before "rsmi10". */
static int osdev_name_cmp(const void *a, const void *b) {
  const char *x = (*(const hwloc_obj_t *)a)->name;
  const char *y = (*(const hwloc_obj_t *)b)->name;
  size_t lx = strlen(x), ly = strlen(y);
  if (lx != ly)
    return lx < ly ? -1 : 1;
  return strcmp(x, y);
}

static uint64_t info_kib(hwloc_obj_t o, const char *name) {
  const char *v = hwloc_obj_get_info_by_name(o, name);
  if (!v)
    return 0;
  return strtoull(v, NULL, 10) * 1024ull;
}

static int grow(struct strata_topology *t, int *cap) {
  if (t->ngpus < *cap)
    return STRATA_OK;
  int ncap = *cap ? *cap * 2 : 16;
  struct strata__gpu *g = realloc(t->gpus, (size_t)ncap * sizeof *g);
  if (!g)
    return strata__error(STRATA_ERR_NOMEM, "topology: out of memory");
  t->gpus = g;
  *cap = ncap;
  return STRATA_OK;
}

/* NUMA node, package and CPU set of the non-I/O ancestor `anchor`. */
static void place_gpu(hwloc_topology_t hw, struct strata__gpu *g) {
  hwloc_obj_t a = g->anchor;
  g->pub.numa_node = -1;
  g->pub.package = -1;
  g->pub.cpuset[0] = '\0';
  if (!a)
    return;
  if (a->nodeset && !hwloc_bitmap_iszero(a->nodeset))
    g->pub.numa_node = hwloc_bitmap_first(a->nodeset); /* nearest: the lowest of the local ones */
  if (a->cpuset && !hwloc_bitmap_iszero(a->cpuset))
    hwloc_bitmap_list_snprintf(g->pub.cpuset, sizeof g->pub.cpuset, a->cpuset);
  hwloc_obj_t p = a->type == HWLOC_OBJ_PACKAGE ? a : hwloc_get_ancestor_obj_by_type(hw, HWLOC_OBJ_PACKAGE, a);
  if (!p && a->cpuset) {
    /* anchored above the packages: belongs to one only if exactly one covers it */
    int n = hwloc_get_nbobjs_inside_cpuset_by_type(hw, a->cpuset, HWLOC_OBJ_PACKAGE);
    if (n == 1)
      p = hwloc_get_obj_inside_cpuset_by_type(hw, a->cpuset, HWLOC_OBJ_PACKAGE, 0);
  }
  if (p)
    g->pub.package = (int)p->os_index;
}

/*
** Add the GPUs of one device `dev` (a PCI device, or the parent of OS
** devices with no PCI identity): as many entries as the most numerous OS
** device family under it (six rsmi partitions give six GPUs), or one for a
** PCI GPU with no OS device. The k-th device of each family joins the k-th
** entry, so cuda0, nvml0 and opencl0d0 make one GPU.
*/
static int add_device(struct strata_topology *t, hwloc_topology_t hw, hwloc_obj_t pci, hwloc_obj_t *osdevs,
                      int nosdevs, int *cap, int *order) {
  hwloc_obj_t fam[FAM_COUNT][64];
  int nfam[FAM_COUNT] = {0};
  int nparts = 0;
  for (int i = 0; i < nosdevs; i++) {
    int f = osdev_family(osdevs[i]);
    if (f != FAM_NONE && nfam[f] < 64)
      fam[f][nfam[f]++] = osdevs[i];
  }
  for (int f = 0; f < FAM_COUNT; f++) {
    qsort(fam[f], (size_t)nfam[f], sizeof(hwloc_obj_t), osdev_name_cmp);
    if (nfam[f] > nparts)
      nparts = nfam[f];
  }
  if (nparts == 0) {
    if (!pci || !pci_is_gpu(pci))
      return STRATA_OK;
    nparts = 1;
  }
  for (int k = 0; k < nparts; k++) {
    int rc = grow(t, cap);
    if (rc)
      return rc;
    struct strata__gpu *g = &t->gpus[t->ngpus++];
    memset(g, 0, sizeof *g);
    g->pcidev = pci;
    g->pub.partition = k;
    int first_family = FAM_NONE;
    for (int f = 0; f < FAM_COUNT; f++) {
      if (k >= nfam[f] || g->nosdevs >= STRATA__GPU_MAX_OSDEVS)
        continue;
      hwloc_obj_t o = fam[f][k];
      g->osdevs[g->nosdevs++] = o;
      if (first_family == FAM_NONE)
        first_family = f;
      const char *model = hwloc_obj_get_info_by_name(o, "GPUModel");
      if (!g->pub.name[0] && model && model[0])
        strata__escape(g->pub.name, sizeof g->pub.name, model); /* from the file: escaped */
      uint64_t mem = info_kib(o, "CUDAGlobalMemorySize");
      if (!mem)
        mem = info_kib(o, "RSMIVRAMSize");
      if (!mem)
        mem = info_kib(o, "OpenCLGlobalMemorySize");
      if (mem > g->pub.memory)
        g->pub.memory = mem;
    }
    /* names, sorted for a stable listing */
    hwloc_obj_t sorted[STRATA__GPU_MAX_OSDEVS];
    memcpy(sorted, g->osdevs, sizeof sorted);
    qsort(sorted, (size_t)g->nosdevs, sizeof(hwloc_obj_t), osdev_name_cmp);
    for (int i = 0; i < g->nosdevs; i++) {
      size_t used = strlen(g->pub.os_devices);
      snprintf(g->pub.os_devices + used, sizeof g->pub.os_devices - used, "%s%s", i ? "," : "", sorted[i]->name);
    }
    if (pci) {
      struct hwloc_pcidev_attr_s *pa = &pci->attr->pcidev;
      snprintf(g->pub.pci_bus_id, sizeof g->pub.pci_bus_id, "%04x:%02x:%02x.%x", (unsigned)pa->domain,
               (unsigned)pa->bus, (unsigned)pa->dev, (unsigned)pa->func);
      g->pub.vendor_id = pa->vendor_id;
      g->pub.device_id = pa->device_id;
      g->pub.pci_class = pa->class_id;
      g->pub.pcie_gbps = pa->linkspeed > 0 ? pa->linkspeed : 0;
      g->sort_key = ((uint64_t)pa->domain << 40) | ((uint64_t)pa->bus << 32) | ((uint64_t)pa->dev << 24) |
                    ((uint64_t)pa->func << 16) | (uint64_t)k;
      if (!g->pub.name[0]) {
        const char *pn = hwloc_obj_get_info_by_name(pci, "PCIDevice");
        if (pn && pn[0])
          strata__escape(g->pub.name, sizeof g->pub.name, pn);
      }
    } else {
      g->sort_key = (1ull << 63) | ((uint64_t)(*order)++ << 16) | (uint64_t)k;
    }
    strata__strlcpy(g->pub.vendor, vendor_name(g->pub.vendor_id, first_family), sizeof g->pub.vendor);
    if (!g->pub.name[0] && k > 0 && g[-k].pub.name[0]) /* partitions: only the first may carry the model */
      strata__strlcpy(g->pub.name, g[-k].pub.name, sizeof g->pub.name);
    if (!g->pub.name[0])
      snprintf(g->pub.name, sizeof g->pub.name, "%s GPU [%04x:%04x]", g->pub.vendor, g->pub.vendor_id,
               g->pub.device_id);
    g->anchor = hwloc_get_non_io_ancestor_obj(hw, pci ? pci : osdevs[0]);
    place_gpu(hw, g);
  }
  return STRATA_OK;
}

static int gpu_cmp(const void *a, const void *b) {
  const struct strata__gpu *x = a, *y = b;
  return x->sort_key < y->sort_key ? -1 : x->sort_key > y->sort_key;
}

static void describe_host(struct strata_topology *t, hwloc_topology_t hw) {
  struct strata_topology_host *h = &t->host;
  memset(h, 0, sizeof *h);
  h->packages = hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_PACKAGE);
  h->numa_nodes = hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_NUMANODE);
  h->cores = hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_CORE);
  h->pus = hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_PU);
  for (int i = 0; i < h->numa_nodes; i++) {
    hwloc_obj_t n = hwloc_get_obj_by_type(hw, HWLOC_OBJ_NUMANODE, (unsigned)i);
    if (n)
      h->memory += n->attr->numanode.local_memory;
  }
  hwloc_obj_t pkg = hwloc_get_obj_by_type(hw, HWLOC_OBJ_PACKAGE, 0);
  const char *model = pkg ? hwloc_obj_get_info_by_name(pkg, "CPUModel") : NULL;
  if (model)
    strata__escape(h->cpu_model, sizeof h->cpu_model, model);
  const char *host = hwloc_obj_get_info_by_name(hwloc_get_root_obj(hw), "HostName");
  if (host)
    strata__escape(h->hostname, sizeof h->hostname, host);
}

/*
** Walk every PCI device, then the GPU OS devices that hang elsewhere, and
** build t->gpus sorted by PCI bus id (partitions in order, devices without
** a PCI identity last, in tree order).
*/
int strata__topo_discover(struct strata_topology *t, hwloc_topology_t hw) {
  int cap = 0, order = 0, rc;
  describe_host(t, hw);
  for (hwloc_obj_t pci = hwloc_get_next_pcidev(hw, NULL); pci; pci = hwloc_get_next_pcidev(hw, pci)) {
    hwloc_obj_t osdevs[64];
    int n = 0;
    for (hwloc_obj_t c = pci->io_first_child; c && n < 64; c = c->next_sibling)
      if (c->type == HWLOC_OBJ_OS_DEVICE)
        osdevs[n++] = c;
    if ((rc = add_device(t, hw, pci, osdevs, n, &cap, &order)) != STRATA_OK)
      return rc;
  }
  /* GPU OS devices whose parent is not a PCI device, grouped by parent */
  for (hwloc_obj_t o = hwloc_get_next_osdev(hw, NULL); o; o = hwloc_get_next_osdev(hw, o)) {
    if (!o->parent || o->parent->type == HWLOC_OBJ_PCI_DEVICE || osdev_family(o) == FAM_NONE)
      continue;
    int first = 1;
    for (hwloc_obj_t p = hwloc_get_next_osdev(hw, NULL); p != o; p = hwloc_get_next_osdev(hw, p))
      if (p->parent == o->parent && osdev_family(p) != FAM_NONE)
        first = 0;
    if (!first)
      continue;
    hwloc_obj_t osdevs[64];
    int n = 0;
    for (hwloc_obj_t c = o->parent->io_first_child; c && n < 64; c = c->next_sibling)
      if (c->type == HWLOC_OBJ_OS_DEVICE)
        osdevs[n++] = c;
    if ((rc = add_device(t, hw, NULL, osdevs, n, &cap, &order)) != STRATA_OK)
      return rc;
  }
  if (t->ngpus > 1)
    qsort(t->gpus, (size_t)t->ngpus, sizeof *t->gpus, gpu_cmp);
  for (int i = 0; i < t->ngpus; i++)
    t->gpus[i].pub.index = i;
  return STRATA_OK;
}
