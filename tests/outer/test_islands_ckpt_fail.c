/*
 * test_islands_ckpt_fail.c: an islands checkpoint whose save fails keeps
 * the previous one (runtime/outer/islands_ckpt.c's commit protocol).
 *
 * The islands save once, then every fsync is made to fail (src/outfile.h's
 * test seam) and they save again, two steps later: the save must fail,
 * the manifest must still name the first save's tag, the first save's
 * parts must all be there and the failed save's none, and a fresh set of
 * islands must resume from it at the first save's step.  The CLI tests
 * (test_islands_ckpt.sh) cannot make a write fail; this one can.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/job.h"
#include "runtime/outer/islands.h"
#include "src/outfile.h"
#include "tests/common/trainer_fixture.h"

static int failing_fsync(int fd, void *ctx)
{
    (void)fd;
    (void)ctx;
    errno = EIO;
    return -1;
}

/* Names in dir that are not "." or "..", sorted, joined by spaces. */
static void list_dir(const char *dir, char *out, size_t cap)
{
    struct dirent **names = NULL;
    int n = scandir(dir, &names, NULL, alphasort);
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (strcmp(names[i]->d_name, ".") && strcmp(names[i]->d_name, "..")) {
            strncat(out, names[i]->d_name, cap - strlen(out) - 1);
            strncat(out, " ", cap - strlen(out) - 1);
        }
        free(names[i]);
    }
    free(names);
}

/* Runs n steps of x through its way. */
static void steps(islands *x, int n)
{
    job_way w;
    islands_way(x, &w);
    job_step info;
    zb_err err = { "" };
    for (int i = 0; i < n; i++) {
        ck_assert_msg(w.steps(w.ctx, 1, &info, &err) == 0, "%s", err.msg);
        ck_assert_msg(w.boundary(w.ctx, &info, &err) == 0, "%s", err.msg);
    }
}

START_TEST(failed_save_keeps_the_previous_checkpoint)
{
    zb_model m = fixture_model_shaped("isl-ckpt-test", 2, 2);
    zb_data *d = fixture_data(m.seq_len);
    sched_t *s = fixture_gpipe2();
    trainer_opts topts;
    trainer_opts_default(&topts);
    topts.eval_windows = 2;
    islands_opts io;
    islands_opts_default(&io);
    io.replicas = 2;
    io.steps = 10;
    io.outer.inner_steps = 3;
    char dir[] = "/tmp/zb_islands_ckpt_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    zb_err err = { "" };
    islands *x = NULL;
    ck_assert_msg(islands_create(s, &m, d, &topts, &io, &x, &err) == 0, "%s", err.msg);
    cJSON *model = cJSON_CreateObject(), *run = NULL;

    steps(x, 2);
    ck_assert_msg(islands_save(x, dir, model, run, &err) == 0, "%s", err.msg);
    char before[1024], after[1024];
    list_dir(dir, before, sizeof before);

    steps(x, 2);
    outfile_set_fsync_hook(failing_fsync, NULL);
    int rc = islands_save(x, dir, model, run, &err);
    outfile_set_fsync_hook(NULL, NULL);
    ck_assert_int_eq(rc, -1);
    list_dir(dir, after, sizeof after);
    ck_assert_str_eq(after, before); /* the first save's files, nothing of the second */

    islands *y = NULL;
    ck_assert_msg(islands_create(s, &m, d, &topts, &io, &y, &err) == 0, "%s", err.msg);
    char note[256];
    ck_assert_msg(islands_resume(y, dir, NULL, note, sizeof note, &err) >= 0, "%s", err.msg);
    islands_progress p;
    islands_get_progress(y, &p);
    ck_assert_int_eq(p.step, 2);

    islands_free(y);
    islands_free(x);
    cJSON_Delete(model);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    sched_free(s);
    data_free(d);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("islands_ckpt_fail");
    TCase *tc = tcase_create("save");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, failed_save_keeps_the_previous_checkpoint);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
