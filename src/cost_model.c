/*
 * cost_model.c: per-stage time and memory (cost_model.h).
 *
 * Three pieces make a stage: transformer layers, the embedding (stage 0) and
 * the head + loss (stage S-1).  Each piece has FLOPs per op (converted to
 * time with the GPU's peak and efficiency, or taken from a profile) and the
 * activation bytes it keeps from F to B (M_B) and from B to W (M_W).  A
 * stage is the sum of its pieces.  docs/cost-model.md derives every line;
 * the comments here only point at the terms.
 */
#include "src/cost_model.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void cost_options_default(cost_options *o)
{
    memset(o, 0, sizeof *o);
    o->flash_attention = 1;
    o->zero1_dp = 1;
    o->reserve_bytes = COST_RESERVE_BYTES;
}

int cost_layer_split(int n_layers, int n_stages, int *layers, zb_err *err)
{
    if (n_stages <= 0 || n_layers <= 0)
        return zb_fail(err, "cannot split %d layers over %d stages", n_layers, n_stages);
    if (n_stages == 1) {
        layers[0] = n_layers;
        return 0;
    }
    if (n_stages > n_layers + 2)
        return zb_fail(err, "%d layers are too few for %d virtual stages (at most %d)",
                       n_layers, n_stages, n_layers + 2);
    /* n_layers + 2 slots (embedding and head count as one layer each). */
    int slots = n_layers + 2, per = slots / n_stages, extra = slots % n_stages;
    for (int i = 0; i < n_stages; i++)
        layers[i] = per;
    layers[0] -= 1;
    layers[n_stages - 1] -= 1;
    /* Extra slots to the middle stages first, from the front, then to the
     * end stages (which gave up a slot each); per >= 1 so nothing is < 0. */
    for (int i = 1; i < n_stages - 1 && extra > 0; i++, extra--)
        layers[i]++;
    if (extra > 0) {
        layers[0]++;
        extra--;
    }
    if (extra > 0) {
        layers[n_stages - 1]++;
        extra--;
    }
    assert(extra == 0);
    return 0;
}

int cost_layer_split_balanced(int n_layers, int n_stages, double w_first, double w_last,
                              int *layers, zb_err *err)
{
    if (n_stages <= 0 || n_layers <= 0)
        return zb_fail(err, "cannot split %d layers over %d stages", n_layers, n_stages);
    if (!(w_first >= 0) || !(w_last >= 0) || !isfinite(w_first) || !isfinite(w_last))
        return zb_fail(err, "embedding and head weights must be finite and >= 0");
    if (n_stages == 1) {
        layers[0] = n_layers;
        return 0;
    }
    if (n_stages > n_layers + 2)
        return zb_fail(err, "%d layers are too few for %d virtual stages (at most %d)",
                       n_layers, n_stages, n_layers + 2);
    int S = n_stages, L = n_layers;
    /* The optimal largest load is one of k, k + w_first, k + w_last
     * (k = 0..L), the smallest that fits.  The three sequences are each
     * sorted, so they are merged in increasing order and the walk stops at
     * the first fit: O(L) with no allocation, where sorting all 3(L+1)
     * values made a search over a 10,000-layer model spend most of its
     * time in qsort. */
    const double eps = 1e-9;
    const double off[3] = { 0, w_first, w_last };
    int next[3] = { 0, 0, 0 };
    double T = -1;
    while (T < 0) {
        int q = -1;
        double t = INFINITY;
        for (int k = 0; k < 3; k++)
            if (next[k] <= L && next[k] + off[k] < t) {
                t = next[k] + off[k];
                q = k;
            }
        if (q < 0)
            break;
        next[q]++;
        double cf = floor(t - w_first + eps), cl = floor(t - w_last + eps), cm = floor(t + eps);
        if (cf < 0 || cl < 0 || (S > 2 && cm < 1))
            continue;
        if (cf + cl + (S - 2) * cm >= L)
            T = t;
    }
    assert(T >= 0); /* T = L + max weight always fits */
    double w[2] = { w_first, w_last };
    for (int i = 0; i < S; i++) {
        double wi = i == 0 ? w[0] : i == S - 1 ? w[1] : 0;
        double cap = floor(T - wi + eps);
        layers[i] = cap > L ? L : (int)cap;
    }
    long total = 0;
    for (int i = 0; i < S; i++)
        total += layers[i];
    /* Take the excess back from the most loaded stage, earliest first. */
    for (; total > L; total--) {
        int best = -1;
        double best_load = -1;
        for (int i = 0; i < S; i++) {
            int min = (i == 0 || i == S - 1) ? 0 : 1;
            double load = layers[i] + (i == 0 ? w[0] : i == S - 1 ? w[1] : 0);
            if (layers[i] > min && load > best_load + eps) {
                best = i;
                best_load = load;
            }
        }
        assert(best >= 0);
        layers[best]--;
    }
    return 0;
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

/* Parameters of one transformer layer. */
static double layer_params(const zb_model *m)
{
    double h = m->d_model, f = m->d_ff, kvr = (double)m->n_kv_heads / m->n_heads;
    double attn = h * h * (2 + 2 * kvr);
    double mlp = (m->swiglu ? 3 : 2) * h * f;
    /* GPT: two LayerNorms (weight+bias) and biases on every linear layer;
     * Llama: two RMSNorm weights. */
    double small = m->swiglu ? 2 * h : 4 * h + h * (1 + 2 * kvr) + h + f + h;
    return attn + mlp + small;
}

static double embedding_params(const zb_model *m)
{
    double p = (double)m->vocab * m->d_model;
    if (m->rope_theta == 0) /* learned absolute positions (GPT) */
        p += (double)m->seq_len * m->d_model;
    return p;
}

/* Head = final norm + output matrix (its own copy, even when tied). */
static double head_params(const zb_model *m)
{
    return (double)m->vocab * m->d_model + (m->swiglu ? 1 : 2) * (double)m->d_model;
}

double cost_param_count(const zb_model *m)
{
    double p = m->n_layers * layer_params(m) + embedding_params(m) + head_params(m);
    p += cost_memory_param_delta(m);
    if (m->tied_embedding)
        p -= (double)m->vocab * m->d_model;
    return p;
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
    l->params = layer_params(m);
}

static void estimate_embedding(const zb_model *m, cost_part *p)
{
    double e = zb_dtype_bytes(m->dtype), t = (double)m->seq_len * m->micro_batch;
    memset(p, 0, sizeof *p);
    p->m_b = 8 * t;                 /* int64 token ids */
    p->m_w = 8 * t + e * t * m->d_model; /* ids + gradient of the embedding output */
    p->params = embedding_params(m);
}

/* The LM head and its loss per micro-batch; docs/cost-model.md derives
 * both loss kinds. */
static void estimate_head(const zb_model *m, const cost_options *o, cost_part *p)
{
    double e = zb_dtype_bytes(m->dtype), t = (double)m->seq_len * m->micro_batch;
    double h = m->d_model, v = m->vocab;
    memset(p, 0, sizeof *p);
    p->useful_flops = 6 * t * h * v;
    p->params = head_params(m);
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

int cost_split_layers(const zb_model *m, const zb_gpu *g, const cost_options *o, int n_stages,
                      int *layers, zb_err *err)
{
    if (o->layers) {
        long total = 0;
        for (int i = 0; i < n_stages; i++) {
            if (o->layers[i] < 0 || (o->layers[i] == 0 && i > 0 && i < n_stages - 1))
                return zb_fail(err, "layer split: stage %d has %d layers", i, o->layers[i]);
            layers[i] = o->layers[i];
            total += o->layers[i];
        }
        if (total != m->n_layers)
            return zb_fail(err, "layer split: %ld layers over the stages, model has %d", total, m->n_layers);
        return 0;
    }
    if (o->split == COST_SPLIT_BALANCED && m->memory.n_layers > 0)
        return cost_split_layers_memory(m, g, o, n_stages, layers, err);
    if (o->split != COST_SPLIT_BALANCED)
        return cost_layer_split(m->n_layers, n_stages, layers, err);
    cost_part layer, emb, head;
    if (cost_parts(m, g, o, &layer, &emb, &head, err) < 0)
        return -1;
    double unit = layer.t_f + layer.t_b + layer.t_w;
    double wf = unit > 0 ? (emb.t_f + emb.t_b + emb.t_w) / unit : 0;
    double wl = unit > 0 ? (head.t_f + head.t_b + head.t_w) / unit : 0;
    return cost_layer_split_balanced(m->n_layers, n_stages, wf, wl, layers, err);
}

static void add_part(cost_stage *st, const cost_part *p, double count)
{
    st->t_f += count * p->t_f;
    st->t_b += count * p->t_b;
    st->t_w += count * p->t_w;
    st->m_b += count * p->m_b;
    st->m_w += count * p->m_w;
    st->params += count * p->params;
    st->useful_flops += count * p->useful_flops;
    if (count > 0 && p->transient > st->transient)
        st->transient = p->transient;
}

int cost_stages(const zb_model *m, const zb_gpu *g, const cost_options *o, int n_stages,
                int first_last_same_device, cost_stage *stage, zb_err *err)
{
    if (model_check(m, err) < 0)
        return -1;
    cost_part layer, emb, head, layer_rc[3];
    if (cost_parts(m, g, o, &layer, &emb, &head, err) < 0)
        return -1;
    /* The layer at each recompute level, for per-stage recompute. */
    for (int rc = COST_RC_NONE; rc <= COST_RC_MLP; rc++) {
        cost_options one = *o;
        one.recompute = rc;
        one.recompute_stage = NULL;
        cost_part e2, h2;
        if (cost_parts(m, g, &one, &layer_rc[rc], &e2, &h2, err) < 0)
            return -1;
    }
    int *split = malloc(sizeof *split * (size_t)n_stages);
    if (!split)
        return zb_fail(err, "out of memory");
    if (cost_split_layers(m, g, o, n_stages, split, err) < 0) {
        free(split);
        return -1;
    }
    double bpp = cost_bytes_per_param(m, o);
    double static_per_layer = layer.params * bpp;
    if (o->profile && o->profile->static_bytes_per_layer >= 0)
        static_per_layer = o->profile->static_bytes_per_layer;
    int first = 0;
    for (int i = 0; i < n_stages; i++) {
        cost_stage *st = &stage[i];
        memset(st, 0, sizeof *st);
        st->first_layer = first;
        st->n_layers = split[i];
        first += split[i];
        add_part(st, &layer_rc[cost_stage_recomputes(o, i)], split[i]);
        st->static_bytes = split[i] * static_per_layer;
        if (i == 0) {
            st->has_embedding = 1;
            add_part(st, &emb, 1);
            st->static_bytes += emb.params * bpp;
        }
        if (i == n_stages - 1) {
            st->has_head = 1;
            cost_part h = head;
            /* A tied head shares the embedding matrix when both sit on one
             * device; otherwise the last stage keeps its own copy. */
            if (m->tied_embedding && (n_stages == 1 || first_last_same_device))
                h.params -= (double)m->vocab * m->d_model;
            add_part(st, &h, 1);
            st->static_bytes += h.params * bpp;
        }
        cost_memory_stage_adjust(m, g, o, i, st);
    }
    free(split);
    return 0;
}

int cost_fill_sched(const zb_model *m, const zb_gpu *g, const cost_options *o, sched_t *s, zb_err *err)
{
    int S = s->n_stages;
    for (int i = 0; i < S; i++)
        if (s->stage_device[i] < 0 || s->stage_device[i] >= s->n_devices)
            return zb_fail(err, "stage %d is not placed on a device", i);
    cost_stage *st = malloc(sizeof *st * (size_t)S);
    double *stat = calloc((size_t)s->n_devices, sizeof *stat);
    double *trans = calloc((size_t)s->n_devices, sizeof *trans);
    if (!st || !stat || !trans) {
        free(st);
        free(stat);
        free(trans);
        return zb_fail(err, "out of memory");
    }
    int same = s->stage_device[0] == s->stage_device[S - 1];
    if (cost_stages(m, g, o, S, same, st, err) < 0) {
        free(st);
        free(stat);
        free(trans);
        return -1;
    }
    for (int i = 0; i < S; i++) {
        stage_cost *c = &s->cost[i];
        int d = s->stage_device[i];
        double send_f = i + 1 < S ? cost_t_transfer(m, g, o, d, s->stage_device[i + 1]) : 0;
        double send_b = i > 0 ? cost_t_transfer(m, g, o, d, s->stage_device[i - 1]) : 0;
        c->t_f = (st[i].t_f + send_f) * 1e3;
        c->t_b = (st[i].t_b + send_b) * 1e3;
        c->t_w = st[i].t_w * 1e3;
        c->d_f = st[i].m_b;
        c->d_b = st[i].m_w - st[i].m_b;
        c->d_w = -st[i].m_w;
        stat[d] += st[i].static_bytes;
        if (st[i].transient > trans[d])
            trans[d] = st[i].transient;
    }
    double reserve = o->reserve_bytes;
    if (o->profile && o->profile->reserve_bytes >= 0)
        reserve = o->profile->reserve_bytes;
    if (!s->mem_static) {
        s->mem_static = malloc(sizeof *s->mem_static * (size_t)s->n_devices);
        if (!s->mem_static) {
            free(st);
            free(stat);
            free(trans);
            return zb_fail(err, "out of memory");
        }
    }
    for (int d = 0; d < s->n_devices; d++)
        s->mem_static[d] = stat[d] + trans[d] + reserve;
    s->t_comm = 0; /* blocking transfers are inside the ops */
    strcpy(s->time_unit, "ms");
    strcpy(s->mem_unit, "bytes");
    free(st);
    free(stat);
    free(trans);
    return 0;
}

double cost_model_flops(const zb_model *m, const cost_options *o)
{
    cost_options plain = *o;
    plain.profile = NULL;
    plain.recompute = 0;
    cost_part layer, head, emb;
    estimate_layer(m, &plain, &layer);
    estimate_head(m, &plain, &head);
    estimate_embedding(m, &emb);
    return m->n_layers * layer.useful_flops + head.useful_flops +
           cost_memory_flops_delta(m, &plain);
}
