/*
 * cost_parts.c: the cost model's pieces (cost_parts.h).
 *
 * Three pieces make a stage: transformer layers, the embedding (stage 0) and
 * the head + loss (stage S-1).  Each piece has FLOPs per op (converted to
 * time with the GPU's peak and efficiency, or taken from a profile) and the
 * activation bytes it keeps from F to B (M_B) and from B to W (M_W).
 * docs/cost-model.md derives every line; the comments here only point at
 * the terms.  Parameters are param_count.h's, the count the kernels lay out.
 */
#include "src/cost_parts.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "src/param_count.h"

void cost_options_default(cost_options *o)
{
    memset(o, 0, sizeof *o);
    o->flash_attention = 1;
    o->zero1_dp = 1;
    o->reserve_bytes = COST_RESERVE_BYTES;
}

double cost_bytes_per_param(const zb_model *m, const cost_options *o)
{
    double dp = o->zero1_dp > 1 ? o->zero1_dp : 1;
    if (m->dtype == ZB_FP32)
        return 4 + 4 + 8 / dp;     /* weights, grads, Adam m and v */
    return 2 + 4 + 12 / dp;        /* bf16 weights, fp32 grads, fp32 master + m + v */
}

double cost_t_comm(const zb_model *m, const zb_gpu *g, const cost_options *o)
{
    if (o->profile && o->profile->t_comm >= 0)
        return o->profile->t_comm * ((double)m->micro_batch / o->profile->micro_batch);
    double bytes = (double)zb_dtype_bytes(m->dtype) * m->seq_len * m->micro_batch * m->d_model;
    return bytes / g->link_bw + g->link_latency;
}

double cost_t_transfer(const zb_model *m, const zb_gpu *g, const cost_options *o, int d1, int d2)
{
    if (d1 == d2)
        return 0;
    int per = o->devices_per_node;
    if (per <= 0 || d1 / per == d2 / per || (o->profile && o->profile->t_comm >= 0))
        return cost_t_comm(m, g, o);
    double bytes = (double)zb_dtype_bytes(m->dtype) * m->seq_len * m->micro_batch * m->d_model;
    return bytes / gpu_inter_node_bw(g) + gpu_inter_node_latency(g);
}

int cost_stage_recomputes(const cost_options *o, int i)
{
    int level = o->recompute_stage ? o->recompute_stage[i] : o->recompute;
    assert(level >= COST_RC_NONE && level <= COST_RC_MLP);
    return level;
}

/* FLOP-based layer: zero-bubble Table 1 generalised (docs/cost-model.md). */
static void estimate_layer(const zb_model *m, const cost_options *o, cost_part *l)
{
    double e = zb_dtype_bytes(m->dtype);
    double h = m->d_model, f = m->d_ff, s = m->seq_len, a = m->n_heads;
    double t = s * m->micro_batch; /* tokens per micro-batch */
    double kvr = (double)m->n_kv_heads / m->n_heads;
    int gpt = !m->swiglu; /* GPT-style layers train with dropout, Llama-style without */

    double proj = 2 * t * h * h * (2 + 2 * kvr);          /* Q, K, V, O */
    double mlp = 2 * t * h * f * (m->swiglu ? 3 : 2);       /* up(, gate), down */
    double attn = 4 * t * s * h;                            /* QK^T and AV, every (query, key) pair */
    /* Causal flash attention skips the blocks above the diagonal, about
     * half of the pairs, and its backward does 2.5x its forward's work
     * (FlashAttention-2, Dao 2023, section 3 and its benchmark's FLOP
     * counter).  Without flash the masked s x s matmuls run in full. */
    double attn_f = o->flash_attention ? 0.5 * attn : attn;
    double attn_b = o->flash_attention ? 2.5 * attn_f : 2 * attn;
    l->f_flops = proj + mlp + attn_f;
    l->b_flops = proj + mlp + attn_b;
    l->w_flops = proj + mlp;
    /* MFU counts attention non-causally, as Megatron and PaLM do. */
    l->useful_flops = 3 * (proj + mlp) + 3 * attn;

    /* M_B: what F keeps for B (Korthikanti et al. 2022, Table 1 of ZB). */
    double attn_keep = e * t * h        /* norm input */
                     + e * t * h        /* QKV input (norm output) */
                     + e * t * h * (1 + 2 * kvr) /* Q, K, V */
                     + e * t * h        /* O projection input */
                     + (gpt ? t * h : 0); /* output dropout mask */
    double scores = o->flash_attention
                  ? 4 * a * t                               /* softmax log-sum-exp, fp32 */
                  : e * a * s * t + (gpt ? a * s * t + e * a * s * t : 0); /* softmax (+ mask, dropout) */
    double mlp_keep = e * t * h + e * t * h                 /* norm input, MLP input */
                    + (m->swiglu ? 3 * e * t * f            /* gate, up, silu(gate)*up */
                                 : 2 * e * t * f + t * h);  /* GeLU in/out, dropout mask */
    double full = attn_keep + scores + mlp_keep;
    /* M_W: inputs of every weight matmul and the gradients of their outputs. */
    double inputs = 3 * h + f;
    double out_grads = h * (1 + 2 * kvr) + h + (m->swiglu ? 2 * f : f) + h;
    l->m_w = e * t * (inputs + out_grads);
    /* What the MLP level drops: the pre-MLP norm's output and, for SwiGLU,
     * gate, up and their product (GeLU: its input and output); it keeps
     * the block input (the residual after attention, the norm's input). */
    double mlp_drop = e * t * h + (m->swiglu ? 3 * e * t * f : 2 * e * t * f);
    if (o->recompute == COST_RC_FULL) {
        l->m_b = e * t * h;                 /* only the layer input is checkpointed */
        l->transient = full;                /* B rebuilds the whole layer */
        l->b_flops += l->f_flops;           /* ...by running F again */
    } else if (o->recompute == COST_RC_MLP) {
        l->m_b = full - mlp_drop;
        l->transient = mlp_drop;            /* B rebuilds one layer's MLP block */
        l->b_flops += mlp;                  /* ...by running its matmuls again */
    } else {
        l->m_b = full;
        l->transient = 0;
    }
    l->params = param_plain_layer(m);
}

static void estimate_embedding(const zb_model *m, cost_part *p)
{
    double e = zb_dtype_bytes(m->dtype), t = (double)m->seq_len * m->micro_batch;
    memset(p, 0, sizeof *p);
    p->m_b = 8 * t;                 /* int64 token ids */
    p->m_w = 8 * t + e * t * m->d_model; /* ids + gradient of the embedding output */
    p->params = param_embedding(m);
}

/* The LM head and its loss per micro-batch; docs/cost-model.md derives
 * both loss kinds. */
static void estimate_head(const zb_model *m, const cost_options *o, cost_part *p)
{
    double e = zb_dtype_bytes(m->dtype), t = (double)m->seq_len * m->micro_batch;
    double h = m->d_model, v = m->vocab;
    memset(p, 0, sizeof *p);
    p->useful_flops = 6 * t * h * v;
    p->params = param_head(m, PARAM_HEAD_FULL);
    if (o->loss == COST_LOSS_FUSED) {
        /* Liger-Kernel's fused linear cross-entropy: F walks the tokens in
         * chunks of about t*h/V, computes the chunk's logits, loss, logit
         * gradient, input gradient and weight gradient, and keeps only the
         * input gradient (and the final-norm input) for B.  No W is left. */
        p->f_flops = 6 * t * h * v;
        p->m_b = 2 * e * t * h;               /* final-norm input, stored input gradient */
        p->m_w = 0;
        double chunk = ceil(t / ceil(v / h));
        p->transient = 2 * 4 * chunk * v;     /* one chunk's fp32 logits and their gradient */
        return;
    }
    p->f_flops = p->b_flops = p->w_flops = 2 * t * h * v;
    p->m_b = 2 * e * t * h          /* final-norm input, head input */
           + e * t * v              /* logits */
           + 4 * t * v;             /* fp32 log-softmax kept for the loss backward */
    p->m_w = e * t * h + e * t * v; /* head input + gradient of the logits */
    p->transient = 4 * t * v;       /* fp32 upcast of the logits inside the loss */
    /* Memory-bound softmax cross-entropy: F reads e*V, writes and re-reads
     * 4*V per token; B reads 4*V and writes e*V. */
    p->hbm_f = t * v * (e + 8);
    p->hbm_b = t * v * (e + 4);
}

static void set_times(cost_part *p, const zb_gpu *g)
{
    double rate = g->peak_flops * g->efficiency;
    double bw = g->hbm_bw > 0 ? g->hbm_bw : INFINITY;
    p->t_f = p->f_flops / rate + p->hbm_f / bw;
    p->t_b = p->b_flops / rate + p->hbm_b / bw;
    p->t_w = p->w_flops / (g->peak_flops * gpu_w_efficiency(g));
}

/* Replaces times and activation memory with a profile's, scaled from its
 * micro-batch size to the model's (linear in tokens). */
static void apply_profile(const profile_part *pp, double scale, cost_part *p)
{
    p->t_f = pp->t_f * scale;
    p->t_b = pp->t_b * scale;
    p->t_w = pp->t_w * scale;
    p->m_b = pp->m_b * scale;
    p->m_w = pp->m_w * scale;
}

int cost_parts(const zb_model *m, const zb_gpu *g, const cost_options *o,
               cost_part *layer, cost_part *embedding, cost_part *head, zb_err *err)
{
    memset(layer, 0, sizeof *layer);
    estimate_layer(m, o, layer);
    estimate_embedding(m, embedding);
    estimate_head(m, o, head);
    set_times(layer, g);
    set_times(embedding, g);
    set_times(head, g);
    const zb_profile *pr = o->profile;
    if (!pr)
        return 0;
    if (pr->seq_len != m->seq_len)
        return zb_fail(err, "profile measured at seq_len %d, model has %d", pr->seq_len, m->seq_len);
    double scale = (double)m->micro_batch / pr->micro_batch;
    cost_part est = *layer;
    apply_profile(&pr->layer, scale, layer);
    apply_profile(&pr->embedding, scale, embedding);
    apply_profile(&pr->head, scale, head);
    /* A profile taken with the other recompute setting: move F's time in
     * or out of B and take M_B from the estimate (docs/cost-model.md). */
    if (o->recompute == COST_RC_MLP) {
        /* B without recompute, plus the MLP's share of F (by FLOPs) */
        if (pr->recompute)
            layer->t_b = fmax(0, layer->t_b - layer->t_f);
        cost_options no = *o;
        no.recompute = COST_RC_NONE;
        cost_part plain;
        estimate_layer(m, &no, &plain);
        double share = est.f_flops > 0 ? (est.b_flops - plain.b_flops) / est.f_flops : 0;
        layer->t_b += share * layer->t_f;
        /* measured in full: less what the MLP level drops (the same slots
         * the CPU kernels free); measured with recompute: the estimate */
        layer->m_b = pr->recompute ? est.m_b : fmax(0, layer->m_b - est.transient);
        layer->transient = est.transient;
    } else if (pr->recompute && !o->recompute) {
        layer->t_b = fmax(0, layer->t_b - layer->t_f);
        cost_options no = *o;
        no.recompute = 0;
        cost_part full;
        estimate_layer(m, &no, &full);
        layer->m_b = full.m_b;
    } else if (!pr->recompute && o->recompute) {
        layer->t_b += layer->t_f;
        layer->transient = layer->m_b;
        layer->m_b = est.m_b;
    }
    return 0;
}

double cost_parts_flops(const zb_model *m, const cost_options *o)
{
    cost_options plain = *o;
    plain.profile = NULL;
    plain.recompute = 0;
    cost_part layer, head;
    estimate_layer(m, &plain, &layer);
    estimate_head(m, &plain, &head);
    return m->n_layers * layer.useful_flops + head.useful_flops;
}
