/*
 * cost_parts.c: the cost model's pieces (cost_parts.h).
 *
 * Three pieces make a stage: transformer layers, the embedding (stage 0) and
 * the head + loss (stage S-1).  Each piece has FLOPs per op (converted to
 * time with the GPU's peak and efficiency, or taken from a profile), the
 * bytes its memory-bound kernels move (norms, residual joins, activation
 * functions, unfused softmax and dropout, the loss: timed at the HBM
 * bandwidth, because a GEMM efficiency cannot price them: their share
 * grows as s/h grows and h shrinks, issue 27's calibration) and the
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
    layout_default(&o->layout);
    o->tp_comm_overlap = 1;
}

int cost_tp(const cost_options *o)
{
    return o->layout.tp > 1 ? o->layout.tp : 1;
}

int cost_cp(const cost_options *o)
{
    return o->layout.cp > 1 ? o->layout.cp : 1;
}

int cost_sp(const cost_options *o)
{
    return o->layout.sp && cost_tp(o) > 1;
}

int cost_zero(const cost_options *o)
{
    return o->layout.zero >= LAYOUT_ZERO1 && o->layout.zero <= LAYOUT_ZERO3 ? o->layout.zero : LAYOUT_ZERO1;
}

double cost_offload(const cost_options *o)
{
    return o->layout.offload > 0 ? fmin(o->layout.offload, 1) : 0;
}

double cost_bytes_per_param(const zb_model *m, const cost_options *o)
{
    double dp = o->zero1_dp > 1 ? o->zero1_dp : 1;
    int zero = cost_zero(o);
    double wdiv = zero >= LAYOUT_ZERO3 ? dp : 1, gdiv = zero >= LAYOUT_ZERO2 ? dp : 1;
    if (m->dtype == ZB_FP32)
        return 4 / wdiv + 4 / gdiv + 8 / dp; /* weights, grads, Adam m and v */
    return 2 / wdiv + 4 / gdiv + 12 / dp;    /* bf16 weights, fp32 grads, fp32 master + m + v */
}

double cost_t_comm(const zb_model *m, const zb_gpu *g, const cost_options *o)
{
    if (o->profile && o->profile->t_comm >= 0)
        return o->profile->t_comm * ((double)m->micro_batch / o->profile->micro_batch);
    double bytes = (double)zb_dtype_bytes(m->dtype) * m->seq_len * m->micro_batch * m->d_model /
                   (cost_tp(o) * cost_cp(o)); /* each TP and CP rank sends its shard */
    return bytes / g->link_bw + g->link_latency;
}

double cost_t_transfer(const zb_model *m, const zb_gpu *g, const cost_options *o, int d1, int d2)
{
    if (d1 == d2)
        return 0;
    int per = o->devices_per_node;
    if (per <= 0 || d1 / per == d2 / per || (o->profile && o->profile->t_comm >= 0))
        return cost_t_comm(m, g, o);
    double bytes = (double)zb_dtype_bytes(m->dtype) * m->seq_len * m->micro_batch * m->d_model /
                   (cost_tp(o) * cost_cp(o));
    return bytes / gpu_inter_node_bw(g) + gpu_inter_node_latency(g);
}

double cost_t_optimizer_step(const zb_model *m, const zb_gpu *g, const cost_options *o, double params)
{
    assert(params >= 0);
    if (!(g->hbm_bw > 0))
        return 0;
    double dp = o->zero1_dp > 1 ? o->zero1_dp : 1;
    /* Per parameter of the state this GPU steps (its 1/dp shard):
     * the gradient norm for clipping reads the fp32 gradient (4); fused
     * AdamW reads gradient, master weight, m and v and writes the last
     * three (28); bf16 training then copies the fp32 master into the
     * bf16 weight (read 4, write 2).  Per parameter held: the gradient
     * buffer is zeroed for the next iteration (write 4). */
    double shard = m->dtype == ZB_FP32 ? 4 + 28 : 4 + 28 + 6;
    return params * (shard / dp + 4) / g->hbm_bw;
}

int cost_stage_recomputes(const cost_options *o, int i)
{
    int level = o->recompute_stage ? o->recompute_stage[i] : o->recompute;
    assert(level >= COST_RC_NONE && level <= COST_RC_LAST);
    return level;
}

/* FLOP-based layer: zero-bubble Table 1 generalised (docs/cost-model.md),
 * per GPU of the layout: matmuls and activations over the tp ranks (heads
 * and FFN columns), tokens over the cp ranks; with sequence parallelism
 * the norms' and dropouts' activations are sharded too (Korthikanti et
 * al. 2022, Table 2). */
static void estimate_layer(const zb_model *m, const cost_options *o, cost_part *l)
{
    double e = zb_dtype_bytes(m->dtype);
    double h = m->d_model, f = m->d_ff, s = m->seq_len, a = m->n_heads;
    double tp = cost_tp(o), rep = cost_sp(o) ? tp : 1; /* divisors of sharded, replicated terms */
    double t = s * m->micro_batch / cost_cp(o); /* this GPU's tokens per micro-batch */
    double kvr = (double)m->n_kv_heads / m->n_heads;
    int gpt = !m->swiglu; /* GPT-style layers train with dropout, Llama-style without */

    double proj = 2 * t * h * h * (2 + 2 * kvr) / tp;       /* Q, K, V, O */
    double mlp = 2 * t * h * f * (m->swiglu ? 3 : 2) / tp;  /* up(, gate), down */
    double attn = 4 * t * s * h / tp;                       /* QK^T and AV: local queries, every key */
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

    /* M_B: what F keeps for B (Korthikanti et al. 2022, Table 1 of ZB).
     * Replicated over the TP ranks unless SP: the norms' inputs, their
     * outputs (the QKV and MLP inputs), the dropout masks; sharded: Q, K,
     * V, the O projection's input, the scores, the MLP's inner tensors. */
    double attn_rep = e * t * h        /* norm input */
                    + e * t * h        /* QKV input (norm output) */
                    + (gpt ? t * h : 0); /* output dropout mask */
    double attn_shard = e * t * h * (1 + 2 * kvr) /* Q, K, V */
                      + e * t * h;                /* O projection input */
    double scores = o->flash_attention
                  ? 4 * a * t                               /* softmax log-sum-exp, fp32 */
                  : e * a * s * t + (gpt ? a * s * t + e * a * s * t : 0); /* softmax (+ mask, dropout) */
    double mlp_rep = e * t * h + e * t * h + (gpt ? t * h : 0); /* norm input, MLP input, dropout mask */
    double mlp_inner = m->swiglu ? 3 * e * t * f : 2 * e * t * f; /* gate, up, silu(gate)*up; GeLU in/out */
    double full = (attn_rep + mlp_rep) / rep + (attn_shard + scores + mlp_inner) / tp;
    /* M_W: inputs of every weight matmul and the gradients of their
     * outputs; the QKV and MLP inputs and the O and down outputs' gradients
     * are full width (sharded only under SP), the rest sharded. */
    double w_rep = 4 * h;
    double w_shard = h + f + h * (1 + 2 * kvr) + (m->swiglu ? 2 * f : f);
    l->m_w = e * t * (w_rep / rep + w_shard / tp);
    /* What the MLP level drops: the pre-MLP norm's output and, for SwiGLU,
     * gate, up and their product (GeLU: its input and output); it keeps
     * the block input (the residual after attention, the norm's input). */
    double mlp_drop = e * t * h / rep + mlp_inner / tp;
    if (o->recompute == COST_RC_FULL) {
        l->m_b = e * t * h / rep;           /* only the layer input is checkpointed */
        l->transient = full;                /* B rebuilds the whole layer */
        l->b_flops += l->f_flops;           /* ...by running F again */
    } else if (o->recompute == COST_RC_MLP) {
        l->m_b = full - mlp_drop;
        l->transient = mlp_drop;            /* B rebuilds one layer's MLP block */
        l->b_flops += mlp;                  /* ...by running its matmuls again */
    } else if (o->recompute == COST_RC_ATTN) {
        l->m_b = full - scores / tp;        /* the attention core's internals go */
        l->transient = scores / tp;         /* B rebuilds one layer's scores */
        l->b_flops += attn_f;               /* ...by running QK^T, softmax, AV again */
    } else {
        l->m_b = full;
        l->transient = 0;
    }
    /* Memory-bound traffic (docs/cost-model.md, "Memory-bound work"):
     * the element-wise kernels between the GEMMs move bytes, not FLOPs,
     * and run at the HBM bandwidth.  Per token, e bytes per element:
     * - two norms: F reads x, writes y (2e h each); B reads x and dy,
     *   writes dx (3e h each);
     * - two residual joins: GPT's fused bias-dropout-add reads the branch
     *   and the residual, writes the sum and a 1-byte mask ((3e+1) h);
     *   its backward reads dy and the mask, writes the branch's gradient
     *   ((2e+1) h), and autograd sums the two residual gradients (3e h);
     *   without dropout the join is 3e h each way;
     * - the MLP's activation over the f/tp columns: fused bias-GeLU reads
     *   x, writes y (2e f), backward reads dy and x, writes dx (3e f);
     *   SwiGLU reads gate and up, writes their product (3e f), backward
     *   reads dy, gate and up, writes two gradients (5e f);
     * - without flash attention, the a/tp heads' s scores per token:
     *   fused scale-mask-softmax reads and writes them (2e), dropout
     *   reads them and writes them and its 1-byte mask (2e+1); backward,
     *   dropout's reads dy and the mask, writes dx (2e+1) and softmax's
     *   reads dy and y, writes dx (3e).  Flash attention keeps the scores
     *   on chip: none of this traffic.
     * Norms and joins are replicated over the TP ranks unless SP shards
     * them (the F saving Korthikanti et al. 2022 measure in Table 4). */
    double join_f = gpt ? 3 * e + 1 : 3 * e, join_b = gpt ? (2 * e + 1) + 3 * e : 3 * e;
    double rep_f = t * h * (2 * 2 * e + 2 * join_f), rep_b = t * h * (2 * 3 * e + 2 * join_b);
    double act_f = t * f * (m->swiglu ? 3 * e : 2 * e), act_b = t * f * (m->swiglu ? 5 * e : 3 * e);
    double score_f = o->flash_attention ? 0 : t * a * s * (gpt ? 4 * e + 1 : 2 * e);
    double score_b = o->flash_attention ? 0 : t * a * s * (gpt ? 5 * e + 1 : 3 * e);
    l->hbm_f = rep_f / rep + (act_f + score_f) / tp;
    l->hbm_b = rep_b / rep + (act_b + score_b) / tp;
    if (o->recompute == COST_RC_FULL)
        l->hbm_b += l->hbm_f;                             /* the forward's kernels run again */
    else if (o->recompute == COST_RC_MLP)
        l->hbm_b += t * h * 2 * e / rep + act_f / tp;     /* pre-MLP norm and the activation */
    else if (o->recompute == COST_RC_ATTN)
        l->hbm_b += score_f / tp;                         /* softmax and dropout again */

    /* Matrices over the TP ranks; the two norms' weights (2h) are kept whole. */
    l->params = (param_plain_layer(m) - 2 * h) / tp + 2 * h;
}

/* Seconds of a ring collective moving `bytes` of a full tensor over n
 * ranks: all-reduce 2(n-1)/n of it, reduce-scatter or all-gather (n-1)/n
 * (Thakur et al. 2005), one latency per step. */
static double ring_time(double bytes, int n, int all_reduce, double bw, double lat)
{
    if (n <= 1)
        return 0;
    double k = (all_reduce ? 2.0 : 1.0) * (n - 1);
    return k / n * bytes / bw + k * lat;
}

/* Adds to layer l (times already set from its FLOPs) what the layout's
 * communication and offload expose (docs/cost-model.md, "Layouts"):
 * - TP: per layer two all-reduces of the layer's activation in F and two
 *   in B (with SP: all-gather + reduce-scatter pairs of the same volume),
 *   over the NVLink domain; with tp_comm_overlap each hides under the
 *   GEMM it feeds, so only what exceeds the pass's GEMM time shows.
 * - CP: the ring passes K and V (cp-1 steps) in F, and K, V and their
 *   gradients in B, each step overlapped with the attention of the step.
 * - ZeRO-3: each layer's bf16 weights all-gathered in F and again in B,
 *   prefetched under the previous layer's compute; ZeRO-2 and -3: its
 *   gradients reduce-scattered after W, under W's compute.
 * - Offload: a fraction of M_B copied to the host after F and back
 *   before B at the PCIe bandwidth, hidden behind the micro-batch's
 *   compute where it fits (sail-sg PipeOffload). */
static void layer_comm(const zb_model *m, const zb_gpu *g, const cost_options *o, cost_part *l)
{
    int tp = cost_tp(o), cp = cost_cp(o), zero = cost_zero(o);
    double e = zb_dtype_bytes(m->dtype);
    double t = (double)m->seq_len * m->micro_batch / cp;
    /* A collective's step inside the NVLink domain costs a few
     * microseconds (COST_COLLECTIVE_STEP_LATENCY), not the pipeline
     * send's latency: that one was fitted to the zero-bubble paper's
     * measured P2P transfers (250 us on A100, framework overhead
     * included), and 14 ring steps of it per all-reduce made TP 8 cost
     * more than its GEMMs. */
    double tbw = gpu_tp_bw(g), lat = fmin(g->link_latency, COST_COLLECTIVE_STEP_LATENCY);
    double mm_f = l->t_f, mm_b = l->t_b, mm_w = l->t_w;
    if (tp > 1) {
        double act = e * t * m->d_model;
        double comm = 2 * ring_time(act, tp, 1, tbw, lat);
        /* Under SP the two column-parallel GEMMs (QKV, MLP up) keep only
         * their input's sequence shard from F, so B all-gathers each
         * input again before its weight gradient (Megatron-LM's
         * sequence-parallel linear; Korthikanti et al. 2022, Table 4: SP
         * saves F 0.5 ms on 22B but B only 0.1 ms, the norms' sharding
         * in B eaten by these two gathers). */
        double comm_b = comm + (cost_sp(o) ? 2 * ring_time(act, tp, 0, tbw, lat) : 0);
        l->t_f += o->tp_comm_overlap ? fmax(0, comm - mm_f) : comm;
        l->t_b += o->tp_comm_overlap ? fmax(0, comm_b - mm_b) : comm_b;
        /* Full recompute reruns the forward in B, its two collectives
         * with it (Korthikanti et al. 2022, Table 4: B with full
         * recompute is B plus all of F, 19.5 ms = 11.9 + 7.7 on 22B). */
        if (o->recompute == COST_RC_FULL)
            l->t_b += o->tp_comm_overlap ? fmax(0, comm - mm_b) : comm;
    }
    if (cp > 1) {
        int intra = tp * cp <= gpu_per_node(g);
        double bw = intra ? tbw : gpu_inter_node_bw(g), clat = intra ? lat : gpu_inter_node_latency(g);
        double kv = 2 * e * t * m->d_model * ((double)m->n_kv_heads / m->n_heads) / tp;
        double rate = g->peak_flops * g->efficiency;
        double attn = 4 * t * m->seq_len * m->d_model / tp, attn_f = o->flash_attention ? 0.5 * attn : attn;
        double step_f = kv / bw + clat, step_b = 2 * kv / bw + clat;
        double at_f = attn_f / cp / rate, at_b = (o->flash_attention ? 2.5 : 2) * attn_f / cp / rate;
        l->t_f += (cp - 1) * fmax(0, step_f - at_f);
        l->t_b += (cp - 1) * fmax(0, step_b - at_b);
    }
    double dp = o->zero1_dp > 1 ? o->zero1_dp : 1;
    if (zero >= LAYOUT_ZERO2 && dp > 1) {
        int intra = (long)tp * cp * dp <= gpu_per_node(g);
        double bw = intra ? g->link_bw : gpu_inter_node_bw(g);
        double dlat = intra ? lat : gpu_inter_node_latency(g);
        double wbytes = zb_dtype_bytes(m->dtype) * l->params;
        if (zero >= LAYOUT_ZERO3) {
            double ag = ring_time(wbytes, (int)dp, 0, bw, dlat);
            l->t_f += fmax(0, ag - mm_f);
            l->t_b += fmax(0, ag - mm_b);
            l->transient += 2 * wbytes; /* this layer's gathered weights and the next one's, prefetched */
        }
        double rs = ring_time(4 * l->params, (int)dp, 0, bw, dlat);
        l->t_w += fmax(0, rs - mm_w);
    }
    double off = cost_offload(o);
    if (off > 0) {
        /* Copies stream in both directions at once (PCIe is full duplex)
         * while the device computes; in the steady state of a pipeline a
         * micro-batch's copies have its F, B and W to hide under, and
         * what does not fit is split between F (the copy out) and B (the
         * copy back). */
        double bytes = off * l->m_b, pcie = gpu_pcie_bw(g);
        double excess = fmax(0, bytes / pcie - (mm_f + mm_b + mm_w));
        l->t_f += excess;
        l->t_b += excess;
        l->m_b -= bytes;
    }
}

/* The embedding per GPU: rows over the TP ranks (Megatron's
 * vocabulary-parallel embedding), tokens over the CP ranks. */
static void estimate_embedding(const zb_model *m, const cost_options *o, cost_part *p)
{
    double e = zb_dtype_bytes(m->dtype), t = (double)m->seq_len * m->micro_batch / cost_cp(o);
    memset(p, 0, sizeof *p);
    p->m_b = 8 * t;                 /* int64 token ids */
    p->m_w = 8 * t + e * t * m->d_model / (cost_sp(o) ? cost_tp(o) : 1); /* ids + output gradient */
    p->params = param_embedding(m) / cost_tp(o);
}

/* The LM head and its loss per micro-batch; docs/cost-model.md derives
 * both loss kinds.  Per GPU: the vocabulary over the TP ranks (Megatron's
 * column-parallel output layer and vocabulary-parallel cross-entropy),
 * tokens over the CP ranks. */
static void estimate_head(const zb_model *m, const cost_options *o, cost_part *p)
{
    double e = zb_dtype_bytes(m->dtype), t = (double)m->seq_len * m->micro_batch / cost_cp(o);
    double h = m->d_model, v = (double)m->vocab / cost_tp(o);
    memset(p, 0, sizeof *p);
    p->useful_flops = 6 * t * h * v;
    p->params = param_head(m, PARAM_HEAD_FULL) / cost_tp(o);
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
    estimate_embedding(m, o, embedding);
    estimate_head(m, o, head);
    set_times(layer, g);
    set_times(embedding, g);
    set_times(head, g);
    const zb_profile *pr = o->profile;
    if (pr && layout_is_extended(&(zb_layout){ .tp = cost_tp(o), .cp = cost_cp(o), .zero = cost_zero(o),
                                               .offload = cost_offload(o) }))
        return zb_fail(err, "a profile measures one GPU's layer (tp 1, cp 1, ZeRO-1, no offload); "
                       "price other layouts from the FLOP estimate (leave out --profile)");
    layer_comm(m, g, o, layer);
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
    layout_default(&plain.layout); /* the whole model's FLOPs, not one GPU's share */
    cost_part layer, head;
    estimate_layer(m, &plain, &layer);
    estimate_head(m, &plain, &head);
    return m->n_layers * layer.useful_flops + head.useful_flops;
}
