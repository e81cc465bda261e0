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

#ifdef __cplusplus
}
#endif

#endif
