/*
 * test_search_layouts.c: the search over layouts (issue 27): the default
 * job keeps today's answer with the layout fixed to pipeline x data
 * parallel, a target that runs tensor parallelism gets it, the plan file
 * carries the layout and plan_read and export read it back, and bad or
 * unrunnable layouts are refused in one line.
 *
 * "Today's answer" is what `zbsched search --mem 40G` printed on main at
 * a4a6a4b, before layouts existed: interleaved v=4 +vocab-1, pp=8 x dp=1,
 * b=1, 8090.5 ms.
 */
#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "solver/search.h"
#include "src/input.h"
#include "src/plan.h"
#include "src/sched_io.h"
#include "tests/common/cli_run.h"

static char dir[64];
static char out[1 << 16], errb[4096];

static void setup(void)
{
    cli_scratch_new("layouts", dir, sizeof dir);
}

static void teardown(void)
{
    cli_scratch_free(dir);
}

/* Runs the program in the scratch directory, output into out and errb. */
#define zb(...) cli_runf(dir, out, sizeof out, errb, sizeof errb, __VA_ARGS__)

#define slurp(name) cli_slurp(dir, name)

/* The default job, with every layout flag fixed at pipeline x data
 * parallel, gives today's plan, byte for byte the same file as with the
 * flags left out.  Issue 27's calibration (memory-bound work priced at
 * the HBM bandwidth, H100's F/B efficiency 0.50 -> 0.61 assumed) kept the
 * plan and moved its time from 8503.1 to 7574.2 ms; fitting H100 on
 * Megatron-Core's measured runs (F/B 0.61 -> 0.445, W 0.71 -> 0.517)
 * kept it again at 10195.3 ms (bench/README.md). */
START_TEST(default_job_is_today)
{
    ck_assert_int_eq(zb("search --mem 40G -q -o a.json"), 0);
    ck_assert_msg(strstr(out, "best: zb-auto max, pp=8 x dp=1, b=1, m=64"), "%.3000s", out);
    ck_assert_msg(strstr(out, "the winner takes 10195.3 ms"), "%.3000s", out);
    ck_assert_int_eq(zb("search --mem 40G -q --tp 1 --cp 1 --zero 1 --offload 0 -o b.json"), 0);
    char *a = slurp("a.json"), *b = slurp("b.json");
    ck_assert_str_eq(a, b);
    ck_assert_msg(strstr(a, "\"layout\""), "the plan records its layout");
    free(a);
    free(b);
}
END_TEST

#define JOB "--mem 40G --model llama3-8b --gpus 8 --global-batch 16 --stages 2 --max-micro-batch 1 --split balanced -q"

/* Megatron runs tensor parallelism: the search offers it, the plan and
 * plan_read carry it, export writes its flags; torchtitan gets its TOML
 * degrees. */
START_TEST(megatron_gets_tp)
{
    ck_assert_int_eq(zb("search " JOB " --target megatron --json -o m.json"), 0);
    ck_assert_msg(strstr(out, "\"tensor_parallel\":\t4") || strstr(out, "\"tensor_parallel\":4") ||
                  strstr(out, "\"tensor_parallel\": 4"), "--json shows each candidate's layout");
    char path[256];
    snprintf(path, sizeof path, "%s/m.json", dir);
    sched_t *s = NULL;
    zb_err err = { { 0 } };
    ck_assert_msg(sched_load_file(path, &s, &err) == 0, "%s", err.msg);
    zb_plan p;
    ck_assert_int_eq(plan_read(s, &p, &err), 1);
    ck_assert_int_gt(p.layout.tp, 1); /* plain PP x DP does not fit 40 GB without recompute */
    ck_assert_int_eq(p.layout.pp, p.pipeline_parallel);
    ck_assert_int_eq(layout_gpus(&p.layout), 8);
    int tp = p.layout.tp;
    plan_free(&p);
    sched_free(s);
    ck_assert_int_eq(zb("export m.json --format megatron -o m.args"), 0);
    char *args = slurp("m.args"), want[64];
    snprintf(want, sizeof want, "--tensor-model-parallel-size %d\n--sequence-parallel\n", tp);
    ck_assert_msg(strstr(args, want), "%s", args);
    free(args);
    /* the same layout fixed by flags, for torchtitan */
    ck_assert_int_eq(zb("search " JOB " --target torchtitan --tp %d --cp 1 -o t.json", tp), 0);
    ck_assert_int_eq(zb("export t.json --format torchtitan -o t.toml"), 0);
    char *toml = slurp("t.toml");
    snprintf(want, sizeof want, "tensor_parallel_degree = %d\n", tp);
    ck_assert_msg(strstr(toml, want), "%s", toml);
    free(toml);
    /* zbsched's runtime trains pipeline x data parallel only */
    ck_assert_int_eq(zb("run m.json --steps 1"), 1);
    cli_assert_one_line(errb, "zbsched run trains pipeline x data parallel");
}
END_TEST

/* Offload for Megatron without a pipeline; torchtitan refuses it. */
START_TEST(offload_plan)
{
    ck_assert_int_eq(zb("search --mem 80G --model llama3-8b --gpus 8 --global-batch 16 --stages 1 "
                        "--max-micro-batch 1 --recompute off --target megatron --tp 8 --offload 0.5 "
                        "-q -o o.json"), 0);
    ck_assert_int_eq(zb("export o.json --format megatron -o o.args"), 0);
    char *args = slurp("o.args");
    ck_assert_msg(strstr(args, "--cpu-offloading\n--cpu-offloading-num-layers 16\n"), "%s", args);
    free(args);
    ck_assert_int_eq(zb("export o.json --format torchtitan -o o.toml"), 1);
    cli_assert_one_line(errb, "torchtitan has no activation offload");
}
END_TEST

START_TEST(refusals)
{
    ck_assert_int_eq(zb("search --mem 40G --tp 3 -o x.json"), 2);
    cli_assert_one_line(errb, "--tp: '3' is not a power of two");
    ck_assert_int_eq(zb("search --mem 40G --zero 4 -o x.json"), 2);
    cli_assert_one_line(errb, "--zero");
    ck_assert_int_eq(zb("search --mem 40G --offload 1.5 -o x.json"), 2);
    cli_assert_one_line(errb, "--offload");
    ck_assert_int_eq(zb("search --mem 40G --tp 2 -o x.json"), 1);
    cli_assert_one_line(errb, "zbsched runs pipeline x data parallel with ZeRO-1 only");
    ck_assert_int_eq(zb("search --mem 40G --zero 3 --target megatron -o x.json"), 1);
    cli_assert_one_line(errb, "megatron shards optimizer state only");
    ck_assert_int_eq(zb("search --mem 40G --tp 16 --target megatron -o x.json"), 1);
    cli_assert_one_line(errb, "exceed a node");
    char path[128];
    snprintf(path, sizeof path, "%s/x.json", dir);
    cli_assert_no_file(path);
}
END_TEST

/* The library: each candidate's target mask agrees with its layout. */
START_TEST(masks_follow_layouts)
{
    search_options o;
    search_options_default(&o);
    o.mem_bytes = 40e9;
    o.global_batch = 16;
    o.n_devices = 2;
    o.max_micro_batch = 1;
    o.split_search = 1; /* the split search re-costs candidates: each within its own layout */
    o.target = SEARCH_TARGET_TORCHTITAN;
    search_layouts_searched(&o);
    search_result r;
    zb_err err = { { 0 } };
    ck_assert_msg(search_run(&o, &r, &err) == 0, "%s", err.msg);
    ck_assert_int_gt(r.n_layouts, 1);
    int extended = 0;
    for (int i = 0; i < r.n; i++) {
        const search_candidate *c = &r.c[i];
        extended |= layout_is_extended(&c->layout);
        ck_assert_int_eq(c->layout.pp, c->pp);
        ck_assert_int_eq(c->layout.dp, c->dp);
        ck_assert_int_eq(layout_gpus(&c->layout), 8);
        if (c->status != SEARCH_SKIPPED) /* its micro-batches are its own layout's */
            ck_assert_int_eq(c->n_micro * c->micro_batch * c->dp, o.global_batch);
        if (layout_is_extended(&c->layout))
            ck_assert(!(c->targets & (1u << SEARCH_TARGET_ZBSCHED | 1u << SEARCH_TARGET_TORCH)));
        ck_assert(c->layout.offload == 0); /* torchtitan does not offload: never offered */
    }
    ck_assert(extended);
    search_result_free(&r);
    /* For Megatron, a layout beyond PP x DP gets Megatron's families only,
     * the split search's refinements included.  (This small job does not
     * reproduce the bug of_depth fixed, other layouts' plans re-costed
     * under this one: only llama3-70b on 64 GPUs showed it, too slow for a
     * test; bench/README.md "Issue 27".) */
    o.target = SEARCH_TARGET_MEGATRON;
    o.n_devices = 0;
    o.global_batch = 32;
    ck_assert_msg(search_run(&o, &r, &err) == 0, "%s", err.msg);
    for (int i = 0; i < r.n; i++)
        if (layout_is_extended(&r.c[i].layout) && r.c[i].status != SEARCH_SKIPPED)
            ck_assert_msg(!strcmp(r.c[i].family, "1f1b") || !strcmp(r.c[i].family, "interleaved"), "%s %s",
                          r.c[i].label, r.c[i].family);
    search_result_free(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("search_layouts");
    TCase *tc = tcase_create("layouts");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, default_job_is_today);
    tcase_add_test(tc, megatron_gets_tp);
    tcase_add_test(tc, offload_plan);
    tcase_add_test(tc, refusals);
    tcase_add_test(tc, masks_follow_layouts);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
