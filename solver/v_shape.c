/*
 * v_shape.c: V-shaped schedules under a memory limit: V-Min, V-Half and
 * V-ZB (Qi et al., "Pipeline Parallelism with Controllable Memory", arXiv
 * 2405.15362; the authors ship them as zbv_greedy / zbv schedulers).
 *
 * Placement: 2p virtual stages, device d holds stages d and 2p-1-d (the
 * V), so a micro-batch goes down the devices on its first chunk and back up
 * on its second; device 0 holds both the first and the last stage.  The
 * three variants differ only in their activation limit per device, in
 * micro-batches of the whole model (2 chunk F's each): V-ZB p, V-Half
 * (p+2)/2, V-Min (p+4)/3, following the paper's Table 1 (peaks M, M/2, M/3)
 * and the authors' demo.  A caller's mem_limit, when given, caps it further.
 *
 * The schedule is built by a greedy list scheduler in global time order.
 * At each step the device whose next action is earliest acts:
 *   - a B whose inputs have arrived, if any (it frees memory and feeds
 *     the devices upstream);
 *   - else an F whose input has arrived and that fits in memory (second
 *     chunk first: it is nearer the loss);
 *   - else a pending W, when memory blocks an F or the device would idle
 *     (knob: only when the whole W fits before the next arrival, or always);
 *   - else it idles until its next input arrives.
 * Deadlock is impossible by construction: a first-chunk F is admitted only
 * if it leaves room for a second-chunk F.  Knob reserve_all keeps room for
 * the second-chunk F of every micro-batch between its two F's on the
 * device, so second-chunk F's always fit.  Without it one free slot is
 * kept, which still suffices: micro-batches run in order on every stage,
 * so the oldest unfinished one finds, once the device's pending W's have
 * run, only younger first-chunk activations in memory, and those left a
 * slot free when they were admitted.  Three knobs (W filling, chunk
 * preference for F, reservation) give eight runs; the smallest
 * largest-device span wins, as in zb-auto.
 *
 * Workload: p up to 32, m up to a few hundred; each step scans the p
 * devices, so a run is O(ops * p), a few milliseconds at p=32, m=256.
 */
#include "solver/solver.h"
#include "solver/solver_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

/* The variants' limits, in whole-model micro-batches (2 chunk F's). */
typedef enum v_variant { V_MIN = 0, V_HALF = 1, V_ZB = 2 } v_variant;

/* Knobs of one greedy run. */
typedef struct v_knobs {
    int w_always;       /* fill any idle time with a W (else: only if it fits) */
    int prefer_chunk0;  /* among ready F's prefer the first chunk */
    int reserve_all;    /* a first-chunk F keeps room for the second-chunk F of
                         * every micro-batch between its F's here (else: for
                         * one, which suffices because micro-batches stay in
                         * order on every stage; see the file comment) */
} v_knobs;

/* Working state of one greedy run. */
typedef struct v_run {
    const sched_t *tmpl;  /* placement, costs, t_comm (no ops) */
    const double *limit;  /* [p] activation limit per device */
    double *end_f;        /* [S][m] end of F(s,j), NAN until run */
    double *end_b;        /* [S][m] end of B(s,j), NAN until run */
    int *nf, *nb, *nw;    /* [S] next F, B, W micro-batch per stage */
    double *t_dev;        /* [p] time each device is free */
    double *mem;          /* [p] activation memory held */
    int *resv;            /* [p] micro-batches between their two F's here */
    sched_t *out;         /* the lists being built */
} v_run;

static double *at(const v_run *r, double *tab, int s, int j)
{
    return &tab[(long)s * r->tmpl->n_micro + j];
}

/* Arrival time of the input of op (kind, s, j) on its device, or NAN when
 * an input is not produced yet. */
static double ready_time(const v_run *r, int kind, int s, int j)
{
    const sched_t *t = r->tmpl;
    int d = t->stage_device[s];
    if (kind == OP_F) {
        if (s == 0)
            return 0;
        double e = *at(r, r->end_f, s - 1, j);
        return e + (t->stage_device[s - 1] != d ? t->t_comm : 0);
    }
    double e = *at(r, r->end_f, s, j);
    if (isnan(e))
        return NAN;
    if (s + 1 < t->n_stages) {
        double eb = *at(r, r->end_b, s + 1, j);
        if (isnan(eb))
            return NAN;
        e = fmax(e, eb + (t->stage_device[s + 1] != d ? t->t_comm : 0));
    }
    return e;
}

/* One device's choice at its current time. */
typedef struct v_choice {
    double when; /* start time of the action, INFINITY when nothing can run */
    int kind;    /* op kind */
    int stage;   /* its stage */
} v_choice;

static v_choice choose(const v_run *r, int d, const v_knobs *k)
{
    const sched_t *t = r->tmpl;
    int p = t->n_devices, m = t->n_micro;
    int st[2] = { d, 2 * p - 1 - d }; /* first and second chunk */
    double now = r->t_dev[d], df = t->cost[st[0]].d_f;
    double next_arrival = INFINITY;
    v_choice c = { INFINITY, -1, -1 };
    /* B: the second chunk first (its B comes first in the backward pass). */
    for (int x = 1; x >= 0; x--) {
        int s = st[x];
        if (r->nb[s] >= m || r->nb[s] >= r->nf[s])
            continue;
        double rt = ready_time(r, OP_B, s, r->nb[s]);
        if (isnan(rt))
            continue;
        if (rt <= now)
            return (v_choice){ now, OP_B, s };
        next_arrival = fmin(next_arrival, rt);
    }
    /* F: memory permitting, with the first chunk's reservation. */
    int blocked = 0;
    for (int y = 0; y < 2; y++) {
        int x = k->prefer_chunk0 ? y : 1 - y, s = st[x];
        if (r->nf[s] >= m)
            continue;
        double rt = ready_time(r, OP_F, s, r->nf[s]);
        if (isnan(rt))
            continue;
        double need = x == 0 ? r->mem[d] + df * (k->reserve_all ? r->resv[d] + 2 : 2) : r->mem[d] + df;
        if (need > r->limit[d] + 1e-9 * fmax(1, fabs(r->limit[d]))) {
            blocked = 1;
            continue;
        }
        if (rt <= now)
            return (v_choice){ now, OP_F, s };
        next_arrival = fmin(next_arrival, rt);
    }
    /* W: the oldest pending one. */
    int ws = -1;
    for (int x = 0; x < 2; x++) {
        int s = st[x];
        if (r->nw[s] < r->nb[s]
            && (ws < 0 || *at(r, r->end_b, s, r->nw[s]) < *at(r, r->end_b, ws, r->nw[ws])))
            ws = s;
    }
    if (ws >= 0 && (blocked || k->w_always || isinf(next_arrival)
                    || now + t->cost[ws].t_w <= next_arrival))
        return (v_choice){ now, OP_W, ws };
    if (!isinf(next_arrival))
        c = (v_choice){ next_arrival, -1, -1 }; /* idle, then look again */
    else if (ws >= 0)
        c = (v_choice){ now, OP_W, ws };
    return c;
}

/* One greedy run; returns 0 or -1 (out of memory; err set). */
static int v_run_once(v_run *r, const v_knobs *k, zb_err *err)
{
    const sched_t *t = r->tmpl;
    int p = t->n_devices, m = t->n_micro, S = t->n_stages;
    for (long i = 0; i < (long)S * m; i++)
        r->end_f[i] = r->end_b[i] = NAN;
    memset(r->nf, 0, sizeof(int) * (size_t)S);
    memset(r->nb, 0, sizeof(int) * (size_t)S);
    memset(r->nw, 0, sizeof(int) * (size_t)S);
    memset(r->t_dev, 0, sizeof(double) * (size_t)p);
    memset(r->mem, 0, sizeof(double) * (size_t)p);
    memset(r->resv, 0, sizeof(int) * (size_t)p);
    for (int d = 0; d < p; d++)
        r->out->dev[d].n_ops = 0;

    /* Each device's next action, recomputed only when it acts or an input
     * for it is produced: choose() reads only its own state and its
     * producers' end times. */
    v_choice *ch = malloc(sizeof *ch * (size_t)p);
    if (!ch)
        return zb_fail(err, "out of memory building a V schedule");
    for (int d = 0; d < p; d++)
        ch[d] = choose(r, d, k);
    long left = 3L * S * m;
    while (left > 0) {
        int best_d = -1;
        v_choice best = { INFINITY, -1, -1 };
        for (int d = 0; d < p; d++) {
            if (ch[d].when < best.when) {
                best = ch[d];
                best_d = d;
            }
        }
        if (best_d < 0) {
            free(ch);
            return zb_fail(err, "V schedule stuck with %ld ops left (bug)", left);
        }
        if (best.kind < 0) {
            r->t_dev[best_d] = best.when; /* idle until the input arrives */
            ch[best_d] = choose(r, best_d, k);
            continue;
        }
        int s = best.stage, d = best_d, j;
        const stage_cost *sc = &t->cost[s];
        double start = best.when, end;
        if (best.kind == OP_F) {
            j = r->nf[s]++;
            end = start + sc->t_f;
            *at(r, r->end_f, s, j) = end;
            r->mem[d] += sc->d_f;
            r->resv[d] += s < p ? 1 : -1;
        } else if (best.kind == OP_B) {
            j = r->nb[s]++;
            end = start + sc->t_b;
            *at(r, r->end_b, s, j) = end;
            r->mem[d] += sc->d_b;
        } else {
            j = r->nw[s]++;
            end = start + sc->t_w;
            r->mem[d] += sc->d_w;
        }
        r->t_dev[d] = end;
        if (sched_push(r->out, d, (op_kind)best.kind, s, j) != 0) {
            free(ch);
            return zb_fail(err, "out of memory building a V schedule");
        }
        left--;
        ch[d] = choose(r, d, k);
        /* The consumer of this op's output may now have a new choice. */
        if (best.kind == OP_F && s + 1 < S)
            ch[t->stage_device[s + 1]] = choose(r, t->stage_device[s + 1], k);
        if (best.kind == OP_B && s > 0)
            ch[t->stage_device[s - 1]] = choose(r, t->stage_device[s - 1], k);
    }
    free(ch);
    return 0;
}

/* One op of the periodic pattern: its slot and what it is. */
typedef struct v_slot {
    long slot;  /* position in the unit-time pattern */
    int type;   /* 0 F chunk 0, 1 F chunk 1, 2 B chunk 1, 3 B chunk 0,
                 * 4 W chunk 1, 5 W chunk 0 */
    int mb;     /* micro-batch */
} v_slot;

static int cmp_slot(const void *x, const void *y)
{
    const v_slot *a = x, *b = y;
    return (a->slot > b->slot) - (a->slot < b->slot);
}

/* The Controllable-Memory paper's stable patterns for V-Min and V-Half, as
 * the authors' zbv_greedy.py lays them out: with unit slots and a repeat
 * interval of 6 (F, f, B, b, W, w per micro-batch), device i runs
 * micro-batch j's
 *   V-Min:  F at i,  f at 2p-1-i,  B at 2p+g+i,    b at 4p+g-1-i   (g = 2 if 3 | p, else 0)
 *   V-Half: F at 2i, f at 3p-2-i,  B at 3p+g+2i-1, b at 6p+g-2-i   (g = 3 if 2 | p, else 0)
 * plus 6j, where f/b are the second chunk's forward and the first chunk's
 * backward.  W's go, in order, into the free slots after their B's.  The
 * device lists are the slots in time order; real times are ASAP (the
 * authors also "squeeze" ops into earlier free slots when memory allows;
 * that refinement is not done here).  Stored in *out; 0 or -1 on out of
 * memory. */
static int pattern_sched(const sched_t *tmpl, v_variant variant, sched_t **out)
{
    int p = tmpl->n_devices, m = tmpl->n_micro;
    sched_t *s = sched_clone(tmpl);
    v_slot *ops = malloc(sizeof *ops * 6 * (size_t)m);
    if (!s || !ops)
        goto fail;
    for (int i = 0; i < p; i++) {
        long base[4];
        if (variant == V_MIN) {
            int g = p % 3 == 0 ? 2 : 0;
            base[0] = i; base[1] = 2L * p - 1 - i; base[2] = 2L * p + g + i; base[3] = 4L * p + g - 1 - i;
        } else {
            int g = p % 2 == 0 ? 3 : 0;
            base[0] = 2L * i; base[1] = 3L * p - 2 - i; base[2] = 3L * p + g + 2L * i - 1;
            base[3] = 6L * p + g - 2 - i;
        }
        int n = 0;
        for (int t = 0; t < 4; t++)
            for (int j = 0; j < m; j++)
                ops[n++] = (v_slot){ base[t] + 6L * j, t, j };
        qsort(ops, (size_t)n, sizeof *ops, cmp_slot);
        /* W's into the free slots, chunk 1's first, each in B order */
        int pend[2] = { 0, 0 }, next_w[2] = { 0, 0 }, x = 0, n4 = n;
        long t = 0, last = ops[n4 - 1].slot;
        for (; t <= last; t++) {
            if (x < n4 && ops[x].slot == t) {
                if (ops[x].type >= 2)
                    pend[ops[x].type - 2]++;
                x++;
                continue;
            }
            for (int w = 0; w < 2; w++) {
                if (pend[w]) {
                    ops[n++] = (v_slot){ t, 4 + w, next_w[w]++ };
                    pend[w]--;
                    break;
                }
            }
        }
        for (int w = 0; w < 2; w++)
            while (pend[w]-- > 0)
                ops[n++] = (v_slot){ ++t, 4 + w, next_w[w]++ };
        qsort(ops, (size_t)n, sizeof *ops, cmp_slot);
        int st0 = i, st1 = 2 * p - 1 - i;
        for (int k = 0; k < n; k++) {
            static const int kind[6] = { OP_F, OP_F, OP_B, OP_B, OP_W, OP_W };
            static const int chunk1[6] = { 0, 1, 1, 0, 1, 0 };
            int t6 = ops[k].type;
            if (sched_push(s, i, (op_kind)kind[t6], chunk1[t6] ? st1 : st0, ops[k].mb) != 0)
                goto fail;
        }
    }
    free(ops);
    *out = s;
    return 0;
fail:
    free(ops);
    sched_free(s);
    return -1;
}

static int v_solve(const gen_params *gp, v_variant variant, sched_t **out, zb_err *err)
{
    static const char *const names[] = { "v-min", "v-half", "v-zb" };
    int p = gp->stages, m = gp->microbatches;
    if (p < 1 || m < 1)
        return zb_fail(err, "%s needs at least 1 device and 1 micro-batch (got p=%d, m=%d)", names[variant], p, m);
    if (gp->chunks != 1 && gp->chunks != 2)
        return zb_fail(err, "%s places 2 chunks per device in a V (got %d chunks)", names[variant], gp->chunks);
    if (!(gp->t_f > 0 && gp->t_b > 0 && gp->t_w > 0) || !isfinite(gp->t_f + gp->t_b + gp->t_w)
        || !(gp->t_comm >= 0) || !isfinite(gp->t_comm))
        return zb_fail(err, "%s: F, B, W times must be finite and > 0, T_comm >= 0", names[variant]);
    if (!(gp->m_f > 0) || !(gp->m_b <= 0) || !(gp->m_w <= 0) || !isfinite(gp->m_f + gp->m_b + gp->m_w)
        || fabs(gp->m_f + gp->m_b + gp->m_w) > 1e-9 * gp->m_f)
        return zb_fail(err, "%s: memory deltas need dF > 0, dB <= 0, dW <= 0 and dF + dB + dW = 0 (got %g, %g, %g)",
                       names[variant], gp->m_f, gp->m_b, gp->m_w);
    /* Whole-model micro-batches of activations, 2 chunk F's each. */
    int mbs = variant == V_ZB ? p : variant == V_HALF ? (p + 2) / 2 : (p + 4) / 3;
    double own = 2.0 * mbs * gp->m_f;
    if (gp->mem_limit)
        for (int d = 0; d < p; d++)
            if (!(gp->mem_limit[d] >= 2 * gp->m_f))
                return zb_fail(err, "device %d: memory limit %g is below one micro-batch's activation on a V device (2 x M_B = %g)",
                               d, gp->mem_limit[d], 2 * gp->m_f);

    sched_t *tmpl = sched_new(p, m, 2 * p);
    v_run r = { .tmpl = tmpl };
    double *limit = malloc(sizeof(double) * (size_t)p);
    sched_t *best = NULL;
    double best_cost = INFINITY;
    int rc = -1;
    if (!tmpl || !limit)
        goto oom;
    snprintf(tmpl->name, sizeof tmpl->name, "%s", names[variant]);
    sched_place_v(tmpl);
    sched_set_costs(tmpl, gp->t_f, gp->t_b, gp->t_w, gp->t_comm);
    sched_set_mem(tmpl, gp->m_f, gp->m_b, gp->m_w);
    for (int d = 0; d < p; d++)
        limit[d] = gp->mem_limit ? fmin(own, gp->mem_limit[d]) : own;
    r.limit = limit;
    long cells = 2L * p * m;
    r.end_f = malloc(sizeof(double) * (size_t)cells);
    r.end_b = malloc(sizeof(double) * (size_t)cells);
    r.nf = malloc(sizeof(int) * 2 * (size_t)p);
    r.nb = malloc(sizeof(int) * 2 * (size_t)p);
    r.nw = malloc(sizeof(int) * 2 * (size_t)p);
    r.t_dev = malloc(sizeof(double) * (size_t)p);
    r.mem = malloc(sizeof(double) * (size_t)p);
    r.resv = malloc(sizeof(int) * (size_t)p);
    if (!r.end_f || !r.end_b || !r.nf || !r.nb || !r.nw || !r.t_dev || !r.mem || !r.resv)
        goto oom;

    v_knobs best_k = { 0, 0, 0 };
    for (int kk = 0; kk < 8; kk++) {
        v_knobs k = { .w_always = kk & 1, .prefer_chunk0 = (kk >> 1) & 1, .reserve_all = kk >> 2 };
        r.out = sched_clone(tmpl);
        if (!r.out)
            goto oom;
        if (v_run_once(&r, &k, err) != 0) {
            sched_free(r.out);
            goto out;
        }
        solver_eval_result ev;
        if (solver_eval(r.out, &ev, NULL, err) != 0) {
            sched_free(r.out);
            goto out;
        }
        if (ev.cost < best_cost) {
            sched_free(best);
            best = r.out;
            best_cost = ev.cost;
            best_k = k;
        } else {
            sched_free(r.out);
        }
        r.out = NULL;
    }
    /* The handcrafted ZB-V order (schedules/gen.c) is a candidate too: it
     * is kept when it fits every device's limit and is faster. */
    int used_handcrafted = 0;
    {
        gen_params hp = *gp;
        hp.chunks = 2;
        hp.mem_limit = NULL;
        sched_t *hv = NULL;
        zb_err herr;
        double *peaks = malloc(sizeof(double) * (size_t)p);
        solver_eval_result ev;
        if (peaks && gen_zb_v(&hp, &hv, &herr) == 0 && solver_eval(hv, &ev, peaks, &herr) == 0) {
            int fits_all = 1;
            for (int d = 0; d < p; d++)
                fits_all &= peaks[d] <= limit[d] + 1e-9 * fmax(1, fabs(limit[d]));
            if (fits_all && ev.cost < best_cost) {
                sched_free(best);
                best = hv;
                hv = NULL;
                best_cost = ev.cost;
                used_handcrafted = 1;
                snprintf(best->name, sizeof best->name, "%s", names[variant]);
                cJSON_Delete(best->meta);
                best->meta = NULL;
                free(best->mem_limit);
            }
        }
        sched_free(hv);
        free(peaks);
    }
    /* The paper's stable pattern (V-Min, V-Half) is a candidate too. */
    int used_pattern = 0;
    if (variant != V_ZB) {
        sched_t *pv = NULL;
        zb_err perr;
        double *peaks = malloc(sizeof(double) * (size_t)p);
        solver_eval_result ev;
        if (!peaks || pattern_sched(tmpl, variant, &pv) != 0) {
            free(peaks);
            goto oom;
        }
        if (solver_eval(pv, &ev, peaks, &perr) == 0) {
            int fits_all = 1;
            for (int d = 0; d < p; d++)
                fits_all &= peaks[d] <= limit[d] + 1e-9 * fmax(1, fabs(limit[d]));
            if (fits_all && ev.cost < best_cost) {
                sched_free(best);
                best = pv;
                pv = NULL;
                best_cost = ev.cost;
                used_pattern = 1;
                used_handcrafted = 0;
            }
        }
        sched_free(pv);
        free(peaks);
    }
    best->mem_limit = limit;
    limit = NULL;
    best->meta = cJSON_CreateObject();
    cJSON *o = best->meta ? cJSON_AddObjectToObject(best->meta, "solver") : NULL;
    if (!o || !cJSON_AddStringToObject(o, "method", used_handcrafted ? "handcrafted ZB-V order (fits the limit, beat the greedy)"
                                                    : used_pattern ? "the paper's stable V pattern (fits the limit, beat the greedy)"
                                                                   : "V-shape greedy under a memory limit")
        || !cJSON_AddNumberToObject(o, "cost", best_cost)
        || !cJSON_AddNumberToObject(o, "limit_microbatches", mbs)
        || !cJSON_AddBoolToObject(o, "w_always", best_k.w_always)
        || !cJSON_AddBoolToObject(o, "prefer_chunk0", best_k.prefer_chunk0)
        || !cJSON_AddBoolToObject(o, "reserve_all", best_k.reserve_all))
        goto oom;
    *out = best;
    best = NULL;
    rc = 0;
    goto out;
oom:
    zb_fail(err, "out of memory building a V schedule");
out:
    sched_free(best);
    sched_free(tmpl);
    free(limit);
    free(r.end_f);
    free(r.end_b);
    free(r.nf);
    free(r.nb);
    free(r.nw);
    free(r.t_dev);
    free(r.mem);
    free(r.resv);
    return rc;
}

int solver_v_min(const gen_params *p, sched_t **out, zb_err *err)
{
    return v_solve(p, V_MIN, out, err);
}

int solver_v_half(const gen_params *p, sched_t **out, zb_err *err)
{
    return v_solve(p, V_HALF, out, err);
}

int solver_v_zb(const gen_params *p, sched_t **out, zb_err *err)
{
    return v_solve(p, V_ZB, out, err);
}
