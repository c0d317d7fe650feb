/* SPDX-License-Identifier: MIT */
/* fuzz-model-json.c — libFuzzer harness: any model JSON is a model or a one-line refusal, and a model's own JSON reads back as the same model. */
#include <strata/model.h>

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_string(data, size);
  strata_model_t m = NULL;
  int rc = strata_model_from_json(text, "fuzz.json", &m);
  free(text);
  if (rc != STRATA_OK) {
    /* a refusal leaves *out alone and says why; that it is one line (a key with an escaped newline is
    ** printed raw today) is issue 12's item 6, checked here once that lands */
    if (m != NULL || !strata_last_error()[0])
      abort();
    return 0;
  }
  uint64_t params = strata_model_params(m);
  double flops = strata_model_flops(m);
  int layers = strata_model_layer_count(m);
  uint64_t sum = 0;
  for (int i = 0; i < layers; i++) {
    struct strata_layer_info li;
    if (strata_model_layer(m, i, &li) != STRATA_OK)
      abort();
    sum += li.params;
  }
  if (sum != params)
    abort(); /* the per-layer profile adds up to the whole */
  char *json = NULL;
  if (strata_model_to_json(m, &json) != STRATA_OK)
    abort();
  strata_model_t back = NULL;
  if (strata_model_from_json(json, "round-trip", &back) != STRATA_OK || strata_model_params(back) != params ||
      strata_model_flops(back) != flops || strata_model_layer_count(back) != layers)
    abort(); /* what strata writes, strata reads back as the same model */
  free(json);
  strata_model_free(back);
  strata_model_free(m);
  return 0;
}
