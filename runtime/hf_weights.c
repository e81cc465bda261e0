/*
 * hf_weights.c: Hugging Face directories to and from zbsched checkpoints
 * (hf_weights.h).
 *
 * One table drives both directions: for every kind of zbsched tensor its
 * transformers name, whether it is transposed, and whether its output
 * features are reordered for rotate_half (q: the query heads, k: the KV
 * heads).  hf_convert applies the table one way or the other, so export
 * and import cannot drift apart; the round-trip test holds them to it.
 */
#include "runtime/hf_weights.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "kernels/cpu/llama.h"
#include "runtime/ckpt_set.h"
#include "runtime/data.h"
#include "runtime/generate.h"
#include "src/input.h"
#include "src/sched_io.h"

/* Which output features a tensor reorders. */
enum { HF_PERM_NONE = 0, HF_PERM_Q = 1, HF_PERM_K = 2 };

/* transformers' name of tensor t into buf, its transposition and its
 * reordering; -1 for a kind transformers' Llama has no place for. */
static int hf_name(const llama_tensor *t, char *buf, size_t cap, int *transpose, int *perm)
{
    static const struct {
        const char *name; /* after "model.layers.N." */
        int transpose, perm;
    } per_layer[LLAMA_T_COUNT] = {
        [LLAMA_T_ATTN_NORM] = { "input_layernorm.weight", 0, HF_PERM_NONE },
        [LLAMA_T_WQ] = { "self_attn.q_proj.weight", 1, HF_PERM_Q },
        [LLAMA_T_WK] = { "self_attn.k_proj.weight", 1, HF_PERM_K },
        [LLAMA_T_WV] = { "self_attn.v_proj.weight", 1, HF_PERM_NONE },
        [LLAMA_T_WO] = { "self_attn.o_proj.weight", 1, HF_PERM_NONE },
        [LLAMA_T_MLP_NORM] = { "post_attention_layernorm.weight", 0, HF_PERM_NONE },
        [LLAMA_T_W1] = { "mlp.gate_proj.weight", 1, HF_PERM_NONE },
        [LLAMA_T_W3] = { "mlp.up_proj.weight", 1, HF_PERM_NONE },
        [LLAMA_T_W2] = { "mlp.down_proj.weight", 1, HF_PERM_NONE },
    };
    *transpose = 0;
    *perm = HF_PERM_NONE;
    switch (t->kind) {
    case LLAMA_T_EMBEDDING: snprintf(buf, cap, "model.embed_tokens.weight"); return 0;
    case LLAMA_T_FINAL_NORM: snprintf(buf, cap, "model.norm.weight"); return 0;
    case LLAMA_T_LM_HEAD:
        snprintf(buf, cap, "lm_head.weight");
        *transpose = 1;
        return 0;
    default: break;
    }
    if (t->kind < 0 || t->kind >= LLAMA_T_COUNT || !per_layer[t->kind].name)
        return -1;
    snprintf(buf, cap, "model.layers.%d.%s", t->layer, per_layer[t->kind].name);
    *transpose = per_layer[t->kind].transpose;
    *perm = per_layer[t->kind].perm;
    return 0;
}

/* zbsched's output feature behind transformers' feature o of a tensor
 * whose heads are hd wide: within a head, j < hd/2 is 2j and hd/2 + j is
 * 2j + 1 (see the header). */
static int perm_src(int o, int hd)
{
    int h = o / hd, j = o % hd, half = hd / 2;
    return h * hd + (j < half ? 2 * j : 2 * (j - half) + 1);
}

/* Converts one tensor between layouts: to_hf 1 fills hf from ours, 0 fills
 * ours from hf.  ours is [rows, cols] (in, out for a matrix); hf is
 * [cols, rows] when transposed, else the same. */
static void hf_convert(const llama_tensor *t, int transpose, int perm, int hd, float *ours,
                       float *hf, int to_hf)
{
    size_t rows = (size_t)t->rows, cols = (size_t)t->cols;
    if (!transpose) {
        if (to_hf)
            memcpy(hf, ours, sizeof *hf * t->count);
        else
            memcpy(ours, hf, sizeof *hf * t->count);
        return;
    }
    for (size_t o = 0; o < cols; o++) {
        size_t src = perm ? (size_t)perm_src((int)o, hd) : o;
        for (size_t i = 0; i < rows; i++) {
            if (to_hf)
                hf[o * rows + i] = ours[i * cols + src];
            else
                ours[i * cols + src] = hf[o * rows + i];
        }
    }
}

static char *join(const char *dir, const char *file)
{
    size_t n = strlen(dir) + strlen(file) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, file);
    return p;
}

/* Creates dir unless it is a directory already. */
static int make_dir(const char *dir, zb_err *err)
{
    struct stat st;
    if (stat(dir, &st) == 0)
        return S_ISDIR(st.st_mode) ? 0 : zb_fail(err, "%s: not a directory", dir);
    if (mkdir(dir, 0777) != 0)
        return zb_fail(err, "%s: cannot create the directory: %s", dir, strerror(errno));
    return 0;
}

/* Writes cJSON o to dir/name atomically, with a final newline; frees o. */
static int write_json(const char *dir, const char *name, cJSON *o, zb_err *err)
{
    char *text = o ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    char *path = join(dir, name);
    int rc = -1;
    if (!text || !path) {
        zb_fail(err, "out of memory");
    } else {
        size_t n = strlen(text);
        char *t2 = realloc(text, n + 2);
        if (t2) {
            text = t2;
            text[n] = '\n';
            text[n + 1] = '\0';
            rc = zb_write_atomic(path, text, n + 1, err);
        } else {
            zb_fail(err, "out of memory");
        }
    }
    free(text);
    free(path);
    return rc;
}

static cJSON *hf_config(const zb_model *m, st_dtype dtype)
{
    cJSON *o = cJSON_CreateObject(), *arch = cJSON_CreateStringArray((const char *[]){ "LlamaForCausalLM" }, 1);
    if (!o || !arch) {
        cJSON_Delete(o);
        cJSON_Delete(arch);
        return NULL;
    }
    cJSON_AddItemToObject(o, "architectures", arch);
    cJSON_AddStringToObject(o, "model_type", "llama");
    cJSON_AddNumberToObject(o, "hidden_size", m->d_model);
    cJSON_AddNumberToObject(o, "intermediate_size", m->d_ff);
    cJSON_AddNumberToObject(o, "num_hidden_layers", m->n_layers);
    cJSON_AddNumberToObject(o, "num_attention_heads", m->n_heads);
    cJSON_AddNumberToObject(o, "num_key_value_heads", m->n_kv_heads);
    cJSON_AddNumberToObject(o, "head_dim", m->d_model / m->n_heads);
    cJSON_AddStringToObject(o, "hidden_act", "silu");
    cJSON_AddNumberToObject(o, "max_position_embeddings", m->seq_len);
    cJSON_AddNumberToObject(o, "rms_norm_eps", 1e-5);
    cJSON_AddNumberToObject(o, "rope_theta", m->rope_theta);
    cJSON_AddNullToObject(o, "rope_scaling");
    cJSON_AddFalseToObject(o, "attention_bias");
    cJSON_AddNumberToObject(o, "attention_dropout", 0);
    cJSON_AddFalseToObject(o, "mlp_bias");
    cJSON_AddFalseToObject(o, "tie_word_embeddings");
    cJSON_AddNumberToObject(o, "vocab_size", m->vocab);
    /* a character model has no BOS/EOS: generation runs its full length */
    cJSON_AddNullToObject(o, "bos_token_id");
    cJSON_AddNullToObject(o, "eos_token_id");
    cJSON_AddNullToObject(o, "pad_token_id");
    cJSON_AddNumberToObject(o, "initializer_range", 0.02);
    cJSON_AddTrueToObject(o, "use_cache");
    cJSON_AddStringToObject(o, "torch_dtype", dtype == ST_BF16 ? "bfloat16" : "float32");
    cJSON_AddStringToObject(o, "zbsched_model", m->name);
    return o;
}

/* tokenizer.json: a BPE over the characters with no merges, so each
 * character is its own token, no normalizer or pre-tokenizer (spaces and
 * newlines are characters like any other), decoded by fusing the tokens. */
static cJSON *hf_tokenizer(const unsigned char *chars, int vocab)
{
    cJSON *o = cJSON_CreateObject(), *model = cJSON_CreateObject(), *v = cJSON_CreateObject();
    cJSON *dec = cJSON_CreateObject();
    if (!o || !model || !v || !dec) {
        cJSON_Delete(o);
        cJSON_Delete(model);
        cJSON_Delete(v);
        cJSON_Delete(dec);
        return NULL;
    }
    for (int i = 0; i < vocab; i++) {
        char key[2] = { (char)chars[i], 0 };
        cJSON_AddNumberToObject(v, key, i);
    }
    cJSON_AddStringToObject(o, "version", "1.0");
    cJSON_AddNullToObject(o, "truncation");
    cJSON_AddNullToObject(o, "padding");
    cJSON_AddItemToObject(o, "added_tokens", cJSON_CreateArray());
    cJSON_AddNullToObject(o, "normalizer");
    cJSON_AddNullToObject(o, "pre_tokenizer");
    cJSON_AddNullToObject(o, "post_processor");
    cJSON_AddStringToObject(dec, "type", "Fuse");
    cJSON_AddItemToObject(o, "decoder", dec);
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddNullToObject(model, "dropout");
    cJSON_AddNullToObject(model, "unk_token");
    cJSON_AddNullToObject(model, "continuing_subword_prefix");
    cJSON_AddNullToObject(model, "end_of_word_suffix");
    cJSON_AddFalseToObject(model, "fuse_unk");
    cJSON_AddFalseToObject(model, "byte_fallback");
    cJSON_AddFalseToObject(model, "ignore_merges");
    cJSON_AddItemToObject(model, "vocab", v);
    cJSON_AddItemToObject(model, "merges", cJSON_CreateArray());
    cJSON_AddItemToObject(o, "model", model);
    return o;
}

static cJSON *hf_tokenizer_config(const zb_model *m)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "tokenizer_class", "PreTrainedTokenizerFast");
    /* decode must not drop the spaces before punctuation of the text */
    cJSON_AddFalseToObject(o, "clean_up_tokenization_spaces");
    cJSON_AddNumberToObject(o, "model_max_length", m->seq_len);
    cJSON_AddNullToObject(o, "bos_token");
    cJSON_AddNullToObject(o, "eos_token");
    return o;
}

int hf_export(const char *ckpt_dir, const char *out_dir, st_dtype dtype, zb_err *err)
{
    gen_model *g = NULL;
    if (gen_load(ckpt_dir, &g, err) != 0)
        return -1;
    const zb_model *m = gen_model_config(g);
    const llama_stage *lay = gen_model_layout(g);
    const unsigned char *chars = gen_model_chars(g);
    int rc = -1, n = lay->n_tensors;
    st_entry *e = calloc((size_t)n, sizeof *e);
    char (*names)[96] = calloc((size_t)n, sizeof *names);
    float **bufs = calloc((size_t)n, sizeof *bufs);
    if (!e || !names || !bufs) {
        zb_fail(err, "out of memory");
        goto out;
    }
    if (m->memory.n_layers > 0) {
        zb_fail(err, "%s: model %s has product-key memory layers, which transformers' "
                "LlamaForCausalLM has no place for", ckpt_dir, m->name);
        goto out;
    }
    if (!m->swiglu || m->tied_embedding) {
        zb_fail(err, "%s: model %s is not Llama-shaped (SwiGLU, untied head)", ckpt_dir, m->name);
        goto out;
    }
    for (int i = 0; i < m->vocab; i++)
        if (chars[i] >= 0x80) {
            zb_fail(err, "%s: the vocabulary holds byte 0x%02x, which is not ASCII; a character "
                    "tokenizer of Unicode strings cannot hold a lone byte", ckpt_dir, chars[i]);
            goto out;
        }
    const float *params = gen_model_params(g);
    int hd = lay->head_dim;
    for (int i = 0; i < n; i++) {
        const llama_tensor *t = &lay->tensors[i];
        int transpose, perm;
        if (hf_name(t, names[i], sizeof names[i], &transpose, &perm) != 0) {
            zb_fail(err, "%s: tensor %s has no place in transformers' Llama", ckpt_dir, t->name);
            goto out;
        }
        if (!(bufs[i] = malloc(sizeof(float) * (t->count ? t->count : 1)))) {
            zb_fail(err, "out of memory");
            goto out;
        }
        hf_convert(t, transpose, perm, hd, (float *)(params + t->offset), bufs[i], 1);
        e[i].name = names[i];
        e[i].data = bufs[i];
        if (t->rows == 1 && t->kind != LLAMA_T_EMBEDDING && t->kind != LLAMA_T_LM_HEAD) {
            e[i].rows = 0; /* a norm's gain: a vector */
            e[i].cols = t->cols;
        } else {
            e[i].rows = transpose ? t->cols : t->rows;
            e[i].cols = transpose ? t->rows : t->cols;
        }
    }
    char *st_path = NULL;
    if (make_dir(out_dir, err) != 0)
        goto out;
    if (!(st_path = join(out_dir, "model.safetensors"))) {
        zb_fail(err, "out of memory");
        goto out;
    }
    rc = st_write(st_path, e, n, dtype, err);
    free(st_path);
    if (rc == 0)
        rc = write_json(out_dir, "config.json", hf_config(m, dtype), err);
    if (rc == 0)
        rc = write_json(out_dir, "tokenizer.json", hf_tokenizer(chars, m->vocab), err);
    if (rc == 0)
        rc = write_json(out_dir, "tokenizer_config.json", hf_tokenizer_config(m), err);
out:
    for (int i = 0; bufs && i < n; i++)
        free(bufs[i]);
    free(bufs);
    free(names);
    free(e);
    gen_free(g);
    return rc;
}

/* ---- import ------------------------------------------------------------ */

/* Reads and parses dir/name.  NULL with err set when missing or not JSON. */
static cJSON *read_json(const char *dir, const char *name, zb_err *err)
{
    char *path = join(dir, name), *text = NULL;
    size_t len = 0;
    if (!path) {
        zb_fail(err, "out of memory");
        return NULL;
    }
    cJSON *o = NULL;
    if (zb_read_file(path, &text, &len, err) == 0) {
        o = cJSON_ParseWithLength(text, len);
        if (!o)
            zb_fail(err, "%s: not JSON", path);
        else if (zb_json_check_duplicates(o, err) != 0) {
            zb_wrap(err, "%s: ", path);
            cJSON_Delete(o);
            o = NULL;
        }
    }
    free(text);
    free(path);
    return o;
}

/* config[key] as a whole number in [lo, hi], or def when absent (def < 0:
 * required). */
static int cfg_int(const cJSON *c, const char *key, long lo, long hi, long def, int *out,
                   zb_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
    if (!v || cJSON_IsNull(v)) {
        if (def < 0)
            return zb_fail(err, "config.json has no %s", key);
        *out = (int)def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo ||
        v->valuedouble > hi)
        return zb_fail(err, "config.json's %s is not a whole number in %ld..%ld", key, lo, hi);
    *out = (int)v->valuedouble;
    return 0;
}

/* A bool field that must be false (or absent) for zbsched's Llama. */
static int cfg_false(const cJSON *c, const char *key, const char *why, zb_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
    if (v && !cJSON_IsFalse(v) && !cJSON_IsNull(v))
        return zb_fail(err, "config.json sets %s; %s", key, why);
    return 0;
}

/* The model config.json describes, checked against what zbsched's kernels
 * compute. */
static int read_config(const cJSON *c, zb_model *m, zb_err *err)
{
    memset(m, 0, sizeof *m);
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(c, "model_type");
    if (!cJSON_IsString(mt) || strcmp(mt->valuestring, "llama"))
        return zb_fail(err, "config.json's model_type is not \"llama\"");
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(c, "hidden_act");
    if (act && (!cJSON_IsString(act) || strcmp(act->valuestring, "silu")))
        return zb_fail(err, "config.json's hidden_act is not \"silu\" (zbsched's MLP is SwiGLU)");
    if (cfg_false(c, "attention_bias", "zbsched's linear layers have no bias", err) ||
        cfg_false(c, "mlp_bias", "zbsched's linear layers have no bias", err) ||
        cfg_false(c, "tie_word_embeddings", "zbsched's LM head is its own matrix", err))
        return -1;
    const cJSON *eps = cJSON_GetObjectItemCaseSensitive(c, "rms_norm_eps");
    if (eps && (!cJSON_IsNumber(eps) || fabs(eps->valuedouble - 1e-5) > 1e-12))
        return zb_fail(err, "config.json's rms_norm_eps is not 1e-5, the epsilon of zbsched's "
                       "RMSNorm");
    const cJSON *scaling = cJSON_GetObjectItemCaseSensitive(c, "rope_scaling");
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(c, "rope_parameters");
    const cJSON *rtype = cJSON_IsObject(scaling) ? cJSON_GetObjectItemCaseSensitive(scaling, "rope_type")
                         : cJSON_IsObject(rp)    ? cJSON_GetObjectItemCaseSensitive(rp, "rope_type")
                                                 : NULL;
    if ((scaling && !cJSON_IsNull(scaling) && !cJSON_IsObject(scaling)) ||
        (rtype && (!cJSON_IsString(rtype) || strcmp(rtype->valuestring, "default"))) ||
        (cJSON_IsObject(scaling) && !rtype))
        return zb_fail(err, "config.json scales RoPE (rope_scaling); zbsched's RoPE is the "
                       "plain one");
    const cJSON *theta = cJSON_GetObjectItemCaseSensitive(c, "rope_theta");
    if (!theta && cJSON_IsObject(rp))
        theta = cJSON_GetObjectItemCaseSensitive(rp, "rope_theta");
    m->rope_theta = 10000;
    if (theta) {
        if (!cJSON_IsNumber(theta) || !(theta->valuedouble > 0) || !isfinite(theta->valuedouble))
            return zb_fail(err, "config.json's rope_theta is not a positive number");
        m->rope_theta = theta->valuedouble;
    }
    if (cfg_int(c, "hidden_size", 1, 1 << 20, -1, &m->d_model, err) ||
        cfg_int(c, "intermediate_size", 1, 1 << 22, -1, &m->d_ff, err) ||
        cfg_int(c, "num_hidden_layers", 1, 1 << 16, -1, &m->n_layers, err) ||
        cfg_int(c, "num_attention_heads", 1, 1 << 16, -1, &m->n_heads, err) ||
        cfg_int(c, "num_key_value_heads", 1, 1 << 16, m->n_heads, &m->n_kv_heads, err) ||
        cfg_int(c, "max_position_embeddings", 1, 1 << 24, -1, &m->seq_len, err) ||
        cfg_int(c, "vocab_size", 1, 256, -1, &m->vocab, err))
        return -1;
    int hd = 0;
    if (m->d_model % m->n_heads == 0 &&
        cfg_int(c, "head_dim", 1, 1 << 20, m->d_model / m->n_heads, &hd, err))
        return -1;
    if (m->d_model % m->n_heads || hd != m->d_model / m->n_heads)
        return zb_fail(err, "config.json's head_dim is not hidden_size / num_attention_heads, "
                       "as zbsched's attention has it");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(c, "zbsched_model");
    snprintf(m->name, sizeof m->name, "%s",
             cJSON_IsString(name) && name->valuestring[0] ? name->valuestring : "hf-llama");
    m->micro_batch = 1;
    m->swiglu = 1;
    m->tied_embedding = 0;
    m->dtype = ZB_FP32;
    return model_check(m, err);
}

/* The characters of tokenizer.json's vocabulary, one per id, into
 * chars[vocab]; they must be single ASCII characters in byte order. */
static int read_vocab(const cJSON *tok, int vocab, unsigned char *chars, zb_err *err)
{
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(tok, "model");
    const cJSON *v = cJSON_IsObject(model) ? cJSON_GetObjectItemCaseSensitive(model, "vocab") : NULL;
    if (!cJSON_IsObject(v))
        return zb_fail(err, "tokenizer.json has no model.vocab object");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(tok, "added_tokens");
    if (cJSON_IsArray(added) && cJSON_GetArraySize(added) > 0)
        return zb_fail(err, "tokenizer.json adds special tokens; zbsched's vocabulary is "
                       "characters only");
    if (cJSON_GetArraySize(v) != vocab)
        return zb_fail(err, "tokenizer.json has %d tokens and config.json's vocab_size is %d",
                       cJSON_GetArraySize(v), vocab);
    int seen[256] = { 0 };
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        const unsigned char *k = (const unsigned char *)e->string;
        if (!k[0] || k[1] || k[0] >= 0x80)
            return zb_fail(err, "tokenizer.json's token \"%.20s\" is not one ASCII character; "
                           "zbsched reads character vocabularies", e->string);
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 ||
            e->valuedouble >= vocab || seen[(int)e->valuedouble])
            return zb_fail(err, "tokenizer.json's ids are not 0..%d, each once", vocab - 1);
        seen[(int)e->valuedouble] = 1;
        chars[(int)e->valuedouble] = k[0];
    }
    for (int i = 1; i < vocab; i++)
        if (chars[i] <= chars[i - 1])
            return zb_fail(err, "tokenizer.json's characters are not in byte order (id %d is "
                           "0x%02x after 0x%02x); zbsched's vocabulary is the sorted bytes of "
                           "its text", i, chars[i], chars[i - 1]);
    return 0;
}

/* Fills t's stages from the safetensors file; every tensor of the file
 * must be used (the rotary tables some exporters add excepted). */
static int fill_params(trainer *t, const st_file *f, zb_err *err)
{
    unsigned char *used = calloc((size_t)(f->n > 0 ? f->n : 1), 1);
    float *tmp = NULL;
    size_t tmp_cap = 0;
    int rc = 0;
    if (!used)
        return zb_fail(err, "out of memory");
    for (int s = 0; s < trainer_stage_count(t) && rc == 0; s++) {
        size_t np;
        float *params = trainer_stage_params(t, s, &np);
        const llama_stage *lay = trainer_stage_layout(t, s);
        for (int i = 0; i < lay->n_tensors && rc == 0; i++) {
            const llama_tensor *lt = &lay->tensors[i];
            char name[96];
            int transpose, perm;
            if (hf_name(lt, name, sizeof name, &transpose, &perm) != 0) {
                rc = zb_fail(err, "tensor %s has no place in transformers' Llama", lt->name);
                break;
            }
            const st_tensor *ht = st_find(f, name);
            if (!ht) {
                rc = zb_fail(err, "model.safetensors has no tensor '%s'", name);
                break;
            }
            int vec = lt->rows == 1 && lt->kind != LLAMA_T_EMBEDDING && lt->kind != LLAMA_T_LM_HEAD;
            int64_t want0 = transpose ? lt->cols : lt->rows, want1 = transpose ? lt->rows : lt->cols;
            if (vec ? (ht->n_dims != 1 || ht->shape[0] != lt->cols)
                    : (ht->n_dims != 2 || ht->shape[0] != want0 || ht->shape[1] != want1)) {
                char shape[64];
                size_t k = 0;
                for (int d = 0; d < ht->n_dims && k + 24 < sizeof shape; d++)
                    k += (size_t)snprintf(shape + k, sizeof shape - k, "%s%lld", d ? ", " : "",
                                          (long long)ht->shape[d]);
                shape[k] = '\0';
                if (vec)
                    rc = zb_fail(err, "tensor '%s' has shape [%s], the config needs [%d]", name,
                                 shape, lt->cols);
                else
                    rc = zb_fail(err, "tensor '%s' has shape [%s], the config needs [%lld, %lld]",
                                 name, shape, (long long)want0, (long long)want1);
                break;
            }
            if (tmp_cap < lt->count) {
                free(tmp);
                tmp_cap = lt->count;
                if (!(tmp = malloc(sizeof *tmp * tmp_cap))) {
                    rc = zb_fail(err, "out of memory");
                    break;
                }
            }
            if ((rc = st_read_f32(f, ht, tmp, err)) != 0)
                break;
            used[ht - f->t] = 1;
            hf_convert(lt, transpose, perm, lay->head_dim, params + lt->offset, tmp, 0);
        }
    }
    for (int i = 0; i < f->n && rc == 0; i++) {
        const char *nm = f->t[i].name;
        size_t len = strlen(nm), k = strlen("rotary_emb.inv_freq");
        if (!used[i] && !(len >= k && !strcmp(nm + len - k, "rotary_emb.inv_freq")))
            rc = zb_fail(err, "model.safetensors has tensor '%s', which zbsched's Llama of this "
                         "config has no place for", nm);
    }
    free(tmp);
    free(used);
    return rc;
}

int hf_save_checkpoint_dir(const trainer *t, const unsigned char *chars, int vocab,
                           const char *dir, zb_err *err)
{
    if (make_dir(dir, err) != 0)
        return -1;
    /* any checkpoint there, of either layout (runtime/ckpt_set.h) */
    ckptset_view v;
    zb_err ignored = { { 0 } };
    int found = ckptset_open(dir, &v, &ignored);
    if (found > 0) {
        const char *what = strrchr(v.what, '/') ? strrchr(v.what, '/') + 1 : v.what;
        zb_fail(err, "%s already holds a checkpoint (%s); give a new directory", dir, what);
        ckptset_view_free(&v);
        return -1;
    }
    if (found < 0)
        return zb_fail(err, "%s already holds a checkpoint (%s); give a new directory", dir,
                       ignored.msg);
    /* one committed unit: the weights and the model record, no run record
     * (no run trained these) */
    cJSON *model = ckptset_model_record(trainer_model(t), chars, vocab);
    if (!model)
        return zb_fail(err, "out of memory");
    ckptset_records rec = { model, NULL };
    int rc = ckptset_save(t, dir, &rec, NULL, NULL, err);
    cJSON_Delete(model);
    return rc;
}

/* A text whose vocabulary is exactly chars[0..vocab) and long enough for
 * the loader's two splits at context ctx: the trainer needs a loader, and
 * an import has weights but no text. */
static int vocab_loader(const unsigned char *chars, int vocab, int ctx, zb_data **out, zb_err *err)
{
    size_t len = (size_t)ctx * 12 + 24 + (size_t)vocab;
    char *text = malloc(len);
    if (!text)
        return zb_fail(err, "out of memory");
    for (size_t i = 0; i < len; i++)
        text[i] = (char)chars[i % (size_t)vocab];
    int rc = data_from_text(text, len, ctx, out, err);
    free(text);
    return rc;
}

int hf_import(const char *hf_dir, const char *out_dir, const hf_import_opts *o, zb_err *err)
{
    zb_model m;
    unsigned char chars[256];
    cJSON *cfg = read_json(hf_dir, "config.json", err), *tok = NULL;
    st_file f = { .fd = -1 };
    sched_t *own = NULL;
    zb_data *d = NULL;
    trainer *t = NULL;
    int rc = -1;
    if (!cfg)
        goto out;
    if (read_config(cfg, &m, err) != 0) {
        zb_wrap(err, "%s/", hf_dir);
        goto out;
    }
    if (!(tok = read_json(hf_dir, "tokenizer.json", err)))
        goto out;
    if (read_vocab(tok, m.vocab, chars, err) != 0) {
        zb_wrap(err, "%s/", hf_dir);
        goto out;
    }
    char *st_path = join(hf_dir, "model.safetensors");
    char *index = join(hf_dir, "model.safetensors.index.json");
    if (!st_path || !index) {
        free(st_path);
        free(index);
        zb_fail(err, "out of memory");
        goto out;
    }
    int sharded = access(st_path, F_OK) != 0 && access(index, F_OK) == 0;
    free(index);
    if (sharded) {
        free(st_path);
        zb_fail(err, "%s holds sharded weights (model.safetensors.index.json); zbsched reads one "
                "model.safetensors (save_pretrained with a larger max_shard_size)", hf_dir);
        goto out;
    }
    int opened = st_open(st_path, &f, err);
    free(st_path);
    if (opened != 0)
        goto out;
    const sched_t *s = o->sched;
    if (!s) {
        /* one device, one stage, one micro-batch: the split every
         * schedule of one stage shares */
        if (!(own = sched_new(1, 1, 1)) || sched_push(own, 0, OP_F, 0, 0) ||
            sched_push(own, 0, OP_BW, 0, 0)) {
            zb_fail(err, "out of memory");
            goto out;
        }
        own->stage_device[0] = 0;
        s = own;
    }
    if (vocab_loader(chars, m.vocab, m.seq_len, &d, err) != 0)
        goto out;
    trainer_opts to;
    trainer_opts_default(&to);
    to.seed = o->seed;
    to.layers_per_stage = o->sched ? o->layers_per_stage : NULL;
    to.threads = 1;
    if (trainer_create(s, &m, d, &to, &t, err) != 0)
        goto out;
    if (fill_params(t, &f, err) != 0) {
        zb_wrap(err, "%s: ", hf_dir);
        goto out;
    }
    if (trainer_host_sync(t, TRAINER_BUF_PARAMS, err) != 0)
        goto out;
    rc = hf_save_checkpoint_dir(t, d->chars, d->vocab, out_dir, err);
out:
    trainer_free(t);
    data_free(d);
    sched_free(own);
    st_close(&f);
    cJSON_Delete(cfg);
    cJSON_Delete(tok);
    return rc;
}
