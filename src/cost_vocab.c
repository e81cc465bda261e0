/*
 * cost_vocab.c: prices vocabulary parallelism (cost_vocab.h).
 *
 * Per micro-batch of t = seq_len * micro_batch tokens, hidden size h,
 * vocabulary V split into p shards of v = ceil(V/p) entries, e bytes per
 * activation element:
 *
 *   pass work (matmul FLOPs; docs/vocab-parallel.md derives each)
 *                    plain loss            fused loss (no logits kept)
 *   Vocab-1  S       4thv (logits, dX)     4thv
 *            T       2thv (dW)             4thv (logits again, dW)
 *   Vocab-2  S       2thv (logits)         2thv (statistics only)
 *            T       4thv (dX, dW)         6thv (logits again, dX, dW)
 *
 *   memory-bound traffic of the plain loss, timed at hbm_bw (as
 *   cost_model.c times the unsharded loss): S t*v*(e+8), T t*v*4 (Vocab-1)
 *   or t*v*(e+4) (Vocab-2); the fused loss keeps chunks on chip.
 *
 *   held from S to T (every buffer the CPU runtime's passes keep,
 *   kernels/cpu/backend_cpu_vocab.c, at the model's activation bytes e):
 *   the head input e*t*h, the row statistics 16*t (fp32 max, fp64 sum of
 *   exponentials, fp32 target logit), with the plain loss the fp32 logit
 *   gradient 4*t*v of the shard, and with Vocab-1 the fp32 input-gradient
 *   partial 4*t*h (computed by S, summed by barrier C0).  Vocab-2 computes
 *   its partial in T and hands it to barrier C1 at once: it is priced as
 *   the T pass's transient, beside the fused loss's chunks; Vocab-1's local
 *   softmax [t, v] (plain loss) is its S pass's.
 *
 *   barriers (fp32): Vocab-1 C0 = max, then sum + target logit, then the
 *   input-gradient partials 4*t*h (three collectives); Vocab-2 C0 = max,
 *   then sum + target (two), C1 = the input-gradient partials (one).
 *   Each collective is a ring all-reduce: 2(p-1)/p * bytes / bw +
 *   2(p-1) latencies on the pipeline link (the inter-node link when the
 *   devices span nodes).
 *
 *   embedding: each device looks its shard's tokens up and the outputs are
 *   summed by an all-reduce of e*t*h (forward); the output gradient is
 *   broadcast back (e*t*h) for every shard's scatter-add (backward).
 *
 * T's dW matmul runs at the W efficiency (gpu_w_efficiency), as the
 * unsharded head's W does; every other matmul at the F/B efficiency.
 * Times are divided by the shard scaling (1 ideal; the paper measured
 * 0.932 on 8 GPUs).  Static memory: a head shard and an embedding shard of
 * v*h parameters each (one matrix when the embedding is tied) at
 * cost_bytes_per_param; the final norm's h weights stay on the last stage.
 */
#include "src/cost_vocab.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void cost_vocab_options_default(cost_vocab_options *vo)
{
    vo->variant = 1;
    vo->scaling = 1;
    vo->whole_state = 0;
}

/* Bandwidth and latency of the slowest link a collective over p devices
 * crosses. */
static void vocab_link(const zb_gpu *g, const cost_options *o, int p, double *bw, double *lat)
{
    int per = o->devices_per_node;
    if (per > 0 && p > per) {
        *bw = gpu_inter_node_bw(g);
        *lat = gpu_inter_node_latency(g);
    } else {
        *bw = g->link_bw;
        *lat = g->link_latency;
    }
}

double cost_vocab_allreduce(const zb_gpu *g, const cost_options *o, int p, double bytes)
{
    if (p <= 1)
        return 0;
    double bw, lat;
    vocab_link(g, o, p, &bw, &lat);
    return 2.0 * (p - 1) / p * bytes / bw + 2.0 * (p - 1) * lat;
}

int cost_vocab_parts(const zb_model *m, const zb_gpu *g, const cost_options *o, int p,
                     const cost_vocab_options *vo, cost_vocab *out, zb_err *err)
{
    if (model_check(m, err) < 0)
        return -1;
    if (p < 1)
        return zb_fail(err, "vocabulary parallelism needs at least one device, got %d", p);
    if (vo->variant != 1 && vo->variant != 2)
        return zb_fail(err, "vocabulary parallelism: variant must be 1 or 2, got %d", vo->variant);
    if (!(vo->scaling > 0 && vo->scaling <= 1))
        return zb_fail(err, "vocabulary parallelism: shard scaling must be in (0, 1], got %g", vo->scaling);
    memset(out, 0, sizeof *out);
    double e = zb_dtype_bytes(m->dtype), t = (double)m->seq_len * m->micro_batch;
    double h = m->d_model, v = ceil((double)m->vocab / p);
    int fused = o->loss == COST_LOSS_FUSED, v2 = vo->variant == 2;
    out->shards = p;
    out->shard_vocab = v;
    double unit = 2 * t * h * v; /* one matmul over the shard */
    out->s_flops = (v2 ? 1 : 2) * unit;
    out->t_flops = (v2 ? (fused ? 3 : 2) : (fused ? 2 : 1)) * unit;
    double hbm_s = fused ? 0 : t * v * (e + 8);
    double hbm_t = fused ? 0 : t * v * (v2 ? e + 4 : 4);
    double rate = g->peak_flops * g->efficiency;
    /* T's weight gradient dW = G^T X reduces over the t tokens, like every
     * W op's GEMM, and runs at the W efficiency as the unsharded head's W
     * does (docs/cost-model.md, "W efficiency"); its other matmuls (the
     * logits again, the input-gradient partial) run at F/B's. */
    double w_rate = g->peak_flops * gpu_w_efficiency(g);
    double bw = g->hbm_bw > 0 ? g->hbm_bw : INFINITY;
    out->t_s = (out->s_flops / rate + hbm_s / bw) / vo->scaling;
    out->t_t = ((out->t_flops - unit) / rate + unit / w_rate + hbm_t / bw) / vo->scaling;
    double stats = 12 * t; /* max, sum of exponentials, target logit: fp32 on the wire */
    double grad = 4 * t * h;
    /* held: the runtime keeps the sum in fp64 (16t); Vocab-1's partial */
    out->m_s = e * t * h + 16 * t + (fused ? 0 : 4 * t * v) + (v2 ? 0 : grad);
    if (v2) {
        out->c0_bytes = stats;
        out->c1_bytes = grad;
        out->t_c0 = cost_vocab_allreduce(g, o, p, 4 * t) + cost_vocab_allreduce(g, o, p, 8 * t);
        out->t_c1 = cost_vocab_allreduce(g, o, p, grad);
    } else {
        out->c0_bytes = stats + grad;
        out->t_c0 = cost_vocab_allreduce(g, o, p, 4 * t) + cost_vocab_allreduce(g, o, p, 8 * t) +
                    cost_vocab_allreduce(g, o, p, grad);
    }
    double link_bw, lat;
    vocab_link(g, o, p, &link_bw, &lat);
    out->t_bcast = p > 1 ? e * t * h / link_bw + (p - 1) * lat : 0;
    double bpp = cost_bytes_per_param(m, o);
    out->emb_static = v * h * bpp;
    out->head_static = m->tied_embedding ? 0 : v * h * bpp; /* tied: the same rows */
    out->t_emb_f = cost_vocab_allreduce(g, o, p, e * t * h);
    out->t_emb_b = out->t_bcast;
    return 0;
}

/* Largest short-lived allocation inside one pass of a shard: the fused
 * loss's chunks, Vocab-1's local softmax [t, v] (plain loss), and
 * Vocab-2's input-gradient partial from T to barrier C1. */
static double shard_transient(const zb_model *m, const cost_options *o, double v, int variant)
{
    double t = (double)m->seq_len * m->micro_batch;
    double partial = variant == 2 ? 4 * t * m->d_model : 0;
    if (o->loss == COST_LOSS_FUSED) {
        double chunk = ceil(t / fmax(1, ceil(v / m->d_model)));
        return 2 * 4 * chunk * v + partial;
    }
    return variant == 2 ? partial : 4 * t * v;
}

int cost_vocab_fill_sched(const zb_model *m, const zb_gpu *g, const cost_options *o,
                          const cost_vocab_options *vo, sched_t *s, cost_vocab *out, zb_err *err)
{
    if (sched_has_vocab(s))
        return zb_fail(err, "the schedule already has vocabulary parallelism");
    if (!s->mem_static || strcmp(s->time_unit, "ms") || strcmp(s->mem_unit, "bytes"))
        return zb_fail(err, "price the schedule with cost_fill_sched first");
    int S = s->n_stages, p = s->n_devices;
    cost_vocab cv;
    if (cost_vocab_parts(m, g, o, p, vo, &cv, err) < 0)
        return -1;
    cost_part layer, emb, head;
    if (cost_parts(m, g, o, &layer, &emb, &head, err) < 0)
        return -1;
    cost_stage *st = malloc(sizeof *st * (size_t)S);
    double *stat = calloc((size_t)p, sizeof *stat), *trans = calloc((size_t)p, sizeof *trans);
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
    double bpp = cost_bytes_per_param(m, o);
    /* The head leaves stage S-1: its time, what it keeps from F to B and
     * from B to W, its static state and its transient. */
    stage_cost *last = &s->cost[S - 1];
    last->t_f = fmax(0, last->t_f - head.t_f * 1e3) + cv.t_bcast * 1e3;
    last->t_b = fmax(0, last->t_b - head.t_b * 1e3);
    last->t_w = fmax(0, last->t_w - head.t_w * 1e3);
    last->d_f -= head.m_b;
    last->d_b -= head.m_w - head.m_b;
    last->d_w += head.m_w;
    double head_params = head.params;
    if (m->tied_embedding && (S == 1 || same))
        head_params -= (double)m->vocab * m->d_model;
    if (!vo->whole_state) {
        st[S - 1].static_bytes -= head_params * bpp;
        st[S - 1].static_bytes += (head.params - (double)m->vocab * m->d_model) * bpp; /* final norm stays */
    }
    if (st[S - 1].transient == head.transient && st[S - 1].n_layers > 0) {
        cost_options lo = *o; /* the stage's own layers set its transient now */
        lo.recompute = cost_stage_recomputes(o, S - 1);
        lo.recompute_stage = NULL;
        cost_part l2, e2, h2;
        if (cost_parts(m, g, &lo, &l2, &e2, &h2, err) < 0) {
            free(st);
            free(stat);
            free(trans);
            return -1;
        }
        st[S - 1].transient = l2.transient;
    } else if (st[S - 1].n_layers == 0) {
        st[S - 1].transient = S == 1 ? emb.transient : 0;
    }
    /* The embedding's matrix leaves stage 0; its collectives are charged
     * to stage 0's F (all-reduce of the output) and W (gradient broadcast). */
    if (!vo->whole_state) {
        st[0].static_bytes -= emb.params * bpp;
        if (m->rope_theta == 0) /* learned positions stay on stage 0 */
            st[0].static_bytes += (double)m->seq_len * m->d_model * bpp;
    }
    s->cost[0].t_f += cv.t_emb_f * 1e3;
    s->cost[0].t_w += cv.t_emb_b * 1e3;
    double shard_trans = shard_transient(m, o, cv.shard_vocab, vo->variant);
    for (int i = 0; i < S; i++) {
        int d = s->stage_device[i];
        stat[d] += st[i].static_bytes;
        trans[d] = fmax(trans[d], st[i].transient);
    }
    double shard_static = vo->whole_state ? 0 : cv.head_static + cv.emb_static;
    double reserve = cost_reserve_bytes(o);
    for (int d = 0; d < p; d++)
        s->mem_static[d] = stat[d] + shard_static + fmax(trans[d], shard_trans) + reserve;
    sched_set_vocab(s, vo->variant == 2 ? SCHED_VOCAB_2 : SCHED_VOCAB_1, cv.t_s * 1e3, cv.t_t * 1e3,
                    cv.m_s, -cv.m_s, cv.t_c0 * 1e3, cv.t_c1 * 1e3);
    if (out)
        *out = cv;
    free(st);
    free(stat);
    free(trans);
    return 0;
}
