/*
 * test_vocab_lifetimes.c: the CPU backend's vocabulary passes
 * (kernels/cpu/backend_cpu_vocab.c) keep a buffer only while some pass
 * still reads it.  A step of m micro-batches run one after another (S, T
 * and dx of each before the next's S, the order of a 1F1B lane whose
 * barriers never wait) must hold about one micro-batch's logits, head
 * input and partials, not m of each: the bytes malloc has out after the
 * step (glibc's mallinfo2, heap and mmap'd blocks) grow by less than two
 * micro-batches' worth.  A second check: the same passes in another
 * order (every S first, then every T, then every dx) give the same
 * losses, dX and head gradient, bit for bit, and their buffers come back.
 */
#include <check.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/backend_cpu.h"
#include "kernels/cpu/backend_cpu_impl.h"
#include "src/sched.h"

enum { P = 2, M = 12, B = 2, T = 64, D = 32, V = 4096 };

static uint64_t rs = 88172645463325252ULL;
static float frand(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (float)((rs >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* Bytes malloc has handed out now. */
static double in_use(void)
{
    struct mallinfo2 mi = mallinfo2();
    return (double)mi.uordblks + (double)mi.hblkhd;
}

/* One step's inputs and outputs. */
typedef struct fixture {
    zb_backend *be;
    zb_bvocab *bv;
    cpu_stage st;          /* a stand-in last stage: the head [D, V] at offset 0 */
    float *x;              /* [M][N, D] head inputs */
    int32_t *y;            /* [M][N] targets */
    float *dx;             /* [M][N, D] the passes' dX */
    float loss[M];         /* each micro-batch's mean loss */
} fixture;

static void setup(fixture *f, int variant)
{
    memset(f, 0, sizeof *f);
    rs = 88172645463325252ULL; /* every fixture the same data */
    zb_err err = { { 0 } };
    ck_assert_int_eq(backend_cpu_create(P, &f->be, &err), 0);
    size_t n = (size_t)D * V, N = (size_t)B * T;
    f->st.n = n;
    for (int k = 0; k < ZB_BUF_COUNT; k++)
        ck_assert_ptr_nonnull(f->st.buf[k] = calloc(n, sizeof(float)));
    for (size_t i = 0; i < n; i++)
        f->st.buf[ZB_BUF_PARAMS][i] = 0.2f * frand();
    f->x = malloc(sizeof(float) * M * N * D);
    f->dx = malloc(sizeof(float) * M * N * D);
    f->y = malloc(sizeof(int32_t) * M * N);
    ck_assert(f->x && f->dx && f->y);
    for (size_t i = 0; i < M * N * D; i++)
        f->x[i] = frand();
    for (size_t i = 0; i < M * N; i++)
        f->y[i] = (int32_t)((frand() + 1.0f) * 0.5f * (V - 1));
    zb_vocab_shape sh = { .variant = variant, .shards = P, .micro = M, .batch = B, .seq = T,
                          .d = D, .vocab = V, .local = -1 };
    ck_assert_int_eq(f->be->ops->vocab_new(f->be, &sh, &f->bv, &err), 0);
}

static void teardown(fixture *f)
{
    f->be->ops->vocab_free(f->be, f->bv);
    backend_free(f->be);
    for (int k = 0; k < ZB_BUF_COUNT; k++)
        free(f->st.buf[k]);
    free(f->x);
    free(f->dx);
    free(f->y);
}

/* One step: micro-batch by micro-batch (interleave 1), or every S, then
 * every T, then every dx (interleave 0). */
static void step(fixture *f, int interleave)
{
    zb_backend *be = f->be;
    zb_err err = { { 0 } };
    size_t N = (size_t)B * T;
    memset(f->st.buf[ZB_BUF_GRADS], 0, sizeof(float) * f->st.n);
    ck_assert_int_eq(be->ops->vocab_begin(be, f->bv, (zb_bstage *)&f->st, 0, f->y, &err), 0);
    for (int j = 0; j < M; j++) {
        ck_assert_int_eq(be->ops->vocab_put_x(be, f->bv, P - 1, j, f->x + j * N * D, &err), 0);
        for (int k = 0; k < P; k++)
            ck_assert_int_eq(be->ops->vocab_s(be, f->bv, k, j, &err), 0);
        if (!interleave)
            continue;
        for (int k = 0; k < P; k++)
            ck_assert_int_eq(be->ops->vocab_t(be, f->bv, k, j, &err), 0);
        ck_assert_int_eq(be->ops->vocab_dx(be, f->bv, P - 1, j, 1.0f / M, f->dx + j * N * D,
                                           &f->loss[j], &err), 0);
    }
    if (interleave)
        return;
    for (int j = 0; j < M; j++)
        for (int k = 0; k < P; k++)
            ck_assert_int_eq(be->ops->vocab_t(be, f->bv, k, j, &err), 0);
    for (int j = 0; j < M; j++)
        ck_assert_int_eq(be->ops->vocab_dx(be, f->bv, P - 1, j, 1.0f / M, f->dx + j * N * D,
                                           &f->loss[j], &err), 0);
}

static void check_variant(int variant)
{
    fixture a, b;
    setup(&a, variant);
    setup(&b, variant);
    double before = in_use();
    step(&a, 1);
    step(&a, 1); /* steps after the first allocate nothing new */
    double grew = in_use() - before;
    /* one micro-batch: each shard's logits [N, V/P], the head input and the
     * partials [N, D] each, a little statistics */
    double one = (double)B * T * (V + (P + 1) * D) * sizeof(float);
    ck_assert_msg(grew < 2 * one, "Vocab-%d: %.0f bytes held after a step of %d micro-batches "
                  "(one micro-batch is %.0f)", variant, grew, M, one);
    step(&b, 0);
    ck_assert_mem_eq(a.loss, b.loss, sizeof a.loss);
    ck_assert_mem_eq(a.dx, b.dx, sizeof(float) * M * B * T * D);
    ck_assert_mem_eq(a.st.buf[ZB_BUF_GRADS], b.st.buf[ZB_BUF_GRADS], sizeof(float) * D * V);
    step(&b, 0); /* begin takes every buffer back: no leak into the next step */
    teardown(&a);
    teardown(&b);
}

START_TEST(vocab1_frees_cells)
{
    check_variant(SCHED_VOCAB_1);
}
END_TEST

START_TEST(vocab2_frees_cells)
{
    check_variant(SCHED_VOCAB_2);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("vocab_lifetimes");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, vocab1_frees_cells);
    tcase_add_test(tc, vocab2_frees_cells);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_set_fork_status(r, CK_NOFORK);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
