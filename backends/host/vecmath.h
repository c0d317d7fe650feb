/* SPDX-License-Identifier: MIT */
/* vecmath.h — exp and tanh the compiler can vectorise, and the attribute that builds a loop once per x86 vector width. */
#ifndef STRATA__HOST_VECMATH_H
#define STRATA__HOST_VECMATH_H

#include <stdint.h>
#include <string.h>

/*
** HOST_SIMD: the function is compiled three times — AVX-512, AVX2 (+ FMA) and
** the baseline — and the loader picks the widest this CPU runs (an ifunc),
** so one distributable module gets the vector width of the machine it runs
** on. Results may differ in the last bits between the variants (FMA), never
** between runs or thread counts on one machine.
*/
#if defined(__x86_64__) && defined(__ELF__) && !defined(STRATA_NO_TARGET_CLONES) && !defined(__clang__) &&        \
    defined(__GNUC__) && __GNUC__ >= 12
/* ISA levels, chosen by feature flags (x86-64-v4: AVX-512 F/BW/CD/DQ/VL; v3: AVX2, FMA, BMI) — never
** "arch=skylake-avx512", which asks for that CPU model and falls to the baseline on an unknown one */
#define HOST_SIMD __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#elif defined(__x86_64__) && defined(__ELF__) && !defined(STRATA_NO_TARGET_CLONES) &&                              \
    (defined(__clang__) ? __clang_major__ >= 14 : defined(__GNUC__) && __GNUC__ >= 6)
#define HOST_SIMD __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define HOST_SIMD
#endif

/*
** e^x for float, branch-free so that loops over it vectorise: x = n ln2 + r
** with |r| <= ln2/2, a degree-6 polynomial for e^r (Cephes' expf
** coefficients), 2^n put straight into the exponent bits. Within 2 ulp of
** expf over [-87.3, 88.7]; below that it returns about 1e-38 instead of a
** denormal or 0, above it about 2.4e38 instead of inf (every caller
** subtracts a maximum first); NaN gives NaN, so a diverged run still shows.
*/
/* the reduction's constants (log2 e; ln 2 split in two so that n ln2 is exact) and the polynomial's coefficients,
** shared with the AVX-512 form in host-attn-bf16.c (exp16) */
#define VM_LOG2E 1.44269504f
#define VM_LN2_HI 0.693359375f
#define VM_LN2_LO 2.12194440e-4f /* subtracted: ln 2 = VM_LN2_HI - VM_LN2_LO */
#define VM_EXP_P5 1.9875691500e-4f
#define VM_EXP_P4 1.3981999507e-3f
#define VM_EXP_P3 8.3334519073e-3f
#define VM_EXP_P2 4.1665795894e-2f
#define VM_EXP_P1 1.6666665459e-1f
#define VM_EXP_P0 5.0000001201e-1f

static inline float vm_exp(float x) {
  float c = x > 88.37626f ? 88.37626f : x;
  c = c > -87.33654f ? c : -87.33654f; /* NaN lands here too: the conversion below stays defined */
  const float shift = 12582912.0f;     /* 1.5 * 2^23: adding it rounds to an integer */
  float n = (c * VM_LOG2E + shift) - shift;
  float r = c - n * VM_LN2_HI;
  r = r + n * VM_LN2_LO;
  float p = VM_EXP_P5;
  p = p * r + VM_EXP_P4;
  p = p * r + VM_EXP_P3;
  p = p * r + VM_EXP_P2;
  p = p * r + VM_EXP_P1;
  p = p * r + VM_EXP_P0;
  float e = p * r * r + r + 1.0f;
  uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  float y = e * scale;
  return x != x ? x : y;
}

/* tanh through one exponential: (e^2u - 1) / (e^2u + 1), u clamped where tanh is 1 to float precision. */
static inline float vm_tanh(float u) {
  u = u < -9.0f ? -9.0f : u > 9.0f ? 9.0f : u;
  float e = vm_exp(2.0f * u);
  return (e - 1.0f) / (e + 1.0f);
}

#endif /* STRATA__HOST_VECMATH_H */
