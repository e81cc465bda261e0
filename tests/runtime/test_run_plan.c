/*
 * test_run_plan.c: `zbsched run` on a file `zbsched search` planned
 * (src/cli/run_plan.h).  Without --model / --batch-size it trains the
 * plan's model with the plan's micro-batch and layer split (checked on an
 * uneven split, [1,2,2,1], which the even split would not give); a
 * contradicting --batch-size is refused with one line; another --model
 * trains with a warning and the even split; the default search's Llama-3
 * 8B plan gets one line naming the model and the memory it needs, not a
 * layer-count error about `tiny` (the meson test runtime_run_plan_small_host,
 * which reads SKIP on a host with room for that model), and a GPT-style
 * plan one line saying the CPU kernels are Llama-style only.  Every run starts in / to show that the
 * default data path does not depend on the working directory, and
 * ZBSCHED_DATA overrides it.  A plan's recompute_levels (none, full,
 * mlp per stage) train to the losses of no recompute, bit for bit, and bad
 * levels are refused in one line.
 */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "tests/common/ck_skip.h"
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

/* Writes dir/rc.json: dir/plan.json with recompute_stages `stages` and,
 * when levels is not NULL, recompute_levels `levels` (JSON arrays), and
 * with micro-batch `micro_batch` when it is not 0. */
static void plan_with_levels(const char *stages, const char *levels, int micro_batch)
{
    char path[128], *text = NULL;
    snprintf(path, sizeof path, "%s/plan.json", dir);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    size_t cap = 1 << 22, n = 0;
    text = malloc(cap);
    n = fread(text, 1, cap - 1, f);
    fclose(f);
    text[n] = '\0';
    cJSON *o = cJSON_Parse(text);
    free(text);
    ck_assert_ptr_nonnull(o);
    cJSON *plan = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "meta"), "plan");
    if (!plan)
        plan = cJSON_GetObjectItemCaseSensitive(o, "plan");
    ck_assert_ptr_nonnull(plan);
    cJSON_ReplaceItemInObjectCaseSensitive(plan, "recompute_stages", cJSON_Parse(stages));
    if (levels)
        cJSON_AddItemToObject(plan, "recompute_levels", cJSON_Parse(levels));
    if (micro_batch) {
        cJSON_ReplaceItemInObjectCaseSensitive(plan, "micro_batch", cJSON_CreateNumber(micro_batch));
        cJSON *model = cJSON_GetObjectItemCaseSensitive(o, "model");
        if (!model)
            model = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "meta"), "model");
        ck_assert_ptr_nonnull(model);
        cJSON_ReplaceItemInObjectCaseSensitive(model, "micro_batch", cJSON_CreateNumber(micro_batch));
    }
    char *out = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    snprintf(path, sizeof path, "%s/rc.json", dir);
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(out, f);
    fclose(f);
    free(out);
}

/* The text of the "losses" array and of "val_loss" in a run's JSON. */
static void losses_text(const char *json, char *buf, size_t len)
{
    cJSON *o = cJSON_Parse(json);
    ck_assert_msg(o != NULL, "not JSON: %s", json);
    char *l = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(o, "losses"));
    char *v = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(o, "val_loss"));
    snprintf(buf, len, "%s %s", l, v);
    free(l);
    free(v);
    cJSON_Delete(o);
}

/* A plan whose stages recompute at the MLP level, full level and not at
 * all (recompute_levels) trains to the same losses, bit for bit, as the
 * plan without recompute; a plan without recompute_levels still loads
 * (its recompute_stages alone mean full recompute); a bad or contradicting
 * level is refused in one line. */
START_TEST(recompute_levels_train_the_same_losses)
{
    make_plan();
    char want[1024], got[1024];
    ck_assert_msg(zb("run %s/plan.json --steps 2 --eval-windows 2 --json -q", dir) == 0, "%s", err_text);
    losses_text(out_text, want, sizeof want);
    plan_with_levels("[true, true, true, false]", "[\"mlp\", \"full\", \"mlp\", \"none\"]", 0);
    ck_assert_msg(zb("run %s/rc.json --steps 2 --eval-windows 2 --json -q", dir) == 0, "%s", err_text);
    losses_text(out_text, got, sizeof got);
    ck_assert_str_eq(got, want);
    plan_with_levels("[true, false, true, false]", NULL, 0);
    ck_assert_msg(zb("run %s/rc.json --steps 2 --eval-windows 2 --json -q", dir) == 0, "%s", err_text);
    losses_text(out_text, got, sizeof got);
    ck_assert_str_eq(got, want);
    plan_with_levels("[true, true, true, false]", "[\"mlp\", \"half\", \"mlp\", \"none\"]", 0);
    ck_assert_int_eq(zb("run %s/rc.json --steps 1", dir), 1);
    cli_assert_one_line(err_text, "recompute_levels[1] is not");
    plan_with_levels("[true, false, true, false]", "[\"mlp\", \"full\", \"mlp\", \"none\"]", 0);
    ck_assert_int_eq(zb("run %s/rc.json --steps 1", dir), 1);
    cli_assert_one_line(err_text, "contradicts recompute_stages[1]");
}
END_TEST

/* The activations `run` refuses with, in GB ("activations 1.2 TB" read as
 * 1200), for dir/rc.json. */
static double refused_activations_gb(void)
{
    ck_assert_int_eq(zb("run %s/rc.json --steps 1", dir), 1);
    cli_assert_one_line(err_text, "the run needs about");
    const char *a = strstr(err_text, "activations ");
    ck_assert_ptr_nonnull(a);
    char unit[8] = "";
    double v = 0;
    ck_assert_int_eq(sscanf(a, "activations %lf %7s", &v, unit), 2);
    return !strcmp(unit, "TB") ? v * 1000 : !strcmp(unit, "GB") ? v : v / 1000;
}

/* The run's memory check knows the level: at a micro-batch too large for
 * any machine, the activations it refuses with fall from no recompute to
 * the MLP level to full recompute. */
START_TEST(memory_check_knows_the_recompute_level)
{
    make_plan();
    plan_with_levels("[false, false, false, false]", NULL, 65536);
    double none = refused_activations_gb();
    plan_with_levels("[true, true, true, true]", "[\"mlp\", \"mlp\", \"mlp\", \"mlp\"]", 65536);
    double mlp = refused_activations_gb();
    plan_with_levels("[true, true, true, true]", NULL, 65536);
    double full = refused_activations_gb();
    ck_assert_msg(full < mlp && mlp < none, "activations: full %g, mlp %g, none %g GB", full, mlp, none);
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

/* Above this much available memory the default search's Llama-3 8B plan
 * (fp32 weights, gradients and AdamW state) would start training instead of
 * being refused, so default_search_plan_says_what_it_needs cannot run. */
#define SMALL_HOST_KB (150ULL * 1000 * 1000)

/* The ck_skip_probe of the "small_host" Suite: MemAvailable over
 * SMALL_HOST_KB is a reason. */
static int host_too_big(char *why, size_t cap)
{
    FILE *f = fopen("/proc/meminfo", "r");
    unsigned long long kb = 0;
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    if (kb <= SMALL_HOST_KB)
        return 0;
    snprintf(why, cap,
             "%.0f GB available: the Llama-3 8B plan would train here, not be refused "
             "(needs under %.0f GB)",
             kb / 1e6, SMALL_HOST_KB / 1e6);
    return 1;
}

START_TEST(default_search_plan_says_what_it_needs)
{
    int rc = zb("search --mem 40G --vocab plain -q -o %s/best.json", dir); /* the runtime checks of a plain plan */
    ck_assert_msg(rc == 0, "search failed: %s", err_text);
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

static TCase *plan_case(const char *name)
{
    TCase *tc = tcase_create(name);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    return tc;
}

static Suite *run_plan_suite(void)
{
    Suite *su = suite_create("run_plan");
    TCase *tc = plan_case("plan");
    tcase_add_test(tc, trains_the_planned_split_and_micro_batch);
    tcase_add_test(tc, contradicting_batch_size_is_refused);
    tcase_add_test(tc, recompute_levels_train_the_same_losses);
    tcase_add_test(tc, memory_check_knows_the_recompute_level);
    tcase_add_test(tc, another_model_warns_and_splits_evenly);
    tcase_add_test(tc, data_path_from_the_environment);
    tcase_add_test(tc, compare_prints_one_line_of_numbers);
    tcase_add_test(tc, gpt_style_model_is_refused_in_one_line);
    suite_add_tcase(su, tc);
    return su;
}

/* The case that needs a host too small for Llama-3 8B (tests/common/ck_skip.h). */
static Suite *small_host_suite(void)
{
    Suite *su = suite_create("run_plan_small_host");
    TCase *tc = plan_case("small_host");
    tcase_add_test(tc, default_search_plan_says_what_it_needs);
    suite_add_tcase(su, tc);
    return su;
}

int main(int argc, char **argv)
{
    return ck_main_with_optional(argc, argv, run_plan_suite, "small_host", small_host_suite,
                                 host_too_big);
}
