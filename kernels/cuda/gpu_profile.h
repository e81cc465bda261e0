/*
 * gpu_profile.h: the GPU side of `zbsched profile --device cuda`: the
 * profile runtime/profiler.h measures on the CPU, measured on a CUDA
 * device by the same profiler over the CUDA backend (backend_cuda.h):
 * F, B and W of one micro-batch through a stack of layers, the embedding
 * and the final norm + LM head + loss, the activation memory each leaves
 * allocated (the zero-bubble paper's M_B and M_W), the stage-to-stage
 * hand-over and the static bytes per layer (its post-validation snapshot
 * included), so that `zbsched search --profile FILE` can plan with
 * measured H100/H200 figures.  The module's table entry profile_measure
 * (runtime/cuda_module.h) is this function.
 *
 * Each op is timed on the host around the op and the wait for its stream
 * (the backend's sync), after warm-up micro-batches (cuBLASLt heuristics,
 * allocator pool); the median is reported.  Expected workload: a few
 * layers of up to Llama-3 8B width at s = 4096, a few seconds.
 */
#ifndef ZB_GPU_PROFILE_H
#define ZB_GPU_PROFILE_H

#include "src/err.h"
#include "src/model.h"
#include "src/profile.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Measures model m (n_layers ignored: one layer is timed) at micro-batch
 * size `batch` (<= 0: m->micro_batch) with `reps` >= 1 timed repetitions
 * on CUDA device `device`.  Fills *p (seconds, bytes; hardware = the CUDA
 * device name).  Returns 0 or -1 with err set (no device, out of memory). */
int gpu_profile_measure(const zb_model *m, int batch, int reps, int device, zb_profile *p,
                        zb_err *err);

#ifdef __cplusplus
}
#endif

#endif
