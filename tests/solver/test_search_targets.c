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
 *     the ranked figure's ZB-2p/1F1B and ZB-1p/1F1B ratios within 5% of the
 *     measured ones and 1F1B-I/1F1B within 6%.  ZB-1p and ZB-2p are built
 *     as the paper built them: the zb-auto heuristic on uniform costs (its
 *     runtime schedules from the stage-median profile) at k p M_B of a
 *     transformer stage, then timed with the real per-stage costs.  The
 *     search's own zb-auto 2p (scheduled on the per-stage costs) is held
 *     to the same band; its zb-auto 1p is printed only: on the 1.5B model
 *     it hides the other devices' bubbles behind the head-heavy last stage
 *     and is up to 11% faster than what the paper measured for ZB-1p.
 *
 * Workload: a few searches of a few hundred milliseconds each.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "solver/search.h"
#include "solver/solver.h"
#include "src/sim.h"
#include "src/validate.h"

static int cmp_ms(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

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

/* Issue 11's job: `zbsched search --mem 40G` with --vocab auto (the CLI's
 * default) ranks vocabulary-parallel plans with the plain ones.  Since
 * issue 25 the head's and embedding's state is priced whole where the
 * runtime keeps it (stage 0 and the last stage), so vocabulary parallelism
 * moves their compute but no longer their memory: the winner is the plain
 * zb-auto max at pp=8 with recompute on devices 0-3 (10195.3 ms, 1.313x
 * the baseline since H100's efficiencies were fitted on Megatron-Core's
 * runs; 7574.2 ms and 1.307x with the assumed 0.61 of issue 27's first
 * calibration, 8503.1 ms and 1.304x before it;
 * before issue 25, with the head and embedding priced as shards,
 * interleaved v=4 +vocab-1 at 8090.5 ms, 1.370x).  The winner fits 40 GB;
 * the best vocabulary-parallel plan (interleaved v=8 +vocab-1 at pp=4 x
 * dp=2, recompute by stage with the MLP level) is ranked beside it, fits,
 * re-simulates to its figure, and its file's recompute_stages and
 * recompute_levels say which stages recompute and how.  The work bounds of
 * both layouts sit below the winner. */
START_TEST(test_default_40g_vocab_auto)
{
    search_options o;
    search_options_default(&o);
    o.vocab = SEARCH_VOCAB_AUTO;
    search_result r;
    zb_err err = { { 0 } };
    ck_assert_msg(search_run(&o, &r, &err) == 0, "%s", err.msg);
    ck_assert_int_ge(r.n_fit, 2);
    const search_candidate *win = &r.c[0], *w = NULL;
    ck_assert_msg(win->speedup >= 1.30, "winner %s %.1f ms vs baseline %.1f ms: %.3fx", win->label,
                  win->time_ms, r.baseline.time_ms, win->speedup);
    ck_assert_ptr_nonnull(win->sched);
    sim_result ws;
    memset(&ws, 0, sizeof ws);
    ck_assert_int_eq(sim_run(win->sched, &ws, &err), 0);
    for (int d = 0; d < win->sched->n_devices; d++)
        ck_assert(win->sched->mem_static[d] + ws.dev[d].peak_mem <= 40e9);
    sim_result_free(&ws);
    /* the best vocabulary-parallel plan, ranked with the plain ones */
    for (int i = 0; i < r.n_fit && !w; i++)
        if (r.c[i].vocab)
            w = &r.c[i];
    ck_assert_msg(w != NULL, "no vocabulary-parallel plan fits");
    ck_assert_msg(w->time_ms < 1.02 * win->time_ms, "%s %.1f ms", w->label, w->time_ms);
    ck_assert_ptr_nonnull(w->sched);
    ck_assert_int_ne(w->vocab, 0);
    ck_assert(sched_has_vocab(w->sched));
    ck_assert_msg(sched_validate(w->sched, &err) == 0, "%s", err.msg);
    /* Recompute by stage: the plan names exactly the first rc_stages. */
    ck_assert_int_gt(w->rc_stages, 0);
    ck_assert_int_lt(w->rc_stages, w->n_stages);
    ck_assert_int_eq(search_annotate(&o, (search_candidate *)w, &err), 0);
    const cJSON *plan = cJSON_GetObjectItemCaseSensitive(w->sched->meta, "plan");
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(plan, "recompute_stages");
    ck_assert_int_eq(cJSON_GetArraySize(rs), w->n_stages);
    for (int i = 0; i < w->n_stages; i++)
        ck_assert_int_eq(cJSON_IsTrue(cJSON_GetArrayItem(rs, i)), i < w->rc_stages);
    /* ...and recompute_levels which of them recompute only the MLP block */
    ck_assert_int_gt(w->rc_mlp_stages, 0);
    const cJSON *rl = cJSON_GetObjectItemCaseSensitive(plan, "recompute_levels");
    ck_assert_int_eq(cJSON_GetArraySize(rl), w->n_stages);
    for (int i = 0; i < w->n_stages; i++)
        ck_assert_str_eq(cJSON_GetArrayItem(rl, i)->valuestring,
                         i < w->rc_stages - w->rc_mlp_stages ? "full" : i < w->rc_stages ? "mlp" : "none");
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(plan, "vocab")->valuestring, "parallel");
    sim_result sr;
    memset(&sr, 0, sizeof sr);
    ck_assert_int_eq(sim_run(w->sched, &sr, &err), 0);
    ck_assert_double_eq_tol(sr.cost, w->time_ms, 1e-6 * w->time_ms);
    for (int d = 0; d < w->sched->n_devices; d++)
        ck_assert(w->sched->mem_static[d] + sr.dev[d].peak_mem <= 40e9);
    sim_result_free(&sr);
    /* Both kinds were ranked: some vocabulary-parallel plan fits. */
    int vocab_fit = 0;
    for (int i = 0; i < r.n_fit; i++)
        vocab_fit |= r.c[i].vocab != 0;
    ck_assert(vocab_fit);
    /* The bounds: positive and below the winner. */
    ck_assert(r.bound_plain_ms > 0 && r.bound_vocab_ms > 0);
    ck_assert(r.bound_plain_ms < win->time_ms && r.bound_vocab_ms < win->time_ms);
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
} table4[] = {
    { "1.5B", 8, 6, 24, 14.5, 12.9, 11.8, 13.1 },   { "1.5B", 8, 6, 32, 14.8, 13.4, 12.5, 13.4 },
    { "1.5B", 8, 6, 64, 14.9, 14.2, 13.6, 13.9 },   { "6.2B", 8, 3, 24, 4.32, 3.88, 3.50, 4.01 },
    { "6.2B", 8, 3, 32, 4.35, 4.00, 3.70, 4.08 },   { "6.2B", 8, 3, 64, 4.39, 4.20, 4.03, 4.19 },
    { "14.6B", 16, 1, 48, 1.81, 1.61, 1.40, 1.54 }, { "14.6B", 16, 1, 64, 1.83, 1.67, 1.49, 1.59 },
    { "14.6B", 16, 1, 128, 1.85, 1.76, 1.64, 1.66 }, { "28.3B", 32, 1, 96, 0.99, 0.87, 0.76, 0.82 },
    { "28.3B", 32, 1, 128, 1.00, 0.90, 0.80, 0.85 }, { "28.3B", 32, 1, 256, 1.00, 0.96, 0.88, 0.90 },
};

/* ZB-kp as the paper built it: the zb-auto heuristic on uniform costs
 * (the stage-median profile its runtime measures) with a limit of k p M_B
 * of a transformer stage, then timed with the real per-stage costs.
 * Returns the largest per-device span, ms. */
static double paper_zb(const search_options *o, int m, double k_mem)
{
    zb_err err = { { 0 } };
    int p = o->n_devices;
    zb_model model = o->model;
    model.micro_batch = o->max_micro_batch;
    cost_options co;
    cost_options_default(&co);
    co.split = COST_SPLIT_PAPER;
    co.flash_attention = 0;
    co.devices_per_node = 8;
    sched_t *t = sched_new(p, m, p);
    ck_assert_ptr_nonnull(t);
    sched_place_interleaved(t);
    ck_assert_int_eq(cost_fill_sched(&model, &o->gpu, &co, t, &err), 0);
    double *times = malloc(sizeof *times * (size_t)p);
    gen_params gp;
    gen_params_default(&gp);
    gp.stages = p;
    gp.microbatches = m;
    gp.t_comm = 0;
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < p; i++)
            times[i] = k == 0 ? t->cost[i].t_f : k == 1 ? t->cost[i].t_b : t->cost[i].t_w;
        qsort(times, (size_t)p, sizeof *times, cmp_ms);
        double med = times[p / 2];
        if (k == 0)
            gp.t_f = med;
        else if (k == 1)
            gp.t_b = med;
        else
            gp.t_w = med;
    }
    free(times);
    gp.m_f = t->cost[1].d_f;
    gp.m_b = t->cost[1].d_b;
    gp.m_w = t->cost[1].d_w;
    double *limit = malloc(sizeof *limit * (size_t)p);
    for (int d = 0; d < p; d++)
        limit[d] = k_mem * p * gp.m_f;
    gp.mem_limit = limit;
    sched_t *s = NULL;
    ck_assert_msg(solver_zb_auto(&gp, &s, &err) == 0, "%s", err.msg);
    free(limit);
    ck_assert_int_eq(cost_fill_sched(&model, &o->gpu, &co, s, &err), 0);
    sim_result sr;
    memset(&sr, 0, sizeof sr);
    ck_assert_int_eq(sim_run(s, &sr, &err), 0);
    double cost = sr.cost;
    sim_result_free(&sr);
    sched_free(s);
    sched_free(t);
    return cost;
}

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
    double r1p = f->time_ms / paper_zb(&o, table4[i].m, 1), r2p = f->time_ms / paper_zb(&o, table4[i].m, 2);
    fprintf(stderr, "%-6s m=%-4d ZB-2p %.3f/%.3f  ZB-1p %.3f/%.3f (paper-built %.3f, 2p %.3f)  1F1B-I %.3f/%.3f\n",
            table4[i].model, table4[i].m, r2, p2, r1, p1, r1p, r2p, ri, pi);
    ck_assert_msg(fabs(r2 / p2 - 1) <= 0.05, "%s m=%d: ZB-2p/1F1B %.3f vs paper %.3f", table4[i].model,
                  table4[i].m, r2, p2);
    ck_assert_msg(fabs(ri / pi - 1) <= 0.06, "%s m=%d: 1F1B-I/1F1B %.3f vs paper %.3f", table4[i].model,
                  table4[i].m, ri, pi);
    ck_assert_msg(fabs(r1p / p1 - 1) <= 0.05, "%s m=%d: ZB-1p (paper-built)/1F1B %.3f vs paper %.3f",
                  table4[i].model, table4[i].m, r1p, p1);
    ck_assert_msg(fabs(r2p / p2 - 1) <= 0.05, "%s m=%d: ZB-2p (paper-built)/1F1B %.3f vs paper %.3f",
                  table4[i].model, table4[i].m, r2p, p2);
    (void)r1; /* the search's own zb-auto 1p: printed above, not bounded (file comment) */
    search_result_free(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("search_targets");
    TCase *tc = tcase_create("search_targets");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_default_40g);
    tcase_add_test(tc, test_default_40g_vocab_auto);
    tcase_add_test(tc, test_vzb_80g);
    tcase_add_loop_test(tc, test_table4_ratios, 0, (int)(sizeof table4 / sizeof table4[0]));
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
