/*
 * adamw_shard.h: AdamW on a shard of a stage's parameters (ZeRO-1).
 *
 * Under ZeRO-1 (Rajbhandari et al., "ZeRO: Memory Optimizations Toward
 * Training Trillion Parameter Models", SC'20, stage 1) each of K
 * data-parallel replicas keeps the AdamW moments of 1/K of the parameters
 * and steps only those; the replicas then exchange the stepped
 * parameters.  The shard of a stage is a list of ranges of its flat
 * parameter buffer (runtime/outer/zero1.h cuts them); m and v hold only
 * the ranges' floats, concatenated in range order.
 *
 * The update of an element is adamw_update's, elementwise and compiled
 * without FMA contraction, so an element stepped here gets the same bits
 * as in adamw_step_stage over the whole buffer: sharding changes where the
 * moments live, never the arithmetic.
 */
#ifndef ZB_KERNELS_ADAMW_SHARD_H
#define ZB_KERNELS_ADAMW_SHARD_H

#include <stddef.h>

#include "kernels/cpu/adamw.h"

/* adamw_step_stage restricted to the n ranges [lo[i], lo[i] + len[i]) of
 * the stage's buffers (increasing, disjoint, inside the stage): params and
 * grads are the whole stage's buffers, m and v the shard's (sum of len
 * floats, range i starting after ranges 0..i-1).  A range may cross
 * tensors; each piece decays as its tensor does. */
void adamw_step_stage_ranges(const llama_stage *st, const adamw_config *c, float *params,
                             const float *grads, float *m, float *v, const size_t *lo,
                             const size_t *len, int n, int t, float lr, float grad_scale);

/* adamw_sum_squares of one tensor of n floats, fed in pieces: the four
 * partial sums acc[0..3] (zero at the start) take elements [from, to) of
 * the tensor, whose values are g[0 .. to-from), in the order and lanes
 * adamw_sum_squares uses (element i < n rounded down to 4 into acc[i mod
 * 4], the tail into acc[0]).  Feeding the pieces in index order, from
 * whichever replica holds each, then adamw_sum_squares_finish gives the
 * bits of adamw_sum_squares over the whole tensor. */
void adamw_sum_squares_feed(double acc[4], const float *g, size_t from, size_t to, size_t n);

/* (acc[0] + acc[1]) + (acc[2] + acc[3]), adamw_sum_squares's last line. */
double adamw_sum_squares_finish(const double acc[4]);

#endif
