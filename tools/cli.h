/* SPDX-License-Identifier: MIT */
/* cli.h — the strata tools' command-line parsing helpers (tools/cli.c, the convenience library tools/libcli.la): numbers (through lib/core/parse.c), getopt refusals, files said the same way. */
#ifndef STRATA_TOOLS_CLI_H
#define STRATA_TOOLS_CLI_H

#include <stdint.h>
#include <sys/types.h>

#include <strata/common.h>

#include "core/parse.h"

/*
** After getopt_long (with a ':' at the start of its option string) returned
** `c` of ':' or '?': print one line naming what was wrong. After the option
** loop, with c = 0: complain about a stray argument, if any. Returns 1 when
** the command line is bad (the caller exits with status 2), else 0.
*/
int cli_refuse(const char *prog, int c, int argc, char **argv);

/* The exit status for a failed strata_device_count: a setting of the
** environment that is not valid (STRATA_DEVICE_MEMORY_LIMIT=16777216T,
** STRATA_BACKENDS=gpu) is bad usage, 2; anything else is a runtime failure, 1. */
int cli_device_status(int rc);

/* The exit status for a failed strata_model_load (--model NAME or FILE):
** what the name or the file says is bad input, 2 — an unknown preset
** (NOT_FOUND), malformed JSON or an unknown field (PARSE), a value out of
** range (INVALID, RANGE), sizes that do not fit (SHAPE: heads not dividing
** d_model, n_kv_heads not dividing heads), a rope_type strata does not know
** (UNSUPPORTED). A file that cannot be read is a runtime failure, 1: the
** library reports a missing file, a FIFO or a directory as STRATA_ERR_IO,
** like every other input file the tools open (a missing --data or --resume
** is 1 too), and out of memory is 1. */
int cli_model_status(int rc);

/* The largest value cli_parse_int takes when no bound is given: counts
** (steps, batches, seeds) past a billion are typing mistakes, not runs. */
#define CLI_INT_MAX INT64_C(1000000000)

/*
** Option `opt`'s value as a decimal integer in [min, max], digits only: no
** sign, hexadecimal, spaces or suffix (lib/core/parse.c, the one parser of every
** number strata reads). Prints one line naming the option, the value and
** why, and returns -1 otherwise.
*/
int cli_parse_range(const char *prog, const char *opt, const char *text, int64_t min, int64_t max, int64_t *out);

/*
** Option `opt`'s comma-separated list ("0,1,4") into a new array (*out,
** the caller's to free(); *n entries, 0 when the list has none), each
** value as cli_parse_range takes it in [min, max] (max at most INT_MAX).
** Prints one line and returns -1 otherwise.
*/
int cli_parse_list(const char *prog, const char *opt, const char *text, int64_t min, int64_t max, int **out, int *n);

/* cli_parse_range up to CLI_INT_MAX. */
int cli_parse_int(const char *prog, const char *opt, const char *text, int64_t min, int64_t *out);

/*
** Option `opt`'s value as a finite decimal number in [lo, hi] (above lo
** with STRATA__PARSE_ABOVE_MIN in flags; STRATA__PARSE_FP32 for values
** the library keeps as floats, so that 1e-50 is refused, not made 0).
** Prints one line and returns -1 otherwise.
*/
int cli_parse_real(const char *prog, const char *opt, const char *text, double lo, double hi,
                   unsigned flags, const char *what, double *out);

/* A number the library keeps as a float: finite in fp32, > 0 (or >= 0 when zero_ok). */
int cli_parse_num(const char *prog, const char *opt, const char *text, int zero_ok, double *out);

/*
** The first bytes (up to n) of the regular file at `path` into buf,
** opened without blocking: how many were read, or -1 when there is no
** regular file to read there (missing, a FIFO, unreadable).
*/
ssize_t cli_read_head(const char *path, void *buf, size_t n);

/*
** Write the text *text and a newline to `path` whole or not at all
** (strata_file_write: a failure keeps the file that was there); *text grows
** by the newline. 0, or -1 after one line "PROG: WHAT: why" on stderr.
*/
int cli_write_line(const char *prog, const char *what, const char *path, char **text);

#endif /* STRATA_TOOLS_CLI_H */
