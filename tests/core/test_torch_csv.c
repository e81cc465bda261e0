/*
 * test_torch_csv.c: PyTorch pipelining CSV export and import.  Round trips
 * keep ops and placement identical (plain, split B/W, V-shape, every
 * generator kind); PyTorch's spelling (I for our B, B for our BW, spaces,
 * empty idle cells, CRLF) is accepted; bad files are rejected with the row
 * and cell.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "schedules/gen.h"
#include "src/torch_csv.h"
#include "src/validate.h"
#include "tests/core/fixtures.h"

static void assert_same_ops(const sched_t *a, const sched_t *b)
{
    ck_assert_int_eq(a->n_devices, b->n_devices);
    ck_assert_int_eq(a->n_micro, b->n_micro);
    ck_assert_int_eq(a->n_stages, b->n_stages);
    ck_assert(!memcmp(a->stage_device, b->stage_device, sizeof(int) * (size_t)a->n_stages));
    for (int d = 0; d < a->n_devices; d++) {
        ck_assert_int_eq(a->dev[d].n_ops, b->dev[d].n_ops);
        for (int i = 0; i < a->dev[d].n_ops; i++) {
            ck_assert_int_eq(a->dev[d].ops[i].kind, b->dev[d].ops[i].kind);
            ck_assert_int_eq(a->dev[d].ops[i].stage, b->dev[d].ops[i].stage);
            ck_assert_int_eq(a->dev[d].ops[i].mb, b->dev[d].ops[i].mb);
        }
    }
}

static void round_trip(const sched_t *s)
{
    char *csv = torch_csv_write(s);
    ck_assert_ptr_nonnull(csv);
    sched_t *t = NULL;
    zb_err err = { "" };
    ck_assert_msg(torch_csv_read(csv, strlen(csv), 0, &t, &err) == 0, "%s", err.msg);
    assert_same_ops(s, t);
    ck_assert_int_eq(sched_validate(t, &err), 0);
    char *again = torch_csv_write(t);
    ck_assert_str_eq(csv, again);
    free(again);
    free(csv);
    sched_free(t);
}

START_TEST(round_trip_fixtures)
{
    sched_t *all[] = { fixture_1f1b(4, 8, 0), fixture_1f1b(3, 5, 1), fixture_gpipe(2, 3),
                       fixture_v(3, 4), fixture_1f1b(1, 1, 0) };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        round_trip(all[i]);
        sched_free(all[i]);
    }
}
END_TEST

START_TEST(round_trip_every_generator)
{
    static const char *const kinds[] = { "gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v",
                                         "interleaved-zb" };
    const int n_kinds = (int)(sizeof kinds / sizeof kinds[0]);
    int built = 0;
    for (int i = 0; i < n_kinds; i++) {
        gen_fn fn = gen_lookup(kinds[i]);
        ck_assert_msg(fn != NULL, "no generator for %s", kinds[i]);
        gen_params gp;
        gen_params_default(&gp);
        gp.stages = 4;
        gp.microbatches = 8;
        gp.chunks = !strcmp(kinds[i], "interleaved") || !strcmp(kinds[i], "zb-v") ||
                            !strcmp(kinds[i], "interleaved-zb") ? 2 : 1;
        sched_t *s = NULL;
        zb_err err = { "" };
        ck_assert_msg(fn(&gp, &s, &err) == 0, "%s: %s", kinds[i], err.msg);
        round_trip(s);
        sched_free(s);
        built++;
    }
    ck_assert_int_eq(built, n_kinds); /* every kind round-tripped */
}
END_TEST

START_TEST(pytorch_spelling)
{
    /* 2 ranks, stages 0 and 1, 2 micro-batches; I/W split on rank 1, full
     * B on rank 0; spaces, an empty idle cell, CRLF line ends. */
    const char *csv = "0F0, 0F1 ,,1B0 ,0B1\r\n1F0,1I0,1W0,\t1F1,1I1,1W1\r\n";
    const char *fixed = "0F0, 0F1 ,,0B0 ,0B1\r\n1F0,1I0,1W0,\t1F1,1I1,1W1\r\n";
    sched_t *s = NULL;
    zb_err err = { "" };
    /* stage 1 on row 0 and row 1 */
    ck_assert_int_eq(torch_csv_read(csv, strlen(csv), 0, &s, &err), -1);
    ck_assert_msg(strstr(err.msg, "row 1, cell 0 (1F0): stage 1 is already on row 0"), "%s", err.msg);
    ck_assert_int_eq(torch_csv_read(fixed, strlen(fixed), 0, &s, &err), 0);
    ck_assert_int_eq(s->n_devices, 2);
    ck_assert_int_eq(s->n_stages, 2);
    ck_assert_int_eq(s->n_micro, 2);
    ck_assert_int_eq(s->dev[0].n_ops, 4);
    ck_assert_int_eq(s->dev[0].ops[2].kind, OP_BW);
    ck_assert_int_eq(s->dev[1].ops[1].kind, OP_B);
    ck_assert_int_eq(s->dev[1].ops[2].kind, OP_W);
    ck_assert_int_eq(sched_validate(s, &err), 0);
    sched_free(s);
    /* --microbatches may only raise m. */
    ck_assert_int_eq(torch_csv_read(fixed, strlen(fixed), 5, &s, &err), 0);
    ck_assert_int_eq(s->n_micro, 5);
    sched_free(s);
    ck_assert_int_eq(torch_csv_read(fixed, strlen(fixed), 1, &s, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "micro-batch 1"));
}
END_TEST

START_TEST(rejects_bad_csv)
{
    static const struct { const char *csv, *frag; } cases[] = {
        { "", "no actions" },
        { "\n\n", "no actions" },
        { "0F0,0X0\n", "row 0, cell 1 ('0X0'): unknown action 'X'" },
        { "0F0,0FWD0\n", "unknown action 'FWD'" },
        { "0F0,0SEND_FX\n", "row 0, cell 1 ('0SEND_FX')" },
        { "0F0,(0F1;1B0)OVERLAP\n", "unknown action 'OVERLAP' after a group" },
        { "0F0,(0F1;1B0\n", "'(' without ')'" },
        { "0F0,( ; )OVERLAP_F_B\n", "empty OVERLAP_F_B group" },
        { "0F0,(0F1;(1B0))OVERLAP_F_B\n", "nested groups" },
        { "0F0,\x1b[31m0F1\n", "'\\x1b[31m0F1'" },
        { "0F0\n1F0,F1\n", "row 1, cell 1 ('F1')" },
        { "0F0,0F\n", "row 0, cell 1 ('0F')" },
        { "0F0,0F1x\n", "row 0, cell 1 ('0F1x')" },
        { "0F0,0 F1\n", "row 0, cell 1 ('0 F1')" },
        { "0F0,0B0\n2F0,2B0\n", "stage 1 appears on no row" },
        { "0F0,0F9999999999\n", "row 0, cell 1" },
        { "0F0,-1F0\n", "row 0, cell 1 ('-1F0')" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sched_t *s = NULL;
        zb_err err = { "" };
        ck_assert_msg(torch_csv_read(cases[i].csv, strlen(cases[i].csv), 0, &s, &err) == -1,
                      "case %zu accepted", i);
        ck_assert_ptr_null(s);
        ck_assert_msg(strstr(err.msg, cases[i].frag), "case %zu: '%s' lacks '%s'", i, err.msg, cases[i].frag);
    }
}
END_TEST

/* What PyTorch itself writes: a compute_comms dump with transfers, FSDP
 * steps and a DualPipeV overlap group imports as its compute order, and
 * the dropped and expanded actions are counted. */
START_TEST(pytorch_comms_and_overlap)
{
    const char *csv =
        "0UNSHARD,0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1,0REDUCE_GRAD,0RESHARD\n"
        "1UNSHARD,1RECV_F0,1F0,1RECV_F1,(1F1;1B0)OVERLAP_F_B,1SEND_B0,1B1,1SEND_B1,"
        "1WAIT_SEND_B1,1REDUCE_GRAD,1RESHARD\n";
    sched_t *s = NULL;
    zb_err err = { "" };
    torch_csv_stats st = { -1, -1 };
    ck_assert_msg(torch_csv_read_stats(csv, strlen(csv), 0, &s, &st, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(st.dropped_comm, 15);
    ck_assert_int_eq(st.overlaps_expanded, 1);
    ck_assert_int_eq(s->n_devices, 2);
    ck_assert_int_eq(s->n_micro, 2);
    ck_assert_int_eq(s->dev[0].n_ops, 4);
    ck_assert_int_eq(s->dev[1].n_ops, 4);
    /* The group's forward runs before its backward. */
    ck_assert_int_eq(s->dev[1].ops[1].kind, OP_F);
    ck_assert_int_eq(s->dev[1].ops[1].mb, 1);
    ck_assert_int_eq(s->dev[1].ops[2].kind, OP_BW);
    ck_assert_int_eq(s->dev[1].ops[2].mb, 0);
    ck_assert_int_eq(sched_validate(s, &err), 0);
    sched_free(s);
    /* A compute action needs its micro-batch even though PyTorch's regex
     * lets the field be empty; a communication action does not. */
    const char *no_mb = "0F0,0B\n";
    ck_assert_int_eq(torch_csv_read(no_mb, strlen(no_mb), 0, &s, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "needs its micro-batch"));
}
END_TEST

START_TEST(not_nul_terminated_and_blank_rows)
{
    /* An empty middle row is an idle rank; a missing final newline is fine. */
    const char text[] = "0F0,0B0\n\n2F0,2B0XXXX";
    sched_t *s = NULL;
    zb_err err = { "" };
    ck_assert_int_eq(torch_csv_read(text, strlen(text) - 4, 0, &s, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "stage 1 appears on no row"));
    const char ok[] = "0F0,0B0\n\n1F0,1B0";
    ck_assert_int_eq(torch_csv_read(ok, sizeof ok - 1, 0, &s, &err), 0);
    ck_assert_int_eq(s->n_devices, 3);
    ck_assert_int_eq(s->dev[1].n_ops, 0);
    ck_assert_int_eq(s->stage_device[1], 2);
    ck_assert_int_eq(sched_validate(s, &err), 0);
    sched_free(s);
}
END_TEST

/* PyTorch 2.15's own Schedule1F1B order for 4 ranks and 8 micro-batches
 * (Schedule1F1B._get_pipeline_order, as _dump_csv writes it): its last
 * rank numbers its forwards 1..8 instead of 0..7.  Import must say which
 * action is out of which range on which rank, not only that 8 is too
 * large or that stage 0 lacks micro-batch 8. */
START_TEST(torch_1f1b_dump_off_by_one)
{
    static const char dump[] =
        "0F0,0F1,0F2,0F3,0B0,0F4,0B1,0F5,0B2,0F6,0B3,0F7,0B4,0B5,0B6,0B7,0REDUCE_GRAD,0WAIT_REDUCE_GRAD\n"
        "1F0,1F1,1F2,1B0,1F3,1B1,1F4,1B2,1F5,1B3,1F6,1B4,1F7,1B5,1B6,1B7,1REDUCE_GRAD,1WAIT_REDUCE_GRAD\n"
        "2F0,2F1,2B0,2F2,2B1,2F3,2B2,2F4,2B3,2F5,2B4,2F6,2B5,2F7,2B6,2B7,2REDUCE_GRAD,2WAIT_REDUCE_GRAD\n"
        "3F1,3B0,3F2,3B1,3F3,3B2,3F4,3B3,3F5,3B4,3F6,3B5,3F7,3B6,3F8,3B7,3REDUCE_GRAD,3WAIT_REDUCE_GRAD\n";
    sched_t *s = NULL;
    zb_err err = { "" };
    ck_assert_int_eq(torch_csv_read(dump, strlen(dump), 8, &s, &err), -1);
    ck_assert_str_eq(err.msg, "row 3 (rank 3), cell 14 (3F8): micro-batch 8 is outside 0..7 for "
                     "--microbatches 8 (the CSV's micro-batches reach 8)");
    ck_assert_int_eq(torch_csv_read(dump, strlen(dump), 0, &s, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "stage 0 (row 0, rank 0) has no forward of micro-batch 8"));
    ck_assert_ptr_nonnull(strstr(err.msg, "row 3 (rank 3), cell 14 (3F8)"));
    ck_assert_ptr_nonnull(strstr(err.msg, "range 0..8"));
    /* A stage or micro-batch beyond what a file may hold names its range. */
    ck_assert_int_eq(torch_csv_read("0F16777216", 10, 0, &s, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "micro-batch 16777216 is outside 0..16777215"));
    ck_assert_ptr_nonnull(strstr(err.msg, "rank 0"));
}
END_TEST

int main(void)
{
    Suite *su = suite_create("torch_csv");
    TCase *tc = tcase_create("torch_csv");
    tcase_add_test(tc, round_trip_fixtures);
    tcase_add_test(tc, round_trip_every_generator);
    tcase_add_test(tc, pytorch_spelling);
    tcase_add_test(tc, rejects_bad_csv);
    tcase_add_test(tc, pytorch_comms_and_overlap);
    tcase_add_test(tc, not_nul_terminated_and_blank_rows);
    tcase_add_test(tc, torch_1f1b_dump_off_by_one);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
