/*
 * viz.h: pictures of schedules, the public face of zb_viz.
 *
 * Three renderers, each producing one complete document in memory:
 *   - an SVG timeline (one lane per device, time on x, ops as boxes coloured
 *     by kind and chunk, a title with cost / bubble rate / peak memory, a
 *     legend, and per-device activation memory curves below), optionally
 *     comparing a predicted and a measured run on one time scale;
 *   - a Chrome trace-event JSON file (Perfetto, chrome://tracing);
 *   - the op dependency graph laid out by Graphviz dot, with the critical
 *     path highlighted.
 * Times are the measured ones when the schedule carries them (runtime
 * --trace) and simulated otherwise (times.h).  Every renderer validates the
 * schedule first, so any schedule that loads can be handed in.
 *
 * Output is deterministic: the same schedule gives the same bytes (fixed
 * number formats, no timestamps), and SVG is standalone (generic
 * sans-serif font, no scripts or external references) and valid XML.
 *
 * Workload: SVG and trace are linear in the number of ops and stay usable
 * (a few MB) at p=64, m=1024; the graph is refused above VIZ_DAG_MAX_OPS
 * because dot's layout is superlinear and a bigger drawing is unreadable,
 * but a view (a time window, micro-batches, devices) draws any part of a
 * plan of any size.
 */
#ifndef ZB_VIZ_H
#define ZB_VIZ_H

#include <stddef.h>

#include "src/sched.h"

/* What part of a schedule to draw (viz/view.h; `render --from --to
 * --micro-batches --devices`).  viz_view_all gives the whole schedule. */
typedef struct viz_view {
    int has_from, has_to; /* whether from / to were given */
    double from, to;      /* time window from the first op, in the schedule's time unit */
    int mb_lo, mb_hi;     /* micro-batches in colour, inclusive; mb_hi < 0: all */
    int dev_lo, dev_hi;   /* devices drawn, inclusive; dev_hi < 0: all */
} viz_view;

/* Sets v to the whole schedule. */
void viz_view_all(viz_view *v);

/* Parses a range "a-b" or "a" of whole numbers >= 0 with a <= b into
 * *lo, *hi.  Returns 0, or -1 with err quoting the text. */
int viz_view_parse_range(const char *text, int *lo, int *hi, zb_err *err);

/* Renders the SVG timeline of s into a malloc'd NUL-terminated string
 * (*svg, caller frees) of *len bytes.  Returns 0 or -1 with err set (an
 * invalid schedule, bad measured times, out of memory). */
int viz_svg_timeline(const sched_t *s, char **svg, size_t *len, zb_err *err);

/* The same for the part of s that view v selects (NULL: all of it): a
 * time window with the boxes clipped at its edges and the axis in its own
 * range, the chosen devices' lanes and memory panels, and ops of other
 * micro-batches in grey.  Errors as viz_window_resolve's (view.h). */
int viz_svg_timeline_view(const sched_t *s, const viz_view *v, char **svg, size_t *len,
                          zb_err *err);

/* Renders two timelines one above the other on the same time scale, each
 * starting at its own first op: `top` (usually the prediction) above
 * `bottom` (usually the measured run).  Each block is headed by its label
 * (e.g. "predicted", "measured"; NULL gives "top"/"bottom") and its own
 * cost, bubble rate and peak memory.  Ownership and errors as above. */
int viz_svg_compare(const sched_t *top, const char *top_label,
                    const sched_t *bottom, const char *bottom_label,
                    char **svg, size_t *len, zb_err *err);

/* The comparison through view v (NULL: all), applied to each timeline
 * from its own first op. */
int viz_svg_compare_view(const sched_t *top, const char *top_label,
                         const sched_t *bottom, const char *bottom_label, const viz_view *v,
                         char **svg, size_t *len, zb_err *err);

/* Renders s as Chrome trace-event JSON: one process per device (with
 * process_name / process_sort_index metadata), one complete "X" event per
 * op (name like "F3", cat = kind, args: mb, stage, chunk, kind), and an
 * activation-memory counter per device.  Times are in microseconds:
 * converted from "s" / "ms" / "us", and 1 abstract "units" = 1 us.
 * Ownership and errors as above. */
int viz_trace_json(const sched_t *s, char **json, size_t *len, zb_err *err);

/* The trace of the ops view v selects (NULL: all): the shown devices, the
 * chosen micro-batches (others left out) and the ops overlapping the
 * window, at their own times. */
int viz_trace_json_view(const sched_t *s, const viz_view *v, char **json, size_t *len,
                        zb_err *err);

/* Largest graph (in ops) that viz_dag_svg draws: the whole schedule's, or
 * a view's. */
#define VIZ_DAG_MAX_OPS 2000

/* Renders the op dependency graph of s as SVG with Graphviz (cgraph +
 * gvc, "dot" layout, in process): one node per op coloured like the
 * timeline, grouped per device, data dependencies as solid edges, device
 * order as dashed grey edges, and the critical path (the chain of ops, each
 * started exactly when its latest predecessor finished, that ends last) in
 * red.  Graphviz's own warnings are silenced.  Returns -1 with err set for
 * graphs over VIZ_DAG_MAX_OPS ops and for layout failures; ownership as
 * above. */
int viz_dag_svg(const sched_t *s, char **svg, size_t *len, zb_err *err);

/* The graph of the ops view v selects (NULL: all): the ops of the shown
 * devices and micro-batches that overlap the window, with the edges among
 * them, and the whole schedule's critical path marked where it passes.
 * So a plan of any size can be drawn a window at a time; the limit applies
 * to the ops selected, and the message says how to narrow them. */
int viz_dag_svg_view(const sched_t *s, const viz_view *v, char **svg, size_t *len, zb_err *err);

/* Renders the SVG timeline of s and writes it to path atomically
 * (zb_write_atomic; "-" is stdout).  For callers such as `zbsched search
 * --svg`.  Returns 0 or -1 with err set; no partial file is left. */
int viz_render_svg_file(const sched_t *s, const char *path, zb_err *err);

#endif
