/*
 * test_ilp_small.c: the ILP's tightenings for small pipelines under tight
 * memory limits (solver/ilp.c: memory-forced and window-forced
 * precedences, the memory release bound, latest ends from successors and
 * the R <= zb-auto - 1 cutoff for integer times).
 *
 * Two kinds of checks:
 *   - exactness: on pipelines small enough to enumerate (p = 2, m = 4;
 *     p = 3, m = 3 or 4), every per-device order of F, B, W that keeps
 *     same-kind ops in micro-batch order (the model's symmetry breaking) is
 *     simulated by solver_eval; the best one that fits the limit must equal
 *     the ILP's proven optimum.  zb-auto happens to be optimal on all of
 *     these (a scan of p=2, m<=5 and p=3, m<=4 over ten cost ratios found
 *     no exception), so this checks that no proof claims a wrong value;
 *   - a cut that removed a better-than-zb-auto optimum shows in
 *     still_beats_heuristic (p=4, m=6, 3 M_B: 138 < 140; the cutoff hides
 *     the heuristic's schedule, so GLPK must find 138 itself): making the
 *     B lag one micro-batch too short, for one, fails it;
 *   - proofs: p=4, m=8 at 2 M_B (open before) must now be proven.
 * About 1 s in a plain build.
 */
#include <string.h>

#include "tests/solver/solver_check.h"

/* One enumeration: the problem, the schedule being filled and the best. */
typedef struct enum_state {
    int p, m;             /* stages = devices, micro-batches */
    double limit;         /* activation limit per device */
    sched_t *s;           /* the schedule whose lists are being enumerated */
    double best;          /* least cost of a complete schedule within the limit */
    long n_eval;          /* schedules simulated */
    int push_failed;      /* sched_push ran out of memory (checked once at the end:
                             Check's asserts write to a pipe, too slow here) */
} enum_state;

static void enum_eval(enum_state *st)
{
    solver_eval_result r;
    double peak[8];
    zb_err err = { { 0 } };
    st->n_eval++;
    if (solver_eval(st->s, &r, peak, &err) != 0)
        return; /* deadlock: not a schedule */
    for (int d = 0; d < st->p; d++)
        if (peak[d] > st->limit * (1 + 1e-12))
            return;
    if (r.cost < st->best)
        st->best = r.cost;
}

/* Fills device d's list from position n_f + n_b + n_w on, then the next
 * device's; F, B, W of one micro-batch in that order, same kinds in
 * micro-batch order.  Orders whose running memory (dF = 2, dB = dW = -1)
 * passes the limit are cut at once: enum_eval checks the peaks again. */
static void enum_dev(enum_state *st, int d, int n_f, int n_b, int n_w)
{
    if (d < st->p && 2 * n_f - n_b - n_w > st->limit * (1 + 1e-12))
        return;
    if (d == st->p) {
        enum_eval(st);
        return;
    }
    sched_lane *lane = &st->s->dev[d];
    if (n_w == st->m) {
        enum_dev(st, d + 1, 0, 0, 0);
        return;
    }
    int at = n_f + n_b + n_w;
    if (n_f < st->m) {
        lane->n_ops = at;
        st->push_failed |= sched_push(st->s, d, OP_F, d, n_f) != 0;
        enum_dev(st, d, n_f + 1, n_b, n_w);
    }
    if (n_b < n_f) {
        lane->n_ops = at;
        st->push_failed |= sched_push(st->s, d, OP_B, d, n_b) != 0;
        enum_dev(st, d, n_f, n_b + 1, n_w);
    }
    if (n_w < n_b) {
        lane->n_ops = at;
        st->push_failed |= sched_push(st->s, d, OP_W, d, n_w) != 0;
        enum_dev(st, d, n_f, n_b, n_w + 1);
    }
}

/* Runs the ILP (60 s limit) on p stages, m micro-batches, dF = 2, dB = dW =
 * -1, limit_mb micro-batches of M_B per device; checks the answer is valid,
 * within the limit and proven optimal; returns it (caller frees). */
static sched_t *ilp_proven(int p, int m, double f, double b, double w, double c, double limit_mb,
                           double *heur_cost)
{
    double limit[8];
    for (int d = 0; d < p; d++)
        limit[d] = 2 * limit_mb;
    gen_params gp = { .stages = p, .microbatches = m, .chunks = 1, .t_f = f, .t_b = b, .t_w = w,
                      .t_comm = c, .m_f = 2, .m_b = -1, .m_w = -1, .mem_limit = limit,
                      .time_limit = 60 };
    sched_t *s = NULL;
    zb_err err = { { 0 } };
    ck_assert_msg(solver_ilp(&gp, &s, &err) == 0, "%s", err.msg);
    sim_result r = { 0 };
    check_valid_sim(s, &r);
    check_peaks(&r, limit, p);
    ck_assert_msg(meta_num(s, "optimal") == 1, "p=%d m=%d limit %g: not proven optimal (cost %g, bound %g)", p,
                  m, limit_mb, meta_num(s, "cost"), meta_num(s, "bound"));
    ck_assert(fabs(meta_num(s, "cost") - r.cost) <= 1e-9 * r.cost);
    ck_assert(fabs(meta_num(s, "bound") - r.cost) <= 1e-9 * r.cost);
    ck_assert(meta_num(s, "gap") == 0);
    *heur_cost = meta_num(s, "heuristic_cost");
    ck_assert(r.cost <= *heur_cost * (1 + 1e-12));
    sim_result_free(&r);
    return s;
}

/* The ILP's optimum equals the enumerated one. */
static void check_against_enumeration(int p, int m, double f, double b, double w, double c, double limit_mb)
{
    double hc;
    sched_t *s = ilp_proven(p, m, f, b, w, c, limit_mb, &hc);
    enum_state st = { .p = p, .m = m, .limit = 2 * limit_mb, .best = INFINITY };
    st.s = sched_clone(s);
    ck_assert_ptr_nonnull(st.s);
    enum_dev(&st, 0, 0, 0, 0);
    ck_assert(!st.push_failed);
    ck_assert_msg(st.n_eval > 1 && isfinite(st.best), "nothing enumerated");
    ck_assert_msg(fabs(st.best - meta_num(s, "cost")) <= 1e-9 * st.best,
                  "p=%d m=%d T=%g,%g,%g,%g limit %g: ILP %g, enumeration %g over %ld schedules", p, m, f, b, w, c,
                  limit_mb, meta_num(s, "cost"), st.best, st.n_eval);
    sched_free(st.s);
    sched_free(s);
}

START_TEST(matches_enumeration)
{
    /* 1.5 M_B: F(j+1) waits for B(j), F(j+2) for W(j); 2 M_B: F(j+2)
     * waits for B(j), F(j+3) for W(j); 3 M_B: lags 3 and 5. */
    static const double costs[][4] = { { 1, 1, 1, 0 }, { 5, 6, 4, 1 }, { 2, 3, 1, 2 } };
    for (int k = 0; k < 3; k++) {
        const double *t = costs[k];
        check_against_enumeration(2, 4, t[0], t[1], t[2], t[3], 1.5);
        check_against_enumeration(2, 4, t[0], t[1], t[2], t[3], 2);
        check_against_enumeration(2, 4, t[0], t[1], t[2], t[3], 3);
        check_against_enumeration(3, 3, t[0], t[1], t[2], t[3], 1.5);
        check_against_enumeration(3, 3, t[0], t[1], t[2], t[3], 2);
    }
    /* one step up, where the model needs the search */
    check_against_enumeration(3, 4, 5, 6, 4, 1, 1.5);
    /* non-integer times: no cutoff, the heuristic is the incumbent */
    check_against_enumeration(2, 4, 1.5, 1.25, 0.75, 0.5, 2);
    check_against_enumeration(3, 3, 1.5, 1.25, 0.75, 0.5, 2);
}
END_TEST

/* Open before the memory-forced precedences and the cutoff (bound 33 vs
 * 41 and 183 vs 235 after 20 s); now proven. */
START_TEST(proves_tight_p4_m8)
{
    double hc;
    sched_t *s = ilp_proven(4, 8, 1, 1, 1, 0, 2, &hc);
    ck_assert(meta_num(s, "cost") == 41);
    ck_assert_msg(meta_num(s, "seconds") < 30, "took %g s", meta_num(s, "seconds"));
    sched_free(s);
    s = ilp_proven(4, 8, 5, 6, 4, 1, 2, &hc);
    ck_assert(meta_num(s, "cost") == 235);
    sched_free(s);
}
END_TEST

/* zb-auto 140, optimum 138 (p=4, m=6, 3 M_B): with integer times the
 * model only admits R <= 139, so GLPK has to find 138 without the warm
 * start. */
START_TEST(still_beats_heuristic)
{
    double hc;
    sched_t *s = ilp_proven(4, 6, 5, 6, 4, 1, 3, &hc);
    ck_assert(hc == 140);
    ck_assert(meta_num(s, "cost") == 138);
    sched_free(s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("ilp_small");
    TCase *tc = tcase_create("ilp_small");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, matches_enumeration);
    tcase_add_test(tc, proves_tight_p4_m8);
    tcase_add_test(tc, still_beats_heuristic);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
