/*
 * outer_int8.cu: CUDA twins of the outer optimizer's int8 codebook
 * quantizer (runtime/outer/outer_quant.h) and of the reductions a ring
 * all-reduce step and the Nesterov outer step need, so pseudo-gradients
 * can be compressed, accumulated and applied on the GPU.
 *
 * Scheme (INTELLECT-1, as on the CPU): s = 6 * (||x|| / sqrt(n-1)) / 256,
 * q[j] = clamp(rint(x[j] / s) + 128, 0, 255), lut[b] = mean of the x[j] in
 * bucket b.  Encoding is four launches on one stream, all deterministic:
 *
 *   1. outer_sumsq_kernel     per-block double partial sums of x^2
 *   2. outer_width_kernel     one block adds the partials in a fixed order
 *                             and writes s (no atomics on floats)
 *   3. outer_bucket_kernel    q[j] and, per bucket, the sum of x/s in
 *                             64-bit fixed point (2^20 units) and the count,
 *                             with integer atomics: order-independent, so
 *                             the table is bit-reproducible.  No overflow:
 *                             sum |x/s| <= sqrt(n)*||x||/s ~ 43 n, times
 *                             2^20 stays below 2^63 for n < 2^31.
 *   4. outer_lut_kernel       lut[b] = s * fixed_sum / 2^20 / count
 *
 * The table differs from the CPU's (double sums of x) by at most about
 * s * 2^-21 per entry; the buckets are identical when s is (float
 * division and rintf are IEEE on both sides; do not build with
 * --use_fast_math).
 *
 * Receivers: outer_decode_kernel (x = lut[q]), outer_decode_add_kernel
 * (acc += lut[q], the reduce-scatter's fp32 accumulation),
 * outer_scale_kernel (the owner's division by K) and outer_nesterov_kernel
 * (mom = mu*mom + d; x -= lr*(d + mu*mom), rounded as the CPU does).
 *
 * Build (sm_90, H100/H200): nvcc -c -arch=sm_90 -O2 kernels/cuda/outer_int8.cu
 * The C entry points are declared in runtime/outer/outer_int8_cuda.h.
 * Workload: chunks of 10^4..10^8 floats; the encode is bandwidth bound
 * (two reads of x, one write of q).
 */
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#define OUTER_BINS 256
#define OUTER_OFFSET 128
#define OUTER_FIXED_ONE 1048576.0 /* 2^20 */
#define OUTER_THREADS 256
#define OUTER_MAX_BLOCKS 1024

/* Scratch the encoder needs on the device (see outer_int8_scratch_bytes). */
typedef struct outer_int8_scratch {
    double partial[OUTER_MAX_BLOCKS];            /* per-block sums of squares */
    float width;                                 /* s */
    unsigned long long fixed_sum[OUTER_BINS];    /* per-bucket sum of x/s, 2^20 fixed point (two's complement) */
    unsigned long long count[OUTER_BINS];        /* per-bucket element counts */
} outer_int8_scratch;

static int grid_for(size_t n)
{
    size_t b = (n + OUTER_THREADS - 1) / OUTER_THREADS;
    if (b < 1)
        b = 1;
    return (int)(b > OUTER_MAX_BLOCKS ? OUTER_MAX_BLOCKS : b);
}

__global__ void outer_sumsq_kernel(const float *x, size_t n, double *partial)
{
    __shared__ double sh[OUTER_THREADS];
    double acc = 0.0;
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < n;
         j += (size_t)gridDim.x * blockDim.x)
        acc += (double)x[j] * (double)x[j];
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if ((int)threadIdx.x < half)
            sh[threadIdx.x] += sh[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        partial[blockIdx.x] = sh[0];
}

/* One block: sums the partials in a fixed tree order, writes s and clears
 * the bucket accumulators for outer_bucket_kernel. */
__global__ void outer_width_kernel(outer_int8_scratch *sc, int n_partial, size_t n)
{
    __shared__ double sh[OUTER_THREADS];
    double acc = 0.0;
    for (int i = threadIdx.x; i < n_partial; i += blockDim.x)
        acc += sc->partial[i];
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if ((int)threadIdx.x < half)
            sh[threadIdx.x] += sh[threadIdx.x + half];
        __syncthreads();
    }
    for (int b = threadIdx.x; b < OUTER_BINS; b += blockDim.x) {
        sc->fixed_sum[b] = 0;
        sc->count[b] = 0;
    }
    if (threadIdx.x == 0) {
        double dof = n > 1 ? (double)(n - 1) : 1.0;
        sc->width = (float)(6.0 * sqrt(sh[0] / dof) / OUTER_BINS);
    }
}

__device__ __forceinline__ int outer_bucket(float v, float s)
{
    float r = rintf(__fdiv_rn(v, s)) + (float)OUTER_OFFSET;
    if (!(r >= 0.0f))
        return 0;
    if (r > (float)(OUTER_BINS - 1))
        return OUTER_BINS - 1;
    return (int)r;
}

__global__ void outer_bucket_kernel(const float *x, size_t n, uint8_t *q, outer_int8_scratch *sc)
{
    __shared__ unsigned long long sum[OUTER_BINS];
    __shared__ unsigned long long cnt[OUTER_BINS];
    for (int b = threadIdx.x; b < OUTER_BINS; b += blockDim.x) {
        sum[b] = 0;
        cnt[b] = 0;
    }
    __syncthreads();
    float s = sc->width;
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < n;
         j += (size_t)gridDim.x * blockDim.x) {
        if (!(s > 0.0f)) {
            q[j] = OUTER_OFFSET; /* all-zero chunk: exact */
            continue;
        }
        int b = outer_bucket(x[j], s);
        q[j] = (uint8_t)b;
        long long f = __double2ll_rn((double)x[j] / (double)s * OUTER_FIXED_ONE);
        atomicAdd(&sum[b], (unsigned long long)f); /* wraps as two's complement */
        atomicAdd(&cnt[b], 1ull);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < OUTER_BINS; b += blockDim.x)
        if (cnt[b]) {
            atomicAdd(&sc->fixed_sum[b], sum[b]);
            atomicAdd(&sc->count[b], cnt[b]);
        }
}

__global__ void outer_lut_kernel(const outer_int8_scratch *sc, float *lut)
{
    int b = threadIdx.x;
    if (b >= OUTER_BINS)
        return;
    unsigned long long c = sc->count[b];
    float s = sc->width;
    lut[b] = (c && s > 0.0f)
                 ? (float)((double)(long long)sc->fixed_sum[b] / OUTER_FIXED_ONE / (double)c * (double)s)
                 : 0.0f;
}

__global__ void outer_decode_kernel(const uint8_t *q, const float *lut, size_t n, float *x)
{
    __shared__ float t[OUTER_BINS];
    for (int b = threadIdx.x; b < OUTER_BINS; b += blockDim.x)
        t[b] = lut[b];
    __syncthreads();
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < n;
         j += (size_t)gridDim.x * blockDim.x)
        x[j] = t[q[j]];
}

__global__ void outer_decode_add_kernel(const uint8_t *q, const float *lut, size_t n, float *acc)
{
    __shared__ float t[OUTER_BINS];
    for (int b = threadIdx.x; b < OUTER_BINS; b += blockDim.x)
        t[b] = lut[b];
    __syncthreads();
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < n;
         j += (size_t)gridDim.x * blockDim.x)
        acc[j] += t[q[j]];
}

__global__ void outer_scale_kernel(float *x, size_t n, float divisor)
{
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < n;
         j += (size_t)gridDim.x * blockDim.x)
        x[j] = __fdiv_rn(x[j], divisor);
}

__global__ void outer_nesterov_kernel(float *x, float *mom, const float *d, size_t n, float lr, float mu)
{
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < n;
         j += (size_t)gridDim.x * blockDim.x) {
        /* separate roundings, no FMA: bit-identical to the CPU loop */
        float m = __fadd_rn(__fmul_rn(mu, mom[j]), d[j]);
        mom[j] = m;
        x[j] = __fsub_rn(x[j], __fmul_rn(lr, __fadd_rn(d[j], __fmul_rn(mu, m))));
    }
}

extern "C" {

size_t outer_int8_scratch_bytes(void)
{
    return sizeof(outer_int8_scratch);
}

/* Encodes device chunk x[0..n) into device q[0..n) and lut[0..256) on
 * stream, using device scratch of outer_int8_scratch_bytes().  Returns the
 * launch status (cudaSuccess or the first launch error). */
int outer_int8_encode_cuda(const float *x, size_t n, uint8_t *q, float *lut, void *scratch,
                           cudaStream_t stream)
{
    outer_int8_scratch *sc = (outer_int8_scratch *)scratch;
    int grid = grid_for(n);
    outer_sumsq_kernel<<<grid, OUTER_THREADS, 0, stream>>>(x, n, sc->partial);
    outer_width_kernel<<<1, OUTER_THREADS, 0, stream>>>(sc, grid, n);
    outer_bucket_kernel<<<grid, OUTER_THREADS, 0, stream>>>(x, n, q, sc);
    outer_lut_kernel<<<1, OUTER_BINS, 0, stream>>>(sc, lut);
    return (int)cudaGetLastError();
}

int outer_int8_decode_cuda(const uint8_t *q, const float *lut, size_t n, float *x, cudaStream_t stream)
{
    outer_decode_kernel<<<grid_for(n), OUTER_THREADS, 0, stream>>>(q, lut, n, x);
    return (int)cudaGetLastError();
}

int outer_int8_decode_add_cuda(const uint8_t *q, const float *lut, size_t n, float *acc, cudaStream_t stream)
{
    outer_decode_add_kernel<<<grid_for(n), OUTER_THREADS, 0, stream>>>(q, lut, n, acc);
    return (int)cudaGetLastError();
}

int outer_scale_cuda(float *x, size_t n, float divisor, cudaStream_t stream)
{
    outer_scale_kernel<<<grid_for(n), OUTER_THREADS, 0, stream>>>(x, n, divisor);
    return (int)cudaGetLastError();
}

int outer_nesterov_cuda(float *x, float *mom, const float *d, size_t n, float lr, float mu,
                        cudaStream_t stream)
{
    outer_nesterov_kernel<<<grid_for(n), OUTER_THREADS, 0, stream>>>(x, mom, d, n, lr, mu);
    return (int)cudaGetLastError();
}

} /* extern "C" */
