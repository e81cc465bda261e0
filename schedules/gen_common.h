/*
 * gen_common.h: what the handcrafted generators share (internal to
 * schedules/; not part of the public gen.h API).
 *
 * Every generator does the same three things before it emits its order:
 * check the user's gen_params (counts, chunk count for its kind, finite
 * non-negative costs, a size that fits in memory), allocate the schedule
 * with the right number of virtual stages and placement, and copy the
 * uniform costs and memory deltas onto every stage.  gen_begin does all
 * three so that each generator file holds only its published order.
 */
#ifndef ZB_GEN_COMMON_H
#define ZB_GEN_COMMON_H

#include "schedules/gen.h"

/* How a generator lays its virtual stages out on devices. */
typedef enum gen_layout {
    GEN_LAYOUT_PLAIN = 0,       /* one stage per device (gpipe, 1f1b, zb-h1/h2) */
    GEN_LAYOUT_INTERLEAVED = 1, /* v stages per device, stage s on device s % p */
    GEN_LAYOUT_V = 2,           /* two stages per device, device d holds d and 2p-1-d */
} gen_layout;

/* The largest schedule a generator agrees to build, in ops.  Ten million
 * ops are 120 MB of sched_op; anything bigger is almost surely a typo
 * (p=64, m=1024, 1F1B is 131,072 ops). */
#define GEN_MAX_OPS 10000000L

/* Checks p for a generator named `kind` that needs `chunks` virtual stages
 * per device (1 for plain layouts, 2 for ZB-V, p->chunks for interleaved;
 * the caller has already checked the kind's chunk rule) and `ops_per_mb`
 * ops per stage and micro-batch (2 with fused BW, 3 with split B/W).  On
 * success allocates a schedule named `kind` with placement, costs and
 * memory deltas set, stores it in *out (caller frees) and returns 0;
 * otherwise returns -1 with err set and *out untouched. */
int gen_begin(const gen_params *p, const char *kind, gen_layout layout, int chunks,
              int ops_per_mb, sched_t **out, zb_err *err);

/* Returns -1 with err set to the standard out-of-memory message for kind,
 * after freeing s (which may be NULL).  For a failed sched_push. */
int gen_fail_oom(sched_t *s, const char *kind, zb_err *err);

#endif
