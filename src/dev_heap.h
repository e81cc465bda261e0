/*
 * dev_heap.h: the device that acts next in a list scheduler.
 *
 * The list schedulers (the V solvers' greedy in solver/v_shape.c, the
 * vocabulary-pass placement in schedules/gen_vocab.c) walk every device in
 * global time order: at each step the device whose next action starts
 * earliest acts, the lowest-numbered one among equal starts, and only a
 * few devices' next actions change.  Scanning all p devices for the
 * earliest was most of a step's cost at p = 64 and 128 (a 405B search);
 * this heap keeps them ordered instead, O(log p) a change.
 *
 * An indexed binary min-heap of device ids 0..cap-1 keyed by a double,
 * ties broken by the lower id, so that the top is exactly what a scan
 * with a strict "<" in increasing device order would pick.  A device is in
 * the heap or not (it has no action, or the caller left it out).
 */
#ifndef ZB_DEV_HEAP_H
#define ZB_DEV_HEAP_H

/* One device in the heap with its key, kept together so that a sift
 * compares keys without looking them up by device (the sifts were a
 * tenth of a 405B search's time). */
typedef struct dev_heap_entry {
    double key; /* the device's next start */
    int dev;    /* the device */
} dev_heap_entry;

typedef struct dev_heap {
    int n;                /* devices in the heap */
    int cap;              /* device ids are 0..cap-1 */
    dev_heap_entry *heap; /* [cap] the heap, heap[0] the earliest */
    int *at;              /* [cap] each device's index in heap, -1 when not in it */
} dev_heap;

/* Makes h an empty heap for devices 0..cap-1.  0, or -1 on out of memory
 * (h then holds nothing to free beyond what dev_heap_free frees). */
int dev_heap_init(dev_heap *h, int cap);

/* Frees what h holds and empties it. */
void dev_heap_free(dev_heap *h);

/* Puts device d in the heap with key (start), or moves it to key's place
 * when it is in already.  key must not be NaN. */
void dev_heap_set(dev_heap *h, int d, double key);

/* Makes the heap hold exactly the devices d whose key[d] is not NaN, with
 * those keys: O(cap), for when most devices' keys changed at once (a
 * barrier every device waited on), where cap dev_heap_set calls would
 * take O(cap log cap). */
void dev_heap_assign(dev_heap *h, const double *key);

/* Takes device d out of the heap; nothing when it is not in it. */
void dev_heap_remove(dev_heap *h, int d);

/* The device with the smallest key (the lowest id among equal keys), or
 * -1 when the heap is empty. */
static inline int dev_heap_top(const dev_heap *h)
{
    return h->n > 0 ? h->heap[0].dev : -1;
}

#endif
