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
 * Candidates, the fastest that fits every device's limit wins: the paper's
 * stable V-Min / V-Half patterns (v_pattern.c), the handcrafted ZB-V order
 * (schedules/gen_zb_v.c), for V-ZB the zero-bubble authors' adaptive
 * scheduler behind their Table 8 (v_adaptive.c), and a greedy list
 * scheduler (solver_greedy_list,
 * also used by zb-auto on one stage per device) in global time order.
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
 * slot free when they were admitted (with one stage per device there is
 * no second chunk and the same ordering argument applies).  Three knobs
 * (W filling, chunk preference for F, reservation) give eight runs (two
 * with one stage per device).
 *
 * Each run is timed as solver_eval times it (ASAP), op by op as it is
 * committed, and given up as soon as a device's span so far plus its
 * work left reaches the best run's cost: it could not replace it; or
 * the caller's beat, a cost at which an answer is of no use to it (the
 * search: it would rank behind its label's best).
 *
 * Workload: p up to 64, m up to a few hundred; each step takes the
 * earliest of p cached device choices from a tree (src/dev_heap.h) and
 * chooses again for at most two devices, so a run is O(ops log p).
 * V-ZB at p=32, m=256 with every order it tries (eight greedy runs, the
 * adaptive scheduler, ZB-V) took 150 ms of CPU on the 2-core VM
 * (build/bench/bench_heuristic 5, 2026-12-02).
 */
#include "solver/solver.h"
#include "solver/solver_internal.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "src/dev_heap.h"

/* The variants' limits, in whole-model micro-batches (2 chunk F's). */
typedef enum v_variant { V_MIN = 0, V_HALF = 1, V_ZB = 2 } v_variant;
static const char *const v_names[] = { "v-min", "v-half", "v-zb" }; /* by v_variant */

/* The variant's limit in whole-model micro-batches on p devices. */
static int v_micro_batches(int vi, int p)
{
    return vi == V_ZB ? p : vi == V_HALF ? (p + 2) / 2 : (p + 4) / 3;
}

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
    int n_micro;          /* tmpl->n_micro, the row length of the [S][m] tables (read at
                           * every lookup: one load instead of two) */
    const double *limit;  /* [p] activation limit per device */
    double *end_f;        /* [S][m] end of F(s,j), NAN until run */
    double *end_b;        /* [S][m] end of B(s,j), NAN until run */
    int *nf, *nb, *nw;    /* [S] next F, B, W micro-batch per stage */
    double *t_dev;        /* [p] time each device is free */
    double *mem;          /* [p] activation memory held */
    int *resv;            /* [p] micro-batches between their two F's here */
    sched_t *out;         /* the lists being built */
    double *admitted;     /* [p] largest memory need an F passed the limit with, over
                           * every run so far (solver_greedy_memo) */
    double *refused;      /* [p] smallest need the limit refused an F for */
    /* The run's lists timed as solver_eval times them (ASAP, each op as
     * soon as its device and inputs are ready), op by op as they are
     * committed: an op's inputs are committed before it, so its ASAP
     * times are final at once, and a run needs no replay. */
    double *asap_f;       /* [S][m] ASAP end of F(s,j) */
    double *asap_b;       /* [S][m] ASAP end of B(s,j) */
    double *asap_free;    /* [p] ASAP end of the device's last op */
    double *asap_first;   /* [p] ASAP start of its first op, NAN before */
    double *work_left;    /* [p] run time of its ops not committed yet */
    double give_up;       /* stop once a device's ASAP span so far plus its work left
                           * reaches this (the best run's cost; INFINITY: never) */
} v_run;

static double *at(const v_run *r, double *tab, int s, int j)
{
    return &tab[(long)s * r->n_micro + j];
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
        e = sched_later(e, eb + (t->stage_device[s + 1] != d ? t->t_comm : 0));
    }
    return e;
}

/* One device's choice at its current time. */
typedef struct v_choice {
    double when; /* start time of the action, INFINITY when nothing can run */
    int kind;    /* op kind */
    int stage;   /* its stage */
} v_choice;

/* The largest need limit admits (a rounding tolerance for fractional
 * deltas). */
static double greedy_cap(double limit)
{
    double a = fabs(limit);
    return limit + 1e-9 * (a > 1 ? a : 1); /* fmax(1, a), without its library call */
}

/* Device d's next action: what it runs at the first time from its free
 * time t_dev[d] at which it can run something (INFINITY: nothing is on
 * its way).  While it can run nothing, it idles until its next input
 * arrives and looks again; no other device's commit can change what it
 * sees until then without choosing for it afresh (its inputs' producers
 * do, v_run_once), so looking again here takes the decision the device
 * would take at that time. */
static v_choice choose(const v_run *r, int d, const v_knobs *k)
{
    const sched_t *t = r->tmpl;
    int p = t->n_devices, m = t->n_micro;
    int n_st = t->n_stages == 2 * p ? 2 : 1;               /* V pair, or one stage */
    /* The first and second chunk's stages, as two scalars: an array
     * indexed by a variable stayed in memory, and the choice's branches
     * compiled worse (valgrind's branch model, llama3-70b over 1,024
     * GPUs: 54 M mispredicted branches against 48 M). */
    int st0 = d, st1 = n_st == 2 ? 2 * p - 1 - d : d;
#define CHUNK_STAGE(x) ((x) ? st1 : st0)
    double now = r->t_dev[d], df0 = t->cost[st0].d_f, df1 = t->cost[st1].d_f;
    v_choice c = { INFINITY, -1, -1 };
again:;
    double next_arrival = INFINITY;
    /* B: the second chunk first (its B comes first in the backward pass). */
    for (int x = n_st - 1; x >= 0; x--) {
        int s = CHUNK_STAGE(x);
        if (r->nb[s] >= m || r->nb[s] >= r->nf[s])
            continue;
        double rt = ready_time(r, OP_B, s, r->nb[s]);
        if (isnan(rt))
            continue;
        if (rt <= now)
            return (v_choice){ now, OP_B, s };
        next_arrival = rt < next_arrival ? rt : next_arrival;
    }
    /* F: memory permitting, with the first chunk's reservation. */
    int blocked = 0;
    for (int y = 0; y < n_st; y++) {
        int x = k->prefer_chunk0 || n_st == 1 ? y : 1 - y, s = CHUNK_STAGE(x);
        if (r->nf[s] >= m)
            continue;
        double rt = ready_time(r, OP_F, s, r->nf[s]);
        if (isnan(rt))
            continue;
        /* A first-chunk F keeps room for its own second-chunk F (and,
         * with reserve_all, for those of the others in between). */
        double need = x == 0 && n_st == 2 ? r->mem[d] + df0 + df1 * (k->reserve_all ? r->resv[d] + 1 : 1)
                                          : r->mem[d] + t->cost[s].d_f;
        /* The only place the limit is read: what it admitted and refused
         * tells which other limits would take every decision alike
         * (comparisons rather than fmin/fmax, which are library calls
         * here: no value is NaN, and this runs for every decision). */
        if (need > greedy_cap(r->limit[d])) {
            if (need < r->refused[d])
                r->refused[d] = need;
            blocked = 1;
            continue;
        }
        if (need > r->admitted[d])
            r->admitted[d] = need;
        if (rt <= now)
            return (v_choice){ now, OP_F, s };
        next_arrival = rt < next_arrival ? rt : next_arrival;
    }
    /* W: the oldest pending one. */
    int ws = -1;
    for (int x = 0; x < n_st; x++) {
        int s = CHUNK_STAGE(x);
        if (r->nw[s] < r->nb[s]
            && (ws < 0 || *at(r, r->end_b, s, r->nw[s]) < *at(r, r->end_b, ws, r->nw[ws])))
            ws = s;
    }
    if (ws >= 0 && (blocked || k->w_always || isinf(next_arrival)
                    || now + t->cost[ws].t_w <= next_arrival))
        return (v_choice){ now, OP_W, ws };
    if (!isinf(next_arrival)) {
        now = next_arrival; /* idle until it arrives, then look again */
        goto again;
    }
    if (ws >= 0)
        c = (v_choice){ now, OP_W, ws };
    return c;
#undef CHUNK_STAGE
}

/* Stores device d's choice c and its place among the devices that act
 * next: by start, the lowest device among equal starts (what a scan with
 * a strict "<" picked); a device with nothing to do (INFINITY) is out.
 * A choice starting when the last one did keeps its place (a quarter of
 * the choices on a 70B search). */
static void set_choice(v_choice *ch, dev_heap *next, int d, v_choice c)
{
    int same_place = ch[d].when == c.when; /* NaN before d's first choice */
    ch[d] = c;
    if (same_place)
        return;
    if (c.when < INFINITY)
        dev_heap_set(next, d, c.when);
    else
        dev_heap_remove(next, d);
}

/* Times op, just committed on device d, as solver_eval would
 * (solver_asap_start, so the same doubles); returns 1 when
 * the run can no longer beat r->give_up: a device's span is at least
 * its span so far plus its work left (less a rounding margin). */
static int asap_commit(v_run *r, int d, sched_op op)
{
    const sched_t *t = r->tmpl;
    double ready = solver_asap_start(t, op, d, r->asap_free[d], r->asap_f, r->asap_b);
    assert(!isnan(ready)); /* the greedy commits an op after its inputs */
    double dur = sched_op_time(t, op), end = ready + dur;
    if (isnan(r->asap_first[d]))
        r->asap_first[d] = ready;
    r->asap_free[d] = end;
    if (op.kind == OP_F)
        *at(r, r->asap_f, op.stage, op.mb) = end;
    else if (op.kind == OP_B)
        *at(r, r->asap_b, op.stage, op.mb) = end;
    r->work_left[d] -= dur;
    double left = r->work_left[d] > 0 ? r->work_left[d] : 0;
    return ((end - r->asap_first[d]) + left) * (1 - 1e-9) >= r->give_up;
}

/* One greedy run; returns 0, 1 when it was given up (it cannot beat
 * r->give_up; nothing of it is kept), or -1 (out of memory; err set). */
static int v_run_once(v_run *r, const v_knobs *k, zb_err *err)
{
    const sched_t *t = r->tmpl;
    int p = t->n_devices, m = t->n_micro, S = t->n_stages;
    for (long i = 0; i < (long)S * m; i++)
        r->end_f[i] = r->end_b[i] = r->asap_f[i] = r->asap_b[i] = NAN;
    memset(r->nf, 0, sizeof(int) * (size_t)S);
    memset(r->nb, 0, sizeof(int) * (size_t)S);
    memset(r->nw, 0, sizeof(int) * (size_t)S);
    memset(r->t_dev, 0, sizeof(double) * (size_t)p);
    memset(r->mem, 0, sizeof(double) * (size_t)p);
    memset(r->resv, 0, sizeof(int) * (size_t)p);
    for (int d = 0; d < p; d++) {
        r->out->dev[d].n_ops = 0;
        r->asap_free[d] = 0;
        r->asap_first[d] = NAN;
        r->work_left[d] = 0;
    }
    for (int i = 0; i < S; i++)
        r->work_left[t->stage_device[i]] += m * (t->cost[i].t_f + t->cost[i].t_b + t->cost[i].t_w);

    /* Each device's next action, recomputed only when it acts or an input
     * for it is produced: choose() reads only its own state and its
     * producers' end times. */
    v_choice *ch = malloc(sizeof *ch * (size_t)p);
    dev_heap next; /* the devices with something to do (when < INFINITY), earliest first */
    if (!ch || dev_heap_init(&next, p) != 0) {
        free(ch);
        return zb_fail(err, "out of memory building a V schedule");
    }
    for (int d = 0; d < p; d++) {
        ch[d].when = NAN;
        set_choice(ch, &next, d, choose(r, d, k));
    }
    long left = 3L * S * m;
    while (left > 0) {
        int best_d = dev_heap_top(&next);
        if (best_d < 0) {
            free(ch);
            dev_heap_free(&next);
            return zb_fail(err, "V schedule stuck with %ld ops left (bug)", left);
        }
        v_choice best = ch[best_d];
        assert(best.kind >= 0); /* choose looks past idle time */
        int s = best.stage, d = best_d, j;
        const stage_cost *sc = &t->cost[s];
        double start = best.when, end;
        if (best.kind == OP_F) {
            j = r->nf[s]++;
            end = start + sc->t_f;
            *at(r, r->end_f, s, j) = end;
            r->mem[d] += sc->d_f;
            if (S == 2 * p)
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
            dev_heap_free(&next);
            return zb_fail(err, "out of memory building a V schedule");
        }
        left--;
        if (asap_commit(r, d, (sched_op){ (uint8_t)best.kind, s, j })) {
            free(ch);
            dev_heap_free(&next);
            return 1;
        }
        set_choice(ch, &next, d, choose(r, d, k));
        /* The consumer of this op's output may now have a new choice. */
        if (best.kind == OP_F && s + 1 < S)
            set_choice(ch, &next, t->stage_device[s + 1], choose(r, t->stage_device[s + 1], k));
        if (best.kind == OP_B && s > 0)
            set_choice(ch, &next, t->stage_device[s - 1], choose(r, t->stage_device[s - 1], k));
    }
    free(ch);
    dev_heap_free(&next);
    return 0;
}

void solver_greedy_memo_free(solver_greedy_memo *memo)
{
    sched_free(memo->best);
    free(memo->admitted);
    free(memo->refused);
    memset(memo, 0, sizeof *memo);
}

/* 1 when memo holds tmpl's runs, limit takes each of their decisions as
 * the limit they ran under did, and, when they were all given up, beat
 * is no higher than where they were. */
static int memo_covers(const solver_greedy_memo *memo, const sched_t *tmpl, const double *limit, double beat)
{
    if (!memo || memo->tmpl != tmpl || !(memo->best || beat <= memo->gave_up_at))
        return 0;
    for (int d = 0; d < tmpl->n_devices; d++) {
        double cap = greedy_cap(limit[d]);
        if (!(memo->admitted[d] <= cap) || memo->refused[d] <= cap)
            return 0;
    }
    return 1;
}

static int greedy_runs(const sched_t *tmpl, const double *limit, int only_knob, solver_greedy_memo *memo,
                       double beat, sched_t **out, double *cost, int *knob_bits, zb_err *err);

int solver_greedy_list(const sched_t *tmpl, const double *limit, sched_t **out, double *cost,
                       int *knob_bits, zb_err *err)
{
    return solver_greedy_list_memo(tmpl, limit, NULL, INFINITY, out, cost, knob_bits, err);
}

int solver_greedy_list_memo(const sched_t *tmpl, const double *limit, solver_greedy_memo *memo, double beat,
                            sched_t **out, double *cost, int *knob_bits, zb_err *err)
{
    if (memo_covers(memo, tmpl, limit, beat)) {
        *out = NULL;
        *cost = INFINITY;
        if (!memo->best)
            return 0;
        *out = sched_clone(memo->best);
        if (!*out)
            return zb_fail(err, "out of memory in the list scheduler");
        *cost = memo->cost;
        *knob_bits = memo->knob_bits;
        return 0;
    }
    return greedy_runs(tmpl, limit, -1, memo, beat, out, cost, knob_bits, err);
}

int solver_greedy_list_knob(const sched_t *tmpl, const double *limit, int knob_bits, sched_t **out, double *cost,
                            zb_err *err)
{
    int bits = 0;
    if (knob_bits < 0 || knob_bits >= (tmpl->n_stages == 2 * tmpl->n_devices ? 8 : 2))
        return zb_fail(err, "list scheduler: no knob setting %d", knob_bits);
    return greedy_runs(tmpl, limit, knob_bits, NULL, INFINITY, out, cost, &bits, err);
}

/* solver_greedy_list_memo's runs: every knob setting (only_knob < 0),
 * each given up once it cannot beat the best before it or beat, or
 * only_knob's, run whole; memo and beat as there (NULL, INFINITY: none). */
static int greedy_runs(const sched_t *tmpl, const double *limit, int only_knob, solver_greedy_memo *memo,
                       double beat, sched_t **out, double *cost, int *knob_bits, zb_err *err)
{
    int p = tmpl->n_devices, m = tmpl->n_micro, S = tmpl->n_stages;
    v_run r = { .tmpl = tmpl, .n_micro = tmpl->n_micro, .limit = limit };
    long cells = (long)S * m;
    int rc = -1, n_knobs = S == 2 * p ? 8 : 2;
    sched_t *best = NULL;
    double best_cost = INFINITY;
    r.end_f = malloc(sizeof(double) * (size_t)cells);
    r.end_b = malloc(sizeof(double) * (size_t)cells);
    r.nf = malloc(sizeof(int) * (size_t)S);
    r.nb = malloc(sizeof(int) * (size_t)S);
    r.nw = malloc(sizeof(int) * (size_t)S);
    r.t_dev = malloc(sizeof(double) * (size_t)p);
    r.mem = malloc(sizeof(double) * (size_t)p);
    r.resv = malloc(sizeof(int) * (size_t)p);
    r.admitted = malloc(sizeof(double) * (size_t)p);
    r.refused = malloc(sizeof(double) * (size_t)p);
    r.asap_f = malloc(sizeof(double) * (size_t)cells);
    r.asap_b = malloc(sizeof(double) * (size_t)cells);
    r.asap_free = malloc(sizeof(double) * (size_t)p);
    r.asap_first = malloc(sizeof(double) * (size_t)p);
    r.work_left = malloc(sizeof(double) * (size_t)p);
    if (!r.end_f || !r.end_b || !r.nf || !r.nb || !r.nw || !r.t_dev || !r.mem || !r.resv || !r.admitted ||
        !r.refused || !r.asap_f || !r.asap_b || !r.asap_free || !r.asap_first || !r.work_left) {
        zb_fail(err, "out of memory in the list scheduler");
        goto out;
    }
    for (int d = 0; d < p; d++) {
        r.admitted[d] = -INFINITY;
        r.refused[d] = INFINITY;
    }
    /* A run writes its lanes into spare, which keeps the lanes' memory
     * from run to run (a fresh copy per run regrew every lane from 16
     * ops); a run that becomes the best trades places with it. */
    sched_t *spare = NULL;
    for (int kk = only_knob < 0 ? 0 : only_knob; kk < (only_knob < 0 ? n_knobs : only_knob + 1); kk++) {
        v_knobs k = { .w_always = kk & 1, .prefer_chunk0 = (kk >> 1) & 1, .reserve_all = (kk >> 2) & 1 };
        if (!spare && !(spare = sched_clone(tmpl))) {
            zb_fail(err, "out of memory in the list scheduler");
            goto out;
        }
        r.out = spare;
        /* A run that cannot beat the best so far is given up; under
         * another limit the memo covers, it would take the same decisions
         * up to the same point and be given up there too.  One given up
         * at beat costs at least beat, more than the best kept at the end
         * (which beat no run reached), so the memo's best is still the
         * best of every run. */
        r.give_up = only_knob < 0 ? fmin(best_cost, beat) : INFINITY;
        int run = v_run_once(&r, &k, err);
        if (run < 0) {
            sched_free(spare);
            goto out;
        }
        double cost = INFINITY; /* solver_eval's: the largest ASAP span */
        if (run == 0) {
            cost = 0;
            for (int d = 0; d < p; d++)
                if (!isnan(r.asap_first[d]))
                    cost = fmax(cost, r.asap_free[d] - r.asap_first[d]);
        }
        if (cost < best_cost) {
            spare = best; /* NULL before the first best */
            best = r.out;
            best_cost = cost;
            *knob_bits = kk;
        }
        r.out = NULL;
    }
    sched_free(spare);
    if (memo && only_knob < 0) {
        /* Keep these runs for the next limit: a copy of the result (or
         * where they were all given up) and the needs the limit decided
         * on. */
        sched_t *copy = best ? sched_clone(best) : NULL;
        if (copy || !best) {
            solver_greedy_memo_free(memo);
            memo->tmpl = tmpl;
            memo->best = copy;
            memo->gave_up_at = beat;
            memo->cost = best_cost;
            memo->knob_bits = best ? *knob_bits : 0;
            memo->admitted = r.admitted;
            memo->refused = r.refused;
            r.admitted = r.refused = NULL;
        }
    }
    *out = best;
    *cost = best_cost;
    best = NULL;
    rc = 0;
out:
    sched_free(best);
    free(r.admitted);
    free(r.refused);
    free(r.end_f);
    free(r.end_b);
    free(r.nf);
    free(r.nb);
    free(r.nw);
    free(r.t_dev);
    free(r.mem);
    free(r.resv);
    free(r.asap_f);
    free(r.asap_b);
    free(r.asap_free);
    free(r.asap_first);
    free(r.work_left);
    return rc;
}

static int v_solve(const gen_params *gp, v_variant variant, sched_t **out, zb_err *err)
{
    int p = gp->stages, m = gp->microbatches;
    if (p < 1 || m < 1)
        return zb_fail(err, "%s needs at least 1 device and 1 micro-batch (got p=%d, m=%d)", v_names[variant], p, m);
    if (gp->chunks != 1 && gp->chunks != 2)
        return zb_fail(err, "%s places 2 chunks per device in a V (got %d chunks)", v_names[variant], gp->chunks);
    if (!(gp->t_f > 0 && gp->t_b > 0 && gp->t_w > 0) || !isfinite(gp->t_f + gp->t_b + gp->t_w)
        || !(gp->t_comm >= 0) || !isfinite(gp->t_comm))
        return zb_fail(err, "%s: F, B, W times must be finite and > 0, T_comm >= 0", v_names[variant]);
    if (!(gp->m_f > 0) || !(gp->m_b <= 0) || !(gp->m_w <= 0) || !isfinite(gp->m_f + gp->m_b + gp->m_w)
        || fabs(gp->m_f + gp->m_b + gp->m_w) > 1e-9 * gp->m_f)
        return zb_fail(err, "%s: memory deltas need dF > 0, dB <= 0, dW <= 0 and dF + dB + dW = 0 (got %g, %g, %g)",
                       v_names[variant], gp->m_f, gp->m_b, gp->m_w);
    /* Whole-model micro-batches of activations, 2 chunk F's each. */
    int mbs = v_micro_batches(variant, p);
    double own = 2.0 * mbs * gp->m_f;
    if (gp->mem_limit)
        for (int d = 0; d < p; d++)
            if (!(gp->mem_limit[d] >= 2 * gp->m_f))
                return zb_fail(err, "device %d: memory limit %g is below one micro-batch's activation on a V device (2 x M_B = %g)",
                               d, gp->mem_limit[d], 2 * gp->m_f);

    sched_t *tmpl = sched_new(p, m, 2 * p);
    double *limit = malloc(sizeof(double) * (size_t)p);
    sched_t *best = NULL;
    double best_cost = INFINITY;
    int rc = -1;
    if (!tmpl || !limit)
        goto oom;
    snprintf(tmpl->name, sizeof tmpl->name, "%s", v_names[variant]);
    sched_place_v(tmpl);
    sched_set_costs(tmpl, gp->t_f, gp->t_b, gp->t_w, gp->t_comm);
    sched_set_mem(tmpl, gp->m_f, gp->m_b, gp->m_w);
    for (int d = 0; d < p; d++)
        limit[d] = gp->mem_limit ? fmin(own, gp->mem_limit[d]) : own;
    int best_bits = 0;
    if (solver_greedy_list(tmpl, limit, &best, &best_cost, &best_bits, err) != 0)
        goto out;
    v_knobs best_k = { .w_always = best_bits & 1, .prefer_chunk0 = (best_bits >> 1) & 1,
                       .reserve_all = (best_bits >> 2) & 1 };
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
                snprintf(best->name, sizeof best->name, "%s", v_names[variant]);
                cJSON_Delete(best->meta);
                best->meta = NULL;
                free(best->mem_limit);
                best->mem_limit = NULL;
            }
        }
        sched_free(hv);
        free(peaks);
    }
    /* V-ZB: the zero-bubble authors' adaptive scheduler (v_adaptive.c,
     * the one behind the paper's Table 8) is a candidate too, kept when it
     * is faster; it may fail (small m, tight limit), then the others stand. */
    int used_adaptive = 0;
    if (variant == V_ZB) {
        sched_t *av = NULL;
        zb_err aerr;
        double acost;
        if (v_adaptive_sched(tmpl, limit, &av, &acost, &aerr) == 0 && acost < best_cost) {
            sched_free(best);
            best = av;
            av = NULL;
            best_cost = acost;
            used_adaptive = 1;
            used_handcrafted = 0;
        }
        sched_free(av);
    }
    /* The paper's stable pattern, squeezed (v_pattern.c), is a candidate
     * too for V-Min and V-Half. */
    int used_pattern = 0;
    if (variant != V_ZB) {
        sched_t *pv = NULL;
        zb_err perr;
        double *peaks = malloc(sizeof(double) * (size_t)p);
        solver_eval_result ev;
        if (!peaks || v_pattern_sched(tmpl, variant == V_HALF, &pv) != 0) {
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
    if (!o || !cJSON_AddStringToObject(o, "method", used_adaptive ? "the ZB authors' adaptive V-ZB scheduler (fits the limit, beat the others)"
                                                    : used_handcrafted ? "handcrafted ZB-V order (fits the limit, beat the greedy)"
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

int solver_lanes_fit(const sched_t *s, const double *limit)
{
    for (int d = 0; d < s->n_devices; d++)
        if (sched_lane_peak(s, d) > greedy_cap(limit[d]))
            return 0;
    return 1;
}

/* Copies tmpl's per-stage costs and t_comm onto s (same shape and
 * placement); returns 1 when some device's peak exceeds its limit, else
 * evaluates it (when cost is not NULL) and returns 0 with *cost, or -1 on
 * error.  The peaks are the lanes' (the order fixes them), so an order
 * over the limit is not replayed: no caller reads its cost. */
static int recost_fits(const sched_t *tmpl, sched_t *s, const double *limit, double *cost)
{
    memcpy(s->cost, tmpl->cost, sizeof *s->cost * (size_t)tmpl->n_stages);
    s->t_comm = tmpl->t_comm;
    if (!solver_lanes_fit(s, limit))
        return 1;
    if (!cost)
        return 0;
    solver_eval_result ev;
    zb_err e2;
    if (solver_eval(s, &ev, NULL, &e2) != 0)
        return -1;
    *cost = ev.cost;
    return 0;
}

/* What one whole-model micro-batch holds at most on device d of V
 * template tmpl: each of its two stages' activations at their largest
 * (after F, or after B when recompute makes dB positive). */
static double v_one(const sched_t *tmpl, int d)
{
    const stage_cost *a = &tmpl->cost[d], *b = &tmpl->cost[tmpl->n_stages - 1 - d];
    return fmax(a->d_f, a->d_f + a->d_b) + fmax(b->d_f, b->d_f + b->d_b);
}

/* limit[d]: the variant's micro-batches of device d's two stages, capped
 * by mem_limit[d] when given; fails when mem_limit leaves less than one. */
static int v_limits(int vi, const sched_t *tmpl, const double *mem_limit, double *limit, zb_err *err)
{
    int p = tmpl->n_devices, mbs = v_micro_batches(vi, p);
    for (int d = 0; d < p; d++) {
        double one = v_one(tmpl, d);
        limit[d] = mbs * one;
        if (mem_limit) {
            if (!(mem_limit[d] >= one))
                return zb_fail(err, "device %d: memory limit %g is below one micro-batch's activation on its two stages (%g)",
                               d, mem_limit[d], one);
            limit[d] = fmin(limit[d], mem_limit[d]);
        }
    }
    return 0;
}

int solver_v_costs(const char *variant, const sched_t *tmpl, const double *mem_limit, sched_t **out, zb_err *err)
{
    return solver_v_costs_memo(variant, tmpl, mem_limit, NULL, NULL, INFINITY, out, err);
}

int solver_v_costs_memo(const char *variant, const sched_t *tmpl, const double *mem_limit, solver_greedy_memo *memo,
                        v_pattern_cache *patterns, double beat, sched_t **out, zb_err *err)
{
    int vi = -1;
    for (int i = 0; i < 3; i++)
        if (!strcmp(variant, v_names[i]))
            vi = i;
    if (vi < 0)
        return zb_fail(err, "unknown V variant '%s' (v-min, v-half, v-zb)", variant);
    int p = tmpl->n_devices, m = tmpl->n_micro, S = tmpl->n_stages;
    if (p < 1 || m < 1 || S != 2 * p)
        return zb_fail(err, "%s needs a V placement of 2p stages (got p=%d, %d stages)", v_names[vi], p, S);
    for (int d = 0; d < p; d++)
        if (tmpl->stage_device[d] != d || tmpl->stage_device[S - 1 - d] != d)
            return zb_fail(err, "%s needs the V placement (device d holds stages d and 2p-1-d)", v_names[vi]);
    for (int i = 0; i < S; i++) {
        const stage_cost *c = &tmpl->cost[i];
        if (!(c->t_f >= 0 && c->t_b >= 0 && c->t_w >= 0) || !isfinite(c->t_f + c->t_b + c->t_w) || !(c->d_f > 0)
            || !isfinite(c->d_f + c->d_b + c->d_w))
            return zb_fail(err, "%s: stage %d needs F, B, W times >= 0 and dF > 0", v_names[vi], i);
    }
    int mbs = v_micro_batches(vi, p);
    double *limit = malloc(sizeof(double) * (size_t)p);
    double *ulimit = malloc(sizeof(double) * (size_t)p);
    sched_t *utmpl = sched_new(p, m, S), *best = NULL, *cand = NULL;
    int rc = -1;
    if (!limit || !ulimit || !utmpl) {
        zb_fail(err, "out of memory building a V schedule");
        goto out;
    }
    if (v_limits(vi, tmpl, mem_limit, limit, err) < 0)
        goto out;
    /* The same limit in uniform units (one chunk F = 1) for the orders
     * built from uniform costs. */
    for (int d = 0; d < p; d++)
        ulimit[d] = 2.0 * limit[d] / v_one(tmpl, d);
    double best_cost = INFINITY;
    const char *method = "V-shape greedy on per-stage costs";
    int bits = 0;
    if (solver_greedy_list_memo(tmpl, limit, memo, beat, &best, &best_cost, &bits, err) != 0)
        goto out;
    int given_up = !best; /* every greedy run reached beat */
    /* The greedy's own cost stands; only its peaks are checked. */
    if (best && recost_fits(tmpl, best, limit, NULL) > 0)
        best_cost = INFINITY; /* recompute's positive dB may overshoot */
    /* Orders from uniform costs (mean times, unit memory), re-costed with
     * the real per-stage figures and kept when they fit and are faster. */
    double tf = 0, tb = 0, tw = 0;
    for (int i = 0; i < S; i++) {
        tf += tmpl->cost[i].t_f / S;
        tb += tmpl->cost[i].t_b / S;
        tw += tmpl->cost[i].t_w / S;
    }
    tw = fmax(tw, 1e-6 * (tf + tb));
    sched_place_v(utmpl);
    sched_set_costs(utmpl, tf, tb, tw, tmpl->t_comm);
    sched_set_mem(utmpl, 1, -0.5, -0.5);
    for (int which = 0; which < 3; which++) {
        zb_err e2;
        double acost;
        cand = NULL;
        const char *how = NULL;
        if (which == 0) {
            gen_params hp;
            gen_params_default(&hp);
            hp.stages = p;
            hp.microbatches = m;
            hp.chunks = 2;
            hp.t_f = tf;
            hp.t_b = tb;
            hp.t_w = tw;
            hp.t_comm = tmpl->t_comm;
            hp.m_f = 1;
            hp.m_b = hp.m_w = -0.5;
            if (gen_zb_v(&hp, &cand, &e2) != 0)
                cand = NULL;
            how = "handcrafted ZB-V order re-costed per stage";
        } else if (which == 1 && vi == V_ZB) {
            if (v_adaptive_sched(utmpl, ulimit, &cand, &acost, &e2) != 0)
                cand = NULL;
            how = "the ZB authors' adaptive V-ZB order re-costed per stage";
        } else if (which == 2 && vi != V_ZB) {
            if (v_pattern_sched_cached(patterns, utmpl, vi == V_HALF, &cand) != 0)
                cand = NULL;
            how = "the paper's stable V pattern re-costed per stage";
        }
        if (!cand)
            continue;
        double c;
        if (recost_fits(tmpl, cand, limit, &c) == 0 && c < best_cost) {
            sched_free(best);
            best = cand;
            cand = NULL;
            best_cost = c;
            method = how;
        }
        sched_free(cand);
        cand = NULL;
    }
    /* No order of use: every one found costs beat or more (the greedy's
     * given up, or not beating the rest; a greedy order that does not
     * fit after all, with nothing else that does, stays the error below). */
    if (best_cost >= beat && (given_up || isfinite(best_cost))) {
        rc = 1;
        goto out;
    }
    if (!isfinite(best_cost)) {
        zb_fail(err, "%s: no V order fits the per-device limits", v_names[vi]);
        goto out;
    }
    snprintf(best->name, sizeof best->name, "%s", v_names[vi]);
    cJSON_Delete(best->meta);
    best->meta = cJSON_CreateObject();
    cJSON *o = best->meta ? cJSON_AddObjectToObject(best->meta, "solver") : NULL;
    if (!o || !cJSON_AddStringToObject(o, "method", method) || !cJSON_AddNumberToObject(o, "cost", best_cost)
        || !cJSON_AddNumberToObject(o, "limit_microbatches", mbs)) {
        zb_fail(err, "out of memory building a V schedule");
        goto out;
    }
    free(best->mem_limit);
    best->mem_limit = limit;
    limit = NULL;
    *out = best;
    best = NULL;
    rc = 0;
out:
    sched_free(best);
    sched_free(cand);
    sched_free(utmpl);
    free(limit);
    free(ulimit);
    return rc;
}
