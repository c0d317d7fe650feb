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

/* A safetensors file of one header and the raw bytes `data`, as a foreign writer lays it out (no padding). */
static void make_raw(const char *p, const char *header, const void *data, size_t data_len) {
  size_t hl = strlen(header);
  uint8_t *buf = malloc(8 + hl + data_len + 1);
  cr_assert_not_null(buf);
  for (int i = 0; i < 8; i++)
    buf[i] = (uint8_t)((uint64_t)hl >> (8 * i));
  memcpy(buf + 8, header, hl);
  memcpy(buf + 8 + hl, data, data_len);
  spit(p, buf, 8 + hl + data_len);
  free(buf);
}

static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

Test(checkpoint, bf16_and_fp16_are_widened_exactly_on_request) {
  /* binary16: 1, -0, the smallest and largest subnormals, the smallest normal, the largest finite, both
  ** infinities, a quiet NaN with a payload, 1/3 rounded; then their float32 bits */
  static const uint16_t f16[] = {0x3c00, 0x8000, 0x0001, 0x03ff, 0x0400, 0x7bff, 0x7c00, 0xfc00, 0x7e01, 0x3555};
  static const uint32_t f16_want[] = {0x3f800000, 0x80000000, 0x33800000, 0x387fc000, 0x38800000,
                                      0x477fe000, 0x7f800000, 0xff800000, 0x7fc02000, 0x3eaaa000};
  /* bfloat16: 1, -2, the smallest subnormal, -0, infinity, a NaN, the largest finite */
  static const uint16_t b16[] = {0x3f80, 0xc000, 0x0001, 0x8000, 0x7f80, 0xffc1, 0x7f7f};
  enum { NH = sizeof f16 / sizeof f16[0], NB = sizeof b16 / sizeof b16[0] };
  uint8_t data[1 + 2 * NH + 2 * NB + 4];
  float one = 1.5f;
  /* the F16 tensor at an odd offset (a header of odd length does that to whole files), an F32 after them */
  memcpy(data + 1, f16, sizeof f16);
  memcpy(data + 1 + sizeof f16, b16, sizeof b16);
  memcpy(data + 1 + sizeof f16 + sizeof b16, &one, 4);
  char h[400], p[600];
  snprintf(h, sizeof h,
           "{\"h\":{\"dtype\":\"F16\",\"shape\":[2,%d],\"data_offsets\":[1,%zu]},"
           "\"b\":{\"dtype\":\"BF16\",\"shape\":[%d],\"data_offsets\":[%zu,%zu]},"
           "\"f\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[%zu,%zu]}}",
           NH / 2, 1 + sizeof f16, NB, 1 + sizeof f16, 1 + sizeof f16 + sizeof b16, 1 + sizeof f16 + sizeof b16,
           sizeof data);
  snprintf(p, sizeof p, "%s/half.safetensors", tdir);
  make_raw(p, h, data, sizeof data);
  /* plain reads keep refusing them: strata's own checkpoints are F32 */
  strata_safetensors_t st = NULL;
  cr_assert_eq(strata_safetensors_read(p, &st), STRATA_ERR_UNSUPPORTED);
  cr_assert(strstr(strata_last_error(), "'h' has dtype F16; strata reads F32 only"), "%s", strata_last_error());
  cr_assert_eq(strata_safetensors_read_flags(p, 2, &st), STRATA_ERR_INVALID);
  OK(strata_safetensors_read_flags(p, STRATA_ST_READ_WIDEN, &st));
  const float *v;
  int ndim;
  int64_t shape[STRATA_ST_MAX_DIMS];
  enum strata_st_dtype dt;
  OK(strata_safetensors_get(st, "h", &ndim, shape, &v));
  OK(strata_safetensors_dtype(st, "h", &dt));
  cr_assert(ndim == 2 && shape[0] == 2 && shape[1] == NH / 2 && dt == STRATA_ST_F16);
  cr_assert_eq((uintptr_t)v % sizeof(float), 0);
  for (int i = 0; i < NH; i++)
    cr_assert_eq(bits_of(v[i]), f16_want[i], "F16 %04x: %08x, want %08x", f16[i], bits_of(v[i]), f16_want[i]);
  OK(strata_safetensors_get(st, "b", &ndim, shape, &v));
  OK(strata_safetensors_dtype(st, "b", &dt));
  cr_assert(ndim == 1 && shape[0] == NB && dt == STRATA_ST_BF16);
  for (int i = 0; i < NB; i++)
    cr_assert_eq(bits_of(v[i]), (uint32_t)b16[i] << 16, "BF16 %04x: %08x", b16[i], bits_of(v[i]));
  OK(strata_safetensors_get(st, "f", NULL, NULL, &v));
  OK(strata_safetensors_dtype(st, "f", &dt));
  cr_assert(v[0] == 1.5f && dt == STRATA_ST_F32);
  cr_assert_eq(strata_safetensors_dtype(st, "nope", &dt), STRATA_ERR_NOT_FOUND);
  strata_safetensors_free(st);
  /* every other dtype stays refused, naming the tensor and the dtype; a 16-bit tensor's size is checked at 2 bytes */
  static const struct {
    const char *header;
    size_t data;
    int status;
    const char *says;
  } cases[] = {
      {"{\"w\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}", 16, STRATA_ERR_UNSUPPORTED,
       "tensor 'w' has dtype I64; strata reads F32, BF16 and F16"},
      {"{\"w\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}", 16, STRATA_ERR_UNSUPPORTED, "dtype F64"},
      {"{\"w\":{\"dtype\":\"I8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2, STRATA_ERR_UNSUPPORTED, "dtype I8"},
      {"{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2, STRATA_ERR_UNSUPPORTED, "F8_E4M3"},
      {"{\"w\":{\"dtype\":\"bf16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, STRATA_ERR_UNSUPPORTED, "dtype bf16"},
      {"{\"w\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, STRATA_ERR_PARSE,
       "shape holds 2 BF16 values (4 bytes) but data_offsets [0, 8] span 8 bytes"},
      {"{\"w\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,4]}}", 4, STRATA_ERR_PARSE, "span 4 bytes"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    make_file(p, cases[i].header, 0, cases[i].data);
    st = NULL;
    int rc = strata_safetensors_read_flags(p, STRATA_ST_READ_WIDEN, &st);
    cr_assert_eq(rc, cases[i].status, "case %zu: %s (%s)", i, strata_err_name(rc), strata_last_error());
    cr_assert_null(st);
    cr_assert(strstr(strata_last_error(), cases[i].says), "case %zu: '%s' should say '%s'", i, strata_last_error(),
              cases[i].says);
  }
}

Test(checkpoint, bf16_writes_round_to_nearest_even) {
  /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even, 1; 1 + 3 * 2^-8 halfway up to 1 + 2^-6 (even);
  ** just above halfway rounds up; FLT_MAX overflows to infinity; a NaN stays one; float32 subnormals round as
  ** subnormals (0x00008000, half of bfloat16's smallest, ties to 0; 0x00018000 to 2 of them), -0 stays -0 */
  static const uint32_t in[] = {0x3f808000, 0x3f818000, 0x3f808001, 0x7f7fffff, 0x7fc00001, 0xffa00000,
                                0x00008000, 0x00018000, 0x00000001, 0x80000000, 0xbf800000, 0x3eaaaaab};
  static const uint16_t want[] = {0x3f80, 0x3f82, 0x3f81, 0x7f80, 0x7fc0, 0xffe0,
                                  0x0000, 0x0002, 0x0000, 0x8000, 0xbf80, 0x3eab};
  enum { N = sizeof in / sizeof in[0] };
  float x[N];
  memcpy(x, in, sizeof x);
  struct strata_st_tensor t = {.name = "x", .ndim = 2, .shape = {3, N / 3}, .data = x};
  struct strata_st_meta m = {"format", "pt"};
  OK(strata_safetensors_write_as(path, &t, 1, &m, 1, STRATA_ST_BF16));
  size_t size;
  uint8_t *bytes = slurp(path, &size);
  uint64_t hl = 0;
  for (int i = 0; i < 8; i++)
    hl |= (uint64_t)bytes[i] << (8 * i);
  cr_assert_eq(size, 8 + hl + sizeof want, "2 bytes an element");
  char *header = strndup((const char *)bytes + 8, (size_t)hl);
  cr_assert(header && strstr(header, "\"dtype\":\"BF16\""), "the header says BF16");
  free(header);
  cr_assert(memcmp(bytes + 8 + hl, want, sizeof want) == 0, "the rounded words");
  free(bytes);
  cr_assert(memcmp(x, in, sizeof x) == 0, "the caller's floats are not changed");
  strata_safetensors_t st;
  OK(strata_safetensors_read_flags(path, STRATA_ST_READ_WIDEN, &st));
  const float *v;
  OK(strata_safetensors_get(st, "x", NULL, NULL, &v));
  for (int i = 0; i < N; i++)
    cr_assert_eq(bits_of(v[i]), (uint32_t)want[i] << 16, "element %d", i);
  strata_safetensors_free(st);
  /* F32 through write_as is strata_safetensors_write, byte for byte; F16 is not written, nor an unknown dtype */
  char other[600];
  snprintf(other, sizeof other, "%s/f32.safetensors", tdir);
  OK(strata_safetensors_write_as(other, &t, 1, &m, 1, STRATA_ST_F32));
  OK(strata_safetensors_write(path, &t, 1, &m, 1));
  size_t n1, n2;
  uint8_t *a = slurp(path, &n1), *b = slurp(other, &n2);
  cr_assert(n1 == n2 && memcmp(a, b, n1) == 0);
  free(a);
  free(b);
  unlink(other);
  cr_assert_eq(strata_safetensors_write_as(other, &t, 1, &m, 1, STRATA_ST_F16), STRATA_ERR_UNSUPPORTED);
  cr_assert_eq(strata_safetensors_write_as(other, &t, 1, &m, 1, (enum strata_st_dtype)7), STRATA_ERR_INVALID);
  cr_assert_eq(access(other, F_OK), -1, "nothing written");
}
