/*
 * job_log.c: the metrics log's lines (job_log.h).
 *
 * A line is composed in a local buffer and handed to stdio in one fwrite,
 * then flushed: a reader following the file never sees half a line from
 * a live run.  Numbers use the shortest of %.15g, %.16g and %.17g that
 * reads back to the same double (what Python's repr prints in most
 * cases), so the log is exact without 17-digit noise.
 */
#include "runtime/job_log.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* The line being composed. */
typedef struct line {
    char text[1024]; /* NUL-terminated; far more than the longest line */
    size_t len;      /* bytes used */
} line;

static void put(line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(line *l, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(l->text + l->len, sizeof l->text - l->len, fmt, ap);
    va_end(ap);
    /* the longest line is a few hundred bytes */
    assert(n >= 0 && (size_t)n < sizeof l->text - l->len);
    l->len += (size_t)n;
}

/* ,"key":v with v the shortest round-tripping decimal, or null when v is
 * not finite. */
static void put_number(line *l, const char *key, double v)
{
    if (!isfinite(v)) {
        put(l, ",\"%s\":null", key);
        return;
    }
    char num[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(num, sizeof num, "%.*g", prec, v);
        if (strtod(num, NULL) == v)
            break;
    }
    put(l, ",\"%s\":%s", key, num);
}

/* Writes l and a newline, and flushes. */
static int put_line(FILE *f, line *l, zb_err *err)
{
    put(l, "}\n");
    errno = 0;
    if (fwrite(l->text, 1, l->len, f) != l->len || fflush(f) != 0)
        return zb_fail(err, "cannot write the --log file: %s",
                       strerror(errno ? errno : EIO));
    return 0;
}

int job_log_step(FILE *f, long step, const job_step *in, const job_counters *c, zb_err *err)
{
    line l = { .len = 0 };
    put(&l, "{\"step\":%ld", step);
    put_number(&l, "loss", in->loss);
    put_number(&l, "lr", in->lr);
    put_number(&l, "grad_norm", in->grad_norm);
    put_number(&l, "tokens_per_s", in->seconds > 0 ? (double)in->tokens / in->seconds : NAN);
    put(&l, ",\"tokens\":%ld", in->tokens);
    put_number(&l, "seconds", in->seconds);
    put(&l, ",\"skipped\":%s", in->skipped ? "true" : "false");
    if (in->member_id)
        put(&l, ",\"replicas\":%d", in->members);
    if (in->outer_step > 0)
        put(&l, ",\"outer_step\":%ld", in->outer_step);
    if (c && c->rollbacks >= 0)
        put(&l, ",\"rollbacks\":%ld", c->rollbacks);
    else
        put(&l, ",\"rollbacks\":null");
    if (c && isfinite(c->static_bytes)) {
        put(&l, ",\"memory\":{\"static_bytes\":%.0f", c->static_bytes);
        put_number(&l, "peak_activation_bytes", c->peak_activation_bytes);
        put(&l, "}");
    } else {
        put(&l, ",\"memory\":null");
    }
    return put_line(f, &l, err);
}

int job_log_eval(FILE *f, long step, double eval_loss, int synchronized, zb_err *err)
{
    line l = { .len = 0 };
    put(&l, "{\"step\":%ld", step);
    put_number(&l, "eval_loss", eval_loss);
    if (synchronized)
        put(&l, ",\"synchronized\":true");
    return put_line(f, &l, err);
}
