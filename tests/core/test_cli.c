/*
 * test_cli.c: the gen, simulate, export and import commands as a user runs
 * them (fork/exec of $ZBSCHED).  Bad input of every kind gives a non-zero
 * exit, exactly one line on stderr and no output file; good input gives the
 * documented output (simulate --json figures, byte-identical round trips
 * through PyTorch CSV for every generator kind).
 */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/sched_io.h"
#include "tests/common/cli_run.h"
#include "tests/core/fixtures.h"

static char tmpdir[] = "/tmp/zb_cli_testXXXXXX";
static char out_text[1 << 16]; /* stdout of the last run */
static char err_text[4096];    /* stderr of the last run */

/* Path of name inside the test's temporary directory (static buffer,
 * rotated so that a few can be alive at once). */
static const char *tmp(const char *name)
{
    static char bufs[8][512];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, 512, "%s/%s", tmpdir, name);
    return b;
}

/* Runs `zbsched ARGS...` (NULL-terminated) with stdin from in_path (or
 * /dev/null), stdout into out_text and stderr into err_text; returns the
 * exit status, or -1 when it did not exit. */
static int run(const char *in_path, ...)
{
    const char *prog = getenv("ZBSCHED");
    ck_assert_msg(prog != NULL, "ZBSCHED is not set (run through meson test)");
    char *argv[64];
    int argc = 0;
    argv[argc++] = (char *)prog;
    va_list ap;
    va_start(ap, in_path);
    const char *a;
    while ((a = va_arg(ap, const char *)) && argc < 63)
        argv[argc++] = (char *)a;
    va_end(ap);
    argv[argc] = NULL;
    return cli_exec(argv, in_path, out_text, sizeof out_text, err_text, sizeof err_text);
}

static void slurp(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* The last run failed cleanly: non-zero exit (not a signal), one line on
 * stderr containing frag, and no output file at out (when given). */
#define EXPECT_CLEAN_FAILURE(rc, frag, out)                                            \
    do {                                                                               \
        ck_assert_msg((rc) > 0, "exit %d, stderr: %s", (rc), err_text);                \
        cli_assert_one_line(err_text, (frag));                                         \
        cli_assert_no_file(out);                                                       \
    } while (0)

static void setup(void)
{
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void teardown(void)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
    strcpy(tmpdir, "/tmp/zb_cli_testXXXXXX");
}

START_TEST(gen_bad_input)
{
    const char *o = tmp("g.json");
    int rc;
    rc = run(NULL, "gen", "nosuch", "-p", "4", "-m", "8", "-o", o, NULL);
    EXPECT_CLEAN_FAILURE(rc, "unknown kind 'nosuch'", o);
    rc = run(NULL, "gen", "1f1b", "-p", "0", "-o", o, NULL);
    EXPECT_CLEAN_FAILURE(rc, "--stages", o);
    rc = run(NULL, "gen", "1f1b", "-p", "-2", "-o", o, NULL);
    EXPECT_CLEAN_FAILURE(rc, "--stages", o);
    rc = run(NULL, "gen", "1f1b", "-m", "abc", "-o", o, NULL);
    EXPECT_CLEAN_FAILURE(rc, "--microbatches: 'abc'", o);
    rc = run(NULL, "gen", "1f1b", "--tf", "-1", "-o", o, NULL);
    EXPECT_CLEAN_FAILURE(rc, "--tf", o);
    rc = run(NULL, "gen", "1f1b", "--tb", "nan", "-o", o, NULL);
    EXPECT_CLEAN_FAILURE(rc, "--tb", o);
    rc = run(NULL, "gen", "1f1b", "--bogus", "-o", o, NULL);
    EXPECT_CLEAN_FAILURE(rc, "unknown option '--bogus'", o);
    rc = run(NULL, "gen", "1f1b", "-o", NULL);
    EXPECT_CLEAN_FAILURE(rc, "needs a value", NULL);
    rc = run(NULL, "gen", NULL);
    EXPECT_CLEAN_FAILURE(rc, "missing KIND", NULL);
    rc = run(NULL, "gen", "zb-auto", "-p", "4", "-o", o, NULL);
    EXPECT_CLEAN_FAILURE(rc, "needs --mem-limit", o);
    rc = run(NULL, "gen", "zb-auto", "-p", "4", "--mem-limit", "8,8", "-o", o, NULL);
    EXPECT_CLEAN_FAILURE(rc, "one per device (4), got 2", o);
    rc = run(NULL, "gen", "zb-auto", "-p", "4", "--mem-limit", "8,x,8,8", "-o", o, NULL);
    EXPECT_CLEAN_FAILURE(rc, "--mem-limit: 'x'", o);
    rc = run(NULL, "gen", "1f1b", "-o", tmp("no/such/dir/g.json"), NULL);
    EXPECT_CLEAN_FAILURE(rc, "cannot create", NULL);
    rc = run(NULL, "gen", "1f1b", "extra", NULL);
    EXPECT_CLEAN_FAILURE(rc, "unexpected argument 'extra'", NULL);
    ck_assert_int_eq(run(NULL, "gen", "--help", NULL), 0);
    ck_assert_ptr_nonnull(strstr(out_text, "usage: zbsched gen"));
}
END_TEST

/* Writes a schedule built from a fixture to path. */
static void save_fixture(sched_t *s, const char *path)
{
    zb_err err = { "" };
    ck_assert_ptr_nonnull(s);
    ck_assert_msg(sched_save_file(s, path, &err) == 0, "%s", err.msg);
    sched_free(s);
}

START_TEST(simulate_bad_input)
{
    const char *f = tmp("bad.json");
    int rc;
    rc = run(NULL, "simulate", tmp("missing.json"), NULL);
    EXPECT_CLEAN_FAILURE(rc, "cannot open", NULL);
    rc = run(NULL, "simulate", NULL);
    EXPECT_CLEAN_FAILURE(rc, "missing FILE", NULL);
    rc = run(NULL, "simulate", "--bogus", f, NULL);
    EXPECT_CLEAN_FAILURE(rc, "unknown option", NULL);
    rc = run(NULL, "simulate", tmpdir, NULL);
    EXPECT_CLEAN_FAILURE(rc, "cannot read", NULL);
    write_text(f, "{\"format\": \"zbsched-schedule\", \"version\": 1, \"devices\"");
    rc = run(NULL, "simulate", f, NULL);
    EXPECT_CLEAN_FAILURE(rc, "truncated", NULL);
    write_text(f, "{\"format\": \"zbsched-schedule\", \"version\": 1, \"devices\": \"two\", "
                  "\"microbatches\": 1, \"stages\": 1, \"placement\": [0], \"costs\": {}, \"ops\": [[]]}");
    rc = run(NULL, "simulate", f, NULL);
    EXPECT_CLEAN_FAILURE(rc, "devices must be a number", NULL);
    write_text(f, "\x01\xff garbage");
    rc = run(NULL, "simulate", f, NULL);
    EXPECT_CLEAN_FAILURE(rc, "malformed JSON", NULL);

    sched_t *s = fixture_1f1b(2, 2, 0);
    sched_push(s, 1, OP_F, 1, 0); /* duplicate */
    save_fixture(s, f);
    rc = run(NULL, "simulate", f, NULL);
    EXPECT_CLEAN_FAILURE(rc, "device 1, op 4 (F0@1): duplicate", NULL);

    s = fixture_1f1b(2, 2, 0);
    s->dev[1].n_ops--; /* missing */
    save_fixture(s, f);
    rc = run(NULL, "simulate", f, NULL);
    EXPECT_CLEAN_FAILURE(rc, "missing backward (B or BW) for stage 1, micro-batch 1", NULL);

    s = sched_new(2, 2, 2); /* cross-device cycle */
    sched_place_interleaved(s);
    sched_push(s, 0, OP_F, 0, 0);
    sched_push(s, 0, OP_BW, 0, 0);
    sched_push(s, 0, OP_F, 0, 1);
    sched_push(s, 0, OP_BW, 0, 1);
    sched_push(s, 1, OP_F, 1, 1);
    sched_push(s, 1, OP_BW, 1, 1);
    sched_push(s, 1, OP_F, 1, 0);
    sched_push(s, 1, OP_BW, 1, 0);
    save_fixture(s, f);
    rc = run(NULL, "simulate", f, "--json", NULL);
    EXPECT_CLEAN_FAILURE(rc, "deadlock", NULL);
    ck_assert_str_eq(out_text, "");
}
END_TEST

START_TEST(simulate_output)
{
    const char *f = tmp("s.json");
    sched_t *s = fixture_1f1b(2, 2, 0);
    sched_set_costs(s, 1, 1, 1, 0.5);
    save_fixture(s, f);
    ck_assert_int_eq(run(NULL, "simulate", f, "--json", NULL), 0);
    cJSON *o = cJSON_Parse(out_text);
    ck_assert_msg(o != NULL, "not JSON: %s", out_text);
    /* Hand-computed in test_sim.c: cost 10, bubble 0.4, peaks 4 and 2. */
    ck_assert_double_eq(cJSON_GetObjectItem(o, "cost")->valuedouble, 10);
    ck_assert_double_eq(cJSON_GetObjectItem(o, "makespan")->valuedouble, 10);
    ck_assert_double_eq_tol(cJSON_GetObjectItem(o, "bubble_rate")->valuedouble, 0.4, 1e-12);
    ck_assert_int_eq(cJSON_GetObjectItem(o, "devices")->valueint, 2);
    ck_assert_int_eq(cJSON_GetObjectItem(o, "microbatches")->valueint, 2);
    cJSON *peak = cJSON_GetObjectItem(o, "peak_memory");
    ck_assert_int_eq(cJSON_GetArraySize(peak), 2);
    ck_assert_double_eq(cJSON_GetArrayItem(peak, 0)->valuedouble, 4);
    ck_assert_double_eq(cJSON_GetArrayItem(peak, 1)->valuedouble, 2);
    ck_assert_ptr_null(cJSON_GetObjectItem(o, "measured"));
    ck_assert_ptr_null(cJSON_GetObjectItem(o, "timeline"));
    cJSON_Delete(o);

    ck_assert_int_eq(run(f, "simulate", "-", "--json", "--timeline", NULL), 0); /* stdin */
    o = cJSON_Parse(out_text);
    cJSON *tl = cJSON_GetObjectItem(o, "timeline");
    ck_assert_int_eq(cJSON_GetArraySize(tl), 2);
    cJSON *op = cJSON_GetArrayItem(cJSON_GetArrayItem(tl, 0), 2);
    ck_assert_str_eq(cJSON_GetObjectItem(op, "op")->valuestring, "BW0@0");
    ck_assert_double_eq(cJSON_GetObjectItem(op, "start")->valuedouble, 5);
    cJSON_Delete(o);

    ck_assert_int_eq(run(NULL, "simulate", f, NULL), 0);
    ck_assert_ptr_nonnull(strstr(out_text, "cost 10 units, makespan 10 units, bubble rate 40.00%"));
    /* Abstract units: activations only, labelled so, in fixed notation. */
    ck_assert_ptr_nonnull(strstr(out_text, "peak activations 4 units on device 0"));
    ck_assert_ptr_null(strstr(out_text, "e+"));
    ck_assert_ptr_null(strstr(out_text, "measured"));

    /* Measured times are shown next to the prediction. */
    s = fixture_1f1b(2, 2, 0);
    for (int d = 0; d < 2; d++) {
        ck_assert_int_eq(sched_lane_alloc_times(s, d), 0);
        for (int i = 0; i < 4; i++) {
            s->dev[d].start[i] = 2.0 * i;
            s->dev[d].end[i] = 2.0 * i + 1.5;
        }
    }
    save_fixture(s, f);
    ck_assert_int_eq(run(NULL, "simulate", f, NULL), 0);
    ck_assert_ptr_nonnull(strstr(out_text, "measured:  cost 7.5 units, makespan 7.5 units"));
    ck_assert_int_eq(run(NULL, "simulate", f, "--json", NULL), 0);
    o = cJSON_Parse(out_text);
    cJSON *m = cJSON_GetObjectItem(o, "measured");
    ck_assert_ptr_nonnull(m);
    ck_assert_double_eq(cJSON_GetObjectItem(m, "cost")->valuedouble, 7.5);
    cJSON_Delete(o);
}
END_TEST

/* Memory as search reports it (issue 29.4): a plan in bytes with static
 * memory prints one total per device, static + activation peak, in GB
 * with the unit, both parts labelled beside it, and a limit (here an
 * activation limit, 996256000 bytes, which becomes static + it) in GB too:
 * never "1.76529e+10" or "limit 9.96256e+08".  The fixture's activation
 * peaks are 2 and 1 GB (test_sim.c's 4 and 2 units at dF = 1 GB). */
START_TEST(simulate_memory_figures)
{
    const char *f = tmp("b.json");
    sched_t *s = fixture_1f1b(2, 2, 0);
    ck_assert_ptr_nonnull(s);
    sched_set_mem(s, 1e9, -0.5e9, -0.5e9);
    snprintf(s->mem_unit, sizeof s->mem_unit, "bytes");
    snprintf(s->time_unit, sizeof s->time_unit, "ms");
    s->mem_static = malloc(2 * sizeof(double));
    s->mem_limit = malloc(2 * sizeof(double));
    s->mem_static[0] = 22.2e9;
    s->mem_static[1] = 21e9;
    s->mem_limit[0] = s->mem_limit[1] = 996256000;
    sched_set_costs(s, 1234.5, 2000, 1000, 17);
    save_fixture(s, f);
    ck_assert_int_eq(run(NULL, "simulate", f, NULL), 0);
    ck_assert_msg(strstr(out_text, "peak memory 24.20 GB on device 0 (static 22.20 GB + "
                                   "activations 2.00 GB)"), "%s", out_text);
    ck_assert_ptr_nonnull(strstr(out_text, "static"));
    ck_assert_ptr_nonnull(strstr(out_text, "activations"));
    ck_assert_ptr_nonnull(strstr(out_text, "peak memory"));
    ck_assert_ptr_nonnull(strstr(out_text, "23.20 GB OVER")); /* 22.2 GB + 0.996 GB */
    ck_assert_ptr_nonnull(strstr(out_text, "22.00 GB"));      /* device 1's total */
    ck_assert_ptr_nonnull(strstr(out_text, "memory: OVER the limit"));
    ck_assert_msg(!strstr(out_text, "e+") && !strstr(out_text, "e-"), "%s", out_text);
    /* The columns line up: every row of the table as long as its header. */
    const char *h = strstr(out_text, "\ndevice") + 1, *nl = strchr(h, '\n');
    size_t width = (size_t)(nl - h);
    for (int row = 0; row < 2; row++) {
        const char *b = nl + 1;
        nl = strchr(b, '\n');
        ck_assert_msg((size_t)(nl - b) == width, "row %d is %zu wide, the header %zu", row,
                      (size_t)(nl - b), width);
    }
    ck_assert_int_eq(run(NULL, "simulate", f, "--json", NULL), 0);
    cJSON *o = cJSON_Parse(out_text);
    ck_assert_double_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "total_peak_memory"), 0)->valuedouble, 24.2e9);
    ck_assert_double_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "static_memory"), 1)->valuedouble, 21e9);
    ck_assert_double_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "peak_memory"), 0)->valuedouble, 2e9);
    ck_assert_double_eq(cJSON_GetObjectItem(o, "total_peak_memory_max")->valuedouble, 24.2e9);
    cJSON_Delete(o);
}
END_TEST

START_TEST(export_import_bad_input)
{
    const char *f = tmp("s.json"), *c = tmp("s.csv"), *o = tmp("o.json"), *oc = tmp("o.csv");
    int rc;
    save_fixture(fixture_1f1b(2, 2, 0), f);
    rc = run(NULL, "export", f, "--format", "xml", "-o", oc, NULL);
    EXPECT_CLEAN_FAILURE(rc, "unknown format 'xml'", oc);
    rc = run(NULL, "export", tmp("missing.json"), "-o", oc, NULL);
    EXPECT_CLEAN_FAILURE(rc, "cannot open", oc);
    sched_t *s = fixture_1f1b(2, 2, 0);
    s->dev[0].n_ops--;
    save_fixture(s, f);
    rc = run(NULL, "export", f, "-o", oc, NULL);
    EXPECT_CLEAN_FAILURE(rc, "invalid schedule", oc);

    rc = run(NULL, "import", tmp("missing.csv"), "-o", o, NULL);
    EXPECT_CLEAN_FAILURE(rc, "cannot open", o);
    write_text(c, "0F0,0B0\n0F0,1B0\n");
    rc = run(NULL, "import", c, "-o", o, NULL);
    EXPECT_CLEAN_FAILURE(rc, "stage 0 is already on row 0", o);
    write_text(c, "0F0,0Q0\n");
    rc = run(NULL, "import", c, "-o", o, NULL);
    EXPECT_CLEAN_FAILURE(rc, "row 0, cell 1 ('0Q0')", o);
    write_text(c, "0F0,0F1,0B0\n1F0,1B0,1F1,1B1\n"); /* stage 0 lacks B1 */
    rc = run(NULL, "import", c, "-o", o, NULL);
    EXPECT_CLEAN_FAILURE(rc, "invalid schedule", o);
    write_text(c, "0F0,0B0\n1B0,1F0\n"); /* B before F on one rank */
    rc = run(NULL, "import", c, "-o", o, NULL);
    EXPECT_CLEAN_FAILURE(rc, "deadlock", o);
    write_text(c, "0F0,0B0\n1F0,1B0\n");
    rc = run(NULL, "import", c, "--tf", "x", "-o", o, NULL);
    EXPECT_CLEAN_FAILURE(rc, "--tf", o);
    rc = run(NULL, "import", c, "-m", "0", "-o", o, NULL);
    EXPECT_CLEAN_FAILURE(rc, "--microbatches", o);
    rc = run(NULL, "import", NULL);
    EXPECT_CLEAN_FAILURE(rc, "missing CSV", NULL);
    /* m=3 but only micro-batch 0 listed: incomplete, nothing written. */
    rc = run(NULL, "import", c, "-m", "3", "-o", o, NULL);
    EXPECT_CLEAN_FAILURE(rc, "missing", o);
    ck_assert_int_eq(run(NULL, "import", c, "--tf", "2", "--tcomm", "0.5", "--mf", "3", "-o", o, NULL), 0);
    sched_t *t = NULL;
    zb_err err = { "" };
    ck_assert_msg(sched_load_file(o, &t, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(t->n_devices, 2);
    ck_assert_double_eq(t->cost[1].t_f, 2);
    ck_assert_double_eq(t->cost[1].d_f, 3);
    ck_assert_double_eq(t->t_comm, 0.5);
    ck_assert_str_eq(t->name, "torch-csv");
    sched_free(t);

    /* PyTorch's compute_comms dump: the transfers are dropped and said so,
     * on stderr only. */
    write_text(c, "0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,(1F0;1UNSHARD)OVERLAP_F_B,1B0,1SEND_B0\n");
    ck_assert_int_eq(run(NULL, "import", c, "-o", o, NULL), 0);
    ck_assert_msg(strstr(err_text, "dropped 5 communication actions"), "%s", err_text);
    ck_assert_msg(strstr(err_text, "expanded 1 OVERLAP_F_B group"), "%s", err_text);
    ck_assert_msg(sched_load_file(o, &t, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(sched_op_count(t), 4);
    sched_free(t);
}
END_TEST

START_TEST(round_trip_every_kind)
{
    /* Every kind, the solver ones included (the V family without a limit
     * uses its published default; zb-auto gets one). */
    static const char *const kinds[] = { "gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v",
                                         "interleaved-zb", "zb-auto", "v-min", "v-half", "v-zb" };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        const char *a = tmp("a.json"), *b = tmp("b.json"), *c = tmp("a.csv");
        int rc = strcmp(kinds[i], "zb-auto")
                     ? run(NULL, "gen", kinds[i], "-p", "4", "-m", "8", "--tf", "1.5", "--tcomm", "0.1",
                           "-o", a, NULL)
                     : run(NULL, "gen", kinds[i], "-p", "4", "-m", "8", "--tf", "1.5", "--tcomm", "0.1",
                           "--mem-limit", "8", "-o", a, NULL);
        ck_assert_msg(rc == 0, "gen %s failed: %s", kinds[i], err_text);
        ck_assert_int_eq(run(NULL, "export", a, "--format", "torch-csv", "-o", c, NULL), 0);
        ck_assert_int_eq(run(NULL, "import", c, "--tf", "1.5", "--tcomm", "0.1", "--name", kinds[i],
                             "-o", b, NULL), 0);
        char ta[1 << 15], tb[1 << 15];
        slurp(a, ta, sizeof ta);
        slurp(b, tb, sizeof tb);
        /* The solver kinds carry a memory limit and a "solver" record that a
         * compute-only CSV cannot hold; for them the CSV check below (the
         * ops survive) is the round trip. */
        if (i < 7)
            ck_assert_msg(!strcmp(ta, tb), "%s: JSON changed through CSV", kinds[i]);
        /* export to stdout gives the same CSV */
        ck_assert_int_eq(run(NULL, "export", b, NULL), 0);
        slurp(c, ta, sizeof ta);
        ck_assert_str_eq(out_text, ta);
    }
}
END_TEST

int main(void)
{
    Suite *su = suite_create("cli");
    TCase *tc = tcase_create("cli");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, gen_bad_input);
    tcase_add_test(tc, simulate_bad_input);
    tcase_add_test(tc, simulate_output);
    tcase_add_test(tc, simulate_memory_figures);
    tcase_add_test(tc, export_import_bad_input);
    tcase_add_test(tc, round_trip_every_kind);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
