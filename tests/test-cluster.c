/* SPDX-License-Identifier: MIT */
/* test-cluster.c — the cluster layer as one process (built with MPI or not): view, links, JSON, refusals, hierarchical collectives over local devices. */
#include "common.h"

#include <jansson.h>

static strata_cluster_t cl;

static void setup(void) {
  setenv("STRATA_MPI", "0", 1);
  setenv("STRATA_BACKENDS", "host", 1);
  setenv("STRATA_HOST_DEVICES", "3", 1);
  OK(strata_cluster_init(NULL, NULL, NULL, &cl));
}

static void teardown(void) {
  strata_cluster_free(cl);
  strata_shutdown();
}

TestSuite(cluster, .init = setup, .fini = teardown);

Test(cluster, one_process_view) {
  struct strata_cluster_info ci;
  OK(strata_cluster_info(cl, &ci));
  cr_assert_eq(ci.size, 1);
  cr_assert_eq(ci.rank, 0);
  cr_assert_eq(ci.mpi, 0);
  cr_assert_eq(ci.thread_level, -1);
  cr_assert_eq(ci.node_count, 1);
  cr_assert_eq(ci.device_count, 3);
  cr_assert_eq(ci.local_device_count, 3);
  cr_assert_eq(ci.first_device, 0);
  cr_assert_eq(strata_cluster_available(), 0);
  struct strata_cluster_rank ri;
  OK(strata_cluster_rank_info(cl, 0, &ri));
  cr_assert_eq(ri.pid, (long)getpid());
  cr_assert_eq(ri.device_count, 3);
  cr_assert(ri.node_name[0]);
  struct strata_cluster_node nd;
  OK(strata_cluster_node_info(cl, 0, &nd));
  cr_assert_str_eq(nd.name, ri.node_name);
  cr_assert_eq(nd.device_count, 3);
  for (int d = 0; d < 3; d++) {
    struct strata_cluster_device cd;
    struct strata_device_props p;
    int g = -1;
    OK(strata_cluster_global_device(cl, 0, d, &g));
    cr_assert_eq(g, d);
    OK(strata_cluster_device(cl, d, &cd));
    OK(strata_device_props(d, &p));
    cr_assert_eq(cd.rank, 0);
    cr_assert_eq(cd.local, d);
    cr_assert_str_eq(cd.info.name, p.name);
    cr_assert_str_eq(cd.info.backend, "host");
  }
  struct strata_cluster_link l;
  struct strata_link tl;
  OK(strata_cluster_link(cl, 0, 2, &l));
  cr_assert_eq(l.scope, STRATA_CLUSTER_SAME_RANK);
  /* the same figure as the rank's own topology */
  strata_topology_t t;
  OK(strata_topology_load(NULL, &t));
  OK(strata_topology_map_runtime(t));
  OK(strata_topology_device_link(t, 0, 2, &tl));
  cr_assert_eq(l.kind, tl.kind);
  cr_assert_float_eq(l.gbps, tl.gbps, 1e-9);
  strata_topology_free(t);
}

Test(cluster, refusals) {
  struct strata_cluster_device cd;
  struct strata_cluster_link l;
  int g;
  cr_assert_eq(strata_cluster_device(cl, 3, &cd), STRATA_ERR_RANGE);
  cr_assert_eq(strata_cluster_global_device(cl, 1, 0, &g), STRATA_ERR_RANGE);
  cr_assert_eq(strata_cluster_link(cl, -1, 0, &l), STRATA_ERR_RANGE);
  cr_assert_eq(strata_cluster_info(NULL, NULL), STRATA_ERR_INVALID);
  strata_queue_t q;
  strata_buffer_t b;
  OK(strata_queue_new(0, &q));
  OK(strata_buffer_new(0, 64, &b));
  /* no other rank to talk to */
  cr_assert_eq(strata_cluster_send(cl, 0, 1, q, strata_mem(b, 0), 64), STRATA_ERR_RANGE);
  cr_assert(strstr(strata_last_error(), "not another rank"), "%s", strata_last_error());
  cr_assert_eq(strata_cluster_recv(cl, 1, 1, q, strata_mem(b, 0), 64), STRATA_ERR_RANGE);
  strata_cluster_comm_t cc;
  int twice[2] = {1, 1}, outside[1] = {3};
  cr_assert_eq(strata_cluster_comm_new(cl, twice, 2, NULL, &cc), STRATA_ERR_INVALID);
  cr_assert_eq(strata_cluster_comm_new(cl, outside, 1, NULL, &cc), STRATA_ERR_RANGE);
  strata_buffer_free(b);
  strata_queue_free(q);
  strata_cluster_free(NULL);
  strata_cluster_comm_free(NULL);
}

Test(cluster, json) {
  char *s = NULL;
  OK(strata_cluster_to_json(cl, &s));
  json_error_t err;
  json_t *j = json_loads(s, 0, &err);
  cr_assert(j, "%s", err.text);
  cr_assert_str_eq(json_string_value(json_object_get(j, "schema")), "strata-cluster/1");
  cr_assert_eq(json_integer_value(json_object_get(j, "size")), 1);
  cr_assert_eq(json_array_size(json_object_get(j, "devices")), 3);
  cr_assert_eq(json_array_size(json_object_get(j, "links")), 6);
  cr_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(j, "links"), 0), "scope")),
                   "rank");
  json_decref(j);
  free(s);
}

/* One rank's members in the given order, the group's ranks over them. */
Test(cluster, collectives_over_local_devices) {
  int devs[3] = {2, 0, 1};
  strata_cluster_comm_t cc;
  OK(strata_cluster_comm_new(cl, devs, 3, NULL, &cc));
  int nl = 0, members[3];
  OK(strata_cluster_comm_local(cc, &nl, members));
  cr_assert_eq(nl, 3);
  cr_assert_eq(members[0], 0);
  cr_assert_eq(members[2], 2);
  const size_t n = 1001;
  strata_queue_t q[3];
  strata_buffer_t sb[3], rb[3];
  strata_mem_t s[3], r[3];
  float *h = malloc(n * 3 * sizeof *h);
  for (int i = 0; i < 3; i++) {
    OK(strata_queue_new(devs[i], &q[i]));
    OK(strata_buffer_new(devs[i], n * 3 * 4, &sb[i]));
    OK(strata_buffer_new(devs[i], n * 3 * 4, &rb[i]));
    s[i] = strata_mem(sb[i], 0);
    r[i] = strata_mem(rb[i], 0);
    for (size_t k = 0; k < n * 3; k++)
      h[k] = (float)(i * 10 + (int)(k % 7));
    OK(strata_buffer_upload(q[i], sb[i], 0, h, n * 3 * 4));
  }
  OK(strata_cluster_allreduce(cc, q, s, r, n, STRATA_FLOAT32, STRATA_SUM));
  for (int i = 0; i < 3; i++) {
    OK(strata_buffer_download(q[i], rb[i], 0, h, n * 4));
    for (size_t k = 0; k < n; k++)
      cr_assert_eq(h[k], (float)(30 + 3 * (int)(k % 7)), "member %d at %zu: %g", i, k, h[k]);
  }
  OK(strata_cluster_allgather(cc, q, s, r, n, STRATA_FLOAT32));
  OK(strata_buffer_download(q[1], rb[1], 0, h, n * 3 * 4));
  for (int g = 0; g < 3; g++)
    for (size_t k = 0; k < n; k++)
      cr_assert_eq(h[(size_t)g * n + k], (float)(g * 10 + (int)(k % 7)));
  OK(strata_cluster_reducescatter(cc, q, s, r, n, STRATA_FLOAT32, STRATA_MAX));
  OK(strata_buffer_download(q[2], rb[2], 0, h, n * 4));
  for (size_t k = 0; k < n; k++)
    cr_assert_eq(h[k], (float)(20 + (int)((2 * n + k) % 7)));
  OK(strata_cluster_broadcast(cc, q, s, r, n, STRATA_FLOAT32, 1));
  OK(strata_buffer_download(q[0], rb[0], 0, h, n * 4));
  for (size_t k = 0; k < n; k++)
    cr_assert_eq(h[k], (float)(10 + (int)(k % 7)));
  cr_assert_eq(strata_cluster_allreduce(cc, q, s, r, n, STRATA_INT32, STRATA_AVG), STRATA_ERR_INVALID);
  for (int i = 0; i < 3; i++) {
    strata_buffer_free(sb[i]);
    strata_buffer_free(rb[i]);
    strata_queue_free(q[i]);
  }
  free(h);
  strata_cluster_comm_free(cc);
}
