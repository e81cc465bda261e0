/*
 * vmath.h: what the elementwise passes of the CPU kernels need to run at
 * the vector width of the processor they find, and stay deterministic.
 *
 * WHY.  The project builds for the x86-64 baseline (SSE2), where a loop of
 * expf calls runs one libm call per element: SwiGLU and the attention
 * softmax then cost as much as the matrix products around them (bench/
 * README.md, "issue 28").  Two things fix that:
 *
 *   KERN_VECTOR  on a hot function: GCC/clang compile it once per ISA level
 *                (x86-64-v4 = AVX-512, v3 = AVX2 + FMA, baseline) and the
 *                loader picks one for this processor at start-up (ifunc).
 *                The same processor always runs the same clone, so results
 *                are reproducible on a machine, as OpenBLAS's own kernel
 *                choice already makes them (docs/kernels.md).
 *   kern_expf    exp as plain arithmetic the compiler can vectorize: Cody-
 *                Waite reduction by ln 2, a degree-6 polynomial (Cephes
 *                expf, within 2 ulp on the range used here) and the
 *                exponent put in by integer arithmetic, no branch.
 *
 * DETERMINISM.  A vectorized loop runs its tail elements through scalar
 * code.  The project compiles as ISO C (c_std=c11), so GCC does not
 * contract a*b+c into an FMA (-ffp-contract=off), and every operation
 * here (+, *, /, sqrt, conversions, bit moves) is correctly rounded in
 * both forms: an element gets the same bits whether it falls in the
 * vector body or the tail, and so whichever thread or chunk computes it.
 * Reductions are never left to the compiler (it does not reorder float
 * sums without -ffast-math); the kernels sum in a fixed order.
 */
#ifndef ZB_KERNELS_VMATH_H
#define ZB_KERNELS_VMATH_H

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones) && !defined(__SANITIZE_ADDRESS__)
#define KERN_VECTOR __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
#endif
#ifndef KERN_VECTOR
#define KERN_VECTOR
#endif

/* exp(x) in float for x in about [-87, 88] (clamped outside: exp of a
 * number below -87.3 gives about 1e-38 rather than a denormal or 0, which
 * no caller here can tell from 0 next to the terms it is added to). */
static inline float kern_expf(float x)
{
    x = x < -87.3f ? -87.3f : x;
    x = x > 88.3f ? 88.3f : x;
    /* n = round(x / ln 2) by the 1.5·2^23 trick (round to nearest even) */
    float t = x * 1.44269504088896341f + 12582912.0f;
    float n = t - 12582912.0f;
    float r = x - n * 0.693359375f;   /* ln 2 split in two: exact high part */
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t e = (int32_t)n;
    int32_t bits;
    memcpy(&bits, &p, sizeof bits);
    bits += e * (1 << 23); /* p in [0.7, 1.5): the sum stays a normal float */
    memcpy(&p, &bits, sizeof p);
    return p;
}

#endif
