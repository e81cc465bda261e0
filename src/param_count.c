/*
 * param_count.c: parameter counts of models and stages (param_count.h).
 * Each function adds the tensors of llama.h's layout, in that order, so
 * that a reader can put the two side by side.
 */
#include "src/param_count.h"

/* Width of the attention's query and key/value projections: heads times
 * head_dim, as llama_stage_init lays them out (head_dim = d / n_heads). */
static double q_width(const zb_model *m)
{
    return (double)(m->d_model / m->n_heads) * m->n_heads;
}

static double kv_width(const zb_model *m)
{
    return (double)(m->d_model / m->n_heads) * m->n_kv_heads;
}

/* The attention half of a layer: its norm, wq, wk, wv, wo, and the MLP's
 * norm (GPT: LayerNorm weights and biases, and the projections' biases). */
static double attention_half(const zb_model *m)
{
    double d = m->d_model, q = q_width(m), kv = kv_width(m);
    double p = 2 * d + d * q + 2 * d * kv + q * d;
    if (!m->swiglu)
        p += 2 * d + (q + 2 * kv) + d; /* LayerNorm biases, qkv and output biases */
    return p;
}

double param_plain_layer(const zb_model *m)
{
    double d = m->d_model, ff = m->d_ff;
    if (m->swiglu)
        return attention_half(m) + 3 * d * ff; /* w1, w3, w2 */
    return attention_half(m) + 2 * d * ff + ff + d; /* up, down and their biases */
}

double param_value_table(const zb_model *m)
{
    const zb_memory *mm = &m->memory;
    if (mm->n_layers <= 0)
        return 0;
    return (double)mm->n_keys * mm->n_keys * mm->value_dim;
}

double param_memory_layer(const zb_model *m, int with_values)
{
    const zb_memory *mm = &m->memory;
    double d = m->d_model;
    double query = d * mm->heads * mm->k_dim;
    double keys = (double)mm->heads * 2 * mm->n_keys * (mm->k_dim / 2);
    double gate = d * mm->value_dim, out = (double)mm->value_dim * d;
    return attention_half(m) + query + keys + (with_values ? param_value_table(m) : 0) + gate
           + out;
}

double param_embedding(const zb_model *m)
{
    double p = (double)m->vocab * m->d_model;
    if (m->rope_theta == 0) /* learned absolute positions (GPT) */
        p += (double)m->seq_len * m->d_model;
    return p;
}

double param_head(const zb_model *m, int head)
{
    if (head == PARAM_HEAD_NONE)
        return 0;
    double norm = (m->swiglu ? 1 : 2) * (double)m->d_model; /* GPT's LayerNorm has a bias */
    return norm + (head == PARAM_HEAD_FULL ? (double)m->d_model * m->vocab : 0);
}

double param_layer(const zb_model *m, int layer)
{
    if (!model_is_memory_layer(m, layer))
        return param_plain_layer(m);
    const zb_memory *mm = &m->memory;
    return param_memory_layer(m, !mm->shared_values || layer == mm->layers[0]);
}

double param_stage(const zb_model *m, int l0, int l1, int has_embedding, int head)
{
    double p = has_embedding ? param_embedding(m) : 0;
    for (int l = l0; l < l1; l++)
        p += param_layer(m, l);
    return p + param_head(m, head);
}

double param_count(const zb_model *m)
{
    double p = param_stage(m, 0, m->n_layers, 1, PARAM_HEAD_FULL);
    if (m->tied_embedding)
        p -= (double)m->vocab * m->d_model;
    return p;
}
