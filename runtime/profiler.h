/*
 * profiler.h: measure what the cost model needs on a device: the time of
 * F, B and W of one micro-batch per transformer layer, through the
 * embedding and through the final norm + LM head + loss, the activation
 * memory each leaves allocated, the bytes a stage keeps per layer, and the
 * cost of one stage-to-stage transfer through the runtime's channel.
 *
 * ONE PROFILER FOR EVERY BACKEND.  Everything goes through the backend
 * interface (runtime/backend.h): the stages, saved states, activations and
 * ops are the backend's, timed on the host clock around each op and the
 * stage's sync, as the executor issues and waits for them.  The CPU
 * (profiler_measure) is the CPU backend; `profile --device cuda` is the
 * CUDA module's backend under the same code (kernels/cuda/gpu_profile.c).
 *
 * Each part is measured on a stage holding just that part (kernels/cpu/
 * llama.h allows an embedding-only or head-only stage), single-threaded
 * BLAS per thread as in training; the reported time is the median of the
 * repetitions, which shrugs off the occasional preemption on a shared
 * machine better than the mean.  The transfer time is half the round trip
 * of an activation-sized message between two devices through a zb_chan
 * with the backend's fences, what the in-process transport does.
 *
 * WHAT THE RUNTIME EXECUTES, NOT AN ISOLATED LAYER.  Timing one layer on
 * one reused saved state, F, B, W back to back, measured a best case the
 * pipeline never sees: on the development VM (1 MiB L2 per core) the
 * `tiny` layer's weights, gradients and saved state (about 0.9 MB) stay
 * in L2 from one repetition to the next, while a stage of two or more
 * layers with several micro-batches in flight streams them from L3.
 * Paired with a training step right after it (bench_profile_fidelity,
 * bench/README.md "plan loop"), that profile had the run's W at 1.2-1.4x
 * and B at 1.1-1.2x its figures.  So the layer is now timed as a stack of
 * up to 4 layers (the model's leading plain layers) with 2 micro-batches
 * in flight: op i is F of micro-batch i followed by B and W of
 * micro-batch i-1, each on its own saved state, and every time is divided
 * by the stack's layer count.  The embedding and the head are timed the
 * same way with 2 in flight.  One warm-up round of the 2 states precedes
 * the timed repetitions.  The saved-activation bytes are exact per layer
 * either way (the slots are per layer).
 *
 * WHICH CORE.  The development VM's two cores do not run at the same
 * speed: for seconds at a time one of them runs these kernels up to 1.5x
 * slower than the other (its host core is shared with another tenant;
 * a scalar loop keeps its speed, a GEMM loop does not), and which one is
 * slow changes.  A profile on one thread landed on either, so the same
 * command measured 0.41 or 0.61 ms per `tiny` layer, while a two-device
 * run always had one device on the slower core and paced the pipeline by
 * it.  So every part is timed on one thread per online CPU at once (at
 * most 8), each with its own stage and buffers and all starting together,
 * and the profile keeps the slowest thread's median of each op: a
 * pipeline step waits for its slowest device.  Running at once also puts
 * the cores' shared L3 and memory traffic into the figures, as a run
 * does.  Under heavy load from other processes the slowest thread also
 * carries their preemptions, as the run's device threads do.
 *
 * Expected workload: under a second for `tiny`, about 8 s for
 * `shakespeare-char` at micro-batch 1 (20 repetitions) on the development VM.
 * Memory: per thread, the stack's four stage buffers (weights, gradients,
 * AdamW moments: what a backend's stage_new allocates) and 2 saved states
 * of it (profiler_footprint); shakespeare-char at micro-batch 8 peaked at
 * 1.6 GB resident for the two threads before the stages had moments (one
 * micro-batch holds up to 72 MiB per layer after B).
 */
#ifndef ZB_RUNTIME_PROFILER_H
#define ZB_RUNTIME_PROFILER_H

#include "runtime/backend.h"
#include "src/err.h"
#include "src/model.h"
#include "src/profile.h"
#include "src/sched.h"

/* Measures model m at micro-batch size `batch` (<= 0: m->micro_batch) with
 * `reps` timed repetitions per op (>= 1) on the backend that make(ctx)
 * creates (freed before returning), each part on `devices` (>= 1) of its
 * devices at once, one thread each (the figures are the slowest
 * device's).  Fills *p (times in seconds, memory in bytes; hardware the
 * backend's name, which a caller may replace by the device's).  Returns 0
 * or -1 with err set. */
int profiler_measure_on(zb_backend_make make, void *make_ctx, int devices, const zb_model *m,
                        int batch, int reps, zb_profile *p, zb_err *err);

/* profiler_measure_on the CPU backend with profiler_cpu_threads() devices
 * (hardware "cpu"). */
int profiler_measure(const zb_model *m, int batch, int reps, zb_profile *p, zb_err *err);

/* The devices the CPU profile times at once: one per online CPU, at most
 * 8 ("which core" above). */
int profiler_cpu_threads(void);

/* What profiler_measure_on holds at most for m at `batch` on `devices`
 * devices, in bytes: the stage buffers (*stage_bytes: four fp32 copies of
 * the largest part's parameters per device) and the saved states and
 * activations (*activation_bytes), from param_count's layout and the
 * kernels' slot table.  For `profile`'s memory check.  0 or -1 with err. */
int profiler_footprint(const zb_model *m, int batch, int devices, double *stage_bytes,
                       double *activation_bytes, zb_err *err);

/* Sets the per-stage costs of schedule s from profile p for model m split
 * as the runtime splits it (runtime/split.h): stage time = its layers'
 * times + the embedding (stage 0) + the head (stage S-1), in milliseconds;
 * memory deltas in bytes (F: +m_b, B: m_w - m_b, W: -m_w); t_comm from the
 * profile (0 when not measured).  Returns 0 or -1 with err set (more
 * stages than layers). */
int profiler_apply(const zb_profile *p, const zb_model *m, sched_t *s, zb_err *err);

#endif
