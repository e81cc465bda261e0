/*
 * checkpoint.h: the on-disk checkpoint container, written atomically and
 * read back only when it is whole.
 *
 * A checkpoint is an ordered list of binary parts (the trainer stores a
 * small metadata record, the data generator state, and per stage the
 * parameters and AdamW moments).  The file is
 *
 *   header   magic "ZBCKPT\0\n", u32 version, u32 part count,
 *            u64 payload bytes, u64 FNV-1a checksum of table + payload
 *   table    one u64 byte size per part
 *   payload  the parts back to back
 *
 * in the host's byte order (checkpoints move between runs on one machine,
 * not between architectures).  Writing goes through src/outfile.h: an
 * unnamed temporary in the target's directory, fsync'd, renamed over the
 * target, and the directory fsync'd: a crash or a kill leaves the old
 * checkpoint or the new one, never half of one, and no temporary file.
 * A failed fsync is reported and leaves the old checkpoint in place.  Reading checks magic, version, part count, every part size against
 * what the caller expects, the file length (truncation) and the checksum
 * before it writes anything into the caller's buffers.
 *
 * Expected workload: one checkpoint of up to a few hundred megabytes every
 * few hundred steps.
 */
#ifndef ZB_RUNTIME_CHECKPOINT_H
#define ZB_RUNTIME_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "src/err.h"

#define CKPT_MAGIC "ZBCKPT\0\n"
#define CKPT_VERSION 1

typedef struct ckpt_part {
    void *data;   /* bytes to write, or the buffer a read fills */
    size_t bytes; /* its size (a read requires the stored size to match) */
} ckpt_part;

/* Writes parts[0..n_parts) to path atomically.  Returns 0, or -1 with err
 * set (and no file left behind but a previous checkpoint). */
int ckpt_write(const char *path, const ckpt_part *parts, int n_parts, zb_err *err);

/* Reads path into parts[0..n_parts) (sizes must match exactly).  Returns 0,
 * or -1 with err set (missing, not a checkpoint, other version, other
 * shape, truncated, checksum mismatch); on failure no buffer is touched. */
int ckpt_read(const char *path, ckpt_part *parts, int n_parts, zb_err *err);

/* Reads a whole, intact checkpoint of any shape (the same checks as
 * ckpt_read but the sizes): *parts_out gets n fresh parts with their own
 * buffers (free with ckpt_parts_free).  For readers that learn the shape
 * from the file, e.g. generation from a checkpoint of any split.  Returns 0
 * or -1 with err set. */
int ckpt_read_any(const char *path, ckpt_part **parts_out, int *n_parts, zb_err *err);

/* Frees what ckpt_read_any returned (NULL is fine). */
void ckpt_parts_free(ckpt_part *parts, int n_parts);

#endif
