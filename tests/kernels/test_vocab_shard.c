/*
 * test_vocab_shard.c: the vocabulary-sharded output layer
 * (kernels/cpu/vocab_shard.h) against the unsharded head of llama.c (the
 * same ops.h kernels: logits GEMM, cross-entropy forward and backward, the
 * dX and dH GEMMs) on small random shapes, for several shard counts and
 * both variants; plus the shard bounds, and the final-norm-only stage mode
 * of llama.c that the runtime pairs with it.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/llama.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/vocab_shard.h"
#include "tests/kernels/kt_common.h"

/* A small deterministic generator (the test's data, not the model's). */
static uint64_t rs = 88172645463325252ULL;
static float frand(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (float)((rs >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

START_TEST(test_bounds)
{
    const int Vs[] = { 1, 7, 65, 100, 4099 };
    for (size_t a = 0; a < sizeof Vs / sizeof *Vs; a++)
        for (int p = 1; p <= 9; p++) {
            int V = Vs[a];
            ck_assert_int_eq(vshard_begin(0, p, V), 0);
            ck_assert_int_eq(vshard_begin(p, p, V), V);
            for (int k = 0; k < p; k++) {
                int b = vshard_begin(k, p, V), e = vshard_begin(k + 1, p, V);
                ck_assert_int_le(b, e);
                ck_assert_int_le(e - b, V / p + 1);
                for (int y = b; y < e; y++)
                    ck_assert_int_eq(vshard_owner(y, p, V), k);
            }
        }
}
END_TEST

static double max_abs(const float *a, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabs(a[i]) > m ? fabs(a[i]) : m;
    return m;
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabs((double)a[i] - b[i]) > m ? fabs((double)a[i] - b[i]) : m;
    return m;
}

/* The sharded head over p shards with variant 1 or 2 against the
 * unsharded one: loss, dX and dH. */
static void check_against_plain(int N, int d, int V, int p, int variant)
{
    float dloss = 0.25f;
    float *X = malloc(sizeof(float) * N * d), *H = malloc(sizeof(float) * d * V);
    int32_t *y = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N * d; i++)
        X[i] = frand();
    for (int i = 0; i < d * V; i++)
        H[i] = 0.3f * frand();
    for (int n = 0; n < N; n++)
        y[n] = (int32_t)((unsigned)(n * 7919 + 13) % (unsigned)V);
    /* unsharded (llama.c's head path) */
    float *lg = malloc(sizeof(float) * N * V), *lse = malloc(sizeof(float) * N);
    float *dlg = malloc(sizeof(float) * N * V), *dX = malloc(sizeof(float) * N * d);
    float *dH = malloc(sizeof(float) * d * V);
    kern_matmul_forward(lg, X, H, N, d, V);
    double loss = kern_crossentropy_forward(lse, lg, y, N, V);
    kern_crossentropy_backward(dlg, lg, lse, y, dloss, N, V);
    kern_matmul_backward_b(dX, dlg, H, N, d, V);
    kern_matmul_backward_w(dH, X, dlg, N, d, V);

    /* sharded */
    float *w[16], *slg[16], *mx[16], *tg[16], *part[16];
    double *sm[16], *wt[16];
    float *slse = malloc(sizeof(float) * N), *sdx = malloc(sizeof(float) * N * d);
    float *sdH = calloc((size_t)d * V, sizeof(float));
    for (int k = 0; k < p; k++) {
        int v0 = vshard_begin(k, p, V), v = vshard_begin(k + 1, p, V) - v0;
        w[k] = malloc(sizeof(float) * d * (v ? v : 1));
        slg[k] = malloc(sizeof(float) * N * (v ? v : 1));
        mx[k] = malloc(sizeof(float) * N);
        tg[k] = malloc(sizeof(float) * N);
        sm[k] = malloc(sizeof(double) * N);
        wt[k] = malloc(sizeof(double) * N);
        part[k] = malloc(sizeof(float) * N * d);
        vshard_gather(w[k], H, d, V, v0, v);
        float *ex = variant == 1 ? malloc(sizeof(float) * N * v) : NULL;
        vshard_forward(slg[k], mx[k], sm[k], tg[k], ex, X, w[k], y, v0, N, d, v);
        if (variant == 1)
            vshard_local_partial(part[k], ex, sm[k], w[k], N, d, v);
        free(ex);
    }
    double sloss = vshard_combine_stats(slse, variant == 1 ? wt : NULL,
                                        (const float *const *)mx, (const double *const *)sm,
                                        (const float *const *)tg, y, p, V, N);
    ck_assert_msg(fabs(sloss - loss) <= 1e-7 * fabs(loss), "loss %.17g vs %.17g (p=%d)", sloss,
                  loss, p);
    for (int n = 0; n < N; n++)
        ck_assert_msg(fabsf(slse[n] - lse[n]) <= 1e-6f * fabsf(lse[n]) + 1e-7f, "lse row %d", n);
    for (int k = 0; k < p; k++) {
        int v0 = vshard_begin(k, p, V), v = vshard_begin(k + 1, p, V) - v0;
        vshard_logit_grad(slg[k], slg[k], slse, y, v0, dloss, N, v);
        float *dw = malloc(sizeof(float) * d * v);
        kern_matmul_backward_w(dw, X, slg[k], N, d, v);
        vshard_scatter_add(sdH, dw, d, V, v0, v);
        free(dw);
        if (variant == 2)
            kern_matmul_backward_b(part[k], slg[k], w[k], N, d, v);
    }
    if (variant == 1)
        vshard_combine_dx_v1(sdx, (const float *const *)part, wt, (const float *const *)w, y,
                             dloss, p, V, N, d);
    else
        vshard_combine_dx_v2(sdx, (const float *const *)part, p, N, d);
    double sx = max_abs(dX, (size_t)N * d), sh = max_abs(dH, (size_t)d * V);
    ck_assert_msg(max_diff(sdx, dX, (size_t)N * d) <= 1e-5 * sx, "dX off by %g of %g (p=%d v%d)",
                  max_diff(sdx, dX, (size_t)N * d), sx, p, variant);
    ck_assert_msg(max_diff(sdH, dH, (size_t)d * V) <= 1e-6 * sh, "dH off by %g of %g (p=%d v%d)",
                  max_diff(sdH, dH, (size_t)d * V), sh, p, variant);
    for (int k = 0; k < p; k++) {
        free(w[k]);
        free(slg[k]);
        free(mx[k]);
        free(tg[k]);
        free(sm[k]);
        free(wt[k]);
        free(part[k]);
    }
    free(slse);
    free(sdx);
    free(sdH);
    free(X);
    free(H);
    free(y);
    free(lg);
    free(lse);
    free(dlg);
    free(dX);
    free(dH);
}

START_TEST(test_vocab1_against_plain)
{
    const int ps[] = { 1, 2, 3, 5 };
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++)
        check_against_plain(24, 16, 67, ps[i], 1);
}
END_TEST

START_TEST(test_vocab2_against_plain)
{
    const int ps[] = { 1, 2, 3, 5 };
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++)
        check_against_plain(24, 16, 67, ps[i], 2);
}
END_TEST

/* The final-norm-only stage: its output is the full head stage's LM head
 * input, and with dy_in = that input's gradient its B and W give the full
 * stage's input gradient and (norm, layer) weight gradients. */
START_TEST(test_norm_only_stage)
{
    zb_model mdl = kt_model(2, 16, 2, 2, 32, 11, 8);
    zb_err err = { { 0 } };
    llama_stage full, norm;
    ck_assert_int_eq(llama_stage_init(&full, &mdl, 1, 2, 0, LLAMA_HEAD_FULL, &err), 0);
    ck_assert_int_eq(llama_stage_init(&norm, &mdl, 1, 2, 0, LLAMA_HEAD_NORM_ONLY, &err), 0);
    const llama_tensor *H = llama_stage_find(&full, LLAMA_T_LM_HEAD, -1);
    ck_assert_ptr_nonnull(H);
    ck_assert_ptr_null(llama_stage_find(&norm, LLAMA_T_LM_HEAD, -1));
    ck_assert_ptr_nonnull(llama_stage_find(&norm, LLAMA_T_FINAL_NORM, -1));
    /* same layout up to the head, which comes last */
    ck_assert_uint_eq(norm.n_params, full.n_params - (size_t)mdl.d_model * mdl.vocab);
    ck_assert_uint_eq(H->offset, norm.n_params);
    int B = 2, N = B * mdl.seq_len, d = mdl.d_model, V = mdl.vocab;
    float *params = malloc(sizeof(float) * full.n_params);
    llama_stage_init_params(&full, params, 5);
    float *in = malloc(sizeof(float) * N * d);
    int32_t *y = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N * d; i++)
        in[i] = frand();
    for (int n = 0; n < N; n++)
        y[n] = n % V;
    llama_saved *sf = llama_saved_new(&full, B), *sn = llama_saved_new(&norm, B);
    float loss = 0, *nf = malloc(sizeof(float) * N * d);
    ck_assert_int_eq(llama_stage_forward(&full, params, NULL, in, y, sf, NULL, &loss, NULL, &err), 0);
    ck_assert_int_eq(llama_stage_forward(&norm, params, NULL, in, NULL, sn, nf, NULL, NULL, &err), 0);
    /* the head on nf, unsharded: loss and dnf */
    float *lg = malloc(sizeof(float) * N * V), *lse = malloc(sizeof(float) * N);
    float *dlg = malloc(sizeof(float) * N * V), *dnf = malloc(sizeof(float) * N * d);
    kern_matmul_forward(lg, nf, params + H->offset, N, d, V);
    double l2 = kern_crossentropy_forward(lse, lg, y, N, V);
    ck_assert_float_eq(loss, (float)l2);
    kern_crossentropy_backward(dlg, lg, lse, y, 0.5f, N, V);
    kern_matmul_backward_b(dnf, dlg, params + H->offset, N, d, V);
    float *dxf = malloc(sizeof(float) * N * d), *dxn = malloc(sizeof(float) * N * d);
    float *gf = calloc(full.n_params, sizeof(float)), *gn = calloc(norm.n_params, sizeof(float));
    ck_assert_int_eq(llama_stage_backward(&full, params, sf, 0.5f, NULL, dxf, gf, &err), 0);
    ck_assert_int_eq(llama_stage_backward(&norm, params, sn, 0.5f, dnf, dxn, gn, &err), 0);
    ck_assert_int_eq(memcmp(dxf, dxn, sizeof(float) * N * d), 0);
    ck_assert_int_eq(memcmp(gf, gn, sizeof(float) * norm.n_params), 0);
    llama_saved_free(sf);
    llama_saved_free(sn);
    free(params);
    free(in);
    free(y);
    free(nf);
    free(lg);
    free(lse);
    free(dlg);
    free(dnf);
    free(dxf);
    free(dxn);
    free(gf);
    free(gn);
    llama_stage_free(&full);
    llama_stage_free(&norm);
}
END_TEST

int main(void)
{
    kernels_init_threads(1);
    Suite *s = suite_create("vocab_shard");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_bounds);
    tcase_add_test(tc, test_vocab1_against_plain);
    tcase_add_test(tc, test_vocab2_against_plain);
    tcase_add_test(tc, test_norm_only_stage);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed == 0 ? 0 : 1;
}
