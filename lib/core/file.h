/* SPDX-License-Identifier: MIT */
/* file.h — files in and out: inputs opened without ever blocking on a FIFO or a device, outputs written atomically beside their target. Internal. */
#ifndef STRATA__FILE_H
#define STRATA__FILE_H

#include <stdio.h>

/*
** Open `path` for reading, and only if it is a regular file: opened with
** O_NONBLOCK (so a FIFO with no writer, or a terminal, cannot block the
** open), checked with fstat on the descriptor itself (no window between
** check and use), then O_NONBLOCK cleared for ordinary reads. Every input
** strata reads by name goes through here. On success *fd is the caller's
** to close. On failure nothing is open, the last error names the path and
** the reason ("is a FIFO, not a regular file"), and the status is
** `missing` for a file that does not exist, STRATA_ERR_IO otherwise.
*/
int strata__open_input(const char *path, int missing, int *fd /* OUT */);

/* The same, as a stdio stream ("rb"); *f is the caller's to fclose. */
int strata__fopen_input(const char *path, int missing, FILE **f /* OUT */);

/*
** The one atomic writer behind every file strata writes (checkpoints,
** traces). strata__out_open creates a temporary file in the target's own
** directory with O_CREAT | O_EXCL | O_NOFOLLOW (a planted file or symbolic
** link is never written through), named
**     BASE.tmp-HASH-PID-RANDOM
** where BASE is the target's name cut to 120 bytes, HASH the 32-bit FNV-1a
** hash of the whole name in 8 hex digits, PID the writer's process id and
** RANDOM 8 characters of [a-z0-9], so the temporary name always fits
** NAME_MAX when the target's does; before that it removes the temporary files of earlier writers of
** the same target whose process is gone (a run killed while saving). An
** existing target that is not a regular file (a directory, a FIFO, a
** device, a socket; a symbolic link is followed) is refused first: a rename
** would put a file in its place.
** strata__out_commit flushes, fsyncs, renames over the target and syncs the
** directory: the target is either the old file or the whole new one.
** strata__out_abort removes the temporary file. Both release everything;
** after either the struct may be opened again.
*/
struct strata__out {
  int dirfd, fd;
  FILE *stream;            /* made by strata__out_stream, or NULL */
  char *path;              /* the target as given (malloc'd) */
  char *base;              /* its last component, inside `path` */
  char tmp[256];           /* the temporary file's name in the directory */
};

int strata__out_open(struct strata__out *o, const char *path);
/* The temporary file as a stdio stream (owned by `o`); NULL with the last error set on failure. */
FILE *strata__out_stream(struct strata__out *o);
int strata__out_commit(struct strata__out *o);
void strata__out_abort(struct strata__out *o);

/*
** Check before the work that `path` can be written by strata__out_open:
** its directory exists and takes a new file (one temporary file is created
** and removed), the target is absent or a regular file. The message names
** the path and the reason.
*/
int strata__out_check(const char *path);

#endif /* STRATA__FILE_H */
