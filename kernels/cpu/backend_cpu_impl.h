/*
 * backend_cpu_impl.h: what the files of the CPU backend share (internal to
 * kernels/cpu/backend_cpu*.c): a stage's buffers, and the vocabulary
 * passes' ops that backend_cpu.c puts into its table.
 */
#ifndef ZB_KERNELS_BACKEND_CPU_IMPL_H
#define ZB_KERNELS_BACKEND_CPU_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/backend.h"

/* One stage's buffers. */
typedef struct cpu_stage {
    const llama_stage *layout; /* borrowed description of the buffers */
    const llama_stage *compute; /* what F, B, W and grads_add run (borrowed):
                                 * layout, or a prefix of it (stage_new) */
    size_t n;                  /* floats per buffer */
    float *buf[ZB_BUF_COUNT];  /* params, grads, m, v */
    float *snap[3];            /* snapshot of params, m, v (allocated at first use) */
} cpu_stage;

/* backend.h's vocabulary ops over kernels/cpu/vocab_shard.h
 * (backend_cpu_vocab.c). */
int cpu_vocab_new(zb_backend *be, const zb_vocab_shape *shape, zb_bvocab **out, zb_err *err);
void cpu_vocab_free(zb_backend *be, zb_bvocab *v);
int cpu_vocab_begin(zb_backend *be, zb_bvocab *v, zb_bstage *st, size_t head_offset,
                    const int32_t *targets, zb_err *err);
int cpu_vocab_put_x(zb_backend *be, zb_bvocab *v, int dev, int mb, const void *x, zb_err *err);
int cpu_vocab_s(zb_backend *be, zb_bvocab *v, int shard, int mb, zb_err *err);
int cpu_vocab_t(zb_backend *be, zb_bvocab *v, int shard, int mb, zb_err *err);
int cpu_vocab_dx(zb_backend *be, zb_bvocab *v, int dev, int mb, float dloss, void *dx,
                 float *loss, zb_err *err);
int cpu_vocab_eval(zb_backend *be, zb_bvocab *v, zb_bstage *st, size_t head_offset,
                   const void *x, const int32_t *y, int batch, double *loss, zb_err *err);
size_t cpu_vocab_cell_bytes(zb_backend *be, const zb_bvocab *v, int shard);

#endif
