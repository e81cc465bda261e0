/*
 * test_vocab_cli.c: vocabulary parallelism through the zbsched program:
 * `gen KIND --vocab parallel` for every kind family, its bad flags (one
 * line, no file), the commands that must refuse such a file (export to
 * PyTorch's CSV, run) and the three renderers' marks for the passes and
 * barriers.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/sched_io.h"
#include "src/validate.h"
#include "tests/common/cli_run.h"

static char out_buf[1 << 16], err_buf[4096];

/* A fresh scratch directory per test. */
static char dir[64];

static void setup(void)
{
    cli_scratch_new("vocab_cli", dir, sizeof dir);
}

static void teardown(void)
{
    cli_scratch_free(dir);
}

static int run(const char *args)
{
    return cli_run(dir, NULL, args, out_buf, sizeof out_buf, err_buf, sizeof err_buf);
}

#define slurp(name) cli_slurp(dir, name)

START_TEST(gen_every_family)
{
    static const char *const cmds[] = {
        "gen gpipe -p 2 -m 4 --vocab parallel -o s.json",
        "gen 1f1b -p 2 -m 4 --vocab parallel -o s.json",
        "gen zb-h1 -p 3 -m 6 --vocab parallel --vocab-variant 2 --tc1 0.2 -o s.json",
        "gen zb-h2 -p 2 -m 4 --vocab parallel -o s.json",
        "gen zb-v -p 2 -m 4 --vocab parallel --ts 1 --tt 0.25 --tc0 0.1 -o s.json",
        "gen interleaved -p 2 -m 4 --vocab parallel -o s.json",
        "gen interleaved-zb -p 2 -m 4 --vocab parallel -o s.json",
        "gen zb-auto -p 3 -m 6 --mem-limit 9 --vocab parallel -o s.json",
        "gen v-half -p 4 -m 8 --vocab parallel -o s.json",
        "gen ilp -p 2 -m 3 --mem-limit 8 --time-limit 5 --vocab parallel -o s.json",
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        ck_assert_msg(run(cmds[i]) == 0, "%s: %s", cmds[i], err_buf);
        char path[256];
        snprintf(path, sizeof path, "%s/s.json", dir);
        sched_t *s = NULL;
        zb_err err = { "" };
        ck_assert_msg(sched_load_file(path, &s, &err) == 0, "%s: %s", cmds[i], err.msg);
        ck_assert_msg(sched_has_vocab(s) && sched_validate(s, &err) == 0, "%s: %s", cmds[i], err.msg);
        sched_free(s);
        ck_assert_msg(run("simulate s.json") == 0, "%s: simulate: %s", cmds[i], err_buf);
    }
    /* --vocab plain (the default) still writes version 1. */
    ck_assert_int_eq(run("gen 1f1b -p 2 -m 4 --vocab plain -o p.json"), 0);
    char *text = slurp("p.json");
    ck_assert_ptr_nonnull(strstr(text, "\"version\": 1"));
    free(text);
}
END_TEST

START_TEST(gen_bad_flags)
{
    static const struct {
        const char *args, *want;
    } cases[] = {
        { "gen 1f1b --vocab wide -o s.json", "--vocab: 'wide' is not plain or parallel" },
        { "gen 1f1b --vocab parallel --vocab-variant 3 -o s.json", "--vocab-variant" },
        { "gen 1f1b --vocab parallel --ts -1 -o s.json", "--ts: -1 must not be negative" },
        { "gen 1f1b --vocab parallel --tc0 x -o s.json", "--tc0" },
        { "gen zb-auto -p 3 -m 6 --mem-limit 4.5 --vocab parallel --ms 3 -o s.json",
          "over its memory limit" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ck_assert_msg(run(cases[i].args) != 0, "%s succeeded", cases[i].args);
        cli_assert_one_line(err_buf, cases[i].want);
        char path[256];
        snprintf(path, sizeof path, "%s/s.json", dir);
        cli_assert_no_file(path);
    }
}
END_TEST

START_TEST(refused_by_export_and_run)
{
    ck_assert_int_eq(run("gen 1f1b -p 2 -m 4 --vocab parallel -o s.json"), 0);
    ck_assert(run("export s.json -o s.csv") != 0);
    cli_assert_one_line(err_buf, "PyTorch's pipelining CSV cannot express vocabulary parallelism");
    char path[256];
    snprintf(path, sizeof path, "%s/s.csv", dir);
    cli_assert_no_file(path);
    /* Both runtimes take it (the CPU trains it, tests/runtime/
     * test_vocab_run.c; the GPU's passes are tests/cuda's): the run gets
     * past the plan and stops, in one line, at the bogus data path. */
    ck_assert(run("run s.json --model tiny --steps 1 --device cuda --data /nonexistent") != 0);
    cli_assert_one_line(err_buf, "/nonexistent");
}
END_TEST

START_TEST(renderers_mark_passes)
{
    ck_assert_int_eq(run("gen zb-h1 -p 2 -m 3 --vocab parallel --vocab-variant 2 --tc0 0.2 "
                         "--tc1 0.1 -o s.json"), 0);
    ck_assert_msg(run("render s.json -o s.svg") == 0, "%s", err_buf);
    char *svg = slurp("s.svg");
    ck_assert_ptr_nonnull(strstr(svg, "class=\"op op-S\""));
    ck_assert_ptr_nonnull(strstr(svg, "class=\"op op-T\""));
    ck_assert_ptr_nonnull(strstr(svg, "S vocabulary pass (output shard)"));
    ck_assert_ptr_nonnull(strstr(svg, "barrier C0/C1 ends"));
    ck_assert_ptr_nonnull(strstr(svg, "C1 of micro-batch 2 ends"));
    ck_assert_ptr_nonnull(strstr(svg, "#8e5cd9")); /* S's own colour */
    free(svg);
    ck_assert_msg(run("render s.json --format trace -o t.json") == 0, "%s", err_buf);
    char *trace = slurp("t.json");
    ck_assert_ptr_nonnull(strstr(trace, "\"name\":\"all-reduce\""));
    ck_assert_ptr_nonnull(strstr(trace, "\"name\":\"C1 2\""));
    ck_assert_ptr_nonnull(strstr(trace, "\"shard\":1"));
    cJSON *j = cJSON_Parse(trace);
    ck_assert_ptr_nonnull(j); /* still valid JSON */
    cJSON_Delete(j);
    free(trace);
    ck_assert_msg(run("render s.json --format dag -o d.svg") == 0, "%s", err_buf);
    char *dag = slurp("d.svg");
    ck_assert_ptr_nonnull(strstr(dag, "C0 2"));
    ck_assert_ptr_nonnull(strstr(dag, "C1 0"));
    free(dag);
}
END_TEST

/* search: --vocab is checked; plain ranks no vocabulary plan, parallel
 * only those, auto (the default) both and says which kind won (1.5B on 4
 * GPUs: about a second each). */
START_TEST(search_flag)
{
    static const char job[] = "search --mem 20G --model 1.5B --gpus 4 --stages 4 --global-batch 16 "
                              "--split balanced --top 400 -o s.json";
    char args[256];
    snprintf(args, sizeof args, "%s --vocab wide", job);
    ck_assert(run(args) != 0);
    cli_assert_one_line(err_buf, "--vocab: 'wide' is not auto, plain or parallel");
    snprintf(args, sizeof args, "%s --vocab plain", job);
    ck_assert_msg(run(args) == 0, "%s", err_buf);
    ck_assert_ptr_null(strstr(out_buf, "+vocab-"));
    ck_assert_ptr_null(strstr(out_buf, "vocabulary parallelism "));
    ck_assert_msg(run(job) == 0, "%s", err_buf);
    ck_assert_ptr_nonnull(strstr(out_buf, "  vocabulary parallelism "));
    ck_assert_ptr_nonnull(strstr(out_buf, "  with vocab parallelism "));
    snprintf(args, sizeof args, "%s --vocab parallel", job);
    ck_assert_msg(run(args) == 0, "%s", err_buf);
    ck_assert_ptr_nonnull(strstr(out_buf, "+vocab-"));
    const char *row = strstr(out_buf, "  vocabulary parallelism  "); /* the why row, its columns aligned */
    ck_assert_ptr_nonnull(row);
    ck_assert_int_eq(strncmp(row + strspn(row + 24, " ") + 24, "chosen", 6), 0);
    char *plan = slurp("s.json");
    ck_assert_ptr_nonnull(strstr(plan, "\"vocab\":\"parallel\""));
    free(plan);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("vocab_cli");
    TCase *tc = tcase_create("vocab_cli");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, gen_every_family);
    tcase_add_test(tc, gen_bad_flags);
    tcase_add_test(tc, refused_by_export_and_run);
    tcase_add_test(tc, renderers_mark_passes);
    tcase_add_test(tc, search_flag);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
