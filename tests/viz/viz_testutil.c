/*
 * viz_testutil.c: helpers for the viz tests (see viz_testutil.h).
 */
#include "tests/viz/viz_testutil.h"
#include "src/sched_io.h"
#include "tests/common/cli_run.h"

#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

long tu_count(const char *text, const char *needle)
{
    /* A plain scan rather than repeated strstr: sanitizers check the whole
     * remaining string on every strstr call, which is quadratic on the
     * multi-megabyte documents some tests count in. */
    long n = 0;
    size_t k = strlen(needle);
    for (const char *p = text; *p;) {
        if (*p == needle[0] && !strncmp(p, needle, k)) {
            n++;
            p += k;
        } else {
            p++;
        }
    }
    return n;
}

char *tu_tempdir(void)
{
    char tmpl[] = "/tmp/zb-viz-test-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(tmpl));
    return strdup(tmpl);
}

char *tu_write_temp(const char *name, const char *data, size_t len)
{
    char *dir = tu_tempdir();
    size_t n = strlen(dir) + strlen(name) + 2;
    char *path = malloc(n);
    snprintf(path, n, "%s/%s", dir, name);
    free(dir);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, len, f), len);
    fclose(f);
    return path;
}

void tu_rmdir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

int tu_xml_valid_file(const char *path)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "xmllint --noout '%s' 2>/dev/null", path);
    int st = system(cmd);
    return st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int tu_xml_valid(const char *doc, size_t len)
{
    char *path = tu_write_temp("doc.svg", doc, len);
    int ok = tu_xml_valid_file(path);
    char *slash = strrchr(path, '/');
    unlink(path);
    *slash = '\0';
    rmdir(path);
    free(path);
    return ok;
}

char *tu_read(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    if (len)
        *len = (size_t)n;
    return buf;
}

int tu_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

int tu_zbsched(const char *args, char **err_text)
{
    static char err[1 << 16];
    int st = cli_run(NULL, NULL, args, NULL, 0, err, sizeof err);
    if (err_text)
        *err_text = strdup(err);
    ck_assert(st != -1);
    return st;
}


char *tu_render_elsewhere(const sched_t *s, const char *format, int perturb, size_t *len)
{
    ck_assert(perturb > 0 && perturb < 256);
    char *dir = tu_tempdir();
    char in[4200], out[4200], args[9000], prefix[64];
    snprintf(in, sizeof in, "%s/s.json", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    zb_err err = { 0 };
    ck_assert_msg(sched_save_file(s, in, &err) == 0, "saving %s: %s", in, err.msg);
    snprintf(args, sizeof args, "render '%s' --format %s -o '%s'", in, format, out);
    snprintf(prefix, sizeof prefix, "env MALLOC_PERTURB_=%d", perturb);
    static char err_text[1 << 14];
    int st = cli_run(NULL, prefix, args, NULL, 0, err_text, sizeof err_text);
    ck_assert_msg(st == 0, "render --format %s: exit %d: %s", format, st, err_text);
    char *bytes = tu_read(out, len);
    ck_assert_msg(bytes != NULL, "render wrote no %s", out);
    tu_rmdir(dir);
    free(dir);
    return bytes;
}
