/*
 * test_run_plan.c: `zbsched run` on a file `zbsched search` planned
 * (src/cli/run_plan.h).  Without --model / --batch-size it trains the
 * plan's model with the plan's micro-batch and layer split (checked on an
 * uneven split, [1,2,2,1], which the even split would not give); a
 * contradicting --batch-size is refused with one line; another --model
 * trains with a warning and the even split; the default search's Llama-3
 * 8B plan gets one line naming the model and the memory it needs, not a
 * layer-count error about `tiny`, and a GPT-style plan one line saying the
 * CPU kernels are Llama-style only.  Every run starts in / to show that the
 * default data path does not depend on the working directory, and
 * ZBSCHED_DATA overrides it.
 */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "tests/common/cli_run.h"

static char dir[64];
static char out_text[1 << 16], err_text[1 << 14];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/zb_test_plan_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* Runs `zbsched ARGS` from / with an optional environment prefix. */
static int zb_env(const char *prefix, const char *fmt, ...)
{
    char args[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    char pre[256];
    snprintf(pre, sizeof pre, "timeout 120 %s", prefix ? prefix : "");
    return cli_run("/", pre, args, out_text, sizeof out_text, err_text, sizeof err_text);
}
#define zb(...) zb_env(NULL, __VA_ARGS__)

/* Plans a 6-layer tiny model on 4 devices with the paper's split, which
 * gives the ends one layer fewer: [1, 2, 2, 1] at micro-batch 1. */
static void make_plan(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/tiny6.json", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"base\": \"tiny\", \"name\": \"tiny6\", \"n_layers\": 6}\n", f);
    fclose(f);
    int rc = zb("search --model %s/tiny6.json --gpus 4 --stages 4 --global-batch 8 --max-micro-batch 1 --mem 4G --split paper "
                "--recompute off -o %s/plan.json -q", dir, dir);
    ck_assert_msg(rc == 0, "search failed: %s", err_text);
}

/* The integer array `key` of the JSON object in text, into v (n entries). */
static int json_ints(const char *text, const char *key, int *v, int cap)
{
    cJSON *o = cJSON_Parse(text);
    ck_assert_msg(o != NULL, "not JSON: %s", text);
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a)
        if (n < cap)
            v[n++] = (int)e->valuedouble;
    cJSON_Delete(o);
    return n;
}

static int json_int(const char *text, const char *key)
{
    cJSON *o = cJSON_Parse(text);
    ck_assert_msg(o != NULL, "not JSON: %s", text);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    ck_assert(cJSON_IsNumber(v));
    int r = (int)v->valuedouble;
    cJSON_Delete(o);
    return r;
}

START_TEST(trains_the_planned_split_and_micro_batch)
{
    make_plan();
    int rc = zb("run %s/plan.json --steps 2 --eval-windows 2 --json -q", dir);
    ck_assert_msg(rc == 0, "run failed: %s", err_text);
    int split[8];
    ck_assert_int_eq(json_ints(out_text, "layers_per_stage", split, 8), 4);
    ck_assert_int_eq(split[0], 1);
    ck_assert_int_eq(split[1], 2);
    ck_assert_int_eq(split[2], 2);
    ck_assert_int_eq(split[3], 1);
    ck_assert_int_eq(json_int(out_text, "batch_size"), 1);
    ck_assert_msg(err_text[0] == '\0', "unexpected stderr: %s", err_text);
    /* the same model named again changes nothing */
    rc = zb("run %s/plan.json --model %s/tiny6.json --batch-size 1 --steps 1 --eval-windows 1 --json -q",
            dir, dir);
    ck_assert_msg(rc == 0, "run failed: %s", err_text);
    ck_assert_int_eq(json_ints(out_text, "layers_per_stage", split, 8), 4);
    ck_assert_int_eq(split[1], 2);
}
END_TEST

START_TEST(contradicting_batch_size_is_refused)
{
    make_plan();
    int rc = zb("run %s/plan.json --steps 1 --batch-size 4", dir);
    ck_assert_int_eq(rc, 2);
    cli_assert_one_line(err_text, "contradicts");
    ck_assert_ptr_nonnull(strstr(err_text, "micro-batch 1"));
}
END_TEST

START_TEST(another_model_warns_and_splits_evenly)
{
    make_plan();
    /* tiny: 4 layers, micro-batch 4; the plan's split is for 6 layers */
    int rc = zb("run %s/plan.json --model tiny --steps 1 --eval-windows 1 --json -q", dir);
    ck_assert_msg(rc == 0, "run failed: %s", err_text);
    ck_assert_int_eq(cli_lines(err_text), 1);
    ck_assert_ptr_nonnull(strstr(err_text, "warning"));
    ck_assert_ptr_nonnull(strstr(err_text, "planned for model tiny6"));
    int split[8];
    ck_assert_int_eq(json_ints(out_text, "layers_per_stage", split, 8), 4);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(split[i], 1);
    ck_assert_int_eq(json_int(out_text, "batch_size"), 4);
}
END_TEST

START_TEST(default_search_plan_says_what_it_needs)
{
    int rc = zb("search --mem 40G --vocab plain -q -o %s/best.json", dir); /* the runtime checks of a plain plan */
    ck_assert_msg(rc == 0, "search failed: %s", err_text);
    FILE *f = fopen("/proc/meminfo", "r");
    unsigned long long kb = 0;
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    if (kb > 150ULL * 1000 * 1000)
        return; /* a machine that could hold Llama-3 8B in fp32 would start training */
    rc = zb("run %s/best.json --steps 1", dir);
    ck_assert_int_eq(rc, 1);
    cli_assert_one_line(err_text, "llama3-8b");
    ck_assert_ptr_nonnull(strstr(err_text, "GB of host memory"));
    ck_assert_ptr_nonnull(strstr(err_text, "GB are available"));
    ck_assert_ptr_nonnull(strstr(err_text, "\"n_layers\": "));
    ck_assert_ptr_null(strstr(err_text, "tiny has"));
}
END_TEST

START_TEST(data_path_from_the_environment)
{
    char g[128];
    snprintf(g, sizeof g, "gen zb-h1 -p 2 -m 2 -o %s/h1.json", dir);
    ck_assert_int_eq(zb("%s", g), 0);
    int rc = zb_env("env ZBSCHED_DATA=/nonexistent/text.txt", "run %s/h1.json --steps 1 -q", dir);
    ck_assert_int_eq(rc, 1);
    cli_assert_one_line(err_text, "/nonexistent/text.txt");
}
END_TEST

START_TEST(compare_prints_one_line_of_numbers)
{
    make_plan();
    int rc = zb("run %s/plan.json --steps 1 --eval-windows 1 -q --trace %s/trace.json", dir, dir);
    ck_assert_msg(rc == 0, "run failed: %s", err_text);
    rc = zb("render %s/trace.json --compare %s/plan.json -o %s/c.svg", dir, dir, dir);
    ck_assert_msg(rc == 0, "render failed: %s", err_text);
    ck_assert_int_eq(cli_lines(out_text), 1);
    ck_assert_ptr_nonnull(strstr(out_text, "iteration: predicted "));
    ck_assert_ptr_nonnull(strstr(out_text, " ms, measured "));
    ck_assert_ptr_nonnull(strstr(out_text, "measured/predicted "));
    /* the plan's activation deltas are the cost model's bf16 estimate, the
     * measurement fp32: both are printed, in MB */
    ck_assert_ptr_nonnull(strstr(out_text, "peak activations: predicted "));
    /* a prediction in abstract units: no ratio, and how to get one scale */
    ck_assert_int_eq(zb("gen zb-h1 -p 2 -m 2 -o %s/h1.json", dir), 0);
    ck_assert_int_eq(zb("run %s/h1.json --steps 1 --eval-windows 1 -q --trace %s/t1.json", dir, dir), 0);
    rc = zb("render %s/h1.json --compare %s/t1.json -o %s/c1.svg", dir, dir, dir);
    ck_assert_int_eq(rc, 0);
    ck_assert_ptr_nonnull(strstr(out_text, "the units differ"));
    ck_assert_ptr_nonnull(strstr(out_text, "search --profile"));
}
END_TEST

START_TEST(gpt_style_model_is_refused_in_one_line)
{
    ck_assert_int_eq(zb("search --model 1.5B --gpu A100-80G --global-batch 48 --mem 80G --vocab plain -q -o %s/g.json",
                        dir), 0);
    int rc = zb("run %s/g.json --steps 1", dir);
    ck_assert_int_eq(rc, 1);
    cli_assert_one_line(err_text, "Llama-style models only");
    ck_assert_ptr_nonnull(strstr(err_text, "swiglu 0"));
    ck_assert_ptr_nonnull(strstr(err_text, "small.json"));
}
END_TEST

int main(void)
{
    Suite *su = suite_create("run_plan");
    TCase *tc = tcase_create("plan");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, trains_the_planned_split_and_micro_batch);
    tcase_add_test(tc, contradicting_batch_size_is_refused);
    tcase_add_test(tc, another_model_warns_and_splits_evenly);
    tcase_add_test(tc, default_search_plan_says_what_it_needs);
    tcase_add_test(tc, data_path_from_the_environment);
    tcase_add_test(tc, compare_prints_one_line_of_numbers);
    tcase_add_test(tc, gpt_style_model_is_refused_in_one_line);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
