/*
 * bench_vocab.c: vocabulary parallelism's two figures (issue 11).
 *
 * 1. Placement cost: how long gen_vocab_insert takes to place the S and T
 *    passes into 1F1B (fused BW) of growing size, for one lookahead and
 *    for the six settings it tries, best of REPS (CPU time of the process).
 * 2. The default job (`zbsched search --mem 40G`: Llama-3 8B, 8 x H100,
 *    global batch 64): the baseline, the best plan with --vocab plain, the
 *    best vocabulary-parallel plan and the search's pick with --vocab
 *    parallel, each with its speed-up over the baseline.  The issue asks
 *    for 1.35x.
 *
 * Usage: bench_vocab [REPS] (default 3).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "schedules/gen.h"
#include "solver/search.h"

static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int placement(int reps)
{
    static const int shapes[][2] = { { 8, 64 }, { 16, 256 }, { 32, 512 }, { 64, 1024 } };
    printf("placement into 1F1B (F=1, BW=2, S=0.3, T=0.15 per shard), best of %d, CPU ms\n", reps);
    printf("%4s %6s %10s %12s %12s\n", "p", "m", "ops out", "one setting", "all six");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        gen_params gp;
        gen_params_default(&gp);
        gp.stages = shapes[i][0];
        gp.microbatches = shapes[i][1];
        sched_t *base = NULL, *v = NULL;
        zb_err err = { "" };
        if (gen_1f1b(&gp, &base, &err) != 0) {
            fprintf(stderr, "bench_vocab: %s\n", err.msg);
            return -1;
        }
        sched_vocab vp = { .variant = 1, .t_s = 0.3, .t_t = 0.15, .d_s = 1, .d_t = -1 };
        double one = 1e300, all = 1e300;
        long ops = 0;
        for (int r = 0; r < reps; r++) {
            double t0 = cpu_ms();
            if (gen_vocab_insert_with(base, &vp, 1, 0, &v, &err) != 0) {
                fprintf(stderr, "bench_vocab: %s\n", err.msg);
                return -1;
            }
            double t1 = cpu_ms();
            ops = sched_op_count(v);
            sched_free(v);
            if (gen_vocab_insert(base, &vp, &v, &err) != 0) {
                fprintf(stderr, "bench_vocab: %s\n", err.msg);
                return -1;
            }
            double t2 = cpu_ms();
            sched_free(v);
            if (t1 - t0 < one)
                one = t1 - t0;
            if (t2 - t1 < all)
                all = t2 - t1;
        }
        printf("%4d %6d %10ld %12.1f %12.1f\n", gp.stages, gp.microbatches, ops, one, all);
        sched_free(base);
    }
    return 0;
}

/* The best fitting candidate with vocab == want (-1: any). */
static const search_candidate *best_of(const search_result *r, int want)
{
    for (int i = 0; i < r->n_fit; i++)
        if (want < 0 || (want == 0) == (r->c[i].vocab == 0))
            return &r->c[i];
    return NULL;
}

static void row(const char *what, const search_candidate *c, double base_ms)
{
    if (!c) {
        printf("%-34s nothing fits\n", what);
        return;
    }
    printf("%-34s %-30s pp=%d dp=%d b=%d  %9.1f ms  %.3fx\n", what, c->label, c->pp, c->dp,
           c->micro_batch, c->time_ms, base_ms / c->time_ms);
}

static int default_job(void)
{
    search_options o;
    search_options_default(&o);
    o.vocab = 1; /* as `zbsched search` runs it */
    search_result r;
    zb_err err = { "" };
    double t0 = cpu_ms();
    if (search_run(&o, &r, &err) != 0) {
        fprintf(stderr, "bench_vocab: %s\n", err.msg);
        return -1;
    }
    double t1 = cpu_ms();
    double base = r.baseline.time_ms;
    printf("\ndefault job (llama3-8b, 8 x H100-80G, batch 64, 40 GB), search CPU %.0f ms\n", t1 - t0);
    printf("%-34s %-30s %9.1f ms\n", "baseline (1F1B, recompute, b=1)", r.baseline.label, base);
    row("search's pick (--vocab parallel)", best_of(&r, -1), base);
    row("best plain plan", best_of(&r, 0), base);
    row("best vocabulary-parallel plan", best_of(&r, 1), base);
    search_result_free(&r);
    return 0;
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 3;
    if (reps < 1)
        reps = 1;
    if (placement(reps) != 0 || default_job() != 0)
        return 1;
    return 0;
}
