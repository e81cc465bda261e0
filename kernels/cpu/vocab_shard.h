/*
 * vocab_shard.h: the output layer (LM head, softmax, cross-entropy) split
 * by vocabulary over p shards, fp32 on the CPU, for vocabulary parallelism
 * (Yeung, Qi et al. 2024; docs/vocab-parallel.md).
 *
 * The unsharded head (kernels/cpu/llama.c) computes, for the head input X
 * [N, d] (the final norm's output), the weight H [d, V] and targets y:
 *
 *   Y = X·H,  lse[n] = log Σ_v exp(Y[n,v]),  loss = mean_n (lse[n] - Y[n,y_n])
 *   G = (softmax(Y) - onehot(y)) · dloss/N,  dX = G·Hᵀ,  dH = Xᵀ·G
 *
 * Shard k holds the columns [v0, v0+v) of H as its own contiguous [d, v]
 * matrix W_k.  Then:
 *
 *   S pass      Y_k = X·W_k, per row the local max m_k, the local sum
 *               s_k = Σ exp(Y_k - m_k) and, when y_n falls in the shard, the
 *               target logit (vshard_forward).
 *   Vocab-1 S   also the input-gradient partial under the LOCAL softmax,
 *               P_k = (exp(Y_k - m_k)/s_k)·W_kᵀ (vshard_local_partial).
 *   barrier C0  M = max_k m_k, Σ = Σ_k s_k exp(m_k - M), lse = M + log Σ and
 *               the loss (vshard_combine_stats).  Vocab-1 also combines dX
 *               = (Σ_k c_k P_k - H[:, y]) · dloss/N with c_k = s_k exp(m_k -
 *               M)/Σ (vshard_combine_dx_v1).
 *   T pass      G_k from the global lse exactly as the unsharded kernel does
 *               (vshard_logit_grad), dW_k = Xᵀ·G_k; Vocab-2 also the partial
 *               P_k = G_k·W_kᵀ.
 *   barrier C1  (Vocab-2) dX = Σ_k P_k (vshard_combine_dx_v2).
 *
 * Every combine visits the shards in shard order 0..p-1 and accumulates in
 * double (the unsharded loss does its sums in double too), so the results
 * depend only on the split, never on which shard finished first; hence a
 * run is bit-identical across schedule kinds with the same split.  Against
 * the unsharded head: the loss and G agree to float rounding (the logits
 * GEMM of a narrower matrix may round differently; lse is
 * rounded to float as kern_crossentropy_forward rounds it), dW_k equals
 * the columns of dH, and dX differs by the regrouping of a float sum.
 *
 * Workload: N = B·T up to a few thousand rows, d <= 384, v up to a few
 * thousand columns; the matmuls go through kern_gemm (kernels.h), so a
 * thread bound to a team (team.h) shares them out with the same bits.
 */
#ifndef ZB_KERNELS_VOCAB_SHARD_H
#define ZB_KERNELS_VOCAB_SHARD_H

#include <stdint.h>

/* The first vocabulary entry of shard k of p over V entries: shards are
 * contiguous and as even as possible (k·V/p rounded down), so shard k
 * holds [vshard_begin(k), vshard_begin(k+1)).  0 <= k <= p. */
int vshard_begin(int k, int p, int V);

/* The shard (0..p-1) that holds vocabulary entry y. */
int vshard_owner(int y, int p, int V);

/* Copies columns [v0, v0+v) of the row-major H [d, V] into w [d, v]. */
void vshard_gather(float *w, const float *H, int d, int V, int v0, int v);

/* H[:, v0+j] += dw[:, j] for the [d, v] shard gradient dw, one element at
 * a time (the accumulation the unsharded W makes for those columns). */
void vshard_scatter_add(float *H, const float *dw, int d, int V, int v0, int v);

/* S statistics of one shard: logits[N,v] = x[N,d]·w[d,v]; per row n the
 * max row_max[n], row_sum[n] = Σ_j exp(logits[n,j] - row_max[n]) (double,
 * in column order) and tgt[n] = logits[n, y_n - v0] when v0 <= y_n < v0+v
 * (else 0).  When ex is not NULL it receives ex[n,j] = exp(logits[n,j] -
 * row_max[n]) as float, the terms of the sum, for vshard_local_partial
 * (so that Vocab-1's S takes each exponential once). */
void vshard_forward(float *logits, float *row_max, double *row_sum, float *tgt, float *ex,
                    const float *x, const float *w, const int32_t *targets, int v0,
                    int N, int d, int v);

/* Vocab-1's partial under the local softmax: partial[N,d] =
 * (ex/row_sum)·wᵀ with ex [N,v] from vshard_forward, scaled in place. */
void vshard_local_partial(float *partial, float *ex, const double *row_sum, const float *w,
                          int N, int d, int v);

/* Barrier C0's statistics from the p shards' S results (arrays indexed by
 * shard, each [N]), in shard order: lse[n] = M + log Σ rounded to float (as
 * kern_crossentropy_forward rounds it) and, when weight != NULL, the
 * Vocab-1 rescale weight[k][n] = s_k exp(m_k - M)/Σ.  Returns the mean over
 * rows of (M + log Σ) - Y[n, y_n] in double, rows in order (the loss). */
double vshard_combine_stats(float *lse, double *const *weight, const float *const *row_max,
                            const double *const *row_sum, const float *const *tgt,
                            const int32_t *targets, int p, int V, int N);

/* The shard's logit gradient from the global lse, the unsharded
 * kern_crossentropy_backward's arithmetic: g[n,j] = expf(logits[n,j] -
 * lse[n])·s minus s at the target when it is in the shard, s = dloss/N.
 * g may alias logits. */
void vshard_logit_grad(float *g, const float *logits, const float *lse,
                       const int32_t *targets, int v0, float dloss, int N, int v);

/* Vocab-1 combine: dx[n,:] = (Σ_k weight[k][n]·partial[k][n,:] - H[:, y_n])
 * · dloss/N in double, shards in order; H's target column is read from
 * the owner shard's w[k] [d, v_k].  partial[k] is [N,d]. */
void vshard_combine_dx_v1(float *dx, const float *const *partial, double *const *weight,
                          const float *const *w, const int32_t *targets, float dloss,
                          int p, int V, int N, int d);

/* Vocab-2 combine: dx = Σ_k partial[k] in double, shards in order. */
void vshard_combine_dx_v2(float *dx, const float *const *partial, int p, int N, int d);

#endif
