/*
 * cuda_internal.cuh: what the .cu files of zb_cuda share and C callers never
 * see: the context struct, status-to-zb_err conversion, bf16 load/store
 * helpers and the launch-check idiom.
 *
 * Every public entry point ends with ZB_CUDA_LAUNCHED(err, "name"), which
 * turns a failed launch (cudaGetLastError) into -1 and one zb_err line
 * "name: <cuda error string>"; asynchronous failures surface at the next
 * zb_cuda_sync.  Nothing here exits or prints.
 */
#ifndef ZB_CUDA_INTERNAL_CUH
#define ZB_CUDA_INTERNAL_CUH

/* The project's C headers have no extern "C" guards of their own: include
 * them here first, with C linkage, so their include guards keep every later
 * inclusion (through zb_cuda.h, gpu_stage.h) C as well. */
extern "C" {
#include "src/err.h"
#include "src/model.h"
#include "kernels/cpu/llama.h"
#include "kernels/cpu/adamw.h"
}

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/zb_cuda.h"

struct zb_cuda {
    int device;                 /* CUDA device the stream lives on */
    cudaStream_t stream;        /* every op of this context is queued here */
    cublasLtHandle_t lt;        /* cuBLASLt handle (one per context: thread-safe use) */
    cublasHandle_t blas;        /* cuBLAS handle on the same stream: the fallback when
                                 * cuBLASLt has no algorithm (odd leading dimensions) */
    void *workspace;            /* cuBLASLt workspace on the device */
    size_t workspace_bytes;     /* its size */
};

struct zb_cuda_event {
    cudaEvent_t ev; /* a timing-enabled CUDA event */
};

/* -1 with "what: <CUDA error>" when st is not cudaSuccess, else 0. */
int zb_cuda_status(cudaError_t st, const char *what, zb_err *err);

/* -1 with "what: cuBLAS status N (<name>)" when st is not SUCCESS, else 0. */
int zb_cublas_status(cublasStatus_t st, const char *what, zb_err *err);

#define ZB_CUDA_LAUNCHED(err, what) zb_cuda_status(cudaGetLastError(), (what), (err))

/* Threads per block of the elementwise kernels and a grid covering n
 * elements with a grid-stride loop (capped: H200 has 132 SMs). */
#define ZB_EW_THREADS 256
static inline unsigned zb_ew_grid(size_t n)
{
    size_t b = (n + ZB_EW_THREADS - 1) / ZB_EW_THREADS;
    if (b < 1)
        b = 1;
    return (unsigned)(b > 65535 ? 65535 : b);
}

static __device__ __forceinline__ float zb_ld(const zb_bf16 *p, size_t i)
{
    return __bfloat162float(reinterpret_cast<const __nv_bfloat16 *>(p)[i]);
}
static __device__ __forceinline__ void zb_st(zb_bf16 *p, size_t i, float v)
{
    reinterpret_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(v);
}

/* Sum over a warp, every lane gets the result (fixed shuffle order). */
static __device__ __forceinline__ float zb_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ float zb_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

#endif
