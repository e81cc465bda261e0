/*
 * backend_cpu_vocab.h: the CPU backend's vocabulary passes (backend.h's
 * vocab_* ops, backend_cpu_vocab.c): the ops backend_cpu.c puts into its
 * table, and the bytes they hold, for the runtime's memory estimate.
 */
#ifndef ZB_KERNELS_BACKEND_CPU_VOCAB_H
#define ZB_KERNELS_BACKEND_CPU_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/backend.h"

/* Bytes the CPU backend's vocabulary passes (backend_cpu_vocab.c) hold
 * for `shape` besides what a cell holds between its S and its T (its
 * logits and head input: backend_cpu_vocab_cell_bytes, which the caller
 * counts along each device's lane): the shards' copies of the head and
 * their scratch, every cell's statistics, and, as a bound, every cell's
 * partial; what runtime/footprint.h counts. */
double backend_cpu_vocab_bytes(const zb_vocab_shape *shape);

/* Bytes one cell of shard `shard` holds between its S and its T (the
 * vocab_cell_bytes op): its logits, its row statistics and its device's
 * copy of the head input; not the input-gradient partial. */
double backend_cpu_vocab_cell_bytes(const zb_vocab_shape *shape, int shard);

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
size_t cpu_vocab_wire_bytes(zb_backend *be, const zb_bvocab *v, zb_vocab_wire part, int shard);
int cpu_vocab_export(zb_backend *be, zb_bvocab *v, zb_vocab_wire part, int shard, int mb,
                     void *buf, zb_err *err);
int cpu_vocab_import(zb_backend *be, zb_bvocab *v, zb_vocab_wire part, int shard, int mb,
                     const void *buf, zb_err *err);

#endif
