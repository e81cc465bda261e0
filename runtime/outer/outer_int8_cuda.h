/*
 * outer_int8_cuda.h: C entry points of kernels/cuda/outer_int8.cu, the CUDA
 * twins of outer_quant.h (encode, decode, decode-and-add) plus the owner's
 * division and the Nesterov outer step.  Only linked when the project is
 * built with CUDA; nothing in the CPU build calls them.
 *
 * All pointers are device pointers; `stream` is a cudaStream_t (passed as
 * void * so that C callers need no CUDA header; NULL is the default
 * stream).  Each returns the cudaError_t of its launches (0 = success);
 * results are ready once the stream is synchronized.
 */
#ifndef ZB_OUTER_INT8_CUDA_H
#define ZB_OUTER_INT8_CUDA_H

#include <stddef.h>
#include <stdint.h>

/* Bytes of device scratch outer_int8_encode_cuda needs (a few KiB). */
size_t outer_int8_scratch_bytes(void);

/* q[0..n) and lut[0..256) from x[0..n), as outer_quant_encode (the table
 * within ~s*2^-21 of the CPU's, the buckets identical). */
int outer_int8_encode_cuda(const float *x, size_t n, uint8_t *q, float *lut, void *scratch, void *stream);

/* x[j] = lut[q[j]]. */
int outer_int8_decode_cuda(const uint8_t *q, const float *lut, size_t n, float *x, void *stream);

/* acc[j] += lut[q[j]]. */
int outer_int8_decode_add_cuda(const uint8_t *q, const float *lut, size_t n, float *acc, void *stream);

/* x[j] /= divisor. */
int outer_scale_cuda(float *x, size_t n, float divisor, void *stream);

/* outer_nesterov on the device, bit-identical to the CPU version. */
int outer_nesterov_cuda(float *x, float *mom, const float *d, size_t n, float lr, float mu, void *stream);

#endif
