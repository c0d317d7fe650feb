/* SPDX-License-Identifier: MIT */
/* model.h — the runtime's view of a model: its config plus, per layer, the kind and geometry the trainer runs. Internal. */
#ifndef STRATA__MODEL_H
#define STRATA__MODEL_H

#include <strata/model.h>

enum strata__layer_kind {
  STRATA__LAYER_EMBED,      /* token + position embedding */
  STRATA__LAYER_BLOCK,      /* pre-layernorm transformer block */
  STRATA__LAYER_LM_HEAD,    /* final layernorm, output projection, cross-entropy */
  STRATA__LAYER_LINEAR,     /* fully connected + ReLU */
  STRATA__LAYER_CONV,       /* r x r convolution ("same" padding r / 2, stride) + ReLU + pool x pool max-pool */
  STRATA__LAYER_CLASSIFIER  /* (global average pool +) fully connected + cross-entropy */
};

/* Tensor-parallel MLP and CNN layers come in pairs: the first cut by its
** outputs (columns of a linear layer, output channels of a convolution), the
** second by its inputs, whose partial results are joined. */
enum strata__tp_role { STRATA__TP_WHOLE, STRATA__TP_OUTPUTS, STRATA__TP_INPUTS };

struct strata__layer {
  enum strata__layer_kind kind;
  int index;                /* block number, conv number, ... */
  int64_t in, out;          /* features in and out per sample (rows are samples or tokens) */
  int64_t c, h, w, k;       /* conv: input channels and size, output channels; classifier with gap: its input map */
  int64_t r, stride, pool;  /* conv: filter size, stride, max-pool window (1: none) */
  int64_t ch, cw;           /* conv: the convolution's output size (before pooling) */
  int gap;                  /* classifier: averages its c x h x w input over h x w first */
  int first;                /* the model's first layer: no input gradient needed */
  int tp_role;              /* in a tensor-parallel stage (enum strata__tp_role): how this layer is cut */
  struct strata_layer_info info;
};

struct strata_model {
  struct strata_model_config cfg;
  int nlayers;
  struct strata__layer *layers;
};

#endif /* STRATA__MODEL_H */
