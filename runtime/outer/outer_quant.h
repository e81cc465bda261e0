/*
 * outer_quant.h: INTELLECT-1's 8-bit codebook quantizer for pseudo-gradients.
 *
 * One chunk of n floats becomes n uint8 bucket indices plus a 256-entry
 * fp32 table (the "lut") of bucket means.  The bucket width comes from the
 * chunk's spread:
 *
 *     sigma = ||x||_2 / sqrt(n-1)        (not mean-centred, as in prime)
 *     s     = 6 * sigma / 256            (256 buckets span about +-3 sigma)
 *     q[j]  = clamp(rint(x[j] / s) + 128, 0, 255)
 *     lut[b]= mean of the x[j] with q[j] == b   (0 for an empty bucket)
 *     decode: x_hat[j] = lut[q[j]]
 *
 * Why a table of means rather than b*s: the mean makes the error of every
 * bucket sum to zero, so the chunk's sum (and therefore an average of
 * pseudo-gradients) is preserved up to rounding, and outliers clamped into
 * the two edge buckets are represented by their own mean instead of +-3
 * sigma.  Error bound (tested): an element in an interior bucket (1..254)
 * is off by less than s, and the squared error of any bucket is at most
 * count * (max - min)^2 / 4 of that bucket's values.
 *
 * Sources: PrimeIntellect-ai/prime src/zeroband/C/csrc/compression.cpp (the
 * scheme; no code copied), arXiv 2412.01152.  Workload: called once per ring
 * message, chunks of 10^3..10^7 floats; sums are in double so the table is
 * deterministic and independent of chunk length.
 */
#ifndef ZB_OUTER_QUANT_H
#define ZB_OUTER_QUANT_H

#include <stddef.h>
#include <stdint.h>

#define OUTER_QUANT_BINS 256
#define OUTER_QUANT_OFFSET 128
#define OUTER_QUANT_RANGE_SIGMAS 6.0

/* Bytes one quantized chunk of n floats occupies on the wire: the indices
 * plus the 256-float table (the width s is not sent: decoding needs only
 * the table). */
size_t outer_quant_wire_bytes(size_t n);

/* The bucket width s of x[0..n) (0 when x is all zeros or n == 0). */
float outer_quant_width(const float *x, size_t n);

/* Quantizes x[0..n) into q[0..n) and lut[0..256).  Returns the bucket width
 * s used.  x must be finite (asserted in debug builds by the caller's
 * checks, not here: the outer optimizer rejects non-finite pseudo-gradients
 * before they reach the wire).  q and lut are caller-owned. */
float outer_quant_encode(const float *x, size_t n, uint8_t *q, float *lut);

/* x[j] = lut[q[j]] for j < n. */
void outer_quant_decode(const uint8_t *q, const float *lut, size_t n, float *x);

/* acc[j] += lut[q[j]] for j < n: what a ring receiver does with a partial
 * sum, accumulating in fp32. */
void outer_quant_decode_add(const uint8_t *q, const float *lut, size_t n, float *acc);

#endif
