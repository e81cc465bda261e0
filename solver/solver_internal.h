/*
 * solver_internal.h: helpers shared by the files of solver/ and not part of
 * its public interface (solver.h).
 */
#ifndef ZB_SOLVER_INTERNAL_H
#define ZB_SOLVER_INTERNAL_H

#include <math.h>

#include "solver/solver.h"

/* Turns gen_params (uniform costs, one stage per device) into a
 * solver_problem.  Stores a malloc'd [p] cost array in *costs (caller frees;
 * pr->cost points into it).  Returns 0, or -1 with err set on bad shapes. */
int solver_problem_from_params(const gen_params *gp, solver_problem *pr, stage_cost **costs, zb_err *err);

/* The Controllable-Memory paper's stable V-Min (half = 0) or V-Half
 * (half = 1) pattern, squeezed as the authors do (v_pattern.c), on the
 * placement and costs of tmpl (a V-placed schedule without ops).  Stores a
 * new schedule in *out; 0, or -1 on out of memory.  The caller checks its
 * memory against any limit. */
int v_pattern_sched(const sched_t *tmpl, int half, sched_t **out);

/* v_pattern_sched with every move the squeeze makes from its kept memory
 * levels checked against trying and costing each free slot, the
 * authors' way (for the tests): 0 as there, 1 when a move differed (no
 * schedule), -1 on out of memory. */
int v_pattern_sched_checked(const sched_t *tmpl, int half, sched_t **out);

/* Patterns already laid out, by shape.  The pattern's order depends only
 * on p, m and the variant (its squeeze runs on unit costs), while a
 * search asks for it on every configuration of a depth (each micro-batch
 * size, recompute setting and split): laying it out was a sixth of a
 * 405B search's time.  A few shapes are kept, the oldest replaced. */
#define V_PATTERN_CACHE 16
typedef struct v_pattern_cache {
    int n;    /* entries in use */
    int next; /* entry the next new shape replaces once all are in use */
    struct {
        int p, m, half; /* the shape */
        sched_t *s;     /* v_pattern_sched's result for it (owned) */
    } e[V_PATTERN_CACHE];
} v_pattern_cache;

/* v_pattern_sched through cache (NULL: none): the same schedule, taken
 * from cache when it holds the shape (then given tmpl's costs), else laid
 * out and kept there.  0, or -1 on out of memory. */
int v_pattern_sched_cached(v_pattern_cache *cache, const sched_t *tmpl, int half, sched_t **out);

/* Frees what cache holds and empties it. */
void v_pattern_cache_free(v_pattern_cache *cache);

/* When op, next on device d's lane, starts in an ASAP timing of s (the
 * solvers' yardstick, solver_eval): the later of free_at, the device's
 * previous end, and its inputs' arrivals, the producer's end plus
 * t_comm when it sits on another device (F(s,j) after F(s-1,j); B or
 * BW(s,j) after F(s,j) and B/BW(s+1,j); W(s,j) after B(s,j)).  end_f and
 * end_b ([stage][mb]) hold the ends of F and of B/BW, NAN until run;
 * NAN when an input has not run.  solver_eval and the V list scheduler,
 * which times each run as it commits it, both take it from here, so
 * their times agree to the bit.  Not for vocabulary passes. */
static inline double solver_asap_start(const sched_t *s, sched_op op, int d, double free_at, const double *end_f,
                                       const double *end_b)
{
    long m = s->n_micro, cell = (long)op.stage * m + op.mb;
    double ready = free_at, e;
    switch ((op_kind)op.kind) {
    case OP_F:
        if (op.stage > 0) {
            if (isnan(e = end_f[cell - m]))
                return NAN;
            ready = sched_later(ready, e + (s->stage_device[op.stage - 1] != d ? s->t_comm : 0));
        }
        return ready;
    case OP_B:
    case OP_BW:
        if (isnan(e = end_f[cell]))
            return NAN;
        ready = sched_later(ready, e);
        if (op.stage + 1 < s->n_stages) {
            if (isnan(e = end_b[cell + m]))
                return NAN;
            ready = sched_later(ready, e + (s->stage_device[op.stage + 1] != d ? s->t_comm : 0));
        }
        return ready;
    case OP_W:
        if (isnan(e = end_b[cell]))
            return NAN;
        return sched_later(ready, e);
    default:
        return NAN;
    }
}

/* The greedy list scheduler of v_shape.c on tmpl's placement (a V pair or
 * one stage per device) and costs, under limit[p] per device: runs its knob
 * settings (8 for V, 2 otherwise) and stores the fastest schedule in *out
 * (caller frees), its cost in *cost and its knobs in *knob_bits (bit 0 W
 * filling always, 1 first chunk preferred, 2 reserve for all).  Needs
 * dB <= 0 and dW <= 0 on every stage.  0, or -1 with err set. */
int solver_greedy_list(const sched_t *tmpl, const double *limit, sched_t **out, double *cost,
                       int *knob_bits, zb_err *err);

/* One knob setting of solver_greedy_list (bits as *knob_bits there),
 * run whole: its schedule in *out (caller frees) and its cost, what
 * solver_eval reports for it, in *cost.  solver_greedy_list gives up a
 * setting once it cannot beat the best before it; this one is how the
 * tests check that it only gives up on losers.  0, or -1 with err. */
int solver_greedy_list_knob(const sched_t *tmpl, const double *limit, int knob_bits, sched_t **out, double *cost,
                            zb_err *err);

/* What solver_greedy_list's runs on one template decided, kept so that
 * a call with another limit that would decide alike (the V variants of
 * one configuration differ only in their limits, often beyond what any
 * run reaches) reuses the result instead of running again.  The limit
 * is read in one comparison (an F's memory need against it); a limit
 * under which every need that passed still passes and every need that
 * was refused is still refused takes every decision alike, so all knob
 * runs, and their best, are the same. */
typedef struct solver_greedy_memo {
    const sched_t *tmpl; /* the template the runs were on (borrowed; its costs must not
                          * change while the memo is used); NULL: empty */
    sched_t *best;       /* copy of their best schedule (owned); NULL when every run was
                          * given up at gave_up_at */
    double gave_up_at;   /* with best NULL: the beat every run reached (a call with a beat
                          * no higher gives them all up alike) */
    double cost;         /* its cost */
    int knob_bits;       /* its knobs */
    double *admitted;    /* [p] per device, the largest need an F was admitted with */
    double *refused;     /* [p] per device, the smallest need an F was refused for */
} solver_greedy_memo;

/* solver_greedy_list, reusing memo's result when memo holds runs on tmpl
 * that limit would repeat decision for decision, else running and
 * storing them in memo (when memo is not NULL).  Same results and errors
 * as solver_greedy_list, except that a run is also given up once it
 * cannot cost less than beat (INFINITY: never): when every run is, *out
 * is NULL and *cost INFINITY. */
int solver_greedy_list_memo(const sched_t *tmpl, const double *limit, solver_greedy_memo *memo, double beat,
                            sched_t **out, double *cost, int *knob_bits, zb_err *err);

/* Frees what memo holds and empties it. */
void solver_greedy_memo_free(solver_greedy_memo *memo);

/* solver_v_costs (solver.h) with its greedy list runs kept in memo
 * across calls on the same template (the three variants of one
 * configuration) and its V patterns in patterns across templates (both
 * may be NULL).  A caller to whom an order costing beat or more is of no
 * use (the search: it would rank behind its label's best) passes that
 * cost (INFINITY: none): the greedy's runs are then given up there, and
 * when no order costs less than beat it returns 1 with *out NULL. */
int solver_v_costs_memo(const char *variant, const sched_t *tmpl, const double *mem_limit, solver_greedy_memo *memo,
                        v_pattern_cache *patterns, double beat, sched_t **out, zb_err *err);

/* What zb-auto's knob runs on one problem found, kept so that a call
 * with another limit that would decide alike reuses it (the four zb-auto
 * labels of a search configuration differ only in their limits, often
 * beyond what any run reaches), as solver_greedy_memo does for the V
 * solvers.  A run reads the limit only by comparing a stage's memory need
 * with it; limits under which every need that passed still passes and
 * every need refused is still refused take every decision of every run
 * alike.  What the runs do not decide (the lower bound that proves their
 * best optimal, and the two other candidates) reads the limit afresh; the
 * fallback order is fixed by its warm-ups, so its cost is kept with them
 * and not simulated again for the same warm-ups. */
typedef struct solver_zb_auto_memo {
    const stage_cost *cost; /* the costs the runs read (borrowed; they must not change while
                             * the memo is used); NULL: empty */
    int p, m;               /* the problem's shape */
    double t_comm;          /* and communication time */
    double *admitted;       /* [p] per stage, the largest need a limit admitted */
    double *refused;        /* [p] per stage, the smallest need a limit refused */
    double best;            /* the runs' best largest stage span; -1 when no setting fit */
    int best_bits;          /* its knob setting (allow_bubble << 2 | prioritize_b << 1 |
                             * no_bubble_greedy) */
    int *n_ops;             /* [p] with best >= 0: its ops per stage */
    uint8_t *order;         /* [p][3m] and their kinds in order */
    int *fb_warmup;         /* [p] the fallback order's warm-up per stage, the last
                             * simulated on these costs (it fixes the order), or NULL */
    double fb_cost;         /* with fb_warmup: that order's cost */
} solver_zb_auto_memo;

/* solver_zb_auto_costs (solver.h), its knob runs taken from memo when
 * memo holds runs on pr's costs that pr's limit would repeat, else run
 * and kept there (memo may be NULL).  Same results and errors. */
int solver_zb_auto_costs_memo(const solver_problem *pr, solver_zb_auto_memo *memo, sched_t **out, double *cost,
                              zb_err *err);

/* Frees what memo holds and empties it. */
void solver_zb_auto_memo_free(solver_zb_auto_memo *memo);

/* The zero-bubble authors' adaptive V-ZB scheduler (v_adaptive.c, a port
 * of v_schedule.py PipelineGraph.get_v_schedule) on tmpl's V placement and
 * costs (the same on every stage), under limit[p] per device.  Stores the
 * best of its four knob settings in *out (caller frees) and its largest
 * stage span in *cost.  0, or -1 with err set when every setting fails
 * (the authors' code would assert: small m, tight limit) or out of memory. */
int v_adaptive_sched(const sched_t *tmpl, const double *limit, sched_t **out, double *cost, zb_err *err);

/* 1 when every device's activation peak in s (its lane's, sched_lane_peak:
 * the order fixes it) stays within limit[d], with the list schedulers'
 * rounding tolerance (v_shape.c); else 0.  No simulation. */
int solver_lanes_fit(const sched_t *s, const double *limit);

/* A lower bound on stage s's span in any schedule of pr (bound.c): the
 * stage's busy time plus the idle its memory limit forces before its first
 * B and after its last F.  Valid for one stage per device. */
double solver_stage_lower_bound(const solver_problem *pr, int s);

/* --- shared by the files of the search (search.c, search_annotate.c) --- */

#include "solver/search.h"

/* Recompute level (COST_RC_*) of stage i of s under a candidate's or a
 * config's setting: by device (the first rc_devices), or by stage (the
 * first rc_stages in model order, the last rc_mlp of them at the MLP
 * level only; both SEARCH_RC_ALL: every stage at the MLP level). */
int search_rc_level(const sched_t *s, int i, int rc_devices, int rc_stages, int rc_mlp);

/* The cost options of the search's candidates: o's flags, layer split
 * split, ZeRO-1 over o->zero1_dp times dp replicas, devices_per_node
 * pipeline devices per node (0: all), the runtime reserve (none on a CPU
 * device). */
void search_cost_options(const search_options *o, cost_split split, int dp, int devices_per_node, cost_options *c);

/* --- pruning the search's candidates (search_prune.c) --- */

/* The ranking's time bucket of ms: times in one bucket (within
 * SEARCH_TIME_RESOLUTION) tie; log-spaced, so the comparison is
 * transitive. */
long search_time_bucket(double ms);

/* Labels of one depth the pruning table holds (a depth builds about 35). */
#define SEARCH_PRUNE_LABELS 64

/* One label's best fit so far at the depth being searched. */
typedef struct search_prune_slot {
    char label[40];                    /* the candidates' label ("zb-auto max") */
    double best_ms[SEARCH_N_TARGETS];  /* per target that can run one of them, the
                                        * fastest time under its step rule (async_ms
                                        * or sync_ms); INFINITY: none fits yet */
    double oom_peak[SEARCH_N_TARGETS]; /* per target, the smallest peak of those that
                                        * exceed the limit; INFINITY: none yet */
} search_prune_slot;

/* Each label's best of the depth being searched, what a candidate's lower
 * bound is compared with before it is built. */
typedef struct search_prune {
    int n;                                       /* slots in use */
    search_prune_slot slot[SEARCH_PRUNE_LABELS]; /* [n], in the order first seen */
} search_prune;

/* Forgets every label (a new depth or layout starts). */
void search_prune_clear(search_prune *p);

/* Records candidate c (simulated; its status, label, targets, async_ms,
 * sync_ms and peak_bytes set): when it fits, each target in c->targets
 * keeps the smaller of its best and c's time under its rule; when it
 * exceeds the limit, the smaller of its smallest peak and c's.  Labels
 * beyond the table's size are not recorded (they are then never
 * pruned). */
void search_prune_note(search_prune *p, const search_candidate *c);

/* 1 when a candidate of label that the targets in mask targets can run,
 * whose time cannot be below bound_ms if it fits and whose peak cannot be
 * below peak_bytes, would rank behind that label's best under every one
 * of those targets' rules, so building it changes no label's best: for
 * each target, the label has a fit and the bound is in a later time
 * bucket than its best, or the peak bound exceeds mem_limit (it cannot
 * fit) and the label has a fit or an OOM of a smaller peak.  0 otherwise
 * (a bound that is not positive proves nothing). */
int search_prune_loses(search_prune *p, const char *label, unsigned targets, double bound_ms, double peak_bytes,
                       double mem_limit);

/* A time from which on every time loses as search_prune_loses rules: a
 * fit of label (targets as there) whose time is at least this would rank
 * behind the label's best under every one of those targets' rules.
 * INFINITY when no time does (a target without a fit of label). */
double search_prune_lose_ms(search_prune *p, const char *label, unsigned targets);

#endif
