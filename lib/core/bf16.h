/* SPDX-License-Identifier: MIT */
/* bf16.h — bfloat16 words on the host side of the library (collectives' host reductions, files, logits read back):
** one widening and the two roundings strata uses. The devices' own conversions are the backends' (backends/host/
** bf16.h, kernels/dialect.h) and give the same bits as strata__bf16_round. Internal. */
#ifndef STRATA__BF16_H
#define STRATA__BF16_H

#include <stdint.h>
#include <string.h>

/* bfloat16 -> float32, exactly: the 16 bits are the top half of the float's. */
static inline float strata__bf16_widen(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* float32 -> bfloat16 to the nearest, ties to even; a NaN stays a quiet NaN of its sign; past the largest bfloat16,
** infinity. keep_subnormals 0: a float32 subnormal becomes a zero of its sign, as the devices round (vcvtneps2bf16,
** strata/ops.h); 1: it rounds to a bfloat16 subnormal, as torch's tensor.to(torch.bfloat16) writes files. */
static inline uint16_t strata__bf16_round(float f, int keep_subnormals) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  const uint32_t mag = u & 0x7fffffffu;
  if (mag > 0x7f800000u)
    return (uint16_t)((u >> 16) | 0x40u);
  if (!keep_subnormals && mag < 0x00800000u)
    return (uint16_t)((u >> 16) & 0x8000u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

#endif /* STRATA__BF16_H */
