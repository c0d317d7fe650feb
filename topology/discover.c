/* SPDX-License-Identifier: MIT */
/* discover.c — find the GPUs of an hwloc topology (OS devices and PCI devices, one entry per physical GPU or partition) and describe the host. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"
#include "core/core.h"

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

/*
** Onboard server graphics: the VGA chips of baseboard management
** controllers and server boards, which carry a display class (and for the
** ATI ones a GPU vendor) but are no compute devices. By PCI vendor and
** device id (0xffff: every device of that vendor), from the PCI ID
** database (pci.ids).
*/
static const struct {
  unsigned vendor, device;
} bmc_vga_ids[] = {
    {0x1002, 0x4752}, /* ATI Rage XL (older Dell/HP/Supermicro servers) */
    {0x1002, 0x5159}, /* ATI RV100 QY Radeon 7000/VE (HP ProLiant, IBM x-series) */
    {0x1002, 0x515e}, /* ATI ES1000 (RN50, Dell PowerEdge, IBM/HP servers) */
    {0x102b, 0xffff}, /* Matrox: G200e, G200eW, G200eH, G200eR ... (server boards, iDRAC/iLO) */
    {0x1a03, 0xffff}, /* ASPEED AST1x00/AST2x00 BMC graphics */
    {0x19e5, 0x1711}, /* Huawei Hi1710 iBMC graphics */
    {0x18ca, 0x0020}, /* XGI Z7/Z9 (older Supermicro/Tyan boards) */
    {0x103c, 0x3306}, /* HP iLO3/iLO4 integrated graphics */
};

static int bmc_vga(unsigned vendor, unsigned device) {
  for (size_t i = 0; i < sizeof bmc_vga_ids / sizeof *bmc_vga_ids; i++)
    if (bmc_vga_ids[i].vendor == vendor && (bmc_vga_ids[i].device == 0xffff || bmc_vga_ids[i].device == device))
      return 1;
  return 0;
}

/* Display (03xx) or processing-accelerator (1200, MI300A) class. */
static int gpu_class(unsigned c) {
  return c == 0x0300 || c == 0x0302 || c == 0x0380 || c == 0x1200;
}

/* A PCI device that is a GPU by vendor and class: NVIDIA, AMD or Intel,
** class VGA (0300), 3D (0302), display (0380) or processing accelerator
** (1200, MI300A), and not an onboard BMC VGA chip. */
static int pci_is_gpu(hwloc_obj_t o) {
  unsigned v = o->attr->pcidev.vendor_id;
  if (v != 0x10de && v != 0x1002 && v != 0x8086)
    return 0;
  return gpu_class(o->attr->pcidev.class_id) && !bmc_vga(v, o->attr->pcidev.device_id);
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

/*
** NUMA node, package and CPU set of the non-I/O ancestor `anchor`. The
** node comes from the complete nodeset, which keeps the nodes a cgroup
** leaves out of this process's allowed set (hwloc removes their objects
** and clears them from `nodeset`); numa_outside_allowed() says so.
*/
static void place_gpu(hwloc_topology_t hw, struct strata__gpu *g) {
  hwloc_obj_t a = g->anchor;
  g->pub.numa_node = -1;
  g->pub.package = -1;
  g->pub.cpuset[0] = '\0';
  if (!a)
    return;
  if (a->complete_nodeset && !hwloc_bitmap_iszero(a->complete_nodeset))
    g->pub.numa_node = hwloc_bitmap_first(a->complete_nodeset); /* nearest: the lowest of the local ones */
  else if (a->nodeset && !hwloc_bitmap_iszero(a->nodeset))
    g->pub.numa_node = hwloc_bitmap_first(a->nodeset);
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
    if (f == FAM_NONE || nfam[f] >= 64)
      continue;
    /* one OS device listed twice (a duplicated object in the dump) is still one */
    int dup = 0;
    for (int k = 0; k < nfam[f] && !dup; k++)
      dup = strcmp(fam[f][k]->name, osdevs[i]->name) == 0;
    if (!dup)
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
  if (pci && bmc_vga(pci->attr->pcidev.vendor_id, pci->attr->pcidev.device_id))
    return STRATA_OK; /* even with an OS device that looks like a GPU's */
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

/* The PCI address of a device as one number (domain, bus, device, function). */
static uint64_t pci_addr(hwloc_obj_t o) {
  const struct hwloc_pcidev_attr_s *pa = &o->attr->pcidev;
  return ((uint64_t)pa->domain << 24) | ((uint64_t)pa->bus << 16) | ((uint64_t)pa->dev << 8) | pa->func;
}

/* Parse "dddd:bb:dd.f" or "bb:dd.f" into pci_addr()'s form; 0 with *ok = 0 when it is neither. */
static uint64_t busid_addr(const char *s, int *ok) {
  unsigned d = 0, b = 0, dev = 0, f = 0;
  char tail;
  *ok = s && (sscanf(s, "%x:%x:%x.%x%c", &d, &b, &dev, &f, &tail) == 4 ||
              (d = 0, sscanf(s, "%x:%x.%x%c", &b, &dev, &f, &tail) == 3));
  return *ok ? ((uint64_t)d << 24) | ((uint64_t)(b & 0xff) << 16) | ((uint64_t)(dev & 0x1f) << 8) | (f & 7) : 0;
}

/*
** A CPU-less NUMA node that says nothing of itself: no subtype, no owner.
** An hwloc 1.x export gives it an empty CPU set; hwloc 2.x attaches it to
** the root object, whose CPU set it then carries, while the nodes with
** CPUs hang lower (a box whose every node with CPUs is at the root, as a
** 1.x export's host node is, says nothing).
*/
static int unmarked_cpuless(hwloc_topology_t hw, hwloc_obj_t n) {
  if (n->subtype || hwloc_obj_get_info_by_name(n, "PCIBusID"))
    return 0;
  if (!n->cpuset || hwloc_bitmap_iszero(n->cpuset))
    return 1;
  hwloc_obj_t root = hwloc_get_root_obj(hw);
  if (n->parent != root)
    return 0;
  for (hwloc_obj_t o = hwloc_get_next_obj_by_type(hw, HWLOC_OBJ_NUMANODE, NULL); o;
       o = hwloc_get_next_obj_by_type(hw, HWLOC_OBJ_NUMANODE, o))
    if (o->parent != root && o->cpuset && !hwloc_bitmap_iszero(o->cpuset))
      return 1;
  return 0;
}

/*
** The order in which GPU-memory NUMA nodes follow the GPUs, read from the
** nodes that name their GPU: +1 when GPU k's node is the k-th lowest of
** them all (named and unnamed together), -1 when it is the k-th highest,
** 0 when no node names its GPU or the named ones fit neither order or both.
*/
static int owner_order(const struct strata_topology *t, hwloc_topology_t hw, const char *is_gpu_mem, int nnodes) {
  int up = 1, down = 1, named = 0;
  for (int g = 0; g < t->ngpus; g++) {
    int node = t->gpus[g].pub.memory_numa_node;
    if (node < 0)
      continue;
    int rank = 0, total = 0; /* rank of the GPU's node among all the GPU-memory nodes */
    for (int i = 0; i < nnodes; i++) {
      hwloc_obj_t n = hwloc_get_obj_by_type(hw, HWLOC_OBJ_NUMANODE, (unsigned)i);
      if (!is_gpu_mem[i] && !unmarked_cpuless(hw, n))
        continue;
      total++;
      rank += (int)n->os_index < node;
    }
    if (total != t->ngpus) /* not one node a GPU: no order to read */
      return 0;
    named++;
    up &= rank == g;
    down &= rank == t->ngpus - 1 - g;
  }
  return named == 0 || up == down ? 0 : up ? 1 : -1;
}

/*
** NUMA nodes that hold GPU memory rather than host RAM (IBM POWER9 with
** NVLink-attached GPUs): those hwloc marks with subtype "GPUMemory" or a
** "PCIBusID" info naming the GPU, and CPU-less nodes that say nothing
** (hwloc 1.x exports mark none) when there are exactly as many of them as
** GPUs still without one. Those are handed out in an order: the one the
** nodes that name their GPU show, when some do and they agree; otherwise
** the order of the AC922 dumps, downward (GPU0 takes the highest OS index,
** as the dump that names its owners numbers them), which is an assumption
** and said so. Sets is_gpu_mem[i] for the i-th NUMA node and each owning
** GPU's memory_numa_node (and memory, when unknown).
*/
static void find_gpu_memory(struct strata_topology *t, hwloc_topology_t hw, char *is_gpu_mem, int nnodes) {
  int candidates = 0, unowned = 0;
  for (int i = 0; i < t->ngpus; i++)
    t->gpus[i].pub.memory_numa_node = -1;
  for (int i = 0; i < nnodes; i++) {
    hwloc_obj_t n = hwloc_get_obj_by_type(hw, HWLOC_OBJ_NUMANODE, (unsigned)i);
    const char *busid = hwloc_obj_get_info_by_name(n, "PCIBusID");
    int marked = n->subtype && strcasecmp(n->subtype, "GPUMemory") == 0;
    int ok = 0;
    uint64_t addr = busid_addr(busid, &ok);
    if (!marked && !ok) {
      if (unmarked_cpuless(hw, n))
        candidates++;
      continue;
    }
    is_gpu_mem[i] = 1;
    struct strata__gpu *owner = NULL;
    for (int g = 0; g < t->ngpus && ok; g++)
      if (t->gpus[g].pcidev && pci_addr(t->gpus[g].pcidev) == addr && t->gpus[g].pub.partition == 0)
        owner = &t->gpus[g];
    if (owner) {
      owner->pub.memory_numa_node = (int)n->os_index;
      if (!owner->pub.memory)
        owner->pub.memory = n->attr->numanode.local_memory;
    } else {
      strata__topo_warn(t, "NUMA node P#%u holds GPU memory (%s%s) of no GPU found here: not counted as host RAM",
                        n->os_index, busid ? "PCI bus id " : "subtype GPUMemory", busid ? busid : "");
    }
  }
  for (int g = 0; g < t->ngpus; g++)
    if (t->gpus[g].pub.memory_numa_node < 0)
      unowned++;
  if (candidates == 0 || candidates != unowned)
    return;
  const int shown = owner_order(t, hw, is_gpu_mem, nnodes);
  const int order = shown ? shown : -1;
  int lo = -1, hi = -1, firstg = -1, lastg = -1;
  for (int g = 0; g < t->ngpus; g++) {
    if (t->gpus[g].pub.memory_numa_node >= 0)
      continue;
    int pick = -1; /* the lowest (upward) or highest (downward) node left */
    for (int i = 0; i < nnodes; i++) {
      hwloc_obj_t n = hwloc_get_obj_by_type(hw, HWLOC_OBJ_NUMANODE, (unsigned)i);
      if (is_gpu_mem[i] || !unmarked_cpuless(hw, n))
        continue;
      unsigned best = pick < 0 ? 0 : hwloc_get_obj_by_type(hw, HWLOC_OBJ_NUMANODE, (unsigned)pick)->os_index;
      if (pick < 0 || (order > 0 ? n->os_index < best : n->os_index > best))
        pick = i;
    }
    if (pick < 0)
      break;
    hwloc_obj_t n = hwloc_get_obj_by_type(hw, HWLOC_OBJ_NUMANODE, (unsigned)pick);
    is_gpu_mem[pick] = 1;
    t->gpus[g].pub.memory_numa_node = (int)n->os_index;
    if (!t->gpus[g].pub.memory)
      t->gpus[g].pub.memory = n->attr->numanode.local_memory;
    if (lo < 0 || (int)n->os_index < lo)
      lo = (int)n->os_index;
    if ((int)n->os_index > hi)
      hi = (int)n->os_index;
    if (firstg < 0)
      firstg = g;
    lastg = g;
  }
  if (firstg < 0)
    return;
  const int first_node = t->gpus[firstg].pub.memory_numa_node;
  if (shown)
    strata__topo_warn(t,
                      "NUMA nodes P#%d..P#%d have no CPUs and do not say whose they are: taken as the memory of "
                      "GPUs %d..%d in %s order (GPU%d on P#%d), the order the NUMA nodes that name their GPU "
                      "show; not host RAM",
                      lo, hi, firstg, lastg, order > 0 ? "ascending" : "descending", firstg, first_node);
  else
    strata__topo_warn(t,
                      "NUMA nodes P#%d..P#%d have no CPUs and do not say whose they are: taken as the memory of "
                      "GPUs %d..%d in descending order (GPU%d on P#%d), an assumed order: the one of the IBM AC922 "
                      "dump that names its GPUs%s; not host RAM",
                      lo, hi, firstg, lastg, firstg, first_node,
                      unowned == t->ngpus ? "" : " (those here that name theirs do not decide it)");
}

static void describe_host(struct strata_topology *t, hwloc_topology_t hw, const char *is_gpu_mem) {
  struct strata_topology_host *h = &t->host;
  memset(h, 0, sizeof *h);
  h->packages = hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_PACKAGE);
  int nnodes = hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_NUMANODE);
  h->cores = hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_CORE);
  h->pus = hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_PU);
  for (int i = 0; i < nnodes; i++) {
    hwloc_obj_t n = hwloc_get_obj_by_type(hw, HWLOC_OBJ_NUMANODE, (unsigned)i);
    if (!n)
      continue;
    if (is_gpu_mem && is_gpu_mem[i]) {
      h->gpu_numa_nodes++;
      continue;
    }
    h->numa_nodes++;
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
** PCIe links in a power-saving state. An idle GPU retrains its own link
** to a lower speed (NVIDIA and AMD drivers drop to Gen1, some to x1), and
** hwloc records the speed of the moment: a Gen3 x16 GPU may show 4 or
** 1 GB/s. Switch links above it are not retrained that way, and a narrow
** one there is real (IBM AC922: x4 switch uplinks). The policy: a GPU's
** own link recorded at less than half of the fastest of (the switch links
** above it, the own links of the same GPU model elsewhere in the box) is
** taken as power-saving and planned at that figure, capped by the
** narrowest switch link above it. The figure is changed once, in the
** hwloc object, so the GPU's own link and every path through it agree;
** each change is a warning. strata-topo --measure gives the real figures.
*/
static void power_saving_links(struct strata_topology *t) {
  for (int g = 0; g < t->ngpus; g++) {
    struct strata__gpu *gp = &t->gpus[g];
    if (!gp->pcidev || gp->pub.partition > 0)
      continue;
    double own = gp->pcidev->attr->pcidev.linkspeed;
    if (!(own > 0))
      continue;
    double above = 0, narrowest = 0, model = 0;
    for (hwloc_obj_t o = gp->pcidev->parent; o && hwloc_obj_type_is_io(o->type); o = o->parent) {
      double s = strata__topo_up_speed(o);
      if (s > above)
        above = s;
      if (s > 0 && (narrowest == 0 || s < narrowest))
        narrowest = s;
    }
    for (int o = 0; o < t->ngpus; o++) {
      const struct strata__gpu *og = &t->gpus[o];
      if (og->pcidev && og->pcidev != gp->pcidev && og->pub.vendor_id == gp->pub.vendor_id &&
          og->pub.device_id == gp->pub.device_id && og->pcidev->attr->pcidev.linkspeed > model)
        model = og->pcidev->attr->pcidev.linkspeed;
    }
    double against = above > model ? above : model;
    if (!(own < against / 2))
      continue;
    double repl = narrowest > 0 && narrowest < against ? narrowest : against;
    if (repl < own)
      repl = own;
    strata__topo_warn(t,
                      "GPU%d (%s): its own PCIe link is recorded at %.2f GB/s, under half of the %.2f GB/s %s: "
                      "taken as a power-saving state (an idle GPU retrains its link) and planned at %.2f GB/s; "
                      "strata-topo --measure measures it",
                      g, gp->pub.pci_bus_id, own, against,
                      model > above ? "of the same GPU model elsewhere in the box" : "of the switch links above it",
                      repl);
    gp->pcidev->attr->pcidev.linkspeed = (float)repl;
    for (int k = g; k < t->ngpus; k++)
      if (t->gpus[k].pcidev == gp->pcidev)
        t->gpus[k].pub.pcie_gbps = repl;
  }
}

/*
** Devices that look like GPUs but are not counted: a display or
** accelerator class with a vendor strata does not know (a zeroed vendor
** id, as some dumps have), which deserve a warning when they have GPU
** memory attached or no vendor at all. Onboard BMC graphics stay silent.
*/
static void warn_missed(struct strata_topology *t, hwloc_topology_t hw) {
  for (hwloc_obj_t pci = hwloc_get_next_pcidev(hw, NULL); pci; pci = hwloc_get_next_pcidev(hw, pci)) {
    const struct hwloc_pcidev_attr_s *pa = &pci->attr->pcidev;
    if (!gpu_class(pa->class_id) || bmc_vga(pa->vendor_id, pa->device_id))
      continue;
    int counted = 0;
    for (int g = 0; g < t->ngpus && !counted; g++)
      counted = t->gpus[g].pcidev && pci_addr(t->gpus[g].pcidev) == pci_addr(pci);
    if (counted)
      continue;
    int numa = -1;
    for (hwloc_obj_t n = hwloc_get_next_obj_by_type(hw, HWLOC_OBJ_NUMANODE, NULL); n && numa < 0;
         n = hwloc_get_next_obj_by_type(hw, HWLOC_OBJ_NUMANODE, n)) {
      int ok = 0;
      uint64_t addr = busid_addr(hwloc_obj_get_info_by_name(n, "PCIBusID"), &ok);
      if (ok && addr == pci_addr(pci))
        numa = (int)n->os_index;
    }
    if (numa < 0 && pa->vendor_id != 0)
      continue;
    char mem[64] = "";
    if (numa >= 0)
      snprintf(mem, sizeof mem, ", though NUMA node P#%d holds its memory", numa);
    strata__topo_warn(t,
                      "PCI device %04x:%02x:%02x.%x, class %04x [%04x:%04x], looks like a GPU but is not counted: "
                      "unknown vendor%s",
                      (unsigned)pa->domain, (unsigned)pa->bus, (unsigned)pa->dev, (unsigned)pa->func,
                      (unsigned)pa->class_id, (unsigned)pa->vendor_id, (unsigned)pa->device_id, mem);
  }
}

/* Whether a PCIe link speed (GB/s, as hwloc computes it) is a Gen1 or Gen2 rate: 8b/10b lanes of 0.25 or 0.5
** GB/s, so a multiple of 0.25 up to Gen2 x16; Gen3 and later (128b/130b) are never one. */
static int gen1_or_gen2(double gbps) {
  double lanes = gbps * 4;
  return gbps > 0 && gbps <= 8.0 + 1e-6 && fabs(lanes - floor(lanes + 0.5)) < 1e-3;
}

/*
** The same power-saving states on the links above a GPU. A switch's
** upstream link or a device between the GPU and the root complex that
** idles trains down as a GPU's own link does, and its recorded speed then
** narrows every path through it (an EPYC node whose root-port links read
** 1.0 GB/s under 31.5 GB/s GPUs). A narrow link there can also be real
** (an AC922's x4 switch uplinks, Gen3 or Gen4: 3.94 or 7.88 GB/s), so the
** rule takes only a Gen1 or Gen2 rate — what an idle link falls to — under
** half of the GPU's own link (already corrected by power_saving_links) as
** power saving, and plans it at the GPU's own speed. Each link changes
** once, in the hwloc object (its GPUs' paths agree), with one warning.
*/
static void power_saving_uplinks(struct strata_topology *t) {
  for (int g = 0; g < t->ngpus; g++) {
    struct strata__gpu *gp = &t->gpus[g];
    if (!gp->pcidev || gp->pub.partition > 0)
      continue;
    const double own = gp->pcidev->attr->pcidev.linkspeed;
    if (!(own > 0) || gen1_or_gen2(own))
      continue;
    for (hwloc_obj_t o = gp->pcidev->parent; o && hwloc_obj_type_is_io(o->type); o = o->parent) {
      const double s = strata__topo_up_speed(o);
      if (!(s > 0) || !(s < own / 2) || !gen1_or_gen2(s))
        continue;
      /* a device's link and a bridge's upstream link are the same attribute (struct hwloc_pcidev_attr_s) */
      struct hwloc_pcidev_attr_s *a = o->type == HWLOC_OBJ_BRIDGE ? &o->attr->bridge.upstream.pci : &o->attr->pcidev;
      strata__topo_warn(t,
                        "GPU%d (%s): the PCIe link above it at %04x:%02x:%02x.%x is recorded at %.2f GB/s, a Gen1 or "
                        "Gen2 rate under half of the GPU's own %.2f GB/s: taken as a power-saving state (an idle link "
                        "trains down) and planned at %.2f GB/s for every GPU behind it; strata-topo --measure "
                        "measures it",
                        g, gp->pub.pci_bus_id, (unsigned)a->domain, (unsigned)a->bus, (unsigned)a->dev,
                        (unsigned)a->func, s, own, own);
      a->linkspeed = (float)own;
    }
  }
}

/*
** GPUs whose NUMA node lies outside this process's allowed set: a cgroup
** (a batch job's cpuset) that leaves a node out makes hwloc drop its
** object, and the GPU's ancestors keep it only in their complete nodeset.
** place_gpu() took the node from there; here each such GPU gets a warning
** naming it and the node. When the nodeset was cut but a GPU's ancestor
** names no node at all, the node cannot be recovered, and the warning
** says that instead. Nothing is said on a box without such a cut.
*/
static void numa_outside_allowed(struct strata_topology *t, hwloc_topology_t hw) {
  hwloc_const_nodeset_t allowed = hwloc_topology_get_allowed_nodeset(hw);
  hwloc_const_nodeset_t complete = hwloc_topology_get_complete_nodeset(hw);
  if (!allowed || !complete || hwloc_bitmap_isincluded(complete, allowed))
    return;
  for (int g = 0; g < t->ngpus; g++) {
    const struct strata__gpu *gp = &t->gpus[g];
    if (!gp->anchor)
      continue;
    const char *where = gp->pub.pci_bus_id[0] ? gp->pub.pci_bus_id : gp->pub.os_devices;
    if (gp->pub.numa_node < 0)
      strata__topo_warn(t,
                        "GPU%d (%s) has no NUMA node: this process's allowed set (cgroup) leaves NUMA nodes out "
                        "and hwloc does not say which one is the GPU's, so it cannot be recovered",
                        g, where);
    else if (!hwloc_bitmap_isset(allowed, (unsigned)gp->pub.numa_node))
      strata__topo_warn(t,
                        "NUMA node %d of GPU%d (%s) lies outside this process's allowed set (cgroup): "
                        "shown from hwloc's complete nodeset; this process cannot place memory there",
                        gp->pub.numa_node, g, where);
  }
}

/*
** Walk every PCI device (a bus id listed several times counts once, with
** the OS devices of all its copies), then the GPU OS devices that hang
** elsewhere, and build t->gpus sorted by PCI bus id (partitions in order,
** devices without a PCI identity last, in tree order). Then the passes
** that read the GPU list: NUMA nodes outside the allowed set, power-saving links, GPU memory in NUMA nodes,
** the host, devices that look like GPUs but are not counted.
*/
int strata__topo_discover(struct strata_topology *t, hwloc_topology_t hw) {
  int cap = 0, order = 0, rc;
  for (hwloc_obj_t pci = hwloc_get_next_pcidev(hw, NULL); pci; pci = hwloc_get_next_pcidev(hw, pci)) {
    int copies = 0, earlier = 0;
    for (hwloc_obj_t p = hwloc_get_next_pcidev(hw, NULL); p; p = hwloc_get_next_pcidev(hw, p))
      if (pci_addr(p) == pci_addr(pci)) {
        copies++;
        if (p == pci)
          earlier = copies > 1;
      }
    if (earlier)
      continue;
    hwloc_obj_t osdevs[64];
    int n = 0;
    for (hwloc_obj_t p = pci; p; p = hwloc_get_next_pcidev(hw, p)) {
      if (pci_addr(p) != pci_addr(pci))
        continue;
      for (hwloc_obj_t c = p->io_first_child; c && n < 64; c = c->next_sibling)
        if (c->type == HWLOC_OBJ_OS_DEVICE)
          osdevs[n++] = c;
    }
    int before = t->ngpus;
    if ((rc = add_device(t, hw, pci, osdevs, n, &cap, &order)) != STRATA_OK)
      return rc;
    if (copies > 1 && t->ngpus > before)
      strata__topo_warn(t, "PCI device %s appears %d times in the topology: taken as one device",
                        t->gpus[before].pub.pci_bus_id, copies);
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
  numa_outside_allowed(t, hw);
  power_saving_links(t);
  power_saving_uplinks(t);
  int nnodes = hwloc_get_nbobjs_by_type(hw, HWLOC_OBJ_NUMANODE);
  char *is_gpu_mem = calloc((size_t)(nnodes > 0 ? nnodes : 1), 1);
  if (!is_gpu_mem)
    return strata__error(STRATA_ERR_NOMEM, "topology: out of memory");
  find_gpu_memory(t, hw, is_gpu_mem, nnodes);
  describe_host(t, hw, is_gpu_mem);
  free(is_gpu_mem);
  warn_missed(t, hw);
  return t->warn_nomem ? strata__error(STRATA_ERR_NOMEM, "topology: out of memory") : STRATA_OK;
}
