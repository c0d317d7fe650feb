/* SPDX-License-Identifier: MIT */
/* checkpoint.c — safetensors files: float tensors (stored F32, BF16 or F16) by name plus string metadata, written
** atomically, read with checks. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <strata/checkpoint.h>

#include "core/bf16.h"
#include "core/file.h"
#include "core/core.h"

/*
** Layout (https://github.com/huggingface/safetensors): an 8-byte
** little-endian header length N, N bytes of JSON (padded here with spaces
** to a multiple of 8, so the data starts 8-byte aligned), then the data.
** Tensor data is stored as the host's fp32 bytes, or 16-bit words: strata
** only builds on little-endian machines, where those are the file's
** little-endian fp32, bf16 and fp16.
*/
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint.c writes host floats as little-endian fp32: port the byte swaps for a big-endian host"
#endif

#define STRATA__ST_METADATA "__metadata__"

/* ---------------------------------------------------------------- dtypes */

/* The safetensors name of a dtype strata reads and writes; NULL for a value outside the enum. */
static const char *st_dtype_name(enum strata_st_dtype dt) {
  switch (dt) {
  case STRATA_ST_F32: return "F32";
  case STRATA_ST_BF16: return "BF16";
  case STRATA_ST_F16: return "F16";
  }
  return NULL;
}

/* Bytes an element of `dt` takes in the file. */
static unsigned st_dtype_size(enum strata_st_dtype dt) { return dt == STRATA_ST_F32 ? 4 : 2; }

/*
** IEEE binary16 to float32, exactly: every half is a float. Normals move
** their exponent (bias 15 to 127); subnormals are their mantissa times
** 2^-24 (both exact in float32); infinities stay infinite and NaNs keep
** their payload in the top of the float's mantissa.
*/
static float st_f16_widen(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    u = sign | ((exp + 127 - 15) << 23) | (man << 13);
  } else {
    float v = (float)man * 0x1p-24f;
    return sign ? -v : v;
  }
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* ---------------------------------------------------------------- writing */

/* Number of elements of a tensor to write into *numel; STRATA_ERR_INVALID when a dimension is negative or the size
** overflows (4-byte elements counted, whatever the file's dtype). */
static int strata__st_elements(const char *path, const struct strata_st_tensor *t, uint64_t *numel) {
  uint64_t n = 1;
  for (int d = 0; d < t->ndim; d++) {
    if (t->shape[d] < 0)
      return strata__error(STRATA_ERR_INVALID, "%s: tensor '%s': dimension %d is negative (%lld)", path, t->name, d,
                           (long long)t->shape[d]);
    if (!strata__mul_ok(n, (uint64_t)t->shape[d], &n) || n > (uint64_t)INT64_MAX / 4)
      return strata__error(STRATA_ERR_INVALID, "%s: tensor '%s': shape too large", path, t->name);
  }
  *numel = n;
  return STRATA_OK;
}

/*
** Build the JSON header for `tensors` and `meta` into a malloc'd string
** padded with spaces to a multiple of 8 bytes (*len excludes the NUL), and
** check every argument on the way: names present, unique and not starting
** with "__", 0..4 dimensions, none negative, data present unless the tensor
** is empty, metadata keys and values present and keys unique. Every
** tensor is declared as `dt`. The caller frees *header_out.
*/
static int strata__st_header(const char *path, const struct strata_st_tensor *tensors, size_t count,
                             const struct strata_st_meta *meta, size_t meta_count, enum strata_st_dtype dt,
                             char **header_out, size_t *len) {
  *header_out = NULL;
  int rc = STRATA_OK;
  const uint64_t es = st_dtype_size(dt);
  json_t *root = json_object();
  if (!root)
    return strata__error(STRATA_ERR_NOMEM, "%s: out of host memory building the header", path);
  if (meta_count) {
    json_t *m = json_object();
    if (!m || json_object_set_new(root, STRATA__ST_METADATA, m)) {
      rc = strata__error(STRATA_ERR_NOMEM, "%s: out of host memory building the header", path);
      goto fail;
    }
    for (size_t i = 0; i < meta_count; i++) {
      if (!meta[i].key || !meta[i].value) {
        rc = strata__error(STRATA_ERR_INVALID, "%s: metadata entry %zu has a NULL key or value", path, i);
        goto fail;
      }
      if (json_object_get(m, meta[i].key)) {
        rc = strata__error(STRATA_ERR_INVALID, "%s: metadata key '%s' appears twice", path, meta[i].key);
        goto fail;
      }
      json_t *v = json_string(meta[i].value);
      if (!v) {
        rc = strata__error(STRATA_ERR_INVALID, "%s: metadata '%s' is not valid UTF-8 text", path, meta[i].key);
        goto fail;
      }
      if (json_object_set_new(m, meta[i].key, v)) {
        rc = strata__error(STRATA_ERR_INVALID, "%s: metadata key '%s' is not valid UTF-8 text", path, meta[i].key);
        goto fail;
      }
    }
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < count; i++) {
    const struct strata_st_tensor *t = &tensors[i];
    if (!t->name || !t->name[0]) {
      rc = strata__error(STRATA_ERR_INVALID, "%s: tensor %zu has no name", path, i);
      goto fail;
    }
    if (strncmp(t->name, "__", 2) == 0) {
      rc = strata__error(STRATA_ERR_INVALID, "%s: tensor name '%s' starts with \"__\" (reserved for metadata)", path,
                         t->name);
      goto fail;
    }
    if (json_object_get(root, t->name)) {
      rc = strata__error(STRATA_ERR_INVALID, "%s: tensor name '%s' appears twice", path, t->name);
      goto fail;
    }
    if (t->ndim < 0 || t->ndim > STRATA_ST_MAX_DIMS) {
      rc = strata__error(STRATA_ERR_INVALID, "%s: tensor '%s' has %d dimensions (supported 0..%d)", path, t->name,
                         t->ndim, STRATA_ST_MAX_DIMS);
      goto fail;
    }
    uint64_t numel = 0;
    rc = strata__st_elements(path, t, &numel);
    if (rc)
      goto fail;
    if (!t->data && numel) {
      rc = strata__error(STRATA_ERR_INVALID, "%s: tensor '%s' has NULL data", path, t->name);
      goto fail;
    }
    if (offset + numel * es > (uint64_t)INT64_MAX) {
      rc = strata__error(STRATA_ERR_INVALID, "%s: the tensors add up to more than 2^63 bytes", path);
      goto fail;
    }
    json_t *shape = json_array();
    json_t *offs = json_pack("[II]", (json_int_t)offset, (json_int_t)(offset + numel * es));
    json_t *entry = json_object();
    int bad = !shape || !offs || !entry;
    for (int d = 0; !bad && d < t->ndim; d++)
      bad = json_array_append_new(shape, json_integer((json_int_t)t->shape[d])) != 0;
    if (!bad)
      bad = json_object_set_new(entry, "dtype", json_string(st_dtype_name(dt))) || json_object_set(entry, "shape", shape) ||
            json_object_set(entry, "data_offsets", offs);
    json_decref(shape);
    json_decref(offs);
    if (bad) {
      json_decref(entry);
      rc = strata__error(STRATA_ERR_NOMEM, "%s: out of host memory building the header", path);
      goto fail;
    }
    if (json_object_set_new(root, t->name, entry)) {
      rc = strata__error(STRATA_ERR_INVALID, "%s: tensor name '%s' is not valid UTF-8 text", path, t->name);
      goto fail;
    }
    offset += numel * es;
  }
  char *text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
  if (!text) {
    rc = strata__error(STRATA_ERR_NOMEM, "%s: out of host memory serialising the header", path);
    goto fail;
  }
  size_t n = strlen(text), padded = (n + 7) / 8 * 8;
  char *header = realloc(text, padded + 1);
  if (!header) {
    free(text);
    rc = strata__error(STRATA_ERR_NOMEM, "%s: out of host memory serialising the header", path);
    goto fail;
  }
  memset(header + n, ' ', padded - n);
  header[padded] = '\0';
  *header_out = header;
  *len = padded;
fail:
  json_decref(root);
  return rc;
}

/* Write all `n` bytes of `p` to fd, resuming after short writes and EINTR; 0 or an errno value. */
static int strata__write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    size_t chunk = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
    ssize_t w = write(fd, c, chunk);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return errno;
    }
    c += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Write `n` floats to fd as bfloat16 words, rounded to the nearest even, through a small buffer; 0 or an errno value. */
static int strata__write_bf16(int fd, const float *x, uint64_t n) {
  uint16_t buf[4096];
  while (n) {
    size_t k = n < 4096 ? (size_t)n : 4096;
    for (size_t i = 0; i < k; i++)
      buf[i] = strata__bf16_round(x[i], 1); /* subnormals kept, as torch writes files */
    int err = strata__write_all(fd, buf, k * sizeof *buf);
    if (err)
      return err;
    x += k;
    n -= k;
  }
  return 0;
}

STRATA_API int strata_safetensors_write(const char *path, const struct strata_st_tensor *tensors, size_t count,
                                        const struct strata_st_meta *meta, size_t meta_count) {
  return strata_safetensors_write_as(path, tensors, count, meta, meta_count, STRATA_ST_F32);
}

STRATA_API int strata_safetensors_write_as(const char *path, const struct strata_st_tensor *tensors, size_t count,
                                           const struct strata_st_meta *meta, size_t meta_count,
                                           enum strata_st_dtype dtype) {
  if (!path || !path[0])
    return strata__error(STRATA_ERR_INVALID, "strata_safetensors_write: no path");
  if ((count && !tensors) || (meta_count && !meta))
    return strata__error(STRATA_ERR_INVALID, "%s: NULL tensor or metadata array with a non-zero count", path);
  if (dtype == STRATA_ST_F16)
    return strata__error(STRATA_ERR_UNSUPPORTED, "%s: strata writes F32 and BF16 tensors, not F16", path);
  if (!st_dtype_name(dtype))
    return strata__error(STRATA_ERR_INVALID, "%s: dtype %d is not one of enum strata_st_dtype", path, (int)dtype);
  char *header = NULL;
  size_t hlen = 0;
  int rc = strata__st_header(path, tensors, count, meta, meta_count, dtype, &header, &hlen);
  if (rc)
    return rc;

  struct strata__out o;
  rc = strata__out_open(&o, path);
  if (rc) {
    free(header);
    return rc;
  }
  uint8_t lenbytes[8];
  for (int i = 0; i < 8; i++)
    lenbytes[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
  int err = strata__write_all(o.fd, lenbytes, 8);
  if (!err)
    err = strata__write_all(o.fd, header, hlen);
  for (size_t i = 0; !err && i < count; i++) {
    uint64_t numel = 1;
    for (int d = 0; d < tensors[i].ndim; d++)
      numel *= (uint64_t)tensors[i].shape[d];
    if (numel && dtype == STRATA_ST_BF16)
      err = strata__write_bf16(o.fd, tensors[i].data, numel);
    else if (numel)
      err = strata__write_all(o.fd, tensors[i].data, (size_t)numel * sizeof(float));
  }
  free(header);
  if (err) {
    rc = strata__error(STRATA_ERR_IO, "%s: writing %s failed: %s", path, o.tmp, strerror(err));
    strata__out_abort(&o);
    return rc;
  }
  return strata__out_commit(&o);
}

STRATA_API int strata_safetensors_check_path(const char *path) { return strata_file_check(path); }

/* ---------------------------------------------------------------- reading */

struct strata__st_entry {
  char *name;
  int ndim;
  int64_t shape[STRATA_ST_MAX_DIMS];
  enum strata_st_dtype dtype; /* as stored in the file */
  uint64_t begin, end;        /* relative to the start of the data section */
  const float *data;          /* into st->blob, or into `own`: widened, or an F32 offset not 4-byte aligned */
  float *own;
};

struct strata_safetensors {
  uint8_t *blob; /* the data section */
  struct strata__st_entry *entries; /* in file order */
  size_t count;
  struct strata__st_entry **by_name; /* the entries sorted by name, for lookups */
  char **meta_keys, **meta_values;
  size_t meta_count;
};

STRATA_API void strata_safetensors_free(strata_safetensors_t st) {
  if (!st)
    return;
  for (size_t i = 0; i < st->count; i++) {
    free(st->entries[i].name);
    free(st->entries[i].own);
  }
  for (size_t i = 0; i < st->meta_count; i++) {
    free(st->meta_keys[i]);
    free(st->meta_values[i]);
  }
  free(st->entries);
  free(st->by_name);
  free(st->meta_keys);
  free(st->meta_values);
  free(st->blob);
  free(st);
}

/* Read exactly n bytes at the current offset of fd; 0, or -1 for a short file, or an errno value. */
static int strata__read_all(int fd, void *p, size_t n) {
  char *c = p;
  while (n) {
    size_t chunk = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
    ssize_t r = read(fd, c, chunk);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return errno;
    }
    if (r == 0)
      return -1;
    c += r;
    n -= (size_t)r;
  }
  return 0;
}

/* A JSON value as a non-negative integer; 0 when it is not one. */
static int strata__json_u64(const json_t *v, uint64_t *out) {
  if (!json_is_integer(v) || json_integer_value(v) < 0)
    return 0;
  *out = (uint64_t)json_integer_value(v);
  return 1;
}

/*
** Check one tensor entry of the header against the data section of
** `data_len` bytes and fill *e (its name is not set here). Messages name
** the file and the tensor. STRATA_ERR_PARSE for malformed entries,
** STRATA_ERR_UNSUPPORTED for more than 4 dims or a dtype other than F32
** (or, with STRATA_ST_READ_WIDEN in `flags`, than F32, BF16 and F16).
*/
static int strata__st_entry_parse(const char *path, const char *name, json_t *v, uint64_t data_len, unsigned flags,
                                  struct strata__st_entry *e) {
  if (!json_is_object(v))
    return strata__error(STRATA_ERR_PARSE, "%s: tensor '%s': the entry is not a JSON object", path, name);
  json_t *dtype = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape");
  json_t *offs = json_object_get(v, "data_offsets");
  if (!json_is_string(dtype))
    return strata__error(STRATA_ERR_PARSE, "%s: tensor '%s': no \"dtype\" string", path, name);
  if (!json_is_array(shape))
    return strata__error(STRATA_ERR_PARSE, "%s: tensor '%s': no \"shape\" array", path, name);
  if (!json_is_array(offs) || json_array_size(offs) != 2)
    return strata__error(STRATA_ERR_PARSE, "%s: tensor '%s': \"data_offsets\" is not an array [begin, end]", path,
                         name);
  uint64_t begin, end;
  if (!strata__json_u64(json_array_get(offs, 0), &begin) || !strata__json_u64(json_array_get(offs, 1), &end))
    return strata__error(STRATA_ERR_PARSE, "%s: tensor '%s': \"data_offsets\" are not non-negative integers", path,
                         name);
  if (end < begin)
    return strata__error(STRATA_ERR_PARSE, "%s: tensor '%s': data_offsets [%llu, %llu] end before they begin", path,
                         name, (unsigned long long)begin, (unsigned long long)end);
  if (end > data_len)
    return strata__error(STRATA_ERR_PARSE,
                         "%s: tensor '%s': data_offsets [%llu, %llu] run past the end of the file (the data section "
                         "holds %llu bytes)",
                         path, name, (unsigned long long)begin, (unsigned long long)end,
                         (unsigned long long)data_len);
  size_t nd = json_array_size(shape);
  uint64_t numel = 1;
  int overflow = 0;
  for (size_t d = 0; d < nd; d++) {
    uint64_t dim;
    if (!strata__json_u64(json_array_get(shape, d), &dim))
      return strata__error(STRATA_ERR_PARSE, "%s: tensor '%s': shape entry %zu is not a non-negative integer", path,
                           name, d);
    if (!strata__mul_ok(numel, dim, &numel))
      overflow = 1;
    if (d < STRATA_ST_MAX_DIMS)
      e->shape[d] = (int64_t)dim;
  }
  const char *dt = json_string_value(dtype);
  int widen = (flags & STRATA_ST_READ_WIDEN) != 0;
  if (strcmp(dt, "F32") == 0)
    e->dtype = STRATA_ST_F32;
  else if (widen && strcmp(dt, "BF16") == 0)
    e->dtype = STRATA_ST_BF16;
  else if (widen && strcmp(dt, "F16") == 0)
    e->dtype = STRATA_ST_F16;
  else
    return strata__error(STRATA_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s; strata reads %s", path, name, dt,
                         widen ? "F32, BF16 and F16" : "F32 only");
  if (nd > STRATA_ST_MAX_DIMS)
    return strata__error(STRATA_ERR_UNSUPPORTED, "%s: tensor '%s' has %zu dimensions; strata reads up to %d", path,
                         name, nd, STRATA_ST_MAX_DIMS);
  const uint64_t es = st_dtype_size(e->dtype);
  if (overflow || numel > UINT64_MAX / es || numel * es != end - begin)
    return strata__error(STRATA_ERR_PARSE,
                         "%s: tensor '%s': shape holds %s%llu %s values (%s%llu bytes) but data_offsets [%llu, %llu] "
                         "span %llu bytes",
                         path, name, overflow ? "over " : "", (unsigned long long)numel, dt, overflow ? "over " : "",
                         (unsigned long long)(numel * es), (unsigned long long)begin, (unsigned long long)end,
                         (unsigned long long)(end - begin));
  e->ndim = (int)nd;
  e->begin = begin;
  e->end = end;
  return STRATA_OK;
}

/* A tensor's byte range, for the overlap check. */
struct strata__st_span {
  uint64_t begin, end;
  const char *name;
};

static int strata__cmp_span(const void *a, const void *b) {
  const struct strata__st_span *x = a, *y = b;
  if (x->begin != y->begin)
    return x->begin < y->begin ? -1 : 1;
  return (x->end > y->end) - (x->end < y->end);
}

static int strata__cmp_entry_name(const void *a, const void *b) {
  return strcmp((*(struct strata__st_entry *const *)a)->name, (*(struct strata__st_entry *const *)b)->name);
}

/*
** Refuse overlapping byte ranges: sorted by offset, each non-empty range
** must begin at or after the end of the previous one. Gaps are allowed
** (the format does not need them, but they do no harm to a reader).
*/
static int strata__st_check_overlap(const char *path, const struct strata__st_entry *entries, size_t count) {
  if (count < 2)
    return STRATA_OK;
  struct strata__st_span *spans = malloc(count * sizeof *spans);
  if (!spans)
    return strata__error(STRATA_ERR_NOMEM, "%s: out of host memory checking the header", path);
  size_t n = 0;
  for (size_t i = 0; i < count; i++)
    if (entries[i].end > entries[i].begin)
      spans[n++] = (struct strata__st_span){entries[i].begin, entries[i].end, entries[i].name};
  qsort(spans, n, sizeof *spans, strata__cmp_span);
  int rc = STRATA_OK;
  for (size_t i = 1; i < n && !rc; i++)
    if (spans[i].begin < spans[i - 1].end)
      rc = strata__error(STRATA_ERR_PARSE, "%s: tensors '%s' [%llu, %llu] and '%s' [%llu, %llu] overlap", path,
                         spans[i - 1].name, (unsigned long long)spans[i - 1].begin,
                         (unsigned long long)spans[i - 1].end, spans[i].name, (unsigned long long)spans[i].begin,
                         (unsigned long long)spans[i].end);
  free(spans);
  return rc;
}

/*
** Fill `st` from the parsed header `root`: metadata (an object of strings),
** then every other key as a tensor entry checked against the data section
** (the dtypes `flags` allows). On failure `st` holds what was parsed so
** far, for strata_safetensors_free.
*/
static int strata__st_load_header(const char *path, json_t *root, uint64_t data_len, unsigned flags,
                                  struct strata_safetensors *st) {
  if (!json_is_object(root))
    return strata__error(STRATA_ERR_PARSE, "%s: the header is not a JSON object", path);
  size_t n = json_object_size(root);
  st->entries = calloc(n ? n : 1, sizeof *st->entries);
  if (!st->entries)
    return strata__error(STRATA_ERR_NOMEM, "%s: out of host memory reading the header", path);
  const char *key;
  json_t *value;
  json_object_foreach(root, key, value) {
    if (strcmp(key, STRATA__ST_METADATA) == 0) {
      if (!json_is_object(value))
        return strata__error(STRATA_ERR_PARSE, "%s: \"%s\" is not a JSON object", path, STRATA__ST_METADATA);
      size_t m = json_object_size(value);
      st->meta_keys = calloc(m ? m : 1, sizeof *st->meta_keys);
      st->meta_values = calloc(m ? m : 1, sizeof *st->meta_values);
      if (!st->meta_keys || !st->meta_values)
        return strata__error(STRATA_ERR_NOMEM, "%s: out of host memory reading the metadata", path);
      const char *mk;
      json_t *mv;
      json_object_foreach(value, mk, mv) {
        if (!json_is_string(mv))
          return strata__error(STRATA_ERR_PARSE, "%s: metadata '%s' is not a string", path, mk);
        size_t i = st->meta_count;
        st->meta_keys[i] = strdup(mk);
        st->meta_values[i] = strdup(json_string_value(mv));
        st->meta_count++;
        if (!st->meta_keys[i] || !st->meta_values[i])
          return strata__error(STRATA_ERR_NOMEM, "%s: out of host memory reading the metadata", path);
      }
      continue;
    }
    struct strata__st_entry *e = &st->entries[st->count];
    e->name = strdup(key);
    if (!e->name)
      return strata__error(STRATA_ERR_NOMEM, "%s: out of host memory reading the header", path);
    st->count++;
    int rc = strata__st_entry_parse(path, key, value, data_len, flags, e);
    if (rc)
      return rc;
  }
  return strata__st_check_overlap(path, st->entries, st->count);
}

/*
** Point every entry at its data. The data section sits at the start of a
** malloc'd block, so an F32 tensor is float-aligned exactly when its offset
** is a multiple of 4 (always so for files strata writes); other F32 tensors
** are copied into a block of their own, and BF16 and F16 ones widened into
** one (16-bit words read with memcpy: their offsets need be even only in
** files that follow the format). Then build the by-name index.
*/
static int strata__st_bind(const char *path, struct strata_safetensors *st) {
  for (size_t i = 0; i < st->count; i++) {
    struct strata__st_entry *e = &st->entries[i];
    if (e->dtype != STRATA_ST_F32) {
      uint64_t n = (e->end - e->begin) / 2;
      if (n > SIZE_MAX / sizeof(float))
        return strata__error(STRATA_ERR_NOMEM, "%s: tensor '%s' is too large to widen to float32", path, e->name);
      e->own = malloc(n ? (size_t)n * sizeof(float) : 1);
      if (!e->own)
        return strata__error(STRATA_ERR_NOMEM, "%s: out of host memory widening tensor '%s' to float32", path,
                             e->name);
      const uint8_t *p = st->blob + e->begin;
      for (uint64_t k = 0; k < n; k++) {
        uint16_t h;
        memcpy(&h, p + 2 * k, sizeof h);
        e->own[k] = e->dtype == STRATA_ST_BF16 ? strata__bf16_widen(h) : st_f16_widen(h);
      }
      e->data = e->own;
    } else if (e->begin % sizeof(float) == 0) {
      e->data = (const float *)(void *)(st->blob + e->begin);
    } else {
      e->own = malloc(e->end > e->begin ? e->end - e->begin : 1);
      if (!e->own)
        return strata__error(STRATA_ERR_NOMEM, "%s: out of host memory for tensor '%s'", path, e->name);
      memcpy(e->own, st->blob + e->begin, e->end - e->begin);
      e->data = e->own;
    }
  }
  st->by_name = malloc((st->count ? st->count : 1) * sizeof *st->by_name);
  if (!st->by_name)
    return strata__error(STRATA_ERR_NOMEM, "%s: out of host memory indexing the tensors", path);
  for (size_t i = 0; i < st->count; i++)
    st->by_name[i] = &st->entries[i];
  qsort(st->by_name, st->count, sizeof *st->by_name, strata__cmp_entry_name);
  return STRATA_OK;
}

STRATA_API int strata_safetensors_read(const char *path, strata_safetensors_t *out) {
  return strata_safetensors_read_flags(path, 0, out);
}

STRATA_API int strata_safetensors_read_flags(const char *path, unsigned flags, strata_safetensors_t *out) {
  if (!out)
    return strata__error(STRATA_ERR_INVALID, "strata_safetensors_read: out is NULL");
  *out = NULL;
  if (!path)
    return strata__error(STRATA_ERR_INVALID, "strata_safetensors_read: path is NULL");
  if (flags & ~(unsigned)STRATA_ST_READ_WIDEN)
    return strata__error(STRATA_ERR_INVALID, "%s: unknown read flags 0x%x", path, flags & ~(unsigned)STRATA_ST_READ_WIDEN);
  int fd = -1;
  TRY(strata__open_input(path, STRATA_ERR_NOT_FOUND, &fd));
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    close(fd);
    return strata__error(STRATA_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
  }
  uint64_t size = (uint64_t)sb.st_size;
  if (size < 8) {
    close(fd);
    return strata__error(STRATA_ERR_PARSE, "%s: %llu bytes, too short for the 8-byte header length (truncated?)",
                         path, (unsigned long long)size);
  }
  uint8_t lenbytes[8];
  int err = strata__read_all(fd, lenbytes, 8);
  if (err) {
    close(fd);
    return strata__error(STRATA_ERR_IO, "%s: read error: %s", path, err < 0 ? "file shrank" : strerror(err));
  }
  uint64_t hlen = 0;
  for (int i = 0; i < 8; i++)
    hlen |= (uint64_t)lenbytes[i] << (8 * i);
  if (hlen > size - 8) {
    close(fd);
    return strata__error(STRATA_ERR_PARSE,
                         "%s: header length %llu runs past the end of the file (%llu bytes; truncated or not "
                         "safetensors?)",
                         path, (unsigned long long)hlen, (unsigned long long)size);
  }
  uint64_t data_len = size - 8 - hlen;
  int rc = STRATA_OK;
  json_t *root = NULL;
  char *header = malloc(hlen ? hlen : 1);
  struct strata_safetensors *st = calloc(1, sizeof *st);
  if (st)
    st->blob = malloc(data_len ? data_len : 1);
  if (!header || !st || !st->blob) {
    rc = strata__error(STRATA_ERR_NOMEM, "%s: out of host memory for a %llu-byte file", path,
                       (unsigned long long)size);
    goto done;
  }
  err = strata__read_all(fd, header, hlen);
  if (!err)
    err = strata__read_all(fd, st->blob, data_len);
  if (err) {
    rc = strata__error(STRATA_ERR_IO, "%s: read error: %s", path, err < 0 ? "file shrank while read" : strerror(err));
    goto done;
  }
  json_error_t jerr;
  root = json_loadb(header, hlen, JSON_REJECT_DUPLICATES, &jerr);
  if (!root) {
    rc = strata__error(STRATA_ERR_PARSE, "%s: the %llu-byte header is not valid JSON: %s (line %d, column %d)", path,
                       (unsigned long long)hlen, jerr.text, jerr.line, jerr.column);
    goto done;
  }
  rc = strata__st_load_header(path, root, data_len, flags, st);
  if (!rc)
    rc = strata__st_bind(path, st);
done:
  close(fd);
  json_decref(root);
  free(header);
  if (rc) {
    strata_safetensors_free(st);
    return rc;
  }
  *out = st;
  return STRATA_OK;
}

STRATA_API size_t strata_safetensors_count(strata_safetensors_t st) { return st ? st->count : 0; }

STRATA_API const char *strata_safetensors_name(strata_safetensors_t st, size_t index) {
  return st && index < st->count ? st->entries[index].name : NULL;
}

/* The entry named `name`, or NULL with STRATA_ERR_NOT_FOUND's message set. */
static const struct strata__st_entry *strata__st_find(strata_safetensors_t st, const char *name) {
  struct strata__st_entry key = {.name = (char *)name}, *kp = &key;
  struct strata__st_entry **hit = bsearch(&kp, st->by_name, st->count, sizeof *st->by_name, strata__cmp_entry_name);
  if (!hit)
    strata__error(STRATA_ERR_NOT_FOUND, "no tensor '%s' in the checkpoint", name);
  return hit ? *hit : NULL;
}

STRATA_API int strata_safetensors_get(strata_safetensors_t st, const char *name, int *ndim,
                                      int64_t shape[STRATA_ST_MAX_DIMS], const float **data) {
  if (!st || !name)
    return strata__error(STRATA_ERR_INVALID, "strata_safetensors_get: NULL argument");
  const struct strata__st_entry *e = strata__st_find(st, name);
  if (!e)
    return STRATA_ERR_NOT_FOUND;
  if (ndim)
    *ndim = e->ndim;
  if (shape)
    for (int d = 0; d < STRATA_ST_MAX_DIMS; d++)
      shape[d] = d < e->ndim ? e->shape[d] : 1;
  if (data)
    *data = e->data;
  return STRATA_OK;
}

STRATA_API int strata_safetensors_dtype(strata_safetensors_t st, const char *name, enum strata_st_dtype *dtype) {
  if (!st || !name || !dtype)
    return strata__error(STRATA_ERR_INVALID, "strata_safetensors_dtype: NULL argument");
  const struct strata__st_entry *e = strata__st_find(st, name);
  if (!e)
    return STRATA_ERR_NOT_FOUND;
  *dtype = e->dtype;
  return STRATA_OK;
}

STRATA_API const char *strata_safetensors_meta(strata_safetensors_t st, const char *key) {
  if (!st || !key)
    return NULL;
  for (size_t i = 0; i < st->meta_count; i++)
    if (strcmp(st->meta_keys[i], key) == 0)
      return st->meta_values[i];
  return NULL;
}
