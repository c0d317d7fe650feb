/* SPDX-License-Identifier: MIT */
/* hf.h — what the Hugging Face reader of io/ lends the trainer's loader (train/hf-load.c). Internal. */
#ifndef STRATA__IO_HF_H
#define STRATA__IO_HF_H

#include <stddef.h>
#include <stdint.h>

#include <strata/checkpoint.h>
#include <strata/model.h>

/* The prefix GPT2LMHeadModel puts before the GPT2Model's tensors. */
#define STRATA__HF_PREFIX "transformer."

/* "DIR/NAME" into buf; STRATA_ERR_INVALID when it does not fit. */
int strata__hf_path(char *buf, size_t size, const char *dir, const char *name);

/* Read DIR/config.json into *c (a GPT-2 or Llama config strata can train, named after the directory); a clear error
** otherwise. */
int strata__hf_read_config(const char *dir, struct strata_model_config *c);

/* The prefix LlamaForCausalLM puts before the LlamaModel's tensors (lm_head.weight has none). */
#define STRATA__HF_LLAMA_PREFIX "model."

struct json_t;
/* An optional boolean field of a config.json object; absent or null gives `dflt`, anything but true or false is
** refused naming `key`. */
int strata__hf_bool(struct json_t *o, const char *src, const char *key, int dflt, int *v);

/* A parsed LlamaForCausalLM config.json (model_type "llama") into *c (io/hf-llama.c); `src` names the file. */
int strata__hf_llama_config(struct json_t *root, const char *src, const char *name, struct strata_model_config *c);
/* config.json text for a strata llama config (malloc'd, newline-terminated); `dtype` the weights' (F32 or BF16). */
/* Does the Llama tensor of strata's `name` and `shape` hold a matrix Hugging Face stores transposed (torch.nn.Linear's
** [out, in] for strata's [in, out]): every *_proj.weight, and lm_head.weight when strata holds it [d_model, vocab]? */
int strata__hf_llama_transposed(const struct strata_model_config *c, const char *name, int ndim, const int64_t *shape);
int strata__hf_llama_config_json(const struct strata_model_config *c, enum strata_st_dtype dtype, char **out);

#endif /* STRATA__IO_HF_H */
