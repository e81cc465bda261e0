/*
 * search_candidate.c: one candidate of the search, from its
 * configuration to its place in the ranking (search_state.h).
 *
 * A configuration (search_config) is the model at one micro-batch size
 * with the cost options of one depth, layout, recompute setting and split
 * rule, priced on the plain and V placements.  A candidate is a schedule
 * built on it: it is costed on its own placement (search_cost_sched),
 * simulated and given its figures (search_measure: the per-device span
 * with the data-parallel sync it cannot hide, the peak, tokens and MFU),
 * and ranked with the rest (search_rank: fits by time bucket, then
 * peak; over-the-limit plans by peak; creation order last, so that every
 * target's best is the same whatever the order the list was built in).
 * search.c, search_split.c and search_vocab.c all go through these, so
 * that every plan the search reports is priced and ranked one way.
 *
 * Workload: thousands of candidates per search; ranking sorts the list
 * after each configuration batch (a stable merge sort), and frees every
 * schedule no later step can start from, so that memory stays at a few
 * dozen schedules.
 */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "solver/search_state.h"
#include "src/cost_model.h"
#include "src/sim.h"
#include "src/size.h"

/* Schedules kept after ranking (the best and the runners-up the ILP may
 * refine or the caller may want to look at). */
#define SEARCH_KEEP 4

search_candidate *search_new_candidate(search_state *st, const search_config *cf, const char *label,
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

void search_tick(search_state *st)
{
    st->done++;
    if (st->done > st->total)
        st->total = st->done;
    if (st->o->progress)
        st->o->progress(st->o->progress_ctx, st->done, st->total);
}

void search_skip(search_candidate *c, const char *why)
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
int search_cost_sched(const search_state *st, search_config *cf, const int *layers, sched_t *s, zb_err *err)
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
 * the inter-node link.  Returns the exposed ms of device d, whose
 * parameters are params[d] (search_device_params). */
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
int search_device_params(const search_state *st, search_config *cf, const int *layers, const sched_t *s,
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

int search_dp_exposed_all(const search_state *st, search_config *cf, const int *layers, const sched_t *s,
                          double *exposed, zb_err *err)
{
    for (int d = 0; d < s->n_devices; d++)
        exposed[d] = 0;
    if (st->dp <= 1)
        return 0;
    if (search_device_params(st, cf, layers, s, exposed, err) < 0)
        return -1;
    for (int d = 0; d < s->n_devices; d++) /* reads its own params[d] only: in place */
        exposed[d] = dp_exposed_ms(st, s, exposed, d);
    return 0;
}

double search_busiest_ms(const sched_t *s)
{
    double most = 0;
    for (int d = 0; d < s->n_devices; d++) {
        double busy = sched_has_vocab(s) ? s->n_micro * (s->vocab.t_s + s->vocab.t_t) : 0;
        for (int i = 0; i < s->n_stages; i++)
            if (s->stage_device[i] == d)
                busy += s->n_micro * (s->cost[i].t_f + s->cost[i].t_b + s->cost[i].t_w);
        most = fmax(most, busy);
    }
    return most;
}

double search_device_peak(const sched_t *s, int d)
{
    return s->mem_static[d] + sched_lane_peak(s, d);
}

double search_plan_peak(const sched_t *s)
{
    double peak = 0;
    for (int d = 0; d < s->n_devices; d++)
        peak = fmax(peak, search_device_peak(s, d));
    return peak;
}

/* Simulates s (already costed) and fills c's figures; 0 or -1 with err. */
int search_measure(const search_state *st, search_config *cf, const int *layers, search_candidate *c,
                   const sched_t *s, zb_err *err)
{
    const search_options *o = st->o;
    sim_result sr;
    memset(&sr, 0, sizeof sr);
    double *exposed = malloc(sizeof *exposed * (size_t)s->n_devices);
    if (!exposed)
        return zb_fail(err, "out of memory");
    if (sim_run(s, &sr, err) < 0 || search_dp_exposed_all(st, cf, layers, s, exposed, err) < 0) {
        sim_result_free(&sr);
        free(exposed);
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
        double span = sr.dev[d].span + exposed[d];
        if (span > t)
            t = span;
        first = fmin(first, sr.dev[d].first_start);
        last = fmax(last, sr.dev[d].last_end + exposed[d]);
        bmax = fmax(bmax, sr.dev[d].busy);
        bsum += sr.dev[d].busy;
    }
    free(exposed);
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

/* 1 when candidate c belongs to st's depth and layout (the refinements
 * of a depth re-cost only its own candidates: another layout of the same
 * pipeline depth has another data-parallel width and micro-batch count). */
int search_of_depth(const search_state *st, const search_candidate *c)
{
    const zb_layout *a = &c->layout, *b = &st->layout;
    return c->pp == st->pp && c->dp == st->dp && a->tp == b->tp && a->sp == b->sp && a->cp == b->cp &&
           a->zero == b->zero && a->offload == b->offload;
}

/* The cost options of every candidate of this search at st's depth. */
void search_cost_options_for(const search_options *o, const search_state *st, cost_split split, cost_options *c)
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
int search_config_init_rc(search_state *st, search_config *cf, int b, int rc_devices, int rc_stages,
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
    search_cost_options_for(o, st, split, &cf->copt);
    cf->rc_stage = calloc(SEARCH_MAX_STAGES, 1);
    if (!cf->rc_stage)
        return zb_fail(err, "out of memory");
    int p = st->pp;
    cf->plain = sched_new(p, cf->m, p);
    if (!cf->plain)
        return zb_fail(err, "out of memory");
    sched_place_interleaved(cf->plain);
    if (search_cost_sched(st, cf, NULL, cf->plain, err) < 0)
        return -1;
    if (p > 1 && 2 * p <= cf->model.n_layers + 2) {
        cf->vshape = sched_new(p, cf->m, 2 * p);
        if (!cf->vshape)
            return zb_fail(err, "out of memory");
        sched_place_v(cf->vshape);
        if (search_cost_sched(st, cf, NULL, cf->vshape, err) < 0)
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
int search_config_init(search_state *st, search_config *cf, int b, int rc_devices, cost_split split, zb_err *err)
{
    return search_config_init_rc(st, cf, b, rc_devices, 0, 0, split, err);
}

void search_config_free(search_config *cf)
{
    sched_free(cf->plain);
    sched_free(cf->vshape);
    free(cf->rc_stage);
    cf->plain = cf->vshape = NULL;
    cf->rc_stage = NULL;
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
int search_rule_cmp(const search_candidate *a, const search_candidate *b, int sync)
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

const search_target search_sync_targets[SEARCH_N_SYNC_TARGETS] = { SEARCH_TARGET_TORCHTITAN,
                                                                    SEARCH_TARGET_MEGATRON };

/* One (depth, label) of the candidate list: its first fit and first OOM
 * in the list's (zbsched) order, and the best each sync target can run
 * (a fit, else the smallest OOM) under its own rule; -1 when none. */
typedef struct label_slot {
    int pp;                     /* pipeline depth */
    const char *label;          /* borrowed from a candidate */
    int tuned;                  /* 1: the label's split_tuned candidates, which the
                                 * split search does not start from; 0: the others,
                                 * whose bests it starts from and must find kept */
    int fit, oom;               /* first fit, first OOM in list order */
    int sync_best[SEARCH_N_SYNC_TARGETS]; /* best of search_sync_targets[k] */
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

static label_slot *label_find(label_table *t, int pp, const char *label, int tuned)
{
    unsigned i = (label_hash(pp, label) ^ (unsigned)tuned) & (unsigned)(t->cap - 1);
    while (t->slot[i].label &&
           (t->slot[i].pp != pp || t->slot[i].tuned != tuned || strcmp(t->slot[i].label, label) != 0))
        i = (i + 1) & (unsigned)(t->cap - 1);
    label_slot *s = &t->slot[i];
    if (!s->label) {
        s->pp = pp;
        s->label = label;
        s->tuned = tuned;
        s->fit = s->oom = -1;
        for (int k = 0; k < SEARCH_N_SYNC_TARGETS; k++)
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
        label_slot *s = label_find(t, c->pp, c->label, c->split_tuned != 0);
        if (c->status == SEARCH_FIT && s->fit < 0)
            s->fit = i;
        if (c->status == SEARCH_OOM && s->oom < 0)
            s->oom = i;
        for (int k = 0; k < SEARCH_N_SYNC_TARGETS; k++)
            if ((c->targets >> search_sync_targets[k] & 1) &&
                (s->sync_best[k] < 0 || search_rule_cmp(c, &r->c[s->sync_best[k]], 1) < 0))
                s->sync_best[k] = i;
    }
    return 0;
}

/* Sorts, counts the fits, finds the smallest peak, and frees every
 * schedule except those of the first SEARCH_KEEP fits, of the
 * smallest-peak candidate and of each label's bests (its first fit and
 * first OOM, and each sync target's best), which the split search starts
 * from and which may end as a target's answer.  The bests are kept twice
 * over, among the label's split-tuned candidates and among the others:
 * the split search starts only from the latter, and with the best
 * untuned fit's schedule freed it fell back on the label's smallest peak
 * over the limit, a source that pruning (a plan over the limit behind a
 * fit is not built) may take away. */
int search_rank(search_result *r)
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
        for (int k = 0; k < SEARCH_N_SYNC_TARGETS; k++)
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
