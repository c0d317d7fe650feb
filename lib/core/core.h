/* SPDX-License-Identifier: MIT */
/* core.h — the core's private header, for the whole runtime: error recording (status.c), logging (log.c), checked
** arithmetic, the clock (time.c) and string copies. */
#ifndef STRATA__CORE_H
#define STRATA__CORE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <strata/common.h>

/* Record `fmt` as this thread's last error message and return `status`. */
int strata__error(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int strata__verror(int status, const char *fmt, va_list ap);
/* Forget the last error (called at the start of public calls that succeed
** without touching it is not needed: the message only matters after a failure). */
void strata__error_clear(void);
/* Put "fmt..." before this thread's last error message and return `status`
** (the message is copied first, so it may be an argument of nothing here). */
int strata__error_prefix(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/*
** Copy `src` into dst (capacity cap > 0, always terminated) with control
** characters escaped so that text from a file can never drive a terminal:
** C0 and DEL as \xHH (\n, \t), C1 (U+0080..U+009F) as \u00HH, bytes that
** are not UTF-8 as \xHH; valid UTF-8 passes. Cut at a whole character when
** it does not fit. Returns the length written. Every last-error message
** goes through it.
*/
size_t strata__escape(char *dst, size_t cap, const char *src);

/* Log through the installed handler; cheap when logging is off. */
void strata__log(int level, const char *subsystem, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void strata__vlog(int level, const char *subsystem, const char *fmt, va_list ap);

/* Return the status of `expr` from the calling function unless it is STRATA_OK. */
#define TRY(expr)                                                                                                      \
  do {                                                                                                                 \
    int rc_ = (expr);                                                                                                  \
    if (rc_)                                                                                                           \
      return rc_;                                                                                                      \
  } while (0)

/* a * b into *out unless it overflows (returns 0 then). */
static inline int strata__mul_ok(uint64_t a, uint64_t b, uint64_t *out) {
  if (a != 0 && b > UINT64_MAX / a)
    return 0;
  *out = a * b;
  return 1;
}

/* Seconds on the monotonic clock (the trainer's traces and the communicator share it). */
double strata__now(void);

/* A new string formatted as printf would, whole (the caller frees it); NULL when memory runs out. */
char *strata__format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *strata__vformat(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

/* Copy at most size-1 bytes of src into dst, always terminated. */
void strata__strlcpy(char *dst, const char *src, size_t size);

#endif /* STRATA__CORE_H */
