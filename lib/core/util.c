/* SPDX-License-Identifier: MIT */
/* util.c — small parsing helpers of the public API. */
#include "config.h"

#include "core/parse.h"
#include "core/core.h"

STRATA_API int strata_parse_size(const char *text, uint64_t *out) {
  if (!text || !out)
    return strata__error(STRATA_ERR_INVALID, "strata_parse_size: NULL argument");
  int rc = strata__parse_size(text, out);
  if (rc)
    return strata__error(rc, "'%s' is not a size (expected e.g. 256M, 1.5G, 4096): %s", text, strata__parse_why());
  return STRATA_OK;
}
