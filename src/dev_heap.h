/*
 * dev_heap.h: the device that acts next in a list scheduler.
 *
 * The list schedulers (the V solvers' greedy in solver/v_shape.c, the
 * vocabulary-pass placement in schedules/gen_vocab.c) walk every device in
 * global time order: at each step the device whose next action starts
 * earliest acts, the lowest-numbered one among equal starts, and only a
 * few devices' next actions change.  Scanning all p devices for the
 * earliest was most of a step's cost at p = 64 and 128 (a 405B search).
 *
 * A tournament tree of fan-out 8 over device ids 0..cap-1: each inner node
 * holds the earliest (key, device) of its eight children, the root the
 * earliest of all, so that the top is exactly what a scan with a strict
 * "<" in increasing device order would pick.  A change rewrites one leaf
 * and the log8(cap) nodes above it (two at p = 64, three up to 512),
 * each the minimum of eight entries side by side in memory: independent
 * loads and compares, where the binary heap it replaced walked log2(p)
 * levels of dependent loads and data-dependent branches (its sifts were a
 * tenth to a fifth of a 70B or 405B search).  Keys are kept as unsigned
 * integers that order as the doubles do, so that the compares are plain
 * integer ones; a device out of the tree holds the largest value, above
 * every double's.
 */
#ifndef ZB_DEV_HEAP_H
#define ZB_DEV_HEAP_H

#include <stdint.h>

/* Levels a tree may have: 8^11 leaves, far beyond any pipeline. */
#define DEV_HEAP_MAX_LEVELS 12

typedef struct dev_heap {
    int n;                                /* devices in the tree */
    int cap;                              /* device ids are 0..cap-1 */
    int levels;                           /* levels in use: 0 the leaves, levels-1 the root */
    int width[DEV_HEAP_MAX_LEVELS];       /* entries of each level (a multiple of 8 below the root) */
    uint64_t *key[DEV_HEAP_MAX_LEVELS];   /* [level][width] the earliest key below each entry,
                                           * ordered bits (UINT64_MAX: no device) */
    int *dev[DEV_HEAP_MAX_LEVELS];        /* [level][width] the device holding it */
    void *block;                          /* the one allocation every level lives in */
} dev_heap;

/* Makes h an empty tree for devices 0..cap-1.  0, or -1 on out of memory
 * (h then holds nothing to free beyond what dev_heap_free frees). */
int dev_heap_init(dev_heap *h, int cap);

/* Frees what h holds and empties it. */
void dev_heap_free(dev_heap *h);

/* Puts device d in the tree with key (start), or moves it to key's place
 * when it is in already.  key must not be NaN. */
void dev_heap_set(dev_heap *h, int d, double key);

/* Makes the tree hold exactly the devices d whose key[d] is not NaN, with
 * those keys: O(cap), for when most devices' keys changed at once (a
 * barrier every device waited on), where cap dev_heap_set calls would
 * take O(cap log cap). */
void dev_heap_assign(dev_heap *h, const double *key);

/* Takes device d out of the tree; nothing when it is not in it. */
void dev_heap_remove(dev_heap *h, int d);

/* The device with the smallest key (the lowest id among equal keys), or
 * -1 when the tree is empty. */
static inline int dev_heap_top(const dev_heap *h)
{
    return h->n > 0 ? h->dev[h->levels - 1][0] : -1;
}

#endif
