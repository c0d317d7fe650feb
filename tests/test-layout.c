/* SPDX-License-Identifier: MIT */
/* test-layout.c — the layout object: devices of each (replica, rank, tp rank), JSON both ways, and every bad layout
** refused with one line before anything is allocated. */
#include <sys/stat.h>
#include <sys/types.h>

#include <strata/layout.h>

#include "common.h"

TestSuite(layout, .timeout = 30);

static strata_model_t gpt(int heads, int d_ff, int layers) {
  struct strata_model_config c = {.kind = STRATA_MODEL_GPT, .vocab = 256, .context = 16, .d_model = 32,
                                  .layers = layers, .heads = heads, .d_ff = d_ff};
  strata_model_t m;
  OK(strata_model_from_config(&c, &m));
  return m;
}

Test(layout, single_device_is_one_by_one_by_one) {
  struct strata_layout_desc d = {0};
  strata_layout_t l;
  OK(strata_layout_new(&d, &l));
  cr_assert_eq(strata_layout_dp(l), 1);
  cr_assert_eq(strata_layout_pp(l), 1);
  cr_assert_eq(strata_layout_tp(l, 0), 1);
  cr_assert_eq(strata_layout_device_count(l), 1);
  cr_assert_eq(strata_layout_devices(l)[0], 0);
  cr_assert_eq(strata_layout_schedule(l), STRATA_SCHEDULE_1F1B);
  cr_assert_null(strata_layout_split(l));
  char *text;
  OK(strata_layout_describe(l, &text));
  cr_assert_str_eq(text, "dp 1 x pp 1 x tp 1 over 1 device, 1f1b, 1 micro-batch per replica");
  free(text);
  strata_layout_free(l);
}

/* dp 2 x pp 2 with tp 2 on the first rank and 1 on the second: 6 devices, replica-major. */
Test(layout, devices_by_replica_rank_and_tp_rank) {
  int tp[2] = {2, 1}, devs[6] = {10, 11, 12, 20, 21, 22}, split[2] = {5, 3};
  struct strata_layout_desc d = {.dp = 2, .pp = 2, .tp = tp, .devices = devs, .ndevices = 6, .split = split,
                                 .nsplit = 2, .microbatches = 8};
  strata_layout_t l;
  OK(strata_layout_new(&d, &l));
  int want[2][2][2] = {{{10, 11}, {12, -1}}, {{20, 21}, {22, -1}}};
  for (int r = 0; r < 2; r++)
    for (int s = 0; s < 2; s++)
      for (int t = 0; t < 2; t++) {
        int dev = -1;
        int rc = strata_layout_device(l, r, s, t, &dev);
        if (want[r][s][t] < 0)
          cr_assert_eq(rc, STRATA_ERR_RANGE, "replica %d rank %d tp %d is outside", r, s, t);
        else
          cr_assert(rc == STRATA_OK && dev == want[r][s][t], "replica %d rank %d tp %d: device %d", r, s, t, dev);
      }
  cr_assert_eq(strata_layout_tp(l, 1), 1);
  cr_assert_eq(strata_layout_tp(l, 2), -1);
  char *text;
  OK(strata_layout_describe(l, &text));
  cr_assert_str_eq(text, "dp 2 x pp 2 x tp 2,1 over 6 devices, 1f1b, 8 micro-batches per replica");
  free(text);
  strata_model_t m = gpt(4, 128, 6); /* 8 layers: embedding, 6 blocks, head */
  OK(strata_layout_check(l, m, 23));
  cr_assert_eq(strata_layout_check(l, m, 22), STRATA_ERR_NOT_FOUND, "device 22 of 22 does not exist");
  strata_model_free(m);
  strata_layout_free(l);
}

Test(layout, json_round_trip) {
  const char *text = "{\"schema\": \"strata-layout/1\", \"dp\": 2, \"pp\": 2, \"tp\": [2, 1],"
                     " \"devices\": [0, 1, 2, 3, 4, 5], \"split\": [5, 3], \"schedule\": \"1f1b\","
                     " \"microbatches\": 8, \"virtual_stages\": 1, \"zero\": 0}";
  strata_layout_t l, l2;
  OK(strata_layout_from_json(text, "example", &l));
  char *j1, *j2;
  OK(strata_layout_to_json(l, &j1));
  OK(strata_layout_from_json(j1, "written", &l2));
  OK(strata_layout_to_json(l2, &j2));
  cr_assert_str_eq(j1, j2);
  cr_assert_str_eq(j1, "{\"schema\":\"strata-layout/1\",\"dp\":2,\"pp\":2,\"tp\":[2,1],\"devices\":[0,1,2,3,4,5],"
                       "\"split\":[5,3],\"schedule\":\"1f1b\",\"microbatches\":8,\"virtual_stages\":1,\"zero\":0}");
  free(j1);
  free(j2);
  strata_layout_free(l);
  strata_layout_free(l2);
  /* short forms: one tp for all ranks, devices and split left out, interleaving with 2 virtual stages */
  OK(strata_layout_from_json("{\"pp\": 2, \"tp\": 2, \"schedule\": \"interleaved\", \"microbatches\": 4}", NULL, &l));
  cr_assert_eq(strata_layout_device_count(l), 4);
  cr_assert_eq(strata_layout_stages(l), 4);
  cr_assert_eq(strata_layout_virtual_stages(l), 2);
  int dev;
  OK(strata_layout_device(l, 0, 1, 1, &dev));
  cr_assert_eq(dev, 3);
  strata_layout_free(l);
}

static void refused(const char *json, const char *needle) {
  strata_layout_t l = (strata_layout_t)0x1;
  int rc = strata_layout_from_json(json, "bad.json", &l);
  cr_assert_neq(rc, STRATA_OK, "accepted: %s", json);
  cr_assert_null(l, "a refused layout leaves *out NULL");
  const char *msg = strata_last_error();
  cr_assert(strstr(msg, needle), "%s -> '%s' (wanted '%s')", json, msg, needle);
  cr_assert(!strchr(msg, '\n'), "one line: %s", msg);
  cr_assert(strstr(msg, "bad.json"), "the message names the file: %s", msg);
}

/* "zero" is the ZeRO stage, 0 to 3, or a boolean (true: 1, as layouts said before stages 2 and 3); the JSON form
** writes the number back and the description names the stage. */
Test(layout, zero_stages_and_booleans) {
  const char *in[5] = {"{\"dp\": 2, \"zero\": 2}", "{\"dp\": 2, \"zero\": true}", "{\"dp\": 2, \"zero\": false}",
                       "{\"dp\": 2, \"zero\": 1}", "{\"dp\": 2, \"zero\": 3}"};
  const int want[5] = {2, 1, 0, 1, 3};
  for (int i = 0; i < 5; i++) {
    strata_layout_t l, back;
    OK(strata_layout_from_json(in[i], "zero", &l));
    cr_assert_eq(strata_layout_zero(l), want[i], "%s: zero %d", in[i], strata_layout_zero(l));
    char *json = NULL, *text = NULL;
    OK(strata_layout_to_json(l, &json));
    OK(strata_layout_from_json(json, "round trip", &back));
    cr_assert_eq(strata_layout_zero(back), want[i], "%s", json);
    OK(strata_layout_describe(l, &text));
    char needle[16];
    snprintf(needle, sizeof needle, "ZeRO-%d", want[i]);
    cr_assert(want[i] ? strstr(text, needle) != NULL : strstr(text, "ZeRO") == NULL, "%s: %s", in[i], text);
    free(json);
    free(text);
    strata_layout_free(l);
    strata_layout_free(back);
  }
}

Test(layout, bad_layouts_are_one_line_errors) {
  refused("{\"dp\": 2, \"pp\": 2, \"devices\": [0, 1, 2]}", "needs 4 devices");
  refused("{\"dp\": 2, \"devices\": [0, 0]}", "device 0 is listed twice");
  refused("{\"pp\": 2, \"tp\": [2, 1, 1]}", "\"tp\" lists 3 ranks but pp is 2");
  refused("{\"pp\": 2, \"split\": [3, 3, 2]}", "the split lists 3 stages");
  refused("{\"pp\": 2, \"split\": [3, 0]}", "\"split\"[1]");
  refused("{\"pp\": 3, \"schedule\": \"interleaved\", \"microbatches\": 4}", "multiple of pp");
  refused("{\"zero\": 1}", "needs dp >= 2");
  refused("{\"zero\": 2}", "ZeRO-2 shards across data-parallel replicas and needs dp >= 2");
  refused("{\"zero\": 3}", "ZeRO-3 shards across data-parallel replicas and needs dp >= 2");
  refused("{\"dp\": 2, \"zero\": 4}", "\"zero\" must be an integer from 0 to 3");
  refused("{\"dp\": 2, \"zero\": \"2\"}", "\"zero\"");
  refused("{\"dp\": 0}", "\"dp\"");
  refused("{\"tp\": -1}", "\"tp\"");
  refused("{\"dp\": 2.5}", "\"dp\"");
  refused("{\"dp\": 1, \"dq\": 1}", "unknown field \"dq\"");
  refused("{\"schema\": \"strata-layout/9\"}", "strata-layout/1");
  refused("{\"schedule\": \"fastest\"}", "\"schedule\"");
  refused("[1, 2]", "JSON object");
  refused("{\"dp\": 1, \"dp\": 2}", "line 1");
  refused("{\"virtual_stages\": 3}", "need the interleaved schedule");
  refused("{\"precision\": \"fp16\"}", "\"precision\" fp16 is not supported");
  refused("{\"precision\": \"tf32\"}", "\"precision\" must be \"fp32\" or \"bf16\"");
  refused("{\"precision\": 2}", "\"precision\" must be \"fp32\" or \"bf16\"");
}

/* "precision" both ways: bf16 is written and read back; fp32, the default, is read whether written or not and
** never written, so an fp32 layout's text stays what it was before the field. */
Test(layout, precision_in_json) {
  strata_layout_t l, l2;
  char *j1, *j2;
  OK(strata_layout_from_json("{\"dp\": 2, \"tp\": 2, \"precision\": \"bf16\"}", "bf16.json", &l));
  cr_assert_eq(strata_layout_precision(l), STRATA_BFLOAT16);
  OK(strata_layout_to_json(l, &j1));
  cr_assert_str_eq(j1, "{\"schema\":\"strata-layout/1\",\"dp\":2,\"pp\":1,\"tp\":[2],\"devices\":[0,1,2,3],"
                       "\"schedule\":\"1f1b\",\"microbatches\":1,\"virtual_stages\":1,\"zero\":0,"
                       "\"precision\":\"bf16\"}");
  OK(strata_layout_from_json(j1, "written", &l2));
  cr_assert_eq(strata_layout_precision(l2), STRATA_BFLOAT16);
  OK(strata_layout_to_json(l2, &j2));
  cr_assert_str_eq(j1, j2);
  char *d = NULL;
  OK(strata_layout_describe(l2, &d));
  cr_assert(strstr(d, ", bf16"), "%s", d);
  free(d);
  strata_layout_t c;
  OK(strata_layout_copy(l2, &c));
  cr_assert_eq(strata_layout_precision(c), STRATA_BFLOAT16);
  strata_layout_free(c);
  free(j1);
  free(j2);
  strata_layout_free(l);
  strata_layout_free(l2);
  OK(strata_layout_from_json("{\"dp\": 2, \"precision\": \"fp32\"}", NULL, &l));
  cr_assert_eq(strata_layout_precision(l), STRATA_FLOAT32);
  OK(strata_layout_to_json(l, &j1));
  cr_assert_null(strstr(j1, "precision"), "fp32 is not written: %s", j1);
  free(j1);
  strata_layout_free(l);
  OK(strata_layout_from_json("{\"dp\": 2}", NULL, &l));
  cr_assert_eq(strata_layout_precision(l), STRATA_FLOAT32);
  strata_layout_free(l);
  cr_assert_eq(strata_layout_precision(NULL), STRATA_FLOAT32);
  /* built by hand: anything but the two is refused */
  struct strata_layout_desc bad = {.precision = STRATA_INT32};
  l = (strata_layout_t)1;
  cr_assert_eq(strata_layout_new(&bad, &l), STRATA_ERR_INVALID);
  cr_assert_null(l);
  cr_assert(strstr(strata_last_error(), "precision"), "%s", strata_last_error());
}

/* "recompute" both ways, written only when it is not none; a mode by name (the parser's), out of range by hand, and
** refused where it cannot run: an MLP, full with zb. */
Test(layout, recompute_in_json) {
  strata_layout_t l, l2;
  char *j1, *j2, *d;
  OK(strata_layout_from_json("{\"pp\": 2, \"microbatches\": 2, \"recompute\": \"full\"}", "full.json", &l));
  cr_assert_eq(strata_layout_recompute(l), STRATA_RECOMPUTE_FULL);
  OK(strata_layout_to_json(l, &j1));
  cr_assert_str_eq(j1, "{\"schema\":\"strata-layout/1\",\"dp\":1,\"pp\":2,\"tp\":[1,1],\"devices\":[0,1],"
                       "\"schedule\":\"1f1b\",\"microbatches\":2,\"virtual_stages\":1,\"zero\":0,"
                       "\"recompute\":\"full\"}");
  OK(strata_layout_from_json(j1, "written", &l2));
  OK(strata_layout_to_json(l2, &j2));
  cr_assert_str_eq(j1, j2);
  OK(strata_layout_describe(l2, &d));
  cr_assert(strstr(d, ", recompute full"), "%s", d);
  strata_layout_t c;
  OK(strata_layout_copy(l2, &c));
  cr_assert_eq(strata_layout_recompute(c), STRATA_RECOMPUTE_FULL);
  strata_layout_free(c);
  free(d);
  free(j1);
  free(j2);
  strata_layout_free(l);
  strata_layout_free(l2);
  OK(strata_layout_from_json("{\"recompute\": \"none\"}", NULL, &l));
  cr_assert_eq(strata_layout_recompute(l), STRATA_RECOMPUTE_NONE);
  OK(strata_layout_to_json(l, &j1));
  cr_assert_null(strstr(j1, "recompute"), "none is not written: %s", j1);
  free(j1);
  strata_layout_free(l);
  OK(strata_layout_from_json("{\"recompute\": \"selective\"}", NULL, &l));
  cr_assert_eq(strata_layout_recompute(l), STRATA_RECOMPUTE_SELECTIVE);
  strata_layout_free(l);
  cr_assert_eq(strata_layout_recompute(NULL), STRATA_RECOMPUTE_NONE);
  refused("{\"recompute\": \"sometimes\"}", "\"recompute\" must be \"none\", \"selective\" or \"full\"");
  refused("{\"recompute\": 2}", "\"recompute\" must be");
  int mode = -1;
  cr_assert_eq(strata_recompute_parse("sometimes", &mode), STRATA_ERR_PARSE);
  cr_assert_eq(mode, -1);
  OK(strata_recompute_parse("selective", &mode));
  cr_assert_eq(mode, STRATA_RECOMPUTE_SELECTIVE);
  cr_assert_str_eq(strata_recompute_name(7), "?");
  struct strata_layout_desc bad = {.recompute = 3};
  l = (strata_layout_t)1;
  cr_assert_eq(strata_layout_new(&bad, &l), STRATA_ERR_INVALID);
  cr_assert_null(l);
  /* against the model: an MLP has no block to recompute; full with a split backward is a layout like any (its W
  ** recomputes again) */
  strata_model_t mlp, gpt;
  OK(strata_model_load("mlp", &mlp));
  OK(strata_model_load("gpt-tiny", &gpt));
  OK(strata_layout_from_json("{\"recompute\": \"selective\"}", NULL, &l));
  cr_assert_eq(strata_layout_check(l, mlp, -1), STRATA_ERR_UNSUPPORTED);
  cr_assert(strstr(strata_last_error(), "GPT"), "%s", strata_last_error());
  OK(strata_layout_check(l, gpt, -1));
  strata_layout_free(l);
  OK(strata_layout_from_json("{\"pp\": 2, \"schedule\": \"zb\", \"microbatches\": 2, \"recompute\": \"full\"}", NULL, &l));
  OK(strata_layout_check(l, gpt, -1));
  strata_layout_free(l);
  strata_model_free(mlp);
  strata_model_free(gpt);
}

Test(layout, checked_against_the_model) {
  strata_model_t m = gpt(2, 96, 2); /* 2 heads, d_ff 96, 4 layers */
  strata_layout_t l;
  OK(strata_layout_from_json("{\"tp\": 4}", NULL, &l));
  cr_assert_eq(strata_layout_check(l, m, -1), STRATA_ERR_INVALID);
  cr_assert(strstr(strata_last_error(), "does not divide the model's 2 heads"), "%s", strata_last_error());
  strata_layout_free(l);
  OK(strata_layout_from_json("{\"tp\": 2}", NULL, &l));
  OK(strata_layout_check(l, m, -1));
  strata_layout_free(l);
  strata_model_t m3 = gpt(4, 90, 2); /* d_ff 90: tp 4 divides the heads, not d_ff */
  OK(strata_layout_from_json("{\"tp\": 4}", NULL, &l));
  cr_assert_eq(strata_layout_check(l, m3, -1), STRATA_ERR_INVALID);
  cr_assert(strstr(strata_last_error(), "d_ff 90"), "%s", strata_last_error());
  strata_layout_free(l);
  strata_model_free(m3);
  OK(strata_layout_from_json("{\"pp\": 2, \"split\": [2, 3]}", NULL, &l));
  cr_assert_eq(strata_layout_check(l, m, -1), STRATA_ERR_INVALID, "5 layers split, the model has 4");
  strata_layout_free(l);
  OK(strata_layout_from_json("{\"pp\": 5}", NULL, &l));
  cr_assert_eq(strata_layout_check(l, m, -1), STRATA_ERR_INVALID, "5 stages of a 4-layer model");
  strata_layout_free(l);
  strata_model_free(m);
}

Test(layout, files_fifo_and_missing) {
  char dir[] = "/tmp/strata-layout-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char path[256], fifo[256];
  snprintf(path, sizeof path, "%s/layout.json", dir);
  snprintf(fifo, sizeof fifo, "%s/fifo", dir);
  FILE *f = fopen(path, "w");
  fputs("{\"dp\": 2}\n", f);
  fclose(f);
  strata_layout_t l;
  OK(strata_layout_load(path, &l));
  cr_assert_eq(strata_layout_dp(l), 2);
  strata_layout_free(l);
  cr_assert_eq(mkfifo(fifo, 0600), 0);
  cr_assert_eq(strata_layout_load(fifo, &l), STRATA_ERR_IO, "a FIFO is refused, not waited on");
  cr_assert_eq(strata_layout_load(dir, &l), STRATA_ERR_IO, "a directory is refused");
  strcat(path, ".missing");
  cr_assert_eq(strata_layout_load(path, &l), STRATA_ERR_IO);
  cr_assert(strstr(strata_last_error(), ".missing"), "%s", strata_last_error());
  tc_remove_dir(dir);
}

Test(layout, a_copy_lives_on_its_own) {
  /* every field that has an array: per-rank tp, devices, split */
  strata_layout_t l, c = (strata_layout_t)1;
  OK(strata_layout_from_json("{\"dp\": 2, \"pp\": 2, \"tp\": [2, 1], \"devices\": [5, 4, 3, 2, 1, 0], "
                             "\"split\": [3, 1], \"schedule\": \"gpipe\", \"microbatches\": 4, \"zero\": 1}",
                             NULL, &l));
  char *a = NULL, *b = NULL;
  OK(strata_layout_to_json(l, &a));
  OK(strata_layout_copy(l, &c));
  strata_layout_free(l); /* the copy owns its arrays */
  OK(strata_layout_to_json(c, &b));
  cr_assert_str_eq(b, a);
  int dev = -1;
  OK(strata_layout_device(c, 1, 0, 1, &dev));
  cr_assert_eq(dev, 1, "replica 1, rank 0, slice 1: the fifth device listed");
  cr_assert_eq(strata_layout_split(c)[0], 3);
  strata_layout_free(c);
  free(a);
  free(b);
  cr_assert_eq(strata_layout_copy(NULL, &c), STRATA_ERR_INVALID);
  cr_assert_null(c, "a failed copy leaves NULL");
  cr_assert_eq(strata_layout_copy(l, NULL), STRATA_ERR_INVALID);
}
