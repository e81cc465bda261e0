/*
 * memory_layer.c: the product-key memory kernels declared in
 * memory_layer.h.
 *
 * The half-key scores of a chunk of LOOKUP_ROWS rows are one GEMM per
 * head and half (kern_gemm, single-threaded OpenBLAS: fixed bits for fixed
 * shapes), since they are most of the lookup's work.  The rest is plain
 * loops over k rows of the value table per head, with dot products in
 * double rounded to float once, in a fixed order.  The top-k selections keep a sorted list of k
 * (score, index) pairs and insert behind equal scores, so ties go to the
 * smaller index, as in a stable sort.
 */
#include "kernels/cpu/memory_layer.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/kernels.h"

/* Inserts (score, index) into the descending list best[0..*n) of capacity
 * k, behind entries of equal score (ties: earlier index wins). */
static void topk_insert(float *best_s, int *best_i, int *n, int k, float score, int index)
{
    if (*n == k && !(score > best_s[k - 1]))
        return;
    int pos = *n < k ? *n : k - 1;
    while (pos > 0 && score > best_s[pos - 1]) {
        best_s[pos] = best_s[pos - 1];
        best_i[pos] = best_i[pos - 1];
        pos--;
    }
    best_s[pos] = score;
    best_i[pos] = index;
    if (*n < k)
        (*n)++;
}

/* The k best of n_keys scores. */
static void scores_topk(float *best_s, int *best_i, const float *scores, int n_keys, int k)
{
    int n = 0;
    for (int a = 0; a < n_keys; a++)
        topk_insert(best_s, best_i, &n, k, scores[a], a);
    assert(n == k);
}

/* Rows scored per GEMM: the scratch is 2·LOOKUP_ROWS·n_keys floats. */
#define LOOKUP_ROWS 64

int kern_memory_lookup(int32_t *idx, float *w, const float *q, const float *keys,
                       const mem_shape *s, int N)
{
    int H = s->heads, kd = s->k_dim, half = kd / 2, nk = s->n_keys, k = s->topk;
    float *fs = malloc(sizeof(float) * (size_t)(3 * k));
    int *fi = malloc(sizeof(int) * (size_t)(3 * k));
    float *sc1 = malloc(sizeof(float) * (size_t)2 * LOOKUP_ROWS * nk);
    if (!fs || !fi || !sc1) {
        free(fs);
        free(fi);
        free(sc1);
        return -1;
    }
    float *sc2 = sc1 + (size_t)LOOKUP_ROWS * nk;
    float *s1 = fs, *s2 = fs + k, *sc = fs + 2 * k;
    int *a1 = fi, *b2 = fi + k, *ci = fi + 2 * k;
    for (int r0 = 0; r0 < N; r0 += LOOKUP_ROWS) {
        int rows = N - r0 < LOOKUP_ROWS ? N - r0 : LOOKUP_ROWS;
        for (int h = 0; h < H; h++) {
            const float *K1 = keys + (size_t)(2 * h) * nk * half;
            const float *K2 = keys + (size_t)(2 * h + 1) * nk * half;
            const float *qh = q + (size_t)r0 * H * kd + (size_t)h * kd;
            /* S1 = Q1 · K1ᵀ, S2 = Q2 · K2ᵀ for the chunk's rows */
            kern_gemm(0, 1, rows, nk, half, 1.0f, qh, H * kd, K1, half, 0.0f, sc1, nk);
            kern_gemm(0, 1, rows, nk, half, 1.0f, qh + half, H * kd, K2, half, 0.0f, sc2, nk);
            for (int r = 0; r < rows; r++) {
                int n = r0 + r;
                scores_topk(s1, a1, sc1 + (size_t)r * nk, nk, k);
                scores_topk(s2, b2, sc2 + (size_t)r * nk, nk, k);
                /* the k² sums, candidate c = i·k + j in row-major order */
                int m = 0;
                for (int i = 0; i < k; i++)
                    for (int j = 0; j < k; j++)
                        topk_insert(sc, ci, &m, k, s1[i] + s2[j], i * k + j);
                assert(m == k);
                int32_t *io = idx + ((size_t)n * H + h) * k;
                float *wo = w + ((size_t)n * H + h) * k;
                double mx = sc[0], sum = 0.0; /* sc is sorted: sc[0] is the largest */
                for (int j = 0; j < k; j++)
                    sum += exp((double)sc[j] - mx);
                for (int j = 0; j < k; j++) {
                    io[j] = (int32_t)(a1[ci[j] / k] * nk + b2[ci[j] % k]);
                    wo[j] = (float)(exp((double)sc[j] - mx) / sum);
                }
            }
        }
    }
    free(fs);
    free(fi);
    free(sc1);
    return 0;
}

void kern_memory_bag_forward(float *e, const int32_t *idx, const float *w,
                             const float *values, const mem_shape *s, int N)
{
    int H = s->heads, k = s->topk, v = s->v_dim;
    for (int n = 0; n < N; n++) {
        float *er = e + (size_t)n * v;
        memset(er, 0, sizeof(float) * (size_t)v);
        for (int hj = 0; hj < H * k; hj++) {
            size_t ent = (size_t)n * H * k + hj;
            const float *row = values + (size_t)idx[ent] * v;
            float wt = w[ent];
            for (int c = 0; c < v; c++)
                er[c] = er[c] + wt * row[c];
        }
    }
}

int kern_memory_backward_b(float *ds, float *dq, const float *de,
                            const int32_t *idx, const float *w,
                            const float *values, const float *keys,
                            const mem_shape *s, int N)
{
    int H = s->heads, kd = s->k_dim, half = kd / 2, nk = s->n_keys, k = s->topk;
    int v = s->v_dim;
    double *dw = malloc(sizeof(double) * (size_t)(k > 0 ? k : 1));
    double *acc = malloc(sizeof(double) * (size_t)kd);
    if (!dw || !acc) {
        free(dw);
        free(acc);
        return -1;
    }
    for (int n = 0; n < N; n++) {
        const float *der = de + (size_t)n * v;
        for (int h = 0; h < H; h++) {
            size_t base = ((size_t)n * H + h) * k;
            /* d(weight j) = <de, V[slot j]>, then the softmax backward */
            double dot = 0.0;
            for (int j = 0; j < k; j++) {
                const float *row = values + (size_t)idx[base + j] * v;
                double a = 0.0;
                for (int c = 0; c < v; c++)
                    a += (double)der[c] * row[c];
                dw[j] = a;
                dot += (double)w[base + j] * a;
            }
            for (int j = 0; j < k; j++)
                ds[base + j] = (float)((double)w[base + j] * (dw[j] - dot));
            /* the score of slot (a, b) is K1[a]·q1 + K2[b]·q2 */
            for (int t = 0; t < kd; t++)
                acc[t] = 0.0;
            const float *K1 = keys + (size_t)(2 * h) * nk * half;
            const float *K2 = keys + (size_t)(2 * h + 1) * nk * half;
            for (int j = 0; j < k; j++) {
                int a = idx[base + j] / nk, b = idx[base + j] % nk;
                double g = ds[base + j];
                const float *r1 = K1 + (size_t)a * half, *r2 = K2 + (size_t)b * half;
                for (int t = 0; t < half; t++) {
                    acc[t] += g * r1[t];
                    acc[half + t] += g * r2[t];
                }
            }
            float *dqh = dq + (size_t)n * H * kd + (size_t)h * kd;
            for (int t = 0; t < kd; t++)
                dqh[t] = (float)acc[t];
        }
    }
    free(dw);
    free(acc);
    return 0;
}

void kern_memory_keys_backward_w(float *dkeys, const float *ds, const float *q,
                                 const int32_t *idx, const mem_shape *s, int N)
{
    int H = s->heads, kd = s->k_dim, half = kd / 2, nk = s->n_keys, k = s->topk;
    memset(dkeys, 0, sizeof(float) * (size_t)H * 2 * nk * half);
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++) {
            const float *qh = q + (size_t)n * H * kd + (size_t)h * kd;
            float *K1 = dkeys + (size_t)(2 * h) * nk * half;
            float *K2 = dkeys + (size_t)(2 * h + 1) * nk * half;
            for (int j = 0; j < k; j++) {
                size_t ent = ((size_t)n * H + h) * k + j;
                int a = idx[ent] / nk, b = idx[ent] % nk;
                float g = ds[ent];
                float *r1 = K1 + (size_t)a * half, *r2 = K2 + (size_t)b * half;
                for (int t = 0; t < half; t++) {
                    r1[t] = r1[t] + g * qh[t];
                    r2[t] = r2[t] + g * qh[half + t];
                }
            }
        }
}

/* One read of the value table: the slot and the entry (n·H + h)·k + j. */
typedef struct value_read {
    int32_t slot;
    int32_t entry;
} value_read;

static int cmp_read(const void *pa, const void *pb)
{
    const value_read *a = pa, *b = pb;
    if (a->slot != b->slot)
        return a->slot < b->slot ? -1 : 1;
    return (a->entry > b->entry) - (a->entry < b->entry);
}

size_t kern_memory_values_scratch_bytes(const mem_shape *s, int N)
{
    size_t M = (size_t)N * s->heads * s->topk;
    return sizeof(value_read) * (M > 0 ? M : 1) + sizeof(float) * (size_t)s->v_dim;
}

int kern_memory_values_backward_w(float *dV, const int32_t *idx, const float *w,
                                  const float *de, const mem_shape *s, int N,
                                  void *scratch)
{
    int H = s->heads, k = s->topk, v = s->v_dim;
    size_t M = (size_t)N * H * k;
    value_read *reads = scratch;
    float *sum = (float *)(reads + (M > 0 ? M : 1));
    for (size_t e = 0; e < M; e++) {
        reads[e].slot = idx[e];
        reads[e].entry = (int32_t)e;
    }
    /* (slot, entry) pairs are distinct, so the order is total: the same
     * input always gives the same sequence of additions */
    qsort(reads, M, sizeof *reads, cmp_read);
    int rows = 0;
    for (size_t i = 0; i < M;) {
        int32_t slot = reads[i].slot;
        memset(sum, 0, sizeof(float) * (size_t)v);
        for (; i < M && reads[i].slot == slot; i++) {
            size_t e = (size_t)reads[i].entry;
            const float *der = de + (e / (size_t)(H * k)) * v;
            float wt = w[e];
            for (int c = 0; c < v; c++)
                sum[c] = sum[c] + wt * der[c];
        }
        float *row = dV + (size_t)slot * v;
        for (int c = 0; c < v; c++)
            row[c] = row[c] + sum[c];
        rows++;
    }
    return rows;
}
