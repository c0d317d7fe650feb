/* SPDX-License-Identifier: MIT */
/* file.c — inputs opened without blocking and only when regular, outputs through one atomic writer that cleans up after killed runs. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/file.h"
#include "core/core.h"

/* What a file that is not regular is, for the message. */
static const char *file_kind(mode_t m) {
  if (S_ISDIR(m))
    return "a directory";
  if (S_ISFIFO(m))
    return "a FIFO";
  if (S_ISCHR(m))
    return "a character device";
  if (S_ISBLK(m))
    return "a block device";
  if (S_ISSOCK(m))
    return "a socket";
  return "not a plain file";
}

int strata__open_input(const char *path, int missing, int *out) {
  *out = -1;
  if (!path || !*path)
    return strata__error(STRATA_ERR_INVALID, "no file name");
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    return strata__error(err == ENOENT ? missing : STRATA_ERR_IO, "%s: cannot open: %s", path, strerror(err));
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    int err = errno;
    close(fd);
    return strata__error(STRATA_ERR_IO, "%s: cannot stat: %s", path, strerror(err));
  }
  if (!S_ISREG(sb.st_mode)) {
    close(fd);
    return strata__error(STRATA_ERR_IO, "%s: not a regular file (%s)", path, file_kind(sb.st_mode));
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    int err = errno;
    close(fd);
    return strata__error(STRATA_ERR_IO, "%s: cannot clear O_NONBLOCK: %s", path, strerror(err));
  }
  *out = fd;
  return STRATA_OK;
}

int strata__fopen_input(const char *path, int missing, FILE **out) {
  *out = NULL;
  int fd = -1;
  TRY(strata__open_input(path, missing, &fd));
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    int err = errno;
    close(fd);
    return strata__error(STRATA_ERR_NOMEM, "%s: cannot make a stream: %s", path, strerror(err));
  }
  *out = f;
  return STRATA_OK;
}

/* ---------------------------------------------------------------- the atomic writer */

#define BASE_KEEP 120 /* bytes of the target's name kept in a temporary name */
#define RAND_LEN 8

/* FNV-1a of the whole name: temporary names of two long names that share their first BASE_KEEP bytes differ. */
static uint32_t name_hash(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

/* "BASE.tmp-HASH-" for the target's name `base`: what every temporary name of that target starts with. */
static void tmp_prefix(const char *base, char *buf, size_t n) {
  size_t keep = strlen(base);
  if (keep > BASE_KEEP)
    keep = BASE_KEEP;
  snprintf(buf, n, "%.*s.tmp-%08x-", (int)keep, base, (unsigned)name_hash(base));
}

/*
** Remove the temporary files that earlier writers of `base` left in the
** directory: names "PREFIX PID-RANDOM" whose PID is not alive. A writer
** still running (another process saving the same path) keeps its file.
*/
static void remove_stale(int dirfd, const char *base) {
  char prefix[BASE_KEEP + 32];
  tmp_prefix(base, prefix, sizeof prefix);
  size_t plen = strlen(prefix);
  int dfd = dup(dirfd);
  DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
  if (!d) {
    if (dfd >= 0)
      close(dfd);
    return;
  }
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    const char *n = de->d_name;
    if (strncmp(n, prefix, plen) != 0)
      continue;
    const char *p = n + plen;
    long pid = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 10; p++, digits++)
      pid = pid * 10 + (*p - '0');
    if (!digits || *p != '-' || strlen(p + 1) != RAND_LEN || pid <= 0 || pid == (long)getpid())
      continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
      continue; /* alive, or not ours to judge */
    if (unlinkat(dirfd, n, 0) == 0)
      strata__log(STRATA_LOG_INFO, "io", "removed %s, left by a writer (pid %ld) that is gone", n, pid);
  }
  closedir(d);
}

/* RAND_LEN characters of [a-z0-9] into buf (terminated). */
static void random_tag(char *buf) {
  static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  unsigned char r[RAND_LEN];
  if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
    /* no entropy yet: time and a counter (O_EXCL still guarantees a fresh file) */
    static _Thread_local unsigned counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec * 6364136223846793005ull + (uint64_t)ts.tv_sec + ++counter;
    for (int i = 0; i < RAND_LEN; i++, x = x * 6364136223846793005ull + 1442695040888963407ull)
      r[i] = (unsigned char)(x >> 56);
  }
  for (int i = 0; i < RAND_LEN; i++)
    buf[i] = alphabet[r[i] % (sizeof alphabet - 1)];
  buf[RAND_LEN] = '\0';
}

static void out_reset(struct strata__out *o) {
  o->dirfd = o->fd = -1;
  o->stream = NULL;
  o->path = o->base = NULL;
  o->tmp[0] = '\0';
}

static void out_release(struct strata__out *o) {
  if (o->stream)
    fclose(o->stream);
  else if (o->fd >= 0)
    close(o->fd);
  if (o->dirfd >= 0)
    close(o->dirfd);
  free(o->path);
  out_reset(o);
}

int strata__out_open(struct strata__out *o, const char *path) {
  out_reset(o);
  if (!path || !*path)
    return strata__error(STRATA_ERR_INVALID, "no output file name");
  o->path = strdup(path);
  if (!o->path)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory");
  char *slash = strrchr(o->path, '/');
  o->base = slash ? slash + 1 : o->path;
  if (!*o->base) {
    out_release(o);
    return strata__error(STRATA_ERR_IO, "%s: names a directory, not a file", path);
  }
  size_t blen = strlen(o->base);
  if (blen > 255) {
    out_release(o);
    return strata__error(STRATA_ERR_IO, "%s: the file name is %zu bytes, longer than a name may be (255)", path, blen);
  }
  /* the directory: the path up to the last slash ("/" itself for "/name") */
  int rc = STRATA_OK;
  if (slash) {
    char keep = slash == o->path ? slash[1] : *slash;
    if (slash == o->path)
      slash[1] = '\0';
    else
      *slash = '\0';
    o->dirfd = open(o->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int err = errno;
    if (slash == o->path)
      slash[1] = keep;
    else
      *slash = keep;
    if (o->dirfd < 0)
      rc = strata__error(STRATA_ERR_IO, "%s: cannot open its directory: %s", path, strerror(err));
  } else {
    o->dirfd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (o->dirfd < 0)
      rc = strata__error(STRATA_ERR_IO, "%s: cannot open the current directory: %s", path, strerror(errno));
  }
  if (rc) {
    out_release(o);
    return rc;
  }
  struct stat sb;
  mode_t mode = 0644;
  if (fstatat(o->dirfd, o->base, &sb, 0) == 0) {
    /* A rename would put a file where a device, a FIFO or a socket was (run as root, --save /dev/null would
    ** replace the system's /dev/null): only a regular file, or a link to one, is ever replaced. */
    if (!S_ISREG(sb.st_mode)) {
      out_release(o);
      if (S_ISDIR(sb.st_mode))
        return strata__error(STRATA_ERR_IO, "%s: is a directory", path);
      return strata__error(STRATA_ERR_IO, "%s: is %s, not a regular file; strata replaces only regular files", path,
                           file_kind(sb.st_mode));
    }
    mode = sb.st_mode & 07777; /* a file replaced keeps its mode */
  }
  remove_stale(o->dirfd, o->base);
  char prefix[BASE_KEEP + 32], tag[RAND_LEN + 1];
  tmp_prefix(o->base, prefix, sizeof prefix);
  for (int tries = 0; tries < 100; tries++) {
    random_tag(tag);
    snprintf(o->tmp, sizeof o->tmp, "%s%ld-%s", prefix, (long)getpid(), tag);
    o->fd = openat(o->dirfd, o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (o->fd >= 0 || errno != EEXIST)
      break;
  }
  if (o->fd < 0) {
    rc = strata__error(STRATA_ERR_IO, "%s: cannot create the temporary file %s beside it: %s", path, o->tmp,
                       strerror(errno));
    o->tmp[0] = '\0';
    out_release(o);
    return rc;
  }
  (void)fchmod(o->fd, mode);
  return STRATA_OK;
}

FILE *strata__out_stream(struct strata__out *o) {
  if (!o->stream && o->fd >= 0) {
    o->stream = fdopen(o->fd, "wb");
    if (!o->stream)
      strata__error(STRATA_ERR_NOMEM, "%s: cannot make a stream: %s", o->path, strerror(errno));
  }
  return o->stream;
}

void strata__out_abort(struct strata__out *o) {
  if (o->tmp[0] && o->dirfd >= 0)
    unlinkat(o->dirfd, o->tmp, 0);
  out_release(o);
}

int strata__out_commit(struct strata__out *o) {
  int rc = STRATA_OK;
  if (o->stream) {
    if (fflush(o->stream) != 0 || ferror(o->stream))
      rc = strata__error(STRATA_ERR_IO, "%s: writing %s failed: %s", o->path, o->tmp, strerror(errno));
  }
  if (!rc && fsync(o->fd) != 0)
    rc = strata__error(STRATA_ERR_IO, "%s: fsync of %s failed: %s", o->path, o->tmp, strerror(errno));
  int closed = o->stream ? fclose(o->stream) : close(o->fd);
  int cerr = errno;
  o->stream = NULL;
  o->fd = -1;
  if (!rc && closed != 0)
    rc = strata__error(STRATA_ERR_IO, "%s: closing %s failed: %s", o->path, o->tmp, strerror(cerr));
  if (!rc && renameat(o->dirfd, o->tmp, o->dirfd, o->base) != 0)
    rc = strata__error(STRATA_ERR_IO, "%s: renaming %s over it failed: %s", o->path, o->tmp, strerror(errno));
  if (rc) {
    strata__out_abort(o);
    return rc;
  }
  /* The rename is durable only once the directory is synced. Some file systems refuse fsync on a directory. */
  if (fsync(o->dirfd) != 0 && errno != EINVAL && errno != EROFS && errno != EBADF)
    rc = strata__error(STRATA_ERR_IO, "%s: written, but syncing its directory failed: %s", o->path, strerror(errno));
  o->tmp[0] = '\0';
  out_release(o);
  return rc;
}

int strata__out_check(const char *path) {
  struct strata__out o;
  TRY(strata__out_open(&o, path));
  strata__out_abort(&o);
  return STRATA_OK;
}

STRATA_API int strata_file_write(const char *path, const void *data, size_t size) {
  if (!path || !path[0] || (!data && size))
    return strata__error(STRATA_ERR_INVALID, "strata_file_write: %s", !path || !path[0] ? "no path" : "no data");
  struct strata__out o;
  TRY(strata__out_open(&o, path));
  for (size_t done = 0; done < size;) {
    ssize_t w = write(o.fd, (const char *)data + done, size - done);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      int rc = strata__error(STRATA_ERR_IO, "%s: writing %s failed: %s", path, o.tmp,
                             w < 0 ? strerror(errno) : "nothing written");
      strata__out_abort(&o);
      return rc;
    }
    done += (size_t)w;
  }
  return strata__out_commit(&o);
}

STRATA_API int strata_file_check(const char *path) {
  if (!path || !path[0])
    return strata__error(STRATA_ERR_INVALID, "strata_file_check: no path");
  return strata__out_check(path);
}

/* ---------------------------------------------------------------- the files of one run */

/*
** The directory part of `path` into buf: "." for a bare name, "/" for
** "/name". 0, or -1 when it does not fit.
*/
static int dir_of(const char *path, const char *base, char *buf, size_t n) {
  size_t len = (size_t)(base - path);
  if (len == 0)
    return snprintf(buf, n, ".") < (int)n ? 0 : -1;
  while (len > 1 && path[len - 1] == '/')
    len--;
  if (len >= n)
    return -1;
  memcpy(buf, path, len);
  buf[len] = '\0';
  return 0;
}

STRATA_API int strata_file_same(const char *a, const char *b) {
  if (!a || !b || !a[0] || !b[0])
    return 0;
  struct stat sa, sb;
  int ea = stat(a, &sa), eb = stat(b, &sb);
  if (ea == 0 && eb == 0)
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  if (ea == 0 || eb == 0)
    return 0; /* one is there, the other is not: two files */
  /* neither is there yet: the same name in the same directory (by its device and inode) */
  const char *ba = strrchr(a, '/'), *bb = strrchr(b, '/');
  ba = ba ? ba + 1 : a;
  bb = bb ? bb + 1 : b;
  if (!*ba || !*bb || strcmp(ba, bb) != 0)
    return 0;
  char da[4096], db[4096];
  if (dir_of(a, ba, da, sizeof da) || dir_of(b, bb, db, sizeof db))
    return strcmp(a, b) == 0;
  return stat(da, &sa) == 0 && stat(db, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* Whether `path` names something that is there (a dangling link is not). */
static int exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

STRATA_API int strata_file_preflight(const struct strata_file_use *files, int n) {
  if (n < 0 || (n > 0 && !files))
    return strata__error(STRATA_ERR_INVALID, "strata_file_preflight: no list of files");
  for (int i = 0; i < n; i++) {
    const struct strata_file_use *o = &files[i];
    if (!o->output || !o->path || !o->path[0])
      continue;
    for (int j = 0; j < n; j++) {
      const struct strata_file_use *f = &files[j];
      if (j == i || !f->path || !f->path[0])
        continue;
      if (!f->output) {
        /* an input that is not there cannot be replaced (a preset's name, "live"); one the output may replace on
        ** purpose is left alone */
        if ((o->replaces && f->what && strcmp(o->replaces, f->what) == 0) || !exists(f->path))
          continue;
        if (strata_file_same(o->path, f->path))
          return strata__error(STRATA_ERR_INVALID, "%s '%s' is the %s file; writing it would replace that input "
                               "(choose another name)", o->what ? o->what : "the output", o->path,
                               f->what ? f->what : "input");
      } else if (j > i && strata_file_same(o->path, f->path)) {
        return strata__error(STRATA_ERR_INVALID, "%s '%s' is the %s file; one output would replace the other "
                             "(choose two names)", f->what ? f->what : "an output", f->path,
                             o->what ? o->what : "another output's");
      }
    }
  }
  for (int i = 0; i < n; i++) {
    int rc = files[i].output && files[i].path && files[i].path[0] ? strata__out_check(files[i].path) : STRATA_OK;
    if (rc)
      return strata__error_prefix(rc, "%s: ", files[i].what ? files[i].what : "output");
  }
  return STRATA_OK;
}
