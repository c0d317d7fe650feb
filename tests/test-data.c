/* SPDX-License-Identifier: MIT */
/* test-data.c — Criterion suite of the training data: text splits, windows, entropy, errors, nanoGPT and llm.c token
** files, the shapes task. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

/* A fresh temporary folder per test, removed with its files afterwards. */
static char tdir[64];

static void make_tdir(void) {
  strcpy(tdir, "/tmp/strata-test-data-XXXXXX");
  cr_assert_not_null(mkdtemp(tdir));
}

static void remove_tdir(void) { tc_remove_dir(tdir); }

/* Write n bytes to tdir/name and return the path (a static buffer per call site is not needed: one file at a time). */
static const char *write_file(const char *name, const void *bytes, size_t n) {
  static char path[512];
  snprintf(path, sizeof path, "%s/%s", tdir, name);
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f, "cannot create %s", path);
  cr_assert_eq(fwrite(bytes, 1, n, f), n);
  cr_assert_eq(fclose(f), 0);
  return path;
}

/* Status of strata_dataset_text, freeing the dataset when it succeeds. */
static int text_status(const char *path, double f) {
  strata_dataset_t ds = NULL;
  int rc = strata_dataset_text(path, f, &ds);
  cr_assert((rc == STRATA_OK) == (ds != NULL), "the dataset is returned exactly on success");
  strata_dataset_free(ds);
  return rc;
}

TestSuite(text, .init = make_tdir, .fini = remove_tdir);

/* 100 distinct bytes 0..99: a window's first byte is its start position. */
static strata_dataset_t counting_text(void) {
  uint8_t bytes[100];
  for (int i = 0; i < 100; i++)
    bytes[i] = (uint8_t)i;
  strata_dataset_t ds = NULL;
  OK(strata_dataset_text(write_file("count.bin", bytes, sizeof bytes), 0.1, &ds));
  return ds;
}

Test(text, split_sizes_and_info) {
  strata_dataset_t ds = counting_text();
  struct strata_dataset_info info;
  OK(strata_dataset_info(ds, &info));
  cr_assert_eq(info.kind, STRATA_DATA_TEXT);
  cr_assert_eq(info.train_size, 90);
  cr_assert_eq(info.val_size, 10);
  cr_assert_eq(info.vocab, 256);
  cr_assert(strstr(info.source, "count.bin"), "source names the file: %s", info.source);
  /* 90 distinct training bytes, each once: ln 90. */
  cr_assert_float_eq(info.unigram_entropy, log(90.0), 1e-12);
  strata_dataset_free(ds);
}

Test(text, windows_are_substrings_of_their_split) {
  strata_dataset_t ds = counting_text();
  enum { B = 64, C = 5 };
  int32_t in[B * C], tg[B * C];
  uint64_t state = 42;
  for (int split = 0; split < 2; split++) {
    OK(strata_dataset_sample(ds, split, B, C, &state, in, tg));
    for (int b = 0; b < B; b++) {
      int32_t s = in[b * C];
      if (split == STRATA_SPLIT_TRAIN)
        cr_assert(s >= 0 && s + C <= 89, "training window at %d leaves the split", s);
      else
        cr_assert(s >= 90 && s + C <= 99, "validation window at %d leaves the split", s);
      for (int k = 0; k < C; k++) {
        cr_assert_eq(in[b * C + k], s + k, "inputs are consecutive bytes");
        cr_assert_eq(tg[b * C + k], s + k + 1, "targets are the next byte");
      }
    }
  }
  strata_dataset_free(ds);
}

Test(text, every_start_is_drawn_about_equally) {
  strata_dataset_t ds = counting_text();
  enum { C = 5, DRAWS = 8500 };
  /* 90 training bytes and context 5: starts 0..84 are valid (85 of them), expected 100 draws each. */
  int counts[100] = {0};
  int32_t in[C], tg[C];
  uint64_t state = 7;
  for (int i = 0; i < DRAWS; i++) {
    OK(strata_dataset_sample(ds, STRATA_SPLIT_TRAIN, 1, C, &state, in, tg));
    counts[in[0]]++;
  }
  for (int s = 0; s < 100; s++) {
    if (s <= 84)
      cr_assert(counts[s] > 55 && counts[s] < 150, "start %d drawn %d times (expected about 100)", s, counts[s]);
    else
      cr_assert_eq(counts[s], 0, "start %d is not a valid window", s);
  }
  /* The validation split of 10 bytes has 5 starts for context 5, the shortest has 1 for context 9. */
  int seen[100] = {0};
  for (int i = 0; i < 200; i++) {
    OK(strata_dataset_sample(ds, STRATA_SPLIT_VAL, 1, C, &state, in, tg));
    seen[in[0]]++;
  }
  for (int s = 90; s <= 94; s++)
    cr_assert(seen[s] > 0, "validation start %d never drawn", s);
  int32_t in9[9], tg9[9];
  OK(strata_dataset_sample(ds, STRATA_SPLIT_VAL, 1, 9, &state, in9, tg9));
  cr_assert_eq(in9[0], 90);
  cr_assert_eq(tg9[8], 99);
  strata_dataset_free(ds);
}

Test(text, entropy_of_hand_made_files) {
  static const struct {
    const char *text;
    double val, expect;
  } cases[] = {
      {"aabbxy", 1.0 / 3, 0.69314718055994531},                 /* "aabb": ln 2 */
      {"aaaaxy", 1.0 / 3, 0.0},                                 /* one symbol */
      {"abcdxy", 1.0 / 3, 1.3862943611198906},                  /* ln 4 */
      {"aaabxy", 1.0 / 3, 0.56233514461880829},                 /* -(3/4 ln 3/4 + 1/4 ln 1/4) */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    strata_dataset_t ds = NULL;
    OK(strata_dataset_text(write_file("h.txt", cases[i].text, strlen(cases[i].text)), cases[i].val, &ds));
    struct strata_dataset_info info;
    OK(strata_dataset_info(ds, &info));
    cr_assert_eq(info.train_size, 4);
    cr_assert_eq(info.val_size, 2);
    cr_assert_float_eq(info.unigram_entropy, cases[i].expect, 1e-12, "%s: %.17g", cases[i].text,
                       info.unigram_entropy);
    strata_dataset_free(ds);
  }
}

Test(text, same_state_same_batch_and_state_advances) {
  strata_dataset_t ds = counting_text();
  enum { B = 16, C = 4 };
  int32_t in1[B * C], tg1[B * C], in2[B * C], tg2[B * C];
  for (uint64_t seed = 0; seed < 3; seed++) { /* 0 included: it must not stall the generator */
    uint64_t s1 = seed, s2 = seed;
    OK(strata_dataset_sample(ds, STRATA_SPLIT_TRAIN, B, C, &s1, in1, tg1));
    OK(strata_dataset_sample(ds, STRATA_SPLIT_TRAIN, B, C, &s2, in2, tg2));
    cr_assert_eq(s1, s2);
    cr_assert_neq(s1, seed, "the state advances");
    cr_assert_neq(s1, 0, "the state never becomes 0");
    cr_assert_arr_eq(in1, in2, sizeof in1);
    cr_assert_arr_eq(tg1, tg2, sizeof tg1);
    /* The next batch from the advanced state is another one. */
    OK(strata_dataset_sample(ds, STRATA_SPLIT_TRAIN, B, C, &s1, in2, tg2));
    cr_assert(memcmp(in1, in2, sizeof in1) != 0, "consecutive batches differ");
    /* Not all windows of a batch start at the same place. */
    int distinct = 0;
    for (int b = 1; b < B; b++)
      distinct += in1[b * C] != in1[0];
    cr_assert_gt(distinct, 0);
  }
  strata_dataset_free(ds);
}

Test(text, default_corpus) {
  struct stat sb;
  if (stat("/usr/share/common-licenses", &sb) != 0)
    cr_skip_test("/usr/share/common-licenses is absent on this machine");
  strata_dataset_t ds = NULL;
  OK(strata_dataset_text(NULL, 0.1, &ds));
  struct strata_dataset_info info;
  OK(strata_dataset_info(ds, &info));
  cr_assert(strstr(info.source, "common-licenses"), "source: %s", info.source);
  cr_assert_gt(info.train_size, 100000, "train %llu bytes", (unsigned long long)info.train_size);
  double total = (double)(info.train_size + info.val_size);
  cr_assert(fabs(info.val_size - 0.1 * total) <= 1, "validation is 10%%");
  /* English text: about 4.2 bits, 2.9 nats, per byte. */
  cr_assert(info.unigram_entropy > 2.5 && info.unigram_entropy < 3.5, "entropy %g nats", info.unigram_entropy);
  cr_log_info("default corpus: %s, %llu + %llu bytes, unigram entropy %.4f nats", info.source,
              (unsigned long long)info.train_size, (unsigned long long)info.val_size, info.unigram_entropy);
  int32_t in[4 * 64], tg[4 * 64];
  uint64_t state = 1;
  OK(strata_dataset_sample(ds, STRATA_SPLIT_VAL, 4, 64, &state, in, tg));
  for (int i = 0; i < 4 * 64; i++)
    cr_assert(in[i] >= 0 && in[i] < 256 && tg[i] >= 0 && tg[i] < 256);
  strata_dataset_free(ds);
}

Test(text, bad_files_are_named) {
  char missing[128];
  snprintf(missing, sizeof missing, "%s/no-such-file.txt", tdir);
  cr_assert_eq(text_status(missing, 0.1), STRATA_ERR_IO);
  cr_assert(strstr(strata_last_error(), missing), "message: %s", strata_last_error());
  cr_assert_eq(text_status(tdir, 0.1), STRATA_ERR_IO, "a directory is not a text file");
  cr_assert(strstr(strata_last_error(), tdir), "message: %s", strata_last_error());

  const char *empty = write_file("empty.txt", "", 0);
  cr_assert_eq(text_status(empty, 0.1), STRATA_ERR_INVALID);
  cr_assert(strstr(strata_last_error(), "empty.txt") && strstr(strata_last_error(), "empty"), "message: %s",
            strata_last_error());

  /* 3 bytes: 10% of them rounds to 0 validation bytes; 14 bytes give 1 (fewer than 2); 15 bytes give 2. */
  cr_assert_eq(text_status(write_file("short.txt", "abc", 3), 0.1), STRATA_ERR_INVALID);
  cr_assert(strstr(strata_last_error(), "short.txt"), "message: %s", strata_last_error());
  cr_assert_eq(text_status(write_file("14.txt", "abcdefghijklmn", 14), 0.1), STRATA_ERR_INVALID);
  cr_assert_eq(text_status(write_file("15.txt", "abcdefghijklmno", 15), 0.1), STRATA_OK);
  /* A large validation fraction starves the training split instead. */
  cr_assert_eq(text_status(write_file("20.txt", "abcdefghijklmnopqrst", 20), 0.95), STRATA_ERR_INVALID);

  const char *good = write_file("good.txt", "hello, world", 12);
  const double bad_fractions[] = {0.0, 1.0, -0.5, 1.5, NAN, INFINITY};
  for (size_t i = 0; i < sizeof bad_fractions / sizeof bad_fractions[0]; i++) {
    cr_assert_eq(text_status(good, bad_fractions[i]), STRATA_ERR_INVALID, "fraction %g", bad_fractions[i]);
    cr_assert(strstr(strata_last_error(), "good.txt"), "message: %s", strata_last_error());
  }
  cr_assert_eq(strata_dataset_text(good, 0.1, NULL), STRATA_ERR_INVALID);
}

Test(text, bad_sample_arguments_leave_the_state) {
  /* 20 bytes, validation 2: context 1 fits the validation split, context 2 does not. */
  strata_dataset_t ds = NULL;
  OK(strata_dataset_text(write_file("20.txt", "abcdefghijklmnopqrst", 20), 0.1, &ds));
  int32_t in[64], tg[64];
  uint64_t state = 99;
  OK(strata_dataset_sample(ds, STRATA_SPLIT_VAL, 2, 1, &state, in, tg));
  cr_assert_eq(in[0], 's');
  cr_assert_eq(tg[0], 't');
  uint64_t before = state;
  cr_assert_eq(strata_dataset_sample(ds, STRATA_SPLIT_VAL, 1, 2, &state, in, tg), STRATA_ERR_INVALID);
  cr_assert(strstr(strata_last_error(), "20.txt") && strstr(strata_last_error(), "validation"), "message: %s",
            strata_last_error());
  cr_assert_eq(strata_dataset_sample(ds, STRATA_SPLIT_TRAIN, 1, 18, &state, in, tg), STRATA_ERR_INVALID);
  OK(strata_dataset_sample(ds, STRATA_SPLIT_TRAIN, 1, 17, &state, in, tg));
  before = state;
  cr_assert_eq(strata_dataset_sample(ds, STRATA_SPLIT_TRAIN, 0, 4, &state, in, tg), STRATA_ERR_INVALID);
  cr_assert_eq(strata_dataset_sample(ds, STRATA_SPLIT_TRAIN, 1, 0, &state, in, tg), STRATA_ERR_INVALID);
  cr_assert_eq(strata_dataset_sample(ds, 2, 1, 4, &state, in, tg), STRATA_ERR_INVALID);
  cr_assert_eq(strata_dataset_sample(ds, STRATA_SPLIT_TRAIN, 1, 4, NULL, in, tg), STRATA_ERR_INVALID);
  cr_assert_eq(strata_dataset_sample(ds, STRATA_SPLIT_TRAIN, 1, 4, &state, NULL, tg), STRATA_ERR_INVALID);
  cr_assert_eq(strata_dataset_sample(ds, STRATA_SPLIT_TRAIN, 1, 4, &state, in, NULL), STRATA_ERR_INVALID);
  cr_assert_eq(strata_dataset_sample(NULL, STRATA_SPLIT_TRAIN, 1, 4, &state, in, tg), STRATA_ERR_INVALID);
  cr_assert_eq(strata_dataset_sample(ds, STRATA_SPLIT_TRAIN, INT64_MAX, INT64_MAX, &state, in, tg),
               STRATA_ERR_INVALID);
  cr_assert_eq(state, before, "a refused call does not move the stream");
  cr_assert_eq(strata_dataset_info(ds, NULL), STRATA_ERR_INVALID);
  cr_assert_eq(strata_dataset_info(NULL, &(struct strata_dataset_info){0}), STRATA_ERR_INVALID);
  strata_dataset_free(ds);
  strata_dataset_free(NULL);
}

/* ---------------------------------------------------------------- images */

static int image_status(int64_t count, int64_t size, int64_t classes) {
  strata_dataset_t ds = NULL;
  int rc = strata_dataset_images(count, size, classes, 1, &ds);
  cr_assert((rc == STRATA_OK) == (ds != NULL));
  strata_dataset_free(ds);
  return rc;
}

Test(images, bad_arguments) {
  cr_assert_eq(image_status(9, 16, 4), STRATA_ERR_INVALID);
  cr_assert_eq(image_status(-1, 16, 4), STRATA_ERR_INVALID);
  cr_assert_eq(image_status(10, 7, 4), STRATA_ERR_INVALID);
  cr_assert_eq(image_status(10, 1025, 4), STRATA_ERR_INVALID);
  cr_assert_eq(image_status(10, 16, 1), STRATA_ERR_INVALID);
  cr_assert_eq(image_status(10, 16, 9), STRATA_ERR_INVALID);
  cr_assert(strstr(strata_last_error(), "9 classes"), "message: %s", strata_last_error());
  cr_assert_eq(strata_dataset_images(10, 16, 4, 1, NULL), STRATA_ERR_INVALID);
  /* The extremes of each range are accepted. */
  cr_assert_eq(image_status(10, 8, 2), STRATA_OK);
  cr_assert_eq(image_status(10, 64, 8), STRATA_OK);
  cr_assert_eq(image_status(10, 1024, 8), STRATA_OK);
  cr_assert_eq(image_status(16, 8, 8), STRATA_OK);
}

/* Above 64 pixels a side the images are drawn when sampled: the same draws give the same pixels and labels (a batch
** drawn on several threads those of its images drawn one at a time), about zero-mean and unit-scale as the kept ones,
** and the labels of a split stay balanced. */
Test(images, large_ones_are_drawn_when_sampled) {
  strata_dataset_t ds = NULL;
  OK(strata_dataset_images(200, 256, 4, 9, &ds));
  const int64_t B = 24, npix = 256 * 256;
  float *a = malloc((size_t)(B * npix) * sizeof *a), *b = malloc((size_t)(B * npix) * sizeof *b);
  int32_t la[24], lb[24];
  uint64_t s1 = 77, s2 = 77;
  OK(strata_dataset_sample(ds, STRATA_SPLIT_TRAIN, B, 0, &s1, a, la));
  OK(strata_dataset_sample(ds, STRATA_SPLIT_TRAIN, B, 0, &s2, b, lb));
  cr_assert_eq(memcmp(a, b, (size_t)(B * npix) * sizeof *a), 0, "the same draws gave other pixels");
  cr_assert_eq(memcmp(la, lb, sizeof la), 0);
  /* a batch is drawn on several threads: image by image, from the same stream, on the caller's alone, the same */
  uint64_t s3 = 77;
  for (int64_t i = 0; i < B; i++) {
    int32_t l;
    OK(strata_dataset_sample(ds, STRATA_SPLIT_TRAIN, 1, 0, &s3, b + i * npix, &l));
    cr_assert_eq(l, la[i], "image %lld's label", (long long)i);
  }
  cr_assert_eq(s3, s1, "one batch of %lld and %lld batches of one left the stream in other places", (long long)B,
               (long long)B);
  cr_assert_eq(memcmp(a, b, (size_t)(B * npix) * sizeof *a), 0, "images drawn one at a time differ from the batch's");
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < B * npix; i++) {
    sum += a[i];
    sq += (double)a[i] * a[i];
  }
  const double mean = sum / (double)(B * npix), var = sq / (double)(B * npix) - mean * mean;
  cr_assert_lt(fabs(mean), 0.1, "mean %.4f", mean);
  cr_assert(var > 0.8 && var < 1.25, "variance %.4f", var);
  int seen[4] = {0};
  for (int i = 0; i < B; i++) {
    cr_assert(la[i] >= 0 && la[i] < 4);
    seen[la[i]]++;
  }
  for (int k = 0; k < 4; k++)
    cr_assert_gt(seen[k], 0, "class %d never drawn in %lld images", k, (long long)B);
  free(a);
  free(b);
  strata_dataset_free(ds);
}

Test(images, info_and_pixel_scale) {
  strata_dataset_t ds = NULL;
  OK(strata_dataset_images(1000, 16, 8, 3, &ds));
  struct strata_dataset_info info;
  OK(strata_dataset_info(ds, &info));
  cr_assert_eq(info.kind, STRATA_DATA_IMAGES);
  cr_assert_eq(info.train_size, 900);
  cr_assert_eq(info.val_size, 100);
  cr_assert_eq(info.vocab, 8);
  cr_assert_eq(info.image, 16);
  cr_assert_eq(info.channels, 1);
  cr_assert(strstr(info.source, "synthetic shapes"), "source: %s", info.source);
  enum { B = 200, P = 256 };
  static float x[B * P];
  int32_t y[B];
  uint64_t state = 5;
  OK(strata_dataset_sample(ds, STRATA_SPLIT_TRAIN, B, 0, &state, x, y));
  double sum = 0, sq = 0;
  for (int i = 0; i < B * P; i++) {
    cr_assert(isfinite(x[i]));
    sum += x[i];
    sq += (double)x[i] * x[i];
  }
  double mean = sum / (B * P), sd = sqrt(sq / (B * P) - mean * mean);
  cr_assert(fabs(mean) < 0.1 && sd > 0.9 && sd < 1.1, "pixels: mean %g, sd %g", mean, sd);
  for (int b = 0; b < B; b++)
    cr_assert(y[b] >= 0 && y[b] < 8);
  strata_dataset_free(ds);
}

Test(images, labels_are_balanced) {
  for (int split = 0; split < 2; split++) {
    strata_dataset_t ds = NULL;
    OK(strata_dataset_images(800, 8, 8, 11, &ds));
    enum { B = 4000 };
    static float x[B * 64];
    int32_t y[B];
    uint64_t state = 17;
    OK(strata_dataset_sample(ds, split, B, 0, &state, x, y));
    int counts[8] = {0};
    for (int b = 0; b < B; b++)
      counts[y[b]]++;
    /* 500 expected per class; the split itself is balanced, so only sampling noise (sd about 21) remains. */
    for (int c = 0; c < 8; c++)
      cr_assert(counts[c] > 400 && counts[c] < 600, "split %d class %d drawn %d times", split, c, counts[c]);
    strata_dataset_free(ds);
  }
}

Test(images, deterministic_for_a_seed) {
  strata_dataset_t a = NULL, b = NULL, c = NULL;
  OK(strata_dataset_images(100, 12, 5, 1234, &a));
  OK(strata_dataset_images(100, 12, 5, 1234, &b));
  OK(strata_dataset_images(100, 12, 5, 1235, &c));
  enum { B = 50, P = 144 };
  static float xa[B * P], xb[B * P], xc[B * P];
  int32_t ya[B], yb[B], yc[B];
  uint64_t sa = 0, sb = 0, sc = 0;
  OK(strata_dataset_sample(a, STRATA_SPLIT_TRAIN, B, 0, &sa, xa, ya));
  OK(strata_dataset_sample(b, STRATA_SPLIT_TRAIN, B, 0, &sb, xb, yb));
  OK(strata_dataset_sample(c, STRATA_SPLIT_TRAIN, B, 0, &sc, xc, yc));
  cr_assert_eq(sa, sb);
  cr_assert_arr_eq(xa, xb, sizeof xa, "same seed, same state: same images");
  cr_assert_arr_eq(ya, yb, sizeof ya);
  cr_assert(memcmp(xa, xc, sizeof xa) != 0, "another seed gives other images");
  /* Same state, advanced: another batch. */
  OK(strata_dataset_sample(a, STRATA_SPLIT_TRAIN, B, 0, &sa, xb, yb));
  cr_assert(memcmp(xa, xb, sizeof xa) != 0);
  strata_dataset_free(a);
  strata_dataset_free(b);
  strata_dataset_free(c);
}

/*
** Nearest class mean on raw pixels: the class means from a training sample,
** then each validation image takes the class of the closest mean. Accuracy
** clearly above chance shows learnable structure; the shapes move and vary
** in size, so a template classifier stays far from perfect.
*/
static double nearest_mean_accuracy(int64_t size, int64_t classes, uint64_t seed) {
  strata_dataset_t ds = NULL;
  OK(strata_dataset_images(2000, size, classes, seed, &ds));
  const int64_t P = size * size, B = 3000, V = 600;
  float *x = malloc((size_t)(B * P) * sizeof *x);
  int32_t *y = malloc((size_t)B * sizeof *y);
  double *mean = calloc((size_t)(classes * P), sizeof *mean);
  int64_t counts[8] = {0};
  cr_assert(x && y && mean);
  uint64_t state = seed;
  OK(strata_dataset_sample(ds, STRATA_SPLIT_TRAIN, B, 0, &state, x, y));
  for (int64_t b = 0; b < B; b++) {
    counts[y[b]]++;
    for (int64_t p = 0; p < P; p++)
      mean[y[b] * P + p] += x[b * P + p];
  }
  for (int64_t c = 0; c < classes; c++)
    for (int64_t p = 0; p < P; p++)
      mean[c * P + p] /= (double)(counts[c] ? counts[c] : 1);
  OK(strata_dataset_sample(ds, STRATA_SPLIT_VAL, V, 0, &state, x, y));
  int64_t right = 0;
  for (int64_t b = 0; b < V; b++) {
    double best = INFINITY;
    int64_t arg = -1;
    for (int64_t c = 0; c < classes; c++) {
      double d = 0;
      for (int64_t p = 0; p < P; p++) {
        double e = x[b * P + p] - mean[c * P + p];
        d += e * e;
      }
      if (d < best) {
        best = d;
        arg = c;
      }
    }
    right += arg == y[b];
  }
  free(x);
  free(y);
  free(mean);
  strata_dataset_free(ds);
  return (double)right / (double)V;
}

Test(images, nearest_class_mean_beats_chance) {
  static const struct {
    int64_t size, classes;
  } cases[] = {{8, 8}, {16, 8}, {16, 4}, {32, 8}, {16, 2}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    double acc = nearest_mean_accuracy(cases[i].size, cases[i].classes, 21 + i);
    double chance = 1.0 / (double)cases[i].classes;
    cr_log_info("nearest class mean, %lldx%lld, %lld classes: %.3f (chance %.3f)", (long long)cases[i].size,
                (long long)cases[i].size, (long long)cases[i].classes, acc, chance);
    /* 600 validation images: chance + 0.15 is at least 7 standard deviations above chance for every case. */
    cr_assert(acc > chance + 0.15, "%lldx%lld, %lld classes: accuracy %.3f",
              (long long)cases[i].size, (long long)cases[i].size, (long long)cases[i].classes, acc);
  }
}

/* ---------------------------------------------------------------- token files */

TestSuite(tokens, .init = make_tdir, .fini = remove_tdir);

/* n tokens as a nanoGPT file (raw little-endian uint16), or with llm.c's header; the bytes in a malloc'd buffer. */
static uint8_t *token_bytes(const uint16_t *tok, size_t n, int llmc, size_t *len) {
  size_t head = llmc ? 1024 : 0;
  uint8_t *b = calloc(head + 2 * n + 1, 1);
  cr_assert_not_null(b);
  if (llmc) {
    uint32_t f[3] = {20240520u, 1u, (uint32_t)n};
    for (int k = 0; k < 3; k++)
      for (int i = 0; i < 4; i++)
        b[4 * k + i] = (uint8_t)(f[k] >> (8 * i));
  }
  for (size_t i = 0; i < n; i++) {
    b[head + 2 * i] = (uint8_t)(tok[i] & 0xff);
    b[head + 2 * i + 1] = (uint8_t)(tok[i] >> 8);
  }
  *len = head + 2 * n;
  return b;
}

/* Status of strata_dataset_tokens; the message is kept in `msg`. */
static int tokens_status(const char *path, int format, int64_t vocab, char *msg, size_t size) {
  strata_dataset_t ds = NULL;
  int rc = strata_dataset_tokens(path, format, vocab, 0.1, &ds);
  cr_assert((rc == STRATA_OK) == (ds != NULL), "the dataset is returned exactly on success");
  snprintf(msg, size, "%s", rc ? strata_last_error() : "");
  strata_dataset_free(ds);
  return rc;
}

Test(tokens, both_formats_give_the_same_windows_of_the_written_ids) {
  enum { N = 5000, CTX = 16, B = 8 };
  static uint16_t tok[N];
  for (size_t i = 0; i < N; i++)
    tok[i] = (uint16_t)((i * 7919u + 13u) % 50257u); /* ids across GPT-2's whole vocabulary */
  for (int llmc = 0; llmc < 2; llmc++) {
    size_t len;
    uint8_t *bytes = token_bytes(tok, N, llmc, &len);
    const char *path = write_file(llmc ? "t.llmc.bin" : "t.raw.bin", bytes, len);
    for (int format = 0; format < 2; format++) { /* detected, then named */
      strata_dataset_t ds;
      OK(strata_dataset_tokens(path, format ? (llmc ? STRATA_TOKENS_LLMC : STRATA_TOKENS_U16) : STRATA_TOKENS_AUTO,
                               50257, 0.1, &ds));
      struct strata_dataset_info info;
      OK(strata_dataset_info(ds, &info));
      cr_assert_eq(info.kind, STRATA_DATA_TEXT);
      cr_assert_eq(info.vocab, 50257);
      cr_assert_eq(info.train_size, N - 500);
      cr_assert_eq(info.val_size, 500);
      cr_assert(strstr(info.source, llmc ? "llm.c tokens" : "nanoGPT uint16 tokens"), "%s", info.source);
      cr_assert(info.unigram_entropy > 8, "entropy %g", info.unigram_entropy);
      int32_t in[B * CTX], tg[B * CTX];
      uint64_t state = 7;
      OK(strata_dataset_sample(ds, STRATA_SPLIT_TRAIN, B, CTX, &state, in, tg));
      for (int b = 0; b < B; b++) {
        /* find the window among the written ids: its first id fixes the start (the sequence has period 50257) */
        size_t start = N;
        for (size_t i = 0; i + CTX < N - 500 + 1 && start == N; i++)
          if (tok[i] == in[b * CTX] && tok[i + 1] == in[b * CTX + 1])
            start = i;
        cr_assert_neq(start, N, "window %d is not in the training split", b);
        for (int k = 0; k < CTX; k++) {
          cr_assert_eq(in[b * CTX + k], tok[start + k]);
          cr_assert_eq(tg[b * CTX + k], tok[start + k + 1]);
        }
      }
      /* validation windows come from the last 500 ids */
      OK(strata_dataset_sample(ds, STRATA_SPLIT_VAL, B, CTX, &state, in, tg));
      for (int b = 0; b < B; b++) {
        int found = 0;
        for (size_t i = N - 500; i + CTX < N && !found; i++)
          found = tok[i] == in[b * CTX] && tok[i + CTX] == tg[b * CTX + CTX - 1];
        cr_assert(found, "validation window %d is not in the validation split", b);
      }
      strata_dataset_free(ds);
    }
    free(bytes);
  }
}

Test(tokens, detection_by_content) {
  int f = -1;
  uint16_t tok[4] = {1, 2, 300, 4};
  size_t len;
  uint8_t *b = token_bytes(tok, 4, 1, &len);
  OK(strata_token_format_detect(write_file("a.bin", b, len), &f));
  cr_assert_eq(f, STRATA_TOKENS_LLMC);
  free(b);
  b = token_bytes(tok, 4, 0, &len);
  OK(strata_token_format_detect(write_file("b.bin", b, len), &f));
  cr_assert_eq(f, STRATA_TOKENS_U16);
  free(b);
  OK(strata_token_format_detect(write_file("c.txt", "plain text, no NUL\n", 19), &f));
  cr_assert_eq(f, STRATA_TOKENS_BYTES);
  /* text read through strata_dataset_tokens is bytes, as strata_dataset_text reads it */
  strata_dataset_t ds;
  OK(strata_dataset_tokens(write_file("d.txt", "abcdefghijklmnopqrstuvwxyz", 26), STRATA_TOKENS_AUTO, 300, 0.2, &ds));
  struct strata_dataset_info info;
  OK(strata_dataset_info(ds, &info));
  cr_assert_eq(info.train_size + info.val_size, 26);
  cr_assert_eq(info.vocab, 300);
  strata_dataset_free(ds);
}

Test(tokens, bad_files_are_one_clear_error) {
  char msg[512];
  uint16_t tok[64];
  for (int i = 0; i < 64; i++)
    tok[i] = (uint16_t)(i * 5);
  size_t len;
  uint8_t *raw = token_bytes(tok, 64, 0, &len);
  /* an odd byte count */
  cr_assert_eq(tokens_status(write_file("odd.bin", raw, 127), STRATA_TOKENS_U16, 512, msg, sizeof msg), STRATA_ERR_PARSE);
  cr_assert(strstr(msg, "odd.bin") && strstr(msg, "127 bytes, an odd count"), "%s", msg);
  cr_assert_eq(tokens_status(write_file("odd2.bin", raw, 127), STRATA_TOKENS_AUTO, 512, msg, sizeof msg), STRATA_ERR_PARSE);
  /* an id at or above the vocabulary, named by position */
  cr_assert_eq(tokens_status(write_file("range.bin", raw, len), STRATA_TOKENS_U16, 300, msg, sizeof msg), STRATA_ERR_RANGE);
  cr_assert(strstr(msg, "token 300 at position 60 (byte offset 120)"), "%s", msg);
  free(raw);
  uint8_t *l = token_bytes(tok, 64, 1, &len);
  /* truncated inside the header, and inside the tokens */
  cr_assert_eq(tokens_status(write_file("short.bin", l, 1000), STRATA_TOKENS_LLMC, 512, msg, sizeof msg), STRATA_ERR_PARSE);
  cr_assert(strstr(msg, "shorter than the 1024-byte llm.c header"), "%s", msg);
  cr_assert_eq(tokens_status(write_file("cut.bin", l, len - 20), STRATA_TOKENS_AUTO, 512, msg, sizeof msg), STRATA_ERR_PARSE);
  cr_assert(strstr(msg, "says 64 tokens (128 bytes), the file holds 108 bytes after it (truncated?)"), "%s", msg);
  /* a wrong magic, a wrong version, uint32 tokens */
  l[0] ^= 1;
  cr_assert_eq(tokens_status(write_file("magic.bin", l, len), STRATA_TOKENS_LLMC, 512, msg, sizeof msg), STRATA_ERR_PARSE);
  cr_assert(strstr(msg, "wrong magic 20240521"), "%s", msg);
  l[0] ^= 1;
  l[4] = 7; /* the uint32 header's version under the uint16 header's magic */
  cr_assert_eq(tokens_status(write_file("version.bin", l, len), STRATA_TOKENS_AUTO, 512, msg, sizeof msg),
               STRATA_ERR_UNSUPPORTED);
  cr_assert(strstr(msg, "magic 20240520 with version 7"), "%s", msg);
  l[4] = 2;
  cr_assert_eq(tokens_status(write_file("v2.bin", l, len), STRATA_TOKENS_AUTO, 512, msg, sizeof msg),
               STRATA_ERR_UNSUPPORTED);
  l[4] = 1;
  cr_assert_eq(tokens_status(write_file("ok.bin", l, len), STRATA_TOKENS_AUTO, 512, msg, sizeof msg), STRATA_OK);
  /* a header with no tokens, an empty file, a missing one, too few tokens to split */
  cr_assert_eq(tokens_status(write_file("none.bin", l, 1024), STRATA_TOKENS_LLMC, 512, msg, sizeof msg), STRATA_ERR_PARSE);
  free(l);
  cr_assert_eq(tokens_status(write_file("empty.bin", "", 0), STRATA_TOKENS_U16, 512, msg, sizeof msg), STRATA_ERR_INVALID);
  cr_assert_eq(tokens_status("/nonexistent/t.bin", STRATA_TOKENS_U16, 512, msg, sizeof msg), STRATA_ERR_IO);
  cr_assert_eq(tokens_status(write_file("two.bin", "\1\0\2\0", 4), STRATA_TOKENS_U16, 512, msg, sizeof msg),
               STRATA_ERR_INVALID);
  /* bad arguments */
  cr_assert_eq(tokens_status(write_file("x.bin", "\1\0\2\0", 4), 9, 512, msg, sizeof msg), STRATA_ERR_INVALID);
  cr_assert_eq(tokens_status(write_file("x.bin", "\1\0\2\0", 4), STRATA_TOKENS_U16, 2000000, msg, sizeof msg),
               STRATA_ERR_INVALID);
}

/* n uint32 tokens, raw or with llm.c's Llama 3 header (magic 20240801, version `version`), in a malloc'd buffer. */
static uint8_t *token_bytes32(const uint32_t *tok, size_t n, int llmc, uint32_t version, size_t *len) {
  size_t head = llmc ? 1024 : 0;
  uint8_t *b = calloc(head + 4 * n + 1, 1);
  cr_assert_not_null(b);
  uint32_t f[3] = {20240801u, version, (uint32_t)n};
  for (int k = 0; llmc && k < 3; k++)
    for (int i = 0; i < 4; i++)
      b[4 * k + i] = (uint8_t)(f[k] >> (8 * i));
  for (size_t i = 0; i < n; i++)
    for (int k = 0; k < 4; k++)
      b[head + 4 * i + (size_t)k] = (uint8_t)(tok[i] >> (8 * k));
  *len = head + 4 * n;
  return b;
}

/* Issue 33, item 5: uint32 ids past 65,535 (Llama 3's 128,256 words), raw (named: never guessed) and with llm.c's
** header (found by its magic), give back exactly the written ids; an id at the vocabulary is refused by position and
** byte offset; a version other than 7 under the uint32 magic is refused naming it. */
Test(tokens, uint32_ids_raw_and_llmc_give_the_written_ids) {
  enum { N = 3000, CTX = 12, B = 6, V = 128256 };
  static uint32_t tok[N];
  for (size_t i = 0; i < N; i++)
    tok[i] = (uint32_t)((i * 104729u + 7u) % V);
  for (int llmc = 0; llmc < 2; llmc++) {
    size_t len;
    uint8_t *bytes = token_bytes32(tok, N, llmc, 7, &len);
    const char *path = write_file(llmc ? "t32.llmc.bin" : "t32.raw.bin", bytes, len);
    int detected = -1;
    OK(strata_token_format_detect(path, &detected));
    cr_assert_eq(detected, llmc ? STRATA_TOKENS_LLMC : STRATA_TOKENS_U16, "raw uint32 is never guessed");
    strata_dataset_t ds;
    OK(strata_dataset_tokens(path, llmc ? STRATA_TOKENS_AUTO : STRATA_TOKENS_U32, V, 0.1, &ds));
    struct strata_dataset_info info;
    OK(strata_dataset_info(ds, &info));
    cr_assert_eq(info.train_size, N - 300);
    cr_assert_eq(info.val_size, 300);
    cr_assert(strstr(info.source, llmc ? "llm.c tokens" : "raw uint32 tokens"), "%s", info.source);
    int32_t in[B * CTX], tg[B * CTX];
    uint64_t state = 11;
    OK(strata_dataset_sample(ds, STRATA_SPLIT_TRAIN, B, CTX, &state, in, tg));
    int above = 0;
    for (int b = 0; b < B; b++) {
      size_t start = N;
      for (size_t i = 0; i + CTX < N - 300 + 1 && start == N; i++)
        if (tok[i] == (uint32_t)in[b * CTX])
          start = i; /* the ids are distinct: 104729 is prime to 128256 */
      cr_assert_neq(start, N, "window %d is not in the training split", b);
      for (int k = 0; k < CTX; k++) {
        cr_assert_eq((uint32_t)in[b * CTX + k], tok[start + k]);
        cr_assert_eq((uint32_t)tg[b * CTX + k], tok[start + k + 1]);
        above += in[b * CTX + k] > 65535;
      }
    }
    cr_assert(above > 0, "some ids past 65535 were drawn");
    strata_dataset_free(ds);
    /* an id equal to the vocabulary: position 2000, its byte offset in the file */
    char msg[512];
    cr_assert_eq(tokens_status(path, llmc ? STRATA_TOKENS_LLMC : STRATA_TOKENS_U32, tok[2000], msg, sizeof msg),
                 STRATA_ERR_RANGE);
    /* the first id at or above it is the one named */
    char want[128] = "";
    for (size_t i = 0; i <= 2000 && !want[0]; i++)
      if (tok[i] >= tok[2000])
        snprintf(want, sizeof want, "token %u at position %zu (byte offset %zu)", (unsigned)tok[i], i,
                 (llmc ? (size_t)1024 : 0) + 4 * i);
    cr_assert(strstr(msg, want), "%s (want %s)", msg, want);
    free(bytes);
  }
  /* llm.c: another version under the uint32 magic, a token count of uint16 size, a raw file cut mid-token */
  char msg[512];
  size_t len;
  uint8_t *b = token_bytes32(tok, 64, 1, 2, &len);
  cr_assert_eq(tokens_status(write_file("v2.bin", b, len), STRATA_TOKENS_AUTO, V, msg, sizeof msg),
               STRATA_ERR_UNSUPPORTED);
  cr_assert(strstr(msg, "magic 20240801 with version 2") && strstr(msg, "v2.bin"), "%s", msg);
  b[4] = 7;
  b[8] = 128; /* the header says 128 tokens: 512 bytes, the file holds 256 */
  cr_assert_eq(tokens_status(write_file("count.bin", b, len), STRATA_TOKENS_AUTO, V, msg, sizeof msg), STRATA_ERR_PARSE);
  cr_assert(strstr(msg, "says 128 tokens (512 bytes), the file holds 256 bytes after it (truncated?)"), "%s", msg);
  free(b);
  b = token_bytes32(tok, 64, 0, 0, &len);
  cr_assert_eq(tokens_status(write_file("cut32.bin", b, len - 1), STRATA_TOKENS_U32, V, msg, sizeof msg),
               STRATA_ERR_PARSE);
  cr_assert(strstr(msg, "255 bytes, not a multiple of 4"), "%s", msg);
  free(b);
}

/* A raw uint16 training file beside an llm.c uint32 validation file (each found by its content): one buffer as wide
** as the wider, every id as written. */
Test(tokens, a_uint16_train_file_and_a_uint32_val_file_split) {
  enum { N = 400, CTX = 8 };
  static uint16_t a[N];
  static uint32_t v[N];
  for (int i = 0; i < N; i++) {
    a[i] = (uint16_t)(i * 37 % 1000);
    v[i] = (uint32_t)(70000 + i);
  }
  size_t la, lv;
  uint8_t *ba = token_bytes(a, N, 0, &la), *bv = token_bytes32(v, N, 1, 7, &lv);
  char pa[512];
  snprintf(pa, sizeof pa, "%s", write_file("a16.bin", ba, la));
  strata_dataset_t ds;
  OK(strata_dataset_tokens_split(pa, write_file("v32.bin", bv, lv), STRATA_TOKENS_AUTO, 80000, &ds));
  struct strata_dataset_info info;
  OK(strata_dataset_info(ds, &info));
  cr_assert_eq(info.train_size, N);
  cr_assert_eq(info.val_size, N);
  int32_t in[4 * CTX], tg[4 * CTX];
  uint64_t state = 3;
  OK(strata_dataset_sample(ds, STRATA_SPLIT_TRAIN, 4, CTX, &state, in, tg));
  for (int b = 0; b < 4; b++) {
    int start = -1;
    for (int i = 0; i + CTX < N && start < 0; i++)
      if (a[i] == in[b * CTX] && a[i + 1] == in[b * CTX + 1])
        start = i;
    cr_assert_geq(start, 0, "training window %d is not among the uint16 ids", b);
    for (int k = 0; k < CTX; k++)
      cr_assert_eq(tg[b * CTX + k], a[start + k + 1]);
  }
  OK(strata_dataset_sample(ds, STRATA_SPLIT_VAL, 4, CTX, &state, in, tg));
  for (int b = 0; b < 4; b++)
    for (int k = 0; k < CTX; k++) {
      cr_assert(in[b * CTX] >= 70000 && in[b * CTX] < 70000 + N - CTX, "validation id %d", in[b * CTX]);
      cr_assert_eq(in[b * CTX + k], in[b * CTX] + k);
      cr_assert_eq(tg[b * CTX + k], in[b * CTX] + k + 1);
    }
  strata_dataset_free(ds);
  free(ba);
  free(bv);
}

/* Issue 37, item 5: uint16 ids none of whose bytes is 0 look like text to AUTO; the source says it read bytes and
** why, U16 reads the ids, and two files AUTO reads apart (one bytes, one uint16) are refused naming both. */
Test(tokens, a_uint16_file_without_a_nul_byte_says_how_it_was_read) {
  enum { N = 512 };
  static uint16_t ids[N];
  for (int i = 0; i < N; i++)
    ids[i] = (uint16_t)(0x0101 + (i % 7) * 0x0102); /* 257, 515, ...: no byte is 0 */
  size_t len;
  uint8_t *b = token_bytes(ids, N, 0, &len);
  char path[512], zpath[512];
  snprintf(path, sizeof path, "%s", write_file("nonul.bin", b, len));
  strata_dataset_t ds;
  struct strata_dataset_info info;
  OK(strata_dataset_tokens(path, STRATA_TOKENS_AUTO, 4096, 0.1, &ds));
  OK(strata_dataset_info(ds, &info));
  cr_assert(strstr(info.source, "nonul.bin (bytes, by content: no NUL byte in its first 64 KiB; --data-format nanogpt "
                                "reads uint16 ids)"), "%s", info.source);
  cr_assert_eq(info.train_size + info.val_size, 2 * N, "read as bytes: two tokens an id");
  strata_dataset_free(ds);
  OK(strata_dataset_tokens(path, STRATA_TOKENS_U16, 4096, 0.1, &ds));
  OK(strata_dataset_info(ds, &info));
  cr_assert(strstr(info.source, "nonul.bin (nanoGPT uint16 tokens)"), "%s", info.source);
  cr_assert_eq(info.train_size + info.val_size, N);
  strata_dataset_free(ds);
  ids[0] = 7; /* a NUL byte: AUTO reads uint16 */
  free(b);
  b = token_bytes(ids, N, 0, &len);
  snprintf(zpath, sizeof zpath, "%s", write_file("withnul.bin", b, len));
  cr_assert_eq(strata_dataset_tokens_split(zpath, path, STRATA_TOKENS_AUTO, 4096, &ds), STRATA_ERR_PARSE);
  cr_assert(strstr(strata_last_error(), "withnul.bin reads as nanoGPT uint16 tokens but ") &&
                strstr(strata_last_error(), "nonul.bin as bytes") && strstr(strata_last_error(), "--data-format"),
            "%s", strata_last_error());
  cr_assert_null(ds);
  OK(strata_dataset_tokens_split(zpath, path, STRATA_TOKENS_U16, 4096, &ds));
  strata_dataset_free(ds);
  free(b);
}

Test(tokens, splits_in_two_files_as_nanogpt_prepares_them) {
  enum { NT = 3000, NV = 400, CTX = 8, B = 16 };
  static uint16_t tr[NT], va[NV];
  for (int i = 0; i < NT; i++)
    tr[i] = (uint16_t)(i % 1000); /* training ids below 1000 */
  for (int i = 0; i < NV; i++)
    va[i] = (uint16_t)(1000 + i % 300); /* validation ids from 1000 */
  size_t lt, lv;
  uint8_t *bt = token_bytes(tr, NT, 0, &lt), *bv = token_bytes(va, NV, 1, &lv);
  char tpath[512], vbuf[512]; /* write_file's path is one static buffer */
  snprintf(tpath, sizeof tpath, "%s", write_file("train.bin", bt, lt));
  snprintf(vbuf, sizeof vbuf, "%s", write_file("val.bin", bv, lv));
  const char *vpath = vbuf;
  strata_dataset_t ds;
  OK(strata_dataset_tokens_split(tpath, vpath, STRATA_TOKENS_AUTO, 1300, &ds));
  struct strata_dataset_info info;
  OK(strata_dataset_info(ds, &info));
  cr_assert_eq(info.train_size, NT);
  cr_assert_eq(info.val_size, NV);
  cr_assert(strstr(info.source, "train.bin (nanoGPT uint16 tokens) + ") && strstr(info.source, "val.bin (llm.c tokens)"),
            "%s", info.source);
  int32_t in[B * CTX], tg[B * CTX];
  uint64_t state = 3;
  OK(strata_dataset_sample(ds, STRATA_SPLIT_TRAIN, B, CTX, &state, in, tg));
  for (int i = 0; i < B * CTX; i++)
    cr_assert(in[i] < 1000 && tg[i] < 1000 && (tg[i] == (in[i] + 1) % 1000), "training window %d: %d -> %d", i, in[i],
              tg[i]);
  OK(strata_dataset_sample(ds, STRATA_SPLIT_VAL, B, CTX, &state, in, tg));
  for (int i = 0; i < B * CTX; i++)
    cr_assert(in[i] >= 1000 && tg[i] >= 1000, "validation window %d: %d -> %d", i, in[i], tg[i]);
  strata_dataset_free(ds);
  /* a text training file and a token validation file: the bytes become ids too */
  snprintf(tpath, sizeof tpath, "%s", write_file("train.txt", "some training text, in bytes", 28));
  OK(strata_dataset_tokens_split(tpath, vpath, STRATA_TOKENS_AUTO, 1300, &ds));
  OK(strata_dataset_sample(ds, STRATA_SPLIT_TRAIN, 2, 4, &state, in, tg));
  cr_assert(in[0] >= ' ' && in[0] < 128, "byte %d", in[0]);
  OK(strata_dataset_sample(ds, STRATA_SPLIT_VAL, 2, 4, &state, in, tg));
  cr_assert(in[0] >= 1000);
  strata_dataset_free(ds);
  /* each file is checked on its own, and named */
  cr_assert_eq(strata_dataset_tokens_split(tpath, vpath, STRATA_TOKENS_AUTO, 1200, &ds), STRATA_ERR_RANGE);
  cr_assert(strstr(strata_last_error(), "val.bin: token 1200 at position 200"), "%s", strata_last_error());
  cr_assert_null(ds);
  vpath = write_file("odd.bin", bv, lv - 1);
  cr_assert_eq(strata_dataset_tokens_split(tpath, vpath, STRATA_TOKENS_AUTO, 1300, &ds), STRATA_ERR_PARSE);
  cr_assert(strstr(strata_last_error(), "odd.bin"), "%s", strata_last_error());
  vpath = write_file("one.bin", "\1\0", 2);
  cr_assert_eq(strata_dataset_tokens_split(tpath, vpath, STRATA_TOKENS_AUTO, 1300, &ds), STRATA_ERR_INVALID);
  cr_assert(strstr(strata_last_error(), "one.bin: too short"), "%s", strata_last_error());
  free(bt);
  free(bv);
}

/* The dataset's description keeps a long path whole (it was cut at 255 bytes of a fixed array in the public struct). */
Test(text, a_long_path_is_described_whole) {
  char name[250], path[600];
  memset(name, 'd', sizeof name - 1);
  name[sizeof name - 1] = '\0';
  snprintf(path, sizeof path, "%s/%s", tdir, name);
  cr_assert_eq(mkdir(path, 0700), 0);
  snprintf(path + strlen(path), sizeof path - strlen(path), "/%s.txt", name);
  cr_assert_gt(strlen(path), 480);
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f);
  fputs("the quick brown fox jumps over the lazy dog, twice: the quick brown fox jumps over the lazy dog", f);
  cr_assert_eq(fclose(f), 0);
  strata_dataset_t ds = NULL;
  OK(strata_dataset_text(path, 0.1, &ds));
  struct strata_dataset_info info;
  OK(strata_dataset_info(ds, &info));
  cr_assert_str_eq(info.source, path);
  strata_dataset_free(ds);
}
