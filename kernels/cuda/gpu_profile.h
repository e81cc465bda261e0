/*
 * gpu_profile.h: the GPU side of `zbsched profile`: measure F, B and W of
 * one micro-batch through one transformer layer, through the embedding and
 * through the final norm + LM head + loss on a CUDA device, the activation
 * memory each leaves allocated (gpu_saved_bytes after F and after B: the
 * zero-bubble paper's M_B and M_W), the one-GPU stage-to-stage transfer
 * and the static bytes per layer, and fill the same zb_profile that
 * runtime/profiler.h fills on the CPU, so `zbsched search --profile FILE`
 * can plan with measured H100/H200 figures.
 *
 * Hook for the CLI (owned by the runtime engineer): in cmd_profile.c,
 * under #ifdef ZB_HAVE_CUDA, a `--gpu N` flag calls gpu_profile_measure
 * instead of profiler_measure and saves the result with profile_save.
 *
 * Each op runs once to warm up (cuBLASLt heuristics, allocator pool), then
 * `reps` times between CUDA events; the median is reported.  Inputs are
 * seeded random tokens and activations.  Expected workload: one layer of
 * up to Llama-3 8B width at s = 4096, a few seconds.
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
