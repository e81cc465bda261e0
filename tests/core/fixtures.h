/*
 * fixtures.h: small schedules the core tests build by hand with sched_push,
 * so that they do not depend on the generators (tests/gen covers those).
 *
 * Header-only (static functions): each test executable includes it once.
 */
#ifndef ZB_TEST_FIXTURES_H
#define ZB_TEST_FIXTURES_H

#include "src/sched.h"

/* Classic 1F1B on p devices, one stage each: warm-up of p-1-d forwards,
 * then one-forward-one-backward, then the remaining backwards.  With
 * split=0 the backward is a fused BW; with split=1 it is B followed at once
 * by W.  Returns NULL when memory runs out. */
static inline sched_t *fixture_1f1b(int p, int m, int split)
{
    sched_t *s = sched_new(p, m, p);
    if (!s)
        return NULL;
    sched_place_interleaved(s);
    for (int d = 0; d < p; d++) {
        int warm = p - 1 - d < m ? p - 1 - d : m;
        int f = 0, b = 0;
        for (; f < warm; f++)
            sched_push(s, d, OP_F, d, f);
        while (b < m) {
            if (f < m)
                sched_push(s, d, OP_F, d, f++);
            if (split) {
                sched_push(s, d, OP_B, d, b);
                sched_push(s, d, OP_W, d, b);
            } else {
                sched_push(s, d, OP_BW, d, b);
            }
            b++;
        }
    }
    return s;
}

/* GPipe on p devices: all forwards, then all fused backwards. */
static inline sched_t *fixture_gpipe(int p, int m)
{
    sched_t *s = sched_new(p, m, p);
    if (!s)
        return NULL;
    sched_place_interleaved(s);
    for (int d = 0; d < p; d++) {
        for (int j = 0; j < m; j++)
            sched_push(s, d, OP_F, d, j);
        for (int j = 0; j < m; j++)
            sched_push(s, d, OP_BW, d, j);
    }
    return s;
}

/* A V-shaped schedule on p devices (stages d and 2p-1-d on device d) in the
 * simplest executable order, GPipe-like: all forwards of the first chunk,
 * all forwards of the second, then the backwards of the second chunk and of
 * the first, each split into B and W. */
static inline sched_t *fixture_v(int p, int m)
{
    sched_t *s = sched_new(p, m, 2 * p);
    if (!s)
        return NULL;
    sched_place_v(s);
    for (int d = 0; d < p; d++) {
        int lo = d, hi = 2 * p - 1 - d;
        for (int j = 0; j < m; j++)
            sched_push(s, d, OP_F, lo, j);
        for (int j = 0; j < m; j++)
            sched_push(s, d, OP_F, hi, j);
        for (int j = 0; j < m; j++) {
            sched_push(s, d, OP_B, hi, j);
            sched_push(s, d, OP_W, hi, j);
        }
        for (int j = 0; j < m; j++) {
            sched_push(s, d, OP_B, lo, j);
            sched_push(s, d, OP_W, lo, j);
        }
    }
    return s;
}

#endif
