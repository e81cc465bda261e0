/*
 * test_outfile.c: the one writer of output files (src/outfile.h).
 *
 * Every special file these tests make (FIFOs, sockets, symlinks, hard
 * links) lives in a fresh directory under $TMPDIR or /tmp.  The only
 * system paths touched are /dev/null, /dev/zero and /dev/full, and only by
 * reading their st_mode and asking the writer how it would treat them:
 * these tests never write under /dev.  The fsync hook stands in for the disk: it counts calls, records
 * what the target held when the directory was synced, fails on demand or
 * kills the process in the middle of a write.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "src/outfile.h"

static char dir[256]; /* this test's scratch directory */

static void make_dir(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/zb_outfile_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

/* dir/name in a static buffer (two alternate, so that two can be live). */
static const char *at(const char *name)
{
    static char buf[2][512];
    static int which;
    which ^= 1;
    snprintf(buf[which], sizeof buf[which], "%s/%s", dir, name);
    return buf[which];
}

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

/* The file's whole content (static buffer). */
static const char *get(const char *path)
{
    static char buf[4096];
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* Entries in d, "." and ".." aside. */
static int entries(const char *d)
{
    DIR *h = opendir(d);
    ck_assert_ptr_nonnull(h);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(h)) != NULL)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(h);
    return n;
}

/* Whether directory d supports O_TMPFILE (else the writer falls back to a
 * named temporary, which a kill can leave until the next write). */
static int have_tmpfile(const char *d)
{
    int fd = open(d, O_TMPFILE | O_WRONLY, 0600);
    if (fd < 0)
        return 0;
    close(fd);
    return 1;
}

static mode_t ltype(const char *path)
{
    struct stat st;
    ck_assert_int_eq(lstat(path, &st), 0);
    return st.st_mode & S_IFMT;
}

START_TEST(regular_file_replaced_atomically)
{
    make_dir();
    const char *p = at("out.txt");
    put(p, "old bytes");
    /* A reader that opened the old file keeps reading the old bytes: the
     * new file is a new inode, not the old one rewritten in place. */
    int held = open(p, O_RDONLY);
    ck_assert_int_ge(held, 0);
    zb_err err = { "" };
    ck_assert_msg(outfile_write_all(p, "new", 3, &err) == 0, "%s", err.msg);
    char buf[32] = { 0 };
    ck_assert_int_eq(pread(held, buf, sizeof buf - 1, 0), 9);
    ck_assert_str_eq(buf, "old bytes");
    close(held);
    ck_assert_str_eq(get(p), "new");
    ck_assert_int_eq(entries(dir), 1); /* no temporary left */
}
END_TEST

START_TEST(fifo_written_through)
{
    make_dir();
    const char *p = at("pipe");
    ck_assert_int_eq(mkfifo(p, 0600), 0);
    /* Reader first (non-blocking), so the writer's open does not wait. */
    int rd = open(p, O_RDONLY | O_NONBLOCK);
    ck_assert_int_ge(rd, 0);
    zb_err err = { "" };
    outfile_kind kind;
    ck_assert_int_eq(outfile_check(p, &kind, NULL, &err), 0);
    ck_assert_int_eq(kind, OUTFILE_THROUGH);
    ck_assert_msg(outfile_write_all(p, "through", 7, &err) == 0, "%s", err.msg);
    char buf[32] = { 0 };
    ck_assert_int_eq(read(rd, buf, sizeof buf - 1), 7);
    ck_assert_str_eq(buf, "through");
    close(rd);
    ck_assert_int_eq(ltype(p), S_IFIFO); /* still a FIFO */
    ck_assert_int_eq(entries(dir), 1);
}
END_TEST

START_TEST(char_device_is_written_through)
{
    /* Reads st_mode and asks the writer only: nothing under /dev is
     * written or replaced here (the CLI test writes to one, after this
     * same check).  /dev/zero stands in when something on the machine
     * has already turned /dev/null into a regular file. */
    const char *devs[] = { "/dev/null", "/dev/zero", "/dev/full" };
    int seen = 0;
    for (int i = 0; i < 3; i++) {
        struct stat st;
        if (stat(devs[i], &st) != 0 || !S_ISCHR(st.st_mode))
            continue;
        seen++;
        zb_err err = { "" };
        outfile_kind kind;
        char *target = NULL;
        ck_assert_int_eq(outfile_check(devs[i], &kind, &target, &err), 0);
        ck_assert_int_eq(kind, OUTFILE_THROUGH);
        ck_assert_str_eq(target, devs[i]);
        free(target);
    }
    ck_assert_msg(seen > 0, "none of /dev/null, /dev/zero, /dev/full is a character device");
    zb_err err = { "" };
    outfile_kind kind;
    ck_assert_int_eq(outfile_check("-", &kind, NULL, &err), 0);
    ck_assert_int_eq(kind, OUTFILE_STDOUT);
    ck_assert_int_eq(outfile_check(NULL, &kind, NULL, &err), 0);
    ck_assert_int_eq(kind, OUTFILE_STDOUT);
}
END_TEST

START_TEST(symlink_target_replaced_in_its_own_directory)
{
    make_dir();
    char sub[600];
    snprintf(sub, sizeof sub, "%s/real", dir);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    char target[700];
    snprintf(target, sizeof target, "%s/t.json", sub);
    put(target, "old");
    /* a relative link, and a link to that link */
    ck_assert_int_eq(symlink("real/t.json", at("link")), 0);
    ck_assert_int_eq(symlink("link", at("link2")), 0);
    zb_err err = { "" };
    ck_assert_msg(outfile_write_all(at("link2"), "new", 3, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(ltype(at("link")), S_IFLNK);
    ck_assert_int_eq(ltype(at("link2")), S_IFLNK);
    ck_assert_int_eq(ltype(target), S_IFREG);
    ck_assert_str_eq(get(target), "new");
    ck_assert_int_eq(entries(dir), 3);  /* real, link, link2 */
    ck_assert_int_eq(entries(sub), 1);  /* no temporary next to the target */
    /* A dangling link names a file to create. */
    ck_assert_int_eq(symlink("real/fresh.json", at("dangling")), 0);
    ck_assert_msg(outfile_write_all(at("dangling"), "fresh", 5, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(ltype(at("dangling")), S_IFLNK);
    snprintf(target, sizeof target, "%s/fresh.json", sub);
    ck_assert_str_eq(get(target), "fresh");
}
END_TEST

START_TEST(other_kinds_refused)
{
    make_dir();
    zb_err err = { "" };
    /* a directory */
    ck_assert_int_eq(outfile_write_all(dir, "x", 1, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "directory"));
    /* a socket */
    const char *sp = at("sock");
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    ck_assert_int_ge(s, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sp);
    ck_assert_int_eq(bind(s, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(outfile_write_all(sp, "x", 1, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "not a regular file"));
    ck_assert_int_eq(ltype(sp), S_IFSOCK); /* still a socket */
    close(s);
    /* a symlink loop */
    ck_assert_int_eq(symlink("loop2", at("loop1")), 0);
    ck_assert_int_eq(symlink("loop1", at("loop2")), 0);
    ck_assert_int_eq(outfile_write_all(at("loop1"), "x", 1, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "symbolic links"));
    /* a missing directory, a name ending in '/', an empty name */
    ck_assert_int_eq(outfile_write_all(at("no/such/f"), "x", 1, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "No such file"));
    ck_assert_int_eq(outfile_write_all(at("new/"), "x", 1, &err), -1);
    ck_assert_int_eq(outfile_write_all("", "x", 1, &err), -1);
    ck_assert_int_eq(entries(dir), 3); /* sock, loop1, loop2 */
}
END_TEST

START_TEST(output_that_is_the_input_refused)
{
    make_dir();
    char in[512], other_path[600];
    snprintf(in, sizeof in, "%s", at("in.json"));
    put(in, "input");
    put(at("other.json"), "other");
    ck_assert_int_eq(symlink("in.json", at("sym.json")), 0);
    ck_assert_int_eq(link(in, at("hard.json")), 0);
    zb_err err = { "" };
    ck_assert_int_eq(outfile_check_distinct(in, in, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "is the input"));
    snprintf(other_path, sizeof other_path, "%s/./in.json", dir);
    ck_assert_int_eq(outfile_check_distinct(other_path, in, &err), -1);
    ck_assert_int_eq(outfile_check_distinct(at("sym.json"), in, &err), -1);
    ck_assert_int_eq(outfile_check_distinct(at("hard.json"), in, &err), -1);
    ck_assert_int_eq(outfile_check_distinct(in, at("sym.json"), &err), -1);
    /* distinct, missing, stdin/stdout: fine */
    ck_assert_int_eq(outfile_check_distinct(at("other.json"), in, &err), 0);
    ck_assert_int_eq(outfile_check_distinct(at("missing.json"), in, &err), 0);
    ck_assert_int_eq(outfile_check_distinct("-", in, &err), 0);
    ck_assert_int_eq(outfile_check_distinct(in, "-", &err), 0);
    ck_assert_int_eq(outfile_check_distinct(in, NULL, &err), 0);
    ck_assert_str_eq(get(in), "input");
}
END_TEST

/* ------------------------------------------------------------ fsync seam */

/* What the hook saw and does. */
typedef struct sync_log {
    int files;          /* fsyncs of regular files */
    int dirs;           /* fsyncs of directories */
    int fail_file;      /* fail the regular-file fsync (EIO) */
    int fail_dir;       /* fail the directory fsync (EIO) */
    int kill_on_file;   /* SIGKILL ourselves at the regular-file fsync */
    const char *watch;  /* path whose content is recorded at the dir fsync */
    char at_dir[64];    /* watch's content when the directory was synced */
} sync_log;

static int hook(int fd, void *ctx)
{
    sync_log *log = ctx;
    struct stat st;
    ck_assert_int_eq(fstat(fd, &st), 0);
    if (S_ISDIR(st.st_mode)) {
        log->dirs++;
        if (log->watch)
            snprintf(log->at_dir, sizeof log->at_dir, "%s", get(log->watch));
        if (log->fail_dir) {
            errno = EIO;
            return -1;
        }
        return fsync(fd);
    }
    log->files++;
    if (log->kill_on_file)
        raise(SIGKILL);
    if (log->fail_file) {
        errno = EIO;
        return -1;
    }
    return fsync(fd);
}

START_TEST(file_then_directory_synced_after_rename)
{
    make_dir();
    const char *p = at("f.txt");
    put(p, "old");
    sync_log log = { .watch = p };
    outfile_set_fsync_hook(hook, &log);
    zb_err err = { "" };
    int rc = outfile_write_all(p, "new", 3, &err);
    outfile_set_fsync_hook(NULL, NULL);
    ck_assert_msg(rc == 0, "%s", err.msg);
    ck_assert_int_eq(log.files, 1);
    ck_assert_int_eq(log.dirs, 1);
    ck_assert_str_eq(log.at_dir, "new"); /* the rename came before the dir's fsync */
}
END_TEST

START_TEST(failed_fsync_reported_old_file_kept)
{
    make_dir();
    const char *p = at("f.txt");
    put(p, "old");
    sync_log log = { .fail_file = 1 };
    outfile_set_fsync_hook(hook, &log);
    zb_err err = { "" };
    int rc = outfile_write_all(p, "new", 3, &err);
    outfile_set_fsync_hook(NULL, NULL);
    ck_assert_int_eq(rc, -1);
    ck_assert_msg(strstr(err.msg, "fsync") && strstr(err.msg, "Input/output error"), "%s", err.msg);
    ck_assert_str_eq(get(p), "old");
    ck_assert_int_eq(entries(dir), 1);
    ck_assert_int_eq(log.dirs, 0); /* nothing was renamed */
}
END_TEST

START_TEST(failed_directory_fsync_reported)
{
    make_dir();
    const char *p = at("f.txt");
    sync_log log = { .fail_dir = 1 };
    outfile_set_fsync_hook(hook, &log);
    zb_err err = { "" };
    int rc = outfile_write_all(p, "new", 3, &err);
    outfile_set_fsync_hook(NULL, NULL);
    ck_assert_int_eq(rc, -1);
    ck_assert_msg(strstr(err.msg, "syncing its directory"), "%s", err.msg);
    ck_assert_str_eq(get(p), "new"); /* in place, but the caller knows */
    ck_assert_int_eq(entries(dir), 1);
}
END_TEST

START_TEST(kill_while_writing_leaves_no_temporary)
{
    make_dir();
    const char *p = at("f.txt");
    put(p, "old");
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        /* killed at the fsync: every byte written, nothing renamed yet */
        sync_log log = { .kill_on_file = 1 };
        outfile_set_fsync_hook(hook, &log);
        zb_err err = { "" };
        outfile_write_all(p, "new", 3, &err);
        _exit(0);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    ck_assert_str_eq(get(p), "old");
    if (!have_tmpfile(dir)) {
        /* no O_TMPFILE here: the named temporary goes with the next write */
        zb_err err = { "" };
        ck_assert_msg(outfile_write_all(p, "next", 4, &err) == 0, "%s", err.msg);
        ck_assert_str_eq(get(p), "next");
    }
    ck_assert_int_eq(entries(dir), 1);
}
END_TEST

START_TEST(named_temporaries_where_there_is_no_tmpfile)
{
    make_dir();
    const char *p = at("f.txt");
    put(p, "old");
    /* a failed fsync leaves no named temporary either */
    outfile_set_named_temporaries(1);
    sync_log log = { .fail_file = 1 };
    outfile_set_fsync_hook(hook, &log);
    zb_err err = { "" };
    ck_assert_int_eq(outfile_write_all(p, "new", 3, &err), -1);
    outfile_set_fsync_hook(NULL, NULL);
    ck_assert_str_eq(get(p), "old");
    ck_assert_int_eq(entries(dir), 1);
    /* a kill does, with the dead writer's PID in its name ... */
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        sync_log kill_log = { .kill_on_file = 1 };
        outfile_set_fsync_hook(hook, &kill_log);
        outfile_write_all(p, "new", 3, &err);
        _exit(0);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFSIGNALED(status));
    ck_assert_str_eq(get(p), "old");
    ck_assert_int_eq(entries(dir), 2);
    /* ... and the next write to the same target removes it */
    ck_assert_msg(outfile_write_all(p, "next", 4, &err) == 0, "%s", err.msg);
    outfile_set_named_temporaries(0);
    ck_assert_str_eq(get(p), "next");
    ck_assert_int_eq(entries(dir), 1);
}
END_TEST

START_TEST(leftover_temporaries_of_dead_processes_swept)
{
    make_dir();
    /* a PID that certainly ended: a child we reaped */
    pid_t dead = fork();
    ck_assert_int_ge(dead, 0);
    if (dead == 0)
        _exit(0);
    ck_assert_int_eq(waitpid(dead, NULL, 0), dead);
    char stale[64], live[64], other[64];
    snprintf(stale, sizeof stale, "f.txt.tmp.%ld.abcdef", (long)dead);
    snprintf(live, sizeof live, "f.txt.tmp.%ld.abcdef", (long)getppid()); /* alive */
    snprintf(other, sizeof other, "g.txt.tmp.%ld.abcdef", (long)dead);    /* another target */
    put(at(stale), "x");
    put(at(live), "x");
    put(at(other), "x");
    zb_err err = { "" };
    ck_assert_msg(outfile_write_all(at("f.txt"), "new", 3, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(access(at(stale), F_OK), -1);
    ck_assert_int_eq(access(at(live), F_OK), 0);
    ck_assert_int_eq(access(at(other), F_OK), 0);
}
END_TEST

START_TEST(streamed_write_and_abort)
{
    make_dir();
    const char *p = at("f.txt");
    put(p, "old");
    zb_err err = { "" };
    outfile o;
    ck_assert_int_eq(outfile_open(&o, p, &err), 0);
    ck_assert_int_eq(outfile_write(&o, "ab", 2, &err), 0);
    ck_assert_int_eq(outfile_write(&o, "cd", 2, &err), 0);
    ck_assert_str_eq(get(p), "old"); /* nothing visible before the commit */
    outfile_abort(&o);
    ck_assert_str_eq(get(p), "old");
    ck_assert_int_eq(entries(dir), 1);
    ck_assert_int_eq(outfile_open(&o, p, &err), 0);
    ck_assert_int_eq(outfile_write(&o, "ab", 2, &err), 0);
    ck_assert_int_eq(outfile_write(&o, "cd", 2, &err), 0);
    ck_assert_int_eq(outfile_commit(&o, &err), 0);
    ck_assert_str_eq(get(p), "abcd");
    ck_assert_int_eq(entries(dir), 1);
}
END_TEST

/* Removes the scratch directory (runs in the test's own process). */
static void remove_dir(void)
{
    if (!dir[0])
        return;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    dir[0] = '\0';
}

int main(void)
{
    Suite *s = suite_create("outfile");
    TCase *tc = tcase_create("outfile");
    tcase_add_checked_fixture(tc, NULL, remove_dir);
    tcase_add_test(tc, regular_file_replaced_atomically);
    tcase_add_test(tc, fifo_written_through);
    tcase_add_test(tc, char_device_is_written_through);
    tcase_add_test(tc, symlink_target_replaced_in_its_own_directory);
    tcase_add_test(tc, other_kinds_refused);
    tcase_add_test(tc, output_that_is_the_input_refused);
    tcase_add_test(tc, file_then_directory_synced_after_rename);
    tcase_add_test(tc, failed_fsync_reported_old_file_kept);
    tcase_add_test(tc, failed_directory_fsync_reported);
    tcase_add_test(tc, kill_while_writing_leaves_no_temporary);
    tcase_add_test(tc, named_temporaries_where_there_is_no_tmpfile);
    tcase_add_test(tc, leftover_temporaries_of_dead_processes_swept);
    tcase_add_test(tc, streamed_write_and_abort);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
