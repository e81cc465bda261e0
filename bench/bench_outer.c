/*
 * bench_outer.c: the "train across islands" experiment and the all-reduce
 * micro-benchmark.
 *
 *   bench_outer ring [--n N] [--replicas K] [--reps R]
 *       times the simulated ring all-reduce (fp32 and int8) of N floats
 *       over K replicas and prints bytes sent and GB/s of input reduced.
 *
 *   bench_outer train [--replicas K] [--inner-steps H] [--steps N]
 *                     [--model NAME] [--batch B] [--lr LR] [--modes LIST]
 *                     [--schedule zb-h1|1f1b|gpipe] [--pp P] [--micro M]
 *                     [--eval-windows W] [--data PATH] [--seed S]
 *                     [--outer-lr X] [--outer-momentum X] [--sync-interval S]
 *       trains K replicas of a pipeline (P devices, M micro-batches of B
 *       sequences, the given generator) on tinyshakespeare for N inner
 *       steps each, once per mode in LIST (comma separated, from
 *       sync-fp32, sync-int8, diloco-fp32, diloco-int8, edit-fp32, edit-int8,
 *       a-edit-fp32, single), and prints per mode: final validation loss,
 *       bytes sent, outer steps, tokens and wall time.  Every mode uses the
 *       same compute (K x N replica steps); "single" is one replica alone
 *       for N steps (1/K of the compute) for reference.
 *
 * Deterministic: same arguments, same losses and bytes.  Workload: the
 * reduced models that fit a few minutes on 2 cores (see bench/README.md).
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/outer/islands.h"
#include "runtime/outer/outer_ring.h"
#include "schedules/gen.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int bench_ring(int argc, char **argv)
{
    long n = 1L << 22, reps = 5, k = 4;
    static const struct option opts[] = {
        { "n", required_argument, NULL, 'n' },
        { "replicas", required_argument, NULL, 'k' },
        { "reps", required_argument, NULL, 'r' },
        { 0, 0, 0, 0 },
    };
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'n') n = atol(optarg);
        else if (c == 'k') k = atol(optarg);
        else if (c == 'r') reps = atol(optarg);
        else return 2;
    }
    if (n < 1 || k < 1 || k > 64 || reps < 1) {
        fprintf(stderr, "bench_outer ring: bad sizes\n");
        return 2;
    }
    float **b = malloc((size_t)k * sizeof *b);
    for (int r = 0; r < k; r++) {
        b[r] = malloc((size_t)n * sizeof(float));
        for (long j = 0; j < n; j++)
            b[r][j] = (float)(((j * 2654435761u + (unsigned)r * 40503u) % 2001) - 1000) * 1e-5f;
    }
    printf("ring all-reduce, K=%ld replicas, n=%ld floats (%.1f MiB per replica), %ld reps\n",
           k, n, n * 4.0 / 1048576.0, reps);
    printf("%-6s %14s %12s %14s\n", "wire", "bytes/call", "ms/call", "GB/s reduced");
    for (int w = 0; w < 2; w++) {
        outer_ring_stats st = { 0 };
        zb_err err = { "" };
        double t0 = now_s();
        for (long i = 0; i < reps; i++)
            if (outer_allreduce((outer_wire)w, b, (int)k, (size_t)n, (float)k, &st, &err)) {
                fprintf(stderr, "bench_outer: %s\n", err.msg);
                return 1;
            }
        double dt = (now_s() - t0) / reps;
        printf("%-6s %14llu %12.2f %14.2f\n", outer_wire_name((outer_wire)w),
               (unsigned long long)(st.bytes_sent / reps), dt * 1e3, k * n * 4.0 / dt / 1e9);
    }
    for (int r = 0; r < k; r++)
        free(b[r]);
    free(b);
    return 0;
}

typedef struct mode {
    const char *name;  /* as given in --modes */
    outer_kind kind;   /* outer optimizer */
    outer_wire wire;   /* all-reduce */
    int single;        /* 1: one replica, no outer optimizer traffic */
} mode;

static const mode modes[] = {
    { "sync-fp32", OUTER_SYNC, OUTER_WIRE_FP32, 0 },
    { "sync-int8", OUTER_SYNC, OUTER_WIRE_INT8, 0 },
    { "diloco-fp32", OUTER_DILOCO, OUTER_WIRE_FP32, 0 },
    { "diloco-int8", OUTER_DILOCO, OUTER_WIRE_INT8, 0 },
    { "edit-fp32", OUTER_EDIT, OUTER_WIRE_FP32, 0 },
    { "edit-int8", OUTER_EDIT, OUTER_WIRE_INT8, 0 },
    { "a-edit-fp32", OUTER_AEDIT, OUTER_WIRE_FP32, 0 },
    { "single", OUTER_SYNC, OUTER_WIRE_FP32, 1 },
};

static int bench_train(int argc, char **argv)
{
    long k = 4, h = 50, steps = 500, batch = 0, pp = 2, micro = 4, evalw = 32, seed = 1;
    double lr = 1e-3, aedit_s = 0, outer_lr = 0.7, outer_mom = 0.9;
    const char *model = "tiny", *list = "sync-fp32,diloco-fp32,diloco-int8", *gen = "zb-h1";
    const char *data = "../shared/data/tinyshakespeare.txt";
    static const struct option opts[] = {
        { "replicas", required_argument, NULL, 'k' },
        { "inner-steps", required_argument, NULL, 'H' },
        { "steps", required_argument, NULL, 'n' },
        { "model", required_argument, NULL, 'm' },
        { "batch", required_argument, NULL, 'b' },
        { "lr", required_argument, NULL, 'l' },
        { "modes", required_argument, NULL, 'M' },
        { "schedule", required_argument, NULL, 's' },
        { "pp", required_argument, NULL, 'p' },
        { "micro", required_argument, NULL, 'u' },
        { "eval-windows", required_argument, NULL, 'e' },
        { "data", required_argument, NULL, 'd' },
        { "seed", required_argument, NULL, 'S' },
        { "sync-interval", required_argument, NULL, 'i' },
        { "outer-lr", required_argument, NULL, 'O' },
        { "outer-momentum", required_argument, NULL, 'U' },
        { 0, 0, 0, 0 },
    };
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'k': k = atol(optarg); break;
        case 'H': h = atol(optarg); break;
        case 'n': steps = atol(optarg); break;
        case 'm': model = optarg; break;
        case 'b': batch = atol(optarg); break;
        case 'l': lr = atof(optarg); break;
        case 'M': list = optarg; break;
        case 's': gen = optarg; break;
        case 'p': pp = atol(optarg); break;
        case 'u': micro = atol(optarg); break;
        case 'e': evalw = atol(optarg); break;
        case 'd': data = optarg; break;
        case 'S': seed = atol(optarg); break;
        case 'i': aedit_s = atof(optarg); break;
        case 'O': outer_lr = atof(optarg); break;
        case 'U': outer_mom = atof(optarg); break;
        default: return 2;
        }
    }
    zb_err err = { "" };
    zb_model m;
    if (model_load(model, &m, &err)) {
        fprintf(stderr, "bench_outer: %s\n", err.msg);
        return 1;
    }
    if (batch > 0)
        m.micro_batch = (int)batch;
    zb_data *d = NULL;
    if (data_load_file(data, m.seq_len, &d, &err)) {
        fprintf(stderr, "bench_outer: %s\n", err.msg);
        return 1;
    }
    gen_params gp;
    gen_params_default(&gp);
    gp.stages = (int)pp;
    gp.microbatches = (int)micro;
    gen_fn fn = gen_lookup(gen);
    sched_t *s = NULL;
    if (!fn || fn(&gp, &s, &err)) {
        fprintf(stderr, "bench_outer: schedule %s: %s\n", gen, fn ? err.msg : "unknown generator");
        data_free(d);
        return 1;
    }
    trainer_opts to;
    trainer_opts_default(&to);
    to.seed = (uint64_t)seed;
    to.eval_windows = (int)evalw;
    to.adamw.lr = (float)lr;
    to.adamw.min_lr = (float)lr / 10;
    to.adamw.warmup_steps = (int)(steps / 10 > 0 ? steps / 10 : 1);
    to.adamw.decay_steps = (int)steps;
    printf("model %s: %d layers, d=%d, heads %d, ff %d, seq %d, batch %d; schedule %s p=%ld m=%ld;"
           " K=%ld, H=%ld, %ld steps, lr %g, outer lr %g momentum %g, eval %ld windows\n",
           m.name, m.n_layers, m.d_model, m.n_heads, m.d_ff, m.seq_len, m.micro_batch, gen, pp,
           micro, k, h, steps, lr, outer_lr, outer_mom, evalw);
    printf("%-12s %9s %14s %8s %12s %10s %6s %6s %8s\n", "mode", "val_loss", "bytes_sent", "outer",
           "tokens", "last_loss", "elim", "skip", "wall_s");
    int rc = 0;
    char *copy = strdup(list);
    for (char *tok = strtok(copy, ","); tok && rc == 0; tok = strtok(NULL, ",")) {
        const mode *md = NULL;
        for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
            if (!strcmp(tok, modes[i].name))
                md = &modes[i];
        if (!md) {
            fprintf(stderr, "bench_outer: unknown mode '%s'\n", tok);
            rc = 2;
            break;
        }
        islands_opts io;
        islands_opts_default(&io);
        io.replicas = md->single ? 1 : (int)k;
        io.steps = steps;
        outer_config_default(&io.outer, md->kind);
        io.outer.wire = md->wire;
        io.outer.inner_steps = (int)h;
        io.outer.outer_lr = (float)outer_lr;
        io.outer.outer_momentum = (float)outer_mom;
        io.outer.edit_warmup = 3;
        if (md->kind == OUTER_AEDIT) {
            io.outer.aedit_interval_s = aedit_s > 0 ? aedit_s : 1.0;
            io.outer.aedit_min_steps = 1;
        }
        islands_result r;
        if (islands_run(s, &m, d, &to, &io, &r, &err)) {
            fprintf(stderr, "bench_outer: %s: %s\n", tok, err.msg);
            rc = 1;
            break;
        }
        double last = 0;
        int nl = 0;
        for (long i = steps - 10 > 0 ? steps - 10 : 0; i < steps; i++, nl++)
            last += r.loss[i];
        printf("%-12s %9.4f %14llu %8ld %12ld %10.4f %6ld %6ld %8.1f\n", tok, r.final_val_loss,
               (unsigned long long)r.bytes_sent, r.outer_steps, r.tokens, last / nl, r.eliminated,
               r.skipped, r.wall_s);
        fflush(stdout);
        islands_result_free(&r);
    }
    free(copy);
    sched_free(s);
    data_free(d);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "ring"))
        return bench_ring(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "train"))
        return bench_train(argc - 1, argv + 1);
    fprintf(stderr, "usage: bench_outer ring|train [flags]  (see the comment at the top of bench/bench_outer.c)\n");
    return 2;
}
