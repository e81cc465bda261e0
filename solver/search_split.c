/*
 * search_split.c: the layer-split local search (docs/search.md).
 *
 * After all configurations of one depth ran, the best candidate of each
 * family (or, for a family with nothing that fits, its smallest peak)
 * gets a local search over its layer split: single layers move between
 * neighbouring virtual stages, the op order is kept, and a move stays
 * when it lowers the memory excess or, once it fits, the ranked time.
 * Each label's best is tuned under zbsched's rule and under each
 * synchronous target's (torchtitan, Megatron-LM), as each may answer for
 * its target.  A tuned plan is a new candidate, marked split_tuned.
 *
 * Workload: a few dozen sources per depth, at most 60 moves tried each
 * from a fit and 400 from a plan over the limit.  A move is costed, and
 * its peak read off the op order (search_plan_peak); it is simulated only
 * when its time decides: a move to a fit from a plan over the limit, or,
 * both fitting, one whose busiest device's compute leaves it room to be a
 * time bucket faster.  So a plan over the limit walks towards fitting
 * without simulations.
 */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "solver/search_state.h"

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
    if (search_config_init_rc(st, &cf, src.micro_batch, src.rc_devices, src.rc_stages, src.rc_mlp_stages, src.split,
                       err) < 0) {
        search_config_free(&cf);
        return -1;
    }
    int S = src.n_stages, rc = -1;
    int *cur = malloc(sizeof *cur * (size_t)S), *best = malloc(sizeof *best * (size_t)S);
    sched_t *s = sched_clone(src.sched);
    search_candidate trial;
    memset(&trial, 0, sizeof trial);
    /* A move changes the costs of its two stages only, so only their
     * devices' peaks: the others' are kept, under best's layers. */
    int P = s ? s->n_devices : 0;
    double *dev_peak = malloc(sizeof *dev_peak * (size_t)(P ? P : 1));
    double *best_static = malloc(sizeof *best_static * (size_t)(P ? P : 1));
    stage_cost *best_cost = malloc(sizeof *best_cost * (size_t)S);
    if (!cur || !best || !s || !dev_peak || !best_static || !best_cost) {
        zb_fail(err, "out of memory");
        goto out;
    }
    memcpy(best, src.layers, sizeof *best * (size_t)S);
    {
        zb_err e0 = { { 0 } };
        if (search_cost_sched(st, &cf, best, s, &e0) < 0) {
            rc = 0; /* the source's own split no longer costs: nothing to tune */
            goto out;
        }
    }
    for (int d = 0; d < P; d++) {
        dev_peak[d] = search_device_peak(s, d);
        best_static[d] = s->mem_static[d];
    }
    memcpy(best_cost, s->cost, sizeof *best_cost * (size_t)S);
    double best_ex = fmax(0, src.peak_bytes - o->mem_bytes), best_t = sync ? src.sync_ms : src.async_ms;
    int evals = 0, improved = 1, moved = 0;
    int check_peak = 1; /* the next move's peak is also read whole: the first, and the first after each kept move */
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
                if (search_cost_sched(st, &cf, cur, s, &e2) < 0)
                    continue;
                /* The order fixes the peak (search_plan_peak's, device by
                 * device); the time is simulated only when it decides:
                 * both fit, and the busiest device's compute (no order
                 * runs faster) leaves room to gain. */
                int d_from = s->stage_device[from], d_to = s->stage_device[to];
                double peak = 0;
                for (int d = 0; d < P; d++) {
                    if (d == d_from || d == d_to) {
                        peak = fmax(peak, search_device_peak(s, d));
                        continue;
                    }
                    assert(s->mem_static[d] == best_static[d]); /* untouched by the move */
                    peak = fmax(peak, dev_peak[d]);
                }
                for (int k = 0; k < S; k++)
                    assert(k == from || k == to || !memcmp(&s->cost[k], &best_cost[k], sizeof *best_cost));
                assert(!check_peak || peak == search_plan_peak(s)); /* the kept peaks are right */
                (void)check_peak;
                check_peak = 0;
                double ex = fmax(0, peak - o->mem_bytes), t = NAN;
                if (ex == 0 && best_ex == 0 && search_busiest_ms(s) * SEARCH_TIME_RESOLUTION >= best_t)
                    continue;
                if (ex == 0 || !better(ex, INFINITY, best_ex, best_t)) {
                    if (ex > 0 || search_measure(st, &cf, cur, &trial, s, &e2) < 0)
                        continue;
                    t = sync ? trial.sync_ms : trial.async_ms;
                }
                if (better(ex, t, best_ex, best_t)) {
                    memcpy(best, cur, sizeof *best * (size_t)S);
                    best_ex = ex;
                    best_t = t;
                    improved = moved = check_peak = 1;
                    dev_peak[d_from] = search_device_peak(s, d_from);
                    dev_peak[d_to] = search_device_peak(s, d_to);
                    best_static[d_from] = s->mem_static[d_from];
                    best_static[d_to] = s->mem_static[d_to];
                    best_cost[from] = s->cost[from];
                    best_cost[to] = s->cost[to];
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
    search_candidate *c = search_new_candidate(st, &cf, src.label, src.family, src.chunks, err);
    if (!c) {
        rc = -1;
        goto out;
    }
    c->split_tuned = 1;
    c->n_stages = S;
    c->layers = best;
    best = NULL;
    zb_err e2 = { { 0 } };
    if (search_cost_sched(st, &cf, c->layers, s, &e2) < 0 || search_measure(st, &cf, c->layers, c, s, &e2) < 0) {
        search_skip(c, e2.msg);
    } else {
        c->sched = s;
        s = NULL;
    }
    search_tick(st);
out:
    free(cur);
    free(best);
    free(dev_peak);
    free(best_static);
    free(best_cost);
    sched_free(s);
    search_config_free(&cf);
    return rc;
}

/* The split search for depth st->pp: each label's best candidate of this
 * depth (a fit, or the smallest OOM when the label has none), timed by the
 * zbsched rule, and each label's best that each sync target can run,
 * timed by its rule (the same candidate again when it is also zbsched's:
 * the two rules may move different layers). */
int search_tune_depth(search_state *st, zb_err *err)
{
    search_result *r = st->r;
    if (search_rank(r) < 0)
        return zb_fail(err, "out of memory");
    int n = r->n;
    int *pick = malloc(sizeof *pick * (size_t)(n ? n : 1) * (1 + SEARCH_N_SYNC_TARGETS));
    unsigned char *sync = malloc((size_t)(n ? n : 1) * (1 + SEARCH_N_SYNC_TARGETS));
    if (!pick || !sync) {
        free(pick);
        free(sync);
        return zb_fail(err, "out of memory");
    }
    int n_pick = 0;
    for (int i = 0; i < n; i++) {
        const search_candidate *c = &r->c[i];
        if (!search_of_depth(st, c) || c->status == SEARCH_SKIPPED || c->split_tuned || !c->sched || c->vocab)
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
    for (int t = 0; t < SEARCH_N_SYNC_TARGETS; t++) {
        int first = n_pick;
        for (int i = 0; i < n; i++) {
            const search_candidate *c = &r->c[i];
            if (!search_of_depth(st, c) || c->status == SEARCH_SKIPPED || c->split_tuned || !c->sched ||
                !(c->targets >> search_sync_targets[t] & 1))
                continue;
            int k = first;
            while (k < n_pick && strcmp(r->c[pick[k]].label, c->label) != 0)
                k++;
            if (k == n_pick) {
                sync[n_pick] = 1;
                pick[n_pick++] = i;
            } else if (search_rule_cmp(c, &r->c[pick[k]], 1) < 0) {
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
