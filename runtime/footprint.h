/*
 * footprint.h: how much host memory a CPU trainer will hold at least,
 * before it is created.
 *
 * `zbsched run` of a file planned for a large model (the default search
 * plans Llama-3 8B) must not start allocating tens of gigabytes and then
 * die or swap: it asks first.  The figure is a lower bound of what
 * trainer_create allocates for good: every stage keeps seven fp32 copies
 * of its parameters (weights, gradients, the two AdamW moments and the
 * three post-validation snapshots, runtime/trainer.c).  Activations,
 * transient weight-gradient buffers and channel messages come on top and
 * depend on the schedule's order, so they are left out: a "no" from this
 * check is certain, a "yes" is not a promise.
 *
 * Workload: one llama_stage_init per stage (a tensor table, no weights);
 * microseconds even for Llama-3 70B.
 */
#ifndef ZB_RUNTIME_FOOTPRINT_H
#define ZB_RUNTIME_FOOTPRINT_H

#include "src/err.h"
#include "src/model.h"

/* fp32 copies of the parameters a CPU trainer keeps per stage. */
#define TRAINER_PARAM_COPIES 7

/* Stores in *params the parameters of model m split into n_stages stages
 * (layers_per_stage[n_stages], or NULL for the even split of split.h), and
 * in *bytes the trainer's fixed memory for them (TRAINER_PARAM_COPIES fp32
 * copies).  m->vocab should already be the data's.  Returns 0, or -1 with
 * err set when the split or the model is invalid. */
int trainer_footprint(const zb_model *m, int n_stages, const int *layers_per_stage,
                      double *params, double *bytes, zb_err *err);

/* Bytes of memory this process may still use: MemAvailable from
 * /proc/meminfo, else the physical memory size; 0 when neither is known. */
double host_available_bytes(void);

#endif
