/* SPDX-License-Identifier: MIT */
/* machine.c — what the planner places on: N copies of a node (devices with costs, links, islands, shared uplinks) joined by a network. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "core/core.h"

/* 100 Gb/s InfiniBand EDR or Ethernet per interface, as the topology's network default. */
#define NET_DEFAULT_GBITS 100.0
/* RDMA one-way latency across one switch, typical (the topology's default too). */
#define NET_DEFAULT_LATENCY_US 5.0
/* Performance of a GPU the table does not know: a mid-range part, labelled as a guess (its memory is never
** guessed: the dump, the table by PCI id or the caller gives it). */
#define UNKNOWN_TFLOPS 10.0
#define UNKNOWN_MEM_GBPS 500.0

STRATA_API void strata_machine_free(strata_machine_t c) {
  if (!c)
    return;
  for (int i = 0; i < c->k; i++)
    free(c->names ? c->names[i] : NULL);
  free(c->names);
  for (int i = 0; c->shapes && i < c->k; i++)
    free(c->shapes[i]);
  free(c->shapes);
  free(c->cost);
  free(c->id);
  free(c->gbps);
  free(c->lat);
  free(c->kind);
  free(c->island);
  free(c->uplink);
  free(c->uplink_gbps);
  free(c->ar_s);
  for (int i = 0; i < c->nwarnings; i++)
    free(c->warnings[i]);
  free(c->warnings);
  free(c->desc);
  free(c);
}

int strata__machine_in(const struct strata_machine *c, int precision, struct strata_machine **out) {
  *out = NULL;
  for (int i = 0; precision == STRATA_BFLOAT16 && i < c->k; i++)
    if (!(c->cost[i].bf16_flops > 0))
      return strata__error(STRATA_ERR_NOT_FOUND, "device %d (%s) has no bf16 GEMM speed to plan bf16 with%s", i,
                           c->names[i], strcmp(c->cost[i].model ? c->cost[i].model : "", "calibrated") == 0
                               ? ": the calibration has no \"bf16_gflops\" for it (strata-bench calibrate "
                                 "--precision bf16 measures it where its backend has a bf16 GEMM)"
                               : "");
  struct strata_machine *v = malloc(sizeof *v);
  struct strata_device_cost *cost = malloc(sizeof *cost * (size_t)c->k);
  if (!v || !cost) {
    free(v);
    free(cost);
    return strata__error(STRATA_ERR_NOMEM, "out of host memory for a machine");
  }
  *v = *c;
  for (int i = 0; i < c->k; i++)
    cost[i] = strata__plan_cost_in(&c->cost[i], precision);
  v->cost = cost;
  /* alike in fp32 need not be alike in bf16: the planner prunes by symmetry only where they are */
  for (int i = 1; i < c->k && v->uniform; i++)
    v->uniform = cost[i].flops == cost[0].flops && cost[i].ngemm == cost[0].ngemm &&
                 memcmp(cost[i].gemm_flops, cost[0].gemm_flops, sizeof cost[0].gemm_flops) == 0 &&
                 memcmp(cost[i].op_ns, cost[0].op_ns, sizeof cost[0].op_ns) == 0;
  *out = v;
  return STRATA_OK;
}

void strata__machine_in_free(struct strata_machine *v) {
  if (!v)
    return;
  free(v->cost); /* the rest is the machine's it views */
  free(v);
}

/* Record a warning (dropped silently when memory is short: it is advice). */
static void warn(struct strata_machine *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(struct strata_machine *c, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  char **w = realloc(c->warnings, sizeof *w * (size_t)(c->nwarnings + 1));
  if (!w)
    return;
  c->warnings = w;
  if ((w[c->nwarnings] = strdup(buf)) != NULL)
    c->nwarnings++;
}

/* A machine of `k` devices per node with every array allocated (zeroed). */
static int machine_alloc(int k, struct strata_machine **out) {
  struct strata_machine *c = calloc(1, sizeof *c);
  if (!c)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory for a machine");
  size_t n = (size_t)k, nn = n * n;
  c->k = k;
  c->names = calloc(n, sizeof *c->names);
  c->cost = calloc(n, sizeof *c->cost);
  c->shapes = calloc(n, sizeof *c->shapes);
  c->id = calloc(n, sizeof *c->id);
  c->gbps = calloc(nn, sizeof *c->gbps);
  c->lat = calloc(nn, sizeof *c->lat);
  c->kind = calloc(nn, sizeof *c->kind);
  c->island = calloc(n, sizeof *c->island);
  c->uplink = calloc(n, sizeof *c->uplink);
  c->uplink_gbps = calloc(n, sizeof *c->uplink_gbps);
  if (!c->names || !c->cost || !c->shapes || !c->id || !c->gbps || !c->lat || !c->kind || !c->island || !c->uplink ||
      !c->uplink_gbps) {
    strata_machine_free(c);
    return strata__error(STRATA_ERR_NOMEM, "out of host memory for a machine of %d devices", k);
  }
  *out = c;
  return STRATA_OK;
}

/* The network and node count from the options; the description last. */
static int machine_finish(struct strata_machine *c, const struct strata_machine_options *o, const char *what) {
  int nodes = o && o->nodes ? o->nodes : 1;
  if (nodes < 1 || nodes > (1 << 20))
    return strata__error(STRATA_ERR_INVALID, "machine: %d nodes, must be between 1 and %d", o ? o->nodes : 0, 1 << 20);
  if ((long long)nodes * c->k > (1 << 22))
    return strata__error(STRATA_ERR_INVALID, "machine: %d nodes of %d devices is more than %d devices", nodes, c->k,
                         1 << 22);
  double gbits = o && o->network_gbps > 0 ? o->network_gbps : NET_DEFAULT_GBITS;
  if (o && o->network_gbps < 0)
    return strata__error(STRATA_ERR_INVALID, "machine: network bandwidth %g Gb/s must be positive", o->network_gbps);
  if (o && (o->network_latency_us < 0 || o->nics < 0))
    return strata__error(STRATA_ERR_INVALID, "machine: network latency and interface count must not be negative");
  c->nodes = nodes;
  c->net_gbps = gbits / 8.0;
  c->nics = o && o->nics > 0 ? o->nics : 1;
  c->net_lat = o && o->network_latency_us > 0 ? o->network_latency_us : NET_DEFAULT_LATENCY_US;
  /* every device the same: the planner may then prune by symmetry */
  c->uniform = 1;
  for (int i = 1; i < c->k; i++)
    if (c->cost[i].flops != c->cost[0].flops || c->cost[i].memory != c->cost[0].memory ||
        c->cost[i].mem_gbps != c->cost[0].mem_gbps || c->cost[i].nshapes != c->cost[0].nshapes ||
        (c->cost[i].nshapes &&
         memcmp(c->cost[i].shapes, c->cost[0].shapes, (size_t)c->cost[i].nshapes * sizeof *c->cost[i].shapes) != 0))
      c->uniform = 0;
  char buf[600];
  if (nodes > 1)
    snprintf(buf, sizeof buf, "%d nodes of %s, %d x %g Gb/s network per node", nodes, what, c->nics, gbits);
  else
    snprintf(buf, sizeof buf, "%s", what);
  c->desc = strdup(buf);
  if (!c->desc)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory for a machine");
  return STRATA_OK;
}

/* The node's measured all-reduce times per pair, checked: sizes ascending from 1 float, times positive. */
static int copy_allreduce(struct strata_machine *c, const struct strata_node_desc *d) {
  const int n = d->allreduce_sizes, k = c->k;
  if (n < 0 || n > STRATA_PLAN_ALLREDUCE_SIZES || !d->allreduce_floats || !d->allreduce_s)
    return strata__error(STRATA_ERR_INVALID, "machine: %d all-reduce sizes, expected 1 to %d with their floats and "
                         "times", n, STRATA_PLAN_ALLREDUCE_SIZES);
  for (int s = 0; s < n; s++) {
    const double f = d->allreduce_floats[s];
    if (!(f >= 1) || !isfinite(f) || (s > 0 && !(f > d->allreduce_floats[s - 1])))
      return strata__error(STRATA_ERR_INVALID, "machine: all-reduce size %d (%g floats) must be 1 or more and "
                           "larger than the one before", s, f);
    c->ar_floats[s] = f;
  }
  const size_t cells = (size_t)k * (size_t)k * (size_t)n;
  c->ar_s = malloc(cells * sizeof *c->ar_s);
  if (!c->ar_s)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory for a machine");
  for (int i = 0; i < k; i++)
    for (int j = 0; j < k; j++)
      for (int s = 0; s < n; s++) {
        const size_t at = ((size_t)i * (size_t)k + (size_t)j) * (size_t)n + (size_t)s;
        const double t = d->allreduce_s[at];
        if (i != j && !(t > 0 && isfinite(t)))
          return strata__error(STRATA_ERR_INVALID, "machine: the all-reduce of %g floats between devices %d and %d "
                               "has no positive time", c->ar_floats[s], i, j);
        c->ar_s[at] = i == j ? 0 : t;
      }
  c->ar_n = n;
  return STRATA_OK;
}

STRATA_API int strata_machine_new(const struct strata_node_desc *d, const struct strata_machine_options *o,
                                  strata_machine_t *out) {
  if (!out)
    return strata__error(STRATA_ERR_INVALID, "strata_machine_new: out is NULL");
  *out = NULL;
  if (!d || d->devices < 1 || !d->cost || !d->gbps || !d->latency_us)
    return strata__error(STRATA_ERR_INVALID, "strata_machine_new: a node needs devices, their costs, bandwidths and "
                                             "latencies");
  if (d->devices > 65536)
    return strata__error(STRATA_ERR_INVALID, "machine: %d devices in one node, at most 65536", d->devices);
  struct strata_machine *c;
  TRY(machine_alloc(d->devices, &c));
  const int k = d->devices;
  int rc = STRATA_OK;
  for (int i = 0; i < k && !rc; i++) {
    c->cost[i] = d->cost[i];
    if (!(c->cost[i].flops > 0) || !(c->cost[i].mem_gbps > 0) || c->cost[i].memory == 0)
      rc = strata__error(STRATA_ERR_INVALID, "machine: device %d needs positive FLOP/s, bandwidth and memory", i);
    const int np = c->cost[i].nspread;
    if (!rc && (np < 0 || np > STRATA_PLAN_SPREAD_POINTS))
      rc = strata__error(STRATA_ERR_INVALID, "machine: device %d has %d points of spread, expected 0 to %d", i, np,
                         STRATA_PLAN_SPREAD_POINTS);
    for (int q = 0; !rc && q < np; q++) {
      const double v = c->cost[i].spread[q];
      if (!(v > 0) || !isfinite(v) || (q > 0 && v < c->cost[i].spread[q - 1]))
        rc = strata__error(STRATA_ERR_INVALID, "machine: device %d's spread point %d (%g) must be positive and no "
                           "less than the one before", i, q, v);
    }
    const double sf = c->cost[i].stage_factor;
    if (!rc && !(sf == 0 || (sf > 0 && isfinite(sf))))
      rc = strata__error(STRATA_ERR_INVALID, "machine: device %d's stage factor (%g) must be positive, or 0 for none",
                         i, sf);
    const double bf = c->cost[i].bf16_flops;
    const int bn = c->cost[i].bf16_ngemm;
    if (!rc && !(bf >= 0 && isfinite(bf)))
      rc = strata__error(STRATA_ERR_INVALID, "machine: device %d's bf16 FLOP/s (%g) must be 0 (none) or more", i, bf);
    if (!rc && (bn < 0 || bn > STRATA_PLAN_GEMM_SIZES))
      rc = strata__error(STRATA_ERR_INVALID, "machine: device %d has %d bf16 GEMM sizes, expected 0 to %d", i, bn,
                         STRATA_PLAN_GEMM_SIZES);
    for (int q = 0; !rc && q < bn; q++)
      if (!(c->cost[i].bf16_gemm_n[q] > (q ? c->cost[i].bf16_gemm_n[q - 1] : 0)) ||
          !(c->cost[i].bf16_gemm_flops[q] > 0) || !isfinite(c->cost[i].bf16_gemm_flops[q]))
        rc = strata__error(STRATA_ERR_INVALID, "machine: device %d's bf16 GEMM size %d: sizes ascend and speeds are "
                           "positive", i, q);
    const double au = c->cost[i].action_us;
    if (!rc && !(au >= 0 && isfinite(au)))
      rc = strata__error(STRATA_ERR_INVALID, "machine: device %d's action overhead (%g us) must be 0 or more", i, au);
    c->cost[i].shapes = NULL;
    c->cost[i].nshapes = 0;
    const int ns = d->cost[i].shapes ? d->cost[i].nshapes : 0;
    if (!rc && ns < 0)
      rc = strata__error(STRATA_ERR_INVALID, "machine: device %d has %d GEMM shapes", i, ns);
    if (!rc && ns > 0) {
      c->shapes[i] = malloc((size_t)ns * sizeof *c->shapes[i]);
      if (!c->shapes[i])
        rc = strata__error(STRATA_ERR_NOMEM, "out of host memory for a machine");
      else {
        memcpy(c->shapes[i], d->cost[i].shapes, (size_t)ns * sizeof *c->shapes[i]);
        c->cost[i].shapes = c->shapes[i];
        c->cost[i].nshapes = ns;
      }
    }
    c->cost[i].model = "custom";
    c->cost[i].source = "given";
    char nm[64];
    snprintf(nm, sizeof nm, "device %d", i);
    c->names[i] = strdup(nm);
    if (!c->names[i])
      rc = strata__error(STRATA_ERR_NOMEM, "out of host memory for a machine");
    c->id[i] = i;
    c->island[i] = d->island ? d->island[i] : i;
    c->uplink[i] = d->uplink ? d->uplink[i] : -1;
    c->uplink_gbps[i] = d->uplink_gbps;
    for (int j = 0; j < k; j++) {
      size_t ij = (size_t)i * (size_t)k + (size_t)j;
      c->gbps[ij] = d->gbps[ij];
      c->lat[ij] = d->latency_us[ij];
      c->kind[ij] = i == j ? STRATA_PATH_SELF : d->kind ? d->kind[ij] : d->gbps[ij] > 50 ? STRATA_PATH_NVLINK : STRATA_PATH_PHB;
      if (i != j && !(c->gbps[ij] > 0) && !rc)
        rc = strata__error(STRATA_ERR_INVALID, "machine: link %d -> %d has no bandwidth", i, j);
    }
  }
  c->cpu_cores = d->cpu_cores > 0 ? d->cpu_cores : 0;
  if (!rc && d->allreduce_sizes)
    rc = copy_allreduce(c, d);
  if (!rc)
    rc = machine_finish(c, o, d->name && *d->name ? d->name : "a custom node");
  if (rc) {
    strata_machine_free(c);
    return rc;
  }
  *out = c;
  return STRATA_OK;
}

/* "4 x A100", or for a node of unlike GPUs "mixed: 2 x Tesla M2075, 1 x Tesla K40m" (names in first-seen order). */
static void describe_gpus(const struct strata_machine *c, char *buf, size_t cap) {
  if (!strata__machine_mixed(c)) {
    snprintf(buf, cap, "%d x %s", c->k, c->names[0]);
    return;
  }
  size_t used = (size_t)snprintf(buf, cap, "mixed:");
  for (int i = 0; i < c->k && used < cap; i++) {
    int seen = 0, count = 0;
    for (int j = 0; j < i && !seen; j++)
      seen = strcmp(c->names[j], c->names[i]) == 0;
    for (int j = i; j < c->k && !seen; j++)
      count += strcmp(c->names[j], c->names[i]) == 0;
    if (!seen)
      used += (size_t)snprintf(buf + used, cap - used, "%s %d x %s", i ? "," : "", count, c->names[i]);
  }
}

int strata__machine_mixed(const struct strata_machine *c) {
  for (int i = 1; i < c->k; i++)
    if (strcmp(c->names[i], c->names[0]) != 0)
      return 1;
  return 0;
}

STRATA_API int strata_machine_from_topology(strata_topology_t topo, const struct strata_machine_options *o,
                                            strata_machine_t *out) {
  if (!out || !topo)
    return strata__error(STRATA_ERR_INVALID, "strata_machine_from_topology: NULL argument");
  *out = NULL;
  int ngpu = 0;
  TRY(strata_topology_gpu_count(topo, &ngpu));
  if (ngpu == 0)
    return strata__error(STRATA_ERR_NOT_FOUND, "%s has no GPU: nothing to place on", strata_topology_source(topo));
  int k = o && o->devices ? o->ndevices : ngpu;
  if (k < 1)
    return strata__error(STRATA_ERR_INVALID, "machine: an empty device list");
  for (int i = 0; o && o->devices && i < k; i++) {
    if (o->devices[i] < 0 || o->devices[i] >= ngpu)
      return strata__error(STRATA_ERR_RANGE, "machine: GPU %d is not in %s (%d GPUs)", o->devices[i],
                           strata_topology_source(topo), ngpu);
    for (int j = 0; j < i; j++)
      if (o->devices[j] == o->devices[i])
        return strata__error(STRATA_ERR_INVALID, "machine: GPU %d listed twice", o->devices[i]);
  }
  struct strata_machine *c;
  TRY(machine_alloc(k, &c));
  /* what the topology read with a doubt (power-saving links, GPU memory nodes, ...) is the plan's doubt too */
  int nw = 0;
  strata_topology_warning_count(topo, &nw);
  for (int i = 0; i < nw; i++) {
    const char *w = NULL;
    if (strata_topology_warning(topo, i, &w) == STRATA_OK && w)
      warn(c, "%s", w);
  }
  int rc = STRATA_OK;
  struct strata_topology_gpu *g = calloc((size_t)ngpu, sizeof *g);
  if (!g)
    rc = strata__error(STRATA_ERR_NOMEM, "out of host memory for a machine");
  for (int i = 0; i < ngpu && !rc; i++)
    rc = strata_topology_gpu(topo, i, &g[i]);
  for (int i = 0; i < k && !rc; i++) {
    int gi = o && o->devices ? o->devices[i] : i;
    c->id[i] = gi;
    c->names[i] = strdup(g[gi].name);
    if (!c->names[i]) {
      rc = strata__error(STRATA_ERR_NOMEM, "out of host memory for a machine");
      break;
    }
    /* partitions of one PCI device (MI300A CPX) share its compute and memory */
    int parts = 0;
    for (int j = 0; j < ngpu; j++)
      parts += g[gi].pci_bus_id[0] && strcmp(g[j].pci_bus_id, g[gi].pci_bus_id) == 0;
    if (parts < 1)
      parts = 1;
    struct strata_gpu_model m;
    const char *mem_source = NULL;
    if (strata_gpu_model_find(g[gi].name, g[gi].vendor_id, g[gi].device_id, &m) == STRATA_OK) {
      strata_device_cost_from_model(&m, &c->cost[i]);
    } else {
      /* no tensor cores assumed: bf16 at the guessed fp32 rate */
      c->cost[i] = (struct strata_device_cost){.flops = UNKNOWN_TFLOPS * 1e12 * STRATA_PLAN_SUSTAINED,
                                               .bf16_flops = UNKNOWN_TFLOPS * 1e12 * STRATA_PLAN_SUSTAINED,
                                               .mem_gbps = UNKNOWN_MEM_GBPS,
                                               .launch_us = 5,
                                               .model = "unknown",
                                               .source = "a guess: the GPU is not in the table"};
      warn(c, "GPU %d \"%s\" is not in the table of GPU models: planned as a guessed %g TFLOPS, %g GB/s part", gi,
           g[gi].name, UNKNOWN_TFLOPS, UNKNOWN_MEM_GBPS);
      uint64_t mem = 0;
      if (strata__gpu_memory_by_pci(g[gi].vendor_id, g[gi].device_id, &mem, &mem_source))
        c->cost[i].memory = mem;
    }
    c->cost[i].flops /= parts;
    c->cost[i].bf16_flops /= parts;
    c->cost[i].mem_gbps /= parts;
    if (g[gi].memory) {
      c->cost[i].memory = g[gi].memory; /* what the dump says wins over the table */
    } else if (c->cost[i].memory) {
      c->cost[i].memory /= (uint64_t)parts;
      if (mem_source)
        warn(c, "GPU %d \"%s\": %.1f GiB of memory from its PCI id %04x:%04x (%s)", gi, g[gi].name,
             (double)c->cost[i].memory / (1 << 30), g[gi].vendor_id, g[gi].device_id, mem_source);
    } else if (o && o->gpu_memory) {
      c->cost[i].memory = o->gpu_memory;
      warn(c, "GPU %d \"%s\": neither the dump nor the table says its memory; planned with the %.1f GiB given", gi,
           g[gi].name, (double)o->gpu_memory / (1 << 30));
    } else {
      rc = strata__error(STRATA_ERR_NOT_FOUND, "GPU %d \"%s\" (PCI %04x:%04x): neither the dump nor the table of GPU "
                         "models says how much memory it has; give it (strata-plan --gpu-memory SIZE), strata does "
                         "not plan on a guess", gi, g[gi].name, g[gi].vendor_id, g[gi].device_id);
      break;
    }
    int isl = 0;
    strata_topology_gpu_island(topo, gi, &isl);
    c->island[i] = isl;
    c->uplink[i] = -1;
  }
  for (int i = 0; i < k && !rc; i++)
    for (int j = 0; j < k && !rc; j++) {
      struct strata_link l;
      size_t ij = (size_t)i * (size_t)k + (size_t)j;
      rc = strata_topology_link(topo, c->id[i], c->id[j], &l);
      c->gbps[ij] = i == j ? 0 : l.gbps;
      c->lat[ij] = l.latency_us;
      c->kind[ij] = i == j ? STRATA_PATH_SELF : l.kind;
    }
  /* GPUs of one PCIe island (a switch or a host bridge) reach the rest
  ** of the box through its one uplink: their transfers out share it */
  for (int i = 0; i < k && !rc; i++) {
    struct strata_topology_island is;
    rc = strata_topology_island(topo, c->island[i], &is);
    if (!rc && is.size > 1 && is.kind >= STRATA_PATH_PIX) {
      c->uplink[i] = c->island[i];
      c->uplink_gbps[i] = g[c->id[i]].pcie_gbps > 0 ? g[c->id[i]].pcie_gbps : 15.75;
    }
  }
  if (!rc) {
    char what[400];
    describe_gpus(c, what, sizeof what);
    size_t used = strlen(what);
    snprintf(what + used, sizeof what - used, " (%s)", strata_topology_source(topo));
    rc = machine_finish(c, o, what);
  }
  free(g);
  if (rc) {
    strata_machine_free(c);
    return rc;
  }
  *out = c;
  return STRATA_OK;
}

/* NVLink per direction of a full NVSwitch node by generation (NVIDIA
** DGX datasheets): V100 6 links, A100 12, H100/H200 18, 25 GB/s each. */
static double nvswitch_gbps(const char *model) {
  if (strstr(model, "H100") || strstr(model, "H200"))
    return 18 * 25.0;
  if (strstr(model, "A100"))
    return 12 * 25.0;
  if (strstr(model, "P100"))
    return 4 * 20.0;
  return 6 * 25.0;
}

STRATA_API int strata_machine_synthetic(const char *spec, const struct strata_machine_options *o,
                                        strata_machine_t *out) {
  if (!out || !spec)
    return strata__error(STRATA_ERR_INVALID, "strata_machine_synthetic: NULL argument");
  *out = NULL;
  if (o && o->devices)
    return strata__error(STRATA_ERR_INVALID, "node \"%s\": a device list chooses GPUs of a topology, not of a "
                                             "synthetic node", spec);
  char model[64], fabric[32];
  int count = 0, used = 0;
  if (sscanf(spec, "%d%*[xX]%63[^:]:%31s%n", &count, model, fabric, &used) != 3 || spec[used] != '\0')
    return strata__error(STRATA_ERR_PARSE, "node \"%s\": expected COUNTxMODEL:FABRIC, e.g. 8xA100-80GB:nvswitch", spec);
  if (count < 1 || count > 4096)
    return strata__error(STRATA_ERR_PARSE, "node \"%s\": %d GPUs, must be between 1 and 4096", spec, count);
  struct strata_gpu_model m;
  if (strata_gpu_model_find(model, 0, 0, &m) != STRATA_OK)
    return strata__error(STRATA_ERR_PARSE, "node \"%s\": GPU model \"%s\" is not in the table (strata-plan --list-gpus)",
                         spec, model);
  enum { NVSWITCH, NVLINK, XGMI, PCIE } f;
  if (strcmp(fabric, "nvswitch") == 0)
    f = NVSWITCH;
  else if (strcmp(fabric, "nvlink") == 0)
    f = NVLINK;
  else if (strcmp(fabric, "xgmi") == 0)
    f = XGMI;
  else if (strcmp(fabric, "pcie") == 0)
    f = PCIE;
  else
    return strata__error(STRATA_ERR_PARSE, "node \"%s\": fabric \"%s\" is not nvswitch, nvlink, xgmi or pcie", spec,
                         fabric);
  struct strata_machine *c;
  TRY(machine_alloc(count, &c));
  int rc = STRATA_OK;
  const int k = count, half = (k + 1) / 2;
  for (int i = 0; i < k && !rc; i++) {
    strata_device_cost_from_model(&m, &c->cost[i]);
    c->names[i] = strdup(m.name);
    if (!c->names[i])
      rc = strata__error(STRATA_ERR_NOMEM, "out of host memory for a machine");
    c->id[i] = i;
    c->uplink[i] = -1;
    switch (f) {
    case NVSWITCH:
    case XGMI: c->island[i] = 0; break;
    case NVLINK:
    case PCIE: c->island[i] = i / 2; break;
    }
    if (f == PCIE) {
      c->uplink[i] = i / 2; /* pairs under one switch share its Gen3/Gen4 x16 uplink */
      c->uplink_gbps[i] = 15.75;
    }
    for (int j = 0; j < k; j++) {
      size_t ij = (size_t)i * (size_t)k + (size_t)j;
      int kind = STRATA_PATH_SELF;
      double gbps = 0;
      if (i != j)
        switch (f) {
        case NVSWITCH: kind = STRATA_PATH_NVLINK, gbps = nvswitch_gbps(m.name); break;
        case XGMI: kind = STRATA_PATH_XGMI, gbps = 50.0; break; /* one Infinity Fabric link per pair */
        case NVLINK:
          if (i / 2 == j / 2)
            kind = STRATA_PATH_NVLINK, gbps = 2 * 25.0;
          else
            kind = (i < half) == (j < half) ? STRATA_PATH_PHB : STRATA_PATH_SYS, gbps = kind == STRATA_PATH_PHB ? 12.6 : 7.9;
          break;
        case PCIE:
          /* a switch forwards at line rate; through the root complex 80%, across sockets half */
          if (i / 2 == j / 2)
            kind = STRATA_PATH_PIX, gbps = 15.75;
          else if ((i < half) == (j < half))
            kind = STRATA_PATH_PHB, gbps = 12.6;
          else
            kind = STRATA_PATH_SYS, gbps = 7.9;
          break;
        }
      static const double lat[STRATA_PATH_KIND_COUNT] = {0.0, 1.5, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 0.0};
      c->gbps[ij] = gbps;
      c->lat[ij] = lat[kind];
      c->kind[ij] = kind;
    }
  }
  if (!rc)
    rc = machine_finish(c, o, spec);
  if (rc) {
    strata_machine_free(c);
    return rc;
  }
  *out = c;
  return STRATA_OK;
}

STRATA_API int strata_machine_device_count(strata_machine_t c) { return c ? c->nodes * c->k : 0; }
STRATA_API int strata_machine_nodes(strata_machine_t c) { return c ? c->nodes : 0; }
STRATA_API const char *strata_machine_describe(strata_machine_t c) { return c && c->desc ? c->desc : ""; }
STRATA_API int strata_machine_warning_count(strata_machine_t c) { return c ? c->nwarnings : 0; }
STRATA_API const char *strata_machine_warning(strata_machine_t c, int i) {
  return c && i >= 0 && i < c->nwarnings ? c->warnings[i] : NULL;
}

STRATA_API int strata_machine_device(strata_machine_t c, int dev, struct strata_machine_device *out) {
  if (!c || !out)
    return strata__error(STRATA_ERR_INVALID, "strata_machine_device: NULL argument");
  if (dev < 0 || dev >= c->nodes * c->k)
    return strata__error(STRATA_ERR_RANGE, "device %d is not in the cluster (%d devices)", dev, c->nodes * c->k);
  int l = dev % c->k;
  out->node = dev / c->k;
  out->local = l;
  out->id = c->id[l];
  out->island = c->island[l];
  out->name = c->names[l];
  out->cost = c->cost[l];
  return STRATA_OK;
}

void strata__machine_link(const struct strata_machine *c, int a, int b, double *gbps, double *lat_us, int *kind) {
  if (a / c->k != b / c->k) {
    *gbps = c->net_gbps;
    *lat_us = c->net_lat;
    *kind = STRATA_PATH_NET;
    return;
  }
  size_t ij = (size_t)(a % c->k) * (size_t)c->k + (size_t)(b % c->k);
  *gbps = c->gbps[ij];
  *lat_us = c->lat[ij];
  *kind = c->kind[ij];
}

double strata__machine_pair_allreduce(const struct strata_machine *c, int a, int b, double floats) {
  if (a == b)
    return 0;
  if (c->ar_n == 0 || a / c->k != b / c->k) {
    double gbps, lat;
    int kind;
    strata__machine_link(c, a, b, &gbps, &lat, &kind);
    return strata__pair_allreduce_s(floats, gbps, lat);
  }
  const int n = c->ar_n;
  const double *t = &c->ar_s[((size_t)(a % c->k) * (size_t)c->k + (size_t)(b % c->k)) * (size_t)n];
  const double *f = c->ar_floats;
  if (floats <= f[0])
    return t[0];
  if (n == 1)
    return t[0] * floats / f[0];
  int s = 1;
  while (s < n - 1 && floats > f[s])
    s++;
  /* the piece from size s - 1 to s, which the largest extends */
  const double v = t[s - 1] + (t[s] - t[s - 1]) * (floats - f[s - 1]) / (f[s] - f[s - 1]);
  return v > t[0] ? v : t[0];
}

STRATA_API int strata_machine_link(strata_machine_t c, int from, int to, struct strata_link *out) {
  if (!c || !out)
    return strata__error(STRATA_ERR_INVALID, "strata_machine_link: NULL argument");
  int n = c->nodes * c->k;
  if (from < 0 || from >= n || to < 0 || to >= n)
    return strata__error(STRATA_ERR_RANGE, "link %d -> %d is not in the cluster (%d devices)", from, to, n);
  memset(out, 0, sizeof *out);
  strata__machine_link(c, from, to, &out->gbps, &out->latency_us, &out->kind);
  out->nominal_gbps = out->gbps;
  out->source = STRATA_LINK_SOURCE_DEFAULT;
  return STRATA_OK;
}
