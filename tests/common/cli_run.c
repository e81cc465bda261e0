/*
 * cli_run.c: the shared runner and failure checks of the CLI tests
 * (cli_run.h).  The child's stdout and stderr go to files made with mkstemp
 * in $TMPDIR (else /tmp) rather than pipes, so a chatty child can never
 * block on a full pipe while the test waits for it.
 */
#include "tests/common/cli_run.h"

#include "src/sched_io.h"

#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Makes an empty temporary file; stores its path in path (cap bytes) and
 * returns an fd open for writing. */
static int make_temp(char *path, size_t cap)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(path, cap, "%s/zb_cli_run_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemp(path);
    ck_assert_msg(fd >= 0, "cannot create a temporary file in %s", path);
    return fd;
}

/* Reads the file at path into buf (cap bytes, NUL-terminated), then
 * removes the file. */
static void slurp_and_remove(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
    unlink(path);
}

int cli_exec(char *const argv[], const char *in_path, char *out, size_t out_cap, char *err,
             size_t err_cap)
{
    char out_path[512], err_path[512];
    int fo = out ? make_temp(out_path, sizeof out_path) : open("/dev/null", O_WRONLY);
    int fe = err ? make_temp(err_path, sizeof err_path) : open("/dev/null", O_WRONLY);
    ck_assert(fo >= 0 && fe >= 0);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int in = open(in_path ? in_path : "/dev/null", O_RDONLY);
        if (in < 0)
            _exit(127);
        dup2(in, 0);
        dup2(fo, 1);
        dup2(fe, 2);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(fo);
    close(fe);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    if (out)
        slurp_and_remove(out_path, out, out_cap);
    if (err)
        slurp_and_remove(err_path, err, err_cap);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int cli_run(const char *cwd, const char *prefix, const char *args, char *out, size_t out_cap,
            char *err, size_t err_cap)
{
    const char *exe = getenv("ZBSCHED");
    ck_assert_msg(exe != NULL, "ZBSCHED is not set (run through meson test)");
    size_t n = strlen(exe) + strlen(args) + (cwd ? strlen(cwd) : 0) + (prefix ? strlen(prefix) : 0) + 32;
    char *cmd = malloc(n);
    ck_assert_ptr_nonnull(cmd);
    snprintf(cmd, n, "%s%s%s%s%s'%s' %s", cwd ? "cd '" : "", cwd ? cwd : "", cwd ? "' && " : "",
             prefix ? prefix : "", prefix && *prefix ? " " : "", exe, args);
    char *argv[] = { "/bin/sh", "-c", cmd, NULL };
    int rc = cli_exec(argv, NULL, out, out_cap, err, err_cap);
    free(cmd);
    return rc;
}

int cli_lines(const char *text)
{
    int n = 0;
    const char *p = text;
    for (; *p; p++)
        n += *p == '\n';
    if (p > text && p[-1] != '\n')
        n++;
    return n;
}

void cli_assert_one_line(const char *err, const char *want)
{
    const char *nl = strchr(err, '\n');
    ck_assert_msg(nl && nl[1] == '\0', "stderr not exactly one line: '%s'", err);
    if (want)
        ck_assert_msg(strstr(err, want) != NULL, "stderr '%s' lacks '%s'", err, want);
}

void cli_assert_no_file(const char *path)
{
    struct stat st;
    if (path)
        ck_assert_msg(stat(path, &st) != 0, "%s was created", path);
}

int cli_runf(const char *cwd, char *out, size_t out_cap, char *err, size_t err_cap, const char *fmt, ...)
{
    char args[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    ck_assert_msg(n >= 0 && (size_t)n < sizeof args, "command line too long: %.80s...", args);
    return cli_run(cwd, NULL, args, out, out_cap, err, err_cap);
}

void cli_scratch_new(const char *tag, char *dir, size_t cap)
{
    int n = snprintf(dir, cap, "/tmp/zb_%s_XXXXXX", tag);
    ck_assert(n > 0 && (size_t)n < cap);
    ck_assert_msg(mkdtemp(dir) != NULL, "cannot make %s", dir);
}

void cli_scratch_free(const char *dir)
{
    char cmd[512];
    int n = snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert(n > 0 && (size_t)n < sizeof cmd);
    ck_assert_int_eq(system(cmd), 0);
}

char *cli_slurp(const char *dir, const char *name)
{
    char path[512], *text;
    size_t len;
    zb_err err = { { 0 } };
    int n = snprintf(path, sizeof path, "%s/%s", dir, name);
    ck_assert(n > 0 && (size_t)n < sizeof path);
    ck_assert_msg(zb_read_file(path, &text, &len, &err) == 0, "%s", err.msg);
    return text;
}
