/*
 * llama.h: one pipeline stage of a Llama-style decoder, fp32 on the CPU,
 * with the backward pass split into B (input gradients) and W (weight
 * gradients) so that a zero-bubble schedule can run them at different times.
 *
 * The model (Meta Lingua / INTELLECT-1 style):
 *
 *   x = E[tokens]                                  embedding, first stage only
 *   for each layer l:
 *     h  = x + Wo · attn(rope(Wq·n1), rope(Wk·n1), Wv·n1),  n1 = rmsnorm(x)·g1
 *     x  = h + W2 · (silu(W1·n2) ⊙ (W3·n2)),                 n2 = rmsnorm(h)·g2
 *   logits = H · (rmsnorm(x)·gf)                   final norm + LM head, last stage only
 *   loss   = mean over the B·T tokens of -log softmax(logits)[target]
 *
 * Causal multi-head attention with grouped KV heads (query head h reads KV
 * head h / (n_heads / n_kv_heads)), scale 1/sqrt(head_dim), no biases, no
 * dropout, untied LM head.  RMSNorm: y = x / sqrt(mean(x²) + 1e-5) · g.
 * RoPE rotates interleaved pairs (x[2i], x[2i+1]) of each head by the angle
 * pos · theta^(-2i/head_dim), pos = 0..T-1 within every sequence (Meta's
 * complex-number convention, as in Lingua).
 *
 * Conventions (the JAX golden script tools/golden/make_golden.py uses the
 * same): activations are row-major [B·T, features]; every weight matrix is
 * stored row-major [in, out] so that a linear layer is Y = X·W, its B op is
 * dX = dY·Wᵀ (written) and its W op is dW += Xᵀ·dY (accumulated).
 *
 * PARAMETER LAYOUT.  A stage owns layers [l0, l1) plus optionally the
 * embedding (first stage) and the final norm + LM head (last stage).  Its
 * parameters live in ONE contiguous fp32 buffer, tensors back to back in
 * this order (the gradient buffer has the same layout):
 *
 *   embedding   E   [vocab, d]                 if has_embedding
 *   per layer l = l0..l1-1:
 *     attn_norm g1  [d]
 *     wq            [d, n_heads·hd]            hd = d / n_heads
 *     wk            [d, n_kv_heads·hd]
 *     wv            [d, n_kv_heads·hd]
 *     wo            [n_heads·hd, d]
 *     mlp_norm  g2  [d]
 *     w1 (gate)     [d, d_ff]
 *     w3 (up)       [d, d_ff]
 *     w2 (down)     [d_ff, d]
 *   (a memory layer, zb_model.memory, has instead of w1, w3, w2:
 *     mem_query     [d, H·kd]
 *     mem_keys      [H·2·n_keys, kd/2]
 *     mem_values    [n_keys², v]               not with shared values, except
 *                                              on the first memory layer
 *     mem_swilu     [d, v]
 *     mem_out       [v, d]                     see memory_layer.h)
 *   final_norm  gf  [d]                        if has_head
 *   lm_head     H   [d, vocab]                 if has_head
 *
 * llama_stage_tensor() enumerates these with their offsets, so nobody has to
 * hard-code them.  llama_stage_init_params() fills a buffer from a seed so
 * that every tensor depends only on (seed, layer, tensor kind): the same
 * model split into any stages has bit-identical initial weights.
 *
 * SAVED STATE.  Each micro-batch's forward fills a llama_saved object that
 * the executor owns (llama_saved_new / llama_saved_free).  B consumes the
 * activations only it needs (attention q/k/v, SwiGLU pre-activations) and
 * frees them, then keeps what W needs (the inputs of every matmul and the
 * output gradients B computed).  W consumes that and frees it; after W the
 * object is empty and can be reused for another micro-batch or freed.
 * llama_saved_bytes() reports the bytes held at any time (for the runtime's
 * memory profile: after F, after B, after W = 0).  With full recompute
 * (llama_saved_set_recompute) F keeps only the stage's inputs, and B
 * reruns the forward before its own work; with MLP-level recompute F drops
 * the MLP blocks' activations and B reruns only those.
 *
 * DETERMINISM CONTRACT (the runtime promises bit-identical results for
 * every schedule):
 *   1. Call kernels_init_threads(1) (kernels/cpu/kernels.h) once before
 *      anything else: OpenBLAS must run single-threaded so that no
 *      reduction order depends on thread count.  Several executor threads
 *      may then call these functions concurrently on different stages /
 *      micro-batches; nothing here has global mutable state (scratch is
 *      per thread, team.h).  A thread may own a team (kern_team_bind):
 *      GEMMs and attention then share their work over it with the same
 *      bits as alone, so results do not depend on --threads either.
 *   2. Forward and B of a micro-batch are pure functions of (params, input,
 *      saved): their results do not depend on what else ran in between.
 *   3. W computes this micro-batch's weight gradient dW_mb into a private
 *      temporary (a fresh GEMM with beta = 0) and then adds it elementwise
 *      into grads: grads[i] = grads[i] + dW_mb[i].  dW_mb does not depend on
 *      the contents of grads, so the only order-dependence is the order of
 *      those additions.  THE EXECUTOR MUST call W for a given stage in
 *      increasing micro-batch order within a step, starting from a zeroed
 *      grad buffer (llama_grads_zero), OR call W on a zeroed scratch buffer
 *      per micro-batch and add the scratches into the accumulator in
 *      micro-batch order with llama_grads_add — both give the same bits as
 *      the single-device run, which does F,B,W of micro-batch 0, then 1, ...
 *   4. The loss is reduced in token order in double; the global loss of a
 *      step is the caller's average of the micro-batch losses in
 *      micro-batch order.
 *
 * Expected workload: the `tiny` (4×64, T=64) and `shakespeare-char`
 * (6×384, T=256, B=8..16) presets; attention recomputes its softmax
 * probabilities in B from saved q, k and the per-row log-sum-exp instead
 * of keeping B·H·T² floats per layer.
 */
#ifndef ZB_KERNELS_LLAMA_H
#define ZB_KERNELS_LLAMA_H

#include <stddef.h>
#include <stdint.h>

#include "src/err.h"
#include "src/model.h"

/* The kinds of parameter tensor, in layout order within a layer. */
typedef enum llama_tensor_kind {
    LLAMA_T_EMBEDDING = 0, /* [vocab, d] */
    LLAMA_T_ATTN_NORM,     /* [d] */
    LLAMA_T_WQ,            /* [d, n_heads·hd] */
    LLAMA_T_WK,            /* [d, n_kv_heads·hd] */
    LLAMA_T_WV,            /* [d, n_kv_heads·hd] */
    LLAMA_T_WO,            /* [n_heads·hd, d] */
    LLAMA_T_MLP_NORM,      /* [d] */
    LLAMA_T_W1,            /* gate [d, d_ff] */
    LLAMA_T_W3,            /* up [d, d_ff] */
    LLAMA_T_W2,            /* down [d_ff, d] */
    LLAMA_T_FINAL_NORM,    /* [d] */
    LLAMA_T_LM_HEAD,       /* [d, vocab] */
    /* memory layers (memory_layer.h), in place of w1, w3, w2; appended so
     * that the kinds above keep their values (the init keys use them) */
    LLAMA_T_MEM_QUERY,     /* [d, H·kd] */
    LLAMA_T_MEM_KEYS,      /* [H·2·n_keys, kd/2] the half-key tables */
    LLAMA_T_MEM_VALUES,    /* [n_keys², v] (shared: held by the first memory layer) */
    LLAMA_T_MEM_SWILU,     /* [d, v] memory+ gate projection */
    LLAMA_T_MEM_OUT,       /* [v, d] output projection */
    LLAMA_T_COUNT
} llama_tensor_kind;

/* One parameter tensor of a stage's buffer. */
typedef struct llama_tensor {
    llama_tensor_kind kind; /* what it is */
    int layer;              /* global layer index, -1 for embedding/final norm/head */
    size_t offset;          /* first float in the stage's param/grad buffer */
    size_t count;           /* floats = rows · cols */
    int rows, cols;         /* shape (rows = 1 for vectors) */
    int decay;              /* 1: AdamW applies weight decay (2-D tensors) */
    char name[32];          /* "layers.3.wq", "embedding", "lm_head", ... */
} llama_tensor;

/* A stage: a contiguous range of layers of one model, immutable after
 * llama_stage_init (safe to share between threads) except for its buffer
 * pool, which locks itself.  Never copy one by value: the copy would share
 * the pool, and both llama_stage_free calls would free it. */
typedef struct llama_stage {
    zb_model cfg;           /* the model (copied) */
    int l0, l1;             /* layers [l0, l1) live here; l0 == l1 allowed */
    int has_embedding;      /* 1: input is tokens, stage starts with E */
    int has_head;           /* 1: stage ends with final norm, LM head, loss */
    int norm_only;          /* 1: stage ends with the final norm only and outputs
                             * its result; the head and loss run elsewhere
                             * (vocabulary parallelism, runtime/vocab_exec.h) */
    int head_dim;           /* d_model / n_heads */
    int q_dim, kv_dim;      /* n_heads·hd, n_kv_heads·hd */
    size_t n_params;        /* floats in the param (and grad) buffer */
    int n_tensors;          /* entries in tensors[] */
    llama_tensor *tensors;  /* owned; layout order */
    size_t layer_offset0;   /* offset of layer l0's first tensor */
    size_t layer_stride;    /* floats of layer l0 (memory layers differ in size) */
    int *layer_tensor0;     /* owned; [l1-l0+1] index in tensors[] of each local
                             * layer's first tensor, then the end of the layers */
    int values_tensor;      /* tensors[] index of the shared memory value table
                             * this stage holds, or -1 */
    int n_memory;           /* memory layers in [l0, l1) */
    struct buf_pool *pool;  /* the saved-state buffers of this stage's
                             * llama_saved objects, reused across micro-batches
                             * and steps (kernels/cpu/buf_pool.h; internally
                             * locked, the one mutable part of a stage), or
                             * NULL: plain malloc/free */
    int owns_pool;          /* 1: pool is this stage's own (freed with it); 0:
                             * shared with the other stages of its device
                             * (llama_stage_share_pool) */
} llama_stage;

/* Makes st take its saved-state buffers from `shared` (not owned: the
 * caller frees it after every stage using it and their saved states),
 * freeing its own pool.  A device that holds several stages (interleaved,
 * V-shaped schedules) then keeps one set of idle buffers, as large as its
 * busiest moment, rather than one per stage, each as large as that
 * stage's busiest moment (bench/README.md, issue 25).  Call before any
 * saved state of st exists. */
void llama_stage_share_pool(llama_stage *st, struct buf_pool *shared);

/* Per micro-batch saved state (opaque; see the SAVED STATE paragraph).
 * Owned by the caller; one object per micro-batch in flight. */
typedef struct llama_saved llama_saved;

/* Values of llama_stage_init's has_head. */
enum {
    LLAMA_HEAD_NONE = 0,      /* no final norm, no head */
    LLAMA_HEAD_FULL = 1,      /* final norm, LM head and loss */
    LLAMA_HEAD_NORM_ONLY = 2, /* final norm only: act_out is its output and
                               * B's dy_in its gradient; the LM head and the
                               * loss are split by vocabulary elsewhere */
};

/* Describes the stage [l0, l1) of model m (fields used: n_layers, d_model,
 * n_heads, n_kv_heads, d_ff, vocab, seq_len, rope_theta, memory).  Checks
 * sizes (heads divide d_model, head_dim even, kv heads divide heads, 0 <=
 * l0 <= l1 <= n_layers, at least one of layers/embedding/head, the memory
 * configuration, and with shared memory values that the stage holds all of
 * the memory layers or none: the shared table cannot span stages).  Returns 0, or -1
 * with err set (st left empty).  Free with llama_stage_free. */
int llama_stage_init(llama_stage *st, const zb_model *m, int l0, int l1,
                     int has_embedding, int has_head, zb_err *err);

/* Releases what llama_stage_init allocated; st may be zero-filled. */
void llama_stage_free(llama_stage *st);

/* Number of floats in the stage's parameter buffer (= its grad buffer). */
size_t llama_stage_num_params(const llama_stage *st);

/* The i-th tensor (0 <= i < st->n_tensors), or NULL when out of range. */
const llama_tensor *llama_stage_tensor(const llama_stage *st, int i);

/* Finds a tensor by kind and global layer (-1 for non-layer tensors);
 * NULL when this stage does not hold it. */
const llama_tensor *llama_stage_find(const llama_stage *st,
                                     llama_tensor_kind kind, int layer);

/* Fills params (llama_stage_num_params floats) deterministically from seed:
 * norm gains are 1; every matrix entry is std · N(0,1) from a counter-based
 * generator keyed by (seed, layer, kind, index), std = 0.02 for E,
 * wq/wk/wv/w1/w3 and the head, and 0.02/sqrt(2·n_layers) for the residual
 * projections wo and w2 (GPT-2 / nanoGPT scaling).  Independent of the
 * stage split by construction. */
void llama_stage_init_params(const llama_stage *st, float *params, uint64_t seed);

/* Creates an empty saved-state object for micro-batches of `batch`
 * sequences of cfg.seq_len tokens.  Returns NULL on allocation failure. */
llama_saved *llama_saved_new(const llama_stage *st, int batch);

/* Frees the object and anything it still holds (NULL is fine). */
void llama_saved_free(llama_saved *sv);

/* Drops whatever the object holds (a forward-only evaluation, or an
 * abandoned step) and makes it empty again, ready for a new forward. */
void llama_saved_reset(llama_saved *sv);

/* Bytes of activation/gradient buffers the object currently holds. */
size_t llama_saved_bytes(const llama_saved *sv);

/* Recompute levels of llama_saved_set_recompute (the values of a plan's
 * recompute levels and of src/cost_model.h's COST_RC_*). */
enum {
    LLAMA_RC_NONE = 0, /* F keeps every activation B needs */
    LLAMA_RC_FULL = 1, /* F keeps the stage's inputs only; B reruns the forward */
    LLAMA_RC_MLP = 2,  /* F drops each SwiGLU layer's MLP block; B reruns it */
};

/* Activation recomputation for the micro-batches that use this object
 * (call while it is empty), at level LLAMA_RC_*.
 *   LLAMA_RC_FULL: forward keeps only the stage's inputs (tokens or act_in,
 *     and the targets on the head stage) and frees every activation; B
 *     first reruns the forward from those inputs, then proceeds as usual.
 *     The cost is one more forward per micro-batch inside B.  If the input
 *     copies cannot be allocated, the forward keeps its full state instead.
 *   LLAMA_RC_MLP: forward frees, in every SwiGLU layer, the MLP block's
 *     activations (the pre-MLP norm output, gate and up pre-activations and
 *     their product) and keeps attention's and the block input (the
 *     residual after attention); B first reruns each layer's norm and its
 *     three MLP matmuls from that input.  Memory layers keep their state.
 * B's and W's results are bit-identical to a run without recompute (the
 * forward is a pure function, contract 2).  Any other level is a
 * programming error (assert). */
void llama_saved_set_recompute(llama_saved *sv, int level);

/* What a saved state of `batch` sequences of st holds at each point of a
 * micro-batch's life at recompute level `recompute` (LLAMA_RC_*), in the
 * bytes llama_saved_bytes reports, read from the slot table without
 * allocating an activation: the runtime's memory estimate
 * (runtime/footprint.h) is this, not a copy of it. */
typedef struct llama_saved_sizes {
    size_t in_f;    /* the most F holds at once: every forward slot, and
                     * with full recompute the copies of its inputs, before
                     * the recompute level drops what it does not keep */
    size_t after_f; /* from F until B: the forward's slots, or what the
                     * recompute level keeps of them */
    size_t in_b;    /* the most B holds at once: the forward's slots
                     * (rebuilt when recomputed) and B's own */
    size_t after_b; /* from B until W: what W reads */
} llama_saved_sizes;

/* Fills *out for st at `batch` and `recompute`.  Returns 0, or -1 when the
 * slot table cannot be allocated. */
int llama_saved_plan(const llama_stage *st, int batch, int recompute, llama_saved_sizes *out);

/* Forward of one micro-batch of sv's batch size B and T = cfg.seq_len.
 *   tokens  int32 [B·T]   input when has_embedding (else NULL)
 *   act_in  float [B·T·d] input when !has_embedding (else NULL)
 *   targets int32 [B·T]   next tokens when has_head (else NULL)
 *   act_out float [B·T·d] written when !has_head (else NULL)
 *   loss    mean cross-entropy over the B·T tokens, written when has_head
 *   logits  float [B·T·vocab], optional (may be NULL) when has_head
 * Fills sv (which must be empty: new, or after W).  Returns 0, or -1 with
 * err set (token or target out of range, out of memory; sv then empty). */
int llama_stage_forward(const llama_stage *st, const float *params,
                        const int32_t *tokens, const float *act_in,
                        const int32_t *targets, llama_saved *sv,
                        float *act_out, float *loss, float *logits,
                        zb_err *err);

/* B: input gradients of one micro-batch, after its forward.
 *   dloss   when has_head: d(objective)/d(this micro-batch's mean loss),
 *           e.g. 1/n_micro to average over micro-batches; ignored otherwise
 *   dy_in   float [B·T·d] gradient of act_out when !has_head (else NULL)
 *   dx_out  float [B·T·d] gradient of act_in, written when !has_embedding
 *           (else NULL: the embedding has only a W op)
 * Frees the forward-only parts of sv and keeps what W needs.  dy_in is not
 * retained (copied when needed).  Returns 0 or -1 with err set (out of
 * memory; sv then keeps its forward state so B may be retried). */
int llama_stage_backward_b(const llama_stage *st, const float *params,
                           llama_saved *sv, float dloss, const float *dy_in,
                           float *dx_out, zb_err *err);

/* W: weight gradients of one micro-batch, after its B.  ACCUMULATES into
 * grads (llama_stage_num_params floats, same layout as params): grads +=
 * dW_mb, see the determinism contract above for the call order.  Empties
 * sv.  Returns 0 or -1 with err set (out of memory; grads untouched). */
int llama_stage_backward_w(const llama_stage *st, llama_saved *sv,
                           float *grads, zb_err *err);

/* Convenience: B immediately followed by W (the non-split backward). */
int llama_stage_backward(const llama_stage *st, const float *params,
                         llama_saved *sv, float dloss, const float *dy_in,
                         float *dx_out, float *grads, zb_err *err);

/* grads := 0 for the whole stage buffer. */
void llama_grads_zero(const llama_stage *st, float *grads);

/* acc[i] += scratch[i] over the stage buffer (micro-batch-order
 * accumulation of per-micro-batch W scratches). */
void llama_grads_add(const llama_stage *st, float *acc, const float *scratch);

#endif
