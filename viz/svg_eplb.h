/*
 * svg_eplb.h: a picture of an expert placement's per-GPU load before and
 * after balancing (`zbsched eplb --svg`).
 *
 * The drawer knows nothing about how the placement was made: it takes the
 * per-GPU load tables (layers x GPUs) of the plain layout ("before") and of
 * the placement ("after") and draws
 *   - a bar chart of one layer: for every GPU, its load before (grey) and
 *     after (blue) side by side, GPUs grouped by node on shaded bands, the
 *     mean load as a dashed line, the layer's balance (max / mean) in the
 *     heading;
 *   - a heat map of every layer: one row per layer, one cell per GPU, the
 *     colour the GPU's share of the layer's mean load (white 0, blue 1x,
 *     dark red 2x and above), before on the left and after on the right,
 *     with a gap between nodes.
 * Like the other renderers (viz.h) it builds the whole standalone SVG in
 * memory with fixed number formats, so the same tables give the same bytes.
 */
#ifndef ZB_VIZ_SVG_EPLB_H
#define ZB_VIZ_SVG_EPLB_H

#include <stddef.h>

#include "src/err.h"

typedef struct viz_eplb_input {
    int n_layers;                 /* rows of the tables (>= 1) */
    int n_gpus;                   /* columns (>= 1), at least n_nodes */
    int n_nodes;                  /* GPU g is on node floor(g n_nodes / n_gpus) */
    const double *gpu_before;     /* [layer][gpu] load without balancing */
    const double *gpu_after;      /* [layer][gpu] load of the placement */
    const double *balance_before; /* [layer] max / mean of gpu_before's row */
    const double *balance_after;  /* [layer] max / mean of gpu_after's row */
    int layer;                    /* the layer the bar chart shows, 0..n_layers-1 */
    const char *subtitle;         /* one line under the title (escaped), or NULL */
} viz_eplb_input;

/* Renders the picture into a malloc'd NUL-terminated string (*svg, caller
 * frees) of *len bytes.  Returns 0, or -1 with err set for shapes out of
 * range and when memory runs out. */
int viz_svg_eplb(const viz_eplb_input *in, char **svg, size_t *len, zb_err *err);

#endif
