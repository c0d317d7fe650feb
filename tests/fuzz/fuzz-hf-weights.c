/* SPDX-License-Identifier: MIT */
/* fuzz-hf-weights.c — libFuzzer harness: any model.safetensors beside a fixed Hugging Face config.json loads into a live trainer or is refused with one line, leaving the trainer exactly as it was. */
#include <sys/stat.h>

#include <strata/checkpoint.h>
#include <strata/hf.h>
#include <strata/model.h>
#include <strata/train.h>

#include "fuzz.h"

/* A small GPT-2 (untied: the head is a tensor of its own) whose weights are quick to load. */
static const char config_json[] =
    "{\"model_type\": \"gpt2\", \"architectures\": [\"GPT2LMHeadModel\"], \"vocab_size\": 64, \"n_positions\": 8, "
    "\"n_embd\": 8, \"n_layer\": 1, \"n_head\": 2, \"tie_word_embeddings\": false}\n";

static char dir[4096], config[4200], weights[4200];
static strata_model_t model;
static strata_trainer_t trainer;
static float *before, *after;
static size_t nparams;

static void remove_dir(void) {
  unlink(config);
  unlink(weights);
  rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  setenv("STRATA_BACKENDS", "host", 1);
  setenv("STRATA_HOST_DEVICES", "1", 1);
  setenv("STRATA_HOST_THREADS", "1", 1);
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/strata-fuzz-hfw-%ld", tmp && *tmp ? tmp : "/tmp", (long)getpid());
  snprintf(config, sizeof config, "%s/config.json", dir);
  snprintf(weights, sizeof weights, "%s/model.safetensors", dir);
  FILE *f = NULL;
  if (mkdir(dir, 0700) != 0 || !(f = fopen(config, "wb")) || fputs(config_json, f) < 0 || fclose(f) != 0) {
    perror(dir);
    abort();
  }
  atexit(remove_dir);
  struct strata_train_options o;
  strata_train_options_default(&o);
  o.batch = 1;
  if (strata_hf_model(dir, &model) != STRATA_OK || strata_trainer_new(model, NULL, &o, &trainer) != STRATA_OK ||
      strata_trainer_params(trainer, NULL, &nparams) != STRATA_OK) {
    fprintf(stderr, "fuzz-hf-weights: cannot set up the trainer: %s\n", strata_last_error());
    abort();
  }
  before = malloc(nparams * sizeof *before);
  after = malloc(nparams * sizeof *after);
  if (!before || !after)
    abort();
  /* STRATA_FUZZ_SAVE=DIR: export this trainer's weights as DIR/model.safetensors, the seed of the corpus, and stop */
  const char *save = getenv("STRATA_FUZZ_SAVE");
  if (save && *save) {
    char ckpt[4200];
    snprintf(ckpt, sizeof ckpt, "%s/ckpt.st", dir);
    int rc = strata_trainer_save(trainer, ckpt);
    if (rc == STRATA_OK)
      rc = strata_hf_export(ckpt, save);
    unlink(ckpt);
    if (rc != STRATA_OK)
      fprintf(stderr, "fuzz-hf-weights: %s\n", strata_last_error());
    exit(rc == STRATA_OK ? 0 : 1);
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FILE *f = fopen(weights, "wb");
  if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0)
    abort();
  size_t n = nparams;
  if (strata_trainer_params(trainer, before, &n) != STRATA_OK || n != nparams)
    abort();
  int rc = strata_trainer_load_hf(trainer, dir);
  if (rc == STRATA_OK)
    return 0; /* weights of this model: they are the trainer's now */
  if (!strata_last_error()[0] || strchr(strata_last_error(), '\n'))
    abort();
  n = nparams;
  if (strata_trainer_params(trainer, after, &n) != STRATA_OK || n != nparams)
    abort();
  if (memcmp(before, after, nparams * sizeof *before) != 0) {
    fprintf(stderr, "fuzz-hf-weights: a refused load (%s) changed the trainer\n", strata_last_error());
    abort();
  }
  return 0;
}
