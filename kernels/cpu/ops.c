/*
 * ops.c: the layer kernels declared in ops.h.
 *
 * Plain loops for the elementwise and per-row work, kern_gemm for every
 * product (including the per-head attention products, which address a
 * head's columns inside the [N, heads·hd] activations through the leading
 * dimension instead of copying).  Per-row sums run in double: they are
 * cheap next to the GEMMs and keep the fp32 results close to the JAX
 * goldens.  The attention keeps no T×T probabilities between F and B:
 * backward recomputes P = exp(S - lse) from q, k and the saved row
 * log-sum-exp, exactly as the forward computed it, so both see the same P.
 */
#include "kernels/cpu/ops.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/team.h"

void kern_embedding_forward(float *out, const int32_t *tokens, const float *E,
                            int N, int d)
{
    for (int n = 0; n < N; n++)
        memcpy(out + (size_t)n * d, E + (size_t)tokens[n] * d,
               sizeof(float) * (size_t)d);
}

void kern_embedding_backward_w(float *dE, const int32_t *tokens,
                               const float *dout, int N, int d, int V)
{
    memset(dE, 0, sizeof(float) * (size_t)V * (size_t)d);
    for (int n = 0; n < N; n++) {
        assert(tokens[n] >= 0 && tokens[n] < V);
        float *row = dE + (size_t)tokens[n] * d;
        const float *g = dout + (size_t)n * d;
        for (int j = 0; j < d; j++)
            row[j] += g[j];
    }
}

void kern_rmsnorm_forward(float *out, float *rstd, const float *x,
                          const float *g, int N, int d)
{
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * d;
        float *yr = out + (size_t)n * d;
        double ss = 0.0;
        for (int j = 0; j < d; j++)
            ss += (double)xr[j] * xr[j];
        float r = (float)(1.0 / sqrt(ss / d + (double)KERN_RMSNORM_EPS));
        rstd[n] = r;
        for (int j = 0; j < d; j++)
            yr[j] = xr[j] * r * g[j];
    }
}

void kern_rmsnorm_backward_b(float *dx, const float *dout, const float *x,
                             const float *rstd, const float *g, int N, int d)
{
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * d;
        const float *dy = dout + (size_t)n * d;
        float *dxr = dx + (size_t)n * d;
        float r = rstd[n];
        /* dot = Σ_j (dy·g)_j · x̂_j, x̂ = x·r */
        double dot = 0.0;
        for (int j = 0; j < d; j++)
            dot += (double)dy[j] * g[j] * ((double)xr[j] * r);
        float mean = (float)(dot / d);
        for (int j = 0; j < d; j++)
            dxr[j] = r * (dy[j] * g[j] - xr[j] * r * mean);
    }
}

void kern_rmsnorm_backward_w(float *dg, const float *dout, const float *x,
                             const float *rstd, int N, int d)
{
    memset(dg, 0, sizeof(float) * (size_t)d);
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * d;
        const float *dy = dout + (size_t)n * d;
        float r = rstd[n];
        for (int j = 0; j < d; j++)
            dg[j] += dy[j] * (xr[j] * r);
    }
}

void kern_matmul_forward(float *Y, const float *X, const float *W, int N,
                         int in, int out)
{
    kern_gemm(0, 0, N, out, in, 1.0f, X, in, W, out, 0.0f, Y, out);
}

void kern_matmul_backward_b(float *dX, const float *dY, const float *W, int N,
                            int in, int out)
{
    kern_gemm(0, 1, N, in, out, 1.0f, dY, out, W, out, 0.0f, dX, in);
}

void kern_matmul_backward_w(float *dW, const float *X, const float *dY, int N,
                            int in, int out)
{
    kern_gemm(1, 0, in, out, N, 1.0f, X, in, dY, out, 0.0f, dW, out);
}

void kern_rope(float *x, int N, int T, int n_heads, int hd, double theta,
               int inverse)
{
    assert(hd % 2 == 0 && N % T == 0);
    int width = n_heads * hd;
    /* One (cos, sin) per (t, i), applied to every sequence and head: T·hd/2
     * trig calls instead of N·heads·hd/2. */
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < hd / 2; i++) {
            double freq = pow(theta, -2.0 * i / hd);
            double ang = t * freq;
            float c = (float)cos(ang);
            float s = (float)sin(ang);
            if (inverse)
                s = -s;
            for (int r = t; r < N; r += T) {
                float *row = x + (size_t)r * width;
                for (int h = 0; h < n_heads; h++) {
                    float *p = row + h * hd + 2 * i;
                    float x0 = p[0], x1 = p[1];
                    p[0] = x0 * c - x1 * s;
                    p[1] = x0 * s + x1 * c;
                }
            }
        }
    }
}

/* S[T,T] = scale · q_h k_gᵀ, then P = exp(S - lse) below the diagonal and
 * 0 above it.  When lse_out is set, the row log-sum-exp is computed and
 * stored there first (forward); otherwise lse_in is used (backward). */
static void attention_probs(float *P, const float *qh, int qld,
                            const float *kg, int kld, int T, int hd,
                            float *lse_out, const float *lse_in)
{
    float scale = 1.0f / sqrtf((float)hd);
    kern_gemm(0, 1, T, T, hd, scale, qh, qld, kg, kld, 0.0f, P, T);
    for (int i = 0; i < T; i++) {
        float *row = P + (size_t)i * T;
        float l;
        if (lse_out) {
            float mx = row[0];
            for (int j = 1; j <= i; j++)
                mx = row[j] > mx ? row[j] : mx;
            double sum = 0.0;
            for (int j = 0; j <= i; j++)
                sum += exp((double)row[j] - mx);
            l = mx + (float)log(sum);
            lse_out[i] = l;
        } else {
            l = lse_in[i];
        }
        for (int j = 0; j <= i; j++)
            row[j] = expf(row[j] - l);
        for (int j = i + 1; j < T; j++)
            row[j] = 0.0f;
    }
}

/* The arguments of one attention call, shared by its chunks of sequences. */
typedef struct attn_job {
    float *o, *lse, *dq, *dk, *dv;             /* outputs (forward: o, lse) */
    const float *q, *k, *v, *o_in, *do_, *lse_in; /* inputs */
    int T, nh, nkv, hd;                        /* shapes */
    int failed;                                /* 1 when a chunk had no scratch */
} attn_job;

/* Forward of sequences [b0, b1): each its own rows of o and lse. */
static void attention_forward_seqs(void *p, int b0, int b1)
{
    attn_job *j = p;
    int T = j->T, nh = j->nh, hd = j->hd, qd = nh * hd, kvd = j->nkv * hd, rep = nh / j->nkv;
    float *P = kern_scratch(KERN_SCRATCH_ATTN, sizeof(float) * (size_t)T * T);
    if (!P) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int b = b0; b < b1; b++) {
        for (int h = 0; h < nh; h++) {
            int g = h / rep;
            const float *qh = j->q + (size_t)b * T * qd + h * hd;
            const float *kg = j->k + (size_t)b * T * kvd + g * hd;
            const float *vg = j->v + (size_t)b * T * kvd + g * hd;
            float *oh = j->o + (size_t)b * T * qd + h * hd;
            attention_probs(P, qh, qd, kg, kvd, T, hd,
                            j->lse + ((size_t)b * nh + h) * T, NULL);
            kern_gemm(0, 0, T, hd, T, 1.0f, P, T, vg, kvd, 0.0f, oh, qd);
        }
    }
}

int kern_attention_forward(float *o, float *lse, const float *q,
                           const float *k, const float *v, int B, int T,
                           int nh, int nkv, int hd)
{
    assert(nh % nkv == 0);
    attn_job j = { .o = o, .lse = lse, .q = q, .k = k, .v = v, .T = T, .nh = nh, .nkv = nkv,
                   .hd = hd };
    /* sequences are independent: the split changes no result */
    kern_parallel(B, 1, attention_forward_seqs, &j);
    return j.failed ? -1 : 0;
}

/* Backward of sequences [b0, b1): each its own rows of dq, dk, dv. */
static void attention_backward_seqs(void *p, int b0, int b1)
{
    attn_job *j = p;
    int T = j->T, nh = j->nh, hd = j->hd, qd = nh * hd, kvd = j->nkv * hd, rep = nh / j->nkv;
    const float *q = j->q, *k = j->k, *v = j->v, *o = j->o_in, *do_ = j->do_;
    float *dq = j->dq, *dk = j->dk, *dv = j->dv;
    float scale = 1.0f / sqrtf((float)hd);
    float *P = kern_scratch(KERN_SCRATCH_ATTN, sizeof(float) * (size_t)T * T * 2);
    if (!P) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    float *dS = P + (size_t)T * T;
    for (int b = b0; b < b1; b++) {
        for (int h = 0; h < nh; h++) {
            int g = h / rep;
            /* the first query head of a group writes its KV head's grads,
             * the others add to them, always in head order */
            float beta = (h % rep == 0) ? 0.0f : 1.0f;
            size_t qoff = (size_t)b * T * qd + h * hd;
            size_t kvoff = (size_t)b * T * kvd + g * hd;
            attention_probs(P, q + qoff, qd, k + kvoff, kvd, T, hd, NULL,
                            j->lse_in + ((size_t)b * nh + h) * T);
            /* dv_g (+)= Pᵀ · dO_h */
            kern_gemm(1, 0, T, hd, T, 1.0f, P, T, do_ + qoff, qd, beta,
                      dv + kvoff, kvd);
            /* dP = dO_h · v_gᵀ, then dS = P ⊙ (dP - rowsum(dO ⊙ O)) */
            kern_gemm(0, 1, T, T, hd, 1.0f, do_ + qoff, qd, v + kvoff, kvd,
                      0.0f, dS, T);
            for (int i = 0; i < T; i++) {
                const float *dor = do_ + qoff + (size_t)i * qd;
                const float *or_ = o + qoff + (size_t)i * qd;
                double D = 0.0;
                for (int c = 0; c < hd; c++)
                    D += (double)dor[c] * or_[c];
                float Df = (float)D;
                float *ds = dS + (size_t)i * T;
                const float *pr = P + (size_t)i * T;
                for (int jj = 0; jj <= i; jj++)
                    ds[jj] = pr[jj] * (ds[jj] - Df);
                for (int jj = i + 1; jj < T; jj++)
                    ds[jj] = 0.0f;
            }
            /* dq_h = scale · dS · k_g ;  dk_g (+)= scale · dSᵀ · q_h */
            kern_gemm(0, 0, T, hd, T, scale, dS, T, k + kvoff, kvd, 0.0f,
                      dq + qoff, qd);
            kern_gemm(1, 0, T, hd, T, scale, dS, T, q + qoff, qd, beta,
                      dk + kvoff, kvd);
        }
    }
}

int kern_attention_backward(float *dq, float *dk, float *dv, const float *do_,
                            const float *q, const float *k, const float *v,
                            const float *o, const float *lse, int B, int T,
                            int nh, int nkv, int hd)
{
    assert(nh % nkv == 0);
    attn_job j = { .dq = dq, .dk = dk, .dv = dv, .q = q, .k = k, .v = v, .o_in = o,
                   .do_ = do_, .lse_in = lse, .T = T, .nh = nh, .nkv = nkv, .hd = hd };
    kern_parallel(B, 1, attention_backward_seqs, &j);
    return j.failed ? -1 : 0;
}

static inline float sigmoidf(float a) { return 1.0f / (1.0f + expf(-a)); }

void kern_swiglu_forward(float *hs, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        hs[i] = a[i] * sigmoidf(a[i]) * b[i];
}

void kern_swiglu_backward(float *da, float *db, const float *dhs,
                          const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float s = sigmoidf(a[i]);
        float silu = a[i] * s;
        /* silu'(a) = s + a·s·(1-s) */
        da[i] = dhs[i] * b[i] * (s * (1.0f + a[i] * (1.0f - s)));
        db[i] = dhs[i] * silu;
    }
}

double kern_crossentropy_forward(float *lse, const float *logits,
                                 const int32_t *targets, int N, int V)
{
    double total = 0.0;
    for (int n = 0; n < N; n++) {
        const float *row = logits + (size_t)n * V;
        float mx = row[0];
        for (int j = 1; j < V; j++)
            mx = row[j] > mx ? row[j] : mx;
        double sum = 0.0;
        for (int j = 0; j < V; j++)
            sum += exp((double)row[j] - mx);
        double l = mx + log(sum);
        lse[n] = (float)l;
        total += l - row[targets[n]];
    }
    return total / N;
}

void kern_crossentropy_backward(float *dlogits, const float *logits,
                                const float *lse, const int32_t *targets,
                                float dloss, int N, int V)
{
    float scale = dloss / (float)N;
    for (int n = 0; n < N; n++) {
        const float *row = logits + (size_t)n * V;
        float *dr = dlogits + (size_t)n * V;
        for (int j = 0; j < V; j++)
            dr[j] = expf(row[j] - lse[n]) * scale;
        dr[targets[n]] -= scale;
    }
}
