/* SPDX-License-Identifier: MIT */
/* strata-export.c — write a strata-train checkpoint in another tool's layout: today Hugging Face GPT-2 or Llama (config.json + model.safetensors). */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <strata/strata.h>

#include "cli.h"

#define PROG "strata-export"

/* Exit statuses: 0 success, 1 a runtime failure (unreadable checkpoint, unwritable directory), 2 bad usage or a
** checkpoint that has no such form. */
#define EXIT_RUNTIME 1
#define EXIT_USAGE 2

enum { OPT_VERSION = 256, OPT_DTYPE };

static void usage(FILE *f) {
  fputs("Usage: strata-export --hf DIR [--dtype fp32|bf16] CHECKPOINT\n"
        "Write the parameters of a strata-train checkpoint in another tool's layout.\n"
        "\n"
        "      --hf DIR             Hugging Face: DIR/config.json and DIR/model.safetensors, as\n"
        "                           GPT2LMHeadModel.from_pretrained(DIR) reads a GPT's and\n"
        "                           LlamaForCausalLM.from_pretrained(DIR) a llama's (DIR is created if\n"
        "                           missing; other files in it are left alone)\n"
        "      --dtype fp32|bf16    how the weights are stored: fp32 (the default) or bf16, each float\n"
        "                           rounded to the nearest bfloat16, ties to even, and config.json\n"
        "                           saying \"torch_dtype\": \"bfloat16\"\n"
        "  -h, --help               show this help\n"
        "      --version            show the version\n"
        "\n"
        "A llama's config.json gives the rope as transformers 4 wrote it (rope_theta, rope_scaling),\n"
        "which transformers 5 reads too; its projections are written [out, in], torch.nn.Linear's.\n"
        "In fp32 the weights are the checkpoint's floats, bit for bit (strata checkpoints keep fp32\n"
        "master weights whatever the training precision); the optimizer state is not written.\n"
        "strata-train --init-from DIR reads such a directory back, in either dtype.\n"
        "Exit status: 0 on success, 1 on a runtime failure (missing or unreadable checkpoint,\n"
        "unwritable directory), 2 on bad usage, a checkpoint of neither a GPT nor a llama, or a file to\n"
        "write that is the checkpoint itself or not a regular file.\n",
        f);
}

int main(int argc, char **argv) {
  static const struct option longs[] = {{"hf", required_argument, NULL, 'H'},
                                        {"dtype", required_argument, NULL, OPT_DTYPE},
                                        {"help", no_argument, NULL, 'h'},
                                        {"version", no_argument, NULL, OPT_VERSION},
                                        {NULL, 0, NULL, 0}};
  const char *hf = NULL;
  enum strata_st_dtype dtype = STRATA_ST_F32;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":h", longs, NULL)) != -1) {
    switch (c) {
    case 'H': hf = optarg; break;
    case OPT_DTYPE:
      if (strcmp(optarg, "fp32") == 0) {
        dtype = STRATA_ST_F32;
      } else if (strcmp(optarg, "bf16") == 0) {
        dtype = STRATA_ST_BF16;
      } else {
        fprintf(stderr, PROG ": --dtype '%s': say fp32 or bf16\n", optarg);
        return EXIT_USAGE;
      }
      break;
    case 'h': usage(stdout); return 0;
    case OPT_VERSION: printf("strata-export %s\n", strata_version()); return 0;
    default:
      cli_refuse(PROG, c == ':' ? ':' : '?', argc, argv);
      return EXIT_USAGE;
    }
  }
  if (!hf || !hf[0]) {
    fprintf(stderr, PROG ": say which layout: --hf DIR (see --help)\n");
    return EXIT_USAGE;
  }
  if (optind >= argc) {
    fprintf(stderr, PROG ": which checkpoint? (strata-export --hf DIR CHECKPOINT)\n");
    return EXIT_USAGE;
  }
  const char *checkpoint = argv[optind++];
  if (cli_refuse(PROG, 0, argc, argv))
    return EXIT_USAGE;
  /* before any work: neither file written is the checkpoint (--hf d d/model.safetensors would replace it, optimizer
  ** state and all), nor a FIFO or a device. A directory not there yet is made by the export and holds nothing. */
  struct stat sb;
  if (stat(hf, &sb) == 0 && S_ISDIR(sb.st_mode)) {
    char weights[4096], config[4096];
    snprintf(weights, sizeof weights, "%s/model.safetensors", hf);
    snprintf(config, sizeof config, "%s/config.json", hf);
    const struct strata_file_use files[] = {{.path = checkpoint, .what = "CHECKPOINT"},
                                            {.path = weights, .what = "--hf's model.safetensors", .output = 1},
                                            {.path = config, .what = "--hf's config.json", .output = 1}};
    if (strata_file_preflight(files, 3)) {
      fprintf(stderr, PROG ": %s\n", strata_last_error());
      return EXIT_USAGE;
    }
  }
  int rc = strata_hf_export_as(checkpoint, hf, dtype);
  if (rc) {
    fprintf(stderr, PROG ": %s\n", strata_last_error());
    return rc == STRATA_ERR_PARSE || rc == STRATA_ERR_UNSUPPORTED ? EXIT_USAGE : EXIT_RUNTIME;
  }
  return 0;
}
