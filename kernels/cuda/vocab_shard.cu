/*
 * vocab_shard.cu: the vocabulary-sharded output layer's kernels
 * (vocab_cuda.h).  Row kernels (statistics, local softmax, logit gradient)
 * are one block per row with a fixed-order block reduction, as the
 * cross-entropy kernels of ops.cu; the combines are one thread per row or
 * element walking the shards in order.
 */
#include <math.h>

#include "kernels/cuda/cuda_internal.cuh"
#include "kernels/cuda/vocab_cuda.h"

#define VS_THREADS 256

/* Block-wide max and sum of (max_t, sum_t) pairs, each sum relative to its
 * max, in a fixed tree order; every thread gets the row's (max, sum). */
static __device__ void block_max_sum(float mx, float sum, float *out_max, float *out_sum)
{
    __shared__ float smx[VS_THREADS], ssum[VS_THREADS];
    smx[threadIdx.x] = mx;
    ssum[threadIdx.x] = sum;
    __syncthreads();
    for (int half = VS_THREADS / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) {
            float m1 = smx[threadIdx.x], m2 = smx[threadIdx.x + half];
            float m = fmaxf(m1, m2);
            float s = 0.0f;
            if (m1 != -INFINITY)
                s += ssum[threadIdx.x] * expf(m1 - m);
            if (m2 != -INFINITY)
                s += ssum[threadIdx.x + half] * expf(m2 - m);
            smx[threadIdx.x] = m;
            ssum[threadIdx.x] = s;
        }
        __syncthreads();
    }
    *out_max = smx[0];
    *out_sum = ssum[0];
    __syncthreads();
}

__global__ void vshard_stats_kernel(float *row_max, float *row_sum, float *tgt,
                                    const zb_bf16 *logits, const int32_t *targets, int v0, int v)
{
    size_t base = (size_t)blockIdx.x * v;
    float mx = -INFINITY, sum = 0.0f;
    for (int j = threadIdx.x; j < v; j += VS_THREADS) {
        float y = zb_ld(logits, base + j);
        if (y > mx) {
            sum = (mx == -INFINITY ? 0.0f : sum * expf(mx - y)) + 1.0f;
            mx = y;
        } else {
            sum += expf(y - mx);
        }
    }
    float m, s;
    block_max_sum(mx, sum, &m, &s);
    if (threadIdx.x == 0) {
        int y = targets[blockIdx.x] - v0;
        row_max[blockIdx.x] = m;
        row_sum[blockIdx.x] = s;
        tgt[blockIdx.x] = y >= 0 && y < v ? zb_ld(logits, base + y) : 0.0f;
    }
}

extern "C" int zb_cuda_vshard_stats(zb_cuda *c, float *row_max, float *row_sum, float *tgt,
                                    const zb_bf16 *logits, const int32_t *targets, int v0, int N,
                                    int v, zb_err *err)
{
    if (N <= 0)
        return 0;
    vshard_stats_kernel<<<N, VS_THREADS, 0, c->stream>>>(row_max, row_sum, tgt, logits, targets,
                                                         v0, v);
    return ZB_CUDA_LAUNCHED(err, "vshard_stats");
}

__global__ void vshard_local_softmax_kernel(zb_bf16 *ex, const zb_bf16 *logits,
                                            const float *row_max, const float *row_sum, int v)
{
    size_t base = (size_t)blockIdx.x * v;
    float m = row_max[blockIdx.x], inv = 1.0f / row_sum[blockIdx.x];
    for (int j = threadIdx.x; j < v; j += VS_THREADS)
        zb_st(ex, base + j, expf(zb_ld(logits, base + j) - m) * inv);
}

extern "C" int zb_cuda_vshard_local_softmax(zb_cuda *c, zb_bf16 *ex, const zb_bf16 *logits,
                                            const float *row_max, const float *row_sum, int N,
                                            int v, zb_err *err)
{
    if (N <= 0)
        return 0;
    vshard_local_softmax_kernel<<<N, VS_THREADS, 0, c->stream>>>(ex, logits, row_max, row_sum, v);
    return ZB_CUDA_LAUNCHED(err, "vshard_local_softmax");
}

__global__ void vshard_target_rows_kernel(float *rows, const zb_bf16 *w, const int32_t *targets,
                                          int v0, int N, int d, int v)
{
    size_t n_all = (size_t)N * d;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n_all;
         i += (size_t)gridDim.x * blockDim.x) {
        int n = (int)(i / d), col = (int)(i % d);
        int y = targets[n] - v0;
        rows[i] = y >= 0 && y < v ? zb_ld(w, (size_t)col * v + y) : 0.0f;
    }
}

extern "C" int zb_cuda_vshard_target_rows(zb_cuda *c, float *rows, const zb_bf16 *w,
                                          const int32_t *targets, int v0, int N, int d, int v,
                                          zb_err *err)
{
    size_t n = (size_t)N * d;
    if (n == 0)
        return 0;
    vshard_target_rows_kernel<<<zb_ew_grid(n), ZB_EW_THREADS, 0, c->stream>>>(rows, w, targets,
                                                                             v0, N, d, v);
    return ZB_CUDA_LAUNCHED(err, "vshard_target_rows");
}

__global__ void vshard_combine_stats_kernel(float *lse, float *losses, float *weight,
                                            const float *row_max, const float *row_sum,
                                            const float *tgt, int p, int N)
{
    for (int n = blockIdx.x * blockDim.x + threadIdx.x; n < N; n += gridDim.x * blockDim.x) {
        float m = row_max[n];
        for (int k = 1; k < p; k++)
            m = fmaxf(m, row_max[(size_t)k * N + n]);
        float s = 0.0f, t = 0.0f;
        for (int k = 0; k < p; k++) {
            s += row_sum[(size_t)k * N + n] * expf(row_max[(size_t)k * N + n] - m);
            t += tgt[(size_t)k * N + n];
        }
        if (weight)
            for (int k = 0; k < p; k++)
                weight[(size_t)k * N + n] =
                    row_sum[(size_t)k * N + n] * expf(row_max[(size_t)k * N + n] - m) / s;
        float l = m + logf(s);
        lse[n] = l;
        losses[n] = l - t;
    }
}

extern "C" int zb_cuda_vshard_combine_stats(zb_cuda *c, float *lse, float *losses, float *weight,
                                            const float *row_max, const float *row_sum,
                                            const float *tgt, int p, int N, zb_err *err)
{
    if (N <= 0)
        return 0;
    vshard_combine_stats_kernel<<<zb_ew_grid((size_t)N), ZB_EW_THREADS, 0, c->stream>>>(
        lse, losses, weight, row_max, row_sum, tgt, p, N);
    return ZB_CUDA_LAUNCHED(err, "vshard_combine_stats");
}

__global__ void vshard_logit_grad_kernel(zb_bf16 *g, const zb_bf16 *logits, const float *lse,
                                         const int32_t *targets, int v0, float scale, int v)
{
    size_t base = (size_t)blockIdx.x * v;
    float l = lse[blockIdx.x];
    int y = targets[blockIdx.x] - v0;
    for (int j = threadIdx.x; j < v; j += VS_THREADS) {
        float q = expf(zb_ld(logits, base + j) - l) * scale;
        zb_st(g, base + j, j == y ? q - scale : q);
    }
}

extern "C" int zb_cuda_vshard_logit_grad(zb_cuda *c, zb_bf16 *g, const zb_bf16 *logits,
                                         const float *lse, const int32_t *targets, int v0,
                                         float dloss, int N, int v, zb_err *err)
{
    if (N <= 0)
        return 0;
    vshard_logit_grad_kernel<<<N, VS_THREADS, 0, c->stream>>>(g, logits, lse, targets, v0,
                                                              dloss / (float)N, v);
    return ZB_CUDA_LAUNCHED(err, "vshard_logit_grad");
}

__global__ void vshard_combine_dx_kernel(zb_bf16 *dx, const zb_bf16 *partial, const float *weight,
                                         const float *rows, float scale, int p, int N, int d)
{
    size_t nd = (size_t)N * d;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nd;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t n = i / d;
        float acc = 0.0f;
        for (int k = 0; k < p; k++) {
            float q = zb_ld(partial, (size_t)k * nd + i);
            acc += weight ? weight[(size_t)k * N + n] * q : q;
        }
        if (rows) {
            for (int k = 0; k < p; k++)
                acc -= rows[(size_t)k * nd + i];
            acc *= scale;
        }
        zb_st(dx, i, acc);
    }
}

extern "C" int zb_cuda_vshard_combine_dx_v1(zb_cuda *c, zb_bf16 *dx, const zb_bf16 *partial,
                                            const float *weight, const float *rows, float dloss,
                                            int p, int N, int d, zb_err *err)
{
    size_t n = (size_t)N * d;
    if (n == 0)
        return 0;
    vshard_combine_dx_kernel<<<zb_ew_grid(n), ZB_EW_THREADS, 0, c->stream>>>(
        dx, partial, weight, rows, dloss / (float)N, p, N, d);
    return ZB_CUDA_LAUNCHED(err, "vshard_combine_dx_v1");
}

extern "C" int zb_cuda_vshard_combine_dx_v2(zb_cuda *c, zb_bf16 *dx, const zb_bf16 *partial,
                                            int p, int N, int d, zb_err *err)
{
    size_t n = (size_t)N * d;
    if (n == 0)
        return 0;
    vshard_combine_dx_kernel<<<zb_ew_grid(n), ZB_EW_THREADS, 0, c->stream>>>(
        dx, partial, NULL, NULL, 1.0f, p, N, d);
    return ZB_CUDA_LAUNCHED(err, "vshard_combine_dx_v2");
}

__global__ void vshard_scatter_add_kernel(float *H, const float *dw, int d, int V, int v0, int v)
{
    size_t n = (size_t)d * v;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / (size_t)v, j = i % (size_t)v;
        H[r * (size_t)V + (size_t)v0 + j] += dw[i];
    }
}

extern "C" int zb_cuda_vshard_scatter_add(zb_cuda *c, float *H, const float *dw, int d, int V,
                                          int v0, int v, zb_err *err)
{
    size_t n = (size_t)d * v;
    if (n == 0)
        return 0;
    vshard_scatter_add_kernel<<<zb_ew_grid(n), ZB_EW_THREADS, 0, c->stream>>>(H, dw, d, V, v0, v);
    return ZB_CUDA_LAUNCHED(err, "vshard_scatter_add");
}
