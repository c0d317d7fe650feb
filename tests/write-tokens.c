/* SPDX-License-Identifier: MIT */
/* write-tokens.c — the tests' own writer of nanoGPT (raw uint16), raw uint32 and llm.c token files: each byte of stdin plus an offset is one token. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
** write-tokens raw|llmc|u32|llmc32 OUT [ADD]: read stdin to its end; token
** i is byte i + ADD (default 0, so ids stay below 256 + ADD). raw writes the
** tokens as little-endian uint16, as nanoGPT's prepare.py; llmc writes
** llm.c's header first (256 int32: magic 20240520, version 1, token count,
** zeros); u32 writes little-endian uint32 tokens, llmc32 with llm.c's
** Llama 3 header (magic 20240801, version 7). Exit 0, or 2 with a message.
*/
int main(int argc, char **argv) {
  if (argc < 3 || argc > 4 ||
      (strcmp(argv[1], "raw") != 0 && strcmp(argv[1], "llmc") != 0 && strcmp(argv[1], "u32") != 0 &&
       strcmp(argv[1], "llmc32") != 0)) {
    fprintf(stderr, "usage: write-tokens raw|llmc|u32|llmc32 OUT [ADD] < BYTES\n");
    return 2;
  }
  const int wide = strcmp(argv[1], "u32") == 0 || strcmp(argv[1], "llmc32") == 0;
  long add = argc == 4 ? strtol(argv[3], NULL, 10) : 0;
  if (add < 0 || add > (wide ? 16777216L : 65535 - 255)) {
    fprintf(stderr, "write-tokens: ADD must lie in [0, %ld]\n", wide ? 16777216L : 65535L - 255);
    return 2;
  }
  size_t n = 0, cap = 1 << 16;
  uint8_t *in = malloc(cap);
  int c;
  while (in && (c = getchar()) != EOF) {
    if (n == cap) {
      uint8_t *bigger = realloc(in, cap *= 2);
      if (!bigger) {
        free(in);
        in = NULL;
        break;
      }
      in = bigger;
    }
    in[n++] = (uint8_t)c;
  }
  FILE *f = in ? fopen(argv[2], "wb") : NULL;
  if (!f) {
    fprintf(stderr, "write-tokens: cannot write %s\n", argv[2]);
    free(in);
    return 2;
  }
  if (strncmp(argv[1], "llmc", 4) == 0) {
    uint8_t header[1024] = {0};
    uint32_t fields[3] = {wide ? 20240801u : 20240520u, wide ? 7u : 1u, (uint32_t)n};
    for (int k = 0; k < 3; k++)
      for (int b = 0; b < 4; b++)
        header[4 * k + b] = (uint8_t)(fields[k] >> (8 * b));
    fwrite(header, 1, sizeof header, f);
  }
  for (size_t i = 0; i < n; i++) {
    unsigned t = (unsigned)in[i] + (unsigned)add;
    for (int b = 0; b < (wide ? 4 : 2); b++)
      putc((int)((t >> (8 * b)) & 0xff), f);
  }
  int bad = ferror(f);
  bad |= fclose(f) != 0;
  free(in);
  if (bad) {
    fprintf(stderr, "write-tokens: writing %s failed\n", argv[2]);
    return 2;
  }
  return 0;
}
