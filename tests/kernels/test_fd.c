/*
 * test_fd.c: finite-difference checks of the analytic gradients, needing
 * nothing but the C code itself (an independent check from the JAX goldens).
 *
 * A 2-layer GQA model with weights scaled up (std ≈ 0.3, so attention is far
 * from uniform and SwiGLU is out of its linear region); for every tensor kind
 * the coordinate with the largest gradient plus two pseudo-random ones are
 * compared with the central difference (L(p+h) - L(p-h)) / 2h of the fp32
 * loss.  Also checks the input gradient of a middle stage the same way
 * (d<y, dy>/dx for a fixed random dy).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/llama.h"
#include "tests/kernels/kt_common.h"

#define BATCH 2
#define FD_H 2e-3f

static float loss_at(const llama_stage *st, const float *p, llama_saved *sv,
                     const int32_t *tok, const int32_t *tgt)
{
    zb_err err = {{0}};
    float loss = 0;
    ck_assert_int_eq(llama_stage_forward(st, p, tok, NULL, tgt, sv, NULL, &loss,
                                         NULL, &err), 0);
    llama_saved_reset(sv);
    return loss;
}

START_TEST(test_param_grads)
{
    zb_model m = kt_model(2, 16, 4, 2, 24, 11, 6);
    zb_err err = {{0}};
    llama_stage st;
    ck_assert_int_eq(llama_stage_init(&st, &m, 0, 2, 1, 1, &err), 0);
    float *p = malloc(sizeof(float) * st.n_params);
    float *g = calloc(st.n_params, sizeof(float));
    llama_stage_init_params(&st, p, 77);
    for (int t = 0; t < st.n_tensors; t++) {
        const llama_tensor *ten = &st.tensors[t];
        for (size_t i = 0; i < ten->count; i++) {
            float *x = &p[ten->offset + i];
            if (ten->rows > 1)
                *x *= 15.0f;
            else /* gains around 1, not all equal */
                *x = 1.0f + 0.1f * (float)((int)(i * 7 % 11) - 5);
        }
    }
    int N = BATCH * m.seq_len;
    int32_t *tok = malloc(sizeof(int32_t) * N), *tgt = malloc(sizeof(int32_t) * N);
    for (int n = 0; n < N; n++) {
        tok[n] = (n * 5 + 2) % m.vocab;
        tgt[n] = (n * 3 + 1) % m.vocab;
    }
    llama_saved *sv = llama_saved_new(&st, BATCH);
    float loss;
    ck_assert_int_eq(llama_stage_forward(&st, p, tok, NULL, tgt, sv, NULL, &loss,
                                         NULL, &err), 0);
    ck_assert_int_eq(llama_stage_backward(&st, p, sv, 1.0f, NULL, NULL, g, &err), 0);
    double worst = 0;
    for (int t = 0; t < st.n_tensors; t++) {
        const llama_tensor *ten = &st.tensors[t];
        const float *gt = g + ten->offset;
        size_t best = 0;
        double gmax = 0;
        for (size_t i = 0; i < ten->count; i++)
            if (fabs(gt[i]) > gmax) {
                gmax = fabs(gt[i]);
                best = i;
            }
        ck_assert_msg(gmax > 1e-5, "%s: gradient is zero", ten->name);
        size_t picks[3] = {best, (ten->count * 3) / 7, (ten->count * 5) / 6};
        for (int k = 0; k < 3; k++) {
            float *x = &p[ten->offset + picks[k]];
            float keep = *x;
            *x = keep + FD_H;
            float lp = loss_at(&st, p, sv, tok, tgt);
            *x = keep - FD_H;
            float lm = loss_at(&st, p, sv, tok, tgt);
            *x = keep;
            double fd = ((double)lp - lm) / (2.0 * FD_H);
            double an = gt[picks[k]];
            /* fp32 loss noise ~ 3e-7 / 4e-3 ≈ 1e-4 absolute */
            double err_abs = fabs(fd - an);
            double rel = err_abs / (gmax + 1e-3);
            if (rel > worst)
                worst = rel;
            if (getenv("KT_VERBOSE"))
                printf("%-22s [%zu] analytic %+.6f fd %+.6f\n", ten->name,
                       picks[k], an, fd);
            ck_assert_msg(err_abs < 5e-4 + 0.02 * fabs(an),
                          "%s[%zu]: analytic %.6g vs finite difference %.6g",
                          ten->name, picks[k], an, fd);
        }
    }
    if (getenv("KT_VERBOSE"))
        printf("worst error relative to tensor max: %.3g\n", worst);
    llama_saved_free(sv);
    free(p);
    free(g);
    free(tok);
    free(tgt);
    llama_stage_free(&st);
}
END_TEST

START_TEST(test_input_grad)
{
    /* middle stage, loss = <y, r> for a fixed r: d loss / d x = B(r) */
    zb_model m = kt_model(2, 16, 4, 1, 24, 11, 6);
    zb_err err = {{0}};
    llama_stage st;
    ck_assert_int_eq(llama_stage_init(&st, &m, 0, 2, 0, 0, &err), 0);
    float *p = malloc(sizeof(float) * st.n_params);
    llama_stage_init_params(&st, p, 5);
    for (size_t i = 0; i < st.n_params; i++)
        p[i] *= (p[i] == 1.0f) ? 1.0f : 15.0f;
    size_t Nd = (size_t)BATCH * m.seq_len * m.d_model;
    float *x = malloc(sizeof(float) * Nd), *y = malloc(sizeof(float) * Nd);
    float *r = malloc(sizeof(float) * Nd), *dx = malloc(sizeof(float) * Nd);
    for (size_t i = 0; i < Nd; i++) {
        x[i] = (float)((int)(i * 13 % 23) - 11) * 0.1f;
        r[i] = (float)((int)(i * 7 % 19) - 9) * 0.05f;
    }
    llama_saved *sv = llama_saved_new(&st, BATCH);
    ck_assert_int_eq(llama_stage_forward(&st, p, NULL, x, NULL, sv, y, NULL, NULL, &err), 0);
    ck_assert_int_eq(llama_stage_backward_b(&st, p, sv, 0, r, dx, &err), 0);
    llama_saved_reset(sv);
    size_t picks[4] = {0, Nd / 3, Nd / 2 + 5, Nd - 1};
    for (int k = 0; k < 4; k++) {
        double f[2];
        for (int s = 0; s < 2; s++) {
            float keep = x[picks[k]];
            x[picks[k]] = keep + (s ? -FD_H : FD_H);
            ck_assert_int_eq(llama_stage_forward(&st, p, NULL, x, NULL, sv, y, NULL,
                                                 NULL, &err), 0);
            llama_saved_reset(sv);
            x[picks[k]] = keep;
            double dot = 0;
            for (size_t i = 0; i < Nd; i++)
                dot += (double)y[i] * r[i];
            f[s] = dot;
        }
        double fd = (f[0] - f[1]) / (2.0 * FD_H);
        ck_assert_msg(fabs(fd - dx[picks[k]]) < 1e-3 + 0.02 * fabs(fd),
                      "dx[%zu]: analytic %.6g vs finite difference %.6g", picks[k],
                      dx[picks[k]], fd);
    }
    llama_saved_free(sv);
    free(p);
    free(x);
    free(y);
    free(r);
    free(dx);
    llama_stage_free(&st);
}
END_TEST

int main(void)
{
    kernels_init_threads(1);
    Suite *s = suite_create("kernels_fd");
    TCase *tc = tcase_create("fd");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_param_grads);
    tcase_add_test(tc, test_input_grad);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
