/*
 * zero1.c: ZeRO-1 over the in-process replicas (see zero1.h).
 *
 * Segment i of the layout is cut into k chunks by the ring; chunk c lives,
 * reduced, on replica outer_ring_owner(k, c).  Everything here walks
 * (segment, chunk) pairs in that order, which is also the order of the
 * stage's floats, so the norm's additions run in index order.
 */
#include "runtime/outer/zero1.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/adamw_shard.h"

int zero1_ranges(const islands_seg_layout *l, int stage, int k, int r, size_t *lo, size_t *len)
{
    int n = 0;
    int c = (r + 1) % k; /* the chunk the ring finishes on replica r */
    assert(outer_ring_owner(k, c) == r);
    for (int i = 0; i < l->n; i++) {
        if (l->stage[i] != stage)
            continue;
        size_t a, m;
        outer_ring_chunk(l->len[i], k, c, &a, &m);
        if (m == 0)
            continue;
        lo[n] = l->off[i] + a;
        len[n] = m;
        n++;
    }
    return n;
}

int zero1_layout_has_stage(const islands_seg_layout *l, int stage)
{
    for (int i = 0; i < l->n; i++)
        if (l->stage[i] == stage)
            return 1;
    return 0;
}

void zero1_count_norm_chain(outer_ring_stats *stats, int k, int n_tensors)
{
    if (!stats || k < 2)
        return;
    /* k-1 hops of the lanes (4 doubles a tensor), then the result to the
     * k-1 others (a double a tensor) */
    stats->bytes_sent += (uint64_t)(k - 1) * 5 * sizeof(double) * (uint64_t)n_tensors;
    stats->messages += 2 * (uint64_t)(k - 1);
}

int zero1_shard_trainer(trainer *t, const islands_seg_layout *l, int k, int r, zb_err *err)
{
    size_t *lo = malloc((size_t)(l->n ? l->n : 1) * sizeof *lo);
    size_t *len = malloc((size_t)(l->n ? l->n : 1) * sizeof *len);
    int rc = 0;
    if (!lo || !len)
        rc = zb_fail(err, "ZeRO-1: out of memory");
    for (int s = 0; s < trainer_stage_count(t) && rc == 0; s++) {
        if (!zero1_layout_has_stage(l, s))
            continue; /* another process's stage (pipeline ranks) */
        int n = zero1_ranges(l, s, k, r, lo, len);
        if (n == 0)
            rc = zb_fail(err, "ZeRO-1: stage %d is too small to shard over %d replicas", s, k);
        else
            rc = trainer_shard_optimizer(t, s, lo, len, n, err);
    }
    free(lo);
    free(len);
    return rc;
}

void zero1_feed_chunk(const trainer *t, const islands_seg_layout *l, int stage, int k, int c,
                      const float *grads, double *acc)
{
    const llama_stage *st = trainer_stage_layout(t, stage);
    int ten = 0;
    for (int i = 0; i < l->n; i++) {
        if (l->stage[i] != stage)
            continue;
        size_t a, m;
        outer_ring_chunk(l->len[i], k, c, &a, &m);
        a += l->off[i];
        size_t b = a + m;
        /* the tensors overlapping [a, b), in offset order */
        while (ten < st->n_tensors && st->tensors[ten].offset + st->tensors[ten].count <= a)
            ten++;
        for (int j = ten; j < st->n_tensors && st->tensors[j].offset < b; j++) {
            const llama_tensor *tn = &st->tensors[j];
            size_t x = a > tn->offset ? a : tn->offset;
            size_t y = b < tn->offset + tn->count ? b : tn->offset + tn->count;
            if (x < y)
                adamw_sum_squares_feed(acc + 4 * (size_t)j, grads + x, x - tn->offset,
                                       y - tn->offset, tn->count);
        }
    }
}

void zero1_stage_sumsq(const trainer *t, const islands_seg_layout *l, int stage, int k,
                       float *const *grads_of_chunk_owner, double *acc, double *sq)
{
    const llama_stage *st = trainer_stage_layout(t, stage);
    memset(acc, 0, sizeof *acc * 4 * (size_t)st->n_tensors);
    /* Chunk by chunk: each tensor lies in one segment, so its pieces come
     * in index order (chunk 0's, then chunk 1's, ...). */
    for (int c = 0; c < k; c++)
        zero1_feed_chunk(t, l, stage, k, c, grads_of_chunk_owner[c], acc);
    for (int j = 0; j < st->n_tensors; j++)
        sq[j] = adamw_sum_squares_finish(acc + 4 * (size_t)j);
}

int zero1_reduce(trainer *const *t, int k, const islands_seg_layout *l, outer_ring_stats *stats,
                 zb_err *err)
{
    float *bufs[k];
    for (int r = 0; r < k; r++)
        if (trainer_host_sync(t[r], TRAINER_BUF_GRADS, err) != 0)
            return -1;
    for (int i = 0; i < l->n; i++) {
        for (int r = 0; r < k; r++) {
            size_t n;
            bufs[r] = trainer_stage_grads(t[r], l->stage[i], &n) + l->off[i];
        }
        if (outer_reduce_scatter(bufs, k, l->len[i], (float)k, stats, err) != 0)
            return -1;
    }
    int most = 0;
    for (int s = 0; s < trainer_stage_count(t[0]); s++)
        if (trainer_stage_layout(t[0], s)->n_tensors > most)
            most = trainer_stage_layout(t[0], s)->n_tensors;
    double *acc = malloc(sizeof *acc * 5 * (size_t)(most ? most : 1));
    if (!acc)
        return zb_fail(err, "ZeRO-1: out of memory");
    double *sq = acc + 4 * (size_t)most;
    for (int s = 0; s < trainer_stage_count(t[0]); s++) {
        for (int c = 0; c < k; c++) {
            size_t n;
            bufs[c] = trainer_stage_grads(t[outer_ring_owner(k, c)], s, &n);
        }
        zero1_stage_sumsq(t[0], l, s, k, bufs, acc, sq);
        zero1_count_norm_chain(stats, k, trainer_stage_layout(t[0], s)->n_tensors);
        for (int r = 0; r < k; r++)
            trainer_set_stage_sumsq(t[r], s, sq);
    }
    free(acc);
    return 0;
}

void zero1_gather(trainer *const *t, int k, const islands_seg_layout *l, outer_ring_stats *stats)
{
    float *bufs[k];
    for (int i = 0; i < l->n; i++) {
        for (int r = 0; r < k; r++) {
            size_t n;
            bufs[r] = trainer_stage_params(t[r], l->stage[i], &n) + l->off[i];
        }
        outer_allgather(bufs, k, l->len[i], stats);
    }
}

size_t zero1_optimizer_bytes(const trainer *t, const unsigned char *own)
{
    size_t floats = 0;
    for (int s = 0; s < trainer_stage_count(t); s++)
        if (!own || own[s])
            floats += trainer_stage_optimizer_floats(t, s);
    return 2 * sizeof(float) * floats;
}

/* Copies replica r's shard of stage s between its packed moments and the
 * whole arrays m and v: to_whole 1 gathers, 0 scatters. */
static void shard_copy(trainer *t, const islands_seg_layout *l, int s, int k, int r, float *m,
                       float *v, int to_whole, size_t *lo, size_t *len)
{
    size_t n;
    float *pm = trainer_stage_adam_m(t, s, &n), *pv = trainer_stage_adam_v(t, s, &n);
    int nr = zero1_ranges(l, s, k, r, lo, len);
    size_t at = 0;
    for (int i = 0; i < nr; i++) {
        if (to_whole) {
            memcpy(m + lo[i], pm + at, len[i] * sizeof *m);
            memcpy(v + lo[i], pv + at, len[i] * sizeof *v);
        } else {
            memcpy(pm + at, m + lo[i], len[i] * sizeof *m);
            memcpy(pv + at, v + lo[i], len[i] * sizeof *v);
        }
        at += len[i];
    }
    assert(at == n);
    (void)n;
}

static void ckpt_free(zero1_ckpt *c)
{
    for (int s = 0; s < c->n_stages; s++) {
        if (c->m)
            free(c->m[s]);
        if (c->v)
            free(c->v[s]);
    }
    free(c->m);
    free(c->v);
    memset(c, 0, sizeof *c);
}

int zero1_ckpt_begin(trainer *const *t, int k, const islands_seg_layout *l, zero1_ckpt *c,
                     zb_err *err)
{
    memset(c, 0, sizeof *c);
    int S = trainer_stage_count(t[0]);
    c->n_stages = S;
    c->m = calloc((size_t)S, sizeof *c->m);
    c->v = calloc((size_t)S, sizeof *c->v);
    size_t *lo = malloc(sizeof *lo * (size_t)(l->n ? l->n : 1));
    size_t *len = malloc(sizeof *len * (size_t)(l->n ? l->n : 1));
    int rc = !c->m || !c->v || !lo || !len ? zb_fail(err, "ZeRO-1: out of memory") : 0;
    for (int s = 0; s < S && rc == 0; s++) {
        if (!zero1_layout_has_stage(l, s))
            continue;
        size_t n;
        trainer_stage_params(t[0], s, &n);
        c->m[s] = malloc(sizeof(float) * (n ? n : 1));
        c->v[s] = malloc(sizeof(float) * (n ? n : 1));
        if (!c->m[s] || !c->v[s]) {
            rc = zb_fail(err, "ZeRO-1: out of memory for a stage's whole moments (%zu floats)", n);
            break;
        }
        for (int r = 0; r < k; r++)
            shard_copy(t[r], l, s, k, r, c->m[s], c->v[s], 1, lo, len);
    }
    free(lo);
    free(len);
    if (rc != 0) {
        ckpt_free(c);
        return -1;
    }
    for (int r = 0; r < k; r++)
        for (int s = 0; s < S; s++)
            if (c->m[s])
                trainer_zero1_checkpoint_moments(t[r], s, c->m[s], c->v[s]);
    return 0;
}

void zero1_ckpt_end(trainer *const *t, int k, const islands_seg_layout *l, zero1_ckpt *c,
                    int loaded)
{
    size_t lo[l->n ? l->n : 1], len[l->n ? l->n : 1];
    for (int r = 0; r < k; r++)
        for (int s = 0; s < c->n_stages; s++) {
            if (!c->m[s])
                continue;
            if (loaded)
                shard_copy(t[r], l, s, k, r, c->m[s], c->v[s], 0, lo, len);
            trainer_zero1_checkpoint_moments(t[r], s, NULL, NULL);
        }
    ckpt_free(c);
}
