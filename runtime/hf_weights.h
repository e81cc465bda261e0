/*
 * hf_weights.h: zbsched checkpoints in and out of Hugging Face's layout.
 *
 * Export turns a checkpoint directory of `zbsched run --checkpoint` (any
 * schedule, any split; read with gen_load, runtime/generate.h) into a
 * directory that transformers loads as LlamaForCausalLM:
 *
 *   config.json            LlamaConfig: hidden_size, intermediate_size,
 *                          num_hidden_layers, num_attention_heads,
 *                          num_key_value_heads, rope_theta, rms_norm_eps
 *                          1e-5, vocab_size, max_position_embeddings (the
 *                          trained context), tie_word_embeddings false, no
 *                          BOS/EOS (a character model has neither)
 *   model.safetensors      transformers' tensor names
 *                          (model.embed_tokens.weight, model.layers.N.
 *                          self_attn.q_proj.weight, ..., lm_head.weight)
 *   tokenizer.json         the character vocabulary as a tokenizers BPE
 *   tokenizer_config.json  model with no merges (every character a token),
 *                          decoded by fusing the tokens
 *
 * Two conventions differ and are converted:
 *   - zbsched stores a linear layer's weight as [in, out] (Y = X·W),
 *     torch as [out, in]: every matrix is transposed;
 *   - zbsched's RoPE rotates interleaved pairs (x[2i], x[2i+1]) of each
 *     head (Meta's convention, kernels/cpu/llama.h), transformers'
 *     rotate_half rotates (x[i], x[i + hd/2]).  The two agree when each
 *     head's q and k output features are reordered: transformers' feature
 *     j < hd/2 is zbsched's 2j and feature hd/2 + j is zbsched's 2j + 1.
 *     Attention scores are dot products over a head, which the same
 *     reordering of q and k leaves unchanged; v and o are not touched.
 *
 * Import reads the same layout (F32 or BF16 safetensors, one file) into a
 * checkpoint directory: a trainer of the caller's schedule and split is
 * created (so that `run FILE --resume` of that schedule continues from it,
 * and `generate` reads it as any checkpoint), its parameters are
 * overwritten with the file's, and it is saved at step 0 with fresh AdamW
 * moments.  Refused in one line: another architecture (bias, tied head, an
 * eps other than 1e-5, RoPE scaling, a head_dim other than hidden/heads,
 * sharded weights), a missing, extra or misshapen tensor, a tokenizer that
 * is not one character per token in byte order (zbsched's vocabulary is
 * the sorted bytes of the text).
 *
 * Workload: the tiny and shakespeare-char presets (a few MB); the whole
 * model is held in memory twice during a conversion.
 */
#ifndef ZB_RUNTIME_HF_WEIGHTS_H
#define ZB_RUNTIME_HF_WEIGHTS_H

#include <stdint.h>

#include "runtime/safetensors.h"
#include "runtime/trainer.h"
#include "src/err.h"
#include "src/sched.h"

/* Writes ckpt_dir's newest checkpoint as a Hugging Face directory out_dir
 * (created if missing; the four files replaced atomically) with weights of
 * dtype.  Returns 0, or -1 with err set (an unreadable checkpoint, a model
 * transformers' Llama cannot express: memory layers, a GPT-style MLP, a
 * tied head; a vocabulary byte outside ASCII, which a character
 * tokenizer of Unicode strings cannot hold). */
int hf_export(const char *ckpt_dir, const char *out_dir, st_dtype dtype, zb_err *err);

/* Options of an import. */
typedef struct hf_import_opts {
    const sched_t *sched;        /* schedule the checkpoint is for (its stages decide the
                                  * split), or NULL: one device, one stage */
    const int *layers_per_stage; /* [sched's S] the plan's split, or NULL: the even split */
    uint64_t seed;               /* seeds the data generator state saved with it */
} hf_import_opts;

/* Reads the Hugging Face directory hf_dir into a new checkpoint directory
 * out_dir (created if missing; refused when it already holds a
 * checkpoint).  Returns 0, or -1 with err set. */
int hf_import(const char *hf_dir, const char *out_dir, const hf_import_opts *o, zb_err *err);

/* Saves trainer t as a checkpoint directory dir (runtime/ckpt_set.h: one
 * part and the manifest with the model record of the vocabulary
 * chars[0..vocab), no run record), what `run --resume` and `generate`
 * read.  dir is created if missing and must not hold a
 * checkpoint already (a run's state is never overwritten by this).
 * Returns 0 or -1 with err set. */
int hf_save_checkpoint_dir(const trainer *t, const unsigned char *chars, int vocab,
                           const char *dir, zb_err *err);

#endif
