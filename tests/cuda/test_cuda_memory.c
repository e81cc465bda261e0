/*
 * test_cuda_memory.c: the product-key memory kernels on a GPU
 * (kernels/cuda/memory_cuda.h) against their CPU twins
 * (kernels/cpu/memory_layer.h), per op, on random bf16-rounded inputs of
 * tiny-mem's sizes and an odd shape.  Method as cuda_check.h: NMSE against
 * the CPU; exit 77 (SKIP) without a CUDA device.
 *
 * The lookup is compared by the fraction of identical slots (a near-tie
 * may rank differently in fp32 on the GPU than in double on the CPU) and
 * the weights' NMSE; the ops after it are fed the CPU's slots and weights,
 * so each op is compared on its own.
 */
#include <string.h>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/memory_layer.h"
#include "kernels/cuda/memory_cuda.h"
#include "tests/cuda/cuda_check.h"
#include "tests/cuda/cuda_dev.h"

static zb_cuda *ctx;

static void test_memory(mem_shape s, int N)
{
    char name[128];
    int H = s.heads, kd = s.k_dim, k = s.topk, v = s.v_dim, nk = s.n_keys;
    size_t nq = (size_t)N * H * kd, nkeys = (size_t)H * 2 * nk * (kd / 2);
    size_t nvals = (size_t)nk * nk * v, M = (size_t)N * H * k, ne = (size_t)N * v;
    float *q = cd_rand_bf16(nq, 1.0f), *keys = cd_rand_bf16(nkeys, 1.0f);
    float *vals = cd_rand_bf16(nvals, 0.5f), *de = cd_rand_bf16(ne, 1.0f);
    zb_bf16 *dq_in = cd_up_bf16(q, nq), *dkeys = cd_up_bf16(keys, nkeys), *dvals = cd_up_bf16(vals, nvals);
    zb_bf16 *dde = cd_up_bf16(de, ne);

    /* lookup */
    int32_t *idx = malloc(M * 4);
    float *w = malloc(M * 4);
    if (kern_memory_lookup(idx, w, q, keys, &s, N) != 0) {
        cc_true("cpu lookup scratch", 0);
        return;
    }
    int32_t *gidx = cd_dev_zero(M * 4);
    float *gw = cd_dev_zero(M * 4);
    CC_OK(zb_cuda_memory_lookup(ctx, gidx, gw, dq_in, dkeys, &s, N, err));
    int32_t *hidx = cd_down(gidx, M * 4);
    float *hw = cd_down(gw, M * 4);
    size_t same = 0;
    for (size_t e = 0; e < M; e++)
        same += hidx[e] == idx[e];
    snprintf(name, sizeof name, "memory lookup slots N=%d H=%d slots=%d k=%d", N, H, nk * nk, k);
    cc_true(name, same >= M - M / 100); /* at most 1% near-tie swaps */
    snprintf(name, sizeof name, "memory lookup weights N=%d k=%d", N, k);
    if (same == M)
        cc_expect(name, cc_nmse(hw, w, M), 1e-8);
    else
        cc_true(name, 1);

    /* the rest is fed the CPU's selection */
    int32_t *cidx = cd_up_raw(idx, M * 4);
    float *cw = cd_up_raw(w, M * 4);
    zb_bf16 *ge = cd_dev_zero(ne * 2);
    CC_OK(zb_cuda_memory_bag_forward(ctx, ge, cidx, cw, dvals, &s, N, err));
    float *e = malloc(ne * 4);
    kern_memory_bag_forward(e, idx, w, vals, &s, N);
    cd_round_bf16(e, ne);
    float *he = cd_down_bf16(ge, ne);
    snprintf(name, sizeof name, "memory bag F N=%d v=%d", N, v);
    cc_expect(name, cc_nmse(he, e, ne), 1e-5);

    float *ds = malloc(M * 4), *dq = malloc(nq * 4);
    if (kern_memory_backward_b(ds, dq, de, idx, w, vals, keys, &s, N) != 0) {
        cc_true("cpu backward scratch", 0);
        return;
    }
    cd_round_bf16(dq, nq);
    float *gds = cd_dev_zero(M * 4);
    zb_bf16 *gdq = cd_dev_zero(nq * 2);
    CC_OK(zb_cuda_memory_backward_b(ctx, gds, gdq, dde, cidx, cw, dvals, dkeys, &s, N, err));
    float *hds = cd_down(gds, M * 4), *hdq = cd_down_bf16(gdq, nq);
    snprintf(name, sizeof name, "memory B ds N=%d k=%d", N, k);
    cc_expect(name, cc_nmse(hds, ds, M), 1e-5);
    snprintf(name, sizeof name, "memory B dq N=%d kd=%d", N, kd);
    cc_expect(name, cc_nmse(hdq, dq, nq), 1e-4);

    /* W: accumulate onto a non-zero start */
    float *kacc = cd_rand_bf16(nkeys, 0.1f), *vacc = cd_rand_bf16(nvals, 0.1f);
    float *gk = cd_up_raw(kacc, nkeys * 4), *gv = cd_up_raw(vacc, nvals * 4);
    float *gds_cpu = cd_up_raw(ds, M * 4);
    CC_OK(zb_cuda_memory_keys_backward_w(ctx, gk, gds_cpu, dq_in, cidx, &s, N, err));
    CC_OK(zb_cuda_memory_values_backward_w(ctx, gv, cidx, cw, dde, &s, N, err));
    float *tk = malloc(nkeys * 4);
    kern_memory_keys_backward_w(tk, ds, q, idx, &s, N);
    for (size_t i = 0; i < nkeys; i++)
        tk[i] += kacc[i];
    float *tv = malloc(nvals * 4);
    memcpy(tv, vacc, nvals * 4);
    void *scratch = malloc(kern_memory_values_scratch_bytes(&s, N));
    kern_memory_values_backward_w(tv, idx, w, de, &s, N, scratch);
    float *hk = cd_down(gk, nkeys * 4), *hv = cd_down(gv, nvals * 4);
    snprintf(name, sizeof name, "memory W keys (accumulate) N=%d", N);
    cc_expect(name, cc_nmse(hk, tk, nkeys), 1e-6);
    snprintf(name, sizeof name, "memory W values (sparse, accumulate) N=%d", N);
    cc_expect(name, cc_nmse(hv, tv, nvals), 1e-6);
    /* sparse: rows nobody read are exactly their start values */
    size_t untouched_ok = 1;
    for (int r = 0; r < nk * nk; r++) {
        int read = 0;
        for (size_t e2 = 0; e2 < M && !read; e2++)
            read = idx[e2] == r;
        if (!read && memcmp(hv + (size_t)r * v, vacc + (size_t)r * v, (size_t)v * 4) != 0)
            untouched_ok = 0;
    }
    snprintf(name, sizeof name, "memory W values leaves unread rows alone");
    cc_true(name, (int)untouched_ok);
    free(q); free(keys); free(vals); free(de); free(idx); free(w); free(hidx); free(hw);
    free(e); free(he); free(ds); free(dq); free(hds); free(hdq); free(kacc); free(vacc);
    free(tk); free(tv); free(scratch); free(hk); free(hv);
    zb_cuda_release(dq_in); zb_cuda_release(dkeys); zb_cuda_release(dvals);
    zb_cuda_release(dde); zb_cuda_release(gidx); zb_cuda_release(gw); zb_cuda_release(cidx);
    zb_cuda_release(cw); zb_cuda_release(ge); zb_cuda_release(gds); zb_cuda_release(gdq);
    zb_cuda_release(gk); zb_cuda_release(gv); zb_cuda_release(gds_cpu);
}

int main(void)
{
    cc_require_device();
    kernels_init_threads(1);
    CC_OK(zb_cuda_create(0, &ctx, err));
    cd_init(ctx, 0x9e3779b97f4a7c15ull);
    mem_shape tiny_mem = { 64, 2, 32, 64, 8, 64 };
    test_memory(tiny_mem, 256);
    mem_shape odd = { 24, 3, 10, 13, 5, 17 };
    test_memory(odd, 37);
    zb_cuda_free(ctx);
    return cc_summary();
}
