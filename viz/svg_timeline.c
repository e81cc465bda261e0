/*
 * svg_timeline.c: the SVG timeline of a schedule (viz_svg_timeline) and the
 * predicted-versus-measured comparison (viz_svg_compare).
 *
 * Picture, top to bottom: a title with the paper's figures (cost, bubble
 * rate, peak activation memory), a legend, one lane per device with time on
 * x (ops are boxes coloured by kind and chunk, idle time shows the grey lane
 * background), a time axis, and one small step curve of activation memory
 * per device on a shared scale with the limit dashed in red.
 *
 * Sizing adapts to the schedule so that p=4, m=8 reads like the paper's
 * figures and p=32, m=256 stays legible: the time scale aims at ~30 px per
 * average op but the plot is clamped to [560, 1800] px; lanes shrink from
 * 26 px to 11 px as devices grow; a micro-batch number is written only when
 * its estimated width fits inside its box, so labels thin out instead of
 * overlapping.  Every op box is a <rect class="op op-KIND"> with a tooltip,
 * which also lets tests count them.  In a comparison both blocks share the
 * plot and, when their time units allow, one time scale.
 *
 * Expected workload: up to ~200k ops (p=64, m=1024); the output is linear in
 * the op count (150 to 200 bytes per op).
 */
#include "viz/viz.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/sched_io.h"
#include "viz/buf.h"
#include "viz/palette.h"
#include "viz/times.h"

/* One timeline to draw. */
typedef struct tl_src {
    const sched_t *s;      /* the schedule */
    viz_times t;           /* its measured or simulated times */
    const char *tag;       /* block heading in compare mode ("predicted"), NULL alone */
    double scale;          /* px per time unit of this schedule */
    double axis_factor;    /* axis units per time unit of this schedule */
    const char *axis_unit; /* unit written on the axis */
    double axis_span;      /* axis units across the plot width */
} tl_src;

/* Geometry shared by every block of one picture; time scales are per block
 * (tl_src) because units may differ. */
typedef struct tl_layout {
    double plot_x;     /* x of each block's first op start */
    double plot_w;     /* width of the time area in px */
    int shared_scale;  /* 1 when all blocks share one time scale */
    double lane_h;     /* height of one device lane */
    double lane_gap;   /* vertical gap between lanes */
    double op_font;    /* micro-batch label size; 0 when lanes are too thin */
    double dev_font;   /* device label size */
    double mem_h;      /* height of one memory panel */
    double width;      /* whole picture */
} tl_layout;

#define TL_MARGIN_LEFT 64.0  /* room for "dev 31" */
#define TL_MARGIN_RIGHT 96.0 /* room for "peak 12.5 GiB" next to memory panels */
#define TL_PLOT_MIN 560.0
#define TL_PLOT_MAX 1800.0
#define TL_PX_PER_OP 30.0    /* target width of an average op */

static double clampd(double v, double lo, double hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* "27 units", "1.25 ms": four significant digits are plenty for a title. */
static void fmt_time(char *out, size_t n, double v, const char *unit)
{
    snprintf(out, n, "%.4g %s", v, unit[0] ? unit : "units");
}

/* Memory with binary prefixes when the unit is bytes, else "%g unit". */
static void fmt_mem(char *out, size_t n, double v, const char *unit)
{
    if (!strcmp(unit, "bytes")) {
        static const char *const pre[] = { "B", "KiB", "MiB", "GiB", "TiB" };
        int k = 0;
        double a = fabs(v);
        while (a >= 1024 && k < 4) {
            a /= 1024;
            v /= 1024;
            k++;
        }
        snprintf(out, n, "%.3g %s", v, pre[k]);
    } else {
        snprintf(out, n, "%.4g %s", v, unit[0] ? unit : "units");
    }
}

/* Picks a tick step of 1, 2 or 5 times a power of ten giving <= ~10 ticks. */
static double nice_step(double span)
{
    double raw = span / 10, mag = pow(10, floor(log10(raw)));
    static const double mult[] = { 1, 2, 5, 10 };
    for (int i = 0; i < 4; i++)
        if (mult[i] * mag >= raw)
            return mult[i] * mag;
    return 10 * mag;
}

/* The most ticks or grid lines an axis draws.  nice_step aims at ~10; the
 * cap keeps a span that is not finite, or a step that underflowed to 0 or
 * lost all precision against the span, from looping without end. */
#define AXIS_MAX_TICKS 64

/* Whether an axis over `span` can be drawn with `step`: both finite,
 * positive, and few enough ticks. */
static int axis_drawable(double span, double step)
{
    return isfinite(span) && isfinite(step) && span > 0 && step > 0 && span / step <= AXIS_MAX_TICKS;
}

/* Seconds per time unit for physical units; 0 for abstract "units". */
static double unit_seconds(const char *unit)
{
    if (!strcmp(unit, "s"))
        return 1;
    if (!strcmp(unit, "ms"))
        return 1e-3;
    if (!strcmp(unit, "us"))
        return 1e-6;
    if (!strcmp(unit, "ns"))
        return 1e-9;
    return 0;
}

/* Chooses plot width, lane sizes and each block's time scale.  Blocks
 * share one scale when their time units agree or are both physical (the
 * top block is converted to the bottom block's unit); a prediction in
 * abstract units next to a run measured in ms cannot share one, so each
 * then spans the plot on its own scale and says so. */
static void layout_compute(tl_src *src, int n_src, tl_layout *L)
{
    const char *unit = src[n_src - 1].s->time_unit;
    double unit_s = unit_seconds(unit);
    L->shared_scale = 1;
    for (int k = 0; k < n_src; k++) {
        const char *u = src[k].s->time_unit;
        src[k].axis_unit = unit;
        src[k].axis_factor = 1;
        if (strcmp(u, unit) != 0) {
            if (unit_seconds(u) > 0 && unit_s > 0)
                src[k].axis_factor = unit_seconds(u) / unit_s;
            else
                L->shared_scale = 0;
        }
    }
    /* Width: about TL_PX_PER_OP per average op of the busiest picture. */
    double want = TL_PLOT_MIN;
    int p = 1;
    for (int k = 0; k < n_src; k++) {
        const sched_t *s = src[k].s;
        double busy = 0;
        long ops = 0;
        for (int d = 0; d < s->n_devices; d++) {
            busy += src[k].t.r.dev[d].busy;
            ops += s->dev[d].n_ops;
        }
        double span = src[k].t.t1 - src[k].t.t0;
        if (ops > 0 && busy > 0 && span > 0 && span / (busy / (double)ops) * TL_PX_PER_OP > want)
            want = span / (busy / (double)ops) * TL_PX_PER_OP;
        if (s->n_devices > p)
            p = s->n_devices;
    }
    L->plot_w = floor(clampd(want, TL_PLOT_MIN, TL_PLOT_MAX));
    double axis_span = 0;
    for (int k = 0; k < n_src; k++) {
        double span = (src[k].t.t1 - src[k].t.t0) * src[k].axis_factor;
        if (!L->shared_scale) {
            src[k].axis_unit = src[k].s->time_unit;
            src[k].axis_factor = 1;
            src[k].axis_span = span > 0 ? span : 1;
        } else if (span > axis_span) {
            axis_span = span;
        }
    }
    for (int k = 0; k < n_src; k++) {
        if (L->shared_scale)
            src[k].axis_span = axis_span > 0 ? axis_span : 1;
        src[k].scale = L->plot_w / src[k].axis_span * src[k].axis_factor;
    }
    L->plot_x = TL_MARGIN_LEFT;
    L->width = TL_MARGIN_LEFT + L->plot_w + TL_MARGIN_RIGHT;
    L->lane_h = floor(clampd(560.0 / p, 11, 26));
    L->lane_gap = L->lane_h >= 20 ? 4 : 2;
    L->op_font = floor(fmin(12, L->lane_h * 0.55));
    if (L->op_font < 7)
        L->op_font = 0;
    L->dev_font = floor(clampd(L->lane_h * 0.6, 8, 12));
    L->mem_h = floor(clampd(L->lane_h * 1.6, 18, 44));
}

/* The largest finite memory limit of s (0 when none) and whether it is
 * drawn: a limit far above every peak would flatten the curves, so it is
 * then stated in words instead. */
static int mem_limit_drawn(const tl_src *src, double *limit_max)
{
    const sched_t *s = src->s;
    *limit_max = 0;
    for (int d = 0; d < s->n_devices; d++)
        if (s->mem_limit && isfinite(s->mem_limit[d]) && s->mem_limit[d] > *limit_max)
            *limit_max = s->mem_limit[d];
    return *limit_max > 0 && *limit_max <= 2 * src->t.r.peak_mem;
}

/* Which kinds appear at all, for the legend. */
static void kinds_present(const tl_src *src, int n_src, int present[OP_KIND_COUNT])
{
    memset(present, 0, sizeof(int) * OP_KIND_COUNT);
    for (int k = 0; k < n_src; k++)
        for (int d = 0; d < src[k].s->n_devices; d++) {
            const sched_lane *l = &src[k].s->dev[d];
            for (int i = 0; i < l->n_ops; i++)
                present[l->ops[i].kind] = 1;
        }
}

/* The figures line: "cost … · bubble … · peak …". */
static void draw_figures(viz_buf *b, double x, double y, const tl_src *src)
{
    const sched_t *s = src->s;
    const sim_result *r = &src->t.r;
    char cost[64], peak[64];
    fmt_time(cost, sizeof cost, r->cost, s->time_unit);
    fmt_mem(peak, sizeof peak, r->peak_mem, s->mem_unit);
    viz_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\" fill=\"#222\">", x, y);
    viz_buf_xml(b, src->t.measured ? "measured" : "simulated");
    viz_buf_puts(b, " \xc2\xb7 cost ");
    viz_buf_xml(b, cost);
    viz_buf_printf(b, " \xc2\xb7 bubble rate %.1f%% \xc2\xb7 peak activation memory ",
                   100 * r->bubble_rate);
    viz_buf_xml(b, peak);
    viz_buf_printf(b, " (device %d)</text>\n", r->peak_device);
}

/* "zb-h1 · p=4, m=8" plus stage layout when there are several chunks. */
static void draw_heading(viz_buf *b, double x, double y, double size, const tl_src *src)
{
    const sched_t *s = src->s;
    viz_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%.0f\" font-weight=\"bold\" fill=\"#111\">",
                   x, y, size);
    if (src->tag) {
        viz_buf_xml(b, src->tag);
        viz_buf_puts(b, ": ");
    }
    viz_buf_xml(b, s->name[0] ? s->name : "schedule");
    viz_buf_printf(b, " \xc2\xb7 p=%d, m=%d", s->n_devices, s->n_micro);
    if (src->t.n_chunks > 1)
        viz_buf_printf(b, ", %d stages (%d chunks per device)", s->n_stages, src->t.n_chunks);
    viz_buf_puts(b, "</text>\n");
}

/* One legend swatch with a label in its text colour.  `cls` names what the
 * swatch stands for ("key-F chunk-0", "key-idle"), so that tests and
 * scripts can match each box colour against its legend entry. */
static double legend_swatch(viz_buf *b, double x, double y, const char *cls, const char *fill,
                            const char *text_fill, const char *text)
{
    viz_buf_printf(b, "<rect class=\"key %s\" x=\"%.1f\" y=\"%.1f\" width=\"18\" height=\"14\" fill=\"%s\"/>",
                   cls, x, y, fill);
    if (text)
        viz_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"middle\" fill=\"%s\">%s</text>",
                       x + 9, y + 11, text_fill, text);
    return x + 18;
}

/* Legend: each kind present with one swatch per chunk (numbered when there
 * are several), then idle, then the memory limit style. */
static double draw_legend(viz_buf *b, double y, const tl_src *src, int n_src, const tl_layout *L)
{
    int present[OP_KIND_COUNT], n_chunks = 1, any_limit = 0;
    kinds_present(src, n_src, present);
    for (int k = 0; k < n_src; k++) {
        if (src[k].t.n_chunks > n_chunks)
            n_chunks = src[k].t.n_chunks;
        double limit_max;
        any_limit |= n_src == 1 && mem_limit_drawn(&src[k], &limit_max);
    }
    static const char *const kind_text[] = {
        "F forward", "B input gradient", "W weight gradient", "BW full backward",
        "S vocabulary pass (output shard)", "T vocabulary backward (output shard)",
    };
    _Static_assert(sizeof kind_text / sizeof kind_text[0] == OP_KIND_COUNT,
                   "every op kind needs a legend text");
    /* Items flow left to right and wrap before the right margin; text
     * width is estimated at 7 px per character of the 12 px font. */
    double x = L->plot_x, right = L->width - 8;
    viz_buf_puts(b, "<g class=\"legend\">\n");
    for (int kind = 0; kind < OP_KIND_COUNT; kind++) {
        if (!present[kind])
            continue;
        int swatches = OP_IS_VOCAB(kind) ? 1 : n_chunks; /* S, T: no chunks */
        double w = 19.0 * swatches + 4 + 7.0 * (double)strlen(kind_text[kind]);
        if (x + w > right && x > L->plot_x) {
            x = L->plot_x;
            y += 20;
        }
        for (int c = 0; c < swatches; c++) {
            viz_color col = viz_op_color((op_kind)kind, c, swatches);
            char num[16], cls[48];
            snprintf(num, sizeof num, "%d", c);
            snprintf(cls, sizeof cls, "key-%s chunk-%d", op_kind_name((op_kind)kind), c);
            x = legend_swatch(b, x, y, cls, col.fill, col.text, swatches > 1 ? num : NULL) + 1;
        }
        viz_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"#222\">%s</text>\n",
                       x + 4, y + 11, kind_text[kind]);
        x += 4 + 7.0 * (double)strlen(kind_text[kind]) + 14;
    }
    if (x + 52 > right && x > L->plot_x) {
        x = L->plot_x;
        y += 20;
    }
    if (present[OP_S] && n_src == 1 && src[0].t.r.barrier[0]) {
        static const char text[] = "barrier C0/C1 ends (all-reduce)";
        if (x + 22 + 7.0 * (sizeof text - 1) > right && x > L->plot_x) {
            x = L->plot_x;
            y += 20;
        }
        viz_buf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                       "stroke-width=\"1.5\" stroke-dasharray=\"2 2\"/>", x + 9, y, x + 9, y + 14,
                       VIZ_BARRIER_STROKE);
        viz_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"#222\">%s</text>\n",
                       x + 22, y + 11, text);
        x += 22 + 7.0 * (sizeof text - 1) + 14;
        if (x + 52 > right && x > L->plot_x) {
            x = L->plot_x;
            y += 20;
        }
    }
    legend_swatch(b, x, y, "key-idle", VIZ_IDLE_FILL, NULL, NULL);
    viz_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"#222\">idle</text>\n",
                   x + 22, y + 11);
    x += 22 + 30 + 14;
    if (any_limit) {
        if (x + 110 > right && x > L->plot_x) {
            x = L->plot_x;
            y += 20;
        }
        viz_buf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#d62728\" "
                       "stroke-width=\"1.5\" stroke-dasharray=\"4 3\"/>", x, y + 7, x + 18, y + 7);
        viz_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"#222\">memory limit</text>\n",
                       x + 22, y + 11);
        x += 22 + 84 + 14;
    }
    if (n_chunks > 1) {
        static const char note[] = "swatch number = chunk (model order on the device)";
        if (x + 7.0 * (sizeof note - 1) > right && x > L->plot_x) {
            x = L->plot_x;
            y += 20;
        }
        viz_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"#222\">%s</text>\n",
                       x, y + 11, note);
    }
    viz_buf_puts(b, "</g>\n");
    return y + 14;
}

/* x of time t in a block (each block starts at its first op). */
static double tx(const tl_layout *L, const tl_src *src, double t)
{
    return L->plot_x + (t - src->t.t0) * src->scale;
}

/* Vocabulary parallelism: a dotted line across all lanes where each
 * all-reduce barrier ends (simulated runs only; a trace has no barrier
 * times). */
static void draw_barriers(viz_buf *b, double y, double lanes_h, const tl_src *src, const tl_layout *L)
{
    const sim_result *r = &src->t.r;
    if (!r->barrier[0])
        return;
    viz_buf_puts(b, "<g class=\"barriers\">\n");
    for (int c = 0; c < 2; c++) {
        if (c == 1 && src->s->vocab.variant != SCHED_VOCAB_2)
            break;
        for (int j = 0; j < r->n_micro; j++) {
            double x = tx(L, src, r->barrier[c][j]);
            viz_buf_printf(b, "<line class=\"barrier\" x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" "
                           "stroke=\"%s\" stroke-width=\"1\" stroke-dasharray=\"2 2\">"
                           "<title>C%d of micro-batch %d ends: %.6g</title></line>\n",
                           x, y, x, y + lanes_h, VIZ_BARRIER_STROKE, c, j, r->barrier[c][j]);
        }
    }
    viz_buf_puts(b, "</g>\n");
}

/* Lanes of one schedule from y; returns the y below the last lane. */
static double draw_lanes(viz_buf *b, double y, const tl_src *src, const tl_layout *L)
{
    const sched_t *s = src->s;
    const viz_times *t = &src->t;
    double step = nice_step(src->axis_span), px_per_axis = src->scale / src->axis_factor;
    double lanes_h = s->n_devices * (L->lane_h + L->lane_gap) - L->lane_gap;
    viz_buf_puts(b, "<g class=\"lanes\">\n");
    for (int d = 0; d < s->n_devices; d++) {
        double ly = y + d * (L->lane_h + L->lane_gap);
        viz_buf_printf(b, "<rect class=\"lane\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>",
                       L->plot_x, ly, L->plot_w, L->lane_h, VIZ_IDLE_FILL);
        viz_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%.0f\" text-anchor=\"end\" fill=\"#333\">dev %d</text>\n",
                       L->plot_x - 6, ly + L->lane_h / 2 + L->dev_font * 0.35, L->dev_font, d);
    }
    /* Faint time grid over the idle background, under the ops. */
    for (int k = 1; axis_drawable(src->axis_span, step) && k < AXIS_MAX_TICKS &&
                    k * step < src->axis_span * (1 - 1e-9); k++)
        viz_buf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#fff\" stroke-width=\"1\"/>\n",
                       L->plot_x + k * step * px_per_axis, y, L->plot_x + k * step * px_per_axis, y + lanes_h);
    viz_buf_puts(b, "</g>\n<g class=\"ops\">\n");
    for (int d = 0; d < s->n_devices; d++) {
        const sched_lane *l = &s->dev[d];
        double ly = y + d * (L->lane_h + L->lane_gap);
        for (int i = 0; i < l->n_ops; i++) {
            sched_op op = l->ops[i];
            double a = t->r.dev[d].start[i], e = t->r.dev[d].end[i];
            double x0 = tx(L, src, a), w = (e - a) * src->scale;
            int vocab = OP_IS_VOCAB(op.kind);
            int chunk = vocab ? 0 : t->stage_chunk[op.stage];
            viz_color col = viz_op_color((op_kind)op.kind, chunk, t->n_chunks);
            const char *kn = op_kind_name((op_kind)op.kind);
            /* A white hairline separates back-to-back boxes; very thin boxes
             * would vanish under it, so they go without. */
            viz_buf_printf(b, "<rect class=\"op op-%s\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\"%s fill=\"%s\">",
                           kn, x0, ly, w, L->lane_h,
                           w >= 4 ? " stroke=\"#fff\" stroke-width=\"0.6\"" : "", col.fill);
            if (vocab)
                viz_buf_printf(b, "<title>%s%d vocabulary shard %d: %.6g\xe2\x80\x93%.6g</title></rect>",
                               kn, op.mb, op.stage, a, e);
            else
                viz_buf_printf(b, "<title>%s%d stage %d chunk %d: %.6g\xe2\x80\x93%.6g</title></rect>",
                               kn, op.mb, op.stage, chunk, a, e);
            if (L->op_font > 0) {
                char num[16];
                int n = snprintf(num, sizeof num, "%d", op.mb);
                if (n * L->op_font * 0.62 + 3 <= w)
                    viz_buf_printf(b, "<text class=\"mb\" x=\"%.2f\" y=\"%.1f\" font-size=\"%.0f\" text-anchor=\"middle\" fill=\"%s\">%s</text>",
                                   x0 + w / 2, ly + L->lane_h / 2 + L->op_font * 0.36, L->op_font,
                                   col.text, num);
            }
            viz_buf_puts(b, "\n");
        }
    }
    viz_buf_puts(b, "</g>\n");
    draw_barriers(b, y, lanes_h, src, L);
    return y + lanes_h;
}

/* Tick marks and labels under the lanes; returns the y below. */
static double draw_axis(viz_buf *b, double y, const tl_layout *L, const tl_src *src)
{
    double step = nice_step(src->axis_span), px_per_axis = src->scale / src->axis_factor;
    const char *unit = src->axis_unit;
    viz_buf_printf(b, "<g class=\"axis\" font-size=\"11\" fill=\"#333\">\n"
                   "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#666\"/>\n",
                   L->plot_x, y + 2, L->plot_x + L->plot_w, y + 2);
    for (int k = 0; axis_drawable(src->axis_span, step) && k <= AXIS_MAX_TICKS; k++) {
        double g = k * step;
        if (g > src->axis_span * (1 + 1e-9))
            break;
        double x = L->plot_x + g * px_per_axis;
        viz_buf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#666\"/>"
                       "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.6g</text>\n",
                       x, y + 2, x, y + 6, x, y + 18, g);
    }
    viz_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"start\">time (", L->plot_x + L->plot_w + 18, y + 18);
    viz_buf_xml(b, unit[0] ? unit : "units");
    viz_buf_puts(b, ")</text>\n</g>\n");
    return y + 24;
}

/* Per-device activation memory step curves; returns the y below or -1. */
static double draw_memory(viz_buf *b, double y, const tl_src *src, const tl_layout *L, zb_err *err)
{
    const sched_t *s = src->s;
    const viz_times *t = &src->t;
    double limit_max, top = t->r.peak_mem;
    int limit_drawn = mem_limit_drawn(src, &limit_max);
    if (limit_drawn && limit_max > top)
        top = limit_max;
    /* Headroom so that a curve at the limit stays visible under the
     * panel's top edge. */
    top *= 1.08;
    if (!(top > 0))
        top = 1;
    char limstr[64];
    viz_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"#222\">activation memory per device "
                   "(one scale for all panels)", L->plot_x, y + 12);
    if (limit_max > 0 && !limit_drawn) {
        fmt_mem(limstr, sizeof limstr, limit_max, s->mem_unit);
        viz_buf_puts(b, "; limit ");
        viz_buf_xml(b, limstr);
        viz_buf_puts(b, " is above the scale");
    } else if (limit_drawn) {
        viz_buf_puts(b, "; dashed red: limit");
    }
    viz_buf_puts(b, "</text>\n<g class=\"memory\">\n");
    y += 20;
    double gap = 3;
    for (int d = 0; d < s->n_devices; d++) {
        double py = y + d * (L->mem_h + gap), base = py + L->mem_h;
        double ys = (L->mem_h - 2) / top;
        viz_buf_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#f7f7f7\" stroke=\"#ddd\" stroke-width=\"0.5\"/>"
                       "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%.0f\" text-anchor=\"end\" fill=\"#333\">dev %d</text>\n",
                       L->plot_x, py, L->plot_w, L->mem_h,
                       L->plot_x - 6, py + L->mem_h / 2 + L->dev_font * 0.35, L->dev_font, d);
        sim_mem_point *pts = NULL;
        int n = 0;
        /* A device without ops has no curve (its first_start is 0, which
         * may lie far outside a measured run's clock). */
        if (s->dev[d].n_ops > 0 && viz_mem_curve(s, t, d, &pts, &n, err) != 0)
            return -1;
        if (n > 0) {
            /* The same step path twice: once closed and filled, once as
             * the outline. */
            for (int pass = 0; pass < 2; pass++) {
                viz_buf_puts(b, pass == 0 ? "<path class=\"mem-area\" fill=\"#c9b8e8\" d=\"M"
                                          : "<path class=\"mem-line\" fill=\"none\" stroke=\"#5b3a9e\" stroke-width=\"1\" d=\"M");
                viz_buf_num(b, tx(L, src, pts[0].t));
                viz_buf_puts(b, " ");
                viz_buf_num(b, base);
                for (int i = 0; i < n; i++) {
                    viz_buf_puts(b, "H");
                    viz_buf_num(b, tx(L, src, pts[i].t));
                    viz_buf_puts(b, "V");
                    viz_buf_num(b, base - clampd(pts[i].mem, 0, top) * ys);
                }
                viz_buf_puts(b, "H");
                viz_buf_num(b, tx(L, src, t->r.dev[d].last_end > pts[n - 1].t ? t->r.dev[d].last_end : pts[n - 1].t));
                if (pass == 0) {
                    viz_buf_puts(b, "V");
                    viz_buf_num(b, base);
                    viz_buf_puts(b, "Z");
                }
                viz_buf_puts(b, "\"/>\n");
            }
        }
        free(pts);
        if (limit_drawn && s->mem_limit && isfinite(s->mem_limit[d]) && s->mem_limit[d] > 0) {
            double ly = base - s->mem_limit[d] * ys;
            viz_buf_printf(b, "<line class=\"mem-limit\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#d62728\" "
                           "stroke-width=\"1.2\" stroke-dasharray=\"4 3\"/>\n",
                           L->plot_x, ly, L->plot_x + L->plot_w, ly);
        }
        char peak[64];
        fmt_mem(peak, sizeof peak, t->r.dev[d].peak_mem, s->mem_unit);
        int over = s->mem_limit && t->r.dev[d].peak_mem > s->mem_limit[d];
        viz_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%.0f\" fill=\"%s\">peak ",
                       L->plot_x + L->plot_w + 6, py + L->mem_h / 2 + L->dev_font * 0.35, L->dev_font,
                       over ? "#d62728" : "#333");
        viz_buf_xml(b, peak);
        viz_buf_puts(b, "</text>\n");
    }
    viz_buf_puts(b, "</g>\n");
    return y + s->n_devices * (L->mem_h + gap) - gap;
}

/* Wraps the body in the SVG root element, now that the height is known. */
static int svg_document(viz_buf *body, double width, double height, const char *title,
                        char **svg, size_t *len, zb_err *err)
{
    viz_buf doc = { 0 };
    viz_buf_printf(&doc, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                   "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                   "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\">\n<title>",
                   ceil(width), ceil(height), ceil(width), ceil(height));
    viz_buf_xml(&doc, title);
    viz_buf_printf(&doc, "</title>\n<rect width=\"%.0f\" height=\"%.0f\" fill=\"#fff\"/>\n",
                   ceil(width), ceil(height));
    if (body->data)
        viz_buf_puts(&doc, body->data);
    viz_buf_puts(&doc, "</svg>\n");
    viz_buf_free(body);
    return viz_buf_take(&doc, svg, len, err);
}

/* Draws n_src (1 or 2) timelines; memory panels only for a single one. */
static int render(tl_src *src, int n_src, char **svg, size_t *len, zb_err *err)
{
    tl_layout L;
    layout_compute(src, n_src, &L);
    viz_buf b = { 0 };
    double y = 22;
    if (n_src == 1) {
        draw_heading(&b, 12, y, 16, &src[0]);
        draw_figures(&b, 12, y + 20, &src[0]);
        y += 34;
    } else {
        viz_buf_printf(&b, "<text x=\"12\" y=\"%.1f\" font-size=\"16\" font-weight=\"bold\" fill=\"#111\">", y);
        viz_buf_xml(&b, src[0].tag);
        viz_buf_puts(&b, " and ");
        viz_buf_xml(&b, src[1].tag);
        viz_buf_puts(&b, L.shared_scale ? " on one time scale</text>\n"
                                         : ", each on its own time scale</text>\n");
        if (!L.shared_scale) {
            viz_buf_printf(&b, "<text x=\"12\" y=\"%.1f\" font-size=\"12\" fill=\"#d62728\">"
                           "time units differ (", y + 18);
            viz_buf_xml(&b, src[0].s->time_unit);
            viz_buf_puts(&b, " vs ");
            viz_buf_xml(&b, src[1].s->time_unit);
            viz_buf_puts(&b, "): each timeline spans the full width; compare shapes, not lengths. "
                        "For one scale in ms, plan with measured costs: zbsched profile, then "
                        "zbsched search --profile</text>\n");
            y += 18;
        }
        y += 14;
    }
    y = draw_legend(&b, y, src, n_src, &L) + 14;
    for (int k = 0; k < n_src; k++) {
        if (n_src > 1) {
            draw_heading(&b, 12, y + 12, 13, &src[k]);
            draw_figures(&b, 12, y + 30, &src[k]);
            y += 40;
        }
        y = draw_lanes(&b, y, &src[k], &L);
        y = draw_axis(&b, y, &L, &src[k]) + 10;
    }
    if (n_src == 1) {
        y = draw_memory(&b, y + 4, &src[0], &L, err);
        if (y < 0) {
            viz_buf_free(&b);
            return -1;
        }
        y += 12;
    }
    const char *name = src[0].s->name[0] ? src[0].s->name : "schedule";
    return svg_document(&b, L.width, y, name, svg, len, err);
}

int viz_svg_timeline(const sched_t *s, char **svg, size_t *len, zb_err *err)
{
    tl_src src = { .s = s };
    if (viz_times_compute(s, &src.t, err) != 0)
        return -1;
    int rc = render(&src, 1, svg, len, err);
    viz_times_free(&src.t);
    return rc;
}

int viz_svg_compare(const sched_t *top, const char *top_label,
                    const sched_t *bottom, const char *bottom_label,
                    char **svg, size_t *len, zb_err *err)
{
    tl_src src[2] = {
        { .s = top, .tag = top_label ? top_label : "top" },
        { .s = bottom, .tag = bottom_label ? bottom_label : "bottom" },
    };
    if (viz_times_compute(top, &src[0].t, err) != 0)
        return zb_wrap(err, "%s: ", src[0].tag);
    if (viz_times_compute(bottom, &src[1].t, err) != 0) {
        viz_times_free(&src[0].t);
        return zb_wrap(err, "%s: ", src[1].tag);
    }
    int rc = render(src, 2, svg, len, err);
    viz_times_free(&src[0].t);
    viz_times_free(&src[1].t);
    return rc;
}

int viz_render_svg_file(const sched_t *s, const char *path, zb_err *err)
{
    char *svg = NULL;
    size_t len = 0;
    if (viz_svg_timeline(s, &svg, &len, err) != 0)
        return -1;
    int rc = zb_write_atomic(path, svg, len, err);
    free(svg);
    return rc;
}
