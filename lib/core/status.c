/* SPDX-License-Identifier: MIT */
/* status.c — status names and descriptions, and the per-thread last-error message. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

/* Room for a message with two paths of PATH_MAX and their reason; a longer
** one loses its middle, never its end (where the reason is). */
#define STRATA__ERROR_MAX 12288
#define STRATA__ERROR_HEAD 2048

static _Thread_local char last_error[STRATA__ERROR_MAX];

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

/* Length of the valid UTF-8 sequence at p (1..4), or 0 when the bytes there are not one. */
static size_t utf8_len(const unsigned char *p) {
  if (p[0] < 0x80)
    return 1;
  size_t n = p[0] >= 0xc2 && p[0] <= 0xdf ? 2 : p[0] >= 0xe0 && p[0] <= 0xef ? 3 : p[0] >= 0xf0 && p[0] <= 0xf4 ? 4 : 0;
  for (size_t i = 1; i < n; i++)
    if ((p[i] & 0xc0) != 0x80)
      return 0;
  if (n == 3 && ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0)))
    return 0; /* overlong, or a surrogate */
  if (n == 4 && ((p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90)))
    return 0;
  return n;
}

size_t strata__escape(char *dst, size_t cap, const char *src) {
  size_t at = 0;
  if (cap == 0)
    return 0;
  for (const unsigned char *p = (const unsigned char *)src; *p;) {
    char esc[8];
    size_t n = utf8_len(p), w;
    const char *from = (const char *)p;
    if (n == 1 && (*p < 0x20 || *p == 0x7f)) {
      w = (size_t)snprintf(esc, sizeof esc, *p == '\n' ? "\\n" : *p == '\t' ? "\\t" : "\\x%02x", *p);
      from = esc;
    } else if (n == 2 && p[0] == 0xc2 && p[1] < 0xa0) { /* a C1 control, U+0080..U+009F */
      w = (size_t)snprintf(esc, sizeof esc, "\\u%04x", p[1]);
      from = esc;
    } else if (n == 0) { /* not UTF-8: the byte itself */
      w = (size_t)snprintf(esc, sizeof esc, "\\x%02x", *p);
      from = esc;
      n = 1;
    } else {
      w = n;
    }
    if (at + w >= cap)
      break; /* whole escapes and characters only */
    memcpy(dst + at, from, w);
    at += w;
    p += n;
  }
  dst[at] = '\0';
  return at;
}

int strata__verror(int status, const char *fmt, va_list ap) {
  va_list aq;
  va_copy(aq, ap);
  int n = vsnprintf(NULL, 0, fmt, aq);
  va_end(aq);
  char *raw = n >= 0 ? malloc((size_t)n + 1) : NULL;
  char *esc = raw ? malloc(4 * (size_t)n + 1) : NULL;
  if (!raw || !esc) { /* out of memory: the message as it fits */
    free(raw);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
  } else {
    vsnprintf(raw, (size_t)n + 1, fmt, ap);
    size_t len = strata__escape(esc, 4 * (size_t)n + 1, raw);
    if (len < sizeof last_error) {
      memcpy(last_error, esc, len + 1);
    } else {
      /* keep the head (what failed) and the tail (why); cut the middle at a character boundary */
      static const char cut[] = " [...] ";
      size_t head = STRATA__ERROR_HEAD, tail = sizeof last_error - 1 - head - (sizeof cut - 1);
      while (head > 0 && ((unsigned char)esc[head] & 0xc0) == 0x80)
        head--;
      size_t from = len - tail;
      while (from < len && ((unsigned char)esc[from] & 0xc0) == 0x80)
        from++;
      memcpy(last_error, esc, head);
      memcpy(last_error + head, cut, sizeof cut - 1);
      memcpy(last_error + head + sizeof cut - 1, esc + from, len - from + 1);
    }
    free(raw);
    free(esc);
  }
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

int strata__error_prefix(int status, const char *fmt, ...) {
  char *old = strdup(last_error);
  char prefix[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  strata__error(status, "%s%s", prefix, old ? old : "(out of memory)");
  free(old);
  return status;
}

void strata__error_clear(void) { last_error[0] = '\0'; }

char *strata__vformat(const char *fmt, va_list ap) {
  va_list again;
  va_copy(again, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  char *text = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (text)
    vsnprintf(text, (size_t)n + 1, fmt, again);
  va_end(again);
  return text;
}

char *strata__format(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *text = strata__vformat(fmt, ap);
  va_end(ap);
  return text;
}

void strata__strlcpy(char *dst, const char *src, size_t size) {
  if (size == 0)
    return;
  size_t n = strlen(src);
  if (n >= size)
    n = size - 1;
  memcpy(dst, src, n);
  dst[n] = '\0';
}
