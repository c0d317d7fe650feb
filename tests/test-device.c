/* SPDX-License-Identifier: MIT */
/* test-device.c — device enumeration, buffers, memory accounting and cap, queues, events, every copy path, bad input. */
#include <stdio.h>
#include <string.h>

#include "common.h"

/* Each Criterion test runs in its own process: the environment set here
** is read by the strata_init of that test only. */
static void host_devices(const char *n) {
  setenv("STRATA_HOST_DEVICES", n, 1);
}

Test(device, enumerates_host_virtual_devices) {
  host_devices("3");
  setenv("STRATA_BACKENDS", "host", 1);
  int n = -1;
  OK(strata_device_count(&n));
  cr_assert_eq(n, 3);
  for (int i = 0; i < n; i++) {
    struct strata_device_props p;
    OK(strata_device_props(i, &p));
    cr_assert_str_eq(p.backend, "host");
    cr_assert_eq(p.backend_index, i);
    cr_assert(p.is_cpu);
    cr_assert_gt(p.total_memory, 0);
    cr_assert_eq(p.used_memory, 0);
    cr_assert_eq(p.free_memory, p.memory_limit);
    cr_assert_str_eq(p.pci_bus_id, "");
  }
  struct strata_device_props p;
  cr_assert_eq(strata_device_props(3, &p), STRATA_ERR_NOT_FOUND);
  cr_assert(strstr(strata_last_error(), "no device 3"), "message: %s", strata_last_error());
}

/* How the host backend's idle OpenMP threads wait (registry.c): unless the user chose, a short spin
** (GOMP_SPINCOUNT 3000) before sleeping (PASSIVE); a wait policy or a spin count the user set is kept and
** nothing is added to it. */
static void wait_settings(const char *policy, const char *spin, const char *want_policy, const char *want_spin) {
  unsetenv("OMP_WAIT_POLICY");
  unsetenv("GOMP_SPINCOUNT");
  if (policy)
    setenv("OMP_WAIT_POLICY", policy, 1);
  if (spin)
    setenv("GOMP_SPINCOUNT", spin, 1);
  setenv("STRATA_BACKENDS", "host", 1);
  int n = -1;
  OK(strata_device_count(&n));
  cr_assert_eq(n, 1);
  const char *p = getenv("OMP_WAIT_POLICY"), *c = getenv("GOMP_SPINCOUNT");
  cr_assert(p && strcmp(p, want_policy) == 0, "OMP_WAIT_POLICY %s, want %s", p ? p : "unset", want_policy);
  if (want_spin)
    cr_assert(c && strcmp(c, want_spin) == 0, "GOMP_SPINCOUNT %s, want %s", c ? c : "unset", want_spin);
  else
    cr_assert_null(c, "GOMP_SPINCOUNT %s, want it unset", c);
}

Test(device, host_threads_spin_briefly_unless_the_user_chose) {
  wait_settings(NULL, NULL, "PASSIVE", "3000");
}

Test(device, host_threads_keep_the_users_wait_policy) {
  wait_settings("ACTIVE", NULL, "ACTIVE", NULL);
}

Test(device, host_threads_keep_the_users_spin_count) {
  wait_settings(NULL, "0", "PASSIVE", "0");
}

Test(device, backend_info_explains_missing_backends) {
  setenv("STRATA_BACKENDS", "host", 1);
  int nb = 0;
  OK(strata_backend_count(&nb));
  cr_assert_eq(nb, 3);
  int seen_host = 0;
  for (int i = 0; i < nb; i++) {
    struct strata_backend_info bi;
    OK(strata_backend_info(i, &bi));
    if (strcmp(bi.name, "host") == 0) {
      seen_host = 1;
      cr_assert(bi.loaded);
      cr_assert_eq(bi.device_count, 1);
      cr_assert(strstr(bi.path, "strata-host.so"));
    } else {
      cr_assert_eq(bi.device_count, 0);
      cr_assert_str_eq(bi.reason, "not selected by STRATA_BACKENDS");
    }
  }
  cr_assert(seen_host);
}

Test(device, missing_module_is_a_reason_not_a_crash) {
  setenv("STRATA_BACKEND_PATH", "/nonexistent/strata", 1);
  setenv("STRATA_BACKENDS", "opencl", 1);
  int n = -1;
  OK(strata_device_count(&n));
  struct strata_backend_info bi;
  OK(strata_backend_info(1, &bi));
  cr_assert_str_eq(bi.name, "opencl");
  if (!bi.loaded) {
    cr_assert_eq(n, 0);
    cr_assert(strstr(bi.reason, "strata-opencl.so"), "reason: %s", bi.reason);
  }
}

Test(device, bad_settings_are_errors) {
  setenv("STRATA_HOST_DEVICES", "two", 1);
  int n;
  cr_assert_eq(strata_device_count(&n), STRATA_ERR_PARSE);
  cr_assert(strstr(strata_last_error(), "STRATA_HOST_DEVICES"), "message: %s", strata_last_error());
  /* The failure sticks until shutdown; then a fixed setting works. */
  cr_assert_eq(strata_init(), STRATA_ERR_PARSE);
  strata_shutdown();
  setenv("STRATA_HOST_DEVICES", "2", 1);
  setenv("STRATA_BACKENDS", "host,gpu", 1);
  cr_assert_eq(strata_init(), STRATA_ERR_INVALID);
  cr_assert(strstr(strata_last_error(), "'gpu'"), "message: %s", strata_last_error());
  strata_shutdown();
  setenv("STRATA_BACKENDS", "host", 1);
  setenv("STRATA_DEVICE_MEMORY_LIMIT", "lots", 1);
  cr_assert_eq(strata_init(), STRATA_ERR_PARSE);
  strata_shutdown();
  unsetenv("STRATA_DEVICE_MEMORY_LIMIT");
  OK(strata_init());
  OK(strata_device_count(&n));
  cr_assert_eq(n, 2);
}

Test(device, parse_size) {
  uint64_t v = 7;
  OK(strata_parse_size("256M", &v));
  cr_assert_eq(v, 256ull << 20);
  OK(strata_parse_size("1.5G", &v));
  cr_assert_eq(v, 3ull << 29);
  OK(strata_parse_size("4096", &v));
  cr_assert_eq(v, 4096);
  OK(strata_parse_size("64KiB", &v));
  cr_assert_eq(v, 65536);
  v = 7;
  cr_assert_eq(strata_parse_size("12 parsecs", &v), STRATA_ERR_PARSE);
  cr_assert_eq(strata_parse_size("-1M", &v), STRATA_ERR_PARSE);
  cr_assert_eq(strata_parse_size("", &v), STRATA_ERR_PARSE);
  cr_assert_eq(v, 7, "a failed parse must not touch the output");
}

Test(device, status_names) {
  cr_assert_str_eq(strata_err_name(STRATA_OK), "STRATA_OK");
  cr_assert_str_eq(strata_err_name(STRATA_ERR_SHAPE), "STRATA_ERR_SHAPE");
  cr_assert_str_eq(strata_err_name(12345), "STRATA_ERR_UNKNOWN");
  cr_assert_str_eq(strata_strerror(STRATA_ERR_DEVICE_MEMORY), "out of device memory");
}

Test(device, memory_cap_turns_overbudget_into_error) {
  host_devices("2");
  setenv("STRATA_BACKENDS", "host", 1);
  setenv("STRATA_DEVICE_MEMORY_LIMIT", "1M", 1);
  uint64_t used, peak, limit;
  OK(strata_device_memory(0, &used, &peak, &limit));
  cr_assert_eq(limit, 1u << 20);
  strata_buffer_t a = NULL, b = NULL, c = NULL;
  OK(strata_buffer_new(0, 600 << 10, &a));
  cr_assert_eq(strata_buffer_new(0, 600 << 10, &b), STRATA_ERR_DEVICE_MEMORY);
  cr_assert_null(b);
  cr_assert(strstr(strata_last_error(), "limit of 1.0 MiB"), "message: %s", strata_last_error());
  cr_assert(strstr(strata_last_error(), "device 0"), "message: %s", strata_last_error());
  /* The other device has its own budget. */
  OK(strata_buffer_new(1, 600 << 10, &c));
  OK(strata_device_memory(0, &used, &peak, NULL));
  cr_assert_eq(used, 600 << 10);
  strata_buffer_free(a);
  OK(strata_device_memory(0, &used, &peak, NULL));
  cr_assert_eq(used, 0);
  cr_assert_eq(peak, 600 << 10);
  OK(strata_buffer_new(0, 1 << 20, &b));
  OK(strata_device_memory(0, NULL, &peak, NULL));
  cr_assert_eq(peak, 1 << 20);
  OK(strata_device_reset_peak(0));
  strata_buffer_free(b);
  strata_buffer_free(c);
  OK(strata_device_memory(0, &used, &peak, NULL));
  cr_assert_eq(used, 0);
  cr_assert_eq(peak, 1 << 20);
  strata_buffer_free(NULL);
}

static struct strata_device_alloc_stats alloc_stats(int dev) {
  struct strata_device_alloc_stats st;
  OK(strata_device_alloc_stats(dev, &st));
  return st;
}

/* Freed blocks serve the next buffer of their size without the backend;
** they are not "used" memory, and at the cap they are given back first. */
Test(device, caching_allocator_reuses_blocks_and_yields_them_at_the_cap) {
  host_devices("1");
  setenv("STRATA_BACKENDS", "host", 1);
  setenv("STRATA_DEVICE_MEMORY_LIMIT", "1M", 1);
  strata_buffer_t a, b, c, d, e;
  uint64_t used;
  OK(strata_buffer_new(0, 300 << 10, &a));
  strata_buffer_free(a);
  struct strata_device_alloc_stats st = alloc_stats(0);
  OK(strata_device_memory(0, &used, NULL, NULL));
  cr_assert(st.backend_allocs == 1 && st.backend_frees == 0 && st.cached_bytes == 300 << 10 && used == 0,
            "allocs %llu frees %llu cached %llu used %llu", (unsigned long long)st.backend_allocs,
            (unsigned long long)st.backend_frees, (unsigned long long)st.cached_bytes, (unsigned long long)used);
  /* the same size comes from the cache, and holds what is written to it */
  OK(strata_buffer_new(0, 300 << 10, &b));
  st = alloc_stats(0);
  cr_assert(st.backend_allocs == 1 && st.reuses == 1 && st.cached_bytes == 0);
  strata_queue_t q;
  OK(strata_queue_new(0, &q));
  float in[64], out[64];
  tc_fill(in, 64, 7, -1, 1);
  OK(strata_buffer_upload(q, b, 1000, in, sizeof in));
  OK(strata_buffer_download(q, b, 1000, out, sizeof out));
  cr_assert(memcmp(in, out, sizeof in) == 0);
  strata_buffer_free(b);
  /* 800K in use beside 300K cached would pass the cap: the cached block goes back first */
  OK(strata_buffer_new(0, 800 << 10, &c));
  st = alloc_stats(0);
  cr_assert(st.backend_allocs == 2 && st.backend_frees == 1 && st.cached_bytes == 0, "frees %llu cached %llu",
            (unsigned long long)st.backend_frees, (unsigned long long)st.cached_bytes);
  strata_buffer_free(c);
  OK(strata_buffer_new(0, 100 << 10, &d)); /* 100K + 800K cached fit */
  st = alloc_stats(0);
  cr_assert(st.backend_allocs == 3 && st.backend_frees == 1 && st.cached_bytes == 800 << 10);
  OK(strata_buffer_new(0, 500 << 10, &e)); /* 600K + 800K do not */
  st = alloc_stats(0);
  cr_assert(st.backend_allocs == 4 && st.backend_frees == 2 && st.cached_bytes == 0);
  OK(strata_device_memory(0, &used, NULL, NULL));
  cr_assert_eq(used, 600 << 10, "used %llu: accounting counts live buffers only", (unsigned long long)used);
  /* the cap still refuses what cannot fit even with an empty cache */
  strata_buffer_t f = NULL;
  cr_assert_eq(strata_buffer_new(0, 500 << 10, &f), STRATA_ERR_DEVICE_MEMORY);
  strata_buffer_free(d);
  strata_buffer_free(e);
  OK(strata_device_trim(0));
  st = alloc_stats(0);
  cr_assert(st.backend_frees == 4 && st.cached_bytes == 0, "trim: frees %llu cached %llu",
            (unsigned long long)st.backend_frees, (unsigned long long)st.cached_bytes);
  /* the cache holds a bounded number of blocks: the oldest go back */
  strata_buffer_t many[300];
  for (int i = 0; i < 300; i++)
    OK(strata_buffer_new(0, (size_t)(i + 1) * 8, &many[i]));
  for (int i = 0; i < 300; i++)
    strata_buffer_free(many[i]);
  st = alloc_stats(0);
  cr_assert_eq(st.backend_frees, 4 + 300 - 256, "frees %llu", (unsigned long long)st.backend_frees);
  strata_queue_free(q);
  cr_assert_eq(alloc_stats(0).backend_queues, 1);
}

Test(device, buffer_bad_input) {
  setenv("STRATA_BACKENDS", "host", 1);
  strata_buffer_t b = (strata_buffer_t)0x1;
  cr_assert_eq(strata_buffer_new(0, 0, &b), STRATA_ERR_INVALID);
  cr_assert_null(b);
  cr_assert_eq(strata_buffer_new(7, 16, &b), STRATA_ERR_NOT_FOUND);
  cr_assert_eq(strata_buffer_new(0, 16, NULL), STRATA_ERR_INVALID);
  OK(strata_buffer_new(0, 16, &b));
  strata_queue_t q;
  OK(strata_queue_new(0, &q));
  char data[32] = {0};
  cr_assert_eq(strata_buffer_write(q, b, 8, data, 9), STRATA_ERR_RANGE);
  cr_assert_eq(strata_buffer_write(q, b, 17, data, 0), STRATA_ERR_RANGE);
  cr_assert_eq(strata_buffer_read(q, b, 0, NULL, 4), STRATA_ERR_INVALID);
  cr_assert_eq(strata_buffer_write(NULL, b, 0, data, 4), STRATA_ERR_INVALID);
  cr_assert_eq(strata_buffer_copy(q, b, 0, b, 4, 8), STRATA_ERR_INVALID, "overlapping ranges");
  OK(strata_buffer_copy(q, b, 0, b, 8, 8));
  cr_assert_eq(strata_queue_finish(NULL), STRATA_ERR_INVALID);
  OK(strata_queue_finish(q));
  strata_queue_free(q);
  strata_buffer_free(b);
}

/* Every device of every backend: write a pattern, read it back. */
Test(device, roundtrip_on_every_device) {
  host_devices("2");
  int n;
  OK(strata_device_count(&n));
  cr_assert_geq(n, 2);
  for (int d = 0; d < n; d++) {
    struct strata_device_props p;
    OK(strata_device_props(d, &p));
    size_t bytes = 1000003;
    unsigned char *src = malloc(bytes), *dst = malloc(bytes);
    for (size_t i = 0; i < bytes; i++)
      src[i] = (unsigned char)(i * 7 + d);
    strata_buffer_t b;
    strata_queue_t q;
    OK(strata_buffer_new(d, bytes, &b));
    OK(strata_queue_new(d, &q));
    OK(strata_buffer_upload(q, b, 0, src, bytes));
    memset(dst, 0, bytes);
    OK(strata_buffer_download(q, b, 0, dst, bytes));
    cr_assert(memcmp(src, dst, bytes) == 0, "round trip differs on device %d (%s)", d, p.name);
    /* an odd-offset partial read */
    OK(strata_buffer_download(q, b, 12345, dst, 777));
    cr_assert(memcmp(src + 12345, dst, 777) == 0, "partial read differs on device %d", d);
    strata_queue_free(q);
    strata_buffer_free(b);
    free(src);
    free(dst);
  }
}

/* Copy `bytes` from (ds, soff) to (dd, doff) through strata_buffer_copy on a
** queue of `qdev`, and check the destination, including the bytes around it. */
static void check_copy(int ds, int dd, int qdev, size_t bytes, size_t soff, size_t doff) {
  size_t sb = soff + bytes + 3, db = doff + bytes + 5;
  unsigned char *src = malloc(sb), *dst = malloc(db), *ref = malloc(db);
  for (size_t i = 0; i < sb; i++)
    src[i] = (unsigned char)(i * 131 + 17);
  for (size_t i = 0; i < db; i++)
    ref[i] = (unsigned char)(i * 29 + 3);
  strata_buffer_t bs, bd;
  strata_queue_t qs, qd, q;
  OK(strata_buffer_new(ds, sb, &bs));
  OK(strata_buffer_new(dd, db, &bd));
  OK(strata_queue_new(ds, &qs));
  OK(strata_queue_new(dd, &qd));
  OK(strata_buffer_upload(qs, bs, 0, src, sb));
  OK(strata_buffer_upload(qd, bd, 0, ref, db));
  OK(strata_queue_new(qdev, &q));
  OK(strata_buffer_copy(q, bd, doff, bs, soff, bytes));
  OK(strata_queue_finish(q));
  OK(strata_buffer_download(qd, bd, 0, dst, db));
  memcpy(ref + doff, src + soff, bytes);
  size_t bad = db;
  for (size_t i = 0; i < db && bad == db; i++)
    if (dst[i] != ref[i])
      bad = i;
  cr_assert_eq(bad, db, "copy %d -> %d of %zu bytes (offsets %zu, %zu) differs at byte %zu", ds, dd, bytes, soff, doff,
               bad);
  strata_queue_free(q);
  strata_queue_free(qs);
  strata_queue_free(qd);
  strata_buffer_free(bs);
  strata_buffer_free(bd);
  free(src);
  free(dst);
  free(ref);
}

Test(device, copies_between_host_virtual_devices) {
  host_devices("2");
  setenv("STRATA_BACKENDS", "host", 1);
  check_copy(0, 1, 0, 100001, 3, 7);
  check_copy(1, 0, 0, 5, 0, 1);
  check_copy(0, 0, 0, 4096, 0, 8192);
}

Test(device, copies_between_opencl_devices) {
  host_devices("1");
  int a = tc_find_device("opencl", 0), b = tc_find_device("opencl", 1);
  if (a < 0 || b < 0)
    cr_skip_test("needs two OpenCL devices (POCL_DEVICES=\"pthread pthread\")");
  check_copy(a, b, a, 1000001, 5, 9);
  check_copy(b, a, a, 3, 1, 0);
}

/* Cross-backend copies go through pinned staging in chunks: odd sizes and
** a small chunk size make several chunks with a ragged last one. */
Test(device, cross_backend_copies_opencl_and_host) {
  host_devices("2");
  setenv("STRATA_STAGING_CHUNK", "4000", 1);
  int h = tc_find_device("host", 1), o = tc_find_device("opencl", 0);
  if (o < 0)
    cr_skip_test("no OpenCL device (OpenCL backend not built or no platform)");
  check_copy(h, o, h, 12345, 1, 3);
  check_copy(o, h, h, 12345, 7, 0);
  check_copy(o, h, o, 3999, 0, 5);
  check_copy(h, o, o, 8000, 0, 0);
  check_copy(h, o, o, 1, 0, 0);
}

Test(device, cross_backend_copy_default_chunk) {
  int h = tc_find_device("host", 0), o = tc_find_device("opencl", 0);
  if (o < 0)
    cr_skip_test("no OpenCL device (OpenCL backend not built or no platform)");
  check_copy(h, o, o, (9u << 20) + 13, 0, 0);
  check_copy(o, h, h, (9u << 20) + 13, 0, 0);
}

Test(device, bad_staging_chunk_is_an_error) {
  setenv("STRATA_STAGING_CHUNK", "big", 1);
  int h = tc_find_device("host", 0), o = tc_find_device("opencl", 0);
  if (o < 0)
    cr_skip_test("no OpenCL device");
  strata_buffer_t a, b;
  strata_queue_t q;
  OK(strata_buffer_new(h, 64, &a));
  OK(strata_buffer_new(o, 64, &b));
  OK(strata_queue_new(h, &q));
  cr_assert_eq(strata_buffer_copy(q, b, 0, a, 0, 64), STRATA_ERR_PARSE);
  strata_queue_t q2;
  OK(strata_queue_new(o, &q2));
  cr_assert_eq(strata_buffer_write(q2, a, 0, "x", 1), STRATA_ERR_DEVICE_MISMATCH);
  cr_assert(strstr(strata_last_error(), "buffer is on device"), "message: %s", strata_last_error());
  strata_queue_free(q2);
  strata_queue_free(q);
  strata_buffer_free(a);
  strata_buffer_free(b);
}

/* Events order work across queues of one device and of two devices. */
Test(device, events_order_queues) {
  host_devices("2");
  int n;
  OK(strata_device_count(&n));
  for (int d = 0; d < n; d++) {
    int peer = (d + 1) % n;
    size_t count = 1 << 18;
    float *x = malloc(count * 4), *y = malloc(count * 4);
    tc_fill(x, count, 3, -1, 1);
    strata_buffer_t a, b;
    strata_queue_t q1, q2;
    OK(strata_buffer_new(d, count * 4, &a));
    OK(strata_buffer_new(peer, count * 4, &b));
    OK(strata_queue_new(d, &q1));
    OK(strata_queue_new(peer, &q2));
    OK(strata_buffer_write(q1, a, 0, x, count * 4));
    OK(strata_scale(q1, strata_mem(a, 0), 2.0f, (int64_t)count));
    strata_event_t e;
    OK(strata_event_record(q1, &e));
    OK(strata_event_wait(q2, e));
    OK(strata_buffer_copy(q2, b, 0, a, 0, count * 4));
    OK(strata_buffer_read(q2, b, 0, y, count * 4));
    OK(strata_queue_finish(q2));
    OK(strata_event_sync(e));
    strata_event_free(e);
    for (size_t i = 0; i < count; i++)
      cr_assert_eq(y[i], 2.0f * x[i], "device %d -> %d: element %zu", d, peer, i);
    strata_queue_free(q1);
    strata_queue_free(q2);
    strata_buffer_free(a);
    strata_buffer_free(b);
    free(x);
    free(y);
  }
}

/*
** Queue-ordered buffers: a buffer freed behind queue A's queued work (strata_buffer_free_on) is not written before
** that work has run, whoever takes its block next: a buffer made for queue B (strata_buffer_new_on: B waits for A on
** the device) or a plain strata_buffer_new (the host waits). A's work is made long (GEMMs) so that a write not held
** back would land long before A's read of the old contents.
*/
Test(device, buffers_freed_behind_a_queue_wait_for_it) {
  host_devices("1");
  setenv("STRATA_BACKENDS", "host", 1);
  setenv("STRATA_HOST_THREADS", "1", 1);
  const int64_t n = 384;
  const size_t count = 1 << 16;
  strata_buffer_t g, x, y;
  OK(strata_buffer_new(0, (size_t)(3 * n * n) * 4, &g));
  strata_queue_t qa, qb;
  OK(strata_queue_new(0, &qa));
  OK(strata_queue_new(0, &qb));
  OK(strata_fill(qa, strata_mem(g, 0), 1e-3f, 3 * n * n));
  float *old = malloc(count * 4), *seen = malloc(count * 4), *later = malloc(count * 4);
  cr_assert(old && seen && later);
  tc_fill(old, count, 5, -1, 1);
  for (int pass = 0; pass < 2; pass++) {
    OK(strata_buffer_new(0, count * 4, &x));
    OK(strata_buffer_upload(qa, x, 0, old, count * 4));
    for (int k = 0; k < 6; k++) /* long work before the read */
      OK(strata_gemm(qa, 0, 0, n, n, n, 1.0f, strata_mem(g, 0), n, 0, strata_mem(g, (size_t)(n * n)), n, 0, 0.0f,
                     strata_mem(g, (size_t)(2 * n * n)), n, 0, 1));
    memset(seen, 0, count * 4);
    OK(strata_buffer_read(qa, x, 0, seen, count * 4));
    strata_buffer_free_on(qa, x); /* no wait */
    const uint64_t reuses = alloc_stats(0).reuses;
    if (pass == 0) { /* for queue B: B waits for A's read on the device */
      OK(strata_buffer_new_on(qb, count * 4, &y));
      for (size_t i = 0; i < count; i++)
        later[i] = -old[i];
      OK(strata_buffer_write(qb, y, 0, later, count * 4));
      OK(strata_queue_finish(qb));
    } else { /* for the host: the call waits for A's read */
      OK(strata_buffer_new(0, count * 4, &y));
      cr_assert(memcmp(seen, old, count * 4) == 0, "strata_buffer_new returned before the queue read the old block");
      OK(strata_buffer_upload(qb, y, 0, later, count * 4));
    }
    cr_assert_eq(alloc_stats(0).reuses, reuses + 1, "pass %d: the freed block was not the one reused", pass);
    OK(strata_queue_finish(qa));
    cr_assert(memcmp(seen, old, count * 4) == 0, "pass %d: queue A read what was written after the free", pass);
    OK(strata_buffer_download(qb, y, 0, seen, count * 4));
    cr_assert(memcmp(seen, later, count * 4) == 0, "pass %d: the new buffer does not hold its write", pass);
    strata_buffer_free(y);
  }
  /* on the same queue the block is used at once, in the queue's order */
  OK(strata_buffer_new(0, count * 4, &x));
  strata_buffer_free_on(qa, x);
  OK(strata_buffer_new_on(qa, count * 4, &y));
  strata_buffer_free_on(qa, y);
  OK(strata_device_trim(0)); /* (waits for the block's queue, then gives it back) */
  cr_assert_eq(alloc_stats(0).cached_bytes, 0);
  free(old);
  free(seen);
  free(later);
  strata_buffer_free(g);
  strata_queue_free(qa);
  strata_queue_free(qb);
}

/* A GPU seen by CUDA and OpenCL is listed once: no two devices share a PCI id. */
Test(device, no_duplicate_pci_ids) {
  int n;
  OK(strata_device_count(&n));
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++) {
      struct strata_device_props a, b;
      OK(strata_device_props(i, &a));
      OK(strata_device_props(j, &b));
      if (a.pci_bus_id[0])
        cr_assert_str_neq(a.pci_bus_id, b.pci_bus_id, "devices %d and %d are one GPU", i, j);
    }
}

/* strata_version() is the STRATA_VERSION of the headers, and that string is MAJOR.MINOR.PATCH of their three macros. */
Test(device, version_is_the_headers_and_their_parts) {
  char parts[64];
  snprintf(parts, sizeof parts, "%d.%d.%d", STRATA_VERSION_MAJOR, STRATA_VERSION_MINOR, STRATA_VERSION_PATCH);
  cr_assert_not_null(strata_version());
  cr_assert_str_eq(strata_version(), STRATA_VERSION, "strata_version() '%s', STRATA_VERSION '%s'", strata_version(),
                   STRATA_VERSION);
  cr_assert_str_eq(STRATA_VERSION, parts, "STRATA_VERSION '%s' is not its parts '%s'", STRATA_VERSION, parts);
}
