/*
 * text_buf.h: the growable text buffer documents are written into: every
 * viz renderer, and the EPLB placement's JSON (solver/eplb_json.c).  It
 * lives in src/ so that both libraries above can use it.
 *
 * Renderers produce a whole document in memory (an SVG of a few megabytes at
 * most for p=64, m=1024) and hand it to zb_write_atomic in one piece, so a
 * failed render never leaves a half-written file.  Appends never fail
 * visibly: running out of memory sets a sticky flag that the renderer checks
 * once at the end (zb_buf_take), which keeps drawing code free of error
 * plumbing.  Numbers are formatted with fixed precision so that the same
 * schedule always gives the same bytes.
 */
#ifndef ZB_TEXT_BUF_H
#define ZB_TEXT_BUF_H

#include <stddef.h>

#include "src/err.h"

typedef struct zb_buf {
    char *data;  /* NUL-terminated text so far, or NULL before the first append */
    size_t len;  /* bytes used, excluding the NUL */
    size_t cap;  /* bytes allocated */
    int oom;     /* set once an allocation failed; later appends are ignored */
} zb_buf;

/* Appends formatted text (printf rules, C locale expected). */
void zb_buf_printf(zb_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Makes room for `extra` more bytes and the NUL, for a writer that fills
 * data + len itself (and then advances len and writes the NUL); 0, or -1
 * with the sticky oom flag set. */
int zb_buf_reserve(zb_buf *b, size_t extra);

/* Appends a string as is. */
void zb_buf_puts(zb_buf *b, const char *s);

/* Appends s with the five XML special characters escaped, so that any
 * schedule name or label is safe inside SVG text and attribute values.
 * Control characters other than tab/newline are replaced by '?', since XML
 * 1.0 cannot carry them at all. */
void zb_buf_xml(zb_buf *b, const char *s);

/* Appends s as the body of a JSON string (quotes not included). */
void zb_buf_json(zb_buf *b, const char *s);

/* Appends a number with one decimal, the precision of SVG coordinates;
 * "-0.0" is printed as "0.0" so that output does not depend on rounding
 * direction. */
void zb_buf_num(zb_buf *b, double v);

/* On success moves the text to *out (caller frees) with its length in *len
 * and returns 0; when an append ran out of memory frees the buffer and
 * returns -1 with err set.  Either way b is empty afterwards. */
int zb_buf_take(zb_buf *b, char **out, size_t *len, zb_err *err);

/* Frees the buffer's text (for error paths). */
void zb_buf_free(zb_buf *b);

#endif
