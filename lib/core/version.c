/* SPDX-License-Identifier: MIT */
/* version.c — strata_version(): the release libstrata was built as. */
#include <strata/version.h>

const char *strata_version(void) {
  return STRATA_VERSION;
}
