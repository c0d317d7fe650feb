/* SPDX-License-Identifier: MIT */
/* fuzz-tokens.c — libFuzzer harness: any token file (nanoGPT uint16, raw uint32, llm.c's uint16 or uint32, bytes, or AUTO's guess) in any of the formats is a dataset or a one-line refusal, and every token drawn from a dataset lies below the vocabulary. */
#include <strata/data.h>

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2)
    return 0;
  /* the first byte chooses the format (AUTO, BYTES, U16, LLMC, U32) and the vocabulary, the second the validation
  ** fraction; the rest is the file */
  const int format = (data[0] & 7) % 5;
  static const int64_t vocabs[] = {2, 256, 1000, 50257, 65536, 128256, 1048576};
  const int64_t vocab = vocabs[(data[0] >> 3) % 7];
  const double fraction = (data[1] % 99 + 1) / 100.0;
  const char *path = fuzz_file("tokens", data + 2, size - 2);
  strata_dataset_t ds = NULL;
  int rc = strata_dataset_tokens(path, format, vocab, fraction, &ds);
  if (rc != STRATA_OK) {
    if (ds != NULL || !strata_last_error()[0] || strchr(strata_last_error(), '\n'))
      abort();
    return 0;
  }
  struct strata_dataset_info info;
  if (strata_dataset_info(ds, &info) != STRATA_OK || !info.source || !info.source[0])
    abort();
  for (int split = STRATA_SPLIT_TRAIN; split <= STRATA_SPLIT_VAL; split++) {
    int32_t inputs[2 * 4], targets[2 * 4];
    uint64_t state = size, before = state;
    rc = strata_dataset_sample(ds, split, 2, 4, &state, inputs, targets);
    if (rc != STRATA_OK) {
      if (state != before)
        abort(); /* a refused call leaves the stream alone */
      continue;
    }
    for (int i = 0; i < 8; i++) {
      if (inputs[i] < 0 || inputs[i] >= vocab || targets[i] < 0 || targets[i] >= vocab)
        abort(); /* every token was checked below the vocabulary when read */
      if (i % 4 < 3 && targets[i] != inputs[i + 1])
        abort();
    }
  }
  strata_dataset_free(ds);
  return 0;
}
