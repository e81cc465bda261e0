/*
 * bench_rc_subsets.c: which stages should recompute?  Every per-stage
 * recompute choice of the default job's winner, measured (issue 11).
 *
 * `zbsched search --mem 40G` picks interleaved v=4 +vocab-1 at pp=8,
 * b=1, recomputing the first 21 of its 32 virtual stages in model order
 * (the smallest such prefix that fits): 8,258.4 ms, 1.343x the baseline,
 * short of the 1.35x (8,213 ms).  The prefix rule gives every
 * device the same decision up to one chunk, while memory peaks are per
 * device.  This program rebuilds that plan outside the search (the same
 * interleaved order, the even split, the sharded head and embedding, the
 * S/T passes at each of the six lookahead/hold settings, fastest that
 * fits kept, else the smallest peak, exactly as the search does), so any
 * subset of stages can be priced, and measures:
 *
 *   1. self-checks: the prefixes the search reports (pp=8: 21 stages,
 *      pp=4 x dp=2 with v=8: 27) must reproduce its times;
 *   2. per-device choice: each device recomputes the fewest of its chunks
 *      (those held longest first: chunk 0, 1, ...) that let THAT device
 *      fit, found device by device and repeated until no count changes
 *      (the order's memory depends a little on the others' costs);
 *   3. an exhaustive sweep at pp=8 of which chunks recompute: devices 0-4
 *      each one same 3-of-4 set and devices 5-7 one same 2- or 3-of-4 set
 *      (40 choices, the counts the per-device search finds), and every
 *      pair of chunks on every device (the count of the 1.40x plan that
 *      needs 43 GB) for device 0's peak;
 *   4. Megatron-style selective recompute (attention core only): what the
 *      cost model says the attention core keeps per layer with flash
 *      attention against the whole layer;
 *   5. uneven layers (interleaved v=3 at pp=8: one 2-layer chunk per
 *      device, placed first, in the middle or last) with two or three
 *      recomputed chunks per device.
 *
 * Times: the largest per-device span of the simulated schedule (the
 * search's ranked figure; the data-parallel sync is left out: the search
 * reports 0 ms exposed for both depths).  Peaks: static + activation peak
 * per device.
 *
 * Usage: bench_rc_subsets (no arguments; about a second of CPU).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedules/gen.h"
#include "src/cost_model.h"
#include "src/cost_vocab.h"
#include "src/sim.h"
#include "src/validate.h"

#define MEM_LIMIT 40e9 /* the default job's --mem 40G */
#define MAX_STAGES 64  /* p * v of the plans priced here */
#define MAX_DEV 8

/* One shape of the default job's winner family. */
typedef struct job {
    int p, v, dp;   /* pipeline depth, chunks per device, data-parallel width */
    zb_model model; /* llama3-8b at b = 1 */
    zb_gpu gpu;     /* H100-80G */
    sched_t *order; /* interleaved 1F1B order, placed; no costs yet */
    int layers[64]; /* layers per virtual stage; all 0: the even split */
} job;

/* A priced plan: the figures the search ranks by. */
typedef struct priced {
    int fits;               /* every device within MEM_LIMIT */
    double time_ms;         /* largest per-device span */
    double fastest_ms;      /* the fastest of the six pass settings, fitting or not */
    double busy_max_ms;     /* busiest device's compute */
    double peak[MAX_DEV];   /* static + activation peak per device, bytes */
    double busy[MAX_DEV];   /* compute per device, ms */
} priced;

static int job_init(job *j, int p, int v, int dp)
{
    zb_err err = { "" };
    memset(j, 0, sizeof *j);
    j->p = p;
    j->v = v;
    j->dp = dp;
    if (model_preset("llama3-8b", &j->model, &err) < 0 || gpu_preset("H100-80G", &j->gpu, &err) < 0) {
        fprintf(stderr, "bench_rc_subsets: %s\n", err.msg);
        return -1;
    }
    j->model.micro_batch = 1;
    gen_params gp;
    gen_params_default(&gp);
    gp.stages = p;
    gp.chunks = v;
    gp.microbatches = 64 / dp;
    if (gen_interleaved(&gp, &j->order, &err) < 0) {
        fprintf(stderr, "bench_rc_subsets: %s\n", err.msg);
        return -1;
    }
    return 0;
}

/* Prices j's order with the stages in rc recomputing (one byte per virtual
 * stage), as the search prices a vocabulary-parallel (Vocab-1) version.
 * Returns 0 or -1 with a message on stderr. */
static int price(const job *j, const unsigned char *rc, priced *out)
{
    int S = j->p * j->v, layers[MAX_STAGES], rc_any = 0;
    for (int i = 0; i < S; i++) {
        layers[i] = j->layers[0] ? j->layers[i] : j->model.n_layers / S; /* even: 1 at p*v = 32 */
        rc_any |= rc[i];
    }
    cost_options co;
    cost_options_default(&co);
    co.zero1_dp = j->dp;
    co.devices_per_node = 8 / j->dp; /* 8 GPUs a node, replicas consecutive (search.c) */
    co.layers = layers;
    co.recompute = rc_any;
    co.recompute_stage = rc;
    cost_vocab_options vo;
    cost_vocab_options_default(&vo);
    vo.variant = 1;
    zb_err err = { "" };
    sched_t *s = sched_clone(j->order);
    if (!s || cost_fill_sched(&j->model, &j->gpu, &co, s, &err) < 0 ||
        cost_vocab_fill_sched(&j->model, &j->gpu, &co, &vo, s, NULL, &err) < 0) {
        fprintf(stderr, "bench_rc_subsets: %s\n", s ? err.msg : "out of memory");
        sched_free(s);
        return -1;
    }
    sched_vocab pv = s->vocab;
    sched_set_vocab(s, SCHED_VOCAB_NONE, 0, 0, 0, 0, 0, 0);
    int have = 0;
    for (int q = 0; q < 2 * (GEN_VOCAB_MAX_LOOKAHEAD + 1); q++) {
        sched_t *vk = NULL;
        sim_result sr;
        memset(&sr, 0, sizeof sr);
        if (gen_vocab_insert_with(s, &pv, q / 2, q % 2, &vk, &err) < 0 || sched_validate(vk, &err) < 0 ||
            sim_run(vk, &sr, &err) < 0) {
            fprintf(stderr, "bench_rc_subsets: %s\n", err.msg);
            sim_result_free(&sr);
            sched_free(vk);
            sched_free(s);
            return -1;
        }
        priced t;
        memset(&t, 0, sizeof t);
        t.fits = 1;
        for (int d = 0; d < j->p; d++) {
            t.peak[d] = vk->mem_static[d] + sr.dev[d].peak_mem;
            t.busy[d] = sr.dev[d].busy;
            t.fits &= t.peak[d] <= MEM_LIMIT;
            t.time_ms = fmax(t.time_ms, sr.dev[d].span);
            t.busy_max_ms = fmax(t.busy_max_ms, sr.dev[d].busy);
        }
        double fastest = have ? fmin(out->fastest_ms, t.time_ms) : t.time_ms;
        double tpeak = 0, kpeak = 0;
        for (int d = 0; d < j->p; d++) {
            tpeak = fmax(tpeak, t.peak[d]);
            kpeak = fmax(kpeak, out->peak[d]);
        }
        /* The search's rule: fastest fit (to its 0.05 % resolution), else
         * the smallest peak. */
        int better = !have || (t.fits && (!out->fits || t.time_ms * 1.0005 < out->time_ms)) ||
                     (!t.fits && !out->fits && tpeak < kpeak);
        if (better)
            *out = t;
        out->fastest_ms = fastest;
        have = 1;
        sim_result_free(&sr);
        sched_free(vk);
    }
    sched_free(s);
    return 0;
}

/* Stage i of the interleaved placement sits on device i % p as chunk i / p. */
static void mask_counts(const job *j, const int *count, unsigned char *rc)
{
    for (int i = 0; i < j->p * j->v; i++)
        rc[i] = i / j->p < count[i % j->p];
}

static void mask_prefix(const job *j, int q, unsigned char *rc)
{
    for (int i = 0; i < j->p * j->v; i++)
        rc[i] = i < q;
}

static void show(const job *j, const char *what, const priced *r)
{
    printf("  %-44s %8.1f ms  busiest %7.1f ms  %s", what, r->time_ms, r->busy_max_ms,
           r->fits ? "fits" : "exceeds 40 GB");
    if (!r->fits) /* the search keeps an OOM plan's smallest peak, not its fastest setting */
        printf(" (smallest-peak setting; fastest %.1f ms)", r->fastest_ms);
    printf("\n    peak GB:");
    for (int d = 0; d < j->p; d++)
        printf(" %5.2f", r->peak[d] / 1e9);
    printf("\n    busy ms:");
    for (int d = 0; d < j->p; d++)
        printf(" %5.0f", r->busy[d]);
    printf("\n");
}

/* Per-device choice: device by device, the fewest leading chunks that let
 * that device fit, the others held; repeated until no count changes (at
 * most v passes). */
static int per_device(const job *j, int *count, priced *best)
{
    unsigned char rc[MAX_STAGES];
    for (int d = 0; d < j->p; d++)
        count[d] = 0;
    for (int pass = 0; pass < j->v + 1; pass++) {
        int changed = 0;
        for (int d = 0; d < j->p; d++) {
            int c = 0;
            for (; c <= j->v; c++) {
                int trial[MAX_DEV];
                memcpy(trial, count, sizeof trial);
                trial[d] = c;
                mask_counts(j, trial, rc);
                priced r;
                memset(&r, 0, sizeof r);
                if (price(j, rc, &r) < 0)
                    return -1;
                if (r.peak[d] <= MEM_LIMIT)
                    break;
            }
            if (c > j->v)
                c = j->v;
            changed |= c != count[d];
            count[d] = c;
        }
        if (!changed)
            break;
    }
    mask_counts(j, count, rc);
    memset(best, 0, sizeof *best);
    return price(j, rc, best);
}

static int depth(int p, int v, int dp, int search_prefix, double search_ms)
{
    job j;
    if (job_init(&j, p, v, dp) < 0)
        return -1;
    int S = p * v, rc_ok = 0;
    unsigned char rc[MAX_STAGES];
    priced r;
    printf("\ninterleaved v=%d +vocab-1, pp=%d x dp=%d, b=1, m=%d, %d virtual stages of one layer\n", v, p, dp,
           64 / dp, S);
    /* 1. the search's own pick */
    memset(&r, 0, sizeof r);
    mask_prefix(&j, search_prefix, rc);
    if (price(&j, rc, &r) < 0)
        goto out;
    char what[64];
    snprintf(what, sizeof what, "prefix: first %d stages (the search's pick)", search_prefix);
    show(&j, what, &r);
    printf("    self-check against the search's %.1f ms: %s\n", search_ms,
           fabs(r.time_ms - search_ms) < 0.05 ? "reproduced" : "DIFFERS");
    double prefix_ms = r.time_ms;
    /* 2. per-device choice */
    int count[MAX_DEV];
    if (per_device(&j, count, &r) < 0)
        goto out;
    char cs[64] = "", *w = cs;
    for (int d = 0; d < p; d++)
        w += snprintf(w, (size_t)(cs + sizeof cs - w), "%s%d", d ? "," : "", count[d]);
    snprintf(what, sizeof what, "per device, fewest chunks (%s)", cs);
    show(&j, what, &r);
    printf("    against the prefix: %+.1f ms\n", r.time_ms - prefix_ms);
    /* every device one chunk fewer than the prefix's most: what fitting would buy */
    int fewer[MAX_DEV];
    for (int d = 0; d < p; d++)
        fewer[d] = (search_prefix - 1) / p;
    mask_counts(&j, fewer, rc);
    memset(&r, 0, sizeof r);
    if (price(&j, rc, &r) < 0)
        goto out;
    snprintf(what, sizeof what, "%d chunks on every device", fewer[0]);
    show(&j, what, &r);
    rc_ok = 1;
out:
    sched_free(j.order);
    return rc_ok ? 0 : -1;
}

/* 3. The exhaustive sweep at pp=8, v=4 over which chunks recompute. */
static int sweep(void)
{
    job j;
    if (job_init(&j, 8, 4, 1) < 0)
        return -1;
    int n = 0, n_fit = 0, best_a = -1, best_b = -1;
    double best = INFINITY;
    for (int a = 0; a < 16; a++) {
        if (__builtin_popcount((unsigned)a) != 3)
            continue;
        for (int b = 0; b < 16; b++) {
            int k = __builtin_popcount((unsigned)b);
            if (k != 2 && k != 3)
                continue;
            unsigned char rc[MAX_STAGES];
            for (int i = 0; i < 32; i++) {
                int d = i % 8, c = i / 8;
                rc[i] = ((d < 5 ? a : b) >> c) & 1;
            }
            priced r;
            memset(&r, 0, sizeof r);
            if (price(&j, rc, &r) < 0) {
                sched_free(j.order);
                return -1;
            }
            n++;
            n_fit += r.fits;
            if (r.fits && r.time_ms < best) {
                best = r.time_ms;
                best_a = a;
                best_b = b;
            }
        }
    }
    printf("\nsweep at pp=8: devices 0-4 recompute one same 3-of-4 chunk set, devices 5-7 one same 2- or "
           "3-of-4 set\n  %d choices, %d fit; fastest fit %.1f ms: devices 0-4 chunks {", n, n_fit, best);
    for (int c = 0, first = 1; c < 4; c++)
        if ((best_a >> c) & 1) {
            printf("%s%d", first ? "" : ",", c);
            first = 0;
        }
    printf("}, devices 5-7 chunks {");
    for (int c = 0, first = 1; c < 4; c++)
        if ((best_b >> c) & 1) {
            printf("%s%d", first ? "" : ",", c);
            first = 0;
        }
    printf("}\n");
    /* Two chunks on every device: which pair, and what device 0 needs. */
    printf("  two chunks on every device, device 0's peak (smallest-peak pass setting):");
    for (int a = 0; a < 16; a++) {
        if (__builtin_popcount((unsigned)a) != 2)
            continue;
        unsigned char rc[MAX_STAGES];
        for (int i = 0; i < 32; i++)
            rc[i] = (a >> (i / 8)) & 1;
        priced r;
        memset(&r, 0, sizeof r);
        if (price(&j, rc, &r) < 0) {
            sched_free(j.order);
            return -1;
        }
        int c0 = __builtin_ctz((unsigned)a), c1 = 31 - __builtin_clz((unsigned)a);
        printf(" {%d,%d} %.2f GB", c0, c1, r.peak[0] / 1e9);
    }
    printf("\n");
    sched_free(j.order);
    return 0;
}

/* 5. Uneven layers: interleaved v=3 at pp=8 has 24 stages for 32 layers,
 * so each device runs one 2-layer chunk; putting it first, in the middle
 * or last changes how long its activations are held.  Recompute on
 * chunks 0 and 1 (two of four layers on every device, the count the
 * 1.40x plan needs), and on all three for reference. */
static int uneven(void)
{
    job j;
    if (job_init(&j, 8, 3, 1) < 0)
        return -1;
    printf("\ninterleaved v=3 +vocab-1, pp=8, b=1, m=64: one 2-layer chunk per device\n");
    static const char *where[3] = { "2-layer chunk first", "2-layer chunk in the middle", "2-layer chunk last" };
    for (int big = 0; big < 3; big++) {
        for (int i = 0; i < 24; i++)
            j.layers[i] = i / 8 == big ? 2 : 1;
        for (int n = 2; n <= 3; n++) {
            int count[MAX_DEV];
            for (int d = 0; d < 8; d++)
                count[d] = n;
            unsigned char rc[MAX_STAGES];
            mask_counts(&j, count, rc);
            priced r;
            memset(&r, 0, sizeof r);
            if (price(&j, rc, &r) < 0) {
                sched_free(j.order);
                return -1;
            }
            char what[64];
            snprintf(what, sizeof what, "%s, chunks 0-%d recompute", where[big], n - 1);
            show(&j, what, &r);
        }
    }
    sched_free(j.order);
    return 0;
}

/* 4. What selective recompute (Korthikanti et al. 2022: recompute the
 * attention core, keep the rest) would save: with flash attention the
 * core keeps only its log-sum-exp, the cost model's `scores` term. */
static int selective(void)
{
    zb_model m;
    zb_gpu g;
    zb_err err = { "" };
    if (model_preset("llama3-8b", &m, &err) < 0 || gpu_preset("H100-80G", &g, &err) < 0) {
        fprintf(stderr, "bench_rc_subsets: %s\n", err.msg);
        return -1;
    }
    m.micro_batch = 1;
    double t = (double)m.seq_len, e = zb_dtype_bytes(m.dtype);
    double flash_core = 4 * m.n_heads * t;          /* fp32 log-sum-exp per head and token */
    double dense_core = e * m.n_heads * m.seq_len * t; /* the s x s softmax without flash */
    cost_options co;
    cost_options_default(&co);
    cost_part layer, emb, head, layer_rc;
    if (cost_parts(&m, &g, &co, &layer, &emb, &head, &err) < 0) {
        fprintf(stderr, "bench_rc_subsets: %s\n", err.msg);
        return -1;
    }
    co.recompute = 1;
    if (cost_parts(&m, &g, &co, &layer_rc, &emb, &head, &err) < 0) {
        fprintf(stderr, "bench_rc_subsets: %s\n", err.msg);
        return -1;
    }
    cost_part layer_nf;
    co.recompute = 0;
    co.flash_attention = 0;
    if (cost_parts(&m, &g, &co, &layer_nf, &emb, &head, &err) < 0) {
        fprintf(stderr, "bench_rc_subsets: %s\n", err.msg);
        return -1;
    }
    printf("\nselective recompute (attention core only), llama3-8b, b=1, s=%d, per layer and micro-batch:\n",
           m.seq_len);
    printf("  whole layer kept for B: %.1f MB; with full recompute: %.1f MB (saves %.1f MB)\n", layer.m_b / 1e6,
           layer_rc.m_b / 1e6, (layer.m_b - layer_rc.m_b) / 1e6);
    printf("  the attention core's share with flash attention: %.2f MB (%.3f%% of the layer); without flash: %.0f MB\n",
           flash_core / 1e6, 100 * flash_core / layer.m_b, dense_core / 1e6);
    printf("  cross-check, the cost model's layer without flash minus with it: %.0f MB (the two cores' difference: %.0f MB)\n",
           (layer_nf.m_b - layer.m_b) / 1e6, (dense_core - flash_core) / 1e6);
    return 0;
}

int main(void)
{
    /* The search's reported prefixes and times (docs/search.md, this build). */
    if (depth(8, 4, 1, 21, 8258.4) < 0 || depth(4, 8, 2, 27, 8428.1) < 0 || sweep() < 0 || uneven() < 0 || selective() < 0)
        return 1;
    return 0;
}
