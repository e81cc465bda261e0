/*
 * llama.c: one pipeline stage of the Llama-style decoder (llama.h): the
 * parameter layout, deterministic initialisation, and the forward, B and W
 * passes of a micro-batch over the layer kernels of ops.h.
 *
 * The saved state of a micro-batch is a table of "slots", one buffer per
 * (layer, activation) plus the embedding's and the head's, each tagged with
 * the phase that allocates and frees it:
 *
 *   F_KEEP  allocated by F, used by B and W, freed by W (matmul inputs,
 *           norm inputs and their 1/rms)
 *   F_ONLY  allocated by F, freed at the end of B (q, k, v, attention lse,
 *           SwiGLU pre-activations, logits)
 *   B_KEEP  allocated by B, freed by W (the output gradients W multiplies
 *           with the saved inputs)
 *
 * so the bytes held after F, after B and after W (zero) are exact sums over
 * the slots, and the phase discipline is visible in one table (slot_spec).
 * All buffers of a phase are allocated up front, so a failed allocation
 * leaves the object as it was before the call.
 *
 * Expected workload: shakespeare-char, B=8, T=256, d=384, d_ff=1536, 6
 * layers: 60.1 MiB held per micro-batch and layer after F, 72.0 MiB after
 * B (bench_kernels; docs/kernels.md has the table).
 */
#include "kernels/cpu/llama.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/buf_pool.h"
#include "kernels/cpu/memory_layer.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/team.h"

/* ---------------------------------------------------------------------- */
/* Parameter layout                                                        */
/* ---------------------------------------------------------------------- */

static const char *const kind_names[LLAMA_T_COUNT] = {
    "embedding", "attn_norm", "wq", "wk", "wv", "wo",
    "mlp_norm", "w1", "w3", "w2", "final_norm", "lm_head",
    "mem_query", "mem_keys", "mem_values", "mem_swilu", "mem_out",
};

/* The memory layer's sizes from the model. */
static mem_shape stage_mem_shape(const llama_stage *st)
{
    const zb_memory *mm = &st->cfg.memory;
    mem_shape s = { st->cfg.d_model, mm->heads, mm->k_dim, mm->n_keys, mm->topk,
                    mm->value_dim };
    return s;
}

static void tensor_shape(const llama_stage *st, llama_tensor_kind kind,
                         int *rows, int *cols)
{
    const zb_model *m = &st->cfg;
    int d = m->d_model;
    switch (kind) {
    case LLAMA_T_EMBEDDING: *rows = m->vocab; *cols = d; break;
    case LLAMA_T_ATTN_NORM:
    case LLAMA_T_MLP_NORM:
    case LLAMA_T_FINAL_NORM: *rows = 1; *cols = d; break;
    case LLAMA_T_WQ: *rows = d; *cols = st->q_dim; break;
    case LLAMA_T_WK:
    case LLAMA_T_WV: *rows = d; *cols = st->kv_dim; break;
    case LLAMA_T_WO: *rows = st->q_dim; *cols = d; break;
    case LLAMA_T_W1:
    case LLAMA_T_W3: *rows = d; *cols = m->d_ff; break;
    case LLAMA_T_W2: *rows = m->d_ff; *cols = d; break;
    case LLAMA_T_LM_HEAD: *rows = d; *cols = m->vocab; break;
    case LLAMA_T_MEM_QUERY: *rows = d; *cols = m->memory.heads * m->memory.k_dim; break;
    case LLAMA_T_MEM_KEYS:
        *rows = m->memory.heads * 2 * m->memory.n_keys;
        *cols = m->memory.k_dim / 2;
        break;
    case LLAMA_T_MEM_VALUES:
        *rows = m->memory.n_keys * m->memory.n_keys;
        *cols = m->memory.value_dim;
        break;
    case LLAMA_T_MEM_SWILU: *rows = d; *cols = m->memory.value_dim; break;
    case LLAMA_T_MEM_OUT: *rows = m->memory.value_dim; *cols = d; break;
    default: assert(0 && "bad tensor kind"); *rows = *cols = 0;
    }
}

static void add_tensor(llama_stage *st, llama_tensor_kind kind, int layer)
{
    llama_tensor *t = &st->tensors[st->n_tensors++];
    t->kind = kind;
    t->layer = layer;
    t->offset = st->n_params;
    tensor_shape(st, kind, &t->rows, &t->cols);
    t->count = (size_t)t->rows * (size_t)t->cols;
    /* the key and value tables are read sparsely: decaying every row each
     * step would shrink the rows a batch never touched */
    t->decay = t->rows > 1 && kind != LLAMA_T_MEM_KEYS && kind != LLAMA_T_MEM_VALUES;
    if (layer >= 0)
        snprintf(t->name, sizeof t->name, "layers.%d.%s", layer,
                 kind_names[kind]);
    else
        snprintf(t->name, sizeof t->name, "%s", kind_names[kind]);
    st->n_params += t->count;
}

int llama_stage_init(llama_stage *st, const zb_model *m, int l0, int l1,
                     int has_embedding, int has_head, zb_err *err)
{
    memset(st, 0, sizeof *st);
    if (m->n_layers < 0 || m->d_model <= 0 || m->n_heads <= 0 ||
        m->n_kv_heads <= 0 || m->d_ff <= 0 || m->vocab <= 0 ||
        m->seq_len <= 0)
        return zb_fail(err, "model %s: sizes must be positive", m->name);
    if (m->d_model % m->n_heads != 0)
        return zb_fail(err, "model %s: n_heads %d does not divide d_model %d",
                       m->name, m->n_heads, m->d_model);
    if ((m->d_model / m->n_heads) % 2 != 0)
        return zb_fail(err, "model %s: head_dim %d must be even for RoPE",
                       m->name, m->d_model / m->n_heads);
    if (m->n_heads % m->n_kv_heads != 0)
        return zb_fail(err, "model %s: n_kv_heads %d does not divide n_heads %d",
                       m->name, m->n_kv_heads, m->n_heads);
    if (!(m->rope_theta > 0))
        return zb_fail(err, "model %s: rope_theta must be positive", m->name);
    if (l0 < 0 || l1 < l0 || l1 > m->n_layers)
        return zb_fail(err, "stage layers [%d, %d) outside the model's %d",
                       l0, l1, m->n_layers);
    if (has_head < LLAMA_HEAD_NONE || has_head > LLAMA_HEAD_NORM_ONLY)
        return zb_fail(err, "stage [%d, %d): bad head mode %d", l0, l1, has_head);
    if (l0 == l1 && !has_embedding && !has_head)
        return zb_fail(err, "stage [%d, %d) holds nothing", l0, l1);
    if (model_memory_check(m, err) != 0)
        return -1;
    int n_mem = 0;
    for (int l = l0; l < l1; l++)
        n_mem += model_is_memory_layer(m, l);
    if (m->memory.shared_values && n_mem > 0 && n_mem < m->memory.n_layers)
        return zb_fail(err, "model %s: the shared memory value table needs all %d memory "
                       "layers on one stage, but stage [%d, %d) holds %d of them",
                       m->name, m->memory.n_layers, l0, l1, n_mem);
    st->cfg = *m;
    st->l0 = l0;
    st->l1 = l1;
    st->has_embedding = has_embedding ? 1 : 0;
    st->has_head = has_head == LLAMA_HEAD_FULL;
    st->norm_only = has_head == LLAMA_HEAD_NORM_ONLY;
    st->head_dim = m->d_model / m->n_heads;
    st->q_dim = m->n_heads * st->head_dim;
    st->kv_dim = m->n_kv_heads * st->head_dim;
    st->n_memory = n_mem;
    st->values_tensor = -1;
    int cap = 1 + 11 * (l1 - l0) + 2;
    st->tensors = calloc((size_t)cap, sizeof *st->tensors);
    st->layer_tensor0 = calloc((size_t)(l1 - l0 + 1), sizeof *st->layer_tensor0);
    if (!st->tensors || !st->layer_tensor0) {
        llama_stage_free(st);
        return zb_fail(err, "out of memory for the stage's tensor table");
    }
    if (st->has_embedding)
        add_tensor(st, LLAMA_T_EMBEDDING, -1);
    st->layer_offset0 = st->n_params;
    for (int l = l0; l < l1; l++) {
        st->layer_tensor0[l - l0] = st->n_tensors;
        for (int k = LLAMA_T_ATTN_NORM; k <= LLAMA_T_MLP_NORM; k++)
            add_tensor(st, (llama_tensor_kind)k, l);
        if (model_is_memory_layer(m, l)) {
            add_tensor(st, LLAMA_T_MEM_QUERY, l);
            add_tensor(st, LLAMA_T_MEM_KEYS, l);
            if (!m->memory.shared_values || l == m->memory.layers[0]) {
                if (m->memory.shared_values)
                    st->values_tensor = st->n_tensors;
                add_tensor(st, LLAMA_T_MEM_VALUES, l);
            }
            add_tensor(st, LLAMA_T_MEM_SWILU, l);
            add_tensor(st, LLAMA_T_MEM_OUT, l);
        } else {
            for (int k = LLAMA_T_W1; k <= LLAMA_T_W2; k++)
                add_tensor(st, (llama_tensor_kind)k, l);
        }
        if (l == l0)
            st->layer_stride = st->n_params - st->layer_offset0;
    }
    st->layer_tensor0[l1 - l0] = st->n_tensors;
    if (st->has_head || st->norm_only)
        add_tensor(st, LLAMA_T_FINAL_NORM, -1);
    if (st->has_head)
        add_tensor(st, LLAMA_T_LM_HEAD, -1);
    assert(st->n_tensors <= cap);
    if (!(st->pool = buf_pool_new())) {
        llama_stage_free(st);
        return zb_fail(err, "out of memory for the stage's buffer pool");
    }
    st->owns_pool = 1;
    return 0;
}

void llama_stage_share_pool(llama_stage *st, struct buf_pool *shared)
{
    if (st->owns_pool)
        buf_pool_free(st->pool);
    st->pool = shared;
    st->owns_pool = 0;
}

void llama_stage_free(llama_stage *st)
{
    if (st->owns_pool)
        buf_pool_free(st->pool);
    st->pool = NULL;
    st->owns_pool = 0;
    free(st->tensors);
    free(st->layer_tensor0);
    st->tensors = NULL;
    st->layer_tensor0 = NULL;
    st->n_tensors = 0;
}

size_t llama_stage_num_params(const llama_stage *st) { return st->n_params; }

const llama_tensor *llama_stage_tensor(const llama_stage *st, int i)
{
    if (i < 0 || i >= st->n_tensors)
        return NULL;
    return &st->tensors[i];
}

const llama_tensor *llama_stage_find(const llama_stage *st,
                                     llama_tensor_kind kind, int layer)
{
    for (int i = 0; i < st->n_tensors; i++)
        if (st->tensors[i].kind == kind && st->tensors[i].layer == layer)
            return &st->tensors[i];
    return NULL;
}

/* Tensor of kind k of local layer i (0-based within the stage); a shared
 * memory value table is found wherever the stage holds it. */
static const llama_tensor *layer_tensor(const llama_stage *st, int i, llama_tensor_kind k)
{
    for (int t = st->layer_tensor0[i]; t < st->layer_tensor0[i + 1]; t++)
        if (st->tensors[t].kind == k) {
            assert(st->tensors[t].layer == st->l0 + i);
            return &st->tensors[t];
        }
    assert(k == LLAMA_T_MEM_VALUES && st->values_tensor >= 0);
    return &st->tensors[st->values_tensor];
}

/* Parameters of local layer i, kind k. */
static const float *layer_param(const llama_stage *st, const float *params,
                                int i, llama_tensor_kind k)
{
    return params + layer_tensor(st, i, k)->offset;
}

/* 1 when local layer i is a memory layer. */
static int local_is_memory(const llama_stage *st, int i)
{
    return st->n_memory > 0 && model_is_memory_layer(&st->cfg, st->l0 + i);
}

/* ---------------------------------------------------------------------- */
/* Deterministic initialisation                                            */
/* ---------------------------------------------------------------------- */

/* splitmix64's finaliser: a bijective 64-bit mixer. */
static uint64_t mix64(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in (0, 1] from 53 random bits. */
static double unit_open0(uint64_t r)
{
    return ((double)(r >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

void llama_stage_init_params(const llama_stage *st, float *params, uint64_t seed)
{
    double std_base = 0.02;
    double std_resid = 0.02 / sqrt(2.0 * (st->cfg.n_layers > 0 ? st->cfg.n_layers : 1));
    const zb_memory *mm = &st->cfg.memory;
    for (int ti = 0; ti < st->n_tensors; ti++) {
        const llama_tensor *t = &st->tensors[ti];
        float *p = params + t->offset;
        if (t->kind == LLAMA_T_ATTN_NORM || t->kind == LLAMA_T_MLP_NORM ||
            t->kind == LLAMA_T_FINAL_NORM) {
            for (size_t i = 0; i < t->count; i++)
                p[i] = 1.0f;
            continue;
        }
        double std = (t->kind == LLAMA_T_WO || t->kind == LLAMA_T_W2 ||
                      t->kind == LLAMA_T_MEM_OUT) ? std_resid : std_base;
        /* memory layers follow facebookresearch/memory's reset_parameters in
         * scale (normal draws throughout): Glorot for the query, 1/sqrt(kd)
         * keys, 1/sqrt(v) values, 1/sqrt(d) for the gate projection */
        if (t->kind == LLAMA_T_MEM_QUERY)
            std = sqrt(2.0 / (t->rows + t->cols));
        else if (t->kind == LLAMA_T_MEM_KEYS)
            std = 1.0 / sqrt((double)mm->k_dim);
        else if (t->kind == LLAMA_T_MEM_VALUES)
            std = 1.0 / sqrt((double)mm->value_dim);
        else if (t->kind == LLAMA_T_MEM_SWILU)
            std = 1.0 / sqrt((double)st->cfg.d_model);
        /* key depends only on (seed, layer, kind): split-independent */
        uint64_t key = mix64(mix64(seed) ^
                             (((uint64_t)(t->layer + 2) << 8) | (uint64_t)t->kind));
        for (size_t i = 0; i < t->count; i++) {
            double u1 = unit_open0(mix64(key + 2 * i));
            double u2 = unit_open0(mix64(key + 2 * i + 1));
            double z = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
            p[i] = (float)(std * z);
        }
    }
}

/* ---------------------------------------------------------------------- */
/* Saved state                                                             */
/* ---------------------------------------------------------------------- */

enum { PH_F_KEEP = 1, PH_F_ONLY = 2, PH_B_KEEP = 4 };

/* Per-layer slots.  Shapes with N = B·T. */
enum {
    LS_X,     /* [N,d]    layer input (rmsnorm 1 input)          F_KEEP */
    LS_RSTD1, /* [N]      1/rms of LS_X                          F_KEEP */
    LS_N1,    /* [N,d]    rmsnorm 1 output: input of wq, wk, wv  F_KEEP */
    LS_ATT,   /* [N,qd]   attention output: input of wo          F_KEEP */
    LS_H,     /* [N,d]    residual after attention               F_KEEP */
    LS_RSTD2, /* [N]      1/rms of LS_H                          F_KEEP */
    LS_N2,    /* [N,d]    rmsnorm 2 output: input of w1, w3      F_KEEP */
    LS_HS,    /* [N,ff]   silu(a)·b: input of w2                 F_KEEP */
    LS_Q,     /* [N,qd]   queries after RoPE                     F_ONLY */
    LS_K,     /* [N,kvd]  keys after RoPE                        F_ONLY */
    LS_V,     /* [N,kvd]  values                                 F_ONLY */
    LS_LSE,   /* [B,nh,T] attention row log-sum-exp              F_ONLY */
    LS_A,     /* [N,ff]   gate pre-activation n2·w1              F_ONLY */
    LS_B,     /* [N,ff]   up projection n2·w3                    F_ONLY */
    LS_DOUT,  /* [N,d]    grad of the layer output (w2's dY)     B_KEEP */
    LS_DA,    /* [N,ff]   grad of the gate pre-act (w1's dY)     B_KEEP */
    LS_DB,    /* [N,ff]   grad of the up projection (w3's dY)    B_KEEP */
    LS_DN2,   /* [N,d]    grad of rmsnorm 2 output (g2's dY)     B_KEEP */
    LS_DH,    /* [N,d]    grad of LS_H (wo's dY)                 B_KEEP */
    LS_DQ,    /* [N,qd]   grad of pre-RoPE queries (wq's dY)     B_KEEP */
    LS_DK,    /* [N,kvd]  grad of pre-RoPE keys (wk's dY)        B_KEEP */
    LS_DV,    /* [N,kvd]  grad of values (wv's dY)               B_KEEP */
    LS_DN1,   /* [N,d]    grad of rmsnorm 1 output (g1's dY)     B_KEEP */
    /* memory layers only (the SwiGLU slots LS_HS, LS_A, LS_B, LS_DA, LS_DB
     * are then unused, and these are unused in the other layers) */
    LS_MQ,    /* [N,H·kd] memory query n2·Wq (keys' W input)  F_KEEP */
    LS_MIDX,  /* [N,H,k]  int32 chosen slots                  F_KEEP */
    LS_MW,    /* [N,H,k]  their softmax weights               F_KEEP */
    LS_MU,    /* [N,v]    e⊙silu(g): input of mem_out         F_KEEP */
    LS_MG,    /* [N,v]    gate pre-activation n2·Wsw          F_ONLY */
    LS_ME,    /* [N,v]    the bag Σ w·V[slot]                 F_ONLY */
    LS_MDS,   /* [N,H,k]  grad of the chosen scores           B_KEEP */
    LS_MDQ,   /* [N,H·kd] grad of the query (mem_query's dY)  B_KEEP */
    LS_MDG,   /* [N,v]    grad of g (mem_swilu's dY)          B_KEEP */
    LS_MDE,   /* [N,v]    grad of the bag (values' dY)        B_KEEP */
    LS_COUNT
};

/* Head slots (only when has_head). */
enum {
    HS_XF,       /* [N,d]  final norm input                      F_KEEP */
    HS_RSTD,     /* [N]    1/rms of HS_XF                        F_KEEP */
    HS_NF,       /* [N,d]  final norm output: LM head input      F_KEEP */
    HS_LOGITS,   /* [N,V]  logits                                F_ONLY */
    HS_LSE,      /* [N]    row log-sum-exp of the logits         F_ONLY */
    HS_TARGETS,  /* [N]    int32 copy of the targets             F_ONLY */
    HS_DLOGITS,  /* [N,V]  grad of the logits (head's dY)        B_KEEP */
    HS_DNF,      /* [N,d]  grad of the final norm output         B_KEEP */
    HS_COUNT
};

/* Embedding slots (only when has_embedding). */
enum {
    ES_TOKENS, /* [N]   int32 copy of the tokens                 F_KEEP */
    ES_DX,     /* [N,d] grad of the embedding output             B_KEEP */
    ES_COUNT
};

struct llama_saved {
    const llama_stage *st; /* the stage it was made for (must outlive it) */
    int batch;             /* sequences per micro-batch B */
    int n_local;           /* layers in the stage */
    int state;             /* 0 empty, 1 after F, 2 after B, 3 after F with
                            * full recompute (inputs only), 4 after F with
                            * MLP-level recompute (MLP blocks dropped) */
    int n_slots;           /* n_local·LS_COUNT + HS_COUNT + ES_COUNT */
    void **slot;           /* [n_slots] buffers, NULL when not held */
    size_t *slot_bytes;    /* [n_slots] size of each (0: unused here) */
    unsigned char *slot_phase; /* [n_slots] PH_* of each */
    size_t bytes;          /* sum of slot_bytes over held slots, plus the
                            * recompute inputs below */
    int recompute;         /* LLAMA_RC_*: FULL, F keeps only its inputs and B reruns F
                            * first; MLP, F drops the MLP blocks and B reruns them */
    void *rc_input;        /* recompute: copy of tokens or act_in, or NULL */
    int32_t *rc_targets;   /* recompute: copy of the targets (head), or NULL */
    size_t rc_bytes;       /* bytes of rc_input + rc_targets while held */
};

static int head_base(const llama_saved *sv) { return sv->n_local * LS_COUNT; }
static int emb_base(const llama_saved *sv) { return head_base(sv) + HS_COUNT; }

static float *LSLOT(llama_saved *sv, int i, int k)
{
    return (float *)sv->slot[i * LS_COUNT + k];
}
static float *HSLOT(llama_saved *sv, int k)
{
    return (float *)sv->slot[head_base(sv) + k];
}
static void *ESLOT(llama_saved *sv, int k) { return sv->slot[emb_base(sv) + k]; }

/* Fills slot_bytes and slot_phase from the stage's sizes. */
static void slot_spec(llama_saved *sv)
{
    const llama_stage *st = sv->st;
    size_t N = (size_t)sv->batch * st->cfg.seq_len;
    size_t d = st->cfg.d_model, ff = st->cfg.d_ff, V = st->cfg.vocab;
    size_t qd = st->q_dim, kvd = st->kv_dim, f = sizeof(float);
    static const unsigned char lphase[LS_COUNT] = {
        PH_F_KEEP, PH_F_KEEP, PH_F_KEEP, PH_F_KEEP, PH_F_KEEP, PH_F_KEEP,
        PH_F_KEEP, PH_F_KEEP, PH_F_ONLY, PH_F_ONLY, PH_F_ONLY, PH_F_ONLY,
        PH_F_ONLY, PH_F_ONLY, PH_B_KEEP, PH_B_KEEP, PH_B_KEEP, PH_B_KEEP,
        PH_B_KEEP, PH_B_KEEP, PH_B_KEEP, PH_B_KEEP, PH_B_KEEP,
        PH_F_KEEP, PH_F_KEEP, PH_F_KEEP, PH_F_KEEP, PH_F_ONLY, PH_F_ONLY,
        PH_B_KEEP, PH_B_KEEP, PH_B_KEEP, PH_B_KEEP,
    };
    const zb_memory *mm = &st->cfg.memory;
    size_t mq = (size_t)mm->heads * mm->k_dim, mk = (size_t)mm->heads * mm->topk;
    size_t mv = mm->value_dim;
    const size_t lsize[LS_COUNT] = {
        [LS_X] = N * d, [LS_RSTD1] = N, [LS_N1] = N * d, [LS_ATT] = N * qd,
        [LS_H] = N * d, [LS_RSTD2] = N, [LS_N2] = N * d, [LS_HS] = N * ff,
        [LS_Q] = N * qd, [LS_K] = N * kvd, [LS_V] = N * kvd,
        [LS_LSE] = N * (size_t)st->cfg.n_heads, [LS_A] = N * ff,
        [LS_B] = N * ff, [LS_DOUT] = N * d, [LS_DA] = N * ff,
        [LS_DB] = N * ff, [LS_DN2] = N * d, [LS_DH] = N * d,
        [LS_DQ] = N * qd, [LS_DK] = N * kvd, [LS_DV] = N * kvd,
        [LS_DN1] = N * d,
        [LS_MQ] = N * mq, [LS_MIDX] = N * mk, [LS_MW] = N * mk, [LS_MU] = N * mv,
        [LS_MG] = N * mv, [LS_ME] = N * mv, [LS_MDS] = N * mk, [LS_MDQ] = N * mq,
        [LS_MDG] = N * mv, [LS_MDE] = N * mv,
    };
    for (int i = 0; i < sv->n_local; i++) {
        int mem = local_is_memory(st, i);
        for (int k = 0; k < LS_COUNT; k++) {
            int swiglu_only = k == LS_HS || k == LS_A || k == LS_B || k == LS_DA || k == LS_DB;
            int used = k >= LS_MQ ? mem : swiglu_only ? !mem : 1;
            /* sizeof(int32_t) == sizeof(float): LS_MIDX needs no case */
            sv->slot_bytes[i * LS_COUNT + k] = used ? lsize[k] * f : 0;
            sv->slot_phase[i * LS_COUNT + k] = lphase[k];
        }
    }
    static const unsigned char hphase[HS_COUNT] = {
        PH_F_KEEP, PH_F_KEEP, PH_F_KEEP, PH_F_ONLY,
        PH_F_ONLY, PH_F_ONLY, PH_B_KEEP, PH_B_KEEP,
    };
    const size_t hsize[HS_COUNT] = {
        [HS_XF] = N * d, [HS_RSTD] = N, [HS_NF] = N * d, [HS_LOGITS] = N * V,
        [HS_LSE] = N, [HS_TARGETS] = N, [HS_DLOGITS] = N * V, [HS_DNF] = N * d,
    };
    for (int k = 0; k < HS_COUNT; k++) {
        /* a norm-only stage (vocabulary parallelism) keeps the norm's slots */
        int norm_slot = k == HS_XF || k == HS_RSTD || k == HS_DNF;
        sv->slot_bytes[head_base(sv) + k] =
            st->has_head || (st->norm_only && norm_slot) ? hsize[k] * f : 0;
        sv->slot_phase[head_base(sv) + k] = hphase[k];
    }
    sv->slot_bytes[emb_base(sv) + ES_TOKENS] = st->has_embedding ? N * sizeof(int32_t) : 0;
    sv->slot_phase[emb_base(sv) + ES_TOKENS] = PH_F_KEEP;
    sv->slot_bytes[emb_base(sv) + ES_DX] = st->has_embedding ? N * d * f : 0;
    sv->slot_phase[emb_base(sv) + ES_DX] = PH_B_KEEP;
}

llama_saved *llama_saved_new(const llama_stage *st, int batch)
{
    assert(batch > 0);
    llama_saved *sv = calloc(1, sizeof *sv);
    if (!sv)
        return NULL;
    sv->st = st;
    sv->batch = batch;
    sv->n_local = st->l1 - st->l0;
    sv->n_slots = sv->n_local * LS_COUNT + HS_COUNT + ES_COUNT;
    sv->slot = calloc((size_t)sv->n_slots, sizeof *sv->slot);
    sv->slot_bytes = calloc((size_t)sv->n_slots, sizeof *sv->slot_bytes);
    sv->slot_phase = calloc((size_t)sv->n_slots, 1);
    if (!sv->slot || !sv->slot_bytes || !sv->slot_phase) {
        llama_saved_free(sv);
        return NULL;
    }
    slot_spec(sv);
    return sv;
}

/* A saved-state buffer of `bytes` from the stage's pool (malloc when the
 * stage has none); NULL when out of memory. */
static void *sv_alloc(const llama_saved *sv, size_t bytes)
{
    return sv->st->pool ? buf_pool_get(sv->st->pool, bytes) : malloc(bytes);
}

/* Gives a buffer of sv_alloc (NULL is fine) back to the stage's pool. */
static void sv_release(const llama_saved *sv, void *buf, size_t bytes)
{
    if (sv->st->pool)
        buf_pool_put(sv->st->pool, buf, bytes);
    else
        free(buf);
}

/* Bytes of keep_inputs_only's copy of a micro-batch's input (N rows). */
static size_t rc_input_bytes(const llama_stage *st, size_t N)
{
    return st->has_embedding ? N * sizeof(int32_t) : N * st->cfg.d_model * sizeof(float);
}

/* Releases every held slot whose phase is in mask. */
static void release_phase(llama_saved *sv, int mask)
{
    for (int s = 0; s < sv->n_slots; s++)
        if (sv->slot[s] && (sv->slot_phase[s] & mask)) {
            sv_release(sv, sv->slot[s], sv->slot_bytes[s]);
            sv->slot[s] = NULL;
            sv->bytes -= sv->slot_bytes[s];
        }
}

/* Allocates every used slot whose phase is in mask; all or nothing. */
static int acquire_phase(llama_saved *sv, int mask)
{
    for (int s = 0; s < sv->n_slots; s++) {
        if (!(sv->slot_phase[s] & mask) || sv->slot_bytes[s] == 0)
            continue;
        assert(sv->slot[s] == NULL);
        sv->slot[s] = sv_alloc(sv, sv->slot_bytes[s]);
        if (!sv->slot[s]) {
            release_phase(sv, mask);
            return -1;
        }
        sv->bytes += sv->slot_bytes[s];
    }
    return 0;
}

/* Drops the recompute inputs, if held. */
static void release_rc_inputs(llama_saved *sv)
{
    size_t N = (size_t)sv->batch * sv->st->cfg.seq_len;
    if (sv->rc_input)
        sv_release(sv, sv->rc_input, rc_input_bytes(sv->st, N));
    if (sv->rc_targets)
        sv_release(sv, sv->rc_targets, N * sizeof(int32_t));
    sv->rc_input = NULL;
    sv->rc_targets = NULL;
    sv->bytes -= sv->rc_bytes;
    sv->rc_bytes = 0;
}

void llama_saved_free(llama_saved *sv)
{
    if (!sv)
        return;
    release_rc_inputs(sv);
    if (sv->slot && sv->slot_bytes)
        release_phase(sv, PH_F_KEEP | PH_F_ONLY | PH_B_KEEP);
    free(sv->slot);
    free(sv->slot_bytes);
    free(sv->slot_phase);
    free(sv);
}

void llama_saved_reset(llama_saved *sv)
{
    release_rc_inputs(sv);
    release_phase(sv, PH_F_KEEP | PH_F_ONLY | PH_B_KEEP);
    assert(sv->bytes == 0);
    sv->state = 0;
}

size_t llama_saved_bytes(const llama_saved *sv) { return sv ? sv->bytes : 0; }

void llama_saved_set_recompute(llama_saved *sv, int level)
{
    assert(sv->state == 0);
    assert(level >= LLAMA_RC_NONE && level <= LLAMA_RC_MLP);
    sv->recompute = level;
}

/* The MLP block's slots of a SwiGLU layer: what MLP-level recompute drops
 * after F and rebuilds at B (LS_H and LS_RSTD2, the block's input and its
 * norm statistic, stay; the norm's rerun rewrites LS_RSTD2 with the same
 * bits). */
static const int mlp_slots[] = { LS_N2, LS_A, LS_B, LS_HS };
enum { MLP_SLOT_COUNT = sizeof mlp_slots / sizeof mlp_slots[0] };

int llama_saved_plan(const llama_stage *st, int batch, int recompute, llama_saved_sizes *out)
{
    llama_saved *sv = llama_saved_new(st, batch); /* the slot table only */
    if (!sv)
        return -1;
    size_t keep = 0, only = 0, b_keep = 0, mlp = 0;
    for (int k = 0; k < sv->n_slots; k++) {
        size_t b = sv->slot_bytes[k];
        keep += sv->slot_phase[k] == PH_F_KEEP ? b : 0;
        only += sv->slot_phase[k] == PH_F_ONLY ? b : 0;
        b_keep += sv->slot_phase[k] == PH_B_KEEP ? b : 0;
    }
    for (int i = 0; i < sv->n_local; i++)
        for (int k = 0; !local_is_memory(st, i) && k < MLP_SLOT_COUNT; k++)
            mlp += sv->slot_bytes[i * LS_COUNT + mlp_slots[k]];
    size_t N = (size_t)batch * st->cfg.seq_len;
    /* keep_inputs_only's copies */
    size_t inputs = (st->has_embedding ? N * sizeof(int32_t) : N * st->cfg.d_model * sizeof(float))
                    + (st->has_head ? N * sizeof(int32_t) : 0);
    out->in_f = keep + only + (recompute == LLAMA_RC_FULL ? inputs : 0);
    out->after_f = recompute == LLAMA_RC_FULL  ? inputs
                   : recompute == LLAMA_RC_MLP ? keep + only - mlp
                                               : keep + only;
    /* full recompute: B reruns F from the kept inputs (inputs + the forward
     * slots), frees the inputs, then takes its own slots */
    out->in_b = keep + only + (recompute == LLAMA_RC_FULL && inputs > b_keep ? inputs : b_keep);
    out->after_b = keep + b_keep;
    llama_saved_free(sv);
    return 0;
}

/* Frees whichever MLP block slots are held (a failed rebuild's). */
static void drop_mlp_blocks_partial(llama_saved *sv)
{
    for (int i = 0; i < sv->n_local; i++)
        for (int k = 0; !local_is_memory(sv->st, i) && k < MLP_SLOT_COUNT; k++) {
            int s = i * LS_COUNT + mlp_slots[k];
            if (!sv->slot[s])
                continue;
            sv_release(sv, sv->slot[s], sv->slot_bytes[s]);
            sv->slot[s] = NULL;
            sv->bytes -= sv->slot_bytes[s];
        }
}

/* MLP-level recompute, after a forward: frees every SwiGLU layer's MLP
 * block slots, leaving state 4, or state 1 when the stage has none. */
static void drop_mlp_blocks(llama_saved *sv)
{
    size_t before = sv->bytes;
    drop_mlp_blocks_partial(sv);
    if (sv->bytes != before)
        sv->state = 4;
}

/* MLP-level recompute, at B: rebuilds what drop_mlp_blocks freed by
 * rerunning each SwiGLU layer's norm and MLP matmuls exactly as
 * layer_forward ran them (same kernels, same inputs: same bits), leaving
 * state 1.  Returns 0, or -1 with err set when out of memory (the rebuilt
 * slots are freed again and state 4 kept). */
static int rerun_mlp_blocks(const llama_stage *st, const float *params, llama_saved *sv,
                            zb_err *err)
{
    const zb_model *m = &st->cfg;
    int N = sv->batch * m->seq_len, d = m->d_model, ff = m->d_ff;
    for (int i = 0; i < sv->n_local; i++) {
        if (local_is_memory(st, i))
            continue;
        for (int k = 0; k < MLP_SLOT_COUNT; k++) {
            int s = i * LS_COUNT + mlp_slots[k];
            assert(!sv->slot[s]);
            if (!(sv->slot[s] = sv_alloc(sv, sv->slot_bytes[s]))) {
                drop_mlp_blocks_partial(sv);
                return zb_fail(err, "backward B: out of memory recomputing the MLP blocks");
            }
            sv->bytes += sv->slot_bytes[s];
        }
        float *n2 = LSLOT(sv, i, LS_N2), *a = LSLOT(sv, i, LS_A), *b = LSLOT(sv, i, LS_B);
        kern_rmsnorm_forward(n2, LSLOT(sv, i, LS_RSTD2), LSLOT(sv, i, LS_H),
                             layer_param(st, params, i, LLAMA_T_MLP_NORM), N, d);
        kern_matmul_forward(a, n2, layer_param(st, params, i, LLAMA_T_W1), N, d, ff);
        kern_matmul_forward(b, n2, layer_param(st, params, i, LLAMA_T_W3), N, d, ff);
        kern_swiglu_forward(LSLOT(sv, i, LS_HS), a, b, (size_t)N * ff);
    }
    sv->state = 1;
    return 0;
}

/* Recompute, after a forward: copies the micro-batch's inputs into the
 * object and frees every activation, leaving state 3 ("inputs only").
 * Returns 0, or -1 when the copies cannot be allocated (the full forward
 * state is then kept, which is still correct, only larger). */
static int keep_inputs_only(const llama_stage *st, llama_saved *sv, const int32_t *tokens,
                            const float *act_in, const int32_t *targets)
{
    size_t N = (size_t)sv->batch * st->cfg.seq_len;
    size_t in_bytes = rc_input_bytes(st, N);
    size_t tg_bytes = st->has_head ? N * sizeof(int32_t) : 0;
    /* from the stage's pool, like the slots: the ledger counts them as
     * saved activations, which llama_saved_plan prices them as */
    sv->rc_input = sv_alloc(sv, in_bytes);
    sv->rc_targets = tg_bytes ? sv_alloc(sv, tg_bytes) : NULL;
    if (!sv->rc_input || (tg_bytes && !sv->rc_targets)) {
        sv_release(sv, sv->rc_input, in_bytes);
        if (sv->rc_targets)
            sv_release(sv, sv->rc_targets, tg_bytes);
        sv->rc_input = NULL;
        sv->rc_targets = NULL;
        return -1;
    }
    memcpy(sv->rc_input, st->has_embedding ? (const void *)tokens : (const void *)act_in, in_bytes);
    if (tg_bytes)
        memcpy(sv->rc_targets, targets, tg_bytes);
    release_phase(sv, PH_F_KEEP | PH_F_ONLY);
    sv->rc_bytes = in_bytes + tg_bytes;
    sv->bytes += sv->rc_bytes;
    sv->state = 3;
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Forward                                                                 */
/* ---------------------------------------------------------------------- */

/* Forward of the memory block of local layer i (in place of the SwiGLU
 * MLP): reads LS_N2, fills the layer's memory F slots and writes the block
 * output (without the residual) into out[N,d].  Returns 0 or -1 (scratch). */
static int memory_forward(const llama_stage *st, const float *params,
                          llama_saved *sv, int i, float *out)
{
    mem_shape ms = stage_mem_shape(st);
    int N = sv->batch * st->cfg.seq_len, d = ms.d, v = ms.v_dim;
    float *n2 = LSLOT(sv, i, LS_N2), *q = LSLOT(sv, i, LS_MQ);
    int32_t *idx = (int32_t *)LSLOT(sv, i, LS_MIDX);
    float *w = LSLOT(sv, i, LS_MW), *g = LSLOT(sv, i, LS_MG);
    float *e = LSLOT(sv, i, LS_ME), *u = LSLOT(sv, i, LS_MU);
    kern_matmul_forward(q, n2, layer_param(st, params, i, LLAMA_T_MEM_QUERY), N, d,
                        ms.heads * ms.k_dim);
    if (kern_memory_lookup(idx, w, q, layer_param(st, params, i, LLAMA_T_MEM_KEYS),
                           &ms, N) != 0)
        return -1;
    kern_memory_bag_forward(e, idx, w, layer_param(st, params, i, LLAMA_T_MEM_VALUES),
                            &ms, N);
    kern_matmul_forward(g, n2, layer_param(st, params, i, LLAMA_T_MEM_SWILU), N, d, v);
    kern_swiglu_forward(u, g, e, (size_t)N * v); /* u = silu(g) ⊙ e */
    kern_matmul_forward(out, u, layer_param(st, params, i, LLAMA_T_MEM_OUT), N, v, d);
    return 0;
}

/* Forward of local layer i: reads LS_X, writes every F slot of the layer
 * and the layer output into out[N,d].  Returns 0 or -1 (attention scratch). */
static int layer_forward(const llama_stage *st, const float *params,
                         llama_saved *sv, int i, float *out)
{
    const zb_model *m = &st->cfg;
    int B = sv->batch, T = m->seq_len, N = B * T;
    int d = m->d_model, ff = m->d_ff, qd = st->q_dim, kvd = st->kv_dim;
    float *x = LSLOT(sv, i, LS_X), *n1 = LSLOT(sv, i, LS_N1);
    float *q = LSLOT(sv, i, LS_Q), *k = LSLOT(sv, i, LS_K);
    float *v = LSLOT(sv, i, LS_V), *att = LSLOT(sv, i, LS_ATT);
    float *h = LSLOT(sv, i, LS_H), *n2 = LSLOT(sv, i, LS_N2);
    float *a = LSLOT(sv, i, LS_A), *b = LSLOT(sv, i, LS_B);
    float *hs = LSLOT(sv, i, LS_HS);

    kern_rmsnorm_forward(n1, LSLOT(sv, i, LS_RSTD1), x,
                         layer_param(st, params, i, LLAMA_T_ATTN_NORM), N, d);
    kern_matmul_forward(q, n1, layer_param(st, params, i, LLAMA_T_WQ), N, d, qd);
    kern_matmul_forward(k, n1, layer_param(st, params, i, LLAMA_T_WK), N, d, kvd);
    kern_matmul_forward(v, n1, layer_param(st, params, i, LLAMA_T_WV), N, d, kvd);
    kern_rope(q, N, T, m->n_heads, st->head_dim, m->rope_theta, 0);
    kern_rope(k, N, T, m->n_kv_heads, st->head_dim, m->rope_theta, 0);
    if (kern_attention_forward(att, LSLOT(sv, i, LS_LSE), q, k, v, B, T,
                               m->n_heads, m->n_kv_heads, st->head_dim) != 0)
        return -1;
    /* h = x + att·wo */
    kern_matmul_forward(h, att, layer_param(st, params, i, LLAMA_T_WO), N, qd, d);
    kern_add(h, x, h, (size_t)N * d);
    kern_rmsnorm_forward(n2, LSLOT(sv, i, LS_RSTD2), h,
                         layer_param(st, params, i, LLAMA_T_MLP_NORM), N, d);
    if (local_is_memory(st, i)) {
        if (memory_forward(st, params, sv, i, out) != 0)
            return -1;
    } else {
        kern_matmul_forward(a, n2, layer_param(st, params, i, LLAMA_T_W1), N, d, ff);
        kern_matmul_forward(b, n2, layer_param(st, params, i, LLAMA_T_W3), N, d, ff);
        kern_swiglu_forward(hs, a, b, (size_t)N * ff);
        /* out = hs·w2 */
        kern_matmul_forward(out, hs, layer_param(st, params, i, LLAMA_T_W2), N, ff, d);
    }
    /* out = h + block output */
    kern_add(out, h, out, (size_t)N * d);
    return 0;
}

int llama_stage_forward(const llama_stage *st, const float *params,
                        const int32_t *tokens, const float *act_in,
                        const int32_t *targets, llama_saved *sv,
                        float *act_out, float *loss, float *logits,
                        zb_err *err)
{
    const zb_model *m = &st->cfg;
    assert(sv && sv->st == st);
    assert(st->has_embedding ? tokens != NULL : act_in != NULL);
    assert(st->has_head ? (targets != NULL && loss != NULL) : act_out != NULL);
    if (sv->state != 0)
        return zb_fail(err, "forward: saved state still holds a micro-batch");
    int B = sv->batch, T = m->seq_len, N = B * T, d = m->d_model, V = m->vocab;
    if (st->has_embedding)
        for (int n = 0; n < N; n++)
            if (tokens[n] < 0 || tokens[n] >= V)
                return zb_fail(err, "forward: token %d at position %d outside "
                               "the vocabulary [0, %d)", tokens[n], n, V);
    if (st->has_head)
        for (int n = 0; n < N; n++)
            if (targets[n] < 0 || targets[n] >= V)
                return zb_fail(err, "forward: target %d at position %d outside "
                               "the vocabulary [0, %d)", targets[n], n, V);
    if (acquire_phase(sv, PH_F_KEEP | PH_F_ONLY) != 0)
        return zb_fail(err, "forward: out of memory for %d sequences' "
                       "activations", B);

    /* the stream x enters layer 0's LS_X; with no layers, the head's input
     * or (embedding-only stage) the output directly */
    float *x0 = sv->n_local > 0 ? LSLOT(sv, 0, LS_X)
                : st->has_head || st->norm_only ? HSLOT(sv, HS_XF) : act_out;
    if (st->has_embedding) {
        memcpy(ESLOT(sv, ES_TOKENS), tokens, sizeof(int32_t) * (size_t)N);
        kern_embedding_forward(x0, tokens, params + st->tensors[0].offset, N, d);
    } else {
        memcpy(x0, act_in, sizeof(float) * (size_t)N * d);
    }
    for (int i = 0; i < sv->n_local; i++) {
        float *out = i + 1 < sv->n_local ? LSLOT(sv, i + 1, LS_X)
                     : st->has_head || st->norm_only ? HSLOT(sv, HS_XF) : act_out;
        if (layer_forward(st, params, sv, i, out) != 0) {
            release_phase(sv, PH_F_KEEP | PH_F_ONLY);
            return zb_fail(err, "forward: out of memory for attention or memory scratch");
        }
    }
    if (st->has_head) {
        const llama_tensor *gf = &st->tensors[st->n_tensors - 2];
        const llama_tensor *H = &st->tensors[st->n_tensors - 1];
        assert(gf->kind == LLAMA_T_FINAL_NORM && H->kind == LLAMA_T_LM_HEAD);
        float *nf = HSLOT(sv, HS_NF), *lg = HSLOT(sv, HS_LOGITS);
        kern_rmsnorm_forward(nf, HSLOT(sv, HS_RSTD), HSLOT(sv, HS_XF),
                             params + gf->offset, N, d);
        kern_matmul_forward(lg, nf, params + H->offset, N, d, V);
        memcpy(HSLOT(sv, HS_TARGETS), targets, sizeof(int32_t) * (size_t)N);
        *loss = (float)kern_crossentropy_forward(HSLOT(sv, HS_LSE), lg,
                                                 targets, N, V);
        if (logits)
            memcpy(logits, lg, sizeof(float) * (size_t)N * V);
    } else if (st->norm_only) {
        const llama_tensor *gf = &st->tensors[st->n_tensors - 1];
        assert(gf->kind == LLAMA_T_FINAL_NORM);
        kern_rmsnorm_forward(act_out, HSLOT(sv, HS_RSTD), HSLOT(sv, HS_XF),
                             params + gf->offset, N, d);
    }
    sv->state = 1;
    if (sv->recompute == LLAMA_RC_FULL)
        (void)keep_inputs_only(st, sv, tokens, act_in, targets);
    else if (sv->recompute == LLAMA_RC_MLP)
        drop_mlp_blocks(sv);
    return 0;
}

/* Recompute, at B: reruns the forward from the kept inputs so that the
 * object holds exactly what the original forward left (the forward is a
 * pure function of params and inputs, determinism contract 2, so B then
 * sees the same bits).  The loss and the stage output are recomputed and
 * thrown away.  Returns 0 or -1 with err set (state 3 kept for a retry). */
static int rerun_forward(const llama_stage *st, const float *params, llama_saved *sv,
                         zb_err *err)
{
    size_t N = (size_t)sv->batch * st->cfg.seq_len;
    float *out = NULL, loss = 0;
    if (!st->has_head && !(out = malloc(sizeof(float) * N * st->cfg.d_model)))
        return zb_fail(err, "backward B: out of memory recomputing the forward");
    void *input = sv->rc_input;
    int32_t *targets = sv->rc_targets;
    sv->state = 0;
    sv->recompute = LLAMA_RC_NONE;
    int rc = llama_stage_forward(st, params, st->has_embedding ? input : NULL,
                                 st->has_embedding ? NULL : input, targets, sv, out, &loss,
                                 NULL, err);
    sv->recompute = LLAMA_RC_FULL;
    free(out);
    if (rc != 0) {
        sv->state = 3;
        return -1;
    }
    release_rc_inputs(sv);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Backward B                                                              */
/* ---------------------------------------------------------------------- */

/* Scratch of one B call: gradients that do not outlive it. */
typedef struct b_scratch {
    float *nd;   /* [N,d]  rmsnorm input-grad and matmul partial sums */
    float *att;  /* [N,qd] grad of the attention output */
    float *ffb;  /* [N,max(ff,v)] grad of silu(a)·b, or of a memory's u */
} b_scratch;

/* dst[j] = a[j] + b[j] over n floats (dst may alias a). */
static void add_into(float *dst, const float *a, const float *b, size_t n)
{
    kern_add(dst, a, b, n);
}

/* B of the memory block of local layer i: from LS_DOUT and the memory F
 * slots, fills LS_MDG, LS_MDE, LS_MDS, LS_MDQ and writes LS_DN2.  Returns 0
 * or -1 (scratch). */
static int memory_backward_b(const llama_stage *st, const float *params,
                             llama_saved *sv, int i, const b_scratch *s)
{
    mem_shape ms = stage_mem_shape(st);
    int N = sv->batch * st->cfg.seq_len, d = ms.d, v = ms.v_dim;
    float *dg = LSLOT(sv, i, LS_MDG), *de = LSLOT(sv, i, LS_MDE);
    float *dq = LSLOT(sv, i, LS_MDQ), *dn2 = LSLOT(sv, i, LS_DN2);
    /* out = u·Wout, u = silu(g) ⊙ e */
    kern_matmul_backward_b(s->ffb, LSLOT(sv, i, LS_DOUT),
                           layer_param(st, params, i, LLAMA_T_MEM_OUT), N, v, d);
    kern_swiglu_backward(dg, de, s->ffb, LSLOT(sv, i, LS_MG), LSLOT(sv, i, LS_ME),
                         (size_t)N * v);
    if (kern_memory_backward_b(LSLOT(sv, i, LS_MDS), dq, de,
                               (const int32_t *)LSLOT(sv, i, LS_MIDX), LSLOT(sv, i, LS_MW),
                               layer_param(st, params, i, LLAMA_T_MEM_VALUES),
                               layer_param(st, params, i, LLAMA_T_MEM_KEYS), &ms, N) != 0)
        return -1;
    /* q = n2·Wq and g = n2·Wsw both read n2 */
    kern_matmul_backward_b(dn2, dq, layer_param(st, params, i, LLAMA_T_MEM_QUERY), N, d,
                           ms.heads * ms.k_dim);
    kern_matmul_backward_b(s->nd, dg, layer_param(st, params, i, LLAMA_T_MEM_SWILU), N, d, v);
    add_into(dn2, dn2, s->nd, (size_t)N * d);
    return 0;
}

/* B of local layer i: reads LS_DOUT and the forward slots, fills the
 * layer's B_KEEP slots and writes the gradient of the layer input to dx. */
static int layer_backward_b(const llama_stage *st, const float *params,
                            llama_saved *sv, int i, float *dx,
                            const b_scratch *s)
{
    const zb_model *m = &st->cfg;
    int B = sv->batch, T = m->seq_len, N = B * T;
    int d = m->d_model, ff = m->d_ff, qd = st->q_dim, kvd = st->kv_dim;
    size_t Nd = (size_t)N * d;
    float *dout = LSLOT(sv, i, LS_DOUT), *da = LSLOT(sv, i, LS_DA);
    float *db = LSLOT(sv, i, LS_DB), *dn2 = LSLOT(sv, i, LS_DN2);
    float *dh = LSLOT(sv, i, LS_DH), *dq = LSLOT(sv, i, LS_DQ);
    float *dk = LSLOT(sv, i, LS_DK), *dv = LSLOT(sv, i, LS_DV);
    float *dn1 = LSLOT(sv, i, LS_DN1);

    if (local_is_memory(st, i)) {
        if (memory_backward_b(st, params, sv, i, s) != 0)
            return -1;
    } else {
        /* MLP: out = h + (silu(a)⊙b)·w2,  a = n2·w1,  b = n2·w3 */
        kern_matmul_backward_b(s->ffb, dout, layer_param(st, params, i, LLAMA_T_W2), N, ff, d);
        kern_swiglu_backward(da, db, s->ffb, LSLOT(sv, i, LS_A), LSLOT(sv, i, LS_B),
                             (size_t)N * ff);
        kern_matmul_backward_b(dn2, da, layer_param(st, params, i, LLAMA_T_W1), N, d, ff);
        kern_matmul_backward_b(s->nd, db, layer_param(st, params, i, LLAMA_T_W3), N, d, ff);
        add_into(dn2, dn2, s->nd, Nd);
    }
    kern_rmsnorm_backward_b(s->nd, dn2, LSLOT(sv, i, LS_H), LSLOT(sv, i, LS_RSTD2),
                            layer_param(st, params, i, LLAMA_T_MLP_NORM), N, d);
    add_into(dh, dout, s->nd, Nd);

    /* attention: h = x + att·wo */
    kern_matmul_backward_b(s->att, dh, layer_param(st, params, i, LLAMA_T_WO), N, qd, d);
    if (kern_attention_backward(dq, dk, dv, s->att, LSLOT(sv, i, LS_Q),
                                LSLOT(sv, i, LS_K), LSLOT(sv, i, LS_V),
                                LSLOT(sv, i, LS_ATT), LSLOT(sv, i, LS_LSE), B, T,
                                m->n_heads, m->n_kv_heads, st->head_dim) != 0)
        return -1;
    kern_rope(dq, N, T, m->n_heads, st->head_dim, m->rope_theta, 1);
    kern_rope(dk, N, T, m->n_kv_heads, st->head_dim, m->rope_theta, 1);
    kern_matmul_backward_b(dn1, dq, layer_param(st, params, i, LLAMA_T_WQ), N, d, qd);
    kern_matmul_backward_b(s->nd, dk, layer_param(st, params, i, LLAMA_T_WK), N, d, kvd);
    add_into(dn1, dn1, s->nd, Nd);
    kern_matmul_backward_b(s->nd, dv, layer_param(st, params, i, LLAMA_T_WV), N, d, kvd);
    add_into(dn1, dn1, s->nd, Nd);
    kern_rmsnorm_backward_b(s->nd, dn1, LSLOT(sv, i, LS_X), LSLOT(sv, i, LS_RSTD1),
                            layer_param(st, params, i, LLAMA_T_ATTN_NORM), N, d);
    add_into(dx, dh, s->nd, Nd);
    return 0;
}

int llama_stage_backward_b(const llama_stage *st, const float *params,
                           llama_saved *sv, float dloss, const float *dy_in,
                           float *dx_out, zb_err *err)
{
    const zb_model *m = &st->cfg;
    assert(sv && sv->st == st);
    assert(st->has_head || dy_in != NULL);
    assert(st->has_embedding || dx_out != NULL);
    if (sv->state == 4 && rerun_mlp_blocks(st, params, sv, err) != 0)
        return -1;
    if (sv->state == 3 && rerun_forward(st, params, sv, err) != 0)
        return -1;
    if (sv->state != 1)
        return zb_fail(err, "backward B: saved state holds no forward pass");
    int N = sv->batch * m->seq_len, d = m->d_model, V = m->vocab;
    size_t Nd = (size_t)N * d;
    b_scratch s;
    /* per-thread scratch, kept across calls (team.h); the memory layer's
     * value gradient shares the [N, d_ff] buffer, so it is sized for both */
    size_t ffb = (size_t)m->d_ff;
    if (st->n_memory > 0 && (size_t)m->memory.value_dim > ffb)
        ffb = (size_t)m->memory.value_dim;
    s.nd = kern_scratch(KERN_SCRATCH_B_ND, sizeof(float) * Nd);
    s.att = kern_scratch(KERN_SCRATCH_B_ATT, sizeof(float) * (size_t)N * st->q_dim);
    s.ffb = kern_scratch(KERN_SCRATCH_B_FF, sizeof(float) * (size_t)N * ffb);
    if (!s.nd || !s.att || !s.ffb || acquire_phase(sv, PH_B_KEEP) != 0)
        return zb_fail(err, "backward B: out of memory for gradients");

    /* gradient of the stream leaving the last layer (or entering the head) */
    float *dx_emb = st->has_embedding ? (float *)ESLOT(sv, ES_DX) : dx_out;
    float *dstream = sv->n_local > 0 ? LSLOT(sv, sv->n_local - 1, LS_DOUT) : dx_emb;
    if (st->has_head) {
        const llama_tensor *gf = &st->tensors[st->n_tensors - 2];
        const llama_tensor *H = &st->tensors[st->n_tensors - 1];
        float *dlg = HSLOT(sv, HS_DLOGITS), *dnf = HSLOT(sv, HS_DNF);
        kern_crossentropy_backward(dlg, HSLOT(sv, HS_LOGITS), HSLOT(sv, HS_LSE),
                                   (const int32_t *)HSLOT(sv, HS_TARGETS), dloss,
                                   N, V);
        kern_matmul_backward_b(dnf, dlg, params + H->offset, N, d, V);
        kern_rmsnorm_backward_b(dstream, dnf, HSLOT(sv, HS_XF), HSLOT(sv, HS_RSTD),
                                params + gf->offset, N, d);
    } else if (st->norm_only) {
        const llama_tensor *gf = &st->tensors[st->n_tensors - 1];
        memcpy(HSLOT(sv, HS_DNF), dy_in, sizeof(float) * Nd);
        kern_rmsnorm_backward_b(dstream, HSLOT(sv, HS_DNF), HSLOT(sv, HS_XF),
                                HSLOT(sv, HS_RSTD), params + gf->offset, N, d);
    } else {
        memcpy(dstream, dy_in, sizeof(float) * Nd);
    }
    int rc = 0;
    for (int i = sv->n_local - 1; i >= 0 && rc == 0; i--) {
        float *dx = i > 0 ? LSLOT(sv, i - 1, LS_DOUT) : dx_emb;
        rc = layer_backward_b(st, params, sv, i, dx, &s);
    }
    if (rc != 0) {
        release_phase(sv, PH_B_KEEP);
        return zb_fail(err, "backward B: out of memory for attention or memory scratch");
    }
    if (!st->has_embedding)
        assert(dx_emb == dx_out);
    release_phase(sv, PH_F_ONLY);
    sv->state = 2;
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Backward W                                                              */
/* ---------------------------------------------------------------------- */

int llama_stage_backward_w(const llama_stage *st, llama_saved *sv,
                           float *grads, zb_err *err)
{
    const zb_model *m = &st->cfg;
    assert(sv && sv->st == st);
    if (sv->state != 2)
        return zb_fail(err, "backward W: saved state holds no B pass");
    int N = sv->batch * m->seq_len, d = m->d_model, V = m->vocab;
    int ff = m->d_ff, qd = st->q_dim, kvd = st->kv_dim;
    size_t biggest = 0;
    for (int t = 0; t < st->n_tensors; t++)
        if (st->tensors[t].count > biggest && st->tensors[t].kind != LLAMA_T_MEM_VALUES)
            biggest = st->tensors[t].count;
    /* dW of this micro-batch lands here (written, beta 0), then is added
     * into grads: the result does not depend on grads' prior contents */
    float *tmp = kern_scratch(KERN_SCRATCH_W_TMP, sizeof(float) * (biggest > 0 ? biggest : 1));
    mem_shape ms = stage_mem_shape(st);
    void *vscratch = st->n_memory > 0 ? malloc(kern_memory_values_scratch_bytes(&ms, N)) : NULL;
    if (!tmp || (st->n_memory > 0 && !vscratch)) {
        free(vscratch);
        return zb_fail(err, "backward W: out of memory for a %zu-float "
                       "temporary", biggest);
    }
    for (int t = 0; t < st->n_tensors; t++) {
        const llama_tensor *ten = &st->tensors[t];
        int i = ten->layer - st->l0; /* local layer, for layer tensors */
        switch (ten->kind) {
        case LLAMA_T_EMBEDDING:
            kern_embedding_backward_w(tmp, (const int32_t *)ESLOT(sv, ES_TOKENS),
                                      (const float *)ESLOT(sv, ES_DX), N, d, V);
            break;
        case LLAMA_T_ATTN_NORM:
            kern_rmsnorm_backward_w(tmp, LSLOT(sv, i, LS_DN1), LSLOT(sv, i, LS_X),
                                    LSLOT(sv, i, LS_RSTD1), N, d);
            break;
        case LLAMA_T_WQ:
            kern_matmul_backward_w(tmp, LSLOT(sv, i, LS_N1), LSLOT(sv, i, LS_DQ), N, d, qd);
            break;
        case LLAMA_T_WK:
            kern_matmul_backward_w(tmp, LSLOT(sv, i, LS_N1), LSLOT(sv, i, LS_DK), N, d, kvd);
            break;
        case LLAMA_T_WV:
            kern_matmul_backward_w(tmp, LSLOT(sv, i, LS_N1), LSLOT(sv, i, LS_DV), N, d, kvd);
            break;
        case LLAMA_T_WO:
            kern_matmul_backward_w(tmp, LSLOT(sv, i, LS_ATT), LSLOT(sv, i, LS_DH), N, qd, d);
            break;
        case LLAMA_T_MLP_NORM:
            kern_rmsnorm_backward_w(tmp, LSLOT(sv, i, LS_DN2), LSLOT(sv, i, LS_H),
                                    LSLOT(sv, i, LS_RSTD2), N, d);
            break;
        case LLAMA_T_W1:
            kern_matmul_backward_w(tmp, LSLOT(sv, i, LS_N2), LSLOT(sv, i, LS_DA), N, d, ff);
            break;
        case LLAMA_T_W3:
            kern_matmul_backward_w(tmp, LSLOT(sv, i, LS_N2), LSLOT(sv, i, LS_DB), N, d, ff);
            break;
        case LLAMA_T_W2:
            kern_matmul_backward_w(tmp, LSLOT(sv, i, LS_HS), LSLOT(sv, i, LS_DOUT), N, ff, d);
            break;
        case LLAMA_T_FINAL_NORM:
            kern_rmsnorm_backward_w(tmp, HSLOT(sv, HS_DNF), HSLOT(sv, HS_XF),
                                    HSLOT(sv, HS_RSTD), N, d);
            break;
        case LLAMA_T_LM_HEAD:
            kern_matmul_backward_w(tmp, HSLOT(sv, HS_NF), HSLOT(sv, HS_DLOGITS), N, d, V);
            break;
        case LLAMA_T_MEM_QUERY:
            kern_matmul_backward_w(tmp, LSLOT(sv, i, LS_N2), LSLOT(sv, i, LS_MDQ), N, d,
                                   ms.heads * ms.k_dim);
            break;
        case LLAMA_T_MEM_KEYS:
            kern_memory_keys_backward_w(tmp, LSLOT(sv, i, LS_MDS), LSLOT(sv, i, LS_MQ),
                                        (const int32_t *)LSLOT(sv, i, LS_MIDX), &ms, N);
            break;
        case LLAMA_T_MEM_SWILU:
            kern_matmul_backward_w(tmp, LSLOT(sv, i, LS_N2), LSLOT(sv, i, LS_MDG), N, d,
                                   ms.v_dim);
            break;
        case LLAMA_T_MEM_OUT:
            kern_matmul_backward_w(tmp, LSLOT(sv, i, LS_MU), LSLOT(sv, i, LS_DOUT), N,
                                   ms.v_dim, d);
            break;
        case LLAMA_T_MEM_VALUES:
            /* sparse: each memory layer reading this table adds its touched
             * rows, in layer order (one layer unless the table is shared) */
            for (int j = 0; j < sv->n_local; j++)
                if (local_is_memory(st, j) &&
                    layer_tensor(st, j, LLAMA_T_MEM_VALUES) == ten)
                    kern_memory_values_backward_w(grads + ten->offset,
                                                  (const int32_t *)LSLOT(sv, j, LS_MIDX),
                                                  LSLOT(sv, j, LS_MW), LSLOT(sv, j, LS_MDE),
                                                  &ms, N, vscratch);
            continue;
        default:
            assert(0 && "bad tensor kind");
        }
        float *g = grads + ten->offset;
        kern_add(g, g, tmp, ten->count);
    }
    free(vscratch);
    release_phase(sv, PH_F_KEEP | PH_F_ONLY | PH_B_KEEP);
    assert(sv->bytes == 0);
    sv->state = 0;
    return 0;
}

int llama_stage_backward(const llama_stage *st, const float *params,
                         llama_saved *sv, float dloss, const float *dy_in,
                         float *dx_out, float *grads, zb_err *err)
{
    if (llama_stage_backward_b(st, params, sv, dloss, dy_in, dx_out, err) != 0)
        return -1;
    return llama_stage_backward_w(st, sv, grads, err);
}

void llama_grads_zero(const llama_stage *st, float *grads)
{
    memset(grads, 0, sizeof(float) * st->n_params);
}

void llama_grads_add(const llama_stage *st, float *acc, const float *scratch)
{
    kern_add(acc, acc, scratch, st->n_params);
}
