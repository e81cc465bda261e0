/*
 * gpu_stage.h: one pipeline stage of the Llama-style decoder on a GPU, the
 * twin of kernels/cpu/llama.h over the CUDA ops of zb_cuda.h, with the
 * backward split into B (input gradients) and W (weight gradients) so that
 * zero-bubble schedules can run them apart.
 *
 * The stage reuses the CPU stage's description (llama_stage: layers,
 * tensors, offsets), so parameters move between host and device as one
 * flat buffer in exactly the CPU layout: llama_stage_init_params on the
 * host, gpu_stage_upload, and a GPU run starts from the same weights as a
 * CPU run.  On the device the stage holds, all in that layout:
 *
 *   master   fp32 [n]   the weights AdamW updates
 *   weights  bf16 [n]   the copy every forward / B multiplies with
 *   grads    fp32 [n]   weight-gradient accumulators (W adds into them)
 *   m, v     fp32 [n]   AdamW moments
 *
 * Saved state per micro-batch (gpu_saved) follows llama.c's slot table:
 * F allocates what B and W need, B frees the forward-only tensors (q, k,
 * v, lse, SwiGLU pre-activations, logits) and adds the output gradients W
 * multiplies with, W frees everything.  Buffers come from the stream-
 * ordered allocator (cudaMallocAsync on the stage's stream), so freeing
 * never synchronises the device and several stages' streams keep running;
 * gpu_saved_bytes is the exact activation memory held, the figure the
 * zero-bubble paper's M_B / M_W model predicts.
 *
 * Precision: bf16 activations and weights, fp32 accumulation, fp32 norms'
 * 1/rms and attention lse, fp32 weight gradients (mixed precision as in
 * Megatron).  Results match the CPU stage within bf16 tolerance, not bit
 * for bit; W accumulates in the order the schedule runs it.
 *
 * All pointers passed in (act_in, dy_in, act_out, dx_out) are device
 * pointers of B·T·d bf16; tokens and targets are HOST int32 arrays (the
 * data loader lives on the host) copied into the saved state.
 *
 * Expected workload: the `tiny` and `shakespeare-char` presets for the
 * loss comparison with the CPU, one layer of the 1.5B / Llama-3 8B shapes
 * in the proof benchmark.
 */
#ifndef ZB_GPU_STAGE_H
#define ZB_GPU_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/adamw.h"
#include "kernels/cpu/llama.h"
#include "kernels/cuda/zb_cuda.h"
#include "src/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpu_stage gpu_stage;
typedef struct gpu_saved gpu_saved;

/* Creates the device side of stage `layout` (borrowed: must outlive the
 * stage) on context c (borrowed), allocating master, bf16 weights, grads
 * and moments (zeroed).  Returns 0 and *out, or -1 with err set. */
int gpu_stage_create(zb_cuda *c, const llama_stage *layout, gpu_stage **out, zb_err *err);

/* gpu_stage_create whose F, B and W run `compute` (borrowed) instead of
 * `layout`: with vocabulary parallelism the head stage's buffers hold its
 * whole layout (the LM head is stepped, clipped and checkpointed with it)
 * while its ops stop at the final norm (compute: llama_stage_init with
 * LLAMA_HEAD_NORM_ONLY over the same layers, whose tensors are a prefix of
 * layout's).  compute == layout is gpu_stage_create.  0 or -1. */
int gpu_stage_create_compute(zb_cuda *c, const llama_stage *layout, const llama_stage *compute,
                             gpu_stage **out, zb_err *err);

/* The stage's device buffers, for the vocabulary passes that read the
 * head's bf16 weights and add into its gradient (backend_cuda_vocab.c):
 * bf16 [n] compute copy of the weights, fp32 [n] gradient accumulators,
 * both in the CPU layout of the stage's full layout. */
const zb_bf16 *gpu_stage_weights(const gpu_stage *st);
float *gpu_stage_grads(gpu_stage *st);

/* Frees the stage's device buffers; NULL is fine. */
void gpu_stage_free(gpu_stage *st);

/* The context and layout the stage was made with. */
zb_cuda *gpu_stage_ctx(const gpu_stage *st);
const llama_stage *gpu_stage_layout(const gpu_stage *st);

/* Device bytes of the static state (master + bf16 + grads + m + v) and of
 * the post-validation copies allocated so far (4 bytes a parameter each). */
size_t gpu_stage_static_bytes(const gpu_stage *st);

/* Copies n = llama_stage_num_params floats of host params into the master
 * weights and refreshes the bf16 copy.  Synchronous.  0 or -1. */
int gpu_stage_upload(gpu_stage *st, const float *params, zb_err *err);

/* Copies the master weights (or the gradient accumulators) to the host
 * (llama_stage_num_params floats).  Synchronous.  0 or -1. */
int gpu_stage_download(gpu_stage *st, float *params, zb_err *err);
int gpu_stage_download_grads(gpu_stage *st, float *grads, zb_err *err);

/* The stage's fp32 buffers, as gpu_stage_get / gpu_stage_set name them. */
enum { GPU_BUF_MASTER = 0, GPU_BUF_GRADS = 1, GPU_BUF_M = 2, GPU_BUF_V = 3 };

/* Copies buffer `which` (llama_stage_num_params floats) to the host, or
 * from the host (GPU_BUF_MASTER also refreshes the bf16 copy).  Both
 * synchronous.  0 or -1. */
int gpu_stage_get(gpu_stage *st, int which, float *host, zb_err *err);
int gpu_stage_set(gpu_stage *st, int which, const float *host, zb_err *err);

/* Post-validation: copies master, m and v aside on the device (three more
 * fp32 buffers, allocated by the first call), and back (refreshing the
 * bf16 copy).  Queued.  0 or -1. */
int gpu_stage_snapshot(gpu_stage *st, zb_err *err);
int gpu_stage_restore(gpu_stage *st, zb_err *err);

/* Post-validation without a copy of the moments (runtime/backend.h's
 * adamw_params, adamw_moments, adamw_undo).  _params copies the master
 * weights aside (one fp32 buffer, the snapshot's first, allocated by the
 * first call and kept) and writes master and the bf16 copy as
 * gpu_stage_adamw would, leaving m and v.  Then exactly one of: _moments
 * writes m and v as that gpu_stage_adamw would have (same grads, same
 * grad_scale), so params-then-moments has the whole step's bits; or _undo
 * copies the master weights back and re-derives the bf16 copy, the bits
 * from before _params.  Either without a pending _params fails.  Queued.
 * 0 or -1. */
int gpu_stage_adamw_params(gpu_stage *st, const adamw_config *c, int t, float lr,
                           float grad_scale, zb_err *err);
int gpu_stage_adamw_moments(gpu_stage *st, const adamw_config *c, float grad_scale, zb_err *err);
int gpu_stage_adamw_undo(gpu_stage *st, zb_err *err);

/* grads += src (device fp32 [n], e.g. a W run ahead of micro-batch order
 * into a spare buffer).  Queued.  0 or -1. */
int gpu_stage_grads_add(gpu_stage *st, const float *src, zb_err *err);

/* grads := 0 (queued on the stage's stream). */
int gpu_stage_grads_zero(gpu_stage *st, zb_err *err);

/* Per-tensor Σ g² of the accumulators, in tensor order, into host
 * out[layout->n_tensors] (synchronous); returns their sum in *total. */
int gpu_stage_grad_sumsq(gpu_stage *st, double *out, double *total, zb_err *err);

/* One AdamW step of every tensor (decay as llama_tensor.decay says) for
 * 1-based step t, as adamw_step_stage does on the CPU.  Queued. */
int gpu_stage_adamw(gpu_stage *st, const adamw_config *c, int t, float lr, float grad_scale,
                    zb_err *err);

/* A saved-state object for micro-batches of `batch` sequences; NULL when
 * host memory runs out (device memory is taken by F, B and W). */
gpu_saved *gpu_saved_new(gpu_stage *st, int batch);
void gpu_saved_free(gpu_saved *sv);

/* Activation recomputation for the micro-batches that use sv (call while
 * it is empty) at level LLAMA_RC_* (kernels/cpu/llama.h), with the CPU
 * stage's semantics:
 *   LLAMA_RC_FULL  F keeps only its inputs (tokens and targets on the
 *                  device, or a bf16 copy of act_in) and frees every other
 *                  activation; B first reruns the forward from them.  If
 *                  the copy cannot be taken, F keeps its full state.
 *   LLAMA_RC_MLP   F frees every layer's MLP block (the pre-MLP norm
 *                  output, gate and up pre-activations, their SwiGLU
 *                  product) and keeps attention's state and the block
 *                  input; B first reruns the norm and the MLP matmuls.
 * B and W then compute from what F computed; gpu_saved_bytes reports what
 * is held at each point.  Any other level is a programming error. */
void gpu_saved_set_recompute(gpu_saved *sv, int level);

/* Sequences per micro-batch the object was made for. */
int gpu_saved_batch(const gpu_saved *sv);

/* Device bytes of activations the object holds now. */
size_t gpu_saved_bytes(const gpu_saved *sv);

/* Forward of one micro-batch (queued on the stage's stream).
 *   tokens   host int32 [B·T] when the stage has the embedding, else NULL
 *   act_in   device bf16 [B·T·d] otherwise
 *   targets  host int32 [B·T] when the stage has the head, else NULL
 *   act_out  device bf16 [B·T·d] written when the stage has no head
 * The loss (has_head) stays on the device until gpu_saved_loss.
 * Tokens and targets are range-checked here.  0, or -1 with err set. */
int gpu_stage_forward(gpu_stage *st, gpu_saved *sv, const int32_t *tokens,
                      const zb_bf16 *act_in, const int32_t *targets, zb_bf16 *act_out,
                      zb_err *err);

/* The mean cross-entropy of sv's last forward (head stage only; waits for
 * it).  May be called until W empties sv.  0 or -1. */
int gpu_saved_loss(gpu_saved *sv, double *loss, zb_err *err);

/* Queues a device-to-device copy of the SUM of the per-token losses of
 * sv's last forward (one double; divide by B·T for the mean) to dst, so an
 * executor can collect losses without waiting.  Head stage, after F. */
int gpu_saved_copy_loss_sum(gpu_saved *sv, double *dst, zb_err *err);

/* B: input gradients.  dloss as in llama_stage_backward_b (head stage);
 * dy_in device bf16 [B·T·d] when the stage has no head; dx_out device bf16
 * [B·T·d] written when the stage has no embedding.  0 or -1. */
int gpu_stage_backward_b(gpu_stage *st, gpu_saved *sv, float dloss, const zb_bf16 *dy_in,
                         zb_bf16 *dx_out, zb_err *err);

/* W: weight gradients, accumulated into the stage's grads; empties sv. */
int gpu_stage_backward_w(gpu_stage *st, gpu_saved *sv, zb_err *err);

/* W into another device fp32 [n] accumulator instead of the stage's. */
int gpu_stage_backward_w_into(gpu_stage *st, gpu_saved *sv, float *grads, zb_err *err);

#ifdef __cplusplus
}
#endif

#endif
