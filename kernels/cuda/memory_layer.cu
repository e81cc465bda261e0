/*
 * memory_layer.cu: the product-key memory kernels of memory_cuda.h.
 *
 * Lookup: one thread per (row, head) keeps two sorted top-k lists of
 * (score, index) in local memory while it scans the n_keys half-keys of
 * each table (dot products in fp32 from bf16), then the top-k of the k²
 * sums, then the softmax; ties go to the smaller index, as in
 * kernels/cpu/memory_layer.c.  Bag and B: one block per row, threads over
 * the value columns (bag) or one warp per head (B, shuffle-tree dot
 * products).  W: scatter-adds where a thread owns one table column and
 * walks the entries in order (memory_cuda.h explains why no atomics).
 *
 * Workload: tiny-mem sizes in the per-op test (N = 256, 64² slots,
 * k = 8); correctness and determinism first, speed second.
 */
#include "kernels/cuda/cuda_internal.cuh"

extern "C" {
#include "kernels/cuda/memory_cuda.h"
}

/* Inserts (score, index) into the descending list of capacity k. */
static __device__ void topk_insert(float *bs, int *bi, int *n, int k, float score, int index)
{
    if (*n == k && !(score > bs[k - 1]))
        return;
    int pos = *n < k ? *n : k - 1;
    while (pos > 0 && score > bs[pos - 1]) {
        bs[pos] = bs[pos - 1];
        bi[pos] = bi[pos - 1];
        pos--;
    }
    bs[pos] = score;
    bi[pos] = index;
    if (*n < k)
        (*n)++;
}

__global__ void memory_lookup_kernel(int32_t *idx, float *w, const zb_bf16 *q,
                                     const zb_bf16 *keys, int N, int H, int kd, int nk, int k)
{
    int id = blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= N * H)
        return;
    int n = id / H, h = id % H, half = kd / 2;
    float s1[ZB_CUDA_MEM_MAX_TOPK], s2[ZB_CUDA_MEM_MAX_TOPK], sc[ZB_CUDA_MEM_MAX_TOPK];
    int a1[ZB_CUDA_MEM_MAX_TOPK], b2[ZB_CUDA_MEM_MAX_TOPK], ci[ZB_CUDA_MEM_MAX_TOPK];
    size_t qb = (size_t)n * H * kd + (size_t)h * kd;
    for (int part = 0; part < 2; part++) {
        float *bs = part ? s2 : s1;
        int *bi = part ? b2 : a1;
        int m = 0;
        const size_t kb = (size_t)(2 * h + part) * nk * half;
        for (int a = 0; a < nk; a++) {
            float acc = 0.0f;
            for (int t = 0; t < half; t++)
                acc += zb_ld(q, qb + part * half + t) * zb_ld(keys, kb + (size_t)a * half + t);
            topk_insert(bs, bi, &m, k, acc, a);
        }
    }
    int m = 0;
    for (int i = 0; i < k; i++)
        for (int j = 0; j < k; j++)
            topk_insert(sc, ci, &m, k, s1[i] + s2[j], i * k + j);
    float mx = sc[0], sum = 0.0f;
    for (int j = 0; j < k; j++)
        sum += expf(sc[j] - mx);
    size_t ob = ((size_t)n * H + h) * k;
    for (int j = 0; j < k; j++) {
        idx[ob + j] = a1[ci[j] / k] * nk + b2[ci[j] % k];
        w[ob + j] = expf(sc[j] - mx) / sum;
    }
}

extern "C" int zb_cuda_memory_lookup(zb_cuda *c, int32_t *idx, float *w, const zb_bf16 *q,
                                     const zb_bf16 *keys, const mem_shape *s, int N, zb_err *err)
{
    if (s->topk > ZB_CUDA_MEM_MAX_TOPK)
        return zb_fail(err, "memory lookup: topk %d exceeds the GPU kernel's %d", s->topk,
                       ZB_CUDA_MEM_MAX_TOPK);
    int rows = N * s->heads;
    memory_lookup_kernel<<<(rows + 63) / 64, 64, 0, c->stream>>>(idx, w, q, keys, N, s->heads,
                                                                 s->k_dim, s->n_keys, s->topk);
    return ZB_CUDA_LAUNCHED(err, "memory_lookup");
}

/* One block per row, threads over the columns. */
__global__ void memory_bag_kernel(zb_bf16 *e, const int32_t *idx, const float *w,
                                  const zb_bf16 *values, int HK, int v)
{
    int n = blockIdx.x;
    for (int col = threadIdx.x; col < v; col += blockDim.x) {
        float acc = 0.0f;
        for (int hj = 0; hj < HK; hj++) {
            size_t ent = (size_t)n * HK + hj;
            acc += w[ent] * zb_ld(values, (size_t)idx[ent] * v + col);
        }
        zb_st(e, (size_t)n * v + col, acc);
    }
}

extern "C" int zb_cuda_memory_bag_forward(zb_cuda *c, zb_bf16 *e, const int32_t *idx,
                                          const float *w, const zb_bf16 *values,
                                          const mem_shape *s, int N, zb_err *err)
{
    if (N > 0)
        memory_bag_kernel<<<N, 128, 0, c->stream>>>(e, idx, w, values, s->heads * s->topk,
                                                    s->v_dim);
    return ZB_CUDA_LAUNCHED(err, "memory_bag_forward");
}

/* One warp per (row, head): the weights' gradients by shuffle-tree dot
 * products, the softmax backward on lane 0's view, then dq over kd. */
__global__ void memory_backward_b_kernel(float *ds, zb_bf16 *dq, const zb_bf16 *de,
                                         const int32_t *idx, const float *w,
                                         const zb_bf16 *values, const zb_bf16 *keys, int N,
                                         int H, int kd, int nk, int k, int v)
{
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    if (warp >= N * H)
        return;
    int n = warp / H, h = warp % H, half = kd / 2;
    size_t base = ((size_t)n * H + h) * k;
    float dw[ZB_CUDA_MEM_MAX_TOPK];
    float dot = 0.0f;
    for (int j = 0; j < k; j++) {
        float a = 0.0f;
        const size_t row = (size_t)idx[base + j] * v;
        for (int col = lane; col < v; col += 32)
            a += zb_ld(de, (size_t)n * v + col) * zb_ld(values, row + col);
        a = zb_warp_sum(a);
        dw[j] = a;
        dot += w[base + j] * a;
    }
    for (int j = 0; j < k; j++) {
        float g = w[base + j] * (dw[j] - dot);
        dw[j] = g;
        if (lane == 0)
            ds[base + j] = g;
    }
    for (int t = lane; t < kd; t += 32) {
        int part = t >= half, tt = t - part * half;
        const size_t kb = (size_t)(2 * h + part) * nk * half;
        float acc = 0.0f;
        for (int j = 0; j < k; j++) {
            int slot = idx[base + j], r = part ? slot % nk : slot / nk;
            acc += dw[j] * zb_ld(keys, kb + (size_t)r * half + tt);
        }
        zb_st(dq, (size_t)n * H * kd + (size_t)h * kd + t, acc);
    }
}

extern "C" int zb_cuda_memory_backward_b(zb_cuda *c, float *ds, zb_bf16 *dq, const zb_bf16 *de,
                                         const int32_t *idx, const float *w,
                                         const zb_bf16 *values, const zb_bf16 *keys,
                                         const mem_shape *s, int N, zb_err *err)
{
    if (s->topk > ZB_CUDA_MEM_MAX_TOPK)
        return zb_fail(err, "memory backward: topk %d exceeds the GPU kernel's %d", s->topk,
                       ZB_CUDA_MEM_MAX_TOPK);
    int warps = N * s->heads;
    memory_backward_b_kernel<<<(warps * 32 + 127) / 128, 128, 0, c->stream>>>(
        ds, dq, de, idx, w, values, keys, N, s->heads, s->k_dim, s->n_keys, s->topk, s->v_dim);
    return ZB_CUDA_LAUNCHED(err, "memory_backward_b");
}

/* Thread (h, part, t) owns column t of half-table (h, part). */
__global__ void memory_keys_w_kernel(float *dkeys, const float *ds, const zb_bf16 *q,
                                     const int32_t *idx, int N, int H, int kd, int nk, int k)
{
    int id = blockIdx.x * blockDim.x + threadIdx.x, half = kd / 2;
    if (id >= H * kd)
        return;
    int h = id / kd, t = id % kd, part = t >= half, tt = t - part * half;
    float *table = dkeys + (size_t)(2 * h + part) * nk * half;
    for (int n = 0; n < N; n++) {
        float qv = zb_ld(q, (size_t)n * H * kd + (size_t)h * kd + t);
        size_t base = ((size_t)n * H + h) * k;
        for (int j = 0; j < k; j++) {
            int slot = idx[base + j], r = part ? slot % nk : slot / nk;
            table[(size_t)r * half + tt] += ds[base + j] * qv;
        }
    }
}

extern "C" int zb_cuda_memory_keys_backward_w(zb_cuda *c, float *dkeys, const float *ds,
                                              const zb_bf16 *q, const int32_t *idx,
                                              const mem_shape *s, int N, zb_err *err)
{
    int threads = s->heads * s->k_dim;
    memory_keys_w_kernel<<<(threads + 63) / 64, 64, 0, c->stream>>>(
        dkeys, ds, q, idx, N, s->heads, s->k_dim, s->n_keys, s->topk);
    return ZB_CUDA_LAUNCHED(err, "memory_keys_backward_w");
}

/* Thread col owns column col of the value table. */
__global__ void memory_values_w_kernel(float *dV, const int32_t *idx, const float *w,
                                       const zb_bf16 *de, int N, int HK, int v)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= v)
        return;
    for (int n = 0; n < N; n++) {
        float g = zb_ld(de, (size_t)n * v + col);
        for (int hj = 0; hj < HK; hj++) {
            size_t ent = (size_t)n * HK + hj;
            dV[(size_t)idx[ent] * v + col] += w[ent] * g;
        }
    }
}

extern "C" int zb_cuda_memory_values_backward_w(zb_cuda *c, float *dV, const int32_t *idx,
                                                const float *w, const zb_bf16 *de,
                                                const mem_shape *s, int N, zb_err *err)
{
    memory_values_w_kernel<<<(s->v_dim + 63) / 64, 64, 0, c->stream>>>(
        dV, idx, w, de, N, s->heads * s->topk, s->v_dim);
    return ZB_CUDA_LAUNCHED(err, "memory_values_backward_w");
}
