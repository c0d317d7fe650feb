/* SPDX-License-Identifier: MIT */
/* fuzz-hf-config.c — libFuzzer harness: any config.json of a Hugging Face directory (GPT-2 or Llama) is a strata model or a one-line refusal, and a model read is one strata can build. */
#include <sys/stat.h>

#include <strata/hf.h>
#include <strata/model.h>

#include "fuzz.h"

static char dir[4096], config[4200];

static void remove_dir(void) {
  unlink(config);
  rmdir(dir);
}

/* One directory per process under $TMPDIR, holding the input as its config.json. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/strata-fuzz-hf-%ld", tmp && *tmp ? tmp : "/tmp", (long)getpid());
  snprintf(config, sizeof config, "%s/config.json", dir);
  if (mkdir(dir, 0700) != 0) {
    perror(dir);
    abort();
  }
  atexit(remove_dir);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FILE *f = fopen(config, "wb");
  if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0)
    abort();
  strata_model_t m = NULL;
  int rc = strata_hf_model(dir, &m);
  if (rc != STRATA_OK) {
    if (m != NULL || !strata_last_error()[0] || strchr(strata_last_error(), '\n'))
      abort();
    return 0;
  }
  const struct strata_model_config *c = strata_model_config(m);
  if ((c->kind != STRATA_MODEL_GPT && c->kind != STRATA_MODEL_LLAMA) || c->vocab < 2 || c->context < 1 ||
      c->d_model % c->heads != 0)
    abort(); /* a model read is a GPT or a Llama that strata can build */
  if (c->kind == STRATA_MODEL_LLAMA &&
      (c->kv_heads < 1 || c->heads % c->kv_heads != 0 || !(c->rope_theta > 0) || !(c->norm_eps > 0) ||
       (c->rope_scaling.type == STRATA_ROPE_LLAMA3 &&
        !(c->rope_scaling.high_freq_factor > c->rope_scaling.low_freq_factor && c->rope_scaling.original_context > 0))))
    abort(); /* its grouped-query attention and rope as config.json's checks left them */
  strata_model_free(m);
  return 0;
}
