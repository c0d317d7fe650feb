/* SPDX-License-Identifier: MIT */
/* hf.h — what the Hugging Face reader of io/ lends the trainer's loader (train/hf-load.c). Internal. */
#ifndef STRATA__IO_HF_H
#define STRATA__IO_HF_H

#include <stddef.h>

#include <strata/model.h>

/* The prefix GPT2LMHeadModel puts before the GPT2Model's tensors. */
#define STRATA__HF_PREFIX "transformer."

/* "DIR/NAME" into buf; STRATA_ERR_INVALID when it does not fit. */
int strata__hf_path(char *buf, size_t size, const char *dir, const char *name);

/* Read DIR/config.json into *c (a GPT-2 config strata can train, named after the directory); a clear error
** otherwise. */
int strata__hf_read_config(const char *dir, struct strata_model_config *c);

#endif /* STRATA__IO_HF_H */
