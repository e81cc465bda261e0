/*
 * zb_auto.c: the zero-bubble paper's automatic scheduling heuristic
 * (arXiv 2401.10241 section 3.1; the authors' auto_schedule.py,
 * Graph.manual_order and initial_solution), under a per-device limit.
 *
 * One stage per device.  The heuristic builds every device's op list and
 * the ops' end times together, micro-batch by micro-batch:
 *
 *   micro-batch 0   F0 on every stage; walking up from the last stage, each
 *                   stage counts the extra F's it can run before B0 arrives
 *                   (memory permitting); a stage must do fewer than the one
 *                   before it; then "extra F's, B0" from last stage to first.
 *   micro-batch i   every stage wants one F (knob prioritize_b lets a stage
 *                   two F's ahead of its successor skip it when that costs
 *                   no bubble); F counts are made non-increasing toward
 *                   stage 0.  Before each F and each B_i, W's are inserted:
 *                   while memory would overflow, while a whole W fits before
 *                   the input arrives, and for a gap shorter than a W either
 *                   always (knob no_bubble_greedy) or when leaving it would
 *                   raise the largest cumulative stage bubble.
 *   end             leftover W's are drained.
 *
 * The third knob, allow_bubble_before_first_b, lets the warm-up add one
 * more F even if it delays the first B.  All 8 knob settings run and the
 * smallest largest-stage-span wins, as in the paper.
 *
 * Extension: under tight or uneven limits the paper's heuristic can leave
 * large bubbles or run out of W's to free.  Unless its span meets the lower
 * bound of bound.c (it is then optimal), two more candidates run: a 1F1B
 * order with memory-capped warm-ups (always fits) and the greedy list
 * scheduler of v_shape.c; the fastest wins, ties keep the paper's.
 *
 * Times follow the simulator: an F waits for the previous stage's F plus
 * T_comm, a B for the next stage's B plus T_comm (the last stage's B only
 * for its own F), every op for its device; so the heuristic's own end times
 * are the ASAP times of its lists and its cost equals the simulated cost.
 * Memory never exceeds the limit: an op is only placed when the running sum
 * of deltas plus its own stays within it.
 *
 * Workload: p up to a few dozen, m up to a few hundred; one knob setting is
 * O(p*m) ops with O(1) work each (the largest cumulative bubble is kept
 * incrementally, it only grows), and settings that would replay a run or
 * cannot beat the best are cut short, so p=32, m=256 takes a few
 * milliseconds (bench/bench_heuristic.c); the greedy candidate, when it
 * runs, costs more (O(ops * p)).  A search asks for it four times per
 * configuration, with limits that differ only (1p, 1.5p, 2p and all the
 * memory): a run reads its limit only through cap_admits, so a memo of
 * the runs (solver_zb_auto_memo) answers a limit that admits and refuses
 * every need they compared alike; on llama3-70b over 64 GPUs 317 of 720
 * calls, and the runs' time fell from 0.31 to 0.24 s.
 */
#include "solver/solver.h"
#include "solver/solver_internal.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

/* The three knobs of one heuristic run. */
typedef struct zb_knobs {
    int allow_bubble_before_first_b; /* warm-up may add an F that delays B0 */
    int prioritize_b;                /* a stage far ahead may skip an F */
    int no_bubble_greedy;            /* fill every short gap with a W */
} zb_knobs;

/* Working state of one heuristic run; arrays sized once for all 8 runs. */
typedef struct zb_run {
    const solver_problem *pr; /* the problem */
    int *n_done[3];           /* [3][p] ops of each kind placed per stage */
    int *n_ops;               /* [p] ops placed per stage */
    uint8_t *order;           /* [p][3m] kinds in placement order per stage */
    double *end_time;         /* [3][m][p] end time of each op: a micro-batch's ops on
                               * neighbouring stages side by side, as the runs read them */
    double *stage_end;        /* [p] end of the last op placed on each stage */
    double *mem;              /* [p] running activation memory per stage */
    double *stage_bubble;     /* [p] idle time so far after each stage's first op */
    double max_bubble;        /* largest entry of stage_bubble */
    int failed;               /* set when an op would overflow memory */
    double *cap;              /* [p] limit plus a rounding tolerance for fractional
                               * deltas (INFINITY: no limit) */
    double *t_op;             /* [3][p] time of each op kind per stage */
    double *d_op;             /* [3][p] memory delta of each op kind per stage */
    int mattered[3];          /* a knob's other value would have changed a
                               * decision (0: allow_bubble_before_first_b,
                               * 1: prioritize_b, 2: no_bubble_greedy) */
    double *admitted;         /* [p] the largest memory need cap admitted, over every
                               * run of this call (-INFINITY: none) */
    double *refused;          /* [p] the smallest need it refused (INFINITY: none) */
} zb_run;

static double op_cost(const solver_problem *pr, int kind, int stage)
{
    const stage_cost *c = &pr->cost[stage];
    return kind == OP_F ? c->t_f : kind == OP_B ? c->t_b : c->t_w;
}

static double op_mem(const solver_problem *pr, int kind, int stage)
{
    const stage_cost *c = &pr->cost[stage];
    return kind == OP_F ? c->d_f : kind == OP_B ? c->d_b : c->d_w;
}

static double limit_of(const solver_problem *pr, int stage)
{
    return pr->limit ? pr->limit[stage] : INFINITY;
}

/* Whether memory need fits stage's cap: the only way a run reads the
 * limit, so what it admitted and refused tells which other limits would
 * take every decision of every run alike (solver_zb_auto_memo). */
static int cap_admits(zb_run *r, int stage, double need)
{
    if (need > r->cap[stage]) {
        if (need < r->refused[stage]) /* (not fmin: a library call, and no value is NaN) */
            r->refused[stage] = need;
        return 0;
    }
    if (need > r->admitted[stage])
        r->admitted[stage] = need;
    return 1;
}

/* End time of op (kind, stage, mb), which must have been placed. */
static double *endp(zb_run *r, int kind, int stage, int mb)
{
    const solver_problem *pr = r->pr;
    return &r->end_time[((long)kind * pr->m + mb) * pr->p + stage];
}

/* The knobs of setting bits (allow_bubble << 2 | prioritize_b << 1 |
 * no_bubble_greedy). */
static zb_knobs knobs_of(int bits)
{
    return (zb_knobs){ .allow_bubble_before_first_b = (bits >> 2) & 1, .prioritize_b = (bits >> 1) & 1,
                       .no_bubble_greedy = bits & 1 };
}

/* Places the next op of `kind` on `stage` (the authors' put()).  Always
 * inlined: it is a few dozen instructions, called for every op of every
 * run, and the call's own cost was a fifth of it (llama3-70b's pp=64
 * search: 3.86 G instructions, 3.47 G inlined; cachegrind). */
static inline __attribute__((always_inline)) void put(zb_run *r, int stage, int kind)
{
    const solver_problem *pr = r->pr;
    int mb = r->n_done[kind][stage];
    assert(mb < pr->m);
    double dm = r->d_op[kind * pr->p + stage];
    /* An op that frees memory fits where the memory it frees fitted (or
     * the run has failed already, and this check decides nothing): its
     * need is not compared, nor noted. */
    if (dm > 0 && !cap_admits(r, stage, r->mem[stage] + dm))
        r->failed = 1;
    double cost = r->t_op[kind * pr->p + stage];
    double t = r->stage_end[stage] + cost;
    double no_bubble = t;
    if (stage > 0 && kind == OP_F)
        t = sched_later(t, *endp(r, OP_F, stage - 1, mb) + pr->t_comm + cost);
    if (stage < pr->p - 1 && kind == OP_B)
        t = sched_later(t, *endp(r, OP_B, stage + 1, mb) + pr->t_comm + cost);
    if (r->n_done[OP_F][stage] > 0) {
        r->stage_bubble[stage] += t - no_bubble;
        if (r->stage_bubble[stage] > r->max_bubble)
            r->max_bubble = r->stage_bubble[stage];
    }
    r->stage_end[stage] = t;
    *endp(r, kind, stage, mb) = t;
    r->mem[stage] += dm;
    r->order[(long)stage * 3 * pr->m + r->n_ops[stage]] = (uint8_t)kind;
    r->n_done[kind][stage]++;
    r->n_ops[stage]++;
}

/* Before an op on `stage` whose input arrives at `arrive`: W's while a
 * whole one fits in the gap, then one more for a short gap when the knob
 * says so or when the gap would raise the largest stage bubble. */
static void fill_gap(zb_run *r, int stage, double arrive, const zb_knobs *k)
{
    const solver_problem *pr = r->pr;
    int *w = r->n_done[OP_W], *b = r->n_done[OP_B];
    double tw = r->t_op[OP_W * pr->p + stage];
    while (w[stage] < b[stage] && r->stage_end[stage] + tw <= arrive)
        put(r, stage, OP_W);
    if (w[stage] < b[stage] && r->stage_end[stage] < arrive) {
        if (arrive - r->stage_end[stage] <= r->max_bubble - r->stage_bubble[stage]) {
            r->mattered[2] = 1;
            if (k->no_bubble_greedy)
                put(r, stage, OP_W);
        } else {
            put(r, stage, OP_W);
        }
    }
}

/* Inserts W's on `stage` until an op adding `delta` fits; 0 or -1 when no
 * W is left to free memory. */
static int make_room(zb_run *r, int stage, double delta)
{
    while (!cap_admits(r, stage, r->mem[stage] + delta)) {
        if (r->n_done[OP_W][stage] >= r->n_done[OP_B][stage])
            return -1;
        put(r, stage, OP_W);
    }
    return 0;
}

/* The prioritize_b rule for stage j (two or more F's ahead of stage j+1):
 * 1 when the stage should skip its next F, because it is already past the
 * time its successor's next F+B returns, or because an F (with the W's its
 * memory needs) would overrun that time and the wait it leaves would not
 * raise the largest stage bubble. */
static int prioritize_skips(zb_run *r, int j)
{
    const solver_problem *pr = r->pr;
    double next_plus_fw = r->stage_end[j + 1] + op_cost(pr, OP_F, j + 1)
                          + op_cost(pr, OP_B, j + 1) + pr->t_comm;
    if (r->stage_end[j] >= next_plus_fw)
        return 1;
    double mem_with_w = r->mem[j] + op_mem(pr, OP_F, j), w_cost = 0;
    int w_cnt = 0;
    while (!cap_admits(r, j, mem_with_w) && r->n_done[OP_W][j] + w_cnt < r->n_done[OP_B][j]) {
        w_cost += op_cost(pr, OP_W, j);
        mem_with_w += op_mem(pr, OP_W, j);
        w_cnt++;
    }
    if (r->stage_end[j] + op_cost(pr, OP_F, j) + w_cost <= next_plus_fw)
        return 0;
    return next_plus_fw - r->stage_end[j] <= r->max_bubble - r->stage_bubble[j];
}

/* Lower bound on the span this run will reach: on every stage, the time
 * used so far plus the work still to place there. */
static double span_lower_bound(zb_run *r)
{
    const solver_problem *pr = r->pr;
    double lb = 0;
    for (int j = 0; j < pr->p; j++) {
        const stage_cost *c = &pr->cost[j];
        double start = *endp(r, OP_F, j, 0) - c->t_f;
        double rest = (pr->m - r->n_done[OP_F][j]) * c->t_f + (pr->m - r->n_done[OP_B][j]) * c->t_b
                      + (pr->m - r->n_done[OP_W][j]) * c->t_w;
        lb = sched_later(lb, r->stage_end[j] - start + rest);
    }
    return lb;
}

/* One heuristic run with knobs k.  Returns the largest stage span; -1 when
 * the memory limit cannot be met with these knobs; -2 when the run was cut
 * short because it cannot beat `bound` (a span found before; < 0: none). */
static double zb_run_once(zb_run *r, const zb_knobs *k, int *f_required, double bound)
{
    const solver_problem *pr = r->pr;
    int p = pr->p, m = pr->m;
    int *f = r->n_done[OP_F], *b = r->n_done[OP_B], *w = r->n_done[OP_W];
    for (int kind = 0; kind < 3; kind++)
        memset(r->n_done[kind], 0, sizeof(int) * (size_t)p);
    memset(r->n_ops, 0, sizeof(int) * (size_t)p);
    memset(r->stage_end, 0, sizeof(double) * (size_t)p);
    memset(r->mem, 0, sizeof(double) * (size_t)p);
    memset(r->stage_bubble, 0, sizeof(double) * (size_t)p);
    r->max_bubble = 0;
    r->failed = 0;
    memset(r->mattered, 0, sizeof r->mattered);

    /* Micro-batch 0: warm-up. */
    for (int j = 0; j < p; j++)
        put(r, j, OP_F);
    memset(f_required, 0, sizeof(int) * (size_t)p);
    double last_t = 0;
    for (int j = p - 1; j >= 0; j--) {
        if (j == p - 1) {
            last_t = *endp(r, OP_F, j, 0) + op_cost(pr, OP_B, j);
            continue;
        }
        double mem = r->mem[j], t = r->stage_end[j];
        double df = op_mem(pr, OP_F, j), tf = op_cost(pr, OP_F, j);
        while (f[j] + f_required[j] < m && cap_admits(r, j, mem + df)) {
            int stop_allowing = t + tf > last_t + pr->t_comm;
            int stop_strict = t >= last_t + pr->t_comm;
            if (stop_allowing != stop_strict)
                r->mattered[0] = 1;
            if (k->allow_bubble_before_first_b ? stop_allowing : stop_strict)
                break;
            mem += df;
            t += tf;
            f_required[j]++;
        }
        last_t = fmax(t, last_t + pr->t_comm) + op_cost(pr, OP_B, j);
    }
    for (int j = 1; j < p; j++)
        while (f_required[j] > 0 && f_required[j] >= f_required[j - 1] && f[j] + f_required[j] < m)
            f_required[j]--;
    for (int j = 0; j < p; j++)
        for (int x = 0; x < f_required[j]; x++)
            put(r, j, OP_F);
    for (int j = p - 1; j >= 0; j--)
        put(r, j, OP_B);
    if (r->failed)
        return -1;

    /* Micro-batches 1..m-1: steady state. */
    for (int i = 1; i < m; i++) {
        for (int j = 0; j < p; j++) {
            f_required[j] = 0;
            if (f[j] >= m)
                continue;
            /* prioritize_b: a stage two or more F's ahead of its successor
             * may skip its F.  The rule is evaluated either way so that the
             * run knows whether the knob changed anything. */
            if (j + 1 < p && f[j] >= f[j + 1] + 2 && prioritize_skips(r, j)) {
                r->mattered[1] = 1;
                if (k->prioritize_b)
                    continue;
            }
            f_required[j] = 1;
        }
        for (int j = p - 2; j >= 0; j--)
            if (f_required[j + 1] < f_required[j])
                f_required[j] = f_required[j + 1];
        for (int j = 0; j < p; j++) {
            if (!f_required[j])
                continue;
            if (make_room(r, j, op_mem(pr, OP_F, j)) != 0)
                return -1;
            if (j > 0)
                fill_gap(r, j, *endp(r, OP_F, j - 1, f[j]) + pr->t_comm, k);
            put(r, j, OP_F);
        }
        for (int j = p - 1; j >= 0; j--) {
            /* The F of micro-batch i must be on this stage before B_i. */
            if (b[j] != i || f[j] <= i)
                return -1;
            if (make_room(r, j, op_mem(pr, OP_B, j)) != 0)
                return -1;
            if (j + 1 < p)
                fill_gap(r, j, *endp(r, OP_B, j + 1, i) + pr->t_comm, k);
            if (j == 0 && f[j] == m)
                while (w[j] < b[j])
                    put(r, j, OP_W);
            put(r, j, OP_B);
        }
        if (r->failed)
            return -1;
        /* Give up on a run that cannot win (O(p), like the micro-batch). */
        if (bound >= 0 && span_lower_bound(r) >= bound)
            return -2;
    }
    for (int j = 0; j < p; j++)
        while (w[j] < m)
            put(r, j, OP_W);
    if (r->failed)
        return -1;

    double best = 0;
    for (int j = 0; j < p; j++) {
        double span = *endp(r, OP_W, j, m - 1) - *endp(r, OP_F, j, 0) + op_cost(pr, OP_F, j);
        if (span > best)
            best = span;
    }
    return best;
}

/* Checks the problem's ranges; 0 or -1 with err set. */
static int check_problem(const solver_problem *pr, zb_err *err)
{
    if (pr->p < 1 || pr->m < 1)
        return zb_fail(err, "zb-auto needs at least 1 stage and 1 micro-batch (got p=%d, m=%d)", pr->p, pr->m);
    if (!(pr->t_comm >= 0) || !isfinite(pr->t_comm))
        return zb_fail(err, "communication time must be finite and >= 0 (got %g)", pr->t_comm);
    for (int j = 0; j < pr->p; j++) {
        const stage_cost *c = &pr->cost[j];
        if (!(c->t_f > 0 && c->t_b > 0 && c->t_w > 0) || !isfinite(c->t_f + c->t_b + c->t_w))
            return zb_fail(err, "stage %d: F, B and W times must be finite and > 0 (got %g, %g, %g)",
                           j, c->t_f, c->t_b, c->t_w);
        if (!isfinite(c->d_f + c->d_b + c->d_w) || !(c->d_f > 0))
            return zb_fail(err, "stage %d: memory deltas must be finite with dF > 0 (got %g, %g, %g)",
                           j, c->d_f, c->d_b, c->d_w);
        if (fabs(c->d_f + c->d_b + c->d_w) > 1e-9 * fmax(1.0, c->d_f))
            return zb_fail(err, "stage %d: memory deltas must sum to 0 (dF + dB + dW = %g)",
                           j, c->d_f + c->d_b + c->d_w);
        if (c->d_w > 0)
            return zb_fail(err, "stage %d: dW must not be positive (got %g): W frees memory", j, c->d_w);
        if (pr->limit) {
            double need = fmax(c->d_f, c->d_f + c->d_b);
            if (isnan(pr->limit[j]) || pr->limit[j] < need)
                return zb_fail(err, "device %d: memory limit %g is below one micro-batch's M_B (%g)",
                               j, pr->limit[j], need);
        }
    }
    return 0;
}

/* Builds the schedule from a finished run. */
static int build_sched(const zb_run *r, const zb_knobs *k, double best, sched_t **out, zb_err *err)
{
    const solver_problem *pr = r->pr;
    sched_t *s = sched_new(pr->p, pr->m, pr->p);
    if (!s)
        return zb_fail(err, "out of memory building the zb-auto schedule");
    snprintf(s->name, sizeof s->name, "zb-auto");
    sched_place_interleaved(s);
    memcpy(s->cost, pr->cost, sizeof *s->cost * (size_t)pr->p);
    s->t_comm = pr->t_comm;
    if (pr->limit) {
        s->mem_limit = malloc(sizeof(double) * (size_t)pr->p);
        if (!s->mem_limit)
            goto oom;
        memcpy(s->mem_limit, pr->limit, sizeof(double) * (size_t)pr->p);
    }
    for (int j = 0; j < pr->p; j++) {
        int cnt[3] = { 0, 0, 0 };
        const uint8_t *ord = &r->order[(long)j * 3 * pr->m];
        for (int x = 0; x < r->n_ops[j]; x++) {
            int kind = ord[x];
            if (sched_push(s, j, (op_kind)kind, j, cnt[kind]++) != 0)
                goto oom;
        }
    }
    s->meta = cJSON_CreateObject();
    cJSON *sol = s->meta ? cJSON_AddObjectToObject(s->meta, "solver") : NULL;
    if (!sol)
        goto oom;
    cJSON_AddStringToObject(sol, "method", "zb-auto heuristic");
    cJSON_AddNumberToObject(sol, "cost", best);
    cJSON *kn = cJSON_AddObjectToObject(sol, "knobs");
    if (!kn)
        goto oom;
    cJSON_AddBoolToObject(kn, "allow_bubble_before_first_b", k->allow_bubble_before_first_b);
    cJSON_AddBoolToObject(kn, "prioritize_b", k->prioritize_b);
    cJSON_AddBoolToObject(kn, "no_bubble_greedy", k->no_bubble_greedy);
    *out = s;
    return 0;
oom:
    sched_free(s);
    return zb_fail(err, "out of memory building the zb-auto schedule");
}

/* 1 when memo holds runs on pr's costs, shape and communication time. */
static int memo_same_problem(const solver_zb_auto_memo *memo, const solver_problem *pr)
{
    return memo && memo->cost && memo->cost == pr->cost && memo->p == pr->p && memo->m == pr->m &&
           memo->t_comm == pr->t_comm;
}

/* The fallback when no knob setting fits: a 1F1B order with B and W split
 * and each W right after its B, whose warm-up on stage r is capped by the
 * memory of stages 0..r (warm-ups must not grow along the pipeline, or a
 * stage would wait for an F its predecessor runs only after a B that waits
 * on it).  Stage r then holds at most w_r + 1 activations, which fits by
 * construction once the limit holds one F (checked up front). */
static int fallback_sched(const solver_problem *pr, solver_zb_auto_memo *memo, sched_t **out, double *cost,
                          zb_err *err)
{
    int p = pr->p, m = pr->m, cap = m - 1;
    int *warm = malloc(sizeof *warm * (size_t)p); /* [p] each stage's warm-up */
    sched_t *s = sched_new(p, m, p);
    if (!s || !warm) {
        sched_free(s);
        free(warm);
        return zb_fail(err, "out of memory building the zb-auto schedule");
    }
    snprintf(s->name, sizeof s->name, "zb-auto");
    sched_place_interleaved(s);
    memcpy(s->cost, pr->cost, sizeof *s->cost * (size_t)p);
    s->t_comm = pr->t_comm;
    int ok = 1;
    if (pr->limit) {
        s->mem_limit = malloc(sizeof(double) * (size_t)p);
        ok = s->mem_limit != NULL;
        if (ok)
            memcpy(s->mem_limit, pr->limit, sizeof(double) * (size_t)p);
    }
    for (int r = 0; r < p && ok; r++) {
        const stage_cost *c = &pr->cost[r];
        /* k activations plus a B's transient rise must fit */
        int k = pr->limit ? (int)floor((limit_of(pr, r) - sched_later(0, c->d_b)) / c->d_f + 1e-9) : m;
        int w = p - 1 - r;
        if (k - 1 < w)
            w = k - 1;
        if (w < cap)
            cap = w;
        w = warm[r] = cap < 0 ? 0 : cap;
        int next_f = 0;
        for (; next_f < w; next_f++)
            ok = ok && sched_push(s, r, OP_F, r, next_f) == 0;
        for (int i = 0; i < m && ok; i++) {
            if (next_f < m)
                ok = sched_push(s, r, OP_F, r, next_f++) == 0;
            ok = ok && sched_push(s, r, OP_B, r, i) == 0 && sched_push(s, r, OP_W, r, i) == 0;
        }
    }
    /* The order is the warm-ups': the same warm-ups on the memo's costs
     * (the other zb-auto labels of a configuration, their limits past
     * every warm-up's cap) cost what they cost there, unsimulated. */
    int same_problem = memo_same_problem(memo, pr);
    int known = ok && same_problem && memo->fb_warmup && !memcmp(memo->fb_warmup, warm, sizeof *warm * (size_t)p);
    solver_eval_result ev = { .cost = known ? memo->fb_cost : NAN };
    s->meta = ok ? cJSON_CreateObject() : NULL;
    cJSON *sol = s->meta ? cJSON_AddObjectToObject(s->meta, "solver") : NULL;
    if (!sol || (!known && solver_eval(s, &ev, NULL, err) != 0)
        || !cJSON_AddStringToObject(sol, "method", "zb-auto fallback: 1F1B order, W after B, memory-capped warm-up")
        || !cJSON_AddNumberToObject(sol, "cost", ev.cost)) {
        sched_free(s);
        free(warm);
        return err && err->msg[0] ? -1 : zb_fail(err, "out of memory building the zb-auto schedule");
    }
    if (same_problem && !known) { /* kept for the next label */
        free(memo->fb_warmup);
        memo->fb_warmup = warm;
        memo->fb_cost = ev.cost;
        warm = NULL;
    }
    free(warm);
    *cost = ev.cost;
    *out = s;
    return 0;
}

/* Replaces *alt by the greedy list schedule when that is faster and fits
 * every limit (needs dB, dW <= 0).  0, or -1 on out of memory. */
static int greedy_candidate(const solver_problem *pr, sched_t **alt, double *alt_cost)
{
    for (int j = 0; j < pr->p; j++)
        if (pr->cost[j].d_b > 0)
            return 0;
    sched_t *tmpl = sched_new(pr->p, pr->m, pr->p), *g = NULL;
    double g_cost;
    int bits, rc = -1;
    zb_err gerr;
    if (!tmpl)
        goto out;
    snprintf(tmpl->name, sizeof tmpl->name, "zb-auto");
    sched_place_interleaved(tmpl);
    memcpy(tmpl->cost, pr->cost, sizeof *tmpl->cost * (size_t)pr->p);
    tmpl->t_comm = pr->t_comm;
    rc = 0;
    if (solver_greedy_list(tmpl, pr->limit, &g, &g_cost, &bits, &gerr) != 0)
        goto out; /* no candidate; not an error for zb-auto */
    if (!(g_cost < *alt_cost))
        goto out;
    if (!solver_lanes_fit(g, pr->limit)) /* its peaks are its lanes': no replay */
        goto out;
    g->mem_limit = malloc(sizeof(double) * (size_t)pr->p);
    g->meta = cJSON_CreateObject();
    cJSON *sol = g->meta ? cJSON_AddObjectToObject(g->meta, "solver") : NULL;
    if (!g->mem_limit || !sol
        || !cJSON_AddStringToObject(sol, "method", "zb-auto: greedy list scheduler (beat the paper's heuristic under this limit)")
        || !cJSON_AddNumberToObject(sol, "cost", g_cost)) {
        rc = -1;
        goto out;
    }
    memcpy(g->mem_limit, pr->limit, sizeof(double) * (size_t)pr->p);
    sched_free(*alt);
    *alt = g;
    *alt_cost = g_cost;
    g = NULL;
out:
    sched_free(g);
    sched_free(tmpl);
    return rc;
}

void solver_zb_auto_memo_free(solver_zb_auto_memo *memo)
{
    free(memo->admitted);
    free(memo->refused);
    free(memo->n_ops);
    free(memo->order);
    free(memo->fb_warmup);
    memset(memo, 0, sizeof *memo);
}

/* 1 when memo holds the knob runs of pr's costs and shape and the caps
 * cap take each of their decisions as the caps they ran under did. */
static int memo_covers(const solver_zb_auto_memo *memo, const solver_problem *pr, const double *cap)
{
    if (!memo_same_problem(memo, pr))
        return 0;
    for (int j = 0; j < pr->p; j++)
        if (!(memo->admitted[j] <= cap[j]) || memo->refused[j] <= cap[j])
            return 0;
    return 1;
}

int solver_zb_auto_costs(const solver_problem *pr, sched_t **out, double *cost, zb_err *err)
{
    return solver_zb_auto_costs_memo(pr, NULL, out, cost, err);
}

int solver_zb_auto_costs_memo(const solver_problem *pr, solver_zb_auto_memo *memo, sched_t **out, double *cost,
                              zb_err *err)
{
    if (check_problem(pr, err) != 0)
        return -1;
    int p = pr->p, m = pr->m;
    zb_run run = { .pr = pr };
    zb_run best_run = { .pr = pr };
    int *f_required = malloc(sizeof(int) * (size_t)p);
    int rc = -1;
    /* Two run states: the current one and a copy of the best so far. */
    zb_run *runs[2] = { &run, &best_run };
    for (int x = 0; x < 2; x++) {
        for (int kind = 0; kind < 3; kind++)
            runs[x]->n_done[kind] = calloc((size_t)p, sizeof(int));
        runs[x]->n_ops = calloc((size_t)p, sizeof(int));
        runs[x]->order = malloc((size_t)p * 3 * (size_t)m);
        runs[x]->end_time = malloc(sizeof(double) * 3 * (size_t)p * (size_t)m);
        runs[x]->stage_end = malloc(sizeof(double) * (size_t)p);
        runs[x]->mem = malloc(sizeof(double) * (size_t)p);
        runs[x]->stage_bubble = malloc(sizeof(double) * (size_t)p);
        if (!runs[x]->n_done[0] || !runs[x]->n_done[1] || !runs[x]->n_done[2] || !runs[x]->n_ops
            || !runs[x]->order || !runs[x]->end_time || !runs[x]->stage_end || !runs[x]->mem
            || !runs[x]->stage_bubble) {
            zb_fail(err, "out of memory in zb-auto");
            goto out;
        }
    }
    run.cap = malloc(sizeof(double) * (size_t)p);
    run.t_op = malloc(sizeof(double) * 3 * (size_t)p);
    run.d_op = malloc(sizeof(double) * 3 * (size_t)p);
    run.admitted = malloc(sizeof(double) * (size_t)p);
    run.refused = malloc(sizeof(double) * (size_t)p);
    if (!f_required || !run.cap || !run.t_op || !run.d_op || !run.admitted || !run.refused) {
        zb_fail(err, "out of memory in zb-auto");
        goto out;
    }
    for (int j = 0; j < p; j++) {
        double lim = limit_of(pr, j);
        run.admitted[j] = -INFINITY;
        run.refused[j] = INFINITY;
        run.cap[j] = isinf(lim) ? INFINITY : lim + 1e-9 * fmax(1.0, fabs(lim));
        for (int kind = 0; kind < 3; kind++) {
            run.t_op[kind * p + j] = op_cost(pr, kind, j);
            run.d_op[kind * p + j] = op_mem(pr, kind, j);
        }
    }

    double best = -1;
    int best_bits = 0;
    /* Runs that went to the end (or failed) with the knobs that mattered in
     * them: a later setting that differs only in knobs that never mattered
     * would replay the same decisions, so it is skipped.  A memo whose
     * runs these caps would repeat decision for decision gives their
     * outcome instead (the zb-auto labels of one configuration differ
     * only in their limits, often beyond what any run reaches). */
    int covered = memo_covers(memo, pr, run.cap);
    if (covered) {
        best = memo->best;
        best_bits = memo->best_bits;
        if (best >= 0) {
            memcpy(best_run.n_ops, memo->n_ops, sizeof(int) * (size_t)p);
            memcpy(best_run.order, memo->order, (size_t)p * 3 * (size_t)m);
        }
    }
    int done_bits[8], done_mattered[8], n_done = 0;
    /* Same order as the authors' initial_solution: ties keep the first. */
    for (int bits = 7; bits >= 0 && !covered; bits--) {
        int same = 0;
        for (int x = 0; x < n_done && !same; x++)
            same = ((bits ^ done_bits[x]) & done_mattered[x]) == 0;
        if (same)
            continue;
        zb_knobs k = knobs_of(bits);
        double t = zb_run_once(&run, &k, f_required, best);
        if (t == -2)
            continue;
        done_bits[n_done] = bits;
        done_mattered[n_done++] = run.mattered[0] << 2 | run.mattered[1] << 1 | run.mattered[2];
        if (t < 0 || (best >= 0 && t >= best))
            continue;
        best = t;
        best_bits = bits;
        memcpy(best_run.n_ops, run.n_ops, sizeof(int) * (size_t)p);
        memcpy(best_run.order, run.order, (size_t)p * 3 * (size_t)m);
    }
    if (memo && !covered) { /* kept for the next limit; without room, not kept */
        int *n_ops = malloc(sizeof(int) * (size_t)p);
        uint8_t *order = malloc((size_t)p * 3 * (size_t)m);
        if (n_ops && order) {
            /* The fallback's warm-ups stay while the problem is the same. */
            int same = memo_same_problem(memo, pr);
            int *fb = same ? memo->fb_warmup : NULL;
            double fb_cost = memo->fb_cost;
            if (same)
                memo->fb_warmup = NULL;
            solver_zb_auto_memo_free(memo);
            memcpy(n_ops, best_run.n_ops, sizeof(int) * (size_t)p);
            memcpy(order, best_run.order, (size_t)p * 3 * (size_t)m);
            *memo = (solver_zb_auto_memo){ .cost = pr->cost, .p = p, .m = m, .t_comm = pr->t_comm,
                                           .admitted = run.admitted, .refused = run.refused, .best = best,
                                           .best_bits = best_bits, .n_ops = n_ops, .order = order,
                                           .fb_warmup = fb, .fb_cost = fb_cost };
            run.admitted = run.refused = NULL;
        } else {
            free(n_ops);
            free(order);
        }
    }
    zb_knobs best_k = knobs_of(best_bits);
    /* Two more candidates for tight or uneven limits, where the paper's
     * heuristic can run out of W's to free or leave large bubbles: the
     * memory-capped 1F1B order (always fits) and the greedy list scheduler
     * of v_shape.c.  The fastest of all wins; ties keep the paper's. */
    double lb = 0;
    for (int j = 0; j < p; j++)
        lb = fmax(lb, solver_stage_lower_bound(pr, j));
    if (best >= 0 && best <= lb * (1 + 1e-12)) {
        /* the paper's heuristic meets the lower bound: it is optimal */
        if (build_sched(&best_run, &best_k, best, out, err) != 0)
            goto out;
        if (cost)
            *cost = best;
        rc = 0;
        goto out;
    }
    sched_t *alt = NULL;
    double alt_cost = INFINITY;
    if (fallback_sched(pr, memo, &alt, &alt_cost, err) != 0)
        goto out;
    if (pr->limit && greedy_candidate(pr, &alt, &alt_cost) != 0) {
        sched_free(alt);
        zb_fail(err, "out of memory in zb-auto");
        goto out;
    }
    if (best < 0 || alt_cost < best) {
        *out = alt;
        best = alt_cost;
    } else {
        sched_free(alt);
        if (build_sched(&best_run, &best_k, best, out, err) != 0)
            goto out;
    }
    if (cost)
        *cost = best;
    rc = 0;
out:
    for (int x = 0; x < 2; x++) {
        for (int kind = 0; kind < 3; kind++)
            free(runs[x]->n_done[kind]);
        free(runs[x]->n_ops);
        free(runs[x]->order);
        free(runs[x]->end_time);
        free(runs[x]->stage_end);
        free(runs[x]->mem);
        free(runs[x]->stage_bubble);
    }
    free(run.cap);
    free(run.t_op);
    free(run.d_op);
    free(run.admitted);
    free(run.refused);
    free(f_required);
    return rc;
}

int solver_problem_from_params(const gen_params *gp, solver_problem *pr, stage_cost **costs, zb_err *err)
{
    if (gp->stages < 1 || gp->microbatches < 1)
        return zb_fail(err, "need at least 1 stage and 1 micro-batch (got p=%d, m=%d)", gp->stages, gp->microbatches);
    if (gp->chunks > 1)
        return zb_fail(err, "zb-auto and ilp place one stage per device (got %d chunks); use v-min, v-half or v-zb for 2",
                       gp->chunks);
    stage_cost *c = malloc(sizeof *c * (size_t)gp->stages);
    if (!c)
        return zb_fail(err, "out of memory");
    for (int j = 0; j < gp->stages; j++)
        c[j] = (stage_cost){ gp->t_f, gp->t_b, gp->t_w, gp->m_f, gp->m_b, gp->m_w };
    *pr = (solver_problem){ .p = gp->stages, .m = gp->microbatches, .cost = c,
                            .t_comm = gp->t_comm, .limit = gp->mem_limit };
    *costs = c;
    return 0;
}

int solver_zb_auto(const gen_params *gp, sched_t **out, zb_err *err)
{
    solver_problem pr;
    stage_cost *costs;
    if (solver_problem_from_params(gp, &pr, &costs, err) != 0)
        return -1;
    int rc = solver_zb_auto_costs(&pr, out, NULL, err);
    free(costs);
    return rc;
}
