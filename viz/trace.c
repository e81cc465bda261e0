/*
 * trace.c: Chrome trace-event JSON of a schedule (viz_trace_json), for
 * Perfetto (ui.perfetto.dev) and chrome://tracing.
 *
 * Layout of the document (the "JSON Object Format" of the Trace Event
 * Format spec): {"traceEvents": [...], "displayTimeUnit": "ms",
 * "otherData": {...}}.  Each device is a process (pid = device) with
 * process_name and process_sort_index metadata so viewers list devices in
 * order; its ops are complete events ("ph":"X") on thread 0, named like
 * "F3" with the kind as category and micro-batch, stage, chunk and kind in
 * args; activation memory is a counter track ("ph":"C") per device.
 *
 * The text is written directly rather than through cJSON: a p=64, m=1024
 * schedule has 200k events and a fixed "%.3f" keeps output byte-stable.
 * Through a view (view.h) only the shown devices' processes, the chosen
 * micro-batches' ops and barriers and what overlaps the window are
 * written, at their own times (from the schedule's first op).
 */
#include "viz/viz.h"

#include <stdlib.h>
#include <string.h>

#include "src/text_buf.h"
#include "viz/times.h"
#include "viz/view.h"

/* Microseconds per unit of the schedule's time_unit; abstract units and
 * anything unknown map to 1 us so that numbers read the same in the viewer. */
static double us_per_unit(const char *unit)
{
    if (!strcmp(unit, "s"))
        return 1e6;
    if (!strcmp(unit, "ms"))
        return 1e3;
    if (!strcmp(unit, "ns"))
        return 1e-3;
    return 1;
}

/* Emits one device's memory curve as counter events; returns 0 or -1. */
static int trace_memory(zb_buf *b, const sched_t *s, const viz_times *t, const viz_window *w,
                        int d, double k, zb_err *err)
{
    sim_mem_point *pts = NULL;
    int n = 0;
    if (viz_mem_curve(s, t, d, &pts, &n, err) != 0)
        return -1;
    for (int i = 0; i < n; i++) {
        /* Several changes at one instant: only the last one is visible. */
        if (i + 1 < n && pts[i + 1].t == pts[i].t)
            continue;
        /* Inside the window, and the level it starts at. */
        if (pts[i].t > w->w1 || (i + 1 < n && pts[i + 1].t <= w->w0))
            continue;
        zb_buf_printf(b, ",\n{\"name\":\"activation memory\",\"ph\":\"C\",\"pid\":%d,\"ts\":%.3f,"
                       "\"args\":{\"", d, (pts[i].t - t->t0) * k);
        zb_buf_json(b, s->mem_unit);
        zb_buf_printf(b, "\":%.9g}}", pts[i].mem);
    }
    free(pts);
    return 0;
}

/* Vocabulary parallelism: the all-reduce barriers of device d on a thread
 * of their own ("all-reduce", tid 1), as the side stream runs them: C0(j)
 * and C1(j) each as a slice that ends when the simulator says it ends. */
static void trace_barriers(zb_buf *b, const sched_t *s, const viz_times *t, const viz_window *w,
                           int d, double k)
{
    if (!t->r.barrier[0])
        return;
    zb_buf_printf(b, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":1,"
                   "\"args\":{\"name\":\"all-reduce\"}}", d);
    for (int c = 0; c < 2; c++) {
        if (c == 1 && s->vocab.variant != SCHED_VOCAB_2)
            break;
        double dur = c == 0 ? s->vocab.t_c0 : s->vocab.t_c1;
        for (int j = 0; j < t->r.n_micro; j++) {
            double e = t->r.barrier[c][j];
            if (!viz_window_selected(w, j) || e < w->w0 || e - dur > w->w1)
                continue;
            zb_buf_printf(b, ",\n{\"name\":\"C%d %d\",\"cat\":\"barrier\",\"ph\":\"X\",\"pid\":%d,"
                           "\"tid\":1,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"mb\":%d,\"barrier\":\"C%d\"}}",
                           c, j, d, (e - dur - t->t0) * k, dur * k, j, c);
        }
    }
}

int viz_trace_json(const sched_t *s, char **json, size_t *len, zb_err *err)
{
    return viz_trace_json_view(s, NULL, json, len, err);
}

int viz_trace_json_view(const sched_t *s, const viz_view *view, char **json, size_t *len,
                        zb_err *err)
{
    viz_times t;
    viz_window w;
    if (viz_times_compute(s, &t, err) != 0)
        return -1;
    if (viz_window_resolve(s, &t, view, 1, &w, err) != 0) {
        viz_times_free(&t);
        return -1;
    }
    double k = us_per_unit(s->time_unit);
    zb_buf b = { 0 };
    zb_buf_puts(&b, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"schedule\":\"");
    zb_buf_json(&b, s->name[0] ? s->name : "schedule");
    zb_buf_printf(&b, "\",\"source\":\"%s\",\"devices\":%d,\"microbatches\":%d,\"stages\":%d,"
                   "\"time_unit\":\"", t.measured ? "measured" : "simulated",
                   s->n_devices, s->n_micro, s->n_stages);
    zb_buf_json(&b, s->time_unit);
    zb_buf_printf(&b, "\",\"us_per_time_unit\":%.9g,\"cost\":%.9g,\"bubble_rate\":%.6f,"
                   "\"peak_memory\":%.9g},\n\"traceEvents\":[\n",
                   k, t.r.cost, t.r.bubble_rate, t.r.peak_mem);
    for (int d = w.dev_lo; d <= w.dev_hi; d++) {
        zb_buf_printf(&b, "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                       "\"args\":{\"name\":\"device %d\"}},\n"
                       "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                       "\"args\":{\"sort_index\":%d}},\n"
                       "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                       "\"args\":{\"name\":\"compute\"}}",
                       d > w.dev_lo ? ",\n" : "", d, d, d, d, d);
        const sched_lane *l = &s->dev[d];
        for (int i = 0; i < l->n_ops; i++) {
            sched_op op = l->ops[i];
            if (!viz_window_has_op(&w, &t, d, i) || !viz_window_selected(&w, op.mb))
                continue;
            const char *kn = op_kind_name((op_kind)op.kind);
            double a = t.r.dev[d].start[i], e = t.r.dev[d].end[i];
            if (OP_IS_VOCAB(op.kind)) { /* a shard, not a stage or chunk */
                zb_buf_printf(&b, ",\n{\"name\":\"%s%d\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":0,"
                               "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"mb\":%d,\"shard\":%d,"
                               "\"kind\":\"%s\"}}",
                               kn, op.mb, kn, d, (a - t.t0) * k, (e - a) * k, op.mb, op.stage, kn);
                continue;
            }
            zb_buf_printf(&b, ",\n{\"name\":\"%s%d\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":0,"
                           "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"mb\":%d,\"stage\":%d,\"chunk\":%d,"
                           "\"kind\":\"%s\"}}",
                           kn, op.mb, kn, d, (a - t.t0) * k, (e - a) * k, op.mb, op.stage,
                           t.stage_chunk[op.stage], kn);
        }
        trace_barriers(&b, s, &t, &w, d, k);
        if (trace_memory(&b, s, &t, &w, d, k, err) != 0) {
            zb_buf_free(&b);
            viz_times_free(&t);
            return -1;
        }
    }
    zb_buf_puts(&b, "\n]}\n");
    viz_times_free(&t);
    return zb_buf_take(&b, json, len, err);
}
