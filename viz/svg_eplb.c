/*
 * svg_eplb.c: per-GPU expert load before and after balancing, as SVG
 * (svg_eplb.h).
 *
 * Sizes adapt to the shape so that DeepSeek-V3 (32 GPUs in 4 nodes, 61
 * layers) and a toy case (8 GPUs, 2 layers) both read well: bar widths
 * shrink with the GPU count down to a few pixels, heat-map rows shrink with
 * the layer count.  The heat map has no tooltips (4,000 cells at DeepSeek
 * scale would triple the file); the bar chart's bars do.
 *
 * Every bar is a <rect class="bar-before"> or <rect class="bar-after">,
 * every heat-map cell a <rect class="cell">, every node band a
 * <rect class="node">, so tests can count them.
 */
#include "viz/svg_eplb.h"

#include <math.h>
#include <stdio.h>

#include "src/text_buf.h"
#include "viz/font.h"

#define BEFORE_FILL "#9e9e9e" /* the plain layout: neutral grey */
#define AFTER_FILL "#397AF2"  /* the placement: the timeline's F blue */
#define NODE_FILL "#f3f3f3"   /* band behind a node's GPUs */

/* Heat-map colour of a load that is `ratio` times the layer's mean: white
 * at 0, blue at 1, dark red at 2 and above, linear in between. */
static void heat_color(double ratio, char out[8])
{
    static const double stops[3][3] = { { 255, 255, 255 }, { 107, 174, 214 }, { 165, 0, 38 } };
    double t = ratio < 0 ? 0 : ratio > 2 ? 2 : ratio;
    int i = t < 1 ? 0 : 1;
    double f = t - i;
    int rgb[3];
    for (int k = 0; k < 3; k++)
        rgb[k] = (int)lround(stops[i][k] + f * (stops[i + 1][k] - stops[i][k]));
    snprintf(out, 8, "#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
}

/* A load as an axis label: whole numbers from 100 up (token counts), else
 * four significant digits. */
static void fmt_load(double v, char *out, size_t cap)
{
    snprintf(out, cap, v >= 100 && v < 1e9 ? "%.0f" : "%.4g", v);
}

static double row_mean(const double *row, int n)
{
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += row[i];
    return sum / n;
}

/* Node of GPU g: floor(g N / M), as solver/eplb.h places GPUs on nodes
 * (contiguous, nearly equal nodes when N does not divide M). */
static int node_of(int g, int M, int N)
{
    return (int)((long)g * N / M);
}

/* The first GPU of node n (ceil(n M / N)); node_of's inverse. */
static int node_first(int n, int M, int N)
{
    return (int)(((long)n * M + N - 1) / N);
}

/* The bar chart of one layer at (x0, y0); returns its height. */
static double draw_bars(zb_buf *b, const viz_eplb_input *in, double x0, double y0, double cw,
                        double node_gap)
{
    const int M = in->n_gpus, N = in->n_nodes, l = in->layer;
    const double *before = in->gpu_before + (size_t)l * M, *after = in->gpu_after + (size_t)l * M;
    const double chart_h = 200, bar_w = cw * 0.4;
    double top = 0;
    for (int g = 0; g < M; g++) {
        top = before[g] > top ? before[g] : top;
        top = after[g] > top ? after[g] : top;
    }
    if (top <= 0)
        top = 1;
    double mean = row_mean(after, M);
    zb_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\" font-weight=\"bold\">", x0, y0 + 14);
    zb_buf_printf(b, "Layer %d: load per GPU, balance (max / mean) %.3f before, %.3f after</text>\n",
                   l, in->balance_before[l], in->balance_after[l]);
    double cy = y0 + 30, base = cy + chart_h;
    double width = M * cw + (in->n_nodes - 1) * node_gap;
    /* Node bands and labels. */
    for (int n = 0; n < N; n++) {
        int first = node_first(n, M, N), count = node_first(n + 1, M, N) - first;
        double nx = x0 + first * cw + n * node_gap;
        zb_buf_printf(b, "<rect class=\"node\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>",
                       nx, cy, count * cw, chart_h, NODE_FILL);
        zb_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">node %d</text>\n",
                       nx + count * cw / 2, base + 28, n);
    }
    /* Axis: 0, half and the top value. */
    for (int k = 0; k <= 2; k++) {
        double v = top * k / 2, y = base - chart_h * k / 2;
        zb_buf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ccc\" stroke-width=\"0.5\"/>",
                       x0 - 4, y, x0 + width, y);
        char label[32];
        fmt_load(v, label, sizeof label);
        zb_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\">%s</text>\n",
                       x0 - 6, y + 3, label);
    }
    for (int g = 0; g < M; g++) {
        double gx = x0 + g * cw + node_of(g, M, N) * node_gap + cw * 0.1;
        double hb = chart_h * before[g] / top, ha = chart_h * after[g] / top;
        zb_buf_printf(b, "<rect class=\"bar-before\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\">"
                       "<title>GPU %d before: %.6g</title></rect>",
                       gx, base - hb, bar_w, hb, BEFORE_FILL, g, before[g]);
        zb_buf_printf(b, "<rect class=\"bar-after\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\">"
                       "<title>GPU %d after: %.6g</title></rect>\n",
                       gx + bar_w, base - ha, bar_w, ha, AFTER_FILL, g, after[g]);
        if (cw >= 14 || g == node_first(node_of(g, M, N), M, N))
            zb_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\" text-anchor=\"middle\">%d</text>",
                           gx + bar_w, base + 12, g);
    }
    double my = base - chart_h * mean / top;
    zb_buf_printf(b, "\n<line class=\"mean\" x1=\"%.1f\" y1=\"%.2f\" x2=\"%.1f\" y2=\"%.2f\" stroke=\"#000\" "
                   "stroke-width=\"1\" stroke-dasharray=\"4 3\"/>",
                   x0, my, x0 + width, my);
    char label[32];
    fmt_load(mean, label, sizeof label);
    zb_buf_printf(b, "<text x=\"%.1f\" y=\"%.2f\" font-size=\"10\">mean %s</text>\n", x0 + width + 4,
                   my + 3, label);
    /* Legend. */
    double ly = base + 44;
    zb_buf_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"10\" fill=\"%s\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">before: expert e on GPU e\xc2\xb7M/E, no replicas</text>",
                   x0, ly, BEFORE_FILL, x0 + 16, ly + 9);
    zb_buf_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"10\" fill=\"%s\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">after: EPLB placement</text>\n",
                   x0 + 260, ly, AFTER_FILL, x0 + 276, ly + 9);
    return ly + 16 - y0;
}

/* One heat-map block (before or after) at (x0, y0). */
static void draw_heat(zb_buf *b, const viz_eplb_input *in, const double *table, const char *label,
                      double x0, double y0, double hw, double hh)
{
    const int M = in->n_gpus, N = in->n_nodes;
    zb_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">%s</text>\n", x0, y0 - 4, label);
    for (int l = 0; l < in->n_layers; l++) {
        const double *row = table + (size_t)l * M;
        double mean = row_mean(row, M);
        for (int g = 0; g < M; g++) {
            char fill[8];
            heat_color(mean > 0 ? row[g] / mean : 0, fill);
            zb_buf_printf(b, "<rect class=\"cell\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>",
                           x0 + g * hw + node_of(g, M, N) * 3.0, y0 + l * hh, hw, hh, fill);
        }
        zb_buf_puts(b, "\n");
    }
}

int viz_svg_eplb(const viz_eplb_input *in, char **svg, size_t *len, zb_err *err)
{
    if (in->n_layers < 1 || in->n_gpus < 1 || in->n_nodes < 1 || in->n_nodes > in->n_gpus)
        return zb_fail(err, "eplb picture: %d layers, %d GPUs, %d nodes is not a valid shape",
                       in->n_layers, in->n_gpus, in->n_nodes);
    if (in->layer < 0 || in->layer >= in->n_layers)
        return zb_fail(err, "eplb picture: layer %d is out of range (0..%d)", in->layer,
                       in->n_layers - 1);
    const int M = in->n_gpus, L = in->n_layers;
    double cw = 640.0 / M;
    cw = cw > 40 ? 40 : cw < 6 ? 6 : cw;
    double node_gap = cw * 0.5 > 6 ? cw * 0.5 : 6;
    double hw = 300.0 / M, hh = 400.0 / L;
    hw = hw > 16 ? 16 : hw < 3 ? 3 : hw;
    hh = hh > 12 ? 12 : hh < 2 ? 2 : hh;
    double margin = 70, bars_w = M * cw + (in->n_nodes - 1) * node_gap + 80;
    double heat_w = M * hw + (in->n_nodes - 1) * 3.0;
    double width = margin + (bars_w > 2 * heat_w + 40 ? bars_w : 2 * heat_w + 40) + 20;
    if (width < 680) /* room for the headings */
        width = 680;
    if (in->subtitle && margin + viz_text_width(in->subtitle, 11, 0) + 20 > width)
        width = ceil(margin + viz_text_width(in->subtitle, 11, 0) + 20);

    zb_buf body = { 0 };
    double y = 50;
    y += draw_bars(&body, in, margin, y, cw, node_gap) + 30;
    zb_buf_printf(&body, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"13\" font-weight=\"bold\">"
                   "All %d layers: each GPU's load over its layer's mean</text>\n", margin, y, L);
    y += 28;
    draw_heat(&body, in, in->gpu_before, "before", margin, y, hw, hh);
    draw_heat(&body, in, in->gpu_after, "after", margin + heat_w + 40, y, hw, hh);
    zb_buf_printf(&body, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\" text-anchor=\"end\">layer 0</text>",
                   margin - 4, y + hh);
    zb_buf_printf(&body, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\" text-anchor=\"end\">%d</text>\n",
                   margin - 4, y + L * hh, L - 1);
    y += L * hh + 16;
    /* Colour key: 0, 1x, 2x the mean. */
    for (int k = 0; k <= 40; k++) {
        char fill[8];
        heat_color(k / 20.0, fill);
        zb_buf_printf(&body, "<rect x=\"%.1f\" y=\"%.1f\" width=\"4\" height=\"10\" fill=\"%s\"/>",
                       margin + k * 4, y, fill);
    }
    zb_buf_printf(&body, "\n<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\">0</text>"
                   "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"middle\">mean</text>"
                   "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\">2\xc3\x97 mean or more</text>\n",
                   margin, y + 22, margin + 82, y + 22, margin + 170, y + 9);
    y += 36;

    zb_buf doc = { 0 };
    zb_buf_printf(&doc, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                   "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                   "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\">\n<title>",
                   width, y, width, y);
    zb_buf_puts(&doc, "Expert load per GPU before and after EPLB");
    zb_buf_printf(&doc, "</title>\n<rect width=\"%.0f\" height=\"%.0f\" fill=\"#fff\"/>\n", width, y);
    zb_buf_printf(&doc, "<text x=\"%.1f\" y=\"22\" font-size=\"16\" font-weight=\"bold\">"
                   "Expert load per GPU before and after EPLB</text>\n", margin);
    if (in->subtitle) {
        zb_buf_printf(&doc, "<text x=\"%.1f\" y=\"40\" font-size=\"11\">", margin);
        zb_buf_xml(&doc, in->subtitle);
        zb_buf_puts(&doc, "</text>\n");
    }
    if (body.oom)
        doc.oom = 1;
    else if (body.data)
        zb_buf_puts(&doc, body.data);
    zb_buf_free(&body);
    zb_buf_puts(&doc, "</svg>\n");
    return zb_buf_take(&doc, svg, len, err);
}
