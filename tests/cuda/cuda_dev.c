/*
 * cuda_dev.c: device buffers and random inputs for the CUDA op tests
 * (contracts in cuda_dev.h).  One context and one random stream per test
 * binary: the tests are single-threaded and run one op at a time.
 */
#include "tests/cuda/cuda_dev.h"

#include <stdlib.h>

#include "tests/cuda/cuda_check.h"

static zb_cuda *cd_ctx;      /* the context cd_init bound; borrowed */
static uint64_t cd_rng = 1;  /* xorshift64* state; never 0 */

void cd_init(zb_cuda *ctx, uint64_t seed)
{
    cd_ctx = ctx;
    cd_rng = seed ? seed : 1;
}

float cd_urand(float a)
{
    cd_rng ^= cd_rng >> 12;
    cd_rng ^= cd_rng << 25;
    cd_rng ^= cd_rng >> 27;
    uint64_t r = cd_rng * 0x2545F4914F6CDD1Dull;
    return a * (2.0f * (float)(r >> 40) / 16777216.0f - 1.0f);
}

static float *host_floats(size_t n)
{
    float *h = malloc(n * sizeof *h + 4);
    if (!h) {
        printf("out of host memory\n");
        exit(1);
    }
    return h;
}

float *cd_rand_bf16(size_t n, float a)
{
    float *h = host_floats(n);
    for (size_t i = 0; i < n; i++)
        h[i] = zb_bf16_to_f32(zb_bf16_from_f32(cd_urand(a)));
    return h;
}

float *cd_rand_f32(size_t n, float a)
{
    float *h = host_floats(n);
    for (size_t i = 0; i < n; i++)
        h[i] = cd_urand(a);
    return h;
}

void cd_round_bf16(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = zb_bf16_to_f32(zb_bf16_from_f32(x[i]));
}

zb_bf16 *cd_up_bf16(const float *h, size_t n)
{
    zb_bf16 *tmp = malloc(n * sizeof *tmp + 2), *d = NULL;
    if (!tmp) {
        printf("out of host memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++)
        tmp[i] = zb_bf16_from_f32(h[i]);
    CC_OK(zb_cuda_alloc((void **)&d, n * 2 + 2, err));
    CC_OK(zb_cuda_upload(cd_ctx, d, tmp, n * 2, err));
    CC_OK(zb_cuda_sync(cd_ctx, err));
    free(tmp);
    return d;
}

void *cd_up_raw(const void *h, size_t bytes)
{
    void *d = NULL;
    CC_OK(zb_cuda_alloc(&d, bytes + 4, err));
    CC_OK(zb_cuda_upload(cd_ctx, d, h, bytes, err));
    CC_OK(zb_cuda_sync(cd_ctx, err));
    return d;
}

void *cd_dev_zero(size_t bytes)
{
    void *d = NULL;
    CC_OK(zb_cuda_alloc(&d, bytes + 4, err));
    CC_OK(zb_cuda_zero(cd_ctx, d, bytes + 4, err));
    return d;
}

void *cd_down(const void *d, size_t bytes)
{
    void *h = malloc(bytes + 4);
    if (!h) {
        printf("out of host memory\n");
        exit(1);
    }
    CC_OK(zb_cuda_sync(cd_ctx, err));
    CC_OK(zb_cuda_download(cd_ctx, h, d, bytes, err));
    return h;
}

float *cd_down_bf16(const zb_bf16 *d, size_t n)
{
    zb_bf16 *tmp = cd_down(d, n * 2);
    float *h = host_floats(n);
    for (size_t i = 0; i < n; i++)
        h[i] = zb_bf16_to_f32(tmp[i]);
    free(tmp);
    return h;
}

float *cd_down_f32(const float *d, size_t n)
{
    return cd_down(d, n * 4);
}
