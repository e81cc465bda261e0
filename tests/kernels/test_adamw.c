/*
 * test_adamw.c: AdamW against hand-computed values, decay mask, clipping,
 * the split-independent sum of squares, the lr schedule, and a short
 * training run (kernels + optimizer end to end) that must learn a pattern.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/adamw.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/llama.h"
#include "tests/kernels/kt_common.h"

START_TEST(test_update_by_hand)
{
    /* lr 0.1, β 0.9/0.99, wd 0.1, grad_scale 0.5.  With a constant gradient
     * the bias-corrected m̂ = g and v̂ = g², so each step moves by
     * lr·(sign(g) + wd·p) (up to eps):
     *   step 1: p0 = 1 - 0.1·(1 + 0.1)      = 0.89
     *           p1 = -2 - 0.1·(-1 - 0.2)    = -1.88
     *           p2 = 0.5 - 0.1·(1 + 0.05)   = 0.395
     *   step 2: p0 = 0.89 - 0.1·(1 + 0.089) = 0.7811
     * and m = 0.1·g', v = 0.01·g'² after step 1, g' = 0.5·g. */
    float p[3] = {1.0f, -2.0f, 0.5f}, g[3] = {0.1f, -0.2f, 0.3f};
    float m[3] = {0}, v[3] = {0};
    adamw_update(p, g, m, v, 3, 1, 0.1f, 0.9f, 0.99f, 1e-8f, 0.1f, 0.5f);
    ck_assert_float_eq_tol(p[0], 0.89f, 1e-6f);
    ck_assert_float_eq_tol(p[1], -1.88f, 1e-6f);
    ck_assert_float_eq_tol(p[2], 0.395f, 1e-6f);
    ck_assert_float_eq_tol(m[1], -0.01f, 1e-8f);
    ck_assert_float_eq_tol(v[2], 0.01f * 0.15f * 0.15f, 1e-9f);
    adamw_update(p, g, m, v, 3, 2, 0.1f, 0.9f, 0.99f, 1e-8f, 0.1f, 0.5f);
    ck_assert_float_eq_tol(p[0], 0.7811f, 1e-6f);
    /* no decay: p moves by lr·sign only */
    float q[1] = {3.0f}, gq[1] = {-1.0f}, mq[1] = {0}, vq[1] = {0};
    adamw_update(q, gq, mq, vq, 1, 1, 0.01f, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f);
    ck_assert_float_eq_tol(q[0], 3.01f, 1e-6f);
}
END_TEST

START_TEST(test_decay_mask)
{
    zb_model mdl = kt_model(1, 8, 2, 2, 16, 5, 4);
    zb_err err = {{0}};
    llama_stage st;
    ck_assert_int_eq(llama_stage_init(&st, &mdl, 0, 1, 1, 1, &err), 0);
    size_t n = st.n_params;
    float *p = malloc(sizeof(float) * n), *p0 = malloc(sizeof(float) * n);
    float *g = calloc(n, sizeof(float)), *m = calloc(n, sizeof(float));
    float *v = calloc(n, sizeof(float));
    llama_stage_init_params(&st, p, 9);
    memcpy(p0, p, sizeof(float) * n);
    adamw_config c;
    adamw_config_default(&c);
    /* zero gradients: only the decoupled decay acts, p *= 1 - lr·wd */
    adamw_step_stage(&st, &c, p, g, m, v, 1, 0.5f, 1.0f);
    for (int t = 0; t < st.n_tensors; t++) {
        const llama_tensor *ten = &st.tensors[t];
        int is_norm = ten->kind == LLAMA_T_ATTN_NORM || ten->kind == LLAMA_T_MLP_NORM ||
                      ten->kind == LLAMA_T_FINAL_NORM;
        ck_assert_int_eq(ten->decay, !is_norm);
        for (size_t i = 0; i < ten->count; i += 7) {
            float want = ten->decay ? p0[ten->offset + i] * (1.0f - 0.5f * 0.1f)
                                    : p0[ten->offset + i];
            ck_assert_float_eq_tol(p[ten->offset + i], want, 1e-7f);
        }
    }
    free(p);
    free(p0);
    free(g);
    free(m);
    free(v);
    llama_stage_free(&st);
}
END_TEST

START_TEST(test_clipping)
{
    float g[2] = {3.0f, 4.0f};
    double ss = adamw_sum_squares(g, 2);
    ck_assert(ss == 25.0);
    ck_assert_float_eq_tol(adamw_clip_scale(ss, 1.0f), 0.2f, 1e-6f);
    ck_assert_float_eq(adamw_clip_scale(ss, 10.0f), 1.0f);
    ck_assert_float_eq(adamw_clip_scale(ss, 0.0f), 1.0f);
    ck_assert_float_eq(adamw_clip_scale(0.0, 1.0f), 1.0f);
    /* clipping through grad_scale: an update with g·0.2 equals the update
     * with the pre-scaled gradient */
    float p1[2] = {1, 1}, p2[2] = {1, 1}, m1[2] = {0}, v1[2] = {0}, m2[2] = {0}, v2[2] = {0};
    float gs[2] = {3.0f * 0.2f, 4.0f * 0.2f};
    adamw_update(p1, g, m1, v1, 2, 1, 0.1f, 0.9f, 0.95f, 1e-8f, 0, 0.2f);
    adamw_update(p2, gs, m2, v2, 2, 1, 0.1f, 0.9f, 0.95f, 1e-8f, 0, 1.0f);
    ck_assert(memcmp(m1, m2, sizeof m1) == 0 && memcmp(p1, p2, sizeof p1) == 0);
}
END_TEST

START_TEST(test_sum_squares_split_independent)
{
    zb_model mdl = kt_model(3, 8, 2, 1, 16, 5, 4);
    zb_err err = {{0}};
    llama_stage whole, a, b;
    ck_assert_int_eq(llama_stage_init(&whole, &mdl, 0, 3, 1, 1, &err), 0);
    ck_assert_int_eq(llama_stage_init(&a, &mdl, 0, 1, 1, 0, &err), 0);
    ck_assert_int_eq(llama_stage_init(&b, &mdl, 1, 3, 0, 1, &err), 0);
    float *gw = malloc(sizeof(float) * whole.n_params);
    llama_stage_init_params(&whole, gw, 3); /* any numbers will do */
    double *tw = malloc(sizeof(double) * whole.n_tensors);
    double *ts = malloc(sizeof(double) * whole.n_tensors);
    double total_w = adamw_tensor_sum_squares(&whole, gw, tw);
    adamw_tensor_sum_squares(&a, gw, ts);
    adamw_tensor_sum_squares(&b, gw + a.n_params, ts + a.n_tensors);
    ck_assert_int_eq(a.n_tensors + b.n_tensors, whole.n_tensors);
    ck_assert(memcmp(tw, ts, sizeof(double) * whole.n_tensors) == 0);
    double total_s = 0;
    for (int t = 0; t < whole.n_tensors; t++)
        total_s += ts[t];
    ck_assert(total_s == total_w);
    ck_assert(fabs(total_w - adamw_sum_squares(gw, whole.n_params)) < 1e-9 * total_w);
    free(gw);
    free(tw);
    free(ts);
    llama_stage_free(&whole);
    llama_stage_free(&a);
    llama_stage_free(&b);
}
END_TEST

START_TEST(test_lr_schedule)
{
    adamw_config c;
    adamw_config_default(&c);
    c.lr = 1.0f;
    c.min_lr = 0.1f;
    c.warmup_steps = 10;
    c.decay_steps = 110;
    ck_assert_float_eq_tol(adamw_lr(&c, 0), 0.1f, 1e-7f);
    ck_assert_float_eq_tol(adamw_lr(&c, 4), 0.5f, 1e-7f);
    ck_assert_float_eq_tol(adamw_lr(&c, 9), 1.0f, 1e-7f);
    ck_assert_float_eq_tol(adamw_lr(&c, 10), 1.0f, 1e-7f);
    ck_assert_float_eq_tol(adamw_lr(&c, 60), 0.55f, 1e-6f);
    ck_assert_float_eq_tol(adamw_lr(&c, 110), 0.1f, 1e-7f);
    ck_assert_float_eq_tol(adamw_lr(&c, 1000), 0.1f, 1e-7f);
    for (int s = 10; s < 110; s++)
        ck_assert(adamw_lr(&c, s + 1) <= adamw_lr(&c, s));
}
END_TEST

START_TEST(test_training_learns)
{
    /* next token = (token + 3) mod V: learnable from the current token
     * alone.  40 full-batch AdamW steps must take the loss from about
     * ln V = 2.4 to below 0.1 (measured: 0.018). */
    zb_model mdl = kt_model(2, 32, 4, 2, 64, 11, 16);
    zb_err err = {{0}};
    llama_stage st;
    ck_assert_int_eq(llama_stage_init(&st, &mdl, 0, 2, 1, 1, &err), 0);
    size_t n = st.n_params;
    float *p = malloc(sizeof(float) * n), *g = malloc(sizeof(float) * n);
    float *m = calloc(n, sizeof(float)), *v = calloc(n, sizeof(float));
    llama_stage_init_params(&st, p, 11);
    int B = 4, N = B * mdl.seq_len;
    int32_t *tok = malloc(sizeof(int32_t) * N), *tgt = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++) {
        tok[i] = (int32_t)((i * 7 + i / 5) % mdl.vocab);
        tgt[i] = (tok[i] + 3) % mdl.vocab;
    }
    adamw_config c;
    adamw_config_default(&c);
    c.lr = 1e-2f;
    c.warmup_steps = 5;
    c.decay_steps = 40;
    llama_saved *sv = llama_saved_new(&st, B);
    float first = 0, loss = 0;
    for (int step = 0; step < 40; step++) {
        llama_grads_zero(&st, g);
        ck_assert_int_eq(llama_stage_forward(&st, p, tok, NULL, tgt, sv, NULL, &loss,
                                             NULL, &err), 0);
        ck_assert_int_eq(llama_stage_backward(&st, p, sv, 1.0f, NULL, NULL, g, &err), 0);
        if (step == 0)
            first = loss;
        float scale = adamw_clip_scale(adamw_sum_squares(g, n), c.grad_clip);
        adamw_step_stage(&st, &c, p, g, m, v, step + 1, adamw_lr(&c, step), scale);
    }
    if (getenv("KT_VERBOSE"))
        printf("training: loss %.4f -> %.4f\n", first, loss);
    ck_assert_msg(first > 2.0f && loss < 0.1f, "loss %.4f -> %.4f", first, loss);
    llama_saved_free(sv);
    free(p);
    free(g);
    free(m);
    free(v);
    free(tok);
    free(tgt);
    llama_stage_free(&st);
}
END_TEST

/* Deterministic pseudo-random floats in [-scale, scale) (xorshift). */
static void fill_random(float *x, size_t n, unsigned *seed, float scale)
{
    for (size_t i = 0; i < n; i++) {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 17;
        *seed ^= *seed << 5;
        x[i] = scale * ((float)(*seed >> 8) / (float)(1u << 23) - 1.0f);
    }
}

START_TEST(test_halves_bit_identical)
{
    /* Post-validation keeps no copy of m and v: it writes the params
     * first (adamw_update_params) and the moments only once the step is
     * confirmed (adamw_update_moments).  The two halves must give exactly
     * adamw_update's bits, over more than one ADAMW_CHUNK and for steps
     * with and without decay and clipping. */
    size_t n = 70001;
    float *p = malloc(sizeof(float) * n), *g = malloc(sizeof(float) * n);
    float *m = malloc(sizeof(float) * n), *v = malloc(sizeof(float) * n);
    float *p2 = malloc(sizeof(float) * n), *m2 = malloc(sizeof(float) * n);
    float *v2 = malloc(sizeof(float) * n);
    ck_assert(p && g && m && v && p2 && m2 && v2);
    unsigned seed = 12345;
    fill_random(p, n, &seed, 1.0f);
    fill_random(m, n, &seed, 0.01f);
    fill_random(v, n, &seed, 1e-4f);
    for (size_t i = 0; i < n; i++)
        v[i] *= v[i] < 0 ? -1.0f : 1.0f;
    memcpy(p2, p, sizeof(float) * n);
    memcpy(m2, m, sizeof(float) * n);
    memcpy(v2, v, sizeof(float) * n);
    for (int t = 1; t <= 4; t++) {
        fill_random(g, n, &seed, 0.1f);
        float wd = t % 2 ? 0.1f : 0.0f, scale = t == 3 ? 0.37f : 1.0f;
        adamw_update(p, g, m, v, n, t, 1e-3f, 0.9f, 0.99f, 1e-8f, wd, scale);
        adamw_update_params(p2, g, m2, v2, n, t, 1e-3f, 0.9f, 0.99f, 1e-8f, wd, scale);
        ck_assert(memcmp(p, p2, sizeof(float) * n) == 0);
        adamw_update_moments(g, m2, v2, n, 0.9f, 0.99f, scale);
        ck_assert(memcmp(m, m2, sizeof(float) * n) == 0);
        ck_assert(memcmp(v, v2, sizeof(float) * n) == 0);
    }
    free(p), free(g), free(m), free(v), free(p2), free(m2), free(v2);
}
END_TEST

START_TEST(test_arithmetic_inverse_inexact)
{
    /* Why post-validation keeps a copy of the params: AdamW's arithmetic
     * inverse (the zero-bubble paper's Algorithm 1: theta, then m and v,
     * then t-1) does not give back the same bits in fp32.  m -> b1*m + c
     * maps about 0.9 of a binade's floats onto it, so two old moments can
     * round to one new one, and no formula can tell them apart.  Inverted
     * here in double, the best case, it still misses elements. */
    size_t n = 4096;
    float *p = malloc(sizeof(float) * n), *g = malloc(sizeof(float) * n);
    float *m = malloc(sizeof(float) * n), *v = malloc(sizeof(float) * n);
    float *p0 = malloc(sizeof(float) * n), *m0 = malloc(sizeof(float) * n);
    float *v0 = malloc(sizeof(float) * n);
    ck_assert(p && g && m && v && p0 && m0 && v0);
    unsigned seed = 777;
    fill_random(p, n, &seed, 1.0f);
    fill_random(m, n, &seed, 0.01f);
    fill_random(v, n, &seed, 1e-4f);
    fill_random(g, n, &seed, 0.1f);
    for (size_t i = 0; i < n; i++)
        v[i] *= v[i] < 0 ? -1.0f : 1.0f;
    memcpy(p0, p, sizeof(float) * n);
    memcpy(m0, m, sizeof(float) * n);
    memcpy(v0, v, sizeof(float) * n);
    const int t = 5;
    const double lr = 1e-3, b1 = 0.9f, b2 = 0.99f, eps = 1e-8f, wd = 0.1f;
    adamw_update(p, g, m, v, n, t, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd, 1.0f);
    double bc1 = 1.0f - powf((float)b1, (float)t), bc2 = 1.0f - powf((float)b2, (float)t);
    size_t wrong_p = 0, wrong_m = 0, wrong_v = 0;
    for (size_t i = 0; i < n; i++) {
        double u = (m[i] / bc1) / (sqrt(v[i] / bc2) + eps);
        float pi = (float)((p[i] + lr * u) / (1.0 - lr * wd));
        float mi = (float)((m[i] - (1.0 - b1) * g[i]) / b1);
        float vi = (float)((v[i] - (1.0 - b2) * (double)g[i] * g[i]) / b2);
        wrong_p += memcmp(&pi, &p0[i], sizeof pi) != 0;
        wrong_m += memcmp(&mi, &m0[i], sizeof mi) != 0;
        wrong_v += memcmp(&vi, &v0[i], sizeof vi) != 0;
    }
    printf("arithmetic inverse of AdamW, %zu elements: %zu params, %zu m, %zu v differ\n", n,
           wrong_p, wrong_m, wrong_v);
    ck_assert(wrong_p + wrong_m + wrong_v > 0);
    free(p), free(g), free(m), free(v), free(p0), free(m0), free(v0);
}
END_TEST

int main(void)
{
    kernels_init_threads(1);
    Suite *s = suite_create("kernels_adamw");
    TCase *tc = tcase_create("adamw");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_update_by_hand);
    tcase_add_test(tc, test_decay_mask);
    tcase_add_test(tc, test_clipping);
    tcase_add_test(tc, test_sum_squares_split_independent);
    tcase_add_test(tc, test_lr_schedule);
    tcase_add_test(tc, test_training_learns);
    tcase_add_test(tc, test_halves_bit_identical);
    tcase_add_test(tc, test_arithmetic_inverse_inexact);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
