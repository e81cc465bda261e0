/*
 * viz_testutil.h: helpers shared by the viz tests: temporary files,
 * substring counting, running xmllint and the zbsched program.
 */
#ifndef ZB_TESTS_VIZ_TESTUTIL_H
#define ZB_TESTS_VIZ_TESTUTIL_H

#include <stddef.h>

#include "src/sched.h"

/* Number of non-overlapping occurrences of needle in text. */
long tu_count(const char *text, const char *needle);

/* Writes len bytes to a new file in a fresh temporary directory and returns
 * its malloc'd path (caller frees); the directory is left for tu_rmdir. */
char *tu_write_temp(const char *name, const char *data, size_t len);

/* A fresh empty temporary directory (malloc'd path). */
char *tu_tempdir(void);

/* Removes dir and the files directly in it. */
void tu_rmdir(const char *dir);

/* 1 when `xmllint --noout` accepts the file at path. */
int tu_xml_valid_file(const char *path);

/* Same for an in-memory document. */
int tu_xml_valid(const char *doc, size_t len);

/* Reads a whole file (malloc'd, NUL-terminated) or NULL. */
char *tu_read(const char *path, size_t *len);

/* 1 when path exists. */
int tu_exists(const char *path);

/* Runs `$ZBSCHED args...` through the shell (cli_run) with stdout to
 * /dev/null and stderr captured; returns the exit status (failing the test
 * when the program was killed) and stores the stderr text in *err_text
 * (malloc'd, caller frees). */
int tu_zbsched(const char *args, char **err_text);

/* Draws s with `zbsched render --format FORMAT` in a process of its own:
 * saves s to a temporary file and runs the built program on it with
 * MALLOC_PERTURB_=perturb (1..255: fresh allocations hold that byte, freed
 * ones its complement), at addresses the kernel randomises per process.
 * Returns the output file's bytes (malloc'd, NUL-terminated; *len its
 * length); fails the test when the program fails. */
char *tu_render_elsewhere(const sched_t *s, const char *format, int perturb, size_t *len);

#endif
