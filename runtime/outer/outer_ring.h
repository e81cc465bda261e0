/*
 * outer_ring.h: ring all-reduce of float buffers over K in-process replicas,
 * in fp32 or with INTELLECT-1's int8 codebook (outer_quant.h).
 *
 * The replicas of an island run live in one process, so the "network" is
 * simulated: each replica's buffer is cut into K chunks and the ring runs
 * K-1 reduce-scatter steps then K-1 all-gather steps.  In every step all K
 * messages are first built from the senders' current buffers and only then
 * delivered, exactly as they would flow between machines, and every byte a
 * real link would carry is counted (payload, plus the 1 KiB table of every
 * int8 message).
 *
 *   reduce-scatter, step t: rank r sends chunk (r - t) mod K to rank r+1,
 *       which adds it (fp32 accumulation; int8 messages are the sender's
 *       running partial sum, re-quantized at every hop as in prime);
 *   the owner of chunk c (rank c-1 mod K) divides it by the divisor and, in
 *       int8, quantizes it once and keeps the decoded values itself;
 *   all-gather, step t: rank r forwards chunk (r + 1 - t) mod K unchanged
 *       (int8: the owner's bytes and table, never re-quantized).
 *
 * Hence every replica ends with bit-identical buffers.  Total bytes for n
 * floats: fp32 2(K-1)*4n; int8 2(K-1)*(n + 1024 * non-empty chunks), about
 * a quarter.  Deterministic: no threads, fixed order.
 *
 * Workload: one call per layer (EDiT) or per parameter segment (DiLoCo)
 * every H inner steps, or per gradient segment every step (sync baseline);
 * K up to a few dozen, n up to ~10^8.
 */
#ifndef ZB_OUTER_RING_H
#define ZB_OUTER_RING_H

#include <stddef.h>
#include <stdint.h>

#include "src/err.h"

typedef enum outer_wire {
    OUTER_WIRE_FP32 = 0, /* plain fp32 ring all-reduce, the baseline */
    OUTER_WIRE_INT8 = 1, /* INTELLECT-1 uint8 indices + 256-float table */
} outer_wire;

typedef struct outer_ring_stats {
    uint64_t bytes_sent; /* bytes put on links, summed over all ranks */
    uint64_t messages;   /* point-to-point messages sent (non-empty chunks) */
    uint64_t reductions; /* all-reduce calls accounted */
} outer_ring_stats;

/* "fp32" / "int8". */
const char *outer_wire_name(outer_wire w);

/* Parses "fp32" or "int8"; returns the wire or -1. */
int outer_wire_parse(const char *text);

/* All-reduces bufs[0..k) (each n floats, caller-owned, distinct) so that on
 * return every buffer holds (sum over r of bufs[r]) / divisor, bit-identical
 * across the k buffers.  k == 1 sends nothing and only divides.  Adds the
 * traffic to *stats (may be NULL).  Returns 0, or -1 with err set when k or
 * divisor is invalid or scratch memory runs out (buffers then unspecified). */
int outer_allreduce(outer_wire wire, float *const *bufs, int k, size_t n,
                    float divisor, outer_ring_stats *stats, zb_err *err);

/* Chunk c of k over n elements, as the ring cuts it: [*lo, *lo + *len). */
void outer_ring_chunk(size_t n, int k, int c, size_t *lo, size_t *len);

/* The rank that owns chunk c of a k-ring after the reduce-scatter: c-1 mod k
 * (so rank r owns chunk r+1 mod k). */
int outer_ring_owner(int k, int c);

/* ZeRO-1's halves of the fp32 all-reduce (runtime/outer/zero1.h).
 * outer_reduce_scatter runs outer_allreduce's fp32 reduce-scatter and the
 * owners' division: afterwards chunk c of bufs[outer_ring_owner(k, c)]
 * holds (sum over r of bufs[r]) / divisor with exactly the bits
 * outer_allreduce gives, and the other chunks of every buffer hold
 * partial sums.  outer_allgather copies each owner's chunk to every other
 * buffer around the ring.  Traffic into *stats (may be NULL) as
 * outer_allreduce counts it; the two together send what one fp32
 * all-reduce sends.  0, or -1 with err (k, divisor, memory). */
int outer_reduce_scatter(float *const *bufs, int k, size_t n, float divisor,
                         outer_ring_stats *stats, zb_err *err);
void outer_allgather(float *const *bufs, int k, size_t n, outer_ring_stats *stats);

/* Bytes outer_allreduce sends for (wire, k, n), computed without running it. */
uint64_t outer_allreduce_bytes(outer_wire wire, int k, size_t n);

/* Accounts an all-gather of `count` floats from each of k ranks over the
 * ring (each value travels k-1 hops): used for the per-replica norms and
 * step counts EDiT exchanges. */
void outer_ring_count_allgather(outer_ring_stats *stats, int k, size_t count);

#endif
