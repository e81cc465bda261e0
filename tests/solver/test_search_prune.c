/*
 * test_search_prune.c: the search's shortcuts change nothing it reports
 * but the list of candidates: its pruning by lower bounds
 * (solver/search_prune.c, docs/search.md "Pruning"), and the V solvers'
 * greedy list runs reused across limits that decide alike
 * (solver_greedy_memo, solver/v_shape.c; test_greedy_memo below).
 *
 * Each scenario is searched twice, pruned (the default) and exhaustive
 * (search_options.exhaustive), and the two results must agree on: the
 * winner (label, depth, micro-batch, recompute, time, peak, split), each
 * target's best, the best fit (or, when nothing of it fits, the smallest
 * peak) of every label at every depth, the why block row by row, and the
 * vocabulary-parallel versions that were not simulated.  Every candidate
 * the pruned search built must also be in the exhaustive list with the
 * same figures (also those that took the figures of a twin built under
 * the other split rule, search_memo.c, which exhaustive search builds
 * again), and the counts must add up (built + pruned = exhaustive).
 * One exception: once a plan that may win fits, a vocabulary-parallel
 * version over the limit is reported by a lower bound of its peak
 * (peak_floor) and not placed; the exhaustive build of it must then be
 * over the limit too, with a peak no lower (same_or_floor).
 * The scenarios are picked so that pruning happens: by time (fits behind
 * their label's best), by memory (candidates whose static memory plus
 * one micro-batch already exceeds the limit) and whole depths whose
 * static memory alone does (cost_static_floor: every plan the exhaustive
 * search builds there must exceed the limit and hold at least the
 * floor), over several depths and targets; a bound that is too high (one
 * that is not a lower bound) makes the best of some label differ, and
 * these checks fail.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "solver/search.h"
#include "solver/solver_internal.h"
#include "tests/common/sched_same.h"

/* One scenario: model, GPU, GPUs, batch, memory, target, vocabulary. */
typedef struct scenario {
    const char *model, *gpu; /* presets */
    int gpus, batch;         /* --gpus, --global-batch */
    double mem;              /* --mem, bytes */
    search_target target;    /* --target */
    int vocab;               /* SEARCH_VOCAB_* */
    int max_mb;              /* --max-micro-batch */
} scenario;

static search_options options(const scenario *s, int exhaustive)
{
    search_options o;
    search_options_default(&o);
    zb_err err = { { 0 } };
    ck_assert_msg(model_preset(s->model, &o.model, &err) == 0, "%s", err.msg);
    ck_assert_msg(gpu_preset(s->gpu, &o.gpu, &err) == 0, "%s", err.msg);
    o.n_gpus = s->gpus;
    o.global_batch = s->batch;
    o.mem_bytes = s->mem;
    o.target = s->target;
    o.vocab = s->vocab;
    o.max_micro_batch = s->max_mb;
    o.exhaustive = exhaustive;
    return o;
}

/* 1 when a and b are the same plan with the same figures. */
static int same_plan(const search_candidate *a, const search_candidate *b)
{
    return a->status == b->status && !strcmp(a->label, b->label) && a->pp == b->pp && a->dp == b->dp &&
           a->micro_batch == b->micro_batch && a->rc_devices == b->rc_devices && a->rc_stages == b->rc_stages &&
           a->rc_mlp_stages == b->rc_mlp_stages && a->split == b->split && a->split_tuned == b->split_tuned &&
           a->vocab == b->vocab && a->time_ms == b->time_ms && a->peak_bytes == b->peak_bytes &&
           a->sync_ms == b->sync_ms && a->async_ms == b->async_ms;
}

/* same_plan, or, when a is a vocabulary version reported over the limit
 * by a lower bound of its peak (search_candidate.peak_floor: once a plan
 * that may win fits, it is not placed), b is that version over the limit
 * with a peak no lower: exhaustive search places and simulates it. */
static int same_or_floor(const search_candidate *a, const search_candidate *b)
{
    if (!a->peak_floor)
        return same_plan(a, b);
    return a->status == SEARCH_OOM && b->status == SEARCH_OOM && !b->peak_floor && !strcmp(a->label, b->label) &&
           a->pp == b->pp && a->dp == b->dp && a->micro_batch == b->micro_batch && a->rc_devices == b->rc_devices &&
           a->rc_stages == b->rc_stages && a->rc_mlp_stages == b->rc_mlp_stages && a->split == b->split &&
           a->vocab == b->vocab && b->peak_bytes >= a->peak_bytes;
}

static void describe(const search_candidate *c, char *buf, size_t n)
{
    snprintf(buf, n, "%s pp=%d b=%d rc=%d/%d/%d split=%d%s status=%d %.6f ms %.0f B", c->label, c->pp,
             c->micro_batch, c->rc_devices, c->rc_stages, c->rc_mlp_stages, (int)c->split,
             c->split_tuned ? "*" : "", (int)c->status, c->time_ms, c->peak_bytes);
}

/* The first candidate of (pp, label) in r's ranked order with a status
 * other than skipped: its best fit, or its smallest peak. */
static const search_candidate *label_best(const search_result *r, int pp, const char *label)
{
    for (int i = 0; i < r->n; i++) {
        const search_candidate *c = &r->c[i];
        if (c->pp == pp && !strcmp(c->label, label) && (c->status == SEARCH_FIT || c->status == SEARCH_OOM))
            return c;
    }
    return NULL;
}

/* The depth pp (of layout l) that r left out for its static memory
 * (search_candidate.static_floor), or NULL when r searched it. */
static const search_candidate *floor_of(const search_result *r, int pp, const zb_layout *l)
{
    for (int i = 0; i < r->n; i++)
        if (r->c[i].static_floor && r->c[i].pp == pp && search_layout_same(&r->c[i].layout, l))
            return &r->c[i];
    return NULL;
}

/* 1 when why row label names a depth r left out for its static memory. */
static int floor_row(const search_result *r, const char *label)
{
    for (int i = 0; i < r->n; i++) {
        char name[48];
        snprintf(name, sizeof name, "pp=%d x dp=%d", r->c[i].pp, r->c[i].dp);
        if (r->c[i].static_floor && !strcmp(label, name))
            return 1;
    }
    return 0;
}

/* Runs s both ways and compares; returns the pruned count (candidates and
 * depths left out), and in *reused (when not NULL) how many listed
 * candidates took an earlier build's figures (search_memo.c; exhaustive
 * search builds each, so they are checked against their own builds). */
static int compare_reused(const scenario *s, int *reused, int *floors)
{
    search_options op = options(s, 0), oe = options(s, 1);
    search_result rp, re;
    zb_err err = { { 0 } };
    ck_assert_msg(search_run(&op, &rp, &err) == 0, "%s", err.msg);
    ck_assert_msg(search_run(&oe, &re, &err) == 0, "%s", err.msg);
    char a[256], b[256];
    ck_assert_int_eq(re.n_pruned, 0);
    /* A depth left out for its static memory: everything the exhaustive
     * search built there exceeds the limit and holds at least the floor
     * (so no fit and no smallest peak was lost). */
    int floor_n = 0, floor_depths = 0;
    for (int i = 0; i < rp.n; i++)
        floor_depths += rp.c[i].static_floor;
    for (int i = 0; i < re.n; i++) {
        const search_candidate *c = &re.c[i], *f = floor_of(&rp, c->pp, &c->layout);
        ck_assert(!c->static_floor);
        if (!f)
            continue;
        floor_n++;
        describe(c, b, sizeof b);
        ck_assert_msg(c->status != SEARCH_FIT, "%s: %s fits at a depth left out", s->model, b);
        ck_assert_msg(c->status != SEARCH_OOM || c->peak_bytes >= f->static_bytes,
                      "%s: %s peaks under the depth's static floor %.0f B", s->model, b, f->static_bytes);
    }
    ck_assert_msg(rp.n - floor_depths + rp.n_pruned + floor_n == re.n, "%s: %d built + %d pruned + %d left out "
                  "with %d depths != %d", s->model, rp.n, rp.n_pruned, floor_n, floor_depths, re.n);
    ck_assert_int_eq(rp.n_fit > 0, re.n_fit > 0);
    if (re.n_fit > 0) {
        describe(&rp.c[0], a, sizeof a);
        describe(&re.c[0], b, sizeof b);
        ck_assert_msg(same_plan(&rp.c[0], &re.c[0]), "%s: winner %s, exhaustive %s", s->model, a, b);
    }
    /* Each target's best. */
    for (int t = 0; t < SEARCH_N_TARGETS; t++) {
        describe(&rp.best[t], a, sizeof a);
        describe(&re.best[t], b, sizeof b);
        ck_assert_msg(rp.best[t].status == SEARCH_SKIPPED ? re.best[t].status == SEARCH_SKIPPED
                                                           : same_plan(&rp.best[t], &re.best[t]),
                      "%s: target %d best %s, exhaustive %s", s->model, t, a, b);
    }
    /* Every label's best at every depth, and every built candidate. */
    for (int i = 0; i < re.n; i++) {
        const search_candidate *c = &re.c[i];
        const search_candidate *want = label_best(&re, c->pp, c->label), *got = label_best(&rp, c->pp, c->label);
        if (!want || floor_of(&rp, c->pp, &c->layout))
            continue;
        describe(want, b, sizeof b);
        ck_assert_msg(got != NULL, "%s: no %s at pp=%d (exhaustive: %s)", s->model, c->label, c->pp, b);
        describe(got, a, sizeof a);
        ck_assert_msg(same_or_floor(got, want), "%s: label best %s, exhaustive %s", s->model, a, b);
    }
    /* ... each as often as there (a twin that took another's identity
     * would list that one twice, and itself not at all). */
    for (int i = 0; i < rp.n; i++) {
        if (rp.c[i].static_floor)
            continue;
        int found = 0, listed = 0;
        for (int j = 0; j < re.n; j++)
            found += same_or_floor(&rp.c[i], &re.c[j]);
        for (int j = 0; j < rp.n; j++)
            listed += same_plan(&rp.c[i], &rp.c[j]);
        describe(&rp.c[i], a, sizeof a);
        ck_assert_msg(found > 0, "%s: %s is not in the exhaustive list", s->model, a);
        ck_assert_msg(listed <= found, "%s: %s listed %d times, %d in the exhaustive list", s->model, a, listed,
                      found);
    }
    ck_assert_int_eq(rp.vocab_pruned, re.vocab_pruned);
    /* The why block, row by row. */
    if (re.n_fit > 0) {
        search_why_block *wp = malloc(sizeof *wp), *we = malloc(sizeof *we);
        ck_assert(wp && we);
        search_why_build(&op, &rp, wp);
        search_why_build(&oe, &re, we);
        ck_assert_str_eq(wp->head, we->head);
        /* Rows of the depths left out differ (a static floor against a
         * smallest peak); the others match in order. */
        int kp = 0, ke = 0;
        for (;;) {
            while (kp < wp->n && floor_row(&rp, wp->row[kp].label))
                kp++;
            while (ke < we->n && floor_row(&rp, we->row[ke].label))
                ke++;
            if (kp == wp->n || ke == we->n)
                break;
            ck_assert_str_eq(wp->row[kp].label, we->row[ke].label);
            ck_assert_str_eq(wp->row[kp].text, we->row[ke].text);
            ck_assert(wp->row[kp].ms == we->row[ke].ms);
            kp++;
            ke++;
        }
        ck_assert_int_eq(kp, wp->n);
        ck_assert_int_eq(ke, we->n);
        free(wp);
        free(we);
    }
    int pruned = rp.n_pruned + floor_n;
    ck_assert_int_eq(re.n_reused, 0);
    if (reused)
        *reused = rp.n_reused;
    for (int i = 0; floors && i < rp.n; i++)
        *floors += rp.c[i].peak_floor;
    search_result_free(&rp);
    search_result_free(&re);
    return pruned;
}

static int compare(const scenario *s)
{
    return compare_reused(s, NULL, NULL);
}

/* compare, for a job with vocabulary versions over the limit once a plan
 * fits: some must be reported by their floor (each checked against its
 * exhaustive build by compare_reused). */
static int compare_with_floors(const scenario *s)
{
    int floors = 0;
    int pruned = compare_reused(s, NULL, &floors);
    ck_assert_msg(floors > 0, "%s: no vocabulary version reported by its floor", s->model);
    return pruned;
}

START_TEST(test_default_job)
{
    /* zbsched search --mem 40G: Llama-3 8B on 8 H100s, vocabulary
     * parallelism searched; most candidates exceed the limit. */
    scenario s = { "llama3-8b", "H100-80G", 8, 64, 40e9, SEARCH_TARGET_ZBSCHED, SEARCH_VOCAB_AUTO, 64 };
    ck_assert_int_gt(compare_with_floors(&s), 100);
}
END_TEST

START_TEST(test_many_depths)
{
    /* The paper's 1.5B on 32 A100s with room to spare: pruning by time
     * over depths 1 to 32, data-parallel sync in the bounds. */
    scenario s = { "1.5B", "A100-80G", 32, 64, 80e9, SEARCH_TARGET_ZBSCHED, SEARCH_VOCAB_AUTO, 8 };
    ck_assert_int_gt(compare(&s), 100);
}
END_TEST

START_TEST(test_sync_targets)
{
    /* Megatron's and torchtitan's bests are kept under their own (sync)
     * rule, also where zbsched's best is another plan. */
    scenario m = { "6.2B", "A100-80G", 16, 32, 60e9, SEARCH_TARGET_MEGATRON, SEARCH_VOCAB_PLAIN, 4 };
    ck_assert_int_gt(compare(&m), 10);
    scenario t = { "6.2B", "A100-80G", 16, 32, 60e9, SEARCH_TARGET_TORCHTITAN, SEARCH_VOCAB_PLAIN, 4 };
    ck_assert_int_gt(compare(&t), 10);
}
END_TEST

START_TEST(test_nothing_fits)
{
    /* Nothing fits at any depth: only the memory bound prunes, and the
     * smallest peak of every label (what the split search starts from
     * and the nothing-fits line names) stays.  36 GB: the static memory
     * fits at pp=8 (35 GB), the activations do not; shallower depths
     * are left out for their static memory alone. */
    scenario s = { "14.6B", "A100-40G", 8, 16, 36e9, SEARCH_TARGET_ZBSCHED, SEARCH_VOCAB_PLAIN, 16 };
    ck_assert_int_gt(compare(&s), 10);
}
END_TEST

START_TEST(test_split_sources)
{
    /* INTELLECT-1 10B on 64 H100s: at pp=16 zb-v's fastest plans are
     * light-ends splits, which the split search does not start from; it
     * starts from the best plain-split plan, which must keep its schedule
     * and must not be pruned against the light-ends plans.  Before both
     * held, it fell back on whatever plan of the label still had a
     * schedule, one over the limit here, and the pruned and exhaustive
     * searches tuned different plans (2,752 built + 4,567 pruned against
     * 7,318). */
    scenario s = { "intellect-1-10b", "H100-80G", 64, 128, 80e9, SEARCH_TARGET_ZBSCHED, SEARCH_VOCAB_AUTO, 64 };
    ck_assert_int_gt(compare(&s), 1000);
}
END_TEST

START_TEST(test_twins)
{
    /* 6.2B on 16 A100-80G: at pp=16 both split rules give most
     * placements the same layers, so many candidates take the figures of
     * their twin under the other rule; each must equal its own build. */
    scenario s = { "6.2B", "A100-80G", 16, 32, 60e9, SEARCH_TARGET_ZBSCHED, SEARCH_VOCAB_AUTO, 4 };
    int reused = 0;
    ck_assert_int_gt(compare_reused(&s, &reused, NULL), 10);
    ck_assert_int_gt(reused, 20);
}
END_TEST

START_TEST(test_vocab_over_in_every_placement)
{
    /* Llama-3 8B on 8 H100s, global batch 16: at pp=2 the 1f1b +vocab-1
     * version goes over the limit in every placement of a recompute step
     * the floor does not prove over; built whole when it is reported, its
     * walks first reach the best time ("cannot beat the best plan"), as
     * the exhaustive search finds.  Reporting it by its bound instead
     * would list it over the limit. */
    scenario s = { "llama3-8b", "H100-80G", 8, 16, 80e9, SEARCH_TARGET_ZBSCHED, SEARCH_VOCAB_AUTO, 64 };
    ck_assert_int_gt(compare_with_floors(&s), 10);
}
END_TEST

START_TEST(test_static_floor)
{
    /* 6.2B on 16 A100-40G with 20 GB: at pp=1 and 2 the weights,
     * gradients and optimizer state alone exceed the limit, so those
     * depths are not built; pp=4 to 16 are searched as before. */
    scenario s = { "6.2B", "A100-40G", 16, 32, 20e9, SEARCH_TARGET_ZBSCHED, SEARCH_VOCAB_AUTO, 4 };
    search_options o = options(&s, 0);
    search_result r;
    zb_err err = { { 0 } };
    ck_assert_msg(search_run(&o, &r, &err) == 0, "%s", err.msg);
    int left_out = 0;
    for (int i = 0; i < r.n; i++)
        if (r.c[i].static_floor) {
            ck_assert_int_le(r.c[i].pp, 2);
            ck_assert(r.c[i].static_bytes > s.mem);
            left_out++;
        }
    ck_assert_int_eq(left_out, 2);
    ck_assert_int_gt(r.n_fit, 0);
    search_result_free(&r);
    ck_assert_int_gt(compare(&s), 100);
}
END_TEST

START_TEST(test_vocab_near)
{
    /* 6.2B on 64 H100s: pp=2 fits plans well behind the winner (pp=8),
     * and its vocabulary-parallel versions are cut at SEARCH_VOCAB_NEAR
     * times the best plan of every depth, not at pp=2's own best
     * (search_vocab_depth).  Each cut says so, at a time no lower than
     * that bound on the winner, on a depth that fits a plan; and the
     * pruned and exhaustive searches agree as elsewhere. */
    scenario s = { "6.2B", "H100-80G", 64, 128, 80e9, SEARCH_TARGET_ZBSCHED, SEARCH_VOCAB_AUTO, 64 };
    search_options o = options(&s, 0);
    search_result r;
    zb_err err = { { 0 } };
    ck_assert_msg(search_run(&o, &r, &err) == 0, "%s", err.msg);
    ck_assert_int_gt(r.n_fit, 0);
    char cut[64];
    snprintf(cut, sizeof cut, "cannot come within %.0f%% of the best plan", (SEARCH_VOCAB_NEAR - 1) * 100);
    int near = 0;
    for (int i = 0; i < r.n; i++) {
        const search_candidate *c = &r.c[i];
        const char *at = strstr(c->note, cut);
        if (!at)
            continue;
        near++;
        ck_assert_int_ne(c->vocab, 0);
        /* "...: its busiest device computes X ms >= R ms" or "...: every
         * placement of its passes reaches R ms" */
        const char *num = strstr(at, ">= ") ? strstr(at, ">= ") + 3 : strstr(at, "reaches ");
        ck_assert_msg(num != NULL, "%s", c->note);
        if (!strncmp(num, "reaches ", 8))
            num += 8;
        double reach = strtod(num, NULL);
        ck_assert_msg(reach >= SEARCH_VOCAB_NEAR * r.c[0].time_ms - 0.05, "%s at pp=%d: %s (winner %.1f ms)", c->label,
                      c->pp, c->note, r.c[0].time_ms);
        int depth_fits = 0;
        for (int k = 0; k < r.n_fit; k++)
            depth_fits |= r.c[k].pp == c->pp;
        ck_assert_msg(depth_fits, "%s at pp=%d cut near the best, but its depth fits nothing", c->label, c->pp);
    }
    ck_assert_int_gt(near, 4);
    search_result_free(&r);
    ck_assert_int_gt(compare(&s), 100);
}
END_TEST

START_TEST(test_greedy_memo)
{
    /* A V template with uneven stages; the three variants under a
     * sequence of device limits (loose: every variant's own limit binds;
     * tight: the caller's limit binds, so variants decide alike), each
     * with one memo shared along the sequence as the search shares it,
     * and without: the same schedules, costs and errors. */
    int p = 4, m = 12, S = 2 * p;
    sched_t *t = sched_new(p, m, S);
    ck_assert_ptr_nonnull(t);
    sched_place_v(t);
    for (int i = 0; i < S; i++) {
        t->cost[i] = (stage_cost){ 1.0 + 0.1 * i, 1.1 + 0.05 * i, 0.9, 2.0 + 0.2 * (i % 3), -1.2, -0.8 - 0.2 * (i % 3) };
        t->cost[i].d_w = -(t->cost[i].d_f + t->cost[i].d_b);
    }
    t->t_comm = 0.05;
    static const char *const vf[] = { "v-min", "v-half", "v-zb" };
    const double scale[] = { 1e9, 40, 14, 9, 9, 6, 40 };
    solver_greedy_memo memo = { 0 };
    v_pattern_cache patterns = { 0 };
    int reused = 0;
    for (size_t k = 0; k < sizeof scale / sizeof scale[0]; k++) {
        /* Every other round on other costs: the kept patterns are the
         * shape's whatever the costs they were first laid out for. */
        for (int i = 0; i < S; i++)
            t->cost[i].t_f = (k % 2 ? 2.0 : 1.0) + 0.1 * i;
        solver_greedy_memo_free(&memo); /* the template's costs changed */
        double limit[4];
        for (int d = 0; d < p; d++)
            limit[d] = scale[k] * (1 + 0.1 * d);
        for (int v = 0; v < 3; v++) {
            sched_t *a = NULL, *b = NULL;
            zb_err ea = { { 0 } }, eb = { { 0 } };
            int had = memo.best != NULL;
            int ra = solver_v_costs_memo(vf[v], t, limit, &memo, &patterns, INFINITY, &a, &ea);
            int rb = solver_v_costs(vf[v], t, limit, &b, &eb);
            ck_assert_int_eq(ra, rb);
            if (ra == 0) {
                ck_assert_msg(sched_same_lanes(a, b), "%s at scale %g: the memo's schedule differs", vf[v], scale[k]);
                reused += had;
            } else {
                ck_assert_str_eq(ea.msg, eb.msg);
            }
            sched_free(a);
            sched_free(b);
        }
    }
    ck_assert_int_gt(reused, 0);
    ck_assert_int_eq(patterns.n, 2); /* one shape, V-Min's and V-Half's */
    solver_greedy_memo_free(&memo);
    v_pattern_cache_free(&patterns);
    sched_free(t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("search_prune");
    TCase *tc = tcase_create("search_prune");
    tcase_set_timeout(tc, 300); /* each test runs its searches twice, once exhaustive */
    tcase_add_test(tc, test_default_job);
    tcase_add_test(tc, test_many_depths);
    tcase_add_test(tc, test_sync_targets);
    tcase_add_test(tc, test_nothing_fits);
    tcase_add_test(tc, test_static_floor);
    tcase_add_test(tc, test_vocab_over_in_every_placement);
    tcase_add_test(tc, test_twins);
    tcase_add_test(tc, test_split_sources);
    tcase_add_test(tc, test_vocab_near);
    tcase_add_test(tc, test_greedy_memo);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
