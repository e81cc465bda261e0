/*
 * palette.c: op colours by kind and chunk (see palette.h).
 *
 * Shades are mixed in sRGB from one base colour per kind: towards black for
 * the first chunk, towards white for the last.  The label colour is chosen
 * by relative luminance, which gives the paper's white-on-dark and
 * black-on-light without a hand-made table per chunk count.
 */
#include "viz/palette.h"

#include <assert.h>
#include <math.h>

typedef struct rgb {
    double r, g, b; /* 0..255 */
} rgb;

/* Base colours per op kind (indexed by op_kind). */
static const rgb kind_base[] = {
    { 0x39, 0x7A, 0xF2 }, /* F: the paper's blue */
    { 0x44, 0xD3, 0xDA }, /* B: the paper's teal */
    { 0x4C, 0xB8, 0x5C }, /* W: green */
    { 0xF2, 0x8E, 0x2B }, /* BW: orange, PyTorch's full backward */
    { 0x8E, 0x5C, 0xD9 }, /* S: violet, vocabulary pass (output-layer shard) */
    { 0xC2, 0x4F, 0xA8 }, /* T: plum, the vocabulary pass's backward */
};
_Static_assert(sizeof kind_base / sizeof kind_base[0] == OP_KIND_COUNT,
               "every op kind needs its own base colour");

static rgb mix(rgb a, rgb b, double t)
{
    return (rgb){ a.r + (b.r - a.r) * t, a.g + (b.g - a.g) * t, a.b + (b.b - a.b) * t };
}

/* Rounds one channel to 0..255. */
static unsigned channel(double v)
{
    return v <= 0 ? 0u : v >= 255 ? 255u : (unsigned)(v + 0.5) & 0xffu;
}

static void hex(char out[8], rgb c)
{
    static const char digits[] = "0123456789abcdef";
    unsigned v[3] = { channel(c.r), channel(c.g), channel(c.b) };
    out[0] = '#';
    for (int i = 0; i < 3; i++) {
        out[1 + 2 * i] = digits[v[i] >> 4];
        out[2 + 2 * i] = digits[v[i] & 15];
    }
    out[7] = '\0';
}

viz_color viz_op_color(op_kind kind, int chunk, int n_chunks)
{
    assert(kind >= 0 && kind < OP_KIND_COUNT);
    assert(n_chunks >= 1 && chunk >= 0 && chunk < n_chunks);
    static const rgb black = { 0, 0, 0 }, white = { 255, 255, 255 };
    rgb base = kind_base[kind], c = base;
    /* Vocabulary passes belong to no chunk: one colour each. */
    if (n_chunks > 1 && !OP_IS_VOCAB(kind)) {
        rgb dark = mix(base, black, 0.30), light = mix(base, white, 0.55);
        c = mix(dark, light, (double)chunk / (n_chunks - 1));
    }
    /* WCAG relative luminance.  The threshold sits above the usual 0.18
     * so that the paper's F blue keeps white labels, as in its figures. */
    double ch[3] = { c.r / 255, c.g / 255, c.b / 255 }, lum = 0;
    static const double weight[3] = { 0.2126, 0.7152, 0.0722 };
    for (int i = 0; i < 3; i++)
        lum += weight[i] * (ch[i] <= 0.04045 ? ch[i] / 12.92 : pow((ch[i] + 0.055) / 1.055, 2.4));
    viz_color out;
    hex(out.fill, c);
    hex(out.text, lum < 0.30 ? white : black);
    return out;
}
