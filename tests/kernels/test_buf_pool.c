/*
 * test_buf_pool.c: the saved-state buffer pool (kernels/cpu/buf_pool.h)
 * and its use by a stage's saved states (llama.h).
 *
 *   - a buffer put back is handed out again for the same size, last in
 *     first out, and never for another size;
 *   - the idle-byte and malloc counters follow;
 *   - a stage's second F/B/W cycle takes every buffer from the pool (no
 *     malloc), and gives the same loss and gradients, bit for bit, as the
 *     first cycle on a fresh stage: reused buffers carry stale values that
 *     the kernels must overwrite before they read them;
 *   - two saved states in flight at once get distinct buffers;
 *   - threads sharing one pool never hold the same buffer at once.
 * Leaks (buffers still idle at buf_pool_free) are for the ASan run to find.
 */
#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/buf_pool.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/llama.h"
#include "tests/kernels/kt_common.h"

START_TEST(reuse_by_size_lifo)
{
    buf_pool *p = buf_pool_new();
    ck_assert_ptr_nonnull(p);
    void *a = buf_pool_get(p, 100), *b = buf_pool_get(p, 100), *c = buf_pool_get(p, 64);
    ck_assert(a && b && c && a != b);
    ck_assert_int_eq(buf_pool_mallocs(p), 3);
    buf_pool_put(p, a, 100);
    buf_pool_put(p, b, 100);
    buf_pool_put(p, c, 64);
    ck_assert_uint_eq(buf_pool_idle_bytes(p), 264);
    ck_assert_ptr_eq(buf_pool_get(p, 100), b); /* last in, first out */
    ck_assert_ptr_eq(buf_pool_get(p, 100), a);
    void *d = buf_pool_get(p, 100);            /* none idle: a new one */
    ck_assert(d && d != a && d != b && d != c);
    ck_assert_int_eq(buf_pool_mallocs(p), 4);
    void *e = buf_pool_get(p, 200);            /* another size never gets c */
    ck_assert(e && e != c);
    ck_assert_ptr_eq(buf_pool_get(p, 64), c);
    ck_assert_uint_eq(buf_pool_idle_bytes(p), 0);
    buf_pool_put(p, NULL, 8); /* allowed, a no-op */
    buf_pool_put(p, a, 100);
    buf_pool_put(p, b, 100);
    buf_pool_put(p, c, 64);
    buf_pool_put(p, d, 100);
    buf_pool_put(p, e, 200);
    buf_pool_free(p); /* frees the idle buffers */
    buf_pool_free(NULL);
}
END_TEST

START_TEST(many_sizes_fall_back_to_malloc)
{
    buf_pool *p = buf_pool_new();
    ck_assert_ptr_nonnull(p);
    enum { N = 100 };
    void *b[N];
    for (int i = 0; i < N; i++) /* more sizes than classes: the rest are freed */
        ck_assert_ptr_nonnull(b[i] = buf_pool_get(p, (size_t)(16 + i)));
    for (int i = 0; i < N; i++)
        buf_pool_put(p, b[i], (size_t)(16 + i));
    ck_assert_uint_gt(buf_pool_idle_bytes(p), 0);
    buf_pool_free(p);
}
END_TEST

/* One F, B, W of micro-batch `mb` on the whole model as one stage. */
static void cycle(const llama_stage *st, const float *params, llama_saved *sv, int mb,
                  float *grads, float *loss)
{
    zb_err err = { { 0 } };
    int N = 2 * st->cfg.seq_len;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)N), *tgt = malloc(sizeof(int32_t) * (size_t)N);
    ck_assert(tok && tgt);
    for (int n = 0; n < N; n++) {
        tok[n] = (int32_t)((n * 7 + mb * 13 + 3) % st->cfg.vocab);
        tgt[n] = (int32_t)((n * 5 + mb * 11 + 1) % st->cfg.vocab);
    }
    ck_assert_int_eq(llama_stage_forward(st, params, tok, NULL, tgt, sv, NULL, loss, NULL, &err), 0);
    ck_assert_int_eq(llama_stage_backward_b(st, params, sv, 1.0f, NULL, NULL, &err), 0);
    ck_assert_int_eq(llama_stage_backward_w(st, sv, grads, &err), 0);
    ck_assert_uint_eq(llama_saved_bytes(sv), 0);
    free(tok);
    free(tgt);
}

START_TEST(stage_reuses_saved_buffers_bit_identically)
{
    kernels_init_threads(1);
    zb_model m = kt_model(2, 32, 4, 2, 64, 23, 8);
    zb_err err = { { 0 } };
    llama_stage st, fresh;
    ck_assert_int_eq(llama_stage_init(&st, &m, 0, 2, 1, 1, &err), 0);
    ck_assert_int_eq(llama_stage_init(&fresh, &m, 0, 2, 1, 1, &err), 0);
    ck_assert_ptr_nonnull(st.pool);
    size_t np = llama_stage_num_params(&st);
    float *params = malloc(sizeof(float) * np);
    float *g1 = calloc(np, sizeof(float)), *g2 = calloc(np, sizeof(float));
    ck_assert(params && g1 && g2);
    llama_stage_init_params(&st, params, 99);

    /* two states in flight: distinct buffers, then all back in the pool */
    llama_saved *a = llama_saved_new(&st, 2), *b = llama_saved_new(&st, 2);
    ck_assert(a && b);
    float l0, l1, l2;
    cycle(&st, params, a, 0, g1, &l0);
    long after_first = buf_pool_mallocs(st.pool);
    ck_assert_int_gt(after_first, 0);
    size_t idle = buf_pool_idle_bytes(st.pool);
    ck_assert_uint_gt(idle, 0);
    /* micro-batch 1 on the other state: every buffer comes from the pool,
     * holding micro-batch 0's values */
    memset(g1, 0, sizeof(float) * np);
    cycle(&st, params, b, 1, g1, &l1);
    ck_assert_int_eq(buf_pool_mallocs(st.pool), after_first);
    ck_assert_uint_eq(buf_pool_idle_bytes(st.pool), idle);

    /* the same micro-batch on a fresh stage (fresh buffers): same bits */
    llama_saved *c = llama_saved_new(&fresh, 2);
    ck_assert_ptr_nonnull(c);
    cycle(&fresh, params, c, 1, g2, &l2);
    ck_assert_msg(memcmp(&l1, &l2, sizeof l1) == 0, "loss %.9g against %.9g", l1, l2);
    ck_assert_msg(memcmp(g1, g2, sizeof(float) * np) == 0, "gradients differ after reuse");

    llama_saved_free(a);
    llama_saved_free(b);
    llama_saved_free(c);
    llama_stage_free(&st);
    llama_stage_free(&fresh);
    ck_assert_ptr_null(st.pool);
    free(params);
    free(g1);
    free(g2);
}
END_TEST

/* One of the threads of concurrent_threads_never_share_a_buffer. */
typedef struct hammer {
    buf_pool *p;  /* the shared pool */
    uint32_t tag; /* this thread's mark */
    int bad;      /* buffers found holding another thread's mark */
} hammer;

static void *hammer_main(void *arg)
{
    hammer *h = arg;
    enum { ROUNDS = 20000, HELD = 4 };
    uint32_t *held[HELD];
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < HELD; i++) {
            size_t words = (size_t)(16 << (i % 2)); /* two sizes */
            held[i] = buf_pool_get(h->p, words * sizeof(uint32_t));
            ck_assert_ptr_nonnull(held[i]);
            for (size_t k = 0; k < words; k++)
                held[i][k] = h->tag;
        }
        for (int i = 0; i < HELD; i++) {
            size_t words = (size_t)(16 << (i % 2));
            for (size_t k = 0; k < words; k++)
                h->bad += held[i][k] != h->tag;
            buf_pool_put(h->p, held[i], words * sizeof(uint32_t));
        }
    }
    return NULL;
}

START_TEST(concurrent_threads_never_share_a_buffer)
{
    buf_pool *p = buf_pool_new();
    ck_assert_ptr_nonnull(p);
    hammer h[3] = { { p, 0x11111111u, 0 }, { p, 0x22222222u, 0 }, { p, 0x33333333u, 0 } };
    pthread_t tid[3];
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(pthread_create(&tid[i], NULL, hammer_main, &h[i]), 0);
    for (int i = 0; i < 3; i++)
        pthread_join(tid[i], NULL);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(h[i].bad, 0);
    ck_assert_int_le(buf_pool_mallocs(p), 3 * 4); /* at most what was out at once */
    buf_pool_free(p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("buf_pool");
    TCase *tc = tcase_create("pool");
    tcase_add_test(tc, reuse_by_size_lifo);
    tcase_add_test(tc, many_sizes_fall_back_to_malloc);
    tcase_add_test(tc, stage_reuses_saved_buffers_bit_identically);
    tcase_add_test(tc, concurrent_threads_never_share_a_buffer);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
