/*
 * test_search_targets.c: the figures issue 10 asks of `zbsched search`,
 * checked on the library (solver/search.h) under the corrected cost model.
 *
 *   - default search at 40 GB: the winner is >= 1.20x faster than the
 *     baseline (plain 1F1B, b=1, recompute everywhere, default split), fits
 *     40 GB on every device, and its schedule re-simulates to the ranked
 *     time (one replica: no data-parallel sync to add);
 *   - some V candidate fits at 40 GB; at 80 GB v-zb is no slower than the
 *     handcrafted zb-v;
 *   - Table 4 of the zero-bubble paper (4 presets on A100, 12 settings,
 *     paper split, recompute off, no flash attention as the paper ran):
 *     the ranked figure's ZB-2p/1F1B, ZB-1p/1F1B and 1F1B-I/1F1B ratios
 *     against the measured ones (5%, 5% and 6%).  ZB-1p on the 1.5B model
 *     at m = 24 and 32 is the known exception (docs/search.md): under the
 *     paper split the last stage (2 layers + a head worth 1.7 layers) is
 *     the bottleneck and zb-auto at p*M_B hides every other bubble, where
 *     the paper measured ZB-1p = ZB-H1.  Those two are pinned as outside
 *     the band so a model change that fixes them shows up.
 *
 * Workload: a few searches of a few hundred milliseconds each.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "solver/search.h"
#include "src/sim.h"

static const search_candidate *best_of(const search_result *r, const char *label, int pp)
{
    for (int i = 0; i < r->n_fit; i++)
        if (!strcmp(r->c[i].label, label) && (pp <= 0 || r->c[i].pp == pp))
            return &r->c[i];
    return NULL;
}

START_TEST(test_default_40g)
{
    search_options o;
    search_options_default(&o);
    search_result r;
    zb_err err = { { 0 } };
    ck_assert_msg(search_run(&o, &r, &err) == 0, "%s", err.msg);
    ck_assert_int_ge(r.n_fit, 1);
    const search_candidate *w = &r.c[0];
    ck_assert_int_ne(r.baseline.status, SEARCH_SKIPPED);
    ck_assert_str_eq(r.baseline.label, "1f1b");
    ck_assert_int_eq(r.baseline.micro_batch, 1);
    ck_assert_int_eq(r.baseline.rc_devices, r.baseline.pp);
    ck_assert_msg(w->speedup >= 1.20, "winner %s %.1f ms vs baseline %.1f ms: %.3fx", w->label, w->time_ms,
                  r.baseline.time_ms, w->speedup);
    ck_assert(w->peak_bytes <= 40e9);
    /* Re-simulation of the file's schedule gives the ranked time and fits
     * on every device. */
    ck_assert_ptr_nonnull(w->sched);
    sim_result sr;
    memset(&sr, 0, sizeof sr);
    ck_assert_int_eq(sim_run(w->sched, &sr, &err), 0);
    ck_assert_int_eq(w->dp, 1);
    ck_assert_double_eq_tol(sr.cost, w->time_ms, 1e-6 * w->time_ms);
    for (int d = 0; d < w->sched->n_devices; d++)
        ck_assert(w->sched->mem_static[d] + sr.dev[d].peak_mem <= 40e9);
    sim_result_free(&sr);
    /* The why figures bound the winner. */
    search_why y;
    search_explain(w, &y);
    ck_assert(y.work_bound_ms <= y.imbalance_bound_ms && y.imbalance_bound_ms <= y.time_ms);
    ck_assert_double_eq_tol(y.bubble_share + y.imbalance_share, y.idle_share, 1e-12);
    /* Some V candidate fits at 40 GB. */
    int v_fits = 0;
    for (int i = 0; i < r.n_fit; i++)
        v_fits |= r.c[i].chunks == 2 && (!strncmp(r.c[i].label, "v-", 2) || !strcmp(r.c[i].label, "zb-v"));
    ck_assert_msg(v_fits, "no V candidate fits at 40 GB");
    /* The split search: tuned candidates sum to the model's layers and are
     * no slower than the best untuned candidate of their label and depth
     * (they start from it and keep only improving moves). */
    int tuned = 0;
    for (int i = 0; i < r.n_fit; i++) {
        const search_candidate *c = &r.c[i];
        if (!c->split_tuned || c->chunks == 2)
            continue; /* the V light-ends split is a rule, not a tuning */
        tuned++;
        int sum = 0;
        for (int k = 0; k < c->n_stages; k++)
            sum += c->layers[k];
        ck_assert_int_eq(sum, 32);
        for (int k = 0; k < r.n_fit; k++) {
            const search_candidate *u = &r.c[k];
            if (!u->split_tuned && u->pp == c->pp && !strcmp(u->label, c->label)) {
                ck_assert_msg(c->time_ms <= u->time_ms * SEARCH_TIME_RESOLUTION, "%s: tuned %.1f > %.1f", c->label,
                              c->time_ms, u->time_ms);
                break;
            }
        }
    }
    ck_assert_int_ge(tuned, 1);
    search_result_free(&r);
}
END_TEST

START_TEST(test_vzb_80g)
{
    search_options o;
    search_options_default(&o);
    o.mem_bytes = 80e9;
    o.n_devices = 8;
    search_result r;
    zb_err err = { { 0 } };
    ck_assert_msg(search_run(&o, &r, &err) == 0, "%s", err.msg);
    const search_candidate *vzb = best_of(&r, "v-zb", 8), *zbv = best_of(&r, "zb-v", 8);
    ck_assert(vzb && zbv);
    ck_assert_msg(vzb->time_ms <= zbv->time_ms * SEARCH_TIME_RESOLUTION, "v-zb %.1f ms > zb-v %.1f ms",
                  vzb->time_ms, zbv->time_ms);
    search_result_free(&r);
}
END_TEST

/* Table 4 of the zero-bubble paper: samples/GPU/s. */
static const struct {
    const char *model;
    int p, b, m;
    double zb2p, zb1p, f1b, f1bi;
    int zb1p_known_off; /* 1: outside the band under this model (see the file comment) */
} table4[] = {
    { "1.5B", 8, 6, 24, 14.5, 12.9, 11.8, 13.1, 1 },   { "1.5B", 8, 6, 32, 14.8, 13.4, 12.5, 13.4, 1 },
    { "1.5B", 8, 6, 64, 14.9, 14.2, 13.6, 13.9, 0 },   { "6.2B", 8, 3, 24, 4.32, 3.88, 3.50, 4.01, 0 },
    { "6.2B", 8, 3, 32, 4.35, 4.00, 3.70, 4.08, 0 },   { "6.2B", 8, 3, 64, 4.39, 4.20, 4.03, 4.19, 0 },
    { "14.6B", 16, 1, 48, 1.81, 1.61, 1.40, 1.54, 0 }, { "14.6B", 16, 1, 64, 1.83, 1.67, 1.49, 1.59, 0 },
    { "14.6B", 16, 1, 128, 1.85, 1.76, 1.64, 1.66, 0 }, { "28.3B", 32, 1, 96, 0.99, 0.87, 0.76, 0.82, 0 },
    { "28.3B", 32, 1, 128, 1.00, 0.90, 0.80, 0.85, 0 }, { "28.3B", 32, 1, 256, 1.00, 0.96, 0.88, 0.90, 0 },
};

static const search_candidate *at_b(const search_result *r, const char *label, int b)
{
    for (int i = 0; i < r->n_fit; i++)
        if (!strcmp(r->c[i].label, label) && r->c[i].micro_batch == b)
            return &r->c[i];
    return NULL;
}

START_TEST(test_table4_ratios)
{
    int i = _i;
    search_options o;
    search_options_default(&o);
    zb_err err = { { 0 } };
    ck_assert_int_eq(model_preset(table4[i].model, &o.model, &err), 0);
    ck_assert_int_eq(gpu_preset("A100-80G", &o.gpu, &err), 0);
    o.n_devices = o.n_gpus = table4[i].p;
    o.global_batch = table4[i].b * table4[i].m;
    o.max_micro_batch = table4[i].b;
    o.recompute = 0;
    o.split = COST_SPLIT_PAPER;
    o.split_search = 0;
    o.flash_attention = 0;
    o.mem_bytes = 1e15;
    search_result r;
    ck_assert_msg(search_run(&o, &r, &err) == 0, "%s", err.msg);
    int b = table4[i].b, vmax = (o.model.n_layers + 2) / table4[i].p;
    char ilabel[40];
    snprintf(ilabel, sizeof ilabel, "interleaved v=%d", vmax);
    const search_candidate *f = at_b(&r, "1f1b", b), *z2 = at_b(&r, "zb-auto 2p", b),
                           *z1 = at_b(&r, "zb-auto 1p", b), *il = at_b(&r, ilabel, b);
    ck_assert(f && z2 && z1 && il);
    double r2 = f->time_ms / z2->time_ms, r1 = f->time_ms / z1->time_ms, ri = f->time_ms / il->time_ms;
    double p2 = table4[i].zb2p / table4[i].f1b, p1 = table4[i].zb1p / table4[i].f1b, pi = table4[i].f1bi / table4[i].f1b;
    fprintf(stderr, "%-6s m=%-4d ZB-2p %.3f/%.3f  ZB-1p %.3f/%.3f  1F1B-I %.3f/%.3f\n", table4[i].model,
            table4[i].m, r2, p2, r1, p1, ri, pi);
    ck_assert_msg(fabs(r2 / p2 - 1) <= 0.05, "%s m=%d: ZB-2p/1F1B %.3f vs paper %.3f", table4[i].model,
                  table4[i].m, r2, p2);
    ck_assert_msg(fabs(ri / pi - 1) <= 0.06, "%s m=%d: 1F1B-I/1F1B %.3f vs paper %.3f", table4[i].model,
                  table4[i].m, ri, pi);
    if (table4[i].zb1p_known_off)
        ck_assert_msg(fabs(r1 / p1 - 1) > 0.05, "%s m=%d: ZB-1p now within 5%%: drop the exception",
                      table4[i].model, table4[i].m);
    else
        ck_assert_msg(fabs(r1 / p1 - 1) <= 0.05, "%s m=%d: ZB-1p/1F1B %.3f vs paper %.3f", table4[i].model,
                      table4[i].m, r1, p1);
    search_result_free(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("search_targets");
    TCase *tc = tcase_create("search_targets");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_default_40g);
    tcase_add_test(tc, test_vzb_80g);
    tcase_add_loop_test(tc, test_table4_ratios, 0, (int)(sizeof table4 / sizeof table4[0]));
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
