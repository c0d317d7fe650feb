/* SPDX-License-Identifier: MIT */
/* cli.h — the strata tools' command-line parsing helpers: numbers and getopt refusals, said the same way. */
#ifndef STRATA_TOOLS_CLI_H
#define STRATA_TOOLS_CLI_H

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

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

/* Option `opt`'s value as a decimal integer >= min, digits only: no sign,
** no spaces, no suffix. Prints one line and returns -1 otherwise. */
static inline int cli_parse_int(const char *prog, const char *opt, const char *text, int64_t min, int64_t *out) {
  const char *what = min > 0 ? "a positive integer" : "a non-negative integer";
  char *end = NULL;
  errno = 0;
  long long v = (text[0] >= '0' && text[0] <= '9') ? strtoll(text, &end, 10) : -1;
  if (!end || errno || *end || v < min) {
    fprintf(stderr, "%s: %s wants %s, not '%s'\n", prog, opt, what, text);
    return -1;
  }
  *out = v;
  return 0;
}

/* Option `opt`'s value as a finite decimal number, > 0 (or >= 0 when zero_ok). */
static inline int cli_parse_num(const char *prog, const char *opt, const char *text, int zero_ok, double *out) {
  const char *what = zero_ok ? "a non-negative number" : "a positive number";
  char *end = NULL;
  errno = 0;
  double v = (text[0] == '.' || (text[0] >= '0' && text[0] <= '9')) ? strtod(text, &end) : -1;
  if (!end || errno || *end || !isfinite(v) || v < 0 || (v == 0 && !zero_ok)) {
    fprintf(stderr, "%s: %s wants %s, not '%s'\n", prog, opt, what, text);
    return -1;
  }
  *out = v;
  return 0;
}

#endif /* STRATA_TOOLS_CLI_H */
