/*
 * zb_cuda.h: the C API of the CUDA kernels, the GPU twin of kernels/cpu/
 * ops.h and adamw.h, callable from C (tests, runtime, CLI).
 *
 * Precision (mixed, as Megatron and llm.c train): weights and activations
 * are bf16 on the device; master weights, AdamW moments and weight-gradient
 * accumulators are fp32; every reduction (norms, softmax, dot products,
 * GEMM accumulation) runs in fp32 or wider.  The split of the backward pass
 * follows the CPU kernels and the zero-bubble paper: a B op writes the
 * input gradient (bf16), a W op ACCUMULATES the weight gradient into an
 * fp32 buffer (cuBLASLt with beta = 1, bf16 inputs, fp32 output, as llm.c's
 * matmul_cublaslt), so W ops of several micro-batches can run whenever the
 * schedule puts them.
 *
 * Shapes and layouts are exactly those of ops.h: activations row-major
 * [N, features] with N = B·T rows, weights row-major [in, out], attention
 * q [N, nh·hd], k and v [N, nkv·hd] (grouped KV heads), lse [B, nh, T].
 *
 * Every function takes a zb_cuda context (one per device of a schedule:
 * its stream and its cuBLASLt handle and workspace) and device pointers
 * the caller owns; nothing here allocates per call except the cuBLASLt
 * matmul descriptors.  Kernels are asynchronous on the context's stream;
 * the return value reports launch errors only (cudaGetLastError), and
 * zb_cuda_sync reports errors of the work itself.  Errors come back as -1
 * with a zb_err line naming the CUDA / cuBLAS status; nothing exits.
 *
 * Determinism: no kernel uses floating-point atomics, so a fixed sequence
 * of calls gives the same bits on the same GPU and library versions.
 *
 * Expected workload: the `tiny` and `shakespeare-char` presets in tests and
 * one-GPU runs; layers of the 1.5B and Llama-3 8B shapes (h = 2304..4096,
 * s = 1024..4096) in the proof benchmark (bench/gpu/).
 */
#ifndef ZB_CUDA_H
#define ZB_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "src/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A bf16 value as its 16 bits (the upper half of the fp32 encoding). */
typedef uint16_t zb_bf16;

/* Opaque per-device-of-schedule context: a CUDA stream, a cuBLASLt handle
 * and its workspace, on one CUDA device. */
typedef struct zb_cuda zb_cuda;

/* ---------------------------------------------------------------------- */
/* Devices, contexts, memory                                               */
/* ---------------------------------------------------------------------- */

/* Number of CUDA devices visible, 0 when there is no driver or no device
 * (never an error: callers skip GPU work on 0). */
int zb_cuda_device_count(void);

/* Creates a context on CUDA device `device` with a new non-blocking stream,
 * a cuBLASLt handle with a 32 MiB workspace and a cuBLAS handle (the
 * fallback for shapes cuBLASLt has no algorithm for).  Returns 0 and stores it in
 * *out (free with zb_cuda_free), or -1 with err set. */
int zb_cuda_create(int device, zb_cuda **out, zb_err *err);

/* Synchronises and releases the context; NULL is fine. */
void zb_cuda_free(zb_cuda *c);

/* The context's stream (a cudaStream_t) and device number. */
void *zb_cuda_stream(const zb_cuda *c);
int zb_cuda_device(const zb_cuda *c);

/* Waits for everything queued on the context's stream; returns 0 or -1 with
 * err naming the first asynchronous error. */
int zb_cuda_sync(zb_cuda *c, zb_err *err);

/* Makes `device` current for this host thread (cudaSetDevice). */
int zb_cuda_set_device(int device, zb_err *err);

/* cudaMalloc of n bytes (n = 0 gives NULL and success) and cudaFree. */
int zb_cuda_alloc(void **p, size_t n, zb_err *err);
void zb_cuda_release(void *p);

/* Copies on the context's stream: host to device, device to host,
 * device to device (asynchronous for pinned host memory; synchronous
 * otherwise as cudaMemcpyAsync is). */
int zb_cuda_upload(zb_cuda *c, void *dst, const void *src, size_t n, zb_err *err);
int zb_cuda_download(zb_cuda *c, void *dst, const void *src, size_t n, zb_err *err);
int zb_cuda_copy(zb_cuda *c, void *dst, const void *src, size_t n, zb_err *err);

/* Sets n bytes of device memory to zero on the stream. */
int zb_cuda_zero(zb_cuda *c, void *p, size_t n, zb_err *err);

/* Device-side conversions of n values: fp32 -> bf16 (round to nearest
 * even) and bf16 -> fp32 (exact). */
int zb_cuda_f32_to_bf16(zb_cuda *c, zb_bf16 *dst, const float *src, size_t n, zb_err *err);
int zb_cuda_bf16_to_f32(zb_cuda *c, float *dst, const zb_bf16 *src, size_t n, zb_err *err);

/* Free and total device memory (cudaMemGetInfo) of the current device. */
int zb_cuda_mem_info(size_t *free_bytes, size_t *total_bytes, zb_err *err);

/* Host-side bf16 helpers (round to nearest even, NaN kept NaN). */
static inline zb_bf16 zb_bf16_from_f32(float f)
{
    union { float f; uint32_t u; } v = { f };
    if ((v.u & 0x7f800000u) == 0x7f800000u && (v.u & 0x007fffffu))
        return (zb_bf16)((v.u >> 16) | 0x40u); /* quiet NaN */
    uint32_t rounding = 0x7fffu + ((v.u >> 16) & 1u);
    return (zb_bf16)((v.u + rounding) >> 16);
}
static inline float zb_bf16_to_f32(zb_bf16 h)
{
    union { uint32_t u; float f; } v = { (uint32_t)h << 16 };
    return v.f;
}

/* ---------------------------------------------------------------------- */
/* Layer ops (twins of kernels/cpu/ops.h; device pointers)                 */
/* ---------------------------------------------------------------------- */

/* out[N,d] = E[tokens[n], :] (tokens checked in range by the caller). */
int zb_cuda_embedding_forward(zb_cuda *c, zb_bf16 *out, const int32_t *tokens,
                              const zb_bf16 *E, int N, int d, zb_err *err);

/* dE[V,d] += Σ_n onehot(tokens[n]) ⊗ dout[n,:] (fp32 accumulator; each
 * column adds its rows in n order, so the result is deterministic). */
int zb_cuda_embedding_backward_w(zb_cuda *c, float *dE, const int32_t *tokens,
                                 const zb_bf16 *dout, int N, int d, int V,
                                 zb_err *err);

/* Fused RMSNorm: out = x·rstd ⊙ g (bf16), rstd[N] fp32. */
int zb_cuda_rmsnorm_forward(zb_cuda *c, zb_bf16 *out, float *rstd,
                            const zb_bf16 *x, const zb_bf16 *g, int N, int d,
                            zb_err *err);

/* dx = rstd·(dout⊙g - x̂·mean(dout⊙g⊙x̂)) (+ dres when dres is not NULL:
 * the residual branch's gradient, fused to save a pass); written, bf16. */
int zb_cuda_rmsnorm_backward_b(zb_cuda *c, zb_bf16 *dx, const zb_bf16 *dout,
                               const zb_bf16 *x, const float *rstd,
                               const zb_bf16 *g, const zb_bf16 *dres, int N,
                               int d, zb_err *err);

/* dg[d] += Σ_n dout[n,:] ⊙ x[n,:]·rstd[n] (fp32 accumulator). */
int zb_cuda_rmsnorm_backward_w(zb_cuda *c, float *dg, const zb_bf16 *dout,
                               const zb_bf16 *x, const float *rstd, int N,
                               int d, zb_err *err);

/* Y[N,out] = X[N,in]·W[in,out] (+ R[N,out] when R is not NULL: the
 * residual add fused into the GEMM's epilogue as C with beta = 1). */
int zb_cuda_matmul_forward(zb_cuda *c, zb_bf16 *Y, const zb_bf16 *X,
                           const zb_bf16 *W, const zb_bf16 *R, int N, int in,
                           int out, zb_err *err);

/* B: dX[N,in] = dY[N,out]·Wᵀ, written, or added to dX when accumulate. */
int zb_cuda_matmul_backward_b(zb_cuda *c, zb_bf16 *dX, const zb_bf16 *dY,
                              const zb_bf16 *W, int N, int in, int out,
                              int accumulate, zb_err *err);

/* W: dW[in,out] += Xᵀ·dY (fp32 accumulator, beta = 1). */
int zb_cuda_matmul_backward_w(zb_cuda *c, float *dW, const zb_bf16 *X,
                              const zb_bf16 *dY, int N, int in, int out,
                              zb_err *err);

/* RoPE in place on x[N, n_heads·hd] (interleaved pairs, pos = row mod T);
 * inverse rotates back (RoPE's backward). */
int zb_cuda_rope(zb_cuda *c, zb_bf16 *x, int N, int T, int n_heads, int hd,
                 double theta, int inverse, zb_err *err);

/* Flash-style causal attention (online softmax over key tiles, GQA):
 * o written, lse[B, nh, T] the row log-sum-exp of the scaled scores.
 * hd must be even and at most ZB_CUDA_ATTN_MAX_HD. */
#define ZB_CUDA_ATTN_MAX_HD 256
int zb_cuda_attention_forward(zb_cuda *c, zb_bf16 *o, float *lse,
                              const zb_bf16 *q, const zb_bf16 *k,
                              const zb_bf16 *v, int B, int T, int nh, int nkv,
                              int hd, zb_err *err);

/* Backward: recomputes P per tile from q, k and lse.  Writes dq, dk, dv
 * (dk and dv sum the group's query heads).  `scratch` is device memory of
 * zb_cuda_attention_scratch_bytes(B, T, nh) bytes (the per-row dO·O). */
size_t zb_cuda_attention_scratch_bytes(int B, int T, int nh);
int zb_cuda_attention_backward(zb_cuda *c, zb_bf16 *dq, zb_bf16 *dk,
                               zb_bf16 *dv, const zb_bf16 *do_,
                               const zb_bf16 *q, const zb_bf16 *k,
                               const zb_bf16 *v, const zb_bf16 *o,
                               const float *lse, void *scratch, int B, int T,
                               int nh, int nkv, int hd, zb_err *err);

/* Fused SwiGLU over n elements: hs = silu(a)⊙b; backward da, db written. */
int zb_cuda_swiglu_forward(zb_cuda *c, zb_bf16 *hs, const zb_bf16 *a,
                           const zb_bf16 *b, size_t n, zb_err *err);
int zb_cuda_swiglu_backward(zb_cuda *c, zb_bf16 *da, zb_bf16 *db,
                            const zb_bf16 *dhs, const zb_bf16 *a,
                            const zb_bf16 *b, size_t n, zb_err *err);

/* Fused softmax cross-entropy forward: lse[N] and losses[N] = lse -
 * logits[target] (fp32).  zb_cuda_sum_f64 turns losses into the mean. */
int zb_cuda_crossentropy_forward(zb_cuda *c, float *lse, float *losses,
                                 const zb_bf16 *logits, const int32_t *targets,
                                 int N, int V, zb_err *err);

/* dlogits = (softmax(logits) - onehot(targets))·dloss/N, written (bf16). */
int zb_cuda_crossentropy_backward(zb_cuda *c, zb_bf16 *dlogits,
                                  const zb_bf16 *logits, const float *lse,
                                  const int32_t *targets, float dloss, int N,
                                  int V, zb_err *err);

/* *out (a device double) = Σ x[i] (or Σ x[i]² when squares), summed in a
 * fixed order by one block: deterministic.  For losses and grad norms. */
int zb_cuda_sum_f64(zb_cuda *c, double *out, const float *x, size_t n,
                    int squares, zb_err *err);

/* y[i] = a[i] + b[i] over n bf16 values (y may alias a or b). */
int zb_cuda_add(zb_cuda *c, zb_bf16 *y, const zb_bf16 *a, const zb_bf16 *b,
                size_t n, zb_err *err);

/* ---------------------------------------------------------------------- */
/* Optimizer (twin of kernels/cpu/adamw.h adamw_update)                    */
/* ---------------------------------------------------------------------- */

/* One AdamW update of n fp32 master weights in place, as adamw_update, and
 * writes their bf16 copy into params_bf16 (may be NULL) for the next
 * forward. */
int zb_cuda_adamw_update(zb_cuda *c, float *params, zb_bf16 *params_bf16,
                         const float *grads, float *m, float *v, size_t n,
                         int t, float lr, float beta1, float beta2, float eps,
                         float wd, float grad_scale, zb_err *err);

/* The two halves of zb_cuda_adamw_update, for a speculative step
 * (runtime/backend.h adamw_params / adamw_moments): _params writes only the
 * master weights (and their bf16 copy into params_bf16, may be NULL),
 * reading m and v; _moments writes only m and v.  Run in that order on the
 * same grads, m and v, they leave params, params_bf16, m and v with the
 * bits of one zb_cuda_adamw_update (adamw.cu says why).  The moments do
 * not depend on t, lr, eps or wd.  Queued.  0 or -1 (t < 1, a launch). */
int zb_cuda_adamw_update_params(zb_cuda *c, float *params, zb_bf16 *params_bf16,
                                const float *grads, const float *m, const float *v, size_t n,
                                int t, float lr, float beta1, float beta2, float eps, float wd,
                                float grad_scale, zb_err *err);
int zb_cuda_adamw_update_moments(zb_cuda *c, const float *grads, float *m, float *v, size_t n,
                                 float beta1, float beta2, float grad_scale, zb_err *err);

/* ---------------------------------------------------------------------- */
/* Timing (for the profiler and the benchmarks)                            */
/* ---------------------------------------------------------------------- */

/* Events on the context's stream: zb_cuda_mark records one, zb_cuda_elapsed
 * waits for `end` and returns milliseconds between two marks. */
typedef struct zb_cuda_event zb_cuda_event;
int zb_cuda_event_new(zb_cuda_event **e, zb_err *err);
void zb_cuda_event_free(zb_cuda_event *e);
int zb_cuda_mark(zb_cuda *c, zb_cuda_event *e, zb_err *err);
int zb_cuda_elapsed(zb_cuda_event *start, zb_cuda_event *end, float *ms,
                    zb_err *err);

#ifdef __cplusplus
}
#endif

#endif
