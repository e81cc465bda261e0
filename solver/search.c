/*
 * search.c: enumerate, cost, simulate and rank pipeline plans under a
 * memory limit (search.h; docs/search.md).
 *
 * One "config" is a pipeline depth p (with data-parallel width N/p), a
 * micro-batch size b, a recompute setting (the first k devices recompute)
 * and a layer-split rule.  For each config the cost model gives per-stage
 * times and memory on the plain placement (one stage per device) and on
 * the V placement; every family is then built, re-costed on its own
 * placement (interleaving changes the layer split), validated and
 * simulated.  Generators see uniform costs (they only order ops); the
 * simulator sees the real per-stage ones, so the figures include the
 * embedding's and the head's extra time and memory.  The V solvers and
 * zb-auto see the per-stage costs themselves.
 *
 * After all configs of one depth ran, the best candidate of each family
 * (or, for a family with nothing that fits, its smallest peak) gets a
 * local search over the layer split: single layers move between
 * neighbouring virtual stages, the op order is kept, and a move stays when
 * it lowers the memory excess or, once it fits, the ranked time.
 *
 * Then (search_options.vocab) each label's best of the depth gets
 * vocabulary-parallel versions, Vocab-1 and Vocab-2: the same order, the
 * layers split evenly, the head and embedding sharded over the devices
 * and the S/T passes inserted (gen_vocab_insert).  Their recompute is
 * searched again, by device and, for interleaved and V plans, by stage
 * (the first q virtual stages in model order, whose activations wait the
 * longest).  A version whose busiest device's compute alone reaches the
 * best plan so far is not simulated: no order could make it win.  On the
 * default job this is what beats the plain plans (docs/vocab-parallel.md).
 *
 * Before a family is built on a config, placement_bound bounds the time
 * (if it fits) and the peak memory of any schedule on its placement from
 * the costs alone; a candidate whose bounds already lose to its label's
 * best at this depth under every target that runs it is not built
 * (search_prune.c says why per label and target: every best the search
 * reports stays; --exhaustive builds them all).  settle() asserts each
 * simulated candidate against its bounds.  The three V variants of one
 * placement share their greedy list runs (solver_greedy_memo).
 *
 * Candidates are kept in one growing array.  Only the schedules of the
 * best few survive (and those of each family's best, which the local
 * search starts from): the rest are freed as soon as they are ranked, so
 * memory stays at a few dozen schedules however many candidates run.
 */
#include "solver/search.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedules/gen.h"
#include "solver/solver.h"
#include "solver/solver_internal.h"
#include "src/cost_vocab.h"
#include "src/sim.h"
#include "src/size.h"
#include "src/validate.h"

/* Schedules kept after ranking (the best and the runners-up the ILP may
 * refine or the caller may want to look at). */
#define SEARCH_KEEP 4

/* zb-auto limits, as multiples of p * M_B of the device's own stage; 0 is
 * "the largest that fits" (memory limit minus the device's static memory). */
static const double zb_auto_k[] = { 1.0, 1.5, 2.0, 0.0 };
#define N_ZB_AUTO (int)(sizeof zb_auto_k / sizeof zb_auto_k[0])

/* The most virtual stages per device the interleaved family tries.  Each
 * chunk needs a layer, so a deep model allowed hundreds of candidates of
 * p * v stages each (10,000 layers on 8 GPUs: v up to 1,250, 5.9 GB and
 * minutes); past a few chunks interleaving only adds communication
 * (Megatron-LM's interleaved schedule is used with small v), so the
 * family stops at 8. */
#define SEARCH_MAX_CHUNKS 8

/* The most ops one candidate schedule may have.  A candidate is built,
 * validated and simulated in memory linear in its ops (~100 bytes each
 * with the simulator's arrays); 1,000,000 (p=64, m=2,600 at one stage per
 * device) keeps each under ~100 MB and a few seconds, where 1,024 GPUs
 * at m=4,096 (12.6 million ops) grew without visible end. */
#define SEARCH_MAX_OPS 1000000

/* Largest interleaving degree tried for model m on p devices. */
static int search_max_chunks(const zb_model *m, int p)
{
    int v = p > 1 ? (m->n_layers + 2) / p : 1;
    return v < SEARCH_MAX_CHUNKS ? v : SEARCH_MAX_CHUNKS;
}

void search_options_default(search_options *o)
{
    memset(o, 0, sizeof *o);
    model_preset("llama3-8b", &o->model, NULL);
    gpu_preset("H100-80G", &o->gpu, NULL);
    o->mem_bytes = 40e9;
    o->n_devices = 0;
    o->n_gpus = 8;
    o->split_search = 1;
    o->global_batch = 64;
    o->recompute = -1;
    o->flash_attention = 1;
    o->split = COST_SPLIT_BALANCED;
    o->zero1_dp = 1;
    o->max_micro_batch = 64;
    o->ilp_top = 3;
    o->ilp_time_limit = 10;
    o->vocab = SEARCH_VOCAB_PLAIN; /* the CLI defaults to SEARCH_VOCAB_AUTO (zbsched search --vocab auto) */
    o->tp = o->cp = o->zero = 1;   /* the plain layout; 0 searches a dimension (search_layouts) */
    o->offload = 0;
    o->sp = 1;
    o->tp_comm_overlap = 1;
}

void search_result_free(search_result *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->n; i++) {
        sched_free(r->c[i].sched);
        free(r->c[i].layers);
    }
    free(r->c);
    sched_free(r->baseline.sched);
    free(r->baseline.layers);
    memset(r, 0, sizeof *r);
}

/* --- the search state ----------------------------------------------------- */

typedef struct search_state {
    const search_options *o; /* the caller's options */
    search_result *r;        /* growing candidate list */
    int cap;                 /* allocated length of r->c */
    int done, total;         /* progress */
    int pp, dp;              /* the pipeline depth being searched and its data-parallel width */
    int devices_per_node;    /* consecutive pipeline devices on one node */
    int dp_intra;            /* 1 when a data-parallel group fits inside a node */
    double vocab_beat;       /* time a vocabulary-parallel version must beat to be worth
                              * simulating: the best plan that may win so far (INFINITY: none) */
    int stage_q_src;         /* candidate index whose by-stage recompute bisection gave
                              * stage_q (the variants share it: memory does not depend on
                              * the variant's pass times), or -1 */
    int stage_q;             /* that bisection's fewest recomputed stages */
    int stage_mlp;           /* the MLP-level bisection's most stages for stage_q_src at
                              * stage_q (shared by the variants likewise), or -1 */
    int next_seq;            /* search_candidate.seq of the next candidate */
    zb_layout layout;        /* the layout being searched (tp, sp, cp, zero, offload) */
    int n_gpus;              /* GPUs left for pipeline x data parallel: o->n_gpus / (tp * cp) */
    search_prune prune;      /* each label's best at this depth, what lower bounds are
                              * compared with (search_prune.c) */
    v_pattern_cache *patterns; /* the V-Min and V-Half patterns laid out so far, by shape */
    double static_floor;     /* at this depth, no plan's fullest device holds less static
                              * memory (cost_static_floor) */
} search_state;

/* One config: the model at micro-batch b, the cost options, the costs of
 * the plain and V placements, and the uniform parameters generators see. */
typedef struct search_config {
    zb_model model;      /* o->model with micro_batch = b */
    cost_options copt;   /* recompute, split, loss, ZeRO, topology */
    int b, m;            /* micro-batch size, count */
    int rc_devices;      /* leading devices that recompute */
    int rc_first_stages; /* > 0: the first this many virtual stages (model order) recompute
                          * instead of the first rc_devices devices' stages */
    int rc_mlp_stages;   /* with rc_first_stages: the last this many of them recompute at
                          * the MLP level only */
    unsigned char *rc_stage; /* [SEARCH_MAX_STAGES] per-stage recompute of the schedule being costed */
    sched_t *plain;      /* p stages, plain placement, costs filled; no ops */
    sched_t *vshape;     /* 2p stages, V placement, costs filled; NULL when layers are too few */
    gen_params gp;       /* uniform costs and shape for the generators */
    double bound_ms;     /* lower bound of the time of the families about to be built on
                          * this config if they fit (placement_bound), or 0: none */
    double peak_bound;   /* lower bound of their peak memory (placement_bound), or 0 */
} search_config;

static search_candidate *new_candidate(search_state *st, const search_config *cf, const char *label,
                                       const char *family, int chunks, zb_err *err)
{
    search_result *r = st->r;
    if (r->n == st->cap) {
        int cap = st->cap ? 2 * st->cap : 64;
        search_candidate *c = realloc(r->c, sizeof *c * (size_t)cap);
        if (!c) {
            zb_fail(err, "out of memory");
            return NULL;
        }
        r->c = c;
        st->cap = cap;
    }
    search_candidate *c = &r->c[r->n++];
    memset(c, 0, sizeof *c);
    c->seq = st->next_seq++;
    snprintf(c->label, sizeof c->label, "%s", label);
    snprintf(c->family, sizeof c->family, "%s", family);
    c->chunks = chunks;
    c->micro_batch = cf->b;
    c->n_micro = cf->m;
    c->rc_devices = cf->rc_devices;
    c->rc_stages = cf->rc_first_stages;
    c->rc_mlp_stages = cf->rc_first_stages > 0 ? cf->rc_mlp_stages : 0;
    c->recompute = cf->rc_devices > 0 || cf->rc_first_stages > 0;
    c->pp = st->pp;
    c->dp = st->dp;
    c->layout = st->layout;
    c->layout.pp = st->pp;
    c->layout.dp = st->dp;
    c->layout.chunks = chunks > 0 ? chunks : 1;
    c->split = cf->copt.split;
    c->peak_device = -1;
    c->targets = search_target_mask(c);
    return c;
}

static void tick(search_state *st)
{
    st->done++;
    if (st->done > st->total)
        st->total = st->done;
    if (st->o->progress)
        st->o->progress(st->o->progress_ctx, st->done, st->total);
}

static void skip(search_candidate *c, const char *why)
{
    c->status = SEARCH_SKIPPED;
    snprintf(c->note, sizeof c->note, "%s", why);
}

int search_rc_level(const sched_t *s, int i, int rc_devices, int rc_stages, int rc_mlp)
{
    if (rc_stages <= 0)
        return s->stage_device[i] < rc_devices ? COST_RC_FULL : COST_RC_NONE;
    return i < rc_stages - rc_mlp ? COST_RC_FULL : i < rc_stages ? COST_RC_MLP : COST_RC_NONE;
}

/* Per-stage recompute of schedule s: search_rc_level under cf's setting. */
static void fill_rc_stage(search_config *cf, const sched_t *s)
{
    for (int i = 0; i < s->n_stages && i < SEARCH_MAX_STAGES; i++)
        cf->rc_stage[i] = (unsigned char)search_rc_level(s, i, cf->rc_devices, cf->rc_first_stages,
                                                  cf->rc_mlp_stages);
    cf->copt.recompute_stage = cf->rc_stage;
    cf->copt.recompute = cf->rc_devices > 0 || cf->rc_first_stages > 0;
}

/* Costs s under cf's options (with split layers, or the rule's when NULL). */
static int cost_sched(const search_state *st, search_config *cf, const int *layers, sched_t *s, zb_err *err)
{
    if (s->n_stages > SEARCH_MAX_STAGES)
        return zb_fail(err, "%d virtual stages exceed the search's %d", s->n_stages, SEARCH_MAX_STAGES);
    fill_rc_stage(cf, s);
    cost_options co = cf->copt;
    co.layers = layers;
    return cost_fill_sched(&cf->model, &st->o->gpu, &co, s, err);
}

/* Data-parallel sync of each device's gradients and parameters, ZeRO-1
 * style: reduce-scatter of the fp32 gradients (overlapped with the last
 * micro-batch's backward on the device) and all-gather of the bf16
 * parameters (overlapped with the first micro-batch's forward), ring
 * algorithm over the NVLink domain or, when the group spans nodes, over
 * the inter-node link.  Returns the exposed ms of device d. */
static double dp_exposed_ms(const search_state *st, const sched_t *s, const double *params, int d)
{
    if (st->dp <= 1)
        return 0;
    const zb_gpu *g = &st->o->gpu;
    double bw = st->dp_intra ? g->link_bw : gpu_inter_node_bw(g);
    double lat = st->dp_intra ? g->link_latency : gpu_inter_node_latency(g);
    double ring = (double)(st->dp - 1) / st->dp;
    double t_rs = 1e3 * (ring * 4 * params[d] / bw + (st->dp - 1) * lat);
    double t_ag = 1e3 * (ring * 2 * params[d] / bw + (st->dp - 1) * lat);
    /* ZeRO-2 and -3 reduce-scatter each micro-batch's gradients in its W
     * (priced in the op, src/cost_parts.c), and ZeRO-3 keeps parameters
     * sharded, so there is no gather after the step. */
    if (st->layout.zero >= LAYOUT_ZERO2)
        t_rs = 0;
    if (st->layout.zero >= LAYOUT_ZERO3)
        t_ag = 0;
    double back = 0, fwd = 0;
    for (int i = 0; i < s->n_stages; i++)
        if (s->stage_device[i] == d) {
            back += s->cost[i].t_b + s->cost[i].t_w;
            fwd += s->cost[i].t_f;
        }
    return fmax(0, t_rs - back) + fmax(0, t_ag - fwd);
}

/* Parameters held by each device of s (per the cost model's split). */
static int device_params(const search_state *st, search_config *cf, const int *layers, const sched_t *s,
                         double *params, zb_err *err)
{
    int S = s->n_stages;
    cost_stage *cs = malloc(sizeof *cs * (size_t)S);
    if (!cs)
        return zb_fail(err, "out of memory");
    fill_rc_stage(cf, s);
    cost_options co = cf->copt;
    co.layers = layers;
    int same = s->stage_device[0] == s->stage_device[S - 1];
    if (cost_stages(&cf->model, &st->o->gpu, &co, S, same, cs, err) < 0) {
        free(cs);
        return -1;
    }
    for (int d = 0; d < s->n_devices; d++)
        params[d] = 0;
    for (int i = 0; i < S; i++)
        params[s->stage_device[i]] += cs[i].params;
    free(cs);
    return 0;
}

/* Simulates s (already costed) and fills c's figures; 0 or -1 with err. */
static int measure(const search_state *st, search_config *cf, const int *layers, search_candidate *c,
                   const sched_t *s, zb_err *err)
{
    const search_options *o = st->o;
    sim_result sr;
    memset(&sr, 0, sizeof sr);
    double *params = malloc(sizeof *params * (size_t)s->n_devices);
    if (!params)
        return zb_fail(err, "out of memory");
    if (sim_run(s, &sr, err) < 0 || (st->dp > 1 && device_params(st, cf, layers, s, params, err) < 0)) {
        sim_result_free(&sr);
        free(params);
        return -1;
    }
    double peak = -1, t = 0, bmax = 0, bsum = 0, first = INFINITY, last = 0;
    for (int d = 0; d < s->n_devices; d++) {
        double v = s->mem_static[d] + sr.dev[d].peak_mem;
        if (v > peak) {
            peak = v;
            c->peak_device = d;
            c->static_bytes = s->mem_static[d];
        }
        double exposed = dp_exposed_ms(st, s, params, d);
        double span = sr.dev[d].span + exposed;
        if (span > t)
            t = span;
        first = fmin(first, sr.dev[d].first_start);
        last = fmax(last, sr.dev[d].last_end + exposed);
        bmax = fmax(bmax, sr.dev[d].busy);
        bsum += sr.dev[d].busy;
    }
    free(params);
    c->peak_bytes = peak;
    c->iter_ms = sr.makespan;
    c->cost_ms = sr.cost;
    c->time_ms = t; /* the zbsched rule while searching; search_run applies the target's */
    c->async_ms = t;
    c->sync_ms = last - first;
    c->dp_ms = t - sr.cost > 0 ? t - sr.cost : 0;
    c->busy_max_ms = bmax;
    c->busy_mean_ms = bsum / s->n_devices;
    c->bubble_rate = sr.bubble_rate;
    double iter_s = t * 1e-3;
    double tokens = (double)o->global_batch * cf->model.seq_len;
    int gpus = st->pp * st->dp * st->layout.tp * st->layout.cp;
    c->tokens_per_s = iter_s > 0 ? tokens / iter_s / gpus : 0;
    cost_options plain = cf->copt;
    plain.recompute = 0;
    plain.recompute_stage = NULL;
    double flops = (double)o->global_batch / cf->b * cost_model_flops(&cf->model, &plain);
    c->mfu = iter_s > 0 ? flops / (iter_s * gpus * o->gpu.peak_flops) : 0;
    sim_result_free(&sr);
    if (peak <= o->mem_bytes) {
        c->status = SEARCH_FIT;
        c->note[0] = '\0';
    } else {
        c->status = SEARCH_OOM;
        char need[32], stat[32], act[32], lim[32];
        zb_size_format(peak, need, sizeof need);
        zb_size_format(c->static_bytes, stat, sizeof stat);
        zb_size_format(peak - c->static_bytes, act, sizeof act);
        zb_size_format(o->mem_bytes, lim, sizeof lim);
        snprintf(c->note, sizeof c->note, "needs %s on device %d (static %s + activations %s) > limit %s", need,
                 c->peak_device, stat, act, lim);
    }
    return 0;
}

/* A lower bound of device d's span in any schedule on placement s (costed;
 * any placement): its busy time, m (F+B+W) of its stages, plus the idle
 * the pipeline's round trip forces on it.  Let s_d be d's first stage in
 * model order.  Between the end of F(s_d, j) and the start of B(s_d, j)
 * lies the round trip C: every later stage's F and B of micro-batch j,
 * and t_comm at each change of device (the simulator's arrival rule).
 * Take j the micro-batch of the first B on s_d: in that window d can run
 * neither a B nor a W of s_d, nor F(s_d, j) itself, so it idles at least C
 * minus the rest of its work.  Take j the micro-batch of the last F on
 * s_d: in that window d can run no F of s_d, nor B(s_d, j) and W(s_d, j).
 * Both windows lie within d's span.  This is the fill and drain of a
 * pipeline with few micro-batches (m = 2 on 32 devices idles most of
 * the span), which the busy time alone does not see.
 *
 * Memory bounds it too, for a schedule whose activations on d stay
 * within act_limit (INFINITY: none): F(s, j) on d holds its activations
 * at least from its end until B(s, j) may start, s's round trip later,
 * and d never holds more than act_limit, all within its span; so the
 * span is at least the sum over d's stages of m dF times the round trip,
 * over act_limit (Little's law: at most act_limit / dF micro-batches in
 * flight on a stage, each for a round trip).  This is what starves a deep
 * pipeline whose memory admits few micro-batches (Llama-3 70B on 32
 * H100s: a middle device's bound rises well above its work), which the
 * windows do not see. */
static double device_span_bound(const sched_t *s, int d, double act_limit)
{
    int S = s->n_stages, m = s->n_micro, first = -1;
    double busy = 0;
    for (int i = 0; i < S; i++)
        if (s->stage_device[i] == d) {
            if (first < 0)
                first = i;
            busy += m * (s->cost[i].t_f + s->cost[i].t_b + s->cost[i].t_w);
        }
    if (first < 0)
        return 0;
    double trip = 0;
    for (int k = first + 1; k < S; k++)
        trip += s->cost[k].t_f + s->cost[k].t_b + (s->stage_device[k] != s->stage_device[k - 1] ? 2 * s->t_comm : 0);
    const stage_cost *c = &s->cost[first];
    double head_work = busy - m * (c->t_b + c->t_w) - c->t_f; /* what d may run before its first B of s_d */
    double tail_work = busy - m * c->t_f - c->t_b - c->t_w;   /* ... after its last F of s_d */
    double idle = fmax(0, trip - fmin(head_work, tail_work));
    double span = busy + idle;
    if (isfinite(act_limit) && act_limit > 0) {
        double area = 0, after = 0; /* after: the round trip of stage k, built from the last stage down */
        for (int k = S - 1; k >= first; k--) {
            if (s->stage_device[k] == d && s->cost[k].d_f > 0)
                area += m * s->cost[k].d_f * after;
            after += s->cost[k].t_f + s->cost[k].t_b +
                     (k > 0 && s->stage_device[k] != s->stage_device[k - 1] ? 2 * s->t_comm : 0);
        }
        span = fmax(span, area / act_limit);
    }
    return span;
}

/* A lower bound of device d's peak memory (static plus activations) in
 * any schedule on placement s (costed).  Micro-batch 0's F on every stage
 * of d precedes its B on d's last stage, which is its first B on d (the
 * backward runs down the stages): at that moment d holds dF of each of
 * its stages for it.  Every other micro-batch holds on each stage one of
 * its partial sums (0, dF, dF+dB, dF+dB+dW), the smallest of which, when
 * negative (never, with the cost model's deltas), is charged to all m-1. */
static double device_peak_bound(const sched_t *s, int d)
{
    double act = 0, other = 0;
    for (int i = 0; i < s->n_stages; i++)
        if (s->stage_device[i] == d) {
            const stage_cost *c = &s->cost[i];
            act += c->d_f;
            other += fmin(0, fmin(c->d_f, fmin(c->d_f + c->d_b, c->d_f + c->d_b + c->d_w)));
        }
    return s->mem_static[d] + fmax(0, act + (s->n_micro - 1) * other);
}

/* A lower bound of the time of any fitting schedule on placement s (costed
 * under cf, with split layers or the rule's when NULL): the largest over
 * devices of device_span_bound plus the data-parallel sync the device
 * cannot hide (dp_exposed_ms, which depends on the costs only): both step
 * rules' times hold some device's span plus its exposed sync.  With one
 * stage per device (one_per_device) the stage bound of bound.c counts too:
 * it adds the idle a stage's memory limit (the memory minus its static
 * memory; a schedule over it does not fit) forces before its first B and
 * after its last F; device_span_bound's memory terms read the same limit.
 * Stores it in *bound_ms, and in *peak_bytes the largest over devices of
 * device_peak_bound.  Both 0 when the parameters cannot be costed
 * (nothing is then pruned). */
static void placement_bound(const search_state *st, search_config *cf, const int *layers, const sched_t *s,
                            int one_per_device, double *bound_ms, double *peak_bytes)
{
    int P = s->n_devices;
    double *params = calloc((size_t)P, sizeof *params), *limit = malloc(sizeof *limit * (size_t)P);
    zb_err e2 = { { 0 } };
    *bound_ms = *peak_bytes = 0;
    if (!params || !limit || (st->dp > 1 && device_params(st, cf, layers, s, params, &e2) < 0)) {
        free(params);
        free(limit);
        return;
    }
    assert(!one_per_device || s->n_stages == P);
    for (int d = 0; d < P; d++)
        limit[d] = st->o->mem_bytes - s->mem_static[d];
    solver_problem pr = { .p = P, .m = s->n_micro, .cost = s->cost, .t_comm = s->t_comm, .limit = limit };
    double bound = 0, peak = 0;
    for (int d = 0; d < P; d++) {
        double span = device_span_bound(s, d, limit[d]);
        if (one_per_device)
            span = fmax(span, solver_stage_lower_bound(&pr, d));
        bound = fmax(bound, span + dp_exposed_ms(st, s, params, d));
        peak = fmax(peak, device_peak_bound(s, d));
    }
    free(params);
    free(limit);
    *bound_ms = bound;
    *peak_bytes = peak;
}

/* 1 when candidate c, just created by new_candidate on cf, need not be
 * built: cf's bounds lose to the best of c's label under every target
 * that runs c (search_prune_loses).  It is then taken back off the list
 * (it was the last one) and counted in n_pruned. */
static int pruned(search_state *st, const search_config *cf, search_candidate *c)
{
    if (!(cf->bound_ms > 0 || cf->peak_bound > 0) ||
        !search_prune_loses(&st->prune, c->label, c->targets, cf->bound_ms, cf->peak_bound, st->o->mem_bytes))
        return 0;
    assert(c == &st->r->c[st->r->n - 1]);
    st->r->n--;
    st->next_seq--;
    st->r->n_pruned++;
    tick(st);
    return 1;
}

/* Records evaluated candidate c among its label's bests and checks that
 * the bound it was built under holds. */
static void settle(search_state *st, const search_config *cf, const search_candidate *c)
{
    /* The bound is a lower bound of every fitting schedule's time on its
     * placement; a fit faster than it means the bound (and what it
     * pruned) is wrong. */
    assert(c->status != SEARCH_FIT || !(cf->bound_ms > 0) ||
           c->async_ms >= cf->bound_ms * (1 - 1e-9) - 1e-9);
    assert(c->status == SEARCH_SKIPPED || c->peak_bytes >= cf->peak_bound * (1 - 1e-9));
    /* And every plan's peak holds the depth's static floor, else the
     * depths it skipped could have fitted. */
    assert(c->status == SEARCH_SKIPPED || c->peak_bytes >= st->static_floor * (1 - 1e-9));
    search_prune_note(&st->prune, c);
}

/* Costs, validates and simulates c's schedule s (taking ownership of s),
 * then fills c's figures.  A schedule the cost model, validator or
 * simulator rejects becomes a skipped candidate with their message. */
static void evaluate(search_state *st, search_config *cf, search_candidate *c, sched_t *s, const int *layers)
{
    zb_err e2 = { { 0 } };
    int S = s->n_stages;
    c->n_stages = S;
    c->layers = malloc(sizeof *c->layers * (size_t)S);
    cost_options co = cf->copt;
    co.layers = layers;
    c->split_tuned = layers != NULL;
    if (!c->layers || cost_sched(st, cf, layers, s, &e2) < 0 ||
        cost_split_layers(&cf->model, &st->o->gpu, &co, S, c->layers, &e2) < 0 ||
        sched_validate(s, &e2) < 0 || measure(st, cf, layers, c, s, &e2) < 0) {
        skip(c, e2.msg[0] ? e2.msg : "out of memory");
        sched_free(s);
        return;
    }
    c->sched = s;
}

void search_cost_options(const search_options *o, cost_split split, int dp, int devices_per_node, cost_options *c)
{
    cost_options_default(c);
    c->split = split;
    c->flash_attention = o->flash_attention;
    c->zero1_dp = o->zero1_dp * dp;
    c->profile = o->profile;
    c->loss = o->loss;
    c->devices_per_node = devices_per_node;
    c->tp_comm_overlap = o->tp_comm_overlap;
    /* A CPU device has no CUDA context, NCCL buffers or caching allocator. */
    c->reserve_bytes = o->gpu.cpu ? 0 : COST_RESERVE_BYTES;
}

/* 1 when st searches a layout beyond PP x DP for Megatron-LM: only its
 * families (1F1B, interleaved 1F1B) and global recompute settings are
 * built (torchtitan, the other engine that runs such layouts, is not the
 * one ranked). */
static int megatron_layout(const search_state *st)
{
    return layout_is_extended(&st->layout) && st->o->target == SEARCH_TARGET_MEGATRON;
}

/* 1 when candidate c belongs to st's depth and layout (the refinements
 * of a depth re-cost only its own candidates: another layout of the same
 * pipeline depth has another data-parallel width and micro-batch count). */
static int of_depth(const search_state *st, const search_candidate *c)
{
    const zb_layout *a = &c->layout, *b = &st->layout;
    return c->pp == st->pp && c->dp == st->dp && a->tp == b->tp && a->sp == b->sp && a->cp == b->cp &&
           a->zero == b->zero && a->offload == b->offload;
}

/* The cost options of every candidate of this search at st's depth. */
static void cost_options_for(const search_options *o, const search_state *st, cost_split split, cost_options *c)
{
    search_cost_options(o, split, st->dp, st->devices_per_node, c);
    c->layout = st->layout;
    c->layout.pp = st->pp;
    c->layout.dp = st->dp;
}

/* Builds a config's cost templates and uniform generator parameters, with
 * recompute on the first rc_devices devices or, when rc_stages > 0, on the
 * first rc_stages virtual stages (the last rc_mlp of them at the MLP
 * level; both SEARCH_RC_ALL: every stage at the MLP level). */
static int config_init_rc(search_state *st, search_config *cf, int b, int rc_devices, int rc_stages,
                          int rc_mlp, cost_split split, zb_err *err)
{
    const search_options *o = st->o;
    memset(cf, 0, sizeof *cf);
    cf->model = o->model;
    cf->model.micro_batch = b;
    cf->b = b;
    cf->m = o->global_batch / st->dp / b;
    cf->rc_devices = rc_devices;
    cf->rc_first_stages = rc_stages;
    cf->rc_mlp_stages = rc_mlp;
    cost_options_for(o, st, split, &cf->copt);
    cf->rc_stage = calloc(SEARCH_MAX_STAGES, 1);
    if (!cf->rc_stage)
        return zb_fail(err, "out of memory");
    int p = st->pp;
    cf->plain = sched_new(p, cf->m, p);
    if (!cf->plain)
        return zb_fail(err, "out of memory");
    sched_place_interleaved(cf->plain);
    if (cost_sched(st, cf, NULL, cf->plain, err) < 0)
        return -1;
    if (p > 1 && 2 * p <= cf->model.n_layers + 2) {
        cf->vshape = sched_new(p, cf->m, 2 * p);
        if (!cf->vshape)
            return zb_fail(err, "out of memory");
        sched_place_v(cf->vshape);
        if (cost_sched(st, cf, NULL, cf->vshape, err) < 0)
            return -1;
    }
    /* Uniform parameters: mean times, the memory deltas of the stage that
     * keeps the most per micro-batch (the one that limits). */
    gen_params *gp = &cf->gp;
    gen_params_default(gp);
    gp->stages = p;
    gp->microbatches = cf->m;
    gp->chunks = 1;
    gp->t_f = gp->t_b = gp->t_w = 0;
    int big = 0;
    for (int i = 0; i < p; i++) {
        const stage_cost *c = &cf->plain->cost[i];
        gp->t_f += c->t_f / p;
        gp->t_b += c->t_b / p;
        gp->t_w += c->t_w / p;
        if (c->d_f > cf->plain->cost[big].d_f)
            big = i;
    }
    /* Generators need positive times; a head-only fused stage has no W. */
    gp->t_w = fmax(gp->t_w, 1e-6 * (gp->t_f + gp->t_b));
    gp->t_comm = cf->plain->t_comm;
    gp->m_f = cf->plain->cost[big].d_f;
    gp->m_b = cf->plain->cost[big].d_b;
    gp->m_w = cf->plain->cost[big].d_w;
    if (!(gp->m_b <= 0) || !(gp->m_w <= 0)) {
        /* Recompute makes dB positive; generators only need the order. */
        gp->m_b = -gp->m_f / 2;
        gp->m_w = -gp->m_f / 2;
    }
    gp->time_limit = o->ilp_time_limit;
    return 0;
}

/* config_init_rc with recompute by device only. */
static int config_init(search_state *st, search_config *cf, int b, int rc_devices, cost_split split, zb_err *err)
{
    return config_init_rc(st, cf, b, rc_devices, 0, 0, split, err);
}

static void config_free(search_config *cf)
{
    sched_free(cf->plain);
    sched_free(cf->vshape);
    free(cf->rc_stage);
    cf->plain = cf->vshape = NULL;
    cf->rc_stage = NULL;
}

/* Runs one generator-built family (layers: an explicit split, or NULL). */
static int run_gen_split(search_state *st, search_config *cf, const char *label, const char *kind,
                         int chunks, double *limit, const int *layers, zb_err *err);
static int run_gen(search_state *st, search_config *cf, const char *label, const char *kind,
                   int chunks, double *limit, zb_err *err)
{
    return run_gen_split(st, cf, label, kind, chunks, limit, NULL, err);
}

static int run_gen_split(search_state *st, search_config *cf, const char *label, const char *kind,
                         int chunks, double *limit, const int *layers, zb_err *err)
{
    search_candidate *c = new_candidate(st, cf, label, kind, chunks, err);
    if (!c)
        return -1;
    if (pruned(st, cf, c))
        return 0;
    gen_fn fn = gen_lookup(kind);
    gen_params gp = cf->gp;
    gp.chunks = chunks;
    gp.mem_limit = limit;
    sched_t *s = NULL;
    zb_err e2 = { { 0 } };
    if (!fn)
        skip(c, "generator not available in this build");
    else if (fn(&gp, &s, &e2) < 0)
        skip(c, e2.msg);
    else
        evaluate(st, cf, c, s, layers);
    settle(st, cf, c);
    tick(st);
    return 0;
}

/* Runs a V solver on the V placement's per-stage costs and limits; memo
 * keeps its greedy list runs for the next variant on the same vt. */
static int run_v_solver(search_state *st, search_config *cf, const sched_t *vt, const int *layers,
                        const char *label, const double *limit, solver_greedy_memo *memo, zb_err *err)
{
    search_candidate *c = new_candidate(st, cf, label, label, 2, err);
    if (!c)
        return -1;
    if (pruned(st, cf, c))
        return 0;
    sched_t *s = NULL;
    zb_err e2 = { { 0 } };
    if (solver_v_costs_memo(label, vt, limit, memo, st->patterns, &s, &e2) < 0)
        skip(c, e2.msg);
    else
        evaluate(st, cf, c, s, layers);
    settle(st, cf, c);
    tick(st);
    return 0;
}

/* zb-auto (and the ILP) on the plain placement's per-stage costs. */
static int run_per_stage(search_state *st, search_config *cf, const char *label, const char *family,
                         const double *limit, int ilp, zb_err *err)
{
    search_candidate *c = new_candidate(st, cf, label, family, 1, err);
    if (!c)
        return -1;
    if (!ilp && pruned(st, cf, c))
        return 0;
    solver_problem pr = { .p = st->pp, .m = cf->m, .cost = cf->plain->cost,
                          .t_comm = cf->plain->t_comm, .limit = limit };
    sched_t *s = NULL;
    zb_err e2 = { { 0 } };
    int rc = ilp ? solver_ilp_costs(&pr, st->o->ilp_time_limit, &s, &e2)
                 : solver_zb_auto_costs(&pr, &s, NULL, &e2);
    if (rc < 0)
        skip(c, e2.msg);
    else
        evaluate(st, cf, c, s, NULL);
    settle(st, cf, c);
    tick(st);
    return 0;
}

/* Fills limit[d] = mem - static(d) for sched s's placement; returns the
 * smallest headroom (negative when static memory alone does not fit). */
static double headroom(const search_options *o, const sched_t *s, double *limit)
{
    double least = INFINITY;
    for (int d = 0; d < s->n_devices; d++) {
        limit[d] = o->mem_bytes - s->mem_static[d];
        if (limit[d] < least)
            least = limit[d];
    }
    return least;
}

/* The interleaved zero-bubble kind joins the families when its generator
 * is linked in (gen_lookup finds it); until then it is not listed. */
#define INTERLEAVED_ZB_KIND "interleaved-zb"

/* The V family on the light-ends split (see run_config). */
static int run_v_light(search_state *st, search_config *cf, double *limit, zb_err *err)
{
    int p = st->pp, S = 2 * p, L = cf->model.n_layers;
    if (S - 2 > L)
        return 0;
    int *layers = malloc(sizeof *layers * (size_t)S);
    sched_t *vt = sched_new(p, cf->m, S);
    int rc = -1;
    if (!layers || !vt) {
        zb_fail(err, "out of memory");
        goto out;
    }
    layers[0] = layers[S - 1] = 0;
    for (int i = 1; i < S - 1; i++)
        layers[i] = L / (S - 2) + (S - 1 - i <= L % (S - 2)); /* remainder to the later stages */
    sched_place_v(vt);
    zb_err e2 = { { 0 } };
    if (cost_sched(st, cf, layers, vt, &e2) < 0) {
        rc = 0; /* this split does not apply; the others stand */
        goto out;
    }
    headroom(st->o, vt, limit);
    for (int d = 0; d < p; d++)
        if (limit[d] < 0)
            limit[d] = 0;
    cf->bound_ms = cf->peak_bound = 0;
    if (!st->o->exhaustive && !st->o->ilp)
        placement_bound(st, cf, layers, vt, 0, &cf->bound_ms, &cf->peak_bound);
    if (run_gen_split(st, cf, "zb-v", "zb-v", 2, NULL, layers, err) < 0)
        goto out;
    static const char *const vf[] = { "v-min", "v-half", "v-zb" };
    solver_greedy_memo memo = { 0 };
    for (size_t i = 0; i < sizeof vf / sizeof vf[0]; i++)
        if (run_v_solver(st, cf, vt, layers, vf[i], limit, &memo, err) < 0) {
            solver_greedy_memo_free(&memo);
            goto out;
        }
    solver_greedy_memo_free(&memo);
    rc = 0;
out:
    free(layers);
    sched_free(vt);
    return rc;
}

static int run_config(search_state *st, search_config *cf, zb_err *err)
{
    const search_options *o = st->o;
    int p = st->pp;
    /* The V family has 2p stages: 6 p m ops.  Past the cap the whole
     * configuration is one skipped candidate, built never. */
    if (6.0 * p * cf->m > SEARCH_MAX_OPS) {
        search_candidate *c = new_candidate(st, cf, "(all families)", "none", 1, err);
        if (!c)
            return -1;
        char why[160];
        snprintf(why, sizeof why, "p=%d, m=%d: schedules of up to %.0f ops, above the search's cap of %d; "
                 "use a larger micro-batch or fewer GPUs", p, cf->m, 6.0 * p * cf->m, SEARCH_MAX_OPS);
        skip(c, why);
        tick(st);
        return 0;
    }
    double *limit = malloc(sizeof *limit * (size_t)p);
    if (!limit)
        return zb_fail(err, "out of memory");
    int rc = -1;
    /* Lower bounds of each placement's families (placement_bound), which
     * skip the candidates that cannot beat their label's best; none with
     * the ILP, which refines the runners-up too. */
    int prune_on = !o->exhaustive && !o->ilp;
    double plain_ms = 0, plain_peak = 0;
    if (prune_on)
        placement_bound(st, cf, NULL, cf->plain, 1, &plain_ms, &plain_peak);

    cf->bound_ms = plain_ms;
    cf->peak_bound = plain_peak;
    if (run_gen(st, cf, "1f1b", "1f1b", 1, NULL, err) < 0)
        goto out;
    int vmax = search_max_chunks(&cf->model, p);
    while (vmax > 1 && 3.0 * p * vmax * cf->m > SEARCH_MAX_OPS)
        vmax--;
    /* Every stage at the MLP level is Megatron-LM's global selective
     * recompute: it is tried with the families Megatron runs (1F1B and
     * interleaved 1F1B); the others have per-device and per-stage
     * settings of their own. */
    int mlp_all = cf->rc_mlp_stages == SEARCH_RC_ALL;
    /* A layout beyond PP x DP runs on torchtitan and Megatron-LM only;
     * searched for Megatron, its families are all it needs to build (the
     * other targets' rows then show their best of the plain layout and
     * of what Megatron's families give them): a third of the work. */
    int megatron_only = megatron_layout(st);
    int izb = !mlp_all && !megatron_only && gen_lookup(INTERLEAVED_ZB_KIND) != NULL;
    for (int v = 2; v <= vmax; v++) {
        char label[40];
        /* The interleaved placement's costs: the families' bound, and the
         * memory-limited variant's limit (memory minus each device's
         * static memory on this placement, in the deltas' bytes). */
        int ok = 0;
        cf->bound_ms = cf->peak_bound = 0;
        if (izb || prune_on) {
            sched_t *it = sched_new(p, cf->m, v * p);
            zb_err e2 = { { 0 } };
            if (!it) {
                zb_fail(err, "out of memory");
                goto out;
            }
            sched_place_interleaved(it);
            ok = cost_sched(st, cf, NULL, it, &e2) == 0;
            if (ok && prune_on)
                placement_bound(st, cf, NULL, it, 0, &cf->bound_ms, &cf->peak_bound);
            ok = ok && headroom(o, it, limit) > 0;
            sched_free(it);
        }
        snprintf(label, sizeof label, "interleaved v=%d", v);
        if (run_gen(st, cf, label, "interleaved", v, NULL, err) < 0)
            goto out;
        if (izb) {
            /* Its own memory rule, then its memory-limited variant at the
             * largest limit that fits. */
            snprintf(label, sizeof label, "interleaved-zb v=%d", v);
            if (run_gen(st, cf, label, INTERLEAVED_ZB_KIND, v, NULL, err) < 0)
                goto out;
            snprintf(label, sizeof label, "interleaved-zb v=%d max", v);
            if (ok && run_gen(st, cf, label, INTERLEAVED_ZB_KIND, v, limit, err) < 0)
                goto out;
        }
    }
    if (p == 1 || mlp_all || megatron_only) { /* one device: every family is the same sequence */
        rc = 0;
        goto out;
    }
    cf->bound_ms = plain_ms;
    cf->peak_bound = plain_peak;
    if (run_gen(st, cf, "zb-h1", "zb-h1", 1, NULL, err) < 0 ||
        run_gen(st, cf, "zb-h2", "zb-h2", 1, NULL, err) < 0)
        goto out;

    double room = headroom(o, cf->plain, limit);
    for (int k = 0; k < N_ZB_AUTO; k++) {
        char label[40];
        if (zb_auto_k[k] > 0) {
            snprintf(label, sizeof label, "zb-auto %gp", zb_auto_k[k]);
            /* M_B of the device's stage: what one micro-batch holds at
             * its largest (after F, or after B when recompute makes the
             * gradients kept for W larger than the checkpoint). */
            for (int d = 0; d < p; d++) {
                const stage_cost *sc = &cf->plain->cost[d];
                limit[d] = zb_auto_k[k] * p * fmax(sc->d_f, sc->d_f + sc->d_b);
            }
        } else {
            snprintf(label, sizeof label, "zb-auto max");
            room = headroom(o, cf->plain, limit);
            if (room <= 0) {
                search_candidate *c = new_candidate(st, cf, label, "zb-auto", 1, err);
                if (!c)
                    goto out;
                skip(c, "static memory alone exceeds the limit");
                tick(st);
                continue;
            }
        }
        if (run_per_stage(st, cf, label, "zb-auto", limit, 0, err) < 0)
            goto out;
    }

    if (!cf->vshape) {
        search_candidate *c = new_candidate(st, cf, "zb-v", "zb-v", 2, err);
        if (!c)
            goto out;
        skip(c, "too few layers for 2 stages per device");
        tick(st);
    } else {
        headroom(o, cf->vshape, limit);
        /* A device whose static memory already exceeds the limit gets 0
         * and the solver reports it. */
        for (int d = 0; d < p; d++)
            if (limit[d] < 0)
                limit[d] = 0;
        cf->bound_ms = cf->peak_bound = 0;
        if (prune_on)
            placement_bound(st, cf, NULL, cf->vshape, 0, &cf->bound_ms, &cf->peak_bound);
        if (run_gen(st, cf, "zb-v", "zb-v", 2, NULL, err) < 0)
            goto out;
        static const char *const vf[] = { "v-min", "v-half", "v-zb" };
        solver_greedy_memo memo = { 0 };
        for (size_t i = 0; i < sizeof vf / sizeof vf[0]; i++)
            if (run_v_solver(st, cf, cf->vshape, NULL, vf[i], limit, &memo, err) < 0) {
                solver_greedy_memo_free(&memo);
                goto out;
            }
        solver_greedy_memo_free(&memo);
        /* The V puts the embedding and the head on device 0.  When that
         * is what overflows, the "light ends" split gives stages 0 and
         * 2p-1 no transformer layer, so device 0 holds only the two
         * vocabulary matrices and their activations. */
        if (o->split_search && cf->copt.split == o->split && run_v_light(st, cf, limit, err) < 0)
            goto out;
    }
    rc = 0;
out:
    cf->bound_ms = cf->peak_bound = 0;
    free(limit);
    return rc;
}

/* Ranking of a and b with times ta and tb: fits by time (to
 * SEARCH_TIME_RESOLUTION), then peak, then exact time; then OOM by peak;
 * then the rest; creation order last, so that the order is total and a
 * target's best does not depend on the order the list was in. */
static int cmp_times(const search_candidate *a, const search_candidate *b, double ta, double tb)
{
    if (a->status != b->status)
        return a->status < b->status ? -1 : 1;
    if (a->status == SEARCH_FIT) {
        long ba = search_time_bucket(ta), bb = search_time_bucket(tb);
        if (ba != bb)
            return ba < bb ? -1 : 1;
        /* Equally fast, the plan that keeps its activations on the GPU
         * wins: offload saves memory that a fitting plan does not need,
         * and costs host memory and PCIe traffic the model does not time. */
        if (a->layout.offload != b->layout.offload)
            return a->layout.offload < b->layout.offload ? -1 : 1;
        if (a->peak_bytes != b->peak_bytes)
            return a->peak_bytes < b->peak_bytes ? -1 : 1;
        if (ta != tb)
            return ta < tb ? -1 : 1;
    } else if (a->status == SEARCH_OOM) {
        if (a->peak_bytes != b->peak_bytes)
            return a->peak_bytes < b->peak_bytes ? -1 : 1;
    }
    return a->seq == b->seq ? 0 : a->seq < b->seq ? -1 : 1;
}

/* The list's ranking: by the ranked figure, time_ms. */
static int rank_cmp(const search_candidate *a, const search_candidate *b)
{
    return cmp_times(a, b, a->time_ms, b->time_ms);
}

/* The ranking under a step rule: sync_ms when sync, else async_ms. */
static int rule_cmp(const search_candidate *a, const search_candidate *b, int sync)
{
    return sync ? cmp_times(a, b, a->sync_ms, b->sync_ms) : cmp_times(a, b, a->async_ms, b->async_ms);
}

/* Stable merge sort of c[0..n) (thousands of candidates).  It sorts
 * indices and moves each candidate once at the end: a candidate is a few
 * hundred bytes, and moving them at every merge pass cost the default
 * search a tenth of its time. */
static int sort_candidates(search_candidate *c, int n)
{
    if (n < 2)
        return 0;
    int *idx = malloc(sizeof *idx * (size_t)n), *tmp = malloc(sizeof *tmp * (size_t)n);
    search_candidate *moved = malloc(sizeof *moved * (size_t)n);
    if (!idx || !tmp || !moved) {
        free(idx);
        free(tmp);
        free(moved);
        return -1;
    }
    for (int i = 0; i < n; i++)
        idx[i] = i;
    for (int w = 1; w < n; w *= 2) {
        for (int lo = 0; lo < n; lo += 2 * w) {
            int mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                tmp[k++] = rank_cmp(&c[idx[j]], &c[idx[i]]) < 0 ? idx[j++] : idx[i++];
            while (i < mid)
                tmp[k++] = idx[i++];
            while (j < hi)
                tmp[k++] = idx[j++];
        }
        int *t = idx;
        idx = tmp;
        tmp = t;
    }
    for (int i = 0; i < n; i++)
        moved[i] = c[idx[i]];
    memcpy(c, moved, sizeof *c * (size_t)n);
    free(idx);
    free(tmp);
    free(moved);
    return 0;
}

/* --- each label's best, per target ------------------------------------- */

/* The targets with a step rule of their own (sync) whose best of each
 * label the split search also tunes: their label bests are not zbsched's
 * when they cannot run its per-device recompute or its families. */
static const search_target sync_targets[] = { SEARCH_TARGET_TORCHTITAN, SEARCH_TARGET_MEGATRON };
#define N_SYNC_TARGETS (int)(sizeof sync_targets / sizeof sync_targets[0])

/* One (depth, label) of the candidate list: its first fit and first OOM
 * in the list's (zbsched) order, and the best each sync target can run
 * (a fit, else the smallest OOM) under its own rule; -1 when none. */
typedef struct label_slot {
    int pp;                     /* pipeline depth */
    const char *label;          /* borrowed from a candidate */
    int fit, oom;               /* first fit, first OOM in list order */
    int sync_best[N_SYNC_TARGETS]; /* best of sync_targets[k] */
} label_slot;

typedef struct label_table {
    label_slot *slot; /* [cap], open addressing; label NULL = empty */
    int cap;          /* a power of two, at least twice the candidates */
} label_table;

static unsigned label_hash(int pp, const char *label)
{
    unsigned h = 2166136261u ^ (unsigned)pp;
    for (const unsigned char *p = (const unsigned char *)label; *p; p++)
        h = (h ^ *p) * 16777619u;
    return h;
}

static label_slot *label_find(label_table *t, int pp, const char *label)
{
    unsigned i = label_hash(pp, label) & (unsigned)(t->cap - 1);
    while (t->slot[i].label && (t->slot[i].pp != pp || strcmp(t->slot[i].label, label) != 0))
        i = (i + 1) & (unsigned)(t->cap - 1);
    label_slot *s = &t->slot[i];
    if (!s->label) {
        s->pp = pp;
        s->label = label;
        s->fit = s->oom = -1;
        for (int k = 0; k < N_SYNC_TARGETS; k++)
            s->sync_best[k] = -1;
    }
    return s;
}

/* Fills t for the list r->c (in its current order; candidates without a
 * schedule count too, so that a best stays the best).  Caller frees
 * t->slot.  Returns 0 or -1 when memory runs out. */
static int label_table_build(const search_result *r, label_table *t)
{
    t->cap = 64;
    while (t->cap < 2 * r->n)
        t->cap *= 2;
    t->slot = calloc((size_t)t->cap, sizeof *t->slot);
    if (!t->slot)
        return -1;
    for (int i = 0; i < r->n; i++) {
        const search_candidate *c = &r->c[i];
        if (c->status != SEARCH_FIT && c->status != SEARCH_OOM)
            continue;
        label_slot *s = label_find(t, c->pp, c->label);
        if (c->status == SEARCH_FIT && s->fit < 0)
            s->fit = i;
        if (c->status == SEARCH_OOM && s->oom < 0)
            s->oom = i;
        for (int k = 0; k < N_SYNC_TARGETS; k++)
            if ((c->targets >> sync_targets[k] & 1) &&
                (s->sync_best[k] < 0 || rule_cmp(c, &r->c[s->sync_best[k]], 1) < 0))
                s->sync_best[k] = i;
    }
    return 0;
}

/* Sorts, counts the fits, finds the smallest peak, and frees every
 * schedule except those of the first SEARCH_KEEP fits, of the
 * smallest-peak candidate and of each label's bests (its first fit and
 * first OOM, and each sync target's best), which the split search starts
 * from and which may end as a target's answer. */
static int rank(search_result *r)
{
    if (sort_candidates(r->c, r->n) < 0)
        return -1;
    r->n_fit = 0;
    r->min_peak_bytes = 0;
    r->min_peak_index = -1;
    for (int i = 0; i < r->n; i++) {
        const search_candidate *c = &r->c[i];
        if (c->status == SEARCH_FIT)
            r->n_fit++;
        if ((c->status == SEARCH_FIT || c->status == SEARCH_OOM) &&
            (r->min_peak_index < 0 || c->peak_bytes < r->min_peak_bytes)) {
            r->min_peak_bytes = c->peak_bytes;
            r->min_peak_index = i;
        }
    }
    label_table t;
    if (label_table_build(r, &t) < 0)
        return -1;
    unsigned char *keep = calloc((size_t)(r->n ? r->n : 1), 1);
    if (!keep) {
        free(t.slot);
        return -1;
    }
    for (int i = 0; i < t.cap; i++) {
        const label_slot *s = &t.slot[i];
        if (!s->label)
            continue;
        if (s->fit >= 0)
            keep[s->fit] = 1;
        if (s->oom >= 0)
            keep[s->oom] = 1;
        for (int k = 0; k < N_SYNC_TARGETS; k++)
            if (s->sync_best[k] >= 0)
                keep[s->sync_best[k]] = 1;
    }
    for (int i = 0; i < r->n; i++) {
        search_candidate *c = &r->c[i];
        if (c->sched && !(keep[i] || (c->status == SEARCH_FIT && i < SEARCH_KEEP) || i == r->min_peak_index)) {
            sched_free(c->sched);
            c->sched = NULL;
        }
    }
    free(keep);
    free(t.slot);
    return 0;
}

static int check_options(const search_options *o, zb_err *err)
{
    if (model_check(&o->model, err) < 0)
        return -1;
    if (!(o->mem_bytes > 0))
        return zb_fail(err, "the memory limit must be positive");
    if (o->n_gpus < 1 || o->n_gpus > 65536)
        return zb_fail(err, "the number of GPUs must be 1..65536, got %d", o->n_gpus);
    if (o->n_devices < 0 || o->n_devices > 1024)
        return zb_fail(err, "the number of pipeline devices must be 1..1024, got %d", o->n_devices);
    if (o->n_devices > 0 && o->n_gpus % o->n_devices != 0)
        return zb_fail(err, "%d pipeline devices do not divide %d GPUs", o->n_devices, o->n_gpus);
    if (o->nodes < 0 || (o->nodes > 0 && o->n_gpus % o->nodes != 0))
        return zb_fail(err, "%d nodes do not divide %d GPUs", o->nodes, o->n_gpus);
    if (o->global_batch < 1)
        return zb_fail(err, "the global batch must be positive, got %d", o->global_batch);
    if (o->n_devices > o->model.n_layers + 2)
        return zb_fail(err, "%d devices need at least %d layers; model '%s' has %d",
                       o->n_devices, o->n_devices - 2, o->model.name, o->model.n_layers);
    if (o->recompute < -1 || o->recompute > 1)
        return zb_fail(err, "recompute must be -1 (search), 0 or 1");
    if (o->zero1_dp < 1)
        return zb_fail(err, "the ZeRO-1 degree must be >= 1");
    if (o->max_micro_batch < 1)
        return zb_fail(err, "the largest micro-batch size must be >= 1");
    if (o->target < 0 || o->target >= SEARCH_N_TARGETS)
        return zb_fail(err, "unknown target %d", (int)o->target);
    if (o->vocab == SEARCH_VOCAB_PARALLEL && o->target != SEARCH_TARGET_ZBSCHED)
        return zb_fail(err, "%s runs no vocabulary-parallel plans; --vocab parallel needs --target zbsched",
                       search_target_name(o->target));
    if (!(o->gpu.peak_flops > 0) || !(o->gpu.link_bw > 0) || !(o->gpu.efficiency > 0))
        return zb_fail(err, "GPU '%s' needs positive peak_flops, link_bw and efficiency", o->gpu.name);
    return 0;
}

/* Micro-batch sizes tried: powers of two and the model's own b, each
 * dividing the per-replica batch and at most max_micro_batch. */
static int micro_batch_sizes(const search_options *o, int batch, int *sizes, int cap)
{
    int n = 0;
    if (o->micro_batch_fixed) { /* --micro-batch: that size only */
        int b = o->model.micro_batch;
        if (b <= batch && batch % b == 0 && cap > 0)
            sizes[n++] = b;
        return n;
    }
    for (int b = 1; b <= o->max_micro_batch && b <= batch && n < cap; b *= 2)
        if (batch % b == 0)
            sizes[n++] = b;
    int own = o->model.micro_batch;
    int have = 0;
    for (int i = 0; i < n; i++)
        have |= sizes[i] == own;
    if (!have && n < cap && own <= batch && batch % own == 0 && own <= o->max_micro_batch) {
        int i = n++;
        while (i > 0 && sizes[i - 1] > own) {
            sizes[i] = sizes[i - 1];
            i--;
        }
        sizes[i] = own;
    }
    return n;
}

/* The ILP on the plain placement of the best few distinct configs. */
static int run_ilp(search_state *st, zb_err *err)
{
    const search_options *o = st->o;
    search_result *r = st->r;
    if (rank(r) < 0)
        return zb_fail(err, "out of memory");
    int done = 0, n_seen = 0;
    int seen_b[64], seen_rc[64];
    int n_fit = r->n_fit;
    double *limit = malloc(sizeof *limit * (size_t)st->pp);
    if (!limit)
        return zb_fail(err, "out of memory");
    for (int i = 0; i < n_fit && done < o->ilp_top && n_seen < 64; i++) {
        const search_candidate *c = &r->c[i];
        if (!of_depth(st, c) || c->split_tuned || c->rc_mlp_stages == SEARCH_RC_ALL)
            continue;
        int b = c->micro_batch, rc = c->rc_devices, dup = 0;
        cost_split split = c->split;
        for (int k = 0; k < n_seen; k++)
            dup |= seen_b[k] == b && seen_rc[k] == rc;
        if (dup)
            continue;
        seen_b[n_seen] = b;
        seen_rc[n_seen++] = rc;
        search_config cf;
        if (config_init(st, &cf, b, rc, split, err) < 0) {
            config_free(&cf);
            free(limit);
            return -1;
        }
        headroom(o, cf.plain, limit);
        if (o->progress_stage) {
            char what[64];
            char rcs[16];
            if (rc <= 0 || rc >= st->pp)
                snprintf(rcs, sizeof rcs, "%s", rc <= 0 ? "off" : "on");
            else
                snprintf(rcs, sizeof rcs, "0-%d", rc - 1);
            snprintf(what, sizeof what, "ilp %d/%d on pp=%d, b=%d, recompute %s", done + 1,
                     o->ilp_top, st->pp, b, rcs);
            o->progress_stage(o->progress_ctx, what);
        }
        int ok = run_per_stage(st, &cf, "ilp", "ilp", limit, 1, err);
        config_free(&cf);
        if (ok < 0) {
            free(limit);
            return -1;
        }
        done++;
    }
    free(limit);
    return 0;
}

/* --- the layer-split local search ----------------------------------------- */

/* Lexicographic objective: memory excess over the limit first, then the
 * ranked time (async_ms or sync_ms, by the rule tuned for).  Returns 1
 * when (ea, ta) is better than (eb, tb). */
static int better(double ea, double ta, double eb, double tb)
{
    if (ea > 0 || eb > 0)
        return ea < eb * (1 - 1e-9) - 1e-3;
    return ta * SEARCH_TIME_RESOLUTION < tb;
}

/* Moves single layers between neighbouring virtual stages of candidate
 * src's schedule (its op order kept) while that helps, timed by sync_ms
 * when sync (the torchtitan and Megatron rule) else async_ms; appends the
 * result as a new candidate when it differs from src and from the
 * candidates tuned since index tuned_from (the other rule's result from
 * the same source).  At most max_evals simulations. */
static int tune_split(search_state *st, int src_index, int max_evals, int sync, int tuned_from, zb_err *err)
{
    const search_options *o = st->o;
    search_candidate src = st->r->c[src_index]; /* copy: the array may move */
    if (!src.sched || !src.layers)
        return 0;
    search_config cf;
    if (config_init_rc(st, &cf, src.micro_batch, src.rc_devices, src.rc_stages, src.rc_mlp_stages, src.split,
                       err) < 0) {
        config_free(&cf);
        return -1;
    }
    int S = src.n_stages, rc = -1;
    int *cur = malloc(sizeof *cur * (size_t)S), *best = malloc(sizeof *best * (size_t)S);
    sched_t *s = sched_clone(src.sched);
    search_candidate trial;
    memset(&trial, 0, sizeof trial);
    if (!cur || !best || !s) {
        zb_fail(err, "out of memory");
        goto out;
    }
    memcpy(best, src.layers, sizeof *best * (size_t)S);
    double best_ex = fmax(0, src.peak_bytes - o->mem_bytes), best_t = sync ? src.sync_ms : src.async_ms;
    int evals = 0, improved = 1, moved = 0;
    while (improved && evals < max_evals) {
        improved = 0;
        for (int i = 0; i + 1 < S && evals < max_evals; i++) {
            for (int dir = 0; dir < 2 && evals < max_evals; dir++) {
                int from = dir ? i + 1 : i, to = dir ? i : i + 1;
                int min_from = (from == 0 || from == S - 1) ? 0 : 1;
                if (best[from] <= min_from)
                    continue;
                memcpy(cur, best, sizeof *cur * (size_t)S);
                cur[from]--;
                cur[to]++;
                zb_err e2 = { { 0 } };
                evals++;
                if (cost_sched(st, &cf, cur, s, &e2) < 0 || measure(st, &cf, cur, &trial, s, &e2) < 0)
                    continue;
                double ex = fmax(0, trial.peak_bytes - o->mem_bytes), t = sync ? trial.sync_ms : trial.async_ms;
                if (better(ex, t, best_ex, best_t)) {
                    memcpy(best, cur, sizeof *best * (size_t)S);
                    best_ex = ex;
                    best_t = t;
                    improved = moved = 1;
                }
            }
        }
    }
    rc = 0;
    if (!moved)
        goto out;
    for (int i = tuned_from; i < st->r->n; i++) {
        const search_candidate *t = &st->r->c[i];
        if (t->pp == src.pp && t->micro_batch == src.micro_batch && t->rc_devices == src.rc_devices &&
            t->rc_stages == src.rc_stages && t->rc_mlp_stages == src.rc_mlp_stages && t->n_stages == S &&
            t->layers && !strcmp(t->label, src.label) && !memcmp(t->layers, best, sizeof *best * (size_t)S))
            goto out; /* the same plan, found for the other rule */
    }
    search_candidate *c = new_candidate(st, &cf, src.label, src.family, src.chunks, err);
    if (!c) {
        rc = -1;
        goto out;
    }
    c->split_tuned = 1;
    c->n_stages = S;
    c->layers = best;
    best = NULL;
    zb_err e2 = { { 0 } };
    if (cost_sched(st, &cf, c->layers, s, &e2) < 0 || measure(st, &cf, c->layers, c, s, &e2) < 0) {
        skip(c, e2.msg);
    } else {
        c->sched = s;
        s = NULL;
    }
    tick(st);
out:
    free(cur);
    free(best);
    sched_free(s);
    config_free(&cf);
    return rc;
}

/* The split search for depth st->pp: each label's best candidate of this
 * depth (a fit, or the smallest OOM when the label has none), timed by the
 * zbsched rule, and each label's best that each sync target can run,
 * timed by its rule (the same candidate again when it is also zbsched's:
 * the two rules may move different layers). */
static int tune_depth(search_state *st, zb_err *err)
{
    search_result *r = st->r;
    if (rank(r) < 0)
        return zb_fail(err, "out of memory");
    int n = r->n;
    int *pick = malloc(sizeof *pick * (size_t)(n ? n : 1) * (1 + N_SYNC_TARGETS));
    unsigned char *sync = malloc((size_t)(n ? n : 1) * (1 + N_SYNC_TARGETS));
    if (!pick || !sync) {
        free(pick);
        free(sync);
        return zb_fail(err, "out of memory");
    }
    int n_pick = 0;
    for (int i = 0; i < n; i++) {
        const search_candidate *c = &r->c[i];
        if (!of_depth(st, c) || c->status == SEARCH_SKIPPED || c->split_tuned || !c->sched || c->vocab)
            continue;
        int dup = 0;
        for (int k = 0; k < n_pick && !dup; k++)
            dup = !strcmp(r->c[pick[k]].label, c->label);
        /* A fitting label is tuned from its fastest; others from their
         * smallest peak (OOM candidates sort by peak). */
        if (!dup) {
            sync[n_pick] = 0;
            pick[n_pick++] = i;
        }
    }
    int n_async = n_pick;
    for (int t = 0; t < N_SYNC_TARGETS; t++) {
        int first = n_pick;
        for (int i = 0; i < n; i++) {
            const search_candidate *c = &r->c[i];
            if (!of_depth(st, c) || c->status == SEARCH_SKIPPED || c->split_tuned || !c->sched ||
                !(c->targets >> sync_targets[t] & 1))
                continue;
            int k = first;
            while (k < n_pick && strcmp(r->c[pick[k]].label, c->label) != 0)
                k++;
            if (k == n_pick) {
                sync[n_pick] = 1;
                pick[n_pick++] = i;
            } else if (rule_cmp(c, &r->c[pick[k]], 1) < 0) {
                pick[k] = i;
            }
        }
        /* Another sync target's pick of the same candidate tunes the same,
         * and so does any pick of an OOM source: the memory excess is the
         * objective until it fits, whichever rule times it. */
        for (int k = first; k < n_pick; k++)
            for (int j = 0; j < first; j++)
                if (pick[j] == pick[k] && (j >= n_async || r->c[pick[k]].status != SEARCH_FIT)) {
                    pick[k--] = pick[--n_pick];
                    break;
                }
    }
    int rc = 0, from = r->n;
    for (int k = 0; k < n_pick && rc == 0; k++)
        rc = tune_split(st, pick[k], r->c[pick[k]].status == SEARCH_FIT ? 60 : 400, sync[k], from, err);
    free(pick);
    free(sync);
    return rc;
}

/* --- vocabulary parallelism ---------------------------------------------- */

/* The busiest device's compute of s, priced by cost_vocab_fill_sched and
 * without passes yet: its stages' F+B+W and one S and T per micro-batch,
 * ms. */
static double vocab_busiest_ms(const sched_t *s)
{
    double most = 0;
    for (int d = 0; d < s->n_devices; d++) {
        double busy = s->n_micro * (s->vocab.t_s + s->vocab.t_t);
        for (int i = 0; i < s->n_stages; i++)
            if (s->stage_device[i] == d)
                busy += s->n_micro * (s->cost[i].t_f + s->cost[i].t_b + s->cost[i].t_w);
        most = fmax(most, busy);
    }
    return most;
}

/* zb-auto plans its order for the memory it is given; the plain plan's
 * order spent every byte the head and embedding no longer use, and none on
 * the passes.  So a zb-auto plan is planned again on the vocabulary
 * layout's own stage costs, with the largest limit that leaves room for
 * two logits shards (the passes' bound per device), and its order replaces
 * s's lanes.  s is priced by cost_vocab_fill_sched. */
static int vocab_replan(const search_state *st, sched_t *s, zb_err *err)
{
    int p = s->n_devices;
    double *limit = malloc(sizeof *limit * (size_t)p);
    if (!limit)
        return zb_fail(err, "out of memory");
    for (int d = 0; d < p; d++)
        limit[d] = fmax(0, st->o->mem_bytes - s->mem_static[d] - 2 * s->vocab.d_s);
    solver_problem pr = { .p = p, .m = s->n_micro, .cost = s->cost, .t_comm = s->t_comm, .limit = limit };
    sched_t *ns = NULL;
    int rc = solver_zb_auto_costs(&pr, &ns, NULL, err);
    free(limit);
    if (rc < 0)
        return -1;
    if (ns->n_devices != p) {
        sched_free(ns);
        return zb_fail(err, "zb-auto returned %d devices for %d", ns->n_devices, p);
    }
    sched_lane *tmp = s->dev; /* take its lanes, keep s's header */
    s->dev = ns->dev;
    ns->dev = tmp;
    sched_free(ns);
    return 0;
}

/* Builds, costs and measures the vocabulary-parallel version of src's
 * schedule under config cf into the zeroed candidate c (layers split
 * evenly: the head no longer weighs on the last stage).  On success c owns
 * its layers and schedule; failures leave c skipped with the reason. */
static int vocab_build(search_state *st, search_config *cf, const search_candidate *src, int variant,
                       search_candidate *c)
{
    int pruned = 0;
    int S = src->n_stages;
    int *layers = malloc(sizeof *layers * (size_t)S);
    sched_t *s = sched_clone(src->sched), *v = NULL;
    zb_err e2 = { { 0 } };
    cost_vocab_options vo;
    cost_vocab_options_default(&vo);
    vo.whole_state = 1; /* what zbsched's runtime holds (issue 25) */
    vo.variant = variant;
    c->vocab = variant;
    c->n_stages = S;
    if (!layers || !s) {
        skip(c, "out of memory");
        goto out;
    }
    if (cost_layer_split_balanced(cf->model.n_layers, S, 0, 0, layers, &e2) < 0 ||
        cost_sched(st, cf, layers, s, &e2) < 0) {
        skip(c, e2.msg);
        goto out;
    }
    cost_options co = cf->copt; /* as cost_sched left it: this schedule's recompute */
    co.layers = layers;
    if (cost_vocab_fill_sched(&cf->model, &st->o->gpu, &co, &vo, s, NULL, &e2) < 0) {
        skip(c, e2.msg);
        goto out;
    }
    if (!strcmp(src->family, "zb-auto") && S == st->pp && vocab_replan(st, s, &e2) < 0) {
        skip(c, e2.msg);
        goto out;
    }
    /* No schedule beats its busiest device's compute (its stages and
     * every micro-batch's S and T).  When that alone reaches the best plan
     * found so far, placing and simulating the passes cannot change the
     * answer, and more recompute only adds work. */
    double busiest = vocab_busiest_ms(s);
    if (busiest >= st->vocab_beat) {
        char why[160];
        snprintf(why, sizeof why, "cannot beat the best plan: its busiest device computes %.1f ms >= %.1f ms",
                 busiest, st->vocab_beat);
        skip(c, why);
        pruned = 1;
        goto out;
    }
    sched_vocab pv = s->vocab;
    sched_set_vocab(s, SCHED_VOCAB_NONE, 0, 0, 0, 0, 0, 0);
    /* Each lookahead (forwards run ahead of a waiting backward) holds
     * more micro-batches, with and without the hold rule: keep the
     * fastest that fits, else the smallest. */
    search_candidate keep = *c;
    for (int q = 0; q < 2 * (GEN_VOCAB_MAX_LOOKAHEAD + 1); q++) {
        sched_t *vk = NULL;
        search_candidate trial = *c;
        /* the first placement checks base and pv; the others trust them */
        if ((q == 0 ? gen_vocab_insert_with(s, &pv, q / 2, q % 2, &vk, &e2)
                    : gen_vocab_insert_trusted(s, &pv, q / 2, q % 2, &vk, &e2)) < 0 ||
            measure(st, cf, layers, &trial, vk, &e2) < 0) {
            sched_free(vk);
            sched_free(v);
            skip(c, e2.msg);
            goto out;
        }
        int better = !v || (trial.status == SEARCH_FIT && (keep.status != SEARCH_FIT ||
                                                           trial.time_ms * SEARCH_TIME_RESOLUTION < keep.time_ms)) ||
                     (trial.status != SEARCH_FIT && keep.status != SEARCH_FIT &&
                      trial.peak_bytes < keep.peak_bytes);
        if (better) {
            sched_free(v);
            v = vk;
            keep = trial;
        } else {
            sched_free(vk);
        }
    }
    *c = keep;
    c->layers = layers;
    layers = NULL;
    c->sched = v;
    v = NULL;
out:
    free(layers);
    sched_free(s);
    sched_free(v);
    return pruned;
}

/* Whether the vocabulary-parallel version of src with the first q stages
 * recomputing (the last j of them at the MLP level only) is likely to fit: its plan without passes (src's order,
 * even split, shards) simulated, its peak plus two logits shards (what
 * the passes hold at most per device, docs/vocab-parallel.md) within the
 * limit.  Returns 1 or 0, or -1 when it cannot be priced. */
static int vocab_stage_fits(search_state *st, const search_candidate *src, int variant, int q, int j,
                            zb_err *err)
{
    int S = src->n_stages, ok = -1;
    search_config cf;
    int *layers = malloc(sizeof *layers * (size_t)S);
    sched_t *s = sched_clone(src->sched);
    zb_err e2 = { { 0 } };
    if (config_init(st, &cf, src->micro_batch, 0, src->split, err) < 0 || !layers || !s) {
        if (!layers || !s)
            zb_fail(err, "out of memory");
        goto out;
    }
    cf.rc_first_stages = q;
    cf.rc_mlp_stages = j;
    cost_vocab_options vo;
    cost_vocab_options_default(&vo);
    vo.whole_state = 1; /* what zbsched's runtime holds (issue 25) */
    vo.variant = variant;
    cost_options co;
    sim_result sr;
    memset(&sr, 0, sizeof sr);
    if (cost_layer_split_balanced(cf.model.n_layers, S, 0, 0, layers, &e2) < 0 ||
        cost_sched(st, &cf, layers, s, &e2) < 0) {
        ok = 0; /* does not apply: treated as not fitting */
        goto out;
    }
    co = cf.copt;
    co.layers = layers;
    double held = 0; /* the passes' memory: the plan is simulated without them */
    if (cost_vocab_fill_sched(&cf.model, &st->o->gpu, &co, &vo, s, NULL, &e2) == 0) {
        held = 2 * s->vocab.d_s;
        sched_set_vocab(s, SCHED_VOCAB_NONE, 0, 0, 0, 0, 0, 0);
    }
    if (held == 0 || sim_run(s, &sr, &e2) < 0) {
        sim_result_free(&sr);
        ok = 0;
        goto out;
    }
    ok = 1;
    for (int d = 0; d < s->n_devices; d++)
        if (s->mem_static[d] + sr.dev[d].peak_mem + held > st->o->mem_bytes)
            ok = 0;
    sim_result_free(&sr);
out:
    config_free(&cf);
    free(layers);
    sched_free(s);
    return ok;
}

/* The MLP-level refinement of a by-stage recompute result *best (first q
 * stages in full): a recomputed layer costs its device a whole forward,
 * while the MLP level reruns three of its matmuls (about three quarters
 * of F on Llama-3 8B) and keeps the attention half's activations.  The
 * most of the last stages of the prefix (up to one round of pp) that may
 * drop to the MLP level and still fit is found by bisection on the plan
 * without passes (shared by the two variants, as the q bisection is); the
 * plan with passes is built there and one step lower (the time is not
 * monotone in j: each step moves one device's chunk, and the order's
 * bubble shifts with it), and the fastest that fits replaces *best when
 * it beats it. */
static int vocab_stage_mlp(search_state *st, const search_candidate *src, int variant,
                           search_candidate *best, zb_err *err)
{
    int q = best->rc_stages, lo = 0, hi = q < st->pp ? q : st->pp;
    /* Moving a stage from full to MLP-level recompute removes
     * (B_full − B_mlp) per layer and micro-batch from its device; with
     * the pass order fixed no start moves later and no end earlier by
     * more than the compute removed, so a plan cannot gain more than all
     * of it.  When even that leaves it at or above the time to beat (the
     * V family here: twice the winner's time), it is not refined. */
    search_config pc;
    if (config_init(st, &pc, src->micro_batch, 0, src->split, err) < 0) {
        config_free(&pc);
        return -1;
    }
    cost_part lf, lm, e2, h2;
    cost_options one = pc.copt;
    one.recompute_stage = NULL;
    one.recompute = COST_RC_FULL;
    int priced = cost_parts(&pc.model, &st->o->gpu, &one, &lf, &e2, &h2, NULL) == 0;
    one.recompute = COST_RC_MLP;
    priced = priced && cost_parts(&pc.model, &st->o->gpu, &one, &lm, &e2, &h2, NULL) == 0;
    double per_layer_ms = priced ? (lf.t_b - lm.t_b) * 1e3 : INFINITY;
    double layers = (double)pc.model.n_layers / src->n_stages;
    double removed = hi * ceil(layers) * pc.m * per_layer_ms;
    config_free(&pc);
    if (best->time_ms - removed >= st->vocab_beat)
        return 0;
    if (st->stage_mlp >= 0 && q == st->stage_q)
        lo = hi = st->stage_mlp;
    while (lo < hi) { /* largest j that fits */
        int mid = (lo + hi + 1) / 2, f = vocab_stage_fits(st, src, variant, q, mid, err);
        if (f < 0)
            return -1;
        if (f)
            lo = mid;
        else
            hi = mid - 1;
    }
    if (q == st->stage_q)
        st->stage_mlp = lo;
    for (int j = lo; j > 0 && j >= lo - 1; j--) {
        search_config cf;
        if (config_init(st, &cf, src->micro_batch, 0, src->split, err) < 0) {
            config_free(&cf);
            return -1;
        }
        cf.rc_first_stages = q;
        cf.rc_mlp_stages = j;
        search_candidate trial;
        memset(&trial, 0, sizeof trial);
        trial.peak_device = -1;
        (void)vocab_build(st, &cf, src, variant, &trial);
        config_free(&cf);
        trial.rc_devices = 0;
        trial.rc_stages = q;
        trial.rc_mlp_stages = j;
        int take = trial.status == SEARCH_FIT && trial.time_ms * SEARCH_TIME_RESOLUTION < best->time_ms;
        if (take) {
            sched_free(best->sched);
            free(best->layers);
            *best = trial;
        } else {
            sched_free(trial.sched);
            free(trial.layers);
        }
    }
    return 0;
}

/* The by-stage recompute search of vocab_candidate: replaces *best (a
 * by-device result) when a version with the first q stages recomputing
 * fits and is faster. */
static int vocab_stage_rc(search_state *st, int src_index, const search_candidate *src, int variant,
                          search_candidate *best, zb_err *err)
{
    int S = src->n_stages, lo = 0, hi = S;
    if (st->stage_q_src == src_index)
        lo = hi = st->stage_q;
    while (lo < hi) { /* smallest q whose plan without passes fits */
        int mid = (lo + hi) / 2, f = vocab_stage_fits(st, src, variant, mid, 0, err);
        if (f < 0)
            return -1;
        if (f)
            hi = mid;
        else
            lo = mid + 1;
    }
    if (st->stage_q_src != src_index || st->stage_q != lo)
        st->stage_mlp = -1;
    st->stage_q_src = src_index;
    st->stage_q = lo;
    for (int q = lo; q < S && q <= lo + 3; q++) {
        search_config cf;
        if (config_init(st, &cf, src->micro_batch, 0, src->split, err) < 0) {
            config_free(&cf);
            return -1;
        }
        cf.rc_first_stages = q;
        search_candidate trial;
        memset(&trial, 0, sizeof trial);
        trial.peak_device = -1;
        int pruned = vocab_build(st, &cf, src, variant, &trial);
        config_free(&cf);
        trial.rc_devices = 0;
        trial.rc_stages = q;
        int take = trial.status == SEARCH_FIT &&
                   (best->status != SEARCH_FIT || trial.time_ms * SEARCH_TIME_RESOLUTION < best->time_ms);
        if (take) {
            sched_free(best->sched);
            free(best->layers);
            *best = trial;
        } else {
            sched_free(trial.sched);
            free(trial.layers);
        }
        if (pruned || trial.status == SEARCH_FIT)
            break; /* more recompute only adds work */
    }
    if (best->status == SEARCH_FIT && best->rc_stages > 0 && best->rc_mlp_stages == 0)
        return vocab_stage_mlp(st, src, variant, best, err);
    return 0;
}

/* The vocabulary-parallel version of candidate src (its op order kept),
 * appended as "<label> +vocab-N".  The passes and the even split move
 * memory between devices, so src's recompute setting may no longer fit:
 * recompute on the first k devices is tried from src's k towards all of
 * them, halving the distance each time (k, (k+p)/2, ..., p), and the first
 * that fits (the fastest of those, as recompute only adds time) is kept,
 * or the last that did not. */
static int vocab_candidate(search_state *st, int src_index, int variant, zb_err *err)
{
    search_candidate src = st->r->c[src_index]; /* copy: the array may move */
    search_candidate best;
    memset(&best, 0, sizeof best);
    best.status = SEARCH_SKIPPED;
    search_config keep_cf;
    memset(&keep_cf, 0, sizeof keep_cf);
    /* k, then halfway to all, ...: a few settings, not every k.  With
     * --recompute off or on (o->recompute 0 or 1) the source's setting is
     * the only one: the user fixed it. */
    int k_last = st->o->recompute >= 0 ? src.rc_devices : st->pp;
    for (int k = src.rc_devices; k <= k_last; k += (st->pp - k + 1) / 2 > 0 ? (st->pp - k + 1) / 2 : 1) {
        search_config cf;
        if (config_init(st, &cf, src.micro_batch, k, src.split, err) < 0) {
            config_free(&cf);
            sched_free(best.sched);
            free(best.layers);
            return -1;
        }
        search_candidate trial;
        memset(&trial, 0, sizeof trial);
        trial.peak_device = -1;
        int pruned = vocab_build(st, &cf, &src, variant, &trial);
        config_free(&cf);
        if (pruned) {
            st->r->vocab_pruned++;
            if (best.status == SEARCH_SKIPPED) { /* nothing better built: keep the reason */
                sched_free(best.sched);
                free(best.layers);
                best = trial;
                best.rc_devices = k;
            } else {
                sched_free(trial.sched);
                free(trial.layers);
            }
            break; /* more recompute only adds work */
        }
        if (best.status == SEARCH_SKIPPED || trial.status != SEARCH_SKIPPED) {
            sched_free(best.sched);
            free(best.layers);
            best = trial;
            best.rc_devices = k;
        } else {
            sched_free(trial.sched);
            free(trial.layers);
        }
        if (best.status == SEARCH_FIT)
            break;
    }
    /* Interleaved and V plans: recompute by stage instead of by device.
     * Their later chunks hold activations briefly (the last chunk's B
     * follows its F after a short round trip), so leaving only those
     * without recompute balances the devices at a fraction of the
     * memory.  The fewest recomputed stages (first q in model order) that
     * fit is found by bisection on the plan without passes (its peak plus
     * the two logits shards a device may hold), then the passes are
     * placed at q and up to three more until one fits. */
    if (st->o->recompute < 0 && src.n_stages > st->pp && src.sched
        && vocab_stage_rc(st, src_index, &src, variant, &best, err) < 0) {
        sched_free(best.sched);
        free(best.layers);
        return -1;
    }
    search_config cf;
    if (config_init(st, &cf, src.micro_batch, best.rc_devices, src.split, err) < 0) {
        config_free(&cf);
        sched_free(best.sched);
        free(best.layers);
        return -1;
    }
    cf.rc_first_stages = best.rc_stages;
    cf.rc_mlp_stages = best.rc_mlp_stages;
    char label[40];
    snprintf(label, sizeof label, "%.28s +vocab-%d", src.label, variant);
    search_candidate *c = new_candidate(st, &cf, label, src.family, src.chunks, err);
    config_free(&cf);
    if (!c) {
        sched_free(best.sched);
        free(best.layers);
        return -1;
    }
    search_candidate base = *c; /* identity fields from new_candidate */
    *c = best;
    memcpy(c->label, base.label, sizeof c->label);
    memcpy(c->family, base.family, sizeof c->family);
    c->chunks = base.chunks;
    c->micro_batch = base.micro_batch;
    c->n_micro = base.n_micro;
    c->rc_devices = base.rc_devices;
    c->rc_stages = base.rc_stages;
    c->rc_mlp_stages = base.rc_mlp_stages;
    c->recompute = base.recompute;
    c->pp = base.pp;
    c->dp = base.dp;
    c->layout = base.layout;
    c->split = base.split;
    c->split_tuned = 0;
    c->seq = base.seq;
    c->targets = search_target_mask(c);
    tick(st);
    return 0;
}

/* Each label's best candidate of depth st->pp (as the split search picks
 * them, its tuned versions included), in both variants. */
static int vocab_depth(search_state *st, zb_err *err)
{
    search_result *r = st->r;
    if (rank(r) < 0)
        return zb_fail(err, "out of memory");
    int n = r->n, n_pick = 0;
    int *pick = malloc(sizeof *pick * (size_t)(n ? n : 1));
    if (!pick)
        return zb_fail(err, "out of memory");
    /* The best fit that may win so far (fits sort first, fastest first). */
    st->vocab_beat = INFINITY;
    st->stage_q_src = -1;
    st->stage_mlp = -1;
    for (int i = 0; i < r->n_fit; i++)
        if (st->o->vocab != SEARCH_VOCAB_PARALLEL || r->c[i].vocab) {
            /* one resolution up: a time that close ties, and ties go to the lower peak */
            st->vocab_beat = r->c[i].time_ms * SEARCH_TIME_RESOLUTION;
            break;
        }
    for (int i = 0; i < n; i++) {
        const search_candidate *c = &r->c[i];
        if (!of_depth(st, c) || c->status == SEARCH_SKIPPED || !c->sched || c->vocab)
            continue;
        int dup = 0;
        for (int k = 0; k < n_pick && !dup; k++)
            dup = !strcmp(r->c[pick[k]].label, c->label);
        if (!dup)
            pick[n_pick++] = i;
    }
    int rc = 0;
    for (int k = 0; k < n_pick && rc == 0; k++)
        for (int variant = 1; variant <= 2 && rc == 0; variant++)
            rc = vocab_candidate(st, pick[k], variant, err);
    free(pick);
    return rc;
}

/* Every config of pipeline depth st->pp. */
/* Whether the depth being searched can hold the model at all: when its
 * static floor (cost_static_floor: the layers' weights, gradients and
 * optimizer state spread evenly, and the reserve) exceeds the limit, no
 * plan of any family, split, recompute or micro-batch fits there, so
 * none is built (a 405B model on 512 GPUs: every depth up to 32, half
 * the search's time; --exhaustive builds them).  The depth is then one
 * skipped candidate carrying the floor, for the why block and the
 * "nothing fits" line.  Sets
 * st->static_floor; returns 1 when the depth fits, 0 when it was
 * skipped, -1 with err. */
static int depth_holds_static(search_state *st, int b, zb_err *err)
{
    const search_options *o = st->o;
    cost_options co;
    cost_options_for(o, st, o->split, &co);
    zb_model m = o->model;
    m.micro_batch = b;
    if (cost_static_floor(&m, &o->gpu, &co, st->pp, &st->static_floor, err) < 0)
        return -1;
    if (!(st->static_floor > o->mem_bytes) || o->exhaustive)
        return 1;
    search_config cf = { .b = b, .m = o->global_batch / st->dp / b };
    cf.copt.split = o->split;
    search_candidate *c = new_candidate(st, &cf, "(every plan)", "none", 1, err);
    if (!c)
        return -1;
    char need[32], lim[32];
    zb_size_format(st->static_floor, need, sizeof need);
    zb_size_format(o->mem_bytes, lim, sizeof lim);
    char why[200];
    snprintf(why, sizeof why, "pp=%d x dp=%d: the weights, gradients and optimizer state alone take at least "
             "%s per device > limit %s; no plan of this depth was built", st->pp, st->dp, need, lim);
    skip(c, why);
    c->static_floor = 1;
    c->static_bytes = st->static_floor;
    tick(st);
    return 0;
}

static int run_depth(search_state *st, zb_err *err)
{
    const search_options *o = st->o;
    search_prune_clear(&st->prune); /* label bests are per depth and layout */
    int sizes[32];
    int batch = o->global_batch / st->dp;
    int n_sizes = micro_batch_sizes(o, batch, sizes, 32);
    int p = st->pp;
    st->static_floor = 0;
    if (n_sizes > 0) {
        int holds = depth_holds_static(st, sizes[0], err);
        if (holds <= 0)
            return holds;
    }
    int rc_list[4], n_rc = 0;
    if (o->recompute <= 0)
        rc_list[n_rc++] = 0;
    if (o->recompute != 0)
        rc_list[n_rc++] = p;
    /* First k devices recompute: they hold the most micro-batches in
     * flight.  Every k for p <= 8; k = p/8, 2p/8, ..., 7p/8 beyond. */
    int partial[8], n_partial = 0;
    /* Beyond PP x DP only Megatron-LM and torchtitan run a layout, and
     * both recompute every stage alike: per-device settings are built
     * for the plain layout only. */
    int ext = layout_is_extended(&st->layout);
    if (o->recompute < 0 && !ext)
        for (int q = 1; q <= 7; q++) {
            int k = p <= 8 ? q : (p * q + 4) / 8;
            if (k > 0 && k < p && (n_partial == 0 || partial[n_partial - 1] != k))
                partial[n_partial++] = k;
        }
    cost_split splits[2] = { o->split, o->split == COST_SPLIT_BALANCED ? COST_SPLIT_PAPER : COST_SPLIT_BALANCED };
    int n_splits = o->split_search ? 2 : 1;
    /* With recompute searched, also every stage at the MLP level: the
     * global selective setting Megatron-LM offers (its mlp and layernorm
     * modules), which zbsched and torch run too. */
    int n_mlp = o->recompute < 0 && !(ext && o->target == SEARCH_TARGET_TORCHTITAN); /* it has no MLP level */
    for (int i = 0; i < n_sizes; i++) {
        for (int si = 0; si < n_splits; si++) {
            for (int ri = 0; ri < n_rc + n_partial + n_mlp; ri++) {
                int mlp = ri == n_rc + n_partial;
                int k = mlp ? 0 : ri < n_rc ? rc_list[ri] : partial[ri - n_rc];
                search_config cf;
                if (config_init_rc(st, &cf, sizes[i], k, mlp ? SEARCH_RC_ALL : 0, mlp ? SEARCH_RC_ALL : 0,
                                   splits[si], err) < 0 || run_config(st, &cf, err) < 0) {
                    config_free(&cf);
                    return -1;
                }
                config_free(&cf);
            }
            /* Drop schedules early so memory stays bounded. */
            if (rank(st->r) < 0)
                return zb_fail(err, "out of memory");
        }
    }
    if (o->split_search && tune_depth(st, err) < 0)
        return -1;
    /* Over one device there is nothing to split the vocabulary over. */
    if (o->vocab && st->pp > 1 && !layout_is_extended(&st->layout) && vocab_depth(st, err) < 0)
        return -1;
    if (o->ilp && !layout_is_extended(&st->layout) && run_ilp(st, err) < 0)
        return -1;
    return 0;
}

/* Sets st's depth p, width N/p and how they map onto nodes: a
 * data-parallel group takes consecutive GPUs (its gradient traffic is the
 * largest), so pipeline neighbours are dp GPUs apart. */
static void set_depth(search_state *st, int p)
{
    const search_options *o = st->o;
    st->pp = p;
    st->dp = st->n_gpus / p;
    int per_node = o->nodes > 0 ? o->n_gpus / o->nodes : gpu_per_node(&o->gpu);
    if (per_node < 1)
        per_node = 1;
    /* Ranks in Megatron's order: TP fastest, then CP, then DP, then PP. */
    int inner = st->layout.tp * st->layout.cp;
    st->dp_intra = (long)st->dp * inner <= per_node;
    st->devices_per_node = (long)st->dp * inner >= per_node ? 1 : per_node / (st->dp * inner);
}

/* The baseline: plain 1F1B, b=1, recompute on every stage, the default
 * split, on the deepest pipeline that --gpus alone used to mean. */
static int run_baseline(search_state *st, int p, zb_err *err)
{
    search_result *r = st->r;
    set_depth(st, p);
    search_config cf;
    search_candidate *c = &r->baseline;
    memset(c, 0, sizeof *c);
    snprintf(c->label, sizeof c->label, "1f1b");
    snprintf(c->family, sizeof c->family, "1f1b");
    if (st->o->global_batch % st->dp != 0) {
        skip(c, "the global batch does not divide over the replicas");
        return 0;
    }
    if (config_init(st, &cf, 1, p, st->o->split, err) < 0) {
        config_free(&cf);
        return -1;
    }
    c->chunks = 1;
    c->micro_batch = 1;
    c->n_micro = cf.m;
    c->rc_devices = p;
    c->recompute = 1;
    c->pp = st->pp;
    c->dp = st->dp;
    c->layout = st->layout;
    c->layout.pp = st->pp;
    c->layout.dp = st->dp;
    c->split = st->o->split;
    gen_params gp = cf.gp;
    sched_t *s = NULL;
    zb_err e2 = { { 0 } };
    if (gen_1f1b(&gp, &s, &e2) < 0)
        skip(c, e2.msg);
    else
        evaluate(st, &cf, c, s, NULL);
    config_free(&cf);
    return 0;
}

/* The work bounds at depth p and micro-batch b (no recompute, balanced
 * split): total F+B+W of the plain layout / p, and of the
 * vocabulary-parallel layout (even split, head and embedding sharded, one
 * S and T per device and micro-batch) / p.  No schedule of this depth and
 * b beats them, whatever its recompute, split or order.  Sets
 * r->bound_plain_ms and, when o->vocab, r->bound_vocab_ms. */
static int work_bounds(search_state *st, int p, int b, zb_err *err)
{
    search_result *r = st->r;
    set_depth(st, p);
    search_config cf;
    if (config_init(st, &cf, b, 0, COST_SPLIT_BALANCED, err) < 0) {
        config_free(&cf);
        return -1;
    }
    const sched_t *pl = cf.plain;
    double total = 0;
    for (int i = 0; i < pl->n_stages; i++)
        total += pl->n_micro * (pl->cost[i].t_f + pl->cost[i].t_b + pl->cost[i].t_w);
    r->bound_plain_ms = total / p;
    int rc = 0;
    if (st->o->vocab != SEARCH_VOCAB_PLAIN && st->o->target == SEARCH_TARGET_ZBSCHED && p > 1) {
        int *layers = malloc(sizeof *layers * (size_t)p);
        sched_t *v = sched_clone(pl);
        zb_err e2 = { { 0 } };
        cost_vocab_options vo;
        cost_vocab_options_default(&vo);
        vo.whole_state = 1; /* what zbsched's runtime holds (issue 25) */
    vo.whole_state = 1; /* what zbsched's runtime holds (issue 25) */
        cost_options co = cf.copt;
        co.layers = layers;
        if (!layers || !v) {
            rc = zb_fail(err, "out of memory");
        } else if (cost_layer_split_balanced(cf.model.n_layers, p, 0, 0, layers, &e2) == 0 &&
                   cost_sched(st, &cf, layers, v, &e2) == 0 &&
                   cost_vocab_fill_sched(&cf.model, &st->o->gpu, &co, &vo, v, NULL, &e2) == 0) {
            total = (double)p * v->n_micro * (v->vocab.t_s + v->vocab.t_t);
            for (int i = 0; i < v->n_stages; i++)
                total += v->n_micro * (v->cost[i].t_f + v->cost[i].t_b + v->cost[i].t_w);
            r->bound_vocab_ms = total / p;
        } /* else: the layout does not apply at this depth; no bound */
        free(layers);
        sched_free(v);
    }
    config_free(&cf);
    return rc;
}

/* --- the target's view of the result -------------------------------------- */

/* Whether the searched-for ranking of target t may pick c: t runs it, and
 * for zbsched --vocab parallel lets only vocabulary-parallel plans win. */
static int eligible(const search_options *o, const search_candidate *c, search_target t)
{
    if (!(c->targets >> t & 1))
        return 0;
    return !(t == SEARCH_TARGET_ZBSCHED && o->vocab == SEARCH_VOCAB_PARALLEL && !c->vocab);
}

/* Puts c's time under the step rule (sync_ms when sync, else async_ms)
 * into time_ms, with the tokens/s and MFU that follow from it. */
static void apply_rule(search_candidate *c, int sync)
{
    double t = sync ? c->sync_ms : c->async_ms;
    if (c->status == SEARCH_SKIPPED || !(t > 0))
        return;
    if (c->time_ms > 0) {
        c->tokens_per_s *= c->time_ms / t;
        c->mfu *= c->time_ms / t;
    }
    c->time_ms = t;
}

/* r->best[t] for every target: its best fit under its own rule, or its
 * smallest-peak OOM, or a skipped placeholder. */
static void target_bests(const search_options *o, search_result *r)
{
    for (int t = 0; t < SEARCH_N_TARGETS; t++) {
        int sync = search_target_sync((search_target)t), best = -1;
        for (int i = 0; i < r->n; i++) {
            const search_candidate *c = &r->c[i];
            if ((c->status == SEARCH_FIT || c->status == SEARCH_OOM) && eligible(o, c, (search_target)t) &&
                (best < 0 || rule_cmp(c, &r->c[best], sync) < 0))
                best = i;
        }
        search_candidate *b = &r->best[t];
        memset(b, 0, sizeof *b);
        b->status = SEARCH_SKIPPED;
        b->peak_device = -1;
        if (best < 0)
            continue;
        *b = r->c[best];
        b->layers = NULL;
        b->sched = NULL;
        apply_rule(b, sync);
        search_candidate base = r->baseline;
        apply_rule(&base, sync);
        b->speedup = base.status != SEARCH_SKIPPED && b->time_ms > 0 ? base.time_ms / b->time_ms : 0;
    }
}

/* The result as the searched target sees it: what it cannot run is
 * SEARCH_UNSUPPORTED (with zbsched's --vocab parallel, a plain plan is
 * skipped, as the option says), every time is under its rule, the list is
 * ranked again and the speed-ups are against its baseline.  0, or -1 when
 * memory runs out. */
static int present(const search_options *o, search_result *r)
{
    search_target t = o->target;
    int sync = search_target_sync(t);
    for (int i = 0; i < r->n; i++) {
        search_candidate *c = &r->c[i];
        if (c->status != SEARCH_FIT && c->status != SEARCH_OOM) {
            /* skipped: nothing to run */
        } else if (!(c->targets >> t & 1)) {
            c->status = SEARCH_UNSUPPORTED;
            search_target_refusal(c, t, c->note, sizeof c->note);
        } else if (!eligible(o, c, t)) {
            skip(c, "plain plan: --vocab parallel ranks only vocabulary-parallel plans");
        }
        apply_rule(c, sync);
    }
    apply_rule(&r->baseline, sync);
    if (rank(r) < 0)
        return -1;
    double base = r->baseline.status != SEARCH_SKIPPED ? r->baseline.time_ms : 0;
    r->baseline.speedup = base > 0 ? 1 : 0;
    for (int i = 0; i < r->n; i++)
        r->c[i].speedup = base > 0 && r->c[i].status != SEARCH_SKIPPED ? base / r->c[i].time_ms : 0;
    return 0;
}

/* The pipeline depths of st's layout: every p dividing the GPUs left for
 * pipeline x data parallel (st->n_gpus) with the global batch dividing
 * over the replicas, or o->n_devices.  Returns how many (0: none). */
static int layout_depths(const search_state *st, int *depths, int cap)
{
    const search_options *o = st->o;
    int n = 0;
    if (o->n_devices > 0) {
        if (st->n_gpus % o->n_devices == 0 && o->global_batch % (st->n_gpus / o->n_devices) == 0)
            depths[n++] = o->n_devices;
        return n;
    }
    for (int p = 1; p <= st->n_gpus && n < cap; p++)
        if (st->n_gpus % p == 0 && p <= o->model.n_layers + 2 && o->global_batch % (st->n_gpus / p) == 0)
            depths[n++] = p;
    return n;
}

/* The best time found so far under the target's step rule among the fits
 * it may pick, or INFINITY. */
static double best_time(const search_state *st)
{
    const search_options *o = st->o;
    int sync = search_target_sync(o->target);
    double best = INFINITY;
    for (int i = 0; i < st->r->n; i++) {
        const search_candidate *c = &st->r->c[i];
        if (c->status == SEARCH_FIT && eligible(o, c, o->target))
            best = fmin(best, sync ? c->sync_ms : c->async_ms);
    }
    return best;
}

/* Lower bounds of st's layout over its deepest pipeline p: the work
 * bound (F+B+W of every stage without recompute, over the devices, at the
 * largest micro-batch tried: no schedule, recompute or sync makes a plan
 * faster, and larger micro-batches only amortise latencies) into *ms, and
 * the static memory of the fullest device at the smallest micro-batch
 * (weights, gradients, optimizer, the largest transient, reserve: only a
 * deeper pipeline or a smaller micro-batch shrinks it) into
 * *static_bytes.  0, or -1 with err. */
static int layout_bounds(search_state *st, int p, double *ms, double *static_bytes, zb_err *err)
{
    const search_options *o = st->o;
    int sizes[32];
    set_depth(st, p);
    int n_sizes = micro_batch_sizes(o, o->global_batch / st->dp, sizes, 32);
    *ms = 0;
    *static_bytes = 0;
    if (n_sizes == 0)
        return 0;
    int lo = sizes[0], hi = sizes[0];
    for (int i = 1; i < n_sizes; i++) {
        lo = sizes[i] < lo ? sizes[i] : lo;
        hi = sizes[i] > hi ? sizes[i] : hi;
    }
    for (int pass = 0; pass < 2; pass++) {
        search_config cf;
        if (config_init(st, &cf, pass ? lo : hi, 0, COST_SPLIT_BALANCED, err) < 0) {
            config_free(&cf);
            return -1;
        }
        const sched_t *pl = cf.plain;
        if (pass == 0) {
            double total = 0;
            for (int i = 0; i < pl->n_stages; i++)
                total += pl->n_micro * (pl->cost[i].t_f + pl->cost[i].t_b + pl->cost[i].t_w);
            *ms = total / p;
        } else {
            for (int d = 0; d < pl->n_devices; d++)
                *static_bytes = fmax(*static_bytes, pl->mem_static[d]);
        }
        config_free(&cf);
    }
    return 0;
}

/* The layouts the other targets run and st's target cannot (so that
 * search_layouts left them out), with their work bound and static memory
 * at their deepest pipeline (layout_bounds), into r->other_*.  They are
 * not simulated: the bound is what tells a user of the default target
 * that another engine's layout (tensor parallelism on a 70B model, say)
 * would beat every plan this runtime can run, for the cost of a few cost
 * model calls.  Leaves st's layout and depth changed.  0, or -1 with err. */
static int other_layout_bounds(search_state *st, zb_err *err)
{
    const search_options *o = st->o;
    search_result *r = st->r;
    r->n_other_layouts = 0;
    if (o->gpu.cpu) /* CPU devices are this runtime's own; the other engines' layouts are GPU ones */
        return 0;
    for (int t = 0; t < SEARCH_N_TARGETS; t++) {
        if (t == (int)o->target)
            continue;
        search_options ot = *o;
        ot.target = (search_target)t;
        zb_layout ls[SEARCH_MAX_LAYOUTS];
        zb_err ignored = { { 0 } };
        int n = search_layouts(&ot, ls, SEARCH_MAX_LAYOUTS, &ignored);
        for (int i = 0; i < n; i++) {
            int known = 0;
            for (int k = 0; k < r->n_layouts && !known; k++)
                known = search_layout_same(&ls[i], &r->layout[k]);
            for (int k = 0; k < r->n_other_layouts && !known; k++)
                if (search_layout_same(&ls[i], &r->other_layout[k])) {
                    r->other_targets[k] |= 1u << t;
                    known = 1;
                }
            if (!known && r->n_other_layouts < SEARCH_MAX_LAYOUTS) {
                int k = r->n_other_layouts++;
                r->other_layout[k] = ls[i];
                r->other_targets[k] = 1u << t;
            }
        }
    }
    for (int k = 0; k < r->n_other_layouts; k++) {
        st->layout = r->other_layout[k];
        st->n_gpus = o->n_gpus / (st->layout.tp * st->layout.cp);
        int d[64], nd = layout_depths(st, d, 64);
        r->other_bound_ms[k] = r->other_static_bytes[k] = 0;
        if (nd > 0 && layout_bounds(st, d[nd - 1], &r->other_bound_ms[k], &r->other_static_bytes[k], err) < 0)
            return -1;
        if (nd > 0) { /* the depth the bounds are for */
            r->other_layout[k].pp = d[nd - 1];
            r->other_layout[k].dp = st->n_gpus / d[nd - 1];
        }
    }
    return 0;
}

/* Searches every depth of st's layout (st->layout, st->n_gpus set);
 * *deepest gets its deepest depth (0 when none divides). */
static int run_layout(search_state *st, int *deepest, zb_err *err)
{
    int depths[64];
    int n_depths = layout_depths(st, depths, 64);
    *deepest = n_depths > 0 ? depths[n_depths - 1] : 0;
    for (int i = 0; i < n_depths; i++) {
        set_depth(st, depths[i]);
        if (run_depth(st, err) < 0)
            return -1;
    }
    return 0;
}

/* search_run with the caches its candidates share (search_state). */
static int search_run_with(const search_options *o, search_result *r, v_pattern_cache *patterns, zb_err *err)
{
    memset(r, 0, sizeof *r);
    r->min_peak_index = -1;
    if (check_options(o, err) < 0)
        return -1;
    search_state st = { .o = o, .r = r, .patterns = patterns };
    zb_layout layouts[SEARCH_MAX_LAYOUTS];
    int n_layouts = search_layouts(o, layouts, SEARCH_MAX_LAYOUTS, err);
    if (n_layouts < 0)
        return -1;
    r->n_layouts = n_layouts;
    /* The plain layout (first when searched) checks the job as before. */
    st.layout = layouts[0];
    st.n_gpus = o->n_gpus / (layouts[0].tp * layouts[0].cp);
    int depths[64];
    int n_depths = layout_depths(&st, depths, 64);
    if (n_depths == 0 && o->n_devices <= 0)
        return zb_fail(err, "no pipeline depth divides %d GPUs with the global batch %d divisible by the replicas "
                       "and at most %d stages", st.n_gpus, o->global_batch, o->model.n_layers + 2);
    if (n_depths == 0)
        return zb_fail(err, "%d pipeline devices do not divide %d GPUs with the global batch %d divisible by "
                       "the replicas", o->n_devices, st.n_gpus, o->global_batch);
    int any_sizes = 0;
    for (int i = 0; i < n_depths; i++) {
        int sizes[32];
        any_sizes |= micro_batch_sizes(o, o->global_batch / (st.n_gpus / depths[i]), sizes, 32) > 0;
    }
    if (!any_sizes && o->micro_batch_fixed)
        return zb_fail(err, "micro-batch %d does not divide the batch of a replica (global batch %d over "
                       "the data-parallel width) at any pipeline depth", o->model.micro_batch, o->global_batch);
    if (!any_sizes)
        return zb_fail(err, "no micro-batch size up to %d divides the batch of a replica",
                       o->max_micro_batch);
    /* Progress estimate: configs x families per depth (the split search
     * adds a few dozen more), for the first layout; later ones add theirs. */
    st.total = 0;
    for (int i = 0; i < n_depths; i++) {
        int p = depths[i], sizes[32];
        int n_sizes = micro_batch_sizes(o, o->global_batch / (st.n_gpus / p), sizes, 32);
        int n_rc = o->recompute < 0 ? 3 + (p <= 8 ? p - 1 : 7) : 1;
        int fams = 1 + (p > 1 ? search_max_chunks(&o->model, p) - 1 + 2 + N_ZB_AUTO + 4 : 0);
        st.total += n_sizes * (o->split_search ? 2 : 1) * n_rc * fams + (o->split_search ? 4 * n_sizes * n_rc : 0);
    }
    int base_depth = 0;
    zb_layout base_layout = layouts[0];
    /* Every layout's bounds first, then the layouts in order of their
     * work bound, so that the likely winner is found early and the rest
     * are skipped when their bound already loses.  The plain layout
     * stays first: its work bound is the lowest (no TP or CP traffic)
     * but ignores the recompute memory forces on it, so sorting it in
     * made the big jobs search every layout (llama3-70b on 64 GPUs for
     * megatron: 137 s of CPU against 15 s). */
    for (int k = 0; k < n_layouts; k++) {
        st.layout = layouts[k];
        st.n_gpus = o->n_gpus / (layouts[k].tp * layouts[k].cp);
        int d[64], nd = layout_depths(&st, d, 64);
        r->layout[k] = layouts[k];
        r->layout_bound_ms[k] = 0;
        r->layout_static_bytes[k] = 0;
        if (n_layouts > 1 && nd > 0 &&
            layout_bounds(&st, d[nd - 1], &r->layout_bound_ms[k], &r->layout_static_bytes[k], err) < 0) {
            search_result_free(r);
            return -1;
        }
    }
    for (int k = 2; k < n_layouts; k++) /* insertion sort of 1..n-1 by bound, stable; n <= 48 */
        for (int j = k; j > 1 && r->layout_bound_ms[j] < r->layout_bound_ms[j - 1]; j--) {
            zb_layout tl = r->layout[j];
            r->layout[j] = r->layout[j - 1];
            r->layout[j - 1] = tl;
            double tb = r->layout_bound_ms[j], ts = r->layout_static_bytes[j];
            r->layout_bound_ms[j] = r->layout_bound_ms[j - 1];
            r->layout_static_bytes[j] = r->layout_static_bytes[j - 1];
            r->layout_bound_ms[j - 1] = tb;
            r->layout_static_bytes[j - 1] = ts;
        }
    for (int k = 0; k < n_layouts; k++) {
        st.layout = r->layout[k];
        st.n_gpus = o->n_gpus / (st.layout.tp * st.layout.cp);
        /* Bounds: skip a layout whose work alone loses to the best plan so
         * far, or whose static memory fits no depth. */
        if (k > 0 && (!(r->layout_bound_ms[k] > 0) || r->layout_bound_ms[k] >= best_time(&st) ||
                      r->layout_static_bytes[k] > o->mem_bytes)) {
            r->layout_pruned[k] = 1;
            r->layouts_pruned++;
            continue;
        }
        int deepest = 0;
        if (run_layout(&st, &deepest, err) < 0) {
            search_result_free(r);
            return -1;
        }
        if (k == 0)
            base_depth = deepest;
    }
    /* Baseline on the deepest depth of the first layout (what --gpus N
     * alone meant). */
    st.layout = base_layout;
    st.n_gpus = o->n_gpus / (base_layout.tp * base_layout.cp);
    if (base_depth > 0 && run_baseline(&st, base_depth, err) < 0) {
        search_result_free(r);
        return -1;
    }
    if (base_depth == 0) {
        r->baseline.status = SEARCH_SKIPPED;
        snprintf(r->baseline.note, sizeof r->baseline.note, "no depth");
    }
    for (int i = 0; i < r->n; i++) /* the vocabulary versions were assembled from copies */
        r->c[i].targets = search_target_mask(&r->c[i]);
    r->baseline.targets = search_target_mask(&r->baseline);
    target_bests(o, r);
    if (other_layout_bounds(&st, err) < 0) {
        search_result_free(r);
        return -1;
    }
    if (present(o, r) < 0) {
        search_result_free(r);
        return zb_fail(err, "out of memory");
    }
    if (r->n_fit > 0 && !r->c[0].sched) { /* rank() keeps every target's best; a bug otherwise */
        search_result_free(r);
        return zb_fail(err, "the best plan's schedule was dropped while ranking (a bug: please report it)");
    }
    if (r->n_fit > 0) {
        st.layout = r->c[0].layout;
        st.layout.pp = st.layout.dp = st.layout.chunks = 1;
        st.n_gpus = o->n_gpus / (st.layout.tp * st.layout.cp);
        if (work_bounds(&st, r->c[0].pp, r->c[0].micro_batch, err) < 0) {
            search_result_free(r);
            return -1;
        }
    }
    return 0;
}

int search_run(const search_options *o, search_result *r, zb_err *err)
{
    v_pattern_cache patterns = { 0 };
    int rc = search_run_with(o, r, &patterns, err);
    v_pattern_cache_free(&patterns);
    return rc;
}

void search_explain(const search_candidate *c, search_why *w)
{
    memset(w, 0, sizeof *w);
    w->work_bound_ms = c->busy_mean_ms;
    w->imbalance_bound_ms = c->busy_max_ms;
    w->time_ms = c->time_ms;
    if (c->time_ms > 0) {
        w->bubble_share = (c->time_ms - c->busy_max_ms) / c->time_ms;
        w->imbalance_share = (c->busy_max_ms - c->busy_mean_ms) / c->time_ms;
        w->idle_share = (c->time_ms - c->busy_mean_ms) / c->time_ms;
    }
}
