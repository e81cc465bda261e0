/*
 * palette.h: the colours of op kinds and model chunks, shared by the SVG
 * timeline and the dependency graph so that both read alike.
 *
 * Colours follow the zero-bubble paper's figures and the authors' tool
 * (viz_nsys_events.py): F blue #397AF2, B teal #44D3DA, W green; BW (B and
 * W fused, as in 1F1B) orange, as PyTorch's schedule visualizer draws a full
 * backward.  With several chunks per device (interleaved, V) the first chunk
 * is a darker shade with white text and the last a lighter one with black
 * text, as in the paper's ZB-V figure; chunks in between are interpolated.
 * The vocabulary passes S and T (vocabulary parallelism) have a colour of
 * their own, violet and plum, the same on every chunk.
 */
#ifndef ZB_VIZ_PALETTE_H
#define ZB_VIZ_PALETTE_H

#include "src/sched.h"

typedef struct viz_color {
    char fill[8]; /* "#rrggbb" box colour */
    char text[8]; /* "#rrggbb" label colour that stays readable on fill */
} viz_color;

/* Colour of an op of `kind` on chunk `chunk` of `n_chunks` (n_chunks >= 1,
 * 0 <= chunk < n_chunks). */
viz_color viz_op_color(op_kind kind, int chunk, int n_chunks);

/* Barrier marks (vocabulary parallelism's all-reduces C0, C1). */
#define VIZ_BARRIER_STROKE "#6a3fb5"

/* Lane background: idle time shows through in this colour. */
#define VIZ_IDLE_FILL "#ececec"

#endif
