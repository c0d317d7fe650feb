/* SPDX-License-Identifier: MIT */
/* util.c — small parsing helpers of the public API. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "util.h"

STRATA_API int strata_parse_size(const char *text, uint64_t *out) {
  if (!text || !out)
    return strata__error(STRATA_ERR_INVALID, "strata_parse_size: NULL argument");
  const char *p = text;
  while (isspace((unsigned char)*p))
    p++;
  if (!isdigit((unsigned char)*p) && *p != '.')
    return strata__error(STRATA_ERR_PARSE, "'%s' is not a size (expected e.g. 256M, 1.5G, 4096)", text);
  errno = 0;
  char *end = NULL;
  double v = strtod(p, &end);
  if (errno || end == p || !(v >= 0))
    return strata__error(STRATA_ERR_PARSE, "'%s' is not a size (expected e.g. 256M, 1.5G, 4096)", text);
  double mult = 1;
  switch (toupper((unsigned char)*end)) {
  case 'K': mult = 1024.0; end++; break;
  case 'M': mult = 1024.0 * 1024; end++; break;
  case 'G': mult = 1024.0 * 1024 * 1024; end++; break;
  case 'T': mult = 1024.0 * 1024 * 1024 * 1024; end++; break;
  default: break;
  }
  if (mult > 1 && (*end == 'i' || *end == 'I'))
    end++;
  if (mult > 1 && (*end == 'b' || *end == 'B'))
    end++;
  while (isspace((unsigned char)*end))
    end++;
  if (*end)
    return strata__error(STRATA_ERR_PARSE, "'%s' is not a size (unexpected '%s')", text, end);
  double bytes = v * mult;
  if (bytes >= 18446744073709551615.0)
    return strata__error(STRATA_ERR_RANGE, "size '%s' is too large", text);
  *out = (uint64_t)llround(bytes);
  return STRATA_OK;
}
