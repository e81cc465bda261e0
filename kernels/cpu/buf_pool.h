/*
 * buf_pool.h: a pool of heap buffers reused by exact size, for the saved
 * state of a pipeline stage (llama.h).
 *
 * WHY.  Every micro-batch's forward allocates a few dozen activation
 * buffers and its B and W free them again; with m micro-batches per step
 * that is thousands of malloc/free pairs per step, on several worker
 * threads.  glibc serves each thread from its own arena and trims an
 * arena's top (madvise/munmap) whenever enough of it is free, and it hands
 * buffers above its mmap threshold (128 KiB at first) straight to mmap, so
 * the same bytes are returned to the kernel and faulted back in, zeroed,
 * micro-batch after micro-batch (for shakespeare-char at micro-batch 1:
 * about 10,000 minor faults per step, bench/README.md, "plan loop").  A
 * stage needs the same few buffer sizes over and over, and at most as many
 * of each as the schedule keeps in flight, so it keeps what it freed and
 * hands it out again: after the first step no saved-state buffer is
 * allocated at all.
 *
 * DESIGN.  A handful of size classes (a stage's slots come in fewer than
 * ten distinct sizes), each a LIFO stack of idle buffers: the buffer freed
 * last, the one most likely still in cache, is reused first.  One mutex,
 * because a stage's saved states are used by its device's worker and, for
 * evaluation, by the main thread; uncontended it costs tens of nanoseconds
 * per buffer against microseconds of compute.  The pool holds at most the
 * high-water mark of what was out at once (the peak that the schedule's
 * memory model predicts); buf_pool_free releases it.  Sizes beyond the
 * class table are served by malloc/free directly, so an unusual caller
 * degrades to the old behaviour rather than failing.
 *
 * Buffers come back with whatever their previous user left in them, just
 * as malloc's do: callers must write before they read (the kernels do).
 */
#ifndef ZB_KERNELS_BUF_POOL_H
#define ZB_KERNELS_BUF_POOL_H

#include <stddef.h>

typedef struct buf_pool buf_pool;

/* An empty pool, or NULL when out of memory. */
buf_pool *buf_pool_new(void);

/* Frees the pool and every idle buffer in it (NULL is fine).  Buffers
 * still out must not be returned afterwards: free the users first. */
void buf_pool_free(buf_pool *p);

/* A buffer of `bytes` bytes (> 0): an idle one of exactly that size when
 * the pool has one, else a new malloc.  NULL when out of memory. */
void *buf_pool_get(buf_pool *p, size_t bytes);

/* Returns buf (from buf_pool_get with the same `bytes`; NULL is fine) for
 * reuse.  Frees it instead when the pool cannot grow its bookkeeping. */
void buf_pool_put(buf_pool *p, void *buf, size_t bytes);

/* Charges the buffers out of p from now on to device dev's saved
 * activations in ledger l (src/mem_ledger.h; NULL: none): buf_pool_get
 * charges, buf_pool_put releases, so the ledger sees the bytes in use, as
 * the schedule's memory model counts them, and not the idle ones kept for
 * reuse (buf_pool_idle_bytes).  Set it while no buffer is out. */
typedef struct mem_ledger mem_ledger;
void buf_pool_set_ledger(buf_pool *p, mem_ledger *l, int dev);

/* Bytes of the idle buffers the pool holds now. */
size_t buf_pool_idle_bytes(buf_pool *p);

/* Buffers buf_pool_get has had to malloc so far (reuse did not serve). */
long buf_pool_mallocs(buf_pool *p);

#endif
