/* SPDX-License-Identifier: MIT */
/* data.c — training data: byte-level text with a train/validation split, a synthetic shapes task, batch sampling. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <strata/data.h>

#include "core/file.h"
#include "core/core.h"

/* Where the default text corpus comes from (Debian and its derivatives ship it). */
#define STRATA__CORPUS_DIR "/usr/share/common-licenses"

/* The smallest split: one window of context 1 needs 2 bytes. */
#define STRATA__MIN_SPLIT_BYTES 2

struct strata_dataset {
  int kind;
  char *source;              /* what the data is, whole (owned; strata_dataset_info lends it) */
  /* text: the whole corpus; tokens [0, train_len) train, [train_len, text_len) validation; a token is a byte of
  ** `text` (width 1), or the little-endian uint16 (width 2) or uint32 (width 4) at byte width * i */
  uint8_t *text;
  size_t text_len, train_len;
  int width;
  int64_t vocab;            /* 256, or the vocabulary a token file was checked against */
  double entropy;
  /* images: count images of size*size floats each; [0, train_count) train, the rest validation. Above
  ** STRATA__IMAGES_KEPT pixels a side (high-resolution CNNs) `pixels` is NULL and each image is drawn when sampled,
  ** from `seed`, standardised by `mean` and `inv` */
  float *pixels;
  int32_t *labels;
  int64_t count, size, classes, train_count;
  uint64_t seed;
  double mean, inv;
};

/* The dataset's description, whole, however long its paths (the last error says when memory runs out). */
static int set_source(struct strata_dataset *ds, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int set_source(struct strata_dataset *ds, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *text = strata__vformat(fmt, ap);
  va_end(ap);
  if (!text)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory describing a dataset");
  free(ds->source);
  ds->source = text;
  return STRATA_OK;
}

/* ---------------------------------------------------------------- random numbers */

/*
** The sampling generator is xorshift64* (Vigna, "An experimental exploration
** of Marsaglia's xorshift generators, scrambled", 2016): shifts 12, 25, 27
** on the 64-bit state, output multiplied by 0x2545F4914F6CDD1D. A state of 0
** is a fixed point of xorshift, so it is first replaced by a fixed non-zero
** constant; a caller may therefore start from any value, including 0.
*/
static uint64_t strata__xorshift64s(uint64_t *state) {
  uint64_t x = *state;
  if (x == 0)
    x = 0x9E3779B97F4A7C15ull;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *state = x;
  return x * 0x2545F4914F6CDD1Dull;
}

/*
** A uniform integer in [0, n) for n >= 1, without modulo bias (Lemire's
** multiply-and-reject, "Fast random integer generation in an interval", 2019).
*/
static uint64_t strata__uniform_below(uint64_t *state, uint64_t n) {
  uint64_t x = strata__xorshift64s(state);
  unsigned __int128 m = (unsigned __int128)x * n;
  uint64_t low = (uint64_t)m;
  if (low < n) {
    uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      x = strata__xorshift64s(state);
      m = (unsigned __int128)x * n;
      low = (uint64_t)m;
    }
  }
  return (uint64_t)(m >> 64);
}

/* splitmix64 (Steele, Lea, Flood 2014): turns (seed, index) into well-mixed, independent generator states. */
static uint64_t strata__splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/* A uniform integer in [lo, hi]; hi < lo gives lo. */
static int64_t strata__rand_int(uint64_t *state, int64_t lo, int64_t hi) {
  if (hi <= lo)
    return lo;
  return lo + (int64_t)strata__uniform_below(state, (uint64_t)(hi - lo + 1));
}

/* A uniform double in [0, 1) from the top 53 bits. */
static double strata__rand_unit(uint64_t *state) {
  return (double)(strata__xorshift64s(state) >> 11) * (1.0 / 9007199254740992.0);
}

/* A standard normal deviate (Box–Muller; one of the pair is dropped for simplicity). */
static double strata__rand_normal(uint64_t *state) {
  double u1 = strata__rand_unit(state);
  double u2 = strata__rand_unit(state);
  return sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
}

/* ---------------------------------------------------------------- text */

/*
** Append the whole content of `path` to *buf (length *len, capacity *cap),
** growing it with realloc. Returns STRATA_OK, STRATA_ERR_IO naming the path
** (missing, unreadable, not a regular file: a FIFO is refused without
** blocking) or STRATA_ERR_NOMEM. On failure
** *buf stays valid (possibly moved) and owned by the caller.
*/
static int strata__append_file(const char *path, uint8_t **buf, size_t *len, size_t *cap) {
  FILE *f = NULL;
  TRY(strata__fopen_input(path, STRATA_ERR_IO, &f));
  for (;;) {
    if (*cap - *len < 65536) {
      size_t grow = *cap < 65536 ? 65536 : *cap;
      if (*cap > SIZE_MAX / 2 - 65536) {
        fclose(f);
        return strata__error(STRATA_ERR_NOMEM, "%s: file too large to hold in memory", path);
      }
      uint8_t *nb = realloc(*buf, *cap + grow);
      if (!nb) {
        fclose(f);
        return strata__error(STRATA_ERR_NOMEM, "%s: out of host memory reading the file", path);
      }
      *buf = nb;
      *cap += grow;
    }
    size_t got = fread(*buf + *len, 1, *cap - *len, f);
    *len += got;
    if (got == 0) {
      int bad = ferror(f);
      int err = errno;
      fclose(f);
      if (bad)
        return strata__error(STRATA_ERR_IO, "%s: read error: %s", path, strerror(err));
      return STRATA_OK;
    }
  }
}

static int strata__cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
** Load the default corpus: every regular file directly in
** STRATA__CORPUS_DIR (symbolic links such as GPL -> GPL-3 are skipped so
** no text is counted twice), in strcmp order of their names, concatenated.
** STRATA_ERR_NOT_FOUND when the folder is missing or holds no such file.
** On success *buf (malloc'd, owned by the caller) holds *len bytes and
** *nfiles counts the files.
*/
static int strata__load_default_corpus(uint8_t **buf, size_t *len, size_t *nfiles) {
  *buf = NULL;
  *len = 0;
  *nfiles = 0;
  DIR *dir = opendir(STRATA__CORPUS_DIR);
  if (!dir)
    return strata__error(STRATA_ERR_NOT_FOUND,
                         "no default text corpus: %s cannot be opened (%s); pass a text file instead",
                         STRATA__CORPUS_DIR, strerror(errno));
  char **names = NULL;
  size_t n = 0, ncap = 0;
  int rc = STRATA_OK;
  char full[4096];
  struct dirent *de;
  while ((de = readdir(dir)) != NULL) {
    if (de->d_name[0] == '.')
      continue;
    int w = snprintf(full, sizeof full, "%s/%s", STRATA__CORPUS_DIR, de->d_name);
    struct stat sb;
    if (w < 0 || (size_t)w >= sizeof full || lstat(full, &sb) != 0 || !S_ISREG(sb.st_mode))
      continue;
    if (n == ncap) {
      size_t nc = ncap ? 2 * ncap : 32;
      char **nn = realloc(names, nc * sizeof *nn);
      if (!nn) {
        rc = strata__error(STRATA_ERR_NOMEM, "out of host memory listing %s", STRATA__CORPUS_DIR);
        goto done;
      }
      names = nn;
      ncap = nc;
    }
    names[n] = strdup(de->d_name);
    if (!names[n]) {
      rc = strata__error(STRATA_ERR_NOMEM, "out of host memory listing %s", STRATA__CORPUS_DIR);
      goto done;
    }
    n++;
  }
  if (n == 0) {
    rc = strata__error(STRATA_ERR_NOT_FOUND, "no default text corpus: %s holds no regular file; pass a text file instead",
                       STRATA__CORPUS_DIR);
    goto done;
  }
  qsort(names, n, sizeof *names, strata__cmp_names);
  size_t cap = 0;
  for (size_t i = 0; i < n && rc == STRATA_OK; i++) {
    snprintf(full, sizeof full, "%s/%s", STRATA__CORPUS_DIR, names[i]);
    rc = strata__append_file(full, buf, len, &cap);
  }
  *nfiles = n;
done:
  closedir(dir);
  for (size_t i = 0; i < n; i++)
    free(names[i]);
  free(names);
  if (rc) {
    free(*buf);
    *buf = NULL;
    *len = 0;
  }
  return rc;
}

/* Entropy of the byte distribution of x[0..n), in nats: -sum p ln p over the bytes that occur. */
static double strata__unigram_entropy(const uint8_t *x, size_t n) {
  uint64_t counts[256] = {0};
  for (size_t i = 0; i < n; i++)
    counts[x[i]]++;
  double h = 0;
  for (int b = 0; b < 256; b++) {
    if (counts[b]) {
      double p = (double)counts[b] / (double)n;
      h -= p * log(p);
    }
  }
  return h;
}

/* Token i of a text dataset. */
static inline uint32_t strata__token(const struct strata_dataset *ds, size_t i) {
  if (ds->width <= 1)
    return ds->text[i];
  const uint8_t *p = ds->text + (size_t)ds->width * i;
  if (ds->width == 2)
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Entropy of the token distribution of the first n tokens, in nats; `vocab` bounds the ids. */
static int strata__token_entropy(const struct strata_dataset *ds, size_t n, double *h) {
  uint64_t *counts = calloc((size_t)ds->vocab, sizeof *counts);
  if (!counts)
    return strata__error(STRATA_ERR_NOMEM, "%s: out of host memory counting tokens", ds->source);
  for (size_t i = 0; i < n; i++)
    counts[strata__token(ds, i)]++;
  *h = 0;
  for (int64_t t = 0; t < ds->vocab; t++)
    if (counts[t]) {
      double p = (double)counts[t] / (double)n;
      *h -= p * log(p);
    }
  free(counts);
  return STRATA_OK;
}

STRATA_API int strata_dataset_text(const char *path, double val_fraction, strata_dataset_t *out) {
  if (!out)
    return strata__error(STRATA_ERR_INVALID, "strata_dataset_text: out is NULL");
  *out = NULL;
  const char *name = path ? path : "default corpus (" STRATA__CORPUS_DIR ")";
  if (!(val_fraction > 0 && val_fraction < 1))
    return strata__error(STRATA_ERR_INVALID, "%s: validation fraction %g is outside (0, 1)", name, val_fraction);
  struct strata_dataset *ds = calloc(1, sizeof *ds);
  if (!ds)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory allocating a dataset");
  ds->kind = STRATA_DATA_TEXT;
  ds->vocab = 256;
  int rc;
  if (path) {
    size_t cap = 0;
    rc = strata__append_file(path, &ds->text, &ds->text_len, &cap);
    if (!rc)
      rc = set_source(ds, "%s", path);
  } else {
    size_t nfiles = 0;
    rc = strata__load_default_corpus(&ds->text, &ds->text_len, &nfiles);
    if (!rc)
      rc = set_source(ds, "default corpus (%s, %zu files)", STRATA__CORPUS_DIR, nfiles);
  }
  if (rc) {
    strata_dataset_free(ds);
    return rc;
  }
  if (ds->text_len == 0) {
    strata_dataset_free(ds);
    return strata__error(STRATA_ERR_INVALID, "%s: the file is empty", name);
  }
  /* The validation split is the last val_fraction of the bytes, rounded to the nearest byte. */
  double v = floor(val_fraction * (double)ds->text_len + 0.5);
  size_t val_len = (size_t)v;
  if (val_len < STRATA__MIN_SPLIT_BYTES || ds->text_len - val_len < STRATA__MIN_SPLIT_BYTES) {
    size_t total = ds->text_len;
    strata_dataset_free(ds);
    return strata__error(STRATA_ERR_INVALID,
                         "%s: too short: %zu bytes with validation fraction %g give %zu training and %zu validation "
                         "bytes; each split needs at least %d",
                         name, total, val_fraction, total - val_len, val_len, STRATA__MIN_SPLIT_BYTES);
  }
  ds->train_len = ds->text_len - val_len;
  ds->entropy = strata__unigram_entropy(ds->text, ds->train_len);
  /* Shrink the read buffer to what it holds; a failure just keeps the larger block. */
  uint8_t *shrunk = realloc(ds->text, ds->text_len);
  if (shrunk)
    ds->text = shrunk;
  *out = ds;
  return STRATA_OK;
}

/* ---------------------------------------------------------------- token files */

/* llm.c's token files (dev/data/data_common.py's HEADERS_INFO): 256 int32 of header (magic, version, token count,
** zeros), then the tokens: magic 20240520 version 1 for GPT-2's uint16 tokens, magic 20240801 version 7 for
** Llama 3's uint32 tokens. */
#define STRATA__LLMC_MAGIC 20240520
#define STRATA__LLMC_VERSION 1
#define STRATA__LLMC32_MAGIC 20240801
#define STRATA__LLMC32_VERSION 7
#define STRATA__LLMC_HEADER_BYTES 1024
/* How much of a file AUTO looks at for a NUL byte. */
#define STRATA__DETECT_BYTES 65536
/* The largest vocabulary a token file is checked against (strata's models allow as much). */
#define STRATA__MAX_VOCAB 1048576

static int32_t strata__le32(const uint8_t *p) {
  return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

/* The AUTO decision on the first `n` bytes of a file. */
static int strata__detect(const uint8_t *p, size_t n) {
  if (n >= 4 && (strata__le32(p) == STRATA__LLMC_MAGIC || strata__le32(p) == STRATA__LLMC32_MAGIC))
    return STRATA_TOKENS_LLMC;
  return memchr(p, 0, n < STRATA__DETECT_BYTES ? n : STRATA__DETECT_BYTES) ? STRATA_TOKENS_U16 : STRATA_TOKENS_BYTES;
}

STRATA_API int strata_token_format_detect(const char *path, int *format) {
  if (!path || !format)
    return strata__error(STRATA_ERR_INVALID, "strata_token_format_detect: NULL argument");
  FILE *f = NULL;
  TRY(strata__fopen_input(path, STRATA_ERR_IO, &f)); /* a FIFO is refused, not waited on */
  uint8_t *buf = malloc(STRATA__DETECT_BYTES);
  if (!buf) {
    fclose(f);
    return strata__error(STRATA_ERR_NOMEM, "out of host memory");
  }
  size_t n = fread(buf, 1, STRATA__DETECT_BYTES, f);
  int bad = ferror(f);
  fclose(f);
  if (!bad)
    *format = strata__detect(buf, n);
  free(buf);
  return bad ? strata__error(STRATA_ERR_IO, "%s: read error", path) : STRATA_OK;
}

static const char *strata__format_name(int format) {
  return format == STRATA_TOKENS_U16    ? "nanoGPT uint16 tokens"
         : format == STRATA_TOKENS_U32  ? "raw uint32 tokens"
         : format == STRATA_TOKENS_LLMC ? "llm.c tokens"
                                        : "bytes";
}

/*
** Check the raw bytes of a token file of `format` (U16, U32 or LLMC) and
** leave only the tokens at the start of ds->text, ds->width bytes each,
** ds->text_len counting tokens; *header receives the bytes before the first
** token in the file (1024 for llm.c, else 0). Messages name the file.
*/
static int strata__tokens_unwrap(struct strata_dataset *ds, const char *path, int format, size_t *header) {
  size_t bytes = ds->text_len;
  int width = format == STRATA_TOKENS_U32 ? 4 : 2;
  *header = 0;
  if (format == STRATA_TOKENS_LLMC) {
    if (bytes < STRATA__LLMC_HEADER_BYTES)
      return strata__error(STRATA_ERR_PARSE, "%s: %zu bytes, shorter than the %d-byte llm.c header (truncated?)", path,
                           bytes, STRATA__LLMC_HEADER_BYTES);
    int32_t magic = strata__le32(ds->text), version = strata__le32(ds->text + 4), count = strata__le32(ds->text + 8);
    if (magic != STRATA__LLMC_MAGIC && magic != STRATA__LLMC32_MAGIC)
      return strata__error(STRATA_ERR_PARSE, "%s: wrong magic %d; an llm.c token file starts with %d (uint16 tokens) "
                           "or %d (uint32 tokens)", path, (int)magic, STRATA__LLMC_MAGIC, STRATA__LLMC32_MAGIC);
    const int want = magic == STRATA__LLMC_MAGIC ? STRATA__LLMC_VERSION : STRATA__LLMC32_VERSION;
    if (version != want)
      return strata__error(STRATA_ERR_UNSUPPORTED, "%s: llm.c header magic %d with version %d; strata reads magic %d "
                           "version %d (uint16 tokens) and magic %d version %d (uint32 tokens)", path, (int)magic,
                           (int)version, STRATA__LLMC_MAGIC, STRATA__LLMC_VERSION, STRATA__LLMC32_MAGIC,
                           STRATA__LLMC32_VERSION);
    width = magic == STRATA__LLMC_MAGIC ? 2 : 4;
    size_t have = bytes - STRATA__LLMC_HEADER_BYTES;
    if (count < 0 || (uint64_t)count * (uint64_t)width != have)
      return strata__error(STRATA_ERR_PARSE,
                           "%s: the llm.c header says %d tokens (%llu bytes), the file holds %zu bytes after it%s",
                           path, (int)count, (unsigned long long)((uint64_t)(count < 0 ? 0 : count) * (uint64_t)width),
                           have, (uint64_t)(count < 0 ? 0 : count) * (uint64_t)width > have ? " (truncated?)" : "");
    memmove(ds->text, ds->text + STRATA__LLMC_HEADER_BYTES, have);
    bytes = have;
    *header = STRATA__LLMC_HEADER_BYTES;
  } else if (bytes % (size_t)width) {
    return strata__error(STRATA_ERR_PARSE, "%s: %zu bytes, %s; uint%d tokens take %d bytes each (truncated, or not a "
                         "token file?)", path, bytes, width == 2 ? "an odd count" : "not a multiple of 4", 8 * width,
                         width);
  }
  ds->width = width;
  ds->text_len = bytes / (size_t)width;
  return STRATA_OK;
}

/*
** Read token file `path` of `format` into ds->text (bytes, or uint16 or
** uint32 as ds->width says), ds->text_len counting tokens, every id checked
** below ds->vocab (the message gives its position and its byte offset in the file).
** *used receives the format read (AUTO resolved). On failure ds holds what
** was read, for the caller to free.
*/
static int strata__tokens_read(struct strata_dataset *ds, const char *path, int format, int *used) {
  size_t cap = 0, header = 0;
  ds->width = 1;
  int rc = strata__append_file(path, &ds->text, &ds->text_len, &cap);
  if (!rc && ds->text_len == 0)
    rc = strata__error(STRATA_ERR_INVALID, "%s: the file is empty", path);
  if (!rc && format == STRATA_TOKENS_AUTO)
    format = strata__detect(ds->text, ds->text_len);
  if (!rc && format != STRATA_TOKENS_BYTES)
    rc = strata__tokens_unwrap(ds, path, format, &header);
  if (!rc && ds->text_len == 0)
    rc = strata__error(STRATA_ERR_INVALID, "%s: the file holds no tokens", path);
  for (size_t i = 0; i < ds->text_len && !rc; i++) {
    uint32_t t = strata__token(ds, i);
    if (t >= (uint64_t)ds->vocab)
      rc = strata__error(STRATA_ERR_RANGE, "%s: token %u at position %zu (byte offset %llu) is not below the model's "
                         "vocabulary of %lld", path, (unsigned)t, i,
                         (unsigned long long)(header + (uint64_t)i * (uint64_t)ds->width), (long long)ds->vocab);
  }
  *used = format;
  return rc;
}

/* The arguments every token-file constructor checks. */
static int strata__tokens_args(const char *path, int format, int64_t vocab, strata_dataset_t *out) {
  if (!out)
    return strata__error(STRATA_ERR_INVALID, "strata_dataset_tokens: out is NULL");
  *out = NULL;
  if (!path)
    return strata__error(STRATA_ERR_INVALID, "strata_dataset_tokens: path is NULL");
  if (format < STRATA_TOKENS_AUTO || format > STRATA_TOKENS_U32)
    return strata__error(STRATA_ERR_INVALID, "strata_dataset_tokens: unknown format %d", format);
  if (vocab < 2 || vocab > STRATA__MAX_VOCAB)
    return strata__error(STRATA_ERR_INVALID, "%s: vocabulary %lld outside 2..%d", path, (long long)vocab,
                         STRATA__MAX_VOCAB);
  return STRATA_OK;
}

/* Finish a token dataset whose splits are set: entropy of the training tokens, memory trimmed. */
static int strata__tokens_finish(struct strata_dataset *ds, strata_dataset_t *out) {
  int rc = strata__token_entropy(ds, ds->train_len, &ds->entropy);
  if (rc) {
    strata_dataset_free(ds);
    return rc;
  }
  uint8_t *shrunk = realloc(ds->text, ds->text_len * (size_t)ds->width);
  if (shrunk)
    ds->text = shrunk;
  *out = ds;
  return STRATA_OK;
}

STRATA_API int strata_dataset_tokens(const char *path, int format, int64_t vocab, double val_fraction,
                                     strata_dataset_t *out) {
  TRY(strata__tokens_args(path, format, vocab, out));
  if (!(val_fraction > 0 && val_fraction < 1))
    return strata__error(STRATA_ERR_INVALID, "%s: validation fraction %g is outside (0, 1)", path, val_fraction);
  struct strata_dataset *ds = calloc(1, sizeof *ds);
  if (!ds)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory allocating a dataset");
  ds->kind = STRATA_DATA_TEXT;
  ds->vocab = vocab;
  int used = format;
  int rc = strata__tokens_read(ds, path, format, &used);
  size_t val_len = 0;
  if (!rc) {
    val_len = (size_t)floor(val_fraction * (double)ds->text_len + 0.5);
    if (val_len < STRATA__MIN_SPLIT_BYTES || ds->text_len - val_len < STRATA__MIN_SPLIT_BYTES)
      rc = strata__error(STRATA_ERR_INVALID,
                         "%s: too short: %zu tokens with validation fraction %g give %zu training and %zu validation "
                         "tokens; each split needs at least %d",
                         path, ds->text_len, val_fraction, ds->text_len - val_len, val_len, STRATA__MIN_SPLIT_BYTES);
  }
  if (rc) {
    strata_dataset_free(ds);
    return rc;
  }
  ds->train_len = ds->text_len - val_len;
  if (format == STRATA_TOKENS_AUTO && used == STRATA_TOKENS_BYTES)
    /* the one guess that can be wrong: uint16 ids none of whose bytes is 0 look like text */
    rc = set_source(ds, "%s (bytes, by content: no NUL byte in its first %d KiB; --data-format nanogpt reads uint16 "
                    "ids)", path, STRATA__DETECT_BYTES / 1024);
  else
    rc = set_source(ds, "%s (%s)", path, strata__format_name(used));
  if (rc == STRATA_OK)
    strata__log(STRATA_LOG_INFO, "data", "%s", ds->source);
  if (rc != STRATA_OK) {
    strata_dataset_free(ds);
    return rc;
  }
  return strata__tokens_finish(ds, out);
}

/* Make a dataset's tokens `width` bytes each (in place, growing the buffer); never narrower. */
static int strata__widen(struct strata_dataset *ds, int width) {
  if (ds->width >= width)
    return STRATA_OK;
  uint8_t *w = realloc(ds->text, (size_t)width * ds->text_len + 1);
  if (!w)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory reading tokens");
  ds->text = w;
  for (size_t i = ds->text_len; i-- > 0;) {
    uint32_t v = strata__token(ds, i);
    for (int b = 0; b < width; b++)
      w[(size_t)width * i + (size_t)b] = (uint8_t)(v >> (8 * b));
  }
  ds->width = width;
  return STRATA_OK;
}

STRATA_API int strata_dataset_tokens_split(const char *train_path, const char *val_path, int format, int64_t vocab,
                                           strata_dataset_t *out) {
  TRY(strata__tokens_args(train_path, format, vocab, out));
  if (!val_path)
    return strata__error(STRATA_ERR_INVALID, "strata_dataset_tokens_split: val_path is NULL");
  struct strata_dataset *ds = calloc(1, sizeof *ds), *val = calloc(1, sizeof *val);
  if (!ds || !val) {
    free(ds);
    free(val);
    return strata__error(STRATA_ERR_NOMEM, "out of host memory allocating a dataset");
  }
  ds->kind = val->kind = STRATA_DATA_TEXT;
  ds->vocab = val->vocab = vocab;
  int f1 = format, f2 = format;
  int rc = strata__tokens_read(ds, train_path, format, &f1);
  if (!rc)
    rc = strata__tokens_read(val, val_path, format, &f2);
  const char *which = ds->text_len < STRATA__MIN_SPLIT_BYTES ? train_path : val_path;
  if (!rc && (ds->text_len < STRATA__MIN_SPLIT_BYTES || val->text_len < STRATA__MIN_SPLIT_BYTES))
    rc = strata__error(STRATA_ERR_INVALID, "%s: too short: a split needs at least %d tokens", which,
                       STRATA__MIN_SPLIT_BYTES);
  const int guessed_apart = (f1 == STRATA_TOKENS_BYTES && f2 == STRATA_TOKENS_U16) ||
                            (f1 == STRATA_TOKENS_U16 && f2 == STRATA_TOKENS_BYTES);
  if (!rc && format == STRATA_TOKENS_AUTO && guessed_apart) {
    /* both guessed by a NUL byte, one with and one without: uint16 ids none of whose bytes is 0, or text beside raw
    ** ids; the content does not tell (an llm.c file is known by its magic, and goes with text) */
    const int bytes_first = f1 == STRATA_TOKENS_BYTES;
    rc = strata__error(STRATA_ERR_PARSE, "%s reads as %s but %s as bytes (no NUL byte in its first %d KiB): the "
                       "content does not tell; name the format (strata-train --data-format nanogpt or text)",
                       bytes_first ? val_path : train_path, strata__format_name(STRATA_TOKENS_U16),
                       bytes_first ? train_path : val_path, STRATA__DETECT_BYTES / 1024);
  }
  /* one buffer, the training tokens then the validation ones, both as wide as the wider */
  const int wider = ds->width > val->width ? ds->width : val->width;
  if (!rc)
    rc = strata__widen(ds, wider);
  if (!rc)
    rc = strata__widen(val, wider);
  size_t width = (size_t)wider;
  if (!rc) {
    uint8_t *all = realloc(ds->text, (ds->text_len + val->text_len) * width);
    if (!all)
      rc = strata__error(STRATA_ERR_NOMEM, "out of host memory reading %s", val_path);
    else {
      ds->text = all;
      memcpy(all + ds->text_len * width, val->text, val->text_len * width);
      ds->train_len = ds->text_len;
      ds->text_len += val->text_len;
    }
  }
  strata_dataset_free(val);
  if (rc) {
    strata_dataset_free(ds);
    return rc;
  }
  if (f1 == f2)
    rc = set_source(ds, "%s + %s (%s)", train_path, val_path, strata__format_name(f1));
  else
    rc = set_source(ds, "%s (%s) + %s (%s)", train_path, strata__format_name(f1), val_path, strata__format_name(f2));
  if (!rc)
    strata__log(STRATA_LOG_INFO, "data", "%s", ds->source);
  if (rc) {
    strata_dataset_free(ds);
    return rc;
  }
  return strata__tokens_finish(ds, out);
}

/* ---------------------------------------------------------------- images */

/* Set pixel (x, y) of an s*s canvas to 1 when it lies inside. */
static void strata__plot(float *img, int64_t s, int64_t x, int64_t y) {
  if (x >= 0 && y >= 0 && x < s && y < s)
    img[y * s + x] = 1.0f;
}

/* Fill the rectangle [x0, x0+w) x [y0, y0+h) of an s*s canvas with 1. */
static void strata__fill_rect(float *img, int64_t s, int64_t x0, int64_t y0, int64_t w, int64_t h) {
  for (int64_t y = y0; y < y0 + h; y++)
    for (int64_t x = x0; x < x0 + w; x++)
      strata__plot(img, s, x, y);
}

/*
** Where a shape of `extent` pixels starts along one axis of an s-pixel
** canvas: centred, moved by a uniform jitter of up to s/8 pixels (at least
** 1) either way, and clamped so the shape stays whole. A bounded jitter
** keeps the task learnable by small models while no two images align.
*/
static int64_t strata__place(uint64_t *rng, int64_t s, int64_t extent) {
  int64_t jitter = s / 8 > 1 ? s / 8 : 1;
  int64_t at = (s - extent) / 2 + strata__rand_int(rng, -jitter, jitter);
  if (at > s - extent)
    at = s - extent;
  return at < 0 ? 0 : at;
}

/*
** Draw shape `cls` as a 0/1 mask on the s*s canvas `img` (zeroed by the
** caller), with size and placement (strata__place) drawn from *rng. Every
** shape fits the canvas whole. Classes, in order:
**   0 horizontal bar, 1 vertical bar, 2 hollow square, 3 filled square,
**   4 cross (plus sign), 5 diagonal (top-left to bottom-right),
**   6 anti-diagonal, 7 ring.
** Sizes are fractions of s, with floors so that the shapes stay distinct
** at s = 8.
*/
static void strata__draw_shape(float *img, int64_t s, int cls, uint64_t *rng) {
  int64_t t = strata__rand_int(rng, 1, 1 + s / 16); /* stroke width */
  switch (cls) {
  case 0:
  case 1: { /* bars */
    int64_t len = strata__rand_int(rng, s / 2, s - 2);
    int64_t a = strata__place(rng, s, len), b = strata__place(rng, s, t);
    if (cls == 0)
      strata__fill_rect(img, s, a, b, len, t);
    else
      strata__fill_rect(img, s, b, a, t, len);
    break;
  }
  case 2: { /* hollow square */
    int64_t lo = s / 3 > 4 ? s / 3 : 4, hi = s * 3 / 4 > lo ? s * 3 / 4 : lo;
    int64_t side = strata__rand_int(rng, lo, hi);
    int64_t w = side >= 4 * t + 2 ? t : 1;
    int64_t x0 = strata__place(rng, s, side), y0 = strata__place(rng, s, side);
    strata__fill_rect(img, s, x0, y0, side, w);
    strata__fill_rect(img, s, x0, y0 + side - w, side, w);
    strata__fill_rect(img, s, x0, y0, w, side);
    strata__fill_rect(img, s, x0 + side - w, y0, w, side);
    break;
  }
  case 3: { /* filled square */
    int64_t lo = s / 4 > 3 ? s / 4 : 3, hi = s / 2 > lo ? s / 2 : lo;
    int64_t side = strata__rand_int(rng, lo, hi);
    int64_t x0 = strata__place(rng, s, side), y0 = strata__place(rng, s, side);
    strata__fill_rect(img, s, x0, y0, side, side);
    break;
  }
  case 4: { /* cross: two strokes of width t through a centre, arms of length arm */
    int64_t lo = s / 6 > 2 ? s / 6 : 2, hi = s / 3 > lo ? s / 3 : lo;
    int64_t arm = strata__rand_int(rng, lo, hi);
    int64_t cx = arm + strata__place(rng, s, 2 * arm + t);
    int64_t cy = arm + strata__place(rng, s, 2 * arm + t);
    strata__fill_rect(img, s, cx - arm, cy, 2 * arm + t, t);
    strata__fill_rect(img, s, cx, cy - arm, t, 2 * arm + t);
    break;
  }
  case 5:
  case 6: { /* diagonals of width t (measured along x) */
    int64_t len = strata__rand_int(rng, s / 2, s - t);
    int64_t x0 = strata__place(rng, s, len + t - 1), y0 = strata__place(rng, s, len);
    for (int64_t k = 0; k < len; k++)
      for (int64_t d = 0; d < t; d++)
        strata__plot(img, s, (cls == 5 ? x0 + k : x0 + len - 1 - k) + d, y0 + k);
    break;
  }
  default: { /* ring: pixels whose centre lies within half a stroke of the circle */
    double lo = s / 6.0 > 2 ? s / 6.0 : 2, hi = s * 3.0 / 8.0 > lo ? s * 3.0 / 8.0 : lo;
    double r = lo + (hi - lo) * strata__rand_unit(rng);
    int64_t reach = (int64_t)ceil(r + 0.5 * (double)t);
    double cx = (double)(reach + strata__place(rng, s, 2 * reach + 1));
    double cy = (double)(reach + strata__place(rng, s, 2 * reach + 1));
    double half = 0.5 * (double)t + 0.15;
    for (int64_t y = 0; y < s; y++)
      for (int64_t x = 0; x < s; x++) {
        double d = hypot((double)x - cx, (double)y - cy);
        if (fabs(d - r) <= half)
          img[y * s + x] = 1.0f;
      }
    break;
  }
  }
}

/*
** Labels for images [first, first+n): each class occurs n/classes or one
** more times, in an order shuffled by *rng (Fisher–Yates). Balancing each
** split separately keeps the validation split balanced too.
*/
static void strata__balanced_labels(int32_t *labels, int64_t n, int64_t classes, uint64_t *rng) {
  for (int64_t i = 0; i < n; i++)
    labels[i] = (int32_t)(i % classes);
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)strata__uniform_below(rng, (uint64_t)i + 1);
    int32_t tmp = labels[i];
    labels[i] = labels[j];
    labels[j] = tmp;
  }
}

/* Noise and intensity of the shapes task (before standardisation). */
#define STRATA__SHAPE_NOISE 0.35   /* standard deviation of the additive Gaussian noise */
#define STRATA__SHAPE_AMP_LO 0.6   /* a shape's intensity is uniform in [LO, HI] */
#define STRATA__SHAPE_AMP_HI 1.4

/* Images up to this size a side are drawn once and kept; larger ones are drawn when sampled. */
#define STRATA__IMAGES_KEPT 64
/* Images a lazily drawn dataset's standardisation is measured on (the first of its training split). */
#define STRATA__IMAGES_STATS 32

/* Draw image i of the dataset (before standardisation) on its size x size canvas (zeroed here). */
static void strata__draw_image(const struct strata_dataset *ds, int64_t i, float *img) {
  const int64_t size = ds->size;
  const uint64_t npix = (uint64_t)(size * size);
  memset(img, 0, npix * sizeof *img);
  uint64_t r = strata__splitmix64(ds->seed ^ strata__splitmix64((uint64_t)i + 1));
  strata__draw_shape(img, size, ds->labels[i], &r);
  double amp = STRATA__SHAPE_AMP_LO + (STRATA__SHAPE_AMP_HI - STRATA__SHAPE_AMP_LO) * strata__rand_unit(&r);
  for (uint64_t p = 0; p < npix; p++)
    img[p] = (float)(amp * img[p] + STRATA__SHAPE_NOISE * strata__rand_normal(&r));
}

STRATA_API int strata_dataset_images(int64_t count, int64_t size, int64_t classes, uint64_t seed,
                                     strata_dataset_t *out) {
  if (!out)
    return strata__error(STRATA_ERR_INVALID, "strata_dataset_images: out is NULL");
  *out = NULL;
  if (count < 10)
    return strata__error(STRATA_ERR_INVALID, "synthetic shapes: %lld images requested, need at least 10",
                         (long long)count);
  if (size < 8 || size > 1024)
    return strata__error(STRATA_ERR_INVALID, "synthetic shapes: image size %lld is outside 8..1024", (long long)size);
  if (classes < 2 || classes > 8)
    return strata__error(STRATA_ERR_INVALID, "synthetic shapes: %lld classes requested, supported 2..8",
                         (long long)classes);
  const int lazy = size > STRATA__IMAGES_KEPT;
  uint64_t npix = (uint64_t)(size * size), total;
  if (!strata__mul_ok(lazy ? 1 : (uint64_t)count, npix, &total) || total > SIZE_MAX / sizeof(float))
    return strata__error(STRATA_ERR_NOMEM, "synthetic shapes: %lld images of %lldx%lld do not fit in memory",
                         (long long)count, (long long)size, (long long)size);
  struct strata_dataset *ds = calloc(1, sizeof *ds);
  if (!ds)
    return strata__error(STRATA_ERR_NOMEM, "out of host memory allocating a dataset");
  ds->kind = STRATA_DATA_IMAGES;
  ds->count = count;
  ds->size = size;
  ds->classes = classes;
  ds->seed = seed;
  ds->train_count = count - count / 10;
  ds->pixels = calloc((size_t)total, sizeof(float)); /* lazy: one image, the statistics' canvas */
  ds->labels = malloc((size_t)count * sizeof(int32_t));
  if (!ds->pixels || !ds->labels) {
    strata_dataset_free(ds);
    return strata__error(STRATA_ERR_NOMEM, "synthetic shapes: out of host memory for %lld images of %lldx%lld",
                         (long long)count, (long long)size, (long long)size);
  }
  if (set_source(ds, "synthetic shapes (%lld classes, %lldx%lld, seed %llu)", (long long)classes, (long long)size,
                 (long long)size, (unsigned long long)seed)) {
    strata_dataset_free(ds);
    return STRATA_ERR_NOMEM;
  }

  uint64_t rng = strata__splitmix64(seed);
  strata__balanced_labels(ds->labels, ds->train_count, classes, &rng);
  strata__balanced_labels(ds->labels + ds->train_count, count - ds->train_count, classes, &rng);

  /* Each image has its own generator from (seed, index), so an image does not depend on `count`. Standardise with
  ** the training split's mean and standard deviation (lazily drawn: its first images'), so pixels are about
  ** zero-mean, unit-scale. */
  const int64_t measured = lazy ? (ds->train_count < STRATA__IMAGES_STATS ? ds->train_count : STRATA__IMAGES_STATS)
                                : ds->train_count;
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < (lazy ? measured : count); i++) {
    float *img = ds->pixels + (lazy ? 0 : (size_t)i * npix);
    strata__draw_image(ds, i, img);
    for (uint64_t p = 0; lazy && p < npix; p++) {
      sum += img[p];
      sq += (double)img[p] * img[p];
    }
  }
  uint64_t ntrain = (uint64_t)measured * npix;
  for (uint64_t p = 0; !lazy && p < ntrain; p++) {
    sum += ds->pixels[p];
    sq += (double)ds->pixels[p] * ds->pixels[p];
  }
  double mean = sum / (double)ntrain;
  double var = sq / (double)ntrain - mean * mean;
  double inv = var > 1e-12 ? 1.0 / sqrt(var) : 1.0;
  ds->mean = mean;
  ds->inv = inv;
  for (uint64_t p = 0; !lazy && p < total; p++)
    ds->pixels[p] = (float)((ds->pixels[p] - mean) * inv);
  *out = ds;
  return STRATA_OK;
}

/* ---------------------------------------------------------------- common */

STRATA_API void strata_dataset_free(strata_dataset_t ds) {
  if (!ds)
    return;
  free(ds->source);
  free(ds->text);
  free(ds->pixels);
  free(ds->labels);
  free(ds);
}

STRATA_API int strata_dataset_info(strata_dataset_t ds, struct strata_dataset_info *info) {
  if (!ds || !info)
    return strata__error(STRATA_ERR_INVALID, "strata_dataset_info: NULL argument");
  memset(info, 0, sizeof *info);
  info->kind = ds->kind;
  info->source = ds->source;
  if (ds->kind == STRATA_DATA_TEXT) {
    info->train_size = ds->train_len;
    info->val_size = ds->text_len - ds->train_len;
    info->vocab = ds->vocab;
    info->unigram_entropy = ds->entropy;
  } else {
    info->train_size = (uint64_t)ds->train_count;
    info->val_size = (uint64_t)(ds->count - ds->train_count);
    info->vocab = ds->classes;
    info->image = ds->size;
    info->channels = 1;
  }
  return STRATA_OK;
}

/* Images [from, to) of a batch drawn now (each from its own seed: any order, any thread gives the same pixels). */
struct strata__draw_part {
  const struct strata_dataset *ds;
  const int64_t *index;
  float *in;
  int64_t from, to;
};

static void *strata__draw_part_run(void *arg) {
  const struct strata__draw_part *w = arg;
  const uint64_t npix = (uint64_t)(w->ds->size * w->ds->size);
  for (int64_t b = w->from; b < w->to; b++) {
    float *img = w->in + (size_t)b * npix;
    strata__draw_image(w->ds, w->index[b], img); /* standardised as the kept ones are */
    for (uint64_t p = 0; p < npix; p++)
      img[p] = (float)((img[p] - w->ds->mean) * w->ds->inv);
  }
  return NULL;
}

/* The parts of a batch drawn at once, at most: a 512 x 512 image takes milliseconds, serial before every step. */
#define STRATA__DRAW_THREADS 8

/*
** Draw the batch's large images (index[b] for place b) into `in`, on up to
** one thread per online CPU (STRATA__DRAW_THREADS at most), the caller's
** included; a thread that cannot start leaves its part to the caller. The
** pixels are the same however many threads draw them.
*/
static void strata__draw_batch(const struct strata_dataset *ds, const int64_t *index, int64_t batch, float *in) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int64_t parts = batch < STRATA__DRAW_THREADS ? batch : STRATA__DRAW_THREADS;
  if (cpus > 0 && parts > cpus)
    parts = cpus;
  struct strata__draw_part w[STRATA__DRAW_THREADS];
  pthread_t th[STRATA__DRAW_THREADS];
  int started[STRATA__DRAW_THREADS] = {0};
  for (int64_t k = 0; k < parts; k++) {
    w[k] = (struct strata__draw_part){ds, index, in, batch * k / parts, batch * (k + 1) / parts};
    if (k > 0)
      started[k] = pthread_create(&th[k], NULL, strata__draw_part_run, &w[k]) == 0;
  }
  strata__draw_part_run(&w[0]);
  for (int64_t k = 1; k < parts; k++) {
    if (started[k])
      pthread_join(th[k], NULL);
    else
      strata__draw_part_run(&w[k]);
  }
}

/*
** Draw a batch (see data.h). Text: each window starts uniformly among the
** len - context valid positions of the split, so that the window and its
** next byte lie inside the split; a split shorter than context + 1 bytes is
** STRATA_ERR_INVALID. Images: `context` is ignored; each image is drawn
** uniformly from the split. Arguments are checked before *state moves, so
** a failed call leaves the stream where it was.
*/
STRATA_API int strata_dataset_sample(strata_dataset_t ds, int split, int64_t batch, int64_t context,
                                     uint64_t *state, void *inputs, int32_t *targets) {
  if (!ds || !state || !inputs || !targets)
    return strata__error(STRATA_ERR_INVALID, "strata_dataset_sample: NULL argument");
  if (split != STRATA_SPLIT_TRAIN && split != STRATA_SPLIT_VAL)
    return strata__error(STRATA_ERR_INVALID, "strata_dataset_sample: unknown split %d", split);
  if (batch < 1)
    return strata__error(STRATA_ERR_INVALID, "strata_dataset_sample: batch %lld < 1", (long long)batch);
  const char *sname = split == STRATA_SPLIT_TRAIN ? "training" : "validation";
  if (ds->kind == STRATA_DATA_TEXT) {
    size_t base = split == STRATA_SPLIT_TRAIN ? 0 : ds->train_len;
    uint64_t len = split == STRATA_SPLIT_TRAIN ? ds->train_len : ds->text_len - ds->train_len;
    if (context < 1)
      return strata__error(STRATA_ERR_INVALID, "strata_dataset_sample: context %lld < 1", (long long)context);
    if ((uint64_t)context >= len)
      return strata__error(STRATA_ERR_INVALID,
                           "%s: the %s split holds %llu %s, fewer than context %lld + 1; use a shorter context",
                           ds->source, sname, (unsigned long long)len, ds->width > 1 ? "tokens" : "bytes",
                           (long long)context);
    uint64_t cells;
    if (!strata__mul_ok((uint64_t)batch, (uint64_t)context, &cells) || cells > SIZE_MAX / sizeof(int32_t))
      return strata__error(STRATA_ERR_INVALID, "strata_dataset_sample: batch %lld x context %lld is too large",
                           (long long)batch, (long long)context);
    int32_t *in = inputs;
    uint64_t starts = len - (uint64_t)context;
    for (int64_t b = 0; b < batch; b++) {
      size_t w = base + (size_t)strata__uniform_below(state, starts);
      int32_t *ib = in + b * context, *tb = targets + b * context;
      if (ds->width <= 1) {
        for (int64_t k = 0; k < context; k++) {
          ib[k] = ds->text[w + (size_t)k];
          tb[k] = ds->text[w + (size_t)k + 1];
        }
      } else {
        for (int64_t k = 0; k < context; k++) {
          ib[k] = (int32_t)strata__token(ds, w + (size_t)k);
          tb[k] = (int32_t)strata__token(ds, w + (size_t)k + 1);
        }
      }
    }
    return STRATA_OK;
  }
  int64_t first = split == STRATA_SPLIT_TRAIN ? 0 : ds->train_count;
  int64_t n = split == STRATA_SPLIT_TRAIN ? ds->train_count : ds->count - ds->train_count;
  uint64_t npix = (uint64_t)(ds->size * ds->size), cells;
  if (!strata__mul_ok((uint64_t)batch, npix, &cells) || cells > SIZE_MAX / sizeof(float))
    return strata__error(STRATA_ERR_INVALID, "strata_dataset_sample: batch %lld of %lldx%lld images is too large",
                         (long long)batch, (long long)ds->size, (long long)ds->size);
  float *in = inputs;
  int64_t *drawn = NULL; /* the images to draw now, by batch place: drawn after the stream has moved */
  if (ds->size > STRATA__IMAGES_KEPT && !(drawn = malloc((size_t)batch * sizeof *drawn)))
    return strata__error(STRATA_ERR_NOMEM, "strata_dataset_sample: out of host memory for a batch of %lld",
                         (long long)batch);
  for (int64_t b = 0; b < batch; b++) {
    int64_t i = first + (int64_t)strata__uniform_below(state, (uint64_t)n);
    if (drawn)
      drawn[b] = i;
    else
      memcpy(in + (size_t)b * npix, ds->pixels + (size_t)i * npix, npix * sizeof(float));
    targets[b] = ds->labels[i];
  }
  if (drawn) {
    strata__draw_batch(ds, drawn, batch, in);
    free(drawn);
  }
  return STRATA_OK;
}
