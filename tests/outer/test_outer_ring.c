/*
 * test_outer_ring.c: the int8 codebook quantizer (error within its bound,
 * bucket means preserve sums, clamping at the edge buckets, all-zero
 * chunks) and the simulated ring all-reduce (fp32 equals the mean, int8
 * within its bound of fp32, every replica bit-identical, bytes counted as
 * the formula says, determinism).
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/outer/outer_quant.h"
#include "runtime/outer/outer_ring.h"

/* Small deterministic generator (xorshift64*), uniform in [-1, 1). */
static uint64_t rng_state;
static void rng_seed(uint64_t s) { rng_state = s * 2685821657736338717ull + 1; }
static double rng_uniform(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t r = rng_state * 2685821657736338717ull;
    return (double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}
/* Roughly normal: sum of 4 uniforms, scaled to unit variance. */
static double rng_normalish(void)
{
    double s = 0;
    for (int i = 0; i < 4; i++)
        s += rng_uniform();
    return s * sqrt(3.0 / 4.0);
}

START_TEST(quant_error_within_bound)
{
    enum { N = 20000 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    uint8_t *q = malloc(N);
    float lut[256];
    rng_seed(7);
    for (int j = 0; j < N; j++)
        x[j] = (float)(0.01 * rng_normalish());
    x[5] = 1.0f;   /* outliers far beyond 3 sigma: clamped into edge buckets */
    x[6] = -2.0f;
    float s = outer_quant_encode(x, N, q, lut);
    ck_assert(s > 0);
    double ss = 0;
    for (int j = 0; j < N; j++)
        ss += (double)x[j] * x[j];
    ck_assert_float_eq_tol(s, (float)(6.0 * sqrt(ss / (N - 1)) / 256.0), 1e-9);
    outer_quant_decode(q, lut, N, y);

    double bmin[256], bmax[256], sse[256], bsum_err[256];
    long cnt[256] = { 0 };
    for (int b = 0; b < 256; b++) {
        bmin[b] = INFINITY; bmax[b] = -INFINITY; sse[b] = 0; bsum_err[b] = 0;
    }
    for (int j = 0; j < N; j++) {
        int b = q[j];
        /* bucket assignment is round(x/s) + 128, clamped */
        long want = lrint(x[j] / s) + 128;
        want = want < 0 ? 0 : want > 255 ? 255 : want;
        ck_assert_int_eq(b, want);
        double e = (double)y[j] - x[j];
        if (b > 0 && b < 255)
            ck_assert_msg(fabs(e) <= s * (1 + 1e-5), "interior error %g > s %g", fabs(e), s);
        cnt[b]++;
        sse[b] += e * e;
        bsum_err[b] += e;
        if (x[j] < bmin[b]) bmin[b] = x[j];
        if (x[j] > bmax[b]) bmax[b] = x[j];
    }
    ck_assert_int_eq(q[5], 255);
    ck_assert_int_eq(q[6], 0);
    ck_assert_float_eq_tol(y[5], 1.0f, 1e-6);  /* alone in its bucket: exact */
    ck_assert_float_eq_tol(y[6], -2.0f, 1e-6);
    for (int b = 0; b < 256; b++) {
        if (!cnt[b]) {
            ck_assert(lut[b] == 0.0f);
            continue;
        }
        double spread = bmax[b] - bmin[b];
        ck_assert(sse[b] <= cnt[b] * spread * spread / 4 * (1 + 1e-5) + 1e-18);
        /* the bucket mean makes the bucket's errors cancel */
        ck_assert_msg(fabs(bsum_err[b]) <= 1e-7 * cnt[b] + 1e-9, "bucket %d error sum %g", b, bsum_err[b]);
    }
    free(x);
    free(y);
    free(q);
}
END_TEST

/* The edges of the bucket range: a value exactly 128 widths above zero
 * rounds to bucket 256 and must be clamped into the top bucket 255, one
 * exactly 128 below lands in bucket 0.  The width depends on every value,
 * so the probes are solved for: with S0 the sum of squares of the others
 * and n values, v = 128 s = 3 sigma gives v^2 = 9 S0 / (n - 10) for one
 * probe, 9 S0 / (n - 19) for +v and -v together. */
START_TEST(quant_clamps_at_the_edge_buckets)
{
    enum { N = 4000 };
    float x[N], y[N], lut[256];
    uint8_t q[N];
    rng_seed(11);
    double s0 = 0;
    for (int j = 2; j < N; j++) {
        x[j] = (float)(0.001 * rng_uniform()); /* |x| < 0.001, well inside */
        s0 += (double)x[j] * x[j];
    }
    float v = (float)sqrt(9 * s0 / (N - 19));
    x[0] = v;
    x[1] = -v;
    float s = outer_quant_width(x, N);
    /* The construction's premise: both probes sit on the rounding edge. */
    ck_assert_int_eq(lrintf(x[0] / s), 128);
    ck_assert_int_eq(lrintf(x[1] / s), -128);
    ck_assert(outer_quant_encode(x, N, q, lut) == s);
    ck_assert_int_eq(q[0], 255);
    ck_assert_int_eq(q[1], 0);
    outer_quant_decode(q, lut, N, y);
    /* Nothing else reaches that far, so each probe is alone in its bucket. */
    ck_assert_float_eq_tol(y[0], v, 1e-7);
    ck_assert_float_eq_tol(y[1], -v, 1e-7);
}
END_TEST

START_TEST(quant_zero_and_tiny_chunks)
{
    float x[5] = { 0 }, y[5] = { 1, 1, 1, 1, 1 }, lut[256];
    uint8_t q[5];
    ck_assert(outer_quant_encode(x, 5, q, lut) == 0.0f);
    outer_quant_decode(q, lut, 5, y);
    for (int j = 0; j < 5; j++)
        ck_assert(y[j] == 0.0f);
    float one = -3.5f, back;
    outer_quant_encode(&one, 1, q, lut);
    outer_quant_decode(q, lut, 1, &back);
    ck_assert(back == -3.5f);
    ck_assert_uint_eq(outer_quant_wire_bytes(1000), 1000 + 1024);
}
END_TEST

/* K replicas of n floats, replica r's values seeded by r. */
static float **make_bufs(int k, size_t n, uint64_t seed)
{
    float **b = malloc((size_t)k * sizeof *b);
    rng_seed(seed);
    for (int r = 0; r < k; r++) {
        b[r] = malloc((n ? n : 1) * sizeof(float));
        for (size_t j = 0; j < n; j++)
            b[r][j] = (float)rng_uniform();
    }
    return b;
}

static void free_bufs(float **b, int k)
{
    for (int r = 0; r < k; r++)
        free(b[r]);
    free(b);
}

static void assert_identical(float **b, int k, size_t n)
{
    for (int r = 1; r < k; r++)
        ck_assert_msg(memcmp(b[0], b[r], n * sizeof(float)) == 0, "replica %d differs from replica 0", r);
}

START_TEST(fp32_ring_is_the_mean)
{
    const int ks[] = { 1, 2, 3, 4, 7 };
    const size_t ns[] = { 1, 5, 1000, 1003 };
    for (size_t ik = 0; ik < sizeof ks / sizeof ks[0]; ik++)
        for (size_t in = 0; in < sizeof ns / sizeof ns[0]; in++) {
            int k = ks[ik];
            size_t n = ns[in];
            float **b = make_bufs(k, n, 11 + k);
            double *want = calloc(n, sizeof *want);
            for (int r = 0; r < k; r++)
                for (size_t j = 0; j < n; j++)
                    want[j] += b[r][j];
            outer_ring_stats st = { 0 };
            zb_err err = { "" };
            ck_assert_msg(outer_allreduce(OUTER_WIRE_FP32, b, k, n, (float)k, &st, &err) == 0, "%s", err.msg);
            for (size_t j = 0; j < n; j++)
                ck_assert_double_eq_tol(b[0][j], want[j] / k, 1e-6);
            assert_identical(b, k, n);
            ck_assert_uint_eq(st.bytes_sent, outer_allreduce_bytes(OUTER_WIRE_FP32, k, n));
            /* every element crosses 2(K-1) links, 4 bytes each */
            ck_assert_uint_eq(st.bytes_sent, (uint64_t)2 * (k - 1) * 4 * n);
            ck_assert_uint_eq(st.reductions, 1);
            free(want);
            free_bufs(b, k);
        }
}
END_TEST

/* int8 against fp32 on the same inputs.  Bound per element: each of the
 * K-1 reduce-scatter hops re-quantizes a partial sum of j replicas (error
 * < s_j = 6 sigma_j / 256 when not clamped), then the owner quantizes the
 * mean once more.  sigma_j is measured here on the exact partial sums. */
START_TEST(int8_ring_within_bound_of_fp32)
{
    const int ks[] = { 2, 4, 8 };
    for (size_t ik = 0; ik < sizeof ks / sizeof ks[0]; ik++) {
        int k = ks[ik];
        size_t n = 40000;
        float **a = make_bufs(k, n, 99 + k), **b = make_bufs(k, n, 99 + k);
        double bound = 0, clamp_bound = 0;
        for (int j = 1; j < k; j++) {
            /* sigma of a sum of j independent U(-1,1): sqrt(j/3) */
            double sj = sqrt(j / 3.0), w = 6.0 * sj / 256.0;
            bound += w;
            /* a clamped value lies in [~2.99 sigma, j]: its edge bucket's
             * mean is at most that far away */
            clamp_bound += fmax(w, j - 2.98 * sj);
        }
        bound /= k;
        clamp_bound /= k;
        bound += 6.0 * sqrt(1.0 / (3.0 * k)) / 256.0;
        /* the owner's mean (range +-1) is quantized once more */
        clamp_bound += fmax(6.0 * sqrt(1.0 / (3.0 * k)) / 256.0, 1.0 - 2.98 * sqrt(1.0 / (3.0 * k)));
        bound *= 1.05; /* sigma measured on a finite sample */
        outer_ring_stats s32 = { 0 }, s8 = { 0 };
        zb_err err = { "" };
        ck_assert(outer_allreduce(OUTER_WIRE_FP32, a, k, n, (float)k, &s32, &err) == 0);
        ck_assert(outer_allreduce(OUTER_WIRE_INT8, b, k, n, (float)k, &s8, &err) == 0);
        assert_identical(b, k, n);
        size_t over = 0;
        double sum_err = 0, max_err = 0;
        for (size_t j = 0; j < n; j++) {
            double e = fabs((double)b[0][j] - a[0][j]);
            over += e > bound;
            sum_err += (double)b[0][j] - a[0][j];
            if (e > max_err)
                max_err = e;
        }
        /* partial sums beyond ~3 sigma are clamped and may exceed the
         * interior bound; they are rare (< 0.3% of a normal sample) */
        ck_assert_msg(over <= n / 200, "K=%d: %zu of %zu elements beyond bound %g (max %g)", k, over, n, bound, max_err);
        ck_assert_msg(max_err <= clamp_bound, "K=%d: max error %g > %g", k, max_err, clamp_bound);
        /* bucket means keep the average unbiased */
        ck_assert_msg(fabs(sum_err) / n < bound / 50, "K=%d: mean error %g", k, sum_err / n);
        ck_assert_uint_eq(s8.bytes_sent, outer_allreduce_bytes(OUTER_WIRE_INT8, k, n));
        ck_assert_uint_eq(s8.bytes_sent, (uint64_t)2 * (k - 1) * (n + 1024 * (uint64_t)k));
        /* 4x fewer bytes than fp32, less the 1 KiB table per chunk (K=8:
         * 5000-element chunks, 3.3x) */
        double ratio = (double)s32.bytes_sent / s8.bytes_sent;
        ck_assert_msg(ratio > 3.0 && ratio <= 4.0, "ratio %g", ratio);
        free_bufs(a, k);
        free_bufs(b, k);
    }
}
END_TEST

START_TEST(int8_ring_deterministic_and_small_n)
{
    for (size_t n = 0; n < 12; n++) {
        float **a = make_bufs(5, n, 3), **b = make_bufs(5, n, 3);
        zb_err err = { "" };
        ck_assert(outer_allreduce(OUTER_WIRE_INT8, a, 5, n, 5.0f, NULL, &err) == 0);
        ck_assert(outer_allreduce(OUTER_WIRE_INT8, b, 5, n, 5.0f, NULL, &err) == 0);
        assert_identical(a, 5, n);
        if (n)
            ck_assert(memcmp(a[0], b[0], n * sizeof(float)) == 0);
        free_bufs(a, 5);
        free_bufs(b, 5);
    }
}
END_TEST

START_TEST(allreduce_rejects_bad_arguments)
{
    float x[2] = { 1, 2 };
    float *b[1] = { x };
    zb_err err = { "" };
    ck_assert_int_eq(outer_allreduce(OUTER_WIRE_FP32, b, 0, 2, 1.0f, NULL, &err), -1);
    ck_assert(strstr(err.msg, "replicas") != NULL);
    ck_assert_int_eq(outer_allreduce(OUTER_WIRE_FP32, b, 1, 2, 0.0f, NULL, &err), -1);
    ck_assert_int_eq(outer_allreduce(OUTER_WIRE_INT8, b, 1, 2, 2.0f, NULL, &err), 0);
    ck_assert(x[0] == 0.5f && x[1] == 1.0f);
    ck_assert_int_eq(outer_wire_parse("int8"), OUTER_WIRE_INT8);
    ck_assert_int_eq(outer_wire_parse("fp16"), -1);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("outer_ring");
    TCase *tc = tcase_create("ring");
    tcase_add_test(tc, quant_error_within_bound);
    tcase_add_test(tc, quant_clamps_at_the_edge_buckets);
    tcase_add_test(tc, quant_zero_and_tiny_chunks);
    tcase_add_test(tc, fp32_ring_is_the_mean);
    tcase_add_test(tc, int8_ring_within_bound_of_fp32);
    tcase_add_test(tc, int8_ring_deterministic_and_small_n);
    tcase_add_test(tc, allreduce_rejects_bad_arguments);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
