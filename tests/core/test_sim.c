/*
 * test_sim.c: the simulator on small cases computed by hand (exact starts
 * and ends, cost, bubble rate, peak memory, T_comm), the memory curve, the
 * measured-time summary, a peak set by a device's last op, and the paper's
 * 1F1B bubble formula.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "src/sim.h"
#include "src/validate.h"
#include "tests/core/fixtures.h"

#define EPS 1e-12

/* p=2, m=2, fused 1F1B, T_F=1, T_B=T_W=1 (BW=2), T_comm=0.5.
 * device 0: F0 [0,1]  F1 [1,2]  BW0 [5,7]  BW1 [8,10]
 * device 1: F0 [1.5,2.5]  BW0 [2.5,4.5]  F1 [4.5,5.5]  BW1 [5.5,7.5]
 * cost 10 (device 0), busy 6, bubble 0.4, makespan 10; memory with dF=2,
 * dBW=-2: device 0 peaks at 4, device 1 at 2. */
START_TEST(hand_computed_1f1b_with_comm)
{
    sched_t *s = fixture_1f1b(2, 2, 0);
    sched_set_costs(s, 1, 1, 1, 0.5);
    sim_result r;
    zb_err err = { "" };
    ck_assert_int_eq(sched_validate(s, &err), 0);
    ck_assert_msg(sim_run(s, &r, &err) == 0, "%s", err.msg);
    const double s0[] = { 0, 1, 5, 8 }, e0[] = { 1, 2, 7, 10 };
    const double s1[] = { 1.5, 2.5, 4.5, 5.5 }, e1[] = { 2.5, 4.5, 5.5, 7.5 };
    for (int i = 0; i < 4; i++) {
        ck_assert_double_eq_tol(r.dev[0].start[i], s0[i], EPS);
        ck_assert_double_eq_tol(r.dev[0].end[i], e0[i], EPS);
        ck_assert_double_eq_tol(r.dev[1].start[i], s1[i], EPS);
        ck_assert_double_eq_tol(r.dev[1].end[i], e1[i], EPS);
    }
    ck_assert_double_eq_tol(r.dev[0].span, 10, EPS);
    ck_assert_double_eq_tol(r.dev[1].span, 6, EPS);
    ck_assert_double_eq_tol(r.dev[1].first_start, 1.5, EPS);
    ck_assert_double_eq_tol(r.cost, 10, EPS);
    ck_assert_double_eq_tol(r.busy, 6, EPS);
    ck_assert_double_eq_tol(r.bubble_rate, 0.4, EPS);
    ck_assert_double_eq_tol(r.makespan, 10, EPS);
    ck_assert_double_eq_tol(r.dev[0].peak_mem, 4, EPS);
    ck_assert_double_eq_tol(r.dev[1].peak_mem, 2, EPS);
    ck_assert_double_eq_tol(r.dev[0].end_mem, 0, EPS);
    ck_assert_double_eq_tol(r.peak_mem, 4, EPS);
    ck_assert_int_eq(r.peak_device, 0);

    sim_mem_point *pt;
    int n;
    ck_assert_int_eq(sim_mem_curve(s, &r, 0, &pt, &n, &err), 0);
    const double t[] = { 0, 0, 1, 7, 10 }, mem[] = { 0, 2, 4, 2, 0 };
    ck_assert_int_eq(n, 5);
    for (int i = 0; i < n; i++) {
        ck_assert_double_eq_tol(pt[i].t, t[i], EPS);
        ck_assert_double_eq_tol(pt[i].mem, mem[i], EPS);
    }
    free(pt);
    ck_assert_int_eq(sim_mem_curve(s, &r, 2, &pt, &n, &err), -1);
    sim_result_free(&r);
    sched_free(s);
}
END_TEST

/* Split B/W with different costs on one device pair, no comm:
 * T_F=1, T_B=2, T_W=3, p=2, m=1.
 * device 0: F0 [0,1]                B0 [5,7]  W0 [7,10]
 * device 1: F0 [1,2]  B0 [2,4]  W0 [4,7]
 * cost: device 0 span 10, busy 6 -> bubble 0.4; device 1 span 6. */
START_TEST(hand_computed_split_bw)
{
    sched_t *s = fixture_1f1b(2, 1, 1);
    sched_set_costs(s, 1, 2, 3, 0);
    sched_set_mem(s, 3, -1, -2);
    sim_result r;
    zb_err err = { "" };
    ck_assert_int_eq(sched_validate(s, &err), 0);
    ck_assert_int_eq(sim_run(s, &r, &err), 0);
    ck_assert_double_eq_tol(r.dev[0].start[1], 4, EPS);
    ck_assert_double_eq_tol(r.dev[0].end[2], 9, EPS);
    ck_assert_double_eq_tol(r.dev[1].start[2], 4, EPS);
    ck_assert_double_eq_tol(r.cost, 9, EPS);
    ck_assert_double_eq_tol(r.busy, 6, EPS);
    ck_assert_double_eq_tol(r.bubble_rate, 1.0 / 3.0, EPS);
    ck_assert_double_eq_tol(r.dev[1].peak_mem, 3, EPS);
    ck_assert_double_eq_tol(r.dev[1].end_mem, 0, EPS);
    sim_result_free(&r);
    sched_free(s);
}
END_TEST

/* The paper's 1F1B bubble: (p-1)(T_F+T_B+T_W) idle out of a span of
 * m(T_F+T_B+T_W) + (p-1)(T_F+T_B+T_W) on the critical device. */
START_TEST(one_f_one_b_matches_paper)
{
    const int p = 4, m = 8;
    sched_t *s = fixture_1f1b(p, m, 0);
    sched_set_costs(s, 1, 1, 1, 0);
    sim_result r;
    zb_err err = { "" };
    ck_assert_int_eq(sim_run(s, &r, &err), 0);
    double per = 3.0;
    ck_assert_double_eq_tol(r.cost, (m + p - 1) * per, EPS);
    ck_assert_double_eq_tol(r.bubble_rate, (p - 1) * per / ((m + p - 1) * per), EPS);
    /* 1F1B keeps p-d forwards in flight on device d (dF = 2 each). */
    for (int d = 0; d < p; d++)
        ck_assert_double_eq_tol(r.dev[d].peak_mem, 2.0 * (p - d), EPS);
    sim_result_free(&r);
    sched_free(s);
}
END_TEST

/* Stages on one device exchange data without T_comm (V placement). */
START_TEST(v_shape_same_device_no_comm)
{
    sched_t *s = fixture_v(1, 1); /* one device, stages 0 and 1 */
    sched_set_costs(s, 1, 1, 1, 100);
    sim_result r;
    zb_err err = { "" };
    ck_assert_int_eq(sched_validate(s, &err), 0);
    ck_assert_int_eq(sim_run(s, &r, &err), 0);
    ck_assert_double_eq_tol(r.cost, 6, EPS);
    ck_assert_double_eq_tol(r.bubble_rate, 0, EPS);
    sim_result_free(&r);
    sched_free(s);

    s = fixture_v(2, 1); /* comm applies only between devices */
    sched_set_costs(s, 1, 1, 1, 0.25);
    ck_assert_int_eq(sim_run(s, &r, &err), 0);
    /* F chain: d0 F@0 [0,1], d1 F@1 [1.25,2.25], d1 F@2 [2.25,3.25],
     * d0 F@3 [3.5,4.5], then d0 B@3 [4.5,5.5] W@3 [5.5,6.5]. */
    ck_assert_double_eq_tol(r.dev[0].start[1], 3.5, EPS);
    ck_assert_double_eq_tol(r.dev[1].start[1], 2.25, EPS);
    ck_assert_double_eq_tol(r.dev[0].start[2], 4.5, EPS);
    sim_result_free(&r);
    sched_free(s);
}
END_TEST

/* A device's peak must count its last op when that op raises memory.  With
 * complete schedules under the default deltas the last op frees memory, so
 * a peak taken before each addition would go unnoticed; here every op
 * allocates (dF=1, dB=0.5, dW=0.25, as when W materializes a weight
 * gradient), so each device peaks exactly at its last op, a W.
 * p=2, m=2, split 1F1B: each device runs 2 F, 2 B, 2 W: peak 3.5. */
static void check_peak_at_last_op(const sched_t *s, const sim_result *r)
{
    for (int d = 0; d < s->n_devices; d++) {
        const sched_lane *l = &s->dev[d];
        ck_assert_int_eq(l->ops[l->n_ops - 1].kind, OP_W);
        ck_assert_double_eq_tol(r->dev[d].peak_mem, 3.5, EPS);
        ck_assert_double_eq_tol(r->dev[d].end_mem, 3.5, EPS);
    }
    ck_assert_double_eq_tol(r->peak_mem, 3.5, EPS);
}

START_TEST(peak_includes_last_op)
{
    sched_t *s = fixture_1f1b(2, 2, 1);
    sched_set_mem(s, 1, 0.5, 0.25);
    sim_result r;
    zb_err err = { "" };
    ck_assert_int_eq(sched_validate(s, &err), 0);
    ck_assert_msg(sim_run(s, &r, &err) == 0, "%s", err.msg);
    check_peak_at_last_op(s, &r);
    /* The memory curve, built independently, tops out at the same peak. */
    for (int d = 0; d < s->n_devices; d++) {
        sim_mem_point *pt;
        int n;
        ck_assert_int_eq(sim_mem_curve(s, &r, d, &pt, &n, &err), 0);
        double top = 0;
        for (int i = 0; i < n; i++)
            top = pt[i].mem > top ? pt[i].mem : top;
        ck_assert_double_eq_tol(top, r.dev[d].peak_mem, EPS);
        free(pt);
    }
    sim_result_free(&r);

    /* Measured times take the same summary path. */
    for (int d = 0; d < s->n_devices; d++) {
        ck_assert_int_eq(sched_lane_alloc_times(s, d), 0);
        for (int i = 0; i < s->dev[d].n_ops; i++) {
            s->dev[d].start[i] = i;
            s->dev[d].end[i] = i + 1;
        }
    }
    ck_assert_int_eq(sim_measured(s, &r, &err), 0);
    check_peak_at_last_op(s, &r);
    sim_result_free(&r);

    /* One device, one op that allocates: the peak is that op alone. */
    sched_t *one = sched_new(1, 1, 1);
    sched_place_interleaved(one);
    sched_push(one, 0, OP_F, 0, 0);
    sched_push(one, 0, OP_BW, 0, 0);
    sched_set_mem(one, 2, 0.5, 0.5); /* BW = dB + dW = +1 */
    ck_assert_int_eq(sim_run(one, &r, &err), 0);
    ck_assert_double_eq_tol(r.dev[0].peak_mem, 3, EPS);
    sim_result_free(&r);
    sched_free(one);
    sched_free(s);
}
END_TEST

START_TEST(deadlock_is_an_error_not_a_crash)
{
    sched_t *s = fixture_1f1b(2, 2, 1);
    sched_op t = s->dev[1].ops[1];
    s->dev[1].ops[1] = s->dev[1].ops[2];
    s->dev[1].ops[2] = t;
    sim_result r;
    zb_err err = { "" };
    ck_assert_int_eq(sim_run(s, &r, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "deadlock"));
    sim_result_free(&r);
    sched_free(s);
}
END_TEST

START_TEST(measured_times_summary)
{
    sched_t *s = fixture_1f1b(2, 1, 0);
    for (int d = 0; d < 2; d++) {
        ck_assert_int_eq(sched_lane_alloc_times(s, d), 0);
        for (int i = 0; i < s->dev[d].n_ops; i++) {
            s->dev[d].start[i] = 10 + d + 3 * i;
            s->dev[d].end[i] = 10 + d + 3 * i + 2;
        }
    }
    sim_result r;
    zb_err err = { "" };
    ck_assert_int_eq(sim_measured(s, &r, &err), 0);
    ck_assert_double_eq_tol(r.dev[0].span, 5, EPS);
    ck_assert_double_eq_tol(r.busy, 4, EPS);
    ck_assert_double_eq_tol(r.cost, 5, EPS);
    ck_assert_double_eq_tol(r.makespan, 6, EPS);
    sim_result_free(&r);
    free(s->dev[1].start);
    free(s->dev[1].end);
    s->dev[1].start = s->dev[1].end = NULL;
    ck_assert_int_eq(sim_measured(s, &r, &err), -1);
    sched_free(s);
}
END_TEST

START_TEST(linear_in_ops)
{
    /* 64 x 1024 1F1B, ~200k ops: must finish fast even under sanitizers. */
    sched_t *s = fixture_1f1b(64, 1024, 1);
    sim_result r;
    zb_err err = { "" };
    ck_assert_int_eq(sched_op_count(s), 3L * 64 * 1024);
    ck_assert_int_eq(sched_validate(s, &err), 0);
    ck_assert_int_eq(sim_run(s, &r, &err), 0);
    /* With B and W split, B travels back at T_B alone: the critical
     * device idles (p-1)(T_F+T_B) instead of (p-1)(T_F+T_B+T_W). */
    ck_assert_double_eq_tol(r.cost, 1024 * 3.0 + 63 * 2.0, 1e-9);
    sim_result_free(&r);
    sched_free(s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("sim");
    TCase *tc = tcase_create("sim");
    tcase_add_test(tc, hand_computed_1f1b_with_comm);
    tcase_add_test(tc, hand_computed_split_bw);
    tcase_add_test(tc, one_f_one_b_matches_paper);
    tcase_add_test(tc, v_shape_same_device_no_comm);
    tcase_add_test(tc, peak_includes_last_op);
    tcase_add_test(tc, deadlock_is_an_error_not_a_crash);
    tcase_add_test(tc, measured_times_summary);
    tcase_add_test(tc, linear_in_ops);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
