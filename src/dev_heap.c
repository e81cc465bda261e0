/*
 * dev_heap.c: a tournament tree of devices by their next start
 * (dev_heap.h says why and how).  Sizes are the pipeline's devices (up to
 * a few hundred); a change costs log8(cap) minima of eight, init and
 * assign O(cap).
 */
#include "src/dev_heap.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FAN 8
#define NO_KEY UINT64_MAX /* no device: after every double's ordered bits */

/* Bits of key that order as the doubles do (the sign flips the rest; -0
 * is +0 first, as the two compare equal).  Every double, infinities
 * included, maps below NO_KEY. */
static inline uint64_t ordered_bits(double key)
{
    double k = key + 0.0; /* -0.0 + 0.0 is +0.0 */
    uint64_t b;
    memcpy(&b, &k, sizeof b);
    return b >> 63 ? ~b : b | (UINT64_C(1) << 63);
}

/* The entry of (ka, da) and (kb, db) that goes first, the left one on a
 * tie: left entries hold lower devices, so the lowest device wins among
 * equal keys.  Written for conditional moves: which one is earlier is a
 * coin toss in a time-ordered walk. */
static inline void earlier(uint64_t *ka, int *da, uint64_t kb, int db)
{
    int right = kb < *ka;
    *ka = right ? kb : *ka;
    *da = right ? db : *da;
}

/* Entry `node` of level l+1: the earliest of its eight children on level
 * l, merged pairwise (three rounds of independent compares). */
static inline void refresh(dev_heap *h, int l, int node)
{
    const uint64_t *k = h->key[l] + (size_t)node * FAN;
    const int *d = h->dev[l] + (size_t)node * FAN;
    uint64_t k0 = k[0], k2 = k[2], k4 = k[4], k6 = k[6];
    int d0 = d[0], d2 = d[2], d4 = d[4], d6 = d[6];
    earlier(&k0, &d0, k[1], d[1]);
    earlier(&k2, &d2, k[3], d[3]);
    earlier(&k4, &d4, k[5], d[5]);
    earlier(&k6, &d6, k[7], d[7]);
    earlier(&k0, &d0, k2, d2);
    earlier(&k4, &d4, k6, d6);
    earlier(&k0, &d0, k4, d4);
    h->key[l + 1][node] = k0;
    h->dev[l + 1][node] = d0;
}

/* Every entry above the leaves from the leaves up: O(cap). */
static void refresh_all(dev_heap *h)
{
    for (int l = 0; l + 1 < h->levels; l++)
        for (int node = 0; node < h->width[l] / FAN; node++)
            refresh(h, l, node);
}

/* Rewrites leaf d with key k and every entry above it. */
static void update(dev_heap *h, int d, uint64_t k)
{
    h->key[0][d] = k;
    for (int l = 0; l + 1 < h->levels; l++) {
        d /= FAN;
        refresh(h, l, d);
    }
}

int dev_heap_init(dev_heap *h, int cap)
{
    memset(h, 0, sizeof *h);
    if (cap < 0)
        return -1;
    /* Widths: the leaves rounded up to a multiple of 8, each level above
     * an eighth of the one below, rounded up likewise, down to the root. */
    size_t total = 0;
    int w = cap > 0 ? cap : 1;
    for (;;) {
        int padded = w > 1 ? (w + FAN - 1) / FAN * FAN : 1;
        if (h->levels == DEV_HEAP_MAX_LEVELS)
            return -1;
        h->width[h->levels++] = padded;
        total += (size_t)padded;
        if (padded == 1)
            break;
        w = padded / FAN;
    }
    h->block = malloc(total * (sizeof(uint64_t) + sizeof(int)));
    if (!h->block) {
        dev_heap_free(h);
        return -1;
    }
    uint64_t *keys = h->block;
    int *devs = (int *)(keys + total);
    for (int l = 0; l < h->levels; l++) {
        h->key[l] = keys;
        h->dev[l] = devs;
        keys += h->width[l];
        devs += h->width[l];
    }
    h->cap = cap;
    for (int l = 0; l < h->levels; l++) /* no device anywhere, padding included */
        for (int i = 0; i < h->width[l]; i++) {
            h->key[l][i] = NO_KEY;
            h->dev[l][i] = l == 0 ? i : 0;
        }
    refresh_all(h);
    return 0;
}

void dev_heap_free(dev_heap *h)
{
    free(h->block);
    memset(h, 0, sizeof *h);
}

void dev_heap_set(dev_heap *h, int d, double key)
{
    assert(d >= 0 && d < h->cap && !isnan(key));
    if (h->key[0][d] == NO_KEY)
        h->n++;
    update(h, d, ordered_bits(key));
}

void dev_heap_assign(dev_heap *h, const double *key)
{
    h->n = 0;
    for (int d = 0; d < h->cap; d++) {
        h->key[0][d] = isnan(key[d]) ? NO_KEY : ordered_bits(key[d]);
        h->n += !isnan(key[d]);
    }
    refresh_all(h);
}

void dev_heap_remove(dev_heap *h, int d)
{
    assert(d >= 0 && d < h->cap);
    if (h->key[0][d] == NO_KEY)
        return;
    h->n--;
    update(h, d, NO_KEY);
}
