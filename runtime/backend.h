/*
 * backend.h: what the pipeline executor (trainer.h) asks of a device.
 *
 * There is one executor and several backends.  The executor owns the
 * schedule: the workers, the order of ops, the transport between stages,
 * post-validation, evaluation, checkpoints, traces and the hooks the outer
 * optimizer uses.  A backend owns the arithmetic and the memory of one
 * kind of device: a stage's parameters, gradients and AdamW moments, the
 * saved activations between F, B and W, the activation messages, and the
 * ops on them.  Each backend lives in its kernels' folder, as ggml keeps
 * ggml-cpu/ and ggml-cuda/: the CPU backend (kernels/cpu/backend_cpu.c)
 * wraps kernels/cpu/llama.h and adamw.h; the CUDA backend
 * (kernels/cuda/backend_cuda.c, inside the loadable module zbsched_cuda.so)
 * wraps kernels/cuda/gpu_stage.h.  A backend depends on this header and
 * its own kernels only, never on the executor.
 *
 * The design follows ggml's backend interface (ggml-backend-impl.h: a
 * struct of function pointers per backend, opaque buffers, async set/get
 * of tensors, events to order work between streams), cut down to what a
 * pipeline of whole stages needs.  ggml schedules a graph of tensors; here
 * the unit is a stage and its four buffers, because the executor never
 * looks inside a stage: it runs F, B, W and the optimizer on it and moves
 * one activation-sized message between stages.
 *
 * Objects:
 *   zb_backend  one device kind, with the schedule's p devices (CPU: the
 *               worker threads' teams; CUDA: one stream per device on one
 *               GPU).  Made by a factory (backend_cpu_create of
 *               kernels/cpu/backend_cpu.h, or the CUDA
 *               module's backend_create); freed by ops->destroy.
 *   zb_bstage   one virtual stage on one device: params (fp32 master),
 *               grads, AdamW m and v, a post-validation copy of what a
 *               speculative step writes (snapshot), and the loss of every
 *               forward until sync.
 *   zb_bsaved   one micro-batch's saved state (F -> B -> W).
 *   zb_bgrads   a spare weight-gradient buffer, for a W the schedule runs
 *               ahead of micro-batch order (the executor adds it into the
 *               stage's grads when its turn comes, which keeps the CPU
 *               results bit-identical for every schedule).
 *   activation  a void * of act_new: B*T*d elements in the backend's own
 *               type (fp32 on the CPU, bf16 on a GPU), passed through the
 *               transport as it is.
 *
 * Host mirrors.  The executor, the checkpoint writer and the outer
 * optimizer read and write a stage's buffers as host fp32 arrays in the
 * layout of kernels/cpu/llama.h (ops->host).  On the CPU the mirror IS
 * the buffer: download and upload are NULL and nothing is copied.  On a
 * GPU the mirror is a host copy that the executor refreshes (download)
 * before handing it out and writes back (upload) before the next step, so
 * a checkpoint, an average of replicas or an outer step sees the device's
 * master weights and moments and the same file loads on either backend.
 *
 * Fences.  Ops are queued: on a GPU they return once issued on the stage
 * device's stream.  An activation carries one fence, "the last use that
 * was issued".  A device that hands a buffer on (send, or back to the
 * pool) calls act_issued(dev, buf) after its last queued use; a device
 * that takes one (receive, or out of the pool) calls act_wait(dev, buf)
 * before its first.  Because a buffer has one owner at a time, one fence
 * per buffer orders every use, and the in-process transport never makes
 * the host wait for the GPU.  Both are NULL on the CPU, where an op has
 * finished when it returns.  Values that the host reads (a forward's
 * loss, a gradient norm) are deferred: forward's *loss is written by
 * sync(stage); grad_sumsq waits by itself.
 *
 * Threading: a stage's ops are called by one thread at a time (its
 * device's worker during a step, the caller between steps); different
 * stages' ops run concurrently.  act_new, act_free and memory may be
 * called from any thread.  bind is called by each worker thread before
 * its first op (a GPU backend makes its device current there).
 *
 * Errors: functions returning int give 0, or -1 with err set to one line;
 * after a failed op the stage's buffers are unspecified (the executor
 * stops the step).
 */
#ifndef ZB_RUNTIME_BACKEND_H
#define ZB_RUNTIME_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/adamw.h"
#include "kernels/cpu/llama.h"
#include "src/err.h"
#include "src/mem_ledger.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zb_backend zb_backend;
typedef struct zb_bstage zb_bstage;
typedef struct zb_bsaved zb_bsaved;
typedef struct zb_bgrads zb_bgrads;
typedef struct zb_bvocab zb_bvocab;

/* The four buffers of a stage that have a host mirror. */
typedef enum zb_bbuf {
    ZB_BUF_PARAMS = 0, /* fp32 master weights */
    ZB_BUF_GRADS = 1,  /* weight-gradient accumulators */
    ZB_BUF_ADAM_M = 2, /* AdamW first moment */
    ZB_BUF_ADAM_V = 3, /* AdamW second moment */
    ZB_BUF_COUNT = 4
} zb_bbuf;

/* The shape of the vocabulary passes a backend's vocab_new builds for
 * (runtime/vocab_exec.h, docs/vocab-parallel.md): the output layer split
 * by vocabulary into one shard per schedule device, shard k on device k. */
typedef struct zb_vocab_shape {
    int variant; /* SCHED_VOCAB_1 (dX partials from S) or SCHED_VOCAB_2 (from T) */
    int shards;  /* p, the schedule's devices */
    int micro;   /* m, micro-batches per step */
    int batch;   /* B, sequences per micro-batch */
    int seq;     /* T, tokens per sequence (rows per micro-batch N = B*T) */
    int d;       /* model width */
    int vocab;   /* V, split into shards as kernels/cpu/vocab_shard.h's vshard_begin */
    int local;   /* -1: every shard's S and T run in this process; k >= 0: only
                  * shard k's (one device per process, runtime/vocab_link.h);
                  * the other shards' results arrive through vocab_import */
} zb_vocab_shape;

/* What one vocab_export / vocab_import moves between processes. */
typedef enum zb_vocab_wire {
    ZB_VOCAB_WIRE_STATS = 0,   /* a cell's row statistics (barrier C0's input) */
    ZB_VOCAB_WIRE_PARTIAL = 1, /* a cell's input-gradient partial, [N, d] fp32 */
    ZB_VOCAB_WIRE_DW = 2       /* a shard's columns of the step's head gradient, [d, v] fp32 */
} zb_vocab_wire;

/* The operations every backend implements.  Members marked optional may
 * be NULL; the executor then skips the call. */
typedef struct zb_backend_ops {
    const char *name; /* "cpu", "cuda", or a wrapper's name */
    /* Frees the backend (after every stage, saved state and activation of
     * it was freed); NULL is fine. */
    void (*destroy)(zb_backend *be);
    /* Optional.  Called by each worker thread for device dev before it
     * issues anything. */
    int (*bind)(zb_backend *be, int dev, zb_err *err);

    /* ---- stages ---- */
    /* The stage `layout` (borrowed, outlives the stage) on schedule device
     * dev: all four buffers zeroed.  `compute` (borrowed, or NULL for
     * layout itself) is what F, B, W and grads_add run: with vocabulary
     * parallelism the last stage owns the LM head's parameters (layout:
     * they are stepped, clipped and checkpointed with the stage) but its
     * ops stop at the final norm (compute: LLAMA_HEAD_NORM_ONLY, whose
     * tensors are a prefix of layout's), while the vocabulary passes write
     * the head's gradient into the host mirror (runtime/vocab_exec.h).  A
     * backend that cannot run such a stage refuses it.  0 and *out, or -1
     * (refused layout, memory). */
    int (*stage_new)(zb_backend *be, const llama_stage *layout, const llama_stage *compute,
                     int dev, zb_bstage **out, zb_err *err);
    void (*stage_free)(zb_backend *be, zb_bstage *st); /* NULL is fine */
    /* The host mirror of buffer `which`: llama_stage_num_params floats in
     * the CPU layout.  Never NULL for a live stage. */
    float *(*host)(zb_backend *be, zb_bstage *st, zb_bbuf which);
    /* Optional (NULL when the mirror is the buffer).  mirror := device,
     * and device := mirror; both synchronous. */
    int (*download)(zb_backend *be, zb_bstage *st, zb_bbuf which, zb_err *err);
    int (*upload)(zb_backend *be, zb_bstage *st, zb_bbuf which, zb_err *err);

    /* ---- saved state ---- */
    /* A saved state for micro-batches of `batch` sequences; recompute is a
     * LLAMA_RC_* level as llama_saved_set_recompute takes it (0: none; a
     * backend without recomputation refuses the others).  0 or -1. */
    int (*saved_new)(zb_backend *be, zb_bstage *st, int batch, int recompute, zb_bsaved **out,
                     zb_err *err);
    void (*saved_free)(zb_backend *be, zb_bsaved *sv); /* NULL is fine */
    /* Bytes of activations sv holds now. */
    size_t (*saved_bytes)(zb_backend *be, const zb_bsaved *sv);

    /* ---- activations (B*T*d elements of the backend's type) ---- */
    void *(*act_new)(zb_backend *be, size_t n); /* NULL when memory runs out */
    void (*act_free)(zb_backend *be, void *act); /* NULL is fine */
    /* Optional (the executor does not call them; the per-op tests and a
     * host-staged transport do): an activation from / to host fp32 [n],
     * converted to and from the backend's type.  Synchronous. */
    int (*act_upload)(zb_backend *be, void *act, const float *host, size_t n, zb_err *err);
    int (*act_download)(zb_backend *be, const void *act, float *host, size_t n, zb_err *err);
    /* Optional: the fences of the header comment. */
    int (*act_issued)(zb_backend *be, int dev, void *act, zb_err *err);
    int (*act_wait)(zb_backend *be, int dev, void *act, zb_err *err);

    /* ---- stage ops (llama_stage_forward / _backward_b / _backward_w) ---- */
    /* F of one micro-batch: tokens (host int32 [B*T], embedding stage) or
     * act_in; targets (host, head stage) or act_out.  *loss (head stage:
     * the mean cross-entropy) is written by the next sync of the stage;
     * tokens and targets must stay unchanged until then. */
    int (*forward)(zb_backend *be, zb_bstage *st, zb_bsaved *sv, const int32_t *tokens,
                   const void *act_in, const int32_t *targets, void *act_out, float *loss,
                   zb_err *err);
    /* B: input gradients; dloss scales the head's loss (1/m). */
    int (*backward_b)(zb_backend *be, zb_bstage *st, zb_bsaved *sv, float dloss,
                      const void *dy_in, void *dx_out, zb_err *err);
    /* W: weight gradients added into `into` (NULL: the stage's grads);
     * empties sv. */
    int (*backward_w)(zb_backend *be, zb_bstage *st, zb_bsaved *sv, zb_bgrads *into,
                      zb_err *err);
    /* Waits for the stage's queued work and writes its deferred losses. */
    int (*sync)(zb_backend *be, zb_bstage *st, zb_err *err);

    /* ---- gradients and optimizer ---- */
    /* A zeroed spare gradient buffer of the stage; NULL on no memory. */
    zb_bgrads *(*grads_new)(zb_backend *be, zb_bstage *st);
    void (*grads_free)(zb_backend *be, zb_bgrads *g); /* NULL is fine */
    /* g := 0 (NULL: the stage's grads). */
    int (*grads_zero)(zb_backend *be, zb_bstage *st, zb_bgrads *g, zb_err *err);
    /* stage grads += g, tensor by tensor (llama_grads_add). */
    int (*grads_add)(zb_backend *be, zb_bstage *st, const zb_bgrads *g, zb_err *err);
    /* Σ g² of each tensor of the stage's grads in tensor order into host
     * out[layout->n_tensors] (adamw_tensor_sum_squares).  Synchronous. */
    int (*grad_sumsq)(zb_backend *be, zb_bstage *st, double *out, zb_err *err);
    /* One AdamW step of every tensor for 1-based step t with the
     * gradients scaled by grad_scale (adamw_step_stage). */
    int (*adamw)(zb_backend *be, zb_bstage *st, const adamw_config *c, int t, float lr,
                 float grad_scale, zb_err *err);
    /* Optional, all three or none: a speculative step that keeps no copy
     * of the moments.  adamw_params copies the params aside (allocated at
     * the first call, kept for the stage's life) and writes them exactly
     * as adamw would, leaving m and v; then either adamw_moments writes m
     * and v exactly as that adamw would have (same gradients, same
     * grad_scale: the moments do not depend on t), or adamw_undo puts the
     * params back.  Without them the executor uses snapshot and restore. */
    int (*adamw_params)(zb_backend *be, zb_bstage *st, const adamw_config *c, int t, float lr,
                        float grad_scale, zb_err *err);
    int (*adamw_moments)(zb_backend *be, zb_bstage *st, const adamw_config *c, float grad_scale,
                         zb_err *err);
    int (*adamw_undo)(zb_backend *be, zb_bstage *st, zb_err *err);
    /* Post-validation: copy params, m and v aside, and put them back. */
    int (*snapshot)(zb_backend *be, zb_bstage *st, zb_err *err);
    int (*restore)(zb_backend *be, zb_bstage *st, zb_err *err);
    /* Optional (ZeRO-1, runtime/outer/zero1.h): from now on the stage's
     * optimizer state covers only the n ranges [lo[i], lo[i] + len[i]) of
     * its parameters (increasing, disjoint; copied): m and v hold those
     * floats concatenated in range order (host(ADAM_M) and host(ADAM_V)
     * give that many floats, not llama_stage_num_params), adamw steps
     * only those ranges, snapshot and restore cover only them.  Called
     * before the first step, while m and v are zero.  NULL: the backend
     * keeps whole state, and ZeRO-1 is refused on it.  0 or -1. */
    int (*opt_shard)(zb_backend *be, zb_bstage *st, const size_t *lo, const size_t *len, int n,
                     zb_err *err);

    /* ---- vocabulary passes (optional: a backend without them has all
     * NULL, and the executor refuses vocabulary-parallel schedules on it) ----
     * The arithmetic of runtime/vocab_exec.h's S and T passes and barriers,
     * and every buffer they keep (the shards' copies of the head, each
     * (shard, micro-batch) cell's logits, row statistics and input-gradient
     * partial, each micro-batch's head input).  The executor keeps the
     * order: who waits for which barrier.  The head itself stays where the
     * stage keeps it, the last tensor of the last stage ([d, V] row-major,
     * from float `head_offset` of its buffers), its gradient beside it. */
    /* Every buffer for `shape`.  0 and *out, or -1 (memory, a shape the
     * backend cannot run). */
    int (*vocab_new)(zb_backend *be, const zb_vocab_shape *shape, zb_bvocab **out, zb_err *err);
    void (*vocab_free)(zb_backend *be, zb_bvocab *v); /* NULL is fine */
    /* Start of a step: each shard's copy of stage st's head, st's head
     * gradient (zeroed by the executor) as the T passes' accumulator, and
     * the step's host targets [m][N] (unchanged until the step ends).  Also
     * forgets the last step's progress (a failed step's too). */
    int (*vocab_begin)(zb_backend *be, zb_bvocab *v, zb_bstage *st, size_t head_offset,
                       const int32_t *targets, zb_err *err);
    /* Micro-batch mb's head input x (an activation [N, d], the last
     * stage's F output on device dev), copied. */
    int (*vocab_put_x)(zb_backend *be, zb_bvocab *v, int dev, int mb, const void *x, zb_err *err);
    /* S of shard `shard` on micro-batch mb (its x put): logits and row
     * statistics; Vocab-1 also the input-gradient partial. */
    int (*vocab_s)(zb_backend *be, zb_bvocab *v, int shard, int mb, zb_err *err);
    /* T of shard `shard` on mb (every shard's S of mb done: barrier C0):
     * the logit gradient from the combined statistics, Vocab-2's partial,
     * and the shard's weight gradient added into the head gradient in
     * micro-batch order (a T that runs ahead keeps its own until its turn). */
    int (*vocab_t)(zb_backend *be, zb_bvocab *v, int shard, int mb, zb_err *err);
    /* For the last stage's B on device dev (barrier C0 with Vocab-1, C1
     * with Vocab-2, passed): the head input's gradient into dx (an
     * activation) for an objective of dloss times the micro-batch's mean
     * loss, which goes to *loss (host). */
    int (*vocab_dx)(zb_backend *be, zb_bvocab *v, int dev, int mb, float dloss, void *dx,
                    float *loss, zb_err *err);
    /* Forward only, on the calling thread: the mean loss of head input x
     * (an activation of `batch` sequences) against host targets y with
     * stage st's head, shard by shard and combined as in training. */
    int (*vocab_eval)(zb_backend *be, zb_bvocab *v, zb_bstage *st, size_t head_offset,
                      const void *x, const int32_t *y, int batch, double *loss, zb_err *err);
    /* Bytes one cell of shard `shard` holds between its S and its T (for
     * the activation profile): logits, statistics, the head input; the
     * input-gradient partial ([N, d] fp32) is counted apart. */
    size_t (*vocab_cell_bytes)(zb_backend *be, const zb_bvocab *v, int shard);
    /* Optional (needed only when shape.local >= 0: one shard per process).
     * The bytes of one `part` of shard `shard` (for the DW part: its
     * columns of the head gradient, complete once the shard's every T of
     * the step has run; mb is then ignored); export copies them into buf,
     * import stores a copy from another process as that cell's (STATS,
     * PARTIAL) or over those columns (DW).  0, or -1 with err. */
    size_t (*vocab_wire_bytes)(zb_backend *be, const zb_bvocab *v, zb_vocab_wire part, int shard);
    int (*vocab_export)(zb_backend *be, zb_bvocab *v, zb_vocab_wire part, int shard, int mb,
                        void *buf, zb_err *err);
    int (*vocab_import)(zb_backend *be, zb_bvocab *v, zb_vocab_wire part, int shard, int mb,
                        const void *buf, zb_err *err);

    /* ---- memory ---- */
    /* Bytes the backend holds for stages (buffers and snapshots) and the
     * most bytes of saved activations and messages it held at once since
     * it was made (0 when the backend does not track it).  0 or -1. */
    int (*memory)(zb_backend *be, size_t *static_bytes, size_t *peak_activation_bytes,
                  zb_err *err);
    /* Optional: the ledger of every buffer the backend holds, by device
     * and class (src/mem_ledger.h), which the executor also charges its
     * own buffers to; owned by the backend.  NULL: not measured. */
    mem_ledger *(*ledger)(zb_backend *be);
} zb_backend_ops;

struct zb_backend {
    const zb_backend_ops *ops; /* the implementation */
    void *impl;                /* its state */
};

/* A backend factory, as trainer_opts carries it: makes a backend for a
 * schedule of n_devices devices.  0 and *out, or -1 with err. */
typedef int (*zb_backend_make)(void *ctx, int n_devices, zb_backend **out, zb_err *err);

/* Frees be through its ops; NULL is fine. */
static inline void backend_free(zb_backend *be)
{
    if (be && be->ops->destroy)
        be->ops->destroy(be);
}

#ifdef __cplusplus
}
#endif

#endif
