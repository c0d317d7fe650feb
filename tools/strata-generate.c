/* SPDX-License-Identifier: MIT */
/* strata-generate.c — sample from a strata-train checkpoint or a Hugging Face GPT-2: bytes of text, or token ids in and out. */
#include "config.h"

#include <ctype.h>
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
  const char *init_from;    /* a Hugging Face GPT-2 directory instead of a checkpoint */
  int tokens;               /* --tokens: the prompt and the output are token ids */
  const char *prompt;
  int64_t length;
  double temperature;       /* 0: always the most likely byte */
  int64_t top_k;            /* 0: every byte */
  int64_t seed;
  int64_t device;
};

static void usage(FILE *f) {
  fputs("Usage: strata-generate --checkpoint FILE|--init-from DIR [--tokens] [OPTION]...\n"
        "Sample text from a checkpoint written by strata-train (a GPT over bytes), or token ids from\n"
        "any GPT (--tokens), e.g. a Hugging Face GPT-2 with a BPE tokenizer outside strata.\n"
        "\n"
        "  -c, --checkpoint FILE    the checkpoint (safetensors with the model in its metadata)\n"
        "      --init-from DIR      a Hugging Face GPT-2 directory (config.json + model.safetensors)\n"
        "      --tokens             the prompt is token ids (decimal, separated by spaces, commas or\n"
        "                           newlines; '-' reads them from stdin) and the output is the prompt's\n"
        "                           and the generated ids, space-separated, on one line\n"
        "  -p, --prompt TEXT        text (or with --tokens, ids) to continue (default: none)\n"
        "  -n, --length N           bytes (tokens) to generate (default 200)\n"
        "  -t, --temperature T      sampling temperature, 0 = always the most likely byte (default 0.8)\n"
        "  -k, --top-k K            sample among the K most likely bytes, 0 = all (default 0)\n"
        "  -s, --seed S             random seed (default 1)\n"
        "      --device N           global device index (default 0; see strata-topo)\n"
        "  -h, --help               show this help\n"
        "      --version            show the version\n"
        "\n"
        "The prompt is printed, then each byte (token id) as it is sampled.\n"
        "Exit status: 0 on success, 1 on a runtime failure (missing or corrupt checkpoint,\n"
        "not a text model, device error), 2 on bad usage or bad token ids.\n",
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

enum { OPT_DEVICE = 256, OPT_VERSION, OPT_INIT_FROM, OPT_TOKENS };

/*
** Parse the decimal token ids of `text` (separated by spaces, commas or
** newlines) into a malloc'd array *ids of *n; each must lie below `vocab`.
** Prints one line and returns EXIT_USAGE on anything else.
*/
static int parse_ids(const char *text, int64_t vocab, int32_t **ids, size_t *n) {
  size_t cap = 64, k = 0;
  int32_t *a = malloc(cap * sizeof *a);
  if (!a) {
    fprintf(stderr, PROG ": out of memory\n");
    return EXIT_RUNTIME;
  }
  const char *p = text;
  for (;;) {
    while (*p == ' ' || *p == ',' || *p == '\n' || *p == '\t' || *p == '\r')
      p++;
    if (!*p)
      break;
    const char *start = p;
    long long v = 0;
    while (isdigit((unsigned char)*p) && v <= vocab)
      v = v * 10 + (*p++ - '0');
    if (p == start || (*p && !strchr(" ,\n\t\r", *p) && !isdigit((unsigned char)*p))) {
      int len = 0;
      while (start[len] && !strchr(" ,\n\t\r", start[len]) && len < 40)
        len++;
      fprintf(stderr, PROG ": --tokens: '%.*s' (token %zu) is not a token id\n", len, start, k);
      free(a);
      return EXIT_USAGE;
    }
    if (v >= vocab) {
      while (isdigit((unsigned char)*p))
        p++;
      fprintf(stderr, PROG ": --tokens: token %zu ('%.*s') is not below the model's vocabulary of %lld\n", k,
              (int)(p - start > 40 ? 40 : p - start), start, (long long)vocab);
      free(a);
      return EXIT_USAGE;
    }
    if (k == cap) {
      int32_t *b = realloc(a, 2 * cap * sizeof *a);
      if (!b) {
        free(a);
        fprintf(stderr, PROG ": out of memory\n");
        return EXIT_RUNTIME;
      }
      a = b;
      cap *= 2;
    }
    a[k++] = (int32_t)v;
  }
  *ids = a;
  *n = k;
  return 0;
}

/* All of stdin as a NUL-terminated malloc'd string, or NULL. */
static char *read_stdin(void) {
  size_t cap = 4096, n = 0;
  char *s = malloc(cap);
  while (s) {
    size_t got = fread(s + n, 1, cap - n - 1, stdin);
    n += got;
    if (got == 0)
      break;
    if (n + 1 == cap) {
      char *t = realloc(s, cap * 2);
      if (!t) {
        free(s);
        return NULL;
      }
      s = t;
      cap *= 2;
    }
  }
  if (s)
    s[n] = '\0';
  return s;
}

static int parse_args(int argc, char **argv, struct options *o) {
  static const struct option longs[] = {
      {"checkpoint", required_argument, NULL, 'c'}, {"prompt", required_argument, NULL, 'p'},
      {"length", required_argument, NULL, 'n'},     {"temperature", required_argument, NULL, 't'},
      {"top-k", required_argument, NULL, 'k'},      {"seed", required_argument, NULL, 's'},
      {"device", required_argument, NULL, OPT_DEVICE}, {"help", no_argument, NULL, 'h'},
      {"version", no_argument, NULL, OPT_VERSION},  {"init-from", required_argument, NULL, OPT_INIT_FROM},
      {"tokens", no_argument, NULL, OPT_TOKENS},    {NULL, 0, NULL, 0}};
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
    case OPT_INIT_FROM: o->init_from = optarg; break;
    case OPT_TOKENS: o->tokens = 1; break;
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
  if (!o->checkpoint == !o->init_from) {
    fprintf(stderr, PROG ": %s\n", o->checkpoint ? "--checkpoint and --init-from both name a model; give one"
                                                  : "--checkpoint FILE or --init-from DIR is required (see --help)");
    return EXIT_USAGE;
  }
  return 0;
}

/*
** --tokens: the prompt's ids, then `length` sampled ones, printed as
** decimal ids on one line. Each step runs the last `context` ids from
** position 0, padded after their end while there are fewer, and samples
** from the logits at the last real position: causal attention makes that
** exactly the model run on the ids alone, as transformers runs it.
*/
static int generate_tokens(strata_trainer_t tr, const struct strata_model_config *cfg, const struct options *o) {
  int64_t ctx = cfg->context, vocab = cfg->vocab;
  char *stdin_text = NULL;
  const char *text = o->prompt;
  if (strcmp(text, "-") == 0 && !(text = stdin_text = read_stdin())) {
    fprintf(stderr, PROG ": out of memory reading stdin\n");
    return EXIT_RUNTIME;
  }
  int32_t *ids = NULL;
  size_t n = 0;
  int rc = parse_ids(text, vocab, &ids, &n);
  free(stdin_text);
  if (rc)
    return rc;
  if (n == 0) {
    free(ids);
    fprintf(stderr, PROG ": --tokens needs at least one prompt id (GPT-2 starts a text with <|endoftext|>, 50256)\n");
    return EXIT_USAGE;
  }
  int32_t *all = realloc(ids, (n + (size_t)o->length) * sizeof *all);
  int32_t *window = calloc((size_t)ctx, sizeof *window);
  float *logits = malloc((size_t)vocab * sizeof *logits);
  double *work = malloc((size_t)vocab * sizeof *work);
  if (!all || !window || !logits || !work) {
    fprintf(stderr, PROG ": out of memory\n");
    free(all ? all : ids);
    free(window);
    free(logits);
    free(work);
    return EXIT_RUNTIME;
  }
  for (size_t i = 0; i < n; i++)
    printf("%s%d", i ? " " : "", (int)all[i]);
  fflush(stdout);
  uint64_t rng = (uint64_t)o->seed;
  for (int64_t g = 0; g < o->length && !rc; g++) {
    int64_t have = (int64_t)n < ctx ? (int64_t)n : ctx;
    for (int64_t i = 0; i < ctx; i++)
      window[i] = i < have ? all[n - (size_t)have + (size_t)i] : 0;
    if (strata_trainer_logits_at(tr, window, 1, have - 1, 1, logits)) {
      printf("\n");
      fprintf(stderr, PROG ": %s\n", strata_last_error());
      rc = EXIT_RUNTIME;
      break;
    }
    int t = sample(logits, vocab, o->temperature, o->top_k, &rng, work);
    all[n++] = t;
    printf("%s%d", n > 1 ? " " : "", t);
    fflush(stdout);
  }
  if (!rc)
    printf("\n");
  free(all);
  free(window);
  free(logits);
  free(work);
  return rc;
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

  const char *source = o.checkpoint ? o.checkpoint : o.init_from;
  if (o.checkpoint && (rc = model_from_checkpoint(o.checkpoint, &model)))
    goto out;
  if (o.init_from && (rc = strata_hf_model(o.init_from, &model)) != 0) {
    fprintf(stderr, PROG ": %s\n", strata_last_error());
    rc = rc == STRATA_ERR_PARSE || rc == STRATA_ERR_UNSUPPORTED ? EXIT_USAGE : EXIT_RUNTIME;
    goto out;
  }
  const struct strata_model_config *cfg = strata_model_config(model);
  if (cfg->kind != STRATA_MODEL_GPT) {
    fprintf(stderr, PROG ": %s: model %s is an image classifier (%s), not a text model\n", source, cfg->name,
            cfg->kind == STRATA_MODEL_MLP ? "mlp" : "cnn");
    rc = EXIT_RUNTIME;
    goto out;
  }
  if (cfg->vocab > 256 && !o.tokens) {
    fprintf(stderr, PROG ": %s: model %s has a vocabulary of %lld; only byte-level models (256) make text: give "
            "--tokens for token ids\n", source, cfg->name, (long long)cfg->vocab);
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
  if (strata_trainer_new(model, NULL, &topts, &tr) ||
      (o.checkpoint ? strata_trainer_load(tr, o.checkpoint) : strata_trainer_load_hf(tr, o.init_from))) {
    fprintf(stderr, PROG ": %s\n", strata_last_error());
    rc = EXIT_RUNTIME;
    goto out;
  }

  if (o.tokens) {
    rc = generate_tokens(tr, cfg, &o);
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
