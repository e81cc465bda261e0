/*
 * test_gen_orders.c: the generators' exact op orders, their bookkeeping
 * (name, placement, costs), their validity over a grid of small shapes,
 * and their refusal of bad parameters.
 *
 * The expected orders below were written out by hand from the published
 * rules (docs/generators.md): Megatron-LM's 1F1B and interleaved 1F1B, the
 * authors' get_hand_schedule for ZB-H1/H2, PyTorch's
 * ScheduleZBVZeroBubble for ZB-V.  Ops print as kind, micro-batch, '@',
 * stage ("B3@2"), as the validator names them.
 */
#include <math.h>
#include <stdlib.h>

#include "tests/gen/gen_check.h"

/* Generates and compares device dev's order with want. */
static void assert_lane(gen_fn fn, const gen_params *g, int dev, const char *want)
{
    sim_result r;
    sched_t *s = gen_check_build(fn, g, &r);
    char got[4096];
    gen_check_lane_str(s, dev, got, sizeof got);
    ck_assert_msg(strcmp(got, want) == 0, "%s p=%d m=%d device %d:\n got  %s\n want %s", s->name,
                  g->stages, g->microbatches, dev, got, want);
    sim_result_free(&r);
    sched_free(s);
}

START_TEST(test_order_gpipe)
{
    gen_params g = gen_check_params(2, 3, 1, 1, 1, 1, 0);
    assert_lane(gen_gpipe, &g, 1, "F0@1 F1@1 F2@1 BW0@1 BW1@1 BW2@1");
}
END_TEST

START_TEST(test_order_1f1b)
{
    gen_params g = gen_check_params(4, 8, 1, 1, 1, 1, 0);
    assert_lane(gen_1f1b, &g, 0,
                "F0@0 F1@0 F2@0 F3@0 BW0@0 F4@0 BW1@0 F5@0 BW2@0 F6@0 BW3@0 F7@0 BW4@0 "
                "BW5@0 BW6@0 BW7@0");
    assert_lane(gen_1f1b, &g, 3,
                "F0@3 BW0@3 F1@3 BW1@3 F2@3 BW2@3 F3@3 BW3@3 F4@3 BW4@3 F5@3 BW5@3 F6@3 "
                "BW6@3 F7@3 BW7@3");
    /* Fewer micro-batches than the warm-up wants: the warm-up is capped. */
    g.microbatches = 2;
    assert_lane(gen_1f1b, &g, 0, "F0@0 F1@0 BW0@0 BW1@0");
}
END_TEST

START_TEST(test_order_zb_h1)
{
    gen_params g = gen_check_params(3, 4, 1, 1, 1, 1, 0);
    /* Stage 1 delays its W's by one micro-batch. */
    assert_lane(gen_zb_h1, &g, 1, "F0@1 F1@1 B0@1 F2@1 B1@1 W0@1 F3@1 B2@1 W1@1 B3@1 W2@1 W3@1");
    assert_lane(gen_zb_h1, &g, 0, "F0@0 F1@0 F2@0 B0@0 W0@0 F3@0 B1@0 W1@0 B2@0 W2@0 B3@0 W3@0");
    assert_lane(gen_zb_h1, &g, 2,
                "F0@2 B0@2 F1@2 B1@2 F2@2 B2@2 W0@2 F3@2 B3@2 W1@2 W2@2 W3@2");
}
END_TEST

START_TEST(test_order_zb_h2)
{
    gen_params g = gen_check_params(3, 6, 1, 1, 1, 1, 0);
    /* Stage 0: twice 1F1B's warm-up, W right after each B. */
    assert_lane(gen_zb_h2, &g, 0,
                "F0@0 F1@0 F2@0 F3@0 F4@0 B0@0 W0@0 F5@0 B1@0 W1@0 B2@0 W2@0 B3@0 W3@0 "
                "B4@0 W4@0 B5@0 W5@0");
    /* Last stage: no warm-up, W delayed by 2(p-1) = 4 micro-batches. */
    assert_lane(gen_zb_h2, &g, 2,
                "F0@2 B0@2 F1@2 B1@2 F2@2 B2@2 F3@2 B3@2 F4@2 B4@2 W0@2 F5@2 B5@2 W1@2 W2@2 "
                "W3@2 W4@2 W5@2");
}
END_TEST

START_TEST(test_order_interleaved)
{
    /* p=2, v=2, m=4: device 0 holds stages 0 and 2.  Forwards go in rounds
     * of p micro-batches per chunk; backwards visit the chunks reversed.
     * Warm-up 2(p-1-0) + (v-1)p = 4. */
    gen_params g = gen_check_params(2, 4, 2, 1, 1, 1, 0);
    assert_lane(gen_interleaved, &g, 0,
                "F0@0 F1@0 F0@2 F1@2 F2@0 BW0@2 F3@0 BW1@2 F2@2 BW0@0 F3@2 BW1@0 BW2@2 "
                "BW3@2 BW2@0 BW3@0");
    /* Device 1 (stages 1 and 3): warm-up (v-1)p = 2. */
    assert_lane(gen_interleaved, &g, 1,
                "F0@1 F1@1 F0@3 BW0@3 F1@3 BW1@3 F2@1 BW0@1 F3@1 BW1@1 F2@3 BW2@3 F3@3 "
                "BW3@3 BW2@1 BW3@1");
    /* m == p: Megatron runs every forward first, on every device. */
    g.microbatches = 2;
    assert_lane(gen_interleaved, &g, 1, "F0@1 F1@1 F0@3 F1@3 BW0@3 BW1@3 BW0@1 BW1@1");
}
END_TEST

START_TEST(test_order_zb_v)
{
    /* p=2, m=3 (= 2p-1, no padding): device 0 holds stages 0 and 3,
     * device 1 stages 1 and 2. */
    gen_params g = gen_check_params(2, 3, 2, 1, 1, 1, 0);
    assert_lane(gen_zb_v, &g, 0,
                "F0@0 F1@0 F2@0 F0@3 B0@3 W0@3 F1@3 B1@3 W1@3 B0@0 W0@0 F2@3 B2@3 W2@3 "
                "B1@0 W1@0 B2@0 W2@0");
    assert_lane(gen_zb_v, &g, 1,
                "F0@1 F0@2 F1@1 F1@2 B0@2 W0@2 F2@1 B0@1 W0@1 F2@2 B1@2 W1@2 B1@1 B2@2 "
                "B2@1 W1@1 W2@2 W2@1");
    /* m=2 < 2p-1: the rule's third micro-batch is dropped. */
    g.microbatches = 2;
    assert_lane(gen_zb_v, &g, 1,
                "F0@1 F0@2 F1@1 F1@2 B0@2 W0@2 B0@1 W0@1 B1@2 W1@2 B1@1 W1@1");
}
END_TEST

/* Names, placement, costs and memory deltas are copied into the schedule. */
START_TEST(test_bookkeeping)
{
    static const char *kinds[] = { "gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v",
                                   "interleaved-zb" };
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        gen_params g = gen_check_params(4, 8, 1, 3, 4, 2, 0.5);
        g.m_f = 7;
        g.m_b = -3;
        g.m_w = -4;
        if (strcmp(kinds[k], "interleaved") == 0 || strcmp(kinds[k], "interleaved-zb") == 0)
            g.chunks = 3;
        if (strcmp(kinds[k], "zb-v") == 0)
            g.chunks = 2;
        gen_fn fn = gen_lookup(kinds[k]);
        ck_assert_ptr_nonnull(fn);
        sim_result r;
        sched_t *s = gen_check_build(fn, &g, &r);
        ck_assert_str_eq(s->name, kinds[k]);
        ck_assert_int_eq(s->n_devices, 4);
        ck_assert_int_eq(s->n_micro, 8);
        ck_assert_int_eq(s->n_stages, 4 * g.chunks);
        ck_assert_double_eq(s->t_comm, 0.5);
        for (int st = 0; st < s->n_stages; st++) {
            int want = g.chunks == 2 && strcmp(kinds[k], "zb-v") == 0
                           ? (st < 4 ? st : 7 - st)
                           : st % 4;
            ck_assert_int_eq(s->stage_device[st], want);
            ck_assert_double_eq(s->cost[st].t_f, 3);
            ck_assert_double_eq(s->cost[st].t_b, 4);
            ck_assert_double_eq(s->cost[st].t_w, 2);
            ck_assert_double_eq(s->cost[st].d_f, 7);
            ck_assert_double_eq(s->cost[st].d_b, -3);
            ck_assert_double_eq(s->cost[st].d_w, -4);
        }
        /* Every activation is freed by the end. */
        for (int d = 0; d < 4; d++)
            ck_assert_double_eq_tol(r.dev[d].end_mem, 0, 1e-9);
        sim_result_free(&r);
        sched_free(s);
    }
}
END_TEST

/* Every kind builds a valid, deadlock-free schedule for every small shape
 * it accepts, with one op per (stage, micro-batch, pass). */
START_TEST(test_small_shapes_valid)
{
    static const char *kinds[] = { "gpipe", "1f1b", "zb-h1", "zb-h2", "zb-v", "interleaved",
                                   "interleaved-zb" };
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (int p = 1; p <= 6; p++)
            for (int m = 1; m <= 13; m++)
                for (int v = 1; v <= 4; v++) {
                    int interleaved = strcmp(kinds[k], "interleaved") == 0;
                    int izb = strcmp(kinds[k], "interleaved-zb") == 0;
                    int rounds = m >= p ? m / p : 1;
                    if (interleaved ? (v < 2 || m % p != 0)
                                    : izb ? (v < 2 || m % rounds != 0) : v > 1)
                        continue;
                    gen_params g = gen_check_params(p, m, v, 1, 2, 1, 0.5);
                    sim_result r;
                    sched_t *s = gen_check_build(gen_lookup(kinds[k]), &g, &r);
                    int fused = strcmp(kinds[k], "gpipe") == 0 || strcmp(kinds[k], "1f1b") == 0 ||
                                interleaved;
                    ck_assert_int_eq(sched_op_count(s), (long)s->n_stages * m * (fused ? 2 : 3));
                    sim_result_free(&r);
                    sched_free(s);
                }
}
END_TEST

START_TEST(test_defaults_and_lookup)
{
    gen_params g;
    memset(&g, 0x5a, sizeof g);
    gen_params_default(&g);
    ck_assert_int_eq(g.stages, 4);
    ck_assert_int_eq(g.microbatches, 8);
    ck_assert_int_eq(g.chunks, 1);
    ck_assert_double_eq(g.t_f, 1);
    ck_assert_double_eq(g.t_b, 1);
    ck_assert_double_eq(g.t_w, 1);
    ck_assert_double_eq(g.t_comm, 0);
    ck_assert_double_eq(g.m_f, 2);
    ck_assert_double_eq(g.m_b, -1);
    ck_assert_double_eq(g.m_w, -1);
    ck_assert_ptr_null(g.mem_limit);
    ck_assert(gen_lookup("gpipe") == gen_gpipe);
    ck_assert(gen_lookup("1f1b") == gen_1f1b);
    ck_assert(gen_lookup("interleaved") == gen_interleaved);
    ck_assert(gen_lookup("zb-h1") == gen_zb_h1);
    ck_assert(gen_lookup("zb-h2") == gen_zb_h2);
    ck_assert(gen_lookup("zb-v") == gen_zb_v);
    ck_assert(gen_lookup("interleaved-zb") == gen_interleaved_zb);
    ck_assert(gen_lookup("ZB-H1") == NULL);
    ck_assert(gen_lookup("zb-auto") == NULL);
    ck_assert(gen_lookup("") == NULL);
    ck_assert(gen_lookup(NULL) == NULL);
}
END_TEST

/* Expects fn to refuse g with a message that contains `needle`, leaving
 * *out untouched. */
static void assert_refused(gen_fn fn, const gen_params *g, const char *needle)
{
    sched_t *sentinel = (sched_t *)&sentinel;
    sched_t *s = sentinel;
    zb_err err = { { 0 } };
    ck_assert_int_eq(fn(g, &s, &err), -1);
    ck_assert_ptr_eq(s, sentinel);
    ck_assert_msg(strstr(err.msg, needle) != NULL, "message \"%s\" lacks \"%s\"", err.msg,
                  needle);
    ck_assert_ptr_null(strchr(err.msg, '\n'));
}

START_TEST(test_bad_params)
{
    gen_fn all[] = { gen_gpipe, gen_1f1b, gen_interleaved, gen_zb_h1, gen_zb_h2, gen_zb_v };
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) {
        int v = all[k] == gen_interleaved ? 2 : 1;
        gen_params g = gen_check_params(4, 8, v, 1, 1, 1, 0);
        g.stages = 0;
        assert_refused(all[k], &g, "stages");
        g.stages = -3;
        assert_refused(all[k], &g, "got -3");
        g = gen_check_params(4, 8, v, 1, 1, 1, 0);
        g.microbatches = 0;
        assert_refused(all[k], &g, "micro-batches");
        g = gen_check_params(4, 8, v, -1, 1, 1, 0);
        assert_refused(all[k], &g, "T_F");
        g = gen_check_params(4, 8, v, 1, 1, NAN, 0);
        assert_refused(all[k], &g, "T_W");
        g = gen_check_params(4, 8, v, 1, -0.5, 1, 0);
        assert_refused(all[k], &g, "T_B");
        g = gen_check_params(4, 8, v, 1, 1, 1, INFINITY);
        assert_refused(all[k], &g, "T_comm");
        g = gen_check_params(4, 8, v, 1, 1, 1, 0);
        g.m_b = NAN;
        assert_refused(all[k], &g, "dB");
        /* Absurd sizes are refused quickly rather than eating memory. */
        g = gen_check_params(100000, 100000, v, 1, 1, 1, 0);
        assert_refused(all[k], &g, "ops");
    }
    gen_params g = gen_check_params(4, 8, 2, 1, 1, 1, 0);
    assert_refused(gen_gpipe, &g, "1 chunk");
    assert_refused(gen_1f1b, &g, "1 chunk");
    assert_refused(gen_zb_h1, &g, "1 chunk");
    assert_refused(gen_zb_h2, &g, "1 chunk");
    g.chunks = 1;
    assert_refused(gen_interleaved, &g, "at least 2 chunks");
    g.chunks = 0;
    assert_refused(gen_interleaved, &g, "at least 2 chunks");
    g.chunks = 3;
    assert_refused(gen_zb_v, &g, "exactly 2 chunks");
    g = gen_check_params(4, 6, 2, 1, 1, 1, 0);
    assert_refused(gen_interleaved, &g, "multiple");
    g = gen_check_params(4, 2, 2, 1, 1, 1, 0);
    assert_refused(gen_interleaved, &g, "multiple");
    /* ZB-V walks at least 2p-1 micro-batches even for m=1. */
    g = gen_check_params(1000000, 1, 2, 1, 1, 1, 0);
    assert_refused(gen_zb_v, &g, "ops");
    /* A NULL err is allowed. */
    sched_t *s = NULL;
    g = gen_check_params(0, 8, 1, 1, 1, 1, 0);
    ck_assert_int_eq(gen_1f1b(&g, &s, NULL), -1);
    ck_assert_ptr_null(s);
}
END_TEST

/* ZB-V accepts the CLI default chunks = 1 as "two chunks". */
START_TEST(test_zb_v_default_chunks)
{
    gen_params g = gen_check_params(3, 6, 1, 1, 1, 1, 0);
    sim_result r;
    sched_t *s = gen_check_build(gen_zb_v, &g, &r);
    ck_assert_int_eq(s->n_stages, 6);
    sim_result_free(&r);
    sched_free(s);
}
END_TEST

static Suite *orders_suite(void)
{
    Suite *s = suite_create("gen_orders");
    TCase *tc = tcase_create("orders");
    tcase_add_test(tc, test_order_gpipe);
    tcase_add_test(tc, test_order_1f1b);
    tcase_add_test(tc, test_order_zb_h1);
    tcase_add_test(tc, test_order_zb_h2);
    tcase_add_test(tc, test_order_interleaved);
    tcase_add_test(tc, test_order_zb_v);
    tcase_add_test(tc, test_bookkeeping);
    tcase_add_test(tc, test_small_shapes_valid);
    tcase_add_test(tc, test_defaults_and_lookup);
    tcase_add_test(tc, test_bad_params);
    tcase_add_test(tc, test_zb_v_default_chunks);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(orders_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
