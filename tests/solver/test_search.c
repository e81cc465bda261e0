/*
 * test_search.c: `zbsched search` (solver/search.h and the CLI): ranking,
 * rejection of candidates over the memory limit, the nothing-fits report
 * and its minimal memory, the annotations of the written schedule, and the
 * command's exit codes and messages.
 *
 * The scenario is the zero-bubble paper's 1.5B model on 8 A100s with a
 * global batch of 48 sequences (b in 1, 2, 4, 6, 8, 16; m = 48/b): small
 * enough that one search takes milliseconds.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "solver/search.h"
#include "tests/common/cli_run.h"

static search_options scenario(double mem)
{
    search_options o;
    search_options_default(&o);
    zb_err err = { { 0 } };
    ck_assert_int_eq(model_preset("1.5B", &o.model, &err), 0);
    ck_assert_int_eq(gpu_preset("A100-80G", &o.gpu, &err), 0);
    o.n_devices = 8;
    o.global_batch = 48;
    o.max_micro_batch = 16;
    o.mem_bytes = mem;
    o.split_search = 0; /* test_search_targets covers it on the default job; keeps these quick */
    return o;
}

static const search_candidate *find(const search_result *r, const char *label, int b, int rc)
{
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->c[i].label, label) && r->c[i].micro_batch == b && r->c[i].recompute == rc)
            return &r->c[i];
    return NULL;
}

START_TEST(test_ranking)
{
    search_options o = scenario(1e12);
    /* Every candidate built, so that every family at b=6 is listed below
     * (the default prunes those whose bound loses to their label's best;
     * test_search_prune checks that pruning changes no best). */
    o.exhaustive = 1;
    search_result r;
    zb_err err = { { 0 } };
    ck_assert_msg(search_run(&o, &r, &err) == 0, "%s", err.msg);
    ck_assert_int_gt(r.n_fit, 10);
    ck_assert_ptr_nonnull(r.c[0].sched);
    for (int i = 0; i < r.n; i++) {
        const search_candidate *c = &r.c[i];
        if (i < r.n_fit) {
            ck_assert_int_eq(c->status, SEARCH_FIT);
            ck_assert(c->peak_bytes <= o.mem_bytes);
            ck_assert(c->iter_ms > 0 && c->tokens_per_s > 0 && c->mfu > 0 && c->mfu < 1);
            ck_assert(c->bubble_rate > -1e-9 && c->bubble_rate < 1);
            ck_assert(c->peak_bytes >= c->static_bytes);
            /* Ranked by the realised time (issue 10: the largest
             * per-device span, not the makespan); within
             * SEARCH_TIME_RESOLUTION, by memory. */
            ck_assert(c->time_ms >= c->cost_ms && c->iter_ms >= c->cost_ms * (1 - 1e-12));
            if (i > 0) {
                const search_candidate *prev = &r.c[i - 1];
                ck_assert(prev->time_ms <= c->time_ms * SEARCH_TIME_RESOLUTION);
                if (prev->time_ms > c->time_ms)
                    ck_assert(prev->peak_bytes <= c->peak_bytes);
            }
            ck_assert_int_eq(c->n_micro * c->micro_batch, 48);
        } else {
            ck_assert_int_ne(c->status, SEARCH_FIT);
        }
    }
    /* Every family ran at b=6 without recompute (the V solvers may still be
     * placeholders, so only the generators and zb-auto are required). */
    const char *labels[] = { "1f1b", "interleaved v=2", "interleaved v=3", "zb-h1", "zb-h2",
                             "zb-auto 1p", "zb-auto 2p", "zb-auto max", "zb-v" };
    for (int i = 0; i < 9; i++) {
        const search_candidate *c = find(&r, labels[i], 6, 0);
        ck_assert_msg(c != NULL, "%s missing", labels[i]);
        ck_assert_msg(c->status == SEARCH_FIT, "%s: %s", labels[i], c->note);
    }
    /* 22 layers over 8 devices allow at most (22+2)/8 = 3 chunks. */
    ck_assert_ptr_null(find(&r, "interleaved v=4", 6, 0));
    /* Splitting W out never makes a schedule slower (Table 2), and
     * recompute never makes it faster. */
    for (int b = 1; b <= 16; b *= 2) {
        const search_candidate *h1 = find(&r, "zb-h1", b, 0), *f = find(&r, "1f1b", b, 0);
        const search_candidate *fr = find(&r, "1f1b", b, 1);
        ck_assert(h1 && f && fr);
        ck_assert_msg(h1->iter_ms <= f->iter_ms * (1 + 1e-9), "b=%d: zb-h1 %.3f > 1f1b %.3f", b, h1->iter_ms, f->iter_ms);
        ck_assert(fr->iter_ms > f->iter_ms);
        ck_assert(fr->peak_bytes < f->peak_bytes);
    }
    /* ZB-H2 keeps up to 2p-1 micro-batches on the first device: more than
     * 1F1B's p (at b=1, m=48; at b=6 m=8=p caps both at 8). */
    ck_assert(find(&r, "zb-h2", 1, 0)->peak_bytes > find(&r, "1f1b", 1, 0)->peak_bytes);
    search_result_free(&r);
}
END_TEST

START_TEST(test_limit_excludes)
{
    search_options o = scenario(1e12);
    search_result r;
    zb_err err = { { 0 } };
    ck_assert_int_eq(search_run(&o, &r, &err), 0);
    double p_1f1b = find(&r, "1f1b", 1, 0)->peak_bytes;
    double p_h2 = find(&r, "zb-h2", 1, 0)->peak_bytes;
    search_result_free(&r);
    ck_assert(p_h2 > p_1f1b);

    o.mem_bytes = (p_1f1b + p_h2) / 2;
    ck_assert_int_eq(search_run(&o, &r, &err), 0);
    const search_candidate *f = find(&r, "1f1b", 1, 0), *h2 = find(&r, "zb-h2", 1, 0);
    ck_assert_int_eq(f->status, SEARCH_FIT);
    ck_assert_int_eq(h2->status, SEARCH_OOM);
    ck_assert_ptr_nonnull(strstr(h2->note, "needs"));
    ck_assert_ptr_nonnull(strstr(h2->note, "> limit"));
    for (int i = 0; i < r.n; i++)
        if (r.c[i].status == SEARCH_OOM)
            ck_assert(r.c[i].peak_bytes > o.mem_bytes);
    /* The winner is no slower than any fitting candidate, up to the ranking
     * resolution, and where it is slower at all it needs no more memory. */
    ck_assert(r.c[0].time_ms <= f->time_ms * SEARCH_TIME_RESOLUTION);
    if (r.c[0].time_ms > f->time_ms)
        ck_assert(r.c[0].peak_bytes <= f->peak_bytes);
    search_result_free(&r);
}
END_TEST

START_TEST(test_nothing_fits)
{
    /* 1 GB: the static memory alone is over the limit at every depth
     * (8 devices), so nothing is built and the depth carries its floor. */
    search_options o = scenario(1e9);
    search_result r;
    zb_err err = { { 0 } };
    ck_assert_int_eq(search_run(&o, &r, &err), 0);
    ck_assert_int_eq(r.n_fit, 0);
    ck_assert_int_eq(r.min_peak_index, -1);
    ck_assert_int_eq(r.n, 1);
    ck_assert(r.c[0].static_floor && r.c[0].status == SEARCH_SKIPPED && r.c[0].pp == 8);
    ck_assert(r.c[0].static_bytes > o.mem_bytes);
    double floor = r.c[0].static_bytes;
    search_result_free(&r);

    /* Just over the floor: the static memory fits, the activations do
     * not; the smallest peak is named, and holds the floor. */
    o.mem_bytes = floor * 1.01;
    ck_assert_int_eq(search_run(&o, &r, &err), 0);
    ck_assert_int_eq(r.n_fit, 0);
    ck_assert_int_ge(r.min_peak_index, 0);
    ck_assert(r.min_peak_bytes >= floor);
    for (int i = 0; i < r.n; i++)
        if (r.c[i].status != SEARCH_SKIPPED)
            ck_assert(r.c[i].peak_bytes >= r.min_peak_bytes);
    double need = r.min_peak_bytes;
    search_result_free(&r);

    /* Exactly that much memory makes something fit. */
    o.mem_bytes = ceil(need);
    ck_assert_int_eq(search_run(&o, &r, &err), 0);
    ck_assert_int_ge(r.n_fit, 1);
    ck_assert(r.c[0].peak_bytes <= o.mem_bytes);
    search_result_free(&r);
}
END_TEST

START_TEST(test_annotate)
{
    search_options o = scenario(40e9);
    search_result r;
    zb_err err = { { 0 } };
    ck_assert_int_eq(search_run(&o, &r, &err), 0);
    ck_assert_int_ge(r.n_fit, 1);
    search_candidate *best = &r.c[0];
    ck_assert_int_eq(search_annotate(&o, best, &err), 0);
    cJSON *meta = best->sched->meta;
    ck_assert_ptr_nonnull(meta);
    zb_model m;
    ck_assert_int_eq(model_from_json(cJSON_GetObjectItem(meta, "model"), &m, &err), 0);
    ck_assert_int_eq(m.micro_batch, best->micro_batch);
    zb_gpu g;
    ck_assert_int_eq(gpu_from_json(cJSON_GetObjectItem(meta, "hardware"), &g, &err), 0);
    ck_assert_str_eq(g.name, "A100-80G");
    cJSON *pred = cJSON_GetObjectItem(meta, "predicted");
    ck_assert_double_eq(cJSON_GetObjectItem(pred, "iteration_ms")->valuedouble, best->iter_ms);
    ck_assert_double_eq(cJSON_GetObjectItem(pred, "peak_bytes")->valuedouble, best->peak_bytes);
    cJSON *plan = cJSON_GetObjectItem(meta, "plan");
    cJSON *split = cJSON_GetObjectItem(plan, "layers_per_stage");
    ck_assert_int_eq(cJSON_GetArraySize(split), best->sched->n_stages);
    int sum = 0;
    cJSON *it;
    cJSON_ArrayForEach(it, split) sum += it->valueint;
    ck_assert_int_eq(sum, 22);
    /* One recompute flag per virtual stage, true on the first rc_devices
     * devices; "recompute" is true when any is (the runtime's contract). */
    cJSON *rs = cJSON_GetObjectItem(plan, "recompute_stages");
    ck_assert_int_eq(cJSON_GetArraySize(rs), best->sched->n_stages);
    int any = 0;
    for (int i = 0; i < best->sched->n_stages; i++) {
        int on = cJSON_IsTrue(cJSON_GetArrayItem(rs, i));
        ck_assert_int_eq(on, best->sched->stage_device[i] < best->rc_devices);
        any |= on;
    }
    ck_assert_int_eq(cJSON_IsTrue(cJSON_GetObjectItem(plan, "recompute")), any);
    ck_assert_int_eq(cJSON_GetObjectItem(plan, "pipeline_parallel")->valueint, best->pp);
    ck_assert_double_eq(cJSON_GetObjectItem(pred, "time_ms")->valuedouble, best->time_ms);
    search_result_free(&r);
}
END_TEST

START_TEST(test_pp_dp)
{
    /* 16 GPUs: depths 1, 2, 4, 8, 16 with 16/p replicas each compete on
     * tokens/s per GPU of the whole job. */
    search_options o = scenario(80e9);
    o.n_devices = 0;
    o.n_gpus = 16;
    o.max_micro_batch = 2;
    o.recompute = 0;
    o.split_search = 0;
    search_result r;
    zb_err err = { { 0 } };
    ck_assert_msg(search_run(&o, &r, &err) == 0, "%s", err.msg);
    ck_assert_int_ge(r.n_fit, 1);
    int seen[17] = { 0 };
    for (int i = 0; i < r.n; i++) {
        const search_candidate *c = &r.c[i];
        ck_assert_int_eq(c->pp * c->dp, 16);
        ck_assert_int_eq(c->n_micro * c->micro_batch * c->dp, 48);
        seen[c->pp] = 1;
        if (c->status != SEARCH_SKIPPED) {
            ck_assert(c->dp_ms >= 0 && c->time_ms >= c->cost_ms);
            ck_assert_double_eq_tol(c->tokens_per_s, 48.0 * 1024 / (c->time_ms * 1e-3) / 16, 1e-6 * c->tokens_per_s);
        }
    }
    ck_assert(seen[1] && seen[2] && seen[4] && seen[8] && seen[16]);
    /* The baseline is the deepest pipeline's plain 1F1B with recompute. */
    ck_assert_int_eq(r.baseline.pp, 16);
    ck_assert_int_eq(r.baseline.rc_devices, 16);
    ck_assert(r.c[0].speedup > 0);
    search_result_free(&r);
}
END_TEST

START_TEST(test_recompute_fixed_with_vocab)
{
    /* --recompute off / on fix the setting for the vocabulary-parallel
     * versions too: they used to search recompute by device and by stage
     * whatever the user asked.  A tight limit makes recompute matter. */
    for (int on = 0; on <= 1; on++) {
        search_options o; /* the default job: Llama 3 8B, 8 x H100, 40 GB */
        search_options_default(&o);
        zb_err err = { { 0 } };
        ck_assert_int_eq(model_preset("llama3-8b", &o.model, &err), 0);
        ck_assert_int_eq(gpu_preset("H100-80G", &o.gpu, &err), 0);
        o.n_devices = 8;
        o.mem_bytes = 40e9;
        o.split_search = 0;
        o.vocab = SEARCH_VOCAB_AUTO;
        o.recompute = on;
        search_result r;
        ck_assert_msg(search_run(&o, &r, &err) == 0, "%s", err.msg);
        int vocab_seen = 0;
        for (int i = 0; i < r.n; i++) {
            const search_candidate *c = &r.c[i];
            if (c->status == SEARCH_SKIPPED || !strstr(c->label, "+vocab"))
                continue;
            vocab_seen++;
            ck_assert_msg(c->rc_devices == (on ? c->pp : 0) && c->rc_stages == 0
                          && c->rc_mlp_stages == 0,
                          "%s (recompute %s): rc_devices %d, rc_stages %d, rc_mlp %d", c->label,
                          on ? "on" : "off", c->rc_devices, c->rc_stages, c->rc_mlp_stages);
        }
        ck_assert_int_ge(vocab_seen, 1);
        search_result_free(&r);
    }
}
END_TEST

START_TEST(test_bad_options)
{
    search_options o = scenario(40e9);
    search_result r;
    zb_err err = { { 0 } };
    o.n_devices = 30; /* 22 layers + 2 allow at most 24 */
    o.n_gpus = 30;
    ck_assert_int_eq(search_run(&o, &r, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "layers"));
    o = scenario(0);
    ck_assert_int_eq(search_run(&o, &r, &err), -1);
    o = scenario(40e9);
    o.global_batch = 7;
    o.max_micro_batch = 0;
    ck_assert_int_eq(search_run(&o, &r, &err), -1);
}
END_TEST

/* Runs `zbsched search ARGS`; captures stdout and stderr; returns the exit
 * status (-1 when killed). */
static int run_cli(const char *args, char *out, size_t out_len, char *errbuf, size_t err_len)
{
    char search_args[2048];
    snprintf(search_args, sizeof search_args, "search %s", args);
    return cli_run(NULL, NULL, search_args, out, out_len, errbuf, err_len);
}

START_TEST(test_cli)
{
    static char out[1 << 24], errb[4096];
    char dir[] = "/tmp/zb_test_search_XXXXXX", args[512], path[256];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/best.json", dir);

    snprintf(args, sizeof args, "--mem 40G --model 1.5B --gpu A100-80G --gpus 8 --global-batch 48 --max-micro-batch 4 -o %s", path);
    ck_assert_int_eq(run_cli(args, out, sizeof out, errb, sizeof errb), 0);
    ck_assert_msg(strstr(out, "rank") && strstr(out, "best:"), "%s", out);
    ck_assert_int_eq(access(path, R_OK), 0);
    FILE *f = fopen(path, "r");
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = '\0';
    fclose(f);
    ck_assert_ptr_nonnull(strstr(out, "\"predicted\""));
    ck_assert_ptr_nonnull(strstr(out, "\"layers_per_stage\""));
    unlink(path);

    /* The paper's split is written into the plan when asked for. */
    snprintf(args, sizeof args, "--mem 40G --model 1.5B --gpu A100-80G --stages 8 --global-batch 48 --max-micro-batch 4 --split paper -o %s", path);
    ck_assert_int_eq(run_cli(args, out, sizeof out, errb, sizeof errb), 0);
    f = fopen(path, "r");
    n = fread(out, 1, sizeof out - 1, f);
    out[n] = '\0';
    fclose(f);
    cJSON *doc = cJSON_Parse(out);
    ck_assert_ptr_nonnull(doc);
    cJSON *split = cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "plan"), "split");
    ck_assert(cJSON_IsString(split) && !strcmp(split->valuestring, "paper"));
    cJSON_Delete(doc);
    unlink(path);

    /* Nothing fits: exit 1, one line naming the smallest memory, no file. */
    snprintf(args, sizeof args, "--mem 6G --model 1.5B --gpu A100-80G --global-batch 48 --max-micro-batch 2 --split balanced -o %s", path);
    ck_assert_int_eq(run_cli(args, out, sizeof out, errb, sizeof errb), 1);
    cli_assert_one_line(errb, "nothing fits");
    ck_assert_msg(strstr(errb, "smallest peak"), "%s", errb);
    cli_assert_no_file(path);
    /* ... or, when the static memory alone is over the limit at every
     * depth, what it takes at the deepest. */
    snprintf(args, sizeof args, "--mem 1G --model 1.5B --gpu A100-80G --global-batch 48 --max-micro-batch 2 --split balanced -o %s", path);
    ck_assert_int_eq(run_cli(args, out, sizeof out, errb, sizeof errb), 1);
    cli_assert_one_line(errb, "nothing fits");
    ck_assert_msg(strstr(errb, "optimizer state alone take at least") && strstr(errb, "pp=8 x dp=1"), "%s", errb);
    cli_assert_no_file(path);

    /* JSON lists every candidate built with its status; a plan over the
     * limit is listed when nothing of its label fits under it (10 GB:
     * some labels fit nowhere), the others are pruned by their peak. */
    snprintf(args, sizeof args, "--mem 10G --model 1.5B --gpu A100-80G --stages 8 --global-batch 48 --max-micro-batch 4 --split balanced --json -o %s", path);
    ck_assert_int_eq(run_cli(args, out, sizeof out, errb, sizeof errb), 0);
    cJSON *j = cJSON_Parse(out);
    ck_assert_ptr_nonnull(j);
    ck_assert(cJSON_GetArraySize(cJSON_GetObjectItem(j, "candidates")) > 20);
    ck_assert_ptr_nonnull(strstr(out, "\"status\":\t\"oom\""));
    cJSON_Delete(j);
    unlink(path);

    /* A depth left out for its static memory is in --json's depths with
     * the floor that alone exceeds the limit (8 GB: pp=1 and 2). */
    snprintf(args, sizeof args, "--mem 8G --model 1.5B --gpu A100-80G --gpus 8 --global-batch 48 "
             "--max-micro-batch 2 --split balanced --json -o %s", path);
    ck_assert_int_eq(run_cli(args, out, sizeof out, errb, sizeof errb), 0);
    j = cJSON_Parse(out);
    ck_assert_ptr_nonnull(j);
    int floors = 0;
    cJSON *dep;
    cJSON_ArrayForEach(dep, cJSON_GetObjectItem(j, "depths"))
    {
        cJSON *fl = cJSON_GetObjectItem(dep, "static_floor_bytes");
        if (!fl)
            continue;
        floors++;
        ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(dep, "fits")) && fl->valuedouble > 8e9);
        ck_assert_int_le(cJSON_GetObjectItem(dep, "pipeline_parallel")->valueint, 2);
    }
    ck_assert_int_eq(floors, 2);
    cJSON_Delete(j);
    unlink(path);

    /* The JSON has the baseline and the why figures; every candidate its
     * speed-up; a fused loss and nodes are accepted. */
    snprintf(args, sizeof args, "--mem 40G --model 1.5B --gpu A100-80G --gpus 8 --nodes 2 --loss fused "
             "--global-batch 48 --max-micro-batch 2 --json -o %s", path);
    ck_assert_int_eq(run_cli(args, out, sizeof out, errb, sizeof errb), 0);
    j = cJSON_Parse(out);
    ck_assert_ptr_nonnull(j);
    cJSON *base = cJSON_GetObjectItem(j, "baseline"), *why = cJSON_GetObjectItem(j, "why");
    ck_assert(base && why);
    ck_assert_str_eq(cJSON_GetObjectItem(base, "schedule")->valuestring, "1f1b");
    ck_assert(cJSON_GetObjectItem(why, "work_bound_ms")->valuedouble <=
              cJSON_GetObjectItem(why, "imbalance_bound_ms")->valuedouble);
    ck_assert_int_ge(cJSON_GetArraySize(cJSON_GetObjectItem(j, "depths")), 2); /* pp 1, 2, 4, 8 */
    cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "candidates"), 0);
    ck_assert(cJSON_GetObjectItem(first, "speedup")->valuedouble > 0);
    cJSON_Delete(j);
    unlink(path);

    /* The table says why under it. */
    snprintf(args, sizeof args, "--mem 40G --model 1.5B --gpu A100-80G --stages 8 --global-batch 48 --max-micro-batch 2 --split balanced -o %s", path);
    ck_assert_int_eq(run_cli(args, out, sizeof out, errb, sizeof errb), 0);
    ck_assert_msg(strstr(out, "work bound") && strstr(out, "imbalance bound") && strstr(out, "baseline") &&
                  strstr(out, "makespan"), "%s", out);
    ck_assert_msg(!strstr(out, "other pipeline depths"), "--stages fixes the depth: %s", out);
    unlink(path);

    /* Usage errors: exit 2, exactly one line. */
    const char *bad[] = { "--mem 40X", "--mem -4G", "--mem 0", "--mem 40G --model nope",
                          "--mem 40G --gpu V100", "--mem 40G --gpus 0", "--mem 40G --gpus 4 --stages 8",
                          "--mem 40G --recompute maybe", "--mem 40G --split even", "--mem 40G --bogus",
                          "--mem", "--mem 40G --loss chunked", "--mem 40G --gpus 8 --nodes 3",
                          "--mem 40G --nodes 0" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(run_cli(bad[i], out, sizeof out, errb, sizeof errb) == 2, "'%s' did not exit 2", bad[i]);
        cli_assert_one_line(errb, NULL);
    }
    /* Too many devices for the model: a library error, exit 1. */
    ck_assert_int_eq(run_cli("--mem 40G --model tiny --stages 8", out, sizeof out, errb, sizeof errb), 1);
    cli_assert_one_line(errb, NULL);
    rmdir(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("search");
    TCase *tc = tcase_create("search");
    tcase_set_timeout(tc, 180); /* test_cli runs seven searches: minutes under the sanitizers on a loaded machine */
    tcase_add_test(tc, test_ranking);
    tcase_add_test(tc, test_limit_excludes);
    tcase_add_test(tc, test_nothing_fits);
    tcase_add_test(tc, test_annotate);
    tcase_add_test(tc, test_pp_dp);
    tcase_add_test(tc, test_recompute_fixed_with_vocab);
    tcase_add_test(tc, test_bad_options);
    tcase_add_test(tc, test_cli);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
