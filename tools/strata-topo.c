/* SPDX-License-Identifier: MIT */
/* strata-topo.c — show what strata sees of a box: devices, connection and bandwidth matrices, islands; JSON, DOT or SVG for scripts and pictures; optional bandwidth calibration. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/cluster.h>
#include <strata/common.h>
#include <strata/device.h>
#include <strata/topology.h>
#include <strata/version.h>

#include "core/parse.h"

enum { FORMAT_TEXT, FORMAT_JSON, FORMAT_DOT, FORMAT_SVG };

/* Exit statuses: 0 success, 1 a runtime failure (calibration), 2 bad usage or bad input. */
#define EXIT_RUNTIME 1
#define EXIT_INPUT 2

struct opts {
  const char *input;
  int format;
  int devices;      /* -1: default (live yes, XML no) */
  int measure;
  size_t measure_bytes;
  int use_nominal;
  int rings;
  struct strata_topology_options topo;
};

static void usage(FILE *f) {
  fputs("Usage: strata-topo [OPTION]...\n"
        "Show how the devices of this box (or of an hwloc XML dump) are connected, as strata sees them.\n"
        "\n"
        "  -i, --input FILE      read an hwloc XML dump (lstopo --of xml) instead of this machine;\n"
        "                        STRATA_TOPOLOGY_XML names one too\n"
        "  -j, --json            print JSON (schema strata-topology/1, see strata-topo(1))\n"
        "      --dot             print the device link graph in Graphviz DOT\n"
        "      --svg             print the device link graph as SVG\n"
        "  -m, --measure[=SIZE]  time copies between every pair of runtime devices and host<->device\n"
        "                        (SIZE bytes per copy, e.g. 16M; default 16M) and show measured GB/s\n"
        "      --devices         map the runtime devices even when reading a dump\n"
        "      --no-devices      do not load the backends (hwloc only)\n"
        "      --nominal         print nominal figures even where measured ones exist\n"
        "      --rings           print only the rings collectives would use (all GPUs, each island);\n"
        "                        with --json as JSON (schema strata-rings/1)\n"
        "      --socket-gbps X   nominal inter-socket bandwidth (default 20.8, STRATA_TOPO_SOCKET_GBPS)\n"
        "      --numa-gbps X     nominal bandwidth between NUMA nodes of a socket (default 40)\n"
        "      --net-gbps X      nominal network bandwidth (default 12.5, STRATA_TOPO_NET_GBPS)\n"
        "  -h, --help            show this help\n"
        "      --version         show the version\n"
        "\n"
        "Under mpirun (strata built with MPI) rank 0 first prints every rank's devices, numbered globally,\n"
        "and the links between ranks; with --json one strata-cluster/1 document instead.\n"
        "\n"
        "Exit status: 0 on success, 1 when calibration fails, 2 on bad usage or unreadable input.\n",
        f);
}

static int parse_gbps(const char *opt, const char *text, double *out) {
  double v = 0;
  if (strata__parse_real(text, 0, 1e9, STRATA__PARSE_ABOVE_MIN, &v)) {
    fprintf(stderr, "strata-topo: %s: '%s' is not a positive number of GB/s (%s)\n", opt, text, strata__parse_why());
    return -1;
  }
  *out = v;
  return 0;
}

/* ---------------------------------------------------------------- text */

static void fmt_bytes(char *buf, size_t n, uint64_t bytes) {
  if (!bytes)
    snprintf(buf, n, "-");
  else if (bytes >= (1ull << 30))
    snprintf(buf, n, "%.1f GiB", (double)bytes / (double)(1ull << 30));
  else
    snprintf(buf, n, "%.0f MiB", (double)bytes / (double)(1ull << 20));
}

/* The cell of the connection matrix: "X", "NV6", "XG2", "PIX" ... */
static void conn_label(char *buf, size_t n, const struct strata_link *l) {
  if ((l->kind == STRATA_PATH_NVLINK || l->kind == STRATA_PATH_XGMI) && l->nlinks > 0)
    snprintf(buf, n, "%s%d", strata_path_kind_label(l->kind), l->nlinks);
  else
    snprintf(buf, n, "%s", strata_path_kind_label(l->kind));
}

static void print_host(strata_topology_t t) {
  struct strata_topology_host h;
  char mem[32];
  strata_topology_host(t, &h);
  fmt_bytes(mem, sizeof mem, h.memory);
  printf("Topology: %s\n", strata_topology_source(t));
  printf("Host: %s%s%s; %d package(s), %d NUMA node(s), %d core(s), %d PU(s), %s RAM\n",
         h.hostname[0] ? h.hostname : "(unnamed)", h.cpu_model[0] ? " - " : "", h.cpu_model, h.packages,
         h.numa_nodes, h.cores, h.pus, mem);
  if (h.gpu_numa_nodes)
    printf("      and %d NUMA node(s) of GPU memory (counted with the GPUs)\n", h.gpu_numa_nodes);
}

/* What the topology could not take at face value: on stderr, so that --json and --dot stay clean. */
static void print_warnings(strata_topology_t t) {
  int n = 0;
  strata_topology_warning_count(t, &n);
  for (int i = 0; i < n; i++) {
    const char *w = NULL;
    if (strata_topology_warning(t, i, &w) == STRATA_OK)
      fprintf(stderr, "strata-topo: warning: %s\n", w);
  }
}

static void print_gpus(strata_topology_t t, int ngpus) {
  printf("\nGPUs (%d):\n", ngpus);
  if (!ngpus) {
    printf("  none found by hwloc\n");
    return;
  }
  printf("  %-6s %-7s %-40s %-9s %-13s %-8s %-5s %-4s %s\n", "index", "vendor", "name", "memory", "PCI bus id",
         "PCIe", "NUMA", "pkg", "OS devices");
  for (int i = 0; i < ngpus; i++) {
    struct strata_topology_gpu g;
    char mem[32], link[16], numa[8], pkg[8];
    strata_topology_gpu(t, i, &g);
    fmt_bytes(mem, sizeof mem, g.memory);
    if (g.pcie_gbps > 0)
      snprintf(link, sizeof link, "%.2f", g.pcie_gbps);
    else
      snprintf(link, sizeof link, "-");
    snprintf(numa, sizeof numa, g.numa_node >= 0 ? "%d" : "-", g.numa_node);
    snprintf(pkg, sizeof pkg, g.package >= 0 ? "%d" : "-", g.package);
    printf("  GPU%-3d %-7s %-40.40s %-9s %-13s %-8s %-5s %-4s %s\n", i, g.vendor, g.name, mem,
           g.pci_bus_id[0] ? g.pci_bus_id : "-", link, numa, pkg, g.os_devices[0] ? g.os_devices : "-");
  }
}

static void print_devices(strata_topology_t t) {
  int n = 0;
  strata_topology_device_count(t, &n);
  printf("\nRuntime devices (%d):\n", n);
  if (!n) {
    printf("  none\n");
    return;
  }
  printf("  %-5s %-8s %-36s %-20s %-9s %-13s %s\n", "index", "backend", "name", "vendor", "memory", "PCI bus id",
         "placed on");
  for (int i = 0; i < n; i++) {
    struct strata_topology_device d;
    char mem[32], where[32];
    strata_topology_device(t, i, &d);
    fmt_bytes(mem, sizeof mem, d.memory);
    if (d.gpu >= 0)
      snprintf(where, sizeof where, "GPU%d (NUMA %d)", d.gpu, d.numa_node);
    else
      snprintf(where, sizeof where, "host");
    printf("  %-5d %-8s %-36.36s %-20.20s %-9s %-13s %s\n", i, d.backend, d.name, d.vendor, mem,
           d.pci_bus_id[0] ? d.pci_bus_id : "-", where);
  }
  /* how each loaded backend's devices run collectives among themselves */
  int nb = 0;
  strata_backend_count(&nb);
  for (int b = 0; b < nb; b++) {
    struct strata_backend_info bi;
    if (strata_backend_info(b, &bi) == STRATA_OK && bi.loaded && bi.device_count > 0)
      printf("  collectives among %s devices: %s\n", bi.name, bi.collectives);
  }
  printf("  collectives across backends: strata's ring, staged through host memory\n");
}

static void print_matrices(strata_topology_t t, int n, int use_nominal) {
  if (!n)
    return;
  char cell[16];
  printf("\nConnections (row to column):\n%-7s", "");
  for (int b = 0; b < n; b++) {
    snprintf(cell, sizeof cell, "GPU%d", b);
    printf(" %-5s", cell);
  }
  printf(" %-20s %s\n", "CPU affinity", "NUMA");
  for (int a = 0; a < n; a++) {
    struct strata_topology_gpu g;
    strata_topology_gpu(t, a, &g);
    snprintf(cell, sizeof cell, "GPU%d", a);
    printf("%-7s", cell);
    for (int b = 0; b < n; b++) {
      struct strata_link l;
      strata_topology_link(t, a, b, &l);
      conn_label(cell, sizeof cell, &l);
      printf(" %-5s", cell);
    }
    char numa[8];
    snprintf(numa, sizeof numa, g.numa_node >= 0 ? "%d" : "-", g.numa_node);
    printf(" %-20s %s\n", g.cpuset[0] ? g.cpuset : "-", numa);
  }
  printf("\nLegend:\n");
  for (int k = 0; k < STRATA_PATH_KIND_COUNT; k++) {
    const char *label = strata_path_kind_label(k);
    char buf[16];
    snprintf(buf, sizeof buf, "%s%s", label, (k == STRATA_PATH_NVLINK || k == STRATA_PATH_XGMI) ? "#" : "");
    printf("  %-5s = %s%s\n", buf, strata_path_kind_text(k),
           (k == STRATA_PATH_NVLINK || k == STRATA_PATH_XGMI) ? " (# links)" : "");
  }

  printf("\nBandwidth, GB/s %s(row to column; the host column is host memory near the GPU):\n%-7s",
         use_nominal ? "nominal " : "", "");
  for (int b = 0; b < n; b++) {
    snprintf(cell, sizeof cell, "GPU%d", b);
    printf(" %7s", cell);
  }
  printf(" %7s\n", "host");
  for (int a = -1; a < n; a++) {
    snprintf(cell, sizeof cell, a < 0 ? "host" : "GPU%d", a);
    printf("%-7s", cell);
    for (int b = 0; b <= n; b++) {
      int to = b == n ? STRATA_TOPOLOGY_HOST : b;
      struct strata_link l;
      strata_topology_link(t, a, to, &l);
      double v = use_nominal ? l.nominal_gbps : l.gbps;
      if (a == to && a >= 0)
        printf(" %7s", "-");
      else
        printf(" %7.2f", v);
    }
    printf("\n");
  }
}

static void print_islands(strata_topology_t t) {
  int n = 0;
  strata_topology_island_count(t, &n);
  printf("\nIslands (%d): groups joined by their fastest links, for tensor-parallel groups\n", n);
  for (int i = 0; i < n; i++) {
    struct strata_topology_island is;
    strata_topology_island(t, i, &is);
    printf("  island %d:", i);
    for (int k = 0; k < is.size; k++)
      printf(" GPU%d", is.gpus[k]);
    if (is.size == 1)
      printf("  (alone)\n");
    else if (is.nlinks)
      printf("  (%s, %d link(s), %.2f GB/s)\n", strata_path_kind_name(is.kind), is.nlinks, is.gbps);
    else
      printf("  (%s, %.2f GB/s)\n", strata_path_kind_name(is.kind), is.gbps);
  }
}

/* ------------------------------------------------------------- rings */

/* One ring: over all GPUs (island < 0) or one island's. Fills order and
** returns its size (0 when there is nothing to order). */
static int ring_of(strata_topology_t t, int island, int ngpus, int *order, double *bn) {
  if (island < 0) {
    if (ngpus < 1 || strata_topology_ring(t, NULL, 0, order, bn) != STRATA_OK)
      return 0;
    return ngpus;
  }
  struct strata_topology_island is;
  if (strata_topology_island(t, island, &is) != STRATA_OK ||
      strata_topology_ring(t, is.gpus, is.size, order, bn) != STRATA_OK)
    return 0;
  return is.size;
}

/* The rings collectives would use: over every GPU and inside each island. */
static void print_rings(strata_topology_t t, int ngpus, int json) {
  int nis = 0;
  strata_topology_island_count(t, &nis);
  int *order = malloc(sizeof *order * (size_t)(ngpus > 0 ? ngpus : 1));
  if (!order)
    return;
  if (json)
    printf("{\"schema\":\"strata-rings/1\",\"rings\":[");
  else
    printf("\nRings (collectives' order: widest bottleneck, then fewest slow hops):\n");
  if (!json && ngpus == 0)
    printf("  none: no GPU\n");
  for (int i = -1; i < (ngpus ? nis : -1); i++) {
    double bn = 0;
    int n = ring_of(t, i, ngpus, order, &bn);
    if (n == 0)
      continue;
    if (json) {
      printf("%s{\"scope\":\"%s\",\"island\":%d,\"order\":[", i < 0 ? "" : ",", i < 0 ? "all" : "island", i);
      for (int k = 0; k < n; k++)
        printf("%s%d", k ? "," : "", order[k]);
      printf("],\"bottleneck_gbps\":%.3f,\"hops\":[", bn);
    } else {
      if (i < 0)
        printf("  all GPUs: ");
      else
        printf("  island %d: ", i);
      for (int k = 0; k < n; k++)
        printf("GPU%d%s", order[k], k + 1 < n ? " -> " : n > 1 ? " -> back" : "");
      if (n > 1)
        printf("  (bottleneck %.2f GB/s:", bn);
    }
    for (int k = 0; k < n && n > 1; k++) {
      struct strata_link l;
      int a = order[k], b = order[(k + 1) % n];
      if (strata_topology_link(t, a, b, &l) != STRATA_OK)
        continue;
      if (json)
        printf("%s{\"from\":%d,\"to\":%d,\"kind\":\"%s\",\"gbps\":%.3f}", k ? "," : "", a, b,
               strata_path_kind_name(l.kind), l.gbps);
      else
        printf(" %s", strata_path_kind_label(l.kind));
    }
    if (json)
      printf("]}");
    else
      printf(n > 1 ? ")\n" : "  (alone)\n");
  }
  if (json)
    printf("]}\n");
  free(order);
}

static void print_measured(strata_topology_t t) {
  int n = 0;
  strata_topology_device_count(t, &n);
  printf("\nMeasured copies, GB/s (from row to column, with the nominal figure):\n");
  for (int a = -1; a < n; a++)
    for (int b = -1; b < n; b++) {
      if (a == b)
        continue;
      struct strata_link l;
      if (strata_topology_device_link(t, a, b, &l) != STRATA_OK || !(l.measured_gbps > 0))
        continue;
      char from[16], to[16];
      snprintf(from, sizeof from, a < 0 ? "host" : "dev%d", a);
      snprintf(to, sizeof to, b < 0 ? "host" : "dev%d", b);
      printf("  %-6s -> %-6s %8.2f measured  %8.2f nominal  (%s)\n", from, to, l.measured_gbps, l.nominal_gbps,
             strata_path_kind_name(l.kind));
    }
}

/* ----------------------------------------------------------- pictures */

static const char *kind_colour(int kind) {
  switch (kind) {
  case STRATA_PATH_NVLINK: return "#76b900";
  case STRATA_PATH_XGMI: return "#ed1c24";
  case STRATA_PATH_PIX: return "#1f77b4";
  case STRATA_PATH_PXB: return "#4a90c8";
  case STRATA_PATH_PHB: return "#7f7f7f";
  case STRATA_PATH_NODE: return "#9f9f9f";
  case STRATA_PATH_NUMA: return "#c0a060";
  case STRATA_PATH_SYS: return "#d08040";
  default: return "#cccccc";
  }
}

/* Largest GPU-to-GPU bandwidth: the scale of edge widths. */
static double max_gbps(strata_topology_t t, int n) {
  double m = 0;
  for (int a = 0; a < n; a++)
    for (int b = 0; b < n; b++) {
      struct strata_link l;
      if (a != b && strata_topology_link(t, a, b, &l) == STRATA_OK && l.gbps > m)
        m = l.gbps;
    }
  return m > 0 ? m : 1;
}

/* Escape for DOT and SVG labels: quotes, backslashes and markup characters go. */
static void clean(char *dst, size_t n, const char *src) {
  size_t j = 0;
  for (size_t i = 0; src[i] && j + 1 < n; i++) {
    char c = src[i];
    dst[j++] = (c == '"' || c == '\\' || c == '<' || c == '>' || c == '&') ? '_' : c;
  }
  dst[j] = '\0';
}

static void print_dot(strata_topology_t t, int n) {
  double top = max_gbps(t, n);
  int nis = 0;
  strata_topology_island_count(t, &nis);
  printf("graph strata_topology {\n  graph [label=\"%s\", overlap=false, splines=true];\n", "strata-topo");
  printf("  node [shape=box, style=rounded, fontname=\"Helvetica\"];\n");
  printf("  host [label=\"host\", shape=ellipse];\n");
  for (int i = 0; i < nis; i++) {
    struct strata_topology_island is;
    strata_topology_island(t, i, &is);
    printf("  subgraph cluster_island%d {\n    label=\"island %d\"; style=dashed;\n", i, i);
    for (int k = 0; k < is.size; k++) {
      struct strata_topology_gpu g;
      char name[STRATA_NAME_MAX];
      strata_topology_gpu(t, is.gpus[k], &g);
      clean(name, sizeof name, g.name);
      printf("    gpu%d [label=\"GPU%d\\n%s\\n%s\"];\n", g.index, g.index, name,
             g.pci_bus_id[0] ? g.pci_bus_id : "no PCI id");
    }
    printf("  }\n");
  }
  for (int a = 0; a < n; a++) {
    struct strata_link l;
    strata_topology_link(t, a, STRATA_TOPOLOGY_HOST, &l);
    printf("  gpu%d -- host [label=\"%s %.1f\", color=\"%s\", penwidth=%.2f, style=dotted];\n", a,
           strata_path_kind_label(l.kind), l.gbps, kind_colour(l.kind), 0.5 + 4.5 * fmin(l.gbps / top, 1.0));
    for (int b = a + 1; b < n; b++) {
      char label[16];
      strata_topology_link(t, a, b, &l);
      conn_label(label, sizeof label, &l);
      printf("  gpu%d -- gpu%d [label=\"%s %.1f\", color=\"%s\", penwidth=%.2f];\n", a, b, label, l.gbps,
             kind_colour(l.kind), 0.5 + 4.5 * fmin(l.gbps / top, 1.0));
    }
  }
  printf("}\n");
}

/* SVG written directly: GPUs on a circle, the host in the middle, edges
** coloured by kind and as wide as their bandwidth, and a legend. */
static void print_svg(strata_topology_t t, int n) {
  const double W = 900, H = 760, cx = 450, cy = 360, r = n > 1 ? 280 : 0;
  double top = max_gbps(t, n);
  double *x = calloc((size_t)n + 1, sizeof *x), *y = calloc((size_t)n + 1, sizeof *y);
  if (!x || !y) {
    free(x);
    free(y);
    return;
  }
  for (int i = 0; i < n; i++) {
    double ang = -M_PI / 2 + 2 * M_PI * i / (n ? n : 1);
    x[i] = cx + r * cos(ang);
    y[i] = cy + r * sin(ang);
  }
  printf("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  printf("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
         "font-family=\"Helvetica,Arial,sans-serif\" font-size=\"12\">\n",
         W, H, W, H);
  char src[256];
  clean(src, sizeof src, strata_topology_source(t));
  printf("  <rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  printf("  <text x=\"10\" y=\"20\" font-size=\"14\">strata-topo: %s</text>\n", src);
  for (int a = 0; a < n; a++) {
    struct strata_link l;
    strata_topology_link(t, a, STRATA_TOPOLOGY_HOST, &l);
    printf("  <line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"%.2f\" "
           "stroke-dasharray=\"4 3\" opacity=\"0.6\"/>\n",
           x[a], y[a], cx, cy, kind_colour(l.kind), 0.5 + 5.5 * fmin(l.gbps / top, 1.0));
  }
  for (int a = 0; a < n; a++)
    for (int b = a + 1; b < n; b++) {
      struct strata_link l;
      strata_topology_link(t, a, b, &l);
      char label[16];
      conn_label(label, sizeof label, &l);
      printf("  <line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"%.2f\" "
             "opacity=\"0.8\"><title>GPU%d - GPU%d: %s, %.2f GB/s</title></line>\n",
             x[a], y[a], x[b], y[b], kind_colour(l.kind), 0.5 + 5.5 * fmin(l.gbps / top, 1.0), a, b, label, l.gbps);
    }
  printf("  <ellipse cx=\"%.1f\" cy=\"%.1f\" rx=\"40\" ry=\"20\" fill=\"#f4f4f4\" stroke=\"black\"/>\n", cx, cy);
  printf("  <text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">host</text>\n", cx, cy + 4);
  for (int i = 0; i < n; i++) {
    struct strata_topology_gpu g;
    char name[40];
    strata_topology_gpu(t, i, &g);
    clean(name, sizeof name, g.name);
    printf("  <g><rect x=\"%.1f\" y=\"%.1f\" width=\"120\" height=\"38\" rx=\"6\" fill=\"#ffffff\" stroke=\"black\"/>"
           "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-weight=\"bold\">GPU%d</text>"
           "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"9\">%.22s</text></g>\n",
           x[i] - 60, y[i] - 19, x[i], y[i] - 4, i, x[i], y[i] + 11, name);
  }
  double ly = H - 30;
  double lx = 10;
  for (int k = STRATA_PATH_NVLINK; k <= STRATA_PATH_SYS; k++) {
    printf("  <line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"%s\" stroke-width=\"4\"/>"
           "<text x=\"%.0f\" y=\"%.0f\">%s</text>\n",
           lx, ly, lx + 24, ly, kind_colour(k), lx + 28, ly + 4, strata_path_kind_label(k));
    lx += 90;
  }
  printf("  <text x=\"10\" y=\"%.0f\" font-size=\"10\">line width: bandwidth (widest = %.1f GB/s); dashed: to host "
         "memory</text>\n",
         H - 8, top);
  printf("</svg>\n");
  free(x);
  free(y);
}

/* ------------------------------------------------------------ cluster */

static const char *cluster_source(int s) {
  return s == STRATA_CLUSTER_MEASURED ? "measured" : s == STRATA_CLUSTER_GIVEN ? "given" : "nominal";
}

/* Under mpirun: every rank's devices in one view, printed by rank 0. */
static void print_cluster(strata_cluster_t cl) {
  struct strata_cluster_info ci;
  strata_cluster_info(cl, &ci);
  static const char *const levels[] = {"MPI_THREAD_SINGLE", "MPI_THREAD_FUNNELED", "MPI_THREAD_SERIALIZED",
                                       "MPI_THREAD_MULTIPLE"};
  printf("Cluster: %d ranks on %d nodes, %d devices (%s, %s)\n", ci.size, ci.node_count, ci.device_count,
         ci.mpi_library[0] ? ci.mpi_library : "MPI", ci.thread_level >= 0 && ci.thread_level <= 3
                                                       ? levels[ci.thread_level] : "thread level ?");
  printf("Between ranks: shared memory %.2f GB/s (%s), %.2f us; network %.2f GB/s (%s), %.2f us\n", ci.shm_gbps,
         cluster_source(ci.shm_source), ci.shm_latency_us, ci.network_gbps, cluster_source(ci.network_source),
         ci.network_latency_us);
  printf("\nRanks:\n  %-5s %-5s %-24s %-8s %-9s %-6s %-5s %s\n", "rank", "node", "node name", "pid", "devices",
         "cores", "GPUs", "memory");
  for (int r = 0; r < ci.size; r++) {
    struct strata_cluster_rank ri;
    char devs[32], mem[32];
    strata_cluster_rank_info(cl, r, &ri);
    if (ri.device_count)
      snprintf(devs, sizeof devs, "%d-%d", ri.first_device, ri.first_device + ri.device_count - 1);
    else
      snprintf(devs, sizeof devs, "none");
    fmt_bytes(mem, sizeof mem, ri.host.memory);
    printf("  %-5d %-5d %-24.24s %-8ld %-9s %-6d %-5d %s\n", r, ri.node, ri.node_name, ri.pid, devs, ri.host.cores,
           ri.gpu_count, mem);
  }
  printf("\nGlobal devices (numbered rank-major):\n  %-5s %-5s %-5s %-16s %-8s %-36s %-9s %s\n", "index", "rank",
         "local", "node", "backend", "name", "memory", "placed on");
  for (int d = 0; d < ci.device_count; d++) {
    struct strata_cluster_device cd;
    struct strata_cluster_node nd;
    char mem[32], where[32];
    strata_cluster_device(cl, d, &cd);
    strata_cluster_node_info(cl, cd.node, &nd);
    fmt_bytes(mem, sizeof mem, cd.info.memory);
    if (cd.info.gpu >= 0)
      snprintf(where, sizeof where, "GPU%d (NUMA %d)", cd.info.gpu, cd.info.numa_node);
    else
      snprintf(where, sizeof where, "host");
    printf("  %-5d %-5d %-5d %-16.16s %-8s %-36.36s %-9s %s\n", d, cd.rank, cd.local, nd.name, cd.info.backend,
           cd.info.name, mem, where);
  }
  printf("\nLinks between ranks (the first device of each; devices of one rank as in its topology):\n");
  for (int a = 0; a < ci.size; a++)
    for (int b = 0; b < ci.size; b++) {
      struct strata_cluster_rank ra, rb;
      struct strata_cluster_link l;
      strata_cluster_rank_info(cl, a, &ra);
      strata_cluster_rank_info(cl, b, &rb);
      if (a == b || !ra.device_count || !rb.device_count ||
          strata_cluster_link(cl, ra.first_device, rb.first_device, &l) != STRATA_OK)
        continue;
      printf("  rank %-3d -> rank %-3d %-8s %8.2f GB/s %8.2f us  (%s)\n", a, b,
             l.scope == STRATA_CLUSTER_NETWORK ? "network" : "shm", l.gbps, l.latency_us, cluster_source(l.source));
    }
}

/* --------------------------------------------------------------- main */

int main(int argc, char **argv) {
  struct opts o = {.devices = -1};
  enum { OPT_DOT = 256, OPT_SVG, OPT_DEVICES, OPT_NO_DEVICES, OPT_NOMINAL, OPT_SOCKET, OPT_NUMA, OPT_NET, OPT_VERSION, OPT_RINGS };
  static const struct option longopts[] = {
      {"input", required_argument, NULL, 'i'},  {"json", no_argument, NULL, 'j'},
      {"dot", no_argument, NULL, OPT_DOT},      {"svg", no_argument, NULL, OPT_SVG},
      {"measure", optional_argument, NULL, 'm'}, {"devices", no_argument, NULL, OPT_DEVICES},
      {"no-devices", no_argument, NULL, OPT_NO_DEVICES}, {"nominal", no_argument, NULL, OPT_NOMINAL},
      {"socket-gbps", required_argument, NULL, OPT_SOCKET}, {"numa-gbps", required_argument, NULL, OPT_NUMA},
      {"net-gbps", required_argument, NULL, OPT_NET}, {"help", no_argument, NULL, 'h'},
      {"version", no_argument, NULL, OPT_VERSION}, {"rings", no_argument, NULL, OPT_RINGS},
      {NULL, 0, NULL, 0}};
  int c;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "i:jmh", longopts, NULL)) != -1) {
    switch (c) {
    case 'i': o.input = optarg; break;
    case 'j': o.format = FORMAT_JSON; break;
    case OPT_DOT: o.format = FORMAT_DOT; break;
    case OPT_SVG: o.format = FORMAT_SVG; break;
    case 'm':
      o.measure = 1;
      if (optarg) {
        uint64_t bytes = 0;
        int prc = strata__parse_size(optarg, &bytes);
        if (prc || bytes == 0 || bytes > ((uint64_t)1 << 34)) {
          fprintf(stderr, "strata-topo: --measure: '%s' is not a size between 1 and 16G (%s)\n", optarg,
                  prc ? strata__parse_why() : bytes ? "too large" : "zero");
          return EXIT_INPUT;
        }
        o.measure_bytes = (size_t)bytes;
      }
      break;
    case OPT_DEVICES: o.devices = 1; break;
    case OPT_NO_DEVICES: o.devices = 0; break;
    case OPT_NOMINAL: o.use_nominal = 1; break;
    case OPT_RINGS: o.rings = 1; break;
    case OPT_SOCKET:
      if (parse_gbps("--socket-gbps", optarg, &o.topo.socket_gbps))
        return EXIT_INPUT;
      break;
    case OPT_NUMA:
      if (parse_gbps("--numa-gbps", optarg, &o.topo.numa_gbps))
        return EXIT_INPUT;
      break;
    case OPT_NET:
      if (parse_gbps("--net-gbps", optarg, &o.topo.net_gbps))
        return EXIT_INPUT;
      break;
    case 'h': usage(stdout); return 0;
    case OPT_VERSION: printf("strata-topo %s\n", strata_version()); return 0;
    default:
      if (optopt && optopt < 256)
        fprintf(stderr, "strata-topo: unknown or incomplete option '-%c' (see --help)\n", optopt);
      else
        fprintf(stderr, "strata-topo: unknown or incomplete option '%s' (see --help)\n", argv[optind - 1]);
      return EXIT_INPUT;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "strata-topo: unexpected argument '%s' (see --help)\n", argv[optind]);
    return EXIT_INPUT;
  }
  if (o.measure && o.devices == 0) {
    fprintf(stderr, "strata-topo: --measure needs the runtime devices; drop --no-devices\n");
    return EXIT_INPUT;
  }

  /* Under mpirun (or srun): join the other ranks; rank 0 prints the whole cluster, then its own box. */
  strata_cluster_t cl = NULL;
  if (strata_cluster_available() && o.devices != 0 && (o.format == FORMAT_TEXT || o.format == FORMAT_JSON)) {
    struct strata_cluster_options co = {.topology_xml = o.input, .network_gbps = o.topo.net_gbps};
    if (strata_cluster_init(&argc, &argv, &co, &cl) != STRATA_OK) {
      fprintf(stderr, "strata-topo: %s\n", strata_last_error());
      return EXIT_RUNTIME;
    }
    struct strata_cluster_info ci;
    strata_cluster_info(cl, &ci);
    if (ci.rank != 0 || (o.format == FORMAT_JSON && !o.rings)) {
      int st = 0;
      if (ci.rank == 0) {
        char *json = NULL;
        if (strata_cluster_to_json(cl, &json) == STRATA_OK)
          printf("%s\n", json);
        else
          st = EXIT_RUNTIME;
        free(json);
      }
      strata_cluster_free(cl);
      strata_shutdown();
      if (fflush(stdout) != 0 || ferror(stdout))
        return EXIT_RUNTIME;
      return st;
    }
    if (!o.rings) {
      print_cluster(cl);
      printf("\nRank 0's box:\n\n");
    }
  }

  strata_topology_t t = NULL;
  int rc = strata_topology_load_with(o.input, &o.topo, &t);
  if (rc != STRATA_OK) {
    fprintf(stderr, "strata-topo: %s\n", strata_last_error());
    return EXIT_INPUT;
  }
  int from_xml = strcmp(strata_topology_source(t), "live") != 0;
  int map = o.devices < 0 ? (!from_xml || o.measure) : o.devices;
  int status = 0;
  if (map) {
    rc = strata_topology_map_runtime(t);
    if (rc != STRATA_OK)
      fprintf(stderr, "strata-topo: warning: runtime devices not available: %s\n", strata_last_error());
  }
  if (o.measure) {
    int ndev = 0;
    strata_topology_device_count(t, &ndev);
    if (ndev == 0) {
      fprintf(stderr, "strata-topo: --measure: no runtime device to measure\n");
      status = EXIT_RUNTIME;
    } else if ((rc = strata_topology_measure(t, o.measure_bytes, 0)) != STRATA_OK) {
      fprintf(stderr, "strata-topo: --measure: %s\n", strata_last_error());
      status = EXIT_RUNTIME;
    }
  }
  if (o.use_nominal)
    strata_topology_use_measured(t, 0);

  int ngpus = 0;
  strata_topology_gpu_count(t, &ngpus);
  print_warnings(t);
  if (o.rings && o.format != FORMAT_JSON && o.format != 0) {
    fprintf(stderr, "strata-topo: --rings prints text or JSON, not DOT or SVG\n");
    strata_topology_free(t);
    return EXIT_INPUT;
  }
  switch (o.rings ? -1 : o.format) {
  case -1:
    print_rings(t, ngpus, o.format == FORMAT_JSON);
    break;
  case FORMAT_JSON: {
    char *json = NULL;
    if (strata_topology_to_json(t, &json) != STRATA_OK) {
      fprintf(stderr, "strata-topo: %s\n", strata_last_error());
      status = EXIT_RUNTIME;
      break;
    }
    printf("%s\n", json);
    free(json);
    break;
  }
  case FORMAT_DOT: print_dot(t, ngpus); break;
  case FORMAT_SVG: print_svg(t, ngpus); break;
  default:
    print_host(t);
    print_gpus(t, ngpus);
    if (map)
      print_devices(t);
    print_matrices(t, ngpus, o.use_nominal);
    print_islands(t);
    print_rings(t, ngpus, 0);
    if (o.measure)
      print_measured(t);
    break;
  }
  strata_topology_free(t);
  strata_cluster_free(cl);
  if (map || cl)
    strata_shutdown();
  if (fflush(stdout) != 0 || ferror(stdout)) {
    fprintf(stderr, "strata-topo: error writing the output: %s\n", strerror(errno));
    return EXIT_RUNTIME;
  }
  return status;
}
