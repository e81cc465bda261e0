/*
 * test_vzb_table8.c: the ZB-V column of the zero-bubble paper's Table 8
 * (arXiv version), rebuilt from its per-chunk profiles by the port of the
 * authors' adaptive V scheduler (solver/v_adaptive.c) and checked through
 * solver_v_zb.
 *
 * Setup as in the authors' efficiency.py (arxiv branch,
 * arxiv_bubble_rates): per-chunk T_F, T_B, T_W, T_comm in microseconds
 * (reference/zero-bubble.md, "Per-chunk profiles behind Table 8"),
 * s = 1024, dF = 34h + 5as, dW = -32h, dB = -(dF + dW), and a limit of
 * 2p dF per device (p whole-model micro-batches), which is also V-ZB's own
 * limit in solver_v_zb.  The printed rate is (span - busy) / span with
 * span the largest device span, printed "%6.4f" as the authors do.
 *
 * Each row checks: the adaptive schedule is valid (real validator),
 * respects the limit on every device (real simulator), prints the paper's
 * value to 4 decimals; solver_v_zb's schedule is valid, within the limit,
 * and no slower than the paper's (it keeps the fastest of its candidates:
 * the adaptive one at p = 16, where it prints the paper's value; the
 * handcrafted order, 0.0004-0.0015 lower, at p = 24 and 32).  Also V-ZB on small
 * unit-cost cases and a tight caller limit, where the adaptive run may
 * fail and solver_v_zb must still answer; the port alone on a sweep of
 * small shapes; and one small case op for op against the lists the
 * authors' code produces.  Largest case p=32, m=256
 * (49,152 ops): the file takes about a second (plain build), 3-4 s
 * under ASan+UBSan.
 */
#include <stdio.h>
#include <string.h>

#include "solver/solver_internal.h"
#include "tests/solver/solver_check.h"

/* One row of Table 8's ZB-V column with its profile. */
typedef struct t8_row {
    int p, m;                 /* devices, micro-batches */
    double t_f, t_b, t_w, c;  /* per-chunk times and T_comm, us */
    int h, a;                 /* hidden size, attention heads (memory deltas) */
    const char *zbv;          /* printed ZB-V bubble rate */
} t8_row;

static const t8_row rows[] = {
    { 16, 48, 14407, 14380, 9676, 1610, 4096, 32, "0.0697" },
    { 16, 64, 14412, 14393, 9688, 1621, 4096, 32, "0.0533" },
    { 16, 128, 14316, 14306, 9639, 1619, 4096, 32, "0.0274" },
    { 24, 72, 6763, 6969, 5251, 755, 5120, 40, "0.0638" },
    { 24, 96, 6783, 6984, 5259, 758, 5120, 40, "0.0483" },
    { 24, 192, 6785, 6990, 5260, 770, 5120, 40, "0.0250" },
    { 32, 96, 9458, 9748, 7288, 879, 6144, 48, "0.0593" },
    { 32, 128, 9469, 9744, 7306, 892, 6144, 48, "0.0451" },
    { 32, 256, 9447, 9644, 7193, 887, 6144, 48, "0.0236" },
};
#define N_ROWS ((int)(sizeof rows / sizeof rows[0]))

static gen_params row_params(const t8_row *r)
{
    double s = 1024, mf = 34.0 * r->h + 5.0 * r->a * s, mw = -32.0 * r->h;
    return (gen_params){ .stages = r->p, .microbatches = r->m, .chunks = 2, .t_f = r->t_f,
                         .t_b = r->t_b, .t_w = r->t_w, .t_comm = r->c, .m_f = mf,
                         .m_b = -(mf + mw), .m_w = mw, .mem_limit = NULL };
}

/* A V-placed template with g's costs, as v_shape.c builds it. */
static sched_t *v_template(const gen_params *g)
{
    sched_t *t = sched_new(g->stages, g->microbatches, 2 * g->stages);
    ck_assert(t != NULL);
    sched_place_v(t);
    sched_set_costs(t, g->t_f, g->t_b, g->t_w, g->t_comm);
    sched_set_mem(t, g->m_f, g->m_b, g->m_w);
    return t;
}

/* Validates and simulates s, checks every device's peak against limit,
 * returns the simulated bubble rate. */
static double check_sched(const sched_t *s, const double *limit, int p)
{
    sim_result sr = { 0 };
    check_valid_sim(s, &sr);
    check_peaks(&sr, limit, p);
    double rate = sr.bubble_rate;
    sim_result_free(&sr);
    return rate;
}

START_TEST(table8_adaptive)
{
    const t8_row *row = &rows[_i];
    gen_params g = row_params(row);
    sched_t *t = v_template(&g);
    double *limit = malloc(sizeof(double) * (size_t)row->p);
    ck_assert(limit != NULL);
    for (int d = 0; d < row->p; d++)
        limit[d] = 2.0 * row->p * g.m_f;
    sched_t *s = NULL;
    double cost = 0;
    zb_err err = { { 0 } };
    ck_assert_msg(v_adaptive_sched(t, limit, &s, &cost, &err) == 0, "p=%d m=%d: %s", row->p, row->m, err.msg);
    double rate = check_sched(s, limit, row->p);
    /* The authors' formula from the span: busy = 2m(T_F + T_B + T_W). */
    double busy = 2.0 * row->m * (row->t_f + row->t_b + row->t_w);
    ck_assert_double_eq_tol(rate, (cost - busy) / cost, 1e-12);
    char got[32];
    snprintf(got, sizeof got, "%.4f", rate);
    ck_assert_msg(strcmp(got, row->zbv) == 0, "Table 8 ZB-V p=%d m=%d: %s (%.6f), paper %s", row->p,
                  row->m, got, rate, row->zbv);
    sched_free(s);
    sched_free(t);
    free(limit);
}
END_TEST

START_TEST(table8_solver_v_zb)
{
    const t8_row *row = &rows[_i];
    gen_params g = row_params(row);
    sched_t *s = NULL;
    zb_err err = { { 0 } };
    ck_assert_msg(solver_v_zb(&g, &s, &err) == 0, "p=%d m=%d: %s", row->p, row->m, err.msg);
    ck_assert(s->mem_limit != NULL);
    for (int d = 0; d < row->p; d++)
        ck_assert_double_eq_tol(s->mem_limit[d], 2.0 * row->p * g.m_f, 1e-6);
    double rate = check_sched(s, s->mem_limit, row->p);
    ck_assert_msg(rate <= atof(row->zbv) + 0.00005, "solver_v_zb p=%d m=%d: %.6f worse than paper %s",
                  row->p, row->m, rate, row->zbv);
    /* At p = 16 the adaptive schedule is the fastest candidate, so
     * solver_v_zb prints the paper's value itself. */
    if (row->p == 16) {
        char got[32];
        snprintf(got, sizeof got, "%.4f", rate);
        ck_assert_msg(strcmp(got, row->zbv) == 0, "solver_v_zb p=16 m=%d: %s, paper %s", row->m, got, row->zbv);
    }
    sched_free(s);
}
END_TEST

/* Small and tight cases: solver_v_zb answers validly within the limit
 * whether or not the adaptive run completes; when it does, it is valid
 * and within the limit too. */
START_TEST(small_and_tight)
{
    static const struct { int p, m; double lim; } cases[] = {
        { 4, 8, 16 }, { 4, 8, 0 }, { 4, 4, 0 }, { 2, 1, 0 }, { 1, 3, 0 }, { 8, 32, 0 },
        { 8, 32, 10 }, { 6, 12, 4 }, { 3, 7, 0 },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int p = cases[k].p, m = cases[k].m;
        double *lim = malloc(sizeof(double) * (size_t)p);
        ck_assert(lim != NULL);
        for (int d = 0; d < p; d++)
            lim[d] = cases[k].lim > 0 ? fmin(cases[k].lim, 2.0 * p) : 2.0 * p;
        gen_params g = { .stages = p, .microbatches = m, .chunks = 2, .t_f = 1, .t_b = 1, .t_w = 1,
                         .t_comm = 0, .m_f = 1, .m_b = -0.5, .m_w = -0.5,
                         .mem_limit = cases[k].lim > 0 ? lim : NULL };
        sched_t *s = NULL;
        zb_err err = { { 0 } };
        ck_assert_msg(solver_v_zb(&g, &s, &err) == 0, "p=%d m=%d: %s", p, m, err.msg);
        check_sched(s, lim, p);
        sched_free(s);
        sched_t *t = v_template(&g);
        double cost;
        if (v_adaptive_sched(t, lim, &s, &cost, &err) == 0) {
            check_sched(s, lim, p);
            sched_free(s);
        }
        sched_free(t);
        free(lim);
    }
}
END_TEST

/* Op-for-op lists of the authors' get_v_schedule at p=4, m=8, T_F, T_B,
 * T_W, T_comm = 5, 6, 4, 1, dF, dB, dW = 2, -1, -1 (limit 2p dF = 16),
 * bubble rate 0.0909: printed by a transcription of their v_schedule.py,
 * run once for this check and not kept.  Each op is "<cat><chunk>.<mb>"
 * in their numbering: cat 0 F, 1 B, 2 W; F chunk 0 is the first chunk,
 * B/W chunk 0 the second (see v_adaptive.c).  (All 9 Table 8 rows were
 * compared the same way and agree; they are too long to keep here.) */
static const char *const authors_p4m8[4] = {
    "00.0 00.1 00.2 00.3 00.4 00.5 00.6 01.0 10.0 20.0 01.1 10.1 20.1 01.2 10.2 20.2 01.3 10.3 20.3 "
    "00.7 11.0 21.0 01.4 10.4 20.4 11.1 01.5 10.5 21.1 20.5 11.2 01.6 10.6 21.2 20.6 11.3 01.7 10.7 "
    "21.3 11.4 20.7 21.4 11.5 21.5 11.6 21.6 11.7 21.7",
    "00.0 00.1 00.2 00.3 00.4 01.0 00.5 01.1 10.0 20.0 01.2 10.1 20.1 01.3 10.2 20.2 00.6 11.0 21.0 "
    "01.4 10.3 20.3 00.7 11.1 21.1 01.5 10.4 20.4 11.2 01.6 10.5 21.2 20.5 11.3 01.7 10.6 11.4 10.7 "
    "21.3 11.5 20.6 11.6 21.4 20.7 11.7 21.5 21.6 21.7",
    "00.0 00.1 00.2 01.0 00.3 01.1 00.4 01.2 10.0 20.0 01.3 10.1 20.1 00.5 11.0 21.0 01.4 10.2 20.2 "
    "00.6 11.1 21.1 01.5 10.3 20.3 00.7 11.2 21.2 01.6 10.4 20.4 11.3 01.7 10.5 11.4 10.6 11.5 10.7 "
    "11.6 21.3 20.5 11.7 21.4 20.6 21.5 20.7 21.6 21.7",
    "00.0 01.0 00.1 01.1 00.2 01.2 00.3 01.3 10.0 20.0 00.4 11.0 21.0 01.4 10.1 20.1 00.5 11.1 21.1 "
    "01.5 10.2 20.2 00.6 11.2 21.2 01.6 10.3 20.3 00.7 11.3 21.3 01.7 10.4 11.4 10.5 11.5 10.6 11.6 "
    "10.7 11.7 20.4 21.4 20.5 21.5 20.6 21.6 20.7 21.7",
};

START_TEST(authors_lists_p4)
{
    gen_params g = { .stages = 4, .microbatches = 8, .chunks = 2, .t_f = 5, .t_b = 6, .t_w = 4,
                     .t_comm = 1, .m_f = 2, .m_b = -1, .m_w = -1 };
    sched_t *t = v_template(&g), *s = NULL;
    double lim[4] = { 16, 16, 16, 16 }, cost = 0;
    zb_err err = { { 0 } };
    ck_assert_msg(v_adaptive_sched(t, lim, &s, &cost, &err) == 0, "%s", err.msg);
    for (int d = 0; d < 4; d++) {
        char got[512] = "";
        size_t len = 0;
        for (int k = 0; k < s->dev[d].n_ops; k++) {
            sched_op o = s->dev[d].ops[k];
            int first_chunk = o.stage < 4;
            int cat = o.kind == OP_F ? 0 : o.kind == OP_B ? 1 : 2;
            int chunk = cat == 0 ? !first_chunk : first_chunk;
            len += (size_t)snprintf(got + len, sizeof got - len, "%s%d%d.%d", k ? " " : "", cat, chunk, o.mb);
            ck_assert(len < sizeof got);
        }
        ck_assert_msg(strcmp(got, authors_p4m8[d]) == 0, "device %d:\n got  %s\n want %s", d, got,
                      authors_p4m8[d]);
    }
    double busy = 2.0 * 8 * (5 + 6 + 4);
    char rate[16];
    snprintf(rate, sizeof rate, "%.4f", (cost - busy) / cost);
    ck_assert_str_eq(rate, "0.0909");
    check_sched(s, lim, 4);
    sched_free(s);
    sched_free(t);
}
END_TEST

/* The port on many small shapes and cost profiles at V-ZB's own limit
 * (2p dF): for m >= p every knob chain completes (the authors' warm-up
 * places F's on the last devices before their inputs when m < p, where
 * the Python asserts and the port fails) and the result is valid, within
 * the limit, and timed as solver_eval times it; under tighter limits a
 * completed run must be too. */
START_TEST(adaptive_sweep)
{
    static const double costs[3][4] = { { 1, 1, 1, 0 }, { 2, 1, 1, 1 }, { 1, 2, 3, 0.5 } };
    int completed = 0;
    for (int p = 1; p <= 6; p++)
        for (int m = 1; m <= 3 * p; m++)
            for (int c = 0; c < 3; c++)
                for (int tight = 0; tight < 2; tight++) {
                    gen_params g = { .stages = p, .microbatches = m, .chunks = 2, .t_f = costs[c][0],
                                     .t_b = costs[c][1], .t_w = costs[c][2], .t_comm = costs[c][3],
                                     .m_f = 2, .m_b = -1, .m_w = -1 };
                    sched_t *t = v_template(&g), *s = NULL;
                    double lim[6], cost = 0;
                    for (int d = 0; d < p; d++)
                        lim[d] = tight ? 2.0 * (p / 2 + 1) : 4.0 * p;
                    zb_err err = { { 0 } };
                    int rc = v_adaptive_sched(t, lim, &s, &cost, &err);
                    if (!tight && m >= p)
                        ck_assert_msg(rc == 0, "p=%d m=%d costs %d: %s", p, m, c, err.msg);
                    if (rc == 0) {
                        check_sched(s, lim, p);
                        solver_eval_result ev;
                        ck_assert(solver_eval(s, &ev, NULL, &err) == 0);
                        ck_assert_double_eq_tol(ev.cost, cost, 1e-9);
                        completed++;
                        sched_free(s);
                    } else {
                        ck_assert(err.msg[0] != 0);
                    }
                    sched_free(t);
                }
    ck_assert_int_ge(completed, 150);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("vzb_table8");
    TCase *tc = tcase_create("table8");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, table8_adaptive, 0, N_ROWS);
    tcase_add_loop_test(tc, table8_solver_v_zb, 0, N_ROWS);
    tcase_add_test(tc, small_and_tight);
    tcase_add_test(tc, adaptive_sweep);
    tcase_add_test(tc, authors_lists_p4);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
