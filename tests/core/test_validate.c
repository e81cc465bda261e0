/*
 * test_validate.c: the validator accepts complete executable schedules and
 * rejects each kind of broken one with a message naming device, position
 * and op.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "src/validate.h"
#include "tests/core/fixtures.h"

/* Validates s, expects failure, checks that the message contains frag1
 * and (unless NULL) frag2, frees s. */
static void expect_invalid(sched_t *s, const char *frag1, const char *frag2)
{
    zb_err err = { "" };
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(sched_validate(s, &err), -1);
    ck_assert_msg(strstr(err.msg, frag1), "message '%s' lacks '%s'", err.msg, frag1);
    if (frag2)
        ck_assert_msg(strstr(err.msg, frag2), "message '%s' lacks '%s'", err.msg, frag2);
    sched_free(s);
}

START_TEST(accepts_valid)
{
    zb_err err = { "" };
    sched_t *all[] = { fixture_1f1b(4, 8, 0), fixture_1f1b(4, 8, 1), fixture_1f1b(4, 2, 0),
                       fixture_gpipe(3, 5), fixture_v(3, 4), fixture_1f1b(1, 3, 1) };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        ck_assert_ptr_nonnull(all[i]);
        ck_assert_msg(sched_validate(all[i], &err) == 0, "fixture %zu: %s", i, err.msg);
        sched_free(all[i]);
    }
}
END_TEST

START_TEST(rejects_missing_op)
{
    sched_t *s = fixture_1f1b(2, 2, 0);
    s->dev[1].n_ops--; /* drop BW of micro-batch 1 on stage 1 */
    expect_invalid(s, "device 1", "stage 1, micro-batch 1");
}
END_TEST

START_TEST(rejects_b_without_w)
{
    sched_t *s = fixture_1f1b(2, 3, 1);
    /* Drop the last W of device 0: enough ops remain for the tally to run,
     * which must name the B left without its W. */
    s->dev[0].n_ops--;
    expect_invalid(s, "B without its W", "stage 0, micro-batch 2");
    /* The same on the last stage (device 1: ... F2 B2 W2). */
    s = fixture_1f1b(2, 3, 1);
    s->dev[1].n_ops--;
    expect_invalid(s, "B without its W", "stage 1, micro-batch 2");
}
END_TEST

START_TEST(rejects_duplicate)
{
    sched_t *s = fixture_1f1b(2, 2, 0);
    sched_push(s, 1, OP_F, 1, 0);
    expect_invalid(s, "device 1, op 4 (F0@1)", "duplicate");
}
END_TEST

START_TEST(rejects_stage_on_wrong_device)
{
    sched_t *s = fixture_1f1b(2, 2, 0);
    s->dev[0].ops[1].stage = 1; /* F1 of stage 1 listed on device 0 */
    expect_invalid(s, "device 0, op 1 (F1@1)", "placed on device 1");
}
END_TEST

START_TEST(rejects_bad_placement)
{
    sched_t *s = fixture_1f1b(2, 2, 0);
    s->stage_device[1] = 5;
    expect_invalid(s, "placement", "stage 1");
    s = fixture_1f1b(2, 2, 0);
    s->stage_device[0] = -1;
    expect_invalid(s, "placement", "stage 0");
}
END_TEST

START_TEST(rejects_out_of_range_op)
{
    sched_t *s = fixture_1f1b(2, 2, 0);
    s->dev[1].ops[2].mb = 7;
    expect_invalid(s, "device 1, op 2", "micro-batch 7 out of range");
    s = fixture_1f1b(2, 2, 0);
    s->dev[1].ops[0].kind = 9;
    expect_invalid(s, "device 1, op 0", "unknown op kind");
}
END_TEST

START_TEST(rejects_mixed_bw_and_split)
{
    sched_t *s = fixture_1f1b(2, 2, 0);
    sched_push(s, 1, OP_W, 1, 0);
    expect_invalid(s, "device 1, op 4 (W0@1)", "both BW and a split");
}
END_TEST

START_TEST(rejects_w_before_b)
{
    sched_t *s = fixture_1f1b(2, 2, 1);
    /* device 1 runs F0 B0 W0 F1 B1 W1: swap B0 and W0 */
    sched_op t = s->dev[1].ops[1];
    s->dev[1].ops[1] = s->dev[1].ops[2];
    s->dev[1].ops[2] = t;
    expect_invalid(s, "deadlock: device 1, op 1 (W0@1) comes before B0@1 (op 2)", NULL);
}
END_TEST

/* Moves the op at position `from` of device d to position `to` (to < from),
 * shifting the ops in between one place later. */
static void move_op_earlier(sched_t *s, int d, int from, int to)
{
    sched_op op = s->dev[d].ops[from];
    memmove(&s->dev[d].ops[to + 1], &s->dev[d].ops[to], (size_t)(from - to) * sizeof op);
    s->dev[d].ops[to] = op;
}

/* A split B placed before its own F (same stage, same micro-batch) must be
 * refused for the right reason: its F comes later on the same device.  On
 * the last stage B needs nothing else, so a check for F restricted to fused
 * BW would accept the schedule; on the other stages B also waits for the
 * next stage's B, so such a narrowed check would still deadlock but blame
 * the wrong input.  The messages below name the F. */
START_TEST(rejects_split_b_before_its_f_last_stage)
{
    /* Last stage: device 1 of split 1F1B runs F0 B0 W0 F1 B1 W1. */
    sched_t *s = fixture_1f1b(2, 2, 1);
    move_op_earlier(s, 1, 1, 0); /* B0 F0 W0 F1 B1 W1 */
    expect_invalid(s, "device 1, op 0 (B0@1) comes before F0@1 (op 1)", NULL);
    s = fixture_1f1b(2, 2, 1);
    move_op_earlier(s, 1, 4, 3); /* F0 B0 W0 B1 F1 W1 */
    expect_invalid(s, "device 1, op 3 (B1@1) comes before F1@1 (op 4)", NULL);

    /* V placement: device 0 holds stages 0 and 3 (the last); its list is
     * F@0 F@3 B@3 W@3 B@0 W@0 for m=1.  Put B@3 before F@3. */
    s = fixture_v(2, 1);
    move_op_earlier(s, 0, 2, 1);
    expect_invalid(s, "device 0, op 1 (B0@3) comes before F0@3 (op 2)", NULL);
}
END_TEST

START_TEST(rejects_split_b_before_its_f_other_stages)
{
    sched_t *s;
    /* First stage: device 0 runs F0 F1 B0 W0 B1 W1; put B1 before F1. */
    s = fixture_1f1b(2, 2, 1);
    move_op_earlier(s, 0, 4, 1); /* F0 B1 F1 B0 W0 W1 */
    expect_invalid(s, "device 0, op 1 (B1@0) comes before F1@0 (op 2)", NULL);

    /* Middle stage of three: device 1 runs F0 F1 B0 W0 B1 W1 (m=2). */
    s = fixture_1f1b(3, 2, 1);
    ck_assert_int_eq(s->dev[1].ops[2].kind, OP_B);
    move_op_earlier(s, 1, 2, 0); /* B0 F0 F1 W0 B1 W1 */
    expect_invalid(s, "device 1, op 0 (B0@1) comes before F0@1 (op 1)", NULL);

    /* V placement, device 0's first chunk (stage 0): B@0 before F@0. */
    s = fixture_v(2, 1);
    move_op_earlier(s, 0, 4, 0);
    expect_invalid(s, "device 0, op 0 (B0@0) comes before F0@0 (op 1)", NULL);
}
END_TEST

START_TEST(rejects_cross_device_cycle)
{
    sched_t *s = sched_new(2, 2, 2);
    sched_place_interleaved(s);
    /* device 0: F0 BW0 F1 BW1; device 1: F1 BW1 F0 BW0.  Device 1 waits for
     * F1@0, which device 0 runs only after BW0@0, which needs B0@1 from
     * device 1: a cycle. */
    sched_push(s, 0, OP_F, 0, 0);
    sched_push(s, 0, OP_BW, 0, 0);
    sched_push(s, 0, OP_F, 0, 1);
    sched_push(s, 0, OP_BW, 0, 1);
    sched_push(s, 1, OP_F, 1, 1);
    sched_push(s, 1, OP_BW, 1, 1);
    sched_push(s, 1, OP_F, 1, 0);
    sched_push(s, 1, OP_BW, 1, 0);
    expect_invalid(s, "device 0, op 1 (BW0@0) waits for BW0@1 (device 1, op 3)",
                   "device 1, op 0 (F1@1) waits for F1@0 (device 0, op 2)");
}
END_TEST

START_TEST(rejects_forward_order_inversion)
{
    sched_t *s = fixture_gpipe(3, 2);
    /* device 1 runs F1 before F0 while device 0 runs F0 first: fine (no
     * cycle).  Making device 2 need B before F is not: put its BW0 first. */
    sched_op t = s->dev[2].ops[0];
    s->dev[2].ops[0] = s->dev[2].ops[2];
    s->dev[2].ops[2] = t;
    expect_invalid(s, "deadlock: device 2, op 0 (BW0@2) comes before F0@2 (op 2)", NULL);
}
END_TEST

START_TEST(rejects_huge_header_cheaply)
{
    sched_t *s = sched_new(1, 1000000, 100000); /* 1e11 cells, no ops */
    ck_assert_ptr_nonnull(s);
    for (int i = 0; i < s->n_stages; i++)
        s->stage_device[i] = 0;
    expect_invalid(s, "incomplete: 0 ops", NULL);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("validate");
    TCase *tc = tcase_create("validate");
    tcase_add_test(tc, accepts_valid);
    tcase_add_test(tc, rejects_missing_op);
    tcase_add_test(tc, rejects_b_without_w);
    tcase_add_test(tc, rejects_duplicate);
    tcase_add_test(tc, rejects_stage_on_wrong_device);
    tcase_add_test(tc, rejects_bad_placement);
    tcase_add_test(tc, rejects_out_of_range_op);
    tcase_add_test(tc, rejects_mixed_bw_and_split);
    tcase_add_test(tc, rejects_w_before_b);
    tcase_add_test(tc, rejects_split_b_before_its_f_last_stage);
    tcase_add_test(tc, rejects_split_b_before_its_f_other_stages);
    tcase_add_test(tc, rejects_cross_device_cycle);
    tcase_add_test(tc, rejects_forward_order_inversion);
    tcase_add_test(tc, rejects_huge_header_cheaply);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
