/*
 * cuda_dev.h: the device buffers and random inputs the CUDA op tests
 * (test_cuda_ops, test_cuda_memory, test_cuda_vocab) share.
 *
 * Each op test uploads CPU-made inputs, runs one kernel and downloads the
 * result to compare with the CPU twin (tests/cuda/cuda_check.h).  The
 * helpers here do the moving, on the one context cd_init binds, and make
 * the inputs from one xorshift stream, so a test's values depend only on
 * the seed it passes (each test keeps the seed it always had, so its
 * inputs did not change when these helpers moved here).
 *
 * Every function that allocates returns memory the caller frees (host:
 * free; device: zb_cuda_free).  Device buffers are allocated a few bytes
 * longer than asked so that a kernel reading one element past a ragged
 * end stays inside the allocation, as the tests always did.  A failure of
 * the CUDA runtime is not a comparison: CC_OK prints it and exits 1.
 */
#ifndef ZB_TESTS_CUDA_DEV_H
#define ZB_TESTS_CUDA_DEV_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda/zb_cuda.h"

/* Binds the context every later call uses and seeds the random stream. */
void cd_init(zb_cuda *ctx, uint64_t seed);

/* One uniform value in [-a, a] from the stream. */
float cd_urand(float a);

/* n uniform values in [-a, a] (malloc'd); cd_rand_bf16 rounds each to
 * bf16 first, so the CPU twin sees exactly what the GPU stores. */
float *cd_rand_bf16(size_t n, float a);
float *cd_rand_f32(size_t n, float a);

/* Rounds CPU results to bf16 in place, as the GPU stores them. */
void cd_round_bf16(float *x, size_t n);

/* Host to device: n floats stored as bf16; raw bytes; zeroed bytes. */
zb_bf16 *cd_up_bf16(const float *h, size_t n);
void *cd_up_raw(const void *h, size_t bytes);
void *cd_dev_zero(size_t bytes);

/* Device to host after a sync: raw bytes; n bf16 widened to float; n floats. */
void *cd_down(const void *d, size_t bytes);
float *cd_down_bf16(const zb_bf16 *d, size_t n);
float *cd_down_f32(const float *d, size_t n);

#endif
