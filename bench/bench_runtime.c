/*
 * bench_runtime.c: does the executor deliver the speed-up the simulator
 * predicts?  For two devices (two threads on this machine) it compares the
 * iteration time of ZB-H2 against 1F1B, measured by really training, with
 * the same ratio predicted by the simulator from profiled costs:
 *
 *   1. profile the model on this machine (runtime/profiler.h);
 *   2. generate 1F1B and ZB-H2 (p = 2, m micro-batches) with the profiled
 *      stage-average costs, then set each stage's exact profiled cost
 *      (profiler_apply: its layers, plus embedding or head);
 *   3. simulate both: predicted makespan;
 *   4. train each for `steps` steps after one warm-up step, alternating the
 *      two schedules step by step so that background load hits both alike;
 *      record the median wall time of trainer_step and the median measured
 *      makespan of the ops (from the recorded op times; it excludes the
 *      optimizer step and thread start-up, like the simulated makespan);
 *   5. also simulate each measured step with its own mean op times as
 *      costs: on a loaded machine the profile taken before training can
 *      differ from the op times during it, and this second prediction
 *      separates "the costs changed" from "the schedule ran differently".
 *
 * Usage: bench_runtime [--model NAME] [--m M] [--batch B] [--steps N]
 *                      [--data PATH]
 * Defaults: tiny, m = 8, the model's batch, 10 steps, the tinyshakespeare
 * copy at ../shared/data/ (run from the repository root).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/data.h"
#include "runtime/profiler.h"
#include "runtime/trainer.h"
#include "schedules/gen.h"
#include "src/model.h"
#include "src/sim.h"
#include "src/validate.h"

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

/* Makespan of the last step's recorded op times, in ms; *resim gets the
 * simulated makespan of the same schedule with this step's own mean op
 * times as costs (what the simulator predicts once it knows the real op
 * costs of the moment, i.e. the scheduling effect alone). */
static double measured_makespan(const trainer *t, double *resim)
{
    sched_t *tr = NULL;
    zb_err err;
    if (trainer_trace(t, &tr, &err) != 0)
        return -1;
    sim_result r;
    memset(&r, 0, sizeof r);
    *resim = sim_run(tr, &r, &err) == 0 ? r.makespan : -1;
    sim_result_free(&r);
    double lo = 1e300, hi = 0;
    for (int d = 0; d < tr->n_devices; d++)
        if (tr->dev[d].n_ops > 0) {
            if (tr->dev[d].start[0] < lo)
                lo = tr->dev[d].start[0];
            if (tr->dev[d].end[tr->dev[d].n_ops - 1] > hi)
                hi = tr->dev[d].end[tr->dev[d].n_ops - 1];
        }
    sched_free(tr);
    return hi - lo;
}

int main(int argc, char **argv)
{
    const char *model_name = "tiny", *data_path = "../shared/data/tinyshakespeare.txt";
    int m = 8, batch = 0, steps = 10, c;
    static const struct option opts[] = {
        { "model", required_argument, NULL, 'M' }, { "m", required_argument, NULL, 'm' },
        { "batch", required_argument, NULL, 'b' }, { "steps", required_argument, NULL, 'n' },
        { "data", required_argument, NULL, 'd' },  { NULL, 0, NULL, 0 },
    };
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'M': model_name = optarg; break;
        case 'm': m = atoi(optarg); break;
        case 'b': batch = atoi(optarg); break;
        case 'n': steps = atoi(optarg); break;
        case 'd': data_path = optarg; break;
        default: fprintf(stderr, "usage: bench_runtime [--model NAME] [--m M] [--batch B] [--steps N] [--data PATH]\n"); return 2;
        }
    }
    if (m < 1 || steps < 1) {
        fprintf(stderr, "bench_runtime: --m and --steps must be positive\n");
        return 2;
    }
    zb_err err = { { 0 } };
    zb_model model;
    zb_data *data = NULL;
    if (model_load(model_name, &model, &err) != 0 || data_load_file(data_path, model.seq_len, &data, &err) != 0) {
        fprintf(stderr, "bench_runtime: %s\n", err.msg);
        return 1;
    }
    model.vocab = data->vocab;
    if (batch > 0)
        model.micro_batch = batch;

    zb_profile prof;
    if (profiler_measure(&model, model.micro_batch, 7, &prof, &err) != 0) {
        fprintf(stderr, "bench_runtime: %s\n", err.msg);
        return 1;
    }
    int p = 2;
    double layers_per_stage = (double)model.n_layers / p;
    gen_params gp;
    gen_params_default(&gp);
    gp.stages = p;
    gp.microbatches = m;
    gp.t_f = layers_per_stage * prof.layer.t_f * 1e3;
    gp.t_b = layers_per_stage * prof.layer.t_b * 1e3;
    gp.t_w = layers_per_stage * prof.layer.t_w * 1e3;
    gp.t_comm = prof.t_comm * 1e3;
    printf("model %s (%d layers, d=%d), micro-batch %d x %d, p=%d, m=%d, %d steps\n", model.name,
           model.n_layers, model.d_model, model.micro_batch, model.seq_len, p, m, steps);
    printf("profile per layer (ms): F %.3f  B %.3f  W %.3f; head F %.3f B %.3f W %.3f; transfer %.4f\n",
           prof.layer.t_f * 1e3, prof.layer.t_b * 1e3, prof.layer.t_w * 1e3, prof.head.t_f * 1e3,
           prof.head.t_b * 1e3, prof.head.t_w * 1e3, prof.t_comm * 1e3);

    const char *kinds[2] = { "1f1b", "zb-h2" };
    sched_t *s[2] = { NULL, NULL };
    trainer *t[2] = { NULL, NULL };
    double predicted[2];
    trainer_opts o;
    trainer_opts_default(&o);
    o.record_times = 1;
    o.adamw.warmup_steps = 0;
    for (int k = 0; k < 2; k++) {
        sim_result r;
        memset(&r, 0, sizeof r);
        if (gen_lookup(kinds[k])(&gp, &s[k], &err) != 0 || profiler_apply(&prof, &model, s[k], &err) != 0
            || sched_validate(s[k], &err) != 0 || sim_run(s[k], &r, &err) != 0
            || trainer_create(s[k], &model, data, &o, &t[k], &err) != 0) {
            fprintf(stderr, "bench_runtime: %s: %s\n", kinds[k], err.msg);
            return 1;
        }
        predicted[k] = r.makespan;
        sim_result_free(&r);
    }
    double *wall[2], *span[2], *resim[2];
    for (int k = 0; k < 2; k++) {
        wall[k] = calloc((size_t)steps, sizeof(double));
        span[k] = calloc((size_t)steps, sizeof(double));
        resim[k] = calloc((size_t)steps, sizeof(double));
    }
    for (int i = -1; i < steps; i++) /* i = -1: warm-up */
        for (int k = 0; k < 2; k++) {
            double loss;
            if (trainer_step(t[k], &loss, &err) != 0) {
                fprintf(stderr, "bench_runtime: %s: %s\n", kinds[k], err.msg);
                return 1;
            }
            if (i >= 0) {
                wall[k][i] = trainer_get_stats(t[k])->last_step_s * 1e3;
                span[k][i] = measured_makespan(t[k], &resim[k][i]);
            }
        }
    double mw[2], ms[2], rs[2];
    printf("%-6s  %16s  %16s  %16s  %16s\n", "", "predicted(prof)", "predicted(run)", "measured ops",
           "measured step");
    for (int k = 0; k < 2; k++) {
        mw[k] = median(wall[k], steps);
        ms[k] = median(span[k], steps);
        rs[k] = median(resim[k], steps);
        printf("%-6s  %13.2f ms  %13.2f ms  %13.2f ms  %13.2f ms\n", kinds[k], predicted[k], rs[k], ms[k],
               mw[k]);
    }
    double pr = predicted[1] / predicted[0], rr = rs[1] / rs[0], mr = ms[1] / ms[0], wr = mw[1] / mw[0];
    printf("ZB-H2 / 1F1B: predicted from profile %.3f, predicted from the run's op means %.3f, "
           "measured ops %.3f, measured whole step %.3f\n", pr, rr, mr, wr);
    printf("measured ops ratio vs profile prediction: %+.1f%%; vs run-cost prediction: %+.1f%%\n",
           (mr / pr - 1) * 100, (mr / rr - 1) * 100);
    for (int k = 0; k < 2; k++) {
        free(wall[k]);
        free(span[k]);
        free(resim[k]);
        trainer_free(t[k]);
        sched_free(s[k]);
    }
    data_free(data);
    return 0;
}
