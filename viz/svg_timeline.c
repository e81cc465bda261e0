/*
 * svg_timeline.c: the SVG timeline of a schedule (viz_svg_timeline) and the
 * predicted-versus-measured comparison (viz_svg_compare), whole or through
 * a view (a time window, micro-batches, devices; view.h).
 *
 * Picture, top to bottom: a heading and the paper's figures (cost, bubble
 * rate, and the one peak-memory figure per device that search prints:
 * static + activations when the file knows its static memory,
 * src/mem_figures.h), the view when there is one, a note when boxes are too
 * narrow for their numbers, a legend, one lane per device with time on x
 * (ops are boxes coloured by kind and chunk, idle time shows the grey lane
 * background, ops of micro-batches outside a chosen subset are grey), a
 * time axis, and one small memory panel per device on a shared scale with
 * a y axis (GB for plans), static memory as a grey band under the
 * activation curve and the limit dashed in red.
 *
 * Sizing adapts to what is shown so that p=4, m=8 reads like the paper's
 * figures: the time scale aims at ~30 px per average op in the window but
 * the plot is clamped to [560, 1800] px; lanes shrink from 26 px to 11 px as
 * devices grow.  A micro-batch number is written in every box that can hold
 * it: its width is measured in the font the picture names (DejaVu Sans's
 * advance widths, viz/font.h) and the font shrinks from 12 px down to
 * TL_LABEL_MIN_FONT before a box goes without, so that zooming into the SVG
 * makes every number readable.  A whole big plan (5,120 ops across 1,800 px)
 * still leaves most boxes a few pixels wide; the picture then says so and
 * names the view flags that make them wide enough.  Every op box is a
 * <rect class="op op-KIND"> with a tooltip, which also lets tests count
 * them.  In a comparison both blocks share the plot and, when their time
 * units allow, one time scale.
 *
 * Expected workload: up to ~200k ops (p=64, m=1024); the output is linear in
 * the op count (150 to 200 bytes per op).
 */
#include "viz/viz.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/mem_figures.h"
#include "src/numfmt.h"
#include "src/sched_io.h"
#include "src/text_buf.h"
#include "viz/font.h"
#include "viz/palette.h"
#include "viz/times.h"
#include "viz/view.h"

/* One timeline to draw. */
typedef struct tl_src {
    const sched_t *s;      /* the schedule */
    viz_times t;           /* its measured or simulated times */
    const char *tag;       /* block heading in compare mode ("predicted"), NULL alone */
    viz_window w;          /* what of it is shown */
    mem_figures mf;        /* per-device static, activation and total peak memory */
    double scale;          /* px per time unit of this schedule */
    double axis_factor;    /* axis units per time unit of this schedule */
    const char *axis_unit; /* unit written on the axis */
    double axis_span;      /* axis units across the plot width */
    long n_boxes;          /* coloured op boxes drawn (the chosen micro-batches) */
    long n_labelled;       /* of them, boxes wide enough for their number */
} tl_src;

/* Geometry shared by every block of one picture; time scales are per block
 * (tl_src) because units may differ. */
typedef struct tl_layout {
    double plot_x;     /* x of the window's start */
    double plot_w;     /* width of the time area in px */
    int shared_scale;  /* 1 when all blocks share one time scale */
    int n_lanes;       /* most devices one block shows */
    double lane_h;     /* height of one device lane */
    double lane_gap;   /* vertical gap between lanes */
    double op_font;    /* largest micro-batch label size */
    double dev_font;   /* device label size */
    double mem_h;      /* height of one memory panel */
    double width;      /* whole picture */
} tl_layout;

#define TL_MARGIN_LEFT 70.0  /* room for "dev 31" and the memory axis's "40 GB" */
#define TL_MARGIN_RIGHT 112.0 /* room for "peak 139.86 GB" next to memory panels */
#define TL_PLOT_MIN 560.0
#define TL_PLOT_MAX 1800.0
#define TL_PX_PER_OP 30.0    /* target width of an average op */
/* Smallest micro-batch label: 4.5 px is 11 px at 2.5x zoom, readable;
 * below it a number is a smudge at any zoom a viewer starts at. */
#define TL_LABEL_MIN_FONT 4.5
/* Space a label leaves at each side of its box. */
#define TL_LABEL_PAD 0.75
/* Height of a digit in DejaVu Sans (its cap height, 1493/2048 em), the
 * width a label turned upright takes across its box. */
#define TL_DIGIT_HEIGHT 0.729
#define TL_GHOST_FILL "#cfcfcf" /* ops of micro-batches outside the chosen subset */
#define TL_STATIC_FILL "#d9d9d9" /* static memory under the activation curve */

static double clampd(double v, double lo, double hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* "27 units", "8090.54 ms": six significant digits, never an exponent. */
static void fmt_time(char *out, size_t n, double v, const char *unit)
{
    char num[32];
    zb_num_format(v, 6, num, sizeof num);
    snprintf(out, n, "%s %s", num, unit[0] ? unit : "units");
}

/* Picks a step of 1, 2, 2.5 or 5 times a power of ten giving at most ~n
 * steps over span. */
static double nice_step_n(double span, double n)
{
    double raw = span / n, mag = pow(10, floor(log10(raw)));
    static const double mult[] = { 1, 2, 2.5, 5, 10 };
    for (int i = 0; i < 5; i++)
        if (mult[i] * mag >= raw * (1 - 1e-9))
            return mult[i] * mag;
    return 10 * mag;
}

/* About ten ticks over span. */
static double nice_step(double span)
{
    return nice_step_n(span, 10);
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

/* The micro-batch label of a box w px wide and one lane high: its font
 * size, or 0 when even TL_LABEL_MIN_FONT does not fit, and whether it is
 * turned upright (reading bottom to top).  Across the box the number needs
 * its width, measured in the picture's font (viz/font.h); upright it needs
 * a digit's height across and its width along the lane.  The larger font
 * wins, across on a tie: so a box too narrow for "12" but a lane high
 * still carries it.  Sizes step by half a pixel so that equal boxes get
 * equal labels. */
static double label_font(const tl_layout *L, const char *num, double w, int *upright)
{
    *upright = 0;
    if (L->op_font <= 0)
        return 0;
    double per_px = viz_text_width(num, 1.0, 0);
    double across = floor(fmin(L->op_font, (w - 2 * TL_LABEL_PAD) / per_px) * 2) / 2;
    double up = floor(fmin(fmin(L->op_font, (w - 2 * TL_LABEL_PAD) / TL_DIGIT_HEIGHT),
                           (L->lane_h - 2 * TL_LABEL_PAD) / per_px) * 2) / 2;
    if (up > across) {
        *upright = 1;
        across = up;
    }
    return across >= TL_LABEL_MIN_FONT ? across : 0;
}

/* x of time t (the schedule's clock) in a block. */
static double tx(const tl_layout *L, const tl_src *src, double t)
{
    return L->plot_x + (t - src->w.w0) * src->scale;
}

/* The drawn extent of op i of device d, clipped to the window: x and width. */
static void op_box(const tl_layout *L, const tl_src *src, int d, int i, double *x, double *w)
{
    double a = src->t.r.dev[d].start[i], e = src->t.r.dev[d].end[i];
    double x0 = tx(L, src, a > src->w.w0 ? a : src->w.w0);
    double x1 = tx(L, src, e < src->w.w1 ? e : src->w.w1);
    *x = x0;
    *w = x1 > x0 ? x1 - x0 : 0;
}

/* Counts the coloured boxes of a block and those wide enough for their
 * number (for the note that tells how to see the rest). */
static void count_labels(const tl_layout *L, tl_src *src)
{
    const sched_t *s = src->s;
    src->n_boxes = src->n_labelled = 0;
    for (int d = src->w.dev_lo; d <= src->w.dev_hi; d++)
        for (int i = 0; i < s->dev[d].n_ops; i++) {
            if (!viz_window_has_op(&src->w, &src->t, d, i) ||
                !viz_window_selected(&src->w, s->dev[d].ops[i].mb))
                continue;
            double x, w;
            char num[16];
            op_box(L, src, d, i, &x, &w);
            snprintf(num, sizeof num, "%d", (int)s->dev[d].ops[i].mb);
            int upright;
            src->n_boxes++;
            src->n_labelled += label_font(L, num, w, &upright) > 0;
        }
}

/* Chooses units, windows, plot width, lane sizes and each block's time
 * scale.  Blocks share one scale when their time units agree or are both
 * physical (the top block is converted to the bottom block's unit); a
 * prediction in abstract units next to a run measured in ms cannot share
 * one, so each then spans the plot on its own scale and says so.  The
 * view's from/to are read in the axis's unit.  Returns 0 or -1 with err
 * (a view outside a schedule). */
static int layout_compute(tl_src *src, int n_src, const viz_view *view, tl_layout *L,
                          zb_err *err)
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
    for (int k = 0; k < n_src; k++) {
        if (!L->shared_scale) {
            src[k].axis_unit = src[k].s->time_unit;
            src[k].axis_factor = 1;
        }
        if (viz_window_resolve(src[k].s, &src[k].t, view, src[k].axis_factor, &src[k].w, err))
            return src[k].tag ? zb_wrap(err, "%s: ", src[k].tag) : -1;
    }
    /* Width: about TL_PX_PER_OP per average op in the busiest window. */
    double want = TL_PLOT_MIN;
    L->n_lanes = 1;
    for (int k = 0; k < n_src; k++) {
        const sched_t *s = src[k].s;
        double busy = 0;
        long ops = 0;
        for (int d = src[k].w.dev_lo; d <= src[k].w.dev_hi; d++)
            for (int i = 0; i < s->dev[d].n_ops; i++)
                if (viz_window_has_op(&src[k].w, &src[k].t, d, i)) {
                    busy += src[k].t.r.dev[d].end[i] - src[k].t.r.dev[d].start[i];
                    ops++;
                }
        double span = src[k].w.w1 - src[k].w.w0;
        if (ops > 0 && busy > 0 && span > 0 && span / (busy / (double)ops) * TL_PX_PER_OP > want)
            want = span / (busy / (double)ops) * TL_PX_PER_OP;
        int lanes = src[k].w.dev_hi - src[k].w.dev_lo + 1;
        if (lanes > L->n_lanes)
            L->n_lanes = lanes;
    }
    L->plot_w = floor(clampd(want, TL_PLOT_MIN, TL_PLOT_MAX));
    double axis_span = 0;
    for (int k = 0; k < n_src; k++) {
        double span = (src[k].w.w1 - src[k].w.w0) * src[k].axis_factor;
        if (!L->shared_scale)
            src[k].axis_span = span > 0 ? span : 1;
        else if (span > axis_span)
            axis_span = span;
    }
    for (int k = 0; k < n_src; k++) {
        if (L->shared_scale)
            src[k].axis_span = axis_span > 0 ? axis_span : 1;
        src[k].scale = L->plot_w / src[k].axis_span * src[k].axis_factor;
    }
    L->plot_x = TL_MARGIN_LEFT;
    L->width = TL_MARGIN_LEFT + L->plot_w + TL_MARGIN_RIGHT;
    L->lane_h = floor(clampd(560.0 / L->n_lanes, 11, 26));
    L->lane_gap = L->lane_h >= 20 ? 4 : 2;
    L->op_font = floor(fmin(12, L->lane_h * 0.55));
    L->dev_font = floor(clampd(L->lane_h * 0.6, 8, 12));
    L->mem_h = floor(clampd(L->lane_h * 1.6, 22, 44));
    for (int k = 0; k < n_src; k++)
        count_labels(L, &src[k]);
    return 0;
}

/* The largest finite memory limit of the shown devices (0 when none), in
 * the sense the panels plot (mem_figures), and whether it is drawn: a limit
 * far above every peak would flatten the curves, so it is then stated in
 * words instead. */
static int mem_limit_drawn(const tl_src *src, double *limit_max)
{
    const mem_figures *f = &src->mf;
    double peak = 0;
    *limit_max = 0;
    for (int d = src->w.dev_lo; d <= src->w.dev_hi; d++) {
        if (f->has_limit && isfinite(f->limit[d]) && f->limit[d] > *limit_max)
            *limit_max = f->limit[d];
        if (f->total[d] > peak)
            peak = f->total[d];
    }
    return *limit_max > 0 && *limit_max <= 2 * peak;
}

/* Which kinds appear at all, and whether any op is grey (outside a chosen
 * micro-batch subset), for the legend. */
static void kinds_present(const tl_src *src, int n_src, int present[OP_KIND_COUNT], int *ghosts)
{
    memset(present, 0, sizeof(int) * OP_KIND_COUNT);
    *ghosts = 0;
    for (int k = 0; k < n_src; k++)
        for (int d = src[k].w.dev_lo; d <= src[k].w.dev_hi; d++) {
            const sched_lane *l = &src[k].s->dev[d];
            for (int i = 0; i < l->n_ops; i++) {
                if (!viz_window_has_op(&src[k].w, &src[k].t, d, i))
                    continue;
                if (viz_window_selected(&src[k].w, l->ops[i].mb))
                    present[l->ops[i].kind] = 1;
                else
                    *ghosts = 1;
            }
        }
}

/* One line of text at (x, y), escaped; returns its right edge, measured
 * in the picture's font, so that the picture can be made wide enough. */
static double text_line(zb_buf *b, double x, double y, double size, int bold, const char *cls,
                        const char *fill, const char *text)
{
    zb_buf_printf(b, "<text%s%s%s x=\"%.1f\" y=\"%.1f\" font-size=\"%.0f\"%s fill=\"%s\">",
                   cls ? " class=\"" : "", cls ? cls : "", cls ? "\"" : "", x, y, size,
                   bold ? " font-weight=\"bold\"" : "", fill);
    zb_buf_xml(b, text);
    zb_buf_puts(b, "</text>\n");
    return x + viz_text_width(text, size, bold);
}

/* The figures line: "simulated · cost … · bubble rate … · peak memory …";
 * returns its right edge. */
static double draw_figures(zb_buf *b, double x, double y, const tl_src *src)
{
    const sched_t *s = src->s;
    const sim_result *r = &src->t.r;
    const mem_figures *f = &src->mf;
    char cost[64], peak[64], mem[256], line[512];
    fmt_time(cost, sizeof cost, r->cost, s->time_unit);
    mem_figures_format(s, f->peak, peak, sizeof peak);
    if (f->has_static) {
        char st[64], act[64];
        mem_figures_format(s, f->static_mem[f->peak_device], st, sizeof st);
        mem_figures_format(s, f->activations[f->peak_device], act, sizeof act);
        snprintf(mem, sizeof mem, "peak memory %s (device %d: static %s + activations %s)", peak,
                 f->peak_device, st, act);
    } else {
        snprintf(mem, sizeof mem, "peak activation memory %s (device %d)", peak, f->peak_device);
    }
    snprintf(line, sizeof line, "%s \xc2\xb7 cost %s \xc2\xb7 bubble rate %.1f%% \xc2\xb7 %s",
             src->t.measured ? "measured" : "simulated", cost, 100 * r->bubble_rate, mem);
    return text_line(b, x, y, 13, 0, "figures", "#222", line);
}

/* "zb-h1 · p=4, m=8" plus stage layout when there are several chunks;
 * returns its right edge. */
static double draw_heading(zb_buf *b, double x, double y, double size, const tl_src *src)
{
    const sched_t *s = src->s;
    char line[512], stages[96] = "";
    if (src->t.n_chunks > 1)
        snprintf(stages, sizeof stages, ", %d stages (%d chunks per device)", s->n_stages,
                 src->t.n_chunks);
    snprintf(line, sizeof line, "%s%s%s \xc2\xb7 p=%d, m=%d%s", src->tag ? src->tag : "",
             src->tag ? ": " : "", s->name[0] ? s->name : "schedule", s->n_devices, s->n_micro,
             stages);
    return text_line(b, x, y, size, 1, NULL, "#111", line);
}

/* The view and the label note under the figures; returns the y below and
 * widens *right to their right edges. */
static double draw_view_notes(zb_buf *b, double x, double y, const tl_src *src, double *right)
{
    char desc[256];
    viz_window_describe(src->s, &src->w, src->axis_unit, desc, sizeof desc);
    if (desc[0]) {
        *right = fmax(*right, text_line(b, x, y + 12, 12, 0, "view", "#222", desc));
        y += 17;
    }
    long missing = src->n_boxes - src->n_labelled;
    if (src->n_boxes > 0 && missing * 5 > src->n_boxes) { /* over a fifth unlabelled */
        char note[512];
        snprintf(note, sizeof note, "%ld of %ld boxes are too narrow for their micro-batch number; "
                 "zbsched render --from T --to T (%s), --micro-batches A-B or --devices A-B "
                 "draws a part wide enough", missing, src->n_boxes,
                 src->axis_unit[0] ? src->axis_unit : "units");
        *right = fmax(*right, text_line(b, x, y + 12, 12, 0, "label-note", "#8a4b00", note));
        y += 17;
    }
    return y;
}

/* One legend swatch with a label in its text colour.  `cls` names what the
 * swatch stands for ("key-F chunk-0", "key-idle"), so that tests and
 * scripts can match each box colour against its legend entry. */
static double legend_swatch(zb_buf *b, double x, double y, const char *cls, const char *fill,
                            const char *text_fill, const char *text)
{
    zb_buf_printf(b, "<rect class=\"key %s\" x=\"%.1f\" y=\"%.1f\" width=\"18\" height=\"14\" fill=\"%s\"/>",
                   cls, x, y, fill);
    if (text)
        zb_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"middle\" fill=\"%s\">%s</text>",
                       x + 9, y + 11, text_fill, text);
    return x + 18;
}

/* Starts a new legend line when an item of width w does not fit. */
static void legend_wrap(double *x, double *y, double w, double right, const tl_layout *L)
{
    if (*x + w > right && *x > L->plot_x) {
        *x = L->plot_x;
        *y += 20;
    }
}

/* Legend: each kind present with one swatch per chunk (numbered when there
 * are several), then the barriers, other micro-batches, idle, the memory
 * limit style and the chunk note.  Items flow left to right and wrap
 * before the right margin, their widths measured in the picture's font. */
static double draw_legend(zb_buf *b, double y, const tl_src *src, int n_src, const tl_layout *L)
{
    int present[OP_KIND_COUNT], n_chunks = 1, any_limit = 0, ghosts = 0;
    kinds_present(src, n_src, present, &ghosts);
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
    double x = L->plot_x, right = L->width - 8;
    zb_buf_puts(b, "<g class=\"legend\">\n");
    for (int kind = 0; kind < OP_KIND_COUNT; kind++) {
        if (!present[kind])
            continue;
        int swatches = OP_IS_VOCAB(kind) ? 1 : n_chunks; /* S, T: no chunks */
        double tw = viz_text_width(kind_text[kind], 12, 0);
        legend_wrap(&x, &y, 19.0 * swatches + 4 + tw, right, L);
        for (int c = 0; c < swatches; c++) {
            viz_color col = viz_op_color((op_kind)kind, c, swatches);
            char num[16], cls[48];
            snprintf(num, sizeof num, "%d", c);
            snprintf(cls, sizeof cls, "key-%s chunk-%d", op_kind_name((op_kind)kind), c);
            x = legend_swatch(b, x, y, cls, col.fill, col.text, swatches > 1 ? num : NULL) + 1;
        }
        zb_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"#222\">%s</text>\n",
                       x + 4, y + 11, kind_text[kind]);
        x += 4 + tw + 14;
    }
    if (present[OP_S] && n_src == 1 && src[0].t.r.barrier[0]) {
        static const char text[] = "barrier C0/C1 ends (all-reduce)";
        double tw = viz_text_width(text, 12, 0);
        legend_wrap(&x, &y, 22 + tw, right, L);
        zb_buf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                       "stroke-width=\"1.5\" stroke-dasharray=\"2 2\"/>", x + 9, y, x + 9, y + 14,
                       VIZ_BARRIER_STROKE);
        zb_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"#222\">%s</text>\n",
                       x + 22, y + 11, text);
        x += 22 + tw + 14;
    }
    if (ghosts) {
        static const char text[] = "other micro-batches";
        double tw = viz_text_width(text, 12, 0);
        legend_wrap(&x, &y, 22 + tw, right, L);
        legend_swatch(b, x, y, "key-other", TL_GHOST_FILL, NULL, NULL);
        zb_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"#222\">%s</text>\n",
                       x + 22, y + 11, text);
        x += 22 + tw + 14;
    }
    legend_wrap(&x, &y, 22 + viz_text_width("idle", 12, 0), right, L);
    legend_swatch(b, x, y, "key-idle", VIZ_IDLE_FILL, NULL, NULL);
    zb_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"#222\">idle</text>\n",
                   x + 22, y + 11);
    x += 22 + viz_text_width("idle", 12, 0) + 14;
    if (any_limit) {
        static const char text[] = "memory limit";
        double tw = viz_text_width(text, 12, 0);
        legend_wrap(&x, &y, 22 + tw, right, L);
        zb_buf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#d62728\" "
                       "stroke-width=\"1.5\" stroke-dasharray=\"4 3\"/>", x, y + 7, x + 18, y + 7);
        zb_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"#222\">%s</text>\n",
                       x + 22, y + 11, text);
        x += 22 + tw + 14;
    }
    if (n_chunks > 1) {
        static const char note[] = "swatch number = chunk (model order on the device)";
        legend_wrap(&x, &y, viz_text_width(note, 12, 0), right, L);
        zb_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"#222\">%s</text>\n",
                       x, y + 11, note);
    }
    zb_buf_puts(b, "</g>\n");
    return y + 14;
}

/* Vocabulary parallelism: a dotted line across all lanes where each
 * all-reduce barrier of a chosen micro-batch ends inside the window
 * (simulated runs only; a trace has no barrier times). */
static void draw_barriers(zb_buf *b, double y, double lanes_h, const tl_src *src, const tl_layout *L)
{
    const sim_result *r = &src->t.r;
    if (!r->barrier[0])
        return;
    zb_buf_puts(b, "<g class=\"barriers\">\n");
    for (int c = 0; c < 2; c++) {
        if (c == 1 && src->s->vocab.variant != SCHED_VOCAB_2)
            break;
        for (int j = 0; j < r->n_micro; j++) {
            double e = r->barrier[c][j];
            if (!viz_window_selected(&src->w, j) || e < src->w.w0 || e > src->w.w1)
                continue;
            char at[48];
            fmt_time(at, sizeof at, (e - src->t.t0) * src->axis_factor, src->axis_unit);
            double x = tx(L, src, e);
            zb_buf_printf(b, "<line class=\"barrier\" x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" "
                           "stroke=\"%s\" stroke-width=\"1\" stroke-dasharray=\"2 2\">"
                           "<title>C%d of micro-batch %d ends: %s</title></line>\n",
                           x, y, x, y + lanes_h, VIZ_BARRIER_STROKE, c, j, at);
        }
    }
    zb_buf_puts(b, "</g>\n");
}

/* The first tick at or after the window's start, on the axis. */
static double first_tick(const tl_src *src, double step)
{
    return ceil(src->w.a0 / step - 1e-9) * step;
}

/* Lanes of one schedule from y; returns the y below the last lane. */
static double draw_lanes(zb_buf *b, double y, const tl_src *src, const tl_layout *L)
{
    const sched_t *s = src->s;
    const viz_times *t = &src->t;
    double step = nice_step(src->axis_span), px_per_axis = src->scale / src->axis_factor;
    int n_lanes = src->w.dev_hi - src->w.dev_lo + 1;
    double lanes_h = n_lanes * (L->lane_h + L->lane_gap) - L->lane_gap;
    zb_buf_puts(b, "<g class=\"lanes\">\n");
    for (int d = src->w.dev_lo; d <= src->w.dev_hi; d++) {
        double ly = y + (d - src->w.dev_lo) * (L->lane_h + L->lane_gap);
        zb_buf_printf(b, "<rect class=\"lane\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>",
                       L->plot_x, ly, L->plot_w, L->lane_h, VIZ_IDLE_FILL);
        zb_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%.0f\" text-anchor=\"end\" fill=\"#333\">dev %d</text>\n",
                       L->plot_x - 6, ly + L->lane_h / 2 + L->dev_font * 0.35, L->dev_font, d);
    }
    /* Faint time grid over the idle background, under the ops. */
    if (axis_drawable(src->axis_span, step))
        for (double g = first_tick(src, step); g < src->w.a0 + src->axis_span * (1 - 1e-9); g += step) {
            double x = L->plot_x + (g - src->w.a0) * px_per_axis;
            if (x > L->plot_x + 0.5)
                zb_buf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#fff\" stroke-width=\"1\"/>\n",
                               x, y, x, y + lanes_h);
        }
    zb_buf_puts(b, "</g>\n<g class=\"ops\">\n");
    for (int d = src->w.dev_lo; d <= src->w.dev_hi; d++) {
        const sched_lane *l = &s->dev[d];
        double ly = y + (d - src->w.dev_lo) * (L->lane_h + L->lane_gap);
        for (int i = 0; i < l->n_ops; i++) {
            if (!viz_window_has_op(&src->w, t, d, i))
                continue;
            sched_op op = l->ops[i];
            double x0, w;
            op_box(L, src, d, i, &x0, &w);
            int vocab = OP_IS_VOCAB(op.kind), chosen = viz_window_selected(&src->w, op.mb);
            int chunk = vocab ? 0 : t->stage_chunk[op.stage];
            viz_color col = viz_op_color((op_kind)op.kind, chunk, t->n_chunks);
            const char *kn = op_kind_name((op_kind)op.kind);
            char a[48], e[48];
            zb_num_format((t->r.dev[d].start[i] - t->t0) * src->axis_factor, 6, a, sizeof a);
            zb_num_format((t->r.dev[d].end[i] - t->t0) * src->axis_factor, 6, e, sizeof e);
            /* A white hairline separates back-to-back boxes; very thin boxes
             * would vanish under it, so they go without. */
            if (chosen)
                zb_buf_printf(b, "<rect class=\"op op-%s\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\"%s fill=\"%s\">",
                               kn, x0, ly, w, L->lane_h,
                               w >= 4 ? " stroke=\"#fff\" stroke-width=\"0.6\"" : "", col.fill);
            else
                zb_buf_printf(b, "<rect class=\"ghost\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\"%s fill=\"%s\">",
                               x0, ly, w, L->lane_h,
                               w >= 4 ? " stroke=\"#fff\" stroke-width=\"0.6\"" : "", TL_GHOST_FILL);
            if (vocab)
                zb_buf_printf(b, "<title>%s%d vocabulary shard %d: %s\xe2\x80\x93%s %s</title></rect>",
                               kn, op.mb, op.stage, a, e, src->axis_unit);
            else
                zb_buf_printf(b, "<title>%s%d stage %d chunk %d: %s\xe2\x80\x93%s %s</title></rect>",
                               kn, op.mb, op.stage, chunk, a, e, src->axis_unit);
            if (chosen) {
                char num[16];
                snprintf(num, sizeof num, "%d", op.mb);
                int upright;
                double f = label_font(L, num, w, &upright);
                if (f > 0 && !upright)
                    zb_buf_printf(b, "<text class=\"mb\" x=\"%.2f\" y=\"%.1f\" font-size=\"%.1f\" text-anchor=\"middle\" fill=\"%s\">%s</text>",
                                   x0 + w / 2, ly + L->lane_h / 2 + f * 0.36, f, col.text, num);
                else if (f > 0) {
                    /* Turned a quarter left about its anchor: the baseline
                     * runs up the box, the digits reach left of it by their
                     * height, so the anchor sits half that right of the
                     * box's centre. */
                    double ax = x0 + w / 2 + f * TL_DIGIT_HEIGHT / 2, ay = ly + L->lane_h / 2;
                    zb_buf_printf(b, "<text class=\"mbv\" x=\"%.2f\" y=\"%.2f\" font-size=\"%.1f\" text-anchor=\"middle\" "
                                   "transform=\"rotate(-90 %.2f %.2f)\" fill=\"%s\">%s</text>",
                                   ax, ay, f, ax, ay, col.text, num);
                }
            }
            zb_buf_puts(b, "\n");
        }
    }
    zb_buf_puts(b, "</g>\n");
    draw_barriers(b, y, lanes_h, src, L);
    return y + lanes_h;
}

/* Tick marks and labels under the lanes; returns the y below. */
static double draw_axis(zb_buf *b, double y, const tl_layout *L, const tl_src *src)
{
    double step = nice_step(src->axis_span), px_per_axis = src->scale / src->axis_factor;
    const char *unit = src->axis_unit;
    zb_buf_printf(b, "<g class=\"axis\" font-size=\"11\" fill=\"#333\">\n"
                   "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#666\"/>\n",
                   L->plot_x, y + 2, L->plot_x + L->plot_w, y + 2);
    if (axis_drawable(src->axis_span, step)) {
        int k = 0;
        for (double g = first_tick(src, step);
             g <= src->w.a0 + src->axis_span * (1 + 1e-9) && k <= AXIS_MAX_TICKS; g += step, k++) {
            double x = L->plot_x + (g - src->w.a0) * px_per_axis;
            char num[48];
            zb_num_format(fabs(g) < step * 1e-9 ? 0 : g, 6, num, sizeof num);
            zb_buf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#666\"/>"
                           "<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
                           x, y + 2, x, y + 6, x, y + 18, num);
        }
    }
    zb_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"start\">time (", L->plot_x + L->plot_w + 18, y + 18);
    zb_buf_xml(b, unit[0] ? unit : "units");
    zb_buf_puts(b, ")</text>\n</g>\n");
    return y + 24;
}

/* A memory value on the panels' y axis: "20 GB" for bytes (the decimal
 * prefix of the axis's top, so every tick shares one unit), else the
 * number and the file's unit; "0" alone at the base. */
static void fmt_mem_tick(const tl_src *src, double v, double top, char *buf, size_t len)
{
    if (v == 0) {
        snprintf(buf, len, "0");
        return;
    }
    char num[24];
    if (!src->mf.bytes) {
        zb_num_format(v, 4, num, sizeof num);
        snprintf(buf, len, "%s %s", num, src->s->mem_unit[0] ? src->s->mem_unit : "units");
        return;
    }
    static const char *const pre[] = { "B", "KB", "MB", "GB", "TB", "PB" };
    int k = 0;
    double scale = 1;
    while (k < 5 && top >= scale * 1000) {
        scale *= 1000;
        k++;
    }
    zb_num_format(v / scale, 4, num, sizeof num);
    snprintf(buf, len, "%s %s", num, pre[k]);
}

/* Per-device memory panels over the window; returns the y below or -1. */
static double draw_memory(zb_buf *b, double y, const tl_src *src, const tl_layout *L, zb_err *err)
{
    const sched_t *s = src->s;
    const viz_times *t = &src->t;
    const mem_figures *mf = &src->mf;
    double limit_max, top = 0;
    int limit_drawn = mem_limit_drawn(src, &limit_max);
    for (int d = src->w.dev_lo; d <= src->w.dev_hi; d++)
        top = mf->total[d] > top ? mf->total[d] : top;
    if (limit_drawn && limit_max > top)
        top = limit_max;
    /* Headroom so that a curve at the limit stays visible under the
     * panel's top edge.  Ticks at whole steps at least 12 px apart (the
     * 9 px labels stay apart), none at the base or the very top, where
     * they would crowd the neighbouring panels' labels; at least one. */
    top *= 1.05;
    if (!(top > 0))
        top = 1;
    double step = nice_step_n(top, L->mem_h / 12);
    while (step >= top * 0.97 && step > 0)
        step /= 2;
    char limstr[64];
    zb_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"#222\">", L->plot_x, y + 12);
    zb_buf_puts(b, mf->has_static ? "memory per device: static (grey) + activations (violet), "
                                     "one scale for all panels"
                                   : "activation memory per device (one scale for all panels)");
    if (limit_max > 0 && !limit_drawn) {
        mem_figures_format(s, limit_max, limstr, sizeof limstr);
        zb_buf_puts(b, "; limit ");
        zb_buf_xml(b, limstr);
        zb_buf_puts(b, " is above the scale");
    } else if (limit_drawn) {
        zb_buf_puts(b, "; dashed red: limit");
    }
    zb_buf_puts(b, "</text>\n<g class=\"memory\">\n");
    y += 20;
    double gap = 6;
    for (int d = src->w.dev_lo; d <= src->w.dev_hi; d++) {
        double py = y + (d - src->w.dev_lo) * (L->mem_h + gap), base = py + L->mem_h;
        double ys = L->mem_h / top, floor_y = base - mf->static_mem[d] * ys;
        zb_buf_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#f7f7f7\" stroke=\"#ddd\" stroke-width=\"0.5\"/>\n",
                       L->plot_x, py, L->plot_w, L->mem_h);
        /* The y axis: ticks in the file's unit (GB for plans) with faint
         * grid lines across the panel. */
        zb_buf_puts(b, "<g class=\"mem-axis\" font-size=\"9\" fill=\"#444\" text-anchor=\"end\">");
        for (int k = 1; k <= AXIS_MAX_TICKS && k * step < top * 0.97; k++) {
            double v = k * step, ty = base - v * ys;
            char lab[64];
            fmt_mem_tick(src, v, top, lab, sizeof lab);
            zb_buf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\" stroke-width=\"0.6\"/>"
                           "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888\" stroke-width=\"0.6\"/>"
                           "<text class=\"mem-tick\" x=\"%.1f\" y=\"%.1f\">%s</text>",
                           L->plot_x, ty, L->plot_x + L->plot_w, ty, L->plot_x - 3, ty, L->plot_x, ty,
                           L->plot_x - 5, ty + 3, lab);
        }
        zb_buf_puts(b, "</g>\n");
        if (mf->has_static && mf->static_mem[d] > 0)
            zb_buf_printf(b, "<rect class=\"mem-static\" x=\"%.1f\" y=\"%.2f\" width=\"%.1f\" height=\"%.2f\" fill=\"%s\"/>\n",
                           L->plot_x, floor_y, L->plot_w, base - floor_y, TL_STATIC_FILL);
        sim_mem_point *pts = NULL;
        int n = 0;
        /* A device without ops has no curve (its first_start is 0, which
         * may lie far outside a measured run's clock). */
        if (s->dev[d].n_ops > 0 && viz_mem_curve(s, t, d, &pts, &n, err) != 0)
            return -1;
        double end_t = t->r.dev[d].last_end > (n > 0 ? pts[n - 1].t : 0) ? t->r.dev[d].last_end
                                                                          : (n > 0 ? pts[n - 1].t : 0);
        double from = n > 0 && pts[0].t > src->w.w0 ? pts[0].t : src->w.w0;
        double to = end_t < src->w.w1 ? end_t : src->w.w1;
        if (n > 0 && to > from) {
            /* The level at the window's start: the last change at or before it. */
            double level = 0;
            int i0 = 0;
            while (i0 < n && pts[i0].t <= from) {
                level = pts[i0].mem;
                i0++;
            }
            /* The same step path twice: once closed and filled down to the
             * static band, once as the outline. */
            for (int pass = 0; pass < 2; pass++) {
                zb_buf_puts(b, pass == 0 ? "<path class=\"mem-area\" fill=\"#c9b8e8\" d=\"M"
                                          : "<path class=\"mem-line\" fill=\"none\" stroke=\"#5b3a9e\" stroke-width=\"1\" d=\"M");
                zb_buf_num(b, tx(L, src, from));
                zb_buf_puts(b, " ");
                zb_buf_num(b, pass == 0 ? floor_y : floor_y - clampd(level, 0, top) * ys);
                if (pass == 0) {
                    zb_buf_puts(b, "V");
                    zb_buf_num(b, floor_y - clampd(level, 0, top) * ys);
                }
                for (int i = i0; i < n && pts[i].t < to; i++) {
                    zb_buf_puts(b, "H");
                    zb_buf_num(b, tx(L, src, pts[i].t));
                    zb_buf_puts(b, "V");
                    zb_buf_num(b, floor_y - clampd(pts[i].mem, 0, top) * ys);
                }
                zb_buf_puts(b, "H");
                zb_buf_num(b, tx(L, src, to));
                if (pass == 0) {
                    zb_buf_puts(b, "V");
                    zb_buf_num(b, floor_y);
                    zb_buf_puts(b, "Z");
                }
                zb_buf_puts(b, "\"/>\n");
            }
        }
        free(pts);
        if (limit_drawn && mf->has_limit && isfinite(mf->limit[d]) && mf->limit[d] > 0) {
            double ly = base - mf->limit[d] * ys;
            zb_buf_printf(b, "<line class=\"mem-limit\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#d62728\" "
                           "stroke-width=\"1.2\" stroke-dasharray=\"4 3\"/>\n",
                           L->plot_x, ly, L->plot_x + L->plot_w, ly);
        }
        /* The device's name inside the panel's corner, on a halo so that
         * the curve under it stays readable. */
        zb_buf_printf(b, "<text class=\"mem-dev\" x=\"%.1f\" y=\"%.1f\" font-size=\"9\" fill=\"#333\" "
                       "stroke=\"#f7f7f7\" stroke-width=\"2.5\" paint-order=\"stroke\">dev %d</text>\n",
                       L->plot_x + 4, py + 10, d);
        char peak[64];
        mem_figures_format(s, mf->total[d], peak, sizeof peak);
        int over = mf->has_limit && (mf->limit_is_total ? mf->total[d] : mf->activations[d]) > mf->limit[d];
        zb_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%.0f\" fill=\"%s\">peak ",
                       L->plot_x + L->plot_w + 6, py + L->mem_h / 2 + L->dev_font * 0.35, L->dev_font,
                       over ? "#d62728" : "#333");
        zb_buf_xml(b, peak);
        zb_buf_puts(b, "</text>\n");
    }
    zb_buf_puts(b, "</g>\n");
    int n_panels = src->w.dev_hi - src->w.dev_lo + 1;
    return y + n_panels * (L->mem_h + gap) - gap;
}

/* Wraps the body in the SVG root element, now that the height is known. */
static int svg_document(zb_buf *body, double width, double height, const char *title,
                        char **svg, size_t *len, zb_err *err)
{
    zb_buf doc = { 0 };
    zb_buf_printf(&doc, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                   "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                   "viewBox=\"0 0 %.0f %.0f\" font-family=\"%s\">\n<title>",
                   ceil(width), ceil(height), ceil(width), ceil(height), VIZ_FONT_FAMILY);
    zb_buf_xml(&doc, title);
    zb_buf_printf(&doc, "</title>\n<rect width=\"%.0f\" height=\"%.0f\" fill=\"#fff\"/>\n",
                   ceil(width), ceil(height));
    if (body->oom)
        doc.oom = 1;
    else if (body->data)
        zb_buf_puts(&doc, body->data);
    zb_buf_puts(&doc, "</svg>\n");
    zb_buf_free(body);
    return zb_buf_take(&doc, svg, len, err);
}

/* Draws n_src (1 or 2) timelines; memory panels only for a single one. */
static int render(tl_src *src, int n_src, const viz_view *view, char **svg, size_t *len,
                  zb_err *err)
{
    tl_layout L;
    for (int k = 0; k < n_src; k++)
        if (mem_figures_compute(src[k].s, &src[k].t.r, &src[k].mf, err))
            return -1;
    if (layout_compute(src, n_src, view, &L, err))
        return -1;
    zb_buf b = { 0 };
    double y = 22, right = 0; /* right: where the widest heading line ends */
    if (n_src == 1) {
        right = fmax(right, draw_heading(&b, 12, y, 16, &src[0]));
        right = fmax(right, draw_figures(&b, 12, y + 20, &src[0]));
        y = draw_view_notes(&b, 12, y + 24, &src[0], &right) + 10;
    } else {
        zb_buf_printf(&b, "<text x=\"12\" y=\"%.1f\" font-size=\"16\" font-weight=\"bold\" fill=\"#111\">", y);
        zb_buf_xml(&b, src[0].tag);
        zb_buf_puts(&b, " and ");
        zb_buf_xml(&b, src[1].tag);
        zb_buf_puts(&b, L.shared_scale ? " on one time scale</text>\n"
                                         : ", each on its own time scale</text>\n");
        if (!L.shared_scale) {
            zb_buf_printf(&b, "<text x=\"12\" y=\"%.1f\" font-size=\"12\" fill=\"#d62728\">"
                           "time units differ (", y + 18);
            zb_buf_xml(&b, src[0].s->time_unit);
            zb_buf_puts(&b, " vs ");
            zb_buf_xml(&b, src[1].s->time_unit);
            zb_buf_puts(&b, "): each timeline spans the full width; compare shapes, not lengths. "
                        "For one scale in ms, plan with measured costs: zbsched profile, then "
                        "zbsched search --profile</text>\n");
            y += 18;
        }
        y += 14;
    }
    y = draw_legend(&b, y, src, n_src, &L) + 14;
    for (int k = 0; k < n_src; k++) {
        if (n_src > 1) {
            right = fmax(right, draw_heading(&b, 12, y + 12, 13, &src[k]));
            right = fmax(right, draw_figures(&b, 12, y + 30, &src[k]));
            y = draw_view_notes(&b, 12, y + 34, &src[k], &right) + 6;
        }
        y = draw_lanes(&b, y, &src[k], &L);
        y = draw_axis(&b, y, &L, &src[k]) + 10;
    }
    if (n_src == 1) {
        y = draw_memory(&b, y + 4, &src[0], &L, err);
        if (y < 0) {
            zb_buf_free(&b);
            return -1;
        }
        y += 12;
    }
    const char *name = src[0].s->name[0] ? src[0].s->name : "schedule";
    /* No heading line runs off the picture (the plot keeps its width). */
    return svg_document(&b, fmax(L.width, right + 12), y, name, svg, len, err);
}

static void src_free(tl_src *src)
{
    viz_times_free(&src->t);
    mem_figures_free(&src->mf);
}

int viz_svg_timeline_view(const sched_t *s, const viz_view *v, char **svg, size_t *len,
                          zb_err *err)
{
    tl_src src = { .s = s };
    if (viz_times_compute(s, &src.t, err) != 0)
        return -1;
    int rc = render(&src, 1, v, svg, len, err);
    src_free(&src);
    return rc;
}

int viz_svg_timeline(const sched_t *s, char **svg, size_t *len, zb_err *err)
{
    return viz_svg_timeline_view(s, NULL, svg, len, err);
}

int viz_svg_compare_view(const sched_t *top, const char *top_label,
                         const sched_t *bottom, const char *bottom_label, const viz_view *v,
                         char **svg, size_t *len, zb_err *err)
{
    tl_src src[2] = {
        { .s = top, .tag = top_label ? top_label : "top" },
        { .s = bottom, .tag = bottom_label ? bottom_label : "bottom" },
    };
    if (viz_times_compute(top, &src[0].t, err) != 0)
        return zb_wrap(err, "%s: ", src[0].tag);
    if (viz_times_compute(bottom, &src[1].t, err) != 0) {
        src_free(&src[0]);
        return zb_wrap(err, "%s: ", src[1].tag);
    }
    int rc = render(src, 2, v, svg, len, err);
    src_free(&src[0]);
    src_free(&src[1]);
    return rc;
}

int viz_svg_compare(const sched_t *top, const char *top_label,
                    const sched_t *bottom, const char *bottom_label,
                    char **svg, size_t *len, zb_err *err)
{
    return viz_svg_compare_view(top, top_label, bottom, bottom_label, NULL, svg, len, err);
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
