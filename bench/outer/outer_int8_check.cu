/*
 * outer_int8_check.cu: checks and times the CUDA int8 codebook kernels
 * (kernels/cuda/outer_int8.cu) against the CPU quantizer
 * (runtime/outer/outer_quant.c) on one GPU.  Not part of the meson build
 * (kernels/cuda/meson.build belongs to the CUDA owner); build and run by
 * hand on a machine with a GPU:
 *
 *   nvcc -O2 -arch=sm_90 -I. bench/outer/outer_int8_check.cu \
 *        kernels/cuda/outer_int8.cu runtime/outer/outer_quant.c -o /tmp/oic
 *   /tmp/oic [n]
 *
 * Checks: bucket indices equal to the CPU's, table entries within 1e-6
 * relative (+ s * 2^-20 absolute), decode-add equal to CPU decode-add with
 * the GPU table, Nesterov bit-identical; prints encode bandwidth.  Exit
 * status 0 when every check passes.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "runtime/outer/outer_quant.h"
#include "runtime/outer/outer_int8_cuda.h"
void outer_nesterov(float *x, float *mom, const float *delta, size_t n, float lr, float mu);
}

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); return 2; } } while (0)

/* The CPU twin of the Nesterov step, copied here so this file needs only
 * outer_quant.c: the same loop as outer.c's outer_nesterov. */
void outer_nesterov(float *x, float *mom, const float *delta, size_t n, float lr, float mu)
{
    for (size_t j = 0; j < n; j++) {
        float m = mu * mom[j] + delta[j];
        mom[j] = m;
        x[j] -= lr * (delta[j] + mu * m);
    }
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? (size_t)atoll(argv[1]) : (size_t)1 << 24;
    float *x = (float *)malloc(n * 4), *acc = (float *)malloc(n * 4), *acc_gpu = (float *)malloc(n * 4);
    uint8_t *q = (uint8_t *)malloc(n), *q_gpu = (uint8_t *)malloc(n);
    float lut[256], lut_gpu[256];
    unsigned long long st = 12345;
    for (size_t j = 0; j < n; j++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(st >> 11) / 9007199254740992.0;
        x[j] = (float)(0.01 * (u - 0.5) * (1.0 + 20.0 * (j % 997 == 0))); /* some outliers */
        acc[j] = (float)(j % 7) * 0.001f;
    }
    float s = outer_quant_encode(x, n, q, lut);

    float *dx, *dacc, *dlut;
    uint8_t *dq;
    void *dsc;
    CK(cudaMalloc(&dx, n * 4));
    CK(cudaMalloc(&dacc, n * 4));
    CK(cudaMalloc(&dq, n));
    CK(cudaMalloc(&dlut, 256 * 4));
    CK(cudaMalloc(&dsc, outer_int8_scratch_bytes()));
    CK(cudaMemcpy(dx, x, n * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dacc, acc, n * 4, cudaMemcpyHostToDevice));
    CK((cudaError_t)outer_int8_encode_cuda(dx, n, dq, dlut, dsc, NULL));
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(q_gpu, dq, n, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(lut_gpu, dlut, 1024, cudaMemcpyDeviceToHost));
    size_t qdiff = 0;
    for (size_t j = 0; j < n; j++)
        qdiff += q[j] != q_gpu[j];
    double lmax = 0;
    for (int b = 0; b < 256; b++) {
        double e = fabs((double)lut[b] - lut_gpu[b]) - 1e-6 * fabs(lut[b]);
        if (e > lmax)
            lmax = e;
    }
    int ok = qdiff == 0 && lmax <= s / 1048576.0;
    printf("encode n=%zu s=%g bucket mismatches %zu, table max excess %g (allowed %g): %s\n", n, s,
           qdiff, lmax, s / 1048576.0, ok ? "ok" : "FAIL");

    /* decode-add with the GPU's table on both sides: exact */
    outer_quant_decode_add(q_gpu, lut_gpu, n, acc);
    CK((cudaError_t)outer_int8_decode_add_cuda(dq, dlut, n, dacc, NULL));
    CK(cudaMemcpy(acc_gpu, dacc, n * 4, cudaMemcpyDeviceToHost));
    int ok2 = memcmp(acc, acc_gpu, n * 4) == 0;
    printf("decode-add bit-identical: %s\n", ok2 ? "ok" : "FAIL");

    /* Nesterov: x = params, acc = momentum, use x as delta copy */
    float *mom = (float *)calloc(n, 4), *p = (float *)malloc(n * 4), *p_gpu = (float *)malloc(n * 4);
    for (size_t j = 0; j < n; j++)
        p[j] = 1.0f + x[j];
    float *dp, *dm;
    CK(cudaMalloc(&dp, n * 4));
    CK(cudaMalloc(&dm, n * 4));
    CK(cudaMemcpy(dp, p, n * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(dm, 0, n * 4));
    for (int it = 0; it < 3; it++) {
        outer_nesterov(p, mom, x, n, 0.7f, 0.9f);
        CK((cudaError_t)outer_nesterov_cuda(dp, dm, dx, n, 0.7f, 0.9f, NULL));
    }
    CK(cudaMemcpy(p_gpu, dp, n * 4, cudaMemcpyDeviceToHost));
    int ok3 = memcmp(p, p_gpu, n * 4) == 0;
    printf("nesterov bit-identical: %s\n", ok3 ? "ok" : "FAIL");

    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventRecord(e0));
    for (int it = 0; it < 20; it++)
        outer_int8_encode_cuda(dx, n, dq, dlut, dsc, NULL);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    printf("encode: %.3f ms per call, %.1f GB/s of input\n", ms / 20, n * 4.0 / (ms / 20 * 1e6));
    return ok && ok2 && ok3 ? 0 : 1;
}
