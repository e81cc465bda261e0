/*
 * vocab_shard.c: the vocabulary-sharded output layer (vocab_shard.h).
 *
 * The per-shard work (logits, the local softmax partial, the logit
 * gradient) is the unsharded head's arithmetic restricted to the shard's
 * columns, so that the gradients stay as close to the plain model's as a
 * regrouped sum allows.  The combines are where the shards meet: they are
 * the only functions that read several shards, and they read them in
 * shard order with double accumulators, which is what makes the result
 * independent of the schedule (vocab_shard.h).
 */
#include "kernels/cpu/vocab_shard.h"

#include <assert.h>
#include <math.h>
#include <stddef.h>

#include "kernels/cpu/ops.h"

int vshard_begin(int k, int p, int V)
{
    assert(p > 0 && k >= 0 && k <= p);
    return (int)((int64_t)k * V / p);
}

int vshard_owner(int y, int p, int V)
{
    assert(y >= 0 && y < V);
    /* the largest k with begin(k) <= y; the guess is within one */
    int k = (int)(((int64_t)y * p) / V);
    while (k + 1 < p && vshard_begin(k + 1, p, V) <= y)
        k++;
    while (k > 0 && vshard_begin(k, p, V) > y)
        k--;
    return k;
}

void vshard_gather(float *w, const float *H, int d, int V, int v0, int v)
{
    for (int r = 0; r < d; r++)
        for (int j = 0; j < v; j++)
            w[(size_t)r * v + j] = H[(size_t)r * V + v0 + j];
}

void vshard_scatter_add(float *H, const float *dw, int d, int V, int v0, int v)
{
    for (int r = 0; r < d; r++)
        for (int j = 0; j < v; j++) {
            float *h = &H[(size_t)r * V + v0 + j];
            *h = *h + dw[(size_t)r * v + j];
        }
}

void vshard_forward(float *logits, float *row_max, double *row_sum, float *tgt, float *ex,
                    const float *x, const float *w, const int32_t *targets, int v0,
                    int N, int d, int v)
{
    kern_matmul_forward(logits, x, w, N, d, v);
    for (int n = 0; n < N; n++) {
        const float *row = logits + (size_t)n * v;
        float mx = row[0];
        for (int j = 1; j < v; j++)
            mx = row[j] > mx ? row[j] : mx;
        double sum = 0.0;
        if (ex) {
            float *er = ex + (size_t)n * v;
            for (int j = 0; j < v; j++) {
                double e = exp((double)row[j] - mx);
                er[j] = (float)e;
                sum += e;
            }
        } else {
            for (int j = 0; j < v; j++)
                sum += exp((double)row[j] - mx);
        }
        row_max[n] = mx;
        row_sum[n] = sum;
        int y = targets[n] - v0;
        tgt[n] = y >= 0 && y < v ? row[y] : 0.0f;
    }
}

void vshard_local_partial(float *partial, float *ex, const double *row_sum, const float *w,
                          int N, int d, int v)
{
    for (int n = 0; n < N; n++) {
        float *er = ex + (size_t)n * v;
        float inv = (float)(1.0 / row_sum[n]);
        for (int j = 0; j < v; j++)
            er[j] *= inv;
    }
    kern_matmul_backward_b(partial, ex, w, N, d, v);
}

double vshard_combine_stats(float *lse, double *const *weight, const float *const *row_max,
                            const double *const *row_sum, const float *const *tgt,
                            const int32_t *targets, int p, int V, int N)
{
    double total = 0.0;
    for (int n = 0; n < N; n++) {
        float mx = row_max[0][n];
        for (int k = 1; k < p; k++)
            mx = row_max[k][n] > mx ? row_max[k][n] : mx;
        double sum = 0.0;
        for (int k = 0; k < p; k++)
            sum += row_sum[k][n] * exp((double)row_max[k][n] - mx);
        if (weight)
            for (int k = 0; k < p; k++)
                weight[k][n] = row_sum[k][n] * exp((double)row_max[k][n] - mx) / sum;
        double l = mx + log(sum);
        lse[n] = (float)l;
        total += l - tgt[vshard_owner(targets[n], p, V)][n];
    }
    return total / N;
}

void vshard_logit_grad(float *g, const float *logits, const float *lse,
                       const int32_t *targets, int v0, float dloss, int N, int v)
{
    float scale = dloss / (float)N;
    for (int n = 0; n < N; n++) {
        const float *row = logits + (size_t)n * v;
        float *gr = g + (size_t)n * v;
        for (int j = 0; j < v; j++)
            gr[j] = expf(row[j] - lse[n]) * scale;
        int y = targets[n] - v0;
        if (y >= 0 && y < v)
            gr[y] -= scale;
    }
}

void vshard_combine_dx_v1(float *dx, const float *const *partial, double *const *weight,
                          const float *const *w, const int32_t *targets, float dloss,
                          int p, int V, int N, int d)
{
    double scale = (double)(dloss / (float)N);
    for (int n = 0; n < N; n++) {
        int own = vshard_owner(targets[n], p, V);
        int v0 = vshard_begin(own, p, V), v = vshard_begin(own + 1, p, V) - v0;
        int col = targets[n] - v0;
        for (int c = 0; c < d; c++) {
            double acc = 0.0;
            for (int k = 0; k < p; k++)
                acc += weight[k][n] * partial[k][(size_t)n * d + c];
            acc -= w[own][(size_t)c * v + col];
            dx[(size_t)n * d + c] = (float)(acc * scale);
        }
    }
}

void vshard_combine_dx_v2(float *dx, const float *const *partial, int p, int N, int d)
{
    size_t nd = (size_t)N * d;
    for (size_t i = 0; i < nd; i++) {
        double acc = 0.0;
        for (int k = 0; k < p; k++)
            acc += partial[k][i];
        dx[i] = (float)acc;
    }
}
