/*
 * test_run_inputs.c: `zbsched run` against inputs that used to be accepted
 * silently (issue 14): a diverged run (single trainer and islands), a batch
 * size this machine cannot hold, model settings the runtime does not
 * implement, and a resume whose settings differ from the checkpoint's.
 * Each run is the tiny model for a few steps on a 64 KB slice of
 * tinyshakespeare, under `timeout`, in a temporary directory.
 */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/common/cli_run.h"

static char tmpdir[] = "/tmp/zb_run_inputs_XXXXXX";
static char out_text[1 << 16]; /* stdout of the last run */
static char err_text[1 << 14]; /* stderr of the last run */

static void setup(void)
{
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
    const char *root = getenv("ZB_SOURCE_ROOT");
    ck_assert_ptr_nonnull(root);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "head -c 65536 '%s/../shared/data/tinyshakespeare.txt' > '%s/text.txt'",
             root, tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}

static void teardown(void)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
    strcpy(tmpdir, "/tmp/zb_run_inputs_XXXXXX");
}

/* Runs `timeout 120 zbsched ARGS` in the temporary directory. */
static int zb(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int zb(const char *fmt, ...)
{
    char args[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    return cli_run(tmpdir, "timeout 120", args, out_text, sizeof out_text, err_text, sizeof err_text);
}

static void write_file(const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static void expect_failure(int rc, const char *frag)
{
    ck_assert_msg(rc == 1 || rc == 2, "exit %d, stderr: %s", rc, err_text);
    cli_assert_one_line(err_text, frag);
}

/* -------------------------------------------------------- 14.5 divergence */

START_TEST(diverged_run_fails_and_keeps_the_checkpoint)
{
    ck_assert_int_eq(zb("gen zb-h1 -p 2 -m 2 -o s.json"), 0);
    /* lr 1e6: the loss jumps to ~1e13, then every gradient is not finite.
     * The loss rule (runtime/job.h, rule 4) sees it at step 2. */
    int rc = zb("run s.json --data text.txt --steps 20 --lr 1e6 --checkpoint ck --eval-every 1 "
                "--eval-windows 2 -q");
    expect_failure(rc, "diverged");
    ck_assert_msg(strstr(err_text, "step 2: diverged: the training loss averaged") != NULL,
                  "expected the stop at step 2: %s", err_text);
    ck_assert_ptr_nonnull(strstr(err_text, "last checkpoint is kept (step 1)"));
    /* The checkpoint on disk is the last one before the skips: step 1. */
    rc = zb("run s.json --data text.txt --steps 2 --lr 1e6 --checkpoint ck --resume --max-skipped 0 "
            "--max-loss-factor 0 --json -q");
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    ck_assert_msg(strstr(out_text, "\"first_step\":1,") != NULL, "%s", out_text);
    /* Without the loss rule, the skip streak (rule 2) at step 6. */
    rc = zb("run s.json --data text.txt --steps 20 --lr 1e6 --max-loss-factor 0 --eval-windows 2 -q");
    expect_failure(rc, "step 6: diverged: 5 steps in a row");
    /* --max-skipped 0 --max-loss-factor 0 keeps the old behaviour for
     * those who want it. */
    rc = zb("run s.json --data text.txt --steps 8 --lr 1e6 --max-skipped 0 --max-loss-factor 0 "
            "--eval-windows 2 -q");
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    rc = zb("run s.json --data text.txt --steps 8 --lr 1e6 --max-skipped 2 --max-loss-factor 0 "
            "--eval-windows 2 -q");
    expect_failure(rc, "step 3: diverged: 2 steps in a row");
}
END_TEST

/* Issue 23: `run --lr 1e6 --steps 5` ended at loss 1.5e13 with 4 of 5
 * steps skipped and exit 0; --max-skipped 5 cannot fire in 5 steps. */
START_TEST(a_run_gone_wrong_never_reports_success)
{
    ck_assert_int_eq(zb("gen zb-h1 -p 2 -m 2 -o s.json"), 0);
    int rc = zb("run s.json --data text.txt --steps 5 --lr 1e6 --eval-windows 2 -q --json");
    expect_failure(rc, "step 2: diverged: the training loss averaged");
    ck_assert_msg(out_text[0] == '\0', "a summary of a diverged run: %s", out_text);
    /* without the loss rule, most steps skipped (rule 3) at the end */
    rc = zb("run s.json --data text.txt --steps 5 --lr 1e6 --max-loss-factor 0 --eval-windows 2 "
            "-q --checkpoint ck");
    expect_failure(rc, "step 5: diverged: 4 of the run's 5 steps were skipped");
    ck_assert_ptr_nonnull(strstr(err_text, "no checkpoint was written"));
    char manifest[512];
    snprintf(manifest, sizeof manifest, "%s/ck/checkpoint.parts.json", tmpdir);
    cli_assert_no_file(manifest);
    /* the same run on islands */
    rc = zb("run s.json --data text.txt --steps 5 --replicas 2 --lr 1e6 --eval-windows 2 -q");
    expect_failure(rc, "s.json: step 2: diverged: the training loss averaged");
    /* --checkpoint-every 1: the checkpoint of step 1 is written, that of
     * step 2 (inside the skip streak) is withheld and says so, and at step
     * 3, a checkpoint due with 2 of 3 steps skipped, rule 3 stops the run
     * keeping the one of step 1 */
    rc = zb("run s.json --data text.txt --steps 20 --lr 1e6 --max-loss-factor 0 --max-skipped 3 "
            "--checkpoint-every 1 --checkpoint ck1 --eval-windows 2");
    ck_assert_msg(rc == 1, "exit %d: %s", rc, err_text);
    ck_assert_ptr_nonnull(strstr(err_text, "step 2: no checkpoint: the step is inside a skip streak"));
    ck_assert_ptr_nonnull(strstr(err_text, "step 3: diverged: 2 of the run's 3 steps were skipped"));
    ck_assert_ptr_nonnull(strstr(err_text, "the last checkpoint is kept (step 1)"));
    rc = zb("run s.json --data text.txt --steps 20 --stop-at 1 --checkpoint ck1 --resume -q");
    ck_assert_msg(rc == 1 && strstr(err_text, "already at step 1"), "exit %d: %s", rc, err_text);
    /* a healthy run at a high learning rate is not called diverged */
    rc = zb("run s.json --data text.txt --steps 30 --lr 1e-2 --eval-windows 2 -q");
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
}
END_TEST

START_TEST(diverged_islands_fail)
{
    ck_assert_int_eq(zb("gen zb-h1 -p 2 -m 2 -o s.json"), 0);
    int rc = zb("run s.json --data text.txt --steps 4 --replicas 2 --outer a-edit --lr 1e30 "
                "--eval-windows 2 --json -q");
    expect_failure(rc, "the training loss is NaN");
    ck_assert_ptr_null(strstr(out_text, "null"));
    /* The run stops at the step that diverged, naming the replica: 100000
     * steps would not finish inside the 20 s timeout (exit 124). */
    rc = cli_run(tmpdir, "timeout 20",
                 "run s.json --data text.txt --steps 100000 --replicas 2 --outer a-edit --lr 1e30 "
                 "--eval-windows 2 -q", out_text, sizeof out_text, err_text, sizeof err_text);
    expect_failure(rc, "s.json: step 2: replica 0: the training loss is NaN (diverged");
    /* --max-skipped applies to every replica as it does to one trainer. */
    rc = cli_run(tmpdir, "timeout 20",
                 "run s.json --data text.txt --steps 100000 --replicas 2 --outer diloco --lr 1e6 "
                 "--max-skipped 2 --max-loss-factor 0 --eval-windows 2 -q", out_text,
                 sizeof out_text, err_text,
                 sizeof err_text);
    expect_failure(rc, ": replica 0: diverged: 2 steps in a row were skipped");
    /* An outer step that blows the weights up shows first in the
     * evaluation right after it (step 2 here), which stops the run too. */
    rc = cli_run(tmpdir, "timeout 20",
                 "run s.json --data text.txt --steps 100000 --replicas 2 --outer diloco "
                 "--inner-steps 2 --outer-lr 1e30 --eval-every 2 --eval-windows 2 -q", out_text,
                 sizeof out_text, err_text, sizeof err_text);
    expect_failure(rc, "s.json: step 2: the validation loss is not finite");
}
END_TEST

/* ------------------------------------------------------ 14.4 run memory */

START_TEST(batch_too_large_for_this_machine)
{
    ck_assert_int_eq(zb("gen zb-h1 -p 2 -m 2 -o s.json"), 0);
    int rc = zb("run s.json --data text.txt --steps 1 --batch-size 65536 -q");
    expect_failure(rc, "but this machine has");
    ck_assert_ptr_nonnull(strstr(err_text, "--batch-size"));
    /* profile measures one micro-batch, and refuses the same way. */
    rc = zb("profile --batch-size 65536 -q -o p.json");
    expect_failure(rc, "but this machine has");
    cli_assert_no_file(NULL);
    /* Islands multiply it. */
    rc = zb("run s.json --data text.txt --steps 1 --batch-size 65536 --replicas 2 -q");
    expect_failure(rc, "but this machine has");
}
END_TEST

/* ------------------------------------------------- 14.8 model settings */

START_TEST(unsupported_model_settings)
{
    ck_assert_int_eq(zb("gen zb-h1 -p 2 -m 2 -o s.json"), 0);
    static const struct {
        const char *json, *want;
    } cases[] = {
        { "{\"base\": \"tiny\", \"swiglu\": 0}", "swiglu" },
        { "{\"base\": \"tiny\", \"tied_embedding\": 1}", "tied_embedding" },
        { "{\"base\": \"tiny\", \"dtype\": \"bf16\"}", "dtype bf16" },
        { "{\"base\": \"tiny\", \"rope_theta\": 0}", "rope_theta" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_file("m.json", cases[i].json);
        expect_failure(zb("run s.json --data text.txt --steps 1 --model m.json -q"), cases[i].want);
    }
    /* profile would measure the wrong kernels just the same. */
    write_file("m.json", "{\"base\": \"tiny\", \"tied_embedding\": 1}");
    expect_failure(zb("profile --model m.json -q -o p.json"), "tied_embedding");
    write_file("m.json", "{\"base\": \"tiny\", \"dtype\": \"fp32\", \"swiglu\": true}");
    int rc = zb("run s.json --data text.txt --steps 1 --model m.json --eval-windows 2 -q");
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
}
END_TEST

START_TEST(resume_checks_the_run)
{
    ck_assert_int_eq(zb("gen zb-h1 -p 2 -m 2 -o s.json"), 0);
    ck_assert_int_eq(zb("gen zb-h1 -p 2 -m 4 -o s4.json"), 0);
    int rc = zb("run s.json --data text.txt --steps 3 --stop-at 1 --checkpoint ck --eval-windows 2 -q");
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    const char *base = "--data text.txt --steps 3 --checkpoint ck --resume --eval-windows 2 -q";
    expect_failure(zb("run s.json %s --batch-size 2", base), "batch size 4, this run has 2");
    expect_failure(zb("run s4.json %s", base), "2 micro-batches per step, this schedule has 4");
    write_file("rt.json", "{\"base\": \"tiny\", \"rope_theta\": 500000}");
    expect_failure(zb("run s.json %s --model rt.json", base), "rope_theta 10000, this run has 500000");
    /* Same length and characters, other text: neither the vocabulary
     * nor the shape check of the checkpoint would see it. */
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cd '%s' && sed '1s/^First/Gorst/' text.txt > other.txt && "
             "! cmp -s text.txt other.txt", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
    rc = zb("run s.json --data other.txt --steps 3 --checkpoint ck --resume --eval-windows 2 -q");
    expect_failure(rc, "another text (65536 bytes, this --data has 65536)");
    /* A different seed is harmless: said, and the run goes on. */
    rc = zb("run s.json --data text.txt --steps 2 --checkpoint ck --resume --eval-windows 2 --seed 9");
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    ck_assert_ptr_nonnull(strstr(err_text, "--seed 9 differs"));
}
END_TEST

int main(void)
{
    Suite *su = suite_create("run_inputs");
    TCase *tc = tcase_create("run_inputs");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, diverged_run_fails_and_keeps_the_checkpoint);
    tcase_add_test(tc, diverged_islands_fail);
    tcase_add_test(tc, a_run_gone_wrong_never_reports_success);
    tcase_add_test(tc, batch_too_large_for_this_machine);
    tcase_add_test(tc, unsupported_model_settings);
    tcase_add_test(tc, resume_checks_the_run);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
