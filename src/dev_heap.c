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
    h->key = malloc(n * sizeof *h->key);
    if (!h->heap || !h->at || !h->key) {
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
    free(h->key);
    memset(h, 0, sizeof *h);
}

/* 1 when device a goes before device b: the smaller key, then the lower id. */
static int before(const dev_heap *h, int a, int b)
{
    return h->key[a] < h->key[b] || (h->key[a] == h->key[b] && a < b);
}

static void swap(dev_heap *h, int i, int j)
{
    int a = h->heap[i], b = h->heap[j];
    h->heap[i] = b;
    h->heap[j] = a;
    h->at[b] = i;
    h->at[a] = j;
}

/* Moves the device at index i down below every child it does not go
 * before. */
static void sift_down(dev_heap *h, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && before(h, h->heap[l], h->heap[m]))
            m = l;
        if (r < h->n && before(h, h->heap[r], h->heap[m]))
            m = r;
        if (m == i)
            return;
        swap(h, i, m);
        i = m;
    }
}

/* Restores the order around index i after its key changed. */
static void fix(dev_heap *h, int i)
{
    while (i > 0 && before(h, h->heap[i], h->heap[(i - 1) / 2])) {
        swap(h, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
    sift_down(h, i);
}

void dev_heap_set(dev_heap *h, int d, double key)
{
    assert(d >= 0 && d < h->cap && !isnan(key));
    h->key[d] = key;
    int i = h->at[d];
    if (i < 0) {
        i = h->n++;
        h->heap[i] = d;
        h->at[d] = i;
    }
    fix(h, i);
}

void dev_heap_assign(dev_heap *h, const double *key)
{
    h->n = 0;
    for (int d = 0; d < h->cap; d++) {
        h->at[d] = -1;
        if (!isnan(key[d])) {
            h->key[d] = key[d];
            h->heap[h->n] = d;
            h->at[d] = h->n++;
        }
    }
    for (int i = h->n / 2 - 1; i >= 0; i--)
        sift_down(h, i); /* bottom-up: both subtrees of i are heaps already */
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
    h->heap[i] = h->heap[last];
    h->at[h->heap[i]] = i;
    fix(h, i);
}
