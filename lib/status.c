/* SPDX-License-Identifier: MIT */
/* status.c — status names and descriptions, and the per-thread last-error message. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "util.h"

static _Thread_local char last_error[1024];

STRATA_API const char *strata_err_name(int status) {
  switch (status) {
  case STRATA_OK:
    return "STRATA_OK";
#define STRATA__ERR_NAME(name, value, text)                                                                            \
  case STRATA_ERR_##name:                                                                                              \
    return "STRATA_ERR_" #name;
    STRATA_ERRNO_MAP(STRATA__ERR_NAME)
#undef STRATA__ERR_NAME
  }
  return "STRATA_ERR_UNKNOWN";
}

STRATA_API const char *strata_strerror(int status) {
  switch (status) {
  case STRATA_OK:
    return "success";
#define STRATA__ERR_TEXT(name, value, text)                                                                            \
  case STRATA_ERR_##name:                                                                                              \
    return text;
    STRATA_ERRNO_MAP(STRATA__ERR_TEXT)
#undef STRATA__ERR_TEXT
  }
  return "unknown status";
}

STRATA_API const char *strata_last_error(void) { return last_error; }

int strata__verror(int status, const char *fmt, va_list ap) {
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  strata__log(STRATA_LOG_DEBUG, "error", "%s: %s", strata_err_name(status), last_error);
  return status;
}

int strata__error(int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  strata__verror(status, fmt, ap);
  va_end(ap);
  return status;
}

void strata__error_clear(void) { last_error[0] = '\0'; }

void strata__strlcpy(char *dst, const char *src, size_t size) {
  if (size == 0)
    return;
  size_t n = strlen(src);
  if (n >= size)
    n = size - 1;
  memcpy(dst, src, n);
  dst[n] = '\0';
}
