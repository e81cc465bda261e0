/*
 * adamw_shard.c: AdamW over ranges of a stage (see adamw_shard.h).
 *
 * Walks the ranges and the tensors together (both sorted by offset), and
 * hands each overlap to adamw_update with the moments' pointers moved to
 * the overlap's place in the compact shard: O(ranges + tensors) calls.
 */
#include "kernels/cpu/adamw_shard.h"

#include <assert.h>

void adamw_step_stage_ranges(const llama_stage *st, const adamw_config *c, float *params,
                             const float *grads, float *m, float *v, const size_t *lo,
                             const size_t *len, int n, int t, float lr, float grad_scale)
{
    size_t packed = 0; /* where range r starts in m and v */
    int ten = 0;
    for (int r = 0; r < n; r++) {
        size_t a = lo[r], b = lo[r] + len[r];
        assert(r == 0 || lo[r] >= lo[r - 1] + len[r - 1]); /* increasing, disjoint */
        /* the first tensor that ends after a (tensors are in offset order) */
        while (ten < st->n_tensors && st->tensors[ten].offset + st->tensors[ten].count <= a)
            ten++;
        for (int i = ten; i < st->n_tensors && st->tensors[i].offset < b; i++) {
            const llama_tensor *tn = &st->tensors[i];
            size_t x = a > tn->offset ? a : tn->offset;
            size_t y = b < tn->offset + tn->count ? b : tn->offset + tn->count;
            if (x >= y)
                continue;
            size_t at = packed + (x - a);
            adamw_update(params + x, grads + x, m + at, v + at, y - x, t, lr, c->beta1, c->beta2,
                         c->eps, tn->decay ? c->weight_decay : 0.0f, grad_scale);
        }
        packed += len[r];
    }
}

void adamw_sum_squares_feed(double acc[4], const float *g, size_t from, size_t to, size_t n)
{
    assert(from <= to && to <= n);
    size_t body = n / 4 * 4;
    for (size_t i = from; i < to; i++) {
        double sq = (double)g[i - from] * g[i - from];
        acc[i < body ? i % 4 : 0] += sq;
    }
}

double adamw_sum_squares_finish(const double acc[4])
{
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}
