/*
 * bench_vocab_runtime.c: the CPU runtime's step time with and without
 * vocabulary parallelism on 2 devices with a wide vocabulary, against the
 * simulator's prediction (issue 11).
 *
 * The text loader is character-level (at most 256 tokens), too narrow for
 * the head to matter.  This bench tokenises tinyshakespeare into 3-byte
 * chunks instead: the V-1 most frequent chunks get ids 0..V-2 and every
 * other chunk id V-1, so the model's vocabulary is V (default 4096) with
 * real text behind it.  Then:
 *
 *   1. profiles the model on this machine (runtime/profiler.h: one layer,
 *      the embedding, the final norm + head + loss), and times one shard's
 *      S and T passes (kernels/cpu/vocab_shard.h, the runtime's code path:
 *      Vocab-1 S = logits, statistics, local partial; T = statistics
 *      combine, logit gradient, dW; Vocab-2 moves the partial into T);
 *   2. builds each schedule: the plain one with the profiled stage costs,
 *      and the vocabulary-parallel one from the same base with the head's
 *      time taken off the last stage and the measured passes inserted by
 *      gen_vocab_insert (barriers cost 0: they are in-process waits);
 *   3. simulates each (predicted cost: the largest per-device span, the
 *      figure the runtime realises, bench_realised.c);
 *   4. trains each for `steps` steps after one warm-up, taking turns step
 *      by step so that background load hits all alike, one kernel thread
 *      per device, and reports the median and the minimum wall time of
 *      trainer_step (the minimum is the figure least disturbed by other
 *      jobs on a shared machine), and each device worker's CPU time per
 *      step (/proc/self/task/TID/stat, clock ticks): the work balance that
 *      vocabulary parallelism changes, which other jobs do not inflate.
 *
 * Usage: bench_vocab_runtime [--model FILE] [--vocab V] [--m M] [--steps N] [--data PATH]
 * Defaults: bench/runtime/vocab-wide.json, V = 4096, m = 8, 10 steps,
 * ../shared/data/tinyshakespeare.txt (run from the repository root).
 */
#include <dirent.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/cpu/kernels.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/vocab_shard.h"
#include "runtime/data.h"
#include "runtime/profiler.h"
#include "runtime/trainer.h"
#include "schedules/gen.h"
#include "src/model.h"
#include "src/sim.h"
#include "src/validate.h"

#define N_RUNS 5

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* A chunk and its count, for ranking the 3-byte chunks. */
typedef struct chunk {
    unsigned key;  /* the 3 bytes */
    long count;    /* occurrences */
} chunk;

static int by_count(const void *a, const void *b)
{
    const chunk *x = a, *y = b;
    return x->count != y->count ? (x->count < y->count) - (x->count > y->count)
                                : (x->key > y->key) - (x->key < y->key);
}

/* Replaces d's character tokens by 3-byte chunk tokens of vocabulary V
 * (text: the raw bytes).  0 or -1. */
static int chunk_tokens(zb_data *d, const unsigned char *text, size_t len, int V)
{
    size_t n = len / 3;
    chunk *c = calloc(1u << 24, sizeof *c);
    int32_t *id = malloc(sizeof(int32_t) << 24);
    int32_t *tok = malloc(sizeof(int32_t) * n);
    if (!c || !id || !tok) {
        free(c);
        free(id);
        free(tok);
        return -1;
    }
    for (unsigned k = 0; k < (1u << 24); k++)
        c[k].key = k;
    for (size_t i = 0; i < n; i++)
        c[(unsigned)text[3 * i] << 16 | (unsigned)text[3 * i + 1] << 8 | text[3 * i + 2]].count++;
    qsort(c, 1u << 24, sizeof *c, by_count);
    for (unsigned k = 0; k < (1u << 24); k++)
        id[c[k].key] = k < (unsigned)V - 1 ? (int32_t)k : V - 1;
    for (size_t i = 0; i < n; i++)
        tok[i] = id[(unsigned)text[3 * i] << 16 | (unsigned)text[3 * i + 1] << 8 | text[3 * i + 2]];
    free(c);
    free(id);
    free(d->tokens);
    d->tokens = tok;
    d->n_tokens = n;
    d->n_train = n - n / 10;
    d->vocab = V;
    return 0;
}

/* Median ms of one shard's S and T passes (variant 1 or 2) for p shards. */
static void time_passes(const zb_model *m, int batch, int p, int variant, int reps, double *t_s,
                        double *t_t)
{
    int N = batch * m->seq_len, d = m->d_model, V = m->vocab;
    int v = vshard_begin(1, p, V) - vshard_begin(0, p, V);
    float *x = malloc(sizeof(float) * N * d), *w = malloc(sizeof(float) * d * v);
    float *lg = malloc(sizeof(float) * N * v), *scr = malloc(sizeof(float) * N * v);
    float *part = malloc(sizeof(float) * N * d), *dw = malloc(sizeof(float) * d * v);
    float *mx[8], *tg[8], *lse = malloc(sizeof(float) * N);
    float *H = calloc((size_t)d * V, sizeof(float));
    double *sm[8];
    int32_t *y = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N * d; i++)
        x[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    for (int i = 0; i < d * v; i++)
        w[i] = (float)((i * 104729) % 1000) / 50000.0f - 0.01f;
    for (int n = 0; n < N; n++)
        y[n] = (n * 31) % v;
    for (int k = 0; k < p; k++) {
        mx[k] = malloc(sizeof(float) * N);
        tg[k] = malloc(sizeof(float) * N);
        sm[k] = malloc(sizeof(double) * N);
    }
    double *ts = malloc(sizeof(double) * reps), *tt = malloc(sizeof(double) * reps);
    for (int r = -1; r < reps; r++) {
        double a = now_ms();
        vshard_forward(lg, mx[0], sm[0], tg[0], variant == 1 ? scr : NULL, x, w, y, 0, N, d, v);
        if (variant == 1)
            vshard_local_partial(part, scr, sm[0], w, N, d, v);
        double b = now_ms();
        for (int k = 1; k < p; k++) { /* the other shards' statistics, as T reads them */
            memcpy(mx[k], mx[0], sizeof(float) * N);
            memcpy(tg[k], tg[0], sizeof(float) * N);
            memcpy(sm[k], sm[0], sizeof(double) * N);
        }
        double c = now_ms();
        vshard_combine_stats(lse, NULL, (const float *const *)mx, (const double *const *)sm,
                             (const float *const *)tg, y, p, V, N);
        vshard_logit_grad(lg, lg, lse, y, 0, 0.125f, N, v);
        if (variant == 2)
            kern_matmul_backward_b(part, lg, w, N, d, v);
        kern_matmul_backward_w(dw, x, lg, N, d, v);
        vshard_scatter_add(H, dw, d, V, 0, v);
        double e = now_ms();
        if (r >= 0) {
            ts[r] = b - a;
            tt[r] = e - c;
        }
    }
    *t_s = median(ts, reps);
    *t_t = median(tt, reps);
    for (int k = 0; k < p; k++) {
        free(mx[k]);
        free(tg[k]);
        free(sm[k]);
    }
    free(ts);
    free(tt);
    free(x);
    free(w);
    free(lg);
    free(scr);
    free(part);
    free(dw);
    free(lse);
    free(H);
    free(y);
}

/* The threads of this process (/proc/self/task), ascending, into tids
 * (at most cap); returns how many. */
static int list_tids(int *tids, int cap)
{
    DIR *dir = opendir("/proc/self/task");
    int n = 0;
    struct dirent *e;
    while (dir && (e = readdir(dir)) != NULL)
        if (e->d_name[0] != '.' && n < cap)
            tids[n++] = atoi(e->d_name);
    if (dir)
        closedir(dir);
    for (int i = 1; i < n; i++) /* insertion sort: a few dozen threads */
        for (int j = i; j > 0 && tids[j - 1] > tids[j]; j--) {
            int x = tids[j];
            tids[j] = tids[j - 1];
            tids[j - 1] = x;
        }
    return n;
}

/* CPU time (user + system) thread tid has used, in ms; 0 when unknown. */
static double thread_cpu_ms(int tid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* fields after the command name */
    unsigned long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return 0;
    return (double)(ut + st) * 1e3 / (double)sysconf(_SC_CLK_TCK);
}

#define MAX_TIDS 256

/* One configuration under test. */
typedef struct config {
    const char *kind;  /* generator kind */
    int variant;       /* 0 plain, 1 or 2 */
    sched_t *s;        /* the schedule (costs in ms) */
    trainer *t;        /* its trainer */
    double cost;       /* predicted ms per step (largest device span) */
    double *wall;      /* [steps] measured ms */
    int worker[2];     /* thread ids of its two device workers (started by
                        * its first step), device order */
    double cpu[2];     /* CPU ms each worker used over the timed steps */
} config;

int main(int argc, char **argv)
{
    const char *model_name = "bench/runtime/vocab-wide.json";
    const char *data_path = "../shared/data/tinyshakespeare.txt";
    int V = 4096, m = 8, steps = 10, c;
    static const struct option opts[] = {
        { "model", required_argument, NULL, 'M' }, { "vocab", required_argument, NULL, 'V' },
        { "m", required_argument, NULL, 'm' },     { "steps", required_argument, NULL, 'n' },
        { "data", required_argument, NULL, 'd' },  { NULL, 0, NULL, 0 },
    };
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'M': model_name = optarg; break;
        case 'V': V = atoi(optarg); break;
        case 'm': m = atoi(optarg); break;
        case 'n': steps = atoi(optarg); break;
        case 'd': data_path = optarg; break;
        default:
            fprintf(stderr, "usage: bench_vocab_runtime [--model FILE] [--vocab V] [--m M] "
                            "[--steps N] [--data PATH]\n");
            return 2;
        }
    }
    if (m < 1 || steps < 1 || V < 2 || V > (1 << 20)) {
        fprintf(stderr, "bench_vocab_runtime: --m, --steps must be positive, --vocab 2..2^20\n");
        return 2;
    }
    zb_err err = { { 0 } };
    zb_model model;
    zb_data *data = NULL;
    FILE *f = fopen(data_path, "rb");
    unsigned char *text = NULL;
    long len = 0;
    if (f && fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0
        && (text = malloc((size_t)len)) && fread(text, 1, (size_t)len, f) != (size_t)len) {
        free(text);
        text = NULL;
    }
    if (f)
        fclose(f);
    if (!text) {
        fprintf(stderr, "bench_vocab_runtime: cannot read %s\n", data_path);
        return 1;
    }
    if (model_load(model_name, &model, &err) != 0
        || data_from_text((const char *)text, (size_t)len, model.seq_len, &data, &err) != 0) {
        fprintf(stderr, "bench_vocab_runtime: %s\n", err.msg);
        return 1;
    }
    if (chunk_tokens(data, text, (size_t)len, V) != 0) {
        fprintf(stderr, "bench_vocab_runtime: out of memory\n");
        return 1;
    }
    free(text);
    model.vocab = V;
    kernels_init_threads(1);
    zb_profile prof;
    if (profiler_measure(&model, model.micro_batch, 7, &prof, &err) != 0) {
        fprintf(stderr, "bench_vocab_runtime: %s\n", err.msg);
        return 1;
    }
    int p = 2;
    double ts[3], tt[3];
    time_passes(&model, model.micro_batch, p, 1, 7, &ts[1], &tt[1]);
    time_passes(&model, model.micro_batch, p, 2, 7, &ts[2], &tt[2]);
    printf("model %s: %d layers, d=%d, vocab %d (3-byte chunks), micro-batch %d x %d, p=%d, "
           "m=%d, %d steps\n", model.name, model.n_layers, model.d_model, V, model.micro_batch,
           model.seq_len, p, m, steps);
    printf("profiled ms: layer F %.2f B %.2f W %.2f; head F %.2f B %.2f W %.2f; "
           "shard S/T: vocab-1 %.2f/%.2f, vocab-2 %.2f/%.2f\n", prof.layer.t_f * 1e3,
           prof.layer.t_b * 1e3, prof.layer.t_w * 1e3, prof.head.t_f * 1e3, prof.head.t_b * 1e3,
           prof.head.t_w * 1e3, ts[1], tt[1], ts[2], tt[2]);

    config cf[N_RUNS] = {
        { .kind = "1f1b", .variant = 0 }, { .kind = "1f1b", .variant = 1 },
        { .kind = "1f1b", .variant = 2 }, { .kind = "zb-v", .variant = 0 },
        { .kind = "zb-v", .variant = 1 },
    };
    trainer_opts o;
    trainer_opts_default(&o);
    o.adamw.warmup_steps = 0;
    o.threads = 1;
    o.record_times = 1;
    for (int k = 0; k < N_RUNS; k++) {
        gen_params g;
        gen_params_default(&g);
        g.stages = p;
        g.microbatches = m;
        g.chunks = !strcmp(cf[k].kind, "zb-v") ? 2 : 1;
        sched_t *base = NULL;
        sim_result r;
        memset(&r, 0, sizeof r);
        if (gen_lookup(cf[k].kind)(&g, &base, &err) != 0
            || profiler_apply(&prof, &model, base, &err) != 0) {
            fprintf(stderr, "bench_vocab_runtime: %s: %s\n", cf[k].kind, err.msg);
            return 1;
        }
        if (cf[k].variant == 0) {
            cf[k].s = base;
        } else {
            /* the head leaves the last stage; its work is in the passes */
            stage_cost *lc = &base->cost[base->n_stages - 1];
            lc->t_f -= prof.head.t_f * 1e3;
            lc->t_b -= prof.head.t_b * 1e3;
            lc->t_w -= prof.head.t_w * 1e3;
            sched_vocab vp = { .variant = cf[k].variant, .t_s = ts[cf[k].variant],
                               .t_t = tt[cf[k].variant] };
            if (gen_vocab_insert(base, &vp, &cf[k].s, &err) != 0) {
                fprintf(stderr, "bench_vocab_runtime: %s: %s\n", cf[k].kind, err.msg);
                return 1;
            }
            sched_free(base);
        }
        if (sched_validate(cf[k].s, &err) != 0 || sim_run(cf[k].s, &r, &err) != 0
            || trainer_create(cf[k].s, &model, data, &o, &cf[k].t, &err) != 0) {
            fprintf(stderr, "bench_vocab_runtime: %s: %s\n", cf[k].kind, err.msg);
            return 1;
        }
        cf[k].cost = r.cost;
        sim_result_free(&r);
        if (!(cf[k].wall = calloc((size_t)steps, sizeof(double)))) {
            fprintf(stderr, "bench_vocab_runtime: out of memory\n");
            return 1;
        }
    }
    double first_loss[N_RUNS];
    static int before[MAX_TIDS], after[MAX_TIDS];
    for (int i = -1; i < steps; i++) /* i = -1: warm-up */
        for (int k = 0; k < N_RUNS; k++) {
            double loss, c0[2] = { 0, 0 };
            int nb = i < 0 ? list_tids(before, MAX_TIDS) : 0;
            for (int w = 0; w < 2 && i >= 0; w++)
                c0[w] = thread_cpu_ms(cf[k].worker[w]);
            if (trainer_step(cf[k].t, &loss, &err) != 0) {
                fprintf(stderr, "bench_vocab_runtime: %s: %s\n", cf[k].kind, err.msg);
                return 1;
            }
            if (i < 0) {
                /* the first step started this trainer's workers: the new
                 * threads, in creation (device) order */
                int na = list_tids(after, MAX_TIDS), w = 0;
                for (int a = 0; a < na && w < 2; a++) {
                    int seen = 0;
                    for (int b = 0; b < nb; b++)
                        seen |= before[b] == after[a];
                    if (!seen)
                        cf[k].worker[w++] = after[a];
                }
                first_loss[k] = loss;
            } else {
                cf[k].wall[i] = trainer_get_stats(cf[k].t)->last_step_s * 1e3;
                for (int w = 0; w < 2; w++)
                    cf[k].cpu[w] += thread_cpu_ms(cf[k].worker[w]) - c0[w];
            }
        }
    printf("%-6s %-8s %12s %12s %10s %10s %12s %16s %12s\n", "kind", "vocab", "predicted ms",
           "median ms", "meas/pred", "min ms", "trace sim ms", "CPU ms dev0/dev1", "first loss");
    double meas[N_RUNS], best[N_RUNS];
    for (int k = 0; k < N_RUNS; k++) {
        best[k] = cf[k].wall[0];
        for (int i = 1; i < steps; i++)
            best[k] = fmin(best[k], cf[k].wall[i]);
        meas[k] = median(cf[k].wall, steps);
        /* the last step's measured mean op times, simulated: the schedule's
         * figure with this run's own op costs */
        sched_t *tr = NULL;
        sim_result r;
        memset(&r, 0, sizeof r);
        double resim = NAN;
        if (trainer_trace(cf[k].t, &tr, &err) == 0 && sim_run(tr, &r, &err) == 0)
            resim = r.cost;
        sim_result_free(&r);
        sched_free(tr);
        char vname[16];
        snprintf(vname, sizeof vname, cf[k].variant ? "vocab-%d" : "plain", cf[k].variant);
        printf("%-6s %-8s %12.1f %12.1f %10.3f %10.1f %12.1f %7.0f/%-8.0f %12.6f\n", cf[k].kind,
               vname, cf[k].cost, meas[k], meas[k] / cf[k].cost, best[k], resim,
               cf[k].cpu[0] / steps, cf[k].cpu[1] / steps, first_loss[k]);
    }
    printf("speed-up over plain (median / min / predicted): 1f1b vocab-1 %.3fx / %.3fx / %.3fx, "
           "vocab-2 %.3fx / %.3fx / %.3fx; zb-v vocab-1 %.3fx / %.3fx / %.3fx\n",
           meas[0] / meas[1], best[0] / best[1], cf[0].cost / cf[1].cost, meas[0] / meas[2],
           best[0] / best[2], cf[0].cost / cf[2].cost, meas[3] / meas[4], best[3] / best[4],
           cf[3].cost / cf[4].cost);
    for (int k = 0; k < N_RUNS; k++) {
        free(cf[k].wall);
        trainer_free(cf[k].t);
        sched_free(cf[k].s);
    }
    data_free(data);
    return 0;
}
