/* SPDX-License-Identifier: MIT */
/* strata/model.h — a model as an ordered list of layers with exact cost profiles, from a preset or a JSON file. */
#ifndef STRATA_MODEL_H
#define STRATA_MODEL_H

#include <strata/common.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct strata_model *strata_model_t;

enum strata_model_kind {
  STRATA_MODEL_GPT = 1,   /* decoder-only transformer over byte tokens */
  STRATA_MODEL_MLP = 2,   /* multilayer perceptron over flattened images */
  STRATA_MODEL_CNN = 3,   /* small convolutional network over images */
  STRATA_MODEL_LLAMA = 4  /* LLaMA-shaped decoder: RMSNorm, SwiGLU, RoPE, grouped-query attention, no biases */
};

/* RoPE frequency scaling (Hugging Face's rope_scaling / rope_parameters "rope_type"). */
enum strata_rope_type {
  STRATA_ROPE_DEFAULT = 0,  /* inv_freq[i] = theta^(-2i/head_dim), unscaled */
  STRATA_ROPE_LLAMA3 = 1    /* Llama 3.1's: long wavelengths divided by factor, a smooth band between */
};

#define STRATA_MODEL_MAX_CONV 8

/*
** The numbers that define a model. Fields that do not apply to its kind
** are 0. A JSON model file holds the same fields by the same names, e.g.
**   {"kind": "gpt", "vocab": 256, "context": 128, "d_model": 128,
**    "layers": 4, "heads": 4, "d_ff": 512, "tied": false}
**   {"kind": "mlp", "image": 16, "channels": 1, "classes": 4, "hidden": [256, 128]}
**   {"kind": "cnn", "image": 16, "channels": 1, "classes": 4, "conv": [8, 16]}
**   {"kind": "cnn", "image": 512, "channels": 1, "classes": 4, "conv": [8, 16, 32],
**    "kernels": [3, 5, 7], "strides": [1, 2, 1], "pools": [2, 1, 2], "gap": true}
** A cnn's layer i is a convolution of conv[i] output channels with a
** kernels[i] x kernels[i] filter (odd; padded to keep the size, "same"),
** moved by strides[i], a ReLU and a pools[i] x pools[i] max-pool (1: none);
** the sizes must divide evenly. With "gap" the last feature map is averaged
** over its pixels (a global average pool) before the classifier. Absent
** lists mean 3, 1 and 2 for every layer (the small "cnn"), absent "gap" false.
*/
struct strata_model_config {
  int kind;
  char name[64];            /* the preset's name or the file's */
  /* gpt */
  int64_t vocab, context, d_model, layers, heads, d_ff;
  int tied;                 /* output projection shares the token embedding */
  /* mlp and cnn: square images of `image` pixels a side */
  int64_t image, channels, classes;
  int64_t hidden[STRATA_MODEL_MAX_CONV];  /* mlp hidden widths, 0-terminated */
  int64_t conv[STRATA_MODEL_MAX_CONV];    /* cnn: output channels of each conv + ReLU + max-pool, 0-terminated */
  int64_t kernel[STRATA_MODEL_MAX_CONV];  /* cnn: each conv's filter size, odd (0: 3) */
  int64_t stride[STRATA_MODEL_MAX_CONV];  /* cnn: each conv's stride (0: 1) */
  int64_t pool[STRATA_MODEL_MAX_CONV];    /* cnn: each conv's max-pool window and stride (0: 2; 1: no pooling) */
  int gap;                                /* cnn: a global average pool before the classifier */
  /* llama: also vocab, context (the longest sequence trained or generated), d_model, layers, heads, d_ff (the
  ** SwiGLU's intermediate width) and tied above. JSON: "n_kv_heads", "rope_theta", "norm_eps",
  ** "rope_scaling": {"rope_type": "llama3", "factor", "low_freq_factor", "high_freq_factor",
  ** "original_max_position_embeddings"} */
  int64_t kv_heads;                       /* key/value heads, dividing heads (grouped-query attention) */
  double rope_theta;                      /* RoPE base (Hugging Face's default 10000) */
  double norm_eps;                        /* RMSNorm epsilon (Llama's 1e-5 or 1e-6) */
  struct {
    int type;                             /* enum strata_rope_type */
    double factor, low_freq_factor, high_freq_factor;
    int64_t original_context;             /* original_max_position_embeddings */
  } rope_scaling;
};

/* What one layer costs, per sample (a sequence of `context` tokens, or one image). */
struct strata_layer_info {
  char name[48];            /* "wte", "h.3", "ln_f+lm_head", "conv.0", "fc.1" ... */
  char type[16];            /* "embed", "block", "lm_head", "linear", "conv", "classifier" */
  uint64_t params;          /* parameters (fp32 each) */
  double fwd_flops;         /* forward FLOPs per sample (multiply-add = 2) */
  double bwd_flops;         /* backward FLOPs per sample (input and weight gradients) */
  uint64_t act_bytes;       /* activation bytes the layer keeps for its backward pass, per sample */
  uint64_t out_bytes;       /* bytes of its output per sample: what crosses a pipeline cut after it */
};

/* Names of the presets, NULL-terminated; static. */
STRATA_API const char *const *strata_model_presets(void);

/*
** Build a model from a preset name ("gpt-tiny", "gpt-small", "gpt2-small",
** "gpt2-xl", "llama-tiny", "llama3-8b", "mlp", "cnn", "cnn-hires", ...), from a JSON
** file, or from a filled config (a llama's kv_heads, rope_theta and norm_eps left 0
** take heads, 10000 and 1e-5, as its JSON fields left out do).
** The caller frees the model with strata_model_free. Bad input (an unknown
** preset, a malformed file, heads that do not divide d_model, n_kv_heads that
** do not divide heads, an unknown rope_type) fails with a message naming the
** file and field; *out is untouched.
*/
STRATA_API int strata_model_from_preset(const char *name, strata_model_t *out /* OUT */);
STRATA_API int strata_model_from_file(const char *path, strata_model_t *out /* OUT */);
STRATA_API int strata_model_from_config(const struct strata_model_config *config, strata_model_t *out /* OUT */);
/* Parse model JSON text (the model-file format, e.g. a checkpoint's "model"
** metadata); `source` names it in error messages (may be NULL). */
STRATA_API int strata_model_from_json(const char *json, const char *source, strata_model_t *out /* OUT */);
/* A preset name, or else a path to a JSON file. */
STRATA_API int strata_model_load(const char *preset_or_path, strata_model_t *out /* OUT */);
STRATA_API void strata_model_free(strata_model_t model);

STRATA_API const struct strata_model_config *strata_model_config(strata_model_t model);
STRATA_API int strata_model_layer_count(strata_model_t model);
STRATA_API int strata_model_layer(strata_model_t model, int index, struct strata_layer_info *info /* OUT */);
/* Totals over all layers. */
STRATA_API uint64_t strata_model_params(strata_model_t model);
STRATA_API double strata_model_flops(strata_model_t model); /* forward + backward, per sample */

/*
** Spatial parallelism (issue 34): a cnn's images cut by rows into `slabs`
** contiguous slabs, one per device of a spatial group. Layer i's output
** rows are shared out as evenly as they go (slab r holds rows
** [r Ho / slabs, (r + 1) Ho / slabs), Ho its output height after pooling,
** so a pooling window never crosses a slab edge; the image's rows likewise
** for the first layer's input, though every slab holds the whole image, so
** the first layer needs no halo); before a convolution a slab receives from
** its neighbours the input rows its filter reaches past its own (the halo:
** r / 2 rows for a filter of r at stride 1), and sends them back as
** gradients in the backward. The classifier averages (gap) the slabs'
** pooled sums joined over the group.
*/
struct strata_spatial_layer {
  int64_t in_first, in_rows;       /* the input rows the slab holds */
  int64_t out_first, out_rows;     /* the output rows it computes (after pooling); the classifier: all of its 1 */
  int64_t halo_top, halo_bottom;   /* input rows it receives from the slab above / below before the layer */
  uint64_t act_bytes;              /* activation bytes per sample it keeps (strata_layer_info's act_bytes for its
                                   ** rows: its input with the halo — the first layer: the whole image —, the
                                   ** convolution's output, ReLU, indices) */
  uint64_t halo_bytes;             /* bytes per sample its halo rows take (received forward, sent back backward) */
};
/* STRATA_OK when `model` can be cut into `slabs` slabs; else why, naming the layer: the model is not a cnn with
** "gap", slabs < 1, more slabs than a layer's output rows, or a halo reaching past the neighbouring slab. */
STRATA_API int strata_model_spatial_check(strata_model_t model, int slabs);
/* Layer `layer` of slab `rank` of `slabs` (strata_model_spatial_check's conditions hold, else its error). */
STRATA_API int strata_model_spatial_layer(strata_model_t model, int slabs, int rank, int layer,
                                          struct strata_spatial_layer *out /* OUT */);

/* The config as JSON (the model-file format); the caller frees the string with free(). */
STRATA_API int strata_model_to_json(strata_model_t model, char **json /* OUT */);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_MODEL_H */
