/* SPDX-License-Identifier: MIT */
/* test-registry.c — module loading with fake backends: one GPU seen by two backends is listed once, under CUDA;
** stale and broken modules are refused with a reason; copies between two non-host backends go staged. */
#include <stdio.h>

#include "common.h"

/* Point strata at the fake modules in `dirs` (relative to FAKE_DIR, colon-separated). */
static void use_fakes(const char *dirs) {
  char path[4096] = "";
  char copy[512];
  snprintf(copy, sizeof copy, "%s", dirs);
  char *save = NULL;
  for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
    size_t n = strlen(path);
    snprintf(path + n, sizeof path - n, "%s%s/%s/.libs", n ? ":" : "", FAKE_DIR, d);
  }
  setenv("STRATA_BACKEND_PATH", path, 1);
  unsetenv("STRATA_BACKENDS");
}

static struct strata_backend_info backend(const char *name) {
  int n;
  OK(strata_backend_count(&n));
  for (int i = 0; i < n; i++) {
    struct strata_backend_info bi;
    OK(strata_backend_info(i, &bi));
    if (strcmp(bi.name, name) == 0)
      return bi;
  }
  cr_assert_fail("no backend %s", name);
  struct strata_backend_info none = {0};
  return none;
}

Test(registry, a_gpu_seen_by_cuda_and_opencl_is_listed_once_under_cuda) {
  use_fakes("cuda:opencl");
  int n = 0;
  OK(strata_device_count(&n));
  /* cuda: 3b, 86; opencl: 86 (the same GPU), af, and one without PCI id */
  cr_assert_eq(n, 4, "%d devices", n);
  const char *want_backend[4] = {"cuda", "cuda", "opencl", "opencl"};
  const char *want_pci[4] = {"0000:3b:00.0", "0000:86:00.0", "0000:af:00.0", ""};
  const int want_local[4] = {0, 1, 1, 2};
  for (int i = 0; i < 4; i++) {
    struct strata_device_props p;
    OK(strata_device_props(i, &p));
    cr_assert_str_eq(p.backend, want_backend[i], "device %d", i);
    cr_assert_str_eq(p.pci_bus_id, want_pci[i], "device %d", i);
    cr_assert_eq(p.backend_index, want_local[i], "device %d is %s's device %d", i, p.backend, p.backend_index);
  }
  cr_assert_eq(backend("cuda").device_count, 2);
  cr_assert_eq(backend("opencl").device_count, 2);
  struct strata_backend_info host = backend("host");
  cr_assert(!host.loaded);
  cr_assert(strstr(host.reason, "strata-host.so"), "reason: %s", host.reason);
}

Test(registry, stale_and_broken_modules_are_refused_with_a_reason) {
  use_fakes("stale");
  int n = -1;
  OK(strata_device_count(&n));
  cr_assert_eq(n, 0);
  struct strata_backend_info h = backend("host");
  cr_assert(!h.loaded);
  cr_assert(strstr(h.reason, "backend API 999"), "reason: %s", h.reason);
  strata_shutdown();
  use_fakes("noentry");
  OK(strata_device_count(&n));
  cr_assert_eq(n, 0);
  h = backend("host");
  cr_assert(strstr(h.reason, "does not export strata_backend_entry"), "reason: %s", h.reason);
  /* a stale module first in the path does not hide a good one later: the first found is used */
  strata_shutdown();
  use_fakes("stale:cuda");
  OK(strata_device_count(&n));
  cr_assert_eq(n, 2, "the cuda fake still loads");
}

/* Between two backends neither of which is the host: staged through host memory in chunks. */
Test(registry, copies_between_two_device_backends_are_staged) {
  use_fakes("cuda:opencl");
  setenv("STRATA_STAGING_CHUNK", "1000", 1);
  size_t bytes = 10007;
  unsigned char *src = malloc(bytes), *dst = malloc(bytes);
  for (size_t i = 0; i < bytes; i++)
    src[i] = (unsigned char)(i * 13 + 5);
  strata_buffer_t a, b;
  strata_queue_t qa, qb;
  OK(strata_buffer_new(0, bytes, &a));   /* cuda */
  OK(strata_buffer_new(3, bytes + 8, &b)); /* opencl */
  OK(strata_queue_new(0, &qa));
  OK(strata_queue_new(3, &qb));
  OK(strata_buffer_upload(qa, a, 0, src, bytes));
  OK(strata_buffer_copy(qb, b, 8, a, 0, bytes));
  OK(strata_buffer_download(qb, b, 8, dst, bytes));
  cr_assert(memcmp(src, dst, bytes) == 0, "CUDA -> OpenCL staged copy differs");
  memset(dst, 0, bytes);
  OK(strata_buffer_copy(qa, a, 0, b, 8, bytes));
  OK(strata_buffer_download(qa, a, 0, dst, bytes));
  cr_assert(memcmp(src, dst, bytes) == 0, "OpenCL -> CUDA staged copy differs");
  /* ops the fake lacks are refused by name, not run */
  cr_assert_eq(strata_relu_fwd(qa, strata_mem(a, 0), strata_mem(a, 0), 4), STRATA_ERR_UNSUPPORTED);
  cr_assert(strstr(strata_last_error(), "has no op 'relu_fwd'"), "%s", strata_last_error());
  strata_queue_free(qa);
  strata_queue_free(qb);
  strata_buffer_free(a);
  strata_buffer_free(b);
  free(src);
  free(dst);
}
