/*
 * test_search_other_layouts.c: the layouts a target cannot run but another
 * can (search_result.other_*): the default target (zbsched's runtime: PP x
 * DP only) bounds the tensor-parallel, FSDP, context-parallel and offload
 * layouts the other engines run, without simulating them, so that its why
 * block can say when another engine's layout would beat every plan this
 * runtime can run.
 *
 * What must hold: each such layout is one the searched target refuses and
 * the marked targets run; none is a layout the search already considered;
 * fixing every dimension leaves none; on CPU devices there are none (the
 * other engines' layouts are GPU ones); and each bound really bounds: the
 * target's own search, run over its layouts, never beats the lowest bound
 * of the layouts it runs.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "solver/search.h"

static void default_job(search_options *o, search_target t)
{
    search_options_default(o);
    o->vocab = SEARCH_VOCAB_AUTO; /* as the CLI searches */
    o->target = t;
    search_layouts_searched(o);
}

START_TEST(default_target_bounds_the_others)
{
    search_options o;
    default_job(&o, SEARCH_TARGET_ZBSCHED);
    search_result r;
    zb_err err = { { 0 } };
    ck_assert_msg(search_run(&o, &r, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(r.n_layouts, 1); /* zbsched runs the plain layout only */
    ck_assert_int_gt(r.n_other_layouts, 0);
    int tp = 0, fsdp = 0;
    for (int k = 0; k < r.n_other_layouts; k++) {
        const zb_layout *l = &r.other_layout[k];
        ck_assert(layout_is_extended(l));
        ck_assert(!search_layout_runs(l, NULL, SEARCH_TARGET_ZBSCHED, NULL, 0));
        ck_assert(!(r.other_targets[k] & (1u << SEARCH_TARGET_ZBSCHED)));
        ck_assert_uint_ne(r.other_targets[k], 0);
        for (int t = 0; t < SEARCH_N_TARGETS; t++)
            if (r.other_targets[k] & (1u << t))
                ck_assert_msg(search_layout_runs(l, NULL, (search_target)t, NULL, 0), "target %d", t);
        for (int j = 0; j < r.n_layouts; j++)
            ck_assert(!search_layout_same(l, &r.layout[j]));
        for (int j = 0; j < k; j++) /* each once, its targets merged */
            ck_assert(!search_layout_same(l, &r.other_layout[j]));
        ck_assert(r.other_bound_ms[k] > 0 && isfinite(r.other_bound_ms[k]));
        ck_assert(r.other_static_bytes[k] > 0);
        ck_assert_int_eq(layout_gpus(l), o.n_gpus);
        tp |= l->tp > 1;
        fsdp |= l->zero == LAYOUT_ZERO3;
    }
    ck_assert(tp && fsdp);

    /* The bound is a bound: Megatron's own search over its layouts does
     * not beat the lowest bound of those it runs (or the plain layout's). */
    double lowest = INFINITY;
    for (int k = 0; k < r.n_other_layouts; k++)
        if (r.other_targets[k] & (1u << SEARCH_TARGET_MEGATRON))
            lowest = fmin(lowest, r.other_bound_ms[k]);
    search_result_free(&r);
    default_job(&o, SEARCH_TARGET_MEGATRON);
    ck_assert_msg(search_run(&o, &r, &err) == 0, "%s", err.msg);
    ck_assert_int_gt(r.n_fit, 0);
    for (int k = 0; k < r.n_layouts; k++)
        if (!layout_is_extended(&r.layout[k]))
            lowest = fmin(lowest, r.layout_bound_ms[k] > 0 ? r.layout_bound_ms[k] : INFINITY);
    ck_assert_msg(r.c[0].time_ms >= lowest * (1 - 1e-9), "megatron's best %.1f ms beats the bound %.1f ms",
                  r.c[0].time_ms, lowest);
    search_result_free(&r);
}
END_TEST

START_TEST(fixed_or_cpu_leaves_none)
{
    search_options o;
    default_job(&o, SEARCH_TARGET_ZBSCHED);
    o.tp = o.cp = o.zero = 1;
    o.offload = 0;
    search_result r;
    zb_err err = { { 0 } };
    ck_assert_msg(search_run(&o, &r, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(r.n_other_layouts, 0);
    search_result_free(&r);

    default_job(&o, SEARCH_TARGET_ZBSCHED);
    char path[512];
    snprintf(path, sizeof path, "%s/tools/cpu-device.json", getenv("ZB_SOURCE_ROOT") ? getenv("ZB_SOURCE_ROOT") : ".");
    ck_assert_msg(gpu_load(path, &o.gpu, &err) == 0, "%s", err.msg);
    ck_assert_msg(model_preset("tiny", &o.model, &err) == 0, "%s", err.msg);
    o.n_gpus = 2;
    o.global_batch = 8;
    o.mem_bytes = 4e9;
    ck_assert_msg(search_run(&o, &r, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(r.n_other_layouts, 0);
    search_result_free(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("search_other_layouts");
    TCase *tc = tcase_create("other_layouts");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, default_target_bounds_the_others);
    tcase_add_test(tc, fixed_or_cpu_leaves_none);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
