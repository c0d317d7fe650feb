/* SPDX-License-Identifier: MIT */
/* strata-generate.c — sample text from a strata-train checkpoint of a byte-level GPT, one byte at a time. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/strata.h>

#include "cli.h"

#define PROG "strata-generate"

/* Exit statuses: 0 success, 1 a runtime failure (unreadable checkpoint, device), 2 bad usage. */
#define EXIT_RUNTIME 1
#define EXIT_USAGE 2

/* The byte that fills the context window left of the prompt: the corpora are
** text, where runs of spaces are common and a space says nothing. */
#define PAD_BYTE ' '

struct options {
  const char *checkpoint;
  const char *prompt;
  int64_t length;
  double temperature;       /* 0: always the most likely byte */
  int64_t top_k;            /* 0: every byte */
  int64_t seed;
  int64_t device;
};

static void usage(FILE *f) {
  fputs("Usage: strata-generate --checkpoint FILE [OPTION]...\n"
        "Sample text from a checkpoint written by strata-train (a GPT over bytes).\n"
        "\n"
        "  -c, --checkpoint FILE    the checkpoint (safetensors with the model in its metadata)\n"
        "  -p, --prompt TEXT        text to continue (default: none)\n"
        "  -n, --length N           bytes to generate (default 200)\n"
        "  -t, --temperature T      sampling temperature, 0 = always the most likely byte (default 0.8)\n"
        "  -k, --top-k K            sample among the K most likely bytes, 0 = all (default 0)\n"
        "  -s, --seed S             random seed (default 1)\n"
        "      --device N           global device index (default 0; see strata-topo)\n"
        "  -h, --help               show this help\n"
        "      --version            show the version\n"
        "\n"
        "The prompt is printed, then each byte as it is sampled.\n"
        "Exit status: 0 on success, 1 on a runtime failure (missing or corrupt checkpoint,\n"
        "not a text model, device error), 2 on bad usage.\n",
        f);
}

/* splitmix64: a small, well-mixed generator; the same seed gives the same text. */
static uint64_t next_u64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double next_unit(uint64_t *s) { return (double)(next_u64(s) >> 11) * 0x1.0p-53; }

/*
** Choose a token from `logits` (vocab of them): the arg-max at temperature
** 0, else a draw from softmax(logits / T) restricted to the top_k largest
** (all when top_k is 0). `work` holds vocab doubles.
*/
static int sample(const float *logits, int64_t vocab, double temperature, int64_t top_k, uint64_t *rng, double *work) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; i++)
    if (logits[i] > logits[best])
      best = i;
  if (temperature == 0)
    return (int)best;
  /* The k-th largest logit is the cut: everything below it gets probability 0. */
  double cut = -INFINITY;
  if (top_k > 0 && top_k < vocab) {
    for (int64_t i = 0; i < vocab; i++)
      work[i] = logits[i];
    for (int64_t k = 0; k < top_k; k++) { /* partial selection: vocab is 256, k small */
      int64_t m = k;
      for (int64_t i = k + 1; i < vocab; i++)
        if (work[i] > work[m])
          m = i;
      double t = work[k];
      work[k] = work[m];
      work[m] = t;
    }
    cut = work[top_k - 1];
  }
  double sum = 0;
  for (int64_t i = 0; i < vocab; i++) {
    work[i] = logits[i] >= cut ? exp(((double)logits[i] - (double)logits[best]) / temperature) : 0;
    sum += work[i];
  }
  double u = next_unit(rng) * sum;
  for (int64_t i = 0; i < vocab; i++) {
    u -= work[i];
    if (u < 0)
      return (int)i;
  }
  return (int)best;
}

/* The model of a checkpoint, from the model config the trainer stores in its metadata ("model", the model-file JSON). */
static int model_from_checkpoint(const char *path, strata_model_t *out /* OUT */) {
  strata_safetensors_t st = NULL;
  if (strata_safetensors_read(path, &st)) {
    fprintf(stderr, PROG ": %s\n", strata_last_error());
    return EXIT_RUNTIME;
  }
  const char *json = strata_safetensors_meta(st, "model");
  if (!json) {
    fprintf(stderr, PROG ": %s: no model config in the checkpoint's metadata (not written by strata-train?)\n",
            path);
    strata_safetensors_free(st);
    return EXIT_RUNTIME;
  }
  int rc = strata_model_from_json(json, path, out);
  strata_safetensors_free(st);
  if (rc) {
    fprintf(stderr, PROG ": %s: the checkpoint's model config: %s\n", path, strata_last_error());
    return EXIT_RUNTIME;
  }
  return 0;
}

enum { OPT_DEVICE = 256, OPT_VERSION };

static int parse_args(int argc, char **argv, struct options *o) {
  static const struct option longs[] = {
      {"checkpoint", required_argument, NULL, 'c'}, {"prompt", required_argument, NULL, 'p'},
      {"length", required_argument, NULL, 'n'},     {"temperature", required_argument, NULL, 't'},
      {"top-k", required_argument, NULL, 'k'},      {"seed", required_argument, NULL, 's'},
      {"device", required_argument, NULL, OPT_DEVICE}, {"help", no_argument, NULL, 'h'},
      {"version", no_argument, NULL, OPT_VERSION},  {NULL, 0, NULL, 0}};
  memset(o, 0, sizeof *o);
  o->prompt = "";
  o->length = 200;
  o->temperature = 0.8;
  o->seed = 1;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":c:p:n:t:k:s:h", longs, NULL)) != -1) {
    switch (c) {
    case 'c': o->checkpoint = optarg; break;
    case 'p': o->prompt = optarg; break;
    case 'n': if (cli_parse_int(PROG, "--length", optarg, 1, &o->length)) return EXIT_USAGE; break;
    case 't': if (cli_parse_num(PROG, "--temperature", optarg, 1, &o->temperature)) return EXIT_USAGE; break;
    case 'k': if (cli_parse_int(PROG, "--top-k", optarg, 0, &o->top_k)) return EXIT_USAGE; break;
    case 's': if (cli_parse_int(PROG, "--seed", optarg, 0, &o->seed)) return EXIT_USAGE; break;
    case OPT_DEVICE: if (cli_parse_int(PROG, "--device", optarg, 0, &o->device)) return EXIT_USAGE; break;
    case 'h': usage(stdout); return -1;
    case OPT_VERSION: printf("strata-generate %s\n", PACKAGE_VERSION); return -1;
    default:
      cli_refuse(PROG, c == ':' ? ':' : '?', argc, argv);
      return EXIT_USAGE;
    }
  }
  if (cli_refuse(PROG, 0, argc, argv))
    return EXIT_USAGE;
  if (!o->checkpoint) {
    fprintf(stderr, PROG ": --checkpoint FILE is required (see --help)\n");
    return EXIT_USAGE;
  }
  return 0;
}

int main(int argc, char **argv) {
  struct options o;
  int rc = parse_args(argc, argv, &o);
  if (rc)
    return rc < 0 ? 0 : rc;

  strata_model_t model = NULL;
  strata_trainer_t tr = NULL;
  int32_t *window = NULL;
  unsigned char *text = NULL;
  float *logits = NULL;
  double *work = NULL;

  if ((rc = model_from_checkpoint(o.checkpoint, &model)))
    goto out;
  const struct strata_model_config *cfg = strata_model_config(model);
  if (cfg->kind != STRATA_MODEL_GPT) {
    fprintf(stderr, PROG ": %s: model %s is an image classifier (%s), not a text model\n", o.checkpoint, cfg->name,
            cfg->kind == STRATA_MODEL_MLP ? "mlp" : "cnn");
    rc = EXIT_RUNTIME;
    goto out;
  }
  if (cfg->vocab > 256) {
    fprintf(stderr, PROG ": %s: model %s has a vocabulary of %lld; only byte-level models (256) can be sampled\n",
            o.checkpoint, cfg->name, (long long)cfg->vocab);
    rc = EXIT_RUNTIME;
    goto out;
  }
  int ndev = 0;
  if (strata_device_count(&ndev)) {
    fprintf(stderr, PROG ": %s\n", strata_last_error());
    rc = EXIT_RUNTIME;
    goto out;
  }
  if (o.device >= ndev) {
    fprintf(stderr, PROG ": --device %lld: there %s %d device%s (see strata-topo)\n", (long long)o.device,
            ndev == 1 ? "is" : "are", ndev, ndev == 1 ? "" : "s");
    rc = EXIT_USAGE;
    goto out;
  }

  /* No dataset: the trainer only loads the checkpoint and computes logits. */
  struct strata_train_options topts;
  strata_train_options_default(&topts);
  topts.device = (int)o.device;
  topts.batch = 1;
  topts.accum = 1;
  topts.steps = 1;
  if (strata_trainer_new(model, NULL, &topts, &tr) || strata_trainer_load(tr, o.checkpoint)) {
    fprintf(stderr, PROG ": %s\n", strata_last_error());
    rc = EXIT_RUNTIME;
    goto out;
  }

  int64_t ctx = cfg->context, vocab = cfg->vocab;
  size_t plen = strlen(o.prompt);
  window = malloc((size_t)ctx * sizeof *window);
  text = malloc(plen + (size_t)o.length);
  logits = malloc((size_t)vocab * sizeof *logits);
  work = malloc((size_t)vocab * sizeof *work);
  if (!window || !text || !logits || !work) {
    fprintf(stderr, PROG ": out of memory\n");
    rc = EXIT_RUNTIME;
    goto out;
  }
  memcpy(text, o.prompt, plen);
  size_t len = plen;
  uint64_t rng = (uint64_t)o.seed;
  fwrite(o.prompt, 1, plen, stdout);
  fflush(stdout);
  for (int64_t g = 0; g < o.length; g++) {
    /* The last ctx bytes, padded on the left when there are fewer. */
    int64_t have = (int64_t)len < ctx ? (int64_t)len : ctx;
    for (int64_t i = 0; i < ctx - have; i++)
      window[i] = PAD_BYTE;
    for (int64_t i = 0; i < have; i++)
      window[ctx - have + i] = text[len - (size_t)have + (size_t)i];
    if (strata_trainer_logits(tr, window, 1, logits)) {
      fprintf(stdout, "\n");
      fprintf(stderr, PROG ": %s\n", strata_last_error());
      rc = EXIT_RUNTIME;
      goto out;
    }
    int b = sample(logits, vocab, o.temperature, o.top_k, &rng, work);
    text[len++] = (unsigned char)b;
    putchar(b);
    fflush(stdout);
  }
  putchar('\n');
  rc = 0;
out:
  free(window);
  free(text);
  free(logits);
  free(work);
  strata_trainer_free(tr);
  strata_model_free(model);
  strata_shutdown();
  return rc;
}
