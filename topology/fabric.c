/* SPDX-License-Identifier: MIT */
/* fabric.c — read the NVLink and xGMI bandwidth matrices of an hwloc topology into GPU-to-GPU and GPU-to-CPU figures, through NVSwitch fabrics too. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "core/core.h"

/* What one object of a matrix stands for. */
enum { END_OTHER, END_GPU, END_SWITCH, END_CPU };

/* The GPU entry an object of a matrix is (an OS device of it, or its PCI device when it has one GPU). */
static int gpu_of(const struct strata_topology *t, hwloc_obj_t o) {
  for (int i = 0; i < t->ngpus; i++) {
    const struct strata__gpu *g = &t->gpus[i];
    for (int k = 0; k < g->nosdevs; k++)
      if (g->osdevs[k] == o)
        return i;
    if (g->pcidev == o && g->pub.partition == 0 && (i + 1 >= t->ngpus || t->gpus[i + 1].pcidev != o))
      return i;
  }
  return -1;
}

static int end_kind(const struct strata_topology *t, hwloc_obj_t o, int *gpu) {
  *gpu = -1;
  if (!o)
    return END_OTHER;
  if ((*gpu = gpu_of(t, o)) >= 0)
    return END_GPU;
  if (o->type == HWLOC_OBJ_PCI_DEVICE || o->type == HWLOC_OBJ_BRIDGE)
    return END_SWITCH; /* NVSwitch ports (subtype "NVSwitch") and any other non-GPU fabric port */
  if (o->type == HWLOC_OBJ_PACKAGE || o->type == HWLOC_OBJ_NUMANODE || o->type == HWLOC_OBJ_MACHINE)
    return END_CPU;
  return END_OTHER;
}

static double mbps_to_gbps(hwloc_uint64_t v) {
  return (double)v / 1000.0;
}

/*
** Fold one bandwidth matrix into t->fabric_gbps. Direct GPU-GPU values
** are taken as they are (the diagonal is ignored). Switch ports are
** merged first: a GPU's bandwidth into the switch fabric is the sum of its
** links to every port; only when that merge found at least two GPUs on
** the fabric is the closure taken, a pair reaching each other through it
** at the smaller of their two sums. Direct values are never lowered.
*/
static int fold_matrix(struct strata_topology *t, struct hwloc_distances_s *d) {
  unsigned nb = d->nbobjs;
  int *gpu = malloc(nb * sizeof *gpu);
  int *kind = malloc(nb * sizeof *kind);
  double *agg = calloc((size_t)t->ngpus, sizeof *agg);
  if (!gpu || !kind || !agg) {
    free(gpu);
    free(kind);
    free(agg);
    return strata__error(STRATA_ERR_NOMEM, "topology: out of memory");
  }
  for (unsigned i = 0; i < nb; i++)
    kind[i] = end_kind(t, d->objs[i], &gpu[i]);
  int n = t->ngpus;
  for (unsigned i = 0; i < nb; i++) {
    if (kind[i] != END_GPU)
      continue;
    struct strata__gpu *gi = &t->gpus[gpu[i]];
    for (unsigned j = 0; j < nb; j++) {
      if (i == j)
        continue;
      hwloc_uint64_t v = d->values[i * nb + j];
      hwloc_uint64_t w = d->values[j * nb + i];
      if (w > v)
        v = w;
      if (!v)
        continue;
      if (kind[j] == END_GPU && gpu[j] != gpu[i]) {
        double *cell = &t->fabric_gbps[gpu[i] * n + gpu[j]];
        if (mbps_to_gbps(v) > *cell)
          *cell = mbps_to_gbps(v);
      } else if (kind[j] == END_SWITCH) {
        agg[gpu[i]] += mbps_to_gbps(v);
      } else if (kind[j] == END_CPU) {
        hwloc_obj_t c = d->objs[j];
        if (gi->anchor && c->cpuset && gi->anchor->cpuset && hwloc_bitmap_intersects(c->cpuset, gi->anchor->cpuset) &&
            mbps_to_gbps(v) > gi->host_nvlink_gbps)
          gi->host_nvlink_gbps = mbps_to_gbps(v);
      }
    }
  }
  int on_fabric = 0;
  for (int g = 0; g < n; g++)
    on_fabric += agg[g] > 0;
  if (on_fabric >= 2) {
    for (int a = 0; a < n; a++)
      for (int b = 0; b < n; b++) {
        if (a == b || agg[a] <= 0 || agg[b] <= 0)
          continue;
        double via = agg[a] < agg[b] ? agg[a] : agg[b];
        if (t->fabric_gbps[a * n + b] <= 0)
          t->fabric_gbps[a * n + b] = via;
      }
  }
  free(gpu);
  free(kind);
  free(agg);
  return STRATA_OK;
}

/*
** Read "NVLinkBandwidth" then "XGMIBandwidth" (MB/s, hwloc >= 2.5 names
** them so). A topology without either keeps fabric_kind = -1.
*/
int strata__topo_read_fabric(struct strata_topology *t, hwloc_topology_t hw) {
  static const struct {
    const char *name;
    int kind;
  } matrices[] = {{"NVLinkBandwidth", STRATA_PATH_NVLINK}, {"XGMIBandwidth", STRATA_PATH_XGMI}};
  t->fabric_kind = -1;
  if (t->ngpus == 0)
    return STRATA_OK;
  for (size_t m = 0; m < sizeof matrices / sizeof *matrices; m++) {
    struct hwloc_distances_s *d[4];
    unsigned nr = 4;
    if (hwloc_distances_get_by_name(hw, matrices[m].name, &nr, d, 0) != 0)
      continue;
    if (nr > 4)
      nr = 4;
    int rc = STRATA_OK;
    for (unsigned k = 0; k < nr; k++) {
      /* after a failure the remaining matrices are only released */
      if (rc == STRATA_OK && (d[k]->kind & HWLOC_DISTANCES_KIND_MEANS_BANDWIDTH)) {
        rc = fold_matrix(t, d[k]);
        if (rc == STRATA_OK && t->fabric_kind < 0)
          t->fabric_kind = matrices[m].kind;
      }
      hwloc_distances_release(hw, d[k]);
    }
    if (rc)
      return rc;
    strata__log(STRATA_LOG_DEBUG, "topology", "%s: %u matrix(es) named %s", t->source, nr, matrices[m].name);
  }
  return STRATA_OK;
}
