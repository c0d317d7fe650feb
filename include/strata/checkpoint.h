/* SPDX-License-Identifier: MIT */
/* strata/checkpoint.h — safetensors files: float tensors by name plus string metadata, written atomically. */
#ifndef STRATA_CHECKPOINT_H
#define STRATA_CHECKPOINT_H

#include <strata/common.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STRATA_ST_MAX_DIMS 4

/* How a tensor's values are stored in a safetensors file (the format's "dtype"), among those strata reads and
** writes. In memory they are always float32. */
enum strata_st_dtype {
  STRATA_ST_F32 = 0,  /* "F32": IEEE binary32, as strata's own checkpoints store every tensor */
  STRATA_ST_BF16 = 1, /* "BF16": bfloat16, the top 16 bits of a binary32 (most published Hugging Face weights) */
  STRATA_ST_F16 = 2   /* "F16": IEEE binary16 */
};

/* One tensor to write: fp32, row-major, `data` holds the product of `shape` floats (may be NULL when that is 0). */
struct strata_st_tensor {
  const char *name;
  int ndim;
  int64_t shape[STRATA_ST_MAX_DIMS];
  const float *data;
};

/* One metadata entry (both strings are copied). */
struct strata_st_meta {
  const char *key;
  const char *value;
};

/*
** Write a safetensors file atomically: into a new temporary file beside it
** (NAME.tmp-HASH-PID-RANDOM, created with O_EXCL | O_NOFOLLOW), fsync,
** rename over PATH, fsync the directory. On any failure PATH is untouched
** and the temporary file removed; temporary files that earlier writers of
** PATH left behind (a process killed while saving) are removed first. Tensor names must be unique,
** non-empty and not start with "__"; 0..4 dimensions, none negative;
** metadata keys unique (else STRATA_ERR_INVALID, nothing written).
** Only a failed directory sync, after the rename, reports STRATA_ERR_IO
** with PATH already replaced.
*/
STRATA_API int strata_safetensors_write(const char *path, const struct strata_st_tensor *tensors, size_t count,
                                        const struct strata_st_meta *meta, size_t meta_count);

/*
** strata_safetensors_write with every tensor stored as `dtype`: STRATA_ST_F32
** is strata_safetensors_write itself (the same bytes); STRATA_ST_BF16 rounds
** each float to the nearest bfloat16, ties to even (a NaN stays a NaN,
** overflow past bfloat16's largest value gives infinity, a float32
** subnormal a bfloat16 subnormal: torch's tensor.to(torch.bfloat16)).
** STRATA_ST_F16 is not written (STRATA_ERR_UNSUPPORTED); a value outside the
** enum is STRATA_ERR_INVALID. The caller's floats are not changed.
*/
STRATA_API int strata_safetensors_write_as(const char *path, const struct strata_st_tensor *tensors, size_t count,
                                           const struct strata_st_meta *meta, size_t meta_count,
                                           enum strata_st_dtype dtype);

/* Deprecated: strata_file_check (strata/common.h) checks any path strata writes, a checkpoint's too. Removed in
** the release after 0.2. */
STRATA_API STRATA_DEPRECATED("use strata_file_check") int strata_safetensors_check_path(const char *path);

typedef struct strata_safetensors *strata_safetensors_t;

/*
** Read and validate a whole safetensors file: header length, JSON,
** dtypes (F32 only), shapes against data offsets, offsets inside the file
** and not overlapping. A truncated or corrupt file fails with
** STRATA_ERR_PARSE (a dtype other than F32, or more than 4 dimensions:
** STRATA_ERR_UNSUPPORTED) and a message naming the file and the tensor or
** field at fault; a missing file is STRATA_ERR_NOT_FOUND. The caller frees
** *out with strata_safetensors_free. Same as strata_safetensors_read_flags
** with flags 0.
*/
STRATA_API int strata_safetensors_read(const char *path, strata_safetensors_t *out /* OUT */);

/* Read flag: accept BF16 and F16 tensors besides F32, widened to float32 as the file is read. */
#define STRATA_ST_READ_WIDEN 1u

/*
** strata_safetensors_read, with `flags`. With STRATA_ST_READ_WIDEN, BF16 and
** F16 tensors are accepted too (their data_offsets must span 2 bytes an
** element) and strata_safetensors_get gives them as float32, converted
** exactly (every bfloat16 and binary16 value is a float32: subnormals,
** signed zeros, infinities and NaNs included); strata_safetensors_dtype
** says how each was stored. Any other dtype (F64, I64, I8, U8, BOOL, F8_*
** ...) stays STRATA_ERR_UNSUPPORTED, naming the tensor and its dtype. A
** widened tensor takes float32's 4 bytes an element while `st` lives,
** beside the 2 of the file's data. Unknown flags: STRATA_ERR_INVALID.
*/
STRATA_API int strata_safetensors_read_flags(const char *path, unsigned flags, strata_safetensors_t *out /* OUT */);
STRATA_API void strata_safetensors_free(strata_safetensors_t st);
STRATA_API size_t strata_safetensors_count(strata_safetensors_t st);
/* The index-th tensor's name (in file order); valid while `st` lives. */
STRATA_API const char *strata_safetensors_name(strata_safetensors_t st, size_t index);
/* Look up a tensor: its shape (dimensions past *ndim read 1) and data (float32, float-aligned, valid while `st`
** lives; a BF16 or F16 tensor already widened). Any out-parameter may be NULL. STRATA_ERR_NOT_FOUND if absent. */
STRATA_API int strata_safetensors_get(strata_safetensors_t st, const char *name, int *ndim /* OUT */,
                                      int64_t shape[STRATA_ST_MAX_DIMS] /* OUT */, const float **data /* OUT */);
/* How tensor `name` is stored in the file (F32 unless read with STRATA_ST_READ_WIDEN); STRATA_ERR_NOT_FOUND if
** absent. */
STRATA_API int strata_safetensors_dtype(strata_safetensors_t st, const char *name,
                                        enum strata_st_dtype *dtype /* OUT */);
/* A metadata value, or NULL; valid while `st` lives. */
STRATA_API const char *strata_safetensors_meta(strata_safetensors_t st, const char *key);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_CHECKPOINT_H */
