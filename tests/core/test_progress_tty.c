/*
 * test_progress_tty.c: the live status line of long commands
 * (src/cli/progress.h) appears on a terminal and nowhere else.
 *
 * The program runs under a pseudo-terminal made with forkpty (glibc, no
 * external tool): its stderr is the terminal, so `zbsched gen ilp` with a
 * 4-second time limit must redraw a line with the ILP's gap, carriage
 * return first, and end it with a newline.  A second run keeps stderr on
 * the terminal but sends stdout to a file with -o - , which must then hold
 * the schedule and nothing of the status line.  `search --ilp` shows the
 * candidate count and which configuration the ILP refines.  Redirected to files, and
 * on the terminal with -q, stderr stays empty.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pty.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/common/cli_run.h"

static char tmpdir[] = "/tmp/zb_progress_testXXXXXX";

/* Runs argv under a new pseudo-terminal (stdin, stdout and stderr on it,
 * unless stdout_path names a file for stdout), collects everything written
 * to the terminal into buf (cap bytes, NUL-terminated) and returns the exit
 * status. */
static int run_pty(char *const argv[], const char *stdout_path, char *buf, size_t cap)
{
    int master;
    fflush(NULL);
    pid_t pid = forkpty(&master, NULL, NULL, NULL);
    ck_assert_msg(pid >= 0, "forkpty failed: %s", strerror(errno));
    if (pid == 0) {
        if (stdout_path) {
            int fd = open(stdout_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd < 0)
                _exit(127);
            dup2(fd, 1);
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    size_t n = 0;
    for (;;) {
        ssize_t r = read(master, buf + n, cap - 1 - n);
        if (r > 0) {
            n += (size_t)r;
            if (n == cap - 1)
                n = 0; /* keep reading; only the tail matters */
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        break; /* EOF or EIO: the child closed the terminal */
    }
    buf[n] = '\0';
    close(master);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The last 400 bytes of text, for failure messages (Check's are short). */
static const char *tail(const char *text)
{
    size_t n = strlen(text);
    return n > 400 ? text + n - 400 : text;
}

static const char *path(const char *name)
{
    static char b[4][512];
    static int k;
    char *p = b[k++ % 4];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    return p;
}

/* meta.solver.seconds of the schedule file at p (the ILP's own timing). */
static double solve_seconds(const char *p)
{
    static char text[1 << 20];
    FILE *f = fopen(p, "r");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    const char *k = strstr(text, "\"seconds\":");
    ck_assert_msg(k != NULL, "no solver seconds in %s", p);
    return strtod(k + strlen("\"seconds\":"), NULL);
}

START_TEST(ilp_shows_gap_on_a_terminal)
{
    const char *exe = getenv("ZBSCHED");
    ck_assert_ptr_nonnull(exe);
    static char buf[1 << 20];
    char *argv[] = { (char *)exe, "gen", "ilp", "-p", "4", "-m", "12", "--mem-limit", "4",
                     "--time-limit", "4", "-o", (char *)path("x.json"), NULL };
    ck_assert_int_eq(run_pty(argv, NULL, buf, sizeof buf), 0);
    /* The line appears after half a second (progress.h): a solver that
     * someday proves this case optimal sooner owes no status line. */
    double secs = solve_seconds(path("x.json"));
    if (secs < 1.0 && strstr(buf, "\rilp") == NULL)
        return;
    ck_assert_msg(strstr(buf, "\rilp") != NULL, "no carriage-return status line: [...%s]", tail(buf));
    ck_assert_msg(strstr(buf, "gap ") != NULL && strstr(buf, "incumbent ") != NULL &&
                  strstr(buf, "bound ") != NULL, "no gap in the status: [...%s]", tail(buf));
    size_t len = strlen(buf);
    ck_assert_msg(len > 0 && buf[len - 1] == '\n', "the status line has no final newline");
    ck_assert_int_eq(access(path("x.json"), F_OK), 0);
}
END_TEST

START_TEST(search_names_the_configuration_the_ilp_refines)
{
    const char *exe = getenv("ZBSCHED");
    static char buf[1 << 20];
    /* The status line appears after half a second, and an ILP that
     * proves its answer at once reports only its final state, drawn only
     * once a line is shown: on 16 GPUs the search now reaches its ILPs
     * about then, and they finish in no time.  On 32 GPUs the pp=8 ILP
     * runs its whole 1.5 s, reporting its gap as it goes. */
    char *argv[] = { (char *)exe, "search", "--mem", "40G", "--gpus", "32", "--global-batch", "128", "--ilp",
                     "--ilp-top", "1", "--ilp-time", "1.5", "-o", (char *)path("best.json"), NULL };
    ck_assert_int_eq(run_pty(argv, NULL, buf, sizeof buf), 0);
    ck_assert_msg(strstr(buf, "\rsearch ") != NULL && strstr(buf, " candidates; ilp 1/1 on pp=") != NULL,
                  "no search status naming the ILP's configuration: [...%s]", tail(buf));
    ck_assert_msg(strstr(buf, "gap ") != NULL, "no ILP gap in the search status: [...%s]", tail(buf));
    ck_assert_msg(strstr(buf, "best: ") != NULL, "the table is missing");
}
END_TEST

START_TEST(status_never_goes_to_stdout)
{
    const char *exe = getenv("ZBSCHED");
    static char buf[1 << 20], out[1 << 20];
    char *argv[] = { (char *)exe, "gen", "ilp", "-p", "4", "-m", "24", "--mem-limit", "4",
                     "--time-limit", "1.5", NULL };
    ck_assert_int_eq(run_pty(argv, path("stdout.json"), buf, sizeof buf), 0);
    ck_assert_msg(strstr(buf, "gap ") != NULL, "no status on the terminal: [...%s]", tail(buf));
    FILE *f = fopen(path("stdout.json"), "r");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(out, 1, sizeof out - 1, f);
    fclose(f);
    out[n] = '\0';
    ck_assert_msg(out[0] == '{' && strchr(out, '\r') == NULL && strstr(out, "incumbent ") == NULL,
                  "stdout holds more than the schedule");
}
END_TEST

START_TEST(quiet_when_redirected_or_q)
{
    const char *exe = getenv("ZBSCHED");
    static char buf[1 << 16], err[4096];
    char args[512];
    snprintf(args, sizeof args, "gen ilp -p 4 -m 24 --mem-limit 4 --time-limit 1.5 -o '%s'",
             path("y.json"));
    ck_assert_int_eq(cli_run(NULL, NULL, args, NULL, 0, err, sizeof err), 0);
    ck_assert_msg(err[0] == '\0', "stderr redirected to a file got [%s]", err);
    char *argv[] = { (char *)exe, "gen", "ilp", "-p", "4", "-m", "24", "--mem-limit", "4",
                     "--time-limit", "1.5", "-q", "-o", (char *)path("z.json"), NULL };
    ck_assert_int_eq(run_pty(argv, NULL, buf, sizeof buf), 0);
    ck_assert_msg(buf[0] == '\0', "-q still printed [...%s]", tail(buf));
}
END_TEST

int main(void)
{
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return EXIT_FAILURE;
    }
    Suite *su = suite_create("progress_tty");
    TCase *tc = tcase_create("tty");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, ilp_shows_gap_on_a_terminal);
    tcase_add_test(tc, search_names_the_configuration_the_ilp_refines);
    tcase_add_test(tc, status_never_goes_to_stdout);
    tcase_add_test(tc, quiet_when_redirected_or_q);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
