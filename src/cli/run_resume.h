/*
 * run_resume.h: what a checkpoint directory remembers about the run that
 * wrote it, so that `run --resume` can tell a continuation from a
 * different run.
 *
 * The binary checkpoint (runtime/checkpoint.h) already refuses another
 * model shape or stage split.  What it cannot see are the settings that
 * change the run without changing a tensor's shape: rope_theta (the same
 * weights computing another function), the batch size and the number of
 * micro-batches (another optimisation problem), the seed, and the text.
 * They are written next to the checkpoint, in DIR/run.json, each time the
 * checkpoint is; a resume compares them with its own flags:
 *   - rope_theta, batch size, micro-batches or the text differ: refused,
 *     naming the setting, both values, and how to start afresh;
 *   - only the seed differs: harmless (the parameters and the data
 *     generator's state come from the checkpoint, so the seed is not used
 *     again), and said in one note.
 * A directory without run.json (written by an older zbsched) is resumed
 * without these checks.
 */
#ifndef ZB_CLI_RUN_RESUME_H
#define ZB_CLI_RUN_RESUME_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/data.h"
#include "src/err.h"

#define RUN_IDENTITY_NAME "run.json"

/* The settings a resume must agree on. */
typedef struct run_identity {
    double rope_theta;    /* the model's RoPE base */
    long batch_size;      /* sequences per micro-batch */
    long micro_batches;   /* the schedule's m */
    long seed;            /* --seed */
    uint64_t data_hash;   /* FNV-1a of the text's bytes */
    uint64_t data_bytes;  /* length of the text */
} run_identity;

/* Hashes the text behind loader d (its bytes, rebuilt from token ids). */
uint64_t run_data_hash(const zb_data *d);

/* Writes id to DIR/run.json atomically.  Returns 0 or -1 with err set. */
int run_identity_save(const char *dir, const run_identity *id, zb_err *err);

/* Compares `now` with DIR/run.json.  Returns 0 when they agree or the
 * file does not exist, 1 with a note in note[cap] when only the seed
 * differs, -1 with err set on a mismatch or an unreadable file. */
int run_identity_check(const char *dir, const run_identity *now, char *note, size_t cap, zb_err *err);

#endif
