/* SPDX-License-Identifier: MIT */
/* strata/topology.h — how the devices of one box are connected: GPUs found by hwloc, a link model for every ordered pair, islands, and the runtime devices mapped onto them. */
#ifndef STRATA_TOPOLOGY_H
#define STRATA_TOPOLOGY_H

#include <strata/common.h>
#include <strata/device.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
** A topology is built once (strata_topology_load), from this machine or
** from an hwloc XML dump, and is read-only afterwards except for the
** runtime-device mapping and measured bandwidths, which the caller adds.
** Every path is computed at load; the query functions only read.
** One topology may be read from several threads at once; calls that
** change it (map, set_measured, measure, set_defaults) must not run
** concurrently with anything else on the same topology.
*/
typedef struct strata_topology *strata_topology_t;

/*
** The kind of a path between two endpoints, best first (one ordered scale,
** as NCCL's PATH_NVL ... PATH_NET). A path's kind is its worst link; a
** smaller value is always a better path. The short labels are those of
** the connection matrix printed by strata-topo (nvidia-smi topo -m style).
*/
#define STRATA_PATH_KIND_MAP(X)                                                                    \
  X(SELF, "X", "same device (or the same memory)")                                                \
  X(NVLINK, "NV", "NVLink, direct or through NVSwitch")                                            \
  X(XGMI, "XG", "AMD xGMI / Infinity Fabric link")                                                 \
  X(PIX, "PIX", "through one PCIe switch")                                                         \
  X(PXB, "PXB", "through several PCIe switches, not the host bridge")                              \
  X(PHB, "PHB", "through a PCIe host bridge (the CPU root complex)")                               \
  X(NODE, "NODE", "across PCIe host bridges inside one NUMA node")                                 \
  X(NUMA, "NUMA", "across NUMA nodes of one socket")                                               \
  X(SYS, "SYS", "across sockets (QPI/UPI/Infinity Fabric/X-Bus)")                                  \
  X(NET, "NET", "across the network")

enum strata_path_kind {
#define STRATA__PATH_ENUM(id, label, text) STRATA_PATH_##id,
  STRATA_PATH_KIND_MAP(STRATA__PATH_ENUM)
#undef STRATA__PATH_ENUM
  STRATA_PATH_KIND_COUNT
};

/* Name ("NVLINK"), short label ("NV") and description of a kind; static
** strings, "?" for a value out of range. */
STRATA_API const char *strata_path_kind_name(int kind);
STRATA_API const char *strata_path_kind_label(int kind);
STRATA_API const char *strata_path_kind_text(int kind);

/* Where a link's nominal figure comes from. */
enum strata_link_source {
  STRATA_LINK_SOURCE_NONE = 0,    /* no transfer (SELF between GPUs) */
  STRATA_LINK_SOURCE_MATRIX,      /* an NVLinkBandwidth / XGMIBandwidth matrix */
  STRATA_LINK_SOURCE_PCIE,        /* PCIe link speeds along the path */
  STRATA_LINK_SOURCE_DEFAULT      /* a documented default (or the user's override) */
};

/* An endpoint index that means host memory. For GPU links it is the host
** memory of the GPU's nearest NUMA node. */
#define STRATA_TOPOLOGY_HOST (-1)

/* The link model of one ordered pair (from, to). Plain, caller-filled. */
struct strata_link {
  int kind;                     /* enum strata_path_kind */
  int nlinks;                   /* NVLink/xGMI links (derived from the bandwidth), 0 otherwise */
  double nominal_gbps;          /* nominal bandwidth, GB/s (10^9 bytes/s) */
  double measured_gbps;         /* calibrated bandwidth, 0 when never measured */
  double gbps;                  /* the figure to plan with: measured when present and
                                   measured figures are in use, nominal otherwise */
  double latency_us;            /* nominal latency, microseconds */
  int source;                   /* enum strata_link_source of nominal_gbps */
};

/* One physical GPU (or one partition of a partitioned one) as hwloc sees it. */
struct strata_topology_gpu {
  int index;                    /* 0 .. gpu_count-1, sorted by PCI bus id then partition */
  char name[STRATA_NAME_MAX];   /* model, e.g. "Tesla V100-SXM3-32GB-H" */
  char vendor[16];              /* "NVIDIA", "AMD", "Intel", "unknown" */
  unsigned vendor_id;           /* PCI vendor (0x10de ...), 0 when unknown */
  unsigned device_id;           /* PCI device id, 0 when unknown */
  unsigned pci_class;           /* PCI class (0x0302 ...), 0 when unknown */
  char pci_bus_id[32];          /* "0000:3b:00.0", "" without PCI identity */
  int partition;                /* index among the GPUs of one PCI device (MI300A CPX: 0..5) */
  char os_devices[128];         /* hwloc OS device names, comma-separated: "cuda0,nvml0" */
  uint64_t memory;              /* bytes, 0 when the dump does not say */
  double pcie_gbps;             /* the GPU's own PCIe link speed, GB/s; 0 when unknown */
  int numa_node;                /* OS index of the nearest NUMA node, -1 when unknown */
  int package;                  /* OS index of its package (socket), -1 when unknown */
  char cpuset[256];             /* CPUs near it, as a list ("0-13,112-125"), "" when unknown */
  int memory_numa_node;         /* OS index of the CPU-less NUMA node that exposes its memory
                                   (POWER9 + NVLink), -1 when none */
};

/* The host as a whole. */
struct strata_topology_host {
  int packages;                 /* sockets */
  int numa_nodes;               /* host NUMA nodes; GPU memory exposed as NUMA nodes is not one */
  int gpu_numa_nodes;           /* NUMA nodes that hold GPU memory (subtype GPUMemory, ...) */
  int cores;
  int pus;                      /* hardware threads */
  uint64_t memory;              /* bytes of host RAM over those NUMA nodes */
  char cpu_model[128];          /* "" when unknown */
  char hostname[64];            /* "" when unknown */
};

/*
** Nominal figures for links that the topology cannot read from the
** hardware. 0 in any field means "the default": the environment variable
** named in the comment when set, else the documented constant.
*/
struct strata_topology_options {
  double socket_gbps;           /* inter-socket link (STRATA_TOPO_SOCKET_GBPS, default 20.8) */
  double numa_gbps;             /* between NUMA nodes of a socket (STRATA_TOPO_NUMA_GBPS, default 40) */
  double net_gbps;              /* network between boxes (STRATA_TOPO_NET_GBPS, default 12.5) */
  double net_latency_us;        /* network latency (STRATA_TOPO_NET_LATENCY_US, default 5) */
};

/*
** Discover the topology. `xml` is an hwloc XML file; NULL means the file
** named by STRATA_TOPOLOGY_XML when that is set, else this machine (live).
** `opts` may be NULL (all defaults). On success *out is a new topology
** the caller frees with strata_topology_free. Errors, each with a one-line
** message naming the file (strata_last_error):
**   STRATA_ERR_IO        the file cannot be opened or read,
**   STRATA_ERR_PARSE     malformed or truncated XML, a distance matrix
**                        whose size does not match its object count, or a
**                        topology hwloc refuses,
**   STRATA_ERR_NOT_FOUND an XML topology with no PCI information,
**   STRATA_ERR_NOMEM, STRATA_ERR_INVALID (out is NULL).
** *out is untouched on failure.
*/
STRATA_API int strata_topology_load(const char *xml, strata_topology_t *out /* OUT */);
STRATA_API int strata_topology_load_with(const char *xml, const struct strata_topology_options *opts,
                                         strata_topology_t *out /* OUT */);
/* Free a topology; NULL does nothing. */
STRATA_API void strata_topology_free(strata_topology_t topo);

/*
** Warnings: what the topology could not take at face value and how it was
** read instead, one line each in discovery order, e.g. a PCIe link
** recorded in a power-saving state, a device listed twice, GPU memory
** guessed from CPU-less NUMA nodes, a device that looks like a GPU but is
** not counted. *text lives as long as the topology. STRATA_ERR_RANGE for
** an index out of range.
*/
STRATA_API int strata_topology_warning_count(strata_topology_t topo, int *count /* OUT */);
STRATA_API int strata_topology_warning(strata_topology_t topo, int index, const char **text /* OUT */);

/* Where it came from: the XML path, or "live". The string lives as long as the topology. */
STRATA_API const char *strata_topology_source(strata_topology_t topo);

/* The options in force (defaults resolved). */
STRATA_API int strata_topology_options(strata_topology_t topo, struct strata_topology_options *opts /* OUT */);
/* Replace the default figures and recompute the links that use them. */
STRATA_API int strata_topology_set_options(strata_topology_t topo, const struct strata_topology_options *opts);

STRATA_API int strata_topology_host(strata_topology_t topo, struct strata_topology_host *host /* OUT */);

STRATA_API int strata_topology_gpu_count(strata_topology_t topo, int *count /* OUT */);
STRATA_API int strata_topology_gpu(strata_topology_t topo, int gpu, struct strata_topology_gpu *info /* OUT */);

/*
** The link model from GPU `from` to GPU `to` (0 .. gpu_count-1, or
** STRATA_TOPOLOGY_HOST for the host memory near the other GPU).
** HOST to HOST is SELF. STRATA_ERR_RANGE for an index out of range.
*/
STRATA_API int strata_topology_link(strata_topology_t topo, int from, int to, struct strata_link *link /* OUT */);

/*
** Islands: the groups of GPUs joined by their fastest links (NVLink/xGMI,
** or failing that a shared PCIe switch or host bridge; never across NUMA
** nodes or sockets), where tensor-parallel groups belong. Every GPU is in
** exactly one island; a GPU with no fast partner is an island of one.
** Islands are sorted by their first GPU, members ascending.
*/
struct strata_topology_island {
  int size;                     /* number of GPUs */
  const int *gpus;              /* GPU indices, ascending; owned by the topology */
  int kind;                     /* kind of the links inside (SELF for an island of one) */
  int nlinks;                   /* fewest NVLink/xGMI links between two members, 0 otherwise */
  double gbps;                  /* narrowest nominal bandwidth between two members, 0 for one GPU */
};
STRATA_API int strata_topology_island_count(strata_topology_t topo, int *count /* OUT */);
STRATA_API int strata_topology_island(strata_topology_t topo, int island,
                                      struct strata_topology_island *info /* OUT */);
/* The island of a GPU. */
STRATA_API int strata_topology_gpu_island(strata_topology_t topo, int gpu, int *island /* OUT */);

/*
** Runtime devices (the global device index of strata/device.h) mapped onto
** the topology by PCI bus id. Devices without a PCI identity (host virtual
** devices, PoCL) and devices whose bus id is not in the topology are
** placed on the host.
*/
struct strata_topology_device {
  int device;                   /* runtime device index */
  char backend[16];
  char name[STRATA_NAME_MAX];
  char vendor[64];
  uint64_t memory;              /* bytes */
  char pci_bus_id[32];          /* as the backend reported it, "" when none */
  int gpu;                      /* topology GPU index, -1 when on the host */
  int is_cpu;                   /* the backend says it computes on the host CPU */
  int numa_node;                /* the GPU's NUMA node, -1 on the host */
};

/*
** Map `count` devices described by `props` (props[i] is runtime device i).
** Replaces any earlier mapping and forgets measured figures. The
** topology copies what it needs; props may be freed afterwards.
*/
STRATA_API int strata_topology_map(strata_topology_t topo, const struct strata_device_props *props, int count);
/* Same, from the devices of this process (calls strata_init through
** strata_device_count). A process with no device maps zero devices. */
STRATA_API int strata_topology_map_runtime(strata_topology_t topo);

STRATA_API int strata_topology_device_count(strata_topology_t topo, int *count /* OUT */);
STRATA_API int strata_topology_device(strata_topology_t topo, int device,
                                      struct strata_topology_device *info /* OUT */);
/* The link between two runtime devices (or STRATA_TOPOLOGY_HOST), with the
** measured figure when one was set. */
STRATA_API int strata_topology_device_link(strata_topology_t topo, int from, int to,
                                           struct strata_link *link /* OUT */);

/*
** Calibration. set_measured records a measured bandwidth (GB/s > 0) for
** the ordered pair of runtime devices (either may be STRATA_TOPOLOGY_HOST).
** use_measured chooses whether strata_link.gbps reports measured figures
** where present (the default, 1) or always the nominal ones (0).
*/
STRATA_API int strata_topology_set_measured(strata_topology_t topo, int from, int to, double gbps);
STRATA_API int strata_topology_use_measured(strata_topology_t topo, int on);

/*
** Time copies of `bytes` bytes (0: 16 MiB) between every ordered pair of
** mapped runtime devices and between the host and each device, best of
** `reps` (0: 3), and record them with strata_topology_set_measured.
** Needs a mapping (strata_topology_map_runtime) first: STRATA_ERR_STATE
** otherwise. A pair whose copy fails is left unmeasured and the first
** error is returned after every pair was tried.
*/
STRATA_API int strata_topology_measure(strata_topology_t topo, size_t bytes, int reps);

/*
** Tensor-parallel groups: order `count` mapped runtime devices so that each
** run of `tp` consecutive entries of `order` (count entries, caller's) lies
** inside one island wherever the islands allow — the fastest islands first,
** the devices of an island in the order given, devices off the GPUs (host
** virtual devices, PoCL) as one island of their own — and what fills no
** group inside one island comes last, in the order given. count must be a
** multiple of tp. strata-train orders its devices so when --tp is given
** without --devices: tp groups on the fastest links, the pipeline across them.
*/
STRATA_API int strata_topology_tp_order(strata_topology_t topo, const int *devices, int count, int tp,
                                        int *order /* OUT */);

/*
** The ring strata would use over `count` GPUs of a topology (`gpus` lists
** topology GPU indices; NULL means all GPUs, and then count is ignored and
** taken from the topology): `order` (count entries, caller's) receives the
** GPUs in ring order starting with the first listed. The order maximises
** the narrowest hop (by the links' planning bandwidth), then has the fewest
** hops of the slowest path kinds (so a ring crosses each PCIe switch or
** socket boundary as seldom as possible), then the largest total bandwidth.
** *bottleneck_gbps (may be NULL) receives the narrowest hop's bandwidth.
** Exhaustive up to 10 GPUs, a greedy start plus 2-opt improvement above.
*/
STRATA_API int strata_topology_ring(strata_topology_t topo, const int *gpus, int count, int *order /* OUT */,
                                    double *bottleneck_gbps /* OUT */);

/* The same over runtime devices mapped into the topology (strata_topology_map). */
STRATA_API int strata_topology_device_ring(strata_topology_t topo, const int *devices, int count,
                                           int *order /* OUT */, double *bottleneck_gbps /* OUT */);

/*
** The whole topology as JSON (schema "strata-topology/1", described in
** strata-topo(1)): host, gpus, links for every ordered pair (host
** included), islands, devices and measured figures. Output is
** deterministic. *json is a NUL-terminated string the caller frees with
** free().
*/
STRATA_API int strata_topology_to_json(strata_topology_t topo, char **json /* OUT */);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_TOPOLOGY_H */
