/*
 * sched_io.h: the versioned JSON schedule file (docs/schedule-format.md).
 *
 * Loading checks structure and ranges (every field of the right type, every
 * op token well formed, stages and micro-batches in range) and names the
 * device and op position of the first problem.  Whether the ops form a
 * complete, executable schedule is the validator's job (validate.h).
 */
#ifndef ZB_SCHED_IO_H
#define ZB_SCHED_IO_H

#include "src/sched.h"

#define SCHED_FORMAT_NAME "zbsched-schedule"
#define SCHED_FORMAT_VERSION 1
/* Written only by schedules with vocabulary parallelism (S, T ops and a
 * "vocab" object); version-1 files still load. */
#define SCHED_FORMAT_VERSION_VOCAB 2

/* Parses a schedule document of len bytes (need not be NUL-terminated).
 * On success stores a new schedule in *out (caller frees) and returns 0;
 * otherwise returns -1 with err set and *out untouched. */
int sched_load_string(const char *text, size_t len, sched_t **out, zb_err *err);

/* Reads and parses path ("-" is stdin).  Errors are prefixed with the path. */
int sched_load_file(const char *path, sched_t **out, zb_err *err);

/* Returns the document as a malloc'd NUL-terminated string (caller frees),
 * or NULL when memory runs out. */
char *sched_to_string(const sched_t *s);

/* Writes the document to path through outfile_write_all (src/outfile.h:
 * regular files replaced atomically, FIFOs and character devices written
 * through, symlinks followed, anything else refused), or to stdout when
 * path is NULL or "-".
 * Returns 0 or -1 with err set; on failure no partial file is left. */
int sched_save_file(const sched_t *s, const char *path, zb_err *err);

/* Writes len bytes to path as above (outfile_write_all); "-" or NULL is
 * stdout.  Kept as the name the writers of schedules, SVG, traces and CSV
 * call. */
int zb_write_atomic(const char *path, const char *data, size_t len, zb_err *err);

/* Reads a whole file ("-" is stdin) into a malloc'd NUL-terminated buffer;
 * stores its length in *len.  Refuses files over the input cap
 * (src/input.h).  Returns 0 or -1 with err set. */
int zb_read_file(const char *path, char **data, size_t *len, zb_err *err);

#endif
