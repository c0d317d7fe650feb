/* SPDX-License-Identifier: MIT */
/* devices.c — the table of GPU models with their published peaks (and each figure's source), matched from names and PCI ids. */
#include "config.h"

#include <ctype.h>
#include <string.h>

#include <strata/plan.h>

#include "plan/plan.h"
#include "core/core.h"

#define GB (1000ull * 1000ull * 1000ull)
#define GIB (1024ull * 1024ull * 1024ull)

/* Typical kernel launch latency (CUDA ~5 us, ROCm/HIP ~8 us; orders of
** magnitude from published microbenchmarks; a calibration run measures it). */
#define LAUNCH_NVIDIA_US 5.0
#define LAUNCH_AMD_US 8.0

/*
** bf16 peaks are dense (no 2:4 sparsity) bf16 matrix rates with fp32 accumulation, from the same
** datasheets and whitepapers as each row's other figures. A part without bf16 matrix units (Pascal,
** Volta and Turing have fp16 tensor cores at most; Vega 10/20) has its fp32 figure there: a bf16 run
** there multiplies at the fp32 rate, which is what the planner must expect of it.
**
** One row: the figures, the name the planner shows, the words a topology's
** name must all contain to match (lowercase, separated by '*', tried in
** table order so that the specific rows come before the general ones),
** and the PCI ids (from the pci.ids database) of the part.
*/
struct row {
  struct strata_gpu_model m;
  const char *match;
  unsigned vendor_id, device_ids[3];
};

#define NV 0x10de
#define AMD 0x1002

static const struct row table[] = {
    /* NVIDIA Tesla P100 datasheet (2016): SXM2 10.6 TFLOPS fp32, 732 GB/s HBM2, 16 GB; no bf16 (fp32 there). */
    {{"P100-SXM2-16GB", "NVIDIA", 10.6, 0, 10.6, 732, 16 * GIB, LAUNCH_NVIDIA_US, "NVIDIA Tesla P100 datasheet"},
     "p100", NV, {0x15f9, 0x15f8, 0x15f7}},
    /* NVIDIA V100 datasheet (2020): SXM2 15.7 TFLOPS fp32, 900 GB/s, 16 or 32 GB. The DGX-2H's SXM3
    ** parts run at higher clocks (450 W); they are planned at the SXM2 figure. V100's tensor cores take fp16
    ** only (125 TFLOPS), not bf16: its bf16 figure is its fp32 one. */
    {{"V100-SXM3-32GB", "NVIDIA", 15.7, 0, 15.7, 900, 32 * GIB, LAUNCH_NVIDIA_US, "NVIDIA V100 datasheet (SXM2 figures)"},
     "v100*sxm3", NV, {0x1db8, 0x1dba, 0}},
    {{"V100-SXM2-32GB", "NVIDIA", 15.7, 0, 15.7, 900, 32 * GIB, LAUNCH_NVIDIA_US, "NVIDIA V100 datasheet"},
     "v100*32gb", NV, {0x1db5, 0x1db6, 0}},
    {{"V100-SXM2-16GB", "NVIDIA", 15.7, 0, 15.7, 900, 16 * GIB, LAUNCH_NVIDIA_US, "NVIDIA V100 datasheet"},
     "v100*sxm2", NV, {0x1db1, 0, 0}},
    /* NVIDIA V100 datasheet: PCIe 14 TFLOPS fp32, 900 GB/s. */
    {{"V100-PCIE-16GB", "NVIDIA", 14.0, 0, 14.0, 900, 16 * GIB, LAUNCH_NVIDIA_US, "NVIDIA V100 datasheet"},
     "v100", NV, {0x1db4, 0, 0}},
    /* NVIDIA T4 datasheet (2019): 8.1 TFLOPS fp32, 320 GB/s GDDR6, 16 GB; fp16/int8 tensor cores, no bf16 (fp32). */
    {{"T4", "NVIDIA", 8.1, 0, 8.1, 320, 16 * GIB, LAUNCH_NVIDIA_US, "NVIDIA T4 datasheet"}, "t4", NV, {0x1eb8, 0, 0}},
    /* NVIDIA A100 datasheet (2021): 19.5 TFLOPS fp32, 156 tf32 dense, 312 bf16 dense; 40 GB 1555 GB/s, 80 GB SXM 2039 GB/s,
    ** 80 GB PCIe 1935 GB/s. */
    {{"A100-SXM4-80GB", "NVIDIA", 19.5, 156, 312, 2039, 80 * GIB, LAUNCH_NVIDIA_US, "NVIDIA A100 datasheet"},
     "a100*sxm*80gb", NV, {0x20b2, 0x20b3, 0}},
    {{"A100-PCIE-80GB", "NVIDIA", 19.5, 156, 312, 1935, 80 * GIB, LAUNCH_NVIDIA_US, "NVIDIA A100 datasheet"},
     "a100*pcie*80gb", NV, {0x20b5, 0, 0}},
    {{"A100-80GB", "NVIDIA", 19.5, 156, 312, 2039, 80 * GIB, LAUNCH_NVIDIA_US, "NVIDIA A100 datasheet (SXM)"},
     "a100*80gb", NV, {0, 0, 0}},
    {{"A100-PCIE-40GB", "NVIDIA", 19.5, 156, 312, 1555, 40 * GIB, LAUNCH_NVIDIA_US, "NVIDIA A100 datasheet"},
     "a100*pcie", NV, {0x20f1, 0, 0}},
    {{"A100-SXM4-40GB", "NVIDIA", 19.5, 156, 312, 1555, 40 * GIB, LAUNCH_NVIDIA_US, "NVIDIA A100 datasheet"},
     "a100", NV, {0x20b0, 0x20b1, 0}},
    /* NVIDIA H100 datasheet (2023): SXM 67 TFLOPS fp32, 494.5 tf32 dense, 989.5 bf16 dense (1979 with sparsity),
    ** 3.35 TB/s, 80 GB; PCIe 51 TFLOPS fp32, 378 tf32, 756 bf16 dense, 2 TB/s. */
    {{"H100-PCIE-80GB", "NVIDIA", 51.0, 378, 756, 2000, 80 * GIB, LAUNCH_NVIDIA_US, "NVIDIA H100 datasheet"},
     "h100*pcie", NV, {0x2331, 0, 0}},
    {{"H100-SXM5-80GB", "NVIDIA", 67.0, 494.5, 989.5, 3350, 80 * GIB, LAUNCH_NVIDIA_US, "NVIDIA H100 datasheet"},
     "h100", NV, {0x2330, 0, 0}},
    /* NVIDIA H200 datasheet (2024): 67 TFLOPS fp32, 494.5 tf32 dense, 989.5 bf16 dense, 4.8 TB/s, 141 GB. */
    {{"H200-SXM-141GB", "NVIDIA", 67.0, 494.5, 989.5, 4800, 141 * GB, LAUNCH_NVIDIA_US, "NVIDIA H200 datasheet"},
     "h200", NV, {0x2335, 0, 0}},
    /* NVIDIA L4 datasheet (2023): 30.3 TFLOPS fp32, 60 tf32 dense, 121 bf16 dense (242 sparse), 300 GB/s, 24 GB. */
    {{"L4", "NVIDIA", 30.3, 60, 121, 300, 24 * GIB, LAUNCH_NVIDIA_US, "NVIDIA L4 datasheet"}, "l4", NV, {0x27b8, 0, 0}},
    /* NVIDIA L40S datasheet (2023): 91.6 TFLOPS fp32, 183 tf32 dense, 362 bf16 dense (733 sparse), 864 GB/s, 48 GB. */
    {{"L40S", "NVIDIA", 91.6, 183, 362, 864, 48 * GIB, LAUNCH_NVIDIA_US, "NVIDIA L40S datasheet"},
     "l40s", NV, {0x26b9, 0, 0}},
    /* NVIDIA A10 datasheet (2021): 31.2 TFLOPS fp32, 62.5 tf32 dense, 125 bf16 dense (250 sparse), 600 GB/s, 24 GB. */
    {{"A10", "NVIDIA", 31.2, 62.5, 125, 600, 24 * GIB, LAUNCH_NVIDIA_US, "NVIDIA A10 datasheet"},
     "a10", NV, {0x2236, 0, 0}},
    /* NVIDIA Ampere GA102 whitepaper: RTX 3090 35.6 TFLOPS fp32 (tf32 dense the same), 71 bf16 dense with fp32
    ** accumulation (GeForce runs it at half the fp16-accumulate 142), 936 GB/s, 24 GB. */
    {{"RTX-3090", "NVIDIA", 35.6, 35.6, 71, 936, 24 * GIB, LAUNCH_NVIDIA_US, "NVIDIA Ampere GA102 whitepaper"},
     "3090", NV, {0x2204, 0, 0}},
    /* NVIDIA Ada Lovelace whitepaper: RTX 4090 82.6 TFLOPS fp32 (tf32 dense the same), 165.2 bf16 dense with fp32
    ** accumulation (330.3 sparse), 1008 GB/s, 24 GB. */
    {{"RTX-4090", "NVIDIA", 82.6, 82.6, 165.2, 1008, 24 * GIB, LAUNCH_NVIDIA_US, "NVIDIA Ada Lovelace whitepaper"},
     "4090", NV, {0x2684, 0, 0}},
    /* NVIDIA GeForce GTX 1070 specifications: 6.5 TFLOPS fp32 (boost), 256 GB/s, 8 GB; no bf16 (fp32). */
    {{"GTX-1070", "NVIDIA", 6.5, 0, 6.5, 256, 8 * GIB, LAUNCH_NVIDIA_US, "NVIDIA GeForce GTX 1070 specifications"},
     "1070", NV, {0x1b81, 0, 0}},
    /* AMD Instinct MI250X datasheet: per OAM 95.7 TFLOPS fp32 matrix (47.9 vector), 383 bf16 matrix, 3.2 TB/s, 128 GB,
    ** as two GCDs that each appear as one GPU: half of each. hwloc names them "MI200 (MCM)". */
    {{"MI250X-GCD", "AMD", 47.9, 0, 191.5, 1638, 64 * GIB, LAUNCH_AMD_US, "AMD Instinct MI250X datasheet (one of two GCDs)"},
     "mi250", AMD, {0x740c, 0x7408, 0}},
    {{"MI250X-GCD", "AMD", 47.9, 0, 191.5, 1638, 64 * GIB, LAUNCH_AMD_US, "AMD Instinct MI250X datasheet (one of two GCDs)"},
     "mi200", AMD, {0, 0, 0}},
    /* AMD Instinct MI300X datasheet: 163.4 TFLOPS fp32 matrix, 653.7 tf32 dense, 1307.4 bf16 dense, 5.3 TB/s,
    ** 192 GB. */
    {{"MI300X", "AMD", 163.4, 653.7, 1307.4, 5300, 192 * GB, LAUNCH_AMD_US, "AMD Instinct MI300X datasheet"},
     "mi300x", AMD, {0x74a1, 0, 0}},
    /* AMD Instinct MI300A datasheet: 122.6 TFLOPS fp32 matrix, 490.3 tf32 dense, 980.6 bf16 dense, 5.3 TB/s,
    ** 128 GB unified. */
    {{"MI300A", "AMD", 122.6, 490.3, 980.6, 5300, 128 * GB, LAUNCH_AMD_US, "AMD Instinct MI300A datasheet"},
     "mi300", AMD, {0x74a0, 0, 0}},
    /* AMD Instinct MI100 datasheet: 46.1 TFLOPS fp32 matrix (23.1 vector), 92.3 bf16 matrix, 1.23 TB/s, 32 GB. */
    {{"MI100", "AMD", 46.1, 0, 92.3, 1228, 32 * GIB, LAUNCH_AMD_US, "AMD Instinct MI100 datasheet"},
     "mi100", AMD, {0x738c, 0, 0}},
    /* AMD Radeon Instinct MI50 datasheet: 13.3 TFLOPS fp32 (no bf16 matrix units: fp32), 1024 GB/s, 32 GB
    ** (hwloc's RSMI name is cut: "deon Instinct MI50 32GB"). */
    {{"MI50-32GB", "AMD", 13.3, 0, 13.3, 1024, 32 * GIB, LAUNCH_AMD_US, "AMD Radeon Instinct MI50 datasheet"},
     "mi50", AMD, {0x66a1, 0, 0}},
    /* AMD Radeon Pro VII specifications: 13.1 TFLOPS fp32, 1024 GB/s, 16 GB (OpenCL's name for an MI50). */
    {{"Radeon-Pro-VII", "AMD", 13.1, 0, 13.1, 1024, 16 * GIB, LAUNCH_AMD_US, "AMD Radeon Pro VII specifications"},
     "pro vii", AMD, {0x66a3, 0, 0}},
    /* AMD Radeon Vega Frontier Edition specifications: 13.1 TFLOPS fp32, 483 GB/s, 16 GB. */
    {{"Vega-Frontier-Edition", "AMD", 13.1, 0, 13.1, 483, 16 * GIB, LAUNCH_AMD_US,
      "AMD Radeon Vega Frontier Edition specifications"},
     "vega*frontier", AMD, {0x6863, 0, 0}},
};

#define NROWS ((int)(sizeof table / sizeof table[0]))

STRATA_API int strata_gpu_model_count(void) { return NROWS; }

STRATA_API int strata_gpu_model_get(int index, struct strata_gpu_model *out) {
  if (!out)
    return strata__error(STRATA_ERR_INVALID, "strata_gpu_model_get: out is NULL");
  if (index < 0 || index >= NROWS)
    return strata__error(STRATA_ERR_RANGE, "GPU model %d out of range (%d rows)", index, NROWS);
  *out = table[index].m;
  return STRATA_OK;
}

/* Whether lowercase `hay` holds every '*'-separated word of `words`; "l4"
** and "t4" also must not be the tail of a longer token ("gtx 1070 ti4"). */
static int matches(const char *hay, const char *words) {
  char word[32];
  while (*words) {
    size_t n = strcspn(words, "*");
    if (n >= sizeof word)
      return 0;
    memcpy(word, words, n);
    word[n] = '\0';
    words += n + (words[n] == '*');
    const char *p = hay, *hit = NULL;
    while ((p = strstr(p, word)) != NULL) {
      /* a short word must stand at a token boundary (so "t4" is not found in "rtx 4090t4x") */
      int before = p == hay || !isalnum((unsigned char)p[-1]);
      int after = !isalnum((unsigned char)p[n]) || n > 3;
      if (n > 3 || (before && after)) {
        hit = p;
        break;
      }
      p++;
    }
    if (!hit)
      return 0;
  }
  return 1;
}

/* The name lowercased, with '-' and '_' as spaces so that "A100-SXM4-80GB" and "a100 sxm4 80gb" read alike. */
static void normalise(char *dst, size_t cap, const char *src) {
  size_t i = 0;
  for (; src[i] && i + 1 < cap; i++) {
    char c = (char)tolower((unsigned char)src[i]);
    dst[i] = c == '-' || c == '_' ? ' ' : c;
  }
  dst[i] = '\0';
}

STRATA_API int strata_gpu_model_find(const char *name, unsigned vendor_id, unsigned device_id,
                                     struct strata_gpu_model *out) {
  if (!out)
    return strata__error(STRATA_ERR_INVALID, "strata_gpu_model_find: out is NULL");
  if (name && *name) {
    char low[256], key[64];
    normalise(low, sizeof low, name);
    for (int i = 0; i < NROWS; i++) {
      normalise(key, sizeof key, table[i].match);
      if (matches(low, key)) {
        *out = table[i].m;
        return STRATA_OK;
      }
    }
    /* the table's own names ("A100-SXM4-80GB") match themselves */
    for (int i = 0; i < NROWS; i++)
      if (strcasecmp(name, table[i].m.name) == 0) {
        *out = table[i].m;
        return STRATA_OK;
      }
  }
  if (vendor_id && device_id)
    for (int i = 0; i < NROWS; i++)
      for (int j = 0; j < 3; j++)
        if (table[i].vendor_id == vendor_id && table[i].device_ids[j] == device_id) {
          *out = table[i].m;
          return STRATA_OK;
        }
  return strata__error(STRATA_ERR_NOT_FOUND, "GPU model \"%s\" (PCI %04x:%04x) is not in the table", name ? name : "",
                       vendor_id, device_id);
}

STRATA_API int strata_device_cost_from_model(const struct strata_gpu_model *m, struct strata_device_cost *out) {
  if (!m || !out)
    return strata__error(STRATA_ERR_INVALID, "strata_device_cost_from_model: NULL argument");
  /* the measured refinements (GEMM speeds by size and shape, op costs) are none: a table row has only peaks */
  *out = (struct strata_device_cost){.flops = m->fp32_tflops * 1e12 * STRATA_PLAN_SUSTAINED,
                                     .bf16_flops = (m->bf16_tflops > 0 ? m->bf16_tflops : m->fp32_tflops) * 1e12 *
                                                   STRATA_PLAN_SUSTAINED,
                                     .mem_gbps = m->mem_gbps,
                                     .memory = m->memory,
                                     .launch_us = m->launch_us,
                                     .model = m->name,
                                     .source = m->source,
                                     .gemm_elem_bytes = 4};
  return STRATA_OK;
}

/*
** Memory of GPUs the table has no peaks for, by PCI id: data-centre parts
** whose memory is one figure for every board (a consumer card's depends on
** its maker, so none is listed). Device ids from the pci.ids database.
*/
static const struct {
  unsigned vendor_id, device_id;
  uint64_t memory;
  const char *source;
} memory_by_pci[] = {
    /* NVIDIA Tesla M2075 datasheet: 6 GB GDDR5. */
    {NV, 0x1094, 6 * GIB, "NVIDIA Tesla M2075 datasheet"},
    /* NVIDIA Tesla K20 board specifications: K20m 5 GB, K20Xm 6 GB GDDR5. */
    {NV, 0x1028, 5 * GIB, "NVIDIA Tesla K20 board specifications"},
    {NV, 0x1021, 6 * GIB, "NVIDIA Tesla K20X board specifications"},
    /* NVIDIA Tesla K40 datasheet: 12 GB GDDR5 (K40m passive, K40c active). */
    {NV, 0x1023, 12 * GIB, "NVIDIA Tesla K40 datasheet"},
    {NV, 0x1024, 12 * GIB, "NVIDIA Tesla K40 datasheet"},
    /* NVIDIA Tesla K80 datasheet: 24 GB on two GPUs, 12 GB each (each its own PCI function). */
    {NV, 0x102d, 12 * GIB, "NVIDIA Tesla K80 datasheet (one of two GPUs)"},
};

int strata__gpu_memory_by_pci(unsigned vendor_id, unsigned device_id, uint64_t *memory, const char **source) {
  for (size_t i = 0; i < sizeof memory_by_pci / sizeof memory_by_pci[0]; i++)
    if (memory_by_pci[i].vendor_id == vendor_id && memory_by_pci[i].device_id == device_id) {
      *memory = memory_by_pci[i].memory;
      *source = memory_by_pci[i].source;
      return 1;
    }
  return 0;
}
