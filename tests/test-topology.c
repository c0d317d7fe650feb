/* SPDX-License-Identifier: MIT */
/* test-topology.c — the topology unit: the project's own fixtures, every real dump in tests/fixtures/topologies, bad input, mapping, calibration and JSON. */
#define _GNU_SOURCE /* memmem */
#include <criterion/criterion.h>
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <strata/common.h>
#include <strata/device.h>
#include <strata/topology.h>

#define OK(call)                                                                                                       \
  do {                                                                                                                 \
    int rc_ = (call);                                                                                                  \
    cr_assert_eq(rc_, STRATA_OK, "%s -> %s: %s", #call, strata_err_name(rc_), strata_last_error());                    \
  } while (0)

static char path_buf[4096];

static const char *fixture(const char *name) {
  snprintf(path_buf, sizeof path_buf, "%s/%s", STRATA_TEST_FIXTURES, name);
  return path_buf;
}

static const char *dumps_dir(void) { return STRATA_TEST_TOPOLOGIES_DIR; }

/* Load a real dump by name; a fixture of the tree, so a missing one fails the test. */
static strata_topology_t load_dump(const char *name) {
  static char p[4096];
  struct stat st;
  snprintf(p, sizeof p, "%s/%s", dumps_dir(), name);
  cr_assert_eq(stat(p, &st), 0, "%s is missing: the real hwloc dumps are fixtures of the tree (tests/fixtures/topologies)",
               p);
  strata_topology_t t = NULL;
  int rc = strata_topology_load(p, &t);
  cr_assert_eq(rc, STRATA_OK, "loading %s: %s", p, strata_last_error());
  return t;
}

static struct strata_link link_of(strata_topology_t t, int a, int b) {
  struct strata_link l;
  OK(strata_topology_link(t, a, b, &l));
  return l;
}

static int gpus(strata_topology_t t) {
  int n = -1;
  OK(strata_topology_gpu_count(t, &n));
  return n;
}

static struct strata_topology_gpu gpu(strata_topology_t t, int i) {
  struct strata_topology_gpu g;
  OK(strata_topology_gpu(t, i, &g));
  return g;
}

/* Assert the islands are exactly `expect`, given as "0,1|2,3". */
static void assert_islands(strata_topology_t t, const char *expect) {
  char got[1024] = "";
  int n = 0;
  OK(strata_topology_island_count(t, &n));
  for (int i = 0; i < n; i++) {
    struct strata_topology_island is;
    OK(strata_topology_island(t, i, &is));
    size_t len = strlen(got);
    snprintf(got + len, sizeof got - len, "%s", i ? "|" : "");
    for (int k = 0; k < is.size; k++) {
      len = strlen(got);
      snprintf(got + len, sizeof got - len, "%s%d", k ? "," : "", is.gpus[k]);
    }
  }
  cr_assert_str_eq(got, expect, "islands: got %s, expected %s", got, expect);
}

/* Every pair (a, b), a != b, has kind `kind` (both directions). */
static void assert_all_pairs(strata_topology_t t, int kind, int nlinks, double gbps) {
  int n = gpus(t);
  for (int a = 0; a < n; a++)
    for (int b = 0; b < n; b++) {
      if (a == b)
        continue;
      struct strata_link l = link_of(t, a, b);
      cr_assert_eq(l.kind, kind, "GPU%d-GPU%d is %s, expected %s", a, b, strata_path_kind_name(l.kind),
                   strata_path_kind_name(kind));
      if (nlinks >= 0)
        cr_assert_eq(l.nlinks, nlinks, "GPU%d-GPU%d has %d links, expected %d", a, b, l.nlinks, nlinks);
      if (gbps > 0)
        cr_assert_float_eq(l.nominal_gbps, gbps, 0.01, "GPU%d-GPU%d %.2f GB/s, expected %.2f", a, b, l.nominal_gbps,
                           gbps);
    }
}

static void assert_kind(strata_topology_t t, int a, int b, int kind) {
  struct strata_link l = link_of(t, a, b), r = link_of(t, b, a);
  cr_assert_eq(l.kind, kind, "GPU%d-GPU%d is %s, expected %s", a, b, strata_path_kind_name(l.kind),
               strata_path_kind_name(kind));
  cr_assert_eq(r.kind, kind, "GPU%d-GPU%d is %s, expected %s", b, a, strata_path_kind_name(r.kind),
               strata_path_kind_name(kind));
}

/* ------------------------------------------------------------- fixtures */

Test(fixture, two_socket_four_gpus) {
  strata_topology_t t = NULL;
  OK(strata_topology_load(fixture("two-socket-4gpu-nvlink.xml"), &t));
  cr_assert_eq(gpus(t), 4, "the ASPEED VGA and the NIC are not GPUs");
  static const char *const bus[] = {"0000:03:00.0", "0000:04:00.0", "0000:83:00.0", "0000:84:00.0"};
  for (int i = 0; i < 4; i++) {
    struct strata_topology_gpu g = gpu(t, i);
    cr_assert_eq(g.index, i);
    cr_assert_str_eq(g.pci_bus_id, bus[i]);
    cr_assert_str_eq(g.vendor, "NVIDIA");
    cr_assert_str_eq(g.name, "Tesla V100-SXM2-16GB");
    cr_assert_eq(g.numa_node, i / 2);
    cr_assert_eq(g.package, i / 2);
    cr_assert_str_eq(g.cpuset, i < 2 ? "0-1" : "2-3");
    cr_assert_eq(g.memory, 16515072ull * 1024);
    cr_assert_str_eq(g.os_devices, i == 0 ? "cuda0,nvml0" : g.os_devices);
  }
  struct strata_link nv = link_of(t, 0, 1), pix = link_of(t, 2, 3), sys = link_of(t, 1, 2), host = link_of(t, 0, -1);
  cr_assert_eq(nv.kind, STRATA_PATH_NVLINK);
  cr_assert_eq(nv.nlinks, 4);
  cr_assert_float_eq(nv.nominal_gbps, 100.0, 1e-9);
  cr_assert_eq(nv.source, STRATA_LINK_SOURCE_MATRIX);
  cr_assert_eq(pix.kind, STRATA_PATH_PIX);
  cr_assert_eq(pix.nlinks, 0);
  cr_assert_float_eq(pix.nominal_gbps, 15.75, 0.01);
  cr_assert_eq(sys.kind, STRATA_PATH_SYS);
  cr_assert_eq(host.kind, STRATA_PATH_PHB);
  cr_assert_float_eq(host.nominal_gbps, 15.75, 0.01);
  cr_assert(nv.gbps > pix.gbps && pix.gbps > sys.gbps, "NVLink > same switch > across sockets");
  cr_assert(nv.latency_us < pix.latency_us && pix.latency_us < sys.latency_us);
  struct strata_link self = link_of(t, 2, 2);
  cr_assert_eq(self.kind, STRATA_PATH_SELF);
  cr_assert_eq(link_of(t, -1, -1).kind, STRATA_PATH_SELF);
  assert_islands(t, "0,1|2,3");
  struct strata_topology_island is;
  OK(strata_topology_island(t, 0, &is));
  cr_assert_eq(is.kind, STRATA_PATH_NVLINK);
  cr_assert_eq(is.nlinks, 4);
  OK(strata_topology_island(t, 1, &is));
  cr_assert_eq(is.kind, STRATA_PATH_PIX);
  int island = -1;
  OK(strata_topology_gpu_island(t, 3, &island));
  cr_assert_eq(island, 1);
  struct strata_topology_host h;
  OK(strata_topology_host(t, &h));
  cr_assert_eq(h.packages, 2);
  cr_assert_eq(h.numa_nodes, 2);
  cr_assert_eq(h.pus, 4);
  cr_assert_str_eq(h.hostname, "fixture-2s4g");
  strata_topology_free(t);
}

Test(fixture, cpu_only_box) {
  strata_topology_t t = NULL;
  OK(strata_topology_load(fixture("cpu-only.xml"), &t));
  cr_assert_eq(gpus(t), 0);
  int n = -1;
  OK(strata_topology_island_count(t, &n));
  cr_assert_eq(n, 0);
  struct strata_link l;
  OK(strata_topology_link(t, STRATA_TOPOLOGY_HOST, STRATA_TOPOLOGY_HOST, &l));
  cr_assert_eq(l.kind, STRATA_PATH_SELF);
  cr_assert_eq(strata_topology_link(t, 0, 0, &l), STRATA_ERR_RANGE);
  strata_topology_free(t);
}

Test(fixture, options_and_environment) {
  strata_topology_t t = NULL;
  struct strata_topology_options o = {.socket_gbps = 4.0};
  OK(strata_topology_load_with(fixture("two-socket-4gpu-nvlink.xml"), &o, &t));
  cr_assert_float_eq(link_of(t, 0, 2).nominal_gbps, 2.0, 0.01, "SYS = 50%% of the 4 GB/s override");
  cr_assert_eq(link_of(t, 0, 2).source, STRATA_LINK_SOURCE_DEFAULT);
  o.socket_gbps = 0;
  OK(strata_topology_set_options(t, &o));
  cr_assert_float_eq(link_of(t, 0, 2).nominal_gbps, 15.75 * 0.5, 0.01);
  OK(strata_topology_options(t, &o));
  cr_assert_float_eq(o.socket_gbps, 20.8, 1e-9);
  cr_assert_float_eq(o.net_gbps, 12.5, 1e-9);
  strata_topology_free(t);

  setenv("STRATA_TOPOLOGY_XML", fixture("two-socket-4gpu-nvlink.xml"), 1);
  setenv("STRATA_TOPO_SOCKET_GBPS", "6", 1);
  OK(strata_topology_load(NULL, &t));
  unsetenv("STRATA_TOPOLOGY_XML");
  unsetenv("STRATA_TOPO_SOCKET_GBPS");
  cr_assert_str_eq(strata_topology_source(t), fixture("two-socket-4gpu-nvlink.xml"));
  cr_assert_eq(gpus(t), 4);
  cr_assert_float_eq(link_of(t, 1, 3).nominal_gbps, 3.0, 0.01);
  strata_topology_free(t);
}

/* A failed load returns `status`, leaves *out alone and says one line naming the file. */
static void expect_failure(const char *path, int status, const char *words) {
  strata_topology_t t = (strata_topology_t)0x1;
  int rc = strata_topology_load(path, &t);
  cr_assert_eq(rc, status, "%s: got %s (%s), expected %s", path, strata_err_name(rc), strata_last_error(),
               strata_err_name(status));
  cr_assert_eq(t, (strata_topology_t)0x1, "out must be untouched on failure");
  const char *msg = strata_last_error();
  cr_assert(strstr(msg, path) == msg, "message names the file first: %s", msg);
  cr_assert(strchr(msg, '\n') == NULL, "one line: %s", msg);
  cr_assert(strstr(msg, words) != NULL, "message '%s' should say '%s'", msg, words);
}

/* ------------------------------------- classes of real machines (issue 12) */

/* How many of the topology's warnings contain `words`. */
static int warnings_with(strata_topology_t t, const char *words) {
  int n = 0, hits = 0;
  OK(strata_topology_warning_count(t, &n));
  for (int i = 0; i < n; i++) {
    const char *w = NULL;
    OK(strata_topology_warning(t, i, &w));
    cr_assert(w && strchr(w, '\n') == NULL, "a warning is one line");
    if (strstr(w, words))
      hits++;
  }
  return hits;
}

static int warning_count(strata_topology_t t) {
  int n = -1;
  OK(strata_topology_warning_count(t, &n));
  return n;
}


/* (a) onboard BMC VGA (ATI ES1000 1002:515e, Matrox G200eW 102b:0532) beside three V100s: three GPUs. */
Test(classes, a_bmc_vga_is_not_a_gpu) {
  strata_topology_t t = NULL;
  OK(strata_topology_load(fixture("class-a-bmc-vga.xml"), &t));
  cr_assert_eq(gpus(t), 3, "3 V100s; the ES1000 and the G200eW are not GPUs (got %d)", gpus(t));
  static const char *const bus[] = {"0000:01:00.0", "0000:02:00.0", "0000:03:00.0"};
  for (int i = 0; i < 3; i++) {
    cr_assert_str_eq(gpu(t, i).pci_bus_id, bus[i]);
    cr_assert_eq(gpu(t, i).vendor_id, 0x10de);
  }
  assert_islands(t, "0,1,2");
  cr_assert_eq(warning_count(t), 0, "BMC graphics are no news");
  strata_topology_free(t);
}

/* (a) a GPU-less server whose only display device is an ES1000: no GPU, no island. */
Test(classes, a_gpu_less_server_with_bmc_vga) {
  strata_topology_t t = NULL;
  OK(strata_topology_load(fixture("class-a-bmc-vga-no-gpu.xml"), &t));
  cr_assert_eq(gpus(t), 0);
  int n = -1;
  OK(strata_topology_island_count(t, &n));
  cr_assert_eq(n, 0);
  strata_topology_free(t);
}

/* (b) NUMA nodes P#1, P#2 of subtype GPUMemory with a PCIBusID: the GPUs' memory, not host RAM. */
Test(classes, b_gpu_memory_numa_nodes_belong_to_the_gpu) {
  strata_topology_t t = NULL;
  OK(strata_topology_load(fixture("class-b-gpu-memory-numa.xml"), &t));
  struct strata_topology_host h;
  OK(strata_topology_host(t, &h));
  cr_assert_eq(h.numa_nodes, 1, "one host NUMA node, got %d", h.numa_nodes);
  cr_assert_eq(h.gpu_numa_nodes, 2);
  cr_assert_eq(h.memory, 68719476736ull, "64 GiB of host RAM, got %llu", (unsigned long long)h.memory);
  cr_assert_eq(gpus(t), 2);
  cr_assert_str_eq(gpu(t, 0).pci_bus_id, "0004:01:00.0");
  cr_assert_eq(gpu(t, 0).memory_numa_node, 1);
  cr_assert_eq(gpu(t, 1).memory_numa_node, 2);
  cr_assert_eq(gpu(t, 0).numa_node, 0, "placed near the host node, not its own memory");
  cr_assert_eq(warning_count(t), 0, "the dump says whose memory it is");
  strata_topology_free(t);
}

/* (b) the same box as an hwloc 1.x export: CPU-less nodes P#252, P#253 without subtype or bus id. */
Test(classes, b_gpu_memory_numa_nodes_from_an_hwloc1_export) {
  strata_topology_t t = NULL;
  OK(strata_topology_load(fixture("class-b-gpu-memory-numa-v1.xml"), &t));
  struct strata_topology_host h;
  OK(strata_topology_host(t, &h));
  cr_assert_eq(h.numa_nodes, 1, "one host NUMA node, got %d", h.numa_nodes);
  cr_assert_eq(h.gpu_numa_nodes, 2);
  cr_assert_eq(h.memory, 68719476736ull, "64 GiB of host RAM, got %llu", (unsigned long long)h.memory);
  cr_assert_eq(gpus(t), 2);
  /* nothing here names an owner: the AC922 order, downward, assumed and said so */
  cr_assert_eq(gpu(t, 0).memory_numa_node, 253);
  cr_assert_eq(gpu(t, 1).memory_numa_node, 252);
  cr_assert_eq(warnings_with(t, "P#252..P#253"), 1, "the guess is said");
  cr_assert_eq(warnings_with(t, "in descending order (GPU0 on P#253), an assumed order"), 1);
  strata_topology_free(t);
}

static void write_file(const char *path, const void *data, size_t len);

/*
** Load the real dump `name` with each `from[i]` (found once) replaced by
** `to[i]`, through a temporary file: variants of an edited dump.
*/
static strata_topology_t load_dump_variant(const char *name, const char *const *from, const char *const *to, int n) {
  char p[4096];
  snprintf(p, sizeof p, "%s/%s", dumps_dir(), name);
  FILE *f = fopen(p, "rb");
  cr_assert_not_null(f, "%s", p);
  size_t cap = 1 << 20, len = 0;
  char *buf = malloc(cap);
  cr_assert_not_null(buf);
  len = fread(buf, 1, cap - 1, f);
  fclose(f);
  cr_assert(len > 0 && len < cap - 1);
  buf[len] = '\0';
  for (int i = 0; i < n; i++) {
    char *at = strstr(buf, from[i]);
    cr_assert_not_null(at, "%s: no %s", name, from[i]);
    cr_assert_null(strstr(at + 1, from[i]), "%s: %s more than once", name, from[i]);
    size_t fl = strlen(from[i]), tl = strlen(to[i]);
    cr_assert(len - fl + tl < cap);
    memmove(at + tl, at + fl, len - (size_t)(at - buf) - fl + 1);
    memcpy(at, to[i], tl);
    len = len - fl + tl;
  }
  char path[] = "/tmp/strata-topo-variant-XXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  close(fd);
  write_file(path, buf, len);
  free(buf);
  strata_topology_t t = NULL;
  int rc = strata_topology_load(path, &t);
  remove(path);
  cr_assert_eq(rc, STRATA_OK, "loading a variant of %s: %s", name, strata_last_error());
  return t;
}

/*
** GPU-memory NUMA nodes that do not all name their GPU (issue 37, item 6):
** the Lassen dump edited to hold the four nodes P#252..P#255 of the same
** host's hwloc 1.x export, P#255 naming GPU0 and P#254 GPU1 (downward, as
** the AC922 dump that names its owners numbers them), P#253 and P#252
** naming none. The order is read from the named ones: GPU2 and GPU3 take
** P#253 and P#252, and the warning says the order came from the dump.
*/
#define LASSEN_OWNERS "ibm-power9-lassen-v100-4gpu-gpu-memory-two-owners-edited.xml"
Test(classes, b_gpu_memory_order_read_from_the_nodes_that_name_their_gpu) {
  strata_topology_t t = load_dump(LASSEN_OWNERS);
  strata_topology_t orig = load_dump("ibm-power9-lassen-v100-4gpu.xml");
  struct strata_topology_host h, ho;
  OK(strata_topology_host(t, &h));
  OK(strata_topology_host(orig, &ho));
  cr_assert_eq(h.numa_nodes, 2, "the two host nodes P#0 and P#8, got %d", h.numa_nodes);
  cr_assert_eq(h.gpu_numa_nodes, 4);
  cr_assert_eq(h.memory, ho.memory, "GPU memory is no host RAM");
  cr_assert_eq(gpus(t), 4);
  static const int nodes[] = {255, 254, 253, 252};
  for (int g = 0; g < 4; g++) {
    cr_assert_eq(gpu(t, g).memory_numa_node, nodes[g], "GPU%d: P#%d, expected P#%d", g, gpu(t, g).memory_numa_node,
                 nodes[g]);
    cr_assert_eq(gpu(t, g).numa_node, gpu(orig, g).numa_node, "placed near its host node, not its own memory");
  }
  cr_assert_eq(warning_count(t), 1);
  cr_assert_eq(warnings_with(t, "P#252..P#253"), 1);
  cr_assert_eq(warnings_with(t, "GPUs 2..3 in descending order (GPU2 on P#253), the order the NUMA nodes that name "
                                "their GPU show"),
               1);
  cr_assert_eq(warnings_with(t, "assumed"), 0, "the order is the dump's, not a guess");
  strata_topology_free(t);
  strata_topology_free(orig);
}

/* The same nodes naming GPU2 and GPU3 instead: upward, so GPU0 and GPU1 take P#252 and P#253. */
Test(classes, b_gpu_memory_order_upward_when_the_named_nodes_say_so) {
  static const char *const from[] = {"<info name=\"PCIBusID\" value=\"0004:05:00.0\"/>",
                                     "<info name=\"PCIBusID\" value=\"0004:04:00.0\"/>"};
  static const char *const to[] = {"<info name=\"PCIBusID\" value=\"0035:03:00.0\"/>",
                                   "<info name=\"PCIBusID\" value=\"0035:04:00.0\"/>"};
  strata_topology_t t = load_dump_variant(LASSEN_OWNERS, from, to, 2);
  static const int nodes[] = {252, 253, 254, 255};
  for (int g = 0; g < 4; g++)
    cr_assert_eq(gpu(t, g).memory_numa_node, nodes[g], "GPU%d: P#%d, expected P#%d", g, gpu(t, g).memory_numa_node,
                 nodes[g]);
  cr_assert_eq(warnings_with(t, "GPUs 0..1 in ascending order (GPU0 on P#252), the order the NUMA nodes that name"), 1);
  strata_topology_free(t);
}

/* No node naming its GPU (the owners removed): the AC922 order, downward, assumed and said so. */
Test(classes, b_gpu_memory_order_assumed_without_owners) {
  static const char *const from[] = {
      "os_index=\"254\" subtype=\"GPUMemory\"", "os_index=\"255\" subtype=\"GPUMemory\"",
      "\n      <info name=\"PCIBusID\" value=\"0004:05:00.0\"/>", "\n      <info name=\"PCIBusID\" value=\"0004:04:00.0\"/>"};
  static const char *const to[] = {"os_index=\"254\"", "os_index=\"255\"", "", ""};
  strata_topology_t t = load_dump_variant(LASSEN_OWNERS, from, to, 4);
  static const int nodes[] = {255, 254, 253, 252};
  for (int g = 0; g < 4; g++)
    cr_assert_eq(gpu(t, g).memory_numa_node, nodes[g], "GPU%d: P#%d, expected P#%d", g, gpu(t, g).memory_numa_node,
                 nodes[g]);
  cr_assert_eq(warning_count(t), 1);
  cr_assert_eq(warnings_with(t, "NUMA nodes P#252..P#255 have no CPUs and do not say whose they are"), 1);
  cr_assert_eq(warnings_with(t, "GPUs 0..3 in descending order (GPU0 on P#255), an assumed order"), 1);
  strata_topology_free(t);
}

/* Named nodes that fit neither order (GPU0 on P#254, GPU1 on P#255 of four) decide nothing: assumed, said so. */
Test(classes, b_gpu_memory_order_assumed_when_the_named_nodes_disagree) {
  /* the two bus ids swapped, through a stand-in so each replacement finds one copy */
  static const char *const from[] = {"<info name=\"PCIBusID\" value=\"0004:05:00.0\"/>",
                                     "<info name=\"PCIBusID\" value=\"0004:04:00.0\"/>", "SWAPPED"};
  static const char *const to[] = {"SWAPPED", "<info name=\"PCIBusID\" value=\"0004:05:00.0\"/>",
                                   "<info name=\"PCIBusID\" value=\"0004:04:00.0\"/>"};
  strata_topology_t t = load_dump_variant(LASSEN_OWNERS, from, to, 3);
  cr_assert_eq(gpu(t, 0).memory_numa_node, 254);
  cr_assert_eq(gpu(t, 1).memory_numa_node, 255);
  cr_assert_eq(gpu(t, 2).memory_numa_node, 253);
  cr_assert_eq(gpu(t, 3).memory_numa_node, 252);
  cr_assert_eq(warnings_with(t, "an assumed order"), 1);
  cr_assert_eq(warnings_with(t, "those here that name theirs do not decide it"), 1);
  strata_topology_free(t);
}

/* (c) GPU1's own link recorded at 1 GB/s under a 15.75 GB/s switch: one figure, planned at 15.75, warned. */
Test(classes, c_pcie_link_in_power_saving_state) {
  strata_topology_t t = NULL;
  OK(strata_topology_load(fixture("class-c-pcie-power-saving.xml"), &t));
  cr_assert_eq(gpus(t), 2);
  cr_assert_float_eq(gpu(t, 0).pcie_gbps, 15.75, 0.01);
  cr_assert_float_eq(gpu(t, 1).pcie_gbps, 15.75, 0.01, "planned at the switch's Gen3 x16, got %.2f",
                     gpu(t, 1).pcie_gbps);
  /* the GPU's own figure and every path through its link agree */
  cr_assert_float_eq(link_of(t, 1, STRATA_TOPOLOGY_HOST).nominal_gbps, gpu(t, 1).pcie_gbps, 0.01);
  cr_assert_float_eq(link_of(t, STRATA_TOPOLOGY_HOST, 1).nominal_gbps, gpu(t, 1).pcie_gbps, 0.01);
  assert_kind(t, 0, 1, STRATA_PATH_PIX);
  cr_assert_float_eq(link_of(t, 0, 1).nominal_gbps, 15.75, 0.01);
  cr_assert_eq(warning_count(t), 1);
  cr_assert_eq(warnings_with(t, "GPU1 (0000:04:00.0)"), 1);
  cr_assert_eq(warnings_with(t, "power-saving"), 1);
  strata_topology_free(t);
}

/* (c) a real narrow switch uplink is no power-saving state (IBM AC922, Lassen: x4 uplinks). */
Test(classes, c_narrow_switch_uplink_is_real) {
  strata_topology_t t = load_dump("ibm-power9-lassen-v100-4gpu.xml");
  cr_assert_eq(warnings_with(t, "power-saving"), 0);
  cr_assert_float_eq(gpu(t, 0).pcie_gbps, 15.75, 0.01);
  strata_topology_free(t);
}

/* (d) 0000:03:00.0 as two PCI objects, cuda1 listed twice: two GPUs, one per bus id. */
Test(classes, d_duplicate_pci_and_os_devices_give_one_gpu_per_bus_id) {
  strata_topology_t t = NULL;
  OK(strata_topology_load(fixture("class-d-duplicate-pci.xml"), &t));
  cr_assert_eq(gpus(t), 2, "got %d", gpus(t));
  cr_assert_str_eq(gpu(t, 0).pci_bus_id, "0000:03:00.0");
  cr_assert_str_eq(gpu(t, 0).os_devices, "cuda0,nvml0");
  cr_assert_str_eq(gpu(t, 1).pci_bus_id, "0000:04:00.0");
  cr_assert_str_eq(gpu(t, 1).os_devices, "cuda1,nvml1");
  cr_assert_eq(gpu(t, 1).partition, 0);
  cr_assert_eq(warnings_with(t, "0000:03:00.0 appears 2 times"), 1);
  strata_topology_free(t);
}

/* (e) class 0302 with vendor 0000 and GPU memory in NUMA node P#1: not counted, but said. */
Test(classes, e_gpu_like_device_with_zeroed_vendor_warns) {
  strata_topology_t t = NULL;
  OK(strata_topology_load(fixture("class-e-missed-gpu.xml"), &t));
  cr_assert_eq(gpus(t), 0);
  cr_assert_eq(warnings_with(t, "0004:01:00.0, class 0302 [0000:0000], looks like a GPU"), 1);
  cr_assert_eq(warnings_with(t, "NUMA node P#1 holds its memory"), 1);
  struct strata_topology_host h;
  OK(strata_topology_host(t, &h));
  cr_assert_eq(h.numa_nodes, 1);
  cr_assert_eq(h.memory, 68719476736ull);
  char *json = NULL;
  OK(strata_topology_to_json(t, &json));
  cr_assert(strstr(json, "looks like a GPU") != NULL, "warnings are in the JSON too");
  free(json);
  strata_topology_free(t);
}

/*
** GPUs under NUMA nodes a cgroup leaves out of the allowed set (issue 37,
** item 6): the XE8640 dump with its allowed nodeset edited to 0, 2, 4, 6.
** hwloc drops nodes 1, 3, 5, 7; each GPU keeps the node of the unedited
** dump, with a warning naming the GPU and the node, and its paths stay.
*/
Test(classes, gpus_under_numa_nodes_outside_the_allowed_set_keep_them) {
  strata_topology_t t = load_dump("dell-xe8640-h100-4gpu-cgroup-even-nodes-edited.xml");
  strata_topology_t orig = load_dump("dell-xe8640-h100-4gpu-nvlink.xml");
  struct strata_topology_host h;
  OK(strata_topology_host(t, &h));
  cr_assert_eq(h.numa_nodes, 4, "the allowed nodes are the host's, got %d", h.numa_nodes);
  cr_assert_eq(gpus(t), 4);
  static const int nodes[] = {3, 1, 7, 5};
  for (int g = 0; g < 4; g++) {
    cr_assert_eq(gpu(t, g).numa_node, nodes[g], "GPU%d: NUMA node %d, expected %d", g, gpu(t, g).numa_node, nodes[g]);
    cr_assert_eq(gpu(orig, g).numa_node, nodes[g]);
    cr_assert_eq(gpu(t, g).package, gpu(orig, g).package);
    for (int o = 0; o < 4; o++)
      cr_assert_eq(link_of(t, g, o).kind, link_of(orig, g, o).kind);
  }
  cr_assert_eq(warning_count(t), 4);
  cr_assert_eq(warnings_with(t, "NUMA node 7 of GPU2 (0000:cb:00.0) lies outside this process's allowed set (cgroup)"),
               1);
  cr_assert_eq(warnings_with(t, "NUMA node 3 of GPU0 (0000:4e:00.0)"), 1);
  strata_topology_free(t);
  strata_topology_free(orig);
}

/* Every real dump: no warning where nothing is odd, and GPU memory never counted as a host node. */
Test(classes, real_dumps_give_no_false_warnings) {
  static const char *const names[] = {
      "nvidia-dgx2-v100-16gpu-nvswitch.xml", "ibm-power8-minsky-p100-4gpu-nvlink.xml",
      "dell-xe8640-h100-4gpu-nvlink.xml",    "aws-g4dn-metal-t4-8gpu-pcie.xml",
      "jureca-dc-a100-4gpu-pci-only.xml",    "hpe-ex235a-mi250x-8gcd-xgmi.xml",
      "supermicro-epyc-mi50-8gpu-pcie.xml",  "intel-broadwell-2s-cpu-only.xml",
      "ibm-power9-lassen-v100-4gpu.xml"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    strata_topology_t t = load_dump(names[i]);
    cr_assert_eq(warning_count(t), 0, "%s: %d warnings", names[i], warning_count(t));
    strata_topology_free(t);
  }
}

/* ------------------------------------ what reaches hwloc (issue 12, item 1) */

static size_t read_fixture(const char *name, char *buf, size_t cap) {
  FILE *f = fopen(fixture(name), "rb");
  cr_assert_not_null(f, "%s", fixture(name));
  size_t len = fread(buf, 1, cap, f);
  fclose(f);
  cr_assert(len > 0 && len < cap);
  return len;
}

static void write_file(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f);
  cr_assert_eq(fwrite(data, 1, len, f), len);
  cr_assert_eq(fclose(f), 0);
}

/* A v2 Core without complete_cpuset makes hwloc 2.9 segfault: refused before hwloc sees it. */
Test(hwloc_safety, core_without_complete_cpuset_is_refused) {
  expect_failure(fixture("hwloc-crash-core-without-complete-cpuset.xml"), STRATA_ERR_PARSE,
                 "Core object without complete_cpuset");
}

/* Every normal and memory object lacking any of its four sets: an error naming it, never a signal. */
Test(hwloc_safety, objects_without_the_sets_hwloc_dereferences_are_refused) {
  static char buf[1 << 16], out[1 << 16];
  size_t len = read_fixture("two-socket-4gpu-nvlink.xml", buf, sizeof buf);
  buf[len] = '\0';
  static const char *const types[] = {"Machine", "Package", "NUMANode", "Core", "PU"};
  static const char *const sets[] = {"cpuset", "complete_cpuset", "nodeset", "complete_nodeset"};
  char path[] = "/tmp/strata-topo-sets-XXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  close(fd);
  for (size_t ti = 0; ti < 5; ti++)
    for (size_t si = 0; si < 4; si++)
      for (int nth = 0; nth < 2; nth++) { /* the first and the second object of that type */
        char tag[64], attr[64];
        snprintf(tag, sizeof tag, "type=\"%s\"", types[ti]);
        snprintf(attr, sizeof attr, " %s=\"", sets[si]);
        char *obj = strstr(buf, tag);
        for (int k = 0; k < nth && obj; k++)
          obj = strstr(obj + 1, tag);
        if (!obj)
          continue;
        char *eol = strchr(obj, '>');
        char *a = strstr(obj, attr);
        cr_assert(a && a < eol, "%s has %s", types[ti], sets[si]);
        char *aend = strchr(a + strlen(attr), '"') + 1;
        size_t head = (size_t)(a - buf);
        memcpy(out, buf, head);
        memcpy(out + head, aend, len - (size_t)(aend - buf));
        write_file(path, out, len - (size_t)(aend - a));
        char words[96];
        snprintf(words, sizeof words, "%s object without %s", types[ti], sets[si]);
        expect_failure(path, STRATA_ERR_PARSE, words);
      }
  remove(path);
}

/* An element hwloc does not know inside an object: hwloc 2.9 rejects it and leaks the object (found by
** fuzz-topology-xml; the sanitizer build sees the leak). Refused before hwloc sees it. */
Test(hwloc_safety, unknown_element_is_refused_before_hwloc_leaks) {
  expect_failure(fixture("hwloc-leak-unknown-element.xml"), STRATA_ERR_PARSE,
                 "line 11: <boject> inside <object> is not part of hwloc XML");
}

/* NUL bytes inside an attribute name (found by fuzz-topology-xml: they passed as name characters, hwloc
** then cut the name there, refused the file and leaked the object). */
Test(hwloc_safety, nul_bytes_inside_a_tag_are_refused) {
  static char buf[1 << 16];
  size_t len = read_fixture("no-pci.xml", buf, sizeof buf);
  char *at = memmem(buf, len, "os_index=\"2\"", 12);
  cr_assert_not_null(at);
  memmove(at + 4 + 8, at + 4, len - (size_t)(at + 4 - buf));
  memset(at + 4, 0, 8);
  char path[] = "/tmp/strata-topo-nul-XXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  close(fd);
  write_file(path, buf, len + 8);
  expect_failure(path, STRATA_ERR_PARSE, "expected name=\"value\"");
  remove(path);
}

/* Text quoted from the file in a refusal is escaped: one line, no control character (found by
** fuzz-topology-xml: a version attribute holding a newline). */
Test(hwloc_safety, quoted_file_text_keeps_the_message_one_line) {
  char path[] = "/tmp/strata-topo-quote-XXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  close(fd);
  static const char bad[] = "<?xml version=\"1.0\"?>\n<topology version=\"2.0\n\tx\">\n</topology>\n";
  write_file(path, bad, sizeof bad - 1);
  expect_failure(path, STRATA_ERR_PARSE, "version=\"2.0\\x0a\\x09x\"");
  remove(path);
}

/* Text quoted from the dump in a warning is escaped too (found by fuzz-topology-xml: a GPUMemory NUMA
** node whose PCIBusID holds a newline): one line, and the JSON keeps it. */
Test(hwloc_safety, quoted_file_text_keeps_a_warning_one_line) {
  static char buf[1 << 16];
  size_t len = read_fixture("class-b-gpu-memory-numa.xml", buf, sizeof buf);
  buf[len] = '\0';
  char *at = strstr(buf, "value=\"0004:02:00.0\"");
  cr_assert_not_null(at);
  memcpy(at + 7, "0004:09\n\t:00", 12); /* a bus id no GPU has, with a newline and a tab in it */
  char path[] = "/tmp/strata-topo-warn-XXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  close(fd);
  write_file(path, buf, len);
  strata_topology_t t = NULL;
  OK(strata_topology_load(path, &t));
  cr_assert_eq(warnings_with(t, "PCI bus id 0004:09\\n\\t:0"), 1, "the bus id is quoted escaped");
  char *json = NULL;
  OK(strata_topology_to_json(t, &json));
  cr_assert(strstr(json, "0004:09\\\\n\\\\t:0") != NULL, "the warning is in the JSON: %s", json);
  free(json);
  strata_topology_free(t);
  remove(path);
}

/* A set hwloc cannot parse makes hwloc_bitmap_sscanf assert (abort) in hwloc 2.9 (found by
** fuzz-topology-xml: nodeset=",x00000001"); refused first. What hwloc writes still loads (the dumps). */
Test(hwloc_safety, malformed_sets_are_refused_before_hwloc_asserts) {
  static char buf[1 << 16], out[1 << 16];
  size_t len = read_fixture("no-pci.xml", buf, sizeof buf);
  buf[len] = '\0';
  static const char *const bad[] = {",x00000001", "x1", "0x", "0x123456789", "0x1,,0xg", "", "0xf...f0x1", ",0x1"};
  char path[] = "/tmp/strata-topo-set-XXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  close(fd);
  const char *key = "nodeset=\"0x00000001\"";
  char *at = strstr(buf, key);
  cr_assert_not_null(at);
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    size_t head = (size_t)(at - buf);
    int n = snprintf(out, sizeof out, "%.*snodeset=\"%s\"%s", (int)head, buf, bad[i], at + strlen(key));
    write_file(path, out, (size_t)n);
    expect_failure(path, STRATA_ERR_PARSE, "is not a set as hwloc writes it");
  }
  static const char *const good[] = {"0x00000001", "0x1", "0x0,,0x00000001", "0xf...f,0x00000001"};
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
    size_t head = (size_t)(at - buf);
    int n = snprintf(out, sizeof out, "%.*snodeset=\"%s\"%s", (int)head, buf, good[i], at + strlen(key));
    write_file(path, out, (size_t)n);
    strata_topology_t t = NULL;
    int rc = strata_topology_load(path, &t);
    cr_assert(rc == STRATA_OK || !strstr(strata_last_error(), "is not a set"), "%s refused: %s", good[i],
              strata_last_error());
    strata_topology_free(t);
  }
  remove(path);
}

/* hwloc 2.x cannot read XML format 3.0: the message says why. */
Test(hwloc_safety, newer_xml_version_is_named) {
  expect_failure(fixture("xml-version-3.0.xml"), STRATA_ERR_PARSE,
                 "XML version 3.0: written by a newer hwloc than this one (");
}

/* What the topology of `path` says, as a string to compare loads. */
static void summary(const char *path, char *out, size_t n) {
  strata_topology_t t = NULL;
  OK(strata_topology_load(path, &t));
  int len = snprintf(out, n, "%d:", gpus(t));
  for (int i = 0; i < gpus(t) && len > 0 && (size_t)len < n; i++)
    len += snprintf(out + len, n - (size_t)len, "%s/%s/%d;", gpu(t, i).pci_bus_id, gpu(t, i).name,
                    (int)link_of(t, i, (i + 1) % gpus(t)).kind);
  strata_topology_free(t);
}

/* A UTF-8 byte-order mark, UTF-16 LE and BE with or without one: the same topology. */
Test(encodings, utf8_bom_and_utf16_files_load_the_same) {
  static char buf[1 << 16], u16[1 << 17];
  size_t len = read_fixture("two-socket-4gpu-nvlink.xml", buf, sizeof buf);
  char want[1024], got[1024];
  summary(fixture("two-socket-4gpu-nvlink.xml"), want, sizeof want);
  char path[] = "/tmp/strata-topo-enc-XXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  close(fd);
  /* UTF-8 with a BOM */
  memcpy(u16, "\xef\xbb\xbf", 3);
  memcpy(u16 + 3, buf, len);
  write_file(path, u16, len + 3);
  summary(path, got, sizeof got);
  cr_assert_str_eq(got, want, "UTF-8 BOM");
  /* the fixture is ASCII: UTF-16 is each byte beside a zero */
  for (int be = 0; be < 2; be++)
    for (int bom = 0; bom < 2; bom++) {
      size_t o = 0;
      if (bom) {
        u16[o++] = be ? '\xfe' : '\xff';
        u16[o++] = be ? '\xff' : '\xfe';
      }
      for (size_t i = 0; i < len; i++) {
        cr_assert((unsigned char)buf[i] < 0x80);
        u16[o++] = be ? '\0' : buf[i];
        u16[o++] = be ? buf[i] : '\0';
      }
      write_file(path, u16, o);
      summary(path, got, sizeof got);
      cr_assert_str_eq(got, want, "UTF-16 %s %s", be ? "BE" : "LE", bom ? "with BOM" : "without BOM");
      if (bom && !be) {
        write_file(path, u16, o - 1);
        expect_failure(path, STRATA_ERR_PARSE, "UTF-16");
      }
    }
  remove(path);
}

/* XML that hwloc's libxml2 reader takes but its minimal reader does not (comments, single quotes,
** '>' and entities in values): strata hands hwloc one canonical text, so both read it alike. */
Test(encodings, comments_quotes_and_entities) {
  static char buf[1 << 16], out[1 << 17];
  size_t len = read_fixture("two-socket-4gpu-nvlink.xml", buf, sizeof buf);
  buf[len] = '\0';
  char want[1024], got[1024];
  summary(fixture("two-socket-4gpu-nvlink.xml"), want, sizeof want);
  size_t o = 0;
  for (size_t i = 0; i < len; i++) {
    if (buf[i] == '"')
      out[o++] = '\'';
    else
      out[o++] = buf[i];
    if (buf[i] == '\n' && i > 300 && i < 400) {
      static const char c[] = "  <!-- a comment inside the topology -->\n";
      memcpy(out + o, c, sizeof c - 1);
      o += sizeof c - 1;
    }
  }
  char path[] = "/tmp/strata-topo-quotes-XXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  close(fd);
  write_file(path, out, o);
  summary(path, got, sizeof got);
  cr_assert_str_eq(got, want);
  /* a GPU model with markup characters and a character reference survives as text */
  char *m = strstr(buf, "value=\"Tesla V100-SXM2-16GB\"");
  cr_assert_not_null(m);
  o = (size_t)(m - buf);
  memcpy(out, buf, o);
  static const char v[] = "value=\"Tesla &lt;V100&gt; &amp; &#x41;&apos;s\"";
  memcpy(out + o, v, sizeof v - 1);
  size_t rest = strlen("value=\"Tesla V100-SXM2-16GB\"");
  memcpy(out + o + sizeof v - 1, m + rest, len - o - rest);
  write_file(path, out, len - rest + sizeof v - 1);
  strata_topology_t t = NULL;
  OK(strata_topology_load(path, &t));
  cr_assert_str_eq(gpu(t, 0).name, "Tesla <V100> & A's");
  strata_topology_free(t);
  /* an entity hwloc does not know, and an internal DTD subset, are refused */
  static const char bad[] = "<?xml version=\"1.0\"?>\n<!DOCTYPE topology [<!ENTITY a \"b\">]>\n<topology/>\n";
  write_file(path, bad, sizeof bad - 1);
  expect_failure(path, STRATA_ERR_PARSE, "internal subset");
  remove(path);
}

/* ------------------------------------------------------------ bad input */

Test(bad_input, missing_file) {
  expect_failure(fixture("no-such-file.xml"), STRATA_ERR_IO, "cannot open");
}

Test(bad_input, malformed_xml) {
  expect_failure(fixture("malformed.xml"), STRATA_ERR_PARSE, "malformed");
}

Test(bad_input, truncated_xml) {
  expect_failure(fixture("truncated.xml"), STRATA_ERR_PARSE, "truncated");
}

Test(bad_input, no_pci_information) {
  expect_failure(fixture("no-pci.xml"), STRATA_ERR_NOT_FOUND, "no PCI");
}

Test(bad_input, wrong_matrix_size) {
  expect_failure(fixture("wrong-matrix-size.xml"), STRATA_ERR_PARSE, "NVLinkBandwidth");
}

Test(bad_input, not_xml_and_empty) {
  char tmpl[] = "/tmp/strata-topo-test-XXXXXX";
  int fd = mkstemp(tmpl);
  cr_assert(fd >= 0);
  FILE *f = fdopen(fd, "w");
  cr_assert_not_null(f);
  fclose(f);
  expect_failure(tmpl, STRATA_ERR_PARSE, "empty");
  f = fopen(tmpl, "w");
  fputs("hello, not a topology\n", f);
  fclose(f);
  expect_failure(tmpl, STRATA_ERR_PARSE, "not XML");
  f = fopen(tmpl, "w");
  fputs("<?xml version=\"1.0\"?>\n<root><a/></root>\n", f);
  fclose(f);
  expect_failure(tmpl, STRATA_ERR_PARSE, "not an hwloc topology");
  remove(tmpl);
}

Test(bad_input, every_truncation_of_the_fixture_fails_cleanly) {
  /* cut the good fixture at many places: each must be an error, never a crash */
  FILE *f = fopen(fixture("two-socket-4gpu-nvlink.xml"), "rb");
  cr_assert_not_null(f);
  static char buf[1 << 16];
  size_t len = fread(buf, 1, sizeof buf, f);
  fclose(f);
  char tmpl[] = "/tmp/strata-topo-cut-XXXXXX";
  int fd = mkstemp(tmpl);
  cr_assert(fd >= 0);
  FILE *out = fdopen(fd, "w");
  for (size_t cut = 1; cut + 20 < len; cut += 97) {
    cr_assert_eq(ftruncate(fileno(out), 0), 0);
    rewind(out);
    fwrite(buf, 1, cut, out);
    fflush(out);
    strata_topology_t t = NULL;
    int rc = strata_topology_load(tmpl, &t);
    cr_assert_neq(rc, STRATA_OK, "cut at %zu loaded", cut);
    cr_assert_null(t);
  }
  fclose(out);
  remove(tmpl);
}

Test(bad_input, invalid_arguments) {
  strata_topology_t t = NULL;
  cr_assert_eq(strata_topology_load(fixture("two-socket-4gpu-nvlink.xml"), NULL), STRATA_ERR_INVALID);
  cr_assert_eq(strata_topology_load("", &t), STRATA_ERR_INVALID);
  strata_topology_free(NULL);
  OK(strata_topology_load(fixture("two-socket-4gpu-nvlink.xml"), &t));
  struct strata_link l;
  cr_assert_eq(strata_topology_link(t, 4, 0, &l), STRATA_ERR_RANGE);
  cr_assert_eq(strata_topology_link(t, -2, 0, &l), STRATA_ERR_RANGE);
  cr_assert_eq(strata_topology_link(t, 0, 1, NULL), STRATA_ERR_INVALID);
  struct strata_topology_gpu g;
  cr_assert_eq(strata_topology_gpu(t, 9, &g), STRATA_ERR_RANGE);
  struct strata_topology_island is;
  cr_assert_eq(strata_topology_island(t, 2, &is), STRATA_ERR_RANGE);
  cr_assert_eq(strata_topology_measure(t, 0, 0), STRATA_ERR_STATE, "no mapping yet");
  cr_assert_eq(strata_topology_device_link(t, 0, 1, &l), STRATA_ERR_RANGE);
  cr_assert_eq(strata_topology_map(t, NULL, 2), STRATA_ERR_INVALID);
  cr_assert_str_eq(strata_path_kind_name(99), "?");
  cr_assert_str_eq(strata_path_kind_name(STRATA_PATH_NVLINK), "NVLINK");
  cr_assert_str_eq(strata_path_kind_label(STRATA_PATH_PIX), "PIX");
  strata_topology_free(t);
}

/* ------------------------------------------------- mapping and measuring */

static struct strata_device_props props(const char *backend, const char *pci, int is_cpu) {
  struct strata_device_props p;
  memset(&p, 0, sizeof p);
  snprintf(p.backend, sizeof p.backend, "%s", backend);
  snprintf(p.name, sizeof p.name, "%s device", backend);
  snprintf(p.pci_bus_id, sizeof p.pci_bus_id, "%s", pci);
  p.is_cpu = is_cpu;
  p.total_memory = 1 << 30;
  return p;
}

Test(mapping, devices_by_pci_bus_id) {
  strata_topology_t t = NULL;
  OK(strata_topology_load(fixture("two-socket-4gpu-nvlink.xml"), &t));
  struct strata_device_props p[5] = {
      props("cuda", "0000:03:00.0", 0), props("opencl", "0000:83:00.0", 0), props("host", "", 1),
      props("opencl", "0000:aa:00.0", 0), props("opencl", "04:00.0", 0), /* no domain: 0000 */
  };
  OK(strata_topology_map(t, p, 5));
  int n = 0;
  OK(strata_topology_device_count(t, &n));
  cr_assert_eq(n, 5);
  static const int want_gpu[] = {0, 2, -1, -1, 1};
  for (int i = 0; i < 5; i++) {
    struct strata_topology_device d;
    OK(strata_topology_device(t, i, &d));
    cr_assert_eq(d.gpu, want_gpu[i], "device %d on GPU %d, expected %d", i, d.gpu, want_gpu[i]);
  }
  struct strata_link l;
  OK(strata_topology_device_link(t, 0, 4, &l));
  cr_assert_eq(l.kind, STRATA_PATH_NVLINK);
  OK(strata_topology_device_link(t, 0, 1, &l));
  cr_assert_eq(l.kind, STRATA_PATH_SYS);
  OK(strata_topology_device_link(t, 2, 0, &l));
  cr_assert_eq(l.kind, STRATA_PATH_PHB, "host device to GPU goes through the host bridge");
  OK(strata_topology_device_link(t, 2, 3, &l));
  cr_assert_eq(l.kind, STRATA_PATH_SELF, "two devices on the host share its memory");

  double nominal = l.nominal_gbps;
  OK(strata_topology_device_link(t, 0, 1, &l));
  nominal = l.nominal_gbps;
  OK(strata_topology_set_measured(t, 0, 1, 3.25));
  OK(strata_topology_device_link(t, 0, 1, &l));
  cr_assert_float_eq(l.measured_gbps, 3.25, 1e-9);
  cr_assert_float_eq(l.gbps, 3.25, 1e-9, "measured figures are used by default");
  cr_assert_float_eq(l.nominal_gbps, nominal, 1e-9);
  cr_assert_float_eq(link_of(t, 0, 2).gbps, 3.25, 1e-9, "GPU-level link takes the measured figure");
  OK(strata_topology_use_measured(t, 0));
  OK(strata_topology_device_link(t, 0, 1, &l));
  cr_assert_float_eq(l.gbps, nominal, 1e-9);
  cr_assert_eq(strata_topology_set_measured(t, 0, 1, -1), STRATA_ERR_RANGE);
  cr_assert_eq(strata_topology_set_measured(t, 0, 7, 1), STRATA_ERR_RANGE);
  OK(strata_topology_set_measured(t, STRATA_TOPOLOGY_HOST, 0, 12.0));
  strata_topology_free(t);
}

Test(mapping, partitions_share_a_pci_id) {
  strata_topology_t t = load_dump("hpe-ex255a-mi300a-24part-cpx-xgmi.xml");
  struct strata_device_props p[3] = {props("opencl", "0000:02:00.0", 0), props("opencl", "0000:02:00.0", 0),
                                     props("cuda", "0001:02:00.0", 0)};
  OK(strata_topology_map(t, p, 3));
  struct strata_topology_device d;
  OK(strata_topology_device(t, 0, &d));
  cr_assert_eq(d.gpu, 0);
  OK(strata_topology_device(t, 1, &d));
  cr_assert_eq(d.gpu, 1, "the second device on one PCI id takes the second partition");
  OK(strata_topology_device(t, 2, &d));
  cr_assert_eq(d.gpu, 6);
  strata_topology_free(t);
}

Test(mapping, measure_runtime_devices) {
  setenv("STRATA_BACKENDS", "host", 0);
  setenv("STRATA_HOST_DEVICES", "2", 0);
  strata_topology_t t = NULL;
  OK(strata_topology_load(fixture("two-socket-4gpu-nvlink.xml"), &t));
  int rc = strata_topology_map_runtime(t);
  int n = 0;
  if (rc == STRATA_OK)
    OK(strata_topology_device_count(t, &n));
  if (rc != STRATA_OK || n == 0) {
    strata_topology_free(t);
    cr_skip_test("no runtime device to measure (%s)", rc ? strata_last_error() : "zero devices");
  }
  OK(strata_topology_measure(t, 1 << 20, 1));
  for (int d = 0; d < n; d++) {
    struct strata_link l;
    OK(strata_topology_device_link(t, STRATA_TOPOLOGY_HOST, d, &l));
    cr_assert(l.measured_gbps > 0, "host -> device %d measured", d);
    OK(strata_topology_device_link(t, d, STRATA_TOPOLOGY_HOST, &l));
    cr_assert(l.measured_gbps > 0, "device %d -> host measured", d);
    for (int e = 0; e < n; e++)
      if (e != d) {
        OK(strata_topology_device_link(t, d, e, &l));
        cr_assert(l.measured_gbps > 0, "device %d -> %d measured", d, e);
        cr_assert_float_eq(l.gbps, l.measured_gbps, 1e-12);
      }
  }
  char *json = NULL;
  OK(strata_topology_to_json(t, &json));
  cr_assert(strstr(json, "\"measured_gbps\"") != NULL);
  free(json);
  strata_topology_free(t);
  strata_shutdown();
}

/* ------------------------------------------------------------------ JSON */

Test(json, schema_and_determinism) {
  strata_topology_t t = NULL, u = NULL;
  OK(strata_topology_load(fixture("two-socket-4gpu-nvlink.xml"), &t));
  OK(strata_topology_load(fixture("two-socket-4gpu-nvlink.xml"), &u));
  char *a = NULL, *b = NULL;
  OK(strata_topology_to_json(t, &a));
  OK(strata_topology_to_json(u, &b));
  cr_assert_str_eq(a, b, "two loads give the same JSON");
  json_error_t err;
  json_t *root = json_loads(a, 0, &err);
  cr_assert_not_null(root, "valid JSON: %s", err.text);
  cr_assert_str_eq(json_string_value(json_object_get(root, "schema")), "strata-topology/1");
  cr_assert_eq(json_array_size(json_object_get(root, "gpus")), 4);
  cr_assert_eq(json_array_size(json_object_get(root, "links")), 25, "every ordered pair over host + 4 GPUs");
  cr_assert_eq(json_array_size(json_object_get(root, "islands")), 2);
  json_t *l01 = NULL;
  size_t i;
  json_t *l;
  json_array_foreach(json_object_get(root, "links"), i, l) {
    if (json_is_integer(json_object_get(l, "from")) && json_integer_value(json_object_get(l, "from")) == 0 &&
        json_is_integer(json_object_get(l, "to")) && json_integer_value(json_object_get(l, "to")) == 1)
      l01 = l;
  }
  cr_assert_not_null(l01);
  cr_assert_str_eq(json_string_value(json_object_get(l01, "kind")), "NVLINK");
  cr_assert_eq(json_integer_value(json_object_get(l01, "nlinks")), 4);
  json_decref(root);
  free(a);
  free(b);
  strata_topology_free(t);
  strata_topology_free(u);
}

/* ----------------------------------------------------------- real dumps */

Test(dumps, every_dump_loads_and_is_deterministic) {
  DIR *dir = opendir(dumps_dir());
  cr_assert_not_null(dir, "%s is missing: the real hwloc dumps are fixtures of the tree", dumps_dir());
  int count = 0;
  struct dirent *e;
  while ((e = readdir(dir)) != NULL) {
    size_t len = strlen(e->d_name);
    if (len < 5 || strcmp(e->d_name + len - 4, ".xml") != 0)
      continue;
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dumps_dir(), e->d_name);
    strata_topology_t t = NULL, u = NULL;
    int rc = strata_topology_load(p, &t);
    cr_assert_eq(rc, STRATA_OK, "%s: %s", p, strata_last_error());
    OK(strata_topology_load(p, &u));
    char *a = NULL, *b = NULL;
    OK(strata_topology_to_json(t, &a));
    OK(strata_topology_to_json(u, &b));
    cr_assert_str_eq(a, b, "%s: JSON differs between two loads", p);
    free(a);
    free(b);
    /* general laws: one island per GPU, self links, symmetric kinds */
    int n = gpus(t), sum = 0, ni = 0;
    OK(strata_topology_island_count(t, &ni));
    for (int k = 0; k < ni; k++) {
      struct strata_topology_island is;
      OK(strata_topology_island(t, k, &is));
      sum += is.size;
    }
    cr_assert_eq(sum, n, "%s: islands cover every GPU once", p);
    for (int x = 0; x < n; x++)
      for (int y = 0; y < n; y++) {
        cr_assert_eq(link_of(t, x, y).kind, link_of(t, y, x).kind, "%s: GPU%d-GPU%d not symmetric", p, x, y);
        if (x != y)
          cr_assert(link_of(t, x, y).nominal_gbps > 0, "%s: GPU%d-GPU%d has no bandwidth", p, x, y);
      }
    strata_topology_free(t);
    strata_topology_free(u);
    count++;
  }
  closedir(dir);
  cr_assert(count >= 1, "no .xml in %s", dumps_dir());
}

Test(dumps, dgx2_nvswitch) {
  strata_topology_t t = load_dump("nvidia-dgx2-v100-16gpu-nvswitch.xml");
  cr_assert_eq(gpus(t), 16, "16 V100, the 12 NVSwitches are not GPUs");
  for (int i = 0; i < 16; i++) {
    struct strata_topology_gpu g = gpu(t, i);
    cr_assert_str_eq(g.vendor, "NVIDIA");
    cr_assert(strstr(g.name, "V100") != NULL, "%s", g.name);
    cr_assert_eq(g.numa_node, i < 8 ? 0 : 1, "8 GPUs per socket");
  }
  assert_all_pairs(t, STRATA_PATH_NVLINK, 6, 150.0);
  assert_islands(t, "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15");
  struct strata_link host = link_of(t, 0, STRATA_TOPOLOGY_HOST);
  cr_assert_eq(host.kind, STRATA_PATH_PHB);
  cr_assert_float_eq(host.nominal_gbps, 15.75, 0.01);
  strata_topology_free(t);
}

Test(dumps, minsky_nvlink_pairs_and_cpu) {
  strata_topology_t t = load_dump("ibm-power8-minsky-p100-4gpu-nvlink.xml");
  cr_assert_eq(gpus(t), 4, "cuda, opencl and nvml names of one GPU make one entry");
  cr_assert_str_eq(gpu(t, 0).os_devices, "cuda0,nvml0,opencl0d0");
  cr_assert_str_eq(gpu(t, 0).pci_bus_id, "0002:01:00.0");
  struct strata_link nv = link_of(t, 0, 1);
  cr_assert_eq(nv.kind, STRATA_PATH_NVLINK);
  cr_assert_eq(nv.nlinks, 2);
  cr_assert_float_eq(nv.nominal_gbps, 40.0, 0.01);
  assert_kind(t, 2, 3, STRATA_PATH_NVLINK);
  assert_kind(t, 0, 2, STRATA_PATH_SYS);
  assert_kind(t, 1, 3, STRATA_PATH_SYS);
  struct strata_link host = link_of(t, 0, STRATA_TOPOLOGY_HOST);
  cr_assert_eq(host.kind, STRATA_PATH_NVLINK, "the one box with NVLink to the CPU");
  cr_assert_float_eq(host.nominal_gbps, 40.0, 0.01);
  cr_assert(nv.gbps > link_of(t, 0, 2).gbps);
  assert_islands(t, "0,1|2,3");
  strata_topology_free(t);
}

Test(dumps, dell_h100_nvlink) {
  strata_topology_t t = load_dump("dell-xe8640-h100-4gpu-nvlink.xml");
  cr_assert_eq(gpus(t), 4);
  static const int numa[] = {3, 1, 7, 5}; /* sorted by PCI: 4e, 5f, cb, db */
  for (int i = 0; i < 4; i++) {
    cr_assert(strstr(gpu(t, i).name, "H100") != NULL);
    cr_assert_eq(gpu(t, i).numa_node, numa[i]);
    cr_assert_float_eq(gpu(t, i).pcie_gbps, 63.02, 0.01);
  }
  cr_assert_str_eq(gpu(t, 0).os_devices, "cuda0,nvml0,opencl0d0", "nvml1 comes first in the tree, not here");
  assert_all_pairs(t, STRATA_PATH_NVLINK, 6, 150.0);
  assert_islands(t, "0,1,2,3");
  strata_topology_free(t);
}

Test(dumps, aws_t4_pcie_two_sockets) {
  strata_topology_t t = load_dump("aws-g4dn-metal-t4-8gpu-pcie.xml");
  cr_assert_eq(gpus(t), 8);
  for (int i = 0; i < 8; i++) {
    cr_assert_str_eq(gpu(t, i).name, "Tesla T4");
    cr_assert_eq(gpu(t, i).numa_node, i / 4);
  }
  assert_kind(t, 0, 1, STRATA_PATH_PHB);
  assert_kind(t, 2, 3, STRATA_PATH_PHB);
  assert_kind(t, 0, 2, STRATA_PATH_NODE);
  assert_kind(t, 0, 4, STRATA_PATH_SYS);
  assert_kind(t, 3, 7, STRATA_PATH_SYS);
  struct strata_link phb = link_of(t, 0, 1), sys = link_of(t, 0, 4);
  cr_assert(phb.gbps > sys.gbps, "host bridge > across sockets");
  cr_assert(phb.gbps < 15.75, "through the root complex is below the link");
  assert_islands(t, "0,1|2,3|4,5|6,7");
  strata_topology_free(t);
}

Test(dumps, lassen_pcie_switches) {
  strata_topology_t t = load_dump("ibm-power9-lassen-v100-4gpu.xml");
  cr_assert_eq(gpus(t), 4, "nvml devices without subtype still count once");
  cr_assert_str_eq(gpu(t, 0).pci_bus_id, "0004:04:00.0");
  cr_assert_str_eq(gpu(t, 2).pci_bus_id, "0035:03:00.0");
  cr_assert_eq(gpu(t, 2).numa_node, 8, "NUMA os_index skips");
  assert_kind(t, 0, 1, STRATA_PATH_PIX);
  assert_kind(t, 2, 3, STRATA_PATH_PIX);
  assert_kind(t, 1, 2, STRATA_PATH_SYS);
  cr_assert(link_of(t, 0, 1).gbps > link_of(t, 1, 2).gbps, "same switch > across sockets");
  assert_islands(t, "0,1|2,3");
  strata_topology_free(t);
}

Test(dumps, jureca_pci_only_a100) {
  strata_topology_t t = load_dump("jureca-dc-a100-4gpu-pci-only.xml");
  cr_assert_eq(gpus(t), 4, "GPUs found from PCI vendor/class alone; the ASPEED VGA is not one");
  static const int numa[] = {3, 1, 7, 5}; /* 03, 44, 84, c4 */
  for (int i = 0; i < 4; i++) {
    struct strata_topology_gpu g = gpu(t, i);
    cr_assert_str_eq(g.vendor, "NVIDIA");
    cr_assert_eq(g.device_id, 0x20b0);
    cr_assert_eq(g.pci_class, 0x0302);
    cr_assert_str_eq(g.os_devices, "");
    cr_assert_eq(g.numa_node, numa[i]);
  }
  assert_kind(t, 0, 1, STRATA_PATH_NUMA);
  assert_kind(t, 2, 3, STRATA_PATH_NUMA);
  assert_kind(t, 0, 2, STRATA_PATH_SYS);
  cr_assert(link_of(t, 0, 1).gbps > link_of(t, 0, 2).gbps);
  assert_islands(t, "0|1|2|3");
  strata_topology_free(t);
}

Test(dumps, mi250x_xgmi) {
  strata_topology_t t = load_dump("hpe-ex235a-mi250x-8gcd-xgmi.xml");
  cr_assert_eq(gpus(t), 8);
  /* sorted by PCI (c1 c6 c9 ce d1 d6 d9 de), not by rsmi index */
  cr_assert_str_eq(gpu(t, 0).os_devices, "rsmi0");
  cr_assert_str_eq(gpu(t, 4).os_devices, "rsmi4");
  cr_assert_eq(gpu(t, 4).numa_node, 0);
  cr_assert_eq(gpu(t, 0).numa_node, 3);
  for (int i = 0; i < 8; i++)
    cr_assert_str_eq(gpu(t, i).vendor, "AMD");
  assert_all_pairs(t, STRATA_PATH_XGMI, 2, 100.0);
  assert_islands(t, "0,1,2,3,4,5,6,7");
  strata_topology_free(t);
}

Test(dumps, mi300a_spx) {
  strata_topology_t t = load_dump("hpe-ex255a-mi300a-4apu-spx-xgmi.xml");
  cr_assert_eq(gpus(t), 4);
  for (int i = 0; i < 4; i++) {
    cr_assert_eq(gpu(t, i).pci_class, 0x1200, "processing accelerator class");
    cr_assert_eq(gpu(t, i).numa_node, i);
    cr_assert_eq(gpu(t, i).package, i);
  }
  assert_all_pairs(t, STRATA_PATH_XGMI, -1, 100.0);
  assert_islands(t, "0,1,2,3");
  strata_topology_free(t);
}

Test(dumps, mi300a_cpx_partitions) {
  strata_topology_t t = load_dump("hpe-ex255a-mi300a-24part-cpx-xgmi.xml");
  cr_assert_eq(gpus(t), 24, "six GPUs under each PCI device");
  for (int i = 0; i < 24; i++) {
    struct strata_topology_gpu g = gpu(t, i);
    cr_assert_eq(g.partition, i % 6);
    cr_assert(g.name[0] != '\0', "partitions without a GPUModel borrow their device's");
  }
  cr_assert_str_eq(gpu(t, 5).pci_bus_id, gpu(t, 0).pci_bus_id);
  cr_assert_str_neq(gpu(t, 6).pci_bus_id, gpu(t, 0).pci_bus_id);
  assert_all_pairs(t, STRATA_PATH_XGMI, -1, 100.0);
  assert_islands(t, "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23");
  strata_topology_free(t);
}

Test(dumps, mi50_pcie_only_amd) {
  strata_topology_t t = load_dump("supermicro-epyc-mi50-8gpu-pcie.xml");
  cr_assert_eq(gpus(t), 8, "rsmi and opencl names of one card make one GPU; the ASPEED VGA is not one");
  for (int i = 0; i < 8; i++) {
    cr_assert_str_eq(gpu(t, i).vendor, "AMD");
    cr_assert_eq(gpu(t, i).numa_node, i / 4);
  }
  for (int a = 0; a < 8; a++)
    for (int b = 0; b < 8; b++)
      if (a != b)
        assert_kind(t, a, b, a / 4 == b / 4 ? STRATA_PATH_NODE : STRATA_PATH_SYS);
  cr_assert(link_of(t, 0, 1).gbps > link_of(t, 0, 4).gbps);
  assert_islands(t, "0,1,2,3|4,5,6,7");
  strata_topology_free(t);
}

Test(dumps, mixed_nvidia_amd_v1) {
  strata_topology_t t = load_dump("mixed-threadripper-gtx1070-vega-fe.xml");
  cr_assert_eq(gpus(t), 2, "DRM card/renderD/controlD nodes are not extra GPUs");
  struct strata_topology_gpu nv = gpu(t, 0), amd = gpu(t, 1);
  cr_assert_str_eq(nv.vendor, "NVIDIA");
  cr_assert(strstr(nv.name, "GTX 1070") != NULL, "%s", nv.name);
  cr_assert_str_eq(nv.os_devices, "cuda0,nvml0");
  cr_assert_eq(nv.numa_node, 0);
  cr_assert_str_eq(amd.vendor, "AMD");
  cr_assert_str_eq(amd.os_devices, "opencl0d0");
  cr_assert_eq(amd.numa_node, 2);
  assert_kind(t, 0, 1, STRATA_PATH_NUMA);
  assert_islands(t, "0|1");
  strata_topology_free(t);
}

Test(dumps, broadwell_cpu_only) {
  strata_topology_t t = load_dump("intel-broadwell-2s-cpu-only.xml");
  cr_assert_eq(gpus(t), 0);
  struct strata_topology_host h;
  OK(strata_topology_host(t, &h));
  cr_assert_eq(h.packages, 2);
  cr_assert_eq(h.numa_nodes, 2);
  assert_islands(t, "");
  strata_topology_free(t);
}

Test(dumps, bandwidth_ordering_across_boxes) {
  /* NVLink > same PCIe switch > host bridge > across sockets, each from a box that has it */
  strata_topology_t dgx = load_dump("nvidia-dgx2-v100-16gpu-nvswitch.xml");
  strata_topology_t las = load_dump("ibm-power9-lassen-v100-4gpu.xml");
  strata_topology_t aws = load_dump("aws-g4dn-metal-t4-8gpu-pcie.xml");
  double nvl = link_of(dgx, 0, 1).gbps;
  double pix = link_of(las, 0, 1).gbps;
  double phb = link_of(aws, 0, 1).gbps;
  double sys = link_of(aws, 0, 4).gbps;
  cr_assert(nvl > pix && pix > phb && phb > sys, "%.2f > %.2f > %.2f > %.2f", nvl, pix, phb, sys);
  cr_assert(link_of(dgx, 0, 1).kind < link_of(las, 0, 1).kind);
  cr_assert(link_of(las, 0, 1).kind < link_of(aws, 0, 1).kind);
  cr_assert(link_of(aws, 0, 1).kind < link_of(aws, 0, 4).kind);
  strata_topology_free(dgx);
  strata_topology_free(las);
  strata_topology_free(aws);
}

/* ------------------------------------------------- tensor-parallel groups */

/* Runtime devices 0..n-1 on the listed PCI ids (and host devices for ""), mapped onto t. */
static void map_pci(strata_topology_t t, const char *const *pci, int n) {
  struct strata_device_props p[16];
  for (int i = 0; i < n; i++)
    p[i] = props(pci[i][0] ? "cuda" : "host", pci[i], !pci[i][0]);
  OK(strata_topology_map(t, p, n));
}

/* Minsky (SOURCES.md: two NVLink pairs, GPUs 0-1 and 2-3): given in the order 0, 2, 1, 3, tp 2 groups are the
** pairs; the AWS T4 box (pairs under one PCIe switch): tp 2 groups share a switch, the leftover host devices last. */
Test(islands, tp_groups_follow_the_islands) {
  strata_topology_t t = load_dump("ibm-power8-minsky-p100-4gpu-nvlink.xml");
  const char *minsky[4] = {"0002:01:00.0", "0003:01:00.0", "000a:01:00.0", "000b:01:00.0"};
  map_pci(t, minsky, 4);
  const int given[4] = {0, 2, 1, 3};
  int order[8];
  OK(strata_topology_tp_order(t, given, 4, 2, order));
  cr_assert(order[0] == 0 && order[1] == 1 && order[2] == 2 && order[3] == 3, "groups %d,%d | %d,%d", order[0],
            order[1], order[2], order[3]);
  /* tp 4 spans both islands: nothing fills a group inside one, the order given stays */
  OK(strata_topology_tp_order(t, given, 4, 4, order));
  cr_assert(order[0] == 0 && order[1] == 2 && order[2] == 1 && order[3] == 3);
  cr_assert_eq(strata_topology_tp_order(t, given, 4, 3, order), STRATA_ERR_INVALID, "4 devices in groups of 3");
  strata_topology_free(t);

  t = load_dump("aws-g4dn-metal-t4-8gpu-pcie.xml");
  const char *aws[6] = {"0000:18:00.0", "", "0000:35:00.0", "0000:19:00.0", "", "0000:36:00.0"};
  map_pci(t, aws, 6);
  const int all[6] = {0, 1, 2, 3, 4, 5};
  OK(strata_topology_tp_order(t, all, 6, 2, order));
  /* devices 0 and 3 are GPUs 0 and 1 (one switch), 2 and 5 GPUs 2 and 3 (another), 1 and 4 on the host */
  const int want[6] = {0, 3, 2, 5, 1, 4};
  for (int i = 0; i < 6; i++)
    cr_assert_eq(order[i], want[i], "entry %d: device %d, want %d", i, order[i], want[i]);
  strata_topology_free(t);
}
