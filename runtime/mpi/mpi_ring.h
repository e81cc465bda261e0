/*
 * mpi_ring.h: the outer all-reduce of runtime/outer/outer_ring.h between
 * processes, one replica per MPI rank.
 *
 * outer_ring.c simulates a ring of K in-process replicas.  Here the ring is
 * real: rank r of the communicator holds one replica's buffer and talks to
 * ranks r-1 and r+1 with MPI point-to-point.  Two wires:
 *
 *   fp32  MPI's own MPI_Allreduce(MPI_SUM), then a division by the divisor.
 *         Which algorithm MPI uses, and so in which order the K values of
 *         an element are added, is MPI's choice.  For K = 2 the sum a + b
 *         is the same bits in either order (IEEE addition is commutative),
 *         so the result equals the in-process ring's bit for bit.  For K >= 3
 *         the in-process ring adds chunk c as ((x_c + x_c+1) + x_c+2) + ...
 *         around the ring, and MPI may associate differently: results then
 *         agree to rounding, not bit for bit.
 *   int8  INTELLECT-1's ring, step for step the arithmetic of
 *         outer_ring.c: K-1 reduce-scatter steps in which rank r encodes
 *         its running partial sum of chunk (r - t) mod K, sends it to r+1
 *         and adds the decoded message it gets from r-1 into chunk
 *         (r - 1 - t) mod K; the owner of chunk c (rank c-1 mod K) divides
 *         it, encodes it once and keeps the decoded values; K-1 all-gather
 *         steps forward the owner's bytes and table unchanged.  The same
 *         chunk bounds, the same quantizer calls on the same inputs in the
 *         same order: the result is bit-identical to the in-process ring
 *         for every K, on every rank.
 *
 * A message is one byte buffer: the 256-float table, then the indices
 * (int8), or the floats (fp32 never goes through here).  Bytes counted are
 * those this rank handed to MPI_Sendrecv: per int8 message len + 1024, as
 * outer_quant_wire_bytes, so the sum over ranks equals
 * outer_allreduce_bytes.  For the fp32 wire MPI's traffic is not
 * observable; the count is what a ring all-reduce sends (the same
 * formula), stated as such in docs/mpi.md.
 *
 * Workload: one call per parameter segment per outer step (DiLoCo) or per
 * gradient segment per step (sync); K up to a few dozen ranks.
 */
#ifndef ZB_MPI_RING_H
#define ZB_MPI_RING_H

#include <stddef.h>

#include <mpi.h>

#include "runtime/outer/outer_ring.h"
#include "src/err.h"

/* All-reduces this rank's buf (n floats) with the same-sized buffers of
 * every rank of comm so that every rank ends with (sum over ranks) /
 * divisor, bit-identical across ranks.  stats (may be NULL) gets the bytes
 * and messages THIS rank sent (sum them over ranks for the ring's total).
 * Collective over comm.  Returns 0, or -1 with err set (invalid divisor,
 * memory, an MPI error). */
int mpi_allreduce_mean(outer_wire wire, float *buf, size_t n, float divisor, MPI_Comm comm,
                       outer_ring_stats *stats, zb_err *err);

/* ZeRO-1's halves of the fp32 all-reduce (runtime/outer/zero1.h), on
 * point-to-point messages in the in-process ring's order, so the sums are
 * outer_reduce_scatter's bits for every K (not only K <= 2, as with
 * MPI_Allreduce).  mpi_reduce_scatter_mean: K-1 steps in which rank r
 * sends its partial of chunk (r - t) mod K to r+1 and adds the one from
 * r-1 into chunk (r - 1 - t) mod K; then rank r, the owner of chunk r+1,
 * divides it by divisor.  The other chunks of buf then hold partial
 * sums.  mpi_allgather_chunks: K-1 steps forwarding chunk (r + 1 - t) to
 * r+1, so every rank ends with every owner's chunk.  stats gets what this
 * rank sent (4 bytes a float).  Collective over comm; 0, or -1 with err
 * (divisor, memory, an MPI error, a chunk over INT_MAX floats). */
int mpi_reduce_scatter_mean(float *buf, size_t n, float divisor, MPI_Comm comm,
                            outer_ring_stats *stats, zb_err *err);
int mpi_allgather_chunks(float *buf, size_t n, MPI_Comm comm, outer_ring_stats *stats,
                         zb_err *err);

#endif
