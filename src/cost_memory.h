/*
 * cost_memory.h: memory layers in the cost model (docs/memory-layers.md,
 * docs/cost-model.md).  A memory layer is costed as a plain layer
 * (cost_parts.h) plus a delta that swaps its FFN for the memory block;
 * this module adds those deltas to stages and chooses the split of a model
 * that has them.  It calls cost_parts.h only; cost_model.h calls it.
 */
#ifndef ZB_COST_MEMORY_H
#define ZB_COST_MEMORY_H

#include "src/cost_parts.h"

/* The per-micro-batch difference between a memory layer and a plain layer
 * of m (FLOPs and times of F, B, W; M_B; M_W; parameters, without the value
 * table when it is shared), and the value table's parameters.  Times use
 * g's peak and efficiency even with a profile (the profile measures plain
 * layers only); the value rows' gathers are timed at g->hbm_bw when
 * set.  delta->transient is the change of the recompute transient. */
void cost_memory_delta(const zb_model *m, const zb_gpu *g, const cost_options *o,
                       cost_part *delta, double *value_table_params);

/* Useful FLOPs (F+B+W, no recompute) the memory layers change in one
 * micro-batch against the plain model (negative: they do less than the
 * FFNs they replace); 0 without memory layers.  For cost_model_flops. */
double cost_memory_flops_delta(const zb_model *m, const cost_options *o);

/* Adds the memory layers of st's layer range to st, virtual stage number
 * `stage` (times, activations, parameters, static bytes; a shared value
 * table to the stage holding the first memory layer), under that stage's
 * recompute setting (cost_stage_recomputes).  No-op without memory layers. */
void cost_memory_stage_adjust(const zb_model *m, const zb_gpu *g, const cost_options *o,
                              int stage, cost_stage *st);

/* The split of a model with memory layers, by time and then memory: the
 * smallest largest stage time T* over contiguous splits (embedding time on
 * stage 0, head on S-1, middle stages at least one layer, a shared value
 * table's layers all on one stage), then among the splits whose largest
 * stage time is within COST_MEMORY_TIME_SLACK of T*, the one whose largest
 * static state (weights, gradients, optimizer) is smallest.  Fills
 * layers[n_stages]; returns 0 or -1 (too few layers, no split keeps a shared
 * table together, or the model too large for the O(S·L²) search). */
int cost_split_layers_memory(const zb_model *m, const zb_gpu *g, const cost_options *o,
                             int n_stages, int *layers, zb_err *err);

/* Slack on the largest stage time that cost_split_layers_memory may spend
 * to reduce the largest static state. */
#define COST_MEMORY_TIME_SLACK 0.05

#endif
