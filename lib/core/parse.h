/* SPDX-License-Identifier: MIT */
/* parse.h — the one parser for every number strata reads (options, environment, file metadata): decimal, range-checked, finite. Internal. */
#ifndef STRATA__PARSE_H
#define STRATA__PARSE_H

#include <stdint.h>

#include <strata/common.h>

/*
** These functions depend on nothing but libc, so that the tools and the
** backend modules link it from one convenience library, lib/core/libparse.la (the library's own
** copy is hidden) and a fuzzer can take it alone. Each returns STRATA_OK
** and stores the value, or, with *out untouched:
**   STRATA_ERR_PARSE  the text is not the expected form (empty, a sign where
**                     none is allowed, hexadecimal, "inf"/"nan", spaces,
**                     trailing characters),
**   STRATA_ERR_RANGE  the form is right but the value is not: past the
**                     bounds, overflowing, or too small to represent.
** strata__parse_why() then says which, in a few words ("overflows",
** "hexadecimal is not accepted"), for the caller's one-line message; the
** string is this thread's and lives until its next failed parse.
*/

/* A decimal integer in [min, max]: digits, with a leading '-' only when min < 0. */
int strata__parse_int(const char *text, int64_t min, int64_t max, int64_t *out /* OUT */);

/* A decimal integer in [0, max]: digits only. */
int strata__parse_uint(const char *text, uint64_t max, uint64_t *out /* OUT */);

/* The value must stay the same kind of number as a float: finite in fp32,
** and a non-zero value not below FLT_MIN (where it would lose its digits or
** become 0). */
#define STRATA__PARSE_FP32 1u
/* The value must be greater than min, not equal to it. */
#define STRATA__PARSE_ABOVE_MIN 2u

/*
** A finite decimal number in [min, max] (see the flags): [-]digits[.digits]
** or [-].digits, then optionally e[+|-]digits. No hexadecimal, no "inf" or
** "nan", no leading '+' or spaces. A non-zero value that underflows double
** is STRATA_ERR_RANGE, never silently 0.
*/
int strata__parse_real(const char *text, double min, double max, unsigned flags, double *out /* OUT */);

/*
** A byte count: digits, optionally a fraction and a binary suffix K, M, G
** or T (powers of 1024; either case, optionally followed by "i" and/or
** "B"), e.g. 4096, 256M, 1.5GiB. A fraction needs a suffix (no fraction of
** a byte); no exponent, no spaces. Overflow past 2^64 - 1 bytes is
** STRATA_ERR_RANGE. The result is rounded to the nearest byte.
*/
int strata__parse_size(const char *text, uint64_t *out /* OUT */);

/* Why the last failed parse of this thread failed (never NULL). */
const char *strata__parse_why(void);

#endif /* STRATA__PARSE_H */
