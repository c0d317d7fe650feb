/* SPDX-License-Identifier: MIT */
/* cli.c — the strata tools' command-line helpers, compiled once into tools/libcli.la; each one's contract is in cli.h. */
#include <fcntl.h>
#include <float.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

int cli_refuse(const char *prog, int c, int argc, char **argv) {
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

int cli_device_status(int rc) {
  return rc == STRATA_ERR_PARSE || rc == STRATA_ERR_RANGE || rc == STRATA_ERR_INVALID ? 2 : 1;
}

int cli_model_status(int rc) {
  return rc == STRATA_ERR_NOT_FOUND || rc == STRATA_ERR_PARSE || rc == STRATA_ERR_INVALID || rc == STRATA_ERR_RANGE ||
                 rc == STRATA_ERR_SHAPE || rc == STRATA_ERR_UNSUPPORTED
             ? 2
             : 1;
}

int cli_parse_range(const char *prog, const char *opt, const char *text, int64_t min, int64_t max, int64_t *out) {
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

int cli_parse_list(const char *prog, const char *opt, const char *text, int64_t min, int64_t max, int **out, int *n) {
  *out = NULL;
  *n = 0;
  size_t cap = 1;
  for (const char *p = text; *p; p++)
    cap += *p == ',';
  int *v = malloc(sizeof *v * cap);
  char *copy = strdup(text);
  if (!v || !copy) {
    fprintf(stderr, "%s: out of memory reading %s\n", prog, opt);
    free(v);
    free(copy);
    return -1;
  }
  int k = 0;
  for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    int64_t x;
    if (cli_parse_range(prog, opt, tok, min, max, &x)) {
      free(copy);
      free(v);
      return -1;
    }
    v[k++] = (int)x;
  }
  free(copy);
  *out = v;
  *n = k;
  return 0;
}

int cli_parse_int(const char *prog, const char *opt, const char *text, int64_t min, int64_t *out) {
  return cli_parse_range(prog, opt, text, min, CLI_INT_MAX, out);
}

int cli_parse_real(const char *prog, const char *opt, const char *text, double lo, double hi,
                   unsigned flags, const char *what, double *out) {
  double v = 0;
  if (strata__parse_real(text, lo, hi, flags, &v) == 0) {
    *out = v;
    return 0;
  }
  fprintf(stderr, "%s: %s wants %s, not '%s' (%s)\n", prog, opt, what, text, strata__parse_why());
  return -1;
}

int cli_parse_num(const char *prog, const char *opt, const char *text, int zero_ok, double *out) {
  return cli_parse_real(prog, opt, text, 0, FLT_MAX, STRATA__PARSE_FP32 | (zero_ok ? 0 : STRATA__PARSE_ABOVE_MIN),
                        zero_ok ? "a non-negative number" : "a positive number", out);
}

ssize_t cli_read_head(const char *path, void *buf, size_t n) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  struct stat st;
  ssize_t got = -1;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
    got = read(fd, buf, n);
  close(fd);
  return got;
}

int cli_write_line(const char *prog, const char *what, const char *path, char **text) {
  const size_t len = strlen(*text);
  char *t = realloc(*text, len + 2);
  if (!t) {
    fprintf(stderr, "%s: %s: out of memory\n", prog, what);
    return -1;
  }
  *text = t;
  memcpy(t + len, "\n", 2);
  if (strata_file_write(path, t, len + 1)) {
    fprintf(stderr, "%s: %s: %s\n", prog, what, strata_last_error());
    return -1;
  }
  return 0;
}
