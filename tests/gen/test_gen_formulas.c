/*
 * test_gen_formulas.c: every handcrafted generator against the closed-form
 * bubble and peak-memory formulas it is published with.
 *
 * Sources (see docs/generators.md): zero-bubble paper Table 2 for 1F1B,
 * ZB-H1 and ZB-H2 (and its authors' assertion for ZB-H2 with
 * communication), Megatron-LM's interleaved 1F1B bubble, the ZB-V claim
 * (zero bubble at peak p*M_B when T_F = T_B = T_W) and GPipe's m*M_B.
 * Memory: M_B = dF (held after a forward), M_W = dF + dB (held after B
 * until W).  Bubble = simulated cost - busy (the paper's largest per-device
 * span minus the compute time of that device).
 *
 * The formulas need T_W <= min(T_F, T_B); every cost set below satisfies it,
 * and one test shows the ZB-H1 formula failing when it does not.  Each case
 * is a few thousand ops; the whole file runs in well under a second.
 */
#include <math.h>
#include <stdlib.h>

#include "tests/gen/gen_check.h"

#define TOL 1e-9

/* Cost sets with T_W <= min(T_F, T_B), chosen exact in binary so that the
 * simulated times are exact. */
static const double cost_sets[][4] = {
    /* T_F, T_B, T_W, T_comm */
    { 1, 1, 1, 0 },
    { 3, 4, 2, 0 },
    { 2, 2, 1, 0 },
    { 5, 3, 3, 0 },
    { 4, 5, 1, 0 },
    { 3, 4, 2, 0.5 },
    { 2, 2, 1, 1 },
    { 5, 3, 3, 0.25 },
    { 4, 5, 1, 2 },
};
#define N_COST_SETS ((int)(sizeof cost_sets / sizeof cost_sets[0]))

/* Memory delta sets (dF, dB, dW), each summing to zero. */
static const double mem_sets[][3] = {
    { 2, -1, -1 },
    { 5, -3, -2 },
    { 34, -2, -32 }, /* the paper's per-layer M_B = 34h-ish vs M_W = 32h shape */
};
#define N_MEM_SETS ((int)(sizeof mem_sets / sizeof mem_sets[0]))

static const int shapes[][2] = {
    /* p, m (m >= 2p so that ZB-H2's warm-up fits) */
    { 2, 4 }, { 2, 7 }, { 3, 6 }, { 3, 10 }, { 4, 8 }, { 4, 13 }, { 8, 16 }, { 8, 27 },
};
#define N_SHAPES ((int)(sizeof shapes / sizeof shapes[0]))

static gen_params params_for(int shape, int cost, int mem)
{
    const double *c = cost_sets[cost];
    gen_params g = gen_check_params(shapes[shape][0], shapes[shape][1], 1, c[0], c[1], c[2],
                                    c[3]);
    g.m_f = mem_sets[mem][0];
    g.m_b = mem_sets[mem][1];
    g.m_w = mem_sets[mem][2];
    return g;
}

/* 1F1B: bubble (p-1)(T_F+T_B+T_W) without communication; device r holds
 * p-r activations, so the peak is p*M_B on device 0. */
START_TEST(test_1f1b_table2)
{
    int cost = _i;
    if (cost_sets[cost][3] != 0)
        return; /* the paper gives 1F1B's bubble without communication only */
    for (int sh = 0; sh < N_SHAPES; sh++)
        for (int mem = 0; mem < N_MEM_SETS; mem++) {
            gen_params g = params_for(sh, cost, mem);
            sim_result r;
            sched_t *s = gen_check_build(gen_1f1b, &g, &r);
            int p = g.stages;
            double want = (p - 1) * (g.t_f + g.t_b + g.t_w);
            ck_assert_msg(fabs(r.cost - r.busy - want) < TOL, "1f1b p=%d m=%d: bubble %g, want %g",
                          p, g.microbatches, r.cost - r.busy, want);
            ck_assert_double_eq_tol(r.peak_mem, p * g.m_f, TOL);
            for (int d = 0; d < p; d++)
                ck_assert_double_eq_tol(r.dev[d].peak_mem, (p - d) * g.m_f, TOL);
            sim_result_free(&r);
            sched_free(s);
        }
}
END_TEST

/* ZB-H1: bubble (p-1)(T_F+T_B-T_W); worker i (1-based) peaks at
 * (p-i+1)M_B + (i-1)M_W, so the overall peak is 1F1B's p*M_B. */
START_TEST(test_zb_h1_table2)
{
    int cost = _i;
    if (cost_sets[cost][3] != 0)
        return; /* Table 2 is without communication */
    for (int sh = 0; sh < N_SHAPES; sh++)
        for (int mem = 0; mem < N_MEM_SETS; mem++) {
            gen_params g = params_for(sh, cost, mem);
            sim_result r;
            sched_t *s = gen_check_build(gen_zb_h1, &g, &r);
            int p = g.stages;
            double m_b = g.m_f, m_w = g.m_f + g.m_b;
            double want = (p - 1) * (g.t_f + g.t_b - g.t_w);
            ck_assert_msg(fabs(r.cost - r.busy - want) < TOL,
                          "zb-h1 p=%d m=%d costs %g/%g/%g: bubble %g, want %g", p,
                          g.microbatches, g.t_f, g.t_b, g.t_w, r.cost - r.busy, want);
            for (int i = 1; i <= p; i++)
                ck_assert_msg(fabs(r.dev[i - 1].peak_mem - ((p - i + 1) * m_b + (i - 1) * m_w)) < TOL,
                              "zb-h1 p=%d worker %d: peak %g", p, i, r.dev[i - 1].peak_mem);
            ck_assert_double_eq_tol(r.peak_mem, p * m_b, TOL);
            sim_result_free(&r);
            sched_free(s);
        }
}
END_TEST

/* ZB-H2: bubble (p-1)(T_F+T_B+2T_comm-2T_W) (Table 2, and the authors'
 * efficiency.py asserts the T_comm form); worker i peaks at
 * (2p-2i+1)M_B + (2i-2)M_W, overall (2p-1)M_B. */
START_TEST(test_zb_h2_table2)
{
    int cost = _i;
    for (int sh = 0; sh < N_SHAPES; sh++)
        for (int mem = 0; mem < N_MEM_SETS; mem++) {
            gen_params g = params_for(sh, cost, mem);
            sim_result r;
            sched_t *s = gen_check_build(gen_zb_h2, &g, &r);
            int p = g.stages;
            double m_b = g.m_f, m_w = g.m_f + g.m_b;
            double want = (p - 1) * (g.t_f + g.t_b + 2 * g.t_comm - 2 * g.t_w);
            ck_assert_msg(fabs(r.cost - r.busy - want) < TOL,
                          "zb-h2 p=%d m=%d costs %g/%g/%g/%g: bubble %g, want %g", p,
                          g.microbatches, g.t_f, g.t_b, g.t_w, g.t_comm, r.cost - r.busy, want);
            for (int i = 1; i <= p; i++)
                ck_assert_msg(fabs(r.dev[i - 1].peak_mem -
                                   ((2 * p - 2 * i + 1) * m_b + (2 * i - 2) * m_w)) < TOL,
                              "zb-h2 p=%d worker %d: peak %g", p, i, r.dev[i - 1].peak_mem);
            ck_assert_double_eq_tol(r.peak_mem, (2 * p - 1) * m_b, TOL);
            sim_result_free(&r);
            sched_free(s);
        }
}
END_TEST

/* GPipe: bubble (p-1)(T_F+T_B+T_W+2T_comm), each device holds all m
 * activations at the turn: peak m*M_B everywhere. */
START_TEST(test_gpipe)
{
    int cost = _i;
    for (int sh = 0; sh < N_SHAPES; sh++) {
        gen_params g = params_for(sh, cost, 0);
        sim_result r;
        sched_t *s = gen_check_build(gen_gpipe, &g, &r);
        int p = g.stages, m = g.microbatches;
        double want = (p - 1) * (g.t_f + g.t_b + g.t_w + 2 * g.t_comm);
        ck_assert_msg(fabs(r.cost - r.busy - want) < TOL, "gpipe p=%d m=%d: bubble %g, want %g", p,
                      m, r.cost - r.busy, want);
        for (int d = 0; d < p; d++)
            ck_assert_double_eq_tol(r.dev[d].peak_mem, m * g.m_f, TOL);
        sim_result_free(&r);
        sched_free(s);
    }
}
END_TEST

/* Interleaved 1F1B with v chunks and per-chunk costs: bubble
 * (p-1)(T_F+T_B+T_W) without communication, i.e. Megatron's bubble
 * fraction (1/v)(p-1)/m of the ideal v*m*(T_F+T_B+T_W).  Device d holds
 * its warm-up forwards plus one: min(2(p-1-d) + (v-1)p + 1, v*m) chunk
 * activations, and all v*m when m == p (Megatron's all-warm-up case). */
START_TEST(test_interleaved_megatron)
{
    static const int cases[][3] = {
        /* p, m, v */
        { 2, 2, 2 }, { 2, 4, 2 }, { 2, 6, 3 }, { 4, 4, 2 }, { 4, 8, 2 }, { 4, 12, 3 },
        { 4, 8, 4 }, { 8, 16, 2 }, { 8, 24, 3 }, { 3, 9, 2 },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int cost = 0; cost < N_COST_SETS; cost++) {
            const double *c = cost_sets[cost];
            if (c[3] != 0)
                continue;
            int p = cases[k][0], m = cases[k][1], v = cases[k][2];
            gen_params g = gen_check_params(p, m, v, c[0], c[1], c[2], 0);
            sim_result r;
            sched_t *s = gen_check_build(gen_interleaved, &g, &r);
            ck_assert_int_eq(s->n_stages, v * p);
            double want = (p - 1) * (g.t_f + g.t_b + g.t_w);
            ck_assert_msg(fabs(r.cost - r.busy - want) < TOL,
                          "interleaved p=%d m=%d v=%d: bubble %g, want %g", p, m, v,
                          r.cost - r.busy, want);
            ck_assert_double_eq_tol((r.cost - r.busy) / (r.busy), (p - 1) / (double)(v * m), TOL);
            for (int d = 0; d < p; d++) {
                int held = 2 * (p - 1 - d) + (v - 1) * p + 1;
                if (held > v * m || m == p)
                    held = v * m;
                ck_assert_msg(fabs(r.dev[d].peak_mem - held * g.m_f) < TOL,
                              "interleaved p=%d m=%d v=%d device %d: peak %g, want %g", p, m,
                              v, d, r.dev[d].peak_mem, held * g.m_f);
            }
            sim_result_free(&r);
            sched_free(s);
        }
}
END_TEST

/* ZB-V with T_F = T_B = T_W and no communication: zero bubble once
 * m >= 2p-1, and every device peaks at 2p chunk activations = p*M_B with
 * M_B the activation memory of a whole device's share of the model. */
START_TEST(test_zb_v_zero_bubble)
{
    static const double unit[] = { 1, 3, 0.5 };
    for (int p = 1; p <= 8; p++)
        for (int extra = 0; extra < 4; extra++)
            for (int mem = 0; mem < N_MEM_SETS; mem++) {
                int m = 2 * p - 1 + extra * (p + 1);
                double t = unit[(p + extra) % 3];
                gen_params g = gen_check_params(p, m, 2, t, t, t, 0);
                g.m_f = mem_sets[mem][0];
                g.m_b = mem_sets[mem][1];
                g.m_w = mem_sets[mem][2];
                sim_result r;
                sched_t *s = gen_check_build(gen_zb_v, &g, &r);
                ck_assert_int_eq(s->n_stages, 2 * p);
                ck_assert_msg(fabs(r.cost - r.busy) < TOL, "zb-v p=%d m=%d: bubble %g", p, m,
                              r.cost - r.busy);
                for (int d = 0; d < p; d++) {
                    ck_assert_double_eq_tol(r.dev[d].span, r.dev[d].busy, TOL);
                    ck_assert_msg(fabs(r.dev[d].peak_mem - 2 * p * g.m_f) < TOL,
                                  "zb-v p=%d m=%d device %d: peak %g, want %g", p, m, d,
                                  r.dev[d].peak_mem, 2 * p * g.m_f);
                }
                sim_result_free(&r);
                sched_free(s);
            }
}
END_TEST

/* With fewer than 2p-1 micro-batches ZB-V cannot fill its warm-up: the
 * bubble must be positive (the schedule stays valid). */
START_TEST(test_zb_v_short_has_bubble)
{
    for (int p = 2; p <= 6; p++)
        for (int m = 1; m < 2 * p - 1; m++) {
            gen_params g = gen_check_params(p, m, 2, 1, 1, 1, 0);
            sim_result r;
            sched_t *s = gen_check_build(gen_zb_v, &g, &r);
            ck_assert_msg(r.cost - r.busy > 0.5, "zb-v p=%d m=%d: bubble %g", p, m,
                          r.cost - r.busy);
            sim_result_free(&r);
            sched_free(s);
        }
}
END_TEST

/* The reference notes (section 1b) warn that Table 2 needs T_W <=
 * min(T_F, T_B): with (1,1,2), p=4, m=8 the formula says 0 but ZB-H1's
 * cool-down W's still stall on the last device, bubble 3. */
START_TEST(test_zb_h1_formula_limit)
{
    gen_params g = gen_check_params(4, 8, 1, 1, 1, 2, 0);
    sim_result r;
    sched_t *s = gen_check_build(gen_zb_h1, &g, &r);
    ck_assert_double_eq_tol(r.cost - r.busy, 3, TOL);
    ck_assert_double_ne_tol(r.cost - r.busy, 3 * (g.t_f + g.t_b - g.t_w), TOL);
    sim_result_free(&r);
    sched_free(s);
}
END_TEST

/* The ordering the paper's Table 2 implies at equal costs: ZB-H2 < ZB-H1 <
 * 1F1B = GPipe in bubble, 1F1B = ZB-H1 < ZB-H2 < GPipe in memory. */
START_TEST(test_relative_order)
{
    gen_params g = gen_check_params(4, 12, 1, 1, 1, 1, 0);
    gen_fn fns[] = { gen_gpipe, gen_1f1b, gen_zb_h1, gen_zb_h2 };
    double bubble[4], peak[4];
    for (int k = 0; k < 4; k++) {
        sim_result r;
        sched_t *s = gen_check_build(fns[k], &g, &r);
        bubble[k] = r.cost - r.busy;
        peak[k] = r.peak_mem;
        sim_result_free(&r);
        sched_free(s);
    }
    ck_assert(bubble[3] < bubble[2] && bubble[2] < bubble[1]);
    ck_assert_double_eq_tol(bubble[0], bubble[1], TOL);
    ck_assert_double_eq_tol(peak[1], peak[2], TOL);
    ck_assert(peak[2] < peak[3] && peak[3] < peak[0]);
}
END_TEST

static Suite *formula_suite(void)
{
    Suite *s = suite_create("gen_formulas");
    TCase *tc = tcase_create("table2");
    tcase_add_loop_test(tc, test_1f1b_table2, 0, N_COST_SETS);
    tcase_add_loop_test(tc, test_zb_h1_table2, 0, N_COST_SETS);
    tcase_add_loop_test(tc, test_zb_h2_table2, 0, N_COST_SETS);
    tcase_add_loop_test(tc, test_gpipe, 0, N_COST_SETS);
    tcase_add_test(tc, test_interleaved_megatron);
    tcase_add_test(tc, test_zb_v_zero_bubble);
    tcase_add_test(tc, test_zb_v_short_has_bubble);
    tcase_add_test(tc, test_zb_h1_formula_limit);
    tcase_add_test(tc, test_relative_order);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(formula_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
