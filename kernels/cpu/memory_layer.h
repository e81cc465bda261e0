/*
 * memory_layer.h: the product-key memory layer (Berges et al., "Memory
 * Layers at Scale", Meta 2024; facebookresearch/memory, HashingMemory with
 * swilu_projection), fp32 on the CPU, with its backward split into B (input
 * gradient) and W (weight gradients) like every op of ops.h.
 *
 * A memory layer takes the place of a layer's feed-forward block.  For
 * every row n of its input x[N, d] (the normalised residual stream):
 *
 *   q      = x · Wq                         [N, H·kd]     query, H heads of kd
 *   per head h, with q1 / q2 the two halves (kd/2 each) of q's head h:
 *     s1   = K1[h] · q1,  s2 = K2[h] · q2    [n_keys] each, two half-key tables
 *     top-k of s1 (indices a), top-k of s2 (indices b)
 *     top-k of the k² sums s1[a_i] + s2[b_j] -> k slots (a, b), slot = a·n_keys + b
 *     w    = softmax over those k scores
 *   e      = Σ_h Σ_j w[h,j] · V[slot[h,j]]   [N, v]        the "embedding bag"
 *   u      = e ⊙ silu(x · Wsw)               [N, v]        memory+ gating
 *   out    = u · Wout                       [N, d]
 *
 * The selected indices are constants of the forward: the gradient flows
 * through the k selected scores only, into q and into the k chosen rows of
 * each half-key table, and through w into the k·H chosen value rows.
 *
 * The kernels here are the memory-specific pieces; llama.c composes them
 * with kern_matmul_* (Wq, Wsw, Wout) and kern_swiglu_* (u = silu(g) ⊙ e is
 * exactly the SwiGLU product).  Tensor shapes (row-major):
 *
 *   keys    [H, 2, n_keys, kd/2]    K1[h] = keys[h][0], K2[h] = keys[h][1]
 *   values  [n_keys², v]
 *   idx     int32 [N, H, k]          chosen slots, best first
 *   w       float [N, H, k]          their softmax weights
 *
 * SPARSE VALUE GRADIENT.  dV has n_keys² rows, of which one micro-batch
 * touches at most N·H·k.  kern_memory_values_grad never forms the dense
 * matrix: it sorts the (slot, entry) pairs, sums each touched row's
 * contributions in entry order (n, h, j) starting from zero, and adds each
 * touched row's sum into the gradient row, grads[r] = grads[r] + sum[r].
 * That is bit for bit what the dense "write into a temporary, then add"
 * path of llama.c's W gives every other tensor, so the determinism contract
 * of llama.h holds unchanged; the memory and time are O(N·H·k·v), not
 * O(slots·v).
 *
 * Determinism and ties: the half-key scores come from single-threaded
 * GEMMs over chunks of 64 rows (fixed bits for fixed shapes); top-k orders
 * by score, ties to the smaller index (for the k² sums: the smaller (i, j)
 * in row-major order of the two top-k lists), so the selection is a pure
 * function of the inputs and the number of rows.  A row scored alone (the
 * KV-cache decoder) may differ from the same row scored in a batch in the
 * last bits, as every GEMM-based op here may.
 *
 * Workload: tiny-mem (N = 4·64, d = 64, H = 2, kd = 32, 64² slots of 64,
 * k = 8): well under a millisecond per call; scratch is O(64·n_keys + k²)
 * in F and O(N·H·k) in W, never O(slots).
 */
#ifndef ZB_KERNELS_MEMORY_LAYER_H
#define ZB_KERNELS_MEMORY_LAYER_H

#include <stddef.h>
#include <stdint.h>

/* The sizes of one memory layer. */
typedef struct mem_shape {
    int d;      /* model dimension (input x and output) */
    int heads;  /* H, memory read heads */
    int k_dim;  /* kd, query dimension per head (even) */
    int n_keys; /* half-keys per table; slots = n_keys² */
    int topk;   /* k, slots read per head (<= n_keys) */
    int v_dim;  /* v, width of a value row */
} mem_shape;

/* Product-key lookup for N rows: from q[N, H·kd] and keys, writes idx and w
 * ([N, H, k] each, best slot first).  Returns 0, or -1 when its per-call
 * scratch cannot be allocated. */
int kern_memory_lookup(int32_t *idx, float *w, const float *q, const float *keys,
                       const mem_shape *s, int N);

/* e[N, v] = Σ_{h,j} w[n,h,j] · values[idx[n,h,j]], summed in (h, j) order. */
void kern_memory_bag_forward(float *e, const int32_t *idx, const float *w,
                             const float *values, const mem_shape *s, int N);

/* B of the bag and the lookup: given de[N, v], writes ds[N, H, k], the
 * gradient of the k selected (pre-softmax) scores, and dq[N, H·kd] (the
 * gradient of the query through the selected half-key scores).  Returns 0,
 * or -1 when its O(k + kd) scratch cannot be allocated. */
int kern_memory_backward_b(float *ds, float *dq, const float *de,
                            const int32_t *idx, const float *w,
                            const float *values, const float *keys,
                            const mem_shape *s, int N);

/* W of the half-key tables: dkeys[H, 2, n_keys, kd/2] WRITTEN (zeroed
 * first), row (h, 0, a) += ds · q1 and (h, 1, b) += ds · q2, in (n, h, j)
 * order.  The key tables are small (H·2·n_keys·kd/2), so this is dense. */
void kern_memory_keys_backward_w(float *dkeys, const float *ds, const float *q,
                                 const int32_t *idx, const mem_shape *s, int N);

/* Bytes of scratch kern_memory_values_backward_w needs for N rows (the
 * caller allocates it up front, so that W can fail before touching any
 * gradient). */
size_t kern_memory_values_scratch_bytes(const mem_shape *s, int N);

/* W of the value table, sparse, ADDED into the accumulator: for every
 * slot r this micro-batch read, dV[r] = dV[r] + Σ w·de over the entries
 * (n, h, j) that read it, the sum taken in entry order from zero in a
 * v-float row (SPARSE VALUE GRADIENT above).  Rows nobody read are not
 * touched.  dV is [n_keys², v]; scratch holds
 * kern_memory_values_scratch_bytes(s, N) bytes.  Returns the number of
 * distinct rows touched. */
int kern_memory_values_backward_w(float *dV, const int32_t *idx, const float *w,
                                  const float *de, const mem_shape *s, int N,
                                  void *scratch);

#endif
