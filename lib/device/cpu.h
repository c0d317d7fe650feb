/* SPDX-License-Identifier: MIT */
/* cpu.h — what this CPU can run (its feature flags) and the OpenBLAS core type those flags call for. */
#ifndef STRATA__CPU_H
#define STRATA__CPU_H

#include <stddef.h>

/* Feature flags, as bits of one unsigned (x86-64; 0 on other machines). */
enum strata__cpu_feature {
  STRATA__CPU_SSE3 = 1u << 0,
  STRATA__CPU_SSE4_2 = 1u << 1,
  STRATA__CPU_AVX = 1u << 2,
  STRATA__CPU_AVX2 = 1u << 3,
  STRATA__CPU_FMA = 1u << 4,
  STRATA__CPU_AVX512F = 1u << 5,
  STRATA__CPU_AVX512BW = 1u << 6,
  STRATA__CPU_AVX512VL = 1u << 7,
  STRATA__CPU_AVX512DQ = 1u << 8,
  STRATA__CPU_AVX512BF16 = 1u << 9,
  STRATA__CPU_AMXBF16 = 1u << 10, /* AMX tiles with bf16 products (the OS's tile state enabled in XCR0) */
};

/*
** The features this CPU and its operating system support (AVX state saved
** on context switches included: the compiler's cpuid checks read XGETBV),
** less those named in STRATA_HOST_CPU_HIDE (a comma-separated list of the
** names strata__cpu_feature_names prints, e.g. "avx512f", or "avx512bf16"
** for avx512_bf16; for tests, to play a smaller CPU). An unknown name in
** the list is ignored.
*/
unsigned strata__cpu_features(void);

/* Write the names of `features` ("avx2 fma avx512f ...") into buf (len bytes); returns buf. */
const char *strata__cpu_feature_names(unsigned features, char *buf, size_t len);

/*
** The OpenBLAS core type (an OPENBLAS_CORETYPE value) whose single-precision
** GEMM kernels are the fastest these features run: "SkylakeX" for AVX-512
** F/BW/VL/DQ, "Haswell" for AVX2 + FMA, "SandyBridge" for AVX, NULL where
** OpenBLAS's own choice is as good (older CPUs, other architectures).
** A static string.
*/
const char *strata__cpu_coretype_for(unsigned features);

/*
** The features an OPENBLAS_CORETYPE value's kernels execute (case-insensitive
** name; x86 core types OpenBLAS 0.3 knows). 0 for a name not in the table —
** OpenBLAS then decides what to run, and the host backend reports it.
*/
unsigned strata__cpu_coretype_needs(const char *name);

/*
** Before the host backend's module (and the OpenBLAS it links) is loaded:
** leave a user's OPENBLAS_CORETYPE alone, but refuse one whose kernels need
** features this CPU lacks (they would die of an illegal instruction, or on
** some CPUs compute wrong results) — returns STRATA_ERR_UNSUPPORTED with the
** reason in why. Unset, set it to strata__cpu_coretype_for(the features)
** unless OpenBLAS is already loaded (then it chose at load time, and why
** says so, returning 0). `chosen` (len bytes) receives the value strata set,
** "" where it set none.
*/
int strata__cpu_blas_prepare(char *chosen, size_t chosen_len, char *why, size_t why_len);

#endif /* STRATA__CPU_H */
