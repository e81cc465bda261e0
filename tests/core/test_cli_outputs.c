/*
 * test_cli_outputs.c: what every zbsched command does with the places it
 * writes to (issue 14, output half): -o to a FIFO, a character device or a
 * symlink; -o naming a directory, a socket, a missing directory or one of
 * the command's own inputs; standard output that fails (a full device); and
 * `launch` in a build without CUDA.
 *
 * Special files (FIFOs, sockets, links, and the character devices) are
 * made only in a fresh directory under /tmp: the null and full devices are
 * mknod'ed there (major 1, minors 3 and 7), so nothing under /dev is ever
 * written, even by a broken writer under mutation testing.  The device
 * cases are a Suite of their own, the meson test cli_outputs_devices
 * (argv[1] "devices"), which reads SKIP with the reason when this process
 * may not mknod (tests/common/ck_skip.h).  Commands run from the
 * repository root (the default --data path is relative to it).
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include "src/outfile.h"
#include "tests/common/ck_skip.h"
#include "tests/common/cli_run.h"

static char dir[64];
static char out_text[1 << 16], err_text[1 << 14];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/zb_test_outputs_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* dir/name (four rotating static buffers: one call's arguments). */
static const char *at(const char *name)
{
    static char buf[4][256];
    static int which;
    which = (which + 1) % 4;
    snprintf(buf[which], sizeof buf[which], "%s/%s", dir, name);
    return buf[which];
}

/* Runs `zbsched ARGS` from the repository root under a timeout; the args
 * may carry shell redirections. */
static int zb(const char *fmt, ...)
{
    char args[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    const char *root = getenv("ZB_SOURCE_ROOT");
    ck_assert_ptr_nonnull(root);
    return cli_run(root, "timeout 60", args, out_text, sizeof out_text, err_text,
                   sizeof err_text);
}

static void assert_fails(int rc, const char *want)
{
    ck_assert_msg(rc == 1 || rc == 2, "exit %d, stderr: %s", rc, err_text);
    cli_assert_one_line(err_text, want);
}

static mode_t ltype(const char *path)
{
    struct stat st;
    ck_assert_msg(lstat(path, &st) == 0, "%s is missing", path);
    return st.st_mode & S_IFMT;
}

/* The first bytes of a file (static buffer). */
static const char *head(const char *path)
{
    static char buf[256];
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

/* dir/s.json: a small ZB-H1 schedule the CPU runtime can train. */
static void make_schedule(void)
{
    ck_assert_int_eq(zb("gen zb-h1 -p 2 -m 4 -o %s", at("s.json")), 0);
}

START_TEST(fifo_written_through)
{
    make_schedule();
    ck_assert_int_eq(mkfifo(at("pipe"), 0600), 0);
    /* a reader in the background, then the writer; the shell waits for both */
    ck_assert_int_eq(zb("gen 1f1b -p 2 -m 2 -o %s & cat %s > %s; wait", at("pipe"), at("pipe"),
                        at("got.json")), 0);
    ck_assert_int_eq(ltype(at("pipe")), S_IFIFO);
    ck_assert_ptr_nonnull(strstr(head(at("got.json")), "zbsched-schedule"));
    ck_assert_int_eq(zb("render %s -o %s & cat %s > %s; wait", at("s.json"), at("pipe"),
                        at("pipe"), at("got.svg")), 0);
    ck_assert_int_eq(ltype(at("pipe")), S_IFIFO);
    ck_assert_ptr_nonnull(strstr(head(at("got.svg")), "<svg"));
    /* the kernel's magic link to a pipe: /proc/self/fd/1 reads "pipe:[N]" */
    ck_assert_int_eq(zb("gen 1f1b -p 2 -m 2 -o /proc/self/fd/1 | cat > %s", at("piped.json")), 0);
    ck_assert_ptr_nonnull(strstr(head(at("piped.json")), "zbsched-schedule"));
}
END_TEST

/* Makes a character device node `name` (major 1: the memory devices) in
 * the test's directory and returns its path (a static buffer of its own,
 * since at() rotates).  Only the "devices" Suite calls it, after the probe
 * found that this process may mknod, so a failure here fails the case. */
static const char *make_chardev(const char *name, unsigned minor)
{
    static char paths[2][128];
    static int next;
    char *path = paths[next++ % 2];
    snprintf(path, sizeof paths[0], "%s", at(name));
    ck_assert_msg(mknod(path, S_IFCHR | 0666, makedev(1, minor)) == 0, "mknod %s: %s", path,
                  strerror(errno));
    return path;
}

START_TEST(char_device_written_through)
{
    const char *dev = make_chardev("null", 3);
    struct stat before;
    ck_assert_int_eq(stat(dev, &before), 0);
    make_schedule();
    ck_assert_int_eq(zb("gen 1f1b -p 2 -m 2 -o %s", dev), 0);
    ck_assert_int_eq(zb("render %s -o %s", at("s.json"), dev), 0);
    ck_assert_int_eq(zb("export %s -o %s", at("s.json"), dev), 0);
    struct stat after;
    ck_assert_int_eq(lstat(dev, &after), 0);
    ck_assert(S_ISCHR(after.st_mode));
    ck_assert_int_eq(after.st_rdev, before.st_rdev);
    ck_assert_int_eq(after.st_ino, before.st_ino);
}
END_TEST

START_TEST(symlink_followed_and_kept)
{
    make_schedule();
    ck_assert_int_eq(mkdir(at("real"), 0700), 0);
    ck_assert_int_eq(zb("gen 1f1b -p 2 -m 2 -o %s", at("real/out.svg")), 0);
    ck_assert_int_eq(symlink("real/out.svg", at("link.svg")), 0);
    ck_assert_int_eq(zb("render %s -o %s", at("s.json"), at("link.svg")), 0);
    ck_assert_int_eq(ltype(at("link.svg")), S_IFLNK);
    ck_assert_ptr_nonnull(strstr(head(at("real/out.svg")), "<svg"));
    /* a dangling link: the file it names is created */
    ck_assert_int_eq(symlink("real/new.json", at("dangling.json")), 0);
    ck_assert_int_eq(zb("gen 1f1b -p 2 -m 2 -o %s", at("dangling.json")), 0);
    ck_assert_int_eq(ltype(at("dangling.json")), S_IFLNK);
    ck_assert_ptr_nonnull(strstr(head(at("real/new.json")), "zbsched-schedule"));
    /* only the two files in real/, no temporaries anywhere */
    ck_assert_int_eq(entries(at("real")), 2);
    ck_assert_int_eq(entries(dir), 4); /* s.json, real, link.svg, dangling.json */
}
END_TEST

START_TEST(other_kinds_refused)
{
    make_schedule();
    assert_fails(zb("gen 1f1b -p 2 -m 2 -o %s", dir), "directory");
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    ck_assert_int_ge(s, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", at("sock"));
    ck_assert_int_eq(bind(s, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_fails(zb("render %s -o %s", at("s.json"), at("sock")), "not a regular file");
    assert_fails(zb("export %s -o %s", at("s.json"), at("sock")), "not a regular file");
    ck_assert_int_eq(ltype(at("sock")), S_IFSOCK);
    close(s);
}
END_TEST

START_TEST(output_that_is_an_input_refused)
{
    make_schedule();
    char before[256];
    snprintf(before, sizeof before, "%s", head(at("s.json")));
    ck_assert_int_eq(symlink("s.json", at("sym.json")), 0);
    ck_assert_int_eq(link(at("s.json"), at("hard.json")), 0);
    assert_fails(zb("render %s -o %s", at("s.json"), at("s.json")), "is the input");
    assert_fails(zb("render %s -o %s/../%s/s.json", at("s.json"), dir, strrchr(dir, '/') + 1),
                 "is the input");
    assert_fails(zb("render %s -o %s", at("s.json"), at("sym.json")), "is the input");
    assert_fails(zb("render %s -o %s", at("sym.json"), at("hard.json")), "is the input");
    assert_fails(zb("render %s --compare %s -o %s", at("s.json"), at("s.json"), at("hard.json")),
                 "is the input");
    assert_fails(zb("export %s -o %s", at("s.json"), at("hard.json")), "is the input");
    assert_fails(zb("run %s --steps 1 -q --trace %s", at("s.json"), at("sym.json")),
                 "is the input");
    ck_assert_str_eq(head(at("s.json")), before);
    ck_assert_int_eq(ltype(at("sym.json")), S_IFLNK);
    ck_assert_int_eq(zb("export %s -o %s", at("s.json"), at("s.csv")), 0);
    assert_fails(zb("import %s -o %s", at("s.csv"), at("s.csv")), "is the input");
    ck_assert_ptr_null(strstr(head(at("s.csv")), "zbsched-schedule"));
}
END_TEST

/* Two outputs of one command that are one file: whichever is written last
 * would silently replace the other, so the command refuses before any
 * work, however the two are spelled (the same name, ./, a path through
 * .., a symlink, a hard link, the default -o), and writes nothing. */
START_TEST(outputs_that_are_one_file_refused)
{
    const char *same_ways[][2] = {
        { "x.out", "x.out" }, { "x.out", "./x.out" }, { "x.out", "../%s/x.out" },
        { "link.json", "x.out" }, { "hard.json", "kept.svg" },
    };
    ck_assert_int_eq(symlink("x.out", at("link.json")), 0);
    FILE *f = fopen(at("kept.svg"), "w");
    ck_assert_ptr_nonnull(f);
    fputs("old", f);
    fclose(f);
    ck_assert_int_eq(link(at("kept.svg"), at("hard.json")), 0);
    const char *base = strrchr(dir, '/') + 1;
    FILE *w = fopen(at("w.json"), "w");
    ck_assert_ptr_nonnull(w);
    fputs("[[90,132,40,61],[20,107,104,64]]", w);
    fclose(w);
    for (size_t i = 0; i < sizeof same_ways / sizeof same_ways[0]; i++) {
        char svg[128];
        snprintf(svg, sizeof svg, same_ways[i][1], base);
        /* search's -o and --svg, from the test directory */
        char args[512];
        snprintf(args, sizeof args, "search --mem 40G -q -o %s --svg %s", same_ways[i][0], svg);
        int rc = cli_run(dir, "timeout 60", args, out_text, sizeof out_text, err_text, sizeof err_text);
        ck_assert_msg(rc == 2, "%s: exit %d, stderr: %s", args, rc, err_text);
        cli_assert_one_line(err_text, "-o and --svg name the same file");
        /* eplb's -o and --svg */
        snprintf(args, sizeof args,
                 "eplb w.json --replicas 4 --groups 2 --nodes 1 --gpus 2 -o %s --svg %s",
                 same_ways[i][0], svg);
        rc = cli_run(dir, "timeout 60", args, out_text, sizeof out_text, err_text, sizeof err_text);
        ck_assert_msg(rc == 2, "%s: exit %d, stderr: %s", args, rc, err_text);
        cli_assert_one_line(err_text, "-o and --svg name the same file");
    }
    /* search's default -o is best.json */
    int rc = cli_run(dir, "timeout 60", "search --mem 40G -q --svg best.json", out_text,
                     sizeof out_text, err_text, sizeof err_text);
    ck_assert_msg(rc == 2, "exit %d, stderr: %s", rc, err_text);
    cli_assert_one_line(err_text, "-o and --svg name the same file 'best.json'");
    cli_assert_no_file(at("x.out"));
    cli_assert_no_file(at("best.json"));
    ck_assert_str_eq(head(at("kept.svg")), "old");
    ck_assert_int_eq(ltype(at("link.json")), S_IFLNK);
    /* apart, and two write-through devices, are fine */
    ck_assert_int_eq(cli_run(dir, "timeout 60",
                             "eplb w.json --replicas 4 --groups 2 --nodes 1 --gpus 2 -o a.json "
                             "--svg a.svg",
                             out_text, sizeof out_text, err_text, sizeof err_text), 0);
    ck_assert_int_eq(cli_run(dir, "timeout 60",
                             "eplb w.json --replicas 4 --groups 2 --nodes 1 --gpus 2 -o /dev/null "
                             "--svg /dev/null",
                             out_text, sizeof out_text, err_text, sizeof err_text), 0);
}
END_TEST

/* Under `ulimit -f` every writer fails in one line, exit 1, and leaves no
 * output behind; before, SIGXFSZ killed the command without a word (exit
 * 153), leaving what it had created.  20 blocks are 10 KB under dash
 * (512-byte blocks) and 20 KB under bash: each output here is larger. */
START_TEST(file_size_limit_fails_in_one_line)
{
    make_schedule();
    const char *limit = "ulimit -f 20 && timeout 60";
    char args[600];
    const char *const writes[][2] = {
        { "gen zb-h1 -p 8 -m 64 -o %s", "big.json" },
        { "render %s -o %s", "s.svg" },
        { "search --mem 40G -q -o %s", "best.json" },
        { "checkpoint init %s -o %s", "ck" },
    };
    for (size_t i = 0; i < sizeof writes / sizeof writes[0]; i++) {
        if (strstr(writes[i][0], "%s -o %s"))
            snprintf(args, sizeof args, writes[i][0], at("s.json"), at(writes[i][1]));
        else
            snprintf(args, sizeof args, writes[i][0], at(writes[i][1]));
        int rc = cli_run(dir, limit, args, out_text, sizeof out_text, err_text, sizeof err_text);
        ck_assert_msg(rc == 1, "%s: exit %d, stderr: %s", args, rc, err_text);
        cli_assert_one_line(err_text, "File too large");
        if (strcmp(writes[i][1], "ck") != 0)
            cli_assert_no_file(at(writes[i][1]));
        else
            ck_assert_int_eq(entries(at("ck")), 0); /* no part, no manifest */
    }
    /* standard output too */
    int rc = cli_run(dir, limit, "gen zb-h1 -p 8 -m 64 > big.out", out_text, sizeof out_text,
                     err_text, sizeof err_text);
    ck_assert_msg(rc == 1, "exit %d, stderr: %s", rc, err_text);
    cli_assert_one_line(err_text, "standard output: File too large");
}
END_TEST

/* Under `ulimit -v` a command either does its work or ends in one line:
 * run and profile, whose BLAS would retry a failed buffer allocation
 * forever (a hang, before), refuse when their threads' buffers cannot fit;
 * gen, render and search, which load no BLAS, just work. */
START_TEST(address_space_limit_is_one_line_not_a_hang)
{
    make_schedule();
    /* KILL: a hung run catches timeout's SIGTERM and waits for its step */
    const char *limit = "ulimit -v 300000 && timeout -s KILL 20";
    char args[600];
    snprintf(args, sizeof args, "run %s --steps 3 -q --eval-windows 2", at("s.json"));
    int rc = cli_run(dir, limit, args, out_text, sizeof out_text, err_text, sizeof err_text);
    ck_assert_msg(rc == 1, "%s: exit %d (-1 or 137: hung), stderr: %s", args, rc, err_text);
    cli_assert_one_line(err_text, "the address-space limit (ulimit -v) leaves");
    rc = cli_run(dir, limit, "profile --reps 1 -q -o p.json", out_text, sizeof out_text, err_text,
                 sizeof err_text);
    ck_assert_msg(rc == 1, "profile: exit %d (-1 or 137: hung), stderr: %s", rc, err_text);
    cli_assert_one_line(err_text, "the address-space limit (ulimit -v) leaves");
    cli_assert_no_file(at("p.json"));
    snprintf(args, sizeof args, "gen zb-h1 -p 4 -m 8 -o %s", at("g.json"));
    ck_assert_int_eq(cli_run(dir, limit, args, out_text, sizeof out_text, err_text, sizeof err_text), 0);
    snprintf(args, sizeof args, "render %s -o %s", at("g.json"), at("g.svg"));
    ck_assert_int_eq(cli_run(dir, limit, args, out_text, sizeof out_text, err_text, sizeof err_text), 0);
    ck_assert_int_eq(cli_run(dir, limit, "search --mem 40G -q -o b.json", out_text, sizeof out_text,
                             err_text, sizeof err_text), 0);
}
END_TEST

START_TEST(outputs_checked_before_the_work)
{
    make_schedule();
    /* 100,000 steps would take hours: the bad --trace must stop it first */
    int rc = zb("run %s --steps 100000 --trace /nonexistent-zb-dir/t.json", at("s.json"));
    assert_fails(rc, "/nonexistent-zb-dir");
    ck_assert_ptr_null(strstr(err_text, "step"));
    assert_fails(zb("run %s --steps 100000 --trace %s", at("s.json"), dir), "directory");
    /* a checkpoint that could never be written: before the first step too */
    ck_assert_int_eq(mkdir(at("ck"), 0700), 0);
    ck_assert_int_eq(mkdir(at("ck/checkpoint.bin"), 0700), 0);
    assert_fails(zb("run %s --steps 100000 --checkpoint %s", at("s.json"), at("ck")), "directory");
    ck_assert_ptr_null(strstr(err_text, "step"));
    assert_fails(zb("profile -o /nonexistent-zb-dir/p.json"), "/nonexistent-zb-dir");
    assert_fails(zb("search --mem 80G -o /nonexistent-zb-dir/b.json"), "/nonexistent-zb-dir");
    assert_fails(zb("search --mem 80G -o %s --svg /nonexistent-zb-dir/b.svg", at("b.json")),
                 "/nonexistent-zb-dir");
    cli_assert_no_file(at("b.json"));
}
END_TEST

/* `zbsched ARGS > FULL` (a full device made in the test's directory) must
 * fail with one line about stdout. */
static const char *full_dev;
static void assert_stdout_error_reported(const char *args)
{
    char cmd[768];
    snprintf(cmd, sizeof cmd, "%s > %s", args, full_dev);
    int rc = zb("%s", cmd);
    ck_assert_msg(rc == 1, "'%s' exit %d, stderr: %s", cmd, rc, err_text);
    cli_assert_one_line(err_text, "standard output");
}

START_TEST(stdout_write_errors_fail)
{
    full_dev = make_chardev("full", 7);
    make_schedule();
    char a[256];
    snprintf(a, sizeof a, "simulate %s --json", at("s.json"));
    assert_stdout_error_reported(a);
    snprintf(a, sizeof a, "simulate %s", at("s.json"));
    assert_stdout_error_reported(a);
    assert_stdout_error_reported("gen 1f1b -p 2 -m 2");
    snprintf(a, sizeof a, "render %s", at("s.json"));
    assert_stdout_error_reported(a);
    snprintf(a, sizeof a, "export %s", at("s.json"));
    assert_stdout_error_reported(a);
    snprintf(a, sizeof a, "search --mem 80G --json -o %s", at("best.json"));
    assert_stdout_error_reported(a);
    snprintf(a, sizeof a, "search --mem 80G -o %s", at("best.json"));
    assert_stdout_error_reported(a);
    snprintf(a, sizeof a, "run %s --steps 1 -q --eval-windows 1 --json", at("s.json"));
    assert_stdout_error_reported(a);
    assert_stdout_error_reported("profile --reps 1 -q");
    assert_stdout_error_reported("help");
    assert_stdout_error_reported("--version");
    /* eplb's table and JSON, generate's stream and JSON */
    FILE *w = fopen(at("w.json"), "w");
    ck_assert_ptr_nonnull(w);
    fputs("[[90,132,40,61],[20,107,104,64]]", w);
    fclose(w);
    snprintf(a, sizeof a, "eplb %s --replicas 4 --groups 2 --nodes 1 --gpus 2", at("w.json"));
    assert_stdout_error_reported(a);
    ck_assert_ptr_nonnull(strstr(err_text, "No space left on device"));
    snprintf(a, sizeof a, "eplb %s --replicas 4 --groups 2 --nodes 1 --gpus 2 --json", at("w.json"));
    assert_stdout_error_reported(a);
    snprintf(a, sizeof a, "run %s --steps 1 -q --eval-windows 1 --checkpoint %s", at("s.json"),
             at("gen_ck"));
    ck_assert_int_eq(zb("%s", a), 0);
    snprintf(a, sizeof a, "generate --checkpoint %s -n 20 -q", at("gen_ck"));
    assert_stdout_error_reported(a);
    /* the cause of the first failed write, not a later call's errno */
    ck_assert_msg(strstr(err_text, "No space left on device") != NULL, "%s", err_text);
    snprintf(a, sizeof a, "generate --checkpoint %s -n 20 -q --json", at("gen_ck"));
    assert_stdout_error_reported(a);
    assert_stdout_error_reported("run --help");
    /* the same commands into a working stdout succeed */
    snprintf(a, sizeof a, "simulate %s --json", at("s.json"));
    ck_assert_int_eq(zb("%s", a), 0);
}
END_TEST

START_TEST(launch_without_cuda_refused)
{
    /* Any build: a CPU command would only run N copies of one job. */
    make_schedule();
    assert_fails(zb("launch --gpus 2 run %s --steps 1", at("s.json")), "without --device cuda");
    ck_assert_str_eq(out_text, ""); /* no training ran */
    ck_assert_int_eq(zb("launch --help"), 0);
}
END_TEST

START_TEST(dag_render_passes_leak_check_without_test_settings)
{
    /* An ASan build must not fail on Graphviz/fontconfig's own leaks, even
     * outside the test environment: no LSAN_OPTIONS here. */
    make_schedule();
    int rc = zb("render %s --format dag -o %s", at("s.json"), at("dag.svg"));
    ck_assert_msg(rc == 0, "exit %d, stderr: %s", rc, err_text);
    ck_assert_ptr_nonnull(strstr(head(at("dag.svg")), "<svg"));
}
END_TEST

/* A TCase with the test directory and a timeout long enough for runs. */
static TCase *outputs_case(const char *name)
{
    TCase *tc = tcase_create(name);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    return tc;
}

static Suite *outputs_suite(void)
{
    Suite *s = suite_create("cli_outputs");
    TCase *tc = outputs_case("outputs");
    tcase_add_test(tc, fifo_written_through);
    tcase_add_test(tc, symlink_followed_and_kept);
    tcase_add_test(tc, other_kinds_refused);
    tcase_add_test(tc, output_that_is_an_input_refused);
    tcase_add_test(tc, outputs_that_are_one_file_refused);
    tcase_add_test(tc, file_size_limit_fails_in_one_line);
    tcase_add_test(tc, outputs_checked_before_the_work);
    tcase_add_test(tc, launch_without_cuda_refused);
    tcase_add_test(tc, dag_render_passes_leak_check_without_test_settings);
    suite_add_tcase(s, tc);
    return s;
}

/* The cases that mknod the null and full devices. */
static Suite *devices_suite(void)
{
    Suite *s = suite_create("cli_outputs_devices");
    TCase *tc = outputs_case("devices");
    tcase_add_test(tc, char_device_written_through);
    tcase_add_test(tc, stdout_write_errors_fail);
    suite_add_tcase(s, tc);
    return s;
}

/* The case under `ulimit -v`. */
static Suite *ulimit_suite(void)
{
    Suite *s = suite_create("cli_outputs_ulimit");
    TCase *tc = outputs_case("ulimit");
    tcase_add_test(tc, address_space_limit_is_one_line_not_a_hang);
    suite_add_tcase(s, tc);
    return s;
}

/* An AddressSanitizer build maps terabytes of shadow memory when it
 * starts, so none of its commands can start under the address-space limit
 * the case sets: there it cannot run (ck_skip_probe). */
static int cannot_limit_address_space(char *why, size_t cap)
{
#if defined(__SANITIZE_ADDRESS__)
    snprintf(why, cap, "built with AddressSanitizer, whose shadow memory alone exceeds the "
             "ulimit -v the case runs under");
    return 1;
#else
    (void)why;
    (void)cap;
    return 0;
#endif
}

int main(int argc, char **argv)
{
    /* the DAG test's point: nothing from the environment suppresses leaks */
    unsetenv("LSAN_OPTIONS");
    if (argc > 1 && !strcmp(argv[1], "ulimit"))
        return ck_main_with_optional(argc, argv, outputs_suite, "ulimit", ulimit_suite,
                                     cannot_limit_address_space);
    return ck_main_with_optional(argc, argv, outputs_suite, "devices", devices_suite,
                                 ck_cannot_mknod);
}
