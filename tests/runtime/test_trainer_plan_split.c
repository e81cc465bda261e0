/*
 * test_trainer_plan_split.c: trainer_opts.layers_per_stage (a plan's
 * split) and the activation peaks a trace records.
 *
 *   - a split chosen by a plan changes where layers live, not the
 *     arithmetic: losses, validation loss and parameters are bit-identical
 *     to the even split's, for [1,3], [3,1] and [0,4] (an embedding-only
 *     first stage);
 *   - splits that do not cover the model, or leave a middle stage empty,
 *     are refused with a message;
 *   - with record_times, the trace's meta.measured holds one activation
 *     peak per device: in a schedule that runs every F, then every B, then
 *     every W, a device holds all m micro-batches' state at its peak, so
 *     the peak at m = 4 is exactly twice the peak at m = 2;
 *   - opts.recompute_stages (a plan's recompute) gives the same bits and a
 *     lower activation peak on every device; at the MLP level (2), alone or
 *     mixed with full, the same bits and a peak between full's and none's.
 */
#include <check.h>
#include <string.h>

#include "tests/common/trainer_fixture.h"

#define M 4
#define STEPS 2

static trainer_opts opts(const int *split)
{
    trainer_opts o;
    trainer_opts_default(&o);
    o.seed = 7;
    o.eval_windows = 2;
    o.layers_per_stage = split;
    return o;
}

START_TEST(plan_split_is_bit_identical_to_even)
{
    zb_data *d = fixture_data(32);
    sched_t *s = fixture_scrambled_w(M);
    trainer_opts even = opts(NULL);
    fixture_run ref = fixture_train(s, d, &even, STEPS);
    static const int splits[][2] = { { 1, 3 }, { 3, 1 }, { 0, 4 } };
    for (size_t k = 0; k < sizeof splits / sizeof splits[0]; k++) {
        trainer_opts o = opts(splits[k]);
        fixture_run r = fixture_train(s, d, &o, STEPS);
        char what[32];
        snprintf(what, sizeof what, "split [%d,%d]", splits[k][0], splits[k][1]);
        fixture_assert_same(&ref, &r, what);
        free(r.params);
    }
    free(ref.params);
    sched_free(s);
    data_free(d);
}
END_TEST

START_TEST(split_layout_follows_the_plan)
{
    zb_data *d = fixture_data(32);
    sched_t *s = fixture_scrambled_w(M);
    zb_model m = fixture_model();
    static const int split[2] = { 1, 3 };
    trainer_opts o = opts(split);
    trainer *t = NULL;
    zb_err err = { { 0 } };
    ck_assert_msg(trainer_create(s, &m, d, &o, &t, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(trainer_stage_layout(t, 0)->l0, 0);
    ck_assert_int_eq(trainer_stage_layout(t, 0)->l1, 1);
    ck_assert_int_eq(trainer_stage_layout(t, 1)->l0, 1);
    ck_assert_int_eq(trainer_stage_layout(t, 1)->l1, 4);
    trainer_free(t);
    sched_free(s);
    data_free(d);
}
END_TEST

START_TEST(bad_splits_are_refused)
{
    zb_data *d = fixture_data(32);
    sched_t *s = fixture_scrambled_w(M);
    zb_model m = fixture_model();
    trainer *t = NULL;
    zb_err err = { { 0 } };
    static const int short_split[2] = { 2, 1 };
    trainer_opts o = opts(short_split);
    ck_assert_int_eq(trainer_create(s, &m, d, &o, &t, &err), -1);
    ck_assert_ptr_null(t);
    ck_assert_ptr_nonnull(strstr(err.msg, "covers 3 layers"));
    static const int negative[2] = { -1, 5 };
    o = opts(negative);
    ck_assert_int_eq(trainer_create(s, &m, d, &o, &t, &err), -1);
    sched_free(s);
    /* three stages on one device, the middle one empty */
    s = sched_new(1, 1, 3);
    for (int st = 0; st < 3; st++) {
        s->stage_device[st] = 0;
        sched_push(s, 0, OP_F, st, 0);
    }
    for (int st = 2; st >= 0; st--)
        sched_push(s, 0, OP_BW, st, 0);
    static const int hole[3] = { 2, 0, 2 };
    o = opts(hole);
    ck_assert_int_eq(trainer_create(s, &m, d, &o, &t, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "middle stage 1"));
    sched_free(s);
    data_free(d);
}
END_TEST

/* The measured activation peaks of one step of fixture_scrambled_w(m),
 * or of fixture_gpipe2 (m = 2, BW right after the forwards) when m is 0. */
/* Each device's activation peak in one step of a scrambled-W schedule of m
 * micro-batches (GPipe when m is 0) with every stage at recompute level
 * `recompute` (LLAMA_RC_*). */
static void peaks(int m, int recompute, double *p0, double *p1)
{
    zb_data *d = fixture_data(32);
    sched_t *s = m ? fixture_scrambled_w(m) : fixture_gpipe2();
    zb_model mo = fixture_model();
    trainer_opts o = opts(NULL);
    static const int level[3][2] = { { 0, 0 }, { 1, 1 }, { 2, 2 } };
    o.record_times = 1;
    o.recompute_stages = recompute ? level[recompute] : NULL;
    trainer *t = NULL;
    zb_err err = { { 0 } };
    ck_assert_msg(trainer_create(s, &mo, d, &o, &t, &err) == 0, "%s", err.msg);
    double loss;
    ck_assert_msg(trainer_step(t, &loss, &err) == 0, "%s", err.msg);
    sched_t *tr = NULL;
    ck_assert_msg(trainer_trace(t, &tr, &err) == 0, "%s", err.msg);
    const cJSON *meas = cJSON_GetObjectItemCaseSensitive(tr->meta, "measured");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(meas, "device_peak_activation_bytes");
    ck_assert_int_eq(cJSON_GetArraySize(a), 2);
    *p0 = cJSON_GetArrayItem(a, 0)->valuedouble;
    *p1 = cJSON_GetArrayItem(a, 1)->valuedouble;
    sched_free(tr);
    trainer_free(t);
    sched_free(s);
    data_free(d);
}

START_TEST(trace_records_activation_peaks)
{
    double a0, a1, b0, b1;
    peaks(2, 0, &a0, &a1);
    peaks(4, 0, &b0, &b1);
    ck_assert_msg(a0 > 0 && a1 > 0, "peaks %g %g", a0, a1);
    ck_assert_msg(b0 == 2 * a0 && b1 == 2 * a1, "m=4 peaks %g %g, m=2 peaks %g %g", b0, b1, a0, a1);
}
END_TEST

START_TEST(recompute_is_bit_identical_and_holds_less)
{
    zb_data *d = fixture_data(32);
    sched_t *s = fixture_scrambled_w(M);
    static const int all[2] = { 1, 1 };
    trainer_opts plain = opts(NULL), rc = opts(NULL);
    rc.recompute_stages = all;
    fixture_run a = fixture_train(s, d, &plain, STEPS), b = fixture_train(s, d, &rc, STEPS);
    fixture_assert_same(&a, &b, "recompute");
    free(a.params);
    free(b.params);
    sched_free(s);
    data_free(d);
    double p0, p1, q0, q1;
    /* GPipe's peak is right after the forwards, where recompute keeps
     * only the inputs (after B, W's state is the same either way) */
    peaks(0, 0, &p0, &p1);
    peaks(0, 1, &q0, &q1);
    ck_assert_msg(q0 > 0 && q0 < p0 && q1 > 0 && q1 < p1,
                  "recompute peaks %g %g against %g %g", q0, q1, p0, p1);
}
END_TEST

/* MLP-level recompute (trainer_opts.recompute_stages = 2) and a mix of
 * levels give the same bits; GPipe's peak sits between full recompute's
 * and none's; a level outside 0..2 is refused with a message. */
START_TEST(mlp_recompute_is_bit_identical_and_holds_between)
{
    zb_data *d = fixture_data(32);
    sched_t *s = fixture_scrambled_w(M);
    static const int mlp[2] = { 2, 2 }, mixed[2] = { 2, 1 }, bad[2] = { 0, 3 };
    trainer_opts plain = opts(NULL), rc = opts(NULL), mx = opts(NULL);
    rc.recompute_stages = mlp;
    mx.recompute_stages = mixed;
    fixture_run a = fixture_train(s, d, &plain, STEPS), b = fixture_train(s, d, &rc, STEPS);
    fixture_run c = fixture_train(s, d, &mx, STEPS);
    fixture_assert_same(&a, &b, "mlp recompute");
    fixture_assert_same(&a, &c, "mixed recompute");
    free(a.params);
    free(b.params);
    free(c.params);
    zb_model mo = fixture_model();
    trainer_opts o = opts(NULL);
    o.recompute_stages = bad;
    trainer *t = NULL;
    zb_err err = { { 0 } };
    ck_assert_int_ne(trainer_create(s, &mo, d, &o, &t, &err), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "recompute level 3"));
    sched_free(s);
    data_free(d);
    double p0, p1, q0, q1, r0, r1;
    peaks(0, 0, &p0, &p1);
    peaks(0, 1, &q0, &q1);
    peaks(0, 2, &r0, &r1);
    ck_assert_msg(q0 < r0 && r0 < p0 && q1 < r1 && r1 < p1,
                  "mlp peaks %g %g, full %g %g, none %g %g", r0, r1, q0, q1, p0, p1);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("trainer_plan_split");
    TCase *tc = tcase_create("split");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, plan_split_is_bit_identical_to_even);
    tcase_add_test(tc, split_layout_follows_the_plan);
    tcase_add_test(tc, bad_splits_are_refused);
    tcase_add_test(tc, trace_records_activation_peaks);
    tcase_add_test(tc, recompute_is_bit_identical_and_holds_less);
    tcase_add_test(tc, mlp_recompute_is_bit_identical_and_holds_between);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
