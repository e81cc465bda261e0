/*
 * cost_memory.c: the cost model's memory layers (cost_memory.h; formulas
 * derived in docs/memory-layers.md).
 *
 * A memory layer (kernels/cpu/memory_layer.h) keeps the attention half of
 * a transformer layer and swaps the SwiGLU FFN for a product-key lookup.
 * It is costed as a plain layer (cost_parts, whatever that estimate or
 * profile says) plus a delta: minus the FFN's FLOPs, activations and
 * weights, plus the memory block's.  Keeping the delta here, apart from
 * estimate_layer, lets the layer estimate evolve without this file knowing
 * more than the FFN's own terms.
 *
 * Why a pipeline planner cares: the block has almost no FLOPs next to its
 * parameters (tiny-mem: 0.26 M value-table parameters against the FFN's
 * 0.05 M, a third of the FFN's FLOPs), so a stage holding one is cheap in
 * time and heavy in static memory.  The split is therefore chosen in two
 * passes (cost_split_layers_memory): the best largest stage time first,
 * then, among splits within COST_MEMORY_TIME_SLACK of it, the smallest
 * largest static state.
 *
 * Workload: a few hundred calls per search; the split is O(S·L²) with L
 * layers and S stages (refused beyond 2e8 steps).
 */
#include "src/cost_memory.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "src/param_count.h"

/* FLOPs, activations and parameters of the memory block and of the SwiGLU
 * FFN it replaces, per micro-batch, written as a delta. */
void cost_memory_delta(const zb_model *m, const zb_gpu *g, const cost_options *o,
                       cost_part *delta, double *value_table_params)
{
    memset(delta, 0, sizeof *delta);
    *value_table_params = 0;
    const zb_memory *mm = &m->memory;
    if (mm->n_layers == 0)
        return;
    double e = zb_dtype_bytes(m->dtype);
    double t = (double)m->seq_len * m->micro_batch;
    double h = m->d_model, f = m->d_ff;
    double H = mm->heads, kd = mm->k_dim, nk = mm->n_keys, k = mm->topk, v = mm->value_dim;
    /* the FFN as estimate_layer counts it */
    int mats = m->swiglu ? 3 : 2;
    double ffn_flops = 2 * t * h * f * mats;
    double ffn_keep = m->swiglu ? 3 * e * t * f : 2 * e * t * f + t * h;
    double ffn_w = e * t * (f + (m->swiglu ? 2 * f : f));
    /* the memory block, per token (memory_layer.h):
     *   F: query 2h·H·kd, half-key scores 2·H·n_keys·kd, bag 2·H·k·v,
     *      gate and output projections 4h·v (top-k compares are not FLOPs)
     *   B: through query, gate and output 2h·H·kd + 4h·v, the weights'
     *      gradient 2·H·k·v, the query's through the keys 2·H·k·kd
     *   W: query, gate, output 2h·H·kd + 4h·v, keys 2·H·k·kd, values 2·H·k·v */
    double f_mem = t * (2 * h * H * kd + 2 * H * nk * kd + 2 * H * k * v + 4 * h * v);
    double b_mem = t * (2 * h * H * kd + 4 * h * v + 2 * H * k * v + 2 * H * k * kd);
    double w_mem = t * (2 * h * H * kd + 4 * h * v + 2 * H * k * kd + 2 * H * k * v);
    /* F keeps for B: query, slots and weights (int32 + fp32), the bag, the
     * gate pre-activation and u; B keeps for W: the gradients of the query,
     * the gate, the bag and the chosen scores, besides the query, slots,
     * weights and u that F kept */
    double keep = e * t * (H * kd + 3 * v) + 8 * t * H * k;
    double w_keep = e * t * (H * kd + v) + 8 * t * H * k      /* inputs: q, u, slots, weights */
                  + e * t * (H * kd + 2 * v) + 4 * t * H * k; /* grads: dq, dg, de, ds */
    delta->f_flops = f_mem - ffn_flops;
    delta->b_flops = b_mem - ffn_flops;
    delta->w_flops = w_mem - ffn_flops;
    delta->useful_flops = delta->f_flops + delta->b_flops + delta->w_flops;
    delta->m_w = w_keep - ffn_w;
    if (o->recompute == COST_RC_MLP) {
        /* the runtime recomputes no memory block: undo the plain layer's
         * MLP-level drop and rerun */
        delta->m_b = keep - ffn_keep + e * t * h + (m->swiglu ? 3 * e * t * f : 2 * e * t * f);
        delta->b_flops -= ffn_flops;
    } else if (o->recompute) {
        delta->b_flops += delta->f_flops; /* B reruns F */
        delta->hbm_b += t * H * k * v * e;
        delta->transient = keep - ffn_keep;
    } else {
        delta->m_b = keep - ffn_keep;
    }
    /* the gathers are memory-bound: F reads H·k value rows of v per token,
     * B reads them again for the weights' gradients, W reads and writes
     * the touched fp32 gradient rows (scatter-add); timed at hbm_bw like
     * the cost model's other memory-bound traffic */
    delta->hbm_f = t * H * k * v * e;
    delta->hbm_b = t * H * k * v * e;
    double hbm_w = t * H * k * v * 8;
    double rate = g->peak_flops * g->efficiency;
    double bw = g->hbm_bw > 0 ? g->hbm_bw : INFINITY;
    delta->t_f = delta->f_flops / rate + delta->hbm_f / bw;
    delta->t_b = delta->b_flops / rate + delta->hbm_b / bw;
    delta->t_w = delta->w_flops / rate + hbm_w / bw;
    /* parameters: param_count.h's, the kernels' layout */
    *value_table_params = param_value_table(m);
    delta->params = param_memory_layer(m, !mm->shared_values) - param_plain_layer(m);
}

double cost_memory_flops_delta(const zb_model *m, const cost_options *o)
{
    if (m->memory.n_layers == 0)
        return 0;
    cost_options plain = *o;
    plain.recompute = 0;
    plain.recompute_stage = NULL;
    zb_gpu g;
    memset(&g, 0, sizeof g);
    g.peak_flops = g.efficiency = 1; /* FLOPs do not depend on the GPU */
    cost_part d;
    double values;
    cost_memory_delta(m, &g, &plain, &d, &values);
    return m->memory.n_layers * d.useful_flops;
}

/* Memory layers among layers [first, first + n). */
static int memory_in(const zb_model *m, int first, int n)
{
    int c = 0;
    for (int i = 0; i < m->memory.n_layers; i++)
        c += m->memory.layers[i] >= first && m->memory.layers[i] < first + n;
    return c;
}

void cost_memory_stage_adjust(const zb_model *m, const zb_gpu *g, const cost_options *o,
                              int stage, cost_stage *st)
{
    int c = memory_in(m, st->first_layer, st->n_layers);
    if (c == 0)
        return;
    cost_options so = *o; /* this stage's recompute setting */
    so.recompute = cost_stage_recomputes(o, stage);
    so.recompute_stage = NULL;
    o = &so;
    cost_part d;
    double values;
    cost_memory_delta(m, g, o, &d, &values);
    double bpp = cost_bytes_per_param(m, o);
    st->t_f += c * d.t_f;
    st->t_b += c * d.t_b;
    st->t_w += c * d.t_w;
    st->m_b += c * d.m_b;
    st->m_w += c * d.m_w;
    st->useful_flops += c * d.useful_flops;
    st->params += c * d.params;
    st->static_bytes += c * d.params * bpp;
    if (m->memory.shared_values && memory_in(m, st->first_layer, st->n_layers) > 0 &&
        m->memory.layers[0] >= st->first_layer &&
        m->memory.layers[0] < st->first_layer + st->n_layers) {
        st->params += values;
        st->static_bytes += values * bpp;
    }
    if (o->recompute == COST_RC_FULL && d.transient > 0) {
        cost_part plain, emb, head;
        if (cost_parts(m, g, o, &plain, &emb, &head, NULL) == 0 &&
            plain.transient + d.transient > st->transient)
            st->transient = plain.transient + d.transient;
    }
}

/* Per-layer time and static bytes, and the embedding's and head's. */
typedef struct layer_load {
    double *time;   /* [L] F+B+W seconds per micro-batch */
    double *bytes;  /* [L] static bytes */
    double t_first, t_last, b_first, b_last;
} layer_load;

/* Time and bytes of stage i (of S) holding layers [a, b). */
static void stage_load(const zb_model *m, const layer_load *ll, int S, int i, int a, int b,
                       double *time, double *bytes)
{
    double t = 0, by = 0;
    for (int l = a; l < b; l++) {
        t += ll->time[l];
        by += ll->bytes[l];
    }
    if (i == 0) {
        t += ll->t_first;
        by += ll->b_first;
    }
    if (i == S - 1) {
        t += ll->t_last;
        by += ll->b_last;
    }
    (void)m;
    *time = t;
    *bytes = by;
}

/* 0 when layers [a, b) split a shared value table's layers. */
static int keeps_table(const zb_model *m, int a, int b)
{
    if (!m->memory.shared_values)
        return 1;
    int c = memory_in(m, a, b - a);
    return c == 0 || c == m->memory.n_layers;
}

/* Min over contiguous splits of max over stages of cost(stage), where cost
 * is the stage's time (pass 0) or its bytes subject to time <= cap (pass
 * 1).  Fills layers[] with the argmin; returns the optimum (INFINITY when
 * no split is feasible). */
static double split_dp(const zb_model *m, const layer_load *ll, int S, int pass, double cap,
                       int *layers, double *dp, int *arg)
{
    int L = m->n_layers;
    /* dp[i][j]: best for stages 0..i-1 covering layers [0, j) */
    for (int i = 0; i <= S; i++)
        for (int j = 0; j <= L; j++)
            dp[i * (L + 1) + j] = INFINITY;
    dp[0] = 0;
    for (int i = 1; i <= S; i++) {
        int min_layers = (i == 1 || i == S) ? 0 : 1;
        for (int j = 0; j <= L; j++) {
            if (i == S && j != L)
                continue;
            for (int a = 0; a + min_layers <= j; a++) {
                double prev = dp[(i - 1) * (L + 1) + a];
                if (!isfinite(prev) || !keeps_table(m, a, j))
                    continue;
                double t, b;
                stage_load(m, ll, S, i - 1, a, j, &t, &b);
                double c;
                if (pass == 0) {
                    c = t;
                } else {
                    if (t > cap)
                        continue;
                    c = b;
                }
                double v = prev > c ? prev : c;
                if (v < dp[i * (L + 1) + j]) { /* strict: ties keep the earlier cut */
                    dp[i * (L + 1) + j] = v;
                    arg[i * (L + 1) + j] = a;
                }
            }
        }
    }
    double best = dp[S * (L + 1) + L];
    if (isfinite(best)) {
        int j = L;
        for (int i = S; i >= 1; i--) {
            int a = arg[i * (L + 1) + j];
            layers[i - 1] = j - a;
            j = a;
        }
        assert(j == 0);
    }
    return best;
}

int cost_split_layers_memory(const zb_model *m, const zb_gpu *g, const cost_options *o,
                             int n_stages, int *layers, zb_err *err)
{
    int L = m->n_layers, S = n_stages;
    if (S <= 0 || L <= 0)
        return zb_fail(err, "cannot split %d layers over %d stages", L, S);
    if (S > L + 2 || (S > 2 && S - 2 > L))
        return zb_fail(err, "%d layers are too few for %d virtual stages (at most %d)", L, S,
                       L + 2);
    if ((double)S * (L + 1) * (L + 1) > 2e8)
        return zb_fail(err, "the memory-layer split of %d layers over %d stages is too large "
                       "to search", L, S);
    cost_part plain, emb, head, d;
    if (cost_parts(m, g, o, &plain, &emb, &head, err) < 0)
        return -1;
    double values;
    cost_memory_delta(m, g, o, &d, &values);
    double bpp = cost_bytes_per_param(m, o);
    double static_plain = plain.params * bpp;
    if (o->profile && o->profile->static_bytes_per_layer >= 0)
        static_plain = o->profile->static_bytes_per_layer;
    layer_load ll;
    ll.time = malloc(sizeof(double) * (size_t)L);
    ll.bytes = malloc(sizeof(double) * (size_t)L);
    double *dp = malloc(sizeof(double) * (size_t)(S + 1) * (L + 1));
    int *arg = malloc(sizeof(int) * (size_t)(S + 1) * (L + 1));
    if (!ll.time || !ll.bytes || !dp || !arg) {
        free(ll.time);
        free(ll.bytes);
        free(dp);
        free(arg);
        return zb_fail(err, "out of memory");
    }
    for (int l = 0; l < L; l++) {
        int mem = model_is_memory_layer(m, l);
        ll.time[l] = plain.t_f + plain.t_b + plain.t_w + (mem ? d.t_f + d.t_b + d.t_w : 0);
        ll.bytes[l] = static_plain + (mem ? d.params * bpp : 0);
        if (mem && m->memory.shared_values && l == m->memory.layers[0])
            ll.bytes[l] += values * bpp;
    }
    ll.t_first = emb.t_f + emb.t_b + emb.t_w;
    ll.t_last = head.t_f + head.t_b + head.t_w;
    ll.b_first = emb.params * bpp;
    ll.b_last = head.params * bpp;
    int rc = 0;
    double tstar = split_dp(m, &ll, S, 0, 0, layers, dp, arg);
    if (!isfinite(tstar))
        rc = zb_fail(err, "no split of %d layers over %d stages keeps the shared memory value "
                     "table's %d layers on one stage", L, S, m->memory.n_layers);
    else
        split_dp(m, &ll, S, 1, tstar * (1 + COST_MEMORY_TIME_SLACK) + 1e-15, layers, dp, arg);
    free(ll.time);
    free(ll.bytes);
    free(dp);
    free(arg);
    return rc;
}
