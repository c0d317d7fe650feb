/* SPDX-License-Identifier: MIT */
/* bf16.h — the host backend's float32 <-> bfloat16 conversions: one element inline, arrays on the CPU's path. */
#ifndef STRATA__HOST_BF16_H
#define STRATA__HOST_BF16_H

#include <stdint.h>
#include <string.h>

/* bfloat16 -> float32: exact, the 16 bits become the upper half. */
static inline float bf16_widen(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/*
** float32 -> bfloat16 as x86's vcvtneps2bf16 rounds, so that the emulated
** and the native path give the same bits: to nearest, ties to even; NaN
** stays NaN (made quiet, sign and upper payload kept); infinities stay; a
** float32 denormal becomes a zero of its sign; values past the largest
** bfloat16 round to infinity.
*/
static inline uint16_t bf16_round(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  uint32_t mag = u & 0x7fffffffu;
  if (mag > 0x7f800000u)
    return (uint16_t)((u >> 16) | 0x40u);
  if (mag < 0x00800000u)
    return (uint16_t)((u >> 16) & 0x8000u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* Arrays of n elements; x and y must not overlap. The conversion runs on the path strata__bf16_path chose. */
void strata__bf16_from_f32(const float *x, uint16_t *y, int64_t n);
void strata__bf16_to_f32(const uint16_t *x, float *y, int64_t n);
/* strata__bf16_from_f32's bits, y's whole cache lines written around the caches (non-temporal stores) on the
** AVX-512 BF16 path: for a large y that nothing reads again soon (AdamW's bfloat16 copy of the weights). */
void strata__bf16_from_f32_stream(const float *x, uint16_t *y, int64_t n);

/* The emulated array conversion (plain C, vectorised by the compiler), whatever the CPU: for tests and the
** native path's reference. */
void strata__bf16_from_f32_emulated(const float *x, uint16_t *y, int64_t n);

/*
** Which path converts arrays: 1 for AVX-512 BF16 (vcvtneps2bf16), 0 for
** the emulated one. Chosen once, from the CPU's feature flags less those
** STRATA_HOST_CPU_HIDE names (avx512_bf16, or avx512bf16), and logged once
** at level info. `what` (may be NULL) receives a static description.
*/
int strata__bf16_path(const char **what);

#endif /* STRATA__HOST_BF16_H */
