/*
 * attention.cu: causal multi-head attention with grouped KV heads, flash
 * style: scores are never stored.  The forward runs an online softmax over
 * key tiles and saves the row log-sum-exp; the backward recomputes each
 * probability P_ij = exp(q_i·k_j·scale - lse_i) tile by tile, as the CPU
 * kernel (kernels/cpu/ops.c) does for whole rows.
 *
 * Work split (correctness first, tiled; not a FlashAttention-2 rival):
 *
 *   forward   block = ATT_ROWS query rows of one (sequence, head), one warp
 *             per row; the block walks key tiles of ATT_TILE keys staged in
 *             shared memory (K and V, bf16, rows padded by 2 so lanes
 *             reading different keys hit different banks).  Lane l scores
 *             key l of the tile, the warp merges max and sum, then every
 *             lane accumulates its head dims c = l, l+32, ... of P·V.
 *   D         D_i = dO_i·O_i (fp32 scratch [B, nh, T]), warp per row.
 *   dq        as the forward: per query row, over key tiles, dS_ij =
 *             P_ij (dO_i·v_j - D_i), dq_i = scale Σ_j dS_ij k_j.
 *   dk, dv    block = ATT_ROWS key rows of one (sequence, KV head); for each
 *             query head of the group in head order and each query tile at
 *             or after the block's first key: dv_j += Σ_i P_ij dO_i,
 *             dk_j += scale Σ_i dS_ij q_i.  Each key row is owned by one
 *             warp, so no atomics and the same bits every run.
 *
 * All arithmetic is fp32 with bf16 loads and stores.  hd ≤ 256 (8 dims per
 * lane).  Workload: T up to 4096, hd 64..128 in the benchmarks.
 */
#include "kernels/cuda/cuda_internal.cuh"

#define ATT_ROWS 16  /* warps (rows) per block */
#define ATT_TILE 32  /* keys (or queries) per shared-memory tile: one per lane */
#define ATT_MAXR (ZB_CUDA_ATTN_MAX_HD / 32)

/* Padded row stride (bf16 elements) of a staged tile. */
static __host__ __device__ int tile_stride(int hd) { return hd + 2; }

/* Copies rows [r0, r0+ATT_TILE) of a [*, ld] bf16 matrix (columns
 * col0..col0+hd) into a padded shared tile; rows >= T become zeros. */
static __device__ void stage_tile(__nv_bfloat16 *dst, const zb_bf16 *src, size_t row_base,
                                  int r0, int T, int ld, int col0, int hd)
{
    int ts = tile_stride(hd);
    for (int e = threadIdx.x; e < ATT_TILE * hd; e += blockDim.x) {
        int r = e / hd, cc = e % hd;
        int t = r0 + r;
        dst[r * ts + cc] = t < T ? reinterpret_cast<const __nv_bfloat16 *>(
                                       src)[(row_base + t) * ld + col0 + cc]
                                 : __float2bfloat16(0.0f);
    }
}

/* Loads row t of a [*, ld] bf16 matrix into fp32 shared (zeros when t >= T),
 * one warp. */
static __device__ void load_row(float *dst, const zb_bf16 *src, size_t row_base, int t, int T,
                                int ld, int col0, int hd, int lane)
{
    for (int cc = lane; cc < hd; cc += 32)
        dst[cc] = t < T ? zb_ld(src, (row_base + t) * ld + col0 + cc) : 0.0f;
}

/* ---------------------------------------------------------------------- */
/* Forward                                                                 */
/* ---------------------------------------------------------------------- */

__global__ void attention_forward_kernel(zb_bf16 *o, float *lse, const zb_bf16 *q,
                                         const zb_bf16 *k, const zb_bf16 *v, int T, int nh,
                                         int nkv, int hd, float scale)
{
    extern __shared__ unsigned char smem[];
    int ts = tile_stride(hd);
    __nv_bfloat16 *Ks = reinterpret_cast<__nv_bfloat16 *>(smem);
    __nv_bfloat16 *Vs = Ks + ATT_TILE * ts;
    float *qs = reinterpret_cast<float *>(Vs + ATT_TILE * ts); /* [ATT_ROWS][hd] */
    float *ps = qs + ATT_ROWS * hd;                            /* [ATT_ROWS][ATT_TILE] */

    int b = blockIdx.z, h = blockIdx.y, g = h / (nh / nkv);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int row0 = blockIdx.x * ATT_ROWS, i = row0 + warp;
    int qd = nh * hd, kvd = nkv * hd;
    size_t rb = (size_t)b * T;
    float *qrow = qs + warp * hd, *prow = ps + warp * ATT_TILE;
    load_row(qrow, q, rb, i, T, qd, h * hd, hd, lane);

    float acc[ATT_MAXR];
    for (int r = 0; r < ATT_MAXR; r++)
        acc[r] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    int last = min(T, row0 + ATT_ROWS); /* keys needed by the block: [0, last) */
    for (int kt = 0; kt < last; kt += ATT_TILE) {
        __syncthreads();
        stage_tile(Ks, k, rb, kt, T, kvd, g * hd, hd);
        stage_tile(Vs, v, rb, kt, T, kvd, g * hd, hd);
        __syncthreads();
        if (i >= T || kt > i)
            continue;
        int j = kt + lane;
        float s = -INFINITY;
        if (j <= i) {
            float dot = 0.0f;
            const __nv_bfloat16 *kr = Ks + lane * ts;
            for (int cc = 0; cc < hd; cc++)
                dot += qrow[cc] * __bfloat162float(kr[cc]);
            s = dot * scale;
        }
        float mn = fmaxf(m, zb_warp_max(s));
        float p = j <= i ? expf(s - mn) : 0.0f;
        float corr = m == -INFINITY ? 0.0f : expf(m - mn);
        l = l * corr + zb_warp_sum(p);
        m = mn;
        prow[lane] = p;
        __syncwarp();
        int nk = min(ATT_TILE, i - kt + 1);
        for (int r = 0; r < ATT_MAXR; r++) {
            int cc = lane + 32 * r;
            if (cc >= hd)
                break;
            float a = acc[r] * corr;
            for (int jj = 0; jj < nk; jj++)
                a += prow[jj] * __bfloat162float(Vs[jj * ts + cc]);
            acc[r] = a;
        }
        __syncwarp();
    }
    if (i >= T)
        return;
    float inv = 1.0f / l;
    for (int r = 0; r < ATT_MAXR; r++) {
        int cc = lane + 32 * r;
        if (cc >= hd)
            break;
        zb_st(o, (rb + i) * qd + h * hd + cc, acc[r] * inv);
    }
    if (lane == 0)
        lse[((size_t)b * nh + h) * T + i] = m + logf(l);
}

static size_t fwd_smem(int hd)
{
    return 2 * (size_t)ATT_TILE * tile_stride(hd) * 2 + (size_t)ATT_ROWS * hd * 4 +
           (size_t)ATT_ROWS * ATT_TILE * 4;
}

static int check_shape(int B, int T, int nh, int nkv, int hd, zb_err *err)
{
    if (B <= 0 || T <= 0 || nh <= 0 || nkv <= 0 || nh % nkv != 0)
        return zb_fail(err, "attention: bad shape B=%d T=%d heads=%d kv_heads=%d", B, T, nh, nkv);
    if (hd <= 0 || hd % 2 != 0 || hd > ZB_CUDA_ATTN_MAX_HD)
        return zb_fail(err, "attention: head_dim %d must be even and at most %d", hd,
                       ZB_CUDA_ATTN_MAX_HD);
    return 0;
}

/* Raises a kernel's dynamic shared memory cap when it needs more than the
 * default 48 KiB (H100/H200 allow up to 227 KiB per block). */
static int allow_smem(const void *fn, size_t bytes, zb_err *err)
{
    if (bytes <= 48 * 1024)
        return 0;
    return zb_cuda_status(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               (int)bytes),
                          "attention: shared memory", err);
}

extern "C" int zb_cuda_attention_forward(zb_cuda *c, zb_bf16 *o, float *lse, const zb_bf16 *q,
                                         const zb_bf16 *k, const zb_bf16 *v, int B, int T,
                                         int nh, int nkv, int hd, zb_err *err)
{
    if (check_shape(B, T, nh, nkv, hd, err) != 0)
        return -1;
    size_t sm = fwd_smem(hd);
    if (allow_smem((const void *)attention_forward_kernel, sm, err) != 0)
        return -1;
    dim3 grid((T + ATT_ROWS - 1) / ATT_ROWS, nh, B);
    attention_forward_kernel<<<grid, ATT_ROWS * 32, sm, c->stream>>>(o, lse, q, k, v, T, nh, nkv,
                                                                     hd, 1.0f / sqrtf((float)hd));
    return ZB_CUDA_LAUNCHED(err, "attention_forward");
}

/* ---------------------------------------------------------------------- */
/* Backward                                                                */
/* ---------------------------------------------------------------------- */

/* D[b,h,i] = Σ_c dO[i,c]·O[i,c], one warp per (row, head). */
__global__ void attention_d_kernel(float *D, const zb_bf16 *do_, const zb_bf16 *o, int B, int T,
                                   int nh, int hd)
{
    size_t w = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (w >= (size_t)B * nh * T)
        return;
    int i = (int)(w % T);
    size_t bh = w / T;
    int h = (int)(bh % nh), b = (int)(bh / nh);
    size_t base = ((size_t)b * T + i) * nh * hd + (size_t)h * hd;
    float s = 0.0f;
    for (int cc = lane; cc < hd; cc += 32)
        s += zb_ld(do_, base + cc) * zb_ld(o, base + cc);
    s = zb_warp_sum(s);
    if (lane == 0)
        D[w] = s; /* w = (b·nh + h)·T + i, the lse layout */
}

__global__ void attention_dq_kernel(zb_bf16 *dq, const zb_bf16 *do_, const zb_bf16 *q,
                                    const zb_bf16 *k, const zb_bf16 *v, const float *lse,
                                    const float *D, int T, int nh, int nkv, int hd, float scale)
{
    extern __shared__ unsigned char smem[];
    int ts = tile_stride(hd);
    __nv_bfloat16 *Ks = reinterpret_cast<__nv_bfloat16 *>(smem);
    __nv_bfloat16 *Vs = Ks + ATT_TILE * ts;
    float *qs = reinterpret_cast<float *>(Vs + ATT_TILE * ts); /* [ATT_ROWS][hd] */
    float *dos = qs + ATT_ROWS * hd;                           /* [ATT_ROWS][hd] */
    float *dss = dos + ATT_ROWS * hd;                          /* [ATT_ROWS][ATT_TILE] */

    int b = blockIdx.z, h = blockIdx.y, g = h / (nh / nkv);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int row0 = blockIdx.x * ATT_ROWS, i = row0 + warp;
    int qd = nh * hd, kvd = nkv * hd;
    size_t rb = (size_t)b * T;
    float *qrow = qs + warp * hd, *dorow = dos + warp * hd, *dsrow = dss + warp * ATT_TILE;
    load_row(qrow, q, rb, i, T, qd, h * hd, hd, lane);
    load_row(dorow, do_, rb, i, T, qd, h * hd, hd, lane);
    size_t li = ((size_t)b * nh + h) * T + i;
    float lse_i = i < T ? lse[li] : 0.0f, D_i = i < T ? D[li] : 0.0f;

    float acc[ATT_MAXR];
    for (int r = 0; r < ATT_MAXR; r++)
        acc[r] = 0.0f;
    int last = min(T, row0 + ATT_ROWS);
    for (int kt = 0; kt < last; kt += ATT_TILE) {
        __syncthreads();
        stage_tile(Ks, k, rb, kt, T, kvd, g * hd, hd);
        stage_tile(Vs, v, rb, kt, T, kvd, g * hd, hd);
        __syncthreads();
        if (i >= T || kt > i)
            continue;
        int j = kt + lane;
        float ds = 0.0f;
        if (j <= i) {
            float sdot = 0.0f, pdot = 0.0f;
            const __nv_bfloat16 *kr = Ks + lane * ts, *vr = Vs + lane * ts;
            for (int cc = 0; cc < hd; cc++) {
                sdot += qrow[cc] * __bfloat162float(kr[cc]);
                pdot += dorow[cc] * __bfloat162float(vr[cc]);
            }
            float p = expf(sdot * scale - lse_i);
            ds = p * (pdot - D_i);
        }
        dsrow[lane] = ds;
        __syncwarp();
        int nk = min(ATT_TILE, i - kt + 1);
        for (int r = 0; r < ATT_MAXR; r++) {
            int cc = lane + 32 * r;
            if (cc >= hd)
                break;
            float a = acc[r];
            for (int jj = 0; jj < nk; jj++)
                a += dsrow[jj] * __bfloat162float(Ks[jj * ts + cc]);
            acc[r] = a;
        }
        __syncwarp();
    }
    if (i >= T)
        return;
    for (int r = 0; r < ATT_MAXR; r++) {
        int cc = lane + 32 * r;
        if (cc >= hd)
            break;
        zb_st(dq, (rb + i) * qd + h * hd + cc, acc[r] * scale);
    }
}

__global__ void attention_dkdv_kernel(zb_bf16 *dk, zb_bf16 *dv, const zb_bf16 *do_,
                                      const zb_bf16 *q, const zb_bf16 *k, const zb_bf16 *v,
                                      const float *lse, const float *D, int T, int nh, int nkv,
                                      int hd, float scale)
{
    extern __shared__ unsigned char smem[];
    int ts = tile_stride(hd);
    __nv_bfloat16 *Qs = reinterpret_cast<__nv_bfloat16 *>(smem);
    __nv_bfloat16 *Os = Qs + ATT_TILE * ts;                     /* dO tile */
    float *ks = reinterpret_cast<float *>(Os + ATT_TILE * ts);  /* [ATT_ROWS][hd] */
    float *vs = ks + ATT_ROWS * hd;                             /* [ATT_ROWS][hd] */
    float *lses = vs + ATT_ROWS * hd;                           /* [ATT_TILE] */
    float *Ds = lses + ATT_TILE;                                /* [ATT_TILE] */
    float *pss = Ds + ATT_TILE;                                 /* [ATT_ROWS][ATT_TILE] */
    float *dss = pss + ATT_ROWS * ATT_TILE;                     /* [ATT_ROWS][ATT_TILE] */

    int b = blockIdx.z, g = blockIdx.y, rep = nh / nkv;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int row0 = blockIdx.x * ATT_ROWS, j = row0 + warp;
    int qd = nh * hd, kvd = nkv * hd;
    size_t rb = (size_t)b * T;
    float *krow = ks + warp * hd, *vrow = vs + warp * hd;
    float *prow = pss + warp * ATT_TILE, *dsrow = dss + warp * ATT_TILE;
    load_row(krow, k, rb, j, T, kvd, g * hd, hd, lane);
    load_row(vrow, v, rb, j, T, kvd, g * hd, hd, lane);

    float dka[ATT_MAXR], dva[ATT_MAXR];
    for (int r = 0; r < ATT_MAXR; r++)
        dka[r] = dva[r] = 0.0f;
    int first = (row0 / ATT_TILE) * ATT_TILE; /* queries before row0 never see these keys */
    for (int h = g * rep; h < (g + 1) * rep; h++) {
        for (int qt = first; qt < T; qt += ATT_TILE) {
            __syncthreads();
            stage_tile(Qs, q, rb, qt, T, qd, h * hd, hd);
            stage_tile(Os, do_, rb, qt, T, qd, h * hd, hd);
            if (threadIdx.x < ATT_TILE) {
                int t = qt + threadIdx.x;
                size_t li = ((size_t)b * nh + h) * T + t;
                lses[threadIdx.x] = t < T ? lse[li] : 0.0f;
                Ds[threadIdx.x] = t < T ? D[li] : 0.0f;
            }
            __syncthreads();
            if (j >= T || qt + ATT_TILE <= j)
                continue;
            int i = qt + lane;
            float p = 0.0f, ds = 0.0f;
            if (i >= j && i < T) {
                float sdot = 0.0f, pdot = 0.0f;
                const __nv_bfloat16 *qr = Qs + lane * ts, *orow = Os + lane * ts;
                for (int cc = 0; cc < hd; cc++) {
                    sdot += __bfloat162float(qr[cc]) * krow[cc];
                    pdot += __bfloat162float(orow[cc]) * vrow[cc];
                }
                p = expf(sdot * scale - lses[lane]);
                ds = p * (pdot - Ds[lane]);
            }
            prow[lane] = p;
            dsrow[lane] = ds;
            __syncwarp();
            for (int r = 0; r < ATT_MAXR; r++) {
                int cc = lane + 32 * r;
                if (cc >= hd)
                    break;
                float a = dva[r], bk = dka[r];
                for (int ii = 0; ii < ATT_TILE; ii++) {
                    a += prow[ii] * __bfloat162float(Os[ii * ts + cc]);
                    bk += dsrow[ii] * __bfloat162float(Qs[ii * ts + cc]);
                }
                dva[r] = a;
                dka[r] = bk;
            }
            __syncwarp();
        }
    }
    if (j >= T)
        return;
    for (int r = 0; r < ATT_MAXR; r++) {
        int cc = lane + 32 * r;
        if (cc >= hd)
            break;
        zb_st(dk, (rb + j) * kvd + g * hd + cc, dka[r] * scale);
        zb_st(dv, (rb + j) * kvd + g * hd + cc, dva[r]);
    }
}

static size_t dq_smem(int hd)
{
    return 2 * (size_t)ATT_TILE * tile_stride(hd) * 2 + 2 * (size_t)ATT_ROWS * hd * 4 +
           (size_t)ATT_ROWS * ATT_TILE * 4;
}

static size_t dkdv_smem(int hd)
{
    return 2 * (size_t)ATT_TILE * tile_stride(hd) * 2 + 2 * (size_t)ATT_ROWS * hd * 4 +
           2 * (size_t)ATT_TILE * 4 + 2 * (size_t)ATT_ROWS * ATT_TILE * 4;
}

extern "C" size_t zb_cuda_attention_scratch_bytes(int B, int T, int nh)
{
    return sizeof(float) * (size_t)B * nh * T;
}

extern "C" int zb_cuda_attention_backward(zb_cuda *c, zb_bf16 *dq, zb_bf16 *dk, zb_bf16 *dv,
                                          const zb_bf16 *do_, const zb_bf16 *q,
                                          const zb_bf16 *k, const zb_bf16 *v, const zb_bf16 *o,
                                          const float *lse, void *scratch, int B, int T, int nh,
                                          int nkv, int hd, zb_err *err)
{
    if (check_shape(B, T, nh, nkv, hd, err) != 0)
        return -1;
    float *D = (float *)scratch;
    float scale = 1.0f / sqrtf((float)hd);
    size_t rows = (size_t)B * nh * T;
    attention_d_kernel<<<(unsigned)((rows + 7) / 8), 256, 0, c->stream>>>(D, do_, o, B, T, nh, hd);
    if (ZB_CUDA_LAUNCHED(err, "attention_backward (D)") != 0)
        return -1;
    size_t sq = dq_smem(hd), skv = dkdv_smem(hd);
    if (allow_smem((const void *)attention_dq_kernel, sq, err) != 0 ||
        allow_smem((const void *)attention_dkdv_kernel, skv, err) != 0)
        return -1;
    unsigned tiles = (unsigned)((T + ATT_ROWS - 1) / ATT_ROWS);
    attention_dq_kernel<<<dim3(tiles, nh, B), ATT_ROWS * 32, sq, c->stream>>>(
        dq, do_, q, k, v, lse, D, T, nh, nkv, hd, scale);
    if (ZB_CUDA_LAUNCHED(err, "attention_backward (dq)") != 0)
        return -1;
    attention_dkdv_kernel<<<dim3(tiles, nkv, B), ATT_ROWS * 32, skv, c->stream>>>(
        dk, dv, do_, q, k, v, lse, D, T, nh, nkv, hd, scale);
    return ZB_CUDA_LAUNCHED(err, "attention_backward (dk, dv)");
}
