/* SPDX-License-Identifier: MIT */
/* test-checkpoint.c — Criterion suite of safetensors checkpoints: round trips, format, atomic writes, corrupt files. */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

static char tdir[64];
static char path[512]; /* tdir/ckpt.safetensors */

static void make_tdir(void) {
  strcpy(tdir, "/tmp/strata-test-ckpt-XXXXXX");
  cr_assert_not_null(mkdtemp(tdir));
  snprintf(path, sizeof path, "%s/ckpt.safetensors", tdir);
}

static void remove_tdir(void) { tc_remove_dir(tdir); }

TestSuite(checkpoint, .init = make_tdir, .fini = remove_tdir);

/* The whole content of a file (malloc'd, *n bytes). */
static uint8_t *slurp(const char *p, size_t *n) {
  FILE *f = fopen(p, "rb");
  cr_assert_not_null(f, "cannot open %s", p);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc(len > 0 ? (size_t)len : 1);
  cr_assert_not_null(buf);
  cr_assert_eq(fread(buf, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  *n = (size_t)len;
  return buf;
}

static void spit(const char *p, const void *bytes, size_t n) {
  FILE *f = fopen(p, "wb");
  cr_assert_not_null(f, "cannot create %s", p);
  cr_assert_eq(fwrite(bytes, 1, n, f), n);
  cr_assert_eq(fclose(f), 0);
}

/* Names in tdir other than `keep` that contain ".tmp-": leftovers of a failed write. */
static int temp_files_left(void) {
  DIR *d = opendir(tdir);
  cr_assert_not_null(d);
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL)
    n += strstr(de->d_name, ".tmp-") != NULL;
  closedir(d);
  return n;
}

/* A set of tensors from 0-d to 4-d (and an empty one) with awkward values, and three metadata entries. */
static float v0[1], v1[5], v2[3 * 4], v3[2 * 3 * 2], v4[2 * 1 * 3 * 2];
static const struct strata_st_meta meta3[] = {
    {"step", "1200"}, {"config", "{\"n_layer\": 2, \"name\": \"tiny\"}"}, {"note", "h\xc3\xa9llo \"quoted\"\n"}};

static size_t sample_tensors(struct strata_st_tensor *t) {
  tc_fill(v1, 5, 1, -1, 1);
  tc_fill(v2, 12, 2, -100, 100);
  tc_fill(v3, 12, 3, -1e-3f, 1e-3f);
  tc_fill(v4, 12, 4, 0, 1);
  v0[0] = 3.25f;
  v1[0] = -0.0f;
  v1[1] = INFINITY;
  v1[2] = -INFINITY;
  v1[3] = 1e-45f; /* a denormal */
  v2[5] = NAN;
  t[0] = (struct strata_st_tensor){"scalar", 0, {0}, v0};
  t[1] = (struct strata_st_tensor){"h.0.attn.c_attn.bias", 1, {5}, v1};
  t[2] = (struct strata_st_tensor){"h.0.attn.c_attn.weight", 2, {3, 4}, v2};
  t[3] = (struct strata_st_tensor){"conv", 3, {2, 3, 2}, v3};
  t[4] = (struct strata_st_tensor){"block4d", 4, {2, 1, 3, 2}, v4};
  t[5] = (struct strata_st_tensor){"empty", 2, {0, 3}, NULL};
  return 6;
}

Test(checkpoint, round_trip_is_bit_exact) {
  struct strata_st_tensor t[6];
  size_t n = sample_tensors(t);
  OK(strata_safetensors_write(path, t, n, meta3, 3));
  strata_safetensors_t st = NULL;
  OK(strata_safetensors_read(path, &st));
  cr_assert_eq(strata_safetensors_count(st), n);
  for (size_t i = 0; i < n; i++) {
    cr_assert_str_eq(strata_safetensors_name(st, i), t[i].name, "file order is write order");
    int ndim = -1;
    int64_t shape[STRATA_ST_MAX_DIMS];
    const float *data = NULL;
    OK(strata_safetensors_get(st, t[i].name, &ndim, shape, &data));
    cr_assert_eq(ndim, t[i].ndim, "%s", t[i].name);
    size_t numel = 1;
    for (int d = 0; d < ndim; d++) {
      cr_assert_eq(shape[d], t[i].shape[d], "%s dim %d", t[i].name, d);
      numel *= (size_t)shape[d];
    }
    for (int d = ndim; d < STRATA_ST_MAX_DIMS; d++)
      cr_assert_eq(shape[d], 1, "unused dimensions read as 1");
    if (numel) {
      cr_assert_not_null(data);
      cr_assert_eq((uintptr_t)data % sizeof(float), 0, "data is float-aligned");
      cr_assert_arr_eq(data, t[i].data, numel * sizeof(float), "%s is bit-exact", t[i].name);
    }
  }
  cr_assert_null(strata_safetensors_name(st, n));
  for (int i = 0; i < 3; i++)
    cr_assert_str_eq(strata_safetensors_meta(st, meta3[i].key), meta3[i].value);
  cr_assert_null(strata_safetensors_meta(st, "absent"));
  cr_assert_eq(strata_safetensors_get(st, "absent", NULL, NULL, NULL), STRATA_ERR_NOT_FOUND);
  cr_assert(strstr(strata_last_error(), "absent"));
  cr_assert_eq(strata_safetensors_get(st, NULL, NULL, NULL, NULL), STRATA_ERR_INVALID);
  /* Out-parameters are optional. */
  OK(strata_safetensors_get(st, "scalar", NULL, NULL, NULL));
  strata_safetensors_free(st);

  /* A file with no tensors and no metadata is valid too. */
  OK(strata_safetensors_write(path, NULL, 0, NULL, 0));
  OK(strata_safetensors_read(path, &st));
  cr_assert_eq(strata_safetensors_count(st), 0);
  cr_assert_null(strata_safetensors_meta(st, "step"));
  strata_safetensors_free(st);
}

Test(checkpoint, file_is_safetensors) {
  struct strata_st_tensor t[6];
  size_t n = sample_tensors(t);
  OK(strata_safetensors_write(path, t, n, meta3, 3));
  size_t size;
  uint8_t *buf = slurp(path, &size);
  cr_assert_geq(size, 8);
  uint64_t hlen = 0;
  for (int i = 0; i < 8; i++)
    hlen |= (uint64_t)buf[i] << (8 * i);
  cr_assert_eq(hlen % 8, 0, "header padded to 8 bytes");
  cr_assert_leq(8 + hlen, size);
  json_error_t err;
  json_t *root = json_loadb((const char *)buf + 8, hlen, 0, &err);
  cr_assert_not_null(root, "header JSON: %s", err.text);
  cr_assert(json_is_object(root));
  cr_assert_eq(json_object_size(root), n + 1);
  json_t *md = json_object_get(root, "__metadata__");
  cr_assert(json_is_object(md));
  cr_assert_str_eq(json_string_value(json_object_get(md, "step")), "1200");
  uint64_t expect_begin = 0;
  for (size_t i = 0; i < n; i++) {
    json_t *e = json_object_get(root, t[i].name);
    cr_assert(json_is_object(e), "%s", t[i].name);
    cr_assert_str_eq(json_string_value(json_object_get(e, "dtype")), "F32");
    json_t *shape = json_object_get(e, "shape");
    cr_assert_eq(json_array_size(shape), (size_t)t[i].ndim);
    uint64_t numel = 1;
    for (int d = 0; d < t[i].ndim; d++) {
      cr_assert_eq(json_integer_value(json_array_get(shape, (size_t)d)), t[i].shape[d]);
      numel *= (uint64_t)t[i].shape[d];
    }
    json_t *off = json_object_get(e, "data_offsets");
    uint64_t b = (uint64_t)json_integer_value(json_array_get(off, 0)), en = (uint64_t)json_integer_value(json_array_get(off, 1));
    cr_assert_eq(b, expect_begin, "%s packed after the previous tensor", t[i].name);
    cr_assert_eq(en - b, numel * 4);
    if (numel)
      cr_assert_arr_eq(buf + 8 + hlen + b, t[i].data, numel * 4, "%s: little-endian fp32 in the file", t[i].name);
    expect_begin = en;
  }
  cr_assert_eq(8 + hlen + expect_begin, size, "the data section ends the file");
  for (size_t i = 8; i < 8 + hlen; i++)
    cr_assert(buf[i] != 0, "no NUL in the header");
  json_decref(root);
  free(buf);
}

Test(checkpoint, failed_writes_leave_the_old_file) {
  struct strata_st_tensor t[6];
  size_t n = sample_tensors(t);
  OK(strata_safetensors_write(path, t, n, meta3, 3));
  size_t good_n;
  uint8_t *good = slurp(path, &good_n);

  float x[4] = {1, 2, 3, 4};
  struct strata_st_tensor dup[2] = {{"a", 1, {4}, x}, {"a", 1, {4}, x}};
  cr_assert_eq(strata_safetensors_write(path, dup, 2, NULL, 0), STRATA_ERR_INVALID);
  cr_assert(strstr(strata_last_error(), "'a'") && strstr(strata_last_error(), "twice"), "%s", strata_last_error());
  struct strata_st_tensor bad[] = {
      {"nodata", 1, {4}, NULL},   {"neg", 2, {2, -1}, x},       {"five", 5, {1, 1, 1, 1}, x},
      {"minus", -1, {1}, x},      {"__reserved", 1, {4}, x},     {NULL, 1, {4}, x},
      {"", 1, {4}, x},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct strata_st_tensor two[2] = {{"ok", 1, {4}, x}, bad[i]};
    cr_assert_eq(strata_safetensors_write(path, two, 2, NULL, 0), STRATA_ERR_INVALID, "case %zu", i);
    if (bad[i].name && bad[i].name[0])
      cr_assert(strstr(strata_last_error(), bad[i].name), "message names the tensor: %s", strata_last_error());
  }
  struct strata_st_meta dupmeta[] = {{"k", "1"}, {"k", "2"}}, nullmeta[] = {{"k", NULL}};
  cr_assert_eq(strata_safetensors_write(path, dup, 1, dupmeta, 2), STRATA_ERR_INVALID);
  cr_assert_eq(strata_safetensors_write(path, dup, 1, nullmeta, 1), STRATA_ERR_INVALID);
  cr_assert_eq(strata_safetensors_write(path, NULL, 1, NULL, 0), STRATA_ERR_INVALID);
  cr_assert_eq(strata_safetensors_write(NULL, dup, 1, NULL, 0), STRATA_ERR_INVALID);

  /* A late failure: PATH is a directory, so the final rename fails after the data was written. */
  char dirpath[600];
  snprintf(dirpath, sizeof dirpath, "%s/adir", tdir);
  cr_assert_eq(mkdir(dirpath, 0755), 0);
  cr_assert_eq(strata_safetensors_write(dirpath, dup, 1, NULL, 0), STRATA_ERR_IO);
  cr_assert(strstr(strata_last_error(), "adir"), "%s", strata_last_error());
  /* A directory that does not exist: the temporary file cannot be made. */
  char nodir[600];
  snprintf(nodir, sizeof nodir, "%s/missing/ckpt.safetensors", tdir);
  cr_assert_eq(strata_safetensors_write(nodir, dup, 1, NULL, 0), STRATA_ERR_IO);
  cr_assert(strstr(strata_last_error(), "missing"), "%s", strata_last_error());

  size_t now_n;
  uint8_t *now = slurp(path, &now_n);
  cr_assert_eq(now_n, good_n);
  cr_assert_arr_eq(now, good, good_n, "the old checkpoint is byte-identical");
  cr_assert_eq(temp_files_left(), 0, "no temporary file left behind");
  free(now);

  /* A successful write replaces it. */
  OK(strata_safetensors_write(path, dup, 1, NULL, 0));
  strata_safetensors_t st = NULL;
  OK(strata_safetensors_read(path, &st));
  cr_assert_eq(strata_safetensors_count(st), 1);
  strata_safetensors_free(st);
  cr_assert_eq(temp_files_left(), 0);
  free(good);
}

/* Read `path` and return the status, freeing a checkpoint that was read. */
static int read_status(const char *p) {
  strata_safetensors_t st = NULL;
  int rc = strata_safetensors_read(p, &st);
  cr_assert((rc == STRATA_OK) == (st != NULL));
  strata_safetensors_free(st);
  return rc;
}

Test(checkpoint, every_truncation_is_refused) {
  struct strata_st_tensor t[6];
  size_t n = sample_tensors(t);
  OK(strata_safetensors_write(path, t, n, meta3, 3));
  size_t size;
  uint8_t *buf = slurp(path, &size);
  char cut[600];
  snprintf(cut, sizeof cut, "%s/cut.safetensors", tdir);
  for (size_t len = 0; len < size; len++) {
    spit(cut, buf, len);
    int rc = read_status(cut);
    cr_assert_eq(rc, STRATA_ERR_PARSE, "cut at %zu of %zu: %s (%s)", len, size, strata_err_name(rc),
                 strata_last_error());
    cr_assert(strstr(strata_last_error(), "cut.safetensors"), "message names the file: %s", strata_last_error());
  }
  /* The last cut is inside the data of the last non-empty tensor. */
  cr_assert(strstr(strata_last_error(), "block4d") && strstr(strata_last_error(), "run past the end"), "%s",
            strata_last_error());
  spit(cut, buf, size);
  cr_assert_eq(read_status(cut), STRATA_OK);
  free(buf);
}

/* Write a file of the given header (padded with spaces to `pad` bytes if larger) and `data_len` bytes of data. */
static void make_file(const char *p, const char *header, size_t pad, size_t data_len) {
  size_t hl = strlen(header), n = hl > pad ? hl : pad;
  uint8_t *buf = calloc(8 + n + data_len + 1, 1);
  cr_assert_not_null(buf);
  for (int i = 0; i < 8; i++)
    buf[i] = (uint8_t)((uint64_t)n >> (8 * i));
  memcpy(buf + 8, header, hl);
  memset(buf + 8 + hl, ' ', n - hl);
  for (size_t i = 0; i < data_len; i++)
    buf[8 + n + i] = (uint8_t)i;
  spit(p, buf, 8 + n + data_len);
  free(buf);
}

Test(checkpoint, corrupt_headers_are_refused) {
  static const struct {
    const char *header;
    size_t data;
    int status;
    const char *says; /* a piece of the expected message */
  } cases[] = {
      {"{not json", 0, STRATA_ERR_PARSE, "not valid JSON"},
      {"", 0, STRATA_ERR_PARSE, "not valid JSON"},
      {"[1, 2]", 0, STRATA_ERR_PARSE, "not a JSON object"},
      {"{\"w\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, STRATA_ERR_UNSUPPORTED, "'w' has dtype F16"},
      {"{\"w\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, STRATA_ERR_UNSUPPORTED, "BF16"},
      {"{\"w\":{\"dtype\":7,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, STRATA_ERR_PARSE, "'w'"},
      {"{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, STRATA_ERR_PARSE, "dtype"},
      {"{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, STRATA_ERR_PARSE, "shape"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, STRATA_ERR_PARSE, "data_offsets"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, STRATA_ERR_PARSE, "data_offsets"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,\"8\"]}}", 8, STRATA_ERR_PARSE, "data_offsets"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", 8, STRATA_ERR_PARSE, "data_offsets"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, STRATA_ERR_PARSE, "end before"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 24, STRATA_ERR_PARSE, "span 20 bytes"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, STRATA_ERR_PARSE, "shape entry 0"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", 8, STRATA_ERR_PARSE, "shape entry 0"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8, STRATA_ERR_PARSE,
       "'w'"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,2],\"data_offsets\":[0,8]}}", 8, STRATA_ERR_UNSUPPORTED,
       "5 dimensions"},
      {"{\"h.0.attn.c_attn.weight\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, STRATA_ERR_PARSE,
       "tensor 'h.0.attn.c_attn.weight': data_offsets [0, 16] run past the end of the file"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[9223372036854775800,9223372036854775807]}}", 8,
       STRATA_ERR_PARSE, "'w'"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
       "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
       24, STRATA_ERR_PARSE, "overlap"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
       "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
       8, STRATA_ERR_PARSE, "overlap"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
       "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
       16, STRATA_ERR_PARSE, "duplicate"},
      {"{\"w\":[1,2]}", 0, STRATA_ERR_PARSE, "'w'"},
      {"{\"__metadata__\":{\"step\":12}}", 0, STRATA_ERR_PARSE, "metadata 'step'"},
      {"{\"__metadata__\":[\"a\"]}", 0, STRATA_ERR_PARSE, "__metadata__"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}} trailing", 8, STRATA_ERR_PARSE, "JSON"},
  };
  char p[600];
  snprintf(p, sizeof p, "%s/bad.safetensors", tdir);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    make_file(p, cases[i].header, 0, cases[i].data);
    int rc = read_status(p);
    cr_assert_eq(rc, cases[i].status, "case %zu (%s): %s, %s", i, cases[i].header, strata_err_name(rc),
                 strata_last_error());
    cr_assert(strstr(strata_last_error(), cases[i].says) && strstr(strata_last_error(), "bad.safetensors"),
              "case %zu: message '%s' should say '%s'", i, strata_last_error(), cases[i].says);
  }
}

Test(checkpoint, bad_header_lengths_are_refused) {
  char p[600];
  snprintf(p, sizeof p, "%s/len.safetensors", tdir);
  static const uint64_t lengths[] = {UINT64_MAX, (uint64_t)1 << 63, (uint64_t)1 << 40, 1000, 3};
  for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
    uint8_t buf[8 + 2] = {0};
    for (int b = 0; b < 8; b++)
      buf[b] = (uint8_t)(lengths[i] >> (8 * b));
    buf[8] = '{';
    buf[9] = '}';
    spit(p, buf, sizeof buf);
    cr_assert_eq(read_status(p), STRATA_ERR_PARSE, "header length %llu", (unsigned long long)lengths[i]);
    cr_assert(strstr(strata_last_error(), "header length"), "%s", strata_last_error());
  }
  /* A NUL inside the header. */
  static const uint8_t nul[8 + 8] = {8, 0, 0, 0, 0, 0, 0, 0, '{', '"', 'a', '"', ':', 0, '}', ' '};
  spit(p, nul, sizeof nul);
  cr_assert_eq(read_status(p), STRATA_ERR_PARSE);
}

Test(checkpoint, foreign_layouts_are_read) {
  /* A header length that is not a multiple of 8, a gap and a tensor at an offset not divisible by 4. */
  char p[600];
  snprintf(p, sizeof p, "%s/foreign.safetensors", tdir);
  const char *h = "{\"x\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[2,18]},"
                  "\"__metadata__\":{\"format\":\"pt\"},"
                  "\"y\":{\"data_offsets\":[20,24],\"shape\":[],\"dtype\":\"F32\"}}";
  make_file(p, h, 0, 24);
  strata_safetensors_t st = NULL;
  OK(strata_safetensors_read(p, &st));
  cr_assert_eq(strata_safetensors_count(st), 2);
  cr_assert_str_eq(strata_safetensors_name(st, 0), "x");
  cr_assert_str_eq(strata_safetensors_name(st, 1), "y");
  cr_assert_str_eq(strata_safetensors_meta(st, "format"), "pt");
  int ndim;
  int64_t shape[4];
  const float *data;
  OK(strata_safetensors_get(st, "x", &ndim, shape, &data));
  cr_assert_eq(ndim, 2);
  cr_assert_eq((uintptr_t)data % sizeof(float), 0);
  uint8_t expect[16];
  for (int i = 0; i < 16; i++)
    expect[i] = (uint8_t)(2 + i);
  cr_assert_arr_eq(data, expect, 16);
  OK(strata_safetensors_get(st, "y", &ndim, shape, &data));
  cr_assert_eq(ndim, 0);
  uint8_t expect_y[4] = {20, 21, 22, 23};
  cr_assert_arr_eq(data, expect_y, 4);
  strata_safetensors_free(st);
}

Test(checkpoint, random_corruption_never_crashes) {
  struct strata_st_tensor t[6];
  size_t n = sample_tensors(t);
  OK(strata_safetensors_write(path, t, n, meta3, 3));
  size_t size;
  uint8_t *good = slurp(path, &size);
  uint8_t *buf = malloc(size);
  cr_assert_not_null(buf);
  char p[600];
  snprintf(p, sizeof p, "%s/fuzz.safetensors", tdir);
  uint64_t s = 12345;
  int refused = 0;
  for (int round = 0; round < 400; round++) {
    memcpy(buf, good, size);
    for (int k = 0; k < 3; k++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      size_t at = (size_t)(s >> 33) % (size < 400 ? size : 400); /* mostly the length and the header */
      buf[at] = (uint8_t)(s >> 20);
    }
    spit(p, buf, size);
    int rc = read_status(p);
    cr_assert(rc == STRATA_OK || rc == STRATA_ERR_PARSE || rc == STRATA_ERR_UNSUPPORTED, "round %d: %s (%s)", round,
              strata_err_name(rc), strata_last_error());
    refused += rc != STRATA_OK;
  }
  cr_assert_gt(refused, 200, "most corruptions are caught (%d of 400)", refused);
  free(buf);
  free(good);
}

Test(checkpoint, null_handles_are_harmless) {
  strata_safetensors_free(NULL);
  cr_assert_eq(strata_safetensors_count(NULL), 0);
  cr_assert_null(strata_safetensors_name(NULL, 0));
  cr_assert_null(strata_safetensors_meta(NULL, "k"));
  cr_assert_eq(strata_safetensors_get(NULL, "k", NULL, NULL, NULL), STRATA_ERR_INVALID);
  strata_safetensors_t st = (strata_safetensors_t)(uintptr_t)1;
  cr_assert_eq(strata_safetensors_read(NULL, &st), STRATA_ERR_INVALID);
  cr_assert_null(st, "the out-parameter is cleared on failure");
  cr_assert_eq(strata_safetensors_read(path, NULL), STRATA_ERR_INVALID);
  cr_assert_eq(read_status(path), STRATA_ERR_NOT_FOUND, "a missing file");
  cr_assert(strstr(strata_last_error(), "ckpt.safetensors"));
  cr_assert_eq(read_status(tdir), STRATA_ERR_IO, "a directory");
}
