/*
 * test_run_ckpt_dir.c: a checkpoint directory is one committed unit, and
 * `zbsched run` keeps its inputs and outputs apart from it (issue 23,
 * classes 1 and 4), as a user meets them on the command line:
 *
 *   - a resume refused for a model of another shape changes nothing in the
 *     directory: `generate` still reads it (before, model.json was
 *     rewritten first and the checkpoint became unreadable);
 *   - a fresh run into a directory changes nothing there before its own
 *     first checkpoint: killed before it, the old checkpoint still loads;
 *   - a save that fails (`ulimit -f`) is one line and leaves the last
 *     checkpoint as it was: the parts go first, the manifest commits them;
 *   - the manifest's records are checked against the parts on every read:
 *     an edited parameter count is refused by run and generate, in one
 *     line, and nothing is deleted;
 *   - a directory in the older layout (checkpoint.bin, model.json,
 *     run.json, as zbsched wrote it before) still resumes and generates;
 *   - a second run on a directory another run holds is refused at once
 *     (DIR/lock), and the first goes on;
 *   - an input or output named like a file of the checkpoint directory
 *     (a --trace, --model, --data or schedule file there, also through a
 *     hard link) is refused before any work.
 *
 * Each run is the tiny model for a few steps on a 64 KB slice of
 * tinyshakespeare, under `timeout`, in a temporary directory.
 */
#include <check.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/ckpt_set.h"
#include "runtime/run_record.h"
#include "runtime/trainer.h"
#include "src/model.h"
#include "src/sched_io.h"
#include "tests/common/cli_run.h"

static char tmpdir[] = "/tmp/zb_run_ckpt_dir_XXXXXX";
static char out_text[1 << 16], err_text[1 << 14];

static void setup(void)
{
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
    const char *root = getenv("ZB_SOURCE_ROOT");
    ck_assert_ptr_nonnull(root);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "head -c 65536 '%s/../shared/data/tinyshakespeare.txt' > '%s/text.txt'",
             root, tmpdir);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_int_eq(cli_run(tmpdir, NULL, "gen 1f1b -p 2 -m 2 -o s.json", NULL, 0, NULL, 0), 0);
}

static void teardown(void)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
    strcpy(tmpdir, "/tmp/zb_run_ckpt_dir_XXXXXX");
}

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

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[2048], line[2300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(line, sizeof line, "cd '%s' && %s", tmpdir, cmd);
    return system(line);
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

static void expect_refusal(int rc, const char *frag)
{
    ck_assert_msg(rc == 1 || rc == 2, "exit %d, stderr: %s", rc, err_text);
    cli_assert_one_line(err_text, frag);
}

/* A fingerprint of the checkpoint in directory ck (names, sizes and
 * checksums of every file but the writer's lock, which is no part of it
 * and holds the pid of the last run that took it), into buf. */
static void fingerprint(char *buf, size_t cap)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "cd '%s/ck' && ls | grep -vx lock | xargs cksum | sort", tmpdir);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t n = fread(buf, 1, cap - 1, p);
    buf[n] = '\0';
    pclose(p);
}

START_TEST(a_refused_resume_changes_nothing)
{
    int rc = zb("run s.json --data text.txt --steps 4 --stop-at 2 --checkpoint ck --eval-windows 2 -q");
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    ck_assert_int_eq(zb("generate --checkpoint ck -n 16 --seed 3 -q"), 0);
    char text[1024], before[4096], after[4096];
    snprintf(text, sizeof text, "%.1000s", out_text);
    fingerprint(before, sizeof before);
    /* another shape: refused with one line naming both models */
    write_file("wide.json", "{\"base\": \"tiny\", \"d_model\": 96, \"n_heads\": 4, \"n_kv_heads\": 4}");
    rc = zb("run s.json --data text.txt --steps 4 --checkpoint ck --resume --model wide.json "
            "--eval-windows 2 -q");
    expect_refusal(rc, "the checkpoint is of model tiny");
    ck_assert_ptr_nonnull(strstr(err_text, "d=96"));
    /* ... and nothing in the directory changed: generate reads it as before */
    fingerprint(after, sizeof after);
    ck_assert_str_eq(before, after);
    ck_assert_msg(zb("generate --checkpoint ck -n 16 --seed 3 -q") == 0, "%s", err_text);
    ck_assert_str_eq(out_text, text);
    /* another batch size, another text: refused, nothing changed either */
    expect_refusal(zb("run s.json --data text.txt --steps 4 --checkpoint ck --resume --batch-size 2 "
                      "--eval-windows 2 -q"), "batch size 4, this run has 2");
    fingerprint(after, sizeof after);
    ck_assert_str_eq(before, after);
}
END_TEST

START_TEST(a_fresh_run_changes_nothing_before_its_first_checkpoint)
{
    int rc = zb("run s.json --data text.txt --steps 2 --checkpoint ck --eval-windows 2 -q");
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    ck_assert_int_eq(zb("generate --checkpoint ck -n 16 --seed 3 -q"), 0);
    char text[1024];
    snprintf(text, sizeof text, "%.1000s", out_text);
    /* another model, a run into the same directory, killed (as by the
     * OOM killer: no chance to clean up) before its first checkpoint */
    write_file("wide.json", "{\"base\": \"tiny\", \"d_model\": 96, \"n_heads\": 4, \"n_kv_heads\": 4}");
    rc = sh("(timeout -s KILL 3 '%s' run s.json --data text.txt --model wide.json --steps 100000 "
            "--checkpoint ck -q; true)", getenv("ZBSCHED"));
    ck_assert_int_eq(rc, 0);
    ck_assert_msg(zb("generate --checkpoint ck -n 16 --seed 3 -q") == 0, "%s", err_text);
    ck_assert_str_eq(out_text, text);
}
END_TEST

/* A save that cannot be written (here `ulimit -f`: the 3 MB part fails
 * with EFBIG where the 1 KB manifest would still fit) is one line and
 * exit 1, and the last checkpoint stays the directory's: every file as it
 * was, nothing added, `generate` reads the same weights.  Before, SIGXFSZ
 * killed the run without a word; and were the manifest written before the
 * parts it names, it would now name a part that is not there. */
START_TEST(a_failed_save_keeps_the_last_checkpoint)
{
    int rc = zb("run s.json --data text.txt --steps 2 --checkpoint ck --eval-windows 2 -q");
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    ck_assert_int_eq(zb("generate --checkpoint ck -n 16 --seed 3 -q"), 0);
    char text[1024], before[4096], after[4096];
    snprintf(text, sizeof text, "%.1000s", out_text);
    fingerprint(before, sizeof before);
    /* 20 blocks: 10 KB in dash's 512-byte blocks, 20 KB in bash's */
    rc = cli_run(tmpdir, "ulimit -f 20 && timeout 120",
                 "run s.json --data text.txt --steps 4 --checkpoint ck --resume --eval-windows 2 -q",
                 out_text, sizeof out_text, err_text, sizeof err_text);
    ck_assert_msg(rc == 1, "exit %d, stderr: %s", rc, err_text);
    cli_assert_one_line(err_text, "File too large");
    fingerprint(after, sizeof after);
    ck_assert_str_eq(before, after);
    ck_assert_msg(zb("generate --checkpoint ck -n 16 --seed 3 -q") == 0, "%s", err_text);
    ck_assert_str_eq(out_text, text);
}
END_TEST

/* The manifest commits its parts by step and by name: a part of another
 * step under the committed name (the step-2 part copied over step 4's),
 * or a manifest whose "parts" name other files, is refused in one line by
 * `generate` and by `run --resume`, and nothing is changed or deleted. */
START_TEST(parts_must_be_the_manifests_own)
{
    int rc = zb("run s.json --data text.txt --steps 2 --checkpoint ck --eval-windows 2 -q");
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    ck_assert_int_eq(sh("cp ck/checkpoint.*.rank-0.bin step2.bin"), 0);
    rc = zb("run s.json --data text.txt --steps 4 --checkpoint ck --resume --eval-windows 2 -q");
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    ck_assert_int_eq(sh("cp step2.bin ck/checkpoint.*.rank-0.bin"), 0);
    char before[4096], after[4096];
    fingerprint(before, sizeof before);
    expect_refusal(zb("generate --checkpoint ck -n 8 -q"), "a part of step 2, but");
    expect_refusal(zb("run s.json --data text.txt --steps 6 --checkpoint ck --resume "
                      "--eval-windows 2 -q"),
                   "a part of step 2, but");
    fingerprint(after, sizeof after);
    ck_assert_str_eq(before, after);
    /* a manifest naming another file as part 0 */
    ck_assert_int_eq(sh("sed -i 's/rank-0.bin\"/rank-7.bin\"/' ck/checkpoint.parts.json"), 0);
    fingerprint(before, sizeof before);
    expect_refusal(zb("generate --checkpoint ck -n 8 -q"), "part 0 should be checkpoint.");
    fingerprint(after, sizeof after);
    ck_assert_str_eq(before, after);
}
END_TEST

START_TEST(every_read_checks_the_parts_against_the_manifest)
{
    int rc = zb("run s.json --data text.txt --steps 4 --stop-at 2 --checkpoint ck --eval-windows 2 -q");
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    ck_assert_int_eq(sh("sed -i 's/\"parameters\":\t270272/\"parameters\":\t999/' "
                        "ck/checkpoint.parts.json && grep -q 999 ck/checkpoint.parts.json"), 0);
    expect_refusal(zb("run s.json --data text.txt --steps 4 --checkpoint ck --resume --eval-windows 2 -q"),
                   "999 parameters");
    expect_refusal(zb("generate --checkpoint ck -n 4 -q"), "999 parameters");
    /* nothing was deleted for it: the part is still there */
    ck_assert_int_eq(sh("ls ck/checkpoint.*.rank-0.bin > /dev/null"), 0);
    /* a manifest that names more ranks than there are parts */
    ck_assert_int_eq(sh("sed -i 's/\"parameters\":\t999/\"parameters\":\t270272/; "
                        "s/\"ranks\":\t1/\"ranks\":\t2/' ck/checkpoint.parts.json"), 0);
    expect_refusal(zb("generate --checkpoint ck -n 4 -q"), "parts (one per rank)");
}
END_TEST

/* The older layout, as zbsched wrote it before the manifest carried the
 * records: checkpoint.bin, model.json and run.json, written here with the
 * trainer of the same run the CLI makes (seed 1, the default schedule). */
START_TEST(an_old_directory_still_loads)
{
    char path[600];
    zb_err err = { { 0 } };
    snprintf(path, sizeof path, "%s/s.json", tmpdir);
    sched_t *s = NULL;
    ck_assert_int_eq(sched_load_file(path, &s, &err), 0);
    snprintf(path, sizeof path, "%s/text.txt", tmpdir);
    zb_model m;
    ck_assert_int_eq(model_preset("tiny", &m, &err), 0);
    zb_data *d = NULL;
    ck_assert_int_eq(data_load_file(path, m.seq_len, &d, &err), 0);
    m.vocab = d->vocab;
    trainer_opts o;
    trainer_opts_default(&o);
    o.adamw.warmup_steps = 0;
    o.adamw.decay_steps = 4;
    o.eval_windows = 2;
    trainer *t = NULL;
    ck_assert_msg(trainer_create(s, &m, d, &o, &t, &err) == 0, "%s", err.msg);
    double loss;
    ck_assert(trainer_step(t, &loss, &err) == 0 && trainer_step(t, &loss, &err) == 0);
    snprintf(path, sizeof path, "%s/ck", tmpdir);
    ck_assert_int_eq(mkdir(path, 0777), 0);
    snprintf(path, sizeof path, "%s/ck/checkpoint.bin", tmpdir);
    ck_assert_msg(trainer_save(t, path, &err) == 0, "%s", err.msg);
    cJSON *mr = ckptset_model_record(trainer_model(t), d->chars, d->vocab);
    run_identity id = { .rope_theta = m.rope_theta, .batch_size = m.micro_batch,
                        .micro_batches = s->n_micro, .seed = 1, .data_hash = run_data_hash(d),
                        .data_bytes = d->n_tokens };
    cJSON *rr = run_record_to_json(&id);
    char *mt = cJSON_Print(mr), *rt = cJSON_PrintUnformatted(rr);
    write_file("ck/model.json", mt);
    write_file("ck/run.json", rt);
    free(mt);
    free(rt);
    cJSON_Delete(mr);
    cJSON_Delete(rr);
    trainer_free(t);
    data_free(d);
    sched_free(s);
    ck_assert_msg(zb("generate --checkpoint ck -n 8 -q") == 0, "%s", err_text);
    /* the old run record still checks a resume */
    expect_refusal(zb("run s.json --data text.txt --steps 4 --checkpoint ck --resume --batch-size 2 "
                      "--eval-windows 2 -q"), "batch size 4, this run has 2");
    int rc = zb("run s.json --data text.txt --steps 4 --checkpoint ck --resume --eval-windows 2 -q --json");
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    ck_assert_ptr_nonnull(strstr(out_text, "\"first_step\":2,"));
    /* its first save is of the new layout, and the old files are gone */
    ck_assert_int_eq(sh("test -f ck/checkpoint.parts.json && ! test -e ck/checkpoint.bin && "
                        "! test -e ck/model.json && ! test -e ck/run.json"), 0);
    ck_assert_msg(zb("generate --checkpoint ck -n 8 -q") == 0, "%s", err_text);
}
END_TEST

START_TEST(a_second_run_on_one_directory_is_refused)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cd '%s' && exec '%s' run s.json --data text.txt "
             "--steps 100000 --checkpoint ck --eval-windows 2 -q", tmpdir, getenv("ZBSCHED"));
    fflush(NULL);
    pid_t first = fork();
    ck_assert_int_ge(first, 0);
    if (first == 0) {
        alarm(120); /* the guard, kept across exec: a hang fails the test */
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    /* the first run holds the lock once its pid is in it */
    int held = 0;
    for (int i = 0; i < 600 && !held; i++) {
        usleep(50000);
        held = sh("test -s ck/lock") == 0;
    }
    ck_assert_msg(held, "the first run never took the lock");
    int rc = zb("run s.json --data text.txt --steps 2 --checkpoint ck --eval-windows 2 -q");
    expect_refusal(rc, "in use by another run");
    /* under MPI the same: rank 0 takes the lock; here a resume, refused too */
    rc = zb("run s.json --data text.txt --steps 2 --checkpoint ck --resume --eval-windows 2 -q");
    expect_refusal(rc, "in use by another run");
    /* the first run was not disturbed: it stops cleanly on SIGTERM */
    ck_assert_int_eq(kill(first, SIGTERM), 0);
    int status;
    ck_assert_int_eq(waitpid(first, &status, 0), first);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 143, "status %d", status);
    ck_assert_int_eq(zb("generate --checkpoint ck -n 4 -q"), 0);
}
END_TEST

START_TEST(outputs_and_inputs_apart_from_the_checkpoint)
{
    int rc = zb("run s.json --data text.txt --steps 2 --checkpoint ck --eval-windows 2 -q");
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    char before[4096], after[4096];
    fingerprint(before, sizeof before);
    const char *base = "--data text.txt --steps 100000 --checkpoint ck --eval-windows 2 -q";
    /* a --trace named like a file the run writes there */
    static const char *const owned[] = { "model.json", "run.json", "checkpoint.bin",
                                         "checkpoint.parts.json", "lock",
                                         "checkpoint.0123456789abcdef.rank-0.bin" };
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++) {
        rc = zb("run s.json %s --trace ck/%s", base, owned[i]);
        expect_refusal(rc, "the --trace file is a file of the checkpoint directory");
        ck_assert_ptr_null(strstr(err_text, "step"));
    }
    /* inputs there under such names: the run would overwrite or delete them */
    ck_assert_int_eq(sh("mkdir -p in && cp s.json ck/model.json && cp text.txt ck/run.json && "
                        "echo '{\"base\": \"tiny\"}' > ck/checkpoint.bin"), 0);
    expect_refusal(zb("run ck/model.json --data text.txt --steps 100000 --checkpoint ck -q"),
                   "the schedule file is a file of the checkpoint directory");
    expect_refusal(zb("run s.json --data ck/run.json --steps 100000 --checkpoint ck -q"),
                   "the --data text is a file of the checkpoint directory");
    expect_refusal(zb("run s.json --data text.txt --model ck/checkpoint.bin --steps 100000 "
                      "--checkpoint ck -q"), "the --model file is a file of the checkpoint directory");
    /* the same file through a hard link elsewhere */
    ck_assert_int_eq(sh("rm ck/model.json ck/run.json ck/checkpoint.bin && "
                        "ln ck/checkpoint.parts.json in/trace.json"), 0);
    expect_refusal(zb("run s.json %s --trace in/trace.json", base), "another name for it");
    /* a symlink to a name the run owns there (not yet a file) */
    ck_assert_int_eq(sh("rm in/trace.json && ln -s ../ck/run.json in/trace.json"), 0);
    expect_refusal(zb("run s.json %s --trace in/trace.json", base),
                   "the --trace file is a file of the checkpoint directory");
    ck_assert_int_eq(sh("rm in/trace.json"), 0);
    fingerprint(after, sizeof after);
    ck_assert_str_eq(before, after);
    /* a file of another name in the directory is fine, and so is the trace
     * beside it */
    ck_assert_int_eq(sh("cp s.json ck/plan.json"), 0);
    rc = zb("run ck/plan.json --data text.txt --steps 1 --checkpoint ck --trace ck/trace.json "
            "--eval-windows 2 -q");
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("run_ckpt_dir");
    TCase *tc = tcase_create("ckpt_dir");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, a_refused_resume_changes_nothing);
    tcase_add_test(tc, a_fresh_run_changes_nothing_before_its_first_checkpoint);
    tcase_add_test(tc, a_failed_save_keeps_the_last_checkpoint);
    tcase_add_test(tc, parts_must_be_the_manifests_own);
    tcase_add_test(tc, every_read_checks_the_parts_against_the_manifest);
    tcase_add_test(tc, an_old_directory_still_loads);
    tcase_add_test(tc, a_second_run_on_one_directory_is_refused);
    tcase_add_test(tc, outputs_and_inputs_apart_from_the_checkpoint);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
