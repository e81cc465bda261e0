/*
 * outer_quant.c: the 8-bit codebook quantizer (see outer_quant.h).
 *
 * Two passes over the chunk: one for the norm (double accumulation), one
 * that assigns buckets and accumulates each bucket's sum and count; the
 * table is then the 256 means.  Plain loops: the compiler vectorises the
 * decode; encode is bound by the bucket scatter, which is fine at the
 * chunk sizes of the tiny models trained here (the CUDA version is in
 * kernels/cuda/outer_int8.cu).
 */
#include "runtime/outer/outer_quant.h"

#include <math.h>
#include <string.h>

size_t outer_quant_wire_bytes(size_t n)
{
    return n + OUTER_QUANT_BINS * sizeof(float);
}

float outer_quant_width(const float *x, size_t n)
{
    if (n == 0)
        return 0.0f;
    double ss = 0.0;
    for (size_t j = 0; j < n; j++)
        ss += (double)x[j] * (double)x[j];
    /* n-1 as in prime; a chunk of one element uses n so sigma = |x|. */
    double dof = n > 1 ? (double)(n - 1) : 1.0;
    double sigma = sqrt(ss / dof);
    return (float)(OUTER_QUANT_RANGE_SIGMAS * sigma / OUTER_QUANT_BINS);
}

static inline uint8_t quant_bucket(float v, float s)
{
    float r = rintf(v / s) + (float)OUTER_QUANT_OFFSET;
    if (!(r >= 0.0f)) /* also catches NaN, which lands in bucket 0 */
        return 0;
    if (r > (float)(OUTER_QUANT_BINS - 1))
        return OUTER_QUANT_BINS - 1;
    return (uint8_t)r;
}

float outer_quant_encode(const float *x, size_t n, uint8_t *q, float *lut)
{
    float s = outer_quant_width(x, n);
    if (!(s > 0.0f) || !isfinite(s)) {
        /* All zeros (or empty): every element is exactly bucket 128 = 0. */
        memset(q, OUTER_QUANT_OFFSET, n);
        memset(lut, 0, OUTER_QUANT_BINS * sizeof(float));
        return 0.0f;
    }
    double sum[OUTER_QUANT_BINS] = { 0 };
    size_t count[OUTER_QUANT_BINS] = { 0 };
    for (size_t j = 0; j < n; j++) {
        uint8_t b = quant_bucket(x[j], s);
        q[j] = b;
        sum[b] += x[j];
        count[b]++;
    }
    for (int b = 0; b < OUTER_QUANT_BINS; b++)
        lut[b] = count[b] ? (float)(sum[b] / (double)count[b]) : 0.0f;
    return s;
}

void outer_quant_decode(const uint8_t *q, const float *lut, size_t n, float *x)
{
    for (size_t j = 0; j < n; j++)
        x[j] = lut[q[j]];
}

void outer_quant_decode_add(const uint8_t *q, const float *lut, size_t n, float *acc)
{
    for (size_t j = 0; j < n; j++)
        acc[j] += lut[q[j]];
}
