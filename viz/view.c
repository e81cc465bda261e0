/*
 * view.c: resolving a view (a time window, micro-batches, devices) against
 * a schedule (view.h), and parsing its ranges.
 *
 * The window's numbers are the time axis's: time since the schedule's
 * first op (t0), in its time unit.  On the schedule's own clock the window
 * is [t0 + from, t0 + to].  A micro-batch subset without a window takes
 * the subset's own extent on the shown devices, so that
 * `--micro-batches 0-3` alone zooms onto where those micro-batches run.
 */
#include "viz/view.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/input.h"
#include "src/numfmt.h"
#include "src/sched_io.h"

void viz_view_all(viz_view *v)
{
    memset(v, 0, sizeof *v);
    v->mb_hi = -1;
    v->dev_hi = -1;
}

/* A whole number >= 0 at *p; advances *p.  Returns 0 or -1. */
static int range_number(const char **p, int *out)
{
    if (**p < '0' || **p > '9')
        return -1;
    errno = 0;
    char *end;
    long v = strtol(*p, &end, 10);
    if (errno || v > 1 << 30)
        return -1;
    *out = (int)v;
    *p = end;
    return 0;
}

int viz_view_parse_range(const char *text, int *lo, int *hi, zb_err *err)
{
    const char *p = text;
    char quoted[64 * 4 + 1];
    size_t n = strlen(text);
    zb_escape_bytes(quoted, sizeof quoted, text, n > 64 ? 64 : n);
    if (range_number(&p, lo) != 0)
        return zb_fail(err, "'%s' is not a range a-b of whole numbers (or one number)", quoted);
    *hi = *lo;
    if (*p == '-') {
        p++;
        if (range_number(&p, hi) != 0)
            return zb_fail(err, "'%s' is not a range a-b of whole numbers (or one number)", quoted);
    }
    if (*p)
        return zb_fail(err, "'%s' is not a range a-b of whole numbers (or one number)", quoted);
    if (*hi < *lo)
        return zb_fail(err, "'%s' ends before it starts", quoted);
    return 0;
}

int viz_window_has_op(const viz_window *w, const viz_times *t, int d, int i)
{
    if (d < w->dev_lo || d > w->dev_hi)
        return 0;
    double a = t->r.dev[d].start[i], e = t->r.dev[d].end[i];
    if (a == e) /* an op of no time: inside, edges included */
        return a >= w->w0 && a <= w->w1;
    return e > w->w0 && a < w->w1;
}

int viz_window_selected(const viz_window *w, int mb)
{
    return mb >= w->mb_lo && mb <= w->mb_hi;
}

int viz_window_resolve(const sched_t *s, const viz_times *t, const viz_view *v,
                       double axis_factor, viz_window *w, zb_err *err)
{
    viz_view all;
    if (!v) {
        viz_view_all(&all);
        v = &all;
    }
    memset(w, 0, sizeof *w);
    w->dev_lo = 0;
    w->dev_hi = s->n_devices - 1;
    w->mb_lo = 0;
    w->mb_hi = s->n_micro - 1;
    if (v->dev_hi >= 0) {
        if (v->dev_lo < 0 || v->dev_lo > v->dev_hi || v->dev_hi >= s->n_devices)
            return zb_fail(err, "--devices %d-%d: the schedule has devices 0-%d", v->dev_lo,
                           v->dev_hi, s->n_devices - 1);
        w->dev_lo = v->dev_lo;
        w->dev_hi = v->dev_hi;
    }
    if (v->mb_hi >= 0) {
        if (v->mb_lo < 0 || v->mb_lo > v->mb_hi || v->mb_hi >= s->n_micro)
            return zb_fail(err, "--micro-batches %d-%d: the schedule has micro-batches 0-%d",
                           v->mb_lo, v->mb_hi, s->n_micro - 1);
        w->mb_lo = v->mb_lo;
        w->mb_hi = v->mb_hi;
    }
    w->subset = w->mb_lo > 0 || w->mb_hi < s->n_micro - 1;
    double f = axis_factor > 0 ? axis_factor : 1;
    if (v->has_from && v->has_to && !(v->from < v->to))
        return zb_fail(err, "--from must be before --to (%g, %g)", v->from, v->to);
    if ((v->has_from && !(v->from >= 0)) || (v->has_to && !(v->to > 0)))
        return zb_fail(err, "--from and --to are times from the first op, >= 0");
    w->w0 = t->t0;
    w->w1 = t->t1 > t->t0 ? t->t1 : t->t0 + 1;
    if (w->subset && !v->has_from && !v->has_to) {
        /* The subset's own extent on the shown devices. */
        int any = 0;
        for (int d = w->dev_lo; d <= w->dev_hi; d++)
            for (int i = 0; i < s->dev[d].n_ops; i++) {
                if (!viz_window_selected(w, s->dev[d].ops[i].mb))
                    continue;
                double a = t->r.dev[d].start[i], e = t->r.dev[d].end[i];
                if (!any || a < w->w0)
                    w->w0 = a;
                if (!any || e > w->w1)
                    w->w1 = e;
                any = 1;
            }
        if (w->w1 <= w->w0)
            w->w1 = w->w0 + 1;
    }
    if (v->has_from)
        w->w0 = t->t0 + v->from / f;
    if (v->has_to)
        w->w1 = t->t0 + v->to / f;
    if (!(w->w1 > w->w0)) {
        char a[32], end[32];
        zb_num_format(v->from, 6, a, sizeof a);
        zb_num_format((t->t1 - t->t0) * f, 6, end, sizeof end);
        return zb_fail(err, "--from %s is at or past the end of the picture (the schedule runs "
                       "from 0 to %s %s)", a, end, s->time_unit[0] ? s->time_unit : "units");
    }
    w->narrowed = w->subset || w->dev_lo > 0 || w->dev_hi < s->n_devices - 1 ||
                  v->has_from || v->has_to;
    w->windowed = v->has_from || v->has_to || w->subset;
    w->a0 = (w->w0 - t->t0) * f;
    w->a1 = (w->w1 - t->t0) * f;
    /* The window must hold at least one op of the chosen devices and
     * micro-batches, or the picture would be empty. */
    for (int d = w->dev_lo; d <= w->dev_hi; d++)
        for (int i = 0; i < s->dev[d].n_ops; i++)
            if (viz_window_selected(w, s->dev[d].ops[i].mb) && viz_window_has_op(w, t, d, i))
                return 0;
    char a[32], b[32], end[32];
    zb_num_format((w->w0 - t->t0) * f, 6, a, sizeof a);
    zb_num_format((w->w1 - t->t0) * f, 6, b, sizeof b);
    zb_num_format((t->t1 - t->t0) * f, 6, end, sizeof end);
    const char *u = s->time_unit[0] ? s->time_unit : "units";
    return zb_fail(err, "the window %s-%s %s holds no op of the chosen devices and micro-batches "
                   "(the schedule runs from 0 to %s %s)", a, b, u, end, u);
}

void viz_window_describe(const sched_t *s, const viz_window *w, const char *axis_unit,
                         char *buf, size_t len)
{
    buf[0] = '\0';
    if (!w->narrowed)
        return;
    size_t off = 0;
    if (w->windowed) {
        char a[32], b[32];
        zb_num_format(w->a0, 6, a, sizeof a);
        zb_num_format(w->a1, 6, b, sizeof b);
        off += (size_t)snprintf(buf + off, len - off, "window %s\xe2\x80\x93%s %s", a, b,
                                axis_unit[0] ? axis_unit : "units");
    }
    if (w->subset && off < len)
        off += (size_t)snprintf(buf + off, len - off, "%smicro-batches %d\xe2\x80\x93%d in colour",
                                off ? " \xc2\xb7 " : "", w->mb_lo, w->mb_hi);
    if ((w->dev_lo > 0 || w->dev_hi < s->n_devices - 1) && off < len)
        snprintf(buf + off, len - off, "%sdevices %d\xe2\x80\x93%d of %d", off ? " \xc2\xb7 " : "",
                 w->dev_lo, w->dev_hi, s->n_devices);
}
