/* SPDX-License-Identifier: MIT */
/* json.c — the topology as deterministic JSON (schema "strata-topology/1"). */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "internal.h"
#include "core/core.h"

static json_t *num(double x) {
  return json_real(round(x * 100.0) / 100.0);
}

static json_t *endpoint_json(int e) {
  return e < 0 ? json_string("host") : json_integer(e);
}

static json_t *link_json(int from, int to, const struct strata_link *l) {
  json_t *o = json_object();
  json_object_set_new(o, "from", endpoint_json(from));
  json_object_set_new(o, "to", endpoint_json(to));
  json_object_set_new(o, "kind", json_string(strata_path_kind_name(l->kind)));
  json_object_set_new(o, "nlinks", json_integer(l->nlinks));
  json_object_set_new(o, "nominal_gbps", num(l->nominal_gbps));
  if (l->measured_gbps > 0)
    json_object_set_new(o, "measured_gbps", num(l->measured_gbps));
  json_object_set_new(o, "latency_us", num(l->latency_us));
  static const char *const sources[] = {"none", "matrix", "pcie", "default"};
  json_object_set_new(o, "source", json_string(l->source >= 0 && l->source <= 3 ? sources[l->source] : "none"));
  return o;
}

/* Build the document; NULL when jansson runs out of memory. */
static json_t *build(const struct strata_topology *t) {
  json_t *root = json_object();
  json_object_set_new(root, "schema", json_string("strata-topology/1"));
  json_object_set_new(root, "source", json_string(t->source));

  const struct strata_topology_host *h = &t->host;
  json_t *host = json_object();
  json_object_set_new(host, "hostname", json_string(h->hostname));
  json_object_set_new(host, "cpu_model", json_string(h->cpu_model));
  json_object_set_new(host, "packages", json_integer(h->packages));
  json_object_set_new(host, "numa_nodes", json_integer(h->numa_nodes));
  json_object_set_new(host, "cores", json_integer(h->cores));
  json_object_set_new(host, "pus", json_integer(h->pus));
  json_object_set_new(host, "memory_bytes", json_integer((json_int_t)h->memory));
  json_object_set_new(host, "gpu_numa_nodes", json_integer(h->gpu_numa_nodes));
  json_object_set_new(root, "host", host);

  json_t *opts = json_object();
  json_object_set_new(opts, "socket_gbps", num(t->opts.socket_gbps));
  json_object_set_new(opts, "numa_gbps", num(t->opts.numa_gbps));
  json_object_set_new(opts, "net_gbps", num(t->opts.net_gbps));
  json_object_set_new(opts, "net_latency_us", num(t->opts.net_latency_us));
  json_object_set_new(root, "defaults", opts);

  json_t *gpus = json_array();
  for (int i = 0; i < t->ngpus; i++) {
    const struct strata_topology_gpu *g = &t->gpus[i].pub;
    json_t *o = json_object();
    char id[16];
    json_object_set_new(o, "index", json_integer(g->index));
    json_object_set_new(o, "name", json_string(g->name));
    json_object_set_new(o, "vendor", json_string(g->vendor));
    snprintf(id, sizeof id, "%04x:%04x", g->vendor_id, g->device_id);
    json_object_set_new(o, "pci_id", json_string(id));
    snprintf(id, sizeof id, "%04x", g->pci_class);
    json_object_set_new(o, "pci_class", json_string(id));
    json_object_set_new(o, "pci_bus_id", json_string(g->pci_bus_id));
    json_object_set_new(o, "partition", json_integer(g->partition));
    json_t *names = json_array();
    char buf[sizeof g->os_devices];
    strata__strlcpy(buf, g->os_devices, sizeof buf);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
      json_array_append_new(names, json_string(tok));
    json_object_set_new(o, "os_devices", names);
    json_object_set_new(o, "memory_bytes", json_integer((json_int_t)g->memory));
    json_object_set_new(o, "pcie_gbps", num(g->pcie_gbps));
    json_object_set_new(o, "numa_node", json_integer(g->numa_node));
    json_object_set_new(o, "package", json_integer(g->package));
    json_object_set_new(o, "cpuset", json_string(g->cpuset));
    json_object_set_new(o, "island", json_integer(t->gpu_island[i]));
    json_object_set_new(o, "memory_numa_node", json_integer(g->memory_numa_node));
    json_array_append_new(gpus, o);
  }
  json_object_set_new(root, "gpus", gpus);

  json_t *links = json_array();
  int n = t->ngpus + 1;
  for (int a = -1; a < t->ngpus; a++)
    for (int b = -1; b < t->ngpus; b++) {
      int ia = a < 0 ? t->ngpus : a, ib = b < 0 ? t->ngpus : b;
      json_array_append_new(links, link_json(a, b, &t->links[ia * n + ib]));
    }
  json_object_set_new(root, "links", links);

  json_t *islands = json_array();
  for (int i = 0; i < t->nislands; i++) {
    const struct strata__island *is = &t->islands[i];
    json_t *o = json_object();
    json_t *members = json_array();
    for (int k = 0; k < is->size; k++)
      json_array_append_new(members, json_integer(is->gpus[k]));
    json_object_set_new(o, "gpus", members);
    json_object_set_new(o, "kind", json_string(strata_path_kind_name(is->kind)));
    json_object_set_new(o, "nlinks", json_integer(is->nlinks));
    json_object_set_new(o, "gbps", num(is->gbps));
    json_array_append_new(islands, o);
  }
  json_object_set_new(root, "islands", islands);

  json_t *devs = json_array();
  json_t *measured = json_array();
  for (int i = 0; i < t->ndev; i++) {
    const struct strata_topology_device *d = &t->devs[i];
    json_t *o = json_object();
    json_object_set_new(o, "index", json_integer(d->device));
    json_object_set_new(o, "backend", json_string(d->backend));
    json_object_set_new(o, "name", json_string(d->name));
    json_object_set_new(o, "vendor", json_string(d->vendor));
    json_object_set_new(o, "memory_bytes", json_integer((json_int_t)d->memory));
    json_object_set_new(o, "pci_bus_id", json_string(d->pci_bus_id));
    json_object_set_new(o, "gpu", d->gpu >= 0 ? json_integer(d->gpu) : json_null());
    json_object_set_new(o, "on_host", json_boolean(d->gpu < 0));
    json_object_set_new(o, "is_cpu", json_boolean(d->is_cpu));
    json_object_set_new(o, "numa_node", json_integer(d->numa_node));
    json_array_append_new(devs, o);
  }
  for (int a = -1; a < t->ndev; a++)
    for (int b = -1; b < t->ndev; b++) {
      int ia = a < 0 ? t->ndev : a, ib = b < 0 ? t->ndev : b;
      double m = t->measured ? t->measured[ia * (t->ndev + 1) + ib] : 0;
      if (!(m > 0))
        continue;
      struct strata_link l;
      if (strata_topology_device_link((strata_topology_t)t, a, b, &l) != STRATA_OK)
        continue;
      json_t *o = json_object();
      json_object_set_new(o, "from", endpoint_json(a));
      json_object_set_new(o, "to", endpoint_json(b));
      json_object_set_new(o, "measured_gbps", num(m));
      json_object_set_new(o, "nominal_gbps", num(l.nominal_gbps));
      json_object_set_new(o, "kind", json_string(strata_path_kind_name(l.kind)));
      json_array_append_new(measured, o);
    }
  json_object_set_new(root, "devices", devs);
  json_object_set_new(root, "measured", measured);

  json_t *warnings = json_array();
  for (int i = 0; i < t->nwarnings; i++)
    json_array_append_new(warnings, json_string(t->warnings[i]));
  json_object_set_new(root, "warnings", warnings);
  return root;
}

STRATA_API int strata_topology_to_json(strata_topology_t t, char **out) {
  if (!t || !out)
    return strata__error(STRATA_ERR_INVALID, "strata_topology_to_json: NULL argument");
  json_t *root = build(t);
  if (!root)
    return strata__error(STRATA_ERR_NOMEM, "topology: out of memory building JSON");
  char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12));
  json_decref(root);
  if (!s)
    return strata__error(STRATA_ERR_NOMEM, "topology: out of memory writing JSON");
  *out = s;
  return STRATA_OK;
}
