/*
 * test_vshape.c: V-Min, V-Half and V-ZB (solver/v_shape.c).  Each schedule
 * must be valid (real validator), V-placed, within its limit on every
 * device (real simulator), and the variants must trade memory for bubble:
 * peak(V-Min) <= peak(V-Half) <= peak(V-ZB) <= p M_B (the 1F1B peak) and
 * bubble(V-Min) >= bubble(V-Half) >= bubble(V-ZB).  A caller's limit caps
 * the variant's own; a limit below one micro-batch's activation is an
 * error.  Cases up to p=16, m=48: well under a second.
 */
#include <stdint.h>
#include <string.h>

#include "solver/solver_internal.h"
#include "tests/common/sched_same.h"
#include "tests/solver/solver_check.h"

typedef int (*v_fn)(const gen_params *, sched_t **, zb_err *);
static const v_fn fns[3] = { solver_v_min, solver_v_half, solver_v_zb };

static gen_params params(int p, int m, double f, double b, double w, double c)
{
    return (gen_params){ .stages = p, .microbatches = m, .chunks = 2, .t_f = f, .t_b = b, .t_w = w,
                         .t_comm = c, .m_f = 1, .m_b = -0.5, .m_w = -0.5, .mem_limit = NULL };
}

/* Runs the three variants on gp; checks each and the ordering. */
static void check_family(const gen_params *gp)
{
    int p = gp->stages;
    double bubble[3], peak[3];
    for (int v = 0; v < 3; v++) {
        sched_t *s = NULL;
        zb_err err = { { 0 } };
        ck_assert_msg(fns[v](gp, &s, &err) == 0, "variant %d: %s", v, err.msg);
        ck_assert_int_eq(s->n_stages, 2 * p);
        for (int d = 0; d < p; d++) {
            ck_assert_int_eq(s->stage_device[d], d);
            ck_assert_int_eq(s->stage_device[2 * p - 1 - d], d);
        }
        sim_result sr = { 0 };
        check_valid_sim(s, &sr);
        ck_assert(s->mem_limit != NULL);
        check_peaks(&sr, s->mem_limit, p);
        /* The variant's own limit, in whole-model micro-batches of 2 dF. */
        int mbs = v == 2 ? p : v == 1 ? (p + 2) / 2 : (p + 4) / 3;
        ck_assert_msg(sr.peak_mem <= 2.0 * mbs * gp->m_f + 1e-9, "variant %d peak %g", v, sr.peak_mem);
        bubble[v] = sr.bubble_rate;
        peak[v] = sr.peak_mem;
        sim_result_free(&sr);
        sched_free(s);
    }
    ck_assert_msg(peak[0] <= peak[1] && peak[1] <= peak[2], "peaks %g %g %g", peak[0], peak[1], peak[2]);
    ck_assert_msg(bubble[0] >= bubble[1] - 1e-12 && bubble[1] >= bubble[2] - 1e-12,
                  "bubbles %g %g %g", bubble[0], bubble[1], bubble[2]);
    ck_assert_msg(peak[0] < peak[2], "V-Min saves no memory (%g vs %g)", peak[0], peak[2]);
}

START_TEST(unit_costs)
{
    gen_params gp = params(4, 8, 1, 1, 1, 0);
    check_family(&gp);
    gp = params(8, 32, 1, 1, 1, 0);
    check_family(&gp);
}
END_TEST

START_TEST(profiled_costs)
{
    /* Table 8's per-chunk profile for 6.2B on 16 GPUs (us). */
    gen_params gp = params(16, 48, 14407, 14380, 9676, 1610);
    check_family(&gp);
    gp = params(6, 18, 5, 6, 4, 1);
    check_family(&gp);
}
END_TEST

/* V-ZB with T_F = T_B = T_W and no comm has no bubble (the paper's claim),
 * at the 1F1B peak. */
START_TEST(vzb_zero_bubble)
{
    gen_params gp = params(4, 12, 1, 1, 1, 0);
    sched_t *s = NULL;
    zb_err err = { { 0 } };
    ck_assert_msg(solver_v_zb(&gp, &s, &err) == 0, "%s", err.msg);
    sim_result sr = { 0 };
    check_valid_sim(s, &sr);
    ck_assert_msg(sr.bubble_rate < 0.02, "bubble %g", sr.bubble_rate);
    ck_assert(sr.peak_mem <= 2.0 * 4 * gp.m_f);
    sim_result_free(&sr);
    sched_free(s);
}
END_TEST

/* With T_F = T_B = T_W the paper's claims hold roughly (its asymptotic
 * figures, B = 1F1B's bubble (p-1)/(m+p-1)): V-Half about B/2, V-Min about
 * 2B/3, at half and a third of 1F1B's memory. */
START_TEST(beats_1f1b_unit)
{
    gen_params gp = params(8, 32, 1, 1, 1, 0);
    double b_1f1b = 7.0 / 39.0, bubble[2];
    for (int v = 0; v < 2; v++) {
        sched_t *s = NULL;
        zb_err err = { { 0 } };
        ck_assert_msg(fns[v](&gp, &s, &err) == 0, "%s", err.msg);
        sim_result sr = { 0 };
        check_valid_sim(s, &sr);
        bubble[v] = sr.bubble_rate;
        sim_result_free(&sr);
        sched_free(s);
    }
    ck_assert_msg(bubble[0] < 0.75 * b_1f1b, "V-Min bubble %g vs 1F1B %g", bubble[0], b_1f1b);
    ck_assert_msg(bubble[1] < 0.55 * b_1f1b, "V-Half bubble %g vs 1F1B %g", bubble[1], b_1f1b);
}
END_TEST

START_TEST(caller_limit)
{
    gen_params gp = params(8, 24, 1, 1, 1, 0);
    double limit[8] = { 4, 4, 4, 4, 3, 3, 2, 2 };
    gp.mem_limit = limit;
    for (int v = 0; v < 3; v++) {
        sched_t *s = NULL;
        zb_err err = { { 0 } };
        ck_assert_msg(fns[v](&gp, &s, &err) == 0, "%s", err.msg);
        sim_result sr = { 0 };
        check_valid_sim(s, &sr);
        check_peaks(&sr, limit, 8);
        sim_result_free(&sr);
        sched_free(s);
    }
    limit[5] = 1.5; /* below 2 dF */
    sched_t *s = NULL;
    zb_err err = { { 0 } };
    ck_assert_int_eq(solver_v_half(&gp, &s, &err), -1);
    ck_assert_ptr_null(s);
    ck_assert_msg(strstr(err.msg, "device 5") && strstr(err.msg, "below"), "%s", err.msg);
    gp.mem_limit = NULL;
    gp.m_b = 0.5; /* deltas must sum to 0 with dB <= 0 */
    ck_assert_int_eq(solver_v_zb(&gp, &s, &err), -1);
}
END_TEST

/* A template of p devices and m micro-batches, V-placed (vshape) or one
 * stage per device, with stage costs drawn from *rng (uneven stages,
 * dB and dW freeing what F took). */
static sched_t *uneven_template(int p, int m, int vshape, uint64_t *rng)
{
    int S = vshape ? 2 * p : p;
    sched_t *tmpl = sched_new(p, m, S);
    ck_assert_ptr_nonnull(tmpl);
    if (vshape)
        sched_place_v(tmpl);
    else
        sched_place_interleaved(tmpl);
    for (int i = 0; i < S; i++) {
        *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(*rng >> 11) / 9007199254740992.0;
        tmpl->cost[i] = (stage_cost){ 0.7 + u, 1.3 + 0.6 * u, 0.5 + 0.4 * (1 - u), 1 + u, -0.6 * (1 + u),
                                      -0.4 * (1 + u) };
    }
    tmpl->t_comm = 0.05;
    return tmpl;
}

/* The list scheduler gives a knob setting up once it cannot beat the best
 * setting before it, and reports the cost it timed op by op: every
 * setting run whole (solver_greedy_list_knob) must cost what the
 * evaluator says, the best of them what solver_greedy_list reports, and
 * the first to reach it be the knobs it names.  V and one stage per
 * device, uneven stages, limits from tight to none. */
START_TEST(greedy_gives_up_only_losers)
{
    uint64_t rng = 99;
    int cases = 0;
    for (int vshape = 0; vshape <= 1; vshape++)
        for (int p = 3; p <= 8; p += 5)
            for (double frac = 0.34; frac <= 1.0; frac += 0.33) {
                int m = 3 * p;
                sched_t *tmpl = uneven_template(p, m, vshape, &rng);
                double limit[8];
                for (int d = 0; d < p; d++)
                    limit[d] = frac * m * (vshape ? 4 : 2) + 4; /* room for a few to all micro-batches */
                sched_t *best = NULL;
                double cost = NAN;
                int bits = -1;
                zb_err err = { { 0 } };
                ck_assert_msg(solver_greedy_list(tmpl, limit, &best, &cost, &bits, &err) == 0, "%s", err.msg);
                double least = INFINITY;
                int first = -1;
                for (int k = 0; k < (vshape ? 8 : 2); k++) {
                    sched_t *s = NULL;
                    double c = NAN;
                    ck_assert_msg(solver_greedy_list_knob(tmpl, limit, k, &s, &c, &err) == 0, "%s", err.msg);
                    solver_eval_result ev;
                    ck_assert_msg(solver_eval(s, &ev, NULL, &err) == 0, "%s", err.msg);
                    ck_assert_msg(ev.cost == c, "p=%d knobs %d: timed %.17g, evaluated %.17g", p, k, c, ev.cost);
                    if (c < least) {
                        least = c;
                        first = k;
                    }
                    sched_free(s);
                }
                ck_assert_msg(cost == least && bits == first, "p=%d v=%d: best %.17g (knobs %d), whole runs %.17g (%d)",
                              p, vshape, cost, bits, least, first);
                sched_free(best);
                sched_free(tmpl);
                cases++;
            }
    ck_assert_int_eq(cases, 2 * 2 * 3);
}
END_TEST

/* A V solver given a cost to beat (solver_v_costs_memo's beat) answers
 * as without it when its answer costs less, and with nothing (1) when it
 * does not; a greedy memo whose runs were all given up answers a call
 * with a beat no higher (again nothing) and runs again for a higher one
 * (the answer without a beat).  Uneven stages, limits from tight to
 * none, the three variants. */
START_TEST(beat_gives_up_only_what_loses)
{
    static const char *const vf[] = { "v-min", "v-half", "v-zb" };
    uint64_t rng = 7;
    int cases = 0;
    for (int p = 3; p <= 8; p += 5)
        for (double frac = 0.34; frac <= 1.0; frac += 0.33) {
            int m = 3 * p;
            sched_t *tmpl = uneven_template(p, m, 1, &rng);
            double limit[8];
            for (int d = 0; d < p; d++)
                limit[d] = frac * m * 4 + 4;
            for (int v = 0; v < 3; v++) {
                zb_err err = { { 0 } };
                sched_t *whole = NULL, *s = NULL;
                ck_assert_msg(solver_v_costs_memo(vf[v], tmpl, limit, NULL, NULL, INFINITY, &whole, &err) == 0, "%s",
                              err.msg);
                solver_eval_result ev;
                ck_assert_msg(solver_eval(whole, &ev, NULL, &err) == 0, "%s", err.msg);
                double c = ev.cost;
                ck_assert_int_eq(solver_v_costs_memo(vf[v], tmpl, limit, NULL, NULL, c * (1 + 1e-6), &s, &err), 0);
                ck_assert_msg(sched_same_lanes(s, whole), "p=%d %s: another answer under a beat it meets", p, vf[v]);
                sched_free(s);
                s = NULL;
                solver_greedy_memo memo = { 0 };
                ck_assert_int_eq(solver_v_costs_memo(vf[v], tmpl, limit, &memo, NULL, c * (1 - 1e-6), &s, &err), 1);
                ck_assert_ptr_null(s);
                ck_assert_int_eq(solver_v_costs_memo(vf[v], tmpl, limit, &memo, NULL, c * 0.5, &s, &err), 1);
                ck_assert_int_eq(solver_v_costs_memo(vf[v], tmpl, limit, &memo, NULL, INFINITY, &s, &err), 0);
                ck_assert_msg(sched_same_lanes(s, whole), "p=%d %s: the memo answered for a higher beat", p, vf[v]);
                solver_greedy_memo_free(&memo);
                sched_free(s);
                sched_free(whole);
                cases++;
            }
            sched_free(tmpl);
        }
    ck_assert_int_eq(cases, 2 * 3 * 3);
}
END_TEST

/* The V-Min and V-Half patterns' squeeze moves each op by its device's
 * kept memory levels (first_fit_level); the authors try and cost every
 * free slot.  Both must pick the same slot for every move, on shapes
 * from one device up to p=32 and from one micro-batch up, and the result
 * must be a valid schedule. */
START_TEST(pattern_levels_match_trials)
{
    static const int ps[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 32 };
    static const int ms[] = { 1, 2, 3, 5, 8, 13, 24, 48, 64 };
    int cases = 0;
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++)
        for (size_t k = 0; k < sizeof ms / sizeof *ms; k++)
            for (int half = 0; half < 2; half++) {
                int p = ps[i], m = ms[k];
                sched_t *tmpl = sched_new(p, m, 2 * p), *s = NULL, *plain = NULL;
                ck_assert_ptr_nonnull(tmpl);
                sched_place_v(tmpl);
                sched_set_costs(tmpl, 1, 1, 1, 0);
                sched_set_mem(tmpl, 1, -0.5, -0.5);
                ck_assert_msg(v_pattern_sched_checked(tmpl, half, &s) == 0, "p=%d m=%d half=%d: a move differs", p,
                              m, half);
                ck_assert_int_eq(v_pattern_sched(tmpl, half, &plain), 0);
                ck_assert_msg(sched_same_lanes(s, plain), "p=%d m=%d half=%d: checked and plain differ", p, m, half);
                zb_err err = { { 0 } };
                ck_assert_msg(sched_validate(s, &err) == 0, "p=%d m=%d half=%d: %s", p, m, half, err.msg);
                sched_free(s);
                sched_free(plain);
                sched_free(tmpl);
                cases++;
            }
    ck_assert_int_eq(cases, 12 * 9 * 2);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("vshape");
    TCase *tc = tcase_create("v");
    tcase_add_test(tc, unit_costs);
    tcase_add_test(tc, profiled_costs);
    tcase_add_test(tc, vzb_zero_bubble);
    tcase_add_test(tc, beats_1f1b_unit);
    tcase_add_test(tc, caller_limit);
    tcase_add_test(tc, greedy_gives_up_only_losers);
    tcase_add_test(tc, beat_gives_up_only_what_loses);
    tcase_add_test(tc, pattern_levels_match_trials);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
