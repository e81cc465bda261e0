/*
 * viz_fixtures.h: hand-built schedules for the viz tests, independent of
 * the generators so that the renderers are tested against orders written
 * down here from the zero-bubble paper (§1b of the reference notes).
 */
#ifndef ZB_TESTS_VIZ_FIXTURES_H
#define ZB_TESTS_VIZ_FIXTURES_H

#include "src/sched.h"

/* Classic 1F1B with fused BW: p devices, one stage each, m micro-batches.
 * Returns NULL when memory runs out; the caller frees. */
sched_t *fixture_1f1b(int p, int m);

/* ZB-H1 (c = 1) with split B and W, as in the authors' get_hand_schedule. */
sched_t *fixture_zb_h1(int p, int m);

/* A V-shaped two-chunk schedule (device d holds stages d and 2p-1-d):
 * all forwards chunk by chunk, then B, then W.  Valid, not fast: it exists
 * to exercise chunk shading. */
sched_t *fixture_v(int p, int m);

/* Fuses the backward of every even micro-batch of a split schedule: its B
 * becomes a BW and its W is dropped.  A valid schedule stays valid (BW has
 * B's inputs and nothing waits for W) and then shows all four op kinds. */
void fixture_fuse_even(sched_t *s);

/* Turns s into a "measured" schedule: every lane gets start/end times
 * equal to a deterministic stretch of the ideal unit-cost timing (op i of
 * device d lasts its cost times (1 + 0.1 * ((d + i) % 3))).  Returns 0 or -1. */
int fixture_add_times(sched_t *s);

#endif
