/*
 * view.h: which part of a schedule a picture shows, shared by the SVG
 * timeline, the trace and the dependency graph.
 *
 * A default plan from `search` has thousands of ops (p=8, m=64, 4 chunks:
 * 5,120), too many for one picture to label.  A view narrows it three ways
 * (`render --from T --to T --micro-batches a-b --devices a-b`):
 *   - a time window [from, to], in the schedule's time unit from its first
 *     op (the numbers on the picture's time axis: ms for plans);
 *   - a micro-batch subset: those ops in colour with their numbers, the
 *     others in grey (the timeline) or left out (trace, graph); without a
 *     window the window becomes the subset's own extent;
 *   - a device range: only those lanes (and memory panels).
 * An op is in a window when it overlaps it; the timeline clips its box at
 * the window's edges.  Workload: one pass over the ops.
 */
#ifndef ZB_VIZ_VIEW_H
#define ZB_VIZ_VIEW_H

#include "src/sched.h"
#include "viz/times.h"
#include "viz/viz.h"

/* A view resolved against one schedule and its times. */
typedef struct viz_window {
    int dev_lo, dev_hi; /* devices shown, inclusive */
    int mb_lo, mb_hi;   /* micro-batches in colour, inclusive */
    int subset;         /* 1 when that is not every micro-batch */
    int narrowed;       /* 1 when anything is narrowed (window, subset or devices) */
    int windowed;       /* 1 when the time window is not the whole schedule's */
    double w0, w1;      /* the window, on the schedule's own clock */
    double a0, a1;      /* the same on the time axis: (w - first op) * axis factor */
} viz_window;

/* Resolves v (NULL: everything) for s with times t.  axis_factor converts
 * the schedule's time unit into the unit v's from/to are given in (1
 * unless a comparison shows another unit).  Returns 0, or -1 with err
 * naming the flag: a range outside the schedule, from >= to, or a window
 * with no op of the chosen devices and micro-batches in it. */
int viz_window_resolve(const sched_t *s, const viz_times *t, const viz_view *v,
                       double axis_factor, viz_window *w, zb_err *err);

/* Whether op i of device d overlaps the window on a shown device (any
 * micro-batch). */
int viz_window_has_op(const viz_window *w, const viz_times *t, int d, int i);

/* Whether micro-batch mb is in colour. */
int viz_window_selected(const viz_window *w, int mb);

/* One line describing the view ("window 2000–3000 ms · micro-batches 0–7
 * in colour · devices 0–3 of 8", UTF-8), or "" when nothing is narrowed. */
void viz_window_describe(const sched_t *s, const viz_window *w, const char *axis_unit,
                         char *buf, size_t len);

#endif
