/* SPDX-License-Identifier: MIT */
/* strata/common.h — export macro, status codes, error messages and logging shared by every strata header. */
#ifndef STRATA_COMMON_H
#define STRATA_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(STRATA_BUILDING) && defined(__GNUC__)
#define STRATA_API __attribute__((visibility("default")))
#else
#define STRATA_API
#endif

/* A call kept for one release after it was replaced; the message names its replacement. */
#if defined(__GNUC__)
#define STRATA_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
#define STRATA_DEPRECATED(msg)
#endif

/*
** Status codes. Every public call returns one: 0 (STRATA_OK) on success,
** a negative value otherwise. The list is the single source of the codes,
** their names (strata_err_name) and their descriptions (strata_strerror).
*/
#define STRATA_ERRNO_MAP(X)                                                        \
  X(INVALID, -1, "invalid argument")                                               \
  X(NOMEM, -2, "out of host memory")                                               \
  X(DEVICE_MEMORY, -3, "out of device memory")                                     \
  X(NOT_FOUND, -4, "not found")                                                    \
  X(UNSUPPORTED, -5, "operation not supported by this device")                     \
  X(BACKEND, -6, "backend or driver failure")                                      \
  X(IO, -7, "input/output error")                                                  \
  X(PARSE, -8, "malformed input")                                                  \
  X(SHAPE, -9, "shapes do not match")                                              \
  X(DEVICE_MISMATCH, -10, "buffer belongs to another device")                      \
  X(VERSION, -11, "incompatible version")                                          \
  X(STATE, -12, "call made in the wrong state")                                    \
  X(RANGE, -13, "value out of range")                                              \
  X(INTERNAL, -14, "internal error")                                               \
  X(INTERRUPTED, -15, "interrupted at the caller's request")                       \
  X(TIMEOUT, -16, "timed out")                                                     \
  X(UNSTEADY, -17, "measurements disagree: the device's speed moved")

enum strata_status {
  STRATA_OK = 0,
#define STRATA__ERR_ENUM(name, value, text) STRATA_ERR_##name = (value),
  STRATA_ERRNO_MAP(STRATA__ERR_ENUM)
#undef STRATA__ERR_ENUM
};

/* Name of a status ("STRATA_ERR_SHAPE"); a static string, "STRATA_ERR_UNKNOWN" for an unknown code. */
STRATA_API const char *strata_err_name(int status);

/* One-line description of a status; a static string. */
STRATA_API const char *strata_strerror(int status);

/*
** The message of the last failed call made by this thread, with detail
** (which device, which file, which shape). The string belongs to the
** library and stays valid until this thread's next strata call; it is ""
** when no call has failed yet.
*/
STRATA_API const char *strata_last_error(void);

/* Log levels and subsystems. Logging is off unless STRATA_LOG is set
** (e.g. STRATA_LOG=debug or STRATA_LOG=info,topology,device) or a handler
** is installed with strata_log_set_handler. */
enum strata_log_level {
  STRATA_LOG_ERROR = 0,
  STRATA_LOG_WARN = 1,
  STRATA_LOG_INFO = 2,
  STRATA_LOG_DEBUG = 3
};

typedef void (*strata_log_fn)(int level, const char *subsystem, const char *message, void *userdata);

/*
** Install a log handler (NULL restores the default, which writes to stderr
** only when STRATA_LOG asks for it) and the most verbose level it receives.
** The handler may be called from any thread of the library.
*/
STRATA_API void strata_log_set_handler(strata_log_fn fn, int max_level, void *userdata);

/*
** Parse a size such as "256M", "1.5G", "4096", "64k" (powers of 1024).
** On success stores the byte count in *out and returns STRATA_OK;
** STRATA_ERR_PARSE for anything else, *out untouched.
*/
STRATA_API int strata_parse_size(const char *text, uint64_t *out /* OUT */);

/*
** Write `size` bytes of `data` to `path` in one step: into a temporary file
** beside it, synced, then renamed over it, so a reader finds the old file
** or the whole new one, and a failure (a full disk, a killed process)
** leaves the old file as it was. A file replaced keeps its mode. Only a
** regular file is replaced: an existing directory, FIFO, device or socket
** at `path` is refused before anything is written. STRATA_ERR_IO with the
** reason otherwise.
*/
STRATA_API int strata_file_write(const char *path, const void *data, size_t size);

/*
** Check, before long work, that strata_file_write(path) will be able to
** write: the directory exists and takes a new file (a temporary file is
** created and removed), `path` does not exist or is a regular file (or a
** symbolic link to one): a directory, a FIFO, a device or a socket is
** never replaced. STRATA_ERR_IO with the reason otherwise.
*/
STRATA_API int strata_file_check(const char *path);

/*
** 1 when paths `a` and `b` name the same file, else 0 (also when either is
** NULL or ""). Files that exist are compared by device and inode, so a hard
** link, a symbolic link or "./x" against "x" are the same; when neither
** exists yet, by their directories' device and inode and the same last
** component; one there and one not are two files.
*/
STRATA_API int strata_file_same(const char *a, const char *b);

/* One file a run names, for strata_file_preflight. */
struct strata_file_use {
  const char *path;     /* NULL or "": not given this run, skipped */
  const char *what;     /* how the user named it, for messages: "--out", "--calibration" */
  int output;           /* 1: the run writes it; 0: the run reads it */
  const char *replaces; /* an output's leave to replace one input on purpose: that input's `what`
                        ** (strata-train's --save over its --resume), else NULL */
};

/*
** The check every tool makes of its files before any work: no output is
** the same file (strata_file_same) as an input that exists, other than the
** one it `replaces`, nor as another output; then every output as
** strata_file_check takes it. The first failure is the last error, naming
** the options and paths: STRATA_ERR_INVALID for two files that are one,
** strata_file_check's status otherwise. The array is only read.
*/
STRATA_API int strata_file_preflight(const struct strata_file_use *files, int n);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_COMMON_H */
