/*
 * memory_cuda.h: the product-key memory layer's kernels on a GPU, the twin
 * of kernels/cpu/memory_layer.h in the precision conventions of zb_cuda.h
 * (bf16 activations and weights, fp32 reductions; W ops ACCUMULATE into
 * fp32 gradient buffers).  The projections around the block (query, gate,
 * output) are zb_cuda_matmul_* and zb_cuda_swiglu_*, as on the CPU.
 *
 * Shapes as on the CPU: q [N, H·kd], keys [H, 2, n_keys, kd/2], values
 * [n_keys², v], idx int32 and w fp32 [N, H, k] (best first), e and de
 * [N, v], ds fp32 [N, H, k], dq [N, H·kd].
 *
 * Determinism without floating-point atomics: the lookup is one thread
 * per (row, head); the key and value gradients are scatter-adds in which
 * one thread owns one column of the table and walks the entries (n, h, j)
 * in order, so each touched element receives its additions in a fixed
 * order and untouched rows are never written.  That gives v-way (values)
 * and H·kd-way (keys) parallelism: correct and reproducible, not fast; the
 * reverse-index kernel of facebookresearch/memory's xformer_embeddingbag
 * is the fast path for large batches (docs/memory-layers.md).
 *
 * Limits: topk <= ZB_CUDA_MEM_MAX_TOPK (per-thread top-k lists live in
 * registers / local memory).  The GPU stage (kernels/cuda/gpu_stage.cu)
 * composes them into a memory layer's F, B and W as llama.c does.
 */
#ifndef ZB_MEMORY_CUDA_H
#define ZB_MEMORY_CUDA_H

#include "kernels/cpu/memory_layer.h"
#include "kernels/cuda/zb_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ZB_CUDA_MEM_MAX_TOPK 64

/* Product-key lookup: idx, w from q and keys (ties to the smaller index,
 * as on the CPU).  -1 with err when topk exceeds ZB_CUDA_MEM_MAX_TOPK or
 * the launch fails. */
int zb_cuda_memory_lookup(zb_cuda *c, int32_t *idx, float *w, const zb_bf16 *q,
                          const zb_bf16 *keys, const mem_shape *s, int N, zb_err *err);

/* e[N, v] = Σ_{h,j} w · values[idx], fp32 sums in (h, j) order, bf16 out. */
int zb_cuda_memory_bag_forward(zb_cuda *c, zb_bf16 *e, const int32_t *idx, const float *w,
                               const zb_bf16 *values, const mem_shape *s, int N, zb_err *err);

/* B: ds (fp32) and dq (bf16) from de, as kern_memory_backward_b. */
int zb_cuda_memory_backward_b(zb_cuda *c, float *ds, zb_bf16 *dq, const zb_bf16 *de,
                              const int32_t *idx, const float *w, const zb_bf16 *values,
                              const zb_bf16 *keys, const mem_shape *s, int N, zb_err *err);

/* W of the half-key tables, accumulated: dkeys += Σ ds · q halves. */
int zb_cuda_memory_keys_backward_w(zb_cuda *c, float *dkeys, const float *ds, const zb_bf16 *q,
                                   const int32_t *idx, const mem_shape *s, int N, zb_err *err);

/* W of the value table, sparse and accumulated: dV[idx] += w · de for the
 * rows read; other rows untouched. */
int zb_cuda_memory_values_backward_w(zb_cuda *c, float *dV, const int32_t *idx, const float *w,
                                     const zb_bf16 *de, const mem_shape *s, int N, zb_err *err);

#ifdef __cplusplus
}
#endif

#endif
