/*
 * run_checks.h: what `zbsched run` checks before it allocates a trainer.
 *
 * Two questions, both answered from sizes alone, before a byte of model
 * state exists (`profile` asks them too, for its one micro-batch):
 *   - does the runtime implement this model?  Its kernels are Llama-style
 *     only (SwiGLU, RoPE, untied head; fp32 on the CPU, bf16 on CUDA), so a
 *     model file asking for anything else is refused instead of silently
 *     trained as something it is not;
 *   - does the run fit in this machine's memory?  The runtime's one
 *     estimate (runtime/footprint.h: parameters, gradients, AdamW moments
 *     and post-validation's copy of stage 0, the activations every device keeps
 *     for the micro-batches it has in flight walked from the schedule's op
 *     order with the kernels' own slot table, the messages between stages,
 *     the batch and the text) against the memory available now.  A run
 *     that cannot fit is refused with one line giving needed against
 *     available memory, rather than swapping the machine to a halt
 *     (`--batch-size 65536` used to reach 12 GB before failing or being
 *     killed).
 */
#ifndef ZB_CLI_RUN_CHECKS_H
#define ZB_CLI_RUN_CHECKS_H

#include <stddef.h>

#include "src/err.h"
#include "src/model.h"
#include "src/sched.h"

/* Refuses a model the runtime does not implement: swiglu 0, a tied
 * embedding, rope_theta 0 (learned positions), and a dtype other than the
 * device's (fp32 on the CPU, bf16 with cuda) when the model came from a
 * file (`from_file`; the presets' dtype describes the cost model's
 * hardware and is documented as ignored on the CPU).  Returns 0 or -1
 * with err naming the field. */
int run_check_model(const zb_model *m, int from_file, int cuda, zb_err *err);

/* The parts of a CPU run's memory estimate, in bytes. */
typedef struct run_memory {
    double params;      /* parameters, gradients, AdamW m and v, stage 0's post-validation copy */
    double activations; /* saved activations at the busiest moment, all devices */
    double messages;    /* activations and gradients queued between stages */
    double data;        /* the text's tokens and the step's batch */
    double total;       /* the sum, times the replicas */
    int in_flight;      /* most micro-batches any device holds at once */
} run_memory;

/* Estimates the memory of `replicas` CPU trainers of schedule s (valid)
 * for model m (micro_batch and vocab as the trainer will use them) on a
 * text of n_tokens tokens, split as the plan says (layers_per_stage[S];
 * NULL: the even split) with each stage's recompute level
 * (recompute_stages[S], LLAMA_RC_* / a plan's levels; NULL: none):
 * runtime/footprint.h's footprint_estimate.  A split or model the trainer
 * refuses gives 0 (its own refusal comes later, before any allocation).
 * Never allocates more than O(stages). */
void run_estimate_memory(const sched_t *s, const zb_model *m, size_t n_tokens, int replicas,
                         const int *layers_per_stage, const int *recompute_stages,
                         run_memory *out);

/* Estimates `profile`'s memory on the CPU: runtime/profiler.h's
 * profiler_footprint for m at its micro-batch on the threads the CPU
 * profile uses, into *out (params: the stage buffers; in_flight 1). */
void run_estimate_profile(const zb_model *m, run_memory *out);

/* The memory this process may still use, in bytes (runtime/footprint.h's
 * host_available_bytes: MemAvailable, else the physical memory), or 0 when
 * unknown: the one denominator of every memory check of `run` and
 * `profile`, run_plan_fits's included. */
double run_memory_available(void);

/* Refuses a run whose estimate exceeds the available memory: "run needs
 * about 120.3 GB (...), but this machine has 24.0 GB of memory: ...".
 * Returns 0 or -1 with err set. */
int run_check_memory(const run_memory *mem, double physical, zb_err *err);

/* Under an address-space limit (`ulimit -v`), fails (-1, err: one line
 * naming the limit and what the run maps) when mem's total and `threads`
 * kernel threads (runtime/footprint.h: each maps a BLAS buffer, an arena
 * and a stack) do not fit in what is left: a BLAS call past the limit
 * would hang.  0 when they fit or there is no limit. */
int run_check_address_space(const run_memory *mem, int threads, zb_err *err);

#endif
