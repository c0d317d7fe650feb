/* SPDX-License-Identifier: MIT */
/* links.c — the link model: path kind of every ordered pair from the hwloc tree, nominal bandwidth and latency, and the islands of fastest links. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "core/parse.h"
#include "core/core.h"

static const double kind_latency_us[STRATA_PATH_KIND_COUNT] = STRATA__LATENCY_US_INIT;

double strata__topo_latency(const struct strata_topology *t, int kind) {
  if (kind == STRATA_PATH_NET)
    return t->opts.net_latency_us;
  if (kind < 0 || kind >= STRATA_PATH_KIND_COUNT)
    return 0;
  return kind_latency_us[kind];
}

/*
** One figure: the caller's when given (> 0), else STRATA_TOPO_*=value from
** the environment (a finite positive decimal, through the one number
** parser: nan, inf, hex or junk are an error, not replaced in silence),
** else the default.
*/
static int resolve_one(double *v, const char *env_name, double fallback) {
  if (*v != 0 && !(isfinite(*v) && *v > 0))
    return strata__error(STRATA_ERR_RANGE, "topology option %s: %g is not a finite positive figure", env_name, *v);
  if (*v > 0)
    return STRATA_OK;
  const char *env = getenv(env_name);
  if (env && *env) {
    int rc = strata__parse_real(env, 0, 1e9, STRATA__PARSE_ABOVE_MIN, v);
    if (rc)
      return strata__error(rc, "%s='%s' is not a positive number: %s", env_name, env, strata__parse_why());
    return STRATA_OK;
  }
  *v = fallback;
  return STRATA_OK;
}

int strata__topo_resolve_options(struct strata_topology_options *o) {
  TRY(resolve_one(&o->socket_gbps, "STRATA_TOPO_SOCKET_GBPS", STRATA__SOCKET_DEFAULT_GBPS));
  TRY(resolve_one(&o->numa_gbps, "STRATA_TOPO_NUMA_GBPS", STRATA__NUMA_DEFAULT_GBPS));
  TRY(resolve_one(&o->net_gbps, "STRATA_TOPO_NET_GBPS", STRATA__NET_DEFAULT_GBPS));
  return resolve_one(&o->net_latency_us, "STRATA_TOPO_NET_LATENCY_US", STRATA__NET_DEFAULT_LATENCY_US);
}

/* The I/O object that stands for a GPU in the tree. */
static hwloc_obj_t gpu_obj(const struct strata__gpu *g) {
  return g->pcidev ? g->pcidev : (g->nosdevs ? g->osdevs[0] : NULL);
}

/* min over known (> 0) speeds */
static double narrower(double a, double b) {
  if (a <= 0)
    return b;
  if (b <= 0)
    return a;
  return a < b ? a : b;
}

/*
** The PCIe speed of the link above `o`, 0 when unknown or not its own.
** A port reports the link it sits on: a device or a switch upstream port
** (bridge depth 2, 4, ...) the link above it, but a root port (depth 1) or
** a switch downstream port (odd depth) the link below it, which the device
** under it reports already. So only devices and upstream ports count.
*/
double strata__topo_up_speed(hwloc_obj_t o) {
  if (o->type == HWLOC_OBJ_PCI_DEVICE)
    return o->attr->pcidev.linkspeed;
  if (o->type == HWLOC_OBJ_BRIDGE && o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI &&
      o->attr->bridge.depth >= 2 && o->attr->bridge.depth % 2 == 0)
    return o->attr->bridge.upstream.pci.linkspeed;
  return 0;
}

static int is_host_bridge(hwloc_obj_t o) {
  return o->type == HWLOC_OBJ_BRIDGE && o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST;
}

/*
** Climb from `o` to `stop` (exclusive; NULL: up to the first non-I/O
** object): the narrowest upstream link on the way and the number of
** bridges passed strictly between `o` and `stop`.
*/
static double climb(hwloc_obj_t o, hwloc_obj_t stop, int *bridges) {
  double narrow = 0;
  *bridges = 0;
  for (hwloc_obj_t p = o; p && p != stop && hwloc_obj_type_is_io(p->type); p = p->parent) {
    narrow = narrower(narrow, strata__topo_up_speed(p));
    if (p != o && p->type == HWLOC_OBJ_BRIDGE)
      (*bridges)++;
  }
  return narrow;
}

/* The lowest common ancestor of a and b. */
static hwloc_obj_t common_ancestor(hwloc_obj_t a, hwloc_obj_t b) {
  for (hwloc_obj_t x = a; x; x = x->parent)
    for (hwloc_obj_t y = b; y; y = y->parent)
      if (x == y)
        return x;
  return NULL;
}

/*
** The PCI/NUMA/socket kind of the path between two GPUs and its
** narrowest PCIe hop. Partitions of one PCI device share its link (PIX).
*/
static int pci_path(const struct strata__gpu *a, const struct strata__gpu *b, double *narrow) {
  hwloc_obj_t oa = gpu_obj(a), ob = gpu_obj(b);
  int ba = 0, bb = 0;
  *narrow = 0;
  if (!oa || !ob)
    return STRATA_PATH_SYS;
  if (oa == ob) {
    *narrow = strata__topo_up_speed(oa);
    return STRATA_PATH_PIX;
  }
  hwloc_obj_t lca = common_ancestor(oa, ob);
  if (lca && lca->type == HWLOC_OBJ_BRIDGE) {
    *narrow = narrower(climb(oa, lca, &ba), climb(ob, lca, &bb));
    if (is_host_bridge(lca))
      return STRATA_PATH_PHB;
    return (ba <= 1 && bb <= 1) ? STRATA_PATH_PIX : STRATA_PATH_PXB;
  }
  if (lca && lca->type == HWLOC_OBJ_PCI_DEVICE) {
    *narrow = narrower(climb(oa, lca, &ba), climb(ob, lca, &bb));
    return STRATA_PATH_PIX;
  }
  *narrow = narrower(climb(oa, NULL, &ba), climb(ob, NULL, &bb));
  if (a->pub.numa_node == b->pub.numa_node && (a->pub.numa_node >= 0 || a->anchor == b->anchor))
    return STRATA_PATH_NODE;
  if (a->pub.package >= 0 && a->pub.package == b->pub.package)
    return STRATA_PATH_NUMA;
  return STRATA_PATH_SYS;
}

/*
** Compute the PCI kind and narrowest hop of every GPU pair and of every
** GPU with the host, into freshly allocated arrays; then the figures and
** the islands.
*/
int strata__topo_compute_paths(struct strata_topology *t, hwloc_topology_t hw) {
  (void)hw;
  size_t n = (size_t)t->ngpus + 1;
  t->links = calloc(n * n, sizeof *t->links);
  t->narrow_gbps = calloc(n * n, sizeof *t->narrow_gbps);
  t->pcie_kind = calloc(n * n, sizeof *t->pcie_kind);
  if (!t->links || !t->narrow_gbps || !t->pcie_kind)
    return strata__error(STRATA_ERR_NOMEM, "topology: out of memory");
  size_t h = n - 1;
  for (size_t a = 0; a < h; a++) {
    for (size_t b = 0; b < h; b++) {
      if (a == b) {
        t->pcie_kind[a * n + b] = STRATA_PATH_SELF;
        continue;
      }
      double narrow;
      t->pcie_kind[a * n + b] = pci_path(&t->gpus[a], &t->gpus[b], &narrow);
      t->narrow_gbps[a * n + b] = narrow;
    }
    int bridges;
    hwloc_obj_t o = gpu_obj(&t->gpus[a]);
    double narrow = o ? climb(o, NULL, &bridges) : 0;
    t->pcie_kind[a * n + h] = t->pcie_kind[h * n + a] = STRATA_PATH_PHB;
    t->narrow_gbps[a * n + h] = t->narrow_gbps[h * n + a] = narrow;
  }
  t->pcie_kind[h * n + h] = STRATA_PATH_SELF;
  strata__topo_compute_figures(t);
  return strata__topo_compute_islands(t);
}

/* NVLink bandwidth of one link and direction for a GPU model. */
static double nvlink_per_link(const char *model) {
  if (strstr(model, "P100"))
    return STRATA__NVLINK1_GBPS;
  if (strstr(model, "B100") || strstr(model, "B200") || strstr(model, "GB200") || strstr(model, "B300"))
    return STRATA__NVLINK5_GBPS;
  return STRATA__NVLINK_GBPS;
}

static int link_count(double gbps, double per_link) {
  long k = lround(gbps / per_link);
  return k < 1 ? 1 : (int)k;
}

/* Round to 1/100 GB/s so that printed and compared figures are stable. */
static double round2(double x) {
  return round(x * 100.0) / 100.0;
}

/*
** Nominal figures from the stored kinds, narrowest hops, fabric matrix
** and options: fabric links from the matrix; PIX/PXB at the narrowest
** PCIe hop; through a root complex at STRATA__PHB_EFFICIENCY of it; across
** NUMA nodes or sockets bounded by the user's (or default) figure for that
** interconnect and derated.
*/
void strata__topo_compute_figures(struct strata_topology *t) {
  size_t n = (size_t)t->ngpus + 1, h = n - 1;
  for (size_t a = 0; a < n; a++) {
    for (size_t b = 0; b < n; b++) {
      struct strata_link *l = &t->links[a * n + b];
      double measured = l->measured_gbps;
      memset(l, 0, sizeof *l);
      l->measured_gbps = measured;
      int kind = t->pcie_kind[a * n + b];
      double narrow = t->narrow_gbps[a * n + b];
      int known = narrow > 0;
      if (!known)
        narrow = STRATA__PCIE_DEFAULT_GBPS;
      double fabric = (a < h && b < h) ? t->fabric_gbps[a * (n - 1) + b] : 0;
      const struct strata__gpu *g = a < h ? &t->gpus[a] : (b < h ? &t->gpus[b] : NULL);
      if (a == b) {
        l->kind = STRATA_PATH_SELF;
        if (a == h) {
          l->nominal_gbps = STRATA__MEMCPY_GBPS;
          l->source = STRATA_LINK_SOURCE_DEFAULT;
        }
      } else if (fabric > 0 && t->fabric_kind >= 0) {
        l->kind = t->fabric_kind;
        l->nominal_gbps = fabric;
        l->source = STRATA_LINK_SOURCE_MATRIX;
        l->nlinks = link_count(fabric, t->fabric_kind == STRATA_PATH_NVLINK ? nvlink_per_link(g->pub.name)
                                                                             : STRATA__XGMI_LINK_GBPS);
      } else if ((a == h || b == h) && g && g->host_nvlink_gbps > 0) {
        l->kind = STRATA_PATH_NVLINK;
        l->nominal_gbps = g->host_nvlink_gbps;
        l->source = STRATA_LINK_SOURCE_MATRIX;
        l->nlinks = link_count(g->host_nvlink_gbps, nvlink_per_link(g->pub.name));
      } else if (a == h || b == h) {
        l->kind = STRATA_PATH_PHB; /* DMA to the GPU's local memory runs at the link rate */
        l->nominal_gbps = narrow;
        l->source = known ? STRATA_LINK_SOURCE_PCIE : STRATA_LINK_SOURCE_DEFAULT;
      } else {
        l->kind = kind;
        l->source = known ? STRATA_LINK_SOURCE_PCIE : STRATA_LINK_SOURCE_DEFAULT;
        switch (kind) {
        case STRATA_PATH_PIX:
        case STRATA_PATH_PXB: l->nominal_gbps = narrow; break;
        case STRATA_PATH_PHB:
        case STRATA_PATH_NODE: l->nominal_gbps = narrow * STRATA__PHB_EFFICIENCY; break;
        case STRATA_PATH_NUMA:
          if (t->opts.numa_gbps < narrow)
            l->source = STRATA_LINK_SOURCE_DEFAULT;
          l->nominal_gbps = narrower(narrow, t->opts.numa_gbps) * STRATA__NUMA_EFFICIENCY;
          break;
        case STRATA_PATH_SYS:
          if (t->opts.socket_gbps < narrow)
            l->source = STRATA_LINK_SOURCE_DEFAULT;
          l->nominal_gbps = narrower(narrow, t->opts.socket_gbps) * STRATA__SYS_EFFICIENCY;
          break;
        default:
          l->nominal_gbps = t->opts.net_gbps;
          l->source = STRATA_LINK_SOURCE_DEFAULT;
          break;
        }
      }
      l->nominal_gbps = round2(l->nominal_gbps);
      l->latency_us = strata__topo_latency(t, l->kind);
      l->gbps = l->nominal_gbps;
    }
  }
}

static int uf_find(int *parent, int x) {
  while (parent[x] != x)
    x = parent[x] = parent[parent[x]];
  return x;
}

/*
** Islands. Each GPU's best kind is the best kind of its links to the
** others. Two GPUs are joined when their link is of both GPUs' best kind
** and that kind is no worse than NODE (a shared fabric, PCIe switch or
** host bridge; crossing NUMA nodes or sockets never makes an island).
** Islands are the connected groups, numbered by their smallest GPU.
*/
int strata__topo_compute_islands(struct strata_topology *t) {
  int n = t->ngpus, stride = n + 1;
  for (int i = 0; i < t->nislands; i++)
    free(t->islands[i].gpus);
  free(t->islands);
  free(t->gpu_island);
  t->islands = NULL;
  t->gpu_island = NULL;
  t->nislands = 0;
  if (n == 0)
    return STRATA_OK;
  int *best = malloc((size_t)n * sizeof *best);
  int *parent = malloc((size_t)n * sizeof *parent);
  t->gpu_island = malloc((size_t)n * sizeof *t->gpu_island);
  t->islands = calloc((size_t)n, sizeof *t->islands);
  if (!best || !parent || !t->gpu_island || !t->islands) {
    free(best);
    free(parent);
    return strata__error(STRATA_ERR_NOMEM, "topology: out of memory");
  }
  for (int a = 0; a < n; a++) {
    parent[a] = a;
    best[a] = STRATA_PATH_KIND_COUNT;
    for (int b = 0; b < n; b++)
      if (a != b && t->links[a * stride + b].kind < best[a])
        best[a] = t->links[a * stride + b].kind;
  }
  for (int a = 0; a < n; a++)
    for (int b = a + 1; b < n; b++) {
      int k = t->links[a * stride + b].kind;
      if (t->links[b * stride + a].kind > k)
        k = t->links[b * stride + a].kind;
      if (k == best[a] && k == best[b] && k <= STRATA_PATH_NODE)
        parent[uf_find(parent, b)] = uf_find(parent, a);
    }
  /* GPUs are visited in order, so islands are numbered by their smallest GPU; best[] is reused as root -> island */
  int rc = STRATA_OK;
  for (int a = 0; a < n; a++)
    best[a] = -1;
  for (int a = 0; a < n; a++) {
    int root = uf_find(parent, a);
    if (best[root] < 0) {
      struct strata__island *is = &t->islands[t->nislands];
      is->gpus = malloc((size_t)n * sizeof *is->gpus);
      if (!is->gpus) {
        rc = strata__error(STRATA_ERR_NOMEM, "topology: out of memory");
        break;
      }
      best[root] = t->nislands++;
    }
    struct strata__island *is = &t->islands[best[root]];
    t->gpu_island[a] = best[root];
    is->gpus[is->size++] = a;
  }
  free(best);
  free(parent);
  if (rc)
    return rc;
  for (int i = 0; i < t->nislands; i++) {
    struct strata__island *is = &t->islands[i];
    is->kind = STRATA_PATH_SELF;
    is->nlinks = 0;
    is->gbps = 0;
    for (int x = 0; x < is->size; x++)
      for (int y = 0; y < is->size; y++) {
        if (x == y)
          continue;
        const struct strata_link *l = &t->links[is->gpus[x] * stride + is->gpus[y]];
        if (is->kind == STRATA_PATH_SELF || l->kind > is->kind)
          is->kind = l->kind;
        if (is->gbps == 0 || l->nominal_gbps < is->gbps)
          is->gbps = l->nominal_gbps;
        if (l->nlinks && (is->nlinks == 0 || l->nlinks < is->nlinks))
          is->nlinks = l->nlinks;
      }
  }
  return STRATA_OK;
}
