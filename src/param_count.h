/*
 * param_count.h: how many parameters a model, or a pipeline stage of it,
 * holds: the one count that the cost model (cost_param_count, a stage's
 * static bytes), the runtime's memory estimate (runtime/footprint.h) and
 * the kernels' layout (kernels/cpu/llama.h, llama_stage_init) agree on.
 * tests/solver/test_param_count.c holds the agreement with the kernels for
 * every preset, for memory layers and for every split.
 *
 * The tensors are those of llama.h: per plain layer the two RMSNorm
 * weights, wq [d, q], wk and wv [d, kv], wo [q, d] and the SwiGLU w1, w3
 * [d, ff] and w2 [ff, d]; a memory layer (memory_layer.h) swaps w1, w3, w2
 * for its query projection [d, H·kd], half-key tables [H·2·n_keys,
 * kd/2], value table [n_keys², v] (one for all memory layers when shared,
 * held by the stage of the first), gate [d, v] and output [v, d]; the
 * embedding [V, d]; the head the final norm and the output matrix [d, V].
 * GPT-style models (swiglu 0), which only the cost model prices, add
 * LayerNorm biases, linear biases and learned positions.
 *
 * Counts are doubles (exact below 2^53, i.e. any model that exists) so
 * that absurd sizes read from a file cannot overflow.  O(layers) at most.
 */
#ifndef ZB_PARAM_COUNT_H
#define ZB_PARAM_COUNT_H

#include "src/model.h"

/* What a stage holds of the output layer (llama.h's LLAMA_HEAD_* values). */
enum {
    PARAM_HEAD_NONE = 0,      /* nothing */
    PARAM_HEAD_FULL = 1,      /* final norm and output matrix */
    PARAM_HEAD_NORM_ONLY = 2, /* the final norm only (vocabulary parallelism) */
};

/* Parameters of one plain transformer layer of m. */
double param_plain_layer(const zb_model *m);

/* Parameters of one memory layer of m, with its value table when
 * with_values (not shared, or the first memory layer of a shared table). */
double param_memory_layer(const zb_model *m, int with_values);

/* Parameters of one value table of m's memory layers (0 without). */
double param_value_table(const zb_model *m);

/* The embedding, with learned positions when m has no RoPE. */
double param_embedding(const zb_model *m);

/* The head (PARAM_HEAD_*): the final norm and, when full, the output
 * matrix, its own copy even when the embedding is tied. */
double param_head(const zb_model *m, int head);

/* Layer `layer` of m (plain, or memory with its table as llama_stage_init
 * places it). */
double param_layer(const zb_model *m, int layer);

/* What a stage of layers [l0, l1) holds, with the embedding when
 * has_embedding and the head as `head` says: llama_stage_num_params of
 * llama_stage_init(m, l0, l1, has_embedding, head). */
double param_stage(const zb_model *m, int l0, int l1, int has_embedding, int head);

/* The whole model (a tied embedding counted once). */
double param_count(const zb_model *m);

#endif
