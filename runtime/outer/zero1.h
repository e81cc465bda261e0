/*
 * zero1.h: ZeRO-1 across the data-parallel replicas of `--outer sync`:
 * each of K replicas keeps AdamW's moments for 1/K of the parameters.
 *
 * Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training
 * Trillion Parameter Models" (SC'20), stage 1 ("P_os"), as Megatron-LM's
 * distributed optimizer runs it: the gradients are reduce-scattered (each
 * replica receives the mean of its own shard only), every replica steps
 * its shard with its shard's m and v, and the stepped parameters are
 * all-gathered.  The wire carries what one all-reduce carries (a
 * reduce-scatter plus an all-gather of the same size) plus the norm's
 * chain (5 doubles a tensor a hop, zero1_count_norm_chain), and the optimizer
 * state per replica drops from 8 B to 8/K B per parameter.
 *
 * The determinism contract: losses bit-identical to the unsharded sync.
 *   - The shard is the ring's own cut.  Each segment (islands.h's layer
 *     segments) is split into K chunks as the ring all-reduce cuts it
 *     (outer_ring_chunk), and replica r owns chunk r+1 mod K, the chunk
 *     the ring's reduce-scatter finishes on r (outer_ring_owner).  So the
 *     reduce-scatter is the first half of today's all-reduce, the same
 *     additions in the same order, and the owner holds the same mean.
 *   - AdamW is elementwise (adamw_shard.h), so stepping a chunk on its
 *     owner gives the bits every replica computed for it before.
 *   - Clipping needs the global norm, which today each stage computes as
 *     per-tensor adamw_sum_squares of the whole mean gradient.  No replica
 *     has that buffer any more, so the per-tensor sums are fed piece by
 *     piece in index order, each piece read where it lives (the chunk's
 *     owner): the same additions into the same four lanes
 *     (adamw_sum_squares_feed).  Across processes the lanes travel along
 *     the chain of owners in chunk order (mpi_islands.c).  The trainer
 *     takes the result through trainer_set_stage_sumsq, and its
 *     post-validated step (norm up and down the stages, snapshot, restore
 *     on a wrong guess) runs as before, on the shard.
 *
 * Only the fp32 wire: the int8 wire quantizes the owner's chunk, which
 * would make the stepped parameters, not the gradient, lossy.
 *
 * Checkpoints hold the whole optimizer state (Megatron's distributed
 * optimizer gathers its shards at save the same way): zero1_ckpt_begin
 * assembles m and v from the replicas' shards for trainer_save, and after
 * a trainer_load zero1_ckpt_end splits them again, so one file resumes a
 * sharded or an unsharded run with the same bits.  A sharded trainer
 * refuses to save or load without them (it would write 1/K of m and v).
 */
#ifndef ZB_OUTER_ZERO1_H
#define ZB_OUTER_ZERO1_H

#include <stddef.h>

#include "runtime/outer/islands.h"
#include "runtime/outer/outer_ring.h"
#include "runtime/trainer.h"

/* Replica r of k's shard of stage `stage`: the ranges of the stage's
 * parameters it owns, one per segment of l on that stage whose chunk is
 * not empty, in increasing order, into lo[] and len[] (room for l->n
 * each).  Returns the number of ranges. */
int zero1_ranges(const islands_seg_layout *l, int stage, int k, int r, size_t *lo, size_t *len);

/* 1 when some segment of l is on stage `stage` (pipeline ranks keep only
 * their own stages' segments). */
int zero1_layout_has_stage(const islands_seg_layout *l, int stage);

/* Accounts the norm's chain for a stage of n_tensors tensors over k
 * replicas: k-1 hops of 4 doubles a tensor (the lanes, owner to owner in
 * chunk order), then k-1 copies of a double a tensor (the result from the
 * last owner).  In process the chain is a loop; the bytes are what the
 * processes send (mpi_zero1.c), so both runs report the same traffic. */
void zero1_count_norm_chain(outer_ring_stats *stats, int k, int n_tensors);

/* Shards every stage of t that has segments in l (replica r of k) with
 * trainer_shard_optimizer over zero1_ranges.  Before the first step.  0, or -1 with err set (the
 * backend cannot shard, a stage with nothing to own, memory). */
int zero1_shard_trainer(trainer *t, const islands_seg_layout *l, int k, int r, zb_err *err);

/* Per-tensor squared norms of stage `stage`'s mean gradient, summed in the
 * unsharded order (see the header), into sq[layout n_tensors].  grads[c]
 * is the stage's gradient buffer of the owner of chunk c, for every chunk
 * c of k (in process: each replica's buffer).  acc is scratch of
 * 4 * n_tensors doubles. */
void zero1_stage_sumsq(const trainer *t, const islands_seg_layout *l, int stage, int k,
                       float *const *grads_of_chunk_owner, double *acc, double *sq);

/* Adds the pieces of stage `stage` that chunk c holds (chunk c of each of
 * the stage's segments, read from grads, the stage's gradient buffer of
 * c's owner) into the running lanes acc[4 * n_tensors]: one link of the
 * chain zero1_stage_sumsq runs, for replicas in other processes. */
void zero1_feed_chunk(const trainer *t, const islands_seg_layout *l, int stage, int k, int c,
                      const float *grads, double *acc);

/* The step's reduction, in process, over the k trainers t[0..k) (replica
 * r sharded with zero1_shard_trainer(.., k, r)) after their
 * trainer_backward: the gradients reduce-scattered segment by segment
 * (divisor k), and every trainer given the norms of the mean gradient.
 * Then the caller runs every trainer_apply, then zero1_gather.  0 or -1
 * with err. */
int zero1_reduce(trainer *const *t, int k, const islands_seg_layout *l, outer_ring_stats *stats,
                 zb_err *err);

/* After every trainer_apply: each owner's stepped chunk of every segment
 * copied to the other replicas' parameters around the ring. */
void zero1_gather(trainer *const *t, int k, const islands_seg_layout *l, outer_ring_stats *stats);

/* A checkpoint of sharded replicas: the whole moments of every stage,
 * assembled from the shards (zero1_ckpt_begin) and handed to each
 * replica's trainer for trainer_save / trainer_load. */
typedef struct zero1_ckpt {
    int n_stages; /* entries of m and v */
    float **m;    /* [n_stages] whole first moment of each stage (NULL: not in the layout) */
    float **v;    /* [n_stages] whole second moment */
} zero1_ckpt;

/* Assembles the whole m and v of every stage of l from the shards of the
 * k replicas t[0..k) (replica r sharded as zero1_shard_trainer(.., k, r))
 * and gives them to every replica (trainer_zero1_checkpoint_moments): any
 * replica's trainer_save then writes the whole optimizer state, the same
 * file an unsharded replica writes, and trainer_load fills them.  Costs
 * 8 B a parameter while it lasts.  0, or -1 with err (memory; nothing
 * changed). */
int zero1_ckpt_begin(trainer *const *t, int k, const islands_seg_layout *l, zero1_ckpt *c,
                     zb_err *err);

/* Ends what zero1_ckpt_begin started: with loaded != 0 (the replicas
 * loaded a checkpoint into the whole moments), first copies each
 * replica's ranges of them into its shard; then takes the whole moments
 * back from the trainers and frees them. */
void zero1_ckpt_end(trainer *const *t, int k, const islands_seg_layout *l, zero1_ckpt *c,
                    int loaded);

/* Bytes of AdamW state (m and v) t holds: 2 * 4 * its optimizer floats
 * over all stages (the stages of `own`, or all when own is NULL). */
size_t zero1_optimizer_bytes(const trainer *t, const unsigned char *own);

#endif
