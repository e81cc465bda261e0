/*
 * ckpt_set.h: a checkpoint directory that holds either one file or one
 * part per process, and how a run finds the newest complete checkpoint in
 * it.
 *
 * One process writes DIR/checkpoint.bin (trainer_save).  W processes, the
 * pipeline ranks of `mpirun -np W zbsched run` (docs/mpi.md), each own a
 * few stages; each writes only those, with no gathering:
 *
 *   DIR/checkpoint.TAG.rank-R.bin   rank R's stages (trainer_save_stages),
 *                                   the progress record, the model's shape
 *   DIR/checkpoint.parts.json       the manifest: {"step", "ranks", "tag",
 *                                   "parts": [names]}
 *
 * TAG is 16 random hex digits drawn for each save, so a save never writes
 * over a file that the current manifest names.  Commit protocol:
 *   1. every rank writes its part atomically (src/outfile.h: unnamed
 *      temporary, fsync, rename, directory fsync);
 *   2. the ranks agree that every part is durable (a collective, the
 *      caller's);
 *   3. rank 0 replaces the manifest atomically: this is the commit point;
 *   4. every rank deletes its parts of other tags, and rank 0 the now
 *      older DIR/checkpoint.bin, if any.
 * A rank that dies anywhere before step 3 leaves the old manifest and the
 * parts it names untouched: the previous checkpoint stays loadable, and
 * the new tag's orphans are deleted by the next successful save.  A death
 * in step 4 leaves extra files only.
 *
 * Loading (ckptset_load) takes the newer of the manifest's set and
 * checkpoint.bin, by step (the one-process run removes the manifest when
 * it writes checkpoint.bin, so both exist only after a crash between the
 * two).  A rank of the same layout (same W) reads only its own part;
 * anything else (one process, another W) reads all W parts and assembles
 * them, which works whenever the stage split is the same (the parts carry
 * the model's shape and split, and trainer_load_parts checks them).
 *
 * Workload: one save every few hundred steps, W up to a few dozen.
 */
#ifndef ZB_RUNTIME_CKPT_SET_H
#define ZB_RUNTIME_CKPT_SET_H

#include <stddef.h>

#include "runtime/trainer.h"
#include "src/err.h"

#define CKPTSET_SINGLE "checkpoint.bin"
#define CKPTSET_MANIFEST "checkpoint.parts.json"
#define CKPTSET_TAG_LEN 16

/* What the manifest records. */
typedef struct ckptset_manifest {
    long step;                         /* optimizer steps the checkpoint holds */
    int ranks;                         /* parts, one per rank 0..ranks-1 */
    char tag[CKPTSET_TAG_LEN + 1];     /* the parts' tag, hex digits */
} ckptset_manifest;

/* Fills tag with CKPTSET_TAG_LEN fresh random hex digits and a NUL. */
void ckptset_new_tag(char tag[CKPTSET_TAG_LEN + 1]);

/* DIR/checkpoint.TAG.rank-R.bin into buf[cap].  Returns 0, or -1 with err
 * set when it does not fit. */
int ckptset_part_path(const char *dir, const char *tag, int rank, char *buf, size_t cap,
                      zb_err *err);

/* Writes DIR/checkpoint.parts.json for m atomically (the commit point).
 * Returns 0 or -1 with err set. */
int ckptset_manifest_write(const char *dir, const ckptset_manifest *m, zb_err *err);

/* Reads DIR's manifest into *m: 1, or 0 when there is none, or -1 with
 * err set when it is unreadable or malformed. */
int ckptset_manifest_read(const char *dir, ckptset_manifest *m, zb_err *err);

/* After a commit: deletes rank's part files in dir whose tag is not
 * keep_tag (orphans of failed saves, the superseded set) and, when
 * drop_single, DIR/checkpoint.bin.  Best effort: errors are ignored (the
 * files are only clutter once the manifest is committed). */
void ckptset_prune(const char *dir, int rank, const char *keep_tag, int drop_single);

/* The one-process save: trainer_save to DIR/checkpoint.bin, then the
 * manifest (older now) is deleted.  Returns 0 or -1 with err set. */
int ckptset_save_single(const trainer *t, const char *dir, zb_err *err);

/* Loads the newest complete checkpoint of dir into t (see the header):
 * rank, world describe the caller (rank -1: one process).  *what (may be
 * NULL) gets "checkpoint.bin" or "checkpoint.parts.json", for messages.
 * Returns 0, or -1 with err set (none there, a missing or damaged part,
 * another model or split), leaving t unchanged but for the case where
 * checkpoint.bin loaded and a newer set then failed. */
int ckptset_load(trainer *t, const char *dir, int rank, int world, const char **what,
                 zb_err *err);

#endif
