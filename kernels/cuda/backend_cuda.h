/*
 * backend_cuda.h: the CUDA backend of the executor (runtime/backend.h),
 * every schedule device a stream on one GPU.  Lives in the module
 * zbsched_cuda.so; the program reaches it through the module's table
 * (runtime/cuda_module.h, member backend_create).
 */
#ifndef ZB_BACKEND_CUDA_H
#define ZB_BACKEND_CUDA_H

#include "runtime/backend.h"
#include "src/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A backend of n_devices streams on CUDA device `gpu`.  0 and *out, or -1
 * with err set: no CUDA device, no such device, out of memory. */
int backend_cuda_create(int gpu, int n_devices, zb_backend **out, zb_err *err);

/* The backend of a pipeline rank (trainer_opts.one_device): one stream,
 * for schedule device local_dev, on CUDA device `gpu`; the stages of the
 * other devices are host mirrors only (backend_cuda.c).  0 or -1. */
int backend_cuda_create_rank(int gpu, int n_devices, int local_dev, zb_backend **out,
                             zb_err *err);

/* Inside the module only (the NCCL transport, nccl_transport.c): an
 * activation of this backend's act_new as its device buffer (bf16
 * [B*T*d]) and its last-use fence (backend.h's fences), so that a
 * transport with its own streams orders its copies like a device does. */
struct gpu_fence;
void *backend_cuda_act_data(void *act);
struct gpu_fence *backend_cuda_act_fence(void *act);

#ifdef __cplusplus
}
#endif

#endif
