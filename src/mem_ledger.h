/*
 * mem_ledger.h: what each device of a run holds, by class of buffer, as
 * the runtime allocates it: the measured side of "the plan runs as
 * priced" (docs/cost-model.md, "Buffer classes").
 *
 * WHY.  The cost model prices a device's memory as a sum of parts
 * (parameters, gradients, AdamW state, saved activations, ...); the
 * runtime's footprint (runtime/footprint.h) predicts the same parts for a
 * plan at the runtime's own dtype.  Without a measurement nothing says the
 * prediction describes what the runtime really does.  The ledger is that
 * measurement: every allocation site of the CPU backend and the trainer
 * charges its bytes to (device, class) when it allocates and releases them
 * when it frees, and the ledger keeps each device's live bytes and the
 * peak per class and of the total.  `run --json` prints predicted against
 * measured per device and class.
 *
 * DESIGN.  One fixed array of counters per device, each device's on its
 * own cache lines.  A device's buffers are charged mostly by its own
 * worker thread, but a few come from other threads (the main thread's
 * trainer_create and evaluation), so the counters are relaxed atomics and
 * a peak is raised by compare-and-swap: no lock, no contention on the hot
 * path (one atomic add per buffer, and the buffers are pooled, so after
 * the first step charges are rare anyway).  The peak of the total is the
 * peak of the sum, not the sum of the class peaks.
 *
 * The ledger counts the bytes asked for, not the allocator's overhead or
 * pages never touched: it checks the model, not the C library.
 */
#ifndef ZB_MEM_LEDGER_H
#define ZB_MEM_LEDGER_H

#include <stddef.h>

/* The classes of buffer a device holds. */
typedef enum mem_class {
    MEM_PARAMETERS = 0,  /* fp32 master weights */
    MEM_GRADIENTS,       /* weight-gradient accumulators and the spares of W ops
                          * run ahead of micro-batch order */
    MEM_OPTIMIZER,       /* AdamW m and v */
    MEM_ROLLBACK,        /* what post-validation keeps to undo a speculative step */
    MEM_ACTIVATIONS,     /* saved state between F, B and W (and recompute inputs) */
    MEM_VOCAB,           /* vocabulary passes' shards and cells */
    MEM_COMM,            /* activation and gradient messages */
    MEM_WORKSPACE,       /* kernels' scratch */
    MEM_CLASSES
} mem_class;

typedef struct mem_ledger mem_ledger;

/* The name of class c as `run --json` prints it ("parameters", ...). */
const char *mem_class_name(mem_class c);

/* A ledger for devices 0..n_devices-1, all counters zero; NULL when out
 * of memory or n_devices < 1. */
mem_ledger *mem_ledger_new(int n_devices);

/* Frees l (NULL is fine). */
void mem_ledger_free(mem_ledger *l);

/* Devices of l. */
int mem_ledger_devices(const mem_ledger *l);

/* Adds / removes `bytes` live bytes of class c on device dev (0 <= dev <
 * devices).  l NULL: nothing (a backend made without a ledger).  A release
 * must match an earlier charge of the same (dev, c). */
void mem_ledger_charge(mem_ledger *l, int dev, mem_class c, size_t bytes);
void mem_ledger_release(mem_ledger *l, int dev, mem_class c, size_t bytes);

/* Live bytes and peak bytes of class c on dev now. */
size_t mem_ledger_live(const mem_ledger *l, int dev, mem_class c);
size_t mem_ledger_peak(const mem_ledger *l, int dev, mem_class c);

/* The most bytes device dev held at once, all classes together. */
size_t mem_ledger_total_peak(const mem_ledger *l, int dev);

/* Sets every peak to the live bytes now (a run that wants the peak of its
 * steps only, not of its start-up). */
void mem_ledger_reset_peaks(mem_ledger *l);

#endif
