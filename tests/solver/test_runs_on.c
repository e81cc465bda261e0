/*
 * test_runs_on.c: which execution path (cpu, cuda, mpi) runs which plan
 * (src/runs_on.h's one table), the search's reading of a candidate into
 * that table (solver/search_runs_on.h), the plan file's "runs_on" and the
 * note `search` prints when the winner is beyond a path (issue 25).
 *
 * The table's cells change as paths learn features, so the checks read
 * them through the library rather than restating them: the CPU runs
 * everything; a refusal names exactly the features a path lacks; the
 * plan file's list, computed by the search from the candidate's compact
 * recompute fields, equals the list computed again from the written
 * file's recompute_levels and model (two readings, one table); and a path
 * missing from the list gets one note line naming a plan it runs, which
 * that plan really does.
 *
 * Scenario: the zero-bubble paper's 1.5B model on 4 A100s, global batch
 * 16, b up to 2 (a fraction of a second per search).
 */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "solver/search_runs_on.h"
#include "src/plan.h"
#include "src/runs_on.h"
#include "src/sched_io.h"
#include "tests/common/cli_run.h"

START_TEST(test_table)
{
    unsigned all = (1u << ZB_FEAT_COUNT) - 1;
    char why[256];
    /* the CPU backend runs every feature; nothing runs on no path */
    ck_assert(runs_on_can(all, ZB_PATH_CPU, why, sizeof why));
    ck_assert_str_eq(why, "");
    ck_assert(!runs_on_can(0, (zb_path)ZB_PATH_COUNT, why, sizeof why));
    ck_assert_uint_eq(runs_on_mask(0), (1u << ZB_PATH_COUNT) - 1);
    ck_assert_str_eq(runs_on_path_name(ZB_PATH_CPU), "cpu");
    ck_assert_str_eq(runs_on_path_name(ZB_PATH_CUDA), "cuda");
    ck_assert_str_eq(runs_on_path_name(ZB_PATH_MPI), "mpi");
    /* a refusal names exactly what the path lacks, and the mask agrees */
    for (int p = 0; p < ZB_PATH_COUNT; p++) {
        int lacks = 0;
        for (int f = 0; f < ZB_FEAT_COUNT; f++) {
            int ok = runs_on_can(1u << f, (zb_path)p, NULL, 0);
            lacks += !ok;
            ck_assert_int_eq(!!(runs_on_mask(1u << f) >> p & 1), ok);
        }
        int ok = runs_on_can(all, (zb_path)p, why, sizeof why);
        ck_assert_int_eq(ok, lacks == 0);
        if (ok)
            continue;
        ck_assert_ptr_eq(strstr(why, runs_on_path_name((zb_path)p)), why);
        for (int f = 0; f < ZB_FEAT_COUNT; f++)
            ck_assert_int_eq(strstr(why, runs_on_feature_name((zb_feature)f)) != NULL,
                             !runs_on_can(1u << f, (zb_path)p, NULL, 0));
        int commas = 0;
        for (const char *c = why; (c = strchr(c, ',')) != NULL; c++)
            commas++;
        ck_assert_int_eq(commas, lacks - 1);
    }
    /* a tiny buffer is cut, not overrun */
    char small[8];
    memset(small, 'x', sizeof small);
    for (int p = 0; p < ZB_PATH_COUNT; p++)
        if (!runs_on_can(all, (zb_path)p, small, sizeof small))
            ck_assert_uint_lt(strlen(small), sizeof small);
}
END_TEST

START_TEST(test_uses)
{
    zb_model m;
    zb_err err = { { 0 } };
    ck_assert_int_eq(model_preset("tiny", &m, &err), 0);
    int rc[4] = { COST_RC_NONE, COST_RC_NONE, COST_RC_NONE, COST_RC_NONE };
    ck_assert_uint_eq(runs_on_uses(0, rc, 4, &m), 0);
    ck_assert_uint_eq(runs_on_uses(SCHED_VOCAB_1, NULL, 0, NULL), 1u << ZB_FEAT_VOCAB_1);
    ck_assert_uint_eq(runs_on_uses(SCHED_VOCAB_2, NULL, 0, NULL), 1u << ZB_FEAT_VOCAB_2);
    rc[1] = COST_RC_FULL;
    rc[3] = COST_RC_MLP;
    ck_assert_uint_eq(runs_on_uses(0, rc, 4, NULL), 1u << ZB_FEAT_RC_FULL | 1u << ZB_FEAT_RC_MLP);
    ck_assert_uint_eq(runs_on_uses(0, rc, 1, NULL), 0); /* only the first S count */
    ck_assert_int_eq(model_preset("tiny-mem", &m, &err), 0);
    ck_assert_int_gt(m.memory.n_layers, 0);
    ck_assert_uint_eq(runs_on_uses(0, NULL, 0, &m), 1u << ZB_FEAT_MEMORY);

    /* a search candidate's compact recompute fields */
    search_options o;
    search_options_default(&o);
    search_candidate c;
    memset(&c, 0, sizeof c);
    c.pp = c.n_stages = 8;
    ck_assert_uint_eq(search_runs_on_uses(&o, &c), 0);
    c.rc_devices = 3;
    ck_assert_uint_eq(search_runs_on_uses(&o, &c), 1u << ZB_FEAT_RC_FULL);
    c.rc_devices = 0;
    c.rc_stages = c.rc_mlp_stages = SEARCH_RC_ALL; /* every stage at the MLP level */
    ck_assert_uint_eq(search_runs_on_uses(&o, &c), 1u << ZB_FEAT_RC_MLP);
    c.rc_stages = 5, c.rc_mlp_stages = 2; /* s0-2 full, s3-4 mlp */
    ck_assert_uint_eq(search_runs_on_uses(&o, &c), 1u << ZB_FEAT_RC_FULL | 1u << ZB_FEAT_RC_MLP);
    c.rc_stages = SEARCH_RC_ALL, c.rc_mlp_stages = 2; /* the MLP ones lie past the last stage */
    ck_assert_uint_eq(search_runs_on_uses(&o, &c), 1u << ZB_FEAT_RC_FULL);
    c.rc_stages = 0;
    c.vocab = 2;
    ck_assert_uint_eq(search_runs_on_uses(&o, &c), 1u << ZB_FEAT_VOCAB_2);
}
END_TEST

START_TEST(test_best_runs_on)
{
    /* three fits, fastest first: vocab-1, mlp recompute, plain */
    search_options o;
    search_options_default(&o);
    search_candidate c[3];
    memset(c, 0, sizeof c);
    c[0].vocab = 1;
    c[1].rc_stages = c[1].rc_mlp_stages = SEARCH_RC_ALL;
    c[1].n_stages = 4;
    search_result r;
    memset(&r, 0, sizeof r);
    r.n = r.n_fit = 3;
    r.c = c;
    for (int p = 0; p < ZB_PATH_COUNT; p++) {
        int want = -1;
        for (int i = 0; i < 3 && want < 0; i++)
            if (runs_on_can(search_runs_on_uses(&o, &c[i]), (zb_path)p, NULL, 0))
                want = i;
        ck_assert_int_eq(search_best_runs_on(&o, &r, (zb_path)p), want);
        ck_assert_int_ge(want, 0); /* a plain plan runs everywhere */
    }
    ck_assert_int_eq(search_best_runs_on(&o, &r, ZB_PATH_CPU), 0);
    r.n_fit = 0;
    ck_assert_int_eq(search_best_runs_on(&o, &r, ZB_PATH_CPU), -1);
}
END_TEST

/* --- the CLI ------------------------------------------------------------ */

static char out[1 << 22], errb[1 << 14];
static char dir[64];

static void setup(void)
{
    cli_scratch_new("runs_on", dir, sizeof dir);
}

static void teardown(void)
{
    cli_scratch_free(dir);
}

/* Runs the program in the scratch directory, output into out and errb. */
#define zb(...) cli_runf(dir, out, sizeof out, errb, sizeof errb, __VA_ARGS__)

#define JOB "--model 1.5B --gpu A100-80G --gpus 4 --global-batch 16 --max-micro-batch 2 --mem 20G"

/* The written plan's runs_on against the table read from the file itself,
 * and the note lines against it.  Returns the mask of paths it lists. */
static unsigned check_plan(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    sched_t *s = NULL;
    zb_err err = { { 0 } };
    ck_assert_msg(sched_load_file(path, &s, &err) == 0, "%s", err.msg);
    zb_plan p;
    ck_assert_int_eq(plan_read(s, &p, &err), 1);
    unsigned want = runs_on_mask(runs_on_uses_of_file(s, &p));
    const cJSON *ro = cJSON_GetObjectItem(cJSON_GetObjectItem(s->meta, "plan"), "runs_on");
    ck_assert_msg(cJSON_IsArray(ro), "no plan.runs_on in %s", name);
    unsigned got = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, ro) {
        int found = 0;
        for (int q = 0; q < ZB_PATH_COUNT; q++)
            if (cJSON_IsString(e) && !strcmp(e->valuestring, runs_on_path_name((zb_path)q))) {
                ck_assert(!(got >> q & 1));
                got |= 1u << q;
                found = 1;
            }
        ck_assert_msg(found, "unknown path in runs_on");
    }
    ck_assert_uint_eq(got, want);
    ck_assert(got >> ZB_PATH_CPU & 1);
    /* one note per path the winner is beyond, none for the others */
    for (int q = 0; q < ZB_PATH_COUNT; q++) {
        char head[64];
        snprintf(head, sizeof head, "note: %s does not run ", runs_on_path_name((zb_path)q));
        const char *line = strstr(out, head);
        ck_assert_msg(!!line == !(got >> q & 1), "%s: %.4000s", head, out);
        if (line)
            ck_assert_ptr_null(strstr(line + 1, head));
    }
    plan_free(&p);
    sched_free(s);
    return got;
}

START_TEST(cli_plan_and_note)
{
    /* the default search (plain and vocabulary plans ranked together) */
    ck_assert_int_eq(zb("search " JOB " -o a.json"), 0);
    check_plan("a.json");
    /* plain plans without recompute: every path runs them, no note */
    ck_assert_int_eq(zb("search " JOB " --vocab plain --recompute off -o b.json"), 0);
    ck_assert_uint_eq(check_plan("b.json"), (1u << ZB_PATH_COUNT) - 1);
    ck_assert_ptr_null(strstr(out, "note: "));
    /* a vocabulary-parallel winner: each path without the passes gets a
     * note naming the best plan it runs, which is a plain one */
    ck_assert_int_eq(zb("search " JOB " --vocab parallel -o c.json"), 0);
    unsigned got = check_plan("c.json");
    unsigned vocab_paths = runs_on_mask(1u << ZB_FEAT_VOCAB_1) & runs_on_mask(1u << ZB_FEAT_VOCAB_2);
    for (int q = 0; q < ZB_PATH_COUNT; q++) {
        if (got >> q & 1 || vocab_paths >> q & 1)
            continue;
        char head[64];
        snprintf(head, sizeof head, "note: %s does not run V", runs_on_path_name((zb_path)q));
        const char *line = strstr(out, head);
        ck_assert_msg(line, "%s: %.4000s", head, out);
        const char *end = strchr(line, '\n');
        ck_assert_ptr_nonnull(end);
        ck_assert_msg(strstr(line, "the best plan it runs is ") || strstr(line, "no plan it runs "),
                      "%.*s", (int)(end - line), line);
        const char *best = strstr(line, "the best plan it runs is ");
        if (best && best < end) {
            char label[64] = "";
            sscanf(best + strlen("the best plan it runs is "), "%63[^,]", label);
            ck_assert_msg(!strstr(label, "+vocab"), "%s", label);
        }
    }
}
END_TEST

START_TEST(cli_run_refuses_by_table)
{
    /* `run` asks the same table for the path it takes: a plan the CUDA
     * path cannot run is refused in one line naming what it lacks, before
     * the data is read (the path is bogus); one it can run gets past the
     * plan and stops at the data.  The two plans: memory layers (a tiny-mem
     * search) and vocabulary passes (gen --vocab parallel: Vocab-1). */
    ck_assert_int_eq(zb("search --model tiny-mem --gpu %s/tools/cpu-device.json --gpus 2 --mem 4G "
                        "-q -o m.json", getenv("ZB_SOURCE_ROOT")), 0);
    ck_assert_int_eq(zb("gen 1f1b -p 2 -m 4 --vocab parallel -o v.json"), 0);
    static const struct { const char *file; zb_feature f; } plans[] = {
        { "m.json", ZB_FEAT_MEMORY }, { "v.json", ZB_FEAT_VOCAB_1 },
    };
    for (int i = 0; i < 2; i++) {
        ck_assert_int_ne(zb("run %s --steps 1 --device cuda --data /nonexistent", plans[i].file), 0);
        if (runs_on_can(1u << plans[i].f, ZB_PATH_CUDA, NULL, 0)) {
            cli_assert_one_line(errb, "/nonexistent");
        } else {
            char want[96];
            snprintf(want, sizeof want, "cuda does not run %s", runs_on_feature_name(plans[i].f));
            cli_assert_one_line(errb, want);
        }
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("runs_on");
    TCase *lib = tcase_create("library");
    tcase_add_test(lib, test_table);
    tcase_add_test(lib, test_uses);
    tcase_add_test(lib, test_best_runs_on);
    suite_add_tcase(s, lib);
    TCase *cli = tcase_create("cli");
    tcase_set_timeout(cli, 120);
    tcase_add_checked_fixture(cli, setup, teardown);
    tcase_add_test(cli, cli_plan_and_note);
    tcase_add_test(cli, cli_run_refuses_by_table);
    suite_add_tcase(s, cli);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
