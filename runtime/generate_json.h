/*
 * generate_json.h: a generation as one JSON object (`zbsched generate
 * --json`), exact for any bytes a character model emits.
 */
#ifndef ZB_RUNTIME_GENERATE_JSON_H
#define ZB_RUNTIME_GENERATE_JSON_H

#include <stddef.h>

#include "runtime/generate.h"

/* The bytes of a generation collected in memory (zero-initialise it;
 * the caller frees data). */
typedef struct gen_text {
    char *data; /* NUL-terminated */
    size_t len; /* bytes before the NUL */
    size_t cap; /* allocated */
    int oom;    /* 1 when an append failed */
} gen_text;

/* A gen_emit_fn that appends the bytes to the gen_text ctx; running out of
 * memory sets its oom flag, and later bytes are dropped. */
void gen_emit_text(void *ctx, const char *bytes, size_t n);

/* The --json document of a generation: "text" (the bytes of buf as a JSON
 * string, exact where they are valid UTF-8, U+FFFD for each maximal
 * invalid subpart), "text_base64" (the exact bytes), "utf8" (whether
 * "text" is exact), "bytes", "prompt_bytes", "tokens", "cropped_tokens",
 * "context" (seq_len), "tokens_per_s", "seconds", "cache", "seed",
 * "temperature".  Returns a malloc'd NUL-terminated text without a
 * newline (caller frees), or NULL when memory runs out. */
char *gen_result_json(const gen_text *buf, size_t prompt_bytes, const gen_result *res,
                      const gen_opts *o, int seq_len);

#endif
