/* SPDX-License-Identifier: MIT */
/* internal.h — the topology object, nominal link constants and the functions the topology/ files share. Internal. */
#ifndef STRATA__TOPOLOGY_INTERNAL_H
#define STRATA__TOPOLOGY_INTERNAL_H

#include <hwloc.h>

#include <strata/topology.h>

/*
** Nominal figures. Each is a published or commonly measured figure; the
** planner only needs them to order links correctly, and --measure
** replaces them with what the box really does.
*/
/* PCIe Gen3 x16 after 128b/130b encoding; used when a dump has no link speed. */
#define STRATA__PCIE_DEFAULT_GBPS 15.75
/* Peer-to-peer through the CPU root complex reaches about 80% of the PCIe
** link (Gen3 x16 measurements: ~12.5 of 15.75 GB/s); a switch forwards at line rate. */
#define STRATA__PHB_EFFICIENCY 0.8
/* Crossing NUMA domains inside a socket (SNC, NPS) costs a little more than a root complex. */
#define STRATA__NUMA_EFFICIENCY 0.7
/* Peer traffic over QPI/UPI/xGMI-between-sockets reaches about half of the
** slower of PCIe and that link (NCCL models SYS paths far below PCIe). */
#define STRATA__SYS_EFFICIENCY 0.5
/* Intel UPI, 10.4 GT/s x20 lanes: 20.8 GB/s per direction per link. */
#define STRATA__SOCKET_DEFAULT_GBPS 20.8
/* On-die mesh / Infinity Fabric between the NUMA domains of one package. */
#define STRATA__NUMA_DEFAULT_GBPS 40.0
/* 100 Gb/s InfiniBand EDR or Ethernet: 12.5 GB/s. */
#define STRATA__NET_DEFAULT_GBPS 12.5
/* RDMA one-way latency across one switch, typical. */
#define STRATA__NET_DEFAULT_LATENCY_US 5.0
/* Host memcpy of large blocks on one core (BASELINES.md: 6.7 GB/s, 2 threads 15.1). */
#define STRATA__MEMCPY_GBPS 10.0
/* NVLink per link and direction: NVLink 1 (P100) 20 GB/s; NVLink 2-4 (V100, A100, H100) 25 GB/s; NVLink 5 (B200) 50 GB/s. */
#define STRATA__NVLINK1_GBPS 20.0
#define STRATA__NVLINK_GBPS 25.0
#define STRATA__NVLINK5_GBPS 50.0
/* AMD xGMI (Infinity Fabric 3, MI200/MI300): 50 GB/s per link and direction. */
#define STRATA__XGMI_LINK_GBPS 50.0

/* Nominal latencies in microseconds, by path kind (orders of magnitude from
** published P2P latency measurements; --measure gives the real ones). */
#define STRATA__LATENCY_US_INIT {0.0, 1.5, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 0.0 /* NET: from options */}

/* Most OS devices one GPU entry records (cuda, nvml, opencl, rsmi ...). */
#define STRATA__GPU_MAX_OSDEVS 8

/* One GPU as discovered, with the hwloc objects that stand for it. */
struct strata__gpu {
  struct strata_topology_gpu pub;
  hwloc_obj_t pcidev;             /* NULL without PCI identity */
  hwloc_obj_t osdevs[STRATA__GPU_MAX_OSDEVS];
  int nosdevs;
  hwloc_obj_t anchor;             /* first non-I/O ancestor */
  uint64_t sort_key;              /* PCI address, then partition */
  double host_nvlink_gbps;        /* NVLink to the CPU (POWER8/9), 0 otherwise */
};

struct strata__island {
  int size;
  int *gpus;
  int kind;
  int nlinks;
  double gbps;
};

struct strata_topology {
  char *source;                   /* XML path or "live" */
  int from_xml;
  struct strata_topology_options opts;
  struct strata_topology_host host;

  int ngpus;
  struct strata__gpu *gpus;

  /* Fabric bandwidth (GB/s) between GPUs from the dump's matrices, ngpus^2; 0 = none. */
  double *fabric_gbps;
  int fabric_kind;                /* STRATA_PATH_NVLINK or _XGMI when a matrix was read */

  /* Link model, (ngpus+1)^2, row-major; index ngpus stands for the host.
  ** narrow_gbps holds the narrowest PCIe hop of each path (0: unknown), so
  ** that new options can be applied without hwloc. */
  struct strata_link *links;
  double *narrow_gbps;
  int *pcie_kind;                 /* the PCI/NUMA/socket kind before any fabric link */

  int nislands;
  struct strata__island *islands;
  int *gpu_island;

  /* Runtime devices and measured figures, (ndev+1)^2 with index ndev for the host. */
  int ndev;
  struct strata_topology_device *devs;
  double *measured;
  int use_measured;

  /* What the topology could not take at face value, one line each (strata_topology_warning). */
  char **warnings;
  int nwarnings;
  int warn_nomem;                 /* a warning could not be stored */
};

/* topology/topology.c: keep a warning line (and log it at WARN). */
void strata__topo_warn(struct strata_topology *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
** topology/xmlcheck.c: read `path` and check that it is a complete,
** well-formed hwloc XML file that hwloc 2.9 loads safely (the sets hwloc
** dereferences present, a version it reads, distance matrices of
** consistent sizes). On success *xml is a canonical UTF-8 rendering for
** hwloc_topology_set_xmlbuffer (*xml_len bytes, NUL-terminated, the
** caller frees it); a UTF-8 byte-order mark and UTF-16 files are
** accepted, comments dropped. Otherwise an error recorded with a message
** naming the file, and *xml is NULL. The _buffer form checks `size`
** bytes of `data` and names them `name` in messages.
*/
int strata__topo_xml_read(const char *path, char **xml /* OUT */, size_t *xml_len /* OUT */);
int strata__topo_xml_check_buffer(const char *name, const char *data, size_t size, char **xml /* OUT */,
                                  size_t *xml_len /* OUT */);

/* topology/discover.c: fill host info and the GPU list from a loaded hwloc
** topology (sorted, deterministic). The hwloc topology must outlive the
** hwloc_obj_t pointers kept in t->gpus; they are only used during load. */
int strata__topo_discover(struct strata_topology *t, hwloc_topology_t hw);

/* topology/fabric.c: read NVLinkBandwidth / XGMIBandwidth into
** t->fabric_gbps and each GPU's host_nvlink_gbps. */
int strata__topo_read_fabric(struct strata_topology *t, hwloc_topology_t hw);

/* topology/links.c: compute the PCI/NUMA/socket path of every pair (needs the
** hwloc objects), then the bandwidths and the islands. */
int strata__topo_compute_paths(struct strata_topology *t, hwloc_topology_t hw);
/* The PCIe speed (GB/s) of the link above I/O object `o`, 0 when unknown or not its own. */
double strata__topo_up_speed(hwloc_obj_t o);
/* Recompute nominal figures from the stored kinds and options (no hwloc needed). */
void strata__topo_compute_figures(struct strata_topology *t);
int strata__topo_compute_islands(struct strata_topology *t);

/* Resolve option defaults from the environment and the constants; a figure
** that is not finite and positive (given or from the environment) is an error. */
int strata__topo_resolve_options(struct strata_topology_options *o);

/* Latency of a path kind under the topology's options. */
double strata__topo_latency(const struct strata_topology *t, int kind);

#endif /* STRATA__TOPOLOGY_INTERNAL_H */
