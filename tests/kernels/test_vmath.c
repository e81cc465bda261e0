/*
 * test_vmath.c: the vectorized elementwise passes of the CPU kernels
 * (kernels/cpu/vmath.h) and what the determinism contract needs of them,
 * plus the lazily loaded BLAS and the GEMM's row blocks (kernels.h).
 *
 *   - kern_expf within 3 ulp of exp (in double) over the range the
 *     kernels use, and exact at 0;
 *   - an element's bits do not depend on where it falls in the array
 *     (vector body or scalar tail) or on how a team splits the pass: SwiGLU
 *     forward and backward, RMSNorm and AdamW on shifted copies of the same
 *     data, and with a team of 2 and 3 against none;
 *   - the causal block attention against a direct O(T²) evaluation in
 *     double, for a T that is not a multiple of the block (the ragged last
 *     block) and for GQA;
 *   - kern_gemm_block_rows cuts M evenly into blocks of at most 256 rows;
 *   - the BLAS library is not loaded until something needs it, and
 *     kernels_blas_describe names it afterwards; `zbsched gen` never loads
 *     it (the program does not link it).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/adamw.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/team.h"
#include "kernels/cpu/vmath.h"

/* Uniform floats in [lo, hi) from a fixed LCG. */
static void fill(float *x, size_t n, unsigned seed, float lo, float hi)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = lo + (hi - lo) * (float)((seed >> 8) & 0xffff) / 65536.0f;
    }
}

/* Distance in units in the last place of float between a and b. */
static double ulps(float a, double b)
{
    float bf = (float)b;
    float next = nextafterf(bf, INFINITY);
    double ulp = (double)next - (double)bf;
    return fabs((double)a - b) / ulp;
}

START_TEST(expf_is_accurate)
{
    /* this test must see no BLAS: nothing has multiplied a matrix yet */
    ck_assert_ptr_null(kernels_blas_describe());
    double worst = 0;
    for (int i = -870000; i <= 880000; i += 7) {
        float x = (float)i * 1e-4f;
        double u = ulps(kern_expf(x), exp((double)x));
        worst = u > worst ? u : worst;
    }
    ck_assert_msg(worst <= 3.0, "kern_expf is off by %.2f ulp", worst);
    ck_assert(kern_expf(0.0f) == 1.0f);
    ck_assert(kern_expf(-1000.0f) < 1e-37f && kern_expf(-1000.0f) >= 0.0f);
    ck_assert(isfinite(kern_expf(1000.0f)));
    ck_assert(isnan(kern_expf(NAN)));         /* NaNs stay NaNs (post-validation) */
    ck_assert(kern_expf(-INFINITY) < 1e-37f);
    ck_assert(isfinite(kern_expf(INFINITY)));
}
END_TEST

/* Runs the SwiGLU passes on n elements at offset `off` of a buffer. */
static void swiglu_at(int off, int n, const float *a, const float *b, const float *d,
                      float *hs, float *da, float *db)
{
    float *ab = calloc((size_t)(n + off), sizeof(float));
    float *bb = calloc((size_t)(n + off), sizeof(float));
    float *dd = calloc((size_t)(n + off), sizeof(float));
    float *h = calloc((size_t)(n + off), sizeof(float));
    float *x = calloc((size_t)(n + off), sizeof(float));
    float *y = calloc((size_t)(n + off), sizeof(float));
    ck_assert(ab && bb && dd && h && x && y);
    memcpy(ab + off, a, sizeof(float) * (size_t)n);
    memcpy(bb + off, b, sizeof(float) * (size_t)n);
    memcpy(dd + off, d, sizeof(float) * (size_t)n);
    kern_swiglu_forward(h + off, ab + off, bb + off, (size_t)n);
    kern_swiglu_backward(x + off, y + off, dd + off, ab + off, bb + off, (size_t)n);
    memcpy(hs, h + off, sizeof(float) * (size_t)n);
    memcpy(da, x + off, sizeof(float) * (size_t)n);
    memcpy(db, y + off, sizeof(float) * (size_t)n);
    free(ab);
    free(bb);
    free(dd);
    free(h);
    free(x);
    free(y);
}

START_TEST(elementwise_bits_do_not_depend_on_position)
{
    enum { N = 75 };
    float a[N], b[N], d[N], h0[N], x0[N], y0[N], h1[N], x1[N], y1[N];
    fill(a, N, 1, -12, 12);
    fill(b, N, 2, -2, 2);
    fill(d, N, 3, -1, 1);
    swiglu_at(0, N, a, b, d, h0, x0, y0);
    for (int off = 1; off < 17; off++) {
        /* shifted by off and cut short by off: other elements are in the
         * vector body and the tail */
        swiglu_at(off, N - off, a + off, b + off, d + off, h1, x1, y1);
        ck_assert_int_eq(memcmp(h0 + off, h1, sizeof(float) * (size_t)(N - off)), 0);
        ck_assert_int_eq(memcmp(x0 + off, x1, sizeof(float) * (size_t)(N - off)), 0);
        ck_assert_int_eq(memcmp(y0 + off, y1, sizeof(float) * (size_t)(N - off)), 0);
    }
    for (int i = 0; i < N; i++) {
        double s = 1.0 / (1.0 + exp(-(double)a[i]));
        ck_assert_msg(fabs(h0[i] - a[i] * s * b[i]) <= 1e-6 * (1 + fabs(a[i] * b[i])),
                      "swiglu %d", i);
    }
}
END_TEST

/* AdamW and RMSNorm with a team of n against none: same bits. */
START_TEST(team_split_is_bit_identical)
{
    enum { R = 37, D = 384 };
    size_t P = 200000; /* several AdamW chunks */
    float *p0 = malloc(sizeof(float) * P);
    float *g = malloc(sizeof(float) * P), *m0 = calloc(P, sizeof(float));
    float *m1 = calloc(P, sizeof(float)), *v0 = calloc(P, sizeof(float));
    float *v1 = calloc(P, sizeof(float));
    float x[R * D], gain[D], y0[R * D], y1[R * D], r0[R], r1[R];
    fill(p0, P, 4, -1, 1); /* the start values, made again for every team below */
    fill(g, P, 5, -1e-2f, 1e-2f);
    fill(x, R * D, 6, -3, 3);
    fill(gain, D, 7, 0.5f, 1.5f);
    kern_rmsnorm_forward(y0, r0, x, gain, R, D);
    adamw_update(p0, g, m0, v0, P, 3, 1e-3f, 0.9f, 0.99f, 1e-8f, 0.1f, 0.7f);
    for (int n = 2; n <= 3; n++) {
        kern_team *team;
        ck_assert_int_eq(kern_team_create(n, &team), 0);
        kern_team_bind(team);
        kern_rmsnorm_forward(y1, r1, x, gain, R, D);
        float *pp = malloc(sizeof(float) * P);
        fill(pp, P, 4, -1, 1);
        memset(m1, 0, sizeof(float) * P);
        memset(v1, 0, sizeof(float) * P);
        adamw_update(pp, g, m1, v1, P, 3, 1e-3f, 0.9f, 0.99f, 1e-8f, 0.1f, 0.7f);
        kern_team_bind(NULL);
        ck_assert_int_eq(memcmp(y0, y1, sizeof y0), 0);
        ck_assert_int_eq(memcmp(r0, r1, sizeof r0), 0);
        ck_assert_int_eq(memcmp(pp, p0, sizeof(float) * P), 0);
        ck_assert_int_eq(memcmp(m1, m0, sizeof(float) * P), 0);
        ck_assert_int_eq(memcmp(v1, v0, sizeof(float) * P), 0);
        free(pp);
        kern_team_free(team);
    }
    free(p0);
    free(g);
    free(m0);
    free(m1);
    free(v0);
    free(v1);
}
END_TEST

/* Causal attention of one sequence in double, straight from the formula. */
static void attention_ref(double *o, const float *q, const float *k, const float *v, int T,
                          int nh, int nkv, int hd)
{
    int qd = nh * hd, kvd = nkv * hd, rep = nh / nkv;
    double *s = malloc(sizeof(double) * (size_t)T);
    for (int h = 0; h < nh; h++)
        for (int i = 0; i < T; i++) {
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j <= i; j++) {
                double dot = 0;
                for (int c = 0; c < hd; c++)
                    dot += (double)q[i * qd + h * hd + c] * k[j * kvd + (h / rep) * hd + c];
                s[j] = dot / sqrt((double)hd);
                mx = s[j] > mx ? s[j] : mx;
            }
            for (int j = 0; j <= i; j++)
                sum += exp(s[j] - mx);
            for (int c = 0; c < hd; c++) {
                double acc = 0;
                for (int j = 0; j <= i; j++)
                    acc += exp(s[j] - mx) / sum * v[j * kvd + (h / rep) * hd + c];
                o[i * qd + h * hd + c] = acc;
            }
        }
    free(s);
}

START_TEST(block_attention_matches_the_formula)
{
    /* T = 150: blocks of 64, 64 and a ragged 22; 4 query heads on 2 KV heads */
    enum { T = 150, NH = 4, NKV = 2, HD = 16 };
    int qd = NH * HD, kvd = NKV * HD;
    float *q = malloc(sizeof(float) * T * qd), *k = malloc(sizeof(float) * T * kvd);
    float *v = malloc(sizeof(float) * T * kvd), *o = malloc(sizeof(float) * T * qd);
    float *lse = malloc(sizeof(float) * NH * T);
    double *ref = malloc(sizeof(double) * T * qd);
    fill(q, (size_t)T * qd, 8, -2, 2);
    fill(k, (size_t)T * kvd, 9, -2, 2);
    fill(v, (size_t)T * kvd, 10, -1, 1);
    ck_assert_int_eq(kern_attention_forward(o, lse, q, k, v, 1, T, NH, NKV, HD), 0);
    attention_ref(ref, q, k, v, T, NH, NKV, HD);
    double worst = 0;
    for (int i = 0; i < T * qd; i++)
        worst = fabs(o[i] - ref[i]) > worst ? fabs(o[i] - ref[i]) : worst;
    ck_assert_msg(worst < 2e-6, "attention off by %g", worst);
    free(q);
    free(k);
    free(v);
    free(o);
    free(lse);
    free(ref);
}
END_TEST

START_TEST(gemm_blocks_are_even)
{
    ck_assert_int_eq(kern_gemm_block_rows(384), 192);   /* d: two threads, two halves */
    ck_assert_int_eq(kern_gemm_block_rows(4096), 256);  /* B·T of shakespeare-char */
    ck_assert_int_eq(kern_gemm_block_rows(1536), 256);  /* d_ff */
    ck_assert_int_eq(kern_gemm_block_rows(600), 200);
    ck_assert_int_eq(kern_gemm_block_rows(257), 129);
    ck_assert_int_eq(kern_gemm_block_rows(100), 100);
    ck_assert_int_eq(kern_gemm_block_rows(1), 1);
    for (int M = 1; M <= 3000; M++) {
        int r = kern_gemm_block_rows(M), blocks = (M + 255) / 256;
        ck_assert(r <= KERN_GEMM_BLOCK_ROWS && (blocks - 1) * r < M && blocks * r >= M);
    }
}
END_TEST

START_TEST(blas_loads_on_first_use)
{
    /* the attention above multiplied matrices, so it loaded the BLAS; a
     * fresh process (CK_FORK) sees none before it asks */
    ck_assert_ptr_null(kernels_blas_describe());
    zb_err err = { "" };
    ck_assert_int_eq(kernels_blas_load(&err), 0);
    const char *d = kernels_blas_describe();
    ck_assert_ptr_nonnull(d);
    ck_assert_msg(strstr(d, "OpenBLAS") || strstr(d, "BLIS"), "describe: %s", d);
    ck_assert_int_eq(kernels_threads(), 1);
}
END_TEST

/* The program itself maps no BLAS: `zbsched gen` must not pay for it.
 * LD_DEBUG=libs makes the loader name every library it loads. */
START_TEST(program_does_not_load_blas)
{
    const char *exe = getenv("ZBSCHED");
    ck_assert_msg(exe && *exe, "ZBSCHED is not set (meson test sets it to the built program)");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "LD_DEBUG=libs '%s' gen 1f1b -p 2 -m 4 -o /dev/null 2>&1", exe);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    char line[4096];
    int loaded_libc = 0, loaded_blas = 0;
    while (fgets(line, sizeof line, f)) {
        loaded_libc |= strstr(line, "libc.so") != NULL;
        loaded_blas |= strstr(line, "openblas") != NULL || strstr(line, "libblis") != NULL;
    }
    ck_assert_int_eq(pclose(f), 0);
    ck_assert_msg(loaded_libc, "LD_DEBUG=libs printed nothing the test can read");
    ck_assert_msg(!loaded_blas, "zbsched gen loaded a BLAS library");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("vmath");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, expf_is_accurate);
    tcase_add_test(tc, elementwise_bits_do_not_depend_on_position);
    tcase_add_test(tc, team_split_is_bit_identical);
    tcase_add_test(tc, block_attention_matches_the_formula);
    tcase_add_test(tc, gemm_blocks_are_even);
    tcase_add_test(tc, blas_loads_on_first_use);
    tcase_add_test(tc, program_does_not_load_blas);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
