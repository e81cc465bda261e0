/*
 * cli_run.h: running the built zbsched program from a test, as a user
 * would, and checking the way it fails.  $ZBSCHED (set by meson test) names
 * the program.  A run captures stdout and stderr through temporary files
 * into caller-owned buffers and returns the exit status; the checks assert
 * the project's rule for bad input: exactly one line on stderr and no
 * output file left behind.  Compiled into each CLI test (tests/meson.build
 * names the source as cli_run_src).
 */
#ifndef ZB_TESTS_COMMON_CLI_RUN_H
#define ZB_TESTS_COMMON_CLI_RUN_H

#include <stdarg.h>
#include <stddef.h>

/* Runs argv (argv[0] searched in PATH, argv NULL-terminated) in a child
 * with stdin from in_path (NULL: /dev/null).  Stores stdout in out and
 * stderr in err, each NUL-terminated and truncated to cap - 1 bytes; a
 * NULL buffer discards that stream.  Returns the exit status, or -1 when
 * the child did not exit (killed by a signal).  Fails the test when the
 * child cannot be started or waited for. */
int cli_exec(char *const argv[], const char *in_path, char *out, size_t out_cap, char *err,
             size_t err_cap);

/* Runs the shell command line `[cd 'cwd' &&] PREFIX '$ZBSCHED' ARGS`
 * (cwd NULL: the test's own directory; prefix NULL or "": nothing, else
 * words such as "timeout 60" or "env VAR=value") through /bin/sh -c,
 * capturing as cli_exec does and returning what it returns.  Fails the
 * test when ZBSCHED is not set. */
int cli_run(const char *cwd, const char *prefix, const char *args, char *out, size_t out_cap,
            char *err, size_t err_cap);

/* cli_run in cwd with no prefix and ARGS formatted from fmt (at most
 * 2047 characters once formatted; longer fails the test).  A test binds
 * its buffers once with a macro, e.g.
 *   #define zb(...) cli_runf(dir, out, sizeof out, errb, sizeof errb, __VA_ARGS__) */
int cli_runf(const char *cwd, char *out, size_t out_cap, char *err, size_t err_cap, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* A fresh scratch directory /tmp/zb_TAG_XXXXXX into dir (cap bytes), for
 * one test case's files; fails the test when it cannot be made. */
void cli_scratch_new(const char *tag, char *dir, size_t cap);

/* Removes the scratch directory dir and everything in it; fails the test
 * when that fails. */
void cli_scratch_free(const char *dir);

/* The file dir/name whole, NUL-terminated, malloc'd (the caller frees);
 * fails the test when it cannot be read. */
char *cli_slurp(const char *dir, const char *name);

/* Lines in text: newlines, plus one for a final line without a newline. */
int cli_lines(const char *text);

/* Asserts that err (a failed run's stderr) is exactly one line, ending in
 * a newline, and contains want (NULL: anything). */
void cli_assert_one_line(const char *err, const char *want);

/* Asserts that nothing exists at path (NULL: nothing to check): a failed
 * run left no output file. */
void cli_assert_no_file(const char *path);

#endif
