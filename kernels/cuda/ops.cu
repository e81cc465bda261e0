/*
 * ops.cu: the memory-bound layer kernels of zb_cuda.h: embedding, fused
 * RMSNorm (forward, B, W), RoPE, fused SwiGLU, fused softmax
 * cross-entropy, a deterministic double sum and an elementwise add.
 *
 * Design: one warp per row for the row-wise kernels whose rows are model
 * width (RMSNorm, d ≤ 8192: each lane strides over the row, sums in fp32,
 * then a fixed shuffle tree), one block per row for the vocabulary-wide
 * cross-entropy (V up to 128k: online max/sum per thread, then a block
 * tree), grid-stride loops for elementwise work.  Column reductions (the W
 * ops of RMSNorm and the embedding) run one thread per column over rows in
 * order, so no floating-point atomics and the same bits every run.
 *
 * Workload: N = B·T rows from 256 (tests) to 24k (8B layer benchmark);
 * these kernels are a few percent of a layer's time next to the GEMMs.
 */
#include "kernels/cuda/cuda_internal.cuh"

#define KERN_RMSNORM_EPS 1e-5f
#define ROWS_PER_BLOCK 8 /* warps (rows) per block of the row-wise kernels */

/* ---------------------------------------------------------------------- */
/* Embedding                                                               */
/* ---------------------------------------------------------------------- */

__global__ void embedding_forward_kernel(zb_bf16 *out, const int32_t *tokens,
                                         const zb_bf16 *E, int N, int d)
{
    size_t total = (size_t)N * d;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t n = i / d, j = i % d;
        out[i] = E[(size_t)tokens[n] * d + j];
    }
}

/* One thread per column, rows in n order: deterministic accumulation. */
__global__ void embedding_backward_w_kernel(float *dE, const int32_t *tokens,
                                            const zb_bf16 *dout, int N, int d)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= d)
        return;
    for (int n = 0; n < N; n++)
        dE[(size_t)tokens[n] * d + j] += zb_ld(dout, (size_t)n * d + j);
}

extern "C" int zb_cuda_embedding_forward(zb_cuda *c, zb_bf16 *out, const int32_t *tokens,
                                         const zb_bf16 *E, int N, int d, zb_err *err)
{
    size_t n = (size_t)N * d;
    embedding_forward_kernel<<<zb_ew_grid(n), ZB_EW_THREADS, 0, c->stream>>>(out, tokens, E, N,
                                                                             d);
    return ZB_CUDA_LAUNCHED(err, "embedding_forward");
}

extern "C" int zb_cuda_embedding_backward_w(zb_cuda *c, float *dE, const int32_t *tokens,
                                            const zb_bf16 *dout, int N, int d, int V,
                                            zb_err *err)
{
    (void)V;
    embedding_backward_w_kernel<<<(d + 127) / 128, 128, 0, c->stream>>>(dE, tokens, dout, N, d);
    return ZB_CUDA_LAUNCHED(err, "embedding_backward_w");
}

/* ---------------------------------------------------------------------- */
/* RMSNorm                                                                 */
/* ---------------------------------------------------------------------- */

__global__ void rmsnorm_forward_kernel(zb_bf16 *out, float *rstd, const zb_bf16 *x,
                                       const zb_bf16 *g, int N, int d)
{
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N)
        return;
    const size_t base = (size_t)row * d;
    float ss = 0.0f;
    for (int j = lane; j < d; j += 32) {
        float v = zb_ld(x, base + j);
        ss += v * v;
    }
    ss = zb_warp_sum(ss);
    float r = rsqrtf(ss / (float)d + KERN_RMSNORM_EPS);
    if (lane == 0)
        rstd[row] = r;
    for (int j = lane; j < d; j += 32)
        zb_st(out, base + j, zb_ld(x, base + j) * r * zb_ld(g, j));
}

__global__ void rmsnorm_backward_b_kernel(zb_bf16 *dx, const zb_bf16 *dout, const zb_bf16 *x,
                                          const float *rstd, const zb_bf16 *g,
                                          const zb_bf16 *dres, int N, int d)
{
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N)
        return;
    const size_t base = (size_t)row * d;
    float r = rstd[row];
    float dot = 0.0f;
    for (int j = lane; j < d; j += 32)
        dot += zb_ld(dout, base + j) * zb_ld(g, j) * (zb_ld(x, base + j) * r);
    float mean = zb_warp_sum(dot) / (float)d;
    for (int j = lane; j < d; j += 32) {
        float v = r * (zb_ld(dout, base + j) * zb_ld(g, j) - zb_ld(x, base + j) * r * mean);
        if (dres)
            v += zb_ld(dres, base + j);
        zb_st(dx, base + j, v);
    }
}

/* Block (32, 8): 32 columns, 8 row slices reduced through shared memory in
 * a fixed order. */
__global__ void rmsnorm_backward_w_kernel(float *dg, const zb_bf16 *dout, const zb_bf16 *x,
                                          const float *rstd, int N, int d)
{
    __shared__ float part[8][33];
    int j = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.0f;
    if (j < d)
        for (int n = threadIdx.y; n < N; n += 8)
            acc += zb_ld(dout, (size_t)n * d + j) * (zb_ld(x, (size_t)n * d + j) * rstd[n]);
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && j < d) {
        float s = 0.0f;
        for (int y = 0; y < 8; y++)
            s += part[y][threadIdx.x];
        dg[j] += s;
    }
}

static unsigned row_blocks(int N) { return (unsigned)((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK); }

extern "C" int zb_cuda_rmsnorm_forward(zb_cuda *c, zb_bf16 *out, float *rstd, const zb_bf16 *x,
                                       const zb_bf16 *g, int N, int d, zb_err *err)
{
    rmsnorm_forward_kernel<<<row_blocks(N), 32 * ROWS_PER_BLOCK, 0, c->stream>>>(out, rstd, x, g,
                                                                                 N, d);
    return ZB_CUDA_LAUNCHED(err, "rmsnorm_forward");
}

extern "C" int zb_cuda_rmsnorm_backward_b(zb_cuda *c, zb_bf16 *dx, const zb_bf16 *dout,
                                          const zb_bf16 *x, const float *rstd, const zb_bf16 *g,
                                          const zb_bf16 *dres, int N, int d, zb_err *err)
{
    rmsnorm_backward_b_kernel<<<row_blocks(N), 32 * ROWS_PER_BLOCK, 0, c->stream>>>(
        dx, dout, x, rstd, g, dres, N, d);
    return ZB_CUDA_LAUNCHED(err, "rmsnorm_backward_b");
}

extern "C" int zb_cuda_rmsnorm_backward_w(zb_cuda *c, float *dg, const zb_bf16 *dout,
                                          const zb_bf16 *x, const float *rstd, int N, int d,
                                          zb_err *err)
{
    rmsnorm_backward_w_kernel<<<(d + 31) / 32, dim3(32, 8), 0, c->stream>>>(dg, dout, x, rstd, N,
                                                                            d);
    return ZB_CUDA_LAUNCHED(err, "rmsnorm_backward_w");
}

/* ---------------------------------------------------------------------- */
/* RoPE                                                                    */
/* ---------------------------------------------------------------------- */

/* One thread per rotated pair; the angle in double as the CPU computes it
 * (pos · theta^(-2i/hd)), so both sides rotate by the same float cos/sin. */
__global__ void rope_kernel(zb_bf16 *x, int N, int T, int n_heads, int hd, double theta,
                            int inverse)
{
    int half = hd / 2;
    size_t pairs = (size_t)N * n_heads * half;
    for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < pairs;
         p += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(p % half);
        size_t rh = p / half; /* row · n_heads + head */
        int row = (int)(rh / n_heads);
        int t = row % T;
        double ang = (double)t * pow(theta, -2.0 * i / hd);
        double sd, cd;
        sincos(ang, &sd, &cd);
        float cs = (float)cd, sn = (float)sd;
        if (inverse)
            sn = -sn;
        size_t at = rh * hd + 2 * i;
        float x0 = zb_ld(x, at), x1 = zb_ld(x, at + 1);
        zb_st(x, at, x0 * cs - x1 * sn);
        zb_st(x, at + 1, x0 * sn + x1 * cs);
    }
}

extern "C" int zb_cuda_rope(zb_cuda *c, zb_bf16 *x, int N, int T, int n_heads, int hd,
                            double theta, int inverse, zb_err *err)
{
    if (hd % 2 != 0 || T <= 0 || N % T != 0)
        return zb_fail(err, "rope: head_dim %d must be even and rows %d a multiple of T %d", hd,
                       N, T);
    size_t pairs = (size_t)N * n_heads * (hd / 2);
    rope_kernel<<<zb_ew_grid(pairs), ZB_EW_THREADS, 0, c->stream>>>(x, N, T, n_heads, hd, theta,
                                                                     inverse);
    return ZB_CUDA_LAUNCHED(err, "rope");
}

/* ---------------------------------------------------------------------- */
/* SwiGLU                                                                  */
/* ---------------------------------------------------------------------- */

__global__ void swiglu_forward_kernel(zb_bf16 *hs, const zb_bf16 *a, const zb_bf16 *b, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float av = zb_ld(a, i);
        float s = 1.0f / (1.0f + expf(-av));
        zb_st(hs, i, av * s * zb_ld(b, i));
    }
}

__global__ void swiglu_backward_kernel(zb_bf16 *da, zb_bf16 *db, const zb_bf16 *dhs,
                                       const zb_bf16 *a, const zb_bf16 *b, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float av = zb_ld(a, i), bv = zb_ld(b, i), g = zb_ld(dhs, i);
        float s = 1.0f / (1.0f + expf(-av));
        zb_st(da, i, g * bv * (s * (1.0f + av * (1.0f - s))));
        zb_st(db, i, g * av * s);
    }
}

extern "C" int zb_cuda_swiglu_forward(zb_cuda *c, zb_bf16 *hs, const zb_bf16 *a,
                                      const zb_bf16 *b, size_t n, zb_err *err)
{
    if (n == 0)
        return 0;
    swiglu_forward_kernel<<<zb_ew_grid(n), ZB_EW_THREADS, 0, c->stream>>>(hs, a, b, n);
    return ZB_CUDA_LAUNCHED(err, "swiglu_forward");
}

extern "C" int zb_cuda_swiglu_backward(zb_cuda *c, zb_bf16 *da, zb_bf16 *db,
                                       const zb_bf16 *dhs, const zb_bf16 *a, const zb_bf16 *b,
                                       size_t n, zb_err *err)
{
    if (n == 0)
        return 0;
    swiglu_backward_kernel<<<zb_ew_grid(n), ZB_EW_THREADS, 0, c->stream>>>(da, db, dhs, a, b, n);
    return ZB_CUDA_LAUNCHED(err, "swiglu_backward");
}

/* ---------------------------------------------------------------------- */
/* Softmax cross-entropy                                                   */
/* ---------------------------------------------------------------------- */

#define CE_THREADS 256

/* Block-wide (max, sum of exp) merge of per-thread online-softmax states. */
static __device__ float block_lse(float mx, float sum)
{
    __shared__ float smx[CE_THREADS], ssum[CE_THREADS];
    smx[threadIdx.x] = mx;
    ssum[threadIdx.x] = sum;
    __syncthreads();
    for (int half = CE_THREADS / 2; half > 0; half /= 2) {
        if ((int)threadIdx.x < half) {
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
    float r = smx[0] + logf(ssum[0]);
    __syncthreads();
    return r;
}

__global__ void crossentropy_forward_kernel(float *lse, float *losses, const zb_bf16 *logits,
                                            const int32_t *targets, int V)
{
    size_t base = (size_t)blockIdx.x * V;
    float mx = -INFINITY, sum = 0.0f;
    for (int j = threadIdx.x; j < V; j += CE_THREADS) {
        float v = zb_ld(logits, base + j);
        if (v > mx) {
            sum = (mx == -INFINITY ? 0.0f : sum * expf(mx - v)) + 1.0f;
            mx = v;
        } else {
            sum += expf(v - mx);
        }
    }
    float l = block_lse(mx, sum);
    if (threadIdx.x == 0) {
        lse[blockIdx.x] = l;
        losses[blockIdx.x] = l - zb_ld(logits, base + targets[blockIdx.x]);
    }
}

__global__ void crossentropy_backward_kernel(zb_bf16 *dlogits, const zb_bf16 *logits,
                                             const float *lse, const int32_t *targets,
                                             float scale, int V)
{
    size_t base = (size_t)blockIdx.x * V;
    float l = lse[blockIdx.x];
    int tgt = targets[blockIdx.x];
    for (int j = threadIdx.x; j < V; j += CE_THREADS) {
        float p = expf(zb_ld(logits, base + j) - l) * scale;
        zb_st(dlogits, base + j, j == tgt ? p - scale : p);
    }
}

extern "C" int zb_cuda_crossentropy_forward(zb_cuda *c, float *lse, float *losses,
                                            const zb_bf16 *logits, const int32_t *targets, int N,
                                            int V, zb_err *err)
{
    if (N <= 0)
        return 0;
    crossentropy_forward_kernel<<<N, CE_THREADS, 0, c->stream>>>(lse, losses, logits, targets, V);
    return ZB_CUDA_LAUNCHED(err, "crossentropy_forward");
}

extern "C" int zb_cuda_crossentropy_backward(zb_cuda *c, zb_bf16 *dlogits, const zb_bf16 *logits,
                                             const float *lse, const int32_t *targets,
                                             float dloss, int N, int V, zb_err *err)
{
    if (N <= 0)
        return 0;
    crossentropy_backward_kernel<<<N, CE_THREADS, 0, c->stream>>>(dlogits, logits, lse, targets,
                                                                  dloss / (float)N, V);
    return ZB_CUDA_LAUNCHED(err, "crossentropy_backward");
}

/* ---------------------------------------------------------------------- */
/* Reductions and elementwise add                                          */
/* ---------------------------------------------------------------------- */

#define SUM_THREADS 1024

__global__ void sum_f64_kernel(double *out, const float *x, size_t n, int squares)
{
    __shared__ double sh[SUM_THREADS];
    double acc = 0.0;
    for (size_t i = threadIdx.x; i < n; i += SUM_THREADS) {
        double v = x[i];
        acc += squares ? v * v : v;
    }
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int half = SUM_THREADS / 2; half > 0; half /= 2) {
        if ((int)threadIdx.x < half)
            sh[threadIdx.x] += sh[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        *out = sh[0];
}

extern "C" int zb_cuda_sum_f64(zb_cuda *c, double *out, const float *x, size_t n, int squares,
                               zb_err *err)
{
    sum_f64_kernel<<<1, SUM_THREADS, 0, c->stream>>>(out, x, n, squares);
    return ZB_CUDA_LAUNCHED(err, "sum_f64");
}

__global__ void add_kernel(zb_bf16 *y, const zb_bf16 *a, const zb_bf16 *b, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        zb_st(y, i, zb_ld(a, i) + zb_ld(b, i));
}

extern "C" int zb_cuda_add(zb_cuda *c, zb_bf16 *y, const zb_bf16 *a, const zb_bf16 *b, size_t n,
                           zb_err *err)
{
    if (n == 0)
        return 0;
    add_kernel<<<zb_ew_grid(n), ZB_EW_THREADS, 0, c->stream>>>(y, a, b, n);
    return ZB_CUDA_LAUNCHED(err, "add");
}
