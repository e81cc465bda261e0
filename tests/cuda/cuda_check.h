/*
 * cuda_check.h: the little harness the CUDA tests share, in the style of
 * ggml's test-backend-ops: each case runs a CUDA op and its CPU twin on the
 * same fresh random inputs (rounded to bf16 first, so both sides see the
 * same values) and compares with the normalised mean squared error
 *
 *   NMSE = Σ (gpu - cpu)² / Σ cpu²
 *
 * against a per-op bound sized for bf16 (one bf16 rounding of the output
 * alone gives about 1e-6..1e-5).  Plain C, no Check: Check forks per test
 * and a CUDA context does not survive fork.  A run prints one line per
 * case and "N passed, N failed"; with no CUDA device it prints "no CUDA
 * device: skipped" and exits 77, which meson reports as SKIP.
 */
#ifndef ZB_TESTS_CUDA_CHECK_H
#define ZB_TESTS_CUDA_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda/zb_cuda.h"

static int cc_passed, cc_failed;

#define CC_UNUSED __attribute__((unused))

/* Records one comparison; returns 1 when it passed. */
CC_UNUSED static int cc_expect(const char *name, double nmse, double bound)
{
    int ok = isfinite(nmse) && nmse <= bound;
    printf("%-44s NMSE %.3e (bound %.0e) %s\n", name, nmse, bound, ok ? "ok" : "FAIL");
    if (ok)
        cc_passed++;
    else
        cc_failed++;
    return ok;
}

/* Records a boolean check. */
CC_UNUSED static void cc_true(const char *name, int cond)
{
    printf("%-44s %s\n", name, cond ? "ok" : "FAIL");
    if (cond)
        cc_passed++;
    else
        cc_failed++;
}

CC_UNUSED static double cc_nmse(const float *got, const float *want, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - want[i];
        num += d * d;
        den += (double)want[i] * want[i];
    }
    return den > 0 ? num / den : (num > 0 ? INFINITY : 0.0);
}

/* Exits 77 (SKIP) when there is no device. */
CC_UNUSED static void cc_require_device(void)
{
    if (zb_cuda_device_count() == 0) {
        printf("no CUDA device: skipped\n");
        exit(77);
    }
}

CC_UNUSED static int cc_summary(void)
{
    printf("%d passed, %d failed\n", cc_passed, cc_failed);
    return cc_failed ? 1 : 0;
}

/* Aborts the test binary on an infrastructure failure (not a comparison). */
#define CC_OK(call)                                                              \
    do {                                                                         \
        zb_err cc_e_ = { { 0 } };                                                \
        zb_err *err = &cc_e_;                                                    \
        if ((call) != 0) {                                                       \
            printf("%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, cc_e_.msg); \
            exit(1);                                                             \
        }                                                                        \
    } while (0)

#endif
