/*
 * test_checkpoint.c: overwriting a checkpoint is atomic and durable
 * (runtime/checkpoint.h over src/outfile.h).
 *
 * Atomic: a reader that opened the old checkpoint keeps reading the old
 * bytes after a new one is written, and the path holds the whole old
 * checkpoint until the new one is complete and synced (a writer that
 * rewrote the file in place fails both).  Durable: fsync can't be seen
 * from inside the process, so the writer's fsync hook stands in for the
 * disk: it records what the path held when each fsync happened, fails on
 * demand, or kills the process mid-write.  All files live in a fresh
 * directory under $TMPDIR or /tmp.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/checkpoint.h"
#include "src/outfile.h"

#define N_VALUES 4096

static char dir[256];  /* scratch directory */
static char path[512]; /* dir/c.bin */

static void setup(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/zb_ckpt_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/c.bin", dir);
}

static void teardown(void)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

/* Writes a checkpoint whose every value is `value`. */
static int write_ckpt(float value, zb_err *err)
{
    static float v[N_VALUES];
    static long long step;
    for (int i = 0; i < N_VALUES; i++)
        v[i] = value + (float)i;
    step = (long long)value;
    ckpt_part parts[2] = { { v, sizeof v }, { &step, sizeof step } };
    return ckpt_write(path, parts, 2, err);
}

/* The value the checkpoint at path was written with, or -1 when it does
 * not read back whole. */
static float read_value(void)
{
    static float v[N_VALUES];
    long long step;
    ckpt_part parts[2] = { { v, sizeof v }, { &step, sizeof step } };
    zb_err err = { "" };
    if (ckpt_read(path, parts, 2, &err) != 0)
        return -1;
    for (int i = 0; i < N_VALUES; i++)
        if (v[i] != (float)step + (float)i)
            return -1;
    return (float)step;
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

static int entries(void)
{
    DIR *h = opendir(dir);
    ck_assert_ptr_nonnull(h);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(h)) != NULL)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(h);
    return n;
}

/* The fsync hook's orders and what it saw. */
typedef struct disk {
    int file_syncs;     /* fsyncs of the checkpoint's data */
    int dir_syncs;      /* fsyncs of its directory */
    float at_file_sync; /* read_value() when the data was synced */
    float at_dir_sync;  /* read_value() when the directory was synced */
    int fail_file;      /* fail the data's fsync with EIO */
    int kill_on_file;   /* SIGKILL at the data's fsync */
} disk;

static int hook(int fd, void *ctx)
{
    disk *d = ctx;
    struct stat st;
    ck_assert_int_eq(fstat(fd, &st), 0);
    if (S_ISDIR(st.st_mode)) {
        d->dir_syncs++;
        d->at_dir_sync = read_value();
        return fsync(fd);
    }
    d->file_syncs++;
    d->at_file_sync = read_value();
    if (d->kill_on_file)
        raise(SIGKILL);
    if (d->fail_file) {
        errno = EIO;
        return -1;
    }
    return fsync(fd);
}

START_TEST(overwrite_keeps_the_old_bytes_for_an_open_reader)
{
    zb_err err = { "" };
    ck_assert_int_eq(write_ckpt(1, &err), 0);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    char *old = malloc((size_t)st.st_size), *seen = malloc((size_t)st.st_size);
    ck_assert(old && seen);
    int held = open(path, O_RDONLY);
    ck_assert_int_ge(held, 0);
    ck_assert_int_eq(pread(held, old, (size_t)st.st_size, 0), st.st_size);

    disk d = { 0 };
    outfile_set_fsync_hook(hook, &d);
    int rc = write_ckpt(2, &err);
    outfile_set_fsync_hook(NULL, NULL);
    ck_assert_msg(rc == 0, "%s", err.msg);
    /* the open reader: the old bytes, all of them, unchanged */
    ck_assert_int_eq(pread(held, seen, (size_t)st.st_size, 0), st.st_size);
    ck_assert_mem_eq(seen, old, (size_t)st.st_size);
    close(held);
    /* the path: the old checkpoint whole until the new one was synced */
    ck_assert_float_eq(d.at_file_sync, 1);
    ck_assert_float_eq(read_value(), 2);
    ck_assert_int_eq(entries(), 1);
    free(old);
    free(seen);
}
END_TEST

START_TEST(directory_synced_after_the_rename)
{
    zb_err err = { "" };
    ck_assert_int_eq(write_ckpt(1, &err), 0);
    disk d = { 0 };
    outfile_set_fsync_hook(hook, &d);
    int rc = write_ckpt(2, &err);
    outfile_set_fsync_hook(NULL, NULL);
    ck_assert_msg(rc == 0, "%s", err.msg);
    ck_assert_int_eq(d.file_syncs, 1);
    ck_assert_int_eq(d.dir_syncs, 1);
    ck_assert_float_eq(d.at_dir_sync, 2); /* the new name was in place when synced */
}
END_TEST

START_TEST(failed_fsync_reported_and_old_checkpoint_kept)
{
    zb_err err = { "" };
    ck_assert_int_eq(write_ckpt(1, &err), 0);
    disk d = { .fail_file = 1 };
    outfile_set_fsync_hook(hook, &d);
    int rc = write_ckpt(2, &err);
    outfile_set_fsync_hook(NULL, NULL);
    ck_assert_int_eq(rc, -1);
    ck_assert_msg(strstr(err.msg, "checkpoint") && strstr(err.msg, "fsync") &&
                  strstr(err.msg, "Input/output error"), "%s", err.msg);
    ck_assert_float_eq(read_value(), 1);
    ck_assert_int_eq(d.dir_syncs, 0);
    ck_assert_int_eq(entries(), 1); /* no temporary left */
}
END_TEST

START_TEST(kill_while_writing_keeps_old_checkpoint_and_leaves_no_temporary)
{
    zb_err err = { "" };
    ck_assert_int_eq(write_ckpt(1, &err), 0);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        disk d = { .kill_on_file = 1 };
        outfile_set_fsync_hook(hook, &d);
        write_ckpt(2, &err);
        _exit(0);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    ck_assert_float_eq(read_value(), 1);
    if (!have_tmpfile(dir)) {
        /* no O_TMPFILE here: the named temporary goes with the next write */
        ck_assert_int_eq(write_ckpt(3, &err), 0);
        ck_assert_float_eq(read_value(), 3);
    }
    ck_assert_int_eq(entries(), 1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("runtime-checkpoint");
    TCase *tc = tcase_create("checkpoint");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, overwrite_keeps_the_old_bytes_for_an_open_reader);
    tcase_add_test(tc, directory_synced_after_the_rename);
    tcase_add_test(tc, failed_fsync_reported_and_old_checkpoint_kept);
    tcase_add_test(tc, kill_while_writing_keeps_old_checkpoint_and_leaves_no_temporary);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
