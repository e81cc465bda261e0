/*
 * ops.h: the layer kernels of the Llama-style decoder (fp32, CPU), each a
 * forward plus a backward split into B (input gradient, WRITTEN) and W
 * (weight gradient, WRITTEN into a caller's temporary; llama.c adds it into
 * the accumulator).  Stateless functions over caller-owned buffers, in the
 * style of llm.c's train_gpt2.c: shapes are in the comments, N = B·T rows,
 * activations row-major [N, features], weights row-major [in, out].
 *
 * Nothing here allocates once the largest shape has been seen (the
 * attention's blocks of scores and RoPE's table live in per-thread scratch,
 * team.h) and nothing here is order-dependent across calls: every
 * reduction runs in a fixed index order, GEMMs go through kern_gemm
 * (single-threaded BLAS, kernels.h), and the passes a thread team shares
 * are split where the split changes no bit (rows, sequences, fixed chunks
 * of elements).  Workload: N up to 16·256 = 4096 rows, d ≤ 384,
 * d_ff ≤ 1536, T ≤ 256.
 */
#ifndef ZB_KERNELS_OPS_H
#define ZB_KERNELS_OPS_H

#include <stddef.h>
#include <stdint.h>

/* RMSNorm epsilon inside the square root (Lingua / Llama use 1e-5). */
#define KERN_RMSNORM_EPS 1e-5f

/* out[N,d] = E[tokens[n], :].  Tokens must be in [0, V) (checked by the
 * caller). */
void kern_embedding_forward(float *out, const int32_t *tokens, const float *E,
                            int N, int d);

/* dE[V,d] = Σ_n onehot(tokens[n]) ⊗ dout[n,:], written (dE zeroed first),
 * rows added in n order. */
void kern_embedding_backward_w(float *dE, const int32_t *tokens,
                               const float *dout, int N, int d, int V);

/* out[N,d] = x / sqrt(mean(x²) + eps) ⊙ g; rstd[N] = 1/sqrt(mean(x²)+eps). */
void kern_rmsnorm_forward(float *out, float *rstd, const float *x,
                          const float *g, int N, int d);

/* dx[N,d] = rstd·(dout⊙g - x̂·mean(dout⊙g⊙x̂)), x̂ = x·rstd; written. */
void kern_rmsnorm_backward_b(float *dx, const float *dout, const float *x,
                             const float *rstd, const float *g, int N, int d);

/* dg[d] = Σ_n dout[n,:] ⊙ x[n,:]·rstd[n], written, rows in n order. */
void kern_rmsnorm_backward_w(float *dg, const float *dout, const float *x,
                             const float *rstd, int N, int d);

/* Y[N,out] = X[N,in] · W[in,out]. */
void kern_matmul_forward(float *Y, const float *X, const float *W, int N,
                         int in, int out);

/* dX[N,in] = dY[N,out] · Wᵀ, written. */
void kern_matmul_backward_b(float *dX, const float *dY, const float *W, int N,
                            int in, int out);

/* dW[in,out] = Xᵀ · dY, written (beta 0). */
void kern_matmul_backward_w(float *dW, const float *X, const float *dY, int N,
                            int in, int out);

/* Rotates x[B·T, n_heads·hd] in place: for every head and pair i <
 * hd/2, (x[2i], x[2i+1]) by angle t·theta^(-2i/hd), t = row mod T.
 * inverse = 1 rotates by the negative angle (the backward of RoPE, since
 * rotations are orthogonal). */
void kern_rope(float *x, int N, int T, int n_heads, int hd, double theta,
               int inverse);

/* Rotates one row [n_heads·hd] at position pos forward, bit for bit as
 * kern_rope rotates a row at t = pos (decoding one token with a KV cache). */
void kern_rope_row(float *row, int pos, int n_heads, int hd, double theta);

/* Causal attention per sequence b and head h (KV head h / (nh/nkv)):
 *   P = softmax(q_h k_hᵀ / sqrt(hd) + causal mask),  o_h = P v_h
 * in blocks of 64 query rows that skip the masked scores (ops.c).
 * q[N, nh·hd], k,v [N, nkv·hd], o [N, nh·hd] written, lse[B, nh, T] the
 * per-row log-sum-exp of the scaled scores (kept so B can recompute P).
 * Returns 0, or -1 when its T×T scratch cannot be allocated. */
int kern_attention_forward(float *o, float *lse, const float *q,
                           const float *k, const float *v, int B, int T,
                           int nh, int nkv, int hd);

/* Backward (all B: attention has no weights).  Given do_[N, nh·hd] and
 * the forward's q, k, v, o, lse: writes dq [N, nh·hd], dk and dv
 * [N, nkv·hd] (query heads of one group add into their KV head in head
 * order).  Returns 0, or -1 when scratch cannot be allocated. */
int kern_attention_backward(float *dq, float *dk, float *dv, const float *do_,
                            const float *q, const float *k, const float *v,
                            const float *o, const float *lse, int B, int T,
                            int nh, int nkv, int hd);

/* dst[i] = a[i] + b[i] for i < n (dst may be a or b): the residual adds,
 * gradient sums and weight-gradient accumulation, vectorized and shared
 * over the calling thread's team (elementwise: the same bits at any split). */
void kern_add(float *dst, const float *a, const float *b, size_t n);

/* hs[N,f] = silu(a) ⊙ b, silu(a) = a·sigmoid(a). */
void kern_swiglu_forward(float *hs, const float *a, const float *b, size_t n);

/* da = dhs ⊙ b ⊙ silu'(a), db = dhs ⊙ silu(a); written. */
void kern_swiglu_backward(float *da, float *db, const float *dhs,
                          const float *a, const float *b, size_t n);

/* Per row n: lse[n] = log Σ_v exp(logits[n,v]); returns the mean over rows
 * of lse[n] - logits[n, targets[n]] (accumulated in double in row order). */
double kern_crossentropy_forward(float *lse, const float *logits,
                                 const int32_t *targets, int N, int V);

/* dlogits[N,V] = (softmax(logits) - onehot(targets)) · dloss / N. */
void kern_crossentropy_backward(float *dlogits, const float *logits,
                                const float *lse, const int32_t *targets,
                                float dloss, int N, int V);

#endif
