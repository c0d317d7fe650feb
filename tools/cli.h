/* SPDX-License-Identifier: MIT */
/* cli.h — the strata tools' command-line parsing helpers: numbers (through lib/parse.c), getopt refusals, files said the same way. */
#ifndef STRATA_TOOLS_CLI_H
#define STRATA_TOOLS_CLI_H

#include <float.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>

#include "parse.h"

/*
** After getopt_long (with a ':' at the start of its option string) returned
** `c` of ':' or '?': print one line naming what was wrong. After the option
** loop, with c = 0: complain about a stray argument, if any. Returns 1 when
** the command line is bad (the caller exits with status 2), else 0.
*/
static inline int cli_refuse(const char *prog, int c, int argc, char **argv) {
  if (c == ':') {
    fprintf(stderr, "%s: %s wants a value (see --help)\n", prog, argv[optind - 1]);
    return 1;
  }
  if (c == '?') {
    if (optopt)
      fprintf(stderr, "%s: unknown option '-%c' (see --help)\n", prog, optopt);
    else
      fprintf(stderr, "%s: unknown option '%s' (see --help)\n", prog, argv[optind - 1]);
    return 1;
  }
  if (optind < argc) {
    fprintf(stderr, "%s: unexpected argument '%s' (see --help)\n", prog, argv[optind]);
    return 1;
  }
  return 0;
}

/* The largest value cli_parse_int takes when no bound is given: counts
** (steps, batches, seeds) past a billion are typing mistakes, not runs. */
#define CLI_INT_MAX INT64_C(1000000000)

/*
** Option `opt`'s value as a decimal integer in [min, max], digits only: no
** sign, hexadecimal, spaces or suffix (lib/parse.c, the one parser of every
** number strata reads). Prints one line naming the option, the value and
** why, and returns -1 otherwise.
*/
static inline int cli_parse_range(const char *prog, const char *opt, const char *text, int64_t min, int64_t max,
                                  int64_t *out) {
  int64_t v = 0;
  if (strata__parse_int(text, min, max, &v) == 0) {
    *out = v;
    return 0;
  }
  if (min == 1)
    fprintf(stderr, "%s: %s wants a positive integer, not '%s' (%s)\n", prog, opt, text, strata__parse_why());
  else if (min == 0)
    fprintf(stderr, "%s: %s wants a non-negative integer, not '%s' (%s)\n", prog, opt, text, strata__parse_why());
  else
    fprintf(stderr, "%s: %s wants an integer from %lld to %lld, not '%s' (%s)\n", prog, opt, (long long)min,
            (long long)max, text, strata__parse_why());
  return -1;
}

/* cli_parse_range up to CLI_INT_MAX. */
static inline int cli_parse_int(const char *prog, const char *opt, const char *text, int64_t min, int64_t *out) {
  return cli_parse_range(prog, opt, text, min, CLI_INT_MAX, out);
}

/*
** Option `opt`'s value as a finite decimal number in [lo, hi] (above lo
** with STRATA__PARSE_ABOVE_MIN in flags; STRATA__PARSE_FP32 for values
** the library keeps as floats, so that 1e-50 is refused, not made 0).
** Prints one line and returns -1 otherwise.
*/
static inline int cli_parse_real(const char *prog, const char *opt, const char *text, double lo, double hi,
                                 unsigned flags, const char *what, double *out) {
  double v = 0;
  if (strata__parse_real(text, lo, hi, flags, &v) == 0) {
    *out = v;
    return 0;
  }
  fprintf(stderr, "%s: %s wants %s, not '%s' (%s)\n", prog, opt, what, text, strata__parse_why());
  return -1;
}

/* A number the library keeps as a float: finite in fp32, > 0 (or >= 0 when zero_ok). */
static inline int cli_parse_num(const char *prog, const char *opt, const char *text, int zero_ok, double *out) {
  return cli_parse_real(prog, opt, text, 0, FLT_MAX, STRATA__PARSE_FP32 | (zero_ok ? 0 : STRATA__PARSE_ABOVE_MIN),
                        zero_ok ? "a non-negative number" : "a positive number", out);
}

#endif /* STRATA_TOOLS_CLI_H */
