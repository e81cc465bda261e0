/*
 * buf.h: the growable text buffer every viz renderer writes into.
 *
 * Renderers produce a whole document in memory (an SVG of a few megabytes at
 * most for p=64, m=1024) and hand it to zb_write_atomic in one piece, so a
 * failed render never leaves a half-written file.  Appends never fail
 * visibly: running out of memory sets a sticky flag that the renderer checks
 * once at the end (viz_buf_take), which keeps drawing code free of error
 * plumbing.  Numbers are formatted with fixed precision so that the same
 * schedule always gives the same bytes.
 */
#ifndef ZB_VIZ_BUF_H
#define ZB_VIZ_BUF_H

#include <stddef.h>

#include "src/err.h"

typedef struct viz_buf {
    char *data;  /* NUL-terminated text so far, or NULL before the first append */
    size_t len;  /* bytes used, excluding the NUL */
    size_t cap;  /* bytes allocated */
    int oom;     /* set once an allocation failed; later appends are ignored */
} viz_buf;

/* Appends formatted text (printf rules, C locale expected). */
void viz_buf_printf(viz_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Appends a string as is. */
void viz_buf_puts(viz_buf *b, const char *s);

/* Appends s with the five XML special characters escaped, so that any
 * schedule name or label is safe inside SVG text and attribute values.
 * Control characters other than tab/newline are replaced by '?', since XML
 * 1.0 cannot carry them at all. */
void viz_buf_xml(viz_buf *b, const char *s);

/* Appends s as the body of a JSON string (quotes not included). */
void viz_buf_json(viz_buf *b, const char *s);

/* Appends a number with one decimal, the precision of SVG coordinates;
 * "-0.0" is printed as "0.0" so that output does not depend on rounding
 * direction. */
void viz_buf_num(viz_buf *b, double v);

/* On success moves the text to *out (caller frees) with its length in *len
 * and returns 0; when an append ran out of memory frees the buffer and
 * returns -1 with err set.  Either way b is empty afterwards. */
int viz_buf_take(viz_buf *b, char **out, size_t *len, zb_err *err);

/* Frees the buffer's text (for error paths). */
void viz_buf_free(viz_buf *b);

#endif
