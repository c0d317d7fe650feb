/* SPDX-License-Identifier: MIT */
/* opencl.h — the OpenCL backend's own objects (platforms, devices, buffers, queues, events), shared by its files. Internal. */
#ifndef STRATA__OPENCL_H
#define STRATA__OPENCL_H

#include <pthread.h>
#include <stddef.h>

#include <CL/cl.h>

#include "device/backend.h"

/*
** The kernels of kernels/ops.k this backend launches: X(enum id, kernel name).
** Every queue creates its own cl_kernel for each (cl_kernel arguments are
** state, so two threads must never share one).
*/
#define STRATA__OCL_KERNEL_MAP(X)                       \
  X(BIAS_ADD, "k_bias_add")                             \
  X(BIAS_GRAD, "k_bias_grad")                           \
  X(GELU_FWD, "k_gelu_fwd")                             \
  X(GELU_BWD, "k_gelu_bwd")                             \
  X(RELU_FWD, "k_relu_fwd")                             \
  X(RELU_BWD, "k_relu_bwd")                             \
  X(ADD, "k_add")                                       \
  X(CONVERT, "k_convert")                               \
  X(SCALE, "k_scale")                                   \
  X(FILL, "k_fill")                                     \
  X(LAYERNORM_FWD, "k_layernorm_fwd")                   \
  X(LAYERNORM_BWD_DX, "k_layernorm_bwd_dx")             \
  X(LAYERNORM_BWD_DPARAMS, "k_layernorm_bwd_dparams")   \
  X(SOFTMAX_FWD, "k_softmax_fwd")                       \
  X(SOFTMAX_BWD, "k_softmax_bwd")                       \
  X(EMBEDDING_FWD, "k_embedding_fwd")                   \
  X(EMBEDDING_BWD, "k_embedding_bwd")                   \
  X(XENT_FWD, "k_cross_entropy_fwd")                    \
  X(XENT_BWD, "k_cross_entropy_bwd")                    \
  X(ADAMW, "k_adamw")                                   \
  X(SUMSQ_PARTIAL, "k_sumsq_partial")                   \
  X(SUMSQ_FINAL, "k_sumsq_final")                       \
  X(IM2COL, "k_im2col")                                 \
  X(COL2IM, "k_col2im")                                 \
  X(MAXPOOL_FWD, "k_maxpool_fwd")                       \
  X(MAXPOOL_BWD, "k_maxpool_bwd")                       \
  X(REDUCE_F32, "k_reduce_f32")                         \
  X(REDUCE_I32, "k_reduce_i32")                         \
  X(XENT_VP_MAX, "k_xent_vp_max")                       \
  X(XENT_VP_SUMS, "k_xent_vp_sums")                     \
  X(XENT_VP_LOSS, "k_xent_vp_loss")                     \
  X(XENT_VP_BWD, "k_xent_vp_bwd")                       \
  X(TOKENS_SHIFT, "k_tokens_shift")                     \
  X(ATTN_FWD, "k_attention_fwd")                        \
  X(ATTN_BWD_DQ, "k_attention_bwd_dq")                  \
  X(ATTN_BWD_DKV, "k_attention_bwd_dkv")                \
  X(RMSNORM_FWD, "k_rmsnorm_fwd")                       \
  X(RMSNORM_BWD_DX, "k_rmsnorm_bwd_dx")                 \
  X(RMSNORM_BWD_DW, "k_rmsnorm_bwd_dw")                 \
  X(SWIGLU_FWD, "k_swiglu_fwd")                         \
  X(SWIGLU_BWD, "k_swiglu_bwd")                         \
  X(ROPE, "k_rope")                                     \
  X(GEMM_CPU, "k_gemm_cpu")                             \
  X(GEMM_CPU_TA, "k_gemm_cpu_ta")                       \
  X(GEMM_TRANSPOSE, "k_gemm_transpose")

enum strata__ocl_kernel {
#define STRATA__OCL_K_ENUM(id, name) STRATA__OCL_K_##id,
  STRATA__OCL_KERNEL_MAP(STRATA__OCL_K_ENUM)
#undef STRATA__OCL_K_ENUM
  STRATA__OCL_K_COUNT
};

/* The kernel names, indexed by enum strata__ocl_kernel. */
extern const char *const strata__ocl_kernel_names[STRATA__OCL_K_COUNT];

/*
** Buffer types: kernels/dialect.h declares the i-th buffer parameter of
** every kernel (i < STRATA__OCL_BUFFERS) float32 or bfloat16 by bit i of
** STRATA_BF16_MASK. Mask 0 is the program every queue starts with; a
** launch with bfloat16 operands uses the program built with its mask,
** built on first use and kept (STRATA__OCL_MASKS of them at most).
*/
#define STRATA__OCL_BUFFERS 6
#define STRATA__OCL_MASKS (1u << STRATA__OCL_BUFFERS)

/* Number of partial sums of the first sumsq pass (k_sumsq_partial); each
** queue owns a scratch buffer of this many floats. */
#define STRATA__OCL_SUMSQ_PARTS 256

/* One OpenCL platform: a context over all its devices (so that they can
** copy to each other with clEnqueueCopyBuffer) and the kernel programs,
** one per buffer-type mask, each built on first use under `lock`. */
struct strata__ocl_platform {
  cl_platform_id id;
  cl_context context;
  pthread_mutex_t lock;
  cl_program program;       /* mask 0 (float32 only); NULL until built */
  int build_status;         /* 0, or the strata status of a failed build (not retried) */
  char build_error[512];    /* message of that failure */
  cl_program variants[STRATA__OCL_MASKS];   /* the other masks' programs, NULL until built */
  int variant_status[STRATA__OCL_MASKS];    /* 0, or the status of a failed build (its message is logged) */
  pthread_mutex_t async_lock;  /* guards async_error (the callback runs on driver threads) */
  char async_error[256];    /* first error the driver reported through the context callback, "" if none */
  char name[64];
};

struct strata__ocl_device {
  cl_device_id id;
  struct strata__ocl_platform *platform;
  struct strata__device_info info;
  int bf16_gemm_said;       /* set once the log said how bfloat16 GEMMs run here (CLBlast: in float32) */
};

/* The largest work-group the cooperative kernels take (STRATA_K_WG_MAX of
** kernels/ops.k: the size of their local arrays). */
#define STRATA__OCL_WG_MAX 256

/* Who computes GEMMs (STRATA_OPENCL_GEMM): strata's kernels of kernels/gemm.k on CPU devices and CLBlast on the
** others (auto), CLBlast everywhere, or strata's kernels everywhere. */
enum strata__ocl_gemm { STRATA__OCL_GEMM_AUTO, STRATA__OCL_GEMM_CLBLAST, STRATA__OCL_GEMM_STRATA };

/* The backend context returned by init. */
struct strata__ocl {
  const struct strata__services *svc;
  size_t wg_request;        /* STRATA_KERNEL_WORKGROUP, 0 when unset */
  enum strata__ocl_gemm gemm; /* STRATA_OPENCL_GEMM */
  int nplatforms;
  struct strata__ocl_platform *platforms;
  int ndevices;
  struct strata__ocl_device *devices;
};

struct strata__ocl_buffer {
  cl_mem mem;
  struct strata__ocl_device *dev;
};

struct strata__ocl_queue {
  cl_command_queue q;
  struct strata__ocl_device *dev;
  cl_kernel kernels[STRATA__OCL_K_COUNT];  /* mask 0 */
  cl_kernel (*variants)[STRATA__OCL_MASKS];  /* [kernel][mask], allocated on the first bfloat16 launch */
  cl_mem sumsq_parts;       /* STRATA__OCL_SUMSQ_PARTS floats */
  cl_mem gemm_tmp;          /* a transposed B for strata's GEMM kernels, grown as needed (NULL until then) */
  size_t gemm_tmp_bytes;
  cl_mem stage[3];          /* float32 copies of bfloat16 operands (CLBlast's A, B, C), grown as needed */
  size_t stage_bytes[3];
  pthread_mutex_t gate_lock;/* guards gate_status and gate_error (set by the communicator's threads) */
  int gate_status;          /* the first failed gate this queue waited for, 0 if none */
  char gate_error[512];
  size_t wg;                /* work-group size of the cooperative kernels: a power of two <= STRATA__OCL_WG_MAX */
};

struct strata__ocl_event {
  cl_event ev;
  cl_context context;
};

/* Name of an OpenCL error code ("CL_OUT_OF_RESOURCES"); a static string. */
const char *strata__ocl_err_name(cl_int err);

/* Report an OpenCL failure through services->error: "what: CL_NAME (code)"
** with a status chosen from the code (out of memory, or backend failure).
** Returns that status. */
int strata__ocl_fail(const struct strata__ocl *ocl, cl_int err, const char *what);

/* Whether device `d`'s GEMMs run strata's kernels (kernels/gemm.k) rather than CLBlast. */
int strata__ocl_gemm_ours(const struct strata__ocl *ocl, const struct strata__ocl_device *d);

/* The kernel object of kernel `kid` under buffer-type mask `mask` for
** queue `q` (*k owned by the queue): the queue's own for mask 0, else one
** created on first use from the platform's program for that mask, which
** is built then if no queue has built it yet. */
int strata__ocl_kernel(struct strata__ocl *ocl, struct strata__ocl_queue *q, enum strata__ocl_kernel kid, unsigned mask,
                       cl_kernel *k /* OUT */);

/* Enqueue one op on queue `q` (the backend table's `op` slot). */
int strata__ocl_op(void *ctx, void *queue, const struct strata__op *op);

#endif /* STRATA__OPENCL_H */
