/* SPDX-License-Identifier: MIT */
/* strata/hf.h — Hugging Face GPT-2 checkpoints (GPT2LMHeadModel's config.json + model.safetensors), read and written. */
#ifndef STRATA_HF_H
#define STRATA_HF_H

#include <strata/checkpoint.h>
#include <strata/common.h>
#include <strata/model.h>
#include <strata/train.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
** A Hugging Face GPT-2 directory is what GPT2LMHeadModel.save_pretrained
** writes: config.json (n_embd, n_layer, n_head, n_positions, vocab_size,
** n_inner, layer_norm_epsilon, tie_word_embeddings ...) and
** model.safetensors (tensors named transformer.wte.weight,
** transformer.h.0.attn.c_attn.weight ... with Conv1D weights stored
** [in, out], and lm_head.weight only when the head is not tied). The
** tensor names without the "transformer." prefix (GPT2Model, and the
** original OpenAI conversion) are read too. The tensors may be stored in
** F32, BF16 (most published checkpoints) or F16: strata widens them to its
** float32 weights exactly (strata_safetensors_read_flags with
** STRATA_ST_READ_WIDEN); any other dtype is refused naming the tensor.
**
** strata's GPT is GPT-2's architecture, so the weights map one to one.
** What it cannot represent is refused with STRATA_ERR_UNSUPPORTED and a
** message naming the config field: model_type other than "gpt2", an
** architecture other than GPT2LMHeadModel/GPT2Model, activation_function
** other than "gelu_new" (= "gelu_pytorch_tanh", GELU's tanh form),
** layer_norm_epsilon other than 1e-5, scale_attn_weights false,
** scale_attn_by_inverse_layer_idx true, add_cross_attention true, a
** quantization_config, n_ctx other than n_positions, sizes strata's models
** do not take (n_positions past 65536, n_head not dividing n_embd: the
** message gives strata's name and the key's). Dropout probabilities
** are accepted and not used: strata trains without dropout, and a model
** evaluated by transformers (model.eval()) has none either.
*/

/* Build the strata model that `dir`'s config.json describes (named after the directory). */
STRATA_API int strata_hf_model(const char *dir, strata_model_t *out /* OUT */);

/*
** Overwrite a trainer's parameters with those of `dir`/model.safetensors.
** The trainer's model must be the one strata_hf_model(dir) gives (else
** STRATA_ERR_SHAPE), or its untied form for a tied checkpoint: then
** lm_head.weight starts as a copy of wte.weight (a model that can be cut
** into pipeline stages, which a tied one cannot). Every tensor is checked by name and shape before
** anything is written; a tensor of the file that has no place in the model
** (other than the attention-mask buffers attn.bias / attn.masked_bias that
** older transformers saved) is refused naming it. The optimizer state and
** the step count stay as they are (a new trainer: zero), so training
** starts from the checkpoint's weights.
*/
STRATA_API int strata_trainer_load_hf(strata_trainer_t tr, const char *dir);

/*
** Write the parameters of the strata checkpoint `checkpoint` (written by
** strata_trainer_save) to `dir` in the Hugging Face layout: config.json and
** model.safetensors (metadata {"format": "pt"}), each atomically. `dir` is
** created when missing (its parent must exist); files of other names in it
** are left alone. Any GPT checkpoint can be written; the values are the
** checkpoint's floats, bit for bit. STRATA_ERR_INVALID, before anything is
** read, when either file to write is `checkpoint` itself (strata_file_same).
** The same as strata_hf_export_as(checkpoint, dir, STRATA_ST_F32).
*/
STRATA_API int strata_hf_export(const char *checkpoint, const char *dir);

/*
** strata_hf_export with the weights stored as `dtype`: STRATA_ST_F32 (the
** checkpoint's floats, bit for bit) or STRATA_ST_BF16 (each float rounded to
** the nearest bfloat16, ties to even, as strata_safetensors_write_as does,
** and config.json saying "torch_dtype": "bfloat16", as transformers writes
** a bf16 model's). Read back, a bf16 export gives those rounded values
** exactly. STRATA_ST_F16: STRATA_ERR_UNSUPPORTED; a value outside the enum:
** STRATA_ERR_INVALID, nothing written either way.
*/
STRATA_API int strata_hf_export_as(const char *checkpoint, const char *dir, enum strata_st_dtype dtype);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_HF_H */
