/* SPDX-License-Identifier: MIT */
/* strata/checkpoint.h — safetensors files: fp32 tensors by name plus string metadata, written atomically. */
#ifndef STRATA_CHECKPOINT_H
#define STRATA_CHECKPOINT_H

#include <strata/common.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STRATA_ST_MAX_DIMS 4

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
** *out with strata_safetensors_free.
*/
STRATA_API int strata_safetensors_read(const char *path, strata_safetensors_t *out /* OUT */);
STRATA_API void strata_safetensors_free(strata_safetensors_t st);
STRATA_API size_t strata_safetensors_count(strata_safetensors_t st);
/* The index-th tensor's name (in file order); valid while `st` lives. */
STRATA_API const char *strata_safetensors_name(strata_safetensors_t st, size_t index);
/* Look up a tensor: its shape (dimensions past *ndim read 1) and data (float-aligned, valid while `st`
** lives). Any out-parameter may be NULL. STRATA_ERR_NOT_FOUND if absent. */
STRATA_API int strata_safetensors_get(strata_safetensors_t st, const char *name, int *ndim /* OUT */,
                                      int64_t shape[STRATA_ST_MAX_DIMS] /* OUT */, const float **data /* OUT */);
/* A metadata value, or NULL; valid while `st` lives. */
STRATA_API const char *strata_safetensors_meta(strata_safetensors_t st, const char *key);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_CHECKPOINT_H */
