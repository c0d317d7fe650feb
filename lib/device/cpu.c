/* SPDX-License-Identifier: MIT */
/* cpu.c — this CPU's feature flags (cpuid) and the OpenBLAS core type chosen from them before OpenBLAS loads. */
#include "config.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "device/cpu.h"
#include "strata/common.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

static const struct {
  unsigned bit;
  const char *name;
} feature_names[] = {
    {STRATA__CPU_SSE3, "sse3"},         {STRATA__CPU_SSE4_2, "sse4_2"},     {STRATA__CPU_AVX, "avx"},
    {STRATA__CPU_AVX2, "avx2"},         {STRATA__CPU_FMA, "fma"},           {STRATA__CPU_AVX512F, "avx512f"},
    {STRATA__CPU_AVX512BW, "avx512bw"}, {STRATA__CPU_AVX512VL, "avx512vl"}, {STRATA__CPU_AVX512DQ, "avx512dq"},
    {STRATA__CPU_AVX512BF16, "avx512_bf16"}, {STRATA__CPU_AMXBF16, "amx_bf16"},
};
#define NFEATURES (sizeof feature_names / sizeof feature_names[0])

/* Other spellings STRATA_HOST_CPU_HIDE takes (the compiler's target name). */
static const struct {
  unsigned bit;
  const char *name;
} feature_aliases[] = {{STRATA__CPU_AVX512BF16, "avx512bf16"}, {STRATA__CPU_AMXBF16, "amxbf16"}};

static unsigned features_hidden(void) {
  const char *env = getenv("STRATA_HOST_CPU_HIDE");
  unsigned hide = 0;
  if (!env)
    return 0;
  for (const char *p = env; *p;) {
    size_t len = strcspn(p, ",");
    for (size_t i = 0; i < NFEATURES; i++)
      if (strlen(feature_names[i].name) == len && strncasecmp(p, feature_names[i].name, len) == 0)
        hide |= feature_names[i].bit;
    for (size_t i = 0; i < sizeof feature_aliases / sizeof feature_aliases[0]; i++)
      if (strlen(feature_aliases[i].name) == len && strncasecmp(p, feature_aliases[i].name, len) == 0)
        hide |= feature_aliases[i].bit;
    p += len;
    if (*p == ',')
      p++;
  }
  return hide;
}

unsigned strata__cpu_features(void) {
  unsigned f = 0;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d))
    return 0;
  if (c & (1u << 0))
    f |= STRATA__CPU_SSE3;
  if (c & (1u << 20))
    f |= STRATA__CPU_SSE4_2;
  /* AVX registers are usable only where the OS saves them (OSXSAVE, then XCR0) */
  uint64_t xcr0 = 0;
  if (c & (1u << 27)) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = ((uint64_t)hi << 32) | lo;
  }
  int avx_state = (xcr0 & 0x6) == 0x6, avx512_state = avx_state && (xcr0 & 0xe0) == 0xe0;
  if (avx_state && (c & (1u << 28)))
    f |= STRATA__CPU_AVX;
  if (avx_state && (c & (1u << 12)))
    f |= STRATA__CPU_FMA;
  if (__get_cpuid_max(0, NULL) >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    unsigned max_sub = a;
    if (avx_state && (b & (1u << 5)))
      f |= STRATA__CPU_AVX2;
    if (avx512_state) {
      if (b & (1u << 16))
        f |= STRATA__CPU_AVX512F;
      if (b & (1u << 17))
        f |= STRATA__CPU_AVX512DQ;
      if (b & (1u << 30))
        f |= STRATA__CPU_AVX512BW;
      if (b & (1u << 31))
        f |= STRATA__CPU_AVX512VL;
      /* AMX-TILE and AMX-BF16, with the tile configuration and data saved by the OS (XCR0 bits 17, 18) */
      if ((d & (1u << 24)) && (d & (1u << 22)) && (xcr0 & 0x60000) == 0x60000)
        f |= STRATA__CPU_AMXBF16;
      if (max_sub >= 1) {
        __cpuid_count(7, 1, a, b, c, d);
        if (a & (1u << 5))
          f |= STRATA__CPU_AVX512BF16;
      }
    }
  }
#endif
  return f & ~features_hidden();
}

const char *strata__cpu_feature_names(unsigned features, char *buf, size_t len) {
  size_t at = 0;
  if (len)
    buf[0] = '\0';
  for (size_t i = 0; i < NFEATURES; i++)
    if (features & feature_names[i].bit) {
      int n = snprintf(buf + at, at < len ? len - at : 0, "%s%s", at ? " " : "", feature_names[i].name);
      if (n < 0 || at + (size_t)n >= len)
        break;
      at += (size_t)n;
    }
  return buf;
}

#define AVX512 (STRATA__CPU_AVX512F | STRATA__CPU_AVX512BW | STRATA__CPU_AVX512VL | STRATA__CPU_AVX512DQ)
#define AVX2 (STRATA__CPU_AVX | STRATA__CPU_AVX2 | STRATA__CPU_FMA)

/* OpenBLAS x86 core types and what their kernels execute (its kernel/x86_64 KERNEL.* files: the
** SkylakeX kernels are AVX-512 F/BW/VL/DQ, Cooperlake adds BF16, Haswell and Zen are AVX2 + FMA). */
static const struct {
  const char *name;
  unsigned needs;
} coretypes[] = {
    {"SapphireRapids", AVX512 | AVX2 | STRATA__CPU_AVX512BF16},
    {"Cooperlake", AVX512 | AVX2 | STRATA__CPU_AVX512BF16},
    {"SkylakeX", AVX512 | AVX2},
    {"Haswell", AVX2},
    {"Zen", AVX2},
    {"SandyBridge", STRATA__CPU_AVX},
    {"Bulldozer", STRATA__CPU_AVX},
    {"Piledriver", STRATA__CPU_AVX | STRATA__CPU_FMA},
    {"Steamroller", STRATA__CPU_AVX | STRATA__CPU_FMA},
    {"Excavator", AVX2},
    {"Nehalem", STRATA__CPU_SSE4_2},
    {"Barcelona", STRATA__CPU_SSE3},
    {"Core2", STRATA__CPU_SSE3},
    {"Penryn", STRATA__CPU_SSE3},
    {"Dunnington", STRATA__CPU_SSE3},
    {"Atom", STRATA__CPU_SSE3},
    {"Prescott", STRATA__CPU_SSE3},
};

const char *strata__cpu_coretype_for(unsigned f) {
  if ((f & (AVX512 | AVX2)) == (AVX512 | AVX2))
    return "SkylakeX";
  if ((f & AVX2) == AVX2)
    return "Haswell";
  if (f & STRATA__CPU_AVX)
    return "SandyBridge";
  return NULL;
}

unsigned strata__cpu_coretype_needs(const char *name) {
  for (size_t i = 0; i < sizeof coretypes / sizeof coretypes[0]; i++)
    if (strcasecmp(name, coretypes[i].name) == 0)
      return coretypes[i].needs;
  return 0;
}

int strata__cpu_blas_prepare(char *chosen, size_t chosen_len, char *why, size_t why_len) {
  unsigned f = strata__cpu_features();
  char have[160], lack[160];
  if (chosen_len)
    chosen[0] = '\0';
  if (why_len)
    why[0] = '\0';
  const char *user = getenv("OPENBLAS_CORETYPE");
  if (user && *user) {
    unsigned missing = strata__cpu_coretype_needs(user) & ~f;
    if (missing) {
      snprintf(why, why_len, "OPENBLAS_CORETYPE=%.40s needs %s, which this CPU lacks (it has: %s); unset it to let strata choose",
               user, strata__cpu_feature_names(missing, lack, sizeof lack), strata__cpu_feature_names(f, have, sizeof have));
      return STRATA_ERR_UNSUPPORTED;
    }
    return STRATA_OK;
  }
  const char *pick = strata__cpu_coretype_for(f);
  if (!pick)
    return STRATA_OK;
  /* A program that links OpenBLAS itself has run its constructor, which read the variable already */
  if (dlsym(RTLD_DEFAULT, "openblas_get_corename")) {
    snprintf(why, why_len,
             "OpenBLAS was loaded before strata could choose its kernels: set OPENBLAS_CORETYPE=%s before the program starts "
             "for this CPU's fastest",
             pick);
    return STRATA_OK;
  }
  setenv("OPENBLAS_CORETYPE", pick, 1); /* unset or empty: OpenBLAS reads "" as an unknown name */
  snprintf(chosen, chosen_len, "%s", pick);
  return STRATA_OK;
}
