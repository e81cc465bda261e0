/*
 * test_gen_tables.c: the zero-bubble paper's bubble-rate tables, rebuilt
 * from its profiles with our generators and simulator.
 *
 * Table 5 (ICLR version) gives, per model and m, the theoretical bubble
 * rates of 1F1B, 1F1B-I, ZB-H1, ZB-H2 (and the automatic ZB-1p/ZB-2p, which
 * belong to the solver) computed from the Table 9 profiles (T_F, T_B, T_W,
 * T_comm in microseconds).  Table 8 (arXiv version, ZB-V section) does the
 * same from per-chunk profiles; there the non-V schedules use twice the
 * chunk times (a device holds two chunks' worth of layers).  The authors'
 * script is sail-sg/zero-bubble-pipeline-parallelism, branch arxiv,
 * megatron/core/pipeline_parallel/efficiency.py (iclr_bubble_rates and
 * arxiv_bubble_rates); its settings carry a layer count l that sets
 * 1F1B-I's chunk count to l/p (per-chunk costs T/(l/p), B and W fused).
 *
 * What matches and what cannot (see docs/generators.md):
 *  - 1F1B, ZB-H1, ZB-H2: all 12 + 9 rows to the printed 4 decimals.
 *  - 1F1B-I: the authors' simulation of the interleaved order enforces the
 *    wrap-around dependency (chunk c on device p-1 -> chunk c+1 on device 0
 *    for forwards, and back for backwards) only for the first micro-batch
 *    of each round of p (their `_rk == 0` test); the others start as if
 *    their input were already there.  relaxed_rate() below replays our
 *    generated order under that exact rule and matches every printed
 *    value; under full dependencies (sim_run) the rates are 0.0008-0.0050
 *    higher, and the test pins those values, re-derived independently.
 *  - ZB-V: Table 8's column comes from the authors' profile-driven greedy
 *    V scheduler (v_schedule.py PipelineGraph.get_v_schedule, which moves
 *    W's into gaps using the real T_F/T_B/T_W/T_comm), not from the
 *    handcrafted rule; the handcrafted order is within 0.0016 of it (better
 *    at p=24 and 32, worse at p=16), and the test pins its rates,
 *    re-derived independently.
 *
 * "Re-derived independently" means: by a separate Python re-implementation
 * of the published rule and an as-soon-as-possible simulation, written for
 * this check and not kept in the tree.  Largest case: ZB-V at p=32, m=256,
 * 49,152 ops; the file takes about a second.
 */
#include <math.h>
#include <stdlib.h>

#include "tests/gen/gen_check.h"

/* One row of Table 5, with the profile from Table 9. */
typedef struct table5_row {
    int p, m;                /* pipeline devices, micro-batches */
    double t_f, t_b, t_w, c; /* profiled times, microseconds */
    int layers;              /* l in the authors' settings: 1F1B-I uses l/p chunks */
    const char *r_1f1b, *r_1f1b_i, *r_h1, *r_h2; /* printed bubble rates */
    const char *r_1f1b_i_full; /* 1F1B-I with every dependency enforced */
} table5_row;

static const table5_row table5[] = {
    { 8, 24, 18522, 18086, 9337, 601, 24, "0.2431", "0.1055", "0.1585", "0.1083", "0.1090" },
    { 8, 32, 18513, 18086, 9331, 626, 24, "0.1985", "0.0818", "0.1242", "0.0837", "0.0847" },
    { 8, 64, 18546, 18097, 9321, 762, 24, "0.1240", "0.0443", "0.0674", "0.0444", "0.0461" },
    { 8, 24, 29718, 29444, 19927, 527, 32, "0.2347", "0.0808", "0.1323", "0.0698", "0.0827" },
    { 8, 32, 29802, 29428, 19530, 577, 32, "0.1898", "0.0628", "0.1045", "0.0559", "0.0644" },
    { 8, 64, 29935, 29621, 19388, 535, 32, "0.1091", "0.0320", "0.0554", "0.0294", "0.0328" },
    { 16, 48, 11347, 11248, 8132, 377, 48, "0.2552", "0.1104", "0.1397", "0.0672", "0.1136" },
    { 16, 64, 11307, 11254, 8101, 379, 48, "0.2082", "0.0852", "0.1088", "0.0516", "0.0878" },
    { 16, 128, 11325, 11308, 8109, 378, 48, "0.1251", "0.0445", "0.0576", "0.0266", "0.0459" },
    { 32, 96, 10419, 10207, 7715, 408, 64, "0.2646", "0.1493", "0.1421", "0.0641", "0.1528" },
    { 32, 128, 10408, 10204, 7703, 408, 64, "0.2168", "0.1164", "0.1106", "0.0490", "0.1192" },
    { 32, 256, 10402, 10248, 7698, 460, 64, "0.1352", "0.0624", "0.0594", "0.0257", "0.0641" },
};
#define N_TABLE5 ((int)(sizeof table5 / sizeof table5[0]))

/* One row of Table 8, with its per-chunk profile. */
typedef struct table8_row {
    int p, m;
    double t_f, t_b, t_w, c; /* per-chunk profile, microseconds */
    const char *r_1f1b, *r_1f1b_i, *r_h1, *r_h2, *r_zbv; /* printed bubble rates */
    const char *r_1f1b_i_full; /* 1F1B-I with every dependency enforced */
    const char *r_zbv_hand;    /* the handcrafted ZB-V rule under sim_run */
} table8_row;

static const table8_row table8[] = {
    { 16, 48, 14407, 14380, 9676, 1610, "0.2668", "0.1499", "0.1536", "0.0823", "0.0697", "0.1549", "0.0712" },
    { 16, 64, 14412, 14393, 9688, 1621, "0.2206", "0.1169", "0.1198", "0.0630", "0.0533", "0.1209", "0.0545" },
    { 16, 128, 14316, 14306, 9639, 1619, "0.1390", "0.0621", "0.0637", "0.0325", "0.0274", "0.0644", "0.0280" },
    { 24, 72, 6763, 6969, 5251, 755, "0.2699", "0.1519", "0.1439", "0.0628", "0.0638", "0.1566", "0.0623" },
    { 24, 96, 6783, 6984, 5259, 758, "0.2229", "0.1184", "0.1121", "0.0480", "0.0483", "0.1223", "0.0476" },
    { 24, 192, 6785, 6990, 5260, 770, "0.1403", "0.0630", "0.0595", "0.0247", "0.0250", "0.0652", "0.0246" },
    { 32, 96, 9458, 9748, 7288, 879, "0.2676", "0.1509", "0.1429", "0.0629", "0.0593", "0.1549", "0.0582" },
    { 32, 128, 9469, 9744, 7306, 892, "0.2204", "0.1177", "0.1111", "0.0478", "0.0451", "0.1210", "0.0444" },
    { 32, 256, 9447, 9644, 7193, 887, "0.1362", "0.0626", "0.0593", "0.0251", "0.0236", "0.0644", "0.0229" },
};
#define N_TABLE8 ((int)(sizeof table8 / sizeof table8[0]))

/* The simulated bubble rate of fn on g (the paper's definition; sim.h). */
static double sim_rate(gen_fn fn, const gen_params *g)
{
    sim_result r;
    sched_t *s = gen_check_build(fn, g, &r);
    double rate = r.bubble_rate;
    sim_result_free(&r);
    sched_free(s);
    return rate;
}

/* Asserts that rate prints as `want` with four decimals, as the paper's
 * tables (and the authors' script, "%6.4f") print it. */
static void assert_printed(double rate, const char *want, const char *what, int p, int m)
{
    char got[32];
    snprintf(got, sizeof got, "%.4f", rate);
    ck_assert_msg(strcmp(got, want) == 0, "%s p=%d m=%d: bubble rate %s (%.6f), expected %s", what,
                  p, m, got, rate, want);
}

/* Which dependency of an op the authors' interleaved simulation drops:
 * the wrap-around edge between device p-1 and device 0 for micro-batches
 * that are not the first of their round of p. */
static int relaxed_skips(const sched_t *s, int producer_stage, int consumer_stage, int mb)
{
    int p = s->n_devices;
    return s->stage_device[producer_stage] == p - 1 && s->stage_device[consumer_stage] == 0 &&
           producer_stage < consumer_stage && mb % p != 0;
}

static int relaxed_skips_b(const sched_t *s, int producer_stage, int consumer_stage, int mb)
{
    int p = s->n_devices;
    return s->stage_device[producer_stage] == 0 && s->stage_device[consumer_stage] == p - 1 &&
           producer_stage > consumer_stage && mb % p != 0;
}

/* A minimal as-soon-as-possible replay of a fused-backward schedule (F and
 * BW only), independent of sim_run: each op starts when its device is free
 * and its inputs have arrived (producer end + T_comm across devices).  With
 * relax set, the edges relaxed_skips* name are ignored, as in the authors'
 * efficiency.py:get_interleave_schedule.  Returns the bubble rate
 * (makespan - busy)/makespan, the authors' definition for this column. */
static double relaxed_rate(const sched_t *s, int relax)
{
    int p = s->n_devices, m = s->n_micro, S = s->n_stages;
    double *end_f = malloc(sizeof(double) * (size_t)S * (size_t)m);
    double *end_b = malloc(sizeof(double) * (size_t)S * (size_t)m);
    int *next = calloc((size_t)p, sizeof(int));
    double *clock = calloc((size_t)p, sizeof(double));
    ck_assert(end_f && end_b && next && clock);
    for (long i = 0; i < (long)S * m; i++)
        end_f[i] = end_b[i] = -1;
    int progress = 1;
    while (progress) {
        progress = 0;
        for (int d = 0; d < p; d++) {
            const sched_lane *l = &s->dev[d];
            while (next[d] < l->n_ops) {
                sched_op op = l->ops[next[d]];
                ck_assert(op.kind == OP_F || op.kind == OP_BW);
                int st = op.stage, j = op.mb;
                double ready = clock[d];
                int pred = -1;
                double *pred_end = NULL;
                if (op.kind == OP_F && st > 0 && !(relax && relaxed_skips(s, st - 1, st, j))) {
                    pred = st - 1;
                    pred_end = end_f;
                } else if (op.kind == OP_BW && st < S - 1 &&
                           !(relax && relaxed_skips_b(s, st + 1, st, j))) {
                    pred = st + 1;
                    pred_end = end_b;
                }
                if (op.kind == OP_BW && end_f[(long)st * m + j] < 0)
                    break;
                if (pred >= 0) {
                    double e = pred_end[(long)pred * m + j];
                    if (e < 0)
                        break;
                    if (s->stage_device[pred] != d)
                        e += s->t_comm;
                    if (e > ready)
                        ready = e;
                }
                double t_end = ready + sched_op_time(s, op);
                (op.kind == OP_F ? end_f : end_b)[(long)st * m + j] = t_end;
                clock[d] = t_end;
                next[d]++;
                progress = 1;
            }
        }
    }
    double makespan = 0, busy = 0;
    for (int d = 0; d < p; d++) {
        ck_assert_msg(next[d] == s->dev[d].n_ops, "replay stuck on device %d", d);
        if (clock[d] > makespan)
            makespan = clock[d];
    }
    for (int i = 0; i < s->dev[0].n_ops; i++)
        busy += sched_op_time(s, s->dev[0].ops[i]);
    free(end_f);
    free(end_b);
    free(next);
    free(clock);
    return (makespan - busy) / makespan;
}

/* The 1F1B-I setup of the authors' script: `chunks` chunks per device,
 * per-chunk costs T/chunks, B and W fused (W time folded into B). */
static gen_params interleaved_params(int p, int m, int chunks, double t_f, double t_b,
                                     double t_w, double c)
{
    return gen_check_params(p, m, chunks, t_f / chunks, (t_b + t_w) / chunks, 0, c);
}

START_TEST(test_table5_1f1b_h1_h2)
{
    const table5_row *row = &table5[_i];
    gen_params g = gen_check_params(row->p, row->m, 1, row->t_f, row->t_b, row->t_w, row->c);
    assert_printed(sim_rate(gen_1f1b, &g), row->r_1f1b, "Table 5 1F1B", row->p, row->m);
    assert_printed(sim_rate(gen_zb_h1, &g), row->r_h1, "Table 5 ZB-H1", row->p, row->m);
    assert_printed(sim_rate(gen_zb_h2, &g), row->r_h2, "Table 5 ZB-H2", row->p, row->m);
}
END_TEST

START_TEST(test_table5_1f1b_i)
{
    const table5_row *row = &table5[_i];
    int chunks = row->layers / row->p;
    gen_params g = interleaved_params(row->p, row->m, chunks, row->t_f, row->t_b, row->t_w,
                                      row->c);
    sim_result r;
    sched_t *s = gen_check_build(gen_interleaved, &g, &r);
    /* The replay agrees with sim_run when nothing is relaxed... */
    ck_assert_double_eq_tol(relaxed_rate(s, 0), r.bubble_rate, 1e-12);
    /* ...reproduces the paper under the authors' relaxed rule... */
    assert_printed(relaxed_rate(s, 1), row->r_1f1b_i, "Table 5 1F1B-I (authors' rule)", row->p,
                   row->m);
    /* ...and is a little worse with every dependency enforced. */
    assert_printed(r.bubble_rate, row->r_1f1b_i_full, "Table 5 1F1B-I (full)", row->p, row->m);
    ck_assert(r.bubble_rate > relaxed_rate(s, 1));
    sim_result_free(&r);
    sched_free(s);
}
END_TEST

START_TEST(test_table8_1f1b_h1_h2)
{
    const table8_row *row = &table8[_i];
    gen_params g = gen_check_params(row->p, row->m, 1, 2 * row->t_f, 2 * row->t_b,
                                    2 * row->t_w, row->c);
    assert_printed(sim_rate(gen_1f1b, &g), row->r_1f1b, "Table 8 1F1B", row->p, row->m);
    assert_printed(sim_rate(gen_zb_h1, &g), row->r_h1, "Table 8 ZB-H1", row->p, row->m);
    assert_printed(sim_rate(gen_zb_h2, &g), row->r_h2, "Table 8 ZB-H2", row->p, row->m);
}
END_TEST

START_TEST(test_table8_1f1b_i)
{
    const table8_row *row = &table8[_i];
    /* The authors' script: l/p = 2 chunks for all three models. */
    gen_params g = interleaved_params(row->p, row->m, 2, 2 * row->t_f, 2 * row->t_b,
                                      2 * row->t_w, row->c);
    sim_result r;
    sched_t *s = gen_check_build(gen_interleaved, &g, &r);
    ck_assert_double_eq_tol(relaxed_rate(s, 0), r.bubble_rate, 1e-12);
    assert_printed(relaxed_rate(s, 1), row->r_1f1b_i, "Table 8 1F1B-I (authors' rule)", row->p,
                   row->m);
    assert_printed(r.bubble_rate, row->r_1f1b_i_full, "Table 8 1F1B-I (full)", row->p, row->m);
    sim_result_free(&r);
    sched_free(s);
}
END_TEST

START_TEST(test_table8_zb_v)
{
    const table8_row *row = &table8[_i];
    gen_params g = gen_check_params(row->p, row->m, 2, row->t_f, row->t_b, row->t_w, row->c);
    double rate = sim_rate(gen_zb_v, &g);
    assert_printed(rate, row->r_zbv_hand, "Table 8 handcrafted ZB-V", row->p, row->m);
    /* The paper's greedy V schedule and the handcrafted rule agree to
     * within 0.002 on every row. */
    double paper = atof(row->r_zbv);
    ck_assert_msg(fabs(rate - paper) < 0.002, "Table 8 ZB-V p=%d m=%d: %.4f vs paper %.4f",
                  row->p, row->m, rate, paper);
    /* ZB-V beats 1F1B-I and ZB-H1 at the same activation memory. */
    ck_assert(rate < atof(row->r_1f1b_i) && rate < atof(row->r_h1));
}
END_TEST

static Suite *tables_suite(void)
{
    Suite *s = suite_create("gen_tables");
    TCase *t5 = tcase_create("table5");
    tcase_add_loop_test(t5, test_table5_1f1b_h1_h2, 0, N_TABLE5);
    tcase_add_loop_test(t5, test_table5_1f1b_i, 0, N_TABLE5);
    suite_add_tcase(s, t5);
    TCase *t8 = tcase_create("table8");
    tcase_add_loop_test(t8, test_table8_1f1b_h1_h2, 0, N_TABLE8);
    tcase_add_loop_test(t8, test_table8_1f1b_i, 0, N_TABLE8);
    tcase_add_loop_test(t8, test_table8_zb_v, 0, N_TABLE8);
    suite_add_tcase(s, t8);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(tables_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
