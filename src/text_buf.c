/*
 * text_buf.c: growable text buffer for the renderers and other documents
 * (see text_buf.h).
 *
 * Capacity doubles, so building a multi-megabyte SVG costs a handful of
 * reallocations.  Formatting goes through vsnprintf twice only when the
 * text does not fit the free space, which is rare after the first growth.
 */
#include "src/text_buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int zb_buf_reserve(zb_buf *b, size_t extra)
{
    if (b->oom)
        return -1;
    if (b->len + extra + 1 <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) {
        b->oom = 1;
        return -1;
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

void zb_buf_printf(zb_buf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    va_list ap;
    va_start(ap, fmt);
    size_t room = b->cap > b->len ? b->cap - b->len : 0;
    int n = vsnprintf(room ? b->data + b->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = 1;
        return;
    }
    if ((size_t)n >= room) {
        if (zb_buf_reserve(b, (size_t)n) != 0)
            return;
        va_start(ap, fmt);
        vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
    }
    b->len += (size_t)n;
}

void zb_buf_puts(zb_buf *b, const char *s)
{
    size_t n = strlen(s);
    if (zb_buf_reserve(b, n) != 0)
        return;
    memcpy(b->data + b->len, s, n + 1);
    b->len += n;
}

/* Appends one byte (the NUL stays after it). */
static void buf_putc(zb_buf *b, char c)
{
    if (zb_buf_reserve(b, 1) != 0)
        return;
    b->data[b->len++] = c;
    b->data[b->len] = '\0';
}

void zb_buf_xml(zb_buf *b, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        switch (c) {
        case '&': zb_buf_puts(b, "&amp;"); break;
        case '<': zb_buf_puts(b, "&lt;"); break;
        case '>': zb_buf_puts(b, "&gt;"); break;
        case '"': zb_buf_puts(b, "&quot;"); break;
        case '\'': zb_buf_puts(b, "&apos;"); break;
        default:
            buf_putc(b, (c < 0x20 && c != '\t' && c != '\n') || c == 0x7f ? '?' : (char)c);
        }
    }
}

void zb_buf_json(zb_buf *b, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            buf_putc(b, '\\');
            buf_putc(b, (char)c);
        } else if (c < 0x20) {
            zb_buf_printf(b, "\\u%04x", c);
        } else {
            buf_putc(b, (char)c);
        }
    }
}

void zb_buf_num(zb_buf *b, double v)
{
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%.1f", v);
    zb_buf_puts(b, strcmp(tmp, "-0.0") ? tmp : "0.0");
}

int zb_buf_take(zb_buf *b, char **out, size_t *len, zb_err *err)
{
    if (!b->data)
        zb_buf_reserve(b, 0); /* an empty document is still a document */
    if (b->oom) {
        zb_buf_free(b);
        return zb_fail(err, "out of memory while rendering");
    }
    *out = b->data;
    *len = b->len;
    *b = (zb_buf){ 0 };
    return 0;
}

void zb_buf_free(zb_buf *b)
{
    free(b->data);
    *b = (zb_buf){ 0 };
}
