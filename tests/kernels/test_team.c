/*
 * test_team.c: per-device thread teams (kernels/cpu/team.h).
 *
 * The runtime promises bit-identical results at every --threads.  That
 * rests on kern_gemm cutting every product into the same fixed row blocks
 * (KERN_GEMM_BLOCK_ROWS) with or without a team, one BLAS call each.
 * These tests check it for every transpose combination and shapes of the
 * tiny and shakespeare-char models (plus ragged ones), with teams of 2 and
 * 3 against no team; then that kern_parallel covers its range exactly
 * once, runs inline without a team, and that scratch buffers are reused.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/team.h"

/* Uniform floats in [-1, 1) from a fixed LCG. */
static void fill(float *x, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
}

/* C = op(A)·op(B) + beta·C0 with and without a team of n; same bits. */
static void check_gemm(kern_team *team, int ta, int tb, int M, int N, int K, float beta)
{
    int lda = ta ? M : K, ldb = tb ? K : N;
    float *A = malloc(sizeof(float) * (size_t)M * K), *B = malloc(sizeof(float) * (size_t)K * N);
    float *C1 = malloc(sizeof(float) * (size_t)M * N), *C2 = malloc(sizeof(float) * (size_t)M * N);
    ck_assert(A && B && C1 && C2);
    fill(A, (size_t)M * K, 1u + (unsigned)M);
    fill(B, (size_t)K * N, 7u + (unsigned)N);
    fill(C1, (size_t)M * N, 3u);
    memcpy(C2, C1, sizeof(float) * (size_t)M * N);
    kern_team_bind(NULL);
    kern_gemm(ta, tb, M, N, K, 0.75f, A, lda, B, ldb, beta, C1, N);
    kern_team_bind(team);
    kern_gemm(ta, tb, M, N, K, 0.75f, A, lda, B, ldb, beta, C2, N);
    kern_team_bind(NULL);
    ck_assert_msg(memcmp(C1, C2, sizeof(float) * (size_t)M * N) == 0,
                  "team of %d: ta %d tb %d M %d N %d K %d differs", kern_team_size(team), ta, tb,
                  M, N, K);
    free(A);
    free(B);
    free(C1);
    free(C2);
}

START_TEST(gemm_split_is_bit_identical)
{
    kernels_init_threads(1);
    static const int shapes[][3] = {
        { 256, 64, 64 },    /* tiny: F of a projection (N = B·T rows) */
        { 64, 64, 256 },    /* tiny: W (in x out, K = tokens) */
        { 1024, 384, 384 }, /* shakespeare-char F (a quarter of the rows) */
        { 384, 1536, 256 }, /* shakespeare-char W of w1 (K cut to keep it quick) */
        { 256, 256, 64 },   /* attention scores of one head */
        { 1000, 65, 384 },  /* LM head, ragged */
        { 37, 129, 71 },    /* ragged, one block */
        { 600, 96, 200 },   /* three blocks, the last ragged */
    };
    for (int n = 2; n <= 3; n++) {
        kern_team *team;
        ck_assert_int_eq(kern_team_create(n, &team), 0);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int ta = 0; ta < 2; ta++)
                for (int tb = 0; tb < 2; tb++) {
                    check_gemm(team, ta, tb, shapes[s][0], shapes[s][1], shapes[s][2], 0.0f);
                    check_gemm(team, ta, tb, shapes[s][0], shapes[s][1], shapes[s][2], 1.0f);
                }
        kern_team_free(team);
    }
}
END_TEST

/* Counts how often each index is visited. */
static void visit(void *p, int lo, int hi)
{
    int *seen = p;
    for (int i = lo; i < hi; i++)
        __atomic_add_fetch(&seen[i], 1, __ATOMIC_RELAXED);
}

START_TEST(parallel_covers_range_once)
{
    kern_team *team;
    ck_assert_int_eq(kern_team_create(4, &team), 0);
    kern_team_bind(team);
    ck_assert_ptr_eq(kern_team_current(), team);
    static const int totals[] = { 0, 1, 3, 7, 8, 100, 1001 };
    for (int rep = 0; rep < 50; rep++)
        for (size_t k = 0; k < sizeof totals / sizeof totals[0]; k++) {
            int total = totals[k];
            int *seen = calloc((size_t)total + 1, sizeof *seen);
            kern_parallel(total, 2, visit, seen);
            for (int i = 0; i < total; i++)
                ck_assert_int_eq(seen[i], 1);
            free(seen);
        }
    kern_team_bind(NULL);
    kern_team_free(team);
    /* no team: inline */
    int seen[5] = { 0 };
    kern_parallel(5, 1, visit, seen);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(seen[i], 1);
    kern_team_free(NULL);
}
END_TEST

START_TEST(scratch_is_reused)
{
    void *a = kern_scratch(KERN_SCRATCH_ATTN, 1000);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_eq(kern_scratch(KERN_SCRATCH_ATTN, 10), a);
    ck_assert_ptr_eq(kern_scratch(KERN_SCRATCH_ATTN, 1000), a);
    void *b = kern_scratch(KERN_SCRATCH_W_TMP, 1000);
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_ne(a, b);
    void *c = kern_scratch(KERN_SCRATCH_ATTN, 1 << 20);
    ck_assert_ptr_nonnull(c);
    memset(c, 0, 1 << 20);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("team");
    TCase *tc = tcase_create("team");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, gemm_split_is_bit_identical);
    tcase_add_test(tc, parallel_covers_range_once);
    tcase_add_test(tc, scratch_is_reused);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
