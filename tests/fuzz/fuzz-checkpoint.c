/* SPDX-License-Identifier: MIT */
/* fuzz-checkpoint.c — libFuzzer harness: any file given to strata_trainer_load of a live trainer loads, or is refused with one line and leaves the trainer exactly as it was. */
#include <strata/device.h>
#include <strata/model.h>
#include <strata/train.h>

#include "fuzz.h"

static strata_model_t model;
static strata_trainer_t trainer;
static float *before, *after;
static size_t nparams;

/* A small GPT on one host device: every load is cheap, and the file format is the real one. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  setenv("STRATA_BACKENDS", "host", 1);
  setenv("STRATA_HOST_DEVICES", "1", 1);
  setenv("STRATA_HOST_THREADS", "1", 1);
  const char *json = getenv("STRATA_FUZZ_MODEL");
  if (!json || !*json)
    json = "{\"kind\": \"gpt\", \"vocab\": 256, \"context\": 8, \"d_model\": 8, \"layers\": 1, \"heads\": 2}";
  struct strata_train_options o;
  strata_train_options_default(&o);
  o.batch = 2;
  if (strata_model_from_json(json, "fuzz model", &model) != STRATA_OK ||
      strata_trainer_new(model, NULL, &o, &trainer) != STRATA_OK ||
      strata_trainer_params(trainer, NULL, &nparams) != STRATA_OK) {
    fprintf(stderr, "fuzz-checkpoint: cannot set up the trainer: %s\n", strata_last_error());
    abort();
  }
  before = malloc(nparams * sizeof *before);
  after = malloc(nparams * sizeof *after);
  if (!before || !after)
    abort();
  /* STRATA_FUZZ_SAVE=PATH: write this trainer's checkpoint, the seed of the corpus, and stop */
  const char *save = getenv("STRATA_FUZZ_SAVE");
  if (save && *save) {
    int rc = strata_trainer_save(trainer, save);
    if (rc != STRATA_OK)
      fprintf(stderr, "fuzz-checkpoint: %s\n", strata_last_error());
    exit(rc == STRATA_OK ? 0 : 1);
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_file("checkpoint", data, size);
  size_t n = nparams;
  if (strata_trainer_params(trainer, before, &n) != STRATA_OK || n != nparams)
    abort();
  int64_t steps = strata_trainer_steps_done(trainer);
  int rc = strata_trainer_load(trainer, path);
  if (rc == STRATA_OK)
    return 0; /* a valid checkpoint of this model: the state it holds is the trainer's now */
  if (!strata_last_error()[0] || strchr(strata_last_error(), '\n'))
    abort();
  n = nparams;
  if (strata_trainer_params(trainer, after, &n) != STRATA_OK || n != nparams)
    abort();
  if (memcmp(before, after, nparams * sizeof *before) != 0 || strata_trainer_steps_done(trainer) != steps) {
    fprintf(stderr, "fuzz-checkpoint: a refused load (%s) changed the trainer\n", strata_last_error());
    abort();
  }
  return 0;
}
