/*
 * run_record.h: what a checkpoint remembers about the run that wrote it,
 * so that `run --resume` can tell a continuation from a different run.
 *
 * The binary checkpoint (runtime/checkpoint.h) already refuses another
 * model shape or stage split.  What it cannot see are the settings that
 * change the run without changing a tensor's shape: rope_theta (the same
 * weights computing another function), the batch size and the number of
 * micro-batches (another optimisation problem), the seed, and the text.
 * They are recorded with every checkpoint, in its manifest
 * (runtime/ckpt_set.h; DIR/run.json in directories written before that),
 * and a resume compares them with its own flags:
 *   - rope_theta, batch size, micro-batches or the text differ: refused,
 *     naming the setting, both values, and how to start afresh;
 *   - only the seed differs: harmless (the parameters and the data
 *     generator's state come from the checkpoint, so the seed is not used
 *     again), and said in one note.
 * A checkpoint without a run record (written by an older zbsched) is
 * resumed without these checks.
 *
 * The record is a small JSON object; numbers that must compare exactly
 * (the 64-bit hash, lengths, the seed) are strings of digits, because
 * JSON numbers are doubles.
 */
#ifndef ZB_RUNTIME_RUN_RECORD_H
#define ZB_RUNTIME_RUN_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "runtime/data.h"
#include "src/err.h"

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

/* The record of id as a new JSON object (NULL when memory runs out). */
cJSON *run_record_to_json(const run_identity *id);

/* Compares `now` with a record (what run_record_to_json made, read back
 * from `where`, which names it in messages).  Returns 0 when they agree,
 * 1 with a note in note[cap] when only the seed differs, -1 with err set
 * on a mismatch or a malformed record. */
int run_record_check(const cJSON *rec, const char *where, const run_identity *now, char *note,
                     size_t cap, zb_err *err);

#endif
