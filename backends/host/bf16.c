/* SPDX-License-Identifier: MIT */
/* bf16.c — array conversions between float32 and bfloat16: AVX-512 BF16 where the CPU has it, else emulated. */
#include "config.h"

#include <pthread.h>

#include "bf16.h"
#include "device/cpu.h"
#include "host.h"
#include "vecmath.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 10
#include <immintrin.h>
#define HAVE_NATIVE_BF16 1
#endif

/* The scalar rounding over an array: integer operations only, so the compiler vectorises it at every width. */
HOST_SIMD void strata__bf16_from_f32_emulated(const float *x, uint16_t *y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++)
    y[i] = bf16_round(x[i]);
}

static HOST_SIMD void to_f32(const uint16_t *x, float *y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++)
    y[i] = bf16_widen(x[i]);
}

#ifdef HAVE_NATIVE_BF16
/* vcvtneps2bf16, 16 floats an instruction; the tail through masks (AVX-512 BW for the 16-bit store). */
__attribute__((target("avx512bf16,avx512f,avx512vl,avx512bw"))) static void from_f32_native(const float *x,
                                                                                           uint16_t *y, int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512bh r = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
    _mm512_storeu_si512((void *)(y + i), (__m512i)r);
  }
  for (; i < n; i += 16) {
    __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    __m256bh r = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(k, x + i));
    _mm256_mask_storeu_epi16((void *)(y + i), k, (__m256i)r);
  }
}

/*
** from_f32_native with non-temporal stores for the whole 64-byte lines of
** y: they go to memory without first reading the lines they replace (a plain
** store reads each line in). The elements before y's first whole line and
** the tail go through from_f32_native; an sfence orders the streamed lines
** before whatever the caller does next.
*/
__attribute__((target("avx512bf16,avx512f,avx512vl,avx512bw"))) static void from_f32_stream(const float *x,
                                                                                           uint16_t *y, int64_t n) {
  int64_t i = 0;
  const uintptr_t odd = (uintptr_t)y & 63;
  if (odd && (odd & 1) == 0) { /* the elements before y's first whole line (an odd y streams nothing) */
    i = (int64_t)((64 - odd) / 2);
    i = i < n ? i : n;
    from_f32_native(x, y, i);
  }
  if (((uintptr_t)(y + i) & 63) == 0)
    for (; i + 32 <= n; i += 32)
      _mm512_stream_si512((void *)(y + i),
                          (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i)));
  from_f32_native(x + i, y + i, n - i);
  _mm_sfence();
}
#endif

static void (*from_f32)(const float *, uint16_t *, int64_t) = strata__bf16_from_f32_emulated;
static int native;
static pthread_once_t choose_once = PTHREAD_ONCE_INIT;

#define NEEDS (STRATA__CPU_AVX512BF16 | STRATA__CPU_AVX512F | STRATA__CPU_AVX512VL | STRATA__CPU_AVX512BW)

static void choose(void) {
#ifdef HAVE_NATIVE_BF16
  if ((strata__cpu_features() & NEEDS) == NEEDS) {
    from_f32 = from_f32_native;
    native = 1;
  }
#endif
  strata__host_log(STRATA_LOG_INFO, "bf16 conversions: %s",
                   native ? "AVX-512 BF16 (vcvtneps2bf16)" : "emulated (no AVX-512 BF16 instructions in use)");
}

int strata__bf16_path(const char **what) {
  pthread_once(&choose_once, choose);
  if (what)
    *what = native ? "AVX-512 BF16 (vcvtneps2bf16)" : "emulated";
  return native;
}

void strata__bf16_from_f32(const float *x, uint16_t *y, int64_t n) {
  pthread_once(&choose_once, choose);
  from_f32(x, y, n);
}

void strata__bf16_from_f32_stream(const float *x, uint16_t *y, int64_t n) {
  pthread_once(&choose_once, choose);
#ifdef HAVE_NATIVE_BF16
  if (native) {
    from_f32_stream(x, y, n);
    return;
  }
#endif
  from_f32(x, y, n);
}

void strata__bf16_to_f32(const uint16_t *x, float *y, int64_t n) { to_f32(x, y, n); }
