/*
 * generate.h: text generation from a training checkpoint, with a KV cache.
 *
 * `zbsched run --checkpoint DIR` writes a checkpoint directory
 * (runtime/ckpt_set.h): the trainer's parameters, per stage, in one part
 * per rank, and a manifest holding the model record (the model, its
 * memory layers and the character vocabulary of the training text); the
 * older layout had DIR/checkpoint.bin and DIR/model.json.  gen_load finds
 * the checkpoint through ckpt_set's checks, reads the record and joins the
 * stages' parameter buffers: stage buffers concatenated in stage order
 * are the whole-model buffer (kernels/cpu/llama.h), so a checkpoint from
 * any schedule and any stage split loads the same way.
 *
 * Decoding runs one token at a time through the model as one stage.  With
 * the cache (the default), every layer keeps the keys and values of the
 * positions seen so far, so a new token costs one row of every matmul plus
 * an attention over the cached rows.  Without it (use_cache 0), every new
 * token reruns the training forward, llama_stage_forward, on the whole
 * prefix: an independent path through the same kernels, which is what makes
 * it a check of the cache.
 *
 * CONTEXT.  The model was trained on windows of seq_len tokens and RoPE
 * encodes absolute positions inside the window.  Past the context the
 * conditioning is cropped to the last seq_len tokens, as nanoGPT's
 * generate does (idx[:, -block_size:]): the window is run afresh from
 * position 0 for every new token, because dropping the oldest token
 * changes every hidden state after it, so no cached key or value can be
 * kept.  Up to the context the KV cache is used as before; past it each
 * token costs one training forward of the seq_len-token window.  A prompt
 * longer than the context is cropped the same way.  With max_context set,
 * gen_run instead refuses a request that does not fit (a clear message,
 * nothing generated), which was the only behaviour before; docs/generate.md
 * says more.
 *
 * Sampling: temperature 0 is greedy (argmax, ties to the smaller token
 * id); otherwise softmax(logits / T), optionally cut to the top-k tokens
 * and to the smallest set whose probability reaches top-p, renormalised,
 * and drawn with the runtime's seeded xoshiro256** (rng.h): the same seed
 * gives the same text.
 *
 * Workload: shakespeare-char (6×384, T=256) or tiny models, up to a few
 * hundred tokens; one gen_model is used by one thread at a time.
 */
#ifndef ZB_RUNTIME_GENERATE_H
#define ZB_RUNTIME_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "src/err.h"
#include "src/model.h"

#define GEN_MODEL_FILE "model.json"      /* the older layout's model record */
#define GEN_CKPT_FILE "checkpoint.bin"   /* the older layout's one-process checkpoint */

/* A model loaded for generation (opaque). */
typedef struct gen_model gen_model;

/* Options of one generation. */
typedef struct gen_opts {
    int n_tokens;       /* new tokens to produce (>= 0) */
    double temperature; /* 0: greedy; > 0: sampling temperature */
    int top_k;          /* keep the k most likely tokens; 0: all */
    double top_p;       /* nucleus: smallest set reaching p; 1: all */
    uint64_t seed;      /* sampling seed */
    int use_cache;      /* 1: KV cache; 0: rerun the training forward on the prefix */
    int max_context;    /* 1: refuse prompt + n_tokens beyond seq_len; 0: crop the
                         * context to the last seq_len tokens and go on */
} gen_opts;

/* What a generation did. */
typedef struct gen_result {
    int n_new;           /* new tokens produced */
    int n_cropped;       /* of them, tokens drawn from a context cropped to the
                          * last seq_len tokens (0 when everything fit) */
    double seconds;      /* wall time from the first prompt token to the last new one */
    double tokens_per_s; /* n_new / seconds */
} gen_result;

/* Receives the bytes of each new token as it is produced (the CLI writes
 * and flushes them). */
typedef void (*gen_emit_fn)(void *ctx, const char *bytes, size_t n);

/* Fills o with defaults: 100 tokens, temperature 0.8, top-k 0, top-p 1,
 * seed 1, cache on, context cropped (max_context 0). */
void gen_opts_default(gen_opts *o);

/* Writes dir/model.json, the older layout's model record, for model m and
 * the vocabulary chars[0..vocab) atomically (temporary file, then
 * rename); for tests and tools that make such a directory.  Returns 0 or
 * -1 with err. */
int gen_write_model_file(const char *dir, const zb_model *m, const unsigned char *chars,
                         int vocab, zb_err *err);

/* Loads dir's checkpoint (runtime/ckpt_set.h: ckptset_open, the same
 * checks as a resume) and its model record.  Returns 0 and a new model
 * in *out (free with gen_free), or -1 with err set (missing or malformed
 * files, parts that disagree with the manifest, a checkpoint whose
 * parameters do not match the model). */
int gen_load(const char *dir, gen_model **out, zb_err *err);

/* Frees g; NULL is fine. */
void gen_free(gen_model *g);

/* The loaded model (vocab and seq_len as trained). */
const zb_model *gen_model_config(const gen_model *g);

/* Parameters of the loaded model. */
size_t gen_param_count(const gen_model *g);

struct llama_stage;

/* The loaded weights, for exporters (runtime/hf_weights.h): the
 * whole-model buffer [gen_param_count] and its layout, one stage holding
 * every layer, the embedding and the head (kernels/cpu/llama.h), and the
 * byte of each token id [vocab]. */
const float *gen_model_params(const gen_model *g);
const struct llama_stage *gen_model_layout(const gen_model *g);
const unsigned char *gen_model_chars(const gen_model *g);

/* Token ids of text (bytes outside the vocabulary are an error naming the
 * first one).  ids holds len entries.  Returns 0 or -1 with err. */
int gen_encode(const gen_model *g, const char *text, size_t len, int32_t *ids, zb_err *err);

/* The byte of token id. */
char gen_decode(const gen_model *g, int32_t id);

/* Logits [vocab] of the position after tokens[0..n), with the cache
 * (fed token by token) or with the training forward on the prefix.  For
 * tests that compare the two.  Returns 0 or -1 with err (n outside
 * 1..seq_len, out of memory). */
int gen_logits(gen_model *g, const int32_t *tokens, int n, int use_cache, float *logits,
               zb_err *err);

/* Checks a request before anything is generated: the options' ranges,
 * and with o->max_context that the prompt (prompt_len bytes; 0 counts as
 * the one-token default) and o->n_tokens fit in the context.  Returns 0
 * or -1 with err saying what to ask for instead. */
int gen_check_request(const gen_model *g, size_t prompt_len, const gen_opts *o, zb_err *err);

/* Generates o->n_tokens after the prompt, calling emit for each new token.
 * An empty prompt starts from "\n" when the vocabulary has it, else from
 * token 0.  Each token is drawn from the logits of the last seq_len tokens
 * at most (see CONTEXT above).  Refuses (-1, err, nothing emitted) prompts
 * with bytes outside the vocabulary and what gen_check_request refuses.
 * Fills *res. */
int gen_run(gen_model *g, const char *prompt, size_t prompt_len, const gen_opts *o,
            gen_emit_fn emit, void *ctx, gen_result *res, zb_err *err);

#endif
