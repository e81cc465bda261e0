/*
 * input.h: how much of a user's input zbsched will read, and checks that
 * every JSON reader shares.
 *
 * Every input file (schedules, traces, PyTorch CSV, model, GPU and profile
 * files, the training text) is read whole into memory, so an input without
 * end (/dev/zero, a FIFO fed forever) or simply too large would grow the
 * process until the machine swaps.  Reads therefore stop at a cap, by
 * default ZB_INPUT_MAX_DEFAULT (256 MB: a p=64, m=1024 schedule is about
 * 2 MB, tinyshakespeare 1.1 MB).  The CLI may raise or lower it for the
 * whole process: the environment variable ZBSCHED_MAX_INPUT=SIZE for every
 * command, `run --max-input SIZE` for a large training text.
 */
#ifndef ZB_INPUT_H
#define ZB_INPUT_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "src/err.h"

#define ZB_INPUT_MAX_DEFAULT ((uint64_t)256000000)

/* The process-wide cap in bytes (ZB_INPUT_MAX_DEFAULT until set). */
uint64_t zb_input_max(void);

/* Sets the cap (bytes > 0).  Called by the CLI only, before any read. */
void zb_input_set_max(uint64_t bytes);

/* Reads a whole file ("-" is stdin) into a malloc'd NUL-terminated buffer
 * and stores its length in *len, refusing anything longer than `max`
 * bytes without reading much past them: "'PATH' is larger than the input
 * limit of 256.0 MB (ZBSCHED_MAX_INPUT=SIZE or run --max-input SIZE raises
 * it)".  A regular file
 * is measured first (fstat) so that a too-large one fails at once.
 * Returns 0 or -1 with err set. */
int zb_read_capped(const char *path, uint64_t max, char **data, size_t *len, zb_err *err);

/* Refuses a JSON text whose strings hold a NUL character, raw or written
 * as \u0000: cJSON keeps strings NUL-terminated, so everything after it
 * would silently vanish ("name": "a\u0000b" would read as "a").  Returns 0
 * or -1 with err giving the line and column. */
int zb_json_check_strings(const char *text, size_t len, zb_err *err);

/* Refuses a JSON object, at any depth under `item`, that has a key twice
 * (cJSON keeps both and lookups silently take the first).  Returns 0 or
 * -1 with err naming the key and the path to it ("costs.F"). */
int zb_json_check_duplicates(const cJSON *item, zb_err *err);

/* Copies at most `n` bytes of src into dst[cap] with every byte that is not
 * printable ASCII written as \xHH, so that an error message quoting a
 * binary file prints no raw control bytes or broken UTF-8.  Always
 * NUL-terminates; returns dst. */
char *zb_escape_bytes(char *dst, size_t cap, const char *src, size_t n);

#endif
