/*
 * test_svg.c: the SVG timeline and the predicted-vs-measured comparison.
 * Checks that output is valid XML (xmllint), has exactly one op box per op
 * with the right kind, shows the paper's figures for ZB-H1 and 1F1B, shades
 * chunks, gives each op kind its own colour that matches its legend swatch,
 * draws memory limits, follows measured times, thins labels without
 * overlaps at p=32, m=256, escapes text, is byte-stable (across processes
 * of their own: same_bytes_twice), and refuses invalid schedules.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "src/sim.h"
#include "tests/viz/viz_fixtures.h"
#include "tests/viz/viz_testutil.h"
#include "viz/palette.h"
#include "viz/viz.h"

/* Renders s, asserting success; returns the document (caller frees). */
static char *render(const sched_t *s, size_t *len)
{
    zb_err err = { 0 };
    char *svg = NULL;
    size_t n = 0;
    ck_assert_msg(viz_svg_timeline(s, &svg, &n, &err) == 0, "render failed: %s", err.msg);
    ck_assert_ptr_nonnull(svg);
    ck_assert_uint_eq(strlen(svg), n);
    if (len)
        *len = n;
    return svg;
}

START_TEST(zb_h1_boxes_and_figures)
{
    sched_t *s = fixture_zb_h1(4, 8);
    size_t n;
    char *svg = render(s, &n);
    ck_assert(tu_xml_valid(svg, n));
    ck_assert_int_eq(tu_count(svg, "class=\"op "), sched_op_count(s));
    ck_assert_int_eq(tu_count(svg, "class=\"op op-F\""), 32);
    ck_assert_int_eq(tu_count(svg, "class=\"op op-B\""), 32);
    ck_assert_int_eq(tu_count(svg, "class=\"op op-W\""), 32);
    ck_assert_int_eq(tu_count(svg, "class=\"op op-BW\""), 0);
    /* Every box is wide enough for its number at this size. */
    ck_assert_int_eq(tu_count(svg, "class=\"mb\""), 96);
    /* ZB-H1 with unit costs: bubble (p-1)(T_F+T_B-T_W) = 3, cost 24 + 3. */
    ck_assert_ptr_nonnull(strstr(svg, "cost 27 units"));
    ck_assert_ptr_nonnull(strstr(svg, "bubble rate 11.1%"));
    ck_assert_ptr_nonnull(strstr(svg, "peak activation memory 8 units (device 0)"));
    ck_assert_ptr_nonnull(strstr(svg, "simulated"));
    ck_assert_int_eq(tu_count(svg, "class=\"lane\""), 4);
    ck_assert_int_eq(tu_count(svg, "class=\"mem-line\""), 4);
    /* Standalone: the font the labels are measured in, falling back to
     * the generic family; no scripts or external references. */
    ck_assert_ptr_nonnull(strstr(svg, "font-family=\"DejaVu Sans, Verdana, sans-serif\""));
    ck_assert_ptr_null(strstr(svg, "<script"));
    ck_assert_ptr_null(strstr(svg, "href"));
    ck_assert_ptr_null(strstr(svg, "@import"));
    free(svg);
    sched_free(s);
}
END_TEST

/* Byte-stable: the same picture from this process's library call and from
 * two runs of `zbsched render`, each a process of its own (other addresses
 * under ASLR), with different bytes in fresh and freed memory
 * (MALLOC_PERTURB_), started a second apart.  A picture that depended on
 * an address, the clock or uninitialised memory would differ somewhere. */
START_TEST(same_bytes_twice)
{
    sched_t *s = fixture_v(3, 5);
    size_t n0, n1, n2;
    char *here = render(s, &n0);
    char *a = tu_render_elsewhere(s, "svg", 0x11, &n1);
    sleep(1);
    char *b = tu_render_elsewhere(s, "svg", 0xee, &n2);
    ck_assert_uint_eq(n1, n2);
    ck_assert_msg(memcmp(a, b, n1) == 0, "two runs of render drew different bytes");
    ck_assert_uint_eq(n0, n1);
    ck_assert_msg(memcmp(here, a, n0) == 0, "render and the library drew different bytes");
    free(here);
    free(a);
    free(b);
    sched_free(s);
}
END_TEST

START_TEST(one_f_one_b_fused_backward)
{
    sched_t *s = fixture_1f1b(4, 8);
    char *svg = render(s, NULL);
    ck_assert_int_eq(tu_count(svg, "class=\"op op-BW\""), 32);
    ck_assert_int_eq(tu_count(svg, "class=\"op op-F\""), 32);
    /* 1F1B: bubble (p-1)(T_F+T_B+T_W) = 9 on top of 24. */
    ck_assert_ptr_nonnull(strstr(svg, "cost 33 units"));
    ck_assert_ptr_nonnull(strstr(svg, "BW full backward"));
    ck_assert_ptr_null(strstr(svg, "W weight gradient"));
    free(svg);
    sched_free(s);
}
END_TEST

/* One micro-batch label parsed back from the SVG. */
typedef struct label {
    double x, y, font; /* centre, baseline, size */
    int chars;         /* digits */
} label;

static int label_cmp(const void *pa, const void *pb)
{
    const label *a = pa, *b = pb;
    if (a->y != b->y)
        return a->y < b->y ? -1 : 1;
    return a->x < b->x ? -1 : a->x > b->x;
}

START_TEST(large_schedule_thins_labels_without_overlap)
{
    sched_t *s = fixture_1f1b(32, 256);
    size_t n;
    char *svg = render(s, &n);
    long ops = sched_op_count(s);
    ck_assert_int_eq(tu_count(svg, "class=\"op "), ops);
    double width = 0;
    ck_assert_int_eq(sscanf(strstr(svg, "<svg "), "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%lf\"", &width), 1);
    ck_assert_msg(width > 0 && width <= 2000, "width %g", width);
    long n_labels = tu_count(svg, "class=\"mb\"");
    ck_assert_int_lt(n_labels, ops);

    /* Each label sits inside the box drawn just before it on its line, and
     * no two labels of one lane overlap. */
    label *lab = malloc(sizeof *lab * (size_t)(n_labels + 1));
    long k = 0;
    for (char *line = svg, *next; line && *line; line = next) {
        /* Cut the document into lines so each search stays on one. */
        char *eol = strchr(line, '\n');
        next = eol ? eol + 1 : NULL;
        if (eol)
            *eol = '\0';
        char *t = strstr(line, "<text class=\"mb\"");
        if (!t)
            continue;
        double rx, rw, x, y, f;
        char digits[16];
        ck_assert_int_eq(sscanf(strstr(line, " x=\""), " x=\"%lf\"", &rx), 1);
        ck_assert_int_eq(sscanf(strstr(line, " width=\""), " width=\"%lf\"", &rw), 1);
        ck_assert_int_eq(sscanf(t, "<text class=\"mb\" x=\"%lf\" y=\"%lf\" font-size=\"%lf\"", &x, &y, &f), 3);
        ck_assert_int_eq(sscanf(strchr(t, '>') + 1, "%15[0-9]", digits), 1);
        double half = strlen(digits) * f * 0.6 / 2;
        ck_assert_msg(x - half >= rx - 0.01 && x + half <= rx + rw + 0.01,
                      "label %s at %g does not fit box [%g, %g]", digits, x, rx, rx + rw);
        lab[k++] = (label){ x, y, f, (int)strlen(digits) };
    }
    ck_assert_int_eq(k, n_labels);
    qsort(lab, (size_t)k, sizeof *lab, label_cmp);
    for (long i = 1; i < k; i++) {
        if (lab[i].y != lab[i - 1].y)
            continue;
        double need = (lab[i].chars * lab[i].font + lab[i - 1].chars * lab[i - 1].font) * 0.6 / 2;
        ck_assert_msg(lab[i].x - lab[i - 1].x >= need, "labels overlap at x=%g, y=%g", lab[i].x, lab[i].y);
    }
    free(lab);
    free(svg);
    svg = render(s, &n); /* the parse above cut the first copy into lines */
    ck_assert(tu_xml_valid(svg, n));
    free(svg);
    sched_free(s);
}
END_TEST

START_TEST(chunks_are_shaded)
{
    sched_t *s = fixture_v(4, 6);
    char *svg = render(s, NULL);
    viz_color c0 = viz_op_color(OP_F, 0, 2), c1 = viz_op_color(OP_F, 1, 2);
    ck_assert_str_ne(c0.fill, c1.fill);
    /* The paper's convention: white text on the first chunk, black on the second. */
    ck_assert_str_eq(c0.text, "#ffffff");
    ck_assert_str_eq(c1.text, "#000000");
    char pat[64];
    snprintf(pat, sizeof pat, "op-F\" x=");
    ck_assert_int_eq(tu_count(svg, pat), 48);
    snprintf(pat, sizeof pat, "fill=\"%s\"><title>F", c0.fill);
    ck_assert_int_eq(tu_count(svg, pat), 24);
    snprintf(pat, sizeof pat, "fill=\"%s\"><title>F", c1.fill);
    ck_assert_int_eq(tu_count(svg, pat), 24);
    ck_assert_ptr_nonnull(strstr(svg, "2 chunks per device"));
    free(svg);
    sched_free(s);
}
END_TEST

#define MAX_CHUNKS 8

/* Legend swatches and op boxes parsed back from an SVG timeline. */
typedef struct colour_map {
    char key[OP_KIND_COUNT][MAX_CHUNKS][8]; /* legend fill per kind and chunk, "" when absent */
    int n_keys;                             /* swatches for op kinds */
    char idle[8];                           /* fill of the idle swatch */
    long ops[OP_KIND_COUNT];                /* op boxes per kind */
} colour_map;

/* The op kind named by the n bytes at p, or -1. */
static int kind_named(const char *p, size_t n)
{
    for (int k = 0; k < OP_KIND_COUNT; k++) {
        const char *name = op_kind_name((op_kind)k);
        if (strlen(name) == n && !strncmp(name, p, n))
            return k;
    }
    return -1;
}

/* Copies the "#rrggbb" fill of the tag that starts at tag into out. */
static void tag_fill(const char *tag, char out[8])
{
    const char *end = strchr(tag, '>'), *f = strstr(tag, " fill=\"");
    ck_assert_msg(f && end && f < end, "tag without fill: %.60s", tag);
    ck_assert_int_eq(sscanf(f, " fill=\"%7[#0-9a-f]\"", out), 1);
    ck_assert_uint_eq(strlen(out), 7);
}

/* Parses the legend and every op box of svg, and checks the two against
 * each other: each box has the fill of the swatch of its kind and chunk
 * (named by its tooltip), and the text after a kind's swatches names that
 * kind. */
static void parse_colours(const char *svg, colour_map *cm)
{
    memset(cm, 0, sizeof *cm);
    const char *idle = strstr(svg, "<rect class=\"key key-idle\"");
    ck_assert_ptr_nonnull(idle);
    tag_fill(idle, cm->idle);
    for (const char *p = svg; (p = strstr(p, "<rect class=\"key key-")) != NULL; p++) {
        const char *name = p + strlen("<rect class=\"key key-");
        size_t n = strcspn(name, " \"");
        if (!strncmp(name, "idle\"", 5))
            continue;
        int kind = kind_named(name, n), chunk = -1;
        ck_assert_msg(kind >= 0, "legend swatch of unknown kind: %.40s", p);
        ck_assert_int_eq(sscanf(name + n, " chunk-%d\"", &chunk), 1);
        ck_assert(chunk >= 0 && chunk < MAX_CHUNKS);
        ck_assert_msg(!cm->key[kind][chunk][0], "two swatches for %s chunk %d", op_kind_name(kind), chunk);
        tag_fill(p, cm->key[kind][chunk]);
        cm->n_keys++;
        /* The next legend label (12 px text) after the swatches names the kind. */
        const char *lab = strstr(p, "font-size=\"12\" fill=\"#222\">");
        const char *next_key = strstr(p + 1, "<rect class=\"key");
        ck_assert_ptr_nonnull(lab);
        if (!next_key || lab < next_key) {
            lab = strchr(lab, '>') + 1;
            ck_assert_msg(!strncmp(lab, op_kind_name(kind), strlen(op_kind_name(kind))) &&
                          lab[strlen(op_kind_name(kind))] == ' ',
                          "legend label '%.20s' after the %s swatch", lab, op_kind_name(kind));
        }
    }
    for (const char *p = svg; (p = strstr(p, "<rect class=\"op op-")) != NULL; p++) {
        const char *name = p + strlen("<rect class=\"op op-");
        int kind = kind_named(name, strcspn(name, "\""));
        ck_assert_msg(kind >= 0, "op box of unknown kind: %.40s", p);
        char fill[8];
        tag_fill(p, fill);
        const char *title = strstr(p, "<title>");
        ck_assert_ptr_nonnull(title);
        title += strlen("<title>");
        size_t kn = strlen(op_kind_name(kind));
        ck_assert_msg(!strncmp(title, op_kind_name(kind), kn), "box of kind %s titled %.20s",
                      op_kind_name(kind), title);
        int mb, stage, chunk = 0;
        if (OP_IS_VOCAB(kind)) /* a vocabulary shard, no chunk */
            ck_assert_int_eq(sscanf(title + kn, "%d vocabulary shard %d:", &mb, &stage), 2);
        else
            ck_assert_int_eq(sscanf(title + kn, "%d stage %d chunk %d:", &mb, &stage, &chunk), 3);
        ck_assert(chunk >= 0 && chunk < MAX_CHUNKS);
        ck_assert_msg(cm->key[kind][chunk][0], "no legend swatch for %s chunk %d", op_kind_name(kind), chunk);
        ck_assert_msg(!strcmp(fill, cm->key[kind][chunk]), "%s%d stage %d drawn %s, legend says %s",
                      op_kind_name(kind), mb, stage, fill, cm->key[kind][chunk]);
        cm->ops[kind]++;
    }
}

/* Squared RGB distance between two "#rrggbb" colours. */
static long colour_dist2(const char *a, const char *b)
{
    unsigned ca[3], cb[3];
    ck_assert_int_eq(sscanf(a, "#%2x%2x%2x", &ca[0], &ca[1], &ca[2]), 3);
    ck_assert_int_eq(sscanf(b, "#%2x%2x%2x", &cb[0], &cb[1], &cb[2]), 3);
    long d2 = 0;
    for (int i = 0; i < 3; i++)
        d2 += ((long)ca[i] - (long)cb[i]) * ((long)ca[i] - (long)cb[i]);
    return d2;
}

/* Every swatch of a picture is a different colour, none is the idle grey,
 * and two kinds on the same chunk differ clearly (at least 32 apart in
 * RGB; the palette's closest pair, F and B on the lightest chunk, is 41).
 * The vocabulary passes (S, T) belong to no chunk: one colour each, so
 * only their chunk 0 counts. */
static void check_distinct(const colour_map *cm, int n_chunks)
{
    for (int k = 0; k < OP_KIND_COUNT; k++)
        for (int c = 0; c < n_chunks; c++) {
            const char *a = cm->key[k][c];
            if (!a[0] || (OP_IS_VOCAB(k) && c > 0))
                continue;
            ck_assert_str_ne(a, cm->idle);
            for (int k2 = 0; k2 < OP_KIND_COUNT; k2++)
                for (int c2 = 0; c2 < n_chunks; c2++) {
                    const char *b = cm->key[k2][c2];
                    if (!b[0] || (k2 == k && c2 == c) || (OP_IS_VOCAB(k2) && c2 > 0))
                        continue;
                    ck_assert_msg(strcmp(a, b) != 0, "%s chunk %d and %s chunk %d share %s",
                                  op_kind_name(k), c, op_kind_name(k2), c2, a);
                    if (c2 == c)
                        ck_assert_msg(colour_dist2(a, b) >= 32 * 32, "%s and %s look alike on chunk %d",
                                      op_kind_name(k), op_kind_name(k2), c);
                }
        }
}

/* Every pipeline op kind gets its own colour, the one its legend swatch
 * shows: pictures with all four kinds, on one chunk per device and on two
 * (V).  The vocabulary passes are checked in tests/core/test_vocab.c. */
START_TEST(each_kind_has_its_legend_colour)
{
    sched_t *plain = fixture_zb_h1(4, 8), *v = fixture_v(2, 4);
    fixture_fuse_even(plain);
    fixture_fuse_even(v);
    sched_t *all[] = { plain, v };
    for (int i = 0; i < 2; i++) {
        sched_t *s = all[i];
        int n_chunks = s->n_stages / s->n_devices;
        long want[OP_KIND_COUNT] = { 0 };
        for (int d = 0; d < s->n_devices; d++)
            for (int j = 0; j < s->dev[d].n_ops; j++)
                want[s->dev[d].ops[j].kind]++;
        size_t n;
        char *svg = render(s, &n);
        ck_assert(tu_xml_valid(svg, n));
        colour_map cm;
        parse_colours(svg, &cm);
        ck_assert_int_eq(cm.n_keys, OP_PIPE_KIND_COUNT * n_chunks);
        for (int k = 0; k < OP_PIPE_KIND_COUNT; k++) {
            ck_assert_msg(want[k] > 0, "fixture %d lacks %s", i, op_kind_name(k));
            ck_assert_int_eq(cm.ops[k], want[k]);
            for (int c = 0; c < n_chunks; c++)
                ck_assert_str_eq(cm.key[k][c], viz_op_color((op_kind)k, c, n_chunks).fill);
        }
        check_distinct(&cm, n_chunks);
        free(svg);
    }
    /* A comparison shares one legend across both blocks. */
    sched_t *meas = sched_clone(plain);
    ck_assert_int_eq(fixture_add_times(meas), 0);
    zb_err err = { 0 };
    char *svg = NULL;
    size_t n;
    ck_assert_int_eq(viz_svg_compare(plain, "predicted", meas, "measured", &svg, &n, &err), 0);
    colour_map cm;
    parse_colours(svg, &cm);
    ck_assert_int_eq(cm.n_keys, OP_PIPE_KIND_COUNT);
    ck_assert_int_eq(cm.ops[OP_W], 2 * 16);
    free(svg);
    sched_free(meas);
    sched_free(plain);
    sched_free(v);
}
END_TEST

/* The palette itself, for every kind (including any added later) and up to
 * MAX_CHUNKS chunks: all colours of one picture are distinct, and kinds on
 * the same chunk stay clearly apart. */
/* The vocabulary passes get their own colours too, each the one its
 * legend swatch shows, distinct from every pipeline kind's: p=2, m=1,
 * device 0 F0 S0 T0 BW0, device 1 F0 S0 BW0 T0 (Vocab-1). */
START_TEST(vocab_passes_have_their_legend_colour)
{
    sched_t *s = sched_new(2, 1, 2);
    ck_assert_ptr_nonnull(s);
    sched_place_interleaved(s);
    sched_set_costs(s, 1, 1, 1, 0.1);
    sched_set_vocab(s, SCHED_VOCAB_1, 0.5, 0.5, 1, -1, 0.25, 0.125);
    static const struct { int dev, kind, stage; } ops[] = {
        { 0, OP_F, 0 }, { 0, OP_S, 0 }, { 0, OP_T, 0 }, { 0, OP_BW, 0 },
        { 1, OP_F, 1 }, { 1, OP_S, 1 }, { 1, OP_BW, 1 }, { 1, OP_T, 1 },
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        ck_assert_int_eq(sched_push(s, ops[i].dev, (op_kind)ops[i].kind, ops[i].stage, 0), 0);
    size_t n;
    char *svg = render(s, &n);
    ck_assert(tu_xml_valid(svg, n));
    colour_map cm;
    parse_colours(svg, &cm); /* every box's fill equals its kind's swatch */
    ck_assert_int_eq(cm.ops[OP_S], 2);
    ck_assert_int_eq(cm.ops[OP_T], 2);
    ck_assert_str_eq(cm.key[OP_S][0], viz_op_color(OP_S, 0, 1).fill);
    ck_assert_str_eq(cm.key[OP_T][0], viz_op_color(OP_T, 0, 1).fill);
    check_distinct(&cm, 1);
    free(svg);
    sched_free(s);
}
END_TEST

START_TEST(palette_kinds_distinct)
{
    for (int n_chunks = 1; n_chunks <= MAX_CHUNKS; n_chunks++) {
        colour_map cm;
        memset(&cm, 0, sizeof cm);
        strcpy(cm.idle, VIZ_IDLE_FILL);
        for (int k = 0; k < OP_KIND_COUNT; k++)
            for (int c = 0; c < n_chunks; c++) {
                viz_color col = viz_op_color((op_kind)k, c, n_chunks);
                ck_assert_uint_eq(strlen(col.fill), 7);
                ck_assert_str_ne(col.fill, col.text);
                strcpy(cm.key[k][c], col.fill);
            }
        check_distinct(&cm, n_chunks);
    }
}
END_TEST

START_TEST(memory_limit_drawn_or_stated)
{
    sched_t *s = fixture_zb_h1(4, 8);
    s->mem_limit = malloc(sizeof(double) * 4);
    for (int d = 0; d < 4; d++)
        s->mem_limit[d] = 8;
    char *svg = render(s, NULL);
    ck_assert_int_eq(tu_count(svg, "class=\"mem-limit\""), 4);
    ck_assert_ptr_nonnull(strstr(svg, "dashed red: limit"));
    free(svg);
    /* A limit far above the peak is stated in words, not drawn. */
    for (int d = 0; d < 4; d++)
        s->mem_limit[d] = 1000;
    svg = render(s, NULL);
    ck_assert_int_eq(tu_count(svg, "class=\"mem-limit\""), 0);
    ck_assert_ptr_nonnull(strstr(svg, "limit 1000 units is above the scale"));
    free(svg);
    /* Over the limit: the peak label turns red. */
    for (int d = 0; d < 4; d++)
        s->mem_limit[d] = 6;
    svg = render(s, NULL);
    ck_assert_int_eq(tu_count(svg, "fill=\"#d62728\">peak"), 2); /* devices 0 and 1 exceed 6 */
    free(svg);
    sched_free(s);
}
END_TEST

/* x and width of the n-th op rect (0-based) in document order. */
static void nth_op_box(const char *svg, int n, double *x, double *w)
{
    const char *p = svg;
    for (int i = 0; i <= n; i++) {
        p = strstr(p, "class=\"op ");
        ck_assert_ptr_nonnull(p);
        p++;
    }
    ck_assert_int_eq(sscanf(strstr(p, " x=\""), " x=\"%lf\"", x), 1);
    ck_assert_int_eq(sscanf(strstr(p, " width=\""), " width=\"%lf\"", w), 1);
}

START_TEST(measured_times_are_used)
{
    sched_t *s = fixture_zb_h1(4, 8);
    ck_assert_int_eq(fixture_add_times(s), 0);
    char *svg = render(s, NULL);
    ck_assert_ptr_nonnull(strstr(svg, ">measured"));
    ck_assert_int_eq(tu_count(svg, "class=\"op "), 96);
    /* Device 0: op 0 lasts 1.0, op 1 lasts 1.1 and starts 0.25 after op 0 ends. */
    double x0, w0, x1, w1;
    nth_op_box(svg, 0, &x0, &w0);
    nth_op_box(svg, 1, &x1, &w1);
    ck_assert_double_eq_tol(w1 / w0, 1.1, 1e-3);
    ck_assert_double_eq_tol((x1 - x0) / w0, 1.25, 1e-3);
    free(svg);
    /* Bad measured times are refused, not drawn. */
    s->dev[1].end[3] = s->dev[1].start[3] - 1;
    zb_err err = { 0 };
    char *out = NULL;
    size_t n;
    ck_assert_int_eq(viz_svg_timeline(s, &out, &n, &err), -1);
    ck_assert_ptr_null(out);
    ck_assert_ptr_nonnull(strstr(err.msg, "device 1, op 3"));
    sched_free(s);
}
END_TEST

START_TEST(compare_on_one_scale)
{
    sched_t *pred = fixture_zb_h1(4, 8), *meas = fixture_zb_h1(4, 8);
    ck_assert_int_eq(fixture_add_times(meas), 0);
    zb_err err = { 0 };
    char *svg = NULL;
    size_t n;
    ck_assert_int_eq(viz_svg_compare(pred, "predicted", meas, "measured", &svg, &n, &err), 0);
    ck_assert(tu_xml_valid(svg, n));
    ck_assert_int_eq(tu_count(svg, "class=\"op "), 192);
    ck_assert_ptr_nonnull(strstr(svg, "predicted: zb-h1"));
    ck_assert_ptr_nonnull(strstr(svg, "measured: zb-h1"));
    ck_assert_int_eq(tu_count(svg, ">time (units)<"), 2);
    /* One scale: a unit op is equally wide in both blocks (op 0 of
     * device 0 lasts 1.0 in the prediction and in the fixture's times). */
    double x0, w0, xm, wm;
    nth_op_box(svg, 0, &x0, &w0);
    nth_op_box(svg, 96, &xm, &wm);
    ck_assert_double_eq_tol(w0, wm, 0.01);
    ck_assert_double_eq_tol(x0, xm, 0.01);
    free(svg);
    sched_free(pred);
    sched_free(meas);
}
END_TEST

START_TEST(compare_converts_units)
{
    /* A prediction in seconds against a run measured in ms: one scale,
     * so a 0.001 s op is as wide as a 1 ms one. */
    sched_t *pred = fixture_zb_h1(2, 3), *meas = fixture_zb_h1(2, 3);
    strcpy(pred->time_unit, "s");
    sched_set_costs(pred, 0.001, 0.001, 0.001, 0);
    strcpy(meas->time_unit, "ms");
    ck_assert_int_eq(fixture_add_times(meas), 0);
    zb_err err = { 0 };
    char *svg = NULL;
    size_t n;
    ck_assert_int_eq(viz_svg_compare(pred, "predicted", meas, "measured", &svg, &n, &err), 0);
    ck_assert_ptr_nonnull(strstr(svg, "on one time scale"));
    ck_assert_int_eq(tu_count(svg, ">time (ms)<"), 2);
    double x0, w0, xm, wm;
    nth_op_box(svg, 0, &x0, &w0);
    nth_op_box(svg, (int)sched_op_count(pred), &xm, &wm);
    ck_assert_double_eq_tol(w0, wm, 0.01);
    free(svg);
    /* Abstract units cannot be converted: each block gets its own scale,
     * and the picture says so. */
    strcpy(pred->time_unit, "units");
    ck_assert_int_eq(viz_svg_compare(pred, "predicted", meas, "measured", &svg, &n, &err), 0);
    ck_assert(tu_xml_valid(svg, n));
    ck_assert_ptr_nonnull(strstr(svg, "each on its own time scale"));
    ck_assert_ptr_nonnull(strstr(svg, "time units differ (units vs ms)"));
    free(svg);
    sched_free(pred);
    sched_free(meas);
}
END_TEST

START_TEST(text_is_escaped)
{
    sched_t *s = fixture_1f1b(2, 2);
    snprintf(s->name, sizeof s->name, "%s", "a<b>&\"c'\x01");
    size_t n;
    char *svg = render(s, &n);
    ck_assert(tu_xml_valid(svg, n));
    ck_assert_ptr_nonnull(strstr(svg, "a&lt;b&gt;&amp;&quot;c&apos;?"));
    free(svg);
    sched_free(s);
}
END_TEST

START_TEST(invalid_schedule_is_refused)
{
    sched_t *s = fixture_zb_h1(4, 8);
    s->dev[2].n_ops--; /* drop the last W of device 2 */
    zb_err err = { 0 };
    char *svg = NULL;
    size_t n = 0;
    ck_assert_int_eq(viz_svg_timeline(s, &svg, &n, &err), -1);
    ck_assert_ptr_null(svg);
    ck_assert(err.msg[0] != '\0');
    sched_free(s);
}
END_TEST

START_TEST(render_file_is_atomic)
{
    sched_t *s = fixture_zb_h1(2, 3);
    char *dir = tu_tempdir();
    char path[512];
    snprintf(path, sizeof path, "%s/out.svg", dir);
    zb_err err = { 0 };
    ck_assert_msg(viz_render_svg_file(s, path, &err) == 0, "%s", err.msg);
    ck_assert(tu_xml_valid_file(path));
    unlink(path);
    /* An invalid schedule leaves no file behind. */
    s->dev[0].n_ops--;
    ck_assert_int_eq(viz_render_svg_file(s, path, &err), -1);
    ck_assert(!tu_exists(path));
    s->dev[0].n_ops++;
    snprintf(path, sizeof path, "%s/missing-dir/out.svg", dir);
    ck_assert_int_eq(viz_render_svg_file(s, path, &err), -1);
    ck_assert(err.msg[0] != '\0');
    tu_rmdir(dir);
    free(dir);
    sched_free(s);
}
END_TEST

/* ---- big pictures (issue 29.6) ------------------------------------- */

/* The pictures' font, DejaVu Sans: every digit 0.637 em wide, 0.729 em
 * high (viz/font.h; tools/font_widths.py reads them from the TTF), and the
 * label rule written down again here: a label of at least 4.5 px with
 * 0.75 px to spare at each side, across the box or upright in it. */
#define DIGIT_W 0.637
#define DIGIT_H 0.729
#define MIN_FONT 4.5
#define PAD 1.5

/* One op box of a timeline with the label drawn in it, if any. */
typedef struct box {
    double x, w, h;  /* the rect */
    int mb;          /* its micro-batch (from the tooltip) */
    int label;       /* 0 none, 1 across ("mb"), 2 upright ("mbv") */
    int number;      /* the label's text */
    double font;     /* its size */
    double lx;       /* its anchor's x */
} box;

/* Parses every op box (class "op ...") of svg into a new array; *n gets
 * how many.  Each box and its label are on one line. */
static box *parse_boxes(const char *svg, long *n)
{
    long cap = tu_count(svg, "<rect class=\"op ") + 1, k = 0;
    box *b = calloc((size_t)cap, sizeof *b);
    for (const char *p = svg; (p = strstr(p, "<rect class=\"op ")) != NULL; p++) {
        const char *eol = strchr(p, '\n');
        box *x = &b[k++];
        ck_assert_int_eq(sscanf(strstr(p, " x=\""), " x=\"%lf\"", &x->x), 1);
        ck_assert_int_eq(sscanf(strstr(p, " width=\""), " width=\"%lf\"", &x->w), 1);
        ck_assert_int_eq(sscanf(strstr(p, " height=\""), " height=\"%lf\"", &x->h), 1);
        const char *t = strstr(p, "<title>") + 7;
        while (*t >= 'A' && *t <= 'Z')
            t++;
        ck_assert_int_eq(sscanf(t, "%d", &x->mb), 1);
        /* Search the box's own line only: a search of the whole rest of
         * the document for every unlabelled box is quadratic. */
        size_t line_len = eol ? (size_t)(eol - p) : strlen(p);
        const char *lab = memmem(p, line_len, "<text class=\"mb", 15);
        if (lab) {
            x->label = lab[15] == 'v' ? 2 : 1;
            ck_assert_int_eq(sscanf(strstr(lab, " x=\""), " x=\"%lf\"", &x->lx), 1);
            ck_assert_int_eq(sscanf(strstr(lab, "font-size=\""), "font-size=\"%lf\"", &x->font), 1);
            ck_assert_int_eq(sscanf(strchr(lab, '>') + 1, "%d", &x->number), 1);
        }
    }
    *n = k;
    return b;
}

static int digits(int v)
{
    int d = 1;
    while (v >= 10) {
        v /= 10;
        d++;
    }
    return d;
}

/* Whether a number of nd digits can be written in a w x h box, with a
 * margin: +1 fits by more than `slack`, -1 misses by more, 0 too close. */
static int fits(int nd, double w, double h, double slack)
{
    double across = (w - PAD) / (DIGIT_W * nd);
    double up = fmin((w - PAD) / DIGIT_H, (h - PAD) / (DIGIT_W * nd));
    double best = fmax(fmin(across, 12), fmin(up, 12));
    return best >= MIN_FONT + slack ? 1 : best < MIN_FONT - slack ? -1 : 0;
}

/*
 * Labels for every micro-batch number the box can hold (issue 29.6: the
 * default plan had none readable, the 70B plot none after 9).  1F1B with
 * p=16, m=128 and unequal costs leaves boxes from about 4 to 10 px wide:
 * every box whose number fits (across, or upright in a box narrower than
 * the number but a lane high) must carry it, no box whose number cannot
 * fit may, each label must be its box's own micro-batch and lie inside the
 * box measured in the real font, and three-digit numbers appear.
 */
START_TEST(labels_in_every_box_that_holds_them)
{
    sched_t *s = fixture_1f1b(16, 128);
    /* Costs that differ by stage, so that box widths spread over the
     * thresholds (about 2.5 to 10 px) instead of taking two values. */
    for (int st = 0; st < s->n_stages; st++) {
        s->cost[st].t_f = 0.6 + 0.08 * st;
        s->cost[st].t_b = 0.7 + 0.05 * st;
        s->cost[st].t_w = 0.4 + 0.03 * st;
    }
    size_t len;
    char *svg = render(s, &len);
    long n;
    box *b = parse_boxes(svg, &n);
    ck_assert_int_eq(n, sched_op_count(s));
    long labelled = 0, upright = 0, big = 0, missed_fit = 0, small = 0;
    for (long i = 0; i < n; i++) {
        int nd = digits(b[i].mb), f = fits(nd, b[i].w, b[i].h, 0.05);
        if (f > 0)
            ck_assert_msg(b[i].label, "box %ld (mb %d, %.2f px wide) can hold its number but has none",
                          i, b[i].mb, b[i].w);
        if (f < 0)
            ck_assert_msg(!b[i].label, "box %ld (mb %d, %.2f px wide) cannot hold its number",
                          i, b[i].mb, b[i].w);
        missed_fit += f < 0;
        if (!b[i].label)
            continue;
        labelled++;
        ck_assert_int_eq(b[i].number, b[i].mb);
        ck_assert(b[i].font >= MIN_FONT);
        double along = nd * DIGIT_W * b[i].font, across = b[i].label == 2 ? DIGIT_H * b[i].font : along;
        double centre = b[i].label == 2 ? b[i].lx - DIGIT_H * b[i].font / 2 : b[i].lx;
        ck_assert_msg(centre - across / 2 >= b[i].x - 0.01 && centre + across / 2 <= b[i].x + b[i].w + 0.01,
                      "label %d (%.1f px) sticks out of its %.2f px box", b[i].number, b[i].font, b[i].w);
        if (b[i].label == 2) {
            upright++;
            ck_assert(along <= b[i].h + 0.01);
        }
        big += b[i].mb >= 100;
        small += b[i].font < 7;
    }
    ck_assert_msg(labelled >= n / 3 && upright > 0 && big > 0 && missed_fit > 0 && small > 0,
                  "%ld of %ld labelled, %ld upright, %ld of three digits, %ld cannot fit, "
                  "%ld below 7 px", labelled, n, upright, big, missed_fit, small);
    free(b);
    ck_assert(tu_xml_valid(svg, len));
    free(svg);
    sched_free(s);
}
END_TEST

/* Renders s through view v, asserting success. */
static char *render_view(const sched_t *s, const viz_view *v, size_t *len)
{
    zb_err err = { 0 };
    char *svg = NULL;
    size_t n = 0;
    ck_assert_msg(viz_svg_timeline_view(s, v, &svg, &n, &err) == 0, "render failed: %s", err.msg);
    if (len)
        *len = n;
    return svg;
}

/* A time window: only the ops that overlap it, clipped to the plot, the
 * axis over the window's own range, and wide enough boxes for labels. */
START_TEST(view_time_window)
{
    sched_t *s = fixture_zb_h1(4, 8);
    viz_view v;
    viz_view_all(&v);
    v.has_from = v.has_to = 1;
    v.from = 5;
    v.to = 15;
    size_t len;
    char *svg = render_view(s, &v, &len);
    ck_assert(tu_xml_valid(svg, len));
    /* The ops that overlap [5, 15] (the simulator's times, unit costs). */
    sim_result r;
    zb_err err = { 0 };
    ck_assert_int_eq(sim_run(s, &r, &err), 0);
    long want = 0;
    for (int d = 0; d < 4; d++)
        for (int i = 0; i < s->dev[d].n_ops; i++)
            want += r.dev[d].end[i] > 5 && r.dev[d].start[i] < 15;
    sim_result_free(&r);
    ck_assert_int_eq(tu_count(svg, "class=\"op "), want);
    ck_assert_int_lt(want, sched_op_count(s));
    long n;
    box *b = parse_boxes(svg, &n);
    double plot_w = 0;
    const char *lane = strstr(svg, "class=\"lane\"");
    ck_assert_int_eq(sscanf(strstr(lane, " width=\""), " width=\"%lf\"", &plot_w), 1);
    for (long i = 0; i < n; i++)
        ck_assert(b[i].x >= 70 - 0.01 && b[i].x + b[i].w <= 70 + plot_w + 0.01);
    free(b);
    ck_assert_ptr_nonnull(strstr(svg, "class=\"tick\" x=\"70.0\" y=\""));
    ck_assert_ptr_nonnull(strstr(svg, "text-anchor=\"middle\">5</text>"));
    ck_assert_ptr_nonnull(strstr(svg, "text-anchor=\"middle\">15</text>"));
    ck_assert_ptr_null(strstr(svg, "text-anchor=\"middle\">20</text>"));
    ck_assert_ptr_nonnull(strstr(svg, "window 5\xe2\x80\x93" "15 units"));
    free(svg);
    /* Nothing in the window: refused, naming it. */
    v.from = 100;
    v.to = 200;
    char *out = NULL;
    size_t n2;
    ck_assert_int_eq(viz_svg_timeline_view(s, &v, &out, &n2, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "holds no op"));
    ck_assert_ptr_null(out);
    sched_free(s);
}
END_TEST

/* A micro-batch subset: its ops in colour with their numbers, the others
 * grey without, the picture spanning the subset, and a legend entry for
 * the grey. */
START_TEST(view_micro_batches_and_devices)
{
    sched_t *s = fixture_zb_h1(4, 8);
    viz_view v;
    viz_view_all(&v);
    v.mb_lo = 2;
    v.mb_hi = 3;
    char *svg = render_view(s, &v, NULL);
    ck_assert_int_eq(tu_count(svg, "class=\"op "), 4 * 2 * 3); /* F, B, W of 2 mbs on 4 devices */
    ck_assert_int_gt(tu_count(svg, "class=\"ghost\""), 0);
    ck_assert_int_eq(tu_count(svg, "class=\"mb"), 4 * 2 * 3);
    ck_assert_ptr_nonnull(strstr(svg, "class=\"key key-other\""));
    ck_assert_ptr_nonnull(strstr(svg, "micro-batches 2\xe2\x80\x93" "3 in colour"));
    long n;
    box *b = parse_boxes(svg, &n);
    for (long i = 0; i < n; i++)
        ck_assert(b[i].mb == 2 || b[i].mb == 3);
    free(b);
    free(svg);
    /* Devices 1-2: two lanes, two memory panels, labelled with their own
     * numbers. */
    viz_view_all(&v);
    v.dev_lo = 1;
    v.dev_hi = 2;
    svg = render_view(s, &v, NULL);
    ck_assert_int_eq(tu_count(svg, "class=\"lane\""), 2);
    ck_assert_int_eq(tu_count(svg, "class=\"mem-line\""), 2);
    ck_assert_int_eq(tu_count(svg, "class=\"op "), 2 * 24);
    ck_assert_ptr_nonnull(strstr(svg, ">dev 1</text>"));
    ck_assert_ptr_nonnull(strstr(svg, ">dev 2</text>"));
    ck_assert_ptr_null(strstr(svg, ">dev 0</text>"));
    ck_assert_ptr_nonnull(strstr(svg, "devices 1\xe2\x80\x93" "2 of 4"));
    free(svg);
    zb_err err = { 0 };
    char *out = NULL;
    size_t n2;
    v.dev_hi = 4;
    ck_assert_int_eq(viz_svg_timeline_view(s, &v, &out, &n2, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "devices 0-3"));
    viz_view_all(&v);
    v.mb_lo = 3;
    v.mb_hi = 8;
    ck_assert_int_eq(viz_svg_timeline_view(s, &v, &out, &n2, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "micro-batches 0-7"));
    int lo, hi;
    ck_assert_int_eq(viz_view_parse_range("3-7", &lo, &hi, &err), 0);
    ck_assert(lo == 3 && hi == 7);
    ck_assert_int_eq(viz_view_parse_range("5", &lo, &hi, &err), 0);
    ck_assert(lo == 5 && hi == 5);
    ck_assert_int_eq(viz_view_parse_range("7-3", &lo, &hi, &err), -1);
    ck_assert_int_eq(viz_view_parse_range("-3", &lo, &hi, &err), -1);
    ck_assert_int_eq(viz_view_parse_range("3-x", &lo, &hi, &err), -1);
    sched_free(s);
}
END_TEST

/* The memory panels of a plan (bytes, static memory, the plan's --mem):
 * a y axis in GB, static memory as a band, the limit dashed, and the
 * title's one figure per quantity, all in fixed notation (issue 29.4):
 * peak memory = static + activations, in GB with the unit.  Times in ms
 * never print with an exponent ("cost 1.155e+04 ms"). */
START_TEST(memory_axis_in_gb_and_figures)
{
    sched_t *s = fixture_zb_h1(4, 8);
    sched_set_costs(s, 481.3, 481.3, 481.3, 0);
    sched_set_mem(s, 1e9, -0.5e9, -0.5e9);
    snprintf(s->mem_unit, sizeof s->mem_unit, "bytes");
    snprintf(s->time_unit, sizeof s->time_unit, "ms");
    s->mem_static = malloc(4 * sizeof(double));
    for (int d = 0; d < 4; d++)
        s->mem_static[d] = 22.2e9;
    s->meta = cJSON_Parse("{\"plan\": {\"mem_limit_bytes\": 32e9}}");
    size_t len;
    char *svg = render(s, &len);
    ck_assert(tu_xml_valid(svg, len));
    /* ZB-H1 unit costs: cost 27 units = 12995.1 ms; device 0 peaks at
     * four forwards of 1 GB each (8 units at dF = 2). */
    ck_assert_msg(strstr(svg, "cost 12995.1 ms"), "%.400s", strstr(svg, "simulated"));
    ck_assert_msg(strstr(svg, "peak memory 26.20 GB (device 0: static 22.20 GB + activations 4.00 GB)"), "%.300s", strstr(svg, "simulated"));
    ck_assert_int_eq(tu_count(svg, "class=\"mem-static\""), 4);
    ck_assert_int_eq(tu_count(svg, "class=\"mem-limit\""), 4);
    ck_assert_int_gt(tu_count(svg, "class=\"mem-tick\""), 4);
    ck_assert_ptr_nonnull(strstr(svg, "class=\"mem-tick\" x=\"65.0\" y=\""));
    ck_assert_ptr_nonnull(strstr(svg, " GB</text>"));
    ck_assert_ptr_nonnull(strstr(svg, "static (grey) + activations"));
    ck_assert_ptr_nonnull(strstr(svg, ">peak 26.20 GB</text>"));
    ck_assert_ptr_null(strstr(svg, "GiB"));
    /* No exponent anywhere in the text a person reads. */
    for (const char *p = svg; (p = strstr(p, "e+")) != NULL; p++)
        ck_assert_msg(0, "an exponent: %.40s", p - 20);
    free(svg);
    sched_free(s);
}
END_TEST

/* A whole big plan says how to see the numbers it cannot show. */
START_TEST(dense_picture_names_the_view_flags)
{
    sched_t *s = fixture_1f1b(8, 256);
    char *svg = render(s, NULL);
    ck_assert_ptr_nonnull(strstr(svg, "boxes are too narrow for their micro-batch number"));
    ck_assert_ptr_nonnull(strstr(svg, "--from T --to T"));
    free(svg);
    viz_view v;
    viz_view_all(&v);
    v.has_from = v.has_to = 1;
    v.from = 100;
    v.to = 130;
    svg = render_view(s, &v, NULL);
    ck_assert_ptr_null(strstr(svg, "too narrow"));
    free(svg);
    sched_free(s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("svg");
    TCase *tc = tcase_create("timeline");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, zb_h1_boxes_and_figures);
    tcase_add_test(tc, same_bytes_twice);
    tcase_add_test(tc, one_f_one_b_fused_backward);
    tcase_add_test(tc, large_schedule_thins_labels_without_overlap);
    tcase_add_test(tc, chunks_are_shaded);
    tcase_add_test(tc, each_kind_has_its_legend_colour);
    tcase_add_test(tc, palette_kinds_distinct);
    tcase_add_test(tc, vocab_passes_have_their_legend_colour);
    tcase_add_test(tc, memory_limit_drawn_or_stated);
    tcase_add_test(tc, measured_times_are_used);
    tcase_add_test(tc, compare_on_one_scale);
    tcase_add_test(tc, compare_converts_units);
    tcase_add_test(tc, text_is_escaped);
    tcase_add_test(tc, invalid_schedule_is_refused);
    tcase_add_test(tc, render_file_is_atomic);
    tcase_add_test(tc, labels_in_every_box_that_holds_them);
    tcase_add_test(tc, view_time_window);
    tcase_add_test(tc, view_micro_batches_and_devices);
    tcase_add_test(tc, memory_axis_in_gb_and_figures);
    tcase_add_test(tc, dense_picture_names_the_view_flags);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
