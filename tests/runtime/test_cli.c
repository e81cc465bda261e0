/*
 * test_cli.c: `zbsched run` and `zbsched profile` as a user meets them:
 * bad input gives one clear line on stderr and a non-zero exit (never a
 * crash or a hang), --json reports losses, val_loss, tokens/s and each
 * device's memory (the ledger against the prediction), --trace
 * writes a valid schedule file whose measured times respect the pipeline's
 * dependencies, --stop-at + --resume continue bit-identically, and
 * `profile` writes a profile file that profile_load accepts.
 */
#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "src/profile.h"
#include "src/sched_io.h"
#include "src/validate.h"
#include "tests/common/cli_run.h"

static char dir[64];
static char out_text[1 << 16], err_text[1 << 14];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/zb_test_cli_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* Runs `zbsched ARGS` (under a 120 s timeout) from the repository root;
 * stdout goes to out_text, stderr to err_text; the temporary directory
 * holds schedule files made by make_schedule.  Returns the exit status
 * (-1 when killed). */
static int zb(const char *fmt, ...)
{
    char args[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    const char *root = getenv("ZB_SOURCE_ROOT");
    ck_assert_ptr_nonnull(root);
    return cli_run(root, "timeout 120", args, out_text, sizeof out_text, err_text,
                   sizeof err_text);
}

/* Asserts a failed run printed exactly one line on stderr containing want. */
static void assert_one_line_error(int rc, const char *want)
{
    ck_assert_msg(rc == 1 || rc == 2, "exit %d, stderr: %s", rc, err_text);
    cli_assert_one_line(err_text, want);
}

static void make_schedule(const char *kind, int p, int m, const char *extra)
{
    ck_assert_int_eq(zb("gen %s -p %d -m %d %s -o %s/%s.json", kind, p, m, extra, dir, kind), 0);
}

START_TEST(run_rejects_bad_input)
{
    make_schedule("1f1b", 2, 4, "");
    /* Missing data file. */
    assert_one_line_error(zb("run %s/1f1b.json --steps 2 --data %s/nope.txt", dir, dir), "nope.txt");
    /* Empty and tiny texts. */
    char path[256];
    snprintf(path, sizeof path, "%s/empty.txt", dir);
    fclose(fopen(path, "w"));
    assert_one_line_error(zb("run %s/1f1b.json --steps 2 --data %s", dir, path), "empty");
    snprintf(path, sizeof path, "%s/tiny.txt", dir);
    FILE *f = fopen(path, "w");
    fputs("To be, or not to be, that is the question.\n", f);
    fclose(f);
    assert_one_line_error(zb("run %s/1f1b.json --steps 2 --data %s", dir, path), "too short");
    /* A schedule with more virtual stages than the model has layers. */
    ck_assert_int_eq(zb("gen interleaved -p 4 -m 8 --chunks 2 -o %s/il.json", dir), 0);
    assert_one_line_error(zb("run %s/il.json --steps 2 --model tiny", dir), "8 virtual stages");
    /* Missing or broken schedule file. */
    assert_one_line_error(zb("run %s/none.json --steps 2", dir), "none.json");
    /* Flags. */
    assert_one_line_error(zb("run %s/1f1b.json --steps 0", dir), "--steps");
    assert_one_line_error(zb("run %s/1f1b.json --steps x", dir), "--steps");
    assert_one_line_error(zb("run %s/1f1b.json", dir), "--steps");
    assert_one_line_error(zb("run --steps 2"), "FILE");
    assert_one_line_error(zb("run %s/1f1b.json --steps 2 --bogus", dir), "--bogus");
    assert_one_line_error(zb("run %s/1f1b.json --steps 2 --model nosuchmodel", dir), "nosuchmodel");
    assert_one_line_error(zb("run %s/1f1b.json --steps 2 --resume", dir), "--checkpoint");
    /* Divergence: a NaN/inf loss is an error, not a silent result. */
    assert_one_line_error(zb("run %s/1f1b.json --steps 6 -q --lr 1e30 --clip 0", dir), "loss is");
    ck_assert_int_eq(zb("run --help"), 0);
    ck_assert_ptr_nonnull(strstr(out_text, "--steps"));
}
END_TEST

START_TEST(run_json_trace_and_resume)
{
    make_schedule("zb-h1", 2, 4, "");
    char trace[128];
    snprintf(trace, sizeof trace, "%s/trace.json", dir);
    ck_assert_msg(zb("run %s/zb-h1.json --steps 4 -q --json --eval-every 2 --trace %s", dir, trace) == 0,
                  "%s", err_text);
    cJSON *o = cJSON_Parse(out_text);
    ck_assert_ptr_nonnull(o);
    cJSON *losses = cJSON_GetObjectItem(o, "losses");
    ck_assert_int_eq(cJSON_GetArraySize(losses), 4);
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(o, "evals")), 2);
    double val = cJSON_GetObjectItem(o, "val_loss")->valuedouble;
    ck_assert(isfinite(val) && val > 0 && val < 5);
    ck_assert(cJSON_GetObjectItem(o, "tokens_per_s")->valuedouble > 0);
    /* the memory ledger: each device's measured peak against the prediction */
    cJSON *mem = cJSON_GetObjectItem(o, "memory");
    ck_assert_int_eq(cJSON_GetArraySize(mem), 2);
    for (int d = 0; d < 2; d++) {
        cJSON *e = cJSON_GetArrayItem(mem, d);
        ck_assert_int_eq(cJSON_GetObjectItem(e, "device")->valueint, d);
        double pred = cJSON_GetObjectItem(e, "predicted_bytes")->valuedouble;
        double meas = cJSON_GetObjectItem(e, "measured_bytes")->valuedouble;
        ck_assert_msg(pred > 0 && fabs(meas / pred - 1) <= 0.02, "device %d: %.0f of %.0f", d,
                      meas, pred);
        cJSON *params = cJSON_GetObjectItem(cJSON_GetObjectItem(e, "classes"), "parameters");
        ck_assert(cJSON_GetObjectItem(params, "measured")->valuedouble > 0);
    }
    double full[4];
    for (int i = 0; i < 4; i++)
        full[i] = cJSON_GetArrayItem(losses, i)->valuedouble;
    cJSON_Delete(o);

    /* The trace is a valid schedule whose measured times are ordered per
     * lane and respect every cross-stage dependency. */
    sched_t *s = NULL;
    zb_err err;
    ck_assert_msg(sched_load_file(trace, &s, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(sched_validate(s, &err), 0);
    ck_assert_str_eq(s->time_unit, "ms");
    double *f_end = calloc((size_t)(s->n_stages * s->n_micro), sizeof *f_end);
    double *f_start = calloc((size_t)(s->n_stages * s->n_micro), sizeof *f_start);
    for (int d = 0; d < s->n_devices; d++) {
        ck_assert_ptr_nonnull(s->dev[d].start);
        for (int k = 0; k < s->dev[d].n_ops; k++) {
            ck_assert(s->dev[d].end[k] >= s->dev[d].start[k] && s->dev[d].start[k] >= 0);
            if (k > 0)
                ck_assert(s->dev[d].start[k] >= s->dev[d].end[k - 1]);
            sched_op op = s->dev[d].ops[k];
            if (op.kind == OP_F) {
                f_end[op.stage * s->n_micro + op.mb] = s->dev[d].end[k];
                f_start[op.stage * s->n_micro + op.mb] = s->dev[d].start[k];
            }
        }
    }
    for (int st = 1; st < s->n_stages; st++)
        for (int j = 0; j < s->n_micro; j++)
            ck_assert_msg(f_start[st * s->n_micro + j] >= f_end[(st - 1) * s->n_micro + j],
                          "F%d@%d started before its input existed", j, st);
    free(f_end);
    free(f_start);
    sched_free(s);
    ck_assert_int_eq(zb("simulate %s", trace), 0);

    /* Interrupted at step 2 and resumed: the same losses. */
    ck_assert_msg(zb("run %s/zb-h1.json --steps 4 --stop-at 2 -q --json --eval-every 2 --checkpoint %s/ck",
                     dir, dir) == 0, "%s", err_text);
    o = cJSON_Parse(out_text);
    for (int i = 0; i < 2; i++)
        ck_assert_double_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "losses"), i)->valuedouble, full[i]);
    cJSON_Delete(o);
    ck_assert_msg(zb("run %s/zb-h1.json --steps 4 -q --json --eval-every 2 --checkpoint %s/ck --resume",
                     dir, dir) == 0, "%s", err_text);
    o = cJSON_Parse(out_text);
    ck_assert_int_eq(cJSON_GetObjectItem(o, "first_step")->valueint, 2);
    losses = cJSON_GetObjectItem(o, "losses");
    ck_assert_int_eq(cJSON_GetArraySize(losses), 2);
    for (int i = 0; i < 2; i++)
        ck_assert_double_eq(cJSON_GetArrayItem(losses, i)->valuedouble, full[2 + i]);
    ck_assert_double_eq(cJSON_GetObjectItem(o, "val_loss")->valuedouble, val);
    cJSON_Delete(o);

    /* Corrupt and truncated checkpoints are refused with one line (the
     * one part of a one-process checkpoint, runtime/ckpt_set.h). */
    char ck[160], cmd[400];
    snprintf(cmd, sizeof cmd, "ls %s/ck/checkpoint.*.rank-0.bin", dir);
    FILE *ls = popen(cmd, "r");
    ck_assert_ptr_nonnull(ls);
    ck_assert_ptr_nonnull(fgets(ck, sizeof ck, ls));
    ck[strcspn(ck, "\n")] = '\0';
    pclose(ls);
    snprintf(cmd, sizeof cmd, "printf 'XX' | dd of=%s bs=1 seek=100 conv=notrunc status=none", ck);
    ck_assert_int_eq(system(cmd), 0);
    assert_one_line_error(zb("run %s/zb-h1.json --steps 6 -q --checkpoint %s/ck --resume", dir, dir),
                          "corrupt");
    ck_assert_int_eq(truncate(ck, 1000), 0);
    assert_one_line_error(zb("run %s/zb-h1.json --steps 6 -q --checkpoint %s/ck --resume", dir, dir),
                          "truncated");
    /* A checkpoint of another split is refused too. */
    make_schedule("1f1b", 4, 4, "");
    ck_assert_int_eq(zb("run %s/zb-h1.json --steps 1 -q --checkpoint %s/ck2", dir, dir), 0);
    assert_one_line_error(zb("run %s/1f1b.json --steps 2 -q --checkpoint %s/ck2 --resume", dir, dir),
                          "checkpoint");
}
END_TEST

START_TEST(profile_writes_a_loadable_profile)
{
    char path[128];
    snprintf(path, sizeof path, "%s/prof.json", dir);
    ck_assert_msg(zb("profile --model tiny --batch-size 2 --reps 2 -q -o %s", path) == 0, "%s", err_text);
    zb_profile p;
    zb_err err;
    ck_assert_msg(profile_load(path, &p, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(p.micro_batch, 2);
    ck_assert_int_eq(p.seq_len, 64);
    ck_assert(p.layer.t_f > 0 && p.layer.t_b > 0 && p.layer.t_w > 0);
    ck_assert(p.head.t_f > 0 && p.layer.m_b > 0);
    ck_assert(p.t_comm >= 0);
    assert_one_line_error(zb("profile --model nosuch"), "nosuch");
    assert_one_line_error(zb("profile --reps 0"), "--reps");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("runtime-cli");
    TCase *tc = tcase_create("all");
    tcase_set_timeout(tc, 240);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, run_rejects_bad_input);
    tcase_add_test(tc, run_json_trace_and_resume);
    tcase_add_test(tc, profile_writes_a_loadable_profile);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
