/*
 * vocab_cuda.h: the vocabulary-sharded output layer's kernels on a GPU,
 * the twin of kernels/cpu/vocab_shard.h (docs/vocab-parallel.md) in the
 * precision conventions of zb_cuda.h: bf16 logits, activations and
 * weights, fp32 statistics and reductions.  The shard's matmuls (logits
 * Y = X·W_k, the partial G·W_kᵀ, dW_k += Xᵀ·G) are zb_cuda_matmul_*.
 *
 * Per-shard arrays that a combine reads for all p shards are packed shard
 * after shard: row statistics [p][N], partials [p][N·d].  A combine is one
 * thread per row (statistics) or per element (dX) walking the shards in
 * order 0..p-1, so its result does not depend on which shard's work
 * finished first: the same determinism as the CPU's, without atomics.
 *
 * Vocab-1's target term: the CPU combine reads the owner shard's weight
 * column; here each shard writes its own rows of it at S
 * (zb_cuda_vshard_target_rows: W_k[:, y_n - v0] where the target is in
 * shard k, else 0), so that the combine touches only per-shard buffers,
 * as it would across GPUs.
 *
 * The executor's CUDA backend runs the passes over these kernels
 * (kernels/cuda/backend_cuda_vocab.c).
 */
#ifndef ZB_VOCAB_CUDA_H
#define ZB_VOCAB_CUDA_H

#include <stdint.h>

#include "kernels/cuda/zb_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* S statistics of one shard's logits [N, v] (bf16): per row the max
 * row_max[n], row_sum[n] = Σ_j exp(Y[n,j] - row_max[n]) and tgt[n] = Y[n,
 * y_n - v0] when v0 <= y_n < v0+v, else 0 (all fp32). */
int zb_cuda_vshard_stats(zb_cuda *c, float *row_max, float *row_sum, float *tgt,
                         const zb_bf16 *logits, const int32_t *targets, int v0, int N, int v,
                         zb_err *err);

/* Vocab-1's local softmax: ex[n,j] = exp(Y[n,j] - row_max[n]) / row_sum[n]
 * (bf16; ex may alias logits). */
int zb_cuda_vshard_local_softmax(zb_cuda *c, zb_bf16 *ex, const zb_bf16 *logits,
                                 const float *row_max, const float *row_sum, int N, int v,
                                 zb_err *err);

/* rows[n,:] = W[:, y_n - v0] (fp32 [N, d]) when the target is in the shard
 * of W [d, v] (bf16), else 0. */
int zb_cuda_vshard_target_rows(zb_cuda *c, float *rows, const zb_bf16 *w,
                               const int32_t *targets, int v0, int N, int d, int v,
                               zb_err *err);

/* Barrier C0's statistics from the packed [p][N] row_max, row_sum, tgt:
 * lse[n] = M + log Σ_k s_k exp(m_k - M), losses[n] = lse[n] - Σ_k tgt[k][n]
 * (one shard holds the target, the others add 0), and, when weight is not
 * NULL, Vocab-1's rescale weight[k][n] = s_k exp(m_k - M) / Σ. */
int zb_cuda_vshard_combine_stats(zb_cuda *c, float *lse, float *losses, float *weight,
                                 const float *row_max, const float *row_sum, const float *tgt,
                                 int p, int N, zb_err *err);

/* The shard's logit gradient: g = exp(Y - lse)·dloss/N, minus dloss/N at
 * the target when it is in the shard (bf16; g may alias logits). */
int zb_cuda_vshard_logit_grad(zb_cuda *c, zb_bf16 *g, const zb_bf16 *logits, const float *lse,
                              const int32_t *targets, int v0, float dloss, int N, int v,
                              zb_err *err);

/* Vocab-1 combine: dx[n,:] = (Σ_k weight[k][n]·partial[k][n,:] -
 * Σ_k rows[k][n,:]) · dloss/N, shards in order, fp32 accumulation; partial
 * bf16 packed [p][N·d], rows fp32 packed [p][N·d]; dx bf16 [N, d]. */
int zb_cuda_vshard_combine_dx_v1(zb_cuda *c, zb_bf16 *dx, const zb_bf16 *partial,
                                 const float *weight, const float *rows, float dloss, int p,
                                 int N, int d, zb_err *err);

/* Vocab-2 combine: dx = Σ_k partial[k], shards in order (fp32 sum, bf16 out). */
int zb_cuda_vshard_combine_dx_v2(zb_cuda *c, zb_bf16 *dx, const zb_bf16 *partial, int p, int N,
                                 int d, zb_err *err);

/* H[:, v0+j] += dw[:, j] for the shard gradient dw [d, v] (fp32) and the
 * row-major head gradient H [d, V] (fp32): vshard_scatter_add's one
 * addition per element, so a shard's micro-batches, added in order on one
 * stream, give the unsharded W's order. */
int zb_cuda_vshard_scatter_add(zb_cuda *c, float *H, const float *dw, int d, int V, int v0,
                               int v, zb_err *err);

#ifdef __cplusplus
}
#endif

#endif
