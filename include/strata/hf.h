/* SPDX-License-Identifier: MIT */
/* strata/hf.h — Hugging Face GPT-2 and Llama checkpoints (config.json + model.safetensors, or sharded), read and written. */
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

/*
** A Hugging Face Llama directory is what LlamaForCausalLM.save_pretrained
** writes: config.json (model_type "llama") and the weights, in one
** model.safetensors or in shards that model.safetensors.index.json's
** weight_map names (tensor -> file). config.json is read in both of its
** forms: transformers 5's rope_parameters {"rope_type", "rope_theta", ...}
** and transformers 4's top-level rope_theta with rope_scaling (null, or
** {"rope_type" or "type", ...}). It maps to kind STRATA_MODEL_LLAMA:
** hidden_size -> d_model, num_hidden_layers -> layers,
** num_attention_heads -> heads, num_key_value_heads -> kv_heads (absent:
** heads), intermediate_size -> d_ff, vocab_size -> vocab,
** max_position_embeddings -> context, rms_norm_eps -> norm_eps (absent:
** 1e-6), tie_word_embeddings -> tied (absent: false), rope_theta (absent:
** 10000) and Llama 3's scaling (factor, low_freq_factor, high_freq_factor,
** original_max_position_embeddings). Refused with STRATA_ERR_UNSUPPORTED
** naming the field: architectures other than LlamaForCausalLM, hidden_act
** other than "silu", attention_bias or mlp_bias true, sliding_window set
** (or use_sliding_window true), a rope_type other than "default" and
** "llama3", partial_rotary_factor other than 1, head_dim other than
** hidden_size / num_attention_heads, num_key_value_heads not dividing
** num_attention_heads, a quantization_config. Tensors are named
** model.embed_tokens.weight, model.layers.N.{input,post_attention}_layernorm.weight,
** model.layers.N.self_attn.{q,k,v,o}_proj.weight,
** model.layers.N.mlp.{gate,up,down}_proj.weight, model.norm.weight and
** lm_head.weight (absent when tied); strata's are the same without
** "model.", its projections stored [in, out], the transpose of
** torch.nn.Linear's [out, in]: the loader and the export transpose them.
*/

/* The strata config that `dir`'s config.json describes (GPT-2 or Llama, named after the directory), without building a
** model: the checks above, STRATA_ERR_PARSE / UNSUPPORTED naming the field. */
STRATA_API int strata_hf_config(const char *dir, struct strata_model_config *out /* OUT */);

/* Build the strata model that `dir`'s config.json describes (named after the directory). */
STRATA_API int strata_hf_model(const char *dir, strata_model_t *out /* OUT */);
/* The same with the context (the longest sequence trained or generated) set to `context`; 0: the config's. A Llama
** has no position table: any context from 1 to max_position_embeddings (Llama 3.1's 131072 is past what strata's
** models take, 65536: name a shorter one). A GPT-2's context is its n_positions, the rows of its position table:
** another is STRATA_ERR_UNSUPPORTED, as is a Llama's past max_position_embeddings. */
STRATA_API int strata_hf_model_context(const char *dir, int64_t context, strata_model_t *out /* OUT */);

/*
** Overwrite a trainer's parameters with those of `dir`/model.safetensors,
** or, where there is none, of the shards `dir`/model.safetensors.index.json
** names (its weight_map: tensor name -> file in `dir`). The trainer's model
** must be the one strata_hf_model(dir) gives (a Llama's with any context up
** to max_position_embeddings; else STRATA_ERR_SHAPE), or its untied form for
** a tied checkpoint: then lm_head.weight starts as a copy of the embedding
** (wte.weight, embed_tokens.weight; a model that can be cut into pipeline
** stages, which a tied one cannot). Every tensor is checked by name and
** shape before anything is written; a tensor of the file that has no place
** in the model (other than the buffers older transformers saved: GPT-2's
** attn.bias / attn.masked_bias, Llama's rotary_emb.inv_freq) is refused
** naming it. Shards: every file the index names must exist (checked before
** any is read, else STRATA_ERR_PARSE naming it), and each must hold exactly
** the tensors the map puts in it (else STRATA_ERR_PARSE naming the tensor
** and the file). A Llama's projections are transposed from
** torch.nn.Linear's [out, in] to strata's [in, out]. The optimizer state
** and the step count stay as they are (a new trainer: zero), so training
** starts from the checkpoint's weights.
*/
STRATA_API int strata_trainer_load_hf(strata_trainer_t tr, const char *dir);

/*
** Write the parameters of the strata checkpoint `checkpoint` (written by
** strata_trainer_save) to `dir` in the Hugging Face layout: config.json and
** model.safetensors (metadata {"format": "pt"}), each atomically. `dir` is
** created when missing (its parent must exist); files of other names in it
** are left alone. Any GPT or Llama checkpoint can be written (a Llama as
** LlamaForCausalLM's config.json, with the rope in transformers 4's form
** that transformers 5 reads too, and its projections transposed to
** [out, in]); the values are the checkpoint's floats, bit for bit. STRATA_ERR_INVALID, before anything is
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
