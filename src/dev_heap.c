/*
 * dev_heap.c: an indexed min-heap of devices by their next start
 * (dev_heap.h says why).  Sizes are the pipeline's devices (up to a few
 * hundred); every operation is O(log n) but for init and free.
 */
#include "src/dev_heap.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int dev_heap_init(dev_heap *h, int cap)
{
    memset(h, 0, sizeof *h);
    size_t n = cap > 0 ? (size_t)cap : 1;
    h->heap = malloc(n * sizeof *h->heap);
    h->at = malloc(n * sizeof *h->at);
    if (!h->heap || !h->at) {
        dev_heap_free(h);
        return -1;
    }
    h->cap = cap;
    for (int d = 0; d < cap; d++)
        h->at[d] = -1;
    return 0;
}

void dev_heap_free(dev_heap *h)
{
    free(h->heap);
    free(h->at);
    memset(h, 0, sizeof *h);
}

/* 1 when entry a goes before entry b: the smaller key, then the lower
 * device.  Bitwise, not short-circuit: which child is smaller is a coin
 * toss in a time-ordered walk, and the branches of || and && mispredicted
 * about half the time (the sifts were a tenth of a 405B search). */
static inline int before(dev_heap_entry a, dev_heap_entry b)
{
    return (a.key < b.key) | ((a.key == b.key) & (a.dev < b.dev));
}

/* Puts e at index i and records where its device is. */
static inline void place(dev_heap *h, int i, dev_heap_entry e)
{
    h->heap[i] = e;
    h->at[e.dev] = i;
}

/* Moves e, bound for index i, down below every child it does not go
 * before (children move up into the hole), and places it. */
static void sift_down(dev_heap *h, int i, dev_heap_entry e)
{
    for (;;) {
        int l = 2 * i + 1;
        if (l >= h->n)
            break;
        int c = l;
        if (l + 1 < h->n)
            c += __builtin_expect_with_probability(before(h->heap[l + 1], h->heap[l]), 1, 0.5);
        if (!before(h->heap[c], e))
            break;
        place(h, i, h->heap[c]);
        i = c;
    }
    place(h, i, e);
}

/* Restores the order around index i, whose entry is e (its key just
 * changed, or it just arrived). */
static void fix(dev_heap *h, int i, dev_heap_entry e)
{
    if (i > 0 && before(e, h->heap[(i - 1) / 2])) {
        do {
            place(h, i, h->heap[(i - 1) / 2]);
            i = (i - 1) / 2;
        } while (i > 0 && before(e, h->heap[(i - 1) / 2]));
        place(h, i, e);
        return;
    }
    sift_down(h, i, e);
}

void dev_heap_set(dev_heap *h, int d, double key)
{
    assert(d >= 0 && d < h->cap && !isnan(key));
    int i = h->at[d];
    if (i < 0)
        i = h->n++;
    fix(h, i, (dev_heap_entry){ key, d });
}

void dev_heap_assign(dev_heap *h, const double *key)
{
    h->n = 0;
    for (int d = 0; d < h->cap; d++) {
        h->at[d] = -1;
        if (!isnan(key[d]))
            place(h, h->n++, (dev_heap_entry){ key[d], d });
    }
    for (int i = h->n / 2 - 1; i >= 0; i--)
        sift_down(h, i, h->heap[i]); /* bottom-up: both subtrees of i are heaps already */
}

void dev_heap_remove(dev_heap *h, int d)
{
    assert(d >= 0 && d < h->cap);
    int i = h->at[d];
    if (i < 0)
        return;
    h->at[d] = -1;
    int last = --h->n;
    if (i == last)
        return;
    fix(h, i, h->heap[last]);
}
