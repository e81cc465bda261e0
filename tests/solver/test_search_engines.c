/*
 * test_search_engines.c: `zbsched search --target` and the search's
 * output (issues 26, 24 and 29): which engine runs which plan; that each
 * target's own search answers what every other search's why block says
 * it would; the why block as rows; the tiny CPU search (no vocabulary
 * parallelism over one device, no CUDA reserve, "devices"); --mem from
 * the GPU, its warning, --seq-len and --micro-batch; columns that line
 * up; sizes with their unit and no scientific notation.
 *
 * The library scenario is the zero-bubble paper's 1.5B model on 4 A100s
 * with a global batch of 16 (b in 1, 2), every depth, both splits with
 * the local search and vocabulary-parallel versions: a fraction of a
 * second per search.
 */
#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "solver/search.h"
#include "src/sched_io.h"
#include "src/size.h"
#include "tests/common/cli_run.h"

static search_options scenario(search_target t)
{
    search_options o;
    search_options_default(&o);
    zb_err err = { { 0 } };
    ck_assert_int_eq(model_preset("1.5B", &o.model, &err), 0);
    ck_assert_int_eq(gpu_preset("A100-80G", &o.gpu, &err), 0);
    o.n_gpus = 4;
    o.global_batch = 16;
    o.max_micro_batch = 2;
    o.mem_bytes = 20e9;
    o.vocab = SEARCH_VOCAB_AUTO;
    o.target = t;
    return o;
}

START_TEST(test_masks)
{
    search_candidate c;
    memset(&c, 0, sizeof c);
    strcpy(c.label, "zb-auto max");
    strcpy(c.family, "zb-auto");
    c.pp = 8;
    c.n_stages = 8;
    c.rc_devices = 4; /* the first 4 devices recompute */
    unsigned z = 1u << SEARCH_TARGET_ZBSCHED, t = 1u << SEARCH_TARGET_TORCH;
    unsigned tt = 1u << SEARCH_TARGET_TORCHTITAN, mg = 1u << SEARCH_TARGET_MEGATRON;
    ck_assert_uint_eq(search_target_mask(&c), z | t);
    c.rc_devices = 8; /* everywhere: torchtitan's "full" */
    ck_assert_uint_eq(search_target_mask(&c), z | t | tt);
    strcpy(c.family, "interleaved");
    ck_assert_uint_eq(search_target_mask(&c), z | t | tt | mg);
    c.rc_devices = 0;
    c.rc_stages = c.rc_mlp_stages = SEARCH_RC_ALL; /* every stage at the MLP level */
    ck_assert_uint_eq(search_target_mask(&c), z | t | mg);
    char buf[32];
    ck_assert_str_eq(search_rc_text(&c, buf, sizeof buf), "mlp");
    c.vocab = 1;
    ck_assert_uint_eq(search_target_mask(&c), z);
    char why[160];
    search_target_refusal(&c, SEARCH_TARGET_TORCHTITAN, why, sizeof why);
    ck_assert_ptr_nonnull(strstr(why, "vocabulary"));
    search_target tg;
    zb_err err = { { 0 } };
    ck_assert_int_eq(search_target_parse("megatron", &tg, &err), 0);
    ck_assert_int_eq(tg, SEARCH_TARGET_MEGATRON);
    ck_assert_int_eq(search_target_parse("deepspeed", &tg, &err), -1);
}
END_TEST

/* c runs on t: the rules of each engine, checked from the fields. */
static void assert_runs_on(const search_candidate *c, search_target t)
{
    ck_assert_msg(c->targets >> t & 1, "%s cannot run %s", search_target_name(t), c->label);
    if (t == SEARCH_TARGET_ZBSCHED)
        return;
    ck_assert_int_eq(c->vocab, 0);
    int uniform = (c->rc_stages == 0 && (c->rc_devices == 0 || c->rc_devices >= c->pp)) ||
                  c->rc_mlp_stages == SEARCH_RC_ALL;
    if (t == SEARCH_TARGET_TORCHTITAN)
        ck_assert_msg(uniform && c->rc_mlp_stages != SEARCH_RC_ALL, "%s", c->label);
    if (t == SEARCH_TARGET_MEGATRON) {
        ck_assert_msg(uniform, "%s", c->label);
        ck_assert_msg(!strcmp(c->family, "1f1b") || !strcmp(c->family, "interleaved"), "%s", c->family);
    }
}

START_TEST(test_targets_agree)
{
    /* One search per target: each ranks only what it runs, and each
     * other search's r.best[t] is exactly target t's own answer. */
    search_result r[SEARCH_N_TARGETS];
    zb_err err = { { 0 } };
    for (int t = 0; t < SEARCH_N_TARGETS; t++) {
        search_options o = scenario((search_target)t);
        ck_assert_msg(search_run(&o, &r[t], &err) == 0, "%s", err.msg);
        ck_assert_int_ge(r[t].n_fit, 1);
        for (int i = 0; i < r[t].n; i++) {
            const search_candidate *c = &r[t].c[i];
            if (i < r[t].n_fit)
                assert_runs_on(c, (search_target)t);
            else if (c->status == SEARCH_FIT || c->status == SEARCH_OOM)
                ck_assert(c->targets >> t & 1);
            if (c->status == SEARCH_FIT || c->status == SEARCH_OOM)
                ck_assert(c->sync_ms >= c->async_ms * (1 - 1e-12));
            ck_assert_double_eq(c->time_ms, search_target_sync((search_target)t) ? c->sync_ms : c->async_ms);
        }
        ck_assert_ptr_nonnull(r[t].c[0].sched);
    }
    for (int t = 0; t < SEARCH_N_TARGETS; t++)
        for (int u = 0; u < SEARCH_N_TARGETS; u++) {
            const search_candidate *own = &r[u].c[0], *seen = &r[t].best[u];
            ck_assert_int_eq(seen->status, SEARCH_FIT);
            ck_assert_msg(!strcmp(seen->label, own->label) && seen->pp == own->pp &&
                          seen->micro_batch == own->micro_batch && seen->rc_devices == own->rc_devices &&
                          seen->rc_stages == own->rc_stages && seen->split_tuned == own->split_tuned,
                          "search for %s says %s's best is %s pp=%d b=%d; its own search says %s pp=%d b=%d",
                          search_target_name((search_target)t), search_target_name((search_target)u), seen->label,
                          seen->pp, seen->micro_batch, own->label, own->pp, own->micro_batch);
            ck_assert_double_eq(seen->time_ms, own->time_ms);
        }
    /* zbsched runs everything the others do, faster or as fast. */
    for (int u = 1; u < SEARCH_N_TARGETS; u++)
        ck_assert(r[0].c[0].time_ms <= r[0].best[u].time_ms * SEARCH_TIME_RESOLUTION);
    /* The why block ends with one row per other target. */
    search_options o = scenario(SEARCH_TARGET_TORCHTITAN);
    search_why_block w;
    search_why_build(&o, &r[SEARCH_TARGET_TORCHTITAN], &w);
    ck_assert_int_ge(w.n, 4);
    ck_assert_int_eq(w.row[w.n - 4].kind, SEARCH_WHY_HEADING);
    ck_assert_str_eq(w.row[w.n - 4].label, "other targets:");
    const char *names[] = { "zbsched", "torch", "megatron" };
    const int ids[] = { SEARCH_TARGET_ZBSCHED, SEARCH_TARGET_TORCH, SEARCH_TARGET_MEGATRON };
    for (int k = 0; k < 3; k++) {
        const search_why_row *row = &w.row[w.n - 3 + k];
        ck_assert_str_eq(row->label, names[k]);
        ck_assert_int_eq(row->level, 1);
        ck_assert_double_eq(row->ms, r[ids[k]].c[0].time_ms);
        ck_assert_msg(strstr(row->text, "the winner's time"), "%s", row->text);
    }
    for (int t = 0; t < SEARCH_N_TARGETS; t++)
        search_result_free(&r[t]);
}
END_TEST

START_TEST(test_mlp_everywhere)
{
    /* Recompute searched includes every stage at the MLP level (Megatron's
     * selective mlp,layernorm); a plan with it is written as such. */
    search_options o = scenario(SEARCH_TARGET_MEGATRON);
    o.split_search = 0;
    o.exhaustive = 1; /* every setting built: pruning may skip a slower one */
    search_result r;
    zb_err err = { { 0 } };
    ck_assert_msg(search_run(&o, &r, &err) == 0, "%s", err.msg);
    int seen = 0;
    for (int i = 0; i < r.n; i++)
        if (r.c[i].rc_mlp_stages == SEARCH_RC_ALL && r.c[i].status != SEARCH_SKIPPED) {
            seen++;
            ck_assert(r.c[i].targets >> SEARCH_TARGET_MEGATRON & 1 || r.c[i].status == SEARCH_UNSUPPORTED);
        }
    ck_assert_int_gt(seen, 0);
    search_result_free(&r);
}
END_TEST

START_TEST(test_cpu_device)
{
    /* The tiny search on two CPU cores: no vocabulary-parallel plan over
     * one device and no CUDA reserve. */
    search_options o;
    search_options_default(&o);
    zb_err err = { { 0 } };
    ck_assert_int_eq(model_preset("tiny", &o.model, &err), 0);
    char path[512];
    snprintf(path, sizeof path, "%s/tools/cpu-device.json", getenv("ZB_SOURCE_ROOT"));
    ck_assert_msg(gpu_load(path, &o.gpu, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(o.gpu.cpu, 1);
    o.n_gpus = 2;
    o.mem_bytes = 4e9;
    o.vocab = SEARCH_VOCAB_AUTO;
    search_result r;
    ck_assert_msg(search_run(&o, &r, &err) == 0, "%s", err.msg);
    int vocab = 0;
    for (int i = 0; i < r.n; i++) {
        ck_assert_msg(!(r.c[i].vocab && r.c[i].pp == 1), "%s at pp=1", r.c[i].label);
        vocab += r.c[i].vocab != 0;
        if (r.c[i].status == SEARCH_FIT)
            ck_assert_msg(r.c[i].static_bytes < 1e9, "%s: static %g bytes", r.c[i].label, r.c[i].static_bytes);
    }
    ck_assert_int_gt(vocab, 0); /* at pp=2 they are still tried */
    ck_assert_str_eq(search_device_noun(&o.gpu, 1), "device");
    ck_assert_str_eq(search_device_noun(&o.gpu, 2), "devices");
    search_result_free(&r);
}
END_TEST

START_TEST(test_micro_batch_fixed)
{
    search_options o = scenario(SEARCH_TARGET_ZBSCHED);
    o.split_search = 0;
    o.model.micro_batch = 2;
    o.micro_batch_fixed = 1;
    search_result r;
    zb_err err = { { 0 } };
    ck_assert_msg(search_run(&o, &r, &err) == 0, "%s", err.msg);
    for (int i = 0; i < r.n; i++)
        ck_assert_int_eq(r.c[i].micro_batch, 2);
    search_result_free(&r);
    o.model.micro_batch = 3; /* divides no replica's batch of 16 */
    ck_assert_int_eq(search_run(&o, &r, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "micro-batch 3"));
}
END_TEST

/* --- through the program -------------------------------------------------- */

static char out[1 << 22], errb[1 << 14];
static char dir[64];

static void setup(void)
{
    cli_scratch_new("search_engines", dir, sizeof dir);
}

static void teardown(void)
{
    cli_scratch_free(dir);
}

/* Runs the program in the scratch directory, output into out and errb. */
#define zb(...) cli_runf(dir, out, sizeof out, errb, sizeof errb, __VA_ARGS__)

static cJSON *load(const char *name)
{
    char *text = cli_slurp(dir, name);
    cJSON *j = cJSON_Parse(text);
    free(text);
    ck_assert_ptr_nonnull(j);
    return j;
}

#define JOB "--model 1.5B --gpu A100-80G --gpus 4 --global-batch 16 --max-micro-batch 2"

START_TEST(cli_target)
{
    ck_assert_int_eq(zb("search --mem 20G " JOB " --target megatron -o m.json"), 0);
    ck_assert_msg(strstr(out, "best for megatron: "), "%.3000s", out);
    ck_assert_msg(strstr(out, ", target megatron\n"), "%.3000s", out);
    ck_assert_msg(strstr(out, "other targets:"), "%.3000s", out);
    cJSON *j = load("m.json");
    cJSON *plan = cJSON_GetObjectItem(j, "plan");
    ck_assert_str_eq(cJSON_GetObjectItem(plan, "target")->valuestring, "megatron");
    const char *family = cJSON_GetObjectItem(plan, "family")->valuestring;
    ck_assert_msg(!strcmp(family, "1f1b") || !strcmp(family, "interleaved"), "%s", family);
    int has = 0;
    cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(plan, "targets")) has |= !strcmp(it->valuestring, "megatron");
    ck_assert(has);
    ck_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "predicted"), "step")->valuestring, "sync");
    cJSON_Delete(j);

    /* Where nothing Megatron runs fits, the line names the target whose plan does
     * (pipeline x data parallel only: tensor parallelism would fit, issue 27;
     * here zbsched's V-shaped v-min fits where no 1F1B does). */
    ck_assert_int_eq(zb("search --mem 11G " JOB " --target megatron --tp 1 --cp 1 -o x.json"), 1);
    cli_assert_one_line(errb, "or --target zbsched, whose ");
    ck_assert_int_eq(zb("search --mem 20G " JOB " --target deepspeed -o x.json"), 2);
    cli_assert_one_line(errb, "--target");
    ck_assert_int_eq(zb("search --mem 20G " JOB " --target torch --vocab parallel -o x.json"), 2);
    cli_assert_one_line(errb, "vocabulary-parallel");
    char path[128];
    snprintf(path, sizeof path, "%s/x.json", dir);
    cli_assert_no_file(path);
}
END_TEST

START_TEST(cli_mem_default_and_warning)
{
    /* No --mem: the GPU's whole memory (81920 MiB), said in the header. */
    char has[32], want[128], asked[32];
    zb_size_format(81920.0 * 1048576.0, has, sizeof has);
    zb_size_format(100e9, asked, sizeof asked);
    snprintf(want, sizeof want, "memory limit %s per GPU (the A100-80G's memory", has);
    ck_assert_int_eq(zb("search " JOB " --split balanced -o a.json"), 0);
    ck_assert_msg(strstr(out, want), "%.3000s", out);
    ck_assert_msg(errb[0] == '\0', "%.3000s", errb);
    /* More than the GPU has: a warning, and the search still answers. */
    ck_assert_int_eq(zb("search --mem 100G " JOB " --split balanced -o b.json"), 0);
    ck_assert_msg(strstr(errb, "warning") && strstr(errb, asked) && strstr(errb, has), "%.3000s", errb);
    ck_assert_int_eq(cli_lines(errb), 1);
    ck_assert_int_eq(zb("search --mem 40G " JOB " --split balanced -o c.json"), 0);
    ck_assert_msg(errb[0] == '\0', "%.3000s", errb);
}
END_TEST

START_TEST(cli_seq_len_micro_batch)
{
    ck_assert_int_eq(zb("search --mem 20G " JOB " --seq-len 512 --micro-batch 2 --split balanced --json -o a.json"), 0);
    cJSON *j = cJSON_Parse(out);
    ck_assert_ptr_nonnull(j);
    ck_assert_int_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "model"), "seq_len")->valueint, 512);
    cJSON *it;
    int n = 0;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(j, "candidates")) {
        ck_assert_int_eq(cJSON_GetObjectItem(it, "micro_batch")->valueint, 2);
        n++;
    }
    ck_assert_int_gt(n, 10);
    cJSON_Delete(j);
    ck_assert_int_eq(zb("search --mem 20G " JOB " --seq-len 0 -o b.json"), 2);
    cli_assert_one_line(errb, "--seq-len");
    ck_assert_int_eq(zb("search --mem 20G " JOB " --micro-batch x -o b.json"), 2);
    cli_assert_one_line(errb, "--micro-batch");
}
END_TEST

/* Splits a table line into fields separated by two or more spaces; fills
 * the fields' first and last columns.  Returns the count. */
static int fields(const char *line, int *start, int *end, int cap)
{
    int n = 0, i = 0, len = (int)strlen(line);
    while (i < len && n < cap) {
        while (i < len && line[i] == ' ')
            i++;
        if (i >= len)
            break;
        start[n] = i;
        while (i < len && !(line[i] == ' ' && (i + 1 >= len || line[i + 1] == ' ')))
            i++;
        end[n++] = i;
    }
    return n;
}

/* Every column of the lines first..last-1 of text (split at newlines)
 * shares its left edge or its right edge with the header's. */
static void assert_aligned(char **lines, int n)
{
    int hs[32], he[32], s[32], e[32];
    int cols = fields(lines[0], hs, he, 32);
    ck_assert_int_ge(cols, 3);
    for (int k = 1; k < n; k++) {
        int c = fields(lines[k], s, e, 32);
        ck_assert_msg(c == cols, "%d fields, the header has %d:\n%s\n%s", c, cols, lines[0], lines[k]);
        for (int f = 0; f < c; f++)
            ck_assert_msg(s[f] == hs[f] || e[f] == he[f], "column %d is not aligned:\n%s\n%s", f, lines[0],
                          lines[k]);
    }
}

START_TEST(cli_columns_align)
{
    /* The default job's table holds the longest labels and recompute
     * settings ("interleaved v=8 +vocab-1", "s0-28m25"). */
    ck_assert_int_eq(zb("search --mem 40G -o best.json -v"), 0);
    char *lines[20000];
    int n = 0;
    for (char *p = strtok(out, "\n"); p && n < 20000; p = strtok(NULL, "\n"))
        lines[n++] = p;
    int head = -1, why = -1, drop = -1;
    for (int i = 0; i < n; i++) {
        if (!strncmp(lines[i], "rank  ", 6))
            head = i;
        if (!strncmp(lines[i], "why: ", 5))
            why = i;
        if (!strncmp(lines[i], "  status  ", 10))
            drop = i;
    }
    ck_assert_msg(head >= 0 && why > head && drop > why, "no table, why or list:\n%.3000s", out);
    int long_rows = 0; /* rows with a long label and a per-stage recompute setting */
    for (int i = head + 1; i <= head + 15 && i < why; i++)
        long_rows += strstr(lines[i], "interleaved") && strstr(lines[i], " +vocab-") && strstr(lines[i], " s0-");
    ck_assert_msg(long_rows > 0, "no long row in the table:\n%.3000s", out);
    assert_aligned(&lines[head], 16); /* header and 15 rows */
    /* The why block: every time ends in one column. */
    int ms_end = -1;
    for (int i = why + 1; i < drop; i++) {
        char *ms = strstr(lines[i], " ms  ");
        if (!ms)
            continue;
        int at = (int)(ms - lines[i]) + 3;
        if (ms_end < 0)
            ms_end = at;
        ck_assert_msg(at == ms_end, "time not aligned:\n%s", lines[i]);
    }
    ck_assert_int_gt(ms_end, 0);
    /* The list of dropped candidates: a few hundred of its rows. */
    assert_aligned(&lines[drop], 300);
}
END_TEST

START_TEST(cli_units)
{
    /* The peak of every device in GB with the unit, as the plan has it. */
    ck_assert_int_eq(zb("search --mem 20G " JOB " -o a.json"), 0);
    const char *line = strstr(out, "peak memory per device (static + activations): ");
    ck_assert_msg(line, "%.3000s", out);
    cJSON *j = load("a.json");
    cJSON *peaks = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "predicted"), "device_peak_bytes");
    cJSON *it;
    cJSON_ArrayForEach(it, peaks) {
        char want[32];
        zb_size_format(it->valuedouble, want, sizeof want);
        ck_assert_ptr_nonnull(strstr(want, " GB"));
        ck_assert_msg(strstr(line, want), "%s not in %s", want, line);
    }
    cJSON_Delete(j);
    /* A GPU of 1 GFLOP/s makes times of 10^11 ms and more: written out. */
    FILE *f;
    char path[128];
    snprintf(path, sizeof path, "%s/slow.json", dir);
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    fputs("{ \"base\": \"A100-80G\", \"name\": \"slow\", \"peak_flops\": 1e9 }\n", f);
    fclose(f);
    ck_assert_int_eq(zb("search --model llama3-70b --gpu slow.json --gpus 8 --stages 8 --mem 1P "
                        "--max-micro-batch 1 --split balanced --recompute off --vocab plain -o s.json"), 0);
    for (const char *p = out; (p = strchr(p, 'e')) != NULL; p++)
        ck_assert_msg(!(p > out && p[-1] >= '0' && p[-1] <= '9' && (p[1] == '+' || p[1] == '-')),
                      "scientific notation: %.60s", p > out + 20 ? p - 20 : out);
}
END_TEST

START_TEST(cli_profile_job_flags)
{
    /* profile takes the same model flags as search. */
    ck_assert_int_eq(zb("profile --model tiny --micro-batch 2 --seq-len 32 --reps 1 -q -o p.json"), 0);
    cJSON *j = load("p.json");
    ck_assert_int_eq(cJSON_GetObjectItem(j, "micro_batch")->valueint, 2);
    ck_assert_int_eq(cJSON_GetObjectItem(j, "seq_len")->valueint, 32);
    cJSON_Delete(j);
    ck_assert_int_eq(zb("profile --model tiny --seq-len 0 -o q.json"), 2);
    cli_assert_one_line(errb, "--seq-len");
}
END_TEST

START_TEST(cli_tiny_cpu)
{
    ck_assert_int_eq(zb("search --model tiny --gpu %s/tools/cpu-device.json --gpus 2 --mem 4G -o t.json --top 40",
                        getenv("ZB_SOURCE_ROOT")), 0);
    ck_assert_msg(strstr(out, ", 2 devices, ") && strstr(out, "per device"), "%.3000s", out);
    ck_assert_msg(!strstr(out, "GPU"), "a CPU device called a GPU:\n%.3000s", out);
    ck_assert_msg(!strstr(out, "1 devices") && !strstr(out, "over the 1 "), "%.3000s", out);
    for (const char *p = out; (p = strstr(p, "+vocab")) != NULL; p++) {
        const char *eol = strchr(p, '\n');
        ck_assert_msg(!(eol && memmem(p, (size_t)(eol - p), "1x2", 3)), "vocabulary parallelism over one device");
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("search_engines");
    TCase *lib = tcase_create("library");
    tcase_set_timeout(lib, 120);
    tcase_add_test(lib, test_masks);
    tcase_add_test(lib, test_targets_agree);
    tcase_add_test(lib, test_mlp_everywhere);
    tcase_add_test(lib, test_cpu_device);
    tcase_add_test(lib, test_micro_batch_fixed);
    suite_add_tcase(s, lib);
    TCase *cli = tcase_create("cli");
    tcase_set_timeout(cli, 120);
    tcase_add_checked_fixture(cli, setup, teardown);
    tcase_add_test(cli, cli_target);
    tcase_add_test(cli, cli_mem_default_and_warning);
    tcase_add_test(cli, cli_seq_len_micro_batch);
    tcase_add_test(cli, cli_columns_align);
    tcase_add_test(cli, cli_units);
    tcase_add_test(cli, cli_profile_job_flags);
    tcase_add_test(cli, cli_tiny_cpu);
    suite_add_tcase(s, cli);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
