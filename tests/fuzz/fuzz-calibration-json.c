/* SPDX-License-Identifier: MIT */
/* fuzz-calibration-json.c — libFuzzer harness: any calibration JSON (strata-calibration/1, what strata-bench calibrate writes and strata-plan --calibration reads) is a machine or a one-line refusal. */
#include <strata/plan.h>

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_string(data, size);
  strata_machine_t c = NULL;
  int rc = strata_machine_from_calibration(text, "fuzz.json", NULL, &c);
  free(text);
  if (rc != STRATA_OK) {
    if (c != NULL || !strata_last_error()[0] || strchr(strata_last_error(), '\n'))
      abort(); /* a refusal builds nothing and says why, in one line */
    return 0;
  }
  /* a machine read is a machine to plan on: every device has a speed and memory, the description is there */
  const int n = strata_machine_device_count(c);
  if (n < 1 || !strata_machine_describe(c))
    abort();
  for (int i = 0; i < n; i++) {
    struct strata_machine_device d;
    if (strata_machine_device(c, i, &d) != STRATA_OK || d.id < 0 || !d.name)
      abort();
  }
  strata_machine_free(c);
  return 0;
}
