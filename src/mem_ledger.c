/*
 * mem_ledger.c: per-device, per-class byte counters (mem_ledger.h).
 * Relaxed atomics: the counters order nothing, they only count.
 */
#include "src/mem_ledger.h"

#include <assert.h>
#include <stdlib.h>

/* One device's counters, on cache lines of their own. */
typedef struct ledger_device {
    _Alignas(64) size_t live[MEM_CLASSES]; /* bytes held now */
    size_t peak[MEM_CLASSES];              /* most bytes held at once, per class */
    size_t total_live;                     /* Σ live */
    size_t total_peak;                     /* most of total_live at once */
} ledger_device;

struct mem_ledger {
    int n;               /* devices */
    ledger_device *dev;  /* [n] */
};

static const char *const class_names[MEM_CLASSES] = {
    "parameters", "gradients", "optimizer_state", "rollback_state",
    "activations", "vocab_cells", "comm_buffers", "workspace",
};

const char *mem_class_name(mem_class c)
{
    assert(c >= 0 && c < MEM_CLASSES);
    return class_names[c];
}

mem_ledger *mem_ledger_new(int n_devices)
{
    if (n_devices < 1)
        return NULL;
    mem_ledger *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->dev = aligned_alloc(_Alignof(ledger_device), sizeof *l->dev * (size_t)n_devices);
    if (!l->dev) {
        free(l);
        return NULL;
    }
    for (int d = 0; d < n_devices; d++)
        l->dev[d] = (ledger_device){ { 0 }, { 0 }, 0, 0 };
    l->n = n_devices;
    return l;
}

void mem_ledger_free(mem_ledger *l)
{
    if (!l)
        return;
    free(l->dev);
    free(l);
}

int mem_ledger_devices(const mem_ledger *l)
{
    return l ? l->n : 0;
}

/* *peak := max(*peak, v), racing other raisers. */
static void raise_peak(size_t *peak, size_t v)
{
    size_t old = __atomic_load_n(peak, __ATOMIC_RELAXED);
    while (v > old
           && !__atomic_compare_exchange_n(peak, &old, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

void mem_ledger_charge(mem_ledger *l, int dev, mem_class c, size_t bytes)
{
    if (!l || bytes == 0)
        return;
    assert(dev >= 0 && dev < l->n && c >= 0 && c < MEM_CLASSES);
    ledger_device *d = &l->dev[dev];
    raise_peak(&d->peak[c], __atomic_add_fetch(&d->live[c], bytes, __ATOMIC_RELAXED));
    raise_peak(&d->total_peak, __atomic_add_fetch(&d->total_live, bytes, __ATOMIC_RELAXED));
}

void mem_ledger_release(mem_ledger *l, int dev, mem_class c, size_t bytes)
{
    if (!l || bytes == 0)
        return;
    assert(dev >= 0 && dev < l->n && c >= 0 && c < MEM_CLASSES);
    ledger_device *d = &l->dev[dev];
    size_t was = __atomic_fetch_sub(&d->live[c], bytes, __ATOMIC_RELAXED);
    assert(was >= bytes); /* released no more than was charged */
    (void)was;
    __atomic_fetch_sub(&d->total_live, bytes, __ATOMIC_RELAXED);
}

size_t mem_ledger_live(const mem_ledger *l, int dev, mem_class c)
{
    assert(l && dev >= 0 && dev < l->n && c >= 0 && c < MEM_CLASSES);
    return __atomic_load_n(&l->dev[dev].live[c], __ATOMIC_RELAXED);
}

size_t mem_ledger_peak(const mem_ledger *l, int dev, mem_class c)
{
    assert(l && dev >= 0 && dev < l->n && c >= 0 && c < MEM_CLASSES);
    return __atomic_load_n(&l->dev[dev].peak[c], __ATOMIC_RELAXED);
}

size_t mem_ledger_total_peak(const mem_ledger *l, int dev)
{
    assert(l && dev >= 0 && dev < l->n);
    return __atomic_load_n(&l->dev[dev].total_peak, __ATOMIC_RELAXED);
}

void mem_ledger_reset_peaks(mem_ledger *l)
{
    for (int i = 0; l && i < l->n; i++) {
        ledger_device *d = &l->dev[i];
        for (int c = 0; c < MEM_CLASSES; c++)
            __atomic_store_n(&d->peak[c], __atomic_load_n(&d->live[c], __ATOMIC_RELAXED),
                             __ATOMIC_RELAXED);
        __atomic_store_n(&d->total_peak, __atomic_load_n(&d->total_live, __ATOMIC_RELAXED),
                         __ATOMIC_RELAXED);
    }
}
