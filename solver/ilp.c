/*
 * ilp.c: the zero-bubble paper's ILP (arXiv 2401.10241 Appendix G; the
 * authors' auto_schedule.py build_ilp) in GLPK, warm-started with zb-auto.
 *
 * Formulation, one stage per device, ops F, B, W per (stage, micro-batch):
 *   E_i        end time of op i (continuous);
 *   x_ab       binary, 1 when a runs before b, for each same-stage pair not
 *              already ordered by precedence (transitive closure of the
 *              dependencies plus symmetry breaking: same-kind ops of a stage
 *              run in micro-batch order, as in the authors' code);
 *   R          the objective, the largest stage span (eq. 3).
 *   (4), (5)   E_i >= E_parent + T_i (+ T_comm across stages);
 *   (6)        E_b >= E_a + T_b - M(1 - x_ab) and E_a >= E_b + T_a - M x_ab,
 *              with M per pair from the variables' bounds (below);
 *   (7)        for every op i: d_i + sum of forced predecessors' deltas +
 *              sum of d_k [k before i] over unordered k <= limit;
 *   span       R >= E(W last) - start of the stage, and the authors' cut
 *              R >= E_i + (all ops that follow i on its stage) - start.
 *
 * Tightening, all valid for the simulator's semantics: the first op of
 * every stage, F(s,0), starts as early as possible (it does in any ASAP
 * execution: it depends only on F(s-1,0)), which also pins the start of
 * every stage's window; R <= r_cap, the heuristic's cost (the incumbent),
 * or that minus 1 when every time is an integer (then only strictly better
 * schedules are sought, and none means the heuristic is optimal); so every
 * op lies in [start_s + its forced predecessors' work, start_s + r_cap -
 * its forced successors' work], which gives each E_i tight bounds and each
 * pair a small big-M.  Under tight memory limits (analyse, repeated to a
 * fixpoint): memory-forced precedences (memory_lags: F(s,j+k) after
 * B(s,j) or W(s,j) once k+1 micro-batches cannot be live at once), a
 * memory release bound on each F's earliest end (memory_release_lb),
 * latest ends pushed back from successors on other stages, and
 * window-forced precedences (window_edges: a pair whose windows allow only
 * one order gets that order as an edge).  The edges join the transitive
 * closure, so ordered pairs lose their binaries.  R's lower bound is the
 * largest of the stages' busy time, windows and memory bound (bound.c);
 * when it meets the heuristic's cost, or the windows below r_cap are
 * empty, the heuristic is optimal and no model is built.
 *
 * GLPK is loaded with dlopen when the first model is solved (glpk_load.h),
 * so the program links none of it.
 *
 * The solve: LP relaxation by simplex, then glp_intopt (no presolve, so
 * that the callback sees the original columns) whose callback hands the
 * heuristic's schedule in at the first GLP_IHEUR (glp_ios_heur_sol; only
 * when r_cap is the heuristic's cost, else it is no solution) and
 * tracks the best bound.  GLPK's terminal output goes to the solver log
 * (solver_set_log; discarded by default); its fatal errors longjmp back
 * here, GLPK's environment is freed and an error is returned.  The result
 * is turned back into op lists (sort each stage by end time), evaluated,
 * and replaced by the heuristic's schedule if it is not at least as good.
 *
 * Workload: small pipelines (p <= 8, m <= 16 or so); the number of binaries
 * grows as 3/2 p m^2.  Measured times are in bench/README.md.
 */
#include "solver/solver.h"
#include "solver/solver_internal.h"

#include <math.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "solver/glpk_load.h"
#include "solver/progress.h"

/* The most binaries (estimated as 3 p m^2) a model may have.  GLPK holds
 * about four rows per binary; 300,000 binaries is ~1.2 million rows and a
 * few hundred MB, already far past what branch and cut closes (p=4, m=12,
 * ~1,700 binaries, stays open after 20 s).  Larger sizes are refused
 * before anything is allocated (p=64, m=1024 used to reach 4.7 GB). */
#define ILP_MAX_BINARIES 300000

/* GLPK reports progress (and the term hook checks the deadline) every
 * GLPK_OUT_MS; the hook stops it GLPK_GRACE_S after the deadline. */
#define GLPK_OUT_MS 100
#define GLPK_GRACE_S 0.1

/* Seconds per matrix nonzero GLPK's simplex takes before its first
 * iteration: 1.3 s for 1.28 million on the 2-core VM (p=32, m=55). */
#define GLPK_START_S_PER_NZ 1e-6

static solver_log_fn log_fn;  /* where GLPK's text goes, or NULL */
static void *log_ctx;         /* passed back to log_fn */

void solver_set_log(solver_log_fn fn, void *ctx)
{
    log_fn = fn;
    log_ctx = ctx;
}

/* Everything one solve allocates with malloc, so that a GLPK failure that
 * longjmps out can still free it. */
typedef struct ilp_ctx {
    const solver_problem *pr; /* the problem */
    double t0, time_limit;    /* start (now_s) and limit of the solve, for progress */
    int n;                    /* ops: 3 p m */
    int words;                /* 64-bit words per ancestor bitset */
    uint64_t *anc;            /* [n][words] ancestors of each op */
    double *lb, *ub;          /* [n] bounds on each op's end time */
    double *tail;             /* [n] work of the op's forced same-stage successors */
    double *start;            /* [p] start of each stage's window */
    int *lag_b, *lag_w;       /* [p] memory-forced lags: B(s,j) (W(s,j)) must run before
                                 F(s,j+lag) (0: no such precedence), see memory_lags */
    int *xe_par, *xe_next;    /* [xe_cap] window-forced edges: parent, next edge of the child */
    int *xe_head;             /* [n] first window-forced edge into each op, or -1 */
    int n_xe, xe_cap;         /* window-forced edges, allocated */
    int *topo;                /* [n] a topological order of all edges */
    int *par_buf;             /* [4 + 3m] parents scratch for node_parents_all */
    double *gap_buf;          /* [4 + 3m] their gaps */
    int infeasible;           /* the windows prove that no schedule has R <= r_cap */
    double *warm_end;         /* [n] end times of the heuristic schedule */
    int *warm_pos;            /* [n] position of each op in its heuristic list */
    int *pair_a, *pair_b;     /* [n_pairs] the ops of each binary (a < b) */
    int n_pairs;              /* binaries */
    int n_pair_cap;           /* allocated pairs */
    double *warm_x;           /* [1 + columns] the incumbent handed to GLPK */
    int *ind;                 /* [1 + columns] scratch row indices */
    double *val;              /* [1 + columns] scratch row values */
    double r_heur;            /* the heuristic's cost */
    double r_cap;             /* R's upper bound in the model: r_heur, or r_heur - 1
                                 when every time is an integer (see solver_ilp_costs) */
    int integral;             /* every T and T_comm is an integer, so is every span */
    double r_lb;              /* static lower bound on R */
    double bound;             /* best bound seen in the search */
    int heur_given;           /* the incumbent was handed to GLPK */
    double deadline;          /* CLOCK_MONOTONIC second at which the whole solve must stop */
    int timed_out;            /* the deadline passed before GLPK ran: the heuristic stands */
    int glpk_timeout;         /* the term hook left GLPK at the deadline */
    jmp_buf fail;             /* where GLPK's fatal errors (and the deadline) land */
    glp_prob *lp;             /* the model (owned by GLPK's environment) */
    const zb_glpk_api *glpk;  /* GLPK's entry points (glpk_load.h), loaded by run_glpk */
} ilp_ctx;

static double now_s(void);

/* Whether the command's time limit has passed (latched).  Checked between
 * the analysis passes and inside their quadratic loops and the model
 * building, so that --time-limit bounds the whole command, not only
 * GLPK's own search. */
static int past_deadline(ilp_ctx *c)
{
    if (!c->timed_out && now_s() > c->deadline)
        c->timed_out = 1;
    return c->timed_out;
}

static void ctx_free(ilp_ctx *c)
{
    free(c->anc);
    free(c->lb);
    free(c->ub);
    free(c->tail);
    free(c->start);
    free(c->lag_b);
    free(c->lag_w);
    free(c->xe_par);
    free(c->xe_next);
    free(c->xe_head);
    free(c->topo);
    free(c->par_buf);
    free(c->gap_buf);
    free(c->warm_end);
    free(c->warm_pos);
    free(c->pair_a);
    free(c->pair_b);
    free(c->warm_x);
    free(c->ind);
    free(c->val);
}

static int node_id(const solver_problem *pr, int kind, int stage, int mb)
{
    return (kind * pr->p + stage) * pr->m + mb;
}

static double node_cost(const solver_problem *pr, int id)
{
    int kind = id / (pr->p * pr->m), stage = (id / pr->m) % pr->p;
    const stage_cost *c = &pr->cost[stage];
    return kind == OP_F ? c->t_f : kind == OP_B ? c->t_b : c->t_w;
}

static double node_mem(const solver_problem *pr, int id)
{
    int kind = id / (pr->p * pr->m), stage = (id / pr->m) % pr->p;
    const stage_cost *c = &pr->cost[stage];
    return kind == OP_F ? c->d_f : kind == OP_B ? c->d_b : c->d_w;
}

static int node_stage(const solver_problem *pr, int id)
{
    return (id / pr->m) % pr->p;
}

/* The parents of op id (at most two) and the gap each edge needs (T_comm
 * across stages).  Returns the count. */
static int node_parents(const solver_problem *pr, int id, int par[2], double gap[2])
{
    int p = pr->p, m = pr->m, kind = id / (p * m), s = (id / m) % p, j = id % m, n = 0;
    if (kind == OP_F) {
        if (s > 0) { par[n] = node_id(pr, OP_F, s - 1, j); gap[n++] = pr->t_comm; }
        if (j > 0) { par[n] = node_id(pr, OP_F, s, j - 1); gap[n++] = 0; }
    } else if (kind == OP_B) {
        if (s == p - 1) { par[n] = node_id(pr, OP_F, s, j); gap[n++] = 0; }
        else { par[n] = node_id(pr, OP_B, s + 1, j); gap[n++] = pr->t_comm; }
        if (j > 0) { par[n] = node_id(pr, OP_B, s, j - 1); gap[n++] = 0; }
    } else {
        par[n] = node_id(pr, OP_B, s, j); gap[n++] = 0;
        if (j > 0) { par[n] = node_id(pr, OP_W, s, j - 1); gap[n++] = 0; }
    }
    return n;
}

/* A topological order, micro-batch major: for each micro-batch, F by
 * stage up, B by stage down, then W.  Every dependency stays within a
 * micro-batch or goes to a later one, and so do the memory-forced
 * precedences (memory_lags), so this order is topological for both. */
static int topo_node(const solver_problem *pr, int k)
{
    int p = pr->p, j = k / (3 * p), r = k % (3 * p);
    if (r < p)
        return node_id(pr, OP_F, r, j);
    if (r < 2 * p)
        return node_id(pr, OP_B, 2 * p - 1 - r, j);
    return node_id(pr, OP_W, r - 2 * p, j);
}

/* Memory-forced precedences.  Under a limit on stage s, F(s,i) cannot run
 * before B(s,j) (or W(s,j)) once i - j is large enough, because the memory
 * held right after F(s,i) would then exceed the limit however the other
 * ops are ordered.  Proof, for X(s,j) still not run when F(s,i) ends, k =
 * i - j >= 1, same-kind ops in micro-batch order (the model's symmetry
 * breaking) and every delta counted as in row (7):
 *   - micro-batches j..i have run F (F's run in order, F(s,i) just ran);
 *   - X = B: none of B(s,j..i) has run (B's run in order), so each holds
 *     dF: (k+1) dF;
 *   - X = W: none of W(s,j..i) has run; B(s,i) has not (it depends on
 *     F(s,i)) and the B's that have run form a prefix of j..i-1, so they
 *     hold at least (k+1) dF + k min(dB, 0);
 *   - each micro-batch l < j holds at least the smallest of its possible
 *     states dF, dF+dB, dF+dB+dW (call it q), so j q in all.
 * If that least memory exceeds the limit, X(s,j) runs before F(s,i) in
 * every feasible schedule: an edge X(s,j) -> F(s,i) (gap 0, same device)
 * cuts no feasible schedule.  The least memory grows as j falls with i
 * fixed (by dF - q >= 0, resp. dF + min(dB,0) - q >= 0), so the edge holds
 * for every j' <= j too, and the one edge from the largest such j implies
 * the others through the B (W) chain: one lag per stage and kind. */
static int memory_lags(ilp_ctx *c)
{
    const solver_problem *pr = c->pr;
    c->lag_b = calloc((size_t)pr->p, sizeof(int));
    c->lag_w = calloc((size_t)pr->p, sizeof(int));
    if (!c->lag_b || !c->lag_w)
        return -1;
    if (!pr->limit)
        return 0;
    for (int s = 0; s < pr->p; s++) {
        const stage_cost *sc = &pr->cost[s];
        double lim = pr->limit[s] + 1e-9 * fmax(1, fabs(pr->limit[s]));
        double q = fmin(sc->d_f, fmin(sc->d_f + sc->d_b, sc->d_f + sc->d_b + sc->d_w));
        if (!(sc->d_f > 0))
            continue;
        for (int k = 1; k < pr->m && !c->lag_b[s]; k++) {
            /* one lag for all i: forced at every j = i - k */
            int forced = 1;
            for (int j = 0; j + k < pr->m; j++)
                if ((k + 1) * sc->d_f + j * q <= lim)
                    forced = 0;
            if (forced)
                c->lag_b[s] = k;
        }
        for (int k = 1; k < pr->m && !c->lag_w[s]; k++) {
            int forced = 1;
            for (int j = 0; j + k < pr->m; j++)
                if ((k + 1) * sc->d_f + k * fmin(sc->d_b, 0) + j * q <= lim)
                    forced = 0;
            if (forced)
                c->lag_w[s] = k;
        }
    }
    return 0;
}

/* node_parents plus the memory-forced parents of an F (memory_lags) and
 * the window-forced parents (window_edges), in c->par_buf / c->gap_buf
 * (valid until the next call).  Returns the count. */
static int node_parents_all(const ilp_ctx *c, int id)
{
    const solver_problem *pr = c->pr;
    int *par = c->par_buf, par2[2];
    double *gap = c->gap_buf, gap2[2];
    int n = node_parents(pr, id, par2, gap2), m = pr->m;
    for (int x = 0; x < n; x++) {
        par[x] = par2[x];
        gap[x] = gap2[x];
    }
    int kind = id / (pr->p * m), s = (id / m) % pr->p, j = id % m;
    if (kind == OP_F && c->lag_b[s] && j - c->lag_b[s] >= 0) {
        par[n] = node_id(pr, OP_B, s, j - c->lag_b[s]);
        gap[n++] = 0;
    }
    if (kind == OP_F && c->lag_w[s] && j - c->lag_w[s] >= 0) {
        par[n] = node_id(pr, OP_W, s, j - c->lag_w[s]);
        gap[n++] = 0;
    }
    for (int e = c->xe_head[id]; e >= 0; e = c->xe_next[e]) {
        par[n] = c->xe_par[e];
        gap[n++] = 0;
    }
    return n;
}

/* A topological order of all edges into c->topo (Kahn's algorithm).
 * Returns 0, 1 when the edges have a cycle (only window-forced edges can
 * close one, and then no schedule has R <= r_cap), -1 on out of memory. */
static int topo_sort(ilp_ctx *c)
{
    int n = c->n, rc = -1;
    int *n_child = calloc((size_t)n + 1, sizeof(int)), *indeg = calloc((size_t)n, sizeof(int));
    int *child = NULL;
    if (!n_child || !indeg)
        goto out;
    long n_edges = 0;
    for (int i = 0; i < n; i++) {
        int np = node_parents_all(c, i);
        indeg[i] = np;
        for (int x = 0; x < np; x++)
            n_child[c->par_buf[x] + 1]++;
        n_edges += np;
    }
    for (int i = 0; i < n; i++)
        n_child[i + 1] += n_child[i]; /* now the start of each op's children */
    child = malloc(sizeof(int) * (size_t)(n_edges + 1));
    int *fill = malloc(sizeof(int) * (size_t)n);
    if (!child || !fill) {
        free(fill);
        goto out;
    }
    memcpy(fill, n_child, sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++) {
        int np = node_parents_all(c, i);
        for (int x = 0; x < np; x++)
            child[fill[c->par_buf[x]]++] = i;
    }
    free(fill);
    int head = 0, tail = 0;
    for (int k = 0; k < n; k++) { /* sources in the base order, for stable ties */
        int i = topo_node(c->pr, k);
        if (!indeg[i])
            c->topo[tail++] = i;
    }
    while (head < tail) {
        int i = c->topo[head++];
        for (int e = n_child[i]; e < n_child[i + 1]; e++)
            if (--indeg[child[e]] == 0)
                c->topo[tail++] = child[e];
    }
    rc = tail < n ? 1 : 0;
out:
    free(n_child);
    free(indeg);
    free(child);
    return rc;
}

/* A lower bound on the end of op i from the memory limit, for an F (0 for
 * other ops or without a limit).  Right after F(s,i) ends, F(s,0..i) have
 * run, and (same kinds in micro-batch order) the B's that have run are
 * B(s,0..nb-1) and the W's W(s,0..nw-1) for some nw <= nb <= i (B(s,i)
 * needs F(s,i)), so the memory is (i+1) dF + nb dB + nw dW, which must fit
 * the limit.  Whatever (nb, nw) a schedule has, B(s,nb-1) and W(s,nw-1)
 * ran before F(s,i) on the same device, so F(s,i) ends at least T_F after
 * the later of their earliest ends: the least of that over the (nb, nw)
 * that fit bounds E_F.  (The memory lags are the special case where every
 * fitting pair has nb or nw large; this also covers the disjunctions,
 * e.g. at 2 M_B F(s,j+2) waits for B(s,j+1) or W(s,j).) */
static double memory_release_lb(const ilp_ctx *c, int i)
{
    const solver_problem *pr = c->pr;
    int m = pr->m, kind = i / (pr->p * m), s = (i / m) % pr->p, j = i % m;
    if (kind != OP_F || !pr->limit)
        return 0;
    const stage_cost *sc = &pr->cost[s];
    double lim = pr->limit[s] + 1e-9 * fmax(1, fabs(pr->limit[s])), best = INFINITY;
    for (int nb = 0; nb <= j; nb++) {
        double after_b = nb ? c->lb[node_id(pr, OP_B, s, nb - 1)] : 0;
        for (int nw = 0; nw <= nb; nw++) {
            if ((j + 1) * sc->d_f + nb * sc->d_b + nw * sc->d_w > lim)
                continue;
            double after_w = nw ? c->lb[node_id(pr, OP_W, s, nw - 1)] : 0;
            best = fmin(best, fmax(after_b, after_w));
        }
    }
    return isinf(best) ? 0 : best + sc->t_f; /* none fits: zb-auto would have failed */
}

/* 1 when a must run before b (b's ancestor bitset has a). */
static int precedes(const ilp_ctx *c, int a, int b)
{
    return (c->anc[(long)b * c->words + a / 64] >> (a % 64)) & 1;
}

/* One pass over the current edges: ancestors, ASAP and latest ends, tails,
 * stage starts and R's static lower bound.  0, or -1 on out of memory;
 * sets c->infeasible when the edges or windows leave no schedule with
 * R <= r_cap. */
static int analyse_pass(ilp_ctx *c)
{
    const solver_problem *pr = c->pr;
    int n = c->n;
    int cyc = topo_sort(c);
    if (cyc < 0)
        return -1;
    if (cyc) {
        c->infeasible = 1;
        return 0;
    }
    memset(c->anc, 0, sizeof(uint64_t) * (size_t)n * (size_t)c->words);
    memset(c->tail, 0, sizeof(double) * (size_t)n);
    /* Ancestors and ASAP end times in topological order. */
    for (int k = 0; k < n; k++) {
        int i = c->topo[k];
        double asap = 0;
        uint64_t *row = &c->anc[(long)i * c->words];
        int np = node_parents_all(c, i);
        for (int x = 0; x < np; x++) {
            int q = c->par_buf[x];
            const uint64_t *pr_row = &c->anc[(long)q * c->words];
            for (int w = 0; w < c->words; w++)
                row[w] |= pr_row[w];
            row[q / 64] |= (uint64_t)1 << (q % 64);
            asap = fmax(asap, c->lb[q] + c->gap_buf[x]);
        }
        c->lb[i] = asap + node_cost(pr, i);
    }
    for (int s = 0; s < pr->p; s++)
        c->start[s] = c->lb[node_id(pr, OP_F, s, 0)] - pr->cost[s].t_f;
    /* Forced same-stage predecessors' work raises lb; successors' work
     * (the tail) lowers ub. */
    for (int i = 0; i < n; i++) {
        if (i % 1024 == 0 && past_deadline(c))
            return 0;
        int s = node_stage(pr, i);
        double head = 0;
        for (int kind = 0; kind < 3; kind++) {
            for (int j = 0; j < pr->m; j++) {
                int k = node_id(pr, kind, s, j);
                if (k == i)
                    continue;
                if (precedes(c, k, i))
                    head += node_cost(pr, k);
                else if (precedes(c, i, k))
                    c->tail[i] += node_cost(pr, k);
            }
        }
        c->lb[i] = fmax(c->lb[i], c->start[s] + head + node_cost(pr, i));
    }
    /* The raised lb's feed their descendants, and the memory rule
     * (memory_release_lb) raises F's: forward passes until nothing moves. */
    for (int round = 0; round < 50; round++) {
        if (past_deadline(c))
            return 0;
        int moved = 0;
        for (int k = 0; k < n; k++) {
            int i = c->topo[k], np = node_parents_all(c, i);
            double t = c->lb[i];
            for (int x = 0; x < np; x++)
                t = fmax(t, c->lb[c->par_buf[x]] + c->gap_buf[x] + node_cost(pr, i));
            t = fmax(t, memory_release_lb(c, i));
            if (t > c->lb[i] + 1e-9 * fmax(1, fabs(t))) {
                c->lb[i] = t;
                moved = 1;
            }
        }
        if (!moved)
            break;
    }
    c->r_lb = 0;
    for (int s = 0; s < pr->p; s++) {
        const stage_cost *sc = &pr->cost[s];
        double busy = pr->m * (sc->t_f + sc->t_b + sc->t_w);
        /* every op of the stage ends by start + R, with its tail after it */
        double path = 0;
        for (int kind = 0; kind < 3; kind++)
            for (int j = 0; j < pr->m; j++) {
                int i = node_id(pr, kind, s, j);
                path = fmax(path, c->lb[i] + c->tail[i] - c->start[s]);
            }
        c->r_lb = fmax(c->r_lb, fmax(busy, path));
        c->r_lb = fmax(c->r_lb, solver_stage_lower_bound(pr, s));
    }
    if (c->integral)
        c->r_lb = ceil(c->r_lb - 1e-9);
    for (int i = 0; i < n; i++)
        c->ub[i] = c->start[node_stage(pr, i)] + c->r_cap - c->tail[i];
    /* First ops are pinned to their ASAP ends. */
    for (int s = 0; s < pr->p; s++) {
        int f0 = node_id(pr, OP_F, s, 0);
        c->ub[f0] = c->lb[f0];
    }
    /* Latest ends also follow from the successors on other stages: an op
     * ends at least T_child (+ T_comm) before each child's latest end. */
    for (int k = n - 1; k >= 0; k--) {
        int i = c->topo[k], np = node_parents_all(c, i);
        for (int x = 0; x < np; x++) {
            int q = c->par_buf[x];
            c->ub[q] = fmin(c->ub[q], c->ub[i] - node_cost(pr, i) - c->gap_buf[x]);
        }
    }
    if (c->r_lb > c->r_cap + 1e-9 * fmax(1, c->r_cap))
        c->infeasible = 1;
    for (int i = 0; i < n; i++)
        if (c->lb[i] > c->ub[i] + 1e-9 * fmax(1, fabs(c->ub[i])))
            c->infeasible = 1;
    return 0;
}

/* Window-forced precedences: for two same-stage ops a, b left unordered,
 * if b ran first then a would end at lb[b] + T_a or later; when that is
 * past ub[a], every schedule with R <= r_cap runs a before b, so the edge
 * a -> b (gap 0) cuts none of them (and none of the model's solutions,
 * which all have R <= r_cap).  Adds every such edge; returns how many, or
 * -1 on out of memory.  Both directions forced: c->infeasible. */
static int window_edges(ilp_ctx *c)
{
    const solver_problem *pr = c->pr;
    int m = pr->m, added = 0;
    for (int s = 0; s < pr->p; s++)
        for (int k1 = 0; k1 < 3 * m; k1++) {
            if (k1 % 64 == 0 && past_deadline(c))
                return added;
            for (int k2 = k1 + 1; k2 < 3 * m; k2++) {
                int a = node_id(pr, k1 / m, s, k1 % m), b = node_id(pr, k2 / m, s, k2 % m);
                if (precedes(c, a, b) || precedes(c, b, a))
                    continue;
                double tol = 1e-9 * fmax(1, c->r_cap);
                int a_first = c->lb[b] + node_cost(pr, a) > c->ub[a] + tol; /* b first is too late */
                int b_first = c->lb[a] + node_cost(pr, b) > c->ub[b] + tol;
                if (a_first && b_first) {
                    c->infeasible = 1;
                    return added;
                }
                if (!a_first && !b_first)
                    continue;
                if (c->n_xe == c->xe_cap) {
                    int cap = c->xe_cap ? 2 * c->xe_cap : 256;
                    int *np_ = realloc(c->xe_par, sizeof(int) * (size_t)cap);
                    if (!np_)
                        return -1;
                    c->xe_par = np_;
                    int *nn = realloc(c->xe_next, sizeof(int) * (size_t)cap);
                    if (!nn)
                        return -1;
                    c->xe_next = nn;
                    c->xe_cap = cap;
                }
                int from = a_first ? a : b, to = a_first ? b : a;
                c->xe_par[c->n_xe] = from;
                c->xe_next[c->n_xe] = c->xe_head[to];
                c->xe_head[to] = c->n_xe++;
                added++;
            }
        }
    return added;
}

/* Ancestors, bounds and tails, repeated while the windows force new
 * precedences (each pass can only shrink windows, so this converges; the
 * passes are capped all the same).  0 or -1 on out of memory. */
static int analyse(ilp_ctx *c)
{
    const solver_problem *pr = c->pr;
    int n = c->n;
    c->words = (n + 63) / 64;
    c->anc = calloc((size_t)n * (size_t)c->words, sizeof(uint64_t));
    c->lb = malloc(sizeof(double) * (size_t)n);
    c->ub = malloc(sizeof(double) * (size_t)n);
    c->tail = calloc((size_t)n, sizeof(double));
    c->start = malloc(sizeof(double) * (size_t)pr->p);
    c->xe_head = malloc(sizeof(int) * (size_t)n);
    c->topo = malloc(sizeof(int) * (size_t)n);
    c->par_buf = malloc(sizeof(int) * (4 + 3 * (size_t)pr->m));
    c->gap_buf = malloc(sizeof(double) * (4 + 3 * (size_t)pr->m));
    if (!c->anc || !c->lb || !c->ub || !c->tail || !c->start || !c->xe_head || !c->topo || !c->par_buf
        || !c->gap_buf || memory_lags(c) != 0)
        return -1;
    for (int i = 0; i < n; i++)
        c->xe_head[i] = -1;
    for (int pass = 0; pass < 100; pass++) {
        if (past_deadline(c))
            return 0;
        if (analyse_pass(c) != 0)
            return -1;
        if (c->infeasible || c->timed_out)
            return 0;
        int added = window_edges(c);
        if (added < 0)
            return -1;
        if (added == 0 || c->infeasible || c->timed_out)
            return 0;
    }
    return analyse_pass(c);
}

/* End time and list position of every op of the heuristic schedule. */
static int warm_times(ilp_ctx *c, const sched_t *h)
{
    const solver_problem *pr = c->pr;
    c->warm_end = malloc(sizeof(double) * (size_t)c->n);
    c->warm_pos = malloc(sizeof(int) * (size_t)c->n);
    int *cur = calloc((size_t)pr->p, sizeof(int));
    double *free_at = calloc((size_t)pr->p, sizeof(double));
    char *done = calloc((size_t)c->n, 1);
    int rc = -1;
    if (!c->warm_end || !c->warm_pos || !cur || !free_at || !done)
        goto out;
    for (int d = 0; d < pr->p; d++)
        for (int x = 0; x < h->dev[d].n_ops; x++) {
            sched_op op = h->dev[d].ops[x];
            c->warm_pos[node_id(pr, op.kind, op.stage, op.mb)] = x;
        }
    for (int left = c->n; left > 0;) {
        int advanced = 0;
        for (int d = 0; d < pr->p; d++) {
            while (cur[d] < h->dev[d].n_ops) {
                sched_op op = h->dev[d].ops[cur[d]];
                int i = node_id(pr, op.kind, op.stage, op.mb), par[2];
                double gap[2], t = free_at[d];
                int np = node_parents(pr, i, par, gap), ok = 1;
                for (int x = 0; x < np && ok; x++) {
                    ok = done[par[x]];
                    if (ok)
                        t = fmax(t, c->warm_end[par[x]] + gap[x]);
                }
                if (!ok)
                    break;
                c->warm_end[i] = free_at[d] = t + node_cost(pr, i);
                done[i] = 1;
                cur[d]++;
                advanced++;
            }
        }
        if (!advanced)
            goto out; /* cannot happen for a zb-auto schedule */
        left -= advanced;
    }
    rc = 0;
out:
    free(cur);
    free(free_at);
    free(done);
    return rc;
}

/* GLPK's progress output, every GLPK_OUT_MS at an iteration boundary.
 * GLPK's own tm_lim is checked too coarsely on large models (a p=32, m=55
 * LP ran 1.3 s past it), so this hook also enforces the deadline: past
 * it (with GLPK_GRACE_S for GLPK's own stop to come first) it leaves GLPK
 * by longjmp, like the error hook, and run_glpk frees GLPK's whole
 * environment, which glp_free_env supports after an abnormal exit. */
static int term_hook(void *info, const char *s)
{
    ilp_ctx *c = info;
    if (log_fn)
        log_fn(log_ctx, s);
    if (c && now_s() > c->deadline + GLPK_GRACE_S) {
        c->glpk_timeout = 1;
        longjmp(c->fail, 1);
    }
    return 1; /* never let GLPK write to stdout itself */
}

static void error_hook(void *info)
{
    ilp_ctx *c = info;
    longjmp(c->fail, 1);
}

static double now_s(void);

/* Hands the solve's figures to the progress callback (solver/progress.h):
 * the incumbent is the heuristic's cost until GLPK holds a better integer
 * solution (lp may be NULL outside branch and bound). */
static void report_progress(const ilp_ctx *c, glp_prob *lp, int done)
{
    double inc = c->r_heur;
    if (lp && (c->glpk->mip_status(lp) == GLP_FEAS || c->glpk->mip_status(lp) == GLP_OPT))
        inc = fmin(inc, c->glpk->mip_obj_val(lp));
    solver_progress p = { .elapsed_s = now_s() - c->t0, .time_limit_s = c->time_limit,
                          .incumbent = inc, .bound = fmin(c->bound, inc), .done = done };
    solver_progress_report(&p);
}

static void ios_callback(glp_tree *tree, void *info)
{
    ilp_ctx *c = info;
    int reason = c->glpk->ios_reason(tree);
    if (reason == GLP_IHEUR && !c->heur_given) {
        c->heur_given = 1;
        c->glpk->ios_heur_sol(tree, c->warm_x);
    }
    if (reason == GLP_IBRANCH) {
        /* Chronological branching: decide the order of the earliest open
         * pair first (by the heuristic's times), which fixes the start of
         * the schedule and lets the big-M rows bite early. */
        int best_col = 0;
        double best_t = INFINITY;
        int n = c->n;
        for (int k = 0; k < c->n_pairs; k++) {
            int col = n + 2 + k;
            if (!c->glpk->ios_can_branch(tree, col))
                continue;
            double t = fmin(c->warm_end[c->pair_a[k]], c->warm_end[c->pair_b[k]]);
            if (t < best_t) {
                best_t = t;
                best_col = col;
            }
        }
        if (best_col) {
            double v = c->glpk->get_col_prim(c->glpk->ios_get_prob(tree), best_col);
            c->glpk->ios_branch_upon(tree, best_col, v >= 0.5 ? GLP_UP_BRNCH : GLP_DN_BRNCH);
        }
    }
    if (reason == GLP_ISELECT || reason == GLP_IPREPRO || reason == GLP_IBRANCH || reason == GLP_IBINGO) {
        int best = c->glpk->ios_best_node(tree);
        if (best)
            c->bound = fmax(c->bound, c->glpk->ios_node_bound(tree, best));
    }
    if (solver_progress_wanted())
        report_progress(c, c->glpk->ios_get_prob(tree), 0);
}

/* Column numbers: E_i is 1 + i, R is n + 1, x_k is n + 2 + k. */
static int col_e(int i) { return 1 + i; }

/* Builds the model into c->lp.  GLPK errors longjmp; malloc failures
 * return -1, the deadline passing returns 1 (the model is then
 * incomplete and must not be solved). */
static int build_model(ilp_ctx *c)
{
    const solver_problem *pr = c->pr;
    int n = c->n, p = pr->p, m = pr->m;
    /* The binaries: same-stage pairs that precedence leaves open. */
    for (int s = 0; s < p; s++) {
        for (int k1 = 0; k1 < 3 * m; k1++) {
            if (k1 % 64 == 0 && past_deadline(c))
                return 1;
            for (int k2 = k1 + 1; k2 < 3 * m; k2++) {
                int a = node_id(pr, k1 / m, s, k1 % m), b = node_id(pr, k2 / m, s, k2 % m);
                if (precedes(c, a, b) || precedes(c, b, a))
                    continue;
                if (c->n_pair_cap == c->n_pairs) {
                    int cap = c->n_pair_cap ? 2 * c->n_pair_cap : 256;
                    int *na = realloc(c->pair_a, sizeof(int) * (size_t)cap);
                    if (!na)
                        return -1;
                    c->pair_a = na;
                    int *nb = realloc(c->pair_b, sizeof(int) * (size_t)cap);
                    if (!nb)
                        return -1;
                    c->pair_b = nb;
                    c->n_pair_cap = cap;
                }
                c->pair_a[c->n_pairs] = a;
                c->pair_b[c->n_pairs++] = b;
            }
        }
    }
    int n_cols = n + 1 + c->n_pairs, col_r = n + 1;
    c->warm_x = calloc((size_t)n_cols + 1, sizeof(double));
    c->ind = malloc(sizeof(int) * ((size_t)n_cols + 1));
    c->val = malloc(sizeof(double) * ((size_t)n_cols + 1));
    /* pair index of each open (a, b), by stage-local op index */
    int *pair_of = malloc(sizeof(int) * (size_t)p * 9 * (size_t)m * (size_t)m);
    if (!c->warm_x || !c->ind || !c->val || !pair_of) {
        free(pair_of);
        return -1;
    }
    for (long x = 0; x < (long)p * 9 * m * m; x++)
        pair_of[x] = -1;
#define LOCAL(i) ((i) / (p * m) * m + (i) % m) /* kind*m + mb within the stage */
#define PAIR_AT(s, la, lb) pair_of[((long)(s) * 3 * m + (la)) * 3 * m + (lb)]
    for (int k = 0; k < c->n_pairs; k++) {
        int s = node_stage(pr, c->pair_a[k]);
        PAIR_AT(s, LOCAL(c->pair_a[k]), LOCAL(c->pair_b[k])) = k;
    }

    glp_prob *lp = c->lp = c->glpk->create_prob();
    c->glpk->set_obj_dir(lp, GLP_MIN);
    c->glpk->add_cols(lp, n_cols);
    for (int i = 0; i < n; i++) {
        c->glpk->set_col_bnds(lp, col_e(i), c->lb[i] == c->ub[i] ? GLP_FX : GLP_DB, c->lb[i], c->ub[i]);
        c->warm_x[col_e(i)] = c->warm_end[i];
    }
    c->glpk->set_col_bnds(lp, col_r, c->r_lb < c->r_cap ? GLP_DB : GLP_FX, fmin(c->r_lb, c->r_cap), c->r_cap);
    c->glpk->set_obj_coef(lp, col_r, 1.0);
    c->warm_x[col_r] = c->r_heur;
    for (int k = 0; k < c->n_pairs; k++) {
        int col = n + 2 + k;
        c->glpk->set_col_kind(lp, col, GLP_BV);
        c->warm_x[col] = c->warm_pos[c->pair_a[k]] < c->warm_pos[c->pair_b[k]];
    }

    /* (4), (5): dependencies, and the memory-forced precedences. */
    for (int i = 0; i < n; i++) {
        int np = node_parents_all(c, i);
        for (int x = 0; x < np; x++) {
            int row = c->glpk->add_rows(lp, 1);
            c->ind[1] = col_e(i); c->val[1] = 1;
            c->ind[2] = col_e(c->par_buf[x]); c->val[2] = -1;
            c->glpk->set_mat_row(lp, row, 2, c->ind, c->val);
            c->glpk->set_row_bnds(lp, row, GLP_LO, node_cost(pr, i) + c->gap_buf[x], 0);
        }
    }
    /* (6): disjunctions with per-pair big-M from the bounds. */
    for (int k = 0; k < c->n_pairs; k++) {
        if (k % 4096 == 0 && past_deadline(c)) {
            free(pair_of);
            return 1;
        }
        int a = c->pair_a[k], b = c->pair_b[k], col = n + 2 + k;
        double ta = node_cost(pr, a), tb = node_cost(pr, b);
        double m1 = fmax(0, c->ub[a] + tb - c->lb[b]); /* E_b >= E_a + T_b - m1 (1 - x) */
        double m2 = fmax(0, c->ub[b] + ta - c->lb[a]); /* E_a >= E_b + T_a - m2 x */
        int row = c->glpk->add_rows(lp, 2);
        c->ind[1] = col_e(b); c->val[1] = 1;
        c->ind[2] = col_e(a); c->val[2] = -1;
        c->ind[3] = col; c->val[3] = -m1;
        c->glpk->set_mat_row(lp, row, 3, c->ind, c->val);
        c->glpk->set_row_bnds(lp, row, GLP_LO, tb - m1, 0);
        c->ind[1] = col_e(a); c->val[1] = 1;
        c->ind[2] = col_e(b); c->val[2] = -1;
        c->ind[3] = col; c->val[3] = m2;
        c->glpk->set_mat_row(lp, row + 1, 3, c->ind, c->val);
        c->glpk->set_row_bnds(lp, row + 1, GLP_LO, ta, 0);
    }
    /* (7) memory, span and the tail cut, per op. */
    for (int i = 0; i < n; i++) {
        if (i % 256 == 0 && past_deadline(c)) {
            free(pair_of);
            return 1;
        }
        int s = node_stage(pr, i), li = LOCAL(i);
        double mem_const = node_mem(pr, i), mem_max = node_mem(pr, i);
        int nz_mem = 0, nz_cut = 0;
        /* memory row in ind/val[1..], cut row built after */
        for (int lk = 0; lk < 3 * m; lk++) {
            int k = node_id(pr, lk / m, s, lk % m);
            if (k == i)
                continue;
            if (precedes(c, k, i)) {
                mem_const += node_mem(pr, k);
                mem_max += node_mem(pr, k);
                continue;
            }
            if (precedes(c, i, k))
                continue;
            /* open pair: [k before i] is x (k is the pair's a) or 1 - x */
            int pk = k < i ? PAIR_AT(s, lk, li) : PAIR_AT(s, li, lk);
            double d = node_mem(pr, k);
            if (k < i) {
                c->ind[++nz_mem] = n + 2 + pk; c->val[nz_mem] = d;
            } else {
                mem_const += d;
                c->ind[++nz_mem] = n + 2 + pk; c->val[nz_mem] = -d;
            }
            if (d > 0)
                mem_max += d;
        }
        if (pr->limit && mem_max > pr->limit[s] + 1e-9 * fmax(1, fabs(pr->limit[s]))) {
            int row = c->glpk->add_rows(lp, 1);
            c->glpk->set_mat_row(lp, row, nz_mem, c->ind, c->val);
            c->glpk->set_row_bnds(lp, row, GLP_UP, 0, pr->limit[s] - mem_const);
        }
        /* cut: R - E_i - sum T_k [i before k] >= tail_i - start_s */
        c->ind[++nz_cut] = col_r; c->val[nz_cut] = 1;
        c->ind[++nz_cut] = col_e(i); c->val[nz_cut] = -1;
        double cut_const = c->tail[i] - c->start[s];
        for (int lk = 0; lk < 3 * m; lk++) {
            int k = node_id(pr, lk / m, s, lk % m);
            if (k == i || precedes(c, k, i) || precedes(c, i, k))
                continue;
            int pk = k < i ? PAIR_AT(s, lk, li) : PAIR_AT(s, li, lk);
            double t = node_cost(pr, k);
            if (i < k) { /* [i before k] = x */
                c->ind[++nz_cut] = n + 2 + pk; c->val[nz_cut] = -t;
            } else {     /* [i before k] = 1 - x */
                cut_const += t;
                c->ind[++nz_cut] = n + 2 + pk; c->val[nz_cut] = t;
            }
        }
        int row = c->glpk->add_rows(lp, 1);
        c->glpk->set_mat_row(lp, row, nz_cut, c->ind, c->val);
        c->glpk->set_row_bnds(lp, row, GLP_LO, cut_const, 0);
    }
    /* Order monotonicity: if a runs before b, so does every op forced
     * before a, and a runs before every op forced after b.  Implied for
     * integer x but not for the LP relaxation, which it tightens a lot (the
     * memory rows count ops through these x). */
    for (int k = 0; k < c->n_pairs; k++) {
        int ends[2] = { c->pair_a[k], c->pair_b[k] };
        for (int side = 0; side < 2; side++) {
            int u = ends[side], v = ends[1 - side];
            /* [u before v] >= [u' before v] for u' = u's next same-kind op */
            if (u % m + 1 >= m)
                continue;
            int u2 = u + 1, s = node_stage(pr, u);
            if (precedes(c, u2, v) || precedes(c, v, u2))
                continue;
            int k2 = u2 < v ? PAIR_AT(s, LOCAL(u2), LOCAL(v)) : PAIR_AT(s, LOCAL(v), LOCAL(u2));
            /* [u<v] - [u2<v] >= 0 with [x<y] = x_pair or 1 - x_pair */
            double cst = 0;
            int nz = 0;
            if (u < v) { c->ind[++nz] = n + 2 + k; c->val[nz] = 1; }
            else { cst += 1; c->ind[++nz] = n + 2 + k; c->val[nz] = -1; }
            if (u2 < v) { c->ind[++nz] = n + 2 + k2; c->val[nz] = -1; }
            else { cst -= 1; c->ind[++nz] = n + 2 + k2; c->val[nz] = 1; }
            int row = c->glpk->add_rows(lp, 1);
            c->glpk->set_mat_row(lp, row, nz, c->ind, c->val);
            c->glpk->set_row_bnds(lp, row, GLP_LO, -cst, 0);
        }
    }
#undef LOCAL
#undef PAIR_AT
    free(pair_of);
    return 0;
}

/* Per stage, ops sorted by end time (ties by topological rank). */
typedef struct ilp_sorted {
    double end; /* E_i from the solution */
    int rank;   /* position in the topological order */
    int id;     /* the op */
} ilp_sorted;

static int cmp_sorted(const void *x, const void *y)
{
    const ilp_sorted *a = x, *b = y;
    if (a->end != b->end)
        return a->end < b->end ? -1 : 1;
    return (a->rank > b->rank) - (a->rank < b->rank);
}

/* Builds the schedule from the MIP solution; NULL on out of memory. */
static sched_t *solution_sched(ilp_ctx *c, const sched_t *h)
{
    const solver_problem *pr = c->pr;
    int m = pr->m;
    sched_t *s = sched_clone(h);
    ilp_sorted *buf = malloc(sizeof *buf * 3 * (size_t)m);
    int *rank = malloc(sizeof(int) * (size_t)c->n);
    if (!s || !buf || !rank)
        goto fail;
    for (int k = 0; k < c->n; k++)
        rank[c->topo[k]] = k;
    for (int d = 0; d < pr->p; d++) {
        int cnt = 0;
        for (int kind = 0; kind < 3; kind++)
            for (int j = 0; j < m; j++) {
                int i = node_id(pr, kind, d, j);
                buf[cnt++] = (ilp_sorted){ c->glpk->mip_col_val(c->lp, col_e(i)), rank[i], i };
            }
        qsort(buf, (size_t)cnt, sizeof *buf, cmp_sorted);
        s->dev[d].n_ops = 0;
        for (int x = 0; x < cnt; x++) {
            int i = buf[x].id;
            if (sched_push(s, d, (op_kind)(i / (pr->p * m)), d, i % m) != 0)
                goto fail;
        }
    }
    free(buf);
    free(rank);
    return s;
fail:
    sched_free(s);
    free(buf);
    free(rank);
    return NULL;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Records the "solver" object of meta; 0 or -1 on out of memory. */
static int set_meta(sched_t *s, const char *method, int optimal, double cost, double bound,
                    double seconds, int n_binaries, double heur_cost, const char *status)
{
    if (!s->meta && !(s->meta = cJSON_CreateObject()))
        return -1;
    cJSON_DeleteItemFromObject(s->meta, "solver");
    cJSON *o = cJSON_AddObjectToObject(s->meta, "solver");
    if (!o)
        return -1;
    double gap = cost > 0 ? fmax(0, (cost - bound) / cost) : 0;
    if (optimal)
        gap = 0;
    int ok = cJSON_AddStringToObject(o, "method", method) && cJSON_AddBoolToObject(o, "optimal", optimal)
             && cJSON_AddNumberToObject(o, "cost", cost) && cJSON_AddNumberToObject(o, "bound", bound)
             && cJSON_AddNumberToObject(o, "gap", gap) && cJSON_AddNumberToObject(o, "seconds", seconds)
             && cJSON_AddNumberToObject(o, "binaries", n_binaries)
             && cJSON_AddNumberToObject(o, "heuristic_cost", heur_cost)
             && cJSON_AddStringToObject(o, "status", status);
    return ok ? 0 : -1;
}

/* What one GLPK solve found. */
typedef struct ilp_outcome {
    sched_t *sched;     /* op lists of the MIP solution (caller frees), or NULL */
    double ilp_cost;    /* their evaluated cost, INFINITY when none */
    int optimal;        /* GLPK proved optimality */
    int infeasible;     /* proven: no schedule has R <= r_cap */
    const char *status; /* "optimal", "time limit", ... (static text) */
} ilp_outcome;

/* Builds and solves the model, with GLPK's fatal errors caught: the setjmp
 * lives here so that no caller's locals are at risk.  Always frees GLPK's
 * environment before returning.  0, or -1 with err set. */
static int run_glpk(ilp_ctx *c, const sched_t *heur, double deadline, ilp_outcome *oc, zb_err *err)
{
    if (glpk_load(&c->glpk, err) != 0)
        return -1;
    c->glpk->term_hook(term_hook, c);
    c->glpk->error_hook(error_hook, c);
    if (setjmp(c->fail)) {
        if (c->glpk_timeout) {
            /* The deadline passed inside GLPK: the heuristic stands. */
            c->glpk->free_env();
            sched_free(oc->sched);
            oc->sched = NULL;
            oc->status = "time limit (GLPK stopped at the deadline)";
            return 0;
        }
        /* GLPK failed fatally: its environment is unusable, free it all. */
        c->glpk->free_env();
        sched_free(oc->sched);
        oc->sched = NULL;
        return zb_fail(err, "GLPK failed while solving the ILP (p=%d, m=%d)", c->pr->p, c->pr->m);
    }
    int built = build_model(c);
    if (built < 0) {
        c->glpk->free_env();
        return zb_fail(err, "out of memory in the ILP");
    }
    if (built > 0) {
        c->glpk->free_env();
        oc->status = "time limit (building the model)";
        return 0;
    }
    double left_ms = (deadline - now_s()) * 1000;
    /* GLPK's start-up on a large LP (scaling, the first factorization)
     * reports nothing and checks no limit: do not start it without the
     * time it needs. */
    double start_s = c->glpk->get_num_nz(c->lp) * GLPK_START_S_PER_NZ;
    if (left_ms < start_s * 1000) {
        c->glpk->free_env();
        oc->status = "time limit (too little time left to start GLPK)";
        return 0;
    }
    glp_smcp sm;
    c->glpk->init_smcp(&sm);
    sm.msg_lev = GLP_MSG_ON; /* the term hook checks the deadline at each report */
    sm.out_frq = GLPK_OUT_MS;
    sm.tm_lim = left_ms > 1 ? (int)fmin(left_ms, 2e9) : 1;
    int lp_rc = c->glpk->simplex(c->lp, &sm);
    int have_mip = 0;
    if (lp_rc == 0 && c->glpk->get_status(c->lp) == GLP_NOFEAS) {
        oc->infeasible = 1;
        oc->status = "optimal (LP relaxation infeasible below the heuristic's cost)";
    } else if (lp_rc == 0 && c->glpk->get_status(c->lp) == GLP_OPT) {
        c->bound = fmax(c->bound, c->glpk->get_obj_val(c->lp));
        glp_iocp io;
        c->glpk->init_iocp(&io);
        io.msg_lev = GLP_MSG_ON;
        io.out_frq = GLPK_OUT_MS;
        io.cb_func = ios_callback;
        io.cb_info = c;
        io.presolve = GLP_OFF;
        io.br_tech = GLP_BR_DTH;
        io.bt_tech = GLP_BT_BLB;
        io.mir_cuts = GLP_ON;
        io.mip_gap = 1e-9;
        left_ms = (deadline - now_s()) * 1000;
        /* Proximity search looks for a better schedule near the incumbent
         * (GLPK has no other improvement heuristic): a fifth of the time. */
        io.ps_heur = GLP_ON;
        io.ps_tm_lim = (int)fmax(1, fmin(left_ms / 5, 2e9));
        io.tm_lim = left_ms > 1 ? (int)fmin(left_ms, 2e9) : 1;
        int mip_rc = c->glpk->intopt(c->lp, &io);
        int st = c->glpk->mip_status(c->lp);
        have_mip = st == GLP_OPT || st == GLP_FEAS;
        oc->optimal = mip_rc == 0 && st == GLP_OPT;
        oc->infeasible = mip_rc == 0 && st == GLP_NOFEAS;
        oc->status = oc->optimal      ? "optimal"
                     : oc->infeasible ? "optimal (search found nothing below the heuristic's cost)"
                     : mip_rc == GLP_ETMLIM ? "time limit" : "stopped";
    } else {
        oc->status = lp_rc == GLP_ETMLIM ? "time limit in LP relaxation" : "LP relaxation failed";
    }
    if (have_mip) {
        oc->sched = solution_sched(c, heur);
        if (!oc->sched) {
            c->glpk->free_env();
            return zb_fail(err, "out of memory in the ILP");
        }
        solver_eval_result ev;
        zb_err e2;
        if (solver_eval(oc->sched, &ev, NULL, &e2) == 0)
            oc->ilp_cost = ev.cost;
    }
    c->glpk->free_env(); /* also resets the hooks */
    return 0;
}

int solver_ilp_costs(const solver_problem *pr, double time_limit, sched_t **out, zb_err *err)
{
    double t0 = now_s();
    if (time_limit <= 0)
        time_limit = 60;
    if (!(time_limit < 1e6))
        return zb_fail(err, "ILP time limit %g s is too large", time_limit);
    /* Refuse up front what the model cannot hold: the binaries are the
     * cross-kind pairs of a stage (F-B, F-W, B-W; same-kind ops are
     * ordered by symmetry breaking), at most 3 m^2 per stage, and each
     * brings two disjunction rows and up to two monotonicity rows. */
    double binaries = 3.0 * pr->p * (double)pr->m * pr->m;
    if (binaries > ILP_MAX_BINARIES)
        return zb_fail(err, "ILP too large: p=%d, m=%d gives up to %.0f binary variables and %.0f "
                       "constraints (at most %d binaries); use zb-auto, or fewer stages or micro-batches",
                       pr->p, pr->m, binaries, 4 * binaries + 5.0 * 3 * pr->p * pr->m, ILP_MAX_BINARIES);
    sched_t *heur = NULL;
    double heur_cost;
    if (solver_zb_auto_costs(pr, &heur, &heur_cost, err) != 0)
        return -1;

    ilp_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        sched_free(heur);
        return zb_fail(err, "out of memory in the ILP");
    }
    c->pr = pr;
    c->t0 = t0;
    c->time_limit = time_limit;
    c->n = 3 * pr->p * pr->m;
    c->deadline = t0 + time_limit;
    c->r_heur = heur_cost;
    /* With integer times every ASAP execution has integer ends, so any
     * schedule better than the heuristic's has R <= r_heur - 1: the model
     * then looks only for those (tighter windows, smaller big-M's), and the
     * heuristic is optimal when there are none.  The heuristic's schedule
     * is then no solution of the model and is not handed to GLPK. */
    c->integral = fabs(pr->t_comm - round(pr->t_comm)) < 1e-9 && fabs(heur_cost - round(heur_cost)) < 1e-9;
    for (int s = 0; s < pr->p; s++) {
        const stage_cost *sc = &pr->cost[s];
        c->integral &= fabs(sc->t_f - round(sc->t_f)) < 1e-9 && fabs(sc->t_b - round(sc->t_b)) < 1e-9
                       && fabs(sc->t_w - round(sc->t_w)) < 1e-9;
    }
    c->r_cap = c->integral ? round(heur_cost) - 1 : heur_cost;
    c->heur_given = c->integral;
    int rc = -1;
    sched_t *best = NULL;
    if (analyse(c) != 0 || warm_times(c, heur) != 0) {
        zb_fail(err, "out of memory in the ILP");
        goto out;
    }
    c->bound = c->infeasible ? heur_cost : c->r_lb;

    ilp_outcome oc = { .status = "heuristic", .ilp_cost = INFINITY };
    if (c->timed_out) {
        /* The analysis did not finish: its windows and bounds may be half
         * updated, so neither "infeasible" nor r_lb can be trusted.  The
         * busiest stage's work is a valid bound; the heuristic stands. */
        c->infeasible = 0;
        c->bound = 0;
        for (int s = 0; s < pr->p; s++)
            c->bound = fmax(c->bound, pr->m * (pr->cost[s].t_f + pr->cost[s].t_b + pr->cost[s].t_w));
        oc.status = "time limit (during the analysis, before GLPK)";
    } else if (c->infeasible || c->r_lb >= heur_cost * (1 - 1e-12)) {
        /* The lower bound already meets the heuristic, or the windows
         * below r_cap are empty: the heuristic is optimal, no need to build
         * the model. */
        oc.optimal = 1;
        oc.status = "optimal (lower bound meets the heuristic)";
    } else if (run_glpk(c, heur, c->deadline, &oc, err) != 0) {
        goto out;
    }
    best = oc.sched;
    int optimal = oc.optimal || oc.infeasible;
    if (c->integral)
        c->bound = ceil(c->bound - 1e-9);
    double ilp_cost = oc.ilp_cost;
    const char *status = oc.status;
    /* Never worse than the heuristic: fall back when the ILP's lists do not
     * simulate to a cost at least as good. */
    int use_ilp = ilp_cost <= heur_cost * (1 + 1e-12);
    double bound = optimal ? fmin(ilp_cost, heur_cost) : fmin(c->bound, fmin(ilp_cost, heur_cost));
    if (!optimal && bound >= fmin(ilp_cost, heur_cost) * (1 - 1e-12))
        optimal = 1; /* the search's bound closed the gap before time ran out */
    if (!use_ilp) {
        sched_free(best);
        best = heur;
        heur = NULL;
        /* Proven optimal at R_heur means the heuristic itself is optimal. */
    }
    double cost = use_ilp ? ilp_cost : heur_cost;
    if (solver_progress_wanted()) {
        solver_progress fin = { .elapsed_s = now_s() - t0, .time_limit_s = time_limit,
                                .incumbent = cost, .bound = fmin(bound, cost), .done = 1 };
        solver_progress_report(&fin);
    }
    snprintf(best->name, sizeof best->name, "ilp");
    if (set_meta(best, use_ilp ? "ilp (GLPK branch and cut, zb-auto warm start)" : "ilp fell back to zb-auto",
                 optimal, cost, bound, now_s() - t0, c->n_pairs, heur_cost, status) != 0) {
        zb_fail(err, "out of memory in the ILP");
        goto out;
    }
    *out = best;
    best = NULL;
    rc = 0;
out:
    sched_free(best);
    sched_free(heur);
    ctx_free(c);
    free(c);
    return rc;
}

int solver_ilp(const gen_params *gp, sched_t **out, zb_err *err)
{
    solver_problem pr;
    stage_cost *costs;
    if (solver_problem_from_params(gp, &pr, &costs, err) != 0)
        return -1;
    int rc = solver_ilp_costs(&pr, gp->time_limit, out, err);
    free(costs);
    return rc;
}
