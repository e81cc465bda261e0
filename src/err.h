/*
 * err.h: how zbsched reports recoverable failures.
 *
 * Every function below the CLI that can fail on bad input returns an int
 * (0 on success, -1 on failure) and, on failure, writes one human-readable
 * line into a caller-owned zb_err.  Nothing below the CLI prints or exits:
 * the CLI decides what to do with the message (print it on stderr with the
 * program name, exit non-zero).  Programming errors (broken invariants) are
 * asserts, not zb_err.
 */
#ifndef ZB_ERR_H
#define ZB_ERR_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zb_err {
    char msg[512]; /* one line, no trailing newline; empty when no error */
} zb_err;

/* Formats fmt into err->msg (when err is not NULL) and returns -1, so that
 * callers can write `return zb_fail(err, "...", ...);`. */
int zb_fail(zb_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prefixes err->msg with a formatted context ("file.json: ") and returns -1.
 * Used when a lower layer's message needs the caller's context. */
int zb_wrap(zb_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif

#endif
