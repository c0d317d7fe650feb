/* SPDX-License-Identifier: MIT */
/* cli.h — what the strata tools say when getopt refuses their command line, in one place. */
#ifndef STRATA_TOOLS_CLI_H
#define STRATA_TOOLS_CLI_H

#include <getopt.h>
#include <stdio.h>

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

#endif /* STRATA_TOOLS_CLI_H */
