/* SPDX-License-Identifier: MIT */
/* fuzz.h — what the libFuzzer harnesses share: one scratch file per process that holds the current input, for the APIs that read files. */
#ifndef STRATA_FUZZ_H
#define STRATA_FUZZ_H

#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static char fuzz_path[4096];

static void fuzz_remove(void) {
  if (fuzz_path[0])
    unlink(fuzz_path);
}

/*
** Write `size` bytes of `data` to this process's scratch file (created on
** first use under $TMPDIR, removed at exit) and return its path. Aborts
** when the file cannot be written: a harness that cannot feed its input
** must not report coverage.
*/
static const char *fuzz_file(const char *tag, const uint8_t *data, size_t size) {
  if (!fuzz_path[0]) {
    const char *dir = getenv("TMPDIR");
    snprintf(fuzz_path, sizeof fuzz_path, "%s/strata-fuzz-%s-%ld%s", dir && *dir ? dir : "/tmp", tag, (long)getpid(),
             strcmp(tag, "topology") == 0 ? ".xml" : "");
    atexit(fuzz_remove);
  }
  int fd = open(fuzz_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) {
    perror(fuzz_path);
    abort();
  }
  size_t done = 0;
  while (done < size) {
    ssize_t n = write(fd, data + done, size - done);
    if (n <= 0) {
      perror(fuzz_path);
      abort();
    }
    done += (size_t)n;
  }
  close(fd);
  return fuzz_path;
}

/* A copy of the input with a terminating NUL (the caller frees it). */
static char *fuzz_string(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s)
    abort();
  memcpy(s, data, size);
  s[size] = '\0';
  return s;
}

#endif /* STRATA_FUZZ_H */
