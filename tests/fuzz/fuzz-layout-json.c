/* SPDX-License-Identifier: MIT */
/* fuzz-layout-json.c — libFuzzer harness: any layout JSON (strata-layout/1, what strata-plan --out writes and strata-train --layout reads) is a layout or a one-line refusal, and a layout's own JSON reads back as the same JSON. */
#include <strata/layout.h>

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_string(data, size);
  strata_layout_t l = NULL;
  int rc = strata_layout_from_json(text, "fuzz.json", &l);
  free(text);
  if (rc != STRATA_OK) {
    if (l != NULL || !strata_last_error()[0] || strchr(strata_last_error(), '\n'))
      abort(); /* a refusal allocates nothing and says why, in one line */
    return 0;
  }
  /* what the accessors say agrees with itself */
  const int dp = strata_layout_dp(l), pp = strata_layout_pp(l), n = strata_layout_device_count(l);
  int per_replica = 0;
  for (int r = 0; r < pp; r++)
    per_replica += strata_layout_tp(l, r);
  if (dp < 1 || pp < 1 || n != dp * per_replica || !strata_layout_devices(l))
    abort();
  char *json = NULL, *again = NULL;
  if (strata_layout_to_json(l, &json) != STRATA_OK)
    abort();
  strata_layout_t back = NULL;
  if (strata_layout_from_json(json, "round-trip", &back) != STRATA_OK || strata_layout_to_json(back, &again) != STRATA_OK ||
      strcmp(json, again) != 0)
    abort(); /* what strata writes, strata reads back as the same layout */
  char *text2 = NULL;
  if (strata_layout_describe(l, &text2) != STRATA_OK)
    abort();
  free(text2);
  free(json);
  free(again);
  strata_layout_free(back);
  strata_layout_free(l);
  return 0;
}
