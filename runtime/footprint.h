/*
 * footprint.h: how much host memory a CPU run will hold, before anything
 * is allocated: the one memory estimate of the runtime, which `run` and
 * `profile` check against this machine's available memory
 * (src/cli/run_checks.h) before they create a trainer.
 *
 * `zbsched run` of a file planned for a large model (the default search
 * plans Llama-3 8B) must not start allocating tens of gigabytes and then
 * die or swap: it asks first.  Every part comes from the code that
 * allocates it, not from a copy of its sizes:
 *
 *   parameters   param_count.h's count of each stage of the plan's split
 *                (the count llama_stage_init lays out), times the
 *                TRAINER_PARAM_COPIES fp32 copies a trainer keeps
 *                (weights, gradients, the two AdamW moments), plus the
 *                post-validation copy of stage 0's weights;
 *   activations  each device's saved states, walked through its lane in
 *                the schedule's order with the kernels' own slot table
 *                (llama_saved_plan) at each stage's recompute level: a
 *                micro-batch holds its stage's forward slots from F to B,
 *                the most during B, what W reads from B to W; plus each
 *                device's kernel scratch (normed input, attention, MLP);
 *   vocabulary   the vocabulary passes' buffers (the CPU backend's shards
 *                and every (shard, micro-batch) cell, kept for the run;
 *                footprint_devices walks them per device as the memory
 *                ledger charges them);
 *   messages     at worst every micro-batch's activation and gradient
 *                waiting at every stage boundary;
 *   data         the text's tokens and the step's batches.
 *
 * The walk samples after every op exactly as the trainer's activation
 * profile does (trainer_trace's device_peak_activation_bytes), so the two
 * agree to the byte (tests/runtime/test_footprint.c); the check uses the
 * peak inside B as well, which the profile cannot see.  Allocator overhead
 * and the kernels' temporaries come on top: FOOTPRINT_SLACK.
 *
 * Workload: one llama_stage_init and one slot table per stage and a walk
 * of every op; microseconds even for Llama-3 70B.
 */
#ifndef ZB_RUNTIME_FOOTPRINT_H
#define ZB_RUNTIME_FOOTPRINT_H

#include <stddef.h>

#include "src/err.h"
#include "src/mem_ledger.h"
#include "src/model.h"
#include "src/sched.h"

/* fp32 copies of the parameters a CPU trainer keeps per stage (weights,
 * gradients, AdamW m and v); post-validation adds one copy of stage 0's
 * alone (docs/cost-model.md, "rollback state"). */
#define TRAINER_PARAM_COPIES 4

/* What the parts above leave out (the kernels' temporaries in B and W,
 * allocator overhead): at batch 500 the peak RSS was 11% above the sum
 * (bench/README.md), hence 1.15. */
#define FOOTPRINT_SLACK 1.15

/* The estimate of one run, in bytes. */
typedef struct footprint {
    double params;       /* parameters of every stage (a count, not bytes) */
    double param_bytes;  /* TRAINER_PARAM_COPIES fp32 copies of them, and the
                          * copy of stage 0's */
    double activations;  /* saved activations at each device's busiest moment
                          * (inside B included), summed over the devices, with
                          * each device's kernel scratch and the vocabulary
                          * passes' buffers */
    double messages;     /* activations and gradients queued between stages */
    double data;         /* the text's tokens and the step's batches */
    double total;        /* (param_bytes + activations + messages) x replicas,
                          * plus data, times FOOTPRINT_SLACK */
    int in_flight;       /* most micro-batches any device holds at once */
} footprint;

/* The estimate of `replicas` CPU trainers of schedule s (valid) for model
 * m (vocab and micro_batch as the trainer will use them) split by
 * layers_per_stage[S] (the plan's; NULL: split.h's even split) with each
 * stage's recompute level recompute_stages[S] (LLAMA_RC_*; NULL: none), on
 * a text of n_tokens tokens.  Returns 0, or -1 with err when the split or
 * the model is one the trainer refuses (then nothing is estimated). */
int footprint_estimate(const sched_t *s, const zb_model *m, const int *layers_per_stage,
                       const int *recompute_stages, size_t n_tokens, int replicas,
                       footprint *out, zb_err *err);

/* The walk alone: for each device d of s, after_op[d] the most bytes of
 * saved activations (and vocabulary cells) it holds after any op of its
 * lane, the figure trainer_trace reports, and in_op[d] the most at any
 * moment, inside F (every forward slot, before a recompute level drops
 * some) and inside B included.  Same arguments as footprint_estimate; either
 * array may be NULL.  0 or -1 with err. */
int footprint_activation_peaks(const sched_t *s, const zb_model *m, const int *layers_per_stage,
                               const int *recompute_stages, double *after_op, double *in_op,
                               int *in_flight, zb_err *err);

/* One device's predicted memory, by the ledger's classes. */
typedef struct footprint_device {
    double bytes[MEM_CLASSES]; /* each class's peak, in bytes at fp32 */
    double total;              /* the device's peak, all classes at once */
} footprint_device;

/* The prediction the memory ledger (src/mem_ledger.h) checks: for each
 * device d of s, out[d] (s->n_devices of them) the bytes of each class a
 * CPU trainer of s holds there, with the same arguments as
 * footprint_estimate, and `speculate` 1 when the trainer runs stage 0's
 * optimizer step speculatively (trainer_may_speculate).  Each class is
 * priced from the code that allocates it (docs/cost-model.md, "Buffer
 * classes"): param_stage for the stage buffers, op_backward_w's rule for
 * the spare gradients, the activation walk (without the vocabulary
 * cells) for the saved state.  For a vocabulary plan the same walk
 * replays backend_cpu_vocab.c's charges in one process (vocab_cells: the
 * shards' columns, dW and statistics, the cells' logits and partials, the
 * dW of a T run ahead; comm_buffers: the head inputs X on the last
 * stage's device; workspace: the passes' scratch), and the device's total
 * is the walk's peak of activations, cells, partials and X together on
 * top of what is held for the run.  Activation messages between stages
 * and the kernels' per-thread scratch are not predicted (0): the ledger
 * does not charge them (docs/cost-model.md says why).  0 or -1 with err. */
int footprint_devices(const sched_t *s, const zb_model *m, const int *layers_per_stage,
                      const int *recompute_stages, int speculate, footprint_device *out,
                      zb_err *err);

/* Stores in *params the parameters of model m split into n_stages stages
 * (layers_per_stage[n_stages], or NULL for the even split of split.h), and
 * in *bytes the trainer's fixed memory for them (TRAINER_PARAM_COPIES fp32
 * copies, and post-validation's copy of stage 0's, which a trainer that
 * never speculates does not take): footprint_estimate's first part, for a check that comes before
 * the schedule's details matter.  m->vocab should already be the data's.
 * Returns 0, or -1 with err set when the split or the model is invalid. */
int trainer_footprint(const zb_model *m, int n_stages, const int *layers_per_stage,
                      double *params, double *bytes, zb_err *err);

/* Bytes of memory this process may still use: MemAvailable from
 * /proc/meminfo, else the physical memory size; 0 when neither is known.
 * The one denominator of every memory check of `run` and `profile`. */
double host_available_bytes(void);

/* Address space one CPU kernel thread maps beyond the run's data: OpenBLAS
 * mallocs a 128 MiB + 4 KiB buffer on a thread's first GEMM (seen in a
 * backtrace of OpenBLAS 0.3.21, Debian 12), glibc reserves a 64 MiB arena
 * for a thread's first malloc, and the thread's stack (RLIMIT_STACK, 32
 * MiB when unlimited).  Under `ulimit -v` a GEMM whose buffer does not fit
 * does not fail: OpenBLAS retries the allocation forever, so the limit
 * must be checked before the first one. */
double footprint_thread_address_space(void);

/* Bytes of address space this process may still map: RLIMIT_AS less its
 * size now (VmSize), 0 when nothing is left, or -1 when there is no limit
 * (the usual case). */
double host_address_space_left(void);

#endif
