/*
 * mpi_zero1.h: ZeRO-1 (runtime/outer/zero1.h) with the replicas in other
 * processes: one rank per replica, or P pipeline ranks per replica whose
 * ring joins the ranks of the same schedule device (mpi_islands.h).
 *
 * The same arithmetic as the in-process zero1.c, so the same bits:
 *   reduce  every segment of this rank's stages reduce-scattered over the
 *           ring in the in-process order (mpi_reduce_scatter_mean), then
 *           per stage the norm's lanes passed along the owners in chunk
 *           order (owner of chunk 0 first: rank K-1, then 0, 1, ...), each
 *           adding its own chunk (zero1_feed_chunk), and the finished
 *           per-tensor sums broadcast from the last owner to the ring;
 *   gather  after trainer_apply, each segment all-gathered over the ring.
 * Traffic counted as zero1.h's (this rank's sends).
 */
#ifndef ZB_MPI_ZERO1_H
#define ZB_MPI_ZERO1_H

#include <mpi.h>

#include "runtime/outer/zero1.h"

/* After trainer_backward on this rank's stages of the replica: the
 * reduce-scatter and the norms, handed to t with trainer_set_stage_sumsq.
 * l: this rank's segments; ring: this device's ranks of every replica,
 * in replica order.  Collective over ring.  0, or -1 with err. */
int mpi_zero1_reduce(trainer *t, const islands_seg_layout *l, MPI_Comm ring,
                     outer_ring_stats *stats, zb_err *err);

/* After trainer_apply: every segment's stepped chunks all-gathered.
 * Collective over ring.  0, or -1 with err. */
int mpi_zero1_gather(trainer *t, const islands_seg_layout *l, MPI_Comm ring,
                     outer_ring_stats *stats, zb_err *err);

#endif
