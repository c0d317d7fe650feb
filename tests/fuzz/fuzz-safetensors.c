/* SPDX-License-Identifier: MIT */
/* fuzz-safetensors.c — libFuzzer harness: any file is a valid safetensors file whose every tensor can be read in full
** (F32 only, and with BF16 and F16 widened), or a one-line refusal. */
#include <strata/checkpoint.h>

#include "fuzz.h"

/* Read `path` with `flags`: a file whose every tensor can be read in full, or a one-line refusal. */
static void read_one(const char *path, unsigned flags) {
  strata_safetensors_t st = NULL;
  int rc = strata_safetensors_read_flags(path, flags, &st);
  if (rc != STRATA_OK) {
    if (st != NULL || !strata_last_error()[0] || strchr(strata_last_error(), '\n'))
      abort();
    return;
  }
  size_t n = strata_safetensors_count(st);
  volatile float sink = 0;
  for (size_t i = 0; i < n; i++) {
    const char *name = strata_safetensors_name(st, i);
    int ndim = -1;
    int64_t shape[STRATA_ST_MAX_DIMS];
    const float *v = NULL;
    if (!name || strata_safetensors_get(st, name, &ndim, shape, &v) != STRATA_OK || ndim < 0 ||
        ndim > STRATA_ST_MAX_DIMS)
      abort();
    uint64_t count = 1;
    for (int d = 0; d < ndim; d++) {
      if (shape[d] < 0)
        abort();
      count *= (uint64_t)shape[d];
    }
    /* every element the shape promises is inside the file: ASan sees any read past it */
    for (uint64_t k = 0; k < count; k++)
      sink += v[k];
  }
  (void)sink;
  strata_safetensors_meta(st, "strata.format");
  strata_safetensors_free(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_file("safetensors", data, size);
  /* as strata's checkpoints are read (F32 only), and as Hugging Face weights are (BF16 and F16 widened) */
  read_one(path, 0);
  read_one(path, STRATA_ST_READ_WIDEN);
  return 0;
}
