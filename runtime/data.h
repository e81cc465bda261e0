/*
 * data.h: the character-level text loader that feeds training.
 *
 * The vocabulary is the sorted set of distinct bytes of the text (65 for
 * tinyshakespeare, as nanoGPT's shakespeare_char prepare.py gets), each
 * byte mapped to its rank.  The token stream is split 90/10: the first 90%
 * trains, the last 10% validates, so no validation character is ever seen
 * in training.  Training windows start at positions drawn from a caller's
 * seeded generator (rng.h); validation uses a fixed, evenly spaced set of
 * windows so that every evaluation of every run scores the same text.
 *
 * A window of context T is T+1 consecutive tokens: inputs x = tokens[i..i+T)
 * and targets y = tokens[i+1..i+T+1).  Both halves must hold at least one
 * window, so a text shorter than about 10*(T+1) characters is refused.
 *
 * Expected workload: one load of about a megabyte, then a few thousand
 * batches of a few dozen windows each; a batch is a memcpy per window.
 */
#ifndef ZB_RUNTIME_DATA_H
#define ZB_RUNTIME_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "src/err.h"
#include "runtime/rng.h"

typedef struct zb_data {
    int vocab;                /* distinct bytes in the text (1..256) */
    unsigned char chars[256]; /* [vocab] the byte of each token id, ascending */
    int16_t id_of[256];       /* token id of each byte, -1 when absent */
    int32_t *tokens;          /* [n_tokens] the whole text as token ids */
    size_t n_tokens;          /* length of the text */
    size_t n_train;           /* tokens [0, n_train) train, [n_train, n_tokens) validate */
    int ctx;                  /* context length T the windows are cut for */
} zb_data;

/* Builds the loader from len bytes of text for windows of context ctx.
 * Returns 0 and stores a new loader in *out (caller frees with data_free),
 * or -1 with err set when the text is empty, too short for one window in
 * each split, or memory runs out. */
int data_from_text(const char *text, size_t len, int ctx, zb_data **out, zb_err *err);

/* Reads path and builds the loader as data_from_text does; errors name
 * the path. */
int data_load_file(const char *path, int ctx, zb_data **out, zb_err *err);

/* Frees d; NULL is fine. */
void data_free(zb_data *d);

/* Number of distinct window start positions in the training split. */
size_t data_train_windows(const zb_data *d);

/* Fills x and y (each [batch * ctx], row-major by sequence) with batch
 * training windows whose starts are drawn from r. */
void data_train_batch(const zb_data *d, zb_rng *r, int batch, int32_t *x, int32_t *y);

/* Fills x and y with the validation windows number first .. first+batch-1
 * of a fixed sequence of n_total windows spread evenly over the split
 * (window k starts at k * (span / n_total)).  The same arguments always
 * give the same text. */
void data_val_batch(const zb_data *d, int first, int batch, int n_total, int32_t *x, int32_t *y);

#endif
