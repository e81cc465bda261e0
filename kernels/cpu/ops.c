/*
 * ops.c: the layer kernels declared in ops.h.
 *
 * Plain loops for the elementwise and per-row work, kern_gemm for every
 * product (including the per-head attention products, which address a
 * head's columns inside the [N, heads·hd] activations through the leading
 * dimension instead of copying).  Per-row sums run in double: they are
 * cheap next to the GEMMs and keep the fp32 results close to the JAX
 * goldens.  The exponentials and the elementwise passes are vectorized
 * (vmath.h) and shared over the calling thread's team where the split
 * changes no bit.  The attention keeps no T×T probabilities between F and B:
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
#include "kernels/cpu/vmath.h"

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

/* One RMSNorm pass over rows, split over the team (rows are independent). */
typedef struct rms_job {
    float *out, *rstd;             /* forward outputs; out is dx for B */
    const float *x, *g, *dout;     /* inputs (dout: B only) */
    const float *rstd_in;          /* B: the forward's 1/rms */
    int d;                         /* row width */
} rms_job;

/* y = x·r·g for one row (the part of the forward that vectorizes). */
KERN_VECTOR static void rms_scale_row(float *restrict y, const float *restrict x,
                                      const float *restrict g, float r, int d)
{
    for (int j = 0; j < d; j++)
        y[j] = x[j] * r * g[j];
}

static void rmsnorm_forward_rows(void *p, int lo, int hi)
{
    const rms_job *jb = p;
    int d = jb->d;
    for (int n = lo; n < hi; n++) {
        const float *xr = jb->x + (size_t)n * d;
        double ss = 0.0;
        for (int j = 0; j < d; j++)
            ss += (double)xr[j] * xr[j];
        float r = (float)(1.0 / sqrt(ss / d + (double)KERN_RMSNORM_EPS));
        jb->rstd[n] = r;
        rms_scale_row(jb->out + (size_t)n * d, xr, jb->g, r, d);
    }
}

/* Rows per chunk below which a split is not worth a wake-up. */
static int rms_grain(int d) { return 1 + (1 << 15) / (d > 0 ? d : 1); }

void kern_rmsnorm_forward(float *out, float *rstd, const float *x,
                          const float *g, int N, int d)
{
    rms_job jb = { .out = out, .rstd = rstd, .x = x, .g = g, .d = d };
    kern_parallel(N, rms_grain(d), rmsnorm_forward_rows, &jb);
}

/* dx = r·(dy·g - x·r·mean) for one row. */
KERN_VECTOR static void rms_backward_row(float *restrict dxr, const float *restrict dy,
                                         const float *restrict xr, const float *restrict g,
                                         float r, float mean, int d)
{
    for (int j = 0; j < d; j++)
        dxr[j] = r * (dy[j] * g[j] - xr[j] * r * mean);
}

static void rmsnorm_backward_rows(void *p, int lo, int hi)
{
    const rms_job *jb = p;
    int d = jb->d;
    for (int n = lo; n < hi; n++) {
        const float *xr = jb->x + (size_t)n * d;
        const float *dy = jb->dout + (size_t)n * d;
        float r = jb->rstd_in[n];
        /* dot = Σ_j (dy·g)_j · x̂_j, x̂ = x·r */
        double dot = 0.0;
        for (int j = 0; j < d; j++)
            dot += (double)dy[j] * jb->g[j] * ((double)xr[j] * r);
        rms_backward_row(jb->out + (size_t)n * d, dy, xr, jb->g, r, (float)(dot / d), d);
    }
}

void kern_rmsnorm_backward_b(float *dx, const float *dout, const float *x,
                             const float *rstd, const float *g, int N, int d)
{
    rms_job jb = { .out = dx, .x = x, .g = g, .dout = dout, .rstd_in = rstd, .d = d };
    kern_parallel(N, rms_grain(d), rmsnorm_backward_rows, &jb);
}

KERN_VECTOR void kern_rmsnorm_backward_w(float *restrict dg, const float *restrict dout,
                                         const float *restrict x, const float *restrict rstd,
                                         int N, int d)
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

/* The (cos, sin) table of RoPE for T positions and hd/2 frequencies,
 * cs[(t·hd/2 + i)·2 + {0,1}], computed as kern_rope_row computes its
 * angles.  Kept per thread (scratch slot KERN_SCRATCH_ROPE) for the last
 * (T, hd, theta): every layer's q, k, dq and dk of a stage share it. */
static _Thread_local struct {
    int T, hd;          /* shape the table holds, 0: none */
    double theta;       /* its base */
    const float *cs;    /* the table, inside the scratch slot */
} rope_cache;

static const float *rope_table(int T, int hd, double theta)
{
    size_t bytes = sizeof(float) * (size_t)T * (size_t)hd;
    float *cs = kern_scratch(KERN_SCRATCH_ROPE, bytes);
    if (!cs)
        return NULL;
    if (rope_cache.cs == cs && rope_cache.T == T && rope_cache.hd == hd &&
        rope_cache.theta == theta)
        return cs;
    for (int i = 0; i < hd / 2; i++) {
        double freq = pow(theta, -2.0 * i / hd);
        for (int t = 0; t < T; t++) {
            double ang = t * freq;
            cs[((size_t)t * (hd / 2) + i) * 2] = (float)cos(ang);
            cs[((size_t)t * (hd / 2) + i) * 2 + 1] = (float)sin(ang);
        }
    }
    rope_cache.cs = cs;
    rope_cache.T = T;
    rope_cache.hd = hd;
    rope_cache.theta = theta;
    return cs;
}

/* Rotates row r's n_heads pairs by the angles of table row cs_t. */
KERN_VECTOR static void rope_apply_row(float *restrict row, const float *restrict cs_t,
                                       int n_heads, int hd, float sign)
{
    for (int h = 0; h < n_heads; h++) {
        float *p = row + h * hd;
        for (int i = 0; i < hd / 2; i++) {
            float c = cs_t[2 * i], s = cs_t[2 * i + 1] * sign;
            float x0 = p[2 * i], x1 = p[2 * i + 1];
            p[2 * i] = x0 * c - x1 * s;
            p[2 * i + 1] = x0 * s + x1 * c;
        }
    }
}

typedef struct rope_job {
    float *x;            /* [N, n_heads·hd] */
    const float *cs;     /* the table */
    int T, n_heads, hd;  /* shape */
    float sign;          /* 1 forward, -1 inverse */
} rope_job;

static void rope_rows(void *p, int lo, int hi)
{
    const rope_job *j = p;
    size_t width = (size_t)j->n_heads * j->hd;
    for (int r = lo; r < hi; r++)
        rope_apply_row(j->x + (size_t)r * width, j->cs + (size_t)(r % j->T) * j->hd,
                       j->n_heads, j->hd, j->sign);
}

void kern_rope(float *x, int N, int T, int n_heads, int hd, double theta,
               int inverse)
{
    assert(hd % 2 == 0 && N % T == 0);
    const float *cs = rope_table(T, hd, theta);
    if (!cs) {
        /* no scratch: one row at a time with its own angles (same bits) */
        for (int r = 0; r < N; r++) {
            float *row = x + (size_t)r * n_heads * hd;
            for (int i = 0; i < hd / 2; i++) {
                double ang = (r % T) * pow(theta, -2.0 * i / hd);
                float c = (float)cos(ang), s = (float)sin(ang) * (inverse ? -1.0f : 1.0f);
                for (int h = 0; h < n_heads; h++) {
                    float *q = row + h * hd + 2 * i;
                    float x0 = q[0], x1 = q[1];
                    q[0] = x0 * c - x1 * s;
                    q[1] = x0 * s + x1 * c;
                }
            }
        }
        return;
    }
    rope_job j = { .x = x, .cs = cs, .T = T, .n_heads = n_heads, .hd = hd,
                   .sign = inverse ? -1.0f : 1.0f };
    kern_parallel(N, 1 + (1 << 14) / (n_heads * hd), rope_rows, &j);
}

void kern_rope_row(float *row, int pos, int n_heads, int hd, double theta)
{
    assert(hd % 2 == 0);
    /* the same angle and rounding as kern_rope's row at t = pos */
    for (int i = 0; i < hd / 2; i++) {
        double freq = pow(theta, -2.0 * i / hd);
        double ang = pos * freq;
        float c = (float)cos(ang);
        float s = (float)sin(ang);
        for (int h = 0; h < n_heads; h++) {
            float *p = row + h * hd + 2 * i;
            float x0 = p[0], x1 = p[1];
            p[0] = x0 * c - x1 * s;
            p[1] = x0 * s + x1 * c;
        }
    }
}

/* Query rows per block of the causal attention: a block of QB rows needs
 * the scores against keys [0, r0 + QB) only, so the blocks skip what the
 * mask would zero (37.5% of the products at T = 256) and keep their
 * QB × T scores (64 KiB at T = 256) in the core's L2 between the product
 * that makes them and the one that uses them. */
enum { ATTN_QB = 64 };

/* Row log-sum-exp of row[0..n) in double, the exponentials in float:
 * Σ exp(row[j] - mx) with four partial sums by j mod 4, added in a fixed
 * order (tmp: n floats of scratch). */
KERN_VECTOR static float row_lse(const float *restrict row, float *restrict tmp, int n)
{
    float mx = row[0];
    for (int j = 1; j < n; j++)
        mx = row[j] > mx ? row[j] : mx;
    for (int j = 0; j < n; j++)
        tmp[j] = kern_expf(row[j] - mx);
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        s0 += tmp[j];
        s1 += tmp[j + 1];
        s2 += tmp[j + 2];
        s3 += tmp[j + 3];
    }
    for (; j < n; j++)
        s0 += tmp[j];
    return mx + (float)log((s0 + s1) + (s2 + s3));
}

/* row[j] = exp(row[j] - l) for j < n, 0 for n <= j < cols. */
KERN_VECTOR static void row_probs(float *restrict row, int n, int cols, float l)
{
    for (int j = 0; j < n; j++)
        row[j] = kern_expf(row[j] - l);
    for (int j = n; j < cols; j++)
        row[j] = 0.0f;
}

/* dS[j] = P[j]·(dP[j] - D) for j < n (in place over dP), 0 up to cols. */
KERN_VECTOR static void row_dscores(float *restrict ds, const float *restrict pr, int n, int cols,
                                    float D)
{
    for (int j = 0; j < n; j++)
        ds[j] = pr[j] * (ds[j] - D);
    for (int j = n; j < cols; j++)
        ds[j] = 0.0f;
}

/* Scores of query rows [r0, r0+rows) of one head against keys [0, cols),
 * cols = r0 + rows: S = scale · q k[0:cols]ᵀ into P [rows, cols] (leading
 * dimension cols), then P = exp(S - lse) on and below the diagonal and 0
 * above it.  When lse_out is set the row log-sum-exp is computed and
 * stored there first (forward); otherwise lse_in is used (backward), so
 * both passes get P from the same code.  tmp: cols floats. */
static void attention_block_probs(float *P, float *tmp, const float *qh, int qld,
                                  const float *kg, int kld, int r0, int rows, int hd,
                                  float *lse_out, const float *lse_in)
{
    int cols = r0 + rows;
    float scale = 1.0f / sqrtf((float)hd);
    kern_gemm(0, 1, rows, cols, hd, scale, qh + (size_t)r0 * qld, qld, kg, kld, 0.0f, P, cols);
    for (int i = 0; i < rows; i++) {
        float *row = P + (size_t)i * cols;
        int n = r0 + i + 1; /* causal: keys 0..r0+i */
        float l;
        if (lse_out)
            lse_out[r0 + i] = l = row_lse(row, tmp, n);
        else
            l = lse_in[r0 + i];
        row_probs(row, n, cols, l);
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
    int qb = T < ATTN_QB ? T : ATTN_QB;
    float *P = kern_scratch(KERN_SCRATCH_ATTN, sizeof(float) * ((size_t)qb * T + T));
    if (!P) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    float *tmp = P + (size_t)qb * T;
    for (int b = b0; b < b1; b++) {
        for (int h = 0; h < nh; h++) {
            int g = h / rep;
            const float *qh = j->q + (size_t)b * T * qd + h * hd;
            const float *kg = j->k + (size_t)b * T * kvd + g * hd;
            const float *vg = j->v + (size_t)b * T * kvd + g * hd;
            float *oh = j->o + (size_t)b * T * qd + h * hd;
            float *lse = j->lse + ((size_t)b * nh + h) * T;
            for (int r0 = 0; r0 < T; r0 += qb) {
                int rows = T - r0 < qb ? T - r0 : qb, cols = r0 + rows;
                attention_block_probs(P, tmp, qh, qd, kg, kvd, r0, rows, hd, lse, NULL);
                /* o[r0:r0+rows] = P · v[0:cols] */
                kern_gemm(0, 0, rows, hd, cols, 1.0f, P, cols, vg, kvd, 0.0f,
                          oh + (size_t)r0 * qd, qd);
            }
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

/* Σ_c a[c]·b[c] over n floats, in double, in order. */
static float dot_double(const float *a, const float *b, int n)
{
    double D = 0.0;
    for (int c = 0; c < n; c++)
        D += (double)a[c] * b[c];
    return (float)D;
}

/* Backward of sequences [b0, b1): each its own rows of dq, dk, dv. */
static void attention_backward_seqs(void *p, int b0, int b1)
{
    attn_job *j = p;
    int T = j->T, nh = j->nh, hd = j->hd, qd = nh * hd, kvd = j->nkv * hd, rep = nh / j->nkv;
    int qb = T < ATTN_QB ? T : ATTN_QB;
    const float *q = j->q, *k = j->k, *v = j->v, *o = j->o_in, *do_ = j->do_;
    float *dq = j->dq, *dk = j->dk, *dv = j->dv;
    float scale = 1.0f / sqrtf((float)hd);
    float *P = kern_scratch(KERN_SCRATCH_ATTN, sizeof(float) * ((size_t)qb * T * 2 + T));
    if (!P) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    float *dS = P + (size_t)qb * T, *tmp = dS + (size_t)qb * T;
    for (int b = b0; b < b1; b++) {
        for (int h = 0; h < nh; h++) {
            int g = h / rep;
            size_t qoff = (size_t)b * T * qd + h * hd;
            size_t kvoff = (size_t)b * T * kvd + g * hd;
            /* every query block of every head of the group adds into its
             * KV head's dk and dv, in (head, block) order, from zero */
            if (h % rep == 0)
                for (int t = 0; t < T; t++) {
                    memset(dk + kvoff + (size_t)t * kvd, 0, sizeof(float) * (size_t)hd);
                    memset(dv + kvoff + (size_t)t * kvd, 0, sizeof(float) * (size_t)hd);
                }
            for (int r0 = 0; r0 < T; r0 += qb) {
                int rows = T - r0 < qb ? T - r0 : qb, cols = r0 + rows;
                const float *dob = do_ + qoff + (size_t)r0 * qd;
                attention_block_probs(P, tmp, q + qoff, qd, k + kvoff, kvd, r0, rows, hd, NULL,
                                      j->lse_in + ((size_t)b * nh + h) * T);
                /* dv[0:cols] += Pᵀ · dO_blk */
                kern_gemm(1, 0, cols, hd, rows, 1.0f, P, cols, dob, qd, 1.0f, dv + kvoff, kvd);
                /* dP = dO_blk · v[0:cols]ᵀ, then dS = P ⊙ (dP - rowsum(dO ⊙ O)) */
                kern_gemm(0, 1, rows, cols, hd, 1.0f, dob, qd, v + kvoff, kvd, 0.0f, dS, cols);
                for (int i = 0; i < rows; i++) {
                    size_t r = (size_t)(r0 + i) * qd;
                    float D = dot_double(do_ + qoff + r, o + qoff + r, hd);
                    row_dscores(dS + (size_t)i * cols, P + (size_t)i * cols, r0 + i + 1, cols, D);
                }
                /* dq_blk = scale · dS · k[0:cols] ;  dk[0:cols] += scale · dSᵀ · q_blk */
                kern_gemm(0, 0, rows, hd, cols, scale, dS, cols, k + kvoff, kvd, 0.0f,
                          dq + qoff + (size_t)r0 * qd, qd);
                kern_gemm(1, 0, cols, hd, rows, scale, dS, cols, q + qoff + (size_t)r0 * qd, qd,
                          1.0f, dk + kvoff, kvd);
            }
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

/* dst = a + b over [lo, hi); dst may alias a or b exactly (no restrict:
 * the compiler checks the overlap and vectorizes either way). */
KERN_VECTOR static void add_range(float *dst, const float *a, const float *b, size_t lo, size_t hi)
{
    for (size_t i = lo; i < hi; i++)
        dst[i] = a[i] + b[i];
}

typedef struct add_job {
    float *dst;          /* output */
    const float *a, *b;  /* inputs */
    size_t n;            /* elements */
} add_job;
enum { ADD_CHUNK = 32768 };

static void add_chunks(void *p, int lo, int hi)
{
    const add_job *j = p;
    size_t e0 = (size_t)lo * ADD_CHUNK, e1 = (size_t)hi * ADD_CHUNK;
    add_range(j->dst, j->a, j->b, e0, e1 < j->n ? e1 : j->n);
}

void kern_add(float *dst, const float *a, const float *b, size_t n)
{
    add_job j = { dst, a, b, n };
    kern_parallel((int)((n + ADD_CHUNK - 1) / ADD_CHUNK), 4, add_chunks, &j);
}

KERN_VECTOR static void swiglu_forward_range(float *restrict hs, const float *restrict a,
                                             const float *restrict b, size_t lo, size_t hi)
{
    for (size_t i = lo; i < hi; i++) {
        float s = 1.0f / (1.0f + kern_expf(-a[i]));
        hs[i] = a[i] * s * b[i];
    }
}

KERN_VECTOR static void swiglu_backward_range(float *restrict da, float *restrict db,
                                              const float *restrict dhs, const float *restrict a,
                                              const float *restrict b, size_t lo, size_t hi)
{
    for (size_t i = lo; i < hi; i++) {
        float s = 1.0f / (1.0f + kern_expf(-a[i]));
        float silu = a[i] * s;
        /* silu'(a) = s + a·s·(1-s) */
        da[i] = dhs[i] * b[i] * (s * (1.0f + a[i] * (1.0f - s)));
        db[i] = dhs[i] * silu;
    }
}

/* The arguments of one elementwise SwiGLU pass, split in chunks of
 * SWIGLU_CHUNK elements over the team (elementwise: the split changes no
 * bit). */
typedef struct swiglu_job {
    float *out0, *out1;           /* hs (forward) or da, db (backward) */
    const float *dhs, *a, *b;     /* inputs (dhs: backward only) */
    size_t n;                     /* elements */
} swiglu_job;
enum { SWIGLU_CHUNK = 16384 };

static void swiglu_forward_chunks(void *p, int lo, int hi)
{
    const swiglu_job *j = p;
    size_t e0 = (size_t)lo * SWIGLU_CHUNK, e1 = (size_t)hi * SWIGLU_CHUNK;
    swiglu_forward_range(j->out0, j->a, j->b, e0, e1 < j->n ? e1 : j->n);
}

static void swiglu_backward_chunks(void *p, int lo, int hi)
{
    const swiglu_job *j = p;
    size_t e0 = (size_t)lo * SWIGLU_CHUNK, e1 = (size_t)hi * SWIGLU_CHUNK;
    swiglu_backward_range(j->out0, j->out1, j->dhs, j->a, j->b, e0, e1 < j->n ? e1 : j->n);
}

void kern_swiglu_forward(float *hs, const float *a, const float *b, size_t n)
{
    swiglu_job j = { .out0 = hs, .a = a, .b = b, .n = n };
    kern_parallel((int)((n + SWIGLU_CHUNK - 1) / SWIGLU_CHUNK), 8, swiglu_forward_chunks, &j);
}

void kern_swiglu_backward(float *da, float *db, const float *dhs,
                          const float *a, const float *b, size_t n)
{
    swiglu_job j = { .out0 = da, .out1 = db, .dhs = dhs, .a = a, .b = b, .n = n };
    kern_parallel((int)((n + SWIGLU_CHUNK - 1) / SWIGLU_CHUNK), 8, swiglu_backward_chunks, &j);
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
