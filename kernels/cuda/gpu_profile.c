/*
 * gpu_profile.c: gpu_profile_measure (gpu_profile.h), the module's side of
 * `zbsched profile --device cuda`: runtime/profiler.h's one profiler over
 * this folder's backend (backend_cuda.h), one device (stream) timed at a
 * time on GPU `device`, the hardware named after the CUDA device.  The
 * timing, the parts and the memory figures are the profiler's, the same
 * code the CPU profile runs.
 */
#include "kernels/cuda/gpu_profile.h"

#include <stdio.h>

#include <cuda_runtime.h>

#include "kernels/cuda/backend_cuda.h"
#include "runtime/profiler.h"

/* zb_backend_make of the CUDA backend on the GPU *ctx. */
static int make_cuda(void *ctx, int n_devices, zb_backend **out, zb_err *err)
{
    return backend_cuda_create(*(const int *)ctx, n_devices, out, err);
}

int gpu_profile_measure(const zb_model *m, int batch, int reps, int device, zb_profile *p,
                        zb_err *err)
{
    if (reps < 1)
        return zb_fail(err, "profile: reps must be at least 1, got %d", reps);
    if (batch <= 0)
        batch = m->micro_batch > 0 ? m->micro_batch : 1;
    if (profiler_measure_on(make_cuda, &device, 1, m, batch, reps, p, err) != 0)
        return -1;
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, device) == cudaSuccess)
        snprintf(p->hardware, sizeof p->hardware, "%.31s", prop.name);
    return 0;
}
