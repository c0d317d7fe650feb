/* SPDX-License-Identifier: MIT */
/* model.h — the runtime's view of a model: its config plus, per layer, the kind and geometry the trainer runs. Internal. */
#ifndef STRATA__MODEL_H
#define STRATA__MODEL_H

#include <strata/model.h>

enum strata__layer_kind {
  STRATA__LAYER_EMBED,      /* token (+ a GPT's position) embedding */
  STRATA__LAYER_BLOCK,      /* pre-layernorm transformer block */
  STRATA__LAYER_LM_HEAD,    /* final layernorm (a llama's RMSNorm), output projection, cross-entropy */
  STRATA__LAYER_LINEAR,     /* fully connected + ReLU */
  STRATA__LAYER_CONV,       /* r x r convolution ("same" padding r / 2, stride) + ReLU + pool x pool max-pool */
  STRATA__LAYER_CLASSIFIER, /* (global average pool +) fully connected + cross-entropy */
  STRATA__LAYER_LLAMA_BLOCK /* pre-RMSNorm block: RoPE'd grouped-query attention, SwiGLU MLP, no biases */
};

/* Tensor-parallel MLP and CNN layers come in pairs: the first cut by its
** outputs (columns of a linear layer, output channels of a convolution), the
** second by its inputs, whose partial results are joined. */
enum strata__tp_role { STRATA__TP_WHOLE, STRATA__TP_OUTPUTS, STRATA__TP_INPUTS };

/*
** A layer as one slab of a spatial group runs it (model/slab.c; zero: the whole image). Rows are image rows of the
** layer's input (in, e, need, halos) or of its convolution's output (c0, crows); W is the layer's whole width.
*/
struct strata__slab {
  int on, rank, n;           /* slab `rank` of `n` */
  int64_t H;                 /* the whole input's rows */
  int64_t in0, rows;         /* the input rows the slab holds (the first layer: all of the image is there) */
  int64_t need0, need1;      /* the input rows its filter reads, clipped to the image */
  int64_t e0, he;            /* the rows it convolves over (from a multiple of the stride; [e0, need0) are zero) */
  int64_t ht, hb;            /* halo rows it receives from the slab above / below */
  int64_t up, down;          /* its first rows the slab above needs, its last rows the slab below needs */
  int64_t hmax;              /* rows of one exchange slot: the most any slab of the layer sends one way */
  int64_t P, j0;             /* the convolution's output rows over the e rows, and the first it keeps */
  int64_t c0;                /* the first kept row in the whole convolution's output (crows: the layer's ch) */
};

/* Rows [*first, *first + *rows) of `total` that slab r of n holds: as evenly as they go, the larger slabs last. */
void strata__slab_share(int64_t total, int n, int r, int64_t *first, int64_t *rows);
struct strata__layer;
/* Slab r of n's geometry of convolution L (the model's layer, whole): its rows, the rows its filter reads, the halo
** rows it receives (none on the first layer: every slab has the whole image), the rows it convolves (model/slab.c;
** up, down and hmax, which need the other slabs, are left 0). The one description of a slab: the stage runs it,
** strata_model_spatial_layer reports it. */
void strata__slab_conv(const struct strata__layer *L, int n, int r, struct strata__slab *s);

struct strata__layer {
  enum strata__layer_kind kind;
  int index;                /* block number, conv number, ... */
  int64_t in, out;          /* features in and out per sample (rows are samples or tokens) */
  int64_t c, h, w, k;       /* conv: input channels and size, output channels; classifier with gap: its input map */
  int64_t r, stride, pool;  /* conv: filter size, stride, max-pool window (1: none) */
  int64_t ch, cw;           /* conv: the convolution's output size (before pooling) */
  int gap;                  /* classifier: averages its c x h x w input over h x w first */
  struct strata__slab sl;   /* spatial parallelism: the slab this stage runs (sl.on) */
  int first;                /* the model's first layer: no input gradient needed */
  int tp_role;              /* in a tensor-parallel stage (enum strata__tp_role): how this layer is cut */
  struct strata_layer_info info;
};

struct strata_model {
  struct strata_model_config cfg;
  int nlayers;
  struct strata__layer *layers;
};

/* A text model (GPT or llama): token rows of `context`, a vocabulary, a head with cross-entropy. */
static inline int strata__model_text(const struct strata_model_config *c) {
  return c->kind == STRATA_MODEL_GPT || c->kind == STRATA_MODEL_LLAMA;
}

/* STRATA_OK, or why a llama cannot be cut `tp` ways: tp neither dividing n_kv_heads nor a multiple of it (naming
** both), nor dividing heads and d_ff. `what` starts the message, `code`
** is the error's. */
int strata__llama_tp_check(const struct strata_model_config *c, int tp, const char *what, int code);

#endif /* STRATA__MODEL_H */
