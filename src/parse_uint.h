/*
 * parse_uint.h: the hand-written unsigned decimal parser shared by the two
 * schedule loaders (sched_io.c's op tokens, torch_csv.c's cells).  Both
 * parse ~200,000 small numbers when loading a large schedule, so this is a
 * static inline function, not a call into another translation unit; with
 * end == NULL (a NUL-terminated token) the bound check folds away.
 */
#ifndef ZB_PARSE_UINT_H
#define ZB_PARSE_UINT_H

#include <stddef.h>

/* Parses an unsigned decimal of at most 9 digits at *p, stopping at the
 * first non-digit or at end (NULL: no bound; the string's NUL stops it).
 * On success stores the value in *out, advances *p past the digits and
 * returns 0; returns -1, leaving *p and *out untouched, when there is no
 * digit or more than 9. */
static inline int zb_parse_uint(const char **p, const char *end, int *out)
{
    const char *q = *p;
    int v = 0, n = 0;
    while ((end == NULL || q < end) && *q >= '0' && *q <= '9') {
        if (++n > 9)
            return -1;
        v = v * 10 + (*q - '0');
        q++;
    }
    if (n == 0)
        return -1;
    *p = q;
    *out = v;
    return 0;
}

#endif
