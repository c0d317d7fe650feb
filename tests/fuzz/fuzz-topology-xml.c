/* SPDX-License-Identifier: MIT */
/* fuzz-topology-xml.c — libFuzzer harness: any file given to strata_topology_load loads or fails with one line, and what loads answers every query and serialises. */
#include <strata/topology.h>

#include "fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  unsetenv("STRATA_TOPOLOGY_XML");
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_file("topology", data, size);
  strata_topology_t t = NULL;
  int rc = strata_topology_load(path, &t);
  if (rc != STRATA_OK) {
    const char *msg = strata_last_error();
    if (t != NULL || !msg[0] || strchr(msg, '\n') || strncmp(msg, path, strlen(path)) != 0)
      abort(); /* a refusal leaves *out alone and says one line naming the file */
    return 0;
  }
  int n = 0, islands = 0, warnings = 0;
  strata_topology_gpu_count(t, &n);
  for (int a = STRATA_TOPOLOGY_HOST; a < n; a++)
    for (int b = STRATA_TOPOLOGY_HOST; b < n; b++) {
      struct strata_link l;
      if (strata_topology_link(t, a, b, &l) != STRATA_OK || l.kind < 0 || l.kind >= STRATA_PATH_KIND_COUNT ||
          !(l.nominal_gbps >= 0))
        abort();
    }
  strata_topology_island_count(t, &islands);
  int members = 0;
  for (int i = 0; i < islands; i++) {
    struct strata_topology_island is;
    if (strata_topology_island(t, i, &is) != STRATA_OK)
      abort();
    members += is.size;
  }
  if (members != n)
    abort(); /* every GPU is in exactly one island */
  strata_topology_warning_count(t, &warnings);
  for (int i = 0; i < warnings; i++) {
    const char *w = NULL;
    if (strata_topology_warning(t, i, &w) != STRATA_OK || !w || strchr(w, '\n'))
      abort();
  }
  char *json = NULL;
  if (strata_topology_to_json(t, &json) != STRATA_OK)
    abort();
  free(json);
  strata_topology_free(t);
  return 0;
}
