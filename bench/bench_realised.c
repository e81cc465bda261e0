/*
 * bench_realised.c: which figure does `zbsched run` realise per iteration,
 * the paper's cost (largest per-device span) that the search ranks by, or
 * the makespan (first op start to last op end over all devices)?
 *
 * Issue 10 ranks by the cost because the runtime steps each device's
 * optimizer as soon as that device's ops are done (post-validation).  This
 * bench checks it on the CPU: for schedules whose cost and makespan differ
 * (ZB-H2 and ZB-V against 1F1B and ZB-H1) it
 *
 *   1. profiles the model on this machine (runtime/profiler.h) and puts
 *      each stage's profiled cost on the schedule (profiler_apply);
 *   2. simulates it: predicted cost and makespan;
 *   3. trains it for `steps` steps after one warm-up, the schedules taking
 *      turns step by step so that background load hits all alike, and
 *      records the median wall time of trainer_step (ops + optimizer);
 *   4. prints measured / cost and measured / makespan per schedule, and
 *      the spread of each ratio over the schedules: the figure the runtime
 *      realises is the one whose ratio stays constant (a fixed optimizer and
 *      thread start-up overhead on top).
 *
 * Usage: bench_realised [--model NAME|FILE] [--m M] [--steps N] [--data PATH]
 * Defaults: bench/runtime/wide.json (W about half of F, as in the paper),
 * m = 8, 15 steps, ../shared/data/tinyshakespeare.txt (run from the root).
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/data.h"
#include "runtime/profiler.h"
#include "runtime/trainer.h"
#include "schedules/gen.h"
#include "src/model.h"
#include "src/sim.h"
#include "src/validate.h"

#define N_KINDS 4

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

/* (max - min) / mean of v[0..n). */
static double spread(const double *v, int n)
{
    double lo = INFINITY, hi = -INFINITY, sum = 0;
    for (int i = 0; i < n; i++) {
        lo = fmin(lo, v[i]);
        hi = fmax(hi, v[i]);
        sum += v[i];
    }
    return (hi - lo) / (sum / n);
}

int main(int argc, char **argv)
{
    const char *model_name = "bench/runtime/wide.json", *data_path = "../shared/data/tinyshakespeare.txt";
    int m = 8, steps = 15, c;
    static const struct option opts[] = {
        { "model", required_argument, NULL, 'M' }, { "m", required_argument, NULL, 'm' },
        { "steps", required_argument, NULL, 'n' }, { "data", required_argument, NULL, 'd' },
        { NULL, 0, NULL, 0 },
    };
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'M': model_name = optarg; break;
        case 'm': m = atoi(optarg); break;
        case 'n': steps = atoi(optarg); break;
        case 'd': data_path = optarg; break;
        default:
            fprintf(stderr, "usage: bench_realised [--model NAME|FILE] [--m M] [--steps N] [--data PATH]\n");
            return 2;
        }
    }
    if (m < 1 || steps < 1) {
        fprintf(stderr, "bench_realised: --m and --steps must be positive\n");
        return 2;
    }
    zb_err err = { { 0 } };
    zb_model model;
    zb_data *data = NULL;
    if (model_load(model_name, &model, &err) != 0 || data_load_file(data_path, model.seq_len, &data, &err) != 0) {
        fprintf(stderr, "bench_realised: %s\n", err.msg);
        return 1;
    }
    model.vocab = data->vocab;
    zb_profile prof;
    if (profiler_measure(&model, model.micro_batch, 7, &prof, &err) != 0) {
        fprintf(stderr, "bench_realised: %s\n", err.msg);
        return 1;
    }
    int p = 2;
    double per = (double)model.n_layers / p;
    gen_params gp;
    gen_params_default(&gp);
    gp.stages = p;
    gp.microbatches = m;
    gp.t_f = per * prof.layer.t_f * 1e3;
    gp.t_b = per * prof.layer.t_b * 1e3;
    gp.t_w = per * prof.layer.t_w * 1e3;
    gp.t_comm = prof.t_comm * 1e3;
    printf("model %s (%d layers, d=%d), micro-batch %d x %d, p=%d, m=%d, %d steps\n", model.name, model.n_layers,
           model.d_model, model.micro_batch, model.seq_len, p, m, steps);

    const char *kinds[N_KINDS] = { "1f1b", "zb-h1", "zb-h2", "zb-v" };
    sched_t *s[N_KINDS] = { NULL };
    trainer *t[N_KINDS] = { NULL };
    double cost[N_KINDS], span[N_KINDS], meas[N_KINDS], *wall[N_KINDS];
    trainer_opts o;
    trainer_opts_default(&o);
    o.adamw.warmup_steps = 0;
    for (int k = 0; k < N_KINDS; k++) {
        sim_result r;
        memset(&r, 0, sizeof r);
        gen_params g = gp;
        g.chunks = !strcmp(kinds[k], "zb-v") ? 2 : 1;
        if (gen_lookup(kinds[k])(&g, &s[k], &err) != 0 || profiler_apply(&prof, &model, s[k], &err) != 0
            || sched_validate(s[k], &err) != 0 || sim_run(s[k], &r, &err) != 0
            || trainer_create(s[k], &model, data, &o, &t[k], &err) != 0) {
            fprintf(stderr, "bench_realised: %s: %s\n", kinds[k], err.msg);
            return 1;
        }
        cost[k] = r.cost;
        span[k] = r.makespan;
        sim_result_free(&r);
        wall[k] = calloc((size_t)steps, sizeof(double));
        if (!wall[k]) {
            fprintf(stderr, "bench_realised: out of memory\n");
            return 1;
        }
    }
    for (int i = -1; i < steps; i++) /* i = -1: warm-up */
        for (int k = 0; k < N_KINDS; k++) {
            double loss;
            if (trainer_step(t[k], &loss, &err) != 0) {
                fprintf(stderr, "bench_realised: %s: %s\n", kinds[k], err.msg);
                return 1;
            }
            if (i >= 0)
                wall[k][i] = trainer_get_stats(t[k])->last_step_s * 1e3;
        }
    double rc[N_KINDS], rm[N_KINDS];
    printf("%-6s %12s %12s %12s %10s %10s\n", "", "cost ms", "makespan ms", "measured ms", "meas/cost", "meas/mksp");
    for (int k = 0; k < N_KINDS; k++) {
        meas[k] = median(wall[k], steps);
        rc[k] = meas[k] / cost[k];
        rm[k] = meas[k] / span[k];
        printf("%-6s %12.2f %12.2f %12.2f %10.3f %10.3f\n", kinds[k], cost[k], span[k], meas[k], rc[k], rm[k]);
    }
    printf("spread of measured/cost over the schedules %.1f%%, of measured/makespan %.1f%%: "
           "the runtime realises the %s\n", 100 * spread(rc, N_KINDS), 100 * spread(rm, N_KINDS),
           spread(rc, N_KINDS) < spread(rm, N_KINDS) ? "cost" : "makespan");
    for (int k = 0; k < N_KINDS; k++) {
        free(wall[k]);
        trainer_free(t[k]);
        sched_free(s[k]);
    }
    data_free(data);
    return 0;
}
