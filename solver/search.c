/*
 * search.c: enumerate, cost, simulate and rank pipeline configurations
 * under a memory limit (search.h; docs/search.md).
 *
 * One "config" is a micro-batch size b and a recompute setting.  For each
 * config the cost model gives per-stage times and memory on the plain
 * placement (one stage per device) and on the V placement; every family is
 * then built, re-costed on its own placement (interleaving changes the layer
 * split), validated and simulated.  Generators see uniform costs (they only
 * order ops); the simulator sees the real per-stage ones, so the figures
 * include the embedding's and the head's extra time and memory.
 *
 * Candidates are kept in one growing array.  Only the schedules of the best
 * few survive the search: the rest are freed as soon as they are ranked,
 * so memory stays at a few schedules however many candidates run.
 */
#include "solver/search.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedules/gen.h"
#include "solver/solver.h"
#include "src/sim.h"
#include "src/validate.h"

/* Schedules kept after ranking (the best and the runners-up the ILP may
 * refine or the caller may want to look at). */
#define SEARCH_KEEP 4

/* zb-auto limits, as multiples of p * M_B of the device's own stage; 0 is
 * "the largest that fits" (memory limit minus the device's static memory). */
static const double zb_auto_k[] = { 1.0, 1.5, 2.0, 0.0 };
#define N_ZB_AUTO (int)(sizeof zb_auto_k / sizeof zb_auto_k[0])

/* The V family: generator or solver name and function. */
typedef struct v_family {
    const char *name;  /* label and kind */
    gen_fn fn;         /* builder taking gen_params with mem_limit */
} v_family;

void search_options_default(search_options *o)
{
    memset(o, 0, sizeof *o);
    model_preset("llama3-8b", &o->model, NULL);
    gpu_preset("H100-80G", &o->gpu, NULL);
    o->mem_bytes = 40e9;
    o->n_devices = 8;
    o->global_batch = 64;
    o->recompute = -1;
    o->flash_attention = 1;
    o->split = COST_SPLIT_BALANCED;
    o->zero1_dp = 1;
    o->max_micro_batch = 64;
    o->ilp_top = 3;
    o->ilp_time_limit = 10;
}

void search_result_free(search_result *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->n; i++)
        sched_free(r->c[i].sched);
    free(r->c);
    memset(r, 0, sizeof *r);
}

/* --- the search state ----------------------------------------------------- */

typedef struct search_state {
    const search_options *o; /* the caller's options */
    search_result *r;        /* growing candidate list */
    int cap;                 /* allocated length of r->c */
    int done, total;         /* progress */
} search_state;

/* One config: the model at micro-batch b, the cost options, the costs of
 * the plain and V placements, and the uniform parameters generators see. */
typedef struct search_config {
    zb_model model;      /* o->model with micro_batch = b */
    cost_options copt;   /* recompute etc. */
    int b, m, recompute; /* micro-batch size, count, recompute flag */
    sched_t *plain;      /* p stages, plain placement, costs filled; no ops */
    sched_t *vshape;     /* 2p stages, V placement, costs filled; NULL when layers are too few */
    gen_params gp;       /* uniform costs and shape for the generators */
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
    snprintf(c->label, sizeof c->label, "%s", label);
    snprintf(c->family, sizeof c->family, "%s", family);
    c->chunks = chunks;
    c->micro_batch = cf->b;
    c->n_micro = cf->m;
    c->recompute = cf->recompute;
    c->peak_device = -1;
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

/* Costs, validates and simulates c's schedule s (taking ownership of s),
 * then fills c's figures.  A schedule the cost model, validator or
 * simulator rejects becomes a skipped candidate with their message. */
static void evaluate(search_state *st, const search_config *cf, search_candidate *c, sched_t *s)
{
    const search_options *o = st->o;
    zb_err e2 = { { 0 } };
    if (cost_fill_sched(&cf->model, &o->gpu, &cf->copt, s, &e2) < 0 || sched_validate(s, &e2) < 0) {
        skip(c, e2.msg);
        sched_free(s);
        return;
    }
    sim_result sr;
    memset(&sr, 0, sizeof sr);
    if (sim_run(s, &sr, &e2) < 0) {
        skip(c, e2.msg);
        sim_result_free(&sr);
        sched_free(s);
        return;
    }
    double peak = -1;
    for (int d = 0; d < s->n_devices; d++) {
        double v = s->mem_static[d] + sr.dev[d].peak_mem;
        if (v > peak) {
            peak = v;
            c->peak_device = d;
            c->static_bytes = s->mem_static[d];
        }
    }
    c->peak_bytes = peak;
    c->iter_ms = sr.makespan;
    c->cost_ms = sr.cost;
    c->bubble_rate = sr.bubble_rate;
    double iter_s = sr.makespan * 1e-3;
    double tokens = (double)o->global_batch * cf->model.seq_len;
    c->tokens_per_s = iter_s > 0 ? tokens / iter_s / o->n_devices : 0;
    double flops = cf->m * cost_model_flops(&cf->model, &cf->copt);
    c->mfu = iter_s > 0 ? flops / (iter_s * o->n_devices * o->gpu.peak_flops) : 0;
    sim_result_free(&sr);
    if (peak <= o->mem_bytes) {
        c->status = SEARCH_FIT;
    } else {
        c->status = SEARCH_OOM;
        snprintf(c->note, sizeof c->note,
                 "needs %.2f GB on device %d (static %.2f GB + activations %.2f GB) > limit %.2f GB",
                 peak / 1e9, c->peak_device, c->static_bytes / 1e9, (peak - c->static_bytes) / 1e9,
                 o->mem_bytes / 1e9);
    }
    c->sched = s;
}

/* The cost options of every candidate with this recompute setting. */
static void cost_options_for(const search_options *o, int recompute, cost_options *c)
{
    cost_options_default(c);
    c->recompute = recompute;
    c->split = o->split;
    c->flash_attention = o->flash_attention;
    c->zero1_dp = o->zero1_dp;
    c->profile = o->profile;
}

/* Builds a config's cost templates and uniform generator parameters. */
static int config_init(search_state *st, search_config *cf, int b, int recompute, zb_err *err)
{
    const search_options *o = st->o;
    memset(cf, 0, sizeof *cf);
    cf->model = o->model;
    cf->model.micro_batch = b;
    cf->b = b;
    cf->m = o->global_batch / b;
    cf->recompute = recompute;
    cost_options_for(o, recompute, &cf->copt);
    int p = o->n_devices;
    cf->plain = sched_new(p, cf->m, p);
    if (!cf->plain)
        return zb_fail(err, "out of memory");
    sched_place_interleaved(cf->plain);
    if (cost_fill_sched(&cf->model, &o->gpu, &cf->copt, cf->plain, err) < 0)
        return -1;
    if (2 * p <= cf->model.n_layers + 2) {
        cf->vshape = sched_new(p, cf->m, 2 * p);
        if (!cf->vshape)
            return zb_fail(err, "out of memory");
        sched_place_v(cf->vshape);
        if (cost_fill_sched(&cf->model, &o->gpu, &cf->copt, cf->vshape, err) < 0)
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
    gp->t_comm = cf->plain->t_comm;
    gp->m_f = cf->plain->cost[big].d_f;
    gp->m_b = cf->plain->cost[big].d_b;
    gp->m_w = cf->plain->cost[big].d_w;
    gp->time_limit = o->ilp_time_limit;
    return 0;
}

static void config_free(search_config *cf)
{
    sched_free(cf->plain);
    sched_free(cf->vshape);
}

/* Runs one generator-built family. */
static int run_gen(search_state *st, search_config *cf, const char *label, const char *kind,
                   int chunks, double *limit, zb_err *err)
{
    search_candidate *c = new_candidate(st, cf, label, kind, chunks, err);
    if (!c)
        return -1;
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
        evaluate(st, cf, c, s);
    tick(st);
    return 0;
}

/* Runs a solver taking gen_params (the V family). */
static int run_solver(search_state *st, search_config *cf, const char *label, gen_fn fn,
                      double *limit, zb_err *err)
{
    search_candidate *c = new_candidate(st, cf, label, label, 2, err);
    if (!c)
        return -1;
    gen_params gp = cf->gp;
    gp.chunks = 2;
    gp.mem_limit = limit;
    sched_t *s = NULL;
    zb_err e2 = { { 0 } };
    if (fn(&gp, &s, &e2) < 0)
        skip(c, e2.msg);
    else
        evaluate(st, cf, c, s);
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
    solver_problem pr = { .p = st->o->n_devices, .m = cf->m, .cost = cf->plain->cost,
                          .t_comm = cf->plain->t_comm, .limit = limit };
    sched_t *s = NULL;
    zb_err e2 = { { 0 } };
    int rc = ilp ? solver_ilp_costs(&pr, st->o->ilp_time_limit, &s, &e2)
                 : solver_zb_auto_costs(&pr, &s, NULL, &e2);
    if (rc < 0)
        skip(c, e2.msg);
    else
        evaluate(st, cf, c, s);
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

static int run_config(search_state *st, search_config *cf, zb_err *err)
{
    const search_options *o = st->o;
    int p = o->n_devices;
    double *limit = malloc(sizeof *limit * (size_t)p);
    if (!limit)
        return zb_fail(err, "out of memory");
    int rc = -1;

    if (run_gen(st, cf, "1f1b", "1f1b", 1, NULL, err) < 0)
        goto out;
    int vmax = (cf->model.n_layers + 2) / p;
    for (int v = 2; v <= vmax; v++) {
        char label[40];
        snprintf(label, sizeof label, "interleaved v=%d", v);
        if (run_gen(st, cf, label, "interleaved", v, NULL, err) < 0)
            goto out;
    }
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
        /* Limits for the solvers in the units of the generators' deltas
         * (bytes); a device whose static memory already exceeds the limit
         * gets 0 and the solver reports it. */
        for (int d = 0; d < p; d++)
            if (limit[d] < 0)
                limit[d] = 0;
        const v_family vf[] = {
            { "v-min", solver_v_min }, { "v-half", solver_v_half }, { "v-zb", solver_v_zb },
        };
        if (run_gen(st, cf, "zb-v", "zb-v", 2, NULL, err) < 0)
            goto out;
        /* The V solvers see the V placement's uniform costs. */
        gen_params saved = cf->gp;
        int big = 0;
        for (int i = 0; i < 2 * p; i++)
            if (cf->vshape->cost[i].d_f > cf->vshape->cost[big].d_f)
                big = i;
        cf->gp.m_f = cf->vshape->cost[big].d_f;
        cf->gp.m_b = cf->vshape->cost[big].d_b;
        cf->gp.m_w = cf->vshape->cost[big].d_w;
        double tf = 0, tb = 0, tw = 0;
        for (int i = 0; i < 2 * p; i++) {
            tf += cf->vshape->cost[i].t_f / (2 * p);
            tb += cf->vshape->cost[i].t_b / (2 * p);
            tw += cf->vshape->cost[i].t_w / (2 * p);
        }
        cf->gp.t_f = tf;
        cf->gp.t_b = tb;
        cf->gp.t_w = tw;
        for (size_t i = 0; i < sizeof vf / sizeof vf[0]; i++)
            if (run_solver(st, cf, vf[i].name, vf[i].fn, limit, err) < 0) {
                cf->gp = saved;
                goto out;
            }
        cf->gp = saved;
    }
    rc = 0;
out:
    free(limit);
    return rc;
}

/* Bucketing by log keeps the comparison transitive (see
 * SEARCH_TIME_RESOLUTION in search.h for why times are bucketed). */
static long time_bucket(double ms)
{
    return ms > 0 ? (long)floor(log(ms) / log(SEARCH_TIME_RESOLUTION)) : 0;
}

/* Ranking: fits by iteration time (to SEARCH_TIME_RESOLUTION), then peak,
 * then exact time; then OOM by peak; then skipped in enumeration order
 * (stable through the insertion sort). */
static int rank_cmp(const void *pa, const void *pb)
{
    const search_candidate *a = pa, *b = pb;
    if (a->status != b->status)
        return a->status < b->status ? -1 : 1;
    if (a->status == SEARCH_FIT) {
        long ta = time_bucket(a->iter_ms), tb = time_bucket(b->iter_ms);
        if (ta != tb)
            return ta < tb ? -1 : 1;
        if (a->peak_bytes != b->peak_bytes)
            return a->peak_bytes < b->peak_bytes ? -1 : 1;
        if (a->iter_ms != b->iter_ms)
            return a->iter_ms < b->iter_ms ? -1 : 1;
        if (a->peak_bytes != b->peak_bytes)
            return a->peak_bytes < b->peak_bytes ? -1 : 1;
    } else if (a->status == SEARCH_OOM) {
        if (a->peak_bytes != b->peak_bytes)
            return a->peak_bytes < b->peak_bytes ? -1 : 1;
    }
    return 0;
}

/* Sorts (insertion sort: stable, and a few hundred candidates at most),
 * counts the fits, finds the smallest peak, and frees every schedule except
 * those of the first SEARCH_KEEP fits and of the smallest-peak candidate. */
static void rank(search_result *r)
{
    for (int i = 1; i < r->n; i++) {
        search_candidate tmp = r->c[i];
        int j = i - 1;
        while (j >= 0 && rank_cmp(&r->c[j], &tmp) > 0) {
            r->c[j + 1] = r->c[j];
            j--;
        }
        r->c[j + 1] = tmp;
    }
    r->n_fit = 0;
    r->min_peak_bytes = 0;
    r->min_peak_index = -1;
    for (int i = 0; i < r->n; i++) {
        const search_candidate *c = &r->c[i];
        if (c->status == SEARCH_FIT)
            r->n_fit++;
        if (c->status != SEARCH_SKIPPED &&
            (r->min_peak_index < 0 || c->peak_bytes < r->min_peak_bytes)) {
            r->min_peak_bytes = c->peak_bytes;
            r->min_peak_index = i;
        }
    }
    for (int i = 0; i < r->n; i++) {
        search_candidate *c = &r->c[i];
        int keep = (c->status == SEARCH_FIT && i < SEARCH_KEEP) || i == r->min_peak_index;
        if (c->sched && !keep) {
            sched_free(c->sched);
            c->sched = NULL;
        }
    }
}

static int check_options(const search_options *o, zb_err *err)
{
    if (model_check(&o->model, err) < 0)
        return -1;
    if (!(o->mem_bytes > 0))
        return zb_fail(err, "the memory limit must be positive");
    if (o->n_devices < 1 || o->n_devices > 1024)
        return zb_fail(err, "the number of pipeline devices must be 1..1024, got %d", o->n_devices);
    if (o->global_batch < 1)
        return zb_fail(err, "the global batch must be positive, got %d", o->global_batch);
    if (o->n_devices > o->model.n_layers + 2)
        return zb_fail(err, "%d devices need at least %d layers; model '%s' has %d",
                       o->n_devices, o->n_devices - 2, o->model.name, o->model.n_layers);
    if (o->recompute < -1 || o->recompute > 1)
        return zb_fail(err, "recompute must be -1 (both), 0 or 1");
    if (o->zero1_dp < 1)
        return zb_fail(err, "the ZeRO-1 degree must be >= 1");
    if (o->max_micro_batch < 1)
        return zb_fail(err, "the largest micro-batch size must be >= 1");
    if (!(o->gpu.peak_flops > 0) || !(o->gpu.link_bw > 0) || !(o->gpu.efficiency > 0))
        return zb_fail(err, "GPU '%s' needs positive peak_flops, link_bw and efficiency", o->gpu.name);
    return 0;
}

/* Micro-batch sizes tried: powers of two and the model's own b, each
 * dividing the global batch and at most max_micro_batch.  Returns count. */
static int micro_batch_sizes(const search_options *o, int *sizes, int cap)
{
    int n = 0;
    for (int b = 1; b <= o->max_micro_batch && b <= o->global_batch && n < cap; b *= 2)
        if (o->global_batch % b == 0)
            sizes[n++] = b;
    int own = o->model.micro_batch;
    int have = 0;
    for (int i = 0; i < n; i++)
        have |= sizes[i] == own;
    if (!have && n < cap && own <= o->global_batch && o->global_batch % own == 0 && own <= o->max_micro_batch) {
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
    rank(r);
    int done = 0;
    int n_seen = 0;
    int seen_b[64], seen_rc[64];
    int n_fit = r->n_fit;
    double *limit = malloc(sizeof *limit * (size_t)o->n_devices);
    if (!limit)
        return zb_fail(err, "out of memory");
    for (int i = 0; i < n_fit && done < o->ilp_top && n_seen < 64; i++) {
        int b = r->c[i].micro_batch, rc = r->c[i].recompute, dup = 0;
        for (int k = 0; k < n_seen; k++)
            dup |= seen_b[k] == b && seen_rc[k] == rc;
        if (dup)
            continue;
        seen_b[n_seen] = b;
        seen_rc[n_seen++] = rc;
        search_config cf;
        if (config_init(st, &cf, b, rc, err) < 0) {
            config_free(&cf);
            free(limit);
            return -1;
        }
        headroom(o, cf.plain, limit);
        if (o->progress_stage) {
            char what[64];
            snprintf(what, sizeof what, "ilp %d/%d on b=%d, recompute %s", done + 1, o->ilp_top, b,
                     rc ? "on" : "off");
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

int search_run(const search_options *o, search_result *r, zb_err *err)
{
    memset(r, 0, sizeof *r);
    r->min_peak_index = -1;
    if (check_options(o, err) < 0)
        return -1;
    search_state st = { .o = o, .r = r };
    int sizes[32];
    int n_sizes = micro_batch_sizes(o, sizes, 32);
    if (n_sizes == 0)
        return zb_fail(err, "no micro-batch size up to %d divides the global batch %d",
                       o->max_micro_batch, o->global_batch);
    int rc_lo = o->recompute < 0 ? 0 : o->recompute, rc_hi = o->recompute < 0 ? 1 : o->recompute;
    int per_config = 1 + ((o->model.n_layers + 2) / o->n_devices - 1) + 2 + N_ZB_AUTO + 4;
    st.total = n_sizes * (rc_hi - rc_lo + 1) * per_config + (o->ilp ? o->ilp_top : 0);

    for (int i = 0; i < n_sizes; i++) {
        for (int rc = rc_lo; rc <= rc_hi; rc++) {
            search_config cf;
            if (config_init(&st, &cf, sizes[i], rc, err) < 0 || run_config(&st, &cf, err) < 0) {
                config_free(&cf);
                search_result_free(r);
                return -1;
            }
            config_free(&cf);
            /* Drop schedules early so memory stays bounded. */
            rank(r);
        }
    }
    if (o->ilp && run_ilp(&st, err) < 0) {
        search_result_free(r);
        return -1;
    }
    rank(r);
    return 0;
}

/* --- the schedule file's annotations --------------------------------------- */

static cJSON *number_array(const double *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++) {
        cJSON *x = cJSON_CreateNumber(v[i]);
        if (!x) {
            cJSON_Delete(a);
            return NULL;
        }
        cJSON_AddItemToArray(a, x);
    }
    return a;
}

static int meta_set(cJSON *meta, const char *key, cJSON *value)
{
    if (!value)
        return -1;
    cJSON_DeleteItemFromObjectCaseSensitive(meta, key);
    cJSON_AddItemToObject(meta, key, value);
    return 0;
}

int search_annotate(const search_options *o, search_candidate *c, zb_err *err)
{
    sched_t *s = c->sched;
    assert(s);
    zb_model m = o->model;
    m.micro_batch = c->micro_batch;
    int S = s->n_stages, p = s->n_devices;
    int *split = malloc(sizeof *split * (size_t)S);
    double *v = malloc(sizeof *v * (size_t)(S > p ? S : p));
    double *dev_peak = malloc(sizeof *dev_peak * (size_t)p);
    if (!split || !v || !dev_peak) {
        free(split);
        free(v);
        free(dev_peak);
        return zb_fail(err, "out of memory");
    }
    cost_options copt;
    cost_options_for(o, c->recompute, &copt);
    if (cost_split_layers(&m, &o->gpu, &copt, S, split, err) < 0) {
        free(split);
        free(v);
        free(dev_peak);
        return -1;
    }
    sim_result sr;
    memset(&sr, 0, sizeof sr);
    if (sim_run(s, &sr, err) < 0) {
        sim_result_free(&sr);
        free(split);
        free(v);
        free(dev_peak);
        return -1;
    }
    for (int d = 0; d < p; d++)
        dev_peak[d] = s->mem_static[d] + sr.dev[d].peak_mem;
    sim_result_free(&sr);

    if (!s->meta)
        s->meta = cJSON_CreateObject();
    int bad = !s->meta;
    cJSON *pred = cJSON_CreateObject(), *plan = cJSON_CreateObject();
    bad |= !pred || !plan;
    if (!bad) {
        bad |= !cJSON_AddStringToObject(pred, "cost_source", o->profile ? "profile" : "flops");
        bad |= !cJSON_AddNumberToObject(pred, "iteration_ms", c->iter_ms);
        bad |= !cJSON_AddNumberToObject(pred, "cost_ms", c->cost_ms);
        bad |= !cJSON_AddNumberToObject(pred, "bubble_rate", c->bubble_rate);
        bad |= !cJSON_AddNumberToObject(pred, "tokens_per_s_per_gpu", c->tokens_per_s);
        bad |= !cJSON_AddNumberToObject(pred, "mfu", c->mfu);
        bad |= !cJSON_AddNumberToObject(pred, "peak_bytes", c->peak_bytes);
        bad |= !cJSON_AddNumberToObject(pred, "peak_device", c->peak_device);
        cJSON *a = number_array(dev_peak, p);
        bad |= !a;
        if (a)
            cJSON_AddItemToObject(pred, "device_peak_bytes", a);
        a = number_array(s->mem_static, p);
        bad |= !a;
        if (a)
            cJSON_AddItemToObject(pred, "device_static_bytes", a);

        bad |= !cJSON_AddStringToObject(plan, "schedule", c->label);
        bad |= !cJSON_AddStringToObject(plan, "family", c->family);
        bad |= !cJSON_AddNumberToObject(plan, "chunks", c->chunks);
        bad |= !cJSON_AddNumberToObject(plan, "micro_batch", c->micro_batch);
        bad |= !cJSON_AddNumberToObject(plan, "n_micro", c->n_micro);
        bad |= !cJSON_AddNumberToObject(plan, "global_batch", o->global_batch);
        bad |= !cJSON_AddBoolToObject(plan, "recompute", c->recompute);
        bad |= !cJSON_AddBoolToObject(plan, "flash_attention", o->flash_attention);
        bad |= !cJSON_AddStringToObject(plan, "split", o->split == COST_SPLIT_BALANCED ? "balanced" : "paper");
        bad |= !cJSON_AddNumberToObject(plan, "zero1_dp", o->zero1_dp);
        bad |= !cJSON_AddNumberToObject(plan, "mem_limit_bytes", o->mem_bytes);
        for (int i = 0; i < S; i++)
            v[i] = split[i];
        a = number_array(v, S);
        bad |= !a;
        if (a)
            cJSON_AddItemToObject(plan, "layers_per_stage", a);
    }
    if (!bad) {
        bad |= meta_set(s->meta, "model", model_to_json(&m)) < 0;
        bad |= meta_set(s->meta, "hardware", gpu_to_json(&o->gpu)) < 0;
        bad |= meta_set(s->meta, "predicted", pred) < 0;
        pred = NULL;
        bad |= meta_set(s->meta, "plan", plan) < 0;
        plan = NULL;
    }
    cJSON_Delete(pred);
    cJSON_Delete(plan);
    free(split);
    free(v);
    free(dev_peak);
    if (bad)
        return zb_fail(err, "out of memory annotating the schedule");
    return 0;
}
