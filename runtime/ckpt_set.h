/*
 * ckpt_set.h: the checkpoint directory, one committed unit.
 *
 * `zbsched run --checkpoint DIR` keeps in DIR everything a resume and
 * `zbsched generate` need: the weights and optimizer state, the model
 * (its shape, memory layers and the text's character vocabulary), and the
 * settings of the run (runtime/run_record.h).  They must never disagree,
 * and no command may leave half of a new checkpoint beside half of an old
 * one, so the directory holds one set of files per checkpoint and one
 * file that says which set is current:
 *
 *   DIR/checkpoint.TAG.rank-R.bin   rank R's stages (trainer_save_stages),
 *                                   the progress record, the model's shape
 *                                   and split; one process writes rank 0,
 *                                   holding every stage
 *   DIR/checkpoint.parts.json       the manifest, version 2: {"step",
 *                                   "ranks", "tag", "parts": [names],
 *                                   "parameters", "stages",
 *                                   "layers_per_stage", "model": the model
 *                                   record, "run": the run record}
 *   DIR/lock                        held (flock) by the run writing DIR
 *
 * TAG is 16 random hex digits drawn for each save, so a save never writes
 * over a file that the current manifest names.  Commit protocol
 * (ckptset_save):
 *   1. every rank writes its part atomically (src/outfile.h: unnamed
 *      temporary, fsync, rename, directory fsync);
 *   2. the ranks agree that every part is durable (job_comm.h);
 *   3. rank 0 replaces the manifest atomically, with the model and run
 *      records inside it: this is the commit point, and the only moment
 *      at which the directory's checkpoint changes;
 *   4. every rank deletes its parts of other tags, and rank 0 what the
 *      older layouts left: DIR/checkpoint.bin, DIR/model.json, DIR/run.json.
 * A process that dies or refuses anywhere before step 3 leaves the old
 * manifest and the parts it names untouched: the previous checkpoint
 * stays loadable, and the new tag's orphans are deleted by the next
 * successful save.  A death in step 4 leaves extra files only.  Nothing
 * in DIR is written before a run's first checkpoint (a refused resume
 * changes nothing), and the lock makes a second writer fail at once
 * instead of interleaving with the first.
 *
 * Reading (ckptset_open) returns the one checkpoint the directory holds,
 * with its records, and checks it whole: a well-formed manifest, its
 * parts present, their count its ranks.  The loaders then check each part
 * against the manifest (its step, its stages, its parameter count) and
 * the records against the run (ckptset_check_model, run_record_check),
 * and refuse a mismatch with one line.  A checkpoint that fails to load
 * is never replaced by an older one, and nothing is deleted because of
 * it.
 *
 * Older directories still load.  Version 1 (zbsched before the manifest
 * carried the records) wrote DIR/checkpoint.bin from one process or a
 * version-1 manifest and parts from several, beside DIR/model.json and
 * DIR/run.json; the records are then read from those two files.  When
 * both checkpoint.bin and a version-1 manifest exist (a crash between a
 * save and its clean-up), the one of the later step is the checkpoint;
 * when one of the two cannot be read, the directory is refused, since
 * either could be the newer.
 *
 * A rank of the same layout (same number of ranks) reads only its own
 * part; anything else (one process, another number) reads every part and
 * assembles them, which works whenever the stage split is the same.
 *
 * Workload: one save every few hundred steps, up to a few dozen ranks.
 */
#ifndef ZB_RUNTIME_CKPT_SET_H
#define ZB_RUNTIME_CKPT_SET_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "runtime/job_comm.h"
#include "runtime/trainer.h"
#include "src/err.h"
#include "src/model.h"

#define CKPTSET_SINGLE "checkpoint.bin"          /* version 1, one process */
#define CKPTSET_MANIFEST "checkpoint.parts.json" /* the manifest, the commit point */
#define CKPTSET_MODEL "model.json"               /* version 1's model record */
#define CKPTSET_RUN "run.json"                   /* version 1's run record */
#define CKPTSET_LOCK "lock"                      /* the writer's lock */
#define CKPTSET_ISLANDS_MANIFEST "islands.json"  /* --replicas: runtime/outer/islands.h */
#define CKPTSET_TAG_LEN 16
#define CKPTSET_VERSION 2

/* One checkpoint of a directory, as found by ckptset_open. */
typedef struct ckptset_view {
    int version;         /* CKPTSET_VERSION, 1 (a version-1 manifest), 0 (checkpoint.bin) */
    long step;           /* optimizer steps it holds (-1: checkpoint.bin, not yet read) */
    int ranks;           /* its parts */
    char tag[CKPTSET_TAG_LEN + 1]; /* the parts' tag ("" for checkpoint.bin) */
    char **parts;        /* [ranks] the parts' paths */
    char *what;          /* the file to name in messages: the manifest or checkpoint.bin */
    char *dir;           /* the directory, as given */
    long parameters;     /* the model's parameter count, -1 when not recorded */
    int stages;          /* virtual stages, -1 when not recorded */
    int *layers;         /* [stages] layers per stage, or NULL when not recorded */
    cJSON *model;        /* the model record ({"model", "chars"}), NULL when there is none */
    cJSON *run;          /* the run record, NULL when there is none */
} ckptset_view;

/* The records a save commits with its parts (borrowed). */
typedef struct ckptset_records {
    const cJSON *model;  /* ckptset_model_record's object */
    const cJSON *run;    /* run_record_to_json's object, or NULL */
} ckptset_records;

/* Fills tag with CKPTSET_TAG_LEN fresh random hex digits and a NUL. */
void ckptset_new_tag(char tag[CKPTSET_TAG_LEN + 1]);

/* DIR/checkpoint.TAG.rank-R.bin into buf[cap].  Returns 0, or -1 with err
 * set when it does not fit. */
int ckptset_part_path(const char *dir, const char *tag, int rank, char *buf, size_t cap,
                      zb_err *err);

/* 1 when name (a file name, no directory) is one DIR's checkpoint owns or
 * may write or delete: the manifest, a part, the lock, the older layouts'
 * checkpoint.bin, model.json and run.json, and the islands' islands.json
 * and islands.*.bin (runtime/outer/islands.h). */
int ckptset_owns_name(const char *name);

/* The model record of m trained on the characters chars[0..vocab): the
 * document `zbsched generate` needs besides the weights.  A new object,
 * or NULL when memory runs out. */
cJSON *ckptset_model_record(const zb_model *m, const unsigned char *chars, int vocab);

/* Reads a model record (where names it in messages): the model into *m,
 * its characters into chars[256] and their count into *vocab.  0, or -1
 * with err set (malformed, chars not distinct bytes, vocab mismatch). */
int ckptset_model_from_record(const cJSON *rec, const char *where, zb_model *m,
                              unsigned char chars[256], int *vocab, zb_err *err);

/* Checks the view's model record against the model a run trains (m, on
 * chars[0..vocab)): the same architecture, memory layers and vocabulary,
 * or -1 with err naming both.  0 as well when the view has no record. */
int ckptset_check_model(const ckptset_view *v, const zb_model *m, const unsigned char *chars,
                        int vocab, zb_err *err);

/* Finds dir's checkpoint (see the header) and fills *v (free with
 * ckptset_view_free).  Returns 1, 0 when dir holds no checkpoint at all
 * (v then empty), or -1 with err set (a malformed manifest, a part it
 * names missing, unreadable records, a version-1 directory whose two
 * checkpoints cannot both be read). */
int ckptset_open(const char *dir, ckptset_view *v, zb_err *err);

/* Frees what ckptset_open allocated (v is zeroed; an empty v is fine). */
void ckptset_view_free(ckptset_view *v);

/* Loads v into t, as rank `rank` of `world` (one process: 0 of 1): its
 * own part when the view has as many ranks, else every part.  Checks the
 * step of every part against the manifest and the split against the
 * recorded one.  *rollbacks_adjust (may be NULL) gets what this rank must
 * add to its rollback counter so that a sum over the ranks counts each
 * stage's once (a part read by every rank holds them all).  0, or -1 with
 * err set, t then unchanged. */
int ckptset_load(trainer *t, const ckptset_view *v, int rank, int world, long *rollbacks_adjust,
                 zb_err *err);

/* Writes t's checkpoint into dir by the commit protocol above, with the
 * records rec.  comm NULL: one process, every stage into rank 0's part.
 * Otherwise collective: this rank's part holds the stages with own[s]
 * set, and err on every rank the first failing rank's message.  0 or -1. */
int ckptset_save(const trainer *t, const char *dir, const ckptset_records *rec,
                 const job_comm *comm, const unsigned char *own, zb_err *err);

/* Deletes rank's part files in dir whose tag is not keep_tag (rank 0:
 * also those of ranks world and above, left by a larger job) and, when
 * legacy is set, DIR/checkpoint.bin, model.json and run.json (files of
 * the older layouts the committed manifest replaces).  Best effort: they
 * are only clutter once the manifest is committed. */
void ckptset_prune(const char *dir, int rank, int world, const char *keep_tag, int legacy);

/* Prepares dir for a run that will write checkpoints there, before any
 * work: creates it when missing (the only change made), checks that the
 * manifest can be written and that none of the files the run may write
 * or delete is something else (a directory, a socket) or one of the
 * run's inputs[0..n_inputs) (entries may be NULL), through any path or
 * link.  0, or -1 with err set. */
int ckptset_prepare(const char *dir, const char *const *inputs, int n_inputs, zb_err *err);

/* Takes the writer's lock of dir (DIR/lock, flock), held until
 * ckptset_unlock or the process ends (the kernel drops it when the
 * process dies, even by SIGKILL).  Returns the descriptor, or -1 with err
 * set: another process holds it ("in use by another run"), or it cannot
 * be created. */
int ckptset_lock(const char *dir, zb_err *err);

/* Releases what ckptset_lock took (-1 is fine). */
void ckptset_unlock(int fd);

/* Checks that path (an input or output of the run, may be NULL) is not a
 * file of dir's checkpoint: one whose name ckptset_owns_name in dir
 * itself, or (when it exists) the same file as one of dir's.  0, or -1
 * with err naming both. */
int ckptset_check_foreign(const char *dir, const char *path, const char *role, zb_err *err);

#endif
