/* SPDX-License-Identifier: MIT */
/* fuzz-corpus.c — libFuzzer harness: any file is a byte-level text corpus or a one-line refusal, and batches drawn from a corpus stay inside it. */
#include <strata/data.h>

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  /* the first byte chooses the validation fraction, the rest is the corpus */
  double fraction = (data[0] % 99 + 1) / 100.0;
  const char *path = fuzz_file("corpus", data + 1, size - 1);
  strata_dataset_t ds = NULL;
  int rc = strata_dataset_text(path, fraction, &ds);
  if (rc != STRATA_OK) {
    if (ds != NULL || !strata_last_error()[0] || strchr(strata_last_error(), '\n'))
      abort();
    return 0;
  }
  struct strata_dataset_info info;
  if (strata_dataset_info(ds, &info) != STRATA_OK)
    abort();
  for (int split = STRATA_SPLIT_TRAIN; split <= STRATA_SPLIT_VAL; split++) {
    int32_t inputs[2 * 8], targets[2 * 8];
    uint64_t state = size, before = state;
    rc = strata_dataset_sample(ds, split, 2, 8, &state, inputs, targets);
    if (rc != STRATA_OK) {
      if (state != before)
        abort(); /* a refused call leaves the stream alone */
      continue;  /* a split shorter than context + 1 refuses the batch */
    }
    for (int i = 0; i < 16; i++) {
      if (inputs[i] < 0 || inputs[i] > 255 || targets[i] < 0 || targets[i] > 255)
        abort(); /* byte tokens */
      if (i % 8 < 7 && targets[i] != inputs[i + 1])
        abort(); /* each target is the next byte of the same window */
    }
  }
  strata_dataset_free(ds);
  return 0;
}
