/*
 * cuda_ctx.cu: contexts (stream + cuBLASLt handle + workspace), device
 * memory helpers, fp32 <-> bf16 conversion kernels, timing events and the
 * conversion of CUDA and cuBLAS statuses into zb_err lines.
 *
 * A context is cheap (a stream and a handle) and the runtime makes one per
 * device of a schedule, all on the same GPU for one-GPU runs: their streams
 * then overlap as the schedule allows and cross-stream order comes from
 * events (gpu_transport.h).  Workload: a handful of contexts per process.
 */
#include "kernels/cuda/cuda_internal.cuh"

#include <stdlib.h>

#define ZB_LT_WORKSPACE (32u << 20)

int zb_cuda_status(cudaError_t st, const char *what, zb_err *err)
{
    if (st == cudaSuccess)
        return 0;
    return zb_fail(err, "%s: CUDA error %d (%s)", what, (int)st,
                   cudaGetErrorString(st));
}

int zb_cublas_status(cublasStatus_t st, const char *what, zb_err *err)
{
    if (st == CUBLAS_STATUS_SUCCESS)
        return 0;
    return zb_fail(err, "%s: cuBLAS status %d (%s)", what, (int)st,
                   cublasLtGetStatusName(st));
}

extern "C" int zb_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no driver" error */
        return 0;
    }
    return n;
}

extern "C" int zb_cuda_set_device(int device, zb_err *err)
{
    return zb_cuda_status(cudaSetDevice(device), "cudaSetDevice", err);
}

extern "C" int zb_cuda_create(int device, zb_cuda **out, zb_err *err)
{
    int n = zb_cuda_device_count();
    if (n == 0)
        return zb_fail(err, "no CUDA device");
    if (device < 0 || device >= n)
        return zb_fail(err, "CUDA device %d does not exist (%d visible)", device, n);
    zb_cuda *c = (zb_cuda *)calloc(1, sizeof *c);
    if (!c)
        return zb_fail(err, "out of memory for a CUDA context");
    c->device = device;
    if (zb_cuda_status(cudaSetDevice(device), "cudaSetDevice", err) != 0 ||
        zb_cuda_status(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking),
                       "cudaStreamCreate", err) != 0) {
        free(c);
        return -1;
    }
    if (zb_cublas_status(cublasLtCreate(&c->lt), "cublasLtCreate", err) != 0) {
        cudaStreamDestroy(c->stream);
        free(c);
        return -1;
    }
    if (zb_cublas_status(cublasCreate(&c->blas), "cublasCreate", err) != 0 ||
        zb_cublas_status(cublasSetStream(c->blas, c->stream), "cublasSetStream", err) != 0) {
        if (c->blas)
            cublasDestroy(c->blas);
        cublasLtDestroy(c->lt);
        cudaStreamDestroy(c->stream);
        free(c);
        return -1;
    }
    c->workspace_bytes = ZB_LT_WORKSPACE;
    if (zb_cuda_status(cudaMalloc(&c->workspace, c->workspace_bytes),
                       "cudaMalloc (cuBLASLt workspace)", err) != 0) {
        cublasDestroy(c->blas);
        cublasLtDestroy(c->lt);
        cudaStreamDestroy(c->stream);
        free(c);
        return -1;
    }
    *out = c;
    return 0;
}

extern "C" void zb_cuda_free(zb_cuda *c)
{
    if (!c)
        return;
    cudaSetDevice(c->device);
    cudaStreamSynchronize(c->stream);
    cudaFree(c->workspace);
    cublasDestroy(c->blas);
    cublasLtDestroy(c->lt);
    cudaStreamDestroy(c->stream);
    free(c);
}

extern "C" void *zb_cuda_stream(const zb_cuda *c) { return (void *)c->stream; }
extern "C" int zb_cuda_device(const zb_cuda *c) { return c->device; }

extern "C" int zb_cuda_sync(zb_cuda *c, zb_err *err)
{
    return zb_cuda_status(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize", err);
}

extern "C" int zb_cuda_alloc(void **p, size_t n, zb_err *err)
{
    *p = NULL;
    if (n == 0)
        return 0;
    cudaError_t st = cudaMalloc(p, n);
    if (st != cudaSuccess) {
        *p = NULL;
        cudaGetLastError();
        return zb_fail(err, "cudaMalloc of %zu bytes: %s", n, cudaGetErrorString(st));
    }
    return 0;
}

extern "C" void zb_cuda_release(void *p)
{
    if (p)
        cudaFree(p);
}

extern "C" int zb_cuda_upload(zb_cuda *c, void *dst, const void *src, size_t n, zb_err *err)
{
    return zb_cuda_status(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, c->stream),
                          "cudaMemcpy host to device", err);
}

extern "C" int zb_cuda_download(zb_cuda *c, void *dst, const void *src, size_t n, zb_err *err)
{
    if (zb_cuda_status(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, c->stream),
                       "cudaMemcpy device to host", err) != 0)
        return -1;
    /* pageable destinations may still be in flight: the caller reads dst next */
    return zb_cuda_sync(c, err);
}

extern "C" int zb_cuda_copy(zb_cuda *c, void *dst, const void *src, size_t n, zb_err *err)
{
    return zb_cuda_status(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, c->stream),
                          "cudaMemcpy device to device", err);
}

extern "C" int zb_cuda_zero(zb_cuda *c, void *p, size_t n, zb_err *err)
{
    return zb_cuda_status(cudaMemsetAsync(p, 0, n, c->stream), "cudaMemset", err);
}

__global__ void f32_to_bf16_kernel(zb_bf16 *dst, const float *src, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        zb_st(dst, i, src[i]);
}

__global__ void bf16_to_f32_kernel(float *dst, const zb_bf16 *src, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = zb_ld(src, i);
}

extern "C" int zb_cuda_f32_to_bf16(zb_cuda *c, zb_bf16 *dst, const float *src, size_t n,
                                   zb_err *err)
{
    if (n == 0)
        return 0;
    f32_to_bf16_kernel<<<zb_ew_grid(n), ZB_EW_THREADS, 0, c->stream>>>(dst, src, n);
    return ZB_CUDA_LAUNCHED(err, "f32_to_bf16");
}

extern "C" int zb_cuda_bf16_to_f32(zb_cuda *c, float *dst, const zb_bf16 *src, size_t n,
                                   zb_err *err)
{
    if (n == 0)
        return 0;
    bf16_to_f32_kernel<<<zb_ew_grid(n), ZB_EW_THREADS, 0, c->stream>>>(dst, src, n);
    return ZB_CUDA_LAUNCHED(err, "bf16_to_f32");
}

extern "C" int zb_cuda_mem_info(size_t *free_bytes, size_t *total_bytes, zb_err *err)
{
    return zb_cuda_status(cudaMemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo", err);
}

extern "C" int zb_cuda_event_new(zb_cuda_event **e, zb_err *err)
{
    zb_cuda_event *ev = (zb_cuda_event *)calloc(1, sizeof *ev);
    if (!ev)
        return zb_fail(err, "out of memory for a CUDA event");
    if (zb_cuda_status(cudaEventCreate(&ev->ev), "cudaEventCreate", err) != 0) {
        free(ev);
        return -1;
    }
    *e = ev;
    return 0;
}

extern "C" void zb_cuda_event_free(zb_cuda_event *e)
{
    if (!e)
        return;
    cudaEventDestroy(e->ev);
    free(e);
}

extern "C" int zb_cuda_mark(zb_cuda *c, zb_cuda_event *e, zb_err *err)
{
    return zb_cuda_status(cudaEventRecord(e->ev, c->stream), "cudaEventRecord", err);
}

extern "C" int zb_cuda_elapsed(zb_cuda_event *start, zb_cuda_event *end, float *ms, zb_err *err)
{
    if (zb_cuda_status(cudaEventSynchronize(end->ev), "cudaEventSynchronize", err) != 0)
        return -1;
    return zb_cuda_status(cudaEventElapsedTime(ms, start->ev, end->ev), "cudaEventElapsedTime",
                          err);
}
