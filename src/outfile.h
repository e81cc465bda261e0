/*
 * outfile.h: the one way zbsched writes an output file.
 *
 * Every writer (schedule files, SVG / trace / DAG renders, CSV exports,
 * profiles, `run --trace`, checkpoints) goes through this module, so that
 * one set of rules decides what a path may be and how it is replaced:
 *
 *   "-" (or NULL)            standard output, through stdio
 *   a FIFO or char device    written through in place (`-o /dev/null`,
 *                            `-o >(gzip > x)`, a named pipe): never replaced
 *   a symlink                followed (up to 40 hops); its final target is
 *                            what gets written, replaced in the target's own
 *                            directory, and the link stays a link
 *   a regular file, or none  replaced atomically: the bytes go to an unnamed
 *                            file (O_TMPFILE) in the target's directory,
 *                            which is fsync'd, linked under a temporary name,
 *                            renamed over the target, and the directory is
 *                            fsync'd; readers see the old file or the new
 *                            one, never part of one
 *   anything else            refused with one line (directories, sockets,
 *                            block devices, ...)
 *
 * Temporary files after a kill: the data lives in an unnamed inode until
 * the very end, so a process killed while writing (even by SIGKILL) leaves
 * nothing behind.  The only window is between linkat and rename, two
 * back-to-back system calls.  Where the filesystem has no O_TMPFILE, a
 * named temporary "TARGET.tmp.PID.XXXXXX" is used instead; either way a
 * later successful write to the same target removes such leftovers whose
 * PID is no longer running on this machine.
 *
 * Durability can't be observed from inside the process, so every fsync
 * (of the data and of the directory) goes through a hook that a test can
 * replace to count calls or to fail them (outfile_set_fsync_hook).
 *
 * Workload: a handful of files per command, from a few bytes to a few
 * hundred megabytes (checkpoints, which stream their parts through
 * outfile_write rather than building one buffer).
 */
#ifndef ZB_OUTFILE_H
#define ZB_OUTFILE_H

#include <stddef.h>

#include "src/err.h"

/* How a destination is written. */
typedef enum outfile_kind {
    OUTFILE_STDOUT,  /* "-" or NULL: standard output */
    OUTFILE_THROUGH, /* an existing FIFO or character device, written in place */
    OUTFILE_REPLACE, /* a regular file or a name not yet taken: replaced atomically */
} outfile_kind;

/* One output being written; fields are private to outfile.c. */
typedef struct outfile {
    outfile_kind kind; /* decided by outfile_open */
    char *shown;       /* the path as given, for messages (malloc'd) */
    char *target;      /* path with symlinks followed: what is written (malloc'd) */
    char *dir;         /* directory of target (malloc'd; REPLACE only) */
    char *tmp_name;    /* named temporary (no O_TMPFILE), else NULL (malloc'd) */
    int fd;            /* the temporary or write-through fd; -1 for stdout / closed */
    int failed;        /* a write failed: commit refuses and discards */
} outfile;

/* Says how path would be written and where, without creating anything.
 * Follows symlinks; stores the kind in *kind and, when target is not NULL,
 * the final path in *target (malloc'd, caller frees; NULL for stdout).
 * Returns 0, or -1 with err set when the path can't be an output: a
 * directory, socket or block device, a symlink loop, or (for a file to be
 * replaced) a missing or unwritable directory. */
int outfile_check(const char *path, outfile_kind *kind, char **target, zb_err *err);

/* Fails (-1, err set) when out names the same existing regular file as in,
 * through any path or link (same st_dev and st_ino); writing it would
 * destroy the input.  "-", NULL and paths that don't exist pass. */
int outfile_check_distinct(const char *out, const char *in, zb_err *err);

/* 1 when outputs a and b of one command would replace the same file: the
 * same existing file (same st_dev and st_ino, through any path or link),
 * or, for names not yet taken, the same name in the same directory once
 * symlinks and "." / ".." are resolved.  Writing both would keep only the
 * one written last.  0 otherwise, and for "-", NULL, FIFOs and character
 * devices (written through: two outputs may share /dev/null) and paths
 * outfile_check refuses (the writer of each reports those). */
int outfile_same_target(const char *a, const char *b);

/* Starts writing path.  Returns 0 with *o ready for outfile_write, or -1
 * with err set and nothing created.  A FIFO with no reader blocks here,
 * as a shell redirection would. */
int outfile_open(outfile *o, const char *path, zb_err *err);

/* Appends len bytes.  Returns 0, or -1 with err set (the output is then
 * marked failed; the caller still calls outfile_commit or outfile_abort). */
int outfile_write(outfile *o, const void *data, size_t len, zb_err *err);

/* Finishes: flushes, fsyncs, puts the new file in place and fsyncs its
 * directory.  Always releases o.  Returns 0, or -1 with err set; on
 * failure before the rename the old file is untouched and no temporary is
 * left.  A failed fsync of the directory after the rename is reported too
 * (the new file is in place but may not survive a crash). */
int outfile_commit(outfile *o, zb_err *err);

/* Discards what was written (the old file stays) and releases o. */
void outfile_abort(outfile *o);

/* open + write + commit of one buffer. */
int outfile_write_all(const char *path, const void *data, size_t len, zb_err *err);

/* Test seam: every fsync this module does calls hook(fd, ctx) instead of
 * fsync(fd) (hook returns 0 or -1 with errno set).  NULL restores fsync.
 * Not thread-safe: set it before writing starts. */
void outfile_set_fsync_hook(int (*hook)(int fd, void *ctx), void *ctx);

/* Test seam: a non-zero value makes the writer use a named temporary, as
 * it does on filesystems without O_TMPFILE; 0 restores the default. */
void outfile_set_named_temporaries(int named);

#endif
