/* SPDX-License-Identifier: MIT */
/* parse.c — the one parser for every number strata reads: decimal integers, reals and byte sizes, range-checked. */
#include "config.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/parse.h"

static _Thread_local char parse_why[128];

const char *strata__parse_why(void) { return parse_why; }

static int why(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int why(int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(parse_why, sizeof parse_why, fmt, ap);
  va_end(ap);
  return status;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/*
** The reason a text is not of the expected form, `p` pointing at the first
** character that does not fit (`text` is the whole). Names the common
** mistakes: hexadecimal, spaces, a '+', infinities and NaNs.
*/
static int bad_form(const char *text, const char *p, const char *what) {
  if (!*text)
    return why(STRATA_ERR_PARSE, "empty, not %s", what);
  if ((*p == 'x' || *p == 'X') && p > text && p[-1] == '0')
    return why(STRATA_ERR_PARSE, "hexadecimal is not accepted, only decimal");
  if (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\v' || *p == '\f')
    return why(STRATA_ERR_PARSE, "spaces are not accepted");
  if (*p == '+' && p == text)
    return why(STRATA_ERR_PARSE, "no '+' sign, please");
  if (*p == 'i' || *p == 'I' || *p == 'n' || *p == 'N')
    return why(STRATA_ERR_PARSE, "not a finite number");
  if (p > text && *p)
    return why(STRATA_ERR_PARSE, "'%.24s' after the number", p);
  return why(STRATA_ERR_PARSE, "not %s", what);
}

/* The magnitude of the digits at *pp into *mag, stopping past them; 1 when it exceeds `limit`. */
static int digits_u64(const char **pp, uint64_t limit, uint64_t *mag) {
  const char *p = *pp;
  uint64_t m = 0;
  int over = 0;
  for (; is_digit(*p); p++) {
    unsigned d = (unsigned)(*p - '0');
    if (over || m > (limit - d) / 10)
      over = 1;
    else
      m = m * 10 + d;
  }
  *pp = p;
  *mag = m;
  return over;
}

int strata__parse_int(const char *text, int64_t min, int64_t max, int64_t *out) {
  if (!text)
    return why(STRATA_ERR_PARSE, "no value");
  const char *p = text;
  int neg = *p == '-';
  if (neg)
    p++;
  if (!is_digit(*p))
    return bad_form(text, p, "an integer");
  uint64_t mag = 0;
  int over = digits_u64(&p, neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, &mag);
  if (*p)
    return bad_form(text, p, "an integer");
  if (neg && min >= 0)
    return why(STRATA_ERR_RANGE, "negative; at least %" PRId64, min);
  if (over)
    return why(STRATA_ERR_RANGE, "overflows a 64-bit integer; at most %" PRId64, max);
  int64_t v = !neg ? (int64_t)mag : mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
  if (v < min)
    return why(STRATA_ERR_RANGE, "below the minimum %" PRId64, min);
  if (v > max)
    return why(STRATA_ERR_RANGE, "above the maximum %" PRId64, max);
  *out = v;
  return STRATA_OK;
}

int strata__parse_uint(const char *text, uint64_t max, uint64_t *out) {
  if (!text)
    return why(STRATA_ERR_PARSE, "no value");
  const char *p = text;
  if (*p == '-')
    return why(STRATA_ERR_RANGE, "negative; at least 0");
  if (!is_digit(*p))
    return bad_form(text, p, "an integer");
  uint64_t mag = 0;
  int over = digits_u64(&p, UINT64_MAX, &mag);
  if (*p)
    return bad_form(text, p, "an integer");
  if (over)
    return why(STRATA_ERR_RANGE, "overflows a 64-bit integer; at most %" PRIu64, max);
  if (mag > max)
    return why(STRATA_ERR_RANGE, "above the maximum %" PRIu64, max);
  *out = mag;
  return STRATA_OK;
}

int strata__parse_real(const char *text, double min, double max, unsigned flags, double *out) {
  if (!text)
    return why(STRATA_ERR_PARSE, "no value");
  /* the grammar first, so that strtod's extras (hex, inf, nan, spaces) never get in */
  const char *p = text;
  if (*p == '-')
    p++;
  int ndigits = 0, nonzero = 0;
  for (; is_digit(*p); p++, ndigits++)
    nonzero |= *p != '0';
  if (*p == '.') {
    p++;
    for (; is_digit(*p); p++, ndigits++)
      nonzero |= *p != '0';
  }
  if (!ndigits)
    return bad_form(text, p, "a number");
  if (*p == 'e' || *p == 'E') {
    const char *e = p + 1;
    if (*e == '+' || *e == '-')
      e++;
    if (!is_digit(*e))
      return bad_form(text, p, "a number");
    while (is_digit(*e))
      e++;
    p = e;
  }
  if (*p)
    return bad_form(text, p, "a number");
  errno = 0;
  char *end = NULL;
  double v = strtod(text, &end);
  if (end != p)
    return why(STRATA_ERR_PARSE, "not a number in this locale");
  if (isinf(v))
    return why(STRATA_ERR_RANGE, "too large: overflows a double");
  if (nonzero && (v == 0 || fpclassify(v) == FP_SUBNORMAL))
    return why(STRATA_ERR_RANGE, "too small: it would become 0");
  if (flags & STRATA__PARSE_FP32) {
    if (fabs(v) > FLT_MAX)
      return why(STRATA_ERR_RANGE, "too large for fp32 (at most %g)", (double)FLT_MAX);
    if (v != 0 && fabs(v) < FLT_MIN)
      return why(STRATA_ERR_RANGE, "too small for fp32: it would become 0 (at least %g)", (double)FLT_MIN);
  }
  if (v < min || ((flags & STRATA__PARSE_ABOVE_MIN) && v == min))
    return why(STRATA_ERR_RANGE, "%s %g", (flags & STRATA__PARSE_ABOVE_MIN) ? "must be above" : "below the minimum",
               min);
  if (v > max)
    return why(STRATA_ERR_RANGE, "above the maximum %g", max);
  *out = v == 0 ? 0.0 : v; /* -0 reads as 0 */
  return STRATA_OK;
}

int strata__parse_size(const char *text, uint64_t *out) {
  static const char form[] = "a size (e.g. 4096, 256M, 1.5G)";
  if (!text)
    return why(STRATA_ERR_PARSE, "no value");
  const char *p = text;
  if (*p == '-')
    return why(STRATA_ERR_PARSE, "negative, not a size");
  if (!is_digit(*p))
    return bad_form(text, p, form);
  uint64_t whole = 0;
  int over = digits_u64(&p, UINT64_MAX, &whole);
  double frac = 0;
  int has_frac = 0;
  if (*p == '.') {
    const char *f = ++p;
    double scale = 0.1;
    for (; is_digit(*p); p++, scale /= 10)
      frac += (*p - '0') * scale;
    if (p == f)
      return bad_form(text, p, form);
    has_frac = 1;
  }
  uint64_t mult = 1;
  switch (*p) {
  case 'k': case 'K': mult = 1ull << 10; break;
  case 'm': case 'M': mult = 1ull << 20; break;
  case 'g': case 'G': mult = 1ull << 30; break;
  case 't': case 'T': mult = 1ull << 40; break;
  default: break;
  }
  if (mult > 1) {
    p++;
    if (*p == 'i' || *p == 'I')
      p++;
    if (*p == 'b' || *p == 'B')
      p++;
  } else if (*p == 'b' || *p == 'B') {
    p++;
  }
  if (*p)
    return bad_form(text, p, form);
  if (has_frac && mult == 1)
    return why(STRATA_ERR_PARSE, "a fraction of a byte; give a whole number or a suffix (K, M, G, T)");
  if (over || whole > UINT64_MAX / mult)
    return why(STRATA_ERR_RANGE, "too large: overflows 64 bits of bytes");
  uint64_t bytes = whole * mult;
  uint64_t part = (uint64_t)llround(frac * (double)mult);
  if (part > UINT64_MAX - bytes)
    return why(STRATA_ERR_RANGE, "too large: overflows 64 bits of bytes");
  *out = bytes + part;
  return STRATA_OK;
}
