/*
 * test_cuda_ops.c: every CUDA op of kernels/cuda/zb_cuda.h against its CPU
 * twin of kernels/cpu/ops.h (and adamw.h) on fresh random inputs, several
 * shapes each (odd sizes, T not a multiple of the attention tile, grouped
 * KV heads, head dims 16..128).  See cuda_check.h for the method.
 */
#include <string.h>

#include "kernels/cpu/adamw.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/ops.h"
#include "tests/cuda/cuda_check.h"
#include "tests/cuda/cuda_dev.h"

static zb_cuda *ctx;

static void test_embedding(int N, int d, int V)
{
    char name[96];
    int32_t *tok = malloc(sizeof *tok * N);
    for (int n = 0; n < N; n++)
        tok[n] = (int32_t)((cd_urand(1.0f) + 1.0f) * 0.5f * (V - 1));
    float *E = cd_rand_bf16((size_t)V * d, 1.0f), *dout = cd_rand_bf16((size_t)N * d, 1.0f);
    float *acc0 = cd_rand_f32((size_t)V * d, 0.5f);
    int32_t *dtok = cd_up_raw(tok, sizeof *tok * N);
    zb_bf16 *dE = cd_up_bf16(E, (size_t)V * d), *ddout = cd_up_bf16(dout, (size_t)N * d);
    zb_bf16 *dout_fwd = cd_dev_zero((size_t)N * d * 2);
    float *dacc = cd_up_raw(acc0, sizeof(float) * V * d);
    CC_OK(zb_cuda_embedding_forward(ctx, dout_fwd, dtok, dE, N, d, err));
    CC_OK(zb_cuda_embedding_backward_w(ctx, dacc, dtok, ddout, N, d, V, err));
    float *ref = malloc(sizeof(float) * N * d), *refw = malloc(sizeof(float) * V * d);
    kern_embedding_forward(ref, tok, E, N, d);
    kern_embedding_backward_w(refw, tok, dout, N, d, V);
    for (size_t i = 0; i < (size_t)V * d; i++)
        refw[i] += acc0[i];
    float *got = cd_down_bf16(dout_fwd, (size_t)N * d), *gotw = cd_down_f32(dacc, (size_t)V * d);
    snprintf(name, sizeof name, "embedding F N=%d d=%d V=%d", N, d, V);
    cc_expect(name, cc_nmse(got, ref, (size_t)N * d), 0.0);
    snprintf(name, sizeof name, "embedding W (accumulate) N=%d d=%d", N, d);
    cc_expect(name, cc_nmse(gotw, refw, (size_t)V * d), 1e-10);
    free(tok); free(E); free(dout); free(acc0); free(ref); free(refw); free(got); free(gotw);
    zb_cuda_release(dtok); zb_cuda_release(dE); zb_cuda_release(ddout);
    zb_cuda_release(dout_fwd); zb_cuda_release(dacc);
}

static void test_rmsnorm(int N, int d)
{
    char name[96];
    size_t n = (size_t)N * d;
    float *x = cd_rand_bf16(n, 2.0f), *g = cd_rand_bf16((size_t)d, 1.0f);
    float *dy = cd_rand_bf16(n, 1.0f), *dres = cd_rand_bf16(n, 1.0f);
    float *acc0 = cd_rand_f32((size_t)d, 1.0f);
    zb_bf16 *dx_ = cd_up_bf16(x, n), *dg_ = cd_up_bf16(g, d), *ddy = cd_up_bf16(dy, n);
    zb_bf16 *ddres = cd_up_bf16(dres, n), *dout = cd_dev_zero(n * 2), *ddx = cd_dev_zero(n * 2);
    zb_bf16 *ddx2 = cd_dev_zero(n * 2);
    float *drstd = cd_dev_zero((size_t)N * 4), *dacc = cd_up_raw(acc0, (size_t)d * 4);
    CC_OK(zb_cuda_rmsnorm_forward(ctx, dout, drstd, dx_, dg_, N, d, err));
    CC_OK(zb_cuda_rmsnorm_backward_b(ctx, ddx, ddy, dx_, drstd, dg_, NULL, N, d, err));
    CC_OK(zb_cuda_rmsnorm_backward_b(ctx, ddx2, ddy, dx_, drstd, dg_, ddres, N, d, err));
    CC_OK(zb_cuda_rmsnorm_backward_w(ctx, dacc, ddy, dx_, drstd, N, d, err));
    float *out = malloc(n * 4), *rstd = malloc((size_t)N * 4), *dx = malloc(n * 4);
    float *dgw = malloc((size_t)d * 4);
    kern_rmsnorm_forward(out, rstd, x, g, N, d);
    kern_rmsnorm_backward_b(dx, dy, x, rstd, g, N, d);
    kern_rmsnorm_backward_w(dgw, dy, x, rstd, N, d);
    for (int j = 0; j < d; j++)
        dgw[j] += acc0[j];
    float *g_out = cd_down_bf16(dout, n), *g_rstd = cd_down_f32(drstd, (size_t)N);
    float *g_dx = cd_down_bf16(ddx, n), *g_dx2 = cd_down_bf16(ddx2, n), *g_dg = cd_down_f32(dacc, (size_t)d);
    snprintf(name, sizeof name, "rmsnorm F out N=%d d=%d", N, d);
    cc_expect(name, cc_nmse(g_out, out, n), 1e-4);
    snprintf(name, sizeof name, "rmsnorm F rstd N=%d d=%d", N, d);
    cc_expect(name, cc_nmse(g_rstd, rstd, (size_t)N), 1e-8);
    snprintf(name, sizeof name, "rmsnorm B N=%d d=%d", N, d);
    cc_expect(name, cc_nmse(g_dx, dx, n), 1e-4);
    for (size_t i = 0; i < n; i++)
        dx[i] += dres[i];
    snprintf(name, sizeof name, "rmsnorm B + residual N=%d d=%d", N, d);
    cc_expect(name, cc_nmse(g_dx2, dx, n), 1e-4);
    snprintf(name, sizeof name, "rmsnorm W (accumulate) N=%d d=%d", N, d);
    cc_expect(name, cc_nmse(g_dg, dgw, (size_t)d), 1e-8);
    free(x); free(g); free(dy); free(dres); free(acc0); free(out); free(rstd); free(dx);
    free(dgw); free(g_out); free(g_rstd); free(g_dx); free(g_dx2); free(g_dg);
    zb_cuda_release(dx_); zb_cuda_release(dg_); zb_cuda_release(ddy); zb_cuda_release(ddres);
    zb_cuda_release(dout); zb_cuda_release(ddx); zb_cuda_release(ddx2);
    zb_cuda_release(drstd); zb_cuda_release(dacc);
}

static void test_matmul(int N, int in, int out)
{
    char name[96];
    size_t nx = (size_t)N * in, nw = (size_t)in * out, ny = (size_t)N * out;
    float *X = cd_rand_bf16(nx, 1.0f), *W = cd_rand_bf16(nw, 0.1f);
    float *R = cd_rand_bf16(ny, 1.0f), *dY = cd_rand_bf16(ny, 1.0f);
    float *dX0 = cd_rand_bf16(nx, 1.0f), *acc0 = cd_rand_f32(nw, 1.0f);
    zb_bf16 *dXd = cd_up_bf16(X, nx), *dWd = cd_up_bf16(W, nw), *dRd = cd_up_bf16(R, ny);
    zb_bf16 *ddY = cd_up_bf16(dY, ny), *dYo = cd_dev_zero(ny * 2), *dYr = cd_dev_zero(ny * 2);
    zb_bf16 *ddX = cd_dev_zero(nx * 2), *ddXa = cd_up_bf16(dX0, nx);
    float *dacc = cd_up_raw(acc0, nw * 4);
    CC_OK(zb_cuda_matmul_forward(ctx, dYo, dXd, dWd, NULL, N, in, out, err));
    CC_OK(zb_cuda_matmul_forward(ctx, dYr, dXd, dWd, dRd, N, in, out, err));
    CC_OK(zb_cuda_matmul_backward_b(ctx, ddX, ddY, dWd, N, in, out, 0, err));
    CC_OK(zb_cuda_matmul_backward_b(ctx, ddXa, ddY, dWd, N, in, out, 1, err));
    CC_OK(zb_cuda_matmul_backward_w(ctx, dacc, dXd, ddY, N, in, out, err));
    float *Y = malloc(ny * 4), *dX = malloc(nx * 4), *dW = malloc(nw * 4);
    kern_matmul_forward(Y, X, W, N, in, out);
    kern_matmul_backward_b(dX, dY, W, N, in, out);
    kern_matmul_backward_w(dW, X, dY, N, in, out);
    float *gY = cd_down_bf16(dYo, ny), *gYr = cd_down_bf16(dYr, ny), *gdX = cd_down_bf16(ddX, nx);
    float *gdXa = cd_down_bf16(ddXa, nx), *gdW = cd_down_f32(dacc, nw);
    snprintf(name, sizeof name, "matmul F %dx%dx%d", N, in, out);
    cc_expect(name, cc_nmse(gY, Y, ny), 1e-4);
    for (size_t i = 0; i < ny; i++)
        Y[i] += R[i];
    snprintf(name, sizeof name, "matmul F + residual %dx%dx%d", N, in, out);
    cc_expect(name, cc_nmse(gYr, Y, ny), 1e-4);
    snprintf(name, sizeof name, "matmul B %dx%dx%d", N, in, out);
    cc_expect(name, cc_nmse(gdX, dX, nx), 1e-4);
    for (size_t i = 0; i < nx; i++)
        dX[i] += dX0[i];
    snprintf(name, sizeof name, "matmul B accumulate %dx%dx%d", N, in, out);
    cc_expect(name, cc_nmse(gdXa, dX, nx), 1e-4);
    for (size_t i = 0; i < nw; i++)
        dW[i] += acc0[i];
    snprintf(name, sizeof name, "matmul W (accumulate) %dx%dx%d", N, in, out);
    cc_expect(name, cc_nmse(gdW, dW, nw), 1e-8);
    free(X); free(W); free(R); free(dY); free(dX0); free(acc0); free(Y); free(dX); free(dW);
    free(gY); free(gYr); free(gdX); free(gdXa); free(gdW);
    zb_cuda_release(dXd); zb_cuda_release(dWd); zb_cuda_release(dRd); zb_cuda_release(ddY);
    zb_cuda_release(dYo); zb_cuda_release(dYr); zb_cuda_release(ddX); zb_cuda_release(ddXa);
    zb_cuda_release(dacc);
}

static void test_rope(int B, int T, int nh, int hd)
{
    char name[96];
    int N = B * T;
    size_t n = (size_t)N * nh * hd;
    float *x = cd_rand_bf16(n, 1.0f);
    zb_bf16 *dx = cd_up_bf16(x, n);
    CC_OK(zb_cuda_rope(ctx, dx, N, T, nh, hd, 10000.0, 0, err));
    float *ref = malloc(n * 4);
    memcpy(ref, x, n * 4);
    kern_rope(ref, N, T, nh, hd, 10000.0, 0);
    float *got = cd_down_bf16(dx, n);
    snprintf(name, sizeof name, "rope T=%d heads=%d hd=%d", T, nh, hd);
    cc_expect(name, cc_nmse(got, ref, n), 1e-4);
    CC_OK(zb_cuda_rope(ctx, dx, N, T, nh, hd, 10000.0, 1, err));
    free(got);
    got = cd_down_bf16(dx, n);
    snprintf(name, sizeof name, "rope inverse restores x hd=%d", hd);
    cc_expect(name, cc_nmse(got, x, n), 1e-4);
    free(x); free(ref); free(got);
    zb_cuda_release(dx);
}

static void test_attention(int B, int T, int nh, int nkv, int hd)
{
    char name[128];
    int N = B * T, qd = nh * hd, kvd = nkv * hd;
    size_t nq = (size_t)N * qd, nk = (size_t)N * kvd, nl = (size_t)B * nh * T;
    float *q = cd_rand_bf16(nq, 1.0f), *k = cd_rand_bf16(nk, 1.0f);
    float *v = cd_rand_bf16(nk, 1.0f), *dO = cd_rand_bf16(nq, 1.0f);
    zb_bf16 *dq_ = cd_up_bf16(q, nq), *dk_ = cd_up_bf16(k, nk), *dv_ = cd_up_bf16(v, nk);
    zb_bf16 *ddO = cd_up_bf16(dO, nq), *dout = cd_dev_zero(nq * 2);
    zb_bf16 *gq = cd_dev_zero(nq * 2), *gk = cd_dev_zero(nk * 2), *gv = cd_dev_zero(nk * 2);
    float *dlse = cd_dev_zero(nl * 4);
    void *scratch = cd_dev_zero(zb_cuda_attention_scratch_bytes(B, T, nh));
    CC_OK(zb_cuda_attention_forward(ctx, dout, dlse, dq_, dk_, dv_, B, T, nh, nkv, hd, err));
    /* the backward takes the GPU's own output, as a stage would */
    CC_OK(zb_cuda_attention_backward(ctx, gq, gk, gv, ddO, dq_, dk_, dv_, dout, dlse, scratch, B,
                                     T, nh, nkv, hd, err));
    float *o = malloc(nq * 4), *lse = malloc(nl * 4), *rq = malloc(nq * 4);
    float *rk = malloc(nk * 4), *rv = malloc(nk * 4);
    kern_attention_forward(o, lse, q, k, v, B, T, nh, nkv, hd);
    kern_attention_backward(rq, rk, rv, dO, q, k, v, o, lse, B, T, nh, nkv, hd);
    float *go = cd_down_bf16(dout, nq), *glse = cd_down_f32(dlse, nl);
    float *ggq = cd_down_bf16(gq, nq), *ggk = cd_down_bf16(gk, nk), *ggv = cd_down_bf16(gv, nk);
    snprintf(name, sizeof name, "attention F o B=%d T=%d h=%d kv=%d hd=%d", B, T, nh, nkv, hd);
    cc_expect(name, cc_nmse(go, o, nq), 1e-4);
    snprintf(name, sizeof name, "attention F lse T=%d hd=%d", T, hd);
    cc_expect(name, cc_nmse(glse, lse, nl), 1e-8);
    snprintf(name, sizeof name, "attention B dq T=%d hd=%d", T, hd);
    cc_expect(name, cc_nmse(ggq, rq, nq), 5e-4);
    snprintf(name, sizeof name, "attention B dk T=%d hd=%d", T, hd);
    cc_expect(name, cc_nmse(ggk, rk, nk), 5e-4);
    snprintf(name, sizeof name, "attention B dv T=%d hd=%d", T, hd);
    cc_expect(name, cc_nmse(ggv, rv, nk), 5e-4);
    free(q); free(k); free(v); free(dO); free(o); free(lse); free(rq); free(rk); free(rv);
    free(go); free(glse); free(ggq); free(ggk); free(ggv);
    zb_cuda_release(dq_); zb_cuda_release(dk_); zb_cuda_release(dv_); zb_cuda_release(ddO);
    zb_cuda_release(dout); zb_cuda_release(gq); zb_cuda_release(gk); zb_cuda_release(gv);
    zb_cuda_release(dlse); zb_cuda_release(scratch);
}

static void test_swiglu(size_t n)
{
    char name[96];
    float *a = cd_rand_bf16(n, 4.0f), *b = cd_rand_bf16(n, 2.0f), *dh = cd_rand_bf16(n, 1.0f);
    zb_bf16 *da_ = cd_up_bf16(a, n), *db_ = cd_up_bf16(b, n), *ddh = cd_up_bf16(dh, n);
    zb_bf16 *dhs = cd_dev_zero(n * 2), *gda = cd_dev_zero(n * 2), *gdb = cd_dev_zero(n * 2);
    CC_OK(zb_cuda_swiglu_forward(ctx, dhs, da_, db_, n, err));
    CC_OK(zb_cuda_swiglu_backward(ctx, gda, gdb, ddh, da_, db_, n, err));
    float *hs = malloc(n * 4), *ra = malloc(n * 4), *rb = malloc(n * 4);
    kern_swiglu_forward(hs, a, b, n);
    kern_swiglu_backward(ra, rb, dh, a, b, n);
    float *g1 = cd_down_bf16(dhs, n), *g2 = cd_down_bf16(gda, n), *g3 = cd_down_bf16(gdb, n);
    snprintf(name, sizeof name, "swiglu F n=%zu", n);
    cc_expect(name, cc_nmse(g1, hs, n), 1e-4);
    snprintf(name, sizeof name, "swiglu B da n=%zu", n);
    cc_expect(name, cc_nmse(g2, ra, n), 1e-4);
    snprintf(name, sizeof name, "swiglu B db n=%zu", n);
    cc_expect(name, cc_nmse(g3, rb, n), 1e-4);
    free(a); free(b); free(dh); free(hs); free(ra); free(rb); free(g1); free(g2); free(g3);
    zb_cuda_release(da_); zb_cuda_release(db_); zb_cuda_release(ddh); zb_cuda_release(dhs);
    zb_cuda_release(gda); zb_cuda_release(gdb);
}

static void test_crossentropy(int N, int V)
{
    char name[96];
    size_t n = (size_t)N * V;
    float *lg = cd_rand_bf16(n, 5.0f);
    int32_t *tg = malloc(sizeof *tg * N);
    for (int i = 0; i < N; i++)
        tg[i] = (int32_t)((cd_urand(1.0f) + 1.0f) * 0.5f * (V - 1));
    zb_bf16 *dlg = cd_up_bf16(lg, n), *gd = cd_dev_zero(n * 2);
    int32_t *dtg = cd_up_raw(tg, sizeof *tg * N);
    float *dlse = cd_dev_zero((size_t)N * 4), *dloss = cd_dev_zero((size_t)N * 4);
    double *dsum = cd_dev_zero(sizeof(double));
    CC_OK(zb_cuda_crossentropy_forward(ctx, dlse, dloss, dlg, dtg, N, V, err));
    CC_OK(zb_cuda_sum_f64(ctx, dsum, dloss, (size_t)N, 0, err));
    CC_OK(zb_cuda_crossentropy_backward(ctx, gd, dlg, dlse, dtg, 0.5f, N, V, err));
    float *lse = malloc((size_t)N * 4), *dref = malloc(n * 4);
    double mean = kern_crossentropy_forward(lse, lg, tg, N, V);
    kern_crossentropy_backward(dref, lg, lse, tg, 0.5f, N, V);
    float *glse = cd_down_f32(dlse, (size_t)N), *gdl = cd_down_bf16(gd, n);
    double sum = 0;
    CC_OK(zb_cuda_download(ctx, &sum, dsum, sizeof sum, err));
    float gm = (float)(sum / N), rm = (float)mean;
    snprintf(name, sizeof name, "cross-entropy F lse N=%d V=%d", N, V);
    cc_expect(name, cc_nmse(glse, lse, (size_t)N), 1e-8);
    snprintf(name, sizeof name, "cross-entropy F mean loss N=%d V=%d", N, V);
    cc_expect(name, cc_nmse(&gm, &rm, 1), 1e-8);
    snprintf(name, sizeof name, "cross-entropy B N=%d V=%d", N, V);
    cc_expect(name, cc_nmse(gdl, dref, n), 1e-4);
    free(lg); free(tg); free(lse); free(dref); free(glse); free(gdl);
    zb_cuda_release(dlg); zb_cuda_release(gd); zb_cuda_release(dtg); zb_cuda_release(dlse);
    zb_cuda_release(dloss); zb_cuda_release(dsum);
}

static void test_adamw(size_t n)
{
    char name[96];
    float *p = cd_rand_f32(n, 1.0f), *g = cd_rand_f32(n, 1.0f), *m = cd_rand_f32(n, 0.1f);
    float *v = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        v[i] = fabsf(cd_urand(0.01f));
    float *dp = cd_up_raw(p, n * 4), *dg = cd_up_raw(g, n * 4), *dm = cd_up_raw(m, n * 4);
    float *dv = cd_up_raw(v, n * 4);
    zb_bf16 *dpb = cd_dev_zero(n * 2);
    CC_OK(zb_cuda_adamw_update(ctx, dp, dpb, dg, dm, dv, n, 7, 1e-3f, 0.9f, 0.99f, 1e-8f, 0.1f,
                               0.5f, err));
    adamw_update(p, g, m, v, n, 7, 1e-3f, 0.9f, 0.99f, 1e-8f, 0.1f, 0.5f);
    float *gp = cd_down_f32(dp, n), *gm = cd_down_f32(dm, n), *gv = cd_down_f32(dv, n);
    float *gpb = cd_down_bf16(dpb, n);
    snprintf(name, sizeof name, "adamw params n=%zu", n);
    cc_expect(name, cc_nmse(gp, p, n), 1e-12);
    snprintf(name, sizeof name, "adamw m, v n=%zu", n);
    cc_expect(name, cc_nmse(gm, m, n) + cc_nmse(gv, v, n), 1e-12);
    snprintf(name, sizeof name, "adamw bf16 copy n=%zu", n);
    cc_expect(name, cc_nmse(gpb, p, n), 1e-4);
    free(p); free(g); free(m); free(v); free(gp); free(gm); free(gv); free(gpb);
    zb_cuda_release(dp); zb_cuda_release(dg); zb_cuda_release(dm); zb_cuda_release(dv);
    zb_cuda_release(dpb);
}

static void test_sum(size_t n)
{
    float *x = cd_rand_f32(n, 1.0f);
    float *dx = cd_up_raw(x, n * 4);
    double *ds = cd_dev_zero(sizeof(double)), got = 0, ref = 0;
    CC_OK(zb_cuda_sum_f64(ctx, ds, dx, n, 1, err));
    CC_OK(zb_cuda_download(ctx, &got, ds, sizeof got, err));
    for (size_t i = 0; i < n; i++)
        ref += (double)x[i] * x[i];
    float a = (float)got, b = (float)ref;
    cc_expect("sum of squares (f64)", cc_nmse(&a, &b, 1), 1e-12);
    free(x);
    zb_cuda_release(dx);
    zb_cuda_release(ds);
}

/* The comparison must be able to fail: a wrong matmul shape is caught. */
static void test_harness_can_fail(void)
{
    float a[4] = { 1, 2, 3, 4 }, b[4] = { 1, 2, 3, 5 };
    cc_true("harness rejects a wrong result", !(cc_nmse(a, b, 4) <= 1e-4));
}

int main(void)
{
    cc_require_device();
    kernels_init_threads(1);
    CC_OK(zb_cuda_create(0, &ctx, err));
    cd_init(ctx, 0x243f6a8885a308d3ull);
    test_harness_can_fail();
    test_embedding(256, 64, 65);
    test_embedding(1000, 96, 300);
    test_rmsnorm(256, 64);
    test_rmsnorm(333, 384);
    test_rmsnorm(64, 4096);
    test_matmul(256, 64, 64);
    test_matmul(200, 96, 136);
    test_matmul(512, 384, 1536);
    test_matmul(37, 23, 65);    /* odd leading dimensions: the cublasGemmEx fallback */
    test_matmul(128, 64, 65);   /* the LM head of a 65-character vocabulary */
    test_rope(2, 64, 4, 16);
    test_rope(2, 100, 6, 64);
    test_rope(1, 64, 2, 128);
    test_attention(2, 64, 4, 4, 16);
    test_attention(1, 100, 4, 2, 64);
    test_attention(2, 77, 6, 6, 64);
    test_attention(1, 130, 4, 1, 96);
    test_attention(1, 96, 8, 2, 128);
    test_swiglu(256 * 256);
    test_swiglu(12345);
    test_crossentropy(256, 65);
    test_crossentropy(64, 5000);
    test_adamw(100000);
    test_sum(1000003);
    zb_cuda_free(ctx);
    return cc_summary();
}
