/*
 * backend_cuda_impl.h: the CUDA backend's private state, shared by its two
 * files: backend_cuda.c (stages, activations, ops, optimizer) and
 * backend_cuda_vocab.c (the vocabulary passes, backend.h's vocab_* ops).
 * Nothing outside kernels/cuda includes it.
 */
#ifndef ZB_BACKEND_CUDA_IMPL_H
#define ZB_BACKEND_CUDA_IMPL_H

#include <stddef.h>

#include "kernels/cuda/gpu_stage.h"
#include "kernels/cuda/gpu_transport.h"
#include "kernels/cuda/zb_cuda.h"
#include "runtime/backend.h"

/* Losses a stage can hold on the device between two syncs; a forward
 * beyond that syncs early (a step syncs once per lane, and m rarely
 * exceeds this). */
#define LOSS_SLOTS 256

typedef struct cuda_impl {
    int gpu;             /* CUDA device index */
    int n_devices;       /* schedule devices = contexts */
    int local_dev;       /* pipeline ranks: the one device with a context, else -1 */
    zb_cuda **ctx;       /* [n_devices] one stream each (ranks: NULL but local_dev) */
    size_t static_bytes; /* stage buffers and activation buffers (atomic adds) */
} cuda_impl;

typedef struct cuda_stage {
    gpu_stage *st;               /* the device side */
    zb_cuda *c;                  /* its context (borrowed from cuda_impl) */
    size_t n;                    /* parameters */
    float *mirror[ZB_BUF_COUNT]; /* host copies of params, grads, m, v */
    double *loss_dev;            /* device [LOSS_SLOTS] loss sums awaiting sync */
    float *loss_to[LOSS_SLOTS];  /* where each goes on the host */
    double loss_div[LOSS_SLOTS]; /* tokens of its micro-batch (sum -> mean) */
    int n_loss;                  /* slots in use */
} cuda_stage;

/* An activation message: bf16 [B*T*d] and its last-use fence. */
typedef struct cuda_act {
    zb_bf16 *p;      /* device buffer */
    gpu_fence *last; /* recorded after its last issued use */
} cuda_act;

#define IMPL(be) ((cuda_impl *)(be)->impl)

/* Makes the backend's GPU current on the calling thread (backend_cuda.c's
 * on_gpu; inline here so that the two files call only one way).  0 or -1. */
static inline int backend_cuda_on_gpu(zb_backend *be, zb_err *err)
{
    return zb_cuda_set_device(IMPL(be)->gpu, err);
}

/* The device buffer of an activation (cuda_act), or NULL. */
static inline zb_bf16 *cuda_act_data(const void *act)
{
    return act ? ((const cuda_act *)act)->p : NULL;
}

/* The vocabulary passes (backend_cuda_vocab.c), backend.h's vocab_* ops. */
int cuda_vocab_new(zb_backend *be, const zb_vocab_shape *shape, zb_bvocab **out, zb_err *err);
void cuda_vocab_free(zb_backend *be, zb_bvocab *v);
int cuda_vocab_begin(zb_backend *be, zb_bvocab *v, zb_bstage *st, size_t head_offset,
                     const int32_t *targets, zb_err *err);
int cuda_vocab_put_x(zb_backend *be, zb_bvocab *v, int dev, int mb, const void *x, zb_err *err);
int cuda_vocab_s(zb_backend *be, zb_bvocab *v, int shard, int mb, zb_err *err);
int cuda_vocab_t(zb_backend *be, zb_bvocab *v, int shard, int mb, zb_err *err);
int cuda_vocab_dx(zb_backend *be, zb_bvocab *v, int dev, int mb, float dloss, void *dx,
                  float *loss, zb_err *err);
int cuda_vocab_eval(zb_backend *be, zb_bvocab *v, zb_bstage *st, size_t head_offset,
                    const void *x, const int32_t *y, int batch, double *loss, zb_err *err);
size_t cuda_vocab_cell_bytes(zb_backend *be, const zb_bvocab *v, int shard);

#endif
