/*
 * test_run_signals.c: stopping `zbsched run` must not lose it (issue 23,
 * class 3), in one process.  Before, SIGTERM (what Slurm's preemption and
 * scancel send) ended the run with 143 and no checkpoint: checkpoints
 * were written only at evaluations.
 *
 *   - SIGTERM: the step in flight finishes, the checkpoint of that step is
 *     written, the exit status is 143 with one line saying so; a resumed
 *     run continues with the same losses as one never stopped;
 *   - SIGINT: the same, status 130;
 *   - a second signal ends the process at once (killed by the signal),
 *     and the checkpoint directory still holds a whole checkpoint;
 *   - islands in one process stop at the step too (no checkpoint: the
 *     line says so).
 *
 * The runs train the tiny model (a wider one where a step must outlast
 * the test's reaction) on a 64 KB slice of tinyshakespeare in a temporary
 * directory; each child runs under a guard that kills it after 120 s.
 */
#include <check.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "tests/common/cli_run.h"

static char tmpdir[] = "/tmp/zb_run_signals_XXXXXX";
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
    strcpy(tmpdir, "/tmp/zb_run_signals_XXXXXX");
}

/* Runs `zbsched ARGS` to the end in the temporary directory. */
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

/* A child `zbsched ARGS` in the background, stderr into a file. */
typedef struct child {
    pid_t pid;      /* the zbsched process itself (exec'd, no shell) */
    char err[600];  /* its stderr's file */
} child;

static child start(const char *args)
{
    child c;
    snprintf(c.err, sizeof c.err, "%s/child.err", tmpdir);
    const char *zbsched = getenv("ZBSCHED");
    ck_assert_ptr_nonnull(zbsched);
    char line[2048];
    snprintf(line, sizeof line, "%s", args);
    char *argv[64];
    int n = 0;
    argv[n++] = (char *)zbsched;
    for (char *tok = strtok(line, " "); tok && n < 63; tok = strtok(NULL, " "))
        argv[n++] = tok;
    argv[n] = NULL;
    fflush(NULL);
    c.pid = fork();
    ck_assert_int_ge(c.pid, 0);
    if (c.pid == 0) {
        if (chdir(tmpdir) != 0)
            _exit(127);
        int fe = open(c.err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int fo = open("/dev/null", O_WRONLY);
        if (fe < 0 || fo < 0)
            _exit(127);
        dup2(fo, 1);
        dup2(fe, 2);
        alarm(120); /* the guard: a hang fails the test instead of blocking it */
        execv(zbsched, argv);
        _exit(127);
    }
    return c;
}

/* Waits (up to 60 s) until the child's stderr holds text; 1 when it does. */
static int wait_for(const child *c, const char *text)
{
    for (int i = 0; i < 30000; i++) {
        FILE *f = fopen(c->err, "r");
        if (f) {
            size_t n = fread(err_text, 1, sizeof err_text - 1, f);
            err_text[n] = '\0';
            fclose(f);
            if (strstr(err_text, text))
                return 1;
        }
        struct timespec ts = { 0, 2000000 }; /* 2 ms */
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* The child's wait status, with its stderr in err_text. */
static int finish(const child *c)
{
    int status = 0;
    ck_assert_int_eq(waitpid(c->pid, &status, 0), c->pid);
    FILE *f = fopen(c->err, "r");
    size_t n = f ? fread(err_text, 1, sizeof err_text - 1, f) : 0;
    err_text[n] = '\0';
    if (f)
        fclose(f);
    return status;
}

/* The last line of err_text. */
static const char *last_line(void)
{
    size_t n = strlen(err_text);
    while (n > 0 && err_text[n - 1] == '\n')
        n--;
    while (n > 0 && err_text[n - 1] != '\n')
        n--;
    return err_text + n;
}

/* The losses of a --json summary in out_text. */
static int losses(double *out, int cap)
{
    cJSON *o = cJSON_Parse(out_text);
    ck_assert_msg(o != NULL, "not JSON: %s", out_text);
    cJSON *l = cJSON_GetObjectItem(o, "losses");
    int n = cJSON_GetArraySize(l);
    for (int i = 0; i < n && i < cap; i++)
        out[i] = cJSON_GetArrayItem(l, i)->valuedouble;
    cJSON_Delete(o);
    return n;
}

/* SIGTERM or SIGINT: the checkpoint of the step in flight, 128 + the
 * signal, and a resume that continues exactly. */
static void stop_and_resume(int sig, const char *name)
{
    child c = start("run s.json --data text.txt --steps 100000 --checkpoint ck --eval-windows 2");
    ck_assert_msg(wait_for(&c, "step 2/100000"), "no step 2: %s", err_text);
    ck_assert_int_eq(kill(c.pid, sig), 0);
    int status = finish(&c);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 128 + sig,
                  "status %d, stderr: %s", status, err_text);
    char want[64];
    long at = -1;
    snprintf(want, sizeof want, "zbsched: stopped by %s after step ", name);
    const char *line = last_line();
    ck_assert_msg(strncmp(line, want, strlen(want)) == 0, "last line: %s", line);
    ck_assert_int_eq(sscanf(line + strlen(want), "%ld", &at), 1);
    ck_assert_msg(strstr(line, "its checkpoint is in ck; continue with --resume"), "%s", line);
    ck_assert(at >= 2);
    /* the checkpoint is of that step, and the run goes on from it with the
     * losses of a run never stopped (the same --steps: the same schedule) */
    int rc = zb("run s.json --data text.txt --steps 100000 --stop-at %ld --checkpoint ck --resume "
                "--eval-windows 2 -q --json", at + 2);
    ck_assert_msg(rc == 0, "resume: exit %d, %s", rc, err_text);
    double resumed[4];
    ck_assert_int_eq(losses(resumed, 4), 2);
    ck_assert_msg(strstr(out_text, "\"first_step\":") && atol(strstr(out_text, "\"first_step\":") + 13) == at,
                  "%s", out_text);
    rc = zb("run s.json --data text.txt --steps 100000 --stop-at %ld --eval-windows 2 -q --json",
            at + 2);
    ck_assert_msg(rc == 0, "reference: exit %d, %s", rc, err_text);
    /* the reference holds every step up to the stop, however many ran
     * before the signal landed (a fast machine runs hundreds) */
    double *ref = calloc((size_t)at + 2, sizeof *ref);
    ck_assert_ptr_nonnull(ref);
    ck_assert_int_eq(losses(ref, (int)at + 2), (int)at + 2);
    ck_assert_msg(resumed[0] == ref[at] && resumed[1] == ref[at + 1], "at %ld: resumed %.9g %.9g, reference %.9g %.9g", at, resumed[0], resumed[1], ref[at], ref[at + 1]);
    free(ref);
}

START_TEST(sigterm_checkpoints_the_step_and_exits_143)
{
    stop_and_resume(SIGTERM, "SIGTERM");
}
END_TEST

START_TEST(sigint_checkpoints_the_step_and_exits_130)
{
    stop_and_resume(SIGINT, "SIGINT");
}
END_TEST

START_TEST(a_second_signal_stops_at_once)
{
    /* a model whose step outlasts the test's reaction by a wide margin */
    char path[600];
    snprintf(path, sizeof path, "%s/wide.json", tmpdir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"base\": \"tiny\", \"d_model\": 256, \"d_ff\": 1024, \"n_heads\": 4, \"n_kv_heads\": 4}", f);
    fclose(f);
    /* a checkpoint to keep */
    int rc = zb("run s.json --data text.txt --model wide.json --steps 100000 --stop-at 1 --threads 1 "
                "--checkpoint ck --eval-windows 1 -q");
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err_text);
    child c = start("run s.json --data text.txt --model wide.json --steps 100000 --threads 1 "
                    "--checkpoint ck --resume --eval-windows 1");
    ck_assert_msg(wait_for(&c, "resumed"), "no header: %s", err_text);
    ck_assert_int_eq(kill(c.pid, SIGTERM), 0);
    ck_assert_msg(wait_for(&c, "SIGTERM: stopping after this step"), "no notice: %s", err_text);
    ck_assert_int_eq(kill(c.pid, SIGTERM), 0);
    int status = finish(&c);
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM, "status %d, stderr: %s",
                  status, err_text);
    /* the checkpoint of before is whole: a resume loads it (a torn file
     * would fail its checksum) and finds nothing to do before step 1 */
    rc = zb("run s.json --data text.txt --model wide.json --steps 100000 --stop-at 1 --threads 1 "
            "--checkpoint ck --resume -q");
    ck_assert_msg(rc == 1 && strstr(err_text, "already at step 1"), "exit %d: %s", rc, err_text);
}
END_TEST

/* Islands in one process stop the same way (without --checkpoint nothing
 * is saved, which the line says). */
START_TEST(islands_stop_on_sigterm)
{
    child c = start("run s.json --data text.txt --steps 100000 --replicas 2 --eval-windows 2");
    ck_assert_msg(wait_for(&c, "step 2/100000"), "no step 2: %s", err_text);
    ck_assert_int_eq(kill(c.pid, SIGTERM), 0);
    int status = finish(&c);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 143, "status %d, stderr: %s", status,
                  err_text);
    ck_assert_msg(strstr(last_line(), "stopped by SIGTERM after step") &&
                  strstr(last_line(), "nothing is saved without --checkpoint DIR"), "%s", last_line());
}
END_TEST

int main(void)
{
    Suite *su = suite_create("run_signals");
    TCase *tc = tcase_create("signals");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, sigterm_checkpoints_the_step_and_exits_143);
    tcase_add_test(tc, sigint_checkpoints_the_step_and_exits_130);
    tcase_add_test(tc, a_second_signal_stops_at_once);
    tcase_add_test(tc, islands_stop_on_sigterm);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
