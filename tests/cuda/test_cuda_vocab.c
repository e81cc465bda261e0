/*
 * test_cuda_vocab.c: the vocabulary-sharded output layer's CUDA kernels
 * (kernels/cuda/vocab_cuda.h) with cuBLASLt's shard matmuls, against the
 * CPU twin (kernels/cpu/vocab_shard.h) on the same bf16-rounded inputs:
 * the losses, Vocab-1's and Vocab-2's dX, and the shards' dW, for p = 3
 * shards of an odd vocabulary.  Exits 77 (SKIP) without a CUDA device.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/vocab_shard.h"
#include "kernels/cuda/vocab_cuda.h"
#include "tests/cuda/cuda_check.h"
#include "tests/cuda/cuda_dev.h"

static zb_cuda *ctx;

#define P 3

static void test_vocab(int N, int d, int V)
{
    float dloss = 0.5f;
    float *X = malloc(sizeof(float) * N * d), *H = malloc(sizeof(float) * d * V);
    int32_t *y = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N * d; i++)
        X[i] = zb_bf16_to_f32(zb_bf16_from_f32(cd_urand(1.0f)));
    for (int i = 0; i < d * V; i++)
        H[i] = zb_bf16_to_f32(zb_bf16_from_f32(cd_urand(0.2f)));
    for (int n = 0; n < N; n++)
        y[n] = (int32_t)((unsigned)(n * 7919 + 5) % (unsigned)V);
    size_t nd = (size_t)N * d;

    /* CPU: both variants */
    float *w[P], *lg[P], *mx[P], *tg[P], *p1[P], *p2[P], *dw[P];
    double *sm[P], *wt[P];
    float *lse = malloc(sizeof(float) * N), *dx1 = malloc(sizeof(float) * nd);
    float *dx2 = malloc(sizeof(float) * nd);
    for (int k = 0; k < P; k++) {
        int v0 = vshard_begin(k, P, V), v = vshard_begin(k + 1, P, V) - v0;
        w[k] = malloc(sizeof(float) * d * v);
        lg[k] = malloc(sizeof(float) * N * v);
        float *ex = malloc(sizeof(float) * N * v);
        mx[k] = malloc(sizeof(float) * N);
        tg[k] = malloc(sizeof(float) * N);
        sm[k] = malloc(sizeof(double) * N);
        wt[k] = malloc(sizeof(double) * N);
        p1[k] = malloc(sizeof(float) * nd);
        p2[k] = malloc(sizeof(float) * nd);
        dw[k] = malloc(sizeof(float) * d * v);
        vshard_gather(w[k], H, d, V, v0, v);
        vshard_forward(lg[k], mx[k], sm[k], tg[k], ex, X, w[k], y, v0, N, d, v);
        vshard_local_partial(p1[k], ex, sm[k], w[k], N, d, v);
        free(ex);
    }
    double loss = vshard_combine_stats(lse, wt, (const float *const *)mx,
                                       (const double *const *)sm, (const float *const *)tg, y, P,
                                       V, N);
    for (int k = 0; k < P; k++) {
        int v0 = vshard_begin(k, P, V), v = vshard_begin(k + 1, P, V) - v0;
        vshard_logit_grad(lg[k], lg[k], lse, y, v0, dloss, N, v);
        kern_matmul_backward_b(p2[k], lg[k], w[k], N, d, v);
        kern_matmul_backward_w(dw[k], X, lg[k], N, d, v);
    }
    vshard_combine_dx_v1(dx1, (const float *const *)p1, wt, (const float *const *)w, y, dloss, P,
                         V, N, d);
    vshard_combine_dx_v2(dx2, (const float *const *)p2, P, N, d);

    /* GPU */
    zb_bf16 *gx = cd_up_bf16(X, nd);
    int32_t *gy = NULL;
    CC_OK(zb_cuda_alloc((void **)&gy, sizeof(int32_t) * N, err));
    CC_OK(zb_cuda_upload(ctx, gy, y, sizeof(int32_t) * N, err));
    float *gmx = cd_dev_zero(sizeof(float) * P * N), *gsm = cd_dev_zero(sizeof(float) * P * N);
    float *gtg = cd_dev_zero(sizeof(float) * P * N), *gwt = cd_dev_zero(sizeof(float) * P * N);
    float *grows = cd_dev_zero(sizeof(float) * P * nd), *glse = cd_dev_zero(sizeof(float) * N);
    float *glosses = cd_dev_zero(sizeof(float) * N);
    zb_bf16 *gp1 = cd_dev_zero(2 * P * nd), *gp2 = cd_dev_zero(2 * P * nd);
    zb_bf16 *gdx1 = cd_dev_zero(2 * nd), *gdx2 = cd_dev_zero(2 * nd);
    zb_bf16 *gw[P], *glg[P], *gex[P];
    float *gdw[P];
    for (int k = 0; k < P; k++) {
        int v0 = vshard_begin(k, P, V), v = vshard_begin(k + 1, P, V) - v0;
        gw[k] = cd_up_bf16(w[k], (size_t)d * v);
        glg[k] = cd_dev_zero(2 * (size_t)N * v);
        gex[k] = cd_dev_zero(2 * (size_t)N * v);
        gdw[k] = cd_dev_zero(sizeof(float) * d * v);
        /* S */
        CC_OK(zb_cuda_matmul_forward(ctx, glg[k], gx, gw[k], NULL, N, d, v, err));
        CC_OK(zb_cuda_vshard_stats(ctx, gmx + (size_t)k * N, gsm + (size_t)k * N,
                                   gtg + (size_t)k * N, glg[k], gy, v0, N, v, err));
        CC_OK(zb_cuda_vshard_local_softmax(ctx, gex[k], glg[k], gmx + (size_t)k * N,
                                           gsm + (size_t)k * N, N, v, err));
        CC_OK(zb_cuda_matmul_backward_b(ctx, gp1 + (size_t)k * nd, gex[k], gw[k], N, d, v, 0,
                                        err));
        CC_OK(zb_cuda_vshard_target_rows(ctx, grows + (size_t)k * nd, gw[k], gy, v0, N, d, v,
                                         err));
    }
    /* C0 */
    CC_OK(zb_cuda_vshard_combine_stats(ctx, glse, glosses, gwt, gmx, gsm, gtg, P, N, err));
    CC_OK(zb_cuda_vshard_combine_dx_v1(ctx, gdx1, gp1, gwt, grows, dloss, P, N, d, err));
    /* T */
    for (int k = 0; k < P; k++) {
        int v0 = vshard_begin(k, P, V), v = vshard_begin(k + 1, P, V) - v0;
        CC_OK(zb_cuda_vshard_logit_grad(ctx, glg[k], glg[k], glse, gy, v0, dloss, N, v, err));
        CC_OK(zb_cuda_matmul_backward_b(ctx, gp2 + (size_t)k * nd, glg[k], gw[k], N, d, v, 0,
                                        err));
        CC_OK(zb_cuda_matmul_backward_w(ctx, gdw[k], gx, glg[k], N, d, v, err));
    }
    /* C1 */
    CC_OK(zb_cuda_vshard_combine_dx_v2(ctx, gdx2, gp2, P, N, d, err));

    float *losses = cd_down_f32(glosses, (size_t)N);
    double gl = 0;
    for (int n = 0; n < N; n++)
        gl += losses[n];
    gl /= N;
    char name[96];
    snprintf(name, sizeof name, "vocab loss N=%d d=%d V=%d p=%d", N, d, V, P);
    cc_expect(name, (gl - loss) * (gl - loss) / (loss * loss), 1e-5);
    float *h1 = cd_down_bf16(gdx1, nd), *h2 = cd_down_bf16(gdx2, nd);
    snprintf(name, sizeof name, "vocab-1 dX N=%d d=%d V=%d", N, d, V);
    cc_expect(name, cc_nmse(h1, dx1, nd), 1e-4);
    snprintf(name, sizeof name, "vocab-2 dX N=%d d=%d V=%d", N, d, V);
    cc_expect(name, cc_nmse(h2, dx2, nd), 1e-4);
    for (int k = 0; k < P; k++) {
        int v = vshard_begin(k + 1, P, V) - vshard_begin(k, P, V);
        float *hw = cd_down_f32(gdw[k], (size_t)d * v);
        snprintf(name, sizeof name, "vocab shard %d dW", k);
        cc_expect(name, cc_nmse(hw, dw[k], (size_t)d * v), 1e-4);
        free(hw);
        zb_cuda_release(gw[k]);
        zb_cuda_release(glg[k]);
        zb_cuda_release(gex[k]);
        zb_cuda_release(gdw[k]);
        free(w[k]);
        free(lg[k]);
        free(mx[k]);
        free(tg[k]);
        free(sm[k]);
        free(wt[k]);
        free(p1[k]);
        free(p2[k]);
        free(dw[k]);
    }
    free(losses);
    free(h1);
    free(h2);
    zb_cuda_release(gx);
    zb_cuda_release(gy);
    zb_cuda_release(gmx);
    zb_cuda_release(gsm);
    zb_cuda_release(gtg);
    zb_cuda_release(gwt);
    zb_cuda_release(grows);
    zb_cuda_release(glse);
    zb_cuda_release(glosses);
    zb_cuda_release(gp1);
    zb_cuda_release(gp2);
    zb_cuda_release(gdx1);
    zb_cuda_release(gdx2);
    free(X);
    free(H);
    free(y);
    free(lse);
    free(dx1);
    free(dx2);
}

int main(void)
{
    cc_require_device();
    kernels_init_threads(1);
    CC_OK(zb_cuda_create(0, &ctx, err));
    cd_init(ctx, 0x9e3779b97f4a7c15ull);
    test_vocab(64, 32, 301);
    test_vocab(128, 64, 1000);
    zb_cuda_free(ctx);
    return cc_summary();
}
