/*
 * generate.c: decoding from a checkpoint with a KV cache (generate.h).
 *
 * The cached path is a one-row version of llama.c's layer forward: the
 * same kernels (RMSNorm, kern_rope_row at the token's position, SwiGLU,
 * the memory lookup and bag) on a single row, every product a kern_matvec
 * (one-row GEMMs would repack each weight matrix per call), and an attention of
 * that row's query against the cached keys and values of positions
 * 0..pos (the causal mask is implicit: later positions are not cached
 * yet).  Per layer the cache holds seq_len × kv_dim floats of keys and of
 * values, written once per position and never moved.  The uncached path
 * builds a stage with seq_len = prefix length (parameters do not depend on
 * seq_len) and runs llama_stage_forward on the prefix for every new token,
 * which costs O(prefix) matmul rows per token instead of O(1).
 *
 * Timing covers the prompt (fed through the cache, or the first uncached
 * forward) and every new token, not the loading.
 */
#include "runtime/generate.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/llama.h"
#include "kernels/cpu/memory_layer.h"
#include "kernels/cpu/ops.h"
#include "runtime/checkpoint.h"
#include "runtime/ckpt_set.h"
#include "runtime/rng.h"
#include "src/sched_io.h"

struct gen_model {
    zb_model cfg;             /* the model as trained (vocab from the text) */
    int vocab;                /* tokens */
    unsigned char chars[256]; /* byte of each token id */
    int16_t id_of[256];       /* token id of each byte, -1 when absent */
    llama_stage st;           /* the whole model as one stage */
    float *params;            /* [st.n_params] whole-model buffer */
    /* KV cache: [n_layers][seq_len][kv_dim] keys, then values */
    float *kcache, *vcache;
    /* one-row scratch of the cached step */
    float *x, *n, *q, *k, *v, *att, *h, *a, *b, *hs, *out, *logits;
    float *mq, *mw, *me, *mg, *mu; /* memory layer: query, weights, bag, gate, u */
    int32_t *midx;                 /* memory layer: chosen slots */
    double *scores;                /* [seq_len] attention scores of one head */
};

void gen_opts_default(gen_opts *o)
{
    memset(o, 0, sizeof *o);
    o->n_tokens = 100;
    o->temperature = 0.8;
    o->top_k = 0;
    o->top_p = 1.0;
    o->seed = 1;
    o->use_cache = 1;
}

/* ---- the checkpoint directory ------------------------------------------ */

static char *join_path(const char *dir, const char *file)
{
    size_t n = strlen(dir) + strlen(file) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, file);
    return p;
}

int gen_write_model_file(const char *dir, const zb_model *m, const unsigned char *chars,
                         int vocab, zb_err *err)
{
    cJSON *root = ckptset_model_record(m, chars, vocab);
    char *text = root ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    char *path = join_path(dir, GEN_MODEL_FILE);
    int rc = -1;
    if (!text || !path)
        zb_fail(err, "out of memory");
    else
        rc = zb_write_atomic(path, text, strlen(text), err);
    free(text);
    free(path);
    return rc;
}

/* The model record of dir's checkpoint into g->cfg and the vocabulary. */
static int load_model_record(const ckptset_view *v, gen_model *g, zb_err *err)
{
    if (!v->model)
        return zb_fail(err, "%s holds no model description (written by `zbsched run "
                       "--checkpoint`): %s/%s is missing", v->dir, v->dir, GEN_MODEL_FILE);
    unsigned char chars[256];
    int n = 0;
    const char *where = v->version >= 2 ? v->what : GEN_MODEL_FILE;
    if (ckptset_model_from_record(v->model, where, &g->cfg, chars, &n, err) != 0)
        return -1;
    for (int i = 0; i < 256; i++)
        g->id_of[i] = -1;
    for (int i = 0; i < n; i++) {
        g->chars[i] = chars[i];
        g->id_of[chars[i]] = (int16_t)i;
    }
    g->vocab = n;
    return 0;
}

/* One checkpoint file, read whole (ckpt_read_any). */
typedef struct gen_file {
    ckpt_part *parts; /* its parts, owned */
    int n;            /* how many */
} gen_file;

static void files_free(gen_file *f, int n)
{
    for (int i = 0; f && i < n; i++)
        ckpt_parts_free(f[i].parts, f[i].n);
    free(f);
}

/* The trainer's progress record (part 1) starts with the int64 step. */
static long file_step(const gen_file *f)
{
    int64_t step = -1;
    if (f->n > 1 && f->parts[1].bytes >= sizeof step)
        memcpy(&step, f->parts[1].data, sizeof step);
    return (long)step;
}

/* Reads every part of the view, each checked against the manifest: of
 * its step and, where it records them, of its stages. */
static int read_parts(const ckptset_view *v, gen_file **files_out, zb_err *err)
{
    gen_file *f = calloc((size_t)v->ranks, sizeof *f);
    if (!f)
        return zb_fail(err, "out of memory");
    int rc = 0;
    for (int r = 0; r < v->ranks && rc == 0; r++) {
        rc = ckpt_read_any(v->parts[r], &f[r].parts, &f[r].n, err);
        if (rc == 0 && v->step >= 0 && file_step(&f[r]) != v->step)
            rc = zb_fail(err, "%s: a part of step %ld, but %s says step %ld", v->parts[r],
                         file_step(&f[r]), v->what, v->step);
        if (rc == 0 && v->stages >= 0 && f[r].n != 2 + 4 * v->stages)
            rc = zb_fail(err, "%s: %d parts, but %s records %d stages", v->parts[r], f[r].n,
                         v->what, v->stages);
    }
    if (rc != 0) {
        files_free(f, v->ranks);
        return -1;
    }
    *files_out = f;
    return 0;
}

/* Joins the per-stage parameter parts of dir's checkpoint.  The trainer
 * writes: part 0 metadata, part 1 progress, then per stage s the parts
 * 2+4s (parameters), 3+4s and 4+4s (AdamW moments), 5+4s (step count); a
 * part of a multi-process checkpoint leaves the stages of other ranks
 * empty, so stage s comes from the file whose step count is there. */
static int load_params(const ckptset_view *v, gen_model *g, zb_err *err)
{
    gen_file *files = NULL;
    int n_files = v->ranks;
    const char *path = v->what;
    if (v->parameters >= 0 && (size_t)v->parameters != g->st.n_params)
        return zb_fail(err, "%s: %ld parameters, but its model record describes a model of %zu",
                       path, v->parameters, g->st.n_params);
    if (read_parts(v, &files, err) != 0)
        return -1;
    int n = files[0].n, rc = 0;
    for (int f = 0; f < n_files && rc == 0; f++)
        if (files[f].n < 6 || (files[f].n - 2) % 4 != 0 || files[f].n != n)
            rc = zb_fail(err, "%s: %d parts is not a trainer checkpoint", path, files[f].n);
    int n_stages = (n - 2) / 4;
    size_t have = 0;
    for (int s = 0; rc == 0 && s < n_stages; s++) {
        int from = -1;
        for (int f = 0; f < n_files; f++)
            if (files[f].parts[5 + 4 * s].bytes == sizeof(int64_t)) {
                if (from >= 0) {
                    rc = zb_fail(err, "%s: stage %d is in two of its files", path, s);
                    break;
                }
                from = f;
            }
        if (rc != 0)
            break;
        if (from < 0) {
            rc = zb_fail(err, "%s: stage %d is in none of its files", path, s);
            break;
        }
        const ckpt_part *pt = &files[from].parts[2 + 4 * s];
        if (have + pt->bytes > sizeof(float) * g->st.n_params) {
            have += pt->bytes;
            break;
        }
        memcpy((char *)g->params + have, pt->data, pt->bytes);
        have += pt->bytes;
    }
    if (rc == 0 && have != sizeof(float) * g->st.n_params)
        rc = zb_fail(err, "%s: %zu parameters, but %s describes a model of %zu (another model?)",
                     path, have / sizeof(float), v->version >= 2 ? "its model record"
                                                             : GEN_MODEL_FILE, g->st.n_params);
    for (size_t i = 0; rc == 0 && i < g->st.n_params; i++)
        if (!isfinite(g->params[i]))
            rc = zb_fail(err, "%s: parameter %zu is not finite", path, i);
    files_free(files, n_files);
    return rc;
}

int gen_load(const char *dir, gen_model **out, zb_err *err)
{
    /* the directory's one checkpoint, through the same checks as a
     * resume (runtime/ckpt_set.h) */
    ckptset_view v;
    int found = ckptset_open(dir, &v, err);
    if (found <= 0)
        return found < 0 ? -1
                         : zb_fail(err, "%s holds no checkpoint and no model description (written "
                                   "by `zbsched run --checkpoint`)", dir);
    gen_model *g = calloc(1, sizeof *g);
    if (!g) {
        ckptset_view_free(&v);
        return zb_fail(err, "out of memory");
    }
    if (load_model_record(&v, g, err) != 0 ||
        llama_stage_init(&g->st, &g->cfg, 0, g->cfg.n_layers, 1, 1, err) != 0) {
        ckptset_view_free(&v);
        gen_free(g);
        return -1;
    }
    const zb_model *m = &g->cfg;
    const zb_memory *mm = &m->memory;
    size_t T = (size_t)m->seq_len, d = m->d_model, ff = m->d_ff;
    size_t kvc = (size_t)m->n_layers * T * g->st.kv_dim;
    size_t mk = (size_t)mm->heads * mm->topk;
    g->params = malloc(sizeof(float) * g->st.n_params);
    g->kcache = malloc(sizeof(float) * (kvc ? kvc : 1));
    g->vcache = malloc(sizeof(float) * (kvc ? kvc : 1));
    g->x = malloc(sizeof(float) * d);
    g->n = malloc(sizeof(float) * d);
    g->q = malloc(sizeof(float) * g->st.q_dim);
    g->k = malloc(sizeof(float) * g->st.kv_dim);
    g->v = malloc(sizeof(float) * g->st.kv_dim);
    g->att = malloc(sizeof(float) * g->st.q_dim);
    g->h = malloc(sizeof(float) * d);
    g->a = malloc(sizeof(float) * ff);
    g->b = malloc(sizeof(float) * ff);
    g->hs = malloc(sizeof(float) * ff);
    g->out = malloc(sizeof(float) * d);
    g->logits = malloc(sizeof(float) * m->vocab);
    g->mq = malloc(sizeof(float) * ((size_t)mm->heads * mm->k_dim + 1));
    g->mw = malloc(sizeof(float) * (mk + 1));
    g->midx = malloc(sizeof(int32_t) * (mk + 1));
    g->me = malloc(sizeof(float) * ((size_t)mm->value_dim + 1));
    g->mg = malloc(sizeof(float) * ((size_t)mm->value_dim + 1));
    g->mu = malloc(sizeof(float) * ((size_t)mm->value_dim + 1));
    g->scores = malloc(sizeof(double) * T);
    if (!g->params || !g->kcache || !g->vcache || !g->x || !g->n || !g->q || !g->k || !g->v ||
        !g->att || !g->h || !g->a || !g->b || !g->hs || !g->out || !g->logits || !g->mq ||
        !g->mw || !g->midx || !g->me || !g->mg || !g->mu || !g->scores) {
        ckptset_view_free(&v);
        gen_free(g);
        return zb_fail(err, "out of memory for the model and its KV cache");
    }
    int rc = load_params(&v, g, err);
    ckptset_view_free(&v);
    if (rc != 0) {
        gen_free(g);
        return -1;
    }
    kernels_init_threads(1);
    *out = g;
    return 0;
}

void gen_free(gen_model *g)
{
    if (!g)
        return;
    llama_stage_free(&g->st);
    float *bufs[] = { g->params, g->kcache, g->vcache, g->x, g->n, g->q, g->k, g->v, g->att,
                      g->h, g->a, g->b, g->hs, g->out, g->logits, g->mq, g->mw, g->me, g->mg,
                      g->mu };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    free(g->midx);
    free(g->scores);
    free(g);
}

const zb_model *gen_model_config(const gen_model *g) { return &g->cfg; }

size_t gen_param_count(const gen_model *g) { return g->st.n_params; }

const float *gen_model_params(const gen_model *g) { return g->params; }

const struct llama_stage *gen_model_layout(const gen_model *g) { return &g->st; }

const unsigned char *gen_model_chars(const gen_model *g) { return g->chars; }

int gen_encode(const gen_model *g, const char *text, size_t len, int32_t *ids, zb_err *err)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (g->id_of[c] < 0) {
            if (c >= 32 && c < 127)
                return zb_fail(err, "the prompt's character '%c' (byte %zu) is not in the "
                               "model's %d-character vocabulary", c, i, g->vocab);
            return zb_fail(err, "the prompt's byte 0x%02x (at %zu) is not in the model's "
                           "%d-character vocabulary", c, i, g->vocab);
        }
        ids[i] = g->id_of[c];
    }
    return 0;
}

char gen_decode(const gen_model *g, int32_t id)
{
    assert(id >= 0 && id < g->vocab);
    return (char)g->chars[id];
}

/* ---- the cached step ----------------------------------------------------- */

static const float *P(const gen_model *g, llama_tensor_kind kind, int layer)
{
    const llama_tensor *t = llama_stage_find(&g->st, kind, layer);
    if (!t && kind == LLAMA_T_MEM_VALUES) /* shared: the first memory layer holds it */
        t = llama_stage_find(&g->st, kind, g->cfg.memory.layers[0]);
    assert(t);
    return g->params + t->offset;
}

/* Feeds token at position pos (0 <= pos < seq_len) through the model,
 * writing its keys and values into the cache and the next-token logits
 * into g->logits.  Positions 0..pos-1 must be cached.  Returns 0 or -1
 * (the memory lookup's scratch). */
static int cached_step(gen_model *g, int32_t token, int pos)
{
    const zb_model *m = &g->cfg;
    int d = m->d_model, ff = m->d_ff, qd = g->st.q_dim, kvd = g->st.kv_dim;
    int nh = m->n_heads, hd = g->st.head_dim, group = m->n_heads / m->n_kv_heads;
    size_t T = (size_t)m->seq_len;
    double scale = 1.0 / sqrt((double)hd);
    kern_embedding_forward(g->x, &token, P(g, LLAMA_T_EMBEDDING, -1), 1, d);
    for (int l = 0; l < m->n_layers; l++) {
        float rstd;
        float *kc = g->kcache + (size_t)l * T * kvd, *vc = g->vcache + (size_t)l * T * kvd;
        kern_rmsnorm_forward(g->n, &rstd, g->x, P(g, LLAMA_T_ATTN_NORM, l), 1, d);
        kern_matvec(g->q, g->n, P(g, LLAMA_T_WQ, l), d, qd);
        kern_matvec(kc + (size_t)pos * kvd, g->n, P(g, LLAMA_T_WK, l), d, kvd);
        kern_matvec(vc + (size_t)pos * kvd, g->n, P(g, LLAMA_T_WV, l), d, kvd);
        kern_rope_row(g->q, pos, nh, hd, m->rope_theta);
        kern_rope_row(kc + (size_t)pos * kvd, pos, m->n_kv_heads, hd, m->rope_theta);
        for (int h = 0; h < nh; h++) {
            const float *qh = g->q + h * hd;
            int kvh = h / group;
            double mx = -INFINITY, sum = 0.0;
            for (int t = 0; t <= pos; t++) {
                const float *kr = kc + (size_t)t * kvd + kvh * hd;
                double s = 0.0;
                for (int c = 0; c < hd; c++)
                    s += (double)qh[c] * kr[c];
                g->scores[t] = s * scale;
                if (g->scores[t] > mx)
                    mx = g->scores[t];
            }
            for (int t = 0; t <= pos; t++) {
                g->scores[t] = exp(g->scores[t] - mx);
                sum += g->scores[t];
            }
            for (int c = 0; c < hd; c++) {
                double o = 0.0;
                for (int t = 0; t <= pos; t++)
                    o += g->scores[t] * vc[(size_t)t * kvd + kvh * hd + c];
                g->att[h * hd + c] = (float)(o / sum);
            }
        }
        kern_matvec(g->h, g->att, P(g, LLAMA_T_WO, l), qd, d);
        for (int j = 0; j < d; j++)
            g->h[j] = g->x[j] + g->h[j];
        kern_rmsnorm_forward(g->n, &rstd, g->h, P(g, LLAMA_T_MLP_NORM, l), 1, d);
        if (model_is_memory_layer(m, l)) {
            const zb_memory *mm = &m->memory;
            mem_shape ms = { d, mm->heads, mm->k_dim, mm->n_keys, mm->topk, mm->value_dim };
            kern_matvec(g->mq, g->n, P(g, LLAMA_T_MEM_QUERY, l), d, mm->heads * mm->k_dim);
            if (kern_memory_lookup(g->midx, g->mw, g->mq, P(g, LLAMA_T_MEM_KEYS, l), &ms, 1) != 0)
                return -1;
            kern_memory_bag_forward(g->me, g->midx, g->mw, P(g, LLAMA_T_MEM_VALUES, l), &ms, 1);
            kern_matvec(g->mg, g->n, P(g, LLAMA_T_MEM_SWILU, l), d, mm->value_dim);
            kern_swiglu_forward(g->mu, g->mg, g->me, (size_t)mm->value_dim);
            kern_matvec(g->out, g->mu, P(g, LLAMA_T_MEM_OUT, l), mm->value_dim, d);
        } else {
            kern_matvec(g->a, g->n, P(g, LLAMA_T_W1, l), d, ff);
            kern_matvec(g->b, g->n, P(g, LLAMA_T_W3, l), d, ff);
            kern_swiglu_forward(g->hs, g->a, g->b, (size_t)ff);
            kern_matvec(g->out, g->hs, P(g, LLAMA_T_W2, l), ff, d);
        }
        for (int j = 0; j < d; j++)
            g->x[j] = g->h[j] + g->out[j];
    }
    float rstd;
    kern_rmsnorm_forward(g->n, &rstd, g->x, P(g, LLAMA_T_FINAL_NORM, -1), 1, d);
    kern_matvec(g->logits, g->n, P(g, LLAMA_T_LM_HEAD, -1), d, m->vocab);
    return 0;
}

/* The training forward on tokens[0..n): logits of the last position into
 * g->logits. */
static int uncached_logits(gen_model *g, const int32_t *tokens, int n, zb_err *err)
{
    zb_model m = g->cfg;
    m.seq_len = n;
    llama_stage st;
    if (llama_stage_init(&st, &m, 0, m.n_layers, 1, 1, err) != 0)
        return -1;
    assert(st.n_params == g->st.n_params);
    llama_saved *sv = llama_saved_new(&st, 1);
    int32_t *targets = calloc((size_t)n, sizeof *targets);
    float *logits = malloc(sizeof(float) * (size_t)n * m.vocab);
    int rc = 0;
    float loss;
    if (!sv || !targets || !logits)
        rc = zb_fail(err, "out of memory");
    if (rc == 0)
        rc = llama_stage_forward(&st, g->params, tokens, NULL, targets, sv, NULL, &loss, logits,
                                 err);
    if (rc == 0)
        memcpy(g->logits, logits + (size_t)(n - 1) * m.vocab, sizeof(float) * m.vocab);
    llama_saved_free(sv);
    free(targets);
    free(logits);
    llama_stage_free(&st);
    return rc;
}

int gen_logits(gen_model *g, const int32_t *tokens, int n, int use_cache, float *logits,
               zb_err *err)
{
    if (n < 1 || n > g->cfg.seq_len)
        return zb_fail(err, "%d tokens: the model reads 1..%d", n, g->cfg.seq_len);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= g->vocab)
            return zb_fail(err, "token %d outside the vocabulary", tokens[i]);
    if (use_cache) {
        for (int i = 0; i < n; i++)
            if (cached_step(g, tokens[i], i) != 0)
                return zb_fail(err, "out of memory in the memory lookup");
    } else if (uncached_logits(g, tokens, n, err) != 0) {
        return -1;
    }
    memcpy(logits, g->logits, sizeof(float) * g->vocab);
    return 0;
}

/* ---- sampling ------------------------------------------------------------ */

typedef struct cand {
    double p;  /* probability (then cumulative cut) */
    int32_t id;
} cand;

static int cmp_cand(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->p != y->p)
        return x->p > y->p ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* The next token from logits under o; c is [vocab] scratch. */
static int32_t sample(const float *logits, int V, const gen_opts *o, zb_rng *r, cand *c)
{
    if (o->temperature <= 0) {
        int32_t best = 0;
        for (int32_t i = 1; i < V; i++)
            if (logits[i] > logits[best])
                best = i;
        return best;
    }
    double mx = -INFINITY;
    for (int i = 0; i < V; i++)
        if (logits[i] > mx)
            mx = logits[i];
    for (int i = 0; i < V; i++) {
        c[i].p = exp(((double)logits[i] - mx) / o->temperature);
        c[i].id = i;
    }
    qsort(c, (size_t)V, sizeof *c, cmp_cand); /* most likely first, ties by id */
    int keep = o->top_k > 0 && o->top_k < V ? o->top_k : V;
    double total = 0.0;
    for (int i = 0; i < keep; i++)
        total += c[i].p;
    if (o->top_p < 1.0) {
        double run = 0.0;
        int n = 0;
        while (n < keep) {
            run += c[n].p;
            n++;
            if (run >= o->top_p * total)
                break;
        }
        keep = n;
        total = run;
    }
    double u = rng_uniform(r) * total, run = 0.0;
    for (int i = 0; i < keep; i++) {
        run += c[i].p;
        if (u < run)
            return c[i].id;
    }
    return c[keep - 1].id; /* u rounded onto the total */
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int gen_check_request(const gen_model *g, size_t prompt_len, const gen_opts *o, zb_err *err)
{
    int T = g->cfg.seq_len;
    if (o->n_tokens < 0)
        return zb_fail(err, "--tokens must be >= 0");
    if (!(o->temperature >= 0) || !isfinite(o->temperature))
        return zb_fail(err, "--temperature must be >= 0");
    if (o->top_k < 0)
        return zb_fail(err, "--top-k must be >= 0");
    if (!(o->top_p > 0 && o->top_p <= 1))
        return zb_fail(err, "--top-p must be in (0, 1]");
    size_t n_prompt = prompt_len > 0 ? prompt_len : 1;
    if (n_prompt > (size_t)INT32_MAX - (size_t)o->n_tokens)
        return zb_fail(err, "the prompt (%zu characters) is too long", n_prompt);
    if (o->max_context && n_prompt + (size_t)o->n_tokens > (size_t)T)
        return zb_fail(err, "the prompt (%zu characters) and %d new tokens exceed the model's "
                       "context of %d tokens; with --max-context generation stops at the "
                       "context, so ask for at most %lld (without it the context is cropped "
                       "to the last %d tokens)", n_prompt, o->n_tokens, T,
                       (long long)T - (long long)n_prompt > 0 ? (long long)T - (long long)n_prompt : 0,
                       T);
    return 0;
}

/* The logits of the next token after ids[0..n) into g->logits, where
 * positions 0..n-2 are cached when n <= T (the cached path feeds the one
 * new token).  Past the context (n > T) the conditioning is the last T
 * tokens, run afresh from position 0 with the training forward: no cached
 * key survives the shift (generate.h, CONTEXT).  Returns 0 or -1. */
static int next_logits(gen_model *g, const int32_t *ids, int n, int use_cache, zb_err *err)
{
    int T = g->cfg.seq_len;
    if (n > T)
        return uncached_logits(g, ids + (n - T), T, err);
    if (!use_cache)
        return uncached_logits(g, ids, n, err);
    if (cached_step(g, ids[n - 1], n - 1) != 0)
        return zb_fail(err, "out of memory in the memory lookup");
    return 0;
}

int gen_run(gen_model *g, const char *prompt, size_t prompt_len, const gen_opts *o,
            gen_emit_fn emit, void *ctx, gen_result *res, zb_err *err)
{
    int T = g->cfg.seq_len, V = g->vocab;
    memset(res, 0, sizeof *res);
    if (gen_check_request(g, prompt_len, o, err) != 0)
        return -1;
    size_t n_prompt = prompt_len > 0 ? prompt_len : 1;
    size_t n_ids = n_prompt + (size_t)o->n_tokens;
    int32_t *ids = malloc(sizeof(int32_t) * n_ids);
    cand *c = malloc(sizeof *c * (size_t)V);
    if (!ids || !c) {
        free(ids);
        free(c);
        return zb_fail(err, "out of memory");
    }
    if (prompt_len > 0) {
        if (gen_encode(g, prompt, prompt_len, ids, err) != 0) {
            free(ids);
            free(c);
            return -1;
        }
    } else {
        ids[0] = g->id_of['\n'] >= 0 ? g->id_of['\n'] : 0;
    }
    zb_rng r;
    rng_seed(&r, o->seed, 0x67656e);
    int n = (int)n_prompt, rc = 0;
    double t0 = now_s();
    /* the logits after the prompt: its last T tokens at most, fed through
     * the cache from position 0 (a cropped prompt is a window too) */
    int first = n > T ? n - T : 0;
    if (o->use_cache) {
        for (int i = first; i < n && rc == 0; i++)
            if (cached_step(g, ids[i], i - first) != 0)
                rc = zb_fail(err, "out of memory in the memory lookup");
    } else {
        rc = uncached_logits(g, ids + first, n - first, err);
    }
    for (int t = 0; t < o->n_tokens && rc == 0; t++) {
        int32_t next = sample(g->logits, V, o, &r, c);
        res->n_cropped += n > T; /* drawn from a cropped window */
        ids[n] = next;
        char ch = gen_decode(g, next);
        if (emit)
            emit(ctx, &ch, 1);
        n++;
        res->n_new++;
        if (t + 1 == o->n_tokens)
            break; /* the last token's logits are not needed */
        rc = next_logits(g, ids, n, o->use_cache, err);
    }
    res->seconds = now_s() - t0;
    res->tokens_per_s = res->seconds > 0 ? res->n_new / res->seconds : 0;
    free(ids);
    free(c);
    return rc;
}
