/*
 * v_pattern.c: the Controllable-Memory paper's stable V-Min and V-Half
 * patterns, laid out and "squeezed" as the authors' zbv_greedy.py does
 * (sail-sg/zero-bubble-pipeline-parallelism; Qi et al., arXiv 2405.15362).
 *
 * Unit slots, a repeat interval of 6 per micro-batch (F, f, B, b and two
 * W's), device i runs micro-batch j's ops at these slots plus 6j:
 *   V-Min:  F i,  f 2p-1-i,  B 2p+g+i,     b 4p+g-1-i   (g = 2 if 3 | p, else 0)
 *   V-Half: F 2i, f 3p-2-i,  B 3p+g+2i-1,  b 6p+g-2-i   (g = 3 if 2 | p, else 0)
 * with F/B the first chunk's forward and the second chunk's backward
 * (stage i, then 2p-1-i in the V) and f/b the second chunk's forward and
 * first chunk's backward.  W's fill the free slots after their B's.
 *
 * The squeeze: ops are visited in slot order; outside the steady state
 * (before the first b on device 0, after the last F) an op moves to the
 * earliest free slot after its dependencies if the device's peak memory
 * (unit deltas: F, f +1, W -1) does not grow; then all slots are
 * compressed to as-soon-as-possible unit times.  This runs twice (first
 * with W's placed, moving warm-up and cool-down ops; then without, moving
 * cool-down ops), W's are placed once more per chunk, and the device lists
 * are the slots in time order; real times are then ASAP with real costs.
 *
 * Workload: O(p m) ops.  Without W's placed each candidate move rescans
 * one device's slots (O(p m (p + m)) in the worst case); with them placed
 * the device's memory level per slot is kept, and a move costs the slots
 * it passes (first_fit_level).  Rescanning every trial was three quarters
 * of the pattern's time and a fifth of llama3-405b's search at pp=64
 * (p=64, m=128); the search also caches the pattern by shape
 * (v_pattern_sched_cached).
 */
#include "solver/solver.h"
#include "solver/solver_internal.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* Slots of every op of every device; W's are type 4 (both chunks, in B
 * order) or types 4 and 5 (second chunk's, first chunk's) once split. */
typedef struct vp {
    int p, m;        /* devices, micro-batches */
    int n_types;     /* 4 (no W), 5 (W combined) or 6 (W split) */
    int cnt[6];      /* ops of each type per device */
    long *slot;      /* [p][6][2m] slot of op (type, index) */
    long bound;      /* capacity of the occupancy maps */
    char *occ;       /* [p][bound] type + 1 of the op in each slot, 0 free */
    long *last;      /* [p] no op of the device is past this slot (its largest slot when
                      * fill_occ set it; ops only move earlier until the next fill_occ) */
    int *level;      /* [p][bound] with W's placed, the device's unit memory after each
                      * slot (mem_of's running count), kept up to date as ops move */
    int check;       /* 1: every move first_fit_level finds is checked by first_fit_scan */
    int mismatch;    /* with check: some move differed */
} vp;

static long *slotp(vp *v, int d, int t, int j)
{
    return &v->slot[((long)d * 6 + t) * 2 * v->m + j];
}

static char *occp(vp *v, int d, long s)
{
    assert(s >= 0 && s < v->bound);
    return &v->occ[(long)d * v->bound + s];
}

static long max_slot(vp *v, int d)
{
    long hi = 0;
    for (int t = 0; t < v->n_types; t++)
        for (int j = 0; j < v->cnt[t]; j++)
            if (*slotp(v, d, t, j) > hi)
                hi = *slotp(v, d, t, j);
    return hi;
}

/* Rebuilds device d's occupancy map from its slots. */
static void fill_occ(vp *v, int d)
{
    memset(occp(v, d, 0), 0, (size_t)v->bound);
    for (int t = 0; t < v->n_types; t++)
        for (int j = 0; j < v->cnt[t]; j++)
            *occp(v, d, *slotp(v, d, t, j)) = (char)(t + 1);
    v->last[d] = max_slot(v, d);
}

/* Places W's into the free slots after their B's (the authors' put_w):
 * combined (type 4, 2m of them) or split (4 after B, 5 after b). */
static void put_w(vp *v, int split)
{
    for (int d = 0; d < v->p; d++) {
        v->n_types = 4;
        fill_occ(v, d);
        long last = max_slot(v, d), s;
        int pend[2] = { 0, 0 }, nw[2] = { 0, 0 };
        for (s = 0; s <= last; s++) {
            int t = *occp(v, d, s) - 1;
            if (t >= 0) {
                if (t >= 2)
                    pend[split ? t - 2 : 0]++;
                continue;
            }
            for (int w = 0; w < 2; w++) {
                if (pend[w]) {
                    *slotp(v, d, 4 + w, nw[w]++) = s;
                    pend[w]--;
                    break;
                }
            }
        }
        s = last;
        for (int w = 0; w < 2; w++)
            while (pend[w]-- > 0)
                *slotp(v, d, 4 + w, nw[w]++) = ++s;
    }
    v->n_types = split ? 6 : 5;
    v->cnt[4] = split ? v->m : 2 * v->m;
    v->cnt[5] = split ? v->m : 0;
}

/* The unit memory an op of type t adds with W's placed: F, f +1; W -1;
 * B, b nothing. */
static int unit_delta(int t)
{
    return t == 0 || t == 1 ? 1 : t >= 4 ? -1 : 0;
}

/* Peak unit memory of device d (F, f +1; W -1; without W's placed, a W
 * runs in every free slot while one is pending: the authors' mem_of_stage). */
static int mem_of_upto(vp *v, int d, int cap);

static int mem_of(vp *v, int d)
{
    return mem_of_upto(v, d, -1);
}

/* mem_of, given up (returning cap + 1) as soon as the running count
 * passes cap when cap >= 0: for a caller that asks only whether the peak
 * stays within cap. */
static int mem_of_upto(vp *v, int d, int cap)
{
    /* Past the device's last op a slot only runs a pending W (cur falls):
     * scanning to v->last, an upper bound of it, gives the same peak. */
    long last = v->last[d];
    int cur = 0, peak = 0, pend = 0, has_w = v->n_types > 4;
    for (long s = 0; s <= last; s++) {
        int t = *occp(v, d, s) - 1;
        if (t == 0 || t == 1)
            cur++;
        else if (t == 2 || t == 3)
            pend++;
        else if (t >= 4)
            cur--;
        else if (!has_w && pend) {
            cur--;
            pend--;
        }
        if (cur > peak)
            peak = cur;
        if (cap >= 0 && peak > cap)
            return cap + 1;
    }
    return peak;
}

/* One op in the global visiting order. */
typedef struct vp_op {
    long slot;
    int d, t, j;
} vp_op;

static int cmp_op(const void *x, const void *y)
{
    const vp_op *a = x, *b = y;
    if (a->slot != b->slot)
        return a->slot < b->slot ? -1 : 1;
    if (a->d != b->d)
        return a->d - b->d;
    if (a->t != b->t)
        return a->t - b->t;
    return a->j - b->j;
}

/* All ops in visiting order; malloc'd, *n set; NULL on out of memory. */
static vp_op *ops_in_order(vp *v, long *n)
{
    long k = 0, total = 0;
    for (int t = 0; t < v->n_types; t++)
        total += (long)v->cnt[t] * v->p;
    vp_op *ops = malloc(sizeof *ops * (size_t)(total ? total : 1));
    if (!ops)
        return NULL;
    /* By slot, then (d, t, j) as cmp_op orders them: a counting sort by
     * slot over the ops listed in (d, t, j) order, which it keeps (qsort
     * through cmp_op took 0.34 G of llama3-405b's 11.7 G instructions
     * over 1,024 GPUs). */
    long hi = 0;
    for (int d = 0; d < v->p; d++) {
        long last = max_slot(v, d);
        hi = last > hi ? last : hi;
    }
    long *at = calloc((size_t)hi + 2, sizeof *at);
    if (!at) {
        free(ops);
        return NULL;
    }
    for (int d = 0; d < v->p; d++)
        for (int t = 0; t < v->n_types; t++)
            for (int j = 0; j < v->cnt[t]; j++)
                at[*slotp(v, d, t, j) + 1]++;
    for (long x = 1; x <= hi + 1; x++)
        at[x] += at[x - 1];
    for (int d = 0; d < v->p; d++)
        for (int t = 0; t < v->n_types; t++)
            for (int j = 0; j < v->cnt[t]; j++) {
                long sl = *slotp(v, d, t, j);
                ops[at[sl]++] = (vp_op){ sl, d, t, j };
                k++;
            }
    free(at);
    assert(k == total);
    for (long x = 1; x < total; x++)
        assert(cmp_op(&ops[x - 1], &ops[x]) < 0);
    *n = total;
    return ops;
}

/* Earliest slot an op may take: one after its dependencies' slots. */
static long dep_slot(vp *v, int d, int t, int j)
{
    long dep = -1;
    if ((t == 0 || t == 2) && d > 0 && *slotp(v, d - 1, t, j) > dep)
        dep = *slotp(v, d - 1, t, j);
    if ((t == 1 || t == 3) && d + 1 < v->p && *slotp(v, d + 1, t, j) > dep)
        dep = *slotp(v, d + 1, t, j);
    if (t > 0 && t < 4 && *slotp(v, d, t - 1, j) > dep)
        dep = *slotp(v, d, t - 1, j);
    if (t == 4) {
        /* the j-th B of either chunk on this device, in slot order */
        long *b2 = slotp(v, d, 2, 0), *b3 = slotp(v, d, 3, 0);
        int x = 0, y = 0;
        long at = -1;
        for (int k = 0; k <= j && (x < v->m || y < v->m); k++)
            at = (y >= v->m || (x < v->m && b2[x] < b3[y])) ? b2[x++] : b3[y++];
        if (at > dep)
            dep = at;
    }
    if (j > 0 && *slotp(v, d, t, j - 1) > dep)
        dep = *slotp(v, d, t, j - 1);
    return dep + 1;
}

/* Compresses all slots to ASAP unit times in visiting order (the authors'
 * eager_execution_time with unit costs and no comm).  0 or -1. */
static int squeeze_times(vp *v)
{
    long n;
    vp_op *ops = ops_in_order(v, &n);
    long *last = calloc((size_t)v->p, sizeof(long)); /* end of each device's last op */
    long *end = malloc(sizeof(long) * (size_t)v->p * 6 * 2 * (size_t)v->m);
    if (!ops || !last || !end) {
        free(ops);
        free(last);
        free(end);
        return -1;
    }
#define END(d, t, j) end[(((long)(d) * 6 + (t)) * 2 * v->m) + (j)]
    for (long k = 0; k < n; k++) {
        int d = ops[k].d, t = ops[k].t, j = ops[k].j;
        long e = last[d];
        if ((t == 0 || t == 2) && d > 0 && END(d - 1, t, j) > e)
            e = END(d - 1, t, j);
        if ((t == 1 || t == 3) && d + 1 < v->p && END(d + 1, t, j) > e)
            e = END(d + 1, t, j);
        if (t > 0 && t < 4 && END(d, t - 1, j) > e)
            e = END(d, t - 1, j);
        if (j > 0 && END(d, t, j - 1) > e)
            e = END(d, t, j - 1);
        END(d, t, j) = last[d] = e + 1;
        *slotp(v, d, t, j) = e; /* start time */
    }
#undef END
    free(ops);
    free(last);
    free(end);
    return 0;
}

/* The first free slot of device d in [from, at) where an op of type t
 * (not in the occupancy map) keeps the device's peak (mem_of) within cap,
 * or at when there is none: each free slot tried and costed.  This is
 * the authors' rule as they run it, and the only way without W's placed,
 * where a pending W runs in any free slot, so a move changes the count
 * past at too. */
static long first_fit_scan(vp *v, int d, int t, long from, long at, int cap)
{
    for (long s = from; s < at; s++) {
        if (*occp(v, d, s))
            continue;
        *occp(v, d, s) = (char)(t + 1);
        int fits = mem_of_upto(v, d, cap) <= cap;
        *occp(v, d, s) = 0;
        if (fits)
            return s;
    }
    return at;
}

/* first_fit_scan with W's placed, from device d's levels (vp.level, the
 * op still counted at at): a slot's memory then depends on the ops at or
 * before it alone (F, f +1; W -1), so moving the op from at to an earlier
 * s shifts the levels by its delta on [s, at) only, and the device's peak
 * is within cap before the move (reorder keeps it so).  A B (no delta) or
 * a W (-1) therefore fits in the first free slot, and an F fits at s
 * exactly when every level on [s, at) is below cap: the first free slot
 * from the earliest such s, found in one backward scan.  O(at - from)
 * where the scan costs every trial O(slots). */
static long first_fit_level(vp *v, int d, int t, long from, long at, int cap)
{
    const int *level = &v->level[(long)d * v->bound];
    long s = from;
    if (t <= 1)
        for (s = at; s > from && level[s - 1] + 1 <= cap; s--)
            ;
    while (s < at && *occp(v, d, s))
        s++;
    return s;
}

/* The authors' reorder(): moves warm-up (with consider_w) and cool-down
 * ops into earlier free slots when memory allows, then squeezes.  With
 * v->check every move first_fit_level picks is also found by
 * first_fit_scan, and v->mismatch set when they differ.  0 or -1. */
static int reorder(vp *v, int consider_w)
{
    if (consider_w)
        put_w(v, 0);
    else
        v->n_types = 4;
    for (int d = 0; d < v->p; d++)
        fill_occ(v, d);
    int cur_mem = 0;
    for (int d = 0; d < v->p; d++) {
        int mm = mem_of(v, d);
        if (mm > cur_mem)
            cur_mem = mm;
    }
    int has_w = v->n_types > 4;
    for (int d = 0; has_w && d < v->p; d++) {
        int cur = 0;
        for (long s = 0; s < v->bound; s++) {
            int t = *occp(v, d, s) - 1;
            cur += unit_delta(t);
            v->level[(long)d * v->bound + s] = cur;
        }
    }
    long n;
    vp_op *ops = ops_in_order(v, &n);
    if (!ops)
        return -1;
    int phase = 0;
    for (long k = 0; k < n; k++) {
        int d = ops[k].d, t = ops[k].t, j = ops[k].j;
        long at = ops[k].slot;
        if (t == 3 && d == 0 && phase == 0)
            phase = 1;
        if (phase == 1) {
            if (t == 0 && j == v->m - 1)
                phase = 2;
            continue;
        }
        if (phase == 0 && !consider_w)
            continue;
        long from = dep_slot(v, d, t, j);
        *occp(v, d, at) = 0;
        long s = has_w ? first_fit_level(v, d, t, from, at, cur_mem) : first_fit_scan(v, d, t, from, at, cur_mem);
        if (has_w && v->check && s != first_fit_scan(v, d, t, from, at, cur_mem))
            v->mismatch = 1;
        if (has_w) {
            int delta = unit_delta(t);
            for (long x = s; x < at; x++)
                v->level[(long)d * v->bound + x] += delta;
        }
        *slotp(v, d, t, j) = s;
        *occp(v, d, s) = (char)(t + 1);
    }
    free(ops);
    if (!consider_w)
        put_w(v, 0);
    return squeeze_times(v);
}

/* v_pattern_sched, and with check v_pattern_sched_checked. */
static int pattern_sched(const sched_t *tmpl, int half, int check, sched_t **out)
{
    int p = tmpl->n_devices, m = tmpl->n_micro;
    vp v = { .p = p, .m = m, .n_types = 4, .cnt = { m, m, m, m, 0, 0 }, .check = check };
    /* Slots never exceed the pattern's span plus the W's appended at the end. */
    v.bound = 6L * p + 6L * m + 2L * m + 16;
    v.slot = malloc(sizeof(long) * (size_t)p * 6 * 2 * (size_t)m);
    v.occ = malloc((size_t)p * (size_t)v.bound);
    v.last = malloc(sizeof(long) * (size_t)p);
    v.level = malloc(sizeof(int) * (size_t)p * (size_t)v.bound);
    sched_t *s = NULL;
    vp_op *ops = NULL;
    if (!v.slot || !v.occ || !v.last || !v.level)
        goto fail;
    for (int i = 0; i < p; i++) {
        long base[4];
        if (!half) {
            int g = p % 3 == 0 ? 2 : 0;
            base[0] = i; base[1] = 2L * p - 1 - i; base[2] = 2L * p + g + i; base[3] = 4L * p + g - 1 - i;
        } else {
            int g = p % 2 == 0 ? 3 : 0;
            base[0] = 2L * i; base[1] = 3L * p - 2 - i; base[2] = 3L * p + g + 2L * i - 1;
            base[3] = 6L * p + g - 2 - i;
        }
        for (int t = 0; t < 4; t++)
            for (int j = 0; j < m; j++)
                *slotp(&v, i, t, j) = base[t] + 6L * j;
    }
    if (reorder(&v, 1) != 0)
        goto fail;
    v.n_types = 4;
    if (reorder(&v, 0) != 0)
        goto fail;
    v.n_types = 4;
    put_w(&v, 1);
    long n;
    ops = ops_in_order(&v, &n);
    s = sched_clone(tmpl);
    if (!ops || !s)
        goto fail;
    for (int d = 0; d < p; d++)
        s->dev[d].n_ops = 0;
    for (long k = 0; k < n; k++) {
        static const int kind[6] = { OP_F, OP_F, OP_B, OP_B, OP_W, OP_W };
        static const int chunk1[6] = { 0, 1, 1, 0, 1, 0 };
        int d = ops[k].d, t = ops[k].t;
        if (sched_push(s, d, (op_kind)kind[t], chunk1[t] ? 2 * p - 1 - d : d, ops[k].j) != 0)
            goto fail;
    }
    free(ops);
    free(v.slot);
    free(v.occ);
    free(v.last);
    free(v.level);
    if (v.mismatch) {
        sched_free(s);
        return 1;
    }
    *out = s;
    return 0;
fail:
    free(ops);
    free(v.slot);
    free(v.occ);
    free(v.last);
    free(v.level);
    sched_free(s);
    return -1;
}

int v_pattern_sched(const sched_t *tmpl, int half, sched_t **out)
{
    return pattern_sched(tmpl, half, 0, out);
}

int v_pattern_sched_checked(const sched_t *tmpl, int half, sched_t **out)
{
    return pattern_sched(tmpl, half, 1, out);
}

int v_pattern_sched_cached(v_pattern_cache *cache, const sched_t *tmpl, int half, sched_t **out)
{
    int p = tmpl->n_devices, m = tmpl->n_micro;
    half = half != 0;
    if (!cache)
        return v_pattern_sched(tmpl, half, out);
    for (int i = 0; i < cache->n; i++)
        if (cache->e[i].p == p && cache->e[i].m == m && cache->e[i].half == half) {
            /* The lanes are the shape's; the header is tmpl's, as
             * v_pattern_sched would have cloned it. */
            const sched_t *kept = cache->e[i].s;
            assert(kept->n_stages == tmpl->n_stages);
            sched_t *s = sched_clone(tmpl);
            if (!s)
                return -1;
            for (int d = 0; d < p; d++) {
                s->dev[d].n_ops = 0;
                for (int k = 0; k < kept->dev[d].n_ops; k++) {
                    sched_op op = kept->dev[d].ops[k];
                    if (sched_push(s, d, (op_kind)op.kind, op.stage, op.mb) != 0) {
                        sched_free(s);
                        return -1;
                    }
                }
            }
            *out = s;
            return 0;
        }
    sched_t *s = NULL;
    if (v_pattern_sched(tmpl, half, &s) != 0)
        return -1;
    sched_t *copy = sched_clone(s);
    if (copy) { /* without room to keep it, the next call lays it out again */
        int i;
        if (cache->n < V_PATTERN_CACHE) {
            i = cache->n++;
        } else {
            i = cache->next;
            cache->next = (i + 1) % V_PATTERN_CACHE;
            sched_free(cache->e[i].s);
        }
        cache->e[i].p = p;
        cache->e[i].m = m;
        cache->e[i].half = half;
        cache->e[i].s = copy;
    }
    *out = s;
    return 0;
}

void v_pattern_cache_free(v_pattern_cache *cache)
{
    for (int i = 0; i < cache->n; i++)
        sched_free(cache->e[i].s);
    memset(cache, 0, sizeof *cache);
}
